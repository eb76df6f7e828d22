"""The PCA's steps in an extract run, shared by both engines: a new streaming PCA (``new_pca``), a unit's features
added to its statistics (``accumulate_pca``), the fit and its files (``fit_pca``, ``write_pca``, ``finish_pca``), a
fitted model applied instead (``applied_pca``, ``applied_pca_entry``), and the report written again with the linear
probe of a label once the features exist (``probe_into_report``).

A unit of work (a local chunk, a Dask partition) yields, with ``pca``, its PCA statistics; the job merges them and
fits in ``finish_pca`` (local.py) or ``fit_pca`` + ``write_pca`` (dask.py, its partitions' statistics merged in
their order by ``OrderedMerge``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import BertfeatError, opt, opt_word


def new_pca(n_components):
    """The streaming PCA a job accumulates (exact: float64 n, sum(x), X^T X), unfitted; ``n_components`` as
    PCA's (the plan's ``pca_n_components``: None keeps every component)."""
    from ..pca.estimator import PCA

    return PCA(n_components=n_components, solver="covariance", accumulate="float64")


_BLAS = None


def accumulate_pca(pca, X: np.ndarray) -> None:
    """Add a unit's features to the job's PCA statistics, with BLAS on one thread: a multi-threaded BLAS call
    between batches leaves OpenBLAS's threads spinning (~0.1 s each time) on the cores the next batch needs
    (measured: 2.4 % slower extract --pca, 12 chunks of 256 rows, 2 cores, before this limit)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    with _BLAS.limit(limits=1, user_api="blas"):
        pca.partial_fit(X)


class RowBlocks:
    """A unit's features added to its PCA statistics in blocks of exactly ``rows`` rows (the last one shorter),
    however they come: the sums round by block, so a Dask partition's statistics taken as it is encoded (chunk by
    chunk, bad rows left out) and taken again from its part file by a resume (read in batches of another size) are
    the same bits only when both cut the rows alike. Call ``flush`` after the last rows."""

    def __init__(self, pca, rows: int):
        self.pca, self.rows, self.pending, self.held = pca, rows, [], 0

    def add(self, X: np.ndarray) -> None:
        while len(X):
            take = min(self.rows - self.held, len(X))
            self.pending.append(X[:take])
            self.held += take
            X = X[take:]
            if self.held == self.rows:
                self.flush()

    def flush(self) -> None:
        if self.held:
            accumulate_pca(self.pca, self.pending[0] if len(self.pending) == 1 else np.concatenate(self.pending))
        self.pending, self.held = [], 0


class OrderedMerge:
    """The PCA statistics of numbered units (Dask partitions 0 .. n-1) merged in their order, whatever order they
    finish in: a merge rounds differently in another order (components ~1e-15 apart), so without it two runs of one
    job could write other bits. A unit that finishes ahead of an earlier one waits; past ``HOLD`` waiting, the rest
    wait on disk in ``spill`` (this process's own files, pickled as the cluster sent them, read back bit for bit;
    what a stopped run left there is removed first) instead of in memory."""

    HOLD = 32  # units waiting in memory at most (d = 768: 4.7 MB each)

    def __init__(self, pca, spill: Path | None = None, hold: int | None = None):
        self.merged, self.next, self.spill, self.hold = pca, 0, spill, self.HOLD if hold is None else hold
        self.waiting: dict[int, object] = {}  # index -> PCA, or the Path it waits in
        self._clear_spill()

    def _clear_spill(self) -> None:
        import shutil

        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)

    def add(self, index: int, stats) -> None:
        import pickle

        if len(self.waiting) >= self.hold and self.spill is not None and index != self.next:
            self.spill.mkdir(parents=True, exist_ok=True)
            path = self.spill / f"stats-{index}.pickle"
            path.write_bytes(pickle.dumps(stats, protocol=pickle.HIGHEST_PROTOCOL))  # no fit: a unit may have 0 rows
            stats = path
        self.waiting[index] = stats
        while self.next in self.waiting:
            stats = self.waiting.pop(self.next)
            if isinstance(stats, Path):
                stats, path = pickle.loads(stats.read_bytes()), stats
                path.unlink()
            self.merged = self.merged.merge(stats)
            self.next += 1

    def result(self, n: int):
        """The merged statistics of units 0 .. n-1 (all of them must have been added)."""
        if self.next != n:
            raise RuntimeError(f"PCA statistics of {n - self.next} unit(s) never arrived (from unit {self.next})")
        self._clear_spill()
        return self.merged


def applied_pca(plan, fingerprint: dict, dim: int):
    """``pca_model``: the fitted PCA to apply, loaded and checked against this run's features (the same check as
    ``pca transform``: width, then fingerprint) before any row is encoded; None without pca_model."""
    if plan.pca_model is None:
        return None
    from ..pca.estimator import PCA
    from ..pca.reduce import check_pca_input

    pca = PCA.load(plan.pca_model)
    check_pca_input(pca, plan.pca_model, None, "this run", "",  # the run's features: before any PCA
                    f"apply a PCA fitted on the features before any PCA (the first one), or fit one on these features "
                    f"({opt_word('pca', 'N')} instead of {opt('pca_model')})", raw_clause="this run's features are before any PCA")
    if pca.n_features_in_ != dim:
        raise BertfeatError(f"the PCA model {plan.pca_model} was fitted on {pca.n_features_in_} features per row, these "
                            f"features have {dim}", "apply a PCA fitted on features of the same model, pooling, layers and "
                            f"{opt('truncate_dim')}")
    pca.check_fingerprint(fingerprint, fix=f"extract with the settings the model was fitted on, or fit a model on these "
                                           f"features ({opt_word('pca', 'N')} instead of {opt('pca_model')})")
    return pca


def applied_pca_entry(pca, plan) -> dict:
    """The provenance's "pca" entry of an applied PCA model (its file and sha256; its report is not rewritten)."""
    from ..pca.reduce import pca_metadata_entry

    return pca_metadata_entry(pca, plan.pca_model)


def fit_pca(pca, rows_written: int, layout) -> dict:
    """Fit the accumulated PCA: -> the provenance's "pca" entry (its files: write_pca)."""
    if rows_written < 2:
        raise BertfeatError(f"{opt('pca')} needs at least 2 feature rows, this run has {rows_written}", f"drop {opt('pca')} or add rows")
    pca.finalize()
    return {"n_components": int(pca.n_components_), "model_file": layout.pca_model.name,
            "explained_variance": float(np.sum(pca.explained_variance_ratio_))}


def write_pca(pca, layout, fingerprint: dict, entry: dict, saved: Path | None = None) -> dict:
    """A fitted PCA's model and report where the layout says (OUTPUT.pca.npz, OUTPUT.pca.report.{json,md,png}):
    -> outputs name -> path. Inside atomic.together() they appear with the run's other files. The model file's sha256
    goes into ``entry`` (the provenance's "pca" entry), so that verify knows a replaced model from the written one.
    ``saved``: the model saved before (the Dask engine's, whose sha256 its parts record), written as those bytes."""
    from ..atomic import pending
    from ..pca.reduce import file_sha256, save_pca_outputs

    outputs = save_pca_outputs(pca, layout.pca_model, layout.pca_prefix, fingerprint, source=fingerprint, saved=saved)
    entry["model_sha256"] = file_sha256(pending(layout.pca_model))
    return outputs


def finish_pca(pca, rows_written: int, layout, fingerprint: dict) -> tuple[dict, dict]:
    """fit_pca, then write_pca: -> (outputs name -> path, the provenance's "pca" entry)."""
    meta = fit_pca(pca, rows_written, layout)
    return write_pca(pca, layout, fingerprint, meta), meta


def probe_into_report(plan, pca, fingerprint: dict, features: Path, progress) -> dict | None:
    """With ``plan.label``: the linear probe of the written features' label column (probe.py), and the PCA report
    written again with it (finish_pca wrote it before the features existed) -> the probe entry, else None.

    The features and the PCA are complete without it, so a label the probe cannot use (one class, an id, ...) does
    not fail the run: the report says why there is no probe (``{"label": ..., "skipped": why}``), and so does a note.
    """
    if plan.label is None or pca is None or plan.pca is None:
        return None
    from ..pca.probe import probe_file
    from ..pca.report import write_pca_report

    try:
        probe = probe_file(pca, features, plan.label)
    except BertfeatError as e:
        probe = {"label": plan.label, "skipped": e.message}
        progress.note(f"no linear probe of {plan.label!r}: {e.message}")
    write_pca_report(pca, plan.layout.pca_prefix, source=fingerprint, probe=probe)
    return probe
