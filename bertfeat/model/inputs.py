"""The texts an ``Encoder`` is given: their checks (``text_list``, sentence pairs' long-text rule) and the errors that
name the rows they refuse (``RowsError`` and its kinds, ``LongTextError``), which travel from a Dask worker whole."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import BertfeatError, InputError, clipped, opt
from ..readers.rejects import tokens_said
from ..readers.textcheck import check_text

def check_pairs_long_text(long_text: str) -> None:
    """Sentence pairs are truncated (or refused when too long), never cut into windows: refused before any work."""
    if long_text.startswith("chunk"):
        raise BertfeatError(f"{opt('long_text', 'chunk-*')} works on single texts, not sentence pairs",
                            f"use {opt('long_text', 'truncate')} (or error) with {opt('pair_column')}")


#: the fix of a prompt that is not valid Unicode (a command-line argument's bytes not UTF-8, a lone surrogate in Python)
PROMPT_FIX = ("give the prompt as UTF-8 text (convert it first, e.g. with iconv -f latin1 -t utf-8; in Python, a str "
              "without lone surrogates, which come from a broken \\ud800-\\udfff escape or errors='surrogateescape')")


#: the fix of a text that is not a string
NOT_A_STRING_FIX = "pass a list of strings (drop or fill missing texts first)"


def text_list(values, name: str) -> list[str]:
    """``texts`` / ``pairs`` of Encoder.encode -> a list of str (one string: a list of it, as sentence-transformers; a
    one-column DataFrame or (n, 1) array: its column).

    Anything else than strings is refused naming the first bad item (``texts[1] is None, not a string``), rather than
    reaching the tokenizer, whose TypeError names neither; so is a text that is not valid Unicode (textcheck.text_reason:
    extract's rule for a row's text)."""
    if isinstance(values, str):
        values = [values]
    elif hasattr(values, "columns") and hasattr(values, "shape"):  # a pandas / polars DataFrame (iterating gives its
        # column names) or a pyarrow Table
        kind = type(values).__name__
        if len(values.shape) != 2 or values.shape[1] != 1:
            raise BertfeatError(f"{name} is a {kind} of {values.shape[1]} columns, not a list of strings",
                                "pass its text column, e.g. df['text']")
        names = getattr(values, "column_names", None)  # pyarrow: columns are arrays, column_names their names
        values = values.column(0).to_pylist() if names is not None else values[values.columns[0]]
    elif hasattr(values, "to_pylist") and hasattr(values, "null_count"):  # a pyarrow Array / ChunkedArray (a Table's
        values = values.to_pylist()  # column): its scalars are no strings; None, a null, is refused below
    elif isinstance(values, (set, frozenset)):  # its order is the strings' hashes, new in every process
        raise BertfeatError(f"{name} is a {type(values).__name__} (no order, so no rows), not a list of strings",
                            f"pass a list, e.g. sorted({name})")
    elif isinstance(values, np.ndarray) and values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]  # one column (df[["text"]].to_numpy()), as a one-column DataFrame and TextFeatures
    elif isinstance(values, np.ndarray) and values.ndim > 1:  # its repr spanned lines, cut at 40 characters
        raise BertfeatError(f"{name} is an array of shape {values.shape}, not a list of strings",
                            "pass a 1-D array (or an (n, 1) column) of strings")
    elif isinstance(values, (bytes, bytearray, Mapping)) or not hasattr(values, "__iter__") \
            or getattr(values, "ndim", 1) != 1:
        raise BertfeatError(f"{name} is {short_repr(values)}, not a list of strings", NOT_A_STRING_FIX)
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise BertfeatError(f"{name}[{i}] is {short_repr(v)}, not a string", NOT_A_STRING_FIX)
        check_text(v, f"{name}[{i}]")  # extract's rule for a row's text (textcheck.text_reason)
    return values


def short_repr(v) -> str:
    """A value and its type for a message: ``None``, ``3 (int)``, ``b'x' (bytes)``, ``nan (float)``."""
    return "None" if v is None else f"{clipped(repr(v))} ({type(v).__name__})"  # "..." marks a cut


class RowsError(InputError):
    """An error about some of the texts given; ``rows``: their positions (they travel with it from a Dask worker)."""

    def __init__(self, what: str, fix: str | None = None, rows: tuple[int, ...] = ()):
        self.rows = tuple(rows)
        super().__init__(what, fix)

    def __reduce__(self):
        return (type(self), (self._what, self._fix, self.rows))


def shown_rows(rows, label) -> str:
    """The first three rows as ``label`` shows them, then how many more."""
    return ", ".join(label(r) for r in rows[:3]) + (f" and {len(rows) - 3:,} more" if len(rows) > 3 else "")


class NonFiniteFeaturesError(RowsError):
    """Feature vectors that came out NaN or infinite; ``rows``: their positions in the texts given."""

    @classmethod
    def at(cls, rows, label=lambda i: f"texts[{i}]") -> "NonFiniteFeaturesError":
        """The error for these rows, each shown by ``label`` (the first three, then how many more)."""
        rows = [int(r) for r in rows]
        return cls(f"the model gave NaN or infinite features for {shown_rows(rows, label)}", NONFINITE_FIX, rows)


NONFINITE_FIX = ("the model overflows float32 on these inputs or its files are corrupt: re-download or re-save the "
                 "checkpoint, or leave these texts out")


def check_finite_features(X: np.ndarray) -> None:
    """Refuse features with a NaN or inf (never returned, never written), naming the rows."""
    if X.size and not np.isfinite(X).all():
        raise NonFiniteFeaturesError.at(np.flatnonzero(~np.isfinite(X).all(axis=1)))


class TokenPastTableError(InputError):
    """Rows whose tokens include one the word embedding table has no row for; ``rows``: their positions in the texts
    given, ``tokens``: (token, id) of each row's first such token, ``table_rows``: the table's size."""

    def __init__(self, what: str, fix: str | None = None, rows: tuple[int, ...] = (), tokens: tuple = (),
                 table_rows: int = 0):
        self.rows, self.tokens, self.table_rows = tuple(rows), tuple(tokens), int(table_rows)
        super().__init__(what, fix)

    def __reduce__(self):  # the rows travel too (Dask workers -> client)
        return (type(self), (self._what, self._fix, self.rows, self.tokens, self.table_rows))

    @classmethod
    def at(cls, rows, tokens, table_rows: int, label=lambda i: f"texts[{i}]") -> "TokenPastTableError":
        """The error for these rows, each shown by ``label`` with its token (the first three, then how many more)."""
        shown = ", ".join(f"{label(r)} ({t!r}, id {i:,})" for r, (t, i) in list(zip(rows, tokens))[:3])
        more = f" and {len(rows) - 3:,} more" if len(rows) > 3 else ""
        return cls(f"{shown}{more}: a token with no row in the model's word embedding table ({table_rows:,} rows)",
                   TOKEN_PAST_TABLE_FIX, rows, tokens, table_rows)


TOKEN_PAST_TABLE_FIX = ("leave the token out of these texts (the model's tokenizer has tokens its weights cannot embed; "
                        "sentence-transformers fails on them with an IndexError), or use a model whose embedding table "
                        "covers its tokenizer (saved after transformers' resize_token_embeddings)")


class NoTokensError(RowsError):
    """Rows whose tokenization holds no token (a tokenizer that adds no special tokens dropped every character);
    ``rows``: their positions in the texts given."""

    @classmethod
    def at(cls, rows, label=lambda i: f"texts[{i}]") -> "NoTokensError":
        """The error for these rows, each shown by ``label`` (the first three, then how many more)."""
        rows = [int(r) for r in rows]
        return cls(f"{shown_rows(rows, label)}: a text with no tokens the model keeps (its tokenizer drops every "
                   "character and adds no special tokens)", NO_TOKENS_FIX, rows)


NO_TOKENS_FIX = ("leave these texts out, or give each a word the tokenizer keeps (this model's tokenizer adds no special "
                 "tokens such as [CLS], so a text it drops whole leaves nothing to embed; sentence-transformers fails "
                 "on it with a RuntimeError)")


class LongTextError(BertfeatError):
    """Rows longer than max length under ``long_text="error"``."""

    def __init__(self, rows: np.ndarray, n_tokens: np.ndarray, max_length: int, pairs: bool = False, *,
                 label=lambda r: f"row {r}", prompt_tokens: int = 0):
        self.rows = rows  # indices of the rows given to prepare
        self.n_tokens = n_tokens  # (n,) every given row's tokens, its prompt included
        self.max_length, self.pairs, self.prompt_tokens = max_length, pairs, prompt_tokens
        r = int(rows[0])
        chunks = "" if pairs else ", chunk-mean or chunk-max"  # sentence pairs are never cut into windows
        shorter = f", or a shorter {opt('prompt')}" if prompt_tokens else ""
        super().__init__(
            f"{label(r)} has {tokens_said(int(n_tokens[r]), prompt_tokens)}, more than max length {max_length}"
            + (f" ({len(rows)} rows are too long)" if len(rows) > 1 else ""),
            f"use {opt('long_text', 'truncate')}{chunks}, or a larger {opt('max_length')}{shorter}",
        )

    def __reduce__(self):  # the message as made (its label may be a lambda) and the rows travel: worker -> caller
        return (type(self)._rebuilt, (self._what, self._fix, self.rows, self.n_tokens, self.max_length, self.pairs,
                                      self.prompt_tokens))

    @classmethod
    def _rebuilt(cls, what: str, fix: str | None, rows, n_tokens, max_length: int, pairs: bool,
                 prompt_tokens: int = 0) -> "LongTextError":
        """The error unpickled (BertfeatError's own reduce passed (what, fix) as rows and n_tokens: a TypeError)."""
        e = cls.__new__(cls)
        BertfeatError.__init__(e, what, fix)
        e.rows, e.n_tokens, e.max_length, e.pairs, e.prompt_tokens = rows, n_tokens, max_length, pairs, prompt_tokens
        return e
