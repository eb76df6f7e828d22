"""The CLI's two rich consoles: results on stdout, progress and errors on stderr (shared by every command module).

Both print text as it is: no rich markup, no emoji codes, no highlighting. What bertfeat prints holds paths, column
names, model ids and texts the user chose, where ``[red]``, ``[/b]`` or ``:smile:`` are ordinary characters (a
string given to ``print``, a table's title, caption or cell alike), and a control character is shown escaped
(``_Console``). Styling, where wanted, is a ``rich.text.Text``.

What goes to stderr (progress, notes, warnings, the Error line) is a diagnostic: a stderr that cannot be written (closed,
``2>&-``; full, ``2>/dev/full``; a pipe whose reader left, ``2>&1 | head``) loses those lines, never the command's work.
"""

import sys

from rich.console import Console

from .errors import visible


class _Stderr:
    """sys.stderr as the diagnostics console writes it: looked up at each write (pytest's capture and rich's live
    display replace sys.stderr), a write or flush that fails dropped. A progress line that could not be shown once
    failed the run it reported on (extract stopped with "OUTPUT.partial: no space left on the device" and kept a
    partial run; pca fit wrote its files, then exited 1), and rich's broken-pipe exit did the same."""

    @staticmethod
    def _stream():
        s = sys.stderr
        return getattr(s, "rich_proxied_file", s)  # rich's live display wraps stderr: write beneath it, as rich does

    def write(self, text: str) -> int:
        try:
            s = self._stream()
            if s is not None:
                self._write(s, text)
        except (OSError, ValueError):  # ValueError: a closed file
            pass
        return len(text)

    @staticmethod
    def _write(s, text: str) -> None:
        try:
            s.write(text)
        except UnicodeEncodeError:  # a character its encoding lacks: escaped (as Python's own stderr does), not lost
            encoding = getattr(s, "encoding", None) or "utf-8"
            s.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        flush = getattr(self._stream(), "flush", None)  # a stand-in stream with write alone needs none
        try:
            if flush is not None:
                flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        isatty = getattr(self._stream(), "isatty", None)  # none: no terminal, as rich takes it
        try:
            return bool(isatty is not None and isatty())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        s = self._stream()
        if s is None:
            raise OSError("standard error is closed")
        return s.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream(), "encoding", None) or "utf-8"


class _Console(Console):
    """rich's Console, every string it renders (a printed ``str``, a table's cell, title or caption) with its control
    characters escaped (``errors.visible``): a path or name holding a newline, CR or ESC (a file named $'a\\nb.csv')
    stays on its line, visibly, and never moves the cursor or colours the terminal, in the summary, a progress note,
    a warning or a ``wrote ...`` line as in an error. Lines meant as lines are printed as separate strings
    (``print(*lines, sep="\\n")``); a ``rich.text.Text`` is shown as made (make it of ``visible(...)``)."""

    def render_str(self, text: str, **kwargs):
        return super().render_str(visible(text), **kwargs)


err_console = _Console(file=_Stderr(), markup=False, emoji=False, highlight=False)
out_console = _Console(markup=False, emoji=False, highlight=False)
