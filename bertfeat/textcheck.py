"""Texts the tokenizer would change without a word.

BERT's tokenizer (clean_text) drops every control character except tab, newline and carriage return:
``"hello\\x00world"`` becomes the one word ``helloworld`` (wordpieces ``hello ##world``). Such a row is a bad
row (an error, or a reject under --on-bad-row skip) so that nothing is merged silently.
"""

from __future__ import annotations

import re

# C0 and C1 control characters and DEL, except tab, newline, carriage return (whitespace to the tokenizer)
_DROPPED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# a UTF-16 surrogate code point on its own: what a JSON escape such as "\ud800" without its pair decodes to
_SURROGATE = re.compile("[\ud800-\udfff]")


def control_character_reason(text: str, what: str = "text") -> str | None:
    """None, or why the text is refused: the first control character the tokenizer would drop, and where."""
    m = _DROPPED.search(text)
    if m is None:
        return None
    n = len(_DROPPED.findall(text))
    more = f" (and {n - 1} more)" if n > 1 else ""
    return (f"control character U+{ord(m.group()):04X} at character {m.start()} of the {what}{more}: "
            "the tokenizer would drop it and join the words around it")


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
