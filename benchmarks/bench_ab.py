"""A/B: the same encode with two bertfeat source trees, side by side (did a change slow the hot path?).

    git worktree add /tmp/bertfeat-base <ref>                 # the tree to compare against
    python benchmarks/bench_ab.py /tmp/bertfeat-base . --rounds 5

Each run is its own process (PYTHONPATH set to its tree): load the model, warm up on --warmup
sentences, time one encode of the corpus (benchmarks/corpus.py, real sentences). With --extract-pca N,
time the whole command instead, `bertfeat extract CORPUS.csv --pca N -o ... --overwrite -q`, model
load included (what a user waits for; the corpus written once as CSV under benchmarks/_work/). The trees take turns
round robin, each round starting with the other one, so a slow spell of the machine falls on both;
the table shows medians, the B/A ratio and every run. The CPU model and its bf16 flags are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
from corpus import build_corpus
import bertfeat
from bertfeat import Encoder
texts = build_corpus({n})
enc = Encoder({model!r}, max_length={max_length}, precision={precision!r})
opts = {{}} if {pooling!r} is None else {{"pooling": {pooling!r}}}
enc.encode(texts[:{warmup}], **opts)
tokens = int(sum(len(a) for a in enc.tokenizer.encode(texts, max_length={max_length}).ids))
t0 = time.perf_counter()
enc.encode(texts, **opts)
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "tokens": tokens, "file": bertfeat.__file__}}))
"""


WORKER_EXTRACT = r"""
import json, time
import bertfeat
try:
    from bertfeat.cli.app import main
except ImportError:  # a tree from before the layer folders (bertfeat/cli.py)
    from bertfeat.cli import main
t0 = time.perf_counter()
rc = main({argv!r})
dt = time.perf_counter() - t0
assert rc == 0, rc
import pyarrow.parquet as pq
meta = json.loads(pq.read_schema({out!r}).metadata[b"bertfeat"])
print(json.dumps({{"seconds": dt, "tokens": meta["tokens"]["total"], "file": bertfeat.__file__}}))
"""


def corpus_csv(n: int) -> Path:
    """benchmarks/_work/ab_corpus_N.csv: the corpus's N sentences, one per row (written once)."""
    import csv

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from corpus import build_corpus

    path = ROOT / "benchmarks" / "_work" / f"ab_corpus_{n}.csv"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text"])
            w.writerows([t] for t in build_corpus(n))
    return path


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "unknown CPU")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    family, mod = (next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith(k)), "?")
                   for k in ("cpu family", "model\t"))
    bf16 = [f for f in ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512f", "avx2")
            if f in flags]
    return f"{model} (family {family}, model {mod}); flags: {', '.join(bf16) or 'none of avx2, avx512f, avx512_bf16, amx'}"


def run(tree: Path, args) -> dict:
    code = WORKER.format(bench=str(ROOT / "benchmarks"), n=args.n, model=args.model, max_length=args.max_length,
                         warmup=args.warmup, precision=args.precision, pooling=args.pooling)
    if args.extract_pca:
        src = corpus_csv(args.n)
        out = src.with_name(f"ab_{tree.resolve().name}.features.parquet")
        argv = ["extract", str(src), "--pca", str(args.extract_pca), "-o", str(out), "--overwrite", "-q",
                "--max-length", str(args.max_length), "--precision", args.precision] + (["-m", args.model] if args.model else []) \
            + (["--pooling", args.pooling] if args.pooling else [])
        code = WORKER_EXTRACT.format(argv=argv, out=str(out))
    env = {"PYTHONPATH": str(tree.resolve()), "PATH": "/usr/bin:/bin"}
    import os

    env = dict(os.environ) | env
    # cwd=tree: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH, so a run started
    # in another checkout would import that checkout's bertfeat (both sides would time the same code)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=3600,
                       cwd=tree.resolve())
    if p.returncode != 0:
        raise SystemExit(f"{tree}: {p.stderr[-2000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    if not Path(res["file"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: the run imported {res['file']}, not this tree's bertfeat")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="source tree A (the baseline)")
    ap.add_argument("b", type=Path, help="source tree B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--model", default=None, help="bertfeat model (default all-MiniLM-L6-v2)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--precision", default="fp32", help="Encoder precision: fp32, bf16, int8 or auto")
    ap.add_argument("--pooling", default=None, help="pooling (cls, mean, pooled, ...; default: the model's own)")
    ap.add_argument("--extract-pca", type=int, default=None, metavar="N",
                    help="time `bertfeat extract CORPUS.csv --pca N` (the whole command) instead of one encode")
    args = ap.parse_args(argv)

    runs = {"A": [], "B": []}
    trees = {"A": args.a, "B": args.b}
    for r in range(args.rounds):
        for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
            res = run(trees[name], args)
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res['tokens'] / res['seconds']:,.0f} tokens/s ({res['file']})", file=sys.stderr)
    med = {k: statistics.median(x["tokens"] / x["seconds"] for x in v) for k, v in runs.items()}
    print(f"CPU: {cpu()}")
    pooling = args.pooling or "the model's own"
    what = f"bertfeat extract --pca {args.extract_pca} (whole command, model load included)" if args.extract_pca else "one encode"
    print(f"{what}; model {args.model or 'all-MiniLM-L6-v2'}, precision {args.precision}, pooling {pooling}, {args.n} sentences, {runs['A'][0]['tokens']:,} tokens, "
          f"{args.rounds} rounds round robin, each run its own process")
    print("| tree | median tokens/s | runs |")
    print("|---|---:|---|")
    for k in ("A", "B"):
        print(f"| {k} {trees[k]} | {med[k]:,.0f} | " + ", ".join(f"{x['tokens'] / x['seconds']:,.0f}" for x in runs[k]) + " |")
    print(f"B/A = {med['B'] / med['A']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
