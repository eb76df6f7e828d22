"""Pooling token states into one vector per row.

Shapes: B batch, T tokens, H hidden, k selected layers.
All functions take the (B, T) attention mask and ignore padded positions exactly.
"""

from __future__ import annotations

import numpy as np

from ..ops import gemm

#: Token poolings (sentence-transformers' names); "pooled" is BERT's pooler on [CLS]. Token poolings
#: combine with "+" ("mean+max"), concatenated in the order given, as a Pooling module's list does.
TOKEN_POOLING_NAMES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
POOLINGS = ("pooled",) + TOKEN_POOLING_NAMES
LAYER_AGGS = ("mean", "concat")


def first_positions(mask: np.ndarray) -> np.ndarray:
    """(B, T) mask -> (B,) the first unmasked token of each row (0 when none)."""
    return np.argmax(mask, axis=1)


def last_positions(mask: np.ndarray) -> np.ndarray:
    """(B, T) mask -> (B,) the last unmasked token of each row (T - 1 when none)."""
    return mask.shape[1] - 1 - np.argmax(mask.astype(bool)[:, ::-1], axis=1)


#: poolings that read one token per row of the last hidden state, and where (from the pooling mask): the forward pass
#: can compute the last layer at that token alone (bert.run_layers' ``at``); the pooler reads the first token whatever
#: the mask (an excluded prompt too)
ONE_TOKEN_POOLS = {"cls": first_positions, "lasttoken": last_positions,
                   "pooled": lambda mask: np.zeros(len(mask), dtype=np.int64)}


def pool_cls(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): the first unmasked token (the [CLS] / <s>; the first token after an excluded prompt)."""
    return h[np.arange(h.shape[0]), first_positions(mask), :].copy()


def pool_mean(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): mean over real tokens only."""
    m = mask.astype(np.float32)[:, :, None]  # (B, T, 1)
    return (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), np.float32(1e-9))


def pool_mean_sqrt_len(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): sum over real tokens / sqrt(their count)."""
    m = mask.astype(np.float32)[:, :, None]  # (B, T, 1)
    return (h * m).sum(axis=1) / np.sqrt(np.maximum(m.sum(axis=1), np.float32(1e-9)))


def pool_weightedmean(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): mean weighted by position 1..T over real tokens (later tokens count more)."""
    w = mask.astype(np.float32) * np.arange(1, h.shape[1] + 1, dtype=np.float32)[None, :]  # (B, T)
    return np.einsum("bth,bt->bh", h, w) / np.maximum(w.sum(axis=1, keepdims=True), np.float32(1e-9))


def pool_lasttoken(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): the last real token (the [SEP] / </s> of a right-padded row); zeros if none."""
    out = h[np.arange(h.shape[0]), last_positions(mask), :].copy()
    out[~mask.astype(bool).any(axis=1)] = 0.0
    return out


def pool_max(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, T, H) -> (B, H): max over real tokens only."""
    return np.where(mask.astype(bool)[:, :, None], h, np.float32(-np.inf)).max(axis=1)


TOKEN_POOLS = {"cls": pool_cls, "max": pool_max, "mean": pool_mean, "mean_sqrt_len_tokens": pool_mean_sqrt_len,
               "weightedmean": pool_weightedmean, "lasttoken": pool_lasttoken}


def split_pooling(pooling: str) -> tuple[str, ...]:
    """'mean+max' -> ('mean', 'max'); checked against POOLINGS ('pooled' only alone), each named once and no item
    empty ('mean++max' and 'mean+mean' were read as mean+max and mean twice, without a word)."""
    from ..errors import BertfeatError

    modes = tuple(m.strip() for m in str(pooling).split("+"))
    for m in modes:
        if m and m not in POOLINGS:  # the option named, as its neighbours below: --pooling 'foo', pooling='foo'
            what = (f"unknown {quoted_option('pooling', pooling)}" if len(modes) == 1
                    else f"unknown pooling '{m}' in {quoted_option('pooling', pooling)}")
            raise BertfeatError(what, f"choose one of {', '.join(POOLINGS)}, or token poolings joined with '+' such as "
                                "mean+max")
    named = [m for m in modes if m]
    if len(named) < len(modes):
        if named:
            _refuse_empty_item("pooling", pooling, modes, "+", "join the poolings with single '+'")
        raise BertfeatError(f"{quoted_option('pooling', pooling)} has an empty item ({_which_empty(modes)})",
                            "name a pooling, e.g. mean")
    if "pooled" in modes and len(modes) > 1:
        raise BertfeatError("pooling 'pooled' cannot be combined with others", "use it alone, or combine cls, mean, max ...")
    twice = _first_repeat(modes)
    if twice is not None:
        raise BertfeatError(f"{quoted_option('pooling', pooling)} names {twice} twice",
                            f"name each pooling once: {quoted_option('pooling', '+'.join(dict.fromkeys(modes)))}")
    return modes


def quoted_option(name: str, value) -> str:
    """An option's value in a message, quoted on the command line as the shell takes it (--layers '-1,-1')."""
    from ..errors import opt

    return opt(name, value, cli=f"'{value}'") if isinstance(value, str) else opt(name, value)


def _which_empty(items) -> str:
    """Where the first empty item of a split option value is: 'item 2 of 3'."""
    return f"item {next(i for i, x in enumerate(items, 1) if not x)} of {len(items)}"


def _refuse_empty_item(name: str, value, items, sep: str, how: str) -> None:
    """Refuse an option value split at ``sep`` whose ``items`` (stripped) hold an empty one between named ones: a
    separator at the end or start alone is said as such ('-2,-1,' ends with a ',': a list cut short, e.g. a shell
    variable that expanded to nothing, as likely as a stray comma); the fix is the value without the empty items."""
    from ..errors import BertfeatError

    kept = quoted_option(name, sep.join(x for x in items if x))
    empty = [i for i, x in enumerate(items) if not x]
    mark = "comma" if sep == "," else f"'{sep}'"
    if empty == [len(items) - 1]:
        raise BertfeatError(f"{quoted_option(name, value)} ends with a {mark} (an empty last item)",
                            f"remove the trailing {mark}: {kept}")
    if empty == [0]:
        raise BertfeatError(f"{quoted_option(name, value)} starts with a {mark} (an empty first item)",
                            f"remove the leading {mark}: {kept}")
    raise BertfeatError(f"{quoted_option(name, value)} has an empty item ({_which_empty(items)})", f"{how}: {kept}")


def _first_repeat(items):
    """The first item given again, or None."""
    seen = set()
    for x in items:
        if x in seen:
            return x
        seen.add(x)
    return None


def pool_tokens(h: np.ndarray, mask: np.ndarray, modes: tuple[str, ...]) -> np.ndarray:
    """(B, T, H) -> (B, len(modes) * H): each token pooling, concatenated in order."""
    outs = [TOKEN_POOLS[m](h, mask) for m in modes]
    return outs[0] if len(outs) == 1 else np.concatenate(outs, axis=1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) of a very negative x is inf: 1 / inf is the 0 wanted
        return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


def _softplus(x: np.ndarray) -> np.ndarray:
    """torch.nn.Softplus() (beta 1): log(1 + e^x), x itself above the threshold 20."""
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, np.float32(20.0)))))


#: torch.nn's activations with their defaults (stmodules.DENSE_ACTIVATIONS), in float32
_DENSE_ACTS = {
    "identity": lambda x: x,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.float32(0.0)),
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "leaky_relu": lambda x: np.where(x > 0, x, x * np.float32(0.01)),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, np.float32(0.0)))),
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
}


def dense(x: np.ndarray, layer) -> np.ndarray:
    """(B, in) -> (B, out): a sentence-transformers Dense module, act(x W + b) (+ residual); a row's product
    independent of B where the weights are packed for it (gemm.row_stable)."""
    y = gemm.matmul(x, layer.w)
    if layer.b is not None:
        y += layer.b
    if layer.activation == "gelu":
        from .bert import gelu_erf
        y = gelu_erf(y)
    else:
        y = _DENSE_ACTS[layer.activation](y)
    if layer.residual:
        y = y + (x if layer.residual_w is None else gemm.matmul(x, layer.residual_w))
    return y.astype(np.float32, copy=False)


def layer_norm(x: np.ndarray, step) -> np.ndarray:
    """(B, D) -> (B, D): a sentence-transformers LayerNorm module (torch.nn.LayerNorm: biased variance, its eps), on
    a copy (``x`` may be a workspace's); each row on its own, so independent of its batch."""
    from .bert import layer_norm_

    return layer_norm_(np.array(x, dtype=np.float32), step.g, step.b, step.eps)


def weighted_layers(per_layer: list[np.ndarray], weights) -> np.ndarray:
    """k arrays of one shape (each layer's token states, or their one-token poolings) -> their average with ``weights``
    (k,), as sentence-transformers' WeightedLayerPooling: sum(w_k x_k) / sum(w), in float32; elementwise, so a row's
    result does not depend on its batch."""
    w = np.asarray(weights, dtype=np.float32)
    acc = per_layer[0] * w[0]
    for x, wk in zip(per_layer[1:], w[1:]):
        acc += x * wk
    acc /= w.sum(dtype=np.float32)
    return acc


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


def _check_slice_bounds(sl: slice, spec, num_layers: int) -> None:
    """A range's bounds must lie in the model's hidden states 0..L (n = L + 1 of them): Python would clamp '4:12' on a
    6-layer model to 4..6 silently, and select nothing with '7:' or '9:12' (a model taken for another). A start names
    a hidden state (-n .. n-1); a stop may also be one past the end: n going up, -(n+1) going down."""
    from ..errors import BertfeatError

    n = num_layers + 1
    down = sl.step is not None and sl.step < 0
    stop_lo, stop_hi = (-n - 1, n - 1) if down else (-n, n)
    for bound, lo, hi in ((sl.start, -n, n - 1), (sl.stop, stop_lo, stop_hi)):
        if bound is not None and not lo <= bound <= hi:
            last = min(4, num_layers)
            raise BertfeatError(f"{quoted_option('layers', spec)} reaches past the model: it has {_hidden_states(num_layers)}",
                                f"choose layers in that range, e.g. -{last}: for the last {last}" if last > 1
                                else "choose layers in that range, e.g. -1 for the last")


def _hidden_states(num_layers: int) -> str:
    """What a model's layers are, for a refusal of layers past them: '6 layers (hidden states 0..6, or -7..-1)'."""
    return (f"{num_layers} layer{'s' * (num_layers != 1)} (hidden states 0..{num_layers}, or "
            f"-{num_layers + 1}..-1)")


def parse_layers(spec, num_layers: int) -> tuple[int, ...]:
    """Layer selection -> hidden-state indices in 0..L (0 = embeddings, L = last layer).

    Accepts None (last layer), an int, a list of ints, or a string like "-1", "-4,-3,-2,-1",
    "-4:" (the last four) or "9:12". Negative numbers count from the end as in
    transformers' hidden_states tuple (which has L + 1 entries).
    """
    from ..errors import BertfeatError

    n = num_layers + 1
    if spec is None:
        return (num_layers,)
    if isinstance(spec, str):
        s = spec.strip()
        sl = None
        try:
            if ":" in s:
                a, b = s.split(":", 1)
                sl = slice(int(a) if a.strip() else None, int(b) if b.strip() else None)
            else:
                idx = [int(p) for p in s.split(",") if p.strip()]
        except ValueError:
            raise BertfeatError(f"{quoted_option('layers', spec)} is not understood",
                                "give layer numbers like -1, -4,-3,-2,-1 or -4: (0 = embeddings)") from None
        if sl is None and s:
            _refuse_empty_items(spec, [p.strip() for p in s.split(",")])
        if sl is not None:
            _check_slice_bounds(sl, spec, num_layers)
            idx = list(range(n))[sl]
    elif np.ndim(spec) == 0 and np.issubdtype(np.asarray(spec).dtype, np.integer):  # an int, NumPy's (0-d too); not a bool
        idx = [int(spec)]
    elif isinstance(spec, slice):  # layers=slice(-4, None): the slice of the hidden states, as a string "-4:" is
        try:
            idx = list(range(n))[spec]
        except (TypeError, ValueError):  # a step of 0, a bound that is not an int
            raise BertfeatError(f"{quoted_option('layers', spec)} is not a layer selection",
                                "give a slice of ints with a step other than 0, e.g. slice(-4, None)") from None
        _check_slice_bounds(spec, spec, num_layers)
    else:
        items = list(spec) if isinstance(spec, (list, tuple, range, np.ndarray)) else None
        if items is None or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items):
            raise BertfeatError(f"{quoted_option('layers', spec)} is not a layer selection",
                                "give an int, a list of ints, a slice, or a string like '-1', '-4,-3,-2,-1' or '-4:' "
                                "(0 = embeddings)")
        idx = [int(i) for i in items]
    if not idx:
        raise BertfeatError(f"{quoted_option('layers', spec)} selects no layer", "give at least one layer, e.g. -1")
    out = []
    for i in idx:
        if not -n <= i < n:  # the option named, as its neighbours: --layers '7', layers=[-1, 7]
            raise BertfeatError(f"{quoted_option('layers', spec)} names layer {i}, which does not exist: the model has "
                                f"{_hidden_states(num_layers)}",
                                "choose layers in that range; -1 is the last layer, 0 the embeddings")
        out.append(i % n)
    _refuse_repeats(spec, idx, out, num_layers)
    return tuple(out)


def _refuse_empty_items(spec: str, items: list[str]) -> None:
    """'1,,2' names no layer between its commas: a typo, not a wish to skip one (it was read as '1,2'); '-2,-1,' ends
    with one, a list cut short or a stray comma."""
    named = [x for x in items if x]
    if named and len(named) < len(items):  # (none named: "selects no layer")
        _refuse_empty_item("layers", spec, items, ",", "separate the layers by single commas")


def _refuse_repeats(spec, given: list[int], resolved: list[int], num_layers: int) -> None:
    """A hidden state named twice (-1,-1; or 2,-1 on a 2-layer model) would count twice in the mean, or repeat its
    features with concat: refused, as a list that says one thing twice is likelier a mistake than a weighting."""
    from ..errors import BertfeatError

    first: dict[int, int] = {}  # hidden state -> the number that named it first, in the order given
    repeat = None
    for g, i in zip(given, resolved):
        if i in first and repeat is None:
            repeat = (first[i], g, i)
        first.setdefault(i, g)
    if repeat is None:
        return
    a, b, i = repeat
    how = f"layer {a} twice" if a == b else f"layer {i} twice (as {a} and {b}: the model has {num_layers} layers)"
    once = list(first.values())
    kept = ",".join(map(str, once)) if isinstance(spec, str) else once
    raise BertfeatError(f"{quoted_option('layers', spec)} names {how}",
                        f"name each layer once: {quoted_option('layers', kept)}")
