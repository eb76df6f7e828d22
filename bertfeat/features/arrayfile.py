"""The check of an array file before NumPy or pyarrow reads it (``check_array_file``): an empty, truncated or
foreign ``.npy`` / ``.npz`` / ``.parquet`` is named as such (never numpy's advice to load it with pickle), and a
directory or a FIFO is refused before anything opens it (opening a FIFO with no writer blocks). Feature files and
PCA model files (``.npz``) pass it before ``bertfeat pca`` or ``extract --pca-model`` read them. ``npy_header``
reads a .npy header alone (a feature file's here, a PCA model's members in pca/file.py).
"""

from __future__ import annotations

import math
import os
import stat
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..checks import is_parquet_name
from ..errors import BertfeatError, one_line, os_error, special_file_kind

if TYPE_CHECKING:
    import numpy as np


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
        problem = _npy_problem(p, size)
        if problem:
            raise BertfeatError(f"{p}: not a readable .npy file: {problem[0]}", problem[1])
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


_NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))  # numpy's .npy format versions (3.0: a UTF-8 header, read as 2.0's)


def npy_header(fh) -> tuple[tuple[int, ...], np.dtype, int]:
    """A .npy stream's declared (shape, dtype, offset of its data), from its header alone (NumPy allocates or maps
    what a header declares before it reads: the caller checks it against the bytes there are). Raises ValueError
    (and NumPy's parser SyntaxError, ...) on a header it cannot read."""
    from numpy.lib import format as npf

    version = npf.read_magic(fh)
    if version not in _NPY_VERSIONS:
        raise ValueError(f".npy format version {version[0]}.{version[1]}")
    read = npf.read_array_header_1_0 if version == (1, 0) else npf.read_array_header_2_0
    shape, _, dtype = read(fh)
    return shape, dtype, fh.tell()


_COMPLETE_FIX = "pass a complete file (rerun the command that wrote it)"


def _npy_problem(p: Path, size: int) -> tuple[str, str] | None:
    """What keeps the .npy ``p`` (``size`` bytes) from being read, from its header alone, or None: a header NumPy
    cannot parse, a shape no array has, or more bytes declared than the file holds after the header (cut short, or
    its shape edited), or Python objects (a pickle, never loaded). NumPy would map it and fail with "mmap length is
    greater than file size", an OverflowError or "Array can't be memory-mapped". -> (what, fix)."""
    try:
        with open(p, "rb") as f:
            shape, dtype, start = npy_header(f)
    except OSError as e:
        raise os_error(e, p) from None
    except Exception as e:  # noqa: BLE001 - numpy's parser of the header's text raises ValueError, SyntaxError ...
        return f"its header cannot be read ({one_line(e)})", _COMPLETE_FIX
    if dtype.hasobject:
        return ("it holds Python objects (a pickled object array), which bertfeat never loads",
                "save the features as a float array, e.g. np.save(path, X.astype(np.float32))")
    if any(n < 0 for n in shape):
        return f"its header declares shape {shape}, which no array has", _COMPLETE_FIX
    declared, held = math.prod(shape) * dtype.itemsize, size - start
    if declared > held:
        return (f"its header declares shape {shape} of {dtype} ({declared:,} bytes), but the file holds {held:,} bytes "
                "after it: the file is cut short"), _COMPLETE_FIX
    return None
