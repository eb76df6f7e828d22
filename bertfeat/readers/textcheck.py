"""Which texts bertfeat encodes: one rule (``text_reason``) for every way a text comes in, so that the command line and
Python never disagree on one: extract's rows on both engines (chunks.validate_batch: also verify, sweep and
``extract --estimate``), ``Encoder.encode``, ``TextFeatures`` and the inspection commands (``check_text``).

A text goes to the tokenizer as it is, so its vector is the one sentence-transformers gives the same text: what the
tokenizer drops, it drops there too. BERT's (clean_text) drops control and format characters: ``"a\\x01b"`` is
``"ab"``, ``"hello\\x00world"`` is ``hello ##world`` and a byte order mark is nothing, as ``SentenceTransformer.encode``
has them; a byte-level BPE (RoBERTa) keeps them. The one text refused is one that is not valid Unicode (a lone
surrogate), which sentence-transformers' tokenizer cannot take either.

A file's cell is read before it is a text (chunks.decode_cell): a null, NaN, empty or whitespace-only cell is a
missing value, so a bad row (a CSV cannot tell an empty cell from a missing one). A JSONL line's ``NaN`` or
``Infinity`` is a number the line wrote, not a missing value: the JSONL reader rejects it as not a string. Python's missing values (None,
NaN) are refused by Encoder.encode and TextFeatures as not strings; a string, "" included, is a text.
"""

from __future__ import annotations

import re

from ..errors import BertfeatError
from .rejects import Reason, RejectCode

# a UTF-16 surrogate code point on its own: what a JSON escape such as "\ud800" without its pair decodes to
_SURROGATE = re.compile("[\ud800-\udfff]")

#: how to fix a refused text in Python (Encoder.encode, TextFeatures, the inspection functions)
PYTHON_FIX = ("encode the text from valid Unicode (a lone surrogate comes from a broken \\ud800-\\udfff escape or from "
              "decoding with errors='surrogateescape')")


def text_reason(text: str, what: str = "text") -> Reason | None:
    """None when ``text`` is encoded (as it is: the tokenizer drops what it drops, as in sentence-transformers), else
    why it is refused: not valid Unicode.

    Parameters
    ----------
    text : str
        A file's cell once decoded (and not a missing value), or a text given in Python.
    what : str
        How the words name it ("text", "pair text", "texts[3]").

    Returns
    -------
    Reason or None
        The reject's code and words; None for a text that is encoded.
    """
    bad = surrogate_reason(text, what)
    return Reason(RejectCode.INVALID_UNICODE, bad) if bad else None


def check_text(text: str, label: str) -> None:
    """Raise BertfeatError when ``text_reason`` refuses ``text`` (the Python side: ``label`` names it, e.g.
    ``texts[3]``)."""
    why = text_reason(text, label)
    if why is not None:
        raise BertfeatError(why.text, PYTHON_FIX)


def surrogate_reason(text: str, what: str = "text") -> str | None:
    """None, or why the string is not valid Unicode: an unpaired surrogate (from a JSON \\uD800-\\uDFFF escape without
    its pair), which no UTF-8 text, tokenizer or output file can hold."""
    if text.isascii():  # the common case, without the regex
        return None
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return (f"unpaired surrogate U+{ord(m.group()):04X} at character {m.start()} of the {what}: not valid Unicode "
            f"(a JSON \\u{ord(m.group()):04x} escape without its pair)")
