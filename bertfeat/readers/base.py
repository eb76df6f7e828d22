"""The reader protocol every input format implements, and the types, sizes and helpers the formats share.

One reader per format behind one small protocol, used by both engines (the local engine reads
the whole input with ``batches()``; the Dask engine cuts it with ``partitions()`` and each worker
reads its share with ``read_partition()``):

    columns, text_column, pair_column, id_column   the input's columns and the ones chosen
    batches()                   RawBatches of the whole input, in order
    partitions(blocksize, target)   the input cut into Partitions, in the same row order
    read_partition(part, first_row) one partition as a RawBatch with global row numbers
    count_rows(part)            rows in a partition (Parquet: from the footer, nothing read)
    id_type()                   the output id column's Arrow type, when the input's schema says it
    keep, keep_types()          the kept columns (``keep``) and their Arrow types, decided up front
    identity(), listing()       files, sizes and stamps, for --resume and the check that the input held still

``open_input(path, ...)`` (``formats``) picks the reader. Every path goes through fsspec: local files, and
``s3://``, ``gs://``, ``hdfs://`` ... when that filesystem's package is installed. A reader holds
no open file, so it pickles to Dask workers as it is.

Everything streams: CSV through pyarrow's streaming reader, Parquet through ``iter_batches``,
JSONL line by line. Readers yield ``RawBatch`` objects holding *undecoded* values and their
0-based data-row numbers (header excluded), so that validation (chunks.validate_batch) can
reject a bad row with its exact row number and reason instead of failing the whole file.
Malformed CSV lines (wrong number of fields) are yielded as pre-rejected rows in their place.

Kept columns (``keep``: copied to the output beside the features) travel in ``RawBatch.extra``, already
converted to their column's type (``keep_types()``: the type given in ``keep_as``, else Parquet's schema, JSONL's
first values, a CSV/TSV cell's text unless the first rows read back unchanged as int64 or double: ``kept.py``); a
value that does not convert is a bad row (``RejectCode.BAD_KEPT_VALUE``) in its place. A value the conversion shows
otherwise (CSV ``007`` read as 7) is also kept as written, in ``RawBatch.written``: the rejects file shows that.
"""

from __future__ import annotations

import codecs
import os
import shlex
import sys
import unicodedata
from dataclasses import dataclass, field

import pyarrow as pa

from ..errors import InputError, one_line, opt
from ..checks import DEFAULT_MAX_FIELD_BYTES
from .kept import TYPE_NAMES, TYPES
from .paths import is_pattern, is_url, local_containers, resolve_files

TEXT_COLUMN_NAMES = ("text", "sentence", "content", "review")
HEAD_BYTES = 1 << 20  # bytes read up front to find the columns
MIN_PART_ROWS = 64  # Parquet: no smaller partitions than this for the sake of spreading (~0.3 s of one core)
MIN_PART_BYTES = 8 << 10  # CSV/TSV/JSONL: likewise, ~100 short sentences


def normalize_encoding(encoding: str) -> str:
    """A codec name -> its canonical name ('utf-8' for every UTF-8 spelling). Unknown names are an error, and so are
    codecs that are no text encoding (base64, rot13, zlib ...: bytes to bytes or text to text) and text codecs that
    cannot decode a stream with a stand-in for an unreadable byte, as the readers do (idna, punycode)."""
    try:
        info = codecs.lookup(encoding)
    except (LookupError, TypeError, ValueError):
        raise InputError(f"unknown encoding '{encoding}'", "pass a Python codec name such as utf-8, latin-1 or cp1252") from None
    how = f"pass the file's text encoding, e.g. {opt('encoding', 'utf-8')} or {opt('encoding', 'latin-1')}"
    if not getattr(info, "_is_text_encoding", True):
        raise InputError(f"{opt('encoding', encoding)} is not a text encoding: Python's {info.name} codec converts "
                         "bytes to bytes or text to text, not bytes to text", how)
    why = _stream_problem(info)
    if why is not None:
        raise InputError(f"{opt('encoding', encoding)} cannot read a file: Python's {info.name} codec {why}", how)
    return "utf-8" if info.name in ("utf-8", "utf-8-sig") else info.name


def _stream_problem(info: codecs.CodecInfo) -> str | None:
    """Why a text codec cannot decode a file as the readers do (piecewise, an unreadable byte escaped), or None: a
    short CSV line encoded with it and decoded back a byte at a time."""
    line = "id,text\nr1,hello world\r\n"
    try:
        data = info.encode(line)[0]
        decoder = info.incrementaldecoder(errors="surrogateescape")
        back = "".join(decoder.decode(data[i:i + 1]) for i in range(len(data))) + decoder.decode(b"", final=True)
    except (UnicodeError, LookupError, TypeError, ValueError) as e:
        return f"does not decode a stream of bytes ({one_line(e, 80)})"
    return None if back == line else "does not give text back a piece at a time"


@dataclass
class RawBatch:
    """A run of consecutive input rows, values not yet validated."""

    rows: list[int]  # 0-based data-row numbers
    texts: list  # bytes | str | None | other, per row
    pairs: list | None
    ids: list | None
    pre_rejected: dict = field(default_factory=dict)  # row -> rejects.Reason (malformed line, bad JSON, ...)
    bytes_read: int = 0  # bytes consumed when the batch ends (for progress on CSV/JSONL)
    bytes_start: int = 0  # ... and when it starts (a chunk that ends inside the batch interpolates)
    extra: dict[str, list] | None = None  # kept column -> its values per row (None without keep)
    # row -> {kept column: the value as the input wrote it}, for the values ``extra`` holds converted to another form
    # (CSV "007" read as 7): the rejects file shows a bad row's values as written
    written: dict = field(default_factory=dict)

    def slice(self, start: int, stop: int, bytes_read: int = 0, bytes_start: int = 0) -> "RawBatch":
        """Rows ``start:stop`` of the batch (their pre-rejections and kept values with them)."""
        rows = self.rows[start:stop]
        pre = {r: self.pre_rejected[r] for r in rows if r in self.pre_rejected} if self.pre_rejected else {}
        return RawBatch(rows, self.texts[start:stop], None if self.pairs is None else self.pairs[start:stop],
                        None if self.ids is None else self.ids[start:stop], pre, bytes_read, bytes_start,
                        None if self.extra is None else {c: v[start:stop] for c, v in self.extra.items()},
                        {r: self.written[r] for r in rows if r in self.written} if self.written else {})

    def kept_written(self, k: int) -> dict | None:
        """Row ``k``'s kept values as the rejects file shows them: as the input wrote them (None without keep)."""
        if self.extra is None:
            return None
        return {c: v[k] for c, v in self.extra.items()} | self.written.get(self.rows[k], {})

    def extend(self, other: "RawBatch", row_offset: int = 0) -> None:
        """Append ``other``'s rows (their row numbers shifted by ``row_offset``) to this batch."""
        self.rows += [row_offset + r for r in other.rows]
        self.texts += other.texts
        if self.pairs is not None: self.pairs += other.pairs
        if self.ids is not None: self.ids += other.ids
        if self.extra is not None:
            for c, values in self.extra.items():
                values += other.extra[c]
        self.pre_rejected.update({row_offset + r: v for r, v in other.pre_rejected.items()})
        self.written.update({row_offset + r: v for r, v in other.written.items()})


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


class Reader:
    """What every format shares: the files (through fsspec), the column rules, identity and the protocol."""

    def __init__(self, path: str, fmt: str, *, text_column: str | None = None, pair_column: str | None = None,
                 id_column: str | None = None, encoding: str = "utf-8", batch_rows: int = 8192, delimiter: str | None = None,
                 keep: tuple[str, ...] | list[str] = (), label: str | None = None, keep_as: dict[str, str] | None = None,
                 max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES, id_as_text: bool = False):
        self.path = path
        self.id_as_text = id_as_text  # every id read as the text the input wrote (id_column="id:str")
        self.fmt = fmt
        self.max_field_bytes = max_field_bytes
        self.encoding = normalize_encoding(encoding)
        self.batch_rows = batch_rows
        self.multiline_rows = 0  # CSV records whose quoted fields span lines (known once the file is read)
        self.glob = path != "-" and not is_url(path) and is_pattern(path)  # a local glob (the provenance says so)
        underscored: list[str] = []
        self.fs, self.files = resolve_files(path, fmt, glob=self.glob, underscored=underscored)  # decided once:
        if underscored and self.files:  # listing() reads it so again; a glob would read these: say what was left
            _warn_underscored(path, underscored)
        self.total_rows: int | None = None  # known up front for Parquet (footers) and for text that fits the head
        self.max_rows: int | None = None  # no more rows than this, where known up front (a fit of more PCA components refused)
        # progress by bytes counts the bytes read from disk, compressed or not
        self.total_bytes: int | None = sum(self.fs.size(f) for f in self.files) if self.files else None
        self._setup(delimiter)
        self.columns = self._columns()
        self._select_columns(text_column, pair_column, id_column)
        self.keep: tuple[str, ...] = ()
        self.keep_as: dict[str, str] = {}  # kept column -> the type given for it (keep="label:int"): int, float, bool, str
        self._kept_types: dict[str, pa.DataType] = {}
        if keep:
            self._select_keep(tuple(keep), label, dict(keep_as or {}))
        self._refuse_ambiguous(text_column, pair_column, id_column, keep or (), label)
        self.__dict__.pop("_sample", None)  # the head a format held for _decide_keep_types

    def _refuse_ambiguous(self, text_column, pair_column, id_column, keep, label) -> None:
        """A column named that more than one column bears (a blank name: a CSV header's repeated names are refused but
        for blank ones, ',text,' and '  '): pyarrow reads the first, and which one the user means is not ours to guess."""
        asked = [("text_column", text_column), ("pair_column", pair_column), ("id_column", id_column)]
        asked += [("label" if c == label else "keep", c) for c in keep]
        for param, col in asked:
            at = [i + 1 for i, c in enumerate(self.columns) if c == col] if col is not None else []
            if len(at) > 1:
                raise InputError(f"{self.name}: {opt(param)} {col!r} names {len(at)} columns of the header line "
                                 f"(columns {', '.join(map(str, at[:-1]))} and {at[-1]})",
                                 "give each of them a name in the header line, and pass the one to read")

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
        return pa.int64() if self.id_column is None else pa.string() if self.id_as_text else None

    def keep_types(self) -> dict[str, pa.DataType]:
        """Each kept column's Arrow type, in ``keep`` order (decided when the reader opened the input)."""
        return dict(self._kept_types)

    def empty_extra(self) -> dict[str, list] | None:
        """A RawBatch's ``extra`` with no rows yet (None without kept columns)."""
        return {c: [] for c in self.keep} if self.keep else None

    # ------------------------------------------------------------------ columns
    @property
    def name(self) -> str:
        return "<stdin>" if self.path == "-" else self.path

    def _fname(self, f) -> str:
        return self.name if self.path == "-" else str(f)

    def row_label(self, row: int) -> str:
        """Where a row is, for a message: ``NAME row N`` (N: the row's number in the whole input, as the rejects file
        and the features number it)."""
        return f"{self.name} row {row}"

    def _string_columns(self) -> list[str]:
        return list(self.columns)

    def _select_columns(self, text_column: str | None, pair_column: str | None, id_column: str | None) -> None:
        """Choose the text column and check that the pair and id columns exist (after _columns())."""
        self.text_column = self._pick_text_column(text_column)
        for param, col in (("pair_column", pair_column), ("id_column", id_column)):
            if col is not None and col not in self.columns:
                raise self._not_a_column(param, col)
        if id_column == "":  # the output's id column has the input's name, and a feature file's needs one
            raise InputError(f"{self.name}: {opt('id_column', '', cli=repr(''))} names the column that has no name, and "
                             "the id column keeps its name in the output",
                             "name that column in the input (pandas writes its index without a name: "
                             f"df.to_csv(index_label='id')), or leave {opt('id_column')} out to number the rows")
        self.pair_column = pair_column
        self.id_column = id_column

    def _pick_text_column(self, text_column: str | None) -> str:
        if text_column is not None:
            if text_column not in self.columns:
                raise self._not_a_column("text_column", text_column)
            return text_column
        for name in TEXT_COLUMN_NAMES:  # the name itself first; else its one spelling in other case (Text, TEXT)
            if name in self.columns:
                return name
            spelled = [c for c in self.columns if c.lower() == name]
            if len(spelled) > 1:
                raise InputError(f"{self.name}: the columns {listing(spelled)} could each be the text",
                                 f"pass {opt('text_column', 'NAME')} with the one to encode")
            if spelled:
                return spelled[0]
        strings = self._string_columns()
        for name in TEXT_COLUMN_NAMES:  # then a string column so named but for the spaces around it ("text ", " Text":
            spaced = [c for c in strings if c.strip().lower() == name]  # a header written "id, text"), on every reader
            if len(spaced) > 1:
                raise InputError(f"{self.name}: the columns {listing(spaced)} could each be the text (the spaces "
                                 "around a name are part of it)", f"pass {opt('text_column', 'NAME')} with the one to "
                                 f"encode, e.g. {opt('text_column', spaced[0], cli=shlex.quote(spaced[0]))}")
            if spaced:
                return spaced[0]
        if len(strings) == 1:
            return strings[0]
        raise InputError(
            f"{self.name}: cannot tell which column holds the text (columns: {listing(self.columns)})",
            f"pass {opt('text_column', 'NAME')}",
        )

    def _not_a_column(self, param: str, col: str) -> InputError:
        """A text, pair or id column that is not one: named as the input writes it when only the spaces around it or
        its case differ (a header written "id, text": its " text"), else the columns listed."""
        near = near_miss(col, self.columns, param=param)
        return InputError(f"{self.name}: {opt(param)} '{col}' is not a column{self._columns_of()}{near[0] if near else ''}",
                          near[1] if near else f"columns are: {listing(self.columns)}{self._columns_fix()}"
                                               f"{self._partition_hint(col)}")

    def _columns_of(self) -> str:
        """Where the columns were found, when not in the whole input (JSONL: its first lines), for a message."""
        return ""

    def _columns_fix(self) -> str:
        return ""

    def _partition_hint(self, col: str) -> str:
        """For a column that is no column but a folder level of the input's files (``split=train/``: Hive partitions,
        which the readers do not make columns of): what it is and what to do; else ''."""
        level = f"{col}="
        if not any(part.startswith(level) for f in self.files for part in str(f).replace("\\", "/").split("/")[:-1]):
            return ""
        return (f"; '{col}' is a folder level of the files' paths ({level}...: Hive partitions), which bertfeat does "
                "not read as a column: write the column into the files, or read each partition's folder apart")

    def _select_keep(self, keep: tuple[str, ...], label: str | None, keep_as: dict[str, str]) -> None:
        """Check that every kept column exists (``label``: the one kept as the label, named so), then decide the types
        of those ``keep_as`` gives none (the format's ``_decide_keep_types``)."""
        for col in keep:
            if col not in self.columns:
                near = _typed_label(col, self.columns) if col == label else near_miss(col, self.columns, keep, keep_as)
                raise InputError(f"{self.name}: {opt('label' if col == label else 'keep')} '{col}' is not a column"
                                 f"{self._columns_of()}{near[0] if near else ''}",
                                 near[1] if near else
                                 f"columns are: {listing(self.columns)}{'' if col == label else quoting_hint(self.columns)}"
                                 f"{self._columns_fix()}{self._partition_hint(col)}")
        self.keep, self.keep_as = keep, keep_as
        decided = self._decide_keep_types()
        self._kept_types = {c: TYPES[TYPE_NAMES[keep_as[c]]] if c in keep_as else decided[c] for c in keep}

    def _decide_keep_types(self) -> dict[str, pa.DataType]:
        """The kept columns' types by the format's rule (a column ``keep_as`` gives a type may be left out: it has that
        one; a format that cannot convert a column to it refuses here)."""
        raise NotImplementedError

    def _wanted(self) -> list[str]:
        return [c for c in dict.fromkeys([self.text_column, self.pair_column, self.id_column, *self.keep]) if c is not None]

    def role(self, column: str) -> str | None:
        """What a column is to the run, for a reason's words (``text``, ``pair text``, ``id``, ``kept column 'x'``);
        None for a column the run does not read."""
        for name, what in ((self.text_column, "text"), (self.pair_column, "pair text"), (self.id_column, "id")):
            if column == name:
                return what
        return f"kept column {column!r}" if column in self.keep else None

    def identity(self, removed_ok: bool = False, within_run: bool = False) -> dict:
        """What identifies the input: its path, format and files, each with its size and modification time (a URL's:
        the store's ``stamp``), as --resume compares them. ``within_run``: also what a change made while a run reads
        the input leaves and a copy of it (``cp -p`` to another disk, which --resume must pass) does not: each local
        file's ``ctime_ns``, ``inode`` and ``device``, each URL file's ``stamps`` (every field of URL_STAMPS its store
        gives). ``removed_ok``: a file gone since is listed as ``{"path": ..., "removed": True}`` instead of raising."""
        found = {"path": self.path, "format": self.fmt, "files": [self._file_identity(f, removed_ok) for f in self.files]}
        held = local_containers(self.path)  # a zip:// URL's archive: its members' sizes alone miss a same-size edit
        if held:
            found["containers"] = [_local_identity(p, removed_ok) for p in held]
        return found if within_run else resume_identity(found)

    def _file_identity(self, f: str, removed_ok: bool) -> dict:
        url = is_url(self.path)
        path = self.fs.unstrip_protocol(f) if url else f
        try:
            info = self.fs.info(f) if url else os.stat(f)
        except FileNotFoundError:
            if not removed_ok:
                raise
            return {"path": path, "removed": True}
        if url:
            stamp = next((info.get(k) for k in URL_STAMPS[:5] if info.get(k)), None)
            return {"path": path, "size": info.get("size"), "stamp": str(stamp),
                    "stamps": {k: str(info[k]) for k in URL_STAMPS if info.get(k) is not None}}
        return _stat_identity(path, info)

    def listing(self) -> list[str]:
        """The files the input's path names now, as identity() names them: a glob or a folder may have gained one
        since the reader listed it (none when the path names nothing now). The path is read as it was at open, a glob
        or a file (``glob``): report[1].csv removed names nothing, not report1.csv. A store's cached listings and file
        information are dropped first (s3fs and gcsfs keep them), so a later identity() sees the store as it is."""
        if self.path == "-":
            return []
        if is_url(self.path):
            self.fs.invalidate_cache()
        try:
            _, files = resolve_files(self.path, self.fmt, known=self.files, glob=self.glob)
        except (InputError, OSError):
            return []
        return [self.fs.unstrip_protocol(f) if is_url(self.path) else f for f in files]


#: what an fsspec store may say of a file that a rewrite changes (S3: ETag, LastModified, VersionId; GCS: etag, updated,
#: generation, md5Hash, crc32c; HTTP: the headers ETag, Content-MD5, Digest, Last-Modified; Azure: etag, last_modified;
#: file://: mtime, ino, created (the ctime); the in-memory store: created). The first five in this order are
#: --resume's ``stamp`` (its first one given; the others joined later, so a partial run's stamp stays as it was)
URL_STAMPS = ("mtime", "LastModified", "ETag", "etag", "updated", "generation", "VersionId", "md5Hash", "crc32c",
              "Content-MD5", "last_modified", "ino", "created", "Last-Modified", "Digest")
#: a file's keys in the within-run identity only (identity(within_run=True)): --resume compares the others
WITHIN_RUN_KEYS = ("ctime_ns", "inode", "device", "stamps")


def resume_identity(identity: dict) -> dict:
    """An input's within-run identity (Reader.identity(within_run=True)) as --resume and the provenance keep it: each
    file's path, size and modification time or stamp (one stat gives both, so they describe the same files); the
    archives a chained URL reads from (``containers``) likewise."""
    def kept(files):
        return [{k: v for k, v in f.items() if k not in WITHIN_RUN_KEYS} for f in files]

    out = {**identity, "files": kept(identity["files"])}
    if "containers" in identity:
        out["containers"] = kept(identity["containers"])
    return out


def _stat_identity(path: str, info: os.stat_result) -> dict:
    return {"path": path, "size": info.st_size, "mtime_ns": info.st_mtime_ns, "ctime_ns": info.st_ctime_ns,
            "inode": info.st_ino, "device": info.st_dev}


def _local_identity(path: str, removed_ok: bool) -> dict:
    try:
        return _stat_identity(path, os.stat(path))
    except FileNotFoundError:
        if not removed_ok:
            raise
        return {"path": path, "removed": True}


#: a message lists this many column names at most, each cut to NAME_CHARS characters: one line however wide the file
LISTED_COLUMNS, NAME_CHARS = 30, 60


def listing(cols: list[str]) -> str:
    """Column names for a message, comma-separated (quoted when blank, padded or holding a comma); 'none' for none.
    At most LISTED_COLUMNS of them, each at most NAME_CHARS characters ("..." marks a cut)."""
    def shown(c: str) -> str:
        c = c if len(c) <= NAME_CHARS else c[:NAME_CHARS - 3] + "..."
        return repr(c) if (not c or c != c.strip() or "," in c) else c

    more = f", ... ({len(cols) - LISTED_COLUMNS:,} more)" if len(cols) > LISTED_COLUMNS else ""
    return (", ".join(shown(c) for c in cols[:LISTED_COLUMNS]) + more) or "none"


_STDIN_FIX = ("pipe the input into bertfeat (e.g. cat in.csv | bertfeat extract - --input-format csv -o out.parquet), "
              "or pass the file's path instead of -")


def standard_input():
    """Standard input's binary stream (``-`` as the input); refused when the process has none (started with it closed,
    ``<&-``: Python's sys.stdin is None)."""
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None:
        raise InputError("<stdin>: standard input is closed, so there is nothing to read", _STDIN_FIX)
    return stdin


def stdin_read_error(e: OSError) -> InputError:
    """Standard input that cannot be read (open for writing only, a directory ...): one line, not a traceback."""
    return InputError(f"<stdin>: standard input cannot be read ({e.strerror or one_line(e)})", _STDIN_FIX)


def stdin_empty_error(what: str) -> InputError:
    """No byte on standard input: most often the command before the pipe failed (``false | bertfeat extract -`` said
    "the file is empty - the first line must name the columns"). ``what``: the input the format expects."""
    return InputError("<stdin>: standard input is empty (nothing was piped in, or the command writing to it failed)",
                      f"check the command before the | (in bash, set -o pipefail makes its failure the pipeline's), "
                      f"and pipe {what} into bertfeat extract -")


def quoting_hint(cols: list[str]) -> str:
    """For a kept column that is not found: how to name one whose name keep's text would split (a comma, a double quote,
    or an ending :TYPE), when the input has such a name ('' when it has none)."""
    odd = next((c for c in cols if "," in c or '"' in c or ":" in c), None)
    if odd is None:
        return ""
    quoted = '"' + odd.replace('"', '""') + '"'
    return (f" (a name holding a comma, a double quote or a colon is quoted as in CSV, e.g. "
            f"{opt('keep', quoted, cli=shlex.quote(quoted))})")


def near_miss(name: str, cols: list[str], keep: tuple[str, ...] = (),
              keep_as: dict[str, str] | None = None, param: str = "keep") -> tuple[str, str] | None:
    """A kept name that is no column but one written otherwise (``label, split``: its " split"; ``label:INT``: a type
    keep does not know, so the whole text was taken for the name) -> (what, for the message; how to write it); None
    when it is none of these (the caller lists the columns). ``keep`` / ``keep_as``: every kept name and the types
    given, for the whole list written without the spaces after its commas. ``param``: the option that named it (the text,
    pair and id columns: their spelling only, one name each)."""
    from .kept import TYPE_NAMES

    as_header = "write it as the input names it, {}"

    def nfc(t: str) -> str:
        return unicodedata.normalize("NFC", t)

    for same, why in ((lambda c: c.strip() == name.strip(), "the spaces around a name are part of it"),
                      (lambda c: c.lower() == name.lower(), "names are case-sensitive"),
                      (lambda c: nfc(c) == nfc(name), "its accented letters are other code points than the ones "
                       "given (Unicode NFC / NFD: the input's is {ascii}), and names are compared code point by code "
                       "point")):
        found = [c for c in cols if same(c)]
        if len(found) == 1:
            c = found[0]
            comma = len(keep) > 1 and c.strip() == c and name.strip() != name
            why = why.replace("{ascii}", ascii(c))
            return (f" ({c!r} is: {why})", as_header.format(opt(param, c, cli=shlex.quote(c))) + (
                f" (no space after a comma: {_keep_written(keep, keep_as or {}, cols)})" if comma else ""))
    if param != "keep":
        return None
    base, _, typ = name.rpartition(":")
    if base in cols:
        spelled = typ.strip().lower()
        if typ in TYPE_NAMES:  # (a list or dict given to keep= names each column exactly: no type is read there)
            return (f" ('{base}' is; a type follows a column's name in {opt('keep')}'s text alone, one at most)",
                    f"give its type so, e.g. {opt('keep', base + ':' + typ)}")
        why = ("nothing follows its colon" if not typ else
               f"'{typ}' is {'the type ' + spelled + ' written otherwise' if spelled in TYPE_NAMES else 'no type'}, so "
               "the whole text was read as the name")
        return f" ('{base}' is; {why})", f"give its type as int, float, bool or str, e.g. {opt('keep', base + ':int')}"
    return None


def _typed_label(name: str, cols: list[str]) -> tuple[str, str] | None:
    """A label given with a type (``label:str``) where ``label`` is a column: (why, fix), the type going with keep."""
    from .kept import TYPE_NAMES

    base, _, typ = name.rpartition(":")
    if base not in cols or typ.strip().lower() not in TYPE_NAMES:
        return None
    return (f" ('{base}' is; {opt('label')} names the column alone)",
            f"pass {opt('label', base, cli=shlex.quote(base))}, and give its type in {opt('keep')} "
            f"(e.g. {opt('keep', base + ':' + typ.strip().lower())})")


def _keep_written(keep: tuple[str, ...], keep_as: dict[str, str], cols: list[str]) -> str:
    """The kept list as --keep / keep= would take it: a name that is no column but one with spaces around it is that
    column's name; the types given follow their names."""
    from .kept import TYPE_NAMES

    def written(name: str) -> str:  # as options.parse_keep reads it back: quoted where a comma, quote or type would cut it
        bare = not any(c in name for c in ',"') and name.rpartition(":")[2] not in TYPE_NAMES
        return name if bare else '"' + name.replace('"', '""') + '"'

    names = [k if k in cols or k.strip() not in cols else k.strip() for k in keep]
    text = ",".join(written(n) + (f":{keep_as[k]}" if k in keep_as else "") for k, n in zip(keep, names))
    return opt("keep", text, cli=shlex.quote(text))


def utf8_error_at(raw: bytes) -> int:
    """Where bytes stop being UTF-8 (-1: they are)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return -1


def _warn_underscored(path: str, names: list[str]) -> None:
    """A folder's Parquet files left out for a name starting with ``_`` (Spark's and Dask's rule for a folder, which
    ``_SUCCESS`` and ``_metadata`` files follow), said: a glob of the folder reads them, so the two differed silently."""
    import glob

    from ..errors import warn
    from .paths import shell_pattern

    shown = ", ".join(os.path.relpath(n, path) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    suffix = os.path.splitext(names[0])[1]  # (a glob is case-sensitive: the first such file's own extension)
    pattern = shell_pattern(os.path.join(glob.escape(path.rstrip("/")), "**", "*" + suffix))
    warn(f"{path}: {len(names)} Parquet file{'s' if len(names) > 1 else ''} left out ({shown}): in a folder, names "
         f"starting with _ are not input; to read them, pass a glob, e.g. {pattern}", every_time=True)
