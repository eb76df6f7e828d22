"""Reading feature files, whatever their format: metadata, the opened source, streaming, the whole matrix.

The format comes from the file's suffix (``registry.feature_format``); its ``FeatureFile``
class reads the metadata and the layout, and streams the chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .base import FeatureSource, damaged_provenance, missing_file_error, parse_metadata
from .registry import file_format


def read_feature_metadata(path: str | os.PathLike) -> dict:
    """The provenance dict of a feature file ({} when it has none); of a directory of part files (extract --engine
    dask), the run's (DIRECTORY_PROVENANCE: its counts are the whole run's, a part's only that partition's), else
    the first part's."""
    path = Path(path)
    if path.is_dir():
        run = path / DIRECTORY_PROVENANCE
        if run.is_file():
            return parse_metadata(run, _text(run, lambda: run.read_text(encoding="utf-8")))
        return read_feature_metadata(feature_files(path)[0])
    if not path.is_file():
        raise missing_file_error(path)
    return parse_metadata(path, _text(path, lambda: file_format(path).read_metadata_text(path)))


def _text(path: Path, read) -> str | None:
    """The provenance's text: bytes that are not UTF-8 are a damaged provenance (it is written as UTF-8 JSON)."""
    try:
        return read()
    except UnicodeDecodeError as e:
        raise damaged_provenance(path, f"it is not UTF-8 text ({e.reason} at byte {e.start})") from None


#: the run's provenance in a Dask output directory (written last, beside the parts)
DIRECTORY_PROVENANCE = "_bertfeat.json"


def feature_files(path: str | os.PathLike) -> list[Path]:
    """The feature file at ``path``, or the part files of a directory (``extract --engine dask``'s output), in order."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    from ..errors import BertfeatError

    parts = sorted(path.glob("part-*.parquet"))
    if not parts:
        raise BertfeatError(f"{path} is a directory without part-*.parquet files",
                            "give a feature file, or the output directory of extract --engine dask")
    run = path / DIRECTORY_PROVENANCE
    n = read_feature_metadata(path).get("partitions") if run.is_file() else None  # one part per partition
    if isinstance(n, int) and not isinstance(n, bool) and len(parts) != n:
        width = len(parts[0].stem.split("-", 1)[1])
        missing = [f"part-{i:0{width}d}.parquet" for i in range(n) if not (path / f"part-{i:0{width}d}.parquet").exists()]
        said = f"missing: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}" if missing else "others added"
        raise BertfeatError(f"{path} has {len(parts)} part files, but its run wrote {n} ({said})",
                            "the directory lost (or gained) part files since: extract the features again")
    return parts


def open_features(path: str | os.PathLike) -> FeatureSource:
    """Open a feature file for streaming: detect its layout from metadata and columns. A directory of part files
    (``extract --engine dask``'s output) streams its parts in order, as one file (its provenance: the first part's,
    which carries the run's)."""
    path = Path(path)
    if path.is_dir():
        return _open_parts(path)
    if not path.is_file():
        raise missing_file_error(path)
    meta = read_feature_metadata(path)
    return file_format(path).open_source(path, meta)


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


class _Parts:
    """The reader of a directory of part files (open_features): each part's chunks in turn."""

    name = "parquet"

    @classmethod
    def read_chunks(cls, src: FeatureSource, batch_rows: int):
        start = 0
        for part in feature_files(src.path):
            for ids, X, extras in open_features(part).batches(batch_rows):
                if src.id_name is None:  # row numbers: counted over the whole directory
                    ids = np.arange(start, start + X.shape[0], dtype=np.int64)
                start += X.shape[0]
                yield ids, X, extras


def _open_parts(path: Path) -> FeatureSource:
    from dataclasses import replace

    from ..errors import BertfeatError

    parts = [open_features(p) for p in feature_files(path)]
    first = parts[0]
    odd = next((p for p in parts if (p.dim, p.id_name, p.extra_columns) != (first.dim, first.id_name, first.extra_columns)), None)
    if odd is not None:
        raise BertfeatError(f"the part files of {path} differ ({odd.path.name}: {odd.dim} features, columns "
                            f"{[odd.id_name, *odd.extra_columns]}; {first.path.name}: {first.dim}, "
                            f"{[first.id_name, *first.extra_columns]})", "extract the directory again")
    rows = None if any(p.rows is None for p in parts) else sum(p.rows for p in parts)
    return replace(first, path=path, meta=read_feature_metadata(path), rows=rows, file_format=_Parts)
