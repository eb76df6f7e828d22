"""Peak memory of an encode, fp32 vs bf16: each precision in its own process (bench_encode's worker:
load the model, warm up, encode the corpus), peak RSS (VmHWM), plus the weights' bytes in memory.

    python benchmarks/bench_precision_memory.py                   # bert-base shape, 1,500 sentences
    python benchmarks/bench_precision_memory.py --models minilm,bert-base --n 500

Memory, not time: the numbers do not depend on what else runs on the machine. On a CPU without AMX or
AVX512-BF16 the bf16 run is the NumPy emulation (BERTFEAT_BF16_EMULATE=1 is set here): its weights are the same
bf16 arrays, but not packed for oneDNN, so measure on a CPU with native bf16 for the real figure.
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy (see bertfeat/ops/threads.py)
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_encode  # noqa: E402


def weights_mb(mdir: Path, precision: str) -> float:
    from bertfeat.model.config import BertConfig
    from bertfeat.model.weights import load_weights

    return load_weights(mdir, BertConfig.from_file(mdir / "config.json"), precision).nbytes() / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert-base")
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--max-length", type=int, default=256)
    args = ap.parse_args()
    os.environ.setdefault("BERTFEAT_BF16_EMULATE", "1")
    bench_encode.WORK.mkdir(parents=True, exist_ok=True)
    print(f"machine: {bench_encode.machine()}")
    lines = ["| model | precision | weights in memory MB | peak RSS of the encode process MB |", "|---|---|---:|---:|"]
    rows = []
    for name in args.models.split(","):
        mdir = bench_encode.model_dir(name)
        for method, precision in (("bertfeat", "fp32"), ("bertfeat-bf16", "bf16")):
            cmd = [sys.executable, bench_encode.__file__, "--worker", method, "--model-dir", str(mdir), "--n", str(args.n),
                   "--repeats", "1", "--warmup", str(args.warmup), "--max-length", str(args.max_length)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            res = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode or not res:
                print(f"{name} {precision}: FAILED {p.stderr.strip()[-500:]}")
                continue
            rss = json.loads(res[0][7:])["peak_rss_mb"]
            rows.append((name, mdir, precision, rss))
            print(f"{name} {precision}: peak RSS {rss:,.0f} MB", flush=True)
    for name, mdir, precision, rss in rows:  # loads weights here only after every worker ran (see peak_rss_mb)
        lines.append(f"| {name} | {precision} | {weights_mb(mdir, precision):,.0f} | {rss:,.0f} |")
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
