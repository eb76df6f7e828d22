"""What every feature-file format shares: the format protocol, the opened-file object, the helpers.

This module owns

* ``FeatureFile``: the protocol one format implements, as one class (``parquet.py``, ``npy.py``,
  ``delimited.py``). The write side is an instance, streaming one file to temporary names:
  ``__init__(spec)`` opens, ``append(columns, X)`` adds a chunk, ``finish(metadata_text)`` moves
  the file(s) into place atomically, ``abort()`` deletes the temporaries. The read side is
  classmethods on a path: ``read_metadata_text`` (the provenance JSON), ``open_source`` (the
  layout: width, id and extra columns, rows) and ``read_chunks`` (the matrix, in batches).
* ``WriteSpec``: what a format is told when it opens a file for writing.
* ``FeatureSource``: an opened feature file (layout + streaming reader), whatever its format.
* the constants, paths and JSON / Arrow helpers more than one format uses.

It knows no format by name: choosing one is ``registry.py``'s job.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from ..errors import BertfeatError, opt, warn
from ..ops.threads import read_ahead
from ..readers.kept import python_values

METADATA_KEY = "bertfeat"
EMBEDDING_COLUMN = "embedding"
#: Keys of a feature-source fingerprint, picked from the metadata when it has no ``fingerprint`` dict.
FINGERPRINT_KEYS = ("model_id", "weights_sha256", "pooling", "layers", "normalize", "dense", "prompt")
#: A feature column of a wide layout: ``f0 .. f{d-1}``.
WIDE_COLUMN_RE = re.compile(r"^f(0|[1-9][0-9]*)$")  # f0, f1 ...: f01, or a digit other than 0-9, is no feature
#: Target bytes of float data per Parquet row group (the writer's default ``row_group_rows``).
ROW_GROUP_BYTES = 64 << 20

#: The feature values' types a file may hold (``dtype``): computed in float32, written as float32 or float16.
FEATURE_DTYPES = ("float32", "float16")
#: The largest finite float16 (a feature beyond it would become inf: refused, check_float16_range).
FLOAT16_MAX = float(np.finfo(np.float16).max)

#: A batch of feature rows as read (not run.chunks.Chunk, a chunk of input rows): (ids, X float32 (m, d), extras name
#: -> Arrow array).
FeatureBatch = tuple[Any, np.ndarray, dict[str, pa.Array]]


# ----------------------------------------------------------------------------------------
# the feature values' type
# ----------------------------------------------------------------------------------------


def check_dtype(dtype: Any) -> str:
    """``dtype``: the type the features are written as (FEATURE_DTYPES) -> its name; else an error naming them."""
    if dtype not in FEATURE_DTYPES:
        raise BertfeatError(f"unknown {opt('dtype', dtype, cli=str(dtype))}",
                            f"choose one of {', '.join(FEATURE_DTYPES)} (float16 halves the file)")
    return dtype


def feature_arrow_type(dtype: str) -> pa.DataType:
    """The Arrow type of a feature value written as ``dtype`` (float32 or halffloat)."""
    return pa.float16() if dtype == "float16" else pa.float32()


def check_float16_range(X: np.ndarray, ids: Any = None, first_row: int = 0) -> None:
    """Refuse float32 features (m, d) that float16 cannot hold (|x| > 65504 would become inf), naming the first such
    row (``first_row`` + its index, and its id when ``ids`` are given) and value."""
    over = np.abs(X) > FLOAT16_MAX
    if not over.any():
        return
    i, j = np.argwhere(over)[0]
    ident = "" if ids is None else f" (id {_id_at(ids, int(i))!r})"
    raise BertfeatError(f"row {first_row + int(i)}{ident} has the feature value {float(X[i, j]):g} (column {int(j)}), "
                        f"beyond float16's largest value {FLOAT16_MAX:g} (from 65520 on, float16 holds inf)",
                        f"write float32 features ({opt('dtype', 'float32')})")


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def check_float32_range(X: np.ndarray, ids: Any = None, first_row: int = 0, where: str = "") -> None:
    """Refuse float64 features (m, d) that float32, the type feature files hold, cannot: a value beyond its largest
    (it would become inf), or a row whose values are all below its smallest normal value but not all 0 (they would
    lose their digits or become 0); naming the first such row as check_float16_range does, after ``where``. (A float64
    feature file reduced by ``pca transform`` wrote inf, or zeros, without a word.)"""
    mag = np.abs(X)
    over = mag > FLOAT32_MAX
    top = mag.max(axis=1) if X.shape[1] else np.zeros(X.shape[0])
    under = (top > 0) & (top < FLOAT32_TINY)
    if not over.any() and not under.any():
        return
    fix = ("scale the features into float32's range (or transform them in Python with bertfeat.PCA, which keeps "
           "float64)")
    if over.any():
        i, j = (int(v) for v in np.argwhere(over)[0])
        what = f"the value {float(X[i, j]):g} (column {j}) is beyond float32's largest value {FLOAT32_MAX:g}"
    else:
        i = int(np.argmax(under))
        what = (f"its values are all below float32's smallest normal value {FLOAT32_TINY:g} (the largest "
                f"{float(top[i]):g}): as float32 they would lose their digits or become 0")
    ident = "" if ids is None else f" (id {_id_at(ids, i)!r})"
    raise BertfeatError(f"{where}row {first_row + i}{ident}: {what}", fix)


def _id_at(ids: Any, i: int) -> Any:
    value = ids[i]
    return value.as_py() if isinstance(value, pa.Scalar) else value.item() if isinstance(value, np.generic) else value


# ----------------------------------------------------------------------------------------
# paths, metadata
# ----------------------------------------------------------------------------------------


def provenance_path(path: str | os.PathLike) -> Path:
    """``out.npy`` -> ``out.npy.json`` (provenance of a .npy or .csv feature file)."""
    path = Path(path)
    return path.with_name(f"{path.name}.json")


def json_default(o: Any) -> Any:
    """``json.dumps`` fallback for the values provenance holds (NumPy scalars / arrays, paths, Arrow types)."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (Path, pa.DataType)):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def dumps_metadata(meta: Mapping) -> str:
    """The provenance dict as the JSON text every format stores."""
    return json.dumps(meta, default=json_default, sort_keys=True)


def parse_metadata(path: Path, text: str | None) -> dict:
    """The provenance dict from its JSON text ({} when there is none), every key bertfeat reads of its type
    (check_provenance)."""
    if not text:
        return {}
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertfeatError(f"the bertfeat metadata of {path} is not valid JSON ({e})", "re-extract the features") from None
    except RecursionError:  # arrays nested past Python's stack: no provenance bertfeat writes
        raise damaged_provenance(path, "its JSON is nested deeper than any provenance") from None
    if not isinstance(meta, dict):
        raise damaged_provenance(path, f"it is {_json_kind(meta)}, not an object")
    check_provenance(path, meta)
    return meta



# ----------------------------------------------------------------------------------------
# the provenance's types: a feature file's provenance is untrusted input (edited by hand, written by another tool),
# so each key bertfeat reads is checked once, where it is parsed; no reader meets a value of another type
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """What a provenance value may be: one of ``kinds`` (PROVENANCE_KINDS); a list's items or an object's values of
    ``items``; an object's known ``keys`` (others are not read, so not checked); a text one of ``choices``."""

    kinds: tuple[str, ...]
    items: Field | None = None
    keys: Mapping[str, Field] | None = None
    choices: tuple[str, ...] | None = None
    required: tuple[str, ...] = ()  # an object's keys every writer writes


def _whole(v: Any, low: float) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


#: kind -> (test, words)
PROVENANCE_KINDS = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "int": (lambda v: _whole(v, -np.inf), "a whole number"),
    "count": (lambda v: _whole(v, 0), "a whole number >= 0"),
    "size": (lambda v: _whole(v, 1), "a whole number >= 1"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "null": (lambda v: v is None, "null"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "object": (lambda v: isinstance(v, dict), "an object"),
}
_TEXT, _OPT_TEXT = Field(("text",)), Field(("text", "null"))
_FINGERPRINT = Field(("object",), keys={
    "model_id": _TEXT, "weights_sha256": _TEXT, "precision": _TEXT, "int8_scheme": _TEXT, "pooling": _TEXT,
    "layers": Field(("list",), Field(("int",))), "layer_agg": _TEXT, "normalize": Field(("bool",)),
    "max_length": Field(("size",)), "long_text": _TEXT, "stride": Field(("count",)),
    "dense": Field(("list",), _TEXT), "prompt": _OPT_TEXT, "prompt_name": _OPT_TEXT, "include_prompt": Field(("bool",)),
    "truncate_dim": Field(("size",)), "renormalize": Field(("bool",)), "layer_norm": Field(("list",), _TEXT),
    "layer_weights": Field(("list",), Field(("number",))), "pair_token_types": _TEXT,
    "token_types": _TEXT,
})
#: The provenance keys bertfeat reads (verify, the feature readers, pca fit / transform, the probe) and their types.
PROVENANCE = Field(("object",), keys={
    "model": _TEXT, "fingerprint": _FINGERPRINT, "precision": _TEXT, "input": _TEXT, "input_abspath": _TEXT, "input_glob": Field(("bool",)),
    "input_format": _TEXT, "encoding": _TEXT, "delimiter": _TEXT, "text_column": _TEXT, "pair_column": _OPT_TEXT,
    "id_column": _OPT_TEXT, "id_as_text": Field(("bool",)), "keep": Field(("list",), _TEXT), "model_files": Field(("object",), _TEXT),
    "rows": Field(("count", "object", "null"), Field(("count", "null"))), "partitions": Field(("size",)),
    "dtype": Field(("text",), choices=FEATURE_DTYPES),
    "layout": Field(("object",), keys={
        "format": _TEXT, "id_column": _OPT_TEXT, "id_type": _OPT_TEXT, "dim": Field(("size",)), "wide": Field(("bool",)),
        "extra_columns": Field(("object",), _TEXT), "rows": Field(("count", "null"))}),
    "pca": Field(("object", "null"), keys={
        "model_file": _TEXT, "model_path": _TEXT, "model_sha256": _TEXT, "input_dtype": _TEXT,
        "n_components": Field(("size",)), "n_features_in": Field(("size",)), "n_samples": Field(("count",)),
        "variance_kept": Field(("number",)), "explained_variance": Field(("number",)), "whiten": Field(("bool",)),
        "solver": _TEXT, "fingerprint": Field(("object", "null"))}, required=("n_components",)),
})
PROVENANCE_FIX = "extract the features again (their provenance was edited, or written by another tool)"


def damaged_provenance(path: Path, problem: str) -> BertfeatError:
    """``the provenance of PATH is damaged or not bertfeat's: problem - fix``: one error for every value of a feature
    file's provenance bertfeat cannot use (of another type here, out of range for its model in verify)."""
    return BertfeatError(f"the provenance of {path} is damaged or not bertfeat's: {problem}", PROVENANCE_FIX)


def _json_kind(value: Any) -> str:
    """How a JSON value is named to a user: 'null', 'a string', 'a list' ... (not Python's NoneType, str)."""
    if isinstance(value, list):
        return "a JSON list"
    return {type(None): "JSON null", str: "a JSON string", bool: "JSON true or false", int: "a JSON number",
            float: "a JSON number"}.get(type(value), "a JSON value")


def check_provenance(path: Path, meta: Mapping) -> None:
    """Refuse a provenance (parsed JSON) whose keys bertfeat reads hold values of another type (PROVENANCE)."""
    problem = _mistyped(meta, PROVENANCE, "")
    if problem:
        raise damaged_provenance(path, problem)


def _mistyped(value: Any, spec: Field, where: str) -> str | None:
    """What is wrong with ``value`` at ``where`` (dotted keys) against ``spec``, or None."""
    if not any(PROVENANCE_KINDS[k][0](value) for k in spec.kinds):
        shown = json.dumps(value)[:60] if isinstance(value, (str, int, float, bool, type(None))) \
            else PROVENANCE_KINDS["list" if isinstance(value, list) else "object"][1]
        return f"{where} is {shown}, not {' or '.join(PROVENANCE_KINDS[k][1] for k in spec.kinds)}"
    if spec.choices is not None and isinstance(value, str) and value not in spec.choices:
        return f"{where} is {json.dumps(value)[:60]}, not one of {', '.join(spec.choices)}"
    if isinstance(value, dict) and spec.keys is not None:
        for key, sub in spec.keys.items():
            if key in value and (problem := _mistyped(value[key], sub, f"{where}.{key}".lstrip("."))):
                return problem
        if missing := [k for k in spec.required if k not in value]:
            return f"{where or 'it'} has no {missing[0]}"
    elif spec.items is not None and isinstance(value, (list, dict)):
        for i, item in (value.items() if isinstance(value, dict) else enumerate(value)):
            if problem := _mistyped(item, spec.items, f"{where}[{json.dumps(i)}]"):
                return problem
    return None


_PARAMETRIZED = (  # str() of pyarrow types that type_for_alias does not read back
    (re.compile(r"decimal(32|64|128|256)\((\d+), (-?\d+)\)"), lambda m: getattr(pa, f"decimal{m[1]}")(int(m[2]), int(m[3]))),
    (re.compile(r"fixed_size_binary\[(\d+)\]"), lambda m: pa.binary(int(m[1]))),
    (re.compile(r"extension<arrow\.(uuid|json|bool8)>"), lambda m: getattr(pa, {"json": "json_"}.get(m[1], m[1]))()),
    (re.compile(r"timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]"), lambda m: pa.timestamp(m[1], m[2])),
    (re.compile(r"duration\[(s|ms|us|ns)\]"), lambda m: pa.duration(m[1])),
    (re.compile(r"time32\[(s|ms)\]"), lambda m: pa.time32(m[1])),
    (re.compile(r"time64\[(us|ns)\]"), lambda m: pa.time64(m[1])),
    (re.compile(r"date32\[day\]"), lambda m: pa.date32()),
    (re.compile(r"date64\[ms\]"), lambda m: pa.date64()),
)


def type_from_str(text: str | None) -> pa.DataType | None:
    """``"int64"`` -> pa.int64(), ``"decimal128(5, 2)"`` -> pa.decimal128(5, 2), ``"timestamp[us, tz=UTC]"`` ...: a
    type as ``str(type)`` wrote it (None when unknown: a CSV reads such a column as text, ``FeatureSource.csv_types``)."""
    if not text:
        return None
    try:
        return pa.type_for_alias(text)
    except (ValueError, KeyError):
        pass
    for pattern, make in _PARAMETRIZED:
        m = pattern.fullmatch(text)
        if m:
            try:
                return make(m)
            except (ValueError, TypeError, AttributeError, pa.ArrowInvalid):  # (AttributeError: an older pyarrow)
                return None
    return None


def declared_extra_types(layout: Mapping) -> dict[str, pa.DataType]:
    """The extra columns' types the layout records (those it names and pyarrow knows)."""
    return {k: t for k, v in (layout.get("extra_columns") or {}).items() if (t := type_from_str(v)) is not None}


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
# errors and column helpers shared by the readers / the writer
# ----------------------------------------------------------------------------------------


def missing_file_error(path: Path) -> BertfeatError:
    """A feature file that is not there, or is no regular file (a named pipe, a socket: never opened)."""
    if os.path.exists(path):
        from ..errors import special_file_kind

        kind = "a directory" if os.path.isdir(path) else special_file_kind(os.stat(path).st_mode)
        return BertfeatError(f"{path} is {kind}, not a feature file",
                             "write the features to a regular file (`bertfeat extract ... -o FILE`) and pass that")
    if str(path) == "-":  # (only extract reads standard input)
        return BertfeatError("a feature file is read from a file, not standard input ('-')",
                             "write the features to a file first, e.g. `bertfeat extract - -o features.parquet`, and "
                             "pass that (a file named '-': ./-)")
    return BertfeatError(f"feature file not found: {path}", "check the path, or write it with `bertfeat extract`")


def no_features_error(path: Path, columns: list[str]) -> BertfeatError:
    return BertfeatError(
        f"{path} has no feature columns: expected '{EMBEDDING_COLUMN}' or f0..f{{d-1}}, found {columns}",
        "pass a feature file written by `bertfeat extract`",
    )


def wide_dim(path: Path, columns: list[str]) -> int:
    """d of a wide layout: the columns f0..f{d-1} must all be there, each once (a CSV's header may name one twice)."""
    idx = sorted(int(m.group(1)) for c in columns if (m := WIDE_COLUMN_RE.match(c)))
    if not idx:
        raise no_features_error(path, columns)
    if idx != list(range(len(idx))):
        twice = next((i for i, j in zip(idx, idx[1:]) if i == j), None)
        if twice is not None:
            raise BertfeatError(f"{path}: the feature column f{twice} appears {idx.count(twice)} times",
                                "rename the columns so that every name is unique (f0 .. f{d-1}, once each)")
        have = set(idx)
        gap = next(j for j in range(len(idx) + 1) if j not in have)
        raise BertfeatError(f"{path}: feature columns f0..f{{d-1}} are not contiguous (f{gap} is missing, f{idx[-1]} "
                            "is there)", "re-extract the features")
    return len(idx)


def pick_id_column(layout: Mapping, others: list[str]) -> str | None:
    """The id column: the one the layout names, else the first non-feature column, else None."""
    name = layout.get("id_column")
    if name in others:
        return name
    return others[0] if others and not layout else None


def to_arrow(values: Any, typ: pa.DataType, m: int, name: str) -> pa.Array:
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


def value_why(written: str, back: str | None) -> str:
    """``FeatureFile.value_problem``'s finding in words."""
    if back is None:
        return f"it is written as {written!r}, which Arrow's CSV reader refuses"
    return f"it is written as {written!r}, which reads back as {back}"


def as_float32(x: np.ndarray, path, first_row: int, first_col: int = 0, keep64: bool = False) -> np.ndarray:
    """(m, d) feature values as float32, as bertfeat reads every feature file; a finite value beyond float32's range
    (a foreign file's float64) is refused by its row and column: cast, it would read as inf. ``keep64``: float64
    values as they are (the PCA's reads: rounded, values of 1e8 + noise read as one constant)."""
    if keep64 and x.dtype == np.float64:
        return x
    if x.dtype.itemsize <= 4:
        return x.astype(np.float32, copy=False)
    with np.errstate(over="ignore"):
        y = x.astype(np.float32)
    over = np.isinf(y) & np.isfinite(x)
    if over.any():
        r, c = np.unravel_index(int(np.argmax(over)), over.shape)
        raise BertfeatError(f"{path}: row {first_row + r}, column {first_col + c} holds {x[r, c]:.6g}, beyond float32's "
                            "range (|x| < 3.4e38), in which bertfeat reads features",
                            "scale the features into that range, or write them as float32")
    return y


def _float16_text(x: np.ndarray, path, first_row: int, first_col: int) -> np.ndarray:
    """A float16 CSV's values (m, 1), read from its text as float64, rounded to the float16 they were written from; a
    value float16 cannot hold (edited past 65504: it would round to inf) is read as written, in float32."""
    with np.errstate(over="ignore"):
        y = x.astype(np.float16)
    past = np.isinf(y) & np.isfinite(x)
    return np.where(past, as_float32(x, path, first_row, first_col), y) if past.any() else y


def wide_arrays(X: np.ndarray) -> list[pa.Array]:
    """The columns f0..f{d-1} of a (m, d) chunk as Arrow arrays (of its dtype)."""
    XT = np.ascontiguousarray(X.T)  # (dim, m): one contiguous buffer per column
    return [pa.array(XT[j]) for j in range(X.shape[1])]


def batch_ids(col: pa.Array | pa.ChunkedArray) -> np.ndarray | list:
    """Ids as a NumPy array for integer ids, else a Python list (of objects that give the same values back:
    ``readers.kept.python_values``)."""
    if pa.types.is_integer(col.type) and col.null_count == 0:
        return col.to_numpy()
    return python_values(col)


def rebatch(batches: Iterator[pa.RecordBatch], n: int) -> Iterator[pa.Table]:
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


# ----------------------------------------------------------------------------------------
# the protocol
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteSpec:
    """What a format writer is told when it opens a file (``FeatureWriter`` has checked it all)."""

    path: Path  # the destination; nothing may exist there until finish()
    dim: int
    id_field: pa.Field
    extra_fields: list[pa.Field]
    wide: bool  # the caller's wide= (a format may ignore it)
    row_group_rows: int  # rows per row group (formats that have row groups)
    dtype: str  # the feature values' type (FEATURE_DTYPES): append's X is of it
    metadata: dict  # the provenance known at open: metadata, rows (None unless given), layout with rows 0


class FeatureFile:
    """One feature-file format (see the module docstring); subclasses set ``name`` and ``suffix``.

    Write side: an instance streams one file; the ``FeatureWriter`` in front of it checks the
    arguments, converts ids and extras to Arrow, counts rows and builds the metadata.
    """

    #: The format's name (``--format``, the layout's ``format``), the key of ``registry.FILE_FORMATS``.
    name: ClassVar[str]
    #: The file-name suffix that selects this format when none is given.
    suffix: ClassVar[str]

    # -- write side: what the file holds -----------------------------------------------------------

    @classmethod
    def named_feature_columns(cls, wide: bool) -> tuple[str, ...]:
        """Column names the features take besides f0..f{d-1} (an extra column may not reuse them)."""
        return ()

    @classmethod
    def numbered_feature_columns(cls, wide: bool) -> bool:
        """True when names f<j> are reserved for features (an extra column may not use them)."""
        return True

    @classmethod
    def layout_wide(cls, wide: bool) -> bool:
        """The layout's ``wide``: the features are stored as columns f0..f{d-1}."""
        return True

    @staticmethod
    def column_problem(t: pa.DataType) -> str | None:
        """Why an id or extra column of type ``t`` cannot be written in this format and read back as ``t`` (None: it
        can)."""
        return None

    @staticmethod
    def value_problem(values: pa.Array) -> tuple[int, str, str | None] | None:
        """The first value of an id or extra column (of a type ``column_problem`` passes) that this format would not
        give back as itself: (its position, its text in the file, what is read back: None when nothing is), or None."""
        return None

    # -- write side: streaming ---------------------------------------------------------------------

    def __init__(self, spec: WriteSpec):
        """Open the temporary file(s) beside ``spec.path``."""
        raise NotImplementedError

    def append(self, columns: dict[str, pa.Array], X: np.ndarray) -> None:
        """Add a chunk: the id column then the extras (Arrow, m rows each), X C-order (m, dim) of ``spec.dtype``."""
        raise NotImplementedError

    def finish(self, metadata_text: str) -> None:
        """Write the provenance, close, and move everything into place (side files first, ``spec.path`` last)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Close quietly and delete the temporary files; ``spec.path`` is left untouched."""
        raise NotImplementedError

    # -- read side ---------------------------------------------------------------------------------

    @classmethod
    def read_metadata_text(cls, path: Path) -> str | None:
        """The provenance JSON text of the file at ``path`` (None when it has none): by default its ``.json`` side file."""
        side = provenance_path(path)
        return side.read_text(encoding="utf-8") if side.is_file() else None

    @classmethod
    def open_source(cls, path: Path, meta: dict) -> FeatureSource:
        """Detect the layout of the file at ``path`` (``meta``: its provenance) for streaming."""
        raise NotImplementedError

    @classmethod
    def read_chunks(cls, src: FeatureSource, batch_rows: int) -> Iterator[FeatureBatch]:
        """Yield the chunks of ``src`` in file order, at most ``batch_rows`` rows each."""
        raise NotImplementedError


@dataclass
class FeatureSource:
    """An opened feature file: its layout and a streaming reader (see ``open_features``)."""

    path: Path
    fmt: str
    meta: dict
    dim: int
    id_name: str | None  # None: no id column, ids are row numbers
    id_type: pa.DataType | None  # None: unknown (CSV without layout), read as text (csv_types)
    wide: bool
    extra_columns: dict[str, pa.DataType | None] = field(default_factory=dict)
    rows: int | None = None
    _columns: list[str] = field(default_factory=list)
    #: The format class that reads the file (set by its ``open_source``).
    file_format: type[FeatureFile] | None = field(default=None, repr=False, compare=False)
    #: The type the file holds its features as (float32, float16; float64 of a foreign file); read back as float32.
    dtype: str = "float32"
    #: A float64 file's features read as float64, not rounded to float32 (the PCA's reads: open_features(float64=True)).
    float64: bool = False

    @property
    def fingerprint(self) -> dict | None:
        """The feature-source fingerprint from the metadata."""
        return feature_fingerprint(self.meta)

    @property
    def columns(self) -> list[str]:
        """The columns to read, in order (Parquet: id, features, extras)."""
        return self._columns

    def batches(self, batch_rows: int = 65536, *, ahead: int = 0, check_layout: bool = True) -> Iterator[FeatureBatch]:
        """Yield (ids, X float32 (m, d), extras name -> Arrow array) chunks in file order.

        ``ahead`` > 0 reads that many chunks ahead in a background thread (``read_ahead``),
        so decoding the next chunk overlaps the caller's work on this one. ``check_layout``: warn when the file holds
        fewer or more feature columns (first) or rows (at the end) than its provenance records (verify says it as
        its error instead).
        """
        # past int64 (--batch-rows 1e20, "all at once") pyarrow's C long overflowed: no file holds more rows
        batch_rows = min(max(1, int(batch_rows)), np.iinfo(np.int64).max)
        if check_layout:
            self._check_width_recorded()
        chunks = self.file_format.read_chunks(self, batch_rows)
        n = 0
        for chunk in read_ahead(chunks, ahead) if ahead > 0 else chunks:
            n += chunk[1].shape[0]
            yield chunk
        if check_layout:
            self._check_rows_recorded(n)

    def _check_width_recorded(self) -> None:
        """Say so when the file holds another count of features than its provenance records: feature columns dropped
        from a CSV or a wide Parquet read as a narrower whole file. (Not an error: a Matryoshka model's first
        features kept on purpose are good features.)"""
        recorded = (self.meta.get("layout") or {}).get("dim")
        if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded != self.dim:
            warn(f"{self.path} holds {self.dim:,} features a row, but its provenance records {recorded:,} written: "
                 "feature columns were dropped or added since; check it is the whole file", every_time=False)

    def _check_rows_recorded(self, n: int) -> None:
        """Say so when the file, read to its end, holds another count of rows than its provenance records written: a
        file cut at a row's end (a copy stopped short) reads as a whole one. (Not an error: a file filtered with its
        provenance kept, a training split, is a file of good rows.)"""
        recorded = (self.meta.get("layout") or {}).get("rows")
        if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded != n:
            warn(f"{self.path} holds {n:,} rows, but its provenance records {recorded:,} written: it was cut short "
                 "(a copy stopped early?) or filtered since; check it is the whole file", every_time=False)

    def make_chunk(self, table: pa.Table | pa.RecordBatch, X: np.ndarray, start: int) -> FeatureBatch:
        """(ids, X, extras) of rows start.. : ids from the id column (else row numbers), the extras from ``table``."""
        m = X.shape[0]
        if self.id_name is not None and self.id_name in table.column_names:
            ids = batch_ids(table.column(self.id_name))
        else:
            ids = np.arange(start, start + m, dtype=np.int64)
        extras = {}
        for name in self.extra_columns:
            col = table.column(name)
            extras[name] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return ids, X, extras

    def wide_matrix(self, table: pa.Table | pa.RecordBatch, start: int) -> np.ndarray:
        """(m, d) float32 from the columns f0..f{d-1} of ``table``, rows ``start``.., each read as its own type (a
        float16 CSV's text, read as float64, rounded to float16 first: ``_float16_text``)."""
        keep64 = self.float64 and self.dtype == "float64"  # (a Parquet's dtype is its f0's: the others' widen exactly)
        X = np.empty((table.num_rows, self.dim), dtype=np.float64 if keep64 else np.float32)
        for j in range(self.dim):
            col = table.column(f"f{j}")
            if col.null_count:  # the first one's row, as a Parquet embedding's null is named
                bad = start + int(col.is_null().to_numpy(zero_copy_only=False).argmax())
                raise BertfeatError(f"{self.path}: row {bad}, column f{j} has no value (an empty cell or a null)",
                                    "re-extract the features")
            v = col.to_numpy()[:, None]  # (m, 1)
            # only a CSV's text is rounded: a Parquet's dtype is its f0's, which says nothing of the other columns
            rounded = self.dtype == "float16" and self.fmt == "csv"
            X[:, j:j + 1] = (_float16_text(v, self.path, start, j) if rounded else
                             as_float32(v, self.path, start, j, keep64))
        return X

    def csv_types(self) -> dict[str, pa.DataType]:
        """Column types to read a CSV of this source with: the id and extra types its provenance declares, and text
        for a column it declares none for (a CSV without provenance): its values as written, never a type guessed
        from them (which read the id 001 as 1 and 1e5 as 100000, and written again they stayed so)."""
        types = {k: pa.string() if t is None else t for k, t in self.extra_columns.items()}
        if self.id_name is not None:
            types[self.id_name] = pa.string() if self.id_type is None else self.id_type
        return types
