"""File-level PCA: fit on a feature file, reduce a feature file. Shared by ``bertfeat pca`` and ``extract --pca``.

Both stream: ``fit_pca_file`` feeds chunks to ``PCA.partial_fit`` (memory O(d^2), not
O(n d)) and ``reduce_features_file`` transforms chunk by chunk into a ``FeatureWriter``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import BertfeatError, opt
from ..features import FeatureWriter, feature_fingerprint, feature_format, open_features, read_features
from ..features.registry import an_output, unwritable
from ..features.base import check_float32_range
from .estimator import AUTO_COVARIANCE_MAX_FEATURES, PCA
from ..model.hub import file_sha256  # the one file hash (model files, PCA models); run/ and verify take it from here
from .lineage import UNKNOWN, model_input, reduced_by, reduced_by_this, said, same_pca
from .validation import rows_of as _rows_of

__all__ = ["fit_pca_file", "reduce_features_file", "pca_metadata_entry", "file_sha256", "fit_errstate", "reduced_by",
           "check_pca_input"]


def fit_errstate() -> np.errstate:
    """NumPy's floating-point warnings off while the PCA takes its statistics: an overflow there (float64 products
    of values near 1e154 and more; float32 blocks that overflow float32 are redone in float64) or an invalid value
    ends in the PCA's own error anyway ("products of these float64 features overflow", "features contain NaN or
    inf"), so a warning and its source line would only stand above the one Error line. A new errstate per use (one
    instance cannot be entered twice)."""
    return np.errstate(over="ignore", invalid="ignore")


def fit_pca_file(
    path: str | os.PathLike,
    n_components: int | float | None = None,
    solver: str = "auto",
    whiten: bool = False,
    *,
    accumulate: str = "mixed",
    precision: str | None = None,
    batch_rows: int = 65536,
    random_state: int | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> PCA:
    """Fit a PCA on a feature file and return it, with ``fingerprint_`` and ``source_`` set.

    ``auto`` and ``covariance`` stream the file through ``partial_fit`` (exact; memory does
    not grow with rows). ``svd`` and ``randomized`` need the whole matrix, so they read it
    into memory; so does ``auto`` when d > 4096 (a d x d matrix would be too large), and then fits with
    the exact ``svd`` (never ``randomized``, which only an explicit ``solver="randomized"`` runs: approximate,
    reproducible with an int ``random_state``, fresh each time with None).
    ``accumulate``: how float32 statistics accumulate (PCA's ``accumulate``); ``precision`` is
    its deprecated name (a DeprecationWarning). ``on_batch(rows_so_far)`` is called after each chunk (progress).
    """
    src = open_features(path, float64=True)  # a float64 file fitted as written: rounded, 1e8 + noise was a constant
    before = file_state(src.path)
    pca = PCA(n_components=n_components, solver=solver, whiten=whiten, random_state=random_state,
              accumulate=accumulate, precision=precision)
    pca.set_params(accumulate=pca._check_params(), precision=None)  # precision= warned once; the PCA returned uses accumulate
    in_memory = solver in ("svd", "randomized") or (solver == "auto" and src.dim > AUTO_COVARIANCE_MAX_FEATURES)
    if in_memory:
        ids, X, _ = read_features(path, float64=True)
        _check_rows(src, X.shape[0])
        check_unchanged(src.path, before, "fit")
        with fit_errstate(), _rows_of(src, ids, 0):
            pca._fit(X, pca._check_params(), exact=True)  # auto: svd, the whole spectrum exactly, as pca fit promises
        if on_batch:
            on_batch(X.shape[0])
    else:
        seen = 0
        for ids, X, _ in src.batches(batch_rows, ahead=1):
            with fit_errstate(), _rows_of(src, ids, seen):
                pca.partial_fit(X)
            seen += X.shape[0]
            if on_batch:
                on_batch(seen)
        _check_rows(src, seen)
        check_unchanged(src.path, before, "fit")
        with fit_errstate():
            pca.finalize()
    pca.fingerprint_ = src.fingerprint
    pca.source_ = {
        "features": str(src.path),
        "format": src.fmt,
        "rows": pca.n_samples_,
        "model": src.meta.get("model") or src.meta.get("model_id"),
        "fingerprint": src.fingerprint,
    }
    if src.fingerprint:  # features with provenance: whether a PCA reduced them is known (check_pca_input)
        pca.source_["reduced_by"] = reduced_by(src.meta)
    return pca


def file_state(path: Path) -> tuple:
    """A feature file's (or a directory of parts') names, sizes and modification times, to tell that it changed."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return tuple((f.name, st.st_size, st.st_mtime_ns) for f in files for st in (f.stat(),))


def check_unchanged(path: Path, before: tuple, what: str) -> None:
    """Refuse a feature file written to while it was read (rows appended mid-fit: fitted or not by chance, exit 0)."""
    try:
        now = file_state(path)
    except OSError:
        now = None
    if now != before:
        raise BertfeatError(f"{path} changed while it was read (a process wrote to it): the {what} would mix rows of "
                            "two versions of it", "rerun once nothing writes the file (or on a copy of it)")


def _check_rows(src, n: int) -> None:
    """A fit needs 2 rows: fewer is said of the file (the PCA's own error names no file)."""
    if n < 2:
        raise BertfeatError(f"PCA needs at least 2 rows to fit, got {n} in {src.path}",
                            "fit on a feature file with rows" if n == 0 else "fit on a feature file of at least 2 rows")


def check_pca_input(pca, model_name, features_reduced, features_name: str, fix_raw: str,
                    fix_reduced: str = "reduce them with that first PCA before this one, or apply a PCA fitted on "
                                       "features before any PCA", raw_clause: str | None = None) -> None:
    """Refuse to apply ``pca`` to features in another space than the ones it was fitted on: features a PCA reduced
    (``features_reduced``: reduced_by of their provenance; None: not reduced; ``UNKNOWN``: no provenance) under a
    PCA fitted before any PCA, or the other way round, or reduced by another PCA. Their widths may agree (a PCA
    keeping every component), and their fingerprints do (the model's settings), so nothing else tells them apart;
    ``--force`` does not pass it (the product would mean nothing). ``fix_raw``: how to get features before any PCA;
    ``fix_reduced``: what to do with features before any PCA, ``raw_clause`` how to say they are (default:
    FEATURES_NAME holds features before any PCA). Skipped when either side is unknown."""
    if features_reduced is UNKNOWN:
        return
    if features_reduced is not None and reduced_by_this(pca, features_reduced):
        raise BertfeatError(f"{features_name} holds features this PCA model {model_name} already reduced "
                            f"({said(features_reduced)})", f"apply it to {fix_raw}, or fit a PCA on these features "
                            "(bertfeat pca fit)")
    fitted_on = model_input(pca)
    if fitted_on is UNKNOWN:
        return
    if fitted_on is None and features_reduced is None:
        return
    if fitted_on is not None and features_reduced is not None and same_pca(fitted_on, features_reduced):
        return
    if fitted_on is None:
        raise BertfeatError(f"{features_name} holds features already reduced by a PCA ({said(features_reduced)}), "
                            f"and the PCA model {model_name} was fitted on features before any PCA",
                            f"apply it to {fix_raw}, or fit a PCA on these features (bertfeat pca fit)")
    if features_reduced is None:
        raise BertfeatError(f"the PCA model {model_name} was fitted on features already reduced by a PCA "
                            f"({said(fitted_on)}), and {raw_clause or features_name + ' holds features before any PCA'}",
                            fix_reduced)
    raise BertfeatError(f"{features_name} was reduced by another PCA ({said(features_reduced)}) than the features the "
                        f"PCA model {model_name} was fitted on ({said(fitted_on)})",
                        "apply it to features reduced by that same PCA, or fit a PCA on these features (bertfeat pca fit)")


def save_pca_outputs(pca: PCA, model_path: Path, report_prefix: Path, fingerprint: dict | None, source: dict | None,
                     probe: dict | None = None, saved: Path | None = None) -> dict:
    """Save a fitted PCA and write its report beside it (PREFIX.report.{json,md,png}, with ``probe``'s result if
    given), each file atomically: -> outputs name -> path (``pca_model``, ``pca_report_json``, ...). ``extract --pca``
    and ``pca fit`` both end here. ``saved``: the model as ``pca.save`` already wrote it elsewhere, copied byte for
    byte (a save again would differ in its archive's timestamps, and so in a sha256 taken of ``saved``)."""
    import shutil

    from ..atomic import atomic_output, together
    from .report import write_pca_report

    with together():  # the model and its report appear together (an interrupted run leaves the old ones)
        if saved is None:
            pca.save(model_path, fingerprint=fingerprint, overwrite=True)  # (the run's output rules checked it)
        else:
            with atomic_output(model_path) as tmp:
                shutil.copyfile(saved, tmp)
        report_paths = write_pca_report(pca, report_prefix, source=source, probe=probe)
    return {"pca_model": Path(model_path), **{f"pca_report_{k}": v for k, v in report_paths.items()}}


def fit_pca_to_files(features: str | os.PathLike, out: Path, report_prefix: Path, n_components=None, *,
                     label: str | None = None, probe_rows: int | None = None,
                     **fit_options) -> tuple[PCA, dict, dict, dict | None]:
    """``bertfeat pca fit``: fit a PCA on a feature file (fit_pca_file's options), save it to ``out`` with its report:
    -> (the PCA, outputs name -> path, the report's source entry, its probe entry or None). ``label``: a column of the
    file to probe (bertfeat.pca.probe; its presence checked before the fit), its result in the report's ``probe``
    (``skipped``: why there is none), at most ``probe_rows`` rows."""
    from .probe import DEFAULT_MAX_ROWS, check_label, probe_file

    if label is not None:
        check_label(features, label)
    pca = fit_pca_file(features, n_components, **fit_options)
    source = dict(pca.source_) | {"model_file": str(out)}
    probe = None
    if label is not None:  # a label the probe cannot use (one class, an id) does not undo the fit: the report says why
        try:
            probe = probe_file(pca, features, label, max_rows=probe_rows or DEFAULT_MAX_ROWS)
        except BertfeatError as e:
            probe = {"label": label, "skipped": e.message}
    return pca, save_pca_outputs(pca, out, report_prefix, pca.fingerprint_, source, probe), source, probe


def pca_metadata_entry(pca: PCA, model_path: str | os.PathLike | None = None, forced: list | None = None) -> dict:
    """The ``pca`` entry recorded in a reduced feature file's metadata."""
    model_path = model_path or getattr(pca, "source_path_", None)
    entry: dict[str, Any] = {
        "n_components": pca.n_components_,
        "n_features_in": pca.n_features_in_,
        "n_samples": pca.n_samples_,
        "whiten": bool(pca.whiten),
        "solver": pca.fit_solver_,
        "variance_kept": float(np.sum(pca.explained_variance_ratio_)),
        "fingerprint": pca.fingerprint_,
    }
    own = model_path is not None and Path(model_path) == getattr(pca, "source_path_", None)
    loaded = getattr(pca, "source_sha256_", None) if own else None
    if model_path is not None and (loaded or Path(model_path).is_file()):
        entry["model_path"] = str(model_path)
        entry["model_sha256"] = loaded or file_sha256(model_path)  # the bytes loaded: the file may be replaced since
    if forced:
        entry["forced_fingerprint_mismatch"] = [key for key, _, _ in forced]
    return entry


def reduce_features_file(
    src_path: str | os.PathLike,
    dst_path: str | os.PathLike,
    pca: PCA,
    fmt: str | None = None,
    force: bool = False,
    *,
    batch_rows: int = 65536,
    on_batch: Callable[[int], None] | None = None,
    dtype: str = "float32",
) -> Path:
    """Transform a feature file with a fitted PCA into a new feature file (streaming, atomic).

    The output keeps the ids, the extra columns and the metadata of the source, and adds a
    ``pca`` entry. Features from a different source (fingerprint) are refused unless
    ``force``; a width mismatch is always refused. ``fmt`` defaults to dst's suffix. ``dtype``: the type the
    reduced features are written as (float32, float16; the transform is float32, float64 for a float64 source).
    Returns the output path.
    """
    src = open_features(src_path, float64=True)  # transformed as written (the output is float32)
    before = file_state(src.path)
    given = reduced_by(src.meta) if src.fingerprint else UNKNOWN  # no provenance: not known
    check_pca_input(pca, getattr(pca, "source_path_", None) or "(in memory)", given, str(src.path),
                    "the features before it (the extract output without --pca or --pca-model)")
    d = pca.n_features_in_
    if src.dim != d:
        raise BertfeatError(
            f"{src.path} has {src.dim} features per row but the PCA was fitted on {d}",
            f"transform features from the same model, pooling, layers and {opt('truncate_dim')} the PCA was fitted on",
        )
    src_fp = feature_fingerprint(src.meta)
    diffs = pca.check_fingerprint(src_fp, force=force)
    meta = {k: v for k, v in src.meta.items() if k not in ("layout", "rows")}
    meta["pca"] = pca_metadata_entry(pca, forced=diffs)
    # "command" / "created" stay the extraction's: what made these features (the pca entry says what reduced them)
    if _unchecked(pca, src_fp):
        meta["pca"]["source_checked"] = False
    if src.dtype == "float16":  # the PCA's input was rounded: verify rounds the re-encoded vector the same way
        meta["pca"]["input_dtype"] = "float16"
    rows = src.meta.get("rows")
    dst = Path(dst_path)
    fmt = feature_format(dst, fmt)
    writer: FeatureWriter | None = None
    seen = 0
    try:
        for ids, X, extras in src.batches(batch_rows, ahead=1):
            if writer is None:
                writer = _open_writer(dst, fmt, pca.n_components_, src, meta, ids, extras, dtype)
            with _rows_of(src, ids, seen):
                Y = pca.transform_rows(X, row_offset=seen)
            # written as float32: what it cannot hold is said of this file (then the writer's own check has nothing to do)
            check_float32_range(Y, ids if src.id_name else None, seen, where=f"{src.path} reduced by the PCA: ")
            writer.write(ids, Y.astype(np.float32, copy=False), extras)
            seen += X.shape[0]
            if on_batch:
                on_batch(seen)
        if writer is None:
            writer = _open_writer(dst, fmt, pca.n_components_, src, meta, None, {}, dtype)
        check_unchanged(src.path, before, "reduced file")
        # the extraction's counts (read, rejected, ...) with the rows this file holds; a file without them: the count
        return writer.close({"rows": {**rows, "written": seen} if isinstance(rows, dict) else seen})
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def unchecked_source(features: str | os.PathLike, pca) -> bool:
    """True when reduce_features_file cannot check that ``features`` come from what ``pca`` was fitted on: the model
    records its source's fingerprint but the features carry none (a .npy without its .json, a file from elsewhere)."""
    from ..features import read_feature_metadata

    return _unchecked(pca, feature_fingerprint(read_feature_metadata(features)))


def _unchecked(pca, source_fingerprint: dict | None) -> bool:
    """The model records its source's fingerprint, the features none: nothing to check them against."""
    return bool(pca.fingerprint_) and not source_fingerprint


def _open_writer(dst: Path, fmt: str, k: int, src, meta: dict, ids: Any, extras: dict, dtype: str) -> FeatureWriter:
    """A writer with the source's id and extra columns; unknown types are taken from the first chunk."""
    id_type = src.id_type
    if id_type is None:
        id_type = pa.int64() if ids is None or isinstance(ids, np.ndarray) else pa.string()
    types = {name: (t if t is not None else (extras[name].type if name in extras else pa.string())) for name, t in src.extra_columns.items()}
    for name, t, why in unwritable(fmt, {src.id_name or "row": id_type, **types}):  # as extract's plan.check_output_columns
        what = "id column" if name == (src.id_name or "row") else "column"
        raise BertfeatError(f"{src.path}: its {what} '{name}' holds {t} values, which {an_output(fmt)} cannot "
                            f"hold ({why})", "write a Parquet output (-o NAME.parquet)")
    return FeatureWriter(
        dst,
        fmt,
        dim=k,
        id_name=src.id_name or "row",
        id_type=id_type,
        metadata=meta,
        wide=src.wide if fmt == "parquet" else False,
        extra_columns=types,
        dtype=dtype,
    )
