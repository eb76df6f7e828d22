"""``bertfeat.extract``: the public, keyword-only entry point of an extract job, on either engine.

Python code calls this function::

    import bertfeat
    s = bertfeat.extract("reviews.csv", "reviews.features.parquet", pca=64)
    s = bertfeat.extract("data/*.parquet", "/shared/out/f.parquet", engine="dask", scheduler="tcp://host:8786")

It builds an ``ExtractOptions`` (options.py) of its keywords; the CLI's ``extract`` command builds the same of its
flags; both run it with ``extract_options``.

Errors name the Python parameters (``chunk_rows=0``); the CLI shows the same errors with its flags
(``--chunk-rows 0``): every option is declared once, in options.py (``ExtractOptions``), and checked once, in
plan.make_plan.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Mapping, Sequence

from ..checks import DEFAULT_MAX_FIELD_BYTES
from ..errors import BertfeatError, interrupt_in
from .summary import ExtractSummary
from .options import DEFAULT_BLOCKSIZE, DEFAULT_CHUNK_ROWS, MAIN_GUARD_FIX, OPTIONS, ExtractOptions, check_switch
from .plan import make_plan


def extract(input: str | os.PathLike, output: str | os.PathLike | None = None, *,
            text_column: str | None = None, pair_column: str | None = None, id_column: str | None = None,
            input_format: str | None = None, encoding: str = "utf-8", delimiter: str | None = None,
            model: str | os.PathLike | None = None, pooling: str | None = None, layers: str | None = None,
            layer_agg: str = "mean", normalize: bool | None = None, prompt: str | None = None,
            prompt_name: str | None = None, truncate_dim: int | None = None, max_length: int | None = None,
            max_batch_tokens: int | None = None, long_text: str = "truncate", stride: int | None = None,
            precision: Literal["fp32", "bf16", "int8", "auto"] = "fp32",
            pca: int | float | str | None = None, pca_model: str | os.PathLike | None = None,
            format: str | None = None, wide: bool = False,
            on_bad_row: Literal["error", "skip"] | None = None, max_bad_rows: int | str | None = None,
            resume: bool = False, overwrite: bool = False,
            chunk_rows: int = DEFAULT_CHUNK_ROWS, threads: int | None = None,
            engine: Literal["local", "dask"] = "local", scheduler: str | None = None, workers: int | None = None,
            blocksize: int | str | None = DEFAULT_BLOCKSIZE, client=None, progress=None, quiet: bool = True,
            encoder_options: Mapping[str, Any] | None = None, command: str | None = None,
            keep: str | Sequence[str] | Mapping[str, str | None] | None = None, cache: str | os.PathLike | bool | None = None,
            label: str | None = None, dtype: Literal["float32", "float16"] = "float32", estimate: bool | int = False,
            max_field_bytes: int | str = DEFAULT_MAX_FIELD_BYTES):
    """Extract sentence features of ``input`` into ``output`` (default: INPUT.features.parquet beside it).

    By default the model's own embedding (its Pooling, the modules after it and its default prompt);
    ``pooling`` / ``layers`` choose plain pooled states instead, ``normalize`` overrides normalization,
    ``prompt`` / ``prompt_name`` pick a prompt, ``precision`` the GEMMs' precision (docs/precision.md).
    ``truncate_dim``: keep the first N features of each vector, after normalization, as sentence-transformers'
    truncate_dim (None: the model's own truncate_dim for its embedding, else all); with ``normalize=True`` the kept
    features are normalized again (unit vectors); ``pca`` then reduces what is kept.
    ``overwrite``: replace an existing output (else refused). ``pca``: a number of components (64), a
    variance fraction (0.95) or "all"; ``pca_model``: apply a fitted PCA (a .npz of ``pca fit`` or ``extract --pca``,
    its fingerprint checked against these features' settings) instead of fitting one. ``engine="dask"``: on a Dask
    cluster (``scheduler`` address or ``client``, which excludes both; else a local cluster of ``workers`` processes), the
    output being a directory of part files; ``blocksize`` caps a partition's input bytes (the Dask engine's
    alone, as ``scheduler`` and ``workers``: refused with the local engine; keep it at 64 KiB or more, docs/dask.md).
    ``encoder_options``: further ``Encoder(...)`` keywords, on every worker too; a key that is also a parameter
    here (``precision``, ``max_batch_tokens``, ...) stands in for it when that parameter is left at its default,
    and giving both with different values is an error.
    ``keep``: input columns copied to the output beside the features (a label, a split ...): ``"label"``,
    ``"label,split"`` (read as a CSV line: ``'"a,b",label'`` quotes a name holding a comma), ``["label", "split"]``
    (each item one name, exactly) or ``{"label": "int", "split": None}``. A CSV / TSV value is kept as the text it is
    written as, unless its type is given (``"label:int"``; int, float, bool or str) or every value of the column's
    first rows reads back as exactly its text (plain integers: int64; numbers such as 2.5: double); Parquet and JSONL
    columns keep their types (docs/cli.md, "Kept columns"). Rows rejected keep them in the rejects file too.
    ``label``: with ``pca``, a column of class labels (kept in the output, as ``keep``) whose linear probe the PCA report
    adds: how well the first 1, 2, 4, ... k components predict it (bertfeat.pca.probe; ``summary.probe``).
    ``on_bad_row``: "error" (the default) stops at the first bad row (a malformed line, an empty or undecodable text, ...)
    naming its file, row and column; "skip" leaves it out and writes it to the rejects file (row, id, reason).
    ``max_bad_rows``: skip bad rows (on_bad_row "skip" is then the default) up to a limit, a number of rows (10) or a
    share of the rows read ("0.5%"); past it the run stops, writes nothing, and raises rejects.TooManyBadRows (the
    CLI's exit code 3). A count is checked as each chunk finishes, a share once every row is read.
    ``cache``: a directory of encoder vectors kept across runs (docs/cache.md): each row is looked up by its text and
    every setting that changes a vector, and only the misses are encoded; None (the default) takes the BERTFEAT_CACHE
    environment variable when it is set, False uses no cache. Identical rows of one run are encoded once either way.
    ``progress``: an object with the ``progress.NullProgress`` methods; else ``quiet=False`` shows the CLI's progress
    on stderr (a rich bar in a terminal, log lines otherwise), ``quiet=True`` (the default here) none. Returns the run's ExtractSummary
    (counts, timings, ``outputs``: name -> path).

    ``dtype``: the type the features are written as: "float32" (the default) or "float16", half the size (Parquet
    ``halffloat``, npy '<f2', CSV the shortest text); computed in float32 all the same (the cache, a resume's parts and
    the PCA's fit), only the written values are rounded to nearest. A value beyond float16's range (|x| > 65504) is
    refused, naming its row. Readers give float16 files back as float32.

    ``max_field_bytes``: the largest text, pair, id or kept value read (bytes, or a size such as "16MiB"; default 4 MiB):
    a larger one makes its row a bad row (code ``field-too-large``) and is skipped as it is read, so no reader ever holds
    more of one value; memory stays bounded by the settings, however long a field of the input is (docs/cli.md).

    ``estimate``: run nothing, write nothing: measure what the run would take (rows, tokens, time on this machine,
    disk, memory) on a sample of ``estimate`` rows (True: estimate.DEFAULT_SAMPLE) and return an estimate.Estimate.
    An existing output is no obstacle to an estimate.

    Every option is checked before anything is written (plan.make_plan), the same way on both engines.
    """
    given = dict(locals())  # the parameters, before any other name is bound: every option by its declared name
    return extract_options(ExtractOptions(**{name: given[name] for name in OPTIONS}), progress=progress, quiet=quiet,
                           client=client)


def extract_options(options: ExtractOptions, *, progress=None, quiet: bool = True, client=None):
    """``bertfeat.extract`` of an ``ExtractOptions`` (the CLI builds one from its flags): the plan (every option
    checked), then the estimate or the run. ``progress``, ``quiet``, ``client``: as ``bertfeat.extract``'s."""
    quiet = _check_progress(progress, quiet)
    _check_not_in_spawned_import()
    try:
        plan = make_plan(options, client)
        if options.estimate is not False:
            from .estimate import DEFAULT_SAMPLE, estimate_plan

            return estimate_plan(plan, DEFAULT_SAMPLE if options.estimate is True else int(options.estimate))
        if progress is None and not quiet:
            from ..console import err_console
            from .progress import make_progress

            progress = make_progress(err_console, False, "extract (dask)" if options.engine == "dask" else "extract")
        return run(plan, progress, client)
    except BertfeatError as e:  # the PCA's errors name its n_components: extract's parameter is pca (CLI: --pca)
        e.rename(EXTRACT_NAMES)
        from ..cache.store import CacheError, RunStoreError, from_environment

        if isinstance(e, CacheError) and not isinstance(e, RunStoreError) and from_environment(options.cache):
            e.named_by_environment()  # the user gave no cache option: the variable is where its path came from
        raise


#: options named as the PCA (or another layer) names them -> extract's parameter of that meaning
EXTRACT_NAMES = {"n_components": "pca"}


def _check_progress(progress, quiet) -> bool:
    """``progress`` has the methods the engines call (parts is optional), ``quiet`` is a switch (None: its default,
    True): checked before the plan, so a wrong one stops nothing half-way (a partial run left behind). -> quiet."""
    quiet = check_switch("quiet", quiet, default=True)
    if isinstance(progress, bool):  # tqdm's and many libraries' switch: here that is quiet's
        raise BertfeatError(f"progress={progress!r} is a switch, and progress takes an object that shows progress",
                            f"to {'show' if progress else 'hide'} the progress bar on stderr, pass "
                            f"quiet={not progress} and leave progress out")
    missing = [m for m in ("start", "advance", "note", "stop") if progress is not None and not callable(getattr(progress, m, None))]
    if missing:
        raise BertfeatError(f"progress={progress!r} has no {', '.join(missing)} method",
                            "give an object with the methods of bertfeat.run.progress.NullProgress (start, advance, note, "
                            "stop; parts for the Dask engine), or leave progress out")
    return quiet


def _check_not_in_spawned_import() -> None:
    """A script that calls extract at its top level without a ``__main__`` guard is imported again by each worker
    process of the local Dask cluster it starts (as ``__mp_main__``): each ran the extract again, met the output's
    lock, and the run failed as 'RuntimeError: Nanny failed to start' (found by the combinations audit)."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            raise BertfeatError("bertfeat.extract was called as a new process imported the script that runs it (a "
                                "local Dask cluster's worker, a multiprocessing process)", MAIN_GUARD_FIX)
        frame = frame.f_back


def _carry_note(interrupt: BaseException) -> None:
    """A second Ctrl-C raised while the first one's handling ran (releasing the output lock, a signal redelivered)
    takes the first one's note (what the run kept, or that the outputs are complete): the line said "Interrupted."."""
    seen, e = set(), interrupt.__context__
    while e is not None and id(e) not in seen and getattr(interrupt, "resume_note", None) is None:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt) and getattr(e, "resume_note", None) is not None:
            interrupt.resume_note = e.resume_note
            interrupt.resume_note_python = getattr(e, "resume_note_python", e.resume_note)
        e = e.__context__


def run(plan, progress=None, client=None) -> ExtractSummary:
    """Execute a plan on its engine, holding its outputs' lock (outlock.py) for the whole run: a second run on the
    same output is refused at once, naming this one. The output rules are checked again under the lock (another
    run may have finished between the plan and the lock)."""
    from .outlock import output_lock

    try:
        with output_lock(*plan.layout.locked(), prefixes=plan.layout.locked_prefixes()):
            plan.check_outputs()
            if plan.options.engine == "dask":
                from . import dask as dask_engine

                return dask_engine.run(plan, progress, client=client)
            from . import local as local_engine

            return local_engine.run(plan, progress)
    except BaseException as e:
        interrupt = interrupt_in(e)  # a Ctrl-C in a kernel before an engine handled it (the model's load): itself
        if interrupt is None:
            raise
        _carry_note(interrupt)
        note = getattr(interrupt, "resume_note_python", None)  # what the run kept, as the exception's message for Python
        if note and not interrupt.args:  # callers (the CLI's one line after Ctrl-C prints it too)
            interrupt.args = (note,)
        if interrupt is e:
            raise
        raise interrupt from None
