"""Issue 25, items 3 and 7: a hostile or broken model, and bad arguments to the Python API.

* weights holding NaN / inf are refused at load, naming the tensor as the checkpoint names it and how many values;
* features that come out NaN / inf are refused naming the texts (Python) or the input rows (`bertfeat extract`),
  never returned or written;
* a tokenizer that can produce ids past the word embedding table is refused at load, naming the three sizes (a
  table larger than the tokenizer, as padded vocabularies have, still loads);
* ``Encoder(threads=0)`` / ``Encoder(max_batch_tokens=0)`` are refused in the words ``bertfeat.extract`` uses, and
  ``Encoder.encode`` refuses a text that is not a string naming its index.

Each through the Python API and, where the command line reaches it, through `bertfeat extract` in-process: exit 1,
the exact one-line ``Error: ...``, no output and no ``.partial/`` left, the input unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import bertfeat
from bertfeat import BertfeatError, Encoder
from ckpt import make_checkpoint
from extract_util import no_leftovers, run, tiny_encoder, tiny_model, write_csv



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
