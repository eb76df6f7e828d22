"""Reading feature files, whatever their format: metadata, the opened source, streaming, the whole matrix.

The format comes from the file's suffix (``registry.feature_format``); its ``FeatureFile``
class reads the metadata and the layout, and streams the chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_count, check_switch, local_path
from .base import FeatureSource, damaged_provenance, missing_file_error, parse_metadata
from .registry import file_format


def read_feature_metadata(path: str | os.PathLike) -> dict:
    """The provenance dict of a feature file ({} when it has none); of a directory of part files (extract --engine
    dask), the run's (DIRECTORY_PROVENANCE: its counts are the whole run's, a part's only that partition's), else
    the run's made from its parts' own (``_parts_provenance``)."""
    path = Path(path)
    if path.is_dir():
        run = path / DIRECTORY_PROVENANCE
        if run.is_file():
            return parse_metadata(run, _text(run, lambda: run.read_text(encoding="utf-8")))
        return _parts_provenance(path, _part_files(path))
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
#: a Dask output directory's part files: part-00000.parquet (five digits or more, one per partition; part_name)
PART_GLOB = "part-*.parquet"


def part_name(index: int, width: int = 5) -> str:
    """Partition ``index``'s part file (``width`` digits at least)."""
    return f"part-{index:0{width}d}.parquet"


def part_index(name: str) -> int | None:
    """The partition of a part file's name (part_name's), None for another name."""
    stem = name[len("part-"):-len(".parquet")] if name.startswith("part-") and name.endswith(".parquet") else ""
    return int(stem) if len(stem) >= 5 and stem.isascii() and stem.isdigit() else None


def feature_files(path: str | os.PathLike) -> list[Path]:
    """The feature file at ``path``, or the part files of a directory (``extract --engine dask``'s output), in order."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    parts = _part_files(path)
    n = read_feature_metadata(path).get("partitions")  # one part per partition
    if isinstance(n, int) and not isinstance(n, bool) and len(parts) != n:
        raise _lost_parts(path, parts, n)
    return parts


def _part_files(path: Path) -> list[Path]:
    """A directory's part files, in order (none: not a feature directory)."""
    from ..errors import BertfeatError

    parts = sorted(path.glob(PART_GLOB))
    if not parts:
        raise BertfeatError(f"{path} is a directory without part-*.parquet files",
                            "give a feature file, or the output directory of extract --engine dask")
    return parts


def _lost_parts(path: Path, parts: list[Path], n: int, at_least: bool = False):
    """The error of a directory whose part files are not its run's ``n`` (``at_least``: n is the last part's index + 1,
    the run's own count unknown)."""
    from ..errors import BertfeatError

    width = len(parts[0].stem.split("-", 1)[1])
    missing = [f"part-{i:0{width}d}.parquet" for i in range(n) if not (path / f"part-{i:0{width}d}.parquet").exists()]
    said = f"missing: {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}" if missing else "others added"
    return BertfeatError(f"{path} has {len(parts)} part files, but its run wrote {'at least ' * at_least}{n} ({said})",
                         "the directory lost (or gained) part files since: extract the features again")


def _parts_provenance(path: Path, parts: list[Path]) -> dict:
    """A Dask output directory without its run's provenance (DIRECTORY_PROVENANCE deleted, or parts gathered from
    elsewhere): the run's, made from its parts' own. The first part's settings, with the rows and tokens summed over
    the parts (a part's counts are its partition's only); the parts must be one run's, none missing between them.
    Parts that do not say which run and partition they are (not a Dask run's) give their settings, no counts."""
    metas = [read_feature_metadata(p) for p in parts]
    run = {k: v for k, v in metas[0].items() if k not in ("part", "layout", "rows", "tokens", "partitions")}
    placed = [m.get("part") for m in metas]
    if not all(isinstance(e, dict) for e in placed):
        return run
    recorded = {m.get("partitions") for m in metas}  # the run's partitions, in every part a run writes now
    n = recorded.pop() if len(recorded) == 1 and _is_count(next(iter(recorded))) else None
    _check_one_run(path, parts, placed, n)
    return run | ({"partitions": n} if n is not None else {}) | {
        "rows": _summed([m.get("rows") for m in metas]), "tokens": _summed([m.get("tokens") for m in metas])}


def _check_one_run(path: Path, parts: list[Path], placed: list[dict], n: int | None) -> None:
    """The parts name one run (its key) and are its partitions 0, 1, 2 ... (``n`` of them when recorded), else
    refused."""
    from ..errors import BertfeatError

    odd = next((p for p, e in zip(parts, placed) if e.get("run") != placed[0].get("run")), None)
    if odd is not None:
        raise BertfeatError(f"the part files of {path} come from different runs ({parts[0].name} and {odd.name}), and "
                            f"its run's provenance {DIRECTORY_PROVENANCE} is missing",
                            "extract the features again (a directory holds one run's parts)")
    indices = [e.get("index") for e in placed]
    if not all(_is_count(i) for i in indices):
        raise damaged_provenance(parts[0], "a part's index is not a whole number")
    if indices != list(range(len(parts))) or (n is not None and n != len(parts)):
        raise _lost_parts(path, parts, max(indices) + 1 if n is None else n, at_least=n is None)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _summed(counts: list) -> dict | None:
    """The parts' counts ({"read": 40, "written": 39, ...}) added key by key: None where a part has no such count."""
    if not all(isinstance(c, dict) for c in counts):
        return None
    keys = dict.fromkeys(k for c in counts for k in c)
    return {k: sum(c[k] for c in counts) if all(_is_count(c.get(k)) for c in counts) else None for k in keys}


def open_features(path: str | os.PathLike, *, float64: bool = False) -> FeatureSource:
    """Open a feature file for streaming: detect its layout from metadata and columns. A directory of part files
    (``extract --engine dask``'s output) streams its parts in order, as one file (its provenance: the run's
    DIRECTORY_PROVENANCE, else the one read_feature_metadata makes from the parts'). A path no local file can have (a
    ``~`` no shell expanded, a URL) is refused as such (checks.local_path), not "not found". ``float64``: a float64
    file's features are read as float64 (bertfeat reads features as float32 otherwise)."""
    float64 = check_switch(float64, "float64")
    path = local_path(path, "feature file")
    if path.is_dir():
        return replace(_open_parts(path), float64=float64)
    if not path.is_file():
        raise missing_file_error(path)
    meta = read_feature_metadata(path)
    return replace(file_format(path).open_source(path, meta), float64=float64)


def iter_features(
    path: str | os.PathLike, batch_rows: int = 65536, *, with_extras: bool = False
) -> Iterator[tuple]:
    """Stream a feature file: yield (ids, X float32 (m, d)) chunks in order (plus extras if asked)."""
    batch_rows, with_extras = check_count(batch_rows, "batch_rows"), check_switch(with_extras, "with_extras")
    for ids, X, extras in open_features(path).batches(batch_rows):
        yield (ids, X, extras) if with_extras else (ids, X)


def read_features(path: str | os.PathLike, *, float64: bool = False) -> tuple[Any, np.ndarray, dict]:
    """Read a whole feature file: (ids, X float32 (n, d), metadata). Holds every row in memory. ``float64``: a
    float64 file's X as float64."""
    src = open_features(path, float64=float64)
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
            for ids, X, extras in open_features(part, float64=src.float64).batches(batch_rows):
                if src.id_name is None:  # row numbers: counted over the whole directory
                    ids = np.arange(start, start + X.shape[0], dtype=np.int64)
                start += X.shape[0]
                yield ids, X, extras


def _part_difference(a: FeatureSource, b: FeatureSource) -> str | None:
    """What part ``b`` has otherwise than the first part ``a`` (width, id column, other columns, their types), or None."""
    first, other = a.path.name, b.path.name
    if a.dim != b.dim:
        return f"{first} has {a.dim} features, {other} {b.dim}"
    if a.id_name != b.id_name:
        return f"{first}'s id column is {a.id_name!r}, {other}'s {b.id_name!r}"
    if a.id_name is not None and a.id_type != b.id_type:
        return f"the id column {a.id_name!r} is {a.id_type} in {first}, {b.id_type} in {other}"
    if list(a.extra_columns) != list(b.extra_columns):
        return f"{first}'s other columns are {list(a.extra_columns)}, {other}'s {list(b.extra_columns)}"
    for name, typ in a.extra_columns.items():
        if b.extra_columns[name] != typ:
            return f"the column {name!r} is {typ} in {first}, {b.extra_columns[name]} in {other}"
    return None


def _open_parts(path: Path) -> FeatureSource:
    from ..errors import BertfeatError

    parts = [open_features(p) for p in feature_files(path)]
    first = parts[0]
    for odd in parts[1:]:
        differ = _part_difference(first, odd)
        if differ is not None:  # (ids of another type were cast to the first part's: 100 written as 1970-01-01 ...)
            raise BertfeatError(f"the part files of {path} differ: {differ}",
                                "extract the directory again (or write every part with the same columns and types)")
    rows = None if any(p.rows is None for p in parts) else sum(p.rows for p in parts)
    return replace(first, path=path, meta=read_feature_metadata(path), rows=rows, file_format=_Parts)
