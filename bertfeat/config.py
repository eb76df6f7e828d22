"""BertConfig: the architecture settings read from a checkpoint's config.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ConfigError

SUPPORTED_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu")
# model_type values whose checkpoints are post-LN BERT encoders. RoBERTa, XLM-RoBERTa and CamemBERT (RoBERTa's
# architecture under its own model_type) differ only in their position ids (counted from padding_idx + 1) and a
# single token type; ELECTRA is BERT with its embeddings at embedding_size, projected to hidden_size
# (embeddings_project) when the two differ; DistilBERT is BERT's layer under other tensor and config names, with no
# token types (weights.py maps each family's names).
SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet")
ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")
#: model_type -> the family's name, as `bertfeat info` shows it
FAMILIES = {"bert": "BERT", "roberta": "RoBERTa", "xlm-roberta": "XLM-RoBERTa", "camembert": "CamemBERT (RoBERTa)",
            "electra": "ELECTRA", "distilbert": "DistilBERT", "mpnet": "MPNet"}
# DistilBERT's config.json names -> BertConfig's (transformers' DistilBertConfig.attribute_map and its FFN / activation)
DISTILBERT_NAMES = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                    "hidden_dim": "intermediate_size", "activation": "hidden_act"}
# MPNet (bertfeat/mpnet.py): BERT-like post-LN layers under other tensor names, no token types, RoBERTa-style
# position ids (transformers' MPNetEmbeddings fixes padding_idx at 1, whatever pad_token_id says) and a relative
# position bias shared by all layers, of relative_attention_num_buckets rows.
MPNET_TYPES = ("mpnet",)
MPNET_PADDING_IDX = 1
MPNET_NUM_BUCKETS = 32  # transformers' MPNetEncoder.compute_position_bias always buckets into 32, whatever the config
MPNET_MAX_DISTANCE = 128
_POSITIVE_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "max_position_embeddings", "type_vocab_size", "relative_attention_num_buckets")


def _one_of(names) -> str:
    """('a', 'b', 'c') -> "'a', 'b' or 'c'"."""
    q = [f"'{n}'" for n in names]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + " or " + q[-1]


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    pad_token_id: int = 0
    model_type: str = "bert"
    relative_attention_num_buckets: int = 32  # MPNet only
    embedding_size: int | None = None  # ELECTRA: the embeddings' width (None: hidden_size)

    @property
    def family(self) -> str:
        return FAMILIES[self.model_type]

    @property
    def embedding_width(self) -> int:
        """Width of the embedding tables: ELECTRA's embedding_size, else hidden_size."""
        return self.embedding_size or self.hidden_size

    @property
    def token_types(self) -> bool:
        """Does the model embed token types? DistilBERT and MPNet do not (their models take no token_type_ids)."""
        return self.model_type != "distilbert" and self.model_type not in MPNET_TYPES

    @property
    def pairs_untyped(self) -> bool:
        """Are both texts of a pair token type 0? RoBERTa-family tokenizers return no token_type_ids, and
        DistilBERT's model takes none (its tokenizer's model_input_names leave them out)."""
        return self.model_type in ROBERTA_TYPES or not self.token_types

    def name_of(self, field: str) -> str:
        """A field as the family's config.json names it (DistilBERT: dim, n_heads, ...), for messages."""
        if self.model_type == "distilbert":
            return {v: k for k, v in DISTILBERT_NAMES.items()}.get(field, field)
        return field

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """First position id of a real token: 0 for BERT, padding_idx + 1 for RoBERTa / XLM-RoBERTa
        (transformers' create_position_ids_from_input_ids counts positions from past padding_idx)."""
        if self.model_type in MPNET_TYPES:
            return MPNET_PADDING_IDX + 1
        return self.pad_token_id + 1 if self.model_type in ROBERTA_TYPES else 0

    @property
    def has_token_types(self) -> bool:
        """The same as token_types (MPNet's name for it)."""
        return self.token_types

    @property
    def max_positions(self) -> int:
        """Longest sequence the position table can encode: 512 for BERT, and for RoBERTa's 514 rows too."""
        return self.max_position_embeddings - self.position_offset

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, source: str = "config.json") -> "BertConfig":
        """Validate a config.json dict and keep the fields the encoder uses."""
        model_type = d.get("model_type", "bert")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: model_type '{model_type}' is not supported",
                f"bertfeat runs BERT-family encoders (model_type {_one_of(SUPPORTED_MODEL_TYPES)}); pick one of those",
            )
        if model_type == "distilbert":
            d = distilbert_fields(d)
        pos = d.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ConfigError(
                f"{source}: position_embedding_type '{pos}' is not supported",
                "only absolute position embeddings are implemented; use a checkpoint with "
                "position_embedding_type 'absolute'",
            )
        if d.get("is_decoder") or d.get("add_cross_attention"):
            raise ConfigError(
                f"{source}: decoder models (is_decoder / add_cross_attention) are not supported",
                "use an encoder-only BERT checkpoint",
            )
        act = d.get("hidden_act", "gelu")
        if not isinstance(act, str) or act not in SUPPORTED_ACTS:
            raise ConfigError(
                f"{source}: {'activation' if model_type == 'distilbert' else 'hidden_act'} '{act}' is not supported",
                f"supported: {', '.join(SUPPORTED_ACTS)}",
            )
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and d[k] is not None}
        if model_type != "electra":
            fields.pop("embedding_size", None)
        names = {v: k for k, v in DISTILBERT_NAMES.items()} if model_type == "distilbert" else {}
        for k in _POSITIVE_INTS + (("embedding_size",) if "embedding_size" in fields else ()):
            v = fields.get(k, 1)
            if isinstance(v, float) and v.is_integer():
                fields[k] = v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{source}: {names.get(k, k)} must be a positive integer, not {v!r}",
                                  "restore config.json from the checkpoint")
        eps = fields.get("layer_norm_eps", 1e-12)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
            raise ConfigError(f"{source}: layer_norm_eps must be a small positive number, not {eps!r}",
                              "restore config.json from the checkpoint")
        try:
            cfg = cls(**fields)
        except TypeError as e:  # pragma: no cover - dataclass field errors
            raise ConfigError(f"{source}: {e}", "check the file is a BERT config.json") from None
        if cfg.max_positions < 3:
            raise ConfigError(f"{source}: max_position_embeddings {cfg.max_position_embeddings} leaves no room for a "
                              f"sequence after pad_token_id {cfg.pad_token_id}", "restore config.json from the checkpoint")
        if cfg.model_type in MPNET_TYPES:
            check_mpnet_config(cfg, source)
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ConfigError(
                f"{source}: {cfg.name_of('hidden_size')} {cfg.hidden_size} is not a multiple of "
                f"{cfg.name_of('num_attention_heads')} {cfg.num_attention_heads}",
                "fix config.json",
            )
        return cfg

    @classmethod
    def from_file(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path} not found", "a model directory needs config.json") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path} is not valid JSON ({e})", "restore config.json from the checkpoint") from None
        if not isinstance(d, dict):
            raise ConfigError(f"{path} is not a JSON object", "restore config.json from the checkpoint")
        return cls.from_dict(d, source=str(path))


def distilbert_fields(d: dict) -> dict:
    """A DistilBERT config.json dict under BertConfig's names: dim, n_layers, n_heads, hidden_dim, activation ->
    hidden_size, ...; LayerNorm eps 1e-12 (DistilBERT's modules hard-code it); one (unused) token type.
    ``sinusoidal_pos_embds`` needs nothing: the position table is in the checkpoint either way."""
    out = {k: v for k, v in d.items() if k not in DISTILBERT_NAMES.values() and k != "type_vocab_size"}
    for ours, bert in DISTILBERT_NAMES.items():
        if ours in d:
            out[bert] = d[ours]
    out.update(layer_norm_eps=1e-12, type_vocab_size=1)
    return out


def check_mpnet_config(cfg: BertConfig, source: str) -> None:
    """MPNet's own settings: transformers' MPNetEncoder buckets relative positions into 32 buckets whatever
    relative_attention_num_buckets says (compute_position_bias's default), so its table needs at least 32 rows."""
    if cfg.relative_attention_num_buckets < MPNET_NUM_BUCKETS:
        raise ConfigError(f"{source}: relative_attention_num_buckets {cfg.relative_attention_num_buckets} is below the "
                          f"{MPNET_NUM_BUCKETS} buckets MPNet's relative positions use", "restore config.json from the checkpoint")
