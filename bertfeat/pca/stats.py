"""Streaming statistics of the PCA (bertfeat.pca.estimator): what ``partial_fit`` accumulates and ``merge`` combines.

Owns ``Stats`` (n, a shift vector, the sum of the shifted rows and their scatter matrix, all
float64), starting them from a first chunk, adding a chunk block by block (float32 block
products added to float64 totals, or float64 throughout), the test of when float32 products
are accurate enough, and Chan et al.'s pairwise merge, which also takes a chunk far from the shift (the
statistics then re-centred on the mean of all rows). Shape legend: n rows, d features,
m rows of one chunk, b rows of one block (at most ``BLOCK_ROWS``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import BertfeatError
from .validation import nonfinite_error, overflow_error, underflow_error

__all__ = ["BLOCK_ROWS", "MIXED_MAX_OFFSET", "DRIFT_MAX_OFFSET2", "Stats", "first_stats", "float32_products_ok",
           "chunk_stats", "add_chunk", "merge_stats"]

#: Rows per block inside ``partial_fit`` (bounds the temporary copy to 25-50 MB at d=768).
BLOCK_ROWS = 8192
#: Mixed precision needs float32 values with most of their 24 bits below the spread: every
#: column's |shift| within this many standard deviations (else float64 products are used).
MIXED_MAX_OFFSET = 128.0
#: ... and a block's rows near the shift: a float32 product of rows whose mean square distance from the shift is R times
#: their variance rounds relative to R variances, which the centring then leaves on the variance (a stream whose first
#: rows sit elsewhere: two zero rows, then data around 300 with std 0.1, R ~ 900, was 15 % off on that variance). A
#: block whose any column has R above this is multiplied again in float64.
MIXED_MAX_ENERGY = 17.0  # a root-mean-square offset of 4 standard deviations
#: ... and products that do not underflow: a column whose float32 sum of squares about the shift is below this, and
#: which is not constant, is multiplied again in float64 (its values are below 2^-50, ~1e-15: their float32 squares
#: lose bits as they near float32's smallest normal number, 2^-126, and below ~1e-23 vanish; features of scale 1e-30
#: fitted variances of 0 and an arbitrary basis, where float64 and scikit-learn give 1e-60)
MIXED_MIN_ENERGY = 2.0 ** -100
#: A chunk whose mean sits more than sqrt(this) = 4 standard deviations from the shift in some column is summed
#: about its own mean and merged (``add_chunk``): the scatter taken from sums of squares about a far shift loses
#: ~eps x distance^2 of each variance, where eigh loses ~eps x the largest variance (a first row of zeros, then rows
#: around 1e7 with std ~1: the trailing variances were ~3e-13 of the largest off, 100x eigh's error in one call)
DRIFT_MAX_OFFSET2 = 16.0
#: float64's smallest normal number: a block whose every column's sum of squares about the shift is below it, and
#: which is not at the shift, is refused (validation.underflow_error)
FLOAT64_TINY = float(np.finfo(np.float64).tiny)


@dataclass
class Stats:
    """Float64 sufficient statistics of the rows seen so far (shifted by ``shift``)."""

    n: int
    shift: np.ndarray  # (d,)  mean of the first chunk's first BLOCK_ROWS rows; moved to the mean when a chunk is far
    sum: np.ndarray  # (d,)  sum of (x - shift)
    sq: np.ndarray  # (d, d) sum of (x - shift)^T (x - shift)

    def mean(self) -> np.ndarray:
        return self.shift + self.sum / self.n

    def scatter(self) -> np.ndarray:
        """Centred scatter matrix (d, d): sum of (x - mean)^T (x - mean)."""
        return self.sq - np.outer(self.sum, self.sum) / self.n

    def copy(self) -> Stats:
        return Stats(self.n, self.shift.copy(), self.sum.copy(), self.sq.copy())


def first_stats(X: np.ndarray) -> Stats:
    """Empty statistics (n = 0) shifted by the mean of X's first ``BLOCK_ROWS`` rows (m, d).

    For float32 X the shift is rounded to float32, so float32 blocks subtract it exactly.
    """
    d = X.shape[1]
    shift = X[:BLOCK_ROWS].mean(axis=0, dtype=np.float64)  # (d,) mean of the first rows ever seen
    if not np.isfinite(shift).all():
        raise nonfinite_error(X[:BLOCK_ROWS], 0, "fitting")
    if X.dtype == np.float32:
        shift = shift.astype(np.float32).astype(np.float64)  # representable: float32 blocks subtract it exactly
    return Stats(0, shift, np.zeros(d), np.zeros((d, d)))


def float32_products_ok(st: Stats, X: np.ndarray) -> bool:
    """Whether float32 block products stay accurate for these rows (the PCA's ``"mixed"`` accumulation).

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


def chunk_stats(X: np.ndarray, shift: np.ndarray, row_offset: int, mixed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Sum (d,) and scatter (d, d) of the shifted rows X - shift, both float64.

    Blocks of ``BLOCK_ROWS`` rows. Float64 input, or ``mixed=False``: every block is shifted
    and multiplied in float64. Float32 input with ``mixed`` (and a float32-representable
    ``shift``, which ``first_stats`` arranges): the block is shifted
    in float32 (rounding relative to x - shift, not to x) and multiplied with a float32 ``syrk``, twice
    as fast; each block's product is added to the float64 total, so float32 rounding stays
    within one block of at most ``BLOCK_ROWS`` rows (ratios within ~1e-9 of a float64 SVD,
    see benchmarks/PCA_RESULTS.md). A block whose float32 products would not be accurate (rows far from the shift),
    overflow float32 (values near 1e19 or larger, or a difference past float32's largest) or underflow it (a column
    of values below ~1e-15 about the shift, MIXED_MIN_ENERGY) is done again in float64,
    so ``mixed`` fits whatever ``float64`` fits. The sum is always accumulated in float64.
    """
    m, d = X.shape
    with np.errstate(over="ignore"):  # a shift past float32's range is not float32-representable: float64 blocks
        shift32 = shift.astype(np.float32)
    in_f32 = mixed and np.array_equal(shift32, shift)  # the caller passes mixed only for float32 X
    buf = np.empty((min(m, BLOCK_ROWS), d), dtype=np.float32) if in_f32 else None  # (b, d) reused
    total_sum, total_sq = np.zeros(d), np.zeros((d, d))
    for start in range(0, m, BLOCK_ROWS):
        block = X[start : start + BLOCK_ROWS]
        s = sq = None
        if in_f32:
            s, sq = _block_products(block, shift32, buf)
            if (not np.isfinite(sq).all() or _far_from_shift(sq.diagonal(), s, block.shape[0])
                    or _underflows(sq.diagonal(), block, shift32)):
                s = None  # redone in float64 (a NaN / inf in the rows too: the float64 sum below names it)
        if s is None:
            s, sq = _block_products(block, shift, None)
        if not np.isfinite(s).all():
            raise nonfinite_error(block, row_offset + start, "fitting")
        if sq.diagonal().max() < FLOAT64_TINY and np.any(block != shift):  # squares below float64's normal range
            raise underflow_error(row_offset + start, row_offset + start + block.shape[0] - 1)
        total_sq += sq
        total_sum += s
    return total_sum, total_sq


def _block_products(block: np.ndarray, shift: np.ndarray, buf: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Sum (d,) in float64 and scatter (d, d) of block - shift (b, d): in float32 into ``buf``, or in float64 (None).
    NumPy's overflow warnings off: the caller checks both for inf and NaN (a float32 block is redone in float64, a
    float64 one refused), so a warning would only stand above the error."""
    with np.errstate(over="ignore", invalid="ignore"):
        if buf is None:
            Xs = np.subtract(block, shift, dtype=np.float64)  # (b, d)
        else:
            Xs = np.subtract(block, shift, out=buf[: block.shape[0]])  # (b, d)
        return Xs.sum(axis=0, dtype=np.float64), Xs.T @ Xs  # symmetric rank-b update (BLAS syrk)


def _far_from_shift(energy: np.ndarray, s: np.ndarray, b: int) -> bool:
    """A block's rows sit too far from the shift for float32 products: some column's sum of squares about the shift
    (``energy``, (d,) from the float32 product) over MIXED_MAX_ENERGY times its sum of squares about the block mean."""
    energy = energy.astype(np.float64)
    centred = np.maximum(energy - s * s / b, 0.0)  # (d,)
    return bool(np.any(energy > MIXED_MAX_ENERGY * centred))  # a column at the shift (energy 0) never is


def _underflows(energy: np.ndarray, block: np.ndarray, shift32: np.ndarray) -> bool:
    """A block's float32 squares underflow: some column's sum of squares about the shift (``energy``, (d,) from the
    float32 product) is below MIXED_MIN_ENERGY while the column is not at the shift (a constant column is exact)."""
    low = np.flatnonzero(energy < MIXED_MIN_ENERGY)  # usually none: only those columns are read again
    return bool(low.size) and bool(np.any(block[:, low] != shift32[low]))


def add_chunk(st: Stats, X: np.ndarray, mixed: bool) -> None:
    """Add the rows of X (m, d) to ``st`` in place, all or nothing: a refused chunk leaves ``st`` untouched.

    A chunk far from the shift (``_drifted``) is summed about its own mean instead and merged (Chan), the total
    re-centred on the mean of all rows: sums of squares about a far shift cancel when the scatter is taken.
    """
    m = X.shape[0]
    chunk_sum, chunk_sq = chunk_stats(X, st.shift, st.n, mixed=mixed)
    if not np.isfinite(chunk_sq).all():  # float64 products (float32 blocks overflowing float32 were redone in float64)
        raise overflow_error(st.n, st.n + m - 1)
    if _drifted(st, chunk_sum, chunk_sq, m):
        own = X.mean(axis=0, dtype=np.float64)  # (d,) finite: the sums above were
        own_sum, own_sq = chunk_stats(X, own, st.n, mixed=False)  # float64, as mixed redoes a block far from the shift
        if not np.isfinite(own_sq).all():
            raise overflow_error(st.n, st.n + m - 1)
        part = Stats(m, own, own_sum, own_sq)
        total = merge_stats(st, part, recentre=True) if st.n else _recentred(part, _like(own, st.shift))
        st.n, st.shift, st.sum, st.sq = total.n, total.shift, total.sum, total.sq
        return
    st.sq += chunk_sq
    st.sum += chunk_sum
    st.n += m


def _drifted(st: Stats, s: np.ndarray, sq: np.ndarray, m: int) -> bool:
    """Whether a chunk's rows (their sum ``s`` (d,) and scatter ``sq`` (d, d) about the shift) sit so far from the
    shift that the scatter would lose digits: in some column, the squared distance of their mean from the shift over
    DRIFT_MAX_OFFSET2 times the larger of their own variance and the rows' so far (``_far``). A chunk of one row has
    no variance of its own; the rows so far give it."""
    var = np.maximum(sq.diagonal() - s * s / m, 0.0) / m  # (d,)
    if st.n:
        var = np.maximum(var, np.maximum(st.sq.diagonal() - st.sum**2 / st.n, 0.0) / st.n)
    return _far(s / m, var, st.shift)


def _far(offset: np.ndarray, var: np.ndarray, shift: np.ndarray) -> bool:
    """Some column's mean ``offset`` (d,) from the shift (d,) is over sqrt(DRIFT_MAX_OFFSET2) standard deviations
    (``var`` (d,)) and over a few ulps of the shift: no shift sits closer than its own rounding (a constant column's
    mean rounds a little off its value, which is harmless)."""
    offset2 = offset * offset
    ulps2 = (8.0 * np.finfo(np.float64).eps * shift) ** 2
    return bool(np.any((offset2 > DRIFT_MAX_OFFSET2 * var) & (offset2 > ulps2)))


def _like(mean: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """A new shift at ``mean`` (d,), rounded to float32 when the old ``shift`` (d,) was float32-representable: float32
    rows then keep subtracting it exactly (first_stats)."""
    with np.errstate(over="ignore"):
        if not np.array_equal(shift.astype(np.float32), shift):
            return mean.copy()
        rounded = mean.astype(np.float32).astype(np.float64)
    return np.where(np.isfinite(rounded), rounded, mean)


def _recentred(st: Stats, shift: np.ndarray) -> Stats:
    """The same rows' statistics about ``shift`` (d,)."""
    s = (st.mean() - shift) * st.n
    return Stats(st.n, shift, s, st.scatter() + np.outer(s, s) / st.n)


def merge_stats(a: Stats, b: Stats, recentre: bool = False) -> Stats:
    """The statistics of the rows of both a and b, around a's shift (neither input changes).

    Chan et al.'s pairwise update of (n, mean, scatter); exact in float64 and
    order-independent up to rounding. Around the mean of all rows instead (``_like`` a's shift) when ``recentre``, or
    when that mean is more than 4 standard deviations from a's shift in some column (DRIFT_MAX_OFFSET2): sums of
    squares about a far shift cancel when the scatter is taken.
    """
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
    if recentre or _far(mean - a.shift, np.maximum(scatter.diagonal(), 0.0) / n, a.shift):
        shift = _like(mean, a.shift)
    else:
        shift = a.shift.copy()
    s = (mean - shift) * n
    return Stats(n, shift, s, scatter + np.outer(s, s) / n)
