"""The unit of work both engines share: a chunk of input rows -> validated texts -> tokens -> a features table.

A *chunk* is ``chunk_rows`` consecutive input rows (by 0-based data-row number). ``iter_chunks`` cuts a
reader's batches into chunks (the local engine), ``validate_batch`` splits a chunk's rows into accepted texts and
rejects (rejects.py; a text's rule: textcheck.py), ``prepare_chunk`` tokenizes (an over-long row under
``long_text='error'``, a row with a token past the model's embedding table, and one with no token at all, is a bad
row),
``chunk_table`` runs the model. ``encode_chunk`` is all three, the call a Dask partition task makes per chunk.

Kept columns (``keep``) ride along: a chunk holds the accepted rows' kept values (``Chunk.extra``), a reject its
row's (``rejects.reject``), and the features table has them after its EXTRA_COLUMNS, in ``keep`` order, typed as the
reader decided (``Reader.keep_types``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..readers import RawBatch, Reader
from ..readers.kept import json_class, kept_array
from ..readers.rejects import Reason, RejectCode, bad_row_error, cell, no_tokens, reject, token_past_table, too_long
from ..readers.textcheck import text_reason

#: the columns of a features table besides the id and the embedding, with their Arrow types
EXTRA_COLUMNS = {"n_tokens": pa.int32(), "truncated": pa.bool_(), "n_chunks": pa.int32()}


# --------------------------------------------------------------------------- validation
def decode_cell(value, what: str) -> tuple[str | None, Reason | None]:
    """A raw cell -> (text, None) or (None, why it is rejected)."""
    if value is None:
        return None, Reason(RejectCode.NULL, f"null {what}")
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            return None, Reason(RejectCode.ENCODING, f"invalid UTF-8 at byte {e.start} of the {what}")
    if isinstance(value, float) and value != value:
        return None, Reason(RejectCode.NULL, f"null {what} (NaN)")
    if not isinstance(value, str):
        return None, Reason(RejectCode.NOT_STRING, f"non-string {what} ({kind(value)} {cell(value):.40})")  # true, JSON
    if not value:  # a missing value (a CSV cannot tell an empty cell from one), not a text
        return None, Reason(RejectCode.EMPTY, f"empty {what}")
    if not value.strip():
        return None, Reason(RejectCode.WHITESPACE, f"whitespace-only {what}")
    why = text_reason(value, what)  # the rule Encoder.encode and TextFeatures apply too
    return (None, why) if why else (value, None)


def kind(v) -> str:
    """A JSON-ish name of a value's type, for a reject's words."""
    return {bool: "boolean", int: "number", float: "number", dict: "object", list: "array"}.get(json_class(v),
                                                                                            type(v).__name__)


def id_value(v):
    """An id cell as written: bytes decoded when they are UTF-8, else kept (a binary Parquet id column: its bytes are
    the id; the text readers reject an id that is not UTF-8 before this)."""
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(v)
    return v


@dataclass
class Chunk:
    """Validated rows of one chunk, ready to tokenize."""

    index: int
    rows: list[int]  # accepted 0-based data-row numbers
    texts: list[str]
    pairs: list[str] | None
    ids: list | None
    rejects: list[dict]  # rejects.reject(...) dicts
    n_read: int  # input rows in the chunk, accepted or not
    bytes_read: int = 0
    extra: dict[str, list] | None = None  # kept column -> the accepted rows' values (None without keep)
    written: dict | None = None  # row -> kept values as the input wrote them, where extra's differ (RawBatch.written)

    def kept(self, i: int) -> dict | None:
        """The kept values of the chunk's i-th accepted row as the rejects file shows them (None without keep)."""
        if self.extra is None:
            return None
        return {c: v[i] for c, v in self.extra.items()} | (self.written or {}).get(self.rows[i], {})

    def select(self, keep: list[int]) -> None:
        """Keep only the accepted rows at these positions."""
        self.rows = [self.rows[i] for i in keep]
        self.texts = [self.texts[i] for i in keep]
        if self.pairs is not None: self.pairs = [self.pairs[i] for i in keep]
        if self.ids is not None: self.ids = [self.ids[i] for i in keep]
        if self.extra is not None: self.extra = {c: [v[i] for i in keep] for c, v in self.extra.items()}


def validate_batch(b: RawBatch, chunk_index: int) -> Chunk:
    """Split raw rows into accepted texts and rejects (row, id, reason, code)."""
    rows, texts, pairs, ids, rejects = [], [], [] if b.pairs is not None else None, [] if b.ids is not None else None, []
    extra = None if b.extra is None else {c: [] for c in b.extra}
    for k, row in enumerate(b.rows):
        ident = id_value(b.ids[k]) if b.ids is not None else None
        reason = b.pre_rejected.get(row)
        text = pair = None
        if reason is None:
            text, reason = decode_cell(b.texts[k], "text")
        if reason is None and b.pairs is not None:
            pair, reason = decode_cell(b.pairs[k], "pair text")
        if reason is None and b.ids is not None and ident is None:
            reason = Reason(RejectCode.NULL_ID, "null id")
        if reason is not None:
            rejects.append(reject(row, ident, reason, b.kept_written(k)))
            continue
        rows.append(row); texts.append(text)
        if pairs is not None: pairs.append(pair)
        if ids is not None: ids.append(ident)
        if extra is not None:
            for c, values in extra.items():
                values.append(b.extra[c][k])
    return Chunk(chunk_index, rows, texts, pairs, ids, rejects, len(b.rows), b.bytes_read, extra, b.written)


class Reservoir:
    """A uniform sample of at most ``k`` items of a stream (sweep, extract --estimate): each item draws a random key
    (``seed``), the ``k`` smallest keys are kept, memory stays ~2k items; ``items()`` in the order they came."""

    def __init__(self, k: int, seed: int):
        self.k = int(k)
        self._rng = np.random.default_rng(seed)
        self._keys: list[float] = []
        self._items: list = []
        self._seen = 0

    def add(self, items: list) -> None:
        draws = self._rng.random(len(items))
        for key, item in zip(draws.tolist(), items):
            self._keys.append(key)
            self._items.append((self._seen, item))
            self._seen += 1
        if len(self._items) > 2 * self.k:
            self._trim()

    def _trim(self) -> None:
        order = np.argsort(np.asarray(self._keys), kind="stable")[: self.k]
        self._keys, self._items = [self._keys[i] for i in order], [self._items[i] for i in order]

    def items(self) -> list:
        self._trim()
        return [item for _, item in sorted(self._items, key=lambda t: t[0])]


def iter_chunks(source: Reader, chunk_rows: int):
    """Re-cut the reader's batches into chunks of exactly chunk_rows input rows (the last may be short)."""
    buf: list[RawBatch] = []
    have = 0
    index = 0

    def cut(batches: list[RawBatch], n: int) -> tuple[RawBatch, list[RawBatch]]:
        taken: list[RawBatch] = []
        rest = []
        have = 0
        for b in batches:
            take = min(n - have, len(b.rows))
            if take <= 0:
                rest.append(b); continue
            taken.append(b.slice(0, take))
            have += take
            end = b.bytes_read
            if take < len(b.rows):  # the chunk ends inside this batch: its bytes pro rata (a smooth progress by bytes)
                end = b.bytes_start + (b.bytes_read - b.bytes_start) * take // len(b.rows)
                rest.append(b.slice(take, len(b.rows), b.bytes_read, end))
        raw = taken[0]
        for b in taken[1:]:
            raw.extend(b)
        raw.bytes_read, raw.bytes_start = end, batches[0].bytes_start
        return raw, rest

    for b in source.batches():
        buf.append(b)
        have += len(b.rows)
        while have >= chunk_rows:
            raw, buf = cut(buf, chunk_rows)
            have -= len(raw.rows)
            yield index, raw
            index += 1
    if have:
        raw, buf = cut(buf, have)
        yield index, raw


# --------------------------------------------------------------------------- one chunk
@dataclass
class PreparedChunk:
    chunk: Chunk
    prepared: object  # encoder.Prepared of the rows to encode (``todo``), or None when there are none
    reuse: object = None  # reuse.ChunkReuse: the rows taken from the cache or an identical row (None: no reuse)
    todo: list[int] | None = None  # positions (among the chunk's accepted rows) of the prepared rows, in order
    refused: dict | None = None  # position -> Reason of rows the Encoder refused (prepare_rows; under skip)
    row_label: object = None  # the reader's row -> ``FILE row N`` (a dataset's file and its row too), for messages


def prepare_rows(encoder, spec, texts: list[str], pairs: list[str] | None):
    """Tokenize rows, leaving out those the Encoder refuses (too long under long_text='error', a token past the
    model's embedding table, no token at all), each with its Reason: -> (encoder.Prepared of the rest or None, their positions,
    {refused position: Reason}). Every refused row is found, so that the first bad row is the lowest."""
    from ..model.inputs import LongTextError, NoTokensError, TokenPastTableError

    todo = list(range(len(texts)))
    refused: dict[int, Reason] = {}
    while todo:
        try:
            return encoder.prepare([texts[i] for i in todo], None if pairs is None else [pairs[i] for i in todo],
                                   spec), todo, refused
        except LongTextError as e:
            bad = {int(j): too_long(int(e.n_tokens[j]), spec.max_length, e.prompt_tokens) for j in e.rows.tolist()}
        except TokenPastTableError as e:
            bad = {j: token_past_table(t, i, e.table_rows) for j, (t, i) in zip(e.rows, e.tokens)}
        except NoTokensError as e:
            bad = dict.fromkeys(e.rows, no_tokens(pairs is not None))
        refused.update({todo[j]: why for j, why in bad.items()})
        todo = [p for j, p in enumerate(todo) if j not in bad]
    return None, todo, refused


def prepare_chunk(encoder, spec, chunk: Chunk, row_label, on_bad_row: str, reuser=None) -> PreparedChunk:
    """Look the chunk's rows up (``reuser``: reuse.Reuser, the cache and the run's earlier rows) and tokenize the
    rest, one row per distinct text; a row the Encoder refuses (over-long under long_text='error', a token past the
    embedding table, no token at all) is a bad row.

    Under ``on_bad_row='error'`` the first bad row of the chunk (lowest row number, whatever its reason) raises
    ``FILE row N: reason - fix`` (``row_label``: the reader's, row -> ``FILE row N``).
    """
    if on_bad_row == "error" and chunk.rejects and not encoder.refuses_rows(spec):
        raise bad_row_error(row_label, chunk.rejects[0])
    reuse = reuser.plan(chunk.texts, chunk.pairs) if reuser is not None and chunk.rows else None
    rows = list(range(len(chunk.rows))) if reuse is None else list(reuse.todo)
    prepared, kept, bad = prepare_rows(encoder, spec, [chunk.texts[i] for i in rows],
                                       None if chunk.pairs is None else [chunk.pairs[i] for i in rows])
    todo, refused = [rows[j] for j in kept], {rows[j]: why for j, why in bad.items()}
    if on_bad_row == "error" and (chunk.rejects or refused):
        first = sorted(chunk.rejects + [reject(chunk.rows[i], None if chunk.ids is None else chunk.ids[i], why, chunk.kept(i))
                                        for i, why in refused.items()], key=lambda r: r["row"])[0]
        raise bad_row_error(row_label, first)
    return PreparedChunk(chunk, prepared, reuse, todo, refused, row_label)


def chunk_table(encoder, spec, pc: PreparedChunk, id_name: str, keep_types: dict | None = None, reuser=None,
                id_type: pa.DataType | None = None) -> pa.Table:
    """Run the model on a prepared chunk's rows to encode, take the others' vectors (``reuser``), -> Arrow table: id,
    embedding, n_tokens, truncated, n_chunks, then the kept columns (``keep_types``: name -> Arrow type, the
    reader's ``keep_types()``). Rows refused as too long join the chunk's rejects. ``id_type``: the reader's
    ``id_type()`` (None: the ids' own)."""
    chunk, prep = pc.chunk, pc.prepared
    D = encoder.output_dim(spec)
    todo = pc.todo or []
    X = (run_rows(encoder, spec, prep, [chunk.rows[i] for i in todo], pc.row_label) if prep is not None
         else np.zeros((0, D), np.float32))
    encoded = {}
    if prep is not None:
        n_tok, trunc, n_ch = prep.n_tokens, prep.truncated, prep.n_chunks
        encoded = {p: (j, int(n_tok[j]), bool(trunc[j]), int(n_ch[j])) for j, p in enumerate(todo)}
    if pc.reuse is not None:
        entries, refused = reuser.settle(pc.reuse, encoded, X, pc.refused or {})
    else:
        entries = {p: (X[j], n, t, c) for p, (j, n, t, c) in encoded.items()}
        refused = dict(pc.refused or {})
    if refused:
        chunk.rejects += [reject(chunk.rows[i], None if chunk.ids is None else chunk.ids[i], why, chunk.kept(i))
                          for i, why in refused.items()]
        chunk.rejects.sort(key=lambda r: r["row"])
    order = sorted(entries)
    if len(order) != len(chunk.rows):
        chunk.select(order)
    if order:
        X = np.stack([entries[i][0] for i in order]).astype(np.float32, copy=False)
    else:
        X = np.zeros((0, D), dtype=np.float32)
    n_tok = np.fromiter((entries[i][1] for i in order), np.int32, len(order))
    trunc = np.fromiter((entries[i][2] for i in order), bool, len(order))
    n_ch = np.fromiter((entries[i][3] for i in order), np.int32, len(order))
    ids = pa.array(chunk.rows, pa.int64()) if chunk.ids is None else id_array(chunk.ids, id_type)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1), pa.float32()), D)
    columns = {id_name: ids, "embedding": emb, "n_tokens": pa.array(n_tok), "truncated": pa.array(trunc),
               "n_chunks": pa.array(n_ch)}
    for c, typ in (keep_types or {}).items():
        columns[c] = kept_array(chunk.extra[c], typ)
    return pa.table(columns)


def id_array(ids: list, id_type: pa.DataType | None = None) -> pa.Array:
    """A chunk's ids as an array of ``id_type`` (the input's: Arrow's guess from Python objects drops a timestamp's
    nanoseconds), else as Arrow infers them; integers beyond int64 (a Parquet uint64 id column) as uint64."""
    if id_type is not None:
        try:
            return pa.array(ids, id_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass  # (Arrow's guess, which the writer casts to the id type)
    try:
        return pa.array(ids)
    except OverflowError:
        return pa.array(ids, pa.uint64())


def run_rows(encoder, spec, prep, rows: list[int], row_label=None) -> np.ndarray:
    """encoder.run; features that come out NaN or infinite are refused naming the input rows (``named_rows``)."""
    with named_rows(rows, row_label):
        return encoder.run(prep, spec)


@contextmanager
def named_rows(rows: list[int], row_label=None):
    """A NonFiniteFeaturesError inside names the input rows, not positions among the texts encoded: position i is
    input row ``rows[i]``, shown by ``row_label`` (the reader's: ``FILE row N``, a dataset's file and its row there
    too; None: ``row N``)."""
    from ..model.inputs import NonFiniteFeaturesError

    try:
        yield
    except NonFiniteFeaturesError as e:
        raise NonFiniteFeaturesError.at([rows[i] for i in e.rows], row_label or (lambda r: f"row {r}")) from None


def encode_chunk(encoder, spec, chunk: Chunk, row_label, on_bad_row: str, id_name: str,
                 keep_types: dict | None = None, reuser=None, id_type: pa.DataType | None = None
                 ) -> tuple[pa.Table, list[dict]]:
    """One chunk end to end (the call a Dask partition task makes): -> (features table, rejects)."""
    pc = prepare_chunk(encoder, spec, chunk, row_label, on_bad_row, reuser)
    return chunk_table(encoder, spec, pc, id_name, keep_types, reuser, id_type), pc.chunk.rejects


def table_counts(t: pa.Table, max_length: int) -> dict:
    """A feature table's counts, on both engines: rows written, truncated and chunked, tokens and dropped tokens."""
    n_tok = t.column("n_tokens").to_numpy()
    trunc = t.column("truncated").to_numpy(zero_copy_only=False)
    return {"rows_written": t.num_rows, "rows_truncated": int(trunc.sum()),
            "rows_chunked": int((t.column("n_chunks").to_numpy() > 1).sum()), "tokens": int(n_tok.sum()),
            "tokens_dropped": int(np.maximum(n_tok[trunc] - max_length, 0).sum())}


def feature_matrix(t: pa.Table) -> np.ndarray:
    """The embedding column of a feature table -> (m, D) float32."""
    col = t.column("embedding").combine_chunks()
    D = col.type.list_size
    return col.values.to_numpy(zero_copy_only=False).reshape(-1, D)


def extra_columns(t: pa.Table, keep=()) -> dict:
    """A features table's extra columns as NumPy arrays, and its kept columns (``keep``) as Arrow arrays: what a
    feature writer takes beside ids and vectors."""
    return {"n_tokens": t.column("n_tokens").to_numpy(), "truncated": t.column("truncated").to_numpy(zero_copy_only=False),
            "n_chunks": t.column("n_chunks").to_numpy(), **{c: t.column(c).combine_chunks() for c in keep}}


def output_columns(keep_types: dict | None = None) -> dict:
    """The extra columns a feature writer declares (``extra_columns=``): EXTRA_COLUMNS, then the kept columns."""
    return {**EXTRA_COLUMNS, **(keep_types or {})}
