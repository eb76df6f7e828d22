"""MPNet (model_type 'mpnet', e.g. sentence-transformers/all-mpnet-base-v2): its weights and forward-pass specifics.

Shapes: B batch, T tokens, H hidden, nh heads, NB relative-position buckets (relative_attention_num_buckets),
        V vocab, P position rows, N = B * T token rows.

MPNet's layers are BERT's post-LN layers (bert.encoder_layer, every linear layer through gemm.matmul, so fp32 /
bf16 / int8 all run) under other tensor names; what differs is around them:

    e = LN(word + position)                   no token types; position ids from padding_idx + 1 = 2 (as RoBERTa)
    bias[h, i, j] = table[bucket(j - i), h]   (nh, T, T), one for every layer (encoder.relative_attention_bias)
    scores = q k^T / sqrt(hs) + bias + mask   (bert.attend's optional bias)

bucket(): T5's bidirectional bucketing as transformers' MPNetEncoder.relative_position_bucket: 32 buckets (half per
direction), exact for |d| < 8, logarithmic up to max_distance 128, the last bucket beyond. transformers always uses 32
buckets (compute_position_bias's default), whatever relative_attention_num_buckets says (config.py refuses fewer rows).

Sentence pairs: MPNetModel has no token type embeddings and ignores token_type_ids; its tokenizer returns none
(both texts are type 0, framed <s> A </s></s> B </s>), so the Encoder zeroes the types, as for RoBERTa.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .config import MPNET_MAX_DISTANCE, MPNET_NUM_BUCKETS, BertConfig
from ..errors import WeightsError
from ..ops.gemm import PRECISIONS, to_bf16
from .bert import ForwardOutput, Workspace, additive_mask, layer_norm_, layers_to_run, run_layers, word_rows
from .weights import (
    LAYER_TABLE,
    MLM_DECODER,
    MLM_TABLE,
    POOLER_TABLE,
    BertWeights,
    LayerWeights,
    leftover_tensors,
    read_unprefixed,
    take_mlm_head,
    untied_decoder_missing,
    take_tensor,
)

# One table: our name -> (checkpoint name without the "mpnet." prefix, expected shape from the config).
# {i} is the layer index; linear weights are stored (out, in) and transposed at load.
MPNET_EMB = {
    "word": ("embeddings.word_embeddings.weight", lambda c: (c.vocab_size, c.hidden_size)),
    "position": ("embeddings.position_embeddings.weight", lambda c: (c.max_position_embeddings, c.hidden_size)),
    "ln_g": ("embeddings.LayerNorm.weight", lambda c: (c.hidden_size,)),
    "ln_b": ("embeddings.LayerNorm.bias", lambda c: (c.hidden_size,)),
    "rel_bias": ("encoder.relative_attention_bias.weight",
                 lambda c: (c.relative_attention_num_buckets, c.num_attention_heads)),
}
# BERT's layer under MPNet's attention names (the shapes are BERT's): attention.self.query -> attention.attn.q, ...
MPNET_RENAMES = (("attention.self.query", "attention.attn.q"), ("attention.self.key", "attention.attn.k"),
                 ("attention.self.value", "attention.attn.v"), ("attention.output.dense", "attention.attn.o"),
                 ("attention.output.LayerNorm", "attention.LayerNorm"))


def _mpnet_name(name: str) -> str:
    for bert, mpnet in MPNET_RENAMES:
        name = name.replace(bert, mpnet)
    return name


MPNET_LAYER = {k: (_mpnet_name(n), shape) for k, (n, shape) in LAYER_TABLE.items()}
MPNET_POOLER = POOLER_TABLE  # pooler.dense, as BERT's
# MPNetForMaskedLM's lm_head (dense, GELU, layer_norm, decoder tied to the word embeddings, bias), under the
# cls.predictions.* names weights.read_tensors gives every lm_head.* tensor: BERT's MLM tables
MPNET_MLM = MLM_TABLE
MPNET_MLM_DECODER = MLM_DECODER
MPNET_ALLOWED_UNUSED = {"embeddings.position_ids": "a buffer (0, 1, ..., P-1) older transformers versions saved"}
MPNET_OTHER_HEADS = ("classifier.", "qa_outputs.")  # other tasks' heads (MPNetFor*)
MPNET_PREFIX = "mpnet."


@dataclass
class MPNetWeights(BertWeights):
    """BertWeights (token_type is a single zero row: MPNet has no token types) + the shared relative position bias."""

    rel_bias: np.ndarray | None = None  # (NB, nh) float32

    @property
    def n_params(self) -> int:
        return super().n_params - self.token_type.size + self.rel_bias.size


def load_mpnet_weights(model_dir: str | Path, config: BertConfig, precision: str = "fp32") -> MPNetWeights:
    """Load, map, check, fuse and transpose every tensor of an MPNet checkpoint (MPNetModel / MPNetFor*, with or
    without the ``mpnet.`` prefix); precision "bf16" stores the layers' linear weights as bf16 bit patterns."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {PRECISIONS}")
    model_dir = Path(model_dir)
    tensors, files, where = read_unprefixed(model_dir, MPNET_PREFIX)
    c = config
    used: set[str] = set()

    def take(name: str, shape: tuple) -> np.ndarray:
        return take_tensor(tensors, name, shape, where, used)

    def linear(a: np.ndarray) -> np.ndarray:  # (out, in) checkpoint weight -> (in, out), bf16 when asked
        a = np.ascontiguousarray(a.T)
        return to_bf16(a, saturate=True) if precision == "bf16" else a

    emb = {k: take(n, s(c)) for k, (n, s) in MPNET_EMB.items()}
    layers = []
    for i in range(c.num_hidden_layers):
        t = {k: take(n.format(i=i), s(c)) for k, (n, s) in MPNET_LAYER.items()}
        qkv = np.concatenate([t["q_w"], t["k_w"], t["v_w"]], axis=0)  # (3H, H)
        layers.append(LayerWeights(
            qkv_w=linear(qkv), qkv_b=np.concatenate([t["q_b"], t["k_b"], t["v_b"]]),
            o_w=linear(t["o_w"]), o_b=t["o_b"], ln1_g=t["ln1_g"], ln1_b=t["ln1_b"],
            up_w=linear(t["up_w"]), up_b=t["up_b"], down_w=linear(t["down_w"]), down_b=t["down_b"],
            ln2_g=t["ln2_g"], ln2_b=t["ln2_b"]))
        for k in ("q_w", "k_w", "v_w", "o_w", "up_w", "down_w"):
            tensors.pop(MPNET_LAYER[k][0].format(i=i), None)  # the (out, in) copies are not needed any more
    if f"encoder.layer.{c.num_hidden_layers}.attention.attn.q.weight" in tensors:
        raise WeightsError(
            f"{where}: the checkpoint has more layers than num_hidden_layers={c.num_hidden_layers} in config.json",
            "use the config.json that came with these weights")
    w = MPNetWeights(config=c, word=emb["word"], position=emb["position"],
                     token_type=np.zeros((1, c.hidden_size), dtype=np.float32), emb_ln_g=emb["ln_g"],
                     emb_ln_b=emb["ln_b"], layers=layers, files=files, precision=precision, rel_bias=emb["rel_bias"])
    if all(n in tensors for n, _ in MPNET_POOLER.values()):
        p = {k: take(n, s(c)) for k, (n, s) in MPNET_POOLER.items()}
        w.pooler_w, w.pooler_b = np.ascontiguousarray(p["w"].T), p["b"]
    else:
        w.missing_pooler_reason = f"{where} has no pooler weights (pooler.dense.weight / pooler.dense.bias)"
    w.mlm = take_mlm_head(take, tensors, MPNET_MLM, MPNET_MLM_DECODER, c, w.word)
    if w.mlm is None and all(n in tensors for n, _ in MPNET_MLM.values()):
        w.missing_mlm_reason = untied_decoder_missing(c, tensors, MPNET_MLM_DECODER[0], where)
    w.ignored = leftover_tensors(tensors, used, where, "MPNet", MPNET_OTHER_HEADS, MPNET_ALLOWED_UNUSED, article="an")
    return w


# --------------------------------------------------------------------------- relative position bias
def relative_position_bucket(relative_position: np.ndarray, num_buckets: int = MPNET_NUM_BUCKETS,
                             max_distance: int = MPNET_MAX_DISTANCE) -> np.ndarray:
    """Relative positions (key - query, any int array) -> bucket ids (int64, same shape), bidirectional T5 style:
    half the buckets per direction (keys before the query in the upper half), |d| < num_buckets / 4 exact, then
    logarithmic up to ``max_distance``, the direction's last bucket beyond. float32 logarithms, as transformers."""
    n = -np.asarray(relative_position, dtype=np.int64)
    half = num_buckets // 2
    ret = np.where(n < 0, half, 0)
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore"):  # log(0) for the exact buckets, not used
        v = (np.log(n.astype(np.float32) / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
             * np.float32(half - max_exact))
    large = max_exact + np.trunc(np.where(n < max_exact, 0, v)).astype(np.int64)
    return ret + np.where(n < max_exact, n, np.minimum(large, half - 1))


@lru_cache(maxsize=64)
def position_buckets(T: int) -> np.ndarray:
    """(T, T) bucket of key j for query i, for sequences of T tokens (cached per length; read-only)."""
    pos = np.arange(T, dtype=np.int64)
    b = relative_position_bucket(pos[None, :] - pos[:, None])
    b.setflags(write=False)
    return b


def position_bias(w: MPNetWeights, T: int) -> np.ndarray:
    """(nh, T, T) float32 additive attention bias of every layer: table[bucket(j - i), h]."""
    return np.ascontiguousarray(w.rel_bias[position_buckets(T)].transpose(2, 0, 1))


# --------------------------------------------------------------------------- forward
def mpnet_embed(w: MPNetWeights, input_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(B, T) ids -> (B*T, H) LayerNorm(word + position), positions from padding_idx + 1 (pads are masked)."""
    B, T = input_ids.shape
    H = w.word.shape[1]
    x = word_rows(w.word, input_ids.reshape(-1), out=out).reshape(B, T, H)  # (B, T, H)
    off = w.config.position_offset
    pos = w.config.position_ids(input_ids)  # None unless a real token is the padding id (a literal <pad>)
    x += w.position[off:off + T][None, :, :] if pos is None else w.position[pos]
    return layer_norm_(x.reshape(B * T, H), w.emb_ln_g, w.emb_ln_b, w.config.layer_norm_eps)  # (N, H)


def mpnet_forward(w: MPNetWeights, input_ids: np.ndarray, token_type_ids: np.ndarray | None,
                  attention_mask: np.ndarray, keep: tuple[int, ...] | None = None, output_attentions: bool = False,
                  ws: Workspace | None = None, at: np.ndarray | None = None) -> ForwardOutput:
    """bert.bert_forward for MPNet (same arguments and result); ``token_type_ids`` is ignored, as MPNetModel does."""
    c = w.config
    B, T = input_ids.shape
    keep, last = layers_to_run(c, T, keep, output_attentions)
    ws = ws or Workspace()
    x = mpnet_embed(w, input_ids, out=ws.take("emb", (B * T, c.hidden_size)))  # (N, H)
    bias = position_bias(w, T) if last > 0 else None
    return run_layers(w, x, additive_mask(attention_mask), B, T, keep, last, output_attentions, ws, bias=bias, at=at,
                      ids=input_ids)
