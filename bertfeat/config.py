"""BertConfig: the architecture settings read from a checkpoint's config.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ConfigError

SUPPORTED_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu")
# model_type values whose checkpoints are post-LN BERT encoders with BERT tensor names. RoBERTa and
# XLM-RoBERTa differ only in their position ids (counted from padding_idx + 1) and a single token type.
SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "mpnet")
ROBERTA_TYPES = ("roberta", "xlm-roberta")
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
        """False for MPNet: no token type embeddings (MPNetModel ignores token_type_ids)."""
        return self.model_type not in MPNET_TYPES

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
                f"{source}: hidden_act '{act}' is not supported",
                f"supported: {', '.join(SUPPORTED_ACTS)}",
            )
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and d[k] is not None}
        for k in _POSITIVE_INTS:
            v = fields.get(k, 1)
            if isinstance(v, float) and v.is_integer():
                fields[k] = v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{source}: {k} must be a positive integer, not {v!r}",
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
                f"{source}: hidden_size {cfg.hidden_size} is not a multiple of "
                f"num_attention_heads {cfg.num_attention_heads}",
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


def check_mpnet_config(cfg: BertConfig, source: str) -> None:
    """MPNet's own settings: transformers' MPNetEncoder buckets relative positions into 32 buckets whatever
    relative_attention_num_buckets says (compute_position_bias's default), so its table needs at least 32 rows."""
    if cfg.relative_attention_num_buckets < MPNET_NUM_BUCKETS:
        raise ConfigError(f"{source}: relative_attention_num_buckets {cfg.relative_attention_num_buckets} is below the "
                          f"{MPNET_NUM_BUCKETS} buckets MPNet's relative positions use", "restore config.json from the checkpoint")
