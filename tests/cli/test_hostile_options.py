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
