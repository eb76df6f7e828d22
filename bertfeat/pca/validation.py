"""Input and parameter checks of the PCA (bertfeat.pca.estimator): the feature matrix, ``n_components``, ``accumulate``.

Owns: turning what a caller passes into a 2-D float32 / float64 array (or refusing it, saying
why), the NaN / inf error that names the first bad row and column (a feature file's row and id: ``rows_of``),
the checks of ``n_components``' type (here) and range (against min(n_samples, n_features), once they are
known), and the ``accumulate`` mode with its deprecated name ``precision``.
Nothing here keeps state; every function is pure apart from the errors it raises.
"""

from __future__ import annotations

import numbers
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import BertfeatError, one_line, opt

__all__ = ["ACCUMULATE_MODES", "DEFAULT_ACCUMULATE", "PRECISION_DEPRECATED", "as_2d_float", "NonFiniteError",
           "ProjectionOverflowError", "rows_of", "nonfinite_error",
           "overflow_error",
           "check_n_components_spec", "check_max_components", "accumulate_mode", "check_merge_feature_names",
           "check_seed"]

#: How the statistics of float32 rows accumulate (PCA's ``accumulate``; see bertfeat.pca.stats.chunk_stats).
ACCUMULATE_MODES = ("mixed", "float64")
DEFAULT_ACCUMULATE = "mixed"
#: The DeprecationWarning of the PCA's old keyword (``accumulate`` was called ``precision`` up to 0.2.0).
PRECISION_DEPRECATED = ("the PCA's precision= is deprecated (it is not the encoder's precision), use accumulate= "
                        "with the same value ('mixed' or 'float64'); precision= will be removed after the next release")


def as_2d_float(X: Any) -> np.ndarray:
    """Return X as a 2-D float32 or float64 array (other numeric types become float64).

    Accepts NumPy arrays, pandas / polars DataFrames and anything ``np.asarray`` takes. Object
    arrays of numbers are converted (a non-number in them is refused naming its row and column); ragged rows,
    sparse matrices and complex numbers are refused.
    """
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise BertfeatError("sparse input is not supported by bertfeat's PCA", "pass a dense array, e.g. X.toarray()")
    pd = sys.modules.get("pandas")  # a pandas object means pandas is imported
    if pd is not None and isinstance(X, (pd.DataFrame, pd.Series)):
        dtypes = list(X.dtypes) if isinstance(X, pd.DataFrame) else [X.dtype]
        if any(isinstance(t, pd.api.extensions.ExtensionDtype) for t in dtypes):
            try:  # nullable columns (Float64, Int64): pd.NA becomes NaN, refused as NaN is, with its row and column
                X = X.to_numpy(dtype=np.float64, na_value=np.nan)
            except (TypeError, ValueError):  # not numbers: the checks below say so
                pass
    try:
        X = np.asarray(X)
    except ValueError as e:  # rows of different lengths ([[1, 2], [3]])
        raise BertfeatError(f"the rows of X are not one matrix ({one_line(e, 120)})",
                            "pass a matrix whose rows all have the same number of features") from None
    if np.iscomplexobj(X):
        raise BertfeatError("Complex data not supported", "pass real-valued features")
    if X.dtype == object:
        X = _objects_as_float(X)
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


def _objects_as_float(X: np.ndarray) -> np.ndarray:
    """An object array of numbers as float64; a value that is not a number (a text column of a DataFrame, a category)
    is refused naming its place, not with NumPy's 'could not convert string to float'."""
    try:
        return X.astype(np.float64)
    except (ValueError, TypeError):
        pass
    for index, v in np.ndenumerate(X):
        try:
            float(v)
        except (ValueError, TypeError):
            if isinstance(v, (dict, list, tuple, set)):  # NumPy's TypeError, as scikit-learn's check_dtype_object expects
                raise
            where = f"row {index[0]}, column {index[1]}" if len(index) == 2 else f"item {index}"
            raise BertfeatError(f"X holds {v!r:.40} ({type(v).__name__}) at {where}, not a number",
                                "pass numeric features only (drop or encode a text, category or date column first)"
                                ) from None
    raise BertfeatError("X holds values that are not numbers", "pass a float32 or float64 feature matrix")


class NonFiniteError(BertfeatError):
    """Features holding NaN or inf: the first one's ``row`` (0-based, the caller's ``row_offset`` added), ``col`` and
    ``value``, and the step that refused them (``action``: fitting, transforming ...), so that a caller reading a
    feature file can say which of its rows it is (``in_file``)."""

    def __init__(self, what: str, fix: str | None = None, row: int = 0, col: int = 0, value: float = float("nan"),
                 action: str = "fitting"):
        super().__init__(what, fix)
        self.row, self.col, self.value, self.action = row, col, value, action

    def __reduce__(self):
        return (type(self), (self._what, self._fix, self.row, self.col, self.value, self.action))

    def in_file(self, path: Any, ident: Any = None) -> BertfeatError:
        """This error said of ``path``'s row (its id ``ident``, when the file has an id column)."""
        shown = "" if ident is None else f" (id {ident!r})" if isinstance(ident, str) else f" (id {ident})"
        return BertfeatError(f"{path}: features contain NaN or inf, first at row {self.row}{shown}, column {self.col} "
                             f"({self.value})", f"remove or repair those rows before {self.action}")


class ProjectionOverflowError(NonFiniteError):
    """Finite float32 rows whose projections pass float32's largest (``transform``): ``row`` is the first such row, so
    that a caller reading a feature file names it (``in_file``); in a file there is no float64 to pass instead."""

    def in_file(self, path: Any, ident: Any = None) -> BertfeatError:
        shown = "" if ident is None else f" (id {ident!r})" if isinstance(ident, str) else f" (id {ident})"
        return BertfeatError(f"{path}: row {self.row}{shown}: its features are too large, their projection overflows "
                             "float32 (feature files are read and projected in float32)",
                             "scale the features down before transforming")


@contextmanager
def rows_of(src: Any, ids: Any, first: int) -> Iterator[None]:
    """A NaN or inf in the rows ``first``.. of the feature file ``src`` (a features.FeatureSource; ``ids``: those
    rows' ids) refused as that file's row, with its id when the file has an id column: the PCA's own error numbers
    the rows it was given and names no file."""
    try:
        yield
    except NonFiniteError as e:
        ident = None if src.id_name is None or ids is None else ids[e.row - first]
        raise e.in_file(src.path, ident.item() if isinstance(ident, np.generic) else ident) from None


def nonfinite_error(X: np.ndarray, row_offset: int, action: str, Y: np.ndarray | None = None) -> BertfeatError:
    """Build the NaN/inf error, naming the first bad row and column (0-based); of finite rows whose projections ``Y``
    (transforming) overflow, the first such row."""
    bad = ~np.isfinite(X)
    count = int(bad.sum())
    if count == 0:
        if action == "transforming":  # float32 rows project in float32 (the output's type), which can overflow
            row = row_offset + (int(np.argmin(np.isfinite(Y).all(axis=1))) if Y is not None else 0)
            return ProjectionOverflowError(f"features are too large: their projections overflow {X.dtype}",
                                           "scale the features down before transforming" +
                                           (", or pass them as float64" if X.dtype != np.float64 else ""), row,
                                           action=action)
        return BertfeatError(
            "features are too large: the statistics overflowed to inf",
            f"rescale the features before {action}",
        )
    row, col = (int(i) for i in np.argwhere(bad)[0])
    return NonFiniteError(
        f"features contain NaN or inf: {count} value(s), first at row {row + row_offset}, "
        f"column {col} ({X[row, col]})",
        f"remove or repair those rows before {action}", row + row_offset, col, float(X[row, col]), action,
    )


def overflow_error(first: int, last: int) -> BertfeatError:
    """The error of finite features whose float64 products overflow (rows ``first``-``last``, 0-based): the
    statistics' scatter matrix or an SVD's squared singular values (values near 1e154 or larger)."""
    return BertfeatError(f"rows {first}-{last}: products of these float64 features overflow (values near 1e154 or "
                         "larger)", "scale the features down")


def underflow_error(first: int, last: int) -> BertfeatError:
    """The error of features that vary but whose float64 squares fall below float64's normal range (rows
    ``first``-``last``, 0-based; values varying by about 1e-154 or less): their variances came out 5e-4 off at 1e-160
    and all 0 at 1e-165, where scikit-learn gives NaN ratios. ``overflow_error`` refuses the other end."""
    return BertfeatError(f"rows {first}-{last}: these float64 features vary by so little (about 1e-154 or less) that "
                         "their squares underflow and their variances would be lost",
                         "scale the features up (multiply them by 1e150, say): the components stay the same")


def check_n_components_spec(spec: Any) -> None:
    """Validate the *type* of n_components (range checks need n and d)."""
    if spec is None or (isinstance(spec, str) and spec == "mle"):  # 'mle': Minka's choice (solvers.infer_dimension)
        return
    if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
        raise BertfeatError(
            f"n_components={spec!r} is not a number",
            "pass a whole number of components (e.g. 100), a fraction in (0, 1) (e.g. 0.95), 'mle' or None",
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


def check_max_components(spec: Any, n: int, d: int) -> None:
    """Raise if an integer n_components exceeds min(n, d)."""
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool) and spec > min(n, d):
        raise BertfeatError(
            f"{opt('n_components', spec)} is larger than min(n_samples, n_features) = min({n}, {d}) = {min(n, d)}",
            f"choose {opt('n_components')} <= {min(n, d)}, or a fraction such as 0.95 to keep 95% of the variance",
        )


def check_seed(seed: Any) -> None:
    """``random_state`` (the randomized solver's seed): None, a whole number >= 0 or a numpy Generator."""
    if seed is None or isinstance(seed, np.random.Generator):
        return
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise BertfeatError(f"{opt('random_state', seed)} is not a seed",
                            "pass a whole number >= 0 (the same number gives the same fit), a numpy Generator, or None")


def accumulate_mode(accumulate: str | None, precision: str | None = None) -> str:
    """The accumulate mode given as ``accumulate`` or as ``precision``, its deprecated name (None: not given).

    Neither given: ``DEFAULT_ACCUMULATE``. Both given with different values: an error naming both.
    A value outside ``ACCUMULATE_MODES``: an error naming the keyword it came as.
    """
    if accumulate is not None and precision is not None and accumulate != precision:
        raise BertfeatError(
            f"{opt('accumulate', accumulate)} and {opt('precision', precision)} disagree",
            f"pass {opt('accumulate')} only ({opt('precision')} is its deprecated name)",
        )
    if precision is not None:
        name, value = "precision", precision
    else:
        name, value = "accumulate", DEFAULT_ACCUMULATE if accumulate is None else accumulate
    if value not in ACCUMULATE_MODES:
        raise BertfeatError(f"unknown {opt(name, value)}", f"use one of: {', '.join(ACCUMULATE_MODES)}")
    return value


def check_merge_feature_names(ours: np.ndarray | None, theirs: np.ndarray | None) -> None:
    """``PCA.merge``: the ``feature_names_in_`` of two PCAs with rows (None: fitted without names) name the same
    columns in the same order, as ``partial_fit`` checks a later chunk's, in the same words: else an error listing the
    names only one has (or saying the order differs). One side without names: a UserWarning, as from
    ``partial_fit``."""
    if ours is None and theirs is None:
        return
    if ours is None or theirs is None:
        which = ("this PCA", "the other") if theirs is None else ("the other PCA", "this one")
        warnings.warn(f"{which[0]} was fitted with feature names, but {which[1]} without feature names: merging them "
                      "assumes the same columns in the same order", UserWarning, stacklevel=3)
        return
    if len(ours) == len(theirs) and np.all(ours == theirs):
        return
    lines = ["The feature names of the PCAs merged should match."]
    unexpected, missing = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    if unexpected:
        lines.append(f"Feature names of the other PCA, unseen by this one: {_listed(unexpected)}.")
    if missing:
        lines.append(f"Feature names of this PCA, missing from the other: {_listed(missing)}.")
    if not unexpected and not missing:
        lines.append("Feature names must be in the same order in both PCAs.")
    # one line, as every bertfeat error (scikit-learn's message lists the names on lines of their own)
    raise BertfeatError(" ".join(lines), "merge partial fits of DataFrames with the same columns, in the same order")


def _listed(names: list) -> str:
    """Up to five names, then ``...`` (as scikit-learn's feature-name messages list them)."""
    return ", ".join([repr(name) for name in names[:5]] + (["..."] if len(names) > 5 else []))
