"""What pyarrow's CSV reader does not tell: a quoted field that is never closed, rows whose fields span lines,
and the delimiter of a file whose header is not comma-separated.

``QuoteTracker`` wraps the binary stream pyarrow reads and follows the quoting as pyarrow does (a quote opens
a quoted field only at the start of a field; inside one, ``""`` is a quote and ``"`` closes it). At the end
of the file it knows whether a quoted field was left open (pyarrow then reads every line after it into that
one field, silently) and on which line and in which field it opened, and how many records hold a quoted
line break. It looks at the delimiter, quote and newline bytes only, so it costs little next to the model.
"""

from __future__ import annotations

import io
import re

LIKELY_DELIMITERS = (";", "|", "\t")
_NAMES = {",": "','", ";": "';'", "|": "'|'", "\t": "tab"}


def parse_delimiter(value: str | None) -> str | None:
    """The ``delimiter`` option: one character; 'tab', '\\t' and 'comma'/'semicolon'/'pipe' spelled out are accepted."""
    if value is None:
        return None
    spelled = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
    d = spelled.get(value.lower(), value)
    if len(d) != 1 or d in ('"', "\n", "\r"):
        from .errors import InputError, opt

        raise InputError(f"{opt('delimiter', value, cli=repr(value))} is not a single delimiter character",
                         "give one character, e.g. ';', '|' or tab")
    return d


def name_of(delimiter: str) -> str:
    return _NAMES.get(delimiter, repr(delimiter))


def header_line(head: bytes) -> bytes:
    """The first non-blank line of the file (a quoted header name may not span lines)."""
    head = head.lstrip(b"\r\n")
    return re.split(rb"[\r\n]", head, maxsplit=1)[0].removeprefix(b"\xef\xbb\xbf")  # pyarrow ends a line at \r too


def sniff_delimiter(head: bytes) -> str:
    """',' unless the header line has no comma and holds ';', '|' or a tab (the most frequent of them)."""
    line = _unquoted(header_line(head))
    if b"," in line:
        return ","
    counts = {d: line.count(d.encode()) for d in LIKELY_DELIMITERS}
    best = max(counts, key=counts.get)
    return best if counts[best] else ","


def likely_delimiters_in(name: str, used: str) -> list[str]:
    return [d for d in (",",) + LIKELY_DELIMITERS if d != used and d in name]


def _unquoted(line: bytes) -> bytes:
    return re.sub(rb'"[^"]*"', b"", line)


class QuoteTracker(io.RawIOBase):
    """A raw binary stream that follows CSV quoting while pyarrow reads through it (ASCII-compatible encodings).

    Records are counted as pyarrow counts them (blank lines are not records; the header is record 0), so
    ``suspects`` maps a 0-based *data-row* number to the reason its quoted field swallowed other lines:
    a quote that opens a field and closes lines later followed by more text (``4,"unterminated`` ... closed by
    the opening quote of a later row), and ``unclosed`` says a quoted field ran to the end of the file.
    """

    def __init__(self, raw, delimiter: str = ","):
        self._raw = raw
        self._special = re.compile(b'["\\n\\r' + re.escape(delimiter.encode()) + b"]")
        self._delim = ord(delimiter)
        self.line = 1  # physical line (1-based) of the next byte
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

    def readable(self):
        return True

    def readinto(self, b):
        n = self._raw.readinto(b)
        if n:
            self._scan(bytes(memoryview(b)[:n]))
        return n

    def close(self):
        self._raw.close()
        super().close()

    @property
    def unclosed(self) -> bool:
        return self.in_quotes and not self._pending_quote  # a closing quote as the very last byte closes the field

    def _closed(self, next_byte: int | None) -> None:
        """The quoted field closed; text right after a quote that closed lines later means it swallowed lines."""
        self.in_quotes = False
        if (next_byte is not None and next_byte not in (0x0A, 0x0D, self._delim) and self.line > self.open_line
                and self.open_record is not None and self.open_record >= 1):
            self.suspects.setdefault(self.open_record - 1, (self.open_line, self.open_field, self.line))

    def _scan(self, data: bytes) -> None:
        base, n, i = self._offset, len(data), 0
        if self._pending_quote:  # the quote that ended the last read: '""' (a quote) or the closing quote
            self._pending_quote = False
            if data[:1] == b'"':
                i = 1
            else:
                self._closed(data[0])
        search = self._special.search
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
                    else:
                        self._closed(data[j + 1])
                elif c == 0x0A:
                    self.line += 1
                    if not self._record_multiline:
                        self._record_multiline = True
                        self.multiline_records += 1
                continue
            pos = base + j
            if c == 0x22:
                if pos == self._field_start:  # a quote opens a quoted field only at its start
                    self.in_quotes = True
                    self.open_line, self.open_field, self.open_record = self.line, self.field, self.record
            elif c == 0x0A or c == 0x0D:  # pyarrow ends a line at \n, \r or \r\n
                if c == 0x0A:
                    self.line += 1
                if pos > self._record_start:  # a blank line is not a record
                    self.record += 1
                self.field = 0
                self._field_start = self._record_start = pos + 1
                self._record_multiline = False
            elif c == self._delim:
                self.field += 1
                self._field_start = pos + 1
        self._offset = base + n
