"""``keep`` / ``--keep``: input columns copied to the output beside the features, typed, on both engines.

One small table of 14 rows in every input format (CSV, TSV, JSONL, Parquet) with a kept integer, number, boolean
and string column (each with a null), a bad row (empty text) and, in the text formats, a later kept value that is
not of its column's type (a bad row too). The first rows carry a ~110 kB cell in a column that is not read, so
that the reader's 1 MiB head holds only the first 9 rows: the types are decided by them, not by the whole file.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import dask_local_client

import bertfeat
from bertfeat.errors import BertfeatError, ResumeError
from bertfeat.features import iter_features, read_feature_metadata
from bertfeat.progress import NullProgress
from bertfeat.readers import open_input
from extract_util import run, tiny_model, write_csv, write_jsonl

N = 14
PAD = "x" * 110_000  # rows 0..9 carry it: the 1 MiB head ends inside row 9
KEEP = ["label", "score", "flag", "name"]
TYPES = {"label": pa.int64(), "score": pa.float64(), "flag": pa.bool_(), "name": pa.string()}
BAD_TEXT, BAD_KEPT = 10, 11  # row 10: empty text; row 11 (text formats): label "abc" in an integer column
WORDS = "river mountain bread cheese rain snow code maths ship bird music art train car".split()


def values(i: int) -> dict:
    """Row i's kept values as the output must hold them (None: null)."""
    return {"label": None if i == 3 else i % 3, "score": None if i == 4 else (i + 0.5 if i % 2 else float(i)),
            "flag": None if i == 5 else i % 2 == 0, "name": None if i == 6 else f"n{i}"}


def text(i: int, bad_text: bool = True) -> str:
    return "" if i == BAD_TEXT and bad_text else f"sentence {i} about the {WORDS[i]} and the {WORDS[(5 * i) % N]}"


def csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)  # 3 / 3.5: ints and numbers mixed


def write_input(tmp: Path, fmt: str, bad_text: bool = True) -> Path:
    """The table in one format (text formats: with the pad column and the bad kept value of row 11)."""
    rows = []
    for i in range(N):
        v = values(i)
        if fmt != "parquet" and i == BAD_KEPT:
            v["label"] = "abc"
        rows.append({"id": f"r{i}", "text": text(i, bad_text), "pad": PAD if i <= 9 else "", **v})
    if fmt == "parquet":
        path = tmp / "in.parquet"
        table = pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows],
                          **{c: pa.array([r[c] for r in rows], TYPES[c]) for c in KEEP}})
        pq.write_table(table, path, row_group_size=5)
        return path
    if fmt == "jsonl":
        objs = []
        for r in rows:
            o = dict(r)
            if isinstance(o["score"], float) and o["score"].is_integer():
                o["score"] = int(o["score"])  # JSON integers and numbers mixed: the column is double
            objs.append(o)
        return write_jsonl(tmp / "in.jsonl", objs)
    header = ["id", "text", "pad", *KEEP]
    cells = [[r["id"], r["text"], r["pad"], *(r[c] if isinstance(r[c], str) else csv_cell(r[c]) for c in KEEP)] for r in rows]
    return write_csv(tmp / f"in.{fmt}", header, cells, delimiter="\t" if fmt == "tsv" else ",")


def accepted(fmt: str) -> list[int]:
    return [i for i in range(N) if i != BAD_TEXT and not (fmt != "parquet" and i == BAD_KEPT)]


def expected_rejects(fmt: str) -> str:
    v = values(BAD_TEXT)
    lines = ["row,id,reason,label,score,flag,name",
             f"{BAD_TEXT},r{BAD_TEXT},empty text,{v['label']},{v['score']},{csv_cell(v['flag'])},{v['name']}"]
    if fmt != "parquet":
        v = values(BAD_KEPT)
        why = ('is a string, not an integer' if fmt == "jsonl" else 'is not an integer') + " (the column's first rows hold integers)"
        reason = f"kept column 'label': \"\"abc\"\" {why}"
        lines.append(f'{BAD_KEPT},r{BAD_KEPT},"{reason}",abc,{v["score"]},{csv_cell(v["flag"])},{v["name"]}')
    return "\r\n".join(lines) + "\r\n"


def opts(src: Path, out: Path, **kw) -> dict:
    return dict(input=str(src), output=str(out), model=tiny_model(), id_column="id", keep=",".join(KEEP),
                on_bad_row="skip", chunk_rows=4, **kw)


def check_parquet_table(t: pa.Table, fmt: str, dim: int = 32):
    assert t.column_names == ["id", "embedding", "n_tokens", "truncated", "n_chunks", *KEEP]
    for c in KEEP:
        assert t.schema.field(c).type == TYPES[c], c
    assert t.column("id").to_pylist() == [f"r{i}" for i in accepted(fmt)]  # kept values line up with their ids
    assert t.drop_columns(["id", "embedding", "n_tokens", "truncated", "n_chunks"]).to_pylist() == [values(i) for i in accepted(fmt)]
    assert t.schema.field("embedding").type.list_size == dim


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def client():
    with dask_local_client(n_workers=1, threads_per_worker=1, processes=False) as c:
        yield c


@pytest.fixture(scope="module", params=["csv", "tsv", "jsonl", "parquet"])
def local_runs(request, tmp_path_factory):
    """The input in one format, extracted by the local engine into Parquet and CSV."""
    fmt = request.param
    tmp = tmp_path_factory.mktemp(fmt)
    src = write_input(tmp, fmt)
    for out in ("out.parquet", "out.csv"):
        s = bertfeat.extract(**opts(src, tmp / out))
        assert (s.rows_read, s.rows_written, s.rows_rejected) == (N, len(accepted(fmt)), N - len(accepted(fmt)))
    return fmt, src, tmp


# --------------------------------------------------------------------------- round trips
def test_parquet_output_has_the_kept_columns_typed(local_runs):
    fmt, _, tmp = local_runs
    out = tmp / "out.parquet"
    check_parquet_table(pq.read_table(out), fmt)
    meta = read_feature_metadata(out)
    assert meta["keep"] == KEEP
    assert meta["layout"]["extra_columns"] == {"n_tokens": "int32", "truncated": "bool", "n_chunks": "int32",
                                               "label": "int64", "score": "double", "flag": "bool", "name": "string"}
    ids, X, extras = next(iter_features(out, with_extras=True))  # bertfeat's reader gives them back, typed
    assert list(ids) == [f"r{i}" for i in accepted(fmt)] and X.shape == (len(accepted(fmt)), 32)
    assert {c: extras[c].type for c in KEEP} == TYPES
    assert (tmp / "out.parquet.rejects.csv").read_text() == expected_rejects(fmt).replace("\r\n", "\n")


def test_csv_output_writes_the_kept_values_as_text(local_runs):
    fmt, _, tmp = local_runs
    out = tmp / "out.csv"
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][:8] == ["id", "n_tokens", "truncated", "n_chunks", *KEEP] and rows[0][8] == "f0"
    assert [r[0] for r in rows[1:]] == [f"r{i}" for i in accepted(fmt)]
    assert [r[4:8] for r in rows[1:]] == [[csv_cell(values(i)[c]) for c in KEEP] for i in accepted(fmt)]
    # read back: bertfeat's reader types them from the layout, pandas reads the text
    ids, _, extras = next(iter_features(out, with_extras=True))
    assert list(ids) == [f"r{i}" for i in accepted(fmt)]
    got = {c: extras[c].to_pylist() for c in KEEP}
    want = {c: [values(i)[c] for i in accepted(fmt)] for c in KEEP}  # a null string stays null, "" stays ""
    assert got == want and {c: extras[c].type for c in KEEP} == TYPES
    import pandas as pd

    df = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert df[KEEP].values.tolist() == [r[4:8] for r in rows[1:]]
    assert (tmp / "out.csv.rejects.csv").read_text() == expected_rejects(fmt).replace("\r\n", "\n")


def test_dask_engine_writes_the_same_kept_columns(local_runs, client):
    fmt, src, tmp = local_runs
    out = tmp / "dask_out"
    s = bertfeat.extract(**opts(src, out), engine="dask", client=client, blocksize="256KiB")
    assert s.rows_rejected == N - len(accepted(fmt))
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) > 1 or fmt == "parquet"  # (Parquet: 64 rows at least per partition) the kept columns' types hold across partitions (the reader decided them once)
    t = pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in parts])
    check_parquet_table(t, fmt)
    local = pq.read_table(tmp / "out.parquet")
    assert t.schema == local.schema.remove_metadata()
    assert t.drop_columns(["embedding"]).equals(local.drop_columns(["embedding"]).replace_schema_metadata(None))
    assert (Path(str(out) + ".rejects.csv")).read_text() == expected_rejects(fmt).replace("\r\n", "\n")
    assert json.loads((out / "_bertfeat.json").read_text())["keep"] == KEEP


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_pca_output_keeps_the_columns(tmp_path, request, engine):
    src = write_input(tmp_path, "csv")
    out = tmp_path / ("pca.parquet" if engine == "local" else "pca_dir")
    extra = dict(engine="dask", client=request.getfixturevalue("client")) if engine == "dask" else {}
    bertfeat.extract(**opts(src, out), pca=2, **extra)
    if engine == "local":
        t = pq.read_table(out)
    else:
        t = pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in sorted(out.glob("part-*.parquet"))])
    check_parquet_table(t, "csv", dim=2)


# --------------------------------------------------------------------------- the readers decide the types
def test_csv_head_decides_the_types_as_pandas_would(tmp_path):
    src = write_csv(tmp_path / "t.csv", ["text", "i", "d", "b", "s", "e", "z", "sp"],
                    [["a", "1", "1", "true", "x", "", "0", " 7"], ["b", "-2", "2.5", "FALSE", "2", "", "1", "8 "],
                     ["c", "", "1e3", "True", "", "", "0", ""], ["d", "3", "nan", "", "true", "", "1", "9"]])
    r = open_input(str(src), keep=["i", "d", "b", "s", "e", "z", "sp", "text"])
    assert r.keep_types() == {"i": pa.int64(), "d": pa.float64(), "b": pa.bool_(), "s": pa.string(), "e": pa.string(),
                              "z": pa.int64(), "sp": pa.int64(), "text": pa.string()}
    (b,) = list(r.batches())
    assert b.extra["i"] == [1, -2, None, 3] and b.extra["b"] == [True, False, True, None] and b.extra["sp"] == [7, 8, None, 9]
    assert b.extra["d"][:3] == [1.0, 2.5, 1000.0] and np.isnan(b.extra["d"][3])
    assert b.extra["s"] == ["x", "2", None, "true"] and b.extra["e"] == [None] * 4 and b.pre_rejected == {}
    assert pickle.loads(pickle.dumps(r)).keep_types() == r.keep_types()  # what a Dask worker gets
    parts = r.partitions(None)
    assert str(r.read_partition(parts[0], 0).extra) == str(b.extra)  # (str: nan == nan)


def test_jsonl_first_values_decide_the_types(tmp_path):
    head = [{"text": "a", "pad": PAD, "n": None, "m": 1, "f": True, "s": "x", "nothing": None}] + [
        {"text": "b", "pad": PAD, "n": 2, "m": 2.5, "f": False, "s": None}] * 9  # the 1 MiB head ends in the last one
    later = [{"text": "c", "n": 3.5}, {"text": "d", "s": 3}, {"text": "e", "f": 1}, {"text": "f", "nothing": 5, "m": 7}]
    src = write_jsonl(tmp_path / "t.jsonl", head + later)
    r = open_input(str(src), keep=["n", "m", "f", "s", "nothing"])
    assert r.keep_types() == {"n": pa.int64(), "m": pa.float64(), "f": pa.bool_(), "s": pa.string(), "nothing": pa.string()}
    (b,) = list(r.batches())
    assert {c: v[8:] for c, v in b.extra.items()} == {"n": [2, 2, 3.5, None, None, None], "m": [2.5, 2.5, None, None, None, 7.0],
                                                     "f": [False, False, None, None, 1, None], "s": [None, None, None, 3, None, None],
                                                     "nothing": [None, None, None, None, None, 5]}
    assert {row: (why.code.value, why.text) for row, why in b.pre_rejected.items()} == {
        10: ("bad-kept-value", "kept column 'n': 3.5 is a number, not an integer (the column's first rows hold integers)"),
        11: ("bad-kept-value", "kept column 's': 3 is an integer, not a string (the column's first rows hold strings)"),
        12: ("bad-kept-value", "kept column 'f': 1 is an integer, not a boolean (true or false) (the column's first rows hold "
                               "booleans)"),
        13: ("bad-kept-value", "kept column 'nothing': 5 is an integer, not a string (the column's first rows hold strings)")}


def test_parquet_keeps_the_schema_types(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "cat": pa.array(["x", "y"]).dictionary_encode(),
                             "small": pa.array([1, None], pa.int16()), "when": pa.array([0, 1], pa.timestamp("ms"))}), path)
    r = open_input(str(path), keep="cat,small,when".split(","))
    assert r.keep_types() == {"cat": pa.string(), "small": pa.int16(), "when": pa.timestamp("ms")}
    (b,) = list(r.batches())
    assert b.extra["cat"] == ["x", "y"] and b.extra["small"] == [1, None]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_kept_values_read_back_as_written(tmp_path, fmt):
    """A CSV output read back by bertfeat gave NaN as null ("nan" was a null value), decimal128 as double (its type
    name was not read back) and binary as its escaped text; each comes back as the input held it now, as Parquet's."""
    import decimal

    path = tmp_path / "t.parquet"
    cols = {"score": pa.array([1.5, float("nan"), None]), "price": pa.array([decimal.Decimal("1.25"), None,
            decimal.Decimal("-3.10")], pa.decimal128(5, 2)), "blob": pa.array([b"\xff\xfe", b"a\\xffb", b"ok"]),
            "when": pa.array([0, None, 86_400_000_000], pa.timestamp("us", tz="UTC")), "day": pa.array([0, 1, None], pa.date32())}
    pq.write_table(pa.table({"text": ["one", "two", "three"], **cols}), path)
    out = tmp_path / f"o.{fmt}"
    bertfeat.extract(path, out, model=tiny_model(), keep=",".join(cols))
    (_, _, extras), = list(iter_features(out, with_extras=True))
    for name, values in cols.items():
        got = extras[name]
        assert got.type == values.type, name
        if name == "score":
            assert got.to_pylist()[0] == 1.5 and np.isnan(got.to_pylist()[1]) and got.to_pylist()[2] is None
        else:
            assert got.to_pylist() == values.to_pylist(), name


# --------------------------------------------------------------------------- refusals
@pytest.fixture
def small(tmp_path) -> Path:
    return write_csv(tmp_path / "s.csv", ["id", "text", "label", "f0"], [["a", "one text", "1", "2"], ["b", "two", "0", "3"]])


@pytest.mark.parametrize("kw, python, cli", [
    (dict(keep="nope"), "{src}: keep 'nope' is not a column - columns are: id, text, label, f0",
     "{src}: --keep 'nope' is not a column - columns are: id, text, label, f0"),
    (dict(keep="label,label"), "keep names the column 'label' 2 times - name each column once",
     "--keep names the column 'label' 2 times - name each column once"),
    (dict(keep="label,"), "keep='label,' holds an empty column name - separate the column names with single commas, e.g. label,split",
     "--keep 'label,' holds an empty column name - separate the column names with single commas, e.g. label,split"),
    (dict(keep="label", format="npy"), "keep needs an output with columns; npy holds the features only - use "
     "format='parquet' or format='csv', or drop keep",
     "--keep needs an output with columns; npy holds the features only - use --format parquet or --format csv, or drop --keep"),
    (dict(keep="embedding"), "keep 'embedding' clashes with the output column 'embedding' - rename the input column, or drop it from keep",
     "--keep 'embedding' clashes with the output column 'embedding' - rename the input column, or drop it from --keep"),
    (dict(keep="n_tokens"), "keep 'n_tokens' clashes with the output column 'n_tokens' - rename the input column, or drop it from keep",
     "--keep 'n_tokens' clashes with the output column 'n_tokens' - rename the input column, or drop it from --keep"),
    (dict(keep="f0", wide=True), "keep 'f0' clashes with the output column 'f0' - rename the input column, or drop it from keep",
     "--keep 'f0' clashes with the output column 'f0' - rename the input column, or drop it from --keep"),
    (dict(keep="f0", format="csv"), "keep 'f0' clashes with the output column 'f0' - rename the input column, or drop it from keep",
     "--keep 'f0' clashes with the output column 'f0' - rename the input column, or drop it from --keep"),
    (dict(keep="id", id_column="id"), "keep 'id' is the id column (id_column='id') - drop it from keep: the id column is in the output already",
     "--keep 'id' is the id column (--id-column id) - drop it from --keep: the id column is in the output already"),
    (dict(keep="row"), "keep 'row' clashes with the output column 'row' (the row number) - rename the input column, or pass "
     "id_column='row' to make it the id column",
     "--keep 'row' clashes with the output column 'row' (the row number) - rename the input column, or pass "
     "--id-column row to make it the id column"),
])
def test_refusals(small, tmp_path, capsys, kw, python, cli):
    out = tmp_path / f"o.{kw.get('format', 'parquet')}"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(str(small), str(out), model=tiny_model(), **kw)
    assert e.value.message == python.format(src=small)
    args = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    rc, _, err = run(capsys, "extract", small, "-o", out, "--model", tiny_model(), *args)
    assert (rc, err) == (1, f"Error: {cli.format(src=small)}\n")
    assert not list(tmp_path.glob("o.*"))


def test_allowed_names(small, tmp_path, capsys):
    """The text column may be kept; f0 may be kept where the features are one embedding column; --keep repeats."""
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", small, "-o", out, "--model", tiny_model(), "--keep", "text", "--keep", "f0,label", "-q")
    assert rc == 0, err
    t = pq.read_table(out)
    assert t.column_names[-3:] == ["text", "f0", "label"]
    assert t.select(["text", "f0", "label"]).to_pylist() == [{"text": "one text", "f0": 2, "label": 1}, {"text": "two", "f0": 3, "label": 0}]


def test_jsonl_object_column_is_refused(tmp_path):
    src = write_jsonl(tmp_path / "t.jsonl", [{"text": "a", "meta": {"k": 1}}, {"text": "b", "meta": None}])
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(str(src), str(tmp_path / "o.parquet"), model=tiny_model(), keep="meta")
    assert e.value.message == f"{src}: keep 'meta' holds JSON objects - keep columns of strings, numbers or booleans"


def test_without_keep_nothing_changes(small, tmp_path):
    out = tmp_path / "o.parquet"
    bertfeat.extract(str(small), str(out), model=tiny_model())
    meta = read_feature_metadata(out)
    assert "keep" not in meta and sorted(meta["layout"]["extra_columns"]) == ["n_chunks", "n_tokens", "truncated"]
    assert pq.read_table(out).column_names == ["row", "embedding", "n_tokens", "truncated", "n_chunks"]


def test_bad_kept_value_stops_the_run_under_on_bad_row_error(tmp_path):
    src = write_input(tmp_path, "csv", bad_text=False)
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(str(src), str(tmp_path / "o.parquet"), model=tiny_model(), keep="label")
    assert e.value.message == (f"{src} row 11: kept column 'label': \"abc\" is not an integer (the column's first rows hold "
                               "integers) - make every value of the column one type (its first rows decide it for keep: "
                               "integers, numbers, booleans or strings), or pass on_bad_row='skip' to write it to the "
                               "rejects file and go on")
    assert not list(tmp_path.glob("o.*"))


# --------------------------------------------------------------------------- resume
class Interrupt(NullProgress):
    """Ctrl-C after `after` chunks."""

    def __init__(self, after):
        self.after, self.n = after, 0

    def advance(self, rows, tokens, bytes_read):
        self.n += 1
        if self.n == self.after:
            raise KeyboardInterrupt


def test_resume_refuses_a_changed_keep(tmp_path):
    src = write_input(tmp_path, "csv")
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(**opts(src, out), progress=Interrupt(2))
    for keep, differs in ((["label"], "kept columns: ['label', 'score', 'flag', 'name'] -> ['label']"),
                          (None, "kept columns: ['label', 'score', 'flag', 'name'] -> None")):
        with pytest.raises(ResumeError) as e:
            bertfeat.extract(**{**opts(src, out), "keep": keep}, resume=True)
        assert e.value.message == (f"cannot resume: the settings or the input differ from the interrupted run ({differs}) - "
                                   "rerun with overwrite=True instead of resume=True to start over, or use the original settings")
    s = bertfeat.extract(**opts(src, out), resume=True)
    assert s.chunks_resumed == 2
    check_parquet_table(pq.read_table(out), "csv")


def test_resume_refuses_keep_added(small, tmp_path):
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(str(small), str(out), model=tiny_model(), chunk_rows=1, progress=Interrupt(1))
    with pytest.raises(ResumeError, match=r"\(kept columns: None -> \['label'\]\)"):
        bertfeat.extract(str(small), str(out), model=tiny_model(), chunk_rows=1, keep="label", resume=True)


def test_rejects_file_names_a_kept_row_id_or_reason_column_apart(tmp_path, capsys):
    """Kept columns named like the rejects file's own (row, id, reason) are headed "NAME (kept)" there, so no header
    holds a name twice (it was `row,id,reason,reason`, and with --id-column x --keep id two `id`s)."""
    src = write_csv(tmp_path / "c.csv", ["x", "text", "id", "reason", "row"],
                    [["a", "fine", "i1", "r1", "w1"], ["b", "", "i2", "r2", "w2"]])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "x", "--keep", "id,reason,row",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    with open(tmp_path / "o.parquet.rejects.csv", newline="", encoding="utf-8") as f:
        assert list(csv.reader(f)) == [["row", "id", "reason", "id (kept)", "reason (kept)", "row (kept)"],
                                       ["1", "b", "empty text", "i2", "r2", "w2"]]
    assert pq.read_table(out).select(["x", "id", "reason", "row"]).to_pylist() == [
        {"x": "a", "id": "i1", "reason": "r1", "row": "w1"}]


# --------------------------------------------------------------------------- issue 44, class 2: every kept type read back
def _kept_type_columns() -> dict[str, pa.Array]:
    import decimal
    import uuid

    d = decimal.Decimal
    cols = {
        "dec32": pa.array([d("1.25"), None, d("-3.10")], pa.decimal32(5, 2)),
        "dec64": pa.array([d("1.25"), None, d("-3.10")], pa.decimal64(12, 2)),
        "dec128": pa.array([d("1.25"), None, d("-3.10")], pa.decimal128(5, 2)),
        "dec256": pa.array([d("123456789012345678901234567890.25"), None, d("-3.10")], pa.decimal256(40, 2)),
        "large_string": pa.array(["a,b", None, ""], pa.large_string()),
        "string_view": pa.array(['say "hi"', None, ""], pa.string_view()),
        "binary": pa.array([b"\xff\\x", None, b""], pa.binary()),
        "large_binary": pa.array([b"\x00", None, b"ok"], pa.large_binary()),
        "fixed_binary": pa.array([b"ab", None, b"\xfe\xff"], pa.binary(2)),
        "dictionary": pa.array(["x", None, "y"]).dictionary_encode(),
        "timestamp_tz": pa.array([0, None, 1_700_000_000_123_456], pa.timestamp("us", tz="Europe/Paris")),
        "timestamp_offset": pa.array([0, None, 1_700_000_000_123], pa.timestamp("ms", tz="+05:30")),
        "timestamp_ns": pa.array([0, None, 1_700_000_000_123_456_789], pa.timestamp("ns")),
        "date32": pa.array([0, None, 19000], pa.date32()),
        "date64": pa.array([0, None, 86_400_000], pa.date64()),
        "time32": pa.array([0, None, 5_000], pa.time32("ms")),
        "time64": pa.array([0, None, 5_000_000_001], pa.time64("ns")),
        "duration": pa.array([0, None, -5], pa.duration("ms")),
        "bool": pa.array([True, None, False]),
        "null": pa.array([None, None, None], pa.null()),
        "float16": pa.array([1.5, None, -0.000061035156], pa.float16()),
        "float32": pa.array([0.1, None, float("nan")], pa.float32()),
        "uint64": pa.array([2 ** 64 - 1, None, 0], pa.uint64()),
        "int8": pa.array([-128, None, 127], pa.int8()),
        "uuid": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([uuid.UUID(int=1).bytes, None, uuid.UUID(int=2).bytes],
                                                                    pa.binary(16))),
        "json": pa.array(['{"a": [1, 2]}', None, "null"], pa.json_()),
        "bool8": pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1, None, 0], pa.int8())),
        "list": pa.array([[1, 2], None, []]),
        "large_list": pa.array([[1], None, []], pa.large_list(pa.int64())),
        "struct": pa.array([{"a": 1}, None, {"a": 2}]),
        "map": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
    }
    return cols


KEPT_TYPES = _kept_type_columns()
NESTED = {"list", "large_list", "struct", "map"}


@pytest.fixture(scope="module")
def typed_input(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("types") / "in.parquet"
    pq.write_table(pa.table({"text": ["one text", "two texts", "three texts"], **KEPT_TYPES}), path)
    return path


def _same(got: pa.Array, want: pa.Array) -> bool:
    return got.type == want.type and str(got.to_pylist()) == str(want.to_pylist())  # (str: NaN equals NaN)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("name", list(KEPT_TYPES))
def test_every_kept_type_is_read_back_or_refused_up_front(typed_input, tmp_path, capsys, name, fmt):
    """Whatever Arrow type a kept column has, the output holds it so that bertfeat's own readers give it back (values
    and type, nulls and empty values apart), pca fit, pca transform and verify included; or the run is refused before
    anything is written, naming the column, the type and the fix (a CSV cannot hold lists, structs or maps)."""
    out = tmp_path / f"o.{fmt}"
    want = pq.read_table(typed_input, columns=[name]).column(name).combine_chunks()  # as the input reads
    if pa.types.is_dictionary(want.type):
        want = want.dictionary_decode()
    if fmt == "csv" and name in NESTED:
        with pytest.raises(BertfeatError) as e:
            bertfeat.extract(typed_input, out, model=tiny_model(), keep=name)
        assert e.value.message == (f"keep column '{name}' holds {want.type} values, which a CSV output cannot hold (a CSV "
                                   "cell holds one value, not a list, struct or map) - write a Parquet output "
                                   "(output='NAME.parquet'), or leave it out of keep")
        assert list(tmp_path.iterdir()) == []
        return
    bertfeat.extract(typed_input, out, model=tiny_model(), keep=name)
    (_, X, extras), = list(iter_features(out, with_extras=True))
    assert X.shape == (3, 32) and _same(extras[name], want)
    rc, _, err = run(capsys, "pca", "fit", out, "-n", "2", "-o", tmp_path / "p.npz", "-q")
    assert rc == 0, err
    rc, _, err = run(capsys, "pca", "transform", out, "--pca-model", tmp_path / "p.npz", "-o", tmp_path / f"r.{fmt}", "-q")
    assert rc == 0, err
    (_, Y, extras), = list(iter_features(tmp_path / f"r.{fmt}", with_extras=True))
    assert Y.shape == (3, 2) and _same(extras[name], want)
    rc, _, err = run(capsys, "verify", out, "--sample", "3", "-q")
    assert rc == 0, err


@pytest.mark.parametrize("name", ["dec256", "float16", "uuid", "timestamp_tz", "large_binary"])
def test_an_id_column_of_such_a_type_in_a_csv_or_npy_output(typed_input, tmp_path, capsys, name):
    """The id column goes through the same CSV writer and reader (a CSV output, a .npy's ids file)."""
    want = pq.read_table(typed_input, columns=[name]).column(name).to_pylist()
    for fmt in ("csv", "npy"):
        out = tmp_path / f"o.{fmt}"
        bertfeat.extract(typed_input, out, model=tiny_model(), id_column=name, on_bad_row="skip")
        (ids, _, _), = list(iter_features(out, with_extras=True))
        assert list(ids) == [v for v in want if v is not None], fmt  # (a null id is a bad row)
        rc, _, err = run(capsys, "pca", "fit", out, "-n", "1", "-o", tmp_path / f"p{fmt}.npz", "-q")
        assert rc == 0, err
