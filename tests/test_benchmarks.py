"""The benchmark scripts run end to end in their quick modes (their numbers are not checked here: timings live in
benchmarks/, never in unit tests). A module moved under them (the house move broke gemm_probe.py's header) fails here
rather than in the middle of a long benchmark run."""

import json
import os
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


def test_bench_encode_takes_each_rows_ceiling_from_the_probe_by_its_precision(monkeypatch):
    """--probe: a row's share is over its own precision's ceiling (int8 rows over int8's, at the probe's most threads);
    a model the probe does not cover keeps NumPy sgemm's."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # bench_encode imports corpus beside it
    spec = importlib.util.spec_from_file_location("bench_encode", ROOT / "benchmarks" / "bench_encode.py")
    be = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(be)
    probe = {"ceilings": [{"model": "minilm", "threads": 1, "fp32": 10.0, "bf16": 20.0, "int8": 40.0},
                          {"model": "minilm", "threads": 2, "fp32": 100.0, "bf16": 200.0, "int8": 400.0}]}
    rows = [{"model": m, "method": meth, "ceiling": 50.0, "tokens_per_s": 100.0, "sentences_per_s": 1.0,
             "peak_rss_mb": 1.0, "min_cosine": 1.0}
            for m, meth in [("minilm", "bertfeat"), ("minilm", "bertfeat-int8"), ("minilm", "openvino-bf16"),
                            ("mpnet-base", "bertfeat-int8")]]
    be.use_probe_ceilings(rows, probe)
    assert [r["ceiling"] for r in rows] == [100.0, 400.0, 200.0, 50.0]
    table = be.render(rows, 1.0)
    assert "| 25% (int8, gemm_probe, 2 threads) |" in table and "| 200% |" in table  # mpnet: sgemm's, unlabelled


def test_int8_error_sources_removes_the_weights_share_of_the_error():
    """benchmarks/int8_error_sources.py: the ~15-bit weights in every layer ("all") must leave less error than int8 as
    it is, and each kind alone an error between all four's and int8's as it is (plus noise): the script really switches
    the products it names (a wrapper that did nothing would give six equal rows)."""
    from conftest import need_full_data

    from bertfeat.errors import BertfeatError
    from bertfeat.ops import gemm

    try:
        gemm.resolve("int8")
    except BertfeatError as e:
        pytest.skip(f"int8 not accelerated here: {e.message}")
    need_full_data()
    r = run("benchmarks/int8_error_sources.py", "--n", "60", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["variant"]: row for row in json.loads(r.stdout)}
    assert list(rows) == ["scheme", "qkv", "attention_output", "ffn_up", "ffn_down", "all"]
    assert all(0.99 < row["min_cosine"] <= 1.0 for row in rows.values()), rows
    assert rows["all"]["mean_error"] < 0.7 * rows["scheme"]["mean_error"], rows
    for kind in ("qkv", "attention_output", "ffn_up", "ffn_down"):  # each alone: less error, more than all four
        assert rows["all"]["mean_error"] < rows[kind]["mean_error"] < 1.05 * rows["scheme"]["mean_error"], (kind, rows)
    assert len({row["mean_error"] for row in rows.values()}) == 6, rows  # each variant changed the features


def test_time_split_counts_the_gemms_and_attention_of_every_precision_it_runs():
    """benchmarks/time_split.py: its timers must see the products and the attention (a wrapper the forward pass no longer
    calls would read 0 s), leave the rest positive, and int8 must make more GEMM calls than bf16 only where short batches
    run their second products (never fewer). --kernels: each precision's own element-wise kernels are timed, and
    only its own (a wrapper the forward pass bypasses would read nothing)."""
    from conftest import need_full_data

    need_full_data()
    r = run("benchmarks/time_split.py", "--quick", "--json", "--kernels", "--models", "minilm")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert set(d["models"]) == {"minilm"}
    runs = d["models"]["minilm"]
    assert "fp32" in runs and set(runs) | set(d["skipped"]) == {"fp32", "bf16", "int8"}
    for prec, m in runs.items():
        assert m["tokens"] > 0 and m["calls"] >= 6 * 4, (prec, m)  # 6 layers x 4 linear layers, at least one batch
        assert 0 < m["gemm"] < m["total"] and 0 < m["attend"] < m["total"] and m["rest"] > 0, (prec, m)
        assert m["gflops"] > 0, (prec, m)
    if "int8" in runs and "bf16" in runs:
        assert runs["int8"]["calls"] >= runs["bf16"]["calls"], runs
    own = {"fp32": {"add_layer_norm_", "masked_softmax_"},
           "bf16": {"add_layer_norm_bf16_", "masked_softmax_", "ctx_rows_bf16_"},
           "int8": {"dq_add_ln_q8_", "masked_softmax_", "ctx_q8_", "dq_bias_q8_", "dq_acts_q8[gelu]", "quant_rows_q8_"}}
    for prec, m in runs.items():
        k = m["kernels"]
        assert own[prec] <= set(k), (prec, sorted(k))
        assert not any(("q8" if prec != "int8" else "bf16") in n for n in k), (prec, sorted(k))
        assert all(v["s"] > 0 and v["calls"] >= 1 and v["elements"] > 0 for v in k.values()), (prec, k)
        assert sum(v["s"] for n, v in k.items() if n != "masked_softmax_") < m["rest"], (prec, k, m["rest"])


def test_avx2_int8_levels_variants_run_the_levels_they_name(tmp_path):
    """benchmarks/avx2_int8_levels.py: each variant's copy of bertfeat quantizes at its own levels (weights in
    [-W, W], the residual's step s_w / 2W, its short-sequence and top-channel settings) and lifts the int8 refusal;
    a rewrite that no longer matched the code would stop the script, not measure scheme "6" under another name."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import avx2_int8_levels as bench

    from bertfeat.ops import onednn

    probe = ("import bertfeat, json, numpy as np; from bertfeat.ops import gemm, kernels, quant; "
             "ql = quant.QLinear(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)) "
             "if {dnn} else None; "
             "print(json.dumps([bertfeat.__file__, quant.RESID, quant.SHORT_TOKENS, quant.TOP, quant.TOP_RATIO, "
             "round(1 / float(kernels.inv_resid)), kernels.top_n, float(kernels.top_ratio2), "
             "int(np.abs(ql.packed.plain()).max()) if ql else None, gemm.resolve('int8').precision if {dnn} else None]))")
    for i, (a, w, short, top, ratio) in enumerate(bench.VARIANTS.values()):
        tree = bench.variant_tree(tmp_path / f"v{i}", a, w, short, top, ratio)
        r = subprocess.run([sys.executable, "-c", probe.format(dnn=onednn.available())], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        got = json.loads(r.stdout)
        assert got[0] == str(tree / "bertfeat" / "__init__.py")
        assert got[1:8] == [2.0 * w, short, top, ratio, 2 * w, top, ratio * ratio], got
        if onednn.available():
            assert got[8] == w and got[9] == "int8", got  # the channel's largest weight at W; int8 not refused
        text = (tree / "bertfeat" / "ops" / "kernels.py").read_text()
        assert f"s = (hi - lo) * f32(1.0 / {a}.0)" in text and f"zero), f32({a}.0))" in text
    with pytest.raises(SystemExit, match="no longer holds"):
        bench.rewrite("x = 1\n", [("y = 2", "y = 3")], "quant.py")
