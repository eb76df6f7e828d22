"""Helpers for the `bertfeat extract` tests (not a test module).

Every test drives the real command line, ``bertfeat.cli.app.main([...])`` in-process (or a
subprocess where a real process matters: stdin, SIGKILL), and reads the output back with
pyarrow / numpy.
"""

from __future__ import annotations

import atexit
import csv
import functools
import hashlib
import io
import os
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bertfeat.cli.app import main
from bertfeat.model.encoder import Encoder

TOL = 1e-6


@functools.cache
def rows_bit_for_bit() -> bool:
    """Does fp32 run on oneDNN's brgemm kernels here, where a row's vector is the same bit for bit in any batch? On
    NumPy's BLAS (no oneDNN; AVX2-only CPUs) a row rounds by its batch, within ~1e-6 (docs/precision.md)."""
    from bertfeat.ops import gemm

    return gemm.fp32_library()[0] == "onednn"  # (not gemm.resolve: it reads knobs a test may set later, once)


#: the reason a test of bit-for-bit rows is skipped where they are not
NOT_BIT_FOR_BIT = ("fp32 runs on NumPy's BLAS here (no oneDNN brgemm kernel on this CPU or install): a row's vector "
                   "rounds by its batch, within ~1e-6, not bit for bit (docs/precision.md, Batch independence)")


@functools.lru_cache(maxsize=None)
def tiny_model() -> Path:
    """A small random-weight BERT (hidden 32, 2 layers, uncased vocab, max length 128), made once per process."""
    from ckpt import cached_checkpoint

    root = Path(tempfile.mkdtemp(prefix="bertfeat-tiny-"))
    atexit.register(shutil.rmtree, root, True)
    return cached_checkpoint(root, hidden=32, layers=2, heads=2, max_position=128, seed=7)


def tiny_st_model(model: Path) -> Path:
    """A copy of the tiny model at ``model`` with sentence-transformers modules Transformer -> mean Pooling ->
    Normalize (its own embedding: unit vectors)."""
    import json

    shutil.copytree(tiny_model(), model)
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    for sub, cfg in (("1_Pooling", {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}),
                     ("2_Normalize", {})):
        (model / sub).mkdir()
        (model / sub / "config.json").write_text(json.dumps(cfg))
    return model


@functools.lru_cache(maxsize=None)
def tiny_encoder() -> Encoder:
    return Encoder(tiny_model())


@functools.lru_cache(maxsize=None)
def minilm() -> Encoder:
    """The default model, all-MiniLM-L6-v2 (what `bertfeat extract` uses without --model)."""
    return Encoder()


def run(capsys, *args) -> tuple[int, str, str]:
    """`bertfeat ARGS` in-process -> (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def write_csv(path: Path, header: list[str], rows: list[list], delimiter: str = ",") -> Path:
    """A CSV/TSV file written by Python's csv module (quotes where needed)."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=delimiter, lineterminator="\n",
                   quoting=csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE, escapechar=None)
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


_PEAK = """
def peak():
    # this process's peak resident memory in MiB: VmHWM, which starts afresh at exec (ru_maxrss keeps the forking
    # parent's peak, here pytest's few hundred MiB, which would hide any growth below it)
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmHWM:"))) // 1024
"""


def in_fresh_process(script: str, *args) -> list[str]:
    """Run ``script`` (which may call ``peak()``) in a new interpreter on this tree with ``args``: the words it printed."""
    import os
    import subprocess
    import sys

    if not Path("/proc/self/status").is_file():
        import pytest

        pytest.skip("peak memory is read from /proc (Linux)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-c", _PEAK + script, *map(str, args)], capture_output=True, text=True,
                          env=env, check=True).stdout.split()


def write_jsonl(path: Path, objs: list) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def read_table(path: Path) -> pa.Table:
    return pq.read_table(path)


def embeddings(t: pa.Table) -> np.ndarray:
    col = t.column("embedding").combine_chunks()
    return col.values.to_numpy(zero_copy_only=False).reshape(len(t), col.type.list_size)


def metadata(path: Path) -> dict:
    """The provenance of a Parquet output (schema metadata key 'bertfeat')."""
    return json.loads(pq.read_schema(path).metadata[b"bertfeat"])


def assert_close(X: np.ndarray, Y: np.ndarray, tol: float = TOL):
    """|X - Y| <= tol, relative to the scale of Y when its values exceed 1 (float32 rounding grows with them:
    the random-weight test model has features of size ~3, MiniLM's are < 1 so there it is absolute)."""
    assert X.shape == Y.shape, (X.shape, Y.shape)
    assert X.dtype == np.float32
    if not X.size:
        return
    err = float(np.max(np.abs(X.astype(np.float64) - Y.astype(np.float64))))
    bound = tol * max(1.0, float(np.max(np.abs(Y))))
    assert err <= bound, f"max abs difference {err:.3g} > {bound:.3g}"


def no_leftovers(out: Path) -> list[str]:
    """Files the run left beside `out` that look like output (the output, its partial dir, temporaries); none when
    the folder is gone (a failed run removes the empty output folder it made)."""
    if not out.parent.exists():
        return []
    return sorted(p.name for p in out.parent.iterdir()
                  if p.name.startswith(out.name) or p.name.startswith("." + out.name))


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under ``root`` (the listing: a SQLite file's -wal / -shm siblings too) -> the sha256 of a file's
    bytes, ``dir``, or a symbolic link's target: equal before and after a command that must change nothing there."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link -> " + os.readlink(p)
        else:
            out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def summary_line(err: str, key: str) -> str:
    """The closing summary line starting with `key` (e.g. 'rows rejected')."""
    for line in err.splitlines():
        if line.startswith(key + " ") or line == key:
            return " ".join(line.split())
    raise AssertionError(f"no summary line {key!r} in:\n{err}")


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A second sentence, with a comma.",
    'She said "hello" and left.',
    "Multi-line\ntext in one cell",
    "Ünïcödé façade naïve café — ok",
    "short",
    "What is the capital of France?",
    "Numbers like 3.14 and 42 are text too.",
    "   leading and trailing spaces   ",
    "tab\tinside",
    "emoji 🙂 and 中文字符",
    "The last one.",
]


class Interrupt:
    """A progress sink (progress.NullProgress's methods) that presses Ctrl-C after ``after`` chunks; ``inside_compiled``:
    as a Ctrl-C (or SIGTERM) that lands in a numba kernel reaches Python: "cause" (or True), a SystemError whose
    __cause__ is the interrupt, its context suppressed (CPython's check of the kernel call's result, as numba 0.68
    gives it: tests/run/test_failures.py interrupts a real kernel); "context", a SystemError raised while handling it
    (numba 0.61's wrapper: 274 of 300 SIGTERMs sent during kernel calls arrived so, the rest as the interrupt itself)."""

    def __init__(self, after, inside_compiled=False, interrupt=KeyboardInterrupt):
        self.after, self.n, self.inside, self.interrupt = after, 0, inside_compiled, interrupt

    def start(self, total_rows, total_bytes): ...
    def note(self, message): ...
    def parts(self, done, in_flight, total): ...
    def stop(self): ...

    def advance(self, rows, tokens, bytes_read):
        self.n += 1
        if self.n == self.after:
            if not self.inside:
                raise self.interrupt
            try:
                raise self.interrupt
            except KeyboardInterrupt as e:
                if self.inside == "context":
                    raise SystemError("<function masked_softmax_> returned a result with an exception set")
                raise SystemError("CPUDispatcher(<function masked_softmax_>) returned a result with an exception "
                                  "set") from e


def assert_dask_and_sklearn_agree(model: Path, texts: list[str], tmp_path: Path, client, parts: int = 2) -> list[int]:
    """A model on the other two ways in: ``bertfeat.extract(..., engine="dask")`` on ``client`` writes the local
    engine's output (the same ids in input order, the same token counts, features within TOL), and
    ``bertfeat.sklearn.TextFeatures(model)`` gives ``Encoder(model).encode`` within TOL.

    Input: a Parquet dataset of ``parts`` files (one Dask partition each) with a string id column; the local run cuts
    its chunks at the files' boundaries, so every row meets the same batch neighbours on both engines. Returns the
    rows' token counts."""
    import bertfeat
    from bertfeat.sklearn import TextFeatures

    assert len(texts) % parts == 0, "the texts must split evenly over the files"
    per = len(texts) // parts
    ids = [f"doc-{i:03d}" for i in range(len(texts))]
    src = tmp_path / "in"
    src.mkdir()
    for k in range(parts):
        pq.write_table(pa.table({"id": ids[k * per:(k + 1) * per], "text": texts[k * per:(k + 1) * per]}),
                       src / f"part{k}.parquet")
    local, dask_out = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    bertfeat.extract(src, local, model=str(model), id_column="id", chunk_rows=per)
    s = bertfeat.extract(src, dask_out, model=str(model), id_column="id", engine="dask", client=client,
                         blocksize=None)
    files = sorted(dask_out.glob("part-*.parquet"))
    assert len(files) == parts and s.rows_written == len(texts)
    assert metadata(files[0])["engine"] == "dask"
    a = read_table(local)
    b = pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in files])
    assert a.column("id").to_pylist() == b.column("id").to_pylist() == ids
    assert a.column("n_tokens").to_pylist() == b.column("n_tokens").to_pylist()
    X, Y = embeddings(a), embeddings(b)
    print(f"\n{metadata(local)['model']}: Dask engine vs local engine, {len(ids)} rows in {parts} partitions: "
          f"max |diff| {np.abs(X - Y).max():.2e}")
    assert X.shape == Y.shape and np.abs(X - Y).max() <= TOL
    want = Encoder(model).encode(texts)
    got = TextFeatures(model=str(model)).fit_transform(texts)
    print(f"TextFeatures vs Encoder.encode: max |diff| {np.abs(got - want).max():.2e}")
    assert got.shape == want.shape and np.abs(got - want).max() <= TOL
    return a.column("n_tokens").to_pylist()


def sigkill_when(p, ready, poll: float = 0.005) -> None:
    """SIGKILL the running process ``p`` (a Popen with stderr=PIPE) once ``ready()`` is true (within 120 s; it must
    not have ended by itself first), and wait for it; its stderr pipe is closed either way."""
    import signal
    import time

    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert p.poll() is None, f"the run ended before it could be killed: {p.stderr.read().decode()}"
            assert time.monotonic() < deadline, "no part files appeared"
            time.sleep(poll)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
        p.stderr.close()


def flip_embedding_byte(path: Path) -> None:
    """One byte flipped inside a Parquet file's embedding column data, past its page header (a disk or copy error that
    only the page checksums catch)."""
    import pyarrow.parquet as pq

    data = bytearray(path.read_bytes())
    rg = pq.ParquetFile(path).metadata.row_group(0)
    col = next(rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema.startswith("embedding"))
    data[(col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size // 2] ^= 0x10
    path.write_bytes(bytes(data))


def precision_here(precision: str, monkeypatch) -> None:
    """Let a test run ``precision`` on this CPU: bf16 emulated where the CPU multiplies no bf16 (BERTFEAT_BF16_EMULATE=1,
    the same code above the GEMM), int8 skipped with the reason where it has no VNNI / AMX (int8 is never emulated)."""
    import pytest

    from bertfeat.errors import BertfeatError
    from bertfeat.ops import gemm

    if precision not in ("bf16", "int8"):
        return
    try:
        gemm.resolve(precision)
    except BertfeatError as e:
        if precision == "int8":
            pytest.skip(f"int8 not accelerated here: {e.message}")
        monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")


def assert_tables_match(a: pa.Table, b: pa.Table) -> None:
    """Two outputs of the same rows: equal bit for bit where rows are (rows_bit_for_bit), else every column but the
    features equal and the features within 1e-5 (NOT_BIT_FOR_BIT: the rows were encoded in other batches)."""
    if rows_bit_for_bit():
        assert a.equals(b)
        return
    assert a.column_names == b.column_names
    assert a.drop_columns(["embedding"]).equals(b.drop_columns(["embedding"]))
    np.testing.assert_allclose(embeddings(a), embeddings(b), rtol=1e-5, atol=1e-6)
