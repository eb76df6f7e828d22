"""Parquet: a file, a directory of them or a glob read as one dataset, partitions from the footers, standard input
spooled to a temporary file.
"""

from __future__ import annotations

from collections import Counter

import os
import shlex

import numpy as np
import pyarrow as pa

from ..errors import InputError, one_line, opt
from .rejects import Reason, RejectCode, shown_text, too_large
from .base import (MIN_PART_ROWS, Partition, RawBatch, Reader, listing, standard_input, stdin_empty_error, stdin_read_error,
                   utf8_error_at)
from .kept import (cast_values, check_cast, duplicate_field, python_values, shortest_floats, shown_values, storage,
                   written_cells)


class ParquetReader(Reader):
    """A Parquet file, a directory of them, or a glob: one dataset, files in sorted order."""

    def _setup(self, delimiter):
        if self.path == "-":
            self.files = [self._spool_stdin()]  # Parquet needs seeking: copy standard input to a temporary file
            import fsspec

            self.fs = fsspec.filesystem("file")
            self.total_bytes = os.path.getsize(self.files[0])

    def _spool_stdin(self) -> str:
        import tempfile
        import weakref

        stdin = standard_input()
        fd, name = tempfile.mkstemp(prefix="bertfeat-stdin-", suffix=".parquet")
        weakref.finalize(self, os.unlink, name)
        with os.fdopen(fd, "wb") as out:
            while True:
                try:
                    data = stdin.read(1 << 20)
                except OSError as e:  # (a write's error, e.g. a full disk, is the temporary file's)
                    raise stdin_read_error(e) from None
                if not data:
                    break
                out.write(data)
        if os.path.getsize(name) == 0:
            raise stdin_empty_error("a Parquet file")
        return name

    def _parquet(self, fh, **options):
        import pyarrow.parquet as pq

        return pq.ParquetFile(fh, **options)

    def row_label(self, row: int) -> str:
        """``NAME row N``, and for a dataset of several files the file that holds the row and its row there."""
        label = super().row_label(row)
        if len(self.files) < 2:
            return label
        for f, n in zip(self.files, self.file_rows):
            if row < n:
                return f"{label} ({self._fname(f)} row {row})"
            row -= n
        return label

    def _columns(self) -> list[str]:
        self._pq_schema = None
        total = 0
        self._metas = []
        self._schemas = []  # every file's, for _same_type
        for f in self.files:
            try:
                with self.fs.open(f, "rb") as fh:
                    pf = self._parquet(fh)
                    meta, schema = pf.metadata, pf.schema_arrow
            except Exception as e:
                raise InputError(f"{self._fname(f)}: not a readable Parquet file ({one_line(e)})", "check the file is Parquet and complete") from None
            if self._pq_schema is None:
                self._pq_schema = schema
                counts = Counter(schema.names)  # (names.count per name was quadratic: minutes at 60,000 columns)
                dup = sorted(n for n, k in counts.items() if k > 1)
                if dup:
                    raise InputError(f"{self._fname(f)}: the column name {dup[0]!r} appears {counts[dup[0]]} times",
                                     "rename the columns so that every name is unique (e.g. table.rename_columns in pyarrow)")
            elif schema.names != self._pq_schema.names:
                raise _columns_differ(self._fname(f), schema.names, self.files[0], self._pq_schema.names)
            total += meta.num_rows
            self._metas.append(meta)
            self._schemas.append(schema)
        self.total_rows = self.max_rows = total
        self.file_rows = [m.num_rows for m in self._metas]  # (travels to Dask workers; the footers do not)
        return list(self._pq_schema.names)

    def __getstate__(self):  # the footers and schemas stay on the client (partitions() has used them)
        return {k: v for k, v in self.__dict__.items() if k not in ("_metas", "_schemas")}

    def _same_type(self, col: str, text: bool = False) -> None:
        """An id or kept column must have one type in every file of a dataset (a dictionary column counts as its value
        type; string, large_string and string_view alike, binary ones alike): else its values could not make one output
        column. A text or pair column (``text``) only has to be text in every file (its values are decoded one by one)."""
        def norm(t):
            t = t.value_type if pa.types.is_dictionary(t) else t
            if pa.types.is_large_string(t) or _view(t, "is_string_view"):
                return pa.string()
            return pa.binary() if pa.types.is_large_binary(t) or _view(t, "is_binary_view") else t

        first = norm(self._pq_schema.field(col).type)
        for f, schema in zip(self.files[1:], getattr(self, "_schemas", [])[1:]):
            t = norm(schema.field(col).type)
            if text:
                if not _is_textual(schema.field(col).type):
                    raise InputError(f"{self._fname(f)}: column {col!r} has type {t}, not text (it is {first} in "
                                     f"{self._fname(self.files[0])})", "a Parquet dataset needs the text column to be text "
                                     "in every file: cast it when writing the files (e.g. table.cast in pyarrow)")
                continue
            if t != first:
                raise InputError(f"{self._fname(f)}: column {col!r} is {t}, but {first} in {self._fname(self.files[0])}",
                                 "a Parquet dataset needs each column to have one type in every file: cast it when "
                                 "writing the files (e.g. table.cast in pyarrow)")

    def _refuse_duplicate_field(self, col: str, what: str) -> None:
        """A struct whose field name appears twice (nested anywhere): its values have no Python form (a dict), which
        an id or kept value travels as, and no one name reads that field back."""
        t = self._pq_schema.field(col).type
        twice = duplicate_field(t)
        if twice is not None:
            raise InputError(f"{self.name}: {what} '{col}' holds {t} values, a struct whose field name {twice!r} appears "
                             "more than once", "rename the struct's fields so that each name is unique (e.g. "
                             "pyarrow's StructArray.from_arrays with other names), or leave the column out")

    def _select_columns(self, text_column, pair_column, id_column):
        super()._select_columns(text_column, pair_column, id_column)
        for col, text in ((self.text_column, True), (pair_column, True), (id_column, False)):
            if col is not None:
                self._same_type(col, text)
        if id_column is not None:
            self._refuse_duplicate_field(id_column, opt("id_column"))
            self._check_id_as_text(id_column)
        for param, col in (("text_column", self.text_column), ("pair_column", pair_column)):
            if col is not None:
                t = self._pq_schema.field(col).type
                if not _is_textual(t):
                    raise InputError(f"{self.name}: column '{col}' has type {t}, not text",
                                     f"choose a string column with {opt(param)} (string columns: {listing(self._string_columns())})")

    def _check_id_as_text(self, column: str) -> None:
        """``id_as_text`` reads integer ids as their decimal digits, string ids as they are: a column of another type
        has no one text for its values (a double's 1.0, a timestamp's zone)."""
        t = self._pq_schema.field(column).type
        if self.id_as_text and not (_is_string(t) or pa.types.is_integer(t.value_type if pa.types.is_dictionary(t) else t)):
            raise InputError(f"{self.name}: {opt('id_column', column + ':str', cli=shlex.quote(column + ':str'))} reads "
                             f"integer or string ids as text, and column '{column}' holds {t} values",
                             f"give {opt('id_column', column, cli=shlex.quote(column))} (its values are written as Parquet holds them), or "
                             "choose an integer or string id column")

    def _string_columns(self) -> list[str]:
        return [f.name for f in self._pq_schema if _is_string(f.type)]

    def id_type(self) -> pa.DataType:
        """The input column's type (int32 stays int32, binary stays binary), a dictionary column's value type; string
        for ``id_as_text``."""
        if self.id_column is None:
            return pa.int64()
        if self.id_as_text:
            return pa.string()
        t = self._pq_schema.field(self.id_column).type
        return t.value_type if pa.types.is_dictionary(t) else t

    def _decide_keep_types(self) -> dict[str, pa.DataType]:
        """The schema's types (a dictionary column's value type); the values are written as read."""
        for c in self.keep:
            self._same_type(c)
            self._refuse_duplicate_field(c, f"{opt('keep')} column")
        types = {c: self._pq_schema.field(c).type for c in self.keep}
        types = {c: t.value_type if pa.types.is_dictionary(t) else t for c, t in types.items()}
        for c, name in self.keep_as.items():
            check_cast(self.name, c, types[c], name)
        return types

    def _batch(self, b, first: int) -> RawBatch:
        unchecked: dict[str, dict[int, int]] = {}  # string columns whose writer let invalid UTF-8 in: cell -> byte
        oversized: dict[int, Reason] = {}  # cell -> why: a value over max_field_bytes (nulled before it is read)

        capped: dict[str, pa.Array] = {}  # kept column with a value over max_field_bytes -> its storage, those null

        def cap(c, kept=False):
            column, over = _capped(storage(b.column(c)) if kept else b.column(c), self.max_field_bytes)
            for k, size in over.items():
                oversized.setdefault(k, too_large(self.role(c), size, self.max_field_bytes))
            if kept and over:
                capped[c] = column
            return column

        def col(c, kept=False):
            if c is None:  # (a column named "" is a column)
                return None
            values, bad = _pylist(cap(c, kept))  # (kept_array makes an extension type again)
            if bad:
                unchecked[c] = bad
            return values

        rows = list(range(first, first + b.num_rows))
        for c in self.keep_as:  # a value over the limit is not cast either (keep="notes:str")
            cap(c, True)
        cast = {c: cast_values(c, capped.get(c, b.column(c)), self._kept_types[c]) for c in self.keep_as}  # (values, bad)
        rb = RawBatch(rows, col(self.text_column), col(self.pair_column), col(self.id_column),
                      extra={c: cast[c][0] if c in cast else col(c, True) for c in self.keep} if self.keep else None)
        for c, (values, bad) in cast.items():
            for k, why in bad.items():
                rb.pre_rejected.setdefault(rows[k], why)
        for c in self.keep:  # the rejects file shows a value as the file holds it: "007" cast to 7, a float32's 0.1
            held = capped.get(c, storage(b.column(c)))
            shown = shown_values(held)
            raw = _pylist(held)[0] if shown is None and c in cast else shown
            if raw is None:
                continue
            values = cast[c][0] if c in cast else rb.extra[c]
            for k, v in written_cells(raw, values).items():
                if values[k] is not None or k not in oversized:  # (a value over max_field_bytes is not shown)
                    rb.written.setdefault(rows[k], {})[c] = v
        if rb.ids is not None and self.id_as_text:  # an integer id as its decimal digits (a string id is one already)
            rb.ids = [v if v is None or isinstance(v, str) else str(v) for v in rb.ids]
        elif rb.ids is not None:  # a float32 id 0.1 shown so in the rejects file, not as the double it widens to
            rb.ids = shortest_floats(rb.ids, b.column(self.id_column))
        rb.pre_rejected.update({rows[k]: why for k, why in oversized.items()})
        named = [(self.text_column, rb.texts, "text"), (self.pair_column, rb.pairs, "pair text"),
                 (self.id_column, rb.ids, "id"), *((c, (rb.extra or {}).get(c), f"kept column {c!r}") for c in self.keep)]
        for c, values, what in named:
            for k, at in unchecked.get(c, {}).items():
                values[k] = shown_text(values[k])  # as the rejects file shows it
                if rows[k] not in rb.pre_rejected:
                    rb.pre_rejected[rows[k]] = Reason(RejectCode.ENCODING, f"invalid UTF-8 at byte {at} of the {what} "
                                                                           "(a Parquet string column its writer did not check)")
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
                raise InputError(f"{self._fname(f)} near row {row}: cannot read the Parquet file ({one_line(e)})", "check the file is Parquet and complete") from None

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
                per_row = g_size / max(rg.num_rows, 1)
                while True:
                    take = rg.num_rows - pos if cap is None else min(rg.num_rows - pos, cap - rows)
                    full = cap is not None and rows + take >= cap
                    if blocksize and per_row > 0:  # within a row group too: no partition above blocksize bytes
                        by_bytes = max(MIN_PART_ROWS - rows, -(-int(blocksize - size) // max(1, int(per_row))), 1)
                        if by_bytes <= take:
                            take, full = by_bytes, True
                    if not group:
                        skip = pos
                    group.append(g)
                    rows += take
                    size += per_row * take
                    pos += take
                    if full or (blocksize and size >= blocksize):
                        parts.append(Partition(len(parts), f, tuple(group), n_rows=rows, row_offset=skip))
                        group, rows, size = [], 0, 0.0
                    if pos >= rg.num_rows:
                        break
            if group or md.num_row_groups == 0:
                parts.append(Partition(len(parts), f, tuple(group), n_rows=rows, row_offset=skip))
        return parts

    def read_partition(self, part: Partition, first_row: int) -> RawBatch:
        """The partition's rows: ``n_rows`` from row ``row_offset`` of its first row group on. A row group shared by
        several partitions is streamed in record batches of about the partition's rows, and only the partition's
        are kept, so a task holds its partition and a batch (and a page and a read buffer), not the whole row group
        decoded. The batches before the partition's rows are still decoded (CPU): pyarrow reads no row range inside a
        row group (no page index use in iter_batches)."""
        batches: list[pa.RecordBatch] = []
        try:
            if part.row_groups:
                with self.fs.open(part.file, "rb") as fh:
                    # no pre-buffering (it reads the row groups' whole column chunks first): pages read as decoded
                    pf = self._parquet(fh, pre_buffer=False, buffer_size=READ_BUFFER)
                    batches = list(_rows_of(pf, list(dict.fromkeys(part.row_groups)), self._wanted(), part))
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{part.file} near row {first_row}: cannot read the Parquet file ({one_line(e)})",
                             "check the file is Parquet and complete") from None
        if batches:
            t = pa.Table.from_batches(batches)
        else:
            t = pa.table({c: pa.array([], self._pq_schema.field(c).type) for c in self._wanted()})
        return self._batch(t, first_row)


READ_BUFFER = 1 << 20  # bytes read at a time from a column chunk by read_partition (0 in pyarrow: the whole chunk)


def _rows_of(pf, groups: list[int], columns: list[str], part: Partition):
    """The record batches of ``part``'s rows among ``groups`` of ``pf`` (all of their rows when ``n_rows`` is None):
    batches of about the partition's rows, those before ``row_offset`` dropped, the one across an end sliced."""
    start, stop = (0, None) if part.n_rows is None else (part.row_offset, part.row_offset + part.n_rows)
    size = 65536 if part.n_rows is None else max(MIN_PART_ROWS, part.n_rows)
    pos = 0  # rows of the groups before the batch
    for b in pf.iter_batches(batch_size=size, row_groups=groups, columns=columns):
        end = pos + b.num_rows
        if end > start:
            yield b.slice(max(0, start - pos), (end if stop is None else min(end, stop)) - max(pos, start))
        if stop is not None and end >= stop:
            return  # no batch after the partition's last row is decoded
        pos = end


def _capped(col, cap: int):
    """A column with every value over ``cap`` bytes made null, so that it never becomes a Python object, and those
    cells -> their sizes (``_value_sizes``: a nested value's size is its leaves'). A text or binary column's bytes are
    not copied (its validity bitmap is replaced); a nested one is rebuilt only when a value is over."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out, over, at = [], {}, 0
    for a in chunks:
        dictionary = pa.types.is_dictionary(a.type)
        sizes = _value_sizes(a)  # (a dictionary column's: its values' sizes by index)
        if sizes is None:
            return col, {}
        valid = _valid(a.indices if dictionary else a)
        big = np.flatnonzero(valid & (sizes > cap))
        if big.size:
            valid = valid.copy()
            valid[big] = False
            over.update({at + int(k): int(sizes[k]) for k in big})
            if dictionary:
                a = pa.DictionaryArray.from_arrays(_with_valid(a.indices, valid), a.dictionary)
            elif pa.types.is_nested(a.type):  # (from_buffers would need every child's buffers)
                import pyarrow.compute as pc

                a = pc.if_else(pa.array(valid), a, pa.nulls(len(a), a.type))
            else:
                a = _with_valid(a, valid)
        out.append(a)
        at += len(a)
    if not over:
        return col, {}
    return (pa.chunked_array(out, col.type) if isinstance(col, pa.ChunkedArray) else out[0]), over


def _value_sizes(a) -> np.ndarray | None:
    """Bytes of each value: a string / binary one's from its offsets (nothing copied); a list's, map's or struct's the
    sum of its leaves' (a fixed-width leaf its width, a null's slot included); None for a layout Parquet does not hold
    (a union)."""
    t = a.type
    nested = _nested_sizes(a)
    if nested is not None:
        return nested
    if pa.types.is_string(t) or pa.types.is_binary(t):
        dtype = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        dtype = np.int64
    elif _view(t, "is_string_view") or _view(t, "is_binary_view"):  # 16-byte views, each starting with its length
        views = np.frombuffer(a.buffers()[1], dtype=np.int32, count=4 * (a.offset + len(a))).reshape(-1, 4)
        return views[a.offset:, 0].astype(np.int64)
    else:
        return None
    offsets = np.frombuffer(a.buffers()[1], dtype=dtype, count=a.offset + len(a) + 1)[a.offset:] if len(a) else []
    return np.diff(offsets).astype(np.int64)


def _nested_sizes(a) -> np.ndarray | None:
    """_value_sizes of a list, large list, map, fixed-size list, struct or dictionary array (a leaf of a nested one);
    None for other layouts."""
    t = a.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        leaves = _value_sizes(a.values)  # the whole child: the offsets below are the array's own (slice included)
        if leaves is None:
            return None
        total = np.concatenate([[0], np.cumsum(leaves)])
        offsets = a.offsets.to_numpy()
        return total[offsets[1:]] - total[offsets[:-1]]
    if pa.types.is_fixed_size_list(t):
        leaves = _value_sizes(a.values)  # the whole child: sliced here by the array's offset
        n = t.list_size
        return None if leaves is None else leaves[a.offset * n:(a.offset + len(a)) * n].reshape(len(a), n).sum(axis=1)
    if pa.types.is_struct(t):
        fields = [_value_sizes(a.field(i)) for i in range(t.num_fields)]  # (field() is sliced as the struct is)
        return None if any(f is None for f in fields) else sum(fields, np.zeros(len(a), np.int64))
    if pa.types.is_dictionary(t):
        values = _value_sizes(a.dictionary)
        if values is None:
            return None
        if not len(values):
            return np.zeros(len(a), np.int64)
        valid = _valid(a.indices)  # (a null's index slot holds any value: read as 0, its size 0)
        return np.where(valid, values[np.where(valid, _raw(a.indices), 0)], 0)
    if isinstance(t, pa.ExtensionType):
        return _value_sizes(a.storage)
    if pa.types.is_null(t):
        return np.zeros(len(a), np.int64)
    try:
        width = max(1, t.bit_width // 8)  # a boolean is a bit: counted as a byte
    except ValueError:
        return None  # not fixed width (strings, binary: _value_sizes' own)
    return np.full(len(a), width, np.int64)


def _raw(a) -> np.ndarray:
    """An integer array's values as stored (a null's slot holds any value)."""
    return np.frombuffer(a.buffers()[1], dtype=a.type.to_pandas_dtype(), count=a.offset + len(a))[a.offset:]


def _valid(a) -> np.ndarray:
    """An array's validity as booleans."""
    bitmap = a.buffers()[0]
    if bitmap is None or a.null_count == 0:
        return np.ones(len(a), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[a.offset:a.offset + len(a)].astype(bool)


def _with_valid(a, valid: np.ndarray):
    """The array with this validity, its other buffers shared."""
    bitmap = np.zeros(a.offset + len(a), dtype=bool)
    bitmap[a.offset:] = valid
    return pa.Array.from_buffers(a.type, len(a), [pa.py_buffer(np.packbits(bitmap, bitorder="little")), *a.buffers()[1:]],
                                 null_count=int(len(a) - valid.sum()), offset=a.offset)


def _pylist(col) -> tuple[list, dict[int, int]]:
    """A column's values as Python objects, and the string cells that are not UTF-8 (a writer that did not check
    them; pyarrow's to_pylist raises on the first): position -> the byte where UTF-8 stops; those stay bytes, for the
    caller to reject."""
    try:
        return python_values(col), {}  # (a date past year 9999, a time64[ns]: the integers Arrow stores)
    except UnicodeDecodeError:
        if isinstance(col, pa.ChunkedArray):  # a partition's Table (Dask) holds chunked columns
            col = col.combine_chunks()
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        raw = col.cast(pa.large_binary()).to_pylist()
        values, bad = [], {}
        for k, v in enumerate(raw):
            try:
                values.append(None if v is None else v.decode("utf-8"))
            except UnicodeDecodeError as e:
                values.append(v)
                bad[k] = e.start
        return values, bad


def _binary_utf8(b: RawBatch) -> None:
    """Invalid UTF-8 in a binary Parquet column: a bad row whose reason says --encoding does not apply."""
    for values, what in ((b.texts, "text"), (b.pairs, "pair text")):
        for k, v in enumerate(values or ()):
            if isinstance(v, (bytes, bytearray)) and b.rows[k] not in b.pre_rejected:
                at = utf8_error_at(bytes(v))
                if at >= 0:
                    b.pre_rejected[b.rows[k]] = Reason(RejectCode.BINARY_COLUMN,
                                                       f"invalid UTF-8 at byte {at} of the {what} (a binary Parquet column)")


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


def _columns_differ(name: str, names: list[str], first: str, first_names: list[str]) -> InputError:
    """A dataset file whose columns are not the first file's: which it lacks, which it adds, or that only their order
    differs (a file's columns are read by their place in it)."""
    have, want = set(names), set(first_names)
    lacks, adds = [c for c in first_names if c not in have], [c for c in names if c not in want]
    if lacks or adds:
        what = "; ".join(w for w in (f"it lacks {listing(lacks)}" if lacks else "",
                                     f"it adds {listing(adds)}" if adds else "") if w)
        return InputError(f"{name}: its columns differ from {first}'s ({what})",
                          "a Parquet dataset needs the same columns in every file: write them with one schema, or "
                          "read the files apart")
    return InputError(f"{name}: its columns are in another order than {first}'s ({listing(names)}; there: "
                      f"{listing(first_names)})", "a Parquet dataset needs its columns in one order in every file: write "
                      "each file's columns in the first file's order (e.g. table.select(names) in pyarrow)")
