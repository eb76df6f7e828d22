"""``bertfeat cache info|clear``: thin Typer wrappers over cache.store.cache_info / cache.store.clear_cache."""

from __future__ import annotations

import json
import time

import typer

from ..console import out_console

cache_app = typer.Typer(help="Look into or clear a vector cache (extract --cache).", no_args_is_help=True)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def _when(t) -> str:
    """A fingerprint row's time; one a damaged row holds (text, a float past any date) said so, not a traceback."""
    try:
        if t is not None:  # (gmtime(None) is now)
            return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
    except (TypeError, ValueError, OverflowError, OSError):
        pass
    return "unknown (this fingerprint's row in the cache is damaged)"


@cache_app.command("info", epilog="Examples:\n\n  bertfeat cache info ~/.cache/bertfeat\n\n  bertfeat cache info build/cache --json")
def info_command(directory: str = typer.Argument(..., help="The cache directory (extract --cache DIR)."),
                 json_out: bool = typer.Option(False, "--json", help="Machine-readable output, with every setting.")):
    """Entries, size on disk, and per fingerprint its entries, last use, model and settings."""
    from ..cache.store import cache_info, settings_line

    d = cache_info(directory)
    if json_out:
        typer.echo(json.dumps(d, indent=2, sort_keys=True))
        return
    lines = [f"cache         {d['cache']}", f"file          {d['file']}", f"size on disk  {_size(d['size_on_disk'])}",
             f"entries       {d['entries']:,}", f"fingerprints  {len(d['fingerprints'])}"]
    for f in d["fingerprints"]:
        lines.append("")
        lines.append(f"{f['fingerprint']}  {f['entries']:,} entries, {_size(f['bytes'])} of vectors, last used {_when(f['last_used'])}")
        lines.append(f"  model {f['model']} (dim {f['dim']}): {settings_line(f['settings'], f['fingerprint'])}")
    out_console.print(*lines, sep="\n", markup=False, highlight=False, soft_wrap=True)  # each line's names escaped


@cache_app.command("clear", epilog="Examples:\n\n  bertfeat cache clear build/cache\n\n"
                                   "  bertfeat cache clear build/cache --fingerprint 3f2a9c")
def clear_command(directory: str = typer.Argument(..., help="The cache directory (extract --cache DIR)."),
                  fingerprint: str = typer.Option(None, "--fingerprint", help="Delete only this fingerprint's entries (its id from `cache info`, or a unique prefix)."),
                  quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing.")):
    """Delete every entry of a cache, or one fingerprint's, in one transaction."""
    from ..console import err_console
    from ..cache.store import clear_cache

    d = clear_cache(directory, fingerprint)
    if quiet:
        return
    size = (f"{_size(d['size_before'])} -> {_size(d['size_after'])} on disk" if d["shrunk"] else
            f"{_size(d['size_after'])} on disk, not shrunk: {d['not_shrunk']}")
    err_console.print(f"deleted {d['deleted']:,} entries from {directory} ({size})", markup=False, highlight=False,
                      soft_wrap=True)
