"""MPNet (issue 28; bertfeat/model/mpnet.py) against transformers' MPNetModel / MPNetForMaskedLM and sentence-transformers.

Random-weight MPNet checkpoints saved by transformers (hidden 64, 2 layers, 4 heads; every tensor informative, as
st_ckpt._randomize_any draws them) with the vocabulary laid out as all-mpnet-base-v2's: <s> <pad> </s> <unk>, the
bert-base-uncased word pieces, <mask> (30,527 ids), and transformers' MPNetTokenizerFast. Real sentences, padded
batches of mixed lengths and texts over 128 tokens (so the logarithmic buckets and the last bucket are used).
Run with ``pytest -s`` to see the worst difference per layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertfeat.model.config import BertConfig
from bertfeat.model.encoder import Encoder
from bertfeat.errors import ConfigError, WeightsError
from bertfeat.model.bert import pooler
from bertfeat.model.families import forward
from bertfeat.model.mpnet import relative_position_bucket
from ckpt import VOCABS, precision_vs_fp32, single_blas_thread, torch_threads, without_tensor
from conftest import read_sst2

pytestmark = pytest.mark.live  # compared with transformers / sentence-transformers run live
TOL = 1e-5


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


# --------------------------------------------------------------------------- checkpoints
def mpnet_vocab() -> list[str]:
    """all-mpnet-base-v2's layout: <s> <pad> </s> <unk>, bert-base-uncased's word pieces, <mask>."""
    bert = VOCABS["uncased"][0].read_text(encoding="utf-8").splitlines()
    return ["<s>", "<pad>", "</s>", "<unk>"] + bert + ["<mask>"]


def mpnet_checkpoint(d: Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, mlm_head: bool = False,
                     seed: int = 0) -> Path:
    """A random-weight MPNetModel (with its pooler) or MPNetForMaskedLM saved by transformers, and its tokenizer."""
    import torch
    from transformers import MPNetConfig, MPNetForMaskedLM, MPNetModel, MPNetTokenizerFast

    from st_ckpt import _randomize_any

    d.mkdir(parents=True, exist_ok=True)
    vocab = mpnet_vocab()
    tok = MPNetTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True, model_max_length=512)
    tok.save_pretrained(str(d))
    cfg = MPNetConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=4 * hidden, max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
                      eos_token_id=2, layer_norm_eps=1e-5)
    torch.manual_seed(seed)
    m = (MPNetForMaskedLM if mlm_head else MPNetModel)(cfg)
    _randomize_any(m, seed)
    if mlm_head:
        m.tie_weights()
    m.save_pretrained(str(d))
    return d


def reference(d: Path, mlm: bool = False):
    from transformers import AutoModel, AutoModelForMaskedLM

    return (AutoModelForMaskedLM if mlm else AutoModel).from_pretrained(str(d), attn_implementation="eager").eval().float()


def hf_tok(d: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d))


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory) -> Path:
    return mpnet_checkpoint(tmp_path_factory.mktemp("mpnet") / "m")


@pytest.fixture(scope="module")
def long_texts(sample_data) -> list[str]:
    """Real texts of about 150-700 word pieces (SST-2 dev sentences joined)."""
    sst, _ = read_sst2(sample_data / "sst2" / "stsa.binary.dev")
    return [" ".join(sst[200 + 6 * k: 200 + 6 * k + n]) for k, n in enumerate((6, 8, 12, 20, 30))]


def torch_run(model, ids, mask):
    import torch

    with torch.no_grad(), torch_threads(1):
        out = model(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask), output_hidden_states=True,
                    output_attentions=True)
    return out


# --------------------------------------------------------------------------- the pieces
def test_buckets_match_transformers():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder
    import torch

    rel = np.arange(-1500, 1501)
    ref = MPNetEncoder.relative_position_bucket(torch.as_tensor(rel)).numpy()
    np.testing.assert_array_equal(relative_position_bucket(rel), ref)
    # every bucket is used (8 exact, 8 logarithmic per direction) but 16: distance 0 of the keys-after half
    assert set(relative_position_bucket(rel).tolist()) == set(range(32)) - {16}


def test_hidden_states_match_transformers(mpnet_dir, real_sentences, long_texts):
    """Every hidden state within 1e-5 of MPNetModel at real tokens; the pooler output and the attention maps too."""
    model, tok = reference(mpnet_dir), hf_tok(mpnet_dir)
    enc = Encoder(mpnet_dir)
    L = enc.config.num_hidden_layers
    texts = list(real_sentences) + list(long_texts)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(texts))  # mixed lengths in every batch
    worst, worst_pool, worst_att, worst_at, longest = np.zeros(L + 1), 0.0, 0.0, 0.0, 0
    for s in range(0, len(texts), 24):
        batch = [texts[i] for i in order[s:s + 24]]
        b = tok(batch, padding=True, truncation=True, max_length=512, return_tensors="np")
        ids, mask = b["input_ids"], b["attention_mask"]
        longest = max(longest, ids.shape[1])
        ref = torch_run(model, ids, mask)
        ours = forward(enc.weights, ids, np.zeros_like(ids), mask, keep=tuple(range(L + 1)), output_attentions=True)
        for r in range(len(ids)):
            n = int(mask[r].sum())
            for i in range(L + 1):
                worst[i] = max(worst[i], float(np.abs(ours.hidden[i][r, :n] - ref.hidden_states[i][r, :n].numpy()).max()))
            for i in range(L):
                a = ours.attentions[i][r, :, :n, :n] - ref.attentions[i][r, :, :n, :n].numpy()
                worst_att = max(worst_att, float(np.abs(a).max()))
        pooled = pooler(enc.weights, ours.hidden[L][:, 0])
        worst_pool = max(worst_pool, float(np.abs(pooled - ref.pooler_output.numpy()).max()))
        last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)  # the last layer at each last token alone
        at = forward(enc.weights, ids, np.zeros_like(ids), mask, keep=(L,), at=last)  # (the relative bias's rows)
        assert at.at is not None
        ref_at = ref.hidden_states[L].numpy()[np.arange(len(ids)), last]
        worst_at = max(worst_at, float(np.abs(at.hidden[L][:, 0] - ref_at).max()))
    print(f"\nMPNet vs transformers, {len(texts)} texts up to {longest} tokens: max |diff| per hidden state "
          + ", ".join(f"{i}: {d:.2e}" for i, d in enumerate(worst)) + f"; pooler {worst_pool:.2e}; attention {worst_att:.2e}"
          + f"; last layer at the last token alone {worst_at:.2e}")
    assert longest > 300
    assert worst.max() <= TOL and worst_pool <= TOL and worst_att <= TOL and worst_at <= TOL


def test_mpnet_prefix_and_pooled_features(mpnet_dir, tmp_path, real_sentences):
    """MPNetFor* checkpoints store the encoder under 'mpnet.': the same features; pooling 'pooled' is the pooler."""
    import shutil

    from safetensors.numpy import load_file, save_file

    d = tmp_path / "prefixed"
    shutil.copytree(mpnet_dir, d)
    t = load_file(str(d / "model.safetensors"))
    save_file({"mpnet." + k: v for k, v in t.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    texts = real_sentences[:40]
    a = Encoder(mpnet_dir).encode(texts, pooling="pooled")
    b = Encoder(d).encode(texts, pooling="pooled")
    np.testing.assert_array_equal(a, b)
    model, tok = reference(mpnet_dir), hf_tok(mpnet_dir)
    bt = tok(texts, padding=True, truncation=True, return_tensors="np")
    ref = torch_run(model, bt["input_ids"], bt["attention_mask"]).pooler_output.numpy()
    assert np.abs(a - ref).max() <= TOL


def test_pairs_match_transformers(mpnet_dir, real_sentences):
    """A pair is <s> A </s></s> B </s>, all type 0 (MPNetModel has no token types): mean of the last layer."""
    model, tok = reference(mpnet_dir), hf_tok(mpnet_dir)
    a, b = real_sentences[250:290], real_sentences[290:330]
    ours = Encoder(mpnet_dir).encode(a, b, pooling="mean")
    t = tok(a, b, padding=True, truncation=True, return_tensors="np")
    assert "token_type_ids" not in t
    h = torch_run(model, t["input_ids"], t["attention_mask"]).last_hidden_state.numpy()
    m = t["attention_mask"][..., None].astype(np.float64)
    ref = ((h * m).sum(1) / m.sum(1)).astype(np.float32)
    print(f"\nMPNet pairs: max |diff| of mean pooling {np.abs(ours - ref).max():.2e}")
    assert np.abs(ours - ref).max() <= TOL


def test_long_text_chunks(mpnet_dir, long_texts):
    """chunk-mean: each window framed <s> .. </s>, run through the model; the mean of the windows."""
    enc = Encoder(mpnet_dir, max_length=128)
    X = enc.encode(long_texts, long_text="chunk-mean", pooling="mean", return_info=True)
    assert X.features.shape == (len(long_texts), 64) and np.isfinite(X.features).all()
    assert (X.n_chunks > 1).all()


# --------------------------------------------------------------------------- sentence-transformers
@pytest.fixture(scope="module")
def st_dir(mpnet_dir, tmp_path_factory) -> Path:
    """As all-mpnet-base-v2: Transformer -> mean Pooling -> Normalize, saved by sentence-transformers."""
    from st_ckpt import st_folder

    return st_folder(tmp_path_factory.mktemp("st") / "all-mpnet-like", base=mpnet_dir, pooling="mean",
                     normalize=True, max_seq_length=384)


def test_encoder_and_cli_equal_sentence_transformers(st_dir, real_sentences, long_texts, tmp_path, capsys):
    import pyarrow.parquet as pq
    from sentence_transformers import SentenceTransformer

    from extract_util import run

    texts = list(real_sentences[:120]) + list(long_texts)
    with torch_threads(1):
        ref = SentenceTransformer(str(st_dir), device="cpu").encode(texts, batch_size=32, convert_to_numpy=True)
    ours = Encoder(st_dir).encode(texts)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    rc, _, err = run(capsys, "extract", src, "-m", st_dir, "-o", out, "-q")
    assert rc == 0, err
    X = np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    print(f"\nMPNet sentence-transformers folder: Encoder.encode max |diff| {np.abs(ours - ref).max():.2e}, "
          f"bertfeat extract {np.abs(X - ref).max():.2e}")
    assert ours.shape == ref.shape == X.shape
    assert np.abs(ours - ref).max() <= TOL and np.abs(X - ref).max() <= TOL


def test_info_names_the_family(st_dir):
    from bertfeat.inspection import model_info

    info = model_info(str(st_dir))
    assert info["family"] == "MPNet" and info["model_type"] == "mpnet"
    assert info["pooler"] == "yes"


def test_dask_engine_and_sklearn(st_dir, real_sentences, long_texts, tmp_path, dask_client):
    """The Dask engine writes the local engine's features (same ids), TextFeatures gives Encoder.encode's."""
    from conftest import need
    from extract_util import assert_dask_and_sklearn_agree

    need("sklearn")
    assert_dask_and_sklearn_agree(st_dir, list(real_sentences[:28]) + list(long_texts[:4]), tmp_path, dask_client)


# --------------------------------------------------------------------------- fill-mask
def test_fill_mask_matches_mpnet_for_masked_lm(tmp_path):
    from bertfeat.inspection import masked_lm_logits

    d = mpnet_checkpoint(tmp_path / "mlm", mlm_head=True, seed=3)
    text = "The capital of France is <mask>, a city on the river."
    tokens, pos, logits = masked_lm_logits(text, model=str(d))
    model, tok = reference(d, mlm=True), hf_tok(d)
    import torch

    b = tok(text, return_tensors="pt")
    with torch.no_grad():
        ref = model(**b).logits[0].numpy()
    # bertfeat shows the lstrip <mask> with the space it absorbed (' <mask>'), as for RoBERTa
    assert [t.strip() for t in tokens] == tok.convert_ids_to_tokens(b["input_ids"][0])
    assert list(pos) == [[t.strip() for t in tokens].index("<mask>")]
    print(f"\nMPNet fill-mask: max |diff| of the logits {np.abs(logits - ref[pos]).max():.2e}")
    assert np.abs(logits - ref[pos]).max() <= 1e-4  # logits ~ O(10): 1e-5 relative


# --------------------------------------------------------------------------- precisions
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_other_precisions(mpnet_dir, real_sentences, precision):
    cos = precision_vs_fp32(mpnet_dir, real_sentences[:60], precision)
    print(f"\nMPNet {precision} vs fp32: min cosine {cos.min():.5f}")
    assert cos.min() > 0.995


# --------------------------------------------------------------------------- refusals
def test_missing_tensor_is_named(mpnet_dir, tmp_path):
    d = without_tensor(mpnet_dir, "encoder.relative_attention_bias.weight", tmp_path / "missing")
    with pytest.raises(WeightsError, match=r"tensor 'encoder.relative_attention_bias.weight' is missing \(expected shape \(32, 4\)\)"):
        Encoder(d)


def test_bad_configs_are_refused(mpnet_dir):
    cfg = json.loads((mpnet_dir / "config.json").read_text())
    with pytest.raises(ConfigError, match="hidden_size 60 is not a multiple of num_attention_heads 8"):
        BertConfig.from_dict({**cfg, "hidden_size": 60, "num_attention_heads": 8})
    with pytest.raises(ConfigError, match="relative_attention_num_buckets 16 is below the 32 buckets"):
        BertConfig.from_dict({**cfg, "relative_attention_num_buckets": 16})
    c = BertConfig.from_dict(cfg)
    assert (c.position_offset, c.max_positions, c.has_token_types) == (2, 512, False)


def test_vocab_txt_only_folder_frames_pairs_as_mpnet(mpnet_dir, tmp_path, real_sentences):
    """An MPNet folder with vocab.txt + tokenizer_config.json only: pairs are <s> A </s></s> B </s> (MPNetTokenizer's
    template, not BERT's), ids as transformers', features as MPNetModel's."""
    import shutil

    d = tmp_path / "vocab_only"
    shutil.copytree(mpnet_dir, d)
    (d / "tokenizer.json").unlink()
    (d / "vocab.txt").write_text("\n".join(mpnet_vocab()) + "\n", encoding="utf-8")
    tok = hf_tok(d)
    enc = Encoder(d)
    assert enc.tokenizer.source.startswith("vocab.txt")
    a, b = real_sentences[:12], real_sentences[12:24]
    for x, y in zip(a, b):
        assert enc.tokenizer.encode([x], [y]).ids[0].tolist() == tok(x, y)["input_ids"]
        assert enc.tokenizer.encode([x]).ids[0].tolist() == tok(x)["input_ids"]
    assert enc.tokenizer.tokens("hi <mask> there")[0].ids == tok("hi <mask> there")["input_ids"]  # mask eats the space
    ours = enc.encode(a, b, pooling="mean")
    t = tok(a, b, padding=True, return_tensors="np")
    h = torch_run(reference(d), t["input_ids"], t["attention_mask"]).last_hidden_state.numpy()
    m = t["attention_mask"][..., None].astype(np.float64)
    ref = ((h * m).sum(1) / m.sum(1)).astype(np.float32)
    print(f"\nMPNet vocab.txt pairs: max |diff| of mean pooling {np.abs(ours - ref).max():.2e}")
    assert np.abs(ours - ref).max() <= TOL


def test_literal_pad_token_in_text_positions_as_transformers(mpnet_dir, real_sentences):
    """A text holding the literal "<pad>": transformers gives it the padding position and counts the tokens after it
    on from there; in a padded batch with ordinary rows, every row as MPNetModel's."""
    model, tok = reference(mpnet_dir), hf_tok(mpnet_dir)
    texts = ["hello <pad> world", "<pad>", "a <pad><pad> b c", real_sentences[3], "no pad here"]
    ours = Encoder(mpnet_dir).encode(texts, pooling="mean", batch_size=8)
    t = tok(texts, padding=True, return_tensors="np")
    assert ((t["input_ids"][0] == 1) & (t["attention_mask"][0] == 1)).sum() == 1  # the <pad> is a real token
    h = torch_run(model, t["input_ids"], t["attention_mask"]).last_hidden_state.numpy()
    m = t["attention_mask"][..., None].astype(np.float64)
    ref = ((h * m).sum(1) / m.sum(1)).astype(np.float32)
    print(f"\nMPNet literal <pad>: max |diff| of mean pooling {np.abs(ours - ref).max():.2e}")
    assert np.abs(ours - ref).max() <= TOL
