"""int8 linear layers (precision="int8"): weights per output channel, activations per token, no calibration.

Shapes: M token rows, K inputs, N outputs of a linear layer, J = TOP channels per row.

A linear layer y = x W (+ b) runs as one uint8 x int8 -> int32 GEMM (oneDNN, VNNI or AMX) and a dequantization in
the kernel that consumes y (bias + residual + LayerNorm, or bias + GELU):

    weights (at load):  s_w[n] = max_k |W[k, n]| / 127,   Wq = round(W / s_w) in [-127, 127] (int8),
                        c[n] = sum_k Wq[k, n] (int32); and the residual Wr = round((W - s_w Wq) / (s_w / RESID))
    activations (per row m, by the kernel that writes x):
                        the TOP channels of largest |x_m| are taken out (their index and value kept, 0 in their
                        place), then lo = min(x_m, 0), hi = max(x_m, 0), s_a[m] = (hi - lo) / 255,
                        z[m] = round(-lo / s_a[m]), xq = clip(round(x / s_a) + z, 0, 255) (uint8): x ~ s_a (xq - z)
    the product:        acc = xq @ Wq (int32, exact), y[m, n] = s_a[m] s_w[n] (acc[m, n] - z[m] c[n]) (+ b[n])
                        + sum over the row's top channels k of x[m, k] s_w[n] (Wq[k, n] + Wr[k, n] / RESID)

``acc - z c`` is computed in int32, exactly (|z c| <= 255 * 127 * K < 2^31 for K < 66,000), before the float scale.

Top channels: trained encoders put a few very large values in a few channels of some tokens (the [CLS] / [SEP] rows:
"massive activations"); in a per-token quantization such a value sets the row's scale and flattens the others, and
its product with an 8-bit weight row carries that row's rounding magnified. Taken out of the row (TOP = 2 per row, by
the kernel that quantizes it, in the same pass), the row's range shrinks to its other values, and the taken values
are multiplied by their weight rows at ~15 bits (Wq + Wr / RESID, read from the packed weights: packed_offsets). The
consuming kernel decodes each distinct channel of a block once and adds TOP axpys per row. A row's choice depends on
the row alone.

Short sequences (at most SHORT_TOKENS tokens, special tokens included, or at most SHORT_TOKENS distinct ones:
``two_levels``): a mean over a few tokens averages little of the rounding away, nor one over many copies of a few. The Encoder batches them apart (encoder.split_short_batches) and such a batch multiplies by the
weights at ~15 bits, their two int8 levels (``levels`` = 2): xq Wq + xq Wr / RESID, two int8 GEMM rows per row summed
in float32 (hp_accumulate). A row is short or not by its own sequence, never by its batch, so features are the same
bit for bit in any batch. Over the 1,248 sentences of <= 8 tokens among the 17,511 of examples/precision_check.py,
the smallest cosine to fp32 is 0.99937 (the longer sentences': 0.99899), against 0.99997 when scheme "5" quantized
each row's residual x - s_a (xq - z) into a second row for a third product, xq2 Wq, at 1.4x the time of such a
batch; 0.99906 with xq2 Wq and without xq Wr (2026-11-29, Zen 5). Such a batch still costs 1.2-1.3x bf16's time a
token (benchmarks/corpus.py's sentences, one thread): a corpus of mostly short texts is faster in bf16
(docs/precision.md).

Outlier weight rows, decided from the weights alone: a few input rows k of a trained weight are far larger than
the rest (all-MiniLM-L6-v2's FFN down projections have rows 38-55x the median row's largest |value|), and each
one sets the scale of every column it tops, so the other 1,535 inputs of those columns get a coarse grid. Rows whose
largest |value| exceeds OUTLIER_ROW_RATIO x the median row's (at most 1/32 of the rows) are taken out of the int8
weight (zero there, so the scales and column sums ignore them; inv_smooth is 0 there, so the activations' range
and top channels ignore them too) and multiplied in float32 instead: the quantizing kernel keeps those inputs'
float values (``xo``), and the consuming kernel adds k axpys per row: y += xo W[rows, :].

Smoothing the LayerNorm outputs, from the weights alone: the inputs of the QKV and FFN up projections are
LayerNorm outputs n * g + beta, whose channels with a large |g| + |beta| widen every row's range. Per input channel
k, s[k] = sqrt(|g[k]| + |beta[k]|) / sqrt(max_n |W[k, n]|) (geometric mean 1; SmoothQuant's alpha = 0.5 with the
LayerNorm's parameters in place of calibrated activation maxima); the int8 weight is diag(s) W and the kernel that
writes the LayerNorm output quantizes x / s (``inv_smooth``), so x W is unchanged and the range is shared between
activations and weights. The residual stream keeps x as it is. Random-weight models (g = 1, beta = 0) get a plain
weight-side scaling. (With the top channels it buys little: 0.99918 -> 0.99924 below; it costs one multiply.)

The weights are quantized from their bf16 rounding (the int8 model loads as bf16 does, so its load peaks no higher):
the top channels' ~15-bit rows are then bf16's precision (simulated: no change in the smallest cosine).

Measured on all-MiniLM-L6-v2, smallest cosine to fp32 of its own embedding over 7,193 real sentences (the 4,000 of
benchmarks/corpus.py and the 3,193 held-out SST-2 dev + test and TREC test sentences), in a NumPy simulation of the
parts: every row int8, none of the above: 0.99211; the first token's rows in float (scheme "3"'s idea): 0.99843;
TOP = 1: 0.99841, TOP = 2: 0.99874; + short sequences (<= 8 tokens) in scheme "5"'s two activation levels: TOP = 1
0.99915, TOP = 2 0.99931 (<= 6 tokens: 0.99914); without smoothing 0.99918; top channels for the LayerNorm outputs
only: 0.99891; the top channels' weight rows at 8 bits instead of ~15: 0.99869. Scheme "4" (float token rows, float
short sequences): 0.99923. The built scheme's figures: docs/precision.md.

This module holds the weight quantization and the NumPy reference of the activation kernels; kernels.py has the
fused numba versions (``quant_rows_q8_``, ``ctx_q8_``, ``dq_bias_q8_``, ``dq_add_ln_q8_``, ``dq_gelu_q8_``,
``hp_accumulate_``), checked against these (tests/ops/test_int8.py).
"""

from __future__ import annotations

import numpy as np

from . import onednn


#: the int8 scheme's version, in provenance, the features' fingerprint and the vector cache's key: features of two
#: schemes never mix in one output or cache ("1": bertfeat 0.2.0; "2": + the outlier weight rows below; "3": + the
#: short sequences' rows in float and the LayerNorm-output smoothing; "4": the same features whatever the batch, bit
#: for bit: attention per sequence length, short sequences never batched with long ones; "5": no float GEMM at all:
#: the top channels of each row out of its quantization, short sequences in two int8 levels, weights from bf16;
#: "6": short sequences' activations in one level, by the weights' two: two products, not three; "7": a sequence of
#: few distinct tokens ("_" x 254, "! ! ! ...") takes the short sequences' ~15-bit weights too)
SCHEME = "7"

#: an input row of a weight whose largest |value| is above this many times the median row's stays float32
#: (module docstring); 6 picks the 38-55x rows of all-MiniLM-L6-v2 and no row of a random-weight model
OUTLIER_ROW_RATIO = 6.0

#: a sequence of at most this many tokens (special tokens included) multiplies by the ~15-bit weights (module docstring)
SHORT_TOKENS = 8

#: SmoothQuant's migration strength: s = a_max^alpha / w_max^(1 - alpha), a_max from the LayerNorm's parameters
SMOOTH_ALPHA = 0.5

#: channels of largest |x| taken out of each row's quantization: at most TOP, those above TOP_RATIO x its rms
TOP = 2
TOP_RATIO = 4.0

#: the residual weight's step is s_w / RESID (Wr in [-127, 127] holds a rounding error of at most s_w / 2)
RESID = 254.0

#: a row whose range (max(x, 0) - min(x, 0)) is below this (2^-118, 3e-36) is quantized scaled by 2^64 and its scale
#: scaled back by 2^-64: its scale's inverse would overflow float32 (a zero point of -2^31 and a row of garbage, 1e7
#: times its own size: a model whose LayerNorm writes values of 1e-37 into weights of 1e37 gave int8 cosines of -0.24
#: to fp32's features); the scale, a subnormal there, keeps 13 bits at a range of 1e-37
TINY_RANGE = 2.0**-118


def smoothing(g: np.ndarray, beta: np.ndarray | None, w: np.ndarray) -> np.ndarray:
    """(K,) float32 per-input-channel factors s for a (K, N) weight whose input is a LayerNorm's output n g + beta:
    s = (|g| + |beta|)^alpha / (max_n |W[k, n]|)^(1 - alpha), scaled to a geometric mean of 1 (module docstring)."""
    if np.shape(g) != w.shape[:1]:
        raise ValueError(f"smoothing: LayerNorm weight of shape {np.shape(g)} for a linear weight of {w.shape[0]} inputs")
    a = np.abs(np.asarray(g, np.float64))
    if beta is not None:
        a = a + np.abs(np.asarray(beta, np.float64))
    wmax = np.abs(w).max(axis=1).astype(np.float64)  # (K,)
    s = np.maximum(a, 1e-6) ** SMOOTH_ALPHA / np.maximum(wmax, 1e-6) ** (1 - SMOOTH_ALPHA)
    return (s / np.exp(np.log(s).mean())).astype(np.float32)


def outlier_rows(w: np.ndarray) -> np.ndarray:
    """The input rows k of a (K, N) weight that stay float32: max_n |w[k, n]| > OUTLIER_ROW_RATIO x the median row's,
    the largest K // 32 at most; sorted, int64 (possibly empty)."""
    K = w.shape[0]
    top = np.abs(w).max(axis=1)  # (K,)
    med = float(np.median(top)) if K else 0.0
    rows = np.flatnonzero(top > OUTLIER_ROW_RATIO * med) if med > 0 else np.zeros(0, np.int64)
    rows = rows[np.argsort(-top[rows], kind="stable")][:max(1, K // 32)]
    return np.sort(rows).astype(np.int64)


_OFFSETS: dict[tuple[int, int, str], tuple[np.ndarray, np.ndarray] | None] = {}


def packed_offsets(K: int, N: int, impl: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Where oneDNN's packed (K, N) int8 weight holds (k, n): byte f[k] + g[n], or None when its layout is not of
    that form. A blocked layout (oneDNN's are: tiles of k and n) always is; found once per shape by packing the base
    127 digits of k and of n (4 packs; padding bytes are 0, every digit + 1 is not) and checked for every (k, n), in
    slices, so it costs about 15 bytes a weight for a moment (a full int64 map cost 40 and set the int8 load's peak)."""
    key = (K, N, impl)
    if key not in _OFFSETS:
        k, n = np.arange(K), np.arange(N)
        p = [onednn.pack(np.ascontiguousarray(np.broadcast_to(d.astype(np.int8), (K, N)))).data.view(np.int8)
             for d in ((k % 127 + 1)[:, None], (k // 127 + 1)[:, None], (n % 127 + 1)[None, :], (n // 127 + 1)[None, :])]
        f, g = np.full(K, -1, np.int64), np.full(N, -1, np.int64)
        ok, step = True, 1 << 20
        for at in range(0, p[0].size, step):  # pass 1: each (k, 0) and (0, n)
            kk, nn, live = _digits(p, at, step)
            first = np.flatnonzero(live & (nn == 0))
            f[kk[first]] = at + first
            first = np.flatnonzero(live & (kk == 0))
            g[nn[first]] = at + first
        ok = (f >= 0).all() and (g >= 0).all()
        f -= g[0]
        for at in range(0, p[0].size, step) if ok else ():  # pass 2: every byte where f + g says
            kk, nn, live = _digits(p, at, step)
            where = np.flatnonzero(live)
            ok = ok and bool((f[kk[where]] + g[nn[where]] == at + where).all())
        _OFFSETS[key] = (f, g) if ok and int(np.count_nonzero(p[0])) == K * N else None
    return _OFFSETS[key]


def _digits(p: list[np.ndarray], at: int, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k, n, live) of the packed bytes at .. at + step: the indices their digit patterns spell, True where not padding."""
    d = [a[at:at + step].astype(np.int32) - 1 for a in p]
    return d[0] + 127 * d[1], d[2] + 127 * d[3], d[0] >= 0


class QLinear:
    """A (K, N) linear weight for int8: the packed int8 weight of diag(s) W (``packed``; s the smoothing factors when
    given) and its residual (``packed_r``), their per-channel scale and column sums, ``inv_smooth`` (K,) = 1 / s (ones
    without smoothing, 0 at the outlier rows: the kernel that writes the input quantizes x * inv_smooth), and the
    outlier rows kept float32 (``rows`` (k,) and ``side``, their (k, N) float32 weight; k is often 0). ``kw``: what
    the consuming kernels take (kernels.py)."""

    def __init__(self, w: np.ndarray, smooth: np.ndarray | None = None):
        w = np.ascontiguousarray(w, dtype=np.float32)
        K, N = w.shape
        self.smoothed = smooth is not None
        s = np.ones(K, np.float32) if smooth is None else np.asarray(smooth, np.float32).reshape(K)
        ws = (w * s[:, None]).astype(np.float32) if smooth is not None else w.copy()  # (K, N) diag(s) W
        self.rows = outlier_rows(ws)
        self.side = np.ascontiguousarray(w[self.rows])  # (k, N) float32 of W itself, k possibly 0: times x
        ws[self.rows] = 0.0  # the int8 weights, their scales and column sums without the outlier rows
        self.inv_smooth = (np.float32(1.0) / s).astype(np.float32)
        self.inv_smooth[self.rows] = 0.0
        amax = np.abs(ws).max(axis=0)  # (N,)
        self.scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
        wq = np.clip(np.rint(ws / self.scale), -127, 127).astype(np.int8)  # (K, N)
        wr = np.clip(np.rint((ws - wq * self.scale) / (self.scale / np.float32(RESID))), -127, 127).astype(np.int8)
        self.shape, self.dtype = (K, N), np.dtype(np.int8)
        self.colsum, self.colsum_r = wq.sum(axis=0, dtype=np.int32), wr.sum(axis=0, dtype=np.int32)  # (N,)
        self.packed, self.packed_r = onednn.pack(wq), onednn.pack(wr)
        offsets = packed_offsets(K, N, self.packed.impl)
        plain = offsets is None  # an unknown layout: rows read from plain copies (K N bytes more)
        if plain:
            b1, br = wq.reshape(-1), wr.reshape(-1)
            offsets = (np.arange(K, dtype=np.int64) * N, np.arange(N, dtype=np.int64))
        else:
            b1, br = self.packed.data.view(np.int8), self.packed_r.data.view(np.int8)
        n = np.arange(N)
        stride = int(offsets[1][64]) if N > 64 else 1  # oneDNN's VNNI layout: 64 columns of 4 interleaved rows
        vnni = np.array_equal(offsets[1], (n // 64) * stride + (n % 64) * 4)
        #: what the consuming kernels take (kernels._dq_row, _hp_row): scales, column sums, the two weights' bytes,
        #: byte f[k] + g[n] of (k, n), the outlier rows' float32 weight, the VNNI stride (0: another layout)
        self.kw = (self.scale, self.colsum, b1, br, offsets[0], offsets[1], self.side, stride if vnni else 0)
        self.size = K * N
        self.nbytes = (self.packed.nbytes + self.packed_r.nbytes + (2 * K * N if plain else 0) + 12 * N + 4 * K
                       + self.side.nbytes)

    def hp_rows(self, ks: np.ndarray) -> np.ndarray:
        """(len(ks), N) float32: rows ``ks`` of diag(s) W at ~15 bits, s_w (Wq + Wr / RESID), as the kernels read them
        (the top channels' weight rows)."""
        _, _, b1, br, f, g, _, _ = self.kw
        at = f[np.asarray(ks)][:, None] + g[None, :]
        return (self.scale * (b1[at].astype(np.float32) + br[at].astype(np.float32) / np.float32(RESID))).astype(
            np.float32)

    def dequantized(self) -> np.ndarray:
        """The (K, N) float32 weight int8 stands for (diag(1/s) s_w Wq, the outlier rows as they are), for tests."""
        inv = self.inv_smooth.copy()
        inv[self.rows] = 1.0  # (0 there: those rows are the float ones, set below)
        w = self.packed.plain().astype(np.float32) * self.scale * inv[:, None]
        w[self.rows] = self.side
        return w

    def __repr__(self) -> str:
        sm = ", smoothed" if self.smoothed else ""
        return f"QLinear({self.shape}, int8 {self.packed.impl}, {len(self.rows)} float rows{sm})"


# --------------------------------------------------------------------------- NumPy reference of the kernels
def quant_rows(x: np.ndarray, inv: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, K) float32 -> (xq uint8 (M, K), s_a float32 (M,), z int32 (M,)): per-row asymmetric quantization of
    x * inv (``inv`` (K,): a QLinear's inv_smooth; None for x itself)."""
    if inv is not None:
        x = (x * inv).astype(np.float32)
    lo = np.minimum(x.min(axis=1), 0).astype(np.float32)
    hi = np.maximum(x.max(axis=1), 0).astype(np.float32)
    tiny = (hi - lo > 0) & (hi - lo < np.float32(TINY_RANGE))  # (M,): 1 / s would overflow: scaled by 2^64 (exact)
    if tiny.any():
        x, lo, hi = x.copy(), lo.copy(), hi.copy()
        for a in (x, lo, hi):
            a[tiny] *= np.float32(2.0**64)
    s = (hi - lo) * np.float32(1.0 / 255.0)
    s = np.where(s == 0, np.float32(1.0), s).astype(np.float32)  # a row of zeros; a NaN row keeps its NaN scale
    inv = (np.float32(1.0) / s).astype(np.float32)
    with np.errstate(invalid="ignore"):  # a NaN row: its NaN scale carries it (the kernel's behaviour), not z or q
        z = np.floor(-lo * inv + np.float32(0.5)).astype(np.int32)
        t = np.clip(x * inv[:, None] + z[:, None].astype(np.float32), 0, 255)
        q = np.floor(t + np.float32(0.5)).astype(np.uint8)
    s[tiny] *= np.float32(2.0**-64)
    return q, s, z


def take_top(t: np.ndarray, top: int = TOP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, K) float32 -> (t with up to ``top`` channels per row set to 0: those of largest |value| above TOP_RATIO x
    the row's root mean square, largest first; their indices (M, top) int32, -1 for an empty slot; their values
    (M, top) float32, 0 for an empty slot). The first index on ties; a NaN is taken (kernels._quant_out)."""
    t = np.array(t, dtype=np.float32)
    M, K = t.shape
    ti, tv = np.full((M, top), -1, np.int32), np.zeros((M, top), np.float32)
    rows = np.arange(M)
    with np.errstate(invalid="ignore"):
        lim = np.sqrt(np.einsum("ij,ij->i", t, t) * np.float32(TOP_RATIO * TOP_RATIO / K)).astype(np.float32)
        for j in range(top):
            a = np.abs(t)
            k = np.argmax(a, axis=1)  # the first largest; the first NaN
            v = a[rows, k]
            take = ~(v <= lim) & (j == 0 or (ti[:, j - 1] >= 0))  # a NaN fails <=: taken
            ti[take, j], tv[take, j] = k[take], t[rows[take], k[take]]
            t[rows[take], k[take]] = 0.0
    return t, ti, tv


def quant_rows_q8(x: np.ndarray, inv: np.ndarray, orows: np.ndarray, q: np.ndarray, s: np.ndarray, z: np.ndarray,
                  ti: np.ndarray, tv: np.ndarray, xo: np.ndarray) -> np.ndarray:
    """NumPy version of kernels.quant_rows_q8_ (the same arguments): rows of x (M, K) times ``inv`` quantized into
    q, s, z after their top channels are taken out into ti, tv, and their float values at ``orows`` (the consumer's
    outlier rows) into xo."""
    xo[...] = x[:, orows]
    t, ti[...], tv[...] = take_top((x * inv).astype(np.float32), ti.shape[1])
    q[...], s[...], z[...] = quant_rows(t)
    return q


def top_products(ti: np.ndarray, tv: np.ndarray, xo: np.ndarray, kw: tuple) -> np.ndarray:
    """(M, N) float32: the top channels' values times their ~15-bit weight rows, and the outlier rows' float inputs
    times their float32 weight rows (``kw``: a QLinear's kw)."""
    sw, _, b1, br, f, g, side, _ = kw
    y = xo @ side if len(side) else np.zeros((len(ti), len(sw)), np.float32)
    for j in range(ti.shape[1]):
        at = f[np.maximum(ti[:, j], 0)][:, None] + g[None, :]  # (M, N) byte offsets of the rows (-1: none, tv 0)
        y += tv[:, j:j + 1] * (sw * (b1[at].astype(np.float32) + br[at].astype(np.float32) / np.float32(RESID)))
    return y.astype(np.float32)


def dq_bias_q8(acc: np.ndarray, xd: tuple, kw: tuple, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """NumPy version of kernels.dq_bias_q8_: out (M, N) <- s_a s_w (acc - z c) + b + top_products; ``xd`` = (s, z,
    ti, tv, xo) of the input rows, ``kw`` the QLinear's kw; ``acc`` int32, or float32 from hp_accumulate (s 1, z 0)."""
    s, z, ti, tv, xo = xd
    sw, cs = kw[0], kw[1]
    d = (acc - z[:, None].astype(acc.dtype) * cs[None, :]).astype(np.float32)  # int32 exact (float: z is 0)
    out[...] = d * (s[:, None] * sw[None, :]) + b + top_products(ti, tv, xo, kw)
    return out


def hp_accumulate(acc: np.ndarray, s: np.ndarray, z: np.ndarray, cs: np.ndarray, f: np.float32, out: np.ndarray,
                  add: bool) -> np.ndarray:
    """NumPy version of kernels.hp_accumulate_, one of a short batch's two products: out (M, N) <- (or +=)
    s f (acc - z cs), without s_w (the consumer applies it, with s 1 and z 0); f 1, or 1 / RESID for the residual
    weight's product."""
    y = (acc - z[:, None] * cs[None, :]).astype(np.float32) * (s[:, None] * np.float32(f))
    if add:
        out += y
    else:
        out[...] = y
    return out


def two_levels(ids) -> bool:
    """Does one sequence (its token ids, special tokens included) multiply by the ~15-bit weights: at most
    SHORT_TOKENS tokens, or at most SHORT_TOKENS distinct ones? A mean over a few tokens averages little of the
    rounding away, and neither does one over many copies of a few tokens, whose rows round alike ("_" x 254 was at
    min cosine 0.9976 to fp32 with the int8 weights, 0.9999 with these)."""
    return len(ids) <= SHORT_TOKENS or len(set(np.asarray(ids).tolist())) <= SHORT_TOKENS


def all_two_levels(real: np.ndarray, ids: np.ndarray | None) -> bool:
    """True when every sequence of a (B, T) batch (``real``: True at real tokens; ``ids`` its token ids, None: judged
    by length alone) is one ``two_levels`` takes: the batch multiplies by the ~15-bit weights (module docstring; the
    Encoder never batches such sequences with others, encoder.split_short_batches)."""
    if (real.sum(axis=1) <= SHORT_TOKENS).all():  # (B,) tokens a sequence
        return True
    return ids is not None and all(two_levels(row[keep]) for row, keep in zip(ids, real))


#: a layer's linear weight -> the kind of linear layer provenance names
KINDS = {"qkv_w": "qkv", "o_w": "attention_output", "up_w": "ffn_up", "down_w": "ffn_down"}


def smoothed_kinds(weights) -> list[str]:
    """The kinds of linear layer whose int8 input is smoothed (for provenance), e.g. ["ffn_up", "qkv"]."""
    return sorted({kind for lw in weights.layers for attr, kind in KINDS.items()
                   if getattr(getattr(lw, attr, None), "smoothed", False)})


def float_rows(weights) -> dict[str, int]:
    """How many outlier weight rows stay float32, per kind of linear layer, over a model's int8 layers (for
    provenance): {"attention_output": 1, "ffn_down": 16}; kinds with none are left out."""
    out: dict[str, int] = {}
    for lw in weights.layers:
        for attr, kind in KINDS.items():
            ql = getattr(lw, attr, None)
            n = len(getattr(ql, "rows", ()))
            if n:
                out[kind] = out.get(kind, 0) + n
    return out
