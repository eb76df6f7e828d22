"""The BERT forward pass in NumPy: float32, or bf16 / int8 linear layers (precision="bf16" / "int8").

Shapes:  B batch, T tokens, H hidden, nh heads, hs head size (H = nh * hs),
         F intermediate, V vocab, N = B * T token rows.

Every linear layer is a 2-D GEMM on (N, H) rows with a weight stored (in, out) at load
time (see weights.py), Q/K/V fused into one (H, 3H) product.  BERT is post-LayerNorm:

    e = LN(word + position + token_type)
    h = LN(x + Attn(x))
    y = LN(h + FFN(h)),     FFN(h) = act(h W_up + b_up) W_down + b_down
    pooled = tanh(h_CLS W_p + b_p)

bf16 (weights loaded with precision="bf16", see weights.py and gemm.py): each of the four linear
layers of a layer is a bf16 x bf16 -> float32 GEMM. Its input is a bf16 copy (uint16 bit patterns,
names ending in 16) of the float32 activation, written by the kernel that makes that activation
(kernels.py): the embeddings' and each layer's output LayerNorm (x16), the attention LayerNorm
(h16), the context's transpose to token rows, the FFN's bias + GELU (only the bf16 copy is read).
Everything else is float32 as in the fp32 path: the residual stream, LayerNorm, the attention
scores, softmax and context (fp32 batched products), GELU, pooling and the pooler.

int8 (encoder_layer_q8, quant.py): each linear layer is a uint8 x int8 -> int32 GEMM of per-token quantized
activations (written by the kernel that makes them, with their scales and zero points) and per-channel
quantized weights, dequantized into the kernel that follows; each sequence's first-token rows and every row of a
short sequence come from a float GEMM instead, a weight's few outlier input rows are multiplied in float32 and added
in the dequantization, and the LayerNorm outputs are quantized divided by per-channel smoothing factors that the
QKV and FFN up weights carry multiplied in.
The same float32 steps as above around it.

A pooling that reads one token per sequence of the last layer (cls, lasttoken, the pooler) gets that layer at that
token alone (layer_at, run_layers' ``at``): the fused Q/K/V product on every token (the keys and values), everything
after it on B rows instead of N, 3/4 of the last layer's multiply-adds not done (a 6-layer model ~12 % of its work, a
12-layer ~6 %).

Over 500 lines on purpose: each step's fp32, bf16 and int8 forms sit side by side, so the forward pass reads top to
bottom in one file as the data flows (kernels.py holds the fused versions of these functions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..ops import gemm, kernels, quant
from .weights import BertWeights, LayerWeights

MASK_NEG = np.float32(np.finfo(np.float32).min)  # additive mask for padded keys, as transformers uses
_SQRT_HALF = np.float32(0.7071067811865476)


# --------------------------------------------------------------------------- activations
# erf(x) = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)): Maclaurin coefficients, used for |x| < _ERF_SPLIT.
_ERF_SERIES = tuple(np.float32((-1) ** n * 2.0 / np.sqrt(np.pi) / (np.prod(np.arange(1.0, n + 1)) * (2 * n + 1)))
                    for n in range(10))
# erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + x/2), x >= 0: Numerical Recipes' Chebyshev fit (fractional error < 1.2e-7).
_ERFC_CHEB = tuple(np.float32(c) for c in (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                                           0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277))
_ERF_SPLIT = np.float32(0.8)


def erf(x: np.ndarray) -> np.ndarray:
    """erf for float32 arrays, |error| < 2e-7 (float32 eps is 1.2e-7), checked in tests/test_model.py.

    |x| < 0.8: the Maclaurin series (10 terms), free of the cancellation that ``1 - erfc`` suffers near 0
    (the single Abramowitz & Stegun 7.1.26 formula used before was off by 6e-7 there);
    |x| >= 0.8: 1 - erfc(|x|) with Numerical Recipes' erfc; |x| >= 4 gives +-1, as erf does in float32.
    """
    x = np.asarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x), np.float32(4.0))  # keeps a*a finite; NaN stays NaN
    s = np.minimum(a, _ERF_SPLIT)
    s2 = s * s
    p = _ERF_SERIES[-1]
    for c in _ERF_SERIES[-2::-1]:
        p = p * s2 + c
    small = s * p
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * a)
    q = _ERFC_CHEB[-1]
    for c in _ERFC_CHEB[-2::-1]:
        q = q * t + c
    large = np.float32(1.0) - t * np.exp(q - a * a)
    return np.copysign(np.where(a < _ERF_SPLIT, small, large), x)


def gelu_erf_(u: np.ndarray) -> np.ndarray:
    """In place: u -> 0.5 u (1 + erf(u / sqrt 2)), the exact GELU of hidden_act 'gelu'; returns u.

    erf through one tanh of an odd polynomial (kernels.ERF_TANH_P): about 20 in-place passes, a third of what
    an erfc/exp formulation costs, which matters because this runs on every (N, F) FFN activation.
    """
    z = np.multiply(u, _SQRT_HALF)
    np.clip(z, np.float32(-4.0), np.float32(4.0), out=z)
    s = np.multiply(z, z)  # z^2
    p = np.multiply(s, kernels.ERF_TANH_P[-1])
    for c in kernels.ERF_TANH_P[-2:0:-1]:
        p += c
        p *= s
    p += kernels.ERF_TANH_P[0]
    p *= z
    np.tanh(p, out=p)  # erf(z)
    np.copyto(p, np.float32(-1.0), where=z <= np.float32(-4.0))  # erf(-4) = -1 in float32; tanh can be 1 ulp off
    p *= np.float32(0.5)
    p += np.float32(0.5)
    u *= p
    return u


def gelu_tanh_(u: np.ndarray) -> np.ndarray:
    """In place: tanh GELU (hidden_act 'gelu_new' / 'gelu_pytorch_tanh' / 'gelu_fast'); returns u."""
    t = np.multiply(u, u)
    t *= np.float32(0.044715)
    t += np.float32(1.0)
    t *= u
    t *= np.float32(0.7978845608028654)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= np.float32(0.5)
    u *= t
    return u


def relu_(u: np.ndarray) -> np.ndarray:
    return np.maximum(u, np.float32(0.0), out=u)


ACTIVATIONS_INPLACE = {"gelu": gelu_erf_, "gelu_new": gelu_tanh_, "gelu_pytorch_tanh": gelu_tanh_,
                       "gelu_fast": gelu_tanh_, "relu": relu_}


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))."""
    return gelu_erf_(np.array(x, dtype=np.float32))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """tanh GELU."""
    return gelu_tanh_(np.array(x, dtype=np.float32))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


ACTIVATIONS = {"gelu": gelu_erf, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "gelu_fast": gelu_tanh, "relu": relu}


# --------------------------------------------------------------------------- scratch memory
class Workspace:
    """Scratch arrays of the forward pass, reused from batch to batch (one per thread).

    A fresh (N, 3H) or (m, F) array per layer costs more than it seems: the C allocator hands
    large blocks back to the OS when they are freed and gets them again as new zeroed pages, so
    a MiniLM run over the 4,000-sentence benchmark corpus took 1.2 million page faults and spent
    about 5 % of its time in them. A Workspace keeps one buffer per name, grown to the largest
    batch seen (a working set bounded by the token budget, not by the corpus).
    """

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
        """A ``dtype`` (float32) array of ``shape`` backed by the buffer ``name`` (its old contents are garbage)."""
        n = math.prod(shape)
        buf = self._bufs.get(name)
        if buf is None or buf.size < n or buf.dtype != dtype:
            buf = self._bufs[name] = np.empty(n + n // 4, dtype=dtype)  # room for slightly larger batches
        return buf[:n].reshape(shape)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._bufs.values())


# --------------------------------------------------------------------------- building blocks
def layer_norm_(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """In place LayerNorm over the last axis of (N, H) rows (biased variance, as torch); returns x."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)  # (N,) sum of squares, no temporary
    var *= np.float32(1.0 / x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    x *= var[:, None]
    x *= g
    x += b
    return x


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis (a copy)."""
    shape = x.shape
    return layer_norm_(np.array(x, dtype=np.float32).reshape(-1, shape[-1]), g, b, eps).reshape(shape)


def softmax_(x: np.ndarray) -> np.ndarray:
    """In place softmax over the last axis; returns x."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x *= np.reciprocal(x.sum(axis=-1, keepdims=True))
    return x


def masked_softmax_(scores: np.ndarray, scale: np.float32, mask_add: np.ndarray) -> np.ndarray:
    """In place scores (B, nh, T, T) <- softmax(scores * scale + mask_add) over the keys; returns scores."""
    fused = kernels.get("masked_softmax_")
    if fused is not None:
        return fused(scores, scale, mask_add)
    scores *= scale
    scores += mask_add
    return softmax_(scores)


def softmax(x: np.ndarray) -> np.ndarray:
    return softmax_(np.array(x, dtype=np.float32))


def bias_act_(u: np.ndarray, b: np.ndarray, hidden_act: str, out16: np.ndarray | None = None) -> np.ndarray:
    """In place u (m, F) <- act(u + b); one fused pass when kernels.py has this activation.

    With ``out16`` (m, F) uint16: writes bf16(act(u + b)) there and returns it (u is then scratch).
    """
    if out16 is not None:
        fused = kernels.get(hidden_act + "_bf16")
        if fused is not None:
            return fused(u, b, out16)
        return gemm.to_bf16(bias_act_(u, b, hidden_act), out=out16)
    fused = kernels.get(hidden_act)
    if fused is not None:
        return fused(u, b)
    u += b
    return ACTIVATIONS_INPLACE[hidden_act](u)


def add_layer_norm_(y: np.ndarray, b: np.ndarray, r: np.ndarray, g: np.ndarray, beta: np.ndarray,
                    eps: float, out16: np.ndarray | None = None) -> np.ndarray:
    """In place y (N, H) <- LN(y + b + r): a layer's output bias, its residual and the post-LN; returns y.

    With ``out16`` (N, H) uint16, also writes bf16(y) there (the next bf16 GEMM's input).
    """
    if out16 is not None:
        fused = kernels.get("add_layer_norm_bf16_")
        if fused is not None:
            return fused(y, b, r, g, beta, eps, out16)
        add_layer_norm_(y, b, r, g, beta, eps)
        gemm.to_bf16(y, out=out16)
        return y
    fused = kernels.get("add_layer_norm_")
    if fused is not None:
        return fused(y, b, r, g, beta, eps)
    y += b
    y += r
    return layer_norm_(y, g, beta, eps)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(N, in) @ (in, out) + b as one 2-D GEMM (gemm.matmul: bf16 when w is); the bias added by oneDNN as it
    writes the product where it can (gemm.fuses), else in place after it."""
    if gemm.fuses(w):
        return gemm.matmul(x, w, out=out, bias=b)
    y = gemm.matmul(x, w, out=out)
    y += b
    return y


def linear_act(x: np.ndarray, w, b: np.ndarray, hidden_act: str, out: np.ndarray,
               out16: np.ndarray | None = None) -> np.ndarray:
    """act(x @ w + b) for (m, in) rows into ``out`` (m, F) float32; with ``out16`` (m, F) uint16 the bf16
    rounding of it is written there and returned (``out`` is then scratch). One oneDNN call (bias and
    activation as post-ops, bf16 written directly) where it can (gemm.fuses), else the GEMM and a fused kernel."""
    if gemm.fuses(w, hidden_act):
        return gemm.matmul(x, w, out=out if out16 is None else out16, bias=b, act=hidden_act)
    return bias_act_(gemm.matmul(x, w, out=out), b, hidden_act, out16=out16)


def to_bf16_(x: np.ndarray, out16: np.ndarray) -> np.ndarray:
    """out16 (N, H) uint16 <- bf16(x (N, H)); fused kernel when available. ``x`` may be a view of every T-th row."""
    fused = kernels.get("to_bf16_")
    if fused is not None:
        return fused(x, out16)
    return gemm.to_bf16(x, out=out16)


def ctx_rows_bf16_(ctx: np.ndarray, out16: np.ndarray) -> np.ndarray:
    """out16 (B, T, nh, hs) uint16 <- bf16 of ctx (B, nh, T, hs) transposed to token rows."""
    fused = kernels.get("ctx_rows_bf16_")
    if fused is not None:
        return fused(ctx, out16)
    return gemm.to_bf16(ctx.transpose(0, 2, 1, 3), out=out16)


def embed(w: BertWeights, input_ids: np.ndarray, token_type_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(B, T) ids -> (B*T, H) LayerNorm(word + position + token type), into ``out`` (N, H) if given.

    DistilBERT has no token types (LN(word + position)); ELECTRA's tables are E = embedding_size wide, and
    when E != H its embeddings_project (a float32 linear layer, as the pooler) maps the (N, E) rows to (N, H)."""
    B, T = input_ids.shape
    E = w.word.shape[1]
    proj = w.emb_proj_w is not None
    x = np.take(w.word, input_ids.reshape(-1), axis=0, out=None if proj else out).reshape(B, T, E)  # (B, T, E)
    off = w.config.position_offset  # 0 for BERT; padding_idx + 1 for RoBERTa (real tokens only: pads are masked)
    pos = w.config.position_ids(input_ids)  # None unless a real token is the padding id (RoBERTa, XLM-R, CamemBERT)
    x += w.position[off:off + T][None, :, :] if pos is None else w.position[pos]
    if w.token_type is not None:
        x += w.token_type[token_type_ids]
    x = layer_norm_(x.reshape(B * T, E), w.emb_ln_g, w.emb_ln_b, w.config.layer_norm_eps)  # (N, E)
    return linear(x, w.emb_proj_w, w.emb_proj_b, out=out) if proj else x  # (N, H)


def attention(x: np.ndarray, lw: LayerWeights, mask_add: np.ndarray, B: int, T: int, nh: int,
              want_probs: bool = False, *, ws: Workspace, x16: np.ndarray | None = None,
              bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Multi-head self-attention on (N, H) rows; mask_add (B, 1, 1, T) is 0 for tokens, MASK_NEG for padding.

    Returns the output projection *without* its bias lw.o_b (encoder_layer adds it with the residual),
    in the workspace buffer "h". bf16 weights: ``x16`` is x in bf16, the Q/K/V GEMM's input.
    """
    N, H = x.shape
    hs = H // nh
    qkv = linear(x if x16 is None else x16, lw.qkv_w, lw.qkv_b, out=ws.take("qkv", (N, 3 * H)))  # (N, 3H)
    ctx, probs = attend(qkv, mask_add, B, T, nh, want_probs, ws, bias)  # (B, nh, T, hs)
    if x16 is not None:
        rows16 = ctx_rows_bf16_(ctx, ws.take("ctx_rows16", (B, T, nh, hs), np.uint16))  # (B, T, nh, hs) = (N, H) rows
        return gemm.matmul(rows16.reshape(N, H), lw.o_w, out=ws.take("h", (N, H))), probs
    rows = ws.take("ctx_rows", (B, T, nh, hs))
    np.copyto(rows, ctx.transpose(0, 2, 1, 3))  # (B, T, nh, hs) = (N, H) rows
    return gemm.matmul(rows.reshape(N, H), lw.o_w, out=ws.take("h", (N, H))), probs


def ffn(h: np.ndarray, lw: LayerWeights, hidden_act: str, block: int, *, ws: Workspace,
        h16: np.ndarray | None = None) -> np.ndarray:
    """act(h W_up + b_up) W_down on (N, H) rows, ``block`` rows at a time; *without* the bias b_down
    (encoder_layer adds it with the residual). The result is in the workspace buffer "y".
    bf16 weights: ``h16`` is h in bf16; the activation is written in bf16 for the down GEMM.

    Blocking keeps the (block, F) intermediate in cache, so the element-wise activation runs at
    cache speed rather than memory speed; each row's arithmetic is the same whatever the block.
    """
    N, H = h.shape
    F = lw.up_w.shape[1]
    out = ws.take("y", (N, H))
    buf = ws.take("ffn_act", (min(block, N), F))
    if h16 is not None:
        buf16 = ws.take("ffn_act16", (min(block, N), F), np.uint16)
        for s in range(0, N, block):
            u = buf[: min(block, N - s)]
            u16 = linear_act(h16[s:s + block], lw.up_w, lw.up_b, hidden_act, u, out16=buf16[: u.shape[0]])  # (m, F) bf16
            gemm.matmul(u16, lw.down_w, out=out[s:s + block])  # (m, H)
        return out
    for s in range(0, N, block):
        hb = h[s:s + block]
        u = linear_act(hb, lw.up_w, lw.up_b, hidden_act, buf[: hb.shape[0]])  # (m, F)
        gemm.matmul(u, lw.down_w, out=out[s:s + block])  # (m, H)
    return out


def ffn_block_rows(F: int, hidden_act: str) -> int:
    """Rows per FFN block of width F, for this activation.

    NumPy activations (about 20 passes over the block): about 2 MiB of (rows, F) activations, so
    the passes run in cache (341 rows for F=1536; 42 rows cost 9 ms more per MiniLM layer at 2048
    tokens than 256 rows, as the GEMMs lose efficiency). The fused kernel makes one pass, so larger
    blocks win: the GEMMs run at full speed (bert-base, 2048 tokens, one core: 110.9 ms per FFN in
    blocks of 170 rows, 92.5 ms in blocks of 1,365), up to 16 MiB of activations.
    """
    if kernels.get(hidden_act) is not None:  # fused (bias_act_ takes the same kernel)
        return int(max(512, min(2048, (1 << 22) // F)))
    return int(max(64, min(512, (1 << 19) // F)))


def encoder_layer(x: np.ndarray, lw: LayerWeights, mask_add: np.ndarray, B: int, T: int, nh: int,
                  hidden_act: str, eps: float, want_probs: bool = False, *,
                  ws: Workspace, x16: np.ndarray | None = None,
                  bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """One post-LN transformer layer on (N, H) rows: h = LN(x + Attn(x)), y = LN(h + FFN(h)).
    ``bias`` (nh, T, T): an additive attention-score bias (see attend).

    The result is in the workspace buffer "y"; x may be that buffer too (it is read, as the
    residual, before the FFN writes there). bf16 weights: ``x16`` (N, H) uint16 holds x in bf16
    and is overwritten with y in bf16 (the next layer's input).
    """
    a, probs = attention(x, lw, mask_add, B, T, nh, want_probs, ws=ws, x16=x16, bias=bias)
    h16 = None if x16 is None else ws.take("h16", x.shape, np.uint16)
    h = add_layer_norm_(a, lw.o_b, x, lw.ln1_g, lw.ln1_b, eps, out16=h16)  # x is dead from here on
    f = ffn(h, lw, hidden_act, ffn_block_rows(lw.up_w.shape[1], hidden_act), ws=ws, h16=h16)
    return add_layer_norm_(f, lw.down_b, h, lw.ln2_g, lw.ln2_b, eps, out16=x16), probs


def layer_at(qkv: np.ndarray, x: np.ndarray, lw: LayerWeights, mask_add: np.ndarray, B: int, T: int, nh: int,
             hidden_act: str, eps: float, at: np.ndarray, *, ws: Workspace,
             bias: np.ndarray | None = None) -> np.ndarray:
    """The rest of a post-LN layer at one token per sequence, ``at`` (B,) its position, from the fused Q/K/V rows
    ``qkv`` (N, 3H) of every token (the keys and values) and the layer input ``x`` (N, H) (the residual): -> (B, H)
    in the workspace buffer "y". The attention of one query per sequence, its output projection, both LayerNorms and
    the FFN run on B rows instead of N: for a pooling that reads one token of the last layer (cls, lasttoken, the
    pooler) that is 3/4 of the last layer's multiply-adds not done. Each row's arithmetic is encoder_layer's for that
    token (``lw`` float32 or bf16).
    """
    N, H = x.shape
    hs = H // nh
    rows = np.arange(B)
    heads = qkv.reshape(B, T, 3, nh, hs)
    q = heads[rows, at, 0][:, :, None, :]  # (B, nh, 1, hs)
    scores = own_length_scores(q, heads[:, :, 1].transpose(0, 2, 1, 3), mask_add, False,
                               np.empty((B, nh, 1, T), np.float32))  # (B, nh, 1, T)
    scale = np.float32(1.0 / np.sqrt(hs))
    if bias is not None:  # (nh, T, T): the rows of the chosen queries
        scores *= scale
        scores += bias[:, at, :].transpose(1, 0, 2)[:, :, None, :]  # (B, nh, 1, T)
        scale = np.float32(1.0)
    probs = masked_softmax_(scores, scale, mask_add)
    # the context of one query, each sequence's own keys only (the (1, T) x (T, hs) product rounds by T, as the scores)
    ctx = own_length_context(probs, heads[:, :, 2].transpose(0, 2, 1, 3), mask_add, False,
                             np.empty((B, nh, 1, hs), np.float32)).reshape(B, H)  # (B, nh, 1, hs) = (B, H) rows
    bf16 = lw.o_w.dtype == np.uint16
    if bf16:
        ctx = to_bf16_(ctx, ws.take("ctx_rows16", (B, H), np.uint16))
    a = gemm.matmul(ctx, lw.o_w, out=ws.take("h", (B, H)))
    h16 = ws.take("h16", (B, H), np.uint16) if bf16 else None
    h = add_layer_norm_(a, lw.o_b, x[rows * T + at], lw.ln1_g, lw.ln1_b, eps, out16=h16)  # residual: x at those tokens
    f = ffn(h, lw, hidden_act, ffn_block_rows(lw.up_w.shape[1], hidden_act), ws=ws, h16=h16)
    return add_layer_norm_(f, lw.down_b, h, lw.ln2_g, lw.ln2_b, eps)


# --------------------------------------------------------------------------- int8 layers (precision="int8", quant.py)
_ZEROS: dict[int, np.ndarray] = {}


def zeros(n: int) -> np.ndarray:
    """A shared read-only float32 zero vector of length n (a missing bias)."""
    z = _ZEROS.get(n)
    if z is None:
        z = _ZEROS[n] = np.zeros(n, dtype=np.float32)
    return z


def quantize_(x: np.ndarray, ws: Workspace, name: str, inv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, K) float32 rows -> (uint8 rows of x * inv, scales (M,), zero points (M,)) in workspace buffers ``name``;
    ``inv`` (K,): the consuming QLinear's inv_smooth."""
    M, K = x.shape
    q, sa, za = ws.take(name + "_q", (M, K), np.uint8), ws.take(name + "_s", (M,)), ws.take(name + "_z", (M,), np.int32)
    fused = kernels.get("quant_rows_")
    if fused is not None:
        fused(x, inv, q, sa, za)
    else:
        q[...], sa[...], za[...] = quant.quant_rows(x, inv)
    return q, sa, za


def q8_products(xq: tuple, x: np.ndarray, ql: quant.QLinear, frows: np.ndarray, row0: int, ws: Workspace):
    """The two products of an int8 linear layer on (m, K) rows: the uint8 x int8 GEMM of the quantized rows ``xq``
    that are not float token rows (int32 sums), and the float product of the float token rows (``frows``:
    quant.float_token_rows of the whole batch; these are rows row0 .. row0 + m - 1) from the float rows ``x`` and
    ``ql.keep`` (quant.py). Returns (acc, yc, src): src (m,) int32 says where row i's product is, yc[src[i]] for a
    float token row, else acc[-1 - src[i]]; the weight's float rows are added by the dequantization."""
    q = xq[0]
    m, N = q.shape[0], ql.shape[1]
    local = quant.local_rows(frows, row0, m)
    n_f = len(local)
    src = ws.take("float_src", (m,), np.int32)
    if n_f:  # the int8 GEMM only on the other rows: a uint8 row gather is cheap next to a GEMM row
        src.fill(0)
        src[local] = 1
        rest = np.flatnonzero(src == 0)  # (m - n_f,) rows multiplied in int8
        src[rest] = -1 - np.arange(len(rest), dtype=np.int32)
        src[local] = np.arange(n_f, dtype=np.int32)
        q = np.take(q, rest, axis=0, out=ws.take("q_rest", (len(rest), q.shape[1]), np.uint8))  # (m - n_f, K)
    else:
        src[:] = -1 - np.arange(m, dtype=np.int32)
    acc = gemm.matmul(q, ql.packed, out=ws.take("acc", (q.shape[0], N), np.int32))  # (m - n_f, N) int32
    if ql.keep_dtype == "bf16":  # gathered, then rounded
        xc = to_bf16_(np.take(x, local, axis=0, out=ws.take("float_rows32", (n_f, x.shape[1]))),
                      ws.take("float_rows16", (n_f, x.shape[1]), np.uint16))
    else:  # a contiguous copy (a strided view would make one oneDNN primitive per layout)
        xc = np.take(x, local, axis=0, out=ws.take("float_rows32", (n_f, x.shape[1])))  # (n_f, K)
    yc = gemm.matmul(xc, ql.keep, out=ws.take("float_y", (n_f, N)))  # (n_f, N)
    return acc, yc, src


def q8_linear(xq: tuple, x: np.ndarray, ql: quant.QLinear, b: np.ndarray | None, frows: np.ndarray, row0: int,
              out: np.ndarray, ws: Workspace) -> np.ndarray:
    """(m, K) rows -> (m, N) float32 x W (+ b) from q8_products, dequantized into ``out``."""
    acc, yc, src = q8_products(xq, x, ql, frows, row0, ws)
    b = zeros(ql.shape[1]) if b is None else b
    fused = kernels.get("dq_bias_")
    if fused is not None:
        return fused(acc, xq[1], xq[2], ql.scale, ql.colsum, b, yc, src, x, ql.rows, ql.side, out)
    return quant.dq_bias(acc, xq[1], xq[2], ql, b, yc, src, x, out)


def add_layer_norm_q8_(y: np.ndarray, b: np.ndarray, r: np.ndarray, g: np.ndarray, beta: np.ndarray, eps: float,
                       xq: tuple | None, inv: np.ndarray | None) -> np.ndarray:
    """add_layer_norm_, and its output rows times ``inv`` (the next linear layer's inv_smooth) quantized into ``xq``
    (the next int8 GEMM's input; None after the last layer: not quantized)."""
    if xq is None:
        return add_layer_norm_(y, b, r, g, beta, eps)
    fused = kernels.get("add_layer_norm_q8_")
    if fused is not None:
        return fused(y, b, r, g, beta, eps, inv, *xq)
    add_layer_norm_(y, b, r, g, beta, eps)
    xq[0][...], xq[1][...], xq[2][...] = quant.quant_rows(y, inv)
    return y


def encoder_layer_q8(x: np.ndarray, lw: LayerWeights, mask_add: np.ndarray, B: int, T: int, nh: int, hidden_act: str,
                     eps: float, want_probs: bool = False, *, ws: Workspace, xq: tuple, frows: np.ndarray,
                     next_inv: np.ndarray | None, bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """encoder_layer with int8 linear layers: ``xq`` holds x quantized and is overwritten with y * next_inv
    quantized (the next layer's QKV input; next_inv None: the last layer, y is not quantized). ``frows``: the
    float token rows (quant.float_token_rows). Attention scores, softmax, LayerNorm, GELU and the residual stream
    stay float32."""
    N, H = x.shape
    hs = H // nh
    qkv = q8_linear(xq, x, lw.qkv_w, lw.qkv_b, frows, 0, ws.take("qkv", (N, 3 * H)), ws)  # (N, 3H)
    ctx, probs = attend(qkv, mask_add, B, T, nh, want_probs, ws, bias)  # (B, nh, T, hs)
    rows = ws.take("ctx_rows", (B, T, nh, hs))
    np.copyto(rows, ctx.transpose(0, 2, 1, 3))  # (B, T, nh, hs) = (N, H) rows
    rows = rows.reshape(N, H)
    a = q8_linear(quantize_(rows, ws, "ctx", lw.o_w.inv_smooth), rows, lw.o_w, None, frows, 0, ws.take("h", (N, H)),
                  ws)  # bias in the LN
    hq = (ws.take("h_q", (N, H), np.uint8), ws.take("h_s", (N,)), ws.take("h_z", (N,), np.int32))
    h = add_layer_norm_q8_(a, lw.o_b, x, lw.ln1_g, lw.ln1_b, eps, hq, lw.up_w.inv_smooth)  # x is dead from here on
    F = lw.up_w.shape[1]
    block = ffn_block_rows(F, hidden_act)
    out = ws.take("y", (N, H))
    buf = ws.take("ffn_act", (min(block, N), F))
    fused = kernels.get("dq_bias_gelu_q8_") if hidden_act == "gelu" else None
    for s in range(0, N, block):
        m = min(block, N - s)
        hq_s = tuple(t[s:s + m] for t in hq)
        if fused is not None:  # dequantize + bias + GELU (the float token rows' from their float product) + quantize
            acc, yc, src = q8_products(hq_s, h[s:s + m], lw.up_w, frows, s, ws)
            uq = (ws.take("u_q", (m, F), np.uint8), ws.take("u_s", (m,)), ws.take("u_z", (m,), np.int32))
            up = lw.up_w
            u = fused(acc, hq_s[1], hq_s[2], up.scale, up.colsum, lw.up_b, yc, src, h[s:s + m], up.rows, up.side,
                      buf[:m], *uq)  # (m, F); the down projection is never smoothed (no inv here)
        else:
            u = q8_linear(hq_s, h[s:s + m], lw.up_w, None, frows, s, buf[:m], ws)  # (m, F), no bias yet
            uq = quantize_(bias_act_(u, lw.up_b, hidden_act), ws, "u", lw.down_w.inv_smooth)
        q8_linear(uq, u, lw.down_w, None, frows, s, out[s:s + m], ws)  # (m, H), bias in the LayerNorm below
    return add_layer_norm_q8_(out, lw.down_b, h, lw.ln2_g, lw.ln2_b, eps, xq if next_inv is not None else None,
                              next_inv), probs


def length_runs(mask_add: np.ndarray) -> list[tuple[int, int, int]] | None:
    """(B, 1, 1, T) additive mask (right padding) -> the runs (start, stop, L) of consecutive sequences of L real
    tokens (a length-sorted batch has a few), or None when no sequence is padded."""
    B, T = mask_add.shape[0], mask_add.shape[-1]
    lengths = (mask_add.reshape(B, T) == 0).sum(axis=1)  # (B,) real tokens per sequence
    if lengths.min() == T:
        return None
    cuts = [0, *(np.flatnonzero(np.diff(lengths)) + 1).tolist(), B]
    return [(s, e, int(lengths[s])) for s, e in zip(cuts[:-1], cuts[1:])]


def own_length_scores(q: np.ndarray, k: np.ndarray, mask_add: np.ndarray, all_queries: bool,
                      out: np.ndarray) -> np.ndarray:
    """Attention scores q k^T, q (B, nh, M, hs), k (B, nh, T, hs) -> out (B, nh, M, T), each sequence's over its own
    tokens only (mask_add (B, 1, 1, T): right padding), so that a score does not depend on how far its batch pads it:
    the BLAS product of (T, hs) x (hs, T) rounds differently as T changes (5e-6 on scores of ~5 between T = 33 and 36),
    which int8's per-row quantization then turns into whole rounding steps (a feature 3e-3 of its norm off). Runs of
    sequences of one length (a length-sorted batch has a few) are one product each, the views sliced as a batch of that
    length would have them; ``all_queries``: the queries are the tokens too (M = T), cut the same way. Scores of
    padding (masked keys, padding queries) are 0. The products with the probabilities: own_length_context."""
    runs = length_runs(mask_add)
    if runs is None:
        return np.matmul(q, k.transpose(0, 1, 3, 2), out=out)
    for s, e, L in runs:  # sequences s..e-1 all have L tokens
        M = L if all_queries else q.shape[2]
        np.matmul(q[s:e, :, :M], k[s:e, :, :L].transpose(0, 1, 3, 2), out=out[s:e, :, :M, :L])  # (n, nh, M, L)
        out[s:e, :, :M, L:] = 0.0
        out[s:e, :, M:, :] = 0.0
    return out


def own_length_context(probs: np.ndarray, v: np.ndarray, mask_add: np.ndarray, all_queries: bool,
                       out: np.ndarray) -> np.ndarray:
    """probs (B, nh, M, T) @ v (B, nh, T, hs) -> out (B, nh, M, hs), each sequence's over its own keys only (runs of one
    length, as own_length_scores): the probabilities of the padding are exact zeros, but NumPy's product still
    rounds by T: for M = 1 (layer_at, 4.5e-7 on a cls feature) and for any M once T passes OpenBLAS's K block (~256
    keys: 1.6e-7 in fp32, 2.5e-3 of a feature in int8, between 373- and 512-token documents). ``all_queries``: the
    queries are the tokens (M = T); the padding queries' context is 0."""
    runs = length_runs(mask_add)
    if runs is None:
        return np.matmul(probs, v, out=out)
    for s, e, L in runs:
        M = L if all_queries else probs.shape[2]
        np.matmul(probs[s:e, :, :M, :L], v[s:e, :, :L], out=out[s:e, :, :M])  # (n, nh, M, hs)
        out[s:e, :, M:] = 0.0
    return out


def attend(qkv: np.ndarray, mask_add: np.ndarray, B: int, T: int, nh: int, want_probs: bool,
           ws: Workspace, bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(N, 3H) fused Q/K/V rows -> the attention context (B, nh, T, hs) (a workspace buffer) and the probabilities.

    ``bias`` (nh, T, T), optional: added to every sequence's scaled scores before the padding mask (MPNet's relative
    position bias, mpnet.py): softmax(q k^T / sqrt(hs) + bias + mask_add)."""
    hs = qkv.shape[1] // (3 * nh)
    qkv = qkv.reshape(B, T, 3, nh, hs).transpose(2, 0, 3, 1, 4)  # (3, B, nh, T, hs)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = own_length_scores(q, k, mask_add, True,  # (B, nh, T, T); kept per layer when returned
                               np.empty((B, nh, T, T), np.float32) if want_probs else ws.take("scores", (B, nh, T, T)))
    scale = np.float32(1.0 / np.sqrt(hs))
    if bias is not None:
        scores *= scale
        scores += bias  # (nh, T, T) broadcast over the batch
        scale = np.float32(1.0)
    probs = masked_softmax_(scores, scale, mask_add)
    ctx = own_length_context(probs, v, mask_add, True, ws.take("ctx", (B, nh, T, hs)))  # (B, nh, T, hs)
    return ctx, (probs if want_probs else None)


def additive_mask(attention_mask: np.ndarray) -> np.ndarray:
    """(B, T) 1/0 mask -> (B, 1, 1, T) additive mask over keys."""
    B, T = attention_mask.shape
    return np.where(attention_mask.astype(bool), np.float32(0.0), MASK_NEG).reshape(B, 1, 1, T)


@dataclass
class ForwardOutput:
    hidden: dict[int, np.ndarray]  # hidden-state index (0 = embeddings, L = last layer) -> (B, T, H)
    attentions: list[np.ndarray] = field(default_factory=list)  # per layer (B, nh, T, T)
    at: np.ndarray | None = None  # (B,) set when the deepest state was computed at these tokens only: it is (B, 1, H)


def bert_forward(w: BertWeights, input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray,
                 keep: tuple[int, ...] | None = None, output_attentions: bool = False,
                 ws: Workspace | None = None, at: np.ndarray | None = None) -> ForwardOutput:
    """Run the encoder and return the hidden states listed in ``keep`` (indices 0..L, default the last).

    Stops after the deepest layer that ``keep`` needs (unless attentions are requested). With a
    workspace ``ws`` the deepest kept state is a view into it, valid until the next call with ``ws``
    (the others are copies); without one, every array returned is the caller's own. ``at`` (B,): the
    caller reads the deepest state at these tokens only (run_layers).
    """
    c = w.config
    B, T = input_ids.shape
    keep, last = layers_to_run(c, T, keep, output_attentions)
    ws = ws or Workspace()
    x = embed(w, input_ids, token_type_ids, out=ws.take("emb", (B * T, c.hidden_size)))  # (N, H)
    return run_layers(w, x, additive_mask(attention_mask), B, T, keep, last, output_attentions, ws, at=at)


def layers_to_run(c, T: int, keep: tuple[int, ...] | None, output_attentions: bool) -> tuple[tuple[int, ...], int]:
    """The hidden states to keep (default the last) and the deepest layer to run: every layer when attentions are
    asked for, else the deepest kept one. A sequence longer than the model's positions is refused."""
    if T > c.max_positions:
        raise ValueError(f"sequence length {T} exceeds the {c.max_positions} positions of the model")
    keep = (c.num_hidden_layers,) if keep is None else tuple(keep)
    return keep, c.num_hidden_layers if output_attentions else max(keep)


def run_layers(w: BertWeights, x: np.ndarray, mask_add: np.ndarray, B: int, T: int, keep: tuple[int, ...], last: int,
               output_attentions: bool, ws: Workspace, bias: np.ndarray | None = None,
               at: np.ndarray | None = None) -> ForwardOutput:
    """The encoder layers 1..``last`` on the embeddings ``x`` (N, H) (a workspace buffer); the hidden states in
    ``keep`` as bert_forward returns them. ``bias`` (nh, T, T): an additive attention bias for every layer (MPNet).

    ``at`` (B,) token positions: the caller reads the last layer's state at these tokens only, so that layer runs
    there alone (layer_at; not with attentions asked for, nor for layer 0): hidden[last] is then (B, 1, H) and the
    result's ``at`` says so."""
    c = w.config
    out = ForwardOutput(hidden={})
    N = B * T
    at = None if (at is None or output_attentions or last == 0) else np.asarray(at, dtype=np.int64)
    x16 = xq = None
    layers, bf16 = w.layers, w.precision == "bf16"
    if w.precision == "int8" and last > 0:
        real = mask_add.reshape(B, T) == 0
        if quant.all_float(real):  # every sequence short: every real row float, so the float layers run as they are
            layers, bf16 = w.float_layers, w.float_layers[0].qkv_w.dtype == np.uint16
        else:
            xq = quantize_(x, ws, "x", w.layers[0].qkv_w.inv_smooth)  # (N, H) uint8, scales, zero points
            frows = quant.float_token_rows(real)  # rows multiplied in float (quant.py)
            if at is not None and not np.isin(np.arange(B) * T + at, frows).all():
                at = None  # a token multiplied in int8 (after an excluded prompt): the whole layer, as the scheme says
    if bf16 and last > 0:
        x16 = to_bf16_(x, ws.take("x16", (N, c.hidden_size), np.uint16))  # (N, H) bf16
    for i in range(last + 1):
        if i > 0 and i == last and at is not None:  # the last layer at one token per sequence
            lw = layers[i - 1]
            if xq is not None:  # int8: Q/K/V of every token as encoder_layer_q8 makes them; the rest on float token
                lw = w.float_layers[i - 1]  # rows, which the chosen tokens are (first / last: quant.float_token_rows)
                qkv = q8_linear(xq, x, w.layers[i - 1].qkv_w, w.layers[i - 1].qkv_b, frows, 0,
                                ws.take("qkv", (N, 3 * c.hidden_size)), ws)  # (N, 3H)
            else:
                qkv = linear(x if x16 is None else x16, lw.qkv_w, lw.qkv_b, out=ws.take("qkv", (N, 3 * c.hidden_size)))
            y = layer_at(qkv, x, lw, mask_add, B, T, c.num_attention_heads, c.hidden_act, c.layer_norm_eps, at, ws=ws,
                         bias=bias)
            out.hidden[i], out.at = y.reshape(B, 1, -1), at  # (B, 1, H)
            break
        if i > 0 and xq is not None:
            next_inv = w.layers[i].qkv_w.inv_smooth if i < last else None
            x, probs = encoder_layer_q8(x, w.layers[i - 1], mask_add, B, T, c.num_attention_heads, c.hidden_act,
                                        c.layer_norm_eps, output_attentions, ws=ws, xq=xq, frows=frows,
                                        next_inv=next_inv, bias=bias)
            if output_attentions:
                out.attentions.append(probs)
        elif i > 0:
            x, probs = encoder_layer(x, layers[i - 1], mask_add, B, T, c.num_attention_heads, c.hidden_act,
                                     c.layer_norm_eps, output_attentions, ws=ws, x16=x16, bias=bias)
            if output_attentions:
                out.attentions.append(probs)
        if i in keep:  # buffers are reused by later layers: copy all but the deepest
            out.hidden[i] = (x if i == last else x.copy()).reshape(B, T, -1)  # (B, T, H)
    return out


def pooler(w: BertWeights, h_cls: np.ndarray) -> np.ndarray:
    """(B, H) last-layer [CLS] -> tanh(h W + b)."""
    return np.tanh(h_cls @ w.pooler_w + w.pooler_b)


def mlm_logits(w: BertWeights, h: np.ndarray, act: str | None = None) -> np.ndarray:
    """(M, H) last hidden states -> (M, V) masked-LM logits: dense, act (default the config's hidden_act; MPNet's head
    is always the exact "gelu"), LayerNorm, tied decoder, bias."""
    m = w.mlm
    t = bias_act_(h @ m["dense_w"], m["dense_b"], act or w.config.hidden_act)
    t = layer_norm_(t, m["ln_g"], m["ln_b"], w.config.layer_norm_eps)
    return t @ m["decoder_w"].T + m["bias"]
