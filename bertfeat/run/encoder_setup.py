"""The model a run loads and what it computes, on both engines: the plan's Encoder from the process's shared cache
(``load_encoder``), what needs the loaded model (``feature_settings``: the feature spec and fingerprint, checked
against ``pca`` and the id column), and the run's reuse of vectors (``make_reuser``: identical rows encoded once,
the vector cache opened under the run's fingerprint). ``estimate.py`` uses the first two as well.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BertfeatError, opt
from .options import encoder_keywords, feature_spec


def load_encoder(plan):
    """The plan's Encoder, from the process's shared cache (encoder_cache.py)."""
    from ..model.encoder_cache import shared_encoder

    return shared_encoder(plan.options.model, **encoder_keywords(plan.options))


def feature_settings(encoder, plan, estimating: bool = False) -> tuple[object, dict]:
    """What needs the loaded model, on both engines: -> (the FeatureSpec, the features' fingerprint). A PCA the input's
    rows cannot give is refused here, before a row is encoded (``estimating``: not refused; the estimate warns)."""
    spec = feature_spec(encoder, plan.options)
    dim = encoder.output_dim(spec)
    if isinstance(plan.pca, int) and plan.pca > dim:
        raise BertfeatError(f"{opt('pca', plan.pca)} is more components than the {dim} feature dimensions",
                            f"choose {opt('pca', dim)} or fewer, or a variance fraction such as 0.95")
    refusal = None if estimating else pca_rows_refusal(plan, dim)
    if refusal is not None:
        raise refusal
    return spec, encoder.fingerprint(spec)


def pca_rows_refusal(plan, dim: int) -> BertfeatError | None:
    """The error for a PCA the input's rows cannot give (the fit would refuse it after encoding every row), where the
    reader knows how many rows there are at most (Parquet's footers; a text file read whole with its header); else None."""
    rows = plan.reader.max_rows
    bound = "" if rows == plan.reader.total_rows else " at most"
    if rows is not None and rows < 2 and plan.pca is not None:  # (it advised --pca 1 for 0 rows; the fit needs 2)
        return BertfeatError(f"{opt('pca')} needs at least 2 rows, and {plan.reader.name} has {rows:,}{bound}",
                             f"drop {opt('pca')} or add rows")
    if rows is not None and isinstance(plan.pca, int) and plan.pca > rows:
        return BertfeatError(f"{opt('pca', plan.pca)} is more components than the rows of {plan.reader.name} "
                             f"({rows:,}{bound}): a PCA has at most one component a row",
                             f"choose {opt('pca', max(rows, 1))} or fewer, or a variance fraction such as 0.95")
    if rows is not None and plan.pca == "mle" and rows < dim:
        return BertfeatError(f"{opt('pca', 'mle')} needs at least as many rows as the {dim} features, and "
                             f"{plan.reader.name} has {rows:,}{bound}", "fit on more rows, or pass a number of components")
    return None


def make_reuser(encoder, spec, cache_dir: Path | None, spill_dir: Path | None, cache_id: tuple[str, dict] | None = None,
                budget: int | None = None, run_store: tuple | None = None):
    """The run's reuse of vectors (reuse.py): identical rows encoded once, and with ``cache_dir`` the vector cache
    opened under this run's fingerprint (``cache_id``: (fingerprint, settings), computed here when not given), its rows
    found under another name of its prompt's too, and its rows within max length under another long-text policy's,
    stride's or max length's (cache.store.spec_siblings).
    ``spill_dir``: where the run's duplicate store spills past its memory ``budget`` (default reuse.DEDUP_MEMORY).
    ``run_store``: (directory, its (fingerprint, settings)) of a store the run's processes share (the Dask engine's
    ``.dedup``), holding the run's rows when the cache turns out read-only."""
    from ..cache.reuse import Reuser

    dim = encoder.output_dim(spec)
    if cache_dir is None:
        return Reuser(dim, spill_dir=spill_dir, budget=budget)
    from ..cache.store import cache_fingerprint, open_cache, register_spec, spec_siblings

    store, own = open_cache(cache_dir), None
    try:
        cache_id = cache_id or cache_fingerprint(encoder, spec)
        fid = register_spec(store, encoder, spec, cache_id)
        siblings = spec_siblings(store, encoder, spec, cache_id)
        if store.read_only is not None and run_store is not None:
            own = open_cache(Path(run_store[0]))
            shared = (own, register_spec(own, encoder, spec, run_store[1]))
        else:
            shared = None
    except BaseException:
        for s in (store, own):
            if s is not None:
                s.close()
        raise
    return Reuser(dim, store, fid, spill_dir, shared=shared, siblings=siblings)
