"""Benchmark `extract --engine dask` against the local engine, on LocalClusters and on a real scheduler.

    python benchmarks/bench_dask.py                          # 20,000 SST-2 rows; LocalCluster 1x2 and 2x1, then
                                                             # a `dask scheduler` + 2 `dask worker --nthreads 1`
    python benchmarks/bench_dask.py --rows 200 --out /tmp/d.md   # smoke run
    python benchmarks/bench_dask.py --layouts 1x2,2x1,4x1 --spawn 0   # LocalClusters only (4x1: more workers than cores)
    python benchmarks/bench_dask.py --scheduler tcp://HOST:8786 --skip-local --layouts ""   # workers you started

Input: the first ROWS sentences of ../shared/data/sst2/stsa.binary.train (cycled when ROWS exceeds
the file) as one Parquet file. Model: the default all-MiniLM-L6-v2. Default extract options
(--blocksize 8MiB): the engine cuts the input into a few partitions per worker thread. Cases,
each on an already started cluster whose workers have loaded the model (cluster start and
model load are timed apart):

  local           the single-process engine, --threads = all cores (reference)
  LocalCluster WxT  W worker processes with T threads each (--layouts, default 1xCORES and CORESx1)
  scheduler xN    a `dask scheduler` and N `dask worker --nthreads 1` processes started here on
                  loopback as separate commands, as on N one-core machines (--spawn N, default cores)
  scheduler ADDR  workers you started (--scheduler)

Every Dask output is checked against the local output: same row ids, features within 1e-5.
Throughput is rows and tokens (real tokens, [CLS]/[SEP] included) per second of wall time.
Per-core throughput is a case's rate / its worker threads. Results go to
benchmarks/DASK_RESULTS.md (or --out). Do not time on a busy machine.
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (bertfeat/threads.py)
import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data"))  # the full data sets (tests/data/README.md)


def sst2_train(n: int) -> list[str]:
    lines = (SHARED / "sst2" / "stsa.binary.train").read_text(encoding="utf-8").splitlines()
    texts = [l.split(" ", 1)[1] for l in lines if l.strip()]
    return [texts[i % len(texts)] for i in range(n)]


def write_input(texts: list[str], path: Path, parts: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), path, row_group_size=max(1, -(-len(texts) // parts)))


def run_case(name, fn, rows_expected):
    t0 = time.perf_counter()
    s = fn()
    wall = time.perf_counter() - t0
    assert s.rows_written == rows_expected, (name, s.rows_written, rows_expected)
    return {"case": name, "rows": s.rows_written, "tokens": s.tokens, "wall_s": wall,
            "rows_per_s": s.rows_written / wall, "tokens_per_s": s.tokens / wall}


def parse_layouts(text: str, cores: int) -> list[tuple[int, int, int | None]]:
    """'1x2,2x1,1x1:2' -> [(workers, threads per worker, encoder threads or None = the engine's default)]."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        wt, _, enc = item.partition(":")
        w, _, t = wt.partition("x")
        out.append((int(w), int(t or 1), int(enc) if enc else None))
    return out


def start_processes(n: int, env: dict) -> tuple[str, list]:
    """A `dask scheduler` and n `dask worker --nthreads 1` processes on loopback: (address, processes)."""
    port = 20000 + os.getpid() % 20000
    addr = f"tcp://127.0.0.1:{port}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    procs = [subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", ":0"], **quiet)]
    time.sleep(2)
    procs += [subprocess.Popen(["dask", "worker", addr, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                                "--memory-limit", "0"], **quiet) for _ in range(n)]
    return addr, procs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--layouts", default=None, help="LocalCluster layouts WxT[:E] (workers x threads per worker, "
                    "E encoder threads per task), comma separated; default 1xCORES,CORESx1; '' for none")
    ap.add_argument("--spawn", type=int, default=None, help="start a dask scheduler and this many `dask worker "
                    "--nthreads 1` processes (default: cores; 0: none)")
    ap.add_argument("--scheduler", default=None, help="also run on this scheduler's workers (started by you)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "DASK_RESULTS.md")
    ap.add_argument("--skip-local", action="store_true", help="do not run the single-process reference")
    args = ap.parse_args(argv)

    import numpy as np
    import pyarrow.parquet as pq
    from distributed import Client, LocalCluster

    from bertfeat.dask_engine import DaskOptions, cluster_slots, extract_dask
    from bertfeat.pipeline import ExtractOptions, extract
    from bertfeat.threads import default_threads

    cores = default_threads()
    layouts = parse_layouts(f"1x{cores},{cores}x1" if args.layouts is None else args.layouts, cores)
    spawn = cores if args.spawn is None else args.spawn
    work = Path(tempfile.mkdtemp(prefix="bertfeat-bench-dask-"))
    results, setup = [], {}
    procs: list = []

    def features(path: Path):
        files = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
        t = __import__("pyarrow").concat_tables([pq.read_table(f).replace_schema_metadata(None) for f in files])
        col = t.column("embedding").combine_chunks()
        return t.column("row").to_pylist(), col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)

    try:
        texts = sst2_train(args.rows)
        src = work / "sst2.parquet"
        write_input(texts, src, 1)
        warm = work / "warm.parquet"
        write_input(texts[:8], warm, 1)

        def opts(out, **kw):
            return ExtractOptions(input=str(src), output=str(work / out), command="bench_dask", overwrite=True, **kw)

        ref = None
        if not args.skip_local:
            extract(ExtractOptions(input=str(warm), output=str(work / "w.parquet"), overwrite=True))  # model files in the page cache
            r = run_case(f"local (1 process, {cores} threads)", lambda: extract(opts("local.parquet")), args.rows)
            r["slots"] = cores
            results.append(r)
            ref = features(work / "local.parquet")

        def on_client(name, client, t_cluster, enc_threads, slots_used):
            t0 = time.perf_counter()  # first call: the plugin loads the model in every worker
            extract_dask(ExtractOptions(input=str(warm), output=str(work / "w.parquet"), threads=enc_threads, overwrite=True),
                         DaskOptions(), client=client)
            t_warm = time.perf_counter() - t0
            setup[name] = {"cluster_start_s": t_cluster, "first_call_s": t_warm, "worker_threads": cluster_slots(client)}
            out = f"dask{len(results)}.parquet"
            r = run_case(name, lambda: extract_dask(opts(out, threads=enc_threads), DaskOptions(), client=client), args.rows)
            r["slots"] = slots_used or cluster_slots(client)
            r["partitions"] = len(list((work / out).glob("part-*.parquet")))
            if ref is not None:
                rows, X = features(work / out)
                assert rows == ref[0], f"{name}: row ids differ from the local engine's"
                r["max_abs_diff_vs_local"] = float(np.abs(X - ref[1]).max())
            results.append(r)

        env = dict(os.environ)
        for w, t, e in layouts:
            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=w, threads_per_worker=t, processes=True, dashboard_address=None,
                                   silence_logs=logging.ERROR)
            client = Client(cluster)
            try:
                on_client(f"LocalCluster {w}x{t}" + (f", {e} encoder threads per task" if e else ""), client,
                          time.perf_counter() - t0, e, min(cores, w * t * (e or 1)))
            finally:
                client.close()
                cluster.close()
        if spawn:
            t0 = time.perf_counter()
            addr, procs = start_processes(spawn, env)
            client = Client(addr, timeout=60)
            try:
                client.wait_for_workers(spawn, timeout=120)
                on_client(f"dask scheduler + {spawn} x `dask worker --nthreads 1`", client, time.perf_counter() - t0, None, spawn)
            finally:
                client.close()
        if args.scheduler:
            client = Client(args.scheduler, timeout=60)
            try:
                on_client(f"scheduler {args.scheduler}", client, 0.0, None, None)
            finally:
                client.close()
    finally:
        for p in procs:  # only the processes started here
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)

    local = next((r for r in results if r["case"].startswith("local")), None)
    tokens_per_row = results[0]["tokens"] / results[0]["rows"]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines = [
        "# `extract --engine dask` vs the local engine on this machine",
        "",
        f"Command: `python benchmarks/bench_dask.py {' '.join(sys.argv[1:] if argv is None else argv)}`"
        + ("  (a SMOKE run: too few rows for the numbers to mean anything)" if args.rows < 5000 else ""),
        "",
        f"Machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}; load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min).",
        f"Input: {args.rows:,} SST-2 train sentences ({tokens_per_row:.1f} tokens per row, [CLS]/[SEP] included), one "
        "Parquet file, default options; model all-MiniLM-L6-v2 (384-d, mean pooling).",
        "",
        "| case | partitions | rows | wall (s) | rows/s | tokens/s | vs local | tokens/s per core | max diff vs local |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        rel = f"{r['rows_per_s'] / local['rows_per_s']:.2f}" if local else "-"
        diff = f"{r['max_abs_diff_vs_local']:.1e}" if "max_abs_diff_vs_local" in r else "-"
        lines.append(f"| {r['case']} | {r.get('partitions', '-')} | {r['rows']:,} | {r['wall_s']:.2f} | {r['rows_per_s']:,.1f} | "
                     f"{r['tokens_per_s']:,.0f} | {rel} | {r['tokens_per_s'] / r['slots']:,.0f} | {diff} |")
    lines += [
        "",
        "Fixed costs (not in the table): " + "; ".join(
            f"{n}: cluster start {v['cluster_start_s']:.1f} s, first call (model load in every worker) {v['first_call_s']:.1f} s"
            for n, v in setup.items()) + ".",
        "",
        "Raw numbers:",
        "",
        "```json",
        json.dumps({"results": results, "setup": setup}, indent=2),
        "```",
        "",
    ]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
