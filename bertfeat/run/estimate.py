"""``extract --estimate``: what a run will take, before it runs: rows and tokens, time on this machine, disk and
memory, measured on a sample.

The estimate executes the same plan as the run (plan.make_plan: the same options, checks and model), but writes
nothing. It reads the whole input once (the exact row count and bad rows; a Parquet input's count from its footers),
keeping a uniform sample of ``sample`` accepted rows; tokenizes the sample (tokens per row, truncated and chunked
rows) and encodes it with the run's encoder settings, timed after a warm-up batch, for this machine's tokens per
second. From those: the run's tokens and encode time, the output's size and the disk the run holds at its peak (the
partial directory's unreduced parts, then the output beside them), and the peak memory (measured while the sample
was encoded, plus what the run keeps besides: read-ahead chunks, the PCA statistics, the duplicates store); set
against the memory the process may use (its cgroup's limit, else the machine's available memory) and the free disk.
With a vector cache, the share of the sample already in it is reported and taken off the encode time; rows repeated
in the input are counted while it is read (``DistinctRows``) and encoded once, as the run encodes them.

Estimates, not promises: a sample of a few hundred rows gives the tokens per row within a few per cent on ordinary
text; the time assumes the machine stays as loaded as during the calibration.
"""

from __future__ import annotations

import resource
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["DEFAULT_SAMPLE", "Estimate", "estimate_plan", "memory_limit"]

DEFAULT_SAMPLE = 500
WARM_UP_ROWS = 32
#: bytes per row an output holds besides its features (id, n_tokens, truncated, n_chunks; Parquet's overhead)
ROW_OVERHEAD = {"parquet": 24, "npy": 20, "csv": 24}
#: bytes a float32 feature takes in the file (CSV: its text, e.g. "-0.012345678,")
FEATURE_BYTES = {"parquet": 4, "npy": 4, "csv": 13}
#: the same for float16 features (dtype="float16"; CSV: its shortest text, e.g. "-0.01234,")
FEATURE_BYTES_FLOAT16 = {"parquet": 2, "npy": 2, "csv": 9}
WRITE_RATE = 200e6  # bytes per second the parts and the output are written and read back at (a local disk)
#: what a run holds besides the encoder's peak: the reader and read-ahead threads (each with its own malloc arena),
#: Arrow's read and write buffers. Measured (MiniLM, 2 cores, AMD EPYC Zen 4): a run's peak RSS over this estimate's
#: calibration process, 56 MiB on 300 rows and 101 MiB on 4,000 (two chunks); the larger is taken.
PIPELINE_OVERHEAD = 100 << 20
#: run-to-run drift of an encode's time on a quiet machine (10-25 % measured here): the floor of the time's range
TIMING_DRIFT = 0.10
#: below this share of its threads' CPU during the timed encode, the machine counts as busy
BUSY_SHARE = 0.8


@dataclass
class Estimate:
    """What ``extract(..., estimate=True)`` returns (``to_dict`` for JSON). Sizes in bytes, times in seconds."""

    input: str
    output: str
    rows: int  # input rows (counted)
    rows_bad: int  # of which rejected (a run under on_bad_row='error' stops at the first)
    first_bad_row: int | None
    rows_too_long: int  # long_text='error': rows estimated too long (bad rows too), from the sample
    sample_rows: int
    tokens_per_row: float  # real tokens the model runs per accepted row (after truncation / chunking)
    tokens: int  # the run's, estimated
    rows_distinct: int  # accepted rows of distinct text (pair): the run encodes each once (DistinctRows)
    chunks_kept: int  # resume: the interrupted run's finished chunks, not encoded again (tokens and times are the rest's)
    rows_kept: int  # resume: the input rows of those chunks
    rows_truncated: float  # share of rows cut at max_length (long_text truncate)
    windows_per_row: float  # chunk-* modes: windows per row (1 otherwise)
    cached: float | None  # share of the sample already in the vector cache (None: no cache)
    tokens_per_second: float  # measured on the sample, this machine, the run's threads and precision
    seconds: float  # the whole run, estimated: load + read + encode (rows not in the cache) + write
    seconds_low: float  # the likely range of ``seconds``: the sample's spread of tokens per row, the timing's drift,
    seconds_high: float  # and a busy machine (cpu_share) widen it (time_range)
    cpu_share: float  # of the time the process's threads wanted a core while timed, the share they had one (1: all)
    encode_seconds: float  # encoding the distinct rows not in the cache, estimated
    read_seconds: float  # what reading the input took here (the run reads it once too)
    load_seconds: float  # loading the model here
    model: str
    precision: str
    threads: int
    dim: int  # features per row before any PCA
    dim_out: int  # in the output (a variance fraction's k is not known before the fit: then d, an upper bound)
    output_bytes: int
    disk_peak_bytes: int  # partial parts + the output, the most the run holds at once
    disk_free_bytes: int | None
    memory_peak_bytes: int
    memory_parts: dict = field(default_factory=dict)  # what the peak is made of
    memory_limit_bytes: int | None = None
    memory_limit_source: str | None = None
    warnings: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def memory_limit(root: Path = Path("/")) -> tuple[int | None, str | None]:
    """The memory this process may use: its cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) if set, else the
    machine's available memory (/proc/meminfo MemAvailable): (bytes, where from), or (None, None) when neither is
    readable. ``root``: for tests."""
    candidates = [(root / "sys/fs/cgroup/memory.max", "cgroup memory.max"),
                  (root / "sys/fs/cgroup/memory/memory.limit_in_bytes", "cgroup memory.limit_in_bytes")]
    try:  # the process's own cgroup (v2), when it is not the root one
        for line in (root / "proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::") and line[3:].strip() not in ("", "/"):
                candidates.insert(0, (root / "sys/fs/cgroup" / line[3:].strip().lstrip("/") / "memory.max",
                                      "cgroup memory.max"))
    except OSError:
        pass
    limit = None
    for path, source in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):  # v1 says "no limit" with a huge number
            limit = (int(text), source)
            break
    available = None
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if limit is not None and (available is None or limit[0] <= available):
        return limit
    if available is not None:
        return available, "available memory (/proc/meminfo)"
    return limit or (None, None)


def feature_bytes(fmt: str, dtype: str) -> int:
    """Bytes one feature value takes in an output of ``fmt`` written as ``dtype``."""
    return (FEATURE_BYTES_FLOAT16 if dtype == "float16" else FEATURE_BYTES)[fmt]


def _rss_peak() -> int:
    """This process's peak resident memory so far, bytes (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _read(plan, sample: int, seed: int) -> dict:
    """The whole input once: {"rows", "bad", "first_bad", "texts", "pairs", "sample_rows" (the sample's: its rows'
    numbers in the input), "text_bytes" (per accepted
    row), "kept_bytes" (its kept columns' values and text ids, per row), "distinct" (rows of distinct text), "distinct_sample" (a uniform
    sample of those, (text, pair) each), "seconds"}."""
    from .chunks import Reservoir, validate_batch

    t0 = time.perf_counter()
    rows = bad = text_bytes = kept_bytes = 0
    first_bad = None
    reservoir, distinct = Reservoir(sample, seed), DistinctRows(keep=sample)
    for b in plan.reader.batches():
        chunk = validate_batch(b, 0)
        rows += chunk.n_read
        if chunk.rejects:
            bad += len(chunk.rejects)
            first_bad = chunk.rejects[0]["row"] if first_bad is None else first_bad
        text_bytes += sum(len(t.encode("utf-8", errors="replace")) for t in chunk.texts)
        for values in (chunk.extra or {}).values():
            kept_bytes += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in values)
        if chunk.ids is not None:  # a text id's bytes (an integer's are ROW_OVERHEAD's): 1,000-byte ids were left out
            kept_bytes += sum(len(v) for v in chunk.ids if isinstance(v, (str, bytes)))
        rows_in = [(t, None if chunk.pairs is None else chunk.pairs[i]) for i, t in enumerate(chunk.texts)]
        reservoir.add(list(zip(chunk.rows, rows_in)))  # (the same draws as without the row numbers)
        distinct.add(rows_in)
    kept = reservoir.items()
    accepted = max(rows - bad, 1)
    return {"rows": rows, "bad": bad, "first_bad": first_bad, "texts": [t for _, (t, _) in kept],
            "pairs": [p for _, (_, p) in kept] if plan.options.pair_column is not None else None,
            "sample_rows": [r for r, _ in kept],
            "text_bytes": text_bytes / accepted, "kept_bytes": kept_bytes / accepted,
            "distinct": min(distinct.count(), max(rows - bad, 0)), "distinct_sample": distinct.sample(),
            "seconds": time.perf_counter() - t0}


def _row_hash(text: str, pair: str | None) -> int:
    """A row's 64-bit hash, the same in every process (Python's hash() is salted per process: the estimate would
    change from run to run)."""
    import hashlib

    key = text if pair is None else f"{text}\x00{pair}"
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


class DistinctRows:
    """How many distinct (text, pair) rows a stream holds, in bounded memory: exact up to ``k`` of them, else the
    k-minimum-values estimate (the k smallest of the rows' 64-bit hashes: about 1/sqrt(k) = 0.4 % off at k 65,536).
    With ``keep``, also a uniform sample of the distinct rows (``sample()``): those of the ``keep`` smallest hashes,
    whatever each row's count (a uniform sample of the rows favours the repeated ones)."""

    def __init__(self, k: int = 1 << 16, keep: int = 0):
        # k + 1 hashes kept: k of them alone cannot tell exactly k distinct rows from more
        self.k, self.keep, self.smallest = k, min(int(keep), k), np.zeros(0, np.uint64)
        self.kept: dict[int, tuple] = {}  # hash -> row, for hashes among the keep smallest when they came

    def add(self, rows: list[tuple]) -> None:
        h = np.fromiter((_row_hash(t, p) for t, p in rows), dtype=np.uint64, count=len(rows))
        self.smallest = np.unique(np.concatenate([self.smallest, h]))[: self.k + 1]  # sorted, distinct
        if self.keep and len(self.smallest):
            cut = int(self.smallest[min(self.keep, len(self.smallest)) - 1])
            for hv, row in zip(h.tolist(), rows):
                if hv <= cut:
                    self.kept.setdefault(hv, row)
            if len(self.kept) > 2 * self.keep:
                self._trim()

    def _trim(self) -> None:
        keep = set(self.smallest[: self.keep].tolist())
        self.kept = {hv: row for hv, row in self.kept.items() if hv in keep}

    def count(self) -> int:
        if len(self.smallest) <= self.k:
            return len(self.smallest)
        return int(round((self.k - 1) / ((float(self.smallest[self.k - 1]) + 1.0) / 2.0**64)))

    def sample(self) -> list[tuple]:
        """The distinct rows kept (``keep`` of them at most), in hash order: a uniform sample of the distinct rows."""
        self._trim()
        return [self.kept[hv] for hv in sorted(self.kept)]


def _cached_share(plan, encoder, spec, texts: list[str], pairs: list[str] | None) -> float | None:
    """The share of the sample the vector cache already holds for these settings (None without a cache or when it
    cannot be read)."""
    if plan.cache is None:
        return None
    from ..cache.store import DB_NAME, cache_fingerprint, open_cache, spec_siblings, text_key

    if not (Path(plan.cache) / DB_NAME).is_file():
        return 0.0
    fp, settings = cache_fingerprint(encoder, spec)
    try:
        store = open_cache(Path(plan.cache), look=True)  # (an estimate writes nothing: an old cache left unmarked)
        try:
            # as the run looks up (cache.reuse): its own fingerprint, then another name of its prompt's, then its rows
            # within max length under another long-text policy's, stride's or max length's
            fid, siblings = store.known_id(fp), spec_siblings(store, encoder, spec, (fp, settings))
            keys = [text_key(t, None if pairs is None else pairs[i]) for i, t in enumerate(texts)]
            return len(store.get_reusable(fid, siblings, keys)) / max(len(keys), 1)
        finally:
            store.close()
    except Exception:  # an estimate does not fail on a cache it cannot read: the run will say what is wrong
        return None


def estimate_plan(plan, sample: int = DEFAULT_SAMPLE, seed: int = 0) -> Estimate:
    """Measure what ``plan`` will take (see the module docstring); writes nothing."""
    from .encoder_setup import feature_settings, load_encoder
    from ..readers.rejects import RejectCode

    read = _read(plan, sample, seed)
    rows, bad = read["rows"], read["bad"]
    t0 = time.perf_counter()
    encoder = load_encoder(plan)
    load_seconds = time.perf_counter() - t0
    spec, fingerprint = feature_settings(encoder, plan, estimating=True)
    chunks_kept, rows_kept = _kept(plan, encoder, fingerprint, rows)
    d = encoder.output_dim(spec)
    m = _measure(encoder, spec, read["texts"], read["pairs"], read["sample_rows"], plan.reader.row_label)
    n = len(read["texts"])
    # rows the run refuses (too long under long_text='error', a token past the embedding table, no token) are left
    # out of the sample, and counted
    too_long, past_table, no_tokens = (
        round(sum(r.code == code for r in m["refused"].values()) / n * (rows - bad)) if n else 0
        for code in (RejectCode.TOO_LONG, RejectCode.TOKEN_PAST_TABLE, RejectCode.NO_TOKENS))
    accepted = rows - bad - too_long - past_table - no_tokens
    left = 1.0 - rows_kept / rows if rows else 1.0  # the share of the input a --resume run encodes
    tokens = int(round(m["tokens_per_row"] * accepted * left))
    # the run encodes a repeated row once (cache.reuse), but Dask workers on other machines without a cache share no
    # duplicates store: each partition encodes its own
    shared = not (plan.options.engine == "dask" and plan.cache is None and plan.dask.scheduler)
    unique = min(read["distinct"], accepted) if shared else accepted
    # what is encoded: the distinct rows (their own tokens per row: repeats may be shorter or longer), less the cached
    texts, pairs, per_row = m["texts"], m["pairs"], m["tokens_per_row"]
    if shared and unique < accepted:
        texts, pairs, per_row = _distinct_tokens(encoder, spec, read["distinct_sample"], plan, per_row)
    cached = _cached_share(plan, encoder, spec, texts, pairs)
    encode_seconds = per_row * unique * left * (1.0 - (cached or 0.0)) / m["tps"] if m["tps"] else 0.0
    size = _sizes(plan, d, accepted, read["kept_bytes"])
    # writing: the parts as the chunks finish, then the output from them (read back once); ~WRITE_RATE on a local disk
    seconds = (load_seconds + read["seconds"] + encode_seconds
               + (2 * size["parts_bytes"] + size["output_bytes"]) / WRITE_RATE)
    memory_parts = _memory_parts(plan, d, accepted, read["text_bytes"], m["tokens_per_row"])
    memory_peak = int(sum(memory_parts.values()))
    limit, source = memory_limit()
    out_dir = plan.layout.features.parent if str(plan.layout.features.parent) else Path(".")
    probe = next((p for p in [out_dir, *out_dir.absolute().parents] if p.exists()), None)
    free = shutil.disk_usage(probe).free if probe is not None else None
    warnings = _warnings(plan, spec, read, (too_long, past_table, no_tokens), m, memory_peak, (limit, source), size["disk_peak"],
                         (free, probe))
    pca_short = _pca_rows_warning(plan, accepted, d, approx=accepted != rows - bad)
    if pca_short:
        warnings.insert(0, pca_short)
    low, high = time_range(seconds, encode_seconds, m["token_spread"], m["cpu_share"])
    return Estimate(
        input=plan.input, output=str(plan.layout.features), rows=rows, rows_bad=bad, first_bad_row=read["first_bad"],
        rows_too_long=too_long, sample_rows=len(m["texts"]), tokens_per_row=m["tokens_per_row"], tokens=tokens,
        rows_distinct=unique, chunks_kept=chunks_kept, rows_kept=rows_kept,
        rows_truncated=m["truncated"], windows_per_row=m["windows"], cached=cached, tokens_per_second=m["tps"],
        seconds=seconds, seconds_low=low, seconds_high=high, cpu_share=m["cpu_share"], encode_seconds=encode_seconds,
        read_seconds=read["seconds"], load_seconds=load_seconds, model=encoder.model_id, precision=encoder.precision,
        threads=int(encoder.threads), dim=d, dim_out=size["dim_out"], output_bytes=int(size["output_bytes"]),
        disk_peak_bytes=int(size["disk_peak"]), disk_free_bytes=free, memory_peak_bytes=memory_peak,
        memory_parts=memory_parts, memory_limit_bytes=limit, memory_limit_source=source, warnings=warnings)


def _kept(plan, encoder, fingerprint: dict, rows: int) -> tuple[int, int]:
    """(chunks, input rows) a ``resume`` run keeps from the interrupted run's partial directory and does not encode
    again, after the same checks of its manifest (local.PartStore.kept: a ResumeError when the settings or the input
    differ); (0, 0) without resume, or on the Dask engine (its partitions are sized in bytes: the whole input is
    estimated)."""
    if not plan.options.resume or plan.options.engine != "local":
        return 0, 0
    from .local import PartStore
    from .manifest import job_manifest

    done = PartStore(plan.layout.partial).kept(job_manifest(plan, fingerprint, encoder, format=plan.layout.fmt))
    cr = plan.options.chunk_rows
    return len(done), sum(max(0, min(cr, rows - i * cr)) for i in done)


def _tokenized(encoder, spec, texts: list[str], pairs: list[str] | None) -> tuple:
    """Tokenize a sample as the run does (chunks.prepare_rows): -> (the prepared rows or None, the texts and pairs
    without the rows the run refuses, the refused: position -> reason)."""
    from .chunks import prepare_rows

    prep, keep, refused = prepare_rows(encoder, spec, texts, pairs)
    return prep, [texts[i] for i in keep], None if pairs is None else [pairs[i] for i in keep], refused


def _distinct_tokens(encoder, spec, rows: list[tuple], plan, fallback: float) -> tuple[list, list | None, float]:
    """The distinct rows' sample as (texts, pairs) without the rows the run refuses, and their tokens per row (the
    model's tokens, windows included; ``fallback`` when none is left)."""
    pairs = [p for _, p in rows] if plan.options.pair_column is not None else None
    prep, texts, pairs, _ = _tokenized(encoder, spec, [t for t, _ in rows], pairs)
    if prep is None or not texts:
        return texts, pairs, fallback
    return texts, pairs, sum(len(a) for a in prep.ids) / len(texts)


def _measure(encoder, spec, texts: list[str], pairs: list[str] | None, rows: list[int], row_label) -> dict:
    """Tokenize the sample (the rows the run refuses, chunks.prepare_rows, left out) and time its encode after a
    warm-up: -> the sample's texts / pairs kept, the refused (position -> reason), tokens per row, truncated share,
    windows per row, tokens per second, the relative standard error of tokens per row and the CPU share. ``rows``:
    the sample's row numbers in the input, and ``row_label`` the reader's, so that features that come out NaN are
    refused naming the input's row, as the run would."""
    from .chunks import run_rows

    m = {"tokens_per_row": 0.0, "tps": 0.0, "token_spread": 0.0, "cpu_share": 1.0, "truncated": 0.0, "windows": 1.0}
    prep, texts, pairs, refused = _tokenized(encoder, spec, texts, pairs)
    m.update(texts=texts, pairs=pairs, refused=refused)
    if prep is None:
        return m
    lengths = np.fromiter((len(a) for a in prep.ids), dtype=np.int64, count=len(prep.ids))
    at = [r for i, r in enumerate(rows) if i not in refused]  # the input's rows of the texts kept
    warm = encoder.prepare(texts[:WARM_UP_ROWS], None if pairs is None else pairs[:WARM_UP_ROWS], spec)
    run_rows(encoder, spec, warm, at[:WARM_UP_ROWS], row_label)  # numba / primitives / workspaces, not timed
    t0, sched0 = time.perf_counter(), _sched_seconds()
    run_rows(encoder, spec, prep, at, row_label)
    wall = max(time.perf_counter() - t0, 1e-9)
    per_row = np.bincount(prep.window_row, weights=lengths, minlength=len(texts))  # tokens the model runs per row
    m.update(tokens_per_row=float(lengths.sum()) / len(texts), truncated=float(np.mean(prep.truncated)),
             windows=len(prep.ids) / len(texts), tps=float(lengths.sum()) / wall,
             cpu_share=_cpu_share(sched0, _sched_seconds()),
             token_spread=float(per_row.std() / np.sqrt(len(per_row)) / max(per_row.mean(), 1e-9))
             if len(per_row) > 1 else 0.0)
    return m


def _sizes(plan, d: int, accepted: int, kept_bytes: float) -> dict:
    """The output's width and bytes, the partial directory's unreduced parts and the disk held at the peak."""
    from .options import ALL_COMPONENTS

    fmt = plan.layout.fmt
    if plan.pca_model is not None:
        from ..pca.estimator import PCA

        dim_out = int(PCA.load(plan.pca_model).n_components_)
    elif isinstance(plan.pca, int) and plan.pca != ALL_COMPONENTS:
        dim_out = min(int(plan.pca), d)
    else:
        dim_out = d  # a variance fraction or mle: known after the fit; d is the most it can be
    output_bytes = accepted * (dim_out * feature_bytes(fmt, plan.dtype) + ROW_OVERHEAD[fmt] + kept_bytes)
    parts_bytes = accepted * (d * 4 + ROW_OVERHEAD["parquet"] + kept_bytes)  # the partial directory's unreduced parts
    return {"dim_out": dim_out, "output_bytes": output_bytes, "parts_bytes": parts_bytes,
            "disk_peak": parts_bytes + output_bytes}


def _memory_parts(plan, d: int, accepted: int, mean_bytes: float, tokens_per_row: float) -> dict:
    """What the run's peak memory is made of: the encoder's measured peak, and what the run holds besides."""
    from .local import READ_AHEAD_CHUNKS
    from ..cache.reuse import DEDUP_MEMORY

    return {
        "measured while encoding the sample (model, batches, libraries)": _rss_peak(),
        "read-ahead chunks (texts, tokens, vectors)": int(READ_AHEAD_CHUNKS + 1) * plan.options.chunk_rows
        * int(mean_bytes * 3 + tokens_per_row * 8 + d * 4),
        "PCA statistics (float64)": (2 * d * d * 8 + 4 * d * 8) if plan.pca is not None else 0,
        "duplicates store (at most)": 0 if plan.cache is not None else min(DEDUP_MEMORY, accepted * (d * 4 + 200)),
        "reading and writing (threads, Arrow buffers; measured)": PIPELINE_OVERHEAD,
    }


def _warnings(plan, spec, read: dict, refused: tuple, m: dict, memory_peak: int, limit_source: tuple, disk_peak: int,
              free_probe: tuple) -> list[str]:
    """What will not do, or may surprise: bad rows, limits, memory, disk, truncation, a busy machine."""
    rows, bad, first_bad = read["rows"], read["bad"], read["first_bad"]
    too_long, past_table, no_tokens = refused
    refused_rows = too_long + past_table + no_tokens
    (limit, source), (free, probe) = limit_source, free_probe
    warnings = []
    if bad and plan.on_bad_row == "error":
        warnings.append(f"{bad:,} bad row(s): the run stops at row {first_bad} (on_bad_row='error'); skip writes them "
                        "to the rejects file")
    if plan.max_bad_rows is not None and plan.max_bad_rows.exceeded(bad + refused_rows, rows, final=True):
        about = "~" if refused_rows else ""  # rows the Encoder refuses are counted on the sample
        warnings.append(f"{about}{bad + refused_rows:,} bad row(s), more than max_bad_rows "
                        f"{plan.max_bad_rows.text} allows: the run stops there and writes nothing")
    if limit is not None and memory_peak > 0.9 * limit:
        warnings.append(f"the run may need {memory_peak / 2**20:,.0f} MiB, {source} is {limit / 2**20:,.0f} MiB: lower "
                        "chunk_rows or max_batch_tokens, or threads")
    if free is not None and disk_peak > free:
        warnings.append(f"the run needs ~{disk_peak / 2**20:,.0f} MiB of disk at its peak, {free / 2**20:,.0f} MiB "
                        f"are free under {probe}")
    if too_long and plan.on_bad_row == "error":
        warnings.append(f"~{too_long:,} row(s) are longer than max_length {spec.max_length}: the run "
                        "(long_text='error') stops at the first; on_bad_row='skip' writes them to the rejects file")
    then = ("the run stops at the first (on_bad_row='error')" if plan.on_bad_row == "error"
            else "the run writes them to the rejects file")
    if past_table:
        warnings.append(f"~{past_table:,} row(s) hold a token the model's word embedding table has no row for: {then}")
    if no_tokens:
        warnings.append(f"~{no_tokens:,} row(s) have no tokens the model keeps (its tokenizer drops every character "
                        f"and adds no special tokens): {then}")
    if m["truncated"] > 0.01 and spec.long_text == "truncate":
        warnings.append(f"{100 * m['truncated']:.1f} % of rows are longer than max_length {spec.max_length} and will be "
                        "cut (long_text='chunk-mean' keeps every token)")
    if plan.options.engine == "dask":
        warnings.append("measured on this machine: a Dask cluster's time is this divided by its workers' share")
    if m["cpu_share"] < BUSY_SHARE:
        warnings.append(f"the machine was busy while the sample was timed (its threads had a core "
                        f"{100 * m['cpu_share']:.0f} % of the time they wanted one): the time is long if the run has "
                        "the cores to itself")
    return warnings


def _pca_rows_warning(plan, accepted: int, d: int, approx: bool) -> str | None:
    """The PCA the run would fit and fail on, having encoded every row (or refuse before the first, where the input's
    lines or footers bound its rows: encoder_setup.pca_rows_refusal): fewer rows than it needs (the run's checks:
    pca_steps.fit_pca, pca.validation.check_max_components, Minka's MLE)."""
    from .encoder_setup import pca_rows_refusal

    k, n, about = plan.pca, accepted, "~" if approx else ""
    if k is None:
        return None
    stop = ("the run refuses it before encoding a row" if pca_rows_refusal(plan, d) is not None
            else "the run stops after encoding them and writes nothing")
    if n < 2:
        return f"{about}{n:,} row(s) to fit the PCA on, it needs at least 2: {stop}"
    if isinstance(k, int) and k > n:  # (ALL_COMPONENTS is a str)
        return f"pca={k} needs at least {k} rows, the run has {about}{n:,}: {stop}; choose pca <= {n:,} or a fraction such as 0.95"
    if k == "mle" and n < d:
        return (f"pca='mle' needs at least as many rows as features ({d:,}), the run has {about}{n:,}: {stop}; pass a number "
                "of components or a fraction such as 0.95")
    return None


def render(e: Estimate, console, err_console=None, table: bool = True) -> None:
    """The estimate as a table (rich) on ``console`` (``table`` False, --quiet: none), its warnings on
    ``err_console`` (default: the same)."""
    from rich.table import Table
    from rich.text import Text

    from ..errors import visible

    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    t = Table(title="Estimate", show_header=False,
              caption=f"measured on {e.sample_rows:,} sampled rows; nothing was written")
    t.add_column("")
    t.add_column("", overflow="fold")  # a long path is folded, never cut
    t.add_row("input", Text(visible(e.input)))  # (a Text: never markup, whatever the console)
    t.add_row("rows", f"{e.rows:,}" + (f" ({e.rows_bad:,} bad, first at row {e.first_bad_row})" if e.rows_bad else "")
              + (f" (~{e.rows_too_long:,} too long)" if e.rows_too_long else "")
              + (f", ~{e.rows_distinct:,} distinct (a repeated row is encoded once)"
                 if e.rows_distinct < 0.99 * (e.rows - e.rows_bad - e.rows_too_long) else ""))
    if e.chunks_kept:
        t.add_row("resume", Text(visible(f"{e.rows_kept:,} rows in {e.chunks_kept:,} finished chunk(s) are kept; the "
                                         "tokens and times below are the rest's")))
    t.add_row("tokens", f"~{e.tokens:,} ({e.tokens_per_row:.1f} per row"
              + (f", {100 * e.rows_truncated:.1f} % of rows truncated" if e.rows_truncated else "")
              + (f", {e.windows_per_row:.2f} windows per row" if e.windows_per_row > 1 else "") + ")")
    t.add_row("speed", f"{e.tokens_per_second:,.0f} tokens/s here ({e.model}, {e.precision}, {e.threads} threads)")
    if e.cached is not None:
        t.add_row("cache", f"{100 * e.cached:.0f} % of the sample is cached")
    t.add_row("time", f"~{_duration(e.seconds)}, likely {_duration(e.seconds_low)} to {_duration(e.seconds_high)} "
              f"({_duration(e.encode_seconds)} encoding, {_duration(e.read_seconds)} reading, "
              f"{_duration(e.load_seconds)} loading the model)")
    t.add_row("output", Text(f"{visible(str(e.output))}: ~{mib(e.output_bytes)}, {e.dim_out} features per row"
                             + ("" if e.dim_out == e.dim else f" (of {e.dim})")))
    t.add_row("disk at peak", f"~{mib(e.disk_peak_bytes)}" + (f" ({mib(e.disk_free_bytes)} free)" if e.disk_free_bytes
                                                               is not None else ""))
    limit = f" ({e.memory_limit_source}: {mib(e.memory_limit_bytes)})" if e.memory_limit_bytes else ""
    t.add_row("memory at peak", f"~{mib(e.memory_peak_bytes)}{limit}")
    if table:
        console.print(t)
    for w in e.warnings:
        (err_console or console).print(Text(visible(f"Warning: {w}")), soft_wrap=True)


def _sched_seconds() -> dict[str, tuple[int, int]] | None:
    """Thread id -> (ns on a core, ns waiting for one), for the process's threads (Linux schedstat; None elsewhere).
    Waiting means another process held the core: a busy machine, which CPU time over wall time cannot tell from
    threads idle for want of work."""
    out = {}
    try:
        for task in Path("/proc/self/task").iterdir():
            try:
                fields = (task / "schedstat").read_text().split()
            except OSError:  # a thread that ended meanwhile
                continue
            out[task.name] = (int(fields[0]), int(fields[1]))
    except (OSError, ValueError, IndexError):
        return None
    return out


def _cpu_share(before, after) -> float:
    """Of the time the threads wanted a core between two _sched_seconds readings, the share they had one (threads
    that ended meanwhile are not counted; ones that started count from zero)."""
    if not before or not after:
        return 1.0
    run = wait = 0
    for tid, (r, w) in after.items():
        r0, w0 = before.get(tid, (0, 0))
        run, wait = run + max(r - r0, 0), wait + max(w - w0, 0)
    return run / (run + wait) if run + wait > 0 else 1.0


def time_range(seconds: float, encode_seconds: float, token_spread: float, cpu_share: float) -> tuple[float, float]:
    """The likely range of an estimated run time: the encode's share widened by twice the sample's relative standard
    error of tokens per row and the timing's drift (TIMING_DRIFT); timed on a busy machine (``cpu_share`` below 1),
    the low end is what the encode takes with the cores to itself."""
    rel = float(np.hypot(2 * token_spread, TIMING_DRIFT))
    other = seconds - encode_seconds
    low = other + encode_seconds * (1 - rel) * min(cpu_share, 1.0)
    high = other + encode_seconds * (1 + rel)
    return max(low, 0.0), high


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
