"""Bad rows as data: a reject has a row, an id, a code (``RejectCode``) and the words that describe it.

Readers (a malformed CSV line, invalid JSON, a JSONL line that is not an object, an unclosed quote, a binary
Parquet cell), validation (chunks.py and textcheck.py: null, empty, non-string, bad bytes, lone surrogates), the
long-text rule, tokens the model cannot embed and texts the tokenizer leaves no token of make ``Reason``s; the fix shown to the user is looked up by code
(``fix_for``), never by parsing the text.
A reject travels as a plain dict (``{"row", "id", "reason", "code"}``, plus ``"keep"``: the row's kept values, with
``keep``): it pickles to and from Dask workers and sits in a part file's metadata; the rejects file has the columns
``row, id, reason``, then the kept columns. ``BadRowLimit`` (``max_bad_rows``) is how many bad rows a run may skip
before it fails with ``TooManyBadRows`` (exit code 3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from enum import Enum
from pathlib import Path

from ..errors import BertfeatError, InputError, opt, render


class RejectCode(str, Enum):
    NULL = "null"
    EMPTY = "empty"
    WHITESPACE = "whitespace"
    NOT_STRING = "not-string"
    ENCODING = "encoding"  # bytes that are not valid in the input's encoding
    BINARY_COLUMN = "binary-column"  # a Parquet binary cell that is not UTF-8
    INVALID_UNICODE = "invalid-unicode"  # an unpaired surrogate from a JSON escape (text, pair, id or kept value)
    UNCLOSED_QUOTE = "unclosed-quote"
    TEXT_AFTER_QUOTE = "text-after-quote"  # a CSV quoted field with more text after its closing quote ("a" b)
    MALFORMED_LINE = "malformed-line"
    INVALID_JSON = "invalid-json"
    NOT_OBJECT = "not-object"  # a JSONL line that is valid JSON but not an object (an array, a string, a number ...)
    TOO_LONG = "too-long"  # more tokens than max_length under long_text='error'
    TOKEN_PAST_TABLE = "token-past-table"  # a token the model's word embedding table has no row for
    NO_TOKENS = "no-tokens"  # no token at all: a tokenizer that adds no special tokens dropped every character
    NULL_ID = "null-id"
    MISSING_FIELD = "missing-field"  # a JSONL object without the text (or pair) field
    BAD_ID = "bad-id"  # a JSONL id that is not a string or an integer, or not of the kind of the ids before it
    BAD_KEPT_VALUE = "bad-kept-value"  # a kept column's value (keep) not of the type given or its first rows decided
    FIELD_TOO_LARGE = "field-too-large"  # a text, pair, id or kept value larger than max_field_bytes (never held whole)
    QUOTED_TSV = "quoted-tsv"  # a TSV value written as a CSV writer quotes one ("a ""b"""), which TSV does not undo
    LONE_CR = "lone-cr"  # a part of a line a CR alone (not a CRLF's) cut into rows, in a file whose lines end in \n
    REPEATED_HEADER = "repeated-header"  # a CSV / TSV line that is the header line again (files joined with cat)


@dataclass(frozen=True)
class Reason:
    """Why a row is rejected: its code and its words (which may name options with errors.opt)."""

    code: RejectCode
    text: str


def reject(row: int, ident, reason: Reason, kept: dict | None = None) -> dict:
    """A reject as it travels: row, id, reason (words, option markers kept) and code; with kept columns, ``keep``:
    column -> the row's value (bytes decoded)."""
    # a binary id's bytes as text, a boolean id true / false as the kept values and the CSV output write it
    shown = bytes_text(ident) if isinstance(ident, (bytes, bytearray)) else _writable(_plain_id(ident))
    r = {"row": row, "id": shown, "reason": _writable(reason.text), "code": reason.code.value}
    if kept is not None:
        r["keep"] = {c: shown_text(v) if isinstance(v, (bytes, bytearray)) else _writable(v) for c, v in kept.items()}
    return r


def _plain_id(ident):
    """An id as the rejects file shows it: a boolean as ``cell`` shows one (not Python's True), a float that carries its
    text (kept.Shortest: a float32 / float16 id) as that text, which the part's JSON metadata keeps for --resume (as a
    float it wrote the double it widens to, 0.10000000149011612), else the id."""
    if isinstance(ident, bool):
        return cell(ident)
    text = getattr(ident, "text", None) if isinstance(ident, float) else None
    return text if isinstance(text, str) else ident


def _writable(v):
    """A string as the rejects file can hold it: an unpaired surrogate (from a JSON escape) written as its escape, and
    then a backslash of the string doubled (a written ``\\ud800`` is not the surrogate: as ``bytes_text`` shows bytes)."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return v.replace("\\", "\\\\").encode("utf-8", errors="backslashreplace").decode("utf-8")
    return v


def too_large(what: str, size: int, limit: int, at_least: bool = False) -> Reason:
    """A value larger than ``max_field_bytes``: ``the text is 52,428,800 bytes, more than max_field_bytes 4MiB allows``
    (``at_least``: its size is known only to be more than that)."""
    return Reason(RejectCode.FIELD_TOO_LARGE, f"the {what} is {'more than ' if at_least else ''}{size:,} bytes, more "
                                              f"than {opt('max_field_bytes', limit, cli=size_text(limit))} allows")


def size_text(n: int) -> str:
    """Bytes as the max_field_bytes option takes them: 4MiB, 512KiB, 1000."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def tokens_said(n_tokens: int, prompt_tokens: int = 0) -> str:
    """'44 tokens', or with a prompt '44 tokens (40 of them the prompt's)': the count is the prompted row's (the
    rejects file's reason and the Encoder's LongTextError say it alike)."""
    return f"{n_tokens} tokens" + (f" ({prompt_tokens} of them the prompt's)" if prompt_tokens else "")


def too_long(n_tokens: int, max_length: int, prompt_tokens: int = 0) -> Reason:
    """A row longer than max length; ``prompt_tokens``: how many of its tokens the prompt put there."""
    return Reason(RejectCode.TOO_LONG, f"{tokens_said(n_tokens, prompt_tokens)}, more than max length {max_length} "
                                       f"({opt('long_text', 'error')})")


def token_past_table(token: str, token_id: int, table_rows: int) -> Reason:
    """A row whose tokens include one the model cannot embed (an added token past its word embedding table)."""
    return Reason(RejectCode.TOKEN_PAST_TABLE, f"the token {token!r} (id {token_id:,}) has no row in the model's word "
                                               f"embedding table ({table_rows:,} rows)")


def no_tokens(pair: bool) -> Reason:
    """A row the tokenizer leaves no token of (it drops every character, and the model's tokenizer adds no special
    tokens): nothing for the model to embed."""
    what = "the text and pair text have" if pair else "the text has"
    return Reason(RejectCode.NO_TOKENS, f"{what} no tokens the model keeps (its tokenizer drops every character and "
                                        "adds no special tokens)")


SKIP_WRITES = "write it to the rejects file and go on"


def fix_for(code: RejectCode | str, skip_does: str = SKIP_WRITES, no_keep: bool = False) -> str:
    """How to fix a bad row, by its code (options named with errors.opt); ``skip_does``: what on_bad_row='skip'
    would do with it; ``no_keep``: the command has no ``keep`` to give a column's type with (sweep's label)."""
    skip = f"or pass {opt('on_bad_row', 'skip')} to {skip_does}"
    fixes = {
        RejectCode.BINARY_COLUMN: (f"write the column as UTF-8 strings (decode it with its real encoding first; "
                                   f"{opt('encoding')} applies to CSV, TSV and JSONL only), {skip}"),
        RejectCode.ENCODING: f"pass {opt('encoding')} with the file's encoding (e.g. {opt('encoding', 'latin-1')}), {skip}",
        RejectCode.INVALID_UNICODE: ("fix the JSON escape (a \\ud800-\\udbff escape needs its \\udc00-\\udfff pair right "
                                     f"after it, as in \\ud83d\\ude00), {skip}"),
        RejectCode.UNCLOSED_QUOTE: f'close the quote (a quote inside a quoted field is written ""), {skip}',
        RejectCode.TEXT_AFTER_QUOTE: ('quote the whole value and double the quotes inside it (he said "hi" is written '
                                      f'"he said ""hi"""), {skip}'),
        RejectCode.MALFORMED_LINE: (f"fix the line (quote CSV fields that hold the delimiter; TSV has no quoting: a TSV "
                                    f"quoted as CSV reads with {opt('input_format', 'csv')} {opt('delimiter', 'tab')}), "
                                    f"{skip}"),
        RejectCode.QUOTED_TSV: (f"if the file's values are quoted as in CSV (pandas, Python's csv module and R write "
                                f"TSV so), read it as CSV with tabs: {opt('input_format', 'csv')} "
                                f"{opt('delimiter', 'tab')}; if the quotes are the value's own (a Python docstring "
                                f"\"\"\"...\"\"\" is written so too, and TSV cannot tell them apart), write the rows as "
                                f"JSONL or Parquet; {skip}"),
        RejectCode.LONE_CR: ("remove the CR from the value or replace it with a space (e.g. perl -pe 's/\\r(?!\\n)/ /g' "
                             "in.tsv > fixed.tsv, which keeps CRLF line ends), quote the value (CSV: a quoted value keeps "
                             f"its CR), or write the rows as JSONL or Parquet, which keep it; {skip}"),
        RejectCode.REPEATED_HEADER: ("join the files without their header lines but the first (e.g. awk 'NR == 1 || "
                                     f"FNR > 1' a.csv b.csv > all.csv), or delete the line; {skip}"),
        RejectCode.INVALID_JSON: f"fix the line (one JSON object per line), {skip}",
        RejectCode.NOT_OBJECT: f'make the line a JSON object such as {{"text": ...}} (one object per line), {skip}',
        RejectCode.BAD_KEPT_VALUE: (f"fix the value (the column's values are of the kind its first rows hold), {skip}"
                                    if no_keep else
                                    f"fix the value, or give the column's type in {opt('keep')} (COLUMN:str keeps every "
                                    f"value as the text it is written as; :int, :float or :bool reads each CSV / TSV cell as one, and takes JSONL's "
                                    f"JSON numbers and true / false), {skip}"),
        RejectCode.TOKEN_PAST_TABLE: (f"leave the token out of the row (the model's tokenizer has tokens its weights "
                                      "cannot embed; sentence-transformers fails on them too), or use a model whose "
                                      f"embedding table covers its tokenizer, {skip}"),
        RejectCode.NO_TOKENS: (f"leave the row out, or give it a word the tokenizer keeps (this model's tokenizer adds "
                               "no special tokens such as [CLS], so a text it drops whole leaves nothing to embed; "
                               f"sentence-transformers fails on it too), {skip}"),
        RejectCode.FIELD_TOO_LARGE: (f"shorten or split the value (an unclosed quote or a binary blob in a text column "
                                     f"is a common cause), or raise {opt('max_field_bytes')} (the reader holds a value that "
                                     f"large in memory), {skip}"),
        RejectCode.TOO_LONG: (f"use {opt('long_text', 'truncate')}/chunk-mean/chunk-max or a larger {opt('max_length')}, "
                              f"or {opt('on_bad_row', 'skip')}"),
    }
    return fixes.get(RejectCode(code), f"fix the row, {skip}")


def bad_row_error(row_label, r: dict, skip_does: str = SKIP_WRITES, no_keep: bool = False) -> InputError:
    """``on_bad_row='error'``: the run stops at this reject, ``FILE row N: reason - fix`` (``row_label``: the reader's
    ``row_label``, which names a dataset's file and its row too; ``skip_does``, ``no_keep``: as fix_for's)."""
    return InputError(f"{row_label(r['row'])}: {r['reason']}", fix_for(r["code"], skip_does, no_keep))


def rejects_csv(rejects: list[dict], keep: tuple[str, ...] | list[str] = ()) -> str:
    """The rejects file's text: ``row, id, reason`` (options in the reasons spelled as the CLI's flags), then the
    kept columns (``keep``; ``cell``), a kept column named row, id or reason headed "NAME (kept)"."""
    lines = [_csv_line(["row", "id", "reason", *(f"{c} (kept)" if c in ("row", "id", "reason") else c for c in keep)])]
    for r in rejects:
        kept = r.get("keep") or {}
        values = (kept.get(c) for c in keep)
        lines.append(_csv_line([str(r["row"]), None if r["id"] is None else str(r["id"]), render(r["reason"], {}),
                                *(None if v is None else cell(v) for v in values)]))
    return "".join(lines)


def _csv_line(fields: list[str | None]) -> str:
    """One CSV line as csv.writer writes it (CRLF ends it; a field holding a comma, a quote or a line break quoted),
    but with a null (None) an empty cell and an empty string a quoted one (""), as the CSV feature file writes them
    and bertfeat's readers read them back."""
    def field(v):
        if v is None:
            return ""
        if v == "" or any(ch in v for ch in ',"\r\n'):
            return '"' + v.replace('"', '""') + '"'
        return v

    return ",".join(field(v) for v in fields) + "\r\n"


def shown_text(v: bytes) -> str:
    """A text value's bytes as the rejects file (and a message) shows them: UTF-8 as it is; a value with a byte that is
    not UTF-8 as ``bytes_text`` shows it, the byte as \\xNN (replaced by U+FFFD, the byte was lost to whoever fixes the
    row) and so a backslash of its own doubled (a written ``\\xff`` was shown as the byte)."""
    b = bytes(v)
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return bytes_text(b)


def bytes_text(v: bytes) -> str:
    """Binary as text (a CSV output's cell, the rejects file's): UTF-8 as it is, a backslash doubled, a byte that is not
    UTF-8 as \\xNN (``features.delimited.text_bytes`` reverses it)."""
    return bytes(v).replace(b"\\", b"\\\\").decode("utf-8", errors="backslashreplace")


def cell(value) -> str:
    """A kept value in the rejects file: a null empty, a boolean true / false (as the CSV feature file writes them), a
    list, map or struct as JSON (a map as [key, value] pairs, bytes as bytes_text, a date or decimal as its text), else
    Python's ``str`` of it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return _writable(json.dumps(value, ensure_ascii=False, default=_json_default))
    return str(value)


def _json_default(v) -> str:
    """A value inside a nested one that JSON has no type for: bytes as bytes_text, a date, time or decimal as its text."""
    return bytes_text(v) if isinstance(v, (bytes, bytearray)) else str(v)


def publish_rejects(path: Path, rejects: list[dict], keep: tuple[str, ...] | list[str] = ()) -> dict:
    """Write the rejects file when there are rejects (else remove a stale one): -> {"rejects": path} or {}. Inside
    atomic.together(), the stale file goes when the group's files appear."""
    from ..atomic import removal, write_atomic

    if rejects:
        write_atomic(path, rejects_csv(rejects, keep))
        return {"rejects": path}
    if path.exists():
        removal(path)
    return {}


# --------------------------------------------------------------------------- max_bad_rows
EXIT_TOO_MANY_BAD_ROWS = 3


class TooManyBadRows(InputError):
    """More bad rows than ``max_bad_rows`` allows: the run stops, writes nothing, and the CLI exits with code 3."""

    exit_code = EXIT_TOO_MANY_BAD_ROWS


@dataclass(frozen=True)
class BadRowLimit:
    """``max_bad_rows``: the most bad rows a run skips before it fails. ``count``: a number of rows, checked as each
    chunk finishes (the run stops at the chunk that passes it); ``fraction``: a share of the rows read (exact: a
    Fraction), checked once every row is read (before any output is written). ``text``: as given, for messages."""

    count: int | None
    fraction: Fraction | None
    text: str

    @property
    def given(self):
        """As given, for errors.opt: the count (``max_bad_rows=10``), or the percentage text."""
        return self.count if self.count is not None else self.text

    def exceeded(self, n_bad: int, n_read: int, final: bool) -> bool:
        if self.count is not None:
            return n_bad > self.count
        return final and n_bad > self.fraction * n_read  # exact: 29 of 100 rows is not more than 29%

    def error(self, source_name: str, rejects: list[dict], n_read: int, kept: str | None = None) -> TooManyBadRows:
        """``FILE: N bad rows among the M rows read, more than max_bad_rows K allows (row 4: why; row 9: why; and J
        more) - fix``; ``rejects``: those found so far, in row order; ``kept``: where the finished chunks are kept for
        a resume (None: nothing kept)."""
        n = len(rejects)
        what = f"{n:,} bad row{'s' * (n != 1)} among the {n_read:,} rows read"
        if self.fraction is not None:
            what += f" ({100 * n / max(n_read, 1):.3g} %)"
        shown = "; ".join(f"row {r['row']}: {r['reason']}" for r in rejects[:3])
        more = f"; and {n - 3:,} more" if n > 3 else ""
        if kept is None:
            fix = (f"fix those rows or raise {opt('max_bad_rows')} ({opt('on_bad_row', 'skip')} without "
                   f"{opt('max_bad_rows')} writes every bad row to the rejects file, with its reason)")
        else:
            fix = (f"raise {opt('max_bad_rows')} and rerun with {opt('resume', True)} ({kept}), or fix those rows and "
                   f"rerun with {opt('overwrite', True)}")
        return TooManyBadRows(
            f"{source_name}: {what}, more than {opt('max_bad_rows', self.given, cli=self.text)} allows ({shown}{more})",
            fix)


def parse_max_bad_rows(value) -> BadRowLimit | None:
    """``max_bad_rows``: None (no limit), a whole number of rows (``10``, ``"10"``) or a percentage of the rows read
    (``"0.5%"``)."""
    if value is None:
        return None
    fix = f"give a number of rows such as {opt('max_bad_rows', 100)}, or a share of the rows read such as {opt('max_bad_rows', '1%')}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BertfeatError(f"{opt('max_bad_rows', value)} is not a number of rows or a percentage", fix)
    text = str(value).strip()
    try:
        number = Fraction(text[:-1]) if text.endswith("%") else int(text)
    except (ValueError, ZeroDivisionError):
        raise BertfeatError(f"{opt('max_bad_rows', text, cli=repr(text))} is not a number of rows or a percentage",
                            fix) from None
    if text.endswith("%"):
        if not 0 <= number <= 100:
            raise BertfeatError(f"{opt('max_bad_rows', text, cli=text)} is out of range", "give 0% to 100%")
        return BadRowLimit(None, number / 100, text)
    n = number
    if n < 0:
        raise BertfeatError(f"{opt('max_bad_rows', n)} is out of range", "give 0 or more")
    return BadRowLimit(n, None, str(n))


def resolve_bad_rows(on_bad_row: str | None, limit: BadRowLimit | None) -> tuple[str, BadRowLimit | None]:
    """(on_bad_row, limit): ``max_bad_rows`` (its ``limit``: parse_max_bad_rows) skips bad rows up to its limit, so
    on_bad_row defaults to 'skip' with it and 'error' without; on_bad_row='error' with a limit is refused (the first
    bad row would stop the run)."""
    if on_bad_row is None:
        return ("skip" if limit is not None else "error"), limit
    if on_bad_row == "error" and limit is not None:
        raise BertfeatError(f"{opt('max_bad_rows', limit.given, cli=limit.text)} skips bad rows up to its limit, but "
                            f"{opt('on_bad_row', 'error')} stops at the first",
                            f"drop {opt('on_bad_row', 'error')} (with {opt('max_bad_rows')} bad rows are skipped)")
    return on_bad_row, limit
