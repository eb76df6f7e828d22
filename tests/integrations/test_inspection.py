"""bertfeat.inspection against transformers: tokens, attention probabilities, masked-LM logits and fill-mask.

References are independent of bertfeat: transformers' BertTokenizerFast for tokens, BertModel with
``attn_implementation="eager"`` / ``output_attentions=True`` for attention, and BertForMaskedLM for the
MLM head (random-weight checkpoints from tests/ckpt.py, rebuilt from their seed, not from our loader).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import need_live  # noqa: E402

pytestmark = pytest.mark.live  # every test here compares against transformers run live
torch = need_live("torch")
transformers = need_live("transformers")

from ckpt import expected_tokens, make_checkpoint, reference_model  # noqa: E402

from bertfeat.model.encoder import Encoder  # noqa: E402
from bertfeat.errors import BertfeatError  # noqa: E402
from bertfeat.inspection import (  # noqa: E402
    attention_maps, check_layer_head, figure_pixels, fill_mask, masked_lm_logits, plot_attention,
    save_attention_npy, tokenize_text, write_attention,
)
from bertfeat.model.bert import bert_forward  # noqa: E402
from bertfeat.model.tokenize import pad_batch  # noqa: E402

ATOL_ATTN = 1e-5
ATOL_LOGITS = 1e-4

EN = "The quick brown fox jumps over the unaffable dog, doesn't it?"
EN_PAIR = "Naïve café owners re-open at 9:30 a.m."
ZH = "一个戴着硬帽子的人在跳舞。北京是中国的首都"
ZH_PAIR = "他说：“今天天气很好！”"
BATCH_EN = ["Hi.", EN, "A man is playing a flute.", EN + " " + EN_PAIR, ""]
BATCH_ZH = ["你好", ZH, "一个男人在弹吉他。", ZH_PAIR]


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    base = tmp_path_factory.mktemp("inspect_ckpts")
    return {
        "base": make_checkpoint(base / "base", hidden_act="gelu_new", seed=1),
        "mlm_uncased": make_checkpoint(base / "mlm_uncased", mlm_head=True, seed=2),
        "mlm_chinese": make_checkpoint(base / "mlm_chinese", vocab="chinese", mlm_head=True, store_decoder=True,
                                       hidden_act="relu", seed=3),
    }


@pytest.fixture(scope="module")
def encoders(ckpts, minilm_dir):
    out = {k: Encoder(d) for k, d in ckpts.items()}
    out["minilm"] = Encoder(minilm_dir)
    return out


@pytest.fixture(scope="module")
def references(ckpts, minilm_dir):
    from transformers import BertModel

    out = {k: reference_model(d) for k, d in ckpts.items()}
    out["minilm"] = BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    return out


def torch_attentions(ref, ids, types, mask) -> list[np.ndarray]:
    bert = ref.bert if hasattr(ref, "bert") else ref
    with torch.no_grad():
        out = bert(input_ids=torch.as_tensor(ids, dtype=torch.long), token_type_ids=torch.as_tensor(types, dtype=torch.long),
                   attention_mask=torch.as_tensor(mask, dtype=torch.long), output_attentions=True)
    return [a.numpy() for a in out.attentions]


def torch_mlm_logits(ref, ids, types) -> np.ndarray:
    with torch.no_grad():
        out = ref(input_ids=torch.as_tensor(ids, dtype=torch.long), token_type_ids=torch.as_tensor(types, dtype=torch.long),
                  attention_mask=torch.ones(ids.shape, dtype=torch.long))
    return out.logits.numpy()


def hf_tokenizer(d):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(str(d))


# --------------------------------------------------------------------------- tokens
TOKEN_CASES = [
    ("minilm", EN, None, None), ("minilm", EN, EN_PAIR, None), ("minilm", ZH, None, None),
    ("minilm", EN, EN_PAIR, 12),  # pair truncated longest-first
    ("mlm_uncased", EN, EN_PAIR, None), ("mlm_uncased", EN, None, 7),
    ("mlm_chinese", ZH, None, None), ("mlm_chinese", ZH, ZH_PAIR, None), ("mlm_chinese", ZH + ZH, ZH_PAIR, 16),
    ("mlm_chinese", "Hello 世界 [MASK]!", None, None),
]


@pytest.mark.parametrize("name,text,pair,max_length", TOKEN_CASES)
def test_tokens_match_transformers(name, text, pair, max_length, encoders, ckpts, minilm_dir):
    enc = encoders[name]
    d = minilm_dir if name == "minilm" else ckpts[name]
    got = tokenize_text(text, pair, max_length=max_length, encoder=enc)
    want = expected_tokens(d, enc.model_id, text, pair, max_length or enc.max_length)
    assert got == want
    assert json.loads(json.dumps(got)) == want  # JSON-ready


def test_tokens_default_max_length_and_truncation_flag(encoders):
    enc = encoders["minilm"]  # sentence_bert_config.json max_seq_length 256
    d = tokenize_text("word " * 300, encoder=enc)
    assert d["max_length"] == 256 and d["truncated"] and d["n_tokens"] == 256 and d["n_tokens_full"] == 302
    assert d["tokens"][0] == "[CLS]" and d["tokens"][-1] == "[SEP]"
    d = tokenize_text("word " * 10, encoder=enc)
    assert not d["truncated"] and d["n_tokens"] == d["n_tokens_full"] == 12


def test_tokens_bad_max_length(encoders):
    with pytest.raises(BertfeatError, match=r"^max_length=2 is out of range - choose 3\.\.512"):
        tokenize_text("hi", max_length=2, encoder=encoders["minilm"])


def test_encoder_with_model_or_other_precision_refused(encoders):
    """A model or precision beside encoder= was ignored silently (the encoder's ran): now refused; the encoder's own
    precision, by name or as requested, still passes."""
    enc = encoders["base"]
    with pytest.raises(BertfeatError, match=r"^precision='bf16' given with an encoder that runs 'fp32' - leave "
                                            r"precision out \(the encoder's is used\), or load "
                                            r"Encoder\(\.\.\., precision='bf16'\) and pass that$"):
        attention_maps("a b", encoder=enc, precision="bf16")
    with pytest.raises(BertfeatError, match=r"^model='x' given with encoder=: the encoder's own model would run - "
                                            r"give either model= or encoder=, not both$"):
        fill_mask("a [MASK]", 3, "x", encoder=encoders["mlm_uncased"])
    assert np.array_equal(attention_maps("a b", encoder=enc, precision="fp32")[1],
                          attention_maps("a b", encoder=enc)[1])


# --------------------------------------------------------------------------- attention
@pytest.mark.parametrize("name", ["minilm", "base", "mlm_chinese"])
@pytest.mark.parametrize("pair", [False, True])
def test_attention_maps_match_transformers(name, pair, encoders, references):
    enc, ref = encoders[name], references[name]
    text, second = (ZH, ZH_PAIR) if name == "mlm_chinese" else (EN, EN_PAIR)
    second = second if pair else None
    tokens, attn = attention_maps(text, second, encoder=enc)
    c = enc.config
    e = tokenize_text(text, second, encoder=enc)
    T = len(e["input_ids"])
    assert tokens == e["tokens"]
    assert attn.dtype == np.float32 and attn.shape == (c.num_hidden_layers, c.num_attention_heads, T, T)
    want = np.stack([a[0] for a in torch_attentions(ref, np.array([e["input_ids"]]), np.array([e["token_type_ids"]]),
                                                    np.ones((1, T)))])
    assert np.abs(attn - want).max() < ATOL_ATTN
    assert np.abs(attn.sum(-1) - 1).max() < 1e-5
    assert attn.std() > 0.01  # neither uniform nor degenerate: the comparison means something


@pytest.mark.parametrize("name", ["minilm", "base", "mlm_chinese"])
@pytest.mark.parametrize("pairs", [False, True])
def test_attention_padded_batch_matches_transformers(name, pairs, encoders, references, real_sentences):
    enc, ref = encoders[name], references[name]
    texts = BATCH_ZH if name == "mlm_chinese" else BATCH_EN + real_sentences[:1]
    second = list(reversed(texts)) if pairs else None
    t = enc.tokenizer.encode(texts, second, enc.max_length)
    ids, types, mask = pad_batch(t.ids, t.type_ids, enc.tokenizer.pad_id)
    assert mask.min() == 0  # really padded
    got = bert_forward(enc.weights, ids, types, mask, output_attentions=True).attentions
    want = torch_attentions(ref, ids, types, mask)
    assert len(got) == len(want) == enc.config.num_hidden_layers
    # Rows of real query tokens, every key column (padded keys included: exactly 0 in both). Padded *query*
    # rows are left out: they are never used, and there torch's own float32 error reaches 2e-5 (vs float64;
    # ours stays below 4e-6) on all-MiniLM-L6-v2, because nothing keeps their hidden states well scaled.
    real_q = np.broadcast_to(mask[:, None, :, None] == 1, got[0].shape)
    pad_k = np.broadcast_to(mask[:, None, None, :] == 0, got[0].shape)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.abs(g - w)[real_q].max() < ATOL_ATTN
        assert np.all(g[pad_k] == 0) and np.all(w[pad_k] == 0)  # padded keys get nothing
    # a row's attention does not depend on its batch neighbours
    one = attention_maps(texts[1], None if second is None else second[1], encoder=enc)[1]
    n = int(mask[1].sum())
    assert np.abs(np.stack(got)[:, 1, :, :n, :n] - one).max() < 1e-5


def test_attentions_only_kept_when_requested(encoders):
    enc = encoders["base"]
    ids, types, mask = pad_batch([np.array([101, 7592, 102])], [np.zeros(3, np.int32)])
    out = bert_forward(enc.weights, ids, types, mask)
    assert out.attentions == []
    out = bert_forward(enc.weights, ids, types, mask, keep=(1,))
    assert out.attentions == [] and list(out.hidden) == [1]
    out = bert_forward(enc.weights, ids, types, mask, keep=(1,), output_attentions=True)
    assert len(out.attentions) == enc.config.num_hidden_layers


def test_check_layer_head():
    assert check_layer_head(6, 12, -1, None) == (5, None)
    assert check_layer_head(6, 12, 0, -12) == (0, 0)
    assert check_layer_head(6, 12, -6, 11) == (0, 11)
    with pytest.raises(BertfeatError) as e:
        check_layer_head(6, 12, 6, 0)
    assert e.value.message == "layer=6 is out of range - the model has 6 layers: choose 0..5, or -6..-1 from the end"
    with pytest.raises(BertfeatError, match="^layer=-7 is out of range"):
        check_layer_head(6, 12, -7, 0)
    with pytest.raises(BertfeatError) as e:
        check_layer_head(6, 12, 0, 12)
    assert e.value.message == ("head=12 is out of range - the model has 12 heads per layer: choose 0..11, or -12..-1 "
                               "from the end")
    assert e.value.render({}) == ("--head 12 is out of range - the model has 12 heads per layer: choose 0..11, or "
                                  "-12..-1 from the end")  # the CLI's spelling


@pytest.mark.parametrize("value,shown", [(1.5, "1.5"), ("1", "'1'"), (True, "True"), (float("nan"), "nan"),
                                         (None, "None")])
def test_layer_and_head_must_be_whole_numbers(value, shown, tmp_path, encoders):
    """A layer or head of 1.5, "1" or NaN reached NumPy's indexing (IndexError, TypeError: "unexpected ... a bug in
    bertfeat" on the command line's Python side) and True was layer 1: refused naming it, before anything is
    written; NumPy integers and whole floats are taken, and a one-layer model's range reads right."""
    enc = encoders["base"]
    fix = "a 0-based index, negative counting from the end (-1: the last)"
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, tmp_path / "a.png", layer=value, encoder=enc)
    assert type(e.value) is BertfeatError and e.value.message == f"layer={shown} is not a whole number - give layer {fix}"
    if value is not None:  # head None: every head
        with pytest.raises(BertfeatError) as e:
            write_attention(EN, tmp_path / "a.png", head=value, encoder=enc)
        assert e.value.message == f"head={shown} is not a whole number - give head {fix}"
    assert list(tmp_path.iterdir()) == []
    assert check_layer_head(2, 4, np.int64(-1), 3.0) == (1, 3) and check_layer_head(2, 4, 1.0, np.int32(-4)) == (1, 0)
    with pytest.raises(BertfeatError) as e:
        check_layer_head(1, 1, 0, 1)
    assert e.value.message == "head=1 is out of range - the model has 1 head per layer: choose 0, or -1 from the end"
    with pytest.raises(BertfeatError) as e:
        check_layer_head(1, 1, 1e300, 0)
    assert e.value.message == "layer=1e+300 is out of range - the model has 1 layer: choose 0, or -1 from the end"


@pytest.mark.parametrize("param", ["output", "save_npy"])
def test_an_output_given_as_bytes_is_refused_naming_it(param, tmp_path, encoders):
    """Found by the API audit: write_attention(text, b"a.png") raised pathlib's TypeError ("argument should be a str
    object or an os.PathLike object returning str, not <class 'bytes'>"), naming no parameter: refused as
    bertfeat.extract refuses output=b"...", before anything is written."""
    given = {"output": bytes(tmp_path / "a.png"), "save_npy": None}
    if param == "save_npy":
        given = {"output": tmp_path / "a.png", "save_npy": bytes(tmp_path / "a.npy")}
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, encoder=encoders["base"], **given)
    assert e.value.message == (f"{param}={given[param]!r} is a bytes, not a string or a path - give {param} as a "
                               "string or a path")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value,shown", [(None, "None"), (5, "5 (int)"), (b"a [MASK]", "b'a [MASK]' (bytes)"),
                                         (["a [MASK]", "b"], "['a [MASK]', 'b'] (list)")])
def test_a_text_that_is_not_a_str_is_refused(value, shown, tmp_path, encoders):
    """tokenize_text, attention_maps, write_attention, masked_lm_logits and fill_mask handed a non-string to the
    tokenizer: a TypeError of its own ("TextEncodeInput must be Union[...]"), and a list of two texts was tokenized
    as a sentence pair. Refused naming the argument (text or pair)."""
    enc = encoders["mlm_uncased"]
    fix = "(Encoder.encode takes a list of texts)"
    calls = [lambda t, p: tokenize_text(t, p, encoder=enc), lambda t, p: attention_maps(t, p, encoder=enc),
             lambda t, p: write_attention(t, tmp_path / "a.png", p, encoder=enc),
             lambda t, p: masked_lm_logits(t, p, encoder=enc), lambda t, p: fill_mask(t, 3, pair=p, encoder=enc)]
    for call in calls:
        with pytest.raises(BertfeatError) as e:
            call(value, None)
        assert e.value.message == f"text is {shown}, not a string - give text as one str {fix}"
        if value is not None:  # pair None: no pair
            with pytest.raises(BertfeatError) as e:
                call("a [MASK]", value)
            assert e.value.message == f"pair is {shown}, not a string - give pair as one str {fix}"
    assert list(tmp_path.iterdir()) == []


def test_masked_lm_positions_are_mask_or_all(encoders):
    """positions="x" (or "masks") was taken for "all": every position's logits, silently."""
    enc = encoders["mlm_uncased"]
    assert list(masked_lm_logits("a [MASK] b", encoder=enc, positions="all")[1]) == [0, 1, 2, 3, 4]
    for bad in ("masks", "x", None):
        with pytest.raises(BertfeatError) as e:
            masked_lm_logits("a [MASK] b", encoder=enc, positions=bad)
        assert e.value.message == (f"positions={bad!r} is neither 'mask' nor 'all' - give positions='mask' (the [MASK] "
                                   "tokens' rows) or positions='all' (every position)")


def png_size(path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size


def test_plot_attention_sizes_and_atomic_write(tmp_path, encoders):
    tokens, attn = attention_maps(EN, EN_PAIR, encoder=encoders["base"])  # 2 layers, 4 heads
    assert figure_pixels(1) == (800, 800) and figure_pixels(4) == (1600, 400) and figure_pixels(12) == (1600, 1200)
    p = plot_attention(tokens, attn, tmp_path / "one.png", layer=-1, head=2, title="t")
    assert png_size(p) == (800, 800)
    p = plot_attention(tokens, attn, tmp_path / "grid.png", layer=0, head=None)
    assert png_size(p) == (1600, 400)
    p.write_bytes(b"old")  # replaced, not appended to
    plot_attention(tokens, attn, p, layer=0, head=None)
    assert png_size(p) == (1600, 400)
    npy = save_attention_npy(attn, tmp_path / "a.npy")
    back = np.load(npy)
    assert back.dtype == np.float32 and np.array_equal(back, attn)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["a.npy", "grid.png", "one.png"]  # no temp files left
    with pytest.raises(BertfeatError, match="^layer=2 is out of range"):
        plot_attention(tokens, attn, tmp_path / "x.png", layer=2)
    with pytest.raises(BertfeatError, match="^cannot write .*: directory .* does not exist - create it"):
        plot_attention(tokens, attn, tmp_path / "nope" / "x.png", layer=0)
    assert not (tmp_path / "x.png").exists()


def test_plot_attention_chinese_tokens_no_warnings(tmp_path, encoders, recwarn):
    tokens, attn = attention_maps(ZH, encoder=encoders["mlm_chinese"])
    assert png_size(plot_attention(tokens, attn, tmp_path / "zh.png", layer=-1, head=0)) == (800, 800)
    assert not [w for w in recwarn if "Glyph" in str(w.message)]


def test_plot_attention_draws_dollar_signs_as_text(tmp_path, encoders):
    """Wordpieces and titles are text, not matplotlib mathtext: an XLM-R wordpiece "$$" or a model folder named
    m$\\frac{a$b in the title failed the plot ("unexpected ValueError: ... ParseSyntaxException ... this is a bug in
    bertfeat"); the folder's name is drawn as it is, in a plot of a model loaded from it."""
    import shutil

    attn = np.random.default_rng(0).random((1, 2, 4, 4)).astype(np.float32)
    for head, size in ((0, (800, 800)), (None, (800, 400))):
        p = plot_attention(["<s>", "$$", "$x^$", "</s>"], attn, tmp_path / f"d{head}.png", layer=0, head=head,
                           title="m$\\frac{a$b: layer 0")
        assert png_size(p) == size
    d = tmp_path / "m$\\frac{a$b"
    shutil.copytree(make_checkpoint(tmp_path / "src", hidden=32, layers=1, heads=2, seed=4), d)
    r = write_attention("a $ b $ c", tmp_path / "w.png", model=str(d))
    assert r["model"] == str(d) and png_size(tmp_path / "w.png") == (800, 800)


def test_write_attention_validates_before_running(tmp_path, encoders):
    enc = encoders["base"]
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, tmp_path / "a.png", layer=5, encoder=enc)
    assert e.value.message == "layer=5 is out of range - the model has 2 layers: choose 0..1, or -2..-1 from the end"
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, tmp_path / "a.png", head=-5, encoder=enc)
    assert e.value.message == ("head=-5 is out of range - the model has 4 heads per layer: choose 0..3, or -4..-1 "
                               "from the end")
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, tmp_path / "a.pdf", encoder=enc)
    assert e.value.message == f"output='{tmp_path / 'a.pdf'}' does not end in .png - give output a file name ending in .png"
    with pytest.raises(BertfeatError, match=r"^save_npy='.*a\.txt' does not end in \.npy - give save_npy a file name"):
        write_attention(EN, tmp_path / "a.png", save_npy=tmp_path / "a.txt", encoder=enc)
    assert list(tmp_path.iterdir()) == []
    r = write_attention(EN, tmp_path / "a.png", layer=-2, head=None, save_npy=tmp_path / "a.npy", encoder=enc)
    assert r["layer"] == 0 and r["heads"] == [0, 1, 2, 3] and r["png_pixels"] == [1600, 400]
    assert png_size(tmp_path / "a.png") == (1600, 400)
    assert np.array_equal(np.load(tmp_path / "a.npy"), attention_maps(EN, encoder=enc)[1])


def test_write_attention_refuses_an_existing_output_unless_overwrite(tmp_path, encoders):
    """An existing PNG or .npy is refused (as extract and `bertfeat attention` refuse it), naming the file and the
    parameter that gave it; nothing is written; overwrite=True replaces both (it was silently replaced)."""
    enc = encoders["base"]
    png, npy = tmp_path / "a.png", tmp_path / "a.npy"
    npy.write_bytes(b"old")
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, png, save_npy=npy, encoder=enc)
    assert e.value.message == f"{npy} already exists - pass overwrite=True to replace it, or save_npy with another name"
    png.write_bytes(b"old")
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, png, encoder=enc)
    assert e.value.message == f"{png} already exists - pass overwrite=True to replace it, or output with another name"
    assert png.read_bytes() == npy.read_bytes() == b"old"
    d = tmp_path / "d.npy"
    d.mkdir()
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, png, save_npy=d, encoder=enc, overwrite=True)
    assert e.value.message == f"the save_npy file {d} is a directory - pass save_npy with a file name, not a directory"
    d.rmdir()
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"old")  # a wrong name is said first: overwrite would not make it right
    with pytest.raises(BertfeatError, match=r"^output='.*a\.pdf' does not end in \.png - "):
        write_attention(EN, pdf, encoder=enc)
    pdf.unlink()
    assert png.read_bytes() == npy.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "a.png"]  # no lock file or temp left behind
    with pytest.raises(BertfeatError) as e:
        write_attention(EN, png, encoder=enc, overwrite="yes")
    assert e.value.message == "overwrite='yes' is a str, not True or False - give overwrite as True or False"
    r = write_attention(EN, png, save_npy=npy, encoder=enc, overwrite=True)
    assert r["png"] == str(png) and png_size(png) == (800, 800)
    assert np.array_equal(np.load(npy), attention_maps(EN, encoder=enc)[1])


# --------------------------------------------------------------------------- masked LM
MLM_CASES = [
    ("mlm_uncased", "The capital of France is [MASK].", None),
    ("mlm_uncased", "[MASK] quick brown [MASK] jumps over the [MASK] dog.", "And then it [MASK] away."),
    ("mlm_chinese", "北京是中国的[MASK]都。", None),
    ("mlm_chinese", "一个戴着[MASK]帽子的人在[MASK][MASK]。", ZH_PAIR),
]


@pytest.mark.parametrize("name,text,pair", MLM_CASES)
def test_mlm_logits_match_bert_for_masked_lm(name, text, pair, encoders, references):
    enc, ref = encoders[name], references[name]
    assert type(ref).__name__ == "BertForMaskedLM" and enc.weights.mlm is not None
    e = tokenize_text(text, pair, encoder=enc)
    ids, types = np.array([e["input_ids"]]), np.array([e["token_type_ids"]])
    want = torch_mlm_logits(ref, ids, types)[0]  # (T, V)
    assert want.shape == (len(e["input_ids"]), enc.config.vocab_size)
    tokens, pos, logits = masked_lm_logits(text, pair, encoder=enc, positions="all")
    assert tokens == e["tokens"] and logits.shape == want.shape
    assert np.abs(logits - want).max() < ATOL_LOGITS
    tokens, pos, logits = masked_lm_logits(text, pair, encoder=enc)
    mask_id = enc.tokenizer.mask_id
    assert list(pos) == [i for i, t in enumerate(e["input_ids"]) if t == mask_id] and len(pos) == text.count("[MASK]") + (pair or "").count("[MASK]")
    assert np.abs(logits - want[pos]).max() < ATOL_LOGITS


@pytest.mark.parametrize("name,text,pair", MLM_CASES)
def test_fill_mask_top_k_matches_bert_for_masked_lm(name, text, pair, encoders, references):
    enc, ref = encoders[name], references[name]
    e = tokenize_text(text, pair, encoder=enc)
    want = torch.as_tensor(torch_mlm_logits(ref, np.array([e["input_ids"]]), np.array([e["token_type_ids"]]))[0])
    pos = [i for i, t in enumerate(e["input_ids"]) if t == enc.tokenizer.mask_id]
    got = fill_mask(text, top_k=5, pair=pair, encoder=enc)
    assert len(got) == len(pos)
    hf = hf_tokenizer(enc.location.path)
    for preds, p in zip(got, pos):
        probs = torch.softmax(want[p].double(), dim=-1)
        top = torch.topk(want[p], 5)
        assert [c["id"] for c in preds] == top.indices.tolist()
        assert [c["token"] for c in preds] == hf.convert_ids_to_tokens(top.indices.tolist())
        assert np.allclose([c["score"] for c in preds], probs[top.indices].numpy(), atol=1e-5, rtol=0)
        assert all(a["score"] >= b["score"] for a, b in zip(preds, preds[1:]))
        assert all(isinstance(c["score"], float) and 0 < c["score"] < 1 for c in preds)


def test_fill_mask_errors(encoders):
    enc = encoders["minilm"]
    with pytest.raises(BertfeatError) as e:
        fill_mask("The capital of France is [MASK].", encoder=enc)
    assert e.value.message == (f"{enc.model_id} has no masked-language-model head (cls.predictions.*)"
                               " - use a checkpoint saved with its MLM head, e.g. bert-base-uncased")
    with pytest.raises(BertfeatError, match="has no masked-language-model head"):
        fill_mask("a [MASK]", encoder=encoders["base"])
    enc = encoders["mlm_uncased"]
    with pytest.raises(BertfeatError) as e:
        fill_mask("The capital of France is Paris.", encoder=enc)
    assert e.value.message == 'the text has no [MASK] token - put [MASK] where a word should be predicted, e.g. "The capital of France is [MASK]."'
    with pytest.raises(BertfeatError, match="no \\[MASK\\] token"):
        fill_mask("lower-case [mask] is just text", encoder=enc)
    with pytest.raises(BertfeatError) as e:
        fill_mask("[MASK]", top_k=0, encoder=enc)
    assert e.value.message == "top_k=0 is out of range - choose 1..30522 (the vocabulary size)"
    with pytest.raises(BertfeatError) as e:
        fill_mask("a [MASK] b", 40000, encoder=enc)
    assert e.value.message == "top_k=40000 is out of range - choose 1..30522 (the vocabulary size)"
    with pytest.raises(BertfeatError, match=r"^the text has 602 tokens, more than the max length 512 - shorten"):
        fill_mask("word " * 300 + "[MASK] " + "word " * 299, encoder=enc)
    assert len(fill_mask("[MASK]", top_k=30522, encoder=enc)[0]) == 30522


TOP_K_FIX = "give top_k a whole number of predictions per mask, e.g. top_k=5"


@pytest.mark.parametrize("top_k,shown", [(2.5, "2.5"), ("3", "'3'"), (True, "True"), (False, "False"), (None, "None"),
                                         (float("nan"), "nan"), (float("inf"), "inf"), ([3], "[3]")])
def test_fill_mask_top_k_must_be_a_whole_number(top_k, shown, encoders):
    """Not int(top_k) checked and the original used as a slice index (a raw TypeError): refused naming top_k, and
    before any model loads (the model named here does not exist)."""
    with pytest.raises(BertfeatError) as e:
        fill_mask("a [MASK] b", top_k, encoder=encoders["mlm_uncased"])
    assert type(e.value) is BertfeatError and e.value.message == f"top_k={shown} is not a whole number - {TOP_K_FIX}"
    with pytest.raises(BertfeatError) as e:
        fill_mask("a [MASK] b", top_k, "no-such-model-here")
    assert e.value.message == f"top_k={shown} is not a whole number - {TOP_K_FIX}"


def test_fill_mask_top_k_whole_floats_and_numpy_ints(encoders):
    enc = encoders["mlm_uncased"]
    want = fill_mask("a [MASK] b", 3, encoder=enc)
    assert len(want[0]) == 3
    assert fill_mask("a [MASK] b", 3.0, encoder=enc) == want
    assert fill_mask("a [MASK] b", np.int64(3), encoder=enc) == want
    with pytest.raises(BertfeatError) as e:  # a whole float past any vocabulary: not a 301-digit number in the message
        fill_mask("a [MASK] b", 1e300, "no-such-model-here")
    assert e.value.message == "top_k=1e+300 is out of range - give 1 or more, up to the vocabulary size"


# --------------------------------------------------------------------------- info's config
BERT_SETTINGS = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "hidden_act", "layer_norm_eps", "max_position_embeddings", "type_vocab_size", "pad_token_id",
                 "model_type"]
MODERNBERT_SETTINGS = ["layer_types", "global_rope_theta", "local_rope_theta", "local_attention", "attention_bias",
                       "mlp_bias", "norm_bias", "classifier_activation", "classifier_bias", "decoder_bias"]


def test_info_config_is_the_models_family_only(minilm_dir):
    """all-MiniLM-L6-v2 (BERT) lists BERT's settings, not ModernBERT's or MPNet's defaults; the config's own record
    (to_dict, all fields) is unchanged."""
    from bertfeat.inspection import model_info

    info = model_info(str(minilm_dir))
    assert info["config"] == {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
                              "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
                              "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "type_vocab_size": 2,
                              "pad_token_id": 0, "model_type": "bert"}
    cfg = Encoder(minilm_dir).config
    assert list(cfg.to_dict()) == list(type(cfg).__dataclass_fields__)


def test_config_settings_per_family():
    from bertfeat.model.config import BertConfig
    from bertfeat.inspection import config_settings

    small = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
             "intermediate_size": 64}
    roberta = config_settings(BertConfig.from_dict({**small, "model_type": "roberta", "pad_token_id": 1}))
    assert list(roberta) == BERT_SETTINGS and roberta["pad_token_id"] == 1
    electra = config_settings(BertConfig.from_dict({**small, "model_type": "electra", "embedding_size": 16}))
    assert list(electra) == BERT_SETTINGS + ["embedding_size"] and electra["embedding_size"] == 16
    mpnet = config_settings(BertConfig.from_dict({**small, "model_type": "mpnet",
                                                  "relative_attention_num_buckets": 40}))
    no_types = [k for k in BERT_SETTINGS if k != "type_vocab_size"]  # MPNet, DistilBERT, ModernBERT: no token types
    assert list(mpnet) == no_types + ["relative_attention_num_buckets"]
    assert mpnet["relative_attention_num_buckets"] == 40
    distil = config_settings(BertConfig.from_dict({"model_type": "distilbert", "vocab_size": 100, "dim": 32,
                                                   "n_layers": 2, "n_heads": 4, "hidden_dim": 64}))
    assert list(distil) == no_types and distil["hidden_size"] == 32
    mb = config_settings(BertConfig.from_dict({**small, "model_type": "modernbert", "global_attn_every_n_layers": 3,
                                               "local_attention": 64}))
    assert list(mb) == no_types + MODERNBERT_SETTINGS
    assert mb["layer_types"] == ("full_attention", "sliding_attention", "sliding_attention")
    assert mb["local_attention"] == 64 and mb["layer_norm_eps"] == 1e-5  # the values in use, defaults included


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_fill_mask_untied_decoder_bias(tmp_path, family):
    """An MLM head saved untied (tie_word_embeddings false): transformers 5's logits add the decoder's own bias
    (cls.predictions.decoder.bias / lm_head.decoder.bias), not cls.predictions.bias / lm_head.bias."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    from bertfeat.inspection import masked_lm_logits
    from ckpt import vocab_file
    from st_ckpt import roberta_checkpoint

    torch.manual_seed(1)
    if family == "bert":
        d = tmp_path / "bert"
        tok = transformers.BertTokenizer(str(vocab_file("uncased")), do_lower_case=True)
        cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=64, tie_word_embeddings=False)
        m = BertForMaskedLM(cfg)
        text = "the capital of france is [MASK] ."
    else:
        d = roberta_checkpoint(tmp_path / "rob", model_type="roberta")  # its tokenizer; the model replaced below
        tok = AutoTokenizer.from_pretrained(str(d))
        cfg = RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
                            tie_word_embeddings=False)
        m = RobertaForMaskedLM(cfg)
        text = "The quick brown <mask> jumps."
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    m.eval().save_pretrained(str(d))
    tok.save_pretrained(str(d))
    head = m.cls.predictions if family == "bert" else m.lm_head
    assert not torch.equal(head.decoder.bias, head.bias)  # untied: two different biases saved
    b = tok(text, return_tensors="pt")
    pos = int((b["input_ids"][0] == tok.mask_token_id).nonzero()[0])
    with torch.no_grad():
        ref = m(**b).logits[0, pos].numpy()
    _, _, got = masked_lm_logits(text, encoder=Encoder(d))
    diff = float(np.abs(got[0] - ref).max())
    print(f"\n{family} untied MLM logits: max |diff| {diff:.2e}")
    assert diff <= 1e-4


def test_fill_mask_on_roberta_uses_the_exact_gelu_whatever_hidden_act_says(tmp_path):
    """transformers' RobertaLMHead always applies the exact GELU; bertfeat took the config's hidden_act (relu here)."""
    import json

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from st_ckpt import roberta_checkpoint

    d = roberta_checkpoint(tmp_path / "m", model_type="roberta", hidden=32, layers=2, heads=2, mlm_head=True).resolve()
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (d / "config.json").write_text(json.dumps(cfg))
    text = "hello <mask> world"
    tok, ref = transformers.AutoTokenizer.from_pretrained(str(d)), transformers.AutoModelForMaskedLM.from_pretrained(str(d))
    with torch.no_grad():
        want = ref(**tok(text, return_tensors="pt")).logits[0].numpy()
    _, pos, logits = masked_lm_logits(text, model=str(d))
    np.testing.assert_allclose(logits, want[pos], atol=1e-4)


def test_write_attention_refuses_a_npy_that_is_the_png_through_a_link(tmp_path, encoders):
    """save_npy a symbolic link to the PNG output: refused before anything is written, as `bertfeat attention` refuses
    it (the .npy would have overwritten the PNG just written through the link)."""
    png, npy = tmp_path / "a.png", tmp_path / "a.npy"
    npy.symlink_to(png)
    for overwrite in (False, True):
        with pytest.raises(BertfeatError) as e:
            write_attention(EN, png, save_npy=npy, encoder=encoders["base"], overwrite=overwrite)
        assert e.value.message == f"save_npy={str(npy)!r} is the PNG output too - give the two outputs different names"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"] and not png.exists()
