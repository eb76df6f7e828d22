"""Tokenization with Hugging Face `tokenizers`.

From ``tokenizer.json`` when the model has one, else built from ``vocab.txt`` and the options in
``tokenizer_config.json`` exactly as transformers builds BertTokenizerFast (BertNormalizer with
lower-casing / Chinese-character splitting / accent stripping, BertPreTokenizer, WordPiece,
[CLS] A [SEP] (B [SEP]) template with token type ids 0/1).

Padding and truncation are always set here, never taken from tokenizer.json: rows are encoded
whole (so ``n_tokens`` is the real length), and only rows longer than ``max_length`` are encoded
again with truncation (longest-first for pairs, as transformers does).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import BertfeatError, ConfigError


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
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            vocab[line.rstrip("\n")] = i
    return vocab


def _load_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e})", "restore it from the checkpoint") from None
    return d if isinstance(d, dict) else {}


def _special(cfg: dict, special_map: dict, key: str, default: str) -> str:
    v = cfg.get(key) or special_map.get(key) or default
    return v["content"] if isinstance(v, dict) else str(v)


def build_wordpiece_tokenizer(vocab_path: Path, tok_cfg: dict, special_map: dict):
    """A tokenizers.Tokenizer equivalent to transformers' BertTokenizerFast for this vocab and config."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = read_vocab(vocab_path)
    unk = _special(tok_cfg, special_map, "unk_token", "[UNK]")
    cls = _special(tok_cfg, special_map, "cls_token", "[CLS]")
    sep = _special(tok_cfg, special_map, "sep_token", "[SEP]")
    for tok in (unk, cls, sep):
        if tok not in vocab:
            raise ConfigError(f"{vocab_path}: special token {tok} is not in the vocabulary", "use the vocab.txt that came with the model")
    tk = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    tk.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(tok_cfg.get("tokenize_chinese_chars", True)),
        strip_accents=tok_cfg.get("strip_accents"),
        lowercase=bool(tok_cfg.get("do_lower_case", True)),
    )
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
    )
    tk.decoder = decoders.WordPiece(prefix="##")
    # added tokens the slow tokenizer never splits
    tk.add_special_tokens([t for t in dict.fromkeys([
        _special(tok_cfg, special_map, "pad_token", "[PAD]"), unk, cls, sep,
        _special(tok_cfg, special_map, "mask_token", "[MASK]")]) if t in vocab])
    return tk


# Special tokens by role: the tokenizer_config.json / special_tokens_map.json entry, else the first of these
# the vocabulary has (BERT WordPiece names, then RoBERTa / XLM-R SentencePiece names).
_SPECIAL_NAMES = {
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "pad": ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
}


def special_tokens(vocab: dict[str, int], tok_cfg: dict, special_map: dict) -> dict[str, tuple[str | None, int | None]]:
    """role (cls, sep, pad, mask) -> (token, id) for this vocabulary, (None, None) when it has none."""
    out = {}
    for role, names in _SPECIAL_NAMES.items():
        v = tok_cfg.get(f"{role}_token") or special_map.get(f"{role}_token")
        cand = ([v["content"] if isinstance(v, dict) else str(v)] if v else []) + list(names)
        tok = next((t for t in cand if t in vocab), None)
        out[role] = (tok, vocab.get(tok) if tok is not None else None)
    return out


class BertTokenizer:
    """Text (and optional pair) -> Tokenized rows; holds the tokenizers.Tokenizer.

    Works for BERT WordPiece and RoBERTa / XLM-R tokenizers alike: the special tokens
    (``cls_id`` / ``sep_id`` / ``pad_id`` / ``mask_id``) are looked up by role, so windows of long
    texts are framed as the model's own template frames a row (``[CLS] .. [SEP]`` or ``<s> .. </s>``).
    """

    def __init__(self, tokenizer, source: str, model_max_length: int, tok_cfg: dict | None = None,
                 special_map: dict | None = None, lowercase: bool = False):
        self._tk = tokenizer
        if lowercase:  # sentence_bert_config.json do_lower_case: lower-case before the model's own normalizer
            from tokenizers import normalizers
            norm = self._tk.normalizer
            self._tk.normalizer = normalizers.Sequence([normalizers.Lowercase()] + ([norm] if norm is not None else []))
        self._tk.no_padding()
        self._tk.no_truncation()
        self._lock = threading.Lock()
        self.source = source
        self.model_max_length = model_max_length
        vocab = tokenizer.get_vocab()  # added tokens included
        self.vocab_size = tokenizer.get_vocab_size()
        self.id_limit = max(vocab.values(), default=-1) + 1  # every id the tokenizer can produce is below this
        sp = special_tokens(vocab, tok_cfg or {}, special_map or {})
        self.cls_token, self.cls_id = sp["cls"]
        self.sep_token, self.sep_id = sp["sep"]
        self.mask_token, self.mask_id = sp["mask"]
        self.pad_id = sp["pad"][1] if sp["pad"][1] is not None else 0
        self.mask_token = self.mask_token or "[MASK]"
        self.special_ids = frozenset(i for _, i in sp.values() if i is not None)

    @classmethod
    def from_dir(cls, model_dir: str | Path, model_max_length: int, lowercase: bool = False) -> "BertTokenizer":
        from tokenizers import Tokenizer

        d = Path(model_dir)
        tok_cfg = _load_json(d / "tokenizer_config.json")
        special_map = _load_json(d / "special_tokens_map.json")
        if (d / "tokenizer.json").is_file():
            try:
                tk = Tokenizer.from_file(str(d / "tokenizer.json"))
            except Exception as e:
                raise ConfigError(f"{d / 'tokenizer.json'} could not be read ({e})", "restore it from the checkpoint") from None
            source = "tokenizer.json"
        elif (d / "vocab.txt").is_file():
            tk = build_wordpiece_tokenizer(d / "vocab.txt", tok_cfg, special_map)
            source = "vocab.txt + tokenizer_config.json" if tok_cfg else "vocab.txt"
        elif any((d / f).is_file() for f in ("sentencepiece.bpe.model", "spiece.model", "vocab.json")):
            raise BertfeatError(
                f"{d} has a slow (SentencePiece / BPE) tokenizer but no tokenizer.json",
                "convert it once where transformers is installed: "
                "AutoTokenizer.from_pretrained(dir).save_pretrained(dir) writes tokenizer.json",
            )
        else:
            raise BertfeatError(
                f"{d} has neither tokenizer.json nor vocab.txt",
                "copy the model's tokenizer.json (or vocab.txt and tokenizer_config.json) into the directory",
            )
        return cls(tk, source, model_max_length, tok_cfg, special_map, lowercase)

    # ------------------------------------------------------------------ encoding
    def _encode_batch(self, texts: list[str], pairs: list[str] | None, max_length: int | None):
        inputs = texts if pairs is None else list(zip(texts, pairs))
        with self._lock:
            if max_length is None:
                self._tk.no_truncation()
            else:
                self._tk.enable_truncation(max_length, strategy="longest_first")
            try:
                return self._tk.encode_batch(inputs, add_special_tokens=True)
            finally:
                self._tk.no_truncation()

    def encode(self, texts: list[str], pairs: list[str] | None = None, max_length: int | None = None) -> Tokenized:
        """Encode rows whole, then re-encode only the rows longer than max_length with truncation."""
        max_length = max_length or self.model_max_length
        if pairs is not None and len(pairs) != len(texts):
            raise BertfeatError(f"{len(texts)} texts but {len(pairs)} pairs", "give one pair text for each text")
        full = self._encode_batch(texts, pairs, None)
        ids = [np.asarray(e.ids, dtype=np.int32) for e in full]
        type_ids = [np.asarray(e.type_ids, dtype=np.int32) for e in full]
        n_tokens = np.fromiter((len(a) for a in ids), dtype=np.int64, count=len(ids))
        truncated = n_tokens > max_length
        long_rows = np.flatnonzero(truncated)
        if long_rows.size:
            cut = self._encode_batch([texts[i] for i in long_rows],
                                     None if pairs is None else [pairs[i] for i in long_rows], max_length)
            for i, e in zip(long_rows, cut):
                ids[i] = np.asarray(e.ids, dtype=np.int32)
                type_ids[i] = np.asarray(e.type_ids, dtype=np.int32)
        return Tokenized(ids, type_ids, n_tokens, truncated)

    def encode_content(self, texts: list[str]) -> list[np.ndarray]:
        """Word-piece ids of each text without special tokens (for chunking long texts)."""
        with self._lock:
            self._tk.no_truncation()
            enc = self._tk.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int32) for e in enc]

    def tokens(self, text: str, pair: str | None = None, max_length: int | None = None):
        """One row's encoding (tokens, ids, type ids, truncated) for inspection."""
        full = self._encode_batch([text], None if pair is None else [pair], None)[0]
        max_length = max_length or self.model_max_length
        if len(full.ids) > max_length:
            enc = self._encode_batch([text], None if pair is None else [pair], max_length)[0]
            return enc, True, len(full.ids)
        return full, False, len(full.ids)

    def id_to_token(self, i: int) -> str:
        return self._tk.id_to_token(int(i))


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
