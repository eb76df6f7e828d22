"""Binary stream adapters: a counter of the bytes read (progress; a gzip file's sizes from its trailer), a UTF-8
stream given its final line feed, standard input with its peeked head put back, a pyarrow input stream (e.g.
decompressing) as a Python raw stream (``decompressed``: every compression read, one way for both engines), and the
gate that keeps pyarrow's CSV read-ahead near the rows parsed.
"""

from __future__ import annotations

import io
import lzma


class CountingReader(io.RawIOBase):
    """Wraps a binary file and counts the bytes read (progress for CSV)."""

    def __init__(self, fh):
        self._fh = fh
        self.count = 0
        self.sizes = None  # (file bytes, decompressed bytes) when the file says (gzip_sizes)
        self.decompressing: NativeRaw | None = None  # the decompressor reading from it, if any (its ``failure``)
        self.tail = b""  # the last bytes read (up to 4: a line end in any encoding), for line_cut_short

    def readable(self):
        return True

    def readinto(self, b):
        n = self._fh.readinto(b)
        self.count += n or 0
        if n:
            self.tail = (self.tail + bytes(memoryview(b)[max(0, n - 4):n]))[-4:]
        return n

    def close(self):
        self._fh.close()
        super().close()


def gzip_sizes(raw) -> tuple[int, int] | None:
    """(file bytes, decompressed bytes) of a gzip file from its trailer (ISIZE: the size mod 2**32 of the last member),
    the file position kept; None when the file cannot seek. Progress places the decompressed rows in the file by
    this ratio: estimating it from the bytes read so far fails when the decompressor reads 1 MiB ahead."""
    try:
        at = raw.tell()
        size = raw.seek(0, io.SEEK_END)
        raw.seek(max(size - 4, 0))
        tail = raw.read(4)
        raw.seek(at)
    except (OSError, ValueError, AttributeError):
        return None
    isize = int.from_bytes(tail, "little") if len(tail) == 4 else 0
    return (size, isize) if isize > 0 else None


class NewlineAtEnd(io.RawIOBase):
    """A UTF-8 stream that ends with a line feed: one is added when its last byte is not one (pyarrow's CSV reader
    refuses a header line without a line end as "Empty CSV file"; an empty line more changes nothing)."""

    def __init__(self, fh):
        self._fh = fh
        self._last = b"\n"
        self._done = False
        self.added = False  # the line feed was added (the file's last byte was not one)

    def readable(self):
        return True

    def readinto(self, b):
        n = self._fh.readinto(b)
        if n:
            self._last = bytes(b[n - 1:n])
            return n
        if not self._done and self._last != b"\n" and len(b):
            self._done = self.added = True
            b[0:1] = b"\n"
            return 1
        return n

    def close(self):
        self._fh.close()
        super().close()


def swap_table(a: int, b: int) -> bytes:
    """The ``bytes.translate`` table that swaps the byte values ``a`` and ``b``."""
    return bytes.maketrans(bytes([a, b]), bytes([b, a]))


class Swapped(io.RawIOBase):
    """A stream with two byte values swapped (one for one, so offsets stay): an EBCDIC file's line feed (0x25) read
    as 0x0a, where ``readline`` ends a line (the JSONL reader swaps each line back before decoding it)."""

    def __init__(self, fh, a: int, b: int):
        self._fh = fh
        self.table = swap_table(a, b)

    def readable(self):
        return True

    def readinto(self, b):
        n = self._fh.readinto(b)
        if n:
            view = memoryview(b)[:n]
            view[:] = bytes(view).translate(self.table)
        return n

    def close(self):
        self._fh.close()
        super().close()


class Prefixed(io.RawIOBase):
    """stdin with the bytes already peeked at put back in front."""

    def __init__(self, head: bytes, rest):
        self._head = head
        self._rest = rest

    def readable(self):
        return True

    def readinto(self, b):
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


class NativeRaw(io.RawIOBase):
    """A pyarrow input stream (e.g. decompressing) as a Python raw binary stream. A read that fails (a truncated or
    damaged compressed file) is kept in ``failure``: pyarrow's CSV reader, reading through it, says it as a parse error."""

    def __init__(self, native):
        self._native = native
        self.failure: BaseException | None = None

    def readable(self):
        return True

    def readinto(self, b):
        try:
            data = self._native.read(len(b))
        except Exception as e:
            self.failure = e
            raise
        b[: len(data)] = data
        return len(data)

    def close(self):
        self._native.close()
        super().close()


class _Xz:
    """An xz stream read through Python's lzma (pyarrow has no xz codec), its damage said as an OSError as the other
    decompressors' is (``lzma.LZMAError`` is none of the errors a reader catches)."""

    def __init__(self, raw):
        self._file = lzma.LZMAFile(raw)

    def read(self, n: int) -> bytes:
        try:
            return self._file.read(n)
        except lzma.LZMAError as e:
            raise OSError(f"xz: {e}") from None

    def close(self):
        self._file.close()


def decompressed(raw, compression: str) -> NativeRaw:
    """The decompressed bytes of the binary stream ``raw`` (gzip, bz2 or zstd through pyarrow, xz through lzma): the
    local reader's and each Dask partition's (fsspec's own compression needs packages not installed, zstandard)."""
    import pyarrow as pa

    if compression == "xz":
        return NativeRaw(_Xz(raw))
    return NativeRaw(pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), compression))


class ReadAheadGate(io.RawIOBase):
    """The stream pyarrow's streaming CSV reader pulls its blocks from, held near what the parser has used.

    pyarrow reads ahead on its I/O thread into a queue of up to 32 blocks (its background generator's; 128 MiB at
    bertfeat's 4 MiB blocks), so the bytes read from the file ran far ahead of the rows parsed: a progress bar at
    100 % of the bytes with half the rows to go. (Peak memory did not show it: reading a 79 MiB CSV with a slow
    consumer peaked at 504 MiB before the gate and 508 MiB with it.) Here a read waits while the
    parser is busy elsewhere and ``limit`` bytes have been handed over; while the parser waits for pyarrow
    (``wanting``), reads never wait, so a row longer than the read-ahead cannot stall the two against each other.

    Each ``read`` returns a whole request (pyarrow asks for one block at a time), and ``ends`` keeps where each one
    ended: pyarrow parses one block into one batch, so batch k's rows end near ``ends[k]``. Not so for an encoding
    pyarrow transcodes (its transcoder reads in its own sizes): there the CSV reader sets no limit and places the
    batches by the bytes read; nor for a first row longer than a block (the first batch takes several blocks),
    which the reader's last batch makes up for.
    """

    def __init__(self, raw, limit: int):
        import threading

        self._raw = raw
        self._cv = threading.Condition()
        self._limit = limit
        self._wanting = False
        self._open = False  # closed or abandoned: never wait again
        self.count = 0  # bytes handed to pyarrow
        self.ends: list[int] = []  # self.count after each non-empty read
        self._carry = b""  # a read's last byte when it was a CR (_hold_cr), handed on first by the next read

    def readable(self):
        return True

    def read(self, n=-1):
        with self._cv:
            while not (self._open or self._wanting or self.count < self._limit):
                self._cv.wait()
        try:
            if n is None or n < 0:
                data = self._carry + self._raw.read()
            else:
                parts, got = [self._carry], len(self._carry)
                while got < n:
                    part = self._raw.read(n - got)
                    if not part:
                        break
                    parts.append(part)
                    got += len(part)
                data = b"".join(parts)
            self._carry = b""
            data = self._hold_cr(data, n is not None and n >= 0 and len(data) >= n)
        except ValueError:  # "I/O operation on closed file": the gate was closed while this read waited
            if self._open:
                return b""
            raise
        if data:
            self.count += len(data)
            self.ends.append(self.count)
        return data

    def _hold_cr(self, data: bytes, more: bool) -> bytes:
        """A block never ends with a CR while more may follow: pyarrow's streaming reader drops the LF of a quoted
        CRLF whose CR ends one block and LF starts the next (pyarrow alone: 'xxx\\r\\ny' read as 'xxx\\ry' at
        block_size 16), so the CR waits for the next read, with its LF."""
        if more and len(data) > 1 and data.endswith(b"\r"):
            self._carry = data[-1:]
            return data[:-1]
        return data

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def wanting(self, flag: bool) -> None:
        """The parser waits for pyarrow's next batch (True) or has it (False)."""
        with self._cv:
            self._wanting = flag
            self._cv.notify_all()

    def allow(self, limit: int) -> None:
        """Reads may run up to ``limit`` bytes."""
        with self._cv:
            self._limit = max(self._limit, limit)
            self._cv.notify_all()

    def close(self):
        with self._cv:
            self._open = True
            self._cv.notify_all()
        self._raw.close()
        super().close()
