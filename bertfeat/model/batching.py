"""How an Encoder's rows become batches and come back: token-budget batches sorted by length, int8's short
sequences apart, batches run side by side (``parallel_map``), a long text's windows and their combination."""

from __future__ import annotations

import numpy as np

from ..ops.threads import one_blas_thread

#: Token budget per batch (padded rows x length). With the fused kernels (kernels.py) a batch's
#: working set in cache matters more than per-call overhead: on OpenBLAS 1,024 was 12-15 % faster than
#: 2,048 on both benchmark models (2 threads, benchmarks/RESULTS.md), and 512-1,024 about level. On
#: oneDNN's GEMMs 512 beat 1,024 in every case measured (AMD EPYC Zen 4, 2 threads, one process per
#: run, 2 rounds, 1,500 sentences): fp32 bert-base shape 20.35 -> 19.59 s, MiniLM 2.77 -> 2.71 s; bf16
#: 10.68 -> 10.31 s and 1.55 -> 1.48 s; int8 7.97 -> 7.66 s and 1.35 -> 1.34 s (256-384: within 1-2 % more).
DEFAULT_BATCH_TOKENS = 512


MAX_BATCH_ROWS = 256


def token_budget_batches(lengths: np.ndarray, budget: int, max_rows: int = MAX_BATCH_ROWS) -> list[np.ndarray]:
    """Sort rows by length and cut batches whose padded size (rows x longest) fits the token budget."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    n = len(order)
    while start < n:
        end = start + 1
        while end < n and end - start < max_rows and (end - start + 1) * lengths[order[end]] <= budget:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def split_short_batches(batches: list[np.ndarray], short: np.ndarray) -> list[np.ndarray]:
    """int8: each batch cut into its ``short`` sequences (quant.two_levels: few tokens, or few distinct ones) and the
    others. A batch of short sequences multiplies by the ~15-bit weights (quant.all_two_levels), a mixed one by the
    int8 weights: apart, a short sequence always takes the first way, so its features do not depend on its batch. A
    batch of short sequences is cut in halves too: its products are summed in a float32 copy of each linear layer's
    sums, and half the rows keep that buffer within bf16's workspace."""
    out = []
    for b in batches:
        two = short[b]
        b_short, half = b[two], (int(two.sum()) + 1) // 2
        out += [p for p in (b_short[:half], b_short[half:], b[~two]) if len(p)]
    return out


def parallel_map(fn, items: list, threads: int) -> list:
    """fn over items, in order, with BLAS held to one thread per call.

    With threads > 1, batches run side by side in threads: NumPy releases the GIL in BLAS and
    ufuncs, so the element-wise work (GELU, LayerNorm, softmax), not only the GEMMs, uses every
    core. One BLAS thread per batch also makes a row's result independent of how many batches
    (or threads) there are.
    """
    with one_blas_thread():  # counted: encodes in several threads at once restore the caller's BLAS threads once
        if threads <= 1 or len(items) <= 1:
            return [fn(x) for x in items]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="bertfeat") as ex:
            return list(ex.map(fn, items))


def chunk_windows(content: np.ndarray, width: int, stride: int) -> list[np.ndarray]:
    """Overlapping windows of at most ``width`` word pieces; neighbours share ``stride`` pieces."""
    step = width - stride
    out, start = [], 0
    while True:
        out.append(content[start:start + width])
        if start + width >= len(content):
            return out
        start += step


def combine_windows(win: np.ndarray, window_row: np.ndarray, lengths: np.ndarray, n_rows: int, how: str) -> np.ndarray:
    """(n_windows, D) -> (n_rows, D): token-weighted mean or element-wise max of each row's windows."""
    D = win.shape[1]
    if how == "max":
        out = np.full((n_rows, D), -np.inf, dtype=np.float32)
        np.maximum.at(out, window_row, win)
        return out
    w = lengths.astype(np.float64)
    # summed from -0.0, not 0.0: a row of one window is then its window's bits (0.0 + -0.0 is 0.0, so a -0.0 feature
    # became 0.0 only when its call had a long row: a vector that depended on the batch's composition)
    out = np.full((n_rows, D), -0.0, dtype=np.float64)
    np.add.at(out, window_row, win.astype(np.float64) * w[:, None])
    tot = np.bincount(window_row, weights=w, minlength=n_rows)
    return (out / tot[:, None]).astype(np.float32)
