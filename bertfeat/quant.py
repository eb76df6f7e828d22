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
others), and the rows of the first token ([CLS] / <s>) of every sequence, which carry the largest activation
outliers in trained encoders, are not quantized at all: their products come from a float GEMM of those rows
alone (bf16 where the CPU multiplies bf16 natively, else fp32) and replace the int8 result for them. Measured on
all-MiniLM-L6-v2 over real sentences in issue 26's simulation, this scheme kept every sentence above cosine 0.995
of its fp32 embedding with no calibration data (docs/precision.md has bertfeat's own measurements).

Outlier weight rows, decided from the weights alone: a few input rows k of a trained weight are far larger than
the rest (all-MiniLM-L6-v2's FFN down projections have rows 38-55x the median row's largest |value|), and each
one sets the scale of every column it tops, so the other 1,535 inputs of those columns get a coarse grid. Rows whose
largest |value| exceeds OUTLIER_ROW_RATIO x the median row's (at most 1/32 of the rows) are taken out of the int8
weight (zero there, so the scales and column sums ignore them) and multiplied in float32 instead, k axpys per row
inside the dequantization kernel (k is 0-7 here; a oneDNN GEMM with K = k ran at 8 GFLOP/s):
y = dequant(xq Wq) + b + x[:, rows] W[rows, :]. On
all-MiniLM-L6-v2 (2,000 real sentences, simulated) that moved the smallest cosine to fp32 from 0.9958 to 0.9975 and
the mean from 0.99948 to 0.99959, for 17 float rows in all 24 linear layers; a random-weight model has none.

This module holds the weight quantization and the NumPy reference of the activation kernels; kernels.py has the
fused numba versions (``quant_rows_``, ``dq_bias_``, ``add_layer_norm_q8_``), checked against these.
"""

from __future__ import annotations

import numpy as np

from . import onednn


#: the int8 scheme's version, in provenance, the features' fingerprint and the vector cache's key: features of two
#: schemes never mix in one output or cache ("1": bertfeat 0.2.0; "2": + the outlier weight rows below)
SCHEME = "2"

#: an input row of a weight whose largest |value| is above this many times the median row's stays float32
#: (module docstring); 6 picks the 38-55x rows of all-MiniLM-L6-v2 and no row of a random-weight model
OUTLIER_ROW_RATIO = 6.0


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
    """A (K, N) linear weight for int8: the packed int8 weight, its per-channel scales and column sums, the
    float weight the first token's rows are multiplied with (``keep``, packed for oneDNN in bf16 or fp32), and the
    outlier rows kept float32 (``rows`` (k,) and ``side``, their (k, N) float32 weight; k is often 0)."""

    def __init__(self, w: np.ndarray, keep_dtype: str = "fp32"):
        w = np.ascontiguousarray(w, dtype=np.float32)
        K, N = w.shape
        self.rows = outlier_rows(w)
        self.side = np.ascontiguousarray(w[self.rows])  # (k, N) float32, k possibly 0
        full = w
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
        self.nbytes = self.packed.nbytes + self.keep.nbytes + 8 * N + self.side.nbytes

    def dequantized(self) -> np.ndarray:
        """The (K, N) float32 weight int8 stands for (s_w Wq, the float rows as they are), for tests."""
        w = self.packed.plain().astype(np.float32) * self.scale
        w[self.rows] = self.side
        return w

    def __repr__(self) -> str:
        return f"QLinear({self.shape}, int8 {self.packed.impl}, keep {self.keep_dtype}, {len(self.rows)} float rows)"


# --------------------------------------------------------------------------- NumPy reference of the kernels
def quant_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, K) float32 -> (xq uint8 (M, K), s_a float32 (M,), z int32 (M,)): per-row asymmetric quantization."""
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
    d = acc - z[:, None] * ql.colsum[None, :]  # int32, exact
    y = d.astype(np.float32) * (s_a[:, None] * ql.scale[None, :])
    if bias is not None:
        y = y + bias
    if x is not None and len(ql.rows):
        y += x[:, ql.rows] @ ql.side
    return y


def first_rows(row0: int, m: int, T: int) -> np.ndarray:
    """Local indices, among rows row0 .. row0 + m - 1 of (B*T) token rows, of each sequence's first token."""
    return np.arange((-row0) % T, m, T)


def dq_bias(acc: np.ndarray, s_a: np.ndarray, z: np.ndarray, ql: QLinear, b: np.ndarray, yc: np.ndarray, first: int, T: int,
            x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """NumPy version of kernels.dq_bias_: out <- dequant(acc) + b + x[:, rows] W[rows], rows first, first + T, ...
    from yc (+ b)."""
    out[...] = dequant(acc, s_a, z, ql, b, x)
    if len(yc):
        out[first::T][: len(yc)] = yc + b
    return out


def float_rows(weights) -> dict[str, int]:
    """How many outlier weight rows stay float32, per kind of linear layer, over a model's int8 layers (for
    provenance): {"attention_output": 1, "ffn_down": 16}; kinds with none are left out."""
    names = {"qkv_w": "qkv", "o_w": "attention_output", "up_w": "ffn_up", "down_w": "ffn_down"}
    out: dict[str, int] = {}
    for lw in weights.layers:
        for attr, kind in names.items():
            ql = getattr(lw, attr, None)
            n = len(getattr(ql, "rows", ()))
            if n:
                out[kind] = out.get(kind, 0) + n
    return out
