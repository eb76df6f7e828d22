"""Kept columns (``keep``) of the text formats: each column's Arrow type (given, ``label:int``, or decided by the
first rows), and every value converted to it, or the reason its row is a bad row.

CSV / TSV cells are text, and a kept cell is kept as it is written (``"02134"``, ``"1e5"``, ``""``), unless
its column's type is given or every cell of the head reads back as exactly the text it was written as: int64 when
every cell is an integer written plainly (``-12``, not ``007``, ``+1``, `` 7`` or ``-0``), else double when every
cell is a number that Python and Arrow write back as that text (``2.5``, not ``1.0``, ``1e5``, ``nan`` or ``-0``),
else string (an empty cell is then an empty string; in an int64 or double column a null). A later cell that is not
of its column's type, or would not be written back as it was, is a bad row (``RejectCode.BAD_KEPT_VALUE``) whose
reason names the column and the value. A given type reads every cell as it: ``int`` (``007`` is 7), ``float``
(``1e5``, ``nan``; not ``1e400`` or ``1e-400``, which no float64 holds), ``bool`` (``true`` / ``false`` in any
case, ``1`` / ``0``), ``str`` (the text; empty stays empty); an empty cell is a null but for ``str``.

JSONL values are JSON: the first value that is not null decides (an integer int64, a number double, a boolean
bool, a string string), integers and numbers mixed in the first rows are double; a given type replaces that (a
number or boolean given ``str`` is kept as its JSON text). A later value of another kind is a bad row, and so is
``-0`` in an inferred int64 column (it would read back as 0; among numbers it is the double -0.0).
Parquet columns keep their schema's type, or are cast by Arrow to a given one (a value that does not cast: a bad
row).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from decimal import Decimal

import numpy as np
import pyarrow as pa

from ..errors import InputError, clipped, one_line, opt
from .rejects import Reason, RejectCode, bytes_text, cell, shown_text
from .textcheck import surrogate_reason

# ASCII digits only (re.ASCII): Python's int() and float() also read other scripts' digits (Arabic-Indic "١٢" as 12),
# which Arrow's cast of a Parquet text column and JSON refuse
_INT = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE | re.ASCII)
_TRUE, _FALSE = ("true", "1"), ("false", "0")  # in any case: what Arrow's cast of a Parquet text column reads
_BAD = object()  # a cell that does not convert
_INT64_RANGE = (-(2 ** 63), 2 ** 63)
#: the types a text format's kept column may have, and how a message names their values (one, several)
TYPES = {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}
_WORDS = {"int64": ("an integer", "integers"), "double": ("a number", "numbers"),
          "bool": ("a boolean (true or false)", "booleans"), "string": ("a string", "strings")}
#: the type names ``keep`` takes after a column name (``label:int``) -> TYPES' keys
TYPE_NAMES = {"int": "int64", "int64": "int64", "float": "double", "double": "double", "bool": "bool",
              "str": "string", "string": "string"}
#: how a given type is written back in a message (``label:int``)
GIVEN_NAMES = {"int64": "int", "double": "float", "bool": "bool", "string": "str"}


# --------------------------------------------------------------------------- CSV / TSV cells
def _cell_int(text: str):
    s = text.strip()
    if _INT.fullmatch(s) and len(s.lstrip("+-").lstrip("0")) <= 19:  # (more digits: past int64, and past what int()
        v = int(s)                                                    # converts, sys.get_int_max_str_digits)
        if _INT64_RANGE[0] <= v < _INT64_RANGE[1]:
            return v
    return _BAD


def _cell_float(text: str):
    s = text.strip()
    return float(s) if _FLOAT.fullmatch(s) else _BAD


def _cell_bool(text: str):
    s = text.strip().lower()
    return True if s in _TRUE else False if s in _FALSE else _BAD


_CELL = {"int64": _cell_int, "double": _cell_float, "bool": _cell_bool, "string": lambda s: s}


def _written_back(name: str, values: list) -> list:
    """How each value of a column of type ``name`` is written back as text: Arrow's (the CSV output) where it and
    Python's (``str``: a Parquet output read back) agree, else None; never for NaN and infinities (a null or an
    error to most readers of the output)."""
    if name == "int64":
        return [str(v) for v in values]
    arrow = pa.array(values, pa.float64()).cast(pa.string()).to_pylist()
    return [a if a == repr(v) and math.isfinite(v) else None for v, a in zip(values, arrow)]


def _exact(name: str, texts: list[str]) -> list:
    """Each text's value in type ``name`` (int64 or double) when it is written back as exactly that text, else _BAD."""
    values = [_CELL[name](t) for t in texts]
    ok = [v for v in values if v is not _BAD]
    back = iter(_written_back(name, ok))
    return [v if v is not _BAD and next(back) == t else _BAD for t, v in zip(texts, values)]


def _text(v):
    """A cell as text (None: not UTF-8)."""
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return v


def infer_cell_type(cells: list) -> pa.DataType:
    """The type of a CSV column from its first cells (bytes or str; undecodable and empty cells decide nothing): the
    first of int64 and double whose values every cell is written as exactly (so that the output holds each cell's
    text), else string."""
    texts = [t for t in map(_text, cells) if t]
    for name in ("int64", "double"):
        if texts and _BAD not in _exact(name, texts):
            return TYPES[name]
    return TYPES["string"]


def convert_cells(column: str, values: list, typ: pa.DataType, given: bool = False) -> dict[int, Reason]:
    """A kept CSV column's cells (bytes, str or None), converted in place to ``typ``: -> the positions of the cells
    that do not convert, and why their rows are bad (such a cell is left as its text). ``given``: the type was given
    (``keep="col:int"``: every spelling of a value converts), else the first rows decided it (a cell converts only
    when it is written back as exactly its text)."""
    name, bad, todo = str(typ), {}, []
    for k, v in enumerate(values):
        if isinstance(v, (bytes, bytearray)):
            try:
                values[k] = v = bytes(v).decode("utf-8")
            except UnicodeDecodeError as e:
                values[k] = shown_text(v)
                bad[k] = Reason(RejectCode.ENCODING, f"invalid UTF-8 at byte {e.start} of the kept column {column!r}")
                continue
        if v is None or name == "string":
            continue
        if v == "":
            values[k] = None
        else:
            todo.append(k)
    texts = [values[k] for k in todo]
    converted = [_CELL[name](t) for t in texts] if given else _exact(name, texts)
    for k, t, v in zip(todo, texts, converted):
        why = float_problem(column, t, v, given) if name == "double" and v is not _BAD else None
        if v is not _BAD and why is None:
            values[k] = v
        else:
            bad[k] = Reason(RejectCode.BAD_KEPT_VALUE, why or _bad_cell(column, t, name, given))
    return bad


_INF_TEXT = re.compile(r"[+-]?inf(inity)?", re.IGNORECASE)


def keep_text(pairs: list[tuple[str, str | None]]) -> str:
    """(column name, type name or None) pairs -> the ``keep`` text that ``parse_keep`` reads back as them: a name
    quoted where it holds a comma, a quote, a colon, or space at an end."""
    def one(name: str, typ: str | None) -> str:
        plain = name and not any(ch in name for ch in ',":') and name == name.strip()
        shown = name if plain else '"' + name.replace('"', '""') + '"'
        return f"{shown}:{typ}" if typ else shown

    return ",".join(one(n, t) for n, t in pairs)


def keep_option(pairs: list[tuple[str, str | None]]) -> str:
    """``keep`` given these (column, type) pairs, for a message's fix (``keep_text``; quoted for a shell on the CLI)."""
    spec = keep_text(pairs)
    return opt("keep", spec, cli=shlex.quote(spec))


def str_keep(column: str) -> str:
    """The ``keep`` option that keeps ``column``'s text (``k:str``), its name quoted where ``keep`` would split it."""
    return keep_option([(column, "str")])


def float_problem(column: str, text: str, value: float, given: bool = False) -> str | None:
    """Why the number written as ``text`` does not read back as it is written once read as the float ``value`` (None:
    it does): past float64's range (``1e400``: inf), below its smallest number (``1e-400``: 0.0), or (a type the
    column's first values decided, not ``given``) of more digits than a float64 holds (``0.10000000000000000001``:
    0.1; ``keep="k:float"`` reads it as the nearest float64, as ``k:int`` reads ``007`` as 7). A bad row's reason,
    the same on every reader, the number quoted as the input wrote it."""
    t = text.strip()
    if math.isinf(value) and not _INF_TEXT.fullmatch(t):
        why = "is beyond float64's range ("
    elif _underflowed(t, value):
        why = f"is below float64's smallest number (it would read back as {value!r}; "
    elif not given and math.isfinite(value) and not _float_holds(value, t):
        why = f"has more digits than a float64 holds (it would read back as {value!r}; "
    else:
        return None
    return f"kept column {column!r}: {quoted(text)} {why}give {str_keep(column)} to keep its text)"


def quoted(text: str) -> str:
    """A value in a message: as the input wrote it, cut to 40 characters, in double quotes (every reader alike)."""
    return json.dumps(clipped(text), ensure_ascii=False)


def _underflowed(text: str, value: float) -> bool:
    """The number written as ``text`` read as the float ``value`` 0 although its digits are not all 0 (``1e-400``: below
    float64's smallest number)."""
    return value == 0 and re.search(r"[1-9]", text.strip().lower().split("e")[0]) is not None


def written_cells(cells: list, values: list) -> dict:
    """The cells as read (a CSV cell's bytes or text, a Parquet value) whose converted ``values`` the rejects file would
    show otherwise (``7`` for ``007``, ``100000.0`` for ``1e5``, ``true`` for ``TRUE``) -> position: the cell as the
    input wrote it."""
    out = {}
    for k, (raw, value) in enumerate(zip(cells, values)):
        raw = shown_text(raw) if isinstance(raw, (bytes, bytearray)) else raw
        if raw is not None and cell(value) != cell(raw):
            out[k] = raw
    return out


def _bad_cell(column: str, text: str, name: str, given: bool) -> str:
    """Why a kept cell does not convert: not of the type at all, or (a type the first rows decided) not written as it
    would be written back."""
    shown = quoted(text)
    value = _CELL[name](text)
    if name == "int64" and value is _BAD and _INT.fullmatch(text.strip()):  # an integer, but not an int64
        return (f"kept column {column!r}: {shown} is outside the int64 range ({_whose(name, given)[1:-1]}; give "
                f"{str_keep(column)} to keep its text)")
    if given or value is _BAD:
        return f"kept column {column!r}: {shown} is not {_WORDS[name][0]} {_whose(name, given)}"
    if name == "double" and not math.isfinite(value):  # NaN and infinities are never inferred (_written_back)
        return f"kept column {column!r}: {shown} is not a finite number {_whose(name, given)}"
    back = str(value) if name == "int64" else pa.array([value]).cast(pa.string())[0].as_py()
    back = repr(value) if back == text else back  # (-0: Arrow writes -0, Python -0.0)
    return (f"kept column {column!r}: {shown} would be written back as {back} (the column's first rows hold "
            f"{_WORDS[name][1]}, each written back as it is written)")


def _whose(name: str, given: bool) -> str:
    """Where a kept column's type came from, for a message: given in keep, or decided by the first rows."""
    if given:
        return f"(the type given in {opt('keep')}: {GIVEN_NAMES[name]})"
    return f"(the column's first rows hold {_WORDS[name][1]})"


# --------------------------------------------------------------------------- JSONL values
class JsonNumber(float):
    """A JSON number with a fraction or an exponent (jsonl's parse_float): the float, and ``text``, the number as the
    line wrote it (1.50, 1e5, 1e400), so that a kept ``str`` column keeps that text and an overflow is seen."""

    text: str

    def __new__(cls, text: str):
        self = super().__new__(cls, text)
        self.text = text
        return self


JsonNumber.__name__ = "float"  # a float to every check by kind (json_type, json_kind)


class JsonNegativeZero(int):
    """JSON's -0 (jsonl's parse_int): the integer 0, and ``text`` "-0", kept by a ``str`` column as written."""

    text = "-0"


JsonNegativeZero.__name__ = "int"


class _Shown:
    """A number that prints as ``text`` (the rejects file, a message show it so) and is its number everywhere else
    (``pa.array`` makes the same value of it); a subclass names the number type it is (``_number``)."""

    text: str
    _number: type

    def __new__(cls, value, text: str):
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__

    def __reduce__(self):  # (a Dask partition's rows travel pickled)
        return type(self), (self._number(self), self.text)


class JsonLongInt(_Shown, int):
    """A JSON integer of more digits than Python may convert from text (``sys.get_int_max_str_digits``: 4,300, 640 at
    least): far past int64 and float64, so its value is never kept; it stands as +-10**600 (a range check sees it
    outside, float() overflows), and ``text`` and its ``str`` are the integer as the line wrote it (the rejects file,
    a message, a ``str`` column)."""

    _number = int


JsonLongInt.__name__ = "int"
_LONG = 10 ** 600


def json_int(text: str) -> int:
    """json.loads' parse_int: an int, but -0 keeps its sign's text (JsonNegativeZero), and an integer of more digits
    than ``int()`` converts is a JsonLongInt (json.loads raised ValueError: the whole line was invalid JSON)."""
    if text.lstrip("-") == "0" and text.startswith("-"):
        return JsonNegativeZero(0)
    if len(text) > 600:  # (past float64's 309 digits, and below any limit sys.set_int_max_str_digits allows)
        return JsonLongInt(-_LONG if text.startswith("-") else _LONG, text)
    return int(text)


def json_written(value) -> str | None:
    """A JSON number as the line wrote it (``1.50``, ``1e5``, ``-0``, ``2``); None for any other value (the rejects file
    shows a string, boolean or null as it is written already)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return getattr(value, "text", None) or (str(value) if isinstance(value, int) else json.dumps(value))


def json_type(first_kind: str | None, kinds: set[str]) -> pa.DataType:
    """The type of a JSONL column from the kind of its first value that is not null (``type(v).__name__``) and
    the kinds of the values in the first lines; no value: string. Objects and arrays are refused by the caller."""
    if first_kind == "int":
        return TYPES["double"] if "float" in kinds else TYPES["int64"]
    return {"float": TYPES["double"], "bool": TYPES["bool"]}.get(first_kind, TYPES["string"])


def convert_json(column: str, value, typ: pa.DataType, given: bool = False,
                 unseen: bool = False) -> tuple[object, Reason | None]:
    """A JSON value -> (its value in ``typ``, None), or (the value, an object or array as its JSON text; why the
    row is bad). ``given``: the type was given in ``keep`` (a number or boolean given str is kept as its JSON text);
    ``unseen``: the first lines held no value of the column (string by default), which a message says."""
    if value is None:
        return None, None
    name = str(typ)
    if given and name == "string" and isinstance(value, (int, float)):  # a boolean too: true / false
        return getattr(value, "text", None) or json.dumps(value), None  # the number as the line wrote it
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(value, float) and name in ("double", "string") and not math.isfinite(value):  # (an int is finite)
        text = getattr(value, "text", None)
        if text is None:  # NaN / Infinity / -Infinity: Python's JSON writes them, the JSON standard has no such number
            text = json.dumps(value)
            return text, Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {text} is not a JSON number (give "
                                                           f"{str_keep(column)} to keep its text)")
        return text, Reason(RejectCode.BAD_KEPT_VALUE, float_problem(column, text, value))  # 1e400: past float64
    if name == "int64" and isinstance(value, JsonNegativeZero) and not given:  # int64 has no -0: it would read back 0
        return value.text, Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {quoted(value.text)} would be "
                                                             f"written back as 0 (the column's first lines hold "
                                                             f"integers; give {str_keep(column)} to keep "
                                                             "its text)")
    if name == "int64" and isinstance(value, int) and not isinstance(value, bool):
        if _INT64_RANGE[0] <= value < _INT64_RANGE[1]:
            return value, None
        return value, Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {quoted(json_written(value))} is "
                                                        f"outside the int64 range (give {str_keep(column)} "
                                                        "to keep its text)")
    if name == "double" and number:
        text = json_written(value)
        try:
            f = -0.0 if isinstance(value, JsonNegativeZero) else float(value)  # -0 among numbers: the double -0.0
        except OverflowError:  # an integer past float64's range (2**1024 written out)
            f = math.inf if value > 0 else -math.inf
        why = float_problem(column, text, f, given)
        return (text, Reason(RejectCode.BAD_KEPT_VALUE, why)) if why else (f, None)
    if name == "string" and isinstance(value, str):
        bad = surrogate_reason(value, f"value of kept column {column!r}")
        return value, (Reason(RejectCode.INVALID_UNICODE, bad) if bad else None)
    if name == "bool" and isinstance(value, bool):
        return value, None
    text = json_written(value) or json.dumps(value, ensure_ascii=False)  # a number as written: 2.50, not 2.5
    nested = isinstance(value, (dict, list))
    return (text if nested else value,
            Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {clipped(text)} "
                                              f"is {json_kind(value)}, not {_WORDS[name][0]} "
                                              + (f"(the column's first lines hold no value, so it is read as strings: "
                                                 f"give its type, e.g. {opt('keep', column + ':int')})" if unseen and not nested
                                                 else _whose(name, given))
                                              + ("; no type keeps a JSON object or array: write it as a string, or "
                                                 "leave the column out" if nested else "")
                                              + (_json_given(column, name, value) if given and not nested else "")))


def _json_given(column: str, name: str, value) -> str:
    """What a JSONL string under a type given in keep needs: JSONL takes :int / :float from JSON numbers and :bool from
    true / false, never converting a string (a CSV cell's text is read as the type)."""
    if not isinstance(value, str):
        return ""
    return (f"; JSONL reads :{GIVEN_NAMES[name]} from a JSON {'true or false' if name == 'bool' else 'number'}, "
            f"not from a string: write the value unquoted, or give {str_keep(column)} to keep its text")


def _float_holds(f: float, text: str) -> bool:
    """The float ``f`` read from the number written as ``text`` stands for it as written, at the number's own count of
    significant digits (0.10000000000000001 is 0.1 written with 17: held, and so are 0.1000 and 1e23 written out;
    0.10000000000000000001 and 9007199254740993 are not)."""
    digits = len(text.lower().lstrip("+-").split("e")[0].replace(".", "").strip("0"))
    if digits <= 15 and abs(f) >= sys.float_info.min:  # (any 15 digits read back, but a subnormal's)
        return True
    return Decimal(format(f, f".{min(max(digits, 1), 800)}g")) == Decimal(text)  # (800: more than a float64's exact digits)


def json_class(v) -> type:
    """The plain type a parsed JSON value is, for words about it: bool, int, float, str, dict, list or NoneType (a
    number read as JsonNumber / JsonLongInt / JsonNegativeZero is its float or int; another object its own type)."""
    if isinstance(v, bool):
        return bool
    return next((t for t in (float, int) if isinstance(v, t)), type(v))


def json_kind(v) -> str:
    """What a JSON value is, in words: 'a string', 'a number', 'an integer', 'a boolean', 'an object', 'an array'."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    return next((w for t, w in ((float, "a number"), (str, "a string"), (dict, "an object"), (list, "an array"))
                 if isinstance(v, t)), type(v).__name__)


# --------------------------------------------------------------------------- Parquet columns
def check_cast(source: str, column: str, src: pa.DataType, given: str) -> None:
    """A Parquet column of type ``src`` that ``keep`` gives a type (``given``: int, float, bool or str): refused when
    Arrow has no cast between them."""
    typ = TYPES[TYPE_NAMES[given]]
    try:
        pa.array([], src).cast(typ)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        spec = f"{column}:{given}"
        raise InputError(f"{source}: {opt('keep', spec, cli=repr(spec))}: the column holds {src} values, which Arrow "
                         f"cannot convert to {typ}", f"keep it as it is (drop :{given}), or give another type") from None


def cast_values(column: str, values, typ: pa.DataType) -> tuple[list, dict[int, Reason]]:
    """A Parquet kept column cast by Arrow to the type ``keep`` gives it, as Python values: -> (the values, the positions
    of those that do not cast and why their rows are bad; such a value is left as it was, for the rejects file)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_float16(values.type) and (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        values = _float16_shortest(values)
    try:
        return _in_range(column, values, values.cast(typ).to_pylist())
    except (pa.ArrowException, UnicodeDecodeError):
        pass  # which ones: one at a time
    out, bad = [], {}
    for k in range(len(values)):
        one = values.slice(k, 1)
        try:
            out.append(one.cast(typ)[0].as_py())
        except (pa.ArrowException, UnicodeDecodeError) as e:
            shown = None if _textual(one.type) else shown_values(one)  # float32 0.1, not the double it widens to
            text = (shown_text(one.cast(pa.large_binary())[0].as_py()) if _textual(one.type)
                    else shown[0] if shown else str(one[0]))
            out.append(text)
            at = _not_utf8_at(one, typ)
            bad[k] = (Reason(RejectCode.BINARY_COLUMN, f"kept column {column!r}: invalid UTF-8 at byte {at} of "
                                                       f"{quoted(text)} (a binary Parquet column, given :str in "
                                                       f"{opt('keep')}; kept without :str, it keeps the bytes it "
                                                       "holds)") if at >= 0 else
                      Reason(RejectCode.BAD_KEPT_VALUE, f"kept column {column!r}: {quoted(text)} is not "
                                                        f"{_WORDS[str(typ)][0]} {_whose(str(typ), True)} ({one_line(e, 80)})"))
    out, past = _in_range(column, values, out)  # the batch's others as when all cast (1e400 is not a bad row either)
    return out, {**bad, **past}


def _float16_shortest(values: pa.Array) -> pa.Array:
    """float16 values as the doubles of their shortest text (0.1 for the float16 nearest it): Arrow casts a float16 to
    text through the double it widens to (``0.0999755859375``), where float32 gets its own shortest (``0.1``). The
    double of a float16's shortest digits prints as those digits, in Arrow's style (``65504``, ``-0``, ``6e-8``)."""
    return pa.array([None if v is None else float(str(np.float16(v))) for v in values.to_pylist()], pa.float64())


def _not_utf8_at(one, typ: pa.DataType) -> int:
    """Where a one-value binary array cast to a string type stops being UTF-8 (-1: it is, or this is no such cast)."""
    if not (pa.types.is_binary(one.type) or pa.types.is_large_binary(one.type)) or not (
            pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return -1
    try:
        (one[0].as_py() or b"").decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return -1


def _in_range(column: str, values, cast: list) -> tuple[list, dict[int, Reason]]:
    """Text cast to a given float (``cast``: the values) -> (the values, the bad ones: text past float64's range,
    ``float_problem``: 1e400 cast to inf, 1e-400 to 0.0; such a value is left as its text, for the rejects file)."""
    suspects = [k for k, v in enumerate(cast) if isinstance(v, float) and (math.isinf(v) or v == 0)]
    if not suspects or not _textual(values.type):
        return cast, {}
    texts = values.cast(pa.large_binary()).to_pylist()
    bad = {}
    for k in suspects:
        text = shown_text(texts[k])
        why = float_problem(column, text, cast[k], given=True)
        if why is not None:
            cast[k], bad[k] = text, Reason(RejectCode.BAD_KEPT_VALUE, why)
    return cast, bad


def _textual(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


# --------------------------------------------------------------------------- Arrow values as Python objects
class Stored(_Shown, int):
    """A date, time, timestamp or duration as the integer Arrow stores it (days; units since midnight or 1970; units),
    for a value whose Python object would not be the same value (``python_values``): ``pa.array`` makes that value of
    it again, and it prints as Arrow's text of it (in the rejects file, a message)."""

    _number = int


def _plain(t: pa.DataType) -> pa.DataType | None:
    """``t`` with every date, time, timestamp and duration in it replaced by the integer it is stored as (a view of
    the same buffers); None when it holds none."""
    if pa.types.is_temporal(t) and not pa.types.is_interval(t):
        return pa.int32() if t.bit_width == 32 else pa.int64()
    if pa.types.is_map(t):
        key, item = _plain(t.key_type), _plain(t.item_type)
        return None if key is None and item is None else pa.map_(key or t.key_type, item or t.item_type)
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        plain = [_plain(f.type) for f in fields]
        if all(p is None for p in plain):
            return None
        return pa.struct([f.with_type(p or f.type) for f, p in zip(fields, plain)])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _plain(t.value_type)
        if item is None:
            return None
        field = t.value_field.with_type(item)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(field, t.list_size)
        return pa.large_list(field) if pa.types.is_large_list(t) else pa.list_(field)
    return None


def python_values(values) -> list:
    """An Arrow column's values as Python objects of which ``pa.array(objects, its type)`` makes the same values:
    ``to_pylist``'s, but where a date, time, timestamp or duration has no Python object of the same value (a
    time64[ns]'s nanoseconds, a time of day past 24 h, a year past 9999: cut, wrapped or an OverflowError), the
    integers Arrow stores (``Stored`` at the top level, printed as Arrow's text)."""
    t = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
    plain = _plain(t)
    if plain is None:
        return values.to_pylist()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    try:
        objects = values.to_pylist()
        if pa.array(objects, values.type).equals(values):
            return objects
    except (OverflowError, ValueError, pa.ArrowException):
        pass
    ints = values.view(plain).to_pylist()
    if not pa.types.is_temporal(values.type):
        return ints  # (nested: the integers as they are)
    try:
        texts = values.cast(pa.string()).to_pylist()
    except pa.ArrowException:
        texts = [None] * len(ints)
    return [None if n is None else Stored(n, t if t and not t.startswith("<") else f"{n} ({values.type})")
            for n, t in zip(ints, texts)]  # (Arrow's text of a value past its range: "<value out of range: N>")


def duplicate_field(t: pa.DataType) -> str | None:
    """A field name that appears twice in one struct of ``t`` (nested anywhere), or None: such a value has no Python
    object (a dict) and no one name to read its field by."""
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            return twice
        return next((d for i in range(t.num_fields) if (d := duplicate_field(t.field(i).type)) is not None), None)
    if pa.types.is_map(t):
        return duplicate_field(t.key_type) or duplicate_field(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return duplicate_field(t.value_type)
    if pa.types.is_dictionary(t):
        return duplicate_field(t.value_type)
    return None


def shown_values(values) -> list | None:
    """A Parquet column's values as the rejects file shows them, where ``str`` of their Python objects would show
    another value than the file holds: float16 / float32 as their shortest text (``0.1``, not the double it widens to,
    0.10000000149011612), binary as ``bytes_text`` (not UTF-8 with U+FFFD for a byte that is not), a timestamp with a
    time zone in UTC and a duration as its count of units (as a CSV output writes them); None for other types (their
    objects show them)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    t = values.type
    if pa.types.is_float16(t) or pa.types.is_float32(t):  # the shortest text that reads back as that float
        kind = np.float16 if pa.types.is_float16(t) else np.float32
        return [None if v is None else str(kind(v)) for v in values.to_pylist()]
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or getattr(pa.types, "is_binary_view", lambda _: False)(t)):
        return [None if v is None else bytes_text(v) for v in values.to_pylist()]
    if pa.types.is_timestamp(t) and t.tz is not None:  # in UTC, as a CSV output writes it: Python's str of the local
        return values.cast(pa.timestamp(t.unit, "UTC")).cast(pa.string()).to_pylist()  # time cut the offset to minutes
    if pa.types.is_duration(t):  # its count of units, as a CSV output writes it (str: "-1 day, 23:59:59.999000")
        return values.cast(pa.int64()).cast(pa.string()).to_pylist()
    return None


class Shortest(_Shown, float):
    """A float16 / float32 value as the double it widens to (``pa.array`` makes the same float of it), printed as its
    shortest text (``0.1``, not 0.10000000149011612): an id the rejects file shows as a CSV output writes it."""

    _number = float


def shortest_floats(values: list, column) -> list:
    """A column's Python ``values`` (its id), a float16 / float32 value as ``Shortest``; other types' as they are."""
    shown = shown_values(column) if _short_float(column.type) else None
    if shown is None:
        return values
    return [v if v is None or t is None else Shortest(v, t) for v, t in zip(values, shown)]


def _short_float(t: pa.DataType) -> bool:
    t = t.value_type if pa.types.is_dictionary(t) else t
    return pa.types.is_float16(t) or pa.types.is_float32(t)


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
