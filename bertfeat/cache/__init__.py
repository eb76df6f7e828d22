"""Vectors already known, so a re-run does only new work: ``store.py`` is the SQLite vector cache (keys, the
fingerprint of every setting that changes a vector, checksummed entries, ``cache info`` / ``clear``), ``reuse.py``
finds per chunk which rows are known, which wait for an identical row being encoded, and which to encode."""
