"""bertfeat.pca.diffs: the one key-by-key comparison behind resume manifests and PCA fingerprints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertfeat.pca.diffs import MISSING, canonical_json, dict_differences
from bertfeat.run.manifest import manifest_differences
from bertfeat.pca.file import fingerprint_differences


def test_values_compare_by_canonical_json():
    old = {"layers": [-1, -2], "scale": 0.5, "path": Path("/m"), "opts": {"b": 1, "a": 2}}
    same = {"layers": (-1, -2), "scale": np.float64(0.5), "path": "/m", "opts": {"a": 2, "b": 1}}
    assert dict_differences(old, same) == []
    assert dict_differences(old, {**same, "layers": [-1]}) == [("layers", [-1, -2], [-1])]
    assert canonical_json({"b": np.arange(2), "a": None}) == '{"a": null, "b": [0, 1]}'


def test_absent_keys_differ_by_default_and_are_listed_sorted():
    assert dict_differences({"z": 1, "a": None}, {"b": 2, "z": 1}) == [("a", None, MISSING), ("b", MISSING, 2)]
    assert canonical_json(MISSING) == "<missing>" != canonical_json("<missing>")


def test_keys_and_missing_as_none_give_the_manifest_rule():
    old, new = {"x": 1, "gone": 3}, {"y": None, "x": 2, "w": 0}
    # only the new dict's keys, in its order; an absent old key reads as None (so equals a None)
    assert dict_differences(old, new, keys=list(new), missing=None) == [("x", 1, 2), ("w", None, 0)]


def test_default_decides_unknown_types():
    with pytest.raises(TypeError, match="not JSON serializable: object"):
        dict_differences({"o": object()}, {"o": 1})
    assert dict_differences({"o": object()}, {"o": object()}, default=lambda o: "same") == []


def test_both_callers_use_it():
    fp = {"model_id": "m", "layers": [-1], "pooling": "mean"}
    assert fingerprint_differences(fp, {**fp, "layers": (-1,)}) == []
    assert fingerprint_differences(fp, {"model_id": "m", "layers": [-2]}) == [("layers", [-1], [-2]), ("pooling", "mean", MISSING)]
    assert fingerprint_differences(None, fp) == [(k, MISSING, fp[k]) for k in sorted(fp)]
    assert manifest_differences({"pooling": "mean"}, {"pooling": "cls", "pair_column": None}) == ["pooling: 'mean' -> 'cls'"]
