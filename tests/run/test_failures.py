"""The failure policy (failures.py): what a failed or stopped extract keeps and says, written once for both engines.

1. The policy as a table: a failure (kind, phase, standard input, units finished, outputs complete) -> the decision
   (remove the partial directory or not, the interrupt's note, an OSError's path and fix), every message exact.
2. ``kind_of`` and ``handle``: an exception -> its kind; the decision done (removed, noted, an OSError translated).
3. The engines follow it where they used to decide otherwise (each case failed before failures.py):
   standard input keeps nothing whatever the failure; a damaged part while the outputs are written keeps the others;
   the parts of the interrupted run count as finished; the Dask engine's full disk names --resume.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bertfeat
from bertfeat.cli.app import FLAGS
from bertfeat.run.dask_cluster import ClusterError
from bertfeat.errors import BertfeatError, InputError, interrupt_in, render
from bertfeat.run.failures import STDIN_NOT_KEPT, Failure, decide, handle, kept_for_limit, kind_of
from bertfeat.run.local import DamagedPart
from bertfeat.readers.rejects import TooManyBadRows
from bertfeat.errors import OutputError
from bertfeat.cache.store import CacheError
from extract_util import Interrupt, no_leftovers, run, tiny_model, write_csv

P, O = Path("o.parquet.partial"), Path("o.parquet")
CONTINUE = f"2 chunk(s) are kept in {P}; run the same command with --resume to continue"
WRITE_THEM = f"no output was written; the 2 finished chunk(s) are kept in {P}: run the same command with --resume to write them"
COMPLETE = f"{O} and the run's other files were written and are complete"
FULL_DISK = f"free disk space, then rerun the same command with --resume (2 finished chunk(s) are kept in {P})"
STDIN = ("nothing was kept: a run reading standard input cannot be resumed (write the input to a file for a run "
         "that can)")


# --------------------------------------------------------------------------- 1. the policy, as a table
def f(kind, phase="encode", finished=2, **kw) -> Failure:
    return Failure(kind, phase, P, O, finished=finished, **kw)


# (failure, remove, note, OSError path, OSError fix as the CLI says it)
CASES = {
    # bad input or settings: nothing left behind
    "input": (f("input"), True, None, None, None),
    "input, writing": (f("input", "write"), True, None, None, None),
    # a cache error, a damaged part, max_bad_rows, a cluster: the finished parts stay; none finished: nothing to resume
    "resumable": (f("resumable"), False, None, None, None),
    "resumable, writing": (f("resumable", "write"), False, None, None, None),
    "resumable, none finished": (f("resumable", finished=0), True, None, None, None),
    "resumable, none finished (dask)": (f("resumable", finished=0, unit="partition"), True, None, None, None),
    # a full disk, a read-only directory: the parts stay; the fix names --resume and them
    "disk": (f("disk"), False, None, P, FULL_DISK),
    "disk, writing": (f("disk", "write"), False, None, O, FULL_DISK),
    "disk, none finished": (f("disk", finished=0), False, None, P,
                            f"free disk space, then rerun the same command with --resume (0 finished chunk(s) are kept in {P})"),
    "disk (dask)": (f("disk", unit="partition"), False, None, P,
                    f"free disk space, then rerun the same command with --resume (2 finished partition(s) are kept in {P})"),
    # Ctrl-C / SIGTERM
    "interrupt": (f("interrupt"), False, CONTINUE, None, None),
    "interrupt, none finished": (f("interrupt", finished=0), True,  # a kept empty directory blocked the plain rerun
                                 "no chunk had finished, so nothing is kept; run the same command again", None, None),
    "interrupt, writing": (f("interrupt", "write"), False, WRITE_THEM, None, None),
    "interrupt (dask)": (f("interrupt", unit="partition"), False,
                         f"2 partition(s) are kept in {P}; run the same command with --resume to continue", None, None),
    "interrupt, none finished (dask)": (f("interrupt", finished=0, unit="partition"), True,
                                        "no partition had finished, so nothing is kept; run the same command again", None,
                                        None),
    "interrupt, writing (dask)": (f("interrupt", "write", unit="partition"), False,
                                  f"no output was written; the 2 finished partition(s) are kept in {P}: run the same "
                                  "command with --resume to write them", None, None),
    "interrupt, complete": (f("interrupt", "write", complete=True), False, COMPLETE, None, None),
    "interrupt, complete, no probe": (f("interrupt", "write", complete=True, probe_missing=True), False,
                                      COMPLETE + " (the report has no linear probe: pca fit / report --probe adds one)", None, None),
    # the outputs complete: the partial directory is gone, nothing to keep; a full disk while the report is written
    # again with the label's probe names the file that failed (not the output) and never says to rerun (found by the
    # environment audit: "o.parquet: no space left ... then rerun", and the rerun found o.parquet there)
    "input, complete": (f("input", "write", complete=True), False, None, None, None),
    "disk, complete": (f("disk", "write", complete=True), False, None, None, f"free disk space; nothing needs a rerun ({COMPLETE})"),
    "disk, complete, no probe": (f("disk", "write", complete=True, probe_missing=True), False, None, None,
                                 f"free disk space, then add the linear probe with report --probe ({COMPLETE})"),
    # standard input: nothing kept, whatever happened; no advice to --resume (refused for standard input)
    "stdin, input": (f("input", stdin=True), True, None, None, None),
    "stdin, resumable": (f("resumable", stdin=True), True, None, None, None),
    "stdin, disk": (f("disk", stdin=True), True, None, P, None),
    "stdin, disk, writing": (f("disk", "write", stdin=True), True, None, O, None),
    "stdin, interrupt": (f("interrupt", stdin=True), True, STDIN, None, None),
    "stdin, interrupt, writing": (f("interrupt", "write", stdin=True), True, f"no output was written; {STDIN}", None, None),
    "stdin, interrupt, complete": (f("interrupt", "write", stdin=True, complete=True), False, COMPLETE, None, None),
    "stdin, other": (f("other", stdin=True), True, None, None, None),
    # anything else (a bug): everything as it is
    "other": (f("other"), False, None, None, None),
    "other, writing": (f("other", "write"), False, None, None, None),
}


class TestThePolicy:
    @pytest.mark.parametrize("case", CASES, ids=list(CASES))
    def test_decision(self, case):
        failure, remove, note, os_path, os_fix = CASES[case]
        d = decide(failure)
        assert (d.remove, render(d.note, FLAGS), d.os_path, render(d.os_fix, FLAGS)) == (remove, note, os_path, os_fix)

    @pytest.mark.parametrize("failure, resume", [
        (f("resumable"), f"rerun with --resume to continue (2 finished chunk(s) are kept in {P})"),
        (f("resumable", "write", unit="partition"), f"rerun with --resume to continue (2 finished partition(s) are kept in {P})"),
        (f("resumable", finished=0), None),  # nothing kept: nothing to continue
        (f("resumable", stdin=True), None),  # standard input: a resume is refused
    ])
    def test_a_resumable_failure_says_how_resume_continues(self, failure, resume):
        """A cache failing mid-run (a full disk) kept the finished parts, and its line did not say that --resume
        continues from them: the decision carries the words, ``handle`` puts them after a cache error's fix."""
        assert render(decide(failure).resume, FLAGS) == resume

    def test_a_cache_error_gets_the_resume_words_after_its_fix(self):
        from bertfeat.cache.store import RunStoreError

        e = handle(CacheError("cannot write the cache c: no space left on the device", "free disk space there"),
                   f("resumable"), lambda: None)
        assert isinstance(e, CacheError) and e.render(FLAGS) == (
            "cannot write the cache c: no space left on the device - free disk space there; then rerun with --resume "
            f"to continue (2 finished chunk(s) are kept in {P})")
        assert e.message.endswith(f"then rerun with resume=True to continue (2 finished chunk(s) are kept in {P})")
        own = RunStoreError("cannot write the run's store", "free disk space, then rerun the same command with --resume")
        assert handle(own, f("resumable"), lambda: None) is own  # its fix says it already

    def test_a_worker_refusal_gets_the_resume_words_after_its_fix(self):
        """A worker refused mid-run (its model changed while it loaded, as a node's model updated during the job) kept
        the finished partitions, but its fix said "run the command again", which is then refused for the partial
        directory it kept (found by review): it says how --resume continues, as a cache error does."""
        from bertfeat.run.dask import WorkerSetupError

        e = handle(WorkerSetupError("worker on h: the model folder m changed while bertfeat loaded it (config.json)",
                                    "wait until the model's files are all in place on that worker"),
                   f("resumable", unit="partition"), lambda: None)
        assert isinstance(e, WorkerSetupError) and e.render(FLAGS) == (
            "worker on h: the model folder m changed while bertfeat loaded it (config.json) - wait until the model's "
            "files are all in place on that worker; then rerun with --resume to continue (2 finished partition(s) are "
            f"kept in {P})")

    def test_the_python_callers_fix_names_the_parameter(self):
        assert render(decide(f("disk")).os_fix) == ("free disk space, then rerun the same command with resume=True (2 "
                                                    f"finished chunk(s) are kept in {P})")

    @pytest.mark.parametrize("failure, said", [
        (f("disk"), f"{P}/part-000001.parquet: file too large: this process may not write a file past 1,024 bytes (its "
                    "file-size limit, ulimit -f) - raise the limit (ulimit -f unlimited), then rerun the same command "
                    f"with --resume (2 finished chunk(s) are kept in {P})"),
        (f("disk", "write", complete=True, probe_missing=True),
         f"{P}/part-000001.parquet: file too large: this process may not write a file past 1,024 bytes (its file-size "
         "limit, ulimit -f) - raise the limit (ulimit -f unlimited), then add the linear probe with report --probe "
         f"({COMPLETE})"),
    ])
    def test_a_file_size_limit_is_named_with_how_to_continue(self, failure, said, monkeypatch):
        """Found by the environment audit: under ``ulimit -f`` (EFBIG: Python ignores SIGXFSZ) the line said "file too
        large for the file system - write to another file system with -o", which no file system helps with, and left
        out that --resume continues from the kept chunks."""
        import bertfeat.errors as errors

        monkeypatch.setattr(errors, "file_size_limit", lambda: 1024)
        e = OSError(errno.EFBIG, "File too large", str(P / ".part-000001.parquet.tmp-7"))
        assert handle(e, failure, lambda: None).render(FLAGS) == said

    def test_the_stdin_note_is_the_one_constant(self):
        assert STDIN_NOT_KEPT == STDIN

    def test_max_bad_rows_says_what_stays(self):
        assert kept_for_limit(f("resumable", finished=5)) == f"the 5 finished chunk(s) are kept in {P}"
        assert kept_for_limit(f("resumable", finished=3, unit="partition")) == f"the 3 finished partition(s) are kept in {P}"
        assert kept_for_limit(f("resumable", stdin=True)) is None

    @pytest.mark.parametrize("failure", [f("nonsense"), f("input", "reading")])
    def test_an_unknown_kind_or_phase_is_a_bug(self, failure):
        with pytest.raises(ValueError, match="unknown failure"):
            decide(failure)


# --------------------------------------------------------------------------- 2. kinds, and the decision done
class TestKindsAndHandle:
    @pytest.mark.parametrize("e, kind", [
        (KeyboardInterrupt(), "interrupt"),
        (type("Terminated", (KeyboardInterrupt,), {})(), "interrupt"),  # cli.app.Terminated (SIGTERM)
        (CacheError("c", "f"), "resumable"),
        (TooManyBadRows("t", "f"), "resumable"),
        (DamagedPart("d", "f"), "resumable"),
        (ClusterError("x", "f"), "resumable"),
        (InputError("i", "f"), "input"),
        (BertfeatError("b", "f"), "input"),
        (OutputError("o", "f"), "input"),
        (OSError(errno.ENOSPC, "No space left on device"), "disk"),
        (MemoryError(), "other"),
        (RuntimeError("a bug"), "other"),
    ], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v)
    def test_kind_of(self, e, kind):
        assert kind_of(e, (DamagedPart, ClusterError)) == kind

    def test_an_engines_own_errors_are_resumable_only_when_it_says_so(self):
        assert kind_of(DamagedPart("d", "f")) == "input"  # another engine's error: plain bad input
        assert kind_of(ClusterError("x", "f"), (DamagedPart,)) == "input"

    def test_an_interrupt_gets_its_note_and_the_directory_stays(self):
        removed, e = [], KeyboardInterrupt()
        assert handle(e, f("interrupt"), lambda: removed.append(1)) is e
        assert (e.resume_note, removed) == (CONTINUE, [])

    def test_an_interrupt_that_compiled_code_turned_into_another_error_is_an_interrupt(self):
        """Ctrl-C or SIGTERM landing in a numba kernel reaches Python as a SystemError raised while handling it: the
        run keeps its parts, the interrupt gets the note, and the interrupt is what is raised (it was kind "other":
        no note, and a library caller got the SystemError)."""
        for interrupt in (KeyboardInterrupt(), type("Terminated", (KeyboardInterrupt,), {})()):
            try:
                try:
                    raise interrupt
                except KeyboardInterrupt:
                    raise SystemError("<function gelu> returned a result with an exception set")
            except SystemError as caught:
                e = caught
            assert kind_of(e) == "interrupt"
            removed = []
            assert handle(e, f("interrupt"), lambda: removed.append(1)) is interrupt
            assert (interrupt.resume_note, removed) == (CONTINUE, [])
            assert not hasattr(e, "resume_note")

    def test_an_error_raised_while_a_callers_interrupt_is_handled_is_that_error(self):
        """A Python caller's own ``except KeyboardInterrupt:`` (a retry loop) around bertfeat.extract: the run's bad
        input is bad input (its directory removed, the error raised), not the caller's old interrupt; likewise a
        SystemError raised ``from None``. The CLI, where no caller's interrupt can be pending, looks anywhere."""
        def raised_while_handling(interrupt, make, suppress=False):
            try:
                try:
                    raise interrupt
                except KeyboardInterrupt:
                    if suppress:
                        raise make() from None
                    raise make()
            except BaseException as caught:
                return caught

        old = KeyboardInterrupt()
        e = raised_while_handling(old, lambda: InputError("x.csv row 4: empty text", "fix the row"))
        assert interrupt_in(e) is None and interrupt_in(e, anywhere=True) is old
        assert kind_of(e) == "input"
        removed = []
        assert handle(e, f(kind_of(e)), lambda: removed.append(1)) is e and removed == [1]
        assert kind_of(raised_while_handling(old, lambda: OSError(errno.ENOSPC, "No space left on device"))) == "disk"
        assert kind_of(raised_while_handling(old, lambda: SystemError("x"), suppress=True)) == "other"
        assert interrupt_in(raised_while_handling(old, lambda: SystemError("x"))) is old
        try:  # CPython's check of a compiled call's result: the interrupt is the SystemError's cause (context suppressed)
            raise SystemError("CPUDispatcher(<function k>) returned a result with an exception set") from old
        except SystemError as compiled:
            assert interrupt_in(compiled) is old and kind_of(compiled) == "interrupt"
        try:  # a cause that is not the interrupt: that error, even with an interrupt in its context
            raise SystemError("x") from ValueError("y")
        except SystemError as other:
            other.__context__ = old
            assert interrupt_in(other) is None and interrupt_in(other, anywhere=True) is None

    def test_bad_input_removes_the_directory_and_is_raised_as_it_is(self):
        removed, e = [], InputError("x.csv row 4: empty text", "fix the row")
        assert handle(e, f("input"), lambda: removed.append(1)) is e
        assert removed == [1] and not hasattr(e, "resume_note")

    def test_a_full_disk_becomes_one_line_naming_resume(self):
        removed = []
        err = handle(OSError(errno.ENOSPC, "No space left on device"), f("disk"), lambda: removed.append(1))
        assert isinstance(err, OutputError) and removed == []
        assert err.render(FLAGS) == f"{P}: no space left on the device - {FULL_DISK}"
        assert err.__suppress_context__ and err.__cause__ is None

    def test_an_oserror_naming_its_file_keeps_it_and_its_own_fix(self):
        err = handle(PermissionError(errno.EACCES, "Permission denied", "/ro/o.parquet.tmp"), f("disk", "write"), lambda: None)
        assert err.render(FLAGS) == ("/ro/o.parquet.tmp: permission denied - check the permissions of the file and its "
                                     "directory, or choose another path")


# --------------------------------------------------------------------------- 3. the engines follow the policy
def _corpus(tmp_path, n=12):
    return write_csv(tmp_path / "c.csv", ["id", "text"], [[f"id{i}", f"sentence number {i}"] for i in range(n)])


def _stdin(monkeypatch, n=12):
    data = "text\n" + "".join(f"sentence {i}\n" for i in range(n))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))


def _raising(monkeypatch, owner, name, exc: BaseException):
    """``owner.name`` raises ``exc`` whenever it is called."""
    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(owner, name, fail)


def _fail_on_call(monkeypatch, owner, name, n, make):
    """``owner.name``'s n-th call raises ``make(args)`` (or runs it, when it returns None, then the real one)."""
    real, calls = getattr(owner, name), []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == n:
            err = make(a)
            if err is not None:
                raise err
        return real(*a, **k)

    monkeypatch.setattr(owner, name, failing)


def test_a_ctrl_c_landing_in_a_real_numba_kernel_is_the_interrupt():
    """The shape the engines must see through, from numba itself (not a simulation of it): a signal handler's
    KeyboardInterrupt raised while a kernel runs comes out of the kernel call as whatever this numba makes of it
    (0.68: SystemError "CPUDispatcher(...) returned a result with an exception set", the interrupt its cause), and
    interrupt_in finds the interrupt in every one. Under numba 0.68 it found none: the engine kept the partial run as
    after a bug, without the --resume note, and bertfeat.extract raised the SystemError."""
    import signal
    import threading

    import numpy as np

    from bertfeat.ops import kernels

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        pytest.skip("needs signal.setitimer (POSIX) and the main thread, to interrupt a kernel with SIGALRM")
    softmax = kernels.get("masked_softmax_")
    if softmax is None:
        pytest.skip(f"numba's kernels are not in force here (backend {kernels.backend()!r}): nothing compiled to land in")
    scores = np.random.default_rng(0).random((32, 12, 128, 128), dtype=np.float32)  # ~5 ms a call
    mask = np.zeros((32, 1, 1, 128), np.float32)

    def on_alarm(signum, frame):
        raise KeyboardInterrupt

    previous, seen = signal.signal(signal.SIGALRM, on_alarm), []
    try:
        for i in range(20):
            signal.setitimer(signal.ITIMER_REAL, 0.001 + 0.0002 * i)
            try:
                for _ in range(2000):
                    softmax(scores, np.float32(0.1), mask)
            except BaseException as e:
                seen.append(e)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert len(seen) == 20
    assert [type(interrupt_in(e)) for e in seen] == [KeyboardInterrupt] * 20, [repr(e) for e in seen]
    assert any(not isinstance(e, KeyboardInterrupt) for e in seen), "no interrupt landed inside the kernel"


class TestStandardInputKeepsNothing:
    """A run reading standard input cannot be resumed (plan refuses --resume for it): whatever stops it, its finished
    chunks go, and no message names --resume. (Before, a failing cache or a full disk kept them: the next run was
    refused, "a partial run exists ... rerun with --overwrite", and a full disk said "rerun ... with --resume".)"""

    ARGS = ("extract", "-", "--input-format", "csv", "--model", tiny_model(), "--chunk-rows", 3, "-q")

    def test_a_cache_failing_mid_run(self, tmp_path, capsys, monkeypatch):
        import bertfeat.cache.store

        _stdin(monkeypatch)
        _fail_on_call(monkeypatch, bertfeat.cache.store.VectorStore, "put", 3,
                      lambda a: CacheError("cannot write the cache: the disk is full", "free disk space"))
        out = tmp_path / "o.parquet"
        rc, _, err = run(capsys, *self.ARGS, "-o", out, "--cache", tmp_path / "cache")
        assert (rc, err) == (1, "Error: cannot write the cache: the disk is full - free disk space\n")
        assert no_leftovers(out) == []

    def test_a_full_disk_mid_run(self, tmp_path, capsys, monkeypatch):
        import bertfeat.run.local

        _stdin(monkeypatch)
        _fail_on_call(monkeypatch, bertfeat.run.local.PartStore, "write_part", 3,
                      lambda a: OSError(errno.ENOSPC, "No space left on device"))
        out = tmp_path / "o.parquet"
        rc, _, err = run(capsys, *self.ARGS, "-o", out)
        assert (rc, err) == (1, f"Error: {out}.partial: no space left on the device - free disk space or write elsewhere "
                                "(another -o, or redirect the output), then rerun\n")
        assert no_leftovers(out) == []


class TestTheLocalEngineCountsItsParts:
    ARGS = ("--model", tiny_model(), "--chunk-rows", 3, "--id-column", "id", "-q")

    def test_a_damaged_part_while_the_outputs_are_written_keeps_the_others(self, tmp_path, capsys, monkeypatch):
        """A part damaged on disk between its write and the outputs' (read back with its page checksums): the error
        says --resume encodes that chunk again, so the other parts stay (they were removed, as for bad input)."""
        import bertfeat.run.local
        from extract_util import flip_embedding_byte

        src, out = _corpus(tmp_path), tmp_path / "o.parquet"
        store = bertfeat.run.local.PartStore
        _fail_on_call(monkeypatch, store, "read_part", 2, lambda a: flip_embedding_byte(a[0].part_path(a[1])))
        rc, _, err = run(capsys, "extract", src, "-o", out, *self.ARGS)
        assert rc == 1 and "part-000001.parquet, was damaged on disk" in err, err
        assert err.rstrip().endswith("it is removed - rerun with --resume: that chunk is encoded again"), err
        partial = tmp_path / "o.parquet.partial"
        assert sorted(p.name for p in partial.glob("part-*")) == ["part-000000.parquet", "part-000002.parquet",
                                                                  "part-000003.parquet"]
        monkeypatch.undo()
        s = bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, id_column="id", resume=True)
        assert s.chunks_resumed == 3
        assert pq.read_table(out).column("id").to_pylist() == [f"id{i}" for i in range(12)]

    def test_a_full_disk_while_the_outputs_are_written_says_what_is_kept(self, tmp_path, capsys, monkeypatch):
        """The same fix as a full disk while the chunks are encoded (it said "rerun with --resume (the finished chunks
        are kept in ...)", without their number)."""
        import bertfeat.run.local

        src, out = _corpus(tmp_path), tmp_path / "o.parquet"
        _raising(monkeypatch, bertfeat.run.local, "publish_rejects", OSError(errno.ENOSPC, "No space left on device"))
        rc, _, err = run(capsys, "extract", src, "-o", out, *self.ARGS)
        assert (rc, err) == (1, f"Error: {out}: no space left on the device - free disk space, then rerun the same command "
                                f"with --resume (4 finished chunk(s) are kept in {out}.partial)\n")
        assert len(list((tmp_path / "o.parquet.partial").glob("part-*"))) == 4

    def test_an_output_that_cannot_be_replaced_is_named_not_its_temporary(self, tmp_path, capsys, monkeypatch):
        """--overwrite over an output the rename may not replace (an immutable file, chattr +i): the error named the
        temporary moved onto it, gone by then ("Error: .o.parquet.tmp-4242: operation not permitted"), not the
        user's file (found by audit). The old output stays whole, the chunks stay for --resume."""
        src, out = _corpus(tmp_path), tmp_path / "o.parquet"
        out.write_bytes(b"the old output")
        real = os.replace

        def replace(a, b, **kw):  # what os.replace raises there: both names, the temporary first
            if Path(b) == out:
                raise OSError(errno.EPERM, "Operation not permitted", str(a), None, str(b))
            return real(a, b, **kw)

        monkeypatch.setattr(os, "replace", replace)
        rc, _, err = run(capsys, "extract", src, "-o", out, *self.ARGS, "--overwrite")
        assert (rc, err) == (1, f"Error: {out}: operation not permitted - check the permissions of the file and its "
                                "directory, or choose another path\n")
        assert out.read_bytes() == b"the old output" and not list(tmp_path.glob(".o.parquet.tmp-*"))
        assert len(list((tmp_path / "o.parquet.partial").glob("part-*"))) == 4
        monkeypatch.undo()
        assert bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, id_column="id", resume=True).chunks_resumed == 4

    def test_an_interrupt_before_the_kept_chunks_are_read_counts_them(self, tmp_path, capsys, monkeypatch):
        """A resumed run stopped before it read its kept chunks again: they are in the partial directory (the note
        said "0 chunk(s) are kept")."""
        src, out = _corpus(tmp_path), tmp_path / "o.parquet"
        with pytest.raises(KeyboardInterrupt):
            bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, id_column="id", progress=Interrupt(2))

        class StopAtStart(Interrupt):
            def start(self, total_rows, total_bytes):
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt) as e:
            bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, id_column="id", resume=True,
                             progress=StopAtStart(99))
        assert e.value.resume_note == (f"2 chunk(s) are kept in {out}.partial; run the same command with --resume to "
                                       "continue")

    def test_a_cache_failing_before_the_kept_chunks_are_read_keeps_them(self, tmp_path, capsys, monkeypatch):
        """Chunk 0 of the interrupted run damaged (removed when the resume opens the parts), the cache failing as the
        resume encodes it: the interrupted run's other part stays (it was removed: no chunk had been read yet)."""
        import bertfeat.cache.store

        src, out = _corpus(tmp_path), tmp_path / "o.parquet"
        with pytest.raises(KeyboardInterrupt):
            bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, id_column="id", progress=Interrupt(2))
        partial = tmp_path / "o.parquet.partial"
        (partial / "part-000000.parquet").write_bytes(b"")
        _fail_on_call(monkeypatch, bertfeat.cache.store.VectorStore, "put", 1,
                      lambda a: CacheError("cannot write the cache: the disk is full", "free disk space"))
        rc, _, err = run(capsys, "extract", src, "-o", out, *self.ARGS, "--cache", tmp_path / "cache", "--resume")
        assert (rc, err.splitlines()[-1]) == (1, "Error: cannot write the cache: the disk is full - free disk space; then "
                                                 "rerun with --resume to continue (1 finished chunk(s) are kept in "
                                                 f"{partial})")
        assert [p.name for p in partial.glob("part-*")] == ["part-000001.parquet"]


# --------------------------------------------------------------------------- the Dask engine
@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    """A Parquet dataset of 2 files (one partition each), with a label column."""
    d = tmp_path_factory.mktemp("data") / "corpus"
    d.mkdir()
    for k in range(2):
        pq.write_table(pa.table({"text": [f"sentence {k} {i} about {'cats' if i % 2 else 'dogs'}" for i in range(20)],
                                 "label": [i % 2 for i in range(20)]}), d / f"part{k}.parquet")
    return d


class TestTheDaskEngine:
    """The policy's rules where the Dask engine had its own: a full disk names --resume and the kept partitions (it
    was the bare OSError); an interrupt while the outputs are written says --resume writes them; a complete output
    whose report lacks its label's probe says so, as on the local engine."""

    def opts(self, data, out, **kw):
        return dict(input=str(data), output=str(out), model=tiny_model(), engine="dask", blocksize=None, **kw)

    def test_a_full_disk_while_the_outputs_are_written(self, dask_client, labelled, tmp_path, monkeypatch):
        import bertfeat.run.dask

        _raising(monkeypatch, bertfeat.run.dask, "publish_rejects", OSError(errno.ENOSPC, "No space left on device"))
        out = tmp_path / "f.parquet"
        with pytest.raises(OutputError) as e:
            bertfeat.extract(**self.opts(labelled, out), client=dask_client)
        assert e.value.render(FLAGS) == (f"{out}: no space left on the device - free disk space, then rerun the same "
                                         f"command with --resume (2 finished partition(s) are kept in {out}.partial)")
        kept = len(list((tmp_path / "f.parquet.partial").glob("part-*")))
        assert kept >= 2 and not out.exists()
        monkeypatch.undo()
        s = bertfeat.extract(**self.opts(labelled, out, resume=True), client=dask_client)
        assert s.chunks_resumed == kept and pq.read_table(out).num_rows == 40

    @pytest.mark.parametrize("stop", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")])
    def test_with_pca_a_stop_while_the_outputs_are_written_encodes_nothing_again(self, dask_client, labelled, tmp_path,
                                                                                 monkeypatch, stop):
        """--pca: the full-width parts were deleted after the reduction pass, before the outputs were written, so a
        stop there left reduced parts only and the --resume its note promised "to write them" encoded every
        partition again (found by review). The full-width parts stay until the output is in place."""
        import bertfeat.run.dask

        _raising(monkeypatch, bertfeat.run.dask, "publish_rejects", stop)
        out = tmp_path / "f.parquet"
        with pytest.raises((KeyboardInterrupt, OutputError)):
            bertfeat.extract(**self.opts(labelled, out, pca=2, cache=None), client=dask_client)
        assert len(list((tmp_path / "f.parquet.partial" / "_full").glob("part-*"))) == 2
        monkeypatch.undo()
        s = bertfeat.extract(**self.opts(labelled, out, pca=2, cache=None, resume=True), client=dask_client)
        assert (s.chunks_resumed, s.rows_encoded - s.rows_encoded_resumed, pq.read_table(out).num_rows) == (2, 0, 40)
        assert sorted(p.name for p in out.iterdir()) == ["_bertfeat.json", "part-00000.parquet", "part-00001.parquet"]

    def test_a_failing_directory_move_keeps_the_earlier_runs_pca_files_and_rejects(self, dask_client, labelled,
                                                                                   tmp_path, monkeypatch):
        """--overwrite without --pca and without bad rows over a run with both: its PCA model, report and rejects file
        were deleted before the output directory's move, which then failed; the old features stayed, and the model
        that had reduced them was gone. They are put back with the rest."""
        import bertfeat.run.dask

        out = tmp_path / "f.parquet"
        bertfeat.extract(**self.opts(labelled, out, pca=2), client=dask_client)
        side = [out.with_name(n) for n in ("f.pca.npz", "f.pca.report.json", "f.pca.report.md", "f.pca.report.png",
                                           "f.parquet.rejects.csv")]
        side[-1].write_text("row,id,reason\n0,,empty text\n")  # as an earlier run with a bad row left it
        before = {p: p.read_bytes() for p in side}
        _raising(monkeypatch, bertfeat.run.dask, "replace_directory", OSError(errno.EBUSY, "Device or resource busy"))
        with pytest.raises(OutputError):
            bertfeat.extract(**self.opts(labelled, out, overwrite=True), client=dask_client)
        assert {p: p.read_bytes() for p in side if p.exists()} == before
        assert not [p.name for p in tmp_path.iterdir() if ".old-" in p.name]

    def test_an_interrupt_while_the_outputs_are_written(self, dask_client, labelled, tmp_path, monkeypatch):
        import bertfeat.run.dask

        _raising(monkeypatch, bertfeat.run.dask, "publish_rejects", KeyboardInterrupt())
        out = tmp_path / "f.parquet"
        with pytest.raises(KeyboardInterrupt) as e:
            bertfeat.extract(**self.opts(labelled, out), client=dask_client)
        assert e.value.resume_note == (f"no output was written; the 2 finished partition(s) are kept in {out}.partial: "
                                       "run the same command with --resume to write them")
        assert not out.exists() and len(list((tmp_path / "f.parquet.partial").glob("part-*"))) >= 2

    @pytest.mark.parametrize("stop", [KeyboardInterrupt, lambda: ClusterError("partition 0: lost", "rerun")],
                             ids=["interrupt", "cluster lost"])
    def test_a_stop_before_any_partition_finished_leaves_nothing_in_the_way(self, dask_client, labelled, tmp_path, stop):
        """Stopped (Ctrl-C, or a resumable error: the cluster lost) before its first partition finished, a Dask run
        kept OUTPUT.partial/ ('the finished partitions are kept'), and the plain rerun was refused as 'a resumable
        partial run exists'. As on the local engine, it is removed, and an interrupt's note says so."""
        from bertfeat.run.progress import NullProgress

        class StopAtStart(NullProgress):
            def start(self, total_rows, total_bytes):
                raise stop()

        out = tmp_path / "f.parquet"
        with pytest.raises((KeyboardInterrupt, ClusterError)) as e:
            bertfeat.extract(**self.opts(labelled, out), client=dask_client, progress=StopAtStart())
        interrupt = isinstance(e.value, KeyboardInterrupt)
        assert interrupt == (stop is KeyboardInterrupt)
        assert getattr(e.value, "resume_note", None) == (
            "no partition had finished, so nothing is kept; run the same command again" if interrupt else None)
        assert list(tmp_path.iterdir()) == []
        assert bertfeat.extract(**self.opts(labelled, out), client=dask_client).rows_written == 40

    @pytest.mark.parametrize("where", ["finished", "worker"])
    def test_a_resumed_run_stopped_before_it_counted_its_partitions_keeps_them(self, dask_client, labelled, tmp_path,
                                                                              monkeypatch, where):
        """A resumed run stopped while it checked its kept parts' pages (or refused by a worker, as the GEMM check
        refuses one, whose fix leads to --resume) had counted 0 finished partitions: OUTPUT.partial/ was deleted,
        every finished partition lost (found by review)."""
        import bertfeat.run.dask
        from bertfeat.run.dask import WorkerSetupError

        out = tmp_path / "f.parquet"
        _raising(monkeypatch, bertfeat.run.dask, "publish_rejects", KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            bertfeat.extract(**self.opts(labelled, out), client=dask_client)
        kept = sorted(p.name for p in (tmp_path / "f.parquet.partial").glob("part-*"))
        assert len(kept) >= 2
        monkeypatch.undo()
        if where == "finished":
            _raising(monkeypatch, bertfeat.run.dask.DaskRun, "finished", KeyboardInterrupt())
        else:
            _raising(monkeypatch, bertfeat.run.dask.DaskRun, "finished",
                     WorkerSetupError("worker on h: its products would round otherwise", "start the workers with X"))
        with pytest.raises((KeyboardInterrupt, WorkerSetupError)) as e:
            bertfeat.extract(**self.opts(labelled, out, resume=True), client=dask_client)
        assert sorted(p.name for p in (tmp_path / "f.parquet.partial").glob("part-*")) == kept
        if where == "finished":
            assert e.value.resume_note == (f"{len(kept)} partition(s) are kept in {out}.partial; run the same command "
                                           "with --resume to continue")
        monkeypatch.undo()
        assert bertfeat.extract(**self.opts(labelled, out, resume=True), client=dask_client).chunks_resumed == len(kept)

    def test_an_interrupt_during_the_probe_says_the_report_has_none(self, dask_client, labelled, tmp_path, monkeypatch):
        import bertfeat.run.dask

        _raising(monkeypatch, bertfeat.run.dask, "probe_into_report", KeyboardInterrupt())
        out = tmp_path / "f.parquet"
        with pytest.raises(KeyboardInterrupt) as e:
            bertfeat.extract(**self.opts(labelled, out, pca=2, label="label"), client=dask_client)
        assert e.value.resume_note == (f"{out} and the run's other files were written and are complete (the report has "
                                       "no linear probe: pca fit / report --probe adds one)")
        assert pq.read_table(out).num_rows == 40 and not (tmp_path / "f.parquet.partial").exists()


def test_a_partial_directory_stopped_while_deleted_never_blocks_the_next_run(tmp_path, monkeypatch):
    """A Ctrl-C while OUTPUT.partial/ was being deleted (the end of a run, or --overwrite of an old one) left a
    half-deleted folder with no manifest, and every later run, --overwrite and --resume included, was refused. Now
    the folder is renamed aside first; what an interrupted deletion leaves is hidden and the next run deletes it."""
    import os

    from bertfeat import atomic

    partial = tmp_path / "o.parquet.partial"
    partial.mkdir()
    (partial / "part-000000.parquet").write_bytes(b"x")

    def cut_short(path, ignore_errors=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.shutil, "rmtree", cut_short)
    with pytest.raises(KeyboardInterrupt):
        atomic.remove_directory(partial)
    monkeypatch.undo()
    assert not partial.exists()
    (aside,) = tmp_path.glob(".o.parquet.partial.removing-*")
    dead = aside.with_name(".o.parquet.partial.removing-999999999")  # as if its process had ended
    os.rename(aside, dead)
    atomic.remove_stale_temps(partial)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_before_any_chunk_finished_leaves_nothing_in_the_way(tmp_path):
    """Interrupted before its first chunk was written, a run kept an empty OUTPUT.partial/ ('0 chunk(s) are kept'),
    and the plain rerun was refused as 'a resumable partial run exists'."""
    from bertfeat.run import local

    src = write_csv(tmp_path / "in.csv", ["text"], [[f"sentence {i}"] for i in range(8)])
    out = tmp_path / "o.parquet"
    real = local.PartStore.write_part

    def stop(self, *a, **k):
        raise KeyboardInterrupt

    local.PartStore.write_part = stop
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            bertfeat.extract(src, out, model=tiny_model(), cache=False)
    finally:
        local.PartStore.write_part = real
    assert e.value.resume_note == "no chunk had finished, so nothing is kept; run the same command again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert bertfeat.extract(src, out, model=tiny_model(), cache=False).rows_written == 8


def test_a_signal_just_after_a_chunks_part_is_written_keeps_it(tmp_path, monkeypatch):
    """Ctrl-C / SIGTERM between a chunk's part landing on disk and its count: the run counted 0 finished chunks and
    deleted OUTPUT.partial/ with the finished part, saying nothing was kept (seen as a flaky SIGTERM test under
    load). The write and the count are one block a signal waits for."""
    import os
    import signal

    import bertfeat.run.local as local

    src = tmp_path / "in.csv"
    src.write_text("text\n" + "".join(f"row number {i}\n" for i in range(40)))
    out = tmp_path / "o.parquet"
    real = local.PartStore.write_part

    def then_stopped(self, *a, **k):
        real(self, *a, **k)
        os.kill(os.getpid(), signal.SIGINT)  # arrives with the part on disk, before the count

    monkeypatch.setattr(local.PartStore, "write_part", then_stopped)
    with pytest.raises(KeyboardInterrupt) as e:
        bertfeat.extract(src, out, model=tiny_model(), chunk_rows=8, cache=False)
    assert e.value.resume_note == (f"1 chunk(s) are kept in {out}.partial; run the same command with --resume to "
                                   "continue")
    assert len(list((tmp_path / "o.parquet.partial").glob("part-*"))) == 1
