"""``keep`` / ``--keep``: input columns copied to the output beside the features, typed, on both engines.

One small table of 14 rows in every input format (CSV, TSV, JSONL, Parquet) with a kept integer, number, boolean
and string column (each with a null), a bad row (empty text) and, in the text formats, a later kept value that is
not of its column's type (a bad row too). The first rows carry a ~110 kB cell in a column that is not read, so
that the reader's 1 MiB head holds only the first 9 rows: the types are decided by them, not by the whole file.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import pickle
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import dask_local_client

import bertfeat
from bertfeat.errors import BertfeatError, ResumeError, render
from bertfeat.features import iter_features, read_feature_metadata
from bertfeat.run.progress import NullProgress
from bertfeat.readers import open_input
from extract_util import run, tiny_model, write_csv, write_jsonl

N = 14
PAD = "x" * 110_000  # rows 0..9 carry it: the 1 MiB head ends inside row 9
KEEP = ["label", "score", "flag", "name"]
TYPES = {"label": pa.int64(), "score": pa.float64(), "flag": pa.bool_(), "name": pa.string()}
BAD_TEXT, BAD_KEPT = 10, 11  # row 10: empty text; row 11 (text formats): label "abc" in an integer column
WORDS = "river mountain bread cheese rain snow code maths ship bird music art train car".split()


def values(i: int, fmt: str = "parquet") -> dict:
    """Row i's kept values as the output must hold them (None: null; a CSV / TSV string column's empty cell is "")."""
    return {"label": None if i == 3 else i % 3, "score": None if i == 4 else (i + 0.5 if i % 2 else float(i)),
            "flag": None if i == 5 else i % 2 == 0, "name": ("" if fmt in ("csv", "tsv") else None) if i == 6 else f"n{i}"}


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
    """The rejects file: each kept value as the input wrote it (a text format's score 10, read as 10.0: still 10)."""
    v = values(BAD_TEXT)
    score = v["score"] if fmt == "parquet" else csv_cell(v["score"])
    lines = ["row,id,reason,label,score,flag,name",
             f"{BAD_TEXT},r{BAD_TEXT},empty text,{v['label']},{score},{csv_cell(v['flag'])},{v['name']}"]
    if fmt != "parquet":
        v = values(BAD_KEPT)
        why = ('is a string, not an integer' if fmt == "jsonl" else 'is not an integer') + " (the column's first rows hold integers)"
        reason = f"kept column 'label': \"\"abc\"\" {why}"
        lines.append(f'{BAD_KEPT},r{BAD_KEPT},"{reason}",abc,{v["score"]},{csv_cell(v["flag"])},{v["name"]}')
    return "\r\n".join(lines) + "\r\n"


#: the kept columns with the types given for score and flag (a CSV's "2" and "2.5", "true" and "True" would be kept as
#: their text otherwise); label's plain integers are int64 without it
KEEP_SPEC = "label,score:float,flag:bool,name"


def opts(src: Path, out: Path, **kw) -> dict:
    return dict(input=str(src), output=str(out), model=tiny_model(), id_column="id", keep=KEEP_SPEC,
                on_bad_row="skip", chunk_rows=4, **kw)


def check_parquet_table(t: pa.Table, fmt: str, dim: int = 32):
    assert t.column_names == ["id", "embedding", "n_tokens", "truncated", "n_chunks", *KEEP]
    for c in KEEP:
        assert t.schema.field(c).type == TYPES[c], c
    assert t.column("id").to_pylist() == [f"r{i}" for i in accepted(fmt)]  # kept values line up with their ids
    assert t.drop_columns(["id", "embedding", "n_tokens", "truncated", "n_chunks"]).to_pylist() == [values(i, fmt) for i in accepted(fmt)]
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
    want = {c: [values(i, fmt)[c] for i in accepted(fmt)] for c in KEEP}  # a null string stays null, "" stays ""
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
def test_csv_head_decides_the_types_that_keep_the_text(tmp_path):
    """A CSV column is int64 or double only when every cell of the head is written as that type writes it back."""
    src = write_csv(tmp_path / "t.csv", ["text", "i", "d", "f", "b", "s", "e", "z", "sp"],
                    [["a", "1", "1", "2.5", "true", "x", "", "0", " 7"], ["b", "-2", "2.5", "0.1", "FALSE", "2", "", "1", "8 "],
                     ["c", "", "1e3", "", "True", "", "", "0", ""], ["d", "3", "nan", "-3.75", "", "true", "", "1", "9"]])
    r = open_input(str(src), keep=["i", "d", "f", "b", "s", "e", "z", "sp", "text"])
    assert r.keep_types() == {"i": pa.int64(), "d": pa.string(), "f": pa.float64(), "b": pa.string(), "s": pa.string(),
                              "e": pa.string(), "z": pa.int64(), "sp": pa.string(), "text": pa.string()}
    (b,) = list(r.batches())
    assert b.extra["i"] == [1, -2, None, 3] and b.extra["f"] == [2.5, 0.1, None, -3.75]  # empty: null in a typed column
    assert b.extra["d"] == ["1", "2.5", "1e3", "nan"] and b.extra["b"] == ["true", "FALSE", "True", ""]
    assert b.extra["sp"] == [" 7", "8 ", "", "9"] and b.extra["s"] == ["x", "2", "", "true"] and b.extra["e"] == [""] * 4
    assert b.pre_rejected == {}
    assert pickle.loads(pickle.dumps(r)).keep_types() == r.keep_types()  # what a Dask worker gets
    parts = r.partitions(None)
    assert r.read_partition(parts[0], 0).extra == b.extra


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
    assert {row: (why.code.value, render(why.text)) for row, why in b.pre_rejected.items()} == {
        10: ("bad-kept-value", "kept column 'n': 3.5 is a number, not an integer (the column's first rows hold integers)"),
        11: ("bad-kept-value", "kept column 's': 3 is an integer, not a string (the column's first rows hold strings)"),
        12: ("bad-kept-value", "kept column 'f': 1 is an integer, not a boolean (true or false) (the column's first rows hold "
                               "booleans)"),
        13: ("bad-kept-value", "kept column 'nothing': 5 is an integer, not a string (the column's first lines hold no "
                               "value, so it is read as strings: give its type, e.g. keep='nothing:int')")}


def test_parquet_keeps_the_schema_types(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "cat": pa.array(["x", "y"]).dictionary_encode(),
                             "small": pa.array([1, None], pa.int16()), "when": pa.array([0, 1], pa.timestamp("ms"))}), path)
    r = open_input(str(path), keep="cat,small,when".split(","))
    assert r.keep_types() == {"cat": pa.string(), "small": pa.int16(), "when": pa.timestamp("ms")}
    (b,) = list(r.batches())
    assert b.extra["cat"] == ["x", "y"] and b.extra["small"] == [1, None]


def test_a_parquet_float16_given_str_is_its_shortest_text_as_float32_is(tmp_path):
    """A float16 column given :str was Arrow's cast through the double it widens to, '0.0999755859375', where float32
    gave '0.1' and the CSV output and rejects file the float16's shortest text (a helper's review). Each text reads
    back as the same float16."""
    path = tmp_path / "h.parquet"
    values = [0.1, -0.0, float("nan"), float("inf"), 65504.0, 6e-8, 1.0, 1234.0, None]
    pq.write_table(pa.table({"text": ["t"] * len(values),
                             "h": pa.array([None if v is None else np.float16(v) for v in values], pa.float16()),
                             "f": pa.array(values, pa.float32())}), path)
    (b,) = list(open_input(str(path), keep=["h", "f"], keep_as={"h": "str", "f": "str"}).batches())
    assert b.extra["h"] == ["0.1", "-0", "nan", "inf", "65500", "6e-8", "1", "1234", None]
    assert b.extra["f"][:2] == ["0.1", "-0"]
    for text, v in zip(b.extra["h"][:-1], values[:-1]):
        assert np.float16(float(text)) == np.float16(v) or math.isnan(v)


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
    (dict(keep=""), "keep='' names no column - give the columns to keep, e.g. label,split, or leave it out; a column "
     "that has no name in the input cannot be kept (a kept column keeps its name in the output): name it there",
     "--keep '' names no column - give the columns to keep, e.g. label,split, or leave it out; a column that has no "
     "name in the input cannot be kept (a kept column keeps its name in the output): name it there"),
    (dict(keep=["label:str"]), "{src}: keep 'label:str' is not a column ('label' is; a type follows a column's name in "
     "keep's text alone, one at most) - give its type so, e.g. keep='label:str'", None),
    (dict(keep="label:str:str"), "{src}: keep 'label:str' is not a column ('label' is; a type follows a column's name in "
     "keep's text alone, one at most) - give its type so, e.g. keep='label:str'",
     "{src}: --keep 'label:str' is not a column ('label' is; a type follows a column's name in --keep's text alone, "
     "one at most) - give its type so, e.g. --keep label:str"),
    (dict(keep={"label": "integer"}), "keep={{'label': 'integer'}}: 'integer' (the type of 'label') is not a type - give "
     "one of int, int64, float, double, bool, str, string, or None for the input's own", None),
    (dict(keep="label", label="label:str", pca=2), "{src}: label 'label:str' is not a column ('label' is; label names "
     "the column alone) - pass label='label', and give its type in keep (e.g. keep='label:str')",
     "{src}: --label 'label:str' is not a column ('label' is; --label names the column alone) - pass --label label, and "
     "give its type in --keep (e.g. --keep label:str)"),
    (dict(keep='"",label'), "keep='\"\",label' names the column that has no name, and a kept column keeps its name in "
     "the output - name that column in the input (pandas writes its index without a name: "
     "df.to_csv(index_label='id')), or keep the other columns only",
     "--keep '\"\",label' names the column that has no name, and a kept column keeps its name in the output - name "
     "that column in the input (pandas writes its index without a name: df.to_csv(index_label='id')), or keep the "
     "other columns only"),
    (dict(keep="label", format="npy"), "keep needs an output with columns; npy holds the features only - use "
     "format='parquet' or format='csv', or drop keep",
     "--keep needs an output with columns; npy holds the features only - use --format parquet or --format csv, or drop --keep"),
    (dict(keep="embedding"), "keep 'embedding' clashes with the output column 'embedding' - rename the input column, or drop it from keep",
     "--keep 'embedding' clashes with the output column 'embedding' - rename the input column, or drop it from --keep"),
    (dict(keep="n_tokens"), "keep 'n_tokens' clashes with the output column 'n_tokens' - rename the input column, or drop it from keep",
     "--keep 'n_tokens' clashes with the output column 'n_tokens' - rename the input column, or drop it from --keep"),
    (dict(keep="f0", wide=True), "keep 'f0' clashes with the features' columns f0, f1, ... (one per feature; how many is "
     "known once the model loads) - rename the input column, or drop it from keep",
     "--keep 'f0' clashes with the features' columns f0, f1, ... (one per feature; how many is known once the model "
     "loads) - rename the input column, or drop it from --keep"),
    (dict(keep="f0", format="csv"), "keep 'f0' clashes with the features' columns f0, f1, ... (one per feature; how many is "
     "known once the model loads) - rename the input column, or drop it from keep",
     "--keep 'f0' clashes with the features' columns f0, f1, ... (one per feature; how many is known once the model "
     "loads) - rename the input column, or drop it from --keep"),
    (dict(keep="id", id_column="id"), "keep 'id' is the id column (id_column='id') - drop it from keep: the id column is in the output already",
     "--keep 'id' is the id column (--id-column id) - drop it from --keep: the id column is in the output already"),
    (dict(keep="row"), "keep 'row' clashes with the output column 'row' (the row number) - rename the input column, or pass "
     "id_column='row' to make it the id column",
     "--keep 'row' clashes with the output column 'row' (the row number) - rename the input column, or pass "
     "--id-column row to make it the id column"),
])
def test_refusals(small, tmp_path, capsys, kw, python, cli):
    _refused(small, tmp_path, capsys, kw, python, cli)


@pytest.mark.parametrize("kw, python, cli", [
    (dict(id_column="f0", format="csv"), "id_column='f0' clashes with the features' columns f0, f1, ... of a CSV "
     "output (one per feature) - rename the id column in the input, or write Parquet (not wide) or npy",
     "--id-column 'f0' clashes with the features' columns f0, f1, ... of a CSV output (one per feature) - rename the "
     "id column in the input, or write Parquet (not wide) or npy"),
    (dict(id_column="f0", wide=True), "id_column='f0' clashes with the features' columns f0, f1, ... of a wide "
     "Parquet output (wide=True) (one per feature) - rename the id column in the input, or write Parquet (not wide) or "
     "npy", "--id-column 'f0' clashes with the features' columns f0, f1, ... of a wide Parquet output (--wide) (one per "
     "feature) - rename the id column in the input, or write Parquet (not wide) or npy"),
    (dict(label="text", pca=2), "{src}: label='text' is the text column (auto-detected), so the probe would predict "
     "each row's text from its own features - give label the column that holds each row's class",
     "{src}: --label text is the text column (auto-detected), so the probe would predict each row's text from its own "
     "features - give --label the column that holds each row's class"),
    (dict(id_column="n_tokens"), "id_column='n_tokens' clashes with the output column 'n_tokens' - rename the id "
     "column in the input, or leave id_column out (the rows are then numbered)",
     "--id-column 'n_tokens' clashes with the output column 'n_tokens' - rename the id column in the input, or leave "
     "--id-column out (the rows are then numbered)"),
])
def test_an_id_column_named_as_an_output_column_is_refused_before_the_model_loads(small, tmp_path, capsys, kw, python,
                                                                                   cli):
    """--id-column f3 with a CSV or wide Parquet output was refused by the writer after every row was encoded ('column
    name(s) ['f3'] clash with each other or the feature columns - rename them'), and the run's partial directory,
    its encoded chunks, removed with it: now before the model loads, naming --id-column."""
    _refused(small, tmp_path, capsys, kw, python, cli)


def test_an_id_column_f0_is_written_where_the_output_has_no_such_column(tmp_path):
    """An id column f0 in a .npy output (its ids file holds the id and extras alone) was refused after encoding too,
    as if its features were columns; in a (not wide) Parquet output it was and is written."""
    from bertfeat.features import read_features

    src = write_csv(tmp_path / "e.csv", ["f0", "text"], [["007", "one text"], ["8", "two"]])
    for out in (tmp_path / "o.npy", tmp_path / "o.parquet"):
        bertfeat.extract(str(src), str(out), model=tiny_model(), id_column="f0")
        assert list(read_features(out)[0]) == ["007", "8"]


def _refused(small, tmp_path, capsys, kw, python, cli):
    out = tmp_path / f"o.{kw.get('format', 'parquet')}"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(str(small), str(out), model=tiny_model(), **kw)
    assert e.value.message == python.format(src=small)
    if cli is None:  # (a list or dict: Python's alone)
        return
    args = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    rc, _, err = run(capsys, "extract", small, "-o", out, "--model", tiny_model(), *args)
    assert (rc, err) == (1, f"Error: {cli.format(src=small)}\n")
    assert not list(tmp_path.glob("o.*"))


TYPE_FIX = "give its type as int, float, bool or str, e.g. {}"


@pytest.mark.parametrize("keep, what, fix, values", [
    ("label, id", "' id' is not a column ('id' is: the spaces around a name are part of it)",
     "write it as the input names it, {} (no space after a comma: {})", ["id", "label,id"]),
    ("label:str, id", "' id' is not a column ('id' is: the spaces around a name are part of it)",
     "write it as the input names it, {} (no space after a comma: {})", ["id", "label:str,id"]),
    (" id", "' id' is not a column ('id' is: the spaces around a name are part of it)",
     "write it as the input names it, {}", ["id"]),  # no comma: no word of one
    ("Label", "'Label' is not a column ('label' is: names are case-sensitive)", "write it as the input names it, {}",
     ["label"]),
    ("label:INT", "'label:INT' is not a column ('label' is; 'INT' is the type int written otherwise, so the whole text "
     "was read as the name)", TYPE_FIX, ["label:int"]),
    ("label:integer", "'label:integer' is not a column ('label' is; 'integer' is no type, so the whole text was read as "
     "the name)", TYPE_FIX, ["label:int"]),
    ("label:", "'label:' is not a column ('label' is; nothing follows its colon)", TYPE_FIX, ["label:int"]),
])
def test_a_name_written_otherwise_than_the_column_says_how_to_write_it(small, tmp_path, capsys, keep, what, fix, values):
    """A space after a comma, another case, a type keep does not know: the error listed the columns, which hold the
    name, and left the reader to see why; it says what differs now."""
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(str(small), str(tmp_path / "o.parquet"), model=tiny_model(), keep=keep)
    assert e.value.message == f"{small}: keep {what} - {fix.format(*(f'keep={v!r}' for v in values))}"
    rc, _, err = run(capsys, "extract", small, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", keep)
    assert (rc, err) == (1, f"Error: {small}: --keep {what} - {fix.format(*(f'--keep {v}' for v in values))}\n")
    assert not list(tmp_path.glob("o.*"))


def test_a_header_name_with_spaces_is_named_as_written(tmp_path, capsys):
    src = write_csv(tmp_path / "s.csv", ["text", " label"], [["one", "1"]])
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "label")
    assert (rc, err) == (1, f"Error: {src}: --keep 'label' is not a column (' label' is: the spaces around a name are part "
                            "of it) - write it as the input names it, --keep ' label'\n")


@pytest.mark.parametrize("param, given, header", [("text_column", "text", " text"), ("pair_column", "pair", "pair "),
                                                   ("id_column", "id", " id"), ("id_column", "ID", "id")])
def test_a_text_pair_or_id_column_written_otherwise_says_how_to_write_it(tmp_path, capsys, param, given, header):
    """A header written "id, text" names " text": --text-column text listed the columns and left the reader to see the
    space (as --keep's error did before it said so); the case likewise."""
    names = {"text_column": "text", "pair_column": "pair", "id_column": "id"}
    cols = [header if names[p] == header.strip().lower() and p == param else names[p] for p in names]
    src = write_csv(tmp_path / "s.csv", cols, [["one", "two", "1"]])
    flag = "--" + param.replace("_", "-")
    why = "names are case-sensitive" if header.strip() == header else "the spaces around a name are part of it"
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), flag, given)
    assert (rc, err) == (1, f"Error: {src}: {flag} '{given}' is not a column ({header!r} is: {why}) - write it as the "
                            f"input names it, {flag} {shlex.quote(header)}\n")
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(str(src), str(tmp_path / "o.parquet"), model=tiny_model(), **{param: given})
    assert e.value.message == (f"{src}: {param} '{given}' is not a column ({header!r} is: {why}) - write it as the input "
                               f"names it, {param}={header!r}")
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
                               "integers) - fix the value, or give the column's type in keep (COLUMN:str keeps every value "
                               "as the text it is written as; :int, :float or :bool reads each CSV / TSV cell as one, "
                               "and takes JSONL's JSON numbers and true / false), or pass "
                               "on_bad_row='skip' to write it to the rejects file and go on")
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
    given = "kept columns' given types: {'flag': 'bool', 'score': 'float'}"
    kept = "kept columns (keep, and the label column)"
    for keep, differs in ((["label"], f"{kept}: ['label', 'score', 'flag', 'name'] -> ['label']; {given} -> None"),
                          (None, f"{kept}: ['label', 'score', 'flag', 'name'] -> []; {given} -> None"),
                          (KEEP_SPEC.replace("score:float", "score"), f"{given} -> {{'flag': 'bool'}}")):
        with pytest.raises(ResumeError) as e:
            bertfeat.extract(**{**opts(src, out), "keep": keep}, resume=True)
        assert e.value.message == (f"cannot resume: the settings or the input differ from the interrupted run ({differs}) - "
                                   "rerun with overwrite=True instead of resume=True to start over, or use the original settings")
    s = bertfeat.extract(**opts(src, out), resume=True)
    assert s.chunks_resumed == 2
    check_parquet_table(pq.read_table(out), "csv")


def test_resume_without_the_label_names_the_label(tmp_path):
    """The probe's label column is kept in the output: a resume without --label was refused as "kept columns: ['label']
    -> None", naming a --keep the user never gave. The refusal now says the label's column is among them."""
    src = write_csv(tmp_path / "l.csv", ["text", "label"], [[f"text number {i}", str(i % 2)] for i in range(12)])
    out = tmp_path / "o.parquet"
    kw = dict(model=tiny_model(), chunk_rows=3, pca=2)
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(str(src), str(out), label="label", progress=Interrupt(2), **kw)
    with pytest.raises(ResumeError) as e:
        bertfeat.extract(str(src), str(out), resume=True, **kw)
    assert "(kept columns (keep, and the label column): ['label'] -> [])" in e.value.message
    assert bertfeat.extract(str(src), str(out), resume=True, label="label", **kw).chunks_resumed == 2


def test_resume_refuses_keep_added(small, tmp_path):
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(str(small), str(out), model=tiny_model(), chunk_rows=1, progress=Interrupt(1))
    with pytest.raises(ResumeError, match=r"\(kept columns \(keep, and the label column\): \[\] -> \['label'\]\)"):
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


def read_rejects(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_the_rejects_file_shows_kept_cells_as_written_under_a_given_type(tmp_path, capsys, fmt):
    """The rejects file showed a bad row's kept cells converted by the type given in --keep (007 as 7, 1e5 as
    100000.0, TRUE as true); now as the input wrote them, whatever rejects the row: the reader (a bad kept value),
    validation (an empty text) or the tokenizer (too long); the features file holds the accepted rows' values typed."""
    long = " ".join(["word"] * 40)
    src = write_csv(tmp_path / f"g.{fmt}", ["id", "text", "code", "score", "flag"],
                    [["a", "fine", "007", "1.50", "TRUE"], ["b", "", "+5", "1e5", "False"],
                     ["c", "ok", "1_000", ".5", "true"], ["d", long, "010", "-0", "FALSE"], ["e", "end", "7", "2", "true"]],
                    delimiter="\t" if fmt == "tsv" else ",")
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id",
                     "--keep", "code:int,score:float,flag:bool", "--on-bad-row", "skip", "--long-text", "error",
                     "--max-length", "16", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason", "code", "score", "flag"],
        ["1", "b", "empty text", "+5", "1e5", "False"],
        ["2", "c", "kept column 'code': \"1_000\" is not an integer (the type given in --keep: int)", "1_000", ".5", "true"],
        ["3", "d", "42 tokens, more than max length 16 (--long-text error)", "010", "-0", "FALSE"]]
    assert pq.read_table(out).select(["id", "code", "score", "flag"]).to_pylist() == [
        {"id": "a", "code": 7, "score": 1.5, "flag": True}, {"id": "e", "code": 7, "score": 2.0, "flag": True}]


def test_the_rejects_file_shows_jsonl_numbers_and_parquet_values_as_written(tmp_path, capsys):
    """JSONL numbers read as double (1e5, 2.50, an integer 2, -0) and Parquet values cast to a given type ("007" to 7,
    2.0 to 2) are shown in the rejects file as the input holds them."""
    src = tmp_path / "j.jsonl"
    src.write_text('{"id": 0, "text": "ok", "x": 1.50, "n": 1}\n{"id": 1, "text": "", "x": 1e5, "n": 2.50}\n'
                   '{"id": 2, "text": "", "x": 2, "n": -0}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "j.parquet", "--model", tiny_model(), "--id-column", "id",
                     "--keep", "x,n:float", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "j.parquet.rejects.csv") == [["row", "id", "reason", "x", "n"],
                                                                ["1", "1", "empty text", "1e5", "2.50"],
                                                                ["2", "2", "empty text", "2", "-0"]]
    (b,) = list(open_input(str(src), keep=["n"], keep_as={"n": "int"}).batches())  # the reason names it as written too
    assert render(b.pre_rejected[1].text) == "kept column 'n': 2.50 is a number, not an integer (the type given in keep: int)"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["ok", ""], "code": ["007", "007"], "f": [1.0, 2.0]}),
                   tmp_path / "p.parquet")
    rc, _, err = run(capsys, "extract", tmp_path / "p.parquet", "-o", tmp_path / "o.parquet", "--model", tiny_model(),
                     "--id-column", "id", "--keep", "code:int,f:int", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "o.parquet.rejects.csv") == [["row", "id", "reason", "code", "f"],
                                                                ["1", "b", "empty text", "007", "2.0"]]
    assert pq.read_table(tmp_path / "o.parquet").select(["code", "f"]).to_pylist() == [{"code": 7, "f": 1}]


def test_a_jsonl_value_of_another_kind_than_its_given_type_says_what_jsonl_reads(tmp_path, capsys):
    """JSONL "7" under --keep a:int: the fix said to give the column's type (":int ... reads each as one"), which the
    user had done; JSONL takes :int from JSON numbers (a CSV cell's text is read as the type)."""
    src = tmp_path / "g.jsonl"
    src.write_text('{"text": "a cat", "a": "7", "b": 1}\n{"text": "a dog", "a": "8", "b": 0}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "a:int", "-q")
    assert rc == 1 and err == (f"Error: {src} row 0: kept column 'a': \"7\" is a string, not an integer (the type given in "
                               "--keep: int); JSONL reads :int from a JSON number, not from a string: write the value "
                               "unquoted, or give --keep a:str to keep its text - fix the value, or give the column's "
                               "type in --keep (COLUMN:str keeps every value as the text it is written as; :int, :float "
                               "or :bool reads each CSV / TSV cell as one, and takes JSONL's JSON numbers and true / "
                               "false), or pass --on-bad-row skip to write it to the rejects file and go on\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "b:bool", "-q")
    assert rc == 1 and err.startswith(f"Error: {src} row 0: kept column 'b': 1 is an integer, not a boolean (true or "
                                      "false) (the type given in --keep: bool) - fix the value, ")
    assert not list(tmp_path.glob("o.*"))
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "a:str", "-q")
    assert rc == 0, err
    assert pq.read_table(tmp_path / "o.parquet").column("a").to_pylist() == ["7", "8"]


def test_the_rejects_file_doubles_a_backslash_of_a_value_it_shows_with_escapes(tmp_path, capsys):
    """A written `\\xff` and the byte 0xFF were both shown `\\xff` (a JSONL `\\\\ud800` and an unpaired surrogate
    `\\ud800` too), so the rejects file lost which one the row held (a helper's review). A value shown with an escape
    now doubles its own backslashes, as a binary value's are; a value without one is shown as it is."""
    src = tmp_path / "b.csv"
    src.write_bytes(b"text,k\n,\\xff lit\nok,\xff real\nok2,a\\b\xff\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "k",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert [r[3] for r in read_rejects(tmp_path / "o.parquet.rejects.csv")[1:]] == ["\\xff lit", "\\xff real",
                                                                                     "a\\\\b\\xff"]
    src = tmp_path / "s.jsonl"
    src.write_text('{"text": "", "k": "\\\\ud800 lit"}\n{"text": "ok", "k": "\\ud800 real"}\n'
                   '{"text": "ok", "k": "a\\\\b\\ud800"}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "j.parquet", "--model", tiny_model(), "--keep", "k",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert [r[3] for r in read_rejects(tmp_path / "j.parquet.rejects.csv")[1:]] == ["\\ud800 lit", "\\ud800 real",
                                                                                     "a\\\\b\\ud800"]


def test_the_rejects_file_shows_zoned_timestamps_and_durations_as_a_csv_output_writes_them(tmp_path, capsys):
    """A timestamp in America/New_York at 0001-01-01T00:00Z was shown '0000-12-31 19:03:58.000000-0456' (year 0, the
    offset -04:56:02 cut to minutes: it parses back 2 s off) and a duration of -1 ms '-1 day, 23:59:59.999000'
    (Python's str; a helper's review). Both are now shown as the CSV output writes them: UTC with Z, and the count."""
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [None, "a cat"],
                             "ts": pa.array([-62135596800000000, 0], pa.timestamp("us", tz="America/New_York")),
                             "du": pa.array([-1, 1], pa.duration("ms"))}), src)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.csv", "--model", tiny_model(), "--keep", "ts,du",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "o.csv.rejects.csv")[1][3:] == ["0001-01-01 00:00:00.000000Z", "-1"]
    with open(tmp_path / "o.csv", newline="") as fh:
        row = list(csv.reader(fh))[1]
    assert row[4:6] == ["1970-01-01 00:00:00.000000Z", "1"]


def test_a_parquet_float32_that_does_not_cast_is_named_as_the_file_holds_it(tmp_path, capsys):
    """The reason quoted a float32 0.1 as the double it widens to ("0.10000000149011612") beside a cell of 0.1."""
    src = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": ["a cat", "a dog"], "f": pa.array([0.1, 2.0], pa.float32())}), src)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "f:int",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    rows = read_rejects(tmp_path / "o.parquet.rejects.csv")
    assert rows[1][:2] + rows[1][3:] == ["0", "", "0.1"]
    assert rows[1][2].startswith("kept column 'f': \"0.1\" is not an integer (the type given in --keep: int) (")
    assert pq.read_table(tmp_path / "o.parquet").column("f").to_pylist() == [2]


def test_the_rejects_file_shows_parquet_float32_and_binary_values_as_the_file_holds_them(tmp_path, capsys):
    """A float32 0.1 was shown as the double it widens to (0.10000000149011612), a binary value's bytes that are not
    UTF-8 as U+FFFD and a binary id as Python's b'...': now as their shortest text (0.1, as the double 0.1 is shown) and
    as a CSV output writes binary (\\xNN, a backslash doubled), the accepted rows' values unchanged."""
    src = tmp_path / "p.parquet"
    pq.write_table(pa.table({
        "bid": pa.array([b"ok", b"\xff1", b"a\\b"], pa.binary()), "text": ["fine", "", None],
        "f32": pa.array([0.1, 0.1, 2.0], pa.float32()), "f16": pa.array([0.1, 0.1, None], pa.float16()),
        "raw": pa.array([b"\xfe", b"\xff\x00a\\b", b"x"]).dictionary_encode(),
        "s": pa.array([0.1, 0.7, 1.5], pa.float32())}), src)
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "bid",
                     "--keep", "f32,f16,raw,s:str", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason", "f32", "f16", "raw", "s"],
        ["1", "\\xff1", "empty text", "0.1", "0.1", "\\xff\x00a\\\\b", "0.7"],
        ["2", "a\\b", "null text", "2.0", "", "x", "1.5"]]  # (a UTF-8 id is its text)
    t = pq.read_table(out)
    assert t.column("f32").type == pa.float32() and t.column("raw").to_pylist() == [b"\xfe"]
    assert t.select(["bid", "s"]).to_pylist() == [{"bid": b"ok", "s": "0.1"}]


def test_the_rejects_file_shows_a_boolean_or_float32_id_as_the_outputs_write_it(tmp_path, capsys):
    """A Parquet boolean id was shown in the rejects file as Python's True / False (the kept values and a CSV output
    write true / false), a float32 / float16 id as the double it widens to (0.10000000149011612, 0.0999755859375):
    now as the kept values are shown; the written ids are the same floats as before."""
    src = tmp_path / "p.parquet"
    pq.write_table(pa.table({"b": [True, False, True], "text": ["", "ok", None], "s": pa.array([0.1, 0.7, 2.5], pa.float32()),
                             "h": pa.array([0.1, 0.5, 3.0], pa.float16())}), src)
    kept = {"b": ["true", "true"], "s": ["0.1", "2.5"]}
    for ident, shown in (*kept.items(), ("h", ["0.1", "3.0"])):
        out = tmp_path / f"{ident}.parquet"
        other = "b" if ident != "b" else "s"  # a kept column of the same type shows its values so too
        rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", ident,
                         "--keep", other, "--on-bad-row", "skip", "-q")
        assert rc == 0, err
        assert read_rejects(tmp_path / f"{ident}.parquet.rejects.csv") == [
            ["row", "id", "reason", other], ["0", shown[0], "empty text", kept[other][0]],
            ["2", shown[1], "null text", kept[other][1]]]
        assert pq.read_table(out).column(ident).to_pylist() == pq.read_table(src).column(ident).to_pylist()[1:2]
    from bertfeat.readers.kept import shortest_floats

    x = pickle.loads(pickle.dumps(shortest_floats([0.10000000149011612], pa.array([0.1], pa.float32()))))  # Dask
    assert str(x[0]) == "0.1" and x[0] == 0.10000000149011612


def test_a_jsonl_minus_zero_integer_is_not_written_back_as_0(tmp_path, capsys):
    """A JSON -0 in an integer column (or as an integer id) was written as 0, another value than the line wrote (and
    an id that may be another row's): now a bad row saying so, the rejects file showing -0; among numbers (a double
    column) it is the double -0.0; a given type int reads it as 0, str keeps its text."""
    src = tmp_path / "z.jsonl"
    src.write_text('{"id": 1, "text": "one", "n": 5, "x": 1.5, "g": 7}\n{"id": 2, "text": "two", "n": -0, "x": -0, "g": -0}\n'
                   '{"id": -0, "text": "three", "n": 0, "x": 0, "g": 0}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "z.parquet", "--model", tiny_model(), "--id-column", "id",
                     "--keep", "n,x,g:int", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "z.parquet.rejects.csv") == [
        ["row", "id", "reason", "n", "x", "g"],
        ["1", "2", "kept column 'n': \"-0\" would be written back as 0 (the column's first lines hold integers; give "
                   "--keep n:str to keep its text)", "-0", "-0", "-0"],
        ["2", "-0", 'id -0 would be written back as 0 (an integer id has no sign of zero): write it 0, or as the string '
                    '"-0" (with every id a string); --id-column id:str reads every id as the line wrote it', "0", "0", "0"]]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "x.parquet", "--model", tiny_model(), "--keep", "x,g:int,n:str",
                     "-q")
    assert rc == 0, err
    t = pq.read_table(tmp_path / "x.parquet").select(["x", "g", "n"])
    assert t.to_pylist() == [{"x": 1.5, "g": 7, "n": "5"}, {"x": 0.0, "g": 0, "n": "-0"}, {"x": 0.0, "g": 0, "n": "0"}]
    assert [math.copysign(1, v) for v in t.column("x").to_pylist()] == [1, -1, 1]  # the sign kept (-0.0 == 0.0)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_number_past_float64_given_float_is_a_bad_row_not_inf_or_0(tmp_path, capsys, fmt):
    """Under a given float (CSV cells, a Parquet string column cast by Arrow), 1e400 was written as inf and 1e-400 as
    0.0, silently (a JSONL 1e400 is a bad row): now bad rows that say so and how to keep the text; inf, 0e5 and the
    rest still read as floats."""
    cells = ["1e400", "-1e400", "1e-400", "inf", "0e5", "2.5", "-0.000"]
    ids, texts = [f"r{i}" for i in range(len(cells))], ["some text"] * len(cells)
    if fmt == "csv":
        src = write_csv(tmp_path / "k.csv", ["id", "text", "k"], [list(r) for r in zip(ids, texts, cells)])
    else:
        src = tmp_path / "k.parquet"
        pq.write_table(pa.table({"id": ids, "text": texts, "k": cells}), src)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--id-column", "id",
                     "--keep", "k:float", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    fix = "give --keep k:str to keep its text)"
    assert read_rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason", "k"],
        ["0", "r0", f"kept column 'k': \"1e400\" is beyond float64's range ({fix}", "1e400"],
        ["1", "r1", f"kept column 'k': \"-1e400\" is beyond float64's range ({fix}", "-1e400"],
        ["2", "r2", f"kept column 'k': \"1e-400\" is below float64's smallest number (it would read back as 0.0; {fix}",
         "1e-400"]]
    t = pq.read_table(tmp_path / "o.parquet")
    assert t.column("id").to_pylist() == ids[3:] and t.column("k").to_pylist() == [math.inf, 0.0, 2.5, -0.0]


#: numbers under keep k:float that no float64 reads back as written -> the reason's words after the quoted number
NOT_HELD = {"1e400": "is beyond float64's range (",
            "-1e-400": "is below float64's smallest number (it would read back as -0.0; ",
            "1e-400": "is below float64's smallest number (it would read back as 0.0; "}
#: numbers of more digits than a float64 holds: the nearest float64 under a given :float (as :int reads 007 as 7), a bad
#: row in a JSONL double column whose type its first values decided
ROUNDED = {"0.10000000000000000001": ("has more digits than a float64 holds (it would read back as 0.1; ", 0.1),
           "9007199254740993": ("has more digits than a float64 holds (it would read back as 9007199254740992.0; ",
                                9007199254740992.0)}
#: numbers it does read back as written (trailing zeros are no digits; 0.1 at 17 digits) -> the float
HELD = {"0.100000000000000000000": 0.1, "100000000000000000000000.0": 1e23, "0.10000000000000001": 0.1, "2.5": 2.5,
        "1E+5": 1e5}


def float_input(tmp: Path, fmt: str, cells: list[str]) -> Path:
    """A column k of ``cells`` (numbers as written): CSV / TSV cells, a Parquet string column, JSONL numbers."""
    if fmt == "parquet":
        pq.write_table(pa.table({"text": ["t"] * len(cells), "k": cells}), tmp / "k.parquet")
        return tmp / "k.parquet"
    if fmt == "jsonl":
        (tmp / "k.jsonl").write_text("".join(f'{{"text": "t", "k": {c}}}\n' for c in cells))
        return tmp / "k.jsonl"
    return write_csv(tmp / f"k.{fmt}", ["text", "k"], [["t", c] for c in cells], delimiter="\t" if fmt == "tsv" else ",")


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet", "jsonl"])
def test_a_number_a_float64_does_not_hold_is_the_same_bad_row_on_every_reader(tmp_path, fmt):
    """keep k:float: the reasons differed by reader (JSONL: 1e400 unquoted, -1e-400 "would read back as -0.0", CSV /
    Parquet "0.0" for it), and JSONL refused 0.10000000000000000001 where CSV / Parquet read the nearest float64 (what
    a given type does: :int reads 007 as 7), and 0.100000000000000000000 and 1e23 written out, which read back as
    written. Now one rule and one reason, the number quoted as written, on every reader."""
    cells = [*NOT_HELD, *ROUNDED, *HELD]
    src = float_input(tmp_path, fmt, cells)
    got = {}
    for b in open_input(str(src), keep=["k"], keep_as={"k": "float"}).batches():
        got.update({cells[r]: (b.extra["k"][i], render(b.pre_rejected[r].text) if r in b.pre_rejected else None)
                    for i, r in enumerate(b.rows)})
    fix = "give keep='k:str' to keep its text)"
    assert {c: got[c] for c in NOT_HELD} == {c: (c, f"kept column 'k': \"{c}\" {why}{fix}") for c, why in NOT_HELD.items()}
    assert {c: got[c] for c in HELD} == {c: (v, None) for c, v in HELD.items()}
    assert {c: got[c] for c in ROUNDED} == {c: (v, None) for c, (_, v) in ROUNDED.items()}


def test_a_jsonl_double_column_refuses_a_number_of_more_digits_than_a_float64_holds(tmp_path):
    """Without a given type a JSONL column of numbers is double, and a number it cannot hold as written is a bad row
    (a CSV column's first rows decide double only when every cell is written back as it is)."""
    cells = ["2.5", *ROUNDED, *HELD]
    src = float_input(tmp_path, "jsonl", cells)
    got = {}
    for b in open_input(str(src), keep=["k"]).batches():
        got.update({cells[r]: (b.extra["k"][i], render(b.pre_rejected[r].text) if r in b.pre_rejected else None)
                    for i, r in enumerate(b.rows)})
    fix = "give keep='k:str' to keep its text)"
    assert {c: got[c] for c in ROUNDED} == {c: (c, f"kept column 'k': \"{c}\" {why}{fix}")
                                            for c, (why, _) in ROUNDED.items()}
    assert {c: got[c] for c in HELD} == {c: (v, None) for c, v in HELD.items()}


def test_a_jsonl_integer_of_more_digits_than_python_converts_is_a_bad_row_naming_it(tmp_path, capsys):
    """An integer of more than 4,300 digits (Python's int-str limit) made the whole line "invalid JSON (Exceeds the
    limit (4300 digits) for integer string conversion ...; use sys.set_int_max_str_digits() ...)", even in a column
    the run does not read, with keep k:str, or as the text; on the first line the file was refused as "not JSON ... if
    the file is CSV or TSV, pass --input-format csv". Now it is an integer past int64 / float64 like any other: a bad
    row that says so in a kept column or as the id, a non-string text, its text kept by :str, nothing in another
    column."""
    big = "9" * 5000
    src = tmp_path / "b.jsonl"
    src.write_text(f'{{"id": 1, "text": "one", "k": {big}, "f": 1.5, "u": {big}}}\n'
                   f'{{"id": -{big}, "text": "two", "k": 7, "f": {big}, "u": 1}}\n{{"id": 3, "text": {big}}}\n')
    (b,) = list(open_input(str(src), id_column="id", keep=["k", "f"]).batches())
    assert {r: render(w.text) for r, w in b.pre_rejected.items()} == {
        0: f"kept column 'k': \"{big[:37]}...\" is outside the int64 range (give keep='k:str' to keep its text)",
        1: f"id -{big[:39]} is outside the int64 range of integer ids; id_column='id:str' reads every id as the line wrote it"}
    (b,) = list(open_input(str(src), keep=["f"]).batches())  # row 0's long k and u: not read, nothing said
    assert {r: render(w.text) for r, w in b.pre_rejected.items()} == {
        1: f"kept column 'f': \"{big[:37]}...\" is beyond float64's range (give keep='f:str' to keep its text)"}
    assert b.extra["f"][0] == 1.5
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "k:str",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert pq.read_table(tmp_path / "o.parquet").column("k").to_pylist() == [big, "7"]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "p.parquet", "--model", tiny_model(), "--keep", "k",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    rejects = read_rejects(tmp_path / "p.parquet.rejects.csv")
    assert [r[0] for r in rejects[1:]] == ["0", "2"] and rejects[1][3] == big  # the value as the line wrote it
    assert rejects[2][2] == f"non-string text (number {big[:40]})"


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_csv_integer_of_more_digits_than_python_converts_is_a_bad_row_naming_it(tmp_path, capsys, fmt):
    """A CSV cell of more than 4,300 digits in a kept column stopped the run with "unexpected ValueError: Exceeds the
    limit (4300 digits) for integer string conversion ... - this is a bug in bertfeat" (as the first rows decided the
    type, and under :int); now the first rows keep it as text, and :int says it is outside the int64 range."""
    big = "9" * 5000
    src = write_csv(tmp_path / f"b.{fmt}", ["id", "text", "k"], [["a", "one", "1"], ["b", "two", big]],
                    delimiter="\t" if fmt == "tsv" else ",")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", "k", "-q")
    assert rc == 0, err
    assert pq.read_table(tmp_path / "o.parquet").column("k").to_pylist() == ["1", big]
    (b,) = list(open_input(str(src), keep=["k"], keep_as={"k": "int"}).batches())
    assert render(b.pre_rejected[1].text) == (f"kept column 'k': \"{big[:37]}...\" is outside the int64 range (the type "
                                              "given in keep: int; give keep='k:str' to keep its text)")
    assert b.extra["k"][0] == 1


def test_a_parquet_float_past_float64_is_a_bad_row_beside_a_value_that_does_not_cast(tmp_path, capsys):
    """A Parquet text column given float whose batch also held a value Arrow cannot cast (abc) was cast one value at a
    time, and that path skipped the range check: 1e400 written as inf and 1e-400 as 0.0, silently, while the same
    cells in a batch without abc were bad rows."""
    cells = ["abc", "1e400", "1e-400", "5e-324", "-0.0", "inf"]
    ids = [f"r{i}" for i in range(len(cells))]
    pq.write_table(pa.table({"id": ids, "text": ["some text"] * len(cells), "k": cells}), tmp_path / "k.parquet")
    rc, _, err = run(capsys, "extract", tmp_path / "k.parquet", "-o", tmp_path / "o.parquet", "--model", tiny_model(),
                     "--id-column", "id", "--keep", "k:float", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    rejects = read_rejects(tmp_path / "o.parquet.rejects.csv")
    assert [r[:2] + r[3:] for r in rejects[1:]] == [["0", "r0", "abc"], ["1", "r1", "1e400"], ["2", "r2", "1e-400"]]
    assert "\"1e400\" is beyond float64's range" in rejects[2][2]
    assert "\"1e-400\" is below float64's smallest number" in rejects[3][2]
    t = pq.read_table(tmp_path / "o.parquet")  # a subnormal, -0.0 and inf as before
    assert t.column("id").to_pylist() == ids[3:] and t.column("k").to_pylist() == [5e-324, -0.0, math.inf]


def test_a_jsonl_number_below_float64s_smallest_says_so(tmp_path):
    """A JSONL 1e-400 in a double column said "1e-400 has more digits than a float64 holds" (it has one digit): it is
    below float64's smallest number, as the CSV and Parquet reasons say; a subnormal (5e-324, 1e-320) and a zero written
    any way (0e0, 0.000, -0.0) read as before."""
    cells = ["1.5", "1e-400", "-1e-400", "2e-324", "5e-324", "1e-320", "0e0", "0.000", "-0.0"]
    src = tmp_path / "k.jsonl"
    src.write_text("".join(f'{{"text": "t", "k": {c}}}\n' for c in cells))
    got = {}
    for b in open_input(str(src), keep=("k",)).batches():
        got.update({r: (b.extra["k"][i], b.pre_rejected[r].text if r in b.pre_rejected else None)
                    for i, r in enumerate(b.rows)})
    for row, back in ((1, "0.0"), (2, "-0.0"), (3, "0.0")):
        assert got[row][1].startswith(f"kept column 'k': \"{cells[row]}\" is below float64's smallest number (it would read "
                                      f"back as {back}; give "), got[row]
    assert [got[r] for r in (0, 4, 5, 6, 7)] == [(1.5, None), (5e-324, None), (1e-320, None), (0.0, None), (0.0, None)]
    assert math.copysign(1, got[8][0]) == -1 and got[8][1] is None


def test_a_jsonl_integer_past_float64_in_a_number_column_is_a_bad_row(tmp_path, capsys):
    """An integer past float64's range (2**1024 and up written out) in a double column stopped the run with "unexpected
    OverflowError: int too large to convert to float - this is a bug in bertfeat": now a bad row that says so (a long
    value cut to 40 characters, in an int64 column too), the rejects file holding its text, :str keeping it."""
    big = "1" + "0" * 400
    src = tmp_path / "b.jsonl"
    src.write_text(f'{{"id": "a", "text": "one", "k": 1.5, "n": 1}}\n{{"id": "b", "text": "two", "k": {big}, "n": {big}}}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--id-column", "id",
                     "--keep", "k", "-q")
    assert rc == 1 and err.startswith(f"Error: {src} row 1: kept column 'k': \"{big[:37]}...\" is beyond float64's range "
                                      "(give --keep k:str to keep its text) - fix the value"), err
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--id-column", "id",
                     "--keep", "k,n", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason", "k", "n"],
        ["1", "b", f"kept column 'k': \"{big[:37]}...\" is beyond float64's range (give --keep k:str to keep its text)",
         big, big]]
    (b,) = list(open_input(str(src), keep=["n"]).batches())
    assert render(b.pre_rejected[1].text) == (f"kept column 'n': \"{big[:37]}...\" is outside the int64 range (give "
                                              "keep='n:str' to keep its text)")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "s.parquet", "--model", tiny_model(), "--keep", "k:str",
                     "-q")
    assert rc == 0, err
    assert pq.read_table(tmp_path / "s.parquet").column("k").to_pylist() == ["1.5", big]


def test_a_csv_integer_past_int64_under_int_is_named_so(tmp_path):
    """k:int and a cell 99999999999999999999 (or past int64 after the head decided int64): the reason said it "is not an
    integer"; now that it is outside the int64 range, and how to keep its text."""
    src = write_csv(tmp_path / "i.csv", ["id", "text", "k"], [["a", "one", "99999999999999999999"], ["b", "two", "7"],
                                                                ["c", "three", "-9223372036854775809"]])
    (b,) = list(open_input(str(src), keep=["k"], keep_as={"k": "int"}).batches())
    assert {r: render(why.text) for r, why in b.pre_rejected.items()} == {
        r: f"kept column 'k': \"{v}\" is outside the int64 range (the type given in keep: int; give keep='k:str' to "
           "keep its text)" for r, v in ((0, "99999999999999999999"), (2, "-9223372036854775809"))}
    assert b.extra["k"][1] == 7


# --------------------------------------------------------------------------- issue 44, class 1: a CSV value kept as written
#: kept CSV / TSV cells as written: the columns that read back unchanged as int64 or double are typed (an empty cell a
#: null), every other cell is kept as its exact text (an empty cell "", not a null)
EXACT = {"zip": ["02134", "12345", "00001", "98765"], "code": ["1e5", "2", "nan", "-0"],
         "num": ["1.0", "2.5", "inf", ".5"], "signed": ["+3", " 7", "8", "-0"], "word": ["true", "false", "True", ""],
         "blank": ["", "", "", ""], "plain": ["12", "-3", "", "0"], "score": ["2.5", "0.1", "", "-3.75"]}
EXACT_TYPED = {"plain": pa.int64(), "score": pa.float64()}


def exact_input(tmp: Path, fmt: str) -> Path:
    rows = [[f"k{i}", text(i), *(EXACT[c][i] for c in EXACT)] for i in range(4)]
    return write_csv(tmp / f"x.{fmt}", ["id", "text", *EXACT], rows, delimiter="\t" if fmt == "tsv" else ",")


def as_written(values: list, column: str) -> list:
    """Kept values back as the text they were written as (a typed column's null: the empty cell)."""
    if column not in EXACT_TYPED:
        return values
    return ["" if v is None else str(v) for v in values]


@pytest.fixture(scope="module")
def exact_runs(tmp_path_factory):
    """The cells above in a CSV and a TSV, extracted into Parquet and CSV by the local engine."""
    tmp = tmp_path_factory.mktemp("exact")
    for fmt in ("csv", "tsv"):
        src = exact_input(tmp, fmt)
        for out in ("parquet", "csv"):
            bertfeat.extract(src, tmp / f"{fmt}.{out}", model=tiny_model(), id_column="id", keep=",".join(EXACT))
    return tmp


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_values_are_kept_as_written_in_parquet(exact_runs, fmt):
    t = pq.read_table(exact_runs / f"{fmt}.parquet")
    assert {c: t.schema.field(c).type for c in EXACT} == {c: EXACT_TYPED.get(c, pa.string()) for c in EXACT}
    assert {c: as_written(t.column(c).to_pylist(), c) for c in EXACT} == EXACT
    assert t.column("plain").null_count == 1 and t.column("blank").null_count == 0  # "" stays "" in a string column


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_values_are_kept_as_written_in_a_csv_output(exact_runs, fmt):
    out = exact_runs / f"{fmt}.csv"
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {c: [r[c] for r in rows] for c in EXACT} == EXACT  # the text as written, byte for byte
    ids, _, extras = next(iter_features(out, with_extras=True))  # and bertfeat reads it back as the Parquet output holds it
    assert list(ids) == ["k0", "k1", "k2", "k3"]
    parquet = pq.read_table(exact_runs / f"{fmt}.parquet")
    assert {c: extras[c].to_pylist() for c in EXACT} == {c: parquet.column(c).to_pylist() for c in EXACT}
    assert {c: extras[c].type for c in EXACT} == {c: parquet.schema.field(c).type for c in EXACT}


def test_csv_ids_in_the_npy_ids_file_are_kept_as_written(tmp_path):
    src = write_csv(tmp_path / "i.csv", ["id", "text"], [["007", "one"], ["+7", "two"], ["7.0", "three"], ["1e5", "four"]])
    out = tmp_path / "o.npy"
    bertfeat.extract(src, out, model=tiny_model(), id_column="id")
    with open(tmp_path / "o.ids.csv", newline="", encoding="utf-8") as f:
        assert [r["id"] for r in csv.DictReader(f)] == ["007", "+7", "7.0", "1e5"]
    ids, _, _ = next(iter_features(out, with_extras=True))
    assert list(ids) == ["007", "+7", "7.0", "1e5"]


def test_dask_engine_keeps_the_csv_values_as_written(exact_runs, client):
    out = exact_runs / "dask_out"
    bertfeat.extract(exact_runs / "x.csv", out, model=tiny_model(), id_column="id",
                     keep=",".join(EXACT), engine="dask", client=client)
    t = pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in sorted(out.glob("part-*.parquet"))])
    assert {c: as_written(t.column(c).to_pylist(), c) for c in EXACT} == EXACT
    local = pq.read_table(exact_runs / "csv.parquet")
    assert t.select(list(EXACT)).equals(local.select(list(EXACT)).replace_schema_metadata(None))


def test_a_later_value_the_head_did_not_type_is_a_bad_row_naming_the_fix(tmp_path):
    """Plain integers in the first MiB make an int64 column; a later "02134" would be written back as 2134: a bad row
    (with the fix: give the type), never silently changed; with zip:str every value is its text."""
    rows = [[f"r{i}", text(i, bad_text=False), PAD if i < 10 else "", str(10000 + i)] for i in range(12)] + [["r12", "late", "", "02134"]]
    src = write_csv(tmp_path / "z.csv", ["id", "text", "pad", "zip"], rows)
    s = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), id_column="id", keep="zip", on_bad_row="skip")
    assert (s.rows_written, s.rows_rejected) == (12, 1)
    assert pq.read_table(tmp_path / "o.parquet").column("zip").to_pylist() == [10000 + i for i in range(12)]
    with open(tmp_path / "o.parquet.rejects.csv", newline="", encoding="utf-8") as f:
        assert list(csv.reader(f))[1] == ["12", "r12", "kept column 'zip': \"02134\" would be written back as 2134 (the "
                                          "column's first rows hold integers, each written back as it is written)", "02134"]
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "e.parquet", model=tiny_model(), id_column="id", keep="zip")
    assert e.value.message.endswith("- fix the value, or give the column's type in keep (COLUMN:str keeps every value as "
                                    "the text it is written as; :int, :float or :bool reads each CSV / TSV cell as one, "
                                    "and takes JSONL's JSON numbers and true / false), or pass "
                                    "on_bad_row='skip' to write it to the rejects file and go on")
    bertfeat.extract(src, tmp_path / "s.parquet", model=tiny_model(), id_column="id", keep="zip:str")
    assert pq.read_table(tmp_path / "s.parquet").column("zip").to_pylist() == [str(10000 + i) for i in range(12)] + ["02134"]


def test_a_given_type_reads_every_spelling(tmp_path):
    src = exact_input(tmp_path, "csv")
    r = open_input(str(src), keep=list(EXACT), keep_as={"zip": "int", "code": "float", "word": "bool", "blank": "str",
                                                       "signed": "int", "plain": "str"})
    assert {c: r.keep_types()[c] for c in ("zip", "code", "word", "blank", "signed", "plain")} == {
        "zip": pa.int64(), "code": pa.float64(), "word": pa.bool_(), "blank": pa.string(), "signed": pa.int64(),
        "plain": pa.string()}
    (b,) = list(r.batches())
    assert b.extra["zip"] == [2134, 12345, 1, 98765] and b.extra["signed"] == [3, 7, 8, 0]
    assert b.extra["code"][:2] == [100000.0, 2.0] and np.isnan(b.extra["code"][2]) and str(b.extra["code"][3]) == "-0.0"
    assert b.extra["word"] == [True, False, True, None] and b.extra["blank"] == [""] * 4  # empty: null, but "" for str
    assert b.extra["plain"] == ["12", "-3", "", "0"] and b.pre_rejected == {}
    r = open_input(str(src), keep=["num"], keep_as={"num": "int"})
    (b,) = list(r.batches())
    assert {row: render(why.text) for row, why in b.pre_rejected.items()} == {
        k: f"kept column 'num': \"{v}\" is not an integer (the type given in keep: int)" for k, v in enumerate(EXACT["num"])}


def test_the_rejects_file_tells_an_empty_string_from_a_null_and_writes_nested_values_as_json(tmp_path):
    """The rejects file wrote a null and an empty string both as an empty cell, and a list, map or struct as Python's
    str ({'a': 1}, [('k', b'\\x00')]): not the values as the input holds them. A null is an empty cell, "" a quoted
    one (as the CSV feature file writes them), a nested value JSON (a map as [key, value] pairs, bytes as the CSV
    output writes them, a backslash doubled)."""
    lines = ['{"text": "", "k": ""}', '{"text": "", "k": null}', '{"text": "", "k": "x,y"}', '{"text": ""}']
    (tmp_path / "e.jsonl").write_text("\n".join(lines) + "\n")
    bertfeat.extract(tmp_path / "e.jsonl", tmp_path / "e.parquet", model=tiny_model(), keep="k", on_bad_row="skip")
    assert (tmp_path / "e.parquet.rejects.csv").read_bytes() == (
        b'row,id,reason,k\r\n0,,empty text,""\r\n1,,empty text,\r\n2,,empty text,"x,y"\r\n3,,empty text,\r\n')
    t = pa.table({"text": ["", "ok"], "st": [{"a": 1, "b": "\u00e9"}, None],
                  "m": pa.array([[("k", b"\x00\\")], None], pa.map_(pa.string(), pa.binary())),
                  "d": pa.array([[datetime.date(2024, 1, 2)], []], pa.list_(pa.date32()))})
    pq.write_table(t, tmp_path / "n.parquet")
    bertfeat.extract(tmp_path / "n.parquet", tmp_path / "n.o.parquet", model=tiny_model(), keep="st,m,d",
                     on_bad_row="skip")
    with open(tmp_path / "n.o.parquet.rejects.csv", newline="", encoding="utf-8") as f:
        assert list(csv.reader(f)) == [["row", "id", "reason", "st", "m", "d"],
                                       ["0", "", "empty text", '{"a": 1, "b": "\u00e9"}', json.dumps([["k", "\x00\\\\"]]),
                                        '["2024-01-02"]']]


def test_a_given_bool_reads_any_case_and_1_0_as_a_parquet_text_column_casts(tmp_path):
    """cli.md promised `true`/`false` in any case for :bool, but a CSV's `tRuE` was a bad row, and `1` / `0`, which
    Arrow's cast of the same values in a Parquet text column reads, too: the two formats kept different rows."""
    cells = ["tRuE", "False", "1", "0", " TRUE ", "yes", "2", ""]
    write_csv(tmp_path / "b.csv", ["text", "f"], [[f"t{i}", c] for i, c in enumerate(cells)])
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(len(cells))], "f": cells}), tmp_path / "b.parquet")
    got = {}
    for fmt in ("csv", "parquet"):
        (b,) = list(open_input(str(tmp_path / f"b.{fmt}"), keep=["f"], keep_as={"f": "bool"}).batches())
        got[fmt] = [None if r in b.pre_rejected else v for r, v in zip(b.rows, b.extra["f"])], sorted(b.pre_rejected)
    assert got["csv"] == ([True, False, True, False, True, None, None, None], [5, 6])  # yes, 2: not booleans; '' null
    # Arrow's cast: the same for the first four; a value with spaces, and a Parquet string "" (not a null), are bad rows
    assert got["parquet"] == ([True, False, True, False, None, None, None, None], [4, 5, 6, 7])


def test_a_jsonl_number_kept_as_str_keeps_its_text_and_an_overflow_is_a_bad_row(tmp_path):
    """Found by the session's own audit: `--keep v:str` on JSONL numbers wrote 1.50 as "1.5" and 1e5 as "100000.0",
    and 1e400 (no float64 holds it) was kept as infinity without a word."""
    lines = ['{"text": "a", "v": 1.50}', '{"text": "b", "v": 1e5}', '{"text": "c", "v": 1e400}',
             '{"text": "d", "v": -0.0}', '{"text": "e", "v": 12}', '{"text": "f", "v": -0}']
    src = tmp_path / "j.jsonl"
    src.write_text("\n".join(lines) + "\n")
    bertfeat.extract(src, tmp_path / "s.parquet", model=tiny_model(), keep="v:str")
    assert pq.read_table(tmp_path / "s.parquet").column("v").to_pylist() == ["1.50", "1e5", "1e400", "-0.0", "12",
                                                                          "-0"]  # -0: the audit's 3.51
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "d.parquet", model=tiny_model(), keep="v")
    assert e.value.message.startswith(f"{src} row 2: kept column 'v': \"1e400\" is beyond float64's range (give "
                                      "keep='v:str' to keep its text)")
    s = bertfeat.extract(src, tmp_path / "k.parquet", model=tiny_model(), keep="v", on_bad_row="skip")
    assert s.rows_rejected == 1
    assert pq.read_table(tmp_path / "k.parquet").column("v").to_pylist() == [1.5, 100000.0, -0.0, 12.0, 0.0]


def test_a_given_type_on_jsonl_and_parquet(tmp_path):
    src = write_jsonl(tmp_path / "j.jsonl", [{"text": "a", "n": 2, "f": 1, "s": 1.5}, {"text": "b", "n": 3.5, "f": True, "s": "x"}])
    (b,) = list(open_input(str(src), keep=["n", "f", "s"], keep_as={"n": "float", "s": "str", "f": "bool"}).batches())
    assert b.extra == {"n": [2.0, 3.5], "f": [1, True], "s": ["1.5", "x"]}  # a number given str: its JSON text
    assert {row: render(why.text) for row, why in b.pre_rejected.items()} == {
        0: "kept column 'f': 1 is an integer, not a boolean (true or false) (the type given in keep: bool)"}
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "x": pa.array([1.0, 2.5]), "tags": pa.array([[1], [2]])}), path)
    (b,) = list(open_input(str(path), keep=["x"], keep_as={"x": "int"}).batches())
    assert b.extra["x"] == [1, "2.5"] and list(b.pre_rejected) == [1]  # (the rejects file shows the value as it was)
    assert render(b.pre_rejected[1].text).startswith("kept column 'x': \"2.5\" is not an integer (the type given in keep: int) (")
    (b,) = list(open_input(str(path), keep=["x"], keep_as={"x": "str"}).batches())
    assert b.extra["x"] == ["1", "2.5"]
    with pytest.raises(BertfeatError) as e:
        open_input(str(path), keep=["tags"], keep_as={"tags": "int"})
    assert e.value.message == (f"{path}: keep='tags:int': the column holds list<element: int64> values, which Arrow cannot "
                               "convert to int64 - keep it as it is (drop :int), or give another type")


# --------------------------------------------------------------------------- issue 44, class 3: names keep's text would split
@pytest.fixture
def odd_names(tmp_path) -> Path:
    return write_csv(tmp_path / "q.csv", ["text", "a,b", 'say "hi"', "time:utc", "label:int", "label"],
                     [["one", "x", "h1", "t1", "7", "1"], ["two", "y", "h2", "t2", "8", "0"]])


def test_a_name_with_a_comma_quote_or_colon_is_kept_quoted_as_in_csv(odd_names, tmp_path, capsys):
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", odd_names, "-o", out, "--model", tiny_model(), "-q", "--keep", '"a,b",label:str',
                     "--keep", '"say ""hi"""', "--keep", "time:utc", "--keep", '"label:int":int')
    assert rc == 0, err
    t = pq.read_table(out)
    assert t.column_names[5:] == ["a,b", "label", 'say "hi"', "time:utc", "label:int"]
    assert t.select(t.column_names[5:]).to_pylist() == [
        {"a,b": "x", "label": "1", 'say "hi"': "h1", "time:utc": "t1", "label:int": 7},
        {"a,b": "y", "label": "0", 'say "hi"': "h2", "time:utc": "t2", "label:int": 8}]
    assert read_feature_metadata(out)["keep_as"] == {"label": "str", "label:int": "int"}
    for keep in ('"a,b",label', ["a,b", "label"], {"a,b": None, "label": "str"}):  # Python: the text, a list, a dict
        bertfeat.extract(odd_names, tmp_path / "p.parquet", model=tiny_model(), keep=keep, overwrite=True)
        assert pq.read_table(tmp_path / "p.parquet").column("a,b").to_pylist() == ["x", "y"]


@pytest.mark.parametrize("keep, message", [
    ("a,b", "{src}: --keep 'a' is not a column - columns are: text, 'a,b', say \"hi\", time:utc, label:int, label (a name "
            "holding a comma, a double quote or a colon is quoted as in CSV, e.g. --keep '\"a,b\"')"),
    ('"a,b', "--keep '\"a,b': the quote at character 0 is never closed - close it: \"a,b\",label"),
    ('"a,b"x', "--keep '\"a,b\"x': 'x' follows the quoted name 'a,b' - end a quoted name with its quote, or with a type: "
               ":int, :float, :bool or :str"),
    ('say "hi"', "--keep 'say \"hi\"': the name 'say \"hi\"' holds a double quote - quote the whole name and double the "
                 "quote in it, as in CSV: \"x\"\"y\" for x\"y"),
])
def test_keep_text_that_names_no_column_says_how_to_quote(odd_names, tmp_path, capsys, keep, message):
    rc, _, err = run(capsys, "extract", odd_names, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--keep", keep)
    assert (rc, err) == (1, f"Error: {message.format(src=odd_names)}\n")
    assert not (tmp_path / "o.parquet").exists()


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
    if pa.types.is_floating(want.type):
        return got.type == want.type and str(got.to_pylist()) == str(want.to_pylist())  # (str: NaN equals NaN)
    return got.type == want.type and got.equals(want)  # (to_pylist would cut time64's nanoseconds)


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


def test_a_jsonl_boolean_kept_as_str_is_its_json_text(tmp_path):
    """The session's own audit (3.53): `--keep v:str` on true / false was refused (the docs: kept as its JSON text)."""
    src = tmp_path / "b.jsonl"
    src.write_text('{"text": "a", "v": true}\n{"text": "b", "v": false}\n{"text": "c", "v": "x"}\n')
    bertfeat.extract(src, tmp_path / "s.parquet", model=tiny_model(), keep="v:str")
    assert pq.read_table(tmp_path / "s.parquet").column("v").to_pylist() == ["true", "false", "x"]


def test_a_jsonl_number_a_float64_cannot_hold_is_a_bad_row_with_its_text(tmp_path):
    """JSONL numbers kept as double were rounded without a word (9007199254740993 -> ...992.0, 0.1000...0001 -> 0.1),
    and NaN / -Infinity were called "beyond float64's range" with their value lost from the rejects file."""
    lines = ['{"text": "a", "x": 1.50}', '{"text": "b", "x": 9007199254740993}', '{"text": "c", "x": 1E5}',
             '{"text": "d", "x": 0.10000000000000000001}', '{"text": "e", "x": NaN}', '{"text": "f", "x": 2}',
             '{"text": "g", "x": -Infinity}', '{"text": "h", "x": 0.10000000000000001}']  # 0.1 at 17 digits: held
    src = tmp_path / "j.jsonl"
    src.write_text("\n".join(lines) + "\n")
    s = bertfeat.extract(src, tmp_path / "k.parquet", model=tiny_model(), keep="x", on_bad_row="skip", cache=False)
    assert s.rows_rejected == 4
    assert pq.read_table(tmp_path / "k.parquet").column("x").to_pylist() == [1.5, 100000.0, 2.0, 0.1]
    with open(tmp_path / "k.parquet.rejects.csv", newline="") as fh:
        rejects = [(r["row"], r["reason"], r["x"]) for r in csv.DictReader(fh)]
    assert rejects == [
        ("1", "kept column 'x': \"9007199254740993\" has more digits than a float64 holds (it would read back as "
              "9007199254740992.0; give --keep x:str to keep its text)", "9007199254740993"),
        ("3", "kept column 'x': \"0.10000000000000000001\" has more digits than a float64 holds (it would read back as "
              "0.1; give --keep x:str to keep its text)", "0.10000000000000000001"),
        ("4", "kept column 'x': NaN is not a JSON number (give --keep x:str to keep its text)", "NaN"),
        ("6", "kept column 'x': -Infinity is not a JSON number (give --keep x:str to keep its text)", "-Infinity")]


def test_jsonl_columns_and_types_from_the_first_lines_say_so(tmp_path):
    """A key first found after the first lines was 'not a column' with no more said; a column whose first lines
    hold only nulls was read as strings, and a later 5 was 'not a string (the column's first rows hold strings)'."""
    late = tmp_path / "late.jsonl"
    late.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(1000)) + '{"text": "x", "label": 5}\n')
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(late, tmp_path / "l.parquet", model=tiny_model(), keep="label", cache=False)
    assert e.value.message == (f"{late}: keep 'label' is not a column of its first lines (bertfeat finds the columns "
                               "there) - columns are: text; a key first found further on: put a line that has it first")
    nulls = tmp_path / "nulls.jsonl"
    nulls.write_text("".join(json.dumps({"text": f"t{i}", "score": None}) + "\n" for i in range(1000))
                     + '{"text": "x", "score": 5}\n')
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(nulls, tmp_path / "n.parquet", model=tiny_model(), keep="score", cache=False)
    assert e.value.message.startswith(f"{nulls} row 1000: kept column 'score': 5 is an integer, not a string (the "
                                      "column's first lines hold no value, so it is read as strings: give its type, "
                                      "e.g. keep='score:int')")
    bertfeat.extract(nulls, tmp_path / "n.parquet", model=tiny_model(), keep="score:int", cache=False)
    assert pq.read_table(tmp_path / "n.parquet").column("score").to_pylist()[-2:] == [None, 5]


# --------------------------------------------------------------------------- values no Python object holds
#: Parquet values Python's objects hold otherwise: datetime.time has microseconds and no hour past the 24th,
#: datetime no year past 9999, timedelta no 2**62 seconds. Carried as to_pylist's objects they were cut (1 ns -> 0),
#: wrapped (12 days -> 17:25) or an OverflowError ("a bug in bertfeat"); an id's nanoseconds were dropped by Arrow's
#: guess of the type of pandas Timestamps.
BEYOND_PYTHON = {
    "time_ns": pa.array([1, None, 1_500], pa.time64("ns")),
    "time_past_day": pa.array([5, None, 2 ** 40], pa.time64("us")),
    "year_10000": pa.array([0, None, 253_402_300_800], pa.timestamp("s")),
    "date_far": pa.array([0, None, 2 ** 31 - 1], pa.date32()),
    "duration_far": pa.array([0, None, 2 ** 62], pa.duration("s")),
    "ns_in_zone": pa.array([1, None, 2], pa.timestamp("ns", tz="Asia/Tokyo")),
    "list_time_ns": pa.array([[1], None, [1_500]], pa.list_(pa.time64("ns"))),
}
#: those a CSV output cannot give back: Arrow writes them as text its CSV reader refuses ("10000-01-01 00:00:00",
#: "<value out of range: 2147483647>"); the run refuses them naming the row
NOT_IN_CSV = {"time_past_day": "<value out of range: 1099511627776>", "year_10000": "10000-01-01 00:00:00.000",
              "date_far": "<value out of range: 2147483647>"}
#: how the rejects file, and a message, show such a value (Arrow's text; past Arrow's range, the number and type)
SHOWN = {"time_past_day": "1099511627776 (time64[us])", "year_10000": "10000-01-01 00:00:00.000",
         "date_far": "2147483647 (date32[day])"}


@pytest.fixture(scope="module")
def beyond_python(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("beyond") / "in.parquet"
    pq.write_table(pa.table({"text": ["one text", "", "three texts"], **BEYOND_PYTHON}), path)  # row 1: a bad row
    return path


def _read(path: Path, name: str) -> pa.Array:
    """The input's column as Parquet gives it back (seconds are stored as milliseconds), rows 0 and 2."""
    return pq.read_table(path, columns=[name]).column(name).combine_chunks().take([0, 2])


def _exact(got, want: pa.Array) -> bool:
    """The same type and values, nanoseconds and days past 9999 included (to_pylist would compare them cut)."""
    got = got.combine_chunks() if isinstance(got, pa.ChunkedArray) else got
    return got.type == want.type and got.equals(want)


class TestValuesNoPythonObjectHolds:
    @pytest.mark.parametrize("name", list(BEYOND_PYTHON))
    def test_a_parquet_output_keeps_them_exactly(self, beyond_python, tmp_path, name):
        out = tmp_path / "o.parquet"
        bertfeat.extract(beyond_python, out, model=tiny_model(), keep=name, on_bad_row="skip")
        want = _read(beyond_python, name)
        assert _exact(pq.read_table(out).column(name), want)
        (_, _, extras), = list(iter_features(out, with_extras=True))
        assert _exact(extras[name], want)

    @pytest.mark.parametrize("name", ["time_ns", "year_10000", "ns_in_zone", "date_far"])
    def test_as_the_id_column_of_a_parquet_output(self, beyond_python, tmp_path, name):
        out = tmp_path / "o.parquet"
        bertfeat.extract(beyond_python, out, model=tiny_model(), id_column=name, on_bad_row="skip")  # row 1: null id
        assert _exact(pq.read_table(out).column(name), _read(beyond_python, name))

    @pytest.mark.parametrize("name", [n for n in BEYOND_PYTHON if n not in NOT_IN_CSV and not n.startswith("list")])
    def test_a_csv_output_gives_them_back_and_so_does_pca_transform(self, beyond_python, tmp_path, capsys, name):
        out = tmp_path / "o.csv"
        bertfeat.extract(beyond_python, out, model=tiny_model(), keep=name, on_bad_row="skip")
        want = _read(beyond_python, name)
        (_, _, extras), = list(iter_features(out, with_extras=True))
        assert _exact(extras[name], want)
        rc, _, err = run(capsys, "pca", "fit", out, "-n", "1", "-o", tmp_path / "p.npz", "-q")
        assert rc == 0, err
        rc, _, err = run(capsys, "pca", "transform", out, "--pca-model", tmp_path / "p.npz", "-o", tmp_path / "r.csv", "-q")
        assert rc == 0, err
        (_, _, extras), = list(iter_features(tmp_path / "r.csv", with_extras=True))
        assert _exact(extras[name], want)

    @pytest.mark.parametrize("name", ["time_ns", "ns_in_zone"])
    def test_as_the_id_column_of_an_npy_output(self, beyond_python, tmp_path, name):
        out = tmp_path / "o.npy"
        bertfeat.extract(beyond_python, out, model=tiny_model(), id_column=name, on_bad_row="skip")
        (ids, _, _), = list(iter_features(out, with_extras=True))
        want = _read(beyond_python, name)
        assert _exact(pa.array(ids, want.type), want)

    @pytest.mark.parametrize("fmt", ["csv", "npy"])
    @pytest.mark.parametrize("name", list(NOT_IN_CSV))
    def test_a_value_a_csv_cannot_give_back_is_refused_naming_its_row(self, beyond_python, tmp_path, capsys, name, fmt):
        """Arrow wrote them as text its own CSV reader refuses: the run succeeded and the output could not be read."""
        args = ["--keep", name] if fmt == "csv" else ["--id-column", name]
        rc, _, err = run(capsys, "extract", beyond_python, "-o", tmp_path / f"o.{fmt}", "--model", tiny_model(),
                         "--on-bad-row", "skip", "-q", *args)
        what, other = (f"--keep column '{name}'", "leave it out of --keep") if fmt == "csv" else \
            (f"--id-column '{name}'", "choose another --id-column")
        assert (rc, err) == (1, f"Error: {beyond_python} row 2: {what} holds {SHOWN[name]}, which a {'CSV' if fmt == 'csv' else '.npy'} "
                                f"output cannot give back (it is written as '{NOT_IN_CSV[name]}', which Arrow's CSV "
                                f"reader refuses) - write a Parquet output (-o NAME.parquet), or {other}\n")
        assert list(tmp_path.iterdir()) == []

    def test_in_a_parquet_dataset_the_refusal_names_the_file_and_its_row(self, beyond_python, tmp_path, capsys):
        """A folder of Parquet files numbers its rows across the files: the refusal named that number alone, where a bad
        row names the file and its row there too (Reader.row_label)."""
        d = tmp_path / "ds"
        d.mkdir()
        table = pq.read_table(beyond_python, columns=["text", "year_10000"])
        pq.write_table(table.slice(0, 1), d / "p0.parquet")
        pq.write_table(table.slice(1), d / "p1.parquet")  # its row 1: the dataset's row 2
        rc, _, err = run(capsys, "extract", d, "-o", tmp_path / "o.csv", "--model", tiny_model(), "--on-bad-row", "skip",
                         "-q", "--keep", "year_10000")
        assert (rc, err) == (1, f"Error: {d} row 2 ({d / 'p1.parquet'} row 1): --keep column 'year_10000' holds "
                                f"{SHOWN['year_10000']}, which a CSV output cannot give back (it is written as "
                                f"'{NOT_IN_CSV['year_10000']}', which Arrow's CSV reader refuses) - write a Parquet output "
                                "(-o NAME.parquet), or leave it out of --keep\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]

    def test_the_rejects_file_shows_them_as_arrow_writes_them(self, beyond_python, tmp_path):
        out = tmp_path / "o.parquet"
        bertfeat.extract(beyond_python, out, model=tiny_model(), keep=list(NOT_IN_CSV), on_bad_row="skip",
                         id_column="time_ns")
        table = pq.read_table(beyond_python).slice(2)  # row 2 again, rejected this time: its text is empty
        pq.write_table(table.set_column(0, "text", pa.array([""])), tmp_path / "bad.parquet")
        bertfeat.extract(tmp_path / "bad.parquet", tmp_path / "b.parquet", model=tiny_model(), keep=list(NOT_IN_CSV),
                         on_bad_row="skip", id_column="time_ns")
        assert (tmp_path / "b.parquet.rejects.csv").read_text().splitlines() == [
            "row,id,reason," + ",".join(NOT_IN_CSV), "0,00:00:00.000001500,empty text," + ",".join(SHOWN.values())]

    @pytest.mark.parametrize("option", ["keep", "id_column"])
    def test_a_struct_whose_field_name_repeats_is_refused_naming_it(self, tmp_path, capsys, option):
        """Its values have no dict: the run failed with "unexpected ValueError ... a bug in bertfeat"."""
        src = tmp_path / "s.parquet"
        twice = pa.StructArray.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])
        pq.write_table(pa.table({"text": ["one", "two"], "s": pa.array([[{"a": 1}], []], pa.list_(pa.struct([("a", pa.int64())]))),
                                 "d": twice}), src)
        flag = f"--{option.replace('_', '-')}"
        rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), flag, "d")
        what = "--keep column" if option == "keep" else "--id-column"
        assert (rc, err) == (1, f"Error: {src}: {what} 'd' holds struct<a: int64, a: int64> values, a struct whose field "
                                "name 'a' appears more than once - rename the struct's fields so that each name is unique "
                                "(e.g. pyarrow's StructArray.from_arrays with other names), or leave the column out\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["s.parquet"]


def test_a_name_with_a_leading_zero_is_no_feature_column():
    """The features' columns are f0, f1, ... without leading zeros: f007 is kept beside them (it was refused as
    'the output column f007', which no output has)."""
    from bertfeat.run.plan import check_keep

    assert check_keep([("f007", None), ("f0x", None)], "csv", None, False) == (("f007", "f0x"), {})
    with pytest.raises(BertfeatError, match="^keep 'f12' clashes with the features' columns"):
        check_keep([("f12", None)], "parquet", None, True)


def test_digits_of_other_scripts_are_not_numbers(tmp_path, capsys):
    """Python's int() and float() read Arabic-Indic digits ("١٢" as 12); a CSV cell under a given :int / :float read
    them so, where Arrow's cast of a Parquet text column and JSON refuse them. Now a bad row on every reader, and a
    column of them whose type the first rows decide stays text."""
    src = write_csv(tmp_path / "d.csv", ["id", "text", "i", "f", "t"],
                    [["a", "fine", "7", "1.5", "١٢"], ["b", "more", "١٢", "2", "٣"], ["c", "last", "3", "١.٥", "٤"]])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id",
                     "--keep", "i:int,f:float,t", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "o.parquet.rejects.csv") == [
        ["row", "id", "reason", "i", "f", "t"],
        ["1", "b", "kept column 'i': \"١٢\" is not an integer (the type given in --keep: int)", "١٢", "2", "٣"],
        ["2", "c", "kept column 'f': \"١.٥\" is not a number (the type given in --keep: float)", "3", "١.٥", "٤"]]
    assert pq.read_table(out).select(["i", "f", "t"]).to_pylist() == [{"i": 7, "f": 1.5, "t": "١٢"}]


def test_the_rejects_file_shows_a_byte_that_is_not_utf8_as_xNN(tmp_path, capsys):
    """A kept value or id holding a byte that is not valid UTF-8 (or not valid in --encoding) was written to the rejects
    file as U+FFFD: the byte was lost to whoever fixes the row. Now as \\xNN on every reader, as a binary value's are."""
    (tmp_path / "c.csv").write_bytes(b"id,text,k\na,hello,1\nb\xfe,world,\xff2\n")
    (tmp_path / "j.jsonl").write_bytes(b'{"id": "a", "text": "hello", "k": "1"}\n{"id": "b\xfe", "text": "world", "k": "\xff2"}\n')
    (tmp_path / "w.jsonl").write_bytes(b'{"id": "a", "text": "hello", "k": "1"}\n{"id": "b", "text": "world", "k": "a\x81b"}\n')
    bad = pa.array([b"1", b"\xff2"], pa.binary()).view(pa.string())  # a writer that did not check its UTF-8
    pq.write_table(pa.table({"id": pa.array(["a", "b"]), "text": ["hello", "world"], "k": bad}), tmp_path / "p.parquet")
    cases = {"c.csv": ("b\\xfe", "\\xff2", []), "j.jsonl": ("b\\xfe", "\\xff2", []),
             "w.jsonl": ("b", "a\\x81b", ["--encoding", "cp1252"]), "p.parquet": ("b", "\\xff2", [])}
    for name, (ident, kept, more) in cases.items():
        out = tmp_path / f"{name}.out.parquet"
        rc, _, err = run(capsys, "extract", tmp_path / name, "-o", out, "--model", tiny_model(), "--id-column", "id",
                         "--keep", "k:str", "--on-bad-row", "skip", "-q", *more)
        assert rc == 0, (name, err)
        (header, row) = read_rejects(Path(f"{out}.rejects.csv"))
        assert (row[0], row[1], row[3]) == ("1", ident, kept), (name, row)
        assert "\ufffd" not in row[2], (name, row)


@pytest.mark.parametrize("end", ["", "\n"])
def test_an_unclosed_quote_at_the_end_keeps_its_value_as_written(tmp_path, capsys, end):
    """A file whose last value opens a quote it never closes, and has no final line feed: the line feed the reader
    gives such a file (pyarrow needs one) was written into the value in the rejects file ("a\\nb\\n" for "a\\nb")."""
    src = tmp_path / "q.csv"
    src.write_text(f'id,text,k\nr0,fine,1\nr1,hello,"a\nb{end}', newline="")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "q.parquet", "--model", tiny_model(), "--id-column", "id",
                     "--keep", "k", "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    (_, row) = read_rejects(tmp_path / "q.parquet.rejects.csv")
    assert (row[0], row[1], row[3]) == ("1", "r1", f"a\nb{end}")


def test_a_json_object_under_a_given_str_says_no_type_keeps_it(tmp_path, capsys):
    """An object in a JSONL column given :str said "... not a string (the type given in --keep: str)" and then advised
    giving the column's type (COLUMN:str ...): the type it had. Now the reason says no type keeps an object."""
    src = tmp_path / "j.jsonl"
    src.write_text('{"text": "a", "k": "x"}\n{"text": "b", "k": {"a": 1}}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "j.parquet", "--model", tiny_model(), "--keep", "k:str",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    assert read_rejects(tmp_path / "j.parquet.rejects.csv")[1][2] == (
        "kept column 'k': {\"a\": 1} is an object, not a string (the type given in --keep: str); no type keeps a JSON "
        "object or array: write it as a string, or leave the column out")
