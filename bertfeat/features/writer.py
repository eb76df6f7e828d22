"""``FeatureWriter``: the one writer of feature files, whatever their format.

It owns what every format shares: checking the arguments and each chunk, converting ids and
extras to Arrow, counting rows, the provenance dict (``final_metadata``) and the atomic
close / abort contract. The bytes on disk are the format class's (``registry.FILE_FORMATS``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..atomic import remove_stale_temps
from ..errors import BertfeatError
from .base import (
    ROW_GROUP_BYTES,
    WIDE_COLUMN_RE,
    WriteSpec,
    check_dtype,
    check_float16_range,
    check_float32_range,
    dumps_metadata,
    provenance_path,
    to_arrow,
)
from .npy import ids_sidecar_path
from .registry import FILE_FORMATS, feature_format, unwritable


class FeatureWriter:
    """Stream feature rows into a Parquet, .npy or .csv feature file, atomically.

    ``write(ids, X, extras)`` appends a chunk (X is (m, dim), cast to float32, then to ``dtype``: "float16" rounds
    to nearest and refuses a value beyond float16's range, naming its row; ids may be None for ``row`` ids, which
    then count from 0). ``close(metadata_update)`` writes the
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
        dtype: str = "float32",
    ):
        if dim is None or int(dim) < 1:
            raise BertfeatError(f"FeatureWriter needs the feature width dim >= 1, got {dim!r}", "pass dim=d")
        self.path = Path(path)
        self.fmt = feature_format(self.path, fmt)
        file_class = FILE_FORMATS[self.fmt]
        self.dim = int(dim)
        self.dtype = check_dtype(dtype)
        self.id_name = id_name
        self.id_type = id_type
        self.metadata = dict(metadata or {})
        self.wide = bool(wide)
        self.extra_columns = dict(extra_columns or {})
        self._layout_wide = file_class.layout_wide(self.wide)
        names = [id_name, *self.extra_columns, *file_class.named_feature_columns(self.wide)]
        numbered = file_class.numbered_feature_columns(self.wide)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise BertfeatError(f"the column name(s) {twice} are given twice (the id column, extra columns and the "
                                f"features' {list(file_class.named_feature_columns(self.wide))})", "rename them")
        clash = sorted(n for n in names if numbered and n is not None and WIDE_COLUMN_RE.match(n))
        if clash:
            raise BertfeatError(f"the column name(s) {clash} clash with the features' columns f0, f1, ... of a "
                                f"{'wide ' if self.fmt == 'parquet' else ''}{self.fmt} feature file",
                                "rename them, or write Parquet (not wide) or npy")
        for name, t, why in unwritable(self.fmt, {id_name: id_type, **self.extra_columns}):
            raise BertfeatError(f"column {name!r} holds {t} values, which a {self.fmt} feature file cannot hold ({why})",
                                "write a parquet feature file")
        self.rows = 0
        self.row_group_rows = row_group_rows or max(1024, ROW_GROUP_BYTES // (np.dtype(self.dtype).itemsize * self.dim))
        self._closed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.path, ids_sidecar_path(self.path), provenance_path(self.path)):  # a killed writer's
            remove_stale_temps(path)
        spec = WriteSpec(
            path=self.path,
            dim=self.dim,
            id_field=pa.field(self.id_name, self.id_type),
            extra_fields=[pa.field(k, v) for k, v in self.extra_columns.items()],
            wide=self.wide,
            row_group_rows=self.row_group_rows,
            dtype=self.dtype,
            metadata=self.metadata | {"rows": self.metadata.get("rows"), "dtype": self.dtype, "layout": self._layout()},
        )
        self._file = file_class(spec)

    def _layout(self) -> dict:
        return {
            "format": self.fmt,
            "id_column": self.id_name,
            "id_type": str(self.id_type),
            "dim": self.dim,
            "wide": self._layout_wide,
            "extra_columns": {k: str(v) for k, v in self.extra_columns.items()},
            "rows": self.rows,
        }

    # -- writing -------------------------------------------------------------------------------

    def write(self, ids: Any, X: Any, extras: Mapping[str, Any] | None = None) -> None:
        """Append a chunk: ids (m,) (None: consecutive row numbers), X (m, dim), extras name -> (m,)."""
        if self._closed:
            raise BertfeatError(f"the feature writer for {self.path} is already closed", "open a new FeatureWriter")
        X = np.asarray(X)
        if X.ndim == 2 and X.shape[0] == 0:
            return  # a chunk whose rows were all rejected (its width may be the encoder's, before a PCA): nothing to add
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise BertfeatError(
                f"feature chunk has shape {X.shape}, expected (rows, {self.dim})", f"pass a 2-D array with {self.dim} columns"
            )
        if X.dtype.kind == "f" and X.dtype.itemsize > 4:  # float64 (pca transform of float64 features): no inf, no 0
            check_float32_range(X, ids, self.rows)
        X = np.ascontiguousarray(X, dtype=np.float32)
        if self.dtype == "float16":
            check_float16_range(X, ids, self.rows)
            X = X.astype(np.float16)
        m = X.shape[0]
        if ids is None:
            ids = np.arange(self.rows, self.rows + m, dtype=np.int64)
        columns = {self.id_name: to_arrow(ids, self.id_type, m, self.id_name)}
        extras = dict(extras or {})
        unknown = sorted(set(extras) - set(self.extra_columns))
        if unknown:
            raise BertfeatError(
                f"extra column(s) {unknown} were not declared", "list them in extra_columns= when creating the FeatureWriter"
            )
        for name, typ in self.extra_columns.items():
            columns[name] = to_arrow(extras[name], typ, m, name) if name in extras else pa.nulls(m, typ)
        self._file.append(columns, X)
        self.rows += m

    # -- finishing -----------------------------------------------------------------------------

    def final_metadata(self, metadata_update: Mapping | None = None) -> dict:
        """The provenance dict close() writes: metadata + update + rows + dtype + layout."""
        meta = self.metadata | dict(metadata_update or {})
        if meta.get("rows") is None:
            meta["rows"] = self.rows
        meta["dtype"] = self.dtype
        meta["layout"] = self._layout()
        return meta

    def close(self, metadata_update: Mapping | None = None) -> Path:
        """Finish the file(s), write the metadata and move everything into place; returns ``path``."""
        if self._closed:
            return self.path
        try:
            self._file.finish(dumps_metadata(self.final_metadata(metadata_update)))
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.path

    def abort(self) -> None:
        """Stop writing and delete the temporary files; ``path`` is left untouched."""
        self._closed = True
        self._file.abort()

    def __enter__(self) -> FeatureWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()
