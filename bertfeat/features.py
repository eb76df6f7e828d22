"""Feature files: the output of ``bertfeat extract`` and the input of ``bertfeat pca``.

Three formats, all float32 features of width d, one row per input row:

``parquet`` (default)
    Columns: the id column (the user's id column, or ``row`` = 0-based input row number,
    int64), ``embedding`` as ``fixed_size_list<float32>[d]`` (or, ``wide=True``, columns
    ``f0 .. f{d-1}`` float32), then optional extras (``n_tokens`` int32, ``truncated`` bool,
    ``n_chunks`` int32, ...). Provenance: schema metadata key ``bertfeat`` = JSON text.
``npy``
    A float32 (n, d) ``.npy``; ids and extras in the sidecar ``<stem>.ids.csv`` (header =
    column names); provenance in ``<path>.json`` (e.g. ``out.npy.json``).
``csv``
    Columns: id, extras, ``f0 .. f{d-1}``; provenance in ``<path>.json``.

The provenance dict is the caller's metadata plus ``rows`` (the row count, unless the
caller set it) and ``layout`` (format, id column and type, d, wide, extra columns, rows).

Writing streams with bounded memory and is atomic: everything goes to temporary files
``.<name>.tmp-<pid>`` in the destination directory, renamed into place with
``os.replace`` only by ``close()`` (sidecars first, the main file last). Reading streams
too (``iter_features``).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from .errors import BertfeatError
from .threads import read_ahead

__all__ = [
    "FORMATS",
    "FeatureWriter",
    "FeatureSource",
    "open_features",
    "iter_features",
    "read_features",
    "read_feature_metadata",
    "feature_format",
    "feature_fingerprint",
    "ids_sidecar_path",
    "provenance_path",
    "temp_path_for",
    "atomic_output",
]

FORMATS = ("parquet", "npy", "csv")
METADATA_KEY = "bertfeat"
EMBEDDING_COLUMN = "embedding"
#: Keys of a feature-source fingerprint, picked from the metadata when it has no ``fingerprint`` dict.
FINGERPRINT_KEYS = ("model_id", "weights_sha256", "pooling", "layers", "normalize", "dense", "prompt")
_WIDE_RE = re.compile(r"^f(\d+)$")
#: Total size of the .npy header we reserve (magic + length + padded dict), rewritten at close.
_NPY_HEADER_BYTES = 128
#: Target bytes of float data per Parquet row group.
_ROW_GROUP_BYTES = 64 << 20


# ----------------------------------------------------------------------------------------
# paths and atomic output
# ----------------------------------------------------------------------------------------


def temp_path_for(path: str | os.PathLike) -> Path:
    """The temporary name ``.<name>.tmp-<pid>`` beside ``path``."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def ids_sidecar_path(path: str | os.PathLike) -> Path:
    """``out.npy`` -> ``out.ids.csv`` (ids and extras of a .npy feature file)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.ids.csv")


def provenance_path(path: str | os.PathLike) -> Path:
    """``out.npy`` -> ``out.npy.json`` (provenance of a .npy or .csv feature file)."""
    path = Path(path)
    return path.with_name(f"{path.name}.json")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync it and ``os.replace`` it into place.

    On an exception the temp file is deleted and ``path`` is left as it was.
    """
    path = Path(path)
    tmp = temp_path_for(path)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def feature_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The feature-file format: ``fmt`` if given, else from the suffix (parquet when unknown)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise BertfeatError(f"unknown feature format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    return {".npy": "npy", ".csv": "csv"}.get(suffix, "parquet")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (Path, pa.DataType)):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _dumps(meta: Mapping) -> str:
    return json.dumps(meta, default=_json_default, sort_keys=True)


def _type_from_str(text: str | None) -> pa.DataType | None:
    """``"int64"`` -> pa.int64() (None when unknown: pyarrow will infer)."""
    if not text:
        return None
    try:
        return pa.type_for_alias(text)
    except (ValueError, KeyError):
        return None


def feature_fingerprint(meta: Mapping | None) -> dict | None:
    """The feature-source fingerprint of a metadata dict (its ``fingerprint`` entry, else the known keys)."""
    if not meta:
        return None
    fp = meta.get("fingerprint")
    if isinstance(fp, Mapping):
        return dict(fp)
    picked = {k: meta[k] for k in FINGERPRINT_KEYS if k in meta}
    return picked or None


# ----------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------


def _npy_header(n: int, d: int) -> bytes:
    """A version-1.0 .npy header for a C-order little-endian float32 (n, d) array, exactly 128 bytes."""
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (n, d)
    body_len = _NPY_HEADER_BYTES - 10
    if len(text) + 1 > body_len:
        raise BertfeatError(f"cannot write a .npy of shape ({n}, {d})", "use the parquet format")
    body = (text.ljust(body_len - 1) + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", body_len) + body


def _to_arrow(values: Any, typ: pa.DataType, m: int, name: str) -> pa.Array:
    """Convert a column chunk to an Arrow array of ``typ`` and length m."""
    try:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if isinstance(values, np.ndarray):
            values = values.copy()  # Arrow may wrap NumPy memory; the caller may reuse its buffer
        arr = values.cast(typ) if isinstance(values, pa.Array) else pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise BertfeatError(f"column {name!r} cannot be stored as {typ}: {e}", f"pass {typ} values for {name!r}") from None
    if len(arr) != m:
        raise BertfeatError(f"column {name!r} has {len(arr)} values for {m} feature rows", "pass one value per row")
    return arr


class FeatureWriter:
    """Stream feature rows into a Parquet, .npy or .csv feature file, atomically.

    ``write(ids, X, extras)`` appends a chunk (X is (m, dim), cast to float32; ids may be
    None for ``row`` ids, which then count from 0). ``close(metadata_update)`` writes the
    metadata and moves the files into place; ``abort()`` deletes the temporary files. As a
    context manager it closes on success and aborts on an exception. Until ``close()``
    returns, nothing exists at ``path``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        fmt: str | None = None,
        dim: int | None = None,
        id_name: str = "row",
        id_type: pa.DataType = pa.int64(),
        metadata: Mapping | None = None,
        wide: bool = False,
        extra_columns: Mapping[str, pa.DataType] | None = None,
        row_group_rows: int | None = None,
    ):
        if dim is None or int(dim) < 1:
            raise BertfeatError(f"FeatureWriter needs the feature width dim >= 1, got {dim!r}", "pass dim=d")
        self.path = Path(path)
        self.fmt = feature_format(self.path, fmt)
        self.dim = int(dim)
        self.id_name = id_name
        self.id_type = id_type
        self.metadata = dict(metadata or {})
        self.wide = bool(wide)
        self.extra_columns = dict(extra_columns or {})
        names = [id_name, *self.extra_columns]
        if self.fmt == "parquet" and not self.wide:
            names.append(EMBEDDING_COLUMN)
        clash = {n for n in names if names.count(n) > 1 or (self.fmt != "parquet" or self.wide) and _WIDE_RE.match(n)}
        if clash:
            raise BertfeatError(f"column name(s) {sorted(clash)} clash with each other or the feature columns", "rename them")
        self.rows = 0
        self.row_group_rows = row_group_rows or max(1024, _ROW_GROUP_BYTES // (4 * self.dim))
        self._closed = False
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._tmp = temp_path_for(self.path)
        self._tmp_files: list[Path] = [self._tmp]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    # -- setup ---------------------------------------------------------------------------------

    def _layout(self) -> dict:
        return {
            "format": self.fmt,
            "id_column": self.id_name,
            "id_type": str(self.id_type),
            "dim": self.dim,
            "wide": self.wide if self.fmt == "parquet" else self.fmt == "csv",
            "extra_columns": {k: str(v) for k, v in self.extra_columns.items()},
            "rows": self.rows,
        }

    def _feature_fields(self) -> list[pa.Field]:
        if self.fmt == "parquet" and not self.wide:
            return [pa.field(EMBEDDING_COLUMN, pa.list_(pa.float32(), self.dim))]
        return [pa.field(f"f{j}", pa.float32()) for j in range(self.dim)]

    def _open(self) -> None:
        id_field = pa.field(self.id_name, self.id_type)
        extras = [pa.field(k, v) for k, v in self.extra_columns.items()]
        if self.fmt == "parquet":
            meta = self.metadata | {"rows": self.metadata.get("rows"), "layout": self._layout()}
            self._schema = pa.schema([id_field, *self._feature_fields(), *extras], metadata={METADATA_KEY: _dumps(meta)})
            self._sink = pa.OSFile(str(self._tmp), "wb")
            self._pq = pq.ParquetWriter(self._sink, self._schema)
        elif self.fmt == "npy":
            self._npy = open(self._tmp, "wb")
            self._npy.write(_npy_header(0, self.dim))
            self._ids_tmp = temp_path_for(ids_sidecar_path(self.path))
            self._tmp_files.append(self._ids_tmp)
            self._schema = pa.schema([id_field, *extras])
            self._csv = pcsv.CSVWriter(str(self._ids_tmp), self._schema)
        else:
            self._schema = pa.schema([id_field, *extras, *self._feature_fields()])
            self._csv = pcsv.CSVWriter(str(self._tmp), self._schema)

    # -- writing -------------------------------------------------------------------------------

    def write(self, ids: Any, X: Any, extras: Mapping[str, Any] | None = None) -> None:
        """Append a chunk: ids (m,) (None: consecutive row numbers), X (m, dim), extras name -> (m,)."""
        if self._closed:
            raise BertfeatError(f"the feature writer for {self.path} is already closed", "open a new FeatureWriter")
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise BertfeatError(
                f"feature chunk has shape {X.shape}, expected (rows, {self.dim})", f"pass a 2-D array with {self.dim} columns"
            )
        X = np.ascontiguousarray(X, dtype=np.float32)
        m = X.shape[0]
        if ids is None:
            ids = np.arange(self.rows, self.rows + m, dtype=np.int64)
        columns = {self.id_name: _to_arrow(ids, self.id_type, m, self.id_name)}
        extras = dict(extras or {})
        unknown = sorted(set(extras) - set(self.extra_columns))
        if unknown:
            raise BertfeatError(
                f"extra column(s) {unknown} were not declared", "list them in extra_columns= when creating the FeatureWriter"
            )
        for name, typ in self.extra_columns.items():
            columns[name] = _to_arrow(extras[name], typ, m, name) if name in extras else pa.nulls(m, typ)
        if self.fmt == "parquet":
            self._write_parquet(columns, X)
        elif self.fmt == "npy":
            self._npy.write(memoryview(X).cast("B"))
            self._csv.write_batch(pa.record_batch(list(columns.values()), schema=self._schema))
        else:
            XT = np.ascontiguousarray(X.T)  # (dim, m): one contiguous buffer per column
            feats = [pa.array(XT[j]) for j in range(self.dim)]
            self._csv.write_batch(pa.record_batch([*columns.values(), *feats], schema=self._schema))
        self.rows += m

    def _write_parquet(self, columns: dict[str, pa.Array], X: np.ndarray) -> None:
        m = X.shape[0]
        if self.wide:
            XT = np.ascontiguousarray(X.T)
            feats = [pa.array(XT[j]) for j in range(self.dim)]
        else:
            # a copy: Arrow wraps NumPy memory and the rows stay buffered after write() returns
            feats = [pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1).copy()), self.dim)]
        id_col, *extra_cols = columns.values()
        batch = pa.record_batch([id_col, *feats, *extra_cols], schema=self._schema)
        self._buffer.append(batch)
        self._buffered += m
        if self._buffered >= self.row_group_rows:
            self._flush(whole_groups_only=True)

    def _flush(self, whole_groups_only: bool = False) -> None:
        """Write buffered rows as row groups of ``row_group_rows`` (keep a partial group if asked)."""
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer, schema=self._schema)
        keep = table.num_rows % self.row_group_rows if whole_groups_only else 0
        self._pq.write_table(table.slice(0, table.num_rows - keep), row_group_size=self.row_group_rows)
        self._buffer = table.slice(table.num_rows - keep).to_batches() if keep else []
        self._buffered = keep

    # -- finishing -----------------------------------------------------------------------------

    def final_metadata(self, metadata_update: Mapping | None = None) -> dict:
        """The provenance dict close() writes: metadata + update + rows + layout."""
        meta = self.metadata | dict(metadata_update or {})
        if meta.get("rows") is None:
            meta["rows"] = self.rows
        meta["layout"] = self._layout()
        return meta

    def close(self, metadata_update: Mapping | None = None) -> Path:
        """Finish the file(s), write the metadata and move everything into place; returns ``path``."""
        if self._closed:
            return self.path
        try:
            meta = self.final_metadata(metadata_update)
            text = _dumps(meta)
            if self.fmt == "parquet":
                self._flush()
                schema = self._schema.with_metadata({METADATA_KEY: text})
                # file key-value metadata, and the stored Arrow schema so pq.read_schema sees it too
                self._pq.add_key_value_metadata(
                    {METADATA_KEY: text, "ARROW:schema": _b64_schema(schema)}
                )
                self._pq.close()
                self._sink.close()
                _fsync(self._tmp)
                os.replace(self._tmp, self.path)
            else:
                self._csv.close()
                if self.fmt == "npy":
                    self._npy.seek(0)
                    self._npy.write(_npy_header(self.rows, self.dim))
                    self._npy.flush()
                    os.fsync(self._npy.fileno())
                    self._npy.close()
                    _fsync(self._ids_tmp)
                    os.replace(self._ids_tmp, ids_sidecar_path(self.path))
                else:
                    _fsync(self._tmp)
                with atomic_output(provenance_path(self.path)) as tmp:
                    tmp.write_text(text + "\n", encoding="utf-8")
                os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.path

    def abort(self) -> None:
        """Stop writing and delete the temporary files; ``path`` is left untouched."""
        self._closed = True
        for closer in ("_pq", "_sink", "_csv", "_npy"):
            obj = getattr(self, closer, None)
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        for tmp in self._tmp_files:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def __enter__(self) -> FeatureWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()


def _b64_schema(schema: pa.Schema) -> str:
    """The ``ARROW:schema`` value Parquet writers store: base64 of the IPC-serialized schema."""
    import base64

    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


# ----------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------


def _missing(path: Path) -> BertfeatError:
    return BertfeatError(f"feature file not found: {path}", "check the path, or write it with `bertfeat extract`")


def read_feature_metadata(path: str | os.PathLike) -> dict:
    """The provenance dict of a feature file ({} when it has none)."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    if feature_format(path) == "parquet":
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise BertfeatError(f"{path} is not a readable Parquet file ({e})", "pass a feature file") from None
        kv = pf.metadata.metadata or {}
        raw = kv.get(METADATA_KEY.encode()) or (pf.schema_arrow.metadata or {}).get(METADATA_KEY.encode())
        text = raw.decode("utf-8") if raw else None
    else:
        side = provenance_path(path)
        text = side.read_text(encoding="utf-8") if side.is_file() else None
    if not text:
        return {}
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertfeatError(f"the bertfeat metadata of {path} is not valid JSON ({e})", "re-extract the features") from None
    return meta if isinstance(meta, dict) else {}


def _batch_ids(col: pa.Array | pa.ChunkedArray) -> np.ndarray | list:
    """Ids as a NumPy array for integer ids, else a Python list."""
    if pa.types.is_integer(col.type) and col.null_count == 0:
        return col.to_numpy()
    return col.to_pylist()


def _rebatch(batches: Iterator[pa.RecordBatch], n: int) -> Iterator[pa.Table]:
    """Regroup a stream of record batches into tables of exactly n rows (the last may be shorter)."""
    buf: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        buf.append(batch)
        size += batch.num_rows
        while size >= n:
            table = pa.Table.from_batches(buf)
            yield table.slice(0, n)
            rest = table.slice(n)
            buf, size = rest.to_batches(), rest.num_rows
    if size:
        yield pa.Table.from_batches(buf)


@dataclass
class FeatureSource:
    """An opened feature file: its layout and a streaming reader (see ``open_features``)."""

    path: Path
    fmt: str
    meta: dict
    dim: int
    id_name: str | None  # None: no id column, ids are row numbers
    id_type: pa.DataType | None  # None: unknown (CSV without layout), inferred when read
    wide: bool
    extra_columns: dict[str, pa.DataType | None] = field(default_factory=dict)
    rows: int | None = None
    _columns: list[str] = field(default_factory=list)

    @property
    def fingerprint(self) -> dict | None:
        """The feature-source fingerprint from the metadata."""
        return feature_fingerprint(self.meta)

    def batches(self, batch_rows: int = 65536, *, ahead: int = 0) -> Iterator[tuple[Any, np.ndarray, dict[str, pa.Array]]]:
        """Yield (ids, X float32 (m, d), extras name -> Arrow array) chunks in file order.

        ``ahead`` > 0 reads that many chunks ahead in a background thread (``read_ahead``),
        so decoding the next chunk overlaps the caller's work on this one.
        """
        batch_rows = max(1, int(batch_rows))
        if self.fmt == "parquet":
            chunks = self._parquet_batches(batch_rows)
        elif self.fmt == "npy":
            chunks = self._npy_batches(batch_rows)
        else:
            chunks = self._csv_batches(batch_rows)
        yield from read_ahead(chunks, ahead) if ahead > 0 else chunks

    def _split(self, table: pa.Table | pa.RecordBatch, X: np.ndarray, start: int) -> tuple:
        m = X.shape[0]
        if self.id_name is not None and self.id_name in table.column_names:
            ids = _batch_ids(table.column(self.id_name))
        else:
            ids = np.arange(start, start + m, dtype=np.int64)
        extras = {}
        for name in self.extra_columns:
            col = table.column(name)
            extras[name] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return ids, X, extras

    def _wide_matrix(self, table: pa.Table | pa.RecordBatch) -> np.ndarray:
        X = np.empty((table.num_rows, self.dim), dtype=np.float32)
        for j in range(self.dim):
            col = table.column(f"f{j}")
            if col.null_count:
                raise BertfeatError(f"{self.path}: column f{j} has missing values", "re-extract the features")
            X[:, j] = col.to_numpy()
        return X

    def _parquet_batches(self, batch_rows: int) -> Iterator[tuple]:
        # One row group at a time: a batch never spans two row groups, so the embedding
        # column of each batch is one contiguous Arrow buffer and X is a zero-copy view of
        # it (batches across a group boundary are concatenated first, twice as slow).
        pf = pq.ParquetFile(self.path)
        start = 0
        for group in range(pf.num_row_groups):
            for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=self._columns, use_threads=True):
                if self.wide:
                    X = self._wide_matrix(batch)
                else:
                    X = _embedding_matrix(batch.column(EMBEDDING_COLUMN), self.dim, self.path, start)
                yield self._split(batch, X, start)
                start += batch.num_rows

    def _npy_batches(self, batch_rows: int) -> Iterator[tuple]:
        arr = np.load(self.path, mmap_mode="r")
        n = arr.shape[0]
        side = ids_sidecar_path(self.path)
        tables: Iterator[pa.Table | None]
        if side.is_file():
            tables = _rebatch(_open_csv(side, self._csv_types()), batch_rows)
        else:
            tables = iter(lambda: None, 0)  # endless Nones: ids are row numbers
        for start in range(0, n, batch_rows):
            X = np.array(arr[start : start + batch_rows], dtype=np.float32)
            table = next(tables, None)
            if side.is_file() and (table is None or table.num_rows != X.shape[0]):
                raise BertfeatError(f"{side} does not have one row per row of {self.path}", "re-extract the features")
            yield self._split(table if table is not None else pa.table({}), X, start)
        if side.is_file() and next(tables, None) is not None:
            raise BertfeatError(f"{side} has more rows than {self.path} ({n})", "re-extract the features")

    def _csv_types(self) -> dict[str, pa.DataType]:
        types = {k: t for k, t in self.extra_columns.items() if t is not None}
        if self.id_name is not None and self.id_type is not None:
            types[self.id_name] = self.id_type
        return types

    def _csv_batches(self, batch_rows: int) -> Iterator[tuple]:
        types = self._csv_types() | {f"f{j}": pa.float32() for j in range(self.dim)}
        start = 0
        for table in _rebatch(_open_csv(self.path, types), batch_rows):
            yield self._split(table, self._wide_matrix(table), start)
            start += table.num_rows


def _open_csv(path: Path, types: Mapping[str, pa.DataType]) -> Iterator[pa.RecordBatch]:
    """Stream a CSV as record batches with the given column types."""
    opts = pcsv.ConvertOptions(column_types=dict(types), strings_can_be_null=False)
    try:
        reader = pcsv.open_csv(path, convert_options=opts, read_options=pcsv.ReadOptions(block_size=8 << 20))
    except (pa.ArrowInvalid, OSError) as e:
        raise BertfeatError(f"cannot read {path} as CSV ({e})", "pass a feature CSV written by bertfeat") from None
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as e:
            raise BertfeatError(f"bad value in {path} ({e})", "re-extract the features") from None


def _embedding_matrix(col: pa.Array, d: int, path: Path, start: int) -> np.ndarray:
    """(m, d) float32 from a fixed-size or variable list column of floats."""
    if col.null_count:
        bad = start + col.is_null().to_numpy(zero_copy_only=False).argmax()
        raise BertfeatError(f"{path}: row {bad} has no embedding (null)", "re-extract the features")
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        lengths = col.value_lengths().to_numpy()
        if (lengths != d).any():
            bad = start + int(np.argmax(lengths != d))
            raise BertfeatError(f"{path}: row {bad} has an embedding of length {lengths[bad - start]}, expected {d}", "re-extract the features")
    values = col.flatten().to_numpy(zero_copy_only=False)  # flatten respects slicing
    return np.asarray(values, dtype=np.float32).reshape(len(col), d)


def _no_features(path: Path, columns: list[str]) -> BertfeatError:
    return BertfeatError(
        f"{path} has no feature columns: expected '{EMBEDDING_COLUMN}' or f0..f{{d-1}}, found {columns}",
        "pass a feature file written by `bertfeat extract`",
    )


def _wide_dim(path: Path, columns: list[str]) -> int:
    idx = sorted(int(m.group(1)) for c in columns if (m := _WIDE_RE.match(c)))
    if not idx:
        raise _no_features(path, columns)
    if idx != list(range(len(idx))):
        raise BertfeatError(f"{path}: feature columns f0..f{{d-1}} are not contiguous", "re-extract the features")
    return len(idx)


def _pick_id_column(layout: Mapping, others: list[str]) -> str | None:
    """The id column: the one the layout names, else the first non-feature column, else None."""
    name = layout.get("id_column")
    if name in others:
        return name
    return others[0] if others and not layout else None


def open_features(path: str | os.PathLike) -> FeatureSource:
    """Open a feature file for streaming: detect its layout from metadata and columns."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    fmt = feature_format(path)
    meta = read_feature_metadata(path)
    layout = meta.get("layout") or {}
    declared = {k: t for k, v in (layout.get("extra_columns") or {}).items() if (t := _type_from_str(v)) is not None}
    if fmt == "parquet":
        schema = pq.read_schema(path)
        names = schema.names
        rows = pq.ParquetFile(path).metadata.num_rows
        if EMBEDDING_COLUMN in names:
            typ = schema.field(EMBEDDING_COLUMN).type
            if pa.types.is_fixed_size_list(typ):
                dim = typ.list_size
            elif (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and layout.get("dim"):
                dim = int(layout["dim"])
            else:
                raise BertfeatError(f"{path}: column '{EMBEDDING_COLUMN}' has type {typ}, not a list of floats", "re-extract the features")
            wide, feature_cols = False, [EMBEDDING_COLUMN]
        else:
            dim, wide = _wide_dim(path, names), True
            feature_cols = [f"f{j}" for j in range(dim)]
        others = [c for c in names if c not in feature_cols]
        id_name = _pick_id_column(layout, others)
        id_type = schema.field(id_name).type if id_name else pa.int64()
        extras = {c: schema.field(c).type for c in others if c != id_name}
        columns = ([id_name] if id_name else []) + feature_cols + list(extras)
        return FeatureSource(path, fmt, meta, dim, id_name, id_type, wide, extras, rows, columns)
    if fmt == "npy":
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as e:
            raise BertfeatError(f"{path} is not a readable .npy file ({e})", "pass a feature file") from None
        if arr.ndim != 2 or arr.dtype.kind != "f":
            raise BertfeatError(f"{path} holds a {arr.dtype} array of shape {arr.shape}, not (rows, d) floats", "pass a feature matrix")
        side = ids_sidecar_path(path)
        id_name, id_type, extras = None, pa.int64(), {}
        if side.is_file():
            with open(side, newline="", encoding="utf-8") as f:
                header = next(csv.reader(f), [])
            id_name = _pick_id_column(layout, header) or (header[0] if header else None)
            id_type = _type_from_str(layout.get("id_type")) if layout.get("id_column") == id_name else None
            extras = {c: declared.get(c) for c in header if c != id_name}
        return FeatureSource(path, fmt, meta, arr.shape[1], id_name, id_type, False, extras, arr.shape[0])
    # csv
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    dim = _wide_dim(path, header)
    others = [c for c in header if not _WIDE_RE.match(c)]
    id_name = _pick_id_column(layout, others)
    id_type = _type_from_str(layout.get("id_type")) if layout.get("id_column") == id_name and id_name else None
    extras = {c: declared.get(c) for c in others if c != id_name}
    return FeatureSource(path, fmt, meta, dim, id_name, id_type, True, extras, meta.get("layout", {}).get("rows"))


def iter_features(
    path: str | os.PathLike, batch_rows: int = 65536, *, with_extras: bool = False
) -> Iterator[tuple]:
    """Stream a feature file: yield (ids, X float32 (m, d)) chunks in order (plus extras if asked)."""
    for ids, X, extras in open_features(path).batches(batch_rows):
        yield (ids, X, extras) if with_extras else (ids, X)


def read_features(path: str | os.PathLike) -> tuple[Any, np.ndarray, dict]:
    """Read a whole feature file: (ids, X float32 (n, d), metadata). Holds every row in memory."""
    src = open_features(path)
    id_parts, parts = [], []
    for ids, X, _ in src.batches():
        id_parts.append(ids)
        parts.append(X)
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, src.dim), dtype=np.float32), src.meta
    if all(isinstance(p, np.ndarray) for p in id_parts):
        ids: Any = np.concatenate(id_parts)
    else:
        ids = [i for p in id_parts for i in (p.tolist() if isinstance(p, np.ndarray) else p)]
    return ids, np.concatenate(parts), src.meta
