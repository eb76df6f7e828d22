"""The PCA's model file (bertfeat.pca): an ``.npz`` without pickle, and the fingerprint it carries.

Owns the format (``MODEL_FORMAT``, ``MODEL_FORMAT_VERSION``), writing it atomically, reading
and checking it (``np.load(allow_pickle=False)``), and comparing the fingerprint of the
features a model was fitted on with another. The file holds float64 arrays (mean,
components, spectrum and, on request, the streaming statistics) plus one JSON string with
the parameters, the scalars, the fingerprint and the source. ``PCA.save`` / ``PCA.load``
turn an estimator into a ``SavedModel`` and back.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_output
from .diffs import dict_differences, json_default
from .errors import BertfeatError
from .pca_solvers import Decomposition
from .pca_stats import Stats

__all__ = ["MODEL_FORMAT", "MODEL_FORMAT_VERSION", "FILE_PARAM_NAMES", "SavedModel", "params_to_file", "params_from_file",
           "save_model", "load_model", "fingerprint_differences", "jsonable_seed"]

MODEL_FORMAT = "bertfeat-pca"
MODEL_FORMAT_VERSION = 1
#: Parameters whose name in the file differs from the PCA keyword: format 1 stores ``accumulate``
#: under its old name ``precision``, so earlier releases (which take the file's parameters as
#: keywords) still load what this one writes. Reading accepts either name.
FILE_PARAM_NAMES = {"accumulate": "precision"}


@dataclass
class SavedModel:
    """What a model file holds, as Python objects."""

    params: dict[str, Any]  # the estimator's keywords (accumulate, not its deprecated name precision)
    decomposition: Decomposition
    n_features: int
    stats: Stats | None = None  # only when saved with include_stats
    fingerprint: dict | None = None
    source: dict | None = None


def fingerprint_differences(expected: Mapping | None, actual: Mapping | None) -> list[tuple[str, Any, Any]]:
    """(key, expected value, actual value) for every key whose value differs (missing counts)."""
    return dict_differences(dict(expected or {}), dict(actual or {}))


def jsonable_seed(seed: Any) -> Any:
    """random_state as JSON: ints stay, generators are not reproducible from a file (None)."""
    return int(seed) if isinstance(seed, numbers.Integral) else None


def params_to_file(params: Mapping[str, Any]) -> dict[str, Any]:
    """PCA keywords -> the parameters as the file stores them (``FILE_PARAM_NAMES``)."""
    return {FILE_PARAM_NAMES.get(name, name): value for name, value in params.items()}


def params_from_file(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A file's parameters -> PCA keywords; a keyword stored under both names takes its own name's value."""
    params = dict(stored)
    for name, file_name in FILE_PARAM_NAMES.items():
        if file_name in params:
            value = params.pop(file_name)
            params.setdefault(name, value)
    return params


def save_model(path: str | os.PathLike, model: SavedModel) -> Path:
    """Write ``model`` to ``path`` (.npz, no pickle) atomically, creating its folder; returns the path."""
    from .version import __version__

    path = Path(path)
    r = model.decomposition
    meta = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "bertfeat_version": __version__,
        "params": params_to_file(model.params | {"random_state": jsonable_seed(model.params.get("random_state"))}),
        "n_samples": r.n_samples,
        "n_features": model.n_features,
        "n_components": r.n_components,
        "noise_variance": r.noise_variance,
        "total_variance": r.total_variance,
        "fit_solver": r.solver,
        "fingerprint": model.fingerprint,
        "source": model.source,
    }
    arrays = {
        "mean": r.mean,
        "components": r.components,
        "spectrum": r.spectrum,
    }
    if model.stats is not None:
        arrays |= {"stats_shift": model.stats.shift, "stats_sum": model.stats.sum, "stats_sq": model.stats.sq}
        meta["stats_n"] = model.stats.n
    arrays["meta"] = np.array(json.dumps(meta, default=json_default, sort_keys=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
    return path


def load_model(path: str | os.PathLike) -> SavedModel:
    """Read and check a file written by ``save_model`` (``np.load(allow_pickle=False)``)."""
    path = Path(path)
    if not path.is_file():
        raise BertfeatError(f"PCA model file not found: {path}", "check the path, or fit one with `bertfeat pca fit`")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {key: z[key] for key in z.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, ValueError, KeyError) as e:
        raise BertfeatError(
            f"{path} is not a bertfeat PCA model ({e})", "pass a .npz written by `bertfeat pca fit` or PCA.save"
        ) from None
    if meta.get("format") != MODEL_FORMAT:
        raise BertfeatError(f"{path} is not a bertfeat PCA model", "pass a .npz written by `bertfeat pca fit` or PCA.save")
    if meta.get("format_version", 0) > MODEL_FORMAT_VERSION:
        raise BertfeatError(
            f"{path} uses model format version {meta['format_version']}, newer than this bertfeat supports ({MODEL_FORMAT_VERSION})",
            "upgrade bertfeat",
        )
    decomposition = Decomposition(
        mean=arrays["mean"],
        components=arrays["components"],
        spectrum=arrays["spectrum"],
        total_variance=float(meta["total_variance"]),
        n_samples=int(meta["n_samples"]),
        n_components=int(meta["n_components"]),
        noise_variance=float(meta["noise_variance"]),
        solver=meta["fit_solver"],
    )
    stats = None
    if "stats_sq" in arrays:
        stats = Stats(int(meta["stats_n"]), arrays["stats_shift"], arrays["stats_sum"], arrays["stats_sq"])
    return SavedModel(params_from_file(meta["params"]), decomposition, int(meta["n_features"]), stats,
                      meta.get("fingerprint"), meta.get("source"))
