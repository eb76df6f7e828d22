"""gemm.py's choice of path: the kernel-name rules on literal inputs (the CPU-flag rules: test_cpu.py), and what this
machine must run.

The bf16 and int8 test modules skip their native tests where ``gemm.resolve`` says the precision is not accelerated;
a regression in resolve itself (oneDNN not found, a kernel name misread) would then skip them instead of failing.
``test_this_machine_runs_what_its_cpu_accelerates`` decides from /proc/cpuinfo and the installed package alone, not
from bertfeat, so such a regression fails here.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest

from bertfeat.ops import gemm, quant


def test_native_kernel_names():
    """oneDNN names its kernels by ISA: only AVX512-BF16, AMX or AVX-NE-CONVERT kernels multiply bf16 in hardware, only
    VNNI or AMX ones int8."""
    for name in ("brg:avx512_core_bf16", "brg:avx512_core_amx", "brg:avx512_core_amx_fp16", "brg:avx2_vnni_2"):
        assert gemm.native_bf16_kernel(name), name
    for name in ("brg:avx512_core", "gemm:jit:bf16", "gemm:jit:f32", "brg:avx2", "", None, "unavailable: x"):
        assert not gemm.native_bf16_kernel(name), name
    for name in ("brg:avx512_core_vnni", "brg:avx512_core_amx", "brg:avx2_vnni"):
        assert gemm.native_int8_kernel(name), name
    for name in ("brg:avx512_core", "gemm:jit:s8u8s32", "brg:avx2", "", None):
        assert not gemm.native_int8_kernel(name), name


def _cpu_flags_from_proc() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _onednn_package() -> str | None:
    try:
        return importlib.metadata.version("onednn-cpu-gomp")
    except importlib.metadata.PackageNotFoundError:
        return None


def test_this_machine_runs_what_its_cpu_accelerates(monkeypatch):
    """With the `fast` extra installed on a CPU that has AVX512-BF16 / AMX (bf16) or VNNI / AMX (int8), bf16, auto and
    int8 must resolve to oneDNN's native kernels: not refused, not emulated, not fp32."""
    if not Path("/proc/cpuinfo").is_file():
        pytest.skip("no /proc/cpuinfo here to read the CPU's flags from")
    monkeypatch.delenv("BERTFEAT_BF16_EMULATE", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("BERTFEAT_GEMM", raising=False)
    flags, pkg = _cpu_flags_from_proc(), _onednn_package()
    bf16_cpu = bool({"avx512_bf16"} & flags or {"amx_bf16", "amx_tile"} <= flags)
    int8_cpu = bool({"avx512_vnni", "avx_vnni"} & flags or {"amx_int8", "amx_tile"} <= flags)
    print(f"CPU bf16 {bf16_cpu}, int8 {int8_cpu}; onednn-cpu-gomp {pkg}")
    if pkg is None or not (bf16_cpu or int8_cpu):
        pytest.skip(f"nothing to check here: onednn-cpu-gomp {pkg or 'not installed'}, CPU bf16 {bf16_cpu}, "
                    f"int8 {int8_cpu}")
    if bf16_cpu:
        for asked in ("bf16", "auto"):
            p = gemm.resolve(asked)
            assert p.precision == "bf16" and p.library == "onednn" and gemm.native_bf16_kernel(p.kernel), p
    if int8_cpu:
        p = gemm.resolve("int8")
        assert p.precision == "int8" and p.library == "onednn" and gemm.native_int8_kernel(p.kernel), p
        assert p.scheme == quant.SCHEME, p
    fp32 = gemm.resolve("fp32")
    if "avx512f" in flags:  # oneDNN's fp32 brgemm kernel: the fp32 path on every AVX-512 CPU with the extra
        assert fp32.library == "onednn" and fp32.kernel.startswith("brg:"), fp32


def test_a_bertfeat_dnnl_that_does_not_load_is_an_error(tmp_path, monkeypatch, capsys):
    """BERTFEAT_DNNL naming no loadable oneDNN ran every GEMM on NumPy, rc 0, the summary saying "oneDNN is not
    installed": the setting the user gave is named instead, as BERTFEAT_GEMM / BERTFEAT_KERNELS are. Unset or empty, the
    default search."""
    from bertfeat.errors import BertfeatError
    from bertfeat.ops import onednn
    from extract_util import run, tiny_model, write_csv

    monkeypatch.delenv("BERTFEAT_GEMM", raising=False)
    monkeypatch.setattr(onednn, "_state", {})  # loaded again under each setting (restored after)
    monkeypatch.setattr(gemm, "_kernels", {})
    monkeypatch.delenv("BERTFEAT_DNNL", raising=False)
    default = onednn.available()
    for empty in ("", "  "):
        monkeypatch.setenv("BERTFEAT_DNNL", empty)
        monkeypatch.setattr(onednn, "_state", {})
        assert onednn.available() == default
    missing = tmp_path / "libdnnl.so.3"
    monkeypatch.setenv("BERTFEAT_DNNL", str(missing))
    monkeypatch.setattr(onednn, "_state", {})
    message = (f"BERTFEAT_DNNL='{missing}' cannot be loaded as oneDNN 3's libdnnl ({missing}: cannot open shared object "
               "file: No such file or directory) - point BERTFEAT_DNNL at a libdnnl.so.3 of oneDNN 3.x, or unset it (then "
               "bertfeat uses the oneDNN of bertfeat[fast] if it is installed, else NumPy)")
    for _ in range(2):  # each time asked: nothing cached
        with pytest.raises(BertfeatError) as e:
            onednn.available()
        assert e.value.message == message
    src = write_csv(tmp_path / "in.csv", ["text"], [["hello world"]])
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "-m", tiny_model(), "-q") == (1, "", f"Error: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


@pytest.mark.parametrize("name, default", [("BERTFEAT_BF16_EMULATE", False), ("BERTFEAT_FUSE", True)])
def test_an_on_off_knob_takes_on_or_off_and_refuses_anything_else(tmp_path, monkeypatch, capsys, name, default):
    """BERTFEAT_BF16_EMULATE=garbage read as off and BERTFEAT_FUSE=garbage as on (anything but 0), without a word,
    where BERTFEAT_DEDUP_MEMORY, BERTFEAT_GEMM and BERTFEAT_KERNELS refuse a value they do not take: refused now,
    naming it, wherever a model's GEMM path is chosen (whatever the precision), on the command line as one line."""
    from bertfeat.errors import BertfeatError
    from extract_util import run, tiny_model, write_csv

    def read() -> bool:
        monkeypatch.setattr(gemm, "_FUSE", None)  # read once per process: again under each setting (restored after)
        return gemm.emulation_allowed() if name == "BERTFEAT_BF16_EMULATE" else not gemm.post_ops_off()

    monkeypatch.delenv(name, raising=False)
    assert read() is default
    for text, on in (("1", True), ("true", True), ("Yes", True), (" on ", True), ("0", False), ("FALSE", False),
                     ("no", False), ("off", False), ("", default), ("  ", default)):
        monkeypatch.setenv(name, text)
        assert read() is on, text
    message = (f"{name}='garbage' is not on or off - set {name}=1 (on) or {name}=0 (off), or unset it (the default: "
               f"{'on' if default else 'off'})")
    monkeypatch.setenv(name, "garbage")
    for precision in ("fp32", "auto"):
        monkeypatch.setattr(gemm, "_FUSE", None)
        with pytest.raises(BertfeatError) as e:
            gemm.resolve(precision)
        assert e.value.message == message
    src = write_csv(tmp_path / "in.csv", ["text"], [["hello world"]])
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "-m", tiny_model(), "-q") == (1, "", f"Error: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_a_blas_kernel_openblas_does_not_have_is_refused_not_passed_on(tmp_path, monkeypatch, capsys):
    """BERTFEAT_BLAS_KERNEL=garbage was passed to OPENBLAS_CORETYPE, which OpenBLAS ignores (its own detection ran,
    `bertfeat info` said 'OPENBLAS_CORETYPE (unset) -> garbage'). It is read at import, before NumPy loads, where an
    error would fail `import bertfeat` before the command line could say it: the import leaves OPENBLAS_CORETYPE alone
    and the value is refused where a model's GEMM path is chosen, as the other knobs are."""
    import os
    import platform
    import subprocess
    import sys

    from bertfeat.errors import BertfeatError
    from bertfeat.ops import threads
    from extract_util import run, tiny_model, write_csv

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the kernel names are checked on x86-64 only (elsewhere they vary with OpenBLAS's version)")
    monkeypatch.setattr(threads, "blas_kernel_problem", None)  # (restored after)
    monkeypatch.setattr(threads, "blas_kernel_note", threads.blas_kernel_note)
    for fine in ("auto", "keep", "", "Haswell", "skylakex", "Zen", "SapphireRapids"):
        monkeypatch.setenv("BERTFEAT_BLAS_KERNEL", fine)
        threads.prefer_avx512_blas()  # (NumPy is loaded: it changes no OPENBLAS_CORETYPE, but judges the value)
        threads.check_blas_kernel()
    monkeypatch.setenv("BERTFEAT_BLAS_KERNEL", "Hasswell")
    threads.prefer_avx512_blas()
    with pytest.raises(BertfeatError) as e:
        gemm.resolve("fp32")
    message = e.value.message
    assert message.startswith("BERTFEAT_BLAS_KERNEL='Hasswell' is not an OpenBLAS kernel (OpenBLAS would ignore it "
                              "and pick its own) - set it to auto (bertfeat's choice, the default), keep "
                              "(OPENBLAS_CORETYPE as it is) or one of OpenBLAS's x86-64 kernels, e.g. Haswell, SkylakeX "
                              "or Zen (Katmai, "), message
    assert message.endswith(", SapphireRapids; any case), or unset it"), message
    src = write_csv(tmp_path / "in.csv", ["text"], [["hello world"]])
    assert run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "-m", tiny_model(), "-q") == (
        1, "", f"Error: {message}\n")
    # a process that starts with it: the import goes through, OPENBLAS_CORETYPE untouched; the CLI says one line
    env = {**os.environ, "BERTFEAT_BLAS_KERNEL": "Hasswell"}
    env.pop("OPENBLAS_CORETYPE", None)
    r = subprocess.run([sys.executable, "-c", "import os, bertfeat, numpy; print(os.environ.get('OPENBLAS_CORETYPE'))"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "None\n", "")
    r = subprocess.run([sys.executable, "-m", "bertfeat", "info"], env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (1, f"Error: {message}\n"), r.stderr


def test_fp32_off_brgemm_runs_on_openblas_and_says_its_rows_are_not_bit_for_bit(monkeypatch):
    """On a oneDNN fp32 kernel that is not brgemm (gemm:jit:f32, AVX2-only CPUs) fp32 runs on NumPy's BLAS. The reason
    `bertfeat info` shows said "OpenBLAS keeps a row independent of its batch", which it does not (a row rounds by
    its place in the batch: docs/precision.md, Batch independence)."""
    monkeypatch.delenv("BERTFEAT_GEMM", raising=False)
    monkeypatch.setattr(gemm.onednn, "available", lambda: True)
    monkeypatch.setattr(gemm, "_probe_kernel", lambda dtype: "gemm:jit:f32")
    assert gemm.fp32_library() == ("numpy", "oneDNN's fp32 kernel here is gemm:jit:f32, not brgemm: OpenBLAS is faster, "
                                   "and rounds a row by its place in the batch (~1e-7); BERTFEAT_GEMM=onednn gives "
                                   "bit-for-bit rows at ~0.94x its speed")


_JIT_ROWS = r"""
import json, numpy as np
from bertfeat.ops import onednn
rng = np.random.default_rng(1)
out = {"impl": [], "blocked": 0, "unblocked": 0}
for K, N in [(384, 1152), (768, 2304), (3072, 768)]:
    p = onednn.pack(rng.standard_normal((K, N), dtype=np.float32) * 0.05)
    out["impl"].append(p.impl)
    bias = rng.standard_normal(N, dtype=np.float32)
    x = rng.standard_normal((600, K), dtype=np.float32)
    rows = [0, 3, 40, 299, 300, 511, 512, 513, 520, 599]
    for kw in ({}, {"bias": bias, "act": "gelu"}):
        alone = {i: onednn.matmul(x[i:i + 1], p, **kw)[0] for i in rows}
        for m, at in ((1, 3), (7, 0), (300, 0), (513, 0), (520, 80), (600, 0)):
            got = onednn.matmul(x[at:at + m], p, **kw)
            out["blocked"] += sum(int((got[i - at] != alone[i]).any()) for i in rows if at <= i < at + m)
        p.row_block = 0  # what gemm:jit gives on the batch's row count
        got = onednn.matmul(x[:300], p, **kw)
        out["unblocked"] += sum(int((got[i] != alone[i]).any()) for i in rows if i < 300)
        p.row_block = onednn.ROW_BLOCK
print(json.dumps(out))
"""


@pytest.mark.skipif(not __import__("bertfeat.ops.onednn", fromlist=["x"]).available(),
                    reason="oneDNN (the fast extra) is not installed")
def test_gemm_jit_fp32_rows_are_bit_for_bit_in_blocks():
    """oneDNN's gemm:jit:f32 (fp32 on AVX2-only CPUs; here forced with ONEDNN_MAX_CPU_ISA=AVX2, a real ISA limit)
    rounds a row by the batch's row count; multiplied in blocks of onednn.ROW_BLOCK rows, the last one padded, a row
    gets the same bits alone and in any batch, at any place, with the bias and GELU post-ops too. Without the blocks
    rows differ (so the comparison can fail)."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    r = subprocess.run([sys.executable, "-c", _JIT_ROWS], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(got)
    assert all(k.startswith("gemm:jit") for k in got["impl"]), got
    assert got["blocked"] == 0 and got["unblocked"] > 0, got


def test_onednn_fp32_on_gemm_jit_runs_in_blocks_when_asked(monkeypatch):
    """BERTFEAT_GEMM=onednn where oneDNN's fp32 kernel is gemm:jit: the blocks' kernel name, which the cache key holds
    (its rounding is not that of gemm:jit on a batch's own row count)."""
    import numpy as np

    kernel = gemm._probe_kernel(np.float32)
    if not (kernel or "").startswith("gemm:jit"):
        pytest.skip(f"oneDNN's fp32 kernel here is {kernel}, not gemm:jit")
    monkeypatch.setenv("BERTFEAT_GEMM", "onednn")
    p = gemm.resolve("fp32")
    assert (p.library, p.kernel, p.reason) == ("onednn", "gemm:jit:f32 in blocks of 512 rows", "BERTFEAT_GEMM=onednn")


_FPMATH = r"""
import numpy as np
from bertfeat.ops import onednn
rng = np.random.default_rng(0)
w = rng.standard_normal((64, 96), dtype=np.float32)
p = onednn.pack(w)
x = rng.standard_normal((5, 64), dtype=np.float32)
got = onednn.matmul(x, p)
print("max abs diff", float(np.abs(got - x.astype(np.float64) @ w.astype(np.float64)).max()))
"""


@pytest.mark.skipif(not __import__("bertfeat.ops.onednn", fromlist=["x"]).available(),
                    reason="oneDNN (the fast extra) is not installed")
def test_onednn_math_is_strict_whatever_the_environment_says():
    """ONEDNN_DEFAULT_FPMATH_MODE=BF16 made every primitive bertfeat built (the fp32 products, the weights' reorders)
    take 'attr-fpmath:bf16': on a CPU with bf16 an fp32 run would round its products' inputs to bf16, its provenance and
    cache key saying fp32. Each attribute is strict now: oneDNN's verbose log names no fpmath mode, and the products
    are fp32's (within 1e-4 of float64 here; bf16 inputs are off by ~1e-2)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, ONEDNN_DEFAULT_FPMATH_MODE="BF16", ONEDNN_VERBOSE="1")
    r = subprocess.run([sys.executable, "-c", _FPMATH], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    log = [line for line in r.stdout.splitlines() if line.startswith("onednn_verbose,exec,cpu,")]
    assert any(",matmul," in line for line in log) and any(",reorder," in line for line in log), r.stdout[-2000:]
    assert not [line for line in log if "fpmath" in line], log
    assert float(r.stdout.strip().splitlines()[-1].split()[-1]) < 1e-4


@pytest.mark.skipif(not __import__("bertfeat.ops.onednn", fromlist=["x"]).available(),
                    reason="oneDNN (the fast extra) is not installed")
@pytest.mark.parametrize("kind", ["fp32", "bf16", "int8"])
def test_onednn_rows_with_gaps_run_on_the_fast_kernel(kind):
    """A column slice of a wider array, as the input or the output of a product: oneDNN 3.2 runs such row strides on
    'ref:any', orders of magnitude slower (measured on AMX). matmul multiplies packed copies instead: the same numbers
    as contiguous arrays give, and no primitive on 'ref'."""
    from bertfeat.ops import onednn

    rng = np.random.default_rng(5)
    K, N, M = 64, 48, 9
    if kind == "int8":
        w, big = rng.integers(-127, 128, (K, N), dtype=np.int8), rng.integers(0, 256, (M, 2 * K), dtype=np.uint8)
        dtype = np.int32
    else:
        w, big = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal((M, 2 * K)).astype(np.float32)
        dtype = np.float32
        if kind == "bf16":
            w, big = gemm.to_bf16(w), gemm.to_bf16(big)
    p = onednn.pack(w)
    want = onednn.matmul(np.ascontiguousarray(big[:, K:]), p)
    wide = np.full((M, 3 * N), 7, dtype)
    got_a = onednn.matmul(big[:, K:], p)  # gapped input
    got_out = onednn.matmul(np.ascontiguousarray(big[:, K:]), p, out=wide[:, N:2 * N])  # gapped output
    np.testing.assert_array_equal(got_a, want)
    np.testing.assert_array_equal(wide[:, N:2 * N], want)
    assert np.shares_memory(got_out, wide)  # the caller's slice is returned, as for contiguous rows
    assert (wide[:, :N] == 7).all() and (wide[:, 2 * N:] == 7).all()
    impls = [e.impl for k, e in onednn._thread_state()["prims"].items() if k[:3] == (M, K, N)]
    assert impls and not [i for i in impls if i.startswith("ref")], impls
