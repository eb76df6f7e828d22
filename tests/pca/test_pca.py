"""bertfeat.pca.estimator.PCA: parity with scikit-learn, streaming, merging, model files, errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bertfeat.errors import BertfeatError, BertfeatWarning
from conftest import missing, need
from bertfeat.pca.estimator import PCA, NotFittedError, choose_solver

SKLEARN_VERSION = "1.9.1"  # parity (signs, ddof, fraction rule) is pinned to this release


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """The test machine is small and shared: oversubscribed BLAS threads make LAPACK ~100x slower."""
    try:
        import sklearn.decomposition  # noqa: F401  (load scipy's BLAS before limiting it)
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def sk():
    """scikit-learn, pinned: skip (with the reason) on any other version."""
    sklearn = need("sklearn")
    if sklearn.__version__ != SKLEARN_VERSION:
        missing(f"parity is pinned to scikit-learn {SKLEARN_VERSION}, found {sklearn.__version__}")
    from sklearn.decomposition import PCA as SkPCA

    return SkPCA


def known_spectrum(n=1500, d=40, decay=0.8, offset=0.0, seed=0, dtype=np.float64):
    """Rows with covariance Q diag(decay**i) Q^T (a known, well-separated spectrum) around `offset`."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    X = (rng.standard_normal((n, d)) * np.sqrt(decay ** np.arange(d))) @ Q.T + offset
    return X.astype(dtype)


@pytest.fixture(scope="module")
def real_features(minilm_dir, real_sentences):
    """all-MiniLM-L6-v2 features (400, 384) float32 of real sentences, by bertfeat's own encoder."""
    from bertfeat import Encoder  # an import error is a failure, never a quiet fallback to another encoder

    return Encoder(str(minilm_dir)).encode(real_sentences)


def assert_parity(ours, theirs, X, comp_tol, transform_atol=None, k=None):
    """Attributes and transform equal. transform_atol None (float32): what the component
    difference implies, max_i ||ours_i - theirs_i||_2 * max row norm, plus float32 rounding."""
    k = k or theirs.n_components_
    assert ours.n_components_ == theirs.n_components_
    np.testing.assert_allclose(ours.components_[:k], theirs.components_[:k], rtol=0, atol=comp_tol)
    np.testing.assert_allclose(ours.explained_variance_ratio_, theirs.explained_variance_ratio_, rtol=0, atol=1e-7)
    rtol = 1e-5 if X.dtype == np.float32 else 1e-9
    top = theirs.explained_variance_[0]
    np.testing.assert_allclose(ours.explained_variance_[:k], theirs.explained_variance_[:k], rtol=rtol, atol=rtol * 1e-3 * top)
    np.testing.assert_allclose(ours.singular_values_[:k], theirs.singular_values_[:k], rtol=rtol)
    # scikit-learn averages float32 input in float32; ours is float64
    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-5 if X.dtype == np.float32 else 0, atol=1e-6 if X.dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(ours.noise_variance_, theirs.noise_variance_, rtol=1e-4 if X.dtype == np.float32 else 1e-9, atol=1e-12)
    assert ours.n_samples_ == theirs.n_samples_ and ours.n_features_in_ == theirs.n_features_in_
    Y, Ys = ours.transform(X), theirs.transform(X)
    assert Y.dtype == X.dtype
    if transform_atol is None:
        comp_err = np.linalg.norm(ours.components_[:k] - theirs.components_[:k], axis=1).max()
        transform_atol = (comp_err + 1e-6) * row_norm(X)
    np.testing.assert_allclose(Y[:, :k], Ys[:, :k], rtol=0, atol=transform_atol)


# -- parity with scikit-learn PCA(svd_solver="full") -------------------------------------------


@pytest.mark.parametrize("solver", ["svd", "covariance", "auto"])
def test_parity_float64_known_spectrum(sk, solver):
    X = known_spectrum(offset=3.0)
    ours = PCA(10, solver=solver).fit(X)
    assert_parity(ours, sk(10, svd_solver="full").fit(X), X, comp_tol=1e-9, transform_atol=1e-9)
    # the known spectrum is recovered (sample noise aside)
    assert ours.explained_variance_[0] == pytest.approx(1.0, rel=0.15)


def row_norm(X) -> float:
    return float(np.linalg.norm(X - X.mean(0), axis=1).max())


@pytest.mark.parametrize("solver", ["svd", "covariance"])
def test_parity_float32_known_spectrum(sk, solver):
    X = known_spectrum(d=64, decay=0.9, offset=0.5, dtype=np.float32)
    ours = PCA(16, solver=solver).fit(X)
    # scikit-learn's float32 transform carries its float32 component error times the row norm
    assert_parity(ours, sk(16, svd_solver="full").fit(X), X, comp_tol=1e-5)
    # close to the float64 answer: the svd solver works in float64 throughout; the covariance
    # solver multiplies float32 blocks of <= BLOCK_ROWS rows and adds them in float64. Both
    # are nearer the float64 answer than scikit-learn's own float32 SVD (2e-6 and 6e-8 here).
    exact = sk(16, svd_solver="full").fit(X.astype(np.float64))
    comp_tol, ratio_tol = {"svd": (1e-9, 1e-12), "covariance": (1e-6, 1e-8)}[solver]
    np.testing.assert_allclose(ours.components_, exact.components_, atol=comp_tol)
    np.testing.assert_allclose(ours.explained_variance_ratio_, exact.explained_variance_ratio_, atol=ratio_tol)
    np.testing.assert_allclose(ours.transform(X), exact.transform(X.astype(np.float64)), atol=1e-6 * row_norm(X))


def test_parity_whiten(sk):
    X = known_spectrum(offset=1.0)
    ours, theirs = PCA(8, whiten=True).fit(X), sk(8, svd_solver="full", whiten=True).fit(X)
    assert_parity(ours, theirs, X, comp_tol=1e-9, transform_atol=1e-9)
    Y = ours.transform(X)
    np.testing.assert_allclose(Y.var(axis=0, ddof=1), 1.0, atol=1e-9)  # whitened: unit variance
    np.testing.assert_allclose(ours.inverse_transform(Y), theirs.inverse_transform(Y), atol=1e-9)


@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.95, 0.99])
def test_parity_fractional_n_components(sk, fraction):
    X = known_spectrum()
    ours, theirs = PCA(fraction).fit(X), sk(fraction, svd_solver="full").fit(X)
    assert ours.n_components_ == theirs.n_components_
    assert_parity(ours, theirs, X, comp_tol=1e-9, transform_atol=1e-9)
    # the rule: the smallest k whose cumulative ratio exceeds the fraction
    assert ours.explained_variance_ratio_.sum() > fraction
    assert ours.explained_variance_ratio_[:-1].sum() <= fraction


def test_parity_wide_data_n_smaller_than_d(sk):
    X = known_spectrum(n=30, d=50, decay=0.9)
    for solver in ("svd", "covariance"):
        ours = PCA(solver=solver).fit(X)
        theirs = sk(svd_solver="full").fit(X)
        assert ours.n_components_ == 30
        # rank 29 after centring: the 30th direction is arbitrary, compare the determined ones
        assert_parity(ours, theirs, X, comp_tol=1e-9, transform_atol=1e-9, k=29)


def test_parity_real_minilm_features(sk, real_features):
    X32 = np.asarray(real_features, dtype=np.float32)
    assert X32.shape == (400, 384)
    # float64: every determined component (the spectrum has a few exactly-null directions)
    X64 = X32.astype(np.float64)
    theirs64 = sk(svd_solver="full").fit(X64)
    ours64 = PCA().fit(X64)
    assert ours64.fit_solver_ == "covariance"
    rank = int((theirs64.explained_variance_ > 1e-12 * theirs64.explained_variance_[0]).sum())
    assert rank >= 370
    assert_parity(ours64, theirs64, X64, comp_tol=1e-9, transform_atol=1e-9, k=rank)
    # float32: scikit-learn works in float32, and its own float32 error on a component grows as the
    # eigen-gap shrinks: components 14-15 of these features are 0.8 % apart (0.3605 vs 0.3576), and
    # with OpenBLAS's AVX-512 kernels scikit-learn's float32 components there are 1.3e-5 away from its
    # own float64 ones (ours are 1e-14 away). So the 1e-5 comparison covers the leading components
    # whose gaps to both neighbours are >= 1 %; all 32 are checked against float64 at 1e-9 below.
    ours32, theirs32 = PCA(32).fit(X32), sk(32, svd_solver="full").fit(X32)
    ev = theirs64.explained_variance_[:33]
    next_gap = (ev[:-1] - ev[1:]) / ev[:-1]  # (32,) relative gap of component i to i + 1
    prev_gap = np.r_[np.inf, next_gap[:-1] * ev[:-2] / ev[1:-1]]  # to i - 1
    close = np.flatnonzero(np.minimum(next_gap, prev_gap) < 0.01)
    well = int(close[0]) if close.size else 32
    assert well >= 10
    assert_parity(ours32, theirs32, X32, comp_tol=1e-5, k=well)
    # the float32 transform against scikit-learn's float64 one: 1.1e-6 off on an Intel Xeon with AVX-512
    # (the features and the fit's float32 blocks round differently per CPU; projecting in float64 with our
    # components is as far off), where scikit-learn's own float32 transform is 1.5e-5 off
    np.testing.assert_allclose(ours32.transform(X32), theirs64.transform(X64)[:, :32], atol=2e-6 * row_norm(X32))
    # our float32 fit multiplies float32 blocks and adds them in float64: all 32 components are
    # within 1e-6 of scikit-learn's float64 fit (3e-7 here), the close pair 14-15 included
    np.testing.assert_allclose(ours32.components_, theirs64.components_[:32], atol=1e-6)
    np.testing.assert_allclose(ours32.explained_variance_ratio_, theirs64.explained_variance_ratio_[:32], atol=1e-8)
    # and streaming the real features in chunks gives the same model
    stream = PCA(32)
    for chunk in np.array_split(X32, 7):
        stream.partial_fit(chunk)
    np.testing.assert_allclose(stream.finalize().components_, ours32.components_, atol=1e-6)
    # float64 input takes the float64 path: chunking changes nothing beyond float64 rounding
    stream64 = PCA(32)
    for chunk in np.array_split(X64, 7):
        stream64.partial_fit(chunk)
    np.testing.assert_allclose(stream64.finalize().components_, theirs64.components_[:32], atol=1e-9)


def test_sign_rule_largest_loading_positive():
    X = known_spectrum(d=20)
    for solver in ("svd", "covariance"):
        C = PCA(solver=solver).fit(X).components_
        assert (C[np.arange(len(C)), np.abs(C).argmax(axis=1)] > 0).all()


# -- streaming and merging ---------------------------------------------------------------------


def test_partial_fit_ten_chunks_equals_fit():
    X = known_spectrum(n=3000, d=30, offset=2.0)
    full = PCA(12, solver="svd").fit(X)
    stream = PCA(12)
    for chunk in np.array_split(X, 10):
        stream.partial_fit(chunk)
    stream.finalize()
    assert stream.n_samples_ == 3000
    for name in ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_"):
        np.testing.assert_allclose(getattr(stream, name), getattr(full, name), rtol=0, atol=1e-8, err_msg=name)
    assert stream.noise_variance_ == pytest.approx(full.noise_variance_, abs=1e-8)
    np.testing.assert_allclose(stream.transform(X), full.transform(X), atol=1e-8)


def test_merge_of_three_partial_fits_equals_one_fit():
    X = known_spectrum(n=2400, d=25)
    parts = [X[:300], X[300:1500], X[1500:]]
    workers = [PCA(10).partial_fit(p + 0.0) for p in parts]
    merged = workers[0].merge(workers[1]).merge(workers[2]).finalize()
    full = PCA(10, solver="svd").fit(X)
    assert merged.n_samples_ == 2400
    np.testing.assert_allclose(merged.components_, full.components_, atol=1e-8)
    np.testing.assert_allclose(merged.explained_variance_, full.explained_variance_, atol=1e-8)
    np.testing.assert_allclose(merged.mean_, full.mean_, atol=1e-8)
    # merge leaves its inputs alone, and order does not matter
    assert workers[0].finalize().n_samples_ == 300
    other_order = workers[2].merge(workers[0]).merge(workers[1]).finalize()
    np.testing.assert_allclose(other_order.components_, full.components_, atol=1e-8)
    # Dask workers ship partial fits between processes: they pickle with their statistics
    import pickle

    shipped = [pickle.loads(pickle.dumps(w)) for w in workers]
    np.testing.assert_array_equal(shipped[0].merge(shipped[1]).merge(shipped[2]).finalize().components_, merged.components_)
    # an empty PCA is the identity of merge
    np.testing.assert_array_equal(PCA(10).merge(merged).finalize().components_, merged.components_)


@pytest.mark.parametrize("block", [None, 7 * 16], ids=["one block", "blocks of 7 rows"])
def test_float32_rows_far_from_zero_are_centred_before_they_are_projected(sk, monkeypatch, block):
    """transform projected float32 rows first and subtracted the projected mean after: rows offset by 1e6 cancelled
    ~1e6 x float32 rounding, 1.4 % of the projections' size off scikit-learn's. Centred first now (in float64, one
    block of rows at a time), they are float32 rounding off (1.5e-7 here), whiten or not, in blocks or not."""
    import bertfeat.pca.estimator as est

    if block is not None:
        monkeypatch.setattr(est, "TRANSFORM_BLOCK_ELEMENTS", block)  # 500 rows in 72 blocks, the last one short
    rng = np.random.default_rng(0)
    X32 = (rng.standard_normal((500, 16)) @ rng.standard_normal((16, 16)) + 1e6).astype(np.float32)
    X = X32.astype(np.float64)  # the same numbers: scikit-learn's float64 answer is the reference
    for whiten in (False, True):
        theirs = sk(4, whiten=whiten, svd_solver="full").fit(X)
        ref = theirs.transform(X)
        for ours in (PCA(4, whiten=whiten).fit(X32), PCA(4, whiten=whiten, solver="svd").fit(X)):
            Y = ours.transform(X32)
            assert Y.dtype == np.float32
            assert np.abs(Y - ref).max() <= 1e-6 * np.abs(ref).max()
            np.testing.assert_allclose(ours.transform(X), ref, rtol=0, atol=1e-9 * np.abs(ref).max())


def test_large_offset_keeps_accuracy():
    # mean 1e4, standard deviations 1e-2 .. 1e-3: a naive sum of X^T X loses everything here
    rng = np.random.default_rng(1)
    d = 20
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    X = (rng.standard_normal((4000, d)) * np.geomspace(1e-2, 1e-3, d)) @ Q.T + 1e4
    exact = PCA(8, solver="svd").fit(X)
    stream = PCA(8)
    for chunk in np.array_split(X, 10):
        stream.partial_fit(chunk)
    stream.finalize()
    merged = PCA(8).partial_fit(X[:1000]).merge(PCA(8).partial_fit(X[1000:] - 0.0)).finalize()
    for est in (stream, merged, PCA(8, solver="covariance").fit(X)):
        np.testing.assert_allclose(est.components_, exact.components_, atol=1e-8)
        np.testing.assert_allclose(est.explained_variance_ratio_, exact.explained_variance_ratio_, atol=1e-8)
        np.testing.assert_allclose(est.explained_variance_, exact.explained_variance_, rtol=1e-8)
        np.testing.assert_allclose(est.mean_, exact.mean_, rtol=0, atol=1e-9)


@pytest.mark.parametrize("sizes", [[1, 999], [1] * 1000, [1, 300, 1, 697, 1]], ids=["1+999", "one row each", "unequal"])
def test_a_stream_whose_first_row_sits_far_from_the_rest_keeps_its_variances(sk, sizes):
    # a first row of zeros (padding), then rows around 1e7 with spreads ~1: the statistics summed the later rows'
    # squares about the first row, and taking the scatter cancelled ~eps x 1e14 of it: the trailing variances were off
    # by 1.2e-13 .. 3e-13 of the largest, where a fit in one call is at eigh's own limit (~1e-15 of the largest); such
    # a chunk is now summed about its own mean and merged, the statistics re-centred on the mean of all rows
    rng = np.random.default_rng(7)
    X = rng.standard_normal((1000, 6)) @ rng.standard_normal((6, 6)) + 1e7
    X[0] = 0.0
    theirs = sk(svd_solver="full").fit(X)
    ours = PCA()
    for part in np.split(X, np.cumsum(sizes)[:-1]):
        ours.partial_fit(part)
    lam = theirs.explained_variance_
    err = np.abs(ours.explained_variance_ / lam - 1) * lam / lam[0]  # relative to the largest variance
    assert err.max() <= 2e-14, err
    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-15)
    np.testing.assert_allclose(ours.components_[0], theirs.components_[0], atol=1e-12)
    # the same rows in two partial fits merged (a worker that saw only the first row): the merge kept the first row
    # as its shift (1.7e-14 of the largest off); it is re-centred too
    merged = PCA().partial_fit(X[:1]).merge(PCA().partial_fit(X[1:]))
    err = np.abs(merged.explained_variance_ / lam - 1) * lam / lam[0]
    assert err.max() <= 4e-15, err


@pytest.mark.parametrize("chunks", [None, "one row each", "unequal, last of one row"])
def test_columns_of_very_different_scales_keep_every_variance(sk, chunks):
    # columns of scale 1e-6 .. 1e6 (variances 1e-12 .. 1e12): eigh of the covariance errs by ~eps x 1e12, which left
    # the variance 1e-12 66x off and 1e-6 by 6e-5 (and partial_fit has no svd to fall back to); every variance is
    # scikit-learn's to 1e-6 now, relative to itself
    rng = np.random.default_rng(5)
    n = 300
    X = rng.standard_normal((n, 6)) * np.array([1e-6, 1e6, 1.0, 1e-3, 1e3, 10.0])
    X[:, 2] += 1e-3 * X[:, 4]  # one correlated pair
    theirs = sk(svd_solver="full").fit(X)
    ours = PCA()
    if chunks is None:
        ours.fit(X)
    else:
        sizes = [1] * n if chunks == "one row each" else [7, 150, 1, 141, 1]
        for part in np.split(X, np.cumsum(sizes)[:-1]):
            ours.partial_fit(part)
    assert ours.fit_solver_ == "covariance"
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(ours.components_, theirs.components_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.explained_variance_ratio_, theirs.explained_variance_ratio_, rtol=1e-6, atol=0)
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X), rtol=0, atol=1e-9 * np.abs(X).max())
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(X)), X, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("offset", [3.0, 1e4])
def test_accumulate_on_float32_input(offset):
    # more rows than one block, so several float32 products are added in float64
    rng = np.random.default_rng(2)
    d = 48
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    X32 = ((rng.standard_normal((20000, d)) * np.geomspace(1.0, 1e-2, d)) @ Q.T + offset).astype(np.float32)
    exact = PCA(10, solver="svd").fit(X32.astype(np.float64))
    mixed = PCA(10).fit(X32)
    assert mixed.fit_solver_ == "covariance" and mixed.accumulate == "mixed"
    full64 = PCA(10, accumulate="float64").fit(X32)
    np.testing.assert_allclose(full64.components_, exact.components_, atol=1e-9)
    diff = np.abs(mixed.components_ - full64.components_).max()
    if offset == 3.0:
        assert 0 < diff < 1e-6  # float32 products were used, and they stay close
    else:
        # mean 1e4 with std <= 1: float32 values keep ~10 bits of the spread, and float32 sums of
        # their squares would round with a bias (ratios 4e-7 off); float64 products are used instead
        assert diff == 0
    np.testing.assert_allclose(mixed.explained_variance_ratio_, exact.explained_variance_ratio_, atol=1e-8)
    np.testing.assert_allclose(mixed.mean_, exact.mean_, rtol=1e-12)
    # float64 accumulation: chunking and merging change only float64 rounding
    parts = [PCA(10, accumulate="float64").partial_fit(c) for c in np.array_split(X32, 3)]
    merged = parts[0].merge(parts[1]).merge(parts[2]).finalize()
    np.testing.assert_allclose(merged.components_, exact.components_, atol=1e-9)
    np.testing.assert_allclose(merged.explained_variance_ratio_, exact.explained_variance_ratio_, atol=1e-12)


def test_partial_fit_decomposes_on_first_use_and_bad_chunk_leaves_state_untouched():
    X = known_spectrum(n=500, d=10)
    pca = PCA(3).partial_fit(X[:250])
    assert pca._result_ is None and "components_" not in vars(pca)  # nothing decomposed yet
    assert pca.n_features_in_ == 10  # known from the first chunk, without decomposing
    before = pca.components_.copy()  # the first read decomposes
    assert pca._result_ is not None and "components_" in vars(pca)
    bad = X[250:].copy()
    bad[7, 4] = np.nan
    with pytest.raises(BertfeatError):
        pca.partial_fit(bad)
    assert pca.n_samples_ == 250  # the decomposition is untouched by the refused chunk
    np.testing.assert_array_equal(pca.components_, before)
    pca.partial_fit(X[250:])
    assert pca._result_ is None and "components_" not in vars(pca)  # new rows: the old decomposition is forgotten
    assert pca.n_samples_ == 500


# -- usable at once after partial_fit / merge (issue 25): decomposed on first use, cached until new rows --------

DECOMPOSED = ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_",
              "noise_variance_", "all_explained_variance_")


@pytest.fixture
def decompositions(monkeypatch):
    """Count decompositions of streaming statistics: bertfeat.pca.estimator's decompose_stats (the one finalize calls)."""
    import bertfeat.pca.estimator as pca_module

    calls = []
    real = pca_module.decompose_stats

    def counting(*args, **kwargs):
        calls.append(args[0].n)  # the rows decomposed
        return real(*args, **kwargs)

    monkeypatch.setattr(pca_module, "decompose_stats", counting)
    return calls


def streamed(X, n_components, parts=10, **params) -> PCA:
    pca = PCA(n_components, **params)
    for chunk in np.array_split(X, parts):
        pca.partial_fit(chunk)
    return pca


def assert_same_fit(est, ref, atol, what=""):
    for name in DECOMPOSED:
        np.testing.assert_allclose(getattr(est, name), getattr(ref, name), rtol=0, atol=atol, err_msg=f"{what} {name}")
    for name in ("n_components_", "n_samples_", "n_features_in_"):
        assert getattr(est, name) == getattr(ref, name), (what, name)


@pytest.mark.parametrize("first_use", ["components_", "explained_variance_ratio_", "n_components_", "noise_variance_",
                                       "n_samples_", "transform", "inverse_transform", "get_feature_names_out", "save"])
def test_partial_fit_is_usable_at_once_and_equals_fit(first_use, tmp_path, decompositions):
    X = known_spectrum(n=3000, d=30, offset=2.0)
    full = PCA(12).fit(X)  # covariance solver: the fit decomposes at once, as before
    assert "components_" in vars(full) and decompositions == [3000]
    stream = streamed(X, 12)
    assert decompositions == [3000]  # nothing decomposed while streaming
    if first_use == "transform":
        np.testing.assert_allclose(stream.transform(X), full.transform(X), atol=1e-9)
    elif first_use == "inverse_transform":
        Y = full.transform(X[:50])
        np.testing.assert_allclose(stream.inverse_transform(Y), full.inverse_transform(Y), atol=1e-9)
    elif first_use == "get_feature_names_out":
        assert list(stream.get_feature_names_out()) == [f"pca{i}" for i in range(12)]
    elif first_use == "save":
        np.testing.assert_allclose(PCA.load(stream.save(tmp_path / "s.npz")).components_, full.components_, atol=1e-9)
    else:
        getattr(stream, first_use)
    assert decompositions == [3000, 3000]  # the first use decomposed all 3000 rows, once
    assert set(PCA._DECOMPOSED) <= set(vars(stream))  # ... and set every attribute __getattr__ would decompose for
    assert_same_fit(stream, full, atol=1e-9)
    np.testing.assert_allclose(stream.transform(X), full.transform(X), atol=1e-9)
    assert stream.fit_solver_ == "covariance" and stream.total_variance_ == pytest.approx(full.total_variance_, rel=1e-12)
    assert decompositions == [3000, 3000]  # every later use reads the cached decomposition


def test_partial_fit_without_finalize_matches_sklearn(sk):
    X = known_spectrum(n=3000, d=30, offset=2.0)
    stream = streamed(X, 12)  # never finalized
    theirs = sk(12, svd_solver="full").fit(X)
    assert_parity(stream, theirs, X, comp_tol=1e-6, transform_atol=1e-6)  # signs: largest |loading| positive, as sklearn >= 1.5
    np.testing.assert_allclose(stream.inverse_transform(stream.transform(X)), theirs.inverse_transform(theirs.transform(X)), atol=1e-6)
    # float32 chunks, mixed accumulation: still within 1e-6 of scikit-learn's float64 answer
    X32 = X.astype(np.float32)
    stream32 = streamed(X32, 12)
    theirs64 = sk(12, svd_solver="full").fit(X32.astype(np.float64))
    np.testing.assert_allclose(stream32.components_, theirs64.components_, atol=1e-6)
    np.testing.assert_allclose(stream32.explained_variance_ratio_, theirs64.explained_variance_ratio_, atol=1e-7)


def test_interleaved_partial_fit_and_reads_equal_a_fit_of_the_rows_so_far(decompositions):
    X = known_spectrum(n=2000, d=20, offset=5.0)
    pca = PCA(6)
    seen = 0
    for i, chunk in enumerate(np.array_split(X, 8)):
        pca.partial_fit(chunk)
        seen += len(chunk)
        assert "components_" not in vars(pca)  # the last decomposition was forgotten
        ref = PCA(6, solver="svd").fit(X[:seen])
        if i % 2:  # read through transform first on odd steps, an attribute first on even ones
            np.testing.assert_allclose(pca.transform(X[:seen]), ref.transform(X[:seen]), atol=1e-8)
        assert_same_fit(pca, ref, atol=1e-8, what=f"after {seen} rows")
        assert len(decompositions) == i + 1 and decompositions[-1] == seen  # one decomposition per step, of every row seen
    # a bad chunk changes neither the statistics nor the cached decomposition
    bad = X[:10].copy()
    bad[3, 3] = np.inf
    with pytest.raises(BertfeatError, match="NaN or inf"):
        pca.partial_fit(bad)
    assert pca.n_samples_ == 2000 and len(decompositions) == 8


def test_merge_is_usable_at_once(decompositions):
    X = known_spectrum(n=2400, d=25, offset=1.0)
    workers = [PCA(10).partial_fit(p) for p in (X[:300], X[300:1500], X[1500:])]
    assert workers[0].n_components_ == 10 and len(decompositions) == 1  # a worker read before merging: decomposed
    merged = workers[0].merge(workers[1]).merge(workers[2])
    assert len(decompositions) == 1 and "components_" not in vars(merged)  # merging adds statistics only
    assert merged.n_features_in_ == 25 and merged.fingerprint_ is None
    full = PCA(10, solver="svd").fit(X)
    np.testing.assert_allclose(merged.transform(X), full.transform(X), atol=1e-8)
    assert_same_fit(merged, full, atol=1e-8)
    assert decompositions == [300, 2400]
    assert workers[0].n_samples_ == 300  # its own decomposition was kept: merge changes neither input
    more = merged.partial_fit(X[:100])  # a merged PCA keeps streaming, and decomposes again on the next read
    assert more.n_samples_ == 2500 and decompositions == [300, 2400, 2500]


def test_finalize_still_works_and_is_idempotent(decompositions):
    X = known_spectrum(n=600, d=12)
    pca = streamed(X, 4, parts=3)
    assert pca.finalize() is pca and "components_" in vars(pca) and decompositions == [600]
    comps = pca.components_
    assert pca.finalize() is pca and pca.finalize().components_ is comps  # nothing new: no work, same arrays
    assert decompositions == [600]
    pca.partial_fit(X[:100])
    assert pca.finalize().n_samples_ == 700 and decompositions == [600, 700]
    fitted = PCA(4, solver="svd").fit(X)  # one-pass fits and loaded models: finalize has nothing to do
    assert fitted.finalize() is fitted
    with pytest.raises(NotFittedError, match="no data to finalize"):
        PCA(4).finalize()


def test_hasattr_and_check_is_fitted_before_and_after_partial_fit(decompositions):
    validation = need("sklearn.utils.validation")
    from sklearn.exceptions import NotFittedError as SkNotFittedError

    X = known_spectrum(n=100, d=8)
    pca = PCA(3)
    assert not hasattr(pca, "components_") and not hasattr(pca, "n_features_in_") and not hasattr(pca, "n_samples_")
    with pytest.raises(SkNotFittedError):
        validation.check_is_fitted(pca)
    pca.partial_fit(X[:1])  # one row: the width is known, a decomposition is not possible yet
    assert pca.n_features_in_ == 8 and not hasattr(pca, "components_")
    with pytest.raises(NotFittedError, match="at least 2 samples"):
        pca.transform(X)
    with pytest.raises(SkNotFittedError):
        validation.check_is_fitted(pca)
    pca.partial_fit(X[1:50])
    validation.check_is_fitted(pca)  # answers from the statistics, without decomposing
    assert decompositions == []
    validation.check_is_fitted(pca, attributes=["components_", "explained_variance_"])  # hasattr: decomposes
    assert decompositions == [50] and hasattr(pca, "components_")
    pca.partial_fit(X[50:])
    validation.check_is_fitted(pca)  # still fitted while the new rows are not decomposed
    assert "components_" not in vars(pca) and hasattr(pca, "components_") and decompositions == [50, 100]
    # too many components for the rows seen so far is an error of the decomposition, not "not fitted": it is raised
    few = PCA(6).partial_fit(X[:4])
    with pytest.raises(BertfeatError, match=r"n_components=6 is larger than min\(n_samples, n_features\) = min\(4, 8\)"):
        hasattr(few, "components_")
    assert few.partial_fit(X[4:20]).n_components_ == 6  # more rows make it possible


def test_clone_get_params_and_pickle_mid_stream(decompositions):
    import copy
    import pickle

    X = known_spectrum(n=1200, d=15, offset=3.0)
    chunks = np.array_split(X, 6)
    pca = PCA(5, accumulate="float64")
    for c in chunks[:3]:
        pca.partial_fit(c)
    params = pca.get_params()
    assert params == PCA(5, accumulate="float64").get_params()  # no fitted name leaks into the parameters
    shipped = pickle.loads(pickle.dumps(pca))  # mid-stream, never decomposed
    assert "components_" not in vars(shipped) and decompositions == []
    for c in chunks[3:]:
        shipped.partial_fit(c)  # keeps accumulating
        pca.partial_fit(c)
    full = PCA(5, solver="svd").fit(X)
    assert_same_fit(shipped, full, atol=1e-9)
    np.testing.assert_array_equal(shipped.components_, pca.components_)
    again = pickle.loads(pickle.dumps(shipped))  # decomposed: the attributes travel as they are
    assert "components_" in vars(again) and len(decompositions) == 2
    np.testing.assert_array_equal(again.transform(X), shipped.transform(X))
    assert len(decompositions) == 2
    assert again.partial_fit(X[:100]).n_samples_ == 1300
    deep = copy.deepcopy(pca)
    np.testing.assert_array_equal(deep.components_, pca.components_)
    sklearn_base = need("sklearn.base")
    fresh = sklearn_base.clone(pca)
    assert fresh.get_params() == params and not hasattr(fresh, "components_") and not hasattr(fresh, "n_features_in_")


SOLVER_FIX = "(one of auto, svd, covariance, randomized)"


@pytest.mark.parametrize("kwargs, what, fix", [
    # scikit-learn's name of bertfeat's solver, each value with its counterpart: was Python's bare TypeError
    ({"svd_solver": "full"}, "PCA() got an unexpected keyword argument 'svd_solver': that is scikit-learn's name; "
     "bertfeat's PCA calls it solver", f"pass solver='svd' {SOLVER_FIX}"),
    ({"svd_solver": "covariance_eigh"}, "calls it solver", f"pass solver='covariance' {SOLVER_FIX}"),
    ({"svd_solver": "randomized"}, "calls it solver", f"pass solver='randomized' {SOLVER_FIX}"),
    ({"svd_solver": "arpack"}, "calls it solver", "pass solver as one of auto, svd, covariance, randomized"),
    ({"copy": False}, "PCA() got an unexpected keyword argument 'copy': a parameter of scikit-learn's PCA that "
     "bertfeat's does not have", "leave it out (PCA's parameters: n_components, solver, whiten, random_state, "
     "accumulate, precision)"),
    ({"n_component": 3}, "PCA() got an unexpected keyword argument 'n_component'", "did you mean n_components? "
     "(PCA's parameters: n_components, solver, whiten, random_state, accumulate, precision)"),
    ({"bogus": 1}, "PCA() got an unexpected keyword argument 'bogus'",
     "use one of PCA's parameters: n_components, solver, whiten, random_state, accumulate, precision"),
])
def test_a_keyword_pca_does_not_take_is_named_with_its_own(kwargs, what, fix):
    """PCA(svd_solver='full') said only Python's "unexpected keyword argument": now bertfeat's error names its own
    parameter; a TypeError still (code catching Python's keeps working), and set_params says the same."""
    with pytest.raises(BertfeatError) as e:
        PCA(5, **kwargs)
    assert isinstance(e.value, TypeError)
    assert what in e.value.what and e.value.fix == fix, e.value.message
    if "calls it solver" in what or "copy" in kwargs:  # set_params (GridSearchCV's pca__svd_solver): scikit-learn's words
        with pytest.raises(BertfeatError) as e:
            PCA().set_params(**kwargs)
        assert e.value.what.startswith(f"Invalid parameter {next(iter(kwargs))!r} for estimator PCA: ")
        assert e.value.fix == fix


def test_the_checked_constructor_keeps_the_estimator_conventions():
    """The keyword check wraps __init__ without changing what scikit-learn reads: its signature, get_params, clone,
    pickle, repr."""
    import inspect
    import pickle

    assert list(inspect.signature(PCA).parameters) == ["n_components", "solver", "whiten", "random_state",
                                                       "accumulate", "precision"]
    pca = PCA(3, solver="svd", whiten=True)
    assert pca.get_params() == {"n_components": 3, "solver": "svd", "whiten": True, "random_state": None,
                                "accumulate": "mixed", "precision": None}
    assert repr(pickle.loads(pickle.dumps(pca))) == repr(pca) == "PCA(n_components=3, solver='svd', whiten=True)"
    sklearn_base = need("sklearn.base")
    assert sklearn_base.clone(pca).get_params() == pca.get_params()
    assert sorted(sklearn_base.BaseEstimator._get_param_names.__func__(PCA)) == sorted(pca.get_params())


def test_partial_fit_of_100_chunks_never_decomposes(decompositions):
    X = known_spectrum(n=3000, d=16)
    pca = PCA(0.9)
    for chunk in np.array_split(X, 100):
        pca.partial_fit(chunk)
    # what may be read while streaming costs nothing either
    assert pca.n_features_in_ == 16 and pca.fingerprint_ is None and pca.has_stats
    assert pca.__sklearn_is_fitted__() and repr(pca) == "PCA(n_components=0.9)"
    assert decompositions == []
    assert pca.n_components_ == PCA(0.9, solver="svd").fit(X).n_components_
    assert decompositions == [3000]


def test_randomized_matches_exact_top_components():
    X = known_spectrum(n=600, d=150, decay=0.9)
    exact = PCA(20, solver="svd").fit(X)
    rand = PCA(20, solver="randomized", random_state=0).fit(X)
    assert rand.fit_solver_ == "randomized"
    np.testing.assert_allclose(rand.components_, exact.components_, atol=1e-3)
    np.testing.assert_allclose(rand.explained_variance_ratio_, exact.explained_variance_ratio_, atol=1e-3)
    assert rand.noise_variance_ == pytest.approx(exact.noise_variance_, rel=1e-3)
    # seeded: reproducible
    again = PCA(20, solver="randomized", random_state=0).fit(X)
    np.testing.assert_array_equal(again.components_, rand.components_)


def test_choose_solver_policy():
    assert choose_solver("auto", 100_000, 768, 100) == "covariance"
    assert choose_solver("auto", 300, 200, 10) == "covariance"
    assert choose_solver("auto", 50, 200, 10) == "svd"
    assert choose_solver("auto", 5_000, 20_000, 100) == "randomized"
    assert choose_solver("auto", 5_000, 20_000, 0.9) == "svd"
    assert choose_solver("svd", 100_000, 768, 100) == "svd"


def test_dtypes_and_fit_transform():
    X = known_spectrum(n=200, d=12)
    assert PCA(3).fit(X.astype(np.float32)).transform(X.astype(np.float32)).dtype == np.float32
    ints = np.round(X * 10).astype(np.int64)
    Y = PCA(3).fit_transform(ints)
    assert Y.dtype == np.float64 and Y.shape == (200, 3)
    np.testing.assert_allclose(Y, PCA(3).fit(ints).transform(ints))
    full = PCA().fit(X)
    assert full.n_components_ == 12 and full.noise_variance_ == 0.0
    np.testing.assert_allclose(full.inverse_transform(full.transform(X)), X, atol=1e-10)


# -- model file and fingerprint ------------------------------------------------------------------

FP = {"model_id": "sentence-transformers/all-MiniLM-L6-v2", "weights_sha256": "ab12", "pooling": "mean", "layers": [-1], "normalize": False}


@pytest.mark.parametrize("whiten", [False, True])
def test_save_load_transform_round_trip_is_exact(tmp_path, whiten):
    X = known_spectrum(n=800, d=30)
    pca = PCA(0.9, whiten=whiten, accumulate="float64" if whiten else "mixed").fit(X)
    path = pca.save(tmp_path / "pca.npz", fingerprint=FP)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pca.npz"]  # no temp file left
    with np.load(path, allow_pickle=False) as z:  # no pickle inside
        meta = json.loads(str(z["meta"]))
    assert meta["format"] == "bertfeat-pca" and meta["fingerprint"] == FP and meta["params"]["whiten"] is whiten
    loaded = PCA.load(path)
    for name in ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_", "all_explained_variance_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(pca, name), err_msg=name)
    for name in ("n_components_", "n_samples_", "n_features_in_", "noise_variance_", "total_variance_", "whiten", "n_components", "accumulate"):
        assert getattr(loaded, name) == getattr(pca, name), name
    for dtype in (np.float32, np.float64):
        Xd = X.astype(dtype)
        np.testing.assert_array_equal(loaded.transform(Xd), pca.transform(Xd))
    np.testing.assert_array_equal(loaded.inverse_transform(pca.transform(X)), pca.inverse_transform(pca.transform(X)))
    assert loaded.fingerprint_ == FP


def test_saved_statistics_keep_streaming(tmp_path):
    X = known_spectrum(n=1000, d=15)
    first = PCA(5).partial_fit(X[:600]).finalize()
    first.save(tmp_path / "part.npz", include_stats=True)
    resumed = PCA.load(tmp_path / "part.npz").partial_fit(X[600:]).finalize()
    np.testing.assert_allclose(resumed.components_, PCA(5, solver="svd").fit(X).components_, atol=1e-9)


def _meta(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return json.loads(str(z["meta"]))


def _restore_params(path, change) -> None:
    """Rewrite a model file's parameters (as another release would have stored them)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {key: z[key] for key in z.files}
    meta = json.loads(str(arrays["meta"]))
    meta["params"] = change(meta["params"])
    meta.pop("meta_sha256", None)  # (another release's file: no digest of the metadata)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _edit_meta(src, dst, change) -> None:
    """``src`` saved again as ``dst`` with its metadata changed by ``change(meta)``, its arrays (and their recorded
    sha256) as they were: an edit by hand."""
    with np.load(src, allow_pickle=False) as z:
        arrays = {key: z[key] for key in z.files}
    meta = json.loads(str(arrays["meta"]))
    change(meta)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    with open(dst, "wb") as f:
        np.savez(f, **arrays)


EDITED = "pass the model file as `bertfeat pca fit`, `bertfeat extract --pca` or PCA.save wrote it (fit it again rather than edit it)"


def test_a_model_whose_n_components_disagrees_with_its_arrays_is_refused(tmp_path, capsys):
    """A model file's n_components edited loaded: as its parameter (5, 2, null over 3 components held, 0.99, 0.5 over 4),
    get_params and the report's n_components_requested said what the model does not do; as its count, 3.7 and "3"
    were taken as 3 (int()). Refused now, naming both numbers; every model bertfeat fits still loads (the parameter
    of an unchanged model: 0.8 kept 4 of 6 components here)."""
    from extract_util import run

    X = known_spectrum(n=100, d=6)
    base, frac = PCA(3).fit(X).save(tmp_path / "base.npz"), PCA(0.8).fit(X).save(tmp_path / "frac.npz")
    assert PCA.load(frac).n_components_ == 4
    cases = [
        (base, lambda m: m["params"].update(n_components=5), "its parameter n_components=5 keeps 5 components, but "
                                                             "its arrays (and its n_components) hold 3"),
        (base, lambda m: m["params"].update(n_components=2), "its parameter n_components=2 keeps 2 components, but "
                                                             "its arrays (and its n_components) hold 3"),
        (base, lambda m: m["params"].update(n_components=None), "its parameter n_components=null keeps 6 components, "
                                                                "but its arrays (and its n_components) hold 3"),
        (frac, lambda m: m["params"].update(precision="float64", n_components=0.99),
         "its parameter n_components=0.99 keeps 6 components, but its arrays (and its n_components) hold 4"),
        (frac, lambda m: m["params"].update(n_components=0.5), "its parameter n_components=0.5 keeps 3 components, "
                                                               "but its arrays (and its n_components) hold 4"),
        (base, lambda m: m.update(n_components=3.7), "its n_components 3.7 is not a whole number"),
        (base, lambda m: m.update(n_components="3"), 'its n_components "3" is not a whole number'),
        (base, lambda m: m.update(n_samples=True), "its n_samples true is not a whole number"),
    ]
    for i, (src, change, why) in enumerate(cases):
        path = tmp_path / f"e{i}.npz"
        _edit_meta(src, path, change)
        want = f"{path} is not a bertfeat PCA model: {why} - {EDITED}"
        with pytest.raises(BertfeatError) as e:
            PCA.load(path)
        assert str(e.value) == want
    rc, _, err = run(capsys, "report", path, "-o", tmp_path / "r", "-q")
    assert (rc, err) == (1, f"Error: {want}\n") and not list(tmp_path.glob("r.report.*"))
    # every kind of n_components loads as fitted: a count, all, a fraction (of no variance too), mle, randomized
    fits = [PCA(2), PCA(), PCA(0.9), PCA(0.9, solver="svd"), PCA("mle"), PCA(2, solver="randomized", random_state=0),
            PCA(solver="randomized", random_state=0)]
    for pca in fits:
        pca.fit(X)
    fits.append(PCA(0.9).fit(np.ones((5, 3))))  # no variance: 1 component (an earlier release kept 3: not checked)
    for i, pca in enumerate(fits):
        assert PCA.load(pca.save(tmp_path / f"ok{i}.npz")).n_components_ == pca.n_components_


def test_a_pca_whose_n_components_was_set_after_its_fit_is_not_saved(tmp_path):
    """set_params(n_components=...) after the fit keeps the fitted components (scikit-learn's way): saved so, the file
    held a parameter its arrays contradict, which load now refuses. save refuses it instead, writing nothing."""
    X = known_spectrum(n=100, d=6)
    pca = PCA(3).fit(X).set_params(n_components=1)
    with pytest.raises(BertfeatError) as e:
        pca.save(tmp_path / "m.npz")
    assert str(e.value) == ("cannot save this PCA: its n_components=1 keeps 1 of the fit's components, which kept 3 "
                            "(n_components was set after the fit) - fit it again with this n_components, or set "
                            "n_components back to the value it was fitted with")
    assert not list(tmp_path.iterdir())
    assert PCA.load(pca.fit(X).save(tmp_path / "m.npz")).n_components_ == 1  # fitted again
    streamed = PCA(3).partial_fit(X).set_params(n_components=2)  # not decomposed yet: decomposed with 2
    assert PCA.load(streamed.save(tmp_path / "s.npz")).n_components_ == 2


@pytest.mark.parametrize("params,words", [
    (dict(whiten="False"), "whiten='False' is not True or False (set after the fit) - give whiten=True or whiten=False"),
    (dict(n_components=0), "n_components=0 is not positive (set after the fit)"),
    (dict(n_components="junk"), "n_components='junk' is not a number (set after the fit)"),
])
def test_a_parameter_set_after_the_fit_that_no_fit_takes_is_not_saved(tmp_path, params, words):
    """set_params(whiten='False') after the fit (which refuses it) was saved, and load then refused the file as 'not a
    bertfeat PCA model': a model that saved and never loaded (found by the API audit). save checks the parameters
    as fit does, writing nothing."""
    X = known_spectrum(n=100, d=6)
    pca = PCA(2).fit(X).set_params(**params)
    with pytest.raises(BertfeatError) as e:
        pca.save(tmp_path / "m.npz")
    assert str(e.value).startswith(f"cannot save this PCA: {words}")
    assert not list(tmp_path.iterdir())


def test_mixed_str_and_int_column_names_are_a_bertfeat_error_and_a_type_error():
    """A DataFrame whose column names mix str and int was refused with scikit-learn's bare TypeError, not a
    BertfeatError with its fix (docs/sklearn.md: errors are BertfeatError; found by the API audit). Both now, so
    code catching either keeps working; the PCA is left unfitted."""
    pd = pytest.importorskip("pandas")
    from bertfeat.errors import ParameterError

    pca = PCA(2)
    with pytest.raises(ParameterError) as e:
        pca.fit(pd.DataFrame(np.random.default_rng(0).random((10, 3)), columns=["a", 1, "c"]))
    assert isinstance(e.value, TypeError) and isinstance(e.value, BertfeatError)
    assert str(e.value) == ("Feature names are only supported if all input features have string names, but your input "
                            "has ['int', 'str'] as feature name / column name types - convert them all to strings "
                            "(X.columns = X.columns.astype(str)), or to a non-string type, or pass the values without "
                            "names (X.to_numpy())")
    assert not hasattr(pca, "components_")


def test_duplicate_feature_names_are_refused_at_fit_and_in_a_model_file(tmp_path):
    """A DataFrame with two columns of one name was fitted (scikit-learn refuses it) and saved, and a model file whose
    feature_names were edited to repeat a name loaded: transform then checked columns against an ambiguous list."""
    pd = pytest.importorskip("pandas")
    X = known_spectrum(n=40, d=4)
    with pytest.raises(BertfeatError) as e:
        PCA(2).fit(pd.DataFrame(X, columns=["a", "b", "a", "a"]))
    assert str(e.value) == ("Expected unique column names, got: 'a' 3 times - rename the DataFrame's columns so that "
                            "no two have the same name")
    path = PCA(2).fit(pd.DataFrame(X, columns=["a", "b", "c", "d"])).save(tmp_path / "m.npz")
    _edit_meta(path, tmp_path / "e.npz", lambda m: m.update(feature_names=["a", "b", "b", "a"]))
    with pytest.raises(BertfeatError) as e:
        PCA.load(tmp_path / "e.npz")
    assert str(e.value) == (f"{tmp_path / 'e.npz'} is not a bertfeat PCA model: its feature_names name 'a', 'b' more "
                            f"than once (a fit's columns have unique names) - {EDITED}")


def test_model_file_stores_accumulate_as_precision_and_reads_either_name(tmp_path):
    X32 = known_spectrum(n=600, d=8, offset=2.0, dtype=np.float32)
    reference = PCA(3, accumulate="float64").partial_fit(X32).finalize()
    path = reference.save(tmp_path / "m.npz", include_stats=True)
    # format 1 exactly as bertfeat 0.2.0 wrote it: every stored parameter is a keyword of 0.2.0's PCA, so 0.2.0 loads it
    assert _meta(path)["format_version"] == 1
    assert _meta(path)["params"] == {"n_components": 3, "solver": "auto", "whiten": False, "random_state": None,
                                     "precision": "float64"}
    expected = PCA(3, accumulate="float64").partial_fit(X32).partial_fit(X32[:100]).finalize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loading a file is no use of the deprecated keyword
        for stored in ("precision", "accumulate"):  # the name 0.2.0 and this release write, and the new name
            _restore_params(path, lambda p: {k: v for k, v in p.items() if k not in ("precision", "accumulate")} | {stored: "float64"})
            loaded = PCA.load(path)
            assert loaded.accumulate == "float64" and loaded.precision is None, stored
            more = loaded.partial_fit(X32[:100]).finalize()  # keeps streaming in float64, as the saved PCA would
            np.testing.assert_array_equal(more.components_, expected.components_)
    _restore_params(path, lambda p: p | {"precision": "mixed", "accumulate": "float64"})  # both: the keyword's own name wins
    assert PCA.load(path).accumulate == "float64"


def test_saving_a_pca_made_with_precision_stores_the_mode_it_used(tmp_path):
    with pytest.warns(DeprecationWarning):
        pca = PCA(2, precision="float64").fit(known_spectrum(n=50, d=5, dtype=np.float32))
    assert _meta(pca.save(tmp_path / "p.npz"))["params"]["precision"] == "float64"
    assert PCA.load(tmp_path / "p.npz").get_params() | {"random_state": None} == PCA(2, accumulate="float64").get_params()


# -- accumulate= and its deprecated name precision= ----------------------------------------------


@pytest.mark.parametrize("mode", ["mixed", "float64"])
def test_precision_keyword_still_works_with_a_deprecation_warning(mode):
    X32 = known_spectrum(n=20000, d=24, offset=3.0, dtype=np.float32)  # more than one block, float32 products allowed
    new = PCA(6, accumulate=mode).fit(X32)
    with pytest.warns(DeprecationWarning, match=r"the PCA's precision= is deprecated .*, use accumulate= with the same value") as w:
        old = PCA(6, precision=mode).fit(X32)
    assert w[0].filename == __file__  # aimed at the caller's line, so Python shows it there
    for name in ("components_", "explained_variance_", "mean_", "noise_variance_"):
        np.testing.assert_array_equal(getattr(old, name), getattr(new, name), err_msg=name)
    with pytest.warns(DeprecationWarning):
        streamed = PCA(6, precision=mode).partial_fit(X32[:9000]).partial_fit(X32[9000:]).finalize()
    np.testing.assert_array_equal(streamed.components_, PCA(6, accumulate=mode).partial_fit(X32[:9000]).partial_fit(X32[9000:]).finalize().components_)


def test_accumulate_modes_differ_so_the_keyword_is_not_ignored():
    X32 = known_spectrum(n=20000, d=24, offset=3.0, dtype=np.float32)
    mixed, full = PCA(6, accumulate="mixed").fit(X32), PCA(6, accumulate="float64").fit(X32)
    assert 0 < np.abs(mixed.components_ - full.components_).max() < 1e-6
    with pytest.warns(DeprecationWarning):
        assert np.array_equal(PCA(6, precision="float64").fit(X32).components_, full.components_)


def test_accumulate_and_precision_together():
    X = known_spectrum(n=40, d=4)
    assert PCA().get_params()["accumulate"] == "mixed" and PCA().get_params()["precision"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PCA(2, accumulate="float64").fit(X)  # the new keyword alone never warns
    with pytest.warns(DeprecationWarning):
        assert _message(lambda: PCA(2, accumulate="float64", precision="mixed").fit(X)) == (
            "accumulate='float64' and precision='mixed' disagree - pass accumulate only (precision is its deprecated name)"
        )
    with pytest.warns(DeprecationWarning):
        PCA(2, accumulate="float64", precision="float64").fit(X)  # the same value twice is no conflict


def test_fingerprint_refused_unless_forced():
    pca = PCA(2).fit(known_spectrum(n=50, d=5))
    pca.fingerprint_ = dict(FP)
    assert pca.check_fingerprint(dict(FP)) == []
    other = FP | {"pooling": "cls", "weights_sha256": "ff00"}
    with pytest.raises(BertfeatError) as e:
        pca.check_fingerprint(other)
    assert e.value.what == (
        'the features come from a different source than the PCA was fitted on '
        '(pooling: model "mean" vs features "cls"; weights_sha256: model "ab12" vs features "ff00")'
    )
    assert e.value.fix == (
        "transform features extracted with the same model and settings, or pass --force (force=True) to transform anyway"
    )
    missing = {k: v for k, v in FP.items() if k != "normalize"}
    with pytest.raises(BertfeatError, match=r"normalize: model false vs features <missing>"):
        pca.check_fingerprint(missing)
    assert [d[0] for d in pca.check_fingerprint(other, force=True)] == ["pooling", "weights_sha256"]


def test_a_prompt_given_by_its_name_or_its_text_is_the_same_source():
    """--prompt-name doc and --prompt "passage: " (doc's text) give the same vectors: a PCA fitted on one transforms
    and merges the other (before: refused for prompt_name); another prompt text is still refused, naming the prompt
    only, and a fingerprint without the prompt's text compares the name."""
    named = FP | {"prompt": "passage: ", "prompt_name": "doc"}
    pca = PCA(2).fit(known_spectrum(n=50, d=5))
    pca.fingerprint_ = dict(named)
    assert pca.check_fingerprint(named | {"prompt_name": None}) == []
    other = PCA(2).fit(known_spectrum(n=40, d=5, seed=1))
    other.fingerprint_ = named | {"prompt_name": None}
    pca.merge(other)
    with pytest.raises(BertfeatError) as e:
        pca.check_fingerprint(named | {"prompt": "query: ", "prompt_name": "query"})
    assert e.value.what == ('the features come from a different source than the PCA was fitted on (prompt: model '
                            '"passage: " vs features "query: ")')
    no_text = {k: v for k, v in named.items() if k != "prompt"}
    assert [d[0] for d in pca.check_fingerprint(no_text | {"prompt_name": None}, force=True)] == ["prompt", "prompt_name"]


def test_load_errors(tmp_path):
    with pytest.raises(BertfeatError) as e:
        PCA.load(tmp_path / "nope.npz")
    assert e.value.message == f"PCA model file not found: {tmp_path / 'nope.npz'} - check the path, or fit one with `bertfeat pca fit`"
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(BertfeatError, match="is not a bertfeat PCA model"):
        PCA.load(tmp_path / "other.npz")


# -- bad input: every message, exactly ------------------------------------------------------------


def _message(fn) -> str:
    with pytest.raises(BertfeatError) as e:
        fn()
    return e.value.message


def test_error_n_components_too_large():
    X = known_spectrum(n=30, d=8)
    assert _message(lambda: PCA(9).fit(X)) == (
        "n_components=9 is larger than min(n_samples, n_features) = min(30, 8) = 8 - "
        "choose n_components <= 8, or a fraction such as 0.95 to keep 95% of the variance"
    )
    assert _message(lambda: PCA(6).fit(X[:5])) == (
        "n_components=6 is larger than min(n_samples, n_features) = min(5, 8) = 5 - "
        "choose n_components <= 5, or a fraction such as 0.95 to keep 95% of the variance"
    )
    # streaming: too many for the width at once, too many for the rows when decomposing
    assert _message(lambda: PCA(9).partial_fit(X)) == (
        "n_components=9 is larger than n_features = 8 - choose n_components <= 8 (and no more than the rows fitted: the "
        "rows are counted as they stream in), or a fraction such as 0.95 to keep 95% of the variance"
    )
    assert "min(4, 8) = 4" in _message(lambda: PCA(6).partial_fit(X[:4]).finalize())


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -0.2])
def test_error_fraction_outside_unit_interval(bad):
    assert _message(lambda: PCA(bad).fit(known_spectrum(n=20, d=4))) == (
        f"n_components={bad!r} is outside (0, 1): a float n_components is the fraction of variance to keep - "
        "pass a fraction strictly between 0 and 1 (e.g. 0.95) or a whole number of components (e.g. 100)"
    )


def test_error_other_bad_params():
    X = known_spectrum(n=20, d=4)
    assert _message(lambda: PCA(0).fit(X)) == (
        "n_components=0 is not positive - pass a whole number of components >= 1 (e.g. 100) or a fraction in (0, 1) (e.g. 0.95)"
    )
    assert _message(lambda: PCA(2, solver="arpack").fit(X)) == "unknown solver='arpack' - use one of: auto, svd, covariance, randomized"
    assert _message(lambda: PCA(2, accumulate="float16").partial_fit(X)) == "unknown accumulate='float16' - use one of: mixed, float64"
    with pytest.warns(DeprecationWarning):  # the deprecated name keeps its message
        assert _message(lambda: PCA(2, precision="float16").partial_fit(X)) == "unknown precision='float16' - use one of: mixed, float64"
    assert _message(lambda: PCA(0.5, solver="randomized").fit(X)).startswith("a fractional n_components needs the whole spectrum")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("solver", ["svd", "covariance", "randomized"])
def test_error_nan_or_inf_names_row_and_column(value, solver):
    X = known_spectrum(n=50, d=6)
    X[17, 4] = value
    X[30, 1] = value
    assert _message(lambda: PCA(2, solver=solver).fit(X)) == (
        f"features contain NaN or inf: 2 value(s), first at row 17, column 4 ({value}) - remove or repair those rows before fitting"
    )


@pytest.mark.parametrize("solver", ["svd", "covariance", "randomized"])
def test_a_refused_fit_leaves_the_pca_as_it_was(solver):
    """A fit refused after it began (NaN or inf, 'mle' with fewer rows than features) kept what it had started: the
    rejected rows' statistics, so check_is_fitted passed and a later partial_fit counted them (3 + 40 rows), and their
    column names on an unfitted PCA; a fitted PCA lost its fit. Now the PCA is as it was before the call."""
    pd = pytest.importorskip("pandas")
    X = known_spectrum(n=40, d=6)
    bad = pd.DataFrame(X, columns=list("uvwxyz"))
    bad.iloc[7, 2] = np.nan
    fresh = PCA("mle", solver="covariance")
    with pytest.raises(BertfeatError, match="'mle' needs at least as many samples"):
        fresh.fit(X[:3])
    assert not fresh.__sklearn_is_fitted__() and not hasattr(fresh, "n_samples_")
    assert fresh.set_params(n_components=2).partial_fit(X).n_samples_ == 40
    unfitted = PCA(2, solver=solver, random_state=0)
    with pytest.raises(BertfeatError, match="features contain NaN or inf"):
        unfitted.fit(bad)
    assert not unfitted.__sklearn_is_fitted__() and not hasattr(unfitted, "feature_names_in_")
    fitted = PCA(2, solver=solver, random_state=0).fit(pd.DataFrame(X, columns=list("abcdef")))
    before = fitted.transform(pd.DataFrame(X, columns=list("abcdef")))
    with pytest.raises(BertfeatError, match="features contain NaN or inf"):
        fitted.fit(bad)
    assert list(fitted.feature_names_in_) == list("abcdef") and fitted.n_samples_ == 40
    np.testing.assert_array_equal(fitted.transform(pd.DataFrame(X, columns=list("abcdef"))), before)


def test_a_refused_first_partial_fit_adds_no_rows():
    """A first partial_fit refused for its column names (two of one name) kept its rows: a later partial_fit of the
    same 20 rows counted 40 (the review)."""
    pd = pytest.importorskip("pandas")
    X = known_spectrum(n=20, d=3)
    p = PCA(2)
    with pytest.raises(BertfeatError, match="Expected unique column names"):
        p.partial_fit(pd.DataFrame(X, columns=["a", "a", "b"]))
    assert not p.__sklearn_is_fitted__()
    assert p.partial_fit(X).n_samples_ == 20


def test_a_pyarrow_record_batch_fits_and_transforms_as_its_array():
    """A pyarrow RecordBatch (its .columns are arrays, not names) crashed the duplicate-name check with a TypeError;
    scikit-learn 1.9 reads no names from one and fits it as the array."""
    pa = pytest.importorskip("pyarrow")
    X = known_spectrum(n=20, d=4)
    batch = pa.RecordBatch.from_pydict({f"c{i}": X[:, i] for i in range(4)})
    p = PCA(2).fit(batch)
    assert not hasattr(p, "feature_names_in_")
    np.testing.assert_array_equal(p.transform(batch), PCA(2).fit(X).transform(X))


def test_a_shallow_copy_keeps_its_own_statistics():
    """copy.copy of a partial fit shared its statistics, which partial_fit adds to in place: the copy then counted the
    original's later rows (n_samples_ 100 for its 50, 110 after 10 of its own), where a copy of scikit-learn's
    IncrementalPCA keeps its 50."""
    import copy

    X = known_spectrum(n=100, d=6)
    for decomposed in (False, True):
        a = PCA(2).partial_fit(X[:50])
        if decomposed:
            a.finalize()
        b = copy.copy(a)
        a.partial_fit(X[50:])
        assert b.n_samples_ == 50 and a.n_samples_ == 100
        np.testing.assert_allclose(b.components_, PCA(2, solver="covariance").fit(X[:50]).components_, atol=1e-12)
        assert b.partial_fit(X[:10]).n_samples_ == 60 and a.n_samples_ == 100
    fitted = PCA(2, solver="svd").fit(X)
    assert copy.copy(fitted).components_ is fitted.components_  # nothing else is copied


def test_error_nan_in_later_chunk_counts_global_rows():
    X = known_spectrum(n=100, d=6)
    pca = PCA(2).partial_fit(X[:60])
    bad = X[60:].copy()
    bad[5, 2] = np.nan
    assert _message(lambda: pca.partial_fit(bad)) == (
        "features contain NaN or inf: 1 value(s), first at row 65, column 2 (nan) - remove or repair those rows before fitting"
    )
    good = pca.partial_fit(X[60:]).finalize()
    bad_t = X[:10].astype(np.float32)
    bad_t[3, 0] = np.inf
    assert _message(lambda: good.transform(bad_t, row_offset=1000)) == (
        "features contain NaN or inf: 1 value(s), first at row 1003, column 0 (inf) - remove or repair those rows before transforming"
    )


def test_error_fewer_than_two_rows():
    X = known_spectrum(n=5, d=3)
    msg = "PCA needs at least 2 samples to fit, got n_samples = 1 - fit on the features of at least 2 texts"
    assert _message(lambda: PCA(1).fit(X[:1])) == msg
    assert _message(lambda: PCA(1).partial_fit(X[:1]).finalize()) == msg


def test_error_dimension_mismatch_and_shape():
    pca = PCA(2).fit(known_spectrum(n=30, d=6))
    assert _message(lambda: pca.transform(np.zeros((3, 7)))) == (
        "X has 7 features, but PCA is expecting 6 features as input - "
        "transform features from the same model, pooling and layers the PCA was fitted on"
    )
    assert _message(lambda: pca.transform(np.zeros(6))) == (
        "expected a 2-D array (n_samples, n_features), got shape (6,) - "
        "pass a matrix with one row per sample. Reshape your data: X.reshape(1, -1) for a single sample, "
        "X.reshape(-1, 1) for a single feature"
    )
    assert _message(lambda: PCA(2).partial_fit(np.zeros((4, 6))).partial_fit(np.zeros((4, 5)))) == (
        "X has 5 features, but PCA is expecting 6 features as input (from the earlier chunks) - "
        "pass chunks of the same feature matrix (same model, pooling and layers)"
    )


def test_error_transform_before_fit():
    pca = PCA(2)
    assert _message(lambda: pca.transform(np.zeros((2, 3)))) == (
        "this PCA is not fitted yet (components_ is set by fit or partial_fit) - "
        "call fit(X) or partial_fit(X), or load a saved model with PCA.load(path)"
    )
    assert not hasattr(pca, "components_")  # NotFittedError is also an AttributeError
    with pytest.raises(NotFittedError):
        pca.save("never.npz")


def test_partial_fit_checks_later_chunks_feature_names():
    """As IncrementalPCA: a later chunk whose columns are reordered (or renamed) is refused before it is added, instead
    of being accumulated into the wrong columns' statistics."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    df = pd.DataFrame(rng.standard_normal((30, 4)) + np.arange(4), columns=list("abcd"))
    p = PCA(2).partial_fit(df[:15])
    with pytest.raises(BertfeatError, match="Feature names must be in the same order as they were in fit"):
        p.partial_fit(df[df.columns[::-1]][15:])
    with pytest.raises(BertfeatError, match="Feature names unseen at fit time"):
        p.partial_fit(df.rename(columns={"a": "z"})[15:])
    p.partial_fit(df[15:])  # the refused chunks were not added
    np.testing.assert_allclose(p.mean_, PCA(2).fit(df).mean_, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fraction", ["0.9", 1.0, 2.0, 0, -1, float("nan"), True, None])
def test_components_needed_refuses_what_is_no_fraction(fraction):
    """components_needed("0.9"), (1.0), (2.0) or (nan) said None (unknown, as beyond a randomized fit's known top k),
    (0) and (-1) said 1: now an error naming the value."""
    pca = PCA().fit(known_spectrum(n=30, d=4))
    assert _message(lambda: pca.components_needed(fraction)) == (
        f"fraction={fraction!r} is not a fraction in (0, 1) - pass the share of the variance the components should "
        "explain, e.g. 0.95")
    assert pca.components_needed(np.float32(0.999999)) == 4 and pca.components_needed(1e-9) == 1


def test_merge_names_the_class_it_refuses(sk):
    """merge with scikit-learn's PCA said "can only merge a PCA with a PCA, got PCA"."""
    X = known_spectrum(n=30, d=4)
    assert _message(lambda: PCA(2).partial_fit(X).merge(sk(2).fit(X))) == (
        "can only merge a bertfeat.PCA with a bertfeat.PCA, got sklearn.decomposition._pca.PCA - pass a bertfeat.PCA "
        "fitted with partial_fit")
    assert "got builtins.dict" in _message(lambda: PCA(2).merge({}))


def test_merge_refuses_the_statistics_of_other_columns(sk):
    """merge combined partial fits of the same rows with reordered columns (a DataFrame's other feature_names_in_) into
    wrong numbers without a word; now it refuses them as partial_fit refuses a reordered chunk. Matching names merge to
    scikit-learn's fit of all rows, and an empty PCA merged with a fitted one takes its names."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(known_spectrum(n=80, d=4, seed=3, offset=2.0), columns=list("abcd"))
    first = PCA(2).partial_fit(df[:40])
    with pytest.raises(BertfeatError) as e:
        first.merge(PCA(2).partial_fit(df[df.columns[::-1]][40:]))
    assert e.value.message == ("The feature names of the PCAs merged should match. Feature names must be in the same "
                               "order in both PCAs. - merge partial fits of DataFrames with the same columns, in the "
                               "same order")
    with pytest.raises(BertfeatError, match="Feature names of the other PCA, unseen by this one: 'z'. "
                                            "Feature names of this PCA, missing from the other: 'a'. -"):
        first.merge(PCA(2).partial_fit(df.rename(columns={"a": "z"})[40:]))
    with pytest.warns(UserWarning, match="this PCA was fitted with feature names, but the other without feature names"):
        first.merge(PCA(2).partial_fit(df[40:].to_numpy()))
    merged = first.merge(PCA(2).partial_fit(df[40:]))
    ref = sk(2, svd_solver="full").fit(df)
    assert list(merged.feature_names_in_) == list("abcd") and merged.n_samples_ == 80
    np.testing.assert_allclose(merged.components_, ref.components_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(merged.explained_variance_, ref.explained_variance_, rtol=1e-10)
    assert list(PCA(2).merge(first).feature_names_in_) == list("abcd")


@pytest.mark.parametrize("solver", ["auto", "svd"])
@pytest.mark.parametrize("n_components", [None, 3, 0.8])
@pytest.mark.parametrize("whiten", [False, True])
def test_probabilistic_model_equals_scikit_learn(sk, solver, n_components, whiten):
    """get_covariance, get_precision, score_samples and score did not exist (cross_val_score(PCA(2), X) failed): now
    scikit-learn's formulas (its whiten scaling and noise_variance_ included), to 1e-10 in float64."""
    X = known_spectrum(n=300, d=10, seed=5, offset=2.0)
    new = known_spectrum(n=50, d=10, seed=6, offset=2.5)
    ours = PCA(n_components, solver=solver, whiten=whiten).fit(X)
    theirs = sk(n_components, svd_solver="full", whiten=whiten).fit(X)
    assert ours.n_components_ == theirs.n_components_
    for name in ("get_covariance", "get_precision"):
        want = getattr(theirs, name)()
        np.testing.assert_allclose(getattr(ours, name)(), want, rtol=0, atol=1e-10 * np.abs(want).max(), err_msg=name)
    for rows in (X, new):
        np.testing.assert_allclose(ours.score_samples(rows), theirs.score_samples(rows), rtol=1e-10)
        assert ours.score(rows) == pytest.approx(theirs.score(rows), rel=1e-10)


def test_probabilistic_model_after_partial_fit_and_its_errors(sk):
    X = known_spectrum(n=300, d=10, seed=5)
    stream = PCA(3)
    for chunk in np.array_split(X, 4):
        stream.partial_fit(chunk)
    theirs = sk(3, svd_solver="full").fit(X)
    assert stream.score(X) == pytest.approx(theirs.score(X), rel=1e-10)  # decomposes on first use
    np.testing.assert_allclose(stream.get_precision() @ stream.get_covariance(), np.eye(10), rtol=0, atol=1e-10)
    with pytest.raises(NotFittedError):
        PCA(3).score(X)
    bad = X.copy()
    bad[7, 2] = np.nan
    with pytest.raises(BertfeatError, match=r"features contain NaN or inf: 1 value\(s\), first at row 7, column 2 "
                                            r"\(nan\) - remove or repair those rows before scoring"):
        stream.score_samples(bad)
    with pytest.raises(BertfeatError, match="X has 4 features, but PCA is expecting 10 features as input"):
        stream.score(X[:, :4])


def test_exact_auto_never_picks_randomized_and_seeds_are_checked():
    """bertfeat pca fit's wide fit asks choose_solver for an exact solver; random_state is a seed or refused."""
    assert choose_solver("auto", 5_000, 20_000, 100, exact=True) == "svd"
    assert choose_solver("auto", 100_000, 768, 100, exact=True) == "covariance"
    assert choose_solver("randomized", 5_000, 20_000, 100, exact=True) == "randomized"  # asked for by name
    X = known_spectrum(n=60, d=8)
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(BertfeatError, match=r"random_state=.* is not a seed - pass a whole number >= 0"):
            PCA(2, random_state=bad).fit(X)
    for good in (None, 0, np.int64(7), np.random.default_rng(0)):
        assert PCA(2, solver="randomized", random_state=good).fit(X).n_components_ == 2


def test_save_and_load_keep_feature_names_and_refuse_a_directory(tmp_path):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(4)
    df = pd.DataFrame(rng.standard_normal((20, 3)), columns=["x", "y", "z"])
    path = PCA(2).fit(df).save(tmp_path / "m.npz")
    loaded = PCA.load(path)
    assert list(loaded.feature_names_in_) == ["x", "y", "z"] and loaded.feature_names_in_.dtype == object
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded.transform(df)  # no "fitted without feature names" warning
    with pytest.warns(UserWarning, match="X does not have valid feature names, but PCA was fitted with feature names"):
        loaded.transform(df.to_numpy())
    with pytest.raises(BertfeatError, match="is a directory, not a model file"):
        PCA(2).fit(df).save(tmp_path)
    with pytest.raises(BertfeatError, match="whiten='yes' is not True or False"):
        PCA(2, whiten="yes").fit(df)


def test_partial_fit_of_a_model_saved_without_statistics_says_how_to_save_it(tmp_path):
    """A loaded model without statistics said "fitted in one pass with solver='covariance' ... fit with
    solver='covariance'", which it was; save(include_stats=True) of a one-pass svd fit wrote no statistics silently."""
    X = np.random.default_rng(0).standard_normal((50, 6))
    path = PCA(3, solver="covariance").fit(X).save(tmp_path / "m.npz")
    with pytest.raises(BertfeatError) as e:
        PCA.load(path).partial_fit(X)
    assert e.value.message == (f"this PCA was loaded from {path}, saved without the statistics partial_fit updates - save "
                               "the model with PCA.save(path, include_stats=True) to keep updating it, or start a new PCA "
                               "for partial_fit")
    with pytest.raises(BertfeatError, match=r"no statistics to save \(fitted in one pass with solver='svd'\)"):
        PCA(3, solver="svd").fit(X).save(tmp_path / "s.npz", include_stats=True)
    assert not (tmp_path / "s.npz").exists()
    kept = PCA(3, solver="covariance").fit(X).save(tmp_path / "k.npz", include_stats=True)
    more = PCA.load(kept).partial_fit(X)
    np.testing.assert_allclose(more.mean_, X.mean(axis=0), atol=1e-12)


def test_mixed_accumulation_falls_back_to_float64_for_rows_far_from_the_shift():
    """partial_fit on 2 zero rows, then on data around 300 with spreads 1 .. 0.1: the shift (the first rows' mean) is
    300 standard deviations from the later rows, so their float32 products lost the variances (the smallest 15 % off
    under the default accumulate='mixed'); such a block is now multiplied in float64. A stationary stream keeps its
    float32 products (the statistics differ from float64 ones by float32 rounding, not at all when it falls back)."""
    from bertfeat.pca import stats as pca_stats

    rng = np.random.default_rng(0)
    X = np.vstack([np.zeros((2, 4)), 300 + rng.standard_normal((20000, 4)) * [1, .5, .2, .1]]).astype(np.float32)
    exact = PCA(4, accumulate="float64").partial_fit(X[:2]).partial_fit(X[2:])
    mixed = PCA(4, accumulate="mixed").partial_fit(X[:2]).partial_fit(X[2:])
    err = np.abs(mixed.explained_variance_ / exact.explained_variance_ - 1).max()
    print(f"\nrows 300 std from the shift, mixed vs float64: largest relative variance difference {err:.1e}")
    assert err <= 1e-9
    Y = rng.standard_normal((5000, 6)).astype(np.float32)
    st = pca_stats.first_stats(Y)
    s32, sq32 = pca_stats.chunk_stats(Y, st.shift, 0, mixed=True)
    s64, sq64 = pca_stats.chunk_stats(Y, st.shift, 0, mixed=False)
    assert 0 < np.abs(sq32 - sq64).max() <= 1e-5 * np.abs(sq64).max()  # float32 products: close, not identical


def test_nan_in_inverse_transform_and_pandas_na_are_refused_like_nan():
    """inverse_transform returned NaN rows where scikit-learn raises; a nullable pandas column's pd.NA was a raw
    TypeError ("float() argument must be ... not 'NAType'"): both are the NaN error, naming row and column."""
    X = np.random.default_rng(0).standard_normal((20, 3))
    p = PCA(2).fit(X)
    with pytest.raises(BertfeatError) as e:
        p.inverse_transform([[1.0, np.nan]])
    assert e.value.message == ("features contain NaN or inf: 1 value(s), first at row 0, column 1 (nan) - remove or "
                               "repair those rows before inverse_transform")
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(X, columns=list("abc")).astype("Float64")
    np.testing.assert_allclose(PCA(2).fit(df).components_, p.components_, atol=1e-12)  # nullable, no NA: as floats
    df.iloc[3, 1] = pd.NA
    with pytest.raises(BertfeatError, match=r"first at row 3, column 1 \(nan\) - remove or repair those rows before fitting"):
        PCA(2).fit(df)


@pytest.mark.parametrize("n, d, true_k", [(500, 20, 5), (2000, 64, 10), (1000, 100, 40), (400, 12, 12)])
def test_mle_chooses_as_scikit_learn_does(n, d, true_k):
    """n_components='mle' (Minka's choice of dimension) gives scikit-learn's n_components_ and variances, with every
    solver that knows the whole spectrum and with partial_fit; a save / load keeps 'mle'."""
    from sklearn.decomposition import PCA as SkPCA

    rng = np.random.default_rng(d)
    X = rng.standard_normal((n, true_k)) @ rng.standard_normal((true_k, d)) * 3 + rng.standard_normal((n, d)) * 0.5
    ref = SkPCA("mle", svd_solver="full").fit(X)
    print(f"\nmle n={n} d={d}: scikit-learn keeps {ref.n_components_}")
    for p in (PCA("mle", solver="svd").fit(X), PCA("mle", solver="covariance").fit(X),
              PCA("mle", accumulate="float64").partial_fit(X[:n // 3]).partial_fit(X[n // 3:])):
        assert p.n_components_ == ref.n_components_
        np.testing.assert_allclose(p.explained_variance_, ref.explained_variance_, rtol=1e-9)
        np.testing.assert_allclose(np.abs(p.transform(X[:5])), np.abs(ref.transform(X[:5])), atol=1e-8)


@pytest.mark.parametrize("n, d, rank, scale", [(100, 30, 3, 5.0), (200, 12, 5, 10.0), (300, 40, 7, 30.0)])
def test_mle_on_exactly_low_rank_data_keeps_its_rank_at_any_scale(n, d, rank, scale):
    """Data of exact rank: eigh's spectrum puts its zero variances at ~eps x the largest (1e-13 on variances of 100),
    where svd_solver='full' has ~1e-30, and scikit-learn's absolute 1e-15 cut took them as variance: the default
    solver (covariance) and partial_fit kept 12 components of a rank-3 (100, 30) matrix (11 by partial_fit; the same
    data / 10: 3). They keep scikit-learn's 'full' number now, as the svd solver did."""
    from sklearn.decomposition import PCA as SkPCA

    rng = np.random.default_rng(rank)
    X = rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d)) * scale
    ref = SkPCA("mle", svd_solver="full").fit(X)
    assert ref.n_components_ == rank
    for p in (PCA("mle").fit(X), PCA("mle", solver="covariance").fit(X), PCA("mle", solver="svd").fit(X),
              PCA("mle").partial_fit(X[:n // 4]).partial_fit(X[n // 4:])):
        assert p.n_components_ == rank and p.transform(X).shape == (n, rank)
        np.testing.assert_allclose(p.explained_variance_, ref.explained_variance_, rtol=1e-9)
        assert abs(p.noise_variance_) < 1e-12 * ref.explained_variance_[0]


@pytest.mark.parametrize("scale", [1e8, 1e10, 1e12])
def test_mle_keeps_the_rank_of_large_scale_data_with_every_solver_and_the_report_says_it(scale):
    """Data of exact rank 5 at a scale of 1e8 and more: the svd solver kept 6 and 19 components, as scikit-learn's
    'full' does (its absolute 1e-15 cut counts the SVD's rounding as variance there), while the covariance solver kept
    5: `auto` chose by size, so the same data's n_components_ depended on the solver (found by audit), and the report's
    Minka suggestion counted the rounding too. Every solver keeps the rank now (below each solver's rounding floor a
    variance counts as 0), and the report suggests what 'mle' keeps."""
    from sklearn.decomposition import PCA as SkPCA

    from bertfeat.pca.report import build_pca_report

    rng = np.random.default_rng(8)
    X = rng.standard_normal((200, 5)) @ rng.standard_normal((5, 20)) * scale
    assert SkPCA("mle", svd_solver="full").fit(X).n_components_ > 5  # scikit-learn's rounding taken as variance
    ref = SkPCA(5, svd_solver="full").fit(X)
    for p in (PCA("mle", solver="svd").fit(X), PCA("mle", solver="covariance").fit(X), PCA("mle").fit(X),
              PCA("mle").partial_fit(X[:50]).partial_fit(X[50:])):
        assert p.n_components_ == 5
        np.testing.assert_allclose(p.explained_variance_, ref.explained_variance_, rtol=1e-9)
        assert build_pca_report(p)["suggestions"]["mle"]["components"] == 5
    for solver in ("svd", "covariance"):  # a fit of another n_components: the report's suggestion alike
        assert build_pca_report(PCA(3, solver=solver).fit(X))["suggestions"]["mle"]["components"] == 5


def test_mle_on_float32_rows_of_low_rank_accumulates_in_float64(tmp_path, capsys):
    """Fewer distinct rows than features (a small corpus with duplicates): the smallest variances are zero, which
    float32 block products blur to ~1e-8 of the largest, and Minka's choice read that noise as signal (91 components
    here, 339 on 300 real sentences repeated, against scikit-learn's 59 / 299). 'mle' now always accumulates in
    float64: scikit-learn's choice, by PCA and by `pca fit -n mle` (whose default is mixed)."""
    from sklearn.decomposition import PCA as SkPCA

    from bertfeat.cli.app import main

    rng = np.random.default_rng(0)
    d, distinct = 128, 60
    base = (rng.standard_normal((distinct, d)) * np.geomspace(1, 0.01, d)).astype(np.float32) * 0.05
    X = np.repeat(base, 10, axis=0)[rng.permutation(distinct * 10)]  # (600, 128) float32, rank 59 once centred
    ref = SkPCA("mle", svd_solver="full").fit(X.astype(np.float64)).n_components_
    assert ref == 59
    assert PCA("mle", solver="covariance").fit(X).n_components_ == ref
    assert PCA("mle", accumulate="mixed").partial_fit(X[:300]).partial_fit(X[300:]).n_components_ == ref
    assert PCA(None, accumulate="mixed").fit(X).explained_variance_[ref:].max() > 1e-12  # what mle used to read
    np.save(tmp_path / "f.npy", X)
    assert main(["pca", "fit", str(tmp_path / "f.npy"), "-n", "mle", "-o", str(tmp_path / "m.npz"), "-q"]) == 0
    assert PCA.load(tmp_path / "m.npz").n_components_ == ref


def test_mle_is_refused_where_scikit_learn_refuses_it(tmp_path):
    rng = np.random.default_rng(0)
    with pytest.raises(BertfeatError) as e:
        PCA("mle").fit(rng.standard_normal((10, 20)))
    assert e.value.message == ("n_components='mle' needs at least as many samples as features (n_samples 10 < n_features "
                               "20), as scikit-learn's does - fit on more rows, or pass a number of components")
    with pytest.raises(BertfeatError, match="n_components='mle' needs the whole spectrum, which the randomized solver"):
        PCA("mle", solver="randomized").fit(rng.standard_normal((100, 20)))
    with pytest.raises(BertfeatError, match="n_components='MLE' is not a number"):
        PCA("MLE").fit(rng.standard_normal((100, 20)))
    X = rng.standard_normal((100, 6))
    p = PCA("mle").fit(X)
    back = PCA.load(p.save(tmp_path / "m.npz"))
    assert back.n_components == "mle" and back.n_components_ == p.n_components_


def test_not_fitted_is_scikit_learns_error_too_once_scikit_learn_is_imported():
    """``except sklearn.exceptions.NotFittedError`` (the class a pipeline's code names) catches bertfeat's; the message
    never names a private attribute (get_feature_names_out reads one)."""
    sk = pytest.importorskip("sklearn.exceptions")
    with pytest.raises(sk.NotFittedError) as e:
        PCA().transform(np.ones((3, 2)))
    assert isinstance(e.value, NotFittedError) and isinstance(e.value, ValueError)
    assert not hasattr(PCA(), "components_")
    with pytest.raises(sk.NotFittedError) as e:
        PCA().get_feature_names_out()
    assert str(e.value) == ("this PCA is not fitted yet - call fit(X) or partial_fit(X), or load a saved model with "
                            "PCA.load(path)")


def test_an_overflow_names_the_dtype_it_happened_in():
    X = np.random.default_rng(0).standard_normal((50, 4)) * 1e160
    with pytest.raises(BertfeatError) as e:
        PCA(2, accumulate="float64").fit(X)
    assert str(e.value) == ("rows 0-49: products of these float64 features overflow (values near 1e154 or larger) - "
                            "scale the features down")


def test_the_not_fitted_error_unpickles_in_a_process_that_never_made_it(tmp_path):
    """Its class is made at the first raise after scikit-learn's import; another process rebuilds it by name."""
    import pickle
    import subprocess
    import sys

    pytest.importorskip("sklearn.exceptions")
    with pytest.raises(NotFittedError) as e:
        PCA().transform(np.ones((3, 2)))
    (tmp_path / "e.pkl").write_bytes(pickle.dumps(e.value))
    code = ("import pickle, sys, sklearn.exceptions; e = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "print(isinstance(e, sklearn.exceptions.NotFittedError), e.fix)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "e.pkl")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True call fit(X) or partial_fit(X), or load a saved model with PCA.load(path)"


# -- overflow: float32 products that overflow are redone in float64; float64 overflow is refused by every solver -----


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("scale", [1e30, "max"])
def test_mixed_accumulation_fits_what_float64_fits(sk, scale):
    """float32 rows near 1e30 (float32 products overflow) or at float32's largest (their differences overflow) were
    refused under the default accumulate="mixed" ("pass them as float64", "the statistics overflowed to inf") while
    accumulate="float64" and the svd solver fit them: mixed redoes such a block in float64, so all agree, streamed
    or not, with scikit-learn on the float64 upcast, and no NumPy warning is shown."""
    rng = np.random.default_rng(3)
    if scale == "max":
        X = np.full((6, 3), np.finfo(np.float32).max, dtype=np.float32)
        X[::2, 0] *= -1
        X[1::3, 2] = 0
    else:
        X = (rng.standard_normal((50, 4)) * scale).astype(np.float32)
    theirs = sk(svd_solver="full").fit(X.astype(np.float64))
    stream = PCA()
    for chunk in np.array_split(X, 3):
        stream.partial_fit(chunk)
    for ours in (PCA().fit(X), PCA(solver="covariance").fit(X), stream):
        assert ours.n_components_ == theirs.n_components_
        np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance_, rtol=1e-10,
                                   atol=1e-10 * theirs.explained_variance_[0])
        np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-12)


@pytest.mark.parametrize("scale", [1e-20, 1e-30, 1e-40])
def test_mixed_accumulation_fits_features_of_tiny_scale(sk, scale):
    """float32 rows of scale 1e-30 (1e-40: subnormal) under the default accumulate="mixed": their float32 squares
    underflowed to 0, so the fit had variances of 0 and an arbitrary basis (ratios 0, transform and report meaningless)
    where accumulate="float64", the svd solver and scikit-learn on the float64 upcast give 1e-60 and the true
    components. Such a block is redone in float64; a constant column beside it is not what triggers it."""
    rng = np.random.default_rng(5)
    X = ((rng.standard_normal((200, 4)) * [3.0, 2.0, 1.0, 0.5]) @ np.linalg.qr(rng.standard_normal((4, 4)))[0]
         * scale).astype(np.float32)
    theirs = sk(svd_solver="full").fit(X.astype(np.float64))
    stream = PCA()
    for chunk in np.array_split(X, 3):
        stream.partial_fit(chunk)
    for ours in (PCA().fit(X), stream):
        np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance_, rtol=1e-9)
        np.testing.assert_allclose(ours.explained_variance_ratio_, theirs.explained_variance_ratio_, rtol=1e-9)
        np.testing.assert_allclose(ours.components_, theirs.components_, atol=1e-9)
    Y = np.c_[X, np.zeros(200, np.float32)] + np.float32(1.0)  # mean 1 (the shift), values 1 + 1e-30: float32's 1
    assert PCA().fit(Y).explained_variance_.max() == 0.0  # rows equal in float32: nothing to redo, nothing to find


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("solver", ["auto", "covariance", "svd", "randomized"])
def test_float64_overflow_is_refused_by_every_solver(solver):
    """float64 rows near 1e160: the covariance solver refused them, but the svd solver returned NaN variances and
    components and the randomized one inf, silently; now each refuses them with the same error, without warnings."""
    X = np.random.default_rng(0).standard_normal((50, 4)) * 1e160
    with pytest.raises(BertfeatError) as e:
        PCA(2, solver=solver).fit(X)
    assert str(e.value) == ("rows 0-49: products of these float64 features overflow (values near 1e154 or larger) - "
                            "scale the features down")


UNDERFLOW = ("these float64 features vary by so little (about 1e-154 or less) that their squares underflow and their "
             "variances would be lost - scale the features up (multiply them by 1e150, say): the components stay the same")


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("solver", ["auto", "covariance", "svd", "randomized"])
def test_float64_underflow_is_refused_by_every_solver_and_partial_fit(solver):
    """float64 rows that vary by ~1e-160 fitted variances 5e-4 off (subnormal squares), and at 1e-165 all 0 with
    ratios 0 of data that plainly varies, silently (found by audit; the overflow side was refused). Refused now, by
    every solver and by partial_fit naming its chunk's rows; data at 1e-150 fits scikit-learn's ratios, rows all
    alike still fit variances of 0."""
    from sklearn.decomposition import PCA as SkPCA

    rng = np.random.default_rng(0)
    base = rng.standard_normal((300, 8)) @ rng.standard_normal((8, 8))
    for scale in (1e-160, 1e-165):
        with pytest.raises(BertfeatError) as e:
            PCA(3, solver=solver, random_state=0).fit(base * scale)
        assert str(e.value) == "rows 0-299: " + UNDERFLOW
    if solver == "auto":
        with pytest.raises(BertfeatError) as e:
            PCA(3).partial_fit(base[:100] * 1e-160)
        assert str(e.value) == "rows 0-99: " + UNDERFLOW
        # beside rows of 1e-150, rows of 1e-160 lose nothing that counts: accepted, as fit takes them together
        X = np.r_[base[:100] * 1e-150, base[100:] * 1e-160]
        pca = PCA(3).partial_fit(X[:100]).partial_fit(X[100:])
        np.testing.assert_allclose(pca.explained_variance_ratio_, PCA(3, solver="svd").fit(X).explained_variance_ratio_,
                                   rtol=1e-9)
    ours = PCA(3, solver=solver, random_state=0).fit(base * 1e-150).explained_variance_ratio_
    np.testing.assert_allclose(ours, SkPCA(3, svd_solver="full").fit(base).explained_variance_ratio_, rtol=1e-9)
    assert PCA(2, solver=solver, random_state=0).fit(np.full((5, 3), 1e-300)).explained_variance_.max() == 0.0


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_float32_projections_that_overflow_say_so():
    """Finite float32 rows whose projections pass float32's largest: the error said "the statistics overflowed"
    (there are none in a transform), with NumPy's overflow warning above it."""
    X = np.full((3, 2), np.finfo(np.float32).max, dtype=np.float32)
    X[0, 0] *= -1
    pca = PCA().fit(X)
    with pytest.raises(BertfeatError) as e:
        pca.transform(X)
    assert str(e.value) == ("features are too large: their projections overflow float32 - scale the features down "
                            "before transforming, or pass them as float64")
    assert np.isfinite(pca.transform(X.astype(np.float64))).all()


# -- a variance below 0 by rounding: the randomized solver's noise on data of rank k -----------------------------


@pytest.mark.parametrize("rank", [1, 3, 4])
def test_randomized_fit_of_rank_k_data_saves_a_model_that_loads(tmp_path, rank):
    """On data of rank k, total - the top k variances rounds to a tiny negative noise_variance_ (-4e-16 ...): the
    saved model was refused by PCA.load (and `pca transform`) as "not a bertfeat PCA model: its variances are
    negative". The noise is a variance, so never below 0; a file already written so loads, its noise as 0."""
    rng = np.random.default_rng(rank)
    X = rng.standard_normal((60, rank)) @ rng.standard_normal((rank, 40))
    pca = PCA(rank, solver="randomized", random_state=0).fit(X)
    assert 0.0 <= pca.noise_variance_ < 1e-13 * pca.total_variance_
    loaded = PCA.load(pca.save(tmp_path / "r.npz"))
    np.testing.assert_array_equal(loaded.transform(X), pca.transform(X))
    assert loaded.noise_variance_ == pca.noise_variance_
    with np.load(tmp_path / "r.npz", allow_pickle=False) as z:  # as earlier releases wrote it: the rounded value
        arrays = {key: z[key] for key in z.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["meta_sha256"]  # (earlier releases recorded no digest of the metadata)
    for noise, loads in ((-4e-16, True), (-1e-3 * meta["total_variance"], False)):
        arrays["meta"] = np.array(json.dumps(meta | {"noise_variance": noise}, sort_keys=True))
        with open(tmp_path / "old.npz", "wb") as f:
            np.savez(f, **arrays)
        if loads:
            assert PCA.load(tmp_path / "old.npz").noise_variance_ == 0.0
        else:  # not rounding: a damaged or foreign file, refused as before
            with pytest.raises(BertfeatError, match="its variances are negative or not finite"):
                PCA.load(tmp_path / "old.npz")


# -- no variance at all (every row the same): a fraction keeps 1 component, as scikit-learn -------------------------


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("solver", ["auto", "svd", "covariance", "stream"])
def test_a_fraction_of_no_variance_keeps_one_component(sk, solver):
    """Rows all alike: no k has a cumulative ratio above 0.95, and the fit kept every component (min(n, d)) where
    scikit-learn keeps 1 (its ratios are 0 / 0); PCA.components_needed said 1 (with a RuntimeWarning) and the report's
    thresholds "not reached". Now 1 everywhere, as n_components='mle' keeps there."""
    from bertfeat.pca.report import build_pca_report

    X = np.zeros((20, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scikit-learn's 0 / 0
        theirs = sk(0.95, svd_solver="full").fit(X)
    if solver == "stream":
        ours = PCA(0.95)
        for chunk in np.array_split(X, 5):
            ours.partial_fit(chunk)
    else:
        ours = PCA(0.95, solver=solver).fit(X)
    assert ours.n_components_ == theirs.n_components_ == 1
    assert ours.transform(X).shape == theirs.transform(X).shape == (20, 1)
    assert ours.components_needed(0.5) == 1
    with pytest.warns(BertfeatWarning, match="the features have no variance"):  # the report says so (test_report)
        assert [t["components"] for t in build_pca_report(ours)["thresholds"]] == [1, 1, 1, 1]
    assert PCA(0.5, solver=solver if solver != "stream" else "auto").fit(np.full((5, 3), 7.25)).n_components_ == 1


# -- a singular probabilistic model: no precision, log-likelihood -inf (GridSearchCV ranks it as scikit-learn) -----


def _singular_fits():
    """Data whose PCA keeps no noise and leaves directions without variance: (name, X, d, k)."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 5))
    return [("constant column", np.hstack([base, np.full((40, 1), 2.5)]), 6, 6),
            ("repeated columns", np.hstack([base, base[:, :2]]), 7, 7),
            ("two rows", rng.standard_normal((2, 4)), 4, 2),
            ("fewer rows than features", rng.standard_normal((5, 10)), 10, 5)]


@pytest.mark.parametrize("solver", ["svd", "covariance"])
@pytest.mark.parametrize("case", _singular_fits(), ids=lambda c: c[0])
def test_a_singular_model_has_no_precision_and_scores_minus_inf(case, solver):
    """Every component kept (noise_variance_ 0) of rows that vary in fewer directions than they have features: the
    model covariance is singular. get_precision raised NumPy's LinAlgError or inverted it into rounding noise, and
    score_samples gave finite numbers (+100, +2e16) where scikit-learn's are -inf (or LinAlgError)."""
    _, X, d, k = case
    pca = PCA(solver=solver).fit(X)
    assert pca.n_components_ == k and pca.noise_variance_ == 0.0
    with pytest.raises(BertfeatError) as e:
        pca.get_precision()
    assert e.value.message == (
        f"the PCA's probabilistic model has no precision: its covariance is singular (noise_variance_ is 0 and its {k} "
        f"components leave directions of the {d} features without variance) - fit with n_components below the rank "
        "of the rows (below min(n_samples, n_features), fewer still with constant or repeated columns), so that the "
        "variance left over is the noise")
    assert np.isfinite(pca.get_covariance()).all()
    assert np.all(pca.score_samples(X) == -np.inf) and pca.score(X) == -np.inf
    whitened = PCA(solver=solver, whiten=True).fit(X)
    assert np.all(whitened.score_samples(X[:3]) == -np.inf)


def _rounding_noise_fits():
    """n_components at the rank of the rows: the noise left is rounding (name, X, k, solver, whiten)."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal((200, 6)) @ rng.standard_normal((6, 6))
    const, dup = base.copy(), base.copy()
    const[:, 2], dup[:, 3] = 3.5, dup[:, 1]
    rank2 = rng.standard_normal((200, 2)) @ rng.standard_normal((2, 6))
    return [("rank 2, covariance, whiten", rank2, 2, "covariance", True),  # noise 3.6e-16: scored +67
            ("constant column, svd, whiten", const, 5, "svd", True),  # noise 2.3e-33: +3.3e16
            ("repeated column, svd", dup, 5, "svd", False)]  # noise 8.9e-33: +2.6e17 (scikit-learn's +2.5e17)


@pytest.mark.parametrize("case", _rounding_noise_fits(), ids=lambda c: c[0])
def test_a_model_whose_noise_is_rounding_is_singular_too(sk, case):
    """noise_variance_ of 1e-33 .. 1e-16 (n_components at the rank of rows with constant or repeated columns) was
    taken for noise: its inverse gave log-likelihoods of +67 .. +2.6e17, which win a grid search. Noise within
    numpy.linalg.matrix_rank's tolerance of the largest eigenvalue (d * eps) is no noise: -inf, as scikit-learn's in
    the first two cases, and get_precision refuses, saying so."""
    _, X, k, solver, whiten = case
    ours = PCA(k, solver=solver, whiten=whiten).fit(X)
    assert ours.n_components_ == k and 0.0 < ours.noise_variance_ <= 1e-15 * ours.explained_variance_[0]
    assert ours.score(X) == -np.inf and np.all(ours.score_samples(X[:5]) == -np.inf)
    with pytest.raises(BertfeatError) as e:
        ours.get_precision()
    largest = ours.explained_variance_[0] ** (2 if whiten else 1)
    assert e.value.what == ("the PCA's probabilistic model has no precision: its covariance is singular to rounding "
                            f"(noise_variance_ {ours.noise_variance_:.3g} is within 6 x eps of its largest eigenvalue "
                            f"{largest:.3g}, numpy.linalg.matrix_rank's tolerance)")
    if whiten:
        # -inf, or about as singular where its LAPACK rounds otherwise (OpenBLAS 0.3.31 Haswell: -1.7e16)
        assert sk(k, svd_solver="full", whiten=True).fit(X).score(X) < -1e15
    # a real noise is still scikit-learn's
    theirs = sk(k - 1, svd_solver="full", whiten=whiten).fit(X)
    assert PCA(k - 1, solver=solver, whiten=whiten).fit(X).score(X) == pytest.approx(theirs.score(X), rel=1e-9)


def test_a_real_noise_below_the_largest_variances_rounding_is_not_called_zero(sk):
    """Columns of scale 1e6 and 1e-6, one component kept: the noise left, ~1e-12, is the small columns' real variance
    (the covariance solver's graded path gets it to 1e-13 of itself), below the largest eigenvalue's rounding. The
    refusal said "noise_variance_ is 9.84e-13, 0 up to rounding" and to fit fewer components than the rank of the
    rows, which one component already is; it now says what the noise is below, and the fix that works: standardize."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 4)) * np.array([1e6, 1e-6, 1e-6, 1e-6])
    ours = PCA(1).fit(X)
    theirs = sk(1, svd_solver="full").fit(X)
    assert ours.noise_variance_ == pytest.approx(theirs.noise_variance_, rel=1e-9)
    with pytest.raises(BertfeatError) as e:
        ours.get_precision()
    assert e.value.what == ("the PCA's probabilistic model has no precision: its covariance is singular to rounding "
                            f"(noise_variance_ {ours.noise_variance_:.3g} is within 4 x eps of its largest eigenvalue "
                            f"{ours.explained_variance_[0]:.3g}, numpy.linalg.matrix_rank's tolerance)")
    assert e.value.fix.endswith("; or, for columns on very different scales, standardize them first (StandardScaler)")
    assert "0 up to rounding" not in e.value.render()
    standardized = (X - X.mean(axis=0)) / X.std(axis=0)  # what the fix says: a real noise, a precision
    np.testing.assert_allclose(PCA(1).fit(standardized).get_precision(),
                               sk(1, svd_solver="full").fit(standardized).get_precision(), rtol=1e-9, atol=1e-12)


def test_grid_search_on_fewer_rows_than_features_picks_as_scikit_learn(sk):
    """GridSearchCV(PCA(), {"n_components": [2, 3, None]}) on 15 x 30 rows: None (every component of 10 training rows)
    scored +2e16 from an inverse of a singular matrix (its rounding decides: -inf on other rows), so it won. Now
    -inf, which scikit-learn's fast_logdet gives too when its inverse is not positive definite (here it is: -1e16)."""
    from sklearn.model_selection import GridSearchCV

    X = np.random.default_rng(2).standard_normal((15, 30))
    grid = {"n_components": [2, 3, None]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GridSearchCV warns of the -inf score; scikit-learn's inverse of the matrix
        ours = GridSearchCV(PCA(), grid, cv=3).fit(X)
        theirs = GridSearchCV(sk(), grid, cv=3).fit(X)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"][:2], theirs.cv_results_["mean_test_score"][:2],
                               rtol=1e-10)
    assert ours.cv_results_["mean_test_score"][2] == -np.inf
    # scikit-learn's own score for None depends on its inverse's rounding (+1e16 or -inf): compared on 2 and 3 only
    assert ours.best_params_ == {"n_components": [2, 3][int(np.argmax(theirs.cv_results_["mean_test_score"][:2]))]} \
        == {"n_components": 3}


def test_a_text_column_or_ragged_rows_are_refused_naming_them():
    """Found by the API audit: a DataFrame with a text (or category) column, or rows of different lengths, failed with
    NumPy's own 'could not convert string to float' / 'inhomogeneous shape' (a ValueError naming no place)."""
    pd = need("pandas")
    df = pd.DataFrame({"a": [0.1, 0.5, 0.3, 0.9, 0.7], "t": list("vwxyz")})
    with pytest.raises(BertfeatError, match=r"^X holds 'v' \(str\) at row 0, column 1, not a number - pass numeric "
                                            r"features only \(drop or encode a text, category or date column "
                                            r"first\)$"):
        PCA(1).fit(df)
    # a date or a duration column was NumPy's raw TypeError 'float() argument must be ... not Timestamp' (audit)
    for when in (pd.date_range("2020-01-01", periods=5), pd.to_timedelta(np.arange(5), "s")):
        with pytest.raises(BertfeatError, match=r"^X holds (Timestamp|Timedelta)\('.*'\) \((Timestamp|Timedelta)\) "
                                                r"at row 0, column 1, not a number - pass numeric features only"):
            PCA(1).fit(df.assign(t=when))
    Xd = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]], dtype=object)
    Xd[0, 0] = {"foo": "bar"}  # a dict or a list: NumPy's TypeError, as scikit-learn's check_dtype_object expects
    with pytest.raises(TypeError, match="argument must be a string.* number"):
        PCA(1).fit(Xd)
    with pytest.raises(BertfeatError, match=r"^X holds 'x' \(str\) at row 0, column 0, not a number"):
        PCA(1).fit(pd.DataFrame({"c": pd.Categorical(list("xyxyx"))}))
    with pytest.raises(BertfeatError, match=r"^the rows of X are not one matrix \(.*\) - pass a matrix whose rows all "
                                            r"have the same number of features$"):
        PCA(1).fit([[1, 2], [3]])
    X = np.array([[1, 2.0], [3, 4], [5, 7]])
    np.testing.assert_allclose(PCA(1).fit(X.astype(object)).components_, PCA(1).fit(X).components_)
