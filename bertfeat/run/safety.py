"""The failure rules every command shares: one-line errors, no output over an input, no silent overwrite.

* ``user_error(exc)`` turns whatever a command raised (OS errors on read or write, a truncated or
  empty ``.npz``/``.npy``, a corrupt model file) into a ``BertfeatError`` with *what* and *how to
  fix*; ``None`` means an unexpected exception (a bug), which ``cli.main`` reports in one line too
  unless ``--debug`` / ``BERTFEAT_DEBUG=1`` asks for the traceback.
* ``check_outputs(outputs, inputs, overwrite)`` runs before a command writes anything: no output or
  side file may be an input (compared through symbolic and hard links) or an existing directory, and an
  existing output is refused unless ``--overwrite``.
* ``check_array_file(path)`` reads the first bytes of a ``.npy``/``.npz`` so that an empty,
  truncated or foreign file is named as such (never numpy's advice to load it with pickle); a
  directory or a FIFO is refused before anything opens it (opening a FIFO with no writer blocks).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import BertfeatError, one_line, opt, special_file_kind

DEBUG_ENV = "BERTFEAT_DEBUG"
BUG_FIX = f"this is a bug in bertfeat: rerun as `bertfeat --debug COMMAND ...` (or with {DEBUG_ENV}=1) to see the traceback and report it"


class OutputError(BertfeatError):
    """An output would replace an input, or an existing file, or cannot be written."""


# --------------------------------------------------------------------------- exceptions -> one line
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
    errno.EFBIG: ("file too large for the file system", f"write to another file system with {opt('output')}"),
    errno.ENAMETOOLONG: ("file name too long", f"choose a shorter name (pass {opt('output')} with a shorter file name)"),
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


def os_error(e: OSError, path: str | os.PathLike | None = None, space_fix: str | None = None) -> BertfeatError:
    """An OSError -> ``PATH: what - fix`` (the errno decides the fix; ``path`` when the error names none;
    ``space_fix`` replaces the fix of a full disk or quota, e.g. extract's "rerun with resume=True")."""
    code = _errno_of(e)
    where = e.filename if getattr(e, "filename", None) else path
    what, fix = _OS_FIX.get(code, (None, "check the path, its permissions and the free disk space"))
    if what is None:
        what = one_line(e.strerror or e)  # an empty text: the exception's type name
    if space_fix and code in (errno.ENOSPC, errno.EDQUOT):
        fix = space_fix
    return OutputError(f"{where}: {what}" if where else what, fix)


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


# --------------------------------------------------------------------------- outputs vs inputs
def _same_file(a: Path, b: Path) -> bool:
    """a and b name the same file: the same resolved path (symbolic links), or the same inode (hard links)."""
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):
        pass
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(a: Path, d: Path) -> bool:
    """a lies inside the directory d (e.g. an input inside an OUTPUT.partial directory)."""
    try:
        return d.resolve() in a.resolve().parents
    except (OSError, RuntimeError):
        return False


def _named_by(label: str, options: Mapping[str, str] | None) -> str:
    """The option that names the output ``label`` in a fix: ``options[label]`` (a parameter name), else output."""
    return opt((options or {}).get(label, "output"))


def check_not_input(outputs: Iterable[tuple[str, Path]], inputs: Iterable[Path],
                    options: Mapping[str, str] | None = None) -> None:
    """Refuse when an output or side file (label, path) names an input, or a directory holding one."""
    inputs = [Path(p) for p in inputs if p is not None and str(p) != "-"]
    for label, out in outputs:
        out = Path(out)
        for inp in inputs:
            if _same_file(out, inp) or _inside(inp, out):
                raise OutputError(f"the {label} {out} would replace the input {inp}",
                                  f"pass {_named_by(label, options)} with another name, or rename the input")


def file_kind(path: Path) -> str | None:
    """What a path is when it is neither absent, a regular file nor a directory ("a named pipe (FIFO)", ...)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, name in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def check_overwrite(outputs: Iterable[tuple[str, Path]], overwrite: bool,
                    options: Mapping[str, str] | None = None) -> None:
    """Refuse an output that is not a regular file (a FIFO, a device: whatever the flags), and an existing output
    unless ``overwrite``."""
    outputs = [(label, Path(out)) for label, out in outputs]
    for label, out in outputs:
        kind = file_kind(out)
        if kind is not None:
            raise OutputError(f"the {label} {out} is {kind}, not a regular file",
                              f"bertfeat writes regular files (atomically: a temporary file, then a rename); pass "
                              f"{_named_by(label, options)} with a file name")
    if overwrite:
        return
    for label, out in outputs:
        out = Path(out)
        if out.exists() or out.is_symlink():
            raise OutputError(f"{out} already exists", f"pass {opt('overwrite', True)} to replace it, or "
                              f"{_named_by(label, options)} with another name")


def check_outputs(outputs: Iterable[tuple[str, Path]], inputs: Iterable[Path], overwrite: bool = False,
                  existing: Iterable[tuple[str, Path]] | None = None, options: Mapping[str, str] | None = None) -> None:
    """Both checks, before anything is written. ``existing`` (default: all outputs) are the files whose
    existence needs --overwrite (a file a run removes when it is not needed, e.g. a stale rejects file, is not).
    ``options``: label -> the parameter of the option that gives that output, as the fixes name it (attention's
    ``{"--save-npy file": "save_npy"}``); an output not in it is ``output``'s (``-o``)."""
    outputs = [(label, Path(p)) for label, p in outputs if p is not None]
    check_not_input(outputs, inputs, options)
    check_not_directory(outputs, options)
    check_overwrite(outputs if existing is None else existing, overwrite, options)


def check_not_directory(outputs: Iterable[tuple[str, Path]], options: Mapping[str, str] | None = None) -> None:
    """Refuse an output file that names an existing directory, --overwrite or not (a file never replaces one)."""
    for label, out in outputs:
        if Path(out).is_dir():
            raise OutputError(f"the {label} {out} is a directory",
                              f"pass {_named_by(label, options)} with a file name, not a directory")


# --------------------------------------------------------------------------- .npy / .npz files
def not_a_regular_file(path: Path, mode: int, what: str = "file") -> BertfeatError:
    """An input that exists but is no regular file: a directory, a named pipe (FIFO), a socket or a device."""
    if stat.S_ISDIR(mode):
        return BertfeatError(f"{path} is a directory, not a {what}", f"pass the path of a {what}, not of a directory")
    return BertfeatError(f"{path} is {special_file_kind(mode)}, not a {what}",
                         "write the data to a regular file first and pass that")


def check_array_file(path: str | os.PathLike, what: str = "file") -> None:
    """An empty, truncated or non-NumPy .npy/.npz is named as such before numpy reads it; so is a path that
    exists but is no regular file (a directory, a FIFO: refused before anything opens it, as opening a FIFO
    with no writer blocks)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return  # the reader says "not found" with its own fix
    except OSError as e:
        raise os_error(e, p) from None
    if stat.S_ISDIR(st.st_mode) and what == "feature file" and next(p.glob("part-*.parquet"), None) is not None:
        return  # extract --engine dask's output: its part files are read in turn (features.open_features)
    if not stat.S_ISREG(st.st_mode):
        raise not_a_regular_file(p, st.st_mode, what)
    try:
        size = st.st_size
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise os_error(e) from None
    if size == 0:
        raise BertfeatError(f"{p}: the {what} is empty (0 bytes)", "pass a complete file (rerun the command that wrote it)")
    if p.suffix.lower() == ".npz":
        if not head.startswith(b"PK"):
            raise BertfeatError(f"{p}: not a .npz archive", "pass a .npz written by bertfeat")
        try:
            with zipfile.ZipFile(p) as z:
                bad = z.testzip()
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
            raise BertfeatError(f"{p}: the .npz archive is truncated or corrupt ({one_line(e)})",
                                "pass a complete file (rerun the command that wrote it)") from None
        if bad is not None:
            raise BertfeatError(f"{p}: the .npz archive is corrupt (member {bad} fails its checksum)",
                                "pass a complete file (rerun the command that wrote it)")
    elif p.suffix.lower() == ".npy":
        if not head.startswith(b"\x93NUMPY"):
            raise BertfeatError(f"{p}: not a .npy array file", "pass a .npy written by bertfeat")
    elif p.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(p).names
        except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError for a foreign or cut file
            raise BertfeatError(f"{p}: not a readable Parquet file ({one_line(e)})",
                                "pass a complete file (rerun the command that wrote it)") from None
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise BertfeatError(f"{p}: the column name {dup[0]!r} appears {names.count(dup[0])} times",
                                "rename the columns so that every name is unique")


# --------------------------------------------------------------------------- what each command writes
def feature_file_outputs(path: str | os.PathLike, fmt: str) -> list[tuple[str, Path]]:
    """A feature file and its side files: the ids file of a .npy, the provenance of a .npy/.csv."""
    from ..features import ids_sidecar_path, provenance_path

    path = Path(path)
    out = [("output", path)]
    if fmt == "npy":
        out.append(("ids file", ids_sidecar_path(path)))
    if fmt in ("npy", "csv"):
        out.append(("provenance file", provenance_path(path)))
    return out


def report_outputs(prefix: str | os.PathLike) -> list[tuple[str, Path]]:
    from ..pca.report import report_paths

    return [("report file", p) for p in report_paths(prefix).values()]


def feature_file_inputs(path: str | os.PathLike) -> list[Path]:
    """A feature file read as input, with its side files (they are inputs too)."""
    from ..features import ids_sidecar_path, provenance_path

    path = Path(path)
    return [path, ids_sidecar_path(path), provenance_path(path)] if path.suffix.lower() in (".npy", ".csv") else [path]


def partial_run_error(partial_dir: Path, stdin: bool = False) -> OutputError:
    if stdin:  # a run reading standard input cannot be resumed (plan.make_plan refuses resume for it)
        return OutputError(f"a partial run exists in {partial_dir} (left by a run that was killed)",
                           f"rerun with {opt('overwrite', True)} to start over (a run reading standard input cannot be "
                           "resumed), or remove that directory")
    return OutputError(f"a resumable partial run exists in {partial_dir}",
                       f"rerun the same command with {opt('resume', True)} to continue it, or with {opt('overwrite', True)} to start over")
