"""Issue 25, items 3 and 7, and issue 44: a hostile or broken model, and bad arguments to the Python API.

* weights holding NaN / inf are refused at load, naming the tensor as the checkpoint names it and how many values;
* features that come out NaN / inf are refused naming the texts (Python) or the input rows (`bertfeat extract`),
  never returned or written;
* a tokenizer with tokens past the word embedding table loads, as sentence-transformers loads it, with one warning
  naming them; a text that holds one is refused naming it (issue 44: a bad row in extract; a table larger than the
  tokenizer, as padded vocabularies have, loads silently);
* a text a tokenizer that adds no special tokens leaves no token of is refused naming it (a bad row in extract,
  code no-tokens), never pooled from padding, -inf or zeros;
* ``Encoder(threads=0)`` / ``Encoder(max_batch_tokens=0)`` are refused in the words ``bertfeat.extract`` uses, and
  ``Encoder.encode`` refuses a text that is not a string naming its index.

* (issue 44) every file loading reads is inside the model folder and a regular file (a module path out of the folder,
  a symbolic link leading out, a named pipe in place of any model file are refused in one line, never followed or
  waited on), and the cache's fingerprint and `info --files` list exactly those files; a Pooling or Dense setting
  bertfeat would replace or ignore is refused, naming the file and the keys; a Dense with no inputs or outputs is
  refused at load.

Each through the Python API and, where the command line reaches it, through `bertfeat extract` in-process: exit 1,
the exact one-line ``Error: ...``, no output and no ``.partial/`` left, the input unchanged.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from extract_util import NOT_BIT_FOR_BIT, rows_bit_for_bit

import bertfeat
from bertfeat import BertfeatError, Encoder
from bertfeat.cli.app import main
from bertfeat.model.inputs import NoTokensError, NonFiniteFeaturesError, TokenPastTableError
from bertfeat.errors import BertfeatWarning, ConfigError, WeightsError
from bertfeat.model.weights import load_weights
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

    from bertfeat.model.config import BertConfig

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
    """Rows are the file's data rows (as in the rejects file), not positions in a chunk, named as a bad row is
    (Reader.row_label: the file and its row); with a rejected row before them and two-row chunks, the first chunk with
    a NaN stops the run."""
    rows = ["a cat", "", "a dog", "a zebra", "ok", "two zebra"]
    src = tmp_path / "in.csv"
    extract_refuses(capsys, tmp_path, overflowing, f"the model gave NaN or infinite features for {src} row 3 - {OVERFLOW}",
                    rows, "--on-bad-row", "skip", "--chunk-rows", "2")
    extract_refuses(capsys, tmp_path, overflowing,
                    f"the model gave NaN or infinite features for {src} row 3, {src} row 5 - {OVERFLOW}",
                    rows, "--on-bad-row", "skip")


def test_nan_features_in_a_parquet_dataset_name_the_file_that_holds_the_row(overflowing, tmp_path, capsys):
    """A folder of Parquet files is one input: the row is named by its number in the whole input and by its file and
    its row there, as a bad row is."""
    import pyarrow as pa

    d = tmp_path / "data"
    d.mkdir()
    pq.write_table(pa.table({"text": ["a cat", "a dog", "ok"]}), d / "p0.parquet")
    pq.write_table(pa.table({"text": ["fine", "a zebra"]}), d / "p1.parquet")
    out = tmp_path / "out.parquet"
    message = f"the model gave NaN or infinite features for {d} row 4 ({d / 'p1.parquet'} row 1) - {OVERFLOW}"
    assert run(capsys, "extract", d, "-o", out, "--model", overflowing, "-q") == (1, "", f"Error: {message}\n")
    assert no_leftovers(out) == []


def test_nan_features_in_an_estimate_name_the_input_row(overflowing, tmp_path, capsys):
    """`extract --estimate` encodes a sample: the row is the input's, as the run would name it, not a position among
    the sampled rows the model ran on (a rejected row and one refused as too long before it once made it `row 2`,
    the input's "ok")."""
    rows = ["a cat", "", "one two three four five six seven eight nine ten", "ok", "a zebra"]
    src = write_csv(tmp_path / "in.csv", ["text"], [[r] for r in rows])
    message = f"the model gave NaN or infinite features for {src} row 4 - {OVERFLOW}"
    assert run(capsys, "extract", src, "--model", overflowing, "--estimate", "--on-bad-row", "skip", "--long-text",
               "error", "--max-length", "8") == (1, "", f"Error: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # an estimate writes nothing


@pytest.mark.parametrize("cache", [False, True])
def test_nan_features_in_a_sweep_name_the_input_row(overflowing, tmp_path, capsys, cache):
    """`bertfeat sweep` encodes a sample: the row is the input's (its file and its row), not a position in the
    sample, with the vector cache or without."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["a cat"], ["a dog"], ["ok"], ["a zebra"], ["fine"]])
    args = ["--cache", tmp_path / "cache"] if cache else ["--no-cache"]
    message = f"the model gave NaN or infinite features for {src} row 3 - {OVERFLOW}"
    assert run(capsys, "sweep", src, "-m", overflowing, "--set", "mean", "--set", "cls", "-o", tmp_path / "s", "-q",
               *args) == (1, "", f"Error: {message}\n")


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


@pytest.mark.skipif(not rows_bit_for_bit(), reason=NOT_BIT_FOR_BIT)
@pytest.mark.live
def test_a_pad_token_added_without_a_row_pads_batches_all_the_same(tmp_path):
    """A pad token added to the tokenizer without resizing the embeddings (id past the table): the load warned that
    texts holding it are refused, one text encoded, but every padded batch failed with an IndexError ("a bug in
    bertfeat"; sentence-transformers fails on it too). Padding is masked, so config.json's pad_token_id fills it: each
    row is bit for bit the row encoded alone."""
    from transformers import AutoTokenizer

    d = tmp_path / "padpast"
    shutil.copytree(tiny_model(), d)
    tok = AutoTokenizer.from_pretrained(str(d))
    V = len(tok)
    tok.add_special_tokens({"pad_token": "[PADX]"})
    tok.save_pretrained(str(d))
    with pytest.warns(BertfeatWarning, match=r"'\[PADX\]' \(id "):
        enc = Encoder(d)
    assert enc.tokenizer.pad_id == V
    texts = ["a b c d", "x", "the quick brown fox jumps"]
    together = enc.encode(texts)
    assert np.array_equal(together, np.concatenate([enc.encode([t]) for t in texts]))
    assert np.array_equal(together, tiny_encoder().encode(texts))  # the same weights, the table's own pad token


def test_a_models_caveat_is_said_once_per_line_of_yours_that_loads_it(tmp_path):
    """A model's caveat (tokens past its table) is the same words at each load: said at the line of the caller's code,
    once per line, as Python's default filter says a warning, so a loop that loads the model (inspection's functions
    load it at each call) says it once. Before: every load (errors.warn kept no record for any warning), 3 warnings
    for the loop below. A run's own finding (repeated ids) is still said every run: tests/run/test_repeated_ids.py."""
    import warnings

    from bertfeat.inspection import tokenize_text

    d = checkpoint(tmp_path / "m", vocab=small_vocab(tmp_path, 1000))
    (d / "vocab.txt").write_text((d / "vocab.txt").read_text(encoding="utf-8") + "zebra\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for text in ("a dog", "a cat", "a bird"):
            tokenize_text(text, model=d)  # one line: said once
        Encoder(d)  # another line: said there too
    said = [(w.filename, w.lineno) for w in caught if issubclass(w.category, BertfeatWarning)]
    assert [f for f, _ in said] == [__file__, __file__] and said[0][1] + 1 == said[1][1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a filter of the user's still decides
        for text in ("a dog", "a cat"):
            tokenize_text(text, model=d)
    assert len([w for w in caught if issubclass(w.category, BertfeatWarning)]) == 2


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


# --------------------------------------------------------------------------- 3b. a text that tokenizes to no token
NO_TOKENS = "a text with no tokens the model keeps (its tokenizer drops every character and adds no special tokens)"
NO_TOKENS_FIX = ("leave these texts out, or give each a word the tokenizer keeps (this model's tokenizer adds no special "
                 "tokens such as [CLS], so a text it drops whole leaves nothing to embed; sentence-transformers fails on "
                 "it with a RuntimeError)")
NO_TOKENS_REASON = "the text has no tokens the model keeps (its tokenizer drops every character and adds no special tokens)"
NO_TOKENS_ROW_FIX = ("leave the row out, or give it a word the tokenizer keeps (this model's tokenizer adds no special "
                     "tokens such as [CLS], so a text it drops whole leaves nothing to embed; sentence-transformers fails "
                     "on it too), or pass --on-bad-row skip to write it to the rejects file and go on")
#: texts BERT's tokenizer drops whole: a zero-width space, control characters ("" only in Python: a file's empty cell
#: is a missing value, its own bad row)
DROPPED = ["\u200b", "\x01\x02"]


@pytest.fixture(scope="module")
def no_specials(tmp_path_factory) -> Path:
    """A tiny BERT saved by transformers whose tokenizer.json has ``"post_processor": null`` and whose
    tokenizer_config.json names PreTrainedTokenizerFast: transformers 5 loads it as stored (TokenizersBackend), adding no
    [CLS] / [SEP], so a text the tokenizer drops whole is 0 tokens."""
    d = checkpoint(tmp_path_factory.mktemp("nospecials") / "m", tokenizer="json", st_pooling="mean")
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tj["post_processor"] = None
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.update(tokenizer_class="PreTrainedTokenizerFast", pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
               sep_token="[SEP]", mask_token="[MASK]")
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.live
def test_a_tokenizer_without_special_tokens_gives_no_token_for_such_texts_in_transformers(no_specials):
    """What the test model is: transformers' AutoTokenizer gives no token for these texts, and sentence-transformers
    fails on such a text alone (RuntimeError); bertfeat's tokens and the other texts' vectors are its own."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(no_specials))
    assert tok(["hi there", "", *DROPPED])["input_ids"] == [[7632, 2045], [], [], []]
    enc = Encoder(no_specials)
    assert [list(a) for a in enc.tokenizer.encode(["hi there", "", *DROPPED]).ids] == [[7632, 2045], [], [], []]
    st = SentenceTransformer(str(no_specials), device="cpu")
    with pytest.raises(RuntimeError):
        st.encode(["\u200b"])
    texts = ["hi there", "the cat sat on the mat"]
    np.testing.assert_allclose(enc.encode(texts), st.encode(texts), atol=1e-5, rtol=0)


@pytest.mark.parametrize("pooling", ["cls", "max", "mean", "lasttoken"])
def test_a_text_with_no_tokens_is_refused_by_encode_naming_it(no_specials, pooling):
    """Such a row was cls: a padding position's vector (it changed with its batch), max: -inf (refused as a model that
    overflows), mean / lasttoken: zeros, and alone a reshape ValueError. Now one error naming every such text."""
    enc = Encoder(no_specials)
    with pytest.raises(NoTokensError) as e:
        enc.encode(["hi there", "\u200b", "ok", "", "\x01\x02"], pooling=pooling)
    assert e.value.message == f"texts[1], texts[3], texts[4]: {NO_TOKENS} - {NO_TOKENS_FIX}"
    assert e.value.rows == (1, 3, 4)
    with pytest.raises(NoTokensError) as e:  # alone (it was a ValueError: cannot reshape array of size 0)
        enc.encode("", pooling=pooling)
    assert e.value.message == f"texts[0]: {NO_TOKENS} - {NO_TOKENS_FIX}"
    with pytest.raises(NoTokensError) as e:  # a pair of two such texts has no token either
        enc.encode(["a", "\u200b"], pairs=["b", "\x01"], pooling=pooling)
    assert e.value.rows == (1,)
    assert pickle.loads(pickle.dumps(e.value)).rows == (1,)  # the rows travel (Dask workers)
    assert enc.encode(["\u200b"], pairs=["ok"], pooling=pooling).shape == (1, 32)  # its pair has a token
    assert enc.encode(["hi there"], pooling=pooling).shape == (1, 32)


def test_text_features_name_a_text_with_no_tokens_by_its_place_in_x(no_specials):
    from bertfeat.sklearn import TextFeatures

    with pytest.raises(NoTokensError) as e:
        TextFeatures(no_specials).fit_transform(["hi there", "\u200b"])
    assert e.value.message == f"X[1]: {NO_TOKENS} - {NO_TOKENS_FIX}"
    with pytest.raises(NoTokensError) as e:  # with the cache's duplicates: each text's first place in X
        TextFeatures(no_specials, cache=True).fit_transform(["ok", "ok", "", "\u200b", ""])
    assert e.value.message == f"X[2], X[3]: {NO_TOKENS} - {NO_TOKENS_FIX}"


def test_only_a_tokenizer_that_adds_no_special_tokens_refuses_rows_for_it(no_specials):
    """Models whose tokenizer adds [CLS] / [SEP] (nearly all) never give 0 tokens: their rows are not tokenized before
    a bad row stops the run (refuses_rows false), as before."""
    tiny = tiny_encoder()
    assert not tiny.may_give_no_tokens and not tiny.refuses_rows(tiny.spec())
    assert [list(a) for a in tiny.tokenizer.encode(["\u200b"]).ids] == [[101, 102]]
    enc = Encoder(no_specials)
    assert enc.may_give_no_tokens and enc.refuses_rows(enc.spec())


@pytest.mark.parametrize("pooling", ["cls", "max"])
def test_extract_of_only_rows_with_no_tokens(no_specials, tmp_path, capsys, pooling):
    """A batch of only such rows crashed (`unexpected ValueError: cannot reshape array of size 0 ... this is a bug in
    bertfeat`, an out.parquet.partial folder left): now a bad row of its own code and fix."""
    rc, err, out = extract_rows(capsys, tmp_path, no_specials, DROPPED, "--pooling", pooling)
    assert (rc, err) == (1, f"Error: {tmp_path / 'in.csv'} row 0: {NO_TOKENS_REASON} - {NO_TOKENS_ROW_FIX}\n")
    assert no_leftovers(out) == []
    rc, err, out = extract_rows(capsys, tmp_path, no_specials, DROPPED, "--pooling", pooling, "--on-bad-row", "skip")
    assert (rc, err) == (0, "")
    assert pq.read_table(out).num_rows == 0
    with open(tmp_path / "out.parquet.rejects.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["row", "id", "reason"], ["0", "", NO_TOKENS_REASON], ["1", "", NO_TOKENS_REASON]]


@pytest.mark.parametrize("pooling", ["cls", "max", "mean"])
def test_extract_skips_a_row_with_no_tokens_in_a_mixed_batch(no_specials, tmp_path, capsys, pooling):
    """Beside other rows such a row was written (cls: a padding position's vector, mean: zeros) or stopped the run as
    a model that overflows float32 (max: -inf). Now the first such row stops the run naming it, or is skipped and
    written to the rejects file; the other rows are written as Encoder.encode gives them."""
    rows = ["hi there", "\u200b", "the cat sat", "\x01"]
    rc, err, out = extract_rows(capsys, tmp_path, no_specials, rows, "--pooling", pooling)
    assert (rc, err) == (1, f"Error: {tmp_path / 'in.csv'} row 1: {NO_TOKENS_REASON} - {NO_TOKENS_ROW_FIX}\n")
    assert no_leftovers(out) == []
    rc, err, out = extract_rows(capsys, tmp_path, no_specials, rows, "--pooling", pooling, "--on-bad-row", "skip")
    assert (rc, err) == (0, "")
    t = pq.read_table(out)
    assert t.column("row").to_pylist() == [0, 2]
    np.testing.assert_array_equal(np.stack(t.column("embedding").to_numpy(zero_copy_only=False)),
                                  Encoder(no_specials).encode(["hi there", "the cat sat"], pooling=pooling))
    with open(tmp_path / "out.parquet.rejects.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["row", "id", "reason"], ["1", "", NO_TOKENS_REASON], ["3", "", NO_TOKENS_REASON]]
    rc, _, err = run(capsys, "verify", out, "--model", no_specials)  # verify passes over the rows the run refused
    assert rc == 0, err


@pytest.mark.parametrize("on_bad_row, then", [("skip", "the run writes them to the rejects file"),
                                               ("error", "the run stops at the first (on_bad_row='error')")])
def test_extract_estimate_counts_the_rows_with_no_tokens(no_specials, tmp_path, on_bad_row, then):
    """--estimate leaves such rows out of its sample (they were counted as rows the run writes) and says so."""
    src = write_csv(tmp_path / "in.csv", ["text"], [[t] for t in ["hi there", "\u200b", "the cat sat", "\x01"]])
    est = bertfeat.extract(src, tmp_path / "e.parquet", model=no_specials, estimate=True, on_bad_row=on_bad_row)
    assert (est.rows, est.rows_bad, est.sample_rows) == (4, 0, 2)
    assert ("~2 row(s) have no tokens the model keeps (its tokenizer drops every character and adds no special "
            f"tokens): {then}") in est.warnings


# --------------------------------------------------------------------------- 4. arguments of the Python API
@pytest.mark.parametrize("kwargs, message", [
    ({"threads": 0}, "threads=0 is out of range - give 1 or more (default: all cores)"),
    ({"threads": -2}, "threads=-2 is out of range - give 1 or more (default: all cores)"),
    ({"threads": True}, "threads=True is a bool, not a whole number - give threads as a whole number, or leave it out"),
    ({"threads": "2"}, "threads='2' is not a number - give 1 or more (default: all cores)"),
    ({"max_batch_tokens": 0}, "max_batch_tokens=0 is out of range - choose 1 or more (tokens per batch, padded rows x "
                              "length; default 512), or leave it out for the default"),
    ({"max_batch_tokens": -1}, "max_batch_tokens=-1 is out of range - choose 1 or more (tokens per batch, padded rows x "
                               "length; default 512), or leave it out for the default"),
    ({"max_batch_tokens": False}, "max_batch_tokens=False is a bool, not a whole number - give max_batch_tokens as a "
                                  "whole number, or leave it out"),
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
    ([b"x" * 100], None, "texts[0] is b'" + "x" * 35 + "... (bytes), not a string"),  # "..." marks the cut
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


# --------------------------------------------------------------------------- 5. a model folder's files stay inside it
OUTSIDE_FIX = ("copy the file into the model folder in place of the link or the path leading out: bertfeat reads a "
               "model's files from its folder only (so that the vector cache and `info --files` cover every one)")
ST_FILES = ["model.safetensors", "config.json", "tokenizer_config.json", "tokenizer.json", "sentence_bert_config.json",
            "modules.json", "config_sentence_transformers.json", "1_Pooling/config.json", "2_Dense/config.json",
            "2_Dense/model.safetensors", "3_Normalize/config.json"]  # what loading st_model's folder reads, in order


def st_model(d: Path, dense_out: int = 8) -> Path:
    """A sentence-transformers folder laid out as the library saves one around the tests' tiny BERT: tokenizer.json,
    modules.json, 1_Pooling/ (mean), 2_Dense/ (32 -> ``dense_out``, tanh), 3_Normalize/, sentence_bert_config.json,
    config_sentence_transformers.json (no sentence-transformers needed)."""
    from safetensors.numpy import save_file

    d = checkpoint(d, tokenizer="json", st_pooling="mean", st_max_seq_length=64)
    (d / "2_Dense").mkdir()
    (d / "2_Dense" / "config.json").write_text(json.dumps({
        "in_features": 32, "out_features": dense_out, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh"}))
    rng = np.random.default_rng(3)
    save_file({"linear.weight": (rng.standard_normal((dense_out, 32)) / 6).astype(np.float32),
               "linear.bias": (rng.standard_normal(dense_out) / 10).astype(np.float32)},
              str(d / "2_Dense" / "model.safetensors"))
    (d / "3_Normalize").mkdir()
    (d / "3_Normalize" / "config.json").write_text(json.dumps({"module_input_name": "sentence_embedding"}))
    (d / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": ""}, "default_prompt_name": None}))
    mods = json.loads((d / "modules.json").read_text())
    mods += [{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
             {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (d / "modules.json").write_text(json.dumps(mods))
    return d


def set_module_path(d: Path, index: int, path: str) -> None:
    mods = json.loads((d / "modules.json").read_text())
    mods[index]["path"] = path
    (d / "modules.json").write_text(json.dumps(mods))


def refused_by_load_and_info(capsys, d: Path, message: str) -> None:
    """Encoder(d) and `bertfeat info d --files` refuse the model folder with ``message``."""
    with pytest.raises(ConfigError) as e:
        Encoder(d)
    assert e.value.message == message
    assert run(capsys, "info", d, "--files") == (1, "", f"Error: {message}\n")


class TestModelFilesStayInsideTheFolder:
    """Issue 44.1: every file the loading reads is inside the model folder, or the model is refused in one line (a
    module's path in modules.json, a symbolic link); the cache's fingerprint and `info --files` list exactly those
    files (hub.model_files, the one list)."""

    @pytest.mark.parametrize("index, kind", [(1, "Pooling"), (2, "Dense"), (3, "Normalize")])
    @pytest.mark.parametrize("how", ["dotdot", "absolute"])
    def test_a_module_path_out_of_the_folder_is_refused(self, tmp_path, capsys, index, kind, how):
        d = st_model(tmp_path / "m")
        folder = {1: "1_Pooling", 2: "2_Dense", 3: "3_Normalize"}[index]
        shutil.copytree(d / folder, tmp_path / "elsewhere" / folder)  # a working module, outside
        path = f"../elsewhere/{folder}" if how == "dotdot" else str(tmp_path / "elsewhere" / folder)
        set_module_path(d, index, path)
        message = (f"modules.json: the {kind} module's path '{path}' is outside the model folder - restore modules.json "
                   "from the model (every module's files are in the model folder)")
        refused_by_load_and_info(capsys, d, message)
        # before: the vectors came from the outside folder, and a cached run kept serving them after it changed
        extract_refuses(capsys, tmp_path, d, message, ["a text", "another"], "--cache", tmp_path / "cache")

    @pytest.mark.parametrize("index, kind, path", [(1, "Pooling", "config.json"), (2, "Dense", "2_Dense/config.json")])
    def test_a_module_path_that_names_a_file_is_refused_as_one(self, tmp_path, capsys, index, kind, path):
        """It said 'config.json/config.json is missing - restore the Dense module's config.json' (a helper's review)."""
        d = st_model(tmp_path / "m")
        set_module_path(d, index, path)
        message = (f"modules.json: the {kind} module's path '{path}' is a file, not a folder - restore modules.json from "
                   "the model (a module's path names the folder of its files)")
        refused_by_load_and_info(capsys, d, message)

    @pytest.mark.parametrize("link, first_read", [
        ("2_Dense", "2_Dense/config.json"),  # the module's folder is a link
        ("1_Pooling/config.json", "1_Pooling/config.json"),
        ("2_Dense/model.safetensors", "2_Dense/model.safetensors"),
        ("tokenizer.json", "tokenizer.json"),
        ("model.safetensors", "model.safetensors"),
        ("sentence_bert_config.json", "sentence_bert_config.json"),
    ])
    def test_a_symbolic_link_out_of_the_folder_is_refused(self, tmp_path, capsys, link, first_read):
        d = st_model(tmp_path / "m")
        target = tmp_path / "elsewhere" / link
        target.parent.mkdir(parents=True)
        (d / link).rename(target)
        (d / link).symlink_to(target)
        message = f"{d / first_read} resolves to {tmp_path / 'elsewhere' / first_read}, outside the model folder {d} - {OUTSIDE_FIX}"
        with pytest.raises(ConfigError) as e:
            Encoder(d)
        assert e.value.message == message
        assert run(capsys, "info", d, "--files") == (1, "", f"Error: {message}\n")
        extract_refuses(capsys, tmp_path, d, message, ["a text"])

    def test_links_and_paths_inside_the_folder_still_load(self, tmp_path, capsys):
        d = st_model(tmp_path / "m")
        want = Encoder(d).encode(["a text", "another one"])
        (d / "2_Dense").rename(d / "dense_v2")
        (d / "2_Dense").symlink_to("dense_v2")  # relative, inside
        (d / "tokenizer.json").rename(d / "1_Pooling" / "tok.json")
        (d / "tokenizer.json").symlink_to(d / "1_Pooling" / "tok.json")  # absolute, inside
        set_module_path(d, 1, "./1_Pooling/")
        np.testing.assert_array_equal(Encoder(d).encode(["a text", "another one"]), want)
        rc, out, _ = run(capsys, "info", d, "--files")
        assert rc == 0 and out == "".join(f"{d / rel}\n" for rel in ST_FILES)

    def test_info_files_and_the_fingerprint_list_exactly_what_loading_reads(self, tmp_path, capsys):
        """What `info --files` prints and the cache's fingerprint hashes is what Encoder(d) opens (an audit hook sees
        every open; tokenizer.json is opened by the tokenizers library, in Rust), for every layout; a folder
        modules.json does not name (a module saved before) and a vocab.txt beside tokenizer.json are never read, so
        never listed (they were, while files outside the folder that were read were not)."""
        import sys

        from bertfeat.model.hub import model_files
        from bertfeat.cache.store import cache_fingerprint
        from st_ckpt import older_layout

        opened: list[str] | None = None

        def audit(event, args):
            if opened is not None and event == "open" and isinstance(args[0], (str, Path)):
                opened.append(os.path.realpath(args[0]))

        sys.addaudithook(audit)
        st = st_model(tmp_path / "st")
        shutil.copytree(st / "2_Dense", st / "2_Dense_old")
        shutil.copytree(st / "2_Dense", st / "dense")
        set_module_path(st, 2, "dense")
        shutil.copy(VOCABS["uncased"][0], st / "vocab.txt")
        vocab = checkpoint(tmp_path / "vocab", st_pooling="cls")
        (vocab / "added_tokens.json").write_text(json.dumps({"[unused1]": 2}))
        (vocab / "special_tokens_map.json").write_text(json.dumps({"cls_token": "[CLS]"}))
        layouts = [st, vocab, checkpoint(tmp_path / "sharded", sharded=3),
                   older_layout(st_model(tmp_path / "src"), tmp_path / "old")]
        for d in layouts:
            opened = []
            enc = Encoder(d)
            read, opened = {p for p in opened if p.startswith(str(d.resolve()))}, None
            listed = {str((d / rel).resolve()) for rel in model_files(d)}
            assert read <= listed and listed - read <= {str(enc.location.encoder_path / "tokenizer.json")}, d
            rc, out, _ = run(capsys, "info", d, "--files")
            assert rc == 0 and {str(Path(p).resolve()) for p in out.splitlines()} == listed
            fp_files = cache_fingerprint(enc, enc.spec())[1]["model_files"]
            weights = {str(f.resolve()) for f in enc.weights.files} | {str(d.resolve() / "model.safetensors.index.json")}
            assert {str((d / rel).resolve()) for rel in fp_files} == listed - weights  # in by the weights' sha256
        assert model_files(st) == [rel.replace("2_Dense", "dense") for rel in ST_FILES]


# --------------------------------------------------------------------------- 6. settings that cannot be reproduced
class TestSettingsThatWouldBeSubstitutedAreRefused:
    """Issue 44.2: a module setting bertfeat would otherwise replace or ignore silently (and record in provenance as
    if it were the model's) is refused, naming the file and the keys."""

    @pytest.mark.parametrize("cfg, what", [
        ({"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
          "pooling_mode_max_tokens": False},
         "1_Pooling/config.json: every pooling flag is false (pooling_mode_cls_token, pooling_mode_mean_tokens, "
         "pooling_mode_max_tokens): the file sets no pooling mode"),
        ({"word_embedding_dimension": 32, "pooling_mode_foo_token": True},
         "1_Pooling/config.json: pooling_mode_foo_token is not a setting of a sentence-transformers Pooling module"),
        ({"pooling_mode": "cls", "normalize": True, "pooling_mode_foo": False},
         "1_Pooling/config.json: normalize, pooling_mode_foo are not settings of a sentence-transformers Pooling module"),
        ({"pooling_mode_cls_token": "yes"}, '1_Pooling/config.json: pooling_mode_cls_token is "yes", not a true / false'),
        ({"pooling_mode": "cls", "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True},
         '1_Pooling/config.json: pooling_mode_mean_tokens true contradicts pooling_mode "cls"'),
        ({"pooling_mode": "mean", "include_prompt": "false"},
         '1_Pooling/config.json: include_prompt is "false", not a true / false'),
        ({"pooling_mode": "mean", "embedding_dimension": 32, "word_embedding_dimension": 16},
         "1_Pooling/config.json: word_embedding_dimension 16 is not the encoder's hidden size 32"),
        # (was refused as "--pooling 'cls+mean+cls' names cls twice", an option nobody gave, with a fix of other width)
        ({"pooling_mode": ["cls", "mean", "cls"]},
         '1_Pooling/config.json: pooling_mode ["cls", "mean", "cls"] names cls twice (sentence-transformers '
         "concatenates it again; bertfeat pools each mode once)"),
    ])
    def test_a_pooling_setting_is_refused(self, tmp_path, cfg, what):
        d = st_model(tmp_path / "m")
        (d / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(ConfigError) as e:
            Encoder(d)
        assert e.value.what == what and "\n" not in e.value.message

    def test_all_false_flags_on_the_command_line(self, tmp_path, capsys):
        d = st_model(tmp_path / "m")
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": False,
                                                                 "pooling_mode_mean_tokens": False}))
        extract_refuses(capsys, tmp_path, d, "1_Pooling/config.json: every pooling flag is false (pooling_mode_cls_token, "
                        "pooling_mode_mean_tokens): the file sets no pooling mode - set the flag of the mode the model was "
                        'trained with to true (or give pooling_mode, e.g. "pooling_mode": "mean"); bertfeat does not '
                        "guess one", ["a text"])

    def test_pooling_settings_that_agree_still_load(self, tmp_path):
        d = st_model(tmp_path / "m")
        for cfg, modes in [({"pooling_mode": ["cls", "max"], "pooling_mode_cls_token": True,
                             "pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": False}, ("cls", "max")),
                           ({"embedding_dimension": 32}, ("mean",)),  # no mode at all: Pooling's default
                           ({"pooling_mode_max_tokens": True, "pooling_mode_lasttoken": False}, ("max",))]:
            (d / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
            (d / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32 * len(modes), "out_features": 8}))
            from safetensors.numpy import save_file
            save_file({"linear.weight": np.ones((8, 32 * len(modes)), np.float32), "linear.bias": np.zeros(8, np.float32)},
                      str(d / "2_Dense" / "model.safetensors"))
            assert Encoder(d).pipeline.pooling == modes

    @pytest.mark.parametrize("cfg, tensors, what", [
        ({"bias": "false"}, None, '2_Dense/config.json: bias is "false", not a true / false'),
        ({"use_residual": 1}, None, "2_Dense/config.json: use_residual is 1, not a true / false"),
        ({"activation_function": ["torch.nn.Tanh"]}, None,
         "2_Dense/config.json: activation_function is a JSON list, not a string"),
        ({"bias": False}, None, "{d}/2_Dense/model.safetensors: tensors ['linear.bias'] that its config.json does not "
                                "use (bias false, use_residual false, 32 -> 8)"),
        ({}, {"residual.weight": np.ones((8, 32), np.float32)},
         "{d}/2_Dense/model.safetensors: tensors ['residual.weight'] that its config.json does not use (bias true, "
         "use_residual false, 32 -> 8)"),
    ])
    def test_a_dense_setting_or_tensor_that_would_be_ignored_is_refused(self, tmp_path, cfg, tensors, what):
        from safetensors.numpy import load_file, save_file

        d = st_model(tmp_path / "m")
        c = json.loads((d / "2_Dense" / "config.json").read_text())
        (d / "2_Dense" / "config.json").write_text(json.dumps({**c, **cfg}))
        if tensors:
            save_file({**load_file(str(d / "2_Dense" / "model.safetensors")), **tensors}, str(d / "2_Dense" / "model.safetensors"))
        with pytest.raises(BertfeatError) as e:
            Encoder(d)
        assert e.value.what == what.format(d=d) and "\n" not in e.value.message


# --------------------------------------------------------------------------- 7. special files in place of model files
FIFO_FIX = ("put the model's own file there (bertfeat reads model files whole and never opens a pipe, device or socket "
            "in their place)")


def run_with_timeout(capsys, args, fifo: Path, timeout: float = 60) -> tuple:
    """`bertfeat ARGS` in-process in a thread -> (exit code, stdout, stderr); fails the test after ``timeout`` s (a
    run blocked opening the FIFO is let go first, by opening its other end)."""
    import threading

    capsys.readouterr()
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("rc", main([str(a) for a in args])), daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
            try:
                os.close(os.open(fifo, flags))
            except OSError:
                pass
        t.join(timeout)
        pytest.fail(f"bertfeat {args[0]} waited on the named pipe {fifo} for {timeout} s")
    out = capsys.readouterr()
    return result.get("rc"), out.out, out.err


@pytest.fixture(scope="module")
def special_layouts(tmp_path_factory) -> dict:
    """The three layouts whose files the cases replace: a sentence-transformers folder, a vocab.txt checkpoint with
    added tokens, a sharded checkpoint."""
    root = tmp_path_factory.mktemp("special")
    vocab = checkpoint(root / "vocab")
    (vocab / "added_tokens.json").write_text(json.dumps({"[unused1]": 2}))
    (vocab / "special_tokens_map.json").write_text(json.dumps({"cls_token": "[CLS]"}))
    return {"st": st_model(root / "st"), "vocab": vocab,
            "sharded": make_checkpoint(root / "sharded", hidden=32, layers=2, heads=2, max_position=128, sharded=3)}


class TestSpecialFilesAreRefusedNotOpened:
    """Issue 44.3: a named pipe (or a directory, a device) in place of any model file is refused from its type, one
    line naming it, never opened (opening a FIFO waits for a writer forever) nor passed over for another file."""

    @pytest.mark.parametrize("layout, rel", [
        ("st", "model.safetensors"), ("st", "config.json"), ("st", "modules.json"), ("st", "1_Pooling/config.json"),
        ("st", "2_Dense/config.json"), ("st", "2_Dense/model.safetensors"), ("st", "3_Normalize/config.json"),
        ("st", "tokenizer.json"), ("st", "tokenizer_config.json"), ("st", "sentence_bert_config.json"),
        ("st", "config_sentence_transformers.json"), ("vocab", "vocab.txt"), ("vocab", "added_tokens.json"),
        ("vocab", "special_tokens_map.json"), ("sharded", "model.safetensors.index.json"),
        ("sharded", "model-00002-of-00003.safetensors"),
    ])
    def test_a_named_pipe_is_refused(self, tmp_path, capsys, special_layouts, layout, rel):
        d = tmp_path / "m"
        shutil.copytree(special_layouts[layout], d)
        (d / rel).unlink()
        os.mkfifo(d / rel)
        message = f"Error: {d / rel} is a named pipe (FIFO), not a regular file - {FIFO_FIX}\n"
        assert run_with_timeout(capsys, ["info", d], d / rel) == (1, "", message)
        assert run_with_timeout(capsys, ["info", d, "--files"], d / rel) == (1, "", message)

    def test_extract_in_a_subprocess_does_not_wait(self, tmp_path, special_layouts):
        import subprocess
        import sys

        d = tmp_path / "m"
        shutil.copytree(special_layouts["st"], d)
        (d / "1_Pooling" / "config.json").unlink()
        os.mkfifo(d / "1_Pooling" / "config.json")
        src = write_csv(tmp_path / "in.csv", ["text"], [["a text"]])
        try:
            r = subprocess.run([sys.executable, "-m", "bertfeat", "extract", str(src), "-o", str(tmp_path / "o.parquet"),
                                "--model", str(d), "-q"], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PYTHONPATH": str(Path(bertfeat.__file__).parent.parent)})
        except subprocess.TimeoutExpired:
            pytest.fail("bertfeat extract waited on a named pipe 1_Pooling/config.json")
        assert (r.returncode, r.stderr) == (1, f"Error: {d / '1_Pooling' / 'config.json'} is a named pipe (FIFO), not a "
                                               f"regular file - {FIFO_FIX}\n")
        assert no_leftovers(tmp_path / "o.parquet") == []

    @pytest.mark.parametrize("rel", ["tokenizer.json", "config.json", "1_Pooling/config.json"])
    def test_a_directory_is_refused_not_passed_over(self, tmp_path, special_layouts, rel):
        """A folder named tokenizer.json was taken for absent (the vocab.txt beside it would have been used)."""
        d = tmp_path / "m"
        shutil.copytree(special_layouts["st"], d)
        shutil.copy(VOCABS["uncased"][0], d / "vocab.txt")
        (d / rel).unlink()
        (d / rel).mkdir()
        with pytest.raises(ConfigError) as e:
            Encoder(d)
        assert e.value.message == f"{d / rel} is a directory, not a regular file - {FIFO_FIX}"

    @pytest.mark.parametrize("layout, rel", [
        ("st", "tokenizer.json"), ("st", "modules.json"), ("st", "sentence_bert_config.json"),
        ("st", "config_sentence_transformers.json"), ("st", "3_Normalize/config.json"), ("st", "1_Pooling/config.json"),
        ("sharded", "model.safetensors"),
    ])
    def test_a_broken_link_is_refused_not_taken_for_absent(self, tmp_path, capsys, special_layouts, layout, rel):
        """A link to a missing file (a half-copied Hugging Face cache) was taken for absent: the vocab.txt beside a
        tokenizer.json link was used, modules.json's pipeline or a Normalize module silently left out (found by the
        session's own audit)."""
        d = tmp_path / "m"
        shutil.copytree(special_layouts[layout], d)
        if rel == "tokenizer.json":
            shutil.copy(VOCABS["uncased"][0], d / "vocab.txt")
        if (d / rel).exists():
            (d / rel).unlink()
        (d / rel).symlink_to(d / "gone")  # inside the folder (a link out is refused as leading out of it)
        message = (f"Error: {d / rel} is a broken symbolic link (to {d / 'gone'}, which does not exist) - restore "
                   "the file it points to, or replace the link with the model's own file\n")
        assert run_with_timeout(capsys, ["info", d], d / rel) == (1, "", message)
        assert run_with_timeout(capsys, ["info", d, "--files"], d / rel) == (1, "", message)

    @pytest.mark.parametrize("layout, rel", [("st", "config.json"), ("st", "tokenizer.json"), ("st", "modules.json"),
                                             ("sharded", "model.safetensors"),
                                             ("sharded", "model-00002-of-00003.safetensors")])
    def test_a_loop_of_links_is_refused_by_name(self, tmp_path, capsys, special_layouts, layout, rel):
        """A link that leads round in a loop raised OSError (Python) and, on the command line, a fix about permissions
        and free disk space (a module's file, or sentence_bert_config.json, was refused as one that cannot be
        resolved already)."""
        d = tmp_path / "m"
        shutil.copytree(special_layouts[layout], d)
        if (d / rel).exists():
            (d / rel).unlink()
        (d / rel).symlink_to(d / rel)
        message = (f"{d / rel} is a loop of symbolic links (to {d / rel}, which leads back to it) - replace the link "
                   "with the model's own file")
        with pytest.raises(ConfigError) as e:
            Encoder(d)
        assert e.value.message == message
        assert run_with_timeout(capsys, ["info", d], d / rel) == (1, "", f"Error: {message}\n")


# --------------------------------------------------------------------------- 8. a Dense module that computes nothing
class TestDenseWidthsAreCheckedAtLoad:
    """Issue 44.4: a Dense module with no outputs (or no inputs) ended in "this is a bug in bertfeat" with
    OUTPUT.partial/ left behind; it is refused at load, nothing written."""

    @staticmethod
    def dense(d: Path, path: str, n_in: int, n_out: int) -> None:
        from safetensors.numpy import save_file

        (d / path).mkdir(exist_ok=True)
        (d / path / "config.json").write_text(json.dumps({"in_features": n_in, "out_features": n_out}))
        save_file({"linear.weight": np.ones((n_out, n_in), np.float32), "linear.bias": np.zeros(n_out, np.float32)},
                  str(d / path / "model.safetensors"))

    @pytest.mark.parametrize("n_in, n_out, what", [
        (32, 0, "2_Dense/config.json: out_features is 0, not a number of features (1 or more)"),
        (0, 8, "2_Dense/config.json: in_features is 0, not a number of features (1 or more)"),
        (32, -1, "2_Dense/config.json: out_features is -1, not a number of features (1 or more)"),
    ])
    def test_no_outputs_or_inputs(self, tmp_path, capsys, n_in, n_out, what):
        d = st_model(tmp_path / "m")
        if n_out >= 0:
            self.dense(d, "2_Dense", n_in, n_out)
        else:
            (d / "2_Dense" / "config.json").write_text(json.dumps({"in_features": n_in, "out_features": n_out}))
        message = (f"{what} - restore the Dense module's config.json and model.safetensors from the model (a Dense "
                   "layer maps 1 or more inputs to 1 or more outputs)")
        with pytest.raises(ConfigError) as e:
            Encoder(d)
        assert e.value.message == message
        extract_refuses(capsys, tmp_path, d, message, ["a text", "another"])

    def test_a_chain_through_zero_and_a_missing_width(self, tmp_path):
        """32 -> 0 -> 8 matched widths (a constant vector from the bias alone); a config without out_features read as
        -1."""
        d = st_model(tmp_path / "m")
        self.dense(d, "2_Dense", 32, 0)
        self.dense(d, "2b_Dense", 0, 8)
        mods = json.loads((d / "modules.json").read_text())
        mods.insert(3, {"idx": 3, "name": "2b", "path": "2b_Dense", "type": "sentence_transformers.models.Dense"})
        (d / "modules.json").write_text(json.dumps(mods))
        with pytest.raises(ConfigError, match=r"^2_Dense/config.json: out_features is 0, not a number of features"):
            Encoder(d)
        (d / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32}))
        with pytest.raises(ConfigError, match=r"^2_Dense/config.json: out_features is missing, not a number of features"):
            Encoder(d)

    def test_a_width_that_does_not_follow_the_module_before(self, tmp_path):
        d = st_model(tmp_path / "m")
        self.dense(d, "2_Dense", 16, 8)
        with pytest.raises(ConfigError) as e:
            Encoder(d)
        assert e.value.message == ("2_Dense: in_features 16 does not match the 32 dimensions before it - use the "
                                   "modules that came with this model")


# --------------------------------------------------------------------------- round three's audit of model folders
def test_a_float64_value_beyond_float32_is_refused_not_read_as_infinity(tmp_path):
    """Finite in the file's float64 but infinite as float32: it passed the NaN / inf check and --pooling pooled gave
    1.0 in that column."""
    d = checkpoint(tmp_path / "m")
    edit_tensors(d, lambda t: [t.__setitem__(k, v.astype(np.float64)) for k, v in list(t.items())]
                 and t["pooler.dense.bias"].__setitem__(0, 1e39))
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert str(e.value) == (f"{d / 'model.safetensors'}: tensor 'pooler.dense.bias' holds a value beyond float32's "
                            "range (1e+39), which would be infinite as bertfeat reads it - the checkpoint is corrupt or "
                            "was saved from a diverged training run: re-download or re-save it")


def test_weights_named_for_another_family_than_the_config_are_refused(tmp_path):
    """RoBERTa weights (roberta.*) under model_type "bert" loaded as BERT, positions from 0: every vector wrong."""
    from st_ckpt import roberta_checkpoint

    d = roberta_checkpoint(tmp_path / "m", model_type="roberta", hidden=32, layers=2, heads=2, prefix=True).resolve()
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "bert"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightsError) as e:
        Encoder(d)
    assert str(e.value).startswith(f"{d / 'model.safetensors'}: tensor 'roberta.")
    assert str(e.value).endswith("' is named as in a RoBERTa checkpoint, but config.json says model_type 'bert' - use "
                                 "the config.json that came with these weights (model_type 'roberta')")


def test_a_roberta_config_without_pad_token_id_counts_positions_as_transformers(tmp_path):
    """transformers' RobertaConfig defaults pad_token_id to 1 (positions start at 2); bertfeat took 0. The vectors
    changed, so the cache key does too (a vector cached before is never served as one of now)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from st_ckpt import roberta_checkpoint

    d = roberta_checkpoint(tmp_path / "m", model_type="roberta", hidden=32, layers=2, heads=2).resolve()
    cfg = json.loads((d / "config.json").read_text())
    del cfg["pad_token_id"]
    (d / "config.json").write_text(json.dumps(cfg))
    texts = ["a short text", "another, longer text with more words in it"]
    tok, ref = transformers.AutoTokenizer.from_pretrained(str(d)), transformers.AutoModel.from_pretrained(str(d))
    with torch.no_grad():
        want = np.stack([ref(**tok(t, return_tensors="pt")).last_hidden_state[0].mean(0).numpy() for t in texts])
    enc = Encoder(d)
    got = enc.encode(texts, pooling="mean", normalize=False)
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert enc.fingerprint(enc.spec())["pad_token_id"] == 1
    cfg["pad_token_id"] = 1  # the same vectors, said by the config: the key of before
    (d / "config.json").write_text(json.dumps(cfg))
    assert "pad_token_id" not in Encoder(d).fingerprint(enc.spec())


def test_an_xlm_roberta_tokenizer_class_tokenizes_as_transformers_5_and_keys_its_vectors_apart(tmp_path):
    """An XLMRobertaTokenizer folder whose tokenizer.json has transformers 4's pipeline (runs of spaces replaced, a lone
    Metaspace) is tokenized as transformers 5 rebuilds it: the vectors of texts with trailing spaces or newlines are
    transformers'. Its vectors were other ones before, so the cache key says so (never served as one of now)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from st_ckpt import roberta_checkpoint

    d = roberta_checkpoint(tmp_path / "m", model_type="xlm-roberta", hidden=32, layers=2, heads=2).resolve()
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"Regex": " {2,}"},
                                                             "content": " "}]}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    tc = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tc, "tokenizer_class": "XLMRobertaTokenizer"}))
    texts = ["a text with a trailing space ", "tab\tand newline\n", "plain text"]
    tok, ref = transformers.AutoTokenizer.from_pretrained(str(d)), transformers.AutoModel.from_pretrained(str(d))
    with torch.no_grad():
        want = np.stack([ref(**tok(t, return_tensors="pt")).last_hidden_state[0].mean(0).numpy() for t in texts])
    enc = Encoder(d)
    np.testing.assert_allclose(enc.encode(texts, pooling="mean", normalize=False), want, atol=2e-5)
    assert enc.fingerprint(enc.spec())["tokenizer_rebuild"] == "sentencepiece"
    (d / "tokenizer_config.json").write_text(json.dumps(tc))  # PreTrainedTokenizerFast: as stored, the key of before
    assert "tokenizer_rebuild" not in Encoder(d).fingerprint(enc.spec())


def test_an_xlm_roberta_folder_saved_by_transformers_5_keeps_its_key(tmp_path):
    """An XLMRobertaTokenizer folder whose tokenizer.json transformers 5 wrote (AutoTokenizer.save_pretrained: the
    pipeline as it rebuilds it) tokenizes as it did before the rebuild, so its vectors keep their cache key; a folder
    whose stored pipeline the rebuild changes does not."""
    transformers = pytest.importorskip("transformers")
    from st_ckpt import roberta_checkpoint

    src = roberta_checkpoint(tmp_path / "m", model_type="xlm-roberta", hidden=32, layers=2, heads=2).resolve()
    tc = json.loads((src / "tokenizer_config.json").read_text())
    (src / "tokenizer_config.json").write_text(json.dumps({**tc, "tokenizer_class": "XLMRobertaTokenizer"}))
    saved = tmp_path / "saved"
    transformers.AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(saved))
    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(src / f, saved / f)
    enc = Encoder(saved)
    assert enc.tokenizer.rebuilt == "sentencepiece" and "tokenizer_rebuild" not in enc.fingerprint(enc.spec())
    tj = json.loads((saved / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    (saved / "tokenizer.json").write_text(json.dumps(tj))  # transformers 4's lone Metaspace: rebuilt, keyed apart
    assert Encoder(saved).fingerprint(enc.spec())["tokenizer_rebuild"] == "sentencepiece"


def test_a_model_given_as_a_file_or_an_empty_name_is_refused(tmp_path):
    from bertfeat.model.hub import ModelNotFoundError, resolve_model

    d = checkpoint(tmp_path / "m")
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(d / "config.json")
    assert str(e.value) == (f"the model {d / 'config.json'} is a file, not a model folder - pass the folder that holds "
                            f"it, {d} (config.json, the weights and the tokenizer files together)")
    with pytest.raises(ModelNotFoundError, match="^the model name is empty - "):
        resolve_model("")


def test_inspecting_a_pair_on_a_one_token_type_model_is_refused_as_extract_refuses_it(tmp_path):
    """attention / fill-mask with a pair on a type_vocab_size 1 model ended in 'unexpected IndexError ... a bug'."""
    from bertfeat.inspection import attention_maps, masked_lm_logits

    d = checkpoint(tmp_path / "m", type_vocab=1, mlm_head=True)
    for call in (lambda: attention_maps("hello", "world", model=str(d)),
                 lambda: masked_lm_logits("hello [MASK]", "world", model=str(d))):
        with pytest.raises(BertfeatError, match=r"has one token type \(type_vocab_size 1\), so it cannot mark the "
                                                r"second text of a sentence pair"):
            call()


#: tokenizer_config.json edits -> do transformers' tokenizers give the model token_type_ids (model_input_names)?
PAIR_TYPE_CASES = {
    "model_input_names_without_types": ({"model_input_names": ["input_ids", "attention_mask"]}, False),
    "pretrained_tokenizer_fast_class": ({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]"}, False),
    "distilbert_tokenizer_class": ({"tokenizer_class": "DistilBertTokenizer"}, False),
    "bert_tokenizer_class": ({"tokenizer_class": "BertTokenizer"}, True),
    "model_input_names_with_types": ({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]",
                                      "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}, True),
}


@pytest.mark.live
@pytest.mark.parametrize("case", list(PAIR_TYPE_CASES))
def test_pairs_take_token_types_only_from_a_tokenizer_that_gives_them(tmp_path, case):
    """A BERT (two token types) whose tokenizer gives no token_type_ids (tokenizer_config.json's model_input_names,
    else its class's: PreTrainedTokenizerFast, DistilBertTokenizer ...) runs a pair with every token of type 0 in
    transformers; bertfeat gave the second text type 1 (cos 0.69-0.82 against transformers). Pooled vectors within
    1e-5 of AutoTokenizer + AutoModel's now, and such a model's cache key says so."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    edit, typed_pairs = PAIR_TYPE_CASES[case]
    d = make_checkpoint(tmp_path / "m", tokenizer="json")
    tc = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tc, **edit}))
    A, B = ["a first text here", "short"], ["the second text of the pair", "another one, longer than the first"]
    tok = AutoTokenizer.from_pretrained(str(d))
    batch = tok(A, B, padding=True, return_tensors="pt")
    assert ("token_type_ids" in batch) == typed_pairs
    with torch.no_grad():
        h = AutoModel.from_pretrained(str(d)).eval()(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    want = ((h * mask).sum(1) / mask.sum(1)).numpy()
    enc = Encoder(d)
    np.testing.assert_allclose(enc.encode(A, B, pooling="mean"), want, atol=1e-5)
    fp = enc.fingerprint(enc.spec(pooling="mean", pairs=True))
    assert fp.get("pair_token_types") == (None if typed_pairs else "none (the tokenizer gives no token_type_ids)")
    # single texts keep their key (a PCA fitted on them, their cache entries): only runs of pairs record it
    assert "pair_token_types" not in enc.fingerprint(enc.spec(pooling="mean"))


@pytest.mark.live
def test_a_single_texts_template_types_are_dropped_when_the_tokenizer_gives_no_token_type_ids(tmp_path):
    """A tokenizer.json whose single-text template gives type 1 (here every token), in a folder whose tokenizer gives
    the model no token_type_ids (PreTrainedTokenizerFast): transformers runs every token as type 0; bertfeat ran the
    template's 1 for single texts (max abs diff 1.42 against sentence-transformers, exit 0; `tokens` showed 0; found
    by audit), and a model with one token type crashed (IndexError). Now within 1e-5 of AutoModel's and bit for bit
    the folder whose template gives type 0, chunked long texts and attention maps too; the key records it."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from safetensors.numpy import load_file, save_file

    from bertfeat.inspection import attention_maps
    from bertfeat.verify import verify_features

    plain = make_checkpoint(tmp_path / "plain", tokenizer="json")
    tc = json.loads((plain / "tokenizer_config.json").read_text())
    (plain / "tokenizer_config.json").write_text(json.dumps({**tc, "tokenizer_class": "PreTrainedTokenizerFast",
                                                             "pad_token": "[PAD]"}))
    typed = tmp_path / "typed"
    shutil.copytree(plain, typed)
    tj = json.loads((typed / "tokenizer.json").read_text())
    tj["post_processor"]["single"] = [{"SpecialToken": {"id": "[CLS]", "type_id": 1}},
                                      {"Sequence": {"id": "A", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}]
    (typed / "tokenizer.json").write_text(json.dumps(tj))
    texts = ["hello world", "A man is playing a guitar.", "word " * 300]
    tok = AutoTokenizer.from_pretrained(str(typed))
    batch = tok(texts[:2], padding=True, return_tensors="pt")
    assert "token_type_ids" not in batch
    with torch.no_grad():
        h = AutoModel.from_pretrained(str(typed)).eval()(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    enc, ref = Encoder(typed), Encoder(plain)
    np.testing.assert_allclose(enc.encode(texts[:2], pooling="mean"), ((h * mask).sum(1) / mask.sum(1)).numpy(),
                               atol=1e-5)
    for long_text in ("truncate", "chunk-mean"):
        assert np.array_equal(enc.encode(texts, pooling="mean", long_text=long_text, max_length=64),
                              ref.encode(texts, pooling="mean", long_text=long_text, max_length=64))
    assert np.array_equal(attention_maps(texts[0], encoder=enc)[1], attention_maps(texts[0], encoder=ref)[1])
    assert enc.fingerprint(enc.spec(pooling="mean"))["token_types"] == "none (the tokenizer gives no token_type_ids)"
    assert "token_types" not in ref.fingerprint(ref.spec(pooling="mean"))  # every other model keeps its key
    src = write_csv(tmp_path / "in.csv", ["text"], [[t] for t in texts])
    s = bertfeat.extract(src, tmp_path / "f.parquet", model=str(typed), text_column="text", quiet=True)
    assert verify_features(s.outputs["features"])["ok"]
    one = tmp_path / "one"  # one token type: the template's 1 has no row in the table
    shutil.copytree(typed, one)
    cfg = json.loads((one / "config.json").read_text())
    (one / "config.json").write_text(json.dumps({**cfg, "type_vocab_size": 1}))
    w = load_file(one / "model.safetensors")
    key = next(k for k in w if k.endswith("token_type_embeddings.weight"))
    w[key] = w[key][:1].copy()
    save_file(w, one / "model.safetensors")
    assert np.array_equal(Encoder(one).encode(texts[:2], pooling="mean"), ref.encode(texts[:2], pooling="mean"))


@pytest.mark.live
@pytest.mark.parametrize("type_vocab", [2, 1])
def test_a_roberta_with_a_wordpiece_tokenizer_takes_its_pair_types_from_the_tokenizer(tmp_path, type_vocab):
    """A RoBERTa checkpoint with two token types and a BertTokenizer (which gives token_type_ids): transformers embeds
    the second text of a pair as type 1; bertfeat gave every token type 0 by the family's rule (cos 0.854 against
    transformers, max abs diff 0.77; `tokens --pair` showed all 0). With one token type (klue/roberta's layout)
    transformers fails on type 1 (IndexError); bertfeat keeps type 0, RoBERTa's own pairs. Only the changed runs of
    pairs record it in their key."""
    import torch
    from transformers import AutoModel, AutoTokenizer, RobertaConfig, RobertaModel

    tok = AutoTokenizer.from_pretrained(str(make_checkpoint(tmp_path / "bert", hidden=32, layers=1, heads=2,
                                                            tokenizer="json")))
    d = tmp_path / "m"
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=37, pad_token_id=0, max_position_embeddings=130,
                                       type_vocab_size=type_vocab)).eval()
    for name, prm in model.named_parameters():
        if "token_type" in name:  # a type-1 row far from type 0's, so a wrong type shows
            torch.nn.init.normal_(prm, std=1.0)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    A, B = ["A man plays a guitar.", "short"], ["Someone makes music.", "another one, longer than the first"]
    batch = AutoTokenizer.from_pretrained(str(d))(A, B, padding=True, return_tensors="pt")
    enc = Encoder(d)
    got = enc.encode(A, B, pooling="mean")
    if type_vocab == 1:
        batch["token_type_ids"].zero_()  # (transformers fails on the tokenizer's type 1 here)
    with torch.no_grad():
        h = AutoModel.from_pretrained(str(d)).eval()(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    np.testing.assert_allclose(got, ((h * mask).sum(1) / mask.sum(1)).numpy(), atol=1e-5)
    fp = enc.fingerprint(enc.spec(pooling="mean", pairs=True))
    assert fp.get("pair_token_types") == ("0 and 1 (the tokenizer gives token_type_ids)" if type_vocab == 2 else None)
    assert "pair_token_types" not in enc.fingerprint(enc.spec(pooling="mean"))


def test_only_runs_of_pairs_record_untyped_pair_token_types(tmp_path):
    """A BERT whose tokenizer gives no token_type_ids (DistilBertTokenizer here; paraphrase-multilingual-MiniLM's
    XLMRobertaTokenizer in the wild): a run of single texts keeps the fingerprint it had before pairs were typed 0 (a
    PCA model fitted on such features, and their cache entries, still serve); a run of pairs records the setting, and
    verify re-encodes its rows as written."""
    from bertfeat.verify import verify_features

    d = make_checkpoint(tmp_path / "m", tokenizer="json")
    tc = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tc, "tokenizer_class": "DistilBertTokenizer"}))
    src = write_csv(tmp_path / "in.csv", ["text", "pair"], [["a first text", "its pair"], ["another", "one more"]])
    single = bertfeat.extract(src, tmp_path / "single.parquet", model=str(d), text_column="text", quiet=True)
    pairs = bertfeat.extract(src, tmp_path / "pairs.parquet", model=str(d), text_column="text", pair_column="pair",
                             quiet=True)

    def fingerprint(s):
        return json.loads(pq.read_schema(s.outputs["features"]).metadata[b"bertfeat"])["fingerprint"]

    assert "pair_token_types" not in fingerprint(single)
    assert fingerprint(pairs)["pair_token_types"] == "none (the tokenizer gives no token_type_ids)"
    assert verify_features(pairs.outputs["features"])["ok"]
    assert verify_features(single.outputs["features"])["ok"]
