"""The decompositions of the PCA (bertfeat.pca.estimator): from data or statistics to components and variances.

Owns ``Decomposition`` (the fitted numbers, every array float64), the sign convention
(``flip_signs``, scikit-learn >= 1.5), choosing k from a spectrum (``n_components_from_spec``,
``components_needed``), the three solvers - ``svd`` of centred data, ``randomized`` (Halko et al.)
and ``covariance`` (``eigh`` of the covariance built from ``stats.Stats``) - and what
``auto`` resolves to; and the probabilistic PCA model of a decomposition (Tipping & Bishop: its covariance,
precision and log-likelihoods, scikit-learn's ``get_covariance`` / ``get_precision`` / ``score_samples``).
Shape legend: n rows, d features, k kept components, r = min(n, d).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BertfeatError, opt
from .stats import Stats

__all__ = ["SOLVERS", "check_solver", "AUTO_COVARIANCE_MAX_FEATURES", "Decomposition", "flip_signs", "choose_solver", "randomized_svd",
           "n_components_from_spec", "components_needed", "decomposition_from_spectrum", "decompose_svd",
           "decompose_randomized", "decompose_stats", "GRADED_MIN_SPREAD", "covariance_eigh", "graded_eigh",
           "model_covariance", "model_singular", "singular_model_error", "model_precision", "log_likelihoods"]

SOLVERS = ("auto", "svd", "covariance", "randomized")


def check_solver(solver) -> None:
    """Refuse a solver name not in SOLVERS (the estimator's parameter, ``pca fit --solver``)."""
    if solver not in SOLVERS:
        raise BertfeatError(f"unknown {opt('solver', solver)}", f"use one of: {', '.join(SOLVERS)}")
#: ``auto`` uses the covariance solver up to this many features (a d x d float64 matrix).
AUTO_COVARIANCE_MAX_FEATURES = 4096
#: The covariance solver goes through ``graded_eigh`` when the columns' variances span more than this: a plain
#: ``eigh``'s error, ~eps x the largest variance, is then over ~1e-10 of the smallest column's variance (the graded
#: path takes ~4x ``eigh``'s time: 0.57 s against 0.15 s at d=768, one thread).
GRADED_MIN_SPREAD = 1e6


@dataclass
class Decomposition:
    """The decomposition: every array float64."""

    mean: np.ndarray  # (d,)
    components: np.ndarray  # (k, d)
    spectrum: np.ndarray  # (r,) all variances for exact solvers, (k,) for randomized
    total_variance: float
    n_samples: int
    n_components: int
    noise_variance: float
    solver: str


def flip_signs(Vt: np.ndarray) -> np.ndarray:
    """scikit-learn >= 1.5 sign rule: make the largest-|loading| entry of each row (k, d) positive."""
    idx = np.argmax(np.abs(Vt), axis=1)
    signs = np.sign(Vt[np.arange(Vt.shape[0]), idx])
    signs[signs == 0] = 1.0
    return Vt * signs[:, None]


def choose_solver(solver: str, n: int, d: int, spec: Any, *, exact: bool = False) -> str:
    """Resolve ``auto`` to a concrete solver for an (n, d) matrix and n_components ``spec``.

    ``covariance`` for tall data up to ``AUTO_COVARIANCE_MAX_FEATURES`` features, else ``svd`` when the matrix is
    small or most components (or the whole spectrum) are wanted, else the approximate ``randomized``. ``exact``: never
    ``randomized`` (``svd`` instead; ``bertfeat pca fit``'s fit of a wide file)."""
    if solver != "auto":
        return solver
    if n >= d and d <= AUTO_COVARIANCE_MAX_FEATURES:
        return "covariance"
    r = min(n, d)
    # 'mle' and fractions need every variance
    if exact or r <= 1000 or not isinstance(spec, numbers.Integral) or spec >= 0.8 * r:
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


def components_needed(ratio: np.ndarray, fraction: float) -> int | None:
    """Smallest k whose cumulative ratio exceeds ``fraction`` (the k ``n_components=fraction`` picks).

    None when the known part of the spectrum never exceeds it (randomized solver). No variance at all (every row the
    same: ratios all 0, or NaN from 0 / 0): 1, as scikit-learn keeps (its ratios are NaN there).
    """
    if len(ratio) and not np.any(ratio > 0):
        return 1
    cumsum = np.cumsum(ratio)
    k = int(np.searchsorted(cumsum, fraction, side="right")) + 1
    return k if k <= len(ratio) else None


def mle_log_likelihoods(spectrum: np.ndarray, n_samples: int) -> np.ndarray:
    """Minka's log-likelihood of each rank 0 .. d-1 for a full spectrum of variances (d,), sorted descending
    ("Automatic choice of dimensionality for PCA", NIPS 2000), as scikit-learn's ``_assess_dimension`` computes it
    rank by rank; ll[0] and ranks whose last variance is below 1e-15 are -inf, as there.

    scikit-learn sums log((s_i - s_j)(1/c_j - 1/c_i)) over i < rank, j > i in two Python loops, O(d^3) in all (2 s
    for d = 768). Split, it needs O(d^2) (8 ms): log(s_i - s_j) does not depend on the rank (a running sum over i
    of row sums); c = s for j < rank (a running sum over j); for j >= rank c_j is the tail's mean v, giving
    (d - rank) log(1/v - 1/s_i) per i < rank. A rank whose sum is not finite (two equal variances: log 0, where
    scikit-learn's math.log raises) is -inf.
    """
    s = np.asarray(spectrum, dtype=np.float64)
    d = s.shape[0]
    ll = np.full(d, -math.inf)
    if d < 2 or n_samples < 1:
        return ll
    rank = np.arange(1, d, dtype=np.float64)  # (d-1,) the ranks 1 .. d-1
    ln_n = math.log(n_samples)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m_free = np.array([math.lgamma((d - i + 1) / 2.0) - math.log(math.pi) * (d - i + 1) / 2.0 for i in range(1, d)])
        pu = -rank * math.log(2.0) + np.cumsum(m_free)
        pl = -np.cumsum(np.log(s[:-1])) * n_samples / 2.0
        tail = np.cumsum(s[::-1])[::-1][1:]  # (d-1,) sum of s[r:] for r = 1 .. d-1
        v = np.maximum(1e-15, tail / (d - rank))
        pv = -np.log(v) * n_samples * (d - rank) / 2.0
        m = d * rank - rank * (rank + 1.0) / 2.0
        pp = math.log(2.0 * math.pi) * (m + rank) / 2.0
        inv = 1.0 / s
        # the pairs i < r, j > i: log(s_i - s_j) whatever the rank (row sums over j > i, a running sum over i);
        # log(1/c_j - 1/c_i) is log(1/s_j - 1/s_i) for j < r (a running sum over j), log(1/v - 1/s_i) for j >= r
        gaps = np.cumsum([np.log(s[i] - s[i + 1:]).sum() for i in range(d - 1)])  # (d-1,)
        within = np.cumsum([0.0] + [np.log(inv[j] - inv[:j]).sum() for j in range(1, d - 1)])  # (d-1,)
        cross = (d - rank) * np.array([np.log(1.0 / v[r - 1] - inv[:r]).sum() for r in range(1, d)])
        pairs = np.cumsum(d - np.arange(1, d))  # (d-1,) sum over i < r of (d - i - 1) pairs
        pa = gaps + within + cross + pairs * ln_n
        out = pu + pl + pv + pp - pa / 2.0 - rank * ln_n / 2.0
    out[~np.isfinite(out) | (s[:-1] < 1e-15)] = -math.inf
    ll[1:] = out
    return ll


def infer_dimension(spectrum: np.ndarray, n_samples: int) -> int:
    """n_components='mle': the rank in 1 .. d-1 of largest Minka log-likelihood (scikit-learn's ``_infer_dimension``;
    its spectrum is every variance, so n_samples >= n_features); 1 when no rank has a finite one."""
    return max(1, int(np.argmax(mle_log_likelihoods(spectrum, n_samples))))


def n_components_from_spec(spec: Any, ratio: np.ndarray, r: int) -> int:
    """Number of components k for spec (None | int | fraction), given the whole ratio spectrum (r,)."""
    if spec is None:
        return r
    if isinstance(spec, numbers.Integral):
        return int(spec)
    k = components_needed(ratio, float(spec))
    return r if k is None else min(k, r)


def kept_by(spec: Any, r: Decomposition, d: int) -> int | None:
    """The number of components ``n_components=spec`` keeps of the decomposition ``r`` of d features, as the fit
    picks it (decomposition_from_spectrum, decompose_randomized), or None when that cannot be told from ``r``: 'mle'
    (Minka's choice, computed again, could fall otherwise on a near tie), a fraction of a spectrum without variance or
    incomplete, a value no fit accepts. ``PCA.save`` and the model file's check compare it with ``r.n_components``."""
    rank = min(r.n_samples, d)
    if spec is None:
        return rank
    if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
        return None
    if isinstance(spec, numbers.Integral):
        return int(spec) if spec >= 1 else None
    if 0 < spec < 1 and r.total_variance > 0 and len(r.spectrum) >= rank:
        return n_components_from_spec(float(spec), r.spectrum / r.total_variance, rank)
    return None


def decomposition_from_spectrum(
    mean: np.ndarray, Vt: np.ndarray, spectrum: np.ndarray, n: int, d: int, spec: Any, solver: str
) -> Decomposition:
    """Pick k from the full spectrum (r,) and its sign-flipped eigenvectors Vt (r, d)."""
    r = min(n, d)
    total = float(spectrum.sum())
    ratio = spectrum / total if total > 0 else np.zeros_like(spectrum)
    if spec == "mle" and n < d:
        raise BertfeatError(f"{opt('n_components', 'mle')} needs at least as many samples as features (n_samples {n} < "
                            f"n_features {d}), as scikit-learn's does", "fit on more rows, or pass a number of components")
    k = infer_dimension(spectrum, n) if spec == "mle" else n_components_from_spec(spec, ratio, r)
    noise = float(spectrum[k:r].mean()) if k < r else 0.0
    return Decomposition(mean, np.ascontiguousarray(Vt[:k]), spectrum, total, n, k, noise, solver)


def rounding_floor(spectrum: np.ndarray, n: int, d: int, solver: str) -> float:
    """The variance at or below which a solver gives a direction of no variance (its rounding): eigh's ~d x eps x the
    largest variance (``covariance``), the SVD's numpy.linalg.matrix_rank tolerance on the singular values, squared
    (``svd``). Minka's choice ('mle') counts what is below it as 0, so it keeps the rank of data of exact rank at any
    scale (scikit-learn's absolute 1e-15 cut counts rounding as variance from a scale of ~1e8 on)."""
    if not len(spectrum):
        return 0.0
    eps = float(np.finfo(np.float64).eps)
    if solver == "covariance":
        return d * eps * float(spectrum[0])
    return float(spectrum[0]) * (max(n, d) * eps) ** 2


def mle_on_rank(mean: np.ndarray, Vt: np.ndarray, spectrum: np.ndarray, n: int, d: int, solver: str) -> Decomposition:
    """n_components='mle' with the variances at or below the solver's rounding floor counted as 0 for the choice; the
    decomposition keeps them as computed."""
    floor = rounding_floor(spectrum, n, d, solver)
    k = decomposition_from_spectrum(mean, Vt, np.where(spectrum > floor, spectrum, 0.0), n, d, "mle", solver).n_components
    return decomposition_from_spectrum(mean, Vt, spectrum, n, d, k, solver)


def decompose_svd(Xc: np.ndarray, mean: np.ndarray, spec: Any) -> Decomposition:
    """``svd`` solver: ``numpy.linalg.svd`` of the centred data Xc (n, d), float64."""
    n, d = Xc.shape
    _, S, Vt = np.linalg.svd(Xc, full_matrices=False)  # S (r,), Vt (r, d)
    spectrum = S**2 / (n - 1)
    if spec == "mle":
        return mle_on_rank(mean, flip_signs(Vt), spectrum, n, d, "svd")
    return decomposition_from_spectrum(mean, flip_signs(Vt), spectrum, n, d, spec, "svd")


def decompose_randomized(Xc: np.ndarray, mean: np.ndarray, spec: Any, random_state: Any) -> Decomposition:
    """``randomized`` solver on the centred data Xc (n, d): only the top k variances are known."""
    n, d = Xc.shape
    r = min(n, d)
    if spec is not None and not isinstance(spec, numbers.Integral):
        what = opt("n_components", spec) if spec == "mle" else f"a fractional {opt('n_components')}"  # the CLI's flag
        raise BertfeatError(
            f"{what} needs the whole spectrum, which the randomized solver does not compute",
            f"use {opt('solver', 'covariance')} or {opt('solver', 'svd')}, or pass a whole number of components",
        )
    k = r if spec is None else int(spec)
    rng = np.random.default_rng(random_state)
    S, Vt = randomized_svd(Xc, k, rng)
    spectrum = S**2 / (n - 1)
    total = float(np.einsum("ij,ij->", Xc, Xc)) / (n - 1)
    # the variance the top k leave; on data of rank k it is 0 but rounds either way, and a negative variance made
    # the model's own file refused by load (its variances checked) and its precision meaningless
    noise = max((total - float(spectrum.sum())) / (r - k), 0.0) if k < r else 0.0
    return Decomposition(mean, flip_signs(Vt), spectrum, total, n, k, noise, "randomized")


def decompose_stats(stats: Stats, spec: Any) -> Decomposition:
    """``covariance`` solver: the eigenpairs of the (d, d) covariance built from float64 statistics."""
    n, d = stats.n, stats.shift.shape[0]
    C = stats.scatter() / (n - 1)
    C = (C + C.T) * 0.5
    w, Vt = covariance_eigh(C)  # descending
    r = min(n, d)
    w = np.clip(w[:r], 0.0, None)
    Vt = flip_signs(np.ascontiguousarray(Vt[:r]))
    if spec != "mle" or _graded(C):
        return decomposition_from_spectrum(stats.mean(), Vt, w, n, d, spec, "covariance")
    # Minka's choice on eigh's spectrum: a direction of no variance comes out as rounding, ~eps x the largest variance
    # (1e-13 on variances of 100), where the SVD's squares are ~1e-30; scikit-learn's absolute 1e-15 cut then took
    # them as variance, and the rank chosen grew with the data's scale (12 of a rank-3 (100, 30) where svd_solver
    # 'full' keeps 3). Below eigh's error they count as 0 (the graded path's small variances are real).
    return mle_on_rank(stats.mean(), Vt, w, n, d, "covariance")


def covariance_eigh(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (d,) descending and eigenvectors (d, d, one a row) of a covariance C (d, d).

    ``eigh``'s error is ~eps times the largest eigenvalue, which swamps the variance of a column on a far smaller
    scale (1e-6 beside 1e6: variance 1e-12 beside 1e12). Columns whose variances span more than
    ``GRADED_MIN_SPREAD`` go through ``graded_eigh``, whose error is relative to each column's own scale.
    """
    if not _graded(C):
        w, V = np.linalg.eigh(C)  # ascending
        return w[::-1], np.ascontiguousarray(V[:, ::-1].T)
    return graded_eigh(C, np.sqrt(np.clip(np.diag(C), 0.0, None)))


def _graded(C: np.ndarray) -> bool:
    """The variances of C's columns span more than GRADED_MIN_SPREAD: covariance_eigh takes graded_eigh."""
    diag = np.clip(np.diag(C), 0.0, None)
    live = diag[diag > 0]
    return bool(live.size >= 2 and diag.max() > GRADED_MIN_SPREAD * live.min())


def graded_eigh(C: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``covariance_eigh`` of C (d, d) = D R D with D = diag(``scale``) (d,), each column's standard deviation.

    R (the correlations, within [-1, 1]) is well scaled, so its ``eigh`` is accurate: C = G G^T with
    G = D Q sqrt(L) (d, d), whose SVD (rows in decreasing scale) gives C's eigenvalues (the squared singular values)
    and eigenvectors (the left singular vectors) to a precision relative to each column's scale (Demmel and
    Veselic). A column of no variance (scale 0) is a zero row of G: eigenvalue 0 along that column.
    """
    live = scale > 0
    s = np.where(live, scale, 1.0)
    R = np.clip(C / np.outer(s, s), -1.0, 1.0)  # a correlation is within [-1, 1]: rounding past it is clipped
    R[~live, :] = 0.0
    R[:, ~live] = 0.0
    np.fill_diagonal(R, live.astype(np.float64))
    lam, Q = np.linalg.eigh(R)
    G = scale[:, None] * Q * np.sqrt(np.clip(lam, 0.0, None))  # (d, d) C = G G^T
    order = np.argsort(-scale, kind="stable")  # largest rows first, as Householder bidiagonalisation wants
    U, sv, _ = np.linalg.svd(G[order])
    V = np.empty_like(U)
    V[order] = U
    return sv * sv, np.ascontiguousarray(V.T)


def _model_parts(components: np.ndarray, variance: np.ndarray, noise: float,
                 whiten: bool) -> tuple[np.ndarray, np.ndarray]:
    """The components (k, d) and the variances above the noise (k,) of the probabilistic model, as scikit-learn's
    ``_BasePCA`` forms them: with ``whiten`` the components scaled by sqrt(variance); a variance at or below the
    noise counts 0."""
    if whiten:
        components = components * np.sqrt(variance)[:, None]
    return components, np.where(variance > noise, variance - noise, 0.0)


def model_covariance(components: np.ndarray, variance: np.ndarray, noise: float, whiten: bool) -> np.ndarray:
    """The data covariance (d, d) of the probabilistic PCA model: components.T diag(variance - noise) components +
    noise I (scikit-learn's ``get_covariance``, whiten included)."""
    comps, above = _model_parts(components, variance, noise, whiten)
    cov = (comps.T * above) @ comps
    cov[np.diag_indices_from(cov)] += noise
    return cov


def model_singular(components: np.ndarray, variance: np.ndarray, noise: float, whiten: bool) -> bool:
    """Whether ``model_covariance`` is singular, so has no inverse: no noise (every component of the spectrum kept,
    or the rest of it 0) and fewer than d directions of variance - k < d components (fewer rows than features and
    n_components=None), or a kept component's eigenvalue of the covariance (its variance; squared with ``whiten``)
    at most d * eps of the largest (constant or repeated columns: 0 up to rounding; ``numpy.linalg.matrix_rank``'s
    tolerance). A noise within that tolerance counts as none: n_components at the rank of the rows left 2e-33 or
    4e-16 of noise, whose inverse scored +3e16 or +67 where scikit-learn's is mostly -inf (columns on scales far apart
    leave a real noise there, 1e-12 beside 1e12, which the model's inverse cannot resolve either). With noise, the
    (k, k) inverse of the matrix inversion lemma is well defined."""
    k, d = components.shape
    eig = variance * variance if whiten else variance  # (k,) the covariance's eigenvalues along the components
    tol = eig.max() * d * np.finfo(np.float64).eps if k else 0.0
    if noise > tol:
        return False
    return k < d or not eig.max() > 0.0 or bool(eig.min() <= tol)


def singular_model_error(d: int, k: int, noise: float = 0.0, largest: float = 0.0) -> BertfeatError:
    """``get_precision`` of a singular model (``model_singular``; ``noise``: its noise_variance_, 0 or within the
    rounding of ``largest``, the covariance's largest eigenvalue). Such a noise is left by rows of a lower rank, or by
    columns on scales so far apart that the smaller ones' variance is below the larger ones' rounding (1e-6 beside
    1e6): it is real there, so the line says what it is below, not that it is 0."""
    fix = (f"fit with {opt('n_components')} below the rank of the rows (below min(n_samples, n_features), fewer still "
           "with constant or repeated columns), so that the variance left over is the noise")
    if noise == 0.0:
        return BertfeatError(
            f"the PCA's probabilistic model has no precision: its covariance is singular (noise_variance_ is 0 and its "
            f"{k} components leave directions of the {d} features without variance)", fix)
    return BertfeatError(
        f"the PCA's probabilistic model has no precision: its covariance is singular to rounding (noise_variance_ "
        f"{noise:.3g} is within {d} x eps of its largest eigenvalue {largest:.3g}, numpy.linalg.matrix_rank's "
        "tolerance)", f"{fix}; or, for columns on very different scales, standardize them first (StandardScaler)")


def model_precision(components: np.ndarray, variance: np.ndarray, noise: float, whiten: bool) -> np.ndarray:
    """The inverse (d, d) of ``model_covariance`` by the matrix inversion lemma (a (k, k) inverse), or a plain
    inverse when noise is 0 (every component kept): scikit-learn's ``get_precision``. A singular covariance has none:
    an error (``singular_model_error``) where scikit-learn's inverse raises LinAlgError or returns rounding noise."""
    k, d = components.shape
    if model_singular(components, variance, noise, whiten):
        eig = variance * variance if whiten else variance  # (k,) as model_singular weighs them
        raise singular_model_error(d, k, noise, float(eig.max()) if k else 0.0)
    if noise == 0.0:
        return np.linalg.inv(model_covariance(components, variance, noise, whiten))
    comps, above = _model_parts(components, variance, noise, whiten)
    inner = comps @ comps.T / noise  # (k, k)
    inner[np.diag_indices_from(inner)] += 1.0 / above
    precision = comps.T @ np.linalg.inv(inner) @ comps
    precision /= -(noise**2)
    precision[np.diag_indices_from(precision)] += 1.0 / noise
    return precision


def log_likelihoods(Xr: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """The Gaussian log-likelihood (n,) of each centred row of Xr (n, d) under the model of ``precision`` (d, d)
    (Bishop, PRML 12.2.1; scikit-learn's ``score_samples``): -inf throughout when the precision is not positive
    definite (its log-determinant undefined, as scikit-learn's ``fast_logdet`` says)."""
    d = Xr.shape[1]
    sign, logdet = np.linalg.slogdet(precision)
    logdet = logdet if sign > 0 else -math.inf
    log_like = -0.5 * np.sum(Xr * (Xr @ precision), axis=1)
    log_like -= 0.5 * (d * math.log(2.0 * math.pi) - logdet)
    return log_like
