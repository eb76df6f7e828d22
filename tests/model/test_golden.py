"""The NumPy forward pass against golden reference files (tests/data/golden), without torch.

The files were made once with transformers / sentence-transformers by tests/make_golden.py (its JSON header
says with which versions and how to regenerate). Each case: token ids, every hidden state at real tokens,
and the pooled features, for two random checkpoints drawn by tests/ckpt.py (NumPy) and the packaged
all-MiniLM-L6-v2. The live suite (test_model.py, marked `live`) checks the same against torch on many more
inputs; this one keeps the core suite honest where torch is not installed.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from bertfeat.model.encoder import Encoder
from bertfeat.model.bert import bert_forward
from bertfeat.model.tokenize import pad_batch
from ckpt import make_checkpoint, single_blas_thread
from conftest import TEST_DATA

GOLDEN = TEST_DATA / "golden"
GOLDEN_VERSION = 1  # as tests/make_golden.py writes
TOL = 1e-5  # largest absolute difference allowed, hidden states and features
CASES = ["random_uncased", "random_chinese", "minilm"]
REGENERATE = "regenerate with `PYTHONPATH=. python tests/make_golden.py` (needs make install) and review the diff"


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


def load_case(name: str) -> tuple[dict, dict]:
    header = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    assert header["format"] == "bertfeat-golden" and header["version"] == GOLDEN_VERSION, \
        f"{name}.json is golden format {header.get('version')}, this test reads {GOLDEN_VERSION} - {REGENERATE}"
    with np.load(GOLDEN / f"{name}.npz") as z:
        arrays = dict(z)
    return header, arrays


@pytest.fixture(scope="module")
def encoders(tmp_path_factory, minilm_dir):
    """Case name -> Encoder, after checking the weights are the ones the golden files were made from."""
    out = {}
    for name in CASES:
        header, _ = load_case(name)
        if name == "minilm":
            d = minilm_dir
            files = [d / "model.safetensors"]
        else:
            d = make_checkpoint(tmp_path_factory.mktemp(name) / "m", **header["checkpoint"])
            files = sorted(d.glob("*.safetensors"))
        sha = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
        assert sha == header["weights_sha256"], f"{name}: the weights differ from the golden file's ({d}) - {REGENERATE}"
        out[name] = Encoder(d)
    return out


def _parts(header):
    yield "single", header["texts"], None
    yield "pair", header["pairs"][0], header["pairs"][1]


@pytest.mark.parametrize("name", CASES)
def test_token_ids_match_golden(encoders, name):
    header, g = load_case(name)
    enc = encoders[name]
    for part, texts, pairs in _parts(header):
        prep = enc.prepare(texts, pairs, enc.spec("mean", max_length=header["max_length"]))
        for r in range(len(texts)):
            np.testing.assert_array_equal(prep.ids[r], g[f"{part}{r}_input_ids"], err_msg=f"{name} {part} row {r}: input ids")
            np.testing.assert_array_equal(prep.type_ids[r], g[f"{part}{r}_token_type_ids"], err_msg=f"{name} {part} row {r}: type ids")


@pytest.mark.parametrize("name", CASES)
def test_hidden_states_match_golden(encoders, name):
    """bert_forward on the golden token ids, padded as one batch: every hidden state within TOL."""
    header, g = load_case(name)
    enc = encoders[name]
    L = enc.config.num_hidden_layers
    worst = np.zeros(L + 1)
    for part, texts, _ in _parts(header):
        ids = [g[f"{part}{r}_input_ids"] for r in range(len(texts))]
        types = [g[f"{part}{r}_token_type_ids"] for r in range(len(texts))]
        input_ids, type_ids, mask = pad_batch(ids, types, enc.tokenizer.pad_id)
        fwd = bert_forward(enc.weights, input_ids, type_ids, mask, keep=tuple(range(L + 1)))
        for r in range(len(texts)):
            want = g[f"{part}{r}_hidden"]  # (L+1, n, H)
            assert want.shape == (L + 1, len(ids[r]), enc.config.hidden_size)
            for i in range(L + 1):
                worst[i] = max(worst[i], float(np.abs(fwd.hidden[i][r, :len(ids[r])] - want[i]).max()))
    print(f"\n{name} vs golden ({header['reference']}, transformers {header['made_with']['transformers']}):")
    for i in range(L + 1):
        print(f"  {'embeddings' if i == 0 else f'layer {i}':<12} largest |diff| {worst[i]:.3e}")
    assert worst.max() <= TOL, f"{name}: largest difference per hidden state {worst}"
    assert worst.min() > 0  # a real comparison of float32 sums, not the file against itself


@pytest.mark.parametrize("name", CASES)
def test_features_match_golden(encoders, name):
    """Encoder.encode (its own tokenization, batching and pooling) vs the golden states pooled by transformers' output."""
    header, g = load_case(name)
    enc = encoders[name]
    worst = {}
    for part, texts, pairs in _parts(header):
        for pooling in ("pooled", "cls", "mean", "max"):
            key = f"{part}_features_{pooling}"
            if key not in g:
                continue
            X = enc.encode(texts, pairs=pairs, pooling=pooling, max_length=header["max_length"])
            assert X.dtype == np.float32 and X.shape == g[key].shape, (key, X.shape)
            worst[key] = float(np.abs(X - g[key]).max())
    if "st_embedding" in g:  # the model's own sentence embedding, as SentenceTransformer.encode gives it
        X = enc.encode(header["feature_texts"], pooling="mean", normalize=True, max_length=header["st_max_seq_length"])
        worst["sentence-transformers embedding"] = float(np.abs(X - g["st_embedding"]).max())
    print(f"\n{name}: largest |diff| per feature: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    assert len(worst) >= 6
    bad = {k: v for k, v in worst.items() if not v <= TOL}
    assert not bad, f"{name}: features off by more than {TOL}: {bad}"


def test_golden_files_are_small_and_say_how_to_regenerate():
    for name in CASES:
        header, _ = load_case(name)
        assert header["made_by"] == "PYTHONPATH=. python tests/make_golden.py"
        assert {"torch", "transformers", "numpy"} <= set(header["made_with"])
        assert (GOLDEN / f"{name}.npz").stat().st_size < 400_000
