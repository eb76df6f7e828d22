"""Peak memory of one long text: a single 8,192-token text through a ModernBERT-base shape, bertfeat vs transformers
(both fp32), each run in its own process (issue 28: "one 8,192-token ModernBERT text: bertfeat's peak memory below
transformers'").

    python benchmarks/bench_long_memory.py                           # 8,192 tokens, 3 rounds round robin
    python benchmarks/bench_long_memory.py --tokens 512 --rounds 1   # smoke run

Model: bench_encode's modernbert-base (random weights, transformers' ModernBertConfig defaults = ModernBERT-base's
shape: 22 x 768, global attention every 3rd layer, the others within a 128-token window, max length 8,192; a
byte-level BPE tokenizer laid out as ModernBERT's), built once in benchmarks/_work by a child process.

Text: the real sentences of benchmarks/corpus.py joined with spaces (repeated if needed) and cut at a token boundary
so that it is exactly --tokens tokens with [CLS] and [SEP]; each worker checks its own tokenizer gives that count.

Each worker (one per method and round) loads the model (bertfeat: Encoder(max_length=8192); transformers:
AutoModel.from_pretrained with its default attention implementation, sdpa on CPU for ModernBERT; the one used is
printed), encodes one short warm-up sentence, then measures:

- RSS after load: VmRSS after the load and the warm-up (gc collected);
- peak RSS: the whole process's high-water mark, getrusage's ru_maxrss (the load's peak included); ru_maxrss and
  /proc's VmHWM agree here because the driver that forks the workers stays small (no model, no torch);
- encode peak: the high-water mark of the encode alone: after the warm-up the kernel's mark is reset to the current
  RSS (writing 5 to /proc/self/clear_refs), so VmHWM after the encode is the encode's own peak; "encode peak above
  load" is that minus RSS after load: what the 8,192-token forward pass adds on top of the loaded model. Where the
  reset is not allowed, the encode peak is the whole process's (load included) and the table says so.

Methods run round robin (each round starting one method later); medians over the rounds. Memory does not depend much
on what else runs on the machine; the forward's time (printed too) does. The mean-pooled features of both methods are
compared (max |diff|) so both are seen to compute the same thing.

Methods: bertfeat, transformers (default attention), transformers-eager (attn_implementation="eager": a full
8,192 x 8,192 score matrix per head and layer, about 10 GB; not run unless asked).
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (see bertfeat/ops/threads.py)
import argparse
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL_MAX = 8192  # ModernBERT's max_position_embeddings
WARMUP_TEXT = "A short sentence to warm up the kernels before anything is measured."


# --------------------------------------------------------------------------- memory facts of this process (Linux)
def _status_mb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def reset_peak() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) to the current RSS; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    hwm, rss = _status_mb("VmHWM"), _status_mb("VmRSS")
    return hwm is not None and rss is not None and hwm <= rss + 1.0


# --------------------------------------------------------------------------- the text
def long_text(mdir: Path, n_tokens: int) -> str:
    """The corpus's sentences joined (repeated while too short), cut so the model's tokenizer gives exactly
    ``n_tokens`` tokens with [CLS] and [SEP]."""
    from tokenizers import Tokenizer

    from corpus import build_corpus

    tk = Tokenizer.from_file(str(mdir / "tokenizer.json"))
    tk.no_truncation()
    full = " ".join(build_corpus(4000))
    while len(tk.encode(full, add_special_tokens=False).ids) < n_tokens:
        full = full + " " + full
    offsets = tk.encode(full, add_special_tokens=False).offsets
    want = n_tokens - 2  # content tokens between [CLS] and [SEP]
    k = want
    for _ in range(20):  # a cut inside a word may tokenize the cut word differently: move the cut until exact
        text = full[:offsets[k - 1][1]]
        got = len(tk.encode(text).ids)
        if got == n_tokens:
            return text
        k += n_tokens - got
    raise SystemExit(f"could not cut the corpus at exactly {n_tokens} tokens (last try: {got})")


# --------------------------------------------------------------------------- one run (own process)
def load(method: str, mdir: Path):
    """Load the method's model; return encode(text) -> (mean-pooled (H,) float32 features, tokens), attention."""
    import numpy as np

    if method == "bertfeat":
        from bertfeat import Encoder

        enc = Encoder(str(mdir), max_length=MODEL_MAX, precision="fp32")

        def run_bertfeat(text):
            r = enc.encode([text], pooling="mean", normalize=False, return_info=True)
            return np.asarray(r.features[0], dtype=np.float32), int(r.n_tokens[0])

        return run_bertfeat, None
    if method in ("transformers", "transformers-eager"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(mdir))
        kw = {"attn_implementation": "eager"} if method == "transformers-eager" else {}
        model = AutoModel.from_pretrained(str(mdir), dtype=torch.float32, **kw).eval()

        def run_transformers(text):
            b = tok([text], truncation=False, return_tensors="pt")
            with torch.inference_mode():
                h = model(**b).last_hidden_state[0]
            return h.mean(0).numpy().astype(np.float32), int(b["input_ids"].shape[1])

        return run_transformers, model.config._attn_implementation
    raise SystemExit(f"unknown method {method}")


def worker(method: str, mdir: Path, text_file: Path, features_out: Path) -> dict:
    import numpy as np

    text = text_file.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    run, attn = load(method, mdir)
    run(WARMUP_TEXT)
    load_s = time.perf_counter() - t0
    gc.collect()
    rss_after_load = _status_mb("VmRSS")
    load_peak = max(ru_maxrss_mb(), _status_mb("VmHWM") or 0.0)  # read before the reset: it lowers ru_maxrss too
    was_reset = reset_peak()
    t0 = time.perf_counter()
    feats, n = run(text)
    encode_s = time.perf_counter() - t0
    encode_peak = _status_mb("VmHWM") or ru_maxrss_mb()
    np.save(features_out, feats)
    return {"method": method, "attn": attn, "tokens": n, "load_s": load_s, "encode_s": encode_s,
            "rss_after_load_mb": rss_after_load, "peak_rss_mb": max(load_peak, encode_peak, ru_maxrss_mb()),
            "load_peak_mb": load_peak, "encode_peak_mb": encode_peak, "encode_above_load_mb": encode_peak - rss_after_load,
            "peak_reset": was_reset}


# --------------------------------------------------------------------------- driver
def model_dir() -> Path:
    """bench_encode's modernbert-base folder, built by a child process the first time (the driver stays small)."""
    import bench_encode

    d = bench_encode.WORK / "modernbert-base-random"
    if not (d / "model.safetensors").is_file():
        print(f"building {d} (random weights, once) ...", flush=True)
        subprocess.run([sys.executable, "-c", "import bench_encode; bench_encode.modernbert_base_dir()"], cwd=HERE,
                       check=True)
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=MODEL_MAX, help=f"tokens of the text, [CLS] and [SEP] included (at most {MODEL_MAX})")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all methods, round robin; medians are reported")
    ap.add_argument("--methods", default="bertfeat,transformers", help="comma-separated: bertfeat, transformers, transformers-eager")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--text-file", help=argparse.SUPPRESS)
    ap.add_argument("--features-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, Path(args.model_dir), Path(args.text_file), Path(args.features_out))))
        return 0
    if not 16 <= args.tokens <= MODEL_MAX:
        raise SystemExit(f"--tokens {args.tokens}: choose 16 to {MODEL_MAX}")

    import bench_encode
    import numpy as np

    work = bench_encode.WORK
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {bench_encode.machine()}")
    mdir = model_dir()
    text_file = work / f"long_text_{args.tokens}.txt"
    text_file.write_text(long_text(mdir, args.tokens), encoding="utf-8")
    print(f"text: {args.tokens:,} tokens, {len(text_file.read_text(encoding='utf-8')):,} characters ({text_file})")
    methods = args.methods.split(",")
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for rnd in range(args.rounds):
        for method in methods[rnd % len(methods):] + methods[:rnd % len(methods)]:
            feats = work / f"long_features_{method}.npy"
            cmd = [sys.executable, __file__, "--worker", method, "--model-dir", str(mdir), "--text-file", str(text_file),
                   "--features-out", str(feats)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"  round {rnd + 1}: {method} FAILED: {p.stderr.strip()[-800:] or p.returncode}")
                continue
            r = json.loads(line[0][7:])
            if r["tokens"] != args.tokens:
                raise SystemExit(f"{method} tokenized the text to {r['tokens']} tokens, not {args.tokens}")
            runs[method].append(r)
            print(f"  round {rnd + 1}: {_label(r):<22} peak RSS {r['peak_rss_mb']:>7,.0f} MB, after load "
                  f"{r['rss_after_load_mb']:>7,.0f} MB, encode peak {r['encode_peak_mb']:>7,.0f} MB "
                  f"(+{r['encode_above_load_mb']:,.0f} MB above load{'' if r['peak_reset'] else ', mark not reset'}), "
                  f"encode {r['encode_s']:.1f} s", flush=True)
    rows = []
    for method in methods:
        rs = runs[method]
        if not rs:
            continue
        med = {k: float(np.median([r[k] for r in rs])) for k in
               ("peak_rss_mb", "rss_after_load_mb", "encode_peak_mb", "encode_above_load_mb", "encode_s", "load_s")}
        rows.append({"method": method, "label": _label(rs[0]), "runs": len(rs), "reset": all(r["peak_reset"] for r in rs),
                     **med, "raw": rs})
    ref = work / "long_features_bertfeat.npy"
    diffs = {}
    for row in rows:
        other = work / f"long_features_{row['method']}.npy"
        if row["method"] != "bertfeat" and ref.is_file() and other.is_file():
            diffs[row["method"]] = float(np.abs(np.load(ref) - np.load(other)).max())
    print("\n" + render(rows, args.tokens))
    for m, d in diffs.items():
        print(f"mean-pooled features, bertfeat vs {m}: max |diff| {d:.2e}")
    by = {r["method"]: r for r in rows}
    if "bertfeat" in by and "transformers" in by:
        a, b = by["bertfeat"], by["transformers"]
        print(f"peak RSS: bertfeat {a['peak_rss_mb']:,.0f} MB vs {b['label']} {b['peak_rss_mb']:,.0f} MB "
              f"({'below' if a['peak_rss_mb'] < b['peak_rss_mb'] else 'NOT below'}); encode above load: bertfeat "
              f"{a['encode_above_load_mb']:,.0f} MB vs {b['encode_above_load_mb']:,.0f} MB "
              f"({'below' if a['encode_above_load_mb'] < b['encode_above_load_mb'] else 'NOT below'})")
    import importlib.metadata as md

    print(f"Python {platform.python_version()}, numpy {md.version('numpy')}, torch {_version('torch')}, "
          f"transformers {_version('transformers')}, bertfeat {_version('bertfeat')}; {os.cpu_count()} cores")
    print("raw: " + json.dumps({r["method"]: r["raw"] for r in rows}))
    return 0


def _version(p: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(p)
    except md.PackageNotFoundError:
        return "-"


def _label(r: dict) -> str:
    return f"{r['method']} [{r['attn']}]" if r.get("attn") else r["method"]


def render(rows: list[dict], tokens: int) -> str:
    out = [f"One {tokens:,}-token text, ModernBERT-base shape, fp32 (medians of each method's runs; MB = MiB)", "",
           "| method | runs | peak RSS MB (ru_maxrss) | RSS after load MB | encode peak MB | encode peak above load MB | "
           "encode s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        note = "" if r["reset"] else " (mark not reset: load included)"
        out.append(f"| {r['label']} | {r['runs']} | {r['peak_rss_mb']:,.0f} | {r['rss_after_load_mb']:,.0f} | "
                   f"{r['encode_peak_mb']:,.0f}{note} | {r['encode_above_load_mb']:,.0f} | {r['encode_s']:.1f} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
