"""The scikit-learn estimator protocol, without importing scikit-learn.

``bertfeat.PCA`` must work inside scikit-learn pipelines (``clone``, ``GridSearchCV``, ``set_output``,
``check_estimator``) while ``import bertfeat`` never imports scikit-learn (a heavy, optional
dependency). So instead of inheriting ``BaseEstimator`` / ``TransformerMixin`` /
``ClassNamePrefixFeaturesOutMixin``, :class:`Estimator` implements what they provide, following
scikit-learn 1.9's own code and messages:

* ``get_params`` / ``set_params`` from the ``__init__`` signature (``clone`` needs nothing else); a keyword the
  constructor does not take is refused naming its parameters (``checked_init``), scikit-learn's name of one it calls
  otherwise (``svd_solver=``) with its own (``SKLEARN_NAMES``);
* ``__sklearn_tags__``, which imports ``sklearn.utils`` only when scikit-learn itself asks;
* ``feature_names_in_`` from DataFrame columns at fit, checked (same warnings and errors) later;
* ``get_feature_names_out``: ``pca0, pca1, ...``;
* ``set_output(transform="default" | "pandas" | "polars")``, and scikit-learn's global
  ``transform_output`` when scikit-learn is in use.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import sys
import warnings
from collections import Counter
from typing import Any

import numpy as np

from ..errors import BertfeatError, ParameterError, opt


def checked_init(init):
    """An estimator's ``__init__`` that refuses a keyword it does not take with bertfeat's error, which names its
    parameters (Python's bare "got an unexpected keyword argument 'svd_solver'" did not); the signature stays the one
    ``get_params``, ``clone`` and ``help`` read (``inspect.signature`` follows ``functools.wraps``' ``__wrapped__``)."""
    params = inspect.signature(init).parameters

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        for key in kwargs:
            if key not in params or key == "self":
                raise type(self)._unknown_parameter(key, kwargs[key])
        init(self, *args, **kwargs)

    return checked


def _column_names(X: Any) -> np.ndarray | None:
    """String column names of a pandas / polars DataFrame or a pyarrow Table, else None (scikit-learn's rule)."""
    pa = sys.modules.get("pyarrow")  # a pyarrow Table means pyarrow is imported
    if pa is not None and isinstance(X, pa.Table):
        cols = X.column_names  # its .columns are the columns' values, not their names
    elif pa is not None and isinstance(X, pa.RecordBatch):
        return None  # scikit-learn 1.9 reads no names from one (its .columns are arrays too)
    else:
        cols = getattr(X, "columns", None)
    if cols is None or not hasattr(X, "shape") or isinstance(X, np.ndarray):
        return None
    names = np.empty(len(list(cols)), dtype=object)  # 1-D whatever the names are (asarray nests sequences)
    names[:] = list(cols)
    if len(names) == 0:
        return None
    repeated = [f"{name!r} {count} times" for name, count in Counter(map(_hashable, names)).items() if count > 1]
    if repeated:  # as scikit-learn (narwhals): a model file of such names would be refused by PCA.load
        raise BertfeatError(f"Expected unique column names, got: {', '.join(repeated)}",
                            "rename the DataFrame's columns so that no two have the same name")
    types = sorted(t.__qualname__ for t in {type(v) for v in names})
    if len(types) > 1 and "str" in types:  # scikit-learn's TypeError, and a BertfeatError with its fix (docs/sklearn.md)
        raise ParameterError(
            "Feature names are only supported if all input features have string names, "
            f"but your input has {types} as feature name / column name types",
            "convert them all to strings (X.columns = X.columns.astype(str)), or to a non-string type, or pass the "
            "values without names (X.to_numpy())")
    return names if types == ["str"] else None


def _hashable(name: Any) -> Any:
    """A column name as a Counter key (an unhashable one by its repr)."""
    try:
        hash(name)
        return name
    except TypeError:
        return repr(name)


def _list_names(names: list) -> str:
    """Up to five names, then ``...``."""
    return ", ".join([repr(name) for name in names[:5]] + (["..."] if len(names) > 5 else []))


class Estimator:
    """Mixin: scikit-learn's estimator, transformer and feature-names-out protocol (see the module docstring)."""

    #: scikit-learn's names of parameters this estimator calls otherwise: name -> (its own name, scikit-learn's values
    #: -> its own (a value missing: none), its own values)
    SKLEARN_NAMES: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {}
    #: parameters of scikit-learn's counterpart that this estimator has no counterpart of
    SKLEARN_ONLY: frozenset[str] = frozenset()

    # -- parameters ----------------------------------------------------------------------------
    @classmethod
    def _parameter_hint(cls, key: str, value: Any) -> tuple[str | None, str]:
        """What is known of ``key``, a keyword the constructor does not take (scikit-learn's name of one of its
        parameters, or a parameter of scikit-learn's it has none of; else a close name), and how to fix it."""
        name = cls.__name__
        params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        own = f"{name}'s parameters: {', '.join(params)}"
        if key in cls.SKLEARN_NAMES:
            mine, values, choices = cls.SKLEARN_NAMES[key]
            ours = values.get(value) if isinstance(value, str) else None
            note = f"that is scikit-learn's name; bertfeat's {name} calls it {mine}"
            if ours:
                return note, f"pass {opt(mine, ours)} (one of {', '.join(choices)})"
            return note, f"pass {mine} as one of {', '.join(choices)}"
        if key in cls.SKLEARN_ONLY:
            return f"a parameter of scikit-learn's {name} that bertfeat's does not have", f"leave it out ({own})"
        close = difflib.get_close_matches(key, params, n=1)
        return None, f"did you mean {close[0]}? ({own})" if close else f"use one of {own}"

    @classmethod
    def _unknown_parameter(cls, key: str, value: Any) -> ParameterError:
        """The refusal of ``cls(key=value)``, a keyword its constructor does not take."""
        note, fix = cls._parameter_hint(key, value)
        what = f"{cls.__name__}() got an unexpected keyword argument {key!r}"
        return ParameterError(f"{what}: {note}" if note else what, fix)

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters and their values (scikit-learn convention)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any):
        """Set constructor parameters; returns self. Fitted state is untouched until the next fit."""
        valid = self._param_names()
        for key, value in params.items():
            if key not in valid:  # scikit-learn's words; scikit-learn's name of a parameter (svd_solver) said so
                note, fix = self._parameter_hint(key, value)
                raise BertfeatError(f"Invalid parameter {key!r} for estimator {type(self).__name__}"
                                    + (f": {note}" if note else ""), fix if note else f"valid parameters are: {valid}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if not (defaults.get(k) is v or
                                                                             _same(defaults.get(k), v))]
        return f"{type(self).__name__}({', '.join(changed)})"

    # -- scikit-learn hooks ---------------------------------------------------------------------
    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    transformer_tags=TransformerTags(preserves_dtype=["float64", "float32"]),
                    input_tags=InputTags(two_d_array=True))

    def __sklearn_is_fitted__(self) -> bool:
        return "components_" in self.__dict__

    # -- feature names --------------------------------------------------------------------------
    def _check_feature_names(self, X: Any, *, reset: bool) -> None:
        """Set (reset) or check ``feature_names_in_`` from X's columns, with scikit-learn's messages."""
        names = _column_names(X)
        if reset:
            if names is not None:
                self.feature_names_in_ = names
            else:
                self.__dict__.pop("feature_names_in_", None)
            return
        fitted = self.__dict__.get("feature_names_in_")
        name = type(self).__name__
        if fitted is None and names is None:
            return
        if fitted is None:
            warnings.warn(f"X has feature names, but {name} was fitted without feature names", UserWarning, stacklevel=3)
            return
        if names is None:
            warnings.warn(f"X does not have valid feature names, but {name} was fitted with feature names",
                          UserWarning, stacklevel=3)
            return
        if len(fitted) == len(names) and np.all(fitted == names):
            return
        msg = ["The feature names should match those that were passed during fit."]
        unexpected, missing = sorted(set(names) - set(fitted)), sorted(set(fitted) - set(names))
        if unexpected:
            msg.append(f"Feature names unseen at fit time: {_list_names(unexpected)}.")
        if missing:
            msg.append(f"Feature names seen at fit time, yet now missing: {_list_names(missing)}.")
        if not unexpected and not missing:
            msg.append("Feature names must be in the same order as they were in fit.")
        raise BertfeatError(" ".join(msg))  # one line, as every bertfeat error (scikit-learn's has a name per line)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Output column names: the class name in lower case and the component number (pca0, pca1, ...)."""
        n_out = self._n_features_out  # NotFittedError before fit
        if input_features is not None:
            input_features = np.asarray(input_features, dtype=object)
            fitted = self.__dict__.get("feature_names_in_")
            if fitted is not None and not np.array_equal(fitted, input_features):
                raise BertfeatError("input_features is not equal to feature_names_in_")
            if len(input_features) != self.n_features_in_:
                raise BertfeatError("input_features should have length equal to number of features "
                                    f"({self.n_features_in_}), got {len(input_features)}")
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(n_out)], dtype=object)

    # -- output containers ----------------------------------------------------------------------
    def set_output(self, *, transform: str | None = None):
        """Output container of transform / fit_transform: "default" (NumPy), "pandas" or "polars"; returns self."""
        if transform is None:
            return self
        if transform not in ("default", "pandas", "polars"):
            raise BertfeatError(f"unknown output container {transform!r}", "use 'default', 'pandas' or 'polars'")
        self._sklearn_output_config = {"transform": transform}
        return self

    def _output_container(self) -> str:
        mine = getattr(self, "_sklearn_output_config", {}).get("transform")
        if mine is not None:
            return mine
        if "sklearn" in sys.modules:  # scikit-learn's global set_config(transform_output=...)
            from sklearn import get_config

            return get_config().get("transform_output", "default")
        return "default"

    def _wrap_output(self, Y: np.ndarray, X: Any) -> Any:
        """Y as the configured container, with get_feature_names_out() columns (and X's pandas index)."""
        kind = self._output_container()
        if kind == "default":
            return Y
        columns = list(self.get_feature_names_out())
        if kind == "pandas":
            import pandas as pd

            index = X.index if isinstance(X, pd.DataFrame) else None
            return pd.DataFrame(Y, columns=columns, index=index, copy=False)
        import polars as pl

        return pl.DataFrame(Y, schema=columns, orient="row")


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False
