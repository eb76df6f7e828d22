"""JSONL: one JSON object per line; the columns from the first lines, a bad line a bad row in its place.

A file whose first lines hold JSON values but no object (arrays, strings, numbers) is refused when it is
opened; in a file of objects, a line that is another JSON value is a bad row (``RejectCode.NOT_OBJECT``).
UTF-16 and UTF-32 files (``encoding='utf-16'`` ...) are cut into lines on their two- or four-byte line feeds.

Ids (``id_column``) are integers or strings, one kind per file: the file's first id that is an integer or a string
(on a line that is a JSON object valid in the encoding) decides the kind and the output column's type (int64 or
string); an id of the other kind is a bad row (``RejectCode.BAD_ID``), as is one that is neither (a number, a
boolean, an object; a null or missing id: ``RejectCode.NULL_ID``). With ``id_as_text`` (``id_column="id:str"``) every
id is a string: a JSON string as it is, a number as the line wrote it (``7``, ``12345678901234567890123``, ``1e2``,
``-0``); a boolean, an object or an array is still a bad row. When the first lines (the head) hold no such id,
the file is read on from its start, once, when it is opened, until one is found (the whole file if it holds none),
so every parse - the local engine's, and each Dask partition's, whatever ``blocksize`` cuts - starts with the
file's kind and rejects the same rows. Standard input cannot be read twice: there the first such id decides as the
rows stream in (one parse: the same rule), and the output's type comes from the ids written.
"""

from __future__ import annotations

import codecs
import io
import json
import math
import shlex
from pathlib import Path

import pyarrow as pa

from ..errors import InputError, one_line, opt
from .rejects import Reason, RejectCode, cell, size_text, too_large
from .textcheck import surrogate_reason
from .base import HEAD_BYTES, RawBatch, stdin_empty_error
from .paths import convert_line
from .kept import JsonNegativeZero, JsonNumber, convert_json, json_class, json_int, json_type, json_written
from .stream import Swapped, swap_table
from .text import (TextReader, TooLong, byte_order_hint, ebcdic_codec, head_of, line_feed_byte, read_lines, read_wide_lines,
                   split_wide_lines, wide_line_codec)


class JsonlReader(TextReader):
    """One JSON object per line."""

    def _setup(self, delimiter):
        super()._setup(delimiter)
        self._json_types: dict[str, set] = {}  # column -> the kinds of its values in the first lines
        self._first_kind: dict[str, str] = {}  # column -> the kind of its first value that is not null
        self._first_id_kind: dict[str, str] = {}  # column -> "integer" / "string": the file's first possible id
        self._head_whole = False  # the head held every line of the input, and each was looked at

    def _count_lines(self, data: bytes, at_most: bool = False) -> int:
        """Lines that are not blank (JSON strings hold no raw line break): the rows, as _parse reads them."""
        return sum(1 for ln in data.split(b"\n") if ln.removeprefix(b"\xef\xbb\xbf").strip())

    def _string_columns(self) -> list[str]:
        return [c for c, types in self._json_types.items() if "str" in types]

    def id_type(self) -> pa.DataType | None:
        """The file's first id that is an integer or a string decides (the module's rule; an id of the other kind is
        a bad row): integer ids are int64, string ids string, and string when the file holds no such id (no row has an
        id to write). Standard input whose head holds none: None (the type of the ids written)."""
        if self.id_column is None:
            return pa.int64()
        if self.id_as_text:
            return pa.string()
        kind = self._first_id_kind.get(self.id_column)
        if kind is None and self.path == "-":
            return None
        return pa.int64() if kind == "integer" else pa.string()

    def _select_columns(self, text_column, pair_column, id_column):
        """The columns chosen; an id column whose kind the head did not decide: the file read on until its first id
        that is an integer or a string (the same kind for every parse: the local engine's and each partition's)."""
        super()._select_columns(text_column, pair_column, id_column)
        if self.id_as_text and id_column is not None:
            self._first_id_kind[id_column] = "string"  # every id is text: no other kind to find
        if id_column is not None and id_column not in self._first_id_kind and self.path != "-" and not self._head_whole:
            kind = self._first_id_kind_in_file(id_column)
            if kind is not None:
                self._first_id_kind[id_column] = kind

    def _first_id_kind_in_file(self, column: str) -> str | None:
        """The kind of the file's first id that is an integer or a string, read as the head is read (a line that is
        not valid in the encoding, not JSON or not an object holds none), from the start: None when there is none."""
        fh, _ = self._open_binary()
        try:
            codec, unit = self._line_codec(fh)
            for line in self._lines(fh, codec, unit):
                try:
                    obj = _loads(line.decode(codec))
                except (ValueError, RecursionError, AttributeError):  # UnicodeDecodeError too; a TooLong line
                    continue
                kind = _id_kind(obj.get(column)) if isinstance(obj, dict) else None
                if kind is not None:
                    return kind
        finally:
            fh.close()
        return None

    def _columns_of(self) -> str:
        return "" if self._head_whole else " of its first lines (bertfeat finds the columns there)"

    def _columns_fix(self) -> str:
        return "" if self._head_whole else "; a key first found further on: put a line that has it first"

    def _decide_keep_types(self) -> dict[str, pa.DataType]:
        """The first value of each kept column that is not null decides its type (``kept.json_type``); a column
        whose first value is an object or an array is refused."""
        out = {}
        for c in self.keep:
            first = self._first_kind.get(c)
            if first in ("dict", "list"):
                raise InputError(f"{self.name}: {opt('keep')} '{c}' holds JSON {'objects' if first == 'dict' else 'arrays'}",
                                 "keep columns of strings, numbers or booleans")
            out[c] = json_type(first, self._json_types.get(c, set()))
        return out

    def _head_lines(self, head: bytes) -> tuple[str, list[bytes]]:
        """(the codec of a line, the head's lines), a byte order mark dropped and a line cut at the end of the head
        left out."""
        codec, unit = wide_line_codec(self.encoding, head) or (self.encoding, 1)
        lf = line_feed_byte(self.encoding)
        if lf is not None:  # EBCDIC: its line feed is another byte
            swap = swap_table(0x0A, lf)
            lines = [line.translate(swap) for line in head.translate(swap).split(b"\n")]
        elif unit == 1:
            lines = [line.removeprefix(b"\xef\xbb\xbf") for line in head.split(b"\n")]
        else:
            bom = "\ufeff".encode(codec)
            lines, rest = split_wide_lines(head.removeprefix(bom), codec, unit)
            lines = [line.removeprefix(bom) for line in lines] + [rest.removeprefix(bom)]
        return codec, lines[:-1] if len(head) >= HEAD_BYTES and len(lines) > 1 else lines

    def _head_limit(self) -> int:
        """A first line longer than what a row may hold is not read whole to find the columns (``_read_head``)."""
        return max(HEAD_BYTES, 2 * self.max_field_bytes)

    def _line_limit(self) -> int:
        """The longest line a row may be: max_field_bytes for each column read, and as much for the rest of the
        object; a longer line is a bad row (RejectCode.FIELD_TOO_LARGE), skipped as read."""
        used = {self.text_column, self.pair_column, self.id_column, *getattr(self, "keep", ())} - {None}
        return self.max_field_bytes * (len(used) + 1)

    def _read_head(self, fh) -> bytes:
        """The head from the first line that is not longer than ``_head_limit``: a longer one (a bad row when the
        file is read) is passed over (up to 1,000 of them), so the columns come from the lines after it."""
        lf = line_feed_byte(self.encoding)
        if lf is not None:  # EBCDIC: its lines end at 0x25, read as 0x0a (swapped), the head swapped back
            swapped = Swapped(fh, 0x0A, lf)
            return self._head_of_lines(io.BufferedReader(swapped, buffer_size=1 << 20)).translate(swapped.table)
        return self._head_of_lines(fh)

    def _head_of_lines(self, fh) -> bytes:
        """_read_head of a stream whose lines end at 0x0a. A first line that looks like EBCDIC text is not passed
        over (an EBCDIC file read as UTF-8 has no 0x0a: it was read to its end, then called lines too long)."""
        limit = self._head_limit()
        head = head_of(fh, limit)
        while len(head) >= limit and b"\n" not in head and self._head_skipped < 1000 and ebcdic_codec(head) is None:
            while (more := fh.readline(1 << 20)) and not more.endswith(b"\n"):
                pass
            self._head_skipped += 1
            head = head_of(fh, limit)
        return head

    def _head_columns(self, head: bytes) -> list[str]:
        """The keys of the objects in the first lines (and the kinds of their values); a head of JSON values
        none of which is an object (arrays, strings, numbers) is refused here, naming the first."""
        other = None  # (line number, value) of the first line that is JSON but not an object
        unread = None  # (line number, error) of the first non-blank line that is not JSON
        if len(head) >= self._head_limit() and self._line_end() not in head:  # standard input (a file passes over such lines)
            raise InputError(f"{self.name} line 1: more than {len(head):,} bytes, more than bertfeat reads to find the "
                             "columns", "put a shorter line first, or read the file by its path (then such a line is a "
                             f"bad row), or raise {opt('max_field_bytes')}")
        codec, lines = self._head_lines(head)
        _refuse_json_document(self.name, head, lines)
        # every line of the input was looked at
        self._head_whole = len(head) < HEAD_BYTES and len(lines) <= 1000 and not self._head_skipped
        for n, line in enumerate(lines[:1000], 1):
            try:
                obj = _loads(line.decode(codec))
            except (ValueError, UnicodeDecodeError, RecursionError) as e:
                if unread is None and line.strip():
                    unread = (n, e)
                continue
            if not isinstance(obj, dict):
                other = other or (n, obj)
                continue
            for k, v in obj.items():
                self._json_types.setdefault(k, set()).add(type(v).__name__)
                if v is not None:
                    self._first_kind.setdefault(k, type(v).__name__)
                if _id_kind(v) is not None:
                    self._first_id_kind.setdefault(k, _id_kind(v))
        if not self._json_types and other is not None:
            raise InputError(f"{self.name} line {other[0]}: {_line_kind(other[1])}, not an object",
                             'bertfeat reads JSONL with one JSON object per line ({"text": ...}); convert the file, or use CSV')
        if not self._json_types and unread is not None and isinstance(unread[1], UnicodeDecodeError):
            n, e = unread  # a file in another encoding (CSV's header line says the same)
            raise InputError(f"{self.name} line {n}: invalid {self.encoding} at byte {e.start} of the line, and none of "
                             f"its first {sum(1 for line in lines[:1000] if line.strip())} line(s) is a JSON object",
                             f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')})")
        if not self._json_types and unread is not None and _raw_control(unread[1]):
            n, e = unread  # JSON Lines from a writer that does not escape a tab (printf, string joins)
            raise InputError(f"{self.name} line {n}: not JSON: {_raw_control(e)}, and none of its first "
                             f"{sum(1 for line in lines[:1000] if line.strip())} line(s) is a JSON object",
                             "write each line with a JSON writer (json.dumps writes a tab in a string as \\t, as JSON "
                             f"requires); a file of tab-separated values is read with {opt('input_format', 'tsv')}")
        order = byte_order_hint(self.encoding, head) if not self._json_types and unread is not None else None
        if order is not None:  # UTF-16 / UTF-32 given without the file's byte order: every line is garbled
            raise InputError(f"{self.name} line {unread[0]}: not JSON as {self.encoding}; {order[1]}",
                             f"pass {opt('encoding', order[0])}")
        if not self._json_types and unread is not None:  # CSV or plain text under a .jsonl name: say so, not "columns: none"
            n, e = unread
            why = (f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else
                   "nested too deeply for Python's parser" if isinstance(e, RecursionError) else str(e))
            seen = sum(1 for line in lines[:1000] if line.strip())
            looks = next((line.strip() for line in lines[:1000] if line.strip()), b"").startswith(b"{")
            raise InputError(f"{self.name} line {n}: not JSON ({why}); none of its first {seen} line(s) is a JSON object",
                             'bertfeat reads JSONL with one JSON object per line ({"text": ...}); '
                             + ("write each line with a JSON writer (json.dumps: no comma after an object, no "
                                "nesting deeper than Python reads)" if looks else
                                f"if the file is CSV or TSV, pass {opt('input_format', 'csv')} (or tsv)"))
        if not self._json_types and other is None and not any(line.strip() for line in lines):
            if not head and self.path == "-":
                raise stdin_empty_error('one JSON object per line ({"text": ...})')
            if self._head_skipped:  # every line read was longer than a row may be: not an empty file
                raise InputError(f"{self.name}: its first {self._head_skipped:,} line(s) are each longer than a "
                                 f"row may be ({self._head_limit():,} bytes, twice {opt('max_field_bytes')}), so no "
                                 "column can be read from them",
                                 f"raise {opt('max_field_bytes')}, or check it is JSONL with one object per line")
            raise InputError(f"{self.name}: the file is empty (blank lines only)" if len(head) < HEAD_BYTES
                             else f"{self.name}: its first {len(head):,} bytes are blank lines",
                             'give one JSON object per line ({"text": ...})')
        return list(self._json_types)

    def _lines(self, fh, codec: str, unit: int):
        """The lines that are not blank (the rows), as bytes, a byte order mark at a line's start dropped (at the
        file's, or where files joined with cat meet: it is never JSON). UTF-16 / UTF-32 lines
        (``unit`` 2 or 4) end at an encoded line feed on a character boundary, and are told blank decoded."""
        limit = self._line_limit()
        lf = line_feed_byte(self.encoding)
        swap = None
        if lf is not None:  # EBCDIC: lines end at its line feed, swapped with 0x0a to be read, and back in each line
            fh = io.BufferedReader(Swapped(fh, 0x0A, lf), buffer_size=1 << 20)
            swap = fh.raw.table
        raw = read_lines(fh, limit) if unit == 1 else read_wide_lines(fh, codec, unit, limit=limit)
        bom = b"" if swap is not None else b"\xef\xbb\xbf" if unit == 1 else "\ufeff".encode(codec)
        row = 0
        while True:
            try:
                line = next(raw, b"")
            except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                raise self._read_error(row, e) from None
            if isinstance(line, TooLong):  # a row: a bad one (_row)
                yield line
                row += 1
                continue
            if not line:
                return
            line = line.removeprefix(bom)  # any line's: files joined with cat keep each one's (a Dask byte range
            # may start at any line, so every line is read alike)
            if swap is not None:
                line = line.translate(swap)
            if (line if unit == 1 and swap is None else line.decode(codec, "replace")).strip():  # blank lines are not rows
                yield line
                row += 1

    def _read_error(self, row: int, e: BaseException) -> InputError:
        return InputError(f"{self.name} near row {row}: cannot read the file ({one_line(e)})",
                          "check the file is complete and its compression")

    def _line_codec(self, fh) -> tuple[str, int]:
        """(the codec of one line, the code unit in bytes: 1 unless UTF-16 / UTF-32, whose byte order a byte order
        mark at the start of the stream may give)."""
        try:
            head = fh.peek(4)[:4] if self.encoding in ("utf-16", "utf-32") else b""
        except (OSError, EOFError, ValueError, pa.ArrowException) as e:
            raise self._read_error(0, e) from None
        return wide_line_codec(self.encoding, head) or (self.encoding, 1)

    def _parse(self, fh, counter):
        rows, texts, pairs, ids, pre, extra, written = [], [], [], [], {}, self.empty_extra(), {}
        id_kind = self._first_id_kind.get(self.id_column) if self.id_column is not None else None  # the file's: ids of one kind
        start = 0  # bytes consumed before the batch
        try:
            codec, unit = self._line_codec(fh)
            for row, line in enumerate(self._lines(fh, codec, unit)):
                text, pair, ident, obj, reason = self._row(line, codec)
                if id_kind is None and (reason is None or reason.code != RejectCode.ENCODING):
                    id_kind = _id_kind(ident)  # no kind yet (standard input): the first id that could be one decides
                if reason is None and ident is not None:
                    reason, id_kind = _check_id(ident if not self.id_as_text else _id_text(ident), id_kind, self.id_column)
                    ident = _id_text(ident) if self.id_as_text and reason is None else ident
                if extra is not None:
                    reason = self._kept(obj, extra, reason, written.setdefault(row, {}))
                if reason is not None:
                    pre[row] = reason
                    # an id that cannot be one (1e2, true, [1]) and -0 as the line wrote them: the rejects file's id
                    negative_zero = isinstance(ident, JsonNegativeZero)
                    ident = ident if (_id_kind(ident) and not negative_zero) or ident is None else _as_written(ident)
                rows.append(row); texts.append(text); pairs.append(pair); ids.append(ident)
                if len(rows) >= self.batch_rows:
                    yield self._batch(rows, texts, pairs, ids, pre, counter.count, start, extra, written)
                    rows, texts, pairs, ids, pre, extra, written = [], [], [], [], {}, self.empty_extra(), {}
                    start = counter.count
            if rows:
                yield self._batch(rows, texts, pairs, ids, pre, counter.count, start, extra, written)
        finally:
            fh.close()

    def _kept(self, obj, extra: dict[str, list], reason: Reason | None, written: dict) -> Reason | None:
        """Append the row's kept values (converted to their columns' types) to ``extra``, and to ``written`` a number
        whose value the rejects file or the output may show otherwise (1e5 read as 100000.0, 1.0 written 1): -> the
        row's reason, or the first kept value's that is of another kind."""
        for c, typ in self._kept_types.items():
            given = c in self.keep_as
            raw = obj.get(c) if isinstance(obj, dict) else None
            value, why = convert_json(c, raw, typ, given, unseen=not given and self._first_kind.get(c) is None)
            extra[c].append(value)
            text = json_written(raw)
            if text is not None and (cell(value) != text or (type(value) is float and value.is_integer())):
                written[c] = text  # (an integral double too: Arrow writes 1.0 as 1, run.summary.RespelledNumbers)
            reason = reason or why
        return reason

    def _batch(self, rows, texts, pairs, ids, pre, end: int, start: int, extra=None, written=None) -> RawBatch:
        return RawBatch(rows, texts, pairs if self.pair_column is not None else None,
                        ids if self.id_column is not None else None, pre, end, start, extra,
                        {r: w for r, w in (written or {}).items() if w})

    def _row(self, line: bytes, codec: str) -> tuple:
        """One line -> (text, pair, id, the object, Reason or None): the line's values, and why it is a bad row if it
        is one (a line that is not valid in the encoding: its object read with the bad bytes replaced, if it parses)."""
        if isinstance(line, TooLong):
            return None, None, None, None, Reason(
                RejectCode.FIELD_TOO_LARGE, f"the line is {line.size:,} bytes, more than a row may hold (for each column "
                f"read {opt('max_field_bytes', self.max_field_bytes, cli=size_text(self.max_field_bytes))}, and as much "
                "for the rest of the object)")
        try:
            obj = _loads(line.decode(codec).strip())
        except UnicodeDecodeError as e:
            obj = self._readable(line, codec)
            return None, None, obj.get(self.id_column) if obj and self.id_column is not None else None, obj, Reason(
                RejectCode.ENCODING, f"invalid {self.encoding} at byte {e.start} of the line")
        except ValueError as e:
            raw = _raw_control(e)
            return None, None, None, None, Reason(RejectCode.INVALID_JSON, f"invalid JSON: {raw}" if raw else
                                                  f"invalid JSON ({e})")
        except RecursionError:
            return None, None, None, None, Reason(RejectCode.INVALID_JSON, "JSON nested too deeply for Python's parser")
        if not isinstance(obj, dict):
            return None, None, None, None, Reason(RejectCode.NOT_OBJECT, f"{_line_kind(obj)}, not an object")
        text = obj.get(self.text_column)
        pair = obj.get(self.pair_column) if self.pair_column is not None else None
        ident = obj.get(self.id_column) if self.id_column is not None else None
        if type(obj) is _Repeated:  # a key named twice: which value is meant is not ours to guess (as CSV's header)
            used = [c for c in (self.text_column, self.pair_column, self.id_column, *self.keep) if c in obj.repeated]
            if used:
                return text, pair, ident, obj, Reason(RejectCode.INVALID_JSON, f"the key '{used[0]}' appears "
                                                                           f"{obj.repeated[used[0]]} times in the object")
        too_big = self._too_large(obj)
        if too_big is not None:
            return None, None, obj.get(self.id_column) if self.id_column is not None else None, obj, too_big
        missing = next((c for c in (self.text_column, self.pair_column) if c is not None and c not in obj), None)
        if missing is not None:
            return text, pair, ident, obj, Reason(RejectCode.MISSING_FIELD, f"no field '{missing}'")
        return text, pair, ident, obj, _non_finite(text, "text") or _non_finite(pair, "pair text")

    def _too_large(self, obj: dict) -> Reason | None:
        """A value the run reads larger than max_field_bytes (in UTF-8) makes its row a bad row; it is set to None in
        ``obj`` (so neither the run nor the rejects file holds it)."""
        cap, reason = self.max_field_bytes, None
        for c in dict.fromkeys((self.text_column, self.pair_column, self.id_column, *self.keep)):
            v = obj.get(c) if c is not None else None
            size = len(v.encode("utf-8", "surrogatepass")) if isinstance(v, str) and len(v) * 4 > cap else 0
            if size > cap:
                reason = reason or too_large(self.role(c), size, cap)
                obj[c] = None
        return reason

    def _readable(self, line: bytes, codec: str) -> dict | None:
        """The object of a line that is not valid in the encoding, each bad byte inside a string as the text \\xNN (the
        id and the kept values in the rejects file, as a CSV cell's show), if the rest of it is readable; else None."""
        if self.id_column is None and not self.keep:
            return None
        try:
            obj = _loads(line.decode(codec, errors=_JSON_HEX))
        except (ValueError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None


def _json_hex(e: UnicodeDecodeError) -> tuple[str, int]:
    """A byte the line's encoding cannot read as JSON's escaped backslash and xNN: inside a string it reads as \\xNN."""
    return "".join(f"\\\\x{b:02x}" for b in e.object[e.start:e.end]), e.end


_JSON_HEX = "bertfeat.json-hex"
codecs.register_error(_JSON_HEX, _json_hex)


class _Repeated(dict):
    """An object that named a key more than once (the last value kept, as json.loads does): ``repeated`` key -> times."""

    repeated: dict


def _pairs(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    d = _Repeated(d)
    counts: dict = {}
    for k, _ in pairs:
        counts[k] = counts.get(k, 0) + 1
    d.repeated = {k: n for k, n in counts.items() if n > 1}
    return d


_TR_CR = "tr '\\r' '\\n'"  # CR line ends to line feeds


def _refuse_json_document(name: str, head: bytes, lines: list[bytes]) -> None:
    """A JSON array or object written over several lines (a .json export: its first line "[" or "{" is no JSON value),
    or lines that end in CR alone, is not JSON Lines: said as such, with the conversion, rather than as a bad row 0 or a file
    that might be CSV."""
    first = next((line.strip() for line in lines if line.strip()), b"").lstrip(b"\xef\xbb\xbf")
    src, stem = ("FILE", "NAME") if name == "<stdin>" else (shlex.quote(name), Path(name).stem)
    # never the input's own name: `jq ... x.jsonl > x.jsonl` empties x.jsonl before jq reads it
    whole = f"{stem}.jsonl" if f"{stem}.jsonl" != Path(name).name else f"{stem}.lines.jsonl"
    if first.startswith(b"["):
        try:
            json.loads(first)
        except ValueError:
            raise InputError(f"{name}: a JSON array over several lines (one document), not JSON Lines (one object "
                             "per line)", f"write one object per line, e.g. jq -c '.[]' {src} > "
                             f"{shlex.quote(whole)}") from None
    if first.startswith(b"{") and _object_over_lines(head):
        raise InputError(f"{name}: a JSON object over several lines (pretty-printed), not JSON Lines (one object "
                         "per line)", f"write each object on one line, e.g. jq -c . {src} > {shlex.quote(whole)}")
    if head.count(b"\r") > 1 and b"\n" not in head:
        raise InputError(f"{name}: its lines end in CR alone (old Mac line ends), which JSON Lines does not take",
                         f"convert the line ends, e.g. "
                         f"{convert_line('-' if name == '<stdin>' else name, _TR_CR, 'lf', 'jsonl')}")


def _object_over_lines(head: bytes) -> bool:
    """Does the head start with one JSON object written over several lines (pretty-printed)? Not a first line that is
    an object gone wrong (a trailing comma) with lines after it: that is a bad row, said with the JSON error."""
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):  # (nested too deeply: a bad row, said as such)
        return False
    return "\n" in text[:end]


def _raw_control(e: BaseException) -> str | None:
    """What Python's "Invalid control character at" means, in words: a raw tab (or other control character) inside a
    string, which JSON writes escaped; None for another error."""
    if not isinstance(e, json.JSONDecodeError) or not e.msg.startswith("Invalid control character"):
        return None
    ch = e.doc[e.pos] if e.pos < len(e.doc) else ""
    name = {"\t": "a tab", "\r": "a carriage return", "\x00": "a NUL"}.get(ch, "a control character")
    return (f"{name} (U+{ord(ch):04X}) written as it is inside a string at column {e.colno}, where JSON requires it "
            f"escaped ({json.dumps(ch)[1:-1]})") if ch else None


def _loads(text: str):
    """json.loads, an object that repeats a key marked (_Repeated)."""
    return json.loads(text, object_pairs_hook=_pairs, parse_float=JsonNumber, parse_int=json_int)  # as written


def _non_finite(value, what: str) -> Reason | None:
    """A text that is NaN, Infinity or a number past float64 (1e400) is a number the line wrote, named as written:
    chunks.decode_cell would take a float NaN for a missing value (as it is in a Parquet float column)."""
    if isinstance(value, float) and not math.isfinite(value):
        written = getattr(value, "text", None) or json.dumps(value)  # NaN, Infinity, -Infinity: json's own spellings
        return Reason(RejectCode.NOT_STRING, f"non-string {what} (number {written})")
    return None


def _id_kind(v) -> str | None:
    """"integer", "string", or None for a value that cannot be an id."""
    return "integer" if isinstance(v, int) and not isinstance(v, bool) else "string" if isinstance(v, str) else None


def _id_text(ident):
    """An id as text (``id_as_text``): a number as the line wrote it; any other value as it is (a string is one
    already; a boolean, object or array stays what it is, a bad id)."""
    return ident if isinstance(ident, bool) else json_written(ident) or ident


def _check_id(ident, id_kind: str | None, column: str = "id") -> tuple[Reason | None, str | None]:
    """An id must be a string or an integer, of the kind of the first id: (why not or None, the kind of the ids). The
    reasons a number or a mix of kinds gives say how to read every id as the text the line wrote (``column:str``)."""
    kind = _id_kind(ident)
    as_text = f"; {opt('id_column', column + ':str', cli=shlex.quote(column + ':str'))} reads every id as the line wrote it"
    if kind == "integer" and not -2**63 <= ident < 2**63:
        return Reason(RejectCode.BAD_ID, f"id {str(ident)[:40]} is outside the int64 range of integer ids{as_text}"), id_kind
    if isinstance(ident, JsonNegativeZero):  # (an int64 id has no -0: it would be written as 0, another row's id)
        return Reason(RejectCode.BAD_ID, 'id -0 would be written back as 0 (an integer id has no sign of zero): write '
                                         f'it 0, or as the string "-0" (with every id a string){as_text}'), id_kind
    if kind == "string":
        bad = surrogate_reason(ident, "id")
        if bad:
            return Reason(RejectCode.INVALID_UNICODE, bad), id_kind
    if kind is None:  # a number as the line wrote it (1e2, 2.50: not 100.0, 2.5)
        number = json_class(ident) is float
        return Reason(RejectCode.BAD_ID, f"id {(json_written(ident) or json.dumps(ident))[:40]} is {_json_kind(ident)}, "
                                         f"not a string or an integer{as_text if number else ''}"), id_kind
    if id_kind is not None and kind != id_kind:
        return Reason(RejectCode.BAD_ID, f"id {json.dumps(ident)[:40]} is {'an' if kind == 'integer' else 'a'} {kind}, "
                                         f"but the ids before it are {id_kind}s{as_text}"), id_kind
    return None, id_kind or kind


def _as_written(v) -> str:
    """A JSON value as the line wrote it (a number's own digits: 1e5, 2.50, -0), as JSON text otherwise (true, [1])."""
    return json_written(v) or json.dumps(v, ensure_ascii=False)


def _json_kind(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(json_class(v), type(v).__name__)


def _line_kind(v) -> str:
    """What a JSON value is, as a line of JSONL: 'a JSON array', 'a JSON string', ..., 'JSON null'."""
    return "JSON null" if v is None else "a JSON " + _json_kind(v).split(" ", 1)[1]
