"""Which format an input is (from the option, else its extension) and the reader for it: ``open_input``."""

from __future__ import annotations

import os
from pathlib import Path

from ..checks import PARQUET_SUFFIXES
from ..errors import InputError, opt
from .base import DEFAULT_MAX_FIELD_BYTES, Reader, normalize_encoding
from .delimited import CsvReader
from .jsonl import JsonlReader
from .parquet import ParquetReader
from .paths import UNREAD_COMPRESSION, compression_of, is_pattern, is_url, refuse_special_file, resolve_files

FORMATS = ("csv", "tsv", "parquet", "jsonl")
_EXT = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", **dict.fromkeys(PARQUET_SUFFIXES, "parquet"),
        ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}  # (a folder's listing: checks.is_parquet_name)


def detect_format(path: str, input_format: str | None) -> str:
    """The input's format: ``input_format`` when given, else from the extension (a directory: Parquet). A named
    pipe, device or socket is refused here, before anything opens it (``paths.refuse_special_file``)."""
    if input_format is not None and input_format not in FORMATS:  # (an empty one was the extension's choice, unsaid)
        raise InputError(f"unknown input format '{input_format}'", f"choose one of {', '.join(FORMATS)}")
    if path == "-":
        if input_format:
            return input_format
        raise InputError("reading standard input needs " + opt("input_format"), f"add {opt('input_format', 'csv|tsv|jsonl|parquet')}")
    fmt = input_format or _format_of(path)
    if not is_url(path):
        refuse_special_file(path, fmt)
    if fmt is None and not is_url(path) and not is_pattern(path) and not os.path.lexists(path):
        resolve_files(path, "csv")  # no such file: said first (the format's fix cannot help a misspelled path)
    if fmt is None:
        _refuse_unread_compression(path)
        import shlex

        # a .txt is mostly one text per line, without a header: read as CSV its first text became the column's name
        lines = (f"; a file of one text per line has no header line: give it one, e.g. (echo text; cat "
                 f"{shlex.quote(path)}) | bertfeat extract - {opt('input_format', 'tsv')} ... (TSV: a comma or a quote "
                 "in a text is part of it)")
        raise InputError(f"{path}: cannot tell the format from the extension",
                         f"add {opt('input_format', 'csv|tsv|parquet|jsonl')}" + (lines if not is_url(path) else ""))
    return fmt


def _refuse_unread_compression(path: str) -> None:
    """A file compressed in a way bertfeat does not read (``x.csv.lz4``): said so, not "cannot tell the format"
    with a fix that cats its compressed bytes."""
    p = Path(path.split("::", 1)[0])
    suffixes = [s.lower() for s in p.suffixes]
    if not suffixes or suffixes[-1] not in UNREAD_COMPRESSION:
        return
    import shlex

    kind, cat = UNREAD_COMPRESSION[suffixes[-1]]
    inner = _EXT.get(suffixes[-2]) if len(suffixes) > 1 else None
    pipe = f"{cat} {shlex.quote(path)} | bertfeat extract - {opt('input_format', inner or 'csv|tsv|jsonl')} ..."
    raise InputError(f"{path}: {kind}-compressed files are not read (.gz, .bz2, .zst and .xz are)",
                     f"decompress it into the pipe ({pipe}), or compress it as .gz, .zst or .xz")


def _format_of(path: str) -> str | None:
    """The format a path's extension names (a compression suffix skipped); a local directory or a URL without
    an extension: Parquet; else None. A chained fsspec URL (``zip://in.csv::data.zip``) is named by its first part,
    the file read, not the container."""
    url = is_url(path)
    p = Path((path.split("::", 1)[0] if url else path).rstrip("/"))
    if not url and p.is_dir():
        return "parquet"
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and compression_of(p) is not None:
        suffixes = suffixes[:-1]
    fmt = _EXT.get(suffixes[-1]) if suffixes else None
    if fmt is None and url and not suffixes:
        return "parquet"  # a URL without an extension: a directory of Parquet files (checked when listed)
    return fmt


def open_input(path: str, fmt: str | None = None, text_column: str | None = None, pair_column: str | None = None,
               id_column: str | None = None, encoding: str = "utf-8", batch_rows: int = 8192,
               delimiter: str | None = None, keep: tuple[str, ...] | list[str] = (), label: str | None = None,
               keep_as: dict[str, str] | None = None, max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
               id_as_text: bool = False) -> "Reader":
    """The reader for ``path`` (its format from the extension unless ``fmt``), columns checked and chosen (``keep``:
    the columns copied to the output, their types decided, or given by ``keep_as``: column -> int, float, bool or str;
    ``label``: the one of them that is the label; ``max_field_bytes``: a text, pair, id or kept value larger than this
    is a bad row, never held whole; ``id_as_text``: every id is the text the input wrote, ``split_id_column``)."""
    fmt = detect_format(path, fmt)
    first = path.split("::", 1)[0]  # the file read, of a chained URL
    if fmt == "parquet" and compression_of(first) is not None:  # Parquet is read by its footer, not as a stream
        raise InputError(f"{path}: a Parquet file compressed as a whole ({Path(first).suffix}) cannot be read",
                         "decompress it first (Parquet compresses its own pages, so the .parquet itself is as small)")
    refuse_unused_options(path, fmt, encoding, delimiter)
    cls = ParquetReader if fmt == "parquet" else JsonlReader if fmt == "jsonl" else CsvReader
    return cls(path, fmt, text_column=text_column, pair_column=pair_column, id_column=id_column, encoding=encoding,
               batch_rows=batch_rows, delimiter=delimiter, keep=keep, label=label, keep_as=keep_as,
               max_field_bytes=max_field_bytes, id_as_text=id_as_text)


def split_id_column(text: str | None) -> tuple[str | None, bool]:
    """The ``id_column`` option -> (the column's name, whether every id is read as the text the input wrote): a name
    ending in ``:str`` asks for that (``id:str``), so that ids of mixed kinds (``7`` and ``"07"`` in JSONL), integers
    past int64 and ids written ``1e2`` or ``2.50`` read back as written. Only the last ``:str`` is taken: a column whose
    own name ends so is given as ``NAME:str:str``."""
    if text is not None and text.endswith(":str") and len(text) > 4:
        return text[:-4], True
    return text, False


def options_read(fmt: str | None, encoding: str | None, delimiter: str | None) -> tuple[str | None, str | None]:
    """(encoding, delimiter) as the format reads them: Parquet UTF-8 and no delimiter, JSONL no delimiter. What a run
    records, and how a record an earlier bertfeat made (which kept the options these formats ignored) is read again."""
    return ("utf-8" if fmt == "parquet" else encoding), (delimiter if fmt not in ("parquet", "jsonl") else None)


def refuse_unused_options(path: str, fmt: str, encoding: str, delimiter: str | None) -> None:
    """An option the format does not read, refused rather than ignored: a delimiter for JSONL or Parquet, an encoding
    other than UTF-8 for Parquet (its strings are UTF-8 by the format's definition; a binary column in another
    encoding is refused row by row, saying so)."""
    name = "Parquet" if fmt == "parquet" else "JSONL"
    if delimiter is not None and fmt in ("parquet", "jsonl"):
        raise InputError(f"{opt('delimiter', delimiter)} does not apply to {path}, which is read as {name} (a delimiter "
                         "splits CSV / TSV lines)", f"leave {opt('delimiter')} out, or pass "
                         f"{opt('input_format', 'csv')} if the file is CSV")
    if fmt == "parquet" and normalize_encoding(encoding) != "utf-8":
        raise InputError(f"{opt('encoding', encoding)} does not apply to {path}, which is read as Parquet (Parquet "
                         "stores text as UTF-8)", f"leave {opt('encoding')} out; a binary column in another encoding: "
                         "decode it to UTF-8 strings when writing the Parquet file")
