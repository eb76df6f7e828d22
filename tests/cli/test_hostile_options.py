"""Hostile option values found by running the CLI: each was accepted (or said wrongly) before its fix.

* ``--pair-column`` naming the text column encoded every text as a pair with itself, without a word.
* ``pca transform --format CSV -o r.csv`` said "ends in .csv, but --format CSV writes CSV - name the output .parquet".
"""

from __future__ import annotations


import pytest

from extract_util import no_leftovers, run, tiny_model, write_csv


@pytest.fixture
def corpus(tmp_path):
    return write_csv(tmp_path / "in.csv", ["id", "text", "other"], [[1, "hello world", "a b"], [2, "café", "c d"]])


@pytest.mark.parametrize("flags, how", [
    ((), "the text column too (auto-detected)"),
    (("--text-column", "other"), "the text column too (--text-column other)"),
])
def test_pair_column_that_is_the_text_column_is_refused(corpus, capsys, flags, how):
    pair = "other" if flags else "text"
    out = corpus.parent / "o.parquet"
    rc, _, err = run(capsys, "extract", corpus, "-m", tiny_model(), "-o", out, "--pair-column", pair, *flags)
    fix = "give --pair-column the column that holds each row's second text" + ("" if flags else ", and --text-column the first's")
    assert (rc, err) == (1, f"Error: {corpus}: --pair-column {pair} is {how}, so each text would be encoded as a pair "
                            f"with itself - {fix}\n")
    assert no_leftovers(out) == []


def test_sweep_refuses_the_pair_column_that_is_the_text_column(corpus, capsys):
    rc, _, err = run(capsys, "sweep", corpus, "-m", tiny_model(), "-q", "--pair-column", "text", "-o",
                     corpus.parent / "sw")
    assert (rc, err) == (1, f"Error: {corpus}: --pair-column text is the text column too (auto-detected), so each "
                            "text would be encoded as a pair with itself - give --pair-column the column that holds "
                            "each row's second text, and --text-column the first's\n")
    assert sorted(p.name for p in corpus.parent.iterdir()) == ["in.csv"]


def test_pca_transform_format_in_upper_case(tmp_path, capsys):
    """The format name was compared with the extension before it was checked: a contradiction, not the cause."""
    import numpy as np

    feats, model = tmp_path / "f.npy", tmp_path / "p.npz"
    np.save(feats, np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32))
    assert run(capsys, "pca", "fit", feats, "-o", model, "-n", 2, "-q")[0] == 0
    rc, _, err = run(capsys, "pca", "transform", feats, "--pca-model", model, "-o", tmp_path / "r.csv", "--format", "CSV")
    assert (rc, err) == (1, "Error: unknown --format 'CSV' - choose one of parquet, npy, csv (formats are lower case: "
                            "--format csv)\n")
    assert not (tmp_path / "r.csv").exists()


def _pca_inputs(tmp_path):
    import numpy as np

    feats, model = tmp_path / "f.npy", tmp_path / "p.npz"
    np.save(feats, np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32))
    return feats, model


@pytest.mark.parametrize("args, what, flag, name, clean", [
    (["extract", "{csv}", "-m", "{model}", "-q", "-o"], "output", "-o", "o.parquet ", "o.parquet"),
    (["extract", "{csv}", "-m", "{model}", "-q", "-o"], "output", "-o", " o.parquet", "o.parquet"),
    (["extract", "{csv}", "-m", "{model}", "-q", "-o"], "output", "-o", "o.parquet\t", "o.parquet"),
    (["extract", "{csv}", "-m", "{model}", "-q", "-o"], "output", "-o", "o.parquet\xa0", "o.parquet"),
    (["extract", "{csv}", "-m", "{model}", "-q", "-o", "{dir}/o.parquet", "--summary-json"], "summary JSON",
     "--summary-json", "run.json ", "run.json"),
    (["sweep", "{csv}", "-m", "{model}", "-q", "-o"], "report prefix", "-o", "sw ", "sw"),
    (["pca", "fit", "{feats}", "-n", "2", "-q", "-o"], "PCA model", "-o", "p2.npz ", "p2.npz"),
    (["pca", "transform", "{feats}", "--pca-model", "{pca}", "-o"], "output", "-o", "r.npy ", "r.npy"),
    (["attention", "a text", "-m", "{model}", "-o"], "output", "-o", "a.png ", "a.png"),
])
def test_an_output_name_with_whitespace_at_an_end_is_refused(tmp_path, capsys, args, what, flag, name, clean):
    """-o 'o.parquet ' wrote a file named 'o.parquet ' (a stray space inside the quotes, a pasted name), rc 0."""
    corpus = write_csv(tmp_path / "in.csv", ["id", "text"], [[1, "hello world"], [2, "good day"]])
    feats, pca = _pca_inputs(tmp_path)
    assert run(capsys, "pca", "fit", feats, "-o", pca, "-n", 2, "-q")[0] == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    fill = {"csv": corpus, "model": tiny_model(), "feats": feats, "pca": pca, "dir": tmp_path}
    argv = [a.format(**fill) for a in args]
    out = tmp_path / name
    rc, _, err = run(capsys, *argv, out)
    where, space = ("starts with", "a space") if name[0] == " " else (
        "ends in", {" ": "a space", "\t": "a tab", "\xa0": "a no-break space"}[name[-1]])
    assert (rc, err) == (1, f"Error: the {what} {str(out)!r} {where} {space}, which would be part of the name written - "
                            f"pass {flag} without it: {flag} {tmp_path / clean}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_output_name_of_whitespace_only_and_the_python_api(tmp_path, capsys):
    import bertfeat

    corpus = write_csv(tmp_path / "in.csv", ["id", "text"], [[1, "hello world"]])
    rc, _, err = run(capsys, "extract", corpus, "-m", tiny_model(), "-o", tmp_path / "  ")
    assert (rc, err) == (1, f"Error: the output {str(tmp_path / '  ')!r} names a file of whitespace only - pass -o with "
                            "a file name, e.g. -o features.parquet\n")
    out = tmp_path / "o.parquet "
    with pytest.raises(bertfeat.BertfeatError) as e:
        bertfeat.extract(corpus, out, model=tiny_model())
    assert e.value.message == (f"the output {str(out)!r} ends in a space, which would be part of the name written - "
                               f"pass output without it: output={str(tmp_path / 'o.parquet')!r}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
