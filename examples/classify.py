"""Downstream classifier on bertfeat features: SST-2 and TREC, as plain scikit-learn pipelines.

    pip install -e ".[examples]"          # scikit-learn: an example dependency, not a run-time one
    python examples/classify.py           # minutes of CPU the first time; reruns use the cache

The pattern to copy: one scikit-learn pipeline from texts to labels,

    texts -> bertfeat.sklearn.TextFeatures -> bertfeat.PCA -> StandardScaler -> LogisticRegression

fitted on the train split only. For the table, one GridSearchCV per PCA width (16, 32, 64, 128, and
no PCA) chooses C by 5-fold cross-validation on train, and the test accuracy is reported. Then one
GridSearchCV over the PCA width, the pooling (the model's own embedding, or CLS) and C picks the
model to keep: it is saved with joblib, loaded back and asked about new sentences.
``TextFeatures(cache=True)`` keeps each text's vector in memory, so every sentence is encoded once
per pooling, not once per fold and grid point. Writes docs/classify.md and docs/classify.png.

Data (``BERTFEAT_DATA``, default ../shared/data, see its README):
  SST-2  sst2/stsa.binary.{train,test}  6,920 / 1,821  `<label 0/1> <sentence>`, UTF-8
  TREC   trec/TREC.{train,test}         5,452 / 500    `COARSE:fine question`, latin-1, 6 coarse classes
"""

from __future__ import annotations

import bertfeat  # noqa: F401  first, before NumPy: it picks OpenBLAS's kernels as the CLI does (ops/threads.py)
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from bertfeat import PCA

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BERTFEAT_DATA", ROOT.parent / "shared" / "data"))  # the full data sets
DIMS = (16, 32, 64, 128)
CS = (0.01, 0.1, 1.0, 10.0)
POOLINGS = (None, "cls")  # None: the model's own embedding (all-MiniLM-L6-v2: mean, normalized)
NEW_SENTENCES = ["a gripping , beautifully acted film .", "a dull , lifeless mess .",
                 "What is the capital of Peru ?", "Who wrote Hamlet ?"]
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


# --------------------------------------------------------------------------- the pipeline
def text_classifier(model: str | None = None, precision: str = "fp32"):
    """texts -> bertfeat features -> bertfeat PCA -> standardize -> logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from bertfeat.sklearn import TextFeatures

    # cache=True: each text is encoded once per process, however many folds and grid points see it
    return Pipeline([("features", TextFeatures(model, precision=precision, cache=True)), ("pca", PCA()),
                     ("scale", StandardScaler()), ("clf", LogisticRegression(max_iter=5000))])


def grid_search(pipe, grid: dict, seed: int = 0):
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    return GridSearchCV(pipe, grid, cv=StratifiedKFold(5, shuffle=True, random_state=seed))


def run(tasks: dict, model: str | None, dims=DIMS, poolings=POOLINGS, save_dir: Path | None = None,
        precision: str = "fp32") -> dict:
    """-> {task: {"raw": acc, 16: acc, ..., "_best": params, "_best_acc": acc, "_predictions": [...]}}."""
    results: dict = {}
    for name, t in tasks.items():
        (tr_texts, ytr), (te_texts, yte) = t["train"], t["test"]
        print(f"{name}: {len(tr_texts):,} train / {len(te_texts):,} test, {len(set(ytr.tolist()))} classes", file=sys.stderr)
        pipe = text_classifier(model, precision)
        row: dict = {"_sizes": (len(ytr), len(yte))}
        for k in (None, *dims):  # one width at a time, C by cross-validation on train
            t0 = time.perf_counter()
            search = grid_search(pipe, {"pca": ["passthrough" if k is None else PCA(k)], "clf__C": list(CS)})
            search.fit(tr_texts, ytr)
            row["raw" if k is None else k] = 100.0 * float((search.predict(te_texts) == yte).mean())
            row[f"_C{'raw' if k is None else k}"] = search.best_params_["clf__C"]
            if k is not None:
                row[f"_var{k}"] = 100.0 * float(np.sum(search.best_estimator_["pca"].explained_variance_ratio_))
            else:
                row["_dim"] = search.best_estimator_["features"].n_features_out_
            print(f"  {'raw' if k is None else f'PCA {k}'}: {row['raw' if k is None else k]:.2f} "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        # the model to keep: width, pooling and C chosen together, saved, loaded back, used on new sentences
        best = grid_search(pipe, {"pca__n_components": list(dims), "features__pooling": list(poolings), "clf__C": list(CS)})
        best.fit(tr_texts, ytr)
        row["_best"] = {k: v for k, v in best.best_params_.items()}
        row["_best_acc"] = 100.0 * float((best.predict(te_texts) == yte).mean())
        if save_dir is not None:
            import joblib

            path = save_dir / f"{name.lower().replace('-', '')}.joblib"
            path.parent.mkdir(parents=True, exist_ok=True)
            joblib.dump(best.best_estimator_, path)
            row["_predictions"] = list(joblib.load(path).predict(NEW_SENTENCES))
            row["_model_file"] = str(path)
        results[name] = row
    return results


def accuracy_at(tasks: dict, model: str | None, chosen: dict, dims=DIMS, precision: str = "fp32") -> dict:
    """Test accuracies with C fixed to ``chosen[task]["_C" + width]`` (another run's cross-validated choice), one fit
    per width: {task: {"raw": acc, 16: acc, ...}}. Compares features under the same classifier."""
    out: dict = {}
    for name, t in tasks.items():
        (tr_texts, ytr), (te_texts, yte) = t["train"], t["test"]
        pipe = text_classifier(model, precision)
        out[name] = {}
        for k in (None, *dims):
            key = "raw" if k is None else k
            pipe.set_params(pca="passthrough" if k is None else PCA(k), clf__C=chosen[name][f"_C{key}"])
            pipe.fit(tr_texts, ytr)
            out[name][key] = 100.0 * float((pipe.predict(te_texts) == yte).mean())
    return out


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
    lines += ["", "One grid search over PCA width, pooling and C (5-fold CV on train) picks the model to keep: " + "; ".join(
        f"{name} {_fmt_params(r['_best'])}, test accuracy {r['_best_acc']:.2f}" for name, r in results.items()) + "."]
    return "\n".join(lines)


def _fmt_params(p: dict) -> str:
    pooling = p.get("features__pooling") or "the model's own embedding"
    return f"(PCA {p.get('pca__n_components')}, pooling {pooling}, C {p.get('clf__C')})"


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


def write_docs(results: dict, docs: Path, cmd: str, model_id: str, dims=DIMS) -> None:
    """docs/classify.md (the table, how it was made) and docs/classify.png."""
    md = table_markdown(results, dims)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "classify.md").write_text(
        "# Downstream classifier: logistic regression on bertfeat features\n\n"
        f"Made by `{cmd}`: one scikit-learn pipeline per task, texts -> `bertfeat.sklearn.TextFeatures` ({model_id}, "
        "the model's own embedding) -> bertfeat `PCA` -> `StandardScaler` -> `LogisticRegression`, fitted on the "
        "train split only, C in {0.01, 0.1, 1, 10} chosen by 5-fold cross-validation on train. Test accuracy in %.\n\n"
        + md + "\n\n"
        "The SBERT column is the paper's frozen BERT-base-uncased mean-pooling features + logistic regression "
        "(arXiv:1908.10084, Table 5): a different, larger model (768 dimensions, 110M parameters vs 22M), shown for "
        "orientation only; it is not a number this script reproduces.\n\n"
        "![accuracy vs dimensions](classify.png)\n",
        encoding="utf-8")
    plot(results, docs / "classify.png", dims)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Logistic regression on bertfeat features (SST-2, TREC), as scikit-learn pipelines.")
    ap.add_argument("--data", type=Path, default=DATA, help="the full data sets (default $BERTFEAT_DATA, else ../shared/data)")
    ap.add_argument("--model", default=None, help="bertfeat model (default all-MiniLM-L6-v2)")
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "classify", help="where the chosen models are saved (joblib)")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs", help="where classify.md and classify.png go")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8", "auto"],
                    help="bertfeat precision (bf16, int8 and auto need bertfeat[fast]; see docs/precision.md)")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N train and test rows (smoke test; 5-fold CV needs N >= 1.25 x the largest PCA width)")
    ap.add_argument("--dims", default=",".join(map(str, DIMS)), help="PCA widths, comma-separated (default 16,32,64,128)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    tasks = load_tasks(args.data)
    if args.limit:
        tasks = {n: {s: (x[: args.limit], y[: args.limit]) for s, (x, y) in t.items()} for n, t in tasks.items()}
    dims = tuple(int(k) for k in args.dims.split(","))
    results = run(tasks, args.model, dims=dims, save_dir=args.cache, precision=args.precision)
    print(table_markdown(results, dims))
    for name, r in results.items():
        print(f"{name}: saved {r['_model_file']}; reloaded, it says " + ", ".join(
            f"{s!r} -> {p}" for s, p in zip(NEW_SENTENCES, r["_predictions"])), file=sys.stderr)
    from bertfeat.model.hub import resolve_model

    cmd = " ".join(["python examples/classify.py", *(argv if argv is not None else sys.argv[1:])])
    write_docs(results, args.docs, cmd, resolve_model(args.model).model_id, dims)
    print(f"wrote {args.docs / 'classify.md'} and {args.docs / 'classify.png'} in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
