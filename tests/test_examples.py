"""examples/: the bundled sample, the data loaders of classify.py and sts.py, and short smoke runs.

The full runs (minutes of CPU) made docs/classify.md, docs/classify.png and docs/sts.md; here the
scripts run with --limit on a few rows, writing into a temporary directory. sts.py runs on the
committed STSb sample (tests/data); the rest needs the full data sets (BERTFEAT_DATA, see conftest).
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FULL_DATA, TEST_DATA, need, need_full_data

ROOT = Path(__file__).resolve().parent.parent


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sst2_sample_is_the_documented_sample(tmp_path):
    rows = list(csv.DictReader((ROOT / "examples" / "sst2_sample.csv").open(encoding="utf-8", newline="")))
    assert len(rows) == 300 and list(rows[0]) == ["id", "label", "text"]
    assert all(r["label"] in ("0", "1") and r["text"].strip() for r in rows)
    src = need_full_data("sst2", "stsa.binary.train")
    # the file is what make_sample.py writes, and each row is its line of stsa.binary.train
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_sample.py"), "--src", str(src), "-o", str(tmp_path / "s.csv")],
                   check=True, capture_output=True)
    assert (tmp_path / "s.csv").read_bytes() == (ROOT / "examples" / "sst2_sample.csv").read_bytes()
    lines = src.read_text(encoding="utf-8").splitlines()
    for r in rows[:20]:
        assert lines[int(r["id"]) - 1] == f"{r['label']} {r['text']}"


def test_classify_loaders():
    need_full_data()
    tasks = load("classify").load_tasks(FULL_DATA)
    sst, trec = tasks["SST-2"], tasks["TREC"]
    assert [len(sst[s][0]) for s in ("train", "test")] == [6920, 1821]
    assert [len(trec[s][0]) for s in ("train", "test")] == [5452, 500]
    assert sorted(set(sst["train"][1].tolist())) == [0, 1]
    assert sorted(set(trec["train"][1].tolist())) == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    assert set(trec["test"][1].tolist()) <= set(trec["train"][1].tolist())
    # latin-1 decoded (not skipped or mangled): some questions carry non-ASCII letters
    assert any(any(ord(ch) > 127 for ch in t) for t in trec["train"][0])
    assert all(not t.startswith(("ABBR:", "DESC:", "ENTY:", "HUM:", "LOC:", "NUM:")) for t in trec["train"][0])


def test_sts_loader():
    path = need_full_data("stsb", "sts-dev.csv")
    s1, s2, gold = load("sts").read_stsb(path)
    assert len(s1) == len(s2) == len(gold) == 1500
    assert gold.min() >= 0 and gold.max() <= 5
    assert s1[0] == "A man with a hard hat is dancing." and s2[0] == "A man wearing a hard hat is dancing."
    # rows with extra (licence) fields still take fields 5 and 6 as the sentences
    extra = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()) if len(line.split("\t")) > 7]
    assert extra and all("\t" not in s1[i] and "\t" not in s2[i] for i in extra)


def _run(args: list[str]) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def test_classify_smoke(tmp_path):
    need_full_data()
    need("sklearn")
    p = _run(["examples/classify.py", "--limit", "60", "--dims", "4,8", "--data", str(FULL_DATA), "--cache", str(tmp_path / "cache"),
              "--docs", str(tmp_path / "docs")])
    md = (tmp_path / "docs" / "classify.md").read_text()
    for row in ("| SST-2 | 60 / 60 |", "| TREC | 60 / 60 |"):
        assert row in md and row in p.stdout
    assert "| task | train / test | raw (384) | PCA 8 | PCA 4 |" in md and "picks the model to keep: SST-2 (PCA " in md
    assert (tmp_path / "docs" / "classify.png").stat().st_size > 10_000
    # the chosen pipelines were saved with joblib; loaded back they classify new sentences
    import joblib

    sst2 = joblib.load(tmp_path / "cache" / "sst2.joblib")
    assert [type(s).__name__ for _, s in sst2.steps] == ["TextFeatures", "PCA", "StandardScaler", "LogisticRegression"]
    assert set(sst2.predict(["a wonderful film .", "a terrible film ."]).tolist()) <= {0, 1}
    assert "SST-2: saved" in p.stderr and "'Who wrote Hamlet ?' ->" in p.stderr


def test_classify_pca_is_fitted_on_train_only(monkeypatch, tmp_path):
    """run() fits bertfeat's PCA on (folds of) the train texts only, never on test rows."""
    pytest.importorskip("sklearn")
    mod = load("classify")
    fitted = []

    class SpyPCA(mod.PCA):
        def fit(self, X, y=None):
            fitted.append(len(X))
            return super().fit(X)

    monkeypatch.setattr(mod, "PCA", SpyPCA)
    texts = [f"sentence number {i} is {'good' if i % 2 else 'bad'}" for i in range(50)]
    labels = np.array([i % 2 for i in range(50)])
    tasks = {"T": {"train": (texts[:40], labels[:40]), "test": (texts[40:], labels[40:])}}
    res = mod.run(tasks, None, dims=(4,), poolings=(None,))
    assert fitted and max(fitted) == 40 and set(fitted) <= {32, 40}  # 5-fold CV folds of 32, refits on all 40
    assert set(res["T"]) >= {"raw", 4, "_best", "_best_acc"} and res["T"]["_sizes"] == (40, 10)


def test_sts_smoke(tmp_path):
    """sts.py on the first 60 pairs of the committed STSb sample: every row's Spearman is the one computed
    here independently (bertfeat features, cosine, scipy's spearmanr), not only the published column."""
    spearmanr = need("scipy.stats").spearmanr
    from bertfeat import Encoder

    path = TEST_DATA / "stsb" / "sts-dev.csv"
    p = _run(["examples/sts.py", "--limit", "60", "--data", str(path), "--cache", str(tmp_path / "cache"),
              "--docs", str(tmp_path / "docs")])
    md = (tmp_path / "docs" / "sts.md").read_text()
    assert "| the model's own embedding (the default) | (none) | 384 |" in md
    assert "| mean, last layer | `--pooling mean --layers -1 --normalize` | 384 |" in md
    assert "--layer-agg concat --normalize` | 1536 |" in md
    sts = load("sts")
    assert md.count("\n| ") == len(sts.CONFIGS) + 1  # header + one row per configuration
    table = [line.split(" | ") for line in md.splitlines() if line.startswith("| ") and not line.startswith("| features")]
    rows = {cells[0][2:]: float(cells[3]) for cells in table}
    assert table[0][4].strip(" |") == "86.72"  # the published number sits in the model's own embedding's row only
    assert all(len(cells) == 5 and cells[4].strip(" |") == "" for cells in table[1:])
    s1, s2, gold = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines()[:60]:
        f = line.split("\t")
        gold.append(float(f[4]))
        s1.append(f[5])
        s2.append(f[6])
    enc = Encoder()
    for label, pooling, layers, agg in sts.CONFIGS[:2] + sts.CONFIGS[-2:]:
        a = enc.encode(s1, pooling=pooling, layers=layers, layer_agg=agg, normalize=True).astype(np.float64)
        b = enc.encode(s2, pooling=pooling, layers=layers, layer_agg=agg, normalize=True).astype(np.float64)
        rho = 100 * spearmanr((a * b).sum(1), gold).statistic
        print(f"{label}: sts.py {rows[label]:.2f}, computed here {rho:.4f}")
        assert abs(rows[label] - rho) <= 0.0051, (label, rows[label], rho)
    assert len(set(rows.values())) > 3  # the configurations really differ
    assert rows["the model's own embedding (the default)"] > 60  # a real model on real pairs, not noise
    assert p.stdout.strip() and p.stdout.strip() in md  # the table printed is the table written


def test_precision_check_cosine_reports_each_precision_against_fp32(tmp_path, monkeypatch):
    """precision_check.py cosine on the first 24 distinct sentences: its min / mean for bf16 are the ones computed here
    (fp32 and bf16 encodes, row-wise cosine), and its verdict and exit code follow MIN_COSINE."""
    need_full_data()
    out = tmp_path / "check.md"
    p = subprocess.run([sys.executable, "examples/precision_check.py", "cosine", "--limit", "24", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in out.read_text().splitlines()
            if line.startswith(("| bf16", "| int8"))}
    assert "| 24 sentences: cosine to fp32 | min | mean | below 0.999 |" in out.read_text()
    assert "bf16" in rows
    mins = [float(r[0]) for r in rows.values()]
    assert p.returncode == (0 if min(mins) >= 0.999 else 1), p.stderr[-2000:]
    assert ("cosine: PASS" if p.returncode == 0 else "cosine: FAIL") in p.stdout
    monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")  # as the script does: the same products on any CPU
    from bertfeat import Encoder

    texts = list(dict.fromkeys(load("sts").read_stsb(FULL_DATA / "stsb" / "sts-dev.csv")[0]))[:24]
    a, b = Encoder().encode(texts), Encoder(precision="bf16").encode(texts)
    cos = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert rows["bf16"][0] == f"{cos.min():.5f}" and rows["bf16"][1] == f"{cos.mean():.5f}"
