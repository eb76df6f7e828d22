"""The BERT forward pass in NumPy: float32, or bf16 / int8 linear layers (precision="bf16" / "int8").

Shapes (every comment below uses these):
    B batch, T tokens (padded), L a sequence's own tokens, H hidden, nh heads, hs head size (H = nh * hs),
    F intermediate, E embedding width (ELECTRA), V vocab, N = B * T token rows, M rows of a step (N, a block of
    them, or B at one token per sequence), K / n a linear layer's inputs / outputs.

Every linear layer is a 2-D GEMM on (M, K) rows with a weight stored (K, n) at load time (see weights.py), Q/K/V
fused into one (H, 3H) product. BERT is post-LayerNorm:

    e = LN(word + position + token_type)
    h = LN(x + Attn(x))
    y = LN(h + FFN(h)),     FFN(h) = act(h W_up + b_up) W_down + b_down
    pooled = tanh(h_CLS W_p + b_p)

A layer is five steps, the same in every precision (encoder_layer): qkv (the fused Q/K/V product), attend (scores,
softmax and context: float32 in every precision, this module's attend), attn_out (the output projection + bias +
residual + LayerNorm), up (the FFN's up projection + activation) and down (its down projection), the FFN's output
then + bias + residual + LayerNorm (ffn_out). Each precision is one class of these steps (Fp32Steps, Bf16Steps,
Int8Steps), chosen once per model (layer_steps); the layer loop (run_layers) never asks which. Rows pass between
steps as ``Rows``: the float32 rows (the residual stream) and, for bf16 and int8, the copy the next GEMM reads,
written by the kernel that made the rows. What one batch shares (its shape, mask, workspace, the element-wise
functions in force) travels as one ``Batch``.

bf16 (weights loaded with precision="bf16", see weights.py and gemm.py): each of the four linear layers of a layer is
a bf16 x bf16 -> float32 GEMM. Its input is a bf16 copy (uint16 bit patterns) of the float32 activation, written by
the kernel that makes that activation (kernels.py): the embeddings' and each layer's output LayerNorm, the attention
LayerNorm, the context's transpose to token rows, the FFN's bias + GELU (only the bf16 copy is read). Everything else
is float32 as in the fp32 path: the residual stream, LayerNorm, the attention scores, softmax and context (fp32
batched products), GELU, pooling and the pooler.

int8 (Int8Steps, quant.py): each linear layer is a uint8 x int8 -> int32 GEMM of per-token quantized activations
and per-channel quantized weights. The kernel that makes an activation quantizes it in the same pass (the LayerNorms,
the FFN's GELU, the context's transpose), taking each row's few outsized channels out of its quantization; the kernel
that consumes a product dequantizes it (with the bias and residual before the LayerNorm, or before the GELU), adding
those channels' products with ~15-bit weight rows and the float32 products of a weight's outlier rows. A batch of
short sequences multiplies by the weights at ~15 bits (their two int8 levels). The attention, the LayerNorms and the
residual stream stay float32.

A pooling that reads one token per sequence of the last layer (cls, lasttoken, the pooler) gets that layer at that
token alone (layer_at, run_layers' ``at``): the fused Q/K/V product on every token (the keys and values), everything
after it on B rows instead of N, 3/4 of the last layer's multiply-adds not done (a 6-layer model ~12 % of its work, a
12-layer ~6 %).

The element-wise steps run as numba kernels (kernels.py) where it is installed; this module's NumPy functions are
their reference and the fallback (``Ops``: the set in force, taken once per batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
    """erf for float32 arrays, |error| < 2e-7 (float32 eps is 1.2e-7), checked in tests/model/test_model.py.

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
    batch seen (a working set bounded by the token budget, not by the corpus). A buffer is bytes, viewed
    as the type asked for, so a name may hold int32 sums in one batch and float32 in the next (int8).
    """

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
        """A ``dtype`` (float32) array of ``shape`` backed by the buffer ``name`` (its old contents are garbage)."""
        dtype = np.dtype(dtype)
        n = math.prod(shape) * dtype.itemsize
        buf = self._bufs.get(name)
        if buf is None or buf.size < n:
            buf = self._bufs[name] = np.empty(n + n // 4, dtype=np.uint8)  # room for slightly larger batches
        return buf[:n].view(dtype).reshape(shape)

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


def softmax(x: np.ndarray) -> np.ndarray:
    return softmax_(np.array(x, dtype=np.float32))


# --------------------------------------------------------------------------- the element-wise steps in force
# NumPy twins of kernels.py's fused kernels, with their signatures: the reference the kernels are checked against
# (tests/ops/test_kernels.py, test_bf16.py, test_int8.py) and what runs without numba.
def _add_layer_norm_np(y, b, r, g, beta, eps):
    y += b
    y += r
    return layer_norm_(y, g, beta, eps)


def _add_layer_norm_bf16_np(y, b, r, g, beta, eps, out16):
    _add_layer_norm_np(y, b, r, g, beta, eps)
    gemm.to_bf16(y, out=out16)
    return y


def _masked_softmax_np(scores, scale, mask_add):
    """As kernels.masked_softmax_: each sequence's rows over its keys up to its last unmasked one (right padding), the
    keys past it 0, so a row's sums do not depend on how far its batch pads it (NumPy's pairwise sums group a row by
    its length: over the padded length a text's features moved with its batch, by 2e-7 at fp32 and, crossing a bf16
    rounding or an int8 step, by 7e-4 / 2e-3 at bf16 / int8 on all-MiniLM-L6-v2). A change of its rounding must
    change cache.store.attention_revision's value, so that vectors cached before it are not served."""
    scores *= scale
    scores += mask_add
    B, Tk = scores.shape[0], scores.shape[-1]
    unmasked = mask_add.reshape(B, Tk) > np.float32(-1e37)  # (B, Tk)
    n = np.where(unmasked.any(axis=1), Tk - np.argmax(unmasked[:, ::-1], axis=1), 1)  # (B,) keys up to the last real one
    for a, b, L in equal_runs(n):  # sequences a..b-1 with L keys
        softmax_(scores[a:b, ..., :L])
        scores[a:b, ..., L:] = 0.0
    return scores


def _to_bf16_np(x, out16):
    return gemm.to_bf16(x, out=out16)


def _ctx_rows_bf16_np(ctx, out16):
    return gemm.to_bf16(ctx.transpose(0, 2, 1, 3), out=out16)  # (B, nh, T, hs) -> (B, T, nh, hs)


def _ctx_q8_np(ctx, *nq):
    B, nh, T, hs = ctx.shape
    return quant.quant_rows_q8(ctx.transpose(0, 2, 1, 3).reshape(B * T, nh * hs), *nq)  # (B, T, nh, hs) rows


def _dq_add_ln_q8_np(acc, xd, kw, b, res, g, beta, eps, out, nq):
    _add_layer_norm_np(quant.dq_bias_q8(acc, xd, kw, b, out), zeros(out.shape[1]), res, g, beta, eps)
    if nq[2].shape[0]:
        quant.quant_rows_q8(out, *nq)
    return out


def _dq_act_q8_np(act: Callable, dq: Callable, quant_rows: Callable) -> Callable:
    def dq_act_q8(acc, xd, kw, b, nq):
        quant_rows(act(dq(acc, xd, kw, b, np.empty(acc.shape, np.float32))), *nq)
        return nq[2]

    return dq_act_q8


def _bias_act_np(act: str) -> Callable:
    def bias_act(u, b):
        u += b
        return ACTIVATIONS_INPLACE[act](u)

    return bias_act


def _bias_act_bf16_np(f: Callable) -> Callable:
    def bias_act_bf16(u, b, out16):
        return gemm.to_bf16(f(u, b), out=out16)

    return bias_act_bf16


@dataclass(frozen=True)
class Ops:
    """The element-wise steps in force (kernels.use): numba's fused kernel where kernels.py has one, else the NumPy
    twin above (quant.py's for int8); each pair computes the same thing. Signatures are the kernels' (kernels.py)."""

    add_layer_norm_: Callable  # (y, b, r, g, beta, eps) -> y <- LN(y + b + r)
    add_layer_norm_bf16_: Callable  # (..., out16) -> y, and out16 <- bf16(y)
    masked_softmax_: Callable  # (scores, scale, mask_add) -> scores
    to_bf16_: Callable  # (x, out16) -> out16
    ctx_rows_bf16_: Callable  # (ctx (B, nh, T, hs), out16 (B, T, nh, hs)) -> out16
    acts: dict[str, Callable]  # hidden_act -> (u, b) -> act(u + b), in place
    acts16: dict[str, Callable]  # hidden_act -> (u, b, out16) -> out16 <- bf16(act(u + b))
    fused_acts: frozenset[str]  # the activations with a fused kernel (ffn_block_rows)
    quant_rows_q8_: Callable  # (x, *nq) -> q: rows quantized for an int8 GEMM (quant.quant_rows_q8)
    ctx_q8_: Callable  # (ctx (B, nh, T, hs), *nq) -> q: the context's token rows, quantized
    dq_bias_q8_: Callable  # (acc, xd, kw, b, out) -> out: dequantized + bias
    dq_add_ln_q8_: Callable  # (acc, xd, kw, b, res, g, beta, eps, out, nq) -> out: + bias + residual, LN, quantized
    dq_acts_q8: dict[str, Callable]  # hidden_act -> (acc, xd, kw, b, nq) -> q: act(dequantized + bias), quantized
    hp_accumulate_: Callable  # (acc, s, z, cs, f, out, add) -> out (+)= s f (acc - z cs): a short batch's sums


_ops: list = [None, None]  # [kernels.fused() it was built from, Ops]


def elementwise() -> Ops:
    """The Ops in force: rebuilt when kernels.use() changed the backend, else the same object."""
    fused = kernels.fused()
    if _ops[0] is not fused:
        def pick(name: str, twin: Callable) -> Callable:
            return fused.get(name, twin)

        acts = {a: pick(a, _bias_act_np(a)) for a in ACTIVATIONS_INPLACE}
        acts16 = {a: pick(a + "_bf16", _bias_act_bf16_np(acts[a])) for a in ACTIVATIONS_INPLACE}
        dq, qr = pick("dq_bias_q8_", quant.dq_bias_q8), pick("quant_rows_q8_", quant.quant_rows_q8)
        dq_acts = {a: _dq_act_q8_np(ACTIVATIONS_INPLACE[a], dq, qr) for a in ACTIVATIONS_INPLACE}
        dq_acts["gelu"] = pick("dq_gelu_q8_", dq_acts["gelu"])
        _ops[1] = Ops(pick("add_layer_norm_", _add_layer_norm_np), pick("add_layer_norm_bf16_", _add_layer_norm_bf16_np),
                      pick("masked_softmax_", _masked_softmax_np), pick("to_bf16_", _to_bf16_np),
                      pick("ctx_rows_bf16_", _ctx_rows_bf16_np), acts, acts16, frozenset(a for a in acts if a in fused),
                      qr, pick("ctx_q8_", _ctx_q8_np), dq, pick("dq_add_ln_q8_", _dq_add_ln_q8_np), dq_acts,
                      pick("hp_accumulate_", quant.hp_accumulate))
        _ops[0] = fused
    return _ops[1]


def masked_softmax_(scores: np.ndarray, scale: np.float32, mask_add: np.ndarray) -> np.ndarray:
    """In place scores (B, nh, T, T) <- softmax(scores * scale + mask_add) over the keys; returns scores."""
    return elementwise().masked_softmax_(scores, scale, mask_add)


def bias_act_(u: np.ndarray, b: np.ndarray, hidden_act: str, out16: np.ndarray | None = None) -> np.ndarray:
    """In place u (m, F) <- act(u + b); one fused pass when kernels.py has this activation.

    With ``out16`` (m, F) uint16: writes bf16(act(u + b)) there and returns it (u is then scratch).
    """
    k = elementwise()
    return k.acts[hidden_act](u, b) if out16 is None else k.acts16[hidden_act](u, b, out16)


def add_layer_norm_(y: np.ndarray, b: np.ndarray, r: np.ndarray, g: np.ndarray, beta: np.ndarray,
                    eps: float, out16: np.ndarray | None = None) -> np.ndarray:
    """In place y (N, H) <- LN(y + b + r): a layer's output bias, its residual and the post-LN; returns y.

    With ``out16`` (N, H) uint16, also writes bf16(y) there (the next bf16 GEMM's input).
    """
    k = elementwise()
    return k.add_layer_norm_(y, b, r, g, beta, eps) if out16 is None else k.add_layer_norm_bf16_(y, b, r, g, beta, eps,
                                                                                                   out16)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(N, in) @ (in, out) + b as one 2-D GEMM (gemm.matmul: bf16 when w is); the bias added by oneDNN as it
    writes the product where it can (gemm.fuses), else in place after it."""
    if gemm.fuses(w):
        return gemm.matmul(x, w, out=out, bias=b)
    y = gemm.matmul(x, w, out=out)
    y += b
    return y


def linear_act(x: np.ndarray, w, b: np.ndarray, hidden_act: str, out: np.ndarray, k: Ops,
               out16: np.ndarray | None = None) -> np.ndarray:
    """act(x @ w + b) for (m, in) rows into ``out`` (m, F) float32; with ``out16`` (m, F) uint16 the bf16
    rounding of it is written there and returned (``out`` is then scratch). One oneDNN call (bias and
    activation as post-ops, bf16 written directly) where it can (gemm.fuses), else the GEMM and ``k``'s kernel."""
    if gemm.fuses(w, hidden_act):
        return gemm.matmul(x, w, out=out if out16 is None else out16, bias=b, act=hidden_act)
    u = gemm.matmul(x, w, out=out)
    return k.acts[hidden_act](u, b) if out16 is None else k.acts16[hidden_act](u, b, out16)


def ffn_block_rows(F: int, hidden_act: str, k: Ops | None = None) -> int:
    """Rows per FFN block of width F, for this activation.

    NumPy activations (about 20 passes over the block): about 2 MiB of (rows, F) activations, so
    the passes run in cache (341 rows for F=1536; 42 rows cost 9 ms more per MiniLM layer at 2048
    tokens than 256 rows, as the GEMMs lose efficiency). The fused kernel makes one pass, so larger
    blocks win: the GEMMs run at full speed (bert-base, 2048 tokens, one core: 110.9 ms per FFN in
    blocks of 170 rows, 92.5 ms in blocks of 1,365), up to 16 MiB of activations.
    """
    if hidden_act in (k or elementwise()).fused_acts:
        return int(max(512, min(2048, (1 << 22) // F)))
    return int(max(64, min(512, (1 << 19) // F)))


def word_rows(word: np.ndarray, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(V, E) word embeddings at ``ids`` -> (n, E) float32 rows (into ``out`` if given): an int8 model keeps the table
    as bf16 bit patterns (gemm.prepare), widened exactly here, row by row as gathered."""
    if word.dtype != np.uint16:
        return np.take(word, ids, axis=0, out=out)
    rows = np.take(word, ids, axis=0).astype(np.uint32)  # (n, E) bf16 bits
    rows <<= 16
    if out is None:
        return rows.view(np.float32)
    np.copyto(out.view(np.uint32), rows)
    return out


def embed(w: BertWeights, input_ids: np.ndarray, token_type_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(B, T) ids -> (B*T, H) LayerNorm(word + position + token type), into ``out`` (N, H) if given.

    DistilBERT has no token types (LN(word + position)); ELECTRA's tables are E = embedding_size wide, and
    when E != H its embeddings_project (a float32 linear layer, as the pooler) maps the (N, E) rows to (N, H)."""
    B, T = input_ids.shape
    E = w.word.shape[1]
    proj = w.emb_proj_w is not None
    x = word_rows(w.word, input_ids.reshape(-1), out=None if proj else out).reshape(B, T, E)  # (B, T, E)
    off = w.config.position_offset  # 0 for BERT; padding_idx + 1 for RoBERTa (real tokens only: pads are masked)
    pos = w.config.position_ids(input_ids)  # None unless a real token is the padding id (RoBERTa, XLM-R, CamemBERT)
    x += w.position[off:off + T][None, :, :] if pos is None else w.position[pos]
    if w.token_type is not None:
        x += w.token_type[token_type_ids]
    x = layer_norm_(x.reshape(B * T, E), w.emb_ln_g, w.emb_ln_b, w.config.layer_norm_eps)  # (N, E)
    return linear(x, w.emb_proj_w, w.emb_proj_b, out=out) if proj else x  # (N, H)


# --------------------------------------------------------------------------- one batch
@dataclass
class Batch:
    """What every step of one batch's layers shares, passed instead of loose arguments."""

    B: int
    T: int
    mask_add: np.ndarray  # (B, 1, 1, T): 0 at tokens, MASK_NEG at padding (right padding)
    ws: Workspace
    k: Ops  # the element-wise steps in force
    nh: int  # attention heads
    act: str  # hidden_act
    eps: float  # layer_norm_eps
    bias: np.ndarray | None = None  # (nh, T, T) added to every layer's scaled scores (MPNet's position bias)
    want_probs: bool = False  # return each layer's attention probabilities
    levels: int = 1  # int8: the weight's levels, 2 (Wq + Wr / RESID) for a batch of short sequences (quant.py)
    ids: np.ndarray | None = None  # (B, T) the token ids (int8 decides the levels by them: quant.all_two_levels)

    @classmethod
    def of(cls, config, mask_add: np.ndarray, ws: Workspace, bias: np.ndarray | None = None,
           want_probs: bool = False, ids: np.ndarray | None = None) -> Batch:
        return cls(mask_add.shape[0], mask_add.shape[-1], mask_add, ws, elementwise(), config.num_attention_heads,
                   config.act, config.layer_norm_eps, bias, want_probs, ids=ids)

    @property
    def real(self) -> np.ndarray:
        """(B, T) bool: True at real tokens."""
        return self.mask_add.reshape(self.B, self.T) == 0


@dataclass
class Rows:
    """(M, K) float32 rows and the copy of them the next GEMM reads: None (fp32), their bf16 bit patterns (uint16
    (M, K)) or their int8 quantization (QRows)."""

    x: np.ndarray | None  # None: only the copy is kept (int8's FFN activation)
    low: object = None


# --------------------------------------------------------------------------- attention (float32 in every precision)
def equal_runs(lengths: np.ndarray) -> list[tuple[int, int, int]]:
    """(B,) lengths -> the runs (start, stop, L) of consecutive sequences of length L (a length-sorted batch has a
    few): each run is computed over its own length, so a sequence's sums do not depend on its batch."""
    cuts = [0, *(np.flatnonzero(np.diff(lengths)) + 1).tolist(), len(lengths)]
    return [(s, e, int(lengths[s])) for s, e in zip(cuts[:-1], cuts[1:])]


def length_runs(mask_add: np.ndarray) -> list[tuple[int, int, int]] | None:
    """(B, 1, 1, T) additive mask (right padding) -> the runs (start, stop, L) of consecutive sequences of L real
    tokens (equal_runs), or None when no sequence is padded."""
    B, T = mask_add.shape[0], mask_add.shape[-1]
    lengths = (mask_add.reshape(B, T) == 0).sum(axis=1)  # (B,) real tokens per sequence
    if lengths.min() == T:
        return None
    return equal_runs(lengths)


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


def attend(qkv: np.ndarray, bt: Batch, at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(N, 3H) fused Q/K/V rows -> the attention context (B, nh, T, hs) and the probabilities (bt.want_probs).

    softmax(q k^T / sqrt(hs) + bias + mask_add) v, each sequence over its own tokens (own_length_scores); ``bt.bias``
    (nh, T, T), optional: added to every sequence's scaled scores before the padding mask (MPNet's relative position
    bias, mpnet.py). ``at`` (B,): one query per sequence, at that position (layer_at): the context (B, nh, 1, hs)."""
    B, T, nh = bt.B, bt.T, bt.nh
    hs = qkv.shape[1] // (3 * nh)
    heads = qkv.reshape(B, T, 3, nh, hs)  # (B, T, 3, nh, hs)
    k, v = heads[:, :, 1].transpose(0, 2, 1, 3), heads[:, :, 2].transpose(0, 2, 1, 3)  # (B, nh, T, hs)
    if at is None:
        q = heads[:, :, 0].transpose(0, 2, 1, 3)  # (B, nh, T, hs)
        scores = np.empty((B, nh, T, T), np.float32) if bt.want_probs else bt.ws.take("scores", (B, nh, T, T))
        ctx = bt.ws.take("ctx", (B, nh, T, hs))
    else:
        q = heads[np.arange(B), at, 0][:, :, None, :]  # (B, nh, 1, hs)
        scores, ctx = np.empty((B, nh, 1, T), np.float32), np.empty((B, nh, 1, hs), np.float32)
    scores = own_length_scores(q, k, bt.mask_add, at is None, scores)  # (B, nh, Tq, T); kept per layer when returned
    scale = np.float32(1.0 / np.sqrt(hs))
    if bt.bias is not None:
        scores *= scale
        scores += bt.bias if at is None else bt.bias[:, at, :].transpose(1, 0, 2)[:, :, None, :]  # (B, nh, 1, T) at at
        scale = np.float32(1.0)
    probs = bt.k.masked_softmax_(scores, scale, bt.mask_add)
    ctx = own_length_context(probs, v, bt.mask_add, at is None, ctx)  # (B, nh, Tq, hs)
    return ctx, (probs if bt.want_probs else None)


def additive_mask(attention_mask: np.ndarray) -> np.ndarray:
    """(B, T) 1/0 mask -> (B, 1, 1, T) additive mask over keys."""
    B, T = attention_mask.shape
    return np.where(attention_mask.astype(bool), np.float32(0.0), MASK_NEG).reshape(B, 1, 1, T)


# --------------------------------------------------------------------------- the layer, in every precision
def encoder_layer(P: Fp32Steps, r: Rows, lw: LayerWeights, bt: Batch,
                  nxt: LayerWeights | None) -> tuple[Rows, np.ndarray | None]:
    """One post-LN transformer layer on (N, H) rows: h = LN(x + Attn(x)), y = LN(h + FFN(h)), in P's precision;
    ``nxt``: the next layer's weights (its input's form is written with y), None after the last. The result is in
    the workspace buffer "y"; r.x may be that buffer too (it is read, as the residual, before the FFN writes there)."""
    qkv = P.qkv(r, lw, bt)  # (N, 3H)
    ctx, probs = P.attend(qkv, lw, bt)  # (B, nh, T, hs), or its token rows quantized (int8)
    h = P.attn_out(ctx, r.x, lw, bt)  # (N, H); r is dead from here on
    return P.ffn_out(ffn(P, h, lw, bt), h, lw, bt, nxt), probs


def ffn(P: Fp32Steps, h: Rows, lw: LayerWeights, bt: Batch) -> np.ndarray:
    """act(h W_up + b_up) W_down on (M, H) rows, a block of rows at a time (P.block_rows), *without* the bias b_down
    (ffn_out adds it with the residual), into P's FFN buffer (M, H) (float32 "y"; int8: the sums ffn_out dequantizes).

    Blocking keeps the (block, F) intermediate in cache, so the element-wise activation runs at
    cache speed rather than memory speed; each row's arithmetic is the same whatever the block.
    """
    M = h.x.shape[0]
    block = P.block_rows(lw, bt, M)
    out = P.ffn_buffer(M, lw, bt)
    for s in range(0, M, block):
        e = min(M, s + block)
        P.down(P.up(h, lw, bt, s, e), lw, out, bt, s, e)  # rows s..e-1: (m, F), then (m, H)
    return out


def layer_at(P: Fp32Steps, r: Rows, lw: LayerWeights, bt: Batch, at: np.ndarray) -> np.ndarray:
    """A post-LN layer at one token per sequence, ``at`` (B,) its position: -> (B, H) in the workspace buffer "y".
    The Q/K/V product runs on every token (the keys and values), the attention of one query per sequence, its output
    projection, both LayerNorms and the FFN on B rows instead of N: for a pooling that reads one token of the last
    layer (cls, lasttoken, the pooler) that is 3/4 of the last layer's multiply-adds not done. Each row's arithmetic
    is encoder_layer's for that token."""
    qkv = P.qkv(r, lw, bt)  # (N, 3H)
    ctx, _ = P.attend(qkv, lw, bt, at)  # (B, nh, 1, hs), or its rows quantized (int8)
    h = P.attn_out(ctx, r.x[np.arange(bt.B) * bt.T + at], lw, bt)  # (B, H); residual: x at those tokens
    return P.ffn_out(ffn(P, h, lw, bt), h, lw, bt, None).x


class Fp32Steps:
    """fp32: every product a float32 GEMM (gemm.matmul: oneDNN or NumPy); Rows.low is None."""

    precision = "fp32"

    def begin(self, w: BertWeights, x: np.ndarray, bt: Batch) -> Rows:
        """The first layer's input from the embeddings x (N, H)."""
        return Rows(x)

    def mark(self, bt: Batch) -> None:
        """Per-batch state of the precision (int8's float token rows)."""

    def linear(self, x: np.ndarray, wt, b: np.ndarray | None, out: np.ndarray, bt: Batch, row0: int = 0) -> np.ndarray:
        """(m, K) float32 rows (token rows row0.. of the batch) @ wt + b into ``out`` (m, n) (ModernBERT's layers)."""
        return linear(x, wt, zeros(out.shape[1]) if b is None else b, out=out)

    def qkv(self, r: Rows, lw: LayerWeights, bt: Batch) -> np.ndarray:
        return linear(r.x, lw.qkv_w, lw.qkv_b, out=bt.ws.take("qkv", (r.x.shape[0], lw.qkv_w.shape[1])))  # (N, 3H)

    def attend(self, qkv: np.ndarray, lw: LayerWeights, bt: Batch, at: np.ndarray | None = None):
        """(N, 3H) Q/K/V rows -> (the context in the form attn_out takes, the probabilities or None): module attend."""
        return attend(qkv, bt, at)

    def attn_out(self, ctx: np.ndarray, res: np.ndarray, lw: LayerWeights, bt: Batch) -> Rows:
        """ctx (B, nh, Tq, hs) -> h = LN1(ctx rows W_o + b_o + res) (M, H), M = B * Tq, in the buffer "h"."""
        B, nh, Tq, hs = ctx.shape
        rows = bt.ws.take("ctx_rows", (B, Tq, nh, hs))
        np.copyto(rows, ctx.transpose(0, 2, 1, 3))  # (B, Tq, nh, hs) = (M, H) rows
        a = gemm.matmul(rows.reshape(B * Tq, nh * hs), lw.o_w, out=bt.ws.take("h", (B * Tq, nh * hs)))
        return Rows(bt.k.add_layer_norm_(a, lw.o_b, res, lw.ln1_g, lw.ln1_b, bt.eps))

    def block_rows(self, lw: LayerWeights, bt: Batch, M: int) -> int:
        """Rows per FFN block (ffn)."""
        return ffn_block_rows(lw.up_w.shape[1], bt.act, bt.k)

    def ffn_buffer(self, M: int, lw: LayerWeights, bt: Batch) -> np.ndarray:
        """Where the FFN's down projection writes (M, H)."""
        return bt.ws.take("y", (M, lw.down_w.shape[1]))

    def up(self, h: Rows, lw: LayerWeights, bt: Batch, s: int, e: int) -> Rows:
        """Rows s..e-1 of h -> act(h W_up + b_up) (m, F), the down projection's input."""
        u = bt.ws.take("ffn_act", (e - s, lw.up_w.shape[1]))
        return Rows(linear_act(h.x[s:e], lw.up_w, lw.up_b, bt.act, u, bt.k))

    def down(self, u: Rows, lw: LayerWeights, out: np.ndarray, bt: Batch, s: int, e: int) -> None:
        """out[s:e] (m, H) <- u W_down, without its bias."""
        gemm.matmul(u.x, lw.down_w, out=out[s:e])

    def ffn_out(self, f: np.ndarray, h: Rows, lw: LayerWeights, bt: Batch, nxt: LayerWeights | None) -> Rows:
        """y = LN2(f + b_down + h) in place of f, with the form ``nxt`` reads (None: no next layer)."""
        return Rows(bt.k.add_layer_norm_(f, lw.down_b, h.x, lw.ln2_g, lw.ln2_b, bt.eps))


class Bf16Steps(Fp32Steps):
    """bf16: every product bf16 x bf16 -> float32; Rows.low is the rows' bf16 copy, written by the kernel that makes
    the rows (the LayerNorms, the activation, the context's transpose)."""

    precision = "bf16"

    def begin(self, w: BertWeights, x: np.ndarray, bt: Batch) -> Rows:
        return Rows(x, bt.k.to_bf16_(x, bt.ws.take("x16", x.shape, np.uint16)))  # (N, H) bf16

    def linear(self, x: np.ndarray, wt, b: np.ndarray | None, out: np.ndarray, bt: Batch, row0: int = 0) -> np.ndarray:
        return linear(gemm.to_bf16(x), wt, zeros(out.shape[1]) if b is None else b, out=out)

    def qkv(self, r: Rows, lw: LayerWeights, bt: Batch) -> np.ndarray:
        return linear(r.low, lw.qkv_w, lw.qkv_b, out=bt.ws.take("qkv", (r.x.shape[0], lw.qkv_w.shape[1])))  # (N, 3H)

    def attn_out(self, ctx: np.ndarray, res: np.ndarray, lw: LayerWeights, bt: Batch) -> Rows:
        B, nh, Tq, hs = ctx.shape
        M, H = B * Tq, nh * hs
        rows16 = bt.k.ctx_rows_bf16_(ctx, bt.ws.take("ctx_rows16", (B, Tq, nh, hs), np.uint16))  # (M, H) rows
        a = gemm.matmul(rows16.reshape(M, H), lw.o_w, out=bt.ws.take("h", (M, H)))
        h16 = bt.ws.take("h16", (M, H), np.uint16)
        return Rows(bt.k.add_layer_norm_bf16_(a, lw.o_b, res, lw.ln1_g, lw.ln1_b, bt.eps, h16), h16)

    def up(self, h: Rows, lw: LayerWeights, bt: Batch, s: int, e: int) -> Rows:
        F = lw.up_w.shape[1]
        u, u16 = bt.ws.take("ffn_act", (e - s, F)), bt.ws.take("ffn_act16", (e - s, F), np.uint16)
        return Rows(u, linear_act(h.low[s:e], lw.up_w, lw.up_b, bt.act, u, bt.k, out16=u16))  # only bf16 is read

    def down(self, u: Rows, lw: LayerWeights, out: np.ndarray, bt: Batch, s: int, e: int) -> None:
        gemm.matmul(u.low, lw.down_w, out=out[s:e])

    def ffn_out(self, f: np.ndarray, h: Rows, lw: LayerWeights, bt: Batch, nxt: LayerWeights | None) -> Rows:
        if nxt is None:
            return super().ffn_out(f, h, lw, bt, nxt)
        x16 = bt.ws.take("x16", f.shape, np.uint16)
        return Rows(bt.k.add_layer_norm_bf16_(f, lw.down_b, h.x, lw.ln2_g, lw.ln2_b, bt.eps, x16), x16)


# --------------------------------------------------------------------------- int8 (precision="int8", quant.py)
_CONST: dict[tuple, np.ndarray] = {}


def const(n: int, value: float = 0.0, dtype=np.float32) -> np.ndarray:
    """A shared vector of n ``value``s, never written (a missing bias; a short batch's unit scales and zero points). Not
    flagged read-only: numba would compile its kernels again for read-only arrays."""
    key = (n, value, np.dtype(dtype).str)
    v = _CONST.get(key)
    if v is None:
        v = _CONST[key] = np.full(n, value, dtype=dtype)
    return v


def zeros(n: int) -> np.ndarray:
    """A shared float32 zero vector of length n (a missing bias)."""
    return const(n)


@dataclass
class QRows:
    """(M, K) rows quantized for an int8 GEMM by the kernel that wrote them (quant.quant_rows_q8): uint8 ``q``
    (M, K) with scales ``s`` and zero points ``z`` (M,); the top channels' indices ``ti`` and values ``tv`` (M, TOP);
    the float values at the consuming weight's outlier rows ``xo`` (M, k)."""

    q: np.ndarray
    s: np.ndarray
    z: np.ndarray
    ti: np.ndarray
    tv: np.ndarray
    xo: np.ndarray

    @classmethod
    def take(cls, bt: Batch, name: str, M: int, ql: quant.QLinear) -> QRows:
        """Workspace buffers ``name``_* for M rows of ``ql``'s input."""
        ws, K = bt.ws, ql.shape[0]
        return cls(ws.take(name + "_q", (M, K), np.uint8), ws.take(name + "_s", (M,)),
                   ws.take(name + "_z", (M,), np.int32), ws.take(name + "_ti", (M, quant.TOP), np.int32),
                   ws.take(name + "_tv", (M, quant.TOP)), ws.take(name + "_xo", (M, len(ql.rows))))

    def __getitem__(self, rows: slice) -> QRows:
        """A block of the rows."""
        return QRows(*(a[rows] for a in (self.q, self.s, self.z, self.ti, self.tv, self.xo)))

    def nq(self, ql: quant.QLinear) -> tuple:
        """What a kernel quantizing into these buffers for ``ql`` takes (kernels._quant_out)."""
        return ql.inv_smooth, ql.rows, self.q, self.s, self.z, self.ti, self.tv, self.xo

    def xd(self, levels: int) -> tuple:
        """What a kernel dequantizing a product of these rows takes: (s, z, ti, tv, xo); a short batch's (levels 2)
        sums are float32 already (q8_products), so s 1 and z 0."""
        M = self.ti.shape[0]
        if levels == 1:
            return self.s, self.z, self.ti, self.tv, self.xo
        return const(M, 1.0), const(M, 0, np.int32), self.ti, self.tv, self.xo


def quantize_(x: np.ndarray, bt: Batch, name: str, ql: quant.QLinear) -> QRows:
    """(M, K) float32 rows -> QRows for ``ql``'s GEMM, in workspace buffers ``name``."""
    xq = QRows.take(bt, name, x.shape[0], ql)
    bt.k.quant_rows_q8_(x, *xq.nq(ql))
    return xq


def q8_products(xq: QRows, ql: quant.QLinear, bt: Batch, out: np.ndarray | None = None) -> np.ndarray:
    """The int8 GEMM of ``xq``'s rows with ``ql``: (M, N) int32 sums; levels 2 (a short batch): the GEMMs with Wq and
    with the residual weight Wr, summed into float32 as they come (hp_accumulate_: one int32 buffer, not two). Into
    ``out``, else the workspace buffer "acc" (int32) or "acc_f" (float32): every linear layer's sums are consumed
    before the next one's are made, so one buffer serves them all (int8's workspace stays near bf16's)."""
    M, N = xq.ti.shape[0], ql.shape[1]
    if bt.levels == 1:
        return gemm.matmul(xq.q, ql.packed, out=bt.ws.take("acc", (M, N), np.int32) if out is None else out)
    acc, hp = bt.ws.take("acc", (M, N), np.int32), bt.k.hp_accumulate_
    out = bt.ws.take("acc_f", (M, N)) if out is None else out
    hp(gemm.matmul(xq.q, ql.packed, out=acc), xq.s, xq.z, ql.colsum, np.float32(1.0), out, False)
    return hp(gemm.matmul(xq.q, ql.packed_r, out=acc), xq.s, xq.z, ql.colsum_r, np.float32(1.0 / quant.RESID), out,
              True)


_NO_Q = (np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros((0, 0), np.uint8), np.zeros(0, np.float32),
         np.zeros(0, np.int32), np.zeros((0, quant.TOP), np.int32), np.zeros((0, quant.TOP), np.float32),
         np.zeros((0, 0), np.float32))  # dq_add_ln_q8_'s nq after the last layer: nothing quantized


class Int8Steps(Fp32Steps):
    """int8 (scheme 7, quant.py): every product a uint8 x int8 GEMM whose input the kernel that wrote it quantized
    (Rows.low is a QRows), dequantized by the kernel that consumes it (bias + residual + LayerNorm, or bias + GELU,
    which quantizes its own output in the same pass); a batch of short sequences with the ~15-bit weights."""

    precision = "int8"

    def begin(self, w: BertWeights, x: np.ndarray, bt: Batch) -> Rows:
        self.mark(bt)
        return Rows(x, quantize_(x, bt, "x", w.layers[0].qkv_w))  # (N, H) uint8

    def mark(self, bt: Batch) -> None:
        bt.levels = 2 if quant.all_two_levels(bt.real, bt.ids) else 1

    def linear(self, x: np.ndarray, wt, b: np.ndarray | None, out: np.ndarray, bt: Batch, row0: int = 0) -> np.ndarray:
        xq = quantize_(x, bt, "mb", wt)
        b = zeros(out.shape[1]) if b is None else b
        return bt.k.dq_bias_q8_(q8_products(xq, wt, bt), xq.xd(bt.levels), wt.kw, b, out)

    def qkv(self, r: Rows, lw: LayerWeights, bt: Batch) -> np.ndarray:
        out = bt.ws.take("qkv", (r.x.shape[0], lw.qkv_w.shape[1]))  # (N, 3H)
        return bt.k.dq_bias_q8_(q8_products(r.low, lw.qkv_w, bt), r.low.xd(bt.levels), lw.qkv_w.kw, lw.qkv_b, out)

    def attend(self, qkv: np.ndarray, lw: LayerWeights, bt: Batch, at: np.ndarray | None = None):
        """The float32 attention (module attend), its context's token rows quantized for the output projection in the
        transpose's pass (QRows). A numba kernel doing the whole attention per sequence ran 3-6x slower than NumPy's
        batched products here (hs = 32, 20-60 tokens)."""
        ctx, probs = attend(qkv, bt, at)  # (B, nh, Tq, hs)
        B, nh, Tq, hs = ctx.shape
        cq = QRows.take(bt, "ctx", B * Tq, lw.o_w)
        bt.k.ctx_q8_(ctx, *cq.nq(lw.o_w))  # (B, Tq, nh, hs) = (M, H) rows, quantized
        return cq, probs

    def attn_out(self, cq: QRows, res: np.ndarray, lw: LayerWeights, bt: Batch) -> Rows:
        M, H = cq.ti.shape[0], lw.o_w.shape[1]
        h, hq = bt.ws.take("h", (M, H)), QRows.take(bt, "h", M, lw.up_w)
        bt.k.dq_add_ln_q8_(q8_products(cq, lw.o_w, bt), cq.xd(bt.levels), lw.o_w.kw, lw.o_b, res, lw.ln1_g, lw.ln1_b, bt.eps, h,
                           hq.nq(lw.up_w))
        return Rows(h, hq)

    def block_rows(self, lw: LayerWeights, bt: Batch, M: int) -> int:
        return ffn_block_rows(lw.up_w.shape[1], "gelu", bt.k)

    def ffn_buffer(self, M: int, lw: LayerWeights, bt: Batch) -> np.ndarray:
        return bt.ws.take("acc_y", (M, lw.down_w.shape[1]), np.int32 if bt.levels == 1 else np.float32)

    def up(self, h: Rows, lw: LayerWeights, bt: Batch, s: int, e: int) -> Rows:
        M = h.x.shape[0]
        uq = QRows.take(bt, "u", M, lw.down_w)  # every row's: ffn_out dequantizes the down projection of all
        if e - s < M:
            hq, uq = h.low[s:e], uq[s:e]
        else:
            hq = h.low
        acc = q8_products(hq, lw.up_w, bt)  # (m, F)
        bt.k.dq_acts_q8[bt.act](acc, hq.xd(bt.levels), lw.up_w.kw, lw.up_b, uq.nq(lw.down_w))
        return Rows(None, uq)

    def down(self, u: Rows, lw: LayerWeights, out: np.ndarray, bt: Batch, s: int, e: int) -> None:
        q8_products(u.low, lw.down_w, bt, out=out[s:e])  # (m, H)

    def ffn_out(self, f: np.ndarray, h: Rows, lw: LayerWeights, bt: Batch, nxt: LayerWeights | None) -> Rows:
        M, H = h.x.shape
        uq, y = QRows.take(bt, "u", M, lw.down_w), bt.ws.take("y", (M, H))
        xq = None if nxt is None else QRows.take(bt, "x", M, nxt.qkv_w)  # the next layer's input
        bt.k.dq_add_ln_q8_(f, uq.xd(bt.levels), lw.down_w.kw, lw.down_b, h.x, lw.ln2_g, lw.ln2_b, bt.eps, y,
                           _NO_Q if xq is None else xq.nq(nxt.qkv_w))
        return Rows(y, xq)


FP32, BF16, INT8 = Fp32Steps(), Bf16Steps(), Int8Steps()


def layer_steps(w: BertWeights) -> Fp32Steps:
    """The layer steps of a model's precision: chosen at its first forward pass (or by the Encoder at load) and kept
    on its weights, so the layer loop never asks which precision runs."""
    steps = w.steps
    if steps is None or steps.precision != w.precision:
        steps = w.steps = {"int8": INT8, "bf16": BF16}.get(w.precision, FP32)
    return steps


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
    return run_layers(w, x, additive_mask(attention_mask), B, T, keep, last, output_attentions, ws, at=at, ids=input_ids)


def layers_to_run(c, T: int, keep: tuple[int, ...] | None, output_attentions: bool) -> tuple[tuple[int, ...], int]:
    """The hidden states to keep (default the last) and the deepest layer to run: every layer when attentions are
    asked for, else the deepest kept one. A sequence longer than the model's positions is refused."""
    if T > c.max_positions:
        raise ValueError(f"sequence length {T} exceeds the {c.max_positions} positions of the model")
    keep = (c.num_hidden_layers,) if keep is None else tuple(keep)
    return keep, c.num_hidden_layers if output_attentions else max(keep)


def run_layers(w: BertWeights, x: np.ndarray, mask_add: np.ndarray, B: int, T: int, keep: tuple[int, ...], last: int,
               output_attentions: bool, ws: Workspace, bias: np.ndarray | None = None,
               at: np.ndarray | None = None, ids: np.ndarray | None = None) -> ForwardOutput:
    """The encoder layers 1..``last`` on the embeddings ``x`` (N, H) (a workspace buffer); the hidden states in
    ``keep`` as bert_forward returns them. ``bias`` (nh, T, T): an additive attention bias for every layer (MPNet).
    ``ids`` (B, T): the token ids (int8's levels: quant.all_two_levels).

    ``at`` (B,) token positions: the caller reads the last layer's state at these tokens only, so that layer runs
    there alone (layer_at; not with attentions asked for, nor for layer 0): hidden[last] is then (B, 1, H) and the
    result's ``at`` says so."""
    out = ForwardOutput(hidden={})
    if 0 in keep:
        out.hidden[0] = (x if last == 0 else x.copy()).reshape(B, T, -1)  # (B, T, H)
    if last == 0:
        return out
    bt = Batch.of(w.config, mask_add, ws, bias, output_attentions, ids)
    P, layers = layer_steps(w), w.layers
    r = P.begin(w, x, bt)
    at = None if (at is None or output_attentions) else np.asarray(at, dtype=np.int64)
    for i in range(1, last + 1):
        if i == last and at is not None:  # the last layer at one token per sequence
            out.hidden[i], out.at = layer_at(P, r, layers[i - 1], bt, at).reshape(B, 1, -1), at  # (B, 1, H)
            break
        r, probs = encoder_layer(P, r, layers[i - 1], bt, layers[i] if i < last else None)
        if output_attentions:
            out.attentions.append(probs)
        if i in keep:  # buffers are reused by later layers: copy all but the deepest
            out.hidden[i] = (r.x if i == last else r.x.copy()).reshape(B, T, -1)  # (B, T, H)
    return out


def pooler(w: BertWeights, h_cls: np.ndarray) -> np.ndarray:
    """(B, H) last-layer [CLS] -> tanh(h W + b) (a row's product independent of B: gemm.row_stable)."""
    return np.tanh(linear(h_cls, w.pooler_w, w.pooler_b))


def mlm_logits(w: BertWeights, h: np.ndarray, act: str | None = None) -> np.ndarray:
    """(M, H) last hidden states -> (M, V) masked-LM logits: dense, act (default the config's hidden_act; MPNet's head
    is always the exact "gelu"), LayerNorm, tied decoder, bias."""
    m = w.mlm
    t = bias_act_(h @ m["dense_w"], m["dense_b"], act or w.config.act)
    t = layer_norm_(t, m["ln_g"], m["ln_b"], w.config.layer_norm_eps)
    return t @ m["decoder_w"].T + m["bias"]
