"""Which keys of two dicts differ: one rule for resume manifests and for PCA fingerprints (stdlib and NumPy only).

Two values are equal when their canonical JSON (sorted keys) is equal, so ``[1, 2]`` equals
``(1, 2)`` and ``np.float64(0.5)`` equals ``0.5``. ``run.manifest.manifest_differences`` (may a run
resume?) and ``pca.file.fingerprint_differences`` (were these features made like the PCA's?)
both call ``dict_differences``; they differ only in the keys they compare, what an absent
key reads as, and how they write types JSON does not know. Neither compares a key that only names a setting whose
value both hold (``NAMES``: the prompt's name beside its text).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..features.base import json_default  # the one json.dumps fallback (NumPy values, paths, Arrow types)

__all__ = ["MISSING", "NAMES", "json_default", "canonical_json", "dict_differences", "naming_keys"]

#: What an absent key reads as by default: differs from every value, None included; shown as ``<missing>``.
MISSING: Any = object()

#: Keys of a features' fingerprint that name a setting without changing a vector, each with the key that holds the
#: setting itself: the name of the model's prompt a run's prompt came from, beside its text ("prompt"): --prompt-name
#: doc and --prompt "passage: " (doc's text) give the same vectors (the vector cache serves them alike:
#: cache.store.NAME_SETTINGS), so a PCA or a resume takes one for the other.
NAMES = {"prompt_name": "prompt"}


def naming_keys(a: Mapping, b: Mapping) -> set:
    """The NAMES keys to leave out when comparing fingerprints ``a`` and ``b``: those whose setting both hold (it is
    compared instead)."""
    return {k for k, setting in NAMES.items() if setting in a and setting in b}


def canonical_json(value: Any, default: Callable[[Any], Any] = json_default) -> str:
    """``value`` as JSON with sorted keys (``default`` for other types), or ``<missing>`` for MISSING."""
    return "<missing>" if value is MISSING else json.dumps(value, default=default, sort_keys=True)


def dict_differences(
    old: Mapping,
    new: Mapping,
    *,
    keys: Iterable | None = None,
    missing: Any = MISSING,
    default: Callable[[Any], Any] = json_default,
) -> list[tuple[Any, Any, Any]]:
    """(key, old value, new value) for each key whose two values' canonical JSON differs, in key order.

    ``keys``: the keys to compare, in order (default: every key of either dict, sorted).
    ``missing``: what an absent key reads as - ``MISSING`` (absent differs from any value) or,
    say, ``None`` (absent equals None). ``default``: JSON for types JSON does not know.
    """
    keys = sorted(set(old) | set(new)) if keys is None else keys
    diffs = []
    for key in keys:
        a, b = old.get(key, missing), new.get(key, missing)
        if canonical_json(a, default) != canonical_json(b, default):
            diffs.append((key, a, b))
    return diffs
