"""BLAS thread control: one place that sets how many cores the matrix products use."""

from __future__ import annotations

import os

_limiter = None


def default_threads() -> int:
    """All cores this process may use (cgroup/affinity aware where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def set_threads(n: int | None) -> int:
    """Limit BLAS (and OpenMP) threads to n for the rest of the process; returns n."""
    global _limiter
    from threadpoolctl import threadpool_limits

    n = int(n or default_threads())
    if n < 1:
        from .errors import BertfeatError

        raise BertfeatError(f"--threads {n} is out of range", "give 1 or more")
    _limiter = threadpool_limits(limits=n)
    return n
