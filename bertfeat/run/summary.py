"""What a run did: ``ExtractSummary`` (its counts, timing, outputs; ``bertfeat.extract`` returns it and
``to_dict`` is ``--summary-json``), ``new_summary`` (an engine's summary before any row), ``gemm_record`` (the GEMM
path as the summary and the provenance record it), ``RepeatedIds`` (ids written on more than one row: either
engine's warning and ``ids_repeated``) and ``RespelledNumbers`` (JSONL numbers a kept column writes in other digits:
the warning and ``numbers_respelled``).

A unit of work (a local chunk, a Dask partition) yields its counts (chunks.table_counts); the job adds them with
``ExtractSummary.add``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


COUNT_KEYS = ("rows_written", "rows_truncated", "rows_chunked", "tokens", "tokens_dropped")
REUSE_KEYS = ("rows_encoded", "rows_reused", "tokens_encoded")


@dataclass
class ExtractSummary:
    """What a run did: its counts, timing and outputs (name -> path); ``bertfeat.extract`` returns it.
    ``to_dict`` is the JSON of ``extract --summary-json`` (its keys: docs/cli.md)."""

    rows_read: int = 0
    rows_written: int = 0
    rows_rejected: int = 0
    rows_truncated: int = 0
    rows_chunked: int = 0
    rows_multiline: int = 0  # CSV rows whose quoted fields span lines
    tokens: int = 0  # tokens of accepted rows before truncation
    tokens_dropped: int = 0
    rows_encoded: int = 0  # distinct texts that went through the model in this run
    rows_reused: int = 0  # rows whose vector came from the cache or from an identical earlier row of the run
    tokens_encoded: int = 0  # tokens (before truncation) of the rows encoded
    cache: str | None = None  # the vector cache directory (None: no cache)
    cache_repaired: int = 0  # cache entries that failed their checksum: encoded again and rewritten
    cache_read_only: str | None = None  # why the cache could not be written (its hits were used, nothing stored)
    elapsed: float = 0.0
    chunks_resumed: int = 0  # the units kept from an interrupted run (--resume): local chunks, or Dask partitions
    rows_resumed: int = 0  # rows written by the chunks kept from an interrupted run (--resume): not this run's work
    tokens_resumed: int = 0
    rows_encoded_resumed: int = 0  # of rows_encoded / tokens_encoded: the kept chunks' (encoded by the interrupted run)
    tokens_encoded_resumed: int = 0
    outputs: dict = field(default_factory=dict)
    dim: int = 0  # features per row before any PCA (the model's embedding width; with pca the file holds fewer)
    pooling: str = ""
    model: str = ""
    engine: str = "local"
    text_column: str = ""  # the input column encoded
    text_column_auto_detected: bool = False  # chosen by bertfeat (no text_column given): a renamed column shows here
    precision: str = ""
    gemm: dict = field(default_factory=dict)  # the GEMM path, as the provenance records it (gemm_record)
    probe: dict | None = None  # with label: the PCA report's linear probe (probe.py)
    ids_repeated: int | None = None  # ids written on more than one row (RepeatedIds); None: not checked
    numbers_respelled: dict = field(default_factory=dict)  # JSONL kept column -> numbers written in other digits

    def add(self, counts: dict):
        """Add a unit of work's counts (table_counts keys, plus rows_read when given)."""
        for k in ("rows_read", *COUNT_KEYS, *REUSE_KEYS):
            if k in counts:
                setattr(self, k, getattr(self, k) + int(counts[k]))

    def add_resumed(self, counts: dict):
        """A kept chunk's counts (added with ``add`` too): its rows and tokens are left out of this run's throughput."""
        self.rows_resumed += int(counts.get("rows_written", 0))
        self.tokens_resumed += int(counts.get("tokens", 0))
        self.rows_encoded_resumed += int(counts.get("rows_encoded", 0))
        self.tokens_encoded_resumed += int(counts.get("tokens_encoded", 0))

    @property
    def rows_per_s(self) -> float:
        """The encode throughput: rows this run put through the model per second (reused rows and a resumed run's
        kept chunks left out)."""
        return (self.rows_encoded - self.rows_encoded_resumed) / self.elapsed if self.elapsed else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens this run put through the model per second (as ``rows_per_s``)."""
        return (self.tokens_encoded - self.tokens_encoded_resumed) / self.elapsed if self.elapsed else 0.0

    def cache_notes(self) -> list[str]:
        """What a run says once about its cache, on both engines (progress notes): damaged entries encoded again (and
        rewritten, unless the cache is read-only), and a cache it could not write."""
        from ..cache.store import read_only_note

        notes = []
        if self.cache is not None and self.cache_repaired:
            notes.append(f"the cache {self.cache} had {self.cache_repaired} damaged entr"
                         f"{'y' if self.cache_repaired == 1 else 'ies'} (checksum mismatch): encoded again"
                         + (" and rewritten" if self.cache_read_only is None else ""))
        if self.cache is not None and self.cache_read_only is not None:
            notes.append(read_only_note(self.cache, self.cache_read_only, self.rows_encoded - self.rows_encoded_resumed))
        return notes

    def to_dict(self) -> dict:
        d = {k: v for k, v in vars(self).items()}
        d["outputs"] = {k: str(v) for k, v in self.outputs.items()}
        d["rows_per_s"] = round(self.rows_per_s, 2)
        d["tokens_per_s"] = round(self.tokens_per_s, 2)
        return d


class RepeatedIds:
    """The ids of ``id_column`` a run wrote on more than one row: users join the features back by id, and a repeated
    id matches each of its rows. Every row is still written; the run warns (``warning``). Ids are compared as the
    output holds them, by Arrow (CSV ids are text: '010' and '10' are two ids; a date or time past Python's range by
    its value). Holds the written ids as Arrow arrays and their rows as int64 until the run ends, then sorts them
    once: 1 million ids like 'doc-00000001' hold 24 MB, ~80 MB at the sort (a dict of their Python objects: 124 MB)."""

    def __init__(self):
        self._ids: list = []  # Arrow arrays, a unit's written ids each
        self._rows: list = []  # their 0-based input rows, units in row order
        self._found: tuple | None = None  # (count, first) once computed

    def add(self, ids, rows: list[int]) -> None:
        """A unit's written ids (an Arrow array or chunked array) and their 0-based input rows, units in row order."""
        import numpy as np
        import pyarrow as pa

        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        if not len(ids):  # no row written (all rejected): nothing to compare, and no type where the reader has
            return  # none to give (standard input whose first lines hold no id: Arrow's null type)
        self._ids.append(ids.dictionary_decode() if pa.types.is_dictionary(ids.type) else ids)
        self._rows.append(np.asarray(rows, np.int64))
        self._found = None

    @property
    def count(self) -> int:
        """Distinct ids on more than one row."""
        return self._repeats()[0]

    @property
    def first(self) -> tuple | None:
        """The first repeat in row order: (id, its first row, the row repeating it), or None."""
        return self._repeats()[1]

    def _repeats(self) -> tuple[int, tuple | None]:
        if self._found is None:
            self._found = _repeats(self._ids, self._rows)
        return self._found

    def report(self, summary: "ExtractSummary", source: str, column: str) -> None:
        """Into ``summary.ids_repeated``, and one ``BertfeatWarning`` when an id repeats (the CLI's ``Warning:`` line),
        after the outputs are complete (either engine)."""
        from ..errors import warn

        summary.ids_repeated = self.count
        words = self.warning(source, column)
        if words is not None:
            warn(words)  # every run that repeats an id says so, even in words a run before it said

    def warning(self, source: str, column: str) -> str | None:
        """The warning's words (None: every id is on one row), e.g. ``in.csv: the id column 'id' repeats 2 ids ...``."""
        if self.first is None:
            return None
        ident, a, b = self.first
        shown = _shown_id(ident)
        return (f"{source}: the id column '{column}' repeats {self.count:,} id{'s' * (self.count != 1)} (the first, "
                f"{shown}, on rows {a} and {b}); every row is written, so a join on '{column}' matches each of them")


class RespelledNumbers:
    """JSON numbers of a kept JSONL column whose type the file's first lines decided, written back in other digits
    than the line's (``1E5`` as 100000, ``2.50`` as 2.5, ``1.0`` as 1): the same numbers, not the same text, so the run
    says so (the input's own text: ``--keep k:str``). Each engine adds its accepted rows' (``add``, a Dask partition's
    ``tally`` in its result), then ``report`` warns once per column after the outputs are complete."""

    def __init__(self, tally: dict | None = None):
        self.tally: dict[str, list] = {c: list(v) for c, v in (tally or {}).items()}  # column -> [count, row, text, as]

    def add(self, chunk, reader) -> None:
        """A validated chunk's accepted rows (``chunk.written``: the values the input wrote otherwise)."""
        if reader.fmt != "jsonl" or not chunk.written or chunk.extra is None:
            return
        import pyarrow as pa

        at = {row: i for i, row in enumerate(chunk.rows)}
        seen: dict[str, list] = {}  # column -> (row, the line's text, the value) of its accepted rows
        for row, cells in chunk.written.items():
            if row in at:  # (a bad row: the rejects file shows its values as written)
                for c, text in cells.items():
                    if c not in reader.keep_as:  # a type given (k:float) reads each number as one, as asked
                        seen.setdefault(c, []).append((row, text, chunk.extra[c][at[row]]))
        for c, cells in seen.items():
            typ = reader.keep_types().get(c)
            if typ is None or not (pa.types.is_floating(typ) or pa.types.is_integer(typ)):
                continue
            shown = pa.array([v for _, _, v in cells], typ).cast(pa.string()).to_pylist()  # as the output writes them
            for (row, text, _), back in zip(cells, shown):
                if back != text:
                    self.merge({c: [1, row, text, back]})

    def merge(self, tally: dict) -> None:
        for c, (n, row, text, shown) in tally.items():
            have = self.tally.get(c)
            if have is None or row < have[1]:
                self.tally[c] = [n + (have[0] if have else 0), row, text, shown]
            else:
                have[0] += n

    def report(self, summary: "ExtractSummary", reader) -> None:
        """Into ``summary.numbers_respelled``, and one ``BertfeatWarning`` per column (the CLI's ``Warning:`` line), whose
        fix is the run's whole ``keep`` with that column given ``str``."""
        from ..errors import warn
        from ..readers.kept import keep_option

        summary.numbers_respelled = {c: v[0] for c, v in sorted(self.tally.items())}
        for c, (n, row, text, shown) in sorted(self.tally.items()):
            fix = keep_option([(k, "str" if k == c else reader.keep_as.get(k)) for k in reader.keep])
            warn(f"{reader.name}: kept column {c!r} holds {n:,} JSON number{'s' * (n != 1)} written in other digits "
                 f"than the line's (the first, {text} on row {row}, as {shown}): the same number{'s' * (n != 1)}, not "
                 f"the same text; give {fix} to keep the text")


def _repeats(arrays: list, rows: list) -> tuple[int, tuple | None]:
    """(distinct ids on more than one row, the first repeat in row order) of ids with their rows: one stable sort by
    id, then neighbours compared. Ids Arrow cannot sort (lists, structs) as Python objects in a dict."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..readers.kept import python_values

    if sum(map(len, arrays)) < 2:  # (a run whose rows were all rejected writes none)
        return 0, None
    typ = arrays[0].type  # the output's id type, to which its writer casts every unit's ids
    ids = pa.chunked_array([a if a.type == typ else a.cast(typ) for a in arrays], typ).combine_chunks()
    at = np.concatenate(rows)
    if pa.types.is_float16(typ):  # Arrow sorts no float16: as the float32 each widens to exactly (else, as Python
        ids = ids.cast(pa.float32())  # floats in a dict, two NaN ids were two ids and 0.1 showed as 0.0999755859375)
    if pa.types.is_nested(typ):  # (Arrow sorts no list, and raises ArrowInvalid for a struct)
        return _repeats_in_python(python_values(ids), at)
    try:
        order = pc.sort_indices(ids).to_numpy()  # stable: equal ids stay in row order
    except pa.ArrowNotImplementedError:
        return _repeats_in_python(python_values(ids), at)
    ids, at = ids.take(order), at[order]
    same = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1)).fill_null(False).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(typ):  # NaN != NaN, but a join matches NaN ids (pandas, Polars); sorted together
        nan = pc.is_nan(ids).fill_null(False).to_numpy(zero_copy_only=False)
        same = same | (nan[1:] & nan[:-1])
    if not same.any():
        return 0, None
    starts = same & ~np.concatenate([[False], same[:-1]])  # a repeated id's second row, in sorted order
    # the earliest row that repeats an id is that id's second: the row before it in the sort is the id's first
    i = int(np.argmin(np.where(same, at[1:], np.iinfo(np.int64).max)))
    # shown as the first row holds it (0.0 and -0.0 are one id); a float16 / float32 as its own shortest text (0.1,
    # not the double it widens to, 0.10000000149011612), as the rejects file shows it
    shown = python_values(ids.slice(i, 1))[0]
    if pa.types.is_float16(typ) or pa.types.is_float32(typ):
        shown = (np.float16 if pa.types.is_float16(typ) else np.float32)(shown)
    return int(starts.sum()), (shown, int(at[i]), int(at[i + 1]))


def _repeats_in_python(values: list, rows) -> tuple[int, tuple | None]:
    """_repeats for ids Arrow cannot sort: a dict of their Python objects (an unhashable one by its repr)."""
    seen: dict = {}
    count, first = 0, None
    for ident, row in zip(values, rows.tolist()):
        key = _hashable(ident)
        was = seen.get(key)
        if was is None:
            seen[key] = row
        elif was >= 0:  # its first repeat
            count += 1
            first = first or (ident, was, row)
            seen[key] = -1
    return count, first


def _hashable(ident):
    """An id as a dict key: a struct or list id (a dict, a list) by its repr."""
    try:
        hash(ident)
    except TypeError:
        return ("unhashable", repr(ident))
    return ident


def _shown_id(ident, limit: int = 40) -> str:
    """An id in a warning: a string quoted, anything else as str; at most ``limit`` characters."""
    from ..readers.rejects import bytes_text

    text = bytes_text(ident) if isinstance(ident, (bytes, bytearray)) else str(ident)
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"'{text}'" if isinstance(ident, (str, bytes, bytearray)) else text


def new_summary(plan, encoder, spec, engine: str, **counts) -> ExtractSummary:
    """An engine's summary before any row: the model, its features and GEMM path, the engine, the text column (and
whether it was detected), the cache."""
    return ExtractSummary(pooling=spec.pooling, model=encoder.model_id, dim=encoder.output_dim(spec), engine=engine,
                          text_column=plan.reader.text_column, text_column_auto_detected=plan.options.text_column is None,
                          precision=encoder.precision, gemm=gemm_record(encoder),
                          cache=None if plan.cache is None else str(plan.cache), **counts)


def gemm_record(encoder) -> dict:
    """The GEMM path in provenance (with NumPy's BLAS and the element-wise kernels: cache.store.gemm_identity); int8 adds which sequences multiply by the weights' two levels (~15 bits), how
    many top channels per row are taken out of the quantization, how many outlier weight rows stay float32 per kind
    of layer and which layers' inputs are smoothed (quant.py)."""
    from ..cache.store import gemm_identity

    d = encoder.gemm_path.to_dict()
    d.update({k: v for k, v in gemm_identity(encoder).items() if k in ("blas", "kernels", "post_ops", "attention")})  # they round too
    if encoder.precision == "int8":
        from ..ops.quant import SHORT_TOKENS, TOP, float_rows, smoothed_kinds

        d["two_level_sequences"] = f"<= {SHORT_TOKENS} tokens, or <= {SHORT_TOKENS} distinct ones"  # (scheme 5's key)
        d["top_channels_per_row"] = TOP
        d["float_weight_rows"] = float_rows(encoder.weights)
        d["smoothed_inputs"] = smoothed_kinds(encoder.weights)
    return d
