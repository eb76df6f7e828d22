"""What an extract job is, whichever engine schedules it: the local engine (pipeline.py) and the Dask engine
(dask_engine.py) both drive these functions, so they check options, record and compare manifests, resume,
count, fit and write the PCA by one set of rules.

A unit of work (a local chunk, a Dask partition) yields its part, its counts (``table_counts``) and, with
``--pca``, its PCA statistics; the job adds the counts with ``ExtractSummary.add`` and merges the statistics
in ``finish_pca``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import __version__
from .diffs import dict_differences
from .errors import BertfeatError, ResumeError, opt

BAD_ROW_POLICIES = ("error", "skip")


def check_job_options(opts) -> int | float | str | None:
    """The options both engines check the same way (before any work); returns the parsed --pca size."""
    if opts.on_bad_row not in BAD_ROW_POLICIES:
        shown = opt("on_bad_row", opts.on_bad_row, cli=f"'{opts.on_bad_row}'")
        raise BertfeatError(f"unknown {shown}", "choose error or skip")
    if opts.threads is not None and opts.threads < 1:
        raise BertfeatError(f"{opt('threads', opts.threads)} is out of range", "give 1 or more (default: all cores)")
    from .readers import is_url

    if is_url(opts.input) and not opts.output:  # no "beside the input" for a URL
        raise BertfeatError(f"a URL input needs {opt('output')} OUTPUT", "give the output path (with the Dask engine, a directory every worker can write)")
    return parse_pca(opts.pca)


ALL_COMPONENTS = "all"  # --pca 1.0 / all: keep every component (PCA(n_components=None))


def parse_pca(value: str | None):
    """--pca: None (no PCA), a count, a fraction, or ALL_COMPONENTS; the same parser as `pca fit -n` (specs.py)."""
    if value is None or value == "":
        return None
    from .specs import parse_pca_spec

    n = parse_pca_spec(value, "pca")
    return ALL_COMPONENTS if n is None else n


def pca_n_components(n):
    """parse_pca's value -> PCA's n_components (None keeps every component)."""
    return None if n == ALL_COMPONENTS else n


def job_manifest(source, opts, fingerprint: dict, **engine_keys) -> dict:
    """What a run must share with the interrupted run it resumes: version, the features' fingerprint, the
    input files (size, mtime), the options that shape the output; plus each engine's own keys."""
    return {
        "bertfeat_version": __version__, **fingerprint, "input": source.identity(),
        "text_column": source.text_column, "pair_column": opts.pair_column, "id_column": opts.id_column,
        "encoding": source.encoding, "on_bad_row": opts.on_bad_row, "chunk_rows": opts.chunk_rows,
        "pca": opts.pca, "wide": opts.wide,
        **({"encoder_options": opts.encoder_options} if opts.encoder_options else {}), **engine_keys,
    }


def check_resume(old_manifest: dict, manifest: dict) -> None:
    """Refuse to resume a run whose settings or input differ from the interrupted run's (one rule, one message)."""
    diffs = manifest_differences(old_manifest, manifest)
    if diffs:
        raise ResumeError("cannot resume: the settings or the input differ from the interrupted run (" + "; ".join(diffs) + ")",
                          f"rerun with {opt('overwrite', True)} instead of {opt('resume', True)} to start over, or use the original settings")


def read_manifest(path: Path) -> dict:
    """A manifest file, or {} when it is unreadable (then every key differs and resuming is refused)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


_LABELS = {"bertfeat_version": "bertfeat version", "model_id": "model", "weights_sha256": "model weights sha256",
           "layers": "layers", "layer_agg": "layer aggregation", "normalize": "normalize", "max_length": "max length",
           "long_text": "long text", "stride": "stride", "pooling": "pooling", "text_column": "text column",
           "pair_column": "pair column", "id_column": "id column", "encoding": "encoding", "on_bad_row": "on bad row",
           "chunk_rows": "chunk rows", "pca": "pca", "format": "output format", "wide": "wide"}


def manifest_differences(old: dict, new: dict) -> list[str]:
    """What differs between the manifest of the interrupted run and this run's, in words."""
    out = []
    for k, a, b in dict_differences(old, new, keys=list(new), missing=None, default=str):
        if k == "input":
            out += _input_differences(a or {}, b or {})
        else:
            out.append(f"{_LABELS.get(k, k)}: {a!r} -> {b!r}")
    return out


def _input_differences(a: dict, b: dict) -> list[str]:
    if a.get("path") != b.get("path") or a.get("format") != b.get("format"):
        return [f"input: {a.get('path')!r} -> {b.get('path')!r}"]
    fa = {f["path"]: f for f in a.get("files", [])}
    fb = {f["path"]: f for f in b.get("files", [])}
    out = []
    for path in sorted(set(fa) | set(fb)):
        x, y = fa.get(path), fb.get(path)
        if x is None:
            out.append(f"input file added: {path}")
        elif y is None:
            out.append(f"input file removed: {path}")
        elif x["size"] != y["size"]:
            out.append(f"input file changed: {path} (size {x['size']} -> {y['size']} bytes)")
        elif (x.get("mtime_ns"), x.get("stamp")) != (y.get("mtime_ns"), y.get("stamp")):  # a URL's files carry a stamp
            out.append(f"input file changed: {path} (modified since the interrupted run)")
    return out or ["input changed"]


COUNT_KEYS = ("rows_written", "rows_truncated", "rows_chunked", "tokens", "tokens_dropped")


def table_counts(t, max_length: int) -> dict:
    """A feature table's counts, on both engines: rows written, truncated and chunked, tokens and dropped tokens."""
    n_tok = t.column("n_tokens").to_numpy()
    trunc = t.column("truncated").to_numpy(zero_copy_only=False)
    return {"rows_written": t.num_rows, "rows_truncated": int(trunc.sum()),
            "rows_chunked": int((t.column("n_chunks").to_numpy() > 1).sum()), "tokens": int(n_tok.sum()),
            "tokens_dropped": int(np.maximum(n_tok[trunc] - max_length, 0).sum())}


def feature_matrix(t) -> np.ndarray:
    """The embedding column of a feature table -> (m, D) float32."""
    col = t.column("embedding").combine_chunks()
    D = col.type.list_size
    return col.values.to_numpy(zero_copy_only=False).reshape(-1, D)


def new_pca(n_components):
    """The streaming PCA a job accumulates (exact: float64 n, sum(x), X^T X), unfitted."""
    from .pca import PCA

    return PCA(n_components=pca_n_components(n_components), solver="covariance", accumulate="float64")


_BLAS = None


def accumulate_pca(pca, X: np.ndarray) -> None:
    """Add a unit's features to the job's PCA statistics, with BLAS on one thread: a multi-threaded BLAS call
    between batches leaves OpenBLAS's threads spinning (~0.1 s each time) on the cores the next batch needs
    (measured: 2.4 % slower extract --pca, 12 chunks of 256 rows, 2 cores, before this limit)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    with _BLAS.limit(limits=1, user_api="blas"):
        pca.partial_fit(X)


def finish_pca(pca, rows_written: int, out: Path, fingerprint: dict) -> tuple[dict, dict]:
    """Fit the accumulated PCA and write its model and report beside OUTPUT (OUTPUT.pca.npz,
    OUTPUT.pca.report.{json,md,png}): -> (outputs name -> path, the provenance's "pca" entry)."""
    from .report import write_pca_report

    if rows_written < 2:
        raise BertfeatError(f"{opt('pca')} needs at least 2 feature rows, this run has {rows_written}", f"drop {opt('pca')} or add rows")
    pca.finalize()
    stem = out.with_suffix("")
    pca_path = stem.with_name(stem.name + ".pca.npz")
    pca.save(pca_path, fingerprint=fingerprint)
    report_paths = write_pca_report(pca, stem.with_name(stem.name + ".pca"), source=fingerprint)
    outputs = {"pca_model": pca_path, **{f"pca_report_{k}": v for k, v in report_paths.items()}}
    meta = {"n_components": int(pca.n_components_), "model_file": pca_path.name,
            "explained_variance": float(np.sum(pca.explained_variance_ratio_))}
    return outputs, meta
