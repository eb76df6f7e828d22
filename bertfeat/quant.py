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

This module holds the weight quantization and the NumPy reference of the activation kernels; kernels.py has the
fused numba versions (``quant_rows_``, ``dq_bias_``, ``add_layer_norm_q8_``), checked against these.
"""

from __future__ import annotations

import numpy as np

from . import onednn


class QLinear:
    """A (K, N) linear weight for int8: the packed int8 weight, its per-channel scales and column sums, and the
    float weight the first token's rows are multiplied with (``keep``, packed for oneDNN in bf16 or fp32)."""

    def __init__(self, w: np.ndarray, keep_dtype: str = "fp32"):
        w = np.ascontiguousarray(w, dtype=np.float32)
        K, N = w.shape
        amax = np.abs(w).max(axis=0)  # (N,)
        scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
        wq = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)  # (K, N)
        self.shape, self.dtype = (K, N), np.dtype(np.int8)
        self.scale = scale
        self.colsum = wq.sum(axis=0, dtype=np.int32)  # (N,)
        self.packed = onednn.pack(wq)
        if keep_dtype == "bf16":
            from .bf16 import to_bf16

            self.keep = onednn.pack(to_bf16(w))
        else:
            self.keep = onednn.pack(w)
        self.keep_dtype = keep_dtype
        self.size = K * N
        self.nbytes = self.packed.nbytes + self.keep.nbytes + 8 * N

    def dequantized(self) -> np.ndarray:
        """The (K, N) float32 weight int8 stands for (s_w Wq), for tests."""
        return self.packed.plain().astype(np.float32) * self.scale

    def __repr__(self) -> str:
        return f"QLinear({self.shape}, int8 {self.packed.impl}, keep {self.keep_dtype})"


# --------------------------------------------------------------------------- NumPy reference of the kernels
def quant_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, K) float32 -> (xq uint8 (M, K), s_a float32 (M,), z int32 (M,)): per-row asymmetric quantization."""
    lo = np.minimum(x.min(axis=1), 0).astype(np.float32)
    hi = np.maximum(x.max(axis=1), 0).astype(np.float32)
    s = (hi - lo) * np.float32(1.0 / 255.0)
    s = np.where(s > 0, s, np.float32(1.0)).astype(np.float32)
    inv = (np.float32(1.0) / s).astype(np.float32)
    z = np.floor(-lo * inv + np.float32(0.5)).astype(np.int32)
    t = np.clip(x * inv[:, None] + z[:, None].astype(np.float32), 0, 255)
    q = np.floor(t + np.float32(0.5)).astype(np.uint8)
    return q, s, z


def dequant(acc: np.ndarray, s_a: np.ndarray, z: np.ndarray, ql: QLinear, bias: np.ndarray | None = None) -> np.ndarray:
    """(M, N) int32 sums -> float32 s_a s_w (acc - z c) (+ bias)."""
    d = acc - z[:, None] * ql.colsum[None, :]  # int32, exact
    y = d.astype(np.float32) * (s_a[:, None] * ql.scale[None, :])
    return y if bias is None else y + bias


def first_rows(row0: int, m: int, T: int) -> np.ndarray:
    """Local indices, among rows row0 .. row0 + m - 1 of (B*T) token rows, of each sequence's first token."""
    return np.arange((-row0) % T, m, T)


def dq_bias(acc: np.ndarray, s_a: np.ndarray, z: np.ndarray, ql: QLinear, b: np.ndarray, yc: np.ndarray, first: int, T: int,
            out: np.ndarray) -> np.ndarray:
    """NumPy version of kernels.dq_bias_: out <- dequant(acc) + b, rows first, first + T, ... from yc (+ b)."""
    out[...] = dequant(acc, s_a, z, ql, b)
    if len(yc):
        out[first::T][: len(yc)] = yc + b
    return out
