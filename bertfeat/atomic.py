"""Atomic file writes: the one implementation every bertfeat writer uses (standard library only).

A file is written to a temporary name ``.<name>.tmp-<pid>`` in the destination's own directory
(so the final rename never crosses a file system), flushed and fsynced, moved over the
destination with ``os.replace`` and the directory fsynced, so the destination holds either the
old complete file or the new complete file, never a part. On any exception (``KeyboardInterrupt``
too) the temporary file is deleted and the destination is left as it was.

Three ways in:

* ``AtomicFile(path)``: the temporary path ``tmp`` for a writer that lives across calls (open it
  now, ``commit()`` when done, ``discard()`` on failure); also a context manager.
* ``atomic_output(path)``: a context manager yielding the temporary path, for a streaming writer
  that opens the file by name (pyarrow, matplotlib, ``np.savez``, ``Path.write_text``).
* ``write_atomic(path, data)``: a whole small ``str`` / ``bytes`` payload in one call.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["AtomicFile", "atomic_output", "write_atomic", "temp_path_for", "fsync_file", "fsync_dir"]


def temp_path_for(path: str | os.PathLike) -> Path:
    """The temporary name ``.<name>.tmp-<pid>`` beside ``path``."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


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

    def commit(self) -> Path:
        """Move the finished temporary file into place; returns ``path``."""
        fsync_file(self.tmp)
        os.replace(self.tmp, self.path)
        fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        """Delete the temporary file (if any); ``path`` is left untouched."""
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.discard()


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
