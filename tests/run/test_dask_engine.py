"""`bertfeat extract --engine dask` on a LocalCluster of 2 worker processes (loopback only).

One cluster for the module; the real all-MiniLM-L6-v2; a few hundred real sentences in 4
partitions. The Dask output must equal the local engine's row for row, the PCA must equal the
local PCA, a worker killed mid-run must not lose or duplicate a row, and --resume must recompute
only the partitions that are missing.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import dask_local_client, need  # noqa: E402

need("distributed", 'pip install -e ".[dask]"')

from bertfeat.cli.app import main  # noqa: E402
import bertfeat  # noqa: E402
from bertfeat.run.dask import require_dask  # noqa: E402
from bertfeat.errors import BertfeatError, BertfeatWarning, ResumeError  # noqa: E402
from bertfeat.run.plan import DaskSettings  # noqa: E402
from bertfeat.run.progress import NullProgress  # noqa: E402
from bertfeat.readers.rejects import TooManyBadRows  # noqa: E402

N_ROWS = 200
N_PARTS = 4
TOL = 1e-6


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def client():
    with dask_local_client(n_workers=2, threads_per_worker=1, processes=True) as c:
        yield c


@pytest.fixture(scope="module")
def data(tmp_path_factory, real_sentences) -> Path:
    """A Parquet dataset: 4 files of 50 real sentences (one partition each)."""
    d = tmp_path_factory.mktemp("data") / "corpus"
    d.mkdir()
    texts = real_sentences[:N_ROWS]
    per = N_ROWS // N_PARTS
    for k in range(N_PARTS):
        pq.write_table(pa.table({"text": texts[k * per:(k + 1) * per]}), d / f"part{k}.parquet")
    return d


# The local reference cuts chunks of the partitions' 50 rows, so that every row meets the same batch
# neighbours (padding to another length moves a feature by up to ~1e-6) and the PCA sees the same
# features to the bit. test_csv_... covers chunks that do not line up with the partitions.
LOCAL = dict(chunk_rows=N_ROWS // N_PARTS)


@pytest.fixture(scope="module")
def local_out(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("local") / "features.parquet"
    extract(dict(input=str(data), output=str(out), **LOCAL))
    return out


def _opts(data, out, **kw) -> dict:
    return dict(input=str(data), output=str(out), **kw)


def extract(opts: dict, progress=None):
    """The local engine, through the public API."""
    return bertfeat.extract(**opts, progress=progress)


def extract_dask(opts: dict, blocksize="8MiB", progress=None, client=None):
    """The Dask engine, through the public API."""
    return bertfeat.extract(**opts, engine="dask", blocksize=blocksize, progress=progress, client=client)


def _embeddings(t: pa.Table) -> np.ndarray:
    col = t.column("embedding").combine_chunks()
    return col.values.to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)


def _read_dataset(out: Path) -> pa.Table:
    """The part files in partition order, concatenated (rows stay in input order)."""
    parts = sorted(out.glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in parts])


def _meta(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[b"bertfeat"])


def _wait_idle(client, timeout=60.0):
    """Until no worker runs a task (cancelled tasks run to their end)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        busy = client.run(lambda dask_worker: len(dask_worker.state.executing))
        if not any(busy.values()):
            return
        time.sleep(0.1)
    raise AssertionError("workers still busy")


def _assert_same_features(dask_out: Path, local_out: Path, id_name="row"):
    a = pq.read_table(local_out)
    b = _read_dataset(dask_out)
    assert b.column_names == a.column_names
    assert b.schema == a.schema.remove_metadata()
    assert b.column(id_name).to_pylist() == a.column(id_name).to_pylist()  # row for row, in input order
    for c in ("n_tokens", "truncated", "n_chunks"):
        assert b.column(c).to_pylist() == a.column(c).to_pylist()
    assert np.abs(_embeddings(a) - _embeddings(b)).max() <= TOL


# --------------------------------------------------------------------------- equality with the local engine
class _Parts(NullProgress):
    """Records the engine's parts(done, in_flight, total) reports."""

    def __init__(self):
        self.calls = []

    def parts(self, done, in_flight, total):
        self.calls.append((done, in_flight, total))


def test_parquet_features_equal_local(client, data, local_out, tmp_path):
    out = tmp_path / "dask.features.parquet"
    rec = _Parts()
    s = extract_dask(_opts(data, out), None, rec, client=client)
    # progress: parts done and in flight, from none done to all done with nothing in flight
    assert [d for d, _, _ in rec.calls] == list(range(N_PARTS + 1)) and {t for _, _, t in rec.calls} == {N_PARTS}
    assert rec.calls[-1] == (N_PARTS, 0, N_PARTS)
    assert all(0 <= r <= N_PARTS - d for d, r, _ in rec.calls), rec.calls
    assert max(r for _, r, _ in rec.calls) >= 1
    parts = sorted(p.name for p in out.iterdir())
    assert parts == ["_bertfeat.json"] + [f"part-{i:05d}.parquet" for i in range(N_PARTS)]
    _assert_same_features(out, local_out)
    # pyarrow reads the directory as one dataset (side files start with "_")
    assert pq.read_table(out).num_rows == N_ROWS
    # the same provenance as the local output, per part, plus where the part sits in the input
    lm = _meta(local_out)
    for i in range(N_PARTS):
        pm = _meta(out / f"part-{i:05d}.parquet")
        for k in ("bertfeat_version", "model", "weights_sha256", "fingerprint", "pooling", "layers", "normalize",
                  "max_length", "input", "input_format", "text_column", "pca"):
            assert pm[k] == lm[k], k
        assert pm["engine"] == "dask"
        assert pm["part"]["index"] == i and pm["part"]["first_row"] == i * N_ROWS // N_PARTS
        assert pm["rows"]["written"] == N_ROWS // N_PARTS
    run = json.loads((out / "_bertfeat.json").read_text())
    assert run["rows"] == lm["rows"] and run["tokens"] == lm["tokens"]
    assert (s.rows_read, s.rows_written, s.rows_rejected, s.tokens) == (N_ROWS, N_ROWS, 0, lm["tokens"]["total"])
    assert not out.with_name(out.name + ".partial").exists()


def test_csv_blocks_with_bad_rows_equal_local(client, real_sentences, tmp_path):
    """Byte-range partitions of a CSV (a row-count pass, then encode) with bad rows under --on-bad-row skip."""
    texts = real_sentences[200:320]
    lines = [b"id,text"]
    for i, t in enumerate(texts):
        if i == 7:
            lines.append(b"r7,")  # empty text
        elif i == 40:
            lines.append(b'r40,"caf\xe9 au lait"')  # invalid UTF-8
        elif i == 77:
            lines.append(b"r77,one,two")  # malformed line
        else:
            lines.append(f"r{i},".encode() + ('"' + t.replace('"', '""') + '"').encode())
    src = tmp_path / "in.csv"
    src.write_bytes(b"\n".join(lines) + b"\n")
    kw = dict(id_column="id", on_bad_row="skip")
    local = tmp_path / "local.parquet"
    extract(dict(input=str(src), output=str(local), **kw))  # chunks differ from the blocks
    out = tmp_path / "dask.parquet"
    s = extract_dask(dict(input=str(src), output=str(out), **kw), 1024, client=client)
    assert len(list(out.glob("part-*.parquet"))) >= 4
    _assert_same_features(out, local, id_name="id")
    rej = out.with_name(out.name + ".rejects.csv")
    assert rej.read_text() == local.with_name(local.name + ".rejects.csv").read_text()
    assert [r["row"] for r in csv.DictReader(rej.open())] == ["7", "40", "77"]
    assert s.rows_rejected == 3 and s.rows_read == len(texts)

    # max_bad_rows: 3 bad rows pass a limit of 3 (the same files as under skip) and fail one of 2 (nothing written)
    s = extract_dask(dict(input=str(src), output=str(tmp_path / "lim3.parquet"), id_column="id", max_bad_rows=3), 1024,
                     client=client)
    assert s.rows_rejected == 3
    _assert_same_features(tmp_path / "lim3.parquet", local, id_name="id")
    for limit in (2, "2%"):  # 3 of 120 rows is 2.5 %
        out = tmp_path / "lim2.parquet"
        with pytest.raises(TooManyBadRows) as e:
            extract_dask(dict(input=str(src), output=str(out), id_column="id", max_bad_rows=limit), 1024, client=client)
        assert e.value.exit_code == 3
        assert "row 7: empty text" in str(e.value) and f"more than max_bad_rows={limit!r} allows" in str(e.value)
        assert re.search(rf"\(the [1-9]\d* finished partition\(s\) are kept in {re.escape(str(out))}\.partial\)", str(e.value))
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lim2")) == ["lim2.parquet.partial"]
        s = extract_dask(dict(input=str(src), output=str(out), id_column="id", max_bad_rows=3, resume=True), 1024,
                         client=client)  # a higher limit resumes and writes the output
        assert s.rows_rejected == 3
        _assert_same_features(out, local, id_name="id")
        shutil.rmtree(out)
        out.with_name(out.name + ".rejects.csv").unlink()


def _bad_rows_input(fmt: str, d: Path) -> Path:
    """300 rows with bad rows of the format's kinds (and a repeated text), an id and a kept column."""
    if fmt == "csv":
        lines = [b"id,text,lab"]
        for i in range(300):
            lines.append(f"r{i},,{i}".encode() if i % 37 == 5 else f'r{i},"   ",{i}'.encode() if i % 41 == 6 else
                         f"r{i},a,b,c".encode() if i % 43 == 7 else f'r{i},"caf\xe9",{i}'.encode("latin-1") if i % 47 == 8
                         else b"id,text,lab" if i == 150 else f"r{i},same text,{i}".encode() if i % 53 == 9 else
                         f"r{i},sentence number {i} with words,{i}".encode())
        (d / "in.csv").write_bytes(b"\n".join(lines) + b"\n")
        return d / "in.csv"
    if fmt == "jsonl":
        rows = ['{"id": "r%d", "text": ""}' % i if i % 37 == 5 else "{not json" if i % 41 == 6 else "[1, 2]" if i % 43 == 7
                else '{"id": "r%d"}' % i if i % 47 == 8 else '{"id": null, "text": "x"}' if i % 53 == 9 else
                json.dumps({"id": f"r{i}", "text": f"sentence {i} words", "lab": i}) for i in range(300)]
        (d / "in.jsonl").write_text("\n".join(rows) + "\n")
        return d / "in.jsonl"
    (d / "pq").mkdir()
    for k in range(3):
        texts = [None if i % 13 == 3 else "" if i % 17 == 4 else "  " if i % 19 == 5 else f"s {k} {i % 30}" for i in range(100)]
        pq.write_table(pa.table({"id": [f"r{k}_{i}" for i in range(100)], "text": texts, "lab": list(range(100))}),
                       d / "pq" / f"p{k}.parquet")
    return d / "pq"


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_bad_rows_give_the_local_engines_rejects_and_counts(client, tmp_path, capsys, fmt):
    """The same input with bad rows of every format under --on-bad-row skip (and --keep): the Dask run's rejects file
    is the local run's byte for byte, and its closing summary and --summary-json counts are the local run's (rows read,
    rejected, written, truncated, tokens ...), though its partitions are cut otherwise than the local chunks. Rows
    encoded / reused only add up alike: two partitions meeting a repeated text at once may both encode it
    (docs/cache.md, "Limits")."""
    from extract_util import tiny_model

    src = _bad_rows_input(fmt, tmp_path)
    common = ["extract", str(src), "--model", str(tiny_model()), "--id-column", "id", "--on-bad-row", "skip", "--keep",
              "lab"]
    got = {}
    for engine, flags in (("local", ["--chunk-rows", "16"]),
                          ("dask", ["--engine", "dask", "--scheduler", client.scheduler.address, "--blocksize", "1KiB"])):
        out = tmp_path / f"{engine}.parquet"
        rc = main(common + ["-o", str(out), "--summary-json", str(tmp_path / f"{engine}.json"), *flags])
        err = capsys.readouterr().err
        assert rc == 0, err
        counts = json.loads((tmp_path / f"{engine}.json").read_text())
        reuse = ("rows encoded", "rows reused", "rows_encoded", "rows_reused", "tokens_encoded")
        got[engine] = ((tmp_path / f"{engine}.parquet.rejects.csv").read_bytes(),
                       [line for line in err.splitlines() if line.startswith(("rows ", "tokens ")) and
                        not line.startswith(reuse)],
                       {k: v for k, v in counts.items() if k.startswith(("rows_", "tokens")) and
                        not k.endswith("_per_s") and k not in reuse},
                       counts["ids_repeated"], counts["rows_encoded"] + counts["rows_reused"])
    assert got["dask"] == got["local"]
    rejects, lines, counts, _, _ = got["local"]
    assert counts["rows_rejected"] == len(rejects.splitlines()) - 1 > 20 and counts["rows_read"] == 300
    assert len(lines) == 6 and counts["rows_written"] == 300 - counts["rows_rejected"]


def test_resume_on_the_other_engine_is_refused_and_keeps_the_partial_run(client, real_sentences, tmp_path):
    """A partial run (here: kept after --max-bad-rows stopped it) resumed with the other engine was deleted and every
    row encoded again without a word; it is refused naming the engine, and the same engine still resumes it."""
    lines = [b"id,text"] + [f"r{i},".encode() + ('"' + t.replace('"', '""') + '"').encode()
                            for i, t in enumerate(real_sentences[:80])] + [b"bad,"] * 3
    src = tmp_path / "in.csv"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "o.parquet"
    partial = out.with_name(out.name + ".partial")
    opts = dict(input=str(src), output=str(out), id_column="id", max_bad_rows=2)
    runs = {"local": lambda **kw: extract(dict(opts, chunk_rows=20, **kw)),
            "dask": lambda **kw: extract_dask(dict(opts, **kw), 1024, client=client)}
    for started, other in (("local", "dask"), ("dask", "local")):
        with pytest.raises(TooManyBadRows):
            runs[started]()
        _wait_idle(client)  # cancelled tasks run to their end (their temporaries come and go)
        kept = sorted(p.name for p in partial.iterdir() if not p.name.startswith("."))
        with pytest.raises(BertfeatError, match=f"a resumable partial run exists in {partial}"):
            runs[other](max_bad_rows=3)  # neither resume nor overwrite: refused (a local run deleted a Dask one's)
        with pytest.raises(ResumeError) as e:
            runs[other](resume=True, max_bad_rows=3)
        assert str(e.value) == (f"cannot resume: the partial run in {partial} was started by the {started} engine, and "
                                f"this run uses the {other} engine (each keeps its own parts) - rerun with "
                                f"engine='{started}' resume=True to continue it, or with overwrite=True instead of "
                                "resume=True to start over")
        assert sorted(p.name for p in partial.iterdir() if not p.name.startswith(".")) == kept  # nothing deleted
        s = runs[started](resume=True, max_bad_rows=3)
        assert s.rows_written == 80 and s.rows_rejected == 3 and not partial.exists()
        shutil.rmtree(out) if out.is_dir() else out.unlink()
        out.with_name(out.name + ".rejects.csv").unlink()


# --------------------------------------------------------------------------- PCA
def test_label_probe_equals_local(client, tmp_path, real_sentences):
    """extract --pca --label: the label is kept and the PCA report gets its linear probe, the same on both engines,
    and the same as bertfeat.pca.probe computes from the written output."""
    from bertfeat.pca.estimator import PCA
    from bertfeat.pca.probe import probe_file

    texts = real_sentences[:N_ROWS]
    median = np.median([len(t) for t in texts])
    d = tmp_path / "corpus"
    d.mkdir()
    per = N_ROWS // N_PARTS
    for k in range(N_PARTS):
        chunk = texts[k * per:(k + 1) * per]
        labels = ["long" if len(t) > median else "short" for t in chunk]
        pq.write_table(pa.table({"text": chunk, "label": labels}), d / f"part{k}.parquet")
    local = tmp_path / "local" / "f.parquet"
    s1 = extract(_opts(d, local, pca="8", label="label", **LOCAL))
    out = tmp_path / "dask" / "f.parquet"
    s2 = extract_dask(_opts(d, out, pca="8", label="label"), None, client=client)
    a = json.loads(local.with_name("f.pca.report.json").read_text())["probe"]
    b = json.loads(out.with_name("f.pca.report.json").read_text())["probe"]
    assert s1.probe == a and s2.probe == b
    print("local", a["accuracy"], "\ndask ", b["accuracy"])
    assert a["rows"] == b["rows"] == N_ROWS and a["input"] == b["input"] == "components"
    assert [r["accuracy"] for r in a["accuracy"]] == [r["accuracy"] for r in b["accuracy"]]
    assert a["accuracy"][-1]["accuracy"] > a["majority_baseline"]  # text length is in the features
    assert pq.read_table(local).column("label").to_pylist() == _read_dataset(out).column("label").to_pylist()
    assert probe_file(PCA.load(out.with_name("f.pca.npz")), out, "label")["accuracy"] == b["accuracy"]
    assert "## Linear probe: label" in out.with_name("f.pca.report.md").read_text()


def test_pca_equals_local(client, data, tmp_path):
    from bertfeat.pca.estimator import PCA

    local = tmp_path / "local" / "f.parquet"
    extract(_opts(data, local, pca="8", **LOCAL))
    out = tmp_path / "dask" / "f.parquet"
    s = extract_dask(_opts(data, out, pca="8"), None, client=client)
    lp, dp = PCA.load(local.with_name("f.pca.npz")), PCA.load(out.with_name("f.pca.npz"))
    assert dp.n_components_ == lp.n_components_ == 8
    np.testing.assert_allclose(dp.components_, lp.components_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(dp.explained_variance_, lp.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(dp.mean_, lp.mean_, atol=1e-8, rtol=0)
    # reduced features, the report beside the output, no full-width leftovers
    a, b = pq.read_table(local), _read_dataset(out)
    assert b.schema == a.schema.remove_metadata() and b.column("row").to_pylist() == list(range(N_ROWS))
    assert np.abs(_embeddings(a) - _embeddings(b)).max() <= TOL
    for suffix in (".pca.report.json", ".pca.report.md", ".pca.report.png"):
        assert out.with_name("f" + suffix).is_file()
    assert _meta(out / "part-00000.parquet")["pca"]["n_components"] == 8
    assert not (out / "_full").exists()
    assert s.outputs["pca_model"] == out.with_name("f.pca.npz")


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_pca_model_replaced_during_the_run(client, data, tmp_path, monkeypatch, engine):
    """--pca-model replaced while a run goes on (a pipeline refitting its training PCA): the Dask engine reduced with
    the new file, never checked against these features (another width: 4 features where the provenance said 8), and
    both engines recorded the new file's sha256 beside the loaded model's counts, so verify called the output changed.
    The local engine reduces with the model it loaded and records that one's sha256; the Dask engine, which ships the
    file to its workers, refuses, keeping the finished parts for a resume."""
    import bertfeat.run.dask as dask_run
    import bertfeat.run.local as local_run
    from bertfeat.errors import ResumableError
    from bertfeat.pca.estimator import PCA
    from bertfeat.pca.reduce import file_sha256

    extract(_opts(data, tmp_path / "a" / "a.parquet", pca="8", **LOCAL))
    extract(_opts(data, tmp_path / "c" / "c.parquet", pca="4", max_length=16, **LOCAL))
    model = tmp_path / "model.npz"
    shutil.copyfile(tmp_path / "a" / "a.pca.npz", model)
    sha = file_sha256(model)
    module = local_run if engine == "local" else dask_run
    loaded = module.applied_pca

    def then_replaced(*args):
        pca = loaded(*args)
        shutil.copyfile(tmp_path / "c" / "c.pca.npz", model)  # after the load and the checks
        return pca

    monkeypatch.setattr(module, "applied_pca", then_replaced)
    out = tmp_path / "o.parquet"
    if engine == "local":
        extract(_opts(data, out, pca_model=str(model), **LOCAL))
        assert json.loads(pq.read_schema(out).metadata[b"bertfeat"])["pca"]["model_sha256"] == sha
        want = PCA.load(tmp_path / "a" / "a.pca.npz").transform(_embeddings(pq.read_table(local_out_of(data, tmp_path))))
        assert np.abs(_embeddings(pq.read_table(out)) - want).max() <= 1e-5
        return
    with pytest.raises(ResumableError) as e:
        extract_dask(_opts(data, out, pca_model=str(model)), None, client=client)
    assert e.value.message.startswith(f"the PCA model {model} changed during the run (it is not the one loaded and "
                                      "checked against these features at the start) - put the model the run started "
                                      "with back; then ")
    assert not out.exists() and (tmp_path / "o.parquet.partial").is_dir()


def local_out_of(data, tmp_path) -> Path:
    out = tmp_path / "full" / "f.parquet"
    extract(_opts(data, out, **LOCAL))
    return out


class TestProvenanceFromThePartsAlone:
    """A Dask output without its _bertfeat.json has its provenance made from its parts (features.reader). Under
    --pca the parts were written before the model's sha256 was known, so that provenance lacked pca.model_sha256:
    verify then took any file at the model's name (a replaced model) for the one that reduced the features. The
    parts now carry the whole "pca" entry of _bertfeat.json, the fitted model's sha256 included (the model file is
    published as the bytes the parts were reduced with), with --pca and with --pca-model."""

    @pytest.mark.parametrize("how", ["pca", "pca_model"])
    def test_the_pca_entry_is_the_runs(self, client, data, tmp_path, how):
        from bertfeat.features.reader import read_feature_metadata
        from bertfeat.pca.reduce import file_sha256

        out = tmp_path / "f.parquet"
        if how == "pca_model":
            extract(_opts(data, tmp_path / "fit" / "g.parquet", pca="3", **LOCAL))
            model = tmp_path / "fit" / "g.pca.npz"
            extract_dask(_opts(data, out, pca_model=str(model)), None, client=client)
        else:
            extract_dask(_opts(data, out, pca="3"), None, client=client)
            model = tmp_path / "f.pca.npz"
        whole = json.loads((out / "_bertfeat.json").read_text())["pca"]
        assert whole["model_sha256"] == file_sha256(model)
        for i in range(N_PARTS):
            assert _meta(out / f"part-{i:05d}.parquet")["pca"] == whole
        (out / "_bertfeat.json").unlink()
        assert read_feature_metadata(out)["pca"] == whole

    def test_verify_refuses_a_replaced_model(self, client, data, tmp_path, capsys):
        from bertfeat.pca.reduce import file_sha256

        out = tmp_path / "f.parquet"
        extract_dask(_opts(data, out, pca="3"), None, client=client)
        (out / "_bertfeat.json").unlink()
        model = tmp_path / "f.pca.npz"
        sha = file_sha256(model)
        extract(_opts(data, tmp_path / "other.parquet", pca="3", max_length=8))  # another model under its name
        (tmp_path / "other.pca.npz").replace(model)
        capsys.readouterr()
        assert main(["verify", str(out), "--sample", "2"]) == 1
        assert capsys.readouterr().err == (f"Error: {model} is not the PCA model that reduced the features of {out} "
                                           f"(its sha256 {file_sha256(model)[:12]}, theirs {sha[:12]}) - put the model "
                                           "file back beside the features\n")


# --------------------------------------------------------------------------- faults
class _KillBusyWorkerAfterFirst(NullProgress):
    """As soon as one partition is encoded, SIGKILL the process of a worker that is encoding another."""

    def __init__(self, client):
        self.client, self.killed = client, None

    def advance(self, rows, tokens, bytes_read):
        if not tokens or self.killed:
            return
        busy = self.client.run(lambda dask_worker: (len(dask_worker.state.executing), os.getpid()))
        for addr, (n, pid) in busy.items():
            if n:
                os.kill(pid, signal.SIGKILL)
                self.killed = addr
                return


def test_overwrite_killed_while_the_old_output_is_deleted_leaves_the_new_one_whole(tmp_path, monkeypatch):
    """The last step of an --overwrite run (dask_engine._finish): killed (SIGKILL, the OOM killer) while the old
    OUTPUT/ is being deleted, OUTPUT/ is the new run's whole. Before, the old directory was deleted in place first:
    a kill left some of its parts beside its _bertfeat.json, a directory that reads as complete with rows missing."""
    from bertfeat.run import dask as dask_engine
    from bertfeat.features.reader import DIRECTORY_PROVENANCE

    out, partial = tmp_path / "o", tmp_path / "o.partial"
    out.mkdir()
    for i in range(6):
        (out / f"part-{i:05d}.parquet").write_text(f"old {i}")
    (out / DIRECTORY_PROVENANCE).write_text("{}")
    partial.mkdir()
    for i in range(4):
        (partial / f"part-{i:05d}.parquet").write_text(f"new {i}")
    real = shutil.rmtree

    def killed_halfway(path, *a, **k):
        if Path(path).name.startswith(".") and Path(path).parent == partial:  # the partial's own hidden files
            return real(path, *a, **k)
        for p in sorted(Path(path).iterdir())[:3]:
            p.unlink()
        raise SystemExit("killed")

    monkeypatch.setattr(shutil, "rmtree", killed_halfway)
    with pytest.raises(SystemExit):
        dask_engine._finish(partial, out, {"rows": {"written": 4}})
    monkeypatch.setattr(shutil, "rmtree", real)
    assert sorted(p.name for p in out.iterdir()) == [DIRECTORY_PROVENANCE] + [f"part-{i:05d}.parquet" for i in range(4)]
    assert [(out / f"part-{i:05d}.parquet").read_text() for i in range(4)] == [f"new {i}" for i in range(4)]
    assert json.loads((out / DIRECTORY_PROVENANCE).read_text()) == {"rows": {"written": 4}}


def test_worker_killed_mid_run(client, real_sentences, tmp_path):
    """A worker process killed while it encodes a partition: the run finishes, every row exactly once."""
    src = tmp_path / "one.parquet"
    texts = real_sentences[:400]
    pq.write_table(pa.table({"text": texts}), src)  # 7 partitions on 2 one-thread workers
    local = tmp_path / "local.parquet"
    out = tmp_path / "dask.parquet"
    killer = _KillBusyWorkerAfterFirst(client)
    extract_dask(_opts(src, out), "8MiB", killer, client=client)
    assert killer.killed, "no worker was busy to be killed"
    rows = _read_dataset(out).column("row").to_pylist()
    assert rows == list(range(len(texts)))  # every row exactly once, in input order
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file of the dead attempt
    extract(dict(input=str(src), output=str(local)))
    a, b = pq.read_table(local), _read_dataset(out)
    assert b.schema == a.schema.remove_metadata()
    assert np.abs(_embeddings(a) - _embeddings(b)).max() <= 1e-5  # chunks differ from partitions: padding moves ~1e-6
    _wait_idle(client)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it (may still be starting when the run ends)
    assert len(client.scheduler_info()["workers"]) == 2


def test_a_killed_worker_error_says_how_to_resume(real_sentences, tmp_path):
    """A task that kills its workers (allowed-failures reached: the OOM killer, typically): the error's fix must work.
    It said 'lower --blocksize', which a --resume refuses (another cut of the input); a lower --max-batch-tokens with
    --resume continues, the finished partitions reused."""
    import dask

    from bertfeat.run.dask_cluster import ClusterError

    src = tmp_path / "one.parquet"
    pq.write_table(pa.table({"text": real_sentences[:400]}), src)
    out = tmp_path / "dask.parquet"
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with dask_local_client(n_workers=2, threads_per_worker=1, processes=True) as client:
            killer = _KillBusyWorkerAfterFirst(client)
            with pytest.raises(ClusterError) as e:
                extract_dask(_opts(src, out), "8MiB", killer, client=client)
            assert killer.killed
            assert e.value.fix == ("a worker probably ran out of memory: rerun with resume=True and a lower "
                                   "max_batch_tokens (it reuses the partitions that finished), or give the workers more "
                                   "memory; a lower blocksize cuts the input anew, so it needs overwrite=True (the run "
                                   "starts over)")
            _wait_idle(client)
            client.wait_for_workers(2, timeout=60)
            s = extract_dask(_opts(src, out, resume=True, max_batch_tokens=256), "8MiB", client=client)
    assert s.rows_written == 400 and s.rows_resumed > 0
    assert _read_dataset(out).column("row").to_pylist() == list(range(400))


class _InterruptAfterFirst(NullProgress):
    """Ctrl-C on the client as soon as one partition is encoded."""

    def advance(self, rows, tokens, bytes_read):
        if tokens:
            raise KeyboardInterrupt


def _interrupted(client, data, tmp_path) -> tuple[Path, Path, list[Path]]:
    """A run stopped by Ctrl-C once a partition is done: (its output, OUTPUT.partial, the finished parts)."""
    out = tmp_path / "dask.parquet"
    partial = out.with_name(out.name + ".partial")
    with pytest.raises(KeyboardInterrupt):
        extract_dask(_opts(data, out), None, _InterruptAfterFirst(), client=client)
    _wait_idle(client)
    done = sorted(partial.glob("part-*.parquet"))
    assert 1 <= len(done) <= N_PARTS and not out.exists()
    return out, partial, done


def test_resume_recomputes_only_missing_partitions(client, data, local_out, tmp_path):
    out, partial, done = _interrupted(client, data, tmp_path)
    if len(done) == N_PARTS:  # the others finished after the interrupt: make one missing
        done.pop().unlink()
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in done}

    with pytest.raises(ResumeError, match="pooling") as dask_err:  # other settings are refused, and the parts kept
        extract_dask(_opts(data, out, pooling="cls", resume=True), None, client=client)
    assert {p.name for p in partial.glob("part-*.parquet")} == set(before)
    # the local engine refuses the same change in the same words: one resume rule (manifest.check_resume)
    lout = tmp_path / "local.parquet"
    with pytest.raises(KeyboardInterrupt):
        extract(_opts(data, lout, chunk_rows=64), _InterruptAfterFirst())
    with pytest.raises(ResumeError) as local_err:
        extract(_opts(data, lout, chunk_rows=64, pooling="cls", resume=True))
    assert str(local_err.value) == str(dask_err.value)

    s = extract_dask(_opts(data, out, resume=True), None, client=client)
    assert s.chunks_resumed == len(before)
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("part-*.parquet")}
    assert len(after) == N_PARTS
    assert {k: after[k] for k in before} == before  # finished partitions were not rewritten
    _assert_same_features(out, local_out)
    assert s.rows_read == N_ROWS and s.rows_written == N_ROWS


def test_a_prompt_given_by_its_name_or_its_text_resumes_the_kept_partitions(client, data, tmp_path):
    """A run interrupted with --prompt-name doc resumed with --prompt "passage: " (doc's text: the same vectors) goes
    on as the interrupted run: its finished partitions are kept, not rewritten (the run key its parts carry is the
    interrupted run's), and the output's features equal an uninterrupted run's bit for bit, its provenance naming the
    resuming run's prompt (before: refused, "prompt_name: 'doc' -> None")."""
    from extract_util import tiny_st_model

    model = tiny_st_model(tmp_path / "st")
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"doc": "passage: "}}))
    out = tmp_path / "dask.parquet"
    partial = out.with_name(out.name + ".partial")
    with pytest.raises(KeyboardInterrupt):
        extract_dask(_opts(data, out, model=str(model), prompt_name="doc"), None, _InterruptAfterFirst(), client=client)
    _wait_idle(client)
    done = sorted(partial.glob("part-*.parquet"))
    if len(done) == N_PARTS:  # the others finished after the interrupt: make one missing
        done.pop().unlink()
    assert done
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in done}
    s = extract_dask(_opts(data, out, model=str(model), prompt="passage: ", resume=True), None, client=client)
    assert s.chunks_resumed == len(before) and s.rows_written == N_ROWS
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("part-*.parquet")}
    assert {k: after[k] for k in before} == before  # finished partitions were not rewritten
    full = tmp_path / "full.parquet"
    extract(_opts(data, full, model=str(model), prompt="passage: ", **LOCAL))
    _assert_same_features(out, full)
    assert np.array_equal(_embeddings(_read_dataset(out)).view(np.uint32), _embeddings(pq.read_table(full)).view(np.uint32))
    meta = json.loads((out / "_bertfeat.json").read_text())
    assert (meta["fingerprint"]["prompt"], meta["fingerprint"]["prompt_name"]) == ("passage: ", None)


class _Notes(NullProgress):
    def __init__(self):
        self.notes = []

    def note(self, message):
        self.notes.append(message)


def test_resume_encodes_a_damaged_partition_again(client, data, local_out, tmp_path):
    """A finished partition damaged on disk since the interrupt (one byte flipped in its features) is not kept: its
    page checksum fails, so the resume says so and encodes it again; the others are kept as they were. (Before, the
    damaged part went into the output as it was: features silently off, or a raw ArrowInvalid later.)"""
    out, _, done = _interrupted(client, data, tmp_path)
    victim, kept = done[0], done[1:]
    from extract_util import flip_embedding_byte

    flip_embedding_byte(victim)
    with pytest.raises(OSError, match="CRC"):  # the byte is caught by the page checksums every part carries
        pq.read_table(victim, page_checksum_verification=True)
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in kept}
    notes = _Notes()
    s = extract_dask(_opts(data, out, resume=True), None, notes, client=client)
    assert s.chunks_resumed == len(kept)
    assert f"1 finished partition(s) were damaged on disk ({victim.name}): encoded again" in notes.notes
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("part-*.parquet")}
    assert {k: after[k] for k in before} == before  # the intact ones were not rewritten
    _assert_same_features(out, local_out)
    for p in out.glob("part-*.parquet"):
        pq.read_table(p, page_checksum_verification=True)  # every part of the output reads back with its checksums


# --------------------------------------------------------------------------- the command line
def test_cli_with_scheduler_address(client, data, tmp_path, capsys):
    out = tmp_path / "cli.parquet"
    rc = main(["extract", str(data), "-o", str(out), "--engine", "dask", "--scheduler", client.scheduler.address,
               "--blocksize", "none"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "rows written    200" in err and f"features        {out}" in err
    assert len(list(out.glob("part-*.parquet"))) == N_PARTS


def test_cli_summary_of_a_resume_counts_partitions(client, data, tmp_path, capsys):
    """The closing summary of a resumed Dask run names what it kept: partitions (it said "chunk(s)", the local
    engine's unit; tests/run/test_resume.py holds the local engine's line)."""
    out, partial, done = _interrupted(client, data, tmp_path)
    if len(done) == N_PARTS:  # the others finished after the interrupt: make one missing
        done.pop().unlink()
    rc = main(["extract", str(data), "-o", str(out), "--engine", "dask", "--scheduler", client.scheduler.address,
               "--blocksize", "none", "--resume"])
    err = capsys.readouterr().err
    assert rc == 0, err
    from extract_util import summary_line

    assert summary_line(err, "resumed") == (f"resumed {len(done)} partition(s), {len(done) * N_ROWS // N_PARTS} rows, "
                                            "from the interrupted run (counted above, not in the throughput)")


def test_cli_bad_row_error_leaves_nothing(client, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("text\nfine\n   \nalso fine\n")
    out = tmp_path / "o.parquet"
    rc = main(["extract", str(src), "-o", str(out), "--engine", "dask", "--scheduler", client.scheduler.address])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"Error: {src} row 1: whitespace-only text" in err
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_a_bad_row_of_a_parquet_dataset_names_its_file_and_row_there(client, tmp_path, capsys):
    d = tmp_path / "ds"
    d.mkdir()
    for k, texts in enumerate((["a", "b", "c"], ["d", "  ", "f"])):
        pq.write_table(pa.table({"text": texts}), d / f"p{k}.parquet")
    out = tmp_path / "o"
    rc = main(["extract", str(d), "-o", str(out), "--engine", "dask", "--scheduler", client.scheduler.address])
    err = capsys.readouterr().err
    assert rc == 1 and err.splitlines()[-1] == (f"Error: {d} row 4 ({d / 'p1.parquet'} row 1): whitespace-only text - "
                                                "fix the row, or pass --on-bad-row skip to write it to the rejects "
                                                "file and go on")


@pytest.mark.parametrize("given, said", [
    (["--workers", "2"], "--workers needs --engine dask - add --engine dask, or leave it out"),
    (["--blocksize", "1KiB"], "--blocksize needs --engine dask - add --engine dask, or leave it out"),
    (["--blocksize", "none", "--scheduler", "tcp://h:8786"],
     "--scheduler and --blocksize need --engine dask - add --engine dask, or leave them out"),
])
def test_cli_options_need_dask_engine(capsys, tmp_path, given, said):
    """The Dask engine's options on the local engine are refused, naming those given (--blocksize was ignored
    without a word: the run went on, its input read in --chunk-rows chunks)."""
    from extract_util import tiny_model, write_csv

    src = write_csv(tmp_path / "x.csv", ["text"], [["a sentence"], ["another one"]])
    assert main(["extract", str(src), "-o", str(tmp_path / "x.parquet"), "--model", str(tiny_model()), *given]) == 1
    assert capsys.readouterr().err == f"Error: {said}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.csv"]


def test_missing_dask_says_how_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(BertfeatError, match=r'pip install "bertfeat\[dask\]"'):
        require_dask()
    src = tmp_path / "in.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--engine", "dask"]) == 1
    assert 'Error: --engine dask needs Dask, but distributed is not installed - pip install "bertfeat[dask]"' in capsys.readouterr().err


# --------------------------------------------------------------------------- scaling
def test_partitions_spread_over_workers(client, real_sentences, tmp_path):
    """One small Parquet file (one row group, far under --blocksize 8MiB) on 2 one-thread workers: it is
    cut into a few partitions per worker thread and both workers encode some (before: one partition,
    so one worker did all the work while the other idled)."""
    from distributed import get_task_stream

    src = tmp_path / "one.parquet"
    texts = real_sentences[:400]
    pq.write_table(pa.table({"text": texts}), src)  # a single row group
    out = tmp_path / "spread.parquet"
    with get_task_stream(client) as ts:
        s = extract_dask(_opts(src, out), "8MiB", client=client)
    ran = {rec["key"]: rec["worker"] for rec in ts.data if str(rec["key"]).startswith("bertfeat-encode-")}
    per_worker = {w: list(ran.values()).count(w) for w in set(ran.values())}
    print("encode tasks per worker:", per_worker)
    assert len(ran) >= 2 * 2, ran  # a few partitions per worker thread
    assert len(per_worker) == 2 and min(per_worker.values()) >= 2, per_worker
    rows = _read_dataset(out).column("row").to_pylist()
    assert rows == list(range(len(texts))) and s.rows_written == len(texts)


# --------------------------------------------------------------------------- id typing
@pytest.mark.parametrize("kind", ["row", "int32", "int64", "string", "binary", "dictionary"])
def test_id_types_same_on_both_engines(client, real_sentences, tmp_path, kind):
    """Both engines write the same schema and id values for each Parquet id type (and for row numbers)."""
    texts = real_sentences[:24]
    n = len(texts)
    ids = {"int32": pa.array(range(1000, 1000 + n), pa.int32()), "int64": pa.array(range(-n, 0), pa.int64()),
           "string": pa.array([f"s{i}" for i in range(n)]), "binary": pa.array([b"b\x00%d" % i for i in range(n)]),
           "dictionary": pa.array([f"d{i % 5}" for i in range(n)]).dictionary_encode()}
    cols = {"text": texts} | ({"key": ids[kind]} if kind != "row" else {})
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table(cols), src)
    kw = {} if kind == "row" else {"id_column": "key"}
    local, out = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    for run, dest in ((lambda o: extract(o), local), (lambda o: extract_dask(o, "8MiB", client=client), out)):
        if kind == "dictionary":  # 24 ids of 5 values: each engine says so
            with pytest.warns(BertfeatWarning, match=r"the id column 'key' repeats 5 ids \(the first, 'd0', on rows 0 and 5\)"):
                run(dict(input=str(src), output=str(dest), **kw))
        else:
            run(dict(input=str(src), output=str(dest), **kw))
    a, b = pq.read_table(local), _read_dataset(out)
    name = "row" if kind == "row" else "key"
    assert b.schema == a.schema.remove_metadata(), (a.schema.field(name), b.schema.field(name))
    want = {"row": pa.int64(), "int32": pa.int32(), "int64": pa.int64(), "string": pa.string(), "binary": pa.binary(),
            "dictionary": pa.string()}[kind]
    assert a.schema.field(name).type == want
    expected = list(range(n)) if kind == "row" else ids[kind].to_pylist()
    assert a.column(name).to_pylist() == b.column(name).to_pylist() == expected


def test_encoder_options_reach_every_worker(client, data, tmp_path):
    """bertfeat.extract(..., encoder_options={...}) builds the workers' Encoders with those keywords."""
    import bertfeat

    out = tmp_path / "opts.parquet"
    s = bertfeat.extract(data, out, engine="dask", client=client, blocksize=None, encoder_options={"max_batch_tokens": 96})
    assert s.rows_written == N_ROWS

    def budgets():
        from bertfeat.model.encoder_cache import _ENCODERS

        return sorted(e.max_batch_tokens for e in _ENCODERS.values())

    per_worker = client.run(budgets)
    assert len(per_worker) == 2 and all(96 in b for b in per_worker.values()), per_worker
    assert _meta(out / "part-00000.parquet") is not None


def test_the_local_cluster_we_start_runs_without_the_workers_profiler():
    """The LocalCluster bertfeat starts turns off Dask's statistical profiler in its workers (it samples every
    thread every 10 ms with the GIL; measured 2 % of a one-thread worker's throughput)."""
    from bertfeat.run.dask_cluster import open_client

    def profiling(dask_worker):
        import dask

        return "profile" in dask_worker.periodic_callbacks, dask.config.get("distributed.worker.profile.enabled")

    client, cluster = open_client(DaskSettings(workers=1))
    try:
        assert list(client.run(profiling).values()) == [(False, False)]
    finally:
        client.close()
        cluster.close()


# --------------------------------------------------------------------------- a Dask review's findings
class _InterruptAtPassTwo(_Notes):
    """Ctrl-C on the client once the PCA is fitted (its model and report written), before the reduced parts."""

    def note(self, message):
        super().note(message)
        if message.startswith("PCA:"):
            raise KeyboardInterrupt


def test_an_input_that_grows_while_the_partitions_are_read_fails_the_run(client, real_sentences, tmp_path, monkeypatch):
    """The local engine's rule (test_input_changes.py), through the same check: a CSV appended to once every
    partition was read (its new rows in no partition) fails the run before the directory is moved into place, and
    no partial run is left to resume; the provenance of a run whose input held still records the input's identity."""
    import bertfeat.run.dask as dask_engine
    from bertfeat.errors import InputError

    src = tmp_path / "c.csv"
    src.write_text("text\n" + "".join('"' + t.replace('"', '""') + '"\n' for t in real_sentences[:60]), encoding="utf-8")
    size = src.stat().st_size
    real_gather = dask_engine.gather

    def gather(client_, futures, on_result, *args, **kw):
        real_gather(client_, futures, on_result, *args, **kw)
        if "counted" in kw:  # pass 1: every partition has been read
            with open(src, "a", encoding="utf-8") as f:
                f.write("an appended row\n" * 20)

    monkeypatch.setattr(dask_engine, "gather", gather)
    out = tmp_path / "o"
    with pytest.raises(InputError) as e:
        extract_dask(_opts(src, out), 1024, client=client)
    assert str(e.value) == (f"{src} changed while it was read (size {size:,} -> {src.stat().st_size:,} bytes) - run "
                            "the command again once the file is complete")
    _wait_idle(client)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]
    monkeypatch.undo()
    s = extract_dask(_opts(src, out), 1024, client=client)
    st = src.stat()
    assert s.rows_read == 80
    ident = json.loads((out / "_bertfeat.json").read_text())["input_identity"]
    assert (ident["files"], ident["size"], ident["mtime_ns"]) == (1, st.st_size, st.st_mtime_ns)
    assert _meta(next(out.glob("part-*.parquet")))["input_identity"] == ident


class TestTheIdentityWithinARun:
    """The local engine's stronger check (test_input_changes.py), on the client once pass 1 has read every partition:
    each file's size, mtime, ctime, inode and device, and the files the path names. Before, a same-size rewrite with
    its mtime set back, a rename over the input, and a file added to the folder published a mix with no word."""

    @staticmethod
    def change_after_pass_one(monkeypatch, change):
        import bertfeat.run.dask as dask_engine

        real_gather = dask_engine.gather

        def gather(client_, futures, on_result, *args, **kw):
            real_gather(client_, futures, on_result, *args, **kw)
            if "counted" in kw:  # pass 1: every partition has been read
                change()

        monkeypatch.setattr(dask_engine, "gather", gather)

    @pytest.mark.parametrize("how", ["rewritten", "renamed"])
    def test_a_file_changed_with_its_size_and_mtime_kept_fails_the_run(self, client, real_sentences, tmp_path,
                                                                          monkeypatch, how):
        from bertfeat.errors import InputError

        src = tmp_path / "c.csv"
        src.write_text("text\n" + "".join('"' + t.replace('"', '""') + '"\n' for t in real_sentences[:60]), encoding="utf-8")
        st = src.stat()
        new = tmp_path / "new.csv" if how == "renamed" else src

        def change():
            new.write_bytes(src.read_bytes().replace(b"e", b"E"))
            os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.replace(new, src)

        self.change_after_pass_one(monkeypatch, change)
        with pytest.raises(InputError) as e:
            extract_dask(_opts(src, tmp_path / "o"), 1024, client=client)
        what = ("rewritten or its attributes changed, its size and modification time kept (its ctime moved)"
                if how == "rewritten" else
                f"replaced by another file (inode {st.st_ino} -> {src.stat().st_ino}), its size and modification time kept")
        assert str(e.value) == f"{src} changed while it was read ({what}) - run the command again once the file is complete"
        _wait_idle(client)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]

    def test_a_file_added_to_the_folder_fails_the_run(self, client, data, tmp_path, monkeypatch):
        from bertfeat.errors import InputError

        d = tmp_path / "corpus"
        shutil.copytree(data, d)
        added = d / "part9.parquet"
        self.change_after_pass_one(monkeypatch, lambda: shutil.copy(d / "part0.parquet", added))
        with pytest.raises(InputError) as e:
            extract_dask(_opts(d, tmp_path / "o"), "none", client=client)
        assert str(e.value) == (f"{d} changed while it was read ({added}: added) - run the command again once its "
                                "files are complete")
        _wait_idle(client)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_pca_statistics_merge_in_partition_order_whatever_order_they_finish(client, data, tmp_path, monkeypatch):
    """The partitions' PCA statistics were merged as they finished: another order rounds otherwise (components ~1e-15
    apart), so two runs of one job could write other bits. Delivered in reverse, with every early one waiting on disk
    (hold 1), the model and the reduced features are the in-order run's to the bit."""
    import bertfeat.run.dask as dask_engine
    from bertfeat.pca.estimator import PCA
    from bertfeat.run.pca_steps import OrderedMerge

    first = tmp_path / "a" / "f.parquet"
    extract_dask(_opts(data, first, pca="8"), "none", client=client)
    real_gather = dask_engine.gather

    def reversed_gather(client_, futures, on_result, *args, **kw):
        got = []
        real_gather(client_, futures, lambda i, r: got.append((i, r)), *args, **kw)
        for i, r in reversed(got):
            on_result(i, r)

    monkeypatch.setattr(dask_engine, "gather", reversed_gather)
    monkeypatch.setattr(OrderedMerge, "HOLD", 1)
    second = tmp_path / "b" / "f.parquet"
    extract_dask(_opts(data, second, pca="8"), "none", client=client)
    a, b = PCA.load(first.with_name("f.pca.npz")), PCA.load(second.with_name("f.pca.npz"))
    assert np.array_equal(a.components_, b.components_) and np.array_equal(a.mean_, b.mean_)
    assert np.array_equal(_embeddings(_read_dataset(first)), _embeddings(_read_dataset(second)))
    assert sorted(p.name for p in second.iterdir()) == sorted(p.name for p in first.iterdir())  # no spill left


def test_ordered_merge_spills_partitions_of_any_size_and_clears_what_a_stopped_run_left(tmp_path):
    """The spill saved each waiting partition's statistics with PCA.save, which fits first: a partition of 0 rows, 1
    row or fewer rows than n_components was refused, and the run's partial directory deleted (found by review). A
    stopped run's leftover temporary in the spill made every resume fail at the end."""
    from bertfeat.run.pca_steps import OrderedMerge, new_pca

    rng = np.random.default_rng(0)
    sizes = [50, 0, 1, 3, 40]  # rows of partitions 0 .. 4
    parts = []
    for n in sizes:
        p = new_pca(8)
        if n:
            p.partial_fit(rng.standard_normal((n, 16)).astype(np.float32))
        parts.append(p)
    in_order = new_pca(8)
    for p in parts:
        in_order = in_order.merge(p)
    spill = tmp_path / "_stats"
    spill.mkdir()
    (spill / ".stats-3.npz.tmp-99999").write_bytes(b"half")  # a killed run's
    m = OrderedMerge(new_pca(8), spill, hold=0)  # every early partition waits on disk
    assert not spill.exists()
    for i in (4, 2, 1, 3, 0):
        m.add(i, parts[i])
    got = m.result(len(parts))
    assert np.array_equal(got.components_, in_order.components_) and got.n_samples_ == sum(sizes)
    assert not spill.exists()


def test_interrupt_after_the_fit_leaves_no_pca_model_and_says_how_to_resume(client, data, tmp_path):
    out = tmp_path / "f.parquet"
    progress = _InterruptAtPassTwo()
    with pytest.raises(KeyboardInterrupt) as stopped:
        extract_dask(_opts(data, out, pca="8"), None, progress, client=client)
    _wait_idle(client)
    assert not out.with_name("f.pca.npz").exists() and not list(tmp_path.glob("f.pca.report.*")) and not out.exists()
    partial = out.with_name(out.name + ".partial")
    assert stopped.value.resume_note == (f"{N_PARTS} partition(s) are kept in {partial}; run the same command "
                                         "with --resume to continue")  # the CLI's one line after Ctrl-C
    s = extract_dask(_opts(data, out, pca="8", resume=True), None, client=client)  # the resume fits and writes them
    assert s.chunks_resumed == N_PARTS and out.with_name("f.pca.npz").is_file()


def test_resume_reports_parts_of_the_whole_run(client, data, tmp_path):
    out = tmp_path / "dask.parquet"
    with pytest.raises(KeyboardInterrupt):
        extract_dask(_opts(data, out, pca="4"), None, _InterruptAfterFirst(), client=client)
    _wait_idle(client)
    done = sorted(out.with_name(out.name + ".partial").glob("_full/part-*.parquet"))
    assert done
    if len(done) == N_PARTS:
        done.pop().unlink()
    rec = _Parts()
    extract_dask(_opts(data, out, pca="4", resume=True), None, rec, client=client)
    assert {t for _, _, t in rec.calls} == {N_PARTS}  # the statistics tasks of resumed parts are not parts
    assert rec.calls[0][0] == len(done) and rec.calls[-1] == (N_PARTS, 0, N_PARTS)


def test_a_bad_row_error_is_one_line_without_worker_tracebacks(tmp_path, capfd):
    """On a LocalCluster bertfeat starts, a task's bad-row error comes back as a value, so the workers log no
    "Compute Failed" traceback before the one-line error."""
    src = tmp_path / "in.csv"
    src.write_text('text\nfine\n"   "\nok\n')
    rc = main(["extract", str(src), "-o", str(tmp_path / "o.parquet"), "--engine", "dask", "-q"])
    err = capfd.readouterr().err
    assert rc == 1 and "Compute Failed" not in err and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"Error: {src} row 1: whitespace-only text - fix the row, or pass "
                                                   "--on-bad-row skip")


def test_a_malformed_scheduler_address_is_named(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("text\nfine\n")
    rc = main(["extract", str(src), "-o", str(tmp_path / "o.parquet"), "--engine", "dask", "--scheduler",
               "127.0.0.1:notaport", "-q"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("Error: --scheduler 127.0.0.1:notaport is not a scheduler address (")
    assert err.rstrip().endswith("- give tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786")


@pytest.mark.parametrize("n", ["2", "100000"])
def test_workers_with_a_scheduler_are_refused_as_the_remote_clusters_whatever_their_number(tmp_path, capsys, n):
    """--workers starts a local cluster; with --scheduler the job runs on that scheduler's workers. A number above
    the local cap (4 per core) was refused by the cap, whose fix said to pass --scheduler: the one given."""
    from extract_util import tiny_model

    src = tmp_path / "in.csv"
    src.write_text("text\nfine\n")
    rc = main(["extract", str(src), "-o", str(tmp_path / "o.parquet"), "--engine", "dask", "--scheduler",
               "tcp://10.0.0.5:8786", "--workers", n, "--model", str(tiny_model()), "-q"])
    assert (rc, capsys.readouterr().err) == (1, f"Error: --workers {n} starts a local cluster, but with --scheduler the "
                                                "job runs on that scheduler's workers - drop --workers (the cluster's "
                                                "workers are the ones started with `dask worker tcp://10.0.0.5:8786`), "
                                                "or drop --scheduler to start a local cluster\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    with pytest.raises(BertfeatError) as e:  # Python names its parameters
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), engine="dask", scheduler="tcp://h:1",
                         workers=int(n))
    assert e.value.message.startswith(f"workers={n} starts a local cluster, but with scheduler the job runs")


def test_a_cut_csv_with_quoted_line_breaks_is_refused_and_whole_it_is_counted(client, tmp_path, real_sentences):
    texts = real_sentences[:120]
    rows = [[str(i), t + ("\nsecond line" if i % 10 == 3 else "")] for i, t in enumerate(texts)]
    import csv as _csv

    src = tmp_path / "ml.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = _csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "text"])
        w.writerows(rows)
    with pytest.raises(BertfeatError) as e:
        extract_dask(_opts(src, tmp_path / "cut.parquet", id_column="id", on_bad_row="skip"), "2KiB", client=client)
    assert e.value.message.startswith(f"{src}: quoted values span lines (bytes ")
    assert e.value.message.endswith("so the file cannot be cut into byte ranges for the workers - pass "
                                    "blocksize='none' (the file is then read as one partition), or convert it to Parquet")
    assert not list(tmp_path.glob("cut*"))
    s = extract_dask(_opts(src, tmp_path / "whole.parquet", id_column="id"), None, client=client)
    local = extract(_opts(src, tmp_path / "local.parquet", id_column="id"))
    assert s.rows_written == local.rows_written == 120 and s.rows_multiline == local.rows_multiline == 12


def test_parquet_partitions_keep_to_the_blocksize_inside_a_row_group(tmp_path):
    from bertfeat.run.options import parse_blocksize
    from bertfeat.readers import open_input

    texts = [f"unique sentence number {i} with some more words, about {i * 7} things" for i in range(20000)]
    src = tmp_path / "one.parquet"
    pq.write_table(pa.table({"text": texts}), src, row_group_size=20000)
    size = pq.ParquetFile(src).metadata.row_group(0).column(0).total_uncompressed_size
    reader = open_input(str(src), None, None, None, None, "utf-8")
    for blocksize, target in (("64KiB", 4), ("64KiB", None), ("1MiB", 100)):
        parts = reader.partitions(parse_blocksize(blocksize), target)
        assert sum(p.n_rows for p in parts) == 20000
        assert [p.row_offset for p in parts] == list(np.cumsum([0] + [p.n_rows for p in parts[:-1]]))
        assert max(p.n_rows for p in parts) * size / 20000 <= parse_blocksize(blocksize) * 1.01, blocksize
    assert len(reader.partitions(None, 4)) == 4


def test_encoder_threads_are_each_hosts_share():
    from bertfeat.run.dask_cluster import task_slots, task_threads, worker_threads

    class Stub:
        def scheduler_info(self, n_workers=-1):
            return {"workers": {"tcp://a:1": {"host": "a", "nthreads": 1}, "tcp://b:1": {"host": "b", "nthreads": 1},
                                "tcp://b:2": {"host": "b", "nthreads": 1}}}

        def run(self, fn):
            return {"tcp://a:1": 32, "tcp://b:1": 4, "tcp://b:2": 4}

    shares = worker_threads(Stub())
    assert shares == {"tcp://a:1": 32, "tcp://b:1": 2, "tcp://b:2": 2}  # not min over hosts (2) everywhere

    class W:
        address, nthreads = "tcp://a:1", 3

    assert task_threads(shares, W()) == 32 and task_threads(5, W()) == 5 and task_slots(W()) == 3
    W.address = "tcp://c:9"  # joined later: the smallest share
    assert task_threads(shares, W()) == 2


def test_a_resumed_run_interrupted_after_the_fit_leaves_no_pca_model(client, data, tmp_path):
    """As test_interrupt_after_the_fit_..., on a resumed run (its finished parts must not count as a finished run)."""
    out = tmp_path / "f.parquet"
    with pytest.raises(KeyboardInterrupt):
        extract_dask(_opts(data, out, pca="8"), None, _InterruptAfterFirst(), client=client)
    _wait_idle(client)
    progress = _InterruptAtPassTwo()
    with pytest.raises(KeyboardInterrupt) as stopped:
        extract_dask(_opts(data, out, pca="8", resume=True), None, progress, client=client)
    _wait_idle(client)
    assert not out.with_name("f.pca.npz").exists() and not list(tmp_path.glob("f.pca.report.*")) and not out.exists()
    assert stopped.value.resume_note.startswith(f"{N_PARTS} partition(s) are kept in ")


class _ShutilKilledAt:
    """dask.py's shutil, whose rmtree of ``name`` first copies the directory it tidies to ``killed``: what a kill
    while the finish deletes the full-width parts leaves."""

    def __init__(self, name: str, killed: Path):
        self.name, self.killed = name, killed

    def __getattr__(self, attr):
        return getattr(shutil, attr)

    def rmtree(self, path, *a, **kw):
        if Path(path).name == self.name and not self.killed.exists():
            shutil.copytree(Path(path).parent, self.killed)
        return shutil.rmtree(path, *a, **kw)


def test_a_run_killed_while_its_finish_tidies_the_partial_directory_is_resumed_or_replaced(client, data, tmp_path,
                                                                                           monkeypatch, capsys):
    """The finish deleted the manifest (in directory order, before or after the full-width parts, which take a while)
    and then wrote the provenance and moved OUTPUT.partial/ into place: a run killed in between left parts without a
    manifest, which every rerun refused, --overwrite and --resume too ("exists and is not a bertfeat partial run -
    move or rename it"), so the user had to delete it by hand. The manifest is now deleted last: a run killed while the
    full-width parts are deleted is a partial run, which --resume finishes and --overwrite replaces."""
    import bertfeat.run.dask as dask_engine

    out = tmp_path / "f.parquet"
    partial, killed = out.with_name("f.parquet.partial"), tmp_path / "killed"
    monkeypatch.setattr(dask_engine, "shutil", _ShutilKilledAt("_full", killed))
    extract_dask(_opts(data, out, pca="4"), client=client)  # the CLI's blocksize
    monkeypatch.undo()
    whole = _read_dataset(out)
    shutil.rmtree(out)
    killed.rename(partial)
    assert "_manifest.json" in os.listdir(partial) and "_full" in os.listdir(partial)
    args = ["extract", str(data), "-o", str(out), "--engine", "dask", "--scheduler", client.scheduler.address, "--pca", "4",
            "-q"]
    assert main(args) == 1
    assert capsys.readouterr().err == (f"Error: a resumable partial run exists in {partial} - rerun the same command with "
                                       "--resume to continue it, or with --overwrite to start over\n")
    assert main(args + ["--resume"]) == 0, capsys.readouterr().err
    assert _read_dataset(out).equals(whole) and not partial.exists()
    monkeypatch.setattr(dask_engine, "shutil", _ShutilKilledAt("_full", killed))
    extract_dask(_opts(data, out, pca="4", overwrite=True), client=client)
    shutil.rmtree(out)
    monkeypatch.undo()
    killed.rename(partial)
    assert main(args + ["--overwrite"]) == 0, capsys.readouterr().err
    assert _read_dataset(out).equals(whole) and not partial.exists()


def test_a_run_killed_just_before_its_finish_renames_the_output_leaves_it_to_be_moved(client, data, tmp_path, monkeypatch,
                                                                                      capsys):
    """Killed between the manifest's deletion and the rename, OUTPUT.partial/ holds the finished output: the same
    folder as an output of the user's named OUTPUT.partial (-o f.parquet.partial), so it is never deleted (until
    2026-12-01 --overwrite and --resume deleted either); the refusal says to move it to OUTPUT, which is then the
    uninterrupted run's output."""
    import bertfeat.run.dask as dask_engine

    out = tmp_path / "f.parquet"
    partial, killed = out.with_name("f.parquet.partial"), tmp_path / "killed"
    real = dask_engine.replace_directory

    def kill_before_the_rename(src, dst):  # what a kill just before the rename leaves: the tidied directory
        shutil.copytree(src, killed)
        return real(src, dst)

    monkeypatch.setattr(dask_engine, "replace_directory", kill_before_the_rename)
    extract_dask(_opts(data, out, pca="4"), None, client=client)
    monkeypatch.undo()
    whole = _read_dataset(out)
    shutil.rmtree(out)
    killed.rename(partial)
    kept = sorted(os.listdir(partial))
    assert "_manifest.json" not in kept and "_bertfeat.json" in kept
    args = ["extract", str(data), "-o", str(out), "--engine", "dask", "--scheduler", client.scheduler.address, "--pca", "4",
            "-q"]
    for flags, why in (([], ""), (["--overwrite"], "; --overwrite does not delete it (it may be yours)"),
                       (["--resume"], "; --resume has nothing to continue in it (no manifest: that run had finished)")):
        assert main(args + flags) == 1
        assert capsys.readouterr().err == (
            f"Error: {partial} holds a finished bertfeat output (_bertfeat.json and its parts, no partial run's "
            f"manifest): an output of yours named so, or a Dask run killed as it moved its output to {out}; nothing in "
            f"it was deleted{why} - if it is that run's output, it is complete (any rejects or PCA files beside it were "
            f"written first) and needs no rerun: `mv {partial} {out}`; otherwise move it out of the way, or write the "
            "output under another name\n")
        assert sorted(os.listdir(partial)) == kept
    partial.rename(out)  # the command the message gives: the output is complete, the PCA model beside it
    assert _read_dataset(out).equals(whole) and out.with_name("f.pca.npz").is_file()


@pytest.mark.parametrize("bad_rows", [False, True])
def test_a_resumed_pca_run_fits_the_uninterrupted_runs_model_to_the_bit(client, real_sentences, tmp_path, bad_rows):
    """A resume took a kept partition's PCA statistics from its part file in blocks of 8192 rows, while the run had
    added them chunk by chunk (--chunk-rows): the sums rounded otherwise, and the PCA model (mean, components,
    spectrum ~1e-15 apart) and so its sha256 differed from the uninterrupted run's (docs/dask.md: a rerun of one job
    writes the same bits). Both now add a partition's rows in blocks of --chunk-rows written rows, so the resumed
    run's model and reduced features equal the uninterrupted run's bit for bit, bad rows skipped or not."""
    from bertfeat.pca.estimator import PCA

    lines = ["id,text"] + [f'r{i},"{t}"' if not (bad_rows and i % 9 == 4) else f"r{i}," for i, t in
                           enumerate(t.replace('"', "'") for t in real_sentences[:200])]
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n")
    kw = dict(id_column="id", pca="8", chunk_rows=16, on_bad_row="skip")
    whole = tmp_path / "whole" / "f.parquet"
    extract_dask(_opts(src, whole, **kw), 4096, client=client)
    out = tmp_path / "resumed" / "f.parquet"
    with pytest.raises(KeyboardInterrupt):
        extract_dask(_opts(src, out, **kw), 4096, _InterruptAfterFirst(), client=client)
    _wait_idle(client)
    done = sorted((out.with_name("f.parquet.partial") / "_full").glob("part-*.parquet"))
    if len(done) == len(list(whole.glob("part-*.parquet"))):  # the others finished after the interrupt: one missing
        done.pop().unlink()
    assert done
    s = extract_dask(_opts(src, out, resume=True, **kw), 4096, client=client)
    assert s.chunks_resumed == len(done) and s.rows_rejected == (22 if bad_rows else 0)
    a, b = np.load(whole.with_name("f.pca.npz")), np.load(out.with_name("f.pca.npz"))
    for k in ("mean", "components", "spectrum"):
        assert np.array_equal(a[k], b[k]), k
    assert PCA.load(whole.with_name("f.pca.npz")).n_samples_ == PCA.load(out.with_name("f.pca.npz")).n_samples_
    assert _read_dataset(whole).equals(_read_dataset(out))  # ids and reduced features, row for row


@pytest.mark.parametrize("pca", [None, "8"])
def test_float16_parts_equal_local(client, data, tmp_path, pca):
    from bertfeat.features import read_features

    local = tmp_path / "local" / "f.parquet"
    extract(_opts(data, local, pca=pca, dtype="float16", **LOCAL))
    out = tmp_path / "dask" / "f.parquet"
    extract_dask(_opts(data, out, pca=pca, dtype="float16"), None, client=client)
    parts = sorted(out.glob("part-*.parquet"))
    assert parts and all(pq.read_schema(p).field("embedding").type.value_type == pa.float16() for p in parts)
    _, a, _ = read_features(local)
    _, b, meta = read_features(out)
    assert meta["dtype"] == "float16" and _meta(parts[0])["dtype"] == "float16"
    # float32 features equal to TOL round to the same float16 but for a value on a rounding boundary: one step
    assert np.abs(a - b).max() <= max(TOL, float(np.abs(a).max()) * 2.0 ** -10)
    if pca is None:
        assert np.array_equal(b, a)  # the same chunking as the partitions: the same floats to the bit


# --------------------------------------------------------------------------- a wrong or lost scheduler (issue 44, 5-6)
ROOT = Path(__file__).resolve().parents[2]
# A TCP server on loopback that is not a Dask scheduler; it prints its port, and stops by itself after 60 s.
FAKE_SERVER = r"""
import socket, sys, time
mode, end = sys.argv[1], time.monotonic() + 60
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
held = []
while time.monotonic() < end:
    s.settimeout(max(0.1, end - time.monotonic()))
    try:
        c, _ = s.accept()
    except OSError:
        break
    if mode == "garbage":
        c.sendall(b"\x00\x01garbage\xff" * 4)
    elif mode == "close":
        c.close()
        continue
    elif mode == "http":  # answers whatever it is sent, as a web server answers a request it cannot parse
        c.settimeout(max(0.1, end - time.monotonic()))
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nbad request\r\n")
        except OSError:
            pass
    held.append(c)  # "silent": accepted, and never a byte
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _cli_process(*args, timeout: float):
    import subprocess

    return subprocess.run([sys.executable, "-m", "bertfeat", *map(str, args)], capture_output=True, text=True,
                          env=_env(), timeout=timeout)


@pytest.mark.parametrize("mode, said", [
    ("http", "it sent 'HTTP/1.0 400 Bad Request'..."),
    ("garbage", "it sent '\\x00\\x01garbage\\xff\\x00\\x01garbage\\xff\\x00\\x01garbage\\xff\\x00\\x01garbage\\xff'"),
    ("silent", "it accepted the connection but sent nothing in 10 s"),
    ("close", "it closed the connection without a word"),
])
def test_a_server_that_is_not_a_scheduler_is_named_in_seconds(tmp_path, mode, said):
    """--scheduler at a web server or a silent one hung the run for good (distributed waits for the handshake without
    a time limit); a server sending other bytes gave "out of memory"."""
    import subprocess

    from extract_util import tiny_model

    server = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, mode], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        src = tmp_path / "in.csv"
        src.write_text("text\nfine\nalso fine\n")
        t0 = time.monotonic()
        p = _cli_process("extract", src, "-o", tmp_path / "o.parquet", "--engine", "dask", "--scheduler",
                         f"tcp://127.0.0.1:{port}", "-m", tiny_model(), "-q", timeout=120)
        assert time.monotonic() - t0 < 60
    finally:
        server.kill()
        server.wait()
    assert (p.returncode, p.stdout, p.stderr) == (
        1, "", f"Error: --scheduler tcp://127.0.0.1:{port} answered but is not a Dask scheduler ({said}) - check the "
               "host and port: a Dask scheduler listens on 8786 by default (`dask scheduler`), its dashboard on 8787 is a "
               "web page, not the scheduler\n")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.csv"]


def test_a_real_scheduler_passes_the_greeting_check(client):
    from bertfeat.run.dask_cluster import check_scheduler

    t0 = time.monotonic()
    check_scheduler(client.scheduler.address)
    assert time.monotonic() - t0 < 5


def test_a_scheduler_killed_mid_run_leaves_one_error_line(tmp_path):
    """The scheduler killed while the parts run: stderr held distributed's "ERROR - ... CancelledError" traceback above
    the error, which said "the task was cancelled (the cluster went away?)"."""
    import socket
    import subprocess

    from extract_util import tiny_model

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence number {i} of a long enough input\n" for i in range(20_000)))
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                              str(port), "--no-dashboard"], **quiet)
    worker = run = None
    try:
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                   "--nworkers", "1", "--memory-limit", "0", "--no-dashboard", "--host", "127.0.0.1",
                                   "--death-timeout", "20"], **quiet)
        run = subprocess.Popen([sys.executable, "-m", "bertfeat", "extract", str(src), "-o", str(tmp_path / "o.parquet"),
                                "--engine", "dask", "--scheduler", address, "-m", str(tiny_model()), "--blocksize",
                                "4KiB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        lines = []
        for line in run.stderr:  # the scheduler goes once the rows are counted and the parts are being encoded
            lines.append(line)
            if " started (" in line:
                break
        sched.kill()
        run.wait(timeout=120)
        lines += run.stderr.read().splitlines(keepends=True)
    finally:
        for p in (run, worker, sched):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert run.returncode == 1, "".join(lines)
    assert all(line.startswith("bertfeat extract (dask): ") for line in lines[:-1]), "".join(lines)
    assert re.fullmatch(f"Error: partition [0-9]+: the connection to the Dask scheduler {address} was lost \\(the "
                        r"scheduler stopped, or the network between it and this machine failed\) - restart the scheduler "
                        r"and its workers, then rerun with --resume \(it reuses the partitions that finished\)\n",
                        lines[-1]), lines
    partial = tmp_path / "o.parquet.partial"  # kept with the parts that finished; none finished: removed (failures.py)
    assert (list(partial.glob("part-*.parquet")) if partial.exists() else True) and not (tmp_path / "o.parquet").exists()


def test_routed_logs_keep_distributed_off_stderr_and_put_the_handlers_back(capfd):
    import logging

    from bertfeat.run.dask_cluster import LOGGERS, routed_logs

    before = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate) for name in LOGGERS}
    capfd.readouterr()
    with routed_logs():
        logging.getLogger("distributed.client").error("lost the scheduler")
        logging.getLogger("distributed.comm.tcp").warning("closed")
        logging.getLogger("asyncio").error("Task exception was never retrieved")
    assert capfd.readouterr().err == ""
    assert {name: (logging.getLogger(name).handlers, logging.getLogger(name).propagate) for name in LOGGERS} == before


def test_a_workers_heartbeat_failure_as_the_cluster_closes_is_not_printed(capfd):
    """A Ctrl-C before any partition finished printed 3 chained tracebacks (43 lines) from a worker whose scheduler
    closed under its heartbeat, above the one Interrupted line (about one early stop in three; a helper's review):
    the workers bertfeat starts drop that record (dask_setup); the worker's other errors still print."""
    import logging

    from bertfeat.run.dask_cluster import HEARTBEAT_FAILED, quiet_heartbeat_failures

    logger = logging.getLogger("distributed.worker")
    before = logger.filters[:]
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    try:
        quiet_heartbeat_failures()
        capfd.readouterr()
        try:
            raise OSError("ConnectionPool closing.")
        except OSError:
            logger.exception(HEARTBEAT_FAILED + ".")
            logger.exception("Compute Failed")
        err = capfd.readouterr().err
    finally:
        logger.filters[:] = before
        logger.removeHandler(handler)
    assert HEARTBEAT_FAILED not in err and err.startswith("Compute Failed\n")
    import distributed.worker

    assert HEARTBEAT_FAILED in Path(distributed.worker.__file__).read_text()  # the words distributed logs


# --------------------------------------------------------------------------- a worker that would round otherwise
def _hand_started_cluster(port: int, worker_env: dict):
    """`dask scheduler` and one `dask worker`, as a user starts them, the worker with ``worker_env`` added."""
    import subprocess

    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"tcp://127.0.0.1:{port}"
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                              str(port), "--no-dashboard"], env=_env(), **quiet)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                               "--nworkers", "1", "--memory-limit", "0", "--no-dashboard", "--host", "127.0.0.1",
                               "--death-timeout", "20"], env={**_env(), **worker_env}, **quiet)
    return address, (worker, sched)


def _stop(processes) -> None:
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_on_another_blas_kernel_is_refused_and_the_fix_gives_the_local_bits(tmp_path):
    """A hand-started `dask worker` loads NumPy before bertfeat, so OpenBLAS keeps the kernel its environment pins
    (Haswell here) while the client runs SkylakeX: its rows differed from the local engine's by up to ~2e-7, silently,
    into the output and a shared cache. The worker is refused, and the error's fix gives the local engine's bits."""
    from extract_util import tiny_model

    from bertfeat.features import read_features
    from bertfeat.ops.cpu import cpu_has_avx512
    from bertfeat.ops.threads import blas_info

    if not cpu_has_avx512() or blas_info().get("internal_api") != "openblas":
        pytest.skip("needs OpenBLAS on a CPU with AVX-512 (where the client chooses SkylakeX over a pinned Haswell)")
    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"sentence number {i} of the input\n" for i in range(40)))
    model = str(tiny_model())
    local = tmp_path / "local.parquet"
    assert main(["extract", str(src), "-o", str(local), "-m", model, "-q"]) == 0
    out = tmp_path / "o.parquet"
    address, procs = _hand_started_cluster(_free_port(), {"OPENBLAS_CORETYPE": "Haswell", "BERTFEAT_BLAS_KERNEL": ""})
    try:
        r = _cli_process("extract", src, "-o", out, "-m", model, "--engine", "dask", "--scheduler", address, "-q",
                         timeout=180)
    finally:
        _stop(procs)
    kernel = blas_info()["architecture"]
    assert r.returncode == 1, r.stderr
    line = r.stderr.splitlines()[-1]
    assert re.fullmatch(r"Error: worker on \S+: its products would round otherwise than the client's "
                        r"\(blas openblas \S+ Haswell here, openblas \S+ " + kernel + r" on the client\) - start the "
                        r"workers with OPENBLAS_CORETYPE=" + kernel + r" in their environment \(`dask worker` loads "
                        r"NumPy before bertfeat can choose its kernel\)", line), r.stderr
    assert not out.exists()
    address, procs = _hand_started_cluster(_free_port(), {"OPENBLAS_CORETYPE": kernel})  # the fix the error gives
    try:
        r = _cli_process("extract", src, "-o", out, "-m", model, "--engine", "dask", "--scheduler", address, "-q",
                         "--overwrite", timeout=180)
    finally:
        _stop(procs)
    assert r.returncode == 0, r.stderr
    _, a, _ = read_features(local)
    _, b, _ = read_features(out)
    assert np.array_equal(a, b)


def test_a_model_changed_on_a_worker_is_a_worker_setup_error(tmp_path, monkeypatch):
    """A worker whose model files changed between its load and its hash (a node's model updated during the job)
    raised the Encoder's ConfigError, an input error, so the run deleted every finished partition; it is a
    WorkerSetupError, which keeps them for --resume (found by review)."""
    from bertfeat.errors import ConfigError
    from bertfeat.model import encoder_cache
    from bertfeat.model.encoder import Encoder
    from bertfeat.model.hub import resolve_model
    from bertfeat.run.dask import WorkerSetupError, worker_encoder
    from bertfeat.run.failures import kind_of
    from extract_util import tiny_model

    model = tiny_model()
    sha = Encoder(model).weights_sha256
    encoder_cache.clear()

    def changed(self):
        raise ConfigError(f"the model folder {self.location.path} changed while bertfeat loaded it (config.json)",
                          "run the command again once the model's files are all in place")

    monkeypatch.setattr(Encoder, "check_files_unchanged", changed)
    try:
        with pytest.raises(WorkerSetupError) as e:
            worker_encoder(resolve_model(str(model)), str(model), {}, sha)
    finally:
        encoder_cache.clear()
    host = __import__("socket").gethostname()
    assert str(e.value) == (f"worker on {host}: the model folder {resolve_model(str(model)).path} changed while "
                            "bertfeat loaded it (config.json) - wait until the model's files are all in place on that "
                            "worker")
    assert kind_of(e.value, (WorkerSetupError,)) == "resumable"


def test_a_worker_whose_tokenizer_files_differ_from_the_clients_is_refused(tmp_path, monkeypatch, client):
    """The workers compared the weights' sha256 with the client's, not the model's other files: tokenizer_config.json
    edited after the client loaded the model (an update landing during the job; a node's older copy) made the workers
    tokenize otherwise (do_lower_case), rc 0, and their vectors went into the cache under the client's key, so a later
    run with the client's files was served them (0.3 apart on all-MiniLM-L6-v2). The worker is refused naming the file
    (a WorkerSetupError: finished partitions would be kept for --resume), and the cache holds nothing of it."""
    from extract_util import tiny_model

    from bertfeat.cache.store import cache_info
    from bertfeat.run import dask as engine

    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    cfg = model / "tokenizer_config.json"
    src = tmp_path / "t.csv"
    src.write_text("text\n" + "".join(f"Hello World THE FOX {i}\n" for i in range(8)))
    real = engine._open_partial

    def then_edited(*a):  # the client has loaded the model and written its manifest: the files change now
        out = real(*a)
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "do_lower_case": False}))
        return out

    monkeypatch.setattr(engine, "_open_partial", then_edited)
    out, cache = tmp_path / "out", tmp_path / "cache"
    with pytest.raises(BertfeatError) as e:
        extract_dask(_opts(src, out, model=str(model), cache=str(cache), quiet=True), client=client)
    assert re.fullmatch(rf"worker on \S+: the model files at {re.escape(str(model))} differ from the client's "
                        r"\(tokenizer_config.json changed\)", e.value._what), str(e.value)
    assert e.value._fix == "put the same model files on every node, and leave them unchanged while a job runs"
    assert not out.exists() and cache_info(cache)["entries"] == 0


def test_a_worker_with_another_tokenizers_library_is_refused(monkeypatch):
    """The tokenizers version is in the cache key the client writes under, but a worker tokenizes with its own: a
    worker with another version is refused as one on another BLAS is (resumable), saying which version to install."""
    import socket

    import tokenizers

    from bertfeat.model.encoder import Encoder
    from bertfeat.run.dask import WorkerSetupError, check_worker_gemm, worker_identity
    from extract_util import tiny_model

    enc = Encoder(tiny_model())
    client = worker_identity(enc)
    assert client["tokenizers"] == tokenizers.__version__
    monkeypatch.setattr(tokenizers, "__version__", "0.0.1")
    with pytest.raises(WorkerSetupError) as e:
        check_worker_gemm(worker_identity(enc), client, socket.gethostname())
    assert str(e.value) == (f"worker on {socket.gethostname()}: its tokenizers library may split texts otherwise than "
                            f"the client's (tokenizers 0.0.1 here, {client['tokenizers']} on the client) - install "
                            f"tokenizers=={client['tokenizers']} on every worker (or the workers' version on the client)")
    other = "numpy matmul" if client["library"] != "numpy matmul" else "oneDNN 3.2.0 matmul (brg:avx512_core)"
    with pytest.raises(WorkerSetupError) as e:  # with the GEMM library too (another than this machine's): one fix
        check_worker_gemm({**worker_identity(enc), "library": other}, client, "h")
    assert str(e.value).endswith(" - install the same bertfeat, NumPy, tokenizers and extras (bertfeat[fast]: oneDNN) "
                                 "on the client and every worker")


def test_check_worker_gemm_names_what_differs_and_its_fix():
    from bertfeat.run.dask import check_worker_gemm

    same = {"library": "oneDNN 3.2.0 matmul (brg:avx512_core)", "cpu": "AMD EPYC", "blas": "openblas 0.3.31 SkylakeX"}
    check_worker_gemm(dict(same), same, "h")  # nothing differs: no error
    with pytest.raises(BertfeatError) as e:
        check_worker_gemm({**same, "library": "numpy matmul"}, same, "h")
    assert str(e.value) == ("worker on h: its products would round otherwise than the client's (library numpy matmul "
                            "here, oneDNN 3.2.0 matmul (brg:avx512_core) on the client) - install the same bertfeat, "
                            "NumPy and extras (bertfeat[fast]: oneDNN) on the client and every worker")
    install = "install the same bertfeat, NumPy and extras (bertfeat[fast]: oneDNN) on the client and every worker"
    for other in ("openblas 0.3.27 SkylakeX", "mkl 2024.0 None", None):  # not the kernel alone
        with pytest.raises(BertfeatError) as e:
            check_worker_gemm({**same, "blas": other}, same, "h")
        assert str(e.value).endswith(" - " + install), other
    with pytest.raises(BertfeatError) as e:  # the client's kernel unknown: nothing to pin the workers to
        check_worker_gemm(same, {**same, "blas": "openblas 0.3.31 None"}, "h")
    assert str(e.value).endswith(" - " + install)
    with pytest.raises(BertfeatError) as e:
        check_worker_gemm({**same, "cpu": "Intel Xeon", "blas": "openblas 0.3.31 Haswell"}, same, "h")
    assert str(e.value) == ("worker on h: its products would round otherwise than the client's (blas openblas 0.3.31 "
                            "Haswell here, openblas 0.3.31 SkylakeX on the client; cpu Intel Xeon here, AMD EPYC on the "
                            "client) - run the job on workers with the client's CPU model, or start the client on the "
                            "workers' kind of machine")


#: `bertfeat ARGS` whose LocalCluster gets a Ctrl-C while its worker starts (the Nanny's start sends it): the moment
#: a user presses Ctrl-C right after starting a Dask run
CTRL_C_AS_THE_WORKER_STARTS = """
import os, signal, sys
import distributed.nanny

start = distributed.nanny.Nanny.start_unsafe
pressed = []


async def start_unsafe(self):
    if not pressed:  # once: the first worker's start
        pressed.append(os.kill(os.getpid(), signal.SIGINT))
    return await start(self)


distributed.nanny.Nanny.start_unsafe = start_unsafe
from bertfeat.cli.app import entry

sys.argv = ["bertfeat", *sys.argv[1:]]
entry()
"""


def test_ctrl_c_while_the_local_cluster_starts_is_one_line(tmp_path, data):
    """A Ctrl-C while the local cluster's worker starts: `Interrupted.` and exit 130, nothing written, no traceback.
    Before, the half-started cluster was left to distributed's closing at exit, which failed on it with a traceback
    (AssertionError: Status.init) below that line (6 of 6 runs). Not asserted: a worker process still spawning may
    still print its own lines after `Interrupted.` (distributed's INFO "reaping stray process", the spawned child's
    traceback as its parent's pipe closes, asyncio's "Task exception was never retrieved"): seen in ~1 run of 3 of
    a clean-clone CI, timing-dependent, left as they are."""
    import subprocess

    from extract_util import tiny_model

    out = tmp_path / "o.parquet"
    p = subprocess.run([sys.executable, "-c", CTRL_C_AS_THE_WORKER_STARTS, "extract", str(data), "-o", str(out),
                        "--engine", "dask", "--model", str(tiny_model())], capture_output=True, text=True, env=_env(),
                       timeout=300)
    assert p.returncode == 130 and p.stderr.startswith("Interrupted.\n"), p.stderr
    assert "Status.init" not in p.stderr, p.stderr
    assert sorted(tmp_path.iterdir()) == []


def test_a_stop_counts_the_parts_on_disk_as_kept(tmp_path):
    """A task running when the stop came writes its part before the client hears of it: the stop said "3 partition(s)
    are kept" and the resume then found 5. The count is the part files in OUTPUT.partial/ when there are more."""
    import bertfeat.run.dask as dask_engine

    run = dask_engine.DaskRun.__new__(dask_engine.DaskRun)
    run.partial = tmp_path / "o.parquet.partial"
    (run.partial / dask_engine.FULL_DIR).mkdir(parents=True)
    run.results = {0: {}, 1: {}, 2: {}}
    for i in range(5):
        (run.partial / dask_engine.FULL_DIR / dask_engine.part_name(i, 5)).write_bytes(b"")
    (run.partial / dask_engine.FULL_DIR / ".part-00005.parquet.tmp-1").write_bytes(b"")  # not yet a part
    assert run.kept() == 5
    run.results = {i: {} for i in range(7)}  # counted, some of them resumed from files the glob does not see
    assert run.kept() == 7


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path):
    """A script calling bertfeat.extract(engine="dask") at its top level, unguarded: each worker process of the local
    cluster imports it (as __mp_main__) and ran the extract again, met the output's lock, and the run failed as
    'RuntimeError: Nanny failed to start.' with a traceback (found by the combinations audit). Both processes now say
    what to do: the worker's import is refused, and the run's error names the guard."""
    import subprocess

    from extract_util import tiny_model, write_csv

    src = write_csv(tmp_path / "in.csv", ["text"], [["one text"], ["two texts"]])
    script = tmp_path / "noguard.py"
    script.write_text(f"import bertfeat\nbertfeat.extract({str(src)!r}, {str(tmp_path / 'o.parquet')!r}, "
                      f"model={str(tiny_model())!r}, engine='dask', workers=1)\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 1
    guard = ('call bertfeat.extract under `if __name__ == "__main__":` in the script (a local Dask cluster\'s worker '
             "processes import it as they start, as every multiprocessing process does)")
    assert ("BertfeatError: bertfeat.extract was called as a new process imported the script that runs it (a local "
            f"Dask cluster's worker, a multiprocessing process) - {guard}") in p.stderr
    assert p.stderr.rstrip().endswith(
        "BertfeatError: the local Dask cluster's worker processes failed to start (Nanny failed to start; a worker's "
        f"own error, if it printed one, is above) - from a Python script, {guard}; else see the workers' error above, "
        "if one printed it (a memory limit, a package the workers cannot import ...); none: a worker process was "
        "killed as it started (out of memory?)"), p.stderr[-2000:]
    assert not (tmp_path / "o.parquet").exists() and not list(tmp_path.glob("o.parquet.*"))
    script.write_text(script.read_text().replace("import bertfeat\n", "import bertfeat\nif __name__ == '__main__':\n    "))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 2


class _InterruptAtFirstPartition(NullProgress):
    """Ctrl-C on the client as the first partition's result comes in (the other tasks still running)."""

    def advance(self, *a, **k):
        raise KeyboardInterrupt


def test_an_interrupt_counts_the_parts_the_running_tasks_still_wrote(data, tmp_path):
    """The note counted the parts on disk when the stop came, and the tasks running then went on writing theirs:
    'Interrupted: 5 partition(s) are kept' where the resume took 7 (found by the combinations audit). On a cluster the
    run started itself, it is closed before the parts are counted: the note's count is the resume's."""
    out = tmp_path / "f.parquet"
    with pytest.raises(KeyboardInterrupt) as stopped:
        bertfeat.extract(**_opts(data, out), engine="dask", workers=2, blocksize=None,
                         progress=_InterruptAtFirstPartition())
    note = stopped.value.resume_note
    m = re.match(r"(\d+) partition\(s\) are kept in ", note)
    assert m, note
    s = bertfeat.extract(**_opts(data, out, resume=True), engine="dask", workers=2, blocksize=None)
    assert s.chunks_resumed == int(m[1]) >= 1


def test_a_ctrl_c_during_the_own_clusters_close_still_says_how_to_resume(data, tmp_path, monkeypatch):
    """A Ctrl-C reaching the client while it closes the cluster it started after a stop (a process group's SIGINT can
    land late) left the stop without its note: a bare 'Interrupted.' and no --resume hint, the parts kept all the same
    (found by audit, 2 of ~8 tries). The stop is now told as it is without the second one, the close done once."""
    import bertfeat.run.dask as dask_engine

    real, closes = dask_engine.close_cluster, []

    def close_then_ctrl_c(client, cluster=None):
        closes.append(cluster)
        real(client, cluster)
        raise KeyboardInterrupt

    monkeypatch.setattr(dask_engine, "close_cluster", close_then_ctrl_c)
    out = tmp_path / "f.parquet"
    with pytest.raises(KeyboardInterrupt) as stopped:
        bertfeat.extract(**_opts(data, out), engine="dask", workers=2, blocksize=None,
                         progress=_InterruptAtFirstPartition())
    assert len(closes) == 1
    m = re.match(r"(\d+) partition\(s\) are kept in (.+); run the same command with --resume to continue$",
                 stopped.value.resume_note)
    assert m and Path(m[2]).is_dir(), stopped.value.resume_note
    monkeypatch.undo()
    s = bertfeat.extract(**_opts(data, out, resume=True), engine="dask", workers=2, blocksize=None)
    assert s.chunks_resumed == int(m[1]) >= 1


def test_a_ctrl_c_as_a_finished_run_closes_its_cluster_says_the_outputs_are_complete(data, tmp_path, monkeypatch):
    """A Ctrl-C landing while a finished run closed the cluster it started (the output dataset in place) was a bare
    'Interrupted.', as if the run were lost (found in a helper's review: every stop in the last ~0.3 s of a run)."""
    import bertfeat.run.dask as dask_engine

    real = dask_engine.close_cluster

    def close_then_ctrl_c(client, cluster=None):
        real(client, cluster)
        raise KeyboardInterrupt

    monkeypatch.setattr(dask_engine, "close_cluster", close_then_ctrl_c)
    out = tmp_path / "f.parquet"
    with pytest.raises(KeyboardInterrupt) as stopped:
        bertfeat.extract(**_opts(data, out), engine="dask", workers=1, blocksize=None)
    assert stopped.value.resume_note == f"{out} and the run's other files were written and are complete"
    assert str(stopped.value) == stopped.value.resume_note
    assert _read_dataset(out).num_rows == N_ROWS
    assert not out.with_name(out.name + ".partial").exists()


def test_a_file_added_to_the_input_says_to_start_over_as_the_local_engine_does(data, tmp_path, client):
    """The Dask manifest's partition count changes with the input's files, and with it the refusal's fix fell back to
    'or use the original settings', which no setting could satisfy; the local engine's words now (a helper's review)."""
    from bertfeat.errors import ResumeError

    src = tmp_path / "corpus"
    shutil.copytree(data, src)
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        extract_dask(_opts(src, out, cache=False), None, _InterruptAfterFirst(), client=client)
    _wait_idle(client)
    shutil.copy(src / "part0.parquet", src / "part9.parquet")
    with pytest.raises(ResumeError) as e:
        extract_dask(_opts(src, out, cache=False, resume=True), None, client=client)
    assert str(e.value) == (f"cannot resume: the settings or the input differ from the interrupted run (input file added: "
                            f"{src / 'part9.parquet'}; partitions: {N_PARTS} -> {N_PARTS + 1}) - rerun with "
                            "overwrite=True instead of resume=True to start over on the input as it is now (every row "
                            "is encoded again: the interrupted run had no vector cache)")


def test_a_local_run_over_a_dask_output_says_what_it_is(data, tmp_path, client, capsys):
    """--overwrite of a Dask run's output directory by the local engine said only 'is a directory - pass -o with a
    file name' (a helper's review): what it is, and the three ways on."""
    from extract_util import run

    out = tmp_path / "o.parquet"
    extract_dask(_opts(data, out), client=client)
    rc, _, err = run(capsys, "extract", data, "-o", out, "--overwrite")  # refused before the model loads
    assert (rc, err) == (1, f"Error: the output {out} is a directory of parts written by --engine dask, and --engine "
                            f"local (the default) writes one file - pass -o with another name, e.g. -o "
                            f"{tmp_path / 'o.local.parquet'}, or remove that directory first (rm -r {out}), or run with "
                            "--engine dask again\n")
    assert (out / "_bertfeat.json").is_file()


def test_ctrl_c_to_the_process_group_is_one_line_and_the_run_resumes(tmp_path, real_sentences):
    """Ctrl-C in a terminal sends SIGINT to the whole process group: the local cluster's worker processes each printed
    a ~30-line KeyboardInterrupt traceback above the run's 'Interrupted: ...' line (found by audit, every try). They
    now leave the stop to the client: stderr is that one line, exit 130, and --resume finishes the run."""
    import subprocess

    from extract_util import tiny_model

    src = tmp_path / "in.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text"])
        w.writerows([i, real_sentences[i % len(real_sentences)]] for i in range(40_000))
    out, partial = tmp_path / "o.parquet", tmp_path / "o.parquet.partial"
    args = [sys.executable, "-m", "bertfeat", "extract", str(src), "-o", str(out), "--id-column", "id", "--engine",
            "dask", "--workers", "2", "--blocksize", "16KiB", "--model", str(tiny_model()), "-q"]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(partial.glob("part-*.parquet")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert re.fullmatch(r"Interrupted: \d+ partition\(s\) are kept in .+o\.parquet\.partial; run the same command "
                        r"with --resume to continue\n", err), err
    done = subprocess.run([*args, "--resume"], capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out, columns=["id"]).column("id").to_pylist() == [str(i) for i in range(40_000)]


def test_max_bad_rows_on_an_own_cluster_names_the_partitions_it_kept(tmp_path, real_sentences):
    """--max-bad-rows passed with --workers (bertfeat's own cluster): the refusal counted the parts when the limit was
    seen, and the tasks still running wrote theirs after (it said 1 kept, 3 were; found by audit). Its words are now
    made once the cluster is closed: the count is the part files a --resume finds."""
    import subprocess

    from extract_util import tiny_model

    src = tmp_path / "bad.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text"])
        for i, t in enumerate(real_sentences[:120]):
            w.writerow([i, "" if i in (3, 10, 16, 70, 100) else t])
    out = tmp_path / "o.parquet"
    p = subprocess.run(["bertfeat", "extract", str(src), "-o", str(out), "--id-column", "id", "--max-bad-rows", "2",
                        "--engine", "dask", "--workers", "2", "--blocksize", "1KiB", "--model", str(tiny_model()), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    said = re.search(r"\(the (\d+) finished partition\(s\) are kept in (\S+)\)", p.stderr)
    assert said, p.stderr
    parts = sorted(Path(said.group(2)).glob("part-*.parquet"))
    assert int(said.group(1)) == len(parts) > 0


def test_a_worker_lost_as_the_model_loads_is_a_cluster_failure(tmp_path, client, data, monkeypatch):
    """A worker killed while the model was registered on the workers (its plugin: an out-of-memory kill as a large
    model loads) raised distributed's CommClosedError, an OSError: the run said 'OUTPUT.partial: ... Stream is closed -
    check the path, its permissions and the free disk space' and kept the partial directory, which then refused the
    plain rerun. It is the cluster's failure now: said so, nothing kept, and the plain rerun runs."""
    from distributed import Client
    from distributed.comm.core import CommClosedError

    from bertfeat.run.dask_cluster import ClusterError
    from extract_util import tiny_model

    def lost(self, *args, **kwargs):
        raise CommClosedError("in <TCP (closed) ConnectionPool.register_worker_plugin>: Stream is closed")

    out = tmp_path / "o.parquet"
    with monkeypatch.context() as m:
        m.setattr(Client, "register_plugin", lost)
        with pytest.raises(ClusterError) as e:
            bertfeat.extract(str(data), out, model=tiny_model(), engine="dask", client=client)
    assert e.value.message == (
        "a Dask worker was lost while the model was loaded on the workers (in <TCP (closed) ConnectionPool."
        "register_worker_plugin>: Stream is closed): killed, or out of memory - give the workers more memory (fewer "
        "threads or workers per machine), then rerun (with resume=True if partitions had finished)")
    assert not out.exists() and not list(tmp_path.glob("o.parquet.*"))
    s = bertfeat.extract(str(data), out, model=tiny_model(), engine="dask", client=client)
    assert s.rows_written == N_ROWS



def test_a_blocksize_that_cuts_the_input_into_too_many_partitions_is_refused(tmp_path, client):
    """--blocksize 1 cut a 174 KB CSV into 174,710 partitions, and the run hung counting their rows; a cut into more
    than 10,000 partitions by a blocksize under 64 KiB is refused before anything is written (the small blocksizes
    the tests cut small inputs with stay taken)."""
    from bertfeat.errors import BertfeatError
    from extract_util import tiny_model, write_csv

    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence number {i} with a few words"] for i in range(600)])
    out = tmp_path / "o.parquet"
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, out, model=tiny_model(), engine="dask", client=client, blocksize=1)
    n = src.stat().st_size
    assert e.value.message == (f"blocksize=1 cuts the input into {n:,} partitions, each a task and a part file (~75 ms "
                               "of a worker's time whatever its size) - give blocksize='64KiB' or more (the default, "
                               "8MiB, suits most inputs)")
    assert not out.exists() and not list(tmp_path.glob("o.parquet*"))
    assert bertfeat.extract(src, out, model=tiny_model(), engine="dask", client=client, blocksize=4096).rows_written == 600
