"""The input changing while `extract` reads it (a pipeline's corpus still being written, or rewritten): the run fails
before anything is published, saying what changed, and the input's identity (size, modification time) is in the
output's provenance. The Dask engine's side is in test_dask_engine.py."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

import bertfeat.run.local as local_engine
from extract_util import metadata, run, summary_line, tiny_model, write_csv

N = 300


def corpus(path, n=N):
    return write_csv(path, ["id", "text"], [[f"r{i}", f"sentence number {i} about {'cats' if i % 2 else 'dogs'}"]
                                            for i in range(n)])


def change_after_the_last_row(monkeypatch, change):
    """``change()`` runs once the local engine's reader has handed out its last chunk (the rows appended then are never
    read: what happened to a corpus still being copied into place)."""
    real = local_engine.iter_chunks

    def iter_chunks(source, chunk_rows):
        yield from real(source, chunk_rows)
        change()

    monkeypatch.setattr(local_engine, "iter_chunks", iter_chunks)


def grow(path, rows=100):
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(f"x{i},an appended sentence {i}\n" for i in range(rows))


def rewrite_same_size(path):
    data = path.read_bytes()
    path.write_bytes(data.replace(b"cats", b"bats"))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))  # a coarse clock must not hide it


@pytest.mark.parametrize("how", ["grown", "rewritten", "removed"])
def test_an_input_that_changes_while_it_is_read_fails_the_run_and_publishes_nothing(tmp_path, capsys, monkeypatch, how):
    """Found by the audit: a CSV appended to during the run gave rc 0, 'rows read 300' and no word, and an output
    newer than its input, so make took it for up to date with the appended rows missing."""
    src = corpus(tmp_path / "grow.csv")
    size = src.stat().st_size
    change = {"grown": lambda: grow(src), "rewritten": lambda: rewrite_same_size(src), "removed": src.unlink}[how]
    change_after_the_last_row(monkeypatch, change)
    out = tmp_path / "grow.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--chunk-rows", 64, "--model", tiny_model(), "--pca", 2,
                     "--on-bad-row", "skip", "-q")
    what = {"grown": f"size {size:,} -> {src.stat().st_size if src.exists() else 0:,} bytes",
            "rewritten": "modified, its size unchanged", "removed": "removed"}[how]
    assert (rc, err) == (1, f"Error: {src} changed while it was read ({what}) - run the command again once the file is "
                            "complete\n")
    # nothing published, and no partial run left to resume (an input error: failures.py removes it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if how == "removed" else ["grow.csv"])
    if how == "removed":
        return
    monkeypatch.undo()
    rc, _, err = run(capsys, "extract", src, "-o", out, "--chunk-rows", 64, "--model", tiny_model(), "--pca", 2)
    assert rc == 0, err
    assert summary_line(err, "rows read") == f"rows read {N + (100 if how == 'grown' else 0)}"


def test_a_dataset_input_names_the_file_that_changed(tmp_path, capsys, monkeypatch):
    """A folder (or glob) of Parquet files: the file that changed is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "d"
    d.mkdir()
    for name in ("a", "b"):
        pq.write_table(pa.table({"text": [f"{name} sentence {i}" for i in range(40)]}), d / f"{name}.parquet")
    b = d / "b.parquet"
    size = b.stat().st_size
    change_after_the_last_row(monkeypatch, lambda: pq.write_table(pa.table({"text": [f"new {i}" for i in range(400)]}), b))
    rc, _, err = run(capsys, "extract", d, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
    assert (rc, err) == (1, f"Error: {d} changed while it was read ({b}: size {size:,} -> {b.stat().st_size:,} "
                            "bytes) - run the command again once its files are complete\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_the_provenance_records_the_inputs_identity(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv", 20)
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")[0] == 0
    st = os.stat(src)
    files = [{"path": str(src), "size": st.st_size, "mtime_ns": st.st_mtime_ns}]
    sha = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    assert metadata(out)["input_identity"] == {"files": 1, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
    out_npy = tmp_path / "o.npy"  # the .npy's provenance file too
    assert run(capsys, "extract", src, "-o", out_npy, "--model", tiny_model(), "-q")[0] == 0
    assert json.loads((tmp_path / "o.npy.json").read_text())["input_identity"]["size"] == st.st_size


def test_standard_input_has_no_identity_to_check(tmp_path):
    """`-` cannot be stat'ed as a file: not checked, nothing recorded (a real pipe into a real process)."""
    import subprocess
    import sys

    data = corpus(tmp_path / "c.csv", 10).read_bytes()
    out = tmp_path / "o.parquet"
    p = subprocess.run([sys.executable, "-m", "bertfeat", "extract", "-", "--input-format", "csv", "-o", str(out),
                        "--model", str(tiny_model()), "-q"], input=data, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    meta = metadata(out)
    assert meta["input"] == "-" and "input_identity" not in meta
