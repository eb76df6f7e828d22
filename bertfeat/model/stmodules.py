"""A sentence-transformers model folder, read as what bertfeat will run: the model's own embedding.

``modules.json`` lists the modules in order; bertfeat reproduces these seven and refuses any other
with one line naming it (never skipping it):

  Transformer  the encoder (config.json + safetensors); ``sentence_bert_config.json`` gives
               ``max_seq_length`` and ``do_lower_case``. Its files are at the top of the folder ("path": ""), or
               in the folder modules.json names (the older layout, "0_Transformer"; hub.encoder_folder decides)
  Pooling      ``pooling_mode`` (a mode or a list, concatenated in order) or the legacy
               ``pooling_mode_*_token`` flags; ``include_prompt``
  Dense        ``act(x W^T + b)`` (+ an optional residual), weights from ``model.safetensors``, else (as
               sentence-transformers loads a module saved by its older versions) from torch.save's
               ``pytorch_model.bin``, read without unpickling it (torchfile.py: only a plain state dict's globals)
  Normalize    L2 normalization
  Dropout      nothing at inference (torch's Dropout in eval mode); config.json's ``dropout`` checked as torch does
               (0 to 1; 0.2 without a config.json, as there)
  LayerNorm    torch.nn.LayerNorm(``dimension``) over the sentence embedding (eps 1e-5, its default, as
               sentence-transformers builds it), ``norm.weight`` / ``norm.bias`` from its weights file
  WeightedLayerPooling  right after the Transformer: each token's states of hidden states ``layer_start`` .. L
               averaged with ``layer_weights`` (its weights file) before the Pooling; the Encoder keeps those
               layers (FeatureSpec.layers / layer_weights) only for it. sentence-transformers gives the module every
               layer's states only when the encoder's config says ``output_hidden_states`` (config.json, or
               ``config_kwargs``): without it the module does nothing, here too (WeightedLayerPooling.off)

Dense, Dropout and LayerNorm come after the Pooling (sentence-transformers reads the sentence embedding there, which
only the Pooling makes), in any order with each other and with Normalize; each Dense's inputs and each LayerNorm's
dimension is the width before it. A Dropout, LayerNorm or WeightedLayerPooling config.json with a key
sentence-transformers does not take is refused (it builds them as ``cls(**config)``, and fails), as is a weights file
with a tensor missing, of another shape or one more (it loads them strictly). Every module's weights file is picked and
read in one place, as a Dense's (_weights_file, _module_weights, _module_tensors): ``model.safetensors``, else
``pytorch_model.bin``.

``sentence_bert_config.json``'s keywords for transformers' loaders (``processor_kwargs`` ...): the tokenizer's
``model_max_length``; any entry that changes the model or its tokenizer is refused (_loader_length).

``config_sentence_transformers.json`` gives ``prompts``, ``default_prompt_name`` and ``truncate_dim``: as
sentence-transformers' ``encode``, the model's own embedding keeps its first ``truncate_dim`` features, cut after
every module (Normalize included) and not normalized again; one of the embedding's width or more keeps them all
(``ModelPipeline.truncate_dim`` None). It is the model's embedding's: a pooling the user chooses is not cut by it
(Encoder.spec). A folder without ``modules.json`` is a plain transformers checkpoint: mean pooling (the last token
of a ...ForCausalLM), nothing after it, and neither sentence_bert_config.json nor config_sentence_transformers.json
read (SentenceTransformer reads them beside a modules.json only). A ``model_type`` there other than
SentenceTransformer: no own embedding (SentenceTransformer ignores such a folder's modules).

Max length: ``processing_kwargs`` max_length, else ``processor_kwargs`` model_max_length, else ``max_seq_length``
from ``sentence_bert_config.json``, else ``model_max_length`` from
``tokenizer_config.json`` (where sentence-transformers >= 5 saves it), else the position limit;
never more than the position limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..ops import gemm

from .config import inside_folder, model_file, typed
from ..errors import BertfeatError, ConfigError, opt
from .pooling import TOKEN_POOLING_NAMES, dense, l2_normalize, layer_norm
from ..readers.textcheck import surrogate_reason

#: sentence-transformers' pooling modes, in its legacy concatenation order.
ST_POOLING_MODES = TOKEN_POOLING_NAMES  # a Pooling module's modes are the token poolings (pooling.py)
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
#: torch.nn activation classes -> our activation name; sentence-transformers saves the class only and builds it with
#: its defaults (GELU's erf form, LeakyReLU's slope 0.01, ELU's alpha 1, Softplus' beta 1 and threshold 20)
_TORCH_ACTIVATIONS = {"Tanh": "tanh", "Identity": "identity", "ReLU": "relu", "GELU": "gelu", "Sigmoid": "sigmoid",
                      "SiLU": "silu", "LeakyReLU": "leaky_relu", "ELU": "elu", "Softplus": "softplus", "Mish": "mish"}
#: torch activation class path (as Dense/config.json names it: its full name, as sentence-transformers saves it, or
#: a shorter path it imports the same class from) -> our activation name.
DENSE_ACTIVATIONS = {
    f"torch.nn.{sub}{cls}": name for cls, name in _TORCH_ACTIVATIONS.items()
    for sub in ("modules." + ("linear." if cls == "Identity" else "activation."), "modules.", "")
}
SUPPORTED_MODULES = ("Transformer", "Pooling", "Dense", "Normalize", "Dropout", "LayerNorm", "WeightedLayerPooling")
#: the files each module reads in its folder (a Normalize at the top of the folder, path "", reads none); the
#: Transformer's are the encoder's (hub.model_files). "model.safetensors" stands for the module's weights file, the
#: one _weights_file picks (pytorch_model.bin when only it is there)
MODULE_FILES = {"Transformer": (), "Pooling": ("config.json",), "Dense": ("config.json", "model.safetensors"),
                "Normalize": ("config.json",), "Dropout": ("config.json",),
                "LayerNorm": ("config.json", "model.safetensors"),
                "WeightedLayerPooling": ("config.json", "model.safetensors")}
#: the config.json keys sentence-transformers' Dropout and LayerNorm take (their config_keys: it builds them as
#: cls(**config), so it fails on any other key) -> whether a missing config.json is refused (LayerNorm has no
#: default dimension; a Dropout without one is Dropout(0.2))
_MODULE_KEYS = {"Dropout": (("dropout",), False), "LayerNorm": (("dimension",), True),
                "WeightedLayerPooling": (("embedding_dimension", "word_embedding_dimension", "layer_start",
                                          "num_hidden_layers"), True)}
#: torch.nn.LayerNorm's eps, which sentence-transformers' LayerNorm builds it with (nn.LayerNorm(dimension))
ST_LAYER_NORM_EPS = 1e-5
#: every key sentence-transformers' Pooling takes (it fails on any other, as bertfeat does)
_POOLING_KEYS = ("embedding_dimension", "word_embedding_dimension", "pooling_mode", "include_prompt",
                 *_LEGACY_POOLING_KEYS)
# tokenizer_config.json's model_max_length when the tokenizer has no limit (transformers' VERY_LARGE_INTEGER)
_NO_LIMIT = 10**12


class _ReadFromFile:
    """A module step read from its folder's weights file (``path``, ``weights_file``: fields of the dataclass)."""

    @property
    def source(self) -> str:
        """Its weights file relative to the model folder, as ``info`` shows where it came from."""
        return _rel_file(self.path, self.weights_file)


@dataclass(frozen=True)
class DenseLayer(_ReadFromFile):
    """One Dense module, weights transposed to (in, out) at load."""

    path: str
    w: np.ndarray  # (in, out)
    b: np.ndarray | None  # (out,)
    activation: str
    residual_w: np.ndarray | None = None  # (in, out) when use_residual and in != out
    residual: bool = False
    weights_file: str = "model.safetensors"  # the file its weights were read from, in its folder

    @property
    def in_features(self) -> int:
        return int(self.w.shape[0])

    @property
    def out_features(self) -> int:
        return int(self.w.shape[1])

    def describe(self) -> str:
        return f"Dense {self.in_features}->{self.out_features} {self.activation}" + (" +residual" if self.residual else "")


@dataclass(frozen=True)
class LayerNormStep(_ReadFromFile):
    """One LayerNorm module: torch.nn.LayerNorm over the sentence embedding (its gain and bias, eps 1e-5)."""

    path: str
    g: np.ndarray  # (dimension,)
    b: np.ndarray  # (dimension,)
    weights_file: str = "model.safetensors"  # the file its weights were read from, in its folder
    eps: float = ST_LAYER_NORM_EPS

    @property
    def dimension(self) -> int:
        return int(self.g.shape[0])

    def describe(self) -> str:
        return f"LayerNorm {self.dimension}"


@dataclass(frozen=True)
class DropoutStep:
    """One Dropout module: nothing at inference (torch's Dropout is the identity in eval mode); kept to be shown."""

    path: str
    p: float
    configured: bool = True  # False: no config.json, sentence-transformers' default rate

    @property
    def source(self) -> str:
        return _rel_file(self.path, "config.json") if self.configured else f"{self.path}, without config.json"

    def describe(self) -> str:
        return f"Dropout {self.p:g}, off at inference"


@dataclass(frozen=True)
class WeightedLayerPooling:
    """A WeightedLayerPooling module: each token's states of hidden states ``start`` .. L averaged with ``weights``
    before the Pooling (sentence-transformers' all_layer_embeddings[layer_start:]). ``off``: why it passes the last
    layer's states on unchanged instead (the encoder returns no state of every layer: config.json's
    output_hidden_states is not true, and sentence-transformers' module then does nothing), else None."""

    path: str
    start: int
    weights: np.ndarray  # (L + 1 - start,) float32
    off: str | None = None
    weights_file: str = "model.safetensors"  # the file its weights were read from, in its folder

    def describe(self) -> str:
        if self.off:
            return f"WeightedLayerPooling, off: {self.off} ({_rel_file(self.path, 'config.json')})"
        end = self.start + len(self.weights) - 1
        layers = f"layers {self.start}..{end}" if end > self.start else f"layer {end}"
        return f"WeightedLayerPooling of {layers} ({_rel_file(self.path, self.weights_file)})"


def _is_identity(step) -> bool:
    return isinstance(step, DropoutStep)


@dataclass
class ModelPipeline:
    """What the model folder defines around the encoder, and where each part came from."""

    pooling: tuple[str, ...] = ("mean",)
    pooling_source: str = "default (the model has no Pooling module)"
    include_prompt: bool = True
    steps: tuple = ()  # after pooling, in order: DenseLayer, LayerNormStep, DropoutStep or the string "normalize"
    layer_weights: WeightedLayerPooling | None = None  # a WeightedLayerPooling before the Pooling
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    max_seq_length: int | None = None
    max_length_source: str = "the model's position limit"
    task_lengths: dict[str, int] = field(default_factory=dict)  # query / document: encode_query's / encode_document's
    do_lower_case: bool = False
    modules_source: str | None = None  # "modules.json" when the folder is a sentence-transformers model
    #: why the model's own embedding cannot be made (a modules.json without a Pooling module: sentence-transformers
    #: fails on it too), else None; a pooling the user names still runs
    no_own_embedding: str | None = None
    #: the features the model's own embedding keeps (config_sentence_transformers.json's truncate_dim, below its
    #: width), else None: all
    truncate_dim: int | None = None

    @property
    def dense(self) -> tuple[DenseLayer, ...]:
        return tuple(s for s in self.steps if isinstance(s, DenseLayer))

    @property
    def layer_norm(self) -> tuple[LayerNormStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, LayerNormStep))

    def _running(self) -> list:
        """``steps`` less the Dropouts (nothing at inference)."""
        return [s for s in self.steps if not _is_identity(s)]

    @property
    def head(self) -> tuple:
        """The steps that change a window's vector before the final Normalize: ``steps`` less the Dropouts and the
        trailing Normalize (which runs after a row's windows are combined: ``normalize``)."""
        run = self._running()
        while run and run[-1] == "normalize":
            run.pop()
        return tuple(run)

    @property
    def normalize(self) -> bool:
        """The model's embedding ends L2-normalized (a Dropout after the Normalize changes nothing)."""
        run = self._running()
        return bool(run) and run[-1] == "normalize"

    def prepare(self, path) -> None:
        """Its Dense modules' weights in the form that keeps a row's product independent of its batch on the model's
        GEMM path (gemm.row_stable)."""
        self.steps = tuple(replace(s, w=gemm.row_stable(s.w, path), residual_w=gemm.row_stable(s.residual_w, path))
                           if isinstance(s, DenseLayer) else s for s in self.steps)

    def lines(self, own: bool, normalize: bool) -> list[str]:
        """The lines of the steps after pooling: with ``own`` the modules in their order (each Dense, LayerNorm and
        Dropout, a Normalize between them), the final Normalize (one line) when ``normalize`` (also without ``own``:
        a normalization asked for)."""
        out, left = [], len(self.head)
        for s in self.steps if own else ():
            if s == "normalize" and not left:  # the final Normalize, as ``normalize`` says
                out += ["Normalize"] if normalize else []
                normalize = False
                continue
            left -= not _is_identity(s)
            out.append(step_line(s))
        return out + (["Normalize"] if normalize else [])

    @property
    def weighted_layers(self) -> WeightedLayerPooling | None:
        """The WeightedLayerPooling the model's embedding runs (None: none, or one that does nothing)."""
        lw = self.layer_weights
        return lw if lw is not None and not lw.off else None

    def describe(self) -> list[str]:
        out = [self.layer_weights.describe()] if self.layer_weights else []
        out += [f"Pooling {'+'.join(self.pooling)} ({self.pooling_source})"] + self.lines(True, self.normalize)
        if self.truncate_dim is not None:
            out.append(f"Truncate to the first {self.truncate_dim} features (config_sentence_transformers.json)")
        return out


def run_step(x: np.ndarray, step) -> np.ndarray:
    """(B, D) -> one step of ModelPipeline.head applied: "normalize", a DenseLayer or a LayerNormStep."""
    if step == "normalize":
        return l2_normalize(x)
    return layer_norm(x, step) if isinstance(step, LayerNormStep) else dense(x, step)


def step_line(step) -> str:
    """A step after pooling as ``describe`` lines show it: what it does and the file it came from (``Dense 64->32 tanh
    (2_Dense/model.safetensors)``); a Normalize as ``Normalize``."""
    return "Normalize" if step == "normalize" else f"{step.describe()} ({step.source})"


def _read_json(path: Path, types=dict):
    """A model file's JSON (None when absent), of ``types`` (an object unless said otherwise)."""
    if model_file(path) is None:
        return None
    try:
        return typed(json.loads(path.read_text(encoding="utf-8")), types, str(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON ({e})", "restore it from the model") from None


#: processing_kwargs values that change nothing bertfeat computes (sentence-transformers' own defaults: padding to the
#: longest text of a batch, which the attention mask hides; truncation to max_length)
_PROCESSING_NEUTRAL = {"padding": (True, "longest", "max_length"), "truncation": (True, "longest_first")}


def _processing_length(st_cfg: dict, where: str) -> int | None:
    """sentence-transformers 6's ``processing_kwargs`` (the tokenizer's call keywords, by modality): a text (or
    "common") ``max_length`` is the max length, "common" winning as it does there (a tokenizer is called with
    ``{**text, **common}``); padding and truncation as its defaults change nothing; any other text keyword changes
    how texts are tokenized in ways bertfeat does not reproduce, and is refused. Other modalities (image, audio,
    chat_template) are not used by a text encoder."""
    pk = st_cfg.get("processing_kwargs") or {}
    if not isinstance(pk, dict) or not all(isinstance(v, dict) for v in pk.values()):
        raise ConfigError(f"{where}: processing_kwargs must map modalities to keywords", "restore it from the model")
    text = {**pk.get("text", {}), **pk.get("common", {})}
    other = sorted(f"{k}={v!r}" for k, v in text.items() if k != "max_length" and v not in _PROCESSING_NEUTRAL.get(k, ()))
    if other:
        raise ConfigError(f"{where}: processing_kwargs {', '.join(other)} cannot be reproduced by bertfeat",
                          "bertfeat honours a text max_length there; remove the others to run the model as bertfeat "
                          "does (sentence-transformers would then run it the same way)")
    got = text.get("max_length")
    return None if got is None else _length({"max_length": got}, "max_length", f"{where}: processing_kwargs")


#: sentence_bert_config.json's keywords for transformers' loaders, by sentence-transformers' new name: (its old name,
#: {entry: the values that change no vector bertfeat computes (None: any)}). Its loading arguments (subfolder, revision,
#: trust_remote_code ...) are sentence-transformers' own, passed over the file's, so none changes anything; a model's
#: load dtype is a precision, which bertfeat chooses itself (as it does for config.json's dtype).
_HUB_KEYS = dict.fromkeys(("subfolder", "token", "cache_dir", "revision", "local_files_only", "trust_remote_code"))
#: a config's settings that do nothing when encoding (dropout is off; what the forward pass returns besides the states)
_INACTIVE_CONFIG = dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "dropout",
                                  "attention_dropout", "embedding_dropout", "mlp_dropout", "seq_classif_dropout",
                                  "qa_dropout", "summary_last_dropout", "output_hidden_states", "output_attentions",
                                  "return_dict"))
_LOADER_KWARGS = {  # (use_fast: transformers 5's AutoTokenizer drops it; the pooler is no Pooling module's input)
    "model_kwargs": ("model_args", {**_HUB_KEYS, "attn_implementation": None, "dtype": None, "torch_dtype": None,
                                    "add_pooling_layer": None, "low_cpu_mem_usage": None}),
    "processor_kwargs": ("tokenizer_args", {**_HUB_KEYS, "use_fast": None, "clean_up_tokenization_spaces": None,
                                            "model_max_length": None}),
    "config_kwargs": ("config_args", {**_HUB_KEYS, "use_cache": None, **_INACTIVE_CONFIG}),
}


def _loader_length(st_cfg: dict, where: str) -> tuple[int | None, str]:
    """sentence_bert_config.json's keywords for transformers' loaders (``model_kwargs``, ``processor_kwargs``,
    ``config_kwargs``, or their old names ``model_args``, ``tokenizer_args``, ``config_args``, which win as
    sentence-transformers renames them): the tokenizer's ``model_max_length`` -> (the max length, where it is: it wins
    over max_seq_length there), None without one. Any other entry overrides the model's config, the model's
    loading or the tokenizer's settings, which bertfeat does not reproduce: refused by name, never ignored."""
    got = None, ""
    for new, (old, neutral) in _LOADER_KWARGS.items():
        name = old if old in st_cfg else new
        kw = typed(st_cfg.get(name), dict, f"{where}: {name}", {})
        other = sorted(f"{k}={v!r}" for k, v in kw.items()
                       if k not in neutral or (neutral[k] is not None and v not in neutral[k]))
        if other:
            raise ConfigError(f"{where}: {name} {', '.join(other)} cannot be reproduced by bertfeat (sentence-transformers "
                              "passes it to transformers over config.json and tokenizer_config.json)",
                              "remove it to run the model as bertfeat does (sentence-transformers then runs it the same "
                              "way), or move it into config.json or tokenizer_config.json, which bertfeat reads as "
                              "transformers does")
        if kw.get("model_max_length") is not None:  # no limit (1e30) is the model's positions, as any larger one
            got = _length(kw, "model_max_length", f"{where}: {name}"), f"{name} model_max_length"
    return got


def _length(cfg: dict, key: str, where: str) -> int | None:
    """A max length entry (max_seq_length, model_max_length): None when absent, else a number of 3 or more, the fewest
    tokens a text takes with its special tokens (the least ``max_length`` accepts)."""
    v = typed(cfg.get(key), (int, float), f"{where}: {key}")
    if isinstance(v, float) and v < _NO_LIMIT:  # 256.0 and 6.5 alike: sentence-transformers and transformers' tokenizer
        # fail on either at the first text (TypeError: 'float' object cannot be interpreted as an integer); 1e30 is no limit
        if not v.is_integer():
            raise ConfigError(f"{where}: {key} is {v}, not a whole number of tokens",
                              "restore the file from the checkpoint (or set it to the model's max length)")
        if v >= 3:  # (below 3 is refused as such, next)
            raise ConfigError(f"{where}: {key} is {v}, not an integer",
                              f"write it as {int(v)}, without the decimal point (sentence-transformers fails on {v})")
    if v is not None and v < 3:
        raise ConfigError(f"{where}: {key} is {v}, below 3 (a text and its special tokens need at least 3 tokens)",
                          "restore the file from the checkpoint (or set it to the model's max length)")
    return v


#: a module setting sentence-transformers passes to the module as None when its file says null -> what it then does,
#: which is not what the setting's default does (bertfeat reads an absent setting as its default)
_NULL_SETTINGS = {
    "pooling_mode": "it fails at load",
    "include_prompt": "it reads null as false: a prompt's tokens are left out of the pooling",
    "bias": "it reads null as false: a Dense without bias, which fails on a saved linear.bias",
    "activation_function": "it fails at load (its Dense reads None as torch.nn.Identity, not the default Tanh)",
    "layer_start": "it fails at load",
    "num_hidden_layers": "it fails at load",
}


def _refuse_null(cfg: dict, keys: tuple[str, ...], where: str) -> None:
    """A null among ``keys`` of a module's config is refused, naming it: read as the setting's default, it would run
    the module otherwise than sentence-transformers does (_NULL_SETTINGS), silently."""
    for k in keys:
        if k in cfg and cfg[k] is None:
            raise ConfigError(f"{where}: {k} is null, which sentence-transformers does not read as the default "
                              f"({_NULL_SETTINGS[k]})", f"restore the file from the model, or give {k} its value "
                              "(remove the entry for the default)")


def pooling_modes(cfg: dict, where: str) -> tuple[str, ...]:
    """A Pooling config -> its modes, from the new ``pooling_mode`` key or the legacy flags (mean when it has
    neither, as sentence-transformers' Pooling). Refused, naming the keys, rather than pooled some other way: a key
    Pooling does not take, legacy flags that are all false (sentence-transformers pools by mean then, silently), or
    flags beside ``pooling_mode`` that say otherwise (it drops them)."""
    unknown = [k for k in cfg if k not in _POOLING_KEYS]
    if unknown:
        raise ConfigError(f"{where}: {', '.join(unknown)} {'is not a setting' if len(unknown) == 1 else 'are not settings'}"
                          " of a sentence-transformers Pooling module",
                          "restore the file from the model (a Pooling config holds pooling_mode or the legacy "
                          "pooling_mode_* flags, include_prompt and embedding_dimension)")
    _refuse_null(cfg, ("pooling_mode", "include_prompt"), where)
    flags = {k: typed(v, bool, f"{where}: {k}") for k, v in cfg.items() if k in _LEGACY_POOLING_KEYS}
    mode = typed(cfg.get("pooling_mode"), (str, list), f"{where}: pooling_mode")
    if isinstance(mode, list):
        for m in mode:
            typed(m, str, f"{where}: an entry of pooling_mode")
    if mode is None:
        if flags and not any(flags.values()):
            raise ConfigError(f"{where}: every pooling flag is false ({', '.join(flags)}): the file sets no pooling mode",
                              "set the flag of the mode the model was trained with to true (or give pooling_mode, e.g. "
                              "\"pooling_mode\": \"mean\"); bertfeat does not guess one")
        modes = tuple(m for k, m in _LEGACY_POOLING_KEYS.items() if flags.get(k)) or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
        clash = [f"{k} {json.dumps(v)}" for k, v in flags.items() if v != (_LEGACY_POOLING_KEYS[k] in modes)]
        if clash:
            raise ConfigError(f"{where}: {', '.join(clash)} contradict{'s' if len(clash) == 1 else ''} pooling_mode "
                              f"{json.dumps(mode)}", "keep pooling_mode and remove the pooling_mode_* flags (or make "
                              "them agree with it)")
    bad = [m for m in modes if m not in ST_POOLING_MODES]
    if bad or not modes:
        raise ConfigError(f"{where}: pooling mode {bad[0] if bad else mode!r} is not supported",
                          f"bertfeat knows {', '.join(ST_POOLING_MODES)}")
    twice = next((m for m in modes if modes.count(m) > 1), None)
    if twice is not None:  # (else refused later as a --pooling the user never gave)
        raise ConfigError(f"{where}: pooling_mode {json.dumps(mode)} names {twice} twice (sentence-transformers "
                          f"concatenates it again; bertfeat pools each mode once)",
                          "name each mode once in pooling_mode; the vectors then lack the repeated part, so fit what "
                          "uses them again")
    return modes


def _module_kind(entry, i: int, where: str) -> tuple[str, str]:
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise ConfigError(f"{where}: module {i} has no type", "restore modules.json from the model")
    t = entry["type"]
    kind = t.rsplit(".", 1)[-1]
    if not t.startswith("sentence_transformers.") or kind not in SUPPORTED_MODULES:
        raise ConfigError(
            f"{where}: module {i} '{t}' (path '{entry.get('path', '')}') cannot be reproduced by bertfeat",
            f"bertfeat runs {', '.join(SUPPORTED_MODULES)} modules; use {opt('pooling')} to get plain pooled features of "
            "the encoder instead of the model's embedding",
        )
    if not isinstance(entry.get("path"), str):  # (sentence-transformers fails on it: KeyError 'path')
        raise ConfigError(f"{where}: module {i} ({kind}) has no \"path\" (the folder of its files; \"\" for the model's "
                          "own)", "restore modules.json from the model")
    return kind, entry["path"]


def _io_names(cfg: dict) -> tuple[object, object]:
    """(input, output) key of a Dense / Normalize config, as sentence-transformers reads them: the input defaults to
    the sentence embedding, the output (missing or null) to the input."""
    src = cfg.get("module_input_name") or "sentence_embedding"
    return src, cfg.get("module_output_name") or src


def _dense_config(cfg: dict | None, path: str) -> tuple[int, int, bool, bool, str]:
    """A Dense config.json -> (in_features, out_features, bias, use_residual, activation), each checked: a count
    of 1 or more (a Dense with no inputs or no outputs computes nothing a model can use), true / false flags, an
    activation bertfeat runs."""
    where = f"{path}/config.json"
    if cfg is None:
        raise ConfigError(f"{where} is missing", "restore the Dense module's config.json from the model")
    for k, name in zip(("module_input_name", "module_output_name"), _io_names(cfg)):
        if name != "sentence_embedding":
            raise ConfigError(f"{where}: a Dense on '{name}' cannot be reproduced",
                              "bertfeat runs Dense modules on the sentence embedding only")
    _refuse_null(cfg, ("bias", "activation_function"), where)
    n_in, n_out = (typed(cfg.get(k), int, f"{where}: {k}") for k in ("in_features", "out_features"))
    for k, n in (("in_features", n_in), ("out_features", n_out)):
        if n is None or n < 1:
            raise ConfigError(f"{where}: {k} is {'missing' if n is None else n}, not a number of features (1 or more)",
                              "restore the Dense module's config.json and model.safetensors from the model (a Dense "
                              "layer maps 1 or more inputs to 1 or more outputs)")
    act_path = typed(cfg.get("activation_function"), str, f"{where}: activation_function",
                     "torch.nn.modules.activation.Tanh")
    if act_path not in DENSE_ACTIVATIONS:
        raise ConfigError(f"{where}: activation '{act_path}' is not supported",
                          f"bertfeat knows torch.nn's {', '.join(_TORCH_ACTIVATIONS)} "
                          "(e.g. torch.nn.modules.activation.Tanh)")
    bias = typed(cfg.get("bias"), bool, f"{where}: bias", True)
    residual = typed(cfg.get("use_residual"), bool, f"{where}: use_residual", False)
    return n_in, n_out, bias, residual, DENSE_ACTIVATIONS[act_path]


def _weights_file(folder: Path) -> Path:
    """A module's weights file, as sentence-transformers picks it: model.safetensors, else pytorch_model.bin (older
    versions saved a Dense so), else model.safetensors (absent: _module_weights refuses)."""
    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    return pt if model_file(st) is None and model_file(pt) is not None else st


def _module_weights(f: Path, path: str, kind: str) -> dict[str, np.ndarray]:
    """The tensors of a module's weights file ``f`` (_weights_file), by name: float32 (float16 and bfloat16 widened
    exactly), each finite. A pytorch_model.bin is read as torch.load(weights_only=True) reads it, never unpickled."""
    if model_file(f) is None:
        other = sorted(p.name for p in f.parent.glob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        raise BertfeatError(f"{path} has no model.safetensors or pytorch_model.bin" + (
            f" (only {', '.join(other)}, which sentence-transformers does not load either)" if other else ""),
            f"restore the {kind} module's weights from the model, or re-save it where sentence-transformers is "
            "installed: SentenceTransformer(dir).save(dir, safe_serialization=True)")
    from .weights import read_module_file

    return read_module_file(f)


def _module_tensors(d: Path, kind: str, path: str, want: dict[str, tuple], config: str,
                    fix: str) -> tuple[dict[str, np.ndarray], Path]:
    """The weights of the ``kind`` module in folder ``path`` (its weights file: _weights_file, read by
    _module_weights), holding exactly the tensors of ``want`` (name -> shape, from its config.json, described by
    ``config``), each as float32, and the file; a missing tensor, one of another shape or one more (a tensor the config
    does not use: sentence-transformers loads them strictly) is refused naming it (``fix``: what to restore, the file
    named by ``{file}``)."""
    f = _module_paths(d, kind, path)[-1]
    t = _module_weights(f, path, kind)
    for name, shape in want.items():
        if name not in t or t[name].shape != shape:
            got = f"has shape {tuple(t[name].shape)}" if name in t else "is missing"
            raise BertfeatError(f"{f}: tensor '{name}' {got}, expected {shape} from its config.json",
                                "re-save the model")
    if set(t) - set(want):
        raise BertfeatError(f"{f}: tensors {sorted(set(t) - set(want))} that its config.json does not use "
                            f"({config})", fix.format(file=f.name))
    return {name: np.ascontiguousarray(t[name], dtype=np.float32) for name in want}, f


def _load_dense(d: Path, path: str) -> DenseLayer:
    cfg_file = _module_paths(d, "Dense", path)[0]
    n_in, n_out, bias, residual, act = _dense_config(_read_json(cfg_file), path)
    # the tensors this config uses, each of its shape; one more (a bias beside bias false) would be silently unused
    want = {"linear.weight": (n_out, n_in), **({"linear.bias": (n_out,)} if bias else {}),
            **({"residual.weight": (n_out, n_in)} if residual and n_in != n_out else {})}
    t, f = _module_tensors(d, "Dense", path, want, f"bias {json.dumps(bias)}, use_residual {json.dumps(residual)}, "
                           f"{n_in} -> {n_out}", "restore the module's config.json and {file} together from the model: "
                           "a Dense module bertfeat reproduces uses every tensor it saved")
    rw = np.ascontiguousarray(t["residual.weight"].T) if "residual.weight" in want else None
    return DenseLayer(path, np.ascontiguousarray(t["linear.weight"].T), t.get("linear.bias"), act, rw, residual, f.name)


def _module_config(d: Path, kind: str, path: str) -> dict | None:
    """The config.json of a Dropout, LayerNorm or WeightedLayerPooling module as sentence-transformers builds it
    (cls(**config)): only the keys it takes (_MODULE_KEYS), a missing file refused where it has no defaults; None for
    a Dropout without one."""
    keys, required = _MODULE_KEYS[kind]
    where = _rel_file(path, "config.json")
    cfg = _read_json(_module_paths(d, kind, path)[0])
    if cfg is None and required:
        raise ConfigError(f"{where} is missing (sentence-transformers cannot build the {kind} module without it)",
                          f"restore the {kind} module's config.json from the model")
    other = sorted(set(cfg or {}) - set(keys))
    if other:
        raise ConfigError(f"{where}: {', '.join(other)} {'is' if len(other) == 1 else 'are'} not a setting of "
                          f"sentence-transformers' {kind} module (it takes {', '.join(keys)}, and fails on any other)",
                          f"restore the {kind} module's config.json from the model")
    return cfg


def _load_dropout(d: Path, path: str) -> DropoutStep:
    """A Dropout module: its rate checked as torch's Dropout checks it (0 to 1; 0.2 without a config.json)."""
    where = f"{_rel_file(path, 'config.json')}: dropout"
    cfg = _module_config(d, "Dropout", path)
    p = typed((cfg or {}).get("dropout"), float, where, 0.2)
    if not 0 <= p <= 1:
        raise ConfigError(f"{where} is {p}, not a probability from 0 to 1 (torch's Dropout refuses it)",
                          "restore the Dropout module's config.json from the model")
    return DropoutStep(path, float(p), cfg is not None)


def _load_layer_norm(d: Path, path: str) -> LayerNormStep:
    """A LayerNorm module: config.json's dimension, its weights file's norm.weight and norm.bias of that shape
    (sentence-transformers loads them strictly: none missing, none more)."""
    where = f"{_rel_file(path, 'config.json')}: dimension"
    n = typed(_module_config(d, "LayerNorm", path).get("dimension"), int, where)
    if n is None or n < 1:
        raise ConfigError(f"{where} is {'missing' if n is None else n}, not a number of features (1 or more)",
                          "restore the LayerNorm module's config.json and model.safetensors from the model")
    t, f = _module_tensors(d, "LayerNorm", path, {"norm.weight": (n,), "norm.bias": (n,)}, f"dimension {n}",
                           "restore the LayerNorm module's config.json and {file} together from the model "
                           "(sentence-transformers refuses a tensor its LayerNorm does not have)")
    return LayerNormStep(path, t["norm.weight"], t["norm.bias"], f.name)


def _hidden_states_off(d: Path, encoder_dir: str, st_cfg: dict) -> str | None:
    """Why the encoder returns no hidden state of every layer to sentence-transformers (its Transformer module passes
    them on as all_layer_embeddings only when the model's config says output_hidden_states, from config.json or
    sentence_bert_config.json's config_kwargs, which win), else None; null (as 0 or []) is false there. A value that
    selects some layers (an index or a list of them, as transformers takes it) or tie_last_hidden_states false (the
    last state taken before its final norm) is refused: bertfeat keeps every layer, the last one as the model returns
    it."""
    cfg_name = _rel_file(encoder_dir, "config.json")
    cfg = _read_json(d / cfg_name) or {}
    name = "config_args" if "config_args" in st_cfg else "config_kwargs"
    kw = st_cfg.get(name) if isinstance(st_cfg.get(name), dict) else {}
    where, on = ((f"{_rel_file(encoder_dir, 'sentence_bert_config.json')}: {name}", kw["output_hidden_states"])
                 if "output_hidden_states" in kw else (cfg_name, cfg.get("output_hidden_states", False)))
    if on and on is not True:  # an index or a list of them: transformers' selection of some layers
        raise ConfigError(f"{where}: output_hidden_states {json.dumps(on)} selects some layers, which bertfeat cannot "
                          "reproduce under a WeightedLayerPooling", "set it to true (every layer) or false")
    on = bool(on)  # false, null, 0, []: transformers captures no hidden state, and the module does nothing there
    tie = cfg.get("tie_last_hidden_states")
    if on and tie not in (None, True):
        raise ConfigError(f"{cfg_name}: tie_last_hidden_states {json.dumps(tie)} (the last hidden state taken before "
                          "the encoder's final norm) cannot be reproduced by bertfeat under a WeightedLayerPooling",
                          "remove tie_last_hidden_states from config.json (the last hidden state is then the "
                          "encoder's output, as for every text encoder)")
    return None if on else f"{where} does not set output_hidden_states"


def _load_layer_weights(d: Path, path: str, hidden_size: int, num_layers: int, off: str | None) -> WeightedLayerPooling:
    """A WeightedLayerPooling module: config.json's embedding_dimension (the encoder's hidden size), num_hidden_layers
    (the encoder's layers, which sentence-transformers stacks: another count fails there) and layer_start (0 .. L;
    4 by default, as there), its weights file's layer_weights of one weight per layer from layer_start to L, which do
    not sum to 0 (the average would be infinite)."""
    cfg = _module_config(d, "WeightedLayerPooling", path)
    where = _rel_file(path, "config.json")
    for k in ("embedding_dimension", "word_embedding_dimension"):
        dim = typed(cfg.get(k), int, f"{where}: {k}")
        if dim is not None and dim != hidden_size:
            raise ConfigError(f"{where}: {k} {dim} is not the encoder's hidden size {hidden_size}",
                              "use the WeightedLayerPooling config that came with this model")
    if cfg.get("embedding_dimension", cfg.get("word_embedding_dimension")) is None:
        raise ConfigError(f"{where}: embedding_dimension is missing (sentence-transformers cannot build the module "
                          "without it)", "restore the WeightedLayerPooling module's config.json from the model")
    _refuse_null(cfg, ("num_hidden_layers", "layer_start"), where)
    n = typed(cfg.get("num_hidden_layers"), int, f"{where}: num_hidden_layers", 12)
    start = typed(cfg.get("layer_start"), int, f"{where}: layer_start", 4)
    if n != num_layers or not 0 <= start <= n:
        raise ConfigError(f"{where}: num_hidden_layers {n}, layer_start {start} do not name layers of the encoder's "
                          f"{num_layers} (num_hidden_layers {num_layers}, layer_start 0 to {num_layers})",
                          "use the WeightedLayerPooling config that came with this model")
    k = n + 1 - start
    t, f = _module_tensors(d, "WeightedLayerPooling", path, {"layer_weights": (k,)}, f"num_hidden_layers {n}, "
                           f"layer_start {start}", "restore the WeightedLayerPooling module's config.json and {file} "
                           "together from the model")
    w = t["layer_weights"]
    if not np.isfinite(w).all() or w.sum(dtype=np.float32) == 0:
        raise ConfigError(f"{f}: layer_weights {w.tolist()} are not finite weights of a nonzero sum",
                          f"restore the module's {f.name} from the model")
    return WeightedLayerPooling(path, start, w, off, f.name)


def _rel_file(folder: str, name: str) -> str:
    """A file of a folder of the model (the encoder's, a module's) as messages name it: ``name`` at the top of the
    model folder (''), else ``folder/name`` (``0_Transformer/config.json`` in the older layout, ``2_Dense/config.json``)."""
    return f"{folder}/{name}" if folder else name


def _module_path(path: str) -> str:
    """A modules.json path, normalized ('.' and '' -> '', "./0_Transformer/" -> "0_Transformer")."""
    norm = Path(path).as_posix() if path else ""
    return "" if norm == "." else norm


def module_entries(d: Path) -> list[tuple[str, str]]:
    """modules.json's modules in order, as (kind, folder relative to ``d``: '' for the top); [] without modules.json.
    The one reading of modules.json behind read_pipeline and module_files: each module one bertfeat reproduces, its
    path inside ``d`` (a symbolic link out of it is refused where its files are named, ``_module_paths``)."""
    modules = _read_json(d / "modules.json", (list, dict))
    if modules is None:
        return []
    if not isinstance(modules, list) or not modules:
        raise ConfigError(f"{d / 'modules.json'} is not a list of modules", "restore modules.json from the model")
    out = []
    names: dict[str, int] = {}
    for i, entry in enumerate(modules):
        kind, path = _module_kind(entry, i, "modules.json")
        name = entry.get("name")
        if isinstance(name, str) and names.setdefault(name, i) != i:  # SentenceTransformer keys its modules by name
            raise ConfigError(f"modules.json: modules {names[name]} and {i} are both named '{name}' "
                              f"(sentence-transformers keeps only module {i}, in the place of module {names[name]})",
                              "restore modules.json from the model (each module has a name of its own)")
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise ConfigError(f"modules.json: the {kind} module's path '{path}' is outside the model folder",
                              "restore modules.json from the model (every module's files are in the model folder)")
        if path and (d / path).is_file():  # its files were looked for inside it: "config.json/config.json is missing"
            raise ConfigError(f"modules.json: the {kind} module's path '{path}' is a file, not a folder",
                              "restore modules.json from the model (a module's path names the folder of its files)")
        out.append((kind, _module_path(path)))
    return out


def _module_paths(d: Path, kind: str, folder: str) -> list[Path]:
    """The files a module of ``kind`` in ``folder`` reads (MODULE_FILES), each inside ``d`` once links are followed."""
    names = MODULE_FILES[kind] if folder or kind != "Normalize" else ()
    return [inside_folder(d, _weights_file(d / folder) if name == "model.safetensors" else d / folder / name)
            for name in names]


def module_files(d: Path) -> list[Path]:
    """Every file the modules of model folder ``d`` read besides the encoder's (hub.model_files): the Pooling's,
    Normalize's and Dropout's config.json, each Dense's, LayerNorm's and WeightedLayerPooling's config.json and weights
    file (model.safetensors, or pytorch_model.bin: _weights_file), as read_pipeline reads them (MODULE_FILES)."""
    return [f for kind, folder in module_entries(d) for f in _module_paths(d, kind, folder)]


def _check_transformer(i: int, path: str, d: Path, encoder_dir: str, st_cfg: dict) -> None:
    """The Transformer module: first, in the folder the model's encoder was loaded from, a feature-extraction
    encoder on text (modality_config), with the folder's own tokenizer (tokenizer_name_or_path, which sentence-
    transformers 6 still follows, names that folder or is absent)."""
    if i != 0:
        raise ConfigError(f"modules.json: the Transformer module must come first (found module {i} at '{path}')",
                          "bertfeat runs models whose first module is the Transformer")
    if path != encoder_dir:
        raise ConfigError(f"modules.json: the Transformer module's folder '{path}' has no config.json",
                          f"restore the encoder's files (config.json, model.safetensors, tokenizer.json or vocab.txt) "
                          f"into {path}, where sentence-transformers loads them from")
    sbc = _rel_file(encoder_dir, "sentence_bert_config.json")
    task = st_cfg.get("transformer_task", "feature-extraction")
    out = st_cfg.get("module_output_name", "token_embeddings")
    if task != "feature-extraction" or out != "token_embeddings":
        raise ConfigError(f"{sbc}: transformer_task '{task}' / output '{out}' cannot be reproduced",
                          "bertfeat runs feature-extraction encoders (token embeddings)")
    modality = st_cfg.get("modality_config")
    if modality is not None and not _text_forward(modality):
        shown = json.dumps(modality)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        raise ConfigError(f"{sbc}: modality_config {shown} cannot be reproduced (sentence-"
                          "transformers calls that method or reads that output)",
                          f"bertfeat runs an encoder's forward pass on text: remove modality_config, or set it to "
                          f"{json.dumps({'text': _TEXT_FORWARD})}")
    tok = st_cfg.get("tokenizer_name_or_path")
    if tok is not None and (not isinstance(tok, str) or not _same_folder(Path(tok), d / encoder_dir)):
        raise ConfigError(f"{sbc}: tokenizer_name_or_path {json.dumps(tok)} names another tokenizer than the "
                          "model folder's, which sentence-transformers loads in its place; bertfeat reads only the "
                          "model folder's files",
                          f"copy that tokenizer's files (tokenizer.json, tokenizer_config.json, vocab.txt, "
                          f"special_tokens_map.json) into {d / encoder_dir} and remove tokenizer_name_or_path from "
                          f"{sbc}")


#: the Transformer's modality_config sentence-transformers writes for a feature-extraction encoder
_TEXT_FORWARD = {"method": "forward", "method_output_name": "last_hidden_state"}


def _text_forward(modality) -> bool:
    """modality_config is the forward pass's last_hidden_state on text, alone (its output name as a one-key path too)."""
    text = modality.get("text") if isinstance(modality, dict) and len(modality) == 1 else None
    return (isinstance(text, dict) and text.keys() == _TEXT_FORWARD.keys() and text["method"] == "forward"
            and text["method_output_name"] in ("last_hidden_state", ["last_hidden_state"]))


def _same_folder(a: Path, b: Path) -> bool:
    """``a`` (as sentence-transformers reads it: from the working directory) is the folder ``b``."""
    try:
        return a.is_dir() and a.resolve() == b.resolve()
    except OSError:
        return False


def _read_pooling(d: Path, folder: str, p: ModelPipeline, hidden_size: int) -> None:
    """A Pooling module's config.json onto ``p``: its modes (pooling_modes), include_prompt, its width checked."""
    cfg_file, = _module_paths(d, "Pooling", folder)
    where = f"{folder}/config.json"
    cfg = _read_json(cfg_file)
    if cfg is None:
        raise ConfigError(f"{where} is missing", "restore the Pooling module's config.json")
    p.pooling = pooling_modes(cfg, where)
    for k in ("embedding_dimension", "word_embedding_dimension"):
        dim = typed(cfg.get(k), int, f"{where}: {k}")
        if dim is not None and dim != hidden_size:
            raise ConfigError(f"{where}: {k} {dim} is not the encoder's hidden size {hidden_size}",
                              "use the Pooling config that came with this model")
    p.pooling_source = where
    p.include_prompt = typed(cfg.get("include_prompt"), bool, f"{where}: include_prompt", True)


#: the modules after the Pooling that read a folder -> their loader (Normalize is read in _read_normalize)
_LOADERS = {"Dense": _load_dense, "Dropout": _load_dropout, "LayerNorm": _load_layer_norm}


def _read_modules(d: Path, modules: list, p: ModelPipeline, hidden_size: int, encoder_dir: str, st_cfg: dict,
                  num_layers: int) -> tuple:
    """modules.json's modules (module_entries) read in order: a WeightedLayerPooling and the Pooling onto ``p``; -> the
    steps after it (Dense, LayerNorm, Dropout, "normalize"), each one's width checked against what comes before it
    (_check_widths)."""
    steps: list = []
    seen_pooling = False
    for i, (kind, path) in enumerate(modules):
        if kind == "Transformer":
            _check_transformer(i, path, d, encoder_dir, st_cfg)
        elif i == 0:
            raise ConfigError(f"modules.json: module 0 is {kind}, not the Transformer",
                              "bertfeat runs models whose first module is the Transformer")
        elif kind == "WeightedLayerPooling":  # it reads every layer's states, which only the Transformer gives
            if i != 1:
                raise ConfigError(f"modules.json: WeightedLayerPooling module {i} does not come right after the "
                                  "Transformer", "bertfeat runs one WeightedLayerPooling, between the Transformer and "
                                  "the Pooling")
            p.layer_weights = _load_layer_weights(d, path, hidden_size, num_layers,
                                                  _hidden_states_off(d, encoder_dir, st_cfg))
        elif kind == "Pooling":
            if seen_pooling or steps:
                raise ConfigError(f"modules.json: Pooling module {i} comes after another Pooling, Dense, Normalize, "
                                  "Dropout or LayerNorm",
                                  "bertfeat runs Transformer -> Pooling -> Dense / Normalize / Dropout / LayerNorm")
            _read_pooling(d, path, p, hidden_size)
            seen_pooling = True
        elif kind == "Normalize":
            steps += _read_normalize(d, path)
        elif not seen_pooling:  # sentence-transformers fails on it: only a Pooling makes the sentence embedding
            raise ConfigError(f"modules.json: {kind} module {i} comes before any Pooling",
                              f"bertfeat runs {kind} modules on the pooled sentence embedding only")
        else:
            steps.append(_LOADERS[kind](d, path))
    if not seen_pooling:  # not mean pooling in its place: sentence-transformers makes no sentence embedding either
        p.no_own_embedding = ("its modules.json lists no Pooling module, so it defines no sentence embedding "
                              "(sentence-transformers cannot encode with it either)")
        return ()
    _check_widths(steps, hidden_size * len(p.pooling))
    return tuple(steps)


def _read_normalize(d: Path, path: str) -> list:
    """A Normalize module -> ["normalize"], or [] for one that writes another key than the sentence embedding (it
    leaves the sentence embedding as it is, as in sentence-transformers)."""
    cfg = next((_read_json(f) for f in _module_paths(d, "Normalize", path)), None)
    src, dst = _io_names(cfg or {})
    if src != "sentence_embedding":
        raise ConfigError(f"{path}/config.json: a Normalize of '{src}' cannot be reproduced",
                          "bertfeat normalizes the sentence embedding only")
    return ["normalize"] if dst == "sentence_embedding" else []


def _check_widths(steps: list, width: int) -> None:
    """Each Dense's in_features and each LayerNorm's dimension is the width of the embedding before it (``width``
    after the Pooling): sentence-transformers would fail on the first text."""
    for s in steps:
        if isinstance(s, DenseLayer):
            if s.in_features != width:
                raise ConfigError(f"{s.path}: in_features {s.in_features} does not match the {width} dimensions "
                                  "before it", "use the modules that came with this model")
            width = s.out_features
        elif isinstance(s, LayerNormStep) and s.dimension != width:
            raise ConfigError(f"{_rel_file(s.path, 'config.json')}: dimension {s.dimension} does not match the {width} "
                              "dimensions before it", "use the modules that came with this model")


def _truncate_dim(cst: dict, width: int) -> int | None:
    """config_sentence_transformers.json's ``truncate_dim`` -> the features the model's embedding of ``width`` keeps,
    None for all (absent, or ``width`` or more: sentence-transformers keeps them all then). 0 or less is refused: there
    it gives empty vectors, or drops the last features."""
    t = typed(cst.get("truncate_dim"), int, "config_sentence_transformers.json: truncate_dim")
    if t is not None and t < 1:
        raise ConfigError(f"config_sentence_transformers.json: truncate_dim is {t}, not a number of features (1 or more)",
                          "restore the file from the model, or remove truncate_dim to keep the whole embedding")
    return t if t is not None and t < width else None


def _default_pooling(e: Path) -> tuple[tuple[str, ...], str]:
    """A folder without modules.json: the pooling SentenceTransformer gives it (its _load_default_modules), the last
    token when config.json's first architecture is a ...ForCausalLM (unless ``is_causal`` is false), else the mean."""
    cfg = _read_json(e / "config.json") or {}
    archs = cfg.get("architectures")
    first = archs[0] if isinstance(archs, (list, str)) and archs else None
    if isinstance(first, str) and first.endswith("ForCausalLM") and cfg.get("is_causal", True):
        return ("lasttoken",), (f"default (the model has no Pooling module; sentence-transformers pools the last "
                                f"token of a {first})")
    return ("mean",), ModelPipeline.pooling_source


def _check_model_type(cst: dict, p: ModelPipeline) -> None:
    """config_sentence_transformers.json's ``model_type``: a folder of another kind (SparseEncoder, CrossEncoder ...)
    is not run by its modules.json in SentenceTransformer (it pools the encoder as a plain checkpoint's, _default_pooling,
    ignoring the modules, prompts and truncate_dim): it has no own embedding bertfeat would give as
    sentence-transformers does."""
    mt = cst.get("model_type", "SentenceTransformer")
    if mt != "SentenceTransformer" and not p.no_own_embedding:
        p.no_own_embedding = (f"its config_sentence_transformers.json says model_type {json.dumps(mt)}, not "
                              "\"SentenceTransformer\" (sentence-transformers' SentenceTransformer runs none of its "
                              "modules.json on such a folder: it pools the encoder as a plain checkpoint's instead)")


def read_pipeline(d: Path, hidden_size: int, max_positions: int, encoder_dir: str = "", *,
                  num_layers: int) -> ModelPipeline:
    """The sentence-transformers pipeline of model folder ``d`` (checked; unsupported parts refused).

    ``encoder_dir``: the encoder's folder inside ``d`` ('' for ``d`` itself; ModelLocation.encoder_dir), which holds
    sentence_bert_config.json and tokenizer_config.json; modules.json, config_sentence_transformers.json and the
    module folders are read from ``d``. ``num_layers``: the encoder's (a WeightedLayerPooling names its layers)."""
    p = ModelPipeline()
    modules = module_entries(d)
    # without modules.json, SentenceTransformer builds its own Transformer and Pooling and reads neither file
    st_cfg = (_read_json(d / encoder_dir / "sentence_bert_config.json") or {}) if modules else {}
    sbc = _rel_file(encoder_dir, "sentence_bert_config.json")
    if modules:
        p.modules_source = "modules.json"
        p.steps = _read_modules(d, modules, p, hidden_size, encoder_dir, st_cfg, num_layers)
    else:
        p.pooling, p.pooling_source = _default_pooling(d / encoder_dir)

    cst = (_read_json(d / "config_sentence_transformers.json") or {}) if modules else {}
    _check_model_type(cst, p)
    prompts = cst.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, (str, type(None))) for v in prompts.values()):
        raise ConfigError("config_sentence_transformers.json: prompts must map names to texts", "restore it from the model")
    p.prompts = {str(k): v or "" for k, v in prompts.items()}
    for k, v in p.prompts.items():  # no tokenizer takes such a text (sentence-transformers fails on it: TypeError)
        bad = surrogate_reason(v, f"prompt {k!r}")
        if bad:
            raise ConfigError(f"config_sentence_transformers.json: {bad}", "restore the file from the model")
    p.default_prompt_name = typed(cst.get("default_prompt_name"), str, "config_sentence_transformers.json: "
                                  "default_prompt_name")
    if not p.no_own_embedding:
        p.truncate_dim = _truncate_dim(cst, p.dense[-1].out_features if p.dense else hidden_size * len(p.pooling))
    if p.default_prompt_name is not None and p.default_prompt_name not in p.prompts:
        raise ConfigError(f"config_sentence_transformers.json: default_prompt_name '{p.default_prompt_name}' is not one "
                          f"of the prompts ({', '.join(p.prompts) or 'none'})", "restore it from the model")

    p.do_lower_case = typed(st_cfg.get("do_lower_case"), bool, f"{sbc}: do_lower_case", False)
    msl, key = _processing_length(st_cfg, sbc), "processing_kwargs max_length"
    loader = _loader_length(st_cfg, sbc)  # checked whether or not processing_kwargs sets the length
    if msl is None:
        msl, key = loader
    if msl is None:
        msl, key = _length(st_cfg, "max_seq_length", sbc), "max_seq_length"
    if msl:
        p.max_seq_length, p.max_length_source = int(msl), f"{sbc} {key}"
    else:
        tcj = _rel_file(encoder_dir, "tokenizer_config.json")
        tc = _read_json(d / tcj) or {}
        mml = _length(tc, "model_max_length", tcj)  # type-checked: a string "16" was passed over for the positions
        if mml is not None and mml < _NO_LIMIT:
            p.max_seq_length, p.max_length_source = int(mml), f"{tcj} model_max_length"
    for task in ("query", "document"):  # sentence-transformers 6: the max length of encode_query / encode_document
        n = _length(st_cfg, f"{task}_length", sbc)
        if n is not None:
            p.task_lengths[task] = int(n)
    if p.max_seq_length is None or p.max_seq_length > max_positions:
        if p.max_seq_length is not None:
            p.max_length_source += f", capped at the {max_positions} positions of the model"
        else:
            p.max_length_source = f"the {max_positions} positions of the model"
        p.max_seq_length = max_positions
    return p
