"""The CPU this process runs on, read from /proc/cpuinfo in this one place for everything that asks: its model name
(``cpu_model``), its feature flags (``cpu_flags``), and what they say it accelerates: bf16 (``bf16_acceleration``:
AMX or AVX512-BF16), int8 (``int8_acceleration``: AMX or VNNI), OpenBLAS's AVX-512 kernels (``cpu_has_avx512``).
``gemm.py`` picks a precision's path from these, ``threads.py`` the OpenBLAS kernel (before NumPy loads, so this
module imports no numeric library).
"""

from __future__ import annotations

from pathlib import Path

_AVX512_FLAGS = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")  # what SkylakeX kernels use


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or platform.processor())."""
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or platform.machine() or "unknown"


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def cpu_flags() -> set[str]:
    for line in _cpuinfo().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def bf16_acceleration(flags: set[str] | None = None) -> str | None:
    """How this CPU multiplies bf16: "amx" (AMX tiles), "avx512_bf16", or None (no native bf16)."""
    flags = cpu_flags() if flags is None else flags
    if {"amx_bf16", "amx_tile"} <= flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512_bf16"
    return None


def bf16_flags(flags: set[str] | None = None) -> list[str]:
    """The bf16 / int8 related CPU flags present (for benchmark records): AMX, AVX512-BF16, VNNI, AVX-512, AVX2."""
    flags = cpu_flags() if flags is None else flags
    return [f for f in ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512f", "avx2")
            if f in flags]


def int8_acceleration(flags: set[str] | None = None) -> str | None:
    """How this CPU multiplies int8: "amx", "avx512_vnni", "avx_vnni", or None."""
    flags = cpu_flags() if flags is None else flags
    if {"amx_int8", "amx_tile"} <= flags:
        return "amx"
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx_vnni" in flags:
        return "avx_vnni"
    return None


def cpu_has_avx512() -> bool:
    """Does this CPU have the AVX-512 subsets OpenBLAS's SkylakeX kernels use (threads.prefer_avx512_blas)?"""
    flags = cpu_flags()
    return all(f in flags for f in _AVX512_FLAGS)
