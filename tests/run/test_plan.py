"""plan.make_plan: every extract option is checked once, so the local and the Dask engine accept the same settings
and refuse the same mistakes in the same words.

One table of option values, good and bad, runs through ``bertfeat.extract`` on both engines; each case must end the
same way: the same error text, or the same resolved settings (precision, pooling, max length, PCA components, ...)
and the same counts. (A resume refused after a change is the same on both engines too:
test_dask_engine.test_resume_refuses_changed_settings_like_the_local_engine.)
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import dask_local_client

pytest.importorskip("distributed")

import bertfeat  # noqa: E402
from bertfeat.errors import BertfeatError  # noqa: E402
from bertfeat.run.options import ExtractOptions  # noqa: E402
from bertfeat.run.plan import OutputLayout, make_plan  # noqa: E402
from extract_util import tiny_model, write_csv  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with dask_local_client(n_workers=1, threads_per_worker=1, processes=False) as c:
        yield c


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rows = [[f"sentence number {i} about a few things"] for i in range(12)]
    rows[5] = ["   "]  # a bad row: whitespace only
    return write_csv(tmp_path_factory.mktemp("in") / "c.csv", ["text"], rows)


CASES = [
    # accepted
    ("defaults, bad row skipped", dict(on_bad_row="skip")),
    ("max_length 16", dict(on_bad_row="skip", max_length=16)),
    ("max_batch_tokens 64", dict(on_bad_row="skip", max_batch_tokens=64)),
    ("encoder_options precision", dict(on_bad_row="skip", encoder_options={"precision": "fp32"})),
    ("encoder_options budget", dict(on_bad_row="skip", encoder_options={"max_batch_tokens": 64})),
    ("pca 4", dict(on_bad_row="skip", pca=4)),
    ("pca 0.9", dict(on_bad_row="skip", pca=0.9)),
    ("pca all", dict(on_bad_row="skip", pca="all")),
    ("pca 1.0", dict(on_bad_row="skip", pca=1.0)),
    ("pooling cls, normalized", dict(on_bad_row="skip", pooling="cls", normalize=True)),
    ("format parquet, wide", dict(on_bad_row="skip", format="parquet", wide=True)),
    ("chunk-mean", dict(on_bad_row="skip", long_text="chunk-mean", max_length=8, stride=2)),
    # refused
    ("on_bad_row error", dict()),
    ("on_bad_row unknown", dict(on_bad_row="maybe")),
    ("max_length 0", dict(max_length=0)),
    ("max_length 2", dict(max_length=2)),
    ("max_length over the model", dict(on_bad_row="skip", max_length=4096)),
    ("max_batch_tokens 0", dict(max_batch_tokens=0)),
    ("encoder_options against precision", dict(precision="int8", encoder_options={"precision": "bf16"})),
    ("encoder_options unknown key", dict(encoder_options={"batch": 3})),
    ("precision unknown", dict(precision="fp16")),
    ("pca 0", dict(pca=0)),
    ("pca True", dict(pca=True)),
    ("pca 1.5", dict(pca=1.5)),
    ("pca text", dict(pca="many")),
    ("pca over the width", dict(on_bad_row="skip", pca=64)),
    ("format unknown", dict(format="xlsx")),
    ("chunk_rows 0", dict(chunk_rows=0)),
    ("threads 0", dict(threads=0)),
    ("stride too large", dict(on_bad_row="skip", long_text="chunk-mean", max_length=8, stride=7)),
    ("prompt name unknown", dict(on_bad_row="skip", prompt_name="query")),
    ("text column missing", dict(text_column="body")),
]


def outcome(tmp_path, corpus, client, engine: str, kw: dict):
    """("error", message) or ("ok", the resolved settings and counts) of one run."""
    out = tmp_path / engine / "o.parquet"
    out.parent.mkdir()
    extra = dict(engine="dask", client=client, blocksize=None) if engine == "dask" else {}
    try:
        s = bertfeat.extract(corpus, out, model=tiny_model(), **kw, **extra)
    except BertfeatError as e:
        return "error", str(e)
    meta_path = out / "_bertfeat.json" if engine == "dask" else None
    meta = json.loads(meta_path.read_text()) if meta_path else json.loads(pq.read_schema(out).metadata[b"bertfeat"])
    keys = ("precision", "pooling", "max_length", "layers", "normalize", "long_text", "stride", "rows", "tokens")
    settings = {k: meta[k] for k in keys}
    settings["pca"] = None if meta["pca"] is None else meta["pca"]["n_components"]
    return "ok", {**settings, "written": s.rows_written, "rejected": s.rows_rejected, "dim": s.dim}


@pytest.mark.parametrize("name, kw", CASES, ids=[c[0] for c in CASES])
def test_both_engines_agree(tmp_path, corpus, client, name, kw):
    local = outcome(tmp_path, corpus, client, "local", kw)
    dask = outcome(tmp_path, corpus, client, "dask", kw)
    print(name, local)
    assert local == dask
    refused = name in {c[0] for c in CASES[CASES.index(("on_bad_row error", {})):]}
    assert (local[0] == "error") == refused, local


@pytest.mark.parametrize("model", [5, b"/models/x"])
def test_encoder_options_model_that_is_no_path_is_refused_by_name(tmp_path, corpus, model):
    """encoder_options={'model': 5} reached os.fspath: a TypeError ('expected str, bytes or os.PathLike object, not
    int'), where model=5 is refused by name (found by the API audit); bytes reached pathlib's TypeError."""
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(corpus, tmp_path / "o.parquet", encoder_options={"model": model})
    kind = "an int" if model == 5 else "a bytes"
    assert str(e.value) == (f"encoder_options['model']={model!r} is {kind}, not a string or a path - give model as a "
                            "string or a path")
    assert list(tmp_path.iterdir()) == []


def test_encoder_options_stand_in_for_a_default_parameter(tmp_path, corpus):
    """encoder_options={"precision": ...} was a raw TypeError on the local engine (issue 24): now it stands in for
    the parameter left at its default, and disagreeing with a given one is refused naming both."""
    plan = make_plan(ExtractOptions(input=corpus, output=tmp_path / "o.parquet", model=tiny_model(),
                                    encoder_options={"max_batch_tokens": 64}))
    o = plan.options
    assert (o.precision, o.max_batch_tokens, o.threads, o.max_length) == ("fp32", 64, None, None)
    assert o.encoder_options == {"max_batch_tokens": 64}  # as given, for the resume manifest
    with pytest.raises(BertfeatError) as e:
        make_plan(ExtractOptions(input=corpus, output=tmp_path / "o.parquet", max_batch_tokens=32,
                                 encoder_options={"max_batch_tokens": 64}))
    assert str(e.value) == "max_batch_tokens=32 and encoder_options['max_batch_tokens']=64 disagree - give max_batch_tokens once"


def test_every_output_name_comes_from_the_layout(tmp_path):
    lay = OutputLayout(tmp_path / "f.features.parquet", "parquet", want_pca=True)
    assert lay.rejects == tmp_path / "f.features.parquet.rejects.csv"
    assert lay.partial == tmp_path / "f.features.parquet.partial"
    assert lay.pca_model == tmp_path / "f.features.pca.npz"
    assert [p.name for _, p in lay.outputs()] == [
        "f.features.parquet", "f.features.parquet.rejects.csv", "f.features.pca.npz",
        "f.features.pca.report.json", "f.features.pca.report.md", "f.features.pca.report.png"]
    npy = OutputLayout(tmp_path / "f.npy", "npy")
    assert [label for label, _ in npy.outputs()] == ["output", "ids file", "provenance file", "rejects file"]


def test_the_plan_refuses_before_reading_or_writing(tmp_path):
    """Option errors come before the input is opened: a missing input file with a bad option names the option."""
    with pytest.raises(BertfeatError, match=r"^max_batch_tokens=0 is out of range"):
        make_plan(ExtractOptions(input=tmp_path / "missing.csv", max_batch_tokens=0))
    assert list(tmp_path.iterdir()) == []


def test_jsonl_ids_are_judged_the_same_on_both_engines(tmp_path, client):
    """The head's first usable id decides the id kind for every partition (a Dask partition of only string ids
    rejected the integers' rows, or failed the run); a first id that is neither (1.5) does not decide."""
    from extract_util import write_jsonl

    rows = [{"id": 0.5 if i == 0 else i, "text": f"sentence {i} with words"} for i in range(300)]
    rows += [{"id": f"s{i}", "text": f"other sentence {i}"} for i in range(300)]
    src = write_jsonl(tmp_path / "ids.jsonl", rows)
    a = bertfeat.extract(src, tmp_path / "l.parquet", model=tiny_model(), id_column="id", on_bad_row="skip")
    b = bertfeat.extract(src, tmp_path / "d.parquet", model=tiny_model(), id_column="id", on_bad_row="skip",
                         engine="dask", client=client, blocksize=4096)
    assert (a.rows_written, a.rows_rejected) == (b.rows_written, b.rows_rejected) == (299, 301)
    dask_ids = pq.read_table(tmp_path / "d.parquet").column("id")
    assert pq.read_schema(tmp_path / "l.parquet").field("id").type == dask_ids.type == "int64"
    assert dask_ids.to_pylist() == list(range(1, 300))


def test_a_failed_dask_run_leaves_nothing_behind_as_the_local_one(tmp_path, client):
    """A run refused after the partial directory exists (too few rows for the PCA) removes it, and the PCA files,
    on both engines: the identical rerun is not told to --resume a run that cannot finish. (Two rows, one of them
    rejected: one row alone is refused before anything is written, encoder_setup.pca_rows_refusal.)"""
    src = write_csv(tmp_path / "one.csv", ["text"], [["a single sentence"], [""]])
    for engine, extra in (("local", {}), ("dask", dict(client=client, blocksize=None))):
        out = tmp_path / engine / "o.parquet"
        with pytest.raises(BertfeatError, match="needs at least 2 feature rows"):
            bertfeat.extract(src, out, model=tiny_model(), pca=1, engine=engine, on_bad_row="skip", **extra)
        assert not out.parent.exists() or list(out.parent.iterdir()) == [], engine


def test_extract_refuses_in_memory_input_and_a_non_string_prompt_before_writing(tmp_path):
    """bertfeat.extract reads files: a list or DataFrame is refused saying where in-memory texts go; a prompt that is
    not a string is refused before the partial run is written (it once failed midway and blocked the corrected rerun
    with "a resumable partial run exists")."""
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"]])
    out = tmp_path / "o.parquet"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(["a", "b"], out)
    assert e.value.message == ("input is a list, not a file path - extract reads a file (CSV, TSV, Parquet, JSONL) or "
                               "'-' for standard input; for texts in memory use bertfeat.Encoder().encode(texts), or "
                               "bertfeat.sklearn.TextFeatures")
    for prompt in (3, b"q: "):
        with pytest.raises(BertfeatError, match=r"^prompt=.* is an? (int|bytes), not a string, or None - give prompt as a string"):
            bertfeat.extract(src, out, model=tiny_model(), prompt=prompt, cache=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]
    bertfeat.extract(src, out, model=tiny_model(), prompt="q: ", cache=False)
    assert pq.read_table(out).num_rows == 2


@pytest.mark.parametrize("given, message", [
    (dict(workers=2), "client and workers=2 exclude each other (the client's cluster runs the job; workers=2 would be "
                      "ignored) - give client alone, or leave client out to use workers=2"),
    (dict(scheduler="tcp://127.0.0.1:1"), "client and scheduler='tcp://127.0.0.1:1' exclude each other (the client's "
     "cluster runs the job; scheduler='tcp://127.0.0.1:1' would be ignored) - give client alone, or leave client out "
     "to use scheduler='tcp://127.0.0.1:1'"),
    (dict(workers=2, scheduler="tcp://127.0.0.1:1"), "client, scheduler='tcp://127.0.0.1:1' and workers=2 exclude each "
     "other (the client's cluster runs the job; scheduler='tcp://127.0.0.1:1' and workers=2 would be ignored) - give "
     "client alone"),
])
def test_a_client_with_the_options_that_make_one_is_refused(tmp_path, corpus, client, given, message):
    """client= with workers= or scheduler=: the client silently won (the run went to its cluster, the other options
    ignored). Refused, naming both, before anything is written."""
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(corpus, tmp_path / "o.parquet", model=tiny_model(), on_bad_row="skip", engine="dask",
                         client=client, **given)
    assert e.value.message == message
    assert list(tmp_path.iterdir()) == []
