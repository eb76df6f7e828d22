"""The encoder's weights from torch.save's ``pytorch_model.bin`` (and its shards with ``pytorch_model.bin.index.json``).

transformers before 4.35 saved a model so by default (``save_pretrained(safe_serialization=False)``: ``torch.save`` of
its state dict, tied weights as one shared storage; shards named ``pytorch_model-0000k-of-0000n.bin``). transformers 5
writes safetensors whatever that flag says, so the .bin here is written as those versions wrote it: ``torch.save`` of
the model's own ``state_dict()`` (tied tensors included), sharded with huggingface_hub's split (the one transformers
4.4x used). Each family's random checkpoint (BERT, RoBERTa, MPNet, ModernBERT) gives bit-for-bit the vectors of its
safetensors copy at fp32, and transformers' AutoModel on the .bin folder agrees within the reference tests' tolerance.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertfeat.errors import WeightsError
from bertfeat.model.encoder import Encoder
from bertfeat.model.hub import model_files
from ckpt import make_checkpoint, single_blas_thread
from conftest import need_live
from extract_util import run

TOL = 1e-5  # test_families' / test_mpnet's / test_modernbert's largest difference of a hidden state from transformers
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Sentence embeddings are compared with the cosine.",
         "Numbers like 42 and 3.14 appear in text too!", "short"]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


@pytest.fixture(scope="module")
def torch():
    return need_live("torch")


def as_bin(src: Path, dst: Path, *, head=None, dtype=None, max_shard_size=None, position_ids=False,
           legacy: bool = False) -> Path:
    """A copy of checkpoint folder ``src`` whose weights are torch.save's, as transformers < 4.35 saved them: the
    model's state_dict() (``head``: the AutoModelFor... class; tied tensors share a storage), in ``dtype``, sharded at
    ``max_shard_size`` with pytorch_model.bin.index.json; ``position_ids``: the int64 buffer transformers < 4.31 saved
    (True), or of that torch dtype;
    ``legacy``: in torch.save's legacy format, as PyTorch < 1.6 wrote the hub's classic models' files."""
    import torch
    from transformers import AutoModel

    shutil.copytree(src, dst)
    model = (head or AutoModel).from_pretrained(str(src))
    sd = (model if dtype is None else model.to(dtype)).state_dict()  # the model cast: tied tensors stay tied
    if position_ids:
        sd = {**sd, "embeddings.position_ids": torch.arange(512, dtype=torch.int64 if position_ids is True
                                                            else position_ids)[None]}
    for f in [*dst.glob("*.safetensors"), dst / "model.safetensors.index.json"]:
        f.unlink(missing_ok=True)
    if max_shard_size is None:
        torch.save(sd, dst / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
        return dst
    from huggingface_hub import split_torch_state_dict_into_shards

    split = split_torch_state_dict_into_shards(sd, filename_pattern="pytorch_model{suffix}.bin",
                                               max_shard_size=max_shard_size)
    assert split.is_sharded
    for fname, names in split.filename_to_tensors.items():
        torch.save({n: sd[n] for n in names}, dst / fname)
    (dst / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": split.metadata, "weight_map": split.tensor_to_filename}, indent=2))
    return dst


def family_dir(family: str, d: Path) -> Path:
    """A random checkpoint of ``family`` in safetensors, as the family's own tests build it."""
    if family == "bert":
        return make_checkpoint(d, tokenizer="both")
    if family == "roberta":
        from st_ckpt import roberta_checkpoint

        return roberta_checkpoint(d, model_type="roberta")
    if family == "mpnet":
        from test_mpnet import mpnet_checkpoint

        return mpnet_checkpoint(d)
    from test_modernbert import modernbert_checkpoint

    return modernbert_checkpoint(d, TEXTS * 20)


def _has(precision: str) -> bool:
    """Whether this machine runs ``precision`` (bertfeat refuses it where it is not accelerated)."""
    from bertfeat.errors import BertfeatError
    from bertfeat.ops import gemm

    try:
        gemm.resolve(precision)
    except BertfeatError:
        return False
    return True


def transformers_mean(d: Path, texts: list[str]) -> np.ndarray:
    """Mean pooling of transformers' AutoModel (eager attention) on folder ``d``, tokenized by AutoTokenizer."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(d), attn_implementation="eager").eval().float()
    tok = AutoTokenizer.from_pretrained(str(d))
    out = []
    for t in texts:
        enc = tok(t, return_tensors="pt")
        with torch.no_grad():
            h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state[0]
        out.append(h.double().mean(0).numpy())
    return np.stack(out)


@pytest.mark.parametrize("family", ["bert", "roberta", "mpnet", "modernbert"])
def test_a_bin_gives_its_safetensors_copys_vectors_and_transformers(torch, family, tmp_path):
    st = family_dir(family, tmp_path / "st")
    b = as_bin(st, tmp_path / "bin")
    assert sorted(p.name for p in b.glob("*.bin")) == ["pytorch_model.bin"] and not list(b.glob("*.safetensors"))
    want = Encoder(st).encode(TEXTS, pooling="mean")
    enc = Encoder(b)
    assert enc.weights.files == [b / "pytorch_model.bin"]
    got = enc.encode(TEXTS, pooling="mean")
    assert np.array_equal(got, want)
    assert np.abs(got - transformers_mean(b, TEXTS)).max() <= TOL


def test_shards_with_their_index_and_the_files_listed(torch, tmp_path, capsys):
    st = make_checkpoint(tmp_path / "st", tokenizer="both")
    b = as_bin(st, tmp_path / "bin", max_shard_size="300KB")
    index = json.loads((b / "pytorch_model.bin.index.json").read_text())
    shards = list(dict.fromkeys(index["weight_map"].values()))
    assert len(shards) > 2 and all(s.startswith("pytorch_model-0000") for s in shards)
    enc = Encoder(b)
    assert [f.name for f in enc.weights.files] == shards
    assert np.array_equal(enc.encode(TEXTS), Encoder(st).encode(TEXTS))
    assert model_files(b)[:len(shards) + 1] == [*shards, "pytorch_model.bin.index.json"]
    rc, out, err = run(capsys, "info", b, "--files")
    assert rc == 0 and err == ""
    assert out.splitlines()[:len(shards) + 1] == [str(b / f) for f in [*shards, "pytorch_model.bin.index.json"]]
    # a shard of another save is refused as safetensors' are
    (b / shards[0]).unlink()
    with pytest.raises(WeightsError, match=rf"shard\(s\) {shards[0]} listed in pytorch_model.bin.index.json are missing"
                                           r" - copy every pytorch_model-\*.bin shard"):
        Encoder(b)


@pytest.mark.parametrize("stray, shard", [("model-00001-of-00001.safetensors", None), ("adapter_model.safetensors", "300KB")])
def test_a_stray_safetensors_beside_the_bin_is_not_read_in_its_place(torch, stray, shard, tmp_path):
    """transformers reads pytorch_model.bin (or the shards of its index) when the folder has neither
    model.safetensors nor model.safetensors.index.json, whatever other .safetensors lie beside (here another
    model's weights, as a shard without its index or under an adapter's name): they were read in its place."""
    st = make_checkpoint(tmp_path / "st", tokenizer="both")
    b = as_bin(st, tmp_path / "bin", max_shard_size=shard)
    files = [f.name for f in Encoder(b).weights.files]
    want = Encoder(b).encode(TEXTS)
    shutil.copy(make_checkpoint(tmp_path / "other", tokenizer="both", seed=1) / "model.safetensors", b / stray)
    enc = Encoder(b)
    assert [f.name for f in enc.weights.files] == files and files[0].startswith("pytorch_model")
    got = enc.encode(TEXTS)
    assert np.array_equal(got, want)
    assert np.abs(got - transformers_mean(b, TEXTS)).max() <= TOL
    assert model_files(b)[0] == files[0] and stray not in model_files(b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_half_and_bfloat16_bins_read_as_their_safetensors(torch, dtype, tmp_path):
    """A .bin in float16 / bfloat16 gives the vectors of the same tensors saved as safetensors (fp32 exactly; bf16
    precision keeps a bfloat16 file's bits as the safetensors path does); the MLM head's tied decoder (one storage
    with the word embeddings in the file) and transformers < 4.31's int64 position_ids buffer are read."""
    from safetensors.torch import save_file
    from transformers import AutoModelForMaskedLM

    st = make_checkpoint(tmp_path / "st", tokenizer="both", mlm_head=True, pooler=False)
    b = as_bin(st, tmp_path / "bin", head=AutoModelForMaskedLM, dtype=getattr(torch, dtype), position_ids=True)
    sd = torch.load(b / "pytorch_model.bin", weights_only=True)
    word, decoder = sd["bert.embeddings.word_embeddings.weight"], sd["cls.predictions.decoder.weight"]
    assert word.untyped_storage().data_ptr() == decoder.untyped_storage().data_ptr()  # tied: one storage
    same = tmp_path / "same"
    shutil.copytree(st, same)
    save_file({k: v.contiguous() for k, v in sd.items() if not k.startswith("cls.predictions.decoder.")},
              str(same / "model.safetensors"), metadata={"format": "pt"})
    for precision in ("fp32", "bf16") if _has("bf16") else ("fp32",):
        a, c = Encoder(same, precision=precision), Encoder(b, precision=precision)
        assert np.array_equal(a.encode(TEXTS), c.encode(TEXTS)), precision
        assert "embeddings.position_ids" not in c.weights.ignored and c.weights.mlm is not None
        assert np.array_equal(c.weights.mlm["decoder_w"], c.weights.word)


def test_int32_position_ids_in_a_bin_load_as_transformers_loads_them(torch, tmp_path):
    """A converted checkpoint's position_ids buffer stored as int32 (torch.IntStorage): transformers loads the file,
    and so does bertfeat, with the vectors of the same weights without the buffer (before: refused as a dtype it
    does not read)."""
    from transformers import AutoModel

    st = make_checkpoint(tmp_path / "st", tokenizer="both")
    b = as_bin(st, tmp_path / "bin", position_ids=torch.int32)
    assert torch.load(b / "pytorch_model.bin", weights_only=True)["embeddings.position_ids"].dtype == torch.int32
    AutoModel.from_pretrained(str(b))  # the reference loads it
    assert np.array_equal(Encoder(st).encode(TEXTS), Encoder(b).encode(TEXTS))


def test_a_sentence_transformers_folder_whose_encoder_is_a_bin(torch, tmp_path, capsys):
    from st_ckpt import st_folder

    st = st_folder(tmp_path / "st", pooling="mean", dense=[(32, "tanh")], normalize=True)
    b = as_bin(st, tmp_path / "bin")  # the encoder's model.safetensors only: 2_Dense keeps its own
    assert (b / "2_Dense" / "model.safetensors").is_file()
    assert np.array_equal(Encoder(b).encode(TEXTS), Encoder(st).encode(TEXTS))
    rc, out, _ = run(capsys, "info", b, "--files")
    assert rc == 0 and out.splitlines()[0] == str(b / "pytorch_model.bin")


def test_the_cache_fingerprint_follows_the_bin_and_a_safetensors_folder_keeps_its_own(torch, tmp_path):
    from bertfeat.cache.store import cache_fingerprint

    st = make_checkpoint(tmp_path / "st", tokenizer="both")
    fp_st = cache_fingerprint(Encoder(st), Encoder(st).spec())[0]
    files_st = model_files(st)
    b = as_bin(st, tmp_path / "bin")
    enc = Encoder(b)
    fp = cache_fingerprint(enc, enc.spec())[0]
    sd = torch.load(b / "pytorch_model.bin", weights_only=True)
    sd["pooler.dense.bias"] += 1
    torch.save(sd, b / "pytorch_model.bin")
    enc2 = Encoder(b)
    assert cache_fingerprint(enc2, enc2.spec())[0] != fp
    # a pytorch_model.bin beside model.safetensors is not read: the file list and the key stay the safetensors'
    shutil.copy(b / "pytorch_model.bin", st / "pytorch_model.bin")
    assert model_files(st) == files_st and files_st[0] == "model.safetensors"
    assert cache_fingerprint(Encoder(st), Encoder(st).spec())[0] == fp_st


def test_the_default_models_files_are_unchanged(minilm_dir):
    assert model_files(Path(minilm_dir)) == [
        "model.safetensors", "config.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json",
        "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json", "1_Pooling/config.json"]


class _System:
    """Pickles as os.system(command): what a hostile checkpoint runs under torch.load(weights_only=False)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        import os

        return os.system, (self.command,)


def test_a_hostile_bin_is_refused_by_extract_with_one_line_and_nothing_run(tmp_path, capsys):
    import zipfile

    d = make_checkpoint(tmp_path / "m", tokenizer="both")
    (d / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    with zipfile.ZipFile(d / "pytorch_model.bin", "w", zipfile.ZIP_STORED) as z:
        z.writestr("pytorch_model/data.pkl", pickle.dumps({"w": _System(f"touch {marker}")}, protocol=2))
        z.writestr("pytorch_model/version", "3\n")
    src = tmp_path / "in.csv"
    src.write_text("text\nhello\n")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "out.parquet", "--model", d)
    assert rc == 1 and out == "" and not marker.exists() and not (tmp_path / "out.parquet").exists()
    assert err.count("\n") == 1 and err.startswith(f"Error: {d / 'pytorch_model.bin'} names the global posix.system in "
                                                   "its pickle, which a plain state dict does not need: bertfeat "
                                                   "refused it without running it")
    assert err.rstrip().endswith("re-save the model where transformers is installed: AutoModel.from_pretrained(dir)."
                                 "save_pretrained(dir) writes model.safetensors (a sentence-transformers model: "
                                 "SentenceTransformer(dir).save(dir))")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_legacy_format_bin_gives_its_safetensors_copys_vectors(torch, dtype, tmp_path):
    """pytorch_model.bin in torch.save's legacy format (PyTorch < 1.6: bert-base-uncased's, roberta-base's ... as the
    hub served them) was refused: read now, its vectors bit-equal to its safetensors copy's; the tied MLM decoder and
    the int64 position_ids buffer read as in the zip format."""
    from safetensors.torch import save_file
    from transformers import AutoModelForMaskedLM

    st = make_checkpoint(tmp_path / "st", tokenizer="both", mlm_head=True, pooler=False)
    b = as_bin(st, tmp_path / "bin", head=AutoModelForMaskedLM, dtype=getattr(torch, dtype), position_ids=True,
               legacy=True)
    assert not (b / "pytorch_model.bin").read_bytes().startswith(b"PK")
    sd = torch.load(b / "pytorch_model.bin", weights_only=True)
    same = tmp_path / "same"
    shutil.copytree(st, same)
    save_file({k: v.contiguous() for k, v in sd.items() if not k.startswith("cls.predictions.decoder.")},
              str(same / "model.safetensors"), metadata={"format": "pt"})
    enc = Encoder(b)
    assert enc.weights.files == [b / "pytorch_model.bin"]
    assert np.array_equal(enc.encode(TEXTS), Encoder(same).encode(TEXTS))
    assert np.array_equal(enc.weights.mlm["decoder_w"], enc.weights.word)


def test_a_hostile_legacy_bin_is_refused_by_extract_and_nothing_run(tmp_path, capsys):
    """The legacy format's pickles (here its sys_info's, before the state dict's) are read as the zip's data.pkl is:
    a global not a state dict's is refused by name, never run."""
    d = make_checkpoint(tmp_path / "m", tokenizer="both")
    (d / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    (d / "pytorch_model.bin").write_bytes(
        pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
        + pickle.dumps(_System(f"touch {marker}"), protocol=2) + pickle.dumps({}, protocol=2))
    src = tmp_path / "in.csv"
    src.write_text("text\nhello\n")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "out.parquet", "--model", d)
    assert rc == 1 and out == "" and not marker.exists() and not (tmp_path / "out.parquet").exists()
    assert err.count("\n") == 1 and err.startswith(f"Error: {d / 'pytorch_model.bin'} names the global posix.system in "
                                                   "its pickle, which a plain state dict does not need")
