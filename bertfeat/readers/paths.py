"""Where the input's files are: a local file, a glob, a directory of Parquet files or an fsspec URL, and their compression."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import InputError

_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def compression_of(path) -> str | None:
    """gzip/bz2/zstd from a .gz/.bz2/.zst suffix, else None."""
    return _COMPRESSION.get(Path(str(path)).suffix.lower())


def is_url(path: str) -> bool:
    """An fsspec URL (s3://, gs://, file:// ...), not a local path."""
    return "://" in path


def _path_key(p: str) -> list[str]:
    """Files sort by their path's parts (as pathlib orders them), the same on every engine."""
    return p.split("/")


def refuse_special_file(path: str, fmt: str | None) -> None:
    """A named pipe, device or socket given as the input: refused from its type (``os.stat``), never opened (opening a
    FIFO waits for a writer, a device may never end), pointing at standard input. Any other path passes."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return  # missing or unreadable: the caller's own checks say so
    kind = next((name for test, name in _SPECIAL if test(mode)), None)
    if kind is not None:
        raise InputError(f"{path}: is {kind}, not a file",
                         f"to stream from a pipe pass - and feed it on standard input, e.g. cat {path} | bertfeat extract - "
                         f"--input-format {fmt or 'csv'} -o out.parquet")


def resolve_files(path: str, fmt: str):
    """A file, a glob, or a directory of Parquet files -> (fsspec filesystem, the files sorted: one dataset).

    Local paths are checked here with their own messages and made absolute (a Dask worker may run elsewhere);
    a URL (s3://, gs://, ...) is listed by its filesystem. A named pipe, device or socket is refused before it is
    opened (``refuse_special_file``).
    """
    import fsspec

    if path == "-":
        return None, []
    if is_url(path):
        try:
            fs, _, paths = fsspec.core.get_fs_token_paths(path)
        except (ImportError, ValueError) as e:
            raise InputError(f"{path}: cannot open this URL ({e})", "install the fsspec filesystem for it (e.g. s3fs, gcsfs)") from None
        if len(paths) == 1 and fs.isdir(paths[0]):
            paths = [p for p in fs.find(paths[0]) if p.endswith((".parquet", ".pq"))
                     and not p.rsplit("/", 1)[-1].startswith((".", "_"))]
        paths = sorted((p for p in paths if fs.isfile(p)), key=_path_key)
        if not paths:
            raise InputError(f"{path}: no such file (or the pattern matches none)", "check the URL")
        return fs, paths
    import glob as globmod

    fs = fsspec.filesystem("file")
    if any(ch in path for ch in "*?["):
        files = sorted((Path(p) for p in globmod.glob(path, recursive=True) if Path(p).is_file()))
        if not files:
            raise InputError(f"{path}: the pattern matches no file", "check the glob pattern (quote it so the shell does not expand it)")
        return fs, [os.path.abspath(f) for f in files]
    p = Path(path)
    if p.is_dir() and fmt != "parquet":
        raise InputError(f"{path}: is a directory", f"pass a {fmt.upper()} file (a directory works for Parquet only)")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*.parquet") if f.is_file() and not f.name.startswith((".", "_")))
        if not files:
            raise InputError(f"{path}: the directory holds no .parquet file", "point at a Parquet file, a directory of them, or a glob")
        return fs, [os.path.abspath(f) for f in files]
    if not p.exists():
        raise InputError(f"{path}: no such file", "check the path")
    refuse_special_file(path, fmt)
    if not os.access(p, os.R_OK):
        raise InputError(f"{path}: the file is not readable", "check its permissions")
    return fs, [os.path.abspath(p)]
