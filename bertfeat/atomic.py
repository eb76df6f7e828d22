"""Atomic file writes: the one implementation every bertfeat writer uses (standard library only).

A file is written to a temporary name ``.<name>.tmp-<pid>`` in the destination's own directory
(so the final rename never crosses a file system), flushed and fsynced, moved over the
destination with ``os.replace`` and the directory fsynced, so the destination holds either the
old complete file or the new complete file, never a part (with the old one's permission bits, as writing into it
would keep them). On any exception (``KeyboardInterrupt``
too) the temporary file is deleted and the destination is left as it was.

Three ways in:

* ``AtomicFile(path)``: the temporary path ``tmp`` for a writer that lives across calls (open it
  now, ``commit()`` when done, ``discard()`` on failure); also a context manager.
* ``atomic_output(path)``: a context manager yielding the temporary path, for a streaming writer
  that opens the file by name (pyarrow, matplotlib, ``np.savez``, ``Path.write_text``).
* ``write_atomic(path, data)``: a whole small ``str`` / ``bytes`` payload in one call.

Files that belong together (a feature file and its side files; extract's features, PCA model, report and rejects;
a PCA model and its report) are written inside ``together()``: each commit inside the block only finishes its
temporary file, and they are all moved into place at the end of the block, one ``os.replace`` after another with
Ctrl-C / SIGTERM held back until the last (so an interrupted run leaves all the old files or all the new ones, never
a mix), or all discarded if the block fails. ``removal(path)`` removes an earlier run's file among those moves (put
back, as the files replaced are, when a later one fails).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["AtomicFile", "atomic_output", "write_atomic", "together", "deferred", "removal", "pending", "temp_path_for",
           "remove_stale_temps", "replace_directory", "fsync_file", "fsync_dir", "fitted_name", "NAME_MAX",
           "ASIDE_ROOM"]

_local = threading.local()  # .group: the CommitGroup of the innermost together() block of this thread


#: the longest file name most file systems take, in bytes (ext4, XFS, btrfs, tmpfs, APFS)
NAME_MAX = 255
#: what an aside name adds to its file's: ``.`` before, ``.removing-`` and a pid of up to 7 digits after (pid_max is at
#: most 4194304 on Linux); ``fitted_name`` fits to NAME_MAX, so a file system of a lower limit needs this room
#: after every name (run.outputs.check_name_lengths)
ASIDE_ROOM = len("..removing-") + 7


def fitted_name(name: str, room: int) -> str:
    """``name`` when ``room`` more bytes still fit ``NAME_MAX``; else its first bytes, ``~`` and 16 hex digits of the
    whole name's sha256, ``room`` bytes short of the limit. The same name gives the same result (a ``--resume`` and a
    later run's cleanup find it), two names two results: a user's output name that fits is never refused because of
    a name bertfeat derives from it for its own use (a temporary, a lock, the partial run's folder)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) + room <= NAME_MAX:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return raw[:max(NAME_MAX - room - 17, 0)].decode("utf-8", "ignore") + "~" + digest


def _aside(path: Path, kind: str, pid: int | None = None) -> Path:
    """``.<name>.<kind>-<pid>`` beside ``path`` (kind: tmp, old, removing; its name shortened by ``fitted_name``)."""
    return path.with_name(f".{fitted_name(path.name, ASIDE_ROOM)}.{kind}-{os.getpid() if pid is None else pid}")


def _keep_mode(new: Path, old: Path) -> None:
    """Give ``new`` the permission bits of ``old``, the file or directory it is about to replace (not through a
    symbolic link: a link is replaced by a file of its own), as a plain ``open(old, "w")`` would keep them: a
    ``chmod 600`` output stays private after ``--overwrite``. Nothing to keep, or a file system without modes: as is."""
    with contextlib.suppress(OSError):
        st = os.lstat(old)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(new, stat.S_IMODE(st.st_mode) & 0o777)


def temp_path_for(path: str | os.PathLike) -> Path:
    """The temporary name ``.<name>.tmp-<pid>`` beside ``path`` (a name too long for that: ``fitted_name``)."""
    return _aside(Path(path), "tmp")


def remove_stale_temps(path: str | os.PathLike, old_directory_marker: str | None = None) -> None:
    """Delete the temporaries ``.<name>.tmp-<pid>`` (and a group's second names ``.<name>.old-<pid>``) beside ``path``
    whose writer was killed (its process is gone); a live writer's are left alone. Directories are left alone too,
    but for an old output directory ``replace_directory`` set aside (``.<name>.old-<pid>``) that holds the file
    ``old_directory_marker`` (the Dask engine's ``_bertfeat.json``)."""
    path = Path(path)
    base = fitted_name(path.name, ASIDE_ROOM)
    try:
        found = [p for kind in ("tmp", "old", "removing") for p in path.parent.glob(f".{glob.escape(base)}.{kind}-*")]
    except OSError:
        return
    for p in found:
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                if not (p.is_dir() and not p.is_symlink()):
                    p.unlink()
                elif old_directory_marker and p.name.startswith(f".{base}.old-") and (p / old_directory_marker).is_file():
                    shutil.rmtree(p)  # an old output directory replace_directory had set aside (a user's is left)
                elif p.name.startswith(f".{base}.removing-"):
                    shutil.rmtree(p)  # a directory remove_directory set aside, its deletion cut short


def remove_directory(path: str | os.PathLike) -> None:
    """Delete a directory bertfeat made (a partial run's): renamed aside in one step (Ctrl-C held) and then deleted, so
    an interrupt leaves the whole directory or a hidden ``.<name>.removing-<pid>`` (deleted by the next run's
    remove_stale_temps), never a half-deleted one under its own name, which would block every rerun."""
    path = Path(path)
    if not path.is_dir():
        return
    aside = _aside(path, "removing")
    with _signals_held():
        try:
            os.rename(path, aside)
        except OSError:  # not renamable here (a read-only parent): deleted in place, as before
            aside = path
    shutil.rmtree(aside, ignore_errors=True)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE): True if done, False where the system or the
    file system cannot (then nothing changed)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc < 2.28, some musl)
        return False
    AT_FDCWD = -100
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    # Any failure (ENOSYS, EINVAL on a file system without it, EPERM from a sandbox, EXDEV ...) changed nothing: the
    # caller renames in two steps, whose os.replace raises the real error, naming its path, if there is one.
    return renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def replace_directory(new: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Move the directory ``new`` to ``dest``, replacing the directory there so that ``dest`` is at every moment the
    old complete directory or the new one (a kill, even SIGKILL, never leaves a mix or a half-deleted old one under
    ``dest``): one atomic swap where the system has it (Linux renameat2), else the old one renamed aside first (then
    ``dest`` is briefly missing, never partial). The old directory goes to ``.<name>.old-<pid>`` and is deleted last;
    a kill during that leaves it hidden, removed later by remove_stale_temps(dest, marker) when it holds ``marker``."""
    new, dest = Path(new), Path(dest)
    if not (dest.exists() or dest.is_symlink()):
        os.replace(new, dest)
        fsync_dir(dest.parent)
        return
    if not (dest.is_dir() and not dest.is_symlink()):
        _replace_file_by_directory(new, dest)
        return
    _keep_mode(new, dest)
    aside = _free_aside(dest)
    if _exchange(new, dest):
        os.replace(new, aside)  # ``new`` holds the old directory now
    else:
        _move_in_after_setting_aside(new, dest, aside)
    fsync_dir(dest.parent)
    shutil.rmtree(aside, ignore_errors=True)


def _move_in_after_setting_aside(new: Path, dest: Path, aside: Path) -> None:
    """``dest`` renamed to ``aside``, then ``new`` to ``dest``; the old one put back if that second move fails."""
    os.replace(dest, aside)
    try:
        os.replace(new, dest)
    except BaseException:
        os.replace(aside, dest)
        raise


def _free_aside(dest: Path) -> Path:
    """``.<name>.old-<pid>`` beside ``dest``, emptied: anything there is this process's own, from an earlier run in it."""
    aside = _aside(dest, "old")
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
    elif aside.exists() or aside.is_symlink():
        aside.unlink()
    return aside


def _replace_file_by_directory(new: Path, dest: Path) -> None:
    """``dest`` a file or a symbolic link (a local run's output, an --overwrite by the Dask engine): swapped with
    ``new`` in one step where the system can, else set aside before ``new`` takes its name and put back if that
    fails; never deleted before the directory is in its place. (A file's mode is not lent to a directory.)"""
    if _exchange(new, dest):
        new.unlink()  # ``new`` holds the old file now
    else:
        aside = _free_aside(dest)
        _move_in_after_setting_aside(new, dest, aside)
        aside.unlink()
    fsync_dir(dest.parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a closed file's data to disk (fsync through a fresh descriptor)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory's entries (a rename in it) to disk; best effort.

    Some platforms (Windows) and file systems cannot open or fsync a directory; the rename has
    happened by then, so that is not an error.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AtomicFile:
    """One atomic write: write to ``tmp``, then ``commit()`` (or ``discard()``).

    ``commit()`` fsyncs ``tmp``, moves it onto ``path`` with ``os.replace`` and fsyncs the
    directory; the file at ``tmp`` must be closed (or at least flushed) by then. ``discard()``
    deletes ``tmp`` if it exists and may be called any number of times. Used as a context manager
    it commits on success and discards on any exception, a failed commit included.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.tmp = temp_path_for(self.path)
        self._deferred = False  # committed inside together(): the group moves it into place

    def commit(self) -> Path:
        """Move the finished temporary file into place (inside ``together()``: at the end of the block); returns
        ``path``."""
        fsync_file(self.tmp)
        group = getattr(_local, "group", None)
        if group is not None:
            self._deferred = True
            group.moves.append((self.tmp, self.path))
            return self.path
        _keep_mode(self.tmp, self.path)
        os.replace(self.tmp, self.path)
        fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        """Delete the temporary file (if any); ``path`` is left untouched. A file committed inside ``together()`` is
        the group's to move or delete."""
        if self._deferred:
            return
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
        except OSError as e:
            _name(e, self.tmp, self.path)
            raise
        finally:
            self.discard()
        if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:  # a read's error in the block is not the file's
            _name(exc, self.tmp, self.path)


#: the errors of a write that name no file (a full disk, a quota, ulimit -f)
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _name(e: OSError, tmp: Path, path: Path) -> None:
    """A write's or close's OSError names no file (a full disk, ulimit -f), or names the temporary: it gets the name of
    the file it stands for (errors.os_error reads ``.NAME.tmp-PID`` back as NAME, but not a name ``fitted_name``
    shortened), not the command's output."""
    if not e.filename or os.fsdecode(e.filename) == os.fspath(tmp):
        e.filename = os.fspath(path)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync it and ``os.replace`` it into place.

    On an exception the temp file is deleted and ``path`` is left as it was.
    """
    with AtomicFile(path) as f:
        yield f.tmp


def write_atomic(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write a whole ``str`` (text mode, as ``Path.write_text``) or ``bytes`` payload to ``path`` atomically."""
    with AtomicFile(path) as f:
        if isinstance(data, str):
            f.tmp.write_text(data, encoding=encoding)
        else:
            f.tmp.write_bytes(data)
    return f.path


class CommitGroup:
    """The files (and other final moves, e.g. a directory) of one ``together()`` block, made final at its end."""

    def __init__(self) -> None:
        self.moves: list[tuple[Path | None, Path] | Callable[[], None]] = []  # (None, path): ``removal(path)``
        self.done = False  # every move made: a Ctrl-C held back and raised after them finds the files in place

    def finish(self) -> None:
        """Every move, in the order committed, with Ctrl-C / SIGTERM held back until the last is done; then the
        directories fsynced. A move (or step) that fails puts the files moved before it back: each destination's old
        file is kept under a second name (a hard link, ``.NAME.old-PID``: the destination itself is replaced in one
        ``os.replace``, never missing) until the last move is made, so a failure restores the old files, or none."""
        with _signals_held():
            undo: list[tuple[Path, Path | None, bool]] = []  # (destination, its old file's second name, it existed)
            try:
                for m in self.moves:
                    if callable(m):
                        m()
                        continue
                    if m[0] is None:  # a removal: the file renamed to its second name (deleted with the others'),
                        dst = Path(m[1])  # so the undo puts it back; a directory is no file of a run: left alone
                        if os.path.lexists(dst) and (dst.is_symlink() or not dst.is_dir()):
                            aside = _aside(dst, "old")
                            os.replace(dst, aside)
                            undo.append((dst, aside, True))
                        continue
                    src, dst = Path(m[0]), Path(m[1])
                    existed, aside = os.path.lexists(dst), None  # a dangling link is the user's too: put back
                    if existed:
                        aside = _aside(dst, "old")
                        with contextlib.suppress(FileNotFoundError):
                            aside.unlink()
                        try:
                            os.link(dst, aside)
                        except OSError:  # no hard links here: this one file cannot be put back
                            aside = None
                    undo.append((dst, aside, existed))
                    _keep_mode(src, dst)
                    os.replace(src, dst)
            except BaseException:
                for dst, aside, existed in reversed(undo):
                    with contextlib.suppress(OSError):
                        if aside is not None:
                            os.replace(aside, dst)
                            # the failed move's own destination is still the old file, so that rename of a second
                            # name onto its first did nothing (POSIX): the second name is removed here
                            aside.unlink(missing_ok=True)
                        elif not existed:
                            dst.unlink()
                raise
            for _, aside, _ in undo:
                if aside is not None:
                    with contextlib.suppress(OSError):
                        aside.unlink()
            self.done = True
        for d in {Path(m[1]).parent for m in self.moves if not callable(m)}:
            fsync_dir(d)

    def discard(self) -> None:
        for m in self.moves:
            if not callable(m) and m[0] is not None:
                with contextlib.suppress(FileNotFoundError):
                    Path(m[0]).unlink()


@contextlib.contextmanager
def together() -> Iterator[CommitGroup]:
    """Files committed inside the block appear together when it ends (or none, if it fails): see the module
    docstring. A block inside another joins the outer one. ``deferred(step)``: another final step (a directory moved
    into place, a stale file removed) run among the moves, in order."""
    outer = getattr(_local, "group", None)
    if outer is not None:
        yield outer
        return
    group = _local.group = CommitGroup()
    try:
        try:
            yield group
        finally:
            _local.group = None  # whatever happens, later commits of this thread are not this group's
        group.finish()
    except BaseException:
        if not group.done:
            group.discard()
        raise


def pending(path: str | os.PathLike) -> Path:
    """Where ``path``'s new content is now: inside ``together()``, the temporary file committed for it (moved into
    place when the block ends), else ``path`` itself (e.g. to checksum a file its provenance names before it moves)."""
    group = getattr(_local, "group", None)
    for m in reversed(group.moves if group is not None else []):
        if not callable(m) and m[0] is not None and Path(m[1]) == Path(path):
            return Path(m[0])
    return Path(path)


def deferred(step: Callable[[], None]) -> None:
    """Run ``step`` (a final move or removal) with the group's moves inside ``together()``, else now."""
    group = getattr(_local, "group", None)
    if group is None:
        step()
    else:
        group.moves.append(step)


def removal(path: str | os.PathLike) -> None:
    """Remove ``path`` (an earlier run's file this run does not write again) with the moves inside ``together()``, so a
    later move that fails puts it back as it puts back the files it replaced (a ``deferred`` unlink could not: the Dask
    engine's output directory move failing after it lost the old run's PCA model and rejects); else now."""
    group = getattr(_local, "group", None)
    if group is None:
        Path(path).unlink(missing_ok=True)
    else:
        group.moves.append((None, Path(path)))


def uninterrupted():
    """A block that Ctrl-C / SIGTERM does not cut (they act when it ends): for a short write whose library leaves a
    traceback on stderr when stopped halfway (numpy's savez: ZipFile's __del__)."""
    return _signals_held()


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait until the block ends, then act as they would have (main thread only: elsewhere,
    Python delivers signals to the main thread anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, object]] = []
    held = [s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if s is not None
            and signal.getsignal(s) is not None]  # None: a handler not set from Python, which cannot be restored
    before = {s: signal.getsignal(s) for s in held}
    for s in held:
        signal.signal(s, lambda signum, frame: caught.append((signum, frame)))
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        for signum, frame in caught[:1]:
            handler = before[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)
