"""The vector cache's store and the run's reuse layer, below the engines (bertfeat/cache/store.py, bertfeat/cache/reuse.py):
keys, fingerprints, checksums, all-or-nothing writes, clear by prefix, the run store's spill, and the order of
plan / settle when chunks are read ahead of the model. End to end through both engines: test_cache.py."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from bertfeat.errors import BertfeatError
from bertfeat.cache.reuse import ENTRY_OVERHEAD, Reuser, RunStore
from bertfeat.cache.store import (DB_NAME, CacheError, VectorStore, cache_fingerprint, open_cache, resolve_cache,
                                  text_key)
from bertfeat.model.hub import model_files_digest
from conftest import TEST_DATA, read_sst2
from extract_util import tiny_encoder, tiny_model, tree_digest

SST2, _ = read_sst2(TEST_DATA / "sst2" / "stsa.binary.dev")
D = 8


def vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32)


def keys(texts) -> list[bytes]:
    return [text_key(t) for t in texts]


@pytest.fixture
def store(tmp_path):
    s = open_cache(tmp_path / "cache")
    yield s
    s.close()


# --------------------------------------------------------------------------- keys and fingerprints
def test_text_key():
    k = text_key(SST2[0])
    assert len(k) == 16 and k == text_key(SST2[0]) and k != text_key(SST2[1])
    assert text_key("a") != text_key("a", "")  # no pair is not an empty pair
    assert text_key("ab", "c") != text_key("a", "bc")  # characters moved between text and pair: another key
    assert text_key("a", "b") != text_key("b", "a")
    assert text_key("caf\u00e9") != text_key("cafe\u0301")  # the text as given: NFC and NFD are two texts
    assert len(text_key("\ud800 lone surrogate")) == 16  # any str, never an encoding error


def test_cache_fingerprint_holds_every_setting_that_changes_a_vector():
    enc = tiny_encoder()
    base, settings = cache_fingerprint(enc, enc.spec())
    assert len(base) == 32 and int(base, 16) >= 0
    assert cache_fingerprint(enc, enc.spec())[0] == base  # stable
    assert settings["weights_sha256"] == enc.weights_sha256
    assert set(settings["model_files"]) == {"config.json", "tokenizer_config.json", "vocab.txt"}
    json.dumps(settings)  # what `cache info --json` shows
    others = [enc.spec(pooling="cls"), enc.spec(layers="-2"), enc.spec(layers="-2,-1"), enc.spec(max_length=32),
              enc.spec(normalize=True), enc.spec(prompt="query: "), enc.spec(long_text="chunk-mean", max_length=16, stride=4),
              enc.spec(long_text="chunk-mean", max_length=16, stride=2), enc.spec(pooling="mean+max"),
              enc.spec(truncate_dim=8), enc.spec(truncate_dim=31)]
    fps = [cache_fingerprint(enc, s)[0] for s in others]
    assert len(set(fps)) == len(fps) and base not in fps
    assert cache_fingerprint(enc, enc.spec(truncate_dim=32))[0] == base  # every feature: a plain run's vectors


def test_the_attention_revision_is_in_the_key_of_only_the_paths_it_changed(monkeypatch):
    """0.3.0.dev0 made the NumPy softmax twin (kernels "numpy") and ModernBERT's attention run each sequence over its
    own keys, which rounds otherwise: their keys changed (store.attention_revision; ModernBERT: test_modernbert.py),
    every other path's is the key before (no "attention" in its settings), so its cache stays valid."""
    import bertfeat.cache.store
    from bertfeat.ops import kernels

    enc = tiny_encoder()

    def keys() -> tuple[str, dict, str]:  # (fingerprint, settings, the fingerprint before the revision)
        fp, settings = cache_fingerprint(enc, enc.spec())
        with monkeypatch.context() as m:  # raising=False: the code before had no attention_revision
            m.setattr(bertfeat.cache.store, "attention_revision", lambda encoder: None, raising=False)
            return fp, settings, cache_fingerprint(enc, enc.spec())[0]

    try:
        if kernels.use(None) == "numba":
            fp, settings, before = keys()
            assert "attention" not in settings["gemm"] and fp == before  # BERT on numba: the key it had
        assert kernels.use("numpy") == "numpy"
        fp, settings, before = keys()
        assert settings["gemm"].get("attention") == "per sequence" and fp != before
    finally:
        kernels.use(None)


def test_model_files_digest_reads_the_module_folders(tmp_path):
    m = tmp_path / "m"
    shutil.copytree(tiny_model(), m)
    (m / "1_Pooling").mkdir()
    (m / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (m / "1_Pooling" / "README.md").write_text("docs")
    (m / "README.md").write_text("docs")
    (m / "notes").mkdir()
    (m / "notes" / "x.json").write_text("{}")
    # no modules.json: a plain checkpoint, whose loading never reads 1_Pooling/ (hub.model_files lists what it reads)
    assert set(model_files_digest(m)) == {"config.json", "tokenizer_config.json", "vocab.txt"}
    (m / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    d = model_files_digest(m)
    assert set(d) == {"config.json", "tokenizer_config.json", "vocab.txt", "modules.json", "1_Pooling/config.json"}
    (m / "README.md").write_text("other docs")
    (m / "1_Pooling" / "README.md").write_text("other docs")
    assert model_files_digest(m) == d  # documentation changes no vector
    (m / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert model_files_digest(m)["1_Pooling/config.json"] != d["1_Pooling/config.json"]


def test_resolve_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("BERTFEAT_CACHE", raising=False)
    assert resolve_cache(None) is None and resolve_cache(False) is None and resolve_cache("  ") is None
    assert resolve_cache(tmp_path / "c") == tmp_path / "c" and resolve_cache(str(tmp_path / "c")) == tmp_path / "c"
    with pytest.raises(BertfeatError, match="cache=True needs a directory"):
        resolve_cache(True)
    monkeypatch.setenv("BERTFEAT_CACHE", str(tmp_path / "env"))
    assert resolve_cache(None) == resolve_cache(True) == tmp_path / "env"
    assert resolve_cache(False) is None and resolve_cache(tmp_path / "c") == tmp_path / "c"
    with pytest.raises(BertfeatError, match=r"^cache=3 is not a directory name"):
        resolve_cache(3)
    (tmp_path / "f").write_text("")
    with pytest.raises(CacheError, match="is not a directory"):
        resolve_cache(tmp_path / "f")
    assert resolve_cache(tmp_path / "f" / "below") == tmp_path / "f" / "below"  # under a file: refused on opening
    with pytest.raises(CacheError, match=f"^cannot make the cache directory {tmp_path / 'f' / 'below'} "):
        open_cache(tmp_path / "f" / "below")


# --------------------------------------------------------------------------- the store
def test_put_and_get_round_trip(store):
    fid = store.register("a" * 32, "m", D, {"pooling": "mean"})
    X = vectors(5)
    ks = keys(SST2[:5])
    store.put(fid, ks, X, [3, 4, 5, 6, 7], [False, True, False, False, True], [1, 1, 2, 1, 3])
    got = store.get(fid, ks[::-1] + keys(SST2[5:8]))
    assert set(got) == set(ks)
    for i, k in enumerate(ks):
        v, nt, tr, nc = got[k]
        assert v.dtype == np.float32 and v.tobytes() == X[i].tobytes()
        assert (nt, tr, nc) == ([3, 4, 5, 6, 7][i], [False, True, False, False, True][i], [1, 1, 2, 1, 3][i])
    other = store.register("b" * 32, "m", D, {"pooling": "cls"})
    assert store.get(other, ks) == {}  # another fingerprint never sees these vectors
    assert store.register("a" * 32, "m", D, {}) == fid
    with pytest.raises(CacheError, match=f"holds {D}-dimension vectors under fingerprint {'a' * 32}, this run makes 4"):
        store.register("a" * 32, "m", 4, {})
    assert store.get(fid, keys(SST2[:600])) .keys() == set(ks)  # more keys than one SELECT takes


def keyed(settings: dict) -> tuple[str, dict]:
    """(fingerprint, settings) as cache_fingerprint makes them: the sha256 of the settings' JSON."""
    import hashlib

    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:32], settings


def test_rows_within_max_length_are_found_under_another_long_text_policy(store):
    """Another long-text policy or stride, every other setting the same: its entries of rows within max length (not
    truncated, one window, no zero in the vector) are found; a long row's (truncated, or in windows), one with a
    zero (chunk-mean's combining may turn -0.0 into 0.0), another setting's, another width's and a fingerprint
    whose settings do not hash to it are not."""
    base = {"pooling": "mean", "max_length": 32, "weights_sha256": "w", "gemm": {"library": "onednn"}}
    run = keyed({**base, "long_text": "chunk-mean", "stride": 8})
    trunc = keyed({**base, "long_text": "truncate", "stride": 32})
    other = keyed({**base, "pooling": "cls", "long_text": "truncate", "stride": 32})
    forged = ("f" * 32, trunc[1])
    ids = {name: store.register(fp, "m", D, s) for name, (fp, s) in
           [("run", run), ("trunc", trunc), ("other", other), ("forged", forged)]}
    wide = keyed({**base, "long_text": "error", "stride": 32})
    ids["wide"] = store.register(*wide[:1], "m", 2 * D, wide[1])
    X = vectors(5)
    X[4, 3] = -0.0
    ks = keys(SST2[:5])
    # rows 0, 1 within max length; 2 truncated; 3 in windows; 4 holds a -0.0
    store.put(ids["trunc"], ks, X, [9, 32, 40, 40, 9], [False, False, True, False, False], [1, 1, 1, 3, 1])
    store.put(ids["other"], keys(SST2[5:6]), vectors(1), [9], [False], [1])
    store.put(ids["forged"], keys(SST2[6:7]), vectors(1), [9], [False], [1])
    store.put(ids["wide"], keys(SST2[7:8]), np.ones((1, 2 * D), np.float32), [9], [False], [1])
    siblings = store.siblings(*run, D)
    assert siblings == [(ids["trunc"], 32)]  # its rows of 32 tokens at most
    used = set()
    got = store.get_reusable(ids["run"], siblings, keys(SST2[:8]), used)
    assert set(got) == set(ks[:2]) and used == {ids["trunc"]}
    assert [got[k][0].tobytes() for k in ks[:2]] == [X[0].tobytes(), X[1].tobytes()]
    # the run's own entries first, whatever they hold
    store.put(ids["run"], ks[2:4], X[2:4] + 1, [40, 40], [False, False], [2, 2])
    got = store.get_reusable(ids["run"], siblings, ks)
    assert set(got) == set(ks[:4]) and got[ks[2]][0].tobytes() == (X[2] + 1).tobytes() and got[ks[3]][3] == 2


def test_rows_within_both_max_lengths_are_found_under_another_max_length(store):
    """Another max length (with ``at_length``: the run's settings at it, settings_at_length), every other setting the
    same, another long-text policy too: its entries of rows within both max lengths (not truncated, one window, at
    most the run's max length in tokens, no zero) are found; one whose settings differ from the run's at that length
    (a key that depends on it: the prompt's length), one ``at_length`` refuses (None) and any without ``at_length``
    are not."""
    base = {"pooling": "mean", "weights_sha256": "w", "long_text": "truncate", "stride": 32}

    def at_length(m):
        return None if m == 8 else {**base, "max_length": m, **({"prompt_length": 3} if m == 128 else {})}

    run = keyed({**base, "max_length": 32})
    fps = {"64": keyed({**base, "max_length": 64}), "16": keyed({**base, "max_length": 16, "long_text": "chunk-mean"}),
           "128": keyed({**base, "max_length": 128}), "8": keyed({**base, "max_length": 8}),
           "odd": keyed({**base, "max_length": "32"})}
    ids = {name: store.register(fp, "m", D, s) for name, (fp, s) in fps.items()}
    X = vectors(7)
    X[6, 2] = 0.0
    ks = keys(SST2[:7])
    # rows 0-1 within 32 and 64; 2 within 64 only; 3 truncated at 64; 4 in windows; 5 within 32 but cut; 6 a zero
    store.put(ids["64"], ks, X, [9, 32, 40, 80, 70, 20, 9], [False, False, False, True, False, True, False],
              [1, 1, 1, 1, 2, 1, 1])
    for name in ("16", "128", "8", "odd"):
        store.put(ids[name], keys(SST2[7:8]), vectors(1), [9], [False], [1])
    siblings = store.siblings(*run, D, at_length)
    assert siblings == [(ids["64"], 32), (ids["16"], 32)]
    used = set()
    got = store.get_reusable(store.register(*run[:1], "m", D, run[1]), siblings, keys(SST2[:8]), used)
    assert set(got) == set(ks[:2]) | set(keys(SST2[7:8])) and used == {ids["64"], ids["16"]}
    assert [got[k][0].tobytes() for k in ks[:2]] == [X[0].tobytes(), X[1].tobytes()]
    assert store.siblings(*run, D) == []  # no at_length: the same max length only


def test_every_row_is_found_under_another_name_of_the_same_prompt(store):
    """The prompt's name changes no vector (its text is the prompt setting): a fingerprint that differs in it alone
    serves every entry, long rows and zeros included, and comes before the long-text siblings; one that differs in
    the long-text policy too serves the rows within max length only; another prompt text serves nothing."""
    base = {"pooling": "mean", "max_length": 32, "weights_sha256": "w", "prompt": "passage: ", "long_text": "truncate",
            "stride": 32}
    run = keyed({**base, "prompt_name": None})
    fps = {"long": keyed({**base, "prompt_name": "doc", "long_text": "chunk-mean", "stride": 8}),
           "named": keyed({**base, "prompt_name": "doc"}),
           "other": keyed({**base, "prompt": "passage:", "prompt_name": None})}
    ids = {name: store.register(fp, "m", D, s) for name, (fp, s) in fps.items()}
    X = vectors(3)
    X[2, 3] = 0.0
    ks = keys(SST2[:3])
    store.put(ids["named"], ks[:2], X[:2], [9, 40], [False, True], [1, 1])  # row 1 truncated
    store.put(ids["named"], ks[2:3], X[2:3], [9], [False], [1])  # row 2 holds a 0.0
    store.put(ids["long"], keys(SST2[3:5]), vectors(2, 1), [9, 40], [False, False], [1, 2])
    store.put(ids["other"], keys(SST2[5:6]), vectors(1, 2), [9], [False], [1])
    siblings = store.siblings(*run, D)
    assert siblings == [(ids["named"], None), (ids["long"], 32)]
    used = set()
    got = store.get_reusable(store.register(run[0], "m", D, run[1]), siblings, keys(SST2[:6]), used)
    assert set(got) == set(keys(SST2[:4])) and used == {ids["named"], ids["long"]}
    assert [got[k][0].tobytes() for k in ks] == [x.tobytes() for x in X] and got[ks[1]][2] is True


def flip(vec: bytes) -> bytes:
    b = bytearray(vec)
    b[6] ^= 0x10
    return bytes(b)


@pytest.mark.parametrize("damage", [
    "flip",
    "UPDATE vectors SET vec = substr(vec, 1, 16)",
    "UPDATE vectors SET vec = zeroblob(length(vec))",
    "UPDATE vectors SET n_tokens = n_tokens + 1",
    "UPDATE vectors SET flags = 1 - flags",
    "UPDATE vectors SET n_chunks = 9",
    "UPDATE vectors SET crc = crc + 1",
    "UPDATE vectors SET fp = (SELECT max(id) FROM fingerprints)",  # an entry moved to another fingerprint
])
def test_a_damaged_entry_is_a_miss_and_put_repairs_it(store, damage):
    fid = store.register("a" * 32, "m", D, {})
    other = store.register("b" * 32, "m", D, {})
    X = vectors(3)
    ks = keys(SST2[:3])
    store.put(fid, ks, X, [5, 6, 7], [False] * 3, [1] * 3)
    if damage == "flip":
        vec = store.db.execute("SELECT vec FROM vectors WHERE key = ?", (ks[1],)).fetchone()[0]
        store.db.execute("UPDATE vectors SET vec = ? WHERE key = ?", (flip(vec), ks[1]))
    else:
        store.db.execute(damage + " WHERE key = ?", (ks[1],))
    got = store.get(fid, ks) if "fp =" not in damage else store.get(other, ks)
    assert set(got) == ({ks[0], ks[2]} if "fp =" not in damage else set()) and store.corrupt == 1
    store.put(fid, ks[1:2], X[1:2], [6], [False], [1])
    assert store.get(fid, ks)[ks[1]][0].tobytes() == X[1].tobytes() and store.corrupt == 1


@pytest.mark.parametrize("value", ["CAST(vec AS TEXT)", "CAST(vec AS TEXT) || 'x'", "12.5", "NULL"])
def test_a_vector_of_another_type_is_a_miss(store, value):
    """A vec cell that is no longer a BLOB (a flipped bit in a record header turns a BLOB into TEXT): a miss, like
    any failed checksum. (It was a UTF-8 decoding error naming the raw bytes, newlines and all: the run stopped.)"""
    fid = store.register("a" * 32, "m", D, {})
    ks = keys(SST2[:2])
    X = vectors(2)
    store.put(fid, ks, X, [1, 1], [False] * 2, [1, 1])
    if value == "NULL":
        store.db.execute("PRAGMA ignore_check_constraints = 1")
        with pytest.raises(sqlite3.IntegrityError):  # NOT NULL holds: the schema refuses it
            store.db.execute(f"UPDATE vectors SET vec = {value} WHERE key = ?", (ks[0],))
        return
    store.db.execute(f"UPDATE vectors SET vec = {value} WHERE key = ?", (ks[0],))
    got = store.get(fid, ks)
    if value == "CAST(vec AS TEXT)":  # the same bytes, typed TEXT: the vector is intact, its checksum holds
        assert [got[k][0].tobytes() for k in ks] == [x.tobytes() for x in X] and store.corrupt == 0
        return
    assert set(got) == {ks[1]} and got[ks[1]][0].tobytes() == X[1].tobytes() and store.corrupt == 1


def test_put_is_all_or_nothing(store):
    fid = store.register("a" * 32, "m", D, {})
    ks = keys(SST2[:4])
    # the third row fails inside SQLite, after two were inserted in the same transaction
    store.db.execute(f"CREATE TRIGGER fail BEFORE INSERT ON vectors WHEN NEW.key = X'{ks[2].hex()}' "
                     "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
    with pytest.raises(CacheError, match="injected failure"):
        store.put(fid, ks, vectors(4), [1] * 4, [False] * 4, [1] * 4)
    assert store.get(fid, ks) == {} and not store.db.in_transaction
    store.db.execute("DROP TRIGGER fail")
    ks = ks[:3]
    store.put(fid, ks, vectors(3), [1] * 3, [False] * 3, [1] * 3)
    assert len(store.get(fid, ks)) == 3


def test_clear_by_prefix(tmp_path, store):
    a = store.register("abc1" + "0" * 28, "m", D, {})
    b = store.register("abc2" + "0" * 28, "m", D, {})
    store.put(a, keys(SST2[:3]), vectors(3), [1] * 3, [False] * 3, [1] * 3)
    store.put(b, keys(SST2[:2]), vectors(2), [1] * 2, [False] * 2, [1] * 2)
    with pytest.raises(CacheError, match=r"has 2 fingerprint\(s\) starting with 'abc'"):
        store.clear("abc")
    with pytest.raises(CacheError, match=r"has no fingerprint\(s\) starting with 'abc_'"):
        store.clear("abc_")  # LIKE's wildcards are not wildcards here
    assert store.clear("ABC2") == 2  # hex digits in either case
    assert [f["fingerprint"][:4] for f in store.summary()] == ["abc1"]
    assert store.clear() == 3 and store.summary() == []


def test_a_second_connection_sees_committed_vectors_only(tmp_path, store):
    """WAL: a reader in another connection (another run) sees each put once committed, never half of one."""
    fid = store.register("a" * 32, "m", D, {})
    reader = VectorStore(tmp_path / "cache" / DB_NAME)
    try:
        rid = reader.register("a" * 32, "m", D, {})
        ks = keys(SST2[:50])
        store.db.execute("BEGIN IMMEDIATE")
        store.db.execute("INSERT INTO vectors(fp, key, vec, n_tokens, flags, n_chunks, crc) VALUES(?, ?, ?, 1, 0, 1, 0)",
                         (fid, ks[0], vectors(1)[0].tobytes()))
        assert reader.get(rid, ks) == {}  # not committed: not seen
        store.db.execute("ROLLBACK")
        store.put(fid, ks, vectors(50), [1] * 50, [False] * 50, [1] * 50)
        assert len(reader.get(rid, ks)) == 50 and reader.corrupt == 0
    finally:
        reader.close()
    assert sqlite3.connect(tmp_path / "cache" / DB_NAME).execute("PRAGMA journal_mode").fetchone() == ("wal",)


# --------------------------------------------------------------------------- the run's store and plan / settle
@pytest.mark.parametrize("budget", [0, 2 * (D * 4 + ENTRY_OVERHEAD), 10 ** 9])
def test_run_store_spills_past_its_budget(tmp_path, budget):
    rs = RunStore(D, tmp_path, budget)
    X = vectors(6)
    ks = keys(SST2[:6])
    rs.put(ks[:4], X[:4], [1, 2, 3, 4], [False, True, False, True], [1] * 4)
    rs.put(ks[4:], X[4:], [5, 6], [False, False], [2, 2])
    in_memory = min(6, budget // (D * 4 + ENTRY_OVERHEAD))
    assert len(rs.mem) == in_memory and (rs.spill is not None) == (in_memory < 6)
    got = rs.get(ks[::-1])
    assert [got[k][0].tobytes() for k in ks] == [x.tobytes() for x in X]
    assert [got[k][1:] for k in ks] == [(1, False, 1), (2, True, 1), (3, False, 1), (4, True, 1), (5, False, 2), (6, False, 2)]
    files = list(tmp_path.glob(".dedup-*"))
    assert len(files) == (1 if in_memory < 6 else 0)
    rs.close()
    assert list(tmp_path.iterdir()) == []


def test_plan_and_settle_with_chunks_read_ahead():
    """Chunks are planned (read-ahead thread) before the ones before them are settled: a text planned in chunk 1 and
    met again in chunks 1, 2 and 3 is encoded once, and each duplicate gets its vector when settled in order."""
    r = Reuser(D)
    t = SST2[:6]
    c1 = r.plan([t[0], t[1], t[0], t[2]], None)
    c2 = r.plan([t[2], t[3], t[0]], None)  # planned before chunk 1 is settled
    assert (c1.todo, sorted(c1.later)) == ([0, 1, 3], [2])
    assert (c2.todo, sorted(c2.later), c2.known) == ([1], [0, 2], {})
    X1 = vectors(3, seed=1)
    out1, refused1 = r.settle(c1, {0: (0, 10, False, 1), 1: (1, 11, False, 1), 3: (2, 12, True, 1)}, X1, {})
    assert refused1 == {} and sorted(out1) == [0, 1, 2, 3]
    assert out1[2][0].tobytes() == X1[0].tobytes() and out1[2][1:] == (10, False, 1)
    c3 = r.plan([t[1], t[4], t[3]], None)  # t[1] known now; t[3] still being encoded by chunk 2
    assert (sorted(c3.known), c3.todo, sorted(c3.later)) == ([0], [1], [2])
    X2 = vectors(1, seed=2)
    out2, _ = r.settle(c2, {1: (0, 13, False, 1)}, X2, {})
    assert out2[0][0].tobytes() == X1[2].tobytes() and out2[2][0].tobytes() == X1[0].tobytes()
    out3, _ = r.settle(c3, {1: (0, 14, False, 1)}, vectors(1, seed=3), {})
    assert out3[0][0].tobytes() == X1[1].tobytes() and out3[2][0].tobytes() == X2[0].tobytes()
    assert (r.encoded, r.reused) == (5, 5) and r.pending == {}
    r.close()


def test_a_cache_cleared_between_chunks_still_gives_the_waiting_duplicates_their_vector(tmp_path):
    """A duplicate planned while an earlier chunk encodes its text gets that chunk's vector even when `bertfeat cache
    clear` (another process) empties the cache in between (it was read back from the cache: "a duplicate row's
    vector is missing (this is a bug)"); the held vector is dropped once every waiting chunk has settled."""
    from bertfeat.cache.store import open_cache

    store = open_cache(tmp_path / "cache")
    fid = store.register("f" * 16, "m", D, {})
    r = Reuser(D, cache=store, fid=fid)
    t = SST2[:3]
    c1 = r.plan([t[0], t[1]], None)
    c2 = r.plan([t[0], t[2]], None)  # read ahead: t[0] is being encoded by chunk 1
    c3 = r.plan([t[0]], None)
    assert c2.later == {0: text_key(t[0])} and c3.later == {0: text_key(t[0])}
    X1 = vectors(2, seed=1)
    r.settle(c1, {0: (0, 10, False, 1), 1: (1, 11, False, 1)}, X1, {})
    assert open_cache(tmp_path / "cache").clear() == 2  # another process: `bertfeat cache clear`
    out2, _ = r.settle(c2, {1: (0, 12, False, 1)}, vectors(1, seed=2), {})
    out3, _ = r.settle(c3, {}, None, {})
    assert out2[0][0].tobytes() == X1[0].tobytes() and out3[0][0].tobytes() == X1[0].tobytes()
    assert out3[0][1:] == (10, False, 1)
    assert r.held == {} and r.waiting == {} and r.pending == {}
    r.close()


def test_a_refused_text_refuses_its_duplicates():
    r = Reuser(D)
    long, ok = SST2[0], SST2[1]
    c1 = r.plan([long, ok, long], None)
    c2 = r.plan([long], None)  # read ahead, before the refusal
    out1, refused1 = r.settle(c1, {1: (0, 5, False, 1)}, vectors(1), {0: "too long"})
    assert sorted(out1) == [1] and refused1 == {0: "too long", 2: "too long"}
    out2, refused2 = r.settle(c2, {}, None, {})
    assert out2 == {} and refused2 == {0: "too long"}
    c3 = r.plan([long, ok], None)  # after: refused at once, the other reused
    assert c3.todo == [] and sorted(c3.later) == [0] and sorted(c3.known) == [1]
    out3, refused3 = r.settle(c3, {}, None, {})
    assert sorted(out3) == [1] and refused3 == {0: "too long"}
    assert (r.encoded, r.reused) == (1, 1)
    r.close()


def test_pairs_key_the_reuse():
    r = Reuser(D)
    a, b, c = SST2[:3]
    c1 = r.plan([a, a, a, b], [b, c, b, a])
    assert c1.todo == [0, 1, 3] and c1.later == {2: text_key(a, b)}
    r.close()


# --------------------------------------------------------------------------- review findings (each failed before its fix)
def test_model_files_digest_covers_every_module_folder_modules_json_names(tmp_path):
    """A Dense module may live in any folder modules.json names ("path": "dense"), not only N_... folders: its weights
    are in the key, so new Dense weights reuse nothing (they were left out: the old vectors came back with exit 0)."""
    d = tmp_path / "m"
    shutil.copytree(tiny_model(), d)
    (d / "dense").mkdir()
    (d / "dense" / "config.json").write_text('{"in_features": 32, "out_features": 4}')
    (d / "dense" / "model.safetensors").write_bytes(b"weights one")
    (d / "notes").mkdir()
    (d / "notes" / "x.json").write_text("{}")  # a folder modules.json does not name: not read, not in the key
    (d / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                                                {"idx": 1, "name": "1", "path": "dense", "type": "sentence_transformers.models.Dense"}]))
    first = model_files_digest(d)
    assert {"modules.json", "dense/config.json", "dense/model.safetensors"} <= set(first) and "notes/x.json" not in first
    (d / "dense" / "model.safetensors").write_bytes(b"weights two")
    assert model_files_digest(d)["dense/model.safetensors"] != first["dense/model.safetensors"]


OPEN_PUT_CLOSE = """
import sys, time
from pathlib import Path
import numpy as np
from bertfeat.cache.store import open_cache, text_key
start, directory = float(sys.argv[1]), Path(sys.argv[2])
keys = [text_key(f"row {i}") for i in range(20)]
while time.time() < start:  # every process opens at the same instant
    pass
s = open_cache(directory)
fid = s.register("f" * 32, "m", 8, {})
s.put(fid, keys, np.ones((20, 8), np.float32), [1] * 20, [False] * 20, [1] * 20)
s.close()
"""


def test_a_new_cache_opened_by_several_processes_at_once(tmp_path):
    """Setting WAL mode on a brand-new file answers 'database is locked' at once to the second process (no busy
    wait): the open is retried, so runs (and Dask tasks) starting together on a new cache all open it. Fresh
    interpreters (a fork of the test process, which holds threads, could deadlock)."""
    import subprocess
    import sys
    import time

    for r in range(6):
        directory = tmp_path / f"c{r}"
        start = time.time() + 1.5
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_PUT_CLOSE, str(start), str(directory)], stderr=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        assert [rc for rc, _ in results] == [0] * 4, [err for _, err in results]
        s = open_cache(directory)
        assert len(s.get(s.register("f" * 32, "m", 8, {}), [text_key(f"row {i}") for i in range(20)])) == 20
        s.close()


def test_clear_during_a_run_leaves_no_orphan_rows(tmp_path):
    """cache clear while a run still writes: the run's later rows are deleted by the next clear, and a new
    fingerprint never takes the old one's id (its entries would be someone else's)."""
    run, other = open_cache(tmp_path / "cache"), open_cache(tmp_path / "cache")
    try:
        fid = run.register("a" * 32, "m", D, {})
        run.put(fid, keys(SST2[:10]), vectors(10), [1] * 10, [False] * 10, [1] * 10)
        assert other.clear() == 10
        run.put(fid, keys(SST2[10:30]), vectors(20), [1] * 20, [False] * 20, [1] * 20)  # the run goes on
        assert other.clear() == 20
        assert other.db.execute("SELECT count(*) FROM vectors").fetchone() == (0,)
        new = other.register("b" * 32, "m", D, {})
        assert new != fid and other.get(new, keys(SST2[:30])) == {} and other.corrupt == 0
    finally:
        run.close()
        other.close()


@pytest.mark.parametrize("other_run_registers_first", [False, True])
def test_a_clear_while_a_run_writes_leaves_no_unseen_vectors(tmp_path, other_run_registers_first):
    """`cache clear` in another process deletes the fingerprints row a running writer registered; what the writer puts
    afterwards goes under the fingerprint's row again (put back, or the one another run registered meanwhile), so
    `cache info` counts it, a later run reuses it and a full clear deletes what info showed (the vectors were
    orphaned: 1,000 unseen rows, "deleted 3,000" after info said 2,000)."""
    writer = open_cache(tmp_path / "cache")
    fid = writer.register("c" * 32, "m", D, {"pooling": "mean"})
    writer.put(fid, keys(SST2[:3]), vectors(3), [3] * 3, [False] * 3, [1] * 3)
    other = VectorStore(tmp_path / "cache" / DB_NAME)
    assert other.clear() == 3
    if other_run_registers_first:
        assert other.register("c" * 32, "m", D, {"pooling": "mean"}) != fid
    writer.put(fid, keys(SST2[3:7]), vectors(4, 1), [3] * 4, [False] * 4, [1] * 4)
    writer.touch(fid)
    info = other.summary()
    assert [(s["fingerprint"], s["entries"]) for s in info] == [("c" * 32, 4)]
    again = other.register("c" * 32, "m", D, {"pooling": "mean"})
    got = other.get(again, keys(SST2[:7]))
    assert sorted(got) == sorted(keys(SST2[3:7])) and got[keys(SST2[3:4])[0]][0].tobytes() == vectors(4, 1)[0].tobytes()
    assert writer.get(fid, keys(SST2[3:4])) != {}  # the writer's own id still reads its vectors
    assert other.clear() == 4 and other.summary() == []
    writer.close()
    other.close()


# --------------------------------------------------------------------------- the run's store fails: named as itself
class _Failing:
    """A connection whose statements fail as SQLite does (``error``), for the store's write path."""

    def __init__(self, db, error: sqlite3.Error):
        self._db, self._error = db, error

    def execute(self, sql, *args):
        if sql.startswith(("BEGIN", "INSERT", "UPDATE")):
            raise self._error
        return self._db.execute(sql, *args)

    def executemany(self, *args):
        raise self._error

    def __getattr__(self, name):
        return getattr(self._db, name)


RESUME = "rerun the same command with --resume"
RUN_STORE_CASES = [
    (sqlite3.OperationalError("database or disk is full"), ": no space left on the device",
     f"free disk space, then {RESUME}"),
    (sqlite3.OperationalError("disk I/O error"), " (disk I/O error)",
     "its file system may be full or too small for the file, or the disk failed: free disk space, then "
     f"{RESUME}, or write to another file system with -o"),
    (sqlite3.OperationalError("attempt to write a readonly database"), " (attempt to write a readonly database)",
     "check the output's directory is writable, or write elsewhere with -o"),
]


@pytest.mark.parametrize("error, what, fix", RUN_STORE_CASES, ids=["full", "io", "readonly"])
def test_run_store_errors_name_the_run_store_not_a_cache(tmp_path, monkeypatch, error, what, fix):
    """The run's own store of encoded rows without a cache (the Dask engine's OUTPUT.partial/.dedup/, the local
    engine's spill file in OUTPUT.partial/) failing: named as the run's store, with the local engine's fix for its
    partial directory's file system (it said "cannot write the cache ... - check the cache directory is writable
    ..., or use another one" though no cache was given); a cache elsewhere keeps the cache's words."""
    from bertfeat.cli.app import FLAGS

    partial = tmp_path / "o.parquet.partial"
    dask = open_cache(partial / ".dedup")  # the Dask engine's (run.dask.RUN_STORE)
    fid = dask.register("a" * 32, "m", D, {})
    dask.db = _Failing(dask.db, error)
    with pytest.raises(CacheError) as e:
        dask.put(fid, keys(SST2[:2]), vectors(2), [1, 1], [False, False], [1, 1])
    db = partial / ".dedup" / DB_NAME
    assert e.value.render(FLAGS) == f"cannot write the run's temporary store of encoded rows {db}{what} - {fix}"
    dask.db = dask.db._db
    dask.close()

    def failing_open(self):
        raise error

    monkeypatch.setattr(VectorStore, "_open", failing_open)
    local = RunStore(D, partial, budget=0)  # the local engine's: spills at once
    with pytest.raises(CacheError) as e:
        local.put(keys(SST2[:2]), vectors(2), [1, 1], [False, False], [1, 1])
    spill = re.escape(str(partial / ".dedup-")) + r"\d+-[0-9a-f]{8}\.sqlite3"
    assert re.fullmatch(f"cannot open the run's temporary store of encoded rows {spill}{re.escape(f'{what} - {fix}')}",
                        e.value.render(FLAGS)), e.value.render(FLAGS)
    with pytest.raises(CacheError) as e:
        open_cache(tmp_path / "cache")
    assert e.value.render(FLAGS).startswith(f"cannot open the cache {tmp_path / 'cache' / DB_NAME}")


def test_run_store_damaged_or_locked(tmp_path, monkeypatch):
    from bertfeat.cache import store as vcache
    from bertfeat.cli.app import FLAGS

    db = tmp_path / "o.parquet.partial" / ".dedup" / DB_NAME
    for error, message in (
            (sqlite3.DatabaseError("database disk image is malformed"),
             f"the run's temporary store of encoded rows {db} is damaged (database disk image is malformed) - delete "
             f"{db} (its rows are encoded again), then {RESUME}"),
            (sqlite3.OperationalError("database is locked"),
             f"the run's temporary store of encoded rows {db} stayed locked by another process for 0 s while opening "
             f"- {RESUME} (the finished parts are kept)")):
        def failing_open(self, error=error):
            raise error

        monkeypatch.setattr(VectorStore, "_open", failing_open)
        monkeypatch.setattr(vcache, "BUSY_TIMEOUT_S", 0.0)
        with pytest.raises(CacheError) as e:
            open_cache(db.parent)
        assert e.value.render(FLAGS) == message


# --------------------------------------------------------------------------- the cache's write fails: what, where, the fix
ELSEWHERE = "run with --no-cache or another --cache directory"
IO_FIX = ("its file system may be full, over quota or too small for the file, or the disk failed: free disk space "
          f"there, or {ELSEWHERE}")
CACHE_WRITE_CASES = [
    (sqlite3.OperationalError("database or disk is full"), ": no space left on the device",
     f"free disk space there, or {ELSEWHERE}"),
    (OSError(errno.ENOSPC, "No space left on device"), ": no space left on the device", f"free disk space there, or {ELSEWHERE}"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), ": disk quota exceeded", f"free space under your quota, or {ELSEWHERE}"),
    (OSError(errno.EIO, "Input/output error"), " (Input/output error)", IO_FIX),
    (sqlite3.OperationalError("disk I/O error"), " (disk I/O error)", IO_FIX),  # SQLite's words for EDQUOT and EIO
]


@pytest.mark.parametrize("error, what, fix", CACHE_WRITE_CASES, ids=["sqlite-full", "enospc", "edquot", "eio", "sqlite-io"])
def test_a_cache_write_failure_says_what_where_and_the_fix(tmp_path, error, what, fix):
    """A write of the cache failing (SQLite's error, or an OSError raised in the write: ENOSPC, EDQUOT, EIO): one
    CacheError naming the cache's file, what happened and the fix: free the space, or run without the cache or with
    another one (an OSError went out as the run's partial directory's; EIO and SQLite's I/O error only said to check
    the directory is writable). Python callers read the keyword."""
    from bertfeat.cli.app import FLAGS

    store = open_cache(tmp_path / "cache")
    fid = store.register("a" * 32, "m", D, {})
    real, store.db = store.db, _Failing(store.db, error)
    with pytest.raises(CacheError) as e:
        store.put(fid, keys(SST2[:2]), vectors(2), [1, 1], [False, False], [1, 1])
    db = tmp_path / "cache" / DB_NAME
    assert e.value.render(FLAGS) == f"cannot write the cache {db}{what} - {fix}"
    assert e.value.message == f"cannot write the cache {db}{what} - {fix}".replace(
        "--no-cache or another --cache", "cache=False or another cache")
    store.db = real
    assert store.get(fid, keys(SST2[:2])) == {}  # nothing of the failed write stored
    store.close()


_FILL = """
import resource, sys
from pathlib import Path
import numpy as np
from bertfeat.cli.app import FLAGS
from bertfeat.cache.store import CacheError, open_cache, text_key
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))  # ulimit -f
store = open_cache(Path(sys.argv[1]))
fid = store.register("a" * 32, "m", 384, {})
try:
    for i in range(100):
        ks = [text_key(f"{i} {k}") for k in range(50)]
        store.put(fid, ks, np.ones((50, 384), "f4"), [1] * 50, [0] * 50, [1] * 50)
except CacheError as e:
    print(e.render(FLAGS))
"""


def test_run_store_too_large_for_its_file_system_says_so(tmp_path):
    """A real EFBIG (RLIMIT_FSIZE, as ``ulimit -f``; SQLite says "disk I/O error"): the run's store and the cache name
    the process's file-size limit and its fix (found by the environment audit: they said "too large for the file
    system - write to another file system", where any file system has the same limit, and the run store's fix did not
    say --resume); without a limit, EFBIG is the file system's."""
    import errno
    import subprocess
    import sys

    from bertfeat.cli.app import FLAGS
    from bertfeat.errors import os_error

    resource = pytest.importorskip("resource")
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard != resource.RLIM_INFINITY and hard < 300_000:
        pytest.skip("the hard file size limit is below the test's")

    def fill(directory: Path) -> str:
        return subprocess.run([sys.executable, "-c", _FILL, str(directory)], capture_output=True, text=True,
                              check=True).stdout.strip()

    local = os_error(OSError(errno.EFBIG, "File too large"), "o.parquet.partial").render(FLAGS)
    assert local == "o.parquet.partial: file too large for the file system - write to another file system with -o"
    limit = "file too large: this process may not write a file past 300,000 bytes (its file-size limit, ulimit -f)"
    db = tmp_path / "o.parquet.partial" / ".dedup" / DB_NAME
    assert fill(db.parent) == (f"cannot write the run's temporary store of encoded rows {db}: {limit} - raise the "
                               "limit (ulimit -f unlimited), then rerun the same command with --resume")
    cache = tmp_path / "cache" / DB_NAME
    assert fill(cache.parent) == (f"cannot write the cache {cache}: {limit} - raise the limit (ulimit -f unlimited), or "
                                  "run with --no-cache")


def test_a_file_size_limit_above_4_gib_names_the_file_system_too(tmp_path, monkeypatch):
    """Found by the re-read: above FAT32's 4 GiB the line names both causes (errors.file_too_large), so its fix names
    both: another file system, or the limit."""
    import errno

    from bertfeat import errors
    from bertfeat.cache import store as store_module
    from bertfeat.cli.app import FLAGS

    for module in (errors, store_module):
        monkeypatch.setattr(module, "file_size_limit", lambda: 8 << 30)
    s = open_cache(tmp_path / "c")
    try:
        said = s._error(OSError(errno.EFBIG, "File too large"), "write").render(FLAGS)
    finally:
        s.close()
    assert said == (f"cannot write the cache {tmp_path / 'c' / DB_NAME}: file too large for the file system, or past "
                    "this process's file-size limit of 8,589,934,592 bytes (ulimit -f) - use another --cache directory "
                    "on another file system, or raise the limit (ulimit -f unlimited), or run with --no-cache")


_MAKE = """
import resource, sys
from pathlib import Path
from bertfeat.cli.app import FLAGS
from bertfeat.cache.store import CacheError, open_cache
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))  # ulimit -f 97
try:
    open_cache(Path(sys.argv[1]))
except CacheError as e:
    print(e.render(FLAGS))
"""


def test_a_cache_the_file_size_limit_stops_being_made_says_so(tmp_path):
    """Found by the environment audit: under ``ulimit -f`` below a new store's size, SQLite's "disk I/O error" while the
    store was made was reported as a full or failing disk (the files it could have been told by were gone)."""
    import subprocess
    import sys

    resource = pytest.importorskip("resource")
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard != resource.RLIM_INFINITY and hard < 100_000:
        pytest.skip("the hard file size limit is below the test's")
    cache = tmp_path / "cache"
    said = subprocess.run([sys.executable, "-c", _MAKE, str(cache)], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert said == (f"cannot open the cache {cache / DB_NAME}: file too large: this process may not write a file past "
                    "100,000 bytes (its file-size limit, ulimit -f) - raise the limit (ulimit -f unlimited), or run "
                    "with --no-cache")
    assert list(cache.iterdir()) == []  # nothing half-made left


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_a_new_store_has_the_mode_the_umask_gives(tmp_path, umask):
    """Found by the environment audit: SQLite makes its files 0644 & ~umask, so under umask 002 a team's cache was
    not group-writable while every other file a run writes was (0666 & ~umask); its -wal / -shm follow its mode."""
    old = os.umask(umask)
    try:
        store = open_cache(tmp_path / "c")
        fid = store.register("a" * 32, "m", 4, {})
        store.put(fid, [text_key("x")], np.ones((1, 4), "f4"), [1], [0], [1])
        modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "c").iterdir()}
        store.close()
    finally:
        os.umask(old)
    assert modes[DB_NAME] == 0o666 & ~umask
    assert all(m == 0o666 & ~umask for m in modes.values()), modes


def test_a_killed_runs_half_made_store_files_are_removed_once_stale(tmp_path):
    """kill -9 while a cache was first made left its hidden new file (and SQLite's side files) beside the cache for
    good. An opening for writing removes those older than STALE_NEW_S; one being made now (younger), a user's file of
    a like name, and the cache's own files stay."""
    from bertfeat.cache.store import STALE_NEW_S

    c = tmp_path / "c"
    open_cache(c).close()
    stale = [f".{DB_NAME}.new-4242-0a1b2c3d", f".{DB_NAME}.new-4242-0a1b2c3d-journal", f".{DB_NAME}.new-7-ffffffff-wal"]
    kept = [f".{DB_NAME}.new-99-12345678", f".{DB_NAME}.new-notes.txt", f".{DB_NAME}.new-5-0a1b2c3d.bak"]
    old = __import__("time").time() - STALE_NEW_S - 60
    for name in stale + kept:
        (c / name).write_bytes(b"x")
        if name != kept[0]:  # the first kept one is young: a store another process is making now
            os.utime(c / name, (old, old))
    open_cache(c).close()
    assert sorted(p.name for p in c.iterdir()) == sorted([DB_NAME, *kept])


# --------------------------------------------------------------------------- whose file it is: only bertfeat's own store is written
def _marker(db: Path) -> tuple:
    con = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return (con.execute("PRAGMA application_id").fetchone()[0], con.execute("PRAGMA user_version").fetchone()[0],
                con.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0])
    finally:
        con.close()


def test_every_store_bertfeat_makes_carries_its_marker(tmp_path):
    """The cache, the Dask engine's run store (OUTPUT.partial/.dedup/) and the local engine's spill file: marked
    (application_id, user_version = the format, the meta row) and whole when they appear (built under a hidden name,
    then linked: no temporary left), and they keep working."""
    from bertfeat.cache.store import APP_ID, classify

    for directory in (tmp_path / "cache", tmp_path / "o.parquet.partial" / ".dedup"):
        s = open_cache(directory)
        fid = s.register("a" * 32, "m", D, {})
        s.put(fid, keys(SST2[:3]), vectors(3), [1] * 3, [False] * 3, [1] * 3)
        s.close()
        assert sorted(p.name for p in directory.iterdir()) == [DB_NAME]
        assert _marker(directory / DB_NAME) == (APP_ID, 2, "2") and classify(directory / DB_NAME) == ("ours", "")
        s = open_cache(directory)
        assert len(s.get(s.register("a" * 32, "m", D, {}), keys(SST2[:3]))) == 3
        s.close()
    partial = tmp_path / "p.parquet.partial"
    run = RunStore(D, partial, budget=0)  # spills at once
    run.put(keys(SST2[:4]), vectors(4), [1] * 4, [False] * 4, [1] * 4)
    spill = run.spill.path
    assert [p.name for p in partial.iterdir()] == [spill.name] and _marker(spill)[0] == APP_ID
    assert sorted(run.get(keys(SST2[:5]))) == sorted(keys(SST2[:4]))
    run.close()
    assert list(partial.iterdir()) == []


#: the sequence of statements earlier bertfeat versions opened a new cache with (no marker)
_EARLIER_OPEN = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA page_size=16384")
db.execute("PRAGMA journal_mode=WAL")
db.executescript(sys.argv[2])
db.execute("INSERT OR IGNORE INTO meta VALUES('format', ?)", (sys.argv[3],))
db.execute("INSERT INTO fingerprints(fingerprint, model, dim, settings, created, last_used) VALUES('%s', 'm', 8, '{}', 0, 0)" % ("a" * 32))
if sys.argv[4] == "killed":
    os._exit(0)  # before the first checkpoint: the tables are in the -wal file alone
db.close()
"""


def earlier_cache(directory: Path, schema: str, fmt: str = "2", killed: bool = False) -> Path:
    """A cache as an earlier bertfeat left it (no marker), in a fresh interpreter (killed: as kill -9 leaves it)."""
    import subprocess
    import sys

    directory.mkdir()
    db = directory / DB_NAME
    subprocess.run([sys.executable, "-c", _EARLIER_OPEN, str(db), schema, fmt, "killed" if killed else "closed"], check=True)
    assert (directory / f"{DB_NAME}-wal").exists() == killed
    return db


@pytest.mark.parametrize("killed", [False, True], ids=["closed", "killed-before-a-checkpoint"])
def test_an_earlier_bertfeats_cache_is_adopted(tmp_path, killed):
    """An earlier bertfeat's cache (the exact current layout, no marker): marked on its first open and used, also when
    its tables are still in its -wal file alone (read from a private copy first: the file is not touched until it is
    known to be bertfeat's)."""
    from bertfeat.cache import store as vcache

    db = earlier_cache(tmp_path / "cache", vcache._SCHEMA, killed=killed)
    assert vcache.classify(db) == ("adopt", "")
    s = open_cache(db.parent)
    assert s.known_id("a" * 32) is not None
    s.close()
    assert _marker(db) == (vcache.APP_ID, 2, "2") and vcache.classify(db) == ("ours", "")


@pytest.mark.parametrize("layout, fmt, shown", [
    ("1", "1", "1"),  # format 1: each row in the (fp, key) B-tree, WITHOUT ROWID
    ("2 of a development version (fingerprint ids reused after a clear)", "2",
     "2 of a development version (fingerprint ids reused after a clear)"),
    ("current", "99", "99"),  # today's layout, another format in its meta row
])
def test_an_older_layout_is_refused_without_a_byte_changed(tmp_path, layout, fmt, shown):
    """Before: the open ran CREATE ... IF NOT EXISTS (an index added to format 1's table), set WAL and wrote, then
    said "has format 1". Now the layout is recognised read-only and refused as bertfeat's older format."""
    from bertfeat.cache import store as vcache

    db = earlier_cache(tmp_path / "cache", vcache._SCHEMA if layout == "current" else vcache._OLD_SCHEMAS[layout], fmt)
    before = tree_digest(db.parent)
    with pytest.raises(CacheError) as e:
        open_cache(db.parent)
    assert e.value.message == (f"the cache {db} has format {shown}, this bertfeat reads format 2 - use another cache "
                               f"directory, or delete {db} (its vectors are recomputed)")
    assert tree_digest(db.parent) == before


def test_a_marked_store_of_another_format_is_refused_from_its_header(tmp_path):
    """A later bertfeat's cache (the marker, user_version 3): refused from the header's bytes, before any write."""
    s = open_cache(tmp_path / "cache")
    s.close()
    db = tmp_path / "cache" / DB_NAME
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version=3")
    con.close()
    before = tree_digest(db.parent)
    with pytest.raises(CacheError, match=r"^the cache .* has format 3, this bertfeat reads format 2 - "):
        open_cache(db.parent)
    assert tree_digest(db.parent) == before
