"""``--id-column NAME:str``: every id read as the text the input wrote (JSONL numbers and strings mixed, integers past
int64, ``1e2``, ``-0``; Parquet integers as their digits), written, verified and resumed as such."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertfeat
from bertfeat.readers import open_input, split_id_column
from extract_util import metadata, read_table, run, tiny_model
from test_resume import interrupted_run, parts

IDS = ['1', '"01"', "123456789012345678901234", "1e2", "-0", "2.50", "true"]
WRITTEN = ["1", "01", "123456789012345678901234", "1e2", "-0", "2.50"]  # the line's own text, the boolean a bad row


def jsonl(path, ids=IDS):
    path.write_text("".join(f'{{"id": {i}, "text": "word {k} of the river"}}\n' for k, i in enumerate(ids)))
    return path


@pytest.mark.parametrize("text, want", [
    ("id:str", ("id", True)), ("id", ("id", False)), (None, (None, False)), ("a:str:str", ("a:str", True)),
    (":str", (":str", False)),  # a column named ":str": no name is left before the suffix
    ("time:utc", ("time:utc", False)), ("id:int", ("id:int", False)),  # only :str is a suffix
])
def test_split_id_column(text, want):
    assert split_id_column(text) == want


def test_without_str_a_mixed_id_says_how_to_read_every_id_as_written(tmp_path, capsys):
    src = jsonl(tmp_path / "in.jsonl")
    rc, out, err = run(capsys, "extract", src, "--id-column", "id", "-o", tmp_path / "o.csv", "--model", tiny_model(),
                       "--quiet")
    assert (rc, out, err) == (1, "", f'Error: {src} row 1: id "01" is a string, but the ids before it are integers; '
                                     "--id-column id:str reads every id as the line wrote it - fix the row, or pass "
                                     "--on-bad-row skip to write it to the rejects file and go on\n")
    assert not (tmp_path / "o.csv").exists()


def test_each_bad_id_reason_names_the_fix_where_it_is_one(tmp_path, capsys):
    """A number, a mix of kinds, an integer past int64 and -0 are what :str reads; a boolean is no id either way.
    A column name with a space is quoted for the shell."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"my id": {i}, "text": "w"}}\n' for i in IDS))
    rc, _, err = run(capsys, "extract", src, "--id-column", "my id", "-o", tmp_path / "o.csv", "--model", tiny_model(),
                     "--quiet", "--on-bad-row", "skip")
    assert rc == 0, err
    rejects = list(csv.reader(io.StringIO((tmp_path / "o.csv.rejects.csv").read_text())))
    fix = "; --id-column 'my id:str' reads every id as the line wrote it"
    assert rejects == [
        ["row", "id", "reason"],  # (the rejects file names its id column id)
        ["1", "01", f'id "01" is a string, but the ids before it are integers{fix}'],
        ["2", "123456789012345678901234", f"id 123456789012345678901234 is outside the int64 range of integer ids{fix}"],
        ["3", "1e2", f"id 1e2 is a number, not a string or an integer{fix}"],
        ["4", "-0", 'id -0 would be written back as 0 (an integer id has no sign of zero): write it 0, or as the string '
                    f'"-0" (with every id a string){fix}'],
        ["5", "2.50", f"id 2.50 is a number, not a string or an integer{fix}"],
        ["6", "true", "id true is a boolean, not a string or an integer"],
    ]


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_str_ids_read_back_as_the_lines_wrote_them(tmp_path, capsys, engine):
    src, out = jsonl(tmp_path / "in.jsonl"), tmp_path / ("o.parquet" if engine == "local" else "o")
    dask = ["--engine", "dask", "--workers", "1", "--threads", "1", "--blocksize", 60] if engine == "dask" else []
    rc, _, err = run(capsys, "extract", src, "--id-column", "id:str", "-o", out, "--model", tiny_model(), "--quiet",
                     "--on-bad-row", "skip", *dask)
    assert rc == 0, err
    t = read_table(out)
    assert t.schema.field("id").type == pa.string() and t.column("id").to_pylist() == WRITTEN
    rejects = (tmp_path / f"{out.name}.rejects.csv").read_text().splitlines()
    assert rejects == ["row,id,reason", '6,true,"id true is a boolean, not a string or an integer"']
    if engine == "local":
        assert metadata(out)["id_as_text"] is True and metadata(out)["id_column"] == "id"


def test_str_ids_give_the_vectors_of_the_same_texts(tmp_path, capsys):
    """The option changes the ids only: each row's vector is the one of its text in a run without ids."""
    src = jsonl(tmp_path / "in.jsonl", IDS[:6])
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(capsys, "extract", src, "--id-column", "id:str", "-o", a, "--model", tiny_model(), "--quiet")[0] == 0
    assert run(capsys, "extract", src, "-o", b, "--model", tiny_model(), "--quiet")[0] == 0
    ea, eb = (np.stack(read_table(p).column("embedding").to_pylist()) for p in (a, b))
    assert np.array_equal(ea, eb) and len(ea) == 6


def test_verify_reads_the_ids_as_the_run_did(tmp_path, capsys):
    src, out = jsonl(tmp_path / "in.jsonl", IDS[:6]), tmp_path / "o.csv"
    assert run(capsys, "extract", src, "--id-column", "id:str", "-o", out, "--model", tiny_model(), "--quiet")[0] == 0
    rc, stdout, err = run(capsys, "verify", out)
    assert rc == 0 and "verdict" in stdout and " ok " in stdout.splitlines()[-2], (stdout, err)
    prov = tmp_path / "o.csv.json"
    meta = json.loads(prov.read_text())
    assert meta["id_as_text"] is True
    del meta["id_as_text"]  # as if the run had not recorded it: the ids read as integers no longer match
    prov.write_text(json.dumps(meta))
    rc, _, err = run(capsys, "verify", out)
    assert rc == 1 and "row 1 (id '01') is not in the input" in err, err


def test_parquet_integer_ids_as_their_digits(tmp_path, capsys):
    src, out = tmp_path / "in.parquet", tmp_path / "o.parquet"
    pq.write_table(pa.table({"id": pa.array([7, -8, 2**62], pa.int64()), "text": ["a", "b", "c"]}), src)
    assert run(capsys, "extract", src, "--id-column", "id:str", "-o", out, "--model", tiny_model(), "--quiet")[0] == 0
    assert read_table(out).column("id").to_pylist() == ["7", "-8", str(2**62)]


@pytest.mark.parametrize("name, shown", [("id", ("id:str", "id")), ("my id", ("'my id:str'", "'my id'"))])
def test_parquet_ids_of_another_type_are_refused(tmp_path, capsys, name, shown):
    """A name with a space is quoted for the shell."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({name: [0.5, 1.0], "text": ["a", "b"]}), src)
    rc, _, err = run(capsys, "extract", src, "--id-column", f"{name}:str", "-o", tmp_path / "f.parquet", "--model",
                     tiny_model(), "--quiet")
    assert (rc, err) == (1, f"Error: {src}: --id-column {shown[0]} reads integer or string ids as text, and column "
                            f"'{name}' holds double values - give --id-column {shown[1]} (its values are written as "
                            "Parquet holds them), or choose an integer or string id column\n")


def test_csv_ids_are_text_already(tmp_path, capsys):
    src, out = tmp_path / "in.csv", tmp_path / "o.csv"
    src.write_text("id,text\n007,a\n7,b\n1e5,c\n")
    assert run(capsys, "extract", src, "--id-column", "id:str", "-o", out, "--model", tiny_model(), "--quiet")[0] == 0
    assert [ln.split(",")[0] for ln in out.read_text().splitlines()] == ['"id"', '"007"', '"7"', '"1e5"']


def test_python_callers_give_the_same_option(tmp_path):
    src, out = jsonl(tmp_path / "in.jsonl", IDS[:6]), tmp_path / "o.parquet"
    bertfeat.extract(src, out, model=tiny_model(), id_column="id:str")
    assert read_table(out).column("id").to_pylist() == WRITTEN
    with pytest.raises(bertfeat.BertfeatError, match=r"id_column='id:str' reads every id as the line wrote it"):
        bertfeat.extract(src, tmp_path / "p.parquet", model=tiny_model(), id_column="id")


def test_the_reader_alone(tmp_path):
    r = open_input(str(jsonl(tmp_path / "in.jsonl")), text_column="text", id_column="id", id_as_text=True)
    assert r.id_type() == pa.string()
    batch = next(iter(r.batches()))
    assert batch.ids[:6] == WRITTEN and list(batch.pre_rejected) == [6]


def test_resume_with_str_added_is_refused(tmp_path, capsys, monkeypatch):
    src = tmp_path / "c.jsonl"
    src.write_text("".join(f'{{"id": {i}, "text": "word {i} of the river"}}\n' for i in range(12)))
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--id-column", "id"]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args[:-1], "id:str", "--resume")
    assert (rc, err) == (1, "Error: cannot resume: the settings or the input differ from the interrupted run (id column: "
                            "'id' -> 'id:str') - rerun with --overwrite instead of --resume to start over, or use the "
                            "original settings\n")
    assert len(parts(out)) == 2


def test_the_docs_example(tmp_path, capsys):
    """docs/cli.md's command on examples/ids_mixed.jsonl, and what it says without :str."""
    src, out = "examples/ids_mixed.jsonl", tmp_path / "ids_mixed.parquet"
    assert run(capsys, "extract", src, "--id-column", "id:str", "-o", out, "--model", tiny_model(), "-q")[0] == 0
    assert read_table(out).column("id").to_pylist() == ["7", "07", "1e2"]
    rc, _, err = run(capsys, "extract", src, "--id-column", "id", "-o", tmp_path / "x.parquet", "--model", tiny_model(), "-q")
    assert rc == 1 and err.startswith(f'Error: {src} row 1: id "07" is a string, but the ids before it are integers; '
                                      "--id-column id:str reads"), err

