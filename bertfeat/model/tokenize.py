"""Tokenization with Hugging Face `tokenizers`.

From ``tokenizer.json`` when the model has one, else built from ``vocab.txt`` and the options in
``tokenizer_config.json`` exactly as transformers builds BertTokenizerFast (BertNormalizer with
lower-casing / Chinese-character splitting / accent stripping, BertPreTokenizer, WordPiece,
[CLS] A [SEP] (B [SEP]) template with token type ids 0/1).

As transformers 5's AutoTokenizer (and so sentence-transformers) loads a folder: the tokenizer class it picks
(``transformers_class``) rebuilds, for BERT / DistilBERT / ELECTRA, MPNet and RoBERTa, the normalizer,
pre-tokenizer and post-processor from ``tokenizer_config.json`` and keeps only the vocabulary (and merges) of
``tokenizer.json`` (``as_transformers``); for XLM-R and CamemBERT the same but for the SentencePiece charsmap and the
Unigram model, kept; other classes load ``tokenizer.json`` as stored. The special and added
tokens are added to either as transformers adds them, from the files and keys it reads, in its order
(``declared.py``: ``declared_tokens``, ``DeclaredTokens.add_to``).

Padding and truncation are always set here, never taken from tokenizer.json: rows are encoded
whole (so ``n_tokens`` is the real length), and only rows longer than ``max_length`` are encoded
again with truncation (longest-first for pairs, as transformers does; from the left with
``tokenizer_config.json``'s ``truncation_side: left``). A pair is cut here, each text encoded alone as tokenizers
does it (``_cut_pairs``): tokenizers' own truncation of a pair pairs every overflowing part of one text with every
part of the other, memory that grows with the product of their lengths.

Long texts in bounded memory. The tokenizer needs about 200 bytes per character of a text at once (1 MB of text:
200 MB; 5 MB: 1 GB), so a text longer than ``PIECE_CHARS`` characters is never handed to it whole (``LongText``):
it is tokenized in pieces of about that size, each starting where a pre-token ("word") of the text starts. A piece's
tokens are the text's own except in its first pre-token (text-start effects: a prefix space, a prepended ``▁``) and
in its last ones (cut off by the piece's end), so those are taken from the neighbouring pieces: the ids (and so the
exact ``n_tokens`` and every window of a chunked text) come out as tokenizing the whole text gives them, with one
piece in memory at a time. The model's input is then tokenized from a cut of the text that ends (starts, for
``truncation_side: left``) on a pre-token boundary past the first (last) ``max_length`` tokens, truncated
explicitly (longest-first from the whole texts' token counts) and framed by the post-processor: the same ids as the
whole text truncated. This holds for tokenizers whose normalizer and pre-tokenizer work locally (``_local``: BERT's,
byte-level BPE's, SentencePiece's Metaspace, the whitespace and regex splitters); others, and a text that has no
pre-token boundary to cut at (a piece with too few pre-tokens doubles until the text ends), are tokenized whole.
"""

from __future__ import annotations

import json
import os
import re
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import json_object, model_file, typed
from .declared import DeclaredTokens, declared_tokens, json_token, own_class
from ..errors import BertfeatError, ConfigError, opt


def library_version() -> str:
    """The ``tokenizers`` library's version, read at each call.

    Another version may split a text into other tokens (a normalizer or pre-tokenizer fixed or changed), so it is
    part of what identifies a vector: the cache key (``cache.store.cache_fingerprint``), the resume manifest and
    the provenance record it.

    Returns
    -------
    str
        ``tokenizers.__version__``, e.g. ``"0.23.3"``.
    """
    import tokenizers

    return str(tokenizers.__version__)


@dataclass
class Tokenized:
    """Tokenized rows, unpadded."""

    ids: list[np.ndarray]  # per row int32 ids with [CLS]/[SEP], at most max_length long
    type_ids: list[np.ndarray]  # per row int32 token type ids (0, and 1 for the pair)
    n_tokens: np.ndarray  # (n,) int64 length before truncation, special tokens included
    truncated: np.ndarray  # (n,) bool: the row was cut to max_length

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(a) for a in self.ids), dtype=np.int64, count=len(self.ids))


def read_vocab(path: Path) -> dict[str, int]:
    """vocab.txt: one token per line, the line number is the id (as transformers' load_vocab)."""
    vocab: dict[str, int] = {}
    model_file(path)  # a named pipe is refused, never opened
    try:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                vocab[line.rstrip("\n")] = i
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text ({e.reason})",
                          "restore the vocab.txt that came with the model (transformers reads it as UTF-8)") from None
    return vocab


# transformers 5's AutoTokenizer: the tokenizer class by model_type when neither tokenizer_config.json nor
# config.json names one (models/auto/tokenization_auto.py TOKENIZER_MAPPING_NAMES). "TokenizersBackend" loads
# tokenizer.json as stored.
_CLASS_BY_MODEL_TYPE = {
    "bert": "BertTokenizer", "distilbert": "BertTokenizer", "electra": "BertTokenizer", "mpnet": "MPNetTokenizer",
    "roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer", "camembert": "CamembertTokenizer",
    "modernbert": "TokenizersBackend",
}
# classes transformers 5 loads as BertTokenizer itself (aliases, or names its AutoTokenizer maps to it): their folders
# tokenize as BertTokenizer's, tokenizer_config.json's do_lower_case and all
_BERT_ALIASES = frozenset({"MobileBertTokenizer", "SqueezeBertTokenizer", "LayoutLMTokenizer", "LxmertTokenizer"})
# classes whose __init__ is BertTokenizer's (DistilBertTokenizer subclasses it; ElectraTokenizer is an alias)
_WORDPIECE_CLASSES = frozenset({"BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer"})
# classes whose __init__ rebuilds a SentencePiece (Unigram) tokenizer's normalizer, pre-tokenizer and template
_SENTENCEPIECE_CLASSES = frozenset({"XLMRobertaTokenizer", "CamembertTokenizer"})


def transformers_class(tok_cfg: dict, model_cfg: dict) -> str:
    """The tokenizer class transformers 5's AutoTokenizer loads a folder as ("Fast" dropped: the same class).

    tokenizer_config.json's ``tokenizer_class``, else config.json's, else the one of the ``model_type``; a class
    named for a model_type whose own is TokenizersBackend (ModernBERT) loads as TokenizersBackend."""
    declared = tok_cfg.get("tokenizer_class") or model_cfg.get("tokenizer_class")
    registered = _CLASS_BY_MODEL_TYPE.get(model_cfg.get("model_type"))
    if isinstance(declared, str) and declared:
        name = declared.removesuffix("Fast")
        name = "BertTokenizer" if name in _BERT_ALIASES else name
        return "TokenizersBackend" if registered == "TokenizersBackend" else name
    return registered or "TokenizersBackend"


def _class_origin(tok_cfg: dict, model_cfg: dict) -> str:
    """Where transformers_class found the class, for messages."""
    for f, c in (("tokenizer_config.json", tok_cfg), ("config.json", model_cfg)):
        if isinstance(c.get("tokenizer_class"), str) and c["tokenizer_class"]:
            return f"{f}'s tokenizer_class {c['tokenizer_class']!r}"
    return f"config.json's model_type {model_cfg.get('model_type')!r}"


#: what the tokenizer of each class that builds its own (declared.own_class) is, and the class named for each kind of
#: tokenizer.json model
_CLASS_KINDS = {"BertTokenizer": "WordPiece", "MPNetTokenizer": "WordPiece", "RobertaTokenizer": "byte-level BPE",
                "XLMRobertaTokenizer": "SentencePiece (Unigram)", "CamembertTokenizer": "SentencePiece (Unigram)"}
_MODEL_CLASS = {"WordPiece": "BertTokenizer", "BPE": "RobertaTokenizer", "Unigram": "XLMRobertaTokenizer"}


def check_class_fits(d: Path, cls_name: str, model: str, tok_cfg: dict, model_cfg: dict) -> None:
    """Refuse a folder whose tokenizer class (transformers_class) builds another kind of tokenizer than its file holds
    (``model``: tokenizer.json's model type, or "vocab.txt"): transformers 5's class then builds its own tokenizer over
    that vocabulary (a byte-level BPE over WordPiece pieces, an empty one without vocab.json and merges) or fails to
    load it, so no tokenizer bertfeat builds from the file gives sentence-transformers' tokens. A guess either way."""
    own = own_class(cls_name)
    want = _CLASS_KINDS.get(own)
    fits = {"vocab.txt": ("WordPiece",), "WordPiece": ("WordPiece",), "BPE": ("byte-level BPE",),
            "Unigram": ("SentencePiece (Unigram)",)}.get(model, ())
    if want is None or want in fits:
        return
    origin = _class_origin(tok_cfg, model_cfg)
    if model == "vocab.txt":
        raise ConfigError(f"{d / 'vocab.txt'} is a WordPiece vocabulary, but transformers loads this folder's tokenizer "
                          f"as {cls_name} ({origin}), a {want} tokenizer that does not read vocab.txt (transformers 5 builds "
                          "it empty: sentence-transformers gets only special and unknown tokens)",
                          f"add \"tokenizer_class\": \"BertTokenizer\" to {d / 'tokenizer_config.json'} if the model "
                          "was trained with this vocabulary, or add the model's own tokenizer.json")
    named = _MODEL_CLASS.get(model)
    raise ConfigError(f"{d / 'tokenizer.json'} holds a {model} tokenizer, but transformers loads this folder's tokenizer "
                      f"as {cls_name} ({origin}), which builds a {want} tokenizer over its vocabulary (transformers 5 then "
                      "tokenizes otherwise than the file, or fails to load it)",
                      f"set \"tokenizer_class\" in {d / 'tokenizer_config.json'} to the class the tokenizer was made "
                      f"with{f' ({named!r} for a {model} tokenizer)' if named else ''}, or to "
                      "'PreTrainedTokenizerFast' to use tokenizer.json as stored")


#: the classes whose model_input_names (transformers 5's defaults) hold token_type_ids, and those whose do not (a class
#: bertfeat does not know keeps its template's token types)
_TYPED_CLASSES = frozenset({"BertTokenizer", "ElectraTokenizer"})
_UNTYPED_CLASSES = frozenset({"DistilBertTokenizer", "MPNetTokenizer", "RobertaTokenizer", "XLMRobertaTokenizer",
                              "CamembertTokenizer", "PreTrainedTokenizer", "TokenizersBackend"})


def returns_type_ids(tok_cfg: dict, cls_name: str, path: Path) -> bool:
    """Does transformers' tokenizer give the model token_type_ids? Only when ``model_input_names`` holds them:
    tokenizer_config.json's list, else the class's. Without them the model embeds every token as type 0, the second
    text of a pair too (a BERT folder whose class is PreTrainedTokenizerFast or DistilBertTokenizer, ...)."""
    names = typed(tok_cfg.get("model_input_names"), list, f"{path / 'tokenizer_config.json'}: model_input_names")
    if names is not None:
        return "token_type_ids" in names
    return cls_name not in _UNTYPED_CLASSES


def _token_id(tk, tok: str, path: Path) -> int:
    i = tk.token_to_id(tok)
    if i is None:
        raise ConfigError(f"{path}: special token {tok} is not in the vocabulary",
                          "use the tokenizer files that came with the model")
    return i


def as_transformers(tk, cls_name: str, tok_cfg: dict, declared: DeclaredTokens, path: Path) -> tuple[str, ...]:
    """Rebuild in place what transformers 5's ``cls_name.__init__`` rebuilds from tokenizer_config.json.

    BertTokenizer (and DistilBERT's, ELECTRA's) and MPNetTokenizer: BertNormalizer from ``do_lower_case``
    (default true), ``strip_accents``, ``tokenize_chinese_chars``; BertPreTokenizer; the class's template
    (``[CLS] A [SEP] B [SEP]`` with type ids 0/1, MPNet's ``<s> A </s></s> B </s>``). RobertaTokenizer: no
    normalizer, ByteLevel(``add_prefix_space``, default false), RobertaProcessing(``trim_offsets``,
    ``add_prefix_space``). XLMRobertaTokenizer and CamembertTokenizer: only the SentencePiece charsmap (Precompiled)
    of the stored normalizer; WhitespaceSplit then Metaspace (``add_prefix_space``, default true); ``<s> A </s></s> B
    </s>`` with the bos / eos tokens. Other classes, or a tokenizer.json model the class would not build on, stay as
    stored. The template (``set_template``) comes once the declared tokens are added: a new ``cls_token`` / ``sep_token`` is
    one of them. Returns the model settings replaced (``class_model_settings``)."""
    from tokenizers import normalizers, pre_tokenizers

    def flag(key: str, default: bool | None) -> bool | None:
        return typed(tok_cfg.get(key), bool, f"{path / 'tokenizer_config.json'}: {key}", default)

    kind = _rebuilds(tk, cls_name)
    replaced = class_model_settings(tk.model, kind, declared) if kind in ("wordpiece", "roberta") else ()
    if kind == "wordpiece":
        for key in ("do_lower_case", "tokenize_chinese_chars"):  # (strip_accents null is its own setting: auto)
            if key in tok_cfg and tok_cfg[key] is None:  # read as the default, it would run what transformers refuses
                raise ConfigError(f"{path / 'tokenizer_config.json'}: {key} is null, not true / false (transformers' "
                                  f"{cls_name} fails on it: 'None' is not an instance of 'bool')",
                                  f"restore tokenizer_config.json from the model, or give {key} its value (remove the "
                                  "entry for the default)")
        tk.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=flag("tokenize_chinese_chars", True),
            strip_accents=flag("strip_accents", None), lowercase=flag("do_lower_case", True))
        tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    elif kind == "roberta":
        tk.normalizer = None
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=flag("add_prefix_space", False))
    elif kind == "sentencepiece":  # a stored Replace, Strip, NFKC ... or a lone Metaspace would keep ends and runs of spaces
        tk.normalizer = _precompiled(tk.normalizer)
        scheme = "always" if flag("add_prefix_space", True) else "never"
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(
            replacement="\u2581", prepend_scheme=scheme, split=True)])
    return replaced


def _precompiled(normalizer):
    """The SentencePiece charsmap (Precompiled) of a normalizer, alone or in a Sequence, None without one: all that
    transformers 5 takes of tokenizer.json's normalizer for the SentencePiece classes."""
    from tokenizers import normalizers

    parts = list(normalizer) if isinstance(normalizer, normalizers.Sequence) else [normalizer]
    return next((p for p in parts if isinstance(p, normalizers.Precompiled)), None)


def class_model_settings(model, kind: str, declared: DeclaredTokens) -> tuple[str, ...]:
    """The model's settings as the class's __init__ builds its model (it takes only the vocabulary, and RoBERTa's
    merges, from tokenizer.json): WordPiece with the declared unk_token, '##' and 100 characters a word; BPE without
    dropout (which would tokenize a text differently on every call), unk token, prefix or suffix, fusing, byte fallback
    or ignore_merges. A tokenizer.json saying otherwise tokenized otherwise than sentence-transformers. Returns the
    names of the settings whose stored value was replaced (the vector cache keys such a tokenizer apart)."""
    if kind == "wordpiece":
        want = {"unk_token": declared.text("unk_token", model.unk_token), "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100}
    else:
        want = {"dropout": None, "unk_token": None, "fuse_unk": False, "continuing_subword_prefix": "",
                "end_of_word_suffix": "", "byte_fallback": False, "ignore_merges": False}
    replaced = tuple(k for k, v in want.items() if (getattr(model, k) or None) != (v or None))  # None, "", False, 0 alike
    for k, v in want.items():
        setattr(model, k, v)
    return replaced


def _rebuilds(tk, cls_name: str) -> str | None:
    """Which rebuild of as_transformers / set_template ``cls_name`` does on ``tk``'s model (None: none)."""
    from tokenizers import models

    if (cls_name in _WORDPIECE_CLASSES or cls_name == "MPNetTokenizer") and isinstance(tk.model, models.WordPiece):
        return "wordpiece"
    if cls_name in _SENTENCEPIECE_CLASSES and isinstance(tk.model, models.Unigram):
        return "sentencepiece"
    return "roberta" if cls_name == "RobertaTokenizer" and isinstance(tk.model, models.BPE) else None


def set_template(tk, cls_name: str, tok_cfg: dict, declared: DeclaredTokens, path: Path) -> None:
    """The class's template (as_transformers' classes), its cls / sep tokens' ids read once the declared tokens are
    added (a ``sep_token`` added by ``add_special_tokens`` is not in the vocabulary)."""
    from tokenizers import processors

    kind = _rebuilds(tk, cls_name)
    if kind is None:
        return
    if kind == "sentencepiece":  # <s> A </s> </s> B </s> with the bos and eos tokens, every type id 0
        bos, eos = declared.text("bos_token", "<s>"), declared.text("eos_token", "</s>")
        tk.post_processor = processors.TemplateProcessing(
            single=[bos, "$A", eos], pair=[bos, "$A", eos, eos, "$B", eos],
            special_tokens=[(bos, _token_id(tk, bos, path)), (eos, _token_id(tk, eos, path))])
        return
    cls_tok, sep_tok = declared.text("cls_token", "[CLS]"), declared.text("sep_token", "[SEP]")
    cls_id, sep_id = _token_id(tk, cls_tok, path), _token_id(tk, sep_tok, path)
    if kind == "roberta":
        prefix = typed(tok_cfg.get("add_prefix_space"), bool, f"{path / 'tokenizer_config.json'}: add_prefix_space", False)
        trim = typed(tok_cfg.get("trim_offsets"), bool, f"{path / 'tokenizer_config.json'}: trim_offsets", True)
        tk.post_processor = processors.RobertaProcessing((sep_tok, sep_id), (cls_tok, cls_id), trim, prefix)
    elif cls_name == "MPNetTokenizer":
        tk.post_processor = processors.RobertaProcessing((sep_tok, sep_id), (cls_tok, cls_id), True, False)
    else:
        tk.post_processor = processors.TemplateProcessing(
            single=f"{cls_tok}:0 $A:0 {sep_tok}:0", pair=f"{cls_tok}:0 $A:0 {sep_tok}:0 $B:1 {sep_tok}:1",
            special_tokens=[(cls_tok, cls_id), (sep_tok, sep_id)])


def build_wordpiece_tokenizer(vocab_path: Path, tok_cfg: dict, declared: DeclaredTokens,
                              cls_name: str = "BertTokenizer"):
    """A tokenizers.Tokenizer equivalent to transformers' BertTokenizer (MPNetTokenizer with that ``cls_name``)
    for this vocab and config, with the folder's special and added tokens (``declared``, read for that class)."""
    from tokenizers import Tokenizer, decoders, models

    vocab = read_vocab(vocab_path)
    unk = declared.text("unk_token", "")
    if unk not in vocab:  # WordPiece's own: the cls / sep tokens may be added ones (set_template checks them)
        raise ConfigError(f"{vocab_path}: special token {unk} is not in the vocabulary",
                          "use the vocab.txt that came with the model")
    tk = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    tk.decoder = decoders.WordPiece(prefix="##")
    as_transformers(tk, cls_name, tok_cfg, declared, vocab_path.parent)
    declared.add_to(tk, [])
    set_template(tk, cls_name, tok_cfg, declared, vocab_path)
    return tk


def read_tokenizer_json(path: Path, keep_added: bool):
    """tokenizer.json -> (tokenizers.Tokenizer, its added tokens by the ids the file gives them). Without
    ``keep_added`` the Tokenizer has none of them: a class that builds its own tokenizer (declared.own_class) takes
    only the vocabulary."""
    from tokenizers import Tokenizer

    try:
        text = path.read_text(encoding="utf-8")
        data = typed(json.loads(text), dict, str(path))
        added = typed(data.get("added_tokens"), list, f"{path}: added_tokens", [])
        stored = {t["id"]: json_token(t, f"{path}: added_tokens") for t in added}
        if not keep_added:
            text = json.dumps({**data, "added_tokens": []})
        return Tokenizer.from_str(text), stored
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{path} could not be read ({e})", "restore it from the checkpoint") from None
    except BaseException as e:  # tokenizers' Rust code panicking on a file it cannot build (pyo3's PanicException)
        if type(e).__name__ != "PanicException":
            raise
        raise ConfigError(f"{path} could not be read (the tokenizers library failed on it: {e})",
                          "restore it from the checkpoint") from None


# Special tokens by role: the named special token transformers gives the folder (declared.py), else the first of
# these the vocabulary has (BERT WordPiece names, then RoBERTa / XLM-R SentencePiece names).
_SPECIAL_NAMES = {
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "pad": ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
}


def special_tokens(vocab: dict[str, int], declared: DeclaredTokens | None = None
                   ) -> dict[str, tuple[str | None, int | None]]:
    """role (cls, sep, pad, mask) -> (token, id) for this vocabulary, (None, None) when it has none: the named special
    token transformers gives the folder (``declared``), else the first of _SPECIAL_NAMES the vocabulary has."""
    out = {}
    for role, names in _SPECIAL_NAMES.items():
        v = declared.text(f"{role}_token") if declared is not None else None
        tok = next((t for t in ([v] if v else []) + list(names) if t in vocab), None)
        out[role] = (tok, vocab.get(tok) if tok is not None else None)
    return out


def tokenizer_source(d: Path) -> Path | None:
    """The file the tokenizer is built from: tokenizer.json, else vocab.txt (None with neither). Each checked as a
    model file (config.model_file): a named pipe or a folder in its place is refused, never passed over."""
    return model_file(d / "tokenizer.json") or model_file(d / "vocab.txt")


def tokenizer_files(d: Path) -> list[Path]:
    """Every file BertTokenizer.from_dir reads in folder ``d`` (hub.model_files lists them): tokenizer_config.json,
    special_tokens_map.json, config.json, the source (tokenizer_source) and, where tokenizer_config.json has no
    added_tokens_decoder, added_tokens.json; absent ones included."""
    source = tokenizer_source(d)
    files = [d / "tokenizer_config.json", d / "special_tokens_map.json", d / "config.json"] + ([source] if source else [])
    if source is not None and "added_tokens_decoder" not in json_object(files[0]):
        files.append(d / "added_tokens.json")
    return files


def _pipeline(tk) -> tuple:
    """tk's normalizer, pre-tokenizer and post-processor as their JSON (None for a missing one)."""
    return tuple(None if c is None else c.__getstate__() for c in (tk.normalizer, tk.pre_tokenizer, tk.post_processor))


_GENERIC_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizer", "PythonBackend"})


def _refuse_unknown_vocab_class(d: Path, cls_name: str, tok_cfg: dict, model_cfg: dict) -> None:
    """A vocab.txt folder whose class bertfeat does not know (BertJapaneseTokenizer splits words with MeCab or into
    characters first, HerbertTokenizer and PhobertTokenizer are BPE): read as BERT's WordPiece it would be tokenized
    otherwise than transformers tokenizes it, silently. Refused, saying how to use the folder as BERT's."""
    if own_class(cls_name) in ("BertTokenizer", "MPNetTokenizer") or cls_name in _GENERIC_CLASSES:
        return  # (a generic class, or none named: a vocab.txt is BERT's WordPiece, as before)
    raise ConfigError(f"{d / 'vocab.txt'}: transformers loads this folder's tokenizer as {cls_name} "
                      f"({_class_origin(tok_cfg, model_cfg)}), whose tokenization bertfeat does not reproduce (read as "
                      "BERT's WordPiece its texts would be split otherwise than transformers splits them)",
                      f"use a model whose tokenizer is BERT's or has a tokenizer.json; if this vocabulary is BERT's "
                      f"WordPiece, set \"tokenizer_class\": \"BertTokenizer\" in {d / 'tokenizer_config.json'}")


#: transformers 5's tokenizer classes with no tokenizers backend (PythonBackend or SentencePiece ones): AutoTokenizer
#: builds them from their vocabulary files and splits words their own way (BertJapaneseTokenizer: MeCab or characters
#: first), never reading a tokenizer.json the folder holds. Listed from transformers 5.25's TOKENIZER_MAPPING_NAMES.
_PYTHON_CLASSES = frozenset({
    "BartphoTokenizer", "BertJapaneseTokenizer", "BertweetTokenizer", "BioGptTokenizer", "BlenderbotSmallTokenizer",
    "ByT5Tokenizer", "CTRLTokenizer", "CanineTokenizer", "ClvpTokenizer", "CpmAntTokenizer", "CpmTokenizer",
    "DiaTokenizer", "EsmTokenizer", "FSMTTokenizer", "FlaubertTokenizer", "GPTNeoXJapaneseTokenizer", "MgpstrTokenizer",
    "MyT5Tokenizer", "PLBartTokenizer", "PerceiverTokenizer", "PhobertTokenizer", "ProphetNetTokenizer",
    "RoCBertTokenizer", "TapasTokenizer", "XLMTokenizer"})


def _refuse_python_class(d: Path, cls_name: str, tok_cfg: dict, model_cfg: dict) -> None:
    """A folder with a tokenizer.json whose class transformers builds in Python (_PYTHON_CLASSES): its texts would be
    split otherwise than transformers splits them, silently (a BertJapaneseTokenizer folder: max abs diff 0.16)."""
    if cls_name.removesuffix("Fast") not in _PYTHON_CLASSES:
        return
    raise ConfigError(f"{d / 'tokenizer.json'}: transformers loads this folder's tokenizer as {cls_name} "
                      f"({_class_origin(tok_cfg, model_cfg)}), which it builds in Python from the vocabulary files "
                      "without reading tokenizer.json, and whose tokenization bertfeat does not reproduce",
                      "use a model whose tokenizer is read from tokenizer.json; if this tokenizer.json is the model's "
                      "own tokenizer, set \"tokenizer_class\": \"PreTrainedTokenizerFast\" in "
                      f"{d / 'tokenizer_config.json'}")


def load_tokenizer(d: Path, tok_cfg: dict, model_cfg: dict, cls_name: str):
    """Folder ``d``'s tokenizer (its tokenizer_config.json and config.json ``tok_cfg`` / ``model_cfg``, the class
    transformers picks from them: transformers_class) as transformers 5's AutoTokenizer loads it -> (tokenizers.Tokenizer, its source,
    DeclaredTokens, the rebuild as_transformers did: 'wordpiece', 'roberta', 'sentencepiece' or None, and what it
    changed of the file: the model settings it replaced, and "pipeline" when a SentencePiece class's rebuild changed
    the stored normalizer, pre-tokenizer or template): tokenizer.json (the class's rebuild, ``as_transformers``), else vocab.txt
    (``build_wordpiece_tokenizer``), with the special and added tokens transformers adds (``declared.py``)."""
    special_map = json_object(d / "special_tokens_map.json")
    src = tokenizer_source(d)
    if src is not None and src.name == "tokenizer.json":
        _refuse_python_class(d, cls_name, tok_cfg, model_cfg)
        rebuilt = own_class(cls_name) is not None
        tk, stored = read_tokenizer_json(src, keep_added=not rebuilt)
        check_class_fits(d, cls_name, type(tk.model).__name__, tok_cfg, model_cfg)
        declared = declared_tokens(d, tok_cfg, special_map, cls_name, stored)
        kind = _rebuilds(tk, cls_name)  # (of the model's type, which the rebuild keeps)
        before = _pipeline(tk) if kind == "sentencepiece" else None
        replaced = as_transformers(tk, cls_name, tok_cfg, declared, d)
        declared.add_to(tk, [] if rebuilt else [str(t) for t in stored.values()])
        set_template(tk, cls_name, tok_cfg, declared, d)
        if before is not None and _pipeline(tk) != before:  # (a file transformers 5 saved is as it rebuilds it)
            replaced += ("pipeline",)
        return tk, "tokenizer.json", declared, kind, replaced
    if src is not None:
        check_class_fits(d, cls_name, "vocab.txt", tok_cfg, model_cfg)
        _refuse_unknown_vocab_class(d, cls_name, tok_cfg, model_cfg)
        cls_name = cls_name if cls_name == "MPNetTokenizer" else "BertTokenizer"
        declared = declared_tokens(d, tok_cfg, special_map, cls_name, {})
        tk = build_wordpiece_tokenizer(src, tok_cfg, declared, cls_name)
        return tk, "vocab.txt + tokenizer_config.json" if tok_cfg else "vocab.txt", declared, "wordpiece", ()
    if any((d / f).is_file() for f in ("sentencepiece.bpe.model", "spiece.model", "vocab.json")):
        raise BertfeatError(
            f"{d} has a slow (SentencePiece / BPE) tokenizer but no tokenizer.json",
            "convert it once where transformers is installed: "
            "AutoTokenizer.from_pretrained(dir).save_pretrained(dir) writes tokenizer.json",
        )
    raise BertfeatError(
        f"{d} has neither tokenizer.json nor vocab.txt",
        "copy the model's tokenizer.json (or vocab.txt and tokenizer_config.json) into the directory",
    )


#: characters tokenized at once: a longer text is tokenized in pieces of about this size (LongText), and a call's
#: shorter texts in groups of about GROUP_CHARS characters (the tokenizer holds ~200 bytes per character: ~50 MB)
PIECE_CHARS = 1 << 16
GROUP_CHARS = 1 << 18
# normalizers and pre-tokenizers whose output near a point of the text depends only on the text near it, so that
# a piece of the text tokenizes as the text does away from its two ends (LongText)
_LOCAL_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents", "Strip",
                                "Replace", "Precompiled", "Prepend", "Nmt", "ByteLevel", "Sequence"})
_LOCAL_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit",
                                   "Punctuation", "Digits", "UnicodeScripts", "CharDelimiterSplit", "Split", "Sequence"})


def _local(part, kinds: frozenset) -> bool:
    """A normalizer / pre-tokenizer (None: none) made only of ``kinds`` (a Sequence's members checked too)."""
    if part is None:
        return True
    try:
        tree = json.loads(part.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return False

    def ok(d) -> bool:
        if not isinstance(d, dict) or d.get("type") not in kinds:
            return False
        inner = d.get("normalizers", d.get("pretokenizers"))
        return inner is None or all(ok(x) for x in inner)

    return ok(tree)


def _word_groups(enc, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A content Encoding's pre-tokens, in order: (index of each one's first token, its end in characters + ``base``,
    its tokens). A token without a word id is a pre-token of its own."""
    words = np.fromiter((-1 if w is None else w for w in enc.word_ids), dtype=np.int64, count=len(enc.ids))
    if not words.size:
        return (np.zeros(0, np.int64),) * 3
    ends = np.fromiter((e for _, e in enc.offsets), dtype=np.int64, count=len(words))
    first = np.flatnonzero(np.r_[True, (words[1:] != words[:-1]) | (words[1:] < 0)])
    return first, np.maximum.reduceat(ends, first) + base, np.diff(np.r_[first, len(words)])


class _Misaligned(Exception):
    """A piece's pre-tokens did not meet the previous piece's: the text is tokenized whole instead."""


class LongText:
    """One text longer than PIECE_CHARS, tokenized in pieces (see the module's docstring): its content ids
    (``ids``, with ``keep_ids``), their number (``count``) and where to cut it so that the cut holds its first
    (``side`` right) or last (left) ``need`` tokens as the whole text has them (``cut``).

    What it rests on: tokenizing a part of the text gives the text's own pre-tokens (and so tokens) except for the
    pre-tokens that end within ``margin`` characters of the part's end (cut off, or split otherwise for not seeing
    what follows: a regex's look-ahead, an added token cut in two) and, when the part does not start the text, its
    first pre-tokens (a prefix space or ``▁`` added, leading space stripped). So each piece starts on a pre-token
    boundary at least ``margin`` characters before the last pre-token the previous piece took, skips what that one
    took (found by its end: a piece whose pre-tokens do not end there is tokenized whole instead), and takes what
    ends up to ``margin`` before its own end."""

    def __init__(self, owner: "BertTokenizer", text: str, need: int, side: str = "right", keep_ids: bool = False):
        self.text, self.need, self.side = text, need, side
        self.count = 0
        self._margin = owner.cut_margin
        self._ids: list[np.ndarray] = []
        self._enough_at: int | None = None  # right: the cut must end at or past this (the need met, plus margin)
        self._cut_end: int | None = None  # right: the cut is text[:_cut_end]
        self._tail: list[tuple[np.ndarray, np.ndarray]] = []  # left: (ends, counts) of the last pieces' pre-tokens
        self._before = 0  # left: where the pre-tokens kept in _tail start (the end of the one before them)
        for ids, ends, counts in self._pieces(owner.piece_tokenizer()):
            self.count += len(ids)
            if keep_ids:
                self._ids.append(ids)
            self._note(ends, counts)

    @property
    def ids(self) -> np.ndarray:
        return np.concatenate(self._ids) if self._ids else np.zeros(0, np.int32)

    def _pieces(self, tk):
        """(ids, pre-token ends, tokens per pre-token) of each piece, the text's own tokens in order."""
        text, n, margin = self.text, len(self.text), self._margin
        pos, skip_to, size = 0, None, PIECE_CHARS
        while True:
            reach = max(pos, skip_to or 0) + size  # past what the previous piece took
            end = n if reach >= n else _cut_point(text, reach)
            enc = tk.encode(text[pos:end], add_special_tokens=False)
            first, ends, counts = _word_groups(enc, pos)
            lo = 0
            if skip_to is not None:  # what the previous piece took ends with the last pre-token ending at skip_to
                hit = np.flatnonzero(ends == skip_to)
                if not hit.size:
                    raise _Misaligned
                lo = int(hit[-1]) + 1
            hi = len(ends)
            if end < n:
                late = np.flatnonzero(ends > end - margin)
                hi = min(hi - 1, int(late[0]) if late.size else hi)
                while hi > lo and not ends[hi - 1] < ends[hi]:  # no pre-token of no width right after the last taken
                    hi -= 1
                if hi <= lo:  # nothing to take: a larger piece
                    size *= 2
                    continue
            stop = first[hi] if hi < len(first) else len(enc.ids)
            yield np.asarray(enc.ids[first[lo]:stop] if lo < len(first) else [], dtype=np.int32), ends[lo:hi], counts[lo:hi]
            if end >= n:
                return
            skip_to = int(ends[hi - 1])
            # the next piece starts on the last pre-token boundary at least margin before skip_to (else where this did)
            bounds = ends[max(lo - 1, 0):hi - 1]
            ok = bounds[bounds <= skip_to - margin]
            pos, size = (int(ok[-1]) if ok.size else pos), PIECE_CHARS

    def _note(self, ends: np.ndarray, counts: np.ndarray) -> None:
        """Keep what finding the cut needs of a piece's pre-tokens."""
        if not ends.size:
            return
        if self.side == "right":
            if self._enough_at is None:
                upto = self.count - int(counts.sum()) + np.cumsum(counts)  # tokens up to each pre-token, itself in
                met = np.flatnonzero(upto >= self.need)
                if met.size:
                    self._enough_at = int(ends[met[0]]) + self._margin
            if self._enough_at is not None and self._cut_end is None:
                past = np.flatnonzero(ends >= self._enough_at)
                if past.size:
                    self._cut_end = int(ends[past[0]])
            return
        self._tail.append((ends, counts))
        while len(self._tail) > 1:  # the first piece kept goes once the cut lies past it
            k, _ = self._left_cut()
            if k is None or k < len(self._tail[0][0]):
                break
            self._before = int(self._tail.pop(0)[0][-1])

    def _left_cut(self) -> tuple[int | None, int]:
        """Among the pre-tokens kept, the last one whose region start S (the end of the one before) leaves ``need``
        tokens in the pre-tokens starting ``margin`` or more past S, and S; (None, 0) when none does."""
        ends = np.concatenate([e for e, _ in self._tail])
        counts = np.concatenate([c for _, c in self._tail])
        starts = np.r_[self._before, ends[:-1]]
        after = np.r_[np.cumsum(counts[::-1])[::-1], 0]  # tokens from each pre-token on
        m = np.maximum(np.arange(1, len(ends) + 1), np.searchsorted(starts, starts + self._margin, side="left"))
        ok = np.flatnonzero(after[m] >= self.need)
        return (int(ok[-1]), int(starts[ok[-1]])) if ok.size else (None, 0)

    def cut(self) -> str:
        """The text cut on a pre-token boundary past its first (last) ``need`` tokens (and ``margin``): the whole
        text when it has no more than that, or when no boundary comes after them."""
        if self.count <= self.need:
            return self.text
        if self.side == "right":
            return self.text if self._cut_end is None else self.text[:self._cut_end]
        k, start = self._left_cut() if self._tail else (None, 0)
        return self.text if k is None else self.text[start:]


_SPACE = re.compile(r"\s")


def _cut_point(text: str, at: int) -> int:
    """Where a piece ends: the first whitespace at or after ``at`` within PIECE_CHARS / 4 characters, else ``at``."""
    m = _SPACE.search(text, at, at + PIECE_CHARS // 4)
    return m.start() if m else at


def longest_first(la: int, lb: int, budget: int) -> tuple[int, int]:
    """tokenizers' LongestFirst truncation of a pair's token counts to ``budget`` (utils/truncation.rs): when both
    must be cut, the shorter gets budget // 2 and the longer (the second on a tie) the rest."""
    if la + lb <= budget:
        return la, lb
    swap = la > lb
    n1, n2 = (lb, la) if swap else (la, lb)
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    if swap:
        n1, n2 = n2, n1
    return min(la, n1), min(lb, n2)


def all_special_ids(tk, declared: DeclaredTokens) -> frozenset[int]:
    """The ids of every named special token (the unknown token among them) and extra special token of ``declared``,
    as transformers' ``all_special_ids`` (a token not in ``tk``'s vocabulary: the unknown token's id, as its
    convert_tokens_to_ids gives it)."""
    unk = declared.text("unk_token")
    unk_id = tk.token_to_id(unk) if unk else None
    ids = (tk.token_to_id(str(t)) for t in [v for v in declared.named.values() if v is not None] + list(declared.extra))
    return frozenset(i if i is not None else unk_id for i in ids) - {None}


def has_lowercase(normalizer) -> bool:
    """Does the normalizer lower-case already, by sentence-transformers' rule for do_lower_case (its Transformer's
    ``_has_lowercase``): a Lowercase, or a Sequence with a Lowercase among its own members. Such a normalizer is kept
    as it is: a Lowercase put in front changes what a step before its own Lowercase sees (NFKC of U+03F9 'Ϲ' is 'Σ',
    lower-cased 'σ'; lower-cased first, 'ϲ' becomes 'ς'). BertNormalizer's lower-casing does not count."""
    from tokenizers import normalizers

    if isinstance(normalizer, normalizers.Lowercase):
        return True
    return isinstance(normalizer, normalizers.Sequence) and any(isinstance(n, normalizers.Lowercase) for n in normalizer)


#: every BertTokenizer of this process, for _after_fork
_LIVE: "weakref.WeakSet[BertTokenizer]" = weakref.WeakSet()


def _after_fork() -> None:
    """In a child forked while another thread tokenized, that thread is gone but its locks stay held: the
    tokenizer's Python lock and the Rust tokenizer's own, so the child's next call would wait forever. The child
    gets new Python locks, and each tokenizer is rebuilt from its JSON at its next use (``_tk``, ~35 ms for BERT's)."""
    for tok in list(_LIVE):
        tok._lock = threading.Lock()
        tok._forked = True
    _serial_after_fork()


#: TOKENIZERS_PARALLELISM values the tokenizers library reads as off (its utils/parallelism.rs)
_PARALLELISM_OFF = ("", "off", "false", "f", "no", "n", "0")


def _serial_after_fork() -> None:
    """The tokenizers library turns its thread pool off in a forked child only when TOKENIZERS_PARALLELISM is unset:
    set to true, the child's first batch waited forever on the parent's pool threads, gone in the child. The child
    tokenizes on one thread (its vectors are the same); the parent keeps the user's setting."""
    if os.environ.get("TOKENIZERS_PARALLELISM", "").strip().lower() not in _PARALLELISM_OFF:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class BertTokenizer:
    """Text (and optional pair) -> Tokenized rows; holds the tokenizers.Tokenizer.

    Works for BERT WordPiece and RoBERTa / XLM-R tokenizers alike: the special tokens
    (``cls_id`` / ``sep_id`` / ``pad_id`` / ``mask_id``) are looked up by role, so windows of long
    texts are framed as the model's own template frames a row (``[CLS] .. [SEP]`` or ``<s> .. </s>``).
    """

    def __init__(self, tokenizer, source: str, model_max_length: int, declared: DeclaredTokens | None = None,
                 lowercase: bool = False):
        self._tk_now = tokenizer  # through _tk
        self._forked = False  # set in a forked child (_after_fork)
        #: sentence_bert_config.json's do_lower_case left to the normalizer, which lower-cases already (has_lowercase)
        self.own_lowercase = lowercase and has_lowercase(self._tk.normalizer)
        if lowercase and not self.own_lowercase:  # do_lower_case: lower-case before the model's own normalizer
            from tokenizers import normalizers
            norm = self._tk.normalizer
            self._tk.normalizer = normalizers.Sequence([normalizers.Lowercase()] + ([norm] if norm is not None else []))
        self._tk.no_padding()
        self._tk.no_truncation()
        self._lock = threading.Lock()
        self._frame = None  # window_frame's, read once
        self._frame_types = None  # window_frame_types', with it
        _LIVE.add(self)
        self.source = source
        self.model_max_length = model_max_length
        vocab = tokenizer.get_vocab()  # added tokens included
        self.vocab_size = tokenizer.get_vocab_size()
        self.id_limit = max(vocab.values(), default=-1) + 1  # every id the tokenizer can produce is below this
        sp = special_tokens(vocab, declared)
        self.cls_token, self.cls_id = sp["cls"]
        self.sep_token, self.sep_id = sp["sep"]
        self.mask_token, self.mask_id = sp["mask"]
        self.pad_id = sp["pad"][1] if sp["pad"][1] is not None else 0
        self.mask_token = self.mask_token or "[MASK]"
        self.special_ids = frozenset(i for _, i in sp.values() if i is not None)
        #: transformers' all_special_ids (every named and extra special token): what a prompt's length leaves out
        self.all_special_ids = self.special_ids if declared is None else all_special_ids(tokenizer, declared)
        self.truncation_side = "right"  # tokenizer_config.json truncation_side (from_dir)
        #: the class's rebuild of tokenizer.json (load_tokenizer: 'wordpiece', 'roberta', 'sentencepiece'; from_dir)
        self.rebuilt: str | None = None
        #: tokenizer.json's model settings that rebuild replaced (as_transformers; from_dir): () for every usual file
        self.replaced: tuple[str, ...] = ()
        #: does transformers' tokenizer give the model token_type_ids (returns_type_ids; from_dir)? Else all are 0
        self.returns_type_ids = True
        post = tokenizer.post_processor
        #: special tokens the model's template adds to a text / a pair: the smallest max_length each fits in
        self.specials = {p: post.num_special_tokens_to_add(p) if post is not None else 0 for p in (False, True)}
        #: a text longer than PIECE_CHARS is tokenized in pieces (LongText), else whole
        self.piecewise = (tokenizer.pre_tokenizer is not None and _local(tokenizer.normalizer, _LOCAL_NORMALIZERS)
                          and _local(tokenizer.pre_tokenizer, _LOCAL_PRE_TOKENIZERS))
        added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        #: characters before a piece's end within which an added token may have been cut (LongText)
        self.cut_margin = 2 * max(map(len, added), default=0) + 8
        self._pieces_tk = None

    @property
    def _tk(self):
        """The tokenizers.Tokenizer; in a forked child a copy made there, as the parent's may be mid-call (_after_fork)."""
        if self._forked:
            from tokenizers import Tokenizer

            self._forked = False
            self._tk_now, self._pieces_tk = Tokenizer.from_str(self._tk_now.to_str()), None
        return self._tk_now

    @classmethod
    def from_dir(cls, model_dir: str | Path, model_max_length: int, lowercase: bool = False) -> "BertTokenizer":
        d = Path(model_dir)
        tok_cfg = json_object(d / "tokenizer_config.json")
        model_cfg = json_object(d / "config.json")
        cls_name = transformers_class(tok_cfg, model_cfg)
        tk, source, declared, rebuilt, replaced = load_tokenizer(d, tok_cfg, model_cfg, cls_name)
        typed_pairs = returns_type_ids(tok_cfg, cls_name, d)
        side = typed(tok_cfg.get("truncation_side"), str, f"{d / 'tokenizer_config.json'}: truncation_side", "right")
        if side not in ("left", "right"):
            raise ConfigError(f"{d / 'tokenizer_config.json'}: truncation_side is {side!r}, not 'left' or 'right'",
                              "restore the file from the checkpoint (or fix that entry)")
        out = cls(tk, source, model_max_length, declared, lowercase)
        out.truncation_side = side
        out.rebuilt, out.replaced = rebuilt, replaced
        out.returns_type_ids = typed_pairs
        return out

    # ------------------------------------------------------------------ encoding
    def _encode_batch(self, texts: list[str], pairs: list[str] | None, max_length: int | None):
        inputs = texts if pairs is None else list(zip(texts, pairs))
        with self._lock:
            if max_length is None:
                self._tk.no_truncation()
            else:
                self._tk.enable_truncation(max_length, strategy="longest_first", direction=self.truncation_side)
            try:
                return self._tk.encode_batch(inputs, add_special_tokens=True)
            finally:
                self._tk.no_truncation()

    def encode(self, texts: list[str], pairs: list[str] | None = None, max_length: int | None = None) -> Tokenized:
        """Encode rows whole, then re-encode only the rows longer than max_length with truncation (``_truncate``; a text
        longer than PIECE_CHARS: in pieces, then from its cut, ``_encode_long``), in calls of about GROUP_CHARS
        characters."""
        max_length = max_length or self.model_max_length
        if pairs is not None and len(pairs) != len(texts):
            raise BertfeatError(f"{len(texts)} texts but {len(pairs)} pairs", "give one pair text for each text")
        n = len(texts)
        ids: list = [None] * n
        type_ids: list = [None] * n
        n_tokens = np.zeros(n, dtype=np.int64)
        long = [self._is_long(texts[i]) or (pairs is not None and self._is_long(pairs[i])) for i in range(n)]
        short = [i for i in range(n) if not long[i]]
        for rows in _groups(short, texts, pairs):
            for i, e in zip(rows, self._encode_batch([texts[i] for i in rows], _at(pairs, rows), None)):
                ids[i], type_ids[i] = np.asarray(e.ids, dtype=np.int32), np.asarray(e.type_ids, dtype=np.int32)
                n_tokens[i] = len(e.ids)
        for rows in _groups([i for i in short if n_tokens[i] > max_length], texts, pairs):
            for i, e in zip(rows, self._truncate([texts[i] for i in rows], _at(pairs, rows), max_length)):
                ids[i], type_ids[i] = np.asarray(e.ids, dtype=np.int32), np.asarray(e.type_ids, dtype=np.int32)
        for i in (i for i in range(n) if long[i]):
            ids[i], type_ids[i], n_tokens[i] = self._encode_long(texts[i], None if pairs is None else pairs[i], max_length)
        return Tokenized(ids, type_ids, n_tokens, n_tokens > max_length)

    def _is_long(self, text) -> bool:
        return isinstance(text, str) and len(text) > PIECE_CHARS and self.piecewise

    def piece_tokenizer(self):
        """A copy of the tokenizer without post-processor (LongText's pieces: content ids, offsets not trimmed)."""
        if self._pieces_tk is None:
            from tokenizers import Tokenizer

            tk = Tokenizer.from_str(self._tk.to_str())
            tk.post_processor = None
            tk.no_truncation()
            tk.no_padding()
            self._pieces_tk = tk
        return self._pieces_tk

    def _encode_long(self, text: str, pair: str | None, max_length: int) -> tuple[np.ndarray, np.ndarray, int]:
        """One row with a text longer than PIECE_CHARS -> (ids, type ids, tokens before truncation), as ``encode`` gives
        them: each text's tokens counted in pieces, and the model's input tokenized from its cut, truncated by
        longest-first from the whole counts."""
        need = max(max_length - self.specials[pair is not None], 0)
        try:
            parts = [LongText(self, t, need, self.truncation_side) for t in (text, pair) if t is not None]
        except _Misaligned:  # cannot be cut: whole, as a short row
            e = self._encode_batch([text], None if pair is None else [pair], None)[0]
            n = len(e.ids)
            if n > max_length:
                e = self._truncate([text], None if pair is None else [pair], max_length)[0]
            return np.asarray(e.ids, dtype=np.int32), np.asarray(e.type_ids, dtype=np.int32), n
        counts = [p.count for p in parts]
        total = sum(counts) + self.specials[pair is not None]
        keep = counts if total <= max_length else list(longest_first(*counts, need) if pair is not None else [need])
        if total > max_length and max_length < self.specials[pair is not None]:
            self._too_small(max_length, pair is not None)
        with self._lock:
            self._tk.no_truncation()
            encs = []
            for p, k in zip(parts, keep):
                e = self._tk.encode(p.cut() if k < p.count else p.text, add_special_tokens=False)
                encs.append(_keep(e, k, self.truncation_side))
            e = self._tk.post_process(encs[0], encs[1] if len(encs) > 1 else None, add_special_tokens=True)
        return np.asarray(e.ids, dtype=np.int32), np.asarray(e.type_ids, dtype=np.int32), total

    def _truncate(self, texts: list[str], pairs: list[str] | None, max_length: int) -> list:
        """Rows longer than ``max_length`` -> their Encodings truncated to it (texts: by tokenizers; pairs: _cut_pairs)."""
        if pairs is not None:
            return self._cut_pairs(texts, pairs, max_length)
        cut = self._encode_batch(texts, None, max_length)
        self._check_cut(cut, max_length, False)
        return cut

    def _cut_pairs(self, texts: list[str], pairs: list[str], max_length: int) -> list:
        """Pairs longer than ``max_length`` truncated as tokenizers' encode does it (each text encoded alone, cut by
        longest-first, framed by the post-processor), but with each text's cut-off tokens kept as one part (_keep):
        tokenizers' own truncation keeps them in parts of the kept length and pairs every part of one text with every
        part of the other (memory ~ the product of their lengths: two texts of 30,000 CJK characters took 10 GB)."""
        if max_length < self.specials[True]:
            self._too_small(max_length, True)
        need = max_length - self.specials[True]
        with self._lock:
            self._tk.no_truncation()
            firsts = self._tk.encode_batch(texts, add_special_tokens=False)
            seconds = self._tk.encode_batch(pairs, add_special_tokens=False)
            out = []
            for a, b in zip(firsts, seconds):
                ka, kb = longest_first(len(a.ids), len(b.ids), need)
                a, b = _keep(a, ka, self.truncation_side), _keep(b, kb, self.truncation_side)
                out.append(self._tk.post_process(a, b, add_special_tokens=True))
        return out

    def _check_cut(self, cut, max_length: int, pair: bool) -> None:
        """Refuse a max_length the template's special tokens leave no room in (tokenizers returns such a row whole)."""
        if any(len(e.ids) > max_length for e in cut):
            self._too_small(max_length, pair)

    def _too_small(self, max_length: int, pair: bool):
        need = self.specials[pair]
        raise BertfeatError(f"{opt('max_length', max_length)} is too small for "
                            f"{'sentence pairs' if pair else 'texts'} with this model: its "
                            f"{'pair ' if pair else ''}template adds {need} special tokens",
                            f"use {opt('max_length', need)} or more")

    def window_frame(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids before, ids after, their token types) that the model's own template puts around a text's tokens: what
        frames each window of a chunked long text, as a row is framed (``[CLS] ... [SEP]`` for BERT, ``<s> ...
        </s>`` for RoBERTa, nothing for a tokenizer without a post-processor). Read off the template applied to one
        token, by its special-tokens mask."""
        if self._frame is None:
            with self._lock:
                self._tk.no_truncation()
                one = self._tk.encode("a", add_special_tokens=False)
                framed = self._tk.post_process(one, None, add_special_tokens=True)
            special = np.asarray(framed.special_tokens_mask, dtype=bool)
            own = np.flatnonzero(~special)
            first, last = (int(own[0]), int(own[-1]) + 1) if own.size else (len(special), len(special))
            ids, types = np.asarray(framed.ids, np.int32), np.asarray(framed.type_ids, np.int32)
            self._frame = (ids[:first], ids[last:], types[:first], types[last:])  # prefix / suffix: (P,) (S,)
            self._frame_types = types  # (P + 1 + S,) the frame's and the one token's
        return self._frame

    def window_frame_types(self) -> np.ndarray:
        """The token types the template gives one text: its special tokens' and its own (one token's) alike."""
        self.window_frame()
        return self._frame_types

    def encode_content(self, texts: list[str]) -> list[np.ndarray]:
        """Word-piece ids of each text without special tokens (for chunking long texts); a text longer than
        PIECE_CHARS tokenized in pieces (LongText)."""
        out: list = [None] * len(texts)
        short = []
        for i, t in enumerate(texts):
            try:
                out[i] = LongText(self, t, 0, keep_ids=True).ids if self._is_long(t) else None
            except _Misaligned:
                pass
            if out[i] is None:
                short.append(i)
        for rows in _groups(short, texts, None):
            with self._lock:
                self._tk.no_truncation()
                enc = self._tk.encode_batch([texts[i] for i in rows], add_special_tokens=False)
            for i, e in zip(rows, enc):
                out[i] = np.asarray(e.ids, dtype=np.int32)
        return out

    def tokens(self, text: str, pair: str | None = None, max_length: int | None = None):
        """One row's encoding (tokens, ids, type ids, truncated) for inspection."""
        full = self._encode_batch([text], None if pair is None else [pair], None)[0]
        max_length = max_length or self.model_max_length
        if len(full.ids) > max_length:
            return self._truncate([text], None if pair is None else [pair], max_length)[0], True, len(full.ids)
        return full, False, len(full.ids)

    def id_to_token(self, i: int) -> str:
        return self._tk.id_to_token(int(i))

    def tokens_from(self, first_id: int) -> dict[int, str]:
        """id -> token of every token whose id is ``first_id`` or more (added tokens included), in id order."""
        if self.id_limit <= first_id:
            return {}
        return dict(sorted((i, t) for t, i in self._tk.get_vocab().items() if i >= first_id))


def _keep(e, k: int, side: str):
    """Encoding ``e`` truncated in place to its first (``side`` left: last) ``k`` tokens, its cut-off tokens kept as one
    overflowing part: ``truncate(k)`` alone keeps them in parts of ``k`` tokens, which post_process pairs with every
    part of the other text of a pair. A truncate replaces the parts of the one before. Returns ``e``."""
    if 0 < k < len(e.ids) - 1:  # (truncate(0) keeps the whole as one part)
        e.truncate(k + 1, direction=side)
    e.truncate(k, direction=side)
    return e


def _at(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[i] for i in rows]


def _groups(rows: list[int], texts: list[str], pairs: list[str] | None):
    """``rows`` in runs of about GROUP_CHARS characters (text and pair), so that a call holds no more at once."""
    run, size = [], 0
    for i in rows:
        if run and size >= GROUP_CHARS:
            yield run
            run, size = [], 0
        run.append(i)
        size += len(texts[i]) + (len(pairs[i]) if pairs is not None else 0)
    if run:
        yield run


def pad_batch(ids: list[np.ndarray], type_ids: list[np.ndarray], pad_id: int = 0):
    """Right-pad rows to the longest: -> input_ids, token_type_ids, attention_mask, each (B, T) int."""
    B = len(ids)
    T = max(len(a) for a in ids)
    input_ids = np.full((B, T), pad_id, dtype=np.int64)
    token_types = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    for r, (a, t) in enumerate(zip(ids, type_ids)):
        input_ids[r, : len(a)] = a
        token_types[r, : len(t)] = t
        mask[r, : len(a)] = 1
    return input_ids, token_types, mask
