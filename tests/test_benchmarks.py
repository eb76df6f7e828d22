"""The benchmark scripts run end to end in their quick modes (their numbers are not checked here: timings live in
benchmarks/, never in unit tests). A module moved under them (the house move broke gemm_probe.py's header) fails here
rather than in the middle of a long benchmark run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))


def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_script_loads_and_says_how_to_run_it(script):
    r = run(f"benchmarks/{script}", "--help")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() or script == "corpus.py"  # corpus.py is the shared sentence list, not a command


def test_gemm_probe_quick_measures_each_precision_the_cpu_runs_or_says_why_not():
    r = run("benchmarks/gemm_probe.py", "--quick", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["cpu"]["model"] and d["rows"] == 512
    precisions = {"fp32", "bf16", "int8"}
    assert set(d["kernels"]) | set(d["skipped"]) == precisions and not set(d["kernels"]) & set(d["skipped"])
    assert all(d["skipped"][p] for p in d["skipped"])  # a reason for each precision not measured
    shapes = {(r["model"], r["layer"], r["K"], r["N"]) for r in d["rates"]}
    assert ("minilm", "ffn_down", 1536, 384) in shapes and ("bert-base", "qkv", 768, 2304) in shapes
    for row in d["rates"] + d["ceilings"]:
        assert all(row[p] > 0 for p in d["kernels"]), row
