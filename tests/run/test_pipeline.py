"""The local engine and the chunks it works on: the read-ahead thread, chunking, and the pieces --resume relies on."""

from __future__ import annotations

import threading
import time

import pyarrow.parquet as pq
import pytest

from bertfeat.run import local as pipeline
from bertfeat.model.encoder import Encoder
from bertfeat.errors import BertfeatError
from bertfeat.readers import RawBatch
from bertfeat.run.chunks import iter_chunks, validate_batch
from bertfeat.run.manifest import manifest_differences
from bertfeat.run.options import parse_pca
from bertfeat.run.plan import default_output
from extract_util import run, tiny_model, write_csv


def test_tokenization_runs_in_the_reader_thread_ahead_of_the_model(tmp_path, capsys, monkeypatch):
    """While the model works on chunk 0, the reader thread tokenizes the next chunks - and stops
    READ_AHEAD_CHUNKS + 1 chunks ahead (the queue is bounded, so memory is too)."""
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence {i}"] for i in range(40)])
    prepared, prep_threads, run_threads = [], set(), set()
    ahead = threading.Event()
    real_prepare, real_run = Encoder.prepare, Encoder.run

    def prepare(self, texts, pairs, spec):
        prep_threads.add(threading.current_thread().name)
        prepared.append(texts[0])
        if len(prepared) == pipeline.READ_AHEAD_CHUNKS + 2:
            ahead.set()
        return real_prepare(self, texts, pairs, spec)

    seen_at_first_run = []

    def run_model(self, prep, spec):
        run_threads.add(threading.current_thread().name)
        if not seen_at_first_run:
            ahead.wait(timeout=10)  # the model is "busy" on chunk 0 until the reader got ahead
            time.sleep(0.3)  # give it time to (wrongly) go further
            seen_at_first_run.append(len(prepared))
        return real_run(self, prep, spec)

    monkeypatch.setattr(Encoder, "prepare", prepare)
    monkeypatch.setattr(Encoder, "run", run_model)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--chunk-rows", 2, "-q")
    assert rc == 0, err
    assert prep_threads == {"bertfeat-reader"}
    assert run_threads == {threading.main_thread().name}
    # chunk 0 in the model, READ_AHEAD_CHUNKS in the queue, one more tokenized and waiting to be queued
    assert seen_at_first_run == [pipeline.READ_AHEAD_CHUNKS + 2]
    assert len(prepared) == 20 and prepared == [f"sentence {2 * k}" for k in range(20)]


def _raw(rows, pre=None):
    return RawBatch(list(rows), [f"t{r}".encode() for r in rows], None, [f"i{r}" for r in rows], pre or {})


class _FakeSource:
    def __init__(self, batches):
        self._b = batches

    def batches(self):
        yield from self._b


@pytest.mark.parametrize("sizes", [[1] * 10, [3, 7], [10], [4, 0, 6], [9, 1]])
@pytest.mark.parametrize("chunk_rows", [1, 3, 4, 10, 25])
def test_iter_chunks_cuts_exact_chunks_in_order(sizes, chunk_rows):
    batches, start = [], 0
    for n in sizes:
        batches.append(_raw(range(start, start + n), {r: "bad" for r in range(start, start + n) if r % 5 == 2}))
        start += n
    chunks = list(iter_chunks(_FakeSource(batches), chunk_rows))
    assert [i for i, _ in chunks] == list(range(len(chunks)))
    assert [len(c.rows) for _, c in chunks] == [min(chunk_rows, 10 - k) for k in range(0, 10, chunk_rows)]
    assert [r for _, c in chunks for r in c.rows] == list(range(10))
    assert [t for _, c in chunks for t in c.texts] == [f"t{r}".encode() for r in range(10)]
    assert [i for _, c in chunks for i in c.ids] == [f"i{r}" for r in range(10)]
    assert {r: v for _, c in chunks for r, v in c.pre_rejected.items()} == {2: "bad", 7: "bad"}
    for _, c in chunks:
        assert set(c.pre_rejected) <= set(c.rows)


def test_validate_batch_reasons_and_alignment():
    b = RawBatch([0, 1, 2, 3, 4, 5, 6, 7], [b"ok", b"", b"  \t", None, b"caf\xe9", 42, float("nan"), "fine"], None,
                 ["a", "b", "c", "d", "e", "f", "g", None], {})
    c = validate_batch(b, 3)
    assert (c.index, c.rows, c.texts, c.ids, c.n_read) == (3, [0], ["ok"], ["a"], 8)
    assert c.rejects == [
        {"row": 1, "id": "b", "reason": "empty text", "code": "empty"},
        {"row": 2, "id": "c", "reason": "whitespace-only text", "code": "whitespace"},
        {"row": 3, "id": "d", "reason": "null text", "code": "null"},
        {"row": 4, "id": "e", "reason": "invalid UTF-8 at byte 3 of the text", "code": "encoding"},
        {"row": 5, "id": "f", "reason": "non-string text (number 42)", "code": "not-string"},
        {"row": 6, "id": "g", "reason": "null text (NaN)", "code": "null"},
        {"row": 7, "id": None, "reason": "null id", "code": "null-id"},
    ]


def test_manifest_differences_in_words():
    base = {"pooling": "mean", "max_length": 256, "layers": [6],
            "input": {"path": "c.csv", "format": "csv", "files": [{"path": "/d/c.csv", "size": 10, "mtime_ns": 1}]}}
    assert manifest_differences(base, dict(base)) == []
    assert manifest_differences(base, {**base, "pooling": "cls", "max_length": 128}) == \
        ["pooling: 'mean' -> 'cls'", "max length: 256 -> 128"]
    grown = {**base, "input": {**base["input"], "files": [{"path": "/d/c.csv", "size": 12, "mtime_ns": 2}]}}
    assert manifest_differences(base, grown) == ["input file changed: /d/c.csv (size 10 -> 12 bytes)"]
    other = {**base, "input": {"path": "d.csv", "format": "csv", "files": []}}
    assert manifest_differences(base, other) == ["input: 'c.csv' -> 'd.csv'"]


@pytest.mark.parametrize("inp, fmt, out", [
    ("corpus.csv", "parquet", "corpus.features.parquet"),
    ("data/corpus.csv.gz", "npy", "data/corpus.features.npy"),
    ("data/corpus.csv.bz2", "parquet", "data/corpus.features.parquet"),
    ("data/corpus.jsonl.zst", "parquet", "data/corpus.features.parquet"),
    ("data/corpus.CSV.XZ", "parquet", "data/corpus.features.parquet"),  # (was corpus.CSV.XZ.features.parquet)
    ("data/corpus.v1.tsv.xz", "csv", "data/corpus.v1.features.csv"),
    ("data/", "parquet", "data.features.parquet"),
    ("data/part-*.parquet", "parquet", "data.features.parquet"),
    ("*.parquet", "csv", "dataset.features.csv"),
])
def test_default_output(inp, fmt, out):
    assert str(default_output(inp, fmt)) == out


def test_parse_pca():
    assert parse_pca("100") == 100 and parse_pca("0.95") == 0.95 and parse_pca(None) is None
    for bad in ("0", "1.5", "-3", "x"):
        with pytest.raises(BertfeatError):
            parse_pca(bad)


def test_public_extract_is_keyword_only_and_names_parameters(tmp_path):
    """bertfeat.extract(input, output, *, ...): options by keyword only; its errors name the parameters."""
    import inspect as _inspect

    import bertfeat

    sig = _inspect.signature(bertfeat.extract)
    assert [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD] == ["input", "output"]
    with pytest.raises(TypeError):
        bertfeat.extract("in.csv", "out.parquet", None)  # text_column etc. are keyword-only
    with pytest.raises(BertfeatError, match=r"chunk_rows=0"):
        bertfeat.extract("in.csv", chunk_rows=0)
    with pytest.raises(BertfeatError, match=r"engine='spark'"):
        bertfeat.extract("in.csv", engine="spark")
    with pytest.raises(BertfeatError, match=r"^scheduler needs engine='dask' - add engine='dask', or leave it out$"):
        bertfeat.extract("in.csv", scheduler="tcp://x:8786")


def test_public_extract_equals_cli(tmp_path, capsys):
    """bertfeat.extract(...) writes what `bertfeat extract` writes (same features, same PCA)."""
    import numpy as np
    import pyarrow.parquet as pq

    import bertfeat

    model = tiny_model()
    src = write_csv(tmp_path / "in.csv", ["text"], [[f"sentence number {i} about things"] for i in range(30)])
    a, b = tmp_path / "api.parquet", tmp_path / "cli.parquet"
    s = bertfeat.extract(src, a, model=model, pca=4)
    rc, _, err = run(capsys, "extract", src, "-o", b, "--model", model, "--pca", "4", "-q")
    assert rc == 0, err
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.schema.remove_metadata() == tb.schema.remove_metadata() and ta.num_rows == s.rows_written == 30
    ea = np.array(ta.column("embedding").to_pylist())
    assert ea.shape == (30, 4) and np.array_equal(ea, np.array(tb.column("embedding").to_pylist()))
    assert s.outputs["pca_model"] == a.with_name("api.pca.npz") and s.outputs["pca_model"].is_file()


def test_a_url_input_reads_through_fsspec_and_needs_an_output(tmp_path, capsys):
    """The reader layer opens every path with fsspec: file:///abs/path.csv gives the features of the plain path;
    a URL has no "beside the input", so it needs an output (Python: output, CLI: -o)."""
    import bertfeat
    from bertfeat.cli.app import main
    from bertfeat.errors import BertfeatError

    src = tmp_path / "a.csv"
    src.write_text("text\nhello world\na second row\n")
    a = bertfeat.extract(src, tmp_path / "plain.parquet")
    b = bertfeat.extract(f"file://{src}", tmp_path / "url.parquet")
    assert a.rows_written == b.rows_written == 2
    ta, tb = pq.read_table(tmp_path / "plain.parquet"), pq.read_table(tmp_path / "url.parquet")
    assert ta.column("embedding").equals(tb.column("embedding")) and ta.column("row").equals(tb.column("row"))
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(f"file://{src}")
    assert e.value.message.startswith("a URL input needs output=OUTPUT - give the output path")
    assert main(["extract", f"file://{src}"]) == 1
    assert capsys.readouterr().err.startswith("Error: a URL input needs -o OUTPUT - give the output path")

# --------------------------------------------------------------------------- options named for the caller (issue 16)
_SKIP = "to write it to the rejects file and go on"
_MAX_BATCH = "choose 1 or more (tokens per batch, padded rows x length; default 512), or leave it out for the default"
_PCA_FIX = "give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's choice), or 1.0 / all for every component"
NAMED_OPTIONS = [  # (id, extract keywords, the same on the command line, the Python message, the CLI's stderr line)
    ("bad-row", {}, [], f"{{src}} row 2: empty text - fix the row, or pass on_bad_row='skip' {_SKIP}",
     f"{{src}} row 2: empty text - fix the row, or pass --on-bad-row skip {_SKIP}"),
    ("long-row", {"long_text": "error"}, ["--long-text", "error"],
     "{src} row 1: 202 tokens, more than max length 128 (long_text='error') - use long_text='truncate'/chunk-mean/chunk-max "
     "or a larger max_length, or on_bad_row='skip'",
     "{src} row 1: 202 tokens, more than max length 128 (--long-text error) - use --long-text truncate/chunk-mean/chunk-max "
     "or a larger --max-length, or --on-bad-row skip"),
    ("wide-npy", {"format": "npy", "wide": True}, ["--format", "npy", "--wide"],
     "wide=True applies to Parquet output, not npy - drop wide, or use format='parquet'",
     "--wide applies to Parquet output, not npy - drop --wide, or use --format parquet"),
    ("max-batch-tokens", {"max_batch_tokens": 0}, ["--max-batch-tokens", "0"],
     f"max_batch_tokens=0 is out of range - {_MAX_BATCH}", f"--max-batch-tokens 0 is out of range - {_MAX_BATCH}"),
    ("pca-word", {"pca": "abc"}, ["--pca", "abc"], f"pca='abc' is not a number - {_PCA_FIX}", f"--pca 'abc' is not a number - {_PCA_FIX}"),
    ("pca-negative", {"pca": -0.5}, ["--pca", "-0.5"], f"pca=-0.5 is out of range - {_PCA_FIX}", f"--pca -0.5 is out of range - {_PCA_FIX}"),
    ("pca-too-wide", {"pca": 1000}, ["--pca", "1000"],
     "pca=1000 is more components than the 32 feature dimensions - choose pca=32 or fewer, or a variance fraction such as 0.95",
     "--pca 1000 is more components than the 32 feature dimensions - choose --pca 32 or fewer, or a variance fraction such as 0.95"),
    ("layers", {"layers": "x"}, ["--layers", "x"],
     "layers='x' is not understood - give layer numbers like -1, -4,-3,-2,-1 or -4: (0 = embeddings)",
     "--layers 'x' is not understood - give layer numbers like -1, -4,-3,-2,-1 or -4: (0 = embeddings)"),
    ("label-no-pca", {"label": "label"}, ["--label", "label"],
     "label adds a linear probe to the report of the PCA this run fits - add pca=N",
     "--label adds a linear probe to the report of the PCA this run fits - add --pca N"),
    ("output-exists", {}, [], "{out} already exists - pass overwrite=True to replace it, or output with another name",
     "{out} already exists - pass --overwrite to replace it, or -o with another name"),
]


@pytest.mark.parametrize("kwargs,args,python,cli", [c[1:] for c in NAMED_OPTIONS], ids=[c[0] for c in NAMED_OPTIONS])
def test_extract_errors_name_the_parameter_and_the_cli_the_flag(tmp_path, capsys, kwargs, args, python, cli):
    """One failure, two spellings: bertfeat.extract(...) names the Python parameter (on_bad_row='skip'),
    `bertfeat extract` the flag (--on-bad-row skip), in otherwise the same words; nothing is written."""
    import bertfeat

    src = write_csv(tmp_path / "c.csv", ["text"], [["ok"], ["word " * 200 if "long_text" in kwargs else "fine"], [""]])
    out = tmp_path / "o.parquet"
    if "{out}" in python:
        out.write_bytes(b"an earlier run")
    before = sorted(tmp_path.iterdir())
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, model=tiny_model(), **kwargs)
    assert e.value.message == str(e.value) == python.format(src=src, out=out)
    assert sorted(tmp_path.iterdir()) == before
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q", *args)
    assert (rc, stdout, err) == (1, "", f"Error: {cli.format(src=src, out=out)}\n")
    assert sorted(tmp_path.iterdir()) == before


def test_standard_input_errors_name_the_parameter_and_the_cli_the_flag(capsys):
    import bertfeat

    with pytest.raises(BertfeatError) as e:
        bertfeat.extract("-", resume=True)
    assert e.value.message == "resume=True cannot continue a run that read standard input - write the input to a file first"
    assert run(capsys, "extract", "-", "--resume") == (
        1, "", "Error: --resume cannot continue a run that read standard input - write the input to a file first\n")
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract("-")
    assert e.value.message == "reading standard input needs output='OUTPUT' - add output='features.parquet'"
    assert run(capsys, "extract", "-") == (1, "", "Error: reading standard input needs -o OUTPUT - add -o features.parquet\n")


def test_public_extract_quiet_choice(tmp_path, capsys):
    """bertfeat.extract(..., quiet=False) shows the CLI's progress on stderr (log lines when stderr is not a
    terminal); the default, quiet=True, shows none (docs/python.md)."""
    import bertfeat

    src = write_csv(tmp_path / "in.csv", ["text"], [[f"sentence {i}"] for i in range(20)])
    capsys.readouterr()
    bertfeat.extract(src, tmp_path / "a.parquet", model=tiny_model())
    assert capsys.readouterr().err == ""
    bertfeat.extract(src, tmp_path / "b.parquet", model=tiny_model(), quiet=False)
    err = capsys.readouterr().err
    assert err.startswith("bertfeat extract: started (20 rows)\n") and "20 rows (100.0%)" in err, err
