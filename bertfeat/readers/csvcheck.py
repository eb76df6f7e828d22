"""What pyarrow's CSV reader does not tell: a quoted field that is never closed, rows whose fields span lines,
and the delimiter of a file whose header is not comma-separated.

``QuoteTracker`` wraps the binary stream pyarrow reads and follows the quoting as pyarrow does (a quote opens
a quoted field only at the start of a field; inside one, ``""`` is a quote and ``"`` closes it). At the end
of the file it knows whether a quoted field was left open (pyarrow then reads every line after it into that
one field, silently) and on which line and in which field it opened, and how many records hold a quoted
line break. It looks at the delimiter, quote and newline bytes only, so it costs little next to the model.

With ``max_field`` it also keeps any field whose value is larger than that from pyarrow (``max_field_bytes``; the
value's bytes, as JSONL and Parquet count them: a quoted field's quotes and one of each ``""`` are not counted): the
bytes of the field open at the end of a read are held back until it ends; one that grows past ``max_field`` is
dropped as it is read and reaches pyarrow as an empty quoted field ``""``, its data row and value size noted in
``oversized`` (the reader makes the row a bad row when the field is one it reads). So neither pyarrow nor the reader
ever holds more of one field than twice ``max_field`` bytes and its quotes, however long the field (an unclosed quote
included).

A carriage return alone (a CR not followed by a line feed) outside quotes ends a record for pyarrow, as a line end
does. In a file whose header line ends in a line feed (``\n`` or ``\r\n``), such a CR is part of a value (text pasted
from an old Mac program, a database field): pyarrow would cut its line into records, each a row holding part of it
(a text encoded in two, a kept value cut, a row too many). ``cut_rows`` names every record of such a line, so the
reader makes each a bad row. A line is cut only when it holds two records or more: CRs at its start or right before
its line end (``\\r\\r\\n``) make blank lines pyarrow skips, so the line is one record whole and is not noted.
A file whose header line ends in a CR alone (old Mac line ends) is read by its CRs.

A record whose bytes are the header line's (a UTF-8 BOM before them allowed) is noted in ``header_rows``: CSV files
joined with ``cat`` keep each one's header line there (the reader decides which are bad rows).

``LineMender`` is for a second read only: pyarrow decodes a malformed line before it calls the skip handler, so one
that is not valid UTF-8 stops the parse; read again with that line's non-ASCII bytes as ``?``, it is a bad row.
"""

from __future__ import annotations

import bisect
import csv
import io
import re

LIKELY_DELIMITERS = (";", "|", "\t")
_NAMES = {",": "','", ";": "';'", "|": "'|'", "\t": "tab"}


def parse_delimiter(value: str | None) -> str | None:
    """The ``delimiter`` option: one ASCII character (pyarrow's CSV reader splits on one byte); 'tab' and '\\t'
    (backslash t, what a shell passes for '\\t', as pandas' sep='\\t' means a tab) and 'comma'/'semicolon'/'pipe'
    spelled out are accepted."""
    if value is None:
        return None
    from ..errors import InputError, opt

    spelled = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
    d = spelled.get(value.lower(), value)
    if len(d) != 1 or d in ('"', "\n", "\r"):
        raise InputError(f"{opt('delimiter', value, cli=repr(value))} is not a single delimiter character",
                         "give one character, e.g. ';', '|' or tab")
    if not d.isascii():
        raise InputError(f"{opt('delimiter', value, cli=repr(value))} is not an ASCII character, and CSV / TSV are "
                         "split on one byte", "convert the file's delimiter to an ASCII one first (e.g. sed "
                         f"'s/{d}/|/g' in.csv > out.csv, if no value holds '|'), or write the rows as JSONL or Parquet")
    return d


def name_of(delimiter: str) -> str:
    return _NAMES.get(delimiter, repr(delimiter))


BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark: pyarrow skips it at the start of a file, before any blank line


def header_line(head: bytes) -> bytes:
    """The first non-blank line of the file (a quoted header name may not span lines)."""
    head = head.removeprefix(BOM).lstrip(b"\r\n")  # (a BOM then a line end: a blank line, as pyarrow reads it)
    return re.split(rb"[\r\n]", head, maxsplit=1)[0]  # pyarrow ends a line at \r too


def sniff_delimiter(head: bytes) -> str:
    """',' unless the header line has no comma and holds ';', '|' or a tab (the most frequent of them)."""
    line = _unquoted(header_line(head))
    if b"," in line:
        return ","
    counts = {d: line.count(d.encode()) for d in LIKELY_DELIMITERS}
    best = max(counts, key=counts.get)
    return best if counts[best] else ","


def splitting_delimiter(head: bytes, given: str) -> tuple[str, int] | None:
    """The likely delimiter (',', ';', '|' or tab: the most frequent) that separates the header line outside quotes
    where ``given`` does not occur, and the columns it makes; None if ``given`` is there, no other is, or the first
    data line does not hold that one too (a one-column file whose header name holds a ',': 'text, cleaned')."""
    raw = header_line(head)
    line = _unquoted(raw)
    if given.encode() in line:
        return None
    counts = {d: line.count(d.encode()) for d in (",",) + LIKELY_DELIMITERS if d != given}
    best = max(counts, key=counts.get)
    data = header_line(head[head.find(raw) + len(raw):])  # the first data line (b"" when the head holds none)
    if not counts[best] or (data and best.encode() not in _unquoted(data)):
        return None
    return best, counts[best] + 1


def likely_delimiters_in(name: str, used: str) -> list[str]:
    return [d for d in (",",) + LIKELY_DELIMITERS if d != used and d in name]


def _unquoted(line: bytes) -> bytes:
    return re.sub(rb'"[^"]*"', b"", line)


class QuoteTracker(io.RawIOBase):
    """A raw binary stream that follows CSV quoting while pyarrow reads through it (ASCII-compatible encodings).

    Records are counted as pyarrow counts them (blank lines are not records; the header is record 0), so
    ``suspects`` maps a 0-based *data-row* number to its quoted field followed by more text after the closing quote:
    one that closes lines later swallowed other lines (``4,"unterminated`` ... closed by the opening quote of a later
    row), one on its own line is not CSV (``"Stop" he said``); ``unclosed`` says a quoted field ran to the end of the
    file.
    """

    def __init__(self, raw, delimiter: str = ",", max_field: int | None = None, quoting: bool = True):
        self._raw = raw
        self._special = re.compile(b"[" + (b'"' if quoting else b"") + b"\\n\\r" + re.escape(delimiter.encode()) + b"]")
        self._delim = ord(delimiter)
        self._quoting, self._delimiter = quoting, delimiter
        self.line = 1  # physical line (1-based) of the next byte; a line ends at \n, \r\n or \r, as pyarrow's
        self._last = -1  # the last byte of the previous read (a \r there and a \n here are one line end)
        self.field = 0  # 0-based field index in the current record
        self.record = 0  # record index (0 = the header), blank lines excluded
        self.in_quotes = False
        self._field_start = 0  # offset (in the stream) where the current field starts
        self._record_start = 0
        self._offset = 0
        self._pending_quote = False  # a '"' inside quotes was the last byte of a read: close or escaped?
        self.open_line = self.open_field = self.open_record = None  # where the quoted field now open started
        self._record_multiline = False
        self.multiline_records = 0
        self.suspects: dict[int, tuple[int, int, int]] = {}  # data row -> (open line, field, close line)
        self.ends: list[int] | None = None  # where each record ends (its line end's offset), when a LineMender asks
        # max_field (module docstring): the fields over it, and what reaches pyarrow
        self._cap = max_field
        self.oversized: dict[int, list[tuple[int, int]]] = {}  # data row -> [(field, bytes)] of fields over the cap
        self._field_quoted = False  # the current field opened with a quote
        self._quotes = 0  # the current field's bytes that are no part of its value: its quotes, one of each '""'
        self._held: list[bytes] = []  # the open field's bytes of earlier reads, not handed on yet
        self._held_n = 0
        self._dropping = False  # the open field is over the cap: its bytes are skipped until it ends
        self._emit_from = 0  # offset from which the current read's bytes are not yet handed on, held or skipped
        self._queue: list[bytes] = []
        self._queued = 0  # bytes handed on so far
        self._out, self._out_at, self._eof = b"", 0, False
        self._shifts = [(0, 0)]  # (output offset, input offset - output offset from there on)
        # a CR alone outside quotes (module docstring)
        self.lf_file: bool | None = None  # the header line ends in \n or \r\n (True) or a CR alone (False)
        self._tail = b""  # the last _AROUND bytes of the reads before this one (to show a line a read cut)
        self._cr_pending: tuple[int | None, int, bytes] | None = None  # a read's last byte was a CR outside quotes:
        # (the record it ended or None, its field, the line's bytes before it), alone or a CRLF's as the next read says
        self._cut: CutLine | None = None  # the line read now, when a CR alone cuts it
        self._filling: CutLine | None = None  # a cut line whose bytes after its CR the next read shows more of
        self._undecided: tuple[int, CutLine] | None = None  # a CR alone ended this record, and only CRs followed to
        # the end of the read: a cut if a byte other than a CR comes before the line feed (_decide)
        self.cut_rows: dict[int, tuple[CutLine, bool]] = {}  # data row -> (its cut line, the line's first part)
        # a record whose bytes are the header line's (a BOM before them allowed): files joined with their headers
        self.header: bytes | None = None  # the header line's bytes, its line end left out (known once it ends)
        self._head_reads: list[bytes] | None = []  # the reads before the header line ended
        self._recent = b""  # the last bytes of the reads before this one (up to the header's length and a BOM)
        self.header_rows: set[int] = set()  # data rows whose line is the header line again
        self._loose: bytes | None = None  # the header line without its quotes (CSV): a record quoted otherwise
        self._names: list[str] | None = None  # the header's names, which such a record must hold to be the header
        self._loose_read = False  # this read's bytes hold _loose (its records are compared)
        # the reader's stream.NewlineAtEnd beneath it, if any: its ``added`` line feed is no part of an unclosed value
        self.ending = None

    def readable(self):
        return True

    def readinto(self, b):
        if self._cap is None:
            n = self._raw.readinto(b)
            if n:
                self._scan(bytes(memoryview(b)[:n]))
            return n
        while self._out_at >= len(self._out) and not self._eof:
            data = self._raw.read(max(len(b), 1 << 16))
            self._queue = []
            if data:
                self._scan(data)
                self._read_end(data)
            else:
                self._eof = True
                self._stream_end()
            self._out, self._out_at = b"".join(self._queue), 0
        n = min(len(b), len(self._out) - self._out_at)
        b[:n] = self._out[self._out_at:self._out_at + n]
        self._out_at += n
        return n

    def close(self):
        self._raw.close()
        super().close()

    def file_offset(self, out: int) -> int:
        """The offset in the input stream of byte ``out`` of what was handed on (fields over the cap were left out)."""
        k = bisect.bisect_right(self._shifts, (out, float("inf"))) - 1
        return out + self._shifts[k][1]

    # ------------------------------------------------------------------ max_field
    def _put(self, data) -> None:
        if data:
            self._queue.append(data)
            self._queued += len(data)

    def _field_end(self, pos: int) -> None:
        """The field that started at ``_field_start`` ends at ``pos`` (a delimiter or line end outside quotes)."""
        if self.record > 0 and (self._dropping or pos - self._field_start - self._quotes > self._cap):
            self._replace(pos, b'""')
        elif self._held:  # held back while open: within the cap, handed on as it was
            self._queue += self._held
            self._queued += self._held_n
            self._held, self._held_n = [], 0
        self._field_quoted, self._quotes = False, 0

    def _replace(self, pos: int, replacement: bytes) -> None:
        """The field over the cap, from ``_field_start`` to ``pos``, handed on as ``replacement``."""
        self._put(self._chunk[self._emit_from - self._base:max(self._field_start, self._base) - self._base])
        self._held, self._held_n, self._dropping = [], 0, False
        self._put(replacement)
        self._emit_from = pos
        self._shifts.append((self._queued, pos - self._queued))
        self.oversized.setdefault(self.record - 1, []).append((self.field, pos - self._field_start - self._quotes))

    def _read_end(self, data: bytes) -> None:
        """A read's bytes are handed on up to the field still open; that one's are held (or skipped, over the cap)."""
        end = self._base + len(data)
        if self.record == 0:  # the header is handed on whole
            self._put(data[self._emit_from - self._base:])
        elif not self._dropping:
            start = max(self._field_start, self._base)
            self._put(data[self._emit_from - self._base:start - self._base])
            if end - self._field_start - self._quotes - self._pending_quote > self._cap:  # (the value's bytes so far)
                self._dropping, self._held, self._held_n = True, [], 0
            elif end > start:
                self._held.append(data[start - self._base:])
                self._held_n += end - start
        self._emit_from = end

    def _stream_end(self) -> None:
        """The end of the input inside a field (an unclosed quote): held bytes handed on, or the field replaced."""
        self._chunk, self._base = b"", self._offset
        if self._dropping:
            self._replace(self._offset, b'"' if self.unclosed else b'""')
        elif self._held:
            self._queue += self._held
            self._queued += self._held_n
            self._held, self._held_n = [], 0

    @property
    def unclosed(self) -> bool:
        return self.in_quotes and not self._pending_quote  # a closing quote as the very last byte closes the field

    def _closed(self, next_byte: int | None) -> None:
        """The quoted field closed. Text right after it is not CSV: a quote that closed lines later swallowed the
        lines between; on its own line (``"Stop" he said``) pyarrow would join the parts and drop the quotes. Either
        way a suspect (a close line equal to the open line says the second)."""
        self.in_quotes = False
        self._quotes += 1
        if (next_byte is not None and next_byte not in (0x0A, 0x0D, self._delim)
                and self.open_record is not None and self.open_record >= 1):
            self.suspects.setdefault(self.open_record - 1, (self.open_line, self.open_field, self.line))

    def _scan(self, data: bytes) -> None:
        base, n, i = self._offset, len(data), 0
        self._chunk, self._base = data, base
        cap = self._cap is not None
        if base == 0 and data.startswith(BOM):  # no part of the header: pyarrow skips it, so a BOM and a line end is a
            self._field_start = self._record_start = len(BOM)  # blank line (no record), and a quote after it opens one
        if self._filling is not None and n:  # (the line goes on: a CR that ended the last read starts no other)
            self._filling = self._filling.shows(data, 0)
        if self._cr_pending is not None and n:  # the CR that ended the last read: alone, or a CRLF's
            record, field, before = self._cr_pending
            self._cr_pending = None
            if record == 0 or self._cut is not None or (self.lf_file and data[0] != 0x0A):
                self._after_cr(data[0] != 0x0A, record, field, lambda: before, data, 0)
        if self._undecided is not None and n:
            self._decide(data, 0)
        if self._pending_quote:  # the quote that ended the last read: '""' (a quote) or the closing quote
            self._pending_quote = False
            if data[:1] == b'"':
                i = 1
                self._quotes += 1
            else:
                self._closed(data[0])
        search = self._special.search
        # a record that is the header line again holds its bytes, here or across the last read's end: where they are
        # nowhere (nearly every read), no record is compared (a Python call a row of the header's length was 40% slower)
        header = self.header
        again = header is None or header in data or header in self._recent + data[:len(header) + len(BOM)]
        # the header quoted otherwise ("id","text" after id,text: files that two writers wrote, joined): every record
        # of a read whose bytes hold it once quotes are dropped is compared (_same_as_header), nearly no read's
        self._loose_read = self._loose is not None and self._loose in (self._recent + data).replace(b'"', b"")
        while (m := search(data, i)) is not None:
            j = m.start()
            c = data[j]
            i = j + 1
            if self.in_quotes:
                if c == 0x22:  # '"': '""' is a quote, else it closes the field
                    if j + 1 == n:
                        self._pending_quote = True
                    elif data[j + 1] == 0x22:
                        i = j + 2
                        self._quotes += 1
                    else:
                        self._closed(data[j + 1])
                elif c == 0x0A or c == 0x0D:
                    self._line_end(data, j, c)
                    if c == 0x0A and not self._record_multiline:  # a \n in a value: a cut of the file may split it
                        self._record_multiline = True
                        self.multiline_records += 1
                continue
            pos = base + j
            if c == 0x22:
                if pos == self._field_start:  # a quote opens a quoted field only at its start
                    self.in_quotes = self._field_quoted = True
                    self._quotes = 1
                    self.open_line, self.open_field, self.open_record = self.line, self.field, self.record
                continue
            if cap:
                self._field_end(pos)
            if c == 0x0A or c == 0x0D:  # pyarrow ends a line at \n, \r or \r\n
                self._line_end(data, j, c)
                ended = self.record if pos > self._record_start else None  # a blank line is not a record
                if c == 0x0A:
                    if ended == 0 or self._cut is not None:  # (else nothing to note: the common case, kept quick)
                        self._after_lf(ended)
                elif j + 1 == n:
                    self._cr_pending = (ended, self.field, self._before(data, j))
                elif ended == 0 or self._cut is not None or (self.lf_file and data[j + 1] != 0x0A):
                    self._after_cr(data[j + 1] != 0x0A, ended, self.field, lambda: self._before(data, j), data, j + 1)
                if ended is not None:
                    if ended == 0 or self._loose_read or again and pos - self._record_start - len(self.header) in (
                            0, len(BOM)):
                        self._same_as_header(data, pos, ended)
                    self.record += 1
                    if self.ends is not None:
                        self.ends.append(pos)
                self.field = 0
                self._field_start = self._record_start = pos + 1
                self._record_multiline = False
                if c == 0x0D and i < n and data[i] == 0x0D:  # the CRs after it: blank lines, nothing more (a run
                    k = _CRS.match(data, i).end()  # of megabytes took seconds a megabyte one by one)
                    self.line += k - i
                    self._field_start = self._record_start = base + k
                    i = k
            elif c == self._delim:
                self.field += 1
                self._field_start = pos + 1
        self._offset = base + n
        if n:
            self._last = data[-1]
            self._tail = data[-_AROUND:] if n >= _AROUND else (self._tail + data)[-_AROUND:]
            if self._head_reads is not None:
                self._head_reads.append(data)
            else:
                keep = len(self.header) + len(BOM)
                self._recent = data[-keep:] if n >= keep else (self._recent + data)[-keep:]

    def _same_as_header(self, data: bytes, pos: int, record: int) -> None:
        """The record that ends at stream offset ``pos`` (in ``data``): the header (``record`` 0) is kept; a later
        one of as many bytes (or a BOM more) is noted in ``header_rows`` when its bytes are the header's."""
        base, start = self._base, self._record_start
        if record == 0:
            self.header = (b"".join(self._head_reads) + data[:pos - base])[start:]
            self._head_reads, self._recent = None, b""  # (the records after it start in this read)
            if self._quoting:
                self._names = self._fields(self.header.removeprefix(BOM))
                self._loose = self.header.removeprefix(BOM).replace(b'"', b"") or None
                self._loose_read = self._loose is not None and self._loose in data[pos - base:].replace(b'"', b"")
            return
        if start >= base:
            line = data[start - base:pos - base]
        else:  # the record began in an earlier read: its bytes there are the last of _recent
            line = self._recent[len(self._recent) - (base - start):] + data[:pos - base]
        line = line.removeprefix(BOM)
        if line == self.header.removeprefix(BOM) or (self._loose is not None and line.replace(b'"', b"") == self._loose
                                                      and self._fields(line) == self._names):
            self.header_rows.add(record - 1)

    def _fields(self, line: bytes) -> list[str]:
        """A record's values as CSV reads them (its quotes undone)."""
        return next(csv.reader([line.decode("utf-8", errors="replace")], delimiter=self._delimiter), [])

    def _before(self, data: bytes, j: int) -> bytes:
        """Up to _AROUND bytes of the line before ``data[j]`` (the earlier reads' last bytes: ``_tail``)."""
        window = data[max(0, j - _AROUND):j]
        if len(window) < _AROUND:
            window = self._tail[max(0, len(self._tail) - (_AROUND - len(window))):] + window
        return window[window.rfind(b"\n") + 1:]

    def _after_cr(self, alone: bool, record: int | None, field: int, before, data: bytes, after: int) -> None:
        """A CR outside quotes (``alone``: not a CRLF's) ended ``record`` (None: a blank line) in ``field``: the
        header's decides how the file's lines end; the first one alone in a line of a file of line feeds cuts the line
        (module docstring; ``before()``: the line's bytes before it; the bytes after it from ``data[after]``), and
        every record of a cut line is noted in ``cut_rows``."""
        if record == 0:
            self.lf_file = not alone
            return
        if record is None:  # a blank piece (a CR at the start of a line, or after another): no record to cut
            return
        if self._cut is not None:
            self.cut_rows[record - 1] = (self._cut, False)
        elif alone and self.lf_file:
            self._undecided = (record, CutLine(field, before()))
            self._filling = self._undecided[1].shows(data, after)
            self._decide(data, after)

    def _decide(self, data: bytes, at: int) -> None:
        """After the CR alone that ended a record (``_undecided``) the line goes on at ``data[at]``: it is cut only if
        a byte other than a CR comes before its line feed (another record); CRs then a line end (``\\r\\r\\n``) are blank
        lines pyarrow skips, so the line is one record whole. Undecided while the read ends in CRs."""
        k = _CRS.match(data, at).end() if at < len(data) and data[at] == 0x0D else at
        if k == len(data):
            return
        record, line = self._undecided
        self._undecided = None
        if data[k] != 0x0A:
            self._cut = line
            self.cut_rows[record - 1] = (line, True)

    def undecided_row(self) -> int | None:
        """The data row a CR alone ended whose line the reads so far cannot tell cut or whole (only CRs follow it to
        the end of the last read: a run of CRs may be longer than any read ahead), else None. Its batch waits."""
        record = self._undecided[0] if self._undecided is not None else (self._cr_pending or (None,))[0]
        return record - 1 if record else None

    def _after_lf(self, record: int | None) -> None:
        """A line feed outside quotes ended ``record`` (None: a blank line, or a CRLF's CR ended it) and its line."""
        if record == 0:
            self.lf_file = True
        elif record is not None and self._cut is not None:
            self.cut_rows[record - 1] = (self._cut, False)
        self._cut = None

    def _line_end(self, data: bytes, j: int, c: int) -> None:
        """Counts the line end ``c`` at ``data[j]``: \n, \r, and \r\n as one."""
        if c == 0x0D or (data[j - 1] if j else self._last) != 0x0D:
            self.line += 1


_CRS = re.compile(b"\r+")
_AROUND = 100  # bytes of a line read on each side of a CR alone, to show it (as 20 characters)


class CutLine:
    """A line a CR alone cuts into records: the field its first such CR is in, and the line's bytes around that CR
    (up to _AROUND on each side: the same whatever the reads)."""

    def __init__(self, field: int, before: bytes):
        self.field, self.before, self.after = field, before, b""

    def shows(self, data: bytes, at: int) -> "CutLine | None":
        """The line's bytes after the CR go on at ``data[at]``: -> self while a next read may show more, else None."""
        self.after += data[at:at + _AROUND - len(self.after)]
        return None if len(self.after) >= _AROUND or b"\n" in self.after else self

    def shown(self) -> str:
        """The line around the CR as a reason shows it, in JSON quotes (so that the CR, tabs and quotes are seen): up
        to 20 characters on each side, within the line."""
        import json

        before = self.before.decode("utf-8", errors="replace")
        after = self.after.split(b"\n", 1)[0].removesuffix(b"\r").decode("utf-8", errors="replace")
        shown = ("..." if len(before) > 20 else "") + before[-20:] + "\r" + after[:20] + ("..." if len(after) > 20 else "")
        return json.dumps(shown, ensure_ascii=False)


class LineMender(io.RawIOBase):
    """The stream of a CSV / TSV read again after pyarrow stopped at a malformed line that is not valid UTF-8: pyarrow
    decodes such a line before it calls the invalid-row handler, and fails, so the line could not be a bad row. Here
    the non-ASCII bytes of those lines (``rows``: data rows) read as ``?``, one byte for one, so every offset stays
    and pyarrow hands the line to the handler; ``invalid[row]`` keeps the line's first invalid byte for its reason.
    Records are counted as pyarrow counts them (a QuoteTracker's, which ``ends`` them)."""

    _ASCII = bytes(range(128)) + b"?" * 128

    def __init__(self, raw, rows: set[int], delimiter: str = ",", quoting: bool = True, escaped: bool = False):
        import codecs

        self._raw = raw
        self.rows = rows
        self._records = {r + 1 for r in rows}  # record 0 is the header
        self._last = max(self._records)
        self._counter = QuoteTracker(None, delimiter, quoting=quoting)
        # a byte the encoding could not read: raw in UTF-8 input, a U+DC00..U+DCFF escape after our transcoder
        self._decoders = {r: codecs.getincrementaldecoder("utf-8")("surrogatepass" if escaped else "surrogateescape")
                          for r in self._records}
        self.invalid: dict[int, int] = {}  # data row -> its line's first byte that is not valid in the encoding

    def readable(self):
        return True

    def readinto(self, b):
        n = self._raw.readinto(b)
        if n and self._counter.record <= self._last:  # past the last line to mend: handed on as read
            self._mend(memoryview(b)[:n])
        return n

    def _mend(self, view) -> None:
        t = self._counter
        first, base = t.record, t._offset
        t.ends = []
        t._scan(bytes(view))
        for r in self._records:
            j = r - first
            if 0 <= j <= len(t.ends):  # record r has bytes in this read: from the end of the one before to its own
                start = base if j == 0 else t.ends[j - 1] + 1
                end = t.ends[j] if j < len(t.ends) else base + len(view)
                self._note(r, bytes(view[start - base:end - base]), final=j < len(t.ends))
                view[start - base:end - base] = bytes(view[start - base:end - base]).translate(self._ASCII)

    def _note(self, record: int, data: bytes, final: bool) -> None:
        """The first byte of the line that is not valid in the encoding (read in pieces: a character may span two;
        ``final``: the line ends here)."""
        decoder = self._decoders.get(record)
        if decoder is None:
            return
        text = decoder.decode(data, final)
        bad = next((ch for ch in text if "\udc00" <= ch <= "\udcff"), None)
        if bad is not None:
            self.invalid[record - 1] = ord(bad) - 0xDC00
            del self._decoders[record]

    def close(self):
        self._raw.close()
        super().close()
