"""The quickstart's wall time, side by side: `bertfeat extract examples/sst2_sample.csv --pca 64` (300 rows)
as a new user runs it, from two source trees (a git ref, default the commit before issue 17's changes, and
this working tree).

Each run is a fresh process (`python -m bertfeat.cli.app` with PYTHONPATH set to the tree), so imports, numba's
cache loading, model loading, the encode, the PCA and the report figure are all in the time. Trees run round
robin, --rounds times, each round starting with the other tree, and the median is reported. Each tree gets its
own numba cache directory: the first round's first run (a "cold" run, numba compiling) is reported apart and
left out of the median ("warm" runs, what a second run feels like).

    python benchmarks/bench_quickstart.py                           # BEFORE=4d2ca6c vs this tree, 7 rounds
    python benchmarks/bench_quickstart.py --before HEAD~3 --rounds 3
    python benchmarks/bench_quickstart.py --rounds 1 --rows 20      # smoke test
    python benchmarks/bench_quickstart.py --before 21bfd1c --input sst3000.csv --extra "--chunk-rows 256" --rounds 5
                                                                    # another CSV, other extract options

Run it on a quiet machine: the numbers are wall times of a whole process. It prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "4d2ca6c"  # main before issue 17 (fixed costs: numba recompiled every run, mathtext ticks)


def export_tree(ref: str, dest: Path) -> Path:
    """`git archive ref` unpacked into dest (no worktree, nothing in the repository changes)."""
    data = subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest)
    return dest


def one_run(tree: Path, sample: Path, out: Path, cache: Path, pca: int, extra: list[str] = ()) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # the first line checks which bertfeat runs: `python -c` puts the working directory first on sys.path (ahead
    # of PYTHONPATH), so the run starts in the tree itself and refuses any other tree's package
    check = f"import bertfeat, pathlib; assert pathlib.Path(bertfeat.__file__).resolve().is_relative_to({str(tree.resolve())!r}), bertfeat.__file__"
    cmd = [sys.executable, "-c", f"{check}\nfrom bertfeat.cli.app import entry; entry()",
           "extract", str(sample), "--pca", str(pca), "-o", str(out / "s.features.parquet"), "--quiet", *extra]
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree.resolve())
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{tree}: bertfeat extract failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=BEFORE, help=f"git ref of the 'before' tree (default {BEFORE})")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", type=int, default=None, help="rows of the input to use (default all)")
    ap.add_argument("--input", type=Path, default=ROOT / "examples" / "sst2_sample.csv", help="a CSV (default the quickstart's)")
    ap.add_argument("--extra", default="", help="further extract options, e.g. \"--chunk-rows 256\"")
    args = ap.parse_args(argv)
    import shlex

    extra = shlex.split(args.extra)

    with tempfile.TemporaryDirectory(prefix="bench_quickstart_") as tmp:
        tmp = Path(tmp)
        lines = args.input.read_text(encoding="utf-8").splitlines(keepends=True)
        args.rows = len(lines) - 1 if args.rows is None else args.rows
        sample = tmp / args.input.name
        sample.write_text("".join(lines[: args.rows + 1]), encoding="utf-8")
        trees = {f"before ({args.before})": export_tree(args.before, tmp / "before"), "after (this tree)": ROOT}
        cold: dict[str, float] = {}
        warm: dict[str, list[float]] = {name: [] for name in trees}
        names = list(trees)
        for r in range(args.rounds):
            for name in names[r % 2:] + names[: r % 2]:  # alternate which tree goes first
                dt = one_run(trees[name], sample, tmp / "out", tmp / ("numba-" + name.split()[0]), min(64, args.rows), extra)
                if name not in cold:
                    cold[name] = dt
                    dt = one_run(trees[name], sample, tmp / "out", tmp / ("numba-" + name.split()[0]), min(64, args.rows), extra)
                warm[name].append(dt)
                print(f"round {r + 1}: {name:<24} {dt:6.2f} s", file=sys.stderr)
    print(f"`bertfeat extract` of {args.rows} rows of {args.input.name} with --pca {min(64, args.rows)} {args.extra} (fresh process, "
          f"wall time; median of {args.rounds} warm runs per tree, round robin)\n")
    print("| tree | first run (numba cache empty) | warm median | warm min |")
    print("|---|---:|---:|---:|")
    for name in trees:
        print(f"| {name} | {cold[name]:.2f} s | {statistics.median(warm[name]):.2f} s | {min(warm[name]):.2f} s |")
    b, a = (statistics.median(warm[n]) for n in trees)
    print(f"\nwarm: after / before = {a / b:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
