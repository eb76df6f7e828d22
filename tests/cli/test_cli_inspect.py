"""`bertfeat tokens`, `bertfeat attention`, `bertfeat fill-mask` through ``cli.app.main``: output, files, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import need_live  # noqa: E402

pytestmark = pytest.mark.live  # every test here compares against transformers run live
torch = need_live("torch")
transformers = need_live("transformers")

from ckpt import expected_tokens, make_checkpoint, reference_model  # noqa: E402

from bertfeat.cli.app import main  # noqa: E402
from bertfeat.inspection import attention_maps, fill_mask  # noqa: E402

DEFAULT_ID = "sentence-transformers/all-MiniLM-L6-v2"
NO_HEAD = ("has no masked-language-model head (cls.predictions.*) - use a checkpoint saved with its MLM head, "
           "e.g. bert-base-uncased")


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("cli_inspect") / "mlm", mlm_head=True, seed=7)


@pytest.fixture(scope="module")
def zh_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("cli_inspect") / "zh", vocab="chinese", seed=8)


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def png_size(path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        assert im.format == "PNG"
        im.load()
        return im.size


# --------------------------------------------------------------------------- tokens
@pytest.mark.parametrize("which,text,pair,max_length", [
    ("default", "Hello, unaffable world! Naïve café?", None, None),
    ("default", "The cat sat.", "Where did the cat sit?", None),
    ("default", "北京是中国的首都", None, None),
    ("default", "one two three four five six seven", "eight nine ten eleven", 9),
    ("mlm", "Hello, unaffable world! [MASK]", "a pair", None),
    ("zh", "一个戴着硬帽子的人在跳舞。", "他说：“今天天气很好！”", None),
    ("zh", "一个戴着硬帽子的人在跳舞。", "他说：“今天天气很好！”", 10),
])
def test_tokens_json_is_exactly_transformers(which, text, pair, max_length, capsys, minilm_dir, mlm_dir, zh_dir):
    d = {"default": minilm_dir, "mlm": mlm_dir, "zh": zh_dir}[which]
    argv = ["tokens", text, "--json"]
    argv += ["--pair", pair] if pair is not None else []
    argv += ["--max-length", max_length] if max_length else []
    argv += ["--model", d] if which != "default" else []
    rc, out, err = run(capsys, *argv)
    assert rc == 0 and err == ""
    model_id = DEFAULT_ID if which == "default" else str(d.resolve())
    default_max = 256 if which == "default" else 512  # sentence_bert_config.json max_seq_length, else max positions
    assert json.loads(out) == expected_tokens(d, model_id, text, pair, max_length or default_max)
    assert out.count("\n{") == 0 and out.startswith("{") and out.rstrip().endswith("}")  # one object


def _table_rows(out: str) -> list[list[str]]:
    rows = []
    for line in out.splitlines():
        if line.startswith("│"):
            rows.append([c.strip() for c in line.strip("│").split("│")])
    return rows


def test_tokens_table(capsys, minilm_dir):
    text, pair = "Unaffable [MASK] cats!", "第二"
    rc, out, err = run(capsys, "tokens", text, "--pair", pair)
    assert rc == 0 and err == ""
    want = expected_tokens(minilm_dir, DEFAULT_ID, text, pair, 256)
    assert "position" in out and "wordpiece" in out and "token type id" in out and "attention mask" in out
    assert _table_rows(out) == [
        [str(i), t, str(id_), str(tt), str(m)]
        for i, (t, id_, tt, m) in enumerate(zip(want["tokens"], want["input_ids"], want["token_type_ids"], want["attention_mask"]))
    ]
    assert "[MASK]" in want["tokens"] and "[CLS]" in out  # printed as is, not taken for rich markup
    assert out.rstrip().splitlines()[-1] == f"not truncated: {want['n_tokens']} tokens (max length 256)"

    rc, out, err = run(capsys, "tokens", "one two three four five", "--max-length", 4)
    assert rc == 0
    assert [r[1] for r in _table_rows(out)] == ["[CLS]", "one", "two", "[SEP]"]
    assert out.rstrip().splitlines()[-1] == "truncated: 7 tokens cut to 4 (max length 4)"


@pytest.mark.parametrize("edit", [{"tokenizer_class": "DistilBertTokenizer"},
                                  {"model_input_names": ["input_ids", "attention_mask"]}])
def test_tokens_of_a_pair_show_the_token_types_the_model_receives(capsys, tmp_path, edit):
    """A BERT whose tokenizer gives the model no token_type_ids (its class's model_input_names, or
    tokenizer_config.json's): transformers runs a pair with every token of type 0, and so does bertfeat
    (Encoder.pairs_untyped), but `tokens --pair` showed the template's 0 then 1. It shows what the model receives."""
    d = make_checkpoint(tmp_path / "m", tokenizer="json")
    tc = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tc, **edit}))
    text, pair = "The cat sat.", "Where did it sit?"
    want = transformers.AutoTokenizer.from_pretrained(str(d))(text, pair)
    assert "token_type_ids" not in want  # the model gets none: BertModel embeds every token as type 0
    rc, out, err = run(capsys, "tokens", text, "--pair", pair, "--model", d, "--json")
    assert rc == 0 and err == ""
    got = json.loads(out)
    assert got["input_ids"] == want["input_ids"] and got["token_type_ids"] == [0] * len(want["input_ids"])
    rc, out, err = run(capsys, "tokens", text, "--pair", pair, "--model", d)
    assert rc == 0 and [r[3] for r in _table_rows(out)] == ["0"] * len(want["input_ids"])


def test_tokens_escape_c1_del_and_bidi_controls(capsys, tmp_path):
    """An XLM-R tokenizer keeps U+009B (an 8-bit CSI), DEL and a right-to-left override as wordpieces: the table
    printed them raw (the override reorders the rest of the row in a bidi terminal), and --json printed them and
    the text raw too (json.dumps escapes C0 alone). Each is now escaped, in the table as Python writes it, in the
    JSON as a \\u escape: the same JSON value."""
    from st_ckpt import roberta_checkpoint

    d = roberta_checkpoint(tmp_path / "xlmr", hidden=32, layers=1, heads=2)
    text = "a\x9b31mX \u202eb\x7f \u2066c\u200f"
    raw = "\x9b\x7f\u202e\u2066\u200f"
    rc, out, err = run(capsys, "tokens", text, "--model", d, "--json")
    assert (rc, err) == (0, "") and not any(c in out for c in raw), repr(out)
    got = json.loads(out)
    assert got["text"] == text and {"\x9b", "\u202e"} <= set(got["tokens"])
    assert '"text": "a\\u009b31mX \\u202eb\\u007f \\u2066c\\u200f"' in out
    rc, out, err = run(capsys, "tokens", text, "--model", d)
    assert (rc, err) == (0, "") and not any(c in out for c in raw), repr(out)
    cells = [r[1] for r in _table_rows(out)]
    assert "\\x9b" in cells and "\\u202e" in cells


def test_tokens_errors(capsys):
    rc, out, err = run(capsys, "tokens", "hi", "--max-length", 1000)
    assert (rc, out) == (1, "")
    assert err == "Error: --max-length 1000 is out of range - choose 3..512 (the model's max_position_embeddings)\n"


# --------------------------------------------------------------------------- attention
def test_attention_one_head_and_npy(capsys, tmp_path):
    png, npy = tmp_path / "attn.png", tmp_path / "attn.npy"
    text = "The cat sat on the mat."
    rc, out, err = run(capsys, "attention", text, "--layer", -1, "--head", 3, "-o", png, "--save-npy", npy)
    assert rc == 0 and out == ""  # what was written goes to stderr, as for every command that writes files
    tokens, attn = attention_maps(text)
    T = len(tokens)
    assert err.splitlines() == [f"wrote {png} (layer 5, head 3, {T} tokens, 800x800 px)",
                                f"wrote {npy} (float32, layers x heads x T x T = 6 x 12 x {T} x {T})"]
    assert png_size(png) == (800, 800)
    a = np.load(npy)
    assert a.dtype == np.float32 and a.shape == (6, 12, T, T) and np.array_equal(a, attn)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn.npy", "attn.png"]


def test_attention_all_heads_grid(capsys, tmp_path, zh_dir):
    png = tmp_path / "grid.png"
    rc, out, err = run(capsys, "attention", "The cat sat.", "--pair", "It did.", "--all-heads", "-o", png)
    assert (rc, out, err) == (0, "", f"wrote {png} (layer 5, 12 heads, 10 tokens, 1600x1200 px)\n")
    assert png_size(png) == (1600, 1200)  # 12 heads: 4 x 3 cells of 400 px
    rc, out, err = run(capsys, "attention", "一个戴着硬帽子的人", "--all-heads", "--layer", 0, "-o", png, "--model", zh_dir, "--overwrite")
    assert rc == 0 and out == "" and len(err.splitlines()) == 1  # no missing-glyph warnings either
    assert err.startswith(f"wrote {png} (layer 0, 4 heads, ")
    assert png_size(png) == (1600, 400)  # 4 heads in one row


@pytest.mark.parametrize("args,message", [
    (["--layer", 6], "Error: --layer 6 is out of range - the model has 6 layers: choose 0..5, or -6..-1 from the end"),
    (["--layer", -7], "Error: --layer -7 is out of range - the model has 6 layers: choose 0..5, or -6..-1 from the "
                      "end"),
    (["--head", 12], "Error: --head 12 is out of range - the model has 12 heads per layer: choose 0..11, or -12..-1 "
                     "from the end"),
    (["--head", -13, "--layer", 0], "Error: --head -13 is out of range - the model has 12 heads per layer: choose "
                                    "0..11, or -12..-1 from the end"),
    (["--head", 1, "--all-heads"], "Error: --head and --all-heads exclude each other - give --head N for one head, or --all-heads for the grid"),
    (["--save-npy", "{tmp}/a.txt"], "Error: --save-npy {tmp}/a.txt does not end in .npy - give --save-npy a file name ending in .npy"),
])
def test_attention_errors(args, message, capsys, tmp_path):
    args = [str(a).format(tmp=tmp_path) for a in args]
    rc, out, err = run(capsys, "attention", "hello", "-o", tmp_path / "a.png", *args)
    assert (rc, out, err) == (1, "", message.format(tmp=tmp_path) + "\n")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_attention_output_errors(capsys, tmp_path):
    rc, out, err = run(capsys, "attention", "hello", "-o", tmp_path / "a.pdf")
    assert (rc, err) == (1, f"Error: -o {tmp_path}/a.pdf does not end in .png - give -o a file name ending in .png\n")
    rc, out, err = run(capsys, "attention", "hello", "-o", tmp_path / "missing" / "a.png")
    assert (rc, err) == (1, f"Error: cannot write {tmp_path}/missing/a.png: directory {tmp_path}/missing does not exist"
                            " - create it, or choose another path\n")
    assert list(tmp_path.iterdir()) == []
    # --save-npy into a missing folder: refused before the PNG was written (it was left behind, the run failed)
    rc, out, err = run(capsys, "attention", "hello", "-o", tmp_path / "a.png", "--save-npy", tmp_path / "missing" / "a.npy")
    assert (rc, err) == (1, f"Error: cannot write {tmp_path}/missing/a.npy: directory {tmp_path}/missing does not exist"
                            " - create it, or choose another path\n")
    assert list(tmp_path.iterdir()) == []


def test_attention_npy_through_a_link_to_the_png_is_refused(capsys, tmp_path):
    png, npy = tmp_path / "a.png", tmp_path / "a.npy"
    npy.symlink_to(png)
    rc, out, err = run(capsys, "attention", "x", "-o", png, "--save-npy", npy, "--overwrite")
    assert (rc, out, err) == (1, "", f"Error: --save-npy {npy} is the PNG output too - give the two outputs different "
                                     "names\n")
    assert not png.exists()


def test_attention_existing_outputs_name_their_option(capsys, tmp_path):
    """An existing (or directory) output's fix names the option that gave it: -o for the PNG, --save-npy for the
    .npy; --overwrite replaces both."""
    png, npy = tmp_path / "a.png", tmp_path / "attn.npy"
    npy.write_bytes(b"old")
    rc, out, err = run(capsys, "attention", "x", "-o", png, "--save-npy", npy)
    assert (rc, out, err) == (1, "", f"Error: {npy} already exists - pass --overwrite to replace it, or --save-npy "
                                     "with another name\n")
    png.write_bytes(b"old")
    rc, out, err = run(capsys, "attention", "x", "-o", png, "--save-npy", npy)
    assert (rc, err) == (1, f"Error: {png} already exists - pass --overwrite to replace it, or -o with another name\n")
    assert png.read_bytes() == npy.read_bytes() == b"old"
    d = tmp_path / "d.npy"
    d.mkdir()
    rc, out, err = run(capsys, "attention", "x", "-o", png, "--save-npy", d, "--overwrite")
    assert (rc, err) == (1, f"Error: the --save-npy file {d} is a directory - pass --save-npy with a file name, e.g. "
                            f"--save-npy {d / 'attention.npy'}\n")
    rc, out, err = run(capsys, "attention", "x", "-o", png, "--save-npy", npy, "--overwrite")
    assert rc == 0 and png_size(png) == (800, 800) and np.load(npy).shape[:2] == (6, 12)


def test_attention_npy_is_np_saves_bytes_and_a_failed_one_writes_neither_file(capsys, tmp_path, monkeypatch):
    """A --save-npy that failed (a full disk, ulimit -f) left the new PNG in place (or the old one replaced), exit 1,
    and said '276768 requested and 51168 written', naming no file and no cause (np.save's short write). Now both
    files or neither, and the .npy's error is the file system's, with the file."""
    import errno
    import io

    import bertfeat.inspection as inspection

    png, npy = tmp_path / "attn.png", tmp_path / "attn.npy"
    rc, _, _ = run(capsys, "attention", "old text", "-o", png, "--save-npy", npy)
    buf = io.BytesIO()
    np.save(buf, attention_maps("old text")[1])
    assert rc == 0 and npy.read_bytes() == buf.getvalue()  # the same bytes as np.save's
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full(fh, a):
        fh.write(b"\x93NUMPY")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(inspection, "_write_npy", full)
    rc, out, err = run(capsys, "attention", "a new text", "-o", png, "--save-npy", npy, "--overwrite")
    assert (rc, out, err) == (1, "", f"Error: {npy}: no space left on the device - free disk space or write elsewhere "
                                     "(another -o, or redirect the output), then rerun\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    fresh = tmp_path / "new"
    fresh.mkdir()
    rc, _, _ = run(capsys, "attention", "x", "-o", fresh / "a.png", "--save-npy", fresh / "a.npy")
    assert rc == 1 and list(fresh.iterdir()) == []


def test_attention_quiet_prints_nothing_and_writes_the_same_files(capsys, tmp_path):
    """-q as pca transform's: nothing on success (the `wrote` lines went to stderr with no way to silence them)."""
    png, npy = tmp_path / "q.png", tmp_path / "q.npy"
    for flag in ("-q", "--quiet"):
        rc, out, err = run(capsys, "attention", "The cat sat.", "-o", png, "--save-npy", npy, flag, "--overwrite")
        assert (rc, out, err) == (0, "", "")
        assert png_size(png) == (800, 800) and np.array_equal(np.load(npy), attention_maps("The cat sat.")[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.npy", "q.png"]
    rc, out, err = run(capsys, "attention", "The cat sat.", "-o", png, "-q")  # errors still say why
    assert (rc, out, err) == (1, "", f"Error: {png} already exists - pass --overwrite to replace it, or -o with another "
                                     "name\n")


def test_attention_output_is_required(capsys):
    rc, out, err = run(capsys, "attention", "hello")  # a usage error: one line, exit code 2 (click's)
    assert (rc, out, err) == (2, "", "Error: missing option -o/--output - see bertfeat attention --help\n")


# --------------------------------------------------------------------------- fill-mask
def test_fill_mask_json_and_table(capsys, mlm_dir):
    text = "The capital of [MASK] is [MASK]."
    rc, out, err = run(capsys, "fill-mask", text, "--top-k", 3, "--model", mlm_dir, "--json")
    assert rc == 0 and err == ""
    got = json.loads(out)
    assert got == fill_mask(text, 3, str(mlm_dir))
    # against BertForMaskedLM
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(str(mlm_dir))
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        logits = reference_model(mlm_dir)(**enc).logits[0]
    pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[:, 0].tolist()
    assert len(got) == len(pos) == 2
    for preds, p in zip(got, pos):
        top = torch.topk(logits[p], 3)
        assert [c["id"] for c in preds] == top.indices.tolist()
        assert [c["token"] for c in preds] == tok.convert_ids_to_tokens(top.indices.tolist())
        assert np.allclose([c["score"] for c in preds], torch.softmax(logits[p].double(), -1)[top.indices].numpy(), atol=1e-5)

    rc, out, err = run(capsys, "fill-mask", text, "--top-k", 3, "--model", mlm_dir)
    assert rc == 0 and err == ""
    assert "[MASK] 1 of 2" in out and "[MASK] 2 of 2" in out
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line.startswith("│")]
    assert rows == [[str(r), c["token"], str(c["id"]), f"{c['score']:.4f}"] for preds in got for r, c in enumerate(preds, 1)]


def test_fill_mask_table_names_the_models_mask_token(capsys, tmp_path):
    """A RoBERTa-style model's mask is <mask>: the tables say so (they said [MASK] whatever the model)."""
    from st_ckpt import roberta_checkpoint
    from transformers import RobertaForMaskedLM, RobertaTokenizerFast

    d = roberta_checkpoint(tmp_path / "rob", model_type="roberta", mlm_head=True, seed=3)
    text = "hello <mask> world"
    rc, out, err = run(capsys, "fill-mask", text, "--top-k", 2, "--model", d)
    assert (rc, err) == (0, "")
    assert "<mask> 1 of 1" in out and "[MASK]" not in out
    tok = RobertaTokenizerFast.from_pretrained(str(d))
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        logits = RobertaForMaskedLM.from_pretrained(str(d)).eval()(**enc).logits[0]
    p = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0])
    ids = [int(line.split("│")[3]) for line in out.splitlines() if line.startswith("│")]
    assert ids == torch.topk(logits[p], 2).indices.tolist()


def test_fill_mask_errors(capsys, mlm_dir):
    rc, out, err = run(capsys, "fill-mask", "The capital of France is [MASK].")
    assert (rc, out, err) == (1, "", f"Error: {DEFAULT_ID} {NO_HEAD}\n")
    rc, out, err = run(capsys, "fill-mask", "The capital of France is Paris.", "--model", mlm_dir)
    assert (rc, out) == (1, "")
    assert err == ('Error: the text has no [MASK] token - put [MASK] where a word should be predicted, '
                   'e.g. "The capital of France is [MASK]."\n')
    rc, out, err = run(capsys, "fill-mask", "[MASK]", "--top-k", 0, "--model", mlm_dir)
    assert (rc, err) == (1, "Error: --top-k 0 is out of range - give 1 or more\n")
    rc, out, err = run(capsys, "fill-mask", "[MASK]", "--top-k", 30523, "--model", mlm_dir)
    assert (rc, err) == (1, "Error: --top-k 30523 is out of range - choose 1..30522 (the vocabulary size)\n")


# --------------------------------------------------------------------------- info, help and docs
def test_info_json_config_lists_the_models_family_only(capsys):
    """A BERT model's config in `bertfeat info`: its settings, none of ModernBERT's or MPNet's defaults."""
    rc, out, err = run(capsys, "info", "--json")
    assert rc == 0
    assert json.loads(out)["config"] == {
        "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
        "intermediate_size": 1536, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
        "type_vocab_size": 2, "pad_token_id": 0, "model_type": "bert"}
    rc, out, err = run(capsys, "info")
    assert rc == 0 and "config.hidden_size" in out and "rope" not in out and "relative_attention" not in out


def _help(command: str, flag: str) -> str:
    import typer.main

    from bertfeat.cli.app import app

    cmd = typer.main.get_command(app).commands[command]
    return next(p.help for p in cmd.params if flag in p.opts)


def test_max_length_default_is_what_the_help_says(capsys, tmp_path):
    """--max-length's default, in the help's order: sentence_bert_config.json's max_seq_length, else
    tokenizer_config.json's model_max_length, else the max positions, never more than those."""
    want = ("Max tokens (default: the model's max_seq_length, else its tokenizer's model_max_length, else its max "
            "positions, never more than those; bertfeat info shows it and its source).")
    assert _help("tokens", "--max-length") == _help("attention", "--max-length") == want

    def default_max_length(d) -> int:
        rc, out, err = run(capsys, "tokens", "hello", "--model", d, "--json")
        assert rc == 0, err
        return json.loads(out)["max_length"]

    d = make_checkpoint(tmp_path / "m", st_max_seq_length=64, st_pooling="mean")  # read beside modules.json only
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    assert default_max_length(d) == 64  # max_seq_length
    (d / "sentence_bert_config.json").unlink()
    assert default_max_length(d) == 512  # no model_max_length: the max positions
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 128}))
    assert default_max_length(d) == 128  # the tokenizer's model_max_length
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 4096}))
    assert default_max_length(d) == 512  # never more than the max positions


def _section(text: str, start: str, stop: str = r"^## ") -> str:
    """The part of a page from ``start`` to the next line matching ``stop`` (default: the next section heading)."""
    import re

    i = text.index(start)
    m = re.compile(stop, re.M).search(text, i + len(start))
    return text[i: m.start() if m else len(text)]


@pytest.mark.parametrize("command", ["tokens", "attention", "fill-mask"])
def test_cli_md_documents_every_inspection_option(command):
    """docs/cli.md ("the full reference, with every option", as the README says) has a section per command naming
    each option of its --help."""
    import typer.main

    from bertfeat.cli.app import app

    root = Path(__file__).resolve().parents[2]
    section = _section((root / "docs" / "cli.md").read_text(encoding="utf-8"), f"## `bertfeat {command}`")
    cmd = typer.main.get_command(app).commands[command]
    names = [o for p in cmd.params if p.param_type_name == "option" and "--help" not in p.opts for o in p.opts]
    assert [o for o in names if o not in section] == []
    assert f"bertfeat {command} " in section  # an example


def test_inspect_md_documents_attention_overwrite_and_max_length():
    root = Path(__file__).resolve().parents[2]
    section = _section((root / "docs" / "inspect.md").read_text(encoding="utf-8"), "**Attention maps**", r"^\*\*")
    assert "--overwrite" in section and "--max-length" in section and "model_max_length" in section


# --------------------------------------------------------------------------- precisions
@pytest.mark.parametrize("precision", ["bf16", "int8", "auto"])
def test_inspect_commands_take_the_precisions(precision, capsys, tmp_path, mlm_dir, monkeypatch):
    """attention and fill-mask run the encoder in the precision asked for (as extract does): their numbers are that
    Encoder's; where the CPU cannot run it, the same one-line refusal as extract."""
    from bertfeat.ops import gemm
    from bertfeat.model.encoder import Encoder
    from bertfeat.errors import BertfeatError

    monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")  # bf16 on any CPU (native where it can)
    try:
        enc = Encoder(mlm_dir, precision=precision)
    except BertfeatError as e:  # int8 on a CPU without VNNI / AMX or without oneDNN
        rc, out, err = run(capsys, "fill-mask", "[MASK] is here.", "--model", mlm_dir, "--precision", precision)
        assert rc == 1 and err == f"Error: {e.message}\n".replace("precision='fp32'", "--precision fp32").replace(
            "precision='auto'", "--precision auto").replace("precision='int8'", "--precision int8")
        pytest.skip(f"{precision} does not run here: {e.message}")
    text = "The capital of [MASK] is [MASK]."
    rc, out, err = run(capsys, "fill-mask", text, "--top-k", 3, "--model", mlm_dir, "--json", "--precision", precision)
    assert rc == 0 and err == ""
    assert json.loads(out) == fill_mask(text, 3, encoder=enc)
    npy = tmp_path / "a.npy"
    rc, out, err = run(capsys, "attention", "The cat sat.", "--model", mlm_dir, "-o", tmp_path / "a.png", "--save-npy", npy,
                       "--precision", precision)
    assert rc == 0 and out == ""
    assert [line.split()[:2] for line in err.splitlines()] == [["wrote", str(tmp_path / "a.png")], ["wrote", str(npy)]]
    said = "" if enc.precision == "fp32" else f", {enc.precision}"  # the maps move with it: both lines say which ran
    assert f" tokens{said}, " in err.splitlines()[0] and f"(float32{said}, layers" in err.splitlines()[1]
    a, ref = np.load(npy), attention_maps("The cat sat.", encoder=enc)[1]
    np.testing.assert_array_equal(a, ref)
    a32 = attention_maps("The cat sat.", model=str(mlm_dir))[1]
    if enc.precision != "fp32":
        assert 0 < np.abs(a - a32).max() < 0.05  # the precision really ran, and stays close to fp32
    assert enc.precision == (gemm.resolve(precision).precision)
