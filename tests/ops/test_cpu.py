"""ops/cpu.py: the one reader of /proc/cpuinfo (model name, flags) and the rules that turn flags into what the CPU
accelerates, on literal inputs; gemm.py and threads.py decide from it."""

from __future__ import annotations

import pytest

from bertfeat.ops import cpu, gemm, threads

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse avx2 avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 avx512_vnni

processor\t: 1
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse avx2
"""


@pytest.fixture
def fake_cpuinfo(monkeypatch):
    """Replace what /proc/cpuinfo reads as (the text, or "" when it cannot be read)."""

    def use(text: str):
        monkeypatch.setattr(cpu, "_cpuinfo", lambda: text)

    return use


def test_model_and_flags_from_cpuinfo(fake_cpuinfo):
    fake_cpuinfo(CPUINFO)
    assert cpu.cpu_model() == "AMD EPYC 9R14 96-Core Processor"
    assert cpu.cpu_flags() == {"fpu", "sse", "avx2", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
                               "avx512_bf16", "avx512_vnni"}  # the first processor's line
    assert cpu.bf16_acceleration() == "avx512_bf16" and cpu.int8_acceleration() == "avx512_vnni"
    assert cpu.bf16_flags() == ["avx512_bf16", "avx512_vnni", "avx512f", "avx2"]
    assert cpu.cpu_has_avx512()


def test_unreadable_cpuinfo_means_no_flags(fake_cpuinfo):
    fake_cpuinfo("")
    assert cpu.cpu_flags() == set() and not cpu.cpu_has_avx512()
    assert cpu.bf16_acceleration() is None and cpu.int8_acceleration() is None
    assert cpu.cpu_model()  # platform's name, or "unknown": never empty


def test_avx512_needs_every_subset_skylakex_uses(fake_cpuinfo):
    fake_cpuinfo("flags\t: avx2 avx512f avx512cd avx512bw avx512dq\n")  # no avx512vl
    assert not cpu.cpu_has_avx512()


def test_gemm_and_threads_read_the_cpu_here():
    """One CPU reader: gemm's precision choice and threads' OpenBLAS kernel use cpu.py's functions, not copies."""
    assert gemm.bf16_acceleration is cpu.bf16_acceleration and gemm.int8_acceleration is cpu.int8_acceleration
    assert gemm.cpu_model is cpu.cpu_model and threads.cpu_has_avx512 is cpu.cpu_has_avx512


def test_cpu_capabilities():
    assert cpu.bf16_acceleration({"amx_bf16", "amx_tile", "avx512_bf16"}) == "amx"
    assert cpu.bf16_acceleration({"avx512_bf16", "avx512f"}) == "avx512_bf16"
    assert cpu.bf16_acceleration({"avx2", "fma"}) is None
    assert cpu.bf16_flags({"avx2", "amx_bf16", "sse"}) == ["amx_bf16", "avx2"]


def test_int8_acceleration_by_flags():
    assert cpu.int8_acceleration({"amx_int8", "amx_tile", "avx512_vnni"}) == "amx"
    assert cpu.int8_acceleration({"amx_int8", "avx512_vnni"}) == "avx512_vnni"  # AMX needs its tiles too
    assert cpu.int8_acceleration({"avx512_vnni", "avx512f"}) == "avx512_vnni"
    assert cpu.int8_acceleration({"avx_vnni", "avx2"}) == "avx_vnni"
    assert cpu.int8_acceleration({"avx2", "fma", "avx512f"}) is None
    assert cpu.bf16_acceleration({"amx_bf16", "avx2"}) is None  # no tiles, no AVX512-BF16
