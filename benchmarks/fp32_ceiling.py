"""How far bertfeat's fp32 encode is from the fp32 GEMM ceiling of this CPU (issue 23's fp32 goal).

    python benchmarks/fp32_ceiling.py                 # both benchmark models, one thread
    python benchmarks/fp32_ceiling.py --models minilm

For each model, on one thread (each process alone; the 2-thread encode scales 1.92-1.95x here):
  1. the standalone rate of oneDNN's fp32 matmul (the GEMM bertfeat's fp32 path runs) on each linear layer's
     shape at 512 token rows (the default token budget), best of 5 timed loops: the ceiling of the GEMM itself;
  2. one fp32 encode of the benchmark corpus (benchmarks/corpus.py) with every gemm.matmul call timed: the share of
     the time in GEMMs and the GEMMs' rate in place;
  3. what the encode would reach if everything but the GEMMs took no time, and if the GEMMs also ran at their
     standalone rate: the most any fp32 implementation that does the same multiply-adds could gain here.
Then `bertfeat fp32 / ceiling` says how much room is left; compare it with bench_encode.py's fp32 ratio to the best
peer: a 1.15x lead needs the peer at or below (ceiling fraction / 1.15) of this ceiling.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import build_corpus  # noqa: E402

ROWS = 512  # token rows per batch: batching.DEFAULT_BATCH_TOKENS


def linear_shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    H, F = cfg["hidden_size"], cfg["intermediate_size"]
    return {"qkv": (H, 3 * H), "attention_output": (H, H), "ffn_up": (H, F), "ffn_down": (F, H)}


def standalone_gflops(K: int, N: int, rows: int = ROWS, seconds: float = 0.4) -> float:
    """oneDNN fp32 matmul (rows, K) x (K, N), packed weight, on this thread: best of 5 loops."""
    from bertfeat.ops import onednn

    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, K), dtype=np.float32)
    p = onednn.pack(rng.standard_normal((K, N), dtype=np.float32))
    out = np.empty((rows, N), np.float32)
    for _ in range(5):
        onednn.matmul(a, p, out)
    best = 0.0
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            onednn.matmul(a, p, out)
            n += 1
        best = max(best, 2 * rows * K * N * n / (time.perf_counter() - t0) / 1e9)
    return best


def timed_encode(model_dir: Path, texts: list[str], max_length: int) -> dict:
    """One fp32 encode on one thread, every gemm.matmul call timed (model/bert.py calls it as gemm.matmul)."""
    from bertfeat import Encoder
    from bertfeat.ops import gemm

    enc = Encoder(model_dir, precision="fp32", threads=1, max_length=max_length)
    if enc.gemm_path.library != "onednn":
        raise SystemExit(f"fp32 runs on {enc.gemm_path.library} here, not oneDNN: install the fast extra")
    enc.encode(texts[:200])
    spent = [0.0]
    inner = gemm.matmul

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t0

    gemm.matmul = timed
    try:
        t0 = time.perf_counter()
        enc.encode(texts)
        total = time.perf_counter() - t0
    finally:
        gemm.matmul = inner
    tokens = int(sum(len(a) for a in enc.tokenizer.encode(texts, max_length=max_length).ids))
    return {"seconds": total, "gemm_seconds": spent[0], "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="minilm,bert-base", help="minilm, bert-base (comma separated)")
    ap.add_argument("--n", type=int, default=2000, help="sentences for all-MiniLM-L6-v2")
    ap.add_argument("--n-base", type=int, default=600, help="sentences for the bert-base shape")
    ap.add_argument("--max-length", type=int, default=256)
    args = ap.parse_args()

    from bench_encode import bert_base_dir, flops_per_token, machine, minilm_dir

    print(f"Machine: {machine()}")
    rows = []
    for name in args.models.split(","):
        mdir = minilm_dir() if name == "minilm" else bert_base_dir()
        cfg = json.loads((mdir / "config.json").read_text())
        texts = build_corpus(args.n if name == "minilm" else args.n_base)
        L = cfg["num_hidden_layers"]
        shapes = linear_shapes(cfg)
        rates = {k: standalone_gflops(K, N) for k, (K, N) in shapes.items()}
        macs = {k: K * N for k, (K, N) in shapes.items()}
        gemm_flops = 2 * L * sum(macs.values())  # per token
        peak = gemm_flops / sum(2 * L * macs[k] / (rates[k] * 1e9) for k in shapes) / 1e9  # FLOP-weighted rate
        r = timed_encode(mdir, texts, args.max_length)
        tok_s = r["tokens"] / r["seconds"]
        in_place = gemm_flops * r["tokens"] / r["gemm_seconds"] / 1e9
        no_other = r["tokens"] / r["gemm_seconds"]  # everything but the GEMMs free
        ceiling = peak * 1e9 / gemm_flops  # and the GEMMs at their standalone rate
        mean_len = r["tokens"] / len(texts)
        rows.append({"model": name, "tokens": r["tokens"], "tok_s": tok_s, "gemm_share": r["gemm_seconds"] / r["seconds"],
                     "in_place": in_place, "peak": peak, "rates": rates, "no_other": no_other, "ceiling": ceiling,
                     "all_flops": flops_per_token(cfg, mean_len) / gemm_flops})
    print()
    print("| model | bertfeat fp32 tok/s (1 thread) | GEMM share | GEMM GFLOP/s in place | oneDNN standalone GFLOP/s "
          "(qkv / attn out / ffn up / ffn down) | tok/s, other work free | tok/s ceiling | bertfeat / ceiling |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        per = " / ".join(f"{r['rates'][k]:.0f}" for k in ("qkv", "attention_output", "ffn_up", "ffn_down"))
        print(f"| {r['model']} | {r['tok_s']:,.0f} | {100 * r['gemm_share']:.1f} % | {r['in_place']:.1f} | {per} "
              f"(weighted {r['peak']:.1f}) | {r['no_other']:,.0f} | {r['ceiling']:,.0f} | {r['tok_s'] / r['ceiling']:.3f} |")
    print()
    for r in rows:
        frac = r["tok_s"] / r["ceiling"]
        print(f"{r['model']}: bertfeat fp32 runs at {100 * frac:.1f} % of the GEMM ceiling ({r['tokens']:,} tokens; the "
              f"linear layers are {100 / r['all_flops']:.1f} % of the multiply-adds); a 1.15x lead over an fp32 peer needs "
              f"that peer at or below {100 * frac / 1.15:.1f} % of it (1.00 / 1.15 = 87.0 % if bertfeat reached the "
              "ceiling itself).")


if __name__ == "__main__":
    main()
