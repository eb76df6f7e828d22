"""Cores and BLAS: how many threads to use, and which OpenBLAS kernel.

NumPy's wheels ship OpenBLAS built with DYNAMIC_ARCH: it picks its GEMM kernels from the CPU id at
load time. On CPUs it does not know (new AMD EPYC models, many virtual machines) it falls back to
its Haswell (AVX2) kernels even when the CPU has AVX-512; on this project's reference machine
that halves float32 GEMM speed (118 vs 222 GFLOP/s per core, see benchmarks/RESULTS.md).
Some environments also pin ``OPENBLAS_CORETYPE=Haswell`` for every process (this project's
reference machine does). ``prefer_avx512_blas`` asks OpenBLAS for its SkylakeX (AVX-512) kernels
when the CPU has AVX-512 and the kernel in force (detected or pinned) is an older one. It only
works before NumPy is loaded, so bertfeat calls it on import. Control it with
``BERTFEAT_BLAS_KERNEL``: ``auto`` (default; unset or empty too), ``keep`` (never touch OPENBLAS_CORETYPE), or an
OpenBLAS core name to use (on x86-64 one of ``OPENBLAS_CORES``: OpenBLAS ignores a name it does not know, so another is
not set, and refused where a model's GEMM path is chosen: ``check_blas_kernel``; not at import, which would fail
``import bertfeat`` before the command line can say it). ``bertfeat info`` shows the kernel in use.
"""

from __future__ import annotations

import os
import platform
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from .cpu import cpu_has_avx512


def default_threads() -> int:
    """All cores this process may use (affinity/cgroup aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# OpenBLAS kernels older than AVX-512 that a pinned or mis-detected OPENBLAS_CORETYPE may name.
_PRE_AVX512 = {"", "haswell", "zen", "sandybridge", "nehalem", "core2", "prescott", "penryn", "dunnington",
               "atom", "barcelona", "bulldozer", "piledriver", "steamroller", "excavator", "katmai", "coppermine"}

blas_kernel_note: str | None = None  # what prefer_avx512_blas did, for `bertfeat info`
#: (what, fix) of a BERTFEAT_BLAS_KERNEL that names no kernel, found at import; refused by check_blas_kernel
blas_kernel_problem: tuple[str, str] | None = None

#: OpenBLAS's x86-64 kernels, as OPENBLAS_CORETYPE names them (its driver/others/dynamic.c corename[], matched in any
#: case); a name it does not know is ignored, its own detection used, without a word
OPENBLAS_CORES = ("Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn", "Dunnington",
                  "Nehalem", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano", "Sandybridge", "Bobcat",
                  "Bulldozer", "Piledriver", "Haswell", "Steamroller", "Excavator", "Zen", "SkylakeX", "Cooperlake",
                  "SapphireRapids")


def _blas_kernel_problem(choice: str) -> tuple[str, str] | None:
    """Why ``choice`` (BERTFEAT_BLAS_KERNEL) is no value it takes, or None. Only on x86-64, whose names OpenBLAS
    fixes; elsewhere (arm64: armv8, neoversen1 ...; they vary by OpenBLAS version) any name is passed on."""
    if choice.lower() in ("auto", "keep") or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    if choice.lower() in (c.lower() for c in OPENBLAS_CORES):
        return None
    return (f"BERTFEAT_BLAS_KERNEL={choice!r} is not an OpenBLAS kernel (OpenBLAS would ignore it and pick its own)",
            "set it to auto (bertfeat's choice, the default), keep (OPENBLAS_CORETYPE as it is) or one of OpenBLAS's "
            f"x86-64 kernels, e.g. Haswell, SkylakeX or Zen ({', '.join(OPENBLAS_CORES)}; any case), or unset it")


def check_blas_kernel() -> None:
    """Refuse a BERTFEAT_BLAS_KERNEL that named no kernel at import (OPENBLAS_CORETYPE was left as it was)."""
    if blas_kernel_problem is not None:
        from ..errors import BertfeatError

        raise BertfeatError(*blas_kernel_problem)


def prefer_avx512_blas() -> str | None:
    """Choose OpenBLAS's AVX-512 kernels before NumPy loads (see the module docstring).

    Returns the OPENBLAS_CORETYPE value set, or None when nothing was changed.
    """
    global blas_kernel_note, blas_kernel_problem
    choice = os.environ.get("BERTFEAT_BLAS_KERNEL", "").strip() or "auto"  # empty: the default (it set CORETYPE='')
    blas_kernel_problem = _blas_kernel_problem(choice)
    if "numpy" in sys.modules or choice.lower() == "keep" or blas_kernel_problem is not None:
        return None
    before = os.environ.get("OPENBLAS_CORETYPE")
    if choice.lower() != "auto":
        os.environ["OPENBLAS_CORETYPE"] = choice
    elif cpu_has_avx512() and (before or "").strip().lower() in _PRE_AVX512:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    else:
        return None
    new = os.environ["OPENBLAS_CORETYPE"]
    blas_kernel_note = f"OPENBLAS_CORETYPE {before or '(unset)'} -> {new} (BERTFEAT_BLAS_KERNEL={choice})"
    return new


def blas_info() -> dict:
    """NumPy's own BLAS: library, version, kernel architecture, threads (via threadpoolctl).

    threadpoolctl lists every BLAS in the process (numba loads SciPy's own OpenBLAS too); NumPy's is the one in
    NumPy's package folder or in its wheel's ``numpy.libs`` beside it, else the first listed.
    """
    from threadpoolctl import threadpool_info
    import numpy

    blas = [info for info in threadpool_info() if info.get("user_api") == "blas"]
    home = os.path.dirname(numpy.__file__)
    homes = (home + os.sep, home + ".libs" + os.sep)
    own = [info for info in blas if (info.get("filepath") or "").startswith(homes)]
    pick = (own or blas or [{}])[0]
    return {k: pick.get(k) for k in ("internal_api", "version", "architecture", "num_threads")} if pick else {}


def blas_identity() -> str | None:
    """NumPy's BLAS as it rounds: library, version and kernel (the attention products run on it; OpenBLAS's
    Haswell and SkylakeX kernels give vectors up to ~2e-7 apart). Fixed once NumPy has loaded it."""
    global _blas_identity
    if _blas_identity is None:
        b = blas_info()
        _blas_identity = " ".join(str(b.get(k)) for k in ("internal_api", "version", "architecture")) if b else ""
    return _blas_identity or None


_blas_identity: str | None = None


# one_blas_thread's state: threadpoolctl's limit is one process-wide setting of the BLAS library, so callers in several
# threads share one limit, set by the first to enter and restored by the last to leave (thread id -> depth)
_blas_lock = threading.Lock()
_blas_inside: dict[int, int] = {}
_blas_limiter = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS held to one thread while any caller, in any thread, is inside; the setting before restored after the last.

    A context manager of threadpoolctl's own, entered by overlapping callers in two threads, restores in the wrong
    order: the second saves the first's limit of 1 and puts it back last, so BLAS stays at one thread for the rest
    of the process.
    """
    global _blas_limiter
    me = threading.get_ident()
    with _blas_lock:
        if not _blas_inside:
            from threadpoolctl import threadpool_limits

            _blas_limiter = _as_controller(lambda: threadpool_limits(limits=1, user_api="blas"))
        _blas_inside[me] = _blas_inside.get(me, 0) + 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_inside[me] -= 1
            if not _blas_inside[me]:
                del _blas_inside[me]
            if not _blas_inside and _blas_limiter is not None:
                _as_controller(_blas_limiter.restore_original_limits)
                _blas_limiter = None


def _as_controller(fn):
    """fn() as the thread allowed to set OpenBLAS's limit: threadpoolctl 3.8 lets only one thread (the first to set
    it) change a process-wide pool, and silently ignores the others, so the limit set in one thread and restored
    from another would stay. Called under _blas_lock; control is handed back after."""
    import threadpoolctl

    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if clear is None:  # threadpoolctl before 3.8: any thread sets the limit
        return fn()
    clear(force=True)
    try:
        return fn()
    finally:
        clear(force=True)


def new_locks_after_fork(namespace: dict, *names: str) -> None:
    """In a forked child, new locks in place of the module-level locks ``names`` of ``namespace`` (a module's
    ``globals()``): a lock another thread held at the fork stays held in the child, where that thread is gone, and
    the child's next acquire would wait forever."""
    def renew() -> None:
        for name in names:
            namespace[name] = threading.Lock()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=renew)


def _blas_after_fork() -> None:
    """In a forked child only the forking thread runs on: a lock another thread held is released, and the limit of
    callers that are gone is restored (else the child's BLAS stays at one thread)."""
    global _blas_lock, _blas_limiter
    _blas_lock = threading.Lock()
    me = threading.get_ident()
    for ident in [t for t in _blas_inside if t != me]:
        del _blas_inside[ident]
    if not _blas_inside and _blas_limiter is not None:
        _as_controller(_blas_limiter.restore_original_limits)
        _blas_limiter = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_blas_after_fork)


def read_ahead(items: Iterable, depth: int = 1, name: str = "bertfeat-read-ahead") -> Iterator:
    """Iterate ``items`` in a background thread, at most ``depth`` items ahead of the caller.

    File reads, Parquet/CSV decoding and tokenization release the GIL, so they overlap the
    caller's NumPy work. An exception raised by ``items`` reaches the caller in order; closing
    this generator early (``close()``, or a ``break``) stops the thread at its next item, and the thread
    closes ``items``.
    """
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(item: tuple) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as e:  # hand every failure to the caller
            put(("error", e))
        finally:
            # stopped early: close the source here and now (its readers' finally blocks run), not whenever the
            # caller's frames are freed: a traceback kept to the end (SIGTERM's) would leave a CSV reader open
            # into interpreter finalization, where pyarrow's I/O thread aborts the process (readers/arrowexit.py)
            close = getattr(items, "close", None)
            if close is not None:
                close()

    th = threading.Thread(target=work, daemon=True, name=name)
    th.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        th.join(timeout=5)
