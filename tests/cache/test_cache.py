"""The vector cache (``--cache DIR`` / ``cache=`` / BERTFEAT_CACHE) and duplicates encoded once (issue 29).

Every run here is a real one (``bertfeat.extract`` or the command line, subprocesses where a real process matters:
two runs at once, SIGKILL) on real sentences from tests/data, with the tiny random-weight model unless the test
needs more. The reference for "the right vectors" is always the same corpus extracted without a cache
(``cache=False``): same ids in the same order, n_tokens / truncated / n_chunks equal, features within TOL.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tokenizers

import bertfeat
import bertfeat.cache.reuse
import bertfeat.cache.store
from bertfeat.errors import BertfeatError
from bertfeat.cache.store import DB_NAME, CacheError
from conftest import dask_local_client, TEST_DATA, read_sst2, read_trec
from extract_util import (TOL, assert_close, assert_tables_match, embeddings, metadata, no_leftovers, read_table, rows_bit_for_bit, run,
                          sigkill_when, summary_line, tiny_encoder, tiny_model, tree_digest, write_csv)

SST2, _ = read_sst2(TEST_DATA / "sst2" / "stsa.binary.dev")  # 300 distinct real sentences
TREC, _ = read_trec(TEST_DATA / "trec" / "TREC.test")  # 100 distinct real questions
COUNTS = ("n_tokens", "truncated", "n_chunks")


# --------------------------------------------------------------------------- helpers
def second_model() -> Path:
    """Another tiny model: the same shape and vocabulary as tiny_model() (same dim), other weights."""
    from ckpt import cached_checkpoint

    return cached_checkpoint(tiny_model().parent, hidden=32, layers=2, heads=2, max_position=128, seed=8)


def corpus(path: Path, rows: list[tuple[str, str]]) -> Path:
    """A CSV of (id, text) rows."""
    return write_csv(path, ["id", "text"], [list(r) for r in rows])


def base_rows(n: int = 120) -> list[tuple[str, str]]:
    return [(f"s{i:03d}", SST2[i]) for i in range(n)]


def edit(rows: list[tuple[str, str]], seed: int = 29, deleted: int = 15, edited: int = 10, added: int = 20):
    """The next version of a corpus, as a pipeline sees it: rows deleted, texts edited, rows added, all reordered.
    -> (rows, the number of texts the cache has not seen: edited + added)."""
    rng = random.Random(seed)
    gone = set(rng.sample(range(len(rows)), deleted))
    kept = [r for i, r in enumerate(rows) if i not in gone]
    for i in rng.sample(range(len(kept)), edited):
        rid, text = kept[i]
        kept[i] = (rid, text.replace(" ", " really ", 1))  # a real edit: another text, another vector
    new = [(f"n{i:03d}", SST2[200 + i]) for i in range(added)]
    out = kept + new
    rng.shuffle(out)
    return out, edited + added


def extract(src: Path, out: Path, **kw):
    """bertfeat.extract with the tiny model and the id column (kw wins)."""
    kw = {"model": str(tiny_model()), "id_column": "id", **kw}
    return bertfeat.extract(src, out, **kw)


def features(path: Path) -> pa.Table:
    """A features output: a Parquet file (local engine) or a directory of part files (Dask engine)."""
    if path.is_dir():
        return pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in sorted(path.glob("part-*.parquet"))])
    return read_table(path).replace_schema_metadata(None)


def assert_same_features(a: Path, b: Path, tol: float = TOL):
    """Two outputs hold the same rows: ids in the same order, token counts equal, features within tol."""
    ta, tb = features(a), features(b)
    assert ta.column_names == tb.column_names
    assert ta.column(0).to_pylist() == tb.column(0).to_pylist()
    for c in COUNTS:
        assert ta.column(c).to_pylist() == tb.column(c).to_pylist(), c
    assert_within(embeddings(ta), embeddings(tb), tol)


def assert_within(X: np.ndarray, Y: np.ndarray, tol: float = TOL):
    """float32 features, every value within tol of the reference, absolute (measured: 0.0, the vectors are the
    same bits; the tiny model's features reach ~3, so this is stricter than extract_util.assert_close)."""
    assert X.shape == Y.shape and X.dtype == Y.dtype == np.float32, (X.shape, Y.shape, X.dtype)
    assert X.size and float(np.abs(X.astype(np.float64) - Y).max()) <= tol


def entries(cache: Path) -> int:
    return bertfeat.cache.store.cache_info(cache)["entries"]


def dedup_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.startswith(".dedup-"))


@pytest.fixture(scope="module")
def client():
    with dask_local_client(n_workers=1, threads_per_worker=1, processes=False) as c:
        yield c


def engine_kw(engine: str, request, blocksize="3KiB") -> dict:
    """extract()'s keywords for an engine: Dask on the module's client, the input cut into partitions of blocksize."""
    if engine == "dask":
        return dict(engine="dask", client=request.getfixturevalue("client"), blocksize=blocksize)
    return {}


def out_path(tmp_path: Path, engine: str, stem: str) -> Path:
    """An output: a Parquet file (local engine) or a directory of part files (Dask)."""
    return tmp_path / (f"{stem}.parquet" if engine == "local" else f"{stem}_dask")


# --------------------------------------------------------------------------- 1. an edited corpus encodes only its new texts
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_rerun_on_an_edited_corpus_encodes_only_new_texts(tmp_path, request, engine):
    kw = dict(chunk_rows=16, **engine_kw(engine, request))
    cache = tmp_path / "cache"
    v1 = corpus(tmp_path / "v1.csv", base_rows())
    s = extract(v1, out_path(tmp_path, engine, "v1"), cache=cache, **kw)
    assert (s.rows_written, s.rows_encoded, s.rows_reused, s.cache) == (120, 120, 0, str(cache))
    assert entries(cache) == 120

    rows, n_new = edit(base_rows())
    v2 = corpus(tmp_path / "v2.csv", rows)
    out = out_path(tmp_path, engine, "v2")
    s = extract(v2, out, cache=cache, **kw)
    assert (s.rows_written, s.rows_encoded, s.rows_reused, s.cache_repaired) == (len(rows), n_new, len(rows) - n_new, 0)
    assert (n_new, len(rows)) == (30, 125)
    clean = extract(v2, tmp_path / "clean.parquet", cache=False, chunk_rows=16)
    assert (clean.rows_encoded, clean.rows_reused, clean.cache) == (125, 0, None)
    assert_same_features(out, tmp_path / "clean.parquet")
    assert features(out).column("id").to_pylist() == [r[0] for r in rows]  # input order, not the cache's
    if engine == "dask":
        assert len(list(out.glob("part-*.parquet"))) > 2
    meta = json.loads((out / "_bertfeat.json").read_text()) if engine == "dask" else metadata(out)
    assert (meta["rows"]["encoded"], meta["rows"]["reused"], meta["cache"]) == (30, 95, str(cache))
    assert entries(cache) == 150


def test_both_engines_share_one_cache(tmp_path, client):
    """A cache filled by the local engine is fully reused by the Dask engine, and the other way round."""
    cache = tmp_path / "cache"
    a = corpus(tmp_path / "a.csv", base_rows(60))
    b = corpus(tmp_path / "b.csv", [(f"t{i}", t) for i, t in enumerate(TREC[:40])])
    assert extract(a, tmp_path / "a.parquet", cache=cache).rows_encoded == 60
    s = extract(a, tmp_path / "a_dask", cache=cache, engine="dask", client=client, blocksize="2KiB")
    assert (s.rows_encoded, s.rows_reused) == (0, 60)
    assert extract(b, tmp_path / "b_dask", cache=cache, engine="dask", client=client, blocksize=None).rows_encoded == 40
    s = extract(b, tmp_path / "b.parquet", cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (0, 40)
    assert_same_features(tmp_path / "a_dask", tmp_path / "a.parquet")
    assert_same_features(tmp_path / "b_dask", tmp_path / "b.parquet")


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_full_and_truncated_vectors_are_never_served_for_each_other(tmp_path, request, engine):
    """The cache holds a run's final vectors (after the model's modules and truncate_dim's cut), under a fingerprint
    that holds truncate_dim: full, truncated, then each again, each run reads back its own width and values; a cut
    of every feature (32) is a plain run and reuses its vectors."""
    kw = engine_kw(engine, request)
    cache = tmp_path / "cache"
    rows = base_rows(40)
    src = corpus(tmp_path / "c.csv", rows)
    full = tiny_encoder().encode([t for _, t in rows])
    for i, (n, encoded) in enumerate([(None, 40), (8, 40), (None, 0), (8, 0), (5, 40), (32, 0)]):
        out = out_path(tmp_path, engine, f"o{i}")
        s = extract(src, out, cache=cache, truncate_dim=n, **kw)
        assert (s.rows_encoded, s.rows_reused, s.dim) == (encoded, 40 - encoded, n or 32), n
        assert_within(embeddings(features(out)), np.ascontiguousarray(full[:, :n]))
        meta = json.loads((out / "_bertfeat.json").read_text()) if engine == "dask" else metadata(out)
        assert meta["fingerprint"].get("truncate_dim") == (None if n == 32 else n)  # absent without a cut: the
    assert len(bertfeat.cache.store.cache_info(cache)["fingerprints"]) == 3 and entries(cache) == 120  # usual one


# --------------------------------------------------------------------------- 2. a changed setting reuses nothing
def _precision_kw(precision: str, monkeypatch) -> dict:
    from bertfeat.ops import gemm

    if precision == "bf16":
        monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")  # as tests/ops/test_bf16.py: the emulation where bf16 is not native
    else:
        try:
            gemm.resolve(precision)
        except BertfeatError as e:
            pytest.skip(f"{precision} not accelerated here: {e.message}")
    return {"precision": precision}


CHANGES = {
    "pooling": lambda mp: {"pooling": "cls"},
    "layers": lambda mp: {"layers": "-2"},
    "layers aggregated": lambda mp: {"layers": "-2,-1"},
    "layers concatenated": lambda mp: {"layers": "-2,-1", "layer_agg": "concat"},  # dim 64 in the same store
    # every row has more than 6 tokens: none is within both max lengths (a row within both is reused: below)
    "max_length": lambda mp: {"max_length": 6},
    "prompt": lambda mp: {"prompt": "query: "},
    "normalize": lambda mp: {"normalize": True},
    "truncate_dim": lambda mp: {"truncate_dim": 8},  # dim 8 in the same store
    "long_text": lambda mp: {"long_text": "chunk-mean", "max_length": 6, "stride": 2},
    "precision bf16": lambda mp: _precision_kw("bf16", mp),
    "precision int8": lambda mp: _precision_kw("int8", mp),
    "model": lambda mp: {"model": str(second_model())},
}


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """A cache holding one fingerprint (the tiny model's defaults) for 40 real sentences, copied per test."""
    tmp = tmp_path_factory.mktemp("filled")
    src = corpus(tmp / "c.csv", base_rows(40))
    s = extract(src, tmp / "o.parquet", cache=tmp / "cache")
    assert s.rows_encoded == 40
    return src, tmp / "cache"


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_setting_reuses_nothing(tmp_path, capsys, monkeypatch, filled_cache, change):
    import shutil

    src, filled = filled_cache
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    kw = CHANGES[change](monkeypatch)
    s = extract(src, tmp_path / "o.parquet", cache=cache, **kw)
    assert (s.rows_encoded, s.rows_reused) == (40, 0)
    clean = tmp_path / "clean.parquet"
    extract(src, clean, cache=False, **kw)
    assert_same_features(tmp_path / "o.parquet", clean)  # the new setting's vectors, not the cached ones
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err) == (0, "")
    assert out.splitlines()[3:5] == ["entries       80", "fingerprints  2"]
    # and the same setting again reuses all of it
    s = extract(src, tmp_path / "again.parquet", cache=cache, **kw)
    assert (s.rows_encoded, s.rows_reused) == (0, 40)


def long_text_rows() -> list[tuple[str, str]]:
    """44 rows, 10 of them longer than max_length 32 tokens: 40 real sentences (6 are longer, 2 exactly 32 tokens)
    and 4 texts of several sentences joined."""
    rows = base_rows(40)
    for i in range(4):
        rows.insert(7 + 9 * i, (f"long{i}", " ".join(SST2[100 + 5 * i:105 + 5 * i])))
    return rows


def bits(path: Path) -> np.ndarray:
    return embeddings(features(path)).view(np.uint32)


def same_features(a: Path, b: Path) -> bool:
    """Two outputs' features: the same bits where rows are bit for bit (rows_bit_for_bit), else within 1e-5
    (NOT_BIT_FOR_BIT: a row reused from the cache was encoded in another batch than the clean run's)."""
    if rows_bit_for_bit():
        return np.array_equal(bits(a), bits(b))
    return np.allclose(embeddings(features(a)), embeddings(features(b)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_long_text_setting_reuses_the_rows_within_max_length(tmp_path, request, engine):
    """The long-text policy and stride change only the vectors of rows longer than max length: a row within it is
    the same bits under each (one window, the text's own tokens), so a run with another policy reuses it and encodes
    only the long rows (before: every row). Each run equals its own settings' run without a cache, bit for bit, ids
    and token counts (the long rows' truncated / n_chunks) included."""
    kw = dict(max_length=32, chunk_rows=8, **engine_kw(engine, request))
    cache = tmp_path / "cache"
    src = corpus(tmp_path / "c.csv", long_text_rows())
    runs = [({"long_text": "truncate"}, 44, 0, 0),  # (settings, encoded, reused, rejected)
            ({"long_text": "chunk-mean", "stride": 8}, 10, 34, 0),
            ({"long_text": "chunk-max", "stride": 4}, 10, 34, 0),
            ({"long_text": "error", "on_bad_row": "skip"}, 0, 34, 10),
            ({"long_text": "chunk-mean", "stride": 8}, 0, 44, 0),
            ({"long_text": "truncate"}, 0, 44, 0)]
    for i, (setting, encoded, reused, rejected) in enumerate(runs):
        out, clean = out_path(tmp_path, engine, f"o{i}"), tmp_path / f"clean{i}.parquet"
        s = extract(src, out, cache=cache, **kw, **setting)
        assert (s.rows_encoded, s.rows_reused, s.rows_rejected) == (encoded, reused, rejected), setting
        c = extract(src, clean, cache=False, max_length=32, chunk_rows=8, **setting)
        assert (c.rows_encoded, c.rows_rejected) == (44 - rejected, rejected)
        assert features(out).column("id").to_pylist() == features(clean).column("id").to_pylist()
        for col in COUNTS:
            assert features(out).column(col).to_pylist() == features(clean).column(col).to_pylist(), (setting, col)
        assert same_features(out, clean), setting
    assert sum(n > 1 for n in features(tmp_path / "clean1.parquet").column("n_chunks").to_pylist()) == 10
    assert sum(features(tmp_path / "clean0.parquet").column("truncated").to_pylist()) == 10
    # each policy's own fingerprint holds only what it encoded: the long rows under chunk-mean and chunk-max, none
    # under error (its long rows refused)
    assert sorted(f["entries"] for f in bertfeat.cache.store.cache_info(cache)["fingerprints"]) == [0, 10, 10, 44]


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_max_length_setting_reuses_the_rows_within_both(tmp_path, request, engine):
    """Another max length changes only the vectors of the rows longer than one of the two: a row within both is
    tokenized whole, at its own positions, so its vector is the same bits, and a run with another max length (and
    another long-text policy too) reuses it, encoding only the others (before: every row). Each run equals its own
    settings' run without a cache, bit for bit, ids and token counts included. The corpus' rows have 7 to 136
    tokens: 10 of them 16 at most, 34 at most 32, 39 at most 48, 40 at most 64, 42 at most 128."""
    kw = dict(chunk_rows=8, **engine_kw(engine, request))
    cache = tmp_path / "cache"
    src = corpus(tmp_path / "c.csv", long_text_rows())
    runs = [({"max_length": 32}, 44, 0, 0),  # (settings, encoded, reused, rejected)
            ({"max_length": 64}, 10, 34, 0),  # the 34 rows within 32
            ({"max_length": 16}, 34, 10, 0),  # the 10 within 16
            # the 34 within 32 and 5 of the 64 run's within 48 (34 to 41 tokens); not the 50-token one
            ({"max_length": 48, "long_text": "chunk-mean", "stride": 8}, 5, 39, 0),
            # the 40 within 64; 77 and 84 tokens were truncated at 64 and in windows at 48
            ({"max_length": 128}, 4, 40, 0),
            ({"max_length": 64, "long_text": "error", "on_bad_row": "skip"}, 0, 40, 4),
            ({"max_length": 32}, 0, 44, 0)]
    for i, (setting, encoded, reused, rejected) in enumerate(runs):
        out, clean = out_path(tmp_path, engine, f"o{i}"), tmp_path / f"clean{i}.parquet"
        s = extract(src, out, cache=cache, **kw, **setting)
        assert (s.rows_encoded, s.rows_reused, s.rows_rejected) == (encoded, reused, rejected), setting
        c = extract(src, clean, cache=False, chunk_rows=8, **setting)
        assert (c.rows_encoded, c.rows_rejected) == (44 - rejected, rejected)
        assert features(out).column("id").to_pylist() == features(clean).column("id").to_pylist()
        for col in COUNTS:
            assert features(out).column(col).to_pylist() == features(clean).column(col).to_pylist(), (setting, col)
        assert same_features(out, clean), setting
    n_tokens = features(tmp_path / "clean0.parquet").column("n_tokens").to_pylist()
    assert [sum(n <= m for n in n_tokens) for m in (16, 32, 48, 64, 128)] == [10, 34, 39, 40, 42]
    # each fingerprint holds only what its run encoded
    assert sorted(f["entries"] for f in bertfeat.cache.store.cache_info(cache)["fingerprints"]) == [0, 4, 5, 10, 34, 44]


def test_the_settings_of_another_max_length_are_that_runs(tmp_path):
    """settings_at_length (what a cached fingerprint of another max length must hold to serve a run's rows) is the key
    a run at that max length makes, its prompt's keys included; None when the prompt's tokens left out of the pooling
    are fewer at one max length (the prompt cut there): a row's pooled tokens would differ."""
    from dataclasses import replace

    from bertfeat.cache.store import cache_fingerprint, settings_at_length
    from bertfeat.model.encoder import Encoder
    from extract_util import tiny_st_model

    model = tiny_st_model(tmp_path / "st")
    pooling = json.loads((model / "1_Pooling" / "config.json").read_text())
    (model / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
    enc = Encoder(model)
    prompt = "a prompt of a dozen words for the tiny model to leave out here: "
    assert [enc.prompt_length(prompt, m) for m in (128, 24, 16, 10)] == [16, 16, 15, 9]
    for spec in (enc.spec(max_length=32), enc.spec(max_length=32, prompt=prompt)):
        _, settings = cache_fingerprint(enc, spec)
        for m in (24, 64, 128):
            assert settings_at_length(enc, spec, settings, m) == cache_fingerprint(enc, replace(spec, max_length=m))[1]
    spec = enc.spec(max_length=64, prompt=prompt)
    for m in (10, 16):  # the prompt's 17 tokens cut: 9 and 15 of them left out, not 16
        assert settings_at_length(enc, spec, cache_fingerprint(enc, spec)[1], m) is None
    assert settings_at_length(enc, enc.spec(max_length=64), cache_fingerprint(enc, enc.spec(max_length=64))[1], 10)


def test_a_prompt_given_by_its_name_or_its_text_reuses_every_row(tmp_path):
    """--prompt-name doc and --prompt "passage: " (the doc prompt's text) give the same vectors: a re-run that names
    the prompt the other way reuses every row, long ones too (before: the prompt's name was in the key, and every
    row was encoded again); with another long-text policy as well, the rows within max length. Each run equals its
    own settings' run without a cache, bit for bit; another prompt text reuses nothing."""
    from extract_util import tiny_st_model

    model = tiny_st_model(tmp_path / "st")
    (model / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "doc": "passage: "}, "default_prompt_name": "query"}))
    kw = dict(model=str(model), max_length=32, chunk_rows=8)
    cache = tmp_path / "cache"
    src = corpus(tmp_path / "c.csv", long_text_rows())
    runs = [({"prompt_name": "doc"}, 44, 0),  # (settings, encoded, reused)
            ({"prompt": "passage: "}, 0, 44),
            ({}, 44, 0),  # the model's default prompt, query
            ({"prompt": "query: "}, 0, 44),
            ({"prompt_name": "query"}, 0, 44),
            ({"prompt": "passage: ", "long_text": "chunk-mean", "stride": 8}, 14, 30),  # 14 rows past 32 with it
            ({"prompt_name": "doc", "long_text": "chunk-mean", "stride": 8}, 0, 44),
            ({"prompt": "passage:"}, 44, 0)]
    for i, (setting, encoded, reused) in enumerate(runs):
        out, clean = tmp_path / f"o{i}.parquet", tmp_path / f"clean{i}.parquet"
        s = extract(src, out, cache=cache, **kw, **setting)
        assert (s.rows_encoded, s.rows_reused) == (encoded, reused), setting
        extract(src, clean, cache=False, **kw, **setting)
        assert features(out).column("id").to_pylist() == features(clean).column("id").to_pylist()
        for col in COUNTS:
            assert features(out).column(col).to_pylist() == features(clean).column(col).to_pylist(), (setting, col)
        assert same_features(out, clean), setting
    assert sum(n > 1 for n in features(tmp_path / "clean5.parquet").column("n_chunks").to_pylist()) == 14
    assert same_features(tmp_path / "clean0.parquet", tmp_path / "clean1.parquet")
    assert not np.array_equal(bits(tmp_path / "clean0.parquet"), bits(tmp_path / "clean2.parquet"))


def test_a_changed_tokenizer_file_reuses_nothing(tmp_path):
    """The same model folder (same path, same weights) with its tokenizer_config.json edited in place: the key holds
    the folder's files, so nothing is reused, and the vectors are the new tokenizer's."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    src = corpus(tmp_path / "c.csv", [(f"t{i}", t) for i, t in enumerate(TREC[:30])])  # capitals: "What is ..."
    cache = tmp_path / "cache"
    assert extract(src, tmp_path / "a.parquet", model=str(model), cache=cache).rows_encoded == 30
    conf = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**conf, "do_lower_case": False}))
    s = extract(src, tmp_path / "b.parquet", model=str(model), cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (30, 0)
    extract(src, tmp_path / "clean.parquet", model=str(model), cache=False)
    assert_same_features(tmp_path / "b.parquet", tmp_path / "clean.parquet")
    a, b = embeddings(read_table(tmp_path / "a.parquet")), embeddings(read_table(tmp_path / "b.parquet"))
    assert np.abs(a - b).max() > 1e-3  # cased tokens: other vectors (reusing the old ones would have been wrong)
    assert len(bertfeat.cache.store.cache_info(cache)["fingerprints"]) == 2


@pytest.mark.parametrize("same", [{"chunk_rows": 7}, {"max_batch_tokens": 64}, {"threads": 1}, {"id_column": None}])
def test_a_setting_that_does_not_change_vectors_reuses_all(tmp_path, filled_cache, same):
    """The key holds what changes a vector, nothing else: chunking, batching, threads and ids reuse every row."""
    import shutil

    src, filled = filled_cache
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    s = extract(src, tmp_path / "o.parquet", cache=cache, **same)
    assert (s.rows_encoded, s.rows_reused) == (0, 40)
    assert len(bertfeat.cache.store.cache_info(cache)["fingerprints"]) == 1


# --------------------------------------------------------------------------- 3. duplicates of one run encoded once
def dup_rows(n_rows: int, n_distinct: int, seed: int = 3) -> list[tuple[str, str]]:
    """n_rows rows drawing from n_distinct texts: duplicates inside chunks and across them, first seen anywhere."""
    rng = random.Random(seed)
    texts = [TREC[i] for i in range(n_distinct)]
    picks = list(range(n_distinct)) + [rng.randrange(n_distinct) for _ in range(n_rows - n_distinct)]
    rng.shuffle(picks)
    return [(f"d{i:04d}", texts[k]) for i, k in enumerate(picks)]


def assert_each_row_encoded(out: Path, rows: list[tuple[str, str]], tmp_path: Path):
    """Each row of ``out`` holds its own text's features: those of a run over the distinct texts, one row each."""
    distinct = list(dict.fromkeys(t for _, t in rows))
    ref = tmp_path / "ref.parquet"
    s = extract(corpus(tmp_path / "distinct.csv", [(f"u{i}", t) for i, t in enumerate(distinct)]), ref, cache=False)
    assert (s.rows_encoded, s.rows_reused) == (len(distinct), 0)
    r = read_table(ref)
    at = {t: i for i, t in enumerate(distinct)}
    idx = [at[t] for _, t in rows]
    got = features(out)
    assert got.column("id").to_pylist() == [i for i, _ in rows]
    for c in COUNTS:
        assert got.column(c).to_pylist() == [r.column(c)[i].as_py() for i in idx], c
    assert_within(embeddings(got), embeddings(r)[idx])
    # and each row is what the model gives for its text alone (no reuse layer at all): Encoder.encode, row by row
    enc = tiny_encoder()
    probe = sorted(set(range(len(rows))[::7]) | {len(rows) - 1})
    want = np.concatenate([enc.encode([rows[i][1]]) for i in probe])
    assert_close(embeddings(got)[probe], want)


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_duplicates_in_one_run_are_encoded_once(tmp_path, request, engine):
    rows = dup_rows(150, 40)
    src = corpus(tmp_path / "c.csv", rows)
    out = out_path(tmp_path, engine, "o")
    # Dask: one partition here (several: the test below)
    s = extract(src, out, cache=False, chunk_rows=7, **engine_kw(engine, request, blocksize=None))
    assert (s.rows_written, s.rows_encoded, s.rows_reused, s.cache) == (150, 40, 110, None)
    assert_each_row_encoded(out, rows, tmp_path)


def test_dask_duplicates_across_partitions_are_encoded_once(tmp_path, client):
    """Issue 29: "within one run, identical (text, pair) rows are encoded once" - on the Dask engine too, where the
    corpus is cut into partitions."""
    rows = dup_rows(150, 40)
    src = corpus(tmp_path / "c.csv", rows)
    s = extract(src, tmp_path / "o_dask", cache=False, chunk_rows=7, engine="dask", client=client, blocksize="2KiB")
    assert len(list((tmp_path / "o_dask").glob("part-*.parquet"))) > 1
    assert_each_row_encoded(tmp_path / "o_dask", rows, tmp_path)
    assert (s.rows_written, s.rows_encoded, s.rows_reused) == (150, 40, 110)


def test_pairs_are_part_of_the_key(tmp_path):
    """(text, pair) is the row: one text with other pairs is another row; characters moved between text and pair
    do not make the same key; the same (text, pair) again is a duplicate."""
    a, b, c = SST2[0], SST2[1], SST2[2]
    words = SST2[3].split(" ")
    head, tail = " ".join(words[:3]), " ".join(words[3:])
    pairs = [(a, b), (a, c), (b, a), (a, b), (head, tail), (head + " " + words[3], " ".join(words[4:])), (a, c), (c, c)]
    rows = [[f"p{i}", t, p] for i, (t, p) in enumerate(pairs)]
    src = write_csv(tmp_path / "pairs.csv", ["id", "text", "pair"], rows)
    s = extract(src, tmp_path / "o.parquet", pair_column="pair", cache=tmp_path / "cache", chunk_rows=3)
    assert (s.rows_encoded, s.rows_reused) == (6, 2)  # (a, b) and (a, c) twice each
    ref = tmp_path / "ref.parquet"
    extract(src, ref, pair_column="pair", cache=False, chunk_rows=1)
    assert_same_features(tmp_path / "o.parquet", ref)
    X = embeddings(read_table(ref))
    assert np.abs(X[0] - X[1]).max() > 1e-3 and np.abs(X[0] - X[2]).max() > 1e-3  # other pairs, other vectors
    # the same texts without their pairs are other rows again
    src2 = corpus(tmp_path / "single.csv", [(f"q{i}", t) for i, (t, _) in enumerate(pairs)])
    s = extract(src2, tmp_path / "single.parquet", cache=tmp_path / "cache")
    assert (s.rows_encoded, s.rows_reused) == (5, 3)  # a, b, head, head+w3, c: none taken from the pair rows


def test_a_dedup_memory_that_is_no_number_of_bytes_is_an_error(tmp_path, monkeypatch, capsys):
    """BERTFEAT_DEDUP_MEMORY=garbage ran with the default 64 MiB without a word: refused naming it before the model
    loads, nothing written; unset, empty or blank, the default; a whole number of bytes (0 too) as given."""
    from bertfeat.cache.reuse import DEDUP_MEMORY, dedup_memory

    for value, budget in ((None, DEDUP_MEMORY), ("", DEDUP_MEMORY), (" ", DEDUP_MEMORY), ("2000", 2000), (" 0 ", 0)):
        if value is None:
            monkeypatch.delenv("BERTFEAT_DEDUP_MEMORY", raising=False)
        else:
            monkeypatch.setenv("BERTFEAT_DEDUP_MEMORY", value)
        assert dedup_memory() == budget, value
    src = corpus(tmp_path / "in.csv", [("a", "hello world")])
    out = tmp_path / "o.parquet"
    for value in ("garbage", "-5", "1e6", "64MiB", "1_000", "\u0663"):
        monkeypatch.setenv("BERTFEAT_DEDUP_MEMORY", value)
        fix = ("give a whole number of bytes, e.g. BERTFEAT_DEDUP_MEMORY=67108864 (64 MiB, the default; 0 keeps none in "
               "memory), or unset it")
        with pytest.raises(BertfeatError) as e:
            dedup_memory()
        assert e.value.message == f"BERTFEAT_DEDUP_MEMORY={value!r} is not a number of bytes - {fix}"
        assert run(capsys, "extract", src, "-o", out, "-m", tiny_model(), "-q") == (1, "", f"Error: {e.value.message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    monkeypatch.setenv("BERTFEAT_DEDUP_MEMORY", "")
    assert run(capsys, "extract", src, "-o", out, "-m", tiny_model(), "-q")[0] == 0


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_duplicates_spill_past_the_memory_budget(tmp_path, request, monkeypatch, engine):
    """BERTFEAT_DEDUP_MEMORY=2000 bytes holds ~6 vectors of the tiny model: the local run's duplicate store spills to
    a temporary file beside the output (Dask: the workers' shared run store instead), and the features and counts are
    still exact; the file is gone afterwards."""
    monkeypatch.setenv("BERTFEAT_DEDUP_MEMORY", "2000")
    made: list[Path] = []
    real = bertfeat.cache.reuse.VectorStore

    def spy(path, durable=True):
        made.append(Path(path))
        return real(path, durable)

    monkeypatch.setattr(bertfeat.cache.reuse, "VectorStore", spy)
    rows = dup_rows(200, 50, seed=5)
    src = corpus(tmp_path / "c.csv", rows)
    out = out_path(tmp_path, engine, "o")
    s = extract(src, out, cache=False, chunk_rows=6, **engine_kw(engine, request, blocksize=None))
    assert (s.rows_written, s.rows_encoded, s.rows_reused) == (200, 50, 150)
    if engine == "dask":  # this machine's workers share the run's store OUTPUT.partial/.dedup/: nothing in memory
        assert made == []
    else:
        assert len(made) == 1 and made[0].name.startswith(".dedup-"), made  # it did spill, once
        assert made[0].parent.name == out.name + ".partial"
    monkeypatch.setattr(bertfeat.cache.reuse, "VectorStore", real)
    assert_each_row_encoded(out, rows, tmp_path)
    assert dedup_files(tmp_path) == []
    assert no_leftovers(out) == [out.name] or engine == "dask"


def test_duplicates_of_a_refused_row_are_refused_too(tmp_path):
    """long_text="error", on_bad_row="skip": an over-long text is refused at each of its rows (in its chunk, in
    chunks read ahead before it was refused, and in later ones), with the same reason; nothing of it is cached."""
    long, short = " ".join(SST2[:6]), TREC[10:16]  # ~130 tokens; questions of ~10
    texts = [short[0], long, short[1], long, short[0], short[2], short[3], long, short[4], long, short[5], long]
    src = corpus(tmp_path / "c.csv", [(f"r{i}", t) for i, t in enumerate(texts)])
    kw = dict(max_length=48, long_text="error", on_bad_row="skip", chunk_rows=2, cache=tmp_path / "cache")
    s = extract(src, tmp_path / "o.parquet", **kw)
    assert (s.rows_written, s.rows_rejected, s.rows_encoded, s.rows_reused) == (7, 5, 6, 1)
    t = read_table(tmp_path / "o.parquet")
    assert t.column("id").to_pylist() == [f"r{i}" for i, x in enumerate(texts) if x != long]
    rejects = (tmp_path / "o.parquet.rejects.csv").read_text().splitlines()
    assert [r.split(",")[:2] for r in rejects[1:]] == [[str(i), f"r{i}"] for i, x in enumerate(texts) if x == long]
    assert len({r.split(",", 2)[2] for r in rejects[1:]}) == 1, rejects  # one reason, the same words
    assert entries(tmp_path / "cache") == 6
    s = extract(src, tmp_path / "again.parquet", **kw)  # refused again, the rest reused
    assert (s.rows_rejected, s.rows_encoded, s.rows_reused) == (5, 0, 7)
    assert (tmp_path / "again.parquet.rejects.csv").read_text().splitlines() == rejects
    assert_same_features(tmp_path / "again.parquet", tmp_path / "o.parquet")


def test_spilled_duplicates_survive_ctrl_c_and_resume(tmp_path, monkeypatch):
    """A run stopped (Ctrl-C) after its duplicate store spilled leaves no .dedup-* file in its partial directory, and
    --resume finishes with the uninterrupted run's output."""
    from extract_util import Interrupt

    monkeypatch.setenv("BERTFEAT_DEDUP_MEMORY", "2000")
    rows = dup_rows(120, 30, seed=11)
    src = corpus(tmp_path / "c.csv", rows)
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        extract(src, out, cache=False, chunk_rows=6, progress=Interrupt(8))
    partial = tmp_path / "o.parquet.partial"
    assert len(list(partial.glob("part-*.parquet"))) == 8
    assert dedup_files(tmp_path) == []
    s = extract(src, out, cache=False, chunk_rows=6, resume=True)
    assert (s.chunks_resumed, s.rows_written) == (8, 120)
    assert s.rows_encoded + s.rows_reused == 120 and s.rows_encoded >= 30
    assert_each_row_encoded(out, rows, tmp_path)
    assert dedup_files(tmp_path) == [] and no_leftovers(out) == ["o.parquet"]


# --------------------------------------------------------------------------- 4. a corrupted cache
def test_damaged_entries_are_encoded_again_and_repaired(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv", base_rows(40))
    cache = tmp_path / "cache"
    args = ["--model", tiny_model(), "--id-column", "id", "--chunk-rows", 8, "--cache", cache]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "a.parquet", *args)
    assert rc == 0, err
    db = sqlite3.connect(cache / DB_NAME)
    (fp,), = db.execute("SELECT DISTINCT fp FROM vectors").fetchall()
    keys = [k for (k,) in db.execute("SELECT key FROM vectors ORDER BY key LIMIT 4")]
    vec = bytearray(db.execute("SELECT vec FROM vectors WHERE key=?", (keys[0],)).fetchone()[0])
    vec[5] ^= 0x40  # one flipped bit of a float
    db.execute("UPDATE vectors SET vec=? WHERE fp=? AND key=?", (bytes(vec), fp, keys[0]))
    db.execute("UPDATE vectors SET vec=substr(vec, 1, 64) WHERE fp=? AND key=?", (fp, keys[1]))  # half a vector
    db.execute("UPDATE vectors SET n_tokens=n_tokens+1 WHERE fp=? AND key=?", (fp, keys[2]))  # a count
    db.execute("UPDATE vectors SET vec=zeroblob(length(vec)) WHERE fp=? AND key=?", (fp, keys[3]))  # zeros
    db.commit()
    db.close()

    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "b.parquet", *args)
    assert rc == 0, err
    assert [line.split()[:2] for line in err.splitlines() if line.startswith("rows ")][:4] == [
        ["rows", "read"], ["rows", "written"], ["rows", "encoded"], ["rows", "reused"]]
    assert summary_line(err, "rows encoded") == "rows encoded 4"
    assert summary_line(err, "rows reused") == "rows reused 36"
    assert summary_line(err, "cache") == f"cache {cache} (4 damaged entries encoded again)"
    assert metadata(tmp_path / "b.parquet")["rows"]["encoded"] == 4
    clean = extract(src, tmp_path / "clean.parquet", cache=False, chunk_rows=8)
    assert clean.rows_encoded == 40
    assert_same_features(tmp_path / "b.parquet", tmp_path / "clean.parquet")

    s = extract(src, tmp_path / "c.parquet", cache=cache, chunk_rows=8)  # repaired: everything reused again
    assert (s.rows_encoded, s.rows_reused, s.cache_repaired) == (0, 40, 0)
    assert_same_features(tmp_path / "c.parquet", tmp_path / "clean.parquet")


def cache_then_altered(tmp_path, n: int, sql: str | None = None):
    """(src, cache): a corpus of ``n`` rows and the cache one extract of it filled (writing a.parquet), then changed
    by ``sql`` when given (a damaged or foreign cache)."""
    src = corpus(tmp_path / "c.csv", base_rows(n))
    cache = tmp_path / "cache"
    extract(src, tmp_path / "a.parquet", cache=cache)
    if sql:
        with sqlite3.connect(cache / DB_NAME) as db:
            db.execute(sql)
        db.close()
    return src, cache


def test_damaged_entries_on_the_dask_engine(tmp_path, client):
    src, cache = cache_then_altered(
        tmp_path, 30, "UPDATE vectors SET vec=zeroblob(length(vec)) WHERE key IN (SELECT key FROM vectors ORDER BY key LIMIT 2)")
    s = extract(src, tmp_path / "b_dask", cache=cache, engine="dask", client=client, blocksize=None)
    assert (s.rows_encoded, s.rows_reused, s.cache_repaired) == (2, 28, 2)
    assert_same_features(tmp_path / "b_dask", tmp_path / "a.parquet")
    data = (cache / DB_NAME).read_bytes()
    (cache / DB_NAME).write_bytes(data[:100] + os.urandom(len(data) - 100))  # damaged: refused before any task
    out = tmp_path / "run" / "c_dask"
    with pytest.raises(CacheError, match=rf"^the cache {re.escape(str(cache / DB_NAME))} is damaged \(database disk image is malformed\)"):
        extract(src, out, cache=cache, engine="dask", client=client, blocksize=None)
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_cache_file_is_one_error_line(tmp_path, capsys, damage):
    src, cache = cache_then_altered(tmp_path, 20)
    db = cache / DB_NAME
    if damage == "garbage":
        db.write_bytes(os.urandom(64 << 10))
    else:
        data = db.read_bytes()
        db.write_bytes(data[:100] + os.urandom(len(data) - 100))  # the header kept, every page garbage
    out = tmp_path / "run" / "b.parquet"
    out.parent.mkdir()
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--cache", cache)
    assert rc == 1
    assert stdout == ""
    assert len(err.splitlines()) == 1, err
    if damage == "garbage":  # no header left to tell whose file it is: refused as not bertfeat's, and not written
        assert err == (f"Error: {db} is not a bertfeat vector cache: it is not a SQLite database - bertfeat changed "
                       f"nothing in it: give --cache a directory of its own (it is made if missing), or delete {db} if "
                       "it was a bertfeat cache that got damaged\n")
    else:
        assert err == (f"Error: the cache {db} is damaged (database disk image is malformed) - delete {db} (its vectors "
                       "are recomputed by the next run), or use another cache directory\n")
    assert list(out.parent.iterdir()) == []  # nothing written, not even the partial directory
    rc, stdout, err = run(capsys, "cache", "info", cache)
    assert (rc, stdout, len(err.splitlines())) == (1, "", 1) and err.startswith("Error: ") and str(db) in err


def test_a_cache_of_another_format_is_one_error_line(tmp_path, capsys):
    src, cache = cache_then_altered(tmp_path, 5, "UPDATE meta SET value='99' WHERE key='format'")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "b.parquet", "--model", tiny_model(), "--cache", cache)
    assert (rc, out) == (1, "")
    assert err == (f"Error: the cache {cache / DB_NAME} has format 99, this bertfeat reads format 2 - use another --cache "
                   f"directory, or delete {cache / DB_NAME} (its vectors are recomputed)\n")
    assert not (tmp_path / "b.parquet").exists()


def test_a_cache_locked_too_long_is_one_error_line(tmp_path, capsys, monkeypatch):
    """Another process holding the write lock past the busy timeout (120 s; 1 s here): one Error line naming the
    file, nothing written."""
    monkeypatch.setattr(bertfeat.cache.store, "BUSY_TIMEOUT_S", 1.0)
    src = corpus(tmp_path / "c.csv", base_rows(5))
    cache = tmp_path / "cache"
    extract(src, tmp_path / "a.parquet", cache=cache)
    holder = sqlite3.connect(cache / DB_NAME, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, as a run committing a chunk holds it
        rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "b.parquet", "--model", tiny_model(), "--cache", cache)
    finally:
        holder.close()
    assert (rc, out) == (1, "")
    assert err == (f"Error: the cache {cache / DB_NAME} stayed locked by another process for 1 s while writing - let the "
                   "other run finish, or use another cache directory\n")
    assert no_leftovers(tmp_path / "b.parquet") == []


def test_a_cache_failing_mid_run_is_one_error_line(tmp_path, capsys, monkeypatch):
    """The cache failing on the third chunk's write (a full disk, say): one Error line, no output; the finished
    chunks stay in OUTPUT.partial/ for --resume, and the chunks committed before stay in the cache for any run."""
    real_put = bertfeat.cache.store.VectorStore.put
    calls = []

    def put(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise CacheError(f"cannot write the cache {self.path}: the disk is full", "free disk space, or use another cache directory")
        return real_put(self, *a, **k)

    monkeypatch.setattr(bertfeat.cache.store.VectorStore, "put", put)
    src = corpus(tmp_path / "c.csv", base_rows(40))
    cache = tmp_path / "cache"
    out = tmp_path / "o.parquet"
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--cache", cache, "--chunk-rows", 8, "-q")
    assert (rc, stdout) == (1, "")
    assert err == (f"Error: cannot write the cache {cache / DB_NAME}: the disk is full - free disk space, or use another "
                   f"cache directory; then rerun with --resume to continue (2 finished chunk(s) are kept in {out}.partial)\n")
    assert not out.exists()
    assert sorted(p.name for p in (tmp_path / "o.parquet.partial").glob("part-*")) == ["part-000000.parquet", "part-000001.parquet"]
    monkeypatch.undo()
    assert entries(cache) == 16
    s = extract(src, out, cache=cache, chunk_rows=8, resume=True, id_column=None)  # the two finished chunks as they were
    assert (s.rows_encoded, s.rows_reused, s.chunks_resumed) == (40, 0, 2)
    s = extract(src, out, cache=cache, chunk_rows=8, overwrite=True)  # a fresh run: everything from the cache
    assert (s.rows_encoded, s.rows_reused) == (0, 40)


# --------------------------------------------------------------------------- 4b. a cache write failing: what, where, the fix, --resume
def failing_write(monkeypatch, error: BaseException, at: int) -> None:
    """The cache's ``at``-th write (a chunk's new vectors) fails inside the store with ``error``: its connection's
    statements raise it, as SQLite or the file system would (the earlier writes succeed)."""
    from test_vcache import _Failing

    real_put = bertfeat.cache.store.VectorStore.put
    calls = []

    def put(self, *a, **k):
        calls.append(1)
        if len(calls) != at:
            return real_put(self, *a, **k)
        db, self.db = self.db, _Failing(self.db, error)
        try:
            return real_put(self, *a, **k)
        finally:
            self.db = db

    monkeypatch.setattr(bertfeat.cache.store.VectorStore, "put", put)


FULL_FIX = "free disk space there, or run with --no-cache or another --cache directory"


@pytest.mark.parametrize("error, what, fix", [
    (OSError(errno.ENOSPC, "No space left on device"), ": no space left on the device", FULL_FIX),
    (sqlite3.OperationalError("database or disk is full"), ": no space left on the device", FULL_FIX),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), ": disk quota exceeded",
     "free space under your quota, or run with --no-cache or another --cache directory"),
    (OSError(errno.EIO, "Input/output error"), " (Input/output error)",
     "its file system may be full, over quota or too small for the file, or the disk failed: " + FULL_FIX),
], ids=["enospc", "sqlite-full", "edquot", "eio"])
def test_a_cache_write_failure_mid_run_names_the_cache_the_fix_and_resume(tmp_path, capsys, monkeypatch, error, what,
                                                                          fix):
    """The cache's disk full (or over quota, or failing) on the third chunk: exit 1 and one line that says what
    happened, where (the cache's file), the fix (free space, or --no-cache / another --cache) and that --resume
    continues from the two finished chunks, which are kept (it said "the disk is full - free disk space, or use
    another cache directory", and an OSError named the output's partial directory). Resumed without the cache, the
    output is the uninterrupted run's, bit for bit."""
    src = corpus(tmp_path / "c.csv", base_rows(40))
    cache, out = tmp_path / "cache", tmp_path / "o.parquet"
    args = ("--model", tiny_model(), "--chunk-rows", 8, "-q")
    failing_write(monkeypatch, error, at=3)
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--cache", cache, *args)
    assert (rc, stdout) == (1, "")
    assert err == (f"Error: cannot write the cache {cache / DB_NAME}{what} - {fix}; then rerun with --resume to continue "
                   f"(2 finished chunk(s) are kept in {out}.partial)\n")
    assert not out.exists() and len(list((tmp_path / "o.parquet.partial").glob("part-*"))) == 2
    monkeypatch.undo()
    assert entries(cache) == 16  # the two chunks committed before stay
    rc, _, err = run(capsys, "extract", src, "-o", out, "--no-cache", *args, "--resume")
    assert rc == 0, err
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "ref.parquet", "--no-cache", *args)
    assert rc == 0, err
    assert read_table(out).replace_schema_metadata(None).equals(read_table(tmp_path / "ref.parquet").replace_schema_metadata(None))


def test_a_cache_write_failure_before_any_chunk_finished_does_not_name_resume(tmp_path, capsys, monkeypatch):
    """Nothing finished, nothing kept: the line gives the fix alone (no --resume, which would have nothing to continue)."""
    src = corpus(tmp_path / "c.csv", base_rows(20))
    cache, out = tmp_path / "cache", tmp_path / "o.parquet"
    failing_write(monkeypatch, OSError(errno.ENOSPC, "No space left on device"), at=1)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--cache", cache, "--chunk-rows", 8, "-q")
    assert (rc, err) == (1, f"Error: cannot write the cache {cache / DB_NAME}: no space left on the device - {FULL_FIX}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "cache"]  # no partial directory, no output


# --------------------------------------------------------------------------- 4c. a read-only cache: its hits read, nothing stored
def read_only(monkeypatch, cache: Path) -> None:
    """This process may not write ``cache`` or its file, as os.access tells it (a read-only mount, another user's
    files: the sandbox runs as root, whom permissions do not stop)."""
    real = os.access

    def access(path, mode, *a, **k):
        if mode & os.W_OK and Path(path).absolute().is_relative_to(cache.absolute()):
            return False
        return real(path, mode, *a, **k)

    monkeypatch.setattr(os, "access", access)


def half_cached(tmp_path: Path) -> tuple[Path, Path, Path, list]:
    """A cache holding 30 of a corpus' 60 distinct texts (and a writable copy of it), and the corpus: the 60 rows and
    10 repeats of new ones (a read-only cache cannot hold the run's own rows for their duplicates).
    -> (corpus, cache, copy, rows)."""
    cache = tmp_path / "cache"
    extract(corpus(tmp_path / "first.csv", base_rows(30)), tmp_path / "first.parquet", cache=cache)
    shutil.copytree(cache, tmp_path / "copy")
    rows = base_rows(60) + [(f"d{i:03d}", SST2[40 + i]) for i in range(10)]
    return corpus(tmp_path / "c.csv", rows), cache, tmp_path / "copy", rows


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_read_only_cache_is_read_and_nothing_is_stored(tmp_path, request, monkeypatch, engine):
    """A cache this process may not write (a team's on a read-only mount, a folder of another user) stopped every run
    with "cannot open the cache ... (unable to open database file)". Its hits are read, the rest encoded, nothing
    stored, and the output is the one a writable cache gives, bit for bit."""
    src, cache, copy, rows = half_cached(tmp_path)
    db = cache / DB_NAME
    before = (db.read_bytes(), entries(cache))
    kw = engine_kw(engine, request)
    writable = extract(src, out_path(tmp_path, engine, "writable"), cache=copy, chunk_rows=8, **kw)
    read_only(monkeypatch, cache)
    s = extract(src, out_path(tmp_path, engine, "ro"), cache=cache, chunk_rows=8, **kw)
    assert s.cache_read_only == f"no permission to write {db}"
    assert s.cache_notes() == [f"the cache {cache} is read-only (no permission to write {db}): the vectors it holds "
                               f"were reused, and the {s.rows_encoded} this run encoded were not stored - give --cache a "
                               "directory you can write to keep them"]
    assert features(out_path(tmp_path, engine, "ro")).equals(features(out_path(tmp_path, engine, "writable")))
    if engine == "local":
        assert (s.rows_encoded, s.rows_reused) == (writable.rows_encoded, writable.rows_reused) == (30, 40)
    else:  # partitions share the run's new rows (below), but two may meet one at the same moment and both encode it
        assert s.rows_encoded + s.rows_reused == 70 and 30 <= s.rows_encoded <= 40 and s.rows_reused >= 30
    monkeypatch.undo()
    assert (db.read_bytes(), entries(cache)) == before  # nothing stored, not even the fingerprint's last use
    assert s.to_dict()["cache_read_only"] == f"no permission to write {db}"


def test_a_dask_resume_with_a_writable_cache_is_not_called_read_only(tmp_path, request, monkeypatch):
    """A Dask run on a read-only cache, stopped after its partitions finished, then resumed with the cache writable:
    the resume took the kept partitions' read-only mark and said the cache was read-only, its rows not stored (found
    by review). Only this run's own tasks say what the cache was."""
    import bertfeat.run.dask

    src, cache, _, _ = half_cached(tmp_path)
    out = out_path(tmp_path, "dask", "o")
    kw = engine_kw("dask", request)
    read_only(monkeypatch, cache)

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bertfeat.run.dask.DaskRun, "total", stop)
    with pytest.raises(KeyboardInterrupt):
        extract(src, out, cache=cache, chunk_rows=8, **kw)
    assert len(list((tmp_path / "o_dask.partial").glob("part-*"))) >= 2
    monkeypatch.undo()
    s = extract(src, out, cache=cache, chunk_rows=8, resume=True, **kw)
    assert s.chunks_resumed >= 2 and s.cache_read_only is None
    assert not any("read-only" in n for n in s.cache_notes())


class TestDaskPartitionsShareDuplicatesBesideAReadOnlyCache:
    """The Dask engine made its run store (OUTPUT.partial/.dedup/) only without a cache: beside a read-only one each
    task kept its own, so a text met in several partitions was encoded once per partition (246 rows encoded where
    the local engine and --estimate said 153). Its tasks now share the run store, as without a cache."""

    def test_rows_encoded_as_the_local_engine_and_the_estimate(self, tmp_path, request, monkeypatch):
        cache = tmp_path / "cache"
        extract(corpus(tmp_path / "first.csv", base_rows(20)), tmp_path / "first.parquet", cache=cache)
        # 20 cached texts and 30 new ones, the new ones repeated in every part of the file (one partition each)
        rows = [(f"r{k}-{i:03d}", SST2[i]) for k in range(4) for i in range(50)]
        src = corpus(tmp_path / "dup.csv", rows)
        before = tree_digest(cache)
        read_only(monkeypatch, cache)
        local = extract(src, tmp_path / "local.parquet", cache=cache, chunk_rows=8)
        kw = engine_kw("dask", request, blocksize="2KiB")
        s = extract(src, tmp_path / "dask", cache=cache, chunk_rows=8, **kw)
        e = extract(src, tmp_path / "e", cache=cache, estimate=True, **kw)
        assert s.cache_read_only == local.cache_read_only == f"no permission to write {cache / DB_NAME}"
        assert (s.rows_encoded, s.rows_reused) == (local.rows_encoded, local.rows_reused) == (30, 170)
        assert (e.rows_distinct, round(e.rows_distinct * (1 - e.cached))) == (50, 30)
        assert_tables_match(features(tmp_path / "dask"), features(tmp_path / "local.parquet"))
        monkeypatch.undo()
        assert {k: v for k, v in tree_digest(cache).items() if not k.endswith(("-wal", "-shm"))} == before


def sqlite_refuses_writes(monkeypatch, cache: Path) -> None:
    """SQLite opens ``cache``'s file read-only while os.access allows writing it (a security module, a file opened
    read-only): its "attempt to write a readonly database" comes at the first write."""
    real = sqlite3.connect

    def read_only_connect(database, *a, **k):
        if isinstance(database, str) and database.startswith(cache.absolute().as_uri()):
            database = database.replace("mode=rw", "mode=ro")
        return real(database, *a, **k)

    monkeypatch.setattr(sqlite3, "connect", read_only_connect)


def test_a_write_sqlite_refuses_makes_the_cache_read_only_too(tmp_path, monkeypatch):
    """os.access may allow what SQLite refuses (a security module, a file opened read-only): its "attempt to write
    a readonly database" at the run's first write opens the cache again to read only, as above."""
    src, cache, copy, rows = half_cached(tmp_path)
    before = (cache / DB_NAME).read_bytes()
    sqlite_refuses_writes(monkeypatch, cache)
    s = extract(src, tmp_path / "ro.parquet", cache=cache, chunk_rows=8)
    assert (s.rows_encoded, s.rows_reused, s.cache_read_only) == (30, 40, "attempt to write a readonly database")
    monkeypatch.undo()
    extract(src, tmp_path / "writable.parquet", cache=copy, chunk_rows=8)
    assert features(tmp_path / "ro.parquet").equals(features(tmp_path / "writable.parquet"))
    assert (cache / DB_NAME).read_bytes() == before


def test_a_read_only_cache_through_the_cli(tmp_path, capsys, monkeypatch):
    """The command line says it once, beside the other cache notes (not under -q), and in the summary's cache line;
    ``cache info`` reads a read-only cache, ``cache clear`` refuses it and changes nothing."""
    src, cache, copy, rows = half_cached(tmp_path)
    db = cache / DB_NAME
    before = tree_digest(cache)
    read_only(monkeypatch, cache)
    args = ("--model", tiny_model(), "--id-column", "id", "--cache", cache)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", *args)
    assert rc == 0, err
    note = (f"the cache {cache} is read-only (no permission to write {db}): the vectors it holds were reused, and the "
            "30 this run encoded were not stored - give --cache a directory you can write to keep them")
    assert [line for line in err.splitlines() if "read-only" in line] == [  # the progress log's line, the summary's
        f"bertfeat extract: {note}", f"cache           {cache} (read-only: nothing stored)"]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "q.parquet", *args, "-q")
    assert (rc, err) == (0, "")
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err, out.splitlines()[3]) == (0, "", "entries       30")
    rc, out, err = run(capsys, "cache", "clear", cache)
    assert (rc, out, err) == (1, "", f"Error: cannot clear the cache {db}: it is read-only here (no permission to write "
                                     f"{db}) - bertfeat changed nothing in it: clear it where it can be written (as its "
                                     "owner, or on a writable mount), or delete its directory there\n")
    monkeypatch.undo()
    assert {k: v for k, v in tree_digest(cache).items() if not k.endswith(("-wal", "-shm"))} == before


def test_cache_clear_on_a_cache_sqlite_refuses_says_so_in_its_own_words(tmp_path, capsys, monkeypatch):
    """os.access allowed the clear and SQLite refused it: `cache clear` said "give --cache a directory you can write,
    or run with --no-cache", a run's flags that command does not have (found by review). It refuses as it refuses a
    cache os.access calls read-only, and changes nothing."""
    _, cache, _, _ = half_cached(tmp_path)
    db = cache / DB_NAME
    before = db.read_bytes()
    sqlite_refuses_writes(monkeypatch, cache)
    rc, out, err = run(capsys, "cache", "clear", cache)
    assert (rc, out, err) == (1, "", f"Error: cannot clear the cache {db}: it is read-only here (attempt to write a "
                                     "readonly database) - bertfeat changed nothing in it: clear it where it can be "
                                     "written (as its owner, or on a writable mount), or delete its directory there\n")
    monkeypatch.undo()
    assert db.read_bytes() == before and entries(cache) == 30


def test_a_cache_on_a_read_only_mount(tmp_path):
    """A real read-only mount (a bind mount in a mount namespace of its own; root is not stopped by permissions): the
    run reads the cache through the command line, stores nothing, and the folder is left byte for byte (SQLite can
    make no -wal / -shm there: the file is read alone, immutable)."""
    import shutil as sh

    if not sh.which("unshare") or subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {tmp_path} {tmp_path}"],
                                                 capture_output=True).returncode:
        from conftest import missing

        missing("a read-only bind mount needs `unshare -m` and mount (root, or CAP_SYS_ADMIN)")
    src, cache, copy, rows = half_cached(tmp_path)
    before = tree_digest(cache)
    ro = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$1" "$1" && shift && exec "$@"', "sh", str(cache)]
    p = subprocess.run(ro + cli("extract", src, "-o", tmp_path / "ro.parquet", "--model", tiny_model(), "--id-column",
                                "id", "--cache", cache, "--chunk-rows", 8), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert f"the cache {cache} is read-only (read-only file system): the vectors it holds were reused, and the 30 this " \
           "run encoded were not stored - give --cache a directory you can write to keep them" in p.stderr
    assert summary_line(p.stderr, "cache") == f"cache {cache} (read-only: nothing stored)"
    assert tree_digest(cache) == before
    extract(src, tmp_path / "writable.parquet", cache=copy, chunk_rows=8)
    assert features(tmp_path / "ro.parquet").equals(features(tmp_path / "writable.parquet"))


class TestAReadOnlyReaderMakesNoFileInTheCacheFolder:
    """A reader as another user, in a folder anyone can write (real users through setpriv): its mode=ro connection
    made vectors.sqlite3-wal / -shm there as its own (644), and from then on SQLite refused the owner's every write
    ("attempt to write a readonly database"): the owner's runs stored nothing and said to pick another directory."""

    OWNER, READER = 1001, 65534

    def as_user(self, uid: int, *args, python: bool = False) -> subprocess.CompletedProcess:
        """``python -m bertfeat ARGS`` (``python ARGS``) as ``uid`` (it may read every file: CAP_DAC_READ_SEARCH, as the tests' tree and
        model are root's; it writes only where anyone may)."""
        caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *caps,
               *([sys.executable, *args] if python else cli(*args))]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    @pytest.fixture
    def tmp_path(self):
        """A folder every user may enter (pytest's is root's alone; bertfeat checks the input with access(2), which
        takes no capability), with a copy of the tiny model; removed after."""
        import tempfile

        if not shutil.which("setpriv") or os.geteuid() != 0:
            pytest.skip("switching users needs setpriv and root")
        if subprocess.run(["setpriv", f"--reuid={self.READER}", "--regid=0", "--clear-groups", "true"]).returncode:
            pytest.skip("setpriv cannot switch users here")
        root = Path(tempfile.mkdtemp(prefix="bertfeat-users-"))
        try:
            root.chmod(0o755)
            shutil.copytree(tiny_model(), root / "model")
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def setup(self, tmp_path: Path) -> tuple[Path, Path]:
        folder, out = tmp_path / "c2", tmp_path / "out"
        for d in (folder, out):
            d.mkdir()
            d.chmod(0o777)  # anyone may write: the reader could make files there
        return folder, out

    def extract(self, uid: int, src: Path, out: Path, folder: Path) -> subprocess.CompletedProcess:
        model = src.parent / "model"
        p = self.as_user(uid, "extract", src, "-o", out, "--model", model, "--id-column", "id", "--cache", folder)
        assert p.returncode == 0, p.stderr
        return p

    def test_the_owner_still_stores_after_another_user_read(self, tmp_path):
        folder, out = self.setup(tmp_path)
        a = corpus(tmp_path / "a.csv", base_rows(20))
        b = corpus(tmp_path / "b.csv", base_rows(40))
        self.extract(self.OWNER, a, out / "o1.parquet", folder)
        assert sorted(p.name for p in folder.iterdir()) == [DB_NAME] and (folder / DB_NAME).stat().st_uid == self.OWNER
        p = self.extract(self.READER, b, out / "r.parquet", folder)
        assert f"no permission to write {folder / DB_NAME}" in p.stderr
        assert sorted(p.name for p in folder.iterdir()) == [DB_NAME]  # the reader made no file there
        p = self.extract(self.OWNER, b, out / "o2.parquet", folder)
        assert "read-only" not in p.stderr
        assert (summary_line(p.stderr, "rows encoded"), entries(folder)) == ("rows encoded 20", 40)

    def test_another_users_wal_and_shm_are_named(self, tmp_path):
        """What a reader of an earlier bertfeat left (made here as it did, by SQLite's mode=ro as the other user):
        the owner is told whose files stop its writes and to remove them, not to pick another directory."""
        folder, out = self.setup(tmp_path)
        a = corpus(tmp_path / "a.csv", base_rows(20))
        self.extract(self.OWNER, a, out / "o1.parquet", folder)
        uri = f"{(folder / DB_NAME).as_uri()}?mode=ro"
        p = self.as_user(self.READER, "-c", f"import sqlite3; sqlite3.connect({uri!r}, uri=True).execute('SELECT 1 FROM meta')",
                         python=True)
        assert p.returncode == 0, p.stderr
        left = sorted(p.name for p in folder.iterdir())
        assert left == [DB_NAME, f"{DB_NAME}-shm", f"{DB_NAME}-wal"]
        p = self.extract(self.OWNER, corpus(tmp_path / "b.csv", base_rows(30)), out / "o2.parquet", folder)
        assert (f"the cache {folder} is read-only ({DB_NAME}-wal and {DB_NAME}-shm belong to another user (nobody), made "
                "by a read-only run of an earlier bertfeat): the vectors it holds were reused, and the 10 this run encoded "
                "were not stored - remove those files while no run uses the cache (bertfeat makes its own again) to "
                "store a run's vectors") in p.stderr
        assert sorted(p.name for p in folder.iterdir()) == left
        for name in left[1:]:  # as the note says (root's look below would take them over)
            (folder / name).unlink()
        assert entries(folder) == 20
        p = self.extract(self.OWNER, corpus(tmp_path / "b.csv", base_rows(30)), out / "o3.parquet", folder)
        assert "read-only" not in p.stderr and entries(folder) == 30


# --------------------------------------------------------------------------- 5. two runs filling one cache at once
def cli(*args) -> list[str]:
    return [sys.executable, "-m", "bertfeat", *(str(a) for a in args)]


@pytest.mark.slow  # two / one `python -m bertfeat` subprocesses
def test_two_runs_fill_one_cache_at_once(tmp_path):
    cache = tmp_path / "cache"
    texts = SST2[:240]
    a = corpus(tmp_path / "a.csv", [(f"x{i:03d}", t) for i, t in enumerate(texts[:160])])
    b = corpus(tmp_path / "b.csv", [(f"x{i:03d}", t) for i, t in enumerate(texts) if i >= 80][::-1])
    union = corpus(tmp_path / "u.csv", [(f"x{i:03d}", t) for i, t in enumerate(texts)])
    common = ["--model", tiny_model(), "--id-column", "id", "--chunk-rows", 4, "--threads", 1, "--cache", cache]
    procs = [subprocess.Popen(cli("extract", src, "-o", tmp_path / f"{src.stem}.parquet", *common),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for src in (a, b)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    encoded = [int(summary_line(e, "rows encoded").split()[-1]) for e in errs]
    reused = [int(summary_line(e, "rows reused").split()[-1]) for e in errs]
    assert [e + r for e, r in zip(encoded, reused)] == [160, 160]
    print(f"two runs at once: rows encoded {encoded}, rows reused {reused}")
    assert 240 <= sum(encoded) <= 320  # the 80 shared texts encoded by one run or both, never lost
    assert entries(cache) == 240

    s = extract(union, tmp_path / "u.parquet", cache=cache, chunk_rows=4)
    assert (s.rows_encoded, s.rows_reused, s.cache_repaired) == (0, 240, 0)
    clean = tmp_path / "clean.parquet"
    extract(union, clean, cache=False)
    assert_same_features(tmp_path / "u.parquet", clean)
    ref = features(clean)
    pos = {i: k for k, i in enumerate(ref.column("id").to_pylist())}
    for name in ("a", "b"):
        t = features(tmp_path / f"{name}.parquet")
        idx = [pos[i] for i in t.column("id").to_pylist()]
        assert len(idx) == 160
        assert_within(embeddings(t), embeddings(ref)[idx])
        for c in COUNTS:
            assert t.column(c).to_pylist() == [ref.column(c)[k].as_py() for k in idx]


@pytest.mark.slow  # its own cluster of two worker processes
def test_dask_worker_processes_fill_one_cache_at_once(tmp_path):
    """Two Dask worker processes encode partitions side by side into one cache: the output is the local engine's,
    every row is in the cache once, and a re-run (local) reuses all of them."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    src = corpus(tmp_path / "c.csv", [(f"w{i:03d}", t) for i, t in enumerate(SST2[:160])])
    cache = tmp_path / "cache"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as c:
        s = extract(src, tmp_path / "o_dask", cache=cache, engine="dask", client=c, blocksize="2KiB", chunk_rows=5)
    assert len(list((tmp_path / "o_dask").glob("part-*.parquet"))) >= 4
    assert (s.rows_encoded, s.rows_reused, s.cache_repaired) == (160, 0, 0)
    assert entries(cache) == 160
    s = extract(src, tmp_path / "again.parquet", cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (0, 160)
    extract(src, tmp_path / "clean.parquet", cache=False)
    assert_same_features(tmp_path / "o_dask", tmp_path / "clean.parquet")
    assert_same_features(tmp_path / "again.parquet", tmp_path / "clean.parquet")


# --------------------------------------------------------------------------- 6. a run killed mid-write
@pytest.mark.slow  # two / one `python -m bertfeat` subprocesses
def test_a_run_killed_mid_write_leaves_a_usable_cache(tmp_path):
    cache = tmp_path / "cache"
    texts = SST2 + TREC
    src = corpus(tmp_path / "c.csv", [(f"k{i:03d}", t) for i, t in enumerate(texts)])
    out = tmp_path / "run" / "k.parquet"
    out.parent.mkdir()
    p = subprocess.Popen(cli("extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--chunk-rows", 2,
                             "--threads", 1, "--cache", cache),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    partial = out.parent / (out.name + ".partial")
    # a part is written after its chunk's vectors went to the cache
    sigkill_when(p, lambda: len(list(partial.glob("part-*.parquet"))) >= 5, poll=0.002)
    assert p.returncode == -signal.SIGKILL
    assert not out.exists()
    stored = entries(cache)
    print(f"killed after {stored} of {len(texts)} vectors stored")
    assert 10 <= stored < len(texts)
    with sqlite3.connect(cache / DB_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.close()

    s = extract(src, tmp_path / "next.parquet", cache=cache, chunk_rows=2)
    assert (s.rows_reused, s.rows_encoded, s.cache_repaired) == (stored, len(texts) - stored, 0)
    clean = tmp_path / "clean.parquet"
    extract(src, clean, cache=False)
    assert_same_features(tmp_path / "next.parquet", clean)
    assert entries(cache) == len(texts)


# --------------------------------------------------------------------------- 7. the command line
def fill(tmp_path: Path, capsys, *extra) -> Path:
    cache = tmp_path / "cache"
    src = corpus(tmp_path / "c.csv", base_rows(30))
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / f"o{len(list(tmp_path.glob('o*.parquet')))}.parquet",
                     "--model", tiny_model(), "--cache", cache, *extra)
    assert rc == 0, err
    return cache


def test_cache_info_lines(tmp_path, capsys):
    cache = fill(tmp_path, capsys)
    fill(tmp_path, capsys, "--pooling", "cls", "--max-length", 64)
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    size = sum(p.stat().st_size for p in cache.iterdir())
    assert lines[:5] == [f"cache         {cache}", f"file          {cache / DB_NAME}",
                         f"size on disk  {size / 1024:,.1f} KiB", "entries       60", "fingerprints  2"]
    info = bertfeat.cache.store.cache_info(cache)
    newest, oldest = info["fingerprints"]  # newest first
    assert newest["settings"]["pooling"] == "cls" and oldest["settings"]["pooling"] == "mean"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(newest["last_used"]))
    assert lines[5:8] == ["", f"{newest['fingerprint']}  30 entries, 3.8 KiB of vectors, last used {when}",
                          f"  model {tiny_model()} (dim 32): pooling cls, layers 2, no normalize, max length 64, truncate, "
                          f"tokenizers {tokenizers.__version__}, fp32"
                          + "".join(f", {newest['settings']['gemm'][k]}" for k in ("kernel", "blas", "kernels")
                                    if newest["settings"]["gemm"].get(k))]
    assert len(newest["fingerprint"]) == 32 and int(newest["fingerprint"], 16) >= 0
    assert lines[8] == "" and lines[9].startswith(f"{oldest['fingerprint']}  30 entries, 3.8 KiB of vectors, last used ")
    assert "pooling mean" in lines[10] and len(lines) == 11

    rc, out, err = run(capsys, "cache", "info", cache, "--json")
    assert (rc, err) == (0, "")
    d = json.loads(out)
    assert (d["entries"], d["file"], d["cache"]) == (60, str(cache / DB_NAME), str(cache))
    assert [f["fingerprint"] for f in d["fingerprints"]] == [newest["fingerprint"], oldest["fingerprint"]]
    assert [f["entries"] for f in d["fingerprints"]] == [30, 30]
    assert [f["bytes"] for f in d["fingerprints"]] == [30 * 32 * 4] * 2
    assert d["fingerprints"][0]["settings"]["max_length"] == 64 and d["fingerprints"][0]["dim"] == 32
    fill(tmp_path, capsys)  # the first settings used again: now the newest
    assert [f["fingerprint"] for f in bertfeat.cache.store.cache_info(cache)["fingerprints"]] == [oldest["fingerprint"], newest["fingerprint"]]


@pytest.mark.parametrize("settings", ["not json", "[]", "null", '"x"'])
def test_cache_info_shows_a_fingerprint_whose_settings_row_is_damaged(tmp_path, capsys, settings):
    """A fingerprints row whose settings are not a JSON object made `cache info` fail as 'unexpected JSONDecodeError
    (AttributeError) ... a bug in bertfeat'; extract and cache clear took it. It is shown as damaged, with the line
    that deletes its entries."""
    cache = fill(tmp_path, capsys)
    with sqlite3.connect(cache / DB_NAME) as db:
        db.execute("UPDATE fingerprints SET settings = ?", (settings,))
    db.close()
    fp = bertfeat.cache.store.cache_info(cache)["fingerprints"][0]
    assert (fp["settings"], fp["entries"]) == (None, 30)
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err) == (0, "")
    assert out.splitlines()[-1] == (f"  model {tiny_model()} (dim 32): settings unreadable (this fingerprint's row in the "
                                    f"cache is damaged; `bertfeat cache clear --fingerprint {fp['fingerprint']}` deletes "
                                    "its entries)")
    rc, out, err = run(capsys, "cache", "info", cache, "--json")
    assert (rc, err, json.loads(out)["fingerprints"][0]["settings"]) == (0, "", None)
    rc, out, err = run(capsys, "cache", "clear", cache, "--fingerprint", fp["fingerprint"])
    assert (rc, entries(cache)) == (0, 0), err


@pytest.mark.parametrize("last_used", [2.4e163, "yesterday", b"\x01"])
def test_cache_info_shows_a_fingerprint_whose_last_use_is_damaged(tmp_path, capsys, last_used):
    """A last_used value no date has (one bit flipped in its float: 2.4e163; text or bytes written over it) made
    `cache info` fail as 'unexpected OverflowError (TypeError) ... a bug in bertfeat' (found by the cache audit)."""
    cache = fill(tmp_path, capsys)
    with sqlite3.connect(cache / DB_NAME) as db:
        db.execute("UPDATE fingerprints SET last_used = ?", (last_used,))
    db.close()
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err) == (0, "")
    assert out.splitlines()[-2].endswith(" 30 entries, 3.8 KiB of vectors, last used unknown (this fingerprint's row "
                                         "in the cache is damaged)")
    rc, out, err = run(capsys, "cache", "info", cache, "--json")
    assert (rc, err) == (0, "")
    assert json.loads(out)["fingerprints"][0]["last_used"] is None


@pytest.mark.parametrize("side", ["-wal", "-shm"])
@pytest.mark.parametrize("kind", ["link", "directory"])
def test_a_side_file_sqlite_cannot_use_is_named(tmp_path, capsys, side, kind):
    """A -wal or -shm file that is a symbolic link or a directory: SQLite refuses it ('unable to open database file')
    and the run said to check the directory is writable and its disk has room (found by the cache audit). Now the
    file is named; the file a link points to is never written."""
    cache = fill(tmp_path, capsys)
    mine = tmp_path / "mine.txt"
    mine.write_text("a user's file\n")
    bad = cache / f"{DB_NAME}{side}"
    bad.unlink(missing_ok=True)
    bad.symlink_to(mine) if kind == "link" else bad.mkdir()
    what = ("a symbolic link (SQLite keeps its own file there, and follows no link)" if kind == "link" else
            "a directory (SQLite keeps its own file there)")
    said = (f"Error: cannot open the cache {cache / DB_NAME}: {DB_NAME}{side} beside it is {what} - remove {bad} "
            "while no run uses the cache (bertfeat changed nothing in it)\n")
    for argv in (["cache", "info", cache], ["cache", "clear", cache],
                 ["extract", corpus(tmp_path / "c.csv", base_rows(4)), "-o", tmp_path / "o.parquet", "--model",
                  tiny_model(), "--cache", cache, "-q"]):
        assert run(capsys, *argv)[::2] == (1, said)
    assert mine.read_text() == "a user's file\n"
    bad.unlink() if kind == "link" else bad.rmdir()
    assert entries(cache) == 30  # (the cache untouched)


def test_a_cache_path_that_is_a_link_to_nowhere_is_said_so(tmp_path, capsys):
    """--cache naming a broken symbolic link failed as 'cannot make the cache directory dangl (File exists)', and
    `cache info` said it 'does not exist'; a loop of links likewise. Nothing is made."""
    src = corpus(tmp_path / "c.csv", base_rows(4))
    (tmp_path / "dangl").symlink_to(tmp_path / "gone")
    (tmp_path / "la").symlink_to(tmp_path / "lb")
    (tmp_path / "lb").symlink_to(tmp_path / "la")
    args = ("--model", tiny_model(), "-q")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", *args, "--cache", tmp_path / "dangl")
    assert (rc, out, err) == (1, "", f"Error: the cache {tmp_path / 'dangl'} is a broken symbolic link (to "
                                     f"{tmp_path / 'gone'}, which does not exist) - make the directory it points to, or "
                                     "give --cache another directory\n")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", *args, "--cache", tmp_path / "la")
    assert (rc, out, err) == (1, "", f"Error: the cache {tmp_path / 'la'} is a loop of symbolic links (to "
                                     f"{tmp_path / 'lb'}, which leads back to it) - point the link at a directory, or "
                                     "give --cache the directory itself\n")
    rc, out, err = run(capsys, "cache", "info", tmp_path / "dangl")
    assert (rc, out, err) == (1, "", f"Error: the cache {tmp_path / 'dangl'} is a broken symbolic link (to "
                                     f"{tmp_path / 'gone'}, which does not exist) - give the directory passed to extract "
                                     "--cache (or BERTFEAT_CACHE)\n")
    assert not (tmp_path / "gone").exists() and not (tmp_path / "o.parquet").exists()


def test_cache_clear(tmp_path, capsys):
    cache = fill(tmp_path, capsys)
    fill(tmp_path, capsys, "--pooling", "cls")
    cls_fp, mean_fp = [f["fingerprint"] for f in bertfeat.cache.store.cache_info(cache)["fingerprints"]]
    rc, out, err = run(capsys, "cache", "clear", cache, "--fingerprint", "zz" + cls_fp[:6])
    assert (rc, out) == (1, "")
    assert err == (f"Error: the cache {cache / DB_NAME} has no fingerprint(s) starting with 'zz{cls_fp[:6]}' - "
                   "give a fingerprint `bertfeat cache info` shows (or more of its digits)\n")
    assert entries(cache) == 60
    for prefix in ("_", "%", cls_fp[:3] + "_"):  # not wildcards: no fingerprint starts with them
        rc, out, err = run(capsys, "cache", "clear", cache, "--fingerprint", prefix)
        assert (rc, out, len(err.splitlines())) == (1, "", 1) and err.startswith(f"Error: the cache {cache / DB_NAME} has no "), err
    assert entries(cache) == 60
    # every fingerprint starts with '': an empty prefix is refused as empty (it said no fingerprint starts with it)
    for prefix in ("", "  "):
        rc, out, err = run(capsys, "cache", "clear", cache, "--fingerprint", prefix)
        assert (rc, out, err) == (1, "", f"Error: --fingerprint {prefix!r} is empty - give a fingerprint `bertfeat cache "
                                         "info` shows (or a unique prefix of it), or leave --fingerprint out to clear "
                                         "every entry\n")
    with pytest.raises(CacheError, match=r"^fingerprint='' is empty - .* or leave fingerprint out "):
        bertfeat.cache.store.clear_cache(cache, "")
    assert entries(cache) == 60

    rc, out, err = run(capsys, "cache", "clear", cache, "--fingerprint", cls_fp[:6])
    assert (rc, out) == (0, "")
    assert err.startswith(f"deleted 30 entries from {cache} (") and err.endswith(" on disk)\n"), err
    info = bertfeat.cache.store.cache_info(cache)
    assert [f["fingerprint"] for f in info["fingerprints"]] == [mean_fp] and info["entries"] == 30
    src = tmp_path / "c.csv"
    s = extract(src, tmp_path / "mean.parquet", cache=cache, id_column=None)
    assert (s.rows_encoded, s.rows_reused) == (0, 30)  # the other fingerprint untouched
    s = extract(src, tmp_path / "cls.parquet", cache=cache, id_column=None, pooling="cls")
    assert (s.rows_encoded, s.rows_reused) == (30, 0)  # this one gone

    size = sum(p.stat().st_size for p in cache.iterdir())
    rc, out, err = run(capsys, "cache", "clear", cache)
    assert (rc, out) == (0, "")
    m = re.fullmatch(rf"deleted 60 entries from {re.escape(str(cache))} \(([\d.]+) KiB -> ([\d.]+) KiB on disk\)\n", err)
    assert m, err
    assert float(m[1]) == round(size / 1024, 1) and float(m[2]) <= float(m[1])  # 16 KiB pages: 60 small rows fit one
    assert sum(p.stat().st_size for p in cache.iterdir()) == float(m[2]) * 1024
    assert bertfeat.cache.store.cache_info(cache)["entries"] == 0
    assert run(capsys, "cache", "clear", cache, "-q")[1:] == ("", "")


def test_the_size_on_disk_is_the_caches_own_files(tmp_path, capsys):
    """A user's copy beside the database (vectors.sqlite3.bak, .old) was counted as the cache's size, by `cache info`
    and by `cache clear`'s before -> after, which then seemed to free little (found by audit): only the database and
    SQLite's -wal / -shm / -journal files are the cache's; the copy is left as it was."""
    cache = fill(tmp_path, capsys)
    db = cache / DB_NAME
    backup = cache / (DB_NAME + ".bak")
    shutil.copyfile(db, backup)
    (cache / (DB_NAME + "-old")).mkdir()  # a folder so named holds no bytes of the cache either
    own = db.stat().st_size
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err, out.splitlines()[2]) == (0, "", f"size on disk  {own / 1024:,.1f} KiB")
    rc, out, err = run(capsys, "cache", "clear", cache)
    after = db.stat().st_size + sum(p.stat().st_size for p in cache.glob(DB_NAME + "-[ws][ah][lm]"))
    assert (rc, err) == (0, f"deleted 30 entries from {cache} ({own / 1024:,.1f} KiB -> {after / 1024:,.1f} KiB on disk)\n")
    assert backup.read_bytes()[:16] == bertfeat.cache.store.SQLITE_MAGIC and entries(cache) == 0


def test_clear_while_another_process_reads_says_the_file_was_not_shrunk(tmp_path, capsys):
    """While a run has the cache open, VACUUM cannot run and the deletion grows the -wal file: clear said '(320.3 KiB
    -> 560.6 KiB on disk)', as if clearing made the cache larger (found by the cache audit)."""
    cache = fill(tmp_path, capsys)
    reader = sqlite3.connect(cache / DB_NAME, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM vectors").fetchone() == (30,)  # a read transaction: VACUUM must wait
    try:
        rc, out, err = run(capsys, "cache", "clear", cache)
    finally:
        reader.execute("COMMIT")
        reader.close()
    m = re.fullmatch(rf"deleted 30 entries from {re.escape(str(cache))} \(([\d.]+) KiB on disk, not shrunk: another "
                     r"process has the cache open, and later writes reuse the space\)\n", err)
    assert (rc, out) == (0, "") and m, err
    assert entries(cache) == 0


def test_cache_info_on_no_cache_is_one_error_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for d, what in ((tmp_path / "missing", "does not exist"), (tmp_path / "empty", f"holds no bertfeat vector cache ({DB_NAME} is missing)"),
                    (tmp_path / "file", "is not a directory")):
        for cmd in (["info"], ["info", "--json"], ["clear"]):
            rc, out, err = run(capsys, "cache", *cmd, d)
            assert (rc, out, len(err.splitlines())) == (1, "", 1), (cmd, err)
            assert err.startswith("Error: ") and str(d) in err and what in err, err
    assert not (tmp_path / "missing").exists() and list((tmp_path / "empty").iterdir()) == []


def test_the_environment_variable_and_no_cache(tmp_path, capsys, monkeypatch):
    env_cache = tmp_path / "env-cache"
    monkeypatch.setenv("BERTFEAT_CACHE", str(env_cache))
    src = corpus(tmp_path / "c.csv", base_rows(12))
    base = ["--model", tiny_model(), "--id-column", "id"]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "a.parquet", *base)
    assert rc == 0, err
    assert summary_line(err, "cache") == f"cache {env_cache}"
    assert entries(env_cache) == 12 and metadata(tmp_path / "a.parquet")["cache"] == str(env_cache)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "b.parquet", *base)
    assert (summary_line(err, "rows encoded"), summary_line(err, "rows reused")) == ("rows encoded 0", "rows reused 12")

    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "c.parquet", *base, "--no-cache")
    assert rc == 0, err
    assert (summary_line(err, "rows encoded"), summary_line(err, "rows reused")) == ("rows encoded 12", "rows reused 0")
    assert not any(line.startswith("cache ") for line in err.splitlines())
    assert metadata(tmp_path / "c.parquet")["cache"] is None

    flag = tmp_path / "flag-cache"
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "d.parquet", *base, "--cache", flag)
    assert rc == 0 and summary_line(err, "cache") == f"cache {flag}"  # the flag wins over the environment
    assert entries(flag) == 12 and entries(env_cache) == 12

    s = extract(src, tmp_path / "e.parquet")  # Python: cache=None takes the environment too
    assert (s.cache, s.rows_reused) == (str(env_cache), 12)
    s = extract(src, tmp_path / "f.parquet", cache=False)
    assert (s.cache, s.rows_encoded) == (None, 12)

    monkeypatch.delenv("BERTFEAT_CACHE")
    with pytest.raises(BertfeatError, match=r"^cache=True needs a directory - give cache='DIR', or set BERTFEAT_CACHE=DIR$"):
        extract(src, tmp_path / "h.parquet", cache=True)
    assert extract(src, tmp_path / "h.parquet").cache is None  # no variable, no flag: no cache

    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "g.parquet", *base, "--cache", flag, "--no-cache")
    assert (rc, out, err) == (1, "", "Error: --cache and --no-cache exclude each other - give one of them\n")
    assert not (tmp_path / "g.parquet").exists()


def test_an_error_of_the_cache_bertfeat_cache_names_says_so(tmp_path, capsys, monkeypatch):
    """A user who passed no cache option, whose BERTFEAT_CACHE (set long ago in a profile) names a bad cache, is told
    where that path came from (before: "the cache f is not a directory - give --cache a directory", and no word of
    the variable); the same error of --cache DIR is unchanged, and a mid-run failure of the variable's cache says it
    too (Python: cache=None)."""
    src = corpus(tmp_path / "c.csv", base_rows(24))
    (tmp_path / "f").write_text("not a directory")
    args = ("--model", tiny_model(), "--chunk-rows", 8, "-q")
    monkeypatch.setenv("BERTFEAT_CACHE", str(tmp_path / "f"))
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", *args)
    assert (rc, out) == (1, "")
    assert err == (f"Error: the cache {tmp_path / 'f'} is not a directory (BERTFEAT_CACHE names this cache) - give "
                   "--cache a directory (it is made if missing); or set BERTFEAT_CACHE to another directory, or unset "
                   "it\n")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", *args, "--cache", tmp_path / "f")
    assert err == f"Error: the cache {tmp_path / 'f'} is not a directory - give --cache a directory (it is made if missing)\n"
    with pytest.raises(CacheError, match=r"is not a directory \(BERTFEAT_CACHE names this cache\) - give cache a "):
        extract(src, tmp_path / "o.parquet")
    assert extract(src, tmp_path / "o.parquet", cache=False).rows_encoded == 24
    cache = tmp_path / "cache"
    monkeypatch.setenv("BERTFEAT_CACHE", str(cache))
    failing_write(monkeypatch, OSError(errno.ENOSPC, "No space left on device"), at=2)
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "p.parquet", *args)
    assert (rc, out) == (1, "")
    assert err == (f"Error: cannot write the cache {cache / DB_NAME}: no space left on the device (BERTFEAT_CACHE names "
                   f"this cache) - {FULL_FIX}; then rerun with --resume to continue (1 finished chunk(s) are kept in "
                   f"{tmp_path / 'p.parquet'}.partial); or set BERTFEAT_CACHE to another directory, or unset it\n")


def test_a_cache_path_that_is_a_file_is_refused(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv", base_rows(5))
    (tmp_path / "f").write_text("not a directory")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--cache", tmp_path / "f")
    assert (rc, out) == (1, "")
    assert err == f"Error: the cache {tmp_path / 'f'} is not a directory - give --cache a directory (it is made if missing)\n"
    assert not (tmp_path / "o.parquet").exists()
    with pytest.raises(CacheError, match="is not a directory"):
        extract(src, tmp_path / "o.parquet", cache=tmp_path / "f")


def test_a_cache_on_a_network_file_system_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bertfeat.cache.store, "filesystem_type", lambda path: "nfs")
    src = corpus(tmp_path / "c.csv", base_rows(5))
    cache = tmp_path / "nfs-cache"
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--cache", cache)
    assert (rc, out) == (1, "")
    assert err == (f"Error: the cache {cache} is on a network file system (nfs), where SQLite's locking is not safe for "
                   "several processes - put --cache on a local disk of this machine\n")
    assert not cache.exists() and not (tmp_path / "o.parquet").exists()
    monkeypatch.setenv("BERTFEAT_CACHE", str(cache))  # from the environment too
    with pytest.raises(CacheError, match=r"network file system \(nfs\)"):
        extract(src, tmp_path / "o.parquet")
    s = extract(src, tmp_path / "o.parquet", cache=False)  # and no cache is no check
    assert s.rows_written == 5


def test_dask_workers_on_another_host_are_refused(tmp_path, client, monkeypatch):
    from bertfeat.run.dask import check_worker_hosts

    class FakeClient:
        def __init__(self, hosts):
            self.hosts = hosts

        def run(self, fn):
            return {f"tcp://10.0.0.{i}:4000": h for i, h in enumerate(self.hosts)}

    import socket

    here = socket.gethostname()
    check_worker_hosts(FakeClient([here, here]), tmp_path / "c")  # all here: fine
    with pytest.raises(BertfeatError) as e:
        check_worker_hosts(FakeClient([here, "node-b", "node-a", "node-b"]), tmp_path / "c")
    assert e.value.what == (f"the vector cache {tmp_path / 'c'} is a SQLite database on this machine ({here}), and workers "
                            "run on node-a, node-b: SQLite's locking does not reach across machines")
    assert "run the workers on this machine" in e.value.fix

    # end to end: the run refuses before any task, writes nothing; without a cache the same cluster runs
    src = corpus(tmp_path / "c.csv", base_rows(6))
    monkeypatch.setattr(client, "run", FakeClient(["elsewhere"]).run)
    out = tmp_path / "run" / "o_dask"
    with pytest.raises(BertfeatError, match="workers run on elsewhere"):
        extract(src, out, cache=tmp_path / "cache", engine="dask", client=client)
    assert not out.exists() and no_leftovers(out) == []
    monkeypatch.undo()
    assert extract(src, out, cache=False, engine="dask", client=client).rows_written == 6


# --------------------------------------------------------------------------- 8. PCA over reused and new rows alike
def test_pca_is_fitted_on_reused_and_new_rows(tmp_path):
    cache = tmp_path / "cache"
    v1 = corpus(tmp_path / "v1.csv", base_rows())
    extract(v1, tmp_path / "v1.parquet", cache=cache, pca=4, chunk_rows=16)
    rows, n_new = edit(base_rows())
    v2 = corpus(tmp_path / "v2.csv", rows)
    s = extract(v2, tmp_path / "cached.parquet", cache=cache, pca=4, chunk_rows=16)
    assert (s.rows_encoded, s.rows_reused) == (n_new, len(rows) - n_new)
    extract(v2, tmp_path / "clean.parquet", cache=False, pca=4, chunk_rows=16)
    a, b = features(tmp_path / "cached.parquet"), features(tmp_path / "clean.parquet")
    assert a.column("id").to_pylist() == b.column("id").to_pylist() == [r[0] for r in rows]
    assert embeddings(a).shape == (125, 4)
    assert_within(embeddings(a), embeddings(b), 1e-5)
    ma, mb = np.load(tmp_path / "cached.pca.npz"), np.load(tmp_path / "clean.pca.npz")
    assert sorted(ma.files) == sorted(mb.files)
    for k in ma.files:
        if ma[k].dtype.kind in "fc":
            np.testing.assert_allclose(ma[k], mb[k], rtol=1e-5, atol=1e-5, err_msg=k)
        elif k != "meta" or rows_bit_for_bit():  # (meta records the arrays' sha256: the same bits where rows are)
            assert np.array_equal(ma[k], mb[k]), k
    assert metadata(tmp_path / "cached.parquet")["pca"]["n_components"] == 4


def test_a_cache_that_is_an_output_or_inside_the_partial_directory_is_refused(tmp_path, capsys):
    """--cache naming the output failed after encoding with "is a directory" about a temporary file; naming the partial
    directory succeeded and deleted the whole cache with it at the end."""
    src = tmp_path / "in.csv"
    src.write_text("text\na cat\na dog\n")
    out = tmp_path / "o.parquet"
    for cache, what in ((out, f"is the run's output {out}"), (Path(f"{out}.partial"), f"is the run's partial directory {out}.partial"),
                        (Path(f"{out}.partial") / "c", f"is inside the run's partial directory {out}.partial")):
        rc, _, err = run(capsys, "extract", src, "-o", out, "--cache", cache, "--model", tiny_model())
        assert (rc, err) == (1, f"Error: the cache {cache} {what} - give --cache a directory of its own, e.g. --cache "
                                "bertfeat-cache\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


@pytest.mark.parametrize("engine", ["dask", "local"])
def test_a_cache_inside_the_output_path_is_refused(tmp_path, capsys, engine):
    """--cache OUT/c with -o OUT: the Dask engine made the cache inside its output directory, then replaced that
    directory whole at the end, deleting the cache (every run, rc 0, nothing said); the local engine made OUT a
    directory holding the cache and failed with "is a directory" about its own output, OUT.partial left behind.
    Both are refused before anything is written."""
    pytest.importorskip("distributed")
    src = tmp_path / "in.csv"
    src.write_text("text\na cat\na dog\n")
    out, cache = tmp_path / "o.parquet", tmp_path / "o.parquet" / "c"
    extra = ["--engine", "dask", "--workers", "1"] if engine == "dask" else []
    rc, _, err = run(capsys, "extract", src, "-o", out, "--cache", cache, "--model", tiny_model(), *extra)
    assert (rc, err) == (1, f"Error: the cache {cache} is inside the run's output {out} - give --cache a directory of "
                            "its own, e.g. --cache bertfeat-cache\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_a_cache_failing_before_any_chunk_is_done_leaves_no_partial_run(tmp_path, capsys, monkeypatch):
    """A cache found damaged in the first chunk's lookups stopped the run with the partial directory left: after
    deleting the cache as the error says, the same command was refused ("a resumable partial run exists")."""
    from bertfeat.cache import store as vcache

    src = corpus(tmp_path / "c.csv", base_rows(20))
    cache = tmp_path / "cache"
    out = tmp_path / "run" / "b.parquet"
    out.parent.mkdir()

    def damaged(self, fid, keys):
        raise CacheError(f"the cache {self.path} is damaged (database disk image is malformed)",
                         f"delete {self.path} (its vectors are recomputed by the next run), or use another cache directory")

    monkeypatch.setattr(vcache.VectorStore, "get", damaged)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--cache", cache)
    assert rc == 1 and "is damaged" in err, err
    assert list(out.parent.iterdir()) == []  # no partial directory: nothing finished, nothing to resume
    monkeypatch.undo()
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--cache", cache)
    assert rc == 0, err


# --------------------------------------------------------------------------- 9. a file bertfeat did not make is never written
def _user_sqlite(path: Path, sql: str, wal: bool = False) -> None:
    """A user's own SQLite database at ``path``; ``wal``: in WAL mode, copied while its writer is still connected
    (as a crashed or running program leaves it: the rows in -wal, with -shm beside)."""
    where = path.parent / "made-elsewhere" / path.name if wal else path
    where.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(where, isolation_level=None)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.executescript(sql)
    if wal:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").write_bytes(Path(f"{where}{suffix}").read_bytes())
    db.close()
    if wal:
        shutil.rmtree(where.parent)


USERS = "CREATE TABLE vectors(id INTEGER PRIMARY KEY, name TEXT, vec BLOB); INSERT INTO vectors VALUES(1, 'mine', x'00ff');"
NOT_OURS = "bertfeat changed nothing in it"
DAMAGED = ", or delete {db} if it was a bertfeat cache that got damaged"
#: kind -> (how the user's file is made, why it is refused, whether it may be a damaged bertfeat cache)
FOREIGN = {
    "own-vectors-table": (lambda p: _user_sqlite(p, USERS), "it is a SQLite database whose tables are not bertfeat's (vectors)", False),
    "own-vectors-table-wal": (lambda p: _user_sqlite(p, USERS, wal=True),
                              "it is a SQLite database whose tables are not bertfeat's (vectors)", False),
    "other-tables": (lambda p: _user_sqlite(p, "CREATE TABLE notes(t TEXT); CREATE TABLE tags(t TEXT);"),
                     "it is a SQLite database whose tables are not bertfeat's (notes, tags)", False),
    "no-tables": (lambda p: _user_sqlite(p, "PRAGMA user_version=7;"),
                  "it is a SQLite database whose tables are not bertfeat's (none)", False),
    "another-application": (lambda p: _user_sqlite(p, "PRAGMA application_id=1296388936; CREATE TABLE t(x);"),
                            "it is another program's SQLite database (application_id 0x4d455348)", False),
    "empty-file": (lambda p: p.write_bytes(b""), "it is an empty file (0 bytes)", False),
    "not-sqlite": (lambda p: p.write_text("id,vector\n1,0.5\n" * 200), "it is not a SQLite database", True),
    "short-file": (lambda p: p.write_bytes(b"SQLite format 3\x00"), "it is not a SQLite database", True),
    "directory": (lambda p: (p.mkdir(), (p / "mine.txt").write_text("x")), "it is a directory", False),
    "broken-link": (lambda p: p.symlink_to(p.parent / "gone.sqlite3"), "it is a broken symbolic link", False),
}


@pytest.mark.parametrize("kind", FOREIGN)
def test_a_file_bertfeat_did_not_make_is_never_written(tmp_path, capsys, monkeypatch, kind):
    """Issue 44: a directory whose vectors.sqlite3 is someone else's (a database with its own `vectors` table, an
    empty file, a text file, a directory, ...). `cache info` wrote bertfeat's tables into it and reported 0 entries;
    with its own `vectors` table, info / clear / extract --cache said "damaged - delete it" after writing into it.
    Now every path refuses it in one line, and not a byte of the directory changes (file, -wal, -shm, listing)."""
    make, why, maybe_ours = FOREIGN[kind]
    cache = tmp_path / "theirs"
    cache.mkdir()
    db = cache / DB_NAME
    make(db)
    before = tree_digest(cache)
    assert (f"{DB_NAME}-wal" in before) == kind.endswith("-wal")
    hint = DAMAGED.format(db=db) if maybe_ours else ""
    look = f"Error: {db} is not a bertfeat vector cache: {why} - {NOT_OURS}: give the directory passed to extract --cache (or BERTFEAT_CACHE){hint}\n"
    for cmd in (["info"], ["info", "--json"], ["clear"], ["clear", "--fingerprint", "ab"], ["clear", "-q"]):
        assert run(capsys, "cache", *cmd, cache) == (1, "", look), cmd
        assert tree_digest(cache) == before, cmd
    src = corpus(tmp_path / "c.csv", base_rows(5))
    out = tmp_path / "run" / "o.parquet"
    out.parent.mkdir()
    what = f"{db} is not a bertfeat vector cache: {why} - {NOT_OURS}: give "
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--cache", cache)
    assert (rc, stdout, err) == (1, "", f"Error: {what}--cache a directory of its own (it is made if missing){hint}\n")
    with pytest.raises(CacheError) as e:  # the Python API
        extract(src, out, cache=cache)
    assert e.value.message == f"{what}cache a directory of its own (it is made if missing){hint}"
    monkeypatch.setenv("BERTFEAT_CACHE", str(cache))  # and the environment variable, both ways (which it names)
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model())
    named = what.replace(f"{why} - ", f"{why} (BERTFEAT_CACHE names this cache) - ")
    env_fix = "; or set BERTFEAT_CACHE to another directory, or unset it"
    assert (rc, stdout, err) == (1, "", f"Error: {named}--cache a directory of its own (it is made if missing){hint}"
                                        f"{env_fix}\n")
    with pytest.raises(CacheError, match=re.escape(named)):
        bertfeat.extract(src, out, model=tiny_model())
    assert bertfeat.extract(src, out, model=tiny_model(), estimate=True).cached in (None, 0.0)  # the run will say
    assert tree_digest(cache) == before
    assert list(out.parent.iterdir()) == []  # no output, no partial run, no lock left


def test_a_foreign_file_is_refused_on_the_dask_engine(tmp_path, client):
    cache = tmp_path / "theirs"
    cache.mkdir()
    _user_sqlite(cache / DB_NAME, USERS, wal=True)
    before = tree_digest(cache)
    src = corpus(tmp_path / "c.csv", base_rows(5))
    out = tmp_path / "run" / "o_dask"
    with pytest.raises(CacheError, match=rf"^{re.escape(str(cache / DB_NAME))} is not a bertfeat vector cache: it is a "
                                         r"SQLite database whose tables are not bertfeat's \(vectors\) - "):
        extract(src, out, cache=cache, engine="dask", client=client, blocksize=None)
    assert tree_digest(cache) == before
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def earlier_bertfeats_cache(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(input, cache, its file): 12 rows' vectors (a.parquet's) in a cache as bertfeat before its marker left it."""
    src = corpus(tmp_path / "c.csv", base_rows(12))
    cache = tmp_path / "cache"
    extract(src, tmp_path / "a.parquet", cache=cache)
    db = cache / DB_NAME
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA application_id=0")
        con.execute("PRAGMA user_version=0")
    con.close()
    return src, cache, db


def test_a_cache_of_an_earlier_bertfeat_is_adopted(tmp_path, capsys):
    """A cache an earlier bertfeat made (its exact layout, no marker): still read, and marked as bertfeat's on its
    first open (docs/cache.md); a run reuses its vectors, and clear clears it."""
    from bertfeat.cache.store import APP_ID, classify

    src, cache, db = earlier_bertfeats_cache(tmp_path)
    assert classify(db) == ("adopt", "")
    rc, out, err = run(capsys, "cache", "info", cache)
    assert (rc, err) == (0, "") and "entries       12" in out.splitlines()
    assert classify(db) == ("ours", "")
    con = sqlite3.connect(db)
    assert (con.execute("PRAGMA application_id").fetchone(), con.execute("PRAGMA user_version").fetchone()) == ((APP_ID,), (2,))
    con.close()
    s = extract(src, tmp_path / "b.parquet", cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (0, 12)
    assert_same_features(tmp_path / "b.parquet", tmp_path / "a.parquet")
    rc, _, err = run(capsys, "cache", "clear", cache)
    assert rc == 0 and err.startswith(f"deleted 12 entries from {cache} ("), err


def test_an_estimate_changes_no_byte_of_the_cache(tmp_path):
    """--estimate says nothing was written, but it opened the cache to write: an earlier bertfeat's cache was marked
    (its header rewritten: found by the cache audit). It now reads it alone, and still counts its hits."""
    import os

    from bertfeat.cache.store import classify

    src, cache, db = earlier_bertfeats_cache(tmp_path)
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    e = extract(src, tmp_path / "e.parquet", cache=cache, estimate=True)
    assert e.cached == 1.0
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before and classify(db) == ("adopt", "")
    assert not os.path.exists(tmp_path / "e.parquet")
    e = extract(src, tmp_path / "e.parquet", cache=tmp_path / "none", estimate=True)
    assert e.cached == 0.0 and not (tmp_path / "none").exists()


def test_an_earlier_bertfeats_cache_sqlite_refuses_to_write_is_read_unmarked(tmp_path, monkeypatch):
    """An earlier bertfeat's cache (no marker) that SQLite refuses to write while os.access allows it: its marker
    could not be written, and the run failed outright (the marker came before the read-only fallback). It is read
    as it is now: hits used, nothing stored, the file unchanged."""
    from bertfeat.cache.store import classify

    src, cache, db = earlier_bertfeats_cache(tmp_path)
    before = db.read_bytes()
    sqlite_refuses_writes(monkeypatch, cache)
    s = extract(src, tmp_path / "b.parquet", cache=cache)
    assert (s.rows_encoded, s.rows_reused, s.cache_read_only) == (0, 12, "attempt to write a readonly database")
    assert_same_features(tmp_path / "b.parquet", tmp_path / "a.parquet")
    monkeypatch.undo()
    assert db.read_bytes() == before and classify(db) == ("adopt", "")


def test_the_element_wise_kernels_are_in_the_key_and_the_provenance(tmp_path, monkeypatch):
    """BERTFEAT_KERNELS=numpy (or numba failing to import) runs GELU, LayerNorm and the int8 kernels in NumPy, which
    rounds otherwise (5e-3 on int8 features, 2e-7 on fp32): a cache filled by one served the other's vectors, a
    --resume mixed them, and nothing recorded which ran (found by audit)."""
    from bertfeat.features import read_features
    from bertfeat.ops import kernels

    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence {i} of the corpus\n" for i in range(12)))
    cache = tmp_path / "c"
    s = bertfeat.extract(src, tmp_path / "a.parquet", model=tiny_model(), cache=cache)
    assert s.rows_encoded == 12
    monkeypatch.setenv("BERTFEAT_KERNELS", "numpy")
    kernels.use(None)
    try:
        s = bertfeat.extract(src, tmp_path / "b.parquet", model=tiny_model(), cache=cache)
        assert (s.rows_encoded, s.rows_reused) == (12, 0)  # the numba run's vectors are not this run's
        assert read_features(tmp_path / "b.parquet")[2]["gemm"]["kernels"] == "numpy"
    finally:
        monkeypatch.delenv("BERTFEAT_KERNELS")
        kernels.use(None)
    assert read_features(tmp_path / "a.parquet")[2]["gemm"]["kernels"].startswith("numba ")
    s = bertfeat.extract(src, tmp_path / "c.parquet", model=tiny_model(), cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (0, 12)
    info = bertfeat.cache.store.cache_info(cache)
    lines = sorted(bertfeat.cache.store.settings_line(f["settings"]) for f in info["fingerprints"])
    assert len(lines) == 2 and lines[0].endswith(", numba " + lines[0].rsplit(" ", 1)[1]) and lines[1].endswith(", numpy, attention per sequence")


@pytest.mark.slow  # two `python -m bertfeat` subprocesses (numba reads its settings once, at import)
def test_numbas_code_generation_settings_are_in_the_key(tmp_path):
    """NUMBA_DISABLE_JIT=1 (a debugging setting left in a shell), NUMBA_OPT=0, NUMBA_CPU_NAME=generic ... change how
    numba compiles the kernels, so how they round (a tiny model's fp32 features moved by up to 7e-7), and the key
    said "numba VERSION" either way: a cache filled by a usual run served its vectors to a run under
    NUMBA_DISABLE_JIT=1, whose own differ, so the features depended on what the cache held (found by audit)."""
    from bertfeat.features import read_features

    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence {i} of the corpus with a few more words\n" for i in range(12)))
    cache = tmp_path / "c"
    assert bertfeat.extract(src, tmp_path / "jit.parquet", model=tiny_model(), cache=cache).rows_encoded == 12
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}

    def no_jit(name: str) -> dict:
        p = subprocess.run(cli("extract", src, "-o", tmp_path / name, "--model", tiny_model(), "--cache", cache,
                               "--quiet", "--summary-json", "-"), capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    s = no_jit("a.parquet")
    assert (s["rows_encoded"], s["rows_reused"]) == (12, 0)  # the JIT-compiled kernels' vectors are not this run's
    a, jit = embeddings(read_table(tmp_path / "a.parquet")), embeddings(read_table(tmp_path / "jit.parquet"))
    assert not np.array_equal(a, jit)  # what serving them would have changed
    assert read_features(tmp_path / "a.parquet")[2]["gemm"]["kernels"].endswith(" (NUMBA_DISABLE_JIT=1)")
    s = no_jit("b.parquet")
    assert (s["rows_encoded"], s["rows_reused"]) == (0, 12)
    assert np.array_equal(embeddings(read_table(tmp_path / "b.parquet")), a)


@pytest.mark.slow  # three `python -m bertfeat` subprocesses (NumPy reads its CPU feature settings once, at import)
def test_numpys_cpu_feature_settings_are_in_the_key_of_the_numpy_kernels(tmp_path):
    """On the NumPy element-wise kernels (BERTFEAT_KERNELS=numpy, or no numba) the GELU, softmax and LayerNorm run on
    NumPy's SIMD loops, which NPY_DISABLE_CPU_FEATURES / NPY_ENABLE_CPU_FEATURES switch (all-MiniLM-L6-v2's int8
    features moved by 2.3e-3 with AVX2 and AVX-512 off, fp32 by 1.5e-7), and the key said "numpy" either way: a cache
    filled by a usual run served its vectors to a run under the setting, whose own differ (found by audit)."""
    from bertfeat.features import read_features

    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"Sentence {i} of the corpus with a few more words\n" for i in range(12)))
    cache = tmp_path / "c"

    def numpy_kernels(name: str, **env) -> dict:
        p = subprocess.run(cli("extract", src, "-o", tmp_path / name, "--model", tiny_model(), "--cache", cache,
                               "--quiet", "--summary-json", "-"), capture_output=True, text=True,
                           env={**os.environ, "BERTFEAT_KERNELS": "numpy", **env})
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    assert numpy_kernels("usual.parquet")["rows_encoded"] == 12
    off = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX2 AVX512F AVX512_SKX"}  # NumPy 2.4's and 1.x's names
    s = numpy_kernels("a.parquet", **off)
    assert (s["rows_encoded"], s["rows_reused"]) == (12, 0)  # the usual run's vectors are not this run's
    kernels = read_features(tmp_path / "a.parquet")[2]["gemm"]["kernels"]
    assert kernels == "numpy (NPY_DISABLE_CPU_FEATURES=AVX2 AVX512F AVX512_ICL AVX512_SKX X86_V3 X86_V4)"
    assert read_features(tmp_path / "usual.parquet")[2]["gemm"]["kernels"] == "numpy"  # unset: the key as it was
    s = numpy_kernels("b.parquet", **off)
    assert (s["rows_encoded"], s["rows_reused"]) == (0, 12)
    assert np.array_equal(embeddings(read_table(tmp_path / "b.parquet")), embeddings(read_table(tmp_path / "a.parquet")))


def tanh_dense_model(d: Path) -> Path:
    """The tiny model with sentence-transformers modules mean Pooling -> Dense (32 -> 16, tanh) -> Normalize."""
    from safetensors.numpy import save_file

    from extract_util import tiny_st_model

    tiny_st_model(d)
    (d / "3_Normalize").mkdir()
    (d / "3_Normalize" / "config.json").write_text("{}")
    (d / "2_Normalize" / "config.json").unlink()
    (d / "2_Normalize").rmdir()
    (d / "2_Dense").mkdir()
    (d / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32, "out_features": 16, "bias": True,
                                                           "activation_function": "torch.nn.modules.activation.Tanh"}))
    rng = np.random.default_rng(3)
    save_file({"linear.weight": (rng.standard_normal((16, 32)) / 2).astype(np.float32),
               "linear.bias": (rng.standard_normal(16) / 10).astype(np.float32)}, str(d / "2_Dense" / "model.safetensors"))
    mods = json.loads((d / "modules.json").read_text())[:2]
    mods += [{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
             {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (d / "modules.json").write_text(json.dumps(mods))
    return d


@pytest.mark.slow  # three `python -m bertfeat` subprocesses (NumPy reads its CPU feature settings once, at import)
def test_numpys_cpu_feature_settings_are_in_the_key_of_the_numba_kernels_too(tmp_path):
    """On numba's element-wise kernels a Dense module's activation still runs on NumPy's SIMD loops (np.tanh), which
    NPY_DISABLE_CPU_FEATURES switches (AVX2 off moved this tanh model's features by 6e-8): the key named the setting
    on the NumPy kernels only, so a cache filled by a usual run served its vectors to a run under the setting, whose
    own differ (a re-run unequal to a fresh run of the same input). Unset, the key is the one it was."""
    from bertfeat.features import read_features
    from bertfeat.ops import kernels

    if kernels.backend() != "numba":
        pytest.skip("numba's kernels are not in use here (BERTFEAT_KERNELS=numpy, or no numba)")
    model = tanh_dense_model(tmp_path / "m")
    src = corpus(tmp_path / "in.csv", base_rows(24))
    cache = tmp_path / "c"
    off = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX2 AVX512F AVX512_SKX"}  # NumPy 2.4's and 1.x's names

    def extract_in(name: str, cached: bool = True, **env) -> dict:
        p = subprocess.run(cli("extract", src, "-o", tmp_path / name, "--model", model, "--quiet", "--summary-json", "-",
                               *(("--cache", cache) if cached else ("--no-cache",))),
                           capture_output=True, text=True, env={**os.environ, **env})
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    assert extract_in("usual.parquet")["rows_encoded"] == 24
    s = extract_in("a.parquet", **off)
    assert (s["rows_encoded"], s["rows_reused"]) == (24, 0)  # the usual run's vectors are not this run's
    extract_in("fresh.parquet", cached=False, **off)
    a, fresh = embeddings(read_table(tmp_path / "a.parquet")), embeddings(read_table(tmp_path / "fresh.parquet"))
    assert np.array_equal(a, fresh)
    assert not np.array_equal(a, embeddings(read_table(tmp_path / "usual.parquet")))  # what serving them changed
    kernels_of = read_features(tmp_path / "a.parquet")[2]["gemm"]["kernels"]
    assert kernels_of.endswith(" (NPY_DISABLE_CPU_FEATURES=AVX2 AVX512F AVX512_ICL AVX512_SKX X86_V3 X86_V4)"), kernels_of
    assert read_features(tmp_path / "usual.parquet")[2]["gemm"]["kernels"] == kernels.identity()  # unset: as it was


def test_a_cache_filled_before_the_numpy_softmax_ran_per_sequence_is_not_served(tmp_path, monkeypatch):
    """0.3.0.dev0's NumPy softmax twin sums each sequence over its own keys, as numba's kernel does (a text's features
    the same bit for bit in any batch), which rounds otherwise than before; with the key unchanged, a cache filled
    before served its vectors beside newly encoded ones, so the features depended on what the cache held. A cache
    filled under the key before (store.attention_revision off, as the code before had it) is not served now; numba's
    vectors still are (its key did not change)."""
    from bertfeat.features import read_features
    from bertfeat.ops import kernels

    src = corpus(tmp_path / "in.csv", base_rows(12))
    cache = tmp_path / "c"
    assert extract(src, tmp_path / "numba.parquet", cache=cache).rows_encoded == 12
    monkeypatch.setenv("BERTFEAT_KERNELS", "numpy")
    kernels.use(None)
    try:
        with monkeypatch.context() as m:  # the key before the revision (raising=False: the code before had none)
            m.setattr(bertfeat.cache.store, "attention_revision", lambda encoder: None, raising=False)
            s = extract(src, tmp_path / "before.parquet", cache=cache)
        assert (s.rows_encoded, s.rows_reused) == (12, 0)
        s = extract(src, tmp_path / "now.parquet", cache=cache)
        assert (s.rows_encoded, s.rows_reused) == (12, 0)  # the vectors cached before are not this run's
        assert read_features(tmp_path / "now.parquet")[2]["gemm"]["attention"] == "per sequence"
        assert extract(src, tmp_path / "again.parquet", cache=cache).rows_reused == 12
    finally:
        monkeypatch.delenv("BERTFEAT_KERNELS")
        kernels.use(None)
    if kernels.backend() == "numba":
        s = extract(src, tmp_path / "numba2.parquet", cache=cache)
        assert (s.rows_encoded, s.rows_reused) == (0, 12)
        assert "attention" not in read_features(tmp_path / "numba2.parquet")[2]["gemm"]
    lines = [bertfeat.cache.store.settings_line(f["settings"]) for f in bertfeat.cache.store.cache_info(cache)["fingerprints"]]
    assert sum(line.endswith(", numpy, attention per sequence") for line in lines) == 1


def test_the_tokenizers_version_is_in_the_key_and_the_provenance(tmp_path, monkeypatch):
    """An upgrade of the tokenizers library may split a text into other tokens (a normalizer or pre-tokenizer
    changed), and its version was in no key: the cache served the old version's vectors (found by audit)."""
    import tokenizers
    from bertfeat.features import read_features

    real = tokenizers.__version__
    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence {i} of the corpus\n" for i in range(12)))
    cache = tmp_path / "c"
    s = bertfeat.extract(src, tmp_path / "a.parquet", model=tiny_model(), cache=cache)
    assert s.rows_encoded == 12
    monkeypatch.setattr(tokenizers, "__version__", "0.0.1")
    s = bertfeat.extract(src, tmp_path / "b.parquet", model=tiny_model(), cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (12, 0)  # the other version's vectors are not this run's
    assert read_features(tmp_path / "b.parquet")[2]["tokenizers"] == "0.0.1"
    monkeypatch.undo()
    assert read_features(tmp_path / "a.parquet")[2]["tokenizers"] == real
    s = bertfeat.extract(src, tmp_path / "c.parquet", model=tiny_model(), cache=cache)
    assert (s.rows_encoded, s.rows_reused) == (0, 12)
    info = bertfeat.cache.store.cache_info(cache)
    assert sorted(f["settings"]["tokenizers"] for f in info["fingerprints"]) == sorted([real, "0.0.1"])


def test_a_model_replaced_while_it_loads_is_refused_not_cached(tmp_path, monkeypatch):
    """The weights' sha256 (and the other files' digests) were taken after loading: other weights copied in between
    (a model update landing mid-load) were cached under the new weights' key with the old weights' vectors, up to
    2.99 away, for good (found by audit). The files' states are taken before the read and checked at each hash."""
    import bertfeat.model.weights as weights
    from bertfeat.errors import BertfeatError
    from bertfeat.model import encoder_cache

    model = tmp_path / "m"
    shutil.copytree(tiny_model(), model)
    other = second_model()
    src = tmp_path / "in.csv"
    src.write_text("text\nhello there\nanother row\n")
    real = weights.read_tensors

    def then_replaced(files, *a, **k):
        out = real(files, *a, **k)
        shutil.copyfile(Path(other) / "model.safetensors", model / "model.safetensors")  # lands after the read
        return out

    monkeypatch.setattr(weights, "read_tensors", then_replaced)
    encoder_cache.clear()
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "o.parquet", model=str(model), cache=tmp_path / "c")
    assert e.value.message == (f"the model folder {model} changed while bertfeat loaded it (model.safetensors) - run "
                               "the command again once the model's files are all in place")
    assert not (tmp_path / "o.parquet").exists()
    monkeypatch.undo()
    s = bertfeat.extract(src, tmp_path / "o.parquet", model=str(model), cache=tmp_path / "c")
    assert s.rows_encoded == 2  # nothing was cached under the replaced weights' key
    ref = bertfeat.extract(src, tmp_path / "ref.parquet", model=other, cache=False)
    assert np.array_equal(embeddings(read_table(tmp_path / "o.parquet")), embeddings(read_table(tmp_path / "ref.parquet")))
    assert ref.rows_written == 2


def test_a_new_cache_name_with_whitespace_at_an_end_is_refused_an_existing_one_used(tmp_path, capsys, monkeypatch):
    """--cache ' c' (a stray space inside the quotes, a pasted name) made a directory ' c' without a word, where an
    output named so is refused (checks.check_output_name): a cache it would make is refused the same way. One that
    already exists is the user's (made by an earlier run): used as named, not refused (its vectors stay reachable)."""
    monkeypatch.chdir(tmp_path)
    src = corpus(tmp_path / "in.csv", base_rows(4))
    for given, where in ((" c", "starts with a space"), ("c ", "ends in a space"), ("c\t", "ends in a tab"),
                         ("d/c\xa0", "ends in a no-break space")):
        fix = "d/c" if given.startswith("d/") else "c"
        assert run(capsys, "extract", src, "-o", "o.parquet", "-m", tiny_model(), "--cache", given, "-q") == (
            1, "", f"Error: the cache {given!r} {where}, which would be part of the name written - pass --cache "
                   f"without it: --cache {fix}\n")
        with pytest.raises(BertfeatError) as e:
            bertfeat.extract(src, "o.parquet", model=tiny_model(), cache=given)
        assert e.value.message == (f"the cache {given!r} {where}, which would be part of the name written - pass cache "
                                   f"without it: cache={fix!r}")
        rc, _, err = run(capsys, "sweep", src, "-o", "s", "-m", tiny_model(), "--set", "mean", "--cache", given, "-q")
        assert rc == 1 and err.startswith(f"Error: the cache {given!r} {where}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    (tmp_path / " c").mkdir()  # a cache made before this check: used, its vectors found
    assert run(capsys, "extract", src, "-o", "o.parquet", "-m", tiny_model(), "--cache", " c", "-q")[0] == 0
    assert (tmp_path / " c" / DB_NAME).is_file()
    rc, _, err = run(capsys, "extract", src, "-o", "o.parquet", "-m", tiny_model(), "--cache", " c", "--overwrite")
    assert rc == 0 and summary_line(err, "rows encoded") == "rows encoded 0" and summary_line(err, "rows reused") == "rows reused 4", err
