"""`bertfeat extract --engine dask`: the same extract, scheduled by Dask across worker processes or machines.

Design (docs/dask.md has the user's side; the cluster plumbing is dask_cluster.py, this module the job: its two
passes, resume and PCA, run by ``DaskRun`` step by step; what a failure keeps and says is failures.py's):

Partitions
    The input's reader (readers/, the local engine's) cuts it on the client, before anything
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
    One task per partition (``client.submit``): read the partition -> ``chunks.validate_batch``
    -> ``chunks.encode_chunk`` (per ``chunk_rows`` rows) -> a part file. The model lives in the
    process's encoder cache (encoder_cache.py, through ``worker_encoder``), loaded once per worker
    process by a WorkerPlugin and reused by every task; the weights' sha256 is checked against the client's.
    Reuse (reuse.py): a task looks its rows up in the vector cache (``--cache``, every worker on this machine, checked)
    or, without one (or beside one it may not write), in the run's own SQLite store ``OUTPUT.partial/.dedup/`` that
    this machine's workers share, so
    a text met in several partitions is encoded once (two partitions meeting it at the same moment may both encode
    it); with workers on other hosts, once per partition.

Output
    ``OUTPUT`` is a directory: ``part-00000.parquet`` ... one per partition, each with the local
    output's schema and provenance (plus ``engine`` and ``part`` = index, first row, counts,
    rejects), and ``_bertfeat.json`` with the run's provenance and totals. While running, it is
    ``OUTPUT.partial/`` (with ``_manifest.json``); a task writes its part atomically (temporary
    name, then rename), so a recomputed task overwrites its own file and never duplicates rows.
    At the end the directory is renamed to ``OUTPUT`` (once every partition is read, the client checks the input's
    files against their identity at the start, as on the local engine: each file's size, mtime, ctime, inode and
    device as the client sees them, and the files the path names: manifest.check_input_unchanged). Rejects go to
    ``OUTPUT.rejects.csv`` and
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
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..atomic import deferred, remove_directory, remove_stale_temps, replace_directory, together, write_atomic
from .chunks import (
    EXTRA_COLUMNS,
    encode_chunk,
    extra_columns,
    feature_matrix,
    output_columns,
    table_counts,
    validate_batch,
)
from ..cache.reuse import dedup_memory
from ..cache.store import NETWORK_FS, RUN_STORE_DIR, filesystem_type, gemm_identity, open_cache
from .dask_cluster import (
    ClusterError,
    cancel,
    close_cluster,
    cluster_slots,
    gather,
    open_client,
    run_task,
    task_slots,
    task_threads,
    worker_threads,
)
from ..errors import BertfeatError, BertfeatWarning, ResumableError, one_line, opt, render
from .failures import Failure, handle, kept_for_limit, kind_of
from ..features.parquet import pages_damaged
from ..features.reader import DIRECTORY_PROVENANCE, PART_GLOB, part_name
from .encoder_setup import feature_settings, load_encoder, make_reuser
from .manifest import (PARTIAL_MANIFESTS, RECORDED_ONLY, check_input_unchanged, check_resume, check_resume_engine, job_manifest,
                       read_manifest)
from .pca_steps import (OrderedMerge, RowBlocks, applied_pca, applied_pca_entry, fit_pca, new_pca, probe_into_report,
                        write_pca)
from .provenance import provenance
from .outputs import REPLACEABLE, allow_replacing, mark_finishing, remove_stale
from .summary import ExtractSummary, RepeatedIds, RespelledNumbers, new_summary
from .options import encoder_keywords
from .progress import NullProgress
from ..readers import Partition, Reader
from ..readers.rejects import publish_rejects

try:  # the engine module imports without Dask; extract_dask says how to install it
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPluginBase
except ImportError:  # pragma: no cover - exercised by the "dask missing" test through sys.modules
    _WorkerPluginBase = object

DEFAULT_BLOCKSIZE = 8 << 20  # input bytes per partition at most: ~80k short sentences, a few minutes on one core
PARTS_PER_THREAD = 4  # partitions per worker thread (task slot) when the input is large enough
MANIFEST = PARTIAL_MANIFESTS["dask"]
FULL_DIR = "_full"
PCA_FILE = "_pca.npz"
RUN_STORE = RUN_STORE_DIR  # the run's duplicates store without a cache (workers on this machine), in OUTPUT.partial/
INSTALL_HINT = 'pip install "bertfeat[dask]"'


#: a cut into more partitions than this, by a --blocksize under SMALL_BLOCKSIZE, is refused (docs/dask.md's floor)
MAX_SMALL_PARTITIONS, SMALL_BLOCKSIZE = 10_000, 64 * 1024


def check_partition_count(n: int, blocksize: int | None) -> None:
    """Refuse a --blocksize far under the floor docs/dask.md advises that cuts the input into more partitions than
    any run needs: --blocksize 1 cut a 174 KB CSV into 174,710, whose row count alone ran for minutes (each costs a
    task and a part file, ~75 ms). A large input at a usual blocksize is never refused."""
    if blocksize is not None and blocksize < SMALL_BLOCKSIZE and n > MAX_SMALL_PARTITIONS:
        raise BertfeatError(f"{opt('blocksize', blocksize)} cuts the input into {n:,} partitions, each a task and a part "
                            "file (~75 ms of a worker's time whatever its size)",
                            f"give {opt('blocksize', '64KiB')} or more (the default, 8MiB, suits most inputs)")


def require_dask():
    """Raise the install hint when Dask's distributed scheduler is missing."""
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        raise BertfeatError(f"{opt('engine', 'dask')} needs Dask, but {e.name or 'dask'} is not installed", INSTALL_HINT) from None
    if _WorkerPluginBase is object:  # imported while distributed was missing
        raise BertfeatError(f"{opt('engine', 'dask')} needs Dask, but distributed could not be imported", INSTALL_HINT)


# --------------------------------------------------------------------------- worker side
class WorkerSetupError(ClusterError, ResumableError):
    """A worker that cannot run the job as the client would (the model missing or other, another GEMM path): the
    finished partitions stay for --resume once the workers are set up (its fix then says so: run.failures)."""


def worker_encoder(location, model_name: str | None, encoder_kwargs: dict, weights_sha256: str,
                   threads: int | None = None, gemm_id: dict | None = None, files_sha256: dict | None = None):
    """This process's Encoder for (model, Encoder keywords), from the process's shared cache (encoder_cache.py):
    loaded once, reused by every task; its weights' sha256, its other files' (``files_sha256``: the client's
    Encoder.files_sha256, the tokenizer's, config's and modules' files the cache key holds) and GEMM identity
    (``gemm_id``) checked against the client's.

    ``threads``: batches encoded side by side (Encoder.threads; BLAS stays at one thread per batch).
    """
    import socket
    import warnings

    from ..model.encoder_cache import shared_encoder
    from ..model.hub import resolve_model

    kw = dict(encoder_kwargs)
    if threads:
        kw["threads"] = int(threads)
    try:
        loc = location if (Path(location.encoder_path) / "config.json").is_file() else resolve_model(model_name)
        with warnings.catch_warnings():  # the client, which loaded the same model, has said them once
            warnings.simplefilter("ignore", BertfeatWarning)
            enc = shared_encoder(location=loc, **kw)
    except BertfeatError as e:
        raise WorkerSetupError(f"worker on {socket.gethostname()}: cannot load the model at {location.path} ({e.marked_what})",
                               "the model directory must be at the same path on every worker (or in each worker's "
                               "Hugging Face cache)") from None
    try:
        sha256 = enc.weights_sha256  # hashed once, after checking the files are still the ones it loaded
    except BertfeatError as e:  # the model changed on this worker: the finished partitions stay for --resume
        raise WorkerSetupError(f"worker on {socket.gethostname()}: {e.marked_what}",
                               "wait until the model's files are all in place on that worker") from None
    if sha256 != weights_sha256:
        raise WorkerSetupError(f"worker on {socket.gethostname()}: the weights at {enc.location.path} differ from the "
                               f"client's (sha256 {sha256[:12]} vs {weights_sha256[:12]})",
                               "put the same model files on every node")
    if files_sha256 is not None:
        check_worker_files(enc, files_sha256, socket.gethostname())
    if gemm_id is not None:
        check_worker_gemm(worker_identity(enc), gemm_id, socket.gethostname())
    if not getattr(enc, "warmed_up", False):
        enc.encode(["warm up"])  # the kernels, tokenizer and scratch memory ready (~0.6 s) before the first task
        enc.warmed_up = True
    return enc


def check_worker_files(enc, client: dict, host: str) -> None:
    """Refuse a worker whose model files but the weights (tokenizer, config, sentence-transformers modules) are not
    the client's: edited after the client loaded them, or another copy on that node. Its vectors (a text tokenized
    otherwise) would go into the output and into the cache under the client's key, which holds the client's files."""
    from ..model.hub import files_differ

    try:
        mine = enc.files_sha256()
    except BertfeatError as e:  # changed on this worker while it loaded them
        raise WorkerSetupError(f"worker on {host}: {e.marked_what}", "wait until the model's files are all in place on that "
                               "worker") from None
    differ = files_differ(client, mine)
    if differ:
        raise WorkerSetupError(f"worker on {host}: the model files at {enc.location.path} differ from the client's "
                               f"({', '.join(differ)})", "put the same model files on every node, and leave them "
                               "unchanged while a job runs")


def worker_identity(encoder) -> dict:
    """What a worker must share with the client besides the model (check_worker_gemm): the GEMM path
    (cache.store.gemm_identity) and the tokenizers library's version, both in the cache key the client writes under."""
    from ..model.tokenize import library_version

    return {**gemm_identity(encoder), "tokenizers": library_version()}


def check_worker_gemm(worker: dict, client: dict, host: str) -> None:
    """Refuse a worker whose vectors would round otherwise than the client's (cache.store.gemm_identity): its rows
    would differ from a local run's in the last bits, silently, in the output and in a shared cache. Likewise a
    worker with another tokenizers library (worker_identity), which may split a text into other tokens."""
    differ = sorted(k for k in worker.keys() | client.keys() if worker.get(k) != client.get(k))
    if not differ:
        return
    if differ == ["tokenizers"]:
        raise WorkerSetupError(f"worker on {host}: its tokenizers library may split texts otherwise than the client's "
                               f"(tokenizers {worker.get('tokenizers')} here, {client.get('tokenizers')} on the client)",
                               f"install tokenizers=={client.get('tokenizers')} on every worker (or the workers' "
                               "version on the client)")
    what = "; ".join(f"{k} {worker.get(k)} here, {client.get(k)} on the client" for k in differ)
    mine, theirs = str(worker.get("blas")).split(), str(client.get("blas")).split()  # library, version, kernel
    kernel_only = len(mine) == len(theirs) == 3 and mine[:2] == theirs[:2] and theirs[0] == "openblas"
    if differ == ["blas"] and kernel_only and theirs[2] != "None":
        fix = (f"start the workers with OPENBLAS_CORETYPE={theirs[2]} in their environment (`dask worker` loads NumPy "
               "before bertfeat can choose its kernel)")
    elif "cpu" in differ:
        fix = "run the job on workers with the client's CPU model, or start the client on the workers' kind of machine"
    else:
        fix = (f"install the same bertfeat, NumPy{', tokenizers' if 'tokenizers' in differ else ''} and extras "
               "(bertfeat[fast]: oneDNN) on the client and every worker")
    raise WorkerSetupError(f"worker on {host}: its products would round otherwise than the client's ({what})", fix)



class EncoderPlugin(_WorkerPluginBase):
    """Registered with the client: loads the model once per worker process, up front."""

    name = "bertfeat-encoder"

    def __init__(self, location, model_name, encoder_kwargs: dict, weights_sha256, threads: int | dict | None,
                 gemm_id: dict | None = None, files_sha256: dict | None = None):
        self.location, self.model_name, self.encoder_kwargs = location, model_name, encoder_kwargs
        self.weights_sha256, self.threads, self.gemm_id = weights_sha256, threads, gemm_id
        self.files_sha256 = files_sha256

    def setup(self, worker):
        try:  # warm the cache; a failure is raised again, with its message, by the first task
            worker_encoder(self.location, self.model_name, self.encoder_kwargs, self.weights_sha256,
                           task_threads(self.threads, worker), self.gemm_id, self.files_sha256)
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
    gemm_id: dict | None  # the client's worker_identity: a worker that would round or tokenize otherwise is refused
    files_sha256: dict | None  # the client's model files but the weights (Encoder.files_sha256): a worker's must match
    threads: int | dict | None  # --threads, or each worker's share of its host's cores (dask_cluster.worker_threads)
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
    want_pca: bool = False  # pca / pca_model: parts go to _full/ (pass 2 reduces them)
    fit_stats: bool = False  # pca: tasks return their PCA statistics
    n_components: object = None  # the PCA's n_components (None: every component)
    width: int = 5
    dtype: str = "float32"  # the output parts' feature type (the full-width parts of pass 1 under pca stay float32)
    keep_types: dict | None = None  # the kept columns (keep) and their Arrow types
    cache: str | None = None  # the vector cache directory (on this machine: the client checked the workers' host)
    cache_id: tuple | None = None  # (fingerprint, settings) of the run in the cache (cache.store.cache_fingerprint)
    # the run's duplicates store beside a cache no task may write (read-only): OUTPUT.partial/.dedup/, and its id
    run_store: str | None = None
    run_store_id: tuple | None = None


def _writer(path: Path, dim: int, ctx: TaskContext, meta: dict, wide: bool, dtype: str):
    from ..features import FeatureWriter

    return FeatureWriter(path, fmt="parquet", dim=dim, id_name=ctx.id_name, id_type=ctx.id_type, metadata=meta,
                         wide=wide, extra_columns=output_columns(ctx.keep_types),
                         row_group_rows=max(1024, ctx.chunk_rows), dtype=dtype)


def encode_partition(part: Partition, first_row: int, ctx: TaskContext) -> dict:
    """Task: read, validate, encode and write one partition; returns its counts (and PCA statistics)."""
    enc = worker_encoder(ctx.location, ctx.model_name, ctx.encoder_kwargs, ctx.weights_sha256, task_threads(ctx.threads),
                         ctx.gemm_id, ctx.files_sha256)
    raw = ctx.reader.read_partition(part, first_row)
    multiline = getattr(ctx.reader, "multiline_rows", 0)  # CSV rows whose quoted values span lines (this partition's)
    out_dir = Path(ctx.out_dir) / (FULL_DIR if ctx.want_pca else "")
    path = out_dir / part_name(part.index, ctx.width)
    stats = {"index": part.index, "first_row": first_row, "rows_read": len(raw.rows), "rows_written": 0, "rows_truncated": 0,
             "rows_chunked": 0, "tokens": 0, "tokens_dropped": 0, "rows_encoded": 0, "rows_reused": 0, "tokens_encoded": 0,
             "cache_repaired": 0,
             "rejects": [], "run": ctx.run_key, "rows_multiline": multiline}
    pca = new_pca(ctx.n_components) if ctx.fit_stats else None
    blocks = RowBlocks(pca, ctx.chunk_rows) if pca is not None else None  # as partition_statistics reads them
    if not (Path(ctx.out_dir) / MANIFEST).is_file():
        return {"cancelled": True}  # the run was abandoned (bad input elsewhere): write nothing
    dtype = "float32" if ctx.want_pca else ctx.dtype  # full-width parts are the PCA's float32 input
    writer = _writer(path, ctx.dim, ctx, ctx.meta, ctx.wide and not ctx.want_pca, dtype)
    reuser = None
    respelled = RespelledNumbers()  # the partition's JSONL kept numbers written in other digits
    try:
        # identical rows of the partition encoded once; with a cache, rows any run encoded before are reused
        reuser = make_reuser(enc, ctx.spec, None if ctx.cache is None else Path(ctx.cache), Path(ctx.out_dir), ctx.cache_id,
                             budget=dedup_memory() // task_slots(),  # the process's budget, split among its tasks
                             run_store=(ctx.run_store, ctx.run_store_id) if ctx.run_store else None)
        for start in range(0, max(len(raw.rows), 1), ctx.chunk_rows):
            chunk = validate_batch(raw.slice(start, start + ctx.chunk_rows), part.index)
            table, rejects = encode_chunk(enc, ctx.spec, chunk, ctx.reader.row_label, ctx.on_bad_row, ctx.id_name, ctx.keep_types,
                                          reuser, ctx.reader.id_type())
            stats["rejects"] += rejects
            respelled.add(chunk, ctx.reader)
            if not table.num_rows:
                continue
            X = feature_matrix(table)
            for k, v in table_counts(table, ctx.spec.max_length).items():
                stats[k] += v
            if blocks is not None:
                blocks.add(X)
            writer.write(table.column(ctx.id_name), X, extra_columns(table, ctx.keep_types or ()))
        if not (Path(ctx.out_dir) / MANIFEST).is_file():
            writer.abort()
            return {"cancelled": True}
        if blocks is not None:
            blocks.flush()
        stats.update(rows_encoded=reuser.encoded, rows_reused=reuser.reused, tokens_encoded=reuser.tokens_encoded,
                     cache_repaired=reuser.corrupt, cache_read_only=reuser.read_only, numbers_respelled=respelled.tally)
        writer.close(_part_meta(ctx.meta, stats))
    except BaseException:
        writer.abort()
        raise
    finally:
        if reuser is not None:
            reuser.close()
    stats["pca"] = pca
    return stats


def _part_meta(meta: dict, stats: dict) -> dict:
    """The part's provenance: the run's, with this part's counts and where it sits in the input."""
    part = {k: v for k, v in stats.items() if k != "pca"}
    part["rejects"] = [{**r, "reason": render(r["reason"], {})} for r in stats["rejects"]]  # as the rejects file words them
    return {"rows": {"read": stats["rows_read"], "written": stats["rows_written"], "rejected": len(stats["rejects"]),
                     "truncated": stats["rows_truncated"], "chunked": stats["rows_chunked"],
                     "encoded": stats["rows_encoded"], "reused": stats["rows_reused"]},
            "tokens": {"total": stats["tokens"], "dropped": stats["tokens_dropped"]},
            "part": json.loads(json.dumps(part, default=str))}


def read_part_stats(path: Path) -> dict | None:
    """The ``part`` entry of a finished part file (None when it is not a complete bertfeat part)."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return json.loads(meta[b"bertfeat"])["part"]
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None


def partition_statistics(path: str, n_components, chunk_rows: int) -> object:
    """Task (--pca, resumed partition): the PCA statistics of a full-width part already on disk, its rows added in
    the blocks encode_partition added them in (RowBlocks), so that they are the same bits."""
    pca = new_pca(n_components)
    blocks = RowBlocks(pca, chunk_rows)
    for batch in pq.ParquetFile(path).iter_batches(batch_size=8192, columns=["embedding"]):
        if batch.num_rows:
            blocks.add(feature_matrix(pa.Table.from_batches([batch])))
    blocks.flush()
    return pca


_PCAS: dict = {}


def _load_pca(path: str):
    """The fitted PCA the client saved in OUTPUT.partial/ (a file, not scattered data: it survives lost workers)."""
    from ..pca.estimator import PCA

    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size, st.st_ino)  # every run saves to the same name: the file, not the name
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
        X = pca.transform_rows(X).astype(np.float32)
    w = _writer(Path(ctx.out_dir) / part_name(index, ctx.width), int(pca.n_components_), ctx, meta, ctx.wide, ctx.dtype)
    with w:
        w.write(t.column(ctx.id_name), X.reshape(len(X), int(pca.n_components_)),
                {k: t.column(k).combine_chunks() for k in [*EXTRA_COLUMNS, *(ctx.keep_types or ())]})
        w.close({k: part[k] for k in ("rows", "tokens", "part")})
    return t.num_rows


# --------------------------------------------------------------------------- client side (the cluster: dask_cluster.py)
def _resumed_value(partial: Path, key: str):
    """A value of the interrupted run's manifest (None when there is none)."""
    try:
        return json.loads((partial / MANIFEST).read_text()).get(key)
    except (OSError, ValueError):
        return None


def run(plan, progress: NullProgress | None = None, client=None) -> ExtractSummary:
    """Execute the plan on a Dask cluster (``client`` given, or the plan's scheduler / a local cluster); returns the
    same summary as the local engine. A failure keeps or removes the partial directory as failures.py says."""
    t0 = time.perf_counter()
    job = DaskRun(plan, progress or NullProgress(), client)
    try:
        job.connect()
        counts = job.open()
        first, ctx = job.tasks(counts)
        results, done, merged = job.encode(first, ctx)
        final_meta = job.total(results, done)
        repeats = job.repeated_ids(results)
        job.reduce(merged, ctx, final_meta)
        job.write(results, merged, final_meta)
        if repeats is not None:  # the outputs are complete: then the warning, as the local engine gives it
            repeats.report(job.summary, plan.reader.name, plan.reader.id_column)
        job.respelled.report(job.summary, plan.reader)
    except BaseException as e:  # what the failure keeps and says: failures.py
        try:
            raise job.failed(e)
        finally:
            job.close()
    job.close_finished()
    job.summary.elapsed = time.perf_counter() - t0
    return job.summary


class DaskRun:
    """One run of a plan on a cluster, in the steps ``run`` calls: ``connect`` (the cluster, the partitions), ``open``
    OUTPUT.partial/ (the rows per partition: pass 0), ``tasks`` (what every task gets), ``encode`` (pass 1, skipping
    the finished partitions), ``total`` (the counts), ``reduce`` (the PCA's fit and pass 2), ``write`` (the files
    beside OUTPUT and the directory moved into place); ``failed`` asks failures.py what a failure keeps."""

    def __init__(self, plan, progress: NullProgress, client=None):
        self.plan, self.progress = plan, progress
        self.encoder = encoder = load_encoder(plan)
        # precision "auto" is resolved here, once: every worker then runs the precision the client's manifest and
        # fingerprint name (a worker that cannot run it refuses in one line), never a mix of precisions across parts
        self.encoder_kwargs = {**encoder_keywords(plan.options), "precision": encoder.precision}
        self.encoder_kwargs.pop("threads", None)  # the workers' threads: worker_threads in connect
        self.spec, self.fingerprint = feature_settings(encoder, plan)
        # pca_model: checked before any task runs
        self.applied = applied_pca(plan, self.fingerprint, encoder.output_dim(self.spec))
        self.summary = new_summary(plan, encoder, self.spec, "dask")
        self.respelled = RespelledNumbers()  # the partitions' JSONL kept numbers written in other digits (total)
        # (None, None) without a cache; read_only: why the client may not write it (its tasks then share a run store)
        self.cache_id, self.cache_read_only = check_cache(plan, encoder, self.spec) if plan.cache is not None else (None, None)
        self.out, self.partial = plan.layout.features, plan.layout.partial
        self.client, self.own_client, self.cluster = client, client is None, None
        self.futures: dict = {}  # the tasks in flight (cancelled on a failure)
        self.tag = uuid.uuid4().hex[:8]  # task keys unique to this run
        self.outputs: dict = {}  # files written beside OUTPUT (the PCA model and report, the rejects)
        self.started = self.opened = self.completed = False
        self.over_limit: tuple | None = None  # max_bad_rows passed: the error's words but for what stays (failed())
        self.phase = "encode"  # "write" once the outputs are being written (failures.PHASES)
        self.group = None  # the final files' atomic.together group
        # set by connect: the workers' threads, the run's duplicates store, the partitions (split_target: how many
        # were asked for), the part names' digits; by open: the run's key (tasks' parts carry it)
        self.threads = self.run_store = self.split_target = self.run_key = None
        self.parts: list[Partition] = []
        self.width = 5
        self.meta: dict = {}  # the provenance every part carries (tasks)
        self.results: dict[int, dict] = {}  # the partitions finished (their parts in OUTPUT.partial/): index -> counts

    def connect(self) -> None:
        """The client (the plan's scheduler, or a local cluster), the workers' threads, the run's duplicates store and
        the partitions: a few per task slot of the cluster (a resumed run keeps the interrupted run's cut)."""
        plan, partial = self.plan, self.partial
        if self.own_client:
            self.client, self.cluster = open_client(plan.dask, scripted=plan.options.command is None)
        client = self.client
        self.threads = plan.options.threads or worker_threads(client, plan.dask.scheduler or "")
        # without a cache, or beside one it may not write: the run's duplicates store, shared by this machine's workers
        self.run_store = None
        if plan.cache is not None:
            check_worker_hosts(client, plan.cache)
        if ((plan.cache is None or self.cache_read_only is not None) and filesystem_type(partial.parent) not in NETWORK_FS
                and (plan.cache is not None or not workers_elsewhere(client))):  # with a cache: checked just above
            self.run_store = partial / RUN_STORE
        target = _resumed_value(partial, "split_target") if plan.options.resume else None
        if target is None:
            target = PARTS_PER_THREAD * cluster_slots(client)
        self.split_target = target
        self.parts = plan.reader.partitions(plan.dask.blocksize, target)
        check_partition_count(len(self.parts), plan.dask.blocksize)
        self.width = max(5, len(str(len(self.parts) - 1)))

    def open(self) -> list[int]:
        """Start or continue OUTPUT.partial/ (a killed run's temporaries removed), the model loaded on every worker;
        returns the rows of every partition (pass 0 counts those the footers do not give)."""
        plan, partial, client, parts = self.plan, self.partial, self.client, self.parts
        manifest = job_manifest(plan, self.fingerprint, self.encoder, engine="dask", blocksize=plan.dask.blocksize,
                                split_target=self.split_target, partitions=len(parts))
        counts = _open_partial(partial, manifest, plan.options.resume)
        if plan.options.overwrite:  # a resume of this run may replace the outputs without being told again
            allow_replacing(partial, plan.layout.outputs())
        self.opened = True
        for _, path in plan.layout.outputs() + [("partial directory", partial)]:  # what a killed run left: temporaries,
            remove_stale_temps(path, DIRECTORY_PROVENANCE if path == self.out else None)  # directories set aside
        if self.run_store is not None:  # made here, once, before the tasks open it together
            open_cache(self.run_store).close()
        plugin = EncoderPlugin(self.encoder.location, plan.options.model, self.encoder_kwargs,
                               self.encoder.weights_sha256, self.threads, worker_identity(self.encoder),
                               self.encoder.files_sha256())
        try:
            client.register_plugin(plugin, name=EncoderPlugin.name)
        except OSError as e:  # distributed's CommClosedError is one: it was said a disk error of OUTPUT.partial
            raise ClusterError(f"a Dask worker was lost while the model was loaded on the workers ({one_line(e)}): "
                               "killed, or out of memory", "give the workers more memory (fewer threads or workers "
                               f"per machine), then rerun (with {opt('resume', True)} if partitions had finished)") from None
        if counts is None:  # pass 0: rows per partition (Parquet: from the footers)
            counts = [p.n_rows for p in parts]
            todo = [p for p in parts if p.n_rows is None]
            if todo:
                self.progress.note(f"counting the rows of {len(todo)} partition(s) on the cluster")
                self.futures = {client.submit(run_task, plan.reader.count_rows, p, key=f"bertfeat-count-{p.index}-{self.tag}",
                                              pure=False): p.index for p in todo}
                gather(client, self.futures, lambda i, n: counts.__setitem__(i, n))
                self.futures = {}
            manifest["partition_rows"] = counts
            write_atomic(partial / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str))
        self.run_key = _run_key(manifest)
        return counts

    def tasks(self, counts: list[int]) -> tuple[list[int], TaskContext]:
        """Each partition's first row, and the TaskContext every task gets (with the provenance every part carries)."""
        plan, encoder, spec = self.plan, self.encoder, self.spec
        first = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
        self.meta = meta = provenance(encoder, spec, self.fingerprint, plan, ExtractSummary())
        meta["engine"] = "dask"
        meta["partitions"] = len(self.parts)  # so the parts alone say when one is lost (features.reader)
        run_store = (str(self.run_store), run_store_id(encoder, spec)) if self.run_store is not None else (None, None)
        if plan.cache is not None:
            cache, cache_id = str(Path(plan.cache).resolve()), self.cache_id
        else:  # the run's store is the tasks' cache
            (cache, cache_id), run_store = run_store, (None, None)
        ctx = TaskContext(reader=plan.reader, location=encoder.location, model_name=plan.options.model,
                          encoder_kwargs=self.encoder_kwargs, weights_sha256=encoder.weights_sha256,
                          gemm_id=worker_identity(encoder), files_sha256=encoder.files_sha256(), threads=self.threads,
                          spec=spec, on_bad_row=plan.on_bad_row, id_name=plan.id_name,
                          id_type=plan.reader.id_type() or pa.string(), chunk_rows=plan.options.chunk_rows,
                          dim=encoder.output_dim(spec), meta=meta, run_key=self.run_key, out_dir=str(self.partial),
                          wide=plan.options.wide, want_pca=plan.reduces, fit_stats=plan.pca is not None,
                          n_components=plan.pca_n_components, width=self.width, keep_types=plan.keep_types or None,
                          dtype=plan.dtype, cache=cache, cache_id=cache_id, run_store=run_store[0],
                          run_store_id=run_store[1])
        return first, ctx

    def finished(self, stage: Path) -> dict[int, dict]:
        """Resume: the interrupted run's finished partitions (this run's key) whose pages pass their checksums; a
        damaged one is removed, to be encoded again."""
        progress, width = self.progress, self.width
        paths = ((p.index, stage / part_name(p.index, width)) for p in self.parts)
        found = {i: (path, st) for i, path in paths if (st := read_part_stats(path)) is not None and st.get("run") == self.run_key}
        if found:  # every page read once (a large output takes a while): say so first
            progress.note(f"checking {len(found)} finished partition(s) in {stage} (their page checksums)")
        done, damaged = {}, []
        for i, (path, st) in found.items():
            if pages_damaged(path) is None:
                done[i] = st
            else:  # damaged on disk since (a flipped byte fails its page checksum): that partition is encoded again
                path.unlink()
                damaged.append(path.name)
        if done:
            progress.note(f"resuming: {len(done)} of {len(self.parts)} partition(s) already done in {self.partial}")
        if damaged:
            progress.note(f"{len(damaged)} finished partition(s) were damaged on disk ({', '.join(damaged[:3])}"
                          f"{', ...' if len(damaged) > 3 else ''}): encoded again")
        return done

    def encode(self, first: list[int], ctx: TaskContext) -> tuple[dict[int, dict], dict[int, dict], object]:
        """Pass 1: every partition not finished before, on the cluster; returns (every partition's counts, the
        resumed ones, the merged PCA statistics)."""
        plan, client, progress, tag = self.plan, self.client, self.progress, self.tag
        stage = self.partial / FULL_DIR if plan.reduces else self.partial
        stage.mkdir(exist_ok=True)
        done = self.finished(stage)
        self.summary.chunks_resumed = len(done)
        progress.start(first[-1], None)  # every row of the input
        self.started = True
        for st in done.values():
            progress.advance(st["rows_read"], 0, 0)
        self.results = results = dict(done)  # counted by failure(): what a stop keeps
        # the partitions' statistics merged in partition order, so a rerun writes the same bits
        merged = OrderedMerge(new_pca(plan.pca_n_components), stage / "_stats") if plan.pca is not None else None

        def on_result(i, res):
            if i < 0:  # a resumed partition's PCA statistics
                merged.add(-1 - i, res)
                return
            if res.get("cancelled"):
                raise BertfeatError(f"partition {i}: {self.partial} vanished while the run was going on", "rerun the command")
            pca = res.pop("pca", None)
            if pca is not None:
                merged.add(i, pca)
            results[i] = res
            progress.advance(res["rows_read"], res["tokens"], 0)
            if res["rejects"]:
                self.check_bad_rows(results, final=False)

        self.check_bad_rows(results, final=False)  # the resumed partitions' own rejects
        self.futures = {client.submit(run_task, encode_partition, p, first[p.index], ctx, key=f"bertfeat-encode-{p.index}-{tag}",
                                      pure=False): p.index for p in self.parts if p.index not in done}
        if plan.pca is not None:  # statistics of the resumed partitions, from their files
            self.futures.update({client.submit(run_task, partition_statistics, str(stage / part_name(i, self.width)),
                                               plan.pca_n_components, plan.options.chunk_rows, key=f"bertfeat-stats-{i}-{tag}",
                                               pure=False): -1 - i
                                 for i in done})
        gather(client, self.futures, on_result, progress, counted=lambda i: i >= 0, done=len(done), total=len(self.parts))
        self.futures = {}
        check_input_unchanged(plan)  # every partition read: a file that grew meanwhile fails the run, nothing published
        self.check_bad_rows(results, final=True)
        return results, done, None if merged is None else merged.result(len(self.parts))

    def check_bad_rows(self, results: dict[int, dict], final: bool) -> None:
        """max_bad_rows over the partitions finished so far (a count stops the run as soon as it is passed)."""
        limit = self.plan.max_bad_rows
        n_read = sum(st["rows_read"] for st in results.values())
        if limit is not None and limit.exceeded(sum(len(st["rejects"]) for st in results.values()), n_read, final):
            self.over_limit = (self.plan.reader.name, [r for i in sorted(results) for r in results[i]["rejects"]], n_read)
            raise limit.error(*self.over_limit, kept_for_limit(self.failure("resumable")))

    def total(self, results: dict[int, dict], done: dict[int, dict]) -> dict:
        """The run's counts from its partitions'; returns the provenance of OUTPUT (_bertfeat.json)."""
        plan, summary = self.plan, self.summary
        for i in sorted(results):
            summary.add(results[i])
            if i in done:
                summary.add_resumed(results[i])
            summary.rows_rejected += len(results[i]["rejects"])
            if i not in done:  # what this run's own tasks met in the cache, as the local engine counts it
                summary.cache_repaired += int(results[i].get("cache_repaired", 0))
                summary.cache_read_only = summary.cache_read_only or results[i].get("cache_read_only")
            summary.rows_multiline += int(results[i].get("rows_multiline", 0))
            self.respelled.merge(results[i].get("numbers_respelled", {}))
        for note in summary.cache_notes():
            self.progress.note(note)
        final_meta = provenance(self.encoder, self.spec, self.fingerprint, plan, summary)
        final_meta["engine"] = "dask"
        final_meta["partitions"] = len(self.parts)
        return final_meta

    def repeated_ids(self, results: dict[int, dict]) -> RepeatedIds | None:
        """With an id column, every partition's written ids, read back from its part with the rows they were written
        for (its rows less its rejects): the tasks never see each other's ids, so the client checks them."""
        plan = self.plan
        if not plan.reader.id_column:
            return None
        stage = self.partial / FULL_DIR if plan.reduces else self.partial
        repeats = RepeatedIds()
        for i in sorted(results):
            st = results[i]
            bad = {r["row"] for r in st["rejects"]}
            rows = [n for n in range(st["first_row"], st["first_row"] + st["rows_read"]) if n not in bad]
            ids = pq.read_table(stage / part_name(i, self.width), columns=[plan.id_name]).column(plan.id_name)
            repeats.add(ids, rows)
        return repeats

    def reduce(self, merged, ctx: TaskContext, final_meta: dict) -> None:
        """pca: fit on the client, then pass 2 on the cluster; pca_model: pass 2 with the given model (copied beside
        the parts for the workers)."""
        from ..pca.reduce import file_sha256

        plan, partial = self.plan, self.partial
        if plan.pca is not None:
            entry = final_meta["pca"] = self.meta["pca"] = fit_pca(merged, self.summary.rows_written, plan.layout)
            self.progress.note(f"PCA: {merged.n_components_} components; writing the reduced features")
            saved = merged.save(partial / PCA_FILE, fingerprint=self.fingerprint, overwrite=True)
            # the model is published as these bytes (write), so the parts of pass 2 record its sha256 too: the
            # provenance made from the parts alone (features.reader) names the model as _bertfeat.json does
            entry["model_sha256"] = file_sha256(saved)
            self.reduce_pass(saved, ctx)
        elif self.applied is not None:
            final_meta["pca"] = self.meta["pca"] = applied_pca_entry(self.applied, plan)
            shutil.copyfile(plan.pca_model, partial / PCA_FILE)
            if file_sha256(partial / PCA_FILE) != final_meta["pca"]["model_sha256"]:  # the file checked at the start
                raise ResumableError(f"the PCA model {plan.pca_model} changed during the run (it is not the one "
                                     "loaded and checked against these features at the start)",
                                     "put the model the run started with back")
            self.reduce_pass(partial / PCA_FILE, ctx)

    def reduce_pass(self, pca_path: Path, ctx: TaskContext) -> None:
        """Pass 2: every full-width part -> its reduced part, on the cluster (the full parts and the model stay until
        the finish: the fitted model is published from its file, and a resume starts from the full parts)."""
        self.futures = {self.client.submit(run_task, reduce_partition, p.index, ctx, str(pca_path), self.meta,
                                           key=f"bertfeat-reduce-{p.index}-{self.tag}", pure=False): p.index
                        for p in self.parts}
        gather(self.client, self.futures, lambda i, n: None)
        # the full-width parts and the model go at the run's finish (_finish): a stop before the outputs are in place
        # resumes from them, encoding nothing again
        self.futures = {}

    def write(self, results: dict[int, dict], merged, final_meta: dict) -> None:
        """The PCA model and report, the rejects and the output directory, together; then the label's probe."""
        plan, summary = self.plan, self.summary
        rejects = [r for i in sorted(results) for r in results[i]["rejects"]]
        self.phase = "write"
        with together() as self.group:  # the PCA model and report, the rejects and the output directory appear together
            mark_finishing(self.partial, plan.layout.outputs())
            if plan.pca is not None:
                self.outputs.update(write_pca(merged, plan.layout, self.fingerprint, final_meta["pca"],
                                              saved=self.partial / PCA_FILE))
            self.outputs.update(publish_rejects(plan.layout.rejects, rejects, plan.keep))
            remove_stale(plan.layout.stale_pca(plan.pca_model))
            deferred(lambda: _finish(self.partial, self.out, final_meta))
        self.completed = True
        summary.probe = probe_into_report(plan, merged, self.fingerprint, self.out, self.progress)
        summary.outputs = {"features": self.out, **self.outputs}

    def failure(self, kind: str) -> Failure:
        """What happened, for failures.py: the partitions finished so far (a resumed run's included), so a stop before
        any finished removes OUTPUT.partial/ as the local engine does (a resume would only cut the input again)."""
        plan = self.plan
        return Failure(kind, self.phase, self.partial, self.out, "partition", self.kept(), complete=self.completed,
                       probe_missing=plan.label is not None and self.summary.probe is None)

    def kept(self) -> int:
        """Partitions a stop keeps: the part files in OUTPUT.partial/, or those counted so far if more (a resumed
        run's kept ones; never 0 while there are). The files, not only the results received: a task that was
        running when the stop came writes its part before the client hears of it (the count said 3, the resume 5)."""
        # --pca: each partition's full-width part, and its reduced part once pass 2 wrote it
        on_disk = max((sum(1 for _ in d.glob(PART_GLOB)) for d in (self.partial, self.partial / FULL_DIR) if d.is_dir()),
                      default=0)
        return max(len(self.results), on_disk)

    def failed(self, e: BaseException) -> BaseException:
        """The tasks cancelled; the exception to raise, OUTPUT.partial/ kept or removed (failures.handle). Before it
        was opened, nothing on disk is this run's."""
        try:
            cancel(self.client, self.futures)
        except KeyboardInterrupt:  # a second Ctrl-C as the tasks are cancelled: the stop is told as below all the same
            pass
        if self.group is not None and self.group.done:  # a Ctrl-C held back until the files were in place: complete
            self.completed = True
        if not self.opened:
            return e
        if self.own_client and self.futures:  # the tasks running go on writing their parts (cancel cannot stop them):
            try:
                self.close()  # our cluster closed first, the count of parts kept is the resume's (it said 5 of 7)
            except KeyboardInterrupt:  # a Ctrl-C during the close (it can land late): the stop is still told as below
                pass
            if self.over_limit is not None:  # its words counted the parts before the running tasks wrote theirs
                e = self.plan.max_bad_rows.error(*self.over_limit, kept_for_limit(self.failure("resumable")))
        return handle(e, self.failure(kind_of(e, (ClusterError,))), lambda: remove_directory(self.partial))

    def close_finished(self) -> None:
        """close() once the outputs are in place: a stop while our cluster closes (a second or so) says they are
        complete, as a stop after the local engine's last write does (it said "Interrupted." alone)."""
        self.completed = True
        try:
            self.close()
        except KeyboardInterrupt as e:
            raise handle(e, self.failure("interrupt"), lambda: None)

    def close(self) -> None:
        """The progress stopped and our own cluster closed (once: failed may close it before counting the parts)."""
        if self.started:
            self.progress.stop()
            self.started = False
        if self.own_client:
            self.own_client = False  # once, also when a Ctrl-C cuts the close short
            close_cluster(self.client, self.cluster)


def check_cache(plan, encoder, spec) -> tuple[tuple[str, dict], str | None]:
    """The cache opened once on the client before any task (a damaged cache is refused here, once): -> ((fingerprint,
    settings) for the workers, why the cache cannot be written or None)."""
    from ..cache.store import cache_fingerprint, open_cache, register_spec

    cache_id = cache_fingerprint(encoder, spec)
    store = open_cache(plan.cache)
    try:
        register_spec(store, encoder, spec, cache_id)
    finally:
        store.close()
    return cache_id, store.read_only


def workers_elsewhere(client) -> list[str]:
    """The host names of the workers that do not run on this machine."""
    import socket

    here = socket.gethostname()
    return sorted({h for h in client.run(socket.gethostname).values() if h != here})


def run_store_id(encoder, spec) -> tuple[str, dict]:
    """The fingerprint of the run's own duplicates store (a SQLite store like a cache, in OUTPUT.partial/.dedup/,
    which _finish removes with the partial directory's other hidden files)."""
    from ..cache.store import cache_fingerprint

    return cache_fingerprint(encoder, spec)


def check_worker_hosts(client, cache: Path) -> None:
    """The vector cache is one machine's SQLite database: every worker must run on this machine."""
    import socket

    here = socket.gethostname()
    other = workers_elsewhere(client)
    if other:
        raise BertfeatError(f"the vector cache {cache} is a SQLite database on this machine ({here}), and workers run on "
                            f"{', '.join(other)}: SQLite's locking does not reach across machines",
                            f"run without {opt('cache')} (unset BERTFEAT_CACHE), or run the workers on this machine")


def _run_key(manifest: dict) -> str:
    """The run's key (each part carries it): the manifest's hash, less what no resume compares (RECORDED_ONLY)."""
    kept = {k: v for k, v in manifest.items() if k != RECORDED_ONLY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def _open_partial(partial: Path, manifest: dict, resume: bool) -> list[int] | None:
    """Start or continue OUTPUT.partial/; returns the partition row counts when a resumed run knows them."""
    mpath = partial / MANIFEST
    check_resume_engine(partial, "dask", resume)
    if resume and mpath.is_file():
        old = read_manifest(mpath)
        check_resume(old, manifest)
        if old.get("partition_rows") is not None:
            manifest["partition_rows"] = old["partition_rows"]
            return list(old["partition_rows"])
        return None
    remove_directory(partial)  # --overwrite's old run: aside in one step, then deleted
    partial.mkdir(parents=True)
    write_atomic(mpath, json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return None


def _finish(partial: Path, out: Path, meta: dict):
    """Write the provenance into OUTPUT.partial/, tidy it (the full-width parts and PCA model of pass 2, stray
    temporary files, then the list of outputs being finished, the manifest last) and move it to OUTPUT. The manifest marks it as bertfeat's until the rename
    (plan.check_partial_is_ours): a run killed while it tidies (deleting the full-width parts takes a while) leaves a
    directory the next run with --overwrite or --resume replaces, not one it refuses as the user's. Killed in the
    instant between the manifest's deletion and the rename, it holds a finished output, which a rerun refuses as it
    refuses a user's output named OUTPUT.partial (the two look the same), saying to move it to OUTPUT."""
    write_atomic(partial / DIRECTORY_PROVENANCE, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    last = {REPLACEABLE: 1, MANIFEST: 2}  # a kill before them leaves a partial run whose resume may replace the PCA files
    for p in sorted(partial.iterdir(), key=lambda p: last.get(p.name, 0)):
        if p.name.startswith(".") or p.name in (MANIFEST, PCA_FILE, FULL_DIR):
            p.unlink() if p.is_file() else shutil.rmtree(p, ignore_errors=True)
    replace_directory(partial, out)  # the old output or the new one under OUTPUT at every moment, even under SIGKILL
