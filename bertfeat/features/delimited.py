"""The CSV feature file, and reading bertfeat's CSV files (the .npy's ids file is one too).

Columns: the id column, the extras, then ``f0 .. f{d-1}`` (float32 written by Arrow's CSV
writer; float16 as its shortest text, ``float16_text``); provenance in ``<path>.json`` (e.g.
``out.csv.json``). A CSV without provenance is read with its first non-feature column as the id, and its id and
other columns as text, as written (``FeatureSource.csv_types``).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from ..atomic import AtomicFile, together, write_atomic
from ..errors import BertfeatError, one_line
from ..readers.kept import python_values
from ..readers.rejects import bytes_text
from .base import (
    WIDE_COLUMN_RE,
    FeatureBatch,
    FeatureFile,
    FeatureSource,
    WriteSpec,
    declared_extra_types,
    pick_id_column,
    provenance_path,
    rebatch,
    type_from_str,
    value_why,
    wide_arrays,
    wide_dim,
)


def open_csv(path: Path, types: Mapping[str, pa.DataType]) -> Iterator[pa.RecordBatch]:
    """Stream a CSV as record batches with the given column types, as csv_column wrote them: an empty cell is a null
    (not "nan", a float's NaN; a string's "" is quoted), binary columns from their escaped text, a type pyarrow's CSV
    reader does not convert (decimal256, halffloat ...) cast from its text, an extension type from its storage's."""
    plans = {k: _as_read(t) for k, t in types.items()}
    opts = pcsv.ConvertOptions(column_types={k: read for k, (read, _) in plans.items()}, null_values=[""],
                               strings_can_be_null=True, quoted_strings_can_be_null=False)
    try:
        reader = pcsv.open_csv(path, convert_options=opts, read_options=pcsv.ReadOptions(block_size=8 << 20))
    except (pa.ArrowInvalid, OSError) as e:
        raise _bad_cell(path, e) or BertfeatError(f"cannot read {path} as CSV ({e})",
                                                  "pass a feature CSV written by bertfeat") from None
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as e:
            raise _bad_cell(path, e) or BertfeatError(f"bad value in {path} ({e})", "re-extract the features") from None
        yield _typed(batch, types, plans, path)


# (Arrow's serial reader, one CPU thread (OMP_NUM_THREADS=1, pa.set_cpu_count(1)), puts "Row #N: " in it)
_CONVERSION = re.compile(r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to (.+?): invalid value '(.*)'$",
                         re.S)


_RAGGED = re.compile(r"Expected (\d+) columns, got (\d+)")


def _bad_cell(path, e: Exception) -> BertfeatError | None:
    """The cell Arrow's CSV reader could not convert (it names the column's position and the text, not the row),
    found by reading the file again up to it: its row and column named (a row of another number of cells: its row);
    None when the error is another one."""
    if not isinstance(path, (str, Path)):
        return None
    if _RAGGED.search(str(e)):
        found = _first_row(path, lambda header, cells: len(cells) != len(header))
        if found is None:
            return None
        header, row, cells = found
        return BertfeatError(f"{path}: row {row} has {len(cells)} cells, its header {len(header)}",
                             "give the row a value for every column, or re-extract the features")
    m = _CONVERSION.search(str(e))
    if m is None:
        return None
    col, typ, text = int(m[1]), m[2], m[3]
    found = _first_row(path, lambda header, cells: col < len(cells) and cells[col] == text)
    if found is None or col >= len(found[0]):
        return None
    header, row, _ = found
    a = "an" if typ[:1] in "aeiou" else "a"  # an int64, a float
    what = "a number (a feature)" if WIDE_COLUMN_RE.match(header[col]) else f"{a} {typ} (the column's type in its provenance)"
    return BertfeatError(f"{path}: row {row}, column {header[col]!r} holds {text!r}, which does not read as {typ}",
                         f"write {what} there, or re-extract the features")


def _first_row(path, wanted) -> tuple[list[str], int, list[str]] | None:
    """(header, row, cells) of the first data row of a feature CSV for which ``wanted(header, cells)`` holds, rows
    counted as Arrow counts them (a blank line is no row); None when none does or the file cannot be read again."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = csv.reader(f)
            header = next(rows, [])
            records = (cells for cells in rows if cells)  # Arrow skips a blank line: it is no row of the file
            found = next(((r, cells) for r, cells in enumerate(records) if wanted(header, cells)), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None if found is None else (header, *found)


def _check_range(path: Path, table: pa.Table, dim: int, start: int) -> None:
    """Refuse the first feature cell (rows ``start``..) written as a finite number beyond float32's range (1e39), by
    its row, column and text: read as float32 it is inf, which the PCA refused as an "inf" the file does not hold. A
    cell written as inf is one (the PCA names it)."""
    first: tuple[int, int] | None = None
    for j in range(dim):
        v = table.column(f"f{j}").to_numpy()  # float32, or float64 (a float16 file's text)
        with np.errstate(over="ignore"):
            over = np.isinf(v.astype(np.float32, copy=False))
        if over.any() and (first is None or int(over.argmax()) < first[0]):
            first = (int(over.argmax()), j)
    if first is None:
        return
    row, column = start + first[0], f"f{first[1]}"
    text = _cell_text(path, row, column)
    if text is not None and _finite_number(text):
        raise BertfeatError(f"{path}: row {row}, column {column!r} holds {text!r}, beyond float32's range "
                            "(|x| < 3.4e38), in which bertfeat reads features",
                            "write a number within that range there (scale the features into it), or re-extract the "
                            "features")


def _cell_text(path, row: int, column: str) -> str | None:
    """The text of ``column`` in data row ``row`` (counted as Arrow counts: a blank line is no row) of a feature CSV;
    None when it cannot be read again."""
    counted = iter(range(row + 1))
    found = _first_row(path, lambda header, cells: next(counted, None) == row)
    if found is None or column not in found[0]:
        return None
    header, _, cells = found
    i = header.index(column)
    return cells[i] if i < len(cells) else None


def _finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _typed(batch: pa.RecordBatch, types: Mapping[str, pa.DataType], plans: dict, path) -> pa.RecordBatch:
    """A batch as read, each column that was read as another type made its own type (``_as_read``)."""
    for name, (_, make) in plans.items():
        i = batch.schema.get_field_index(name)
        if make is not None and i >= 0:
            try:
                values = make(batch.column(i))
            except (pa.ArrowInvalid, ValueError) as e:
                raise BertfeatError(f"bad value in {path} column {name!r} ({e})", "re-extract the features") from None
            batch = batch.set_column(i, pa.field(name, types[name]), values)
    return batch


def _as_read(t: pa.DataType) -> tuple[pa.DataType, Callable[[pa.Array], pa.Array] | None]:
    """(the type pyarrow's CSV reader reads a column of type ``t`` as, what makes ``t`` of that: None when it is ``t``)."""
    if isinstance(t, pa.BaseExtensionType):
        read, make = _as_read(t.storage_type)
        return read, lambda a: pa.ExtensionArray.from_storage(t, a if make is None else make(a))
    if _binary(t):
        return pa.string(), lambda a: pa.array([None if v is None else text_bytes(v) for v in a.to_pylist()], t)
    if _csv_converts(t):
        return t, None
    return pa.string(), lambda a: a.cast(t)


@functools.lru_cache(maxsize=None)
def _csv_converts(t: pa.DataType) -> bool:
    """pyarrow's CSV reader converts text to ``t`` itself (not decimal256, halffloat or string_view, in pyarrow 26)."""
    try:
        pcsv.read_csv(io.BytesIO(b"x,y\n,1\n"), convert_options=pcsv.ConvertOptions(column_types={"x": t}, null_values=[""]))
        return True
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False


_ESCAPE = re.compile(r"\\\\|\\x([0-9a-f]{2})")


def text_bytes(s: str) -> bytes:
    """bytes_text's text -> the bytes."""
    out, last = bytearray(), 0
    for m in _ESCAPE.finditer(s):
        out += s[last:m.start()].encode("utf-8")
        out += b"\\" if m[1] is None else bytes([int(m[1], 16)])
        last = m.end()
    return bytes(out + s[last:].encode("utf-8"))


def _binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or _view(t, "binary")


def _view(t: pa.DataType, kind: str) -> bool:
    """``t`` is string_view / binary_view (``kind``: string, binary; pyarrow 16 and later have them)."""
    test = getattr(pa.types, f"is_{kind}_view", None)
    return test is not None and test(t)


def _as_written(t: pa.DataType) -> pa.DataType:
    """The type a column of type ``t`` is handed to Arrow's CSV writer as (``csv_column``): an extension type as its
    storage's, binary as text, a string view as a string, a timestamp with a time zone in UTC."""
    if isinstance(t, pa.BaseExtensionType):
        return _as_written(t.storage_type)
    if _zoned(t):
        return pa.timestamp(t.unit, "UTC")
    if pa.types.is_float16(t):  # as the float64 of its shortest text (float16_text), which Arrow writes as that text
        return pa.float64()
    return pa.string() if _binary(t) or _view(t, "string") else t


def _zoned(t: pa.DataType) -> bool:
    """A timestamp with a time zone: Arrow writes its local time with the offset in whole minutes (+0009 for Paris's
    +00:09:21 before 1911), which reads back shifted; in UTC (``Z``) it reads back as written, in its zone."""
    return pa.types.is_timestamp(t) and t.tz is not None


def csv_fields(fields) -> list[pa.Field]:
    """The fields a CSV writer is given (``_as_written``)."""
    return [pa.field(f.name, _as_written(f.type), f.nullable) for f in fields]


def csv_column(values: pa.Array) -> pa.Array:
    """A column as a CSV holds it: an extension type's storage, binary values as UTF-8 text, bytes that are not UTF-8
    written as \\xNN escapes (Arrow's CSV writer refuses them, and a CSV is text), a string view as strings, float16 as
    its shortest text."""
    if isinstance(values.type, pa.BaseExtensionType):
        values = values.storage
    if _binary(values.type):
        return pa.array([None if v is None else bytes_text(v) for v in values.to_pylist()], pa.string())
    if _zoned(values.type):
        return values.cast(_as_written(values.type))
    if pa.types.is_float16(values.type):  # 0.1, not the double it widens to, 0.0999755859375 (as the features)
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        nulls = values.is_null().to_numpy(zero_copy_only=False)
        halves = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float16)
        return pa.array(float16_text(halves), pa.float64(), mask=nulls)
    return values.cast(pa.string()) if _view(values.type, "string") else values


def csv_unreadable(values: pa.Array) -> tuple[int, str, str | None] | None:
    """The first value of an id or extra column that a CSV feature file would not give back as itself: (its position,
    the text Arrow writes for it, what ``open_csv`` reads back: None when it refuses the text), or None. Arrow writes
    a date, time or timestamp past its reader's range (a year before 0 or after 9999, a time of day past 24 h) as text
    its CSV reader refuses (``10000-01-01``, ``<value out of range: N>``); only such columns are written and read
    back here."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if not (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)):
        return None
    sink = io.BytesIO()
    schema = pa.schema(csv_fields([pa.field("x", t), pa.field("n", pa.int64())]))  # (n: a null is not a blank line)
    pcsv.write_csv(pa.table([csv_column(values), pa.array(range(len(values)), pa.int64())], schema=schema), sink)
    data = sink.getvalue()
    try:
        back = pa.Table.from_batches(list(open_csv(io.BytesIO(data), {"x": t}))).column("x").combine_chunks()
    except BertfeatError:  # a text the reader refuses: which one
        k = 0 if len(values) == 1 else next(k for k in range(len(values)) if csv_unreadable(values.slice(k, 1)))
        return k, _written(data, k), None
    ints = pa.int32() if t.bit_width == 32 else pa.int64()
    same = np.asarray(back.view(ints).fill_null(0)) == np.asarray(values.view(ints).fill_null(0))
    same &= np.asarray(back.is_null()) == np.asarray(values.is_null())
    if same.all():
        return None
    k = int(np.argmin(same))
    return k, _written(data, k), str(python_values(back.slice(k, 1))[0])


def _written(data: bytes, k: int) -> str:
    """The k-th value's text in ``csv_unreadable``'s CSV."""
    texts = pcsv.read_csv(io.BytesIO(data), convert_options=pcsv.ConvertOptions(column_types={"x": pa.string()}))
    return texts.column("x")[k].as_py()


def check_csv_values(path: Path, columns: Mapping[str, pa.Array], first_row: int) -> None:
    """Refuse a chunk's id or extra value (``columns``: the id column first) that the CSV ``path`` would not give back
    (``csv_unreadable``), naming its row of the file, its id and column: nothing of it is written."""
    id_name = next(iter(columns), None)
    for name, values in columns.items():
        problem = csv_unreadable(values)
        if problem is not None:
            k, written, back = problem
            value, ident = (python_values(c.slice(k, 1))[0] for c in (values, columns[id_name]))
            ident = repr(ident) if isinstance(ident, str) else ident
            raise BertfeatError(f"{path}: row {first_row + k} (id {ident}): column {name!r} holds {value}, which a CSV "
                                f"file cannot give back ({value_why(written, back)})",
                                "write a Parquet file (pass -o with a .parquet name)")


def csv_column_problem(t: pa.DataType) -> str | None:
    """Why a column of type ``t`` cannot be written to a CSV and read back as ``t`` by ``open_csv`` (None: it can):
    a null written and read back, in memory."""
    if pa.types.is_nested(t):
        return "a CSV cell holds one value, not a list, struct or map"
    sink = io.BytesIO()
    try:
        schema = pa.schema(csv_fields([pa.field("x", t), pa.field("f0", pa.float64())]))  # (a lone null: a blank line)
        pcsv.write_csv(pa.table([csv_column(pa.array([None], t)), pa.array([0.5])], schema=schema), sink)
    except (pa.ArrowException, ValueError, TypeError) as e:
        return f"Arrow's CSV writer has no text for it: {one_line(e, 100)}"
    read = type_from_str(str(t))
    try:
        back = None if read is None else pa.Table.from_batches(list(open_csv(io.BytesIO(sink.getvalue()), {"x": read})))
    except (pa.ArrowException, BertfeatError, ValueError, TypeError) as e:
        return f"bertfeat's CSV reader cannot read it back: {one_line(e, 100)}"
    if back is None or back.column("x").type != t:
        return f"bertfeat's CSV reader would read it back as {'another type' if back is None else back.column('x').type}"
    return None


def csv_header(path: Path) -> list[str]:
    """The column names in the first line of a CSV ([] when it is empty); a file that is no UTF-8 text (a Parquet or
    .npy file named .csv) is refused as such, and so is a name given twice (Arrow's table cannot pick a column by it; a feature column's:
    wide_dim says)."""
    try:
        # utf-8-sig: a leading BOM (Excel's "CSV UTF-8") is no part of the first name; Arrow's reader drops it too
        with open(path, newline="", encoding="utf-8-sig") as f:
            names = next(csv.reader(f), [])
    except UnicodeDecodeError as e:
        raise BertfeatError(f"{path} is not a CSV text file (byte {e.start} is not UTF-8: a binary "
                            "file, a Parquet or .npy file under a .csv name?)",
                            "pass the feature file under its own extension (.parquet, .npy, .csv)") from None
    counts = Counter(names)
    dup = sorted(n for n, k in counts.items() if k > 1 and not WIDE_COLUMN_RE.match(n))  # (features: wide_dim's)
    if dup:
        raise BertfeatError(f"{path}: the column name {dup[0]!r} appears {counts[dup[0]]} times",
                            "rename the columns so that every name is unique")
    return names


#: The Arrow type a feature column of a CSV is written and read as, by the file's dtype (float16: its text as float64,
#: rounded to float16 when read: FeatureSource.wide_matrix)
_TEXT_TYPES = {"float32": pa.float32(), "float16": pa.float64()}


_F16_TEXT: np.ndarray | None = None  # float64 of the shortest text of each of the 65,536 float16 bit patterns


def float16_text(X: np.ndarray) -> np.ndarray:
    """float16 features -> the float64 values of their shortest text (NumPy's repr: the fewest digits that read back
    to the same float16), which Arrow's CSV writer writes as that text (0.1, not float32's 0.0999755859375). A table
    of all 65,536 bit patterns, made once: formatting each value (astype(str)) took 7x the time and 64x the memory."""
    global _F16_TEXT
    if _F16_TEXT is None:
        _F16_TEXT = np.arange(65536, dtype=np.uint16).view(np.float16).astype(str).astype(np.float64)
    return _F16_TEXT[np.ascontiguousarray(X, dtype=np.float16).view(np.uint16)]


class CsvFile(FeatureFile):
    """A CSV feature file: one row per input row, the features as columns f0..f{d-1} after the id and extras."""

    name = "csv"
    suffix = ".csv"

    # -- writing -------------------------------------------------------------------------------

    def __init__(self, spec: WriteSpec):
        self.spec = spec
        self._main = AtomicFile(spec.path)
        # float16 values go to Arrow as the float64 of their shortest text (float16_text), which it writes as that text
        feature_fields = [pa.field(f"f{j}", _TEXT_TYPES[spec.dtype]) for j in range(spec.dim)]
        self._schema = pa.schema([*csv_fields([spec.id_field, *spec.extra_fields]), *feature_fields])
        try:
            self._csv = pcsv.CSVWriter(str(self._main.tmp), self._schema)
        except BaseException:  # e.g. a nested column type CSV cannot hold: no temporary file left behind
            self._main.discard()
            raise
        self._rows = 0

    def append(self, columns: dict[str, pa.Array], X: np.ndarray) -> None:
        check_csv_values(self.spec.path, columns, self._rows)
        X = float16_text(X) if X.dtype == np.float16 else X
        self._csv.write_batch(pa.record_batch([*map(csv_column, columns.values()), *wide_arrays(X)], schema=self._schema))
        self._rows += X.shape[0]

    def finish(self, metadata_text: str) -> None:
        self._csv.close()
        with together():  # the provenance and the file appear together
            write_atomic(provenance_path(self.spec.path), metadata_text + "\n")
            self._main.commit()

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._csv.close()
        self._main.discard()

    column_problem = staticmethod(csv_column_problem)
    value_problem = staticmethod(csv_unreadable)

    # -- reading -------------------------------------------------------------------------------

    @classmethod
    def open_source(cls, path: Path, meta: dict) -> FeatureSource:
        layout = meta.get("layout") or {}
        declared = declared_extra_types(layout)
        header = csv_header(path)
        dim = wide_dim(path, header)
        others = [c for c in header if not WIDE_COLUMN_RE.match(c)]
        id_name = pick_id_column(layout, others)
        id_type = type_from_str(layout.get("id_type")) if layout.get("id_column") == id_name and id_name else None
        extras = {c: declared.get(c) for c in others if c != id_name}
        rows = meta.get("layout", {}).get("rows")
        dtype = meta.get("dtype") if meta.get("dtype") in _TEXT_TYPES else "float32"
        return FeatureSource(path, cls.name, meta, dim, id_name, id_type, True, extras, rows, file_format=cls,
                             dtype=dtype)

    @classmethod
    def read_chunks(cls, src: FeatureSource, batch_rows: int) -> Iterator[FeatureBatch]:
        types = src.csv_types() | {f"f{j}": _TEXT_TYPES[src.dtype] for j in range(src.dim)}
        start = 0
        for table in rebatch(open_csv(src.path, types), batch_rows):
            _check_range(src.path, table, src.dim, start)
            yield src.make_chunk(table, src.wide_matrix(table, start), start)
            start += table.num_rows
