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


def test_a_file_named_with_wildcards_is_listed_again_as_that_file(tmp_path, capsys, monkeypatch):
    """report[1].csv is read as that file (readers.paths.is_pattern); removed during the run, the check after the last
    row listed its name as a glob, and said report1.csv, a file the run never reads, was "added" to its input."""
    src = corpus(tmp_path / "report[1].csv", 40)
    corpus(tmp_path / "report1.csv", 10)  # what report[1].csv matches as a glob
    change_after_the_last_row(monkeypatch, src.unlink)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
    assert (rc, err) == (1, f"Error: {src} changed while it was read (removed) - run the command again once the file "
                            "is complete\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report1.csv"]


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


# --------------------------------------------------------------------------- what size and mtime alone did not see
def rewrite_keeping_mtime(path):
    """An editor or sync tool that keeps the modification time: other rows of the same size, the mtime set back
    (its ctime moves: only the kernel sets it)."""
    st = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"cats", b"bats"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def replace_by_rename(path):
    """`mv new.csv grow.csv` of a file of the same size and modification time: another inode under the name."""
    st = os.stat(path)
    new = path.with_name("new.csv")
    new.write_bytes(path.read_bytes().replace(b"cats", b"bats"))
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, path)


class TestTheIdentityWithinARun:
    """Found by an audit: the identity taken at the start was a file's size and mtime, and a glob's files as they
    were then, so a same-size rewrite with its mtime set back, a rename of a same-size same-mtime file over the input,
    and a file added to a glob or folder during the run gave rc 0 and features of a mix of old and new rows. Within a
    run the check now compares each file's size, mtime, ctime, inode and device and the files the path names."""

    @pytest.mark.parametrize("how", ["rewritten", "renamed"])
    def test_a_file_changed_with_its_size_and_mtime_kept_fails_the_run(self, tmp_path, capsys, monkeypatch, how):
        src = corpus(tmp_path / "grow.csv")
        inode = src.stat().st_ino
        change_after_the_last_row(monkeypatch, lambda: (rewrite_keeping_mtime if how == "rewritten" else replace_by_rename)(src))
        before = src.read_bytes()
        rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "grow.parquet", "--model", tiny_model(), "-q")
        what = ("rewritten or its attributes changed, its size and modification time kept (its ctime moved)"
                if how == "rewritten" else
                f"replaced by another file (inode {inode} -> {src.stat().st_ino}), its size and modification time kept")
        assert (rc, err) == (1, f"Error: {src} changed while it was read ({what}) - run the command again once the "
                                "file is complete\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["grow.csv"]  # nothing published, no partial run
        assert src.read_bytes() == before.replace(b"cats", b"bats")  # the user's file as they left it

    @pytest.mark.parametrize("how", ["added", "removed"])
    def test_a_file_added_to_or_removed_from_a_glob_fails_the_run(self, tmp_path, capsys, monkeypatch, how):
        d = tmp_path / "d"
        d.mkdir()
        a, b, c = (d / f"{n}.parquet" for n in "abc")
        for f in (a, b):
            write_parquet(f, 40)
        change_after_the_last_row(monkeypatch, lambda: write_parquet(c, 40) if how == "added" else b.unlink())
        pattern = str(d / "*.parquet")
        rc, _, err = run(capsys, "extract", pattern, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
        assert (rc, err) == (1, f"Error: {pattern} changed while it was read ({c if how == 'added' else b}: {how}) - "
                                "run the command again once its files are complete\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
        assert sorted(p.name for p in d.iterdir()) == (["a.parquet", "b.parquet", "c.parquet"] if how == "added"
                                                       else ["a.parquet"])

    def test_a_second_file_matching_a_csv_glob_fails_the_run(self, tmp_path, capsys, monkeypatch):
        """A glob of CSV files matching one file reads that one: another one matching it by the end is named."""
        src, other = corpus(tmp_path / "a.csv", 40), tmp_path / "b.csv"
        change_after_the_last_row(monkeypatch, lambda: corpus(other, 10))
        pattern = str(tmp_path / "*.csv")
        rc, _, err = run(capsys, "extract", pattern, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
        assert (rc, err) == (1, f"Error: {pattern} changed while it was read ({other}: added) - run the command again "
                                "once its files are complete\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]
        assert src.exists()

    def test_a_parquet_file_added_to_a_folder_fails_the_run(self, tmp_path, capsys, monkeypatch):
        """A folder of one file: the one added is named (its files, not the file, as the folder is no one file)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        d = tmp_path / "d"
        d.mkdir()
        pq.write_table(pa.table({"text": [f"a sentence {i}" for i in range(40)]}), d / "a.parquet")
        new = d / "sub" / "b.parquet"
        change_after_the_last_row(monkeypatch, lambda: (new.parent.mkdir(), pq.write_table(pa.table({"text": ["new"]}), new)))
        rc, _, err = run(capsys, "extract", d, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
        assert (rc, err) == (1, f"Error: {d} changed while it was read ({new}: added) - run the command again once its "
                                "files are complete\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]

    def test_what_is_not_input_may_come_and_go_and_the_output_inside_the_folder_is_written(self, tmp_path, capsys,
                                                                                            monkeypatch):
        """Hidden files, a .partial folder's parts and bertfeat's own outputs are no input: they appearing during the
        run changes nothing (here the run's own output, written inside the folder it reads, and its partial run)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        d = tmp_path / "d"
        d.mkdir()
        pq.write_table(pa.table({"text": [f"a sentence {i}" for i in range(40)]}), d / "a.parquet")
        out = d / "o.parquet"
        assert run(capsys, "extract", d, "-o", out, "--model", tiny_model(), "-q")[0] == 0

        def litter():
            (d / ".sync-tmp.parquet").write_bytes(b"x")
            (d / "_SUCCESS.parquet").write_bytes(b"x")
            pq.write_table(pa.table({"text": ["x"]}).replace_schema_metadata({"bertfeat": "{}"}), d / "other.parquet")

        change_after_the_last_row(monkeypatch, litter)
        rc, _, err = run(capsys, "extract", d, "-o", out, "--model", tiny_model(), "-q", "--overwrite", "--chunk-rows", 8)
        assert (rc, err) == (0, "")
        assert pq.read_table(out).num_rows == 40

    def test_a_url_rewritten_with_its_size_kept_fails_the_run(self, tmp_path, capsys, monkeypatch):
        """An fsspec URL has what its store gives (size; mtime, ETag, generation, created ... when it gives them): the
        in-memory store's creation time shows a same-size rewrite its size alone did not."""
        assert rewrite_a_memory_url(tmp_path, capsys, monkeypatch, "inputid") == (
            1, "Error: memory://inputid/c.csv changed while it was read (modified, its size unchanged) - run the command "
               "again once the file is complete\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]

    @pytest.mark.parametrize("header", ["Last-Modified", "Digest"])
    def test_a_url_whose_store_gives_http_headers_rewritten_with_its_size_kept_fails_the_run(self, tmp_path, capsys,
                                                                                              monkeypatch, header):
        """Found by review: fsspec's HTTP store gives a file's size and the response's ETag, Content-MD5, Digest and
        Last-Modified headers; Last-Modified and Digest were not compared, so a server without ETag (python -m
        http.server, most static servers) showed no same-size rewrite, though docs/limitations.md says it does. Here
        the in-memory store answers as such a server: the size and that one header, which a rewrite changes."""
        from fsspec.implementations.memory import MemoryFileSystem

        real_info = MemoryFileSystem.info

        def http_info(self, path, **kwargs):
            info = real_info(self, path, **kwargs)
            if "created" not in info:  # a folder
                return info
            created = info.pop("created")
            return {**info, header: f"stamp {created!r}"}

        monkeypatch.setattr(MemoryFileSystem, "info", http_info)
        assert rewrite_a_memory_url(tmp_path, capsys, monkeypatch, "inputhttp") == (
            1, "Error: memory://inputhttp/c.csv changed while it was read (modified, its size unchanged) - run the "
               "command again once the file is complete\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]

    def test_a_copy_with_its_times_kept_still_resumes(self, tmp_path, capsys, monkeypatch):
        """`cp -p` of the input to a new disk (a new inode and ctime; the same bytes, size and mtime) keeps resuming:
        --resume compares size and mtime only, as before."""
        import shutil

        from extract_util import Interrupt
        import bertfeat.run.progress

        src = corpus(tmp_path / "c.csv", 12)
        out = tmp_path / "o.parquet"
        args = ["--model", tiny_model(), "--chunk-rows", 3, "-q"]
        monkeypatch.setattr(bertfeat.run.progress, "make_progress", lambda *a, **k: Interrupt(2))
        assert run(capsys, "extract", src, "-o", out, *args)[0] == 130
        monkeypatch.undo()
        copy = tmp_path / "copy.csv"
        shutil.copy2(src, copy)  # cp -p: the bytes and the times
        os.replace(copy, src)
        rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
        assert (rc, err) == (0, "")
        assert pq_rows(out) == 12


def rewrite_a_memory_url(tmp_path, capsys, monkeypatch, folder: str) -> tuple[int, str]:
    """extract of memory://FOLDER/c.csv, rewritten with its size kept once its last row is read -> (rc, stderr)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    data = corpus(tmp_path / "c.csv").read_bytes()
    fs.pipe(f"/{folder}/c.csv", data)
    try:
        change_after_the_last_row(monkeypatch, lambda: fs.pipe(f"/{folder}/c.csv", data.replace(b"cats", b"bats")))
        rc, _, err = run(capsys, "extract", f"memory://{folder}/c.csv", "-o", tmp_path / "o.parquet", "--model",
                         tiny_model(), "-q")
    finally:
        fs.rm(f"/{folder}", recursive=True)
    return rc, err


def pq_rows(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).num_rows


def write_parquet(path, n):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [f"{path.stem} sentence {i}" for i in range(n)]}), path)
