"""A clean exit after pyarrow's streaming CSV reader (apache/arrow#34314).

pyarrow's streaming reader lives on in the callbacks of its I/O thread: the last reference to it is often dropped
there, a moment after the Python side is done with it. Its destructor then releases the Python objects it holds (the
stream it reads, the invalid-row handler), which needs the GIL. If the interpreter is finalizing at that moment (a
command that fails right after reading a CSV header: a refused output lock, a bad option), Python ends that thread
with ``pthread_exit``; the forced unwind through a C++ destructor calls ``std::terminate``, and the process dies
with SIGABRT ("terminate called without an active exception", exit -6) after printing its result.

So bertfeat hands pyarrow's streaming reader as little of Python as it can (the header is parsed from an
arrow-owned buffer), registers every Python object it does hand over once it is done with it, and an atexit function
(atexit runs before finalization, while other threads may still take the GIL) closes the streams of readers still
open (left suspended), then waits until pyarrow has let go of each registered object (a weak reference dies; at
most ``WAIT_SECONDS``) and until ``GRACE_SECONDS`` have passed since the last release or close:
the blocks pyarrow read from a Python stream are Python objects too, freed by the I/O thread just after. Both waits
cost nothing unless the process exits within a moment of reading CSV.
"""

from __future__ import annotations

import atexit
import gc
import time
import weakref

WAIT_SECONDS = 3.0
GRACE_SECONDS = 0.1

# No lock: set.add and set.discard are atomic under the GIL, and a lock here could deadlock: creating a weak
# reference may start a garbage collection whose callbacks (_forget), or a generator closed by it (a reader's
# finally calling released), run on the thread that would hold the lock.
_held: set[weakref.ref] = set()
_open: weakref.WeakSet = weakref.WeakSet()
_last_release = [float("-inf")]


def released(*objs) -> None:
    """bertfeat is done with ``objs`` (objects handed to a pyarrow streaming reader): exit waits until they are freed."""
    for obj in objs:
        _held.add(weakref.ref(obj, _forget))
    _last_release[0] = time.monotonic()


def _forget(ref: weakref.ref) -> None:
    _held.discard(ref)


def opened(stream) -> None:
    """``stream`` (a Python stream a pyarrow streaming reader reads on its I/O thread) is open: if it still is at
    exit (a reader left suspended: a generator kept, a traceback holding its frame), exit closes it, so that
    pyarrow's read ends with an error before the interpreter finalizes, rather than during it."""
    _open.add(stream)


def _copy(items) -> list:
    """A list of a set another thread's weakref callback may change while it is copied (then copy again)."""
    while True:
        try:
            return list(items)
        except RuntimeError:
            continue


def _close_open_streams() -> None:
    for stream in _copy(_open):
        if not stream.closed:
            stream.close()
            _last_release[0] = time.monotonic()


def pending() -> int:
    """How many released objects pyarrow still holds."""
    return sum(1 for r in _copy(_held) if r() is not None)


def wait(timeout: float = WAIT_SECONDS) -> bool:
    """Until pyarrow holds none of the released objects and the grace time after the last release is over (True), or
    ``timeout`` seconds passed (False)."""
    _close_open_streams()
    deadline = time.monotonic() + timeout
    collected = False
    while pending() or time.monotonic() < _last_release[0] + GRACE_SECONDS:
        if time.monotonic() >= deadline:
            return False
        if not collected:  # a generator frame left in a reference cycle may be what holds one
            gc.collect()
            collected = True
            continue
        time.sleep(0.001)
    return True


def _wait_at_exit() -> None:
    """wait() at interpreter exit, through a second Ctrl-C (which would otherwise print "Exception ignored in atexit
    callback" and a traceback): the wait goes on, still bounded by WAIT_SECONDS."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            wait(max(0.0, deadline - time.monotonic()))
            return
        except KeyboardInterrupt:
            if time.monotonic() >= deadline:
                return


atexit.register(_wait_at_exit)
