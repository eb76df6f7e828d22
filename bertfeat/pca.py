"""Principal component analysis in NumPy: exact, streaming, mergeable, saved without pickle.

Shape legend (used in every docstring and comment below)::

    n  rows (samples)            d  features (columns of X)
    k  kept components           r  rank bound = min(n, d)
    l  k + oversamples (randomized solver only)

What is computed
----------------
``PCA`` follows scikit-learn's estimator conventions (``fit`` returns ``self``; fitted
attributes end in ``_``) and its numbers: ``explained_variance_`` uses ddof=1, a float
``n_components`` in (0, 1) keeps the smallest k whose cumulative ratio exceeds it, and
signs follow scikit-learn >= 1.5 (the largest-|loading| entry of each component is
positive). Results match ``sklearn.decomposition.PCA(svd_solver="full")``.

Solvers
-------
``svd``         ``numpy.linalg.svd`` of the centred (n, d) data, in float64.
``covariance``  float64 sufficient statistics (n, a shift vector, the sum of shifted
                rows (d,) and the shifted scatter matrix (d, d)), then ``eigh`` of the
                (d, d) covariance. Memory is O(d^2), independent of n; this is what
                ``partial_fit`` and ``merge`` use.
``randomized``  Halko et al. randomized SVD with power iterations (``random_state``),
                for very wide in-memory data. Only the top k variances are known.
``auto``        ``covariance`` when the data are tall (n >= d) and d <= 4096, otherwise
                ``svd`` when it is small or most components are wanted, else
                ``randomized``.

Streaming
---------
``partial_fit`` only accumulates statistics (one ``syrk`` per block of ``BLOCK_ROWS``
rows, in float32 for float32 input, added to float64 totals: see ``_chunk_stats``). The decomposition runs lazily, the first time a fitted
attribute is read after new data arrived (or on ``finalize()``); for d = 768 that is
one 768 x 768 ``eigh``, well under a second. Shifting every row by the first chunk's
mean keeps the accumulation exact for data far from the origin (mean 1e4, variance 1).

Model files
-----------
``save`` writes an ``.npz`` (float64 arrays plus one JSON string with settings, scalars
and the feature fingerprint) atomically; ``PCA.load`` reads it with
``allow_pickle=False``.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BertfeatError
from .estimator import Estimator

__all__ = ["PCA", "NotFittedError", "MODEL_FORMAT", "MODEL_FORMAT_VERSION", "BLOCK_ROWS"]

SOLVERS = ("auto", "svd", "covariance", "randomized")
PRECISIONS = ("mixed", "float64")
MODEL_FORMAT = "bertfeat-pca"
MODEL_FORMAT_VERSION = 1
#: Rows per block inside ``partial_fit`` (bounds the temporary copy to 25-50 MB at d=768).
BLOCK_ROWS = 8192
#: ``auto`` uses the covariance solver up to this many features (a d x d float64 matrix).
AUTO_COVARIANCE_MAX_FEATURES = 4096


class NotFittedError(BertfeatError, AttributeError):
    """A fitted attribute was read before ``fit``/``partial_fit``/``load``.

    Also an ``AttributeError``, so ``hasattr(pca, "components_")`` is simply False.
    """


# ----------------------------------------------------------------------------------------
# small pure helpers
# ----------------------------------------------------------------------------------------


def _as_2d_float(X: Any) -> np.ndarray:
    """Return X as a 2-D float32 or float64 array (other numeric types become float64).

    Accepts NumPy arrays, pandas / polars DataFrames and anything ``np.asarray`` takes. Object
    arrays of numbers are converted (a non-number in them raises NumPy's TypeError, as in
    scikit-learn); sparse matrices and complex numbers are refused.
    """
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise BertfeatError("sparse input is not supported by bertfeat's PCA", "pass a dense array, e.g. X.toarray()")
    X = np.asarray(X)
    if np.iscomplexobj(X):
        raise BertfeatError("Complex data not supported", "pass real-valued features")
    if X.dtype == object:
        X = X.astype(np.float64)
    if X.ndim != 2:
        raise BertfeatError(
            f"expected a 2-D array (n_samples, n_features), got shape {X.shape}",
            "pass a matrix with one row per sample. Reshape your data: X.reshape(1, -1) for a single sample, "
            "X.reshape(-1, 1) for a single feature",
        )
    if X.dtype not in (np.float32, np.float64):
        if not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_) or np.iscomplexobj(X):
            raise BertfeatError(
                f"expected real numbers, got an array of dtype {X.dtype}",
                "pass a float32 or float64 feature matrix",
            )
        X = X.astype(np.float64)
    if X.shape[1] == 0:
        raise BertfeatError(f"0 feature(s) (shape={X.shape}) while a minimum of 1 is required", "pass at least one feature column")
    return X


def _nonfinite_error(X: np.ndarray, row_offset: int, action: str) -> BertfeatError:
    """Build the NaN/inf error, naming the first bad row and column (0-based)."""
    bad = ~np.isfinite(X)
    count = int(bad.sum())
    if count == 0:
        return BertfeatError(
            "features are too large: the statistics overflowed to inf",
            f"rescale the features before {action}",
        )
    row, col = (int(i) for i in np.argwhere(bad)[0])
    return BertfeatError(
        f"features contain NaN or inf: {count} value(s), first at row {row + row_offset}, "
        f"column {col} ({X[row, col]})",
        f"remove or repair those rows before {action}",
    )


def _check_n_components_spec(spec: Any) -> None:
    """Validate the *type* of n_components (range checks need n and d)."""
    if spec is None:
        return
    if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
        raise BertfeatError(
            f"n_components={spec!r} is not a number",
            "pass a whole number of components (e.g. 100), a fraction in (0, 1) (e.g. 0.95), or None",
        )
    if isinstance(spec, numbers.Integral):
        if spec < 1:
            raise BertfeatError(
                f"n_components={spec} is not positive",
                "pass a whole number of components >= 1 (e.g. 100) or a fraction in (0, 1) (e.g. 0.95)",
            )
        return
    if not 0.0 < float(spec) < 1.0:
        raise BertfeatError(
            f"n_components={spec!r} is outside (0, 1): a float n_components is the fraction of variance to keep",
            "pass a fraction strictly between 0 and 1 (e.g. 0.95) or a whole number of components (e.g. 100)",
        )


def _check_max_components(spec: Any, n: int, d: int) -> None:
    """Raise if an integer n_components exceeds min(n, d)."""
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool) and spec > min(n, d):
        raise BertfeatError(
            f"n_components={spec} is larger than min(n_samples, n_features) = min({n}, {d}) = {min(n, d)}",
            f"choose n_components <= {min(n, d)}, or a fraction such as 0.95 to keep 95% of the variance",
        )


def _n_components_from_spec(spec: Any, ratio: np.ndarray, r: int) -> int:
    """Number of components k for spec (None | int | fraction), given the ratio spectrum."""
    if spec is None:
        return r
    if isinstance(spec, numbers.Integral):
        return int(spec)
    cumsum = np.cumsum(ratio)
    k = int(np.searchsorted(cumsum, float(spec), side="right")) + 1
    return min(k, r)


def _components_needed(ratio: np.ndarray, fraction: float) -> int | None:
    """Smallest k whose cumulative ratio exceeds ``fraction`` (the k ``n_components=fraction`` picks).

    None when the known part of the spectrum never exceeds it (randomized solver).
    """
    cumsum = np.cumsum(ratio)
    k = int(np.searchsorted(cumsum, fraction, side="right")) + 1
    return k if k <= len(ratio) else None


def flip_signs(Vt: np.ndarray) -> np.ndarray:
    """scikit-learn >= 1.5 sign rule: make the largest-|loading| entry of each row (k, d) positive."""
    idx = np.argmax(np.abs(Vt), axis=1)
    signs = np.sign(Vt[np.arange(Vt.shape[0]), idx])
    signs[signs == 0] = 1.0
    return Vt * signs[:, None]


def choose_solver(solver: str, n: int, d: int, spec: Any) -> str:
    """Resolve ``auto`` to a concrete solver for an (n, d) matrix and n_components ``spec``."""
    if solver != "auto":
        return solver
    if n >= d and d <= AUTO_COVARIANCE_MAX_FEATURES:
        return "covariance"
    r = min(n, d)
    if r <= 1000 or not isinstance(spec, numbers.Integral) or spec >= 0.8 * r:
        return "svd"
    return "randomized"


def randomized_svd(
    A: np.ndarray, k: int, rng: np.random.Generator, n_oversamples: int = 10, n_iter: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k singular values (k,) and right singular vectors (k, d) of A (n, d) by Halko et al.

    A range finder with ``l = k + n_oversamples`` Gaussian probes and ``n_iter`` QR-normalised
    power iterations (7 when k < 0.1 r, else 4, as scikit-learn does).
    """
    n, d = A.shape
    r = min(n, d)
    if n_iter is None:
        n_iter = 7 if k < 0.1 * r else 4
    l_ = min(k + n_oversamples, r)
    Q, _ = np.linalg.qr(A @ rng.standard_normal((d, l_)))  # (n, l)
    for _ in range(n_iter):
        Z, _ = np.linalg.qr(A.T @ Q)  # (d, l)
        Q, _ = np.linalg.qr(A @ Z)  # (n, l)
    B = Q.T @ A  # (l, d)
    _, S, Vt = np.linalg.svd(B, full_matrices=False)
    return S[:k], Vt[:k]


@contextlib.contextmanager
def _atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; move it into place on success, delete it on failure."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _fmt_value(v: Any) -> str:
    return "<missing>" if v is _MISSING else json.dumps(v, default=_json_default, sort_keys=True)


_MISSING = object()


def fingerprint_differences(expected: Mapping | None, actual: Mapping | None) -> list[tuple[str, Any, Any]]:
    """(key, expected value, actual value) for every key whose value differs (missing counts)."""
    expected, actual = dict(expected or {}), dict(actual or {})
    diffs = []
    for key in sorted(set(expected) | set(actual)):
        a, b = expected.get(key, _MISSING), actual.get(key, _MISSING)
        if a is _MISSING or b is _MISSING or _fmt_value(a) != _fmt_value(b):
            diffs.append((key, a, b))
    return diffs


# ----------------------------------------------------------------------------------------
# fitted state
# ----------------------------------------------------------------------------------------


@dataclass
class _Stats:
    """Float64 sufficient statistics of the rows seen so far (shifted by ``shift``)."""

    n: int
    shift: np.ndarray  # (d,)  mean of the first chunk's first BLOCK_ROWS rows
    sum: np.ndarray  # (d,)  sum of (x - shift)
    sq: np.ndarray  # (d, d) sum of (x - shift)^T (x - shift)

    def mean(self) -> np.ndarray:
        return self.shift + self.sum / self.n

    def scatter(self) -> np.ndarray:
        """Centred scatter matrix (d, d): sum of (x - mean)^T (x - mean)."""
        return self.sq - np.outer(self.sum, self.sum) / self.n

    def copy(self) -> _Stats:
        return _Stats(self.n, self.shift.copy(), self.sum.copy(), self.sq.copy())


@dataclass
class _Result:
    """The decomposition: every array float64."""

    mean: np.ndarray  # (d,)
    components: np.ndarray  # (k, d)
    spectrum: np.ndarray  # (r,) all variances for exact solvers, (k,) for randomized
    total_variance: float
    n_samples: int
    n_components: int
    noise_variance: float
    solver: str


def _result_from_spectrum(
    mean: np.ndarray, Vt: np.ndarray, spectrum: np.ndarray, n: int, d: int, spec: Any, solver: str
) -> _Result:
    """Pick k from the full spectrum (r,) and its sign-flipped eigenvectors Vt (r, d)."""
    r = min(n, d)
    total = float(spectrum.sum())
    ratio = spectrum / total if total > 0 else np.zeros_like(spectrum)
    k = _n_components_from_spec(spec, ratio, r)
    noise = float(spectrum[k:r].mean()) if k < r else 0.0
    return _Result(mean, np.ascontiguousarray(Vt[:k]), spectrum, total, n, k, noise, solver)


#: Mixed precision needs float32 values with most of their 24 bits below the spread: every
#: column's |shift| within this many standard deviations (else float64 products are used).
MIXED_MAX_OFFSET = 128.0


def _float32_products_ok(st: _Stats, X: np.ndarray) -> bool:
    """Whether float32 block products stay accurate for these rows (``precision="mixed"``).

    Float32 values far from the shift relative to their spread carry few significant bits
    (mean 1e4 and std 1: 10 bits), and sums of their squares then round with a bias, so the
    variances drift by ~1e-6. Columns with |shift| <= MIXED_MAX_OFFSET * std, or constant
    columns, are safe. The spread comes from the statistics so far, or from the first block.
    """
    if st.n >= 2:
        var = (st.sq.diagonal() - st.sum**2 / st.n) / st.n  # (d,)
    else:
        var = X[:1024].var(axis=0, dtype=np.float64)  # (d,) a sample is enough for this test
    std = np.sqrt(np.clip(var, 0.0, None))
    return bool(np.all((np.abs(st.shift) <= MIXED_MAX_OFFSET * std) | (std == 0)))


def _chunk_stats(X: np.ndarray, shift: np.ndarray, row_offset: int, mixed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Sum (d,) and scatter (d, d) of the shifted rows X - shift, both float64.

    Blocks of ``BLOCK_ROWS`` rows. Float64 input, or ``mixed=False``: every block is shifted
    and multiplied in float64. Float32 input with ``mixed`` (and a float32-representable
    ``shift``, which ``partial_fit`` arranges): the block is shifted
    in float32 (rounding relative to x - shift, not to x) and multiplied with a float32 ``syrk``, twice
    as fast; each block's product is added to the float64 total, so float32 rounding stays
    within one block of at most ``BLOCK_ROWS`` rows (ratios within ~1e-9 of a float64 SVD,
    see benchmarks/PCA_RESULTS.md). The sum is always accumulated in float64.
    """
    m, d = X.shape
    shift32 = shift.astype(np.float32)
    in_f32 = mixed and np.array_equal(shift32, shift)  # the caller passes mixed only for float32 X
    buf = np.empty((min(m, BLOCK_ROWS), d), dtype=np.float32 if in_f32 else np.float64)  # (b, d) reused
    total_sum, total_sq = np.zeros(d), np.zeros((d, d))
    for start in range(0, m, BLOCK_ROWS):
        block = X[start : start + BLOCK_ROWS]
        Xs = np.subtract(block, shift32 if in_f32 else shift, out=buf[: block.shape[0]])  # (b, d)
        s = Xs.sum(axis=0, dtype=np.float64)
        if not np.isfinite(s).all():
            raise _nonfinite_error(block, row_offset + start, "fitting")
        total_sq += Xs.T @ Xs  # symmetric rank-b update (BLAS syrk), float32 or float64
        total_sum += s
    return total_sum, total_sq


def _decompose_stats(stats: _Stats, spec: Any) -> _Result:
    """Covariance solver: eigh of the (d, d) covariance built from float64 statistics."""
    n, d = stats.n, stats.shift.shape[0]
    C = stats.scatter() / (n - 1)
    C = (C + C.T) * 0.5
    w, V = np.linalg.eigh(C)  # ascending
    r = min(n, d)
    w = np.clip(w[::-1][:r], 0.0, None)
    Vt = flip_signs(np.ascontiguousarray(V[:, ::-1][:, :r].T))
    return _result_from_spectrum(stats.mean(), Vt, w, n, d, spec, "covariance")


# ----------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------


class PCA(Estimator):
    """Principal component analysis with exact streaming fits (see the module docstring).

    Parameters
    ----------
    n_components : None, int or float in (0, 1)
        None keeps all r = min(n, d) components; an int keeps that many; a fraction keeps
        the smallest k whose cumulative explained-variance ratio exceeds it.
    solver : "auto", "svd", "covariance" or "randomized"
        How ``fit`` decomposes in-memory data. ``partial_fit`` always accumulates
        covariance statistics, and their decomposition is always ``eigh``.
    whiten : bool
        Scale transformed outputs to unit variance (divide by sqrt(explained_variance_)).
    random_state : None, int or numpy Generator
        Seed of the randomized solver.
    precision : "mixed" or "float64"
        How the covariance statistics multiply float32 input (float64 input is always
        multiplied in float64). ``mixed``: float32 products of blocks of ``BLOCK_ROWS`` rows,
        added to float64 totals - twice as fast, with ratios within ~1e-8 and components
        within ~1e-6 of a float64 fit (closer than scikit-learn's own float32 SVD). Data far
        from its mean relative to its spread (|mean| > 128 std in some column) falls back
        to float64 products: their float32 values carry too few bits.
        ``float64``: every block is converted and multiplied in float64, so re-chunking or
        splitting the rows across workers changes the result only by float64 rounding
        (``bertfeat extract --pca`` uses this, locally and on Dask).

    Fitted attributes (float64 whatever the input dtype; ``transform`` output follows the input)
    ----------------------------------------------------------------------------------------
    Set at the end of ``fit``, of ``finalize`` (after ``partial_fit`` / ``merge``) and of ``load``;
    reading one before raises ``NotFittedError`` (also an ``AttributeError`` and a ``ValueError``).
    components_ (k, d), explained_variance_ (k,), explained_variance_ratio_ (k,),
    singular_values_ (k,), mean_ (d,), n_samples_, n_features_in_, n_components_,
    noise_variance_, feature_names_in_ (fitted on a DataFrame with string column names only),
    all_explained_variance_ (r,) (the whole spectrum; only the top k for ``randomized``),
    total_variance_, fit_solver_, and the provenance of the features it was fitted on:
    fingerprint_ (model, weights and settings that made them; None for plain arrays) and
    source_ (the feature file and its rows; None for plain arrays), set by ``fit_pca_file``,
    ``bertfeat pca fit`` and ``load``.

    scikit-learn: a transformer for pipelines, ``clone``, grid search and
    ``check_estimator``, with ``get_feature_names_out`` (pca0, pca1, ...) and ``set_output``,
    without importing scikit-learn (see bertfeat/estimator.py).
    """

    _FITTED = ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_",
               "n_samples_", "n_features_in_", "n_components_", "noise_variance_", "all_explained_variance_",
               "total_variance_", "fit_solver_", "fingerprint_", "source_", "_n_features_out")

    def __init__(
        self,
        n_components: int | float | None = None,
        *,
        solver: str = "auto",
        whiten: bool = False,
        random_state: int | np.random.Generator | None = None,
        precision: str = "mixed",
    ):
        self.n_components = n_components
        self.solver = solver
        self.whiten = whiten
        self.random_state = random_state
        self.precision = precision

    def __getattr__(self, name: str):
        # only reached when normal lookup fails: a fitted attribute before fit / after new partial_fit data
        if name in PCA._FITTED:
            stale = self.__dict__.get("_stats") is not None
            raise NotFittedError(
                f"this PCA is not fitted yet ({name} is set by fit)" if not stale else
                f"this PCA has partial_fit statistics that are not decomposed yet ({name} is set by finalize)",
                "call fit(X), or finalize() after partial_fit / merge, or load a saved model with PCA.load(path)",
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _reset(self) -> None:
        """Forget every fitted attribute and statistic (parameters stay)."""
        for name in PCA._FITTED + ("feature_names_in_",):
            self.__dict__.pop(name, None)
        self._stats: _Stats | None = None
        self._result_: _Result | None = None
        self._d: int | None = None

    def _set_fitted(self, r: _Result, d: int) -> None:
        """Publish a decomposition as the fitted attributes (computed once, here)."""
        k = r.n_components
        self._result_ = r
        self.components_ = r.components
        self.explained_variance_ = r.spectrum[:k]
        self.explained_variance_ratio_ = r.spectrum[:k] / r.total_variance if r.total_variance > 0 else np.zeros(k)
        self.singular_values_ = np.sqrt(r.spectrum[:k] * (r.n_samples - 1))
        self.mean_ = r.mean
        self.n_components_ = k
        self._n_features_out = k
        self.noise_variance_ = r.noise_variance
        self.all_explained_variance_ = r.spectrum
        self.total_variance_ = r.total_variance
        self.fit_solver_ = r.solver
        self.n_samples_ = r.n_samples
        self.n_features_in_ = d
        self.__dict__.setdefault("fingerprint_", None)
        self.__dict__.setdefault("source_", None)

    def _check_params(self) -> None:
        if self.solver not in SOLVERS:
            raise BertfeatError(f"unknown solver {self.solver!r}", f"use one of: {', '.join(SOLVERS)}")
        if self.precision not in PRECISIONS:
            raise BertfeatError(f"unknown precision {self.precision!r}", f"use one of: {', '.join(PRECISIONS)}")
        _check_n_components_spec(self.n_components)

    # -- fitting ---------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> PCA:
        """Fit on all rows of X (n, d) at once; returns self. Forgets earlier fits and partial fits."""
        self._check_params()
        names_from = X
        X = _as_2d_float(X)
        n, d = X.shape
        if n < 2:
            raise BertfeatError(f"PCA needs at least 2 samples to fit, got n_samples = {n}",
                                "fit on the features of at least 2 texts")
        _check_max_components(self.n_components, n, d)
        solver = choose_solver(self.solver, n, d, self.n_components)
        self._reset()
        self._check_feature_names(names_from, reset=True)
        if solver == "covariance":
            self._accumulate(X)
            return self.finalize()
        col_sum = X.sum(axis=0, dtype=np.float64)
        if not np.isfinite(col_sum).all():
            raise _nonfinite_error(X, 0, "fitting")
        mean = col_sum / n
        Xc = np.subtract(X, mean, dtype=np.float64)  # (n, d) centred copy
        if solver == "svd":
            _, S, Vt = np.linalg.svd(Xc, full_matrices=False)  # S (r,), Vt (r, d)
            spectrum = S**2 / (n - 1)
            self._result_ = _result_from_spectrum(mean, flip_signs(Vt), spectrum, n, d, self.n_components, "svd")
        else:
            self._result_ = self._fit_randomized(Xc, mean)
        self._d = d
        self._set_fitted(self._result_, d)
        return self

    def _fit_randomized(self, Xc: np.ndarray, mean: np.ndarray) -> _Result:
        n, d = Xc.shape
        r = min(n, d)
        if self.n_components is not None and not isinstance(self.n_components, numbers.Integral):
            raise BertfeatError(
                "a fractional n_components needs the whole spectrum, which the randomized solver does not compute",
                "use solver='covariance' or 'svd', or pass a whole number of components",
            )
        k = r if self.n_components is None else int(self.n_components)
        rng = np.random.default_rng(self.random_state)
        S, Vt = randomized_svd(Xc, k, rng)
        spectrum = S**2 / (n - 1)
        total = float(np.einsum("ij,ij->", Xc, Xc)) / (n - 1)
        noise = (total - float(spectrum.sum())) / (r - k) if k < r else 0.0
        return _Result(mean, flip_signs(Vt), spectrum, total, n, k, noise, "randomized")

    def partial_fit(self, X: Any, y: Any = None) -> PCA:
        """Accumulate float64 statistics of another chunk X (m, d); returns self.

        Cheap: no decomposition happens here; ``finalize()`` computes the fitted attributes from
        everything seen so far (until then they are unset). Memory is O(d^2 + BLOCK_ROWS * d)
        whatever the number of rows.
        """
        self._check_params()
        if "_stats" not in self.__dict__:
            self._reset()
        first = self._stats is None and self._result_ is None
        names_from = X
        X = _as_2d_float(X)
        self._accumulate(X)
        if first:
            self._check_feature_names(names_from, reset=True)
        return self

    def _accumulate(self, X: np.ndarray) -> None:
        """Add X's rows to the float64 statistics (whole chunks only); fitted attributes become unset."""
        m, d = X.shape
        if self._stats is None and self._result_ is not None:
            raise BertfeatError(
                f"this PCA was fitted in one pass with solver={self._result_.solver!r} and keeps no statistics to update",
                "start a new PCA for partial_fit, or fit with solver='covariance'",
            )
        if self._d is not None and d != self._d:
            raise BertfeatError(
                f"X has {d} features, but PCA is expecting {self._d} features as input (from the earlier chunks)",
                "pass chunks of the same feature matrix (same model, pooling and layers)",
            )
        if isinstance(self.n_components, numbers.Integral) and self.n_components > d:
            raise BertfeatError(
                f"n_components={self.n_components} is larger than n_features = {d}",
                f"choose n_components <= {d}, or a fraction such as 0.95 to keep 95% of the variance",
            )
        if m == 0:
            return
        st = self._stats
        if st is None:
            shift = X[:BLOCK_ROWS].mean(axis=0, dtype=np.float64)  # (d,) mean of the first rows ever seen
            if not np.isfinite(shift).all():
                raise _nonfinite_error(X[:BLOCK_ROWS], 0, "fitting")
            if X.dtype == np.float32:
                shift = shift.astype(np.float32).astype(np.float64)  # representable: float32 blocks subtract it exactly
            st = _Stats(0, shift, np.zeros(d), np.zeros((d, d)))
        mixed = self.precision == "mixed" and X.dtype == np.float32 and _float32_products_ok(st, X)
        chunk_sum, chunk_sq = _chunk_stats(X, st.shift, st.n, mixed=mixed)
        if not np.isfinite(chunk_sq).all():
            raise BertfeatError(
                f"rows {st.n}-{st.n + m - 1}: products of these float32 features overflow (values near 1e19 or larger)",
                "scale the features down, or pass them as float64",
            )
        # commit only whole chunks, so a bad chunk leaves the statistics untouched
        st.sq += chunk_sq
        st.sum += chunk_sum
        st.n += m
        self._stats, self._d = st, d
        for name in PCA._FITTED:  # unset until finalize(); fingerprint_ / source_ describe the data and stay
            if name not in ("fingerprint_", "source_"):
                self.__dict__.pop(name, None)
        self.n_features_in_ = d  # known from the first chunk on, as scikit-learn's partial_fit sets it

    def finalize(self) -> PCA:
        """Decompose the statistics of partial_fit / merge into the fitted attributes; returns self."""
        st = self.__dict__.get("_stats")
        if st is None:
            if self.__dict__.get("_result_") is None:
                raise NotFittedError("this PCA has no data to finalize", "call partial_fit(X) first")
            return self
        if "components_" in self.__dict__:
            return self  # nothing new since the last finalize
        if st.n < 2:
            raise BertfeatError(f"PCA needs at least 2 samples to fit, got n_samples = {st.n}",
                                "fit on the features of at least 2 texts")
        self._check_params()
        _check_max_components(self.n_components, st.n, st.shift.shape[0])
        self._set_fitted(_decompose_stats(st, self.n_components), st.shift.shape[0])
        return self

    def merge(self, other: PCA) -> PCA:
        """A new PCA (with self's parameters) fitted on the rows of both partial fits.

        Chan et al.'s pairwise update of (n, mean, scatter), re-expressed around self's
        shift; exact in float64 and order-independent up to rounding. Neither input changes.
        """
        if not isinstance(other, PCA):
            raise BertfeatError(f"can only merge a PCA with a PCA, got {type(other).__name__}", "pass a PCA")
        for est in (self, other):
            if "_stats" not in est.__dict__:
                est._reset()
            if est._stats is None and est._result_ is not None:
                raise BertfeatError(
                    "merge needs the statistics of partial_fit, but one PCA was fitted in one pass "
                    f"with solver={est._result_.solver!r} (or loaded without statistics)",
                    "use partial_fit (or fit with solver='covariance') on every worker, and save with include_stats=True",
                )
        merged = PCA(**self.get_params())
        merged._reset()
        for name in ("fingerprint_", "source_", "feature_names_in_"):
            if name in self.__dict__:
                merged.__dict__[name] = self.__dict__[name]
        a, b = self._stats, other._stats
        if a is None or b is None:
            src = a if a is not None else b
            if src is not None:
                merged._stats, merged._d = src.copy(), src.shift.shape[0]
            return merged
        if a.shift.shape != b.shift.shape:
            raise BertfeatError(
                f"cannot merge PCAs fitted on {a.shift.shape[0]} and {b.shift.shape[0]} features",
                "merge partial fits of the same kind of features",
            )
        n = a.n + b.n
        mean_a, mean_b = a.mean(), b.mean()
        delta = mean_b - mean_a
        mean = mean_a + delta * (b.n / n)
        scatter = a.scatter() + b.scatter() + np.outer(delta, delta) * (a.n * b.n / n)
        s = (mean - a.shift) * n
        merged._stats = _Stats(n, a.shift.copy(), s, scatter + np.outer(s, s) / n)
        merged._d = a.shift.shape[0]
        return merged

    def _result(self) -> _Result:
        """The fitted decomposition (raises NotFittedError before fit / finalize)."""
        if "components_" not in self.__dict__:
            self.__getattr__("components_")  # raises the right NotFittedError
        return self._result_

    @property
    def has_stats(self) -> bool:
        """True when partial_fit/merge statistics are available (so more rows can be added)."""
        return self.__dict__.get("_stats") is not None

    # -- transforming ----------------------------------------------------------------------

    def _check_transform_input(self, X: Any) -> np.ndarray:
        self._result()  # NotFittedError before fit / finalize
        d = self.n_features_in_
        self._check_feature_names(X, reset=False)
        X = _as_2d_float(X)
        if X.shape[1] != d:
            raise BertfeatError(
                f"X has {X.shape[1]} features, but PCA is expecting {d} features as input",
                "transform features from the same model, pooling and layers the PCA was fitted on",
            )
        return X

    def _whiten_scale(self, dtype: np.dtype) -> np.ndarray:
        scale = np.sqrt(self.explained_variance_).astype(dtype)
        eps = np.finfo(dtype).eps
        return np.where(scale < eps, eps, scale)

    def transform(self, X: Any, row_offset: int = 0) -> np.ndarray:
        """Project X (n, d) on the components: (n, k), same float dtype as X.

        ``row_offset`` only shifts the row numbers quoted in a NaN/inf error (for streams).
        """
        original = X
        Xa = self._check_transform_input(X)
        r = self._result_
        dt = Xa.dtype
        C = r.components.astype(dt)  # (k, d)
        Y = Xa @ C.T  # (n, k): project first, then subtract the projected mean (no centred (n, d) copy)
        Y -= (r.mean @ r.components.T).astype(dt)
        if self.whiten:
            Y /= self._whiten_scale(dt)
        if not np.isfinite(Y).all():  # NaN/inf in X always reaches Y; checking Y is cheaper
            raise _nonfinite_error(Xa, row_offset, "transforming")
        return self._wrap_output(Y, original)

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """fit(X) then transform(X)."""
        return self.fit(X).transform(X)

    def inverse_transform(self, Y: Any) -> np.ndarray:
        """Map Y (n, k) back to feature space (n, d), same float dtype as Y."""
        r = self._result()
        Y = _as_2d_float(Y)
        if Y.shape[1] != r.n_components:
            raise BertfeatError(
                f"Y has {Y.shape[1]} columns but this PCA has {r.n_components} components",
                "pass the output of transform() of this PCA",
            )
        dt = Y.dtype
        comps = r.components.astype(dt)
        if self.whiten:
            comps = comps * np.sqrt(self.explained_variance_).astype(dt)[:, None]
        return Y @ comps + r.mean.astype(dt)

    # -- fingerprint -------------------------------------------------------------------------

    def check_fingerprint(self, other_fp: Mapping | None, force: bool = False) -> list[tuple[str, Any, Any]]:
        """Refuse features whose source fingerprint differs from the one this PCA was fitted on.

        Returns the differences (key, model value, features value) - empty when they match,
        or when either side has no fingerprint (nothing to compare). Raises BertfeatError
        naming every differing key with both values, unless ``force``.
        """
        if not self.fingerprint_ or not other_fp:
            return []
        diffs = fingerprint_differences(self.fingerprint_, other_fp)
        if diffs and not force:
            parts = "; ".join(f"{key}: model {_fmt_value(a)} vs features {_fmt_value(b)}" for key, a, b in diffs)
            raise BertfeatError(
                f"the features come from a different source than the PCA was fitted on ({parts})",
                "transform features extracted with the same model and settings, or pass --force (force=True) to transform anyway",
            )
        return diffs

    # -- model file --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike, fingerprint: Mapping | None = None, *, include_stats: bool = False) -> Path:
        """Write the fitted model to ``path`` (.npz, no pickle) atomically; returns the path.

        ``fingerprint`` (default: ``self.fingerprint_``) describes the features it was fitted
        on. ``include_stats`` also stores the float64 statistics (a d x d matrix) so a loaded
        model can keep taking ``partial_fit``/``merge``.
        """
        r = self._result()
        path = Path(path)
        fp = dict(fingerprint) if fingerprint is not None else self.__dict__.get("fingerprint_")
        from .version import __version__

        meta = {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "bertfeat_version": __version__,
            "params": self.get_params() | {"random_state": _jsonable_seed(self.random_state)},
            "n_samples": r.n_samples,
            "n_features": self.n_features_in_,
            "n_components": r.n_components,
            "noise_variance": r.noise_variance,
            "total_variance": r.total_variance,
            "fit_solver": r.solver,
            "fingerprint": fp,
            "source": getattr(self, "source_", None),
        }
        arrays = {
            "mean": r.mean,
            "components": r.components,
            "spectrum": r.spectrum,
        }
        if include_stats and self._stats is not None:
            arrays |= {"stats_shift": self._stats.shift, "stats_sum": self._stats.sum, "stats_sq": self._stats.sq}
            meta["stats_n"] = self._stats.n
        arrays["meta"] = np.array(json.dumps(meta, default=_json_default, sort_keys=True))
        path.parent.mkdir(parents=True, exist_ok=True)
        with _atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
        self.fingerprint_ = fp
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> PCA:
        """Read a model written by ``save`` (``np.load(allow_pickle=False)``)."""
        path = Path(path)
        if not path.is_file():
            raise BertfeatError(f"PCA model file not found: {path}", "check the path, or fit one with `bertfeat pca fit`")
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {key: z[key] for key in z.files}
            meta = json.loads(str(arrays.pop("meta")))
        except (OSError, ValueError, KeyError) as e:
            raise BertfeatError(
                f"{path} is not a bertfeat PCA model ({e})", "pass a .npz written by `bertfeat pca fit` or PCA.save"
            ) from None
        if meta.get("format") != MODEL_FORMAT:
            raise BertfeatError(f"{path} is not a bertfeat PCA model", "pass a .npz written by `bertfeat pca fit` or PCA.save")
        if meta.get("format_version", 0) > MODEL_FORMAT_VERSION:
            raise BertfeatError(
                f"{path} uses model format version {meta['format_version']}, newer than this bertfeat supports ({MODEL_FORMAT_VERSION})",
                "upgrade bertfeat",
            )
        pca = cls(**meta["params"])
        pca._reset()
        result = _Result(
            mean=arrays["mean"],
            components=arrays["components"],
            spectrum=arrays["spectrum"],
            total_variance=float(meta["total_variance"]),
            n_samples=int(meta["n_samples"]),
            n_components=int(meta["n_components"]),
            noise_variance=float(meta["noise_variance"]),
            solver=meta["fit_solver"],
        )
        pca._d = int(meta["n_features"])
        pca._set_fitted(result, pca._d)
        if "stats_sq" in arrays:
            pca._stats = _Stats(int(meta["stats_n"]), arrays["stats_shift"], arrays["stats_sum"], arrays["stats_sq"])
        pca.fingerprint_ = meta.get("fingerprint")
        pca.source_ = meta.get("source")
        pca.source_path_ = path
        return pca

    # -- summary -----------------------------------------------------------------------------

    def components_needed(self, fraction: float) -> int | None:
        """Smallest k whose cumulative ratio exceeds ``fraction`` (None if unknown)."""
        r = self._result()
        return _components_needed(r.spectrum / r.total_variance, fraction)


def _jsonable_seed(seed: Any) -> Any:
    """random_state as JSON: ints stay, generators are not reproducible from a file (None)."""
    return int(seed) if isinstance(seed, numbers.Integral) else None
