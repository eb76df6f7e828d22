"""The model's own embedding: sentence-transformers folders (modules.json: Pooling, Dense, Normalize,
prompts, max length) and RoBERTa / XLM-RoBERTa encoders, against sentence-transformers and transformers.

Every folder is saved by the installed sentence-transformers with random weights (st_ckpt.py).
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.live  # every test compares with sentence-transformers / transformers
pytest.importorskip("sentence_transformers", reason="the parity tests compare with sentence-transformers")
import torch  # noqa: E402

from bertfeat.cli.app import main  # noqa: E402
from bertfeat.model.encoder import Encoder  # noqa: E402
from bertfeat.errors import BertfeatError  # noqa: E402
from bertfeat.model.bert import bert_forward  # noqa: E402
from bertfeat.model.tokenize import pad_batch  # noqa: E402
from ckpt import refused  # noqa: E402
from st_ckpt import older_layout, reference_roberta, roberta_checkpoint, st_folder  # noqa: E402

TEXTS = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog finally wakes up and runs off.",
    "x",
    "",
    "Sentence embeddings are compared with the cosine similarity " * 8,  # longer than max_seq_length 32
    "Le renard brun rapide saute par-dessus le chien paresseux.",
]
PROMPTS = {"query": "query: ", "passage": "passage: "}

# name -> st_folder keyword arguments
LAYOUTS = {
    "bge_cls_normalize": dict(pooling="cls", normalize=True, prompts={"query": "Represent this sentence: "}),
    "labse_cls_dense_tanh_normalize": dict(pooling="cls", dense=[(32, "tanh")], normalize=True, prompts=PROMPTS,
                                           default_prompt_name="query"),
    "mean_max_concat": dict(pooling=["mean", "max"]),
    "weightedmean": dict(pooling="weightedmean", normalize=True),
    "lasttoken": dict(pooling="lasttoken"),
    "mean_sqrt_len_tokens": dict(pooling="mean_sqrt_len_tokens"),
    "instructor_prompt_not_pooled": dict(pooling=["mean", "cls"], include_prompt=False, prompts=PROMPTS,
                                         default_prompt_name="query"),
    "two_dense_relu_identity": dict(pooling="max", dense=[(48, "relu"), (16, "identity")]),
    "dense_gelu_sigmoid": dict(pooling="mean", dense=[(24, "gelu"), (24, "sigmoid")], normalize=True),
}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("st")
    out = {name: st_folder(root / name, max_seq_length=32, **kw) for name, kw in LAYOUTS.items()}
    base = roberta_checkpoint(root / "xlmr_base", model_type="xlm-roberta")
    out["e5_xlmr_mean_normalize"] = st_folder(root / "e5_xlmr", base=base, pooling="mean", normalize=True,
                                              prompts=PROMPTS, max_seq_length=32)
    base = roberta_checkpoint(root / "roberta_base", model_type="roberta")
    out["roberta_cls_dense"] = st_folder(root / "roberta_st", base=base, pooling="cls", dense=[(16, "tanh")],
                                         max_seq_length=32)
    return out


def _st(path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


def _st_encode(st, texts, **kw):
    torch.set_num_threads(1)
    return st.encode(texts, batch_size=4, convert_to_numpy=True, **kw)


@pytest.mark.parametrize("name", list(LAYOUTS) + ["e5_xlmr_mean_normalize", "roberta_cls_dense"])
def test_default_output_is_sentence_transformers_encode(layouts, name):
    """bertfeat's default output == SentenceTransformer.encode within 1e-5, with every prompt of the model."""
    d = layouts[name]
    st, enc = _st(d), Encoder(d)
    modules = json.loads((d / "modules.json").read_text())
    # every module of modules.json shows in the pipeline bertfeat runs (none skipped)
    desc = enc.describe(enc.spec())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    assert [line.split()[0] for line in desc if line.split()[0] != "Prompt"] == kinds, desc
    for prompt_name in [None] + list(enc.prompts):
        kw = {} if prompt_name is None else {"prompt_name": prompt_name}
        ref = _st_encode(st, TEXTS, **kw)
        ours = enc.encode(TEXTS, **kw)
        d_max = float(np.abs(ours - ref).max())
        print(f"\n{name} prompt {prompt_name}: shape {ours.shape}, max |diff| {d_max:.2e}")
        assert ours.shape == ref.shape == (len(TEXTS), st.get_embedding_dimension())
        assert d_max <= 1e-5
    # an explicit prompt text, and a single string gives one vector
    np.testing.assert_allclose(enc.encode(TEXTS, prompt="search: "), _st_encode(st, TEXTS, prompt="search: "), atol=1e-5, rtol=0)
    one = enc.encode(TEXTS[0])
    assert one.shape == (st.get_embedding_dimension(),)
    np.testing.assert_allclose(one, _st_encode(st, TEXTS[0]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["labse_cls_dense_tanh_normalize", "mean_max_concat"])
def test_cli_default_output_is_sentence_transformers_encode(layouts, name, tmp_path):
    import pyarrow.parquet as pq

    d = layouts[name]
    texts = [t for t in TEXTS if t]  # an empty text is a bad row for extract
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    assert main(["extract", str(src), "-m", str(d), "-o", str(out), "-q", "--prompt-name", "passage"]
                if "labse" in name else ["extract", str(src), "-m", str(d), "-o", str(out), "-q"]) == 0
    table = pq.read_table(out)
    X = np.stack(table.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    kw = {"prompt_name": "passage"} if "labse" in name else {}
    ref = _st_encode(_st(d), texts, **kw)
    assert X.shape == ref.shape and np.abs(X - ref).max() <= 1e-5
    meta = json.loads(table.schema.metadata[b"bertfeat"])
    assert meta["dense"] == (["2_Dense"] if "labse" in name else [])
    assert meta["prompt"] == ("passage: " if "labse" in name else None)
    assert meta["normalize"] is ("labse" in name)
    assert any(step.startswith("Pooling") for step in meta["pipeline"])


def test_legacy_pooling_keys_and_real_minilm(layouts, tmp_path, minilm_dir):
    """Old pooling_mode_*_token flags select (and concatenate, in sentence-transformers' order) the same modes."""
    d = tmp_path / "legacy"
    shutil.copytree(layouts["mean_max_concat"], d)
    (d / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": True, "pooling_mode_mean_sqrt_len_tokens": False}))
    enc = Encoder(d)
    assert enc.default_pooling == "max+mean"  # legacy order: cls, max, mean, ...
    np.testing.assert_allclose(enc.encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)
    # the real default model: Normalize is part of its pipeline, so the default output is unit length
    real = Encoder(minilm_dir)
    assert real.describe(real.spec())[-1] == "Normalize"
    X = real.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(X, _st_encode(_st(minilm_dir), TEXTS), atol=1e-5, rtol=0)


def test_max_length_from_tokenizer_config(layouts):
    """sentence-transformers 6 saves max_seq_length as tokenizer_config.json's model_max_length."""
    d = layouts["bge_cls_normalize"]
    assert "max_seq_length" not in json.loads((d / "sentence_bert_config.json").read_text())
    assert json.loads((d / "tokenizer_config.json").read_text())["model_max_length"] == 32
    enc = Encoder(d)
    assert enc.max_length == 32 and enc.pipeline.max_length_source == "tokenizer_config.json model_max_length"
    r = enc.encode(TEXTS, return_info=True)
    assert r.truncated[4] and not r.truncated[0]


def test_user_flags_override_the_pipeline(layouts):
    """--pooling replaces the Pooling and drops the Dense modules; --no-normalize / --normalize override Normalize."""
    d = layouts["labse_cls_dense_tanh_normalize"]
    enc = Encoder(d)
    own = enc.spec()
    assert own.dense == ("2_Dense",) and own.normalize and own.prompt == "query: " and enc.output_dim(own) == 32
    raw = enc.encode(TEXTS, pooling="mean")  # plain pooled states: no Dense, no Normalize
    assert raw.shape == (len(TEXTS), 64) and abs(float(np.linalg.norm(raw[0])) - 1.0) > 0.01
    X = enc.encode(TEXTS, pooling="mean", normalize=True)
    np.testing.assert_allclose(X, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
    st = _st(d)
    tok = _st_encode(st, TEXTS, output_value="token_embeddings")  # per-text (T_i, H) encoder outputs
    ref = np.stack([t.numpy().mean(axis=0) for t in tok])
    np.testing.assert_allclose(raw, ref, atol=1e-5, rtol=0)
    unnorm = enc.encode(TEXTS, normalize=False)
    assert unnorm.shape == (len(TEXTS), 32) and np.abs(np.linalg.norm(unnorm, axis=1) - 1).max() > 1e-3


def test_unsupported_modules_are_refused(layouts, tmp_path, capsys):
    d = tmp_path / "cnn"
    shutil.copytree(layouts["bge_cls_normalize"], d)
    modules = json.loads((d / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_CNN", "type": "sentence_transformers.models.CNN"})
    (d / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(BertfeatError, match="module 2 'sentence_transformers.models.CNN' .* cannot be reproduced"):
        Encoder(d)
    src = tmp_path / "in.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "-m", str(d), "-o", str(tmp_path / "o.parquet"), "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("Error: modules.json: module 2 'sentence_transformers.models.CNN' (path '2_CNN') cannot be "
                   "reproduced by bertfeat - bertfeat runs Transformer, Pooling, Dense, Normalize, Dropout, LayerNorm, "
                   "WeightedLayerPooling modules; use --pooling to get plain pooled features of the encoder instead of the model's embedding")
    assert not (tmp_path / "o.parquet").exists()

    # a Dense with neither weights file is refused naming what it holds; a pytorch_model.bin that is no torch.save
    # archive (here a safetensors file renamed) is refused naming the file
    p = tmp_path / "no_weights"
    shutil.copytree(layouts["labse_cls_dense_tanh_normalize"], p)
    (p / "2_Dense" / "model.safetensors").rename(p / "2_Dense" / "dense.pt")
    with pytest.raises(BertfeatError, match=r"^2_Dense has no model.safetensors or pytorch_model.bin \(only dense.pt, "
                                            r"which sentence-transformers does not load either\) - restore the Dense"):
        Encoder(p)
    (p / "2_Dense" / "dense.pt").rename(p / "2_Dense" / "pytorch_model.bin")
    with pytest.raises(BertfeatError, match=f"^{re.escape(str(p / '2_Dense' / 'pytorch_model.bin'))} is not a torch.save "
                                            r"zip archive \(File is not a zip file\)"):
        Encoder(p)


def test_unknown_prompt_name_and_both_prompts(layouts):
    enc = Encoder(layouts["labse_cls_dense_tanh_normalize"])
    with pytest.raises(BertfeatError, match=r"no prompt named 'doc' \(its prompts: document, passage, query\)"):
        enc.encode(["a"], prompt_name="doc")
    with pytest.raises(BertfeatError, match="not both"):
        enc.encode(["a"], prompt="x: ", prompt_name="query")
    assert enc.spec(prompt="").prompt is None  # an empty prompt overrides the default, as in sentence-transformers


# --------------------------------------------------------------------------- RoBERTa / XLM-RoBERTa
@pytest.mark.parametrize("model_type,prefix", [("xlm-roberta", False), ("roberta", True)])
def test_roberta_layers_match_transformers(tmp_path, model_type, prefix):
    d = roberta_checkpoint(tmp_path / model_type, model_type=model_type, prefix=prefix)
    enc = Encoder(d)
    assert enc.config.position_offset == 2 and enc.max_length == 128
    t = enc.tokenizer.encode(TEXTS[:3] + TEXTS[5:], max_length=128)
    assert enc.tokenizer.id_to_token(int(t.ids[0][0])) == "<s>" and enc.tokenizer.id_to_token(int(t.ids[0][-1])) == "</s>"
    ids, types, mask = pad_batch(t.ids, t.type_ids, enc.tokenizer.pad_id)
    assert enc.tokenizer.pad_id == 1
    fwd = bert_forward(enc.weights, ids, types, mask, keep=tuple(range(3)))
    ref = reference_roberta("roberta" if model_type == "roberta" else "xlm-roberta", enc.config.vocab_size, 64, 2, 4,
                            130, False, 0)
    with torch.no_grad():
        o = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    for i in range(3):
        diff = float(np.abs((fwd.hidden[i] - o.hidden_states[i].numpy()) * mask[:, :, None]).max())
        print(f"\n{model_type} layer {i}: max |diff| {diff:.2e}")
        assert diff <= 1e-5


def test_roberta_pairs_and_long_text_windows(tmp_path):
    from transformers import AutoTokenizer

    d = roberta_checkpoint(tmp_path / "x", model_type="xlm-roberta")
    enc = Encoder(d, max_length=24)
    hf = AutoTokenizer.from_pretrained(str(d))
    ref = reference_roberta("xlm-roberta", enc.config.vocab_size, 64, 2, 4, 130, False, 0)

    def ref_mean(ids):
        with torch.no_grad():
            h = ref(input_ids=torch.tensor([ids])).last_hidden_state[0].numpy()
        return h.mean(axis=0)

    # pairs: <s> A </s></s> B </s>, one token type
    a, b = "The quick brown fox.", "Le renard brun rapide."
    hf_ids = hf(a, b)["input_ids"]
    assert enc.tokenizer.encode([a], [b]).ids[0].tolist() == hf_ids
    assert len(hf_ids) > 24  # so the pair is encoded with the model's own max length here, not the 24 below
    full = Encoder(d)
    np.testing.assert_allclose(full.encode([a], [b], pooling="mean", normalize=False)[0], ref_mean(hf_ids), atol=1e-5, rtol=0)
    # long text in chunk mode: every window framed <s> .. </s>, the row the token-weighted mean of the windows
    long = TEXTS[4]
    spec = enc.spec(pooling="mean", long_text="chunk-mean", stride=4, normalize=False)
    prep = enc.prepare([long], None, spec)
    assert len(prep.ids) > 2
    content = hf(long, add_special_tokens=False)["input_ids"]
    wins = []
    for w in prep.ids:
        assert int(w[0]) == 0 and int(w[-1]) == 2
        wins.append(w.tolist())
    assert [t for t in wins[0][1:-1]] == content[:22]
    ref_row = sum(ref_mean(w) * len(w) for w in wins) / sum(len(w) for w in wins)
    np.testing.assert_allclose(enc.run(prep, spec)[0], ref_row, atol=1e-5, rtol=0)


def test_roberta_fill_mask_matches_transformers(tmp_path):
    from bertfeat.inspection import masked_lm_logits

    d = roberta_checkpoint(tmp_path / "mlm", model_type="roberta", mlm_head=True)
    enc = Encoder(d)
    assert enc.tokenizer.mask_token == "<mask>" and enc.weights.mlm is not None
    text = "The quick brown <mask> jumps."
    out = masked_lm_logits(text, encoder=enc)
    logits = out[-1] if isinstance(out, tuple) else out
    ids = enc.tokenizer.encode([text]).ids[0]
    ref = reference_roberta("roberta", enc.config.vocab_size, 64, 2, 4, 130, True, 0)
    with torch.no_grad():
        r = ref(input_ids=torch.from_numpy(ids.astype(np.int64)[None])).logits[0].numpy()
    pos = np.flatnonzero(ids == enc.tokenizer.mask_id)
    diff = float(np.abs(np.asarray(logits).reshape(-1, r.shape[-1])[-len(pos):] - r[pos]).max())
    print(f"\nroberta fill-mask logits: max |diff| {diff:.2e}")
    assert diff <= 1e-4


def test_bert_with_xlmr_tokenizer_chunks_and_one_token_type(tmp_path, capsys):
    """paraphrase-multilingual-MiniLM layout: a BERT encoder with an XLM-R tokenizer; and type_vocab_size 1 pairs."""
    from ckpt import make_checkpoint

    x = roberta_checkpoint(tmp_path / "tok", model_type="xlm-roberta")
    d = make_checkpoint(tmp_path / "bert_xlmr", tokenizer=None, type_vocab=1, max_position=64,
                        config_overrides={"pad_token_id": 1})  # word rows beyond the tokenizer's are unused
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (x / f).exists():
            shutil.copy(x / f, d / f)
    enc = Encoder(d, max_length=16)
    X = enc.encode([TEXTS[4]], long_text="chunk-mean", stride=4, return_info=True)
    assert X.n_chunks[0] > 1 and np.isfinite(X.features).all()
    # its tokenizer marks both texts of a pair with type 0, so pairs run (as in transformers)
    assert enc.tokenizer.encode(["a"], ["b"]).type_ids[0].max() == 0 and enc.encode(["a"], ["b"]).shape == (1, 64)
    # a WordPiece tokenizer marks the second text with type 1, which a one-type BERT cannot embed
    one = make_checkpoint(tmp_path / "one_type", type_vocab=1, max_position=64)
    with pytest.raises(BertfeatError, match=r"one token type \(type_vocab_size 1\)"):
        Encoder(one).encode(["a"], ["b"])
    src = tmp_path / "pairs.csv"
    src.write_text("text,pair\na,b\n")
    assert main(["extract", str(src), "-m", str(one), "--pair-column", "pair", "-o", str(tmp_path / "o.parquet"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "type_vocab_size 1" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["e5_xlmr_mean_normalize", "roberta_cls_dense"])
def test_literal_pad_token_in_text_as_sentence_transformers(layouts, name):
    """A text holding the literal "<pad>" (a real token with the padding id): transformers gives it the padding
    position and counts later tokens on from there; bertfeat does the same, in a batch with ordinary rows."""
    d = layouts[name]
    texts = ["hello <pad> world", "<pad>", "a <pad> <pad> b c d", TEXTS[1], "no pad"]
    ref, ours = _st_encode(_st(d), texts), Encoder(d).encode(texts, batch_size=8)
    d_max = float(np.abs(ours - ref).max())
    print(f"\n{name} literal <pad>: max |diff| {d_max:.2e}")
    assert d_max <= 1e-5


def test_dense_saved_in_bfloat16(tmp_path):
    """A sentence-transformers model saved in bfloat16 (encoder and Dense): the Dense loads through bertfeat's own
    safetensors reader (widened exactly) and the output equals sentence-transformers run in float32 on those values."""
    base = st_folder(tmp_path / "f32", pooling="cls", dense=[(16, "tanh")], normalize=True, hidden=32, layers=1,
                     heads=4)
    d = tmp_path / "bf16"
    _st(base).to(torch.bfloat16).save(str(d))
    from safetensors import safe_open

    with safe_open(str(d / "2_Dense" / "model.safetensors"), "pt") as fh:
        assert {fh.get_tensor(k).dtype for k in fh.keys()} == {torch.bfloat16}
    ref = _st_encode(_st(d).float(), TEXTS)
    ours = Encoder(d).encode(TEXTS)
    d_max = float(np.abs(ours - ref).max())
    print(f"\nbf16-saved Dense: max |diff| {d_max:.2e}")
    assert d_max <= 1e-5


def _dense_as_pytorch_model_bin(src, dst, state_dict=None, legacy: bool = False):
    """A copy of sentence-transformers folder ``src`` whose Dense keeps its weights only as ``pytorch_model.bin``:
    torch.save of the module's own state dict (``state_dict``: another one), as sentence-transformers before
    safetensors saved it (distiluse-base-multilingual-cased, LaBSE; ``legacy``: in torch.save's format of PyTorch
    before 1.6, as the hub serves the oldest of them)."""
    shutil.copytree(src, dst)
    sd = _st(src)[2].state_dict() if state_dict is None else state_dict
    (dst / "2_Dense" / "model.safetensors").unlink()
    torch.save(sd, dst / "2_Dense" / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
    return dst


@pytest.mark.parametrize("legacy", [False, True])
def test_a_dense_saved_as_pytorch_model_bin_is_sentence_transformers_encode(layouts, tmp_path, capsys, legacy):
    """A Dense whose weights are only torch.save's pytorch_model.bin was refused ("a pickle bertfeat never loads"):
    it is read now without PyTorch or unpickling (torchfile.py), and the model's own embedding equals
    SentenceTransformer.encode (which loads that file with torch.load(weights_only=True)); info names the file. In
    torch.save's legacy format too (PyTorch < 1.6), which was refused."""
    src = layouts["labse_cls_dense_tanh_normalize"]
    d = _dense_as_pytorch_model_bin(src, tmp_path / "bin", legacy=legacy)
    assert (d / "2_Dense" / "pytorch_model.bin").read_bytes().startswith(b"PK") is not legacy
    assert sorted(f.name for f in (d / "2_Dense").iterdir()) == ["config.json", "pytorch_model.bin"]
    enc = Encoder(d)
    for kw in ({}, {"prompt_name": "passage"}):
        ref = _st_encode(_st(d), TEXTS, **kw)
        d_max = float(np.abs(enc.encode(TEXTS, **kw) - ref).max())
        print(f"\nDense from pytorch_model.bin {kw}: max |diff| {d_max:.2e}")
        assert d_max <= 1e-5
    np.testing.assert_array_equal(enc.encode(TEXTS), Encoder(src).encode(TEXTS))  # the same weights, exactly
    capsys.readouterr()
    assert main(["info", str(d), "--json"]) == 0
    dense = [line for line in json.loads(capsys.readouterr().out)["embedding"] if line.startswith("Dense")]
    assert dense == ["Dense 64->32 tanh (2_Dense/pytorch_model.bin)"]
    assert main(["info", str(src), "--json"]) == 0
    assert "Dense 64->32 tanh (2_Dense/model.safetensors)" in json.loads(capsys.readouterr().out)["embedding"]
    assert main(["info", str(d), "--files"]) == 0
    assert str(d / "2_Dense" / "pytorch_model.bin") in capsys.readouterr().out.splitlines()


def test_an_edited_pytorch_model_bin_changes_the_cache_key(layouts, tmp_path):
    """The Dense's pytorch_model.bin is one of the files the cache fingerprint and the Dask workers' check hash
    (stmodules.module_files): new weights there give another key, never the old vectors."""
    from bertfeat.cache.store import cache_fingerprint
    from bertfeat.model.hub import model_files, model_files_digest

    d = _dense_as_pytorch_model_bin(layouts["labse_cls_dense_tanh_normalize"], tmp_path / "bin")
    assert "2_Dense/pytorch_model.bin" in model_files(d) and "2_Dense/model.safetensors" not in model_files(d)
    enc = Encoder(d)
    key, _ = cache_fingerprint(enc, enc.spec())
    before = model_files_digest(d)
    sd = _st(d)[2].state_dict()
    sd["linear.bias"] = sd["linear.bias"] + 0.5
    torch.save(sd, d / "2_Dense" / "pytorch_model.bin")
    after = model_files_digest(d)
    assert [f for f in before if before[f] != after[f]] == ["2_Dense/pytorch_model.bin"]
    edited = Encoder(d)
    assert cache_fingerprint(edited, edited.spec())[0] != key
    assert float(np.abs(edited.encode(TEXTS) - enc.encode(TEXTS)).max()) > 1e-3


def test_model_safetensors_wins_over_pytorch_model_bin(layouts, tmp_path, capsys):
    """Both files in the Dense folder: model.safetensors is read (as sentence-transformers picks it), and only it is
    among the model's files."""
    src = layouts["labse_cls_dense_tanh_normalize"]
    d = tmp_path / "both"
    shutil.copytree(src, d)
    sd = _st(src)[2].state_dict()
    torch.save({k: v * 3 for k, v in sd.items()}, d / "2_Dense" / "pytorch_model.bin")
    from bertfeat.model.hub import model_files

    assert "2_Dense/model.safetensors" in model_files(d) and "2_Dense/pytorch_model.bin" not in model_files(d)
    np.testing.assert_allclose(Encoder(d).encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(Encoder(d).encode(TEXTS), Encoder(src).encode(TEXTS))


def test_a_dense_pytorch_model_bin_that_would_run_code_is_refused_unrun(layouts, tmp_path, capsys):
    """A pytorch_model.bin whose pickle calls os.system: refused naming the file and the global, the command never
    run, no output written."""
    import os

    marker = tmp_path / "ran"

    class Run:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    sd = dict(_st(layouts["labse_cls_dense_tanh_normalize"])[2].state_dict())
    sd["linear.bias"] = Run()
    d = _dense_as_pytorch_model_bin(layouts["labse_cls_dense_tanh_normalize"], tmp_path / "evil", sd)
    src = tmp_path / "in.csv"
    src.write_text("text\nhello\n")
    out = tmp_path / "o.parquet"
    capsys.readouterr()
    assert main(["extract", str(src), "-m", str(d), "-o", str(out), "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Error: {d / '2_Dense' / 'pytorch_model.bin'} names the global "
                          f"{os.system.__module__}.system in its pickle, which a plain state dict does not need: "
                          "bertfeat refused it without running it") and "\n" not in err
    assert not marker.exists() and not out.exists()


def _broken(layouts, tmp_path, name, rel, content):
    import shutil

    d = tmp_path / name
    shutil.copytree(layouts["labse_cls_dense_tanh_normalize"], d)
    (d / rel).write_text(content if isinstance(content, str) else json.dumps(content))
    return d


@pytest.mark.parametrize("rel,content,what", [
    ("sentence_bert_config.json", [1], "{d}/sentence_bert_config.json is a JSON list, not a JSON object"),
    ("sentence_bert_config.json", {"max_seq_length": "abc"},
     'sentence_bert_config.json: max_seq_length is "abc", not a number'),
    ("sentence_bert_config.json", {"max_seq_length": -5},
     "sentence_bert_config.json: max_seq_length is -5, below 3 (a text and its special tokens need at least 3 tokens)"),
    ("sentence_bert_config.json", {"max_seq_length": 1},
     "sentence_bert_config.json: max_seq_length is 1, below 3 (a text and its special tokens need at least 3 tokens)"),
    ("sentence_bert_config.json", {"max_seq_length": 6.5},  # the audit: sentence-transformers fails on it (TypeError)
     "sentence_bert_config.json: max_seq_length is 6.5, not a whole number of tokens"),
    ("1_Pooling/config.json", [1], "{d}/1_Pooling/config.json is a JSON list, not a JSON object"),
    ("1_Pooling/config.json", {"pooling_mode": 3}, "1_Pooling/config.json: pooling_mode is 3, not a string or list"),
    ("config_sentence_transformers.json", ["a"],
     "{d}/config_sentence_transformers.json is a JSON list, not a JSON object"),
    ("config_sentence_transformers.json", {"prompts": {"query": "q: "}, "default_prompt_name": ["query"]},
     "config_sentence_transformers.json: default_prompt_name is a JSON list, not a string"),
    ("2_Dense/config.json", {"in_features": "x", "out_features": 32},
     '2_Dense/config.json: in_features is "x", not an integer'),
    ("config_sentence_transformers.json", '{"prompts": {"query": "q\\ud800: "}}',  # the tokenizer's TypeError, a "bug"
     "config_sentence_transformers.json: unpaired surrogate U+D800 at character 1 of the prompt 'query': not valid "
     "Unicode (a JSON \\ud800 escape without its pair)"),
])
def test_malformed_pipeline_files_are_one_line_errors(layouts, tmp_path, rel, content, what):
    """Each file's JSON is type-checked where it is parsed: one line naming the file and the entry, never "unexpected
    ... this is a bug"."""
    d = _broken(layouts, tmp_path, "m", rel, content)
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert e.value.what == what.format(d=d) and "\n" not in e.value.message


def test_a_tokenizer_or_modality_sentence_transformers_takes_elsewhere_is_refused(layouts, tmp_path):
    """sentence_bert_config.json's tokenizer_name_or_path (sentence-transformers 6 still tokenizes with that tokenizer)
    and a modality_config reading another output were not read: bertfeat ran the model folder's tokenizer and
    last_hidden_state, other vectors at exit 0 (a cased tokenizer beside a lower-casing model: max abs diff 0.94).
    Refused now; naming the model folder itself, or the modality_config sentence-transformers writes, runs as before."""
    name = "bge_cls_normalize"
    want = Encoder(layouts[name]).encode(["The Cat IS good", "hello"])
    other = tmp_path / "cased_tokenizer"
    other.mkdir()
    for key, value, ok in [("tokenizer_name_or_path", str(other), False),
                           ("tokenizer_name_or_path", 7, False),
                           ("tokenizer_name_or_path", str(tmp_path / name), True),
                           ("modality_config", {"text": {"method": "forward", "method_output_name": "pooler_output"}},
                            False),
                           ("modality_config", {"text": {"method": "forward", "method_output_name": "last_hidden_state"},
                                                "image": {"method": "forward", "method_output_name": "last_hidden_state"}},
                            False),
                           ("modality_config", {"text": {"method": "forward", "method_output_name": ["last_hidden_state"]}},
                            True)]:
        d = tmp_path / name
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(layouts[name], d)
        cfg = json.loads((d / "sentence_bert_config.json").read_text())
        (d / "sentence_bert_config.json").write_text(json.dumps({**cfg, key: value}))
        if ok:
            np.testing.assert_array_equal(Encoder(d).encode(["The Cat IS good", "hello"]), want)
            continue
        with pytest.raises(BertfeatError) as e:
            Encoder(d)
        if key == "modality_config":
            shown = json.dumps(value) if len(json.dumps(value)) <= 120 else json.dumps(value)[:117] + "..."
            assert e.value.message == (f"sentence_bert_config.json: modality_config {shown} cannot be "
                                       "reproduced (sentence-transformers calls that method or reads that output) - "
                                       "bertfeat runs an encoder's forward pass on text: remove modality_config, or set "
                                       'it to {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}')
        else:
            assert e.value.message == (f"sentence_bert_config.json: tokenizer_name_or_path {json.dumps(value)} names "
                                       "another tokenizer than the model folder's, which sentence-transformers loads in "
                                       "its place; bertfeat reads only the model folder's files - copy that tokenizer's "
                                       "files (tokenizer.json, tokenizer_config.json, vocab.txt, special_tokens_map.json) "
                                       f"into {d} and remove tokenizer_name_or_path from sentence_bert_config.json")


def test_model_max_length_below_3_is_refused(layouts, tmp_path):
    d = _broken(layouts, tmp_path, "m", "sentence_bert_config.json", {})
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 2}))
    with pytest.raises(BertfeatError, match=r"^tokenizer_config.json: model_max_length is 2, below 3"):
        Encoder(d)


@pytest.mark.parametrize("value", ["16", True, [16]])
def test_a_model_max_length_that_is_no_number_is_refused(layouts, tmp_path, value):
    """tokenizer_config.json's model_max_length "16" (a string) was passed over without a word: bertfeat truncated at
    the model's 128 positions, and sentence-transformers fails at load on it."""
    d = tmp_path / "m"
    shutil.copytree(layouts["labse_cls_dense_tanh_normalize"], d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": value}))
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert e.value.message.startswith(f"tokenizer_config.json: model_max_length is {json.dumps(value)[:60] if not isinstance(value, list) else 'a JSON list'}, not a")


@pytest.mark.parametrize("task", ["query", "document"])
def test_encode_query_s_length_is_named_and_reachable(layouts, tmp_path, task):
    """sentence-transformers 6's query_length / document_length (sentence_bert_config.json) are encode_query's /
    encode_document's max length; encode(prompt_name=...) does not apply them. bertfeat encodes as the latter (the
    docs said prompt_name was encode_query's equivalent: cosine 0.93 on such a model), warns, and with that max length
    gives encode_query's vectors."""
    import warnings

    from bertfeat.errors import BertfeatWarning

    d = tmp_path / "m"
    shutil.copytree(layouts["labse_cls_dense_tanh_normalize"], d)
    cfg = json.loads((d / "sentence_bert_config.json").read_text())
    (d / "sentence_bert_config.json").write_text(json.dumps({**cfg, "query_length": 8, "document_length": 12}))
    cst = json.loads((d / "config_sentence_transformers.json").read_text())
    cst["prompts"] = {"query": "query: ", "document": "passage: "}
    (d / "config_sentence_transformers.json").write_text(json.dumps(cst))
    st, enc = _st(d), Encoder(d)
    texts = TEXTS[:2] + [TEXTS[4]]
    n = {"query": 8, "document": 12}[task]
    with pytest.warns(BertfeatWarning) as w:
        plain = enc.encode(texts, prompt_name=task)
    assert str(w[0].message) == (f"{d}: sentence-transformers' encode_{task} encodes at this model's {task}_length {n} "
                                 f"(its sentence_bert_config.json); bertfeat encodes as encode(prompt_name='{task}') "
                                 f"does, at max length 32: give max length {n} (--max-length {n}, max_length={n}) for "
                                 f"encode_{task}'s vectors")
    np.testing.assert_allclose(plain, _st_encode(st, texts, prompt_name=task), atol=1e-5)
    want = st.encode_query(texts) if task == "query" else st.encode_document(texts)
    assert not np.allclose(plain, want, atol=1e-3)  # the lengths differ for these texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none at the task's own length
        np.testing.assert_allclose(enc.encode(texts, prompt_name=task, max_length=n), want, atol=1e-5)


@pytest.mark.parametrize("rel,key,where", [
    ("sentence_bert_config.json", "max_seq_length", "sentence_bert_config.json"),
    ("tokenizer_config.json", "model_max_length", "tokenizer_config.json"),
    ("sentence_bert_config.json", "processing_kwargs", "sentence_bert_config.json: processing_kwargs"),
])
def test_a_max_length_written_with_a_decimal_point_is_refused(layouts, tmp_path, rel, key, where):
    """max_seq_length 32.0 (or the tokenizer's model_max_length 32.0, or processing_kwargs' max_length) was read as 32;
    sentence-transformers loads such a folder and fails at its first text (TypeError: 'float' object cannot be
    interpreted as an integer), so bertfeat refuses it when it loads, naming the file, the key and the value."""
    d = tmp_path / "m"
    shutil.copytree(layouts["labse_cls_dense_tanh_normalize"], d)
    assert "max_seq_length" not in json.loads((d / "sentence_bert_config.json").read_text())  # 6.x: the tokenizer's
    edit = {key: {"text": {"max_length": 32.0}} if key == "processing_kwargs" else 32.0}
    cfg = json.loads((d / rel).read_text())
    (d / rel).write_text(json.dumps({**cfg, **edit}))
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    name = "max_length" if key == "processing_kwargs" else key
    assert e.value.message == (f"{where}: {name} is 32.0, not an integer - write it as 32, without the decimal point "
                               "(sentence-transformers fails on 32.0)")
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        _st_encode(_st(d), TEXTS)


def test_encoder_default_pooling_helper_is_gone():
    """encoder.default_pooling(model_dir) raised on every folder with a Pooling module (hidden size 1 passed to
    read_pipeline) and had no caller: removed; Encoder.default_pooling / pooling_source give the pooling."""
    import bertfeat.model.encoder

    assert not hasattr(bertfeat.model.encoder, "default_pooling")


# --------------------------------------------------------------------------- the older layout: 0_Transformer/
@pytest.mark.parametrize("name", ["labse_cls_dense_tanh_normalize", "bge_cls_normalize", "e5_xlmr_mean_normalize"])
def test_older_layout_is_sentence_transformers_encode(layouts, tmp_path, name):
    """The encoder's files in the Transformer folder modules.json names ("path": "0_Transformer"), the Pooling, Dense
    and Normalize folders and the prompts at the top: sentence-transformers 6 loads it, and bertfeat gives its
    output within 1e-5 (the same vectors as the folder in today's layout)."""
    d = older_layout(layouts[name], tmp_path / name)
    assert not (d / "config.json").exists() and (d / "0_Transformer" / "config.json").is_file()
    st, enc = _st(d), Encoder(d)
    assert enc.location.encoder_dir == "0_Transformer"
    assert enc.max_length == st.max_seq_length == 32
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((d / "modules.json").read_text())]
    assert [line.split()[0] for line in enc.describe(enc.spec()) if line.split()[0] != "Prompt"] == kinds
    for prompt_name in [None] + list(enc.prompts):
        kw = {} if prompt_name is None else {"prompt_name": prompt_name}
        ours, ref = enc.encode(TEXTS, **kw), _st_encode(st, TEXTS, **kw)
        assert ours.shape == ref.shape and float(np.abs(ours - ref).max()) <= 1e-5, prompt_name
    np.testing.assert_array_equal(enc.encode(TEXTS), Encoder(layouts[name]).encode(TEXTS))


def test_older_layout_settings_come_from_the_transformer_folder(layouts, tmp_path):
    """sentence_bert_config.json's max_seq_length and do_lower_case are read in 0_Transformer/, as sentence-transformers
    reads them. Another encoder's files at the top (config.json, weights, tokenizer, sentence_bert_config.json) are
    not read: the Transformer folder modules.json names wins over the top, as in SentenceTransformer."""
    d = older_layout(layouts["e5_xlmr_mean_normalize"], tmp_path / "old")  # a case-sensitive tokenizer
    sbc = d / "0_Transformer" / "sentence_bert_config.json"
    sbc.write_text(json.dumps({**json.loads(sbc.read_text()), "max_seq_length": 16, "do_lower_case": True}))
    other = layouts["labse_cls_dense_tanh_normalize"]
    for f in other.iterdir():
        if f.is_file() and f.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            shutil.copy(f, d / f.name)
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8, "do_lower_case": False}))
    st, enc = _st(d), Encoder(d)
    assert enc.location.encoder_path == d.resolve() / "0_Transformer"
    assert enc.max_length == st.max_seq_length == 16 and enc.pipeline.do_lower_case
    assert enc.pipeline.max_length_source == "0_Transformer/sentence_bert_config.json max_seq_length"
    texts = [t.upper() for t in TEXTS]
    ours, ref = enc.encode(texts), _st_encode(st, texts)
    assert float(np.abs(ours - ref).max()) <= 1e-5
    np.testing.assert_array_equal(ours, enc.encode([t.lower() for t in texts]))


def test_cli_extract_and_info_on_the_older_layout(layouts, tmp_path, capsys):
    import pyarrow.parquet as pq

    d = older_layout(layouts["labse_cls_dense_tanh_normalize"], tmp_path / "old")
    texts = [t for t in TEXTS if t]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    assert main(["extract", str(src), "-m", str(d), "-o", str(out), "-q"]) == 0
    X = np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    assert float(np.abs(X - _st_encode(_st(d), texts)).max()) <= 1e-5
    capsys.readouterr()
    assert main(["info", str(d), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["encoder_files"] == str(d.resolve() / "0_Transformer") and info["embedding_dim"] == 32


def test_a_prompt_longer_than_max_length_is_left_out_as_sentence_transformers(layouts):
    """include_prompt false with a prompt of more tokens than max length: sentence-transformers measures the prompt
    truncated to max length, so each row's last token ([SEP]) is still pooled; bertfeat left every token out and
    returned zero vectors."""
    d = layouts["instructor_prompt_not_pooled"]  # max_seq_length 32
    st, enc = _st(d), Encoder(d)
    prompt = "Represent the following sentence for retrieving documents that answer the question well: " * 3
    assert enc.tokenizer.encode([prompt]).n_tokens[0] > 32
    ref = _st_encode(st, TEXTS, prompt=prompt)
    ours = enc.encode(TEXTS, prompt=prompt)
    print(f"\nprompt of more than 32 tokens: max |diff| {np.abs(ours - ref).max():.2e}")
    assert np.abs(ref).max(axis=1).min() > 0  # sentence-transformers pools something on every row
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    # a prompt that fits still leaves all of its tokens out (the [SEP] of the lone prompt is not one of them)
    np.testing.assert_allclose(enc.encode(TEXTS, prompt="query: "), _st_encode(st, TEXTS, prompt="query: "),
                               atol=1e-5, rtol=0)


def _as_stored_tokenizer(d, normalizer=None, template=True):
    """Folder ``d``'s tokenizer.json loaded as stored (PreTrainedTokenizerFast: no class rebuilds it), with
    ``normalizer`` (JSON) and without its template when ``template`` is false (a tokenizer that adds no special token)."""
    tj = d / "tokenizer.json"
    data = json.loads(tj.read_text(encoding="utf-8"))
    data["normalizer"] = normalizer if normalizer is not None else data["normalizer"]
    data["post_processor"] = data["post_processor"] if template else None
    tj.write_text(json.dumps(data), encoding="utf-8")
    tc = d / "tokenizer_config.json"
    tc.write_text(json.dumps({**json.loads(tc.read_text()), "tokenizer_class": "PreTrainedTokenizerFast",
                              "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                              "mask_token": "[MASK]"}))


def test_do_lower_case_keeps_a_normalizer_that_lower_cases_as_sentence_transformers(layouts, tmp_path):
    """Found by the hostile-text hunt: sentence_bert_config.json's do_lower_case put a Lowercase in front of a
    tokenizer.json normalizer that has its own (NFKC then Lowercase); sentence-transformers leaves such a normalizer as
    it is. U+03F9 'Ϲ' lower-cased first is 'ϲ' and NFKC makes it 'ς'; NFKC first gives 'Σ', lower-cased 'σ': other
    tokens, the vector at cosine 0.77 to SentenceTransformer.encode's. Its cache key changes (vectors of before)."""
    d = tmp_path / "m"
    shutil.copytree(layouts["mean_max_concat"], d)
    _as_stored_tokenizer(d, {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})
    sbc = d / "sentence_bert_config.json"
    sbc.write_text(json.dumps({**json.loads(sbc.read_text()), "do_lower_case": True}))
    st, enc = _st(d), Encoder(d)
    texts = ["\u03f9", "\u03a3\u039f\u03a6\u0399\u0391 \u03f9\u039f\u03a6\u0399\u0391", "Plain TEXT"]
    for t in texts:
        assert enc.tokenizer.encode([t]).ids[0].tolist() == st.tokenizer(t)["input_ids"], t
    np.testing.assert_allclose(enc.encode(texts), _st_encode(st, texts), atol=1e-5, rtol=0)
    assert enc.fingerprint(enc.spec())["do_lower_case"] == "the tokenizer's own"
    assert "do_lower_case" not in Encoder(layouts["mean_max_concat"]).fingerprint(enc.spec())


def test_a_prompt_ending_in_an_unknown_token_is_left_out_whole_as_sentence_transformers(layouts, tmp_path):
    """Found by the hostile-text hunt: include_prompt false with a tokenizer that adds no special tokens and a prompt
    whose last token is [UNK] ('query ☃'). sentence-transformers leaves out the prompt less its last token when that
    is any special token (transformers' all_special_ids: [UNK] too); bertfeat counted only the template's roles
    ([CLS], [SEP], [PAD], [MASK]), so it pooled the [UNK] too (cosine 0.91). Its cache key changes for such a prompt."""
    d = tmp_path / "m"
    shutil.copytree(layouts["instructor_prompt_not_pooled"], d)
    _as_stored_tokenizer(d, template=False)
    st, enc = _st(d), Encoder(d)
    texts = [t for t in TEXTS if t] + ["☃ snow"]
    for prompt in ("query ☃", "query [MASK]", "query: "):
        spec = enc.spec(prompt=prompt)
        assert enc.prompt_length(prompt, spec.max_length) == st[0]._get_prompt_length(prompt), prompt
        np.testing.assert_allclose(enc.encode(texts, prompt=prompt), _st_encode(st, texts, prompt=prompt),
                                   atol=1e-5, rtol=0, err_msg=prompt)
    assert enc.fingerprint(enc.spec(prompt="query ☃"))["prompt_length"] == 1
    assert "prompt_length" not in enc.fingerprint(enc.spec(prompt="query [MASK]"))  # left out before too
    # a template's [SEP] that the folder names no special token (tokenizer_config.json declares only its pad token)
    # is not special to transformers: the prompt's length counts it, where bertfeat left it out by its role
    d = tmp_path / "no_named"
    shutil.copytree(layouts["instructor_prompt_not_pooled"], d)
    _as_stored_tokenizer(d)
    tc = d / "tokenizer_config.json"
    tc.write_text(json.dumps({k: v for k, v in json.loads(tc.read_text()).items()
                              if k not in ("unk_token", "sep_token", "cls_token", "mask_token")}))
    st, enc = _st(d), Encoder(d)
    spec = enc.spec(prompt="query: ")
    assert enc.prompt_length("query: ", spec.max_length) == st[0]._get_prompt_length("query: ") == 4
    np.testing.assert_allclose(enc.encode(texts, prompt="query: "), _st_encode(st, texts, prompt="query: "),
                               atol=1e-5, rtol=0)
    assert enc.fingerprint(spec)["prompt_length"] == 4


def test_normalize_embeddings_as_sentence_transformers(layouts, minilm_dir):
    """normalize_embeddings=True normalizes, False adds nothing and leaves the model's own Normalize module in (it
    removed it: vectors of norm ~6 where SentenceTransformer.encode gives unit vectors); normalize=False leaves it out."""
    real = Encoder(minilm_dir)
    st = _st(minilm_dir)
    for flag in (False, True):
        ours, ref = real.encode(TEXTS, normalize_embeddings=flag), _st_encode(st, TEXTS, normalize_embeddings=flag)
        np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    assert np.linalg.norm(real.encode(TEXTS[:2], normalize=False), axis=1).min() > 2
    d = layouts["mean_max_concat"]  # no Normalize module
    enc, st = Encoder(d), _st(d)
    for flag in (False, True):
        np.testing.assert_allclose(enc.encode(TEXTS, normalize_embeddings=flag),
                                   _st_encode(st, TEXTS, normalize_embeddings=flag), atol=1e-5, rtol=0)
    with pytest.raises(BertfeatError, match="disagree"):
        enc.encode(TEXTS, normalize=False, normalize_embeddings=True)


@pytest.mark.parametrize("keep", [["Transformer"], ["Transformer", "Normalize"]])
def test_a_modules_json_without_pooling_has_no_own_embedding(layouts, tmp_path, capsys, keep):
    """Found by the session's own audit: a modules.json listing no Pooling module (sentence-transformers fails on it:
    KeyError 'sentence_embedding') ran as mean pooling. The own embedding is refused; a pooling the user names runs."""
    d = tmp_path / "m"
    shutil.copytree(layouts["bge_cls_normalize"], d)
    modules = [m for m in json.loads((d / "modules.json").read_text()) if m["type"].rsplit(".", 1)[-1] in keep]
    (d / "modules.json").write_text(json.dumps(modules))
    src = tmp_path / "in.csv"
    src.write_text("text\nhello there\n")
    assert main(["extract", str(src), "-m", str(d), "-o", str(tmp_path / "o.parquet")]) == 1
    assert capsys.readouterr().err == (
        f"Error: the model {d} has no embedding of its own: its modules.json lists no Pooling module, so it defines no "
        "sentence embedding (sentence-transformers cannot encode with it either) - choose a pooling, e.g. --pooling "
        "mean\n")
    assert not (tmp_path / "o.parquet").exists()
    X = Encoder(d).encode(["hello there"], pooling="mean")  # named: the encoder's states, pooled as asked
    assert X.shape == (1, Encoder(d).config.hidden_size)


def test_info_on_a_model_without_its_own_embedding(layouts, tmp_path, capsys):
    """info still describes a folder whose modules.json lists no Pooling: its embedding is said to be none."""
    d = tmp_path / "m"
    shutil.copytree(layouts["bge_cls_normalize"], d)
    modules = [m for m in json.loads((d / "modules.json").read_text()) if m["type"].endswith("Transformer")]
    (d / "modules.json").write_text(json.dumps(modules))
    assert main(["info", str(d), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["embedding"].startswith(f"the model {d} has no embedding of its own: its modules.json lists no Pooling")
    assert info["embedding_dim"] is None
    assert main(["info", str(d)]) == 0
    table = " ".join(line.strip("│ ") for line in capsys.readouterr().out.splitlines())
    # the reason as one sentence: the table cut it into characters joined by ' -> ' ("t -> h -> e ->   -> m ...")
    assert "t -> h -> e" not in table and "has no embedding of its own" in " ".join(table.split())


def test_a_normalize_writing_another_key_leaves_the_embedding_as_sentence_transformers_does(tmp_path):
    """module_output_name "normalized_embedding": sentence-transformers returns the unnormalized sentence embedding;
    bertfeat normalized it. A Dense whose module_output_name is null writes its input's key, as in ST."""
    from sentence_transformers import SentenceTransformer

    d = st_folder(tmp_path / "st", pooling="mean", dense=[(16, "tanh")], normalize=True, hidden=32, layers=2, heads=2)
    norm = next(p for p in d.iterdir() if p.name.endswith("_Normalize"))
    (norm / "config.json").write_text(json.dumps({"module_input_name": "sentence_embedding",
                                                  "module_output_name": "normalized_embedding"}))
    dense = next(p for p in d.iterdir() if p.name.endswith("_Dense"))
    cfg = json.loads((dense / "config.json").read_text())
    cfg["module_output_name"] = None
    (dense / "config.json").write_text(json.dumps(cfg))
    texts = ["a short text", "another text, with more words"]
    want = SentenceTransformer(str(d), device="cpu").encode(texts)
    assert np.abs(np.linalg.norm(want, axis=1) - 1).max() > 0.01  # not normalized
    np.testing.assert_allclose(Encoder(str(d)).encode(texts), want, atol=1e-5)


def test_processing_kwargs_max_length_is_the_max_length_and_other_keywords_are_refused(tmp_path):
    """sentence-transformers 6's processing_kwargs {"text": {"max_length": 6}} truncates to 6 tokens; bertfeat read
    max_seq_length only (128 here). Another tokenizer keyword is refused, never ignored."""
    from sentence_transformers import SentenceTransformer

    d = st_folder(tmp_path / "st", pooling="mean", hidden=32, layers=2, heads=2)
    sbc = d / "sentence_bert_config.json"
    cfg = json.loads(sbc.read_text())
    cfg["processing_kwargs"] = {"text": {"max_length": 6}}
    sbc.write_text(json.dumps(cfg))
    texts = ["a rather long text that runs past six tokens by some way", "short"]
    enc = Encoder(str(d))
    assert enc.default_max_length == 6
    np.testing.assert_allclose(enc.encode(texts), SentenceTransformer(str(d), device="cpu").encode(texts), atol=1e-5)
    # common wins over text, as sentence-transformers calls the tokenizer with {**text, **common}; its own
    # defaults (padding to the longest, truncation) change nothing; an image modality is not a text encoder's
    cfg["processing_kwargs"] = {"common": {"max_length": 5}, "text": {"max_length": 10, "padding": True,
                                                                      "truncation": "longest_first"}, "image": {"x": 1}}
    sbc.write_text(json.dumps(cfg))
    enc = Encoder(str(d))
    assert enc.default_max_length == 5
    np.testing.assert_allclose(enc.encode(texts), SentenceTransformer(str(d), device="cpu").encode(texts), atol=1e-5)
    cfg["processing_kwargs"] = {"text": {"max_length": 6, "add_special_tokens": False}}
    sbc.write_text(json.dumps(cfg))
    with pytest.raises(BertfeatError, match=r"sentence_bert_config.json: processing_kwargs add_special_tokens=False "
                                            r"cannot be reproduced by bertfeat - "):
        Encoder(str(d))


# --------------------------------------------------------------------------- truncate_dim (Matryoshka models)
# config_sentence_transformers.json's truncate_dim was refused; sentence-transformers' encode keeps the first
# truncate_dim features of the embedding, after every module (Normalize included), not normalized again.
TRUNCATED = {"mean_normalize": dict(pooling="mean", normalize=True),
             "cls_dense_normalize": dict(pooling="cls", dense=[(24, "tanh")], normalize=True),
             "mean_max": dict(pooling=["mean", "max"])}


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    """Folders saved by sentence-transformers with truncate_dim 8 (its config_sentence_transformers.json)."""
    root = tmp_path_factory.mktemp("truncate_dim")
    return {name: st_folder(root / name, hidden=32, layers=2, heads=2, max_seq_length=32, truncate_dim=8, **kw)
            for name, kw in TRUNCATED.items()}


@pytest.mark.parametrize("name", list(TRUNCATED))
def test_the_models_truncate_dim_is_sentence_transformers_encode(truncated, name):
    d = truncated[name]
    assert json.loads((d / "config_sentence_transformers.json").read_text())["truncate_dim"] == 8
    st, enc = _st(d), Encoder(d)
    ref, ours = _st_encode(st, TEXTS), enc.encode(TEXTS)
    print(f"\n{name}: shape {ours.shape}, max |diff| {np.abs(ours - ref).max():.2e}")
    assert ours.shape == ref.shape == (len(TEXTS), 8) and enc.output_dim(enc.spec()) == 8
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    if "normalize" in name:  # cut after the Normalize module, not normalized again
        assert np.linalg.norm(ours, axis=1).max() < 0.99
    width = 24 if "dense" in name else 32 * (2 if name == "mean_max" else 1)
    assert enc.describe(enc.spec())[-1] == f"Truncate to the first 8 of {width} features (the model's truncate_dim)"


def test_a_truncate_dim_given_overrides_the_models_as_sentence_transformers(truncated):
    """encode(truncate_dim=N) wins over the model's, as there: N up to the width (all of it: every feature);
    normalize_embeddings=True normalizes after the cut, as there."""
    d = truncated["mean_normalize"]
    st, enc = _st(d), Encoder(d)
    for n in (1, 5, 8, 20, 32):
        np.testing.assert_allclose(enc.encode(TEXTS, truncate_dim=n), _st_encode(st, TEXTS, truncate_dim=n),
                                   atol=1e-5, rtol=0)
    ours, ref = (enc.encode(TEXTS, normalize_embeddings=True), _st_encode(st, TEXTS, normalize_embeddings=True))
    assert ours.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert enc.spec(truncate_dim=32).truncate_dim == 32 and enc.output_dim(enc.spec(truncate_dim=32)) == 32


def test_normalize_asked_for_with_a_cut_gives_unit_vectors_as_sentence_transformers(truncated):
    """normalize=True given with a cut normalizes the kept features again (sentence-transformers'
    encode(truncate_dim=N, normalize_embeddings=True), TEI's dimensions + normalize); the model's own Normalize before
    its cut does not (the test above), nor does a run without a cut."""
    d = truncated["mean_normalize"]
    st, enc = _st(d), Encoder(d)
    for n in (5, 8):
        ours = enc.encode(TEXTS, normalize=True, truncate_dim=n)
        np.testing.assert_allclose(ours, _st_encode(st, TEXTS, truncate_dim=n, normalize_embeddings=True), atol=1e-5,
                                   rtol=0)
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    spec = enc.spec(pooling="cls", normalize=True, truncate_dim=4)
    assert spec.renormalize and spec.to_dict()["renormalize"] is True
    assert enc.describe(spec)[-2:] == ["Truncate to the first 4 of 32 features (chosen)", "Normalize (after the cut)"]
    full = enc.encode(TEXTS, pooling="cls", normalize=True)
    cut = full[:, :4] / np.linalg.norm(full[:, :4], axis=1, keepdims=True)
    np.testing.assert_allclose(enc.encode(TEXTS, pooling="cls", normalize=True, truncate_dim=4), cut, atol=1e-6, rtol=0)
    for kw in ({}, {"normalize": False, "truncate_dim": 4}, {"pooling": "cls", "normalize": True}):
        assert "renormalize" not in enc.spec(**kw).to_dict() and not enc.spec(**kw).renormalize, kw


def test_a_chosen_pooling_is_not_cut_by_the_models_truncate_dim(truncated):
    """The model's truncate_dim belongs to its embedding: a pooling the user names (the model's modules left out)
    keeps every feature, unless truncate_dim is given for it too."""
    enc = Encoder(truncated["mean_normalize"])
    full = enc.encode(TEXTS, pooling="mean")
    assert full.shape == (len(TEXTS), 32) and enc.spec(pooling="mean").truncate_dim is None
    np.testing.assert_array_equal(enc.encode(TEXTS, pooling="mean", truncate_dim=5), full[:, :5])
    assert enc.encode(TEXTS, layers="-2:", layer_agg="concat", truncate_dim=40).shape == (len(TEXTS), 40)


def test_info_says_the_models_truncate_dim(truncated, capsys):
    d = truncated["mean_normalize"]
    capsys.readouterr()
    assert main(["info", str(d), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["embedding_dim"] == 8
    assert info["embedding"][-2:] == ["Normalize", "Truncate to the first 8 of 32 features (the model's truncate_dim)"]
    assert main(["info", str(d)]) == 0
    out = capsys.readouterr().out  # (the table folds the embedding line)
    assert "Truncate to the" in out and re.search(r"│ embedding_dim\s+│ 8\s+│", out), out


@pytest.mark.parametrize("kw, message", [
    (dict(truncate_dim=33), "truncate_dim=33 is more than the 32 features of the model's embedding - choose truncate_dim "
     "from 1 to 32 (its first features are kept), or leave it out"),
    (dict(pooling="cls", truncate_dim=64), "truncate_dim=64 is more than the 32 features of the chosen pooling - choose "
     "truncate_dim from 1 to 32 (its first features are kept), or leave it out"),
    (dict(truncate_dim=0), "truncate_dim=0 is out of range - choose 1 or more (the first features of each vector are "
     "kept), or leave it out for the default"),
    (dict(truncate_dim=2.5), "truncate_dim=2.5 is not a whole number - choose 1 or more (the first features of each "
     "vector are kept), or leave it out for the default"),
])
def test_a_truncate_dim_outside_the_features_is_refused(truncated, kw, message):
    with pytest.raises(BertfeatError) as e:
        Encoder(truncated["mean_normalize"]).encode(TEXTS, **kw)
    assert e.value.message == message


# --------------------------------------------------------------------------- settings sentence-transformers applies
# that bertfeat read past: sentence_bert_config.json's keywords for transformers' loaders and
# config_sentence_transformers.json's truncate_dim (now applied, above; one that is no number of features is refused).
# Each changed sentence-transformers' vectors (cos down to 0.89, or another width) while bertfeat ran the model without
# them, silently.
class TestSettingsSentenceTransformersAppliesAreAppliedOrRefused:
    LONG = ["a rather long text that runs well past sixteen word pieces, on and on, until it stops at last", "short"]

    @pytest.fixture(scope="class")
    def base(self, tmp_path_factory):
        return st_folder(tmp_path_factory.mktemp("loader") / "st", pooling="mean", normalize=True, hidden=32, layers=2,
                         heads=2, max_seq_length=32)

    @staticmethod
    def _edit(base, tmp_path, name: str, edit: dict):
        d = tmp_path / "m"
        shutil.copytree(base, d)
        f = d / name
        f.write_text(json.dumps({**json.loads(f.read_text()), **edit}))
        return d

    @pytest.mark.parametrize("edit, want", [
        ({"tokenizer_args": {"model_max_length": 16}}, (16, "tokenizer_args model_max_length")),
        ({"max_seq_length": 12, "processor_kwargs": {"model_max_length": 16}}, (16, "processor_kwargs model_max_length")),
        ({"tokenizer_args": {"model_max_length": 10}, "processor_kwargs": {"model_max_length": 20}},
         (10, "tokenizer_args model_max_length")),  # the old name wins, as sentence-transformers renames it over the new
        ({"processor_kwargs": {"model_max_length": 10}, "processing_kwargs": {"text": {"max_length": 20}}},
         (20, "processing_kwargs max_length")),
    ], ids=["tokenizer_args", "over-max_seq_length", "old-name-wins", "processing_kwargs-wins"])
    def test_a_tokenizer_model_max_length_is_the_max_length(self, base, tmp_path, edit, want):
        from sentence_transformers import SentenceTransformer

        d = self._edit(base, tmp_path, "sentence_bert_config.json", edit)
        enc = Encoder(str(d))
        assert (enc.default_max_length, enc.pipeline.max_length_source) == (want[0], f"sentence_bert_config.json {want[1]}")
        st = SentenceTransformer(str(d), device="cpu")
        np.testing.assert_allclose(enc.encode(self.LONG), _st_encode(st, self.LONG), atol=1e-5, rtol=0)

    def test_loading_arguments_sentence_transformers_overrides_change_nothing(self, base, tmp_path):
        from sentence_transformers import SentenceTransformer

        d = self._edit(base, tmp_path, "sentence_bert_config.json", {
            "model_args": {"trust_remote_code": True, "revision": "v1", "subfolder": "elsewhere",
                           "attn_implementation": "eager"},
            "config_kwargs": {"cache_dir": "/nowhere", "use_cache": False}, "tokenizer_args": {"use_fast": True}})
        st = SentenceTransformer(str(d), device="cpu")
        np.testing.assert_allclose(Encoder(str(d)).encode(self.LONG), _st_encode(st, self.LONG), atol=1e-5, rtol=0)

    @pytest.mark.parametrize("edit, what", [
        ({"config_kwargs": {"layer_norm_eps": 0.5}}, "config_kwargs layer_norm_eps=0.5"),
        ({"config_args": {"hidden_act": "relu"}}, "config_args hidden_act='relu'"),
        ({"tokenizer_args": {"do_lower_case": False}}, "tokenizer_args do_lower_case=False"),
        ({"processor_kwargs": {"truncation_side": "left", "use_fast": False}}, "processor_kwargs truncation_side='left'"),
        ({"model_kwargs": {"variant": "fp16", "add_pooling_layer": False}}, "model_kwargs variant='fp16'"),
    ], ids=["config-eps", "config-act", "lowercase", "tokenizer", "model"])
    def test_a_setting_bertfeat_does_not_reproduce_is_refused(self, base, tmp_path, capsys, edit, what):
        d = self._edit(base, tmp_path, "sentence_bert_config.json", edit)
        with pytest.raises(BertfeatError, match=f"^sentence_bert_config.json: {re.escape(what)} cannot be reproduced by "
                                                "bertfeat .* - remove it"):
            Encoder(str(d))
        src = tmp_path / "in.csv"
        src.write_text("text\nhello\n")
        assert main(["extract", str(src), "-m", str(d), "-o", str(tmp_path / "o.parquet"), "-q"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"Error: sentence_bert_config.json: {what} cannot") and "\n" not in err
        assert not (tmp_path / "o.parquet").exists()

    def test_loader_keywords_that_are_not_an_object_are_refused(self, base, tmp_path):
        d = self._edit(base, tmp_path, "sentence_bert_config.json", {"model_kwargs": ["dtype"]})
        with pytest.raises(BertfeatError, match="sentence_bert_config.json: model_kwargs is a JSON list, not a JSON object"):
            Encoder(str(d))

    @pytest.mark.parametrize("dim, text", [(0, "0"), (-4, "-4"), (True, "true"), (8.5, "8.5")])
    def test_a_truncate_dim_that_is_no_number_of_features_is_refused(self, base, tmp_path, dim, text):
        """sentence-transformers slices with it: 0 gives empty vectors, -4 drops the last 4 features."""
        d = self._edit(base, tmp_path, "config_sentence_transformers.json", {"truncate_dim": dim})
        with pytest.raises(BertfeatError) as e:
            Encoder(str(d))
        assert e.value.message.startswith(f"config_sentence_transformers.json: truncate_dim is {text}, not ")

    @pytest.mark.parametrize("dim", [32, 100])
    def test_a_truncate_dim_that_keeps_every_feature_loads(self, base, tmp_path, dim):
        from sentence_transformers import SentenceTransformer

        d = self._edit(base, tmp_path, "config_sentence_transformers.json", {"truncate_dim": dim})
        st = SentenceTransformer(str(d), device="cpu")
        np.testing.assert_allclose(Encoder(str(d)).encode(self.LONG), _st_encode(st, self.LONG), atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- loader keywords that change no vector
class TestLoaderKeywordsThatChangeNoVectorLoad:
    """Found by review: the refusal of sentence_bert_config.json's loader keywords took every entry but a few for one
    that changes the model, and refused folders sentence-transformers 6 encodes exactly as without them: use_fast
    (transformers 5's AutoTokenizer drops it: every tokenizer is fast), clean_up_tokenization_spaces (decoding only),
    add_pooling_layer and low_cpu_mem_usage (the pooler is no Pooling module's input; how the weights load), dropout
    rates and output flags of the config (inactive when encoding)."""

    @pytest.mark.parametrize("edit", [
        {"tokenizer_args": {"use_fast": False, "clean_up_tokenization_spaces": False}},
        {"processor_kwargs": {"use_fast": False}},
        {"model_args": {"add_pooling_layer": False, "low_cpu_mem_usage": True}},
        {"config_kwargs": {"hidden_dropout_prob": 0.5, "attention_probs_dropout_prob": 0.5, "classifier_dropout": 0.5,
                           "output_hidden_states": True, "output_attentions": True, "return_dict": False}},
    ], ids=["tokenizer_args", "processor_kwargs", "model_args", "config_kwargs"])
    def test_they_load_and_encode_as_sentence_transformers(self, tmp_path, edit):
        from sentence_transformers import SentenceTransformer

        base = st_folder(tmp_path / "st", pooling="mean", normalize=True, hidden=32, layers=2, heads=2)
        d = TestSettingsSentenceTransformersAppliesAreAppliedOrRefused._edit(base, tmp_path, "sentence_bert_config.json",
                                                                              edit)
        texts = TestSettingsSentenceTransformersAppliesAreAppliedOrRefused.LONG
        st = SentenceTransformer(str(d), device="cpu")
        np.testing.assert_allclose(Encoder(str(d)).encode(texts), _st_encode(st, texts), atol=1e-5, rtol=0)
        np.testing.assert_allclose(_st_encode(SentenceTransformer(str(base), device="cpu"), texts),
                                   _st_encode(st, texts), atol=1e-6, rtol=0)  # they change nothing there either


# --------------------------------------------------------------------------- what SentenceTransformer reads, and when
class TestWhatSentenceTransformerReadsOfAFolder:
    """Found by the hostile-model audit (round six): each gave other vectors than SentenceTransformer(folder).encode,
    rc 0. Without modules.json, sentence-transformers builds its own Transformer and Pooling (mean, or the last token
    of a ...ForCausalLM) and reads neither sentence_bert_config.json nor config_sentence_transformers.json; bertfeat
    applied their max_seq_length, do_lower_case, prompts and truncate_dim, and pooled a causal-LM checkpoint by mean. A
    config_sentence_transformers.json model_type other than SentenceTransformer makes it ignore modules.json (mean
    pooling); bertfeat ran the modules. Two modules of one name: it keeps the later in the earlier's place; bertfeat
    ran both."""

    TEXTS = ["A Man Is Playing A GUITAR.", "x", "Sentence embeddings are compared with the cosine similarity " * 4]

    @staticmethod
    def _check(d, texts, **kw):
        from sentence_transformers import SentenceTransformer

        want = _st_encode(SentenceTransformer(str(d), device="cpu"), texts)
        got = Encoder(d).encode(texts, **kw)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)

    def test_without_modules_json_the_sentence_transformers_files_are_not_read(self, tmp_path, capsys):
        from ckpt import make_checkpoint

        d = make_checkpoint(tmp_path / "m", hidden=32, layers=2, heads=2, tokenizer="json")
        (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 6, "do_lower_case": True}))
        (d / "config_sentence_transformers.json").write_text(json.dumps(
            {"prompts": {"query": "query: "}, "default_prompt_name": "query", "truncate_dim": 8}))
        self._check(d, self.TEXTS)
        enc = Encoder(d)
        assert (enc.max_length, enc.default_pooling, enc.prompts) == (512, "mean", {})
        assert main(["info", str(d), "--files"]) == 0
        listed = capsys.readouterr().out
        assert "sentence_bert_config.json" not in listed and "config_sentence_transformers.json" not in listed

    @pytest.mark.parametrize("arch,extra,pooling", [
        ("RobertaForCausalLM", {}, "lasttoken"), ("RobertaForCausalLM", {"is_causal": False}, "mean"),
        ("RobertaForMaskedLM", {}, "mean")])
    def test_a_causal_lm_checkpoint_without_modules_json_pools_as_sentence_transformers(self, tmp_path, arch, extra,
                                                                                       pooling):
        d = roberta_checkpoint(tmp_path / "r", model_type="roberta", hidden=32, layers=2, heads=2)
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "architectures": [arch], **extra}))
        self._check(d, self.TEXTS)
        assert Encoder(d).default_pooling == pooling

    @pytest.mark.parametrize("model_type", ["SparseEncoder", "CrossEncoder", None])
    def test_a_folder_of_another_model_type_has_no_own_embedding(self, tmp_path, capsys, model_type):
        d = st_folder(tmp_path / "st", pooling="cls", dense=[(16, "tanh")], normalize=True, hidden=32, layers=2,
                      heads=2)
        cst = json.loads((d / "config_sentence_transformers.json").read_text())
        (d / "config_sentence_transformers.json").write_text(json.dumps({**cst, "model_type": model_type}))
        with pytest.raises(BertfeatError, match=f"model_type {json.dumps(model_type)}, not \"SentenceTransformer\""):
            Encoder(d).encode(["hello"])
        src = tmp_path / "in.csv"
        src.write_text("text\nhello there\n")
        capsys.readouterr()
        assert main(["extract", str(src), "-m", str(d), "-o", str(tmp_path / "o.parquet")]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"Error: the model {d} has no embedding of its own: its config_sentence_transformers.json"
                              f" says model_type {json.dumps(model_type)}") and err.count("\n") == 1
        assert not (tmp_path / "o.parquet").exists()
        # what sentence-transformers gives it is the encoder pooled by mean, which a pooling named still gives
        self._check(d, self.TEXTS, pooling="mean")

    @pytest.mark.parametrize("rename", [(3, "2"), (2, "3")], ids=["normalize-replaces-dense", "dense-replaces-normalize"])
    def test_modules_sharing_a_name_are_refused(self, tmp_path, capsys, rename):
        from sentence_transformers import SentenceTransformer

        d = st_folder(tmp_path / "st", pooling="cls", dense=[(16, "tanh")], normalize=True, hidden=32, layers=2,
                      heads=2)
        modules = json.loads((d / "modules.json").read_text())
        i, name = rename
        modules[i]["name"] = name
        (d / "modules.json").write_text(json.dumps(modules))
        assert len(SentenceTransformer(str(d), device="cpu")) == 3  # one of the two is dropped there
        first, second = sorted((i, int(name)))
        with pytest.raises(BertfeatError, match=re.escape(
                f"modules.json: modules {first} and {second} are both named '{name}' (sentence-transformers keeps only "
                f"module {second}, in the place of module {first})")):
            Encoder(d)


# --------------------------------------------------------------------------- Dense activations
@pytest.mark.parametrize("act,path", [
    ("SiLU", "torch.nn.modules.activation.SiLU"), ("LeakyReLU", "torch.nn.modules.activation.LeakyReLU"),
    ("ELU", "torch.nn.modules.activation.ELU"), ("Softplus", "torch.nn.modules.activation.Softplus"),
    ("Mish", "torch.nn.modules.activation.Mish"), ("Tanh", "torch.nn.Tanh"), ("Identity", "torch.nn.Identity"),
    ("SiLU", "torch.nn.modules.SiLU")])
def test_dense_activations_torch_builds_from_the_path_as_sentence_transformers(tmp_path, act, path):
    """Found by the hostile-model audit (round six): a Dense with SiLU (or LeakyReLU, ELU, Softplus, Mish), which
    sentence-transformers saves and loads, or a shorter path to a supported class (torch.nn.Tanh, which it imports as
    well), was refused. Each runs now, with torch's defaults for the class (the only thing saved); the Dense has no
    bias and maps 32 -> 24, after a Normalize, with weights large enough to reach every branch (x > 20, x < 0)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from ckpt import make_checkpoint

    base = make_checkpoint(tmp_path / "base", hidden=32, layers=2, heads=2, tokenizer="json")
    t = Transformer(str(base), max_seq_length=32)
    dense = Dense(32, 24, bias=False, activation_function=getattr(torch.nn, act)())
    with torch.no_grad():
        dense.linear.weight.copy_(torch.randn(24, 32, generator=torch.Generator().manual_seed(5)) * 12)
    d = tmp_path / "st"
    SentenceTransformer(modules=[t, Pooling(32, "mean"), Normalize(), dense], device="cpu").save(str(d))
    cfg_file = d / "3_Dense" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    assert cfg["activation_function"] == f"torch.nn.modules.{'linear' if act == 'Identity' else 'activation'}.{act}"
    cfg_file.write_text(json.dumps({**cfg, "activation_function": path}))
    texts = ["A man is playing a guitar.", "x", "Sentence embeddings are compared with the cosine similarity"]
    want = _st_encode(SentenceTransformer(str(d), device="cpu"), texts)
    np.testing.assert_allclose(Encoder(d).encode(texts), want, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- models with no Transformer
@pytest.mark.parametrize("kind", ["StaticEmbedding", "Router"])
def test_a_model_with_no_transformer_module_is_refused_naming_its_first_module(tmp_path, capsys, kind):
    """Found by the hostile-model audit (round six): a StaticEmbedding model, or a Router of a query and a document
    Transformer (each encoded by sentence-transformers), was refused as a folder with 'no config.json - point the
    model at a Hugging Face model directory', as if it were no model. The refusal now names the module it starts with."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling, StaticEmbedding
    from tokenizers import Tokenizer

    from ckpt import make_checkpoint

    base = make_checkpoint(tmp_path / "base", hidden=32, layers=2, heads=2, tokenizer="json")
    if kind == "StaticEmbedding":
        mods = [StaticEmbedding(Tokenizer.from_file(str(base / "tokenizer.json")), embedding_dim=16)]
        ref = "sentence_transformers.sentence_transformer.modules.static_embedding.StaticEmbedding"
    else:
        mods = [Router.for_query_document([Transformer(str(base)), Pooling(32, "mean")],
                                          [Transformer(str(base)), Pooling(32, "cls")])]
        ref = "sentence_transformers.base.modules.router.Router"
    d = tmp_path / "st"
    SentenceTransformer(modules=mods, device="cpu").save(str(d))
    assert SentenceTransformer(str(d), device="cpu").encode(["a text"]).shape[0] == 1  # a model sentence-transformers runs
    message = (f"{d}: its modules.json lists no Transformer module (module 0 is '{ref}'), so it has no encoder bertfeat "
               "runs - bertfeat runs sentence-transformers models whose first module is a Transformer (a BERT-family "
               "encoder); encode this one with sentence-transformers, or point ")
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value).startswith(message)
    capsys.readouterr()
    assert main(["info", str(d)]) == 1
    assert capsys.readouterr().err == f"Error: {message}the MODEL argument at such a model\n"


# --------------------------------------------------------------------------- Dropout and LayerNorm
def _layer_norm(n: int, seed: int):
    """sentence-transformers' LayerNorm(n) with an informative gain and bias (it starts at 1 and 0)."""
    from sentence_transformers.sentence_transformer.modules import LayerNorm

    m = LayerNorm(n)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.norm.weight.copy_(1 + 0.3 * torch.randn(n, generator=g))
        m.norm.bias.copy_(0.2 * torch.randn(n, generator=g))
    return m


def _around_pooling(name: str) -> list:
    """The modules after the Transformer (hidden size 32) of each AROUND_POOLING folder."""
    from sentence_transformers.base.modules import Dense, Normalize
    from sentence_transformers.sentence_transformer.modules import Dropout, Pooling

    return {
        "layernorm_dense_dropout_normalize": lambda: [Pooling(32, "mean"), _layer_norm(32, 1), Dense(32, 16), Dropout(0.3),
                                                      Normalize()],
        "dropout_layernorm_of_cls_max": lambda: [Pooling(32, ["cls", "max"]), Dropout(0.1), _layer_norm(64, 2)],
        "normalize_then_dropout": lambda: [Pooling(32, "mean"), Normalize(), Dropout(0.1)],
        "dense_layernorm_normalize_layernorm": lambda: [Pooling(32, "mean"), Dense(32, 24), _layer_norm(24, 3), Normalize(),
                                                        _layer_norm(24, 4)],
    }[name]()


AROUND_POOLING = ["layernorm_dense_dropout_normalize", "dropout_layernorm_of_cls_max", "normalize_then_dropout",
                  "dense_layernorm_normalize_layernorm"]


@pytest.fixture(scope="module")
def around(tmp_path_factory):
    """Folders saved by sentence-transformers with Dropout and LayerNorm modules around Dense / Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer

    from ckpt import make_checkpoint

    root = tmp_path_factory.mktemp("around")
    base = make_checkpoint(root / "base", hidden=32, layers=2, heads=2, tokenizer="json")
    out = {}
    for name in AROUND_POOLING:
        torch.manual_seed(3)  # the Dense modules' initial weights
        t = Transformer(str(base), max_seq_length=32)
        SentenceTransformer(modules=[t, *_around_pooling(name)], device="cpu").save(str(root / name))
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", AROUND_POOLING)
def test_dropout_and_layer_norm_modules_are_sentence_transformers_encode(around, name):
    """A Dropout (nothing at inference) or LayerNorm (torch's, eps 1e-5) module anywhere after the Pooling, between,
    before or after Dense and Normalize modules: bertfeat's default output is SentenceTransformer.encode within
    1e-5, each module shown in its place, the LayerNorm folders in the features' fingerprint."""
    d = around[name]
    enc = Encoder(d)
    spec = enc.spec()
    desc = enc.describe(spec)
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((d / "modules.json").read_text())]
    assert [line.split()[0] for line in desc] == kinds, desc
    layer_norms = tuple(p for k, p in zip(kinds, (m["path"] for m in json.loads((d / "modules.json").read_text())))
                        if k == "LayerNorm")
    assert spec.layer_norm == layer_norms
    assert enc.fingerprint(spec).get("layer_norm", []) == list(layer_norms)  # absent without one: keys as before
    ref = _st_encode(_st(d), TEXTS)
    ours = enc.encode(TEXTS)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    # a chosen pooling leaves the model's modules out, LayerNorm included
    raw = enc.encode(TEXTS, pooling="mean")
    tok = _st_encode(_st(d), TEXTS, output_value="token_embeddings")
    np.testing.assert_allclose(raw, np.stack([t.numpy().mean(axis=0) for t in tok]), atol=1e-5, rtol=0)
    assert enc.spec(pooling="mean").layer_norm == ()


def test_describe_shows_dropout_and_layer_norm_lines(around):
    enc = Encoder(around["layernorm_dense_dropout_normalize"])
    assert enc.describe(enc.spec())[1:] == ["Pooling mean (1_Pooling/config.json)",
                                            "LayerNorm 32 (2_LayerNorm/model.safetensors)",
                                            "Dense 32->16 tanh (3_Dense/model.safetensors)",
                                            "Dropout 0.3, off at inference (4_Dropout/config.json)", "Normalize"]
    assert enc.describe(enc.spec(normalize=False))[-2:] == ["Dense 32->16 tanh (3_Dense/model.safetensors)",
                                                            "Dropout 0.3, off at inference (4_Dropout/config.json)"]
    assert enc.describe(enc.spec(pooling="cls"))[1:] == ["Pooling cls (chosen)"]  # none of the model's modules
    enc = Encoder(around["normalize_then_dropout"])
    assert enc.pipeline.normalize and enc.spec().normalize  # a Dropout after the Normalize changes nothing
    assert enc.describe(enc.spec())[2:] == ["Normalize", "Dropout 0.1, off at inference (3_Dropout/config.json)"]


def test_a_dropout_without_config_json_is_sentence_transformers_default(around, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(around["normalize_then_dropout"], d)
    (d / "3_Dropout" / "config.json").unlink()
    enc = Encoder(d)
    assert enc.describe(enc.spec())[-1] == "Dropout 0.2, off at inference (3_Dropout, without config.json)"
    np.testing.assert_allclose(enc.encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)


def _extract_matches_st(d, tmp_path):
    """`bertfeat extract` of TEXTS (the non-empty ones) with model ``d``: its features equal SentenceTransformer's;
    -> (texts, output path, provenance)."""
    import pyarrow.parquet as pq

    texts = [t for t in TEXTS if t]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    assert main(["extract", str(src), "-m", str(d), "-o", str(out), "-q"]) == 0
    table = pq.read_table(out)
    X = np.stack(table.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    np.testing.assert_allclose(X, _st_encode(_st(d), texts), atol=1e-5, rtol=0)
    return texts, out, json.loads(table.schema.metadata[b"bertfeat"])


def test_cli_extract_info_and_verify_with_a_layer_norm(around, tmp_path, capsys):
    d = around["layernorm_dense_dropout_normalize"]
    _, out, meta = _extract_matches_st(d, tmp_path)
    assert meta["fingerprint"]["layer_norm"] == ["2_LayerNorm"] and meta["dense"] == ["3_Dense"]
    assert meta["pipeline"][2:4] == ["LayerNorm 32 (2_LayerNorm/model.safetensors)",
                                     "Dense 32->16 tanh (3_Dense/model.safetensors)"]
    assert {"2_LayerNorm/config.json", "2_LayerNorm/model.safetensors", "4_Dropout/config.json"} <= set(meta["model_files"])
    capsys.readouterr()
    assert main(["verify", str(out), "-q"]) == 0
    assert main(["info", str(d), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["embedding"][2:] == meta["pipeline"][2:] and info["embedding_dim"] == 16


def test_a_changed_layer_norm_weight_changes_the_cache_key(around, tmp_path):
    """The LayerNorm's model.safetensors is one of the files the cache key, --resume and the Dask workers hash
    (stmodules.MODULE_FILES): new weights reuse no vector of the old."""
    from safetensors.numpy import load_file, save_file

    from bertfeat.cache.store import cache_fingerprint
    from bertfeat.model.hub import model_files

    d = tmp_path / "m"
    shutil.copytree(around["dropout_layernorm_of_cls_max"], d)
    assert {"2_Dropout/config.json", "3_LayerNorm/config.json", "3_LayerNorm/model.safetensors"} <= set(model_files(d))
    enc = Encoder(d)
    key, _ = cache_fingerprint(enc, enc.spec())
    before = enc.encode(TEXTS[:2])
    t = load_file(str(d / "3_LayerNorm" / "model.safetensors"))
    t["norm.weight"][0] += 1.0
    save_file(t, str(d / "3_LayerNorm" / "model.safetensors"))
    enc = Encoder(d)
    assert cache_fingerprint(enc, enc.spec())[0] != key
    after = enc.encode(TEXTS[:2])
    assert np.abs(after[:, 0] - before[:, 0]).min() > 0.1 and np.array_equal(after[:, 1:], before[:, 1:])
    np.testing.assert_allclose(after, _st_encode(_st(d), TEXTS[:2]), atol=1e-5, rtol=0)


def _edit_module(d, folder: str, *, config=None, tensors=None, drop_config: bool = False):
    """Rewrite one module's config.json (a dict) and / or its model.safetensors (tensors: a function of the dict)."""
    from safetensors.numpy import load_file, save_file

    if drop_config:
        (d / folder / "config.json").unlink()
    if config is not None:
        (d / folder / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        f = d / folder / "model.safetensors"
        save_file(tensors(load_file(str(f))), str(f))


_FROM_MODEL = "restore the LayerNorm module's config.json and model.safetensors from the model"


@pytest.mark.parametrize("name, edit, message, st_fails", [
    ("normalize_then_dropout", dict(folder="3_Dropout", config={"dropout": 0.1, "p": 0.5}),
     "3_Dropout/config.json: p is not a setting of sentence-transformers' Dropout module (it takes dropout, and fails on "
     "any other) - restore the Dropout module's config.json from the model", True),
    ("normalize_then_dropout", dict(folder="3_Dropout", config={"dropout": 1.5}),
     "3_Dropout/config.json: dropout is 1.5, not a probability from 0 to 1 (torch's Dropout refuses it) - restore the "
     "Dropout module's config.json from the model", True),
    ("normalize_then_dropout", dict(folder="3_Dropout", config={"dropout": "0.1"}),
     "3_Dropout/config.json: dropout is \"0.1\", not a number - restore the file from the checkpoint (or correct that "
     "entry)", True),
    ("dropout_layernorm_of_cls_max", dict(folder="3_LayerNorm", drop_config=True),
     "3_LayerNorm/config.json is missing (sentence-transformers cannot build the LayerNorm module without it) - restore "
     "the LayerNorm module's config.json from the model", True),
    ("dropout_layernorm_of_cls_max", dict(folder="3_LayerNorm", config={"dimension": 64, "eps": 1e-6}),
     "3_LayerNorm/config.json: eps is not a setting of sentence-transformers' LayerNorm module (it takes dimension, and "
     "fails on any other) - restore the LayerNorm module's config.json from the model", True),
    ("dropout_layernorm_of_cls_max", dict(folder="3_LayerNorm", config={}),
     f"3_LayerNorm/config.json: dimension is missing, not a number of features (1 or more) - {_FROM_MODEL}", True),
    ("dropout_layernorm_of_cls_max", dict(folder="3_LayerNorm", config={"dimension": 32}),
     "{d}/3_LayerNorm/model.safetensors: tensor 'norm.weight' has shape (64,), expected (32,) from its config.json - "
     "re-save the model", True),
    ("dropout_layernorm_of_cls_max", dict(folder="3_LayerNorm", tensors=lambda t: {"norm.weight": t["norm.weight"]}),
     "{d}/3_LayerNorm/model.safetensors: tensor 'norm.bias' is missing, expected (64,) from its config.json - re-save "
     "the model", True),
    ("dropout_layernorm_of_cls_max", dict(folder="3_LayerNorm", tensors=lambda t: {**t, "norm.scale": t["norm.bias"]}),
     "{d}/3_LayerNorm/model.safetensors: tensors ['norm.scale'] that its config.json does not use (dimension 64) - "
     "restore the LayerNorm module's config.json and model.safetensors together from the model (sentence-transformers "
     "refuses a tensor its LayerNorm does not have)", True),
])
def test_a_dropout_or_layer_norm_bertfeat_cannot_reproduce_is_refused(around, tmp_path, capsys, name, edit, message,
                                                                       st_fails):
    """Each is refused in one line naming the file and the entry (sentence-transformers fails on each as well)."""
    from sentence_transformers import SentenceTransformer

    d = tmp_path / "m"
    shutil.copytree(around[name], d)
    _edit_module(d, **edit)
    capsys.readouterr()  # what building the model printed
    refused(capsys, d, message.format(d=d), BertfeatError)
    if st_fails:
        with pytest.raises(Exception):
            SentenceTransformer(str(d), device="cpu")


def test_a_layer_norm_of_another_width_and_modules_before_the_pooling_are_refused(tmp_path):
    """sentence-transformers saves these and fails on the first text; bertfeat refuses them at load, naming them."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Dropout, Pooling

    from ckpt import make_checkpoint

    base = make_checkpoint(tmp_path / "base", hidden=32, layers=2, heads=2, tokenizer="json")
    cases = {"wide": ([Pooling(32, ["mean", "max"]), _layer_norm(32, 1)],
                      "2_LayerNorm/config.json: dimension 32 does not match the 64 dimensions before it - use the "
                      "modules that came with this model"),
             "ln_first": ([_layer_norm(32, 1), Pooling(32, "mean")],
                          "modules.json: LayerNorm module 1 comes before any Pooling - bertfeat runs LayerNorm modules "
                          "on the pooled sentence embedding only"),
             "dropout_first": ([Dropout(0.1), Pooling(32, "mean")],
                               "modules.json: Dropout module 1 comes before any Pooling - bertfeat runs Dropout modules "
                               "on the pooled sentence embedding only")}
    for name, (mods, message) in cases.items():
        d = tmp_path / name
        SentenceTransformer(modules=[Transformer(str(base)), *mods], device="cpu").save(str(d))
        with pytest.raises(Exception):
            SentenceTransformer(str(d), device="cpu").encode(["a text"])
        with pytest.raises(BertfeatError) as e:
            Encoder(d)
        assert str(e.value) == message


def test_a_layer_norm_saved_as_pytorch_model_bin_is_read_as_a_dense_is(around, tmp_path):
    """sentence-transformers' save(safe_serialization=False) writes each module's weights as torch.save's
    pytorch_model.bin: the LayerNorm's is read through the same lookup and torch-free reader as a Dense's; a
    LayerNorm with neither file is refused as a Dense is."""
    from sentence_transformers import SentenceTransformer

    d = tmp_path / "bin"
    SentenceTransformer(str(around["dense_layernorm_normalize_layernorm"]), device="cpu").save(
        str(d), safe_serialization=False)
    assert sorted(f.name for f in (d / "3_LayerNorm").iterdir()) == ["config.json", "pytorch_model.bin"]
    enc = Encoder(d)
    assert enc.describe(enc.spec())[3] == "LayerNorm 24 (3_LayerNorm/pytorch_model.bin)"
    np.testing.assert_allclose(enc.encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)
    (d / "3_LayerNorm" / "pytorch_model.bin").unlink()
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == ("3_LayerNorm has no model.safetensors or pytorch_model.bin - restore the LayerNorm "
                            "module's weights from the model, or re-save it where sentence-transformers is installed: "
                            "SentenceTransformer(dir).save(dir, safe_serialization=True)")


# --------------------------------------------------------------------------- WeightedLayerPooling
def _wlp_folder(d, base, *, start: int, pooling="mean", dense: bool = False, hidden_states=True, seed: int = 0):
    """A model folder saved by sentence-transformers: Transformer (config.json's output_hidden_states as given) ->
    WeightedLayerPooling(layer_start ``start``, informative weights) -> Pooling [-> Dense -> Normalize]."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling, WeightedLayerPooling

    t = Transformer(str(base), max_seq_length=32, config_kwargs={"output_hidden_states": hidden_states})
    H, L = t.get_embedding_dimension(), t.auto_model.config.num_hidden_layers
    wl = WeightedLayerPooling(H, num_hidden_layers=L, layer_start=start)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        wl.layer_weights.copy_(0.2 + torch.rand(L + 1 - start, generator=g) * 2)
    p = Pooling(H, pooling)
    torch.manual_seed(seed)
    mods = [t, wl, p] + ([Dense(p.get_embedding_dimension(), 16), Normalize()] if dense else [])
    SentenceTransformer(modules=mods, device="cpu").save(str(d))
    return d


@pytest.fixture(scope="module")
def wlp_bases(tmp_path_factory):
    """Random-weight encoders of three families (3, 2 and 3 layers)."""
    from ckpt import make_checkpoint
    from test_modernbert import modernbert_checkpoint
    from test_mpnet import mpnet_checkpoint

    root = tmp_path_factory.mktemp("wlp")
    return {"bert": make_checkpoint(root / "bert", hidden=32, layers=3, heads=2, tokenizer="json"),
            "mpnet": mpnet_checkpoint(root / "mpnet", hidden=32, layers=2, heads=2),
            "modernbert": modernbert_checkpoint(root / "modernbert", [t for t in TEXTS if t] * 4, layers=3)}


@pytest.mark.parametrize("family, start, pooling, dense", [
    ("bert", 1, "mean", True), ("bert", 0, "cls", False), ("bert", 2, ["max", "lasttoken"], True),
    ("bert", 3, "weightedmean", False), ("mpnet", 1, "mean", False), ("modernbert", 1, "cls", True)])
def test_weighted_layer_pooling_is_sentence_transformers_encode(wlp_bases, tmp_path, family, start, pooling, dense):
    """The model's WeightedLayerPooling (each token's states of layers layer_start..L averaged with its weights, before
    the Pooling) on BERT, MPNet and ModernBERT encoders: SentenceTransformer.encode within 1e-5, the same vector
    whatever the batch, shown in its place; its layers and weights are in the features' fingerprint. A chosen pooling
    leaves it out (the last layer alone)."""
    d = _wlp_folder(tmp_path / "m", wlp_bases[family], start=start, pooling=pooling, dense=dense)
    enc = Encoder(d)
    spec = enc.spec()
    L = enc.config.num_hidden_layers
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((d / "modules.json").read_text())]
    desc = enc.describe(spec)
    assert [line.split()[0] for line in desc] == kinds, desc
    assert desc[1] == f"WeightedLayerPooling of layer{'s' if start < L else ''} {f'{start}..' if start < L else ''}{L} " \
                      "(1_WeightedLayerPooling/model.safetensors)"
    weights = _st(d)[1].layer_weights.detach().numpy()
    assert spec.layers == tuple(range(start, L + 1)) and np.array_equal(np.float32(spec.layer_weights), weights)
    assert enc.fingerprint(spec)["layer_weights"] == [float(w) for w in weights]
    ref = _st_encode(_st(d), TEXTS)
    ours = enc.encode(TEXTS)
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    alone = np.concatenate([enc.encode([t]) for t in TEXTS])
    assert np.abs(alone - ours).max() <= (0.0 if enc.gemm_path.library == "onednn" else 5e-6)  # (NumPy's BLAS)
    plain = enc.spec(pooling="mean")
    assert plain.layers == (L,) and plain.layer_weights == () and "layer_weights" not in enc.fingerprint(plain)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_weighted_layer_pooling_is_batch_independent_at_every_precision(wlp_bases, tmp_path, precision):
    from bertfeat.ops import gemm

    try:
        gemm.resolve(precision)
    except BertfeatError as e:  # bf16 / int8 need oneDNN and the CPU's instructions
        pytest.skip(str(e))
    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=1, pooling=["mean", "cls"], dense=True)
    enc = Encoder(d, precision=precision)
    together = enc.encode(TEXTS)
    alone = np.concatenate([enc.encode([t]) for t in TEXTS])
    assert np.abs(alone - together).max() <= (0.0 if enc.gemm_path.library == "onednn" else 1e-6)
    cos = np.sum(together * _st_encode(_st(d), TEXTS), axis=1)  # unit vectors (Normalize)
    assert cos.min() > 0.99, cos


@pytest.mark.parametrize("where", ["config.json", "sentence_bert_config.json"])
def test_weighted_layer_pooling_without_every_layers_states_does_nothing_as_in_sentence_transformers(wlp_bases, tmp_path,
                                                                                                     where):
    """sentence-transformers passes every layer's states to the module only when the encoder's config says
    output_hidden_states (config.json, or sentence_bert_config.json's config_kwargs, which win): without it the
    module passes the last layer's states on. bertfeat does the same, and says so."""
    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=1, hidden_states=where != "config.json")
    if where == "sentence_bert_config.json":  # config.json says true; the loader keywords say false, and win
        sbc = d / "sentence_bert_config.json"
        sbc.write_text(json.dumps({**json.loads(sbc.read_text()), "config_kwargs": {"output_hidden_states": False}}))
    enc = Encoder(d)
    spec = enc.spec()
    assert spec.layers == (3,) and spec.layer_weights == ()
    said = ("config.json does not set output_hidden_states" if where == "config.json" else
            "sentence_bert_config.json: config_kwargs does not set output_hidden_states")
    assert enc.describe(spec)[1] == f"WeightedLayerPooling, off: {said} (1_WeightedLayerPooling/config.json)"
    np.testing.assert_allclose(enc.encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(enc.encode(TEXTS), enc.encode(TEXTS, pooling="mean"))


@pytest.mark.parametrize("value", [None, 0, []])
def test_output_hidden_states_null_is_false_as_in_transformers(wlp_bases, tmp_path, value):
    """config.json's output_hidden_states null (or 0, []: falsy, selecting nothing) captures no hidden state in
    transformers, and sentence-transformers' WeightedLayerPooling then does nothing. bertfeat refused the model, saying
    'output_hidden_states null selects some layers'; it runs it as sentence-transformers does."""
    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=1)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "output_hidden_states": value}))
    enc = Encoder(d)
    spec = enc.spec()
    assert spec.layers == (3,) and spec.layer_weights == ()
    assert enc.describe(spec)[1] == ("WeightedLayerPooling, off: config.json does not set output_hidden_states "
                                     "(1_WeightedLayerPooling/config.json)")
    np.testing.assert_allclose(enc.encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)


def test_cli_extract_and_verify_with_a_weighted_layer_pooling(wlp_bases, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    from bertfeat.cache.store import cache_fingerprint

    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=1, dense=True)
    _, out, meta = _extract_matches_st(d, tmp_path)
    assert meta["layers"] == [1, 2, 3] and len(meta["fingerprint"]["layer_weights"]) == 3
    assert meta["pipeline"][1] == "WeightedLayerPooling of layers 1..3 (1_WeightedLayerPooling/model.safetensors)"
    assert {"1_WeightedLayerPooling/config.json", "1_WeightedLayerPooling/model.safetensors"} <= set(meta["model_files"])
    capsys.readouterr()
    assert main(["verify", str(out), "-q"]) == 0
    # new weights: another cache key
    enc = Encoder(d)
    key = cache_fingerprint(enc, enc.spec())[0]
    f = d / "1_WeightedLayerPooling" / "model.safetensors"
    save_file({"layer_weights": load_file(str(f))["layer_weights"][::-1].copy()}, str(f))
    enc = Encoder(d)
    assert cache_fingerprint(enc, enc.spec())[0] != key


_WLP_CONFIG = {"embedding_dimension": 32, "layer_start": 1, "num_hidden_layers": 3}


@pytest.mark.parametrize("edit, message", [
    (dict(config={**_WLP_CONFIG, "layer_weights": [1, 1, 1]}),
     "1_WeightedLayerPooling/config.json: layer_weights is not a setting of sentence-transformers' WeightedLayerPooling "
     "module (it takes embedding_dimension, word_embedding_dimension, layer_start, num_hidden_layers, and fails on any "
     "other) - restore the WeightedLayerPooling module's config.json from the model"),
    (dict(config={"embedding_dimension": 32, "layer_start": 1}),  # num_hidden_layers 12 by default, as there
     "1_WeightedLayerPooling/config.json: num_hidden_layers 12, layer_start 1 do not name layers of the encoder's 3 "
     "(num_hidden_layers 3, layer_start 0 to 3) - use the WeightedLayerPooling config that came with this model"),
    (dict(config={**_WLP_CONFIG, "layer_start": 4}),
     "1_WeightedLayerPooling/config.json: num_hidden_layers 3, layer_start 4 do not name layers of the encoder's 3 "
     "(num_hidden_layers 3, layer_start 0 to 3) - use the WeightedLayerPooling config that came with this model"),
    (dict(config={**_WLP_CONFIG, "embedding_dimension": 64}),
     "1_WeightedLayerPooling/config.json: embedding_dimension 64 is not the encoder's hidden size 32 - use the "
     "WeightedLayerPooling config that came with this model"),
    (dict(config={**_WLP_CONFIG, "layer_start": 2}),
     "{d}/1_WeightedLayerPooling/model.safetensors: tensor 'layer_weights' has shape (3,), expected (2,) from its "
     "config.json - re-save the model"),
    (dict(tensors=lambda t: {"layer_weights": np.float32([1.0, -1.0, 0.0])}),
     "{d}/1_WeightedLayerPooling/model.safetensors: layer_weights [1.0, -1.0, 0.0] are not finite weights of a nonzero "
     "sum - restore the module's model.safetensors from the model"),
])
def test_a_weighted_layer_pooling_bertfeat_cannot_reproduce_is_refused(wlp_bases, tmp_path, capsys, edit, message):
    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=1)
    _edit_module(d, "1_WeightedLayerPooling", **edit)
    capsys.readouterr()  # what building the model printed
    refused(capsys, d, message.format(d=d), BertfeatError)


def test_a_weighted_layer_pooling_out_of_place_or_over_some_layers_is_refused(wlp_bases, tmp_path):
    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=1)
    modules = json.loads((d / "modules.json").read_text())
    (d / "modules.json").write_text(json.dumps([modules[0], modules[2], modules[1]]))  # after the Pooling
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == ("modules.json: WeightedLayerPooling module 2 does not come right after the Transformer - "
                            "bertfeat runs one WeightedLayerPooling, between the Transformer and the Pooling")
    (d / "modules.json").write_text(json.dumps(modules))
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "output_hidden_states": [1, 3]}))
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == ("config.json: output_hidden_states [1, 3] selects some layers, which bertfeat cannot "
                            "reproduce under a WeightedLayerPooling - set it to true (every layer) or false")
    (d / "config.json").write_text(json.dumps({**cfg, "tie_last_hidden_states": False}))
    with pytest.raises(BertfeatError, match=r"^config.json: tie_last_hidden_states false \(the last hidden state taken "):
        Encoder(d)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "1_WeightedLayerPooling" / "model.safetensors").unlink()
    with pytest.raises(BertfeatError, match=r"^1_WeightedLayerPooling has no model.safetensors or pytorch_model.bin - "):
        Encoder(d)


def test_a_weighted_layer_pooling_saved_as_pytorch_model_bin_is_sentence_transformers_encode(wlp_bases, tmp_path):
    from sentence_transformers import SentenceTransformer

    src = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=2, pooling="max")
    d = tmp_path / "bin"
    SentenceTransformer(str(src), device="cpu").save(str(d), safe_serialization=False)
    enc = Encoder(d)
    assert enc.describe(enc.spec())[1] == "WeightedLayerPooling of layers 2..3 (1_WeightedLayerPooling/pytorch_model.bin)"
    np.testing.assert_allclose(enc.encode(TEXTS), _st_encode(_st(d), TEXTS), atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- a null module setting
def test_include_prompt_null_is_refused_as_sentence_transformers_pools_it_without_the_prompt(tmp_path):
    """Found by the hostile-model audit (round seven): 1_Pooling/config.json's "include_prompt": null was read as
    absent (true: the prompt pooled), while sentence-transformers passes None to its Pooling, which then leaves the
    prompt out: other vectors, silently (cosine 0.96 here). Refused now, naming the file and the key."""
    from sentence_transformers import SentenceTransformer

    d = st_folder(tmp_path / "m", hidden=32, layers=2, heads=2, max_position=64, pooling="mean",
                  prompts=PROMPTS, default_prompt_name="query")
    cfg_file = d / "1_Pooling" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    texts = ["A man is playing a guitar.", "x"]
    with_prompt = _st_encode(SentenceTransformer(str(d), device="cpu"), texts)
    cfg_file.write_text(json.dumps({**cfg, "include_prompt": False}))
    without = _st_encode(SentenceTransformer(str(d), device="cpu"), texts)
    cfg_file.write_text(json.dumps({**cfg, "include_prompt": None}))
    null = _st_encode(SentenceTransformer(str(d), device="cpu"), texts)
    np.testing.assert_allclose(null, without, atol=1e-6, rtol=0)  # sentence-transformers: null is false
    assert np.abs(null - with_prompt).max() > 1e-2
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == (
        "1_Pooling/config.json: include_prompt is null, which sentence-transformers does not read as the default (it "
        "reads null as false: a prompt's tokens are left out of the pooling) - restore the file from the model, or "
        "give include_prompt its value (remove the entry for the default)")


@pytest.mark.parametrize("key, tensor, st_error, what", [
    ("bias", True, "Unexpected key(s) in state_dict", "it reads null as false: a Dense without bias, which fails on a "
                                                       "saved linear.bias"),
    ("bias", False, None, "it reads null as false: a Dense without bias, which fails on a saved linear.bias"),
    ("activation_function", True, "'NoneType' object has no attribute 'startswith'",
     "it fails at load (its Dense reads None as torch.nn.Identity, not the default Tanh)"),
    ("pooling_mode", True, "'NoneType' object is not iterable", "it fails at load"),
])
def test_a_dense_or_pooling_setting_null_is_refused_not_read_as_its_default(tmp_path, key, tensor, st_error, what):
    """Found by the hostile-model audit (round seven): a Dense's "bias": null or "activation_function": null, or a
    Pooling's "pooling_mode": null, ran as the default (a bias, Tanh, mean pooling), which sentence-transformers never
    runs: it reads None otherwise (no bias; Dense(activation_function=None) is Identity) or fails. Refused now."""
    from safetensors.numpy import load_file, save_file
    from sentence_transformers import SentenceTransformer

    d = st_folder(tmp_path / "m", hidden=32, layers=2, heads=2, max_position=64, pooling="mean", dense=[(16, "tanh")])
    folder = "1_Pooling" if key == "pooling_mode" else "2_Dense"
    cfg_file = d / folder / "config.json"
    cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), key: None}))
    if not tensor:
        weights = load_file(str(d / folder / "model.safetensors"))
        del weights["linear.bias"]
        save_file(weights, str(d / folder / "model.safetensors"))
    if st_error:
        with pytest.raises(Exception, match=re.escape(st_error)):
            model = SentenceTransformer(str(d), device="cpu")
            assert "at load" not in what, "the message says it fails at load: it loaded"
            model.encode(["a text"])
    else:  # runs without a bias there; bertfeat does not guess which reading the file meant
        SentenceTransformer(str(d), device="cpu").encode(["a text"])
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == (f"{folder}/config.json: {key} is null, which sentence-transformers does not read as the "
                            f"default ({what}) - restore the file from the model, or give {key} its value (remove the "
                            "entry for the default)")


@pytest.mark.parametrize("key", ["layer_start", "num_hidden_layers"])
def test_a_weighted_layer_pooling_setting_null_is_refused_not_read_as_its_default(wlp_bases, tmp_path, key):
    """Found by the hostile-model audit (round seven): a WeightedLayerPooling's "layer_start": null ran as layer 4
    onwards (the default), "num_hidden_layers": null as 12; sentence-transformers fails to build the module on either
    (None + 1). Refused now, naming the file and the key."""
    from sentence_transformers import SentenceTransformer

    d = _wlp_folder(tmp_path / "m", wlp_bases["bert"], start=0)
    cfg_file = d / "1_WeightedLayerPooling" / "config.json"
    cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), key: None}))
    with pytest.raises(TypeError):
        SentenceTransformer(str(d), device="cpu")
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == (f"1_WeightedLayerPooling/config.json: {key} is null, which sentence-transformers does not "
                            "read as the default (it fails at load) - restore the file from the model, or give "
                            f"{key} its value (remove the entry for the default)")


def test_a_module_without_a_path_is_refused_naming_it(layouts, tmp_path):
    """A modules.json entry without "path" (sentence-transformers: KeyError 'path') read the model's own folder as the
    module's: the encoder's config.json was refused as a Pooling config, named '/config.json'."""
    d = tmp_path / "nopath"
    shutil.copytree(layouts["bge_cls_normalize"], d)
    modules = json.loads((d / "modules.json").read_text())
    del modules[1]["path"]
    (d / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert str(e.value) == ('modules.json: module 1 (Pooling) has no "path" (the folder of its files; "" for the '
                            "model's own) - restore modules.json from the model")
