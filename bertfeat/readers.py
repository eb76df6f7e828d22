"""Reading input rows: CSV, TSV, Parquet (a file, a glob or a directory) and JSONL, or stdin.

One reader per format behind one small protocol, used by both engines (the local engine reads
the whole input with ``batches()``; the Dask engine cuts it with ``partitions()`` and each worker
reads its share with ``read_partition()``):

    columns, text_column, pair_column, id_column   the input's columns and the ones chosen
    batches()                   RawBatches of the whole input, in order
    partitions(blocksize, target)   the input cut into Partitions, in the same row order
    read_partition(part, first_row) one partition as a RawBatch with global row numbers
    count_rows(part)            rows in a partition (Parquet: from the footer, nothing read)
    id_type()                   the output id column's Arrow type, when the input's schema says it
    identity()                  files, sizes and stamps, for --resume

``open_input(path, ...)`` picks the reader. Every path goes through fsspec: local files, and
``s3://``, ``gs://``, ``hdfs://`` ... when that filesystem's package is installed. A reader holds
no open file, so it pickles to Dask workers as it is.

Everything streams: CSV through pyarrow's streaming reader, Parquet through ``iter_batches``,
JSONL line by line. Readers yield ``RawBatch`` objects holding *undecoded* values and their
0-based data-row numbers (header excluded), so that validation (pipeline.validate_batch) can
reject a bad row with its exact row number and reason instead of failing the whole file.
Malformed CSV lines (wrong number of fields) are yielded as pre-rejected rows in their place.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from .errors import InputError, opt

FORMATS = ("csv", "tsv", "parquet", "jsonl")
TEXT_COLUMN_NAMES = ("text", "sentence", "content", "review")
_EXT = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet",
        ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
HEAD_BYTES = 1 << 20  # bytes read up front to find the columns
MIN_PART_ROWS = 64  # Parquet: no smaller partitions than this for the sake of spreading (~0.3 s of one core)
MIN_PART_BYTES = 8 << 10  # CSV/TSV/JSONL: likewise, ~100 short sentences


def normalize_encoding(encoding: str) -> str:
    """A codec name -> its canonical name ('utf-8' for every UTF-8 spelling); unknown names are an error."""
    try:
        name = codecs.lookup(encoding).name
    except (LookupError, TypeError, ValueError):
        raise InputError(f"unknown encoding '{encoding}'", "pass a Python codec name such as utf-8, latin-1 or cp1252") from None
    return "utf-8" if name in ("utf-8", "utf-8-sig") else name


def compression_of(path) -> str | None:
    """gzip/bz2/zstd from a .gz/.bz2/.zst suffix, else None."""
    return _COMPRESSION.get(Path(str(path)).suffix.lower())


@dataclass
class RawBatch:
    """A run of consecutive input rows, values not yet validated."""

    rows: list[int]  # 0-based data-row numbers
    texts: list  # bytes | str | None | other, per row
    pairs: list | None
    ids: list | None
    pre_rejected: dict[int, str] = field(default_factory=dict)  # row -> reason (malformed line, bad JSON)
    bytes_read: int = 0  # bytes consumed when the batch ends (for progress on CSV/JSONL)
    bytes_start: int = 0  # ... and when it starts (a chunk that ends inside the batch interpolates)


@dataclass(frozen=True)
class Partition:
    """A slice of the input. Parquet: row groups of a file. Text: a byte range (None: the whole file)."""

    index: int
    file: str
    row_groups: tuple[int, ...] | None = None
    offset: int = 0
    length: int | None = None
    header: bytes | None = None  # CSV/TSV: the file's header line, put in front of blocks after the first
    compression: str | None = None
    n_rows: int | None = None  # known up front for Parquet
    row_offset: int = 0  # Parquet: rows of the first row group that belong to the partition before


def detect_format(path: str, input_format: str | None) -> str:
    if input_format:
        if input_format not in FORMATS:
            raise InputError(f"unknown input format '{input_format}'", f"choose one of {', '.join(FORMATS)}")
        return input_format
    if path == "-":
        raise InputError("reading standard input needs " + opt("input_format"), f"add {opt('input_format', 'csv|tsv|jsonl')}")
    p = Path(path.rstrip("/"))
    if not is_url(path) and p.is_dir():
        return "parquet"
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".bz2", ".zst"):
        suffixes = suffixes[:-1]
    fmt = _EXT.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        if is_url(path):
            return "parquet"  # a URL without an extension: a directory of Parquet files (checked when listed)
        raise InputError(f"{path}: cannot tell the format from the extension", f"add {opt('input_format', 'csv|tsv|parquet|jsonl')}")
    return fmt


def is_url(path: str) -> bool:
    """An fsspec URL (s3://, gs://, file:// ...), not a local path."""
    return "://" in path


def _path_key(p: str) -> list[str]:
    """Files sort by their path's parts (as pathlib orders them), the same on every engine."""
    return p.split("/")


def resolve_files(path: str, fmt: str):
    """A file, a glob, or a directory of Parquet files -> (fsspec filesystem, the files sorted: one dataset).

    Local paths are checked here with their own messages and made absolute (a Dask worker may run elsewhere);
    a URL (s3://, gs://, ...) is listed by its filesystem.
    """
    import fsspec

    if path == "-":
        return None, []
    if is_url(path):
        try:
            fs, _, paths = fsspec.core.get_fs_token_paths(path)
        except (ImportError, ValueError) as e:
            raise InputError(f"{path}: cannot open this URL ({e})", "install the fsspec filesystem for it (e.g. s3fs, gcsfs)") from None
        if len(paths) == 1 and fs.isdir(paths[0]):
            paths = [p for p in fs.find(paths[0]) if p.endswith((".parquet", ".pq"))
                     and not p.rsplit("/", 1)[-1].startswith((".", "_"))]
        paths = sorted((p for p in paths if fs.isfile(p)), key=_path_key)
        if not paths:
            raise InputError(f"{path}: no such file (or the pattern matches none)", "check the URL")
        return fs, paths
    import glob as globmod

    fs = fsspec.filesystem("file")
    if any(ch in path for ch in "*?["):
        files = sorted((Path(p) for p in globmod.glob(path, recursive=True) if Path(p).is_file()))
        if not files:
            raise InputError(f"{path}: the pattern matches no file", "check the glob pattern (quote it so the shell does not expand it)")
        return fs, [os.path.abspath(f) for f in files]
    p = Path(path)
    if p.is_dir() and fmt != "parquet":
        raise InputError(f"{path}: is a directory", f"pass a {fmt.upper()} file (a directory works for Parquet only)")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*.parquet") if f.is_file() and not f.name.startswith((".", "_")))
        if not files:
            raise InputError(f"{path}: the directory holds no .parquet file", "point at a Parquet file, a directory of them, or a glob")
        return fs, [os.path.abspath(f) for f in files]
    if not p.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if not os.access(p, os.R_OK):
        raise InputError(f"{path}: the file is not readable", "check its permissions")
    return fs, [os.path.abspath(p)]


def open_input(path: str, fmt: str | None = None, text_column: str | None = None, pair_column: str | None = None,
               id_column: str | None = None, encoding: str = "utf-8", batch_rows: int = 8192,
               delimiter: str | None = None) -> "Reader":
    """The reader for ``path`` (its format from the extension unless ``fmt``), columns checked and chosen."""
    fmt = detect_format(path, fmt)
    cls = ParquetReader if fmt == "parquet" else JsonlReader if fmt == "jsonl" else CsvReader
    return cls(path, fmt, text_column=text_column, pair_column=pair_column, id_column=id_column, encoding=encoding,
               batch_rows=batch_rows, delimiter=delimiter)


class _CountingReader(io.RawIOBase):
    """Wraps a binary file and counts the bytes read (progress for CSV)."""

    def __init__(self, fh):
        self._fh = fh
        self.count = 0

    def readable(self):
        return True

    def readinto(self, b):
        n = self._fh.readinto(b)
        self.count += n or 0
        return n

    def close(self):
        self._fh.close()
        super().close()


class Reader:
    """What every format shares: the files (through fsspec), the column rules, identity and the protocol."""

    def __init__(self, path: str, fmt: str, *, text_column: str | None = None, pair_column: str | None = None,
                 id_column: str | None = None, encoding: str = "utf-8", batch_rows: int = 8192, delimiter: str | None = None):
        self.path = path
        self.fmt = fmt
        self.encoding = normalize_encoding(encoding)
        self.batch_rows = batch_rows
        self.multiline_rows = 0  # CSV records whose quoted fields span lines (known once the file is read)
        self.fs, self.files = resolve_files(path, fmt)
        self.total_rows: int | None = None  # known up front for Parquet (footers) and for text that fits the head
        # progress by bytes counts the bytes read from disk, compressed or not
        self.total_bytes: int | None = sum(self.fs.size(f) for f in self.files) if self.files else None
        self._setup(delimiter)
        self.columns = self._columns()
        self._select_columns(text_column, pair_column, id_column)

    def _setup(self, delimiter: str | None) -> None:
        """Format-specific state before the columns are read."""

    # ------------------------------------------------------------------ the protocol
    def batches(self):
        """Yield RawBatch objects of the whole input, in input order."""
        raise NotImplementedError

    def partitions(self, blocksize: int | None, target: int | None = None) -> list[Partition]:
        """Cut the input into partitions in row order: at most ``blocksize`` input bytes each, and about
        ``target`` of them in all (a few per worker thread) when the input is large enough."""
        raise NotImplementedError

    def read_partition(self, part: Partition, first_row: int) -> RawBatch:
        """One partition as a RawBatch whose row numbers start at ``first_row``, read as ``batches()`` reads."""
        raise NotImplementedError

    def count_rows(self, part: Partition) -> int:
        """Rows in a partition."""
        return part.n_rows if part.n_rows is not None else len(self.read_partition(part, 0).rows)

    def id_type(self) -> pa.DataType | None:
        """The output id column's type when the input's schema decides it (None: from the values written)."""
        return pa.int64() if self.id_column is None else None

    # ------------------------------------------------------------------ columns
    @property
    def name(self) -> str:
        return "<stdin>" if self.path == "-" else self.path

    def _fname(self, f) -> str:
        return self.name if self.path == "-" else str(f)

    def _string_columns(self) -> list[str]:
        return list(self.columns)

    def _select_columns(self, text_column: str | None, pair_column: str | None, id_column: str | None) -> None:
        """Choose the text column and check that the pair and id columns exist (after _columns())."""
        self.text_column = self._pick_text_column(text_column)
        for param, col in (("pair_column", pair_column), ("id_column", id_column)):
            if col is not None and col not in self.columns:
                raise InputError(f"{self.name}: {opt(param)} '{col}' is not a column", f"columns are: {_listing(self.columns)}")
        self.pair_column = pair_column
        self.id_column = id_column

    def _pick_text_column(self, text_column: str | None) -> str:
        if text_column is not None:
            if text_column not in self.columns:
                raise InputError(f"{self.name}: {opt('text_column')} '{text_column}' is not a column", f"columns are: {_listing(self.columns)}")
            return text_column
        lower = {c.lower(): c for c in self.columns}
        for name in TEXT_COLUMN_NAMES:
            if name in lower:
                return lower[name]
        strings = self._string_columns()
        if len(strings) == 1:
            return strings[0]
        raise InputError(
            f"{self.name}: cannot tell which column holds the text (columns: {_listing(self.columns)})",
            f"pass {opt('text_column', 'NAME')}",
        )

    def _wanted(self) -> list[str]:
        return [c for c in dict.fromkeys([self.text_column, self.pair_column, self.id_column]) if c]

    def identity(self) -> dict:
        """What identifies the input for --resume: paths, sizes, modification times (or the store's stamp)."""
        files = []
        for f in self.files:
            info = self.fs.info(f)
            if is_url(self.path):
                stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or info.get("etag") or info.get("updated")
                files.append({"path": self.fs.unstrip_protocol(f), "size": info.get("size"), "stamp": str(stamp)})
            else:
                files.append({"path": f, "size": info["size"], "mtime_ns": os.stat(f).st_mtime_ns})
        return {"path": self.path, "format": self.fmt, "files": files}


# ---------------------------------------------------------------------------------------- Parquet
class ParquetReader(Reader):
    """A Parquet file, a directory of them, or a glob: one dataset, files in sorted order."""

    def _setup(self, delimiter):
        if self.path == "-":
            self.files = [self._spool_stdin()]  # Parquet needs seeking: copy standard input to a temporary file
            import fsspec

            self.fs = fsspec.filesystem("file")
            self.total_bytes = os.path.getsize(self.files[0])

    def _spool_stdin(self) -> str:
        import shutil
        import tempfile
        import weakref

        fd, name = tempfile.mkstemp(prefix="bertfeat-stdin-", suffix=".parquet")
        weakref.finalize(self, os.unlink, name)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
        if os.path.getsize(name) == 0:
            raise InputError("<stdin>: standard input is empty", "pipe a Parquet file into bertfeat extract -")
        return name

    def _parquet(self, fh):
        import pyarrow.parquet as pq

        return pq.ParquetFile(fh)

    def _columns(self) -> list[str]:
        self._pq_schema = None
        total = 0
        self._metas = []
        for f in self.files:
            try:
                with self.fs.open(f, "rb") as fh:
                    pf = self._parquet(fh)
                    meta, schema = pf.metadata, pf.schema_arrow
            except Exception as e:
                raise InputError(f"{self._fname(f)}: not a readable Parquet file ({_short(e)})", "check the file is Parquet and complete") from None
            if self._pq_schema is None:
                self._pq_schema = schema
                dup = sorted({n for n in schema.names if schema.names.count(n) > 1})
                if dup:
                    raise InputError(f"{self._fname(f)}: the column name {dup[0]!r} appears {schema.names.count(dup[0])} times",
                                     "rename the columns so that every name is unique (e.g. table.rename_columns in pyarrow)")
            elif schema.names != self._pq_schema.names:
                raise InputError(f"{self._fname(f)}: its columns differ from {self.files[0]}", "a Parquet dataset needs the same columns in every file")
            total += meta.num_rows
            self._metas.append(meta)
        self.total_rows = total
        return list(self._pq_schema.names)

    def __getstate__(self):  # the footers stay on the client (partitions() has used them)
        return {k: v for k, v in self.__dict__.items() if k != "_metas"}

    def _select_columns(self, text_column, pair_column, id_column):
        super()._select_columns(text_column, pair_column, id_column)
        for param, col in (("text_column", self.text_column), ("pair_column", pair_column)):
            if col:
                t = self._pq_schema.field(col).type
                if not _is_textual(t):
                    raise InputError(f"{self.name}: column '{col}' has type {t}, not text",
                                     f"choose a string column with {opt(param)} (string columns: {_listing(self._string_columns())})")

    def _string_columns(self) -> list[str]:
        return [f.name for f in self._pq_schema if _is_string(f.type)]

    def id_type(self) -> pa.DataType:
        """The input column's type (int32 stays int32, binary stays binary), a dictionary column's value type."""
        if self.id_column is None:
            return pa.int64()
        t = self._pq_schema.field(self.id_column).type
        return t.value_type if pa.types.is_dictionary(t) else t

    def _batch(self, b, first: int) -> RawBatch:
        def col(c):
            return b.column(c).to_pylist() if c else None

        rb = RawBatch(list(range(first, first + b.num_rows)), col(self.text_column), col(self.pair_column), col(self.id_column))
        _binary_utf8(rb)
        return rb

    def batches(self):
        row = 0
        for f in self.files:
            try:
                with self.fs.open(f, "rb") as fh:
                    for b in self._parquet(fh).iter_batches(batch_size=self.batch_rows, columns=self._wanted()):
                        yield self._batch(b, row)
                        row += b.num_rows
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{self._fname(f)} near row {row}: cannot read the Parquet file ({_short(e)})", "check the file is Parquet and complete") from None

    def partitions(self, blocksize: int | None, target: int | None = None) -> list[Partition]:
        """Row ranges of the files (consecutive row groups; a large row group shared by several partitions),
        the sizes from the footers, nothing read."""
        wanted = set(self._wanted())
        metas = getattr(self, "_metas", None)
        if metas is None:
            metas = []
            for f in self.files:
                with self.fs.open(f, "rb") as fh:
                    metas.append(self._parquet(fh).metadata)
        total = sum(md.num_rows for md in metas)
        cap = max(MIN_PART_ROWS, -(-total // target)) if target else None
        parts: list[Partition] = []
        for f, md in zip(self.files, metas):
            group, skip, rows, size = [], 0, 0, 0.0
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                g_size = sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                             if rg.column(j).path_in_schema.split(".")[0] in wanted)
                pos = 0
                while True:
                    take = rg.num_rows - pos if cap is None else min(rg.num_rows - pos, cap - rows)
                    if not group:
                        skip = pos
                    group.append(g)
                    rows += take
                    size += g_size * take / max(rg.num_rows, 1)
                    pos += take
                    if (cap is not None and rows >= cap) or (blocksize and size >= blocksize):
                        parts.append(Partition(len(parts), f, tuple(group), n_rows=rows, row_offset=skip))
                        group, rows, size = [], 0, 0.0
                    if pos >= rg.num_rows:
                        break
            if group or md.num_row_groups == 0:
                parts.append(Partition(len(parts), f, tuple(group), n_rows=rows, row_offset=skip))
        return parts

    def read_partition(self, part: Partition, first_row: int) -> RawBatch:
        t = None
        try:
            if part.row_groups:
                with self.fs.open(part.file, "rb") as fh:
                    t = self._parquet(fh).read_row_groups(list(dict.fromkeys(part.row_groups)), columns=self._wanted())
                if part.n_rows is not None:
                    t = t.slice(part.row_offset, part.n_rows)
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{part.file} near row {first_row}: cannot read the Parquet file ({_short(e)})",
                             "check the file is Parquet and complete") from None
        if t is None:
            t = pa.table({c: pa.array([], self._pq_schema.field(c).type) for c in self._wanted()})
        return self._batch(t, first_row)


# ---------------------------------------------------------------------------------------- CSV, TSV, JSONL
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
            counter = _CountingReader(_Prefixed(self._head or b"", self._stdin))
            return io.BufferedReader(counter), counter
        try:
            raw = self.fs.open(self.files[0], "rb")
        except OSError as e:
            raise InputError(f"{self.name}: cannot open the file ({e.strerror or e})", "check the path and its permissions") from None
        counter = _CountingReader(raw)
        if self.compression is None:
            return io.BufferedReader(counter, buffer_size=1 << 20), counter
        native = pa.CompressedInputStream(pa.PythonFile(io.BufferedReader(counter, buffer_size=1 << 20), mode="r"), self.compression)
        return io.BufferedReader(_NativeRaw(native), buffer_size=1 << 20), counter

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
        counter = _CountingReader(io.BytesIO(data))
        for b in self._parse(io.BufferedReader(counter), counter):
            out.rows += [first_row + r for r in b.rows]
            out.texts += b.texts
            if out.pairs is not None: out.pairs += b.pairs
            if out.ids is not None: out.ids += b.ids
            out.pre_rejected.update({first_row + r: v for r, v in b.pre_rejected.items()})
        return out


class CsvReader(TextReader):
    """CSV and TSV (TSV: tab-separated, no quoting)."""

    CSV_BLOCK_BYTES = 1 << 22  # pyarrow's streaming CSV reader parses this many bytes at a time

    def _setup(self, delimiter):
        from .csvcheck import parse_delimiter

        super()._setup(delimiter)
        self._delimiter_option = parse_delimiter(delimiter)
        self.delimiter = self._delimiter_option or ("\t" if self.fmt == "tsv" else ",")

    def _block_header(self, f: str) -> bytes:
        with self.fs.open(f, "rb", compression=compression_of(f)) as fh:
            return fh.readline()

    def _count_lines(self, data: bytes) -> int | None:
        """Records of a block without quotes: its non-empty lines (pyarrow ends a line at \\n, \\r\\n or \\r and
        skips empty ones; a malformed line is a row too), less the header. None when a quote may join lines."""
        if b'"' in data and self.fmt == "csv":
            return None
        return max(0, sum(1 for ln in data.removeprefix(b"\xef\xbb\xbf").splitlines() if ln) - 1)

    def id_type(self) -> pa.DataType:
        return pa.int64() if self.id_column is None else pa.string()  # CSV/TSV ids are text

    def _parse_options(self, handler=None):
        import pyarrow.csv as pcsv

        return pcsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=self.fmt != "tsv",
                                 invalid_row_handler=handler, quote_char=False if self.fmt == "tsv" else '"')

    def _header_names(self, data: bytes) -> list[str]:
        import pyarrow.csv as pcsv

        with _quiet_row_handler_errors():
            reader = pcsv.open_csv(io.BytesIO(data), read_options=pcsv.ReadOptions(use_threads=False, block_size=len(data) + 1,
                                                                                   encoding=self.encoding),
                                   parse_options=self._parse_options(_skip_row))
        return list(reader.schema.names)

    def _head_columns(self, head: bytes) -> list[str]:
        """The header as pyarrow parses it (so the names always match the streaming reader's)."""
        if not head.strip():
            raise InputError(f"{self.name}: the file is empty", "the first line must name the columns")
        from .csvcheck import likely_delimiters_in, name_of, sniff_delimiter

        option = self._delimiter_option
        if self.fmt == "csv" and option is None:
            self.delimiter = sniff_delimiter(head)  # ';', '|' or tab when the header line has no comma
        try:
            cols = self._header_names(head)
        except (pa.ArrowException, ValueError):
            # the data rows of the head may be what fails (a malformed line with invalid bytes): the header line alone
            start = len(head) - len(head.lstrip(b"\r\n"))
            end = head.find(b"\n", start)
            try:
                cols = self._header_names(head if end < 0 else head[:end + 1])
            except UnicodeDecodeError as e:
                try:  # the offset in the file: the header comes first, so the first undecodable byte is the header's
                    head.decode(self.encoding)
                    at = e.start
                except UnicodeDecodeError as whole:
                    at = whole.start
                raise InputError(f"{self.name} header line: invalid {self.encoding} at byte {at}",
                                 f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')})") from None
            except (pa.ArrowException, ValueError) as e:
                raise InputError(f"{self.name}: cannot read the header line as {self.fmt.upper()} ({_short(e)})",
                                 f"the first line must name the columns; check {opt('input_format')} and {opt('encoding')}") from None
        if not any(c.strip() for c in cols):
            raise InputError(f"{self.name}: the header line names no column", "the first line must name the columns")
        likely = likely_delimiters_in(cols[0], self.delimiter) if len(cols) == 1 and option is None else []
        if likely:
            raise InputError(f"{self.name}: the header line is one column {cols[0]!r}, which holds {name_of(likely[0])}",
                             f"pass {opt('delimiter', name_of(likely[0]))} if that separates the columns "
                             f"(or {opt('delimiter', name_of(self.delimiter))} to read one column)")
        return cols


    def _parse(self, stream, counter):
        import pyarrow.csv as pcsv

        skipped: dict[int, str] = {}

        def on_invalid(row) -> str:
            # row.number counts records (blank lines excluded) from 1, the header included
            n = (row.number - 2) if row.number is not None else -1
            text = row.text if len(row.text) <= 40 else row.text[:37] + "..."
            skipped[n] = f"malformed line: expected {row.expected_columns} fields, found {row.actual_columns} ({json.dumps(text, ensure_ascii=False)})"
            return "skip"

        on_invalid._bertfeat_row_handler = True

        tracker = None
        delimiter = self.delimiter
        if self.fmt == "csv" and all(ch.encode(self.encoding, "ignore") == ch.encode() for ch in ('"', "\n", delimiter)):
            from .csvcheck import QuoteTracker

            tracker = QuoteTracker(stream, delimiter)  # an unclosed quote, rows that span lines
            stream = io.BufferedReader(tracker, buffer_size=1 << 20)
        wanted = self._wanted()
        try:
            with _quiet_row_handler_errors():
                reader = pcsv.open_csv(
                    stream,
                    read_options=pcsv.ReadOptions(use_threads=False, block_size=self.CSV_BLOCK_BYTES, encoding=self.encoding),
                    parse_options=self._parse_options(on_invalid),
                    convert_options=pcsv.ConvertOptions(
                        include_columns=wanted,
                        column_types={c: pa.binary() for c in wanted},
                        strings_can_be_null=False, quoted_strings_can_be_null=False),
                )
        except (pa.ArrowException, OSError, EOFError, ValueError) as e:
            stream.close()
            self._raise_unskippable(e)
            raise InputError(f"{self.name}: cannot parse as {self.fmt.upper()} ({_short(e)})",
                             f"check the file format, {opt('input_format')} and {opt('encoding')}") from None
        row = 0
        start = 0  # bytes consumed before the batch
        pending = None  # the last batch is held back: an unclosed quote at the end of the file rejects its last row
        it = iter(reader)
        try:
            while True:
                try:
                    with _quiet_row_handler_errors():
                        b = next(it)
                except StopIteration:
                    break
                except UnicodeDecodeError as e:
                    raise InputError(f"{self.name} near row {row}: invalid {self.encoding} ({_short(e)})",
                                     f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')})") from None
                except (pa.ArrowException, OSError, EOFError, ValueError) as e:
                    self._raise_unskippable(e)
                    raise InputError(f"{self.name} near row {row}: cannot parse as {self.fmt.upper()} ({_short(e)})",
                                     f"fix the line, or pass {opt('encoding')} if the file is not UTF-8") from None
                n = b.num_rows
                rows, pre = [], {}
                texts = b.column(self.text_column).to_pylist()
                pairs = b.column(self.pair_column).to_pylist() if self.pair_column else None
                ids = b.column(self.id_column).to_pylist() if self.id_column else None
                # interleave the skipped malformed lines in their row positions
                out_t, out_p, out_i = [], [] if pairs is not None else None, [] if ids is not None else None
                k = 0
                while k < n:
                    if row in skipped:
                        pre[row] = skipped.pop(row)
                        rows.append(row); out_t.append(None)
                        if out_p is not None: out_p.append(None)
                        if out_i is not None: out_i.append(None)
                    else:
                        rows.append(row); out_t.append(texts[k])
                        if out_p is not None: out_p.append(pairs[k])
                        if out_i is not None: out_i.append(ids[k])
                        k += 1
                    row += 1
                if pending is not None:
                    yield self._mark_suspects(pending, tracker)
                pending = RawBatch(rows, out_t, out_p, out_i, pre, counter.count, start)
                start = counter.count
            if tracker is not None:
                self.multiline_rows = tracker.multiline_records
                if tracker.unclosed:
                    self._reject_unclosed(tracker, pending, skipped, row)
            if pending is not None:
                yield self._mark_suspects(pending, tracker)
            if skipped:  # malformed lines after the last good row
                rest = sorted(skipped)
                if rest[0] != row or rest != list(range(row, row + len(rest))):
                    raise InputError(f"{self.name}: malformed lines at rows {rest[:5]} could not be placed",
                                     "fix the lines with the wrong number of fields")
                yield self._mark_suspects(RawBatch(rest, [None] * len(rest), [None] * len(rest) if self.pair_column else None,
                                                   [None] * len(rest) if self.id_column else None, dict(skipped), counter.count),
                                          tracker)
        finally:
            stream.close()

    def _column_name(self, field: int | None) -> str:
        return f" in column {self.columns[field]!r}" if field is not None and field < len(self.columns) else ""

    def _mark_suspects(self, b: RawBatch, tracker) -> RawBatch:
        """Rows whose quoted field closed lines later, right before more text: it swallowed the lines between."""
        if tracker is None or not tracker.suspects:
            return b
        for k, row in enumerate(b.rows):
            hit = tracker.suspects.get(row)
            if hit is not None:
                line, field, close = hit
                b.pre_rejected[row] = (f"unclosed quote: the quoted field{self._column_name(field)} that opens on line {line} "
                                       f"only ends at a quote on line {close}, so lines {line + 1} to {close} were read "
                                       "into this row")
                b.texts[k] = None
        return b

    def _reject_unclosed(self, tracker, pending: RawBatch | None, skipped: dict[int, str], next_row: int) -> None:
        """A quoted field never closed runs to the end of the file: its row (the last one) becomes a bad row."""
        col = self.columns[tracker.open_field] if tracker.open_field is not None and tracker.open_field < len(self.columns) else None
        reason = (f"unclosed quote: the quoted field{f' in column {col!r}' if col is not None else ''} that opens on line "
                  f"{tracker.open_line} is never closed, so every line after it was read into this row")
        last = max([next_row - 1, *skipped])
        if last in skipped or pending is None or not pending.rows:
            skipped[last] = reason
            return
        k = pending.rows.index(last)
        pending.pre_rejected[last] = reason
        pending.texts[k] = None

    def _raise_unskippable(self, e: BaseException):
        """pyarrow cannot hand a malformed line that is not valid UTF-8 to the skip handler: name the row."""
        m = re.search(r"Row #(\d+): Expected (\d+) columns, got (\d+)", str(e))
        if m:
            raise InputError(f"{self.name} row {int(m.group(1)) - 2}: malformed line: expected {m.group(2)} fields, "
                             f"found {m.group(3)}, and it is not valid {self.encoding}, so it cannot be skipped",
                             f"fix the line, or pass {opt('encoding')} with the file's encoding") from None


class JsonlReader(TextReader):
    """One JSON object per line."""

    def _setup(self, delimiter):
        super()._setup(delimiter)
        self._json_types: dict[str, set] = {}  # column -> the kinds of its values in the first lines
        self._first_kind: dict[str, str] = {}  # column -> the kind of its first value that is not null

    def _count_lines(self, data: bytes) -> int:
        """Lines that are not blank (JSON strings hold no raw line break): the rows, as _parse reads them."""
        return sum(1 for ln in data.removeprefix(b"\xef\xbb\xbf").split(b"\n") if ln.strip())

    def _string_columns(self) -> list[str]:
        return [c for c, types in self._json_types.items() if "str" in types]

    def id_type(self) -> pa.DataType | None:
        """The first id decides, as the reader's rule (an id of the other kind is a bad row): integer ids are
        int64, string ids string; None when the first lines hold no usable id."""
        if self.id_column is None:
            return pa.int64()
        return {"int": pa.int64(), "str": pa.string()}.get(self._first_kind.get(self.id_column))

    def _head_columns(self, head: bytes) -> list[str]:
        lines = head.removeprefix(b"\xef\xbb\xbf").split(b"\n")
        if len(head) == HEAD_BYTES and len(lines) > 1:
            lines = lines[:-1]  # the last line may be cut
        for line in lines[:1000]:
            try:
                obj = json.loads(line.decode(self.encoding))
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(obj, dict):
                for k, v in obj.items():
                    self._json_types.setdefault(k, set()).add(type(v).__name__)
                    if v is not None:
                        self._first_kind.setdefault(k, type(v).__name__)
        return list(self._json_types)


    def _parse(self, fh, counter):
        rows, texts, pairs, ids, pre = [], [], [], [], {}
        row = 0
        id_kind = None  # the type of the first id: every id must be of the same kind (int or str)
        consumed = 0
        start = 0  # bytes consumed before the batch
        try:
            while True:
                try:
                    line = fh.readline()
                except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                    raise InputError(f"{self.name} near row {row}: cannot read the file ({_short(e)})",
                                     "check the file is complete and its compression") from None
                if not line:
                    break
                if consumed == 0:
                    line = line.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
                consumed += 1
                if not line.strip():
                    continue  # blank lines are not rows
                rows.append(row)
                text = pair = ident = None
                try:
                    obj = json.loads(line.decode(self.encoding).strip())
                    if not isinstance(obj, dict):
                        raise ValueError(f"a line must hold a JSON object, not {_json_kind(obj)}")
                    text = obj.get(self.text_column)
                    pair = obj.get(self.pair_column) if self.pair_column else None
                    ident = obj.get(self.id_column) if self.id_column else None
                    if self.text_column not in obj:
                        pre[row] = f"no field '{self.text_column}'"
                    elif self.pair_column and self.pair_column not in obj:
                        pre[row] = f"no field '{self.pair_column}'"
                    elif ident is not None:
                        kind = "integer" if isinstance(ident, int) and not isinstance(ident, bool) else \
                            "string" if isinstance(ident, str) else None
                        if kind is None:
                            pre[row] = f"id {json.dumps(ident)[:40]} is {_json_kind(ident)}, not a string or an integer"
                        elif id_kind is None:
                            id_kind = kind
                        elif kind != id_kind:
                            pre[row] = f"id {json.dumps(ident)[:40]} is {'an' if kind == 'integer' else 'a'} {kind}, but the ids before it are {id_kind}s"
                except UnicodeDecodeError as e:
                    pre[row] = f"invalid {self.encoding} at byte {e.start} of the line"
                    if self.id_column:  # the id, for the rejects file, if the rest of the line is readable
                        try:
                            ident = json.loads(line.decode(self.encoding, errors="replace")).get(self.id_column)
                        except (ValueError, AttributeError):
                            ident = None
                except ValueError as e:
                    pre[row] = f"invalid JSON ({e})"
                if row in pre:
                    ident = ident if isinstance(ident, (int, str)) else None
                texts.append(text); pairs.append(pair); ids.append(ident)
                row += 1
                if len(rows) >= self.batch_rows:
                    yield RawBatch(rows, texts, pairs if self.pair_column else None, ids if self.id_column else None, pre,
                                   counter.count, start)
                    rows, texts, pairs, ids, pre = [], [], [], [], {}
                    start = counter.count
            if rows:
                yield RawBatch(rows, texts, pairs if self.pair_column else None, ids if self.id_column else None, pre,
                               counter.count, start)
        finally:
            fh.close()


def _ascii_lines(encoding: str) -> bool:
    """Line ends, quotes and blanks are their ASCII bytes in this encoding (UTF-8, Latin-1, cp1252; not UTF-16)."""
    try:
        return '"\r\n \t,'.encode(encoding) == b'"\r\n \t,'
    except (LookupError, UnicodeError):
        return False


def _binary_utf8(b: RawBatch) -> None:
    """Invalid UTF-8 in a binary Parquet column: a bad row whose reason says --encoding does not apply."""
    for values, what in ((b.texts, "text"), (b.pairs, "pair text")):
        for k, v in enumerate(values or ()):
            if isinstance(v, (bytes, bytearray)) and b.rows[k] not in b.pre_rejected:
                try:
                    bytes(v).decode("utf-8")
                except UnicodeDecodeError as e:
                    b.pre_rejected[b.rows[k]] = f"invalid UTF-8 at byte {e.start} of the {what} (a binary Parquet column)"


def _skip_row(row) -> str:
    return "skip"


_skip_row._bertfeat_row_handler = True


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


def _listing(cols: list[str]) -> str:
    return ", ".join(repr(c) if (not c or c != c.strip() or "," in c) else c for c in cols) or "none"


def _view(t: pa.DataType, test: str) -> bool:
    """string_view / binary_view (pyarrow >= 16)."""
    return getattr(pa.types, test, lambda _: False)(t)


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):  # e.g. a pandas categorical
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or _view(t, "is_string_view")


def _is_textual(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return _is_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) or _view(t, "is_binary_view")


def _json_kind(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(v), type(v).__name__)


def _short(e: BaseException) -> str:
    """An exception's message on one line, not too long."""
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:197] + "..."


class _Prefixed(io.RawIOBase):
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


class _NativeRaw(io.RawIOBase):
    """A pyarrow input stream (e.g. decompressing) as a Python raw binary stream."""

    def __init__(self, native):
        self._native = native

    def readable(self):
        return True

    def readinto(self, b):
        data = self._native.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self):
        self._native.close()
        super().close()
