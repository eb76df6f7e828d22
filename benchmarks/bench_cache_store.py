"""The vector cache's store on its own (issue 29's design record): bertfeat.cache.store.VectorStore's put / get rates,
size on disk, and lookups and memory at 10 million entries, with alternatives measured at the same shapes.

Every phase runs in its own process (so its peak RSS is its own), one store at a time (each deleted after use):

  (a) per backend and dimension (384 and 768: MiniLM's and bert-base's), a store of --entries rows (1,000,000)
      filled in batches of 2,048 rows (one chunk of `bertfeat extract`: one put, one transaction), random float32
      vectors under keys cache.store.text_key(f"bench row {i}"); then, in a fresh process, --batches batches of 2,048
      random present keys (hits) and as many absent ones (misses), each batch's 2,048 keys hashed from their texts
      inside the timed region (as reuse.plan does). Rates in rows/s; the size on disk per million rows; the
      lookups set against the model's encode rate (measured here for all-MiniLM-L6-v2 fp32; the fastest
      bertfeat precision per model read from benchmarks/RESULTS.md when it is there).
  (b) VectorStore with --big entries (10,000,000) of --big-dim dimensions (8: keeps the file near 1 GB), then, in
      a fresh process, lookups of random present / absent keys and the process's peak RSS (VmHWM and getrusage's
      ru_maxrss), RSS after opening the store beside it.
  (c) the alternatives: LMDB (py-lmdb, one write transaction per batch with putmulti, getmulti in one read
      transaction; metasync=False: one fsync per commit, a system crash may drop the last commit but never
      corrupts, the guarantee of SQLite's WAL + synchronous=NORMAL); and VectorStore's format 1 layout (each whole
      row in the (fp, key) B-tree, WITHOUT ROWID, 4 KiB pages), which format 2 replaced after the first run of this
      benchmark. Every backend stores and checks the same 8-byte BLAKE2b checksum (cache.store._crc).

The SQLite files' page layout (dbstat: B-tree depth, interior / leaf / overflow pages) is read after each build.
Lookups run with the store in the OS file cache (this machine has the RAM; the file cache is not dropped).

    nice -n 19 python benchmarks/bench_cache_store.py --write          # full run (~20 min; at most 4.4 GiB on disk at once)
    python benchmarks/bench_cache_store.py --quick                     # smoke: 20,000 and 200,000 entries

LMDB is a benchmark-only dependency (`pip install lmdb`); without it its rows are left out.
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy (see bertfeat/ops/threads.py)
import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "_work" / "store"
sys.path.insert(0, str(HERE))

BATCH = 2048  # rows per chunk (`bertfeat extract --chunk-rows` default): one put, one lookup
FP = "0123456789abcdef0123456789abcdef"  # a fingerprint (32 hex digits, as cache.store.cache_fingerprint makes)
BACKENDS = ("sqlite", "sqlite-v1", "lmdb")
LABEL = {"sqlite": "SQLite, VectorStore as shipped (format 2: rowid table + unique index on (fp, key), 16 KiB pages)",
         "sqlite-v1": "SQLite, VectorStore's format 1 (WITHOUT ROWID on (fp, key), 4 KiB pages)",
         "lmdb": "LMDB (py-lmdb), metasync=False"}


# --------------------------------------------------------------------------- the stores
V1_SCHEMA = """
    CREATE TABLE IF NOT EXISTS vectors(fp INTEGER NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL,
        n_tokens INTEGER NOT NULL, flags INTEGER NOT NULL, n_chunks INTEGER NOT NULL, crc INTEGER NOT NULL,
        PRIMARY KEY(fp, key)) WITHOUT ROWID;"""


class OneFingerprint:
    """What the two comparison stores share: VectorStore's register / dims / corrupt for the one fingerprint (id 1)
    a benchmark run uses."""

    def __init__(self):
        self.dims: dict[int, int] = {}
        self.corrupt = 0

    def register(self, fingerprint, model, dim, settings) -> int:
        self.dims[1] = dim
        return 1


class SqliteV1(OneFingerprint):
    """VectorStore's format 1 layout, kept for the record: each whole row in the (fp, key) B-tree (WITHOUT ROWID),
    4 KiB pages; otherwise VectorStore's settings and checksum."""

    def __init__(self, path: Path, page_size: int = 4096):
        from bertfeat.cache.store import CACHE_PAGES

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=120, isolation_level=None)
        self.db.execute(f"PRAGMA page_size={page_size}")  # before the first table (and WAL)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"PRAGMA cache_size={CACHE_PAGES}")
        self.db.executescript(V1_SCHEMA)
        super().__init__()

    def put(self, fid, keys, X, n_tokens, truncated, n_chunks):
        from bertfeat.cache.store import entry_records

        rows = [(fid, *e) for e in entry_records(FP, keys, X, n_tokens, truncated, n_chunks)]
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany("INSERT OR REPLACE INTO vectors(fp, key, vec, n_tokens, flags, n_chunks, crc) "
                            "VALUES(?, ?, ?, ?, ?, ?, ?)", rows)
        self.db.execute("COMMIT")

    def get(self, fid, keys):
        from bertfeat.cache.store import LOOKUP_BATCH, _crc

        out, dim = {}, self.dims[fid]
        for s in range(0, len(keys), LOOKUP_BATCH):
            part = keys[s:s + LOOKUP_BATCH]
            for key, vec, nt, fl, nc, crc in self.db.execute(
                    f"SELECT key, vec, n_tokens, flags, n_chunks, crc FROM vectors WHERE fp=? AND key IN "
                    f"({','.join('?' * len(part))})", (fid, *part)):
                if len(vec) != 4 * dim or _crc(FP, key, vec, nt, fl, nc) != crc:
                    self.corrupt += 1
                    continue
                out[bytes(key)] = (np.frombuffer(vec, dtype="<f4"), int(nt), bool(fl & 1), int(nc))
        return out

    def close(self):
        self.db.close()


class Lmdb(OneFingerprint):
    """The same entries in LMDB: key = fingerprint id (4 bytes) + the 16-byte text key; value = vector, counts
    (3 x int32) and the 8-byte checksum. One write transaction per put (putmulti), one read transaction per get
    (getmulti, keys sorted)."""

    def __init__(self, path: Path, map_size: int = 64 << 30):
        import lmdb

        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=map_size, metasync=False, readahead=False, max_dbs=0)
        super().__init__()

    def put(self, fid, keys, X, n_tokens, truncated, n_chunks):
        from bertfeat.cache.store import entry_records

        pre = fid.to_bytes(4, "big")
        items = sorted((pre + key, vec + np.array([nt, fl, nc], "<i4").tobytes() + crc.to_bytes(8, "little", signed=True))
                       for key, vec, nt, fl, nc, crc in entry_records(FP, keys, X, n_tokens, truncated, n_chunks))
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(items)

    def get(self, fid, keys):
        from bertfeat.cache.store import _crc

        dim = self.dims[fid]
        pre = fid.to_bytes(4, "big")
        out = {}
        with self.env.begin(buffers=False) as txn:
            found = txn.cursor().getmulti(sorted(pre + k for k in keys))
        for k, v in found:
            vec = v[:4 * dim]
            nt, fl, nc = np.frombuffer(v[4 * dim:4 * dim + 12], "<i4").tolist()
            crc = int.from_bytes(v[4 * dim + 12:], "little", signed=True)
            key = k[4:]
            if len(v) != 4 * dim + 20 or _crc(FP, key, vec, nt, fl, nc) != crc:
                self.corrupt += 1
                continue
            out[key] = (np.frombuffer(vec, dtype="<f4"), nt, bool(fl & 1), nc)
        return out

    def close(self):
        self.env.close()


def open_store(backend: str, directory: Path):
    from bertfeat.cache.store import DB_NAME, VectorStore

    if backend == "sqlite":
        return VectorStore(directory / DB_NAME)
    if backend == "sqlite-v1":
        return SqliteV1(directory / DB_NAME)
    if backend == "lmdb":
        return Lmdb(directory)
    raise SystemExit(f"unknown backend {backend}")


def disk_bytes(directory: Path) -> int:
    """Bytes the store's files take on disk (allocated blocks: LMDB's map is sparse)."""
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- memory
def status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def mem_now() -> dict:
    return {"rss_mb": (status_kb("VmRSS") or 0) / 1024, "hwm_mb": (status_kb("VmHWM") or 0) / 1024,
            "anon_mb": (status_kb("RssAnon") or 0) / 1024, "file_mb": (status_kb("RssFile") or 0) / 1024,
            "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# --------------------------------------------------------------------------- workers (one per process)
def key_of(i: int) -> bytes:
    from bertfeat.cache.store import text_key

    return text_key(f"bench row {i}")


def work_build(backend: str, dim: int, entries: int, directory: Path) -> dict:
    """Fill a new store with ``entries`` rows, BATCH per put. -> put rate overall and over the last tenth."""
    store = open_store(backend, directory)
    fid = store.register(FP, "bench", dim, {"bench": True})
    rng = np.random.default_rng(dim)
    ones, zeros = np.ones(BATCH, np.int64), np.zeros(BATCH, np.int64)
    spent, last_rows, last_spent = 0.0, 0, 0.0
    tail_from = entries - max(BATCH, entries // 10)
    for s in range(0, entries, BATCH):
        n = min(BATCH, entries - s)
        keys = [key_of(i) for i in range(s, s + n)]
        X = rng.standard_normal((n, dim), dtype=np.float32)
        t0 = time.perf_counter()
        store.put(fid, keys, X, ones[:n] * 20, zeros[:n], ones[:n])
        dt_ = time.perf_counter() - t0
        spent += dt_
        if s >= tail_from:
            last_rows, last_spent = last_rows + n, last_spent + dt_
    store.close()
    res = {"put_rows_s": entries / spent, "put_tail_rows_s": last_rows / last_spent if last_spent else None,
           "put_s": spent, "disk_bytes": disk_bytes(directory), **mem_now()}
    if backend.startswith("sqlite"):
        res["layout"] = sqlite_layout(directory / "vectors.sqlite3")
    return res


def sqlite_layout(path: Path) -> dict:
    """dbstat: per B-tree (the vectors table, its index) the depth and the interior / leaf / overflow pages."""
    db = sqlite3.connect(path)
    out = {"page_size": db.execute("PRAGMA page_size").fetchone()[0]}
    for name, pagetype, n, cells, depth in db.execute(
            "SELECT name, pagetype, count(*), avg(ncell), max(length(path) - length(replace(path, '/', ''))) "
            "FROM dbstat WHERE name IN ('vectors', 'vectors_key') GROUP BY name, pagetype"):
        d = out.setdefault(name, {})
        d[pagetype] = {"pages": n, "avg_cells": round(cells, 1)}
        d["depth"] = max(d.get("depth", 0), depth)  # '/' per level: root '/' is 1
    db.close()
    return out


def work_lookup(backend: str, dim: int, entries: int, directory: Path, batches: int) -> dict:
    """In a fresh process: ``batches`` lookups of BATCH random present keys, as many of absent keys (the keys hashed
    from their texts inside the timed region), and the memory it took."""
    from bertfeat.cache.store import text_key

    store = open_store(backend, directory)
    fid = store.register(FP, "bench", dim, {"bench": True})
    after_open = mem_now()
    rng = np.random.default_rng(12345)
    res = {"after_open": after_open}
    for kind in ("hits", "misses"):
        spent, found, rows = 0.0, 0, 0
        for _ in range(batches):
            ids = (rng.choice(entries, min(BATCH, entries), replace=False) if kind == "hits"
                   else rng.integers(entries, 1 << 62, BATCH))
            texts = [f"bench row {i}" for i in ids]
            t0 = time.perf_counter()
            keys = list(dict.fromkeys(text_key(t) for t in texts))
            got = store.get(fid, keys)
            spent += time.perf_counter() - t0
            found += len(got)
            rows += len(keys)
        res[f"{kind}_rows_s"] = rows / spent
        res[f"{kind}_found"] = found
    res["corrupt"] = store.corrupt
    res["after"] = mem_now()  # before close: LMDB's map (file-backed pages) still mapped
    store.close()
    return res


def work_encode(n: int, warmup: int) -> dict:
    """all-MiniLM-L6-v2 fp32, mean pooling: encode rate of the benchmark corpus (rows/s)."""
    from corpus import build_corpus

    from bertfeat import Encoder

    texts = build_corpus(n + warmup)
    enc = Encoder(None, max_length=256, precision="fp32")
    enc.encode(texts[:warmup], pooling="mean")
    t0 = time.perf_counter()
    enc.encode(texts[warmup:], pooling="mean")
    return {"rows_s": n / (time.perf_counter() - t0), "n": n}


def worker(args) -> dict:
    d = Path(args.dir or WORK)
    if args.worker == "build":
        return work_build(args.backend, args.dim, args.entries, d)
    if args.worker == "lookup":
        return work_lookup(args.backend, args.dim, args.entries, d, args.batches)
    if args.worker == "encode":
        return work_encode(args.encode_n, 100)
    raise SystemExit(args.worker)


def spawn(*argv) -> dict:
    cmd = [sys.executable, __file__, *map(str, argv)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode or not line:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[0][7:])


# --------------------------------------------------------------------------- encode rates for the comparison
def results_md_rates() -> dict[str, tuple[str, float]]:
    """The fastest bertfeat encode method per model in the newest table of benchmarks/RESULTS.md's first section:
    model -> (method, sentences/s) (that table's CPU; empty when the file is missing). The strictest comparison:
    int8, where it is the fastest, keeps a min cosine of 0.9956 vs fp32 only."""
    path = HERE / "RESULTS.md"
    if not path.is_file():
        return {}
    out: dict[str, tuple[str, float]] = {}
    section = re.split(r"(?m)^## ", path.read_text())
    newest = re.split(r"(?m)^### ", section[1])[0] if len(section) > 1 else ""  # the section's own run, not older ones
    for line in newest.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1].startswith("bertfeat") and cells[1] != "bertfeat-extract":
            try:
                rate = float(cells[3].replace(",", ""))
            except ValueError:
                continue
            if rate > out.get(cells[0], ("", 0.0))[1]:
                out[cells[0]] = (cells[1], rate)
    return out


# --------------------------------------------------------------------------- driver
def mb(x: float) -> str:
    return f"{x:,.0f}"


def layout_text(layout: dict | None) -> str:
    if not layout:
        return "-"
    parts = []
    for name in ("vectors", "vectors_key"):
        d = layout.get(name)
        if not d:
            continue
        pages = ", ".join(f"{d[t]['pages']:,} {t} ({d[t]['avg_cells']} cells)" if t != "overflow" else f"{d[t]['pages']:,} overflow"
                          for t in ("internal", "leaf", "overflow") if t in d)
        parts.append(f"{name}: depth {d['depth']}, {pages}")
    return f"{layout['page_size'] // 1024} KiB pages; " + "; ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000, help="rows per store in (a) and (c) [1000000]")
    ap.add_argument("--dims", default="384,768")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"of {', '.join(BACKENDS)}")
    ap.add_argument("--big", type=int, default=10_000_000, help="rows of the (b) store [10000000]; 0: skip")
    ap.add_argument("--big-dim", type=int, default=8)
    ap.add_argument("--big-backends", default="sqlite,lmdb")
    ap.add_argument("--batches", type=int, default=50, help="lookup batches of 2,048 keys, per kind (hits, misses)")
    ap.add_argument("--encode-n", type=int, default=1000, help="sentences for the MiniLM encode rate (0: skip)")
    ap.add_argument("--quick", action="store_true", help="smoke: 20,000 entries, 200,000 for (b), 5 batches, 200 sentences")
    ap.add_argument("--keep", action="store_true", help="keep the stores (default: each deleted after use)")
    ap.add_argument("--write", action="store_true", help="replace the Store section of benchmarks/CACHE_RESULTS.md")
    ap.add_argument("--shared", action="store_true", help="--write: say the machine was shared (rates are lower bounds)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--dim", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(args)))
        return 0
    if args.quick:
        args.entries, args.big = min(args.entries, 20_000), min(args.big, 200_000)
        args.batches, args.encode_n = min(args.batches, 5), min(args.encode_n, 200)

    from bench_incremental import RESULTS, machine, write_section

    print(f"machine: {machine()}; nice {os.nice(0)}", flush=True)
    WORK.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(WORK).free
    need = max(args.entries * 5200, args.big * 150)  # the largest single store (measured: 4.7 KB/row at 384 or 768)
    if need > min(free - (5 << 30), 10 << 30):
        raise SystemExit(f"not enough room: a store needs about {need / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free; "
                         "this benchmark keeps under 10 GiB)")
    enc = spawn("--worker", "encode", "--encode-n", args.encode_n) if args.encode_n else None
    if enc:
        print(f"encode: all-MiniLM-L6-v2 fp32 {enc['rows_s']:,.0f} rows/s ({enc['n']} sentences)", flush=True)
    ref = results_md_rates()

    import importlib.util

    def usable(backend: str) -> bool:
        if backend == "lmdb" and importlib.util.find_spec("lmdb") is None:
            print("lmdb is not installed (pip install lmdb): its rows are left out", flush=True)
            return False
        return True

    configs = [(b, int(d), args.entries) for d in args.dims.split(",") for b in args.backends.split(",") if usable(b)]
    if args.big:
        configs += [(b, args.big_dim, args.big) for b in args.big_backends.split(",") if usable(b)]
    rows = []
    for backend, dim, entries in configs:
        d = WORK / f"{backend}-{dim}-{entries}"
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.perf_counter()
        try:
            b = spawn("--worker", "build", "--backend", backend, "--dim", dim, "--entries", entries, "--dir", d)
            lk = spawn("--worker", "lookup", "--backend", backend, "--dim", dim, "--entries", entries, "--dir", d,
                       "--batches", args.batches)
        finally:
            if not args.keep:
                shutil.rmtree(d, ignore_errors=True)
        row = {"backend": backend, "dim": dim, "entries": entries, **b, **{k: v for k, v in lk.items()}}
        rows.append(row)
        print(f"{backend:<13} dim {dim:>4} {entries:>11,} entries: put {b['put_rows_s']:>9,.0f} rows/s (last tenth "
              f"{b['put_tail_rows_s']:,.0f}), get hits {lk['hits_rows_s']:>9,.0f} rows/s ({lk['hits_found']:,} found), "
              f"misses {lk['misses_rows_s']:>9,.0f} rows/s ({lk['misses_found']} found), disk "
              f"{b['disk_bytes'] / entries * 1e6 / 2**30:.2f} GiB per million rows, lookup RSS after open "
              f"{lk['after_open']['rss_mb']:.0f} MB, peak {lk['after']['hwm_mb']:.0f} MB (ru_maxrss "
              f"{lk['after']['ru_maxrss_mb']:.0f} MB); {time.perf_counter() - t0:.0f} s", flush=True)
        if b.get("layout"):
            print(f"    {layout_text(b['layout'])}", flush=True)

    table = render(rows, enc, ref)
    print("\n" + table)
    if args.write:
        heading = "## Store"
        nice = os.nice(0)
        cmd = (f"nice -n {nice} " if nice else "") + "python benchmarks/bench_cache_store.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        shared = (" on a machine shared with other work (another engineer's test runs): the rates are lower bounds and "
                  "drift; the sizes, B-tree layouts and memory figures do not depend on the load" if args.shared else "")
        section = f"""{heading}

{dt.date.today().isoformat()}, {machine()}. Measured by `{cmd.strip()}`{shared}. Python
{platform.python_version()}, SQLite {sqlite3.sqlite_version}, {lmdb_version()}. Batches of {BATCH:,} rows; lookups
hash each key from its text inside the timed region; {args.batches} batches of hits and {args.batches} of misses per store,
each store built and read in processes of their own, the store in the OS file cache.

{table}
"""
        write_section(RESULTS, heading, section, replace=True)
        print(f"wrote {heading!r} in {RESULTS}")
    return 0


def lmdb_version() -> str:
    try:
        import lmdb

        return f"LMDB {'.'.join(map(str, lmdb.version()))} (py-lmdb {lmdb.__version__})"
    except ImportError:
        return "LMDB not installed"


def render(rows: list[dict], enc: dict | None, ref: dict) -> str:
    out = ["| store | dim | entries | put rows/s (last tenth) | get hits rows/s | get misses rows/s | disk per million rows | "
           "lookup process RSS MB: after open / peak (ru_maxrss) / at the end anon + file-backed |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {LABEL[r['backend']]} | {r['dim']} | {r['entries']:,} | {r['put_rows_s']:,.0f} "
                   f"({r['put_tail_rows_s']:,.0f}) | {r['hits_rows_s']:,.0f} | {r['misses_rows_s']:,.0f} | "
                   f"{r['disk_bytes'] / r['entries'] * 1e6 / 2**30:.2f} GiB | {mb(r['after_open']['rss_mb'])} / "
                   f"{mb(r['after']['hwm_mb'])} ({mb(r['after']['ru_maxrss_mb'])}) / {mb(r['after']['anon_mb'])} + "
                   f"{mb(r['after']['file_mb'])} |")
    lay = [f"- {LABEL[r['backend']]}, dim {r['dim']}, {r['entries']:,} entries: {layout_text(r.get('layout'))}"
           for r in rows if r.get("layout")]
    if lay:
        out += ["", "SQLite page layout after the build (dbstat; depth counts levels, root = 1):", ""] + lay
    cmp_ = []
    models = {384: ("minilm", "all-MiniLM-L6-v2"), 768: ("bert-base", "bert-base's shape")}
    for r in rows:
        if r["dim"] not in models:
            continue
        key, name = models[r["dim"]]
        slow = min(r["hits_rows_s"], r["misses_rows_s"])
        parts = []
        if enc and r["dim"] == 384:
            parts.append(f"{slow / enc['rows_s']:,.0f}x {name} fp32 measured here ({enc['rows_s']:,.0f} rows/s)")
        if key in ref:
            parts.append(f"{slow / ref[key][1]:,.0f}x {name}'s fastest bertfeat method in RESULTS.md "
                         f"({ref[key][0]}, {ref[key][1]:,.0f} rows/s)")
        if parts:
            cmp_.append(f"- {LABEL[r['backend']]}, dim {r['dim']}: the slower of hits / misses ({slow:,.0f} rows/s) = "
                        + "; ".join(parts))
    if cmp_:
        out += ["", "Lookups against encoding the same rows:", ""] + cmp_
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
