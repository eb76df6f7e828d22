"""Semantic similarity check: Spearman x 100 of cosine similarity on STS Benchmark dev.

    pip install -e ".[examples]"      # scipy for spearmanr
    python examples/sts.py            # ~10 encodings of 3,000 sentences; cached in build/sts/

For every pooling mode (mean, cls, max, pooled) on the last layer, and for mean pooling over
other layers (-2, -3, -4, the mean or concatenation of the last four, first + last), encodes
the 1,500 STSb dev pairs with bertfeat's `Encoder` (normalized), scores each pair by cosine
similarity and reports Spearman's rank correlation x 100 against the gold scores, with the
published all-MiniLM-L6-v2 number (86.72, MTEB) beside ours. Writes docs/sts.md.

Data: ../shared/data/stsb/sts-dev.csv: tab-separated, no CSV quoting (split on tabs only):
genre, file, year, id, score (0-5), sentence1, sentence2[, licence fields].
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels as the CLI does (ops/threads.py)
import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from bertfeat import Encoder

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data")) / "stsb" / "sts-dev.csv"
# sentence-transformers/all-MiniLM-L6-v2 on STSb dev (mean pooling, normalized; cosine):
# MTEB, embeddings-benchmark/mtebpaper results/all-MiniLM-L6-v2/STSBenchmark.json
PUBLISHED = 86.72

# (label, pooling, layers, layer_agg): the same values as `bertfeat extract --pooling P --layers L --layer-agg A`
CONFIGS = [
    ("the model's own embedding (the default)", None, None, "mean"),
    ("mean, last layer", "mean", "-1", "mean"),
    ("cls, last layer", "cls", "-1", "mean"),
    ("max, last layer", "max", "-1", "mean"),
    ("pooled (tanh pooler on CLS)", "pooled", None, "mean"),
    ("mean, layer -2", "mean", "-2", "mean"),
    ("mean, layer -3", "mean", "-3", "mean"),
    ("mean, layer -4", "mean", "-4", "mean"),
    ("mean, average of the last 4 layers", "mean", "-4:", "mean"),
    ("mean, last 4 layers concatenated", "mean", "-4:", "concat"),
    ("mean, average of first and last layer", "mean", "1,-1", "mean"),
]


def read_stsb(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """(sentences1, sentences2, gold scores): split on tabs only; fields 4, 5, 6; extra fields ignored."""
    s1, s2, gold = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        f = line.split("\t")
        gold.append(float(f[4]))
        s1.append(f[5])
        s2.append(f[6])
    return s1, s2, np.asarray(gold)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).correlation)


def encode_cached(encoder: Encoder, texts: list[str], cache: Path, **options) -> np.ndarray:
    spec = encoder.spec(options.get("pooling"), options.get("layers"), options.get("layer_agg", "mean"),
                        options.get("normalize"))
    key = json.dumps({"fingerprint": encoder.fingerprint(spec),
                      "texts": hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()}, sort_keys=True)
    path = cache / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".npy")
    if path.is_file():
        return np.load(path)
    X = encoder.encode(texts, **options)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, X)
    tmp.replace(path)
    return X


def evaluate(encoder: Encoder, s1: list[str], s2: list[str], gold: np.ndarray, cache: Path, configs=CONFIGS) -> list[dict]:
    unique = sorted(set(s1) | set(s2))
    index = {t: i for i, t in enumerate(unique)}
    i1, i2 = np.array([index[t] for t in s1]), np.array([index[t] for t in s2])
    rows = []
    for label, pooling, layers, agg in configs:
        t0 = time.perf_counter()
        X = encode_cached(encoder, unique, cache, pooling=pooling, layers=layers, layer_agg=agg, normalize=True)
        cos = np.einsum("ij,ij->i", X[i1], X[i2])  # rows are unit length: the dot product is the cosine
        score = 100.0 * spearman(cos, gold)
        opts = ("(none)" if pooling is None else f"--pooling {pooling}" + (f" --layers {layers}" if layers else "")
                + (" --layer-agg concat" if agg == "concat" else "") + " --normalize")
        rows.append({"label": label, "options": opts, "dim": X.shape[1], "spearman": score})
        print(f"  {label:<42} {score:6.2f}  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return rows


def table_markdown(rows: list[dict], published: float = PUBLISHED) -> str:
    lines = ["| features | `bertfeat extract` options | dim | Spearman x 100 | published |", "|---|---|---:|---:|---:|"]
    for i, r in enumerate(rows):
        pub = f"{published:.2f}" if i == 0 else ""
        opts = r["options"] if r["options"] == "(none)" else f"`{r['options']}`"
        lines.append(f"| {r['label']} | {opts} | {r['dim']} | {r['spearman']:.2f} | {pub} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Spearman x 100 of cosine similarity on STSb dev, per pooling and layer.")
    ap.add_argument("--data", type=Path, default=DATA, help="sts-dev.csv (default $BERTFEAT_DATA/stsb/sts-dev.csv, else ../shared/data/stsb/sts-dev.csv)")
    ap.add_argument("--model", default=None, help="bertfeat model (default all-MiniLM-L6-v2)")
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "sts", help="feature cache directory")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs", help="where sts.md goes")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8", "auto"],
                    help="bertfeat precision (bf16, int8 and auto need bertfeat[fast]; see docs/precision.md)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N pairs (smoke test)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    s1, s2, gold = read_stsb(args.data)
    if args.limit:
        s1, s2, gold = s1[: args.limit], s2[: args.limit], gold[: args.limit]
    encoder = Encoder(args.model, precision=args.precision)
    configs = [c for c in CONFIGS if c[1] != "pooled" or encoder.weights.pooler_w is not None]
    print(f"STSb dev: {len(gold):,} pairs, model {encoder.model_id}", file=sys.stderr)
    rows = evaluate(encoder, s1, s2, gold, args.cache, configs)
    md = table_markdown(rows)
    print(md)
    args.docs.mkdir(parents=True, exist_ok=True)
    extra = " ".join(argv if argv is not None else sys.argv[1:])
    (args.docs / "sts.md").write_text(
        "# STS Benchmark dev: Spearman x 100 of cosine similarity\n\n"
        f"Made by `python examples/sts.py{' ' + extra if extra else ''}`: {len(gold):,} pairs of "
        f"`stsb/sts-dev.csv`, features of {encoder.model_id} from bertfeat (max length {encoder.max_length}, "
        "L2-normalized), cosine similarity of each pair, Spearman's rank correlation with the gold score x 100.\n\n"
        + md + "\n\n"
        f"Published: {PUBLISHED} for sentence-transformers/all-MiniLM-L6-v2 (mean pooling, normalized) on STSb dev "
        "(MTEB, embeddings-benchmark/mtebpaper `results/all-MiniLM-L6-v2/STSBenchmark.json`). The model was trained "
        "with mean pooling on the last layer and its modules.json ends in Normalize, so bertfeat's default (the first "
        "row, the model's own embedding) is that configuration and the row to compare; the other rows show what the other "
        "`--pooling` and `--layers` choices give with the same weights.\n",
        encoding="utf-8")
    print(f"wrote {args.docs / 'sts.md'} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
