"""ModernBERT (issue 28; bertfeat/model/modernbert.py) against transformers' ModernBertModel / ModernBertForMaskedLM and
sentence-transformers.

Random-weight ModernBERT checkpoints saved by transformers (hidden 64, 4 heads, 3 layers with
global_attn_every_n_layers=2, so layers 0 and 2 attend globally and layer 1 within a window; local_attention 16, so
most texts are longer than the window; every tensor informative, as st_ckpt._randomize_any draws them), with
biases off (ModernBERT's default) or all on. The tokenizer, as ModernBERT's: a byte-level BPE tokenizer.json with
[CLS] / [SEP] / [PAD] / [MASK] / [UNK] specials and a [CLS] $A [SEP] template, here trained with `tokenizers` on the
test sentences, loaded by transformers as PreTrainedTokenizerFast. Real sentences, padded batches of mixed lengths,
texts of several hundred tokens. Run with ``pytest -s`` to see the worst difference per layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertfeat.model.config import BertConfig
from bertfeat.model.encoder import Encoder
from bertfeat.errors import BertfeatError, ConfigError, WeightsError
from bertfeat.model.families import forward
from bertfeat.model.modernbert import attend_blocked
from ckpt import precision_vs_fp32, single_blas_thread, torch_threads, without_tensor
from conftest import read_sst2

pytestmark = pytest.mark.live  # compared with transformers / sentence-transformers run live
TOL = 1e-5
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


# --------------------------------------------------------------------------- checkpoints
def bpe_tokenizer(d: Path, corpus: list[str]) -> None:
    """A byte-level BPE tokenizer.json (as ModernBERT's: [CLS] A [SEP], [CLS] A [SEP] B [SEP]) trained on ``corpus``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE(unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIALS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                      pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
                                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tk.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "clean_up_tokenization_spaces": True,
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]",
        "unk_token": "[UNK]"}, indent=2))
    (d / "special_tokens_map.json").write_text(json.dumps({t[1:-1].lower() + "_token": t for t in SPECIALS}))


def modernbert_checkpoint(d: Path, corpus: list[str], *, biases: bool = False, mlm_head: bool = False,
                          seed: int = 0, layers: int = 3, every: int = 2, window: int = 16) -> Path:
    """A random-weight ModernBertModel (or ModernBertForMaskedLM) saved by transformers, and its tokenizer."""
    import torch
    from transformers import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel

    from st_ckpt import _randomize_any

    d.mkdir(parents=True, exist_ok=True)
    bpe_tokenizer(d, corpus)
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(d / "tokenizer.json"))
    ids = {t: tk.token_to_id(t) for t in SPECIALS}
    cfg = ModernBertConfig(vocab_size=tk.get_vocab_size(), hidden_size=64, num_hidden_layers=layers,
                           num_attention_heads=4, intermediate_size=96, max_position_embeddings=8192,
                           global_attn_every_n_layers=every, local_attention=window, pad_token_id=ids["[PAD]"],
                           cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"], bos_token_id=ids["[CLS]"],
                           eos_token_id=ids["[SEP]"], attention_bias=biases, mlp_bias=biases, norm_bias=biases,
                           classifier_bias=biases, global_rope_theta=160000.0, local_rope_theta=10000.0)
    torch.manual_seed(seed)
    m = (ModernBertForMaskedLM if mlm_head else ModernBertModel)(cfg)
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
def long_texts(sample_data) -> list[str]:
    """Real texts of about 150-700 tokens (SST-2 dev sentences joined)."""
    sst, _ = read_sst2(sample_data / "sst2" / "stsa.binary.dev")
    return [" ".join(sst[200 + 6 * k: 200 + 6 * k + n]) for k, n in enumerate((6, 8, 12, 20, 30))]


@pytest.fixture(scope="module")
def corpus(real_sentences, long_texts) -> list[str]:
    return list(real_sentences) + list(long_texts)


@pytest.fixture(scope="module")
def mb_dir(tmp_path_factory, corpus) -> Path:
    return modernbert_checkpoint(tmp_path_factory.mktemp("modernbert") / "m", corpus)


@pytest.fixture(scope="module")
def mb_bias_dir(tmp_path_factory, corpus) -> Path:
    return modernbert_checkpoint(tmp_path_factory.mktemp("modernbert_bias") / "m", corpus, biases=True, seed=1)


def torch_run(model, ids, mask):
    import torch

    with torch.no_grad(), torch_threads(1):
        return model(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask), output_hidden_states=True,
                     output_attentions=True)


# --------------------------------------------------------------------------- the pieces
def test_blocked_attention_equals_one_block():
    """Blocks of 16 query rows (window 5 each side, padding) give the one-block result at real tokens, the
    probabilities too; a padding query's context is 0."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 70, 8)).astype(np.float32) for _ in range(3))
    keep = np.ones((2, 70), dtype=bool)
    keep[1, 50:] = False
    for side in (None, 5):
        a, pa = attend_blocked(q, k, v, keep, side, want_probs=True, block_floats=1 << 40)
        b, pb = attend_blocked(q, k, v, keep, side, want_probs=True, block_floats=16 * 3 * 2 * 70)
        for r in range(2):
            n = int(keep[r].sum())
            assert np.abs(a[r, :, :n] - b[r, :, :n]).max() < 1e-6 and np.abs(pa[r, :, :n] - pb[r, :, :n]).max() < 1e-6
        assert not a[1, :, 50:].any() and not b[1, :, 50:].any()
        if side is not None:
            i, j = np.indices((70, 70))
            assert (pa[0][:, np.abs(i - j) > side] == 0).all()  # row 0: no padding


@pytest.mark.parametrize("which", ["no biases", "biases"])
def test_hidden_states_match_transformers(which, mb_dir, mb_bias_dir, corpus):
    """Every hidden state within 1e-5 of ModernBertModel (eager attention) at real tokens, the attention maps too."""
    d = mb_dir if which == "no biases" else mb_bias_dir
    model, tok = reference(d), hf_tok(d)
    enc = Encoder(d)
    c = enc.config
    L = c.num_hidden_layers
    assert set(c.layer_types) == {"full_attention", "sliding_attention"}
    rng = np.random.default_rng(0)
    order = rng.permutation(len(corpus))  # mixed lengths in every batch
    worst, worst_att, longest = np.zeros(L + 1), 0.0, 0
    for s in range(0, len(corpus), 45):
        batch = [corpus[i] for i in order[s:s + 45]]
        b = tok(batch, padding=True, return_tensors="np")
        ids, mask = b["input_ids"], b["attention_mask"]
        longest = max(longest, ids.shape[1])
        ref = torch_run(model, ids, mask)
        ours = forward(enc.weights, ids, np.zeros_like(ids), mask, keep=tuple(range(L + 1)), output_attentions=True)
        ref_h = [h.numpy() for h in ref.hidden_states[:L]] + [ref.last_hidden_state.numpy()]
        for r in range(len(ids)):
            n = int(mask[r].sum())
            for i in range(L + 1):
                worst[i] = max(worst[i], float(np.abs(ours.hidden[i][r, :n] - ref_h[i][r, :n]).max()))
            for i in range(L):
                a = ours.attentions[i][r, :, :n, :n] - ref.attentions[i][r, :, :n, :n].numpy()
                worst_att = max(worst_att, float(np.abs(a).max()))
    print(f"\nModernBERT ({which}) vs transformers, {len(corpus)} texts up to {longest} tokens, window "
          f"{c.local_attention}: max |diff| per hidden state " + ", ".join(f"{i}: {x:.2e}" for i, x in enumerate(worst))
          + f" ({L}: after final_norm); attention {worst_att:.2e}")
    assert longest > 300
    assert worst.max() <= TOL and worst_att <= TOL


def test_model_prefix_and_mlm_checkpoint(mb_dir, tmp_path, real_sentences):
    """ModernBertFor* checkpoints store the encoder under 'model.': the same features."""
    import shutil

    from safetensors.numpy import load_file, save_file

    d = tmp_path / "prefixed"
    shutil.copytree(mb_dir, d)
    t = load_file(str(d / "model.safetensors"))
    save_file({"model." + k: v for k, v in t.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    texts = real_sentences[:40]
    np.testing.assert_array_equal(Encoder(mb_dir).encode(texts, pooling="mean"), Encoder(d).encode(texts, pooling="mean"))


def test_fill_mask_matches_modernbert_for_masked_lm(tmp_path, corpus):
    from bertfeat.inspection import masked_lm_logits

    d = modernbert_checkpoint(tmp_path / "mlm", corpus, mlm_head=True, seed=3)
    text = "The film is a [MASK] piece of work, and the acting is fine."
    tokens, pos, logits = masked_lm_logits(text, model=str(d))
    model, tok = reference(d, mlm=True), hf_tok(d)
    import torch

    b = tok(text, return_tensors="pt")
    with torch.no_grad():
        ref = model(**b).logits[0].numpy()
    assert list(pos) == [tok.convert_ids_to_tokens(b["input_ids"][0]).index("[MASK]")]
    print(f"\nModernBERT fill-mask: max |diff| of the logits {np.abs(logits - ref[pos]).max():.2e}")
    assert np.abs(logits - ref[pos]).max() <= 1e-4  # logits ~ O(10): 1e-5 relative


# --------------------------------------------------------------------------- sentence-transformers
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_and_cli_equal_sentence_transformers(pooling, mb_dir, tmp_path_factory, real_sentences, long_texts,
                                                     tmp_path, capsys):
    import pyarrow.parquet as pq
    from sentence_transformers import SentenceTransformer

    from extract_util import run
    from st_ckpt import st_folder

    st_dir = st_folder(tmp_path_factory.mktemp("st") / f"mb-{pooling}", base=mb_dir, pooling=pooling,
                       normalize=pooling == "mean", max_seq_length=1024)
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
    print(f"\nModernBERT sentence-transformers folder ({pooling}): Encoder.encode max |diff| "
          f"{np.abs(ours - ref).max():.2e}, bertfeat extract {np.abs(X - ref).max():.2e}")
    assert ours.shape == ref.shape == X.shape
    assert np.abs(ours - ref).max() <= TOL and np.abs(X - ref).max() <= TOL


def test_info_names_the_family(mb_dir):
    from bertfeat.inspection import model_info

    info = model_info(str(mb_dir))
    assert info["family"] == "ModernBERT" and info["model_type"] == "modernbert"


@pytest.fixture(scope="module")
def st_mean_dir(mb_dir, tmp_path_factory) -> Path:
    """As modernbert-embed-base: Transformer -> mean Pooling -> Normalize, saved by sentence-transformers."""
    from st_ckpt import st_folder

    return st_folder(tmp_path_factory.mktemp("st") / "mb-mean-normalize", base=mb_dir, pooling="mean", normalize=True,
                     max_seq_length=1024)


def test_dask_engine_and_sklearn(st_mean_dir, real_sentences, long_texts, tmp_path, dask_client):
    """The Dask engine writes the local engine's features (same ids), TextFeatures gives Encoder.encode's; the long
    texts (hundreds of tokens) run the sliding-window layers (window 16) on the workers too."""
    from conftest import need
    from extract_util import assert_dask_and_sklearn_agree

    need("sklearn")
    n_tokens = assert_dask_and_sklearn_agree(st_mean_dir, list(real_sentences[:28]) + list(long_texts[:4]), tmp_path,
                                             dask_client)
    assert max(n_tokens) > 10 * 16  # far beyond the local layers' window


# --------------------------------------------------------------------------- precisions
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_other_precisions(mb_dir, real_sentences, precision):
    cos = precision_vs_fp32(mb_dir, real_sentences[:60], precision)
    print(f"\nModernBERT {precision} vs fp32: min cosine {cos.min():.5f}")
    assert cos.min() > 0.99


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_a_texts_features_do_not_depend_on_its_batch(mb_dir, real_sentences, long_texts, precision, monkeypatch):
    """Each text alone and in one call with texts of other lengths (short, past the window, several hundred tokens):
    the same features bit for bit, in every precision (attention per sequence, blocks by its length alone). Before:
    up to 3e-7 apart, and on a hidden-48 model 1.6e-3 at bf16, 9e-4 at int8 (a float difference crossing a bf16
    rounding or an int8 step)."""
    monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")
    try:
        enc = Encoder(mb_dir, precision=precision)
    except BertfeatError as e:
        pytest.skip(f"{precision} not available here: {e.message}")
    if enc.gemm_path.library != "onednn":
        pytest.skip(f"{precision} runs on {enc.gemm_path.library}: NumPy's BLAS rounds a row by the row count")
    texts = ["ok", "[SEP]"] + list(real_sentences[:20]) + list(long_texts[:2])
    together = enc.encode(texts)
    alone = np.concatenate([enc.encode([t]) for t in texts])
    print(f"\nModernBERT {precision}: max |alone - together| {np.abs(alone - together).max():.2e}")
    np.testing.assert_array_equal(alone, together)


def test_a_cache_filled_before_the_attention_ran_per_sequence_is_not_served(mb_dir, real_sentences, tmp_path,
                                                                             monkeypatch):
    """ModernBERT's attention per sequence (0.3.0.dev0, above) rounds otherwise than before, on any kernels: with its
    cache key unchanged, a cache filled before served its vectors beside newly encoded ones, so the features depended
    on what the cache held. A cache filled under the key before (store.attention_revision off, as the code before
    had it) is not served now, and the provenance records the revision."""
    import bertfeat
    import bertfeat.cache.store
    from bertfeat.cache.store import cache_fingerprint
    from bertfeat.features import read_features

    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f'"{t}"\n' for t in (s.replace('"', '""') for s in real_sentences[:10])))
    cache = tmp_path / "c"
    enc = Encoder(mb_dir)
    fp, settings = cache_fingerprint(enc, enc.spec())
    with monkeypatch.context() as m:  # the key before the revision (raising=False: the code before had none)
        m.setattr(bertfeat.cache.store, "attention_revision", lambda encoder: None, raising=False)
        s = bertfeat.extract(src, tmp_path / "before.parquet", model=str(mb_dir), cache=cache, quiet=True)
        before = cache_fingerprint(enc, enc.spec())[0]
    assert (s.rows_encoded, s.rows_reused) == (10, 0)
    s = bertfeat.extract(src, tmp_path / "now.parquet", model=str(mb_dir), cache=cache, quiet=True)
    assert (s.rows_encoded, s.rows_reused) == (10, 0)  # the vectors cached before are not this run's
    assert fp != before
    assert settings["gemm"]["attention"] == read_features(tmp_path / "now.parquet")[2]["gemm"]["attention"] == "per sequence"


# --------------------------------------------------------------------------- refusals
def test_missing_tensor_is_named(mb_dir, tmp_path):
    d = without_tensor(mb_dir, "layers.1.mlp.Wi.weight", tmp_path / "missing")
    with pytest.raises(WeightsError, match=r"tensor 'layers.1.mlp.Wi.weight' is missing \(expected shape \(192, 64\)\)"):
        Encoder(d)


def test_biases_config_must_match_weights(mb_bias_dir, tmp_path):
    """A checkpoint with biases under a config saying there are none: the extra tensors are named."""
    import shutil

    d = tmp_path / "biases"
    shutil.copytree(mb_bias_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "attention_bias": False}))
    with pytest.raises(WeightsError, match=r"'layers.0.attn.Wo.bias' \(64,\)"):
        Encoder(d)


def test_bad_configs_are_refused(mb_dir):
    cfg = json.loads((mb_dir / "config.json").read_text())
    with pytest.raises(ConfigError, match="hidden_size 60 is not a multiple of num_attention_heads 8"):
        BertConfig.from_dict({**cfg, "hidden_size": 60, "num_attention_heads": 8})
    with pytest.raises(ConfigError, match="hidden_activation 'swish' is not supported"):
        BertConfig.from_dict({**cfg, "hidden_activation": "swish"})
    with pytest.raises(ConfigError, match="rotary scaling"):
        BertConfig.from_dict({**cfg, "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 2.0}}})
    with pytest.raises(ConfigError, match="layer_types must list 3"):
        BertConfig.from_dict({**cfg, "layer_types": ["full_attention"]})
    # a flat rope_parameters (transformers refuses it) was passed over for the default base, one not an object failed
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict({**cfg, "rope_parameters": {"rope_theta": 5000.0, "rope_type": "default"}})
    assert str(e.value) == ("config.json: rope_parameters has 'rope_theta', 'rope_type'; it holds one object per layer "
                            "type, under 'full_attention' / 'sliding_attention' - restore config.json from the checkpoint")
    for bad, what in (([1], "rope_parameters is a JSON list"), ({"full_attention": 5000}, "rope_parameters full_attention is 5000")):
        with pytest.raises(ConfigError) as e:
            BertConfig.from_dict({**cfg, "rope_parameters": bad})
        assert str(e.value).startswith(f"config.json: {what}, not a JSON object - ")
    part = BertConfig.from_dict({**cfg, "rope_parameters": {"full_attention": {"rope_theta": 5000.0}}})
    assert (part.global_rope_theta, part.local_rope_theta) == (5000.0, 10000.0)  # as transformers fills it
    c = BertConfig.from_dict(cfg)
    assert (c.position_offset, c.max_positions, c.token_types) == (0, 8192, False)


def test_hub_config_names():
    """The hub's config.json (answerdotai/ModernBERT-base's names): global_attn_every_n_layers, *_rope_theta."""
    d = {"model_type": "modernbert", "hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
         "intermediate_size": 1152, "hidden_activation": "gelu", "norm_eps": 1e-5, "norm_bias": False,
         "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0,
         "local_attention": 128, "max_position_embeddings": 8192, "vocab_size": 50368, "pad_token_id": 50283}
    c = BertConfig.from_dict(d)
    assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == [0, 3, 6, 9, 12, 15, 18, 21]
    assert (c.global_rope_theta, c.local_rope_theta, c.local_attention, c.layer_norm_eps) == (160000.0, 10000.0, 128, 1e-5)
    assert c.family == "ModernBERT"


# --------------------------------------------------------------------------- config.json names transformers reads
def test_sliding_window_sets_the_window_as_in_transformers(mb_dir, tmp_path_factory, long_texts):
    """ModernBertConfig's sliding_window (half the window) sets local_attention = 2 * sliding_window, over a
    local_attention beside it: bertfeat read local_attention only (its default 128 without one), so every text longer
    than the window got other vectors than sentence-transformers' (cos 0.979)."""
    import shutil

    from sentence_transformers import SentenceTransformer

    from st_ckpt import st_folder

    st_dir = st_folder(tmp_path_factory.mktemp("st") / "mb-sw", base=mb_dir, pooling="mean", max_seq_length=256)
    texts = [" ".join(long_texts)[:400 * k] for k in (1, 2, 3)]
    for i, edit in enumerate(({"sliding_window": 4}, {"sliding_window": 4, "local_attention": None})):
        d = tmp_path_factory.mktemp("sw") / f"m{i}"
        shutil.copytree(st_dir, d)
        cfg = {k: v for k, v in {**json.loads((d / "config.json").read_text()), **edit}.items() if v is not None}
        (d / "config.json").write_text(json.dumps(cfg))
        enc = Encoder(d)
        assert enc.config.local_attention == 8
        with torch_threads(1):
            ref = SentenceTransformer(str(d), device="cpu").encode(texts, batch_size=4, convert_to_numpy=True)
        assert np.abs(enc.encode(texts) - ref).max() <= TOL
    with pytest.raises(ConfigError, match="sliding_window must be a positive integer, not 0"):
        BertConfig.from_dict({**json.loads((mb_dir / "config.json").read_text()), "sliding_window": 0})
