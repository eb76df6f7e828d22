"""Only new work (issue 29), side by side: the whole `bertfeat extract` command with and without `--cache`.

On a corpus of 20,000 distinct real sentences (--rows) and versions of it, each run is the whole command in its own
process (`python -m bertfeat extract IN -o OUT --id-column id --precision fp32 --overwrite`, model load included:
what a pipeline waits for), timed by its wall clock; the library's own `elapsed` (the summary on stderr) is read
too. Methods run round robin for --rounds rounds, each round starting one method later, so a slow spell of the
machine falls on every method; medians are reported.

    v0-nocache      the corpus (20,000 rows), --no-cache
    v0-cold         the corpus, --cache pointing at an empty directory (deleted before every run)
    v0-x2           every text of the corpus twice (40,000 rows, shuffled), --no-cache
    vN-nocache      version N % (1, 5, 10) of the corpus, --no-cache
    vN-cache        version N %, --cache holding the vectors of v0 (a copy of the primed cache, fresh every run)

Version N %: N % of v0's row count changed, a third each deleted, edited (one word replaced by a word of another
row; the row keeps its id) and added (real sentences v0 never holds: corpus.held_out_sentences), then every row
shuffled. The primed cache is made once, before round 1, by an untimed `extract v0 --cache` (which also warms the
file cache); every cached run starts from a copy of it, so each finds exactly v0's vectors.

Goals (issue 29): v5-cache / v5-nocache <= 0.15; v0-cold / v0-nocache <= 1.05; v0-x2 / v0-nocache <= 1.1 (the
20,000 distinct texts alone). PASS / FAIL is judged on the wall clock; the ratio of the summaries' elapsed is shown
beside it. Every run's `rows encoded` / `rows reused` are checked against what the versions imply (a cached re-run
encodes exactly the edited and added texts), and each cached or duplicated run's features against the no-cache
run of the same texts (same ids, max |diff|, must be <= 1e-6).

The corpus: benchmarks/corpus.py's sources (SST-2 train, TREC train, STSb dev, read as build_corpus reads them)
hold 15,202 distinct sentences (15,372 with repeats), fewer than 20,000: the other 4,798 rows are two of those
sentences joined by a space (a seeded pairing; no joined row equals another row). The 20,000 rows are then put in a
seeded random order and --rows takes the first ones, so a small smoke run samples the same mix.

    python benchmarks/bench_incremental.py --write                  # full run (3 rounds), appends to CACHE_RESULTS.md
    python benchmarks/bench_incremental.py --rows 600 --rounds 1 --quick   # smoke test (5 % version only)
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy (see bertfeat/ops/threads.py)
import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "_work" / "incremental"
RESULTS = HERE / "CACHE_RESULTS.md"
sys.path.insert(0, str(HERE))
from corpus import build_corpus, held_out_sentences  # noqa: E402

SEED = 29
LEVELS = (1, 5, 10)
GOALS = {"v5": 0.15, "cold": 1.05, "x2": 1.10}
TOLERANCE = 1e-6  # max |diff| between a reused and a freshly encoded vector (issue 29)


# --------------------------------------------------------------------------- the machine
def cpu() -> str:
    """`lscpu`'s model name, cores, and the bf16 / int8 flags (AMX, AVX512-BF16, VNNI), as bench_encode names them."""
    from bertfeat.ops import cpu

    model = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        model = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")), None)
    except (OSError, subprocess.SubprocessError):
        pass
    return (f"{model or cpu.cpu_model()}, {os.cpu_count()} cores; flags: "
            f"{', '.join(cpu.bf16_flags()) or 'none of amx, avx512_bf16, avx512_vnni, avx512f, avx2'}")


def machine() -> str:
    """The CPU (above) and what bertfeat's fp32 runs on here (bench_encode.machine's GEMM part)."""
    from bertfeat.ops import gemm

    return f"{cpu()} (fp32 GEMM: {gemm.describe_library(gemm.resolve('fp32'))})"


# --------------------------------------------------------------------------- the corpus and its versions
def source_sentences() -> list[str]:
    """corpus.build_corpus's three sources in its interleaved order, every sentence once (first occurrence)."""
    return list(dict.fromkeys(build_corpus(1 << 30)))  # build_corpus stops when its sources are used up


def base_corpus(rows: int) -> tuple[list[str], dict]:
    """(v0's texts, facts): 20,000 distinct rows (the sources' distinct sentences, then pairs of them joined by a
    space), in a seeded random order; the first ``rows`` of them."""
    single = source_sentences()
    full = 20_000
    texts = list(single[:full])
    seen = set(texts)
    rng = random.Random(SEED)
    order = single[:]
    rng.shuffle(order)
    j = 0
    while len(texts) < full:
        a, b = order[j % len(order)], order[(j + 1) % len(order)]
        j += 2
        t = f"{a} {b}"
        if t not in seen:
            seen.add(t)
            texts.append(t)
    rng.shuffle(texts)
    facts = {"distinct_sentences": len(single), "joined_rows": max(0, full - len(single))}
    if rows > full:
        raise SystemExit(f"--rows {rows}: the corpus has {full:,} distinct rows")
    return texts[:rows], facts


def change(texts: list[str], level: int, spare: list[str]) -> tuple[list[int], list[str], dict]:
    """Version ``level`` % of v0 (ids 0..n-1): (ids, texts, counts). A third of the changed rows deleted, a third
    edited (one word swapped for a word of another row; the id kept), the rest added (``spare``: real sentences
    not in v0; new ids), then all rows shuffled."""
    rng = random.Random(SEED * 100 + level)
    n = len(texts)
    k = max(3, round(n * level / 100))
    n_del, n_edit = k // 3, k // 3
    n_add = k - n_del - n_edit
    picked = rng.sample(range(n), n_del + n_edit)
    deleted, edited = set(picked[:n_del]), picked[n_del:]
    taken = set(texts)
    new = dict(enumerate(texts))
    for i in deleted:
        del new[i]
    for i in edited:
        while True:
            words = texts[i].split(" ")
            donor = texts[rng.randrange(n)].split(" ")
            pos = rng.randrange(len(words))
            words[pos] = donor[rng.randrange(len(donor))]
            t = " ".join(words)
            if t not in taken:
                break
        taken.add(t)
        new[i] = t
    adds = [s for s in spare if s not in taken][:n_add]
    if len(adds) < n_add:
        raise SystemExit(f"only {len(adds)} held-out sentences for {n_add} added rows")
    for j, t in enumerate(adds):
        new[n + j] = t
    items = list(new.items())
    rng.shuffle(items)
    return [i for i, _ in items], [t for _, t in items], {"deleted": n_del, "edited": n_edit, "added": n_add}


def write_input(path: Path, ids: list[int], texts: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "text": texts}), tmp)
    os.replace(tmp, path)


def build_inputs(rows: int, levels: tuple[int, ...]) -> tuple[dict, dict]:
    """Write every input file of the run (v0, v0-x2, one per level) -> (name -> {path, rows, expected encoded /
    reused with and without the primed cache}, corpus facts)."""
    v0, facts = base_corpus(rows)
    ids0 = list(range(len(v0)))
    spare = list(dict.fromkeys(held_out_sentences()))
    inputs = {"v0": {"path": WORK / f"v0-{rows}.parquet", "ids": ids0, "texts": v0}}
    rng = random.Random(SEED + 1)
    dup = [(i, t) for i, t in enumerate(v0)] * 2
    rng.shuffle(dup)
    inputs["x2"] = {"path": WORK / f"v0x2-{rows}.parquet", "ids": list(range(len(dup))), "texts": [t for _, t in dup],
                    "source_ids": [i for i, _ in dup]}
    for level in levels:
        ids, texts, counts = change(v0, level, spare)
        inputs[f"v{level}"] = {"path": WORK / f"v{level}-{rows}.parquet", "ids": ids, "texts": texts, "counts": counts}
    for inp in inputs.values():
        write_input(inp["path"], inp["ids"], inp["texts"])
    return inputs, facts


def methods_for(levels: tuple[int, ...]) -> dict[str, dict]:
    """name -> {input, cache: None | "cold" | "primed", expected (encoded, reused)} (expected filled in later)."""
    m = {"v0-nocache": {"input": "v0", "cache": None}, "v0-cold": {"input": "v0", "cache": "cold"},
         "v0-x2": {"input": "x2", "cache": None}}
    for level in levels:
        m[f"v{level}-nocache"] = {"input": f"v{level}", "cache": None}
        m[f"v{level}-cache"] = {"input": f"v{level}", "cache": "primed"}
    return m


def expected(method: dict, inputs: dict) -> tuple[int, int]:
    """(rows encoded, rows reused) the summary must print for this method."""
    inp = inputs[method["input"]]
    n, distinct = len(inp["texts"]), len(set(inp["texts"]))
    if method["cache"] == "primed":
        c = inp["counts"]
        return c["edited"] + c["added"], n - c["edited"] - c["added"]
    return distinct, n - distinct


# --------------------------------------------------------------------------- one run (its own process)
def extract_cmd(src: Path, out: Path, cache: Path | None, args) -> list[str]:
    cmd = [sys.executable, "-m", "bertfeat", "extract", str(src), "-o", str(out), "--id-column", "id",
           "--precision", "fp32", "--overwrite"]
    if args.model:
        cmd += ["-m", args.model]
    return cmd + (["--cache", str(cache)] if cache is not None else ["--no-cache"])


def summary_value(stderr: str, name: str) -> float | None:
    """A line of the summary on stderr: 'rows encoded    1,234' or 'elapsed         12.3 s'."""
    m = re.search(rf"(?m)^{re.escape(name)}\s+([\d,\.]+)", stderr)
    return float(m.group(1).replace(",", "")) if m else None


def run_one(name: str, method: dict, inputs: dict, args) -> dict:
    """Prepare the cache (untimed), then time the whole command."""
    inp = inputs[method["input"]]
    out = WORK / f"out-{name}.parquet"
    cache = None
    if method["cache"] == "cold":
        cache = WORK / "cache-cold"
        shutil.rmtree(cache, ignore_errors=True)
    elif method["cache"] == "primed":
        cache = WORK / "cache-run"
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(WORK / "cache-primed", cache)
    cmd = extract_cmd(inp["path"], out, cache, args)
    env = dict(os.environ)
    env.pop("BERTFEAT_CACHE", None)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{name} failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return {"wall": wall, "elapsed": summary_value(p.stderr, "elapsed"),
            "encoded": summary_value(p.stderr, "rows encoded"), "reused": summary_value(p.stderr, "rows reused"),
            "out": out}


def read_features(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["id", "embedding"])
    emb = t.column("embedding").combine_chunks()
    X = emb.flatten().to_numpy(zero_copy_only=False).reshape(len(t), -1)
    return t.column("id").to_numpy(), X


def compare(name: str, method: dict, inputs: dict) -> str | None:
    """A cached (or duplicated) run's features against the no-cache run of the same texts: -> a problem or None.
    Sets method['max_diff']."""
    if method["cache"] is None and method["input"] != "x2":
        return None
    ref_name = "v0-nocache" if method["input"] in ("v0", "x2") else f"{method['input']}-nocache"
    a, b = WORK / f"out-{name}.parquet", WORK / f"out-{ref_name}.parquet"
    if not (a.is_file() and b.is_file()):
        return None
    ids_a, A = read_features(a)
    ids_b, B = read_features(b)
    if method["input"] == "x2":  # row i of x2 holds v0's text source_ids[i]
        src = np.asarray(inputs["x2"]["source_ids"])
        pos = {int(i): k for k, i in enumerate(ids_b)}
        B = B[[pos[int(s)] for s in src]]
        ids_b = ids_a if np.array_equal(ids_a, np.arange(len(src))) else None
    if ids_b is None or not np.array_equal(ids_a, ids_b):
        return f"{name}: ids differ from {ref_name}'s"
    d = float(np.abs(A.astype(np.float64) - B).max()) if len(A) else 0.0
    method["max_diff"] = max(method.get("max_diff", 0.0), d)
    if d > TOLERANCE:
        return f"{name}: max |diff| vs {ref_name} = {d:.2e} > {TOLERANCE:g}"
    return None


# --------------------------------------------------------------------------- report
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def render(methods: dict, levels: tuple[int, ...]) -> str:
    lines = ["| run | rows | rows encoded | rows reused | median wall s | median elapsed s | max \\|diff\\| vs no-cache | runs (wall s) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, m in methods.items():
        r = m["runs"]
        diff = f"{m['max_diff']:.1e}" if "max_diff" in m else "-"
        lines.append(f"| {name} | {m['rows']:,} | {int(r[-1]['encoded']):,} | {int(r[-1]['reused']):,} | "
                     f"{med([x['wall'] for x in r]):.2f} | {med([x['elapsed'] for x in r]):.2f} | {diff} | "
                     f"{', '.join('%.2f' % x['wall'] for x in r)} |")
    lines += ["", "| comparison | ratio (wall clock) | ratio (summary elapsed) | goal | result |", "|---|---:|---:|---:|---|"]

    def ratio(a, b, key):
        return med([x[key] for x in methods[a]["runs"]]) / med([x[key] for x in methods[b]["runs"]])

    comps = [(f"re-run after {lv} % changed, --cache primed by v0 / no cache", f"v{lv}-cache", f"v{lv}-nocache",
              GOALS.get(f"v{lv}")) for lv in levels]
    comps += [("cold run, --cache (empty) / no cache", "v0-cold", "v0-nocache", GOALS["cold"]),
              ("every text twice (2n rows) / the n distinct texts, no cache", "v0-x2", "v0-nocache", GOALS["x2"])]
    for label, a, b, goal in comps:
        w, e = ratio(a, b, "wall"), ratio(a, b, "elapsed")
        verdict = "-" if goal is None else ("PASS" if w <= goal else "FAIL")
        lines.append(f"| {label} | {w:.3f}x | {e:.3f}x | {'-' if goal is None else f'<= {goal:g}x'} | {verdict} |")
    return "\n".join(lines)


HEADER = """# The vector cache (issue 29): measured

What `--cache` and the within-run duplicate removal cost and save, and what the store itself does. Sections are
added by:

- `python benchmarks/bench_incremental.py --write` (appends a dated section per run): the whole `bertfeat extract`
  command, each run its own process, timed by its wall clock (model load, reading, writing included) with the
  summary's `elapsed` beside it, with and without `--cache`, round robin, medians. On a 20,000-row corpus of real
  sentences: a re-run after 1 / 5 / 10 % of the rows changed (deleted, edited, added, shuffled) with the cache
  holding the previous version's vectors, against a run of the changed corpus without the cache (goal at 5 %:
  <= 0.15x); a cold run with an empty cache against none (goal <= 1.05x); every text twice against the distinct
  texts alone, no cache (goal <= 1.1x).
- `python benchmarks/bench_cache_store.py --write` (replaces the "Store" section): bertfeat.cache.store.VectorStore's own
  put / get rates in batches of 2,048 rows (a chunk) at 384 and 768 dimensions against the model's encode rate,
  its size on disk per million rows, lookups and peak RSS at 10 million entries, and an alternative store
  measured at the same shapes.

Timings on a shared or virtual machine drift 10-25 %; compare the rows of one section (one run, round robin).
"""


def write_section(path: Path, heading: str, section: str, replace: bool = False) -> None:
    """Append ``section`` to ``path`` (made with HEADER when missing); ``replace``: put it in the place of the
    section whose heading line is exactly ``heading`` instead, if there is one. Written atomically."""
    old = path.read_text() if path.is_file() else HEADER
    parts = re.split(r"(?m)^(?=## )", old)
    head, body = parts[0], [p.rstrip() + "\n\n" for p in parts[1:]]
    at = next((i for i, p in enumerate(body) if p.split("\n", 1)[0].rstrip() == heading), None) if replace else None
    if at is None:
        body.append(section.rstrip() + "\n\n")
    else:
        body[at] = section.rstrip() + "\n\n"
    text = head.rstrip() + "\n\n" + "".join(body).rstrip() + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def versions() -> str:
    import importlib.metadata as md

    def v(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return "-"

    return f"bertfeat {v('bertfeat')}, numpy {v('numpy')}, pyarrow {v('pyarrow')}, onednn-cpu-gomp {v('onednn-cpu-gomp')}"


# --------------------------------------------------------------------------- driver
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000, help="rows of the corpus (v0), at most 20,000 [20000]")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every run, round robin; medians reported [3]")
    ap.add_argument("--quick", action="store_true", help="only the 5 %% version (the one with a goal), not 1 and 10 %%")
    ap.add_argument("--model", default=None, help="bertfeat model (default all-MiniLM-L6-v2)")
    ap.add_argument("--write", action="store_true", help="append a section to benchmarks/CACHE_RESULTS.md")
    args = ap.parse_args(argv)
    levels = (5,) if args.quick else LEVELS
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}", flush=True)

    inputs, facts = build_inputs(args.rows, levels)
    print(f"corpus: corpus.py's sources hold {facts['distinct_sentences']:,} distinct sentences; the 20,000 distinct rows "
          f"add {facts['joined_rows']:,} rows of two sentences joined; v0 = the first {args.rows:,} (seeded order)")
    for lv in levels:
        c = inputs[f"v{lv}"]["counts"]
        print(f"  v{lv}: {c['deleted']} deleted, {c['edited']} edited, {c['added']} added, shuffled -> "
              f"{len(inputs[f'v{lv}']['texts']):,} rows")
    methods = methods_for(levels)
    for name, m in methods.items():
        m["rows"] = len(inputs[m["input"]]["texts"])
        m["expect"] = expected(m, inputs)
        m["runs"] = []

    # the primed cache: v0's vectors (untimed; also warms the file cache and the model files)
    primed = WORK / "cache-primed"
    shutil.rmtree(primed, ignore_errors=True)
    env = dict(os.environ)
    env.pop("BERTFEAT_CACHE", None)
    t0 = time.perf_counter()
    p = subprocess.run(extract_cmd(inputs["v0"]["path"], WORK / "out-prime.parquet", primed, args),
                       capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode:
        raise SystemExit(f"priming failed: {p.stderr[-3000:]}")
    print(f"primed the cache with v0 ({summary_value(p.stderr, 'rows encoded'):,.0f} rows encoded, "
          f"{time.perf_counter() - t0:.1f} s, untimed)", flush=True)

    problems: list[str] = []
    names = list(methods)
    for rnd in range(args.rounds):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            m = methods[name]
            r = run_one(name, m, inputs, args)
            m["runs"].append(r)
            got = tuple(-1 if r[k] is None else int(r[k]) for k in ("encoded", "reused"))
            if got != m["expect"]:
                problems.append(f"{name} round {rnd + 1}: rows encoded / reused {got}, expected {m['expect']}")
            print(f"  round {rnd + 1}: {name:<12} {m['rows']:>6,} rows  wall {r['wall']:7.2f} s  elapsed "
                  f"{r['elapsed'] or 0:7.2f} s  encoded {got[0]:>6,}  reused {got[1]:>6,}", flush=True)
        for name, m in methods.items():  # every output of this round is there: compare
            why = compare(name, m, inputs)
            if why:
                problems.append(f"round {rnd + 1}: {why}")

    table = render(methods, levels)
    print("\n" + table)
    for why in problems:
        print(f"CHECK FAILED: {why}")
    if not problems:
        print("checks: every run's rows encoded / reused as expected; every cached or duplicated run's features "
              f"equal the no-cache run's (same ids, max |diff| <= {TOLERANCE:g})")
    if args.write:
        heading = f"## Incremental re-runs: {cpu()}, {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}"
        lv_text = ", ".join(f"v{lv}: {inputs[f'v{lv}']['counts']['deleted']} deleted, {inputs[f'v{lv}']['counts']['edited']} "
                            f"edited, {inputs[f'v{lv}']['counts']['added']} added" for lv in levels)
        section = f"""{heading}

`python benchmarks/bench_incremental.py {' '.join(argv if argv is not None else sys.argv[1:])}`: {args.rows:,} distinct rows
(corpus.py's sources hold {facts['distinct_sentences']:,} distinct sentences; {facts['joined_rows']:,} of the 20,000 rows are two
of them joined), model {args.model or 'all-MiniLM-L6-v2'}, fp32, {args.rounds} rounds round robin, each run its own process.
Corpus versions ({lv_text}; each then shuffled). Machine: {machine()}; Python {platform.python_version()};
{versions()}.
Checks: {'all passed' if not problems else '; '.join(problems)}.

{table}

Raw runs: {json.dumps({n: [{'wall': round(x['wall'], 3), 'elapsed': x['elapsed']} for x in m['runs']] for n, m in methods.items()})}
"""
        write_section(RESULTS, heading, section)
        print(f"appended {heading!r} to {RESULTS}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
