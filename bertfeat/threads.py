"""How many cores to use by default."""

from __future__ import annotations

import os


def default_threads() -> int:
    """All cores this process may use (affinity/cgroup aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
