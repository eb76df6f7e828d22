"""The vector cache: encoder outputs stored by content, so a re-run encodes only the texts it has not seen.

A cache is a directory holding one SQLite database, ``vectors.sqlite3`` (standard library, WAL mode):

    fingerprints(id, fingerprint, model, dim, settings, created, last_used)
        one row per encoder setting: ``fingerprint`` is the sha256 (32 hex digits) of everything that changes a
        vector (``cache_fingerprint``), ``settings`` that dict as JSON (what ``bertfeat cache info`` shows)
    vectors(id, fp, key, vec, n_tokens, flags, n_chunks, crc)     a rowid table, with a unique index on (fp, key)
        ``key``: 16 bytes of BLAKE2b over the text and its pair (``text_key``); ``vec``: float32 bytes (dim x 4);
        the row's token counts; ``crc``: 8 bytes of BLAKE2b over the fingerprint, key, vector and counts, checked
        on every read (a mismatch is a miss: the row is encoded again and the entry rewritten)

The file is made with 16 KiB pages. Format 2: format 1 kept each whole row in the key's B-tree (WITHOUT ROWID,
4 KiB pages), so a 1.5-3 KB row took an overflow page of its own and the tree's interior pages held 7 keys; the rowid
table and the small (fp, key) index measured 2.8x less disk at 384 dimensions (1.55 against 4.37 GiB per million
rows), 3-4x faster stores and 2.7x faster lookups (benchmarks/CACHE_RESULTS.md).

Only bertfeat's own file is written. A new file is made whole (built under a hidden name beside, then hard-linked
into place: no process sees it half made) and marked: ``PRAGMA application_id`` ``APP_ID``, ``user_version`` the
format, and the meta table's ``format`` row. Any other file at the store's path (a user's database, an empty file, a
directory) is refused after its header and tables were read without a byte changed (``classify``); a cache of an
earlier bertfeat (the exact current layout, no marker) is adopted by writing the marker, an older layout (format 1,
format 2 before AUTOINCREMENT ids) is refused as an older format.

A cache this process may not write (``unwritable``: a read-only mount, permissions, an immutable file; or SQLite
refusing the first write) is opened to read only (``VectorStore.read_only`` says why): lookups work, ``register``
adds nothing (None for a fingerprint it does not hold), ``put`` stores nothing, ``clear`` is refused; the run keeps
its own vectors (reuse.Reuser) and says so once (``read_only_note``).

Why SQLite (measured in benchmarks/CACHE_RESULTS.md): a B-tree on (fp, key) keeps a lookup in bounded memory at
any size (the page cache is capped: ``CACHE_PAGES``), WAL lets several runs and the Dask engine's worker processes
on one machine read while one writes, a transaction is all or nothing (a run killed mid-write leaves the last
committed state: never half a vector), and it ships with Python. Its locking needs one machine's shared memory,
so a cache on a network file system (NFS, SMB, ...) is refused by name (``check_cache_dir``), and the Dask engine
refuses a cache when its workers run on other hosts.

The store holds no state of a run: ``reuse.py`` decides what to look up and what to encode. The same store is also
a run's own temporary store of encoded rows, without a cache: the local engine's spill file (``reuse.RunStore``) and
the Dask engine's ``OUTPUT.partial/.dedup/`` (``is_run_store``); its errors name it so, with the fixes the local
engine gives for its partial directory (a full or too-small file system: free space and resume, or another output).
"""

from __future__ import annotations

import errno
import functools
import glob
import hashlib
import json
import math
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import (FAT32_MAX_FILE, BertfeatError, ResumableError, file_size_limit, file_too_large, one_line,
                      opt)
from ..checks import link_to_nowhere, local_path, refuse_blank_edges

DB_NAME = "vectors.sqlite3"
FORMAT = "2"  # the schema's version, in the meta table
LOOKUP_BATCH = 500  # keys per SELECT ... IN (...)
CACHE_PAGES = -65536  # SQLite's page cache per connection: 64 MiB (negative: KiB)
PAGE_SIZE = 16384  # bytes per page of a new cache file
NEW_STORE_BYTES = 8 * PAGE_SIZE  # a new store's file: its schema's pages, before any vector
BUSY_TIMEOUT_S = 120.0  # a writer waits this long for another's transaction (they last one chunk)
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "afs",
              "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.cephfs", "9p")
ENV = "BERTFEAT_CACHE"
RUN_STORE_DIR = ".dedup"  # the Dask engine's run store without a cache: OUTPUT.partial/.dedup/ (run/dask.py)
RUN_STORE = "the run's temporary store of encoded rows"  # what a run store's errors call it
APP_ID = 0x62667663  # PRAGMA application_id ("bfvc") of every store file bertfeat makes: the mark that it is bertfeat's
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fingerprints(
    id INTEGER PRIMARY KEY AUTOINCREMENT, fingerprint TEXT UNIQUE NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL,
    settings TEXT NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(
    id INTEGER PRIMARY KEY, fp INTEGER NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL, n_tokens INTEGER NOT NULL,
    flags INTEGER NOT NULL, n_chunks INTEGER NOT NULL, crc INTEGER NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors(fp, key);
"""


#: a failure of the cache by its cause (VectorStore._cause) -> (what happened, None: SQLite's or the OS's words; the
#: fix). Mid-run, the failure policy adds how --resume continues (run.failures, CacheError.kept_for_resume).
_ELSEWHERE = f"run with {opt('cache', False)} or another {opt('cache')} directory"
CACHE_FAILURES = {
    "full": (": no space left on the device", f"free disk space there, or {_ELSEWHERE}"),
    "quota": (": disk quota exceeded", f"free space under your quota, or {_ELSEWHERE}"),
    "too_large": (": file too large for the file system", f"{_ELSEWHERE} on another file system"),
    "io": (None, f"its file system may be full, over quota or too small for the file, or the disk failed: free disk "
                 f"space there, or {_ELSEWHERE}"),
    "readonly": (None, f"give {opt('cache')} a directory you can write, or run with {opt('cache', False)}"),
    "open": (None, "check the cache directory is writable and its disk has room, or use another one"),
}
#: an OSError's cause by its errno (any other: "io")
_ERRNO_CAUSES = {errno.ENOSPC: "full", errno.EDQUOT: "quota", errno.EFBIG: "too_large", errno.EROFS: "readonly",
                 errno.EACCES: "readonly", errno.EPERM: "readonly"}

#: the layouts of earlier bertfeat versions, by the format they are reported as (none carried the marker); the
#: current one (_SCHEMA without the marker) is adopted, these are refused as older formats
_OLD_SCHEMAS = {
    "1": """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fingerprints(
    id INTEGER PRIMARY KEY, fingerprint TEXT UNIQUE NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL,
    settings TEXT NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(
    fp INTEGER NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL, n_tokens INTEGER NOT NULL, flags INTEGER NOT NULL,
    n_chunks INTEGER NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY(fp, key)) WITHOUT ROWID;
""",
    "2 of a development version (fingerprint ids reused after a clear)": _SCHEMA.replace(" AUTOINCREMENT", ""),
}


class CacheError(ResumableError):
    """The vector cache cannot be opened, read or written (run.failures: the run's finished chunks are kept for a
    resume, which its fix then names)."""

    def named_by_environment(self) -> "CacheError":
        """This error, in place, of a cache the BERTFEAT_CACHE environment variable named (the run was given none):
        it says so, for a user who passed no cache option. Returns self, to raise again."""
        self._what = f"{self._what} ({ENV} names this cache)"
        if self._fix and opt("cache")[:-1] in self._fix:  # a fix naming --cache, which the user never gave: and the
            self._fix = f"{self._fix}; or set {ENV} to another directory, or unset it"  # variable they did set
        self.args = (self.message,)
        return self


class RunStoreError(CacheError):
    """The run's own store of encoded rows failed (no cache involved): its fix already says how to resume."""

    def kept_for_resume(self, how: str) -> "CacheError":
        return self


class ForeignStore(CacheError):
    """The store's path holds something bertfeat did not make (it was left as it was)."""

    unsure = ""  # the fix's tail when the file may be a bertfeat cache damaged past its header


# --------------------------------------------------------------------------- keys and fingerprints
def text_key(text: str, pair: str | None = None) -> bytes:
    """A row's content key: 16 bytes of BLAKE2b over its text and pair (lengths first: no two rows collide by
    moving characters between text and pair; a row without a pair differs from one with an empty pair)."""
    a = text.encode("utf-8", "surrogatepass")
    h = hashlib.blake2b(len(a).to_bytes(8, "little") + a, digest_size=16, person=b"bertfeat-text")
    if pair is not None:
        b = pair.encode("utf-8", "surrogatepass")
        h.update(b"\x01" + len(b).to_bytes(8, "little") + b)
    return h.digest()


def encoder_files_digest(encoder) -> dict[str, str]:
    """model_files_digest of the encoder's model folder, refused when its files changed since the encoder read them
    (Encoder.files_sha256: the digests must be of the files that make its vectors; taken once, so the folder is
    checked again here: a run or cache key made after an edit is refused, as when the digest was taken each time)."""
    digest = encoder.files_sha256()
    encoder.check_files_unchanged()
    return digest


def cache_fingerprint(encoder, spec) -> tuple[str, dict]:
    """(fingerprint, settings): everything that changes a vector, and its sha256 (32 hex digits).

    The settings are the features' fingerprint (weights' sha256, precision, every FeatureSpec field:
    pooling, layers and their aggregation, normalize, max length, long-text policy and stride, Dense modules,
    prompt), the sha256 of the model folder's other files (tokenizer, config, sentence-transformers modules), the
    ``tokenizers`` library's version (another may split a text otherwise: tokenize.library_version), and
    the GEMM path's identity (library, kernel, bf16 / int8 scheme, CPU model, NumPy's BLAS kernel): fp32 on OpenBLAS and on oneDNN
    round differently, so their vectors never mix. Not the model's id or path: a model folder copied elsewhere (same
    weights and files) shares its vectors; the id is kept beside the fingerprint for ``cache info``. Every row is also
    served by the fingerprints that differ only in the prompt's name, and a row within max length by those that differ
    in the long-text policy, stride or max length too (``spec_siblings``)."""
    from ..model.tokenize import library_version

    settings = {"cache_format": FORMAT, **spec_settings(encoder, spec), "model_files": encoder_files_digest(encoder),
                "tokenizers": library_version(), "gemm": gemm_identity(encoder)}
    frame = _window_frame(encoder, spec)
    if frame is not None:
        settings["window_frame"] = frame
    return settings_id(settings_text(settings)), settings


def _window_frame(encoder, spec) -> list | None:
    """A chunked run's window frame when it is not [CLS] ... [SEP] (tokenize.BertTokenizer.window_frame): until
    2026-12-02 every window was framed so, so the vectors of such a model's long rows cached then were not its own;
    the key keeps them apart. None for [CLS] ... [SEP] (every usual model: its keys and entries stay as they were)."""
    if not spec.long_text.startswith("chunk"):
        return None
    tok = encoder.tokenizer
    before, after, _, _ = tok.window_frame()
    if before.tolist() == [tok.cls_id] and after.tolist() == [tok.sep_id]:
        return None
    return [before.tolist(), after.tolist()]


def spec_settings(encoder, spec) -> dict:
    """The features' part of a cache key: Encoder.fingerprint less the model's id (a copied model folder shares)."""
    return {k: v for k, v in encoder.fingerprint(spec).items() if k != "model_id"}


def settings_text(settings: dict) -> str:
    """A fingerprint's settings as the fingerprints table stores them (and settings_id hashes them)."""
    return json.dumps(settings, sort_keys=True, default=str)


def settings_id(text: str) -> str:
    """The fingerprint of settings stored as ``text`` (settings_text)."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


#: the settings that change only the vectors of rows longer than max length: a row within it is tokenized alike and
#: runs as one window under each (Encoder.prepare), so its vector is the same bits (within_max_length)
LONG_TEXT_SETTINGS = ("long_text", "stride")
#: the settings that change no vector: the name of the model's prompt the run's prompt came from (its text is the
#: "prompt" setting), so --prompt-name query and --prompt "query: " of the same prompt give the same bits
NAME_SETTINGS = ("prompt_name",)


def within_max_length(entry: tuple, max_length: int) -> bool:
    """Whether a cached entry (vector, n_tokens, truncated, n_chunks) of another long-text policy, stride or max length
    serves a run of max length ``max_length``: a row within the max length it was encoded at (not truncated, one
    window) and within this run's (``n_tokens``, the prompt and special tokens counted, at most ``max_length``), whose
    vector holds no zero (chunk-mean's combining, when its chunk had a long row, turned a -0.0 into 0.0 until
    combine_windows summed from -0.0: a vector cached before may hold that 0.0)."""
    vec, n_tokens, truncated, n_chunks = entry
    return not truncated and n_chunks == 1 and n_tokens <= max_length and bool(vec.all())


def _is_max_length(v) -> bool:
    """A stored max length a run could have (a forged or damaged settings row may hold anything)."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 2


def register_spec(store, encoder, spec, cache_id: tuple[str, dict] | None = None) -> int:
    """The store's id of ``spec``'s vectors (its fingerprint registered: cache_fingerprint, or ``cache_id``)."""
    fp, settings = cache_id or cache_fingerprint(encoder, spec)
    return store.register(fp, encoder.model_id, encoder.output_dim(spec), settings)


def spec_siblings(store, encoder, spec, cache_id: tuple[str, dict] | None = None) -> list[tuple[int, int | None]]:
    """The cache's fingerprints whose vectors serve ``spec``'s run (VectorStore.siblings): another name of its prompt
    (every row), another long-text policy, stride or max length (the rows within both max lengths)."""
    fp, settings = cache_id or cache_fingerprint(encoder, spec)
    return store.siblings(fp, settings, encoder.output_dim(spec),
                          lambda max_length: settings_at_length(encoder, spec, settings, max_length))


def settings_at_length(encoder, spec, settings: dict, max_length: int) -> dict | None:
    """``settings`` (cache_fingerprint's of ``spec``) as a run at ``max_length`` has them, or None when a row within
    both max lengths is not the same bits at both. It is when the prompt is pooled, or its tokens left out of the
    pooling are as many at both (Encoder.prompt_length: the prompt alone, cut at max length): a row within a max
    length is tokenized whole and its positions are its own, so nothing else of a run depends on max length; the keys
    that depend on it (the prompt's length counted otherwise before 0.3) are made again, as that run made them."""
    from dataclasses import replace

    if spec.prompt and not spec.include_prompt and (encoder.prompt_length(spec.prompt, max_length)
                                                    != encoder.prompt_length(spec.prompt, spec.max_length)):
        return None
    mine = spec_settings(encoder, spec)
    shared = {k: v for k, v in settings.items() if k not in mine}
    return {**shared, **spec_settings(encoder, replace(spec, max_length=max_length))}


def gemm_identity(encoder) -> dict:
    """What of the encoder's numeric path changes a vector's rounding: library, kernel, bf16 / int8 mode and scheme,
    CPU model, NumPy's BLAS kernel (the attention products), the element-wise kernels (numba and its version, or
    NumPy), oneDNN's post-ops when BERTFEAT_FUSE=0 turns them off, and the attention's revision where it changed
    (attention_revision) (the cache key, the resume manifest, the provenance, TextFeatures' memo and the Dask
    workers' check all take it)."""
    from ..ops import gemm as gemm_ops, kernels
    from ..ops.threads import blas_identity

    gemm = {**encoder.gemm_path.to_dict(), "blas": blas_identity(), "kernels": kernels.identity(),
            "post_ops": "off" if gemm_ops.post_ops_off() else None, "attention": attention_revision(encoder)}
    return {k: gemm.get(k) for k in ("linear_layers", "library", "kernel", "bf16", "int8", "keep", "scheme", "cpu", "blas",
                                     "kernels", "post_ops", "attention") if gemm.get(k) is not None}


def attention_revision(encoder) -> str | None:
    """The attention's revision: "per sequence" on the paths whose attention rounds otherwise than when their vectors
    were first cached, else None (no key: every other path's cache key, resume manifest and provenance stay as they
    were).

    In 0.3.0.dev0 (2026-11-29) ModernBERT's attention (modernbert.attend_blocked, any kernels) and the NumPy softmax
    twin (kernels "numpy": bert._masked_softmax_np, in the BERT-like families' and MPNet's attention) came to run
    each sequence over its own tokens, so that a text's features are the same bit for bit in any batch. Their
    vectors cached before differ in the last bits (up to ~1e-3 at bf16 / int8); served beside new ones they would
    make a run's features depend on what the cache held. A later change of a path's rounding gives it another value."""
    from ..model.config import MODERNBERT_TYPES
    from ..ops import kernels

    return "per sequence" if encoder.config.model_type in MODERNBERT_TYPES or kernels.backend() == "numpy" else None


# --------------------------------------------------------------------------- where a cache may live
def resolve_cache(cache) -> Path | None:
    """``cache=`` of bertfeat.extract: a directory, None (then the BERTFEAT_CACHE environment variable, if set and
    not empty) or False / "" (no cache, whatever the environment says) -> the directory or None."""
    if cache is False or (isinstance(cache, str) and not cache.strip()):
        return None
    if cache is None or cache is True:
        env = os.environ.get(ENV, "").strip()
        if cache is True and not env:
            raise BertfeatError(f"{opt('cache', True)} needs a directory", f"give {opt('cache', 'DIR')}, or set {ENV}=DIR")
        return check_cache_dir(local_path(env, f"cache ({ENV})", writes=True)) if env else None
    if not isinstance(cache, (str, os.PathLike)):
        raise BertfeatError(f"{opt('cache', cache)} is not a directory name", f"give {opt('cache', 'DIR')}, or False for no cache")
    path = local_path(cache, "cache", "cache", writes=True)
    if not os.path.lexists(path):  # a directory it would make; one that exists is the user's, used as named
        refuse_blank_edges(os.fspath(cache), "cache", "cache", "cache", kind="directory")
    return check_cache_dir(path)


def from_environment(cache) -> bool:
    """Whether ``cache=`` as given (None, True) leaves the directory to the BERTFEAT_CACHE environment variable, and
    it names one (resolve_cache)."""
    return (cache is None or cache is True) and bool(os.environ.get(ENV, "").strip())


def _bad_link(path: Path) -> CacheError | None:
    """A cache path that is a symbolic link leading nowhere (broken, or a loop), said as such: mkdir failed on it as
    "File exists", and cache info said it "does not exist"."""
    link = link_to_nowhere(path)
    if link is None:
        return None
    loop, words = link
    return CacheError(f"the cache {path} is {words}",
                      f"point the link at a directory, or give {opt('cache')} the directory itself" if loop
                      else f"make the directory it points to, or give {opt('cache')} another directory")


def check_cache_dir(path: Path) -> Path:
    """A cache directory must be a directory (or not exist yet, under a directory that does) on a local file system."""
    link = _bad_link(path)
    if link is not None:
        raise link
    if path.exists() and not path.is_dir():
        raise CacheError(f"the cache {path} is not a directory", f"give {opt('cache')} a directory (it is made if missing)")
    parent = path if path.exists() else next((p for p in path.absolute().parents if p.exists()), Path("/"))
    fs = filesystem_type(parent)
    if fs in NETWORK_FS:
        raise CacheError(f"the cache {path} is on a network file system ({fs}), where SQLite's locking is not safe for "
                         "several processes", f"put {opt('cache')} on a local disk of this machine")
    return path


def filesystem_type(path: Path) -> str | None:
    """The file system type of the mount holding ``path`` (Linux: /proc/self/mounts), else None."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    target, best, kind = str(Path(path).resolve()), -1, None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) > best:
            best, kind = len(mnt), parts[2]
    return kind


def is_run_store(path: Path) -> bool:
    """A store file in ``OUTPUT.partial/.dedup/``: the Dask engine's own store of the run's encoded rows (without a
    cache), not a cache a user named (make_plan refuses a cache inside the run's partial directory)."""
    p = Path(path)
    return p.parent.name == RUN_STORE_DIR and p.parent.parent.name.endswith(".partial")


#: the end of ``foreign_sidecars``' reason (read_only_note gives its own fix then)
_SIDECAR_TAIL = "made by a read-only run of an earlier bertfeat"


def foreign_sidecars(path: Path) -> str | None:
    """Why the store file ``path`` cannot be written although it and its folder can: its -wal / -shm file is there
    and this process may not write it (SQLite then refuses every write with "attempt to write a readonly
    database"), e.g. "vectors.sqlite3-shm belongs to another user (nobody), ..."; else None."""
    theirs = []
    for p in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            uid = p.stat().st_uid
        except OSError:
            continue
        if uid == os.geteuid() or os.access(p, os.W_OK):
            continue
        try:
            import pwd

            owner = pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError):
            owner = f"uid {uid}"
        theirs.append((p.name, owner))
    if not theirs:
        return None
    owners = sorted({o for _, o in theirs})
    names = " and ".join(n for n, _ in theirs)
    return f"{names} {'belongs' if len(theirs) == 1 else 'belong'} to another user ({', '.join(owners)}), {_SIDECAR_TAIL}"


def unwritable(path: Path) -> str | None:
    """Why this process may not write the store file ``path`` or make files beside it (its -wal / -shm): "read-only
    file system" (a read-only mount), "no permission to write PATH" (permissions, an immutable file), another
    user's -wal / -shm file beside it (``foreign_sidecars``), or None."""
    for p in (Path(path), Path(path).parent):
        if os.access(p, os.W_OK):
            continue
        try:
            if os.statvfs(p).f_flag & os.ST_RDONLY:
                return "read-only file system"
        except OSError:
            pass
        return f"no permission to write {p}"
    return foreign_sidecars(Path(path))


def read_only_note(directory, why: str, encoded: int) -> str:
    """What a run says once when its cache could not be written (``why``): its hits were used, nothing stored."""
    fix = ("remove those files while no run uses the cache (bertfeat makes its own again) to store a run's vectors"
           if why.endswith(_SIDECAR_TAIL) else "give --cache a directory you can write to keep them")
    return (f"the cache {directory} is read-only ({why}): the vectors it holds were reused, and the {encoded:,} this "
            f"run encoded were not stored - {fix}")


def _near_file_size_limit(files: list[Path]) -> bool:
    """This process may not make a file much larger than the largest of ``files`` (``ulimit -f``; SQLite reports
    the write's EFBIG as a "disk I/O error"): the largest is within a few pages of RLIMIT_FSIZE."""
    limit = file_size_limit()
    if limit is None:
        return False
    sizes = []
    for f in files:
        try:
            sizes.append(f.stat().st_size)
        except OSError:
            pass
    return max(sizes, default=0) + 4 * PAGE_SIZE >= limit


def _locked(what: str, doing: str, waited: float, fix: str, kind: type = CacheError) -> CacheError:
    """A store another process held locked past the busy timeout (``err.locked``: the callers' retry test)."""
    gerund = {"open": "opening", "read": "reading", "write": "writing"}.get(doing, doing)
    err = kind(f"{what} stayed locked by another process for {waited:.0f} s while {gerund}", fix)
    err.locked = True
    return err


# --------------------------------------------------------------------------- the store
def _crc(fp_text: str, key: bytes, vec: bytes, n_tokens: int, flags: int, n_chunks: int) -> int:
    h = hashlib.blake2b(fp_text.encode() + key + vec + np.array([n_tokens, flags, n_chunks], "<i8").tobytes(),
                        digest_size=8)
    return int.from_bytes(h.digest(), "little", signed=True)


def entry_records(fp_text: str, keys: list[bytes], X: np.ndarray, n_tokens, truncated, n_chunks) -> list[tuple]:
    """Rows as stored: (key, vector bytes, n_tokens, flags, n_chunks, checksum) each (flags bit 0: truncated)."""
    X = np.ascontiguousarray(X, dtype="<f4")
    out = []
    for i, key in enumerate(keys):
        vec, nt, fl, nc = X[i].tobytes(), int(n_tokens[i]), int(bool(truncated[i])), int(n_chunks[i])
        out.append((key, vec, nt, fl, nc, _crc(fp_text, key, vec, nt, fl, nc)))
    return out


# --------------------------------------------------------------------------- whose file it is, read without writing
def _master(db: sqlite3.Connection) -> frozenset:
    return frozenset(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


@functools.lru_cache(maxsize=None)
def _layout(script: str) -> frozenset:
    """The sqlite_master rows a schema script leaves (built in memory: the stored SQL text exactly as a file has it)."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(script)
        return _master(db)
    finally:
        db.close()


def classify(path: Path) -> tuple[str, str]:
    """What the store file ``path`` is, found without changing a byte (its header read as bytes, its tables through
    an ``immutable`` read-only connection, which makes no -wal / -shm / journal file): ("new", "") nothing there,
    ("ours", "") bertfeat's marker, ("adopt", "") an earlier bertfeat's cache (the exact current layout, no marker),
    ("format", F) bertfeat's store of another format F, ("foreign", why) another program's file, ("unknown", why)
    a file that is no readable SQLite database (another program's, or a cache damaged past its header). OSError:
    the file or its directory cannot be read."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "new", ""
    if stat.S_ISLNK(st.st_mode):  # a link to the store is followed, as SQLite does
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "foreign", "it is a broken symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "foreign", "it is a directory"
    if not stat.S_ISREG(st.st_mode):
        return "foreign", "it is not a regular file"
    if st.st_size == 0:
        return "foreign", "it is an empty file (0 bytes)"
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        return "unknown", "it is not a SQLite database"
    app, version = int.from_bytes(head[68:72], "big"), int.from_bytes(head[60:64], "big")
    if app == APP_ID:
        return ("ours", "") if str(version) == FORMAT else ("format", str(version))
    if app != 0:
        return "foreign", f"it is another program's SQLite database (application_id {app:#010x})"
    return _unmarked(Path(path))


def side_file_problem(path: Path) -> tuple[Path, str] | None:
    """A -wal / -shm / -journal file beside the store that SQLite cannot use as its own: a symbolic link (SQLite
    refuses to follow it), a directory or another special file -> (that file, what it is); SQLite said only "unable to
    open database file", and the fix named a writable directory and disk room."""
    for side in SIDE_FILES:
        p = Path(f"{path}{side}")
        try:
            mode = os.lstat(p).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            return p, "a symbolic link (SQLite keeps its own file there, and follows no link)"
        if stat.S_ISDIR(mode):
            return p, "a directory (SQLite keeps its own file there)"
        if not stat.S_ISREG(mode):
            return p, "not a regular file (SQLite keeps its own file there)"
    return None


def _unmarked(path: Path) -> tuple[str, str]:
    """A SQLite database without an application_id: an earlier bertfeat's cache when its tables are exactly one of
    bertfeat's layouts (classify)."""
    try:
        master, meta = _tables(f"{path.absolute().as_uri()}?mode=ro&immutable=1")  # immutable: the main file alone
        wal = Path(f"{path}-wal")
        if not master and wal.is_file() and wal.stat().st_size:
            # its tables may be in the write-ahead log alone (an earlier bertfeat killed before its first checkpoint):
            # read a private copy of both, which SQLite recovers, never the files themselves
            with tempfile.TemporaryDirectory(prefix="bertfeat-store-") as tmp:
                copy = Path(tmp) / DB_NAME
                shutil.copyfile(path, copy)
                shutil.copyfile(wal, f"{copy}-wal")
                master, meta = _tables(f"{copy.as_uri()}?mode=rw")
    except sqlite3.Error as e:
        return "unknown", f"it is a SQLite database that cannot be read ({e})"
    if master == _layout(_SCHEMA):
        fmt = meta.get("format", FORMAT)
        return ("adopt", "") if fmt == FORMAT else ("format", fmt)
    for fmt, script in _OLD_SCHEMAS.items():
        if master == _layout(script):
            return "format", fmt
    tables = sorted(name for kind, name, _, _ in master if kind == "table" and not name.startswith("sqlite_"))
    return "foreign", f"it is a SQLite database whose tables are not bertfeat's ({', '.join(tables) or 'none'})"


def _tables(uri: str) -> tuple[frozenset, dict]:
    """The sqlite_master rows and the meta table (when there is one) of the database at ``uri``."""
    db = sqlite3.connect(uri, uri=True)
    try:
        master = _master(db)
        has_meta = any(m[:2] == ("table", "meta") for m in master)
        return master, dict(db.execute("SELECT key, value FROM meta")) if has_meta else {}
    finally:
        db.close()


#: a store is made in milliseconds (_create): a hidden new file older than this was left by a run killed meanwhile
STALE_NEW_S = 600.0


def _remove_stale_new(path: Path) -> None:
    """The hidden files of a store being made (``_create``: ``.vectors.sqlite3.new-PID-XXXXXXXX`` and its SQLite side
    files) that a run killed meanwhile (kill -9) left beside the store, older than STALE_NEW_S, removed; one being
    made now (by this host or another sharing the folder) is younger, and a file of another name is not looked at."""
    made = re.compile(rf"\.{re.escape(path.name)}\.new-\d+-[0-9a-f]{{8}}(?:{'|'.join(SIDE_FILES)})?")
    now = time.time()
    for p in path.parent.glob(f".{glob.escape(path.name)}.new-*"):
        try:
            st = p.lstat()
            if made.fullmatch(p.name) and stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_NEW_S:
                p.unlink()
        except OSError:  # gone meanwhile, or not ours to remove: left
            continue


def _create(path: Path, wal: bool) -> None:
    """A new store file, marked as bertfeat's and whole before it appears: built beside under a hidden name, then
    hard-linked into place (a link never replaces: a file another run made meanwhile is kept, and opened)."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        # made here with 0666 & ~umask, as any file the run writes (SQLite makes its files 0644 & ~umask: a group's
        # cache under umask 002 was not group-writable); its -wal / -shm take this file's mode
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before the first table (and WAL)
            db.executescript(f"BEGIN; PRAGMA application_id={APP_ID}; PRAGMA user_version={int(FORMAT)}; {_SCHEMA}"
                             f"INSERT INTO meta VALUES('format', '{FORMAT}'); COMMIT;")
            if wal:
                db.execute("PRAGMA journal_mode=WAL")
        finally:
            db.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            if not os.path.lexists(path):  # no hard links on this file system (FAT, some FUSE): a rename instead
                os.replace(tmp, path)
    except sqlite3.OperationalError as e:  # SQLite's "disk I/O error" for the file-size limit (ulimit -f), told apart
        limit = file_size_limit()  # while the files it wrote are there (a new store is NEW_STORE_BYTES)
        if "disk I/O" in str(e) and limit is not None and (limit < NEW_STORE_BYTES or _near_file_size_limit(
                list(path.parent.glob(tmp.name + "*")))):
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG)) from None
        raise
    except OSError as e:  # as SQLite's own errors, so the store names itself and its fix (VectorStore._error)
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        raise sqlite3.OperationalError("database or disk is full" if full else
                                       f"unable to open database file: {e.strerror or e}") from None
    finally:
        for p in path.parent.glob(tmp.name + "*"):
            p.unlink(missing_ok=True)


class VectorStore:
    """One SQLite database of vectors by (fingerprint, key); a connection shared by this process's threads.

    ``durable=False`` (the run's temporary duplicate store): no fsync, no WAL; the file is deleted by ``close``.
    ``run_store``: the store is the run's own store of encoded rows, not a cache (None: ``durable=False``, or a file in
    ``OUTPUT.partial/.dedup/``, ``is_run_store``). Every SQLite failure becomes a CacheError naming the file (as
    the cache, or as the run's temporary store) and what to do.
    """

    def __init__(self, path: Path, durable: bool = True, run_store: bool | None = None, look: bool = False):
        self.path = Path(path)
        self.look = look  # opened to read only, whatever this process may write (--estimate: nothing is written)
        self.durable = durable
        self.run_store = (not durable or is_run_store(self.path)) if run_store is None else run_store
        self.corrupt = 0  # entries whose checksum failed (read as misses)
        self.read_only: str | None = None  # why this process may not write the cache (read, nothing stored), or None
        self.immutable = False  # read-only, its main file read alone without locks (_open_read_only)
        self.not_shrunk: str | None = None  # why the last clear left the file as large (another process reads it ...)
        self._lock = threading.Lock()
        # id -> its fingerprints row (fingerprint, model, dim, settings, created): what get / put need, and what put
        # writes back after a concurrent clear
        self._fp_rows: dict[int, tuple] = {}
        self._alias: dict[int, int] = {}  # an id a concurrent clear retired -> the fingerprint's id now
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if self.run_store:
                raise CacheError(f"cannot make the directory of {RUN_STORE} {self.path.parent} ({e.strerror or e})",
                                 f"check the output's directory is writable, or write elsewhere with {opt('output')}"
                                 ) from None
            raise CacheError(f"cannot make the cache directory {self.path.parent} ({e.strerror or e})",
                             f"give {opt('cache')} a directory you can write") from None
        self.db = None
        t0 = time.monotonic()
        delay = 0.01
        while True:  # a brand-new file opened by several processes at once: setting WAL mode answers "locked" at once
            try:
                with self.guard("open", t0):
                    self._open()
                break
            except CacheError as e:
                if self.db is not None:
                    self.db.close()
                    self.db = None
                if not getattr(e, "locked", False) or time.monotonic() - t0 > BUSY_TIMEOUT_S:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _open(self) -> None:
        kind, detail = self._classify()
        side = side_file_problem(self.path) if kind in ("new", "ours", "adopt") else None
        if side is not None:
            where = f"{RUN_STORE} {self.path}" if self.run_store else f"the cache {self.path}"
            raise CacheError(f"cannot open {where}: {side[0].name} beside it is {side[1]}",
                             f"remove {side[0]} while no run uses the cache (bertfeat changed nothing in it)")
        if kind == "new" and self.look:
            raise sqlite3.OperationalError("unable to open database file: there is none to look into")
        if kind == "new":
            _create(self.path, wal=self.durable)
            kind, detail = self._classify()  # ours, or the file another process linked in first
        if kind in ("foreign", "unknown"):
            raise self._foreign(detail, maybe_ours=kind == "unknown")
        if kind == "format":
            raise self._format(detail)
        if kind == "new":  # removed again at once
            raise sqlite3.OperationalError("unable to open database file: it was removed while it was being made")
        why = "looked into only" if self.look else None if self.run_store else unwritable(self.path)
        if why is not None:
            return self._open_read_only(kind, why)
        if self.durable and not self.run_store:
            _remove_stale_new(self.path)
        # mode=rw: never makes a file (a store removed since it was classified is an error, not a new unmarked file)
        self.db = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S,
                                  isolation_level=None, check_same_thread=False)
        if self.durable:
            if self.db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a crash loses at most the last commits, never consistency
        else:
            self.db.execute("PRAGMA journal_mode=OFF")
            self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute(f"PRAGMA cache_size={CACHE_PAGES}")
        if kind == "adopt" and not self._mark_adopted():
            return
        self._check_format(self.db.execute("SELECT value FROM meta WHERE key='format'").fetchone())

    def _mark_adopted(self) -> bool:
        """An earlier bertfeat's cache (its exact layout, classify) marked as bertfeat's now; False: SQLite refused
        the write os.access allowed, and the cache is opened to read only, unmarked."""
        try:
            self.db.executescript(f"BEGIN IMMEDIATE; PRAGMA application_id={APP_ID}; PRAGMA user_version={int(FORMAT)}; "
                                  f"INSERT OR IGNORE INTO meta VALUES('format', '{FORMAT}'); COMMIT;")
            return True
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e):
                raise
            self.db.close()
            self.db = None
            self._open_read_only("adopt", foreign_sidecars(self.path) or str(e))
            return False

    def _open_read_only(self, kind: str, why: str) -> None:
        """A cache this process may not write (``why``), opened to read only: its hits are used, nothing is stored
        and nothing of it changes (an earlier bertfeat's cache is read unmarked). Through its -shm file (mode=ro) the
        commits of runs writing it elsewhere are seen. It makes no file: without both the -wal and the -shm there
        (no run has the cache open), mode=ro would make them, as this process's and unwritable for the cache's owner,
        whose runs SQLite then refuses every write; the main file is read alone instead (immutable=1: vectors still
        in a -wal file are not seen, and are encoded again; a run that starts writing meanwhile is not seen)."""
        self.read_only = why
        uri = self.path.absolute().as_uri()
        both = all(os.path.isfile(f"{self.path}-{s}") for s in ("wal", "shm"))
        for query in ("mode=ro", "mode=ro&immutable=1")[0 if both else 1:]:
            self.immutable = "immutable" in query
            self.db = sqlite3.connect(f"{uri}?{query}", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                      check_same_thread=False)
            try:
                self.db.execute(f"PRAGMA cache_size={CACHE_PAGES}")
                fmt = self.db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
                break
            except sqlite3.OperationalError as e:  # no -shm, and none can be made: the main file alone
                if "immutable" in query or not ("unable to open" in str(e) or "readonly" in str(e)):
                    raise
                self.db.close()
                self.db = None
        self._check_format(fmt if fmt is not None or kind != "adopt" else (FORMAT,))

    def _become_read_only(self, why: str) -> None:
        """SQLite refused a write that os.access allowed (``unwritable`` saw nothing): opened again to read only."""
        with self._lock:
            self.db.close()
            self.db = None
            with self.guard("open"):
                self._open_read_only("ours", foreign_sidecars(self.path) or why)

    def _check_format(self, fmt: tuple | None) -> None:
        """The meta table's format row (None: none) is this bertfeat's, else the store is refused as another format."""
        if fmt is None or fmt[0] != FORMAT:
            self.db.close()
            self.db = None
            raise self._format("unknown" if fmt is None else fmt[0])

    def _classify(self) -> tuple[str, str]:
        try:
            return classify(self.path)
        except OSError as e:  # an unreadable file or directory: as SQLite's error, named by _error
            raise sqlite3.OperationalError(f"unable to open database file: {e.strerror or e}") from None

    def _foreign(self, why: str, maybe_ours: bool) -> ForeignStore:
        """The refusal of a path that holds something bertfeat did not make, or cannot tell (nothing was written)."""
        unsure = f", or delete {self.path} if it was a bertfeat cache that got damaged" if maybe_ours else ""
        if self.run_store:
            err = ForeignStore(f"{RUN_STORE} {self.path} is not bertfeat's: {why}",
                               f"bertfeat changed nothing in it: remove it, or write elsewhere with {opt('output')}")
        else:
            err = ForeignStore(f"{self.path} is not a bertfeat vector cache: {why}",
                               f"bertfeat changed nothing in it: give {opt('cache')} a directory of its own (it is made "
                               f"if missing){unsure}")
        err.unsure = unsure
        return err

    def _format(self, fmt: str) -> CacheError:
        where = f"{RUN_STORE} {self.path}" if self.run_store else f"the cache {self.path}"
        return CacheError(f"{where} has format {fmt}, this bertfeat reads format {FORMAT}",
                          f"use another {opt('cache')} directory, or delete {self.path} (its vectors are recomputed)")

    # ------------------------------------------------------------------ errors
    class _Guard:
        def __init__(self, store: "VectorStore", doing: str, since: float | None = None):
            self.store, self.doing, self.since = store, doing, since

        def __enter__(self):
            self.t0 = time.monotonic() if self.since is None else self.since
            return self

        def __exit__(self, kind, e, tb):
            if e is None or not isinstance(e, (sqlite3.Error, OSError)):
                return False
            raise self.store._error(e, self.doing, time.monotonic() - self.t0) from None

    def guard(self, doing: str, since: float | None = None) -> "_Guard":
        """A context in which a failure of this store (SQLite's error, or an OSError: ENOSPC, EDQUOT, EIO ...) while
        ``doing`` ("open", "read", "write") becomes one CacheError naming the store, what happened and the fix."""
        return VectorStore._Guard(self, doing, since)

    def _cause(self, e: BaseException) -> str:
        """What a failure is (FAILURES' keys), from an OSError's errno or SQLite's error text."""
        if isinstance(e, OSError):
            return _ERRNO_CAUSES.get(e.errno, "io")
        text = str(e)
        if not isinstance(e, sqlite3.OperationalError):
            return "damaged"
        for words, cause in (("locked", "locked"), ("busy", "locked"), ("full", "full"), ("readonly", "readonly"),
                             ("unable to open", "open")):
            if words in text:
                return cause
        if "disk I/O" not in text:
            return "damaged"
        # SQLite reports a write's EFBIG (ulimit -f) and EDQUOT as a bare "disk I/O error": the first can be told
        return "too_large" if _near_file_size_limit(list(self.path.parent.glob(self.path.name + "*"))) else "io"

    def _error(self, e: BaseException, doing: str, waited: float = 0.0) -> CacheError:
        """The CacheError of a failure ``e`` while ``doing``: the cache's words (FAILURES), or the run store's."""
        cause = self._cause(e)
        text = one_line(e.strerror or e) if isinstance(e, OSError) else str(e)
        if self.run_store:
            return self._run_store_error(cause, text, doing, waited)
        where = f"the cache {self.path}"
        if cause == "locked":
            return _locked(where, doing, waited, "let the other run finish, or use another cache directory")
        if cause == "damaged" and self.immutable:  # read without locks: a run writing it elsewhere may have changed it
            return CacheError(f"cannot read {where} ({text}): it is read-only here and read without locks",
                              "a run that writes it elsewhere may have changed it while this run read it: rerun when "
                              f"that run finished, or run with {opt('cache', False)}")
        if cause == "damaged":
            return CacheError(f"{where} is damaged ({text})", f"delete {self.path} (its vectors are recomputed by the "
                                                             "next run), or use another cache directory")
        said, fix = CACHE_FAILURES[cause]
        limit = file_size_limit() if cause == "too_large" else None
        if limit is not None:  # this process's file-size limit: another directory alone does not help below 4 GiB
            raise_it = f"raise the limit (ulimit -f unlimited), or run with {opt('cache', False)}"
            fs = f"use another {opt('cache')} directory on another file system, or "  # above 4 GiB either may be it
            said, fix = f": {file_too_large()[0]}", (fs if limit >= FAT32_MAX_FILE else "") + raise_it
        err = CacheError(f"cannot {doing} {where}{said or f' ({text})'}", fix)
        err.readonly = text if cause == "readonly" else None  # register's test: SQLite refused what os.access allowed
        return err

    def _run_store_error(self, cause: str, text: str, doing: str, waited: float = 0.0) -> CacheError:
        """A failure of the run's own store (no cache involved): it lives in the run's partial directory, so a full
        or too-small file system gets the local engine's words for its partial directory (errors.os_error: ENOSPC,
        EFBIG); the finished parts stay for a resume (the engines keep them on a CacheError, and its fix says so)."""
        where = f"{RUN_STORE} {self.path}"
        resume = f"rerun the same command with {opt('resume', True)}"
        if cause == "locked":
            return _locked(where, doing, waited, f"{resume} (the finished parts are kept)", RunStoreError)
        if cause == "damaged":
            return RunStoreError(f"{where} is damaged ({text})",
                                 f"delete {self.path} (its rows are encoded again), then {resume}")
        said, fix = {
            "full": (": no space left on the device", f"free disk space, then {resume}"),
            "quota": (": disk quota exceeded", f"free space under your quota, then {resume}"),
            "too_large": (f": {file_too_large()[0]}", file_too_large(resume)[1]),
            "io": (None, f"its file system may be full or too small for the file, or the disk failed: free disk "
                         f"space, then {resume}, or write to another file system with {opt('output')}"),
        }.get(cause, (None, f"check the output's directory is writable, or write elsewhere with {opt('output')}"))
        return RunStoreError(f"cannot {doing} {where}{said or f' ({text})'}", fix)

    # ------------------------------------------------------------------ fingerprints
    def register(self, fingerprint: str, model: str, dim: int, settings: dict) -> int | None:
        """The fingerprint's id in this store (added when new); marks it used now. A read-only cache adds nothing:
        its id when the cache holds it, else None (``get`` finds nothing under None)."""
        if self.read_only is None:
            try:
                return self._register(fingerprint, model, dim, settings)
            except CacheError as e:
                if not getattr(e, "readonly", None):
                    raise
                self._become_read_only(e.readonly)
        fid = self.known_id(fingerprint)
        if fid is not None:
            self._check_dim(fingerprint, self._fp_rows[fid][2], dim)
        return fid

    def _register(self, fingerprint: str, model: str, dim: int, settings: dict) -> int:
        now = time.time()
        row = (fingerprint, model, int(dim), settings_text(settings), now)
        with self._lock, self.guard("write"):
            self.db.execute("INSERT OR IGNORE INTO fingerprints(fingerprint, model, dim, settings, created, last_used) "
                            "VALUES(?, ?, ?, ?, ?, ?)", (*row, now))
            fid, stored_dim = self.db.execute("SELECT id, dim FROM fingerprints WHERE fingerprint=?", (fingerprint,)).fetchone()
            self.db.execute("UPDATE fingerprints SET last_used=? WHERE id=?", (now, fid))
        self._check_dim(fingerprint, stored_dim, dim)
        self._fp_rows[fid] = row
        return fid

    def _check_dim(self, fingerprint: str, stored_dim: int, dim: int) -> None:
        if stored_dim != dim:
            raise CacheError(f"the cache {self.path} holds {stored_dim}-dimension vectors under fingerprint {fingerprint}, "
                             f"this run makes {dim}", f"delete {self.path} (it is damaged), or use another cache directory")

    def known_id(self, fingerprint: str) -> int | None:
        """The fingerprint's id if this store holds it, for ``get`` (nothing written: extract --estimate's lookups)."""
        with self._lock, self.guard("read"):
            row = self.db.execute("SELECT id, fingerprint, model, dim, settings, created FROM fingerprints "
                                  "WHERE fingerprint=?", (fingerprint,)).fetchone()
        if row is None:
            return None
        self._fp_rows[row[0]] = tuple(row[1:])
        return row[0]

    def siblings(self, fingerprint: str, settings: dict, dim: int,
                 at_length=None) -> list[tuple[int, int | None]]:
        """(id, limit) of the fingerprints whose settings are ``settings`` but for NAME_SETTINGS (the prompt's name: the
        same vectors, so each of their entries serves, ``limit`` None) and LONG_TEXT_SETTINGS (another long-text
        policy or stride: only their rows within max length serve, the same bits: within_max_length, ``limit`` this
        run's max length), for ``get_reusable``; those of every row first. With ``at_length`` (max length -> these
        settings as a run at that max length has them, or None: settings_at_length), also those of another max length,
        whose rows within both max lengths serve. Only a row of this ``dim`` whose stored settings hash to its
        fingerprint (cache_fingerprint) counts."""
        def rest(s: dict, drop=LONG_TEXT_SETTINGS + NAME_SETTINGS) -> dict:
            return {k: v for k, v in s.items() if k not in drop}

        mine = json.loads(settings_text(settings))
        limit = mine.get("max_length")
        with self._lock, self.guard("read"):
            rows = self.db.execute("SELECT id, fingerprint, model, dim, settings, created FROM fingerprints "
                                   "WHERE fingerprint != ?", (fingerprint,)).fetchall()
        wanted = {limit: mine}  # max length -> this run's settings at it (None: its rows are not this run's bits)
        out = []
        for fid, fp, model, dim_of, text, created in rows:
            try:
                theirs = json.loads(text)
            except ValueError:
                continue
            if not (isinstance(theirs, dict) and dim == int(dim_of) and settings_id(text) == fp):
                continue
            length = theirs.get("max_length")
            if length not in wanted:
                at = at_length(length) if at_length is not None and _is_max_length(length) else None
                wanted[length] = None if at is None else json.loads(settings_text(at))
            want = wanted[length]
            if want is not None and rest(theirs) == rest(want):
                self._fp_rows[fid] = (fp, model, dim_of, text, created)
                every = length == limit and rest(theirs, NAME_SETTINGS) == rest(mine, NAME_SETTINGS)
                out.append((fid, None if every else limit))
        return sorted(out, key=lambda sibling: sibling[1] is not None)  # (stable: each kind in the order of their ids)

    def _current_id(self, fid: int) -> int:
        """``fid``, or the id its fingerprint has now: a `cache clear` while this run wrote deleted the fingerprints row
        (its vectors, written later, would have had no row: unseen by `cache info`, never reused); the row is put back
        (or the one another run made since is taken). Inside put's transaction."""
        fid = self._alias.get(fid, fid)
        fingerprint, model, dim, settings, created = self._fp_rows[fid]
        if self.db.execute("SELECT 1 FROM fingerprints WHERE id=?", (fid,)).fetchone():
            return fid
        self.db.execute("INSERT OR IGNORE INTO fingerprints(id, fingerprint, model, dim, settings, created, last_used) "
                        "VALUES(?, ?, ?, ?, ?, ?, ?)", (fid, fingerprint, model, dim, settings, created, time.time()))
        now_id = self.db.execute("SELECT id FROM fingerprints WHERE fingerprint=?", (fingerprint,)).fetchone()[0]
        if now_id != fid:
            self._fp_rows[now_id] = self._fp_rows[fid]
            self._alias[fid] = now_id
        return now_id

    # ------------------------------------------------------------------ vectors
    def get(self, fid: int, keys: list[bytes]) -> dict[bytes, tuple[np.ndarray, int, bool, int]]:
        """The stored entries among ``keys``: key -> (vector (dim,) float32, n_tokens, truncated, n_chunks). An
        entry whose checksum fails is left out (counted in ``corrupt``): the caller encodes that row again."""
        out: dict = {}
        if fid is None:  # a fingerprint a read-only cache does not hold (register)
            return out
        fid = self._alias.get(fid, fid)
        fp_text, _, dim, _, _ = self._fp_rows[fid]
        with self._lock, self.guard("read"):
            for s in range(0, len(keys), LOOKUP_BATCH):
                part = keys[s:s + LOOKUP_BATCH]
                # CAST: a vec cell whose type went from BLOB to TEXT (a flipped bit in the record header) is read as
                # bytes and fails its checksum (a miss), not a UTF-8 decoding error that stopped the run
                rows = self.db.execute(f"SELECT key, CAST(vec AS BLOB), n_tokens, flags, n_chunks, crc FROM vectors WHERE fp=? AND key IN "
                                       f"({','.join('?' * len(part))})", (fid, *part)).fetchall()
                for key, vec, n_tok, flags, n_ch, crc in rows:
                    if len(vec) != 4 * dim or _crc(fp_text, key, vec, n_tok, flags, n_ch) != crc:
                        self.corrupt += 1
                        continue
                    out[bytes(key)] = (np.frombuffer(vec, dtype="<f4"), int(n_tok), bool(flags & 1), int(n_ch))
        return out

    def get_reusable(self, fid: int | None, siblings: list[tuple[int, int | None]], keys: list[bytes],
                     used: set | None = None) -> dict:
        """``get`` under ``fid``, then for the keys not found the entries under its siblings (``siblings``: (id,
        limit), each entry of a sibling of every row (limit None), else the rows within max length, ``limit`` this
        run's: within_max_length); ``used`` gets the siblings that served one."""
        out = self.get(fid, keys)
        for sid, limit in siblings:
            rest = [k for k in keys if k not in out]
            if not rest:
                break
            hits = {k: e for k, e in self.get(sid, rest).items() if limit is None or within_max_length(e, limit)}
            if hits and used is not None:
                used.add(sid)
            out.update(hits)
        return out

    def put(self, fid: int, keys: list[bytes], X: np.ndarray, n_tokens, truncated, n_chunks) -> None:
        """Store rows (one transaction: all of them or none); an existing entry is replaced (a corrupt one repaired).
        A read-only cache stores nothing (its reader keeps the run's vectors itself: reuse.Reuser)."""
        if self.read_only is not None:
            return
        records = entry_records(self._fp_rows[fid][0], keys, X, n_tokens, truncated, n_chunks)
        if not records:
            return
        with self._lock, self.guard("write"):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                fid = self._current_id(fid)
                self.db.executemany("INSERT OR REPLACE INTO vectors(fp, key, vec, n_tokens, flags, n_chunks, crc) "
                                    "VALUES(?, ?, ?, ?, ?, ?, ?)", [(fid, *e) for e in records])
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise

    def touch(self, fid: int | None) -> None:
        if self.read_only is not None:
            return
        with self._lock, self.guard("write"):
            self.db.execute("UPDATE fingerprints SET last_used=? WHERE id=?", (time.time(), self._alias.get(fid, fid)))

    # ------------------------------------------------------------------ cache info / clear
    def summary(self) -> list[dict]:
        """One dict per fingerprint: fingerprint, model, dim, entries, bytes (of vectors), settings, created, last_used."""
        with self._lock, self.guard("read"):
            counts = dict((fp, (n, b)) for fp, n, b in
                          self.db.execute("SELECT fp, count(*), sum(length(vec)) FROM vectors GROUP BY fp"))
            fps = self.db.execute("SELECT id, fingerprint, model, dim, settings, created, last_used FROM fingerprints "
                                  "ORDER BY last_used DESC").fetchall()
        out = []
        for fid, fp, model, dim, settings, created, last_used in fps:
            n, b = counts.get(fid, (0, 0))
            out.append({"fingerprint": fp, "model": model, "dim": dim, "entries": int(n), "bytes": int(b or 0),
                        "settings": _stored_settings(settings), "created": _stored_time(created),
                        "last_used": _stored_time(last_used)})
        return out

    def clear(self, fingerprint: str | None = None) -> int:
        """Delete every entry (or one fingerprint's, by its full id or a unique prefix) in one transaction; returns
        the entries deleted. The file shrinks (VACUUM) when no other process has it open."""
        if self.read_only is not None:
            raise self._read_only_clear(self.read_only)
        try:
            n = self._delete(fingerprint)
        except CacheError as e:  # SQLite refused what os.access allowed: the cache's words, not a run's flags
            if getattr(e, "readonly", None) is None:
                raise
            raise self._read_only_clear(e.readonly) from None
        self.not_shrunk = "another process has the cache open, and later writes reuse the space"
        try:
            with self._lock:
                self.db.execute("PRAGMA busy_timeout=2000")  # VACUUM needs the file to itself: wait a little, not 120 s
                self.db.execute("VACUUM")
                # the copy VACUUM made is in the -wal file until a checkpoint writes it back: one that cannot finish
                # (another process reads an older snapshot) leaves the file larger than before for now
                if self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                    self.not_shrunk = None
        except sqlite3.Error as e:  # another process reads it: the space is reused by later writes instead
            if "locked" not in str(e) and "busy" not in str(e):  # a full disk (VACUUM copies the file) ...: its words
                self.not_shrunk = f"{e}; later writes reuse the space"
        return n

    def _read_only_clear(self, why: str) -> CacheError:
        return CacheError(f"cannot clear the cache {self.path}: it is read-only here ({why})",
                          "bertfeat changed nothing in it: clear it where it can be written (as its owner, or on a "
                          "writable mount), or delete its directory there")

    def _delete(self, fingerprint: str | None) -> int:
        """clear's deletion, in one transaction -> the entries deleted."""
        with self._lock, self.guard("write"):
            if fingerprint is None:
                ids = [r[0] for r in self.db.execute("SELECT id FROM fingerprints")]
            else:
                # a plain prefix comparison (LIKE took '_' and '%' as wildcards: '_' matched every fingerprint)
                prefix = fingerprint.strip().lower()
                if not prefix:  # every fingerprint starts with '': "no fingerprint(s) starting with ''" was untrue
                    raise CacheError(f"{opt('fingerprint', fingerprint, cli=repr(fingerprint))} is empty",
                                     "give a fingerprint `bertfeat cache info` shows (or a unique prefix of it), or "
                                     f"leave {opt('fingerprint')} out to clear every entry")
                ids = [r[0] for r in self.db.execute("SELECT id FROM fingerprints WHERE substr(fingerprint, 1, ?) = ?",
                                                     (len(prefix), prefix))] if prefix else []
                if len(ids) != 1:
                    raise CacheError(f"the cache {self.path} has {'no' if not ids else len(ids)} fingerprint(s) starting "
                                     f"with {fingerprint!r}", "give a fingerprint `bertfeat cache info` shows (or more of its digits)")
            self.db.execute("BEGIN IMMEDIATE")
            try:
                n = 0
                if fingerprint is None:  # every row, those of a fingerprint cleared while a run still wrote too
                    n = self.db.execute("DELETE FROM vectors").rowcount
                    self.db.execute("DELETE FROM fingerprints")
                for fid in ids if fingerprint is not None else ():
                    n += self.db.execute("DELETE FROM vectors WHERE fp=?", (fid,)).rowcount
                    self.db.execute("DELETE FROM fingerprints WHERE id=?", (fid,))
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        return n

    def size_on_disk(self) -> int:
        return _size_on_disk(self.path)

    def close(self) -> None:
        with self._lock:  # not while another thread reads (the read-ahead thread of a run that stops)
            try:
                if self.db is not None:
                    self.db.close()
            except sqlite3.Error:
                pass
        if not self.durable:
            for p in self.path.parent.glob(self.path.name + "*"):
                p.unlink(missing_ok=True)


#: the files SQLite keeps beside a database (its write-ahead log and shared memory, a rollback journal)
SIDE_FILES = ("-wal", "-shm", "-journal")


def _size_on_disk(db: Path) -> int:
    """Bytes of the database and its -wal / -shm files (those of other processes' open connections included); not
    another file whose name starts as the database's (a user's copy, vectors.sqlite3.bak, is not the cache's size)."""
    total = 0
    for p in [db] + [Path(f"{db}{side}") for side in SIDE_FILES]:
        try:
            st = p.stat()
        except OSError:
            continue
        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def open_cache(directory: Path, run_store: bool | None = None, look: bool = False) -> VectorStore:
    """The cache in ``directory`` (made when missing); ``run_store``: the run's own store of encoded rows instead
    (None: when ``directory`` is ``OUTPUT.partial/.dedup/``); ``look``: read only, nothing of it changed (an earlier
    bertfeat's cache left unmarked, no file made or removed beside it: --estimate)."""
    return VectorStore(Path(directory) / DB_NAME, run_store=run_store, look=look)


def open_existing_cache(directory: Path) -> VectorStore:
    """An existing cache (``bertfeat cache info / clear``): refuses a directory that holds none."""
    d = local_path(directory, "cache")
    link = _bad_link(d)
    if link is not None:
        raise CacheError(link.what, "give the directory passed to extract --cache (or BERTFEAT_CACHE)")
    if not d.is_dir():
        raise CacheError(f"the cache {d} does not exist" if not d.exists() else f"the cache {d} is not a directory",
                         "give the directory passed to extract --cache (or BERTFEAT_CACHE)")
    if not os.path.lexists(d / DB_NAME):
        raise CacheError(f"{d} holds no bertfeat vector cache ({DB_NAME} is missing)",
                         "give the directory passed to extract --cache (or BERTFEAT_CACHE)")
    try:
        return open_cache(d)
    except ForeignStore as e:  # the fix of a look into a directory, not of a run's --cache
        raise ForeignStore(e.what, "bertfeat changed nothing in it: give the directory passed to extract --cache (or "
                                   f"BERTFEAT_CACHE){e.unsure}") from None


# --------------------------------------------------------------------------- bertfeat cache info / clear
def _stored_settings(text) -> dict | None:
    """A fingerprint row's settings as stored, or None where the row is damaged (not a JSON object): ``cache info``
    shows the others (a run reads no such row: get_reusable's siblings skip it too)."""
    try:
        settings = json.loads(text)
    except (TypeError, ValueError):
        return None
    return settings if isinstance(settings, dict) else None


def _stored_time(value) -> float | None:
    """A fingerprint row's time as stored, or None where the row is damaged: text, bytes (SQLite keeps any type), a
    number no date has (one bit flipped: 2.4e163)."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    try:
        time.gmtime(value)
    except (OverflowError, OSError, ValueError):
        return None
    return value


def settings_line(s: dict | None, fingerprint: str = "ID") -> str:
    """A fingerprint's settings in a few words (``bertfeat cache info``)."""
    if s is None:
        return (f"settings unreadable (this fingerprint's row in the cache is damaged; `bertfeat cache clear "
                f"--fingerprint {fingerprint}` deletes its entries)")
    parts = [f"pooling {s.get('pooling')}", f"layers {','.join(str(x) for x in s.get('layers', []))}"]
    if len(s.get("layers", [])) > 1:
        parts.append(f"layer agg {s.get('layer_agg')}")
    if s.get("dense"):
        parts.append(f"dense {len(s['dense'])}")
    if s.get("layer_weights"):
        parts.append(f"weighted layers {len(s['layer_weights'])}")
    if s.get("layer_norm"):
        parts.append(f"layer norm {len(s['layer_norm'])}")
    parts.append("normalize" if s.get("normalize") else "no normalize")
    parts.append(f"max length {s.get('max_length')}")
    lt = s.get("long_text")
    parts.append(f"{lt} stride {s.get('stride')}" if str(lt).startswith("chunk") else str(lt))
    if s.get("prompt"):
        parts.append(f"prompt {s['prompt']!r}")
    if s.get("tokenizers"):  # after an upgrade, what tells the old split's vectors from the new
        parts.append(f"tokenizers {s['tokenizers']}")
    parts.append(str(s.get("precision")))
    gemm = s.get("gemm") or {}
    parts += [str(gemm[k]) for k in ("kernel", "blas", "kernels") if gemm.get(k)]  # what tells two roundings apart
    if gemm.get("post_ops"):
        parts.append(f"post-ops {gemm['post_ops']}")
    if gemm.get("attention"):  # what tells a ModernBERT / NumPy-kernels cache's new vectors from its old ones
        parts.append(f"attention {gemm['attention']}")
    return ", ".join(parts)


def cache_info(directory) -> dict:
    """What ``bertfeat cache info`` shows: the cache's file, size on disk, entries, and per fingerprint its model,
    settings, entries, vector bytes and when it was last used (newest first)."""
    store = open_existing_cache(directory)
    try:
        fps = store.summary()
    finally:
        store.close()
    # measured with this connection closed: its own -shm / -wal files (32 KiB and more) are not the cache's size
    return {"cache": str(directory), "file": str(store.path), "size_on_disk": store.size_on_disk(),
            "entries": sum(f["entries"] for f in fps), "fingerprints": fps}


def clear_cache(directory, fingerprint: str | None = None) -> dict:
    """``bertfeat cache clear``: every entry, or one fingerprint's (one transaction), -> entries deleted, the size
    on disk before and after, and whether the file shrank (not while another process has it open: its space is then
    reused by later writes, and its -wal file has grown by the deletion: ``not_shrunk`` says why)."""
    # before this connection adds its own -shm / -wal files; the path checked first (a NUL in it: one line)
    before = _size_on_disk(local_path(directory, "cache") / DB_NAME)
    store = open_existing_cache(directory)
    try:
        n = store.clear(fingerprint)
    finally:
        store.close()
    return {"deleted": n, "size_before": before, "size_after": store.size_on_disk(), "shrunk": store.not_shrunk is None,
            "not_shrunk": store.not_shrunk}
