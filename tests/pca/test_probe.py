"""bertfeat.pca.probe: the linear probe of a PCA report, against scikit-learn's RidgeClassifier on the same folds."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.cli.app import main
from bertfeat.errors import BertfeatError
from bertfeat.features import FeatureWriter
from bertfeat.pca.estimator import PCA
from bertfeat.pca.probe import default_ks, probe_file, ridge_accuracy, stratified_folds
from bertfeat.pca.reduce import reduce_features_file

D = 24
FP = {"model_id": "m", "pooling": "mean", "layers": [-1]}


def blobs(n: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Class means apart in a few directions, noise in all D: the first components carry the label."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, D)) * np.r_[np.full(4, 2.0), np.full(D - 4, 0.3)]
    return (centres[y] + rng.standard_normal((n, D)) * np.linspace(1.5, 0.2, D)).astype(np.float32), y


def write(path, X, labels, **kw):
    extras = {"label": pa.string() if isinstance(labels[0], str) or labels[0] is None else pa.int64()}
    with FeatureWriter(path, dim=X.shape[1], metadata={"fingerprint": FP}, extra_columns=extras, **kw) as w:
        for s in range(0, len(X), 97):  # several chunks
            w.write(None, X[s:s + 97], {"label": labels[s:s + 97]})
    return path


def fitted(tmp_path, n: int, k: int):
    """n rows of 3 classes written to full.parquet, and a PCA(k) fitted on them with the file's fingerprint
    -> (X, y, the file, the PCA)."""
    X, y = blobs(n, 3)
    full = write(tmp_path / "full.parquet", X, y.tolist())
    pca = PCA(k).fit(X.astype(np.float64))
    pca.fingerprint_ = FP
    return X, y, full, pca


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_ridge_accuracy_equals_scikit_learns_ridge_classifier_on_the_same_folds(classes):
    sk = pytest.importorskip("sklearn")
    from sklearn.linear_model import RidgeClassifier
    from sklearn.model_selection import cross_val_score

    X, y = blobs(600, classes)
    fold = stratified_folds(y, 5, seed=3)
    cv = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(5)]
    ks = [1, 2, 5, D]
    got = ridge_accuracy(X, y, ks, fold, alpha=1.0)
    for k in ks:
        ref = cross_val_score(RidgeClassifier(alpha=1.0), X[:, :k].astype(np.float64), y, cv=cv)
        print(f"classes {classes} k {k}: bertfeat {np.round(got[k], 4)} scikit-learn {sk.__version__} {np.round(ref, 4)}")
        np.testing.assert_array_equal(got[k], ref)
    assert got[D] != got[1]  # the data make k matter
    assert ridge_accuracy(X, y, [D], fold, alpha=1e4)[D] != got[D]  # alpha reaches the solve


def test_stratified_folds_deal_each_class_evenly_and_repeat_with_the_seed():
    y = np.array([0] * 23 + [1] * 7 + [2] * 50)
    fold = stratified_folds(y, 5, seed=0)
    for c in range(3):
        counts = np.bincount(fold[y == c], minlength=5)
        assert counts.max() - counts.min() <= 1, (c, counts)
    sizes = np.bincount(fold, minlength=5)
    assert sizes.max() - sizes.min() <= 1  # a class continues where the last stopped: folds stay even
    np.testing.assert_array_equal(fold, stratified_folds(y, 5, seed=0))
    assert not np.array_equal(fold, stratified_folds(y, 5, seed=1))


def test_default_ks():
    assert default_ks(1) == [1] and default_ks(8) == [1, 2, 4, 8] and default_ks(100) == [1, 2, 4, 8, 16, 32, 64, 100]


def test_probe_file_reduced_and_full_features_agree(tmp_path):
    X, y, full, pca = fitted(tmp_path, 500, 8)
    reduced = reduce_features_file(full, tmp_path / "reduced.parquet", pca)
    a = probe_file(pca, full, "label")
    b = probe_file(pca, reduced, "label")
    print(json.dumps(a["accuracy"]), a["all_features"])
    assert (a["input"], b["input"]) == ("features", "components")
    assert [r["components"] for r in a["accuracy"]] == [1, 2, 4, 8]
    np.testing.assert_allclose([r["accuracy"] for r in a["accuracy"]], [r["accuracy"] for r in b["accuracy"]], atol=1 / 100)
    assert a["all_features"]["features"] == D and b["all_features"] is None
    assert a["rows"] == 500 and a["classes"] == 3 and sum(a["class_counts"].values()) == 500
    assert a["accuracy"][-1]["accuracy"] > a["majority_baseline"] + 0.2
    # the reference by hand: the same folds, ridge on the transformed rows
    fold = stratified_folds(y, 5, 0)
    ref = ridge_accuracy(pca.transform(X), y, [4], fold)[4]
    assert a["accuracy"][2]["accuracy"] == pytest.approx(np.mean(ref), abs=1e-12)


def test_reduced_features_without_provenance_are_judged_by_their_width(tmp_path):
    """A reduced CSV whose .json was lost: 'red.csv has 8 features per row; the PCA takes 24 (or its 8 components)',
    refusing the width it names as accepted. A file without provenance is judged by its width alone (docs/cli.md);
    one whose provenance records no PCA is refused, saying so."""
    X, y, full, pca = fitted(tmp_path, 300, 8)
    red = reduce_features_file(full, tmp_path / "red.csv", pca)
    with_json = probe_file(pca, red, "label")
    (tmp_path / "red.csv.json").unlink()
    without = probe_file(pca, red, "label")
    assert without["input"] == with_json["input"] == "components" and without["accuracy"] == with_json["accuracy"]
    narrow = write(tmp_path / "narrow.parquet", X[:, :8].copy(), y.tolist())  # provenance, no "pca" entry
    with pytest.raises(BertfeatError) as e:
        probe_file(pca, narrow, "label")
    assert e.value.message == (f"{narrow} has 8 features per row, as many as the PCA's components, but its provenance "
                               "records no PCA that reduced it - probe the features the PCA was fitted on (24 per row), "
                               "or the file pca transform (or extract with pca / pca_model) wrote")


def test_probe_file_samples_skips_unlabelled_rows_and_takes_string_labels(tmp_path):
    X, y = blobs(1000, 2)
    labels = ["pos" if v else "neg" for v in y]
    for i in range(0, 1000, 10):
        labels[i] = None
    path = write(tmp_path / "f.parquet", X, labels)
    pca = PCA(6).fit(X.astype(np.float64))
    pca.fingerprint_ = FP
    r = probe_file(pca, path, "label")
    assert (r["rows"], r["rows_unlabelled"]) == (900, 100) and set(r["class_counts"]) == {"neg", "pos"}
    s = probe_file(pca, path, "label", max_rows=300)
    assert s["rows"] == 300 and s["rows_unlabelled"] == 100
    assert s == probe_file(pca, path, "label", max_rows=300)  # the sample repeats with the seed
    assert s != probe_file(pca, path, "label", max_rows=300, seed=1)


def test_a_nan_written_as_text_is_no_label(tmp_path):
    """A label column whose text is NaN (a CSV's NaN, a JSONL NaN kept as text) was a class of its own ('NaN': 100
    rows, the probe's accuracy taken over it); docs/cli.md says a NaN is no label: it is left out and counted, as a
    float NaN, a null or an empty string; the same accuracy as those rows left out of the file."""
    X, y = blobs(1000, 2)
    labels = ["pos" if v else "neg" for v in y]
    for i in range(0, 1000, 10):
        labels[i] = ("NaN", "nan", "", None)[(i // 10) % 4]
    pca = PCA(6).fit(X.astype(np.float64))
    pca.fingerprint_ = FP
    r = probe_file(pca, write(tmp_path / "f.parquet", X, labels), "label")
    assert (r["rows"], r["rows_unlabelled"]) == (900, 100) and set(r["class_counts"]) == {"neg", "pos"}
    keep = [i for i in range(1000) if i % 10]
    alone = probe_file(pca, write(tmp_path / "g.parquet", X[keep], [labels[i] for i in keep]), "label")
    assert alone["accuracy"] == r["accuracy"]
    assert probe_file(pca, write(tmp_path / "h.parquet", X, ["NA" if x is None else x for x in labels]),
                      "label")["rows_unlabelled"] == 75  # NA is a word: a class (pandas' other NA texts too)


def test_probe_file_takes_decimal_labels(tmp_path):
    """A Parquet decimal label column was refused as "holds Decimal values (1.10) - probe a column of class names or
    numbers": a decimal is a number; its classes are those of the same labels as integers."""
    X, y = blobs(400, 3)
    pca = PCA(6).fit(X.astype(np.float64))
    pca.fingerprint_ = FP
    with FeatureWriter(tmp_path / "dec.parquet", dim=X.shape[1], metadata={"fingerprint": FP},
                       extra_columns={"label": pa.decimal128(4, 2)}) as w:
        w.write(None, X, {"label": [Decimal(int(v)) + Decimal("0.10") for v in y]})
    dec = probe_file(pca, tmp_path / "dec.parquet", "label")
    ints = probe_file(pca, write(tmp_path / "int.parquet", X, y.tolist()), "label")
    assert dec["accuracy"] == ints["accuracy"] and dec["rows"] == ints["rows"] == 400
    assert sorted(dec["class_counts"].values()) == sorted(ints["class_counts"].values())


def test_probe_file_errors(tmp_path):
    X, y = blobs(200, 2)
    pca = PCA(4).fit(X.astype(np.float64))
    path = write(tmp_path / "f.parquet", X, y.tolist())
    with pytest.raises(BertfeatError) as e:
        probe_file(pca, path, "class")
    assert e.value.message == (f"{path} has no column 'class' (its columns beside the features: label) - extract with keep='class' to "
                               "keep the label beside the features, or name one of its columns")
    wide = tmp_path / "w.csv"
    with FeatureWriter(wide, dim=X.shape[1], metadata={"fingerprint": FP}, extra_columns={"label": pa.int64()}) as w:
        w.write(None, X, {"label": y.tolist()})
    for name, src in (("f3", wide), ("embedding", path)):  # the features themselves (a wide file's f3)
        with pytest.raises(BertfeatError) as e:
            probe_file(pca, src, name)
        assert e.value.message == (f"{src}: {name!r} holds the features, which cannot be the label - pass label with one "
                                   "of its columns beside the features (label), or extract again with keep='COLUMN' to "
                                   "keep a label column beside the features")
    with pytest.raises(BertfeatError, match=f"has no column 'f{X.shape[1]}'"):  # past the last feature: a missing column
        probe_file(pca, wide, f"f{X.shape[1]}")
    one = write(tmp_path / "one.parquet", X, [1] * 200)
    with pytest.raises(BertfeatError, match="has 1 class\\(es\\) in 200 labelled rows - a probe needs at least two"):
        probe_file(pca, one, "label")
    ids = write(tmp_path / "ids.parquet", X, list(range(200)))
    with pytest.raises(BertfeatError, match="has 200 distinct values in 200 rows - a probe needs class labels"):
        probe_file(pca, ids, "label")
    few = write(tmp_path / "few.parquet", X, [1, 0] * 4 + [None] * 192)
    with pytest.raises(BertfeatError, match="has 8 labelled rows, too few for 5 folds - probe at least 10 labelled rows"):
        probe_file(pca, few, "label")
    with FeatureWriter(tmp_path / "lists.parquet", dim=D, extra_columns={"label": pa.list_(pa.int64())}) as w:
        w.write(None, X, {"label": [[int(v)] for v in y]})
    with pytest.raises(BertfeatError, match="holds list values \\(\\[\\d\\]\\) - probe a column of class names or numbers"):
        probe_file(pca, tmp_path / "lists.parquet", "label")
    narrow = write(tmp_path / "narrow.parquet", X[:, :10], y.tolist())
    with pytest.raises(BertfeatError, match=f"has 10 features per row; the PCA takes {D} \\(or its 4 components\\)"):
        probe_file(pca, narrow, "label")


def test_cli_report_probe_writes_and_shows_it(tmp_path, capsys):
    X, y = blobs(400, 3)
    feats = write(tmp_path / "f.parquet", X, y.tolist())
    assert main(["pca", "fit", str(feats), "-n", "8", "-o", str(tmp_path / "m.npz")]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "m.npz"), "-o", str(tmp_path / "p"), "--probe", str(feats),
                 "--label", "label"]) == 0
    out = capsys.readouterr().out
    probe = json.loads((tmp_path / "p.report.json").read_text())["probe"]
    assert probe["rows"] == 400 and [a["components"] for a in probe["accuracy"]] == [1, 2, 4, 8]
    assert "Linear probe: label" in out and "400 rows, 3 classes, 5-fold" in out
    shown = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3}
    for a in probe["accuracy"]:
        row = f"first {a['components']} components" if a["components"] > 1 else "first component"
        assert shown[row] == f"{100 * a['accuracy']:.2f} %"
    assert shown["all 24 features"] == f"{100 * probe['all_features']['accuracy']:.2f} %"
    assert shown["majority class"] == f"{100 * probe['majority_baseline']:.2f} %"
    md = (tmp_path / "p.report.md").read_text()
    assert f"| first 8 components | {100 * probe['accuracy'][-1]['accuracy']:.2f} % |" in md
    assert f"| all 24 features (no PCA) | {100 * probe['all_features']['accuracy']:.2f} % |" in md
    assert main(["report", str(tmp_path / "m.npz"), "-o", str(tmp_path / "q"), "--probe", str(feats)]) == 1
    assert not (tmp_path / "q.report.json").exists()
    assert capsys.readouterr().err.strip() == ("Error: --probe and --label go together - pass the feature file with "
                                               "--probe and its label column with --label, e.g. --probe feats.parquet "
                                               "--label label")
    assert main(["report", str(tmp_path / "m.npz"), "-o", str(tmp_path / "q"), "--probe", str(feats),
                 "--label", "nope"]) == 1
    assert capsys.readouterr().err.strip() == (f"Error: {feats} has no column 'nope' (its columns beside the features: label) - extract "
                                               "with --keep nope to keep the label beside the features, or name one "
                                               "of its columns")
    assert not (tmp_path / "q.report.json").exists()


def test_cli_pca_fit_label_probes_the_fitted_file_and_checks_the_column_first(tmp_path, capsys, monkeypatch):
    X, y = blobs(300, 2)
    feats = write(tmp_path / "f.parquet", X, ["yes" if v else "no" for v in y])
    assert main(["pca", "fit", str(feats), "-n", "6", "-o", str(tmp_path / "m.npz"), "--label", "label",
                 "--probe-rows", "200"]) == 0
    probe = json.loads((tmp_path / "m.report.json").read_text())["probe"]
    assert probe["rows"] == 200 and probe["all_features"]["features"] == D and probe["class_counts"].keys() == {"no", "yes"}
    assert "Linear probe: label" in capsys.readouterr().out
    import bertfeat.pca.reduce as reduce

    def no_fit(*a, **k):
        raise AssertionError("fitted before the label column was checked")

    monkeypatch.setattr(reduce, "fit_pca_file", no_fit)
    assert main(["pca", "fit", str(feats), "-n", "6", "-o", str(tmp_path / "n.npz"), "--label", "Label"]) == 1
    assert "has no column 'Label' (its columns beside the features: label)" in capsys.readouterr().err
    assert not list(tmp_path.glob("n*"))


def test_probe_file_refuses_features_of_another_source_or_another_pca(tmp_path):
    X, y = blobs(300, 2)
    pca = PCA(5).fit(X.astype(np.float64))
    pca.fingerprint_ = FP
    path = write(tmp_path / "f.parquet", X, y.tolist())
    with FeatureWriter(tmp_path / "cls.parquet", dim=D, metadata={"fingerprint": FP | {"pooling": "cls"}},
                       extra_columns={"label": pa.int64()}) as w:
        w.write(None, X, {"label": y.tolist()})
    with pytest.raises(BertfeatError) as e:
        probe_file(pca, tmp_path / "cls.parquet", "label")
    assert e.value.message == ('the features come from a different source than the PCA was fitted on (pooling: model '
                               '"mean" vs features "cls") - probe features extracted with the model and settings the '
                               'PCA was fitted on')
    other = PCA(5).fit(X[:200].astype(np.float64))
    other.fingerprint_ = FP
    reduced = reduce_features_file(path, tmp_path / "r.parquet", other)
    with pytest.raises(BertfeatError, match="r.parquet was reduced by another PCA model \\(variance kept .*; 200 rows fitted, this one 300\\)"):
        probe_file(pca, reduced, "label")
    assert probe_file(other, reduced, "label")["input"] == "components"


def test_extract_label_checks_and_a_label_the_probe_cannot_use(tmp_path, capsys):
    """extract --label: refused up front without an output with columns or with the id column; a label with one
    class does not fail the run (features and PCA are complete): the report and a note say why there is no probe."""
    import bertfeat
    from extract_util import tiny_model, write_csv

    rows = [[f"sentence number {i} about {'cats' if i % 2 else 'dogs'}", "same", str(i)] for i in range(40)]
    src = write_csv(tmp_path / "c.csv", ["text", "label", "id"], rows)
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(src, tmp_path / "o.npy", model=tiny_model(), pca=4, label="label")
    assert e.value.message == ("label needs an output with columns (the probe reads the label back from it); npy holds "
                               "the features only - use format='parquet' or format='csv'")
    with pytest.raises(BertfeatError, match="label 'id' is the id column \\(id_column='id'\\)"):
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=4, label="id", id_column="id")
    PCA(4).fit(np.random.default_rng(0).standard_normal((50, 32))).save(tmp_path / "m.npz")
    with pytest.raises(BertfeatError, match="a given model's report is not rewritten: probe it with bertfeat report"):
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca_model=tmp_path / "m.npz", label="label")
    assert not list(tmp_path.glob("o*"))
    capsys.readouterr()
    assert main(["extract", str(src), "-o", str(tmp_path / "o.parquet"), "--model", str(tiny_model()), "--pca", "4",
                 "--label", "label"]) == 0
    err = capsys.readouterr().err
    why = "the label column 'label' of " + str(tmp_path / "o.parquet") + " has 1 class(es) in 40 labelled rows - a probe needs at least two classes"
    assert f"no linear probe of 'label': {why}" in " ".join(err.split())
    assert f"probe label none: {why}" in " ".join(err.split())
    report = json.loads((tmp_path / "o.pca.report.json").read_text())
    assert report["probe"] == {"label": "label", "skipped": why}
    assert f"None: {why}" in (tmp_path / "o.pca.report.md").read_text()
    assert pq.read_table(tmp_path / "o.parquet").column("label").to_pylist() == ["same"] * 40
    # a label that is also kept is kept once; a usable one gets its probe
    rows = [[f"sentence number {i} about {'cats' if i % 2 else 'dogs'}", "ab"[i % 2]] for i in range(40)]
    src = write_csv(tmp_path / "d.csv", ["text", "label"], rows)
    s = bertfeat.extract(src, tmp_path / "p.csv", model=tiny_model(), pca=4, label="label", keep="label")
    assert s.probe["rows"] == 40 and s.probe["classes"] == 2 and [a["components"] for a in s.probe["accuracy"]] == [1, 2, 4]
    assert json.loads((tmp_path / "p.pca.report.json").read_text())["probe"] == s.probe


def test_probe_of_reduced_features_with_every_component(tmp_path):
    """k == d: a reduced file is still known by its "pca" entry (not transformed a second time)."""
    X, y, full, pca = fitted(tmp_path, 400, D)
    reduced = reduce_features_file(full, tmp_path / "reduced.parquet", pca)
    a, b = probe_file(pca, full, "label"), probe_file(pca, reduced, "label")
    assert (a["input"], b["input"]) == ("features", "components")
    np.testing.assert_allclose([r["accuracy"] for r in a["accuracy"]], [r["accuracy"] for r in b["accuracy"]], atol=1 / 200)


def test_a_pca_of_every_component_of_reduced_features_probes_the_file_it_was_fitted_on(tmp_path, capsys):
    """pca fit -n all (or -n = width) on features an earlier PCA reduced: its probe of that very file was refused as
    'reduced by another PCA model ... ? rows fitted' (pca fit --label: a warning, no probe; report --probe: exit 1),
    the file taken for this model's output (found by audit). The file it was fitted on is its input; what it reduced
    in turn is still known as its output."""
    X, y, full, pca8 = fitted(tmp_path, 400, 8)
    red = reduce_features_file(full, tmp_path / "red.parquet", pca8)
    model = tmp_path / "all.npz"
    assert main(["pca", "fit", str(red), "-n", "all", "-o", str(model), "--label", "label", "-q"]) == 0
    assert capsys.readouterr().err == ""
    probe = json.loads((tmp_path / "all.report.json").read_text())["probe"]
    assert probe["input"] == "features" and probe["all_features"]["features"] == 8
    assert main(["report", str(model), "--probe", str(red), "--label", "label", "-o", str(tmp_path / "again"),
                 "-q"]) == 0
    again = json.loads((tmp_path / "again.report.json").read_text())["probe"]
    assert again["accuracy"] == probe["accuracy"]
    red2 = tmp_path / "red2.parquet"
    assert main(["pca", "transform", str(red), "--pca-model", str(model), "-o", str(red2), "-q"]) == 0
    assert probe_file(PCA.load(model), red2, "label")["input"] == "components"


def test_csv_feature_file_empty_label_is_no_label(tmp_path):
    X, y = blobs(60, 2)
    labels = ["" if i % 4 == 0 else ("a" if v else "b") for i, v in enumerate(y)]
    pca = PCA(4).fit(X.astype(np.float64))
    pca.fingerprint_ = FP
    for name in ("f.parquet", "f.csv"):
        r = probe_file(pca, write(tmp_path / name, X, labels), "label")
        assert (r["rows"], r["rows_unlabelled"]) == (45, 15) and set(r["class_counts"]) == {"a", "b"}, name


def test_pca_fit_label_the_probe_cannot_use_keeps_the_fit(tmp_path, capsys):
    X, _ = blobs(300, 2)
    feats = write(tmp_path / "f.parquet", X, ["same"] * 300)
    assert main(["pca", "fit", str(feats), "-n", "4", "-o", str(tmp_path / "m.npz"), "--label", "label", "-q"]) == 0
    why = f"the label column 'label' of {feats} has 1 class(es) in 300 labelled rows - a probe needs at least two classes"
    assert capsys.readouterr().err.strip() == f"Warning: no linear probe of 'label': {why}"
    assert (tmp_path / "m.npz").is_file()
    assert json.loads((tmp_path / "m.report.json").read_text())["probe"] == {"label": "label", "skipped": why}


def test_local_extract_interrupted_in_the_probe_keeps_its_model(tmp_path, monkeypatch):
    import bertfeat
    import bertfeat.pca.probe as probe
    from extract_util import tiny_model, write_csv

    src = write_csv(tmp_path / "c.csv", ["text", "label"], [[f"sentence {i} about {'ab'[i % 2]}", "ab"[i % 2]] for i in range(30)])

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(probe, "probe_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(src, tmp_path / "o.parquet", model=tiny_model(), pca=4, label="label")
    assert (tmp_path / "o.parquet").is_file() and (tmp_path / "o.pca.npz").is_file()
    assert "probe" not in json.loads((tmp_path / "o.pca.report.json").read_text())
