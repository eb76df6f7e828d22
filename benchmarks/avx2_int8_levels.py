"""What int8 would give on a CPU without VNNI or AMX (AVX2 only), which bertfeat refuses: measured, not guessed.

    python benchmarks/avx2_int8_levels.py                  # 4,000 corpus sentences, 5 rounds, all-MiniLM-L6-v2
    python benchmarks/avx2_int8_levels.py --n 300 --rounds 1   # a smoke test

oneDNN's int8 matmul on such a CPU (gemm:jit on AVX2, brg:avx512_core on AVX-512 without VNNI) multiplies with
vpmaddubsw, which adds each pair of uint8 x int8 products (inputs k = 2i, 2i + 1) in 16 bits with saturation: exact
only while 2 A W <= 32767 for activations in [0, A] and weights in [-W, W]. Scheme "6"'s 8-bit inputs (A = 255,
W = 127) are not (the first table: oneDNN's int32 sums against exact ones, random inputs), though the kernel runs ~2x
bertfeat's fp32 GEMM (the second table, one thread, gemm_probe.py's measurement). Each variant below is
scheme "6" with narrower levels, so that the product is exact, plus the quality levers that win back some of what the
levels lose; it runs from a copy of bertfeat whose constants (quant.py, kernels.py: numba compiles them in) are
rewritten, and whose int8 refusal (gemm.py) is lifted. Each variant and fp32 runs in its own process, round robin,
median of --rounds; min cosine against fp32's features over the same sentences.
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (see bertfeat/ops/threads.py)
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "bertfeat"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: name: (A activation levels, W weight levels, SHORT_TOKENS, TOP, TOP_RATIO); the residual's step is s_w / (2 W)
VARIANTS = {
    "int8 scheme 6 as on VNNI (255 / 127): its sums saturate": (255, 127, 8, 2, 4.0),
    "int8 7-bit activations (127 / 127)": (127, 127, 8, 2, 4.0),
    "int8 balanced (181 / 90)": (181, 90, 8, 2, 4.0),
    "int8 balanced + short <= 16 tokens at 2 levels + 4 top channels over 3x rms": (181, 90, 16, 4, 3.0),
}


def rewrite(text: str, pairs: list[tuple[str, str]], name: str) -> str:
    for old, new in pairs:
        if text.count(old) != 1:
            raise SystemExit(f"avx2_int8_levels: {name} no longer holds {old!r} once; update this script's rewrite")
        text = text.replace(old, new)
    return text


def variant_tree(root: Path, a: int, w: int, short: int, top: int, ratio: float) -> Path:
    """A copy of the bertfeat package at ``root``/bertfeat with the variant's constants; returns root."""
    dst = root / "bertfeat"
    shutil.copytree(PACKAGE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    edits = {
        "ops/kernels.py": [("s = (hi - lo) * f32(1.0 / 255.0)", f"s = (hi - lo) * f32(1.0 / {a}.0)"),
                           ("zero), f32(255.0))", f"zero), f32({a}.0))"),
                           ("inv_resid = f32(1.0 / 254.0)", f"inv_resid = f32(1.0 / {2 * w}.0)"),
                           ("top_n = 2 ", f"top_n = {top} "), ("top_ratio2 = f32(4.0 * 4.0)", f"top_ratio2 = f32({ratio} * {ratio})")],
        "ops/quant.py": [("amax / np.float32(127.0)", f"amax / np.float32({w}.0)"),
                         ("np.rint(ws / self.scale), -127, 127)", f"np.rint(ws / self.scale), -{w}, {w})"),
                         ("(self.scale / np.float32(RESID))), -127, 127)", f"(self.scale / np.float32(RESID))), -{w}, {w})"),
                         ("\nRESID = 254.0", f"\nRESID = {2 * w}.0"), ("\nSHORT_TOKENS = 8", f"\nSHORT_TOKENS = {short}"),
                         ("\nTOP = 2", f"\nTOP = {top}"), ("\nTOP_RATIO = 4.0", f"\nTOP_RATIO = {ratio}")],
        "ops/gemm.py": [("    acc = int8_acceleration()\n", "    acc = int8_acceleration() or 'none'\n"),
                        ("    if not native_int8_kernel(kernel):\n", "    if False:\n")],
    }
    for rel, pairs in edits.items():
        p = dst / rel
        p.write_text(rewrite(p.read_text(encoding="utf-8"), pairs, rel), encoding="utf-8")
    return root


def saturation_table() -> list[str]:
    """oneDNN's int8 product here at each (A, W) against exact int64 sums (random inputs over the full ranges)."""
    from bertfeat.ops import onednn

    rng = np.random.default_rng(0)
    rows = ["| activations [0, A] | weights [-W, W] | oneDNN kernel | sums wrong | max error |", "|---:|---:|---|---:|---:|"]
    for a, w in sorted({v[:2] for v in VARIANTS.values()}, reverse=True):
        x = rng.integers(0, a + 1, (512, 384)).astype(np.uint8)
        wq = rng.integers(-w, w + 1, (384, 1536)).astype(np.int8)
        p = onednn.pack(wq)
        out = onednn.matmul(x, p, out=np.empty((512, 1536), np.int32))
        err = np.abs(out.astype(np.int64) - x.astype(np.int64) @ wq.astype(np.int64))
        rows.append(f"| {a} | {w} | {p.impl} | {(err > 0).mean():.1%} | {int(err.max()):,} |")
    return rows


def gemm_table() -> list[str]:
    """GFLOP/s of oneDNN's int8 kernel here against bertfeat's fp32 GEMM, one thread, BERT's linear shapes at 512
    rows (gemm_probe.py's measurement; the int8 rate does not depend on the values, exact or not)."""
    from gemm_probe import MODELS, gflops, linear_shapes

    from bertfeat.ops import gemm

    fp32 = gemm.resolve("fp32")
    rows = ["| model | layer | K -> N | fp32 (" + fp32.library + ") | int8 (oneDNN) | int8 / fp32 |", "|---|---|---|---:|---:|---:|"]
    for name in ("minilm", "bert-base"):
        for layer, (K, N) in linear_shapes(*MODELS[name][1:]).items():
            f, q = (gflops(p, fp32, K, N, 1, 0.2, 3) for p in ("fp32", "int8"))
            rows.append(f"| {name} | {layer} | {K} -> {N} | {f:.0f} | {q:.0f} | {q / f:.2f}x |")
    return rows


def worker(precision: str, n: int, out: str) -> None:
    """One timed encode in this process (bertfeat from PYTHONPATH: a variant's tree, or this checkout)."""
    sys.path.insert(0, str(HERE))
    from corpus import build_corpus

    texts = build_corpus(n)
    enc = bertfeat.Encoder(MODEL, precision=precision)
    enc.encode(texts[:200])  # numba's compile and oneDNN's primitives, untimed
    t = time.perf_counter()
    x = enc.encode(texts)
    seconds = time.perf_counter() - t
    np.save(out, x)
    print(json.dumps({"seconds": seconds, "package": bertfeat.__file__}))


def run(tree: Path | None, precision: str, n: int, out: Path) -> float:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    r = subprocess.run([sys.executable, __file__, "--worker", precision, str(n), str(out)], env=env, text=True,
                       capture_output=True, check=False)
    if r.returncode:
        raise SystemExit(f"avx2_int8_levels: {precision} run failed:\n{r.stderr[-2000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = (tree or HERE.parent) / "bertfeat"
    if Path(got["package"]).parent != want:
        raise SystemExit(f"avx2_int8_levels: the run imported {got['package']}, not {want}")
    return got["seconds"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000, help="sentences of benchmarks/corpus.py")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker[0], int(a.worker[1]), a.worker[2])
        return 0
    sys.path.insert(0, str(HERE))
    from bench_encode import machine

    print(f"machine: {machine()}\n")
    print("\n".join(saturation_table()))
    print("\nThe GEMM alone, GFLOP/s, one thread\n")
    print("\n".join(gemm_table()))
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"fp32": None, **{name: variant_tree(Path(tmp) / f"v{i}", *v) for i, (name, v) in enumerate(VARIANTS.items())}}
        times: dict[str, list[float]] = {k: [] for k in trees}
        names = list(trees)
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:  # each round starts one method later
                prec = "fp32" if trees[name] is None else "int8"
                times[name].append(run(trees[name], prec, a.n, Path(tmp) / f"{names.index(name)}.npy"))
        ref = np.load(Path(tmp) / "0.npy")
        base = statistics.median(times["fp32"])
        print(f"\n{a.n} sentences of benchmarks/corpus.py, all-MiniLM-L6-v2, median of {a.rounds} round(s), each run its own process\n")
        print("| method | median s | x fp32 | min cosine vs fp32 | below 0.999 |")
        print("|---|---:|---:|---:|---:|")
        for i, name in enumerate(names):
            x = np.load(Path(tmp) / f"{i}.npy")
            cos = (x * ref).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(ref, axis=1)
            med = statistics.median(times[name])
            print(f"| {name} | {med:.2f} | {base / med:.2f}x | {cos.min():.5f} | {int((cos < 0.999).sum())} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
