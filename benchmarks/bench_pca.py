"""Benchmark: bertfeat's streaming PCA against scikit-learn on one synthetic feature matrix.

Not a unit test. Fits k components on an (rows x dim) float32 matrix with a decaying
spectrum, stored as a bertfeat Parquet feature file in ``benchmarks/_work/`` (generated
once, gitignored). Every method runs in its own subprocess, so each peak RSS
(``ru_maxrss`` of that process) belongs to one method only:

* ``bertfeat``        ``fit_pca_file``: streams the Parquet file through ``partial_fit``
                      (float32 block products added to float64 statistics, one ``eigh``);
                      the matrix is never held in memory.
* ``bertfeat-float64`` the same with ``accumulate="float64"`` (every product in float64).
* ``sk-full``         ``sklearn.decomposition.PCA(svd_solver="full")`` on the in-memory matrix.
* ``sk-cov``          ``PCA(svd_solver="covariance_eigh")``.
* ``sk-randomized``   ``PCA(svd_solver="randomized", random_state=0)``.
* ``sk-ipca``         ``IncrementalPCA`` (default batch size 5 * dim).
* ``sk-full64``       (optional) full SVD of a float64 copy: the exact reference, twice sk-full's memory.

scikit-learn's times exclude loading the matrix (reported separately as "load s"); ours
include reading the file. ``max |ratio diff|`` compares ``explained_variance_ratio_`` with
``sk-full`` (the textbook SVD; note it works in float32 on float32 input).

    python benchmarks/bench_pca.py --rows 20000            # smoke run
    python benchmarks/bench_pca.py                         # 1,000,000 x 768, k = 100 (long, ~10+ GB for sk-full)
    python benchmarks/bench_pca.py --rows 100000 --methods bertfeat,sk-cov
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: every method then runs on the same OpenBLAS kernels (bertfeat/ops/threads.py)
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work"
METHODS = ("bertfeat", "bertfeat-float64", "sk-full", "sk-cov", "sk-randomized", "sk-ipca", "sk-full64")
DEFAULT_METHODS = METHODS[:6]
sys.path.insert(0, str(HERE.parent))


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (ru_maxrss is KB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 20) if sys.platform == "darwin" else rss / 1024


def data_path(rows: int, dim: int) -> Path:
    return WORK / f"synthetic_{rows}x{dim}.parquet"


def generate(path: Path, rows: int, dim: int, seed: int = 0, chunk: int = 50_000) -> None:
    """rows x dim float32 with variances 1 / (1 + i)^1.5 along a random orthonormal basis, mean 0.05."""
    from bertfeat.features import FeatureWriter

    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    scale = (1.0 / (1.0 + np.arange(dim)) ** 1.5) ** 0.5
    basis = (scale[:, None] * Q.T).astype(np.float32)  # (dim, dim): row i = sqrt(var_i) * axis_i
    meta = {"model": "synthetic", "fingerprint": {"model_id": "synthetic", "seed": seed, "spectrum": "1/(1+i)^1.5"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with FeatureWriter(path, dim=dim, metadata=meta) as w:
        for start in range(0, rows, chunk):
            m = min(chunk, rows - start)
            Z = rng.standard_normal((m, dim), dtype=np.float32)
            w.write(None, Z @ basis + np.float32(0.05))


# -- worker (one method per process) ---------------------------------------------------------------


def run_worker(method: str, path: Path, k: int, batch_rows: int, ratios_out: Path) -> dict:
    """Fit one method; times exclude imports. Returns load/fit seconds and this process's peak RSS."""
    from bertfeat.features import read_features
    from bertfeat.pca.reduce import fit_pca_file

    if not method.startswith("bertfeat"):
        from sklearn.decomposition import PCA as SkPCA
        from sklearn.decomposition import IncrementalPCA
    t0 = time.perf_counter()
    load_s = 0.0
    if method.startswith("bertfeat"):
        accumulate = "float64" if method == "bertfeat-float64" else "mixed"
        pca = fit_pca_file(path, k, batch_rows=batch_rows, accumulate=accumulate)
        ratio = pca.explained_variance_ratio_
    else:
        _, X, _ = read_features(path)
        if method == "sk-full64":
            X = X.astype(np.float64)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if method == "sk-ipca":
            est = IncrementalPCA(n_components=k).fit(X)
        else:
            solver = {"sk-full": "full", "sk-full64": "full", "sk-cov": "covariance_eigh", "sk-randomized": "randomized"}[method]
            est = SkPCA(n_components=k, svd_solver=solver, random_state=0).fit(X)
        ratio = est.explained_variance_ratio_
    fit_s = time.perf_counter() - t0
    np.save(ratios_out, np.asarray(ratio, dtype=np.float64))
    return {"method": method, "load_s": load_s, "fit_s": fit_s, "peak_rss_mb": peak_rss_mb()}


# -- driver ------------------------------------------------------------------------------------------


def run_method(method: str, path: Path, k: int, batch_rows: int, timeout: float | None, blas_threads: int | None = None) -> dict:
    ratios_out = WORK / f"ratios_{method}_{path.stem}_k{k}.npy"
    cmd = [sys.executable, __file__, "--worker", method, "--file", str(path), "--k", str(k), "--batch-rows", str(batch_rows), "--ratios-out", str(ratios_out)]
    env = dict(os.environ)
    if blas_threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(blas_threads)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"method": method, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"method": method, "error": f"exit {proc.returncode}: {tail}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["ratio"] = np.load(ratios_out)
    return result


def warm_page_cache(path: Path) -> None:
    """Read the file once so every run starts from the page cache (this machine evicts idle pages quickly)."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def median_run(method: str, runs: list[dict]) -> dict:
    """Median load and fit seconds (of the runs' totals) and the largest peak RSS; an error if any run failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    mid = sorted(runs, key=lambda r: r["load_s"] + r["fit_s"])[len(runs) // 2]
    return mid | {"peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "runs": [r["load_s"] + r["fit_s"] for r in runs]}


def exact_reference(results: list[dict]) -> str | None:
    """The float64 reference: sk-full64 (float64 SVD) if it ran, else bertfeat-float64 (float64 covariance)."""
    ok = {r["method"] for r in results if "error" not in r}
    return next((m for m in ("sk-full64", "bertfeat-float64") if m in ok), None)


def summarize(results: list[dict], rows: int, dim: int, k: int) -> str:
    ok = {r["method"]: r for r in results if "error" not in r}
    ours = ok.get("bertfeat")
    exact = exact_reference(results)

    def diff(r: dict, ref_name: str | None) -> str:
        ref = ok.get(ref_name) if ref_name else None
        if ref is None or ref is r:
            return "-"
        return f"{np.abs(r['ratio'] - ref['ratio']).max():.2e}"

    header = (f"| method | load s | fit s | load + fit s (runs) | peak RSS MB | max abs ratio diff vs {exact or 'float64'} "
              "| vs sk-full (float32 SVD) | time / bertfeat | RSS / bertfeat |")
    lines = [header, "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['method']} | - | - | - | - | {r['error']} | - | - | - |")
            continue
        total = r["load_s"] + r["fit_s"]
        t_ratio = f"{total / (ours['load_s'] + ours['fit_s']):.2f}" if ours else "-"
        m_ratio = f"{r['peak_rss_mb'] / ours['peak_rss_mb']:.2f}" if ours else "-"
        runs = ", ".join(f"{x:.2f}" for x in r.get("runs", [total]))
        lines.append(
            f"| {r['method']} | {r['load_s']:.2f} | {r['fit_s']:.2f} | {total:.2f} ({runs}) | {r['peak_rss_mb']:.0f} "
            f"| {diff(r, exact)} | {diff(r, 'sk-full')} | {t_ratio} | {m_ratio} |"
        )
    return "\n".join(lines)


RESULTS = HERE / "PCA_RESULTS.md"
PREAMBLE = """# PCA benchmark

`benchmarks/bench_pca.py`: fit k components of a synthetic float32 feature matrix (variances
1/(1+i)^1.5 along a random basis, mean 0.05) stored as a bertfeat Parquet file, with bertfeat's
streaming PCA and with scikit-learn's estimators, side by side. One section per matrix size;
rerunning a size replaces its section.

- Each run is its own process, methods round robin (each round starting one method later), the
  file read once just before every run (warm page cache); times are the median run (load + fit),
  peak RSS the largest `ru_maxrss` of the runs.
- bertfeat's "fit s" includes streaming the Parquet file (`fit_pca_file`); scikit-learn's
  excludes loading the matrix into memory ("load s", the same Parquet reader), which its peak
  RSS includes. "time / bertfeat" compares load + fit.
- Ratios are `explained_variance_ratio_` of the k components. The float64 reference is sk-full64
  (a float64 SVD, when it fits in memory) or else bertfeat-float64 (float64 covariance
  statistics); sk-full works in float32 on float32 input, so its own ratios carry float32
  rounding.
"""


def write_results(table: str, args, path: Path) -> Path:
    """Replace (or add) this size's section of PCA_RESULTS.md, keeping the other sizes."""
    import sklearn

    title = f"## {args.rows:,} x {args.dim}, k = {args.k}"
    section = f"""{title}

`python benchmarks/bench_pca.py --rows {args.rows} --dim {args.dim} --k {args.k} --repeat {args.repeat}` on {time.strftime("%Y-%m-%d")}
(Parquet `{path.name}`, {path.stat().st_size / 1e6:,.0f} MB, read in batches of up to {args.batch_rows:,} rows).
Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, NumPy {np.__version__},
scikit-learn {sklearn.__version__}, BLAS threads: {args.blas_threads or "default"}.

{table}
"""
    sections: dict[str, str] = {}
    if RESULTS.exists():
        text = RESULTS.read_text(encoding="utf-8")
        for part in text.split("\n## ")[1:]:
            head = "## " + part.split("\n", 1)[0]
            sections[head] = "## " + part.rstrip() + "\n"
    sections[title] = section

    def size(head: str) -> int:
        return int(head[3:].split(" x ")[0].replace(",", ""))

    body = "\n".join(sections[h] for h in sorted(sections, key=size))
    RESULTS.write_text(PREAMBLE + "\n" + body, encoding="utf-8")
    return RESULTS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batch-rows", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=3, help="runs per method (fresh processes, round robin); the median is reported")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"comma-separated, from {','.join(METHODS)}")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per method")
    ap.add_argument("--blas-threads", type=int, default=None, help="BLAS threads per method (default: the library's)")
    ap.add_argument("--regen", action="store_true", help="regenerate the data file")
    ap.add_argument("--no-write", action="store_true", help="do not write benchmarks/PCA_RESULTS.md")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--ratios-out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(run_worker(args.worker, Path(args.file), args.k, args.batch_rows, Path(args.ratios_out))))
        return 0

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        ap.error(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    path = data_path(args.rows, args.dim)
    if args.regen or not path.exists():
        t0 = time.perf_counter()
        print(f"generating {path} ...", file=sys.stderr, flush=True)
        generate(path, args.rows, args.dim)
        print(f"  {time.perf_counter() - t0:.1f} s, {path.stat().st_size / 1e6:.0f} MB", file=sys.stderr)
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for rep in range(args.repeat):  # round robin, each round starting one method later: drift hits every method alike
        for method in methods[rep % len(methods):] + methods[: rep % len(methods)]:
            print(f"run {rep + 1}/{args.repeat}: {method} ...", file=sys.stderr, flush=True)
            warm_page_cache(path)
            runs[method].append(run_method(method, path, args.k, args.batch_rows, args.timeout, args.blas_threads))
    results = [median_run(method, runs[method]) for method in methods]
    table = summarize(results, args.rows, args.dim, args.k)
    print(table)
    for r in results:
        if "ratio" in r:
            print(f"{r['method']:>14} ratios[:5] = {np.array2string(r['ratio'][:5], precision=6)}  sum = {r['ratio'].sum():.6f}")
    if not args.no_write:
        print(f"wrote {write_results(table, args, path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
