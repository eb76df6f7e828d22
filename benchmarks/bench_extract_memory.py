"""Benchmark `bertfeat extract` on a large generated CSV: rows/s and peak RSS (memory must stay bounded).

    python benchmarks/bench_extract_memory.py                   # 1,000,000 rows (the real run: hours on 2 cores)
    python benchmarks/bench_extract_memory.py --rows 2000       # smoke run

Input: ``benchmarks/_work/extract_<ROWS>.csv`` (gitignored; generated once, reused), columns
``id,text``: the ~4,000 real sentences of benchmarks/corpus.py (SST-2, TREC, STSb) cycled, each
with its row number appended so no two rows are equal. Model: all-MiniLM-L6-v2 unless --model.

The run is the real command line, ``bertfeat extract INPUT -o OUTPUT --id-column id`` in a child
process (its progress log lines pass through to stderr). Peak RSS is the child's maximum resident
set size from ``os.wait4`` (the kernel's high-water mark, not a sample). The budget the issue sets
is the model's weight files plus 1 GiB: the streaming reader, the bounded read-ahead queue, the
per-chunk part files and the streaming writer keep memory independent of the number of rows.

Throughput is rows (and real tokens) per second of wall time, start-up and model load included,
and per second of encoding time (from the first to the last progress, i.e. wall minus start-up,
measured as the wall time of a 1-row run).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
WORK = ROOT / "benchmarks" / "_work"
GiB = 1 << 30


def generate_csv(path: Path, rows: int) -> Path:
    """Write the input once (to a temporary name, then rename: an interrupted generation is not reused)."""
    if path.is_file():
        return path
    from corpus import build_corpus

    sentences = build_corpus(4000)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    t0 = time.perf_counter()
    with open(tmp, "w", newline="", encoding="utf-8", buffering=1 << 20) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "text"])
        for i in range(rows):
            w.writerow([f"r{i:08d}", f"{sentences[i % len(sentences)]} ({i})"])
    os.replace(tmp, path)
    print(f"generated {path} ({rows:,} rows, {path.stat().st_size / 2**20:,.1f} MiB) in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return path


def model_bytes(model: str | None) -> tuple[str, int]:
    from bertfeat.model.hub import resolve_model

    loc = resolve_model(model)
    files = [p for p in Path(loc.path).iterdir() if p.suffix in (".safetensors", ".bin", ".h5", ".msgpack", ".pt")]
    return loc.model_id, sum(p.stat().st_size for p in files)


def run_extract(src: Path, out: Path, args: list[str], quiet: bool) -> dict:
    """`bertfeat extract` in a child process -> wall time, peak RSS, exit code."""
    cmd = [shutil.which("bertfeat") or "bertfeat", "extract", str(src), "-o", str(out), "--id-column", "id", "--overwrite", *args]
    if quiet:
        cmd.append("-q")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"cmd": " ".join(cmd), "exit": p.returncode, "wall_s": wall, "peak_rss": usage.ru_maxrss * 1024}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the generated CSV (default 1,000,000)")
    ap.add_argument("--model", default=None, help="model (default all-MiniLM-L6-v2)")
    ap.add_argument("--chunk-rows", type=int, default=None, help="--chunk-rows for extract (default: bertfeat's)")
    ap.add_argument("--threads", type=int, default=None, help="--threads for extract (default: all cores)")
    ap.add_argument("--keep", action="store_true", help="keep the output file (the input CSV is always kept for reuse)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this file")
    a = ap.parse_args(argv)

    src = generate_csv(WORK / f"extract_{a.rows}.csv", a.rows)
    out = WORK / f"extract_{a.rows}.features.parquet"
    extra = []
    if a.model:
        extra += ["--model", a.model]
    if a.chunk_rows:
        extra += ["--chunk-rows", str(a.chunk_rows)]
    if a.threads:
        extra += ["--threads", str(a.threads)]
    model_id, mbytes = model_bytes(a.model)
    budget = mbytes + GiB

    # start-up cost (imports, model load, one row): subtracted to get the encoding rate
    one = generate_csv(WORK / "extract_1.csv", 1)
    base = run_extract(one, WORK / "extract_1.features.parquet", extra, quiet=True)
    (WORK / "extract_1.features.parquet").unlink(missing_ok=True)
    if base["exit"] != 0:
        print(f"the 1-row run failed (exit {base['exit']}): {base['cmd']}", file=sys.stderr)
        return 1

    print(f"running: bertfeat extract on {a.rows:,} rows ...", file=sys.stderr)
    r = run_extract(src, out, extra, quiet=False)
    if r["exit"] != 0:
        print(f"extract failed (exit {r['exit']}): {r['cmd']}", file=sys.stderr)
        return 1
    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(out).metadata[b"bertfeat"])
    written, tokens = meta["rows"]["written"], meta["tokens"]["total"]
    if written != a.rows or pq.ParquetFile(out).metadata.num_rows != a.rows:
        print(f"expected {a.rows:,} output rows, got {written:,}", file=sys.stderr)
        return 1
    encode_s = max(r["wall_s"] - base["wall_s"], 1e-9)
    res = {
        "rows": a.rows, "tokens": tokens, "model": model_id, "model_weight_bytes": mbytes,
        "input_bytes": src.stat().st_size, "output_bytes": out.stat().st_size,
        "wall_s": round(r["wall_s"], 2), "startup_s": round(base["wall_s"], 2),
        "rows_per_s": round(a.rows / r["wall_s"], 1), "rows_per_s_encoding": round(a.rows / encode_s, 1),
        "tokens_per_s_encoding": round(tokens / encode_s, 1),
        "peak_rss_bytes": r["peak_rss"], "peak_rss_1_row_bytes": base["peak_rss"], "budget_bytes": budget,
        "within_budget": r["peak_rss"] <= budget,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": r["cmd"],
    }
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    print(f"""
bertfeat extract, {a.rows:,} rows ({mib(res['input_bytes'])} CSV), {model_id}
  wall time        {r['wall_s']:,.1f} s (start-up {base['wall_s']:.1f} s)
  throughput       {res['rows_per_s']:,.1f} rows/s overall, {res['rows_per_s_encoding']:,.1f} rows/s and {res['tokens_per_s_encoding']:,.0f} tokens/s encoding
  peak RSS         {mib(r['peak_rss'])} (a 1-row run: {mib(base['peak_rss'])})
  budget           {mib(budget)} = model weights {mib(mbytes)} + 1 GiB -> {'OK' if res['within_budget'] else 'OVER BUDGET'}
  machine          {res['machine']}""")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    if not a.keep:
        out.unlink(missing_ok=True)
    return 0 if res["within_budget"] else 2


if __name__ == "__main__":
    sys.exit(main())
