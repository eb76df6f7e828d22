"""A kept JSONL column of numbers (its type decided by the file's first lines) keeps their values; a number the line
writes in other digits than the output writes it back (1E5 as 100000, 2.50 as 2.5, 1.0 as 1) is the same number, not
the same text, and the run says so: one `Warning:` line per column (also under --quiet), `numbers_respelled` in the
summary, on both engines. `--keep k:str` keeps the text; a type given (`k:float`) reads each number as asked, unsaid."""

from __future__ import annotations

import json
import warnings

import pyarrow.csv as pacsv
import pytest

from extract_util import read_table, run, tiny_model

import bertfeat
from bertfeat.errors import BertfeatWarning

LINES = ['{"text": "a b", "k": 1.5, "n": 7}', '{"text": "", "k": 3E2, "n": 1}', '{"text": "c d", "k": 1E5, "n": 8}',
         '{"text": "e f", "k": 2.50, "n": 9}', '{"text": "g h", "k": 1.0, "n": 10}', '{"text": "i j", "k": 0.1, "n": -3}']
WARNING = ("Warning: {src}: kept column 'k' holds 3 JSON numbers written in other digits than the line's (the first, "
           "1E5 on row 2, as 100000): the same numbers, not the same text; give {fix} to keep the text")


def jsonl(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(LINES) + "\n")
    return src


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_numbers_written_in_other_digits_are_one_warning_line_and_a_summary_field(tmp_path, capsys, engine):
    src, out, log = jsonl(tmp_path), tmp_path / ("o.csv" if engine == "local" else "o"), tmp_path / "run.json"
    more = ["--engine", "dask", "--workers", "1", "--threads", "1"] if engine == "dask" else []
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--keep", "k,n", "-q",
                          "--on-bad-row", "skip", "--summary-json", log, *more)
    # row 1 (3E2) is a bad row (an empty text): the rejects file shows it as written, the warning does not count it
    assert (rc, stdout, err) == (0, "", WARNING.format(src=src, fix="--keep k:str,n") + "\n")
    assert json.loads(log.read_text())["numbers_respelled"] == {"k": 3}
    if engine == "local":  # a CSV writes the numbers as the warning says
        t = pacsv.read_csv(out, convert_options=pacsv.ConvertOptions(column_types={"k": "string", "n": "string"}))
        assert t.column("k").to_pylist() == ["1.5", "100000", "2.5", "1", "0.1"]  # the same numbers
        assert t.column("n").to_pylist() == ["7", "8", "9", "10", "-3"]
    else:  # a Parquet dataset keeps the doubles
        assert read_table(out).column("k").to_pylist() == [1.5, 100000.0, 2.5, 1.0, 0.1]


def test_str_keeps_the_text_and_a_given_float_is_read_as_asked_without_a_warning(tmp_path, capsys):
    src, out = jsonl(tmp_path), tmp_path / "o.csv"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--keep", "k:str,n", "-q",
                     "--on-bad-row", "skip")
    assert (rc, err) == (0, "")
    t = pacsv.read_csv(out, convert_options=pacsv.ConvertOptions(column_types={"k": "string"}))
    assert t.column("k").to_pylist() == ["1.5", "1E5", "2.50", "1.0", "0.1"]  # as the lines wrote them
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "f.parquet", "--model", tiny_model(), "--keep", "k:float",
                     "-q", "--on-bad-row", "skip")
    assert (rc, err) == (0, "")
    assert read_table(tmp_path / "f.parquet").column("k").to_pylist() == [1.5, 100000.0, 2.5, 1.0, 0.1]


def test_python_callers_get_a_warning_naming_the_keyword(tmp_path):
    src = jsonl(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = bertfeat.extract(str(src), output=str(tmp_path / "o.parquet"), model=str(tiny_model()), keep=["k", "n"],
                             on_bad_row="skip", quiet=True)
    words = [str(w.message) for w in seen if issubclass(w.category, BertfeatWarning)]
    assert words == [WARNING.format(src=src, fix="keep='k:str,n'").removeprefix("Warning: ")]
    assert s.numbers_respelled == {"k": 3}


def test_a_resumed_run_counts_the_numbers_of_the_chunks_the_interrupted_run_finished(tmp_path, capsys, monkeypatch):
    """The local engine's parts keep each chunk's tally (its part metadata, as a Dask part's stats do): a resume that
    takes the first chunks from the interrupted run says what an uninterrupted run says (found by review: it said
    nothing, the 1E5 being in a kept chunk)."""
    import bertfeat.run.progress
    from extract_util import Interrupt

    src, out, log = jsonl(tmp_path), tmp_path / "o.parquet", tmp_path / "run.json"
    args = ["extract", src, "-o", out, "--model", tiny_model(), "--keep", "k,n", "--chunk-rows", 3, "--on-bad-row",
            "skip", "-q"]
    monkeypatch.setattr(bertfeat.run.progress, "make_progress", lambda *a, **k: Interrupt(1))
    assert run(capsys, *args)[0] == 130  # the first chunk (rows 0-2: 1E5 on row 2) kept
    monkeypatch.undo()
    rc, _, err = run(capsys, *args, "--resume", "--summary-json", log)
    assert (rc, err) == (0, WARNING.format(src=src, fix="--keep k:str,n") + "\n")
    assert json.loads(log.read_text())["numbers_respelled"] == {"k": 3}


def test_the_fix_keeps_every_kept_column_and_quotes_a_name_that_needs_it(tmp_path, capsys):
    """The fix is the run's whole --keep, the column given str: a name holding a comma is quoted as --keep reads it
    (the bare name split it into two options), and running that fix keeps the text without a warning."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a b", "k, x": 1E5, "n": 2}\n{"text": "c d", "k, x": 2.5, "n": 3}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep",
                     '"k, x",n', "-q")
    fix = """--keep '"k, x":str,n'"""
    assert (rc, err) == (0, f"Warning: {src}: kept column 'k, x' holds 1 JSON number written in other digits than the "
                            f"line's (the first, 1E5 on row 0, as 100000): the same number, not the same text; give "
                            f"{fix} to keep the text\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "p.parquet", "--model", tiny_model(), "--keep",
                     '"k, x":str,n', "-q")
    assert (rc, err) == (0, "")
    t = read_table(tmp_path / "p.parquet")
    assert (t.column("k, x").to_pylist(), t.column("n").to_pylist()) == (["1E5", "2.5"], [2, 3])


def test_a_caller_whose_filter_makes_the_warning_an_error_still_gets_the_reports_probe(tmp_path):
    """The local engine warned before it added the linear probe to the PCA report: a Python caller whose warnings
    filter turned BertfeatWarning into an error got a report without its probe (the Dask engine's order: probe, then
    warnings)."""
    src = tmp_path / "lab.jsonl"
    src.write_text("".join(f'{{"text": "{w} number {i}", "k": {i}.0, "y": {i % 2}}}\n'
                           for i, w in enumerate(["cats", "dogs", "sun", "rain", "tea", "code"] * 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertfeatWarning)
        with pytest.raises(BertfeatWarning, match="kept column 'k' holds 24 JSON numbers"):
            bertfeat.extract(str(src), output=str(tmp_path / "o.parquet"), model=str(tiny_model()), keep=["k", "y"],
                             label="y", pca=4, quiet=True)
    assert "probe" in json.loads((tmp_path / "o.pca.report.json").read_text())
