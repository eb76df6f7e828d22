"""Issue 25, items 3 and 7: a hostile or broken model, and bad arguments to the Python API.

* weights holding NaN / inf are refused at load, naming the tensor as the checkpoint names it and how many values;
* features that come out NaN / inf are refused naming the texts (Python) or the input rows (`bertfeat extract`),
  never returned or written;
* a tokenizer with tokens past the word embedding table loads, as sentence-transformers loads it, with one warning
  naming them; a text that holds one is refused naming it (issue 44: a bad row in extract; a table larger than the
  tokenizer, as padded vocabularies have, loads silently);
* ``Encoder(threads=0)`` / ``Encoder(max_batch_tokens=0)`` are refused in the words ``bertfeat.extract`` uses, and
  ``Encoder.encode`` refuses a text that is not a string naming its index.

Each through the Python API and, where the command line reaches it, through `bertfeat extract` in-process: exit 1,
the exact one-line ``Error: ...``, no output and no ``.partial/`` left, the input unchanged.
"""

from __future__ import annotations

import csv
import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import bertfeat
from bertfeat import BertfeatError, Encoder
from bertfeat.encoder import NonFiniteFeaturesError, TokenPastTableError
from bertfeat.errors import BertfeatWarning, WeightsError
from bertfeat.weights import load_weights
from ckpt import VOCABS, make_checkpoint, write_bf16
from extract_util import no_leftovers, run, tiny_encoder, tiny_model, write_csv

CORRUPT = "the checkpoint is corrupt or was saved from a diverged training run: re-download or re-save it"
OVERFLOW = ("the model overflows float32 on these inputs or its files are corrupt: re-download or re-save the "
            "checkpoint, or leave these texts out")


def checkpoint(d: Path, **kw) -> Path:
    """A random-weight model as small as the tests' tiny one (hidden 32, 2 layers)."""
    return make_checkpoint(d, hidden=32, layers=2, heads=2, max_position=128, seed=7, **kw).resolve()


def edit_tensors(d: Path, fn) -> None:
    """fn(name -> array) on model.safetensors, in place, in the file's own names."""
    from safetensors.numpy import load_file, save_file

    t = load_file(str(d / "model.safetensors"))
    fn(t)
    save_file(t, str(d / "model.safetensors"))


def extract_refuses(capsys, tmp_path: Path, model: Path, message: str, rows: list[str], *args) -> None:
    """`bertfeat extract` on a CSV of ``rows``: exit 1, exactly ``Error: message``, nothing left, the input unchanged."""
    src = write_csv(tmp_path / "in.csv", ["text"], [[r] for r in rows])
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    out = tmp_path / "out.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", model, "-q", *args) == (1, "", f"Error: {message}\n")
    assert no_leftovers(out) == []  # no output, no out.parquet.partial/, no temporary
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before


# --------------------------------------------------------------------------- 1. non-finite weights
def test_nan_and_inf_weights_are_refused_naming_the_tensor(tmp_path, capsys):
    d = checkpoint(tmp_path / "m", prefix=True)  # named "bert.encoder...." in the file

    def poison(t):
        w = t["bert.encoder.layer.1.attention.self.query.weight"]
        w[0, :3] = np.nan
        w[5, 7] = -np.inf

    edit_tensors(d, poison)
    message = (f"{d}/model.safetensors: tensor 'bert.encoder.layer.1.attention.self.query.weight' has 4 NaN or "
               f"infinite value(s) of 1,024 (3 NaN, 1 infinite) - {CORRUPT}")
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert e.value.message == message
    extract_refuses(capsys, tmp_path, d, message, ["a text", "another"])
    assert run(capsys, "info", d) == (1, "", f"Error: {message}\n")


def test_non_finite_weights_in_float16_and_bfloat16_files(tmp_path):
    """float16 is read by safetensors; a bfloat16 file by its format, widened to float32 (precision fp32) or kept as
    its bf16 bit patterns (the layers' linear weights under precision bf16): every path checks."""
    from safetensors.numpy import load_file, save_file

    from bertfeat.config import BertConfig

    d = checkpoint(tmp_path / "h")
    t = load_file(str(d / "model.safetensors"))
    t = {k: v.astype(np.float16) for k, v in t.items()}
    t["embeddings.LayerNorm.bias"][3] = np.inf
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"tensor 'embeddings.LayerNorm.bias' has 1 NaN or infinite value\(s\) of 32 "
                                           r"\(0 NaN, 1 infinite\) - the checkpoint is corrupt"):
        Encoder(d)

    b = checkpoint(tmp_path / "b")
    edit_tensors(b, lambda t: t["encoder.layer.0.output.dense.weight"].__setitem__((slice(None), 0), np.nan))
    write_bf16(b / "model.safetensors")
    where = f"{b}/model.safetensors: tensor 'encoder.layer.0.output.dense.weight' has 32 NaN or infinite value(s) of 4,096"
    cfg = BertConfig.from_file(b / "config.json")
    for precision in ("fp32", "bf16"):  # widened to float32 / kept as bf16 bits
        with pytest.raises(WeightsError) as e:
            load_weights(b, cfg, precision)
        assert e.value.message == f"{where} (32 NaN, 0 infinite) - {CORRUPT}", precision



def test_finite_extremes_and_integer_buffers_load(tmp_path):
    """Only NaN and inf are refused: float32's largest values and an int64 buffer load."""
    d = checkpoint(tmp_path / "m")
    edit_tensors(d, lambda t: (t["pooler.dense.bias"].__setitem__(0, np.finfo(np.float32).max),
                               t.__setitem__("embeddings.position_ids", np.arange(128, dtype=np.int64)[None])))
    assert Encoder(d).weights.pooler_b[0] == np.finfo(np.float32).max


# --------------------------------------------------------------------------- 2. non-finite features
@pytest.fixture(scope="module")
def overflowing(tmp_path_factory) -> Path:
    """Finite weights whose word embedding of 'zebra' is float32's largest value: the embedding LayerNorm of any
    row holding 'zebra' overflows (NaN), every other row is fine."""
    d = checkpoint(tmp_path_factory.mktemp("overflow") / "m")
    zebra = Encoder(d).tokenizer.encode(["zebra"]).ids[0][1]
    edit_tensors(d, lambda t: t["embeddings.word_embeddings.weight"].__setitem__(zebra, np.finfo(np.float32).max))
    return d


def test_nan_features_are_refused_naming_the_texts(overflowing):
    enc = Encoder(overflowing)
    texts = ["a cat", "a zebra", "a dog", "zebra crossing", "ok", "zebra", "zebras", "two zebra"]
    X = enc.encode(["a cat", "a dog"])
    assert np.isfinite(X).all()
    with pytest.raises(NonFiniteFeaturesError) as e:
        enc.encode(texts)
    assert e.value.message == f"the model gave NaN or infinite features for texts[1], texts[3], texts[5] and 2 more - {OVERFLOW}"
    assert e.value.rows == (1, 3, 5, 6, 7)
    with pytest.raises(NonFiniteFeaturesError) as e:  # every pooling, batch size and long-text mode
        enc.encode(["ok", "zebra " * 200], pooling="max", long_text="chunk-max", batch_size=1)
    assert e.value.message == f"the model gave NaN or infinite features for texts[1] - {OVERFLOW}"
    with pytest.raises(NonFiniteFeaturesError):
        enc.encode("zebra", normalize=True)
    copy = pickle.loads(pickle.dumps(e.value))  # Dask workers -> client
    assert (type(copy), copy.message, copy.rows) == (NonFiniteFeaturesError, e.value.message, e.value.rows)


def test_nan_features_are_refused_naming_the_input_rows_on_the_command_line(overflowing, tmp_path, capsys):
    """Rows are the file's data rows (as in the rejects file), not positions in a chunk; with a rejected row before
    them and two-row chunks, the first chunk with a NaN stops the run."""
    rows = ["a cat", "", "a dog", "a zebra", "ok", "two zebra"]
    extract_refuses(capsys, tmp_path, overflowing, f"the model gave NaN or infinite features for row 3 - {OVERFLOW}",
                    rows, "--on-bad-row", "skip", "--chunk-rows", "2")
    extract_refuses(capsys, tmp_path, overflowing, f"the model gave NaN or infinite features for row 3, row 5 - {OVERFLOW}",
                    rows, "--on-bad-row", "skip")


# --------------------------------------------------------------------------- 3. tokens past the embedding table
def small_vocab(tmp_path: Path, n: int) -> Path:
    """The first n lines of bert-base-uncased's vocab.txt ([PAD], [unused*], [UNK], [CLS], [SEP], [MASK], ...)."""
    words = VOCABS["uncased"][0].read_text(encoding="utf-8").splitlines()[:n]
    path = tmp_path / f"vocab{n}.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


PAST_FIX = ("leave the token out of these texts (the model's tokenizer has tokens its weights cannot embed; "
            "sentence-transformers fails on them with an IndexError), or use a model whose embedding table covers its "
            "tokenizer (saved after transformers' resize_token_embeddings)")
PAST_ROW_FIX = ("leave the token out of the row (the model's tokenizer has tokens its weights cannot embed; "
                "sentence-transformers fails on them too), or use a model whose embedding table covers its tokenizer, "
                "or pass --on-bad-row skip to write it to the rejects file and go on")


def past_warning(d: Path, source: str, rows: int, shown: str) -> str:
    n = shown.count(" (id ")
    return (f"{d}: the tokenizer ({source}) has {n} token{'s' * (n != 1)} with no row in the word embedding table "
            f"({rows:,} rows, config.json vocab_size {rows:,}): {shown}; a text that holds one is refused (a bad row for "
            "extract; sentence-transformers fails on it with an IndexError)")


def loads_with_one_warning(d: Path, warning: str) -> Encoder:
    with pytest.warns(BertfeatWarning) as caught:
        enc = Encoder(d)
    assert [str(w.message) for w in caught if issubclass(w.category, BertfeatWarning)] == [warning]
    return enc


def extract_rows(capsys, tmp_path: Path, model: Path, rows: list[str], *args) -> tuple[int, str, Path]:
    """`bertfeat extract` on a CSV of ``rows`` -> (exit code, stderr, output path)."""
    src = write_csv(tmp_path / "in.csv", ["text"], [[r] for r in rows])
    out = tmp_path / "out.parquet"
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", model, "-q", *args)
    assert stdout == ""
    return rc, err, out


@pytest.fixture(scope="module")
def camembert_notused(tmp_path_factory) -> Path:
    from st_ckpt import camembert_added_tokens_folder

    return camembert_added_tokens_folder(tmp_path_factory.mktemp("camembert") / "st").resolve()


@pytest.mark.live
def test_camembert_added_tokens_past_the_table_load_as_in_sentence_transformers(camembert_notused, tmp_path, capsys):
    """camembert-base's case: its tokenizer appends <s>NOTUSED, </s>NOTUSED, <unk>NOTUSED past the table.
    sentence-transformers loads it and fails on a text that holds one (IndexError); bertfeat loads it with one warning,
    encodes every other text as sentence-transformers does, and refuses such a text naming it (a bad row in extract)."""
    from sentence_transformers import SentenceTransformer

    d = camembert_notused
    st = SentenceTransformer(str(d), device="cpu")
    V = st[0].auto_model.config.vocab_size
    assert len(st.tokenizer) == V + 3
    warning = past_warning(d, "tokenizer.json", V, f"'<s>NOTUSED' (id {V}), '</s>NOTUSED' (id {V + 1}), "
                                                   f"'<unk>NOTUSED' (id {V + 2})")
    enc = loads_with_one_warning(d, warning)
    texts = ["le chien brun", "The quick brown fox jumps over the lazy dog."]
    bad = "le <s>NOTUSED chien"
    np.testing.assert_allclose(enc.encode(texts), st.encode(texts, convert_to_numpy=True), atol=1e-5, rtol=0)
    with pytest.raises(IndexError):
        st.encode([bad])
    with pytest.raises(TokenPastTableError) as e:
        enc.encode(["ok", bad, "x </s>NOTUSED"])
    assert e.value.message == (f"texts[1] ('<s>NOTUSED', id {V}), texts[2] ('</s>NOTUSED', id {V + 1}): a token with no "
                               f"row in the model's word embedding table ({V} rows) - {PAST_FIX}")
    reason = f"the token '<s>NOTUSED' (id {V}) has no row in the model's word embedding table ({V} rows)"
    rc, err, out = extract_rows(capsys, tmp_path, d, [texts[0], bad, texts[1]])
    assert (rc, err) == (1, f"Warning: {warning}\nError: {tmp_path / 'in.csv'} row 1: {reason} - {PAST_ROW_FIX}\n")
    assert no_leftovers(out) == []
    rc, err, out = extract_rows(capsys, tmp_path, d, [texts[0], bad, texts[1]], "--on-bad-row", "skip")
    assert (rc, err) == (0, "")  # said once: the process keeps the loaded model (encoder_cache)
    assert pq.read_table(out).column("row").to_pylist() == [0, 2]
    np.testing.assert_allclose(np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False)),
                               st.encode(texts, convert_to_numpy=True), atol=1e-5, rtol=0)
    assert (tmp_path / "out.parquet.rejects.csv").read_text() == f"row,id,reason\n1,,{reason}\n"


@pytest.mark.filterwarnings("ignore::bertfeat.errors.BertfeatWarning")  # the loads after the first (checked there)
def test_vocabulary_words_past_the_table_refuse_only_the_texts_that_use_them(tmp_path, capsys):
    """vocab.txt longer than the table: the words past it are named once at load; a text that uses one is refused
    naming it (Encoder.encode, TextFeatures, attention, extract, whose other rows are written and verify)."""
    from bertfeat.inspection import attention_maps
    from bertfeat.sklearn import TextFeatures

    d = checkpoint(tmp_path / "m", vocab=small_vocab(tmp_path, 1000))  # config vocab_size 1000, a (1000, 32) table
    vocab = (d / "vocab.txt").read_text(encoding="utf-8")
    (d / "vocab.txt").write_text(vocab + "zebra\ngiraffe\n", encoding="utf-8")  # ids 1000 and 1001: past the table
    enc = loads_with_one_warning(d, past_warning(d, "vocab.txt + tokenizer_config.json", 1000,
                                                 "'zebra' (id 1,000), 'giraffe' (id 1,001)"))
    assert enc.encode(["the cat sat", "ok"]).shape == (2, 32)
    with pytest.raises(TokenPastTableError) as e:
        enc.encode(["ok", "a zebra", "the giraffe and the zebra"])
    assert e.value.message == ("texts[1] ('zebra', id 1,000), texts[2] ('giraffe', id 1,001): a token with no row in "
                               f"the model's word embedding table (1,000 rows) - {PAST_FIX}")
    with pytest.raises(TokenPastTableError) as e:  # named by its place in X, with the cache's duplicates too
        TextFeatures(d, cache=True).fit_transform(["ok", "ok", "a zebra", "a zebra"])
    assert e.value.message.startswith("X[2] ('zebra', id 1,000): a token with no row")
    with pytest.raises(TokenPastTableError) as e:
        attention_maps("a zebra", model=d)
    assert e.value.message.startswith("the text ('zebra', id 1,000): a token with no row")
    rc, err, out = extract_rows(capsys, tmp_path, d, ["the cat sat", "a zebra", "ok"], "--on-bad-row", "skip")
    assert rc == 0, err
    np.testing.assert_array_equal(np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False)),
                                  enc.encode(["the cat sat", "ok"]))
    rc, _, err = run(capsys, "verify", out, "--model", d)
    assert rc == 0, err
    est = bertfeat.extract(tmp_path / "in.csv", tmp_path / "e.parquet", model=d, estimate=True, on_bad_row="skip")
    assert (est.rows, est.rows_bad, est.sample_rows) == (3, 0, 2)
    assert "~1 row(s) hold a token the model's word embedding table has no row for: the run writes them to the " \
           "rejects file" in est.warnings


@pytest.mark.parametrize("family", ["bert", pytest.param("roberta", marks=pytest.mark.live)])
def test_added_token_past_the_table_counts_only_where_the_model_gets_it(tmp_path, capsys, family):
    """An added token past the table in tokenizer.json (BERT, RoBERTa): a row is refused only when the token reaches
    the model: cut off by truncation it never does (as in sentence-transformers, which truncates first); a chunk-mean
    window holds it."""
    if family == "bert":
        d = checkpoint(tmp_path / "m", vocab=small_vocab(tmp_path, 1000), tokenizer="json")
    else:
        from st_ckpt import roberta_checkpoint

        d = roberta_checkpoint(tmp_path / "m", model_type="roberta", hidden=32, layers=2, heads=2).resolve()
    V = json.loads((d / "config.json").read_text())["vocab_size"]
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tj["added_tokens"].append({"id": V, "content": "<new>", "single_word": False, "lstrip": False, "rstrip": False,
                               "normalized": False, "special": True})
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    enc = loads_with_one_warning(d, past_warning(d, "tokenizer.json", V, f"'<new>' (id {V:,})"))
    late = "word " * 40 + "<new>"
    assert enc.encode([late], max_length=16).shape == (1, 32)  # truncated before the token
    reason = f"the token '<new>' (id {V:,}) has no row in the model's word embedding table ({V:,} rows)"
    for mode, rejected in ((["truncate"], ["2"]), (["chunk-mean", "--stride", "4"], ["1", "2"])):
        rc, err, out = extract_rows(capsys, tmp_path, d, ["fine", late, "a <new> b"], "--on-bad-row", "skip",
                                    "--max-length", "16", "--long-text", *mode, "--overwrite")
        assert rc == 0, err
        with open(tmp_path / "out.parquet.rejects.csv", newline="") as fh:
            assert list(csv.reader(fh))[1:] == [[r, "", reason] for r in rejected], mode


@pytest.mark.filterwarnings("ignore::bertfeat.errors.BertfeatWarning")
def test_tokens_past_the_table_on_the_dask_engine(tmp_path, capsys, dask_client):
    """The Dask engine's partitions refuse the same rows, with the same reasons, as the local engine."""
    d = checkpoint(tmp_path / "m", vocab=small_vocab(tmp_path, 1000))
    (d / "vocab.txt").write_text((d / "vocab.txt").read_text(encoding="utf-8") + "zebra\n", encoding="utf-8")
    rows = ["the cat sat", "a zebra", "ok", "zebra"]
    rejects = {}
    for engine, extra in (("local", []), ("dask", ["--engine", "dask", "--scheduler", dask_client.scheduler.address])):
        (tmp_path / engine).mkdir()
        rc, err, out = extract_rows(capsys, tmp_path / engine, d, rows, "--on-bad-row", "skip", *extra)
        assert rc == 0, err
        rejects[engine] = (tmp_path / engine / "out.parquet.rejects.csv").read_text()
        assert pq.read_table(out).column("row").to_pylist() == [0, 2]
    reason = "the token 'zebra' (id 1,000) has no row in the model's word embedding table (1,000 rows)"
    assert rejects["dask"] == rejects["local"] == f'row,id,reason\n1,,"{reason}"\n3,,"{reason}"\n'


def test_embedding_table_larger_than_the_tokenizer_loads(tmp_path, capsys):
    """Padded vocabularies (vocab_size rounded up to a multiple of 8 or 64): config.json and the table agree, the
    tokenizer has fewer tokens. Every id it produces has a row: it loads and extracts."""
    d = checkpoint(tmp_path / "m", vocab=small_vocab(tmp_path, 1000))
    words = (d / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (d / "vocab.txt").write_text("\n".join(words[:990]) + "\n", encoding="utf-8")
    enc = Encoder(d)
    assert (enc.tokenizer.vocab_size, enc.config.vocab_size, enc.weights.word.shape[0]) == (990, 1000, 1000)
    assert enc.encode(["the cat sat"]).shape == (1, 32)
    src = write_csv(tmp_path / "in.csv", ["text"], [["the cat sat"], ["ok"]])
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", d, "-q")
    assert rc == 0, err


# --------------------------------------------------------------------------- 4. arguments of the Python API
@pytest.mark.parametrize("kwargs, message", [
    ({"threads": 0}, "threads=0 is out of range - give 1 or more (default: all cores)"),
    ({"threads": -2}, "threads=-2 is out of range - give 1 or more (default: all cores)"),
    ({"threads": True}, "threads=True is out of range - give 1 or more (default: all cores)"),
    ({"threads": "2"}, "threads='2' is not a number - give 1 or more (default: all cores)"),
    ({"max_batch_tokens": 0}, "max_batch_tokens=0 is out of range - choose 1 or more (tokens per batch, padded rows x "
                              "length; default 512), or leave it out for the default"),
    ({"max_batch_tokens": -1}, "max_batch_tokens=-1 is out of range - choose 1 or more (tokens per batch, padded rows x "
                               "length; default 512), or leave it out for the default"),
    ({"max_batch_tokens": False}, "max_batch_tokens=False is out of range - choose 1 or more (tokens per batch, padded "
                                  "rows x length; default 512), or leave it out for the default"),
    ({"max_length": 0}, "max_length=0 is out of range - choose 3 or more (up to the model's max_position_embeddings, "
                        "512 for BERT and MiniLM), or leave it out for the default"),
])
def test_encoder_load_settings_are_checked_as_extract_checks_them(tmp_path, kwargs, message):
    with pytest.raises(BertfeatError) as e:
        Encoder(tiny_model(), **kwargs)
    assert e.value.message == message
    src = write_csv(tmp_path / "in.csv", ["text"], [["ok"]])
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), **kwargs)
    assert e.value.message == message  # the same check, the same words
    assert not (tmp_path / "o.parquet").exists()


def test_encoder_default_settings_still_load():
    enc = Encoder(tiny_model(), threads=None, max_batch_tokens=None, max_length=None)
    assert enc.max_batch_tokens == 512 and enc.threads >= 1
    assert Encoder(tiny_model(), threads=1, max_batch_tokens=1).encode(["a b c", "d"]).shape == (2, 32)


@pytest.mark.parametrize("texts, pairs, message", [
    (["ok", None], None, "texts[1] is None, not a string"),
    (["ok", "fine", 3], None, "texts[2] is 3 (int), not a string"),
    ([b"x"], None, "texts[0] is b'x' (bytes), not a string"),
    (["ok", float("nan")], None, "texts[1] is nan (float), not a string"),
    ([["nested"]], None, "texts[0] is ['nested'] (list), not a string"),
    (None, None, "texts is None, not a list of strings"),
    (b"bytes", None, "texts is b'bytes' (bytes), not a list of strings"),
    (7, None, "texts is 7 (int), not a list of strings"),
    (["a", "b"], ["c", None], "pairs[1] is None, not a string"),
])
def test_encode_refuses_a_text_that_is_not_a_string(texts, pairs, message):
    with pytest.raises(BertfeatError) as e:
        tiny_encoder().encode(texts, pairs=pairs)
    assert e.value.message == message + " - pass a list of strings (drop or fill missing texts first)"


def test_encode_edge_inputs_keep_their_meaning():
    """One string is one text (a (D,) vector, as SentenceTransformer.encode); an empty list is (0, D); an array or
    a generator of strings is a list of them; pairs must match the texts one to one."""
    enc = tiny_encoder()
    assert enc.encode("one text").shape == (32,)
    np.testing.assert_array_equal(enc.encode("one text"), enc.encode(["one text"])[0])
    assert enc.encode([]).shape == (0, 32)
    np.testing.assert_array_equal(enc.encode(np.array(["a", "b"])), enc.encode(["a", "b"]))
    np.testing.assert_array_equal(enc.encode(t for t in ["a", "b"]), enc.encode(["a", "b"]))
    with pytest.raises(BertfeatError) as e:
        enc.encode(["a", "b"], pairs=["c"])
    assert e.value.message == "2 texts but 1 pairs - give one pair text for each text"
    with pytest.raises(BertfeatError) as e:
        enc.encode(["a"], max_length=0)
    assert e.value.message.startswith("max_length=0 is out of range - choose 3 or more")


@pytest.mark.parametrize("index,what", [
    ({"weight_map": ["a"]}, "{i}: weight_map is a JSON list, not a JSON object"),
    ([1, 2], "{i} is a JSON list, not a JSON object"),
    ({"weight_map": {"x": 3}}, "{i}: a weight_map entry is 3, not a string"),
])
def test_malformed_safetensors_index_is_one_line(tmp_path, index, what):
    d = checkpoint(tmp_path / "m", tokenizer="json")
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert e.value.what == what.format(i=d / "model.safetensors.index.json") and "\n" not in e.value.message


def test_vocab_not_utf8_and_tokenizer_config_not_an_object(tmp_path):
    d = checkpoint(tmp_path / "m")  # vocab.txt + tokenizer_config.json
    (d / "vocab.txt").write_bytes((d / "vocab.txt").read_bytes() + b"caf\xe9\n")
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert e.value.message == (f"{d / 'vocab.txt'} is not UTF-8 text (invalid continuation byte) - restore the "
                               "vocab.txt that came with the model (transformers reads it as UTF-8)")
    d = checkpoint(tmp_path / "n")
    (d / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(BertfeatError) as e:
        Encoder(d)
    assert e.value.what == f"{d / 'tokenizer_config.json'} is a JSON list, not a JSON object"
