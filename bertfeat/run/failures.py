"""What a failed or stopped extract keeps and says: the one failure policy of both engines.

An engine says what happened (``Failure``: the kind of failure, the phase, standard input or not, how many units -
chunks, partitions - finished, whether the outputs are complete) and does what ``decide`` returns (``Decision``):
remove its partial directory or keep it for ``--resume``, the ``resume_note`` of a Ctrl-C / SIGTERM (the CLI prints
it after "Interrupted:"), the fix of a full disk. ``handle`` does both for an exception, in the engine's one
``except`` around each phase.

The rules (docs/errors.md, "What a failed extract keeps", has the user's side):

- standard input: nothing is kept (it cannot be read again: a resume is refused);
- bad input or settings (a BertfeatError): the partial directory is removed (a rerun starts over anyway);
- a cache error, a damaged part, max_bad_rows passed, a failed cluster (``resumable``): the finished parts stay for
  --resume (a cache error's or a worker refusal's fix then ends with how --resume continues: a full disk's, a
  lock's, a worker's model changed ...); none finished: nothing to resume, the directory goes;
- an OSError (a full disk, a read-only directory): the parts stay, and a full disk's fix names --resume and them;
- Ctrl-C / SIGTERM: the parts stay and the note says where, and that --resume continues (while the outputs were
  being written: that it writes them); none finished yet: the directory goes and the note says to run again; the
  outputs already complete: the note says so;
- anything else (a bug): the partial directory is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import BertfeatError, ResumableError, interrupt_in, opt, render
from ..readers.rejects import TooManyBadRows

KINDS = ("input", "resumable", "disk", "interrupt", "other")
PHASES = ("encode", "write")  # making the parts (no output touched); writing the outputs from them

#: the interrupt note of a run reading standard input (its finished chunks are removed: it cannot be resumed)
STDIN_NOT_KEPT = ("nothing was kept: a run reading standard input cannot be resumed (write the input to a file for a "
                  "run that can)")
#: added to the "complete" note when a label's linear probe had not been added to the report
PROBE_MISSING = " (the report has no linear probe: pca fit / report --probe adds one)"


def kind_of(e: BaseException, resumable: tuple[type, ...] = ()) -> str:
    """The failure's kind (KINDS); ``resumable``: the engine's own errors that keep the finished parts (the local
    engine's DamagedPart, the Dask engine's ClusterError) beside every ResumableError (a cache's, a worker's setup)
    and max_bad_rows'."""
    if interrupt_in(e) is not None:  # Ctrl-C, SIGTERM through the CLI (cli.app.Terminated), or what a kernel made of them
        return "interrupt"
    if isinstance(e, (ResumableError, TooManyBadRows, *resumable)):
        return "resumable"
    if isinstance(e, BertfeatError):
        return "input"
    if isinstance(e, OSError):
        return "disk"
    return "other"


@dataclass(frozen=True)
class Failure:
    """What happened, as the engine saw it (and the names its messages need)."""

    kind: str  # KINDS
    phase: str  # PHASES
    partial: Path  # the run's partial directory (OUTPUT.partial/)
    output: Path  # the features output
    unit: str = "chunk"  # the engine's unit of work: "chunk" (local) or "partition" (Dask)
    finished: int = 0  # units finished (their parts are in ``partial``; a resumed run's included)
    stdin: bool = False  # the input is standard input (it cannot be read again)
    complete: bool = False  # the outputs are all in place (the partial directory is gone)
    probe_missing: bool = False  # a label was given and the report has no linear probe yet


@dataclass(frozen=True)
class Decision:
    """What the engine does: ``remove`` its partial directory; ``note``: an interrupt's resume_note; ``os_path``: an
    OSError becomes ``errors.os_error(e, os_path, os_fix, os_rerun)`` (``os_fix``: the fix of a full disk, None: the
    errno's; ``os_rerun``: how a rerun continues once the limit a file passed (ulimit -f) is raised);
    ``resume``: how a rerun continues from the kept parts, after the fix of a ResumableError (a cache error, a worker
    set up otherwise: its kept_for_resume)."""

    remove: bool
    note: str | None = None
    os_path: Path | None = None
    os_fix: str | None = None
    os_rerun: str | None = None
    resume: str | None = None


def kept(f: Failure, form: str = "the") -> str:
    """Which parts stay, as the messages say it: ``form`` "count" ("5 chunk(s)"), "finished" ("5 finished
    chunk(s)") or "the" ("the 5 finished chunk(s)")."""
    return {"count": f"{f.finished} {f.unit}(s)", "finished": f"{f.finished} finished {f.unit}(s)",
            "the": f"the {f.finished} finished {f.unit}(s)"}[form]


def kept_for_limit(f: Failure) -> str | None:
    """max_bad_rows' words for what stays (rejects.BadRowLimit.error's ``kept``; None: nothing, standard input)."""
    return None if f.stdin else f"{kept(f)} are kept in {f.partial}"


def decide(f: Failure) -> Decision:
    """The one failure policy (the module docstring has the rules)."""
    if f.kind not in KINDS or f.phase not in PHASES:
        raise ValueError(f"unknown failure {f.kind!r} in phase {f.phase!r}")
    os_path = (f.partial if f.phase == "encode" else f.output) if f.kind == "disk" else None
    if f.complete:  # the partial directory is gone (the outputs were made from it): nothing to keep or remove
        note = f"{f.output} and the run's other files were written and are complete" + PROBE_MISSING * f.probe_missing
        if f.kind == "disk":  # writing the report again with the label's probe: a rerun would find the outputs there
            done = f"{f.output} and the run's other files were written and are complete"
            if not f.probe_missing:  # nothing left to do but free the space
                return Decision(False, None, None, f"free disk space; nothing needs a rerun ({done})", done)
            then = f"add the linear probe with report --probe ({done})"
            return Decision(False, None, None, f"free disk space, then {then}", then)
        return Decision(False, note if f.kind == "interrupt" else None, os_path)
    if f.stdin:  # nothing to resume: a resume is refused, and a kept directory would only block the next run
        note = STDIN_NOT_KEPT if f.phase == "encode" else f"no output was written; {STDIN_NOT_KEPT}"
        return Decision(True, note if f.kind == "interrupt" else None, os_path)
    if f.kind == "input":
        return Decision(True)
    if f.kind == "resumable":
        if f.finished == 0:
            return Decision(True)
        return Decision(False, resume=f"rerun with {opt('resume', True)} to continue ({kept(f, 'finished')} are kept "
                                      f"in {f.partial})")
    if f.kind == "disk":
        rerun = f"rerun the same command with {opt('resume', True)} ({kept(f, 'finished')} are kept in {f.partial})"
        return Decision(False, os_path=os_path, os_fix=f"free disk space, then {rerun}", os_rerun=rerun)
    if f.kind == "interrupt":
        if f.phase == "encode" and f.finished == 0:  # a kept empty directory would only block the plain rerun
            return Decision(True, f"no {f.unit} had finished, so nothing is kept; run the same command again")
        if f.phase == "encode":
            return Decision(False, f"{kept(f, 'count')} are kept in {f.partial}; run the same command with "
                                   f"{opt('resume', True)} to continue")
        return Decision(False, f"no output was written; {kept(f)} are kept in {f.partial}: run the same command with "
                               f"{opt('resume', True)} to write them")
    return Decision(False)  # another exception (a bug): everything as it is, for the traceback to explain


def handle(e: BaseException, failure: Failure, remove: Callable[[], None]) -> BaseException:
    """Do what ``decide`` says for ``e``: remove the partial directory (``remove``), set an interrupt's resume_note
    (the CLI's words) and resume_note_python (``resume=True``); returns the exception to raise (``e``; the KeyboardInterrupt for an interrupt, also when compiled code raised
    another error while handling it; the OutputError an OSError becomes; a cache error or worker refusal saying how --resume continues)."""
    if failure.kind == "interrupt":
        e = interrupt_in(e) or e
    decision = decide(failure)
    if decision.remove:
        remove()
    if decision.note is not None:  # the CLI's words, and Python's as the message (resume=True, not --resume)
        e.resume_note, e.resume_note_python = render(decision.note, {}), render(decision.note)
    if decision.resume is not None and isinstance(e, ResumableError):
        err = e.kept_for_resume(decision.resume)
        if err is not e:
            err.__cause__, err.__suppress_context__ = None, True  # as the cache's `raise ... from None`
        return err
    if decision.os_path is not None or decision.os_fix is not None:
        from ..errors import os_error

        err = os_error(e, decision.os_path, decision.os_fix, decision.os_rerun)
        err.__cause__, err.__suppress_context__ = None, True  # as `raise ... from None`: the one line says it all
        return err
    return e
