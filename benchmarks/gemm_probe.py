"""The GEMM alone, per precision, on the CPU at hand: bertfeat's matmul on BERT's linear shapes (issue 45).

    python benchmarks/gemm_probe.py              # both models, 1 thread and all threads: tables
    python benchmarks/gemm_probe.py --json       # the same numbers as one JSON object on stdout
    python benchmarks/gemm_probe.py --quick      # end to end in seconds (short loops, one each): a smoke test

First the CPU (model name and its bf16 / int8 / AMX flags, from /proc/cpuinfo) and the oneDNN kernel each precision
runs on. Then, for each linear layer of all-MiniLM-L6-v2 (384 -> 1152 fused QKV, 384 -> 384, 384 -> 1536,
1536 -> 384) and of bert-base (768 -> 2304, 768 -> 768, 768 -> 3072, 3072 -> 768), at 512 token rows (the encoder's
token budget per batch), the GFLOP/s of bertfeat's own product (gemm.matmul) at
  fp32: the library gemm.resolve("fp32") picks (oneDNN's packed fp32 matmul, or NumPy where bertfeat uses it);
  bf16: bf16 x bf16 -> fp32, the bf16 weight packed by onednn.pack as gemm.prepare packs it;
  int8: u8 x s8 -> s32, the weight quantized and packed by quant.QLinear (what gemm.prepare does for int8): the
        int32 sums alone; quantizing the activations and dequantizing the sums are the rest of an int8 layer;
on one thread and on all of them (one GEMM per thread, each on its own 512 rows, all sharing the packed weight: how
the encoder runs batches side by side), best of --repeats loops of --seconds; with the ratios int8 / bf16 and
bf16 / fp32.

The ceiling a precision implies: the tokens/s of an encode that did nothing but its linear layers' multiply-adds
at these rates, 1 / (layers x sum over the four shapes of 2 K N / rate). Attention products, softmax, LayerNorm,
GELU and tokenizing are left out, so no encode reaches it; bench_encode.py's tokens/s over it is the share of its
ceiling a precision reaches. A precision bertfeat refuses here (no native bf16, no VNNI / AMX) is listed with the
reason and not measured.
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (see bertfeat/ops/threads.py)
import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np

from bertfeat.errors import BertfeatError
from bertfeat.ops import cpu as cpuinfo, gemm, onednn, quant
from bertfeat.ops.threads import default_threads

ROWS = 512  # token rows per product: batching.DEFAULT_BATCH_TOKENS
PRECISIONS = ("fp32", "bf16", "int8")
#: model -> (layers, hidden size, intermediate size)
MODELS = {"minilm": (6, 384, 1536), "bert-base": (12, 768, 3072)}
LAYER_KINDS = ("qkv", "attention_output", "ffn_up", "ffn_down")


def linear_shapes(hidden: int, inter: int) -> dict[str, tuple[int, int]]:
    """(K, N) of a BERT layer's linear products: fused QKV, attention output, FFN up and down."""
    return {"qkv": (hidden, 3 * hidden), "attention_output": (hidden, hidden), "ffn_up": (hidden, inter),
            "ffn_down": (inter, hidden)}


# --------------------------------------------------------------------------- the machine
def cpu_ids() -> str:
    """vendor, family and model numbers from /proc/cpuinfo ("AMD EPYC" alone names several generations)."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]  # the first processor's block
    except OSError:
        return "-"
    info = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
    return ", ".join(f"{k} {info.get(k, '-')}" for k in ("vendor_id", "cpu family", "model"))


def cpu() -> dict:
    """The CPU's model name and ids, cores bertfeat uses, its bf16 / int8 / AMX flags and the oneDNN version."""
    return {"model": cpuinfo.cpu_model(), "ids": cpu_ids(), "threads": default_threads(), "flags": cpuinfo.bf16_flags(),
            "bf16": gemm.bf16_acceleration() or "none", "int8": gemm.int8_acceleration() or "none",
            "onednn": onednn.version() or "not installed"}


def paths() -> tuple[dict, dict]:
    """({precision: GemmPath} bertfeat runs here, {precision: why not} for those it refuses or only emulates)."""
    ok, skipped = {}, {}
    for p in PRECISIONS:
        try:
            path = gemm.resolve(p)
        except BertfeatError as e:
            skipped[p] = e.message
            continue
        if p != "fp32" and path.library != "onednn":
            skipped[p] = f"{path.library}: not a native kernel"
            continue
        ok[p] = path
    return ok, skipped


# --------------------------------------------------------------------------- one product
def weight(precision: str, path: gemm.GemmPath, w: np.ndarray):
    """The (K, N) float32 weight in the form bertfeat multiplies it at ``precision``."""
    if precision == "int8":
        return quant.QLinear(w).packed
    if precision == "bf16":
        return onednn.pack(gemm.to_bf16(w))
    return onednn.pack(w) if path.library == "onednn" else w


def operands(precision: str, x: np.ndarray, w) -> tuple[np.ndarray, np.ndarray]:
    """(a, out) for one thread's product: ``a`` of the weight's input type, ``out`` of its output type."""
    if precision == "int8":
        return quant.quant_rows(x)[0], np.empty((x.shape[0], w.shape[1]), np.int32)
    a = gemm.to_bf16(x) if precision == "bf16" else x
    return a, np.empty((x.shape[0], w.shape[1]), np.float32)


def run_loops(w, a: np.ndarray, out: np.ndarray, seconds: float, start: threading.Barrier, counts: list, i: int):
    """One thread: warm up (its own oneDNN primitive), wait for the others, then count products for ``seconds``."""
    for _ in range(3):
        gemm.matmul(a, w, out)
    start.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        gemm.matmul(a, w, out)
        n += 1
    counts[i] = (n, time.perf_counter() - t0)


def gflops(precision: str, path: gemm.GemmPath, K: int, N: int, threads: int, seconds: float, repeats: int) -> float:
    """GFLOP/s of (ROWS, K) x (K, N) products on ``threads`` threads at once (one product each), best of
    ``repeats`` loops."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    w = weight(precision, path, (rng.standard_normal((K, N), dtype=np.float32) * 0.05).astype(np.float32))
    ops = [operands(precision, rng.standard_normal((ROWS, K), dtype=np.float32), w) for _ in range(threads)]
    best = 0.0
    with threadpool_limits(limits=1, user_api="blas"):  # one BLAS thread per product, as the encoder runs them
        for _ in range(repeats):
            counts, start = [None] * threads, threading.Barrier(threads)
            pool = [threading.Thread(target=run_loops, args=(w, a, out, seconds, start, counts, i))
                    for i, (a, out) in enumerate(ops)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            flops = sum(2 * ROWS * K * N * n for n, _ in counts)
            best = max(best, flops / max(t for _, t in counts) / 1e9)
    return best


# --------------------------------------------------------------------------- the probe
def ceiling(rates: dict[str, float], layers: int, shapes: dict[str, tuple[int, int]]) -> float:
    """tokens/s if an encode did only its linear layers' multiply-adds, each shape at its rate (GFLOP/s)."""
    return 1.0 / sum(layers * 2 * K * N / (rates[k] * 1e9) for k, (K, N) in shapes.items())


def probe(models: list[str], thread_counts: list[int], seconds: float, repeats: int) -> dict:
    """Every rate and ceiling, as one dict (what --json prints)."""
    ok, skipped = paths()
    res = {"cpu": cpu(), "rows": ROWS, "seconds": seconds, "repeats": repeats, "kernels": kernels(ok),
           "skipped": skipped, "rates": [], "ceilings": []}
    for name in models:
        layers, hidden, inter = MODELS[name]
        shapes = linear_shapes(hidden, inter)
        for threads in thread_counts:
            by = {p: {k: gflops(p, ok[p], K, N, threads, seconds, repeats) for k, (K, N) in shapes.items()} for p in ok}
            for k, (K, N) in shapes.items():
                res["rates"].append({"model": name, "layer": k, "K": K, "N": N, "threads": threads,
                                     **{p: by[p][k] for p in ok}})
            res["ceilings"].append({"model": name, "threads": threads,
                                    **{p: ceiling(by[p], layers, shapes) for p in ok}})
    return res


def _ratio(row: dict, a: str, b: str) -> str:
    return f"{row[a] / row[b]:.2f}x" if a in row and b in row else "-"


def _cell(row: dict, p: str, fmt: str) -> str:
    return format(row[p], fmt) if p in row else "-"


def kernels(ok: dict) -> dict[str, str]:
    """{precision: the oneDNN kernel (or library) it runs on}."""
    return {p: path.kernel or path.library for p, path in ok.items()}


def header(c: dict, kernel: dict, skipped: dict) -> str:
    """The CPU, its flags and the kernel of each precision (what the tables were measured on)."""
    lines = [f"CPU: {c['model']} ({c['ids']}), {c['threads']} threads; flags: {', '.join(c['flags']) or 'none'} "
             f"(bf16: {c['bf16']}, int8: {c['int8']}); oneDNN {c['onednn']}",
             "kernels: " + ", ".join(f"{p} {k}" for p, k in kernel.items())]
    return "\n".join(lines + [f"not measured: {p} ({why})" for p, why in skipped.items()])


def tables(res: dict) -> str:
    """The rates and the ceilings as markdown tables."""
    lines = [f"GFLOP/s of one product at {res['rows']} token rows per thread (best of {res['repeats']} loops "
              f"of {res['seconds']} s; all threads: the sum over threads)", "",
              "| model | layer | K -> N | threads | fp32 | bf16 | int8 | int8 / bf16 | bf16 / fp32 |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["rates"]:
        lines.append(f"| {r['model']} | {r['layer']} | {r['K']} -> {r['N']} | {r['threads']} | "
                     + " | ".join(_cell(r, p, ",.0f") for p in PRECISIONS)
                     + f" | {_ratio(r, 'int8', 'bf16')} | {_ratio(r, 'bf16', 'fp32')} |")
    lines += ["", "Ceiling: tokens/s if an encode did only its linear layers' multiply-adds at these rates", "",
              "| model | threads | fp32 | bf16 | int8 | int8 / bf16 | bf16 / fp32 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["ceilings"]:
        lines.append(f"| {r['model']} | {r['threads']} | " + " | ".join(_cell(r, p, ",.0f") for p in PRECISIONS)
                     + f" | {_ratio(r, 'int8', 'bf16')} | {_ratio(r, 'bf16', 'fp32')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="minilm,bert-base", help="comma separated: " + ", ".join(MODELS))
    ap.add_argument("--seconds", type=float, default=0.3, help="length of one timed loop")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops per rate (the best is kept)")
    ap.add_argument("--threads", default=None, help="thread counts, comma separated (default: 1 and all)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    ap.add_argument("--quick", action="store_true", help="smoke test: --seconds 0.02 --repeats 1")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.repeats = 0.02, 1
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(MODELS)}")
    if not args.json:  # the CPU first, before the minutes of timing
        ok, skipped = paths()
        print(header(cpu(), kernels(ok), skipped), flush=True)
    threads = sorted({int(t) for t in args.threads.split(",")} if args.threads else {1, default_threads()})
    res = probe(models, threads, args.seconds, args.repeats)
    print(json.dumps(res, indent=1) if args.json else "\n" + tables(res))


if __name__ == "__main__":
    main()
