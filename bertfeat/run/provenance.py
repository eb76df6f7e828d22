"""The provenance every feature file carries (``provenance``): model, weights, settings, GEMM path, the tokenizers
library's version, input (with its files' identity: size, modification time), command, counts. Both engines write
it; ``bertfeat verify`` reads it back.
"""

from __future__ import annotations

import os
import shlex
import sys
import time

from ..checks import DEFAULT_MAX_FIELD_BYTES
from ..version import __version__
from .manifest import input_record
from .summary import ExtractSummary, gemm_record


def provenance(encoder, spec, fingerprint: dict, plan, summary: ExtractSummary) -> dict:
    """The metadata every feature file carries: model, weights, settings, GEMM path, input, command, counts."""
    from ..model.hub import model_files_digest
    from ..model.tokenize import library_version

    source = plan.reader
    return {
        "bertfeat_version": __version__,
        "model": encoder.model_id,
        "model_source": encoder.location.source,
        "weights_sha256": encoder.weights_sha256,
        "model_files": model_files_digest(encoder.location.path),  # config, tokenizer, modules: verify compares them
        "fingerprint": fingerprint,
        "precision": encoder.precision,
        "gemm": gemm_record(encoder),
        "tokenizers": library_version(),  # another version may split texts otherwise (the cache key has it too)
        "pooling": spec.pooling,
        "layers": list(spec.layers),
        "layer_agg": spec.layer_agg,
        "normalize": spec.normalize,
        "dense": list(spec.dense),
        "prompt": spec.prompt,
        "prompt_name": spec.prompt_name,
        "pipeline": encoder.describe(spec),
        "max_length": spec.max_length,
        "long_text": spec.long_text,
        "stride": spec.stride if spec.long_text.startswith("chunk") else None,
        "input": source.path,
        # a local input: where it is, and whether its path was a glob (verify reads a file's name as a file only)
        **({"input_abspath": os.path.abspath(source.path), "input_glob": source.glob}
           if source.path != "-" and "://" not in source.path else {}),
        **({"input_identity": input_record(plan.input_identity)} if plan.input_identity is not None else {}),
        "input_format": source.fmt,
        **({"encoding": source.encoding} if source.fmt != "parquet" else {}),
        **({"delimiter": source.delimiter} if getattr(source, "delimiter", None) else {}),
        "text_column": source.text_column,
        "pair_column": source.pair_column,
        "id_column": source.id_column,
        **({"id_as_text": True} if source.id_as_text else {}),  # id_column="NAME:str": verify reads the ids so
        **({"keep": list(plan.keep)} if plan.keep else {}), **({"keep_as": plan.keep_as} if plan.keep_as else {}),
        "on_bad_row": plan.on_bad_row,
        **({"max_bad_rows": plan.max_bad_rows.text} if plan.max_bad_rows is not None else {}),
        **({"max_field_bytes": plan.max_field_bytes} if plan.max_field_bytes != DEFAULT_MAX_FIELD_BYTES else {}),
        "command": plan.options.command or " ".join(shlex.quote(a) for a in sys.argv),
        "rows": {"read": summary.rows_read, "written": summary.rows_written, "rejected": summary.rows_rejected,
                 "truncated": summary.rows_truncated, "chunked": summary.rows_chunked,
                 "encoded": summary.rows_encoded, "reused": summary.rows_reused},
        "cache": None if plan.cache is None else str(plan.cache),
        "tokens": {"total": summary.tokens, "dropped": summary.tokens_dropped},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pca": None,
        "dtype": plan.dtype,
    }
