"""How the command line shows a failure: ``user_error(exc)`` turns whatever a command raised (OS errors on read or
write, a truncated or empty ``.npz``/``.npy``, a corrupt model file) into a ``BertfeatError`` with *what* and *how
to fix*; ``None`` means an unexpected exception (a bug), which ``app.main`` reports in one line too (``unexpected``)
unless ``--debug`` / ``BERTFEAT_DEBUG=1`` asks for the traceback (``debug_enabled``). Imports no numeric module.
"""

from __future__ import annotations

import os
import zipfile

from ..errors import BertfeatError, one_line, opt, os_error

DEBUG_ENV = "BERTFEAT_DEBUG"
BUG_FIX = f"this is a bug in bertfeat: rerun as `bertfeat --debug COMMAND ...` (or with {DEBUG_ENV}=1) to see the traceback and report it"


def closed_stdout_error(what: str = "this command's output", fix: str | None = None) -> BertfeatError:
    """The one error of a standard output that was closed when the process started (``>&-``): nowhere to print
    ``what``; ``fix``, another way out besides redirecting it (e.g. "pass -q")."""
    return BertfeatError(f"standard output is closed (the command was started with >&-), so there is nowhere to print "
                         f"{what}", "run it with its output going to a file or a pipe (> out.txt, or > /dev/null to "
                         "discard it)" + (f", or {fix}" if fix else ""))


def require_stdout(what: str, fix: str | None = None) -> None:
    """Refuse up front, before a file is written, a command that would print ``what`` on a standard output that was
    closed when the process started (app._ClosedOutput): the run would write its files and then fail."""
    import sys

    if getattr(sys.stdout, "closed_at_start", False):
        raise closed_stdout_error(what, fix)


def user_error(e: BaseException) -> BertfeatError | None:
    """The exception as a one-line user error, or None when it is unexpected (a bug)."""
    if isinstance(e, BertfeatError):
        return e
    if isinstance(e, zipfile.BadZipFile):
        return BertfeatError(f"a .npz file is truncated or not a .npz archive ({one_line(e)})",
                             "pass a complete .npz written by bertfeat (rerun the command that wrote it)")
    if isinstance(e, EOFError):
        return BertfeatError(f"unexpected end of a file: it is empty or truncated ({one_line(e)})",
                             "pass a complete file (rerun the command that wrote it)")
    if isinstance(e, MemoryError):
        return BertfeatError("out of memory", f"lower {opt('max_batch_tokens')} / {opt('batch_rows')}, or use a machine with more memory")
    if isinstance(e, OSError):
        return os_error(e)
    if isinstance(e, ValueError) and "embedded null" in str(e):  # os.stat / open of a path holding "\x00"
        return BertfeatError("a path holds a NUL character (\\x00), which no file name can hold", "remove it from the path")
    if isinstance(e, ValueError) and "allow_pickle" in str(e):
        return BertfeatError("a .npy/.npz file is not a plain array file (it would need pickle, which bertfeat never loads)",
                             "pass a file written by bertfeat")
    mod = type(e).__module__ or ""
    if mod.startswith("safetensors"):
        return BertfeatError(f"the model weights cannot be read ({one_line(e)})",
                             "the model.safetensors file is empty, truncated or corrupt: copy the model again")
    return None


def unexpected(e: BaseException) -> str:
    """The one line shown for an unexpected exception (the traceback needs --debug)."""
    return f"Error: unexpected {type(e).__name__}: {one_line(e)} - {BUG_FIX}"


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")

