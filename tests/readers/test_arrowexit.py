"""readers/arrowexit.py: exit waits until pyarrow's I/O threads have let go of the Python objects bertfeat handed its
streaming CSV reader (apache/arrow#34314: a thread that frees one while the interpreter finalizes aborts the process).

The race itself (a refused run that exits a moment after reading the CSV header) aborted about 1 run in 200 under
load before the fix, and 0 in 1,200 after; it is too rare to test directly, so these tests pin its parts.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from bertfeat.readers import arrowexit
from bertfeat.readers.delimited import CsvReader

ROOT = Path(__file__).resolve().parents[2]


class Held:
    """A Python object that a "pyarrow thread" (here a plain thread) holds a while after bertfeat released it."""


def hold_then_free(obj, seconds: float) -> threading.Thread:
    box = [obj]

    def work():
        time.sleep(seconds)
        box.clear()  # the thread's last reference: the object is freed here

    th = threading.Thread(target=work)
    th.start()
    return th


@pytest.fixture(autouse=True)
def no_grace(monkeypatch):
    monkeypatch.setattr(arrowexit, "_last_release", [float("-inf")])


def test_wait_returns_once_every_released_object_is_freed():
    obj = Held()
    th = hold_then_free(obj, 0.2)
    arrowexit.released(obj)
    del obj
    assert arrowexit.pending() == 1
    t0 = time.monotonic()
    assert arrowexit.wait(timeout=5) is True
    waited = time.monotonic() - t0
    assert 0.15 < waited < 10, waited  # generous: a loaded machine, a gc.collect of a large heap
    assert arrowexit.pending() == 0
    th.join()


def test_wait_gives_up_after_its_timeout():
    obj = Held()
    arrowexit.released(obj)  # still referenced here: never freed during the wait
    t0 = time.monotonic()
    assert arrowexit.wait(timeout=0.2) is False
    assert 0.15 < time.monotonic() - t0 < 10
    del obj
    gc.collect()
    assert arrowexit.pending() == 0 and arrowexit.wait(timeout=0.1) is True


def test_wait_keeps_the_grace_time_after_the_last_release(monkeypatch):
    """Blocks pyarrow read from a Python stream are freed on its I/O thread just after: exit waits GRACE_SECONDS."""
    monkeypatch.setattr(arrowexit, "GRACE_SECONDS", 0.3)
    obj = Held()
    arrowexit.released(obj)
    del obj
    t0 = time.monotonic()
    assert arrowexit.wait(timeout=5) is True
    assert 0.25 < time.monotonic() - t0 < 10


def test_exit_waits_for_pyarrow_to_let_go():
    """In a process that exits right away, the interpreter finalizes only after the holding thread freed the object
    (the order the abort needs reversed: with no wait, "freed" would never print)."""
    code = """if 1:
        import threading, time, weakref
        from bertfeat.readers import arrowexit
        class Held: pass
        obj = Held()
        ref = weakref.ref(obj, lambda r: print("freed", flush=True))
        box = [obj]
        threading.Thread(target=lambda: (time.sleep(0.3), box.clear()), daemon=True).start()
        arrowexit.released(obj)
        del obj
        print("exiting", flush=True)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["exiting", "freed"], out.stdout


def test_a_reader_left_suspended_at_exit_does_not_abort(tmp_path):
    """A library user keeps a CSV reader's batches() generator suspended to the end (or a traceback holds it):
    pyarrow's I/O thread is then waiting in the read-ahead gate, and freeing the generator during finalization
    woke it into Python code: SIGABRT (exit -6) on every run. Exit now closes the stream first."""
    path = tmp_path / "big.csv"
    with open(path, "w") as f:  # 22 MB: more blocks (4 MiB) than the read-ahead lets pyarrow have
        f.write("text\n" + "".join(f"row {i} of a file that is read in blocks of four MiB\n" for i in range(400_000)))
    code = f"""if 1:
        import time
        from bertfeat.readers.formats import open_input
        g = open_input({str(path)!r}).batches()
        next(g)
        time.sleep(0.2)
        print("exiting", flush=True)
    """
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert (out.returncode, out.stdout) == (0, "exiting\n"), out.stderr[-2000:]


def test_sigterm_handled_frees_the_runs_frames():
    """The Terminated exception cli keeps for its note loses its traceback once rendered (its frames, a run's
    readers among them, are freed then rather than during interpreter finalization)."""
    from bertfeat.cli import app as cli

    def raised():
        try:
            raise cli.Terminated()
        except cli.Terminated as e:
            return e

    e = raised()
    cli._STOPPED["stop"] = e
    assert e.__traceback__ is not None
    assert cli._stopped(e) == 143
    assert e.__traceback__ is None and "stop" not in cli._STOPPED


def test_csv_reading_releases_what_it_hands_pyarrow(tmp_path, monkeypatch):
    """Reading a CSV registers its invalid-row handlers and its stream; the header is parsed from arrow-owned
    bytes (no Python object of the file's for pyarrow's I/O thread to free)."""
    seen = []
    monkeypatch.setattr(arrowexit, "released", lambda *objs: seen.extend(objs))
    p = tmp_path / "a.csv"
    p.write_text("text,label\nhello,1\nworld,2\n")
    r = CsvReader(str(p), "csv", text_column="text")
    header_objs = list(seen)
    assert header_objs and all(callable(o) for o in header_objs), header_objs  # the handler only: no source
    rows = [t for b in r.batches() for t in b.texts]
    assert rows == [b"hello", b"world"]
    kinds = {type(o).__name__ for o in seen[len(header_objs):]}
    assert kinds == {"ReadAheadGate", "function"}, kinds  # the stream pyarrow reads, the row handler


def test_a_latin1_header_is_still_parsed_and_released(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(arrowexit, "released", lambda *objs: seen.extend(objs))
    p = tmp_path / "a.csv"
    p.write_bytes("caf\xe9,label\nhello,1\n".encode("latin-1"))
    r = CsvReader(str(p), "csv", text_column="café", encoding="latin-1")
    assert r.columns == ["café", "label"]
    assert any(type(o).__name__ == "BytesIO" for o in seen)  # pyarrow transcodes through Python: tracked
    assert not isinstance(seen[0], pa.NativeFile)
