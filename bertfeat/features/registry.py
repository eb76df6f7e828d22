"""The one table of feature-file formats, and the rule that picks a file's format.

``FILE_FORMATS`` maps a format's name to its ``FeatureFile`` class; the writer, the readers and
``FORMATS`` all go through it. A new format is a ``FeatureFile`` subclass in its own module,
added here.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BertfeatError
from .base import FeatureFile
from .delimited import CsvFile
from .npy import NpyFile
from .parquet import ParquetFile

#: Format name -> the class that writes and reads it (the order is the order error messages list them in).
FILE_FORMATS: dict[str, type[FeatureFile]] = {cls.name: cls for cls in (ParquetFile, NpyFile, CsvFile)}
FORMATS = tuple(FILE_FORMATS)
#: The format of a path whose suffix names none.
DEFAULT_FORMAT = ParquetFile.name
_BY_SUFFIX = {cls.suffix: name for name, cls in FILE_FORMATS.items()}


def feature_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The feature-file format: ``fmt`` if given, else from the suffix (parquet when unknown)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise BertfeatError(f"unknown feature format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    return _BY_SUFFIX.get(suffix, DEFAULT_FORMAT)


def file_format(path: str | os.PathLike, fmt: str | None = None) -> type[FeatureFile]:
    """The ``FeatureFile`` class of ``path`` (``fmt`` if given, else from the suffix)."""
    return FILE_FORMATS[feature_format(path, fmt)]


def unwritable(fmt: str, columns: dict) -> list[tuple[str, object, str]]:
    """The columns (name -> Arrow type) a feature file of format ``fmt`` cannot hold and give back as their types:
    (name, type, why) each (``FeatureFile.column_problem``)."""
    check = FILE_FORMATS[fmt].column_problem
    return [(name, t, why) for name, t in columns.items() if (why := check(t)) is not None]


def an_output(fmt: str) -> str:
    """How a message names an output of the format ``fmt``: 'a CSV output', 'a .npy output'."""
    return f"a {'.npy' if fmt == 'npy' else fmt.upper()} output"
