"""One loaded Encoder per (model files, load settings) per process, shared by ``bertfeat.extract`` (the local
engine), the scikit-learn transformer (sklearn.py) and the Dask workers (run/dask.py).

Loading a model reads and checksums its weights and warms its kernels (about a second for MiniLM); a process
that extracts several files, fits a scikit-learn grid, or runs many Dask tasks does it once. The key holds the
model directory, the size and modification time of its files and its module folders' (a model replaced on disk,
or its Pooling / Dense configuration edited, is loaded again), every
Encoder keyword, and the GEMM path the precision resolves to here (gemm.resolve: a changed BERTFEAT_GEMM loads again); at most ``MAX_ENCODERS`` stay loaded (least recently used first out).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

from .hub import file_state

MAX_ENCODERS = 4

_ENCODERS: "OrderedDict[tuple, object]" = OrderedDict()
_LOCK = threading.Lock()  # guards _ENCODERS and _LOADING; never held while a model loads
#: key -> [the lock its one loader holds, the callers holding or waiting for it]: two models load side by side; the
#: entry goes when its last caller leaves (a failed load's waiters and newcomers still share it, one load at a time)
_LOADING: dict[tuple, list] = {}


def _after_fork_in_child() -> None:
    """A child forked while another thread loaded a model gets new locks (the half-loaded model was never stored,
    so the child loads it itself)."""
    global _LOCK
    _LOCK = threading.Lock()
    _LOADING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def files_stamp(directory: Path) -> tuple:
    """(relative path, size, mtime_ns, ctime_ns, inode) of the model's files, its module folders' too
    (1_Pooling/config.json, 2_Dense/...): changes when a file is replaced or edited, even with its mtime set back
    (the loaded Encoder's own check, Encoder.check_files_unchanged, would refuse it otherwise)."""
    out = []
    root = Path(directory)
    try:
        for p in sorted(root.rglob("*")):
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts):
                out.append((str(p.relative_to(root)), *file_state(p)))
    except OSError:
        pass
    return tuple(out)


def shared_encoder(model=None, *, location=None, **kwargs):
    """The process's Encoder for ``model`` (or a resolved ``location``) with these Encoder keywords.

    Loaded once per key: a thread asking for a model another thread is loading waits for that load; one asking for
    another model loads it side by side."""
    from .encoder import Encoder
    from .hub import resolve_model

    from ..ops import gemm

    loc = location or resolve_model(model)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    path = gemm.resolve(kwargs.get("precision", "fp32"))  # refuses here what cannot run; the GEMM path is in the key
    key = (str(loc.path), files_stamp(loc.path), json.dumps(kwargs, sort_keys=True, default=str),
           json.dumps(path.to_dict(), sort_keys=True, default=str))
    enc = _cached(key)
    if enc is not None:
        return enc
    with _LOCK:
        entry = _LOADING.setdefault(key, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:  # one load per key; a caller asking for it meanwhile waits here, one asking for another does not
            enc = _cached(key)
            if enc is None:
                enc = Encoder(location=loc, **kwargs)
                with _LOCK:
                    _ENCODERS[key] = enc
                    while len(_ENCODERS) > MAX_ENCODERS:
                        _ENCODERS.popitem(last=False)
            return enc
    finally:  # dropped by its last caller only: popped at a failed load, a waiter and a newcomer loaded side by side
        with _LOCK:
            entry[1] -= 1
            if not entry[1] and _LOADING.get(key) is entry:
                del _LOADING[key]


def _cached(key: tuple):
    with _LOCK:
        enc = _ENCODERS.get(key)
        if enc is not None:
            _ENCODERS.move_to_end(key)
        return enc


def clear() -> None:
    """Forget every loaded Encoder (their memory is freed once no caller holds them)."""
    with _LOCK:
        _ENCODERS.clear()
