"""The CLI's two rich consoles: results on stdout, progress and errors on stderr (shared by every command module).

Both print text as it is: no rich markup, no emoji codes, no highlighting. What bertfeat prints holds paths, column
names, model ids and texts the user chose, where ``[red]``, ``[/b]`` or ``:smile:`` are ordinary characters (a
string given to ``print``, a table's title, caption or cell alike). Styling, where wanted, is a ``rich.text.Text``.
"""

from rich.console import Console

err_console = Console(stderr=True, markup=False, emoji=False, highlight=False)
out_console = Console(markup=False, emoji=False, highlight=False)
