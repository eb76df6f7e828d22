"""A linear probe: how well the first k PCA components predict a label, so a choice of k has evidence behind it.

Shapes: n rows, d features, k components, c classes, F folds.

The classifier is scikit-learn's ``RidgeClassifier(alpha)`` written out: one-vs-rest targets in {-1, +1}, X and
the targets centred on the training rows, ``(X^T X + alpha I) W = X^T Y`` solved in float64, the class of the
largest score. It is a closed form, so one Gram matrix per fold serves every k (its leading k x k block), and a
probe of 20,000 rows takes well under a second. The folds are stratified: each class's rows, shuffled with
``seed``, are dealt to the folds in turn. ``tests/pca/test_probe.py`` checks the accuracies against scikit-learn's
RidgeClassifier on the same folds.

``probe_file`` reads a feature file (or a Dask output directory of parts) with a label column (``extract --keep
label``): either the features the PCA was fitted on (d columns; transformed here, and the probe also runs on all d
as the no-PCA reference) or ones it reduced (its k columns, which are the components in order). At most
``max_rows`` rows, a uniform sample drawn with ``seed`` while the file streams.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np

from ..errors import BertfeatError, opt
from ..features.base import feature_fingerprint
from .lineage import fitted_on_these
from .validation import nonfinite_error, rows_of

__all__ = ["DEFAULT_ALPHA", "DEFAULT_FOLDS", "DEFAULT_MAX_ROWS", "default_ks", "stratified_folds", "ridge_accuracy",
           "check_label", "label_codes", "majority_accuracy", "probe_file"]

DEFAULT_ALPHA = 1.0
DEFAULT_FOLDS = 5
DEFAULT_MAX_ROWS = 20_000


def default_ks(k: int) -> list[int]:
    """1, 2, 4, ... below k, then k itself."""
    ks, p = [], 1
    while p < k:
        ks.append(p)
        p *= 2
    return ks + [k]


def stratified_folds(codes: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """The fold (0 .. folds-1) of each row (n,): each class's rows shuffled, then dealt to the folds in turn."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(codes), dtype=np.int64)
    start = 0
    for c in range(int(codes.max()) + 1 if len(codes) else 0):
        rows = np.flatnonzero(codes == c)
        rows = rows[rng.permutation(len(rows))]
        fold[rows] = (start + np.arange(len(rows))) % folds  # a class continues where the last one stopped
        start = (start + len(rows)) % folds
    return fold


def _fit_predict(G: np.ndarray, XtY: np.ndarray, mean: np.ndarray, ymean: np.ndarray, Xte: np.ndarray,
                 alpha: float) -> np.ndarray:
    """Class codes (m,) of the test rows Xte (m, k) from the training rows' centred Gram G (k, k), X^T Y (k, c),
    their mean (k,) and target mean (c,); one target column (two classes): class 1 where its score is > 0."""
    W = np.linalg.solve(G + alpha * np.eye(G.shape[0]), XtY)  # (k, c)
    scores = (Xte - mean) @ W + ymean  # (m, c)
    return (scores[:, 0] > 0).astype(np.int64) if scores.shape[1] == 1 else np.argmax(scores, axis=1)


def ridge_accuracy(Z: np.ndarray, codes: np.ndarray, ks: Sequence[int], fold: np.ndarray,
                   alpha: float = DEFAULT_ALPHA) -> dict[int, list[float]]:
    """Accuracy per fold of a ridge classifier on the first k columns of Z (n, K), for each k in ks.

    ``codes`` (n,) are class codes 0 .. c-1, ``fold`` (n,) each row's test fold. Returns k -> [accuracy per fold].
    """
    Z = np.asarray(Z, dtype=np.float64)
    c = int(codes.max()) + 1
    Y = -np.ones((len(codes), c))
    Y[np.arange(len(codes)), codes] = 1.0  # (n, c) one-vs-rest targets in {-1, +1}
    if c == 2:
        Y = Y[:, 1:]  # one column, as scikit-learn's for two classes: class 1 where its score is > 0
    out: dict[int, list[float]] = {k: [] for k in ks}
    kmax = max(ks)
    for f in np.unique(fold):
        train, test = fold != f, fold == f
        X = Z[train, :kmax]
        mean, ymean = X.mean(axis=0), Y[train].mean(axis=0)
        Xc = X - mean
        G = Xc.T @ Xc  # (kmax, kmax)
        XtY = Xc.T @ (Y[train] - ymean)  # (kmax, c)
        for k in ks:
            pred = _fit_predict(G[:k, :k], XtY[:k], mean[:k], ymean, Z[test, :k], alpha)
            out[k].append(float(np.mean(pred == codes[test])))
    return out


def label_codes(labels: list, label: str, where: str, folds: int) -> tuple[np.ndarray, list]:
    """The labelled rows' values -> (class codes (n,) 0 .. c-1, the classes in order), or a BertfeatError saying why
    the column cannot be probed (not class names or numbers, too few rows for the folds, one class, an id)."""
    odd = next((v for v in labels if not isinstance(v, (str, int, float, bool, Decimal))), None)  # Parquet decimal
    if odd is not None:
        raise BertfeatError(f"the label column {label!r} of {where} holds {type(odd).__name__} values ({str(odd)[:40]})",
                            "probe a column of class names or numbers")
    n = len(labels)
    if n < 2 * folds:
        raise BertfeatError(f"the label column {label!r} of {where} has {n} labelled rows, too few for {folds} folds",
                            f"probe at least {2 * folds} labelled rows")
    classes = sorted(set(labels), key=lambda v: (str(type(v)), v))
    if len(classes) < 2:
        raise BertfeatError(f"the label column {label!r} of {where} has {len(classes)} class(es) in {n:,} labelled rows",
                            "a probe needs at least two classes")
    if len(classes) > max(2, n // 2):
        raise BertfeatError(f"the label column {label!r} of {where} has {len(classes):,} distinct values in {n:,} rows",
                            "a probe needs class labels (a few rows per class), not a continuous target or an id")
    code_of = {v: i for i, v in enumerate(classes)}
    return np.array([code_of[v] for v in labels], dtype=np.int64), classes


def majority_accuracy(codes: np.ndarray, fold: np.ndarray, c: int) -> list[float]:
    """Per fold: the accuracy of predicting the training folds' most frequent class."""
    return [float(np.mean(codes[fold == f] == np.argmax(np.bincount(codes[fold != f], minlength=c))))
            for f in range(int(fold.max()) + 1)]


#: a label's texts that are a NaN written out (a CSV's, a JSONL NaN kept as text: label:str), as pandas reads them
NAN_TEXTS = ("NaN", "nan")


def has_label(v) -> bool:
    """Whether a row's label value names a class: not None (a null), a NaN (the float, or its text ``NaN`` / ``nan``)
    or an empty string, the rows the probe leaves out and counts."""
    return not (v is None or v != v or v == "" or (isinstance(v, str) and v in NAN_TEXTS))


def _sample(sources: list, label: str, max_rows: int, seed: int) -> tuple[np.ndarray, list, int]:
    """A uniform sample of at most max_rows (X (m, d), labels) from streamed feature files, and the rows without
    a label (skipped)."""
    rng = np.random.default_rng(seed)
    keys = np.zeros(0)
    X = np.zeros((0, sources[0].dim), dtype=np.float32)
    labels: list = []
    unlabelled = 0
    for src, first, (ids, Xb, extras) in _chunks(sources):
        values = extras[label].to_pylist()
        ok = np.array([has_label(v) for v in values], dtype=bool)
        bad = ~np.isfinite(Xb) & ok[:, None]  # a row the probe uses: refused as the file's row (a reduced file's rows
        if bad.any():  # are used as they are, and a sample's row numbers are not the file's)
            with rows_of(src, ids, first):
                raise nonfinite_error(np.where(bad, Xb, 0), first, "probing")
        unlabelled += int((~ok).sum())
        kb = rng.random(len(values))[ok]
        keys = np.concatenate([keys, kb])
        X = np.concatenate([X, Xb[ok]])
        labels += [v for v, good in zip(values, ok) if good]
        if len(keys) > max_rows:  # keep the max_rows smallest keys: a uniform sample of every row so far
            keep = np.sort(np.argpartition(keys, max_rows)[:max_rows])
            keys, X, labels = keys[keep], X[keep], [labels[i] for i in keep]
    return X, labels, unlabelled


def _chunks(sources: list):
    """(source, its first row, (ids, X, extras)) of each chunk of the sources, in order."""
    for src in sources:
        first = 0
        for chunk in src.batches(65536):
            yield src, first, chunk
            first += chunk[1].shape[0]


def _sources(features: str | os.PathLike) -> list:
    """The opened feature file, or the part files of a Dask output directory, in order (features.feature_files)."""
    from ..features import feature_files, open_features

    return [open_features(p) for p in feature_files(features)]


def check_label(features: str | os.PathLike, label: str) -> list:
    """The opened feature file(s) (features.FeatureSource, see _sources) if they have the column ``label``, else a
    BertfeatError: before a fit, so that a wrong name fails at once."""
    sources = _sources(features)
    src = sources[0]
    if label not in src.extra_columns:
        kept = ", ".join(src.extra_columns) or "none"
        if label == getattr(src, "id_name", None):  # extract refuses --keep of its --id-column: never advise it
            raise BertfeatError(f"{src.path}: {label!r} is its id column, which names each row and cannot be the label",
                                f"pass {opt('label')} with one of its columns beside the features ({kept}), or extract again with "
                                f"{opt('keep', 'COLUMN')} to keep a label column beside the features")
        if _holds_features(src, label):  # extract refuses --keep of an output column: never advise it either
            raise BertfeatError(f"{src.path}: {label!r} holds the features, which cannot be the label",
                                f"pass {opt('label')} with one of its columns beside the features ({kept}), or extract "
                                f"again with {opt('keep', 'COLUMN')} to keep a label column beside the features")
        raise BertfeatError(f"{src.path} has no column {label!r} (its columns beside the features: {kept})",
                            f"extract with {opt('keep', label)} to keep the label beside the features, or name one of "
                            "its columns")
    return sources


def _holds_features(src, label: str) -> bool:
    """Is ``label`` a column of the features themselves: a Parquet file's list column (``embedding``), or one of a wide
    file's ``f0`` ... ``f{d-1}``?"""
    if label in (src.columns or []):
        return True
    return bool(src.wide) and re.fullmatch(r"f(0|[1-9][0-9]*)", label) is not None and int(label[1:]) < src.dim


def probe_file(pca, features: str | os.PathLike, label: str, *, ks: Sequence[int] | None = None,
               max_rows: int = DEFAULT_MAX_ROWS, folds: int = DEFAULT_FOLDS, alpha: float = DEFAULT_ALPHA,
               seed: int = 0) -> dict:
    """Cross-validated accuracy of a ridge classifier on the first k components, for the label column ``label`` of
    the feature file ``features`` (see the module docstring). Returns the report's ``probe`` entry."""
    path = Path(features)
    sources = check_label(path, label)
    src = sources[0]
    d, k = int(pca.n_features_in_), int(pca.n_components_)
    entry = src.meta.get("pca") or {}
    # a reduced file's "pca" entry says so; a file without provenance is judged by its width alone (docs/cli.md)
    reduced = src.dim == k and (entry.get("n_components") == k if entry else not src.fingerprint)
    if reduced and d == k:  # every component of features an earlier PCA reduced: the file may be the model's input
        reduced = not fitted_on_these(pca, src.meta)
    if not reduced and d != k and src.dim == k:  # as wide as the components, yet its provenance names no PCA
        raise BertfeatError(f"{path} has {k} features per row, as many as the PCA's components, but its provenance "
                            "records no PCA that reduced it",
                            f"probe the features the PCA was fitted on ({d} per row), or the file pca transform (or "
                            f"extract with {opt('pca')} / {opt('pca_model')}) wrote")
    if not reduced and src.dim != d:
        raise BertfeatError(f"{path} has {src.dim} features per row; the PCA takes {d} (or its {k} components)",
                            "probe the features the PCA was fitted on, or the ones it reduced")
    # a reduced file's "pca" entry: pca transform's has n_samples and variance_kept, extract's explained_variance
    kept = float(np.sum(pca.explained_variance_ratio_))
    theirs = float(entry.get("variance_kept", entry.get("explained_variance", -1.0)))
    if reduced and entry and (entry.get("n_samples", pca.n_samples_) != pca.n_samples_ or abs(theirs - kept) > 1e-9):
        rows = f"; {entry['n_samples']} rows fitted, this one {pca.n_samples_}" if "n_samples" in entry else ""
        raise BertfeatError(f"{path} was reduced by another PCA model (variance kept {theirs:.6g}, this one's "
                            f"{kept:.6g}{rows})",
                            "probe the features this model was fitted on, or the ones it reduced")
    pca.check_fingerprint(feature_fingerprint(src.meta),
                          fix="probe features extracted with the model and settings the PCA was fitted on")
    if int(max_rows) < folds * 2:
        raise BertfeatError(f"{opt('probe_rows', max_rows)} is too few for {folds} folds", f"pass at least {folds * 2}")
    X, labels, unlabelled = _sample(sources, label, int(max_rows), seed)
    codes, classes = label_codes(labels, label, str(path), folds)
    n = len(labels)
    fold = stratified_folds(codes, folds, seed)
    Z = X if reduced else pca.transform_rows(X)  # (n, k)
    ks = sorted(set(int(x) for x in (ks or default_ks(k)) if 1 <= int(x) <= k)) or [k]
    acc = ridge_accuracy(Z, codes, ks, fold, alpha)
    rows = [{"components": kk, "accuracy": float(np.mean(a)), "std": float(np.std(a))} for kk, a in acc.items()]
    full = None
    if not reduced:  # the reference: all d features, no PCA
        a = ridge_accuracy(X, codes, [d], fold, alpha)[d]
        full = {"features": d, "accuracy": float(np.mean(a)), "std": float(np.std(a))}
    counts = np.bincount(codes, minlength=len(classes))
    majority = majority_accuracy(codes, fold, len(classes))
    return {
        "label": label,
        "features_file": str(path),
        "input": "components" if reduced else "features",
        "rows": n,
        "rows_unlabelled": unlabelled,
        "classes": len(classes),
        "class_counts": {str(v): int(c) for v, c in zip(classes, counts)},
        "classifier": f"ridge (one-vs-rest least squares, alpha={alpha:g}), {folds}-fold stratified cross-validation",
        "folds": folds,
        "seed": seed,
        "majority_baseline": float(np.mean(majority)),
        "accuracy": rows,
        "all_features": full,
    }
