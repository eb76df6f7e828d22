"""Checkpoint loading errors: a missing file in the model directory, a tensor of the wrong shape, a missing
tensor, an unsupported config. Each is one line that says what is wrong and how to fix it, from the library
(BertfeatError.message) and from the CLI (``Error: ...`` on stderr, exit code 1, no traceback).

Issue 2, "What it must show" 6. Also: ``bertfeat --version`` and ``bertfeat info``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bertfeat import BertfeatError, Encoder, __version__
from bertfeat.cli.app import COMMAND_FLAGS, FLAGS, main
from bertfeat.errors import ConfigError, ModelNotFoundError, WeightsError
from bertfeat.model.weights import canonical_name, load_weights
from ckpt import make_checkpoint, n_parameters, record_tensors, refused, row_cosines, write_bf16


def small(d, **kw):
    return make_checkpoint(d, hidden=64, heads=4, layers=2, intermediate=256, **kw)


def edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


def rewrite_tensors(d, fn):
    """Apply fn(dict of name -> array) to model.safetensors in place."""
    from safetensors.numpy import load_file, save_file

    t = load_file(str(d / "model.safetensors"))
    fn(t)
    save_file(t, str(d / "model.safetensors"))


def _reshape(t, name, shape):
    t[name] = np.zeros(shape, np.float32)




# (id, how to break a fresh 2-layer checkpoint in dir d, error type, the message starts with / contains)
CASES = [
    ("no-config", lambda d: (d / "config.json").unlink(), ModelNotFoundError,
     ["{d} has no config.json", "point model at a Hugging Face model directory"]),
    ("config-not-json", lambda d: (d / "config.json").write_text("{oops"), ConfigError,
     ["{d}/config.json is not valid JSON", "restore config.json"]),
    ("config-not-object", lambda d: (d / "config.json").write_text("[1, 2]"), ConfigError,
     ["{d}/config.json is not a JSON object"]),
    ("no-weights", lambda d: (d / "model.safetensors").unlink(), WeightsError,
     ["{d} has no model.safetensors or pytorch_model.bin - a model directory needs model.safetensors (or sharded "
      "model-*.safetensors with model.safetensors.index.json), or pytorch_model.bin (or sharded pytorch_model-*.bin "
      "with pytorch_model.bin.index.json)"]),
    # a pytorch_model.bin is read (torchfile.py): one that is not torch.save's zip is refused as such
    ("pytorch-bin-only", lambda d: ((d / "model.safetensors").unlink(), (d / "pytorch_model.bin").write_bytes(b"x")),
     WeightsError, ["{d}/pytorch_model.bin is not a torch.save zip archive (File is not a zip file)",
                    "re-download the model, or re-save the model where transformers is installed: "
                    "AutoModel.from_pretrained(dir).save_pretrained(dir) writes model.safetensors"]),
    ("bin-shards-without-index", lambda d: ((d / "model.safetensors").unlink(),
                                            (d / "pytorch_model-00001-of-00002.bin").write_bytes(b"x")),
     WeightsError, ["{d} has no model.safetensors or pytorch_model.bin (found pytorch_model-00001-of-00002.bin "
                    "without pytorch_model.bin.index.json)"]),
    ("missing-shard", lambda d: (d / "model-00002-of-00003.safetensors").unlink(), WeightsError,
     ["{d}: shard(s) model-00002-of-00003.safetensors listed in model.safetensors.index.json are missing",
      "copy every model-*.safetensors shard"]),
    # without the index a missing shard showed as a missing tensor, and the fix named config.json
    ("missing-shard-and-index", lambda d: [(d / f).unlink() for f in ("model.safetensors.index.json",
                                                                      "model-00002-of-00003.safetensors")],
     WeightsError, ["{d}: 1 of 3 shards are missing (model-00002-of-00003.safetensors), and "
                    "model.safetensors.index.json, which lists them, is missing too - copy every model-*.safetensors "
                    "shard and model.safetensors.index.json into the model directory"]),
    ("bad-index", lambda d: (d / "model.safetensors.index.json").write_text("{}"), WeightsError,
     ["{d}/model.safetensors.index.json is not a valid safetensors index"]),
    ("corrupt-weights", lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 64), WeightsError,
     ["{d}/model.safetensors could not be read as safetensors", "re-download or re-save the checkpoint"]),
    ("no-tokenizer", lambda d: ((d / "vocab.txt").unlink(), (d / "tokenizer_config.json").unlink()), BertfeatError,
     ["{d} has neither tokenizer.json nor vocab.txt", "copy the model's tokenizer.json"]),
    ("bad-tokenizer-json", lambda d: ((d / "vocab.txt").unlink(), (d / "tokenizer.json").write_text("{}")), ConfigError,
     ["{d}/tokenizer.json could not be read"]),
    ("wrong-shape", lambda d: rewrite_tensors(d, lambda t: _reshape(t, "encoder.layer.1.intermediate.dense.weight", (100, 64))),
     WeightsError, ["{d}/model.safetensors: tensor 'encoder.layer.1.intermediate.dense.weight' has shape (100, 64), "
                    "expected (256, 64) from config.json", "use the config.json that came with these weights"]),
    ("config-mismatch", lambda d: edit_config(d, intermediate_size=512), WeightsError,
     ["tensor 'encoder.layer.0.intermediate.dense.weight' has shape (256, 64), expected (512, 64) from config.json"]),
    ("vocab-mismatch", lambda d: edit_config(d, vocab_size=30000), WeightsError,
     ["tensor 'embeddings.word_embeddings.weight' has shape (30522, 64), expected (30000, 64)"]),
    ("missing-tensor", lambda d: rewrite_tensors(d, lambda t: t.pop("encoder.layer.1.output.LayerNorm.bias")),
     WeightsError, ["{d}/model.safetensors: tensor 'encoder.layer.1.output.LayerNorm.bias' is missing (expected shape (64,))"]),
    # a wrapper's save (model.*, 0.auto_model.*): the fix named config.json, which is right
    ("wrapper-prefix", lambda d: rewrite_tensors(d, lambda t: t.update({"model." + k: t.pop(k) for k in list(t)})),
     WeightsError, ["{d}/model.safetensors: tensor 'embeddings.word_embeddings.weight' is missing; the checkpoint has "
                    "it as 'model.embeddings.word_embeddings.weight', under a prefix bertfeat does not take ('model.') - "
                    "save the encoder itself with transformers' save_pretrained (not a module that holds it), or "
                    "rename its tensors without 'model.'"]),
    ("wrapper-path-prefix", lambda d: rewrite_tensors(d, lambda t: t.update({"0_Transformer/" + k: t.pop(k) for k in list(t)})),
     WeightsError, ["the checkpoint has it as '0_Transformer/embeddings.word_embeddings.weight', under a prefix "
                    "bertfeat does not take ('0_Transformer/')"]),
    ("too-many-layers", lambda d: edit_config(d, num_hidden_layers=1), WeightsError,
     ["the checkpoint has more layers than num_hidden_layers=1 in config.json"]),
    ("duplicate-tensor", lambda d: rewrite_tensors(d, lambda t: t.__setitem__("bert.pooler.dense.bias", t["pooler.dense.bias"])),
     WeightsError, ["tensor 'pooler.dense.bias' appears twice, as 'bert.pooler.dense.bias' and as 'pooler.dense.bias'",
                    "remove one of them from the checkpoint"]),
    # it named the same key twice ("appears twice (as 'embeddings.LayerNorm.weight')"), never the gamma it also holds
    ("duplicate-gamma", lambda d: rewrite_tensors(d, lambda t: t.__setitem__("embeddings.LayerNorm.gamma",
                                                                              t["embeddings.LayerNorm.weight"])),
     WeightsError, ["appears twice, as 'embeddings.LayerNorm.gamma' and as 'embeddings.LayerNorm.weight'"]),
    # half a pooler: its bias was "1 tensor(s) that a BERT encoder does not use ... remove the extra tensors"
    ("half-a-pooler", lambda d: rewrite_tensors(d, lambda t: t.pop("pooler.dense.weight")),
     WeightsError, ["{d}/model.safetensors: tensor 'pooler.dense.weight' is missing (expected shape (64, 64))"]),
    ("integer-tensor", lambda d: rewrite_tensors(d, lambda t: t.__setitem__("pooler.dense.bias", np.zeros(64, np.int32))),
     WeightsError, ["tensor 'pooler.dense.bias' has dtype int32, expected floating point"]),
    ("deberta", lambda d: edit_config(d, model_type="deberta-v2"), ConfigError,
     ["{d}/config.json: model_type 'deberta-v2' is not supported - bertfeat runs BERT-family encoders"]),
    ("relative-key", lambda d: edit_config(d, position_embedding_type="relative_key"), ConfigError,
     ["position_embedding_type 'relative_key' is not supported - only absolute position embeddings are implemented"]),
    ("relative-key-query", lambda d: edit_config(d, position_embedding_type="relative_key_query"), ConfigError,
     ["position_embedding_type 'relative_key_query' is not supported"]),
    ("decoder", lambda d: edit_config(d, is_decoder=True), ConfigError,
     ["decoder models (is_decoder / add_cross_attention) are not supported - use an encoder-only BERT checkpoint"]),
    ("cross-attention", lambda d: edit_config(d, add_cross_attention=True), ConfigError, ["are not supported"]),
    ("unknown-act", lambda d: edit_config(d, hidden_act="swish"), ConfigError,
     ["hidden_act 'swish' is not supported - supported: gelu, gelu_python, gelu_new, gelu_pytorch_tanh, gelu_fast, relu"]),
    ("act-not-a-string", lambda d: edit_config(d, hidden_act={"x": 1}), ConfigError, ["is not supported"]),
    ("heads-zero", lambda d: edit_config(d, num_attention_heads=0), ConfigError,
     ["num_attention_heads must be a positive integer, not 0"]),
    ("size-as-string", lambda d: edit_config(d, hidden_size="64"), ConfigError,
     ["hidden_size must be a positive integer, not '64'"]),
    # loaded as 2 layers, 64 wide; transformers refuses both (tests/model/test_config.py: every family's keys)
    ("layers-as-float", lambda d: edit_config(d, num_hidden_layers=2.0, hidden_size=64.0), ConfigError,
     ["{d}/config.json: hidden_size must be a positive integer, not 64.0 - write it as 64, without the decimal point "
      "(transformers refuses 64.0 there too)"]),
    ("pad-past-vocab", lambda d: edit_config(d, pad_token_id=30522), ConfigError,  # loaded; transformers refuses it
     ["{d}/config.json: pad_token_id 30522 is not a token of the vocabulary (vocab_size 30522: ids 0 .. 30521) - "
      "restore config.json from the checkpoint"]),
    ("heads-do-not-divide", lambda d: edit_config(d, num_attention_heads=5), ConfigError,
     ["hidden_size 64 is not a multiple of num_attention_heads 5"]),
]


def _checkpoint_for(case_id, d):
    if case_id in ("missing-shard", "missing-shard-and-index", "bad-index"):
        return small(d, sharded=3)
    if case_id == "bad-tokenizer-json":
        return small(d, tokenizer="both")
    return small(d)


@pytest.mark.parametrize("case_id,breaks,err_type,parts", CASES, ids=[c[0] for c in CASES])
def test_broken_checkpoint_errors_are_one_clear_line(tmp_path, capsys, case_id, breaks, err_type, parts):
    d = _checkpoint_for(case_id, tmp_path / "m")
    breaks(d)
    with pytest.raises(err_type) as e:
        Encoder(d)
    msg = e.value.message
    assert "\n" not in msg and " - " in msg, msg  # one line: what - how to fix
    assert e.value.what and e.value.fix
    for p in parts:
        assert p.format(d=d.resolve()) in msg, f"{p!r} not in {msg!r}"
    assert main(["info", str(d)]) == 1
    out, err = capsys.readouterr()
    info_flags = FLAGS | COMMAND_FLAGS["info"]  # info takes the model as its argument, not --model
    assert out == "" and err == f"Error: {e.value.render(info_flags)}\n", err  # the same message, options as flags
    if case_id == "no-config":
        assert "- point the MODEL argument at a Hugging Face model directory" in err


# --------------------------------------------------------------------------- names and dtypes that do load
@pytest.mark.parametrize("key,canonical", [
    ("bert.embeddings.LayerNorm.gamma", "embeddings.LayerNorm.weight"),
    ("bert.embeddings.LayerNorm.beta", "embeddings.LayerNorm.bias"),
    ("encoder.layer.3.output.LayerNorm.gamma", "encoder.layer.3.output.LayerNorm.weight"),
    ("bert.pooler.dense.weight", "pooler.dense.weight"),
    ("cls.predictions.transform.LayerNorm.beta", "cls.predictions.transform.LayerNorm.bias"),
    ("embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
])
def test_canonical_names(key, canonical):
    assert canonical_name(key) == canonical


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_a_weights_file_that_cannot_be_opened_says_so(tmp_path, capsys, monkeypatch, fmt):
    """A weights file this user may not read was "could not be read as safetensors (... Permission denied) - re-download
    or re-save the checkpoint": the file is fine, its permissions are not (root here: open is refused by a patch)."""
    import builtins
    import errno

    d = small(tmp_path / "m")
    if fmt == "bin":
        torch = pytest.importorskip("torch", reason="writes a pytorch_model.bin with torch.save")
        from safetensors.torch import load_file

        torch.save(load_file(str(d / "model.safetensors")), d / "pytorch_model.bin")
        (d / "model.safetensors").unlink()
    f = d / ("model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
    real = builtins.open

    def refusing(path, *a, **k):
        if str(path) == str(f):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(builtins, "open", refusing)
    refused(capsys, d, f"{f}: permission denied - check the permissions of the file and its directory, or choose "
                       "another path")


def test_float16_checkpoint_loads_as_float32(tmp_path):
    from safetensors.numpy import load_file, save_file

    d = small(tmp_path / "m")
    ref = Encoder(d).encode(["a sentence in float16", "another"])
    t = load_file(str(d / "model.safetensors"))
    save_file({k: v.astype(np.float16) for k, v in t.items()}, str(d / "model.safetensors"))
    enc = Encoder(d)
    assert all(a.dtype == np.float32 for a in (enc.weights.word, enc.weights.layers[0].qkv_w, enc.weights.pooler_w))
    X = enc.encode(["a sentence in float16", "another"])
    assert X.dtype == np.float32
    assert row_cosines(X, ref).min() > 0.999


def test_weights_are_fused_and_transposed_from_the_file(tmp_path):
    """The one name table: q/k/v fused as (H, 3H) = [Wq^T | Wk^T | Wv^T], every linear stored (in, out)."""
    from bertfeat.model.config import BertConfig

    d = small(tmp_path / "m", prefix=True, legacy_names=True)
    w = load_weights(d, BertConfig.from_file(d / "config.json"))
    sd = record_tensors(d)  # transformers' names and (out, in) layout, drawn again from the seed, not read from the file
    att = "encoder.layer.1.attention.self."
    np.testing.assert_array_equal(w.layers[1].qkv_w, np.concatenate(
        [sd[att + "query.weight"].T, sd[att + "key.weight"].T, sd[att + "value.weight"].T], axis=1))
    np.testing.assert_array_equal(w.layers[1].up_w, sd["encoder.layer.1.intermediate.dense.weight"].T)
    np.testing.assert_array_equal(w.layers[1].ln2_g, sd["encoder.layer.1.output.LayerNorm.weight"])
    np.testing.assert_array_equal(w.layers[1].ln2_b, sd["encoder.layer.1.output.LayerNorm.bias"])
    np.testing.assert_array_equal(w.emb_ln_b, sd["embeddings.LayerNorm.bias"])
    np.testing.assert_array_equal(w.pooler_w, sd["pooler.dense.weight"].T)
    assert w.n_params == n_parameters(d)


# --------------------------------------------------------------------------- the CLI
def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"bertfeat {__version__}\n"
    r = subprocess.run([sys.executable, "-m", "bertfeat.cli.app", "--version"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout:  # no __main__ hook: use the installed console script
        import shutil

        exe = shutil.which("bertfeat")
        assert exe, "the bertfeat console script is not installed"
        r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == f"bertfeat {__version__}\n"


def test_info_minilm(capsys, minilm_dir):
    assert main(["info", str(minilm_dir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    from safetensors import safe_open

    with safe_open(str(minilm_dir / "model.safetensors"), "np") as st:
        n = sum(int(np.prod(st.get_slice(k).get_shape())) for k in st.keys() if "position_ids" not in k)
    assert d["parameters"] == n == 22713216
    assert d["pooler"] == "yes" and d["mlm_head"] == "no" and d["max_length"] == 256
    assert d["default_pooling"] == "mean (1_Pooling/config.json)" and d["tokenizer"] == "tokenizer.json"
    assert d["config"]["hidden_size"] == 384 and d["config"]["num_hidden_layers"] == 6
    assert d["found_in"] == "local directory" and d["weights_files"] == ["model.safetensors"]
    assert d["kernels"].startswith("numba ") and "fused GELU" in d["kernels"]
    assert main(["info", str(minilm_dir)]) == 0
    table = capsys.readouterr().out
    for word in ("parameters", "22713216", "config.hidden_act", "gelu", "1_Pooling/config.json"):
        assert word in table


def test_info_names_the_numpy_kernels_when_turned_off(capsys, minilm_dir, monkeypatch):
    from bertfeat.ops import kernels

    monkeypatch.setenv("BERTFEAT_KERNELS", "numpy")
    kernels.use(None)
    try:
        assert main(["info", str(minilm_dir), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["kernels"] == "numpy (BERTFEAT_KERNELS=numpy)"
    finally:
        monkeypatch.delenv("BERTFEAT_KERNELS")
        kernels.use(None)


def test_info_random_checkpoint(capsys, tmp_path):
    d = small(tmp_path / "m", pooler=False, sharded=2, vocab="chinese", hidden_act="relu")
    assert main(["info", str(d), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["parameters"] == n_parameters(d)
    assert info["pooler"].startswith("no (") and "no pooler weights" in info["pooler"]
    assert info["weights_files"] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert info["max_length"] == 512 and info["default_pooling"].startswith("mean (default")
    assert info["tokenizer"] == "vocab.txt + tokenizer_config.json"
    assert info["config"]["vocab_size"] == 21128 and info["config"]["hidden_act"] == "relu"


# --------------------------------------------------------------------------- unused tensors (nothing ignored silently)
@pytest.mark.parametrize("extra, shape", [
    ("encoder.layer.0.attention.self.rotary.weight", (8, 8)),  # an architecture we do not implement
    ("bert.embeddings.word_embedding.weight", (16, 64)),  # a misspelt name: its real tensor is there too
    ("pooler.dense.weight_orig", (64, 64)),
])
def test_unknown_tensor_is_refused_with_its_name(tmp_path, capsys, extra, shape):
    d = small(tmp_path / "m")
    rewrite_tensors(d, lambda t: t.update({extra: np.ones(shape, np.float32)}))
    name = extra  # as the file spells it (the bert. prefix too)
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.message.startswith(f"{d / 'model.safetensors'}: 1 tensor(s) that a BERT encoder does not use: '{name}' {shape} - ")
    assert main(["info", str(d)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and f"'{name}'" in err and err.count("\n") == 1


def test_half_a_pooler_is_refused_not_dropped(tmp_path):
    d = small(tmp_path / "m")
    rewrite_tensors(d, lambda t: t.pop("pooler.dense.bias"))
    # (it named the half there as a tensor the encoder does not use, whose fix said to remove it)
    with pytest.raises(WeightsError, match=r"tensor 'pooler.dense.bias' is missing \(expected shape \(64,\)\)"):
        Encoder(d)


def test_allowed_and_other_heads_are_listed_not_refused(tmp_path):
    """position_ids (a saved buffer) is allowed; other tasks' heads load and are listed in weights.ignored."""
    d = small(tmp_path / "m")
    heads = {"embeddings.position_ids": np.arange(512, dtype=np.int64)[None],
             "cls.seq_relationship.weight": np.ones((2, 64), np.float32), "cls.seq_relationship.bias": np.zeros(2, np.float32),
             "classifier.weight": np.ones((3, 64), np.float32)}
    ref = Encoder(d).encode(["the same features with or without the heads"])
    rewrite_tensors(d, lambda t: t.update(heads))
    enc = Encoder(d)
    assert enc.weights.ignored == ["classifier.weight", "cls.seq_relationship.bias", "cls.seq_relationship.weight"]
    np.testing.assert_array_equal(enc.encode(["the same features with or without the heads"]), ref)


def test_real_and_test_checkpoints_use_every_tensor(minilm_dir, tmp_path):
    from bertfeat.model.config import BertConfig

    assert load_weights(minilm_dir, BertConfig.from_file(minilm_dir / "config.json")).ignored == []
    d = make_checkpoint(tmp_path / "mlm", mlm_head=True, store_decoder=True, hidden=32, heads=2, layers=1)
    assert load_weights(d, BertConfig.from_file(d / "config.json")).ignored == []


def test_bfloat16_checkpoint_loads_widened_exactly(tmp_path, capsys):
    """A checkpoint stored in bfloat16 (torch_dtype=bfloat16 saves) loads: each value widened exactly to float32, so
    the features equal those of the same weights stored as float32; under precision="bf16" the layers' linear
    weights are the same bf16 bits again (no double rounding). It used to be refused."""
    import shutil

    d = small(tmp_path / "m")
    ref = tmp_path / "ref"
    shutil.copytree(d, ref)
    widen = lambda v: ((np.ascontiguousarray(v, np.float32).view(np.uint32) >> 16) << 16).view(np.float32)  # noqa: E731
    rewrite_tensors(ref, lambda t: t.update({k: widen(v) for k, v in t.items()}))  # float32 holding bf16 values
    write_bf16(d / "model.safetensors")  # the same values, stored as BF16
    header = json.loads((d / "model.safetensors").read_bytes()[8:8 + int.from_bytes((d / "model.safetensors").read_bytes()[:8], "little")])
    assert {h["dtype"] for k, h in header.items() if k != "__metadata__"} == {"BF16"}
    texts = ["a sentence stored in bfloat16", "another one, a little longer than the first"]
    enc = Encoder(d)
    assert enc.weights.word.dtype == np.float32
    np.testing.assert_array_equal(enc.encode(texts), Encoder(ref).encode(texts))
    from bertfeat.model.config import BertConfig

    c = BertConfig.from_file(d / "config.json")
    w16, r16 = load_weights(d, c, "bf16"), load_weights(ref, c, "bf16")
    for a, b in zip(w16.layers, r16.layers):
        np.testing.assert_array_equal(a.up_w, b.up_w)
        assert a.up_w.dtype == np.uint16


# --------------------------------------------------------------------------- safetensors headers that lie (issue 44)
# A header is checked as safetensors' own reader checks it (Metadata.validate): each name once, a dtype and shape
# whose size is the bytes between the data_offsets, and the tensors tiling the data exactly: none past its end, none
# sharing a byte with another, no byte that belongs to no tensor. Each lie used to load (two tensors on the same bytes
# gave features off by up to 0.31); safetensors refuses every one of these files too.
LIE_FIX = ("the file is damaged or was not written by a safetensors writer (safetensors' own reader refuses it too): "
           "re-download or re-save the checkpoint")
Q, K = "encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.key.weight"


def relayout(f, edit):
    """Rewrite the safetensors file ``f``: ``edit(entries, data) -> (entries, data)``, entries its (name, entry)
    pairs in the header's order (an entry given as a str is written as that JSON text, so that a name or a field
    can be given twice) -> the new entries."""
    raw = f.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    entries, data = edit(list(header.items()), raw[8 + n:])
    text = ("{" + ",".join(f"{json.dumps(k)}:{v if isinstance(v, str) else json.dumps(v)}" for k, v in entries)
            + "}").encode()
    f.write_bytes(len(text).to_bytes(8, "little") + text + data)
    return entries


def _moved(entries, at: int, by: int):
    """Every entry whose bytes start at or after ``at`` moved by ``by`` bytes."""
    return [(k, dict(v, data_offsets=[o + by if v["data_offsets"][0] >= at else o for o in v["data_offsets"]]))
            for k, v in entries]


def _offsets(entries, name):
    return dict(entries)[name]["data_offsets"]


def _share(entries, data):
    """K reads Q's bytes (its own cut out): two names, one set of weights."""
    s, e = _offsets(entries, K)
    entries = _moved(entries, e, s - e)
    return [(k, dict(v, data_offsets=_offsets(entries, Q)) if k == K else v) for k, v in entries], data[:s] + data[e:]


def _shared(entries) -> str:
    first, second = sorted([Q, K], key=[k for k, _ in entries].index)  # equal offsets: in the header's order
    s, e = _offsets(entries, Q)
    return f"tensors '{first}' and '{second}' overlap: their data_offsets share bytes {s:,}..{e:,} of the data"


def _twice(entries, data):
    """pooler.dense.bias given a second time, over bytes of its own appended (json.loads keeps the last)."""
    e = dict(entries)["pooler.dense.bias"]
    extra = np.full(e["shape"], 0.5, "<f4").tobytes()
    return entries + [("pooler.dense.bias", dict(e, data_offsets=[len(data), len(data) + len(extra)]))], data + extra


def _gap(entries, data):
    s = _offsets(entries, K)[0]
    return _moved(entries, s, 16), data[:s] + b"\x07" * 16 + data[s:]


def _entry(name, **change):
    return lambda entries, data: ([(k, dict(v, **change) if k == name else v) for k, v in entries], data)


def _field_twice(entries, data):
    """pooler.dense.bias's entry with "dtype" given twice."""
    return [(k, '{"dtype": "BF16", ' + json.dumps(v)[1:] if k == "pooler.dense.bias" else v) for k, v in entries], data


def _ending_at(entries, at: int) -> str:
    return next(k for k, v in entries if v["data_offsets"][1] == at)


def _last(entries):
    return max(entries, key=lambda kv: kv[1]["data_offsets"])[0]


def _past_end(entries) -> str:
    s, e = _offsets(entries, _last(entries))
    return f"tensor '{_last(entries)}' (bytes {s:,}..{e:,} of the data) lies past the end of the file's {e - 8:,} bytes " \
           "of data: the file is truncated"


HEADER_LIES = [
    ("shared-bytes", _share, _shared),
    ("name-twice", _twice, lambda e: "its header names tensor 'pooler.dense.bias' twice"),
    ("gap", _gap, lambda e: f"bytes {_offsets(e, K)[0] - 16:,}..{_offsets(e, K)[0]:,} of the data, between tensors "
                            f"'{_ending_at(e, _offsets(e, K)[0] - 16)}' and '{K}', belong to no tensor"),
    ("trailing-bytes", lambda e, d: (e, d + b"\0" * 8),
     lambda e: f"the last 8 bytes of the data, after tensor '{_last(e)}', belong to no tensor"),
    ("truncated", lambda e, d: (e, d[:-8]), _past_end),
    ("size-not-shape", _entry("pooler.dense.bias", shape=[63]),
     lambda e: f"tensor 'pooler.dense.bias' spans 256 bytes (data_offsets {_offsets(e, 'pooler.dense.bias')}), but its "
               "dtype F32 and shape [63] need 252"),
    ("negative-shape", _entry("pooler.dense.bias", shape=[-64]),
     lambda e: "tensor 'pooler.dense.bias' has shape [-64], not a list of whole numbers"),
    ("offsets-not-a-pair", _entry("pooler.dense.bias", data_offsets=[0, 256, 256]),
     lambda e: "tensor 'pooler.dense.bias' has data_offsets [0, 256, 256], not [start, end] with 0 <= start <= end"),
    ("field-twice", _field_twice, lambda e: "its header gives 'dtype' twice in one tensor's entry"),
    ("metadata-not-strings", lambda e, d: ([("__metadata__", {"format": 1})] + e, d),
     lambda e: "its __metadata__ is not an object of strings"),
]


@pytest.mark.parametrize("case_id,edit,problem", HEADER_LIES, ids=[c[0] for c in HEADER_LIES])
def test_a_safetensors_header_that_lies_is_refused_naming_file_and_tensor(tmp_path, capsys, case_id, edit, problem):
    from safetensors.numpy import load_file

    d = small(tmp_path / "m")
    f = d / "model.safetensors"
    entries = relayout(f, edit)
    with pytest.raises(Exception):
        load_file(str(f))  # the reference reader refuses it too
    refused(capsys, d, f"{f.resolve()} is not a valid safetensors file: {problem(entries)} - {LIE_FIX}")


@pytest.mark.parametrize("cut,why", [
    (lambda raw: (1 << 40).to_bytes(8, "little") + raw[8:], "its header length is 1,099,511,627,776 bytes (safetensors "
                                                            "reads 1 to 100,000,000)"),
    (lambda raw: raw[:8 + 100], "its header length is {n:,} bytes, but the file has 100 after it: the file is truncated"),
    (lambda raw: raw[:5], "it is 5 bytes, shorter than the 8-byte header length"),
], ids=["absurd", "past-the-end", "no-length"])
def test_a_header_length_that_lies_is_refused(tmp_path, cut, why):
    d = small(tmp_path / "m")
    f = d / "model.safetensors"
    raw = f.read_bytes()
    f.write_bytes(cut(raw))
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.message == (f"{f.resolve()} could not be read as safetensors ({why.format(n=int.from_bytes(raw[:8], 'little'))})"
                               " - re-download or re-save the checkpoint")


# --------------------------------------------------------------------------- shards that do not match their index
SHARD = "model-{:05d}-of-00003.safetensors".format
SHARDS_FIX = ("the shards and the index come from different saves or were edited: download the checkpoint again "
              "(every shard and model.safetensors.index.json)")


def _index(d):
    return json.loads((d / "model.safetensors.index.json").read_text())


def _write_index(d, index=None, text=None):
    (d / "model.safetensors.index.json").write_text(text if text is not None else json.dumps(index))


def _in_shard(d, k):
    return sorted(n for n, s in _index(d)["weight_map"].items() if s == SHARD(k))


def _remap(d):
    """The index maps a tensor of shard 1 to shard 2 (the files untouched)."""
    index = _index(d)
    index["weight_map"][_in_shard(d, 1)[0]] = SHARD(2)
    _write_index(d, index)
    return f"model.safetensors.index.json maps tensor '{_in_shard(d, 2)[0]}' to {SHARD(2)}, but it is in {SHARD(1)}"


def _copied(d):
    """Shard 2 holds a tensor of shard 1 as well (a shard of another save: the same name, maybe other values)."""
    from safetensors.numpy import load_file, save_file

    name = _in_shard(d, 1)[0]
    two = load_file(str(d / SHARD(2))) | {name: load_file(str(d / SHARD(1)))[name] * 2}
    save_file(two, str(d / SHARD(2)), metadata={"format": "pt"})
    return f"tensor '{name}' is in 2 shards ({SHARD(1)}, {SHARD(2)})"


def _unlisted(d):
    index = _index(d)
    name = _in_shard(d, 3)[-1]
    del index["weight_map"][name]
    _write_index(d, index)
    return f"shard {SHARD(3)} holds tensor '{name}', which model.safetensors.index.json does not list"


def _phantom(d):
    index = _index(d)
    index["weight_map"]["encoder.layer.9.output.dense.weight"] = SHARD(3)
    _write_index(d, index)
    return f"model.safetensors.index.json maps tensor 'encoder.layer.9.output.dense.weight' to {SHARD(3)}, which does not hold it"


@pytest.mark.parametrize("lie", [_remap, _copied, _unlisted, _phantom], ids=["mapped-elsewhere", "in-two-shards",
                                                                            "not-listed", "listed-not-held"])
def test_shards_that_do_not_match_their_index_are_refused(tmp_path, capsys, lie):
    d = small(tmp_path / "m", sharded=3)
    Encoder(d)  # as written: loads
    problem = lie(d)
    refused(capsys, d, f"{d.resolve()}: the shards do not match their index: {problem} - {SHARDS_FIX}")


@pytest.mark.parametrize("edit,what", [
    (lambda t: t.replace('"weight_map": {', '"weight_map": {"pooler.dense.bias": "model-00001-of-00003.safetensors", ', 1),
     "{i} names 'pooler.dense.bias' twice (a tensor listed twice in weight_map?)"),
    (lambda t: t.replace('model-00002-of-00003.safetensors"', '../m2/model-00002-of-00003.safetensors"', 1),
     "{i}: weight_map maps tensor '{n}' to '../m2/model-00002-of-00003.safetensors', which is not a file name in {d}"),
    (lambda t: json.dumps({"weight_map": {}}), "{i}: weight_map lists no tensor"),
], ids=["listed-twice", "outside-the-folder", "empty"])
def test_an_index_that_lies_is_refused(tmp_path, edit, what):
    import shutil

    d = small(tmp_path / "m", sharded=3)
    shutil.copytree(d, tmp_path / "m2")  # a shard "outside the folder" that exists
    first = next(n for n, s in _index(d)["weight_map"].items() if s == SHARD(2))  # in the file's order
    _write_index(d, text=edit((d / "model.safetensors.index.json").read_text().replace("\n", "").replace("  ", "")))
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    i = d.resolve() / "model.safetensors.index.json"
    assert e.value.message == what.format(i=i, d=d.resolve(), n=first) + " - restore it from the checkpoint"


@pytest.mark.parametrize("index_name,entry", [
    ("pytorch_model.bin.index.json", None),  # its shards all safetensors files
    ("model.safetensors.index.json", "pytorch_model-00002-of-00003.bin"),  # one shard torch.save's
], ids=["bin-index-of-safetensors", "safetensors-index-of-a-bin"])
def test_an_index_listing_shards_of_the_other_kind_loads_as_transformers_loads_it(tmp_path, capsys, index_name, entry):
    """transformers (5.24: checked) reads each shard by its own extension, whatever the index's name: such a checkpoint
    loads there, and was refused here ("rename the index"). It loads, its shards checked against the index that
    lists them (a tensor mapped to another shard is refused naming that index), and that index is among the model's
    files (the cache's and the resume manifest's fingerprint)."""
    from bertfeat.model.hub import model_files

    d = small(tmp_path / "m", sharded=3)
    want = Encoder(d).encode(["a few words"], pooling="mean")
    index = _index(d)
    if entry is not None:  # shard 2 saved by torch.save instead, under its name
        torch = pytest.importorskip("torch", reason="writes a shard with torch.save")
        from safetensors.torch import load_file

        torch.save(load_file(str(d / SHARD(2))), d / entry)
        (d / SHARD(2)).unlink()
        index["weight_map"] = {n: entry if s == SHARD(2) else s for n, s in index["weight_map"].items()}
    (d / "model.safetensors.index.json").unlink()
    (d / index_name).write_text(json.dumps(index))
    assert np.array_equal(Encoder(d).encode(["a few words"], pooling="mean"), want)
    assert index_name in model_files(d)
    moved = next(n for n, s in index["weight_map"].items() if s == SHARD(1))
    index["weight_map"][moved] = SHARD(3)
    (d / index_name).write_text(json.dumps(index))
    refused(capsys, d, f"{d.resolve()}: the shards do not match their index: {index_name} maps tensor '{moved}' to "
                       f"{SHARD(3)}, but it is in {SHARD(1)} - the shards and the index come from different saves or "
                       f"were edited: download the checkpoint again (every shard and {index_name})")


def test_an_index_entry_of_neither_kind_is_refused(tmp_path, capsys):
    """A shard that is neither .safetensors nor .bin was read as safetensors: refused naming the index and the entry."""
    d = small(tmp_path / "m", sharded=3)
    index = _index(d)
    index["weight_map"] = {n: "model-00002-of-00003.pt" if s == SHARD(2) else s for n, s in index["weight_map"].items()}
    (d / SHARD(2)).rename(d / "model-00002-of-00003.pt")
    _write_index(d, index)
    odd = next(n for n, s in index["weight_map"].items() if s.endswith(".pt"))
    i = d.resolve() / "model.safetensors.index.json"
    refused(capsys, d, f"{i}: weight_map maps tensor '{odd}' to 'model-00002-of-00003.pt', which is neither a "
                       ".safetensors nor a .bin file - bertfeat reads safetensors shards (.safetensors) and torch.save's "
                       "(.bin): save the checkpoint again with save_pretrained")


def test_shards_without_their_index_load_whole_and_name_the_missing_ones(tmp_path):
    """Every shard there, the index lost: the shards load (as before). One missing was a 'missing tensor' error whose
    fix named config.json; an absurd shard count is named without listing every shard."""
    d = small(tmp_path / "m", sharded=3)
    want = Encoder(d).encode(["a few words"], pooling="mean")
    (d / "model.safetensors.index.json").unlink()
    np.testing.assert_array_equal(Encoder(d).encode(["a few words"], pooling="mean"), want)
    (d / SHARD(3)).rename(d / "model-00003-of-99999999999.safetensors")
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.message.startswith(
        f"{d.resolve()}: 1 of 3 shards are missing (model-00003-of-00003.safetensors), and model.safetensors.index.json")
    (d / SHARD(1)).unlink()
    (d / SHARD(2)).unlink()
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.what == (
        f"{d.resolve()}: 99,999,999,998 of 99,999,999,999 shards are missing (model-00001-of-99999999999.safetensors, "
        "model-00002-of-99999999999.safetensors, model-00004-of-99999999999.safetensors and 99,999,999,995 more), and "
        "model.safetensors.index.json, which lists them, is missing too")


@pytest.mark.parametrize("stored,canonical", [
    ("bert.encoder.layer.1.output.LayerNorm.gamma", "encoder.layer.1.output.LayerNorm.weight"),
    ("lm_head.bias", "cls.predictions.bias"),
])
def test_errors_name_a_tensor_as_the_file_spells_it(tmp_path, stored, canonical):
    """A misshapen tensor was named by bertfeat's own name for it (gamma as weight, RoBERTa's lm_head.bias as
    cls.predictions.bias), which is not in the file."""
    d = small(tmp_path / "m", prefix=True, legacy_names=True, mlm_head=True)

    def misshape(t):
        if stored not in t:  # the head's bias under RoBERTa's name
            t[stored] = t.pop(canonical)
        t[stored] = np.zeros(t[stored].shape[:-1] + (t[stored].shape[-1] - 1,), np.float32)

    rewrite_tensors(d, misshape)
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.what.startswith(f"{d.resolve() / 'model.safetensors'}: tensor '{stored}' has shape "), e.value.what
    rewrite_tensors(d, lambda t: t.update({stored: np.zeros(t[stored].shape[:-1] + (t[stored].shape[-1] + 1,), np.int32)}))
    with pytest.raises(WeightsError, match=f"tensor '{stored}' has dtype int32, expected floating point"):
        Encoder(d)


@pytest.mark.parametrize("fmt,saver", [("tf", "TensorFlow"), ("flax", "Flax")])
def test_a_tensorflow_or_flax_safetensors_file_is_named_as_such(tmp_path, fmt, saver):
    """transformers 4's TF / Flax save_pretrained writes model.safetensors with format 'tf' / 'flax' and its own names
    (bert/embeddings/word_embeddings/weight:0, kernels (in, out)): the error was a missing tensor whose fix named
    config.json. A file with PyTorch's names under that format still loads (transformers 5 loads it too)."""
    from safetensors.numpy import load_file, save_file

    d = small(tmp_path / "m")
    want = Encoder(d).encode(["a few words"], pooling="mean")
    t = load_file(str(d / "model.safetensors"))
    save_file(t, str(d / "model.safetensors"), metadata={"format": fmt})
    np.testing.assert_array_equal(Encoder(d).encode(["a few words"], pooling="mean"), want)
    save_file({k: v for k, v in t.items() if k != "embeddings.LayerNorm.bias"}, str(d / "model.safetensors"),
              metadata={"format": fmt})  # PyTorch's names, one missing: that one is named as for any file
    with pytest.raises(WeightsError, match="tensor 'embeddings.LayerNorm.bias' is missing .expected shape"):
        Encoder(d)
    names = ({"bert/" + k.replace(".", "/") + ":0": v for k, v in t.items()} if fmt == "tf" else  # TF's, Flax's
             {k.replace("word_embeddings.weight", "word_embeddings.embedding"): v for k, v in t.items()})
    save_file(names, str(d / "model.safetensors"), metadata={"format": fmt})
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.message == (
        f"{d.resolve() / 'model.safetensors'}: tensor 'embeddings.word_embeddings.weight' is missing: model.safetensors "
        f"was saved by {saver} (its metadata says format '{fmt}'), whose tensor names and layouts are not PyTorch's - "
        f"convert it to a PyTorch checkpoint where transformers 4 is installed (which reads such a file as {saver}'s; "
        "transformers 5 does not): AutoModel.from_pretrained(DIR).save_pretrained(NEW_DIR)")
