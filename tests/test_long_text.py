"""--long-text on a 3,000-token document: truncate, chunk-mean, chunk-max and error.

The model is the small random-weight BERT of tests/ckpt.py (uncased vocab, max length 128), so
that the 3,000 tokens encode in well under a second. The document is made of words that are one
word piece each, so a window of k tokens is exactly
the text of k words and can be encoded on its own through ``Encoder.encode``: the expected
features are computed window by window, independently of the pipeline's windowing code.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from extract_util import (assert_close, embeddings, metadata, read_table, run, summary_line, tiny_encoder, tiny_model,
                          write_csv)

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
    included, in the message and the rejects file (it counted the text alone: '64 tokens, more than max length 64')."""
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
    assert err.splitlines()[-1].startswith(f"Error: {src} row 0: 73 tokens, more than max length 64 (--long-text error)")
    rc, _, err = run(capsys, *args, "--on-bad-row", "skip")
    assert rc == 0, err
    with open(tmp_path / "o.parquet.rejects.csv", newline="") as f:
        assert list(csv.reader(f))[1] == ["0", "", "73 tokens, more than max length 64 (--long-text error)"]


def test_a_stride_without_a_chunk_mode_is_refused_in_python_too():
    """Encoder.encode / TextFeatures refuse a stride that truncate or error would ignore, as extract does."""
    from bertfeat.errors import BertfeatError
    from bertfeat.sklearn import TextFeatures

    enc = tiny_encoder()
    fix = "add --long-text chunk-mean (or chunk-max) to cut long texts into windows, or drop --stride"
    for call in (lambda: enc.encode(SHORT, long_text="truncate", stride=5),
                 lambda: TextFeatures(model=tiny_model(), long_text="error", stride=5).fit_transform(SHORT)):
        with pytest.raises(BertfeatError, match="applies to") as e:
            call()
        assert "stride=5" in str(e.value) and e.value.fix.replace("long_text=", "--long-text ").startswith("add")
    assert enc.encode(SHORT, long_text="chunk-mean", stride=5).shape == enc.encode(SHORT).shape


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
