"""Principal component analysis in NumPy: exact, streaming, mergeable, saved without pickle.

This module is the estimator's home: ``PCA`` and ``NotFittedError``. The rest lives beside it,
and every name callers used to import from here is still importable from here:

* ``validation`` input, ``n_components`` and ``accumulate`` checks, the NaN / inf error;
* ``stats``      streaming statistics (``Stats``), their blockwise accumulation and merge;
* ``solvers``    the decompositions (svd, randomized, covariance eigh), the sign rule, ``auto``;
* ``file``       the ``.npz`` model file and fingerprint comparison.

Long on purpose: what is left is one class, scikit-learn's estimator surface (fit, partial_fit,
merge, finalize, transform, inverse_transform, save / load, first-use decomposition), which reads best in one place.

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
positive). The exact solvers' results (all but ``randomized``) match ``sklearn.decomposition.PCA(svd_solver="full")``,
except the components of directions of zero variance (rank-deficient data), an arbitrary basis in both.
The probabilistic model (``get_covariance``, ``get_precision``, ``score_samples``, ``score``) is scikit-learn's.

Solvers
-------
``svd``         ``numpy.linalg.svd`` of the centred (n, d) data, in float64.
``covariance``  float64 sufficient statistics (n, a shift vector, the sum of shifted
                rows (d,) and the shifted scatter matrix (d, d)), then ``eigh`` of the
                (d, d) covariance (through its correlations when the columns' scales differ
                widely: solvers.covariance_eigh). Memory is O(d^2), independent of n; this is what
                ``partial_fit`` and ``merge`` use.
``randomized``  Halko et al. randomized SVD with power iterations (``random_state``),
                for very wide in-memory data. Approximate; only the top k variances are known.
``auto``        ``covariance`` when the data are tall (n >= d) and d <= 4096, otherwise
                ``svd`` when it is small or most components are wanted, else
                ``randomized`` (never for ``reduce.fit_pca_file`` / ``bertfeat pca fit``: ``svd``).

Streaming
---------
``partial_fit`` only accumulates statistics (one ``syrk`` per block of ``BLOCK_ROWS``
rows, in float32 for float32 input under ``accumulate="mixed"``, added to float64 totals: see
``stats.chunk_stats``); it never decomposes. The decomposition of everything seen so far
runs on first use - the first read of a fitted attribute (``components_``, ...) or call of
``transform`` / ``inverse_transform`` / ``save`` / ``get_feature_names_out`` after new rows
arrived - or at an explicit ``finalize()``, and is kept until the next ``partial_fit``
(``merge`` returns a new PCA, which decomposes on its own first use). For d = 768 that is one
768 x 768 ``eigh``, well under a second. Shifting every row by the first chunk's mean keeps
the accumulation exact for data far from the origin (mean 1e4, variance 1); a chunk far from that
shift is summed about its own mean and merged, the statistics re-centred (``stats.add_chunk``).

Model files
-----------
``save`` writes an ``.npz`` (float64 arrays plus one JSON string with settings, scalars
and the feature fingerprint) atomically; ``PCA.load`` reads it with
``allow_pickle=False``.
"""

from __future__ import annotations

import numbers
import os
import stat
import sys
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_switch
from ..errors import BertfeatError, one_line, opt
from .sklearn_protocol import Estimator, checked_init
from .validation import (
    DEFAULT_ACCUMULATE,
    PRECISION_DEPRECATED,
    accumulate_mode,
    as_2d_float,
    check_max_components,
    check_merge_feature_names,
    check_n_components_spec,
    check_seed,
    nonfinite_error,
    overflow_error,
    underflow_error,
)
from ..model.hub import file_sha256
from .file import SavedModel, check_meta_digest, load_model, merge_sources, not_a_model, save_model, source_differences
from .solvers import (
    SOLVERS,
    check_solver,
    Decomposition,
    choose_solver,
    components_needed,
    decompose_randomized,
    decompose_stats,
    decompose_svd,
    kept_by,
    log_likelihoods,
    model_covariance,
    model_precision,
)
from .stats import BLOCK_ROWS, FLOAT64_TINY, Stats, add_chunk, first_stats, float32_products_ok, merge_stats

# Defined here before pca.py was split; still importable from bertfeat.pca.estimator, so no caller has to change.
from .file import MODEL_FORMAT, MODEL_FORMAT_VERSION  # noqa: E402,F401
from .solvers import AUTO_COVARIANCE_MAX_FEATURES, flip_signs, randomized_svd  # noqa: E402,F401
from .stats import MIXED_MAX_OFFSET  # noqa: E402,F401

__all__ = ["PCA", "NotFittedError", "MODEL_FORMAT", "MODEL_FORMAT_VERSION", "BLOCK_ROWS"]


#: Elements of the centred rows transform holds at once (one block of rows: 4 MiB of float32): a bounded copy.
TRANSFORM_BLOCK_ELEMENTS = 1 << 20


def centred_projection(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """(X - mean) @ components.T, (n, k) in X's float dtype, centred before the product, one block of rows at a time.

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64
    mean : ndarray (d,), float64
    components : ndarray (k, d), float64

    Returns
    -------
    ndarray (n, k) of X's dtype.

    Notes
    -----
    Projecting first and subtracting the projected mean cancels: rows offset by 1e6 lost ~1 % of their float32
    projections. The mean is split into its value in X's dtype (``shift``) and the float64 rest: ``X - shift`` is
    exact wherever a value is within a factor 2 of its column's shift (Sterbenz), and the rest (at most half a unit
    in the last place of the mean) is projected in float64. Each block of rows is centred into one reused buffer (a
    ``TRANSFORM_BLOCK_ELEMENTS`` copy, not one of X); the product keeps X's dtype (float32 GEMM speed).
    """
    dt = X.dtype
    shift = mean.astype(dt)
    C = components.astype(dt)
    n, d = X.shape
    Y = np.empty((n, C.shape[0]), dtype=dt)
    rows = max(1, TRANSFORM_BLOCK_ELEMENTS // d)
    buf = np.empty((min(rows, n), d), dtype=dt)
    for start in range(0, n, rows):
        block = X[start:start + rows]
        centred = np.subtract(block, shift, out=buf[:block.shape[0]])
        np.matmul(centred, C.T, out=Y[start:start + block.shape[0]])
    rest = (mean - shift.astype(np.float64)) @ components.T  # 0 for float64 rows
    if rest.any():
        Y -= rest.astype(dt)
    return Y


class NotFittedError(BertfeatError, AttributeError):
    """A fitted attribute was read before ``fit``/``partial_fit``/``load``.

    Also an ``AttributeError``, so ``hasattr(pca, "components_")`` is simply False; and, once scikit-learn is imported,
    a ``sklearn.exceptions.NotFittedError`` too (``not_fitted``), so either class's ``except`` catches it.
    """


def not_fitted(message: str, fix: str) -> NotFittedError:
    """A NotFittedError that is also scikit-learn's when scikit-learn is imported (a caller naming its class in an
    ``except`` has imported it; bertfeat never imports it for this)."""
    sk = sys.modules.get("sklearn.exceptions")
    return NotFittedError(message, fix) if sk is None else _with_sklearn(sk)(message, fix)


def _with_sklearn(sk) -> type:
    """NotFittedError and scikit-learn's in one class, made once and kept as a module attribute (pickle finds it by
    name; in another process the module's __getattr__ makes it)."""
    cls = globals().get("_SklearnNotFittedError")
    if cls is None or sk.NotFittedError not in cls.__mro__:
        cls = type("_SklearnNotFittedError", (NotFittedError, sk.NotFittedError), {"__module__": __name__})
        globals()["_SklearnNotFittedError"] = cls
    return cls


def __getattr__(name: str):
    if name == "_SklearnNotFittedError":  # unpickling an error made where scikit-learn was imported
        import sklearn.exceptions

        return _with_sklearn(sklearn.exceptions)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class PCA(Estimator):
    """Principal component analysis with exact streaming fits (see the module docstring).

    Parameters
    ----------
    n_components : None, int, float in (0, 1) or "mle"
        None keeps all r = min(n, d) components; an int keeps that many; a fraction keeps
        the smallest k whose cumulative explained-variance ratio exceeds it; "mle" the k of
        Minka's MLE (solvers.infer_dimension, scikit-learn's choice; n >= d, not randomized).
    solver : "auto", "svd", "covariance" or "randomized"
        How ``fit`` decomposes in-memory data. ``partial_fit`` always accumulates
        covariance statistics, and their decomposition is always ``eigh``.
    whiten : bool
        Scale transformed outputs to unit variance (divide by sqrt(explained_variance_)).
    random_state : None, int >= 0 or numpy Generator
        Seed of the randomized solver (the only approximate one): an int gives the same fit every time,
        None a new seed on every fit (as scikit-learn).
    accumulate : "mixed" or "float64"
        How the covariance statistics (``partial_fit``, ``merge``, the ``covariance`` solver)
        accumulate float32 input; float64 input always accumulates in float64, and the
        statistics and every fitted attribute are float64 either way.
        ``mixed``: float32 products of blocks of ``BLOCK_ROWS`` rows,
        added to float64 totals - twice as fast; on BERT features ratios within ~1e-8 of a
        float64 fit, in general a component's variance about 1e-7 x (largest variance / its
        own) off (use float64 when the trailing components of a steep spectrum matter). Data
        far from zero relative to its spread (|mean| > 128 std in some column), a block
        of rows far from the running shift (stats.MIXED_MAX_ENERGY), and a block whose
        float32 products overflow (values near 1e19 or larger) or underflow (a column varying by less than ~1e-15,
        stats.MIXED_MIN_ENERGY) fall back to float64 products.
        ``n_components="mle"`` always accumulates in float64: Minka's choice reads the smallest
        variances, which float32 products cannot resolve.
        ``float64``: every block is converted and multiplied in float64, so re-chunking or
        splitting the rows across workers changes the result only by float64 rounding
        (``bertfeat extract --pca`` uses this, locally and on Dask).
    precision : None, "mixed" or "float64"
        Deprecated name of ``accumulate`` (up to bertfeat 0.2.0), kept for one more release:
        a value here is used as ``accumulate`` with a ``DeprecationWarning``, and an
        ``accumulate`` set to another (non-default) value is an error naming both.

    Fitted attributes (float64 whatever the input dtype; ``transform`` output follows the input)
    ----------------------------------------------------------------------------------------
    components_ (k, d), explained_variance_ (k,), explained_variance_ratio_ (k,),
    singular_values_ (k,), mean_ (d,), n_samples_, n_components_, noise_variance_,
    all_explained_variance_ (r,) (the whole spectrum; only the top k for ``randomized``),
    total_variance_ and fit_solver_ come from the decomposition. n_features_in_,
    feature_names_in_ (fitted on a DataFrame or pyarrow Table with string column names only) and the provenance
    of the features - fingerprint_ (model, weights and settings that made them) and source_
    (the feature file and its rows), both None for plain arrays and set by ``fit_pca_file``,
    ``bertfeat pca fit`` and ``load`` - are known from the first rows on.

    When they exist: ``fit`` and ``load`` set them all at once. After ``partial_fit`` /
    ``merge`` they are usable at once, as with scikit-learn's ``IncrementalPCA``, but computed
    on first use: ``partial_fit`` only accumulates statistics, and the first read of a
    decomposition attribute (or ``transform``, ``inverse_transform``, ``save``,
    ``get_feature_names_out``) decomposes everything seen so far, with the parameters of that
    moment, and keeps the result until the next ``partial_fit``. ``finalize()`` does the same
    now, explicitly (``bertfeat extract --pca`` and ``bertfeat pca fit`` call it). Reading a
    decomposition attribute before any rows, or with fewer than 2, raises ``NotFittedError``
    (also an ``AttributeError`` and a ``ValueError``): ``hasattr`` is False and scikit-learn's
    ``check_is_fitted`` raises. The decomposition's other errors (an integer ``n_components``
    larger than the rows seen so far) are raised from the read, as from ``finalize()``.

    How: the decomposition attributes are plain instance attributes (``_set_fitted`` writes
    them, ``_DECOMPOSED`` lists them). New rows (``partial_fit``; ``merge`` makes a new PCA)
    delete them, and ``__getattr__`` - which Python calls only for a name not found - then
    decomposes the statistics held and returns the name. So a read after the decomposition
    costs nothing, ``vars()`` and a pickle hold what has been computed (a PCA pickled
    mid-stream keeps its statistics and keeps accumulating), and ``__sklearn_is_fitted__``
    answers from the statistics without decomposing.

    scikit-learn: a transformer for pipelines, ``clone``, grid search and
    ``check_estimator``, with ``get_feature_names_out`` (pca0, pca1, ...) and ``set_output``,
    without importing scikit-learn (see bertfeat/pca/sklearn_protocol.py).
    """

    #: Computed from the decomposition (``_set_fitted``); missing while new rows are not decomposed yet.
    _DECOMPOSED = ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_",
                   "n_samples_", "n_components_", "noise_variance_", "all_explained_variance_", "total_variance_",
                   "fit_solver_", "_n_features_out")
    #: Every fitted name (the rest are known from the first rows on).
    _FITTED = _DECOMPOSED + ("n_features_in_", "fingerprint_", "source_")
    #: scikit-learn's PCA(svd_solver=...): bertfeat's solver (its "full" is an SVD, "covariance_eigh" the covariance's
    #: eigh; arpack has no counterpart here)
    SKLEARN_NAMES = {"svd_solver": ("solver", {"auto": "auto", "full": "svd", "covariance_eigh": "covariance",
                                                "randomized": "randomized"}, SOLVERS)}
    SKLEARN_ONLY = frozenset({"copy", "tol", "iterated_power", "n_oversamples", "power_iteration_normalizer"})

    @checked_init
    def __init__(
        self,
        n_components: int | float | None = None,
        *,
        solver: str = "auto",
        whiten: bool = False,
        random_state: int | np.random.Generator | None = None,
        accumulate: str = DEFAULT_ACCUMULATE,
        precision: str | None = None,
    ):
        self.n_components = n_components
        self.solver = solver
        self.whiten = whiten
        self.random_state = random_state
        self.accumulate = accumulate
        self.precision = precision

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails. A decomposition attribute is missing while statistics
        # are held: new rows since the last decomposition (or none yet), so decompose them now.
        if name in PCA._DECOMPOSED and self.__dict__.get("_stats") is not None:
            self.finalize()  # NotFittedError (so hasattr is False) with fewer than 2 rows
            return self.__dict__[name]
        if name in PCA._FITTED:
            raise not_fitted(  # a private attribute (get_feature_names_out's) is not the user's to read
                "this PCA is not fitted yet" + ("" if name.startswith("_") else f" ({name} is set by fit or partial_fit)"),
                "call fit(X) or partial_fit(X), or load a saved model with PCA.load(path)",
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __copy__(self) -> PCA:
        """``copy.copy``: the attributes shared, but its own statistics: ``partial_fit`` adds to them in place (no (d, d)
        copy per chunk), so a copy sharing them counted the other's later rows (n_samples_ 100 for its 50)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        st = self.__dict__.get("_stats")
        if st is not None:
            new.__dict__["_stats"] = st.copy()
        return new

    def __sklearn_is_fitted__(self) -> bool:
        """scikit-learn's ``check_is_fitted``: decomposed, or holding the statistics of >= 2 rows (decomposed on
        first use). Never decomposes."""
        st = self.__dict__.get("_stats")
        return "components_" in self.__dict__ or (st is not None and st.n >= 2)

    def _reset(self) -> None:
        """Forget every fitted attribute and statistic (parameters stay)."""
        for name in PCA._FITTED + ("feature_names_in_",):
            self.__dict__.pop(name, None)
        self._stats: Stats | None = None
        self._result_: Decomposition | None = None
        self._d: int | None = None

    def _set_fitted(self, r: Decomposition, d: int) -> None:
        """Publish a decomposition as the fitted attributes (computed once, here).

        One ``dict.update``, so a reader never sees ``components_`` (what ``finalize`` checks) without the rest.
        """
        k = r.n_components
        fitted = {
            "_result_": r,
            "components_": r.components,
            "explained_variance_": r.spectrum[:k],
            "explained_variance_ratio_": r.spectrum[:k] / r.total_variance if r.total_variance > 0 else np.zeros(k),
            "singular_values_": np.sqrt(r.spectrum[:k] * (r.n_samples - 1)),
            "mean_": r.mean,
            "n_components_": k,
            "_n_features_out": k,
            "noise_variance_": r.noise_variance,
            "all_explained_variance_": r.spectrum,
            "total_variance_": r.total_variance,
            "fit_solver_": r.solver,
            "n_samples_": r.n_samples,
            "n_features_in_": d,
        }
        self.__dict__.update(fitted)
        self.__dict__.setdefault("fingerprint_", None)
        self.__dict__.setdefault("source_", None)

    def _check_params(self) -> str:
        """Check the parameters (a DeprecationWarning for precision=, aimed at the caller's caller); -> the accumulate mode."""
        check_solver(self.solver)
        if not isinstance(self.whiten, (bool, np.bool_)):
            raise BertfeatError(f"whiten={self.whiten!r} is not True or False", "give whiten=True or whiten=False")
        check_seed(self.random_state)
        if self.precision is not None:
            warnings.warn(PRECISION_DEPRECATED, DeprecationWarning, stacklevel=3)
        accumulate = self._accumulate_mode()
        check_n_components_spec(self.n_components)
        if isinstance(self.n_components, str) and self.n_components == "mle":
            # Minka's choice reads the smallest variances, which float32 products blur into ~1e-8 x the largest
            # (300 distinct rows repeated: mixed picked 339, scikit-learn and float64 299)
            return "float64"
        return accumulate

    def _accumulate_mode(self) -> str:
        """``accumulate``, or the deprecated ``precision`` when that is set (then a default accumulate counts as unset)."""
        given = None if self.precision is not None and self.accumulate == DEFAULT_ACCUMULATE else self.accumulate
        return accumulate_mode(given, self.precision)

    # -- fitting ---------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> PCA:
        """Fit on all rows of X (n, d) at once; returns self. Forgets earlier fits and partial fits, unless X is
        refused (NaN or inf, ...): the PCA is then as it was before the call."""
        return self._fit(X, self._check_params(), exact=False)  # checked here: its warning is aimed at fit's caller

    def _fit(self, X: Any, accumulate: str, exact: bool) -> PCA:
        """``fit`` with the parameters checked (-> ``accumulate``); ``exact``: ``solver="auto"`` never picks the
        randomized solver (solvers.choose_solver)."""
        names_from = X
        X = as_2d_float(X)
        n, d = X.shape
        if n < 2:
            raise BertfeatError(f"PCA needs at least 2 samples to fit, got n_samples = {n}",
                                "fit on the features of at least 2 texts")
        check_max_components(self.n_components, n, d)
        solver = choose_solver(self.solver, n, d, self.n_components, exact=exact)
        with self._as_it_was_if_refused():  # its earlier fit, or none (not X's rows or names)
            return self._fit_checked(X, names_from, solver, accumulate)

    def _fit_checked(self, X: np.ndarray, names_from: Any, solver: str, accumulate: str) -> PCA:
        """``_fit``'s work on X (n, d) as a float array (``names_from``: X as given, for its column names), ``solver``
        resolved: forgets the earlier fit, then fits."""
        n, d = X.shape
        self._reset()
        self._check_feature_names(names_from, reset=True)
        if solver == "covariance":
            self._accumulate(X, accumulate)
            return self.finalize()
        col_sum = X.sum(axis=0, dtype=np.float64)
        if not np.isfinite(col_sum).all():
            raise nonfinite_error(X, 0, "fitting")
        mean = col_sum / n
        Xc = np.subtract(X, mean, dtype=np.float64)  # (n, d) centred copy
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below, by its rows
            if solver == "svd":
                result = decompose_svd(Xc, mean, self.n_components)
            else:
                result = decompose_randomized(Xc, mean, self.n_components, self.random_state)
        # the SVD of values near 1e154 or more gave NaN, or inf variances, where the covariance solver refuses them
        if not (np.isfinite(result.spectrum).all() and np.isfinite(result.components).all()
                and np.isfinite(result.total_variance)):
            raise overflow_error(0, n - 1)
        top = float(result.spectrum[0]) * (n - 1) if len(result.spectrum) else 0.0  # the largest sum of squares
        if top < FLOAT64_TINY and np.any(Xc):  # rows that vary, by squares float64 cannot hold: as stats.chunk_stats
            raise underflow_error(0, n - 1)
        self._result_ = result
        self._d = d
        self._set_fitted(self._result_, d)
        return self

    def partial_fit(self, X: Any, y: Any = None) -> PCA:
        """Accumulate float64 statistics of another chunk X (m, d); returns self.

        Cheap: no decomposition happens here. The fitted attributes are usable at once: the first
        one read (or ``transform``, ...) decomposes everything seen so far, once, until the next
        ``partial_fit``; ``finalize()`` decomposes now. Memory is O(d^2 + BLOCK_ROWS * d)
        whatever the number of rows.
        """
        accumulate = self._check_params()
        if "_stats" not in self.__dict__:
            self._reset()
        first = self._stats is None and self._result_ is None
        names_from = X
        if not first:  # a later chunk's columns must be the first's, by name and order (as IncrementalPCA checks)
            self._check_feature_names(names_from, reset=False)
        X = as_2d_float(X)
        with self._as_it_was_if_refused():  # a refused first chunk (two columns of one name) adds no rows
            self._accumulate(X, accumulate)
            if first:
                self._check_feature_names(names_from, reset=True)
        return self

    @contextmanager
    def _as_it_was_if_refused(self):
        """An error inside leaves the PCA's attributes as they were on entry (fit and partial_fit replace, never
        mutate, the objects they hold before they can fail), then propagates."""
        before = dict(self.__dict__)
        try:
            yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    def _accumulate(self, X: np.ndarray, accumulate: str) -> None:
        """Add X's rows to the float64 statistics (whole chunks only, ``accumulate`` mode); fitted attributes become unset."""
        m, d = X.shape
        if self._stats is None and self._result_ is not None:
            loaded = self.__dict__.get("source_path_")
            if loaded is not None:
                raise BertfeatError(f"this PCA was loaded from {loaded}, saved without the statistics partial_fit updates",
                                    "save the model with PCA.save(path, include_stats=True) to keep updating it, or start "
                                    "a new PCA for partial_fit")
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
                f"{opt('n_components', self.n_components)} is larger than n_features = {d}",
                f"choose {opt('n_components')} <= {d} (and no more than the rows fitted: the rows are counted as they "
                "stream in), or a fraction such as 0.95 to keep 95% of the variance",
            )
        if m == 0:
            return
        st = self._stats if self._stats is not None else first_stats(X)
        mixed = accumulate == "mixed" and X.dtype == np.float32 and float32_products_ok(st, X)
        add_chunk(st, X, mixed)  # whole chunks only, so a bad chunk leaves the statistics (and the decomposition) untouched
        self._hold_stats(st)

    def _hold_stats(self, st: Stats) -> None:
        """Keep ``st``, which has new rows: the decomposition no longer describes them, so forget it (the next
        use decomposes again, see ``__getattr__``). n_features_in_, fingerprint_ and source_ stay."""
        self._stats, self._d = st, st.shift.shape[0]
        for name in PCA._DECOMPOSED:
            self.__dict__.pop(name, None)
        self._result_ = None
        self.n_features_in_ = self._d  # known from the first chunk on, as scikit-learn's partial_fit sets it
        self.__dict__.setdefault("fingerprint_", None)
        self.__dict__.setdefault("source_", None)

    def finalize(self) -> PCA:
        """Decompose the statistics of partial_fit / merge now; returns self.

        Optional: the first use of a fitted attribute or of transform / inverse_transform / save /
        get_feature_names_out does the same. Nothing new since the last decomposition (or a ``fit``
        / ``load``): nothing to do.
        """
        if "components_" in self.__dict__:
            return self  # decomposed, and no rows since
        st = self.__dict__.get("_stats")
        if st is None:
            raise not_fitted("this PCA has no data to finalize", "call partial_fit(X) first")
        if st.n < 2:  # not fitted (rather than a bad argument): more rows may follow
            raise not_fitted(f"PCA needs at least 2 samples to fit, got n_samples = {st.n}",
                                 "fit on the features of at least 2 texts")
        check_n_components_spec(self.n_components)  # set_params may have changed it since partial_fit
        check_max_components(self.n_components, st.n, st.shift.shape[0])
        self._set_fitted(decompose_stats(st, self.n_components), st.shift.shape[0])
        return self

    def merge(self, other: PCA) -> PCA:
        """A new PCA (with self's parameters) fitted on the rows of both partial fits.

        Chan et al.'s pairwise update of (n, mean, scatter), re-expressed around self's
        shift; exact in float64 and order-independent up to rounding. Neither input changes.
        Only the statistics are merged: the new PCA decomposes on first use (or ``finalize()``).
        Refused: other widths, other feature names (``feature_names_in_``, as ``partial_fit`` checks a later
        chunk's) and features from another source (``fingerprint_``, compared as ``check_fingerprint`` does).
        The merge's ``source_`` counts the rows of both and names both feature files.
        """
        if not isinstance(other, PCA):
            kind = type(other)  # by its module too: scikit-learn's PCA is also called PCA
            raise BertfeatError(f"can only merge a bertfeat.PCA with a bertfeat.PCA, got {kind.__module__}.{kind.__qualname__}",
                                "pass a bertfeat.PCA fitted with partial_fit")
        for est in (self, other):
            if "_stats" not in est.__dict__:
                est._reset()
            if est._stats is None and est._result_ is not None:
                raise BertfeatError(
                    "merge needs the statistics of partial_fit, but one PCA was fitted in one pass "
                    f"with solver={est._result_.solver!r} (or loaded without statistics)",
                    "use partial_fit (or fit with solver='covariance') on every worker, and save with include_stats=True",
                )
        a, b = self._stats, other._stats
        if a is not None and b is not None:
            self._check_same_features(other)
        merged = PCA(**self.get_params())
        merged._reset()
        if a is None and b is None:
            return merged
        st = merge_stats(a, b) if a is not None and b is not None else (a if a is not None else b).copy()
        merged._hold_stats(st)
        merged._take_provenance(self, other, st.n)
        return merged

    def _check_same_features(self, other: PCA) -> None:
        """merge: refuse the statistics of other columns (feature names, as partial_fit checks a later chunk's) or of
        features from another source (fingerprints compared as check_fingerprint compares them). Widths: merge_stats."""
        check_merge_feature_names(self.__dict__.get("feature_names_in_"), other.__dict__.get("feature_names_in_"))
        diffs, text = source_differences(self.__dict__.get("fingerprint_"), other.__dict__.get("fingerprint_"),
                                         "this PCA", "the other")
        if diffs:
            raise BertfeatError(f"cannot merge PCAs fitted on features from different sources ({text})",
                                "merge partial fits of features extracted with the same model and settings")

    def _take_provenance(self, a: PCA, b: PCA, rows: int) -> None:
        """A merge's feature names and fingerprint (a's, else b's) and source (both files, ``rows`` in all)."""
        for name in ("feature_names_in_", "fingerprint_"):
            value = a.__dict__.get(name)
            value = b.__dict__.get(name) if value is None else value
            if value is not None:
                self.__dict__[name] = value
        self.source_ = merge_sources(a.__dict__.get("source_"), b.__dict__.get("source_"), rows)

    def _result(self) -> Decomposition:
        """The fitted decomposition: decomposes new statistics first; NotFittedError before any data."""
        if "components_" not in self.__dict__:
            self.__getattr__("components_")  # decomposes, or raises the right NotFittedError
        return self._result_

    @property
    def has_stats(self) -> bool:
        """True when partial_fit/merge statistics are available (so more rows can be added)."""
        return self.__dict__.get("_stats") is not None

    # -- transforming ----------------------------------------------------------------------

    def _check_transform_input(self, X: Any, check_names: bool = True) -> np.ndarray:
        self._result()  # decomposes new statistics; NotFittedError before any data
        d = self.n_features_in_
        if check_names:
            self._check_feature_names(X, reset=False)
        X = as_2d_float(X)
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
        return self._transform(X, row_offset, True)

    def transform_rows(self, X: np.ndarray, row_offset: int = 0) -> np.ndarray:
        """transform for a feature file's rows (bertfeat's own pipelines): their columns are an embedding, not named
        features, so a model fitted on a DataFrame does not warn that they have no feature names."""
        return self._transform(X, row_offset, False)

    def _transform(self, X: Any, row_offset: int, check_names: bool) -> np.ndarray:
        original = X
        Xa = self._check_transform_input(X, check_names)
        r = self._result_
        dt = Xa.dtype
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, not warned about
            Y = centred_projection(Xa, r.mean, r.components)
            if self.whiten:
                Y /= self._whiten_scale(dt)
        if not np.isfinite(Y).all():  # NaN/inf in X always reaches Y; checking Y is cheaper
            raise nonfinite_error(Xa, row_offset, "transforming", Y)
        return self._wrap_output(Y, original)

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """fit(X) then transform(X)."""
        return self.fit(X).transform(X)

    def inverse_transform(self, Y: Any) -> np.ndarray:
        """Map Y (n, k) back to feature space (n, d), same float dtype as Y."""
        r = self._result()
        Y = as_2d_float(Y)
        if Y.shape[1] != r.n_components:
            raise BertfeatError(
                f"Y has {Y.shape[1]} columns but this PCA has {r.n_components} components",
                "pass the output of transform() of this PCA",
            )
        if not np.isfinite(Y).all():  # as scikit-learn's check_array: "Input X contains NaN"
            raise nonfinite_error(Y, 0, "inverse_transform")
        dt = Y.dtype
        comps = r.components.astype(dt)
        if self.whiten:
            comps = comps * np.sqrt(self.explained_variance_).astype(dt)[:, None]
        return Y @ comps + r.mean.astype(dt)

    # -- the probabilistic model (scikit-learn's, Tipping & Bishop) ----------------------------

    def get_covariance(self) -> np.ndarray:
        """The data covariance (d, d) of the probabilistic PCA model, float64: components_.T diag(explained_variance_ -
        noise_variance_) components_ + noise_variance_ I (with whiten the components scaled by
        sqrt(explained_variance_), as scikit-learn does)."""
        self._result()  # decomposes new statistics; NotFittedError before any data
        return model_covariance(self.components_, self.explained_variance_, self.noise_variance_, self.whiten)

    def get_precision(self) -> np.ndarray:
        """The inverse of ``get_covariance()`` (d, d), float64, by the matrix inversion lemma (scikit-learn's)."""
        self._result()
        return model_precision(self.components_, self.explained_variance_, self.noise_variance_, self.whiten)

    def score_samples(self, X: Any) -> np.ndarray:
        """The log-likelihood (n,) of each row of X (n, d) under the probabilistic PCA model, float64."""
        Xa = self._check_transform_input(X)
        if not np.isfinite(Xa).all():
            raise nonfinite_error(Xa, 0, "scoring")
        try:
            precision = model_precision(self.components_, self.explained_variance_, self.noise_variance_, self.whiten)
        except BertfeatError:  # singular: no density off its subspace, -inf as scikit-learn's fast_logdet gives
            return np.full(Xa.shape[0], -np.inf)
        return log_likelihoods(Xa - self.mean_, precision)

    def score(self, X: Any, y: Any = None) -> float:
        """The mean log-likelihood of X's rows (``score_samples``): what cross_val_score and GridSearchCV maximise."""
        return float(np.mean(self.score_samples(X)))

    # -- fingerprint -------------------------------------------------------------------------

    def check_fingerprint(self, other_fp: Mapping | None, force: bool = False,
                          fix: str | None = None) -> list[tuple[str, Any, Any]]:
        """Refuse features whose source fingerprint differs from the one this PCA was fitted on.

        Returns the differences (key, model value, features value) - empty when they match,
        or when either side has no fingerprint (nothing to compare). Raises BertfeatError
        naming every differing key with both values (``fix``: how to fix it, for callers without ``force``), unless ``force``.
        """
        diffs, parts = source_differences(self.fingerprint_, other_fp)
        if diffs and not force:
            raise BertfeatError(
                f"the features come from a different source than the PCA was fitted on ({parts})",
                fix or "transform features extracted with the same model and settings, or pass --force (force=True) to "
                       "transform anyway",
            )
        return diffs

    # -- model file --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike, fingerprint: Mapping | None = None, *, include_stats: bool = False,
             overwrite: bool = False) -> Path:
        """Write the fitted model to ``path`` (.npz, no pickle) atomically; returns the path.

        ``fingerprint`` (default: ``self.fingerprint_``) describes the features it was fitted
        on. ``include_stats`` also stores the float64 statistics (a d x d matrix) so a loaded
        model can keep taking ``partial_fit``/``merge``. An existing file at ``path`` is refused unless
        ``overwrite=True`` (as ``pca fit -o`` without ``--overwrite``), and so is a name ending in another
        format's extension (``.csv``, ``.parquet``, ``.npy``: a model is a .npz archive).
        """
        r = self._result()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (precision= warned at the fit)
            try:  # a value set after the fit (whiten='False', n_components=0) made a file load refuses
                self._check_params()
            except BertfeatError as e:
                raise BertfeatError(f"cannot save this PCA: {e.marked_what} (set after the fit)", e.marked_fix) from None
        kept = kept_by(self.n_components, r, self.n_features_in_)
        if kept is not None and kept != r.n_components:  # a file load refuses (file._check_requested)
            raise BertfeatError(f"cannot save this PCA: its n_components={self.n_components!r} keeps {kept} of the "
                                f"fit's components, which kept {r.n_components} (n_components was set after the fit)", "fit it again with this n_components, or set n_components back to the value "
                                "it was fitted with")
        fp = dict(fingerprint) if fingerprint is not None else self.__dict__.get("fingerprint_")
        include_stats = check_switch(include_stats, "include_stats")  # ('no' is truthy: it stored them)
        if include_stats and self._stats is None:
            raise BertfeatError(f"this PCA has no statistics to save (fitted in one pass with solver={r.solver!r}"
                                + (", or loaded without them)" if "source_path_" in self.__dict__ else ")"),
                                "fit with solver='covariance' (or partial_fit) to keep them, or save without include_stats")
        stats = self._stats if include_stats else None
        params = self.get_params()
        precision = params.pop("precision")  # the deprecated name is saved as the accumulate it stands for
        if precision is not None and params["accumulate"] == DEFAULT_ACCUMULATE:
            params["accumulate"] = precision
        names = self.__dict__.get("feature_names_in_")
        model = SavedModel(params, r, self.n_features_in_, stats, fp, getattr(self, "source_", None),
                           None if names is None else list(names))
        path = save_model(path, model, overwrite=check_switch(overwrite, "overwrite"))
        self.fingerprint_ = fp
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> PCA:
        """Read a model written by ``save`` (``np.load(allow_pickle=False)``); ``source_sha256_`` is the sha256 of the
        bytes read (a file replaced while it was read is refused), which provenance records, whatever the file at
        the path holds later."""
        try:  # a regular file only: opening a named pipe would wait for a writer (load_model says what it is)
            before = file_sha256(path) if stat.S_ISREG(os.stat(path).st_mode) else None
        except (OSError, TypeError, ValueError):
            before = None  # (missing, a URL ...: load_model says what it is)
        model = load_model(path)  # the path as given: a URL refused as one, not as pathlib writes it (s3:/b)
        path = Path(path)
        sha = file_sha256(path)
        if sha != before:  # (it is read several times: a member of each file must not mix)
            raise BertfeatError(f"the PCA model {path} changed while it was read (it was replaced or written to)",
                                "rerun once the file is settled")
        try:
            pca = cls(**model.params)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # an old file's precision= is not the caller's doing
                pca._check_params()
        except (TypeError, BertfeatError) as e:
            why = e.message if isinstance(e, BertfeatError) else one_line(e)
            raise not_a_model(path, f"its parameters are not valid ({why})") from None
        check_meta_digest(path, model)
        pca._reset()
        pca._d = model.n_features
        pca._set_fitted(model.decomposition, pca._d)
        if model.stats is not None:
            pca._stats = model.stats
        pca.fingerprint_ = model.fingerprint
        pca.source_ = model.source
        pca.source_path_ = path
        pca.source_sha256_ = sha
        if model.feature_names is not None:
            pca.feature_names_in_ = np.asarray(model.feature_names, dtype=object)
        return pca

    # -- summary -----------------------------------------------------------------------------

    def components_needed(self, fraction: float) -> int | None:
        """Smallest k whose cumulative ratio exceeds ``fraction``, a number in (0, 1) (None if unknown: beyond the top k
        variances the randomized solver knows)."""
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0.0 < float(fraction) < 1.0:
            # "0.9", 2.0 or nan gave None (unknown), 0 and -1 gave 1: answers to no question
            raise BertfeatError(f"{opt('fraction', fraction)} is not a fraction in (0, 1)",
                                "pass the share of the variance the components should explain, e.g. 0.95")
        r = self._result()
        return components_needed(r.spectrum / r.total_variance if r.total_variance > 0 else np.zeros_like(r.spectrum),
                                 fraction)
