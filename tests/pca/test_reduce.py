"""bertfeat.pca.reduce: file-level PCA fit / transform; what a reduced file records."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bertfeat
from bertfeat.features import read_feature_metadata, read_features
from bertfeat.pca.reduce import fit_pca_file, reduce_features_file
from extract_util import tiny_model, write_csv


def test_a_transformed_file_keeps_the_extractions_counts_and_records_when_it_was_reduced(tmp_path):
    """pca transform copied the source's provenance but wrote "rows" as a bare count (the documented object, read /
    written / rejected ..., became an int: meta["rows"]["written"] raised TypeError); command and created stay the
    extraction's."""
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"sentence number {i}"] for i in range(30)] + [[""]])
    feats = tmp_path / "f.parquet"
    bertfeat.extract(src, feats, model=tiny_model(), on_bad_row="skip")
    pca = fit_pca_file(feats, 4)
    out = reduce_features_file(feats, tmp_path / "r.parquet", pca)
    before, after = read_feature_metadata(feats), read_feature_metadata(out)
    assert before["rows"]["read"] == 31 and before["rows"]["rejected"] == 1
    assert after["rows"] == {**before["rows"], "written": 30}
    assert after["command"] == before["command"] and after["created"] == before["created"]  # the extraction's
    assert after["pca"]["n_components"] == 4 and after["pca"]["n_samples"] == 30
    ids, X = read_features(out)[:2]
    assert X.shape == (30, 4) and np.isfinite(X).all()


def test_pca_fit_and_transform_read_a_dask_output_directory(tmp_path, capsys):
    """extract --engine dask writes a directory of part files; verify and report --probe read it, pca fit / transform
    refused it ("is a directory, not a feature file"). Its parts are read in order, as one file."""
    from bertfeat import PCA
    from bertfeat.cli.app import main
    from bertfeat.features import FeatureWriter, open_features

    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 6)).astype(np.float32) * np.linspace(3, 0.5, 6).astype(np.float32)
    d = tmp_path / "dask_out.parquet"
    d.mkdir()
    meta = {"fingerprint": {"model_id": "m", "pooling": "mean", "layers": [-1]}}
    for k, (a, b) in enumerate([(0, 20), (20, 50)]):
        with FeatureWriter(d / f"part-{k:05d}.parquet", dim=6, metadata=meta) as w:
            w.write(list(range(a, b)), X[a:b])
    run_meta = {**meta, "rows": {"read": 51, "written": 50, "rejected": 1}, "engine": "dask", "partitions": 2}
    (d / "_bertfeat.json").write_text(json.dumps(run_meta))  # the run's provenance, beside the parts
    src = open_features(d)
    assert (src.rows, src.dim) == (50, 6)
    assert src.meta == run_meta and read_feature_metadata(d) == run_meta  # not the first part's (partition 0's counts)
    assert main(["pca", "fit", str(d), "-n", "3", "-o", str(tmp_path / "p.npz"), "-q"]) == 0, capsys.readouterr().err
    pca = PCA.load(tmp_path / "p.npz")
    ref = PCA(3, solver="covariance").fit(X)
    np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, rtol=1e-6)
    assert main(["pca", "transform", str(d), "--pca-model", str(tmp_path / "p.npz"), "-o", str(tmp_path / "r.parquet")]) == 0
    ids, Y = read_features(tmp_path / "r.parquet")[:2]
    assert list(ids) == list(range(50))
    assert read_feature_metadata(tmp_path / "r.parquet")["rows"] == {"read": 51, "written": 50, "rejected": 1}
    np.testing.assert_array_equal(Y, pca.transform_rows(X).astype(np.float32))


def _write_features(path, X, fingerprint):
    from bertfeat.features import FeatureWriter

    with FeatureWriter(path, dim=X.shape[1], metadata={"model": "m", "fingerprint": fingerprint}) as w:
        w.write(list(range(len(X))), X)
    return path


def test_merge_refuses_pcas_of_features_with_other_settings_and_counts_every_row(tmp_path):
    """Two PCAs fitted on files of different feature settings (mean- vs cls-pooled) merged without a word, and the
    merge's source_ kept the first file's rows (300 where n_samples_ was 600). Now the source fingerprints are compared
    as check_fingerprint compares them, and the merged source counts both files' rows and names both files."""
    sk = pytest.importorskip("sklearn.decomposition")
    from bertfeat.errors import BertfeatError

    rng = np.random.default_rng(2)
    X = (rng.standard_normal((600, 8)) * np.linspace(3, 0.5, 8) + 1.0).astype(np.float32)
    fp = {"model_id": "m", "weights_sha256": "ab12", "pooling": "mean", "layers": [-1], "normalize": False}
    a = _write_features(tmp_path / "a.parquet", X[:300], fp)
    b = _write_features(tmp_path / "b.parquet", X[300:], fp)
    cls = _write_features(tmp_path / "cls.parquet", X[300:], fp | {"pooling": "cls"})
    first = fit_pca_file(a, 3, accumulate="float64")
    with pytest.raises(BertfeatError) as e:
        first.merge(fit_pca_file(cls, 3, accumulate="float64"))
    assert e.value.message == ('cannot merge PCAs fitted on features from different sources (pooling: this PCA "mean" '
                               'vs the other "cls") - merge partial fits of features extracted with the same model and '
                               'settings')
    merged = first.merge(fit_pca_file(b, 3, accumulate="float64"))
    assert merged.n_samples_ == 600 and merged.source_["rows"] == 600 and merged.fingerprint_ == fp
    assert merged.source_["features"] == [str(a), str(b)] and first.source_["rows"] == 300  # its inputs unchanged
    ref = sk.PCA(3, svd_solver="full").fit(X.astype(np.float64))
    np.testing.assert_allclose(merged.explained_variance_, ref.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(merged.components_, ref.components_, rtol=0, atol=1e-10)
    assert first.merge(fit_pca_file(a, 3)).source_ == first.source_ | {"rows": 600}  # one file twice: named once


def test_pca_fit_on_a_float16_file_is_sklearns_on_the_upcast_data_and_transform_writes_float16(tmp_path, capsys):
    from sklearn.decomposition import PCA as SkPCA

    from bertfeat.features import FeatureWriter
    from extract_util import run

    rng = np.random.default_rng(5)
    X = (rng.standard_normal((400, 12)) @ rng.standard_normal((12, 12))).astype(np.float32)
    src = tmp_path / "f.npy"
    with FeatureWriter(src, dim=12, dtype="float16") as w:
        w.write(None, X)
    X16 = X.astype(np.float16).astype(np.float32)
    pca = fit_pca_file(src, n_components=5)
    sk = SkPCA(n_components=5, svd_solver="full").fit(X16.astype(np.float64))
    np.testing.assert_allclose(pca.mean_, sk.mean_, atol=1e-6)
    np.testing.assert_allclose(pca.explained_variance_, sk.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(np.abs(pca.components_ @ sk.components_.T), np.eye(5), atol=1e-5)
    model = tmp_path / "m.npz"
    pca.save(model)
    for dtype in ("float32", "float16"):
        rc, _, err = run(capsys, "pca", "transform", src, "--pca-model", model, "-o", tmp_path / f"r{dtype}.parquet",
                         "--dtype", dtype, "-q")
        assert rc == 0, err
    _, R32, _ = read_features(tmp_path / "rfloat32.parquet")
    _, R16, meta = read_features(tmp_path / "rfloat16.parquet")
    assert np.array_equal(R16, R32.astype(np.float16).astype(np.float32)) and meta["dtype"] == "float16"
    assert read_feature_metadata(tmp_path / "rfloat32.parquet")["dtype"] == "float32"
    rc, _, err = run(capsys, "pca", "transform", src, "--pca-model", model, "-o", tmp_path / "x.parquet", "--dtype", "bf16")
    assert rc == 1 and "unknown --dtype bf16 - choose one of float32, float16" in err


def test_pca_transform_of_features_far_from_zero_is_sklearns(tmp_path, capsys):
    """`bertfeat pca transform` projected the file's float32 rows before centring them: with every feature offset by
    1e6 the written projections were 1.4 % (of their size) off scikit-learn's; centred first, float32 rounding."""
    from sklearn.decomposition import PCA as SkPCA

    from extract_util import run

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((500, 16)) @ rng.standard_normal((16, 16)) + 1e6).astype(np.float32)
    src = _write_features(tmp_path / "f.parquet", X, {"model_id": "m", "pooling": "mean", "layers": [-1]})
    model = tmp_path / "m.npz"
    assert run(capsys, "pca", "fit", src, "-n", "4", "-o", model, "-q")[0] == 0
    rc, _, err = run(capsys, "pca", "transform", src, "--pca-model", model, "-o", tmp_path / "r.parquet", "-q")
    assert rc == 0, err
    ids, Y = read_features(tmp_path / "r.parquet")[:2]
    ref = SkPCA(4, svd_solver="full").fit(X.astype(np.float64)).transform(X.astype(np.float64))
    assert list(ids) == list(range(500)) and Y.dtype == np.float32
    assert np.abs(Y - ref).max() <= 1e-6 * np.abs(ref).max()


def test_pca_fit_and_transform_name_a_csv_overflow_and_a_parquet_null_as_the_file_holds_them(tmp_path, capsys):
    """A CSV cell 1e39 was refused as "features contain NaN or inf ... column 1 (inf)", a null inside a Parquet
    embedding as "(nan)": values the files do not hold. Both name the file, row, column and value as written now."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertfeat import PCA
    from extract_util import run

    X = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    csv_path = tmp_path / "e.csv"
    _write_features(csv_path, X, {"model_id": "m", "pooling": "mean", "layers": [-1]})
    lines = csv_path.read_text().splitlines()
    cells = lines[3].split(",")  # row 2
    lines[3] = ",".join([*cells[:2], "1e39", *cells[3:]])  # column f1
    csv_path.write_text("\n".join(lines) + "\n")
    values = X.ravel().tolist()
    values[3 * 3 + 2] = None  # row 3, value 2
    pq_path = tmp_path / "n.parquet"
    emb = pa.FixedSizeListArray.from_arrays(pa.array(values, pa.float32()), 3)
    pq.write_table(pa.table({"row": pa.array(range(6)), "embedding": emb}), pq_path)
    model = tmp_path / "m.npz"
    PCA(2).fit(X).save(model)
    said = {csv_path: f"{csv_path}: row 2, column 'f1' holds '1e39', beyond float32's range (|x| < 3.4e38), in which "
                      "bertfeat reads features - write a number within that range there (scale the features into it), "
                      "or re-extract the features",
            pq_path: f"{pq_path}: row 3, column 'embedding': its value 2 (of 3, counted from 0) is null, not a number - "
                     "write a number there (every value of an embedding is a feature), or re-extract the features"}
    for path, message in said.items():
        for args in (["pca", "fit", path, "-n", "2", "-o", tmp_path / "f.npz", "-q"],
                     ["pca", "transform", path, "--pca-model", model, "-o", tmp_path / "r.parquet", "-q"]):
            rc, _, err = run(capsys, *args)
            assert (rc, err) == (1, f"Error: {message}\n")
            assert not (tmp_path / "f.npz").exists() and not (tmp_path / "r.parquet").exists()
