"""run/options.py: every extract option declared once (name, default, check, the message that names it).

The declarations, ``bertfeat.extract``'s keywords and ``bertfeat extract``'s flags are one list (an option cannot be
added in one place only); every option has a default and a check, or says where it is checked; a bad value of each
checked option gives the same message from Python (naming the parameter) and from the CLI (naming the flag), and
that message is the declared check's own.
"""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
import typer

import bertfeat
from bertfeat.cli import app as cli
from bertfeat.errors import BertfeatError, opt, render
from bertfeat.ops.threads import default_threads
from bertfeat.run.options import OPTIONS, ExtractOptions, check, encoder_keywords, feature_spec, option
from extract_util import read_table, run, tiny_encoder, tiny_model, write_csv

#: bertfeat.extract's keywords that are no option of the run: how it is shown and where it runs
CALL_ONLY = {"client", "progress", "quiet"}
#: the CLI's flags that are no option of their own: --no-cache is cache=False, --estimate-rows the estimate's size
CLI_ONLY = {"quiet", "no_cache", "estimate_rows", "summary_json"}


def cli_extract_params() -> dict:
    """The `bertfeat extract` command's parameters: name -> click parameter (its flags in .opts)."""
    return {p.name: p for p in typer.main.get_command(cli.app).commands["extract"].params}


def test_every_option_has_a_default_and_a_check():
    for name, f in OPTIONS.items():
        assert f.default is not dataclasses.MISSING or name == "input", f"{name} has no default"
        assert callable(f.metadata["check"]) or f.metadata["checked_by"], f"{name} has no check and no checked_by"
    with pytest.raises(TypeError, match="checked_by"):
        option(None)  # a declaration with neither is refused when the class is made
    assert ExtractOptions(input="x.csv").chunk_rows == OPTIONS["chunk_rows"].default
    with pytest.raises(dataclasses.FrozenInstanceError):
        ExtractOptions(input="x.csv").threads = 2


def test_the_declarations_the_keywords_and_the_flags_are_one_list():
    keywords = inspect.signature(bertfeat.extract).parameters
    flags = inspect.signature(cli.extract).parameters
    python_only = {name for name, f in OPTIONS.items() if not f.metadata["cli"]}
    assert python_only == {"encoder_options", "command"}
    assert set(keywords) - CALL_ONLY == set(OPTIONS)
    assert set(flags) - CLI_ONLY == set(OPTIONS) - python_only
    for name, f in OPTIONS.items():  # bertfeat.extract's defaults are the declared ones
        assert keywords[name].default == (inspect.Parameter.empty if name == "input" else f.default), name


def test_the_cli_defaults_are_the_declared_ones(monkeypatch):
    """A flag's default, as its check reads it, is the declared default as its check reads it (--max-field-bytes's
    4MiB is 4194304); the flag an error names (errors.render with the CLI's table) is one of the command's."""
    monkeypatch.delenv("BERTFEAT_CACHE", raising=False)
    params = cli_extract_params()
    shown = {flag for p in params.values() for flag in p.opts}
    flags = cli.FLAGS | cli.COMMAND_FLAGS["extract"]
    for name, f in OPTIONS.items():
        if f.metadata["cli"] and name != "input":  # input: the argument, named by no error as an option
            assert render(opt(name), flags) in shown, name
        if not f.metadata["cli"] or name in ("input", "estimate"):
            continue
        assert check(name, params[name].default) == check(name, f.default), name


def test_sweep_and_text_features_take_the_options_by_their_declared_names():
    from bertfeat.sklearn import TextFeatures
    from bertfeat.sweep import SWEEP_OPTIONS, sweep

    assert set(SWEEP_OPTIONS) <= set(OPTIONS)
    sweep_flags = {p.name for p in typer.main.get_command(cli.app).commands["sweep"].params}
    own = {"input", "sets", "label", "output", "sample", "seed", "n_components", "folds", "no_cache", "quiet"}
    assert sweep_flags - own <= set(SWEEP_OPTIONS)
    for bad in ("pca", "batch"):  # an extract option a sweep does not take, or none at all: Python's TypeError
        with pytest.raises(TypeError, match=f"sweep\\(\\) got an unexpected keyword argument '{bad}'"):
            sweep("x.csv", **{bad: 4})
    params = TextFeatures().get_params()
    shared = {name for name in params if name in OPTIONS} - {"cache"}  # TextFeatures' cache: an in-memory one
    assert shared >= {"model", "pooling", "layers", "max_length", "long_text", "stride", "precision", "threads"}
    for name in shared - {"precision"}:  # precision None: the Encoder's own default
        assert params[name] == OPTIONS[name].default, name
    tf = TextFeatures(pooling="cls", max_length=16, max_batch_tokens=64)
    assert encoder_keywords(tf) == {"max_batch_tokens": 64}  # precision None: left to the Encoder
    given = ExtractOptions(input="x", max_batch_tokens=64)
    assert encoder_keywords(given) == {"max_batch_tokens": 64, "precision": "fp32"}
    spec = feature_spec(tiny_encoder(), ExtractOptions(input="x", pooling="cls", max_length=16))
    assert feature_spec(tiny_encoder(), tf).to_dict() == spec.to_dict()
    assert (spec.pooling, spec.max_length) == ("cls", 16)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("options")
    (d / "afile.txt").write_text("not a directory")
    return write_csv(d / "c.csv", ["text", "label"], [["a sentence", "x"], ["another one", "y"]])


PCA_FIX = ("give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's "
           "choice), or 1.0 / all for every component")
#: one bad value of every option with a check: (option, its Python value, the CLI's words for it, Python's message,
#: the CLI's message); DIR is the input's folder
CORES = default_threads()
BAD = [
    ("input", "", [""], "the input path is empty - pass the input file (CSV, TSV, Parquet or JSONL), a directory or "
     "glob of Parquet files, or - for standard input", None),
    ("max_length", 0, ["--max-length", "0"], "max_length=0 is out of range - choose 3 or more (up to the model's "
     "max_position_embeddings, 512 for BERT and MiniLM), or leave it out for the default", "--max-length 0"),
    ("max_batch_tokens", 0, ["--max-batch-tokens", "0"], "max_batch_tokens=0 is out of range - choose 1 or more (tokens "
     "per batch, padded rows x length; default 512), or leave it out for the default", "--max-batch-tokens 0"),
    ("truncate_dim", 0, ["--truncate-dim", "0"], "truncate_dim=0 is out of range - choose 1 or more (the first "
     "features of each vector are kept), or leave it out for the default", "--truncate-dim 0"),
    ("precision", "fp16", ["--precision", "fp16"], "unknown precision='fp16' - choose one of fp32, bf16, int8, auto",
     "--precision 'fp16'"),
    ("pca", 0, ["--pca", "0"], f"pca=0 is out of range - {PCA_FIX}", "--pca 0"),
    ("pca_model", "DIR/missing.npz", ["--pca-model", "DIR/missing.npz"], "the PCA model DIR/missing.npz does not exist "
     "- pass pca_model with a .npz written by `bertfeat pca fit` or `extract --pca`", "--pca-model"),
    ("format", "xlsx", ["--format", "xlsx"], "unknown output format 'xlsx' - choose one of parquet, npy, csv", None),
    ("on_bad_row", "maybe", ["--on-bad-row", "maybe"], "unknown on_bad_row='maybe' - choose error or skip",
     "--on-bad-row 'maybe'"),
    ("max_bad_rows", "abc", ["--max-bad-rows", "abc"], "max_bad_rows='abc' is not a number of rows or a percentage - "
     "give a number of rows such as max_bad_rows=100, or a share of the rows read such as max_bad_rows='1%'",
     "--max-bad-rows 'abc'"),
    ("chunk_rows", 0, ["--chunk-rows", "0"], "chunk_rows=0 is out of range - give 1 or more", "--chunk-rows 0"),
    ("threads", 0, ["--threads", "0"], "threads=0 is out of range - give 1 or more (default: all cores)", "--threads 0"),
    ("engine", "spark", ["--engine", "spark"], "unknown engine='spark' - choose local or dask", "--engine 'spark'"),
    ("workers", 0, ["--engine", "dask", "--workers", "0"], "workers=0 is out of range - give 1 or more", "--workers 0"),
    # (got the process killed, out of memory, starting the processes)
    ("workers", 10**20, ["--engine", "dask", "--workers", str(10**20)], f"workers={10**20} would start {10**20:,} local "
     f"processes, each with its own copy of the model, on {CORES} core(s) - give at most {4 * CORES} (4 per core), or "
     "start a cluster with `dask scheduler` / `dask worker` and pass scheduler in place of workers",
     f"--workers {10**20}"),
    ("blocksize", "abc", ["--engine", "dask", "--blocksize", "abc"], "blocksize='abc' is not a size - give bytes, e.g. "
     "8MiB, 64MB or none", "--blocksize 'abc'"),
    ("keep", "a,,b", ["--keep", "a,,b"], "keep='a,,b' holds an empty column name - separate the column names with "
     "single commas, e.g. label,split", "--keep 'a,,b'"),
    ("cache", "DIR/afile.txt", ["--cache", "DIR/afile.txt"], "the cache DIR/afile.txt is not a directory - give cache a "
     "directory (it is made if missing)", "--cache"),
    ("label", "", ["--label", ""], "label='' is empty - give label the name of the input's column that holds the "
     "labels, e.g. label='label'", "--label ''"),
    ("dtype", "float64", ["--dtype", "float64"], "unknown dtype='float64' - choose one of float32, float16 (float16 "
     "halves the file)", "--dtype float64"),
    ("estimate", 1, ["--estimate", "--estimate-rows", "1"], "estimate=1 is out of range - choose 2 or more (rows to "
     "measure on), or estimate=True for the default sample", "--estimate-rows 1"),
    ("max_field_bytes", 0, ["--max-field-bytes", "0"], "max_field_bytes=0 is out of range - give bytes, e.g. 4MiB (the "
     "default), 512KiB or 16MiB, up to 1GiB", "--max-field-bytes 0"),
]


def test_every_checked_option_has_a_bad_value_here():
    checked = {name for name, f in OPTIONS.items() if f.metadata["check"] is not None}
    assert checked == {case[0] for case in BAD}


@pytest.mark.parametrize("name, value, words, message, flag", BAD, ids=[case[0] for case in BAD])
def test_a_bad_value_reads_the_same_from_python_and_the_cli(src, tmp_path, capsys, monkeypatch, name, value, words,
                                                            message, flag):
    """The declared check's message, from bertfeat.extract (the parameter: name=value) and from `bertfeat extract`
    (the flag: --name value), otherwise word for word."""
    monkeypatch.delenv("BERTFEAT_CACHE", raising=False)
    d = str(src.parent)
    value = value.replace("DIR", d) if isinstance(value, str) else value
    words = [w.replace("DIR", d) for w in words]
    message = message.replace("DIR", d)
    with pytest.raises(BertfeatError) as own:
        check(name, value)
    assert own.value.message == message
    out = tmp_path / "o.parquet"
    given = {"engine": "dask"} if name in ("workers", "blocksize") else {}
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(value if name == "input" else src, out, model=tiny_model(), **given,
                         **({} if name == "input" else {name: value}))
    assert e.value.message == message
    head = words if name == "input" else [src, *words]
    rc, _, err = run(capsys, "extract", *head, "-o", out, "--model", tiny_model())
    shown = e.value.render(cli.FLAGS | cli.COMMAND_FLAGS["extract"])
    assert (rc, err) == (1, f"Error: {shown}\n")
    if flag is not None:  # the CLI names the flag where Python names the parameter
        assert flag in shown and flag not in message
    assert not out.exists()


def test_several_bad_options_report_the_first_in_the_plans_order(src, tmp_path):
    """make_plan runs the declared checks in the order its errors always came: a run with several wrong options
    names the same one first as before (estimate, chunk_rows, the engine's options, on_bad_row, max_bad_rows, dtype,
    max_field_bytes, pca, pca_model, cache, the encoder's, format, keep, label, input)."""
    bad = dict(estimate=1, chunk_rows=0, workers=2, on_bad_row="maybe", max_bad_rows="q", dtype="x",
               max_field_bytes=0, pca=0, threads=0, max_length=0, keep="a,,b", input="")
    first = [("estimate", "estimate=1 is out of range"), ("chunk_rows", "chunk_rows=0 is out of range"),
             ("workers", "workers needs engine='dask'"), ("on_bad_row", "unknown on_bad_row='maybe'"),
             ("max_bad_rows", "max_bad_rows='q' is not"), ("dtype", "unknown dtype='x'"),
             ("max_field_bytes", "max_field_bytes=0 is out"), ("pca", "pca=0 is out"), ("threads", "threads=0 is out"),
             ("max_length", "max_length=0 is out"), ("keep", "keep='a,,b' holds"), ("input", "the input path is empty")]
    for name, words in first:
        kw = dict(bad)
        with pytest.raises(BertfeatError) as e:
            bertfeat.extract(kw.pop("input", src), tmp_path / "o.parquet", model=tiny_model(), **kw)
        assert e.value.message.startswith(words), (name, e.value.message)
        del bad[name]
    assert not bad


# --------------------------------------------------------------------------- values of another type than declared
@pytest.mark.parametrize("name, value, message", [
    ("overwrite", "False", "overwrite='False' is a str, not True or False - give overwrite as True or False"),
    ("resume", "yes", "resume='yes' is a str, not True or False - give resume as True or False"),
    ("wide", "yes", "wide='yes' is a str, not True or False - give wide as True or False"),
    ("model", 5, "model=5 is an int, not a string or a path, or None - give model as a string or a path, or leave it out"),
    ("delimiter", 5, "delimiter=5 is an int, not a string, or None - give delimiter as a string, or leave it out"),
    ("encoder_options", [1], "encoder_options=[1] is a list, not a dict, or None - give encoder_options as a dict, or "
     "leave it out"),
    ("normalize", "yes", "normalize='yes' is a str, not True or False, or None - give normalize as True or False, or "
     "leave it out"),
])
def test_a_value_of_another_type_is_refused_before_anything_is_written(tmp_path, name, value, message):
    """A string where a switch belongs once counted as true (overwrite="False" replaced the output); an int where a
    name belongs ended in Python's own TypeError / AttributeError. Each is now the option's error, first, and the
    files are as they were."""
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"]])
    out = tmp_path / "o.parquet"
    out.write_bytes(b"the user's file")
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, cache=False, **{"model": tiny_model(), name: value})
    assert e.value.message == message
    assert out.read_bytes() == b"the user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "o.parquet"]


def test_arrays_of_names_fractions_and_python_types_are_taken_as_what_they_say(tmp_path):
    """keep=np.array([...]) / df.columns[[1]] (a pandas Index), pca=Fraction(1, 2) and dtype=float were refused as
    not names, "pca='1/2' is not a number" and "is a type, not a string" (np.float32 was taken); a helper's review."""
    import fractions

    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    src = write_csv(tmp_path / "c.csv", ["label", "text"], [["007", "a b"], ["1e5", "c d"], ["", "e f"], ["x", "g h"]])
    out = tmp_path / "o.parquet"
    for keep in (np.array(["label"]), pd.Index(["label"]), pd.DataFrame(columns=["label", "text"]).columns[[0]]):
        s = bertfeat.extract(src, out, model=tiny_model(), cache=False, keep=keep, pca=fractions.Fraction(1, 2),
                             overwrite=True)
        assert s.rows_written == 4
        assert read_table(out).column("label").to_pylist() == ["007", "1e5", "", "x"]
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, model=tiny_model(), dtype=float, overwrite=True)
    assert str(e.value) == "unknown dtype='float64' - choose one of float32, float16 (float16 halves the file)"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, model=tiny_model(), keep={"label"}, overwrite=True)
    assert str(e.value) == ("keep={'label'} is a set, whose order is not the columns' order - give the names as a "
                            "list, e.g. keep=['label']")


def test_encoder_precision_none_is_the_default():
    """TextFeatures(precision=None) means the Encoder's default; Encoder(precision=None) said 'unknown precision'."""
    from bertfeat.model.encoder import Encoder

    enc = Encoder(tiny_model(), precision=None)
    assert (enc.precision, enc.requested_precision) == ("fp32", "fp32")


def test_numpy_scalars_are_taken_as_the_numbers_they_hold(tmp_path):
    """np.int64 from a grid or a DataFrame cell: chunk_rows, max_bad_rows and pca once refused it as out of range."""
    np = pytest.importorskip("numpy")
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"], ["c"], ["d"]])
    s = bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), cache=False, chunk_rows=np.int64(2),
                         max_bad_rows=np.int64(3), on_bad_row="skip", pca=np.int64(2), overwrite=np.bool_(False))
    assert s.rows_written == 4


#: every option declared a whole number (not a fraction too, as pca): a value in range
WHOLE = {"chunk_rows": 4, "max_length": 16, "max_batch_tokens": 64, "threads": 2, "truncate_dim": 8, "workers": 2,
         "stride": 4, "estimate": 4, "blocksize": 100_000, "max_bad_rows": 3, "max_field_bytes": 100_000}


def test_every_whole_number_option_is_listed_here():
    import typing

    hints = typing.get_type_hints(ExtractOptions)
    declared = {n for n in OPTIONS if "int" in str(hints[n]) and "float" not in str(hints[n])}
    assert declared == set(WHOLE)


@pytest.mark.parametrize("name", list(WHOLE))
def test_a_whole_number_option_takes_a_whole_float_and_refuses_another_alike(name):
    """chunk_rows=2.0 was refused ("is a float, not a whole number") where max_length=16.0 was taken (and passed on as
    16.0); truncate_dim, workers, stride, estimate, max_bad_rows and max_field_bytes refused a whole float too, while
    threads and max_batch_tokens took it; blocksize took 100000.5 as 100000, True as one byte and refused np.int64
    with "unexpected AttributeError"; stride=True was read as a stride of 1. Now every option declared a whole number
    takes 16.0 (NumPy's too) as 16, and refuses 16.5 and True with one message each."""
    from bertfeat.run.options import check_types

    np = pytest.importorskip("numpy")
    value = WHOLE[name]
    plain = check_types(ExtractOptions(input="x.csv", **{name: value}))
    for given in (float(value), np.float64(value), np.int64(value)):
        o = check_types(ExtractOptions(input="x.csv", **{name: given}))
        assert type(getattr(o, name)) is int and getattr(o, name) == value, given
        assert check(name, getattr(o, name)) == check(name, getattr(plain, name))
    none = ", or leave it out" if OPTIONS[name].default is None or name in ("stride", "blocksize") else ""
    string = {"max_bad_rows": " or a string such as '1%'", "max_field_bytes": " or a string such as '4MiB'",
              "blocksize": " or a string such as '8MiB'", "estimate": " or True"}.get(name, "")
    fix = f"give {name} as a whole number{string}{none}"
    with pytest.raises(BertfeatError) as e:
        check_types(ExtractOptions(input="x.csv", **{name: value + 0.5}))
    assert e.value.message == f"{name}={value + 0.5} is not a whole number - {fix}"
    if name != "estimate":  # (estimate=True: the default number of rows)
        with pytest.raises(BertfeatError) as e:
            check_types(ExtractOptions(input="x.csv", **{name: True}))
        assert e.value.message == f"{name}=True is a bool, not a whole number - {fix}"


def test_whole_floats_run_as_their_ints(tmp_path):
    """bertfeat.extract(chunk_rows=2.0, ...) runs as with 2 (it was refused), and max_length=16.0 writes the same
    provenance as 16 (it kept 16.0)."""
    from bertfeat.features import read_feature_metadata

    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence {i}"] for i in range(5)])
    kw = dict(model=tiny_model(), cache=False)
    a = bertfeat.extract(src, tmp_path / "a.parquet", chunk_rows=2.0, max_length=16.0, max_batch_tokens=64.0, **kw)
    b = bertfeat.extract(src, tmp_path / "b.parquet", chunk_rows=2, max_length=16, max_batch_tokens=64, **kw)
    assert a.rows_written == b.rows_written == 5
    meta = [read_feature_metadata(p) for p in (tmp_path / "a.parquet", tmp_path / "b.parquet")]
    assert meta[0]["fingerprint"] == meta[1]["fingerprint"]


def test_numpy_types_are_taken_as_the_dtype_they_name(tmp_path):
    """Found by the API audit: dtype=np.float16 (NumPy's own spelling, as in X.astype(np.float16)) was refused as
    `dtype=<class 'numpy.float16'> is a type, not a string - give dtype as a string`; it writes float16 now, as
    dtype="float16" does. A NumPy type bertfeat does not write is refused by its name (float: float64, as NumPy reads
    it); another type still as one."""
    import numpy as np

    from bertfeat.features import read_features

    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"]])
    named = bertfeat.extract(src, tmp_path / "named.npy", model=tiny_model(), cache=False, dtype="float16")
    for given in (np.float16, np.dtype("float16")):
        out = tmp_path / "np.npy"
        bertfeat.extract(src, out, model=tiny_model(), cache=False, dtype=given, overwrite=True)
        assert np.load(out).dtype == np.float16 and (np.load(out) == np.load(named.outputs["features"])).all()
        assert read_features(out)[2]["dtype"] == "float16"
    for given, message in ((np.float64, "unknown dtype='float64' - choose one of float32, float16"),
                           (float, "unknown dtype='float64' - choose one of float32, float16"),  # NumPy's meaning
                           (dict, "dtype=<class 'dict'> is a type, not a string - give dtype as a string")):
        with pytest.raises(BertfeatError, match=f"^{message}"):
            bertfeat.extract(src, tmp_path / "x.npy", model=tiny_model(), cache=False, dtype=given)
    assert not (tmp_path / "x.npy").exists()


@pytest.mark.parametrize("kw, message", [
    (dict(progress=5), "progress=5 has no start, advance, note, stop method - give an object with the methods of "
     "bertfeat.run.progress.NullProgress (start, advance, note, stop; parts for the Dask engine), or leave progress "
     "out"),
    (dict(quiet="no"), "quiet='no' is a str, not True or False - give quiet as True or False"),
    (dict(progress=False), "progress=False is a switch, and progress takes an object that shows progress - to hide "
     "the progress bar on stderr, pass quiet=True and leave progress out"),
    (dict(progress=True), "progress=True is a switch, and progress takes an object that shows progress - to show "
     "the progress bar on stderr, pass quiet=False and leave progress out"),
])
def test_a_wrong_progress_or_quiet_leaves_no_partial_run(tmp_path, kw, message):
    """progress=5 once failed after the partial directory was made, and the corrected run was refused as "a resumable
    partial run exists"."""
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"]])
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), cache=False, **kw)
    assert e.value.message == message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]
    assert bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), cache=False).rows_written == 2


def test_values_that_always_worked_still_do(tmp_path):
    """The type check refuses only what no option takes: layers as Encoder takes them (an int, a list, a slice), a
    switch as 1 / 0 or None, a Decimal fraction for pca; estimate=None is refused in words, not Python's TypeError."""
    from decimal import Decimal

    np = pytest.importorskip("numpy")
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence {i}"] for i in range(6)])
    out = tmp_path / "o.parquet"
    for kw in (dict(layers=[-1, -2]), dict(layers=-1), dict(layers=np.int64(-1)), dict(layers=slice(-2, None)),
               dict(resume=0, wide=None), dict(pca=Decimal("0.5")), dict(normalize=1)):
        s = bertfeat.extract(src, out, model=tiny_model(), cache=False, overwrite=1, **kw)
        assert s.rows_written == 6, kw
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, model=tiny_model(), cache=False, overwrite=True, estimate=None)
    assert e.value.message == ("estimate=None is not True, False or a number of rows - give estimate=True, or a number "
                               "of rows to measure on, e.g. estimate=500")


@pytest.mark.parametrize("value", [True, np.True_, np.bool_(False)])
def test_a_numpy_bool_pca_is_refused_as_a_bool(value):
    """pca=np.True_ (a grid's np.array([...]) element) was read as its text: "pca='True' is not a number"; it is
    refused as pca=True is, as no size."""
    from bertfeat.run.options import parse_pca

    with pytest.raises(BertfeatError) as e:
        parse_pca(value)
    assert e.value.message == (f"pca={bool(value)} is not a size - give a number of components (64) or a variance "
                               "fraction (0.95)")


def test_a_placeholder_is_spelled_as_each_caller_gives_options():
    """'add pca N' in a Python message named no parameter as Python writes it: pca=N there, --pca N on the CLI."""
    from bertfeat.cli.app import FLAGS
    from bertfeat.errors import opt_word, render

    said = f"add {opt_word('pca', 'N')} or {opt_word('prompt_name', 'NAME')}"
    assert (render(said), render(said, FLAGS)) == ("add pca=N or prompt_name=NAME", "add --pca N or --prompt-name NAME")


@pytest.mark.parametrize("argv, said", [
    (["--estimate", "--estimate-rows", "1"], "Error: --estimate-rows 1 is out of range - choose 2 or more (rows to "
     "measure on), or leave it out for the default sample\n"),
    (["--pooling", ""], "Error: --pooling names no pooling - give one such as --pooling mean, or leave it out for the "
     "model's own embedding\n"),
])
def test_a_fix_on_the_command_line_is_one_that_works_there(src, tmp_path, capsys, argv, said):
    """The CLI's fixes offered Python's values: '--estimate-rows ... or True for the default' (--estimate-rows True is
    no number) and '--pooling ... or None for the model's own embedding' (--pooling None is an unknown pooling). Each
    says what to do on the command line (errors.either); Python keeps its words."""
    rc, out, err = run(capsys, "extract", src, *argv, "-o", tmp_path / "o.parquet", "--model", tiny_model())
    assert (rc, out, err) == (1, "", said)

