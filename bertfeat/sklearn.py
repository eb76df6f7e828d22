"""bertfeat in scikit-learn pipelines: ``TextFeatures``, texts in, sentence features out.

    from sklearn.pipeline import make_pipeline
    from sklearn.linear_model import LogisticRegression
    from bertfeat import PCA
    from bertfeat.sklearn import TextFeatures

    pipe = make_pipeline(TextFeatures(), PCA(64), LogisticRegression(max_iter=1000))
    pipe.fit(train_texts, train_labels)

Importing this module imports scikit-learn (``pip install "bertfeat[sklearn]"``); ``import bertfeat``
does not. The constructor only stores parameters (scikit-learn's rule), so ``clone``,
``GridSearchCV`` and ``set_params`` work as for any estimator. The model is loaded on first use, once
per process (a module cache keyed by the model's location and load settings), never pickled: a
pickled ``TextFeatures`` holds its parameters and the sha256 of the weights and of the model's other
files it was fitted with, and after unpickling (``joblib.load``, a ``cross_val_score`` worker process)
it reloads the model from its location and refuses weights or files with another sha256.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from .model.encoder import Encoder
from .model.inputs import LongTextError, NoTokensError, NonFiniteFeaturesError, TokenPastTableError, text_list
from .errors import BertfeatError
from .checks import check_size
from .readers.textcheck import check_text
from .run.options import encoder_keywords, feature_spec

__all__ = ["TextFeatures", "as_texts"]

_MEMO_LOCK = threading.Lock()
#: cache=True: the vector cache's key (cache.store.cache_fingerprint: every setting and file that changes a vector) ->
#: {text: its (D,) vector}, per process.
_MEMO: dict[str, dict[str, np.ndarray]] = {}


def _load_encoder(params) -> Encoder:
    """The process's Encoder for a TextFeatures' model and load settings (named as bertfeat.extract's options:
    run.options.encoder_keywords), from the cache bertfeat.extract and Dask workers share."""
    from .model.encoder_cache import shared_encoder

    return shared_encoder(params.model, **encoder_keywords(params))


def as_texts(X: Any) -> list[str]:
    """A list, tuple, iterator or generator, 1-D (or (n, 1)) NumPy array, pandas / polars Series, pyarrow Array or
    one-column DataFrame / pyarrow Table of strings -> a list of str; anything else (a bare str or bytes too) is a ValueError naming what is
    wrong. An iterator is consumed: as scikit-learn's text vectorizers, read it once."""
    return _texts(X)[0]


def _texts(X: Any) -> tuple[list[str], Callable[[int], str]]:
    """as_texts(X), and how a message names X's row i (``row_label``)."""
    if isinstance(X, (str, bytes, bytearray, memoryview)):  # not a sequence of texts, but of characters or bytes
        what = "a single string" if isinstance(X, str) else f"a single {type(X).__name__} object"
        raise BertfeatError(f"X is {what}", LIST_FIX)
    if isinstance(X, Iterator):  # a generator, map(...), iter(...), an open file: no shape, read once
        X = list(X)
    if hasattr(X, "iloc") and hasattr(X, "columns") and len(X.shape) == 2 and X.shape[1] == 1:
        X = X.iloc[:, 0]  # a one-column pandas DataFrame: its column, whose index names its rows
    label = row_label(X)
    if hasattr(X, "columns") and hasattr(X, "shape"):  # a polars DataFrame, a pyarrow Table, a wider frame: as Encoder.encode
        return text_list(X, "X"), label
    if hasattr(X, "to_pylist"):  # a pyarrow Array / ChunkedArray
        X = X.to_pylist()
    if hasattr(X, "to_list"):  # pandas / polars Series
        values = X.to_list()
    else:
        _check_unmasked(X)
        arr = np.asarray(X, dtype=object)
        if arr.ndim == 0:  # None, a number, a set, a dict, a SciPy sparse matrix: one object, not texts
            raise BertfeatError(f"X is {_what(X)}, not a list of texts", LIST_FIX)
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise BertfeatError(f"X has shape {arr.shape}, not a list of texts", "pass a 1-D list or array of strings")
        values = arr.tolist()
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise BertfeatError(f"{label(i)} is {type(v).__name__} {v!r:.40}, not a string",
                                "pass texts only (fill or drop missing values first)")
        check_text(v, label(i))  # the rule of Encoder.encode and extract (textcheck.text_reason)
    return values, label


def row_label(X) -> Callable[[int], str]:
    """How a message names row i of X: ``X[i]``, and for a pandas Series whose index is not 0, 1, ... its label too
    (``X[1] (index label 7)``: a Series of a filtered frame, where ``X[1]`` would look up the label 1)."""
    index = getattr(X, "index", None)
    if index is None or not hasattr(X, "iloc") or (type(index).__name__ == "RangeIndex" and index.start == 0
                                                    and index.step == 1):
        return lambda i: f"X[{i}]"
    labels = index.tolist()  # Python values: 7, not np.int64(7)
    return lambda i: f"X[{i}] (index label {labels[i]!r:.40})"


REFIT_FIX = "restore the original model files, or refit the pipeline"
LIST_FIX = "pass a list (or array, Series, one-column DataFrame, iterator) of texts"


def _what(X) -> str:
    """How a message names an X that is one object, not texts."""
    if X is None:
        return "None"
    if isinstance(X, (set, frozenset)):
        return f"a {type(X).__name__} (no order, so no rows)"
    if hasattr(X, "shape"):
        return f"a {type(X).__name__} of shape {tuple(X.shape)}"
    return f"{type(X).__name__} {X!r:.40}"


def _check_unmasked(X) -> None:
    """A NumPy masked array's masked entries are missing values (np.asarray would give the values under the mask)."""
    mask = np.ma.getmaskarray(X) if isinstance(X, np.ma.MaskedArray) else None
    if mask is not None and mask.any():
        i = int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0]) if mask.ndim else 0
        raise BertfeatError(f"X[{i}] is masked, not a string", "pass texts only (fill or drop missing values first)")


def _prepare(enc: Encoder, texts: list[str], spec, where, label):
    """enc.prepare; a text with a token the model cannot embed, or with no token, is named by its place in X
    (``where[i]``: text i's; ``label``: row_label's), a text too long under long_text='error' by ``label`` (``texts``
    is X whole then: the memo's caller sees to it)."""
    try:
        return enc.prepare(texts, None, spec)
    except TokenPastTableError as e:
        raise TokenPastTableError.at([where[r] for r in e.rows], e.tokens, e.table_rows, label) from None
    except NoTokensError as e:
        raise NoTokensError.at([where[r] for r in e.rows], label) from None
    except LongTextError as e:
        raise LongTextError(e.rows, e.n_tokens, e.max_length, e.pairs, label=label, prompt_tokens=e.prompt_tokens) from None


def _run(enc: Encoder, prep, spec, max_rows, where, label) -> np.ndarray:
    """enc.run; a row whose features come out NaN or infinite is named by its place in X, as _prepare's (it said
    ``texts[0]``, Encoder.encode's name, or its place among the memo's new texts)."""
    try:
        return enc.run(prep, spec, max_rows=max_rows)
    except NonFiniteFeaturesError as e:
        raise NonFiniteFeaturesError.at([where[r] for r in e.rows], label) from None


class TextFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Sentence features of texts with a BERT-family model (``bertfeat.Encoder``), as a scikit-learn transformer.

    Parameters are ``bertfeat.extract``'s options of the same names (run/options.py), read as the engines read them
    (``encoder_keywords``, ``feature_spec``): ``model`` (a directory, a hub id in the Hugging Face cache, default
    all-MiniLM-L6-v2), ``pooling`` / ``layers`` / ``layer_agg`` / ``normalize`` (None: the model's own embedding),
    ``truncate_dim``, ``prompt`` / ``prompt_name``, ``max_length``, ``long_text``, ``stride``, ``precision`` (None: the Encoder's
    default), ``threads``, ``max_batch_tokens``; and its own: ``batch_size`` (a cap on rows per batch).

    ``cache=True`` keeps every text's vector in memory for the life of the process (keyed by the
    weights, every setting that changes a vector, and the text), so grid searches and
    cross-validation encode each text once instead of once per fold and grid point. A cached row was
    computed among other batch neighbours, so it equals a fresh one to float32 rounding (~1e-6);
    without the cache, ``transform`` is ``Encoder.encode`` bit for bit. It costs 4 D bytes per
    distinct text (1.5 kB at D = 384).

    Fitted attributes: ``n_features_out_`` (the feature width), ``model_id_``, ``weights_sha256_``,
    ``model_files_sha256_`` (the model's other files: config, tokenizer, modules),
    ``precision_`` (the precision that runs), ``spec_`` (the settings that define the vectors, as in provenance).
    """

    def __init__(self, model=None, *, pooling=None, layers=None, layer_agg="mean", normalize=None, prompt=None,
                 prompt_name=None, max_length=None, long_text="truncate", stride=None, precision=None, threads=None,
                 max_batch_tokens=None, batch_size=None, cache=False, truncate_dim=None):
        self.model = model
        self.pooling = pooling
        self.layers = layers
        self.layer_agg = layer_agg
        self.normalize = normalize
        self.prompt = prompt
        self.prompt_name = prompt_name
        self.max_length = max_length
        self.long_text = long_text
        self.stride = stride
        self.precision = precision
        self.threads = threads
        self.max_batch_tokens = max_batch_tokens
        self.batch_size = batch_size
        self.cache = cache
        self.truncate_dim = truncate_dim

    # -- the model, loaded lazily -------------------------------------------------------------
    def _encoder(self, check: bool = True) -> Encoder:
        """The model (cached per process); ``check``: refuse weights other than the ones fitted with (transform, a
        pipeline unpickled elsewhere), not at fit, which may change the model on purpose (set_params(model=...))."""
        enc = _load_encoder(self)
        expected = getattr(self, "weights_sha256_", None) if check else None
        if expected is not None and enc.weights_sha256 != expected:
            fitted = getattr(self, "model_id_", None)
            if fitted is not None and enc.model_id != fitted:  # set_params(model=...) since fit
                raise BertfeatError(f"this TextFeatures was fitted with the model {fitted}, and its model is now "
                                    f"{enc.model_id}", "fit it again after set_params(model=...)")
            path = str(enc.location.path)
            where = enc.model_id if path == enc.model_id else f"{enc.model_id} at {path}"
            raise BertfeatError(
                f"the weights of {where} are not the ones this TextFeatures was fitted "
                f"with (sha256 {enc.weights_sha256[:12]}... instead of {expected[:12]}...)", REFIT_FIX)
        if check:  # its tokenizer, config and modules too (a TextFeatures pickled before 0.3.0 recorded none)
            enc.check_files_as(getattr(self, "model_files_sha256_", None), "this TextFeatures was fitted with", REFIT_FIX)
        return enc

    def _check_cache(self) -> None:
        """cache is True or False (at fit, and at transform after a set_params): cache="no" is truthy, and kept every
        vector in memory."""
        if not isinstance(self.cache, (bool, np.bool_)):
            raise BertfeatError(f"cache={self.cache!r} is not True or False",
                                "pass cache=True to keep each text's vector in memory, or cache=False")

    def _spec(self, enc: Encoder):
        return feature_spec(enc, self)  # the parameters named as bertfeat.extract's options, read as the engines do

    # -- scikit-learn API ---------------------------------------------------------------------
    def fit(self, X, y=None):
        """Check the texts and the settings, load the model; nothing is learned from X."""
        return self._fit(as_texts(X))

    def _fit(self, texts: list[str]):
        """fit on texts already checked (as_texts)."""
        check_size(self.batch_size, "batch_size", 1, None, " (rows per batch at most)")
        self._check_cache()
        enc = self._encoder(check=False)
        spec = self._spec(enc)
        self.model_id_ = enc.model_id
        self.weights_sha256_ = enc.weights_sha256
        self.model_files_sha256_ = enc.files_sha256()
        self.precision_ = enc.precision  # what runs ("auto" resolved)
        self.spec_ = spec.to_dict()
        self.n_features_out_ = self._n_features_out = enc.output_dim(spec)
        return self

    def transform(self, X) -> np.ndarray:
        """Texts -> (n, n_features_out_) float32 features."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_features_out_")
        return self._transform(*_texts(X))

    def fit_transform(self, X, y=None) -> np.ndarray:
        """fit(X), then transform(X), reading X once (an iterator of texts too)."""
        texts, label = _texts(X)
        return self._fit(texts)._transform(texts, label)

    def _transform(self, texts: list[str], label) -> np.ndarray:
        """transform texts already checked (as_texts; ``label``: how a message names row i); a fitted TextFeatures."""
        enc = self._encoder()
        spec = self._spec(enc)
        if spec.to_dict() != self.spec_ or enc.precision != getattr(self, "precision_", enc.precision):
            raise BertfeatError("the parameters changed since fit", "fit again after set_params")
        self._check_cache()
        if not texts:
            return np.zeros((0, self.n_features_out_), dtype=np.float32)
        if not self.cache:
            rows = range(len(texts))
            return _run(enc, _prepare(enc, texts, spec, rows, label), spec, self.batch_size, rows, label)
        from .cache.store import cache_fingerprint

        key = cache_fingerprint(enc, spec)[0]  # the vector cache's key: weights, model files, GEMM path, settings
        with _MEMO_LOCK:
            # an fp32 and a bf16 TextFeatures of the same model in one process never share vectors, nor one before and
            # one after the model folder's tokenizer or config was edited (the key was the weights and the spec alone)
            memo = _MEMO.setdefault(key, {})
        todo = list(dict.fromkeys(t for t in texts if t not in memo))
        if todo:
            first = {t: i for i, t in reversed(list(enumerate(texts)))}  # a text's first place in X
            where = [first[t] for t in todo]
            try:
                prep = _prepare(enc, todo, spec, where, label)
            except LongTextError:  # its rows are todo's (distinct, not cached): X tokenized whole names X's, and counts them
                _prepare(enc, texts, spec, range(len(texts)), label)
                raise
            memo.update(zip(todo, _run(enc, prep, spec, self.batch_size, where, label)))
        return np.stack([memo[t] for t in texts])  # (n, D) float32

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = True
        return tags
