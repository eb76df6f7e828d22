"""`extract --id-column` with an id on more than one row: every row is still encoded and written, and the run says so
(one `Warning:` line, also under --quiet, and `ids_repeated` in the summary), as users join the features back by id.
Ids are compared as the output holds them: CSV ids are text, so '010' and '10' are two ids."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from extract_util import Interrupt, read_table, run, tiny_model, write_csv

import bertfeat
from bertfeat.errors import BertfeatWarning
from bertfeat.features import open_features

# row 0 is bad (an empty text), so the rows written are 1..6: numbered as the input's rows, as the rejects file does
ROWS = [["8", ""], ["10", "a cat sat"], ["010", "a dog ran"], ["7", "a cat sat"], ["10", "birds fly"],
        ["7", "fish swim"], ["10", "the end"]]


def warning_line(src, n: int = 2, first: str = "'10'", rows: str = "1 and 4") -> str:
    return (f"Warning: {src}: the id column 'id' repeats {n} ids (the first, {first}, on rows {rows}); every row is "
            "written, so a join on 'id' matches each of them")


@pytest.mark.parametrize("chunk_rows", [2, 100])  # repeats across chunks of a streamed run, and within one chunk
def test_a_repeated_id_is_one_warning_line_and_a_summary_field(tmp_path, capsys, chunk_rows):
    src = write_csv(tmp_path / "in.csv", ["id", "text"], ROWS)
    out, log = tmp_path / "o.parquet", tmp_path / "run.json"
    rc, stdout, err = run(capsys, "extract", src, "--id-column", "id", "-o", out, "--model", tiny_model(), "--quiet",
                          "--on-bad-row", "skip", "--chunk-rows", chunk_rows, "--summary-json", log)
    assert (rc, stdout, err) == (0, "", warning_line(src) + "\n")  # --quiet: the warning alone, as every warning
    assert json.loads(log.read_text())["ids_repeated"] == 2  # '10' (rows 1, 4, 6) and '7' (rows 3, 5)
    assert read_table(out).column("id").to_pylist() == ["10", "010", "7", "10", "7", "10"]  # nothing lost
    assert (tmp_path / "o.parquet.rejects.csv").read_text().splitlines()[1] == "0,8,empty text"


def test_the_warning_comes_with_the_summary_without_quiet(tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [["a", "one"], ["b", "two"], ["a", "three"]])
    rc, stdout, err = run(capsys, "extract", src, "--id-column", "id", "-o", tmp_path / "o.parquet", "--model",
                          tiny_model())
    assert rc == 0 and stdout == ""
    assert err.splitlines().count(warning_line(src, 1, "'a'", "0 and 2").replace("1 ids", "1 id")) == 1


def test_unique_ids_and_ids_that_differ_only_as_text_give_no_warning(tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [["10", "a"], ["010", "b"], ["0010", "c"], [" 10", "d"],
                                                          ["10.0", "e"]])
    log = tmp_path / "run.json"
    rc, stdout, err = run(capsys, "extract", src, "--id-column", "id", "-o", tmp_path / "o.parquet", "--model",
                          tiny_model(), "--quiet", "--summary-json", log)
    assert (rc, stdout, err) == (0, "", "")
    assert json.loads(log.read_text())["ids_repeated"] == 0
    rc, stdout, err = run(capsys, "extract", src, "-o", tmp_path / "rows.parquet", "--model", tiny_model(), "--quiet",
                          "--summary-json", log)  # no id column: the row numbers, which never repeat, are not checked
    assert (rc, stdout, err) == (0, "", "") and json.loads(log.read_text())["ids_repeated"] is None


def test_python_gets_a_bertfeat_warning(tmp_path):
    src = write_csv(tmp_path / "in.csv", ["id", "text"], ROWS)
    with pytest.warns(BertfeatWarning) as got:
        s = bertfeat.extract(src, tmp_path / "o.parquet", id_column="id", model=str(tiny_model()), on_bad_row="skip")
    assert [str(w.message) for w in got] == [warning_line(src).removeprefix("Warning: ")]
    assert s.ids_repeated == 2 and s.to_dict()["ids_repeated"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertfeatWarning)  # no id column: nothing checked, no warning
        s = bertfeat.extract(src, tmp_path / "u.parquet", model=str(tiny_model()), on_bad_row="skip")
    assert s.ids_repeated is None


def test_a_resumed_run_sees_the_ids_of_its_kept_chunks(tmp_path, capsys):
    """The first '10' and '7' are in the chunks the interrupted run kept: the resume reads their ids back from the
    parts, and their rows (a kept chunk's rows less its rejects: '10' is on row 1, after the bad row 0)."""
    src = write_csv(tmp_path / "in.csv", ["id", "text"], ROWS)
    out = tmp_path / "o.parquet"
    kw = dict(id_column="id", model=str(tiny_model()), on_bad_row="skip", chunk_rows=2)
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(src, out, progress=Interrupt(after=2), **kw)  # chunks 0 and 1 (rows 0-3) kept
    assert len(list((tmp_path / "o.parquet.partial").glob("part-*.parquet"))) == 2
    with pytest.warns(BertfeatWarning) as got:
        s = bertfeat.extract(src, out, resume=True, **kw)
    assert s.chunks_resumed == 2 and s.ids_repeated == 2
    assert [str(w.message) for w in got] == [warning_line(src).removeprefix("Warning: ")]
    assert read_table(out).column("id").to_pylist() == ["10", "010", "7", "10", "7", "10"]


@pytest.mark.parametrize("typ, values, shown", [
    (pa.time64("ns"), [1, 1_500, 1], "00:00:00.000000001"),  # nanoseconds: Python's time would cut them
    (pa.date32(), [2 ** 31 - 1, 0, 2 ** 31 - 1], "2147483647 (date32[day])"),  # past Python's (and Arrow's text) range
    (pa.timestamp("s"), [253_402_300_800, 0, 253_402_300_800], "10000-01-01 00:00:00.000"),  # the year 10000 (stored as ms)
])
def test_ids_no_python_object_holds_are_compared_as_stored(tmp_path, typ, values, shown):
    """A Parquet id column of times, dates or timestamps that Python's objects cut or cannot hold (the run failed
    with an OverflowError after writing its parts): compared by the integers Arrow stores, shown as Arrow's text."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array(values, typ), "text": ["one", "two", "three"]}), src)
    with pytest.warns(BertfeatWarning) as got:
        s = bertfeat.extract(src, tmp_path / "o.parquet", id_column="id", model=str(tiny_model()))
    assert s.ids_repeated == 1
    assert [str(w.message) for w in got] == [
        f"{src}: the id column 'id' repeats 1 id (the first, {shown}, on rows 0 and 2); every row is written, so a "
        "join on 'id' matches each of them"]
    assert pq.read_table(tmp_path / "o.parquet").column("id").equals(pq.read_table(src).column("id"))  # as read


def _python_reference(ids: list, rows: list[int]):
    """(count, first) by a dict of Python objects, in row order: what RepeatedIds must give."""
    seen, count, first = {}, 0, None
    for ident, row in zip(ids, rows):
        if ident not in seen:
            seen[ident] = [row]
        else:
            seen[ident].append(row)
            if len(seen[ident]) == 2:
                count += 1
                first = first or (ident, seen[ident][0], row)
    return count, first


@pytest.mark.parametrize("seed", range(6))
def test_the_arrow_sort_finds_what_a_dict_of_python_ids_finds(seed):
    """RepeatedIds sorts the run's ids once (Arrow) instead of holding a dict of Python objects: the same count and
    first repeat (its id, its first row, the earliest row repeating an id) as a dict over the rows in order, over
    units of several sizes, ints or strings (one of them a dictionary array), with bad rows' gaps in the numbering."""
    from bertfeat.run.summary import RepeatedIds

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    values = rng.integers(0, max(2, n // int(rng.integers(1, 4))), n)
    ids = [f"id{v:03d}" for v in values] if seed % 2 else values.tolist()
    rows = np.cumsum(rng.integers(1, 3, n)).tolist()  # increasing, with gaps
    r, at = RepeatedIds(), 0
    while at < n:
        step = int(rng.integers(1, 60))
        arr = pa.array(ids[at:at + step])
        r.add(arr.dictionary_encode() if seed == 3 else arr, rows[at:at + step])
        at += step
    assert (r.count, r.first) == _python_reference(ids, rows)


def test_list_ids_arrow_cannot_sort_are_compared_as_python_objects():
    from bertfeat.run.summary import RepeatedIds

    r = RepeatedIds()
    r.add(pa.array([[1, 2], [3], [1, 2]]), [0, 1, 5])
    assert (r.count, r.first) == (1, ([1, 2], 0, 5))
    for units in ([], [([], [])], [(["a"], [3])]):  # no unit, a unit of no written row (all rejected), one row
        r = RepeatedIds()
        for ids, rows in units:
            r.add(pa.array(ids, pa.string()), rows)
        assert (r.count, r.first, r.warning("in.csv", "id")) == (0, None, None)


@pytest.mark.parametrize("pca", [False, True])  # the parts read back from OUTPUT.partial/ or its full-width stage
def test_the_dask_engine_gives_the_same_warning_and_count(tmp_path, capsys, pca):
    """Each partition's task sees only its own ids: the client reads every part's ids back (with its rows less its
    rejects) and warns as the local engine does, across partitions (--blocksize 20: a few rows each) and with the bad row 0."""
    src = write_csv(tmp_path / "in.csv", ["id", "text"], ROWS)
    out, log = tmp_path / "o", tmp_path / "run.json"
    rc, stdout, err = run(capsys, "extract", src, "--id-column", "id", "-o", out, "--model", tiny_model(), "--quiet",
                          "--on-bad-row", "skip", "--engine", "dask", "--workers", "1", "--threads", "1",
                          "--blocksize", 20, "--summary-json", log, *(["--pca", 2] if pca else []))
    assert (rc, stdout) == (0, "") and err.splitlines().count(warning_line(src)) == 1, err
    assert json.loads(log.read_text())["ids_repeated"] == 2
    assert read_table(out).column("id").to_pylist() == ["10", "010", "7", "10", "7", "10"]
    assert len(list(out.glob("*.parquet"))) >= 3  # the repeats cross partitions


def test_struct_ids_arrow_cannot_sort_warn_instead_of_failing_the_run(tmp_path, capsys):
    """A Parquet struct id column: Arrow's sort raises ArrowInvalid for a struct (not ArrowNotImplementedError, as for
    a list), so the run failed ("unexpected ArrowInvalid ... a bug", exit 1) after writing its outputs."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [{"a": 1}, {"a": 2}, {"a": 1}], "text": ["one", "two", "three"]}), src)
    out = tmp_path / "o.parquet"
    rc, stdout, err = run(capsys, "extract", src, "--id-column", "id", "-o", out, "--model", tiny_model(), "--quiet")
    assert (rc, stdout, err) == (0, "", f"Warning: {src}: the id column 'id' repeats 1 id (the first, {{'a': 1}}, on "
                                        "rows 0 and 2); every row is written, so a join on 'id' matches each of them\n")
    assert read_table(out).column("id").to_pylist() == [{"a": 1}, {"a": 2}, {"a": 1}]


def test_a_unit_of_no_written_row_and_no_id_type_is_left_out():
    """Standard input whose first lines decide no id type (id_type None): a chunk whose rows were all rejected has an
    id column of Arrow's null type, and the ids of the run could not be put together ("Array chunks must all be same
    type": exit 1 after the outputs were written). The output's writer takes the first written id's type."""
    from bertfeat.run.summary import RepeatedIds

    r = RepeatedIds()
    r.add(pa.array([]), [])
    r.add(pa.array([5, 6]), [1001, 1002])
    r.add(pa.array([], pa.int64()), [])
    r.add(pa.array([5]), [1004])
    assert (r.count, r.first) == (1, (5, 1001, 1004))


def test_a_stdin_run_whose_first_chunk_is_all_rejected(tmp_path):
    """The real thing: JSONL on standard input whose first 1,000 lines (the head the columns are found in) hold no id,
    then a repeated id."""
    import subprocess
    import sys
    from pathlib import Path

    lines = [json.dumps({"id": None, "text": "x"})] * 1001 + [json.dumps({"id": 5, "text": t}) for t in ("a", "b")]
    out = tmp_path / "o.parquet"
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run([sys.executable, "-m", "bertfeat", "extract", "-", "--input-format", "jsonl", "--id-column", "id",
                        "-o", str(out), "--model", str(tiny_model()), "--max-bad-rows", "2000", "--chunk-rows", "500",
                        "--quiet"], input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=300)
    assert (p.returncode, p.stdout, p.stderr) == (
        0, "", "Warning: <stdin>: the id column 'id' repeats 1 id (the first, 5, on rows 1001 and 1002); every row is "
               "written, so a join on 'id' matches each of them\n")
    assert read_table(out).column("id").to_pylist() == [5, 5]


def test_nan_ids_repeat_and_the_first_rows_id_is_shown():
    """NaN ids: Arrow's equal says NaN != NaN, but a join matches them (pandas' merge, Polars), so two NaN
    rows are a repeat. 0.0 and -0.0 are one id (a join matches them): the id shown is the first row's, not -0.0 for a
    row that holds 0.0."""
    from bertfeat.run.summary import RepeatedIds

    r = RepeatedIds()
    r.add(pa.array([float("nan"), 1.0]), [0, 1])
    r.add(pa.array([float("nan"), 2.0, float("nan")], pa.float64()), [3, 4, 7])
    assert r.count == 1 and r.first[1:] == (0, 3) and np.isnan(r.first[0])
    r = RepeatedIds()
    r.add(pa.array([0.0, 3.0, -0.0]), [0, 1, 2])
    assert (r.count, r.first) == (1, (0.0, 0, 2)) and str(r.first[0]) == "0.0"
    assert "(the first, 0.0, on rows 0 and 2)" in r.warning("in.parquet", "id")


def test_a_float32_id_is_shown_as_its_shortest_text(tmp_path, capsys):
    """Not as the double it widens to ('0.10000000149011612'): as the rejects file shows such a value."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array(np.array([0.1, 0.2, 0.1], np.float32)),
                             "text": ["one", "two", "three"]}), src)
    rc, stdout, err = run(capsys, "extract", src, "--id-column", "id", "-o", tmp_path / "o.parquet", "--model",
                          tiny_model(), "--quiet")
    assert (rc, stdout, err) == (0, "", f"Warning: {src}: the id column 'id' repeats 1 id (the first, 0.1, on rows 0 "
                                        "and 2); every row is written, so a join on 'id' matches each of them\n")


def test_float16_ids_repeat_as_a_join_compares_them():
    """Arrow sorts no float16 (halffloat): such ids were compared as Python floats in a dict, where two NaN ids were
    two ids (pandas' duplicated and merge match them, as the float32 / float64 check does) and the id showed as the
    double it widens to (0.0999755859375, not 0.1)."""
    from bertfeat.run.summary import RepeatedIds

    r = RepeatedIds()
    r.add(pa.array([0.1, float("nan"), 0.2, float("nan"), 0.1, -0.0, 0.0], pa.float64()).cast(pa.float16()),
          [0, 1, 2, 3, 4, 5, 6])
    assert r.count == 3  # NaN (rows 1, 3), 0.1 (rows 0, 4), 0 (rows 5, 6)
    assert r.warning("in.parquet", "id") == (
        "in.parquet: the id column 'id' repeats 3 ids (the first, nan, on rows 1 and 3); every row is written, so a "
        "join on 'id' matches each of them")
    r = RepeatedIds()
    r.add(pa.array([0.1, 0.2, 0.1], pa.float64()).cast(pa.float16()), [0, 1, 2])
    assert (r.count, str(r.first[0]), r.first[1:]) == (1, "0.1", (0, 2))


@pytest.mark.parametrize("fmt", ["parquet", "csv", "npy"])
def test_float16_parquet_ids_warn_and_read_back(tmp_path, fmt):
    src = tmp_path / "in.parquet"
    ids = pa.array([0.1, float("nan"), 0.1, float("nan")], pa.float64()).cast(pa.float16())
    pq.write_table(pa.table({"id": ids, "text": ["one", "two", "three", "four"]}), src)
    with pytest.warns(BertfeatWarning) as got:
        s = bertfeat.extract(src, tmp_path / f"o.{fmt}", id_column="id", model=str(tiny_model()))
    assert s.ids_repeated == 2
    assert [str(w.message) for w in got] == [
        f"{src}: the id column 'id' repeats 2 ids (the first, 0.1, on rows 0 and 2); every row is written, so a join "
        "on 'id' matches each of them"]
    back = [v for b in open_features(tmp_path / f"o.{fmt}").batches() for v in b[0]]
    np.testing.assert_array_equal(np.array(back, np.float16), np.array(ids.to_pylist(), np.float16))


def test_each_run_that_repeats_an_id_warns_under_pythons_default_filter(tmp_path):
    """Python's default filter shows a warning once per text and line: a second run of one input (the same path, the
    same repeat: a file rewritten, a notebook cell run again) said nothing, and the line named was bertfeat's own
    (run/local.py), not the caller's."""
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [["a", "one"], ["b", "two"], ["a", "three"]])
    with warnings.catch_warnings(record=True) as got:
        warnings.resetwarnings()  # Python's default: no filter, the action "default"
        for n in range(2):
            line = sys._getframe().f_lineno + 1
            bertfeat.extract(src, tmp_path / f"o{n}.parquet", id_column="id", model=str(tiny_model()))
    words = (f"{src}: the id column 'id' repeats 1 id (the first, 'a', on rows 0 and 2); every row is written, so a "
             "join on 'id' matches each of them")
    assert [str(w.message) for w in got] == [words] * 2  # the second run too
    assert {(w.category, w.filename, w.lineno) for w in got} == {(BertfeatWarning, __file__, line)}  # the caller's line


def test_a_users_filter_still_decides(tmp_path):
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [["a", "one"], ["a", "two"]])
    kw = dict(id_column="id", model=str(tiny_model()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertfeatWarning)
        with pytest.raises(BertfeatWarning, match="repeats 1 id"):
            bertfeat.extract(src, tmp_path / "e.parquet", **kw)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("ignore", BertfeatWarning)
        assert bertfeat.extract(src, tmp_path / "i.parquet", **kw).ids_repeated == 1
    assert got == []
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("once", BertfeatWarning)
        for n in range(2):
            bertfeat.extract(src, tmp_path / f"o{n}.parquet", **kw)
    assert len(got) == 1


@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_the_warning_from_python_c_or_standard_input(tmp_path, how):
    """From `python -c`, a script on standard input or the REPL, every bertfeat warning raised ImportError ('__main__'
    is not a built-in module: the caller's source was asked of a loader that has none) after the output was written."""
    import subprocess

    src = write_csv(tmp_path / "in.csv", ["id", "text"], [["a", "one"], ["a", "two"]])
    code = (f"import bertfeat\ns = bertfeat.extract({str(src)!r}, {str(tmp_path / 'o.parquet')!r}, id_column='id', "
            f"model={str(tiny_model())!r})\nprint(s.ids_repeated)\n")
    args, given = ([sys.executable, "-c", code], None) if how == "-c" else ([sys.executable, "-"], code)
    p = subprocess.run(args, input=given, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    shown = "<string>:2" if how == "-c" else "<stdin>:2"
    assert (p.returncode, p.stdout) == (0, "1\n"), p.stderr
    assert p.stderr == (f"{shown}: BertfeatWarning: {src}: the id column 'id' repeats 1 id (the first, 'a', on rows 0 and "
                        "1); every row is written, so a join on 'id' matches each of them\n")
