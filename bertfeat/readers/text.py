"""What the line-based formats (CSV / TSV / JSONL) share: the head, compression, standard input, and partitions
cut into byte ranges on line ends.
"""

from __future__ import annotations

import codecs
import io
import sys
import zlib

import pyarrow as pa

from ..errors import InputError, clipped, opt
from .base import HEAD_BYTES, MIN_PART_BYTES, Partition, RawBatch, Reader, standard_input, stdin_read_error
from .paths import UNREAD_COMPRESSION, compression_of, convert_line, join_line
from .stream import CountingReader, Prefixed, decompressed, gzip_sizes


class TextReader(Reader):
    """Line-based text (CSV/TSV/JSONL): read from the start, or cut into byte ranges on line ends."""

    _MAGIC = ((b"\x1f\x8b", "gzip", ".gz", "zcat"), (b"BZh", "bzip2", ".bz2", "bzcat"), (b"\x28\xb5\x2f\xfd", "zstd", ".zst", "zstdcat"),
              (b"\xfd7zXZ\x00", "xz", ".xz", "xzcat"))

    def _setup(self, delimiter):
        if len(self.files) > 1:
            how = join_line(self.path, f".{self.fmt}", compression_of(self.files[0])) + (
                ", which keeps the first file's header line alone" if self.fmt in ("csv", "tsv") else "")
            raise InputError(f"{self.path}: a glob of {self.fmt.upper()} files is not supported",
                             f"concatenate them ({how}) and pass that file, or convert them to Parquet")
        self.compression = compression_of(self.files[0]) if self.files else None
        self._head: bytes | None = None

    def __getstate__(self):  # standard input and the peeked head stay in this process
        return {k: v for k, v in self.__dict__.items() if k not in ("_stdin", "_head")}

    def _columns(self) -> list[str]:
        self._head_skipped = 0  # lines longer than a row may be, passed over to find the columns (JsonlReader)
        if self.path == "-":
            self._stdin = standard_input()
            try:
                head = self._head = head_of(self._stdin, self._head_limit(), self._line_end())
            except OSError as e:
                raise stdin_read_error(e) from None
        else:
            fh = self._open_binary()[0]
            try:
                head = self._read_head(fh)
            except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                raise InputError(f"{self.name}: cannot read the file ({e})", "check the file is complete and its compression") from None
            finally:
                fh.close()
        self._refuse_compressed(head)
        self._refuse_binary_format(head)
        self._refuse_other_unicode(head)
        cols = self._head_columns(head)
        if len(head) < HEAD_BYTES and self.path != "-" and self.compression is None and not self._head_skipped:
            self.total_rows = self._exact_rows(head)  # the whole file was read: its rows are known (progress)
            self.max_rows = (self.total_rows if self.total_rows is not None or not _ascii_lines(self.encoding)
                             else self._count_lines(head, at_most=True))  # (its lines counted again only if quoted)
        return cols

    def _head_limit(self) -> int:
        """The most bytes read to find the end of the first line (HEAD_MAX_BYTES; JsonlReader: what a row may hold)."""
        return HEAD_MAX_BYTES

    def _read_head(self, fh) -> bytes:
        """The head of a file (``head_of``)."""
        return head_of(fh, self._head_limit(), self._line_end())

    def _line_end(self) -> bytes:
        """The byte a line ends at in the encoding read: EBCDIC's line feed (0x25), else 0x0a."""
        lf = line_feed_byte(self.encoding)
        return b"\n" if lf is None else bytes([lf])

    def _refuse_compressed(self, head: bytes) -> None:
        """Compressed bytes where text is expected (standard input, or a file without .gz/.bz2/.zst/.xz)."""
        if self.compression is not None:
            return
        for magic, kind, suffix, cat in self._MAGIC:
            if head.startswith(magic) and (kind != "bzip2" or head[3:4].isdigit()):
                if self.path == "-":
                    raise InputError(f"<stdin>: the input is {kind}-compressed",
                                     f"decompress it into the pipe (e.g. {cat} FILE | bertfeat extract - ...), "
                                     f"or pass the file by name (its {suffix} suffix is read)")
                raise InputError(f"{self.name}: the file is {kind}-compressed but its name does not end in {suffix}",
                                 f"rename it to end in {suffix}, or decompress it")

    def _refuse_binary_format(self, head: bytes) -> None:
        """A file of a binary format where text is expected (a Parquet file named .csv, an Excel workbook renamed .csv,
        a zipped CSV): its bytes were called a malformed line or an invalid byte, whose fix (another --encoding) read
        them as text and encoded them. Known by its magic bytes followed by control bytes no text file starts with."""
        for magic, kind in _BINARY_MAGIC:
            after = head[len(magic):len(magic) + 64]
            if head.startswith(magic) and any(c < 0x20 and c not in b"\t\n\r\x0c" for c in after):
                what = "the input" if self.path == "-" else "the file"
                raise InputError(f"{self.name}: {what} is {kind}, not {self.fmt.upper()} text", self._binary_fix(magic))

    def _binary_fix(self, magic: bytes) -> str:
        """How to read a file of a binary format (_BINARY_MAGIC) instead."""
        if magic == b"PAR1":
            return f"pass {opt('input_format', 'parquet')}"
        if magic == b"ARROW1":
            return "convert it to Parquet (pyarrow.parquet.write_table(pyarrow.feather.read_table(FILE), NAME)) and pass that"
        if magic in _COMPRESSED_MAGIC:  # (the command a name with its suffix is told: paths.UNREAD_COMPRESSION)
            cat = UNREAD_COMPRESSION[_COMPRESSED_MAGIC[magic]][1]
            return f"decompress it into the pipe ({cat} FILE | bertfeat extract - --input-format {self.fmt} ...)"
        stream = f"unzip -p FILE | bertfeat extract - --input-format {self.fmt} ... reads it without a copy"
        return f"unzip it and pass the file inside ({stream}); save an Excel sheet as CSV first"

    def _refuse_other_unicode(self, head: bytes) -> None:
        """UTF-16 / UTF-32 bytes read as another encoding give names with NUL bytes, or a misleading decode error; a
        UTF-8 byte order mark read as another encoding (cp1252, latin-1) gives every accented letter of the file as two
        or three others (``café`` as ``cafÃ©``, the text encoded and the kept values written so) without an error."""
        what = "the input" if self.path == "-" else "the file"
        seen = None if self.encoding.startswith(("utf-16", "utf-32")) else wide_unicode(head, what)
        if seen is None and _ascii_lines(self.encoding):
            self._refuse_ebcdic(head)
        if seen is None:
            self._refuse_ebcdic_nl(head, self.encoding)
        if seen is None and self.encoding != "utf-8" and head.startswith(codecs.BOM_UTF8):
            seen = "utf-8", f"{what} starts with a UTF-8 byte order mark: it is UTF-8 text"
        if seen is not None:
            encoding, how = seen
            raise InputError(f"{self.name}: {how}, not {self.encoding}", f"pass {opt('encoding', encoding)}")

    def _refuse_ebcdic(self, head: bytes) -> None:
        """EBCDIC text (a mainframe's) read as an ASCII-based encoding: CSV said only "invalid utf-8 at byte 0", JSONL
        "not JSON" and that it might be CSV; read as latin-1 its bytes were letters no one wrote."""
        codec = ebcdic_codec(head)
        if codec is None:
            return
        self._refuse_ebcdic_nl(head, codec)
        first = head.decode(codec).lstrip().splitlines()[0] if head.strip() else ""
        shown = clipped(first)
        raise InputError(f"{self.name}: its bytes look like EBCDIC text (read as {codec}, its first line is {shown!r}), "
                         f"not {self.encoding}", f"pass {opt('encoding', codec)} (or the file's own EBCDIC code page, "
                         "e.g. cp500 or cp273: they differ in a few characters)")

    def _refuse_ebcdic_nl(self, head: bytes, codec: str) -> None:
        """EBCDIC lines that end in its NL (0x15, U+0085, as z/OS writes them) rather than its line feed (0x25): no
        CSV or JSON reader ends a line there, so the file read as one line (a header of every row, or 'not JSON')."""
        lf, nl = line_feed_byte(codec), "\x85".encode(codec, errors="replace")
        if lf is None or len(nl) != 1 or bytes([lf]) in head or nl not in head:
            return
        line = convert_line("-" if self.path == "-" else self.files[0], f"tr '\\{nl[0]:03o}' '\\{lf:03o}'", "lf",
                            self.fmt)
        raise InputError(f"{self.name}: its lines end in EBCDIC's NL (byte 0x{nl[0]:02x}), not a line feed (0x{lf:02x}) "
                         f"as bertfeat reads {codec} lines", f"make them line feeds ({line}) and pass that file with "
                         f"{opt('encoding', codec)}")

    def _open_binary(self):
        """(binary stream of the decompressed input, counter of the bytes read from disk)."""
        if self.path == "-":
            counter = CountingReader(Prefixed(self._head or b"", self._stdin))
            return io.BufferedReader(counter), counter
        try:
            raw = self.fs.open(self.files[0], "rb")
        except OSError as e:
            raise InputError(f"{self.name}: cannot open the file ({e.strerror or e})", "check the path and its permissions") from None
        counter = CountingReader(raw)
        if self.compression == "gzip":
            counter.sizes = gzip_sizes(raw)
        if self.compression is None:
            return io.BufferedReader(counter, buffer_size=1 << 20), counter
        counter.decompressing = decompressed(io.BufferedReader(counter, buffer_size=1 << 20), self.compression)
        return io.BufferedReader(counter.decompressing, buffer_size=1 << 20), counter

    def batches(self):
        if self.path != "-":
            yield from self._parse_from(self._open_binary, True)
            return
        seen = []

        def opener():
            stream, counter = self._open_binary()
            seen.append(counter)
            return stream, counter

        yield from self._parse_from(opener, False)
        if seen and seen[0].count and not ends_a_line(seen[0].tail, self.encoding):
            from ..errors import warn

            warn("<stdin>: standard input did not end with a line break, so its last row may have been cut short by "
                 "the command writing it (head -c, a producer that stopped) - check that command finished (in bash, "
                 "set -o pipefail makes its failure the pipeline's); a file without a last line break reads the same")

    def _parse_from(self, opener, reopenable: bool):
        """The batches of the stream ``opener()`` returns (``reopenable``: it can be called again; CsvReader does)."""
        stream, counter = opener()
        yield from self._parse(stream, counter)

    def _block_header(self, f: str) -> bytes | None:
        return None

    def partitions(self, blocksize: int | None, target: int | None = None) -> list[Partition]:
        """Byte ranges aligned on line ends, as ``dask.bytes.read_bytes`` cuts them (``fsspec.utils.read_block``);
        a compressed file, a file whose line ends are not single bytes (UTF-16, UTF-32), or any file when
        ``blocksize`` is None, is one partition (never cut)."""
        if target and blocksize:  # a few partitions per task slot, under blocksize
            blocksize = min(blocksize, max(MIN_PART_BYTES, -(-sum(self.fs.size(f) for f in self.files) // target)))
        parts: list[Partition] = []
        for f in self.files:
            comp = compression_of(f)
            header = self._block_header(f)
            size = self.fs.size(f)
            if comp or not blocksize or size <= blocksize or not _ascii_lines(self.encoding):
                parts.append(Partition(len(parts), f, header=header, compression=comp))
                continue
            for off in range(0, size, blocksize):
                parts.append(Partition(len(parts), f, offset=off, length=blocksize, header=header))
        return parts

    def _block(self, part: Partition) -> bytes:
        """A partition's bytes, the header line in front of a block that does not start the file."""
        from fsspec.utils import read_block

        try:
            with open_decompressed(self.fs, part.file, part.compression) as fh:
                data = fh.read() if part.length is None else read_block(fh, part.offset, part.length, delimiter=b"\n")
        except (OSError, EOFError, zlib.error) as e:  # gzip / bz2 raise EOFError for a truncated stream, zlib.error
            if part.compression:  # for damaged data: said as the local engine says them, not as a bug
                raise InputError(f"{self.name}: cannot read the file ({e})", "check the file is complete and its "
                                 "compression") from None
            raise InputError(f"{self.name}: cannot read {part.file} at byte {part.offset} ({e})", "check the file is complete") from None
        if part.header is not None and part.offset > 0:
            data = part.header + data if data.strip() else b""
        return data

    def count_rows(self, part: Partition) -> int:
        """Rows in a partition: its line ends counted where that is exact (no parse), else parsed as read_partition does."""
        data = self._block(part)
        n = self._exact_rows(data)
        return n if n is not None else len(self._read_block(part, data, 0).rows)

    def _exact_rows(self, data: bytes) -> int | None:
        """The rows of whole lines of input, from their line ends where that is exact, else None."""
        return self._count_lines(data) if _ascii_lines(self.encoding) else None

    def _count_lines(self, data: bytes, at_most: bool = False) -> int | None:
        """The rows of ``data`` from its line ends (``at_most``: a bound where quotes may join lines), or None."""
        return None

    def read_partition(self, part: Partition, first_row: int) -> RawBatch:
        return self._read_block(part, self._block(part), first_row)

    def _read_block(self, part: Partition, data: bytes, first_row: int) -> RawBatch:
        """A partition's rows from its bytes (CsvReader checks that a byte range cut no quoted value)."""
        return self._parse_block(data, first_row)

    def _parse_block(self, data: bytes, first_row: int) -> RawBatch:
        """Whole lines of input (a header line first for CSV/TSV) -> one RawBatch, rows from ``first_row``."""
        out = RawBatch([], [], [] if self.pair_column is not None else None, [] if self.id_column is not None else None,
                       extra=self.empty_extra())
        if not data.strip():
            return out
        def opener():
            counter = CountingReader(io.BytesIO(data))
            return io.BufferedReader(counter), counter

        for b in self._parse_from(opener, True):
            out.extend(b, first_row)
        return out


def open_decompressed(fs, path: str, compression: str | None):
    """A file of ``fs`` opened for reading, decompressed on the way (``stream.decompressed``); closing it closes both."""
    raw = fs.open(path, "rb")
    if compression is None:
        return raw
    return io.BufferedReader(_Closing(decompressed(raw, compression), raw), buffer_size=1 << 20)


class _Closing(io.RawIOBase):
    """A decompressing stream that closes the file under it too."""

    def __init__(self, stream, raw):
        self._stream, self._raw = stream, raw

    def readable(self):
        return True

    def readinto(self, b):
        return self._stream.readinto(b)

    def close(self):
        try:
            self._stream.close()
        finally:
            self._raw.close()
            super().close()


#: the binary formats a text input may turn out to be (a file misnamed, a wrong --input-format): magic bytes -> what
_BINARY_MAGIC = ((b"PAR1", "Parquet"), (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook is one)"),
                 (b"ARROW1", "Arrow IPC (Feather)"), (b"\x04\x22\x4d\x18", "lz4-compressed"),
                 (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"))

#: the magic bytes of _BINARY_MAGIC that are a compression bertfeat does not read -> its suffix
_COMPRESSED_MAGIC = {b"\x04\x22\x4d\x18": ".lz4", b"7z\xbc\xaf\x27\x1c": ".7z"}

HEAD_MAX_BYTES = 1 << 28  # the head grows past HEAD_BYTES to the first line end, up to this


def head_of(fh, limit: int = HEAD_MAX_BYTES, line_end: bytes = b"\n") -> bytes:
    """The first HEAD_BYTES of a stream, or more up to its first line end (``line_end``: EBCDIC's is 0x25; at most
    ``limit``): a first line longer than HEAD_BYTES (a JSON object with a long text) is read whole, not judged by its
    first MiB."""
    head = fh.read(HEAD_BYTES)
    while len(head) >= HEAD_BYTES and line_end not in head and len(head) < limit:
        more = fh.read(HEAD_BYTES)
        if not more:
            break
        head += more
    return head


def _ascii_lines(encoding: str) -> bool:
    """Line ends, quotes and blanks are their ASCII bytes in this encoding (UTF-8, Latin-1, cp1252; not UTF-16)."""
    try:
        return '"\r\n \t,'.encode(encoding) == b'"\r\n \t,'
    except (LookupError, UnicodeError):
        return False


_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))
# where ASCII text puts its NUL bytes, by position modulo 4 (True: a NUL byte), in each encoding without a BOM
_HALF, _THREE_QUARTERS = "every other byte of {} is a NUL byte", "three bytes in four of {} are NUL bytes"
_NUL_PATTERNS = (((False, True, True, True), "utf-32-le", "UTF-32 little-endian", _THREE_QUARTERS),
                 ((True, True, True, False), "utf-32-be", "UTF-32 big-endian", _THREE_QUARTERS),
                 ((False, True, False, True), "utf-16-le", "UTF-16 little-endian", _HALF),
                 ((True, False, True, False), "utf-16-be", "UTF-16 big-endian", _HALF))


def wide_unicode(head: bytes, what: str = "the file") -> tuple[str, str] | None:
    """(the encoding to pass, what shows it) when ``head`` is UTF-16 or UTF-32 text, else None: its byte order mark, or
    without one NUL bytes where ASCII characters put them in that encoding (9 in 10 of the first 4 KiB, and no others)."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding, f"{what} starts with a {encoding.upper()} byte order mark: it is {encoding.upper()} text"
    sample = head[:4096]
    if len(sample) < 8:
        return None
    share = [sample[k::4].count(0) / len(sample[k::4]) for k in range(4)]
    for pattern, encoding, name, nuls in _NUL_PATTERNS:
        if all(s >= 0.9 if nul else s <= 0.1 for s, nul in zip(share, pattern)):
            return encoding, f"{nuls.format(what)}: it looks like {name} text"
    return None


def byte_order_hint(encoding: str, head: bytes) -> tuple[str, str] | None:
    """(the encoding to pass, what shows it) when ``encoding`` is UTF-16 / UTF-32 without the byte order ``head``'s NUL
    bytes show (utf-16 on a file with no byte order mark, utf-16-be on a little-endian one), else None."""
    seen = wide_unicode(head)
    given = encoding.lower().replace("_", "-")
    if seen is None or seen[0] == given or not given.startswith(seen[0][:6]):
        return None
    return seen


#: EBCDIC code pages a file may be in, the most common first (ebcdic_codec)
_EBCDIC = ("cp037", "cp500", "cp1140", "cp273", "cp1026")


def ebcdic_codec(head: bytes) -> str | None:
    """The EBCDIC code page ``head`` reads best in when it is EBCDIC text (its letters and digits are bytes over 0x7f,
    so at least a third of a text's bytes are; read so, 97 in 100 characters are printable ASCII or line ends), else
    None. UTF-8 text of other scripts reads as non-ASCII letters here, and ASCII text as control characters."""
    sample = head[:4096]
    if len(sample) < 16 or sum(b > 0x7F for b in sample) * 3 < len(sample):
        return None

    def ascii_share(codec: str) -> float:
        text = sample.decode(codec)
        return sum(ch.isascii() and (ch.isprintable() or ch in "\t\r\n") or ch == "\x85" for ch in text) / len(text)

    best = max(_EBCDIC, key=ascii_share)  # (the first of equals: cp037)
    return best if ascii_share(best) >= 0.97 else None


def ends_a_line(tail: bytes, encoding: str) -> bool:
    """Do the last bytes of a stream end with a line feed or carriage return in ``encoding`` (either byte order for
    UTF-16 / UTF-32)? An encoding Python does not know: True (nothing said)."""
    e = encoding.lower().replace("_", "-")
    codecs_ = [e + "-le", e + "-be"] if e in ("utf-16", "utf-32", "utf16", "utf32") else [encoding]
    try:
        ends = {ch.encode(c) for c in codecs_ for ch in ("\n", "\r")}
    except (UnicodeError, LookupError):
        return True
    return any(tail.endswith(x) for x in ends)


def line_feed_byte(encoding: str) -> int | None:
    """The byte a line feed is in a single-byte encoding where it is not 0x0a (EBCDIC's 0x25), else None."""
    try:
        nl = "\n".encode(encoding)
    except (UnicodeError, LookupError):
        return None
    return nl[0] if len(nl) == 1 and nl != b"\n" else None


def wide_line_codec(encoding: str, head: bytes) -> tuple[str, int] | None:
    """For UTF-16 / UTF-32 (line ends of 2 or 4 bytes): (the codec of one line, its byte order fixed by the head's
    byte order mark, else the machine's as Python's codec reads it; the code unit in bytes). None for other encodings."""
    for base, unit, le_bom, be_bom in (("utf-16", 2, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE),
                                       ("utf-32", 4, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        if encoding in (f"{base}-le", f"{base}-be"):
            return encoding, unit
        if encoding == base:
            order = "le" if head.startswith(le_bom) else "be" if head.startswith(be_bom) else sys.byteorder[0] + "e"
            return f"{base}-{order}", unit
    return None


def split_wide_lines(data: bytes, codec: str, unit: int) -> tuple[list[bytes], bytes]:
    """UTF-16 / UTF-32 bytes (starting on a character) -> (whole lines, each with its line feed; the rest): a line
    ends at an encoded line feed on a code-unit boundary (b'\\n\\x00' at an odd offset is not one)."""
    nl = "\n".encode(codec)
    lines, start, i = [], 0, 0
    while (j := data.find(nl, i)) >= 0:
        if j % unit:
            i = j + 1
            continue
        lines.append(data[start:j + unit])
        start = i = j + unit
    return lines, data[start:]


class TooLong:
    """A line longer than a reader holds (``limit`` of read_lines / read_wide_lines): its ``size`` in bytes, line
    feed left out; its bytes were skipped as read."""

    def __init__(self, size: int):
        self.size = size


def read_lines(fh, limit: int | None = None):
    """The lines of a binary stream, as bytes with their line feed (the last one without, if so); a line of more than
    ``limit`` bytes as a TooLong, never held whole."""
    if limit is None:
        yield from iter(fh.readline, b"")
        return
    while line := fh.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        while line and not line.endswith(b"\n"):
            line = fh.readline(1 << 20)
            size += len(line)
        yield TooLong(size - line.endswith(b"\n"))


def read_wide_lines(fh, codec: str, unit: int, block: int = 1 << 20, limit: int | None = None):
    """The lines of a UTF-16 / UTF-32 binary stream, as bytes (the last one without a line feed, if so). Each block is
    split on its own, starting on a code unit (a line longer than a block is joined once, not rescanned); a line of
    more than ``limit`` bytes as a TooLong."""
    pending: list[bytes] = []  # the start of a line that runs on past the blocks read so far
    skipped = 0  # bytes of a line over the limit, not kept
    while data := fh.read(block):
        while len(data) % unit and (more := fh.read(unit - len(data) % unit)):
            data += more
        lines, rest = split_wide_lines(data, codec, unit)
        if lines:
            lines[0] = b"".join(pending) + lines[0]
            pending = []
            if skipped:
                lines[0], skipped = TooLong(skipped + len(lines[0]) - unit), 0
            for x in lines:
                over = not isinstance(x, TooLong) and limit is not None and len(x) - unit > limit
                yield TooLong(len(x) - unit) if over else x
        pending.append(rest)
        if limit is not None and sum(map(len, pending)) + skipped > limit:
            skipped += sum(map(len, pending))
            pending = []
    if skipped:
        yield TooLong(skipped + sum(map(len, pending)))
    elif tail := b"".join(pending):
        yield TooLong(len(tail)) if limit is not None and len(tail) > limit else tail
