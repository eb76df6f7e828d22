"""Pooling token states into one vector per row.

Shapes: B batch, T tokens, H hidden, k selected layers.
All functions take the (B, T) attention mask and ignore padded positions exactly.
"""

from __future__ import annotations

import numpy as np

POOLINGS = ("pooled", "cls", "mean", "max")
LAYER_AGGS = ("mean", "concat")


def pool_cls(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): the [CLS] token state."""
    return h[:, 0, :].copy()


def pool_mean(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): mean over real tokens only."""
    m = mask.astype(np.float32)[:, :, None]  # (B, T, 1)
    return (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), np.float32(1e-9))


def pool_max(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): max over real tokens only."""
    return np.where(mask.astype(bool)[:, :, None], h, np.float32(-np.inf)).max(axis=1)


TOKEN_POOLS = {"cls": pool_cls, "mean": pool_mean, "max": pool_max}


def combine_layers(per_layer: list[np.ndarray], how: str) -> np.ndarray:
    """k arrays (B, H) -> (B, H) averaged, or (B, k*H) concatenated in the order given."""
    if len(per_layer) == 1:
        return per_layer[0]
    if how == "concat":
        return np.concatenate(per_layer, axis=1)
    return np.mean(np.stack(per_layer), axis=0, dtype=np.float32)


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows scaled to unit L2 norm (as torch.nn.functional.normalize)."""
    norm = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float32))[:, None]
    return x / np.maximum(norm, np.float32(eps))


def parse_layers(spec, num_layers: int) -> tuple[int, ...]:
    """Layer selection -> hidden-state indices in 0..L (0 = embeddings, L = last layer).

    Accepts None (last layer), an int, a list of ints, or a string like "-1", "-4,-3,-2,-1",
    "-4:" (the last four) or "9:12". Negative numbers count from the end as in
    transformers' hidden_states tuple (which has L + 1 entries).
    """
    from .errors import BertfeatError

    n = num_layers + 1
    if spec is None:
        return (num_layers,)
    if isinstance(spec, str):
        s = spec.strip()
        try:
            if ":" in s:
                a, b = s.split(":", 1)
                idx = list(range(n))[slice(int(a) if a.strip() else None, int(b) if b.strip() else None)]
            else:
                idx = [int(p) for p in s.split(",") if p.strip()]
        except ValueError:
            raise BertfeatError(f"--layers '{spec}' is not understood",
                                "give layer numbers like -1, -4,-3,-2,-1 or -4: (0 = embeddings)") from None
    elif isinstance(spec, (int, np.integer)):
        idx = [int(spec)]
    else:
        idx = [int(i) for i in spec]
    if not idx:
        raise BertfeatError(f"--layers '{spec}' selects no layer", "give at least one layer, e.g. -1")
    out = []
    for i in idx:
        if not -n <= i < n:
            raise BertfeatError(
                f"layer {i} does not exist: the model has {num_layers} layers (hidden states 0..{num_layers}, or -{n}..-1)",
                "choose layers in that range; -1 is the last layer, 0 the embeddings",
            )
        out.append(i % n)
    return tuple(out)
