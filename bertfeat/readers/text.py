"""What the line-based formats (CSV / TSV / JSONL) share: the head, compression, standard input, and partitions
cut into byte ranges on line ends.
"""

from __future__ import annotations

import io
import sys

import pyarrow as pa

from ..errors import InputError
from .base import HEAD_BYTES, MIN_PART_BYTES, Partition, RawBatch, Reader
from .paths import compression_of
from .stream import CountingReader, NativeRaw, Prefixed


class TextReader(Reader):
    """Line-based text (CSV/TSV/JSONL): read from the start, or cut into byte ranges on line ends."""

    _MAGIC = ((b"\x1f\x8b", "gzip", ".gz", "zcat"), (b"BZh", "bzip2", ".bz2", "bzcat"), (b"\x28\xb5\x2f\xfd", "zstd", ".zst", "zstdcat"))

    def _setup(self, delimiter):
        if len(self.files) > 1:
            raise InputError(f"{self.path}: a glob of {self.fmt.upper()} files is not supported", "concatenate them, or convert to Parquet")
        self.compression = compression_of(self.files[0]) if self.files else None
        self._head: bytes | None = None

    def __getstate__(self):  # standard input and the peeked head stay in this process
        return {k: v for k, v in self.__dict__.items() if k not in ("_stdin", "_head")}

    def _columns(self) -> list[str]:
        if self.path == "-":
            self._stdin = sys.stdin.buffer
            head = self._head = self._stdin.read(HEAD_BYTES)
        else:
            fh = self._open_binary()[0]
            try:
                head = fh.read(HEAD_BYTES)
            except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                raise InputError(f"{self.name}: cannot read the file ({e})", "check the file is complete and its compression") from None
            finally:
                fh.close()
        self._refuse_compressed(head)
        cols = self._head_columns(head)
        if len(head) < HEAD_BYTES and self.path != "-" and self.compression is None:
            self.total_rows = self._exact_rows(head)  # the whole file was read: its rows are known (progress)
        return cols

    def _refuse_compressed(self, head: bytes) -> None:
        """Compressed bytes where text is expected (standard input, or a file without .gz/.bz2/.zst)."""
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
        if self.compression is None:
            return io.BufferedReader(counter, buffer_size=1 << 20), counter
        native = pa.CompressedInputStream(pa.PythonFile(io.BufferedReader(counter, buffer_size=1 << 20), mode="r"), self.compression)
        return io.BufferedReader(NativeRaw(native), buffer_size=1 << 20), counter

    def batches(self):
        stream, counter = self._open_binary()
        yield from self._parse(stream, counter)

    def _block_header(self, f: str) -> bytes | None:
        return None

    def partitions(self, blocksize: int | None, target: int | None = None) -> list[Partition]:
        """Byte ranges aligned on line ends, as ``dask.bytes.read_bytes`` cuts them (``fsspec.utils.read_block``);
        a compressed file, or any file when ``blocksize`` is None, is one partition (never cut)."""
        if target and blocksize:  # a few partitions per task slot, under blocksize
            blocksize = min(blocksize, max(MIN_PART_BYTES, -(-sum(self.fs.size(f) for f in self.files) // target)))
        parts: list[Partition] = []
        for f in self.files:
            comp = compression_of(f)
            header = self._block_header(f)
            size = self.fs.size(f)
            if comp or not blocksize or size <= blocksize:
                parts.append(Partition(len(parts), f, header=header, compression=comp))
                continue
            for off in range(0, size, blocksize):
                parts.append(Partition(len(parts), f, offset=off, length=blocksize, header=header))
        return parts

    def _block(self, part: Partition) -> bytes:
        """A partition's bytes, the header line in front of a block that does not start the file."""
        from fsspec.utils import read_block

        try:
            with self.fs.open(part.file, "rb", compression=part.compression) as fh:
                data = fh.read() if part.length is None else read_block(fh, part.offset, part.length, delimiter=b"\n")
        except OSError as e:
            raise InputError(f"{self.name}: cannot read {part.file} at byte {part.offset} ({e})", "check the file is complete") from None
        if part.header is not None and part.offset > 0:
            data = part.header + data if data.strip() else b""
        return data

    def count_rows(self, part: Partition) -> int:
        """Rows in a partition: its line ends counted where that is exact (no parse), else parsed as read_partition does."""
        data = self._block(part)
        n = self._exact_rows(data)
        return n if n is not None else len(self._parse_block(data, 0).rows)

    def _exact_rows(self, data: bytes) -> int | None:
        """The rows of whole lines of input, from their line ends where that is exact, else None."""
        return self._count_lines(data) if _ascii_lines(self.encoding) else None

    def _count_lines(self, data: bytes) -> int | None:
        return None

    def read_partition(self, part: Partition, first_row: int) -> RawBatch:
        return self._parse_block(self._block(part), first_row)

    def _parse_block(self, data: bytes, first_row: int) -> RawBatch:
        """Whole lines of input (a header line first for CSV/TSV) -> one RawBatch, rows from ``first_row``."""
        out = RawBatch([], [], [] if self.pair_column else None, [] if self.id_column else None)
        if not data.strip():
            return out
        counter = CountingReader(io.BytesIO(data))
        for b in self._parse(io.BufferedReader(counter), counter):
            out.rows += [first_row + r for r in b.rows]
            out.texts += b.texts
            if out.pairs is not None: out.pairs += b.pairs
            if out.ids is not None: out.ids += b.ids
            out.pre_rejected.update({first_row + r: v for r, v in b.pre_rejected.items()})
        return out


def _ascii_lines(encoding: str) -> bool:
    """Line ends, quotes and blanks are their ASCII bytes in this encoding (UTF-8, Latin-1, cp1252; not UTF-16)."""
    try:
        return '"\r\n \t,'.encode(encoding) == b'"\r\n \t,'
    except (LookupError, UnicodeError):
        return False
