"""How long `bertfeat --help`, `--version` and a command's help take, each in its own process (issue 43's goal:
a median <= 0.3 s, as the CLIs users compare with).

    python benchmarks/bench_cli.py --rounds 7

Runs `python -m bertfeat ARGS` (this tree first on PYTHONPATH), round robin over the commands, and prints each
command's median and every run, with the CPU model. Timings drift 10-25 % here: compare in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [["--help"], ["--version"], ["extract", "--help"], ["pca", "fit", "--help"], ["sweep", "--help"]]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def once(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertfeat", *argv], env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    once(["--version"])  # warm the file cache and the bytecode
    runs: dict[str, list[float]] = {" ".join(c): [] for c in COMMANDS}
    for _ in range(args.rounds):
        for c in COMMANDS:
            runs[" ".join(c)].append(once(c))
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {args.rounds} rounds")
    print(f"{'bertfeat ...':<22} {'median s':>9}  runs")
    for name, t in runs.items():
        print(f"{name:<22} {statistics.median(t):9.3f}  " + " ".join(f"{x:.3f}" for x in t))


if __name__ == "__main__":
    main()
