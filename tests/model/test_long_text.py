"""--long-text on a 3,000-token document: truncate, chunk-mean, chunk-max and error.

The model is the small random-weight BERT of tests/ckpt.py (uncased vocab, max length 128), so
that the 3,000 tokens encode in well under a second. The document is made of words that are one
word piece each, so a window of k tokens is exactly
the text of k words and can be encoded on its own through ``Encoder.encode``: the expected
features are computed window by window, independently of the pipeline's windowing code.
"""

from __future__ import annotations

import csv
import pickle

import numpy as np
import pytest

from extract_util import (assert_close, embeddings, in_fresh_process, metadata, read_table, run, summary_line,
                          tiny_encoder, tiny_model, write_csv)

WORDS = ("river mountain bread cheese rain snow ship bird music art train car cat dog garden window letter "
         "market winter summer city village forest ocean house table water light night green blue red").split()
N = 3000  # word pieces in the document, [CLS]/[SEP] excluded
MAX_LEN, STRIDE = 128, 16
SHORT = ["A short sentence before it.", "And a short one after."]


@pytest.fixture(scope="module")
def words():
    enc = tiny_encoder()
    assert all(len(enc.tokenizer.encode_content([w])[0]) == 1 for w in WORDS)  # one piece per word
    rng = np.random.default_rng(0)
    return [WORDS[i] for i in rng.integers(0, len(WORDS), N)]


@pytest.fixture(scope="module")
def windows(words):
    """Windows of MAX_LEN tokens including [CLS]/[SEP] (MAX_LEN - 2 words), neighbours sharing STRIDE words."""
    width, step = MAX_LEN - 2, MAX_LEN - 2 - STRIDE
    out, start = [], 0
    while True:
        out.append(words[start:start + width])
        if start + width >= len(words):
            return out
        start += step


def corpus(tmp_path, words):
    return write_csv(tmp_path / "c.csv", ["id", "text"], [["a", SHORT[0]], ["doc", " ".join(words)], ["b", SHORT[1]]])


def test_document_is_3000_tokens(words):
    info = tiny_encoder().encode([" ".join(words)], return_info=True)
    assert info.n_tokens.tolist() == [N + 2]


def test_truncate(tmp_path, capsys, words):
    src = corpus(tmp_path, words)
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--id-column", "id", "--model", tiny_model())
    assert rc == 0, err
    t = read_table(out)
    enc = tiny_encoder()
    assert t.column("n_tokens").to_pylist()[1] == N + 2
    assert t.column("truncated").to_pylist() == [False, True, False]
    assert t.column("n_chunks").to_pylist() == [1, 1, 1]
    X = embeddings(t)
    assert_close(X, enc.encode([SHORT[0], " ".join(words), SHORT[1]], max_length=MAX_LEN))
    assert_close(X[1:2], enc.encode([" ".join(words[:MAX_LEN - 2])]))  # = the first MAX_LEN tokens alone
    short_tokens = enc.encode(SHORT, return_info=True).n_tokens.tolist()
    total = N + 2 + sum(short_tokens)
    dropped = N + 2 - MAX_LEN
    assert summary_line(err, "rows truncated") == f"rows truncated 1 ({dropped:,} tokens dropped, {100 * dropped / total:.2f}% of tokens)"
    assert summary_line(err, "tokens") == f"tokens {total:,}"
    assert metadata(out)["tokens"] == {"total": total, "dropped": dropped}
    assert metadata(out)["rows"]["truncated"] == 1


@pytest.mark.parametrize("mode", ["chunk-mean", "chunk-max"])
def test_chunk_modes_equal_the_windows_encoded_one_by_one(tmp_path, capsys, words, windows, mode):
    src = corpus(tmp_path, words)
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--id-column", "id", "--model", tiny_model(),
                     "--long-text", mode, "--stride", STRIDE, "--max-batch-tokens", 1024)
    assert rc == 0, err
    enc = tiny_encoder()
    V = np.concatenate([enc.encode([" ".join(w)], max_length=MAX_LEN) for w in windows])  # one window per call
    lengths = np.array([len(w) + 2 for w in windows], dtype=np.float64)  # real tokens, [CLS]/[SEP] included
    assert len(windows) == 28 and lengths.max() == MAX_LEN and lengths[-1] == 2 + N - 27 * (MAX_LEN - 2 - STRIDE)
    if mode == "chunk-mean":
        expected = (lengths[:, None] * V.astype(np.float64)).sum(0) / lengths.sum()
    else:
        expected = V.max(axis=0)
    t = read_table(out)
    X = embeddings(t)
    assert_close(X[1], expected.astype(np.float32))
    assert_close(X[[0, 2]], enc.encode(SHORT))
    assert t.column("n_chunks").to_pylist() == [1, len(windows), 1]
    assert t.column("truncated").to_pylist() == [False, False, False]
    assert t.column("n_tokens").to_pylist()[1] == N + 2
    assert summary_line(err, "rows truncated") == "rows truncated 0 (0 tokens dropped, 0.00% of tokens)"
    assert summary_line(err, "rows chunked") == "rows chunked 1"
    meta = metadata(out)
    assert (meta["long_text"], meta["stride"], meta["rows"]["chunked"]) == (mode, STRIDE, 1)


def test_error_mode(tmp_path, capsys, words):
    src = corpus(tmp_path, words)
    out = tmp_path / "o.parquet"
    args = ["extract", src, "-o", out, "--id-column", "id", "--model", tiny_model(), "--long-text", "error"]
    rc, _, err = run(capsys, *args)
    assert rc == 1
    assert err.splitlines()[-1] == (f"Error: {src} row 1: {N + 2} tokens, more than max length 128 (--long-text error) - "
                                    "use --long-text truncate/chunk-mean/chunk-max or a larger --max-length, or --on-bad-row skip")
    assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()

    rc, _, err = run(capsys, *args, "--on-bad-row", "skip")
    assert rc == 0, err
    with open(tmp_path / "o.parquet.rejects.csv", newline="") as f:
        assert list(csv.reader(f)) == [["row", "id", "reason"],
                                       ["1", "doc", f"{N + 2} tokens, more than max length 128 (--long-text error)"]]
    t = read_table(out)
    assert t.column("id").to_pylist() == ["a", "b"]
    assert_close(embeddings(t), tiny_encoder().encode(SHORT))
    assert summary_line(err, "rows rejected") == "rows rejected 1"


def test_error_mode_counts_the_prompt_in_the_tokens_it_names(tmp_path, capsys):
    """A row refused because its prompt and text pass max length names the tokens the model would see, prompt
    included, in the message and the rejects file (it counted the text alone: '64 tokens, more than max length 64'),
    and how many of them the prompt's are (a 2-token text under a 40-word prompt was '44 tokens' with no word of the
    prompt, and a prompt longer than max length refused every row so)."""
    prompt = "river mountain bread cheese rain snow ship bird: "  # 8 one-piece words and ':'
    text = " ".join((WORDS * 2)[:62])  # 64 tokens alone with [CLS]/[SEP]
    enc = tiny_encoder()
    n_prompted = len(enc.tokenizer.encode([prompt + text]).ids[0])
    assert (len(enc.tokenizer.encode([text]).ids[0]), n_prompted) == (64, 73)
    src = write_csv(tmp_path / "c.csv", ["text"], [[text], [SHORT[0]]])
    out = tmp_path / "o.parquet"
    args = ["extract", src, "-o", out, "--model", tiny_model(), "--long-text", "error", "--max-length", "64",
            "--prompt", prompt]
    rc, _, err = run(capsys, *args)
    assert rc == 1
    assert err.splitlines()[-1].startswith(f"Error: {src} row 0: 73 tokens (9 of them the prompt's), more than max "
                                           "length 64 (--long-text error)")
    rc, _, err = run(capsys, *args, "--on-bad-row", "skip")
    assert rc == 0, err
    with open(tmp_path / "o.parquet.rejects.csv", newline="") as f:
        assert list(csv.reader(f))[1] == ["0", "", "73 tokens (9 of them the prompt's), more than max length 64 "
                                                   "(--long-text error)"]
    from bertfeat.model.inputs import LongTextError

    with pytest.raises(LongTextError) as e:
        enc.encode([text], max_length=64, long_text="error", prompt=prompt)
    assert e.value.message == ("row 0 has 73 tokens (9 of them the prompt's), more than max length 64 - use "
                               "long_text='truncate', chunk-mean or chunk-max, or a larger max_length, or a shorter prompt")
    assert pickle.loads(pickle.dumps(e.value)).prompt_tokens == 9  # (a Dask worker's error reaches the client whole)


def test_a_stride_without_a_chunk_mode_is_refused_in_python_too():
    """Encoder.encode / TextFeatures refuse a stride that truncate or error would ignore, as extract does."""
    from bertfeat.errors import BertfeatError
    from bertfeat.sklearn import TextFeatures

    enc = tiny_encoder()
    for call in (lambda: enc.encode(SHORT, long_text="truncate", stride=5),
                 lambda: TextFeatures(model=tiny_model(), long_text="error", stride=5).fit_transform(SHORT)):
        with pytest.raises(BertfeatError, match="applies to") as e:
            call()
        assert "stride=5" in str(e.value) and e.value.fix.replace("long_text=", "--long-text ").startswith("add")
    assert enc.encode(SHORT, long_text="chunk-mean", stride=5).shape == enc.encode(SHORT).shape


@pytest.mark.parametrize("max_length, stride", [(32, 15), (34, 16), (35, 32), (3, 0), (128, 32)])
def test_the_default_stride_fits_a_narrow_window(words, max_length, stride):
    """The default stride is 32, or half the window when that leaves no room (max_length=32 with chunk-mean was
    refused: 'stride=32 (the default) is out of range', a stride the user never gave); the provenance records it."""
    enc = tiny_encoder()
    doc = [" ".join(words[:200])]
    spec = enc.spec(long_text="chunk-mean", max_length=max_length)
    assert spec.stride == stride
    assert enc.spec(max_length=max_length).stride == 32  # no windows: the fingerprint's stride as before
    np.testing.assert_array_equal(enc.encode(doc, long_text="chunk-mean", max_length=max_length),
                                  enc.encode(doc, long_text="chunk-mean", max_length=max_length, stride=stride))


def test_chunk_mode_with_pairs_is_refused(tmp_path, capsys, words):
    src = write_csv(tmp_path / "p.csv", ["a", "b"], [["x", "y"], [" ".join(words), "z"]])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--text-column", "a",
                     "--pair-column", "b", "--long-text", "chunk-mean")
    assert rc == 1
    assert err.splitlines()[-1] == ("Error: --long-text chunk-* works on single texts, not sentence pairs - "
                                    "use --long-text truncate (or error) with --pair-column")
    assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()


def test_chunk_mode_with_pairs_is_refused_before_any_work(tmp_path, capsys):
    """Even when every pair is short (nothing would be cut into windows), chunk-* with pairs is refused up front:
    before, short pairs ran with rc 0 and provenance said chunk-mean, and a long pair stopped the run midway."""
    src = write_csv(tmp_path / "p.csv", ["a", "b"], [["x", "y"], ["z", "w"]])
    out = tmp_path / "o.parquet"
    for mode in ("chunk-mean", "chunk-max"):
        rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--text-column", "a",
                         "--pair-column", "b", "--long-text", mode)
        assert (rc, err) == (1, "Error: --long-text chunk-* works on single texts, not sentence pairs - "
                                "use --long-text truncate (or error) with --pair-column\n")
        assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()
    from bertfeat.errors import BertfeatError

    with pytest.raises(BertfeatError, match="not sentence pairs"):
        tiny_encoder().encode(["x"], pairs=["y"], long_text="chunk-max")


# ------------------------------------------------------------------------------------------ one huge text (issue 44)
# A text longer than tokenize.PIECE_CHARS is tokenized in pieces, and the model's input from a cut of it
# (tokenize.LongText): the ids, type ids and n_tokens must be exactly those of the whole text tokenized by the
# `tokenizers` library itself, for every kind of tokenizer the cut is made for; and the memory must not grow with
# the text. The pieces are made small here (PIECE_CHARS monkeypatched) so that texts of a few KB cross many of them.
PIECE_WORDS = ("the quick brown fox jumps over lazy dogs , . ! ? ( ) don't it's São Zürich naïve e\u0301 ﬁne ﬷ ﷺ "
               "😀 👍🏽 中文 字符 こんにちは 안녕 ١٢٣ 3.14 1,000 <mask> [MASK] [SEP] new york x-ray").split() + [
    "\n", "\n\n", "  ", "\t", "\u3000", "\u200b", "a" * 120, "\u0301"]


def _piece_text(rng, n: int) -> str:
    """About n characters of words, CJK runs, emoji, combining and expanding (NFKD ﷺ) characters, added tokens' text
    and whitespace of every kind, most words followed by a space."""
    out = []
    while sum(map(len, out)) < n:
        out.append(PIECE_WORDS[rng.integers(len(PIECE_WORDS))] + [" ", " ", " ", "", "\n", "  "][rng.integers(6)])
    return "".join(out)


def _trained(pre_tokenizer, normalizer=None, prefix_space: bool = False):
    """A byte-level BPE (as RoBERTa's, ModernBERT's or Llama 3's) trained on the words above, with RoBERTa's template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizer
    tk.pre_tokenizer = pre_tokenizer
    tk.decoder = decoders.ByteLevel()
    corpus = [_piece_text(np.random.default_rng(i), 300) for i in range(30)]
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=500, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=prefix_space)
    return tk


@pytest.fixture(scope="module")
def piece_tokenizers(minilm_dir, tmp_path_factory):
    """name -> bertfeat BertTokenizer of each kind of tokenizer the cut is made for."""
    import json
    import shutil

    from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers

    from bertfeat.model.tokenize import BertTokenizer
    from ckpt import vocab_file
    from st_ckpt import _tokenizer

    zh = tmp_path_factory.mktemp("zh")
    shutil.copyfile(vocab_file("chinese"), zh / "vocab.txt")
    (zh / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    spaced = BertTokenizer.from_dir(minilm_dir, 512)._tk
    spaced.add_tokens([AddedToken("new york"), AddedToken("x-ray")])  # added tokens with a space, a punctuation
    xlmr_first = _tokenizer("xlm-roberta")
    xlmr_first.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    llama3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    toks = {
        "bert uncased (MiniLM)": BertTokenizer.from_dir(minilm_dir, 512),
        "bert chinese": BertTokenizer.from_dir(zh, 512),
        "bert with added tokens": BertTokenizer(spaced, "x", 512),
        "roberta byte-level": BertTokenizer(_tokenizer("roberta"), "x", 512),
        "roberta add_prefix_space": BertTokenizer(_trained(pre_tokenizers.ByteLevel(add_prefix_space=True), None, True), "x", 512),
        "xlm-r unigram": BertTokenizer(_tokenizer("xlm-roberta"), "x", 512),
        "metaspace prepend first": BertTokenizer(xlmr_first, "x", 512),
        "llama-3 split + byte-level, NFKC": BertTokenizer(_trained(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(llama3), "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            normalizers.NFKC()), "x", 512),
    }
    for name in ("bert uncased (MiniLM)", "roberta byte-level"):
        left = BertTokenizer(toks[name]._tk, "x", 512)
        left.truncation_side = "left"
        toks[name + ", truncation_side left"] = left
    return toks


_REFERENCES: dict = {}


def _whole(tk, text, pair, max_length, side):
    """(ids, type ids, n_tokens) of the whole text (and pair) by the `tokenizers` library itself (a copy of ``tk``)."""
    from tokenizers import Tokenizer

    ref = _REFERENCES.get(id(tk))
    if ref is None:
        ref = _REFERENCES[id(tk)] = Tokenizer.from_str(tk.to_str())
        ref.no_padding()
    ref.no_truncation()
    n = len(ref.encode(text, pair).ids)
    ref.enable_truncation(max_length, strategy="longest_first", direction=side)
    e = ref.encode(text, pair)
    return e.ids, e.type_ids, n


def test_a_long_text_in_pieces_gives_the_whole_texts_tokens(piece_tokenizers, monkeypatch):
    from bertfeat.model import tokenize

    monkeypatch.setattr(tokenize, "PIECE_CHARS", 150)
    rng = np.random.default_rng(44)
    cut = 0
    for name, tok in piece_tokenizers.items():
        assert tok.piecewise, name
        for trial in range(9):
            texts = [_piece_text(rng, int(rng.integers(300, 2500))) for _ in range(3)] + ["short"]
            pairs = [_piece_text(rng, int(rng.integers(1, 2500))) for _ in range(4)] if trial % 3 == 0 else None
            ml = int(rng.choice([8, 33, 64, 200, 512]))
            got = tok.encode(texts, pairs, ml)
            content = tok.encode_content(texts)
            for i, text in enumerate(texts):
                pair = None if pairs is None else pairs[i]
                ids, types, n = _whole(tok._tk, text, pair, ml, tok.truncation_side)
                what = (name, trial, i, ml)
                assert (got.ids[i].tolist(), got.type_ids[i].tolist(), int(got.n_tokens[i])) == (ids, types, n), what
                assert got.truncated[i] == (n > ml), what
                assert content[i].tolist() == tok._tk.encode(text, add_special_tokens=False).ids, what
                if len(text) > tokenize.PIECE_CHARS:  # in pieces (it raises where it cannot, for a whole-text fallback)
                    assert tokenize.LongText(tok, text, ml).count == len(content[i]), what
                cut += got.truncated[i]
    assert cut > 80  # most rows were cut


def test_a_tokenizer_that_cannot_be_cut_tokenizes_the_whole_text(monkeypatch):
    """Without a pre-tokenizer (one pre-token: no boundary to cut at) the text goes to the tokenizer whole, as before."""
    from bertfeat.model import tokenize
    from st_ckpt import _tokenizer

    tk = _tokenizer("xlm-roberta")
    tk.pre_tokenizer = None
    tok = tokenize.BertTokenizer(tk, "x", 512)
    assert not tok.piecewise
    monkeypatch.setattr(tokenize, "PIECE_CHARS", 50)
    text = _piece_text(np.random.default_rng(0), 1000)
    assert tok.encode([text], None, 40).ids[0].tolist() == _whole(tk, text, None, 40, "right")[0]


def test_the_features_of_a_long_row_are_those_of_its_first_max_length_tokens(monkeypatch):
    """A row of 60 pieces' worth of text, encoded through the cut, has the features of the text of its first MAX_LEN
    tokens alone (bit for bit: the same ids reach the model), and chunk-mean windows every token of it."""
    from tokenizers import Tokenizer

    from bertfeat.model import tokenize

    enc = tiny_encoder()
    rng = np.random.default_rng(7)
    long = _piece_text(rng, 20_000)
    ref = Tokenizer.from_str(enc.tokenizer._tk.to_str())
    ref.no_truncation()
    whole = ref.encode(long, add_special_tokens=False)
    head = long[:whole.offsets[MAX_LEN - 3][1]]  # the text of the first MAX_LEN - 2 word pieces
    assert len(ref.encode(head, add_special_tokens=False).ids) == MAX_LEN - 2
    texts = [SHORT[0], long, SHORT[1]]
    monkeypatch.setattr(tokenize, "PIECE_CHARS", 300)
    info = enc.encode(texts, return_info=True)
    assert info.truncated.tolist() == [False, True, False] and info.n_tokens[1] == len(whole.ids) + 2
    assert np.array_equal(info.features[1], enc.encode([SHORT[0], head, SHORT[1]])[1])
    chunked = enc.encode([long], long_text="chunk-mean", stride=STRIDE)
    monkeypatch.setattr(tokenize, "PIECE_CHARS", 1 << 30)  # the whole text at once, as before
    assert np.array_equal(chunked, enc.encode([long], long_text="chunk-mean", stride=STRIDE))


_MEMORY = """
import sys
import numpy as np
from bertfeat.model.tokenize import BertTokenizer
tok = BertTokenizer.from_dir(sys.argv[1], 512)
words = sys.argv[2].split()
text = " ".join(words[i] for i in np.random.default_rng(0).integers(0, len(words), 4_000_000 // 6))
tok.encode(["warm up"], None, 256)
before = peak()
t = tok.encode([text], None, 256)
content = tok.encode_content([text])[0]
print(peak() - before, int(t.n_tokens[0]), len(t.ids[0]), len(content), text.count(" ") + 1)
"""


def test_tokenizing_a_huge_text_keeps_memory_bounded():
    """A 4 MB text (Encoder.encode, TextFeatures: no reader limit in front) grew the peak by 644 MiB in the
    tokenizer (a 50 MB CSV field peaked at 11.6 GB); in pieces it grows by the ids alone."""
    out = in_fresh_process(_MEMORY, tiny_model(), " ".join(WORDS))
    grown, n_tokens, n_ids, n_content, n_words = map(int, out)
    assert (n_tokens, n_ids, n_content) == (n_words + 2, 256, n_words)  # one piece per word: the exact count
    assert grown < 100, f"peak RSS grew by {grown} MiB tokenizing a 4 MB text"


_PAIR_MEMORY = """
import sys
import numpy as np
from bertfeat.model.tokenize import BertTokenizer
tok = BertTokenizer.from_dir(sys.argv[1], 512)
words = sys.argv[2].split()
rng = np.random.default_rng(0)
a, b = (" ".join(words[i] for i in rng.integers(0, len(words), 2000)) for _ in range(2))
tok.encode(["warm"], ["up"], 16)
before = peak()
t = tok.encode([a], [b], 16)
e, truncated, n_full = tok.tokens(a, b, 16)
print(peak() - before, int(t.n_tokens[0]), len(t.ids[0]), int(e.ids == t.ids[0].tolist()), n_full)
"""


def test_truncating_a_long_pair_keeps_memory_bounded():
    """Found by the hostile-text hunt: a sentence pair longer than max length was cut by tokenizers' own truncation,
    which keeps each text's cut-off tokens in parts of the kept length and pairs every part of one text with every
    part of the other: two texts of 2,000 words cut to max length 16 grew the peak by 1.3 GB (two of 30,000 CJK
    characters at 256: 10 GB, 12 s). Each text's cut-off tokens are one part now, the ids the same (test_tokenize's
    pair tests compare them with transformers')."""
    out = in_fresh_process(_PAIR_MEMORY, tiny_model(), " ".join(WORDS))
    grown, n_tokens, n_ids, same, n_full = map(int, out)
    assert (n_tokens, n_ids, same, n_full) == (4003, 16, 1, 4003)
    assert grown < 50, f"peak RSS grew by {grown} MiB cutting a pair of 2,000 words each to 16 tokens"


def test_a_too_long_pair_is_not_told_to_use_chunks():
    """long_text="error" on sentence pairs: the fix offers what pairs take (chunk-* refuses pairs)."""
    from bertfeat.model.inputs import LongTextError

    enc = tiny_encoder()
    with pytest.raises(LongTextError) as e:
        enc.encode(["word " * 40], pairs=["other"], max_length=8, long_text="error")
    assert e.value.fix == "use long_text='truncate', or a larger max_length"
    with pytest.raises(LongTextError) as e:
        enc.encode(["word " * 40], max_length=8, long_text="error")
    assert e.value.fix == "use long_text='truncate', chunk-mean or chunk-max, or a larger max_length"


@pytest.mark.parametrize("how", ["mean", "max"])
def test_a_row_of_one_window_keeps_its_vectors_bits(how):
    """combine_windows: a row of one window is its window bit for bit, a -0.0 feature too (chunk-mean summed from
    0.0 made it 0.0, but only in a call that also held a long row: the same text's bits depended on its batch); a row
    of several windows is their token-weighted mean (float64) or element-wise max."""
    from bertfeat.model.batching import combine_windows

    win = np.array([[-0.0, 1.5, -2.0], [3.0, -0.0, 0.25], [1.0, 0.5, -0.0], [-0.0, -0.0, 7.0]], dtype=np.float32)
    window_row = np.array([0, 1, 1, 2])  # rows 0 and 2: one window each; row 1: two
    lengths = np.array([5, 3, 1, 8])
    out = combine_windows(win, window_row, lengths, 3, how)
    assert out.dtype == np.float32
    assert out[0].tobytes() == win[0].tobytes() and out[2].tobytes() == win[3].tobytes()
    want = (np.maximum(win[1], win[2]) if how == "max" else
            ((win[1].astype(np.float64) * 3 + win[2].astype(np.float64) * 1) / 4).astype(np.float32))
    assert out[1].tobytes() == want.tobytes()


@pytest.mark.live
@pytest.mark.parametrize("template", [None, "[CLS] $A [SEP] [SEP]", "$A [SEP]"])
def test_chunk_windows_are_framed_as_the_models_template_frames_a_row(tmp_path, template):
    """Each window of a chunked long text was framed [CLS] ... [SEP] whatever the tokenizer's template: a tokenizer.json
    without a post-processor (rows carry no special tokens; sentence-transformers encodes them so) or another
    template got windows no row of the model ever had, and vectors ~0.01 off (found by the session's model audit).
    Windows are framed by the template itself, as wide as max length leaves (their stride limit too); the reference
    is sentence-transformers' model run on each window framed by hand, weighted by its tokens."""
    import json

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    from bertfeat import Encoder
    from bertfeat.errors import BertfeatError

    d = tmp_path / "m"
    d.mkdir()
    for f in tiny_model().iterdir():
        if f.is_file():
            (d / f.name).write_bytes(f.read_bytes())
    AutoTokenizer.from_pretrained(str(tiny_model())).save_pretrained(str(d))
    tj = json.loads((d / "tokenizer.json").read_text())
    special = {t["content"]: t["id"] for t in tj["added_tokens"]}
    if template is None:
        tj["post_processor"] = None
    else:
        tj["post_processor"] = {"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": p, "type_id": 0}} if p != "$A" else {"Sequence": {"id": "A", "type_id": 0}}
            for p in template.split()], "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
            "special_tokens": {t: {"id": t, "ids": [special[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")}}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "tokenizer_class": "PreTrainedTokenizerFast"}))
    before, after = ([], []) if template is None else (
        [special[t] for t in template.split()[:template.split().index("$A")]],
        [special[t] for t in template.split()[template.split().index("$A") + 1:]])
    enc, st = Encoder(d), SentenceTransformer(str(d), device="cpu")
    text = " ".join(WORDS * 3)  # 93 one-piece words
    ids = enc.tokenizer.encode_content([text])[0].tolist()
    max_len, stride = 24, 4
    width = max_len - len(before) - len(after)
    framed, start = [], 0
    while True:
        framed.append(before + ids[start:start + width] + after)
        if start + width >= len(ids):
            break
        start += width - stride

    def vector(w):
        with torch.no_grad():
            return st[0]({"input_ids": torch.tensor([w]), "attention_mask": torch.ones(1, len(w), dtype=torch.long)}
                         )["token_embeddings"][0].mean(0).numpy().astype(np.float64)

    lengths = np.array([len(w) for w in framed], dtype=np.float64)
    want = (lengths[:, None] * np.stack([vector(w) for w in framed])).sum(0) / lengths.sum()
    got = enc.encode([text], long_text="chunk-mean", max_length=max_len, stride=stride, pooling="mean")[0]
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)
    assert enc.encode([text], long_text="chunk-mean", max_length=max_len, stride=stride, pooling="mean",
                      return_info=True).n_chunks.tolist() == [len(framed)]
    with pytest.raises(BertfeatError, match=f"choose stride from 0 to {width - 1} "):
        enc.encode([text], long_text="chunk-mean", max_length=max_len, stride=width)
    # the vector cache keeps such a model's chunked rows apart from those cached before (framed [CLS] ... [SEP]); a
    # BERT template's keys stay as they were
    from bertfeat.cache.store import cache_fingerprint

    chunked = dict(long_text="chunk-mean", max_length=max_len, stride=stride)
    assert cache_fingerprint(enc, enc.spec(**chunked))[1]["window_frame"] == [before, after]
    assert "window_frame" not in cache_fingerprint(enc, enc.spec())[1]
    assert "window_frame" not in cache_fingerprint(tiny_encoder(), tiny_encoder().spec(**chunked))[1]
