"""CamemBERT, ELECTRA and DistilBERT (issue 28) against transformers' AutoModel and sentence-transformers.

Every checkpoint is a small random-weight model built and saved by transformers itself (``save_pretrained``), so
bertfeat reads the tensor names and config.json the library really writes: CamemBERT (RoBERTa's architecture, an
XLM-R style SentencePiece tokenizer, position ids from padding_idx + 1), ELECTRA (embedding_size 32 < hidden 64:
embeddings_project), DistilBERT (dim / n_layers / n_heads / hidden_dim, no token types).
Run with ``pytest -s`` to see the largest difference per layer.
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.live  # every test compares with transformers / sentence-transformers
pytest.importorskip("torch", reason="the parity tests compare with transformers (torch)")
pytest.importorskip("sentence_transformers", reason="the parity tests compare with sentence-transformers")
import torch  # noqa: E402

from bertfeat.model.config import BertConfig  # noqa: E402
from bertfeat.model.encoder import Encoder  # noqa: E402
from bertfeat.errors import BertfeatError, ConfigError, WeightsError  # noqa: E402
from bertfeat.model.bert import bert_forward  # noqa: E402
from bertfeat.model.tokenize import pad_batch  # noqa: E402
from ckpt import precision_vs_fp32, single_blas_thread, tokenizer_json, vocab_file, without_tensor  # noqa: E402
from extract_util import run  # noqa: E402
from st_ckpt import _randomize_any, st_folder  # noqa: E402

FAMILIES = ("camembert", "electra", "distilbert")
TOL = 1e-5
MAX_POS = {"camembert": 130, "electra": 128, "distilbert": 96}  # max lengths 128, 128, 96


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


def _randomize(model, seed: int) -> None:
    """st_ckpt's draw, with ELECTRA's embeddings_project a linear weight (N(0, 1 / fan_in)), not an embedding."""
    _randomize_any(model, seed, embedding=lambda name: "embeddings." in name and "project" not in name)


def family_config(family: str, vocab: int, **over):
    from transformers import CamembertConfig, DistilBertConfig, ElectraConfig

    if family == "camembert":
        kw = dict(vocab_size=vocab, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                  max_position_embeddings=MAX_POS[family], type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                  eos_token_id=2, layer_norm_eps=1e-5)
        return CamembertConfig(**{**kw, **over})
    if family == "electra":
        kw = dict(vocab_size=vocab, embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=MAX_POS[family], hidden_act="gelu")
        return ElectraConfig(**{**kw, **over})
    kw = dict(vocab_size=vocab, dim=48, n_layers=2, n_heads=4, hidden_dim=96, max_position_embeddings=MAX_POS[family],
              activation="gelu", sinusoidal_pos_embds=False)
    return DistilBertConfig(**{**kw, **over})


def _write_tokenizer(d: Path, family: str) -> int:
    """Tokenizer files as the family's checkpoints have them; returns the vocab size."""
    if family == "camembert":
        from st_ckpt import _tokenizer
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_object=_tokenizer("xlm-roberta"), bos_token="<s>", eos_token="</s>",
                                      cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                      mask_token="<mask>", model_max_length=MAX_POS[family] - 2)
        tok.model_input_names = ["input_ids", "attention_mask"]
        tok.save_pretrained(str(d))
        return len(tok)
    vpath = vocab_file("uncased")
    shutil.copyfile(vpath, d / "vocab.txt")
    (d / "tokenizer.json").write_text(tokenizer_json(vpath, True), encoding="utf-8")
    cls = {"electra": "ElectraTokenizer", "distilbert": "DistilBertTokenizer"}[family]
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "tokenizer_class": cls,
                                                         "model_max_length": MAX_POS[family]}))
    return sum(1 for _ in open(vpath, encoding="utf-8"))


def family_checkpoint(d: Path, family: str, head: str | None = None, seed: int = 0, **over) -> Path:
    """A random-weight checkpoint saved by transformers: AutoModel (no prefix), or with ``head`` 'mlm' (the family's
    ForMaskedLM: prefixed, with its MLM head) or 'pretraining' (ELECTRA's discriminator, ElectraForPreTraining)."""
    from transformers import AutoModel, AutoModelForMaskedLM, ElectraForPreTraining

    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    vocab = _write_tokenizer(d, family)
    config = family_config(family, vocab, **over)
    torch.manual_seed(seed)
    Model = {None: AutoModel.from_config, "mlm": AutoModelForMaskedLM.from_config,
             "pretraining": ElectraForPreTraining}[head]
    model = Model(config)
    _randomize(model, seed)
    if head == "mlm":
        model.tie_weights()
    model.save_pretrained(str(d))
    return d


@lru_cache(maxsize=None)
def _root() -> Path:
    import atexit
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="bertfeat-families-"))
    atexit.register(shutil.rmtree, root, True)
    return root


@lru_cache(maxsize=None)
def base(family: str) -> Path:
    return family_checkpoint(_root() / family, family)


@lru_cache(maxsize=None)
def st_dir(family: str, pooling: str) -> Path:
    return st_folder(_root() / f"{family}_st_{pooling}", base=base(family), pooling=pooling,
                     normalize=pooling == "mean")


def reference(d: Path, head: str | None = None):
    from transformers import AutoModel, AutoModelForMaskedLM

    Model = AutoModelForMaskedLM if head == "mlm" else AutoModel
    return Model.from_pretrained(str(d), attn_implementation="eager").eval().float()


def mixed_batches(texts: list[str], sizes=(16, 7, 24, 1, 12)) -> list[list[str]]:
    """Unsorted batches of mixed lengths (long and short rows padded together)."""
    out, s = [], 0
    for n in sizes:
        out.append(texts[s:s + n])
        s += n
    return out


# --------------------------------------------------------------------------- hidden states
@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_match_transformers(family, real_sentences):
    from transformers import AutoTokenizer

    d = base(family)
    enc = Encoder(d)
    ref = reference(d)
    hf = AutoTokenizer.from_pretrained(str(d))
    L = enc.config.num_hidden_layers
    assert enc.config.family.split()[0].lower() == family
    texts = real_sentences[::7][:60]
    worst = np.zeros(L + 1)
    for batch in mixed_batches(texts):
        t = enc.tokenizer.encode(batch, max_length=enc.max_length)
        for r, text in enumerate(batch):
            assert t.ids[r].tolist() == hf(text, truncation=True, max_length=enc.max_length)["input_ids"], text
        ids, types, mask = pad_batch(t.ids, t.type_ids, enc.tokenizer.pad_id)
        fwd = bert_forward(enc.weights, ids, types, mask, keep=tuple(range(L + 1)))
        with torch.no_grad():
            o = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                    output_hidden_states=True)
        real = mask.astype(bool)
        for i in range(L + 1):
            assert fwd.hidden[i].shape == tuple(o.hidden_states[i].shape)
            worst[i] = max(worst[i], float(np.abs(fwd.hidden[i][real] - o.hidden_states[i].numpy()[real]).max()))
    for i in range(L + 1):
        print(f"\n{family} hidden state {i}: max |diff| {worst[i]:.2e}")
    assert worst.max() <= TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_pairs_run_as_transformers(family):
    """Sentence pairs: ELECTRA with token types 0 / 1 (as BERT), CamemBERT and DistilBERT with none (their tokenizers
    return no token_type_ids; DistilBertModel takes none)."""
    from transformers import AutoTokenizer

    d = base(family)
    enc, ref, hf = Encoder(d), reference(d), AutoTokenizer.from_pretrained(str(d))
    a, b = ["The quick brown fox.", "A man is playing a guitar on the street."], ["Le renard brun.", "x"]
    ours = enc.encode(a, b, pooling="mean", normalize=False)
    for r in range(2):
        x = hf(a[r], b[r])
        assert enc.tokenizer.encode([a[r]], [b[r]]).ids[0].tolist() == x["input_ids"]
        with torch.no_grad():
            h = ref(**{k: torch.tensor([v]) for k, v in x.items()}).last_hidden_state[0].numpy()
        diff = float(np.abs(ours[r] - h.mean(axis=0)).max())
        print(f"\n{family} pair {r}: max |diff| {diff:.2e}")
        assert diff <= TOL
    assert ("token_type_ids" in hf("a", "b")) is (family == "electra")


# --------------------------------------------------------------------------- sentence-transformers folders
@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("family", FAMILIES)
def test_sentence_transformers_folder(family, pooling, real_sentences, tmp_path, capsys):
    """Encoder(dir).encode and `bertfeat extract` == SentenceTransformer(dir).encode (mean + Normalize, and CLS)."""
    from sentence_transformers import SentenceTransformer

    from bertfeat.features import read_features

    d = st_dir(family, pooling)
    texts = real_sentences[::5][:50]
    torch.set_num_threads(1)
    ref = SentenceTransformer(str(d), device="cpu").encode(texts, batch_size=8, convert_to_numpy=True)
    ours = Encoder(d).encode(texts)
    diff = float(np.abs(ours - ref).max())
    print(f"\n{family} sentence-transformers {pooling}: encode max |diff| {diff:.2e}")
    assert ours.shape == ref.shape and diff <= TOL
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    rc, _, err = run(capsys, "extract", src, "-m", d, "-o", out, "-q")
    assert rc == 0, err
    _, X, meta = read_features(out)
    diff = float(np.abs(X - ref).max())
    print(f"{family} sentence-transformers {pooling}: extract max |diff| {diff:.2e}")
    assert X.shape == ref.shape and diff <= TOL


# --------------------------------------------------------------------------- precisions, engines, sklearn, long text
@pytest.mark.parametrize("precision", ["bf16", "int8"])
@pytest.mark.parametrize("family", FAMILIES)
def test_low_precisions_close_to_fp32(family, precision, real_sentences):
    cos = precision_vs_fp32(base(family), real_sentences[:40], precision)
    print(f"\n{family} {precision}: min cosine to fp32 {cos.min():.5f}")
    assert cos.min() >= 0.99


# --------------------------------------------------------------------------- batch independence of the float32
# linear layers outside the encoder's: a Dense module, the pooler and ELECTRA's embeddings_project were NumPy products,
# whose rows OpenBLAS rounds by the row count, so a text's vector moved by ~1e-6 with its batch where the layers'
# oneDNN products keep it bit for bit (gemm.row_stable)
@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_dense_pooler_and_projection_give_a_text_the_same_vector_in_any_batch(precision, real_sentences, tmp_path):
    from sentence_transformers import SentenceTransformer

    from ckpt import make_checkpoint

    d = st_folder(tmp_path / "electra_st", base=base("electra"), pooling="mean", dense=[(24, "tanh"), (16, "identity")])
    bert = make_checkpoint(tmp_path / "bert", hidden=32, layers=2, heads=2, max_position=128)
    try:
        encs = [(Encoder(d, precision=precision), {}), (Encoder(bert, precision=precision), {"pooling": "pooled"})]
    except BertfeatError as e:  # bf16 / int8 need oneDNN and the CPU's support
        pytest.skip(str(e))
    if encs[0][0].gemm_path.library != "onednn":
        pytest.skip("NumPy's BLAS rounds a row by the row count (a tolerance of 1e-6 applies there)")
    texts = list(real_sentences[:30]) + ["", "x"]
    for enc, kw in encs:
        together = enc.encode(texts, **kw)
        alone = np.concatenate([enc.encode([t], **kw) for t in texts])
        np.testing.assert_array_equal(together, alone)
    if precision == "fp32":  # and still sentence-transformers' embedding
        ref = SentenceTransformer(str(d), device="cpu").encode(texts, batch_size=8, convert_to_numpy=True)
        assert np.abs(encs[0][0].encode(texts) - ref).max() <= TOL


# --------------------------------------------------------------------------- config.json names transformers reads
def test_distilbert_bert_names_win_as_transformers_attribute_map(real_sentences, tmp_path):
    """DistilBertConfig.attribute_map: num_attention_heads (and hidden_size, num_hidden_layers) in config.json set
    n_heads (dim, n_layers), over them; bertfeat dropped them, so 2 heads ran as 4 (cos 0.93 to sentence-transformers').
    A layer count below the checkpoint's is refused (transformers drops the other layers' weights silently)."""
    from sentence_transformers import SentenceTransformer

    d = tmp_path / "heads"
    shutil.copytree(st_dir("distilbert", "mean"), d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 2}))
    enc = Encoder(d)
    assert enc.config.num_attention_heads == 2
    texts = list(real_sentences[:20])
    ref = SentenceTransformer(str(d), device="cpu").encode(texts, batch_size=8, convert_to_numpy=True)
    assert np.abs(enc.encode(texts) - ref).max() <= TOL
    (d / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 1}))
    with pytest.raises(WeightsError, match="more layers than"):
        Encoder(d)


def test_a_key_config_json_leaves_out_is_transformers_family_default(real_sentences, tmp_path):
    """ELECTRA's config.json without num_attention_heads: transformers' ElectraConfig runs 4 heads, bertfeat ran BERT's
    12, which changes no weight's shape (so nothing was refused) but every vector. Sharper queries and keys make the
    head count show."""
    from safetensors.numpy import load_file, save_file

    d = family_checkpoint(tmp_path / "electra", "electra", hidden_size=48)  # 48: 4 heads of 12 or 12 of 4
    w = load_file(str(d / "model.safetensors"))
    for k in w:
        if ".attention.self.query.weight" in k or ".attention.self.key.weight" in k:
            w[k] = w[k] * 6
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((d / "config.json").read_text())
    assert cfg.pop("num_attention_heads") == 4
    (d / "config.json").write_text(json.dumps(cfg))
    enc, ref = Encoder(d), reference(d)
    assert enc.config.num_attention_heads == ref.config.num_attention_heads == 4
    batch = list(real_sentences[:12])
    t = enc.tokenizer.encode(batch, max_length=enc.max_length)
    ids, types, mask = pad_batch(t.ids, t.type_ids, enc.tokenizer.pad_id)
    L = enc.config.num_hidden_layers
    fwd = bert_forward(enc.weights, ids, types, mask, keep=(L,))
    with torch.no_grad():
        o = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    real = mask.astype(bool)
    diff = np.abs(fwd.hidden[L][real] - o.last_hidden_state.numpy()[real]).max()
    print(f"\nELECTRA without num_attention_heads: max |diff| {diff:.2e}")
    assert diff <= 2e-4  # (the sharper softmax rounds further than TOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_long_text_chunks_with_the_family_max_length(family, real_sentences):
    """chunk-mean: windows framed by the family's CLS / SEP, up to its own max length; the row is the
    token-weighted mean of the windows' mean-pooled states computed by transformers."""
    from transformers import AutoTokenizer

    d = base(family)
    enc, ref, hf = Encoder(d), reference(d), AutoTokenizer.from_pretrained(str(d))
    assert enc.max_length == MAX_POS[family] - (2 if family == "camembert" else 0)
    long = " ".join(real_sentences[:40])
    res = enc.encode([long], pooling="mean", long_text="chunk-mean", return_info=True)
    assert res.n_chunks[0] > 1
    spec = enc.spec(pooling="mean", long_text="chunk-mean")
    prep = enc.prepare([long], None, spec)
    assert max(len(w) for w in prep.ids) == enc.max_length
    tot, acc = 0, 0.0
    for w in prep.ids:
        assert int(w[0]) == hf.cls_token_id and int(w[-1]) == hf.sep_token_id
        with torch.no_grad():
            h = ref(input_ids=torch.from_numpy(w.astype(np.int64)[None])).last_hidden_state[0].numpy()
        acc = acc + h.mean(axis=0) * len(w)
        tot += len(w)
    diff = float(np.abs(res.features[0] - acc / tot).max())
    print(f"\n{family} chunk-mean ({len(prep.ids)} windows): max |diff| {diff:.2e}")
    assert diff <= TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_sklearn_and_dask_engine(family, real_sentences, tmp_path, capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("distributed")
    from bertfeat.sklearn import TextFeatures

    d = st_dir(family, "mean")
    texts = real_sentences[:30]
    want = Encoder(d).encode(texts)
    np.testing.assert_allclose(TextFeatures(model=str(d)).fit_transform(texts), want, atol=1e-6, rtol=0)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    rc, _, err = run(capsys, "extract", src, "-m", d, "-o", out, "--engine", "dask", "--workers", "1")
    assert rc == 0, err
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(out.glob("part-*.parquet")) if out.is_dir() else [out]
    table = pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in parts])
    X = np.stack(table.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    assert X.shape == want.shape
    np.testing.assert_allclose(X, want, atol=1e-6, rtol=0)


# --------------------------------------------------------------------------- heads
@pytest.mark.parametrize("family", ["camembert", "distilbert"])
def test_fill_mask_matches_transformers(family, tmp_path):
    from bertfeat.inspection import masked_lm_logits

    d = family_checkpoint(tmp_path / family, family, head="mlm")
    names = _tensor_names(d)
    assert any(n.startswith("roberta." if family == "camembert" else "distilbert.") for n in names)
    enc = Encoder(d)
    assert enc.weights.mlm is not None
    text = f"The quick brown {enc.tokenizer.mask_token} jumps."
    tokens, pos, logits = masked_lm_logits(text, encoder=enc)
    ids = enc.tokenizer.encode([text]).ids[0]
    with torch.no_grad():
        r = reference(d, "mlm")(input_ids=torch.from_numpy(ids.astype(np.int64)[None])).logits[0].numpy()
    diff = float(np.abs(np.asarray(logits) - r[np.asarray(pos)]).max())
    print(f"\n{family} fill-mask logits: max |diff| {diff:.2e}")
    assert diff <= 1e-4


def test_electra_discriminator_prefix_no_mlm_no_pooler(tmp_path, real_sentences):
    """google/electra-base-discriminator's layout: ElectraForPreTraining (electra. prefix, discriminator head)."""
    from bertfeat.inspection import masked_lm_logits, model_info

    d = family_checkpoint(tmp_path / "disc", "electra", head="pretraining")
    assert any(n.startswith("electra.") for n in _tensor_names(d))
    enc = Encoder(d)
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(d))
    x = hf(real_sentences[:8], padding=True, return_tensors="pt")
    with torch.no_grad():
        h = reference(d)(**x).last_hidden_state[:, 0].numpy()  # AutoModel reads the electra.-prefixed encoder
    diff = float(np.abs(enc.encode(real_sentences[:8], pooling="cls") - h).max())
    print(f"\nelectra discriminator checkpoint, cls: max |diff| {diff:.2e}")
    assert diff <= TOL
    assert enc.weights.ignored and all(n.startswith("discriminator_predictions.") for n in enc.weights.ignored)
    with pytest.raises(BertfeatError, match="ELECTRA models have no pooler"):
        enc.encode(["a"], pooling="pooled")
    with pytest.raises(BertfeatError, match="no masked-language-model head"):
        masked_lm_logits("a [MASK] b", encoder=enc)
    info = model_info(str(d))
    assert info["family"] == "ELECTRA" and info["model_type"] == "electra" and info["mlm_head"] == "no"
    assert info["parameters"] == sum(p.numel() for p in reference(d).parameters())


@pytest.mark.parametrize("family", ["distilbert"])
def test_distilbert_has_no_pooler_and_counts_its_parameters(family):
    from bertfeat.inspection import model_info

    d = base(family)
    with pytest.raises(BertfeatError, match="DistilBERT models have no pooler"):
        Encoder(d).encode(["a"], pooling="pooled")
    info = model_info(str(d))
    assert info["family"] == "DistilBERT" and info["parameters"] == sum(p.numel() for p in reference(d).parameters())


# --------------------------------------------------------------------------- refusals
def _tensor_names(d: Path) -> list[str]:
    from safetensors import safe_open

    return list(safe_open(str(d / "model.safetensors"), framework="np").keys())


@pytest.mark.parametrize("family,drop", [
    ("camembert", "encoder.layer.1.attention.self.key.bias"),
    ("electra", "embeddings_project.weight"),
    ("distilbert", "transformer.layer.1.ffn.lin2.weight"),
])
def test_missing_tensor_is_named(family, drop, tmp_path):
    d = without_tensor(base(family), drop, tmp_path / family)
    with pytest.raises(WeightsError, match=f"tensor '{drop}' is missing"):
        Encoder(d)


@pytest.mark.parametrize("family,over,words", [
    ("camembert", {"num_attention_heads": 5}, "hidden_size 48 is not a multiple of num_attention_heads 5"),
    ("electra", {"num_attention_heads": 5}, "hidden_size 64 is not a multiple of num_attention_heads 5"),
    ("distilbert", {"n_heads": 5}, "dim 48 is not a multiple of n_heads 5"),
])
def test_head_size_that_does_not_divide_names_both_numbers(family, over, words, tmp_path):
    d = tmp_path / family
    shutil.copytree(base(family), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(over)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=words):
        BertConfig.from_file(d / "config.json")
    with pytest.raises(ConfigError, match=words):
        Encoder(d)


@pytest.mark.parametrize("family", ["bert", "distilbert", "camembert"])
def test_fill_mask_refuses_an_untied_head_stored_without_its_decoder(family, tmp_path, real_sentences):
    """Found by the hostile-model audit (round seven): config.json's "tie_word_embeddings": false with the masked-LM
    head's decoder not stored (a save that dropped it as tied) ran fill-mask with the word embeddings as the decoder,
    logits transformers never gives (it fills the missing decoder with random values: max |diff| 11.5 on a tiny BERT).
    fill-mask is refused now naming the tensor; the encoder's features are unchanged."""
    from ckpt import make_checkpoint
    from bertfeat.inspection import masked_lm_logits

    if family == "bert":
        d = make_checkpoint(tmp_path / family, hidden=32, layers=2, heads=2, max_position=64, mlm_head=True,
                            tokenizer="json")
    else:
        d = family_checkpoint(tmp_path / family, family, head="mlm")
    decoder = {"bert": "cls.predictions.decoder.weight", "distilbert": "vocab_projector.weight",
               "camembert": "lm_head.decoder.weight"}[family]  # as the family's checkpoints spell it
    names = _tensor_names(d)
    assert not any(n.endswith(decoder) for n in names)  # stored once, as the word embeddings
    before = Encoder(d).encode(real_sentences[:4], pooling="mean")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    ref = reference(d, "mlm")  # transformers: the decoder newly initialized (its load report says MISSING)
    assert not torch.equal(ref.get_output_embeddings().weight, ref.get_input_embeddings().weight)
    enc = Encoder(d)
    with pytest.raises(BertfeatError) as e:
        masked_lm_logits(f"The quick brown {enc.tokenizer.mask_token} jumps.", encoder=enc)
    assert f"has a masked-LM head without its decoder ({decoder}), and config.json's tie_word_embeddings false" in str(e.value)
    assert str(e.value).endswith(" - restore the checkpoint with its decoder, or set tie_word_embeddings to true in "
                                 "config.json if the decoder is the word embeddings")
    np.testing.assert_array_equal(enc.encode(real_sentences[:4], pooling="mean"), before)


@pytest.mark.parametrize("value", ["false", 0, None, "yes"])
def test_a_tie_word_embeddings_that_is_not_a_bool_is_refused(tmp_path, value):
    """Found by the sweep / verify audit: "false" (a string), 0, null and "yes" were all run as tied: fill-mask used
    the word embeddings as the decoder of a head whose config says otherwise (transformers 5 refuses each: 'expected
    bool')."""
    import json

    from bertfeat.model.config import BertConfig
    from bertfeat.errors import ConfigError

    d = tmp_path / "m"
    d.mkdir()
    cfg = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64, "tie_word_embeddings": value}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        BertConfig.from_file(d / "config.json")
    assert str(e.value) == (f"{d / 'config.json'}: tie_word_embeddings is {json.dumps(value)}, not true / false - restore "
                            "config.json from the checkpoint (true: the masked-LM head's decoder is the word embeddings; "
                            "false: a tensor of its own)")
