"""Feature files: the output of ``bertfeat extract`` and the input of ``bertfeat pca``.

Three formats, all float32 features of width d, one row per input row: ``parquet`` (the
default; ``parquet.py``), ``npy`` (a plain array, ids in ``<stem>.ids.csv``; ``npy.py``) and
``csv`` (``delimited.py``); the npy and csv provenance goes to ``<path>.json``.

The provenance dict is the caller's metadata plus ``rows`` (the row count, unless the
caller set it) and ``layout`` (format, id column and type, d, wide, extra columns, rows).

Writing streams with bounded memory and is atomic: everything goes to temporary files
``.<name>.tmp-<pid>`` in the destination directory, renamed into place with
``os.replace`` only by ``close()`` (sidecars first, the main file last; ``bertfeat.atomic``).
Reading streams too (``iter_features``).

The package: ``base.py`` (the ``FeatureFile`` protocol a format implements, ``FeatureSource``,
shared helpers), one module per format, ``registry.py`` (the table of formats: the only place
a format is chosen), ``writer.py`` (``FeatureWriter``) and ``reader.py`` (``open_features`` and
friends); ``arrayfile.py`` checks a ``.npy`` / ``.npz`` / ``.parquet`` before it is read. This module only
re-exports their public names.
"""

from __future__ import annotations

from ..atomic import atomic_output, temp_path_for
from .base import (
    EMBEDDING_COLUMN,
    FINGERPRINT_KEYS,
    METADATA_KEY,
    FeatureFile,
    FeatureSource,
    feature_fingerprint,
    provenance_path,
)
from .npy import ids_sidecar_path
from .reader import feature_files, iter_features, open_features, read_feature_metadata, read_features
from .registry import FILE_FORMATS, FORMATS, feature_format
from .writer import FeatureWriter

__all__ = [
    "EMBEDDING_COLUMN",
    "FINGERPRINT_KEYS",
    "METADATA_KEY",
    "FORMATS",
    "FeatureWriter",
    "FeatureSource",
    "open_features",
    "feature_files",
    "iter_features",
    "read_features",
    "read_feature_metadata",
    "feature_format",
    "feature_fingerprint",
    "ids_sidecar_path",
    "provenance_path",
    "temp_path_for",
    "atomic_output",
    "FILE_FORMATS",
    "FeatureFile",
]
# also re-exported (module attributes before the split): METADATA_KEY, EMBEDDING_COLUMN, FINGERPRINT_KEYS
