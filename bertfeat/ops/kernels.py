"""Fused element-wise kernels for the forward pass, compiled by numba when it is installed.

Shapes: N token rows, F intermediate, H hidden (see model/bert.py).

Why: NumPy runs every element-wise operation as its own pass over the array. The exact GELU
takes about 20 in-place passes over each (N, F) FFN activation (bert.gelu_erf_), and bias +
residual + LayerNorm about ten over each (N, H) output. One compiled loop does each in a single
pass, vectorized with the CPU's SIMD instructions (AVX-512 here). Measured on this machine
(benchmarks/RESULTS.md): a (341, 1536) bias + GELU block takes 3.2 ms in NumPy and 0.14 ms fused.

The NumPy functions in model/bert.py stay the reference: ``tests/ops/test_kernels.py`` checks every kernel
against them, and the parity tests run the model both ways. ``BERTFEAT_KERNELS=numpy`` (or
``use("numpy")``) turns the kernels off; without numba they are off anyway.

The kernels:

``bias_gelu_erf_(u, b)``  u <- GELU(u + b), the exact (erf) GELU of ``hidden_act: "gelu"``.
    The same erf as bert.gelu_erf_, erf(z) = tanh(t) with t = z P(z^2) on z clamped to [-4, 4],
    rewritten without tanh: 0.5 x (1 + tanh(t)) = x / (1 + exp(-2t)), which also has no
    cancellation for negative x. exp is computed inline (Cody-Waite reduction, a degree-8
    polynomial, 2^n from an integer shift), so the loop vectorizes without a vector math library.
    Within 6e-7 of the float64 GELU on [-12, 12] (the NumPy path: 5.4e-7; torch's float32: 1.2e-6).
``bias_relu_(u, b)``      u <- max(u + b, 0).
``add_layer_norm_(y, b, r, g, beta, eps)``  y <- LN(y + b + r) g + beta over each row: two-pass
    mean and biased variance, as torch and bert.layer_norm_.
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

int8 variants (``precision="int8"``, scheme "6"; quant.py has the scheme and the NumPy reference of each). ``nq`` =
(inv, orows, q, s, z, ti, tv, xo) is where a kernel writes rows quantized for the next GEMM (uint8 q with per-row
scale s and zero point z, the top channels' indices ti and values tv, the float inputs xo of the weight's outlier
rows); ``xd`` = (s, z, ti, tv, xo) is how the consumer reads them back; ``kw`` is the QLinear's packed weight.
``quant_rows_q8_(x, *nq)``  rows of x (M, K) times ``inv`` quantized into nq (the embeddings' output).
``ctx_q8_(ctx, *nq)``  the attention context (B, nh, T, hs) transposed to token rows and quantized in one pass.
``dq_bias_q8_(acc, xd, kw, b, out)``  out <- the dequantized int32 sums + b + the top channels' and outlier rows'
    products (the fused Q/K/V projection; any other linear of a float input, quantized first).
``dq_add_ln_q8_(acc, xd, kw, b, res, g, beta, eps, out, nq)``  out <- LN(dequantized + b + res) g + beta, each row
    then quantized into nq (q of 0 rows: not quantized, after the last layer).
``dq_gelu_q8_(acc, xd, kw, b, nq)``  the FFN's up projection: GELU(dequantized + b) (within 1.3e-4 of the exact
    one), quantized into nq for the down projection while the row is in cache.
``hp_accumulate_(acc, s, z, cs, f, out, add)``  a short batch's products with the weight's two levels (Wq, Wr), one
    at a time, into float32 out.

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

from .threads import new_locks_after_fork

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
#: int8: a row whose range is below TINY_RANGE is quantized scaled by 2^64 (quant.TINY_RANGE, checked equal in
#: tests/ops/test_int8.py): its scale's inverse would overflow float32
tiny_range, two_p64, two_m64 = f32(2.0**-118), f32(2.0**64), f32(2.0**-64)
inv_resid = f32(1.0 / 254.0)  # quant.RESID (checked equal in tests/ops/test_int8.py)
top_ratio2 = f32(4.0 * 4.0)  # quant.TOP_RATIO squared (likewise)
top_n = 2  # quant.TOP (likewise; a constant: with the count read from an array's shape, 0.35 ns an element, not 0.22)
# GELU for int8 (_gelu_q): Phi(x) - 1/2 = x P(x^2) on |x| <= 4, P of degree 7 fitted in float64 (weighted least
# squares, the GELU's absolute error); max |error| of the GELU 1.27e-4 (at |x| = 4, where Phi is cut to 0 / 1)
GELU_Q8_P = tuple(np.float32(c) for c in (0.398673415184021, -0.06588786095380783, 0.009505395777523518,
                                          -0.001006487407721579, 7.48543898225762e-05, -3.657068191387225e-06,
                                          1.0419304175002253e-07, -1.3012406707701984e-09))
g0, g1, g2, g3, g4, g5, g6, g7 = GELU_Q8_P

_lock = threading.Lock()
_first = threading.Lock()
_state: dict[str, object] = {"backend": None, "kernels": None, "error": None}

# A child forked while another thread chose the backend or warmed a precision's kernels (an int8 or bf16 Encoder
# loading) waited forever on these locks: new ones there (a warm cut short was not marked done, so the child warms
# again). A fork in the middle of numba's own compile or import still hangs the child in numba's locks
# (docs/python.md): not waited for here, as a fork hook that blocks deadlocks with logging's.
new_locks_after_fork(globals(), "_lock", "_first")

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
_ROWS: dict[str, Callable] = {}  # global name -> Python function over a row, compiled apart (a call, not inlined)
_KERNELS: dict[str, tuple[str, Callable]] = {}  # kernel name -> (global name, Python function)


def _helper(f: Callable) -> Callable:
    _HELPERS[f.__name__] = f
    return f


def _row(f: Callable) -> Callable:
    _ROWS[f.__name__] = f
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


@_helper
def _add_ln_row(row, b, res, g, beta, inv_h, e):
    """row <- LN(row + b + res) g + beta: two-pass mean and biased variance, as torch and bert.layer_norm_."""
    H = row.shape[0]
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


@_kernel("add_layer_norm_")
def add_layer_norm_(y, b, r, g, beta, eps):
    N, H = y.shape
    inv_h = f32(1.0) / f32(H)
    e = f32(eps)
    for i in range(N):
        _add_ln_row(y[i], b, r[i], g, beta, inv_h, e)
    return y


@_kernel("masked_softmax_")
def masked_softmax_(scores, scale, mask_add):
    """softmax(scores * scale + mask_add) over each row's keys up to the sequence's last real one (right padding:
    a row's result depends on its own length only), in place. The exponentials run as one loop over all of a head's
    rows packed at the sequence's own length (``buf``): a row of a few dozen keys is too short for the vectorized loop
    (LLVM's vector body takes 64 at a time here) and ran scalar at ~1 ns an element; an element's exponential is the
    same in the vector body and the scalar tail (tests/ops/test_kernels.py), so its place in ``buf`` cannot change
    it."""
    B, nh, T, Tk = scores.shape
    buf = np.empty(T * Tk, np.float32)
    for bi in range(B):
        m = mask_add[bi, 0, 0]
        n = Tk  # keys up to the last unmasked one: right padding then never changes a row's sums
        while n > 1 and m[n - 1] < f32(-1e37):
            n -= 1
        for h in range(nh):
            for i in range(T):
                row, d = scores[bi, h, i], buf[i * n:(i + 1) * n]
                top = f32(-np.inf)
                for j in range(n):
                    v = row[j] * scale + m[j]
                    row[j] = v
                    top = max(top, v)
                for j in range(n):
                    d[j] = row[j] - top if row[j] > f32(-1e37) else f32(-np.inf)
            _exp_all(buf[:T * n])
            for i in range(T):
                row, d = scores[bi, h, i], buf[i * n:(i + 1) * n]
                total = zero
                for j in range(n):
                    total += d[j]
                inv = one / total
                for j in range(n):
                    row[j] = d[j] * inv
                for j in range(n, Tk):
                    row[j] = zero
    return scores


@_row
def _exp_all(x):
    """x <- e^x, x <= 0 (0 below -80, at -inf and at NaN)."""
    for j in range(x.shape[0]):
        x[j] = _exp_le0(x[j])


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
# The helpers are inlined (a call per row costs more than a short row's work), but for the weight rows' decoding
# (_row: compiled apart, called once per call of a kernel). Every integer step is cast back to int32: numba widens
# int32 arithmetic to int64, and the min / max loops then ran on half the lanes. _stats finds max |t| alone; the first
# index holding it is _first_at's, compiled apart (inlined into _quant_out, that loop did not vectorize). Before, one
# int64 max packed both: _stats 0.34 ns an element, 0.13 now (Intel model 207, AVX-512).
@_helper
def _key(b):
    """The int32 key of float bits b, b ^ ((b >> 31) & 0x7FFFFFFF): keys order as the floats they stand for do."""
    return np.int32(b ^ np.int32(np.int32(b >> np.int32(31)) & np.int32(0x7FFFFFFF)))


@_helper
def _stats(bits):
    """(top, lo key, hi key) of a row's int32 bits: ``top`` the bits of max |t| (|t|'s bits order as |t| does; a NaN's
    are the largest), lo / hi the keys (_key) of min(row, 0) and max(row, 0): an integer min / max loop vectorizes where
    a float one, under NaN rules, does not."""
    n = bits.shape[0]
    top, lo_k, hi_k = np.int32(0), np.int32(0), np.int32(0)
    for j in range(n):
        b = bits[j]
        top = np.int32(max(top, np.int32(b & np.int32(0x7FFFFFFF))))
        k = _key(b)
        lo_k = np.int32(min(lo_k, k))
        hi_k = np.int32(max(hi_k, k))
    return top, lo_k, hi_k


@_row
def _first_at(bits, top):
    """The first index j with |bits[j]| == top (the first on ties, as quant.take_top): a min over a select, which
    vectorizes where a loop that stops at the first does not."""
    n = bits.shape[0]
    at = np.int32(n)
    for j in range(n):
        at = np.int32(min(at, np.int32(j) if np.int32(bits[j] & np.int32(0x7FFFFFFF)) == top else np.int32(n)))
    return at


@_helper
def _scale_stats(row, inv, t):
    """t <- row * inv; (sum of squares, _stats) of t, in one pass."""
    tb = t.view(np.int32)
    n = t.shape[0]
    ss = zero
    top, lo_k, hi_k = np.int32(0), np.int32(0), np.int32(0)
    for j in range(n):
        v = row[j] * inv[j]
        t[j] = v
        ss += v * v
        b = tb[j]
        top = np.int32(max(top, np.int32(b & np.int32(0x7FFFFFFF))))
        k = _key(b)
        lo_k = np.int32(min(lo_k, k))
        hi_k = np.int32(max(hi_k, k))
    return ss, top, lo_k, hi_k


@_helper
def _key_floats(lo_k, hi_k, pair):
    """The floats that the keys lo_k, hi_k stand for (_stats), through ``pair``'s int32 view."""
    pb = pair.view(np.int32)
    pb[0] = _key(lo_k)
    pb[1] = _key(hi_k)
    return pair[0], pair[1]


@_helper
def _quant_keys(row, qr, lo_k, hi_k, pair):
    """row -> uint8 qr over the range of keys (lo_k, hi_k) (per-row asymmetric, quant.quant_rows); returns (scale, zero
    point). ``pair``: a float32 scratch pair (its int32 view turns the keys back into floats). A NaN in the row ends as
    a NaN scale, so the dequantized row is NaN (and the features are refused as non-finite) rather than a finite guess.
    A row of range below tiny_range (quant.TINY_RANGE) is scaled by 2^64 in place first (exact; ``row`` is scratch)
    and its scale by 2^-64 after: 1 / s would overflow. Its range is read again from the scaled row, not multiplied:
    fastmath may regroup lo 2^64 / s into lo (2^64 / s), which overflows."""
    lo, hi = _key_floats(lo_k, hi_k, pair)
    back = one
    if zero < hi - lo < tiny_range:
        for j in range(row.shape[0]):
            row[j] *= two_p64
        _, lo_k, hi_k = _stats(row.view(np.int32))
        lo, hi = _key_floats(lo_k, hi_k, pair)
        back = two_m64
    s = (hi - lo) * f32(1.0 / 255.0)
    if s == zero:
        s = one
    inv = one / s
    z = np.floor(-lo * inv + half)
    zf = f32(z)
    for j in range(row.shape[0]):
        t = min(max(row[j] * inv + zf, zero), f32(255.0))
        qr[j] = np.uint8(t + half)
    return s * back, np.int32(z)


@_helper
def _quant_out(row, i, nq, t, tb, pair):
    """Row i of a layer's output (float32 ``row``) quantized for the next int8 GEMM into ``nq`` = (inv, orows, q, s,
    z, ti, tv, xo) (quant.quant_rows_q8): xo[i] <- row[orows]; t <- row * inv, its top channels out (up to TOP,
    those above TOP_RATIO x its rms, largest first; -1 in ti for an empty slot; the first index on ties; a NaN is
    taken), the rest quantized into q[i]. Every pass is vectorized, on the int32 bits of t: ``t`` a float32 scratch
    row, ``tb`` its int32 view (made once: one per row cost 0.13 ns an element), ``pair`` float32 scratch."""
    inv, orows, q, s, z, ti, tv, xo = nq
    xr, tir, tvr = xo[i], ti[i], tv[i]
    for r in range(orows.shape[0]):
        xr[r] = row[orows[r]]
    n = t.shape[0]
    ss, top, lo_k, hi_k = _scale_stats(row, inv, t)
    pair[0] = np.sqrt(ss * (top_ratio2 / f32(n)))  # TOP_RATIO rms, and its bits
    lim = pair.view(np.int32)[0]
    for r in range(top_n):  # a constant count (unrolled), the stats every time: a branch around them costs more
        if top > lim:
            k = _first_at(tb, top)
            tir[r], tvr[r] = k, t[k]
            t[k] = zero
        else:
            tir[r], tvr[r] = -1, zero
            lim = np.int32(0x7FFFFFFF)  # no later slot either
        top, lo_k, hi_k = _stats(tb)
    s[i], z[i] = _quant_keys(t, q[i], lo_k, hi_k, pair)


@_row
def _hp_row(o, k, kw):
    """o (N,) <- channel k's weight row at ~15 bits, s_w (Wq + Wr / RESID), from the packed bytes: byte f[k] + g[n];
    with S > 0 the layout is oneDNN's VNNI one (g[n] = (n // 64) S + (n % 64) 4: a stride-4 read per 64 columns)."""
    sw, _, b1, br, f, g, _, S = kw
    N, base = o.shape[0], f[k]
    if S > 0:
        for c0 in range(0, N, 64):
            cn = min(64, N - c0)
            at = base + (c0 // 64) * S
            r1, r2, oo, ww = b1[at:at + 4 * cn], br[at:at + 4 * cn], o[c0:c0 + cn], sw[c0:c0 + cn]
            for c in range(cn):
                oo[c] = ww[c] * (f32(r1[4 * c]) + f32(r2[4 * c]) * inv_resid)
        return
    r1, r2 = b1[base:], br[base:]
    for c in range(N):
        o[c] = sw[c] * (f32(r1[g[c]]) + f32(r2[g[c]]) * inv_resid)


@_row
def _hp_rows(ti, kw):
    """The distinct channels of ti (M, J) (-1: none) -> (slot (M, J), rows (n, N)): row slot[i, j] is channel
    ti[i, j]'s weight row at ~15 bits (_hp_row), decoded once per call."""
    K, N = kw[4].shape[0], kw[5].shape[0]
    where = np.full(K, -1, np.int32)
    M, J = ti.shape
    slot = np.empty((M, J), np.int32)
    n = 0
    for i in range(M):
        for j in range(J):
            k = ti[i, j]
            if k < 0:
                slot[i, j] = -1
                continue
            if where[k] < 0:
                where[k] = n
                n += 1
            slot[i, j] = where[k]
    rows = np.empty((n, N), np.float32)
    for k in range(K):
        if where[k] >= 0:
            _hp_row(rows[where[k]], k, kw)
    return slot, rows


@_helper
def _dq_base(o, r, a, zf, cs, sw, b):
    """o <- (r - zf cs) (a sw) + b, in float32 (r - z cs is below 2^31 but not 2^24: a few units of rounding, far
    below the quantization's)."""
    for c in range(o.shape[0]):
        o[c] = (f32(r[c]) - zf * f32(cs[c])) * (a * sw[c]) + b[c]


@_helper
def _axpy(o, v, h):
    """o <- o + v h."""
    for c in range(o.shape[0]):
        o[c] += v * h[c]


@_helper
def _dq_row(o, i, acc, xd, kw, b, slot, hrows):
    """Row i of a dequantization: o (N,) <- s sw (acc[i] - z cs) + b + the top channels' and outlier rows'
    products (quant.dq_bias_q8). ``xd`` = (s, z, ti, tv, xo) of the input rows, ``kw`` the QLinear's kw."""
    s, z, _, tv, xo = xd
    sw, cs, _, _, _, _, side, _ = kw
    _dq_base(o, acc[i], s[i], f32(z[i]), cs, sw, b)
    sl, tvi, xoi = slot[i], tv[i], xo[i]
    for j in range(sl.shape[0]):
        if sl[j] < 0:
            break
        _axpy(o, tvi[j], hrows[sl[j]])
    for k in range(side.shape[0]):  # the weight's outlier rows (quant.py) times their float inputs: k axpys
        _axpy(o, xoi[k], side[k])


@_helper
def _gelu_q(x):
    """GELU within 1.3e-4 of the exact one, for int8 (its output is quantized to 1/255 of its row's range next):
    x Phi(x), Phi(x) = 1/2 + x P(x^2) on |x| < 4 (P of degree 7, GELU_Q8_P), 0 / 1 beyond. A third of the exact
    kernel's cost (no exp, no division)."""
    xc = min(max(x, -four), four)
    s = xc * xc
    p = ((((((g7 * s + g6) * s + g5) * s + g4) * s + g3) * s + g2) * s + g1) * s + g0
    phi = half + xc * p
    phi = one if x >= four else phi
    phi = zero if x <= -four else phi
    return x * phi


@_helper
def _gelu_row(row):
    for j in range(row.shape[0]):
        row[j] = _gelu_q(row[j])


@_kernel("quant_rows_q8_")
def quant_rows_q8_(x, inv, orows, q, s, z, ti, tv, xo):
    """Rows of x (M, K) quantized for an int8 GEMM (_quant_out; quant.quant_rows_q8)."""
    nq = (inv, orows, q, s, z, ti, tv, xo)
    pair = np.empty(2, np.float32)
    t = np.empty(x.shape[1], np.float32)
    tb = t.view(np.int32)
    for i in range(x.shape[0]):
        _quant_out(x[i], i, nq, t, tb, pair)
    return q


@_kernel("ctx_q8_")
def ctx_q8_(ctx, inv, orows, q, s, z, ti, tv, xo):
    """The attention context (B, nh, T, hs) as token rows (B * T, nh * hs), each quantized as quant_rows_q8_ does:
    the transpose and the quantization in one pass."""
    B, nh, T, hs = ctx.shape
    nq = (inv, orows, q, s, z, ti, tv, xo)
    pair = np.empty(2, np.float32)
    row, t = np.empty(nh * hs, np.float32), np.empty(nh * hs, np.float32)
    tb = t.view(np.int32)
    for bi in range(B):
        for tt in range(T):
            for h in range(nh):
                src, dst = ctx[bi, h, tt], row[h * hs:(h + 1) * hs]
                for j in range(hs):
                    dst[j] = src[j]
            _quant_out(row, bi * T + tt, nq, t, tb, pair)
    return q


@_kernel("dq_bias_q8_")
def dq_bias_q8_(acc, xd, kw, b, out):
    """out (M, N) <- the dequantized product + b (_dq_row; quant.dq_bias_q8)."""
    slot, hrows = _hp_rows(xd[2], kw)
    for i in range(out.shape[0]):
        _dq_row(out[i], i, acc, xd, kw, b, slot, hrows)
    return out


@_kernel("dq_add_ln_q8_")
def dq_add_ln_q8_(acc, xd, kw, b, res, g, beta, eps, out, nq):
    """out (M, H) <- LN(dequantized product + b + res) g + beta: a layer's output projection (or FFN down) with its
    bias, residual and LayerNorm; each row then quantized for the next int8 GEMM into ``nq`` (quant_rows_q8_'s
    arguments as a tuple; q of 0 rows: not quantized, after the last layer)."""
    slot, hrows = _hp_rows(xd[2], kw)
    pair = np.empty(2, np.float32)
    H = out.shape[1]
    t, nob = np.empty(H, np.float32), np.zeros(H, np.float32)
    tb = t.view(np.int32)
    inv_h, e = f32(1.0) / f32(H), f32(eps)
    quantize = nq[2].shape[0] > 0
    for i in range(out.shape[0]):
        row = out[i]
        _dq_row(row, i, acc, xd, kw, nob, slot, hrows)  # the bias with the residual, in the LayerNorm's first pass
        _add_ln_row(row, b, res[i], g, beta, inv_h, e)
        if quantize:
            _quant_out(row, i, nq, t, tb, pair)
    return out


@_kernel("dq_gelu_q8_")
def dq_gelu_q8_(acc, xd, kw, b, nq):
    """The FFN's up projection: GELU(dequantized product + b) for each row (_gelu_q), quantized into ``nq`` for the
    down projection while it is in cache (the float rows are not kept)."""
    slot, hrows = _hp_rows(xd[2], kw)
    pair = np.empty(2, np.float32)
    N = acc.shape[1]
    row, t = np.empty(N, np.float32), np.empty(N, np.float32)
    tb = t.view(np.int32)
    for i in range(acc.shape[0]):
        _dq_row(row, i, acc, xd, kw, b, slot, hrows)
        _gelu_row(row)
        _quant_out(row, i, nq, t, tb, pair)
    return nq[2]


@_helper
def _accumulate_row(o, r, a, z, cs, add):
    if add:
        for c in range(o.shape[0]):
            o[c] += f32(r[c] - z * cs[c]) * a
    else:
        for c in range(o.shape[0]):
            o[c] = f32(r[c] - z * cs[c]) * a


@_kernel("hp_accumulate_")
def hp_accumulate_(acc, s, z, cs, f, out, add):
    """A short batch (levels 2), one of its two products: out (M, N) <- (or, with ``add``, +=) s f (acc - z cs), the
    consumer's s_w not applied (quant.hp_accumulate)."""
    for i in range(out.shape[0]):
        _accumulate_row(out[i], acc[i], s[i] * f, z[i], cs, add)
    return out


BF16_KERNELS = ("gelu_bf16", "relu_bf16", "add_layer_norm_bf16_", "to_bf16_", "ctx_rows_bf16_")
Q8_KERNELS = ("quant_rows_q8_", "ctx_q8_", "dq_bias_q8_", "dq_add_ln_q8_", "dq_gelu_q8_", "hp_accumulate_")


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
        for name, f in _ROWS.items():
            g[name] = numba.njit(nogil=True, cache=True, error_model="numpy", fastmath=fast)(f)
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
    """The int8 kernels likewise, only for an int8 model: each with int32 sums and with a short batch's float32 ones."""
    M, K, N, J = 2, 8, 8, 2
    v, x = np.zeros(K, np.float32), np.zeros((M, K), np.float32)
    kw = (np.ones(N, np.float32), np.zeros(N, np.int32), np.zeros(K * N, np.int8), np.zeros(K * N, np.int8),
          np.arange(K, dtype=np.int64) * N, np.arange(N, dtype=np.int64), np.zeros((0, N), np.float32), 0)
    q, s, z = np.zeros((M, K), np.uint8), np.ones(M, np.float32), np.zeros(M, np.int32)
    ti, tv, xo = np.zeros((M, J), np.int32), np.zeros((M, J), np.float32), np.zeros((M, 0), np.float32)
    nq, xd = (v, np.zeros(0, np.int64), q, s, z, ti, tv, xo), (s, z, ti, tv, xo)
    k["quant_rows_q8_"](x, *nq)
    k["ctx_q8_"](np.zeros((1, 2, M, K // 2), np.float32), *nq)
    for acc in (np.zeros((M, N), np.int32), np.zeros((M, N), np.float32)):  # a short batch's sums are float32
        k["dq_bias_q8_"](acc, xd, kw, v, x.copy())
        k["dq_add_ln_q8_"](acc, xd, kw, v, x, v, v, 1e-12, x.copy(), nq)
        k["dq_add_ln_q8_"](acc, xd, kw, v, x, v, v, 1e-12, x.copy(), nq[:2] + (q[:0],) + nq[3:])
        k["dq_gelu_q8_"](acc, xd, kw, v, nq)
    for add in (False, True):
        k["hp_accumulate_"](np.zeros((M, N), np.int32), s, z, kw[1], np.float32(1.0), x.copy(), add)


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
        if want not in BACKENDS:  # the variable named: it ended as "unexpected ValueError ... a bug in bertfeat"
            from ..errors import BertfeatError

            shown = f"kernel backend {want!r}" if backend else f"kernel backend BERTFEAT_KERNELS={want!r}"
            raise BertfeatError(f"unknown element-wise {shown}", f"choose one of {', '.join(BACKENDS)}"
                                + ("" if backend else ", or unset it"))
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


#: numba's settings (numba.core.config, from its NUMBA_* variables) that change how the kernels compile, so how they
#: round, with numba's defaults: each of DISABLE_JIT=1, OPT=0, LOOP_VECTORIZE=0, BOUNDSCHECK=1, CPU_NAME=generic
#: moved a tiny model's fp32 features by up to 7e-7. ENABLE_AVX's default depends on the CPU: named when its
#: variable is set.
NUMBA_CODEGEN = (("DISABLE_JIT", 0), ("OPT", 3), ("LOOP_VECTORIZE", 1), ("SLP_VECTORIZE", 0), ("BOUNDSCHECK", None),
                 ("CPU_NAME", None), ("CPU_FEATURES", None))


#: NumPy's settings that switch its SIMD loops off or on (read once, at its import): on the NumPy backend the GELU,
#: softmax and LayerNorm run on those loops, and AVX2 and AVX-512 off moved all-MiniLM-L6-v2's int8 features by
#: 2.3e-3 (fp32 by 1.5e-7); numba's kernels do not use them, but on either backend a model's Dense modules take their
#: activation from NumPy (np.tanh, np.exp: AVX2 off moved a tanh Dense model's features by 6e-8)
NUMPY_DISPATCH = ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")


def identity() -> str:
    """The element-wise backend in force as it rounds: "numba VERSION" or "numpy" (their GELU, LayerNorm and int8
    kernels differ in the last bits: up to 5e-3 on int8 features), with numba's code generation settings that differ
    from its defaults (``numba_settings``: "numba 0.61.0 (NUMBA_DISABLE_JIT=1)"), and NumPy's CPU feature settings
    when set, on either backend (``numpy_settings``: "numpy (NPY_DISABLE_CPU_FEATURES=AVX512F)"; a Dense module's
    activation runs on NumPy's loops under numba too). Unset, the identity is the one it was before they joined it.
    Part of cache.store.gemm_identity."""
    import sys

    name = backend()
    if name == "numba" and "numba" in sys.modules:
        name = f"numba {sys.modules['numba'].__version__}"
        settings = numba_settings() + numpy_settings()
    else:
        settings = numpy_settings()
    return name + (f" ({', '.join(settings)})" if settings else "")


def numba_settings() -> list[str]:
    """numba's settings in force that change the kernels' code (NUMBA_CODEGEN) and are not its defaults, as
    ``NUMBA_NAME=value``: a run under NUMBA_DISABLE_JIT=1 or NUMBA_OPT=0 rounds otherwise than one without."""
    from numba.core import config

    out = []
    for key, default in NUMBA_CODEGEN:
        value = getattr(config, key, default)
        value = int(value) if key == "OPT" else value  # an _OptLevel
        if value != default and not (key == "CPU_FEATURES" and not value):  # "" beside CPU_NAME=generic: its default
            out.append(f"NUMBA_{key}={value}")
    if os.environ.get("NUMBA_ENABLE_AVX", "").strip():
        out.append(f"NUMBA_ENABLE_AVX={int(bool(config.ENABLE_AVX))}")
    return out


def numpy_settings() -> list[str]:
    """NumPy's CPU feature settings in force (``NUMPY_DISPATCH``), as ``NAME=FEATURES`` with the features sorted (its
    own order and separators do not matter to NumPy, so they do not change the key)."""
    out = []
    for key in NUMPY_DISPATCH:
        features = sorted(set(os.environ.get(key, "").replace(",", " ").upper().split()))
        if features:
            out.append(f"{key}={' '.join(features)}")
    return out


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
