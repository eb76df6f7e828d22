"""Which PCA reduced which features: the ``pca`` entry of a feature file's provenance (``reduced_by``), what reduced
the features a PCA model was fitted on (``model_input``: ``pca fit`` records it in ``source_["reduced_by"]``), and
the comparisons ``reduce.py`` (applying a model) and ``probe.py`` (probing a file) make of them."""

from __future__ import annotations

from pathlib import Path

from ..model.hub import file_sha256


def reduced_by(meta: dict | None) -> dict | None:
    """The PCA that reduced features with this provenance (its ``pca`` entry: components and model file sha256), or
    None for features no PCA reduced."""
    entry = (meta or {}).get("pca")
    if not isinstance(entry, dict):
        return None
    return {k: entry[k] for k in ("n_components", "model_sha256") if k in entry}


#: what model_input gives for a PCA that records nothing of its input (and reduce.py for features with no provenance)
UNKNOWN = object()


def model_input(pca):
    """What reduced the features ``pca`` was fitted on: ``pca fit`` records it (``source_["reduced_by"]``); else
    unknown (extract --pca's model, which records no source_ and so looks as a PCA fitted in Python on any features
    and saved with their fingerprint; an older model)."""
    source = getattr(pca, "source_", None)
    return source["reduced_by"] if source and "reduced_by" in source else UNKNOWN


def reduced_by_this(pca, features_reduced) -> bool:
    """Whether the features' provenance names this very model file (its sha256) as the PCA that reduced them."""
    sha, path = (features_reduced or {}).get("model_sha256"), getattr(pca, "source_path_", None)
    return bool(sha and path and Path(path).is_file() and file_sha256(path) == sha)


def fitted_on_these(pca, meta: dict | None) -> bool:
    """Whether features with this provenance are in the space ``pca`` was fitted in, though a PCA reduced them: the
    PCA that had reduced the features ``pca fit`` read (``source_["reduced_by"]``) reduced these too."""
    fitted_on, theirs = model_input(pca), reduced_by(meta)
    if fitted_on is UNKNOWN or fitted_on is None or theirs is None or reduced_by_this(pca, theirs):
        return False  # (reduced by this very model file: its output, whatever the first PCA's record says)
    return same_pca(fitted_on, theirs)


def same_pca(a: dict, b: dict) -> bool:
    """Two ``reduced_by`` entries name the same PCA: by model sha256 when both have one, else by components."""
    if "model_sha256" in a and "model_sha256" in b:
        return a["model_sha256"] == b["model_sha256"]
    return a.get("n_components") == b.get("n_components")


def said(entry: dict) -> str:
    """A ``reduced_by`` entry for a message: '8 components, model sha256 0123456789ab'."""
    sha = entry.get("model_sha256")
    return f"{entry.get('n_components', '?')} components" + (f", model sha256 {sha[:12]}" if sha else "")
