"""BertConfig: the architecture settings read from a checkpoint's config.json."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..checks import link_to_nowhere
from ..errors import ConfigError

_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "true / false", dict: "JSON object",
               list: "list"}


def typed(value, types: type | tuple, what: str, default=None):
    """``value`` (``default`` when None) when of ``types``, else a one-line ConfigError ``<what> is <value>, not a
    <type>``: how every model file's parsed JSON is checked before it is used (``what`` names the file and key).
    An integer never accepts a JSON true / false; a number (float) accepts an integer."""
    if value is None:
        return default
    want = types if isinstance(types, tuple) else (types,)
    if (isinstance(value, want) and not (isinstance(value, bool) and bool not in want)) or (
            float in want and isinstance(value, int) and not isinstance(value, bool)):
        return value
    shown = json.dumps(value) if isinstance(value, (str, int, float, bool)) else f"a JSON {_json_kind(value)}"
    names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in want if not (t is int and float in want))
    raise ConfigError(f"{what} is {shown[:60]}, not a{'n' if names[0] in 'aeiou' else ''} {names}",
                      "restore the file from the checkpoint (or correct that entry)")


def config_int(value, what: str, least: int = 1) -> int:
    """``value`` when a JSON integer of at least ``least``, else a one-line ConfigError ``<what> must be a positive
    integer, not <value>`` (``what`` names the file and key): the one check of config.json's integer settings, for
    every family. A number written with a decimal point (6.0), true / false and a string ("6") are refused, as
    transformers 5 refuses each (its configs are strict dataclasses: "expected int, got float")."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    kind = "a positive integer" if least == 1 else f"an integer of at least {least}"
    fix = (f"write it as {int(value)}, without the decimal point (transformers refuses {value} there too)"
           if isinstance(value, float) and value.is_integer() and value >= least
           else "restore config.json from the checkpoint")
    raise ConfigError(f"{what} must be {kind}, not {value!r}", fix)


def _json_kind(value) -> str:
    return {dict: "object", list: "list"}.get(type(value), type(value).__name__)


_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def model_file(path: Path) -> Path | None:
    """The one check of a model file before it is read (config, weights, tokenizer, module files): ``path`` when it is
    a regular file (or a link to one), None when it is absent, else a one-line ConfigError naming what it is.

    Judged from ``os.stat``, never by opening it: opening a named pipe waits for a writer forever, and a directory,
    a device or a socket taken for absent would let another file stand in for it silently."""
    nowhere = link_to_nowhere(path)  # the file was meant to be there, so never read another instead
    if nowhere:
        loop, words = nowhere
        raise ConfigError(f"{path} is {words}", "replace the link with the model's own file" if loop else
                          "restore the file it points to, or replace the link with the model's own file")
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return path
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    raise ConfigError(f"{path} is {kind}, not a regular file",
                      "put the model's own file there (bertfeat reads model files whole and never opens a pipe, "
                      "device or socket in their place)")


def json_object(path: Path) -> dict:
    """A model folder's JSON object file (tokenizer_config.json, special_tokens_map.json, ...): {} when absent."""
    if model_file(path) is None:
        return {}
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e})", "restore it from the checkpoint") from None
    return typed(d, dict, str(path))


def inside_folder(root: Path, path: Path) -> Path:
    """``path`` when it stays inside the model folder ``root`` once every symbolic link on its way is followed (a
    Hugging Face cache snapshot's files link into its repository's blobs/, which counts as inside), else a one-line
    ConfigError: a model's files are read from its folder only, so that what hub.model_files lists (the vector
    cache's fingerprint, the resume manifest, ``info --files``) is every file the model's vectors depend on."""
    try:
        real, base = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError) as e:  # a symbolic link loop
        raise ConfigError(f"{path} cannot be resolved ({e})", "replace the link with the model's own file") from None
    allowed = [base] + ([base.parent.parent / "blobs"] if base.parent.name == "snapshots" else [])
    if any(real == a or a in real.parents for a in allowed):
        return path
    raise ConfigError(f"{path} resolves to {real}, outside the model folder {root}",
                      "copy the file into the model folder in place of the link or the path leading out: bertfeat "
                      "reads a model's files from its folder only (so that the vector cache and `info --files` cover "
                      "every one)")


SUPPORTED_ACTS = ("gelu", "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu")
#: hidden_act names of a function bertfeat runs under another name: transformers' ACT2FN["gelu_python"] is the exact
#: (erf) GELU written out in torch, the same function as "gelu" (within 1e-6 in float32)
ACT_ALIASES = {"gelu_python": "gelu"}
# model_type values whose checkpoints are post-LN BERT encoders. RoBERTa, XLM-RoBERTa and CamemBERT (RoBERTa's
# architecture under its own model_type) differ only in their position ids (counted from padding_idx + 1) and a
# single token type; ELECTRA is BERT with its embeddings at embedding_size, projected to hidden_size
# (embeddings_project) when the two differ; DistilBERT is BERT's layer under other tensor and config names, with no
# token types (weights.py maps each family's names).
SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet", "modernbert")
ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")
#: model_type -> the family's name, as `bertfeat info` shows it
FAMILIES = {"bert": "BERT", "roberta": "RoBERTa", "xlm-roberta": "XLM-RoBERTa", "camembert": "CamemBERT (RoBERTa)",
            "electra": "ELECTRA", "distilbert": "DistilBERT", "mpnet": "MPNet",
            "modernbert": "ModernBERT"}
# DistilBERT's config.json names -> BertConfig's (transformers' DistilBertConfig.attribute_map and its FFN / activation)
DISTILBERT_NAMES = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                    "hidden_dim": "intermediate_size", "activation": "hidden_act"}
# MPNet (bertfeat/model/mpnet.py): BERT-like post-LN layers under other tensor names, no token types, RoBERTa-style
# position ids (transformers' MPNetEmbeddings fixes padding_idx at 1, whatever pad_token_id says) and a relative
# position bias shared by all layers, of relative_attention_num_buckets rows.
#: transformers' DistilBertConfig.attribute_map: config.json's BERT names that set dim / n_heads / n_layers, over them
DISTILBERT_ALIASES = ("hidden_size", "num_attention_heads", "num_hidden_layers")
MPNET_TYPES = ("mpnet",)
MPNET_PADDING_IDX = 1
MPNET_NUM_BUCKETS = 32  # transformers' MPNetEncoder.compute_position_bias always buckets into 32, whatever the config
MPNET_MAX_DISTANCE = 128
# ModernBERT (bertfeat/model/modernbert.py): pre-LN layers, rotary positions (no position table), GeGLU MLP, global
# attention every global_attn_every_n_layers-th layer and a sliding window of local_attention tokens in the others.
# Its config.json names -> BertConfig's; the fields below BertConfig's "ModernBERT only" line are read from it.
MODERNBERT_TYPES = ("modernbert",)
MODERNBERT_NAMES = {"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps"}
MODERNBERT_FIELDS = ("layer_types", "global_rope_theta", "local_rope_theta", "local_attention", "attention_bias",
                     "mlp_bias", "norm_bias", "classifier_activation", "classifier_bias", "decoder_bias")
MODERNBERT_LAYER_TYPES = ("full_attention", "sliding_attention")
ACT_NAMES = {"distilbert": "activation", "modernbert": "hidden_activation"}  # hidden_act as config.json names it
#: transformers 5's config class defaults where they differ from BERT's (under BertConfig's names; ModernBERT's
#: norm_eps under its own): a config.json without the key is read as transformers reads it. The head count changes no
#: weight's shape, so BERT's 12 in place of ELECTRA's 4 gave wrong vectors that no shape check caught. (pad_token_id:
#: RoBERTa's in from_dict; MPNet's and ModernBERT's are not read by their forward passes.)
FAMILY_DEFAULTS = {
    "roberta": {"vocab_size": 50265},
    "electra": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "embedding_size": 128},
    "distilbert": {"num_hidden_layers": 6},
    "mpnet": {"vocab_size": 30527},
    "modernbert": {"vocab_size": 50368, "num_hidden_layers": 22, "intermediate_size": 1152,
                   "max_position_embeddings": 8192, "norm_eps": 1e-5},  # (its own name: modernbert_fields renames)
}
#: the families whose position embeddings follow position_embedding_type (BertEmbeddings' and its copies'); DistilBERT,
#: MPNet and ModernBERT have no such setting, and transformers leaves the key unread there
POSITION_TYPE_FAMILIES = ("bert", "electra") + ROBERTA_TYPES
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
    # ModernBERT only (modernbert_fields): each layer's attention, rotary bases, the local window, which biases exist
    layer_types: tuple[str, ...] | None = None  # "full_attention" / "sliding_attention" per layer
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    local_attention: int = 128  # the whole window: local_attention // 2 keys on each side
    attention_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False
    classifier_activation: str = "gelu"  # the masked-LM head's
    classifier_bias: bool = False
    decoder_bias: bool = True
    #: RoBERTa-family config.json without pad_token_id: transformers' 1 applied (bertfeat before 0.3 took 0: the cache
    #: key says so, Encoder.fingerprint, so no vector of then is served as one of now). Not a field: the config's record
    #: (to_dict, info) is config.json's settings
    pad_token_defaulted = False  # (no annotation: a class attribute, not a dataclass field)
    #: config.json's tie_word_embeddings false: a masked-LM head's decoder is a tensor of its own, never the word
    #: embeddings (transformers fills a missing one with random values). Not a field either, for the same reason
    untied_decoder = False

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
        return self.model_type != "distilbert" and self.model_type not in MPNET_TYPES + MODERNBERT_TYPES

    @property
    def pairs_untyped(self) -> bool:
        """Are both texts of a pair token type 0 whatever the tokenizer gives? DistilBERT's, MPNet's and ModernBERT's
        models take no token types, and a RoBERTa-family checkpoint with one token type (roberta-base, xlm-roberta-base)
        has no second one (transformers fails there on a WordPiece tokenizer's type 1). A RoBERTa-family checkpoint
        with two types embeds what its tokenizer gives (Encoder.pairs_untyped): none from its own tokenizer classes,
        0 / 1 from a BertTokenizer."""
        return not self.token_types or (self.model_type in ROBERTA_TYPES and self.type_vocab_size < 2)

    def name_of(self, field: str) -> str:
        """A field as the family's config.json names it (DistilBERT: dim, n_heads, ...), for messages."""
        if self.model_type == "distilbert":
            return {v: k for k, v in DISTILBERT_NAMES.items()}.get(field, field)
        return field

    @property
    def act(self) -> str:
        """hidden_act as the forward pass runs it: config.json's name, or the one it is an alias of (ACT_ALIASES)."""
        return ACT_ALIASES.get(self.hidden_act, self.hidden_act)

    @property
    def classifier_act(self) -> str:
        """ModernBERT's classifier_activation as the masked-LM head runs it (ACT_ALIASES)."""
        return ACT_ALIASES.get(self.classifier_activation, self.classifier_activation)

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

    def position_ids(self, input_ids: np.ndarray) -> np.ndarray | None:
        """(B, T) position ids as transformers counts them when a real token of a right-padded batch is the padding
        id (a literal ``<pad>`` in a text): it gets padding_idx and the tokens after it count on past it
        (``cumsum(ids != padding_idx) * (ids != padding_idx) + padding_idx``). None in every other case, where the
        ids are ``position_offset + arange(T)``. A real pad-id token is always followed by a token other than the
        padding (the template's closing one), which trailing padding never is: that test costs one pass over the ids."""
        off = self.position_offset
        if off == 0 or input_ids.shape[1] < 2:
            return None
        is_pad = input_ids == off - 1
        if not (is_pad[:, :-1] & ~is_pad[:, 1:]).any():
            return None
        real = ~is_pad
        return np.cumsum(real, axis=1) * real + (off - 1)

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
        if "model_type" not in d:
            check_architectures(d, source)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: model_type '{model_type}' is not supported",
                f"bertfeat runs BERT-family encoders (model_type {_one_of(SUPPORTED_MODEL_TYPES)}); pick one of those",
            )
        if model_type == "distilbert":
            d = distilbert_fields(d)
        d = {**FAMILY_DEFAULTS.get(model_type, {}), **d}  # (ModernBERT's layer count before modernbert_fields reads it)
        if model_type in MODERNBERT_TYPES:
            d = modernbert_fields(d, source)
        check_nulls(d, model_type, source)
        pos = d.get("position_embedding_type") if model_type in POSITION_TYPE_FAMILIES else None
        if pos not in (None, "absolute"):  # (null: transformers 5 runs absolute positions)
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
                f"{source}: {ACT_NAMES.get(model_type, 'hidden_act')} '{act}' is not supported",
                f"supported: {', '.join(SUPPORTED_ACTS)}",
            )
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and d[k] is not None}
        if model_type != "electra":
            fields.pop("embedding_size", None)
        if model_type not in MODERNBERT_TYPES:
            for k in MODERNBERT_FIELDS:
                fields.pop(k, None)
        if model_type in MPNET_TYPES:  # MPNetConfig has no type_vocab_size (transformers ignores one): one, unused
            fields["type_vocab_size"] = 1
        names = {v: k for k, v in DISTILBERT_NAMES.items()} if model_type == "distilbert" else {}
        for k in _POSITIVE_INTS + ("embedding_size",):
            if k in fields:
                config_int(fields[k], f"{source}: {names.get(k, k)}")
        defaulted = model_type in ROBERTA_TYPES and "pad_token_id" not in fields
        if defaulted:  # transformers' RobertaConfig (XLM-R, CamemBERT) defaults it to 1: positions after it
            fields["pad_token_id"] = 1
        check_pad_token_id(fields.get("pad_token_id", 0), fields.get("vocab_size", cls.vocab_size), source)
        eps = fields.get("layer_norm_eps", 1e-12)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:  # (2.0 is legal)
            raise ConfigError(f"{source}: layer_norm_eps must be a positive number, not {eps!r}",
                              "restore config.json from the checkpoint")
        try:
            cfg = cls(**fields)
        except TypeError as e:  # pragma: no cover - dataclass field errors
            raise ConfigError(f"{source}: {e}", "check the file is a BERT config.json") from None
        if defaulted:
            object.__setattr__(cfg, "pad_token_defaulted", True)  # frozen: set once, here
        tied = d.get("tie_word_embeddings", True)
        if not isinstance(tied, bool):  # "false" / 0 / null were run as tied (transformers refuses them)
            raise ConfigError(f"{source}: tie_word_embeddings is {json.dumps(tied)}, not true / false",
                              "restore config.json from the checkpoint (true: the masked-LM head's decoder is the word "
                              "embeddings; false: a tensor of its own)")
        if tied is False:
            object.__setattr__(cfg, "untied_decoder", True)
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
        if cfg.model_type in MODERNBERT_TYPES and cfg.head_size % 2:
            raise ConfigError(  # each rotary position turns pairs of features: transformers fails at the first text too
                f"{source}: hidden_size {cfg.hidden_size} / num_attention_heads {cfg.num_attention_heads} gives an odd "
                f"head size {cfg.head_size}, which ModernBERT's rotary positions cannot turn (they rotate features in "
                "pairs)", "restore config.json from the checkpoint (a ModernBERT's head size is even)")
        return cfg

    @classmethod
    def from_file(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        if model_file(path) is None:
            raise ConfigError(f"{path} not found", "a model directory needs config.json")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path} is not valid JSON ({e})", "restore config.json from the checkpoint") from None
        if not isinstance(d, dict):
            raise ConfigError(f"{path} is not a JSON object", "restore config.json from the checkpoint")
        return cls.from_dict(d, source=str(path))


def _unread(model_type: str) -> set[str]:
    """BertConfig's fields the family's config.json does not set (transformers' config class has no such setting, or
    bertfeat fixes it for the family): a null there changes nothing."""
    unread = {"model_type", "pad_token_id"}  # (pad_token_id: transformers takes null; check_pad_token_id judges it)
    if model_type not in MODERNBERT_TYPES:
        unread.update(MODERNBERT_FIELDS)
    if model_type != "electra":
        unread.add("embedding_size")
    if model_type not in MPNET_TYPES:
        unread.add("relative_attention_num_buckets")
    else:
        unread.add("type_vocab_size")
    return unread


def check_nulls(d: dict, model_type: str, source: str) -> None:
    """A setting of config.json (under BertConfig's names: the family's are renamed before) that is null is refused,
    naming it as the file does: transformers 5's strict configs refuse it ("expected int, got NoneType"), and read as
    absent it would be bertfeat's default (num_attention_heads 12, layer_norm_eps 1e-12), which no shape check of the
    weights catches, silently."""
    names = ({v: k for k, v in DISTILBERT_NAMES.items()} if model_type == "distilbert" else
             {v: k for k, v in MODERNBERT_NAMES.items()} if model_type in MODERNBERT_TYPES else {})
    unread = _unread(model_type)
    for k in BertConfig.__dataclass_fields__:
        if k in d and d[k] is None and k not in unread:
            raise ConfigError(f"{source}: {names.get(k, k)} is null, not a value (transformers refuses it too)",
                              "restore config.json from the checkpoint: bertfeat does not put a default in place of a "
                              "setting the model's config.json gives as null")


def check_pad_token_id(pad, vocab_size: int, source: str) -> None:
    """pad_token_id is a JSON integer and a token id of the vocabulary, 0 .. vocab_size - 1: transformers refuses a
    larger one (nn.Embedding's padding_idx: "Padding_idx must be within num_embeddings"), and RoBERTa's positions count
    from it. MPNet's too, though transformers' MPNetEmbeddings ignores it (padding_idx 1): a pad token outside the
    vocabulary is a damaged config.json in any family."""
    if isinstance(pad, bool) or not isinstance(pad, int):
        config_int(pad, f"{source}: pad_token_id", least=0)
    if not 0 <= pad < vocab_size:
        raise ConfigError(f"{source}: pad_token_id {pad} is not a token of the vocabulary (vocab_size {vocab_size}: "
                          f"ids 0 .. {vocab_size - 1})", "restore config.json from the checkpoint")


#: a task model's class name (config.json's architectures) -> its family's model_type: RobertaModel, XLMRobertaFor...
_ARCHITECTURE = re.compile(r"(XLMRoberta|Roberta|Camembert|Electra|DistilBert|MPNet|ModernBert|Bert)"
                           r"(?:Model|LMHeadModel|For[A-Z][A-Za-z]*)")
_ARCHITECTURE_TYPES = {"XLMRoberta": "xlm-roberta", "Roberta": "roberta", "Camembert": "camembert",
                       "Electra": "electra", "DistilBert": "distilbert", "MPNet": "mpnet", "ModernBert": "modernbert",
                       "Bert": "bert"}


def check_architectures(d: dict, source: str) -> None:
    """A config.json without model_type is read as BERT's (as old BERT checkpoints are); one whose ``architectures``
    names another family's model is refused: RoBERTa's weights have BERT's names, and read as BERT's (positions from
    0) they give other vectors, silently. transformers refuses a config.json without model_type too."""
    archs = d.get("architectures")
    for a in archs if isinstance(archs, list) else []:
        m = _ARCHITECTURE.fullmatch(a) if isinstance(a, str) else None
        if m and _ARCHITECTURE_TYPES[m.group(1)] != "bert":
            t = _ARCHITECTURE_TYPES[m.group(1)]
            raise ConfigError(f"{source} has no model_type, and its architectures name {a} ({FAMILIES[t]}, model_type "
                              f"'{t}')",
                              f'add "model_type": "{t}" to config.json (without it bertfeat reads the model as a BERT, '
                              "which it is not; transformers refuses a config.json without model_type too)")


def distilbert_fields(d: dict) -> dict:
    """A DistilBERT config.json dict under BertConfig's names: dim, n_layers, n_heads, hidden_dim, activation ->
    hidden_size, ... (hidden_size, num_attention_heads, num_hidden_layers win when given too, as transformers'
    attribute_map sets dim, n_heads, n_layers from them); LayerNorm eps 1e-12 (DistilBERT's modules hard-code it);
    one (unused) token type.
    ``sinusoidal_pos_embds`` needs nothing: the position table is in the checkpoint either way."""
    out = {k: v for k, v in d.items() if k not in DISTILBERT_NAMES.values() and k != "type_vocab_size"}
    for ours, bert in DISTILBERT_NAMES.items():
        if bert in DISTILBERT_ALIASES and d.get(bert) is not None:  # set through the alias, it wins (transformers)
            out[bert] = d[bert]
        elif ours in d:
            out[bert] = d[ours]
    out.update(layer_norm_eps=1e-12, type_vocab_size=1)
    return out


def check_mpnet_config(cfg: BertConfig, source: str) -> None:
    """MPNet's own settings: transformers' MPNetEncoder buckets relative positions into 32 buckets whatever
    relative_attention_num_buckets says (compute_position_bias's default), so its table needs at least 32 rows."""
    if cfg.relative_attention_num_buckets < MPNET_NUM_BUCKETS:
        raise ConfigError(f"{source}: relative_attention_num_buckets {cfg.relative_attention_num_buckets} is below the "
                          f"{MPNET_NUM_BUCKETS} buckets MPNet's relative positions use", "restore config.json from the checkpoint")


def modernbert_fields(d: dict, source: str) -> dict:
    """A ModernBERT config.json dict under BertConfig's names: hidden_activation, norm_eps -> hidden_act,
    layer_norm_eps; one (unused) token type; layer_types from transformers 5's list or, in the hub's config.json,
    from global_attn_every_n_layers (layer i global when i % n == 0); the rotary bases from rope_parameters or
    global_rope_theta / local_rope_theta; the window from local_attention, or sliding_window (half of it), which wins
    as in transformers. Refuses rotary scaling (rope_type other than 'default')."""
    out = {k: v for k, v in d.items() if k not in MODERNBERT_NAMES.values() and k != "type_vocab_size"}
    for theirs, ours in MODERNBERT_NAMES.items():
        if theirs in d:
            out[ours] = d[theirs]
    out["type_vocab_size"] = 1
    L = config_int(d.get("num_hidden_layers", 22), f"{source}: num_hidden_layers")
    types = d.get("layer_types")
    if types is None:  # (transformers takes 3.0 or true here, a setting its strict fields leave unchecked)
        n = config_int(d.get("global_attn_every_n_layers", 3), f"{source}: global_attn_every_n_layers")
        types = ["sliding_attention" if i % n else "full_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in MODERNBERT_LAYER_TYPES for t in types):
        raise ConfigError(f"{source}: layer_types must list {L} of 'full_attention' / 'sliding_attention', not "
                          f"{types!r}", "restore config.json from the checkpoint")
    out["layer_types"] = tuple(types)
    rope = typed(d.get("rope_parameters"), dict, f"{source}: rope_parameters", {})
    other = [k for k in rope if k not in MODERNBERT_LAYER_TYPES]
    if other:  # transformers refuses it too: a flat {"rope_theta": ...} would otherwise be passed over for the default
        raise ConfigError(f"{source}: rope_parameters has {', '.join(map(repr, other))}; it holds one object per layer "
                          "type, under 'full_attention' / 'sliding_attention'", "restore config.json from the checkpoint")
    for kind, key in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        p = typed(rope.get(kind), dict, f"{source}: rope_parameters {kind}", {})
        scaling = d.get("rope_scaling") or (p if p.get("rope_type", "default") != "default" else None)
        if scaling:
            raise ConfigError(f"{source}: rotary scaling ({scaling}) is not supported",
                              "use a ModernBERT checkpoint with the default rotary embeddings")
        theta = p.get("rope_theta", d.get(key, BertConfig.__dataclass_fields__[key].default))
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
            raise ConfigError(f"{source}: the rotary base ({key}) must be a number above 1, not {theta!r}",
                              "restore config.json from the checkpoint")
        out[key] = float(theta)
    half = d.get("sliding_window")
    if half is not None:  # transformers' ModernBertConfig sets local_attention = 2 * sliding_window, over local_attention
        out["local_attention"] = 2 * config_int(half, f"{source}: sliding_window")
    else:
        config_int(d.get("local_attention", 128), f"{source}: local_attention", least=2)
    for k in ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias", "decoder_bias"):
        if k in d and not isinstance(d[k], bool):
            raise ConfigError(f"{source}: {k} must be true or false, not {d[k]!r}", "restore config.json from the checkpoint")
    out.setdefault("hidden_act", "gelu")
    out.setdefault("layer_norm_eps", 1e-5)
    out.setdefault("max_position_embeddings", 8192)
    if out.get("classifier_activation", "gelu") not in SUPPORTED_ACTS:
        raise ConfigError(f"{source}: classifier_activation '{out['classifier_activation']}' is not supported",
                          f"supported: {', '.join(SUPPORTED_ACTS)}")
    return out
