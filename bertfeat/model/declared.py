"""The special and added tokens of a model folder, as transformers 5's AutoTokenizer gives them to its tokenizer.

Read in transformers' order (``PreTrainedTokenizerBase._from_pretrained``, the class's ``__init__``,
``PreTrainedTokenizerBase.__init__`` and ``TokenizersBackend.__init__``), since which file and key wins changes the
token ids silently:

- ``extra_special_tokens`` (a list, or a dict of named tokens) of tokenizer_config.json; its older name
  ``additional_special_tokens`` only when ``extra_special_tokens`` is absent or empty.
- tokenizer_config.json's ``added_tokens_decoder``; only without it is special_tokens_map.json read (its entries then
  replace tokenizer_config.json's, its ``additional_special_tokens`` taking the place of extra special tokens that
  tokenizer_config.json does not name, an empty dict not counting) and the added tokens of ``added_tokens.json`` and
  tokenizer.json taken.
- A class that builds its own tokenizer (BertTokenizer, MPNet's, RoBERTa's, XLM-R's, CamemBERT's) keeps only the
  vocabulary of tokenizer.json, not its added tokens; TokenizersBackend (ModernBERT, PreTrainedTokenizerFast) keeps
  them.
- Added to that tokenizer: the added tokens in id order (with their own flags), then the named special tokens
  (``cls_token`` ..., the class's defaults, a model's own ``*_token``) and the extra special tokens that are not
  added tokens already (a token listed twice keeps its added token's flags).
- An added token's ``normalized`` defaults to ``not special`` (tokenizers' AddedToken): a special token is matched
  in the text as written, an other one after the normalizer (lower-casing: ``[UNUSED7]`` matches too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .config import json_object
from ..errors import ConfigError

#: transformers 5's named special tokens (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES), in its order
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")
_ROBERTA = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
            "pad_token": "<pad>", "mask_token": "<mask>"}
#: the named special tokens the __init__ of each class that builds its own tokenizer defaults to
CLASS_DEFAULTS = {
    "BertTokenizer": {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                      "mask_token": "[MASK]"},
    "MPNetTokenizer": {**_ROBERTA, "unk_token": "[UNK]"},
    "RobertaTokenizer": _ROBERTA, "XLMRobertaTokenizer": _ROBERTA, "CamembertTokenizer": _ROBERTA,
}
_SAME_AS = {"DistilBertTokenizer": "BertTokenizer", "ElectraTokenizer": "BertTokenizer"}
_CAMEMBERT_EXTRA = ["<s>NOTUSED", "</s>NOTUSED", "<unk>NOTUSED"]


def own_class(cls_name: str) -> str | None:
    """The class (of CLASS_DEFAULTS) whose __init__ ``cls_name`` runs, None for one that loads tokenizer.json as stored
    (TokenizersBackend, and classes bertfeat does not know)."""
    name = _SAME_AS.get(cls_name, cls_name)
    return name if name in CLASS_DEFAULTS else None


@dataclass
class DeclaredTokens:
    """What ``declared_tokens`` reads: the tokens transformers 5 adds to a folder's tokenizer, and in which order."""

    named: dict = field(default_factory=dict)  # key -> str | AddedToken: the named special tokens, in order
    extra: list = field(default_factory=list)  # the extra special tokens (str | AddedToken)
    added: list = field(default_factory=list)  # the added tokens (AddedToken), in id order
    split: bool = False  # split_special_tokens: a special token in a text is tokenized as text

    def text(self, key: str, default: str | None = None) -> str | None:
        """The named special token ``key`` (``cls_token`` ...) as text, ``default`` when there is none."""
        v = self.named.get(key)
        return default if v is None else str(v)

    def add_to(self, tk, stored: list[str]) -> None:
        """Add the tokens to the tokenizers.Tokenizer ``tk`` as ``TokenizersBackend.__init__`` does: the added tokens
        (a token ``tk`` has already takes their flags), then the named and extra special tokens that neither
        ``stored`` (``tk``'s added tokens) nor the added tokens hold. Sets ``tk.encode_special_tokens``."""
        from tokenizers import AddedToken

        to_add = list(self.added)
        known = set(stored) | {str(t) for t in to_add}
        for t in [v for v in self.named.values() if v is not None] + list(self.extra):
            if str(t) not in known and t not in to_add:
                to_add.append(t)
        named = [str(v) for v in self.named.values() if v is not None]
        tokens = []
        for t in to_add:
            if isinstance(t, str):
                t = AddedToken(t, special=True)
            elif not t.special and str(t) in named:
                t.special = True  # a normalized flag left unset follows: transformers sets it on its object too
            tokens.append(t)
        if tokens:
            tk.add_tokens(tokens)
        tk.encode_special_tokens = self.split


def json_token(value, where: str, special: bool | None = None):
    """A token of a JSON file as transformers takes it: a string stays one, an object is an AddedToken with the flags
    it gives (``special`` when given; ``normalized`` unset follows ``special``)."""
    from tokenizers import AddedToken

    if isinstance(value, (str, AddedToken)):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("content"), str) or not value["content"]:
        raise ConfigError(f"{where} is {json.dumps(value)[:60]}, not a token", "restore the file from the checkpoint")
    flags = {k: bool(value[k]) for k in _FLAGS if value.get(k) is not None}
    if special is not None:
        flags["special"] = special
    return AddedToken(value["content"], **flags)


def _tokens(value, where: str, special: bool | None = None) -> list:
    if not isinstance(value, list):
        raise ConfigError(f"{where} is not a list of tokens", "restore the file from the checkpoint")
    return [json_token(v, f"{where}[{i}]", special) for i, v in enumerate(value)]


def _decoder(value, where: str) -> tuple[dict, dict]:
    """tokenizer_config.json's added_tokens_decoder: (id -> AddedToken, text -> AddedToken, the last of a text)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where} is not a JSON object of added tokens", "restore the file from the checkpoint")
    added, by_text = {}, {}
    for idx, t in value.items():
        if not str(idx).lstrip("-").isdigit():
            raise ConfigError(f"{where} has the id {idx!r}, not an integer", "restore the file from the checkpoint")
        if not isinstance(t, dict):
            raise ConfigError(f"{where}[{idx!r}] is {json.dumps(t)[:60]}, not an added token",
                              "restore the file from the checkpoint")
        added[int(idx)] = by_text[t.get("content")] = json_token(t, f"{where}[{idx!r}]")
    return added, by_text


def _is_token(value) -> bool:
    """A value PreTrainedTokenizerBase.__init__ takes for a model's own ``*_token``: a string or an AddedToken (a JSON
    object marked ``"__type": "AddedToken"`` is one by then)."""
    from tokenizers import AddedToken

    return isinstance(value, (str, AddedToken)) or (isinstance(value, dict) and value.get("__type") == "AddedToken")


def _as_text(value) -> str | None:
    """A token's text where transformers compares strings: a string or an AddedToken (not a raw JSON object)."""
    return value if isinstance(value, str) else None if value is None or isinstance(value, (dict, list)) else str(value)


def _legacy(d: Path, kw: dict, own: dict, special_map: dict, stored: dict) -> tuple[dict, dict]:
    """No added_tokens_decoder: special_tokens_map.json's entries into ``kw`` (and ``own``), and the added tokens of
    added_tokens.json, then of tokenizer.json (``stored``): (id -> AddedToken, text -> AddedToken)."""
    where = d / "special_tokens_map.json"
    for key, value in special_map.items():
        if isinstance(value, dict) and key != "extra_special_tokens":  # an AddedToken; without content, unusable
            value = json_token(value, f"{where}: {key}", special=True) if value.get("content") else None
        elif key == "extra_special_tokens" and isinstance(value, list):
            existing = list(kw.get("extra_special_tokens") or [])
            for t in _tokens(value, f"{where}: {key}", special=True):
                if t not in existing:
                    existing.append(t)
            value = existing
        kw[key] = value
    if isinstance(kw.get("extra_special_tokens"), dict):
        own.update(kw.pop("extra_special_tokens"))
    added, by_text = {}, {}
    table = json_object(d / "added_tokens.json")
    if table:
        special = {_as_text(kw.get(k)) for k in NAMED} | {_as_text(t) for t in kw.get("extra_special_tokens") or []}
        from tokenizers import AddedToken

        for tok, idx in table.items():
            if not isinstance(idx, int) or isinstance(idx, bool):
                raise ConfigError(f"{d / 'added_tokens.json'}: the id of {tok!r} is {json.dumps(idx)[:40]}, not an "
                                  "integer", "restore the file from the checkpoint")
            added[idx] = by_text[tok] = AddedToken(tok, rstrip=False, lstrip=False, normalized=tok not in special,
                                                   special=tok in special)
    for idx, t in stored.items():
        added[idx] = by_text[str(t)] = t
    return added, by_text


def declared_tokens(d: Path, tok_cfg: dict, special_map: dict, cls_name: str, stored: dict) -> DeclaredTokens:
    """The tokens transformers 5 adds to the tokenizer of folder ``d`` loaded as ``cls_name``, from its
    tokenizer_config.json (``tok_cfg``), special_tokens_map.json (``special_map``), added_tokens.json and the added
    tokens of its tokenizer.json (``stored``: id -> AddedToken, empty without one).

    Parameters
    ----------
    d : Path
        The folder (added_tokens.json is read from it; files are named in errors).
    tok_cfg, special_map : dict
        The two files' JSON objects ({} when absent).
    cls_name : str
        The tokenizer class (``tokenize.transformers_class``); its own defaults for the named special tokens count.
    stored : dict
        tokenizer.json's added tokens by id.

    Returns
    -------
    DeclaredTokens
    """
    where = d / "tokenizer_config.json"
    kw = dict(tok_cfg)
    if "additional_special_tokens" in kw and not kw.get("extra_special_tokens"):
        kw["extra_special_tokens"] = kw.pop("additional_special_tokens")
    own = {k: kw.pop(k) for k in list(kw) if k not in NAMED and k.endswith("_token") and isinstance(kw[k], str)}
    if isinstance(kw.get("extra_special_tokens"), dict):
        own.update(kw.pop("extra_special_tokens"))
    if "added_tokens_decoder" in kw:
        added, by_text = _decoder(kw["added_tokens_decoder"], f"{where}: added_tokens_decoder")
    else:
        added, by_text = _legacy(d, kw, own, special_map, stored)
    return _init_tokens(kw, own, by_text, sorted(added.items()), cls_name, where)


def _init_tokens(kw: dict, own: dict, by_text: dict, added: list, cls_name: str, where: Path) -> DeclaredTokens:
    """The class's __init__ and PreTrainedTokenizerBase.__init__: the named special tokens (the class's defaults,
    tokenizer_config.json's, an added token of the same text in its place, a model's own ``*_token``) and the extra
    special tokens."""
    from tokenizers import AddedToken

    cls = own_class(cls_name)
    values = dict(CLASS_DEFAULTS.get(cls, {}))
    for key in (k for k in NAMED if k in kw):
        v = None if kw[key] is None else json_token(kw[key], f"{where}: {key}")
        values[key] = by_text.get(str(v), v) if by_text and v is not None else v
    if cls == "MPNetTokenizer":  # MPNetTokenizer.__init__ wraps each string: the mask token eats the space before it
        values = {k: AddedToken(v, lstrip=k == "mask_token", rstrip=False) if isinstance(v, str) else v
                  for k, v in values.items()}
    if cls == "CamembertTokenizer":
        if isinstance(values.get("mask_token"), str):
            values["mask_token"] = AddedToken(values["mask_token"], lstrip=True, special=True)
        if kw.get("additional_special_tokens") is None:
            kw["additional_special_tokens"] = list(_CAMEMBERT_EXTRA)
    if "additional_special_tokens" in kw and "extra_special_tokens" not in kw:
        kw["extra_special_tokens"] = kw.pop("additional_special_tokens")
    named = {k: values.get(k) for k in NAMED}
    extra = kw.get("extra_special_tokens")
    if isinstance(extra, dict):  # named ones, set before the model's own *_token
        named.update(extra)
        extra = None
    auto = {k: v for k, v in kw.items() if k not in NAMED and k.endswith("_token") and _is_token(v)}
    named.update({**auto, **own})
    named = {k: None if v is None else json_token(v, f"{where}: {k}") for k, v in named.items()}
    extra = [] if extra is None else _tokens(extra, f"{where.parent}: extra_special_tokens")
    split = kw.get("split_special_tokens", False)
    if not isinstance(split, bool):
        raise ConfigError(f"{where}: split_special_tokens is {json.dumps(split)[:40]}, not true / false",
                          "restore the file from the checkpoint (or correct that entry)")
    return DeclaredTokens(named, extra, [t for _, t in added], split)
