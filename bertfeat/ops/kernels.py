"""Fused element-wise kernels for the forward pass, compiled by numba when it is installed.

Shapes: N token rows, F intermediate, H hidden (see model.py).

Why: NumPy runs every element-wise operation as its own pass over the array. The exact GELU
takes about 20 in-place passes over each (N, F) FFN activation (model.gelu_erf_), and bias +
residual + LayerNorm about ten over each (N, H) output. One compiled loop does each in a single
pass, vectorized with the CPU's SIMD instructions (AVX-512 here). Measured on this machine
(benchmarks/RESULTS.md): a (341, 1536) bias + GELU block takes 3.2 ms in NumPy and 0.14 ms fused.

The NumPy functions in model.py stay the reference: ``tests/ops/test_kernels.py`` checks every kernel
against them, and the parity tests run the model both ways. ``BERTFEAT_KERNELS=numpy`` (or
``use("numpy")``) turns the kernels off; without numba they are off anyway.

The kernels:

``bias_gelu_erf_(u, b)``  u <- GELU(u + b), the exact (erf) GELU of ``hidden_act: "gelu"``.
    The same erf as model.gelu_erf_, erf(z) = tanh(t) with t = z P(z^2) on z clamped to [-4, 4],
    rewritten without tanh: 0.5 x (1 + tanh(t)) = x / (1 + exp(-2t)), which also has no
    cancellation for negative x. exp is computed inline (Cody-Waite reduction, a degree-8
    polynomial, 2^n from an integer shift), so the loop vectorizes without a vector math library.
    Within 6e-7 of the float64 GELU on [-12, 12] (the NumPy path: 5.4e-7; torch's float32: 1.2e-6).
``bias_relu_(u, b)``      u <- max(u + b, 0).
``add_layer_norm_(y, b, r, g, beta, eps)``  y <- LN(y + b + r) g + beta over each row: two-pass
    mean and biased variance, as torch and model.layer_norm_.
``masked_softmax_(scores, scale, mask_add)``  scores (B, nh, T, T) <- softmax(scores * scale +
    mask_add) over the keys, in one sweep per row; masked keys (MASK_NEG) get exactly 0, and
    exp is inline as in the GELU (within 2 ulp of float32 exp). The sums run over the keys up to
    the last unmasked one, so right padding does not change a row's rounding.

bf16 variants (``precision="bf16"``, see gemm.py): the activations a bf16 GEMM reads are written
in bf16 by the kernel that makes them, not converted in a separate NumPy pass (a NumPy conversion
of a (1024, 768) block costs a third of the GEMM it feeds). Rounding is to nearest, ties to even,
NaN kept, as gemm.to_bf16; the bits are read back from the float32 row while it is in cache.

``bias_gelu_erf_bf16_(u, b, out16)`` / ``bias_relu_bf16_(u, b, out16)``  out16 <- bf16(act(u + b));
    u is scratch (left holding act(u + b)).
``add_layer_norm_bf16_(y, b, r, g, beta, eps, out16)``  add_layer_norm_, and out16 <- bf16(y).
``to_bf16_(x, out16)``  out16 <- bf16(x) for (N, H) rows (the embeddings' output).
``ctx_rows_bf16_(ctx, out16)``  out16 (B, T, nh, hs) <- bf16(ctx (B, nh, T, hs)): the attention
    context's transpose to token rows and its rounding in one pass.

int8 variants (``precision="int8"``, see quant.py for the scheme and the NumPy reference):
``quant_rows_(x, inv, q, sa, za)``  per-row asymmetric uint8 quantization of (M, K) rows times ``inv`` (K,) (the
    consumer's inv_smooth; ones for none).
``dq_bias_(acc, sa, za, sw, cs, b, yc, src, x, rows, wr, out)``  dequantize int32 sums (row i's in
    acc[-1 - src[i]]), add the bias and the weight's float rows times their inputs (x[:, rows] wr, a few axpys per
    row; rows empty for none); a row i with src[i] >= 0 (a float token row) takes the float product yc[src[i]].
``add_layer_norm_q8_(y, b, r, g, beta, eps, inv, q, sa, za)``  add_layer_norm_, then quantize its output rows
    times ``inv``.
``dq_bias_gelu_q8_(acc, sa, za, sw, cs, b, yc, src, x, rows, wr, u, q, qs, qz)``  the FFN's up projection:
    dq_bias_ and the GELU in one pass, then each row quantized for the down projection while it is in cache.

Every kernel works row by row, so a row's result does not depend on the other rows in the batch.

Each kernel is a module-level function; numba compiles each at its first call (the fp32 ones are called at ``use``,
the bf16 ones at ``warm_bf16``, the int8 ones at ``warm_q8``, so an fp32 model compiles no other); its disk cache
spares later processes the compile. ``fused()`` is the kernels in force by name, empty on the NumPy backend.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable

import numpy as np

# erf(z) = tanh(z P(z^2)) for |z| <= 4 (erf(4) = 1 - 1.5e-8 rounds to 1 in float32): P is a weighted least-
# squares fit of atanh(erf(z)) / z in z^2, degree 6 (P(0) = 2/sqrt(pi)). Fitted in float64 with scipy's erf;
# |erf error| < 7e-8, and the GELU built on it is within 8e-7 of the float64 exact GELU on [-12, 12]
# (float32 rounding of x itself is 9.5e-7 at |x| = 10; torch's float32 GELU is 1.2e-6 off).
ERF_TANH_P = tuple(np.float32(c) for c in (1.1283795833587646, 0.1027657762169838, -0.00018451041250955313,
                                            -0.0006259579677134752, 8.990698552224785e-05, -6.0318275245663244e-06,
                                            1.6232166899499134e-07))

BACKENDS = ("numba", "numpy")

# The constants the kernels share, computed once here. numba compiles a global's value into a kernel as a constant
# (the cache index does not record it, but any edit of this file invalidates the whole cache).
f32 = np.float32
p0, p1, p2, p3, p4, p5, p6 = ERF_TANH_P  # atanh(erf(z)) / z in powers of z^2
c2, c3, c4, c5, c6, c7 = (f32(1.0 / math.factorial(k)) for k in range(2, 8))  # e^r, |r| <= ln2 / 2
log2e, ln2_hi, ln2_lo = f32(1.4426950408889634), f32(0.693145751953125), f32(1.428606765330187e-06)
sqrt_half, half, one, two, four = f32(0.7071067811865476), f32(0.5), f32(1.0), f32(2.0), f32(4.0)
zero = f32(0.0)
two_m32, two_m60 = f32(2.0**-32), f32(2.0**-60)

_lock = threading.Lock()
_first = threading.Lock()
_state: dict[str, object] = {"backend": None, "kernels": None, "error": None}

# --------------------------------------------------------------------------- the kernels, one by one
# Each kernel and each helper it inlines is a plain module-level function here, registered by name. numba is imported
# only when the numba backend is chosen (use): every registered function is then wrapped in a numba dispatcher that
# replaces it in this module's globals (so kernels calling a helper or another kernel call the dispatcher), and each
# dispatcher compiles, or loads from numba's disk cache, at its first call (lazily: an fp32 model never compiles the
# bf16 or int8 kernels). No kernel has closure cells: numba keys its disk cache on them, and a dispatcher in a cell
# pickles differently in every process, so the kernels calling it were compiled again on every run (2-4 s before the
# first batch) and added a cache entry each time; tests/ops/test_kernels.py::test_a_second_process_compiles_nothing
# checks this.

_HELPERS: dict[str, Callable] = {}  # global name -> Python function, inlined into the kernels that call it
_KERNELS: dict[str, tuple[str, Callable]] = {}  # kernel name -> (global name, Python function)


def _helper(f: Callable) -> Callable:
    _HELPERS[f.__name__] = f
    return f


def _kernel(name: str) -> Callable[[Callable], Callable]:
    def register(f: Callable) -> Callable:
        _KERNELS[name] = (f.__name__, f)
        return f

    return register


@_helper
def _exp_parts(y):
    """e^y = 2^n e^r: (e^r, n) with |r| <= ln2 / 2 (Cody-Waite), e^r a degree-8 polynomial.

    The caller scales by 2^n through integer shifts (no bit casts in numba, no division), so
    every loop calling this vectorizes.
    """
    n = np.floor(y * log2e + half)
    r = (y - n * ln2_hi) - n * ln2_lo
    er = (((((((c7 * r + c6) * r + c5) * r + c4) * r + c3) * r + c2) * r + one) * r) + one
    return er, np.int64(n)


@_helper
def _gelu_erf(x):
    """The exact GELU of one value (erf(z) = tanh(t), written without tanh; see the module docstring)."""
    z0 = x * sqrt_half
    z = min(max(z0, -four), four)
    s = z * z
    t = ((((((p6 * s + p5) * s + p4) * s + p3) * s + p2) * s + p1) * s + p0) * z  # erf(z) = tanh(t)
    er, n = _exp_parts(-two * t)  # GELU = x / (1 + e^(-2t)), |2t| < 19 so |n| <= 28
    e = er * (f32(np.int64(1) << (n + 32)) * two_m32)
    # below z = -4, GELU(x) < 9e-8 falls to 0 faster than x / (1 + e^19): return 0 (NaN for -inf)
    return x / (one + e) if z0 > -four else x * zero


@_helper
def _exp_le0(y):
    """e^y for y <= 0 (0 below -80)."""
    er, n = _exp_parts(max(y, f32(-80.0)))  # -116 <= n <= 0
    n1 = n >> 1  # 2^n = 2^n1 2^n2, each 2^(m + 60) 2^-60 with m + 60 in [2, 60]
    e = er * (f32(np.int64(1) << (n1 + 60)) * two_m60) * (f32(np.int64(1) << (n - n1 + 60)) * two_m60)
    return e if y >= f32(-80.0) else zero  # e^-80 = 1.8e-35


# --------------------------------------------------------------------------- fp32
@_kernel("gelu")
def bias_gelu_erf_(u, b):
    N, F = u.shape
    for i in range(N):
        row = u[i]
        for j in range(F):
            row[j] = _gelu_erf(row[j] + b[j])
    return u


@_kernel("relu")
def bias_relu_(u, b):
    N, F = u.shape
    for i in range(N):
        row = u[i]
        for j in range(F):
            row[j] = max(row[j] + b[j], zero)
    return u


@_kernel("add_layer_norm_")
def add_layer_norm_(y, b, r, g, beta, eps):
    N, H = y.shape
    inv_h = f32(1.0) / f32(H)
    e = f32(eps)
    for i in range(N):
        row, res = y[i], r[i]
        total = zero
        for j in range(H):
            v = row[j] + b[j] + res[j]
            row[j] = v
            total += v
        mean = total * inv_h
        sq = zero
        for j in range(H):
            d = row[j] - mean
            sq += d * d
        inv_std = one / np.sqrt(sq * inv_h + e)
        for j in range(H):
            row[j] = (row[j] - mean) * inv_std * g[j] + beta[j]
    return y


@_kernel("masked_softmax_")
def masked_softmax_(scores, scale, mask_add):
    B, nh, T, Tk = scores.shape
    for bi in range(B):
        m = mask_add[bi, 0, 0]
        n = Tk  # keys up to the last unmasked one: right padding then never changes a row's sums
        while n > 1 and m[n - 1] < f32(-1e37):
            n -= 1
        for h in range(nh):
            for i in range(T):
                row = scores[bi, h, i]
                top = f32(-np.inf)
                for j in range(n):
                    v = row[j] * scale + m[j]
                    row[j] = v
                    top = max(top, v)
                total = zero
                for j in range(n):
                    e = _exp_le0(row[j] - top) if row[j] > f32(-1e37) else zero
                    row[j] = e
                    total += e
                inv = one / total
                for j in range(n):
                    row[j] *= inv
                for j in range(n, Tk):
                    row[j] = zero
    return scores


# --------------------------------------------------------------------------- bf16
@_helper
def _rne16(w):
    """float32 bits (uint32) -> bf16 bits, nearest even; NaN stays a (quiet) NaN."""
    if (w & 0x7FFFFFFF) > 0x7F800000:
        return np.uint16((w >> 16) | 0x40)
    return np.uint16((w + 0x7FFF + ((w >> 16) & 1)) >> 16)


@_helper
def _row_bf16(bits, out):
    for j in range(bits.shape[0]):
        out[j] = _rne16(bits[j])


@_kernel("gelu_bf16")
def bias_gelu_erf_bf16_(u, b, out16):
    bias_gelu_erf_(u, b)
    ub = u.view(np.uint32)
    for i in range(u.shape[0]):
        _row_bf16(ub[i], out16[i])
    return out16


@_kernel("relu_bf16")
def bias_relu_bf16_(u, b, out16):
    N, F = u.shape
    ub = u.view(np.uint32)
    for i in range(N):
        row, bits, o = u[i], ub[i], out16[i]
        for j in range(F):
            row[j] = max(row[j] + b[j], zero)
        _row_bf16(bits, o)
    return out16


@_kernel("to_bf16_")
def to_bf16_(x, out16):
    xb = x.view(np.uint32)
    for i in range(x.shape[0]):
        _row_bf16(xb[i], out16[i])
    return out16


@_kernel("add_layer_norm_bf16_")
def add_layer_norm_bf16_(y, b, r, g, beta, eps, out16):
    add_layer_norm_(y, b, r, g, beta, eps)
    to_bf16_(y, out16)
    return y


@_kernel("ctx_rows_bf16_")
def ctx_rows_bf16_(ctx, out16):
    B, nh, T, hs = ctx.shape
    cb = ctx.view(np.uint32)
    for bi in range(B):
        for t in range(T):
            for h in range(nh):
                _row_bf16(cb[bi, h, t], out16[bi, t, h])
    return out16


# --------------------------------------------------------------------------- int8
@_helper
def _quant_row(row, qr, pair):
    """One row -> uint8 qr (per-row asymmetric, quant.quant_rows); returns its (scale, zero point).

    The range [min(row, 0), max(row, 0)] is found on the float32 bits: b ^ ((b >> 31) & 0x7FFFFFFF) orders int32
    keys as the floats they stand for, and an integer min / max loop vectorizes where a float one (NaN rules)
    does not: 4.8x faster on a (512, 1536) block, same result. ``pair``: a float32 scratch pair (its int32 view
    turns the two keys back into floats). A NaN in the row ends as a NaN scale, so the dequantized row is NaN
    (and the features are refused as non-finite) rather than a finite guess."""
    bits = row.view(np.int32)
    lo_k, hi_k = np.int32(0), np.int32(0)  # the key of +0.0: the range always holds 0
    for j in range(bits.shape[0]):
        b = bits[j]
        k = b ^ ((b >> 31) & np.int32(0x7FFFFFFF))
        lo_k = min(lo_k, k)
        hi_k = max(hi_k, k)
    pb = pair.view(np.int32)
    pb[0] = lo_k ^ ((lo_k >> 31) & np.int32(0x7FFFFFFF))
    pb[1] = hi_k ^ ((hi_k >> 31) & np.int32(0x7FFFFFFF))
    lo, hi = pair[0], pair[1]
    s = (hi - lo) * f32(1.0 / 255.0)
    if s == zero:
        s = one
    inv = one / s
    z = np.floor(-lo * inv + half)
    zf = f32(z)
    for j in range(row.shape[0]):
        t = min(max(row[j] * inv + zf, zero), f32(255.0))
        qr[j] = np.uint8(t + half)
    return s, np.int32(z)


@_helper
def _quant_rows_scaled(x, inv, q, sa, za):
    """Rows of x times inv (K,) into a scratch row, each quantized from there (quant.quant_rows(x, inv))."""
    pair = np.empty(2, np.float32)
    t = np.empty(x.shape[1], np.float32)
    for i in range(x.shape[0]):
        row = x[i]
        for j in range(t.shape[0]):
            t[j] = row[j] * inv[j]
        sa[i], za[i] = _quant_row(t, q[i], pair)


@_helper
def _dq_bias_row(o, i, acc, sa, za, sw, cs, b, yc, src, x, rows, wr):
    """Row i of dq_bias_: o (N,) <- sa sw (acc[-1 - src[i]] - za cs) + b + x[i, rows] wr, or yc[src[i]] + b
    for a float token row (src[i] >= 0)."""
    if src[i] >= 0:
        yr = yc[src[i]]
        for j in range(o.shape[0]):
            o[j] = yr[j] + b[j]
        return
    a, z, r = sa[i], za[i], acc[-1 - src[i]]
    for j in range(o.shape[0]):
        o[j] = f32(r[j] - z * cs[j]) * (a * sw[j]) + b[j]
    xr = x[i]
    for k in range(rows.shape[0]):  # the weight's float rows (quant.py) times their inputs: k axpys
        c = xr[rows[k]]
        w = wr[k]
        for j in range(o.shape[0]):
            o[j] += c * w[j]


@_kernel("quant_rows_")
def quant_rows_(x, inv, q, sa, za):
    """Per-row asymmetric uint8 quantization of x * inv (quant.quant_rows): q, scales sa, zero points za."""
    _quant_rows_scaled(x, inv, q, sa, za)
    return q


@_kernel("dq_bias_")
def dq_bias_(acc, sa, za, sw, cs, b, yc, src, x, rows, wr, out):
    """out (M, N) <- sa sw (acc - za cs) + b + x[:, rows] wr (the weight's float rows; rows empty for none);
    a row i with src[i] >= 0 takes yc[src[i]] (+ b) instead."""
    for i in range(out.shape[0]):
        _dq_bias_row(out[i], i, acc, sa, za, sw, cs, b, yc, src, x, rows, wr)
    return out


@_kernel("dq_bias_gelu_q8_")
def dq_bias_gelu_q8_(acc, sa, za, sw, cs, b, yc, src, x, rows, wr, u, q, qs, qz):
    """u (M, N) <- GELU(dq_bias_ of the row), each row then quantized into q, qs, qz (quant_rows_) while it is in
    cache: the FFN's up projection and the down projection's input in one pass over u."""
    pair = np.empty(2, np.float32)
    for i in range(u.shape[0]):
        row = u[i]
        _dq_bias_row(row, i, acc, sa, za, sw, cs, b, yc, src, x, rows, wr)
        for j in range(row.shape[0]):
            row[j] = _gelu_erf(row[j])
        qs[i], qz[i] = _quant_row(row, q[i], pair)
    return u


@_kernel("add_layer_norm_q8_")
def add_layer_norm_q8_(y, b, r, g, beta, eps, inv, q, sa, za):
    add_layer_norm_(y, b, r, g, beta, eps)
    _quant_rows_scaled(y, inv, q, sa, za)
    return y


FP32_KERNELS = ("gelu", "relu", "add_layer_norm_", "masked_softmax_")
BF16_KERNELS = ("gelu_bf16", "relu_bf16", "add_layer_norm_bf16_", "to_bf16_", "ctx_rows_bf16_")
Q8_KERNELS = ("quant_rows_", "dq_bias_", "add_layer_norm_q8_", "dq_bias_gelu_q8_")


def _jit_all() -> dict[str, Callable]:
    """Every registered function wrapped in a numba dispatcher (once per process: importing numba raises if it is
    missing), the module's globals pointed at them; returns kernel name -> dispatcher. Nothing compiles here."""
    if "jitted" not in _state:
        import numba

        # fastmath without nnan/ninf: NaN and inf still propagate; error_model="numpy": a division
        # does not check for zero (that check would stop the loop from vectorizing)
        fast = {"contract", "arcp", "nsz", "afn", "reassoc"}
        g = globals()
        for name, f in _HELPERS.items():
            g[name] = numba.njit(inline="always", error_model="numpy", fastmath=fast)(f)
        jitted = {}
        for name, (gname, f) in _KERNELS.items():
            g[gname] = jitted[name] = numba.njit(nogil=True, cache=True, error_model="numpy", fastmath=fast)(f)
        _state["jitted"] = jitted
    return dict(_state["jitted"])  # type: ignore[arg-type]


def _warm(k: dict[str, Callable]) -> None:
    """Compile (or load from cache) the fp32 kernels now, once, not inside a worker thread."""
    u = np.zeros((2, 8), dtype=np.float32)
    v = np.zeros(8, dtype=np.float32)
    k["gelu"](u, v)
    k["relu"](u, v)
    k["add_layer_norm_"](u, v, u.copy(), v, v, 1e-12)
    k["masked_softmax_"](np.zeros((1, 2, 3, 3), np.float32), np.float32(0.5), np.zeros((1, 1, 1, 3), np.float32))


def _warm_bf16(k: dict[str, Callable]) -> None:
    """The bf16 kernels likewise, only for a bf16 model (a first fp32 run does not compile them: 1.5 s here)."""
    u = np.zeros((2, 8), dtype=np.float32)
    v = np.zeros(8, dtype=np.float32)
    u16 = np.zeros((2, 8), dtype=np.uint16)
    k["gelu_bf16"](u, v, u16)
    k["relu_bf16"](u, v, u16)
    k["add_layer_norm_bf16_"](u, v, u.copy(), v, v, 1e-12, u16)
    k["to_bf16_"](u, u16)
    k["ctx_rows_bf16_"](np.zeros((1, 2, 3, 4), np.float32), np.zeros((1, 3, 2, 4), np.uint16))


def _warm_q8(k: dict[str, Callable]) -> None:
    """The int8 kernels likewise, only for an int8 model."""
    u = np.zeros((2, 8), dtype=np.float32)
    v = np.zeros(8, dtype=np.float32)
    q = np.zeros((2, 8), dtype=np.uint8)
    sa, za = np.zeros(2, np.float32), np.zeros(2, np.int32)
    acc, cs, yc = np.zeros((2, 8), np.int32), np.zeros(8, np.int32), np.zeros((1, 8), np.float32)
    rows, wr = np.zeros(0, np.int64), np.zeros((0, 8), np.float32)  # no float rows: the same types as with some
    src = np.array([0, -1], np.int32)  # row 0 float (yc[0]), row 1 int8 (acc[0])
    k["quant_rows_"](u, v, q, sa, za)
    k["to_bf16_"](u[:1], np.zeros((1, 8), np.uint16))  # the float token rows, gathered (model.q8_products)
    k["dq_bias_"](acc, sa, za, v, cs, v, yc, src, u.copy(), rows, wr, u)
    k["add_layer_norm_q8_"](u, v, u.copy(), v, v, 1e-12, v, q, sa, za)
    k["dq_bias_gelu_q8_"](acc, sa, za, v, cs, v, yc, src, u.copy(), rows, wr, u, q, sa, za)


def warm_q8() -> None:
    """Compile (or load) the int8 kernels now, in the calling thread (Encoder(precision="int8") calls this at load)."""
    _warm_once("q8", _warm_q8)


def _warm_once(group: str, warm: Callable) -> None:
    """Compile (or load) ``group``'s kernels by calling each once, once per use() (nothing on the NumPy backend)."""
    _ensure()
    with _lock:
        k = _state["kernels"]
        if k and not _state.get(group + "_warm"):
            warm(k)
            _state[group + "_warm"] = True


_NONE: dict[str, Callable] = {}


def use(backend: str | None = None) -> str:
    """Choose the element-wise backend: "numba" (fused kernels), "numpy", or None for the default
    (numba when it imports, unless BERTFEAT_KERNELS=numpy). Returns the backend in force."""
    with _lock:
        want = backend or os.environ.get("BERTFEAT_KERNELS", "").strip().lower() or "numba"
        if want not in BACKENDS:
            raise ValueError(f"unknown kernel backend {want!r}; use one of {BACKENDS}")
        kernels = None
        if want == "numba":
            try:
                kernels = _jit_all()
                _warm(kernels)
                _state["error"] = None
            except Exception as e:  # numba missing or unusable here: the NumPy path is always correct
                _state["error"] = f"{type(e).__name__}: {e}"
                if backend == "numba":
                    raise
                want = "numpy"
        if kernels is None:  # a new (empty) dict too: fused()'s callers see the change
            global _NONE
            _NONE = {}
        _state["backend"], _state["kernels"], _state["bf16_warm"], _state["q8_warm"] = want, kernels, False, False
        return want


def warm_bf16() -> None:
    """Compile (or load) the bf16 kernels now, in the calling thread (Encoder(precision="bf16") calls this at load)."""
    _warm_once("bf16", _warm_bf16)


def _ensure() -> None:
    if _state["backend"] is None:  # first use: pick the default once, even if threads race here
        with _first:
            if _state["backend"] is None:
                use()


def backend() -> str:
    """The backend in force ("numba" or "numpy"), choosing the default on first call."""
    _ensure()
    return str(_state["backend"])


def get(name: str) -> Callable | None:
    """The fused kernel ``name`` ("gelu", "relu", "add_layer_norm_", ...), or None on the NumPy backend (or for a
    name without one). A kernel not warmed yet compiles (or loads from numba's cache) at its first call."""
    return fused().get(name)


def fused() -> dict[str, Callable]:
    """The fused kernels in force, by name: empty on the NumPy backend. A new dict at each use(), so a caller may
    keep what it derives from one until ``fused() is not`` that dict."""
    _ensure()
    return _state["kernels"] or _NONE  # type: ignore[return-value]


def unavailable_reason() -> str | None:
    """Why numba was not used when it was the default choice (None if it is in use or was not wanted)."""
    return _state["error"]  # type: ignore[return-value]
