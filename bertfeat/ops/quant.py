"""int8 linear layers (precision="int8"): weights per output channel, activations per token, no calibration.

Shapes: M token rows, K inputs, N outputs of a linear layer.

A linear layer y = x W (+ b) runs as one uint8 x int8 -> int32 GEMM (oneDNN, VNNI or AMX) and a dequantization:

    weights (at load):  s_w[n] = max_k |W[k, n]| / 127,   Wq = round(W / s_w) in [-127, 127] (int8),
                        c[n] = sum_k Wq[k, n] (int32)
    activations (per row m, by the kernel that writes x):
                        lo = min(x_m, 0), hi = max(x_m, 0), s_a[m] = (hi - lo) / 255, z[m] = round(-lo / s_a[m]),
                        xq = clip(round(x / s_a) + z, 0, 255) (uint8), so x ~ s_a (xq - z)
    the product:        acc = xq @ Wq (int32, exact), y[m, n] = s_a[m] s_w[n] (acc[m, n] - z[m] c[n]) (+ b[n])

``acc - z c`` is computed in int32, exactly (|z c| <= 255 * 127 * K < 2^31 for K < 66,000), before the float scale.

Per-token asymmetric activations keep each row's own range (a row with one large value does not flatten the
others). Some token rows are not quantized at all: their products come from a float GEMM of those rows alone
(bf16 where the CPU multiplies bf16 natively, else fp32, the weight ``keep``) and replace the int8 result for them
(float_token_rows):
- the first and the last token of every sequence ([CLS] / <s> and [SEP] / </s>), which carry the largest
  activation outliers in trained encoders;
- every token of a sequence of at most SHORT_TOKENS tokens (special tokens included): a mean over a few tokens
  averages little of the rounding away, and the punctuation weighs a lot in it. On all-MiniLM-L6-v2 the sentences
  farthest from fp32 under scheme "2" were all 4-7 tokens long ("too bad .": cosine 0.9975, "wow .": 0.9979).
The cost is one or two rows per sequence plus the tokens of short sequences: 22 % of the token rows of
benchmarks/corpus.py (SST-2, TREC and STSb sentences, 17 tokens on average), 13 % of the held-out SST-2 / TREC
sentences (5.8 % / 4.4 % with the first token alone). The int8 GEMM skips those rows (model.q8_products), and a batch of short
sequences only runs the float layers as bf16 / fp32 would (all_float). A row is float or int8 by its own sequence,
never by its batch, and the Encoder never batches short sequences with long ones (encoder.split_short_batches: the
float-row products of a mixed batch round differently from the float layers), so features are the same bit for
bit in any batch.

Outlier weight rows, decided from the weights alone: a few input rows k of a trained weight are far larger than
the rest (all-MiniLM-L6-v2's FFN down projections have rows 38-55x the median row's largest |value|), and each
one sets the scale of every column it tops, so the other 1,535 inputs of those columns get a coarse grid. Rows whose
largest |value| exceeds OUTLIER_ROW_RATIO x the median row's (at most 1/32 of the rows) are taken out of the int8
weight (zero there, so the scales and column sums ignore them) and multiplied in float32 instead, k axpys per row
inside the dequantization kernel (k is 0-7 here; a oneDNN GEMM with K = k ran at 8 GFLOP/s):
y = dequant(xq Wq) + b + x[:, rows] W[rows, :].

Smoothing the LayerNorm outputs, from the weights alone: the inputs of the QKV and FFN up projections are
LayerNorm outputs n * g + beta, whose channels with a large |g| + |beta| widen every row's range. Per input channel
k, s[k] = sqrt(|g[k]| + |beta[k]|) / sqrt(max_n |W[k, n]|) (geometric mean 1; SmoothQuant's alpha = 0.5 with the
LayerNorm's parameters in place of calibrated activation maxima); the int8 weight is diag(s) W and the kernel that
writes the LayerNorm output quantizes x / s (``inv_smooth``), so x W is unchanged and the range is shared between
activations and weights. The residual stream and the float rows keep x and W as they are. Random-weight models (g
= 1, beta = 0) get a plain weight-side scaling.

Measured on all-MiniLM-L6-v2, smallest cosine to fp32 of its own embedding over real sentences (the 4,000 of
benchmarks/corpus.py / 3,200 held-out SST-2 dev + test and TREC test sentences it never uses), scheme "3" as built:
0.99927 / 0.99909 (mean 0.999767 / 0.999708); scheme "2": 0.99728 on the 4,000. A NumPy simulation chose the parts
(scheme "2" 0.99745 / 0.99821; + every row of sequences of <= 8 tokens 0.99903 / 0.99875; + smoothing 0.99923 /
0.99915; <= 10 tokens 0.99923 / 0.99925; the last token's rows added in the real code: 0.99903 -> 0.99927 /
0.99901 -> 0.99909). Tried and not kept: smoothing the attention output and FFN down inputs too (no gain, from
calibrated or weight-derived maxima), MSE-chosen weight scales (no change at 8 bits), each layer's linear layers
in float in turn (no single layer dominates).

This module holds the weight quantization and the NumPy reference of the activation kernels; kernels.py has the
fused numba versions (``quant_rows_``, ``dq_bias_``, ``add_layer_norm_q8_``), checked against these.
"""

from __future__ import annotations

import numpy as np

from . import onednn


#: the int8 scheme's version, in provenance, the features' fingerprint and the vector cache's key: features of two
#: schemes never mix in one output or cache ("1": bertfeat 0.2.0; "2": + the outlier weight rows below; "3": + the
#: short sequences' rows in float and the LayerNorm-output smoothing; "4": the same features whatever the batch, bit
#: for bit: attention per sequence length, short sequences never batched with long ones; before, a row could move
#: by up to 3e-3 of its norm with its batch)
SCHEME = "4"

#: an input row of a weight whose largest |value| is above this many times the median row's stays float32
#: (module docstring); 6 picks the 38-55x rows of all-MiniLM-L6-v2 and no row of a random-weight model
OUTLIER_ROW_RATIO = 6.0

#: every token row of a sequence of at most this many tokens (special tokens included) is multiplied in float
SHORT_TOKENS = 10

#: SmoothQuant's migration strength: s = a_max^alpha / w_max^(1 - alpha), a_max from the LayerNorm's parameters
SMOOTH_ALPHA = 0.5


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


class QLinear:
    """A (K, N) linear weight for int8: the packed int8 weight (of diag(s) W when ``smooth`` s is given), its
    per-channel scales and column sums, ``inv_smooth`` (K,) = 1 / s (ones without smoothing: the kernel that writes
    the input quantizes x * inv_smooth), the float weight the float token rows are multiplied with (``keep``, packed
    for oneDNN in bf16 or fp32), and the outlier rows kept float32 (``rows`` (k,) and ``side``, their (k, N)
    float32 weight; k is often 0)."""

    def __init__(self, w: np.ndarray, keep_dtype: str = "fp32", smooth: np.ndarray | None = None):
        w = np.ascontiguousarray(w, dtype=np.float32)
        K, N = w.shape
        full = w
        self.smoothed = smooth is not None
        if smooth is not None:
            s = np.asarray(smooth, np.float32).reshape(K)
            w = (w * s[:, None]).astype(np.float32)  # (K, N) diag(s) W
            self.inv_smooth = (np.float32(1.0) / s).astype(np.float32)
        else:
            self.inv_smooth = np.ones(K, np.float32)
        self.rows = outlier_rows(w)
        self.side = np.ascontiguousarray(full[self.rows])  # (k, N) float32 of W itself, k possibly 0: times x
        if len(self.rows):
            w = w.copy()
            w[self.rows] = 0.0  # the int8 weight, its scales and column sums without the float rows
        amax = np.abs(w).max(axis=0)  # (N,)
        scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
        wq = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)  # (K, N)
        self.shape, self.dtype = (K, N), np.dtype(np.int8)
        self.scale = scale
        self.colsum = wq.sum(axis=0, dtype=np.int32)  # (N,)
        self.packed = onednn.pack(wq)
        if keep_dtype == "bf16":
            from .bf16 import to_bf16

            self.keep = onednn.pack(to_bf16(full))
        else:
            self.keep = onednn.pack(full)
        self.keep_dtype = keep_dtype
        self.size = K * N
        self.nbytes = self.packed.nbytes + self.keep.nbytes + 8 * N + 4 * K + self.side.nbytes

    def dequantized(self) -> np.ndarray:
        """The (K, N) float32 weight int8 stands for (diag(1/s) s_w Wq, the float rows as they are), for tests."""
        w = self.packed.plain().astype(np.float32) * self.scale * self.inv_smooth[:, None]
        w[self.rows] = self.side
        return w

    def __repr__(self) -> str:
        sm = ", smoothed" if self.smoothed else ""
        return (f"QLinear({self.shape}, int8 {self.packed.impl}, keep {self.keep_dtype}, {len(self.rows)} float "
                f"rows{sm})")


# --------------------------------------------------------------------------- NumPy reference of the kernels
def quant_rows(x: np.ndarray, inv: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, K) float32 -> (xq uint8 (M, K), s_a float32 (M,), z int32 (M,)): per-row asymmetric quantization of
    x * inv (``inv`` (K,): a QLinear's inv_smooth; None for x itself)."""
    if inv is not None:
        x = (x * inv).astype(np.float32)
    lo = np.minimum(x.min(axis=1), 0).astype(np.float32)
    hi = np.maximum(x.max(axis=1), 0).astype(np.float32)
    s = (hi - lo) * np.float32(1.0 / 255.0)
    s = np.where(s == 0, np.float32(1.0), s).astype(np.float32)  # a row of zeros; a NaN row keeps its NaN scale
    inv = (np.float32(1.0) / s).astype(np.float32)
    with np.errstate(invalid="ignore"):  # a NaN row: its NaN scale carries it (the kernel's behaviour), not z or q
        z = np.floor(-lo * inv + np.float32(0.5)).astype(np.int32)
        t = np.clip(x * inv[:, None] + z[:, None].astype(np.float32), 0, 255)
        q = np.floor(t + np.float32(0.5)).astype(np.uint8)
    return q, s, z


def dequant(acc: np.ndarray, s_a: np.ndarray, z: np.ndarray, ql: QLinear, bias: np.ndarray | None = None,
            x: np.ndarray | None = None) -> np.ndarray:
    """(M, N) int32 sums -> float32 s_a s_w (acc - z c) (+ bias) (+ the float rows' product x[:, rows] W[rows] when
    the float inputs ``x`` (M, K) are given)."""
    return _dequant(acc, s_a, z, ql.scale, ql.colsum, bias, x, ql.rows, ql.side)


def _dequant(acc, s_a, z, sw, cs, bias, x, rows, wr) -> np.ndarray:
    d = acc - z[:, None] * cs[None, :]  # int32, exact
    y = d.astype(np.float32) * (s_a[:, None] * sw[None, :])
    if bias is not None:
        y = y + bias
    if x is not None and len(rows):
        y += x[:, rows] @ wr
    return y


def float_token_rows(real: np.ndarray) -> np.ndarray:
    """(B, T) bool, True at real tokens (each sequence's first token at position 0, padding at the end) -> the
    sorted int64 indices, among the B*T token rows, multiplied in float: each sequence's first and last real token,
    and every real token of a sequence of at most SHORT_TOKENS tokens (module docstring)."""
    B, T = real.shape
    n = real.sum(axis=1)  # (B,) real tokens per sequence
    sel = np.zeros((B, T), dtype=bool)
    sel[:, 0] = True
    sel[np.arange(B), np.maximum(n, 1) - 1] = True  # [SEP] / </s>
    short = n <= SHORT_TOKENS
    sel[short] |= real[short]
    return np.flatnonzero(sel.reshape(-1)).astype(np.int64)


def all_float(real: np.ndarray) -> bool:
    """True when every sequence of a (B, T) batch is short, so every real row is a float token row: the batch runs
    the float layers (the keep weights) directly, without the int8 machinery (model.run_layers)."""
    return bool((real.sum(axis=1) <= SHORT_TOKENS).all())


def local_rows(frows: np.ndarray, row0: int, m: int) -> np.ndarray:
    """The float token rows among rows row0 .. row0 + m - 1, as indices into that block (sorted int64)."""
    lo, hi = np.searchsorted(frows, (row0, row0 + m))
    return frows[lo:hi] - row0


def dq_bias(acc: np.ndarray, s_a: np.ndarray, z: np.ndarray, sw: np.ndarray, cs: np.ndarray, b: np.ndarray,
            yc: np.ndarray, src: np.ndarray, x: np.ndarray, rows: np.ndarray, wr: np.ndarray,
            out: np.ndarray) -> np.ndarray:
    """NumPy version of kernels.dq_bias_ (its arguments: a QLinear's scale, colsum, rows and side as sw, cs, rows,
    wr): out <- dequant(acc) + b + x[:, rows] wr for the int8 rows (src < 0, their sums in acc[-1 - src]),
    yc[src] + b for the float token rows (src >= 0)."""
    i8, fl = np.flatnonzero(src < 0), np.flatnonzero(src >= 0)
    out[i8] = _dequant(acc[-1 - src[i8]], s_a[i8], z[i8], sw, cs, b, x[i8], rows, wr)
    out[fl] = yc[src[fl]] + b
    return out


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
