"""ModernBERT (model_type 'modernbert', e.g. answerdotai/ModernBERT-base, Alibaba-NLP/gte-modernbert-base,
nomic-ai/modernbert-embed-base): its weights and forward pass.

Shapes: B batch, T tokens, H hidden, nh heads, hs head size, F intermediate (the MLP's Wi gives 2F: input and
        gate), V vocab, N = B * T token rows, qb query rows of a block, kb key columns of a block.

Pre-LN, no position table (rotary positions), biases only where config.json says so (attention_bias, mlp_bias,
norm_bias):

    x = LN(tok_embeddings[ids])                                    embeddings.norm
    x = x + Wo(Attn(LN_attn(x)))                                   layer 0 has no attention norm (Identity)
    x = x + Wo(act(u) * g),  [u | g] = Wi(LN_mlp(x))               GeGLU, act = hidden_activation
    last = LN_final(x)                                             final_norm

Attention: q, k rotated (rotary(), base global_rope_theta in full-attention layers, local_rope_theta in the others);
softmax(q k^T / sqrt(hs) + mask) v. Full-attention layers (layer_types; from the hub's config.json every
global_attn_every_n_layers-th layer, i % n == 0) see every real token; sliding-window layers only keys with
|i - j| <= local_attention // 2 (transformers' bidirectional sliding-window mask). Each sequence attends over its own
tokens only (right padding), in blocks sized by its length alone, so its features are the same bit for bit in any
batch (attend_blocked).

Bounded memory for long texts (ModernBERT reads 8,192 tokens): attention runs in blocks of query rows
(attend_blocked), a full-attention block against every key, a sliding-window block only against the keys its
window can reach, so no (T, T) array is made (unless the attention maps are asked for); the MLP runs in row blocks.
Every linear layer goes through the model's layer steps (bert.layer_steps: fp32, bf16 or int8), so every precision runs.

Hidden states: index 0 the embeddings, i the residual stream after layer i, and the last (L) after final_norm, as
transformers' last_hidden_state (what sentence-transformers pools).
Padding: position ids are 0..T-1 for every row (right padding leaves real tokens' positions as transformers gives
them; transformers' unpadded flash path gives real tokens the same results).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .config import BertConfig
from ..errors import WeightsError
from ..ops.gemm import PRECISIONS, to_bf16
from .bert import (
    ACTIVATIONS_INPLACE,
    MASK_NEG,
    Batch,
    ForwardOutput,
    Workspace,
    additive_mask,
    equal_runs,
    layer_norm_,
    layer_steps,
    layers_to_run,
    masked_softmax_,
    softmax_,
    word_rows,
    zeros,
)
from .weights import BertWeights, LayerWeights, leftover_tensors, read_unprefixed, take_tensor, untied_decoder_missing

# One table: our name -> (checkpoint name without the "model." prefix, expected shape from the config, when present:
# None always, else the config flag that says the tensor exists). Linear weights are stored (out, in), transposed.
MB_EMB = {
    "word": ("embeddings.tok_embeddings.weight", lambda c: (c.vocab_size, c.hidden_size), None),
    "ln_g": ("embeddings.norm.weight", lambda c: (c.hidden_size,), None),
    "ln_b": ("embeddings.norm.bias", lambda c: (c.hidden_size,), "norm_bias"),
    "final_g": ("final_norm.weight", lambda c: (c.hidden_size,), None),
    "final_b": ("final_norm.bias", lambda c: (c.hidden_size,), "norm_bias"),
}
MB_LAYER = {
    "ln1_g": ("layers.{i}.attn_norm.weight", lambda c: (c.hidden_size,), None),  # not in layer 0
    "ln1_b": ("layers.{i}.attn_norm.bias", lambda c: (c.hidden_size,), "norm_bias"),
    "qkv_w": ("layers.{i}.attn.Wqkv.weight", lambda c: (3 * c.hidden_size, c.hidden_size), None),
    "qkv_b": ("layers.{i}.attn.Wqkv.bias", lambda c: (3 * c.hidden_size,), "attention_bias"),
    "o_w": ("layers.{i}.attn.Wo.weight", lambda c: (c.hidden_size, c.hidden_size), None),
    "o_b": ("layers.{i}.attn.Wo.bias", lambda c: (c.hidden_size,), "attention_bias"),
    "ln2_g": ("layers.{i}.mlp_norm.weight", lambda c: (c.hidden_size,), None),
    "ln2_b": ("layers.{i}.mlp_norm.bias", lambda c: (c.hidden_size,), "norm_bias"),
    "up_w": ("layers.{i}.mlp.Wi.weight", lambda c: (2 * c.intermediate_size, c.hidden_size), None),
    "up_b": ("layers.{i}.mlp.Wi.bias", lambda c: (2 * c.intermediate_size,), "mlp_bias"),
    "down_w": ("layers.{i}.mlp.Wo.weight", lambda c: (c.hidden_size, c.intermediate_size), None),
    "down_b": ("layers.{i}.mlp.Wo.bias", lambda c: (c.hidden_size,), "mlp_bias"),
}
MB_LINEAR = ("qkv_w", "o_w", "up_w", "down_w")
# ModernBertForMaskedLM: head (dense, classifier_activation, norm), decoder tied to the word embeddings (+ bias).
MB_MLM = {
    "dense_w": ("head.dense.weight", lambda c: (c.hidden_size, c.hidden_size), None),
    "dense_b": ("head.dense.bias", lambda c: (c.hidden_size,), "classifier_bias"),
    "ln_g": ("head.norm.weight", lambda c: (c.hidden_size,), None),
    "ln_b": ("head.norm.bias", lambda c: (c.hidden_size,), "norm_bias"),
    "bias": ("decoder.bias", lambda c: (c.vocab_size,), "decoder_bias"),
}
MB_MLM_DECODER = ("decoder.weight", lambda c: (c.vocab_size, c.hidden_size))
MB_OTHER_HEADS = ("classifier.", "head.", "qa_outputs.")  # other tasks' heads (ModernBertFor*)
MB_PREFIX = "model."
QUERY_BLOCK_FLOATS = 1 << 22  # about 16 MiB of attention scores per query block


@dataclass
class ModernBertWeights(BertWeights):
    """BertWeights (position: an empty table; token_type None; emb_ln_b / biases None when the checkpoint has none;
    layer 0's ln1_g None: no attention norm) + final_norm."""

    final_g: np.ndarray | None = None
    final_b: np.ndarray | None = None
    post_layer_norm = False  # pre-LayerNorm: no int8 smoothing (gemm.int8_smoothing)

    def _arrays(self) -> list:
        arrays = [self.word, self.emb_ln_g, self.emb_ln_b, self.final_g, self.final_b]
        for lw in self.layers:
            arrays += list(vars(lw).values())
        return [a for a in arrays if a is not None]

    @property
    def n_params(self) -> int:
        return int(sum(int(np.prod(a.shape)) for a in self._arrays()))

    def nbytes(self) -> int:
        return int(sum(getattr(a, "nbytes", 0) for a in self._arrays()))


def load_modernbert_weights(model_dir: str | Path, config: BertConfig, precision: str = "fp32") -> ModernBertWeights:
    """Load, map, check and transpose every tensor of a ModernBERT checkpoint (ModernBertModel / ModernBertFor*,
    with or without the ``model.`` prefix); precision "bf16" stores the layers' linear weights as bf16 bit patterns."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {PRECISIONS}")
    model_dir = Path(model_dir)
    tensors, files, where = read_unprefixed(model_dir, MB_PREFIX)
    c = config
    used: set[str] = set()

    def take_table(table: dict, i: int | None = None) -> dict:
        out = {}
        for k, (n, s, flag) in table.items():
            if (flag is not None and not getattr(c, flag)) or (i == 0 and k in ("ln1_g", "ln1_b")):
                out[k] = None
                continue
            out[k] = take_tensor(tensors, n.format(i=i), s(c), where, used)
        return out

    def linear_w(a: np.ndarray) -> np.ndarray:  # (out, in) checkpoint weight -> (in, out), bf16 when asked
        a = np.ascontiguousarray(a.T)
        return to_bf16(a, saturate=True) if precision == "bf16" else a

    emb = take_table(MB_EMB)
    layers = []
    for i in range(c.num_hidden_layers):
        t = take_table(MB_LAYER, i)
        for k in MB_LINEAR:
            t[k] = linear_w(t[k])
            tensors.pop(MB_LAYER[k][0].format(i=i), None)  # the (out, in) copy is not needed any more
        layers.append(LayerWeights(**t))
    if f"layers.{c.num_hidden_layers}.attn.Wqkv.weight" in tensors:
        raise WeightsError(
            f"{where}: the checkpoint has more layers than num_hidden_layers={c.num_hidden_layers} in config.json",
            "use the config.json that came with these weights")
    if "layers.0.attn_norm.weight" in tensors:
        raise WeightsError(f"{where}: 'layers.0.attn_norm.weight': ModernBERT's first layer has no attention norm",
                           "these weights are not a ModernBERT as transformers builds it")
    w = ModernBertWeights(config=c, word=emb["word"], position=np.zeros((0, c.hidden_size), dtype=np.float32),
                          token_type=None, emb_ln_g=emb["ln_g"], emb_ln_b=emb["ln_b"], layers=layers, files=files,
                          precision=precision, final_g=emb["final_g"], final_b=emb["final_b"])
    w.missing_pooler_reason = f"{where}: ModernBERT has no pooler (use cls or mean pooling)"
    if "head.dense.weight" in tensors and "classifier.weight" not in tensors:
        m = take_table(MB_MLM)
        m["dense_w"] = np.ascontiguousarray(m["dense_w"].T)
        dec = MB_MLM_DECODER[0]
        m["decoder_w"] = take_tensor(tensors, dec, MB_MLM_DECODER[1](c), where, used) if dec in tensors else w.word
        w.missing_mlm_reason = untied_decoder_missing(c, tensors, dec, where)
        w.mlm = None if w.missing_mlm_reason else m
    w.ignored = leftover_tensors(tensors, used, where, "ModernBERT", MB_OTHER_HEADS,
                                 hint=" (check attention_bias, mlp_bias, norm_bias)")
    return w


# --------------------------------------------------------------------------- rotary positions
@lru_cache(maxsize=32)
def rotary(T: int, hs: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (T, hs) float32, of positions 0..T-1: angle[p, j] = p * theta^(-2(j mod hs/2) / hs), as
    transformers' default rotary embedding (float32 angles). Cached per length; read-only."""
    inv = (1.0 / (theta ** (np.arange(0, hs, 2, dtype=np.float64) / hs))).astype(np.float32)  # (hs/2,)
    freqs = np.arange(T, dtype=np.float32)[:, None] * inv[None, :]  # (T, hs/2) float32 products
    ang = np.concatenate([freqs, freqs], axis=1)
    cos, sin = np.cos(ang), np.sin(ang)
    cos.setflags(write=False)
    sin.setflags(write=False)
    return cos, sin


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """(B, nh, T, hs) -> x cos + rotate_half(x) sin, rotate_half(x) = [-x2 | x1] (a new array)."""
    h = x.shape[-1] // 2
    out = x * cos
    out[..., :h] -= x[..., h:] * sin[:, :h]
    out[..., h:] += x[..., :h] * sin[:, h:]
    return out


# --------------------------------------------------------------------------- linear layers, norms
def lin(P, x: np.ndarray, wt, b: np.ndarray | None, out: np.ndarray, bt: Batch, row0: int = 0) -> np.ndarray:
    """(m, in) float32 rows (token rows row0.. of the batch) @ wt + b into ``out`` (m, out), by the precision's layer
    steps ``P`` (bert.layer_steps, picked once per forward pass: for bf16 the rows rounded to bf16 first, for int8
    quantized, with the batch's float token rows in float)."""
    return P.linear(x, wt, b, out, bt, row0)


def norm_(x: np.ndarray, g: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
    """In place LayerNorm of (N, H) rows, without a shift when the checkpoint has none (norm_bias false)."""
    return layer_norm_(x, g, zeros(x.shape[1]) if b is None else b, eps)


# --------------------------------------------------------------------------- attention
def window_mask(q0: int, q1: int, k0: int, k1: int, side: int | None) -> np.ndarray | None:
    """(q1 - q0, k1 - k0) bool: key j within the sliding window of query i (|i - j| <= side); None: global."""
    if side is None:
        return None
    d = np.arange(k0, k1)[None, :] - np.arange(q0, q1)[:, None]
    return np.abs(d) <= side


def attend_blocked(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray, side: int | None,
                   want_probs: bool = False, block_floats: int = QUERY_BLOCK_FLOATS) -> tuple[np.ndarray, np.ndarray | None]:
    """q, k, v (B, nh, T, hs) (rotated), keep (B, T) bool (real tokens, right padding) -> context (B, nh, T, hs) and,
    when asked, the probabilities (B, nh, T, T); a padding query's context and probabilities are 0.

    Each sequence over its own tokens, sequences of one length together (bert.equal_runs), in blocks whose
    size depends on that length alone (attend_run), so a sequence's context is the same bit for bit alone and in any
    batch: the batched products and softmax sums over the padded length, in blocks sized by the batch, rounded it by
    the batch (~5e-7 of a feature at fp32, which bf16's rounding and int8's steps turned into ~1e-3). A change of its
    rounding must change cache.store.attention_revision's value, so that vectors cached before it are not served."""
    B, nh, T, hs = q.shape
    ctx = np.zeros_like(q)
    probs = np.zeros((B, nh, T, T), dtype=np.float32) if want_probs else None
    for s, e, L in equal_runs(keep.sum(axis=1)):  # sequences s..e-1 have L real tokens each
        if L:
            attend_run(q[s:e, :, :L], k[s:e, :, :L], v[s:e, :, :L], side, ctx[s:e, :, :L],
                       None if probs is None else probs[s:e, :, :L, :L], block_floats)
    return ctx, probs


def attend_run(q: np.ndarray, k: np.ndarray, v: np.ndarray, side: int | None, out: np.ndarray,
               probs: np.ndarray | None, block_floats: int) -> None:
    """n sequences of L tokens each, no padding: q, k, v (n, nh, L, hs) -> out (n, nh, L, hs) (and probs (n, nh, L, L)).
    Query rows in blocks: a global block (side None) against every key, a sliding-window block only against keys
    q0 - side .. q1 + side, masked to the window; the block's rows and its sequences per product from L, nh and
    side alone (within ``block_floats`` scores), never from n."""
    n, nh, L, hs = q.shape
    scale = np.float32(1.0 / np.sqrt(hs))
    if side is None:  # qb rows against all L keys
        qb = max(16, block_floats // max(1, nh * L))
    else:  # qb rows against qb + 2 side keys: 2 side rows (half the products are outside the window)
        qb = max(16, min(2 * side, block_floats // max(1, nh * 4 * side)))
    per = max(1, block_floats // max(1, nh * qb * (L if side is None else min(L, qb + 2 * side))))  # sequences a product
    for b0 in range(0, n, per):
        b1 = min(n, b0 + per)
        for q0 in range(0, L, qb):
            q1 = min(L, q0 + qb)
            k0, k1 = (0, L) if side is None else (max(0, q0 - side), min(L, q1 + side))
            s = np.matmul(q[b0:b1, :, q0:q1], k[b0:b1, :, k0:k1].transpose(0, 1, 3, 2))  # (m, nh, qb, kb)
            win = window_mask(q0, q1, k0, k1, side)
            if win is None:
                s = masked_softmax_(s, scale, np.zeros((b1 - b0, 1, 1, k1 - k0), np.float32))
            else:
                s *= scale
                s += np.where(win, np.float32(0.0), MASK_NEG)[None, None]  # (1, 1, qb, kb)
                s = softmax_(s)
            np.matmul(s, v[b0:b1, :, k0:k1], out=out[b0:b1, :, q0:q1])
            if probs is not None:
                probs[b0:b1, :, q0:q1, k0:k1] = s


def attention(w: ModernBertWeights, P, i: int, h: np.ndarray, keep: np.ndarray,
              bt: Batch) -> tuple[np.ndarray, np.ndarray | None]:
    """Layer i's attention on (N, H) normed rows -> (N, H) output (Wo applied, its bias too) and the probabilities."""
    c, lw = w.config, w.layers[i]
    B, T, ws = bt.B, bt.T, bt.ws
    N, H = h.shape
    nh = c.num_attention_heads
    hs = H // nh
    qkv = lin(P, h, lw.qkv_w, lw.qkv_b, ws.take("qkv", (N, 3 * H)), bt)  # (N, 3H)
    qkv = qkv.reshape(B, T, 3, nh, hs).transpose(2, 0, 3, 1, 4)  # (3, B, nh, T, hs)
    local = c.layer_types[i] == "sliding_attention"
    cos, sin = rotary(T, hs, c.local_rope_theta if local else c.global_rope_theta)
    q, k = rotate(qkv[0], cos, sin), rotate(qkv[1], cos, sin)
    ctx, probs = attend_blocked(q, k, qkv[2], keep, c.local_attention // 2 if local else None, bt.want_probs)
    rows = np.ascontiguousarray(ctx.transpose(0, 2, 1, 3)).reshape(N, H)  # (N, H) token rows
    return lin(P, rows, lw.o_w, lw.o_b, ws.take("attn_out", (N, H)), bt), probs


def mlp_(w: ModernBertWeights, P, i: int, x: np.ndarray, bt: Batch, block: int = 1024) -> np.ndarray:
    """In place x (N, H) += Wo(act(u) * g), [u | g] = Wi(LN_mlp(x)), ``block`` rows at a time; returns x."""
    c, lw = w.config, w.layers[i]
    N, H = x.shape
    F = c.intermediate_size
    act = ACTIVATIONS_INPLACE[c.act]
    for s in range(0, N, block):
        m = min(block, N - s)
        h = norm_(np.array(x[s:s + m]), lw.ln2_g, lw.ln2_b, c.layer_norm_eps)  # (m, H)
        u = lin(P, h, lw.up_w, lw.up_b, bt.ws.take("mlp_in", (m, 2 * F)), bt, s)  # (m, 2F)
        a = act(u[:, :F])  # (m, F) view, in place
        a *= u[:, F:]
        y = lin(P, np.ascontiguousarray(a), lw.down_w, lw.down_b, bt.ws.take("mlp_out", (m, H)), bt, s)
        x[s:s + m] += y
    return x


# --------------------------------------------------------------------------- forward
def modernbert_embed(w: ModernBertWeights, input_ids: np.ndarray) -> np.ndarray:
    """(B, T) ids -> (B*T, H) LN(tok_embeddings[ids]) (a new array)."""
    x = word_rows(w.word, input_ids.reshape(-1))  # (N, H)
    return norm_(x, w.emb_ln_g, w.emb_ln_b, w.config.layer_norm_eps)


def modernbert_forward(w: ModernBertWeights, input_ids: np.ndarray, token_type_ids: np.ndarray | None,
                       attention_mask: np.ndarray, keep: tuple[int, ...] | None = None, output_attentions: bool = False,
                       ws: Workspace | None = None, at: np.ndarray | None = None) -> ForwardOutput:
    """bert.bert_forward for ModernBERT (same arguments and result; ``token_type_ids`` ignored, as ModernBertModel
    takes none). Hidden state L is after final_norm; the others are the residual stream. ``at`` is not used (every
    layer runs on every token: the result's ``at`` stays None)."""
    c = w.config
    L = c.num_hidden_layers
    B, T = input_ids.shape
    keep, last = layers_to_run(c, T, keep, output_attentions)
    ws = ws or Workspace()
    real = np.asarray(attention_mask).astype(bool)  # (B, T)
    bt = Batch.of(c, additive_mask(attention_mask), ws, want_probs=output_attentions, ids=input_ids)
    P = layer_steps(w)  # the precision's steps, picked once: the layer loop never asks which runs
    P.mark(bt)  # int8: the batch's float token rows
    x = modernbert_embed(w, input_ids)  # (N, H) residual stream
    out = ForwardOutput(hidden={})
    for i in range(last + 1):
        if i > 0:
            lw = w.layers[i - 1]
            h = x if lw.ln1_g is None else norm_(x.copy(), lw.ln1_g, lw.ln1_b, c.layer_norm_eps)
            a, probs = attention(w, P, i - 1, h, real, bt)
            x += a
            mlp_(w, P, i - 1, x, bt)
            if output_attentions:
                out.attentions.append(probs)
        if i in keep:
            y = norm_(x.copy(), w.final_g, w.final_b, c.layer_norm_eps) if i == L else x.copy()
            out.hidden[i] = y.reshape(B, T, -1)  # (B, T, H)
    return out


def modernbert_mlm_logits(w: ModernBertWeights, h: np.ndarray) -> np.ndarray:
    """(M, H) last hidden states (after final_norm) -> (M, V) logits of ModernBertForMaskedLM: head.dense,
    classifier_activation, head.norm, decoder (tied to the word embeddings) + its bias."""
    m, c = w.mlm, w.config
    t = h @ m["dense_w"]
    if m["dense_b"] is not None:
        t += m["dense_b"]
    t = norm_(ACTIVATIONS_INPLACE[c.classifier_act](t), m["ln_g"], m["ln_b"], c.layer_norm_eps)
    logits = t @ m["decoder_w"].T
    return logits + m["bias"] if m["bias"] is not None else logits
