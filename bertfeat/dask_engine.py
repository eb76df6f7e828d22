"""`bertfeat extract --engine dask`: the same extract, scheduled by Dask across worker processes or machines.

Design (docs/dask.md has the user's side):

Partitions
    The input's reader (readers.py, the local engine's) cuts it on the client, before anything
    runs, once the cluster is up: PARTS_PER_THREAD partitions per worker thread of the cluster
    whenever the input is large enough, and never more than ``blocksize`` input bytes each.
    (Cutting by ``blocksize`` alone made any input under 8 MiB one partition, i.e. one task on one
    worker while the others idled.) Parquet: row ranges from the footers, nothing read. CSV/TSV/
    JSONL: byte ranges aligned on line ends (``fsspec.utils.read_block``); a first pass over the
    cluster counts each block's rows. Files are taken in the local engine's order, so partition
    i's rows are global rows ``first_row[i] .. first_row[i] + n[i] - 1`` and the ``row`` column
    holds the same 0-based row numbers as the local output. Each worker reads its partition with
    the same reader object (pickled with the task: it holds no open file), so every bad row is
    handled as in the local engine. Paths go through fsspec: ``s3://``, ``gs://``, ``hdfs://``
    work when the filesystem package is installed on the client and the workers.

    Why not ``dask.dataframe.read_parquet``/``read_csv``: read_parquet orders files by natural
    sort (p2 before p10), which renumbers rows against the local engine, and read_csv parses
    with pandas, which rejects a whole partition for one malformed line or invalid byte where
    the local engine rejects that one row.

Work
    One task per partition (``client.submit``): read the partition -> ``pipeline.validate_batch``
    -> ``pipeline.encode_chunk`` (per ``chunk_rows`` rows) -> a part file. The model lives in a
    per-process cache (``worker_encoder``), loaded once per worker process by a WorkerPlugin and
    reused by every task; the weights' sha256 is checked against the client's.

Output
    ``OUTPUT`` is a directory: ``part-00000.parquet`` ... one per partition, each with the local
    output's schema and provenance (plus ``engine`` and ``part`` = index, first row, counts,
    rejects), and ``_bertfeat.json`` with the run's provenance and totals. While running, it is
    ``OUTPUT.partial/`` (with ``_manifest.json``); a task writes its part atomically (temporary
    name, then rename), so a recomputed task overwrites its own file and never duplicates rows.
    At the end the directory is renamed to ``OUTPUT``. Rejects go to ``OUTPUT.rejects.csv`` and
    the PCA model and report beside OUTPUT, at the same paths as the local engine's.

Resume
    ``--resume`` reopens ``OUTPUT.partial/``, refuses different settings, and skips partitions
    whose part file is there and carries this run's key.

PCA
    Pass 1 writes full-width parts to ``OUTPUT.partial/_full/`` and each task returns its PCA
    streaming statistics (``PCA.partial_fit``); the client merges them (``PCA.merge``), fits,
    saves the model and the report, then pass 2 (cheap, always rerun on resume) transforms each
    full part into its reduced part.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import BertfeatError, InputError, opt
from .jobcore import (accumulate_pca, check_job_options, check_resume, feature_matrix, finish_pca, job_manifest, new_pca, read_manifest,
                      table_counts)
from .readers import Partition, Reader, is_url, open_input
from .pipeline import (ExtractOptions, ExtractSummary, feature_settings, NullProgress, RawBatch, default_output,
                       encode_chunk, provenance, publish_rejects, validate_batch, _atomic_write_text)

try:  # the engine module imports without Dask; extract_dask says how to install it
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPluginBase
except ImportError:  # pragma: no cover - exercised by the "dask missing" test through sys.modules
    _WorkerPluginBase = object

DEFAULT_BLOCKSIZE = 8 << 20  # input bytes per partition at most: ~80k short sentences, a few minutes on one core
PARTS_PER_THREAD = 4  # partitions per worker thread (task slot) when the input is large enough
EXTRA_COLUMNS = {"n_tokens": pa.int32(), "truncated": pa.bool_(), "n_chunks": pa.int32()}
MANIFEST = "_manifest.json"
PROVENANCE = "_bertfeat.json"
FULL_DIR = "_full"
PCA_FILE = "_pca.npz"
INSTALL_HINT = 'pip install "bertfeat[dask]"'


@dataclass
class DaskOptions:
    scheduler: str | None = None  # tcp://HOST:8786; None: a LocalCluster on this machine
    workers: int | None = None  # LocalCluster worker processes (default: one per core)
    blocksize: int | str | None = DEFAULT_BLOCKSIZE  # bytes per partition; 0/None/"none": one per file (text) / row group (parquet)


def require_dask():
    """Raise the install hint when Dask's distributed scheduler is missing."""
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        raise BertfeatError(f"{opt('engine', 'dask')} needs Dask, but {e.name or 'dask'} is not installed", INSTALL_HINT) from None
    if _WorkerPluginBase is object:  # imported while distributed was missing
        raise BertfeatError(f"{opt('engine', 'dask')} needs Dask, but distributed could not be imported", INSTALL_HINT)


def parse_blocksize(value) -> int | None:
    """'8MiB', '64MB', '1000000', 0, None, 'none' -> bytes (None: no splitting)."""
    if value is None or value == 0 or (isinstance(value, str) and value.strip().lower() in ("", "0", "none", "file")):
        return None
    if isinstance(value, int):
        n = value
    else:
        from dask.utils import parse_bytes

        try:
            n = int(parse_bytes(value))
        except (ValueError, TypeError):
            raise BertfeatError(f"{opt('blocksize', value, cli=repr(value))} is not a size", "give bytes, e.g. 8MiB, 64MB or none") from None
    if n < 1:
        raise BertfeatError(f"{opt('blocksize', value)} is out of range", "give a positive size, e.g. 8MiB, or none")
    return n


# --------------------------------------------------------------------------- worker side
_ENCODERS: dict = {}
_ENCODER_LOCK = threading.Lock()


def worker_encoder(location, model_name: str | None, encoder_kwargs: dict, weights_sha256: str,
                   threads: int | None = None):
    """This process's Encoder for (model, Encoder keywords): loaded once, reused by every task.

    ``threads``: batches encoded side by side (Encoder.threads; BLAS stays at one thread per batch).
    """
    key = (str(location.path), json.dumps(encoder_kwargs, sort_keys=True, default=str))
    enc = _ENCODERS.get(key)
    if enc is not None:
        if threads:
            enc.threads = int(threads)
        return enc
    with _ENCODER_LOCK:
        enc = _ENCODERS.get(key)
        if enc is not None:
            return enc
        from .encoder import Encoder
        from .hub import resolve_model
        import socket

        host = socket.gethostname()
        kw = dict(encoder_kwargs)
        if threads:
            kw["threads"] = int(threads)
        try:
            loc = location if (Path(location.path) / "config.json").is_file() else resolve_model(model_name)
            enc = Encoder(location=loc, **kw)
        except BertfeatError as e:
            raise BertfeatError(f"worker on {host}: cannot load the model at {location.path} ({e._what})",
                                "the model directory must be at the same path on every worker (or in each worker's Hugging Face cache)") from None
        if enc.weights_sha256 != weights_sha256:
            raise BertfeatError(f"worker on {host}: the weights at {enc.location.path} differ from the client's "
                                f"(sha256 {enc.weights_sha256[:12]} vs {weights_sha256[:12]})",
                                "put the same model files on every node")
        enc.encode(["warm up"])  # the kernels, tokenizer and scratch memory ready (~0.6 s) before the first task
        _ENCODERS[key] = enc
        return enc


class EncoderPlugin(_WorkerPluginBase):
    """Registered with the client: loads the model once per worker process, up front."""

    name = "bertfeat-encoder"

    def __init__(self, location, model_name, encoder_kwargs: dict, weights_sha256, threads: int | None):
        self.location, self.model_name, self.encoder_kwargs = location, model_name, encoder_kwargs
        self.weights_sha256, self.threads = weights_sha256, threads

    def setup(self, worker):
        try:  # warm the cache; a failure is raised again, with its message, by the first task
            worker_encoder(self.location, self.model_name, self.encoder_kwargs, self.weights_sha256, self.threads)
        except BertfeatError:
            pass


@dataclass
class TaskContext:
    """Everything a partition task needs, sent with each task (small)."""

    reader: Reader  # the client's reader of the input (no open file: it pickles as it is)
    location: object
    model_name: str | None
    encoder_kwargs: dict  # Encoder(...) keywords (max_batch_tokens, the options the user gave)
    weights_sha256: str
    threads: int | None
    spec: object
    on_bad_row: str
    id_name: str
    id_type: pa.DataType
    chunk_rows: int
    dim: int
    meta: dict  # the provenance every part carries (counts are per part)
    run_key: str
    out_dir: str
    wide: bool
    n_components: object = None  # --pca: parts go to _full/ and tasks return statistics
    width: int = 5


def part_name(index: int, width: int = 5) -> str:
    return f"part-{index:0{width}d}.parquet"


def _writer(path: Path, dim: int, ctx: TaskContext, meta: dict, wide: bool):
    from .features import FeatureWriter

    return FeatureWriter(path, fmt="parquet", dim=dim, id_name=ctx.id_name, id_type=ctx.id_type, metadata=meta,
                         wide=wide, extra_columns=EXTRA_COLUMNS, row_group_rows=max(1024, ctx.chunk_rows))


def encode_partition(part: Partition, first_row: int, ctx: TaskContext) -> dict:
    """Task: read, validate, encode and write one partition; returns its counts (and PCA statistics)."""
    enc = worker_encoder(ctx.location, ctx.model_name, ctx.encoder_kwargs, ctx.weights_sha256, ctx.threads)
    raw = ctx.reader.read_partition(part, first_row)
    out_dir = Path(ctx.out_dir) / (FULL_DIR if ctx.n_components is not None else "")
    path = out_dir / part_name(part.index, ctx.width)
    stats = {"index": part.index, "first_row": first_row, "rows_read": len(raw.rows), "rows_written": 0, "rows_truncated": 0,
             "rows_chunked": 0, "tokens": 0, "tokens_dropped": 0, "rejects": [], "run": ctx.run_key}
    pca = new_pca(ctx.n_components) if ctx.n_components is not None else None
    if not (Path(ctx.out_dir) / MANIFEST).is_file():
        return {"cancelled": True}  # the run was abandoned (bad input elsewhere): write nothing
    writer = _writer(path, ctx.dim, ctx, ctx.meta, ctx.wide and pca is None)
    try:
        for start in range(0, max(len(raw.rows), 1), ctx.chunk_rows):
            sl = slice(start, start + ctx.chunk_rows)
            rows = raw.rows[sl]
            pre = {r: raw.pre_rejected[r] for r in rows if r in raw.pre_rejected} if raw.pre_rejected else {}
            sub = RawBatch(rows, raw.texts[sl], None if raw.pairs is None else raw.pairs[sl],
                           None if raw.ids is None else raw.ids[sl], pre)
            chunk = validate_batch(sub, part.index)
            table, rejects = encode_chunk(enc, ctx.spec, chunk, ctx.reader.name, ctx.on_bad_row, ctx.id_name)
            stats["rejects"] += rejects
            if not table.num_rows:
                continue
            X = feature_matrix(table)
            n_tok = table.column("n_tokens").to_numpy()
            trunc = table.column("truncated").to_numpy(zero_copy_only=False)
            n_ch = table.column("n_chunks").to_numpy()
            for k, v in table_counts(table, ctx.spec.max_length).items():
                stats[k] += v
            if pca is not None:
                accumulate_pca(pca, X)
            writer.write(table.column(ctx.id_name), X, {"n_tokens": n_tok, "truncated": trunc, "n_chunks": n_ch})
        if not (Path(ctx.out_dir) / MANIFEST).is_file():
            writer.abort()
            return {"cancelled": True}
        writer.close(_part_meta(ctx.meta, stats))
    except BaseException:
        writer.abort()
        raise
    stats["pca"] = pca
    return stats


def _part_meta(meta: dict, stats: dict) -> dict:
    """The part's provenance: the run's, with this part's counts and where it sits in the input."""
    part = {k: v for k, v in stats.items() if k != "pca"}
    return {"rows": {"read": stats["rows_read"], "written": stats["rows_written"], "rejected": len(stats["rejects"]),
                     "truncated": stats["rows_truncated"], "chunked": stats["rows_chunked"]},
            "tokens": {"total": stats["tokens"], "dropped": stats["tokens_dropped"]},
            "part": json.loads(json.dumps(part, default=str))}


def read_part_stats(path: Path) -> dict | None:
    """The ``part`` entry of a finished part file (None when it is not a complete bertfeat part)."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return json.loads(meta[b"bertfeat"])["part"]
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None


def partition_statistics(path: str, n_components) -> object:
    """Task (--pca, resumed partition): the PCA statistics of a full-width part already on disk."""
    pca = new_pca(n_components)
    for batch in pq.ParquetFile(path).iter_batches(batch_size=8192, columns=["embedding"]):
        if batch.num_rows:
            pca.partial_fit(feature_matrix(pa.Table.from_batches([batch])))
    return pca


_PCAS: dict = {}


def _load_pca(path: str):
    """The fitted PCA the client saved in OUTPUT.partial/ (a file, not scattered data: it survives lost workers)."""
    from .pca import PCA

    key = (path, os.stat(path).st_mtime_ns)
    if key not in _PCAS:
        _PCAS.clear()
        _PCAS[key] = PCA.load(path)
    return _PCAS[key]


def reduce_partition(index: int, ctx: TaskContext, pca_path: str, meta: dict) -> int:
    """Task (--pca pass 2): full-width part -> reduced part with the run's provenance; returns its rows."""
    pca = _load_pca(pca_path)
    src = Path(ctx.out_dir) / FULL_DIR / part_name(index, ctx.width)
    t = pq.read_table(src)
    part = json.loads(t.schema.metadata[b"bertfeat"])
    X = feature_matrix(t)
    if len(X):
        X = pca.transform(X).astype(np.float32)
    w = _writer(Path(ctx.out_dir) / part_name(index, ctx.width), int(pca.n_components_), ctx, meta, ctx.wide)
    with w:
        w.write(t.column(ctx.id_name), X.reshape(len(X), int(pca.n_components_)),
                {k: t.column(k).combine_chunks() for k in EXTRA_COLUMNS})
        w.close({k: part[k] for k in ("rows", "tokens", "part")})
    return t.num_rows


# --------------------------------------------------------------------------- client side
def _open_client(dopts: DaskOptions, threads: int | None):
    """(client, the LocalCluster we started or None)."""
    import logging

    from distributed import Client, LocalCluster

    if dopts.scheduler:
        if dopts.workers:
            raise BertfeatError(f"{opt('workers')} starts a local cluster; it cannot be combined with {opt('scheduler')}",
                                f"start the workers with `dask worker SCHEDULER` on each machine, or drop {opt('scheduler')}")
        try:
            client = Client(dopts.scheduler, timeout=30)
        except (OSError, TimeoutError) as e:
            raise BertfeatError(f"cannot reach the Dask scheduler at {dopts.scheduler} ({e})",
                                "start it with `dask scheduler` and the workers with `dask worker tcp://HOST:8786`") from None
        return client, None
    from .threads import default_threads

    # Default: one worker process with a thread per core. Measured (benchmarks/DASK_RESULTS.md, 2 cores,
    # 6,000 rows): 1 x 2 threads ran level with the local engine (1.00x), 2 x 1 thread at 0.86x (two
    # model copies, two processes' worth of Python overhead); --workers N asks for N one-thread processes.
    n = int(dopts.workers or 1)
    if n < 1:
        raise BertfeatError(f"{opt('workers', n)} is out of range", "give 1 or more")
    per_worker = 1 if dopts.workers else default_threads()
    # worker processes load NumPy before bertfeat: hand them this process's BLAS kernel choice
    # (bertfeat/threads.py), or they run OpenBLAS's older kernels wherever the environment pins them
    from .threads import blas_info

    kernel = blas_info().get("architecture")
    env = {"OPENBLAS_CORETYPE": kernel} if kernel and blas_info().get("internal_api") == "openblas" else {}
    import dask

    # The workers' statistical profiler samples every thread's stack every 10 ms, with the GIL: off in the
    # cluster we start (measured 2 %: 2 one-thread workers 0.91x -> 0.93x the local engine, 8,000 rows, 2
    # rounds). The Nanny hands this config to its worker process; an env= variable comes too late for it.
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        cluster = LocalCluster(n_workers=n, threads_per_worker=per_worker, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR, env=env)
    return Client(cluster), cluster


def worker_threads(client, address: str = "", timeout: float = 120.0) -> int:
    """Encoder threads per task: a host's cores shared by the task slots (worker processes x --nthreads) on it.

    The smallest share over the hosts, so no host is oversubscribed; waits for a first worker.
    """
    from .threads import default_threads

    if not client.scheduler_info(n_workers=-1)["workers"]:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise BertfeatError(f"no Dask worker joined the scheduler {address} in {timeout:.0f} s",
                                f"start workers with `dask worker {address or 'tcp://HOST:8786'}` on each machine") from None
    workers = client.scheduler_info(n_workers=-1)["workers"]
    cores = client.run(default_threads)
    slots: dict[str, int] = {}
    for addr, w in workers.items():
        slots[w.get("host", addr)] = slots.get(w.get("host", addr), 0) + int(w.get("nthreads", 1) or 1)
    shares = [cores[a] // slots[w.get("host", a)] for a, w in workers.items() if a in cores]
    return max(1, min(shares)) if shares else 1


def cluster_slots(client) -> int:
    """Task slots of the cluster: the worker threads of every worker now connected."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(int(w.get("nthreads", 1) or 1) for w in workers.values()))


def _resumed_value(partial: Path, key: str):
    """A value of the interrupted run's manifest (None when there is none)."""
    try:
        return json.loads((partial / MANIFEST).read_text()).get(key)
    except (OSError, ValueError):
        return None


def _in_flight(client, futures: dict) -> int:
    """How many of these tasks are in flight: on a worker, running or next in its queue (the scheduler's
    view; 0 if it cannot say)."""
    keys = {f.key for f in futures if not f.done()}
    try:
        return sum(1 for ks in client.processing().values() for k in ks if k in keys)
    except Exception:  # pragma: no cover - a scheduler going away: the next result says so
        return 0


def _results(client, futures: dict, on_result, progress=None):
    """Gather futures as they finish; a task's error becomes the run's error. With ``progress`` (an object
    with a ``parts`` method), report the tasks done and in flight after each one."""
    from distributed import as_completed
    from distributed.client import FutureCancelledError

    try:
        from distributed.scheduler import KilledWorker
    except ImportError:  # pragma: no cover
        KilledWorker = ()  # type: ignore
    show = getattr(progress, "parts", None)
    done = 0
    if show is not None:
        show(0, _in_flight(client, futures), len(futures))
    for fut in as_completed(list(futures)):
        key = futures[fut]
        try:
            res = fut.result()
        except KilledWorker as e:
            raise BertfeatError(f"partition {key}: its task killed the workers that ran it ({e})",
                                f"a worker probably ran out of memory: lower {opt('blocksize')} or {opt('max_batch_tokens')}, or add memory") from None
        except FutureCancelledError:
            raise BertfeatError(f"partition {key}: the task was cancelled (the cluster went away?)", f"rerun with {opt('resume', True)}") from None
        on_result(key, res)
        fut.release()
        if show is not None:
            done += 1
            show(done, _in_flight(client, futures), len(futures))


def _check_output(out: Path):
    if out.is_dir() and any(out.iterdir()) and not (out / PROVENANCE).is_file():
        raise BertfeatError(f"{out} is a directory that bertfeat did not write", f"choose another {opt('output')} OUTPUT")


def extract_dask(opts: ExtractOptions, dopts: DaskOptions | None = None, progress: NullProgress | None = None,
                 client=None) -> ExtractSummary:
    """Run ``extract`` on a Dask cluster (``client`` given, or per ``dopts``); returns the same summary."""
    require_dask()
    dopts = dopts or DaskOptions()
    progress = progress or NullProgress()
    t0 = time.perf_counter()
    n_components = check_job_options(opts)
    if opts.input == "-":
        raise BertfeatError(f"{opt('engine', 'dask')} cannot read standard input",
                            f"write the input to a file (Parquet is best), or use {opt('engine', 'local')}")
    if (opts.format or "parquet") != "parquet" or (opts.output and Path(opts.output).suffix.lower() in (".npy", ".csv")):
        raise BertfeatError(f"{opt('engine', 'dask')} writes a Parquet dataset (a directory of part files)",
                            f"drop {opt('format')}/{opt('output')} .npy/.csv, or use {opt('engine', 'local')}")
    blocksize = parse_blocksize(dopts.blocksize)

    src = open_input(opts.input, opts.input_format, opts.text_column, opts.pair_column, opts.id_column, opts.encoding,
                     delimiter=opts.delimiter)
    if opts.output:
        out = Path(opts.output)
    else:
        out = default_output(opts.input, "parquet")
    out = out.resolve()
    _check_output(out)
    partial = out.with_name(out.name + ".partial")
    from .safety import check_dask_outputs

    check_dask_outputs(out, partial, [] if is_url(opts.input) else list(src.files), opts.overwrite, opts.resume)

    from .encoder import Encoder

    encoder_kwargs = {"precision": opts.precision, **opts.encoder_options,
                      **({"max_batch_tokens": int(opts.max_batch_tokens)} if opts.max_batch_tokens else {})}
    encoder = Encoder(opts.model, **encoder_kwargs)
    # precision "auto" is resolved here, once: every worker then runs the precision the client's manifest and
    # fingerprint name (a worker that cannot run it refuses in one line), never a mix of precisions across parts
    encoder_kwargs["precision"] = encoder.precision
    spec, id_name, fingerprint = feature_settings(encoder, opts, n_components)
    summary = ExtractSummary(pooling=spec.pooling, model=encoder.model_id, dim=encoder.output_dim(spec))

    own_client = client is None
    cluster = None
    futures: dict = {}
    tag = uuid.uuid4().hex[:8]  # task keys unique to this run
    started = opened = False
    try:
        if own_client:
            client, cluster = _open_client(dopts, opts.threads)
        threads = opts.threads or worker_threads(client, dopts.scheduler or "")
        # Partitions: a few per task slot of the cluster (a resumed run keeps the interrupted run's cut)
        target = _resumed_value(partial, "split_target") if opts.resume else None
        if target is None:
            target = PARTS_PER_THREAD * cluster_slots(client)
        parts = src.partitions(blocksize, target)
        width = max(5, len(str(len(parts) - 1)))
        manifest = job_manifest(src, opts, fingerprint, engine="dask", blocksize=blocksize, split_target=target,
                                partitions=len(parts))
        counts = _open_partial(partial, manifest, opts.resume)
        opened = True
        client.register_plugin(EncoderPlugin(encoder.location, opts.model, encoder_kwargs, encoder.weights_sha256,
                                             threads), name=EncoderPlugin.name)
        # pass 0: rows per partition (Parquet: from the footers)
        if counts is None:
            counts = [p.n_rows for p in parts]
            todo = [p for p in parts if p.n_rows is None]
            if todo:
                progress.note(f"counting the rows of {len(todo)} partition(s) on the cluster")
                futures = {client.submit(src.count_rows, p, key=f"bertfeat-count-{p.index}-{tag}",
                                         pure=False): p.index for p in todo}
                _results(client, futures, lambda i, n: counts.__setitem__(i, n))
                futures = {}
            manifest["partition_rows"] = counts
            _atomic_write_text(partial / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str))
        first = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
        run_key = _run_key(manifest)

        meta = provenance(encoder, spec, fingerprint, src, opts, ExtractSummary())
        meta["engine"] = "dask"
        ctx = TaskContext(reader=src, location=encoder.location, model_name=opts.model,
                          encoder_kwargs=encoder_kwargs, weights_sha256=encoder.weights_sha256, threads=threads,
                          spec=spec,
                          on_bad_row=opts.on_bad_row, id_name=id_name, id_type=src.id_type() or pa.string(),
                          chunk_rows=opts.chunk_rows, dim=encoder.output_dim(spec), meta=meta, run_key=run_key,
                          out_dir=str(partial), wide=opts.wide, n_components=n_components, width=width)

        # pass 1: encode (skipping finished partitions)
        stage = partial / FULL_DIR if n_components is not None else partial
        stage.mkdir(exist_ok=True)
        done: dict[int, dict] = {}
        for p in parts:
            st = read_part_stats(stage / part_name(p.index, width))
            if st is not None and st.get("run") == run_key:
                done[p.index] = st
        summary.chunks_resumed = len(done)
        if done:
            progress.note(f"resuming: {len(done)} of {len(parts)} partition(s) already done in {partial}")
        progress.start(sum(counts), None)
        started = True
        for st in done.values():
            progress.advance(st["rows_read"], 0, 0)
        results: dict[int, dict] = dict(done)
        merged = new_pca(n_components) if n_components is not None else None

        def on_encoded(i, st):
            nonlocal merged
            if st.get("cancelled"):
                raise BertfeatError(f"partition {i}: {partial} vanished while the run was going on", "rerun the command")
            pca = st.pop("pca", None)
            if pca is not None:
                merged = merged.merge(pca)
            results[i] = st
            progress.advance(st["rows_read"], st["tokens"], 0)

        futures = {client.submit(encode_partition, p, first[p.index], ctx, key=f"bertfeat-encode-{p.index}-{tag}",
                                 pure=False): p.index for p in parts if p.index not in done}
        if n_components is not None:  # statistics of the resumed partitions, from their files
            futures.update({client.submit(partition_statistics, str(stage / part_name(i, width)), n_components,
                                          key=f"bertfeat-stats-{i}-{tag}", pure=False): -1 - i for i in done})

        def on_any(i, res):
            nonlocal merged
            if i < 0:
                merged = merged.merge(res)
            else:
                on_encoded(i, res)

        _results(client, futures, on_any, progress)
        futures = {}

        for i in sorted(results):
            summary.add(results[i])
            summary.rows_rejected += len(results[i]["rejects"])
        final_meta = provenance(encoder, spec, fingerprint, src, opts, summary)
        final_meta["engine"] = "dask"
        final_meta["partitions"] = len(parts)
        outputs: dict = {}

        if n_components is not None:  # fit on the client, then pass 2 on the cluster
            pca = merged
            pca_outputs, final_meta["pca"] = finish_pca(pca, summary.rows_written, out, fingerprint)
            meta["pca"] = final_meta["pca"]
            outputs.update(pca_outputs)
            progress.note(f"PCA: {pca.n_components_} components; writing the reduced features")
            pca_path = pca.save(partial / PCA_FILE, fingerprint=fingerprint)
            futures = {client.submit(reduce_partition, p.index, ctx, str(pca_path), meta, key=f"bertfeat-reduce-{p.index}-{tag}",
                                     pure=False): p.index for p in parts}
            _results(client, futures, lambda i, n: None)
            futures = {}
            shutil.rmtree(partial / FULL_DIR, ignore_errors=True)
            pca_path.unlink()

        rejects = [r for i in sorted(results) for r in results[i]["rejects"]]
        outputs.update(publish_rejects(out, rejects))
        _finish(partial, out, final_meta)
        summary.outputs = {"features": out, **outputs}
    except InputError:
        _cancel(client, futures)
        if opened:
            shutil.rmtree(partial, ignore_errors=True)  # bad input: leave nothing behind, like the local engine
        raise
    except BaseException:  # Ctrl-C, lost scheduler or workers: keep the finished parts for --resume
        _cancel(client, futures)
        raise
    finally:
        if started:
            progress.stop()
        if own_client and client is not None:
            client.close()
            if cluster is not None:
                cluster.close()
    summary.elapsed = time.perf_counter() - t0
    return summary


def _cancel(client, futures):
    if client is not None and futures:
        try:
            client.cancel(list(futures))
        except Exception:  # pragma: no cover - the client may already be gone
            pass


def _run_key(manifest: dict) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()


def _open_partial(partial: Path, manifest: dict, resume: bool) -> list[int] | None:
    """Start or continue OUTPUT.partial/; returns the partition row counts when a resumed run knows them."""
    mpath = partial / MANIFEST
    if resume and mpath.is_file():
        old = read_manifest(mpath)
        check_resume(old, manifest)
        if old.get("partition_rows") is not None:
            manifest["partition_rows"] = old["partition_rows"]
            return list(old["partition_rows"])
        return None
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    _atomic_write_text(mpath, json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return None


def _finish(partial: Path, out: Path, meta: dict):
    """Tidy OUTPUT.partial/ (manifest, stray temporary files) and move it to OUTPUT."""
    for p in partial.iterdir():
        if p.name.startswith(".") or p.name == MANIFEST:
            p.unlink() if p.is_file() else shutil.rmtree(p, ignore_errors=True)
    _atomic_write_text(partial / PROVENANCE, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    if out.is_dir():
        shutil.rmtree(out)
    elif out.exists():
        out.unlink()
    os.replace(partial, out)
