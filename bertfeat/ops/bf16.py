"""bf16 as NumPy holds it: ``uint16`` arrays of the bit patterns (NumPy has no bf16 dtype).

``to_bf16`` rounds float32 to the nearest bf16 (ties to even, as torch's ``.to(torch.bfloat16)``), ``from_bf16``
widens exactly. The GEMM layer (gemm.py), the weights loader and the int8 scheme use them.

A finite float32 above bf16's largest value (3.3895e38) rounds to infinity, as in torch. Weights are rounded with
``saturate=True`` instead: to the largest bf16 of their sign, 0.4 % off at most. A finite weight never becomes inf,
whose product with a zero input (a channel a LayerNorm or a ReLU zeroes) is NaN where fp32's is 0.
"""

from __future__ import annotations

import numpy as np


def to_bf16(x: np.ndarray, out: np.ndarray | None = None, saturate: bool = False) -> np.ndarray:
    """float32 array -> uint16 bf16 bit patterns, rounded to nearest, ties to even; NaN stays NaN.

    The NumPy path (weights at load, and activations when the numba kernels are off); the kernels in
    kernels.py round the same way. ``saturate``: a finite value beyond bf16's range gives the largest finite bf16
    of its sign, not infinity (weights; module docstring).
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
    if saturate:
        over = ((r & np.uint32(0x7FFF)) == np.uint32(0x7F80)) & ((u & np.uint32(0x7FFFFFFF)) < np.uint32(0x7F800000))
        r[over] -= np.uint32(1)  # 0x7F80 (inf) -> 0x7F7F (the largest finite bf16), the sign bit kept
    if out is None:
        return r.astype(np.uint16)
    np.copyto(out, r.reshape(out.shape), casting="unsafe")
    return out


def from_bf16(b: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
