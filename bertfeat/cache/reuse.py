"""Only new work: each row's vector is taken from the cache (store.py) or from an identical earlier row of the same
run when it can be, and only the rest go through the model. Both engines use it per chunk (chunks.py).

Two steps per chunk, so the lookups run in the read-ahead thread while the model encodes the previous chunk:

    plan(texts, pairs)   -> ChunkReuse   keys; rows found in the cache or in the run's store; duplicates of rows not
                                         encoded yet ("later"); the rows to encode ("todo": one per distinct text)
    settle(reuse, ...)   -> the chunk's vectors and counts in row order, after the model ran on the todo rows;
                            the new vectors go to the run's store and to the cache

A row is also found under the fingerprint of another name of the same prompt (``--prompt-name query`` and ``--prompt
"query: "``), and a row within max length under that of another long-text policy, stride or max length (a row within
both max lengths: its vector is the same bits under each: store.within_max_length), so changing ``--long-text`` or
``--max-length`` encodes only the rows longer than one of them.

Without a cache, the run's store (``RunStore``) keeps the vectors of this run's rows by key so a text seen again is
not encoded again: in memory up to ``DEDUP_MEMORY`` bytes (the BERTFEAT_DEDUP_MEMORY environment variable), then in
a temporary SQLite file (``spill_dir``: the run's partial directory beside the output), deleted at the end. With a
cache, the cache is that store (a duplicate's vector is read back from it), so a run's memory does not grow with
its corpus either way. A read-only cache (``VectorStore.read_only``) is read, and the run's store keeps the run's
own vectors beside it (on the Dask engine, the store its tasks share: ``SharedRunStore``).
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .store import VectorStore, text_key

DEDUP_MEMORY = 64 << 20  # bytes of vectors a run without a cache keeps in memory for its duplicates before spilling
ENTRY_OVERHEAD = 200  # bytes per in-memory entry besides the vector (dict slot, key, array header)


def dedup_memory() -> int:
    """Bytes of vectors the run's store keeps in memory: BERTFEAT_DEDUP_MEMORY, a whole number of bytes (unset or
    empty: DEDUP_MEMORY). A value it cannot be is refused naming it: it ran with the default, without a word."""
    text = os.environ.get("BERTFEAT_DEDUP_MEMORY", "").strip()
    if not text:
        return DEDUP_MEMORY
    if not (text.isascii() and text.isdigit()):  # (int() would take "-5", "1_000" and other scripts' digits)
        from ..errors import BertfeatError

        raise BertfeatError(f"BERTFEAT_DEDUP_MEMORY={text!r} is not a number of bytes",
                            f"give a whole number of bytes, e.g. BERTFEAT_DEDUP_MEMORY={DEDUP_MEMORY} (64 MiB, the "
                            "default; 0 keeps none in memory), or unset it")
    return int(text)


Entry = tuple  # (vector (D,) float32, n_tokens, truncated, n_chunks)


@dataclass
class ChunkReuse:
    """What a chunk takes from elsewhere, by position among its accepted rows."""

    keys: list[bytes]
    known: dict[int, Entry] = field(default_factory=dict)  # found in the cache or the run's store
    later: dict[int, bytes] = field(default_factory=dict)  # a duplicate of a row being encoded (this chunk or one before)
    todo: list[int] = field(default_factory=list)  # rows to encode: the first of each distinct text not found
    waits: set[bytes] = field(default_factory=set)  # keys of ``later`` rows being encoded by an earlier chunk


class RunStore:
    """This run's vectors by key: memory first, then a temporary SQLite file once the memory budget is spent."""

    def __init__(self, dim: int, spill_dir: Path | None, budget: int | None = None):
        self.dim = dim
        self.spill_dir = spill_dir
        self.budget = dedup_memory() if budget is None else budget
        self.mem: dict[bytes, Entry] = {}
        self.used = 0
        self.spill: VectorStore | None = None
        self._spill_id = 0

    def get(self, keys: list[bytes]) -> dict[bytes, Entry]:
        out = {k: self.mem[k] for k in keys if k in self.mem}
        if self.spill is not None:
            rest = [k for k in keys if k not in out]
            if rest:
                out.update(self.spill.get(self._spill_id, rest))
        return out

    def put(self, keys: list[bytes], X: np.ndarray, n_tokens, truncated, n_chunks) -> None:
        per = self.dim * 4 + ENTRY_OVERHEAD
        if self.spill_dir is None:  # nowhere to spill: all in memory
            room = len(keys)
        else:
            room = max(0, (self.budget - self.used) // per) if self.spill is None else 0
        for i, k in enumerate(keys[:room]):
            self.mem[k] = (X[i].copy(), int(n_tokens[i]), bool(truncated[i]), int(n_chunks[i]))
        self.used += per * min(room, len(keys))
        if len(keys) > room:
            if self.spill is None:
                self.spill = VectorStore(Path(self.spill_dir) / f".dedup-{os.getpid()}-{uuid.uuid4().hex[:8]}.sqlite3", durable=False)
                self._spill_id = self.spill.register("run", "run", self.dim, {})
            self.spill.put(self._spill_id, keys[room:], X[room:], n_tokens[room:], truncated[room:], n_chunks[room:])

    def close(self) -> None:
        self.mem.clear()
        if self.spill is not None:
            self.spill.close()
            self.spill = None


class SharedRunStore:
    """The run's vectors in a store its processes share (the Dask engine's ``OUTPUT.partial/.dedup/``), as RunStore:
    what a task encodes, the other partitions find."""

    def __init__(self, store: VectorStore, fid: int):
        self.store, self.fid = store, fid

    def get(self, keys: list[bytes]) -> dict[bytes, Entry]:
        return self.store.get(self.fid, keys)

    def put(self, keys: list[bytes], X: np.ndarray, n_tokens, truncated, n_chunks) -> None:
        self.store.put(self.fid, keys, X, n_tokens, truncated, n_chunks)

    def close(self) -> None:
        self.store.close()


class Reuser:
    """One run's reuse of vectors: the cache (``cache``, a VectorStore, with this run's fingerprint id ``fid``) and
    the run's own earlier rows (in the cache when there is one, else in a RunStore). ``encoded`` / ``reused`` count
    rows as the summary reports them."""

    def __init__(self, dim: int, cache: VectorStore | None = None, fid: int | None = None, spill_dir: Path | None = None,
                 budget: int | None = None, shared: tuple[VectorStore, int] | None = None,
                 siblings: list[tuple[int, int | None]] = ()):
        self.cache, self.fid = cache, fid
        # the cache's fingerprints of this run's settings under another prompt name (every row), long-text policy,
        # stride or max length (the rows within both max lengths): their vectors are this run's too
        # (VectorStore.siblings); those that served one are touched
        self.siblings, self.siblings_used = list(siblings), set()
        # the run's own vectors: in the cache, or (no cache, or one this process may not write) in a store of the run's:
        # ``shared`` (a store and its id) when the run's processes share one, else this process's own
        self.store = None
        if cache is None or cache.read_only is not None:
            self.store = SharedRunStore(*shared) if shared is not None else RunStore(dim, spill_dir, budget)
        self.pending: dict[bytes, int] = {}  # keys being encoded (chunks planned, not settled) -> how many chunks
        self.rejected: dict[bytes, object] = {}  # keys whose first row was refused (too long): its duplicates too
        # a key an earlier chunk is encoding that later chunks wait for -> how many chunks; its vector is held here
        # from the encoding chunk's settle until theirs, not only in the cache (which `cache clear` may empty)
        self.waiting: dict[bytes, int] = {}
        self.held: dict[bytes, Entry] = {}
        self._lock = threading.Lock()
        self.encoded = self.reused = 0
        self.tokens_encoded = 0  # tokens of the encoded rows (before truncation): the run's encode throughput

    @property
    def read_only(self) -> str | None:
        """Why the cache could not be written (its hits were used, nothing was stored), or None."""
        return self.cache.read_only if self.cache is not None else None

    @property
    def corrupt(self) -> int:
        """Cache entries that failed their checksum (encoded again and rewritten)."""
        return self.cache.corrupt if self.cache is not None else 0

    def _lookup(self, keys: list[bytes]) -> dict[bytes, Entry]:
        """Entries of these keys in the run's store or the cache (the cache is read outside the Reuser's lock)."""
        if not keys:
            return {}
        keys = list(dict.fromkeys(keys))
        found = {}
        if self.cache is not None:
            with self.cache.guard("read"):  # any failure of the cache (an OSError too) is named as the cache's
                found = self.cache.get_reusable(self.fid, self.siblings, keys, self.siblings_used)
        if self.store is not None and len(found) < len(keys):
            with self._lock:
                found.update(self.store.get([k for k in keys if k not in found]))
        return found

    def plan(self, texts: list[str], pairs: list[str] | None) -> ChunkReuse:
        """Look a chunk's rows up (the read-ahead thread): -> which rows are known, which wait for an identical row
        being encoded, which to encode."""
        keys = [text_key(t, None if pairs is None else pairs[i]) for i, t in enumerate(texts)]
        r = ChunkReuse(keys)
        with self._lock:
            ask = [i for i, k in enumerate(keys) if k not in self.pending and k not in self.rejected]
            r.waits = {k for k in keys if k in self.pending}
            for k in r.waits:
                self.waiting[k] = self.waiting.get(k, 0) + 1
        # only this thread adds pending keys, so a key not pending now is not pending after the lookup either
        found = self._lookup([keys[i] for i in ask])
        with self._lock:
            asked = set(ask)
            first: set[bytes] = set()
            for i, k in enumerate(keys):
                if i not in asked:
                    r.later[i] = k
                elif k in found:
                    r.known[i] = found[k]
                elif k in first:
                    r.later[i] = k
                else:
                    first.add(k)
                    r.todo.append(i)
            for k in first:
                self.pending[k] = self.pending.get(k, 0) + 1
        return r

    def settle(self, r: ChunkReuse, encoded: dict[int, Entry], X: np.ndarray | None, refused: dict[int, object]):
        """The chunk's rows after the model ran on ``r.todo``: ``encoded`` position -> (row of X, n_tokens,
        truncated, n_chunks) for the todo rows that were encoded, ``refused`` position -> reason for those refused
        (too long). Stores the new vectors (the cache, else the run store). -> (entries by position, refused by
        position): every accepted position is in one of the two."""
        new = [i for i in r.todo if i in encoded]
        out: dict[int, Entry] = dict(r.known)
        for i in new:
            row, nt_i, tr_i, nc_i = encoded[i]
            out[i] = (X[row], nt_i, tr_i, nc_i)
        if new:
            keys = [r.keys[i] for i in new]
            Xn = X[np.array([encoded[i][0] for i in new])]
            nt, tr, nc = ([encoded[i][j] for i in new] for j in (1, 2, 3))
            if self.cache is not None:
                with self.cache.guard("write"):  # a full disk (an OSError too) is named as the cache's, with its fix
                    self.cache.put(self.fid, keys, Xn, nt, tr, nc)
        with self._lock:
            if new and self.store is not None:
                self.store.put(keys, Xn, nt, tr, nc)
            self.held.update({r.keys[i]: out[i] for i in new if self.waiting.get(r.keys[i], 0) > 0})
            for i, why in refused.items():
                if i in r.todo:
                    self.rejected[r.keys[i]] = why
            for k in (r.keys[i] for i in r.todo):
                n = self.pending.get(k, 0) - 1
                if n <= 0:
                    self.pending.pop(k, None)
                else:
                    self.pending[k] = n
            rejected = {i: self.rejected[k] for i, k in r.later.items() if k in self.rejected}
            here = {r.keys[i]: out[i] for i in new}  # duplicates within this chunk: no store round trip
            here.update({k: self.held[k] for k in r.waits if k in self.held})  # ... and of an earlier chunk's rows
            for k in r.waits:
                n = self.waiting.pop(k, 0) - 1
                if n > 0:
                    self.waiting[k] = n
                else:
                    self.held.pop(k, None)
        found = self._lookup([k for i, k in r.later.items() if i not in rejected and k not in here])
        refused_out = {**refused, **rejected}
        for i, k in r.later.items():
            if i in rejected:
                continue
            e = here.get(k) or found.get(k)
            if e is None:  # pragma: no cover - a duplicate always follows the row it copies
                raise RuntimeError("bertfeat: a duplicate row's vector is missing (this is a bug)")
            out[i] = e
        self.encoded += len(new)
        self.tokens_encoded += sum(int(encoded[i][1]) for i in new)
        self.reused += sum(1 for i in out if i not in encoded)
        return out, refused_out

    def close(self) -> None:
        """Mark the cache's fingerprint used, close the cache and drop the run's store (its spill file too)."""
        with self._lock:
            if self.cache is not None:
                try:
                    for fid in [self.fid, *sorted(self.siblings_used)]:
                        self.cache.touch(fid)
                except Exception:  # the run's result stands; the next run marks it
                    pass
                self.cache.close()
            if self.store is not None:
                self.store.close()
