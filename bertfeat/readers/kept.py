"""Kept columns (``keep``) of the text formats: the Arrow type the first rows decide, and every value converted to
it, or the reason its row is a bad row.

CSV / TSV cells are text. The head's cells decide a column's type as pandas and pyarrow infer one: int64 when
every cell is an integer, else double when every cell is a number (``1``, ``-2.5``, ``1e3``, ``nan``, ``inf``),
else bool when every cell is true / false (``true``, ``True``, ``TRUE``, ...), else string; an empty cell is a
null and decides nothing (a column of empty cells is string). JSONL values are JSON: the first value that is not
null decides (an integer int64, a number double, a boolean bool, a string string), integers and numbers mixed in
the first rows are double. A later value that does not convert (CSV) or is of another kind (JSONL) is a bad row
(``RejectCode.BAD_KEPT_VALUE``) whose reason names the column and the value.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa

from ..rejects import Reason, RejectCode
from ..textcheck import surrogate_reason

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
_TRUE, _FALSE = ("true", "True", "TRUE"), ("false", "False", "FALSE")
_BAD = object()  # a cell that does not convert
_INT64_RANGE = (-(2 ** 63), 2 ** 63)
#: the types a text format's kept column may have, and how a message names their values (one, several)
TYPES = {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}
_WORDS = {"int64": ("an integer", "integers"), "double": ("a number", "numbers"),
          "bool": ("a boolean (true or false)", "booleans"), "string": ("a string", "strings")}


# --------------------------------------------------------------------------- CSV / TSV cells
def _cell_int(text: str):
    s = text.strip()
    if _INT.fullmatch(s):
        v = int(s)
        if _INT64_RANGE[0] <= v < _INT64_RANGE[1]:
            return v
    return _BAD


def _cell_float(text: str):
    s = text.strip()
    return float(s) if _FLOAT.fullmatch(s) else _BAD


def _cell_bool(text: str):
    s = text.strip()
    return True if s in _TRUE else False if s in _FALSE else _BAD


_CELL = {"int64": _cell_int, "double": _cell_float, "bool": _cell_bool, "string": lambda s: s}


def infer_cell_type(cells: list) -> pa.DataType:
    """The type of a CSV column from its first cells (bytes or str; undecodable and empty cells decide nothing)."""
    texts = []
    for v in cells:
        if isinstance(v, (bytes, bytearray)):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                continue
        if v:
            texts.append(v)
    if texts:
        for name in ("int64", "double", "bool"):
            if all(_CELL[name](t) is not _BAD for t in texts):
                return TYPES[name]
    return TYPES["string"]


def convert_cell(column: str, value, typ: pa.DataType) -> tuple[object, Reason | None]:
    """A CSV cell (bytes, str or None) -> (its value in ``typ``, None), or (its text, why the row is bad)."""
    if value is None:
        return None, None
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            return (bytes(value).decode("utf-8", errors="replace"),
                    Reason(RejectCode.ENCODING, f"invalid UTF-8 at byte {e.start} of the kept column {column!r}"))
    if value == "":
        return None, None
    name = str(typ)
    v = _CELL[name](value)
    if v is _BAD:
        shown = value if len(value) <= 40 else value[:37] + "..."
        one, several = _WORDS[name]
        return value, Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {json.dumps(shown, ensure_ascii=False)} "
                                                        f"is not {one} (the column's first rows hold {several})")
    return v, None


# --------------------------------------------------------------------------- JSONL values
def json_type(first_kind: str | None, kinds: set[str]) -> pa.DataType:
    """The type of a JSONL column from the kind of its first value that is not null (``type(v).__name__``) and
    the kinds of the values in the first lines; no value: string. Objects and arrays are refused by the caller."""
    if first_kind == "int":
        return TYPES["double"] if "float" in kinds else TYPES["int64"]
    return {"float": TYPES["double"], "bool": TYPES["bool"]}.get(first_kind, TYPES["string"])


def convert_json(column: str, value, typ: pa.DataType) -> tuple[object, Reason | None]:
    """A JSON value -> (its value in ``typ``, None), or (the value, an object or array as its JSON text; why the
    row is bad)."""
    if value is None:
        return None, None
    name = str(typ)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "int64" and isinstance(value, int) and not isinstance(value, bool):
        if _INT64_RANGE[0] <= value < _INT64_RANGE[1]:
            return value, None
        return value, Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {value} is outside the int64 range")
    if name == "double" and number:
        return float(value), None
    if name == "string" and isinstance(value, str):
        bad = surrogate_reason(value, f"value of kept column {column!r}")
        return value, (Reason(RejectCode.INVALID_UNICODE, bad) if bad else None)
    if name == "bool" and isinstance(value, bool):
        return value, None
    text = json.dumps(value, ensure_ascii=False)
    one, several = _WORDS[name]
    return (text if isinstance(value, (dict, list)) else value,
            Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {text if len(text) <= 40 else text[:37] + '...'} "
                                              f"is {json_kind(value)}, not {one} (the column's first rows hold {several})"))


def json_kind(v) -> str:
    """What a JSON value is, in words: 'a string', 'a number', 'an integer', 'a boolean', 'an object', 'an array'."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    return {float: "a number", str: "a string", dict: "an object", list: "an array"}.get(type(v), type(v).__name__)


# --------------------------------------------------------------------------- Parquet columns
def storage(values):
    """A column of an extension type (uuid, json, bool8 ...) as its storage: the values a kept column carries as Python
    objects (``kept_array`` makes the extension array again)."""
    if isinstance(values.type, pa.BaseExtensionType):
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        return values.storage
    return values


def kept_array(values: list, typ: pa.DataType) -> pa.Array:
    """A kept column's values (Python objects; an extension type's its storage's) as an Arrow array of ``typ``."""
    if isinstance(typ, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(typ, pa.array(values, typ.storage_type))
    return pa.array(values, typ)
