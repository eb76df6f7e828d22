"""One error type for everything a user can fix.

Every library error carries *what* went wrong and *how to fix it*; the CLI prints
``Error: what - how to fix`` on stderr and exits non-zero, with no traceback.

An option named in a message is written ``opt("threads", 0)``: Python callers read ``threads=0``
(the parameter of ``bertfeat.extract`` and friends), the CLI shows ``--threads 0`` (its flag). The
message keeps the option as a marker until it is shown, so one raise serves both, across threads
and Dask workers alike (the error pickles with its markers).

An OSError (a full disk, a permission, a missing directory) becomes one too: ``os_error`` names the path and gives the
errno's fix, for every layer that reads or writes files.
"""

from __future__ import annotations

import errno
import os
import re

_OPEN, _SEP, _CLOSE = "\ue000", "\ue002", "\ue001"
_EITHER = "\ue003"  # opens a marker of two plain texts, the Python caller's and the command line's (``either``)
#: Unicode's bidirectional controls (the Arabic letter mark, LRM / RLM, the embeddings, overrides and isolates): a
#: right-to-left override in a name or a wordpiece reorders the rest of the line in a terminal that applies the bidi
#: algorithm, and each is invisible where it does not
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: invisible characters a name holds unseen: the zero-width space and the BOM (U+FEFF: a header line's BOM after files
#: were joined, "\ufeffid" shown as "id" beside an --id-column id it does not match)
_INVISIBLE = "\u200b\ufeff"
#: characters that would break an error's one line or drive the terminal: C0 / C1 controls (newline, CR, tab, NUL, the
#: ESC of an ANSI sequence ...), DEL, Unicode's line / paragraph separators and its bidirectional controls; and lone
#: surrogates (a file name's bytes that are not UTF-8, as Python decodes them), which a stream that encodes strictly
#: cannot write at all
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}{_INVISIBLE}\ud800-\udfff]")
#: the same, less C0, which JSON escapes itself (a raw newline in JSON text is its layout's)
_JSON_CONTROL = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}{_INVISIBLE}\ud800-\udfff]")
_MARK = re.compile(f"{_OPEN}([^{_CLOSE}]*){_CLOSE}")
_UNSET = object()


def opt(name: str, value=_UNSET, *, cli: str | None = None) -> str:
    """An option in an error message, by its Python parameter ``name`` (and the value given, if any).

    Rendered ``name=value`` (``repr`` of the value) for Python callers, ``--name-with-dashes value``
    by the CLI (cli.app.FLAGS maps a parameter whose flag is spelled otherwise, and ``name=value`` to a flag of that value:
    ``cache=False`` to ``--no-cache``). ``True`` shows as the bare flag.
    ``cli``: the value as the command line shows it, when not ``str(value)`` (e.g. quoted, ``--pca 'abc'``).
    """
    if value is _UNSET:
        return f"{_OPEN}{name}{_CLOSE}"
    if cli is None:
        cli = "" if value is True else str(value)
    return f"{_OPEN}{name}{_SEP}{value!r}{_SEP}{cli}{_CLOSE}"


class _Word(str):
    """A placeholder shown bare: ``pca=N`` in Python, ``--pca N`` on the command line (``opt_word``)."""

    def __repr__(self) -> str:
        return str(self)


def opt_word(name: str, word: str) -> str:
    """An option with a placeholder for its value: ``pca=N`` for Python callers, ``--pca N`` by the CLI."""
    return opt(name, _Word(word), cli=word)


def either(python: str, cli: str) -> str:
    """A clause said one way to Python callers and another on the command line (plain text, no ``opt`` inside):
    ``or None for the model's own embedding`` / ``or leave it out for the model's own embedding``."""
    return f"{_OPEN}{_EITHER}{python}{_SEP}{cli}{_CLOSE}"


def render(text: str | None, flags: dict[str, str] | None = None) -> str | None:
    """A message with its option markers spelled out: Python style, or the CLI's with ``flags``
    (parameter -> flag; a parameter not in it is ``--`` + its name with dashes)."""
    if not text or _OPEN not in text:
        return text

    def one(m: re.Match) -> str:
        name, *value = m.group(1).split(_SEP)
        if name.startswith(_EITHER):
            return name[1:] if flags is None else value[0]
        if flags is None:
            return name if not value else f"{name}={value[0]}"
        if value and f"{name}={value[0]}" in flags:  # a value with a flag of its own: cache=False is --no-cache
            return flags[f"{name}={value[0]}"]
        flag = flags.get(name) or "--" + name.replace("_", "-")
        return flag if not value or not value[1] else f"{flag} {value[1]}"

    return _MARK.sub(one, text)


def visible(text: str) -> str:
    """``text`` with each control character written as Python writes it in a string literal (``\\n``, ``\\t``,
    ``\\x00``, ``\\x1b``, ``\\u202e`` ...): a path, column or other name holding one stays on the message's one
    line, visibly, and never moves the cursor, colours the terminal or reorders the line."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def json_visible(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with each character ``visible`` escapes that JSON leaves as
    it is (DEL, C1 controls such as U+009B, the CSI of an 8-bit escape sequence, line separators, bidi controls)
    written as a ``\\uXXXX`` escape: the same JSON value, which prints on a terminal without driving it."""
    return _JSON_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class BertfeatError(ValueError):
    """An error the user can act on: ``what`` happened, ``fix`` says what to do.

    A ``ValueError``, so code written for scikit-learn or NumPy conventions (``except ValueError``)
    catches bertfeat's bad-input errors too.
    """

    exit_code = 1

    def __init__(self, what: str, fix: str | None = None):
        self._what = what
        self._fix = fix
        super().__init__(self.message)

    def __reduce__(self):  # keep the option markers across pickling (Dask workers -> client)
        return (type(self), (self._what, self._fix))

    @property
    def what(self) -> str:
        return visible(render(self._what))

    @property
    def fix(self) -> str | None:
        return self._fix and visible(render(self._fix))

    @property
    def marked_what(self) -> str:
        """``what`` with its option markers, to build another error from (its options named for the caller)."""
        return self._what

    @property
    def marked_fix(self) -> str | None:
        """``fix`` with its option markers (``marked_what``)."""
        return self._fix

    @property
    def message(self) -> str:
        """``what - fix``, options named as Python parameters."""
        return self.render()

    def names(self, option: str) -> bool:
        """Does this error name the option ``option`` (an ``opt`` marker in its what or fix)?"""
        return any(f"{_OPEN}{option}{c}" in (t or "") for t in (self._what, self._fix) for c in (_SEP, _CLOSE))

    def refixed(self, more: str, fix: str) -> "BertfeatError":
        """This error's what, ``more`` added, with another ``fix`` (its options still named for the caller)."""
        return type(self)(f"{self._what}{more}", fix)

    def prefixed(self, context: str) -> "BertfeatError":
        """This error said within ``context`` (``feature set 'mean': ...``), its options still named for the caller:
        one made again from ``what`` / ``fix`` spelled them as Python parameters on the command line too."""
        return BertfeatError(f"{context}: {self._what}", self._fix)

    def rename(self, names: dict[str, str]) -> "BertfeatError":
        """Name this error's options as the caller's parameters (``{"n_components": "pca"}``: a PCA's parameter is
        ``bertfeat.extract``'s ``pca``), in place; returns self, to raise again."""
        def one(m: re.Match) -> str:
            name, *value = m.group(1).split(_SEP)
            return _OPEN + _SEP.join([names.get(name, name), *value]) + _CLOSE

        self._what = _MARK.sub(one, self._what)
        self._fix = self._fix and _MARK.sub(one, self._fix)
        self.args = (self.message,)
        return self

    def what_as(self, flags: dict[str, str] | None = None) -> str:
        """``what`` alone, options named as Python parameters, or as command-line flags with ``flags``."""
        return visible(render(self._what, flags))

    def render(self, flags: dict[str, str] | None = None) -> str:
        """``what - fix`` on one line (control characters of the names in it escaped: ``visible``); with ``flags``
        (the CLI's), options named as command-line flags."""
        what, fix = render(self._what, flags), render(self._fix, flags)
        return visible(f"{what} - {fix}" if fix else what)


def interrupt_in(e: BaseException | None, anywhere: bool = False) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or the CLI's SIGTERM) ``e`` is, else None. Compiled code (numba's kernels) that
    a Ctrl-C lands in hands Python a SystemError whose cause is the KeyboardInterrupt ("CPUDispatcher(...) returned a
    result with an exception set": CPython's check of the call's result; numba 0.61's own wrapper raised it while
    handling the interrupt, its context): that is the interrupt too. Only that shape: any other error whose context
    holds an interrupt (a caller's own ``except KeyboardInterrupt:`` around bertfeat.extract, a cleanup failing while
    one unwinds), or a SystemError raised ``from None``, is that error. ``anywhere``: any KeyboardInterrupt in the
    __cause__ / __context__ chain (the CLI's process, where no caller's interrupt can be pending)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return e
        if anywhere:
            e = e.__cause__ or e.__context__
        elif not isinstance(e, SystemError):
            return None
        else:  # its explicit cause, else its context unless that was suppressed (``from None``)
            e = e.__cause__ if e.__cause__ is not None or e.__suppress_context__ else e.__context__
    return None


def special_file_kind(mode: int) -> str:
    """What a file that is neither a regular file nor a directory is, in words (from ``os.stat``'s mode)."""
    import stat

    return ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")


def one_line(e: BaseException | str, limit: int = 200) -> str:
    """An exception's text (or any text) on one line, at most ``limit`` characters ("..." marks a cut); the
    exception's type name when its text is empty. For the part of a message that quotes a library's error."""
    text = visible(" ".join(str(e).split()))
    if not text and isinstance(e, BaseException):
        text = type(e).__name__
    return clipped(text, limit)


def clipped(text: str, limit: int = 40) -> str:
    """``text`` as a message quotes a value of it: at most ``limit`` characters, "..." marking a cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ModelNotFoundError(BertfeatError):
    """The model could not be found locally."""


class ConfigError(BertfeatError):
    """config.json asks for something bertfeat does not support."""


class WeightsError(BertfeatError):
    """A checkpoint is missing a tensor or has one of the wrong shape."""


class InputError(BertfeatError):
    """The input data (file, row, column) is bad."""


class ResumableError(BertfeatError):
    """A failure after which a run's finished units stay (a cache that failed, a worker set up otherwise than the
    client): the failure policy (run.failures) adds to its fix how a rerun continues (``kept_for_resume``)."""

    def kept_for_resume(self, how: str) -> "ResumableError":
        """This error with ``how`` a rerun continues after its fix."""
        return type(self)(self._what, f"{self._fix}; then {how}" if self._fix else how)


class ResumeError(BertfeatError):
    """A resume was refused because settings or inputs differ."""


class ParameterError(BertfeatError, TypeError):
    """A call named a parameter that bertfeat's function or class does not take (``PCA(svd_solver=...)``): a
    ``TypeError`` too, as Python's own for an unexpected keyword, so code that catches that keeps working."""


class BertfeatWarning(UserWarning):
    """Something a run goes on with, but the user should know (Python: a warning; the CLI: ``Warning: ...`` on
    stderr), e.g. a tokenizer with tokens the model cannot embed. Its text names options Python's way
    (``keep='k:str'``); ``marked``, the words with their option markers, which the CLI renders as its flags."""

    marked: str = ""


def warn(message: str, every_time: bool = True) -> None:
    """Issue ``message`` as a ``BertfeatWarning`` (warn each one through this), as the line of the caller's own code
    outside bertfeat (its call of ``bertfeat.extract``, ``Encoder`` ...): ``every_time``, a run's own finding (ids
    repeated), each time it is issued; else (a model's caveat, the same words at each load) once per text and line
    of the caller's, as Python's default filter says a warning, so a loop that loads the model says it once.

    Python's default filter shows a warning once per text and line: a second run of one input in a process (a file
    rewritten, a notebook cell run again) whose finding had the same words was silent, and ``stacklevel`` named a line
    of bertfeat's. A filter the user sets (``ignore``, ``error``, ``once``, ``always``) still decides."""
    import sys
    import warnings

    inside = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(inside):
        frame = frame.f_back
    # registry None: no record of what was shown, so the default action shows it again; else the caller module's, as
    # warnings.warn keeps it
    registry = None if every_time else frame.f_globals.setdefault("__warningregistry__", {})
    where = dict(filename=frame.f_code.co_filename, lineno=frame.f_lineno, module=frame.f_globals.get("__name__"),
                 registry=registry)
    w = BertfeatWarning(render(message))
    w.marked = message  # (the CLI's flags: cli.app._warnings_as_lines)
    try:
        warnings.warn_explicit(w, BertfeatWarning, **where, module_globals=frame.f_globals)
    except ImportError:  # the caller's loader cannot give its source (python -c, stdin, the REPL: __main__ is built
        warnings.warn_explicit(w, BertfeatWarning, **where)  # in), asked before anything is shown or recorded


class OutputError(BertfeatError):
    """An output would replace an input, or an existing file, or cannot be written."""


# --------------------------------------------------------------------------- an OSError -> what and how to fix
_OS_FIX = {
    errno.ENOSPC: ("no space left on the device",
                   f"free disk space or write elsewhere (another {opt('output')}, or redirect the output), then rerun"),
    errno.EDQUOT: ("disk quota exceeded", f"free space under your quota or write elsewhere with {opt('output')}, then rerun"),
    errno.EROFS: ("read-only file system", f"write to a writable directory (pass {opt('output')} with another path)"),
    errno.EACCES: ("permission denied", "check the permissions of the file and its directory, or choose another path"),
    errno.EPERM: ("operation not permitted", "check the permissions of the file and its directory, or choose another path"),
    errno.ENOENT: ("no such file or directory", "check the path (does its directory exist?)"),
    errno.ENOTDIR: ("a part of the path is not a directory", "check the path"),
    errno.EEXIST: ("already exists: a file where the path needs a directory", "check the path: every part before the "
                   "file name must be a directory (or one that does not exist yet)"),
    errno.EISDIR: ("is a directory", "pass a file name, not a directory"),
    errno.EIO: ("input/output error", "the disk or the file system failed; check the device, then rerun"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n) or read fewer files at once"),
    errno.EFBIG: ("file too large for the file system", f"write to another file system with {opt('output')}"),  # file_too_large
    # no flag named: the path may be any file a command writes (--summary-json, --save-npy, a report), not only -o's
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter file name (most file systems take 255 bytes at most)"),
}


def _errno_of(e: OSError) -> int | None:
    if e.errno is not None:
        return e.errno
    m = re.search(r"\[Errno (\d+)\]|errno[ :=]+(\d+)", str(e), re.IGNORECASE)  # pyarrow's IOError text
    if m:
        return int(m.group(1) or m.group(2))
    text = str(e).lower()
    for code, (what, _) in _OS_FIX.items():
        if what in text:
            return code
    return None


#: atomic.py's temporary and second names beside a file NAME: ``.NAME.tmp-PID``, ``.NAME.old-PID``
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?:tmp|old)-\d+")


def _written_as(path):
    """The file an atomic write's temporary stands for (``.NAME.tmp-PID`` -> ``NAME`` beside it), else ``path``: the
    temporary is gone when the error is shown, and its name is not one the user gave."""
    if path is None:
        return None
    m = _TEMP_NAME.fullmatch(os.path.basename(os.fsdecode(path)))
    return os.path.join(os.path.dirname(os.fsdecode(path)), m["name"]) if m else path


def file_size_limit() -> int | None:
    """The largest file this process may write, in bytes (RLIMIT_FSIZE: ``ulimit -f``), or None when unlimited."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


#: the smallest largest file of a file system still in use (FAT32: 4 GiB - 1): a file-size limit below it is what
#: stopped a write with EFBIG; above it, the file system may have
FAT32_MAX_FILE = 2**32 - 1


def file_too_large(then: str | None = None) -> tuple[str, str]:
    """What a write's EFBIG means here and its fix: past this process's file-size limit when it has one below any file
    system's largest file (Python ignores SIGXFSZ, so ``ulimit -f`` surfaces as EFBIG; another file system would not
    help), past the file system's largest file when it has none, either when its limit is larger (``FAT32_MAX_FILE``).
    ``then``: what to do after raising the limit (default: rerun)."""
    limit = file_size_limit()
    fs_fix = f"write to another file system with {opt('output')}"
    if limit is None:
        return "file too large for the file system", fs_fix
    rerun = f"raise the limit (ulimit -f unlimited), then {then or 'rerun'}"
    if limit < FAT32_MAX_FILE:
        return (f"file too large: this process may not write a file past {limit:,} bytes (its file-size limit, "
                "ulimit -f)"), rerun
    return (f"file too large for the file system, or past this process's file-size limit of {limit:,} bytes "
            "(ulimit -f)"), f"{fs_fix}, or {rerun}"


def _cwd_gone() -> bool:
    """The current directory was deleted (or moved away) under this process: a relative path names nothing."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def os_error(e: OSError, path: str | os.PathLike | None = None, space_fix: str | None = None,
             rerun: str | None = None) -> BertfeatError:
    """An OSError -> ``PATH: what - fix`` (the errno decides the fix; ``path`` when the error names none;
    ``space_fix`` replaces the fix of a full disk or quota, e.g. extract's "free disk space, then rerun with
    resume=True"; ``rerun``: how a rerun continues once a file-size limit is raised, file_too_large)."""
    code = _errno_of(e)
    # a rename or link names its destination second: the user's file, not the temporary moved onto it
    where = next((f for f in (getattr(e, "filename2", None), getattr(e, "filename", None)) if f), path)
    where = _written_as(where)
    what, fix = _OS_FIX.get(code, (None, "check the path, its permissions and the free disk space"))
    if what is None:
        what = one_line(e.strerror or e)  # an empty text: the exception's type name
    if code == errno.EFBIG:
        what, fix = file_too_large(rerun)
    if space_fix and code in (errno.ENOSPC, errno.EDQUOT):
        fix = space_fix
    if code == errno.ENOENT and _cwd_gone() and not (where and os.path.isabs(os.fsdecode(where))):
        what = f"{what} (the current directory no longer exists: it was deleted or moved)"
        fix = "cd to an existing directory (or give absolute paths), then rerun"
    return OutputError(f"{where}: {what}" if where else what, fix)

