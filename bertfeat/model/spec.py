"""What a feature vector means: ``FeatureSpec`` (every setting that changes a vector, so its provenance and cache key),
the long-text modes, and which specs one pass of the model serves exactly (``one_token``, ``exact_groups``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import BertfeatError, either, opt
from .pooling import LAYER_AGGS, ONE_TOKEN_POOLS, quoted_option, split_pooling

LONG_TEXT_MODES = ("truncate", "chunk-mean", "chunk-max", "error")


DEFAULT_STRIDE = 32  # tokens neighbouring windows share (chunk-*), when the window is wider


@dataclass(frozen=True)
class FeatureSpec:
    """Everything that decides what a feature vector means (and so goes into provenance)."""

    pooling: str
    layers: tuple[int, ...]  # hidden-state indices 0..L
    layer_agg: str
    normalize: bool
    max_length: int
    long_text: str = "truncate"
    stride: int = DEFAULT_STRIDE
    dense: tuple[str, ...] = ()  # Dense modules of the model's pipeline applied after pooling (their folders)
    prompt: str | None = None  # prepended to every text
    prompt_name: str | None = None  # the model's prompt it came from, if any
    include_prompt: bool = True  # False: the prompt's tokens are left out of the pooling (Pooling include_prompt)
    #: the first features kept, after normalization (sentence-transformers' truncate_dim); None: all
    truncate_dim: int | None = None
    #: the kept features normalized again after the cut (normalize=True asked for with a cut: unit vectors, as
    #: sentence-transformers' normalize_embeddings and TEI's normalize with dimensions)
    renormalize: bool = False
    layer_norm: tuple[str, ...] = ()  # LayerNorm modules of the model's pipeline applied after pooling (their folders)
    #: the model's WeightedLayerPooling: each token's states of ``layers`` averaged with these weights, then pooled
    layer_weights: tuple[float, ...] = ()
    #: sentence pairs whose second text is token type 0 too, as the model's tokenizer gives no token_type_ids
    #: (Encoder.pairs_untyped; a pair's vectors changed in 0.3), or, for a RoBERTa-family model with two token types
    #: whose tokenizer gives them (a BertTokenizer), type 1 (all 0 until 2026-12-06): set for runs of pairs only, so
    #: single texts and every other model keep their key
    pair_token_types: str | None = None
    #: single texts whose tokenizer template gives non-zero token types the model never receives (its tokenizer gives
    #: no token_type_ids: every token type 0, as transformers runs it; they ran as the template's until 2026-12-04),
    #: absent for every other model, so their keys stay as they were
    token_types: str | None = None

    @property
    def own_modules(self) -> bool:
        """The model's own modules besides its Pooling and Normalize run (its own embedding, with a WeightedLayerPooling,
        Dense or LayerNorm)."""
        return bool(self.dense or self.layer_norm or self.layer_weights)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layers"] = list(self.layers)
        d["dense"] = list(self.dense)
        d["layer_norm"] = list(self.layer_norm)
        d["layer_weights"] = list(self.layer_weights)
        if self.truncate_dim is None:  # absent, not null: the fingerprints (cache, resume, PCA) of runs that keep
            del d["truncate_dim"]      # every feature stay those they were before truncate_dim existed
        for k in ("renormalize", "layer_norm", "layer_weights", "pair_token_types", "token_types"):  # likewise, absent when they
            # change nothing
            if not d[k]:
                del d[k]
        return d


def _token_read(s: FeatureSpec):
    """Which token of which layer a one-token pooling reads, as a key (None: not a one-token pooling). pooled reads
    token 0, and so does cls unless a prompt is left out of the pooling."""
    if s.pooling not in ONE_TOKEN_POOLS:
        return None
    if s.pooling == "pooled" or (s.pooling == "cls" and not (s.prompt and not s.include_prompt)):
        return ("token 0", max(s.layers))
    return (s.pooling, max(s.layers), s.prompt, s.include_prompt)


def one_token(specs: list[FeatureSpec]) -> str | None:
    """The one-token pooling whose token every spec reads (one token of the same deepest layer), or None: then one
    pass runs that layer at that token alone, as ``run`` does for each of them."""
    keys = {_token_read(s) for s in specs}
    if len(keys) != 1 or None in keys:
        return None
    return "pooled" if next(iter(keys))[0] == "token 0" else specs[0].pooling


def exact_groups(specs: list[FeatureSpec]) -> list[list[int]]:
    """Indices of ``specs`` in groups whose ``run_sets`` gives each spec exactly ``run``'s vector: the specs that read
    one token of a layer (by that token and layer), then all the others together (one pass: ``run`` runs their
    layers whole too)."""
    groups: dict = {}
    for i, s in enumerate(specs):
        groups.setdefault(_token_read(s), []).append(i)
    return [g for k, g in groups.items() if k is not None] + ([groups[None]] if None in groups else [])


def check_spec_words(pooling, layer_agg, long_text) -> None:
    """The settings of a spec that are words the model does not decide (a pooling's names, ``layer_agg``,
    ``long_text``): checked by ``Encoder.spec``, and by extract's plan before its output rules, so that a run told
    'already exists - pass --overwrite' is not then told the value is unknown."""
    if pooling is not None and (not isinstance(pooling, str) or not pooling.strip()):
        raise BertfeatError(f"{opt('pooling', pooling)} names no pooling",
                            f"give one such as {opt('pooling', 'mean')}, "
                            + either("or None", "or leave it out") + " for the model's own embedding")
    if pooling is not None:
        split_pooling(pooling)
    for name, value, allowed in (("layer_agg", layer_agg, LAYER_AGGS), ("long_text", long_text, LONG_TEXT_MODES)):
        if value not in allowed:  # named as the option it came from (--layer-agg / layer_agg=)
            raise BertfeatError(f"unknown {quoted_option(name, value)}", f"choose one of {', '.join(allowed)}")

