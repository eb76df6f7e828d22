"""Downstream classifier on bertfeat features: SST-2 and TREC, raw and PCA-reduced.

    pip install -e ".[examples]"          # scikit-learn: an example dependency, not a run-time one
    python examples/classify.py           # a few minutes of CPU the first time; reruns use the cache

For each task: sentence features from bertfeat's `Encoder` (default model all-MiniLM-L6-v2,
its default mean pooling), cached in build/classify/; bertfeat's own `PCA` fitted on the
*train* features only and applied to train and test at 16, 32, 64 and 128 dimensions; then
scikit-learn `LogisticRegression` (features standardized, C chosen by 5-fold cross-validation
on train) and accuracy on the test set. Prints the table, writes docs/classify.md and
docs/classify.png.

Data (../shared/data, see its README):
  SST-2  sst2/stsa.binary.{train,test}  6,920 / 1,821  `<label 0/1> <sentence>`, UTF-8
  TREC   trec/TREC.{train,test}         5,452 / 500    `COARSE:fine question`, latin-1, 6 coarse classes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from bertfeat import PCA, Encoder

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data"))  # the full data sets
DIMS = (16, 32, 64, 128)
# SBERT paper (Reimers & Gurevych 2019, arXiv:1908.10084, Table 5): frozen BERT-base-uncased mean
# features + logistic regression. A different (larger) model, listed for orientation only.
SBERT_BERT_BASE_MEAN = {"SST-2": 84.40, "TREC": 92.8}


# --------------------------------------------------------------------------- data
def read_sst2(path: Path) -> tuple[list[str], np.ndarray]:
    """`<label> <sentence>` per line, split on the first space."""
    texts, labels = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        label, text = line.split(" ", 1)
        texts.append(text.strip())
        labels.append(int(label))
    return texts, np.asarray(labels)


def read_trec(path: Path) -> tuple[list[str], np.ndarray]:
    """`COARSE:fine question ...` per line (latin-1); the label is the coarse class."""
    texts, labels = [], []
    for line in path.read_text(encoding="latin-1").splitlines():
        if not line.strip():
            continue
        label, text = line.split(" ", 1)
        texts.append(text.strip())
        labels.append(label.split(":", 1)[0])
    return texts, np.asarray(labels)


def load_tasks(data: Path) -> dict[str, dict]:
    tasks = {}
    tr, te = read_sst2(data / "sst2" / "stsa.binary.train"), read_sst2(data / "sst2" / "stsa.binary.test")
    tasks["SST-2"] = {"train": tr, "test": te}
    tr, te = read_trec(data / "trec" / "TREC.train"), read_trec(data / "trec" / "TREC.test")
    tasks["TREC"] = {"train": tr, "test": te}
    return tasks


# --------------------------------------------------------------------------- features (cached)
def features(encoder: Encoder, texts: list[str], cache: Path, pooling: str | None, normalize: bool) -> np.ndarray:
    """bertfeat features of `texts`, cached as .npy keyed by model weights, settings and texts."""
    spec = encoder.spec(pooling, normalize=normalize)
    key = json.dumps({"fingerprint": encoder.fingerprint(spec),
                      "texts": hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = cache / f"{digest}.npy"
    if path.is_file():
        return np.load(path)
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    parts = []
    step = 1024
    for start in range(0, len(texts), step):
        parts.append(encoder.encode(texts[start:start + step], pooling=spec.pooling, normalize=normalize))
        done = min(start + step, len(texts))
        print(f"  encoded {done:,}/{len(texts):,} ({done / (time.perf_counter() - t0):.0f} rows/s)", file=sys.stderr)
    X = np.concatenate(parts)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, X)
    tmp.replace(path)  # atomic: an interrupted run never leaves a truncated cache entry
    path.with_suffix(".json").write_text(key + "\n")
    return X


# --------------------------------------------------------------------------- classifier
def accuracy(Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, yte: np.ndarray, seed: int = 0) -> float:
    """Standardize, logistic regression with C picked by 5-fold CV on train, accuracy on test (in %)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
    clf = GridSearchCV(pipe, {"logisticregression__C": [0.01, 0.1, 1.0, 10.0]},
                       cv=StratifiedKFold(5, shuffle=True, random_state=seed))
    clf.fit(Xtr, ytr)
    return 100.0 * float((clf.predict(Xte) == yte).mean())


def run(tasks: dict, encoder: Encoder, cache: Path, pooling: str | None, normalize: bool, dims=DIMS) -> dict:
    """-> {task: {"raw": acc, 16: acc, ...}, plus "_dim": raw width, "_sizes": (n_train, n_test)}."""
    results: dict = {}
    for name, t in tasks.items():
        (tr_texts, ytr), (te_texts, yte) = t["train"], t["test"]
        print(f"{name}: {len(tr_texts):,} train / {len(te_texts):,} test, {len(set(ytr.tolist()))} classes", file=sys.stderr)
        Xtr = features(encoder, tr_texts, cache, pooling, normalize)
        Xte = features(encoder, te_texts, cache, pooling, normalize)
        row = {"raw": accuracy(Xtr, ytr, Xte, yte), "_dim": Xtr.shape[1], "_sizes": (len(ytr), len(yte))}
        for k in dims:
            pca = PCA(n_components=k).fit(Xtr)  # fitted on train only
            row[k] = accuracy(pca.transform(Xtr), ytr, pca.transform(Xte), yte)
            row[f"_var{k}"] = 100.0 * float(np.sum(pca.explained_variance_ratio_))
        results[name] = row
    return results


# --------------------------------------------------------------------------- output
def table_markdown(results: dict, dims=DIMS) -> str:
    dim = next(iter(results.values()))["_dim"]
    head = "| task | train / test | raw (" + str(dim) + ") | " + " | ".join(f"PCA {k}" for k in reversed(dims)) + " | SBERT paper, BERT-base mean (other model) |"
    lines = [head, "|---|---:|---:|" + "---:|" * len(dims) + "---:|"]
    for name, r in results.items():
        n_tr, n_te = r["_sizes"]
        cells = [f"{r[k]:.2f}" for k in reversed(dims)]
        lines.append(f"| {name} | {n_tr:,} / {n_te:,} | {r['raw']:.2f} | " + " | ".join(cells)
                     + f" | {SBERT_BERT_BASE_MEAN.get(name, float('nan')):.2f} |")
    lines += ["", "Variance kept by the PCA (fitted on train): " + "; ".join(
        f"{name} " + ", ".join(f"{k}: {r[f'_var{k}']:.1f} %" for k in dims) for name, r in results.items()) + "."]
    return "\n".join(lines)


def plot(results: dict, path: Path, dims=DIMS) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5.0), dpi=100)
    ax = fig.subplots()
    dim = next(iter(results.values()))["_dim"]
    xs = [*dims, dim]
    styles = (("tab:blue", -13), ("tab:orange", 7))  # value labels below the first line, above the second
    for (name, r), (color, dy) in zip(results.items(), styles):
        ys = [r[k] for k in dims] + [r["raw"]]
        ax.plot(xs, ys, marker="o", color=color, label=f"{name}: bertfeat all-MiniLM-L6-v2 + logistic regression")
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, dy), ha="center", fontsize=8,
                        color=color)
        ref = SBERT_BERT_BASE_MEAN.get(name)
        if ref:
            ax.axhline(ref, color=color, linestyle=":", linewidth=1,
                       label=f"{name}: {ref} with frozen BERT-base features (SBERT paper; a different, larger model)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(k) for k in dims] + [f"{dim}\n(raw)"])
    ax.minorticks_off()
    lo = min(min(r[k] for k in dims) for r in results.values())
    ax.set_ylim(lo - 2.5, max(max(r["raw"] for r in results.values()), *SBERT_BERT_BASE_MEAN.values()) + 1.5)
    ax.set_xlabel("feature dimensions (bertfeat PCA fitted on the train features)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("SST-2 and TREC: test accuracy against feature dimensions")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, format="png")
    tmp.replace(path)


def write_docs(results: dict, docs: Path, cmd: str, model_id: str, spec) -> None:
    """docs/classify.md (the table, how it was made) and docs/classify.png."""
    md = table_markdown(results)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "classify.md").write_text(
        "# Downstream classifier: logistic regression on bertfeat features\n\n"
        f"Made by `{cmd}` (bertfeat features of {model_id}, pooling {spec.pooling}, "
        f"{'L2-normalized' if spec.normalize else 'not normalized'}, max length {spec.max_length}; bertfeat `PCA` "
        "fitted on the train features only; scikit-learn `StandardScaler` + `LogisticRegression`, C in "
        "{0.01, 0.1, 1, 10} chosen by 5-fold cross-validation on train). Test accuracy in %.\n\n"
        + md + "\n\n"
        "The last column is the SBERT paper's frozen BERT-base-uncased mean-pooling features + logistic regression "
        "(arXiv:1908.10084, Table 5): a different, larger model (768 dimensions, 110M parameters vs 22M), shown for "
        "orientation only; it is not a number this script reproduces.\n\n"
        "![accuracy vs dimensions](classify.png)\n",
        encoding="utf-8")
    plot(results, docs / "classify.png")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Logistic regression on bertfeat features (SST-2, TREC).")
    ap.add_argument("--data", type=Path, default=DATA, help="the full data sets (default $BERTFEAT_DATA, else ../shared/data)")
    ap.add_argument("--model", default=None, help="bertfeat model (default all-MiniLM-L6-v2)")
    ap.add_argument("--pooling", default=None, help="pooled, cls, mean or max (default: the model's)")
    ap.add_argument("--normalize", action="store_true", help="L2-normalize the features")
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "classify", help="feature cache directory")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs", help="where classify.md and classify.png go")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N train and test rows (smoke test; N >= 128 for the PCA sizes)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    tasks = load_tasks(args.data)
    if args.limit:
        tasks = {n: {s: (x[: args.limit], y[: args.limit]) for s, (x, y) in t.items()} for n, t in tasks.items()}
    encoder = Encoder(args.model)
    results = run(tasks, encoder, args.cache, args.pooling, args.normalize)
    print(table_markdown(results))
    cmd = " ".join(["python examples/classify.py", *(argv if argv is not None else sys.argv[1:])])
    write_docs(results, args.docs, cmd, encoder.model_id, encoder.spec(args.pooling, normalize=args.normalize))
    print(f"wrote {args.docs / 'classify.md'} and {args.docs / 'classify.png'} in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
