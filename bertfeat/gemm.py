"""Matrix products for the linear layers: NumPy's fp32 GEMM, or Intel MKL's through ctypes.

Shapes: M rows (token rows N, or a block of them), K inputs, N outputs of a linear layer.

bf16 ("bfloat16") is the top half of a float32: 1 sign, 8 exponent and 7 mantissa bits. NumPy has no
bf16 dtype, so bf16 arrays are ``uint16`` arrays of the bit patterns; ``to_bf16`` rounds float32 to
the nearest bf16 (ties to even, as torch's ``.to(torch.bfloat16)``), ``from_bf16`` widens exactly.

``gemm_bf16(a, b, out)``: out (M, N) float32 <- a (M, K) bf16 @ b (K, N) bf16, MKL's
``cblas_gemm_bf16bf16f32`` (products and sums in float32). NumPy's bundled OpenBLAS and the
``scipy-openblas`` wheels export no bf16 GEMM, which is why this needs MKL: the optional extra
``pip install "bertfeat[fast]"`` installs the PyPI package ``mkl`` (libmkl_rt). MKL uses AMX tiles
(Intel Sapphire Rapids and later) or AVX512-BF16 (Intel Cooper Lake, AMD Zen 4 and later) where the
CPU has them, and emulates bf16 with fp32 instructions elsewhere: correct, but with no bf16 speed-up
(and bf16's rounding), so ``require_bf16`` refuses an emulated run unless BERTFEAT_BF16_EMULATE=1
(the tests set it).

``sgemm(a, b, out)``: MKL's float32 GEMM, the same contract as ``np.matmul(a, b, out=out)``; the
fp32 forward pass uses it instead of NumPy's OpenBLAS with BERTFEAT_GEMM=mkl (``use``), for
measuring whether MKL's fp32 GEMM beats OpenBLAS on a given CPU (benchmarks/bench_encode.py,
method bertfeat-mkl).

MKL is put in its sequential threading layer (unless MKL_THREADING_LAYER is set): bertfeat runs one
GEMM per thread and batches side by side in threads (encoder.parallel_map), as it does with OpenBLAS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np

from .errors import BertfeatError, opt

PRECISIONS = ("fp32", "bf16")
GEMM_BACKENDS = ("numpy", "mkl")
FAST_HINT = 'pip install "bertfeat[fast]" (the PyPI package mkl)'

_ROW_MAJOR, _NO_TRANS = 101, 111  # CBLAS_LAYOUT, CBLAS_TRANSPOSE
_MKL_THREADING_SEQUENTIAL, _MKL_INTERFACE_LP64 = 1, 0

_lock = threading.Lock()
_mkl: dict[str, object] = {}  # "lib", "path", "version", "error" once loaded (or tried)
_backend: dict[str, str | None] = {"fp32": None}


# --------------------------------------------------------------------------- bf16 bit patterns
def to_bf16(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 array -> uint16 bf16 bit patterns, rounded to nearest, ties to even; NaN stays NaN.

    The NumPy path (weights at load, and activations when the numba kernels are off); the kernels in
    kernels.py round the same way.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    r = (u >> 16) & np.uint32(1)
    r += np.uint32(0x7FFF)
    r += u  # wraps only for NaN payloads, fixed below
    r >>= 16
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        r[nan] = (u[nan] >> 16) | np.uint32(0x40)  # a quiet NaN of the same sign
    if out is None:
        return r.astype(np.uint16)
    np.copyto(out, r.reshape(out.shape), casting="unsafe")
    return out


def from_bf16(b: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# --------------------------------------------------------------------------- CPU
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
    """The bf16-related CPU flags present (for benchmark records): amx_bf16, amx_tile, avx512_bf16."""
    flags = cpu_flags() if flags is None else flags
    return [f for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags]


# --------------------------------------------------------------------------- MKL
def _candidates() -> list[str]:
    """Where libmkl_rt may be: BERTFEAT_MKL_RT, this Python's lib folders (pip's `mkl` wheel puts it
    in <prefix>/lib, or Library/bin on Windows), the loader's search path."""
    env = os.environ.get("BERTFEAT_MKL_RT")
    if env:
        return [env]
    names = ["libmkl_rt.so.2", "libmkl_rt.so.3", "libmkl_rt.so", "libmkl_rt.2.dylib", "libmkl_rt.dylib",
             "mkl_rt.2.dll", "mkl_rt.3.dll", "mkl_rt.dll"]
    dirs: list[Path] = []
    for prefix in dict.fromkeys([sys.prefix, sys.exec_prefix, sys.base_prefix, sysconfig.get_config_var("userbase") or ""]):
        if prefix:
            dirs += [Path(prefix) / "lib", Path(prefix) / "Library" / "bin"]
    out = [str(d / n) for d in dirs for n in names if (d / n).is_file()]
    found = ctypes.util.find_library("mkl_rt")
    if found:
        out.append(found)
    return out


def _load_mkl() -> ctypes.CDLL | None:
    with _lock:
        if "lib" in _mkl:
            return _mkl["lib"]  # type: ignore[return-value]
        lib, errors = None, []
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path)
                lib.cblas_gemm_bf16bf16f32  # noqa: B018  (an MKL older than 2020 has none)
                _mkl["path"] = path
                break
            except (OSError, AttributeError) as e:
                errors.append(f"{path}: {e}")
                lib = None
        if lib is None:
            _mkl["lib"] = None
            _mkl["error"] = "; ".join(errors) if errors else "libmkl_rt was not found"
            return None
        lib.MKL_Set_Interface_Layer(_MKL_INTERFACE_LP64)  # MKL_INT is a 32-bit int below
        if not os.environ.get("MKL_THREADING_LAYER"):
            lib.MKL_Set_Threading_Layer(_MKL_THREADING_SEQUENTIAL)
        P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
        for fn in (lib.cblas_gemm_bf16bf16f32, lib.cblas_sgemm):
            fn.restype = None
            fn.argtypes = [I, I, I, I, I, I, F, P, I, P, I, F, P, I]
        buf = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(buf, 256)
        _mkl["version"] = buf.value.decode(errors="replace").strip()
        _mkl["lib"] = lib
        return lib


def mkl_available() -> bool:
    return _load_mkl() is not None


def mkl_version() -> str | None:
    """MKL's version string, None if it is not installed."""
    return _mkl.get("version") if _load_mkl() is not None else None  # type: ignore[return-value]


def mkl_path() -> str | None:
    return _mkl.get("path") if _load_mkl() is not None else None  # type: ignore[return-value]


def emulation_allowed() -> bool:
    return os.environ.get("BERTFEAT_BF16_EMULATE", "").strip().lower() in ("1", "true", "yes")


def require_bf16() -> str:
    """Check bf16 can run here: MKL present, and native bf16 on the CPU (or emulation allowed).

    Returns how the bf16 GEMM runs: "amx", "avx512_bf16" or "emulated". Raises BertfeatError
    (one line, what is missing and how to get it) otherwise.
    """
    if _load_mkl() is None:
        raise BertfeatError(
            f"{opt('precision', 'bf16')} needs Intel MKL's bf16 GEMM (libmkl_rt), which is not installed",
            f"{FAST_HINT}, or use {opt('precision', 'fp32')}",
        )
    acc = bf16_acceleration()
    if acc is None:
        if emulation_allowed():
            return "emulated"
        raise BertfeatError(
            f"this CPU ({cpu_model()}) has no AMX or AVX512-BF16, so bf16 would be emulated, not accelerated",
            f"use {opt('precision', 'fp32')} here, or set BERTFEAT_BF16_EMULATE=1 to run the emulated bf16 path anyway (for testing)",
        )
    return acc


def describe_bf16() -> dict:
    """bf16 availability for `bertfeat info` and provenance: CPU support, the library, what would run."""
    acc = bf16_acceleration()
    version = mkl_version()
    if version is None:
        status = f"unavailable: MKL not installed ({FAST_HINT})"
    elif acc is None:
        status = "emulated by MKL (no AMX or AVX512-BF16 on this CPU: not accelerated; refused unless BERTFEAT_BF16_EMULATE=1)"
    else:
        status = f"accelerated ({'AMX' if acc == 'amx' else 'AVX512-BF16'}, MKL)"
    return {"status": status, "cpu": cpu_model(), "cpu_bf16": acc or "none", "library": version or "none"}


def provenance(precision: str, bf16_mode: str | None = None) -> dict:
    """What multiplied the linear layers, for the provenance of a features file."""
    if precision == "bf16":
        return {"linear_layers": "bf16", "library": f"MKL cblas_gemm_bf16bf16f32 ({mkl_version()})",
                "bf16": bf16_mode or bf16_acceleration() or "emulated", "cpu": cpu_model()}
    backend = fp32_backend()
    return {"linear_layers": "fp32", "library": f"MKL cblas_sgemm ({mkl_version()})" if backend == "mkl" else "numpy matmul",
            "cpu": cpu_model()}


# --------------------------------------------------------------------------- products
def _ld(x: np.ndarray, name: str) -> int:
    """The leading dimension (row stride in elements) of a 2-D array with unit column stride."""
    if x.ndim != 2 or (x.shape[1] > 1 and x.strides[1] != x.itemsize) or x.strides[0] % x.itemsize:
        raise ValueError(f"{name}: a 2-D array with contiguous rows is required, got shape {x.shape} strides {x.strides}")
    return max(x.strides[0] // x.itemsize, x.shape[1], 1)


def _call(fn_name: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None, dtype) -> np.ndarray:
    lib = _load_mkl()
    if lib is None:
        raise BertfeatError(f"MKL is not installed ({_mkl.get('error')})", FAST_HINT)
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not multiply")
    if a.dtype != dtype or b.dtype != dtype:
        raise TypeError(f"{fn_name}: inputs must be {np.dtype(dtype)}, got {a.dtype} and {b.dtype}")
    if out is None:
        out = np.empty((M, N), dtype=np.float32)
    if out.shape != (M, N) or out.dtype != np.float32:
        raise ValueError(f"{fn_name}: out must be float32 {(M, N)}, got {out.dtype} {out.shape}")
    if M == 0 or N == 0:
        return out
    if K == 0:
        out[...] = 0
        return out
    getattr(lib, fn_name)(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, M, N, K, 1.0, a.ctypes.data, _ld(a, "a"),
                          b.ctypes.data, _ld(b, "b"), 0.0, out.ctypes.data, _ld(out, "out"))
    return out


#: MKL computes products of fewer than 4 rows with another kernel whose sums round differently (seen
#: with MKL 2026.2's emulated bf16 and its sgemm); padding them to this many rows keeps a row's result
#: independent of how many rows share its GEMM.
MIN_GEMM_ROWS = 16


def _padded(fn_name: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None, dtype) -> np.ndarray:
    M = a.shape[0]
    if 0 < M < MIN_GEMM_ROWS and a.ndim == 2:
        pad = np.zeros((MIN_GEMM_ROWS, a.shape[1]), dtype=a.dtype)
        pad[:M] = a
        res = _call(fn_name, pad, b, None, dtype)[:M]
        if out is None:
            return res
        out[...] = res
        return out
    return _call(fn_name, a, b, out, dtype)


def gemm_bf16(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """out (M, N) float32 <- a (M, K) @ b (K, N), both bf16 bit patterns (uint16), rows contiguous."""
    return _padded("cblas_gemm_bf16bf16f32", a, b, out, np.uint16)


def sgemm(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """out (M, N) float32 <- a (M, K) @ b (K, N), float32, with MKL's sgemm."""
    return _padded("cblas_sgemm", a, b, out, np.float32)


def use(backend: str | None = None) -> str:
    """The GEMM of the fp32 linear layers: "numpy" (np.matmul, OpenBLAS) or "mkl" (MKL sgemm); None for
    the default, BERTFEAT_GEMM or numpy. Returns the backend in force."""
    want = (backend or os.environ.get("BERTFEAT_GEMM", "").strip().lower() or "numpy")
    if want not in GEMM_BACKENDS:
        raise BertfeatError(f"unknown GEMM backend '{want}'", f"choose one of {', '.join(GEMM_BACKENDS)} (BERTFEAT_GEMM)")
    if want == "mkl" and _load_mkl() is None:
        raise BertfeatError("BERTFEAT_GEMM=mkl needs Intel MKL (libmkl_rt), which is not installed",
                            f"{FAST_HINT}, or unset BERTFEAT_GEMM")
    _backend["fp32"] = want
    return want


def fp32_backend() -> str:
    if _backend["fp32"] is None:
        use()
    return str(_backend["fp32"])


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A linear layer's product into ``out``: bf16 x bf16 -> fp32 when b is bf16 (a must be too),
    else fp32 with the backend chosen by ``use``."""
    if b.dtype == np.uint16:
        return gemm_bf16(a, b, out)
    if _backend["fp32"] == "mkl" or (_backend["fp32"] is None and fp32_backend() == "mkl"):
        return sgemm(a, b, out)
    return np.matmul(a, b, out=out)
