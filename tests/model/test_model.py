"""The NumPy forward pass against transformers' BertModel (torch, fp32, eval).

Issue 2, "What it must show" 1 and 2: every hidden state (embeddings and each layer) within 1e-4 of
torch, and pooled / CLS / mean features at cosine >= 0.99999, on the real all-MiniLM-L6-v2 weights
(sdpa attention) and on random-weight checkpoints shaped like bert-base-uncased and bert-base-chinese
(eager attention) for every hidden_act and every way of naming and storing the tensors.
Run with ``pytest -s`` to see the worst difference per layer.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bertfeat.model.batching import token_budget_batches
from bertfeat.model.encoder import Encoder
from bertfeat.model.bert import bert_forward, erf, gelu_erf, gelu_tanh, mlm_logits, relu
from bertfeat.model.tokenize import pad_batch
from ckpt import (  # noqa: F401  (make_ckpt is a fixture)
    hf_tokenizer,
    make_ckpt,
    pool_rows,
    reference_model,
    row_cosines,
    single_blas_thread,
    torch_hidden_states,
    torch_reference_rows,
)
from conftest import read_sst2, read_stsb, read_stsb_zh

pytestmark = pytest.mark.live  # every test here but the erf grid compares against transformers' BertModel run live

HIDDEN_TOL = 1e-4
COS_TOL = 0.99999
ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu")



@pytest.fixture(autouse=True)
def _one_blas_thread():
    """See ckpt.single_blas_thread: keeps NumPy fast next to torch in this process."""
    with single_blas_thread():
        yield


# --------------------------------------------------------------------------- helpers
def long_texts(sample_data, n=3, per=40) -> list[str]:
    """Real English texts far over 512 word pieces: SST-2 dev sentences joined in runs of ``per``."""
    sst, _ = read_sst2(sample_data / "sst2" / "stsa.binary.dev")
    return [" ".join(sst[150 + k * per: 150 + (k + 1) * per]) for k in range(n)]


def zh_sentences(sample_data) -> tuple[list[str], list[str]]:
    return read_stsb_zh(sample_data / "zh" / "stsb-zh-dev.csv")


class LayerDiffs:
    """Worst absolute difference per hidden-state index, over real (unpadded) tokens."""

    def __init__(self, n: int):
        self.worst = np.zeros(n)

    def add(self, i: int, ours: np.ndarray, ref: np.ndarray):
        assert ours.shape == ref.shape
        if ours.size:
            self.worst[i] = max(self.worst[i], float(np.abs(ours - ref).max()))


def numpy_same_padding(enc: Encoder, diffs: LayerDiffs):
    """on_batch callback: bert_forward on torch's padded batch, compared at real tokens."""
    L = enc.config.num_hidden_layers

    def on_batch(ids, types, mask, hidden, pooled):
        fwd = bert_forward(enc.weights, ids, types, mask, keep=tuple(range(L + 1)))
        real = mask.astype(bool)
        for i in range(L + 1):
            diffs.add(i, fwd.hidden[i][real], hidden[i][real])

    return on_batch


def numpy_encoder_batching(enc: Encoder, texts, pairs, max_length, rows, diffs: LayerDiffs):
    """Hidden states through the Encoder's own path: prepare (our tokenizer) + length-sorted token-budget
    batches + pad_batch, then bert_forward; compared row by row with the torch rows."""
    L = enc.config.num_hidden_layers
    spec = enc.spec("mean", layers=list(range(L + 1)), max_length=max_length)
    prep = enc.prepare(texts, pairs, spec)
    assert len(prep.ids) == len(rows)
    for r, row in enumerate(rows):
        np.testing.assert_array_equal(prep.ids[r], row.ids, err_msg=f"row {r}: token ids differ from transformers")
        np.testing.assert_array_equal(prep.type_ids[r], row.type_ids, err_msg=f"row {r}: token type ids differ")
    lengths = np.array([len(a) for a in prep.ids])
    batches = token_budget_batches(lengths, enc.max_batch_tokens)
    for batch in batches:
        ids, types, mask = pad_batch([prep.ids[i] for i in batch], [prep.type_ids[i] for i in batch], enc.tokenizer.pad_id)
        fwd = bert_forward(enc.weights, ids, types, mask, keep=tuple(range(L + 1)))
        for j, r in enumerate(batch):
            n = lengths[r]
            for i in range(L + 1):
                diffs.add(i, fwd.hidden[i][j, :n], rows[r].hidden[i])


def check_features(enc: Encoder, texts, pairs, max_length, rows, poolings=("pooled", "cls", "mean")) -> dict:
    """Encoder.encode features vs the torch rows pooled by hand: min cosine per pooling (asserted)."""
    out = {}
    for p in poolings:
        X = enc.encode(texts, pairs=pairs, pooling=p, max_length=max_length)
        R = pool_rows(rows, p)
        assert X.dtype == np.float32 and X.shape == R.shape
        cos = row_cosines(X, R)
        out[p] = float(cos.min())
        assert cos.min() >= COS_TOL, f"{p}: row {int(cos.argmin())} cosine {cos.min():.7f} < {COS_TOL}"
        assert np.abs(X - R).max() <= 10 * HIDDEN_TOL, f"{p}: max abs diff {np.abs(X - R).max():.2e}"
    return out


# --------------------------------------------------------------------------- 1. real all-MiniLM-L6-v2
@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from transformers import BertModel

    model = BertModel.from_pretrained(str(minilm_dir)).eval()  # sdpa attention, fp32
    return Encoder(minilm_dir), model, hf_tokenizer(minilm_dir)


@pytest.fixture(scope="module")
def minilm_corpus(real_sentences, sample_data, minilm):
    """>= 300 real single texts and 100 STSb pairs, each as (sorted, mixed): the bulk sorted by length
    (cheap torch batches), then a small mixed batch of texts over 512 tokens among short ones."""
    _, _, tok = minilm
    longs = long_texts(sample_data)
    assert all(len(tok(t)["input_ids"]) > 600 for t in longs)
    short = sorted(real_sentences, key=len)
    singles = (short, [longs[0], short[0], longs[1], short[200], longs[2], short[-1]])
    s1, s2, _ = read_stsb(sample_data / "stsb" / "sts-dev.csv")
    order = sorted(range(200, 300), key=lambda i: len(s1[i]) + len(s2[i]))
    pairs = (([s1[i] for i in order], [s2[i] for i in order]),
             ([longs[0], s1[0], s1[1], longs[2]], [longs[1], longs[2], s2[1], s2[2]]))
    assert len(singles[0]) + len(singles[1]) >= 300
    return singles, pairs


def test_minilm_hidden_states_and_features_match_torch(minilm, minilm_corpus):
    enc, model, tok = minilm
    (sorted_singles, mixed_singles), ((pa, pb), (mixed_a, mixed_b)) = minilm_corpus
    L = enc.config.num_hidden_layers
    same, batched = LayerDiffs(L + 1), LayerDiffs(L + 1)
    on_batch = numpy_same_padding(enc, same)  # on torch's own padded batches: the mixed ones (long + short)
    singles, pairs_a, pairs_b = sorted_singles + mixed_singles, pa + mixed_a, pb + mixed_b
    rows1 = (torch_reference_rows(model, tok, sorted_singles, None, 512)
             + torch_reference_rows(model, tok, mixed_singles, None, 512, on_batch=on_batch))
    rows2 = (torch_reference_rows(model, tok, pa, pb, 512)
             + torch_reference_rows(model, tok, mixed_a, mixed_b, 512, on_batch=on_batch))
    pa, pb = pairs_a, pairs_b
    assert max(len(r.ids) for r in rows1) == 512 and max(len(r.ids) for r in rows2) == 512
    assert any(r.type_ids.any() for r in rows2)
    numpy_encoder_batching(enc, singles, None, 512, rows1, batched)
    numpy_encoder_batching(enc, pa, pb, 512, rows2, batched)

    print(f"\nall-MiniLM-L6-v2 vs transformers BertModel (sdpa): {len(singles)} texts + {len(pa)} pairs, max_length 512")
    print("hidden state   worst |diff| (torch's mixed batches)   worst |diff| (Encoder batching, all rows)")
    for i in range(L + 1):
        print(f"  {'embeddings' if i == 0 else f'layer {i}':<12} {same.worst[i]:>30.3e} {batched.worst[i]:>36.3e}")
    f1 = check_features(enc, singles, None, 512, rows1)
    f2 = check_features(enc, pa, pb, 512, rows2)
    print("min cosine vs torch:", {k: f"{min(f1[k], f2[k]):.8f}" for k in f1})
    assert same.worst.max() <= HIDDEN_TOL, same.worst
    assert batched.worst.max() <= HIDDEN_TOL, batched.worst
    assert same.worst.min() > 0  # the comparison really ran on every layer


# --------------------------------------------------------------------------- 2. random checkpoints
SHAPES = {
    # bert-base-uncased-like: its vocab and head size 64, fewer / narrower layers
    "uncased": dict(vocab="uncased", hidden=128, heads=2, layers=2, intermediate=512),
    # bert-base-chinese-like: its vocab, 3 layers, head size 32
    "chinese": dict(vocab="chinese", hidden=96, heads=3, layers=3, intermediate=384),
}
NAMINGS = {
    "plain": dict(),  # as BertModel.save_pretrained writes: no prefix, weight/bias
    "prefix": dict(prefix=True),  # bert.embeddings..., as BertFor* checkpoints
    "legacy": dict(legacy_names=True),  # LayerNorm gamma/beta
    "legacy_prefix": dict(prefix=True, legacy_names=True),  # the original TF-converted checkpoints
    "sharded": dict(prefix=True, sharded=3, tokenizer="json"),  # model-0000k-of-00003.safetensors + index; tokenizer.json
}


@pytest.fixture(scope="module")
def random_corpus(real_sentences, sample_data):
    s1, s2, _ = read_stsb(sample_data / "stsb" / "sts-dev.csv")
    z1, z2 = zh_sentences(sample_data)
    assert len(z1) > 100
    en_long = long_texts(sample_data, n=1)[0]
    zh_long = "".join(z1[300:400])
    assert len(zh_long) > 600
    return {
        "uncased": (real_sentences[::16] + [en_long], (s1[300:308], s2[300:308])),
        "chinese": (z1[:24] + ["Mixed 中文 and English, 123 ！"] + [zh_long], (z1[100:108], z2[100:108])),
    }


_torch_rows_cache: dict = {}


def _reference_rows(d, shape, act, corpus):
    """Torch rows for a (shape, act): identical for every naming (the weights do not depend on it)."""
    key = (shape, act)
    if key not in _torch_rows_cache:
        ref, tok = reference_model(d), hf_tokenizer(d)
        singles, (pa, pb) = corpus
        batches = []
        keep = lambda *a: batches.append(a)  # noqa: E731
        _torch_rows_cache[key] = (torch_reference_rows(ref, tok, singles, None, 512, batch_size=16, on_batch=keep),
                                  torch_reference_rows(ref, tok, pa, pb, 512, on_batch=keep), batches)
    return _torch_rows_cache[key]


@pytest.mark.parametrize("naming", list(NAMINGS))
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_random_checkpoint_matches_torch(make_ckpt, random_corpus, shape, act, naming):
    d = make_ckpt(**SHAPES[shape], **NAMINGS[naming], hidden_act=act, seed=7)
    enc = Encoder(d)
    assert enc.config.hidden_act == act and enc.weights.pooler_w is not None
    assert enc.config.vocab_size == {"uncased": 30522, "chinese": 21128}[shape]
    singles, (pa, pb) = random_corpus[shape]
    rows1, rows2, torch_batches = _reference_rows(d, shape, act, random_corpus[shape])
    L = enc.config.num_hidden_layers
    diffs = LayerDiffs(L + 1)
    same_padding = numpy_same_padding(enc, diffs)
    for batch in torch_batches:  # the padded batches torch ran
        same_padding(*batch)
    # the Encoder's own tokenization and batching
    numpy_encoder_batching(enc, singles, None, 512, rows1, diffs)
    numpy_encoder_batching(enc, pa, pb, 512, rows2, diffs)
    print(f"\n{shape} {act} {naming}: largest |diff| per hidden state (0 = embeddings): "
          + " ".join(f"{v:.1e}" for v in diffs.worst))
    assert diffs.worst.max() <= HIDDEN_TOL, f"worst per layer {diffs.worst}"
    check_features(enc, singles, None, 512, rows1)
    check_features(enc, pa, pb, 512, rows2, poolings=("pooled", "cls", "mean", "max"))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gelu_python_runs_as_transformers_runs_it(make_ckpt, random_corpus, precision, monkeypatch):
    """hidden_act "gelu_python" (transformers' ACT2FN: the exact erf GELU written out in torch) was refused as not
    supported; it runs as "gelu": every hidden state and pooled vector as transformers' BertModel gives them (bf16:
    the same vectors as the model saved with "gelu", the fused kernels picked by the same name)."""
    from extract_util import precision_here

    precision_here(precision, monkeypatch)  # (bf16 emulated where the CPU has none)
    d = make_ckpt(**SHAPES["uncased"], hidden_act="gelu_python", seed=7)
    ref = reference_model(d)
    assert ref.config.hidden_act == "gelu_python"  # transformers runs its own gelu_python
    enc = Encoder(d, precision=precision)
    assert (enc.config.hidden_act, enc.config.act) == ("gelu_python", "gelu")
    singles, (pa, pb) = random_corpus["uncased"]
    if precision == "bf16":
        same = Encoder(make_ckpt(**SHAPES["uncased"], hidden_act="gelu", seed=7), precision=precision)
        np.testing.assert_array_equal(enc.encode(singles, pooling="mean"), same.encode(singles, pooling="mean"))
        return
    rows1, rows2, torch_batches = _reference_rows(d, "uncased", "gelu_python", random_corpus["uncased"])
    diffs = LayerDiffs(enc.config.num_hidden_layers + 1)
    same_padding = numpy_same_padding(enc, diffs)
    for batch in torch_batches:
        same_padding(*batch)
    assert diffs.worst.max() <= HIDDEN_TOL, f"worst per layer {diffs.worst}"
    check_features(enc, singles, None, 512, rows1)
    check_features(enc, pa, pb, 512, rows2)


def test_random_checkpoint_values_are_not_degenerate(make_ckpt, random_corpus):
    """The random weights give O(1), position-dependent hidden states and peaked attention, so the
    parity tests above compare informative numbers."""
    d = make_ckpt(**SHAPES["uncased"], hidden_act="gelu", seed=7)
    ref, tok = reference_model(d), hf_tokenizer(d)
    singles, _ = random_corpus["uncased"]
    b = tok(singles[:8], padding=True, return_tensors="pt")
    import torch

    with torch.no_grad():
        out = ref(**b, output_hidden_states=True, output_attentions=True)
    for h in out.hidden_states:
        real = h[b["attention_mask"].bool()]
        assert 0.3 < float(real.std()) < 3.0
        assert float(real.abs().max()) < 20
    probs = out.attentions[-1][0, :, : int(b["attention_mask"][0].sum()), : int(b["attention_mask"][0].sum())]
    assert float(probs.max()) > 2.0 / probs.shape[-1]  # not uniform


def test_workspace_reuse_gives_the_same_states(make_ckpt, random_corpus):
    """One Workspace across batches of other shapes (as Encoder's pool reuses it): every kept state
    equals a fresh forward pass, and earlier kept layers are not overwritten by later ones."""
    from bertfeat.model.bert import Workspace

    enc = Encoder(make_ckpt(**SHAPES["uncased"], **NAMINGS["plain"], hidden_act="gelu", seed=7))
    texts = random_corpus["uncased"][0]
    L = enc.config.num_hidden_layers
    keep = (0, 1, L - 1, L)
    ws = Workspace()
    for rows in (texts[:12], texts[12:15], texts[:12][::-1]):
        t = enc.tokenizer.encode(rows, None, 128)
        ids, types, mask = pad_batch(t.ids, t.type_ids, enc.tokenizer.pad_id)
        fresh = bert_forward(enc.weights, ids, types, mask, keep=keep)
        reused = bert_forward(enc.weights, ids, types, mask, keep=keep, ws=ws)
        for i in keep:
            np.testing.assert_array_equal(reused.hidden[i], fresh.hidden[i], err_msg=f"hidden state {i}")
        assert not np.array_equal(reused.hidden[1], reused.hidden[L])
    assert ws.nbytes > 0


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_last_layer_at_one_token_equals_the_whole_layer(make_ckpt, random_corpus, precision, monkeypatch):
    """run_layers' ``at``: the last layer computed at one token per sequence (what cls / lasttoken / the pooler read)
    equals the whole layer's state at those tokens, for first and last tokens and a mix; earlier kept states are
    unchanged; attentions asked for, or only the embeddings kept, run everything; any position, a middle token too
    (int8's scheme "4" ran the whole layer there: its first and last tokens were float rows, the others not)."""
    from bertfeat.model.pooling import first_positions, last_positions
    from extract_util import precision_here

    precision_here(precision, monkeypatch)  # (bf16 emulated where the CPU has none; int8 skipped where it has none)
    enc = Encoder(make_ckpt(**SHAPES["uncased"], **NAMINGS["plain"], hidden_act="gelu", seed=7), precision=precision)
    L = enc.config.num_hidden_layers
    texts = random_corpus["uncased"][0][:24]
    t = enc.tokenizer.encode(texts, None, 128)
    ids, types, mask = pad_batch(t.ids, t.type_ids, enc.tokenizer.pad_id)
    full = bert_forward(enc.weights, ids, types, mask, keep=(1, L))
    rows = np.arange(len(ids))
    tol = {"fp32": 2e-6, "bf16": 1e-2, "int8": 1e-2}[precision]  # bf16 / int8: a rounding flip in a bf16 activation
    for name, at in (("first", first_positions(mask)), ("last", last_positions(mask)),
                     ("mixed", np.where(rows % 2 == 0, 0, last_positions(mask)))):
        cut = bert_forward(enc.weights, ids, types, mask, keep=(1, L), at=at)
        assert cut.at is not None and cut.hidden[L].shape == (len(ids), 1, enc.config.hidden_size)
        want = full.hidden[L][rows, at]
        diff = np.abs(cut.hidden[L][:, 0] - want).max()
        print(f"\n{precision} {name}: largest difference to the whole layer {diff:.2e} (scale {np.abs(want).max():.1f})")
        assert diff <= tol, name
        np.testing.assert_array_equal(cut.hidden[1], full.hidden[1])  # an earlier kept layer: as before
    assert bert_forward(enc.weights, ids, types, mask, keep=(L,), at=at, output_attentions=True).at is None
    assert bert_forward(enc.weights, ids, types, mask, keep=(0,), at=at).at is None
    middle = np.minimum(2, last_positions(mask) - 1)  # a token that is neither first nor last
    middle_cut = bert_forward(enc.weights, ids, types, mask, keep=(L,), at=middle)
    assert middle_cut.at is not None
    assert np.abs(middle_cut.hidden[L][:, 0] - full.hidden[L][rows, middle]).max() <= tol


def test_parity_tolerance_detects_small_mistakes(make_ckpt, random_corpus):
    """The 1e-4 bound is tight enough to catch a wrong GELU variant or lost token types."""
    d = make_ckpt(**SHAPES["uncased"], hidden_act="gelu", seed=7)
    enc = Encoder(d)
    singles, (pa, pb) = random_corpus["uncased"]
    rows = _reference_rows(d, "uncased", "gelu", random_corpus["uncased"])[1]
    assert any(r.type_ids.any() for r in rows)
    wrong_act = dataclasses.replace(enc.weights, config=dataclasses.replace(enc.config, hidden_act="gelu_new"))
    for w, zero_types in ((wrong_act, False), (enc.weights, True)):
        worst = 0.0
        for row in rows:
            types = np.zeros_like(row.type_ids) if zero_types else row.type_ids
            fwd = bert_forward(w, row.ids[None], types[None], np.ones((1, len(row.ids)), np.int64))
            worst = max(worst, float(np.abs(fwd.hidden[enc.config.num_hidden_layers][0] - row.hidden[-1]).max()))
        print(f"\n{'token types zeroed' if zero_types else 'gelu_new instead of gelu'}: worst |diff| {worst:.2e}")
        assert worst > 3 * HIDDEN_TOL


@pytest.mark.parametrize("naming", ["natural", "legacy_plain"])
def test_mlm_checkpoint_matches_torch(make_ckpt, random_corpus, naming):
    """BertForMaskedLM files (bert. + cls.predictions.*): the encoder, the pooler stored as
    bert.pooler.* (as BertForPreTraining), and the MLM logits all match torch."""
    kw = dict(legacy_names=True, prefix=False) if naming == "legacy_plain" else {}
    d = make_ckpt(**SHAPES["uncased"], hidden_act="gelu", mlm_head=True, seed=3, **kw)
    enc = Encoder(d)
    assert enc.weights.mlm is not None and enc.weights.pooler_w is not None
    ref, tok = reference_model(d), hf_tokenizer(d)
    singles = random_corpus["uncased"][0][:10]
    b = tok(singles, padding=True, return_tensors="np")
    import torch

    with torch.no_grad():
        out = ref(**{k: torch.as_tensor(v) for k, v in b.items()}, output_hidden_states=True)
    L = enc.config.num_hidden_layers
    fwd = bert_forward(enc.weights, b["input_ids"], b["token_type_ids"], b["attention_mask"], keep=tuple(range(L + 1)))
    real = b["attention_mask"].astype(bool)
    per_layer = [float(np.abs(fwd.hidden[i][real] - out.hidden_states[i].numpy()[real]).max()) for i in range(L + 1)]
    print(f"\nMLM {naming}: largest |diff| per hidden state (0 = embeddings): " + " ".join(f"{v:.1e}" for v in per_layer))
    assert max(per_layer) <= HIDDEN_TOL, per_layer
    last = fwd.hidden[L]
    logits = mlm_logits(enc.weights, last[real])
    ref_logits = out.logits.numpy()[real]
    assert logits.shape == ref_logits.shape == (int(real.sum()), 30522)
    assert np.abs(logits - ref_logits).max() <= 1e-3 * max(1.0, float(np.abs(ref_logits).max()))
    assert (logits.argmax(1) == ref_logits.argmax(1)).mean() > 0.99
    check_features(enc, singles, None, 512, torch_reference_rows(ref, tok, singles, None, 512))


# --------------------------------------------------------------------------- activations
def test_erf_dense_grid_against_scipy_and_math():
    import scipy.special

    x = np.concatenate([np.linspace(-8, 8, 2_000_001, dtype=np.float32),
                        np.linspace(-1e-3, 1e-3, 20_001, dtype=np.float32)])
    y = erf(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    err = np.abs(y.astype(np.float64) - scipy.special.erf(x.astype(np.float64)))
    print(f"\nerf: max abs error {err.max():.3e} at x={x[err.argmax()]:.6f}")
    assert err.max() <= 2e-7
    rng = np.random.default_rng(0)
    pts = np.concatenate([rng.normal(0, 2, 3000), rng.uniform(-5, 5, 3000)]).astype(np.float32)
    ref = np.array([math.erf(float(v)) for v in pts])
    assert np.abs(erf(pts) - ref).max() <= 2e-7
    assert np.all(np.diff(erf(np.linspace(-5, 5, 100_001, dtype=np.float32))) >= 0)  # monotone
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1e30, -1e30, 1e-30, np.nan], dtype=np.float32)
    out = erf(special)
    np.testing.assert_array_equal(out[:6], [0.0, 0.0, 1.0, -1.0, 1.0, -1.0])
    assert np.signbit(out[1]) and abs(out[6] - 1.1283792e-30) < 1e-36 and np.isnan(out[7])


def test_gelu_variants_against_torch():
    import scipy.special
    import torch

    x = np.linspace(-12, 12, 1_200_001, dtype=np.float32)
    tx = torch.from_numpy(x)
    exact = 0.5 * x.astype(np.float64) * (1 + scipy.special.erf(x.astype(np.float64) / math.sqrt(2)))
    ours = gelu_erf(x)
    assert ours.dtype == np.float32
    # torch's exact GELU is itself ~1.2e-6 off float64 truth (it uses a 5-term erf fit)
    assert np.abs(ours - torch.nn.functional.gelu(tx).numpy()).max() <= 2e-6
    assert np.abs(ours - exact).max() <= 1e-6
    tanh_ref = torch.nn.functional.gelu(tx, approximate="tanh").numpy()
    assert np.abs(gelu_tanh(x) - tanh_ref).max() <= 1e-6
    from transformers.activations import ACT2FN

    for name, fn in (("gelu_new", gelu_tanh), ("gelu_pytorch_tanh", gelu_tanh), ("gelu_fast", gelu_tanh),
                     ("gelu", gelu_erf), ("gelu_python", gelu_erf), ("relu", relu)):
        assert np.abs(fn(x) - ACT2FN[name](tx).numpy()).max() <= 2e-6, name


def test_attention_scores_are_each_sequences_own():
    """bert.own_length_scores: a sequence's scores are the product of its own tokens only, bit for bit what it gets
    alone (the batched BLAS product rounds differently as the padded length changes), and padding scores are 0."""
    from bertfeat.model.bert import additive_mask, own_length_scores

    rng = np.random.default_rng(0)
    B, nh, T, hs = 5, 4, 37, 32
    lengths = np.array([33, 33, 35, 36, 37])
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
    q, k = (rng.standard_normal((B, nh, T, hs)).astype(np.float32) for _ in range(2))
    out = own_length_scores(q, k, additive_mask(mask), True, np.full((B, nh, T, T), np.nan, np.float32))
    for b, L in enumerate(lengths):
        alone = np.matmul(q[b:b + 1, :, :L], k[b:b + 1, :, :L].transpose(0, 1, 3, 2))  # (1, nh, L, L)
        np.testing.assert_array_equal(out[b:b + 1, :, :L, :L], alone)
        assert not out[b, :, L:, :].any() and not out[b, :, :, L:].any()
    one = own_length_scores(q[:, :, :1], k, additive_mask(mask), False, np.empty((B, nh, 1, T), np.float32))
    for b, L in enumerate(lengths):
        np.testing.assert_array_equal(one[b:b + 1, :, :, :L], np.matmul(q[b:b + 1, :, :1], k[b:b + 1, :, :L].transpose(0, 1, 3, 2)))
    # no padding: one product, as before
    full = np.ones((B, T), np.int64)
    np.testing.assert_array_equal(own_length_scores(q, k, additive_mask(full), True, np.empty((B, nh, T, T), np.float32)),
                                  np.matmul(q, k.transpose(0, 1, 3, 2)))
