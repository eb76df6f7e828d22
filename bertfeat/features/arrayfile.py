"""The check of an array file before NumPy or pyarrow reads it (``check_array_file``): an empty, truncated or
foreign ``.npy`` / ``.npz`` / ``.parquet`` is named as such (never numpy's advice to load it with pickle), and a
directory or a FIFO is refused before anything opens it (opening a FIFO with no writer blocks). Feature files and
PCA model files (``.npz``) pass it before ``bertfeat pca`` or ``extract --pca-model`` read them.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

from ..checks import is_parquet_name
from ..errors import BertfeatError, one_line, os_error, special_file_kind


def not_a_regular_file(path: Path, mode: int, what: str = "file") -> BertfeatError:
    """An input that exists but is no regular file: a directory, a named pipe (FIFO), a socket or a device."""
    if stat.S_ISDIR(mode):
        return BertfeatError(f"{path} is a directory, not a {what}", f"pass the path of a {what}, not of a directory")
    return BertfeatError(f"{path} is {special_file_kind(mode)}, not a {what}",
                         "write the data to a regular file first and pass that")


def check_array_file(path: str | os.PathLike, what: str = "file") -> None:
    """An empty, truncated or non-NumPy .npy/.npz is named as such before numpy reads it; so is a path that
    exists but is no regular file (a directory, a FIFO: refused before anything opens it, as opening a FIFO
    with no writer blocks)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return  # the reader says "not found" with its own fix
    except OSError as e:
        raise os_error(e, p) from None
    if stat.S_ISDIR(st.st_mode) and what == "feature file" and next(p.glob("part-*.parquet"), None) is not None:
        return  # extract --engine dask's output: its part files are read in turn (features.open_features)
    if not stat.S_ISREG(st.st_mode):
        raise not_a_regular_file(p, st.st_mode, what)
    try:
        size = st.st_size
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise os_error(e) from None
    if size == 0:
        raise BertfeatError(f"{p}: the {what} is empty (0 bytes)", "pass a complete file (rerun the command that wrote it)")
    if p.suffix.lower() == ".npz":
        if not head.startswith(b"PK"):
            raise BertfeatError(f"{p}: not a .npz archive", "pass a .npz written by bertfeat")
        try:
            with zipfile.ZipFile(p) as z:
                bad = z.testzip()
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
            raise BertfeatError(f"{p}: the .npz archive is truncated or corrupt ({one_line(e)})",
                                "pass a complete file (rerun the command that wrote it)") from None
        if bad is not None:
            raise BertfeatError(f"{p}: the .npz archive is corrupt (member {bad} fails its checksum)",
                                "pass a complete file (rerun the command that wrote it)")
    elif p.suffix.lower() == ".npy":
        if not head.startswith(b"\x93NUMPY"):
            raise BertfeatError(f"{p}: not a .npy array file", "pass a .npy written by bertfeat")
    elif is_parquet_name(p.name):
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(p).names
        except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError for a foreign or cut file
            raise BertfeatError(f"{p}: not a readable Parquet file ({one_line(e)})",
                                "pass a complete file (rerun the command that wrote it)") from None
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise BertfeatError(f"{p}: the column name {dup[0]!r} appears {names.count(dup[0])} times",
                                "rename the columns so that every name is unique")
