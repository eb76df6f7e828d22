"""CSV and TSV: the header (the delimiter sniffed), pyarrow's streaming parse with quote tracking, and malformed
lines and unclosed quotes as bad rows in their place.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import re
import sys

import pyarrow as pa

from ..errors import InputError, clipped, one_line, opt
from .rejects import Reason, RejectCode, shown_text, too_large
from . import arrowexit
from .base import HEAD_BYTES, RawBatch, stdin_empty_error, utf8_error_at
from .kept import convert_cells, infer_cell_type, quoted, written_cells
from .paths import compression_of
from .stream import CountingReader, NewlineAtEnd, ReadAheadGate
from .text import TextReader, byte_order_hint, open_decompressed, split_wide_lines, wide_line_codec


_STRADDLES = "straddling object straddles two block boundaries"  # pyarrow: a row longer than the CSV block


class _RowTooLong(Exception):
    """A row longer than pyarrow's CSV block, near data row ``row`` (CsvReader._parse_from reads again)."""

    def __init__(self, row: int):
        super().__init__(row)
        self.row = row


class _Unskippable(InputError):
    """A malformed line that is not valid in the encoding, at data row ``row``: pyarrow decodes such a line before it
    calls the skip handler, and fails (CsvReader._parse_from reads again with the line mended: csvcheck.LineMender)."""

    row = -1


class CsvReader(TextReader):
    """CSV and TSV (TSV: tab-separated, no quoting; a value quoted as CSV quotes one is a bad row there)."""

    CSV_BLOCK_BYTES = 1 << 22  # pyarrow's streaming CSV reader parses this many bytes at a time
    MAX_BLOCK_BYTES = (1 << 31) - 1  # ... and at most this many (pyarrow's int32), for a row longer than that
    READ_AHEAD_BLOCKS = 2  # blocks pyarrow may read past the last one parsed while the run is busy (stream.ReadAheadGate)
    MAX_MENDED_LINES = 16  # malformed lines not valid in the encoding a file is read again for (each: once more)

    def _setup(self, delimiter):
        from .csvcheck import parse_delimiter

        super()._setup(delimiter)
        self._delimiter_option, self._delimiter_given = parse_delimiter(delimiter), delimiter
        self.delimiter = self._delimiter_option or ("\t" if self.fmt == "tsv" else ",")

    def _block_header(self, f: str) -> bytes:
        """The header line, put in front of a later block: the first line that is not empty (pyarrow skips empty
        lines before it, as the local reader's csvcheck.header_line does)."""
        from .csvcheck import BOM

        with open_decompressed(self.fs, f, compression_of(f)) as fh:
            line = fh.readline().removeprefix(BOM)  # (a BOM alone on the first line: a blank line, as pyarrow reads it)
            while line and not line.strip(b"\r\n"):
                line = fh.readline()
            return line

    def _count_lines(self, data: bytes, at_most: bool = False) -> int | None:
        """Records of a block without quotes: its non-empty lines (pyarrow ends a line at \\n, \\r\\n or \\r and
        skips empty ones; a malformed line is a row too), less the header. None when a quote may join lines, unless
        ``at_most``: then that count is a bound (a quoted value spanning lines makes one record of them)."""
        if b'"' in data and self.fmt == "csv" and not at_most:
            return None
        return max(0, sum(1 for ln in data.removeprefix(b"\xef\xbb\xbf").splitlines() if ln) - 1)

    def id_type(self) -> pa.DataType:
        return pa.int64() if self.id_column is None else pa.string()  # CSV/TSV ids are text

    def _parse_options(self, handler=None):
        import pyarrow.csv as pcsv

        return pcsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=self.fmt != "tsv",
                                 invalid_row_handler=handler, quote_char=False if self.fmt == "tsv" else '"')

    def _transcoded(self) -> bool:
        """pyarrow reads this encoding through its Python transcoder (every encoding but UTF-8)."""
        return codecs.lookup(self.encoding).name != "utf-8"

    #: columns a CSV / TSV header may have: pyarrow parses every column of every row, so a header of millions (a
    #: file that is not a table, or has no line end) took memory and time without bound
    MAX_COLUMNS = 10_000

    def _head_limit(self) -> int:
        """The header line is read whole to find the columns: not past what a row may hold (max_field_bytes)."""
        return max(HEAD_BYTES, 2 * self.max_field_bytes)

    def _check_header_size(self, data: bytes) -> None:
        """Refuse a header line of more than MAX_COLUMNS columns (counted by delimiters: an upper bound), or one with
        no line end in the head read (longer than the reader reads to find the columns)."""
        line = data.split(self._line_end(), 1)[0].split(b"\n", 1)[0].split(b"\r", 1)[0]  # (EBCDIC's ends at 0x25)
        ends = len(line) < len(data.rstrip(b"\x00"))
        sep = self.delimiter.encode() if self.encoding.replace("-", "").lower() in ("utf8", "ascii", "latin1") else None
        columns = line.count(sep) + 1 if sep else None
        if (columns or 0) > self.MAX_COLUMNS or (not ends and len(data) >= self._head_limit()):
            what = (f"its header line has {columns:,} columns, more than {self.MAX_COLUMNS:,}" if ends and columns
                    else f"its first line runs past the {len(data):,} bytes read to find the columns")
            raise InputError(f"{self.path}: {what}, which bertfeat does not read as a table",
                             "check it is a CSV / TSV file with a header line, or keep the columns you need (with cut, "
                             "or as Parquet, whose columns are read apart)")

    def _header_line(self, head: bytes) -> bytes:
        """The head's first line that is not blank, with its line end (UTF-16 / UTF-32: cut at an encoded line feed on
        a code unit, not at a 0x0a byte, which cut a code unit in half)."""
        wide = wide_line_codec(self.encoding, head)
        if wide is not None:
            lines, rest = split_wide_lines(head, *wide)
            blank = "\ufeff \t\r\n"
            return next((b"".join(lines[:i + 1]) for i, line in enumerate(lines)
                         if line.decode(wide[0], errors="replace").strip(blank)), head)
        start = len(head) - len(head.lstrip(b"\r\n"))
        end = min((i for i in (head.find(b"\n", start), head.find(b"\r", start)) if i >= 0), default=-1)
        return head if end < 0 else head[:end + 1]

    def _header_names(self, data: bytes) -> list[str]:
        import pyarrow.csv as pcsv

        if not data.rstrip(b"\x00").endswith((b"\n", b"\r")):  # a header alone without its line end: pyarrow says
            codec = (wide_line_codec(self.encoding, data) or ("utf-8", 1))[0]  # "Empty CSV file"; no second BOM
            data += "\n".encode("utf-8" if codec.startswith("utf-8") else codec)

        if not self._transcoded():
            sink = pa.BufferOutputStream()
            sink.write(data)
            source = pa.BufferReader(sink.getvalue())  # arrow-owned bytes: none of Python's for its I/O thread (arrowexit.py)
        else:  # pyarrow transcodes other encodings through Python's codecs in any case
            source = io.BytesIO(data)
        handler = _skip_rows()
        try:
            with _quiet_row_handler_errors():
                reader = pcsv.open_csv(source, read_options=pcsv.ReadOptions(use_threads=False, block_size=len(data) + 1,
                                                                             encoding=self.encoding),
                                       parse_options=self._parse_options(handler))
            return list(reader.schema.names)
        finally:
            # pyarrow's I/O thread may hold them a moment longer (arrowexit.py)
            arrowexit.released(handler, *([source] if isinstance(source, io.BytesIO) else []))

    def _head_columns(self, head: bytes) -> list[str]:
        """The header as pyarrow parses it (so the names always match the streaming reader's)."""
        if not head and self.path == "-":
            raise stdin_empty_error(f"{self.fmt.upper()} whose first line names the columns")
        if not head.strip():  # (as JSONL says it: a file of blank lines is not "empty" to whoever opens it)
            what = "the file is empty" + (" (blank lines only)" if head else "")
            raise InputError(f"{self.name}: {what}", "the first line must name the columns")
        from .csvcheck import likely_delimiters_in, name_of, sniff_delimiter

        self._refuse_json(head)
        self._sample = head  # the head's rows decide the kept columns' types (_decide_keep_types)
        option = self._delimiter_option
        if self.fmt == "csv" and option is None:
            self.delimiter = sniff_delimiter(head)  # ';', '|' or tab when the header line has no comma
        self._check_header_size(head)
        try:
            cols = self._header_names(head)
        except (pa.ArrowException, ValueError):
            # the data rows of the head may be what fails (a malformed line with invalid bytes): the header line alone
            try:
                cols = self._header_names(self._header_line(head))
            except UnicodeDecodeError as e:
                try:  # the offset in the file: the header comes first, so the first undecodable byte is the header's
                    head.decode(self.encoding)
                    at = e.start
                except UnicodeDecodeError as whole:
                    at = whole.start
                raise InputError(f"{self.name} header line: invalid {self.encoding} at byte {at}",
                                 f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')})") from None
            except (pa.ArrowException, ValueError) as e:
                self._refuse_byte_order(head, e)
                raise InputError(f"{self.name}: cannot read the header line as {self.fmt.upper()} ({one_line(e)})",
                                 f"the first line must name the columns; check {opt('input_format')} and {opt('encoding')}") from None
        if not any(c.strip() for c in cols):
            raise InputError(f"{self.name}: the header line names no column", "the first line must name the columns")
        likely = likely_delimiters_in(cols[0], self.delimiter) if len(cols) == 1 and option is None else []
        if likely:
            raise InputError(f"{self.name}: the header line is one column {cols[0]!r}, which holds {name_of(likely[0])}",
                             f"pass {opt('delimiter', name_of(likely[0]))} if that separates the columns "
                             f"(or {opt('delimiter', name_of(self.delimiter))} to read one column)")
        if len(cols) == 1 and option is not None and option != ("\t" if self.fmt == "tsv" else ","):
            self._refuse_absent_delimiter(head, cols[0])  # (the format's own: the one-column escape offered above)
        self._refuse_duplicates(cols)
        if self.fmt == "tsv":
            self._refuse_quoted_names(cols)
        return cols

    def _refuse_byte_order(self, head: bytes, e: Exception) -> None:
        """A UTF-16 / UTF-32 encoding given without the byte order the file has (--encoding utf-16 on a file with no
        byte order mark, utf-16-be on a little-endian one): the header's failure named no cause ('UTF-16 stream does
        not start with BOM', 'Empty CSV file'); the byte order the NUL bytes show is named instead."""
        seen = byte_order_hint(self.encoding, head)
        if seen is None:
            return
        raise InputError(f"{self.name}: cannot read the header line as {self.encoding} ({one_line(e)}); {seen[1]}",
                         f"pass {opt('encoding', seen[0])}")

    def _refuse_json(self, head: bytes) -> None:
        """JSON read as CSV / TSV (a .jsonl file named .csv, --input-format csv on one): the first object was the
        header, and each later line of a one-key object was read whole as the text, braces and key included, and
        encoded (the other shapes were refused with a fix naming the text column or the delimiter)."""
        codec = (wide_line_codec(self.encoding, head) or (self.encoding, 1))[0]
        first = head[:1 << 16].decode(codec, errors="replace").lstrip("\ufeff \t\r\n").split("\n", 1)[0].strip()
        if first == "[" or first.startswith("[{"):  # a .json export: one array over several lines
            stem = "NAME" if self.path == "-" else self.files[0].rsplit("/", 1)[-1].split(".", 1)[0]
            raise InputError(f"{self.name}: its first line {first[:40]!r} opens a JSON array, not a {self.fmt.upper()} "
                             "header", f"write one object per line (e.g. jq -c '.[]' FILE > {stem}.jsonl) and pass "
                             "that file")
        if not first.startswith("{"):
            return
        try:
            obj = json.loads(first)
        except ValueError:
            return
        if isinstance(obj, dict) and obj:
            shown = clipped(first)
            raise InputError(f"{self.name}: its first line is a JSON object ({shown}), so the input is JSON Lines, not "
                             f"{self.fmt.upper()}", f"pass {opt('input_format', 'jsonl')}"
                             + ("" if self.path == "-" else " (or name the file .jsonl)"))

    def _refuse_absent_delimiter(self, head: bytes, name: str) -> None:
        """A given delimiter the header line does not hold, while another separates it (--delimiter tab on a comma
        file): every line would be read whole as one column, the text column by auto-detection. A name in quotes
        holding ',' stays one column (that is how a one-column file names it)."""
        from .csvcheck import name_of, splitting_delimiter

        other = splitting_delimiter(head, self.delimiter)
        if other is None:
            return
        d, k = other
        said = name_of(self.delimiter)  # '\t' as typed, and how it was read
        given = opt("delimiter", self._delimiter_given,
                    cli=f"'{self._delimiter_given}' ({said})" if self._delimiter_given == "\\t" else said)
        raise InputError(f"{self.name}: {given} is not in the header line {name!r}, which {name_of(d)} separates into "
                         f"{k} columns", f"pass {opt('delimiter', name_of(d))} (or leave {opt('delimiter')} out: "
                         f"the header line decides)")

    def _refuse_quoted_names(self, cols: list[str]) -> None:
        """A TSV header whose every name is in quotes was written by a CSV writer (R's write.table, Excel; quoting on):
        read without quoting, its names and values would keep their quotes."""
        names = [c for c in cols if c.strip()]
        if all(len(c) >= 2 and c[0] == c[-1] == '"' for c in names):
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise InputError(f"{self.name}: the header line's names are in quotes ({shown}), as CSV quotes them, but TSV "
                             "is read without quoting", f"read the file as CSV with tabs: {opt('input_format', 'csv')} "
                             f"{opt('delimiter', 'tab')}")

    def _refuse_duplicates(self, cols: list[str]) -> None:
        """Refuse a header name that appears more than once, used or not (as Parquet input is): pyarrow would read
        the first silently (pandas renames the second ``x.1``), and which one the user means is not ours to guess.
        Blank names are not refused: they name no column (trailing delimiters, as spreadsheets export them)."""
        for name in dict.fromkeys(c for c in cols if c.strip()):
            at = [i + 1 for i, c in enumerate(cols) if c == name]
            if len(at) > 1:
                where = (", ".join(map(str, at[:-1])) + f" and {at[-1]}" if len(at) <= 6  # one line, however many
                         else ", ".join(map(str, at[:5])) + f", ... and {at[-1]}")
                raise InputError(f"{self.name}: the column name {name!r} appears {len(at)} times in the header line "
                                 f"(columns {where})", "rename the columns so that every name is unique")


    def _parse_from(self, opener, reopenable: bool):
        """_parse with a block that fits the longest row: pyarrow's streaming reader cannot parse a row longer than its
        block (``straddling object straddles two block boundaries``), so the input is read again with blocks 8x as
        large, the rows already handed out skipped; and again, the line mended, after a malformed line pyarrow could
        not skip (_Unskippable). Standard input cannot be read again: there both are refused."""
        block, done = self.CSV_BLOCK_BYTES, 0  # rows handed out so far
        mend: set[int] = set()  # data rows of malformed lines that are not valid in the encoding
        while True:
            stream, counter = opener()
            try:
                for b in self._parse(stream, counter, block, mend):
                    if b.rows and b.rows[0] < done:
                        if b.rows[-1] < done:
                            continue
                        b = b.slice(done - b.rows[0], len(b.rows), b.bytes_read, b.bytes_start)
                    done = b.rows[-1] + 1 if b.rows else done
                    yield b
                return
            except _RowTooLong as e:
                if not reopenable or block >= self.MAX_BLOCK_BYTES:
                    size = f"{block >> 20} MiB" if block >= 1 << 20 else f"{block >> 10} KiB"
                    raise InputError(f"{self.name} near row {e.row}: a row is longer than {size}, more than "
                                     f"bertfeat reads at once{'' if reopenable else ' from standard input'}",
                                     "split or shorten the row" + ("" if reopenable else ", or read the file by its path"))
                block = min(block * 8, self.MAX_BLOCK_BYTES)
            except _Unskippable as e:
                if not reopenable or e.row in mend or len(mend) >= self.MAX_MENDED_LINES:
                    raise self._unskippable_error(e, reopenable, len(mend)) from None
                mend.add(e.row)

    def _parse(self, stream, counter, block: int | None = None, mend: set[int] | None = None):
        """The rows of a CSV / TSV stream as RawBatches, one per block pyarrow parses (``block`` bytes): malformed
        lines, an unclosed quote, fields over max_field_bytes and bytes the encoding cannot read are bad rows in their
        place. A row longer than the block raises _RowTooLong (_parse_from reads again with larger blocks); a malformed
        line not valid in the encoding raises _Unskippable, unless it is in ``mend`` (read mended: a bad row)."""
        skipped: dict[int, Reason] = {}  # the malformed lines pyarrow skipped: row -> why
        wanted = self._wanted()
        block = block or self.CSV_BLOCK_BYTES
        transcoder, mender, tracker, gate = self._parse_stream(stream, block, mend)
        on_invalid = _malformed_line_handler(skipped, mender, self.encoding)
        arrowexit.opened(gate)
        gate.wanting(True)  # opening parses the first block (more when its first row is longer)
        try:
            reader = self._open_csv(gate, block, on_invalid, wanted)
            yield from self._parse_batches(reader, gate, counter, block, skipped, tracker, transcoder, mend)
        except InputError:
            failure = counter.decompressing.failure if counter.decompressing is not None else None
            if failure is None:
                raise
            # pyarrow said the decompressor's failure as a parse error ("cannot parse as CSV (Truncated compressed
            # stream)"): said as the head's read says it
            raise InputError(f"{self.name}: cannot read the file ({one_line(failure)})",
                             "check the file is complete and its compression") from None
        finally:
            gate.close()
            arrowexit.released(gate, on_invalid)  # pyarrow's I/O thread may hold them a moment longer (arrowexit.py)

    def _parse_stream(self, stream, block: int, mend: set[int] | None = None):
        """The stream pyarrow reads, in layers: our transcoder (an encoding other than UTF-8), a line end at the end,
        the lines to mend (``mend``), the quote tracker, the read-ahead gate -> (transcoder, mender: each None when not
        there; tracker, gate)."""
        # a transcoded encoding: the gate's reads are not pyarrow's blocks, so it neither holds them back nor places
        # the batches (the bytes read stand for both)
        transcoded = self._transcoded()
        transcoder = None
        if transcoded:  # our own transcoder: a byte the encoding cannot read is a bad row, not the end of the file
            transcoder = _Utf8Transcoder(stream, self.encoding)
            stream = io.BufferedReader(transcoder, buffer_size=1 << 20)
        ending = NewlineAtEnd(stream)
        stream = io.BufferedReader(ending, buffer_size=1 << 20)  # UTF-8 here: a header alone ends
        mender = None
        if mend:
            from .csvcheck import LineMender

            mender = LineMender(stream, mend, self.delimiter, self.fmt == "csv", escaped=transcoder is not None)
            stream = io.BufferedReader(mender, buffer_size=1 << 20)
        from .csvcheck import QuoteTracker

        # on UTF-8 (as read, or as transcoded: UTF-16's quotes and line ends are not single bytes): an unclosed quote,
        # rows that span lines, lines a CR alone cuts into rows; fields over max_field_bytes left out as read
        tracker = QuoteTracker(stream, self.delimiter, self.max_field_bytes or None, quoting=self.fmt == "csv")
        tracker.ending = ending
        stream = io.BufferedReader(tracker, buffer_size=1 << 20)
        gate = ReadAheadGate(stream, float("inf") if transcoded else (1 + self.READ_AHEAD_BLOCKS) * block)
        return transcoder, mender, tracker, gate

    def _open_csv(self, stream, block: int, on_invalid, wanted: list[str]):
        """pyarrow's streaming CSV reader of ``stream`` (UTF-8, or transcoded), the wanted columns as bytes; a stream it
        cannot open is an InputError (a first row longer than the block: _RowTooLong)."""
        import pyarrow.csv as pcsv

        try:
            with _quiet_row_handler_errors():
                return pcsv.open_csv(
                    stream,
                    read_options=pcsv.ReadOptions(use_threads=False, block_size=block),  # UTF-8 (or transcoded)
                    parse_options=self._parse_options(on_invalid),
                    convert_options=pcsv.ConvertOptions(
                        include_columns=wanted,
                        column_types={c: pa.binary() for c in wanted},
                        strings_can_be_null=False, quoted_strings_can_be_null=False),
                )
        except (pa.ArrowException, OSError, EOFError, ValueError) as e:
            self._raise_unskippable(e)
            if _STRADDLES in str(e):
                raise _RowTooLong(0) from None
            raise InputError(f"{self.name}: cannot parse as {self.fmt.upper()} ({one_line(e)})",
                             f"check the file format, {opt('input_format')} and {opt('encoding')}") from None

    def _parse_batches(self, reader, gate, counter, block: int, skipped: dict[int, Reason], tracker, transcoder,
                       mend: set[int] | None = None):
        """pyarrow's batches as RawBatches, each placed in the file (bytes_start, bytes_read), then the end of the file
        (_parse_end). Each batch is held back until the next is parsed: an unclosed quote at the end of the file
        rejects its last row. A mended line (``mend``) must come back a bad row (_check_mended)."""
        row = 0
        start = 0  # bytes consumed before the batch
        pending = None
        it = iter(reader)
        blocks = 0  # batches pyarrow has parsed, one per block
        while (b := self._next_batch(it, gate, row)) is not None:
            blocks += 1
            gate.allow((blocks + self.READ_AHEAD_BLOCKS) * block)
            end = counter.count if transcoder is not None else _position(gate, blocks, counter, self.compression is not None,
                                                                         tracker)
            rows, pre, outs = self._place_rows(b, row, skipped)
            self._check_mended(mend, rows, pre)
            row += len(rows)
            out_t, out_p, out_i, *out_k = outs
            end = max(end, start)
            if transcoder is not None and transcoder.escaped:  # a byte the encoding could not read: a bad row
                self._reject_unreadable(outs, rows, pre)
            batch = self._typed(RawBatch(rows, out_t, out_p, out_i, pre, end, start,
                                         dict(zip(self.keep, out_k)) if self.keep else None))
            start = end
            undecided = tracker.undecided_row()
            if pending is not None and undecided is not None and pending.rows and undecided <= pending.rows[-1]:
                pending.extend(batch)  # a run of CRs past the read-ahead: whether its row is cut is not known yet
                pending.bytes_read = batch.bytes_read
                continue
            if pending is not None:
                yield self._mark_suspects(pending, tracker)
            pending = batch
        yield from self._parse_end(pending, tracker, skipped, row, start, counter)

    def _next_batch(self, it, gate, row: int):
        """pyarrow's next batch (None at the end of the file); its errors as InputErrors naming the row near them (a row
        longer than the block: _RowTooLong)."""
        try:
            gate.wanting(True)
            with _quiet_row_handler_errors():
                return next(it)
        except StopIteration:
            return None
        except UnicodeDecodeError as e:
            raise InputError(f"{self.name} near row {row}: invalid {self.encoding} ({one_line(e)})",
                             f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')})") from None
        except (pa.ArrowException, OSError, EOFError, ValueError) as e:
            self._raise_unskippable(e)
            if _STRADDLES in str(e):
                raise _RowTooLong(row) from None
            raise InputError(f"{self.name} near row {row}: cannot parse as {self.fmt.upper()} ({one_line(e)})",
                             f"fix the line, or pass {opt('encoding')} if the file is not UTF-8") from None
        finally:
            gate.wanting(False)

    def _place_rows(self, b, row: int, skipped: dict[int, Reason]) -> tuple[list[int], dict[int, Reason], list]:
        """A pyarrow batch's rows numbered from ``row``, the malformed lines pyarrow skipped put back in their places as
        bad rows (taken out of ``skipped``) -> (row numbers, the bad rows' reasons, the columns read: text, pair, id,
        then the kept columns; None for one not read)."""
        n = b.num_rows
        rows, pre = [], {}
        # the columns read (pair, id and kept columns when asked), the skipped malformed lines in their row positions
        src = [b.column(self.text_column).to_pylist(),
               b.column(self.pair_column).to_pylist() if self.pair_column is not None else None,
               b.column(self.id_column).to_pylist() if self.id_column is not None else None,
               *(b.column(c).to_pylist() for c in self.keep)]
        outs = [None if values is None else [] for values in src]
        k = 0
        while k < n:
            bad = row in skipped
            if bad:
                pre[row] = skipped.pop(row)
            rows.append(row)
            for values, out in zip(src, outs):
                if out is not None:
                    out.append(None if bad else values[k])
            k += 0 if bad else 1
            row += 1
        return rows, pre, outs

    def _reject_unreadable(self, outs: list, rows: list[int], pre: dict[int, Reason]) -> None:
        """Cells holding a byte the encoding could not read (_Utf8Transcoder's escapes) make their rows bad rows; each
        such cell is replaced by its text as the rejects file shows it."""
        out_t, out_p, out_i, *out_k = outs
        named = [("text", out_t), ("pair text", out_p), ("id", out_i),
                 *((f"kept column {c!r}", v) for c, v in zip(self.keep, out_k))]
        for what, values in named:
            for k, v in enumerate(values or ()):
                bad = _unreadable(v, what, self.encoding)
                if bad is not None:
                    pre.setdefault(rows[k], bad[0])
                    values[k] = bad[1]  # as the rejects file shows it

    def _parse_end(self, pending: RawBatch | None, tracker, skipped: dict[int, Reason], row: int, start: int, counter):
        """The end of the file: an unclosed quote's row rejected, the last batch (ending where the file does), then the
        malformed lines after the last good row."""
        self.multiline_rows = tracker.multiline_records
        if tracker.unclosed:
            self._reject_unclosed(tracker, pending, skipped, row)
        if pending is not None:
            # the last batch ends where the file does (a first row longer than a block, or a last read that
            # held only the \n of a \r\n, shifts the batches against the reads)
            pending.bytes_read = start = max(pending.bytes_read, counter.count)
            yield self._mark_suspects(pending, tracker)
        if skipped:  # malformed lines after the last good row
            rest = sorted(skipped)
            if rest[0] != row or rest != list(range(row, row + len(rest))):
                raise InputError(f"{self.name}: malformed lines at rows {rest[:5]} could not be placed",
                                 "fix the lines with the wrong number of fields")
            none = [None] * len(rest)
            yield self._mark_suspects(RawBatch(rest, list(none), list(none) if self.pair_column is not None else None,
                                               list(none) if self.id_column is not None else None, dict(skipped), counter.count,
                                               start, extra={c: list(none) for c in self.keep} if self.keep else None),
                                      tracker)

    def _read_block(self, part, data: bytes, first_row: int) -> RawBatch:
        """A partition's rows; a byte range of a CSV cut into several (Dask) may not hold a quoted value that spans
        lines: a cut can fall inside one, splitting a row silently, so such a file is refused (docs/dask.md)."""
        b = self._parse_block(data, first_row)
        if part.length is not None and self.fmt == "csv" and (
                self.multiline_rows or any(r.code == RejectCode.UNCLOSED_QUOTE for r in b.pre_rejected.values())):
            end = part.offset + len(data)
            raise InputError(f"{self.name}: quoted values span lines (bytes {part.offset:,} to about {end:,}), so the "
                             "file cannot be cut into byte ranges for the workers",
                             f"pass {opt('blocksize', 'none')} (the file is then read as one partition), or convert it "
                             "to Parquet")
        return b

    def _typed(self, b: RawBatch) -> RawBatch:
        """The kept cells converted to their columns' types; a cell that does not convert makes its row a bad row, and
        so does an id that is not UTF-8 (CSV / TSV ids are text: replacing its bytes could make two ids one).
        (While the head decides the types, ``_decide_keep_types``, the kept cells stay as read.)"""
        if self.fmt == "tsv":
            self._reject_csv_quoted(b)
        for k, v in enumerate(b.ids or ()):  # a UTF-8 id is decoded as the chunk is validated (chunks.id_value)
            at = utf8_error_at(bytes(v)) if isinstance(v, (bytes, bytearray)) else -1
            if at >= 0:
                b.ids[k] = shown_text(v)  # as the rejects file shows it
                b.pre_rejected.setdefault(b.rows[k], Reason(RejectCode.ENCODING,
                                                            f"invalid UTF-8 at byte {at} of the id"))
        if b.extra is None or not self._kept_types:
            return b
        for c, typ in self._kept_types.items():
            cells = list(b.extra[c])  # as read, for the rejects file (converted in place below)
            for k, reason in convert_cells(c, b.extra[c], typ, c in self.keep_as).items():
                b.pre_rejected.setdefault(b.rows[k], reason)
            for k, text in written_cells(cells, b.extra[c]).items():
                b.written.setdefault(b.rows[k], {})[c] = text
        return b

    def _reject_csv_quoted(self, b: RawBatch) -> None:
        """TSV has no quoting: a value written as a CSV writer quotes one (``"a ""b"" c"``: pandas' and Python's csv
        module's TSV) would be read with its quotes. Such a value makes its row a bad row, as a CSV-quoted TSV also
        splits a value holding a line break into rows; a file quoted so reads with input_format='csv', tab."""
        named = [("the text", b.texts), ("the pair text", b.pairs), ("the id", b.ids),
                 *((f"kept column {c!r}", b.extra[c]) for c in self.keep)]
        for what, values in named:
            for k, v in enumerate(values or ()):
                if isinstance(v, (bytes, bytearray)) and _csv_quoted(bytes(v)):
                    text = bytes(v).decode("utf-8", errors="replace")
                    shown = clipped(text)
                    b.pre_rejected.setdefault(b.rows[k], Reason(
                        RejectCode.QUOTED_TSV, f"{what} is quoted as CSV quotes a value ({shown}: in quotes, its own quotes "
                                               "doubled), but TSV is read without quoting, so the quotes would be part "
                                               "of it"))

    def _decide_keep_types(self) -> dict[str, pa.DataType]:
        """Each kept column's type from the cells of the head's rows (``kept.infer_cell_type``; a row that is bad
        in the head decides nothing); a head that cannot be parsed decides string."""
        data = self._sample
        wide = wide_line_codec(self.encoding, data)
        if len(data) >= HEAD_BYTES and wide is not None:  # whole UTF-16 / UTF-32 lines only (a line feed's code unit)
            lines, rest = split_wide_lines(data, *wide)
            data = data[:len(data) - len(rest)] if lines else data
        elif len(data) >= HEAD_BYTES and data.rfind(self._line_end()) > 0:
            data = data[:data.rfind(self._line_end()) + 1]  # whole lines only (EBCDIC's end at 0x25)
        cells: dict[str, list] = {c: [] for c in self.keep}
        multiline = self.multiline_rows
        counter = CountingReader(io.BytesIO(data))
        try:
            for b in self._parse(io.BufferedReader(counter), counter):
                for k, row in enumerate(b.rows):
                    if row not in b.pre_rejected:
                        for c in self.keep:
                            cells[c].append(b.extra[c][k])
        except InputError:
            pass  # the rows before it decide
        finally:
            self.multiline_rows = multiline
        return {c: infer_cell_type(cells[c]) for c in self.keep if c not in self.keep_as}  # (given: base.py)

    def _column_name(self, field: int | None) -> str:
        return f" in column {self.columns[field]!r}" if field is not None and field < len(self.columns) else ""

    def _mark_suspects(self, b: RawBatch, tracker) -> RawBatch:
        """Rows whose quoted field closed right before more text (lines later: it swallowed the lines between); rows
        with a field over max_field_bytes that the run reads (_mark_oversized); and the parts of a line a CR alone cut
        into rows (_mark_cut)."""
        if tracker.oversized:
            self._mark_oversized(b, tracker)
        if tracker.cut_rows:
            self._mark_cut(b, tracker)
        for k, row in enumerate(b.rows if tracker.suspects else ()):
            hit = tracker.suspects.get(row)
            if hit is not None:
                b.pre_rejected[row] = reason = self._quote_reason(*hit)
                b.texts[k] = None
                if reason.code is RejectCode.TEXT_AFTER_QUOTE:  # any of its values may be joined parts: none kept
                    _drop_values(b, k)
        if tracker.header_rows:
            self._mark_repeated_header(b, tracker)
        return b

    def _quote_reason(self, line: int, field: int, close: int) -> Reason:
        """Why a quoted field followed by text after its closing quote (csvcheck.QuoteTracker.suspects) is a bad row.
        On its own line, the reason names no line: a Dask worker's byte range does not know its first line's number."""
        column = self._column_name(field)
        if close == line:
            return Reason(RejectCode.TEXT_AFTER_QUOTE,
                          f"text after a closing quote: the quoted field{column} is followed by more text "
                          "before the next delimiter, which CSV does not allow, so the value cannot be read as written "
                          "(a CSV reader joins the parts and drops the quotes)")
        return Reason(RejectCode.UNCLOSED_QUOTE,
                      f"unclosed quote: the quoted field{column} that opens on line {line} only ends at a quote on line "
                      f"{close}, so lines {line + 1} to {close} were read into this row")

    def _mark_repeated_header(self, b: RawBatch, tracker) -> None:
        """A line that is the header line again (csvcheck.QuoteTracker.header_rows: its bytes, a BOM before them
        allowed) is a bad row: files joined with ``cat`` keep each one's header, which was read as a row (the names
        encoded as a text). Only with two or more named columns: a one-column file's value may be its column's name
        (a word list headed 'word' may hold the word), and there it is read as a row. A cut line or an unclosed quote
        keeps its own reason; the row's values are the names, so none is kept."""
        if sum(1 for c in self.columns if c.strip()) < 2:
            tracker.header_rows.clear()
            return
        line = tracker.header.decode("utf-8", errors="replace")
        shown = quoted(line)
        for k, row in enumerate(b.rows):
            if row not in tracker.header_rows:
                continue
            tracker.header_rows.discard(row)
            old = b.pre_rejected.get(row)
            if old is not None and old.code in (RejectCode.LONE_CR, RejectCode.UNCLOSED_QUOTE, RejectCode.TEXT_AFTER_QUOTE):
                continue
            b.pre_rejected[row] = Reason(RejectCode.REPEATED_HEADER, (
                f"the header line again ({shown}), as where the next file starts in files joined with their header "
                f"lines (cat a.{self.fmt} b.{self.fmt} > all.{self.fmt})"))
            _drop_values(b, k)

    def _mark_cut(self, b: RawBatch, tracker) -> None:
        """Each part of a line that a carriage return alone cut into rows (csvcheck.QuoteTracker.cut_rows) is a bad
        row: a CR ends a row for pyarrow, but in a file whose lines end in line feeds it is part of a value, which a
        row read from a part would hold cut (its text encoded in pieces, a kept value or an id shortened). Its values
        are left out of the rejects file, but those of the columns before the CR in the line's first part (whole)."""
        for k, row in enumerate(b.rows):
            hit = tracker.cut_rows.pop(row, None)
            if hit is None:
                continue
            line, first = hit
            field = line.field
            old = b.pre_rejected.get(row)
            if old is not None and old.code == RejectCode.UNCLOSED_QUOTE:
                continue
            b.pre_rejected[row] = Reason(RejectCode.LONE_CR, (
                f"part of a line that a carriage return alone (CR){self._column_name(field)} cuts into rows "
                f"({line.shown()}): a CR ends a row as a line end does, but this file's lines end in line feeds"))
            b.texts[k] = None
            for name, values in ((self.pair_column, b.pairs), (self.id_column, b.ids),
                                 *((c, (b.extra or {}).get(c)) for c in self.keep)):
                if values is not None and not (first and self.columns.index(name) < field):
                    values[k] = None
                    b.written.get(row, {}).pop(name, None)

    def _mark_oversized(self, b: RawBatch, tracker) -> None:
        """A field over max_field_bytes reached pyarrow empty (csvcheck.QuoteTracker): its row is a bad row when the
        field is one the run reads (its value None, as the rejects file shows it), unless the row is already bad for a
        reason the cut cannot have caused (an unclosed quote, a malformed line)."""
        for k, row in enumerate(b.rows):
            for field, size in tracker.oversized.pop(row, ()):
                col = self.columns[field] if field < len(self.columns) else None
                what = self.role(col) if col is not None else None
                old = b.pre_rejected.get(row)
                if what is None or (old is not None and old.code in (RejectCode.UNCLOSED_QUOTE, RejectCode.MALFORMED_LINE)):
                    continue
                b.pre_rejected[row] = too_large(what, size, self.max_field_bytes)
                b.texts[k] = None
                for name, values in ((self.pair_column, b.pairs), (self.id_column, b.ids),
                                     *((c, (b.extra or {}).get(c)) for c in self.keep)):
                    if col == name and values is not None:
                        values[k] = None
                break

    def _reject_unclosed(self, tracker, pending: RawBatch | None, skipped: dict[int, Reason], next_row: int) -> None:
        """A quoted field never closed runs to the end of the file: its row (the last one) becomes a bad row."""
        col = self.columns[tracker.open_field] if tracker.open_field is not None and tracker.open_field < len(self.columns) else None
        reason = Reason(RejectCode.UNCLOSED_QUOTE,
                        f"unclosed quote: the quoted field{f' in column {col!r}' if col is not None else ''} that opens on line "
                        f"{tracker.open_line} is never closed, so every line after it was read into this row")
        last = max([next_row - 1, *skipped])
        if last in skipped or pending is None or not pending.rows:
            skipped[last] = reason
            return
        k = pending.rows.index(last)
        pending.pre_rejected[last] = reason
        pending.texts[k] = None
        if tracker.ending is not None and tracker.ending.added and col is not None:  # the line feed NewlineAtEnd gave the file is no part of the value
            named = {self.pair_column: pending.pairs, self.id_column: pending.ids, **(pending.extra or {})}
            values = named.get(col)
            if values is not None and isinstance(values[k], (bytes, str)):
                values[k] = values[k][:-1] if values[k][-1:] in (b"\n", "\n") else values[k]
            written = pending.written.get(last, {})
            if isinstance(written.get(col), str) and written[col].endswith("\n"):
                written[col] = written[col][:-1]

    def _raise_unskippable(self, e: BaseException):
        """pyarrow cannot hand a malformed line that is not valid UTF-8 to the skip handler (its message is the one it
        gives when the handler fails): _Unskippable, naming the row."""
        m = re.search(r"Row #(\d+): Expected (\d+) columns, got (\d+)", str(e))
        if m:
            row = int(m.group(1)) - 2
            error = _Unskippable(f"{self.name} row {row}: malformed line: expected {m.group(2)} fields, found "
                                 f"{m.group(3)}, and it is not valid {self.encoding}",
                                 f"fix the line, or pass {opt('encoding')} with the file's encoding")
            error.row = row
            raise error from None

    def _unskippable_error(self, e: _Unskippable, reopenable: bool, mended: int) -> InputError:
        """The error when a malformed line not valid in the encoding cannot be read again mended: from standard input,
        after MAX_MENDED_LINES such lines (each costs a read of the file up to it), or when mending did not help."""
        encoding = f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')})"
        if not reopenable:
            return InputError(f"{e.what}, so it cannot be skipped from standard input",
                              f"fix the line, {encoding}, or read the file by its path")
        if mended >= self.MAX_MENDED_LINES:
            return InputError(f"{e.what}, after {mended} such lines (bertfeat reads the file again to skip each, up "
                              f"to {self.MAX_MENDED_LINES})", f"{encoding}, or fix the lines")
        return InputError(f"{e.what}, so it cannot be skipped", f"fix the line, or {encoding}")

    def _check_mended(self, mend: set[int] | None, rows: list[int], pre: dict[int, Reason]) -> None:
        """A mended line (csvcheck.LineMender: its non-ASCII bytes read as ?) must be a bad row, never a row read:
        should pyarrow count it otherwise, the run stops rather than read a row whose text was changed."""
        for r in mend or ():
            if rows and rows[0] <= r <= rows[-1] and (r not in pre or pre[r].code != RejectCode.MALFORMED_LINE):
                raise InputError(f"{self.name} row {r}: a malformed line not valid {self.encoding} was not found where "
                                 "it was when the file was read again to skip it",
                                 f"fix the line, or pass {opt('encoding')} with the file's encoding")


def _position(gate: ReadAheadGate, blocks: int, counter, compressed: bool, tracker) -> int:
    """Where the rows of pyarrow's first ``blocks`` blocks end, in bytes of the file (``counter.count``: the bytes read
    from it so far): the stream position of block ``blocks``'s end (in the stream before fields over max_field_bytes
    were left out: ``tracker``); for a compressed file (the stream is decompressed) scaled by the file bytes per
    stream byte: the gzip trailer's sizes while the stream has not outgrown them, else the ratio read so far."""
    read = counter.count
    if not gate.count:
        return read
    at = gate.ends[blocks - 1] if blocks <= len(gate.ends) else gate.count
    at, count = tracker.file_offset(at), tracker.file_offset(gate.count)
    if not compressed:
        return min(read, at)
    sizes = counter.sizes  # a CountingReader's
    if sizes is not None and count <= sizes[1]:  # more than ISIZE: a file over 4 GiB or of several members
        return min(read, at * sizes[0] // sizes[1])
    return min(read, read * at // count)


def _malformed_line_handler(skipped: dict[int, Reason], mender=None, encoding: str = "utf-8"):
    """pyarrow's invalid-row handler: a malformed line is skipped, and why kept in ``skipped`` under its row (a new
    object per reader: arrowexit waits for each to be freed). A line ``mender`` (csvcheck.LineMender) mended is named
    by its invalid byte, not by its mended text."""
    def on_invalid(row) -> str:
        # row.number counts records (blank lines excluded) from 1, the header included
        n = (row.number - 2) if row.number is not None else -1
        what = f"malformed line: expected {row.expected_columns} fields, found {row.actual_columns}"
        if mender is not None and n in mender.rows:
            byte = mender.invalid.get(n)
            skipped[n] = Reason(RejectCode.MALFORMED_LINE, f"{what}, and it is not valid {encoding}"
                                + (f" (byte 0x{byte:02x})" if byte is not None else ""))
            return "skip"
        skipped[n] = Reason(RejectCode.MALFORMED_LINE, f"{what} ({quoted(row.text)})")
        return "skip"

    on_invalid._bertfeat_row_handler = True
    return on_invalid


def _skip_rows():
    """An invalid-row handler that skips the row: a new object per reader (arrowexit waits for each to be freed)."""
    def skip(row) -> str:
        return "skip"
    skip._bertfeat_row_handler = True
    return skip


@contextlib.contextmanager
def _quiet_row_handler_errors():
    """pyarrow decodes a malformed line as UTF-8 before it calls the invalid-row handler; when that fails it
    prints "Exception ignored ..." with a traceback on stderr and then raises ArrowInvalid (handled by the
    caller). Keep that traceback off the user's terminal; every other unraisable goes to the previous hook."""
    previous = sys.unraisablehook

    def hook(u):
        if isinstance(u.exc_value, UnicodeDecodeError) and getattr(u.object, "_bertfeat_row_handler", False):
            return
        previous(u)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _byte_escape(e: UnicodeDecodeError) -> tuple[str, int]:
    """surrogateescape for every byte: a byte the encoding cannot read as U+DC00 + its value. (surrogateescape itself
    takes only bytes from 0x80: UTF-16's lone surrogate 00 d8, or a last code unit cut in half, stopped the file.)"""
    return "".join(chr(0xDC00 + b) for b in e.object[e.start:e.end]), e.end


_BYTE_ESCAPE = "bertfeat.byte-escape"
codecs.register_error(_BYTE_ESCAPE, _byte_escape)


def _escaped_byte(ch: str) -> bool:
    return "\udc00" <= ch <= "\udcff"


class _Utf8Transcoder(io.RawIOBase):
    """A byte stream in ``encoding`` read as UTF-8, a byte that is not valid in the encoding written as an escape that
    is never valid UTF-8, so it reaches pyarrow inside one cell and makes only that row a bad row (``_unreadable``),
    where pyarrow's own transcoder stops the whole file at the first such byte."""

    def __init__(self, raw, encoding: str):
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder(encoding)(errors=_BYTE_ESCAPE)
        self._buf = b""
        self._eof = False
        self.escaped = False  # an escape was written: from then on the reader checks the cells (none: no cost)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf and not self._eof:
            data = self._raw.read(1 << 20)
            self._eof = not data
            # a byte the encoding cannot read decodes to U+DC00..U+DCFF (_byte_escape) and is written as that
            # surrogate's 3 bytes (surrogatepass): never valid UTF-8, whatever bytes surround it
            self._buf = self._decoder.decode(data, final=self._eof).encode("utf-8", errors="surrogatepass")
            if not self.escaped and any(lead in self._buf for lead in (b"\xed\xb0", b"\xed\xb1", b"\xed\xb2", b"\xed\xb3")):
                self.escaped = True
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def _unreadable(value, what: str, encoding: str) -> tuple[Reason, str] | None:
    """A cell read through _Utf8Transcoder whose bytes are not UTF-8 -> (why: the raw byte the encoding could not read,
    the cell as text with each such byte shown as \\xNN); None for a readable cell."""
    if not isinstance(value, (bytes, bytearray)):
        return None
    try:
        bytes(value).decode("utf-8")
        return None
    except UnicodeDecodeError:
        text = bytes(value).decode("utf-8", errors="surrogatepass")
    escaped = [i for i, ch in enumerate(text) if _escaped_byte(ch)]
    shown = "".join(f"\\x{ord(ch) - 0xDC00:02x}" if _escaped_byte(ch) else ch for ch in text)
    if not escaped:  # a surrogate the decoder itself made (utf-7, unicode_escape): not an unreadable byte
        return Reason(RejectCode.ENCODING, f"invalid {encoding} text in the {what} (an unpaired surrogate)"), shown
    at = escaped[0]
    return Reason(RejectCode.ENCODING, f"invalid {encoding}: byte 0x{ord(text[at]) - 0xDC00:02x} at character {at} of "
                                       f"the {what}"), shown


def _drop_values(b: RawBatch, k: int) -> None:
    """Row ``k`` of the batch keeps no value (its values are not the input's): text, pair, id and kept columns."""
    for values in (b.texts, b.pairs, b.ids, *(b.extra or {}).values()):
        if values is not None:
            values[k] = None
    b.written.pop(b.rows[k], None)


def _csv_quoted(v: bytes) -> bool:
    """Is ``v`` a value as a CSV writer quotes one that holds a quote: in quotes, its own quotes doubled (at least one
    pair)? Linear in len(v) (the regular expression it replaces backtracked quadratically: 0.7 s on 15 KB of a"")."""
    if len(v) < 4 or v[0] != 34 or v[-1] != 34:  # 34: '"'
        return False
    inner = v[1:-1]
    return b'""' in inner and b'"' not in inner.replace(b'""', b"")
