"""Benchmark `extract --engine dask` against the local engine, side by side, round robin.

    python benchmarks/bench_dask.py                               # 20,000 rows CSV; local, LocalCluster 1xCORES,
                                                                  # CORESx1, 4x1, and a `dask scheduler` + CORES
                                                                  # `dask worker --nthreads 1` processes; 3 rounds
    python benchmarks/bench_dask.py --rows 600 --rounds 1 --out /tmp/d.md   # smoke run
    python benchmarks/bench_dask.py --cases local,spawn2 --format parquet

Input: the first ROWS sentences of ../shared/data/sst2/stsa.binary.train (cycled when ROWS exceeds
the file) as one CSV (default) or Parquet file. Model: the default all-MiniLM-L6-v2; default extract
options (the engine cuts the input into a few partitions per worker thread).

Cases (--cases, comma separated):
  local     the single-process engine, all cores (the reference)
  lcWxT     a LocalCluster of W worker processes with T threads each (lc1x2, lc2x1, lc4x1 ...)
  spawnN    a `dask scheduler` and N `dask worker --nthreads 1` processes started here as separate
            commands on loopback, as on N one-core machines (as docs/dask.md starts them: the
            workers' profiler off with DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False)
  CASE:pK   a Dask case with K partitions per worker thread instead of the engine's default

Every run is its own process: it starts its cluster, warms up (model loaded in every worker, files
in the page cache), then times one extract of the input. Rounds run every case once, each round
starting one case later, so a slow spell of the machine falls on all cases; the table gives the
median wall time, and "vs local" is the median over rounds of (local wall / case wall) in the
same round. Every Dask output is checked against that round's local output: same row ids, features
within 1e-5. Each Dask run also records how many encode tasks each worker ran and its busy seconds
(the task stream), so a run where one worker does the work shows. The CPU model and its bf16 flags
head the results (timings differ by machine). Do not time on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
SHARED = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data"))  # the full data sets (tests/data/README.md)
TOL = 1e-5


def sst2_train(n: int) -> list[str]:
    lines = (SHARED / "sst2" / "stsa.binary.train").read_text(encoding="utf-8").splitlines()
    texts = [l.split(" ", 1)[1] for l in lines if l.strip()]
    return [texts[i % len(texts)] for i in range(n)]


def write_input(texts: list[str], path: Path) -> None:
    import pyarrow as pa

    t = pa.table({"text": texts})
    if path.suffix == ".csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(t, path)
    else:
        import pyarrow.parquet as pq

        pq.write_table(t, path)


def features(path: Path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    t = pa.concat_tables([pq.read_table(f).replace_schema_metadata(None) for f in files])
    col = t.column("embedding").combine_chunks()
    return t.column("row").to_numpy(), np.asarray(col.values.to_numpy(zero_copy_only=False)).reshape(len(col), -1)


# --------------------------------------------------------------------------- one case, in its own process
def start_processes(n: int) -> tuple[str, list]:
    """A `dask scheduler` and n `dask worker --nthreads 1` processes on loopback: (address, processes)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = f"tcp://127.0.0.1:{port}"
    # the workers as docs/dask.md starts them: Dask's statistical profiler off
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 env=dict(os.environ, DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED="False"))
    procs = [subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0"], **quiet)]
    time.sleep(2)
    procs += [subprocess.Popen(["dask", "worker", addr, "--nthreads", "1", "--nworkers", "1", "--no-dashboard", "--memory-limit", "0"],
                               **quiet) for _ in range(n)]
    return addr, procs


def parse_case(case: str) -> tuple[str, str, bool]:
    """'lc2x1:p8:noprof' -> ('lc2x1', '8', True): the layout, partitions per thread ('' = the engine's), profiler off."""
    noprof = case.endswith(":noprof")
    base, _, per = case.removesuffix(":noprof").partition(":p")
    return base, per, noprof


def slots_of(base: str, cores: int) -> int:
    """Task slots of a layout: the local engine's threads, W x T, or N spawned one-thread workers."""
    if base == "local":
        return cores
    if base.startswith("lc"):
        w, t = base[2:].split("x")
        return int(w) * int(t)
    return int(base.removeprefix("spawn"))


def run_one(case: str, src: Path, out: Path) -> dict:
    import bertfeat

    case, per, noprof = parse_case(case)
    if noprof:  # lc2x1:noprof - the workers' statistical profiler off (an experiment)
        os.environ["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] = "False"  # the worker processes inherit it
    if per:  # lc2x1:p8 - 8 partitions per worker thread (an experiment)
        import bertfeat.run.dask

        bertfeat.run.dask.PARTS_PER_THREAD = int(per)

    warm = src.with_name("warm" + src.suffix)
    t0 = time.perf_counter()
    if case == "local":
        bertfeat.extract(warm, out.with_name("warm-" + out.name), overwrite=True)  # model load, page cache
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        s = bertfeat.extract(src, out, overwrite=True, command="bench_dask")
        return {"wall_s": time.perf_counter() - t0, "rows": s.rows_written, "tokens": s.tokens, "setup_s": setup}
    import logging

    from distributed import Client, LocalCluster, get_task_stream

    procs, cluster = [], None
    if case.startswith("lc"):
        w, t = (int(x) for x in case[2:].split("x"))
        cluster = LocalCluster(n_workers=w, threads_per_worker=t, processes=True, dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
    else:
        n = int(case.removeprefix("spawn"))
        addr, procs = start_processes(n)
        client = Client(addr, timeout=60)
        client.wait_for_workers(n, timeout=120)
    try:
        bertfeat.extract(warm, out.with_name("warm-" + out.name), engine="dask", client=client, overwrite=True)
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        with get_task_stream(client) as ts:
            s = bertfeat.extract(src, out, engine="dask", client=client, overwrite=True, command="bench_dask")
        wall = time.perf_counter() - t0
        per_worker: dict = {}
        for rec in ts.data:
            if str(rec["key"]).startswith("bertfeat-encode-"):
                w = per_worker.setdefault(rec["worker"], {"tasks": 0, "busy_s": 0.0})
                w["tasks"] += 1
                w["busy_s"] += sum(x["stop"] - x["start"] for x in rec["startstops"] if x["action"] == "compute")
        return {"wall_s": wall, "rows": s.rows_written, "tokens": s.tokens, "setup_s": setup,
                "partitions": len(list(out.glob("part-*.parquet"))), "workers": sorted(per_worker.values(), key=lambda v: -v["tasks"])}
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


# --------------------------------------------------------------------------- the runner
def cpu() -> str:
    from bench_ab import cpu as cpu_line

    return cpu_line()


def case_name(case: str, cores: int) -> str:
    base, per, noprof = parse_case(case)
    if base == "local":
        name = f"local engine (1 process, {cores} threads)"
    elif base.startswith("lc"):
        w, t = base[2:].split("x")
        name = f"LocalCluster {w} worker(s) x {t} thread(s)"
    else:
        name = f"`dask scheduler` + {base.removeprefix('spawn')} x `dask worker --nthreads 1`"
    return name + (f", {per} partitions per thread" if per else "") + (", workers' profiler off" if noprof else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--format", choices=("csv", "parquet"), default="csv")
    ap.add_argument("--cases", default=None, help="default: local,lc1xCORES,lcCORESx1,spawnCORES,lc4x1")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "DASK_RESULTS.md")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one case in this process
    ap.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(run_one(args.one, args.input, args.output)))
        return 0

    import numpy as np

    cores = os.cpu_count() or 1
    cases = (args.cases or f"local,lc1x{cores},lc{cores}x1,spawn{cores},lc4x1").split(",")
    work = Path(tempfile.mkdtemp(prefix="bertfeat-bench-dask-"))
    src = work / f"sst2.{args.format}"
    texts = sst2_train(args.rows)
    write_input(texts, src)
    write_input(texts[:16], work / f"warm.{args.format}")
    runs: dict[str, list[dict]] = {c: [] for c in cases}
    ratios: dict[str, list[float]] = {c: [] for c in cases}
    print(f"CPU: {cpu()}; {cores} cores", flush=True)
    for r in range(args.rounds):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        walls, ref = {}, None
        for case in order:
            out = work / f"r{r}-{case}.parquet"
            p = subprocess.run([sys.executable, __file__, "--one", case, "--input", str(src), "--output", str(out)],
                               capture_output=True, text=True, cwd=ROOT)
            line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
            if p.returncode or line is None:
                print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"case {case} failed (exit {p.returncode})")
            res = json.loads(line[7:])
            assert res["rows"] == args.rows, (case, res["rows"])
            runs[case].append(res)
            walls[case] = res["wall_s"]
            print(f"round {r + 1} {case}: {res['wall_s']:.2f} s" + (f" workers {res['workers']}" if "workers" in res else ""), flush=True)
        ref = features(work / f"r{r}-local.parquet") if "local" in cases else None
        for case in cases:
            if ref is not None and case != "local":
                rows, X = features(work / f"r{r}-{case}.parquet")
                assert np.array_equal(rows, ref[0]), f"{case}: row ids differ from the local engine's"
                diff = float(np.abs(X - ref[1]).max())
                assert diff <= TOL, (case, diff)
                runs[case][-1]["max_abs_diff_vs_local"] = diff
            if "local" in walls:
                ratios[case].append(walls["local"] / walls[case])
        for f in work.glob(f"r{r}-*"):  # keep the disk small
            shutil.rmtree(f) if f.is_dir() else f.unlink()

    tokens_per_row = runs[cases[0]][0]["tokens"] / args.rows
    load = os.getloadavg()
    lines = [
        "# `extract --engine dask` vs the local engine, side by side",
        "",
        f"Command: `python benchmarks/bench_dask.py {' '.join(sys.argv[1:] if argv is None else argv)}`"
        + ("  (a SMOKE run: too few rows for the numbers to mean anything)" if args.rows < 5000 else ""),
        "",
        f"Machine: {cpu()}; {cores} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min).",
        f"Input: {args.rows:,} SST-2 train sentences ({tokens_per_row:.1f} tokens per row, [CLS]/[SEP] included), one "
        f"{args.format.upper()} file, default options; model all-MiniLM-L6-v2 (384-d, its own mean pooling and normalization).",
        f"Each case in its own process, {args.rounds} round(s) round robin; wall = median; vs local = median over rounds "
        "of local wall / case wall in the same round. Every Dask output equals the local one (row ids; features within 1e-5).",
        "",
        "| case | task slots | partitions | wall (s), median | rows/s | tokens/s | vs local | tokens/s per core | encode tasks per worker | busy s per worker | max diff vs local |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for case in cases:
        rs = runs[case]
        wall = statistics.median(r["wall_s"] for r in rs)
        slots = slots_of(parse_case(case)[0], cores)
        last = rs[-1]
        rel = f"{statistics.median(ratios[case]):.2f}" if ratios[case] else "-"
        tasks = " / ".join(str(w["tasks"]) for w in last.get("workers", [])) or "-"
        busy = " / ".join(f"{w['busy_s']:.1f}" for w in last.get("workers", [])) or "-"
        diff = max((r.get("max_abs_diff_vs_local", 0.0) for r in rs), default=0.0) if case != "local" else None
        lines.append(f"| {case_name(case, cores)} | {slots} | {last.get('partitions', '-')} | {wall:.2f} | {args.rows / wall:,.1f} | "
                     f"{last['tokens'] / wall:,.0f} | {rel} | {last['tokens'] / wall / min(slots, cores):,.0f} | {tasks} | {busy} | "
                     f"{'-' if diff is None else f'{diff:.1e}'} |")
    lines += ["", "Per round (wall s): " + "; ".join(f"{c} " + ", ".join(f"{r['wall_s']:.2f}" for r in runs[c]) for c in cases) + ".",
              "Set-up per run, not timed (cluster start, warm-up extract that loads the model in every worker): "
              + "; ".join(f"{c} {statistics.median(r['setup_s'] for r in runs[c]):.1f} s" for c in cases) + ".",
              "", "Raw numbers:", "", "```json", json.dumps({"runs": runs, "ratios_vs_local": ratios}, indent=1), "```", ""]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines[:len(cases) + 12]))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
