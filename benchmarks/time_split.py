"""Where an encode's time goes, per precision: the linear layers' GEMMs, attention, and the rest (issue 45).

    python benchmarks/time_split.py                                  # MiniLM and the bert-base shape, fp32 / bf16 / int8
    python benchmarks/time_split.py --models bert-base --precisions bf16,int8 --rounds 5
    python benchmarks/time_split.py --quick --json                   # smoke test: 20 sentences, 1 round, JSON
    python benchmarks/time_split.py --kernels --precisions bf16,int8  # + each element-wise kernel's time

One thread (so the timers add up to the wall time), each (model, precision) its own process, round robin, medians.
In each run ``ops.gemm.matmul`` (every linear layer's product) and ``model.bert.attend`` (scores, softmax, context)
are wrapped with timers after the warm-up; "rest" is the encode's time less those two: the element-wise kernels
(LayerNorm, bias + GELU, int8's quantizing and dequantizing), the embeddings, pooling and the batching around them.
"GEMM GFLOP/s" is the rate the products ran at inside the encode (2 M K N per call over the time in matmul), to
set beside benchmarks/gemm_probe.py's standalone rates.

The last line bounds int8 / bf16 from these numbers: bf16's time over (int8's GEMMs + bf16's attention and rest),
what int8 would reach if everything around its GEMMs cost what bf16's does.

``--kernels`` also wraps every element-wise kernel in force (``model.bert.Ops``: numba's, or the NumPy twins) with a
timer and prints a table per model: each kernel's seconds, calls and nanoseconds per element of its first argument
(an int32 / float32 product for the dequantizing kernels, the rows for the others), so the int8 kernels' cost can be
set beside bf16's LayerNorm on any CPU. The softmax is timed inside the attention's timer; the others are in "rest".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
import bertfeat  # first, before NumPy: it picks OpenBLAS's kernels as the CLI does (bertfeat/ops/threads.py)
from bertfeat import Encoder
from bertfeat.model import bert
from bertfeat.ops import gemm
from corpus import build_corpus

texts = build_corpus({n})
enc = Encoder({model!r}, max_length={max_length}, precision={precision!r}, threads=1)
enc.encode(texts[:{warmup}])
acc = {{"gemm": 0.0, "flop": 0.0, "calls": 0, "attend": 0.0}}
real_matmul, real_attend = gemm.matmul, bert.attend

def matmul(x, w, *args, **kwargs):
    t = time.perf_counter()
    y = real_matmul(x, w, *args, **kwargs)
    acc["gemm"] += time.perf_counter() - t
    acc["calls"] += 1
    acc["flop"] += 2.0 * x.shape[0] * x.shape[1] * y.shape[-1]
    return y

def attend(*args, **kwargs):
    t = time.perf_counter()
    out = real_attend(*args, **kwargs)
    acc["attend"] += time.perf_counter() - t
    return out

gemm.matmul, bert.attend = matmul, attend
kern = {{}}
if {kernels}:
    import dataclasses

    def timed(name, f):
        def run(*args):
            t = time.perf_counter()
            out = f(*args)
            k = kern.setdefault(name, {{"s": 0.0, "calls": 0, "elements": 0}})
            k["s"] += time.perf_counter() - t
            k["calls"] += 1
            k["elements"] += args[0].size
            return out
        return run

    ops = bert.elementwise()
    wrapped = {{f.name: timed(f.name, getattr(ops, f.name)) for f in dataclasses.fields(ops)
               if callable(getattr(ops, f.name))}}
    for group in ("acts", "acts16", "dq_acts_q8"):
        wrapped[group] = {{a: timed(f"{{group}}[{{a}}]", f) for a, f in getattr(ops, group).items()}}
    bert._ops[1] = dataclasses.replace(ops, **wrapped)  # what elementwise() returns for every batch after this
tokens = int(sum(len(a) for a in enc.tokenizer.encode(texts, max_length={max_length}).ids))
t0 = time.perf_counter()
enc.encode(texts)
acc["total"] = time.perf_counter() - t0
acc["tokens"] = tokens
acc["kernels"] = kern
print(json.dumps(acc))
"""


def run_one(model: str | None, precision: str, n: int, warmup: int, max_length: int, kernels: bool = False) -> dict:
    code = WORKER.format(bench=str(HERE), model=model, precision=precision, n=n, warmup=warmup,
                         max_length=max_length, kernels=kernels)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if p.returncode:
        raise SystemExit(f"{precision} run failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    med = {k: statistics.median(r[k] for r in runs) for k in ("total", "gemm", "attend", "flop", "calls", "tokens")}
    med["rest"] = statistics.median(r["total"] - r["gemm"] - r["attend"] for r in runs)
    med["gflops"] = statistics.median(r["flop"] / r["gemm"] / 1e9 for r in runs)
    names = sorted({k for r in runs for k in r.get("kernels", {})})
    med["kernels"] = {k: {f: statistics.median(r["kernels"].get(k, {}).get(f, 0) for r in runs)
                          for f in ("s", "calls", "elements")} for k in names}
    return med


def kernel_table(name: str, results: dict[str, dict]) -> str:
    """Each precision's element-wise kernels (--kernels): seconds, share of the encode, calls, ns per element."""
    lines = [f"### {name}: the element-wise kernels, one thread, medians", "",
             "| precision | kernel | s | share of the encode | calls | ns / element |", "|---|---|---:|---:|---:|---:|"]
    for prec, m in results.items():
        for k, v in sorted(m["kernels"].items(), key=lambda kv: -kv[1]["s"]):
            per = 1e9 * v["s"] / v["elements"] if v["elements"] else 0.0
            lines.append(f"| {prec} | `{k}` | {v['s']:.3f} | {v['s'] / m['total']:.0%} | {v['calls']:,.0f} | {per:.2f} |")
    return "\n".join(lines)


def table(name: str, results: dict[str, dict]) -> str:
    lines = [f"### {name}: one thread, medians", "",
             "| precision | total s | tok/s | GEMMs s (share) | attention s (share) | rest s (share) | GEMM GFLOP/s | GEMM calls |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for prec, m in results.items():
        t = m["total"]
        lines.append(f"| {prec} | {t:.2f} | {m['tokens'] / t:,.0f} | {m['gemm']:.2f} ({m['gemm'] / t:.0%}) | "
                     f"{m['attend']:.2f} ({m['attend'] / t:.0%}) | {m['rest']:.2f} ({m['rest'] / t:.0%}) | "
                     f"{m['gflops']:,.0f} | {m['calls']:,.0f} |")
    if "bf16" in results and "int8" in results:
        b, i = results["bf16"], results["int8"]
        bound = b["total"] / (i["gemm"] + b["attend"] + b["rest"])
        lines += ["", f"int8 / bf16 measured: {b['total'] / i['total']:.2f}x; with int8's attention and rest at bf16's: "
                      f"{bound:.2f}x (bf16 {b['total']:.2f} s / (int8 GEMMs {i['gemm']:.2f} + bf16 attention "
                      f"{b['attend']:.2f} + rest {b['rest']:.2f}))"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="minilm,bert-base")
    ap.add_argument("--precisions", default="fp32,bf16,int8")
    ap.add_argument("--n", type=int, default=2000, help="sentences for all-MiniLM-L6-v2")
    ap.add_argument("--n-base", type=int, default=600, help="sentences (the first of the same corpus) for bert-base")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--json", action="store_true", help="print {model: {precision: medians}} as JSON, no tables")
    ap.add_argument("--kernels", action="store_true", help="also time each element-wise kernel (a table per model)")
    ap.add_argument("--quick", action="store_true", help="smoke test: --n 20 --n-base 10 --rounds 1 --warmup 4")
    args = ap.parse_args()
    if args.quick:
        args.n, args.n_base, args.rounds, args.warmup = 20, 10, 1, 4

    sys.path.insert(0, str(HERE))
    from bench_encode import bert_base_dir
    from gemm_probe import cpu, header, kernels, paths

    ok, skipped = paths()
    if not args.json:
        print(header(cpu(), kernels(ok), skipped), flush=True)
    precisions = [p for p in args.precisions.split(",") if p in ok]  # those the CPU runs natively
    out: dict[str, dict] = {}
    for name in args.models.split(","):
        model = None if name == "minilm" else str(bert_base_dir())
        n = args.n if name == "minilm" else args.n_base
        runs: dict[str, list[dict]] = {p: [] for p in precisions}
        for r in range(args.rounds):
            for p in precisions[r % len(precisions):] + precisions[:r % len(precisions)]:  # each round starts one later
                runs[p].append(run_one(model, p, n, args.warmup, args.max_length, args.kernels))
        out[name] = {p: summary(v) for p, v in runs.items()}
        if not args.json:
            print("\n" + table(f"{name}, {n} sentences", out[name]), flush=True)
            if args.kernels:
                print("\n" + kernel_table(f"{name}, {n} sentences", out[name]), flush=True)
    if args.json:
        print(json.dumps({"cpu": cpu(), "skipped": skipped, "models": out}, indent=1))


if __name__ == "__main__":
    main()
