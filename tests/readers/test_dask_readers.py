"""The readers and the run's own store on the Dask engine's path, beside the local engine's (an in-process
LocalCluster of one one-thread worker: a monkeypatch reaches the worker's tasks).

JSONL ids whose kind the first lines do not decide are judged as on the local engine at every blocksize; a failing
run store (OUTPUT.partial/.dedup/, no cache) is named as the run's store with the fix for its file system.
"""

from __future__ import annotations

import csv
import json
import sqlite3

import pyarrow.parquet as pq
import pytest

from conftest import dask_local_client

pytest.importorskip("distributed")

import bertfeat  # noqa: E402
from bertfeat.readers import open_input  # noqa: E402
from bertfeat.cache.store import CacheError, VectorStore  # noqa: E402
from extract_util import run, tiny_model, write_csv  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with dask_local_client(n_workers=1, threads_per_worker=1, processes=False) as c:
        yield c


def _rejects(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [[r[0], r[2]] for r in list(csv.reader(fh))[1:]]  # row, reason


@pytest.fixture(scope="module")
def late_ids(tmp_path_factory):
    """1,001 lines whose id is null (no usable id in the head's 1,000 lines), then 40 integer ids, then 40 strings."""
    path = tmp_path_factory.mktemp("ids") / "ids.jsonl"
    lines = [json.dumps({"id": None, "text": "x"}) for _ in range(1001)]
    lines += [json.dumps({"id": k if k < 40 else f"s{k}", "text": f"sentence {k} with a few words"}) for k in range(80)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_ids_past_the_head_same_rows_on_both_engines(client, late_ids, tmp_path):
    """The file's first integer-or-string id (row 1001, past the head) decides: the local engine writes int64 ids
    (it failed: "column 'id' cannot be stored as string"), and the Dask engine rejects the same rows at every
    blocksize (each partition decided on its own first id: 4 KiB kept 40 + 33 string ids, none 40 + 0)."""
    local = tmp_path / "local.parquet"
    s = bertfeat.extract(late_ids, local, model=tiny_model(), id_column="id", on_bad_row="skip")
    assert (s.rows_written, s.rows_rejected) == (40, 1041)
    assert pq.read_schema(local).field("id").type == "int64"
    assert pq.read_table(local).column("id").to_pylist() == list(range(40))
    want = _rejects(tmp_path / "local.parquet.rejects.csv")
    assert want[:2] == [["0", "null id"], ["1", "null id"]] and len(want) == 1041
    assert want[1001:1003] == [["1041", 'id "s40" is a string, but the ids before it are integers; --id-column id:str reads every id as the line wrote it'],
                                         ["1042", 'id "s41" is a string, but the ids before it are integers; --id-column id:str reads every id as the line wrote it']]
    for blocksize in (4096, 16384, None):
        out = tmp_path / f"dask-{blocksize}.parquet"
        d = bertfeat.extract(late_ids, out, model=tiny_model(), id_column="id", on_bad_row="skip", engine="dask",
                             client=client, blocksize=blocksize)
        assert (d.rows_written, d.rows_rejected) == (40, 1041), blocksize
        t = pq.read_table(out)
        assert t.schema.field("id").type == "int64", blocksize
        assert t.column("id").to_pylist() == list(range(40)), blocksize
        assert _rejects(tmp_path / f"dask-{blocksize}.parquet.rejects.csv") == want, blocksize
    assert len(open_input(str(late_ids), id_column="id").partitions(4096, 4)) >= 6  # 4 KiB cuts the file


def _failing_open(fail_from: int):
    """VectorStore._open that raises SQLite's "disk I/O error" from its ``fail_from``-th call on (1: every call)."""
    calls = []
    real = VectorStore._open

    def _open(self):
        calls.append(self.path)
        if len(calls) >= fail_from:
            raise sqlite3.OperationalError("disk I/O error")
        real(self)

    return _open, calls


@pytest.mark.parametrize("fail_from, where", [(1, "client"), (2, "task")])
def test_run_store_disk_error_names_the_run_store_not_a_cache(client, tmp_path, capsys, monkeypatch, fail_from, where):
    """--no-cache: the run's duplicates store OUTPUT.partial/.dedup/ failing (on the client's first open, or in a
    task) is the run's temporary store of encoded rows, with the fix for a full or too-small file system (it said
    "cannot open the cache ... check the cache directory is writable ..." though no cache was asked for)."""
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence number {i}"] for i in range(20)])
    out = tmp_path / "o.parquet"
    _open, calls = _failing_open(fail_from)
    monkeypatch.setattr(VectorStore, "_open", _open)
    db = tmp_path / "o.parquet.partial" / ".dedup" / "vectors.sqlite3"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--engine", "dask", "--scheduler",
                     client.scheduler.address, "--no-cache", "--blocksize", "none", "-q")
    assert rc == 1, err
    assert err.strip().splitlines()[-1] == (
        f"Error: cannot open the run's temporary store of encoded rows {db} (disk I/O error) - its file system may be "
        "full or too small for the file, or the disk failed: free disk space, then rerun the same command with "
        "--resume, or write to another file system with -o")
    assert calls and all(p == db for p in calls), calls
    assert len(calls) == fail_from, calls  # where: the client's open, or the task's after it
    with pytest.raises(CacheError) as e:
        bertfeat.extract(src, tmp_path / "p.parquet", model=tiny_model(), engine="dask", client=client, cache=False,
                         blocksize=None)
    assert e.value.message.startswith("cannot open the run's temporary store of encoded rows ")
    assert e.value.message.endswith(" then rerun the same command with resume=True, or write to another file system "
                                    "with output")


@pytest.mark.parametrize("suffix", [".zst", ".xz"])
def test_zstd_and_xz_inputs_give_the_local_engines_rows(client, tmp_path, suffix):
    """A .csv.zst on the Dask engine was "unexpected ValueError: Compression type zstd not supported - this is a bug"
    (its partitions were opened through fsspec's compression, which needs the zstandard package); .xz was not read at
    all. Both engines now decompress through readers.stream.decompressed: the same rows and vectors."""
    import lzma

    import pyarrow as pa

    text = "id,text\n" + "".join(f"{i},sentence number {i}\n" for i in range(40))
    src = tmp_path / f"s.csv{suffix}"
    if suffix == ".xz":
        src.write_bytes(lzma.compress(text.encode()))
    else:
        with pa.CompressedOutputStream(str(src), "zstd") as f:
            f.write(text.encode())
    local = bertfeat.extract(src, tmp_path / "l.parquet", model=tiny_model(), id_column="id", cache=False)
    dask = bertfeat.extract(src, tmp_path / "d.parquet", model=tiny_model(), id_column="id", cache=False,
                            engine="dask", client=client)
    assert local.rows_written == dask.rows_written == 40
    a, b = pq.read_table(tmp_path / "l.parquet"), pq.read_table(tmp_path / "d.parquet")
    assert a.column("id").to_pylist() == b.column("id").to_pylist() == [str(i) for i in range(40)]
    assert a.column("embedding").to_pylist() == b.column("embedding").to_pylist()


@pytest.mark.parametrize("suffix, compress, detail", [
    (".gz", "gzip", "Truncated compressed stream"), (".bz2", "bz2", "Truncated compressed stream"),
    (".xz", "lzma", "Compressed file ended before the end-of-stream marker was reached")])
def test_a_compressed_file_cut_short_past_its_head_is_one_line_naming_it(client, tmp_path, capsys, suffix, compress,
                                                                          detail):
    """A .csv.gz / .csv.bz2 cut short after its first MiB (the head the client reads is whole): the workers' count
    of its rows met the truncated stream. It was Python's EOFError, said without the file ("unexpected end of a
    file ... rerun the command that wrote it"), and the bug's rule left OUTPUT.partial/ behind; it is now the local
    engine's line naming the file (the decompressor's words too: both engines read through readers.stream), and the
    partial directory goes (no partition finished)."""
    import importlib

    lines = "".join(f"sentence {i} of a file long enough to pass its head, {i * 7919 % 10007}\n" for i in range(60000))
    whole = importlib.import_module(compress).compress(("text\n" + lines).encode())
    src = tmp_path / f"long.csv{suffix}"
    src.write_bytes(whole[: len(whole) * 3 // 4])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--engine", "dask", "--scheduler",
                     client.scheduler.address, "-q")
    assert rc == 1, err
    assert err.strip().splitlines()[-1] == (
        f"Error: {src}: cannot read the file ({detail}) - check the file is complete and its compression")
    assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_files_joined_with_their_headers_same_bad_rows_on_both_engines(client, tmp_path, capsys, fmt):
    """CSV / TSV files joined with cat keep each file's header line, which was encoded as a row (the text 'text', the
    id 'id' written, exit 0). Each is a bad row (repeated-header): the run stops at the first, naming it and how to
    join the files; skipped, the local engine and the Dask engine at every blocksize write the same rows and rejects."""
    sep = "," if fmt == "csv" else "\t"
    files = []
    for name, first in (("a", 0), ("b", 300), ("c", 600)):
        files.append(write_csv(tmp_path / f"{name}.{fmt}", ["id", "text"],
                               [[f"r{i}", f"sentence number {i}"] for i in range(first, first + 300)], sep))
    joined = tmp_path / f"all.{fmt}"
    joined.write_bytes(b"".join(f.read_bytes() for f in files))
    reason = (f'the header line again ("id{sep.replace(chr(9), chr(92) + "t")}text"), as where the next file starts in '
              f"files joined with their header lines (cat a.{fmt} b.{fmt} > all.{fmt})")
    fix = "join the files without their header lines but the first (e.g. awk 'NR == 1 || FNR > 1' a.csv b.csv > all.csv)"
    rc, _, err = run(capsys, "extract", joined, "-o", tmp_path / "x.parquet", "-m", tiny_model(), "-q")
    assert (rc, err) == (1, f"Error: {joined} row 300: {reason} - {fix}, or delete the line; or pass --on-bad-row "
                            "skip to write it to the rejects file and go on\n")
    assert not (tmp_path / "x.parquet").exists()
    local = tmp_path / "local.parquet"
    s = bertfeat.extract(joined, local, model=tiny_model(), id_column="id", on_bad_row="skip")
    assert (s.rows_written, s.rows_rejected) == (900, 2)
    assert pq.read_table(local).column("id").to_pylist() == [f"r{i}" for i in range(900)]
    want = _rejects(tmp_path / "local.parquet.rejects.csv")
    assert want == [["300", reason], ["601", reason]]
    for blocksize in (4096, 16384, None):
        out = tmp_path / f"dask-{blocksize}.parquet"
        d = bertfeat.extract(joined, out, model=tiny_model(), id_column="id", on_bad_row="skip", engine="dask",
                             client=client, blocksize=blocksize)
        assert (d.rows_written, d.rows_rejected) == (900, 2), blocksize
        assert pq.read_table(out).column("id").to_pylist() == [f"r{i}" for i in range(900)], blocksize
        assert _rejects(tmp_path / f"dask-{blocksize}.parquet.rejects.csv") == want, blocksize
    assert len(open_input(str(joined)).partitions(4096, 4)) >= 6
