"""``bertfeat.extract``: the public, keyword-only entry point of an extract job, on either engine.

The CLI's ``extract`` command calls this function; so does Python code::

    import bertfeat
    s = bertfeat.extract("reviews.csv", "reviews.features.parquet", pca=64)
    s = bertfeat.extract("data/*.parquet", "/shared/out/f.parquet", engine="dask", scheduler="tcp://host:8786")

Errors raised here name the Python parameters (``chunk_rows``, ``engine``); the CLI checks its
flags first, with the flag names.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Mapping

from .errors import BertfeatError
from .pipeline import DEFAULT_CHUNK_ROWS, ExtractOptions, ExtractSummary

DEFAULT_BLOCKSIZE = "8MiB"


def extract(input: str | os.PathLike, output: str | os.PathLike | None = None, *,
            text_column: str | None = None, pair_column: str | None = None, id_column: str | None = None,
            input_format: str | None = None, encoding: str = "utf-8", delimiter: str | None = None,
            model: str | os.PathLike | None = None, pooling: str | None = None, layers: str | None = None,
            layer_agg: str = "mean", normalize: bool | None = None, prompt: str | None = None,
            prompt_name: str | None = None, max_length: int | None = None,
            max_batch_tokens: int | None = None, long_text: str = "truncate", stride: int | None = None,
            precision: Literal["fp32", "bf16", "auto"] = "fp32",
            pca: int | float | str | None = None, format: str | None = None, wide: bool = False,
            on_bad_row: Literal["error", "skip"] = "error", resume: bool = False, overwrite: bool = False,
            chunk_rows: int = DEFAULT_CHUNK_ROWS, threads: int | None = None,
            engine: Literal["local", "dask"] = "local", scheduler: str | None = None, workers: int | None = None,
            blocksize: int | str | None = DEFAULT_BLOCKSIZE, client=None, progress=None,
            encoder_options: Mapping[str, Any] | None = None, command: str | None = None) -> ExtractSummary:
    """Extract sentence features of ``input`` into ``output`` (default: INPUT.features.parquet beside it).

    By default the model's own embedding (its Pooling, Dense and Normalize modules and default prompt);
    ``pooling`` / ``layers`` choose plain pooled states instead, ``normalize`` overrides normalization,
    ``prompt`` / ``prompt_name`` pick a prompt, ``precision="bf16"`` the bf16 GEMMs (docs/precision.md).
    ``overwrite``: replace an existing output (else refused). ``pca``: a number of components (64), a
    variance fraction (0.95) or "all". ``engine="dask"``: on a Dask
    cluster (``scheduler`` address or ``client``; else a local cluster of ``workers`` processes), the
    output being a directory of part files; ``blocksize`` caps a partition's input bytes.
    ``encoder_options``: further ``Encoder(...)`` keywords (e.g. ``{"precision": ...}``), on every worker too.
    ``progress``: an object with the ``NullProgress`` methods. Returns the run's ExtractSummary
    (counts, timings, ``outputs``: name -> path).
    """
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise BertfeatError(f"chunk_rows={chunk_rows!r} is out of range", "give an integer of 1 or more")
    if engine not in ("local", "dask"):
        raise BertfeatError(f"engine={engine!r} is unknown", "choose 'local' or 'dask'")
    if engine == "local" and (scheduler or workers or client is not None):
        raise BertfeatError("scheduler, workers and client need engine='dask'", "pass engine='dask'")
    if isinstance(pca, bool):
        raise BertfeatError(f"pca={pca!r} is not a size", "give a number of components (64) or a variance fraction (0.95)")
    opts = ExtractOptions(
        input=os.fspath(input), output=None if output is None else os.fspath(output), text_column=text_column,
        pair_column=pair_column, id_column=id_column, input_format=input_format, encoding=encoding,
        delimiter=delimiter, model=None if model is None else os.fspath(model), pooling=pooling, layers=layers,
        layer_agg=layer_agg, normalize=normalize, prompt=prompt, prompt_name=prompt_name, max_length=max_length,
        max_batch_tokens=max_batch_tokens, long_text=long_text, stride=stride, precision=precision,
        pca=None if pca is None else str(pca), format=format, wide=wide, on_bad_row=on_bad_row,
        resume=resume, overwrite=overwrite, chunk_rows=chunk_rows, threads=threads, command=command,
        encoder_options=dict(encoder_options or {}))
    if engine == "dask":
        from .dask_engine import DaskOptions, extract_dask

        return extract_dask(opts, DaskOptions(scheduler, workers, blocksize), progress, client=client)
    from .pipeline import extract as extract_local

    return extract_local(opts, progress)
