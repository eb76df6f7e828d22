"""Binary stream adapters: a counter of the bytes read (progress), standard input with its peeked head put back,
and a pyarrow input stream (e.g. decompressing) as a Python raw stream.
"""

from __future__ import annotations

import io


class CountingReader(io.RawIOBase):
    """Wraps a binary file and counts the bytes read (progress for CSV)."""

    def __init__(self, fh):
        self._fh = fh
        self.count = 0

    def readable(self):
        return True

    def readinto(self, b):
        n = self._fh.readinto(b)
        self.count += n or 0
        return n

    def close(self):
        self._fh.close()
        super().close()


class Prefixed(io.RawIOBase):
    """stdin with the bytes already peeked at put back in front."""

    def __init__(self, head: bytes, rest):
        self._head = head
        self._rest = rest

    def readable(self):
        return True

    def readinto(self, b):
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


class NativeRaw(io.RawIOBase):
    """A pyarrow input stream (e.g. decompressing) as a Python raw binary stream."""

    def __init__(self, native):
        self._native = native

    def readable(self):
        return True

    def readinto(self, b):
        data = self._native.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self):
        self._native.close()
        super().close()
