"""Reading input rows: CSV, TSV, Parquet (a file, a glob or a directory) and JSONL, or stdin, one reader per format
(``delimited``, ``parquet``, ``jsonl``; line-based text: ``text``) behind one protocol (``base``); ``open_input``
(``formats``) picks the reader. Around them: where the files are (``paths``: a file, a glob, a folder, an fsspec URL,
compression), byte counting, decompression and the CSV read-ahead gate (``stream``), ``keep`` columns' types and values (``kept``),
the quoting, delimiter and field-size checks of CSV (``csvcheck``) and the one rule for which texts are encoded
(``textcheck``), bad rows as data with codes and fixes, the rejects file and ``max_bad_rows`` (``rejects``), and a
clean exit after pyarrow's streaming CSV reader (``arrowexit``)."""

from .base import (
    DEFAULT_MAX_FIELD_BYTES,
    HEAD_BYTES,
    MIN_PART_BYTES,
    MIN_PART_ROWS,
    TEXT_COLUMN_NAMES,
    Partition,
    RawBatch,
    Reader,
    normalize_encoding,
    resume_identity,
)
from .delimited import CsvReader
from .formats import FORMATS, detect_format, open_input, split_id_column
from .jsonl import JsonlReader
from .parquet import ParquetReader
from .paths import compression_of, is_pattern, is_url, resolve_files
from .text import TextReader

__all__ = [
    "FORMATS",
    "TEXT_COLUMN_NAMES",
    "HEAD_BYTES",
    "DEFAULT_MAX_FIELD_BYTES",
    "MIN_PART_ROWS",
    "MIN_PART_BYTES",
    "RawBatch",
    "Partition",
    "Reader",
    "TextReader",
    "CsvReader",
    "JsonlReader",
    "ParquetReader",
    "open_input",
    "split_id_column",
    "resume_identity",
    "detect_format",
    "resolve_files",
    "is_url",
    "is_pattern",
    "compression_of",
    "normalize_encoding",
]
