"""One writer per output: a run holds an exclusive lock on its output for its whole life.

Two runs writing the same output (a second ``extract -o out.parquet --overwrite`` started while the first runs)
would delete each other's partial directory and could finish with a file that mixes two inputs. So every command
that writes an output takes ``output_lock(path)`` first: an ``fcntl.flock`` on a small file beside it,
``.NAME.lock``, holding the owner's process id, host and start time. A second run is refused at once with one
line naming the owner. The lock belongs to an open file, so the kernel releases it when its process ends, however it
ends (Ctrl-C, kill -9, a crash): a stale lock file is taken over by the next run. The lock file is removed on
release; a run that locked a file since unlinked by its releasing owner checks the inode and locks again.

flock is advisory and per machine: runs on one machine (and one Dask client per output) are serialized; on a
network file system shared by several machines, locks work where the file system supports flock (NFSv4 does).
Where ``fcntl`` does not exist (Windows), outputs are not locked.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from pathlib import Path

from ..errors import BertfeatError, OutputError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class OutputLockedError(BertfeatError):
    """Another run is writing the same output."""


def lock_path(output: str | os.PathLike) -> Path:
    """The lock file of an output: ``.NAME.lock`` beside it (hidden: never read as input); a name too long for the
    file system with those 6 more characters (a 250-character output, or its rejects file) is shortened as every name
    bertfeat derives (``atomic.fitted_name``: its first bytes and a digest of the whole name, apart from other
    outputs')."""
    from ..atomic import fitted_name

    p = Path(output)
    return p.with_name(f".{fitted_name(p.name, len('..lock'))}.lock")


def owner_of(path: Path) -> str:
    """The run that holds a lock file, in words (``process 123 on host x, started 12:00:01``)."""
    try:
        d = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return "another bertfeat run"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["started"])) if "started" in d else "?"
    return f"another bertfeat run (process {d.get('pid', '?')} on host {d.get('host', '?')}, started {when})"


def _check_ours(path: Path, output: Path) -> None:
    """A file already at the lock's name must be a bertfeat lock (empty, or a run's pid / host / started): another file
    there is the user's, which the lock would overwrite and then delete."""
    try:
        if path.is_symlink() or not path.is_file():
            ours = not path.exists() and not path.is_symlink()
        else:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
            ours = not text or (isinstance(d := json.loads(text), dict) and set(d) <= {"pid", "host", "started"})
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise BertfeatError(f"{path} exists and is not a bertfeat lock file (bertfeat keeps its run lock for "
                            f"{output} under that name, and removes it after the run)",
                            "rename or move that file, or write the output under another name")


def _open(path: Path, output: Path) -> int:
    """The lock file, opened or made; a folder that refuses to make it is named with the output the user gave, not
    the hidden lock file (the user never named it: ``/out/.x.parquet.lock: operation not permitted`` said nothing of
    the folder, and ``/proc/.x.png.lock`` nothing of the output). A lock file that is there and cannot be opened
    (another user's, left by a run killed before it removed it) is named itself: the folder may take new files."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise  # its folder is missing: made, then opened again (_acquire)
        raise _unwritable_folder(OSError(errno.ENOENT, "no such file"), path.parent, output) from None  # /proc
    except OSError as e:
        if os.path.lexists(path):
            from ..errors import os_error

            raise os_error(OSError(e.errno, e.strerror, str(path))) from None
        raise _unwritable_folder(e, path.parent, output) from None


def _unwritable_folder(e: OSError, folder: Path, output: Path) -> BertfeatError:
    """``OUTPUT: its folder DIR takes no new file: why - fix``: the user's path first, then the folder and the cause."""
    from ..errors import os_error

    if e.errno == errno.ENOENT:  # "does its directory exist?" is no help: it does
        return OutputError(f"{output}: its folder {folder} takes no new file (making one there said: no such file or "
                           "directory; a virtual file system such as /proc or /sys)",
                           "write the output to a folder on a disk")
    return os_error(OSError(e.errno, e.strerror), f"{output}: its folder {folder} takes no new file")


def _acquire(path: Path, output: Path, made: list, shown: Path, is_prefix: bool = False) -> int:
    """Open and flock the lock file of ``output`` (non-blocking); -> the descriptor. Raises OutputLockedError when
    held. ``made``: the folders made for the locks (``_make_folders``), added to; ``shown``: the output an error about
    the folder names (the first one the caller gave there: pca fit's -o, not the report prefix it locks too)."""
    _check_ours(path, output)
    while True:
        try:
            fd = _open(path, shown)
        except FileNotFoundError:  # its folder, made by a run that failed, removed as that run ended: made again
            made += _made_for(path.parent, shown)
            fd = _open(path, shown)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            what = f"{shown}: {output.name}.*, written with it," if is_prefix else output  # (a prefix is no file)
            raise OutputLockedError(f"{what} is being written by {owner_of(path)}",
                                    "wait for that run to finish (or stop it), then rerun; two runs never write one output")
        except OSError:  # a file system without flock: run unlocked rather than not at all
            return fd
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the owner removed this file as we locked it: lock the current one


@contextlib.contextmanager
def output_lock(*outputs: str | os.PathLike, create: bool = True, prefixes: tuple = ()):
    """Hold the lock of each output (in a fixed order) for the block; refuse at once if another run holds one.

    ``create``: make an output's missing folder first (the run writing it would make it anyway, and a lock must
    exist before anything else is written there). ``create=False`` (the plan's early probe, which must write nothing):
    an output whose folder does not exist yet has no run writing it, so there is nothing to check. ``prefixes``: report
    prefixes locked too (``x`` of ``x.report.json``), no file of their own: a refusal names them through the output
    given beside them."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    held: list[tuple[Path, int]] = []
    made: list[tuple[Path, tuple[int, int]]] = []  # the folders made here for the locks, parents first
    try:
        given = [Path(o).absolute() for o in outputs]
        prefix = {Path(p).absolute() for p in prefixes} - set(given)
        for out in sorted(set(given) | prefix):
            path = lock_path(out)
            shown = next((g for g in given if g.parent == out.parent), out)
            if not path.parent.is_dir():
                if not create:
                    continue  # no folder yet: no run is writing there (a run makes it under its lock, below)
                made += _made_for(path.parent, shown)
            fd = _acquire(path, out, made, shown, out in prefix and shown != out)
            held.append((path, fd))
            info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, info.encode(), 0)
            except OSError as e:  # a full disk: named by the file, not "no space left" alone
                from ..errors import os_error

                raise os_error(e, path, "free disk space there, or write elsewhere, then rerun") from None
        yield
    finally:
        for path, fd in reversed(held):
            with contextlib.suppress(OSError):
                path.unlink()  # while still locked: a waiting run then locks a fresh file (see _acquire)
            os.close(fd)
        # a run that wrote nothing there (refused, or failed) leaves no folder it made: pca fit -o new/p.npz --label
        # nope left new/ behind; a folder that holds anything (the outputs) stays, and so does one put in its place
        for folder, identity in reversed(made):
            with contextlib.suppress(OSError):
                st = os.lstat(folder)
                if (st.st_dev, st.st_ino) == identity:
                    folder.rmdir()


def _made_for(folder: Path, shown: Path) -> list[tuple[Path, tuple[int, int]]]:
    """``_make_folders(folder)`` for the output ``shown``: a folder that cannot be made where its parent is
    (``/proc/new/``) is named with that output (it said ``/proc/new: no such file or directory``)."""
    try:
        return _make_folders(folder)
    except FileNotFoundError as e:
        where = Path(os.fsdecode(e.filename)).parent if e.filename else folder.parent
        raise _unwritable_folder(e, where, shown) from None


def _make_folders(folder: Path) -> list[tuple[Path, tuple[int, int]]]:
    """Make ``folder`` and its missing parents (as ``mkdir(parents=True, exist_ok=True)``); -> each folder this call's
    own mkdir made, parents first, with its device and inode. Found by the mkdir, not by name beforehand: a path
    through a folder not there yet (``new/../keep``) names an existing folder (keep/) that no lexical walk sees."""
    try:
        os.mkdir(folder)
    except FileNotFoundError:
        if folder.parent == folder or folder.parent.is_dir():
            raise  # its parent is there and takes no new folder (/proc): no deeper retry (it recursed without end)
        made = _make_folders(folder.parent)
        return made + _make_folders(folder)
    except OSError:  # there already (as pathlib's exist_ok, whatever the error says), else refused as it says
        if not folder.is_dir():
            raise
        return []
    st = os.lstat(folder)
    return [(folder, (st.st_dev, st.st_ino))]
