"""The CLI's two rich consoles: results on stdout, progress and errors on stderr (shared by every command module)."""

from rich.console import Console

err_console = Console(stderr=True)
out_console = Console()
