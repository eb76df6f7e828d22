"""The .npy feature file: a plain float32 (n, d) array, its ids in a CSV side file.

``out.npy`` holds a C-order little-endian float32 (n, d) array (float16: '<f2') (NumPy reads it without
bertfeat); the ids and extras go to ``out.ids.csv`` (header = column names), the provenance to
``out.npy.json``. The array is streamed after a fixed 128-byte header that is rewritten with the
final row count at the end. A .npy without an ids file is read with row numbers as ids.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from ..atomic import AtomicFile, together, write_atomic
from ..errors import BertfeatError
from .arrayfile import check_array_file
from .base import (
    as_float32,
    FeatureBatch,
    FeatureFile,
    FeatureSource,
    WriteSpec,
    declared_extra_types,
    pick_id_column,
    provenance_path,
    rebatch,
    type_from_str,
)
from .delimited import check_csv_values, csv_column, csv_column_problem, csv_fields, csv_header, csv_unreadable, open_csv

#: Total size of the .npy header we reserve (magic + length + padded dict), rewritten at close.
NPY_HEADER_BYTES = 128


def ids_sidecar_path(path: str | os.PathLike) -> Path:
    """``out.npy`` -> ``out.ids.csv`` (ids and extras of a .npy feature file)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.ids.csv")


def make_npy_header(n: int, d: int, dtype: str = "float32") -> bytes:
    """A version-1.0 .npy header for a C-order little-endian (n, d) array of ``dtype`` ('<f4' float32, '<f2' float16),
    exactly 128 bytes."""
    descr = np.dtype(dtype).newbyteorder("<").str
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, n, d)
    body_len = NPY_HEADER_BYTES - 10
    if len(text) + 1 > body_len:
        raise BertfeatError(f"cannot write a .npy of shape ({n}, {d})", "use the parquet format")
    body = (text.ljust(body_len - 1) + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", body_len) + body


#: The fix of an ids file that does not give each row of its .npy an id.
IDS_FIX = ("put back the ids file written with {npy} (or re-extract the features), or delete it to read {npy} with row "
           "numbers as ids")


def _empty_ids_file(side: Path, path: Path, n: int) -> BertfeatError:
    """An ids file without even its header line (0 bytes, or a blank first line): Arrow's "Empty CSV file", and a fix
    that asked for another feature CSV, where the user passed a .npy."""
    what = "is empty (0 bytes)" if side.stat().st_size == 0 else "has no header line (its first line is blank)"
    return BertfeatError(f"{side}, the ids file of {path}, {what}: it should hold a header line naming its columns, "
                         f"then one id per row of {path.name} ({n} rows)", IDS_FIX.format(npy=path.name))


def _more_ids(side: Path, path: Path, n: int) -> BertfeatError:
    return BertfeatError(f"{side} holds more id rows than the {n} rows of {path} (its ids file needs one line per row)",
                         IDS_FIX.format(npy=path.name))


class NpyFile(FeatureFile):
    """A .npy feature file with its ids file (``out.ids.csv``) and provenance (``out.npy.json``)."""

    name = "npy"
    suffix = ".npy"

    @classmethod
    def numbered_feature_columns(cls, wide: bool) -> bool:
        return False  # (the features are the .npy's; its ids file holds the id and extras alone)

    @classmethod
    def layout_wide(cls, wide: bool) -> bool:
        return False

    @staticmethod
    def column_problem(t: pa.DataType) -> str | None:
        """The ids and extras are a CSV (the ids file): its words, saying so."""
        why = csv_column_problem(t)
        return None if why is None else f"its ids and other columns go to its ids file, a CSV: {why}"

    value_problem = staticmethod(csv_unreadable)

    # -- writing -------------------------------------------------------------------------------

    def __init__(self, spec: WriteSpec):
        self.spec = spec
        self._main = AtomicFile(spec.path)
        self._ids = AtomicFile(ids_sidecar_path(spec.path))
        self._npy = open(self._main.tmp, "wb")
        try:  # any exception, Ctrl-C included (a nested column type CSV cannot hold): no temporary file left behind
            self._npy.write(make_npy_header(0, spec.dim, spec.dtype))
            self._schema = pa.schema(csv_fields([spec.id_field, *spec.extra_fields]))
            self._csv = pcsv.CSVWriter(str(self._ids.tmp), self._schema)
        except BaseException:
            self._npy.close()
            self._main.discard()
            self._ids.discard()
            raise
        self._rows = 0

    def append(self, columns: dict[str, pa.Array], X: np.ndarray) -> None:
        check_csv_values(ids_sidecar_path(self.spec.path), columns, self._rows)
        if X.size:  # memoryview cannot cast a view with a zero in its shape
            self._npy.write(memoryview(X).cast("B"))
        self._csv.write_batch(pa.record_batch([csv_column(c) for c in columns.values()], schema=self._schema))
        self._rows += X.shape[0]

    def finish(self, metadata_text: str) -> None:
        self._csv.close()
        self._npy.seek(0)
        self._npy.write(make_npy_header(self._rows, self.spec.dim, self.spec.dtype))
        self._npy.close()
        with together():  # the ids, the provenance and the matrix appear together (an interrupted run: none of them)
            self._ids.commit()
            write_atomic(provenance_path(self.spec.path), metadata_text + "\n")
            self._main.commit()

    def abort(self) -> None:
        for obj in (self._csv, self._npy):
            with contextlib.suppress(Exception):
                obj.close()
        self._main.discard()
        self._ids.discard()

    # -- reading -------------------------------------------------------------------------------

    @classmethod
    def open_source(cls, path: Path, meta: dict) -> FeatureSource:
        layout = meta.get("layout") or {}
        declared = declared_extra_types(layout)
        check_array_file(path, "feature file")  # empty or truncated: said as such, not numpy's EOFError
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as e:
            raise BertfeatError(f"{path} is not a readable .npy file ({e})", "pass a feature file") from None
        if arr.ndim != 2 or arr.dtype.kind != "f" or arr.shape[1] == 0:  # (n, 0): rows without features
            a = "an" if arr.dtype.name[:1] in "aeio" else "a"  # an int64, a uint8, a float64
            fix = (f"save it as floats, np.save({str(path)!r}, X.astype(np.float32))" if arr.ndim == 2 and arr.shape[1]
                   and arr.dtype.kind in "iub" else "pass a feature matrix")  # (integers or booleans: one cast away)
            raise BertfeatError(f"{path} holds {a} {arr.dtype} array of shape {arr.shape}, not (rows, d) floats", fix)
        side = ids_sidecar_path(path)
        id_name, id_type, extras = None, pa.int64(), {}
        if side.is_file():
            header = csv_header(side)
            if not header:
                raise _empty_ids_file(side, path, arr.shape[0])
            id_name = pick_id_column(layout, header) or header[0]
            id_type = type_from_str(layout.get("id_type")) if layout.get("id_column") == id_name else None
            extras = {c: declared.get(c) for c in header if c != id_name}
        return FeatureSource(path, cls.name, meta, arr.shape[1], id_name, id_type, False, extras, arr.shape[0],
                             file_format=cls, dtype=arr.dtype.name)

    @classmethod
    def read_chunks(cls, src: FeatureSource, batch_rows: int) -> Iterator[FeatureBatch]:
        arr = np.load(src.path, mmap_mode="r")
        n = arr.shape[0]
        side = ids_sidecar_path(src.path)
        tables: Iterator[pa.Table | None]
        if side.is_file():
            tables = rebatch(open_csv(side, src.csv_types()), batch_rows)
        else:
            tables = iter(lambda: None, 0)  # endless Nones: ids are row numbers
        for start in range(0, n, batch_rows):
            X = as_float32(np.array(arr[start : start + batch_rows]), src.path, start, keep64=src.float64)
            table = next(tables, None)
            if side.is_file() and (table is None or table.num_rows < X.shape[0]):  # the ids file ended
                held = start + (0 if table is None else table.num_rows)
                raise BertfeatError(f"{side} holds the ids of {held} rows, but {src.path} has {n} rows (its ids file "
                                    "needs one line per row)", IDS_FIX.format(npy=src.path.name))
            if side.is_file() and table.num_rows > X.shape[0]:  # the array ended
                raise _more_ids(side, src.path, n)
            yield src.make_chunk(table if table is not None else pa.table({}), X, start)
        if side.is_file() and next(tables, None) is not None:
            raise _more_ids(side, src.path, n)
