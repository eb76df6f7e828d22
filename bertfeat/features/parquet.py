"""The Parquet feature file (the default format): writing it in row groups, reading it back.

Columns: the id column (the user's id column, or ``row`` = 0-based input row number, int64),
``embedding`` as ``fixed_size_list<float32>[d]`` (or, ``wide=True``, columns ``f0 .. f{d-1}``
float32; ``halffloat`` for float16 features), then optional extras (``n_tokens`` int32, ``truncated`` bool,
``n_chunks`` int32, ...).
Provenance: the file's key-value metadata key ``bertfeat`` = JSON text, also in the stored Arrow
schema (so ``pq.read_schema`` sees it). Rows are buffered into row groups of ``row_group_rows``.

Reading also takes foreign Parquet files: a variable-length list ``embedding`` (its width from
the layout), or ``f0 ..`` columns, and no metadata.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..atomic import AtomicFile
from ..errors import BertfeatError, one_line
from .base import (
    as_float32,
    EMBEDDING_COLUMN,
    METADATA_KEY,
    FeatureBatch,
    FeatureFile,
    FeatureSource,
    WriteSpec,
    dumps_metadata,
    feature_arrow_type,
    pick_id_column,
    wide_arrays,
    wide_dim,
)


def b64_schema(schema: pa.Schema) -> str:
    """The ``ARROW:schema`` value Parquet writers store: base64 of the IPC-serialized schema."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def pages_damaged(path: Path) -> str | None:
    """Why a Parquet file bertfeat wrote no longer reads back (cut short, a flipped byte: its page checksums), or None.

    Reads every page once, a row group at a time (a part of a resumed Dask run; files written before the
    checksums were are read without them)."""
    try:
        f = pq.ParquetFile(path, page_checksum_verification=True)
        for i in range(f.num_row_groups):
            f.read_row_group(i)
        return None
    except (OSError, pa.ArrowException) as e:
        return one_line(e, 100)


def embedding_matrix(col: pa.Array, d: int, path: Path, start: int, keep64: bool = False) -> np.ndarray:
    """(m, d) float32 from a fixed-size or variable list column of floats (``keep64``: float64 values kept)."""
    if col.null_count:
        bad = start + col.is_null().to_numpy(zero_copy_only=False).argmax()
        raise BertfeatError(f"{path}: row {bad} has no embedding (null)", "re-extract the features")
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        lengths = col.value_lengths().to_numpy()
        if (lengths != d).any():
            bad = start + int(np.argmax(lengths != d))
            raise BertfeatError(f"{path}: row {bad} has an embedding of length {lengths[bad - start]}, expected {d}", "re-extract the features")
    flat = col.flatten()  # flatten respects slicing
    if flat.null_count:  # to_numpy would read it as NaN, then refused as a NaN the file does not hold
        i = int(flat.is_null().to_numpy(zero_copy_only=False).argmax())
        raise BertfeatError(f"{path}: row {start + i // d}, column '{EMBEDDING_COLUMN}': its value {i % d} (of {d}, "
                            "counted from 0) is null, not a number",
                            "write a number there (every value of an embedding is a feature), or re-extract the "
                            "features")
    values = flat.to_numpy(zero_copy_only=False)
    return as_float32(np.asarray(values).reshape(len(col), d), path, start, keep64=keep64)


def _check_numbers(path: Path, schema: pa.Schema, feature_cols: list[str], wide: bool) -> None:
    """The feature columns (f0.. or the embedding's values) hold integers or floats: text, decimals or booleans there
    were NumPy's zero-copy error, reported as a bug."""
    for name in feature_cols:
        t = schema.field(name).type
        t = t if wide else t.value_type
        if not (pa.types.is_floating(t) or pa.types.is_integer(t)):
            raise BertfeatError(f"{path}: the feature column {name!r} holds {t} values, not floats or integers",
                                "write the features as floats (float32), or re-extract the features")


def _dtype_name(t: pa.DataType) -> str:
    """The NumPy name of a feature column's value type (float16, float32, ...; a non-float type: as Arrow says)."""
    return np.dtype(t.to_pandas_dtype()).name if pa.types.is_floating(t) else str(t)


class ParquetFile(FeatureFile):
    """A Parquet feature file: one stream of row groups, the provenance in the footer."""

    name = "parquet"
    suffix = ".parquet"

    @classmethod
    def named_feature_columns(cls, wide: bool) -> tuple[str, ...]:
        return () if wide else (EMBEDDING_COLUMN,)

    @classmethod
    def numbered_feature_columns(cls, wide: bool) -> bool:
        return wide

    @classmethod
    def layout_wide(cls, wide: bool) -> bool:
        return wide

    # -- writing -------------------------------------------------------------------------------

    def __init__(self, spec: WriteSpec):
        self.spec = spec
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._main = AtomicFile(spec.path)
        if spec.wide:
            feature_fields = [pa.field(f"f{j}", feature_arrow_type(spec.dtype)) for j in range(spec.dim)]
        else:
            feature_fields = [pa.field(EMBEDDING_COLUMN, pa.list_(feature_arrow_type(spec.dtype), spec.dim))]
        fields = [spec.id_field, *feature_fields, *spec.extra_fields]
        self._schema = pa.schema(fields, metadata={METADATA_KEY: dumps_metadata(spec.metadata)})
        self._sink = pa.OSFile(str(self._main.tmp), "wb")
        try:  # (any exception, Ctrl-C included: no temporary file left behind)
            # page CRCs: a resumed Dask run verifies the parts it keeps (pages_damaged), a reader may too. Dictionary
            # encoding for the id and kept columns only: floats are nearly all distinct, so a feature column's
            # dictionary filled to its 1 MiB limit and was written beside the plain pages (files 1.5x the floats'
            # size, written 25x slower: 714 KB in 52 ms -> 469 KB in 2 ms for 300 x 384)
            self._pq = pq.ParquetWriter(self._sink, self._schema, write_page_checksum=True,
                                        use_dictionary=[f.name for f in fields if f not in feature_fields])
        except BaseException:
            self._sink.close()
            self._main.discard()
            raise

    def append(self, columns: dict[str, pa.Array], X: np.ndarray) -> None:
        m = X.shape[0]
        if self.spec.wide:
            feats = wide_arrays(X)
        else:
            # a copy: Arrow wraps NumPy memory and the rows stay buffered after write() returns
            feats = [pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1).copy()), self.spec.dim)]
        id_col, *extra_cols = columns.values()
        batch = pa.record_batch([id_col, *feats, *extra_cols], schema=self._schema)
        self._buffer.append(batch)
        self._buffered += m
        if self._buffered >= self.spec.row_group_rows:
            self._flush(whole_groups_only=True)

    def _flush(self, whole_groups_only: bool = False) -> None:
        """Write buffered rows as row groups of ``row_group_rows`` (keep a partial group if asked)."""
        if not self._buffer:
            return
        n = self.spec.row_group_rows
        table = pa.Table.from_batches(self._buffer, schema=self._schema)
        keep = table.num_rows % n if whole_groups_only else 0
        self._pq.write_table(table.slice(0, table.num_rows - keep), row_group_size=n)
        self._buffer = table.slice(table.num_rows - keep).to_batches() if keep else []
        self._buffered = keep

    def finish(self, metadata_text: str) -> None:
        self._flush()
        schema = self._schema.with_metadata({METADATA_KEY: metadata_text})
        # file key-value metadata, and the stored Arrow schema so pq.read_schema sees it too
        self._pq.add_key_value_metadata({METADATA_KEY: metadata_text, "ARROW:schema": b64_schema(schema)})
        self._pq.close()
        self._sink.close()
        self._main.commit()

    def abort(self) -> None:
        for obj in (self._pq, self._sink):
            with contextlib.suppress(Exception):
                obj.close()
        self._main.discard()

    # -- reading -------------------------------------------------------------------------------

    @classmethod
    def read_metadata_text(cls, path: Path) -> str | None:
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise BertfeatError(f"{path} is not a readable Parquet file ({e})", "pass a feature file") from None
        kv = pf.metadata.metadata or {}
        raw = kv.get(METADATA_KEY.encode()) or (pf.schema_arrow.metadata or {}).get(METADATA_KEY.encode())
        return raw.decode("utf-8") if raw else None

    @classmethod
    def open_source(cls, path: Path, meta: dict) -> FeatureSource:
        layout = meta.get("layout") or {}
        schema = pq.read_schema(path)
        names = schema.names
        rows = pq.ParquetFile(path).metadata.num_rows
        if EMBEDDING_COLUMN in names:
            typ = schema.field(EMBEDDING_COLUMN).type
            if pa.types.is_fixed_size_list(typ) and typ.list_size == 0:  # rows without features (Arrow's reader fails)
                raise BertfeatError(f"{path}: column '{EMBEDDING_COLUMN}' is a list of 0 values ({typ}): rows without "
                                    "features", "pass a feature matrix of at least one feature a row")
            if pa.types.is_fixed_size_list(typ):
                dim = typ.list_size
            elif (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and layout.get("dim"):
                dim = int(layout["dim"])
            elif pa.types.is_list(typ) or pa.types.is_large_list(typ):  # its length d is the provenance's
                raise BertfeatError(f"{path}: column '{EMBEDDING_COLUMN}' is a list of any length ({typ}) and the file "
                                    "has no bertfeat provenance to say its length", "write it as a fixed-size list "
                                    "(pa.list_(pa.float32(), d)), or re-extract the features")
            else:
                raise BertfeatError(f"{path}: column '{EMBEDDING_COLUMN}' has type {typ}, not a list of floats", "re-extract the features")
            wide, feature_cols = False, [EMBEDDING_COLUMN]
        else:
            dim, wide = wide_dim(path, names), True
            feature_cols = [f"f{j}" for j in range(dim)]
        _check_numbers(path, schema, feature_cols, wide)
        value_type = schema.field(feature_cols[0]).type
        value_type = value_type if wide else getattr(value_type, "value_type", value_type)
        others = [c for c in names if c not in feature_cols]
        id_name = pick_id_column(layout, others)
        id_type = schema.field(id_name).type if id_name else pa.int64()
        extras = {c: schema.field(c).type for c in others if c != id_name}
        columns = ([id_name] if id_name else []) + feature_cols + list(extras)
        return FeatureSource(path, cls.name, meta, dim, id_name, id_type, wide, extras, rows, columns, file_format=cls,
                             dtype=_dtype_name(value_type))

    @classmethod
    def read_chunks(cls, src: FeatureSource, batch_rows: int) -> Iterator[FeatureBatch]:
        # One row group at a time: a batch never spans two row groups, so the embedding
        # column of each batch is one contiguous Arrow buffer and X is a zero-copy view of
        # it (batches across a group boundary are concatenated first, twice as slow).
        pf = pq.ParquetFile(src.path, page_checksum_verification=True)  # bertfeat's files carry page CRCs
        start = 0
        for group in range(pf.num_row_groups):
            for batch in _batches(pf, src.path, group, batch_rows, src.columns):
                if src.wide:
                    X = src.wide_matrix(batch, start)
                else:
                    X = embedding_matrix(batch.column(EMBEDDING_COLUMN), src.dim, src.path, start, src.float64)
                yield src.make_chunk(batch, X, start)
                start += batch.num_rows


def _batches(pf: pq.ParquetFile, path: Path, group: int, batch_rows: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Row group ``group``'s batches; a page that fails its checksum or cannot be decoded (a flipped byte, bytes cut
    from the middle) is the file's damage, said as such: pyarrow's own words named no file, or read as a disk error."""
    batches = pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns, use_threads=True)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as e:
            raise BertfeatError(f"{path} is damaged: row group {group} does not read back ({one_line(e, 100)})",
                                "restore the file from a copy, or rerun the command that wrote it") from None
        yield batch

