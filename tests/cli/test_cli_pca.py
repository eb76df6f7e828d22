"""`bertfeat pca fit|transform`, `bertfeat report`, and the file-level functions behind them."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.errors import BertfeatError
from bertfeat.features import FeatureWriter, open_features, read_feature_metadata, read_features
from bertfeat.pca.estimator import PCA
from bertfeat.pca.reduce import fit_pca_file, reduce_features_file

FP = {"model_id": "sentence-transformers/all-MiniLM-L6-v2", "weights_sha256": "53aa", "pooling": "mean", "layers": [-1], "normalize": False}
N, D = 3000, 24


def _run_main(argv):
    """The real entry point (`bertfeat ARGV` in-process) -> exit code. No local stand-in app: a command
    that is not registered in bertfeat.cli.app must fail here."""
    from bertfeat.cli.app import main

    return main(argv)


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(7)
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return ((rng.standard_normal((N, D)) * np.sqrt(0.8 ** np.arange(D))) @ Q.T + 0.3).astype(np.float32)


@pytest.fixture()
def features(tmp_path, X):
    """A Parquet feature file with string ids, extras and a fingerprint, like `bertfeat extract` writes."""
    path = tmp_path / "train.parquet"
    extras = {"n_tokens": pa.int32(), "truncated": pa.bool_()}
    with FeatureWriter(path, dim=D, id_name="sid", id_type=pa.string(), metadata={"model": "all-MiniLM-L6-v2", "fingerprint": FP}, extra_columns=extras) as w:
        for i in range(0, N, 500):
            rows = np.arange(i, min(i + 500, N))
            w.write([f"s{r}" for r in rows], X[rows], {"n_tokens": rows % 50, "truncated": rows % 7 == 0})
    return path


def test_fit_command_streams_and_writes_model_and_report(tmp_path, features, X, capsys):
    out = tmp_path / "models" / "pca.npz"
    code = _run_main(["pca", "fit", str(features), "-n", "0.9", "-o", str(out), "--batch-rows", "700"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Components needed" in captured.out and "95 %" in captured.out
    assert sorted(p.name for p in out.parent.iterdir()) == ["pca.npz", "pca.report.json", "pca.report.md", "pca.report.png"]
    model = PCA.load(out)
    exact = PCA(0.9, solver="svd").fit(X.astype(np.float64))
    assert model.n_components_ == exact.n_components_
    # default accumulate "mixed": float32 block products, float64 totals
    assert model.accumulate == "mixed" and "Warning" not in captured.err
    np.testing.assert_allclose(model.components_, exact.components_, atol=1e-6)
    np.testing.assert_allclose(model.explained_variance_ratio_, exact.explained_variance_ratio_, atol=1e-8)
    assert model.fingerprint_ == FP and model.n_samples_ == N
    report = json.loads((out.parent / "pca.report.json").read_text())
    assert report["n_components"] == exact.n_components_ and report["source"]["features"] == str(features)
    assert report["source"]["fingerprint"] == FP


def test_fit_command_accumulate_float64_is_exact(tmp_path, features, X, capsys):
    out = tmp_path / "pca64.npz"
    code = _run_main(["pca", "fit", str(features), "-n", "0.9", "-o", str(out), "--batch-rows", "700", "--accumulate", "float64", "-q"])
    err = capsys.readouterr().err
    assert code == 0 and err == "", err
    model, exact = PCA.load(out), PCA(0.9, solver="svd").fit(X.astype(np.float64))
    assert model.accumulate == "float64"
    np.testing.assert_allclose(model.components_, exact.components_, atol=1e-9)
    np.testing.assert_allclose(model.explained_variance_ratio_, exact.explained_variance_ratio_, atol=1e-12)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """Features wider than 4096 (where pca fit stops streaming) with over 1000 rows and k = 10: pca fit's auto picked
    the randomized solver there, without a seed (approximate, another model on every run)."""
    rng = np.random.default_rng(11)
    n, d = 1010, 4100
    low = (rng.standard_normal((n, 24)) * 0.8 ** np.arange(24)) @ rng.standard_normal((24, d))
    X = (low + 0.05 * rng.standard_normal((n, d))).astype(np.float32)
    path = tmp_path_factory.mktemp("wide") / "wide.parquet"
    with FeatureWriter(path, dim=d, metadata={"fingerprint": FP}) as w:
        w.write(list(range(n)), X)
    return path, X


@pytest.fixture()
def one_blas_thread():
    """SVDs of 1010 x 4100 take 1.3 s on one thread, 8 s on two oversubscribed ones."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        yield


def test_fit_command_on_wide_features_is_exact_by_default(tmp_path, wide, capsys, one_blas_thread):
    sk = pytest.importorskip("sklearn.decomposition")
    path, X = wide
    out = tmp_path / "w.npz"
    assert _run_main(["pca", "fit", str(path), "-n", "10", "-o", str(out), "-q"]) == 0, capsys.readouterr()
    model, ref = PCA.load(out), sk.PCA(10, svd_solver="full").fit(X.astype(np.float64))
    assert model.fit_solver_ == "svd" and model.solver == "auto"
    np.testing.assert_allclose(model.explained_variance_, ref.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(model.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-10)
    np.testing.assert_allclose(model.components_, ref.components_, rtol=0, atol=1e-8)
    assert model.noise_variance_ == pytest.approx(ref.noise_variance_, rel=1e-10)
    assert model.all_explained_variance_.shape == (1010,)  # the whole spectrum, for the report's suggestions


def test_fit_command_randomized_is_seeded(tmp_path, wide, capsys, one_blas_thread):
    """--solver randomized is approximate; --random-state N (default 0) makes it the same on every run, and the same
    as PCA(solver="randomized", random_state=N) in Python."""
    sk = pytest.importorskip("sklearn.decomposition")
    path, X = wide

    def fit(name, *seed):
        out = tmp_path / name
        argv = ["pca", "fit", str(path), "-n", "10", "-o", str(out), "-q", "--solver", "randomized", *seed]
        assert _run_main(argv) == 0, capsys.readouterr()
        return PCA.load(out)

    three, again, four, default = fit("a.npz", "--random-state", "3"), fit("b.npz", "--random-state", "3"), \
        fit("c.npz", "--random-state", "4"), fit("d.npz")
    assert three.fit_solver_ == "randomized" and three.random_state == 3 and default.random_state == 0
    np.testing.assert_array_equal(again.components_, three.components_)
    np.testing.assert_array_equal(fit("e.npz").components_, default.components_)
    assert not np.array_equal(four.components_, three.components_)
    np.testing.assert_array_equal(PCA(10, solver="randomized", random_state=3).fit(X).components_, three.components_)
    exact = sk.PCA(10, svd_solver="full").fit(X.astype(np.float64))
    np.testing.assert_allclose(three.explained_variance_, exact.explained_variance_, rtol=1e-3)  # approximate


def test_fit_command_deprecated_precision_flag_warns_and_fits_the_same(tmp_path, features, capsys):
    args = ["pca", "fit", str(features), "-n", "0.9", "--batch-rows", "700", "-q"]
    assert _run_main(args + ["-o", str(tmp_path / "new.npz"), "--accumulate", "float64"]) == 0
    capsys.readouterr()
    assert _run_main(args + ["-o", str(tmp_path / "old.npz"), "--precision", "float64"]) == 0
    assert capsys.readouterr().err == "Warning: --precision on pca fit is deprecated, use --accumulate\n"
    old, new = PCA.load(tmp_path / "old.npz"), PCA.load(tmp_path / "new.npz")
    assert old.accumulate == new.accumulate == "float64" and old.precision is None
    np.testing.assert_array_equal(old.components_, new.components_)
    np.testing.assert_array_equal(old.explained_variance_, new.explained_variance_)
    assert _run_main(args + ["-o", str(tmp_path / "both.npz"), "--precision", "float64", "--accumulate", "float64"]) == 0


def test_fit_command_refuses_precision_and_accumulate_that_disagree(tmp_path, features, capsys):
    code = _run_main(["pca", "fit", str(features), "-o", str(tmp_path / "p.npz"), "--accumulate", "mixed", "--precision", "float64"])
    err = capsys.readouterr().err
    assert code == 1 and err.splitlines() == [
        "Warning: --precision on pca fit is deprecated, use --accumulate",
        "Error: --accumulate mixed and --precision float64 disagree - pass --accumulate only (--precision is its deprecated name)",
    ]
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.parametrize("flag", ["--accumulate", "--precision"])
def test_fit_command_rejects_unknown_accumulate_naming_the_flag_given(tmp_path, features, capsys, flag):
    code = _run_main(["pca", "fit", str(features), "-o", str(tmp_path / "p.npz"), flag, "half"])
    err = capsys.readouterr().err
    assert code != 0 and f"Error: unknown {flag} half - use one of: mixed, float64" in err  # the flag, as typed
    assert not (tmp_path / "p.npz").exists()


def test_fit_pca_file_takes_precision_as_a_deprecated_name(features):
    new = fit_pca_file(features, 5, accumulate="float64", batch_rows=700)
    with pytest.warns(DeprecationWarning, match="use accumulate=") as w:
        old = fit_pca_file(features, 5, precision="float64", batch_rows=700)
    assert w[0].filename == __file__  # aimed at the caller's line
    assert old.accumulate == "float64" and old.precision is None  # the PCA returned no longer carries the old name
    np.testing.assert_array_equal(old.components_, new.components_)
    assert not np.array_equal(fit_pca_file(features, 5, batch_rows=700).components_, new.components_)  # mixed differs


def test_fit_pca_file_feeds_bounded_chunks(features, monkeypatch):
    sizes = []
    original = PCA.partial_fit

    def spy(self, X, y=None):
        sizes.append(len(X))
        return original(self, X)

    monkeypatch.setattr(PCA, "partial_fit", spy)
    pca = fit_pca_file(features, 5, batch_rows=400)
    assert max(sizes) <= 400 and sum(sizes) == N  # memory is bounded by the batch, not the file
    assert pca.n_components_ == 5 and pca.source_["rows"] == N


def test_transform_command_keeps_ids_extras_and_metadata(tmp_path, features, X, capsys):
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "8", "-o", str(model), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    for name in ("reduced.parquet", "reduced.npy", "reduced.csv"):
        out = tmp_path / name
        assert _run_main(["pca", "transform", str(features), "--pca-model", str(model), "-o", str(out), "--batch-rows", "999"]) == 0
        ids, Y, meta = read_features(out)
        pca = PCA.load(model)
        assert Y.shape == (N, 8) and Y.dtype == np.float32
        np.testing.assert_allclose(Y, pca.transform(X), rtol=0, atol=1e-5)
        assert ids[:2] == ["s0", "s1"] and len(ids) == N
        assert meta["fingerprint"] == FP and meta["model"] == "all-MiniLM-L6-v2" and meta["rows"] == N
        assert meta["pca"]["n_components"] == 8 and meta["pca"]["n_features_in"] == D
        assert meta["pca"]["model_path"] == str(model) and len(meta["pca"]["model_sha256"]) == 64
        assert meta["layout"]["extra_columns"] == {"n_tokens": "int32", "truncated": "bool"}


# --------------------------------------------------------------------------- a batch larger than any file
def test_batch_rows_past_int64_reads_a_file_in_one_batch(tmp_path, features, X, capsys):
    """Found by the CLI audit: --batch-rows past int64 ("all at once") ended pca fit and pca transform in the bug line
    (pyarrow's C long overflowed). Any batch larger than the file reads it whole: the same model, the same rows."""
    huge, model = str(10**20), tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "4", "-o", str(model), "-q"]) == 0
    pca = PCA.load(model)
    for name in ("r.parquet", "r.npy", "r.csv"):  # every format's reader, as transform's input and as fit's
        out, refit = tmp_path / name, tmp_path / f"{name}.npz"
        assert _run_main(["pca", "transform", str(features), "--pca-model", str(model), "-o", str(out), "-q",
                          "--batch-rows", huge]) == 0
        ids, Y, _ = read_features(out)
        np.testing.assert_allclose(Y, pca.transform(X), rtol=0, atol=1e-5)
        assert list(ids[:2]) == ["s0", "s1"] and len(ids) == N
        assert _run_main(["pca", "fit", str(out), "-n", "2", "-o", str(refit), "-q", "--batch-rows", huge]) == 0
        one = fit_pca_file(out, 2, batch_rows=N)
        np.testing.assert_array_equal(PCA.load(refit).components_, one.components_)
    assert capsys.readouterr() == ("", "")


def test_transform_refuses_other_features_unless_forced(tmp_path, features, X, capsys):
    model = tmp_path / "pca.npz"
    fit_pca_file(features, 4).save(model)
    other = tmp_path / "cls.parquet"
    with FeatureWriter(other, dim=D, metadata={"fingerprint": FP | {"pooling": "cls"}}) as w:
        w.write(None, X[:100])
    out = tmp_path / "r.parquet"
    assert _run_main(["pca", "transform", str(other), "--pca-model", str(model), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        'Error: the features come from a different source than the PCA was fitted on (pooling: model "mean" vs features "cls") - '
        "transform features extracted with the same model and settings, or pass --force (force=True) to transform anyway"
    )
    assert not out.exists()
    assert _run_main(["pca", "transform", str(other), "--pca-model", str(model), "-o", str(out), "--force"]) == 0
    _, Y, meta = read_features(out)
    assert Y.shape == (100, 4) and meta["pca"]["forced_fingerprint_mismatch"] == ["pooling"]


def test_reduce_refuses_other_width(tmp_path, features):
    pca = fit_pca_file(features, 3)
    narrow = tmp_path / "narrow.npy"
    with FeatureWriter(narrow, dim=D - 1, metadata={"fingerprint": FP}) as w:
        w.write(None, np.zeros((5, D - 1)))
    with pytest.raises(BertfeatError) as e:
        reduce_features_file(narrow, tmp_path / "o.parquet", pca)
    assert e.value.message == (
        f"{narrow} has {D - 1} features per row but the PCA was fitted on {D} - "
        "transform features from the same model, pooling, layers and truncate_dim the PCA was fitted on"
    )
    assert not (tmp_path / "o.parquet").exists()


def test_report_command_rerenders_saved_model(tmp_path, features, capsys):
    model = tmp_path / "pca.npz"
    fit_pca_file(features, 0.95).save(model)
    assert _run_main(["report", str(model), "-o", str(tmp_path / "again")]) == 0
    assert "Components needed" in capsys.readouterr().out
    report = json.loads((tmp_path / "again.report.json").read_text())
    assert report["n_components"] == PCA.load(model).n_components_
    assert report["source"]["model_file"] == str(model) and report["source"]["features"] == str(features)
    assert (tmp_path / "again.report.png").stat().st_size > 10_000


def test_cli_errors_become_one_line(tmp_path, features, capsys):
    assert _run_main(["pca", "fit", str(features), "-n", "lots", "-o", str(tmp_path / "p.npz")]) == 1
    assert capsys.readouterr().err.strip() == (
        "Error: --n-components 'lots' is not a number - "
        "give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), mle (Minka's choice), or 1.0 / all for every component"
    )
    assert _run_main(["pca", "fit", str(features), "-n", "1.5", "-o", str(tmp_path / "p.npz")]) == 1
    assert "Error: --n-components 1.5: a number of components must be whole" in capsys.readouterr().err
    assert _run_main(["pca", "fit", str(features), "-n", "25", "-o", str(tmp_path / "p.npz")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"Error: --n-components 25 is larger than n_features = {D} - "
        f"choose --n-components <= {D} (and no more than the rows fitted: the rows are counted as they stream in), or "
        "a fraction such as 0.95 to keep 95% of the variance"
    )
    assert _run_main(["report", str(tmp_path / "missing.npz")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"Error: PCA model file not found: {tmp_path / 'missing.npz'} - check the path, or fit one with `bertfeat pca fit`"
    )
    assert not (tmp_path / "p.npz").exists()


def test_a_bad_option_is_named_before_an_existing_output(tmp_path, features, capsys):
    """`pca fit -n 1.5 -o EXISTING` said 'already exists - pass --overwrite', and with --overwrite then named -n: the
    options' own errors come first, as extract's do (found by audit)."""
    out = tmp_path / "p.npz"
    out.write_bytes(b"old")
    assert _run_main(["pca", "fit", str(features), "-n", "1.5", "-o", str(out)]) == 1
    assert capsys.readouterr().err.startswith("Error: --n-components 1.5: a number of components must be whole - ")
    assert _run_main(["pca", "fit", str(features), "-n", "2", "--solver", "bogus", "-o", str(out)]) == 1
    assert capsys.readouterr().err == ("Error: unknown --solver bogus - use one of: auto, svd, covariance, randomized\n")
    assert out.read_bytes() == b"old"


@pytest.mark.parametrize("name", ["r.csv", "r.npy"])
def test_transform_refuses_a_nested_id_for_csv_and_npy(tmp_path, X, capsys, name):
    """A Parquet feature file whose ids are structs (an input's nested id column) reduces to Parquet only: a CSV or npy
    output is refused up front, as extract refuses it, and no temporary file is left (it was an unexpected ArrowInvalid
    with .r.npy.tmp-PID files behind)."""
    src = tmp_path / "nested.parquet"
    with FeatureWriter(src, dim=D, id_name="key", id_type=pa.struct([("a", pa.int64())]), metadata={"fingerprint": FP}) as w:
        w.write([{"a": i} for i in range(40)], X[:40])
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(src), "-n", "2", "-o", str(model), "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / name
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    fmt, ids_file = {"csv": ("CSV", ""), "npy": (".npy", "its ids and other columns go to its ids file, a CSV: ")}[name.split(".")[1]]
    assert err == (f"Error: {src}: its id column 'key' holds struct<a: int64> values, which a {fmt} output cannot hold "
                   f"({ids_file}a CSV cell holds one value, not a list, struct or map) - write a Parquet output (-o "
                   "NAME.parquet)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nested.parquet", "pca.npz", "pca.report.json",
                                                          "pca.report.md", "pca.report.png"]
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(tmp_path / "r.parquet"),
                      "--quiet"]) == 0
    ids, Y, _ = read_features(tmp_path / "r.parquet")
    assert ids[:2] == [{"a": 0}, {"a": 1}] and Y.shape == (40, 2)


def test_transform_of_features_without_provenance_warns_and_records_it(tmp_path, features, X, capsys):
    """A plain .npy (or one whose .json was lost) cannot be checked against the model's source: transformed, with a
    warning on stderr and ``source_checked: false`` in the output's provenance; with provenance neither appears."""
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "3", "-o", str(model), "--quiet"]) == 0
    bare = tmp_path / "bare.npy"
    np.save(bare, X[:50])
    capsys.readouterr()
    assert _run_main(["pca", "transform", str(bare), "--pca-model", str(model), "-o", str(tmp_path / "r.npy")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (f"Warning: {bare} has no provenance (for a .npy, its .json beside it), so it was not "
                                   f"checked against the features {model} was fitted on")
    _, Y, meta = read_features(tmp_path / "r.npy")
    assert meta["pca"]["source_checked"] is False and Y.shape == (50, 3)
    assert _run_main(["pca", "transform", str(features), "--pca-model", str(model), "-o", str(tmp_path / "r2.parquet")]) == 0
    assert "Warning" not in capsys.readouterr().err
    assert "source_checked" not in read_features(tmp_path / "r2.parquet")[2]["pca"]


def test_outputs_that_name_no_file_are_refused(tmp_path, features, capsys, monkeypatch):
    """-o "" (typer's '.') or an extension alone would write hidden files (.npz, ..report.json): each is refused with the
    flag to fix, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "2", "-o", str(model), "--quiet"]) == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    cases = [
        (["pca", "fit", str(features), "-n", "2", "-o", ""], "Error: the PCA model '' is empty - pass -o with a file name, e.g. -o pca100.npz"),
        (["pca", "fit", str(features), "-n", "2", "-o", ".npz"],
         "Error: the PCA model .npz is an extension with no name - pass -o with a file name, e.g. -o pca100.npz"),
        (["report", str(model), "-o", ""], "Error: the report prefix '' is empty - pass -o with a file name, e.g. -o pca100"),
        (["pca", "transform", str(features), "--pca-model", str(model), "-o", ".parquet"],
         "Error: the output .parquet is an extension with no name - pass -o with a file name, e.g. -o reduced.parquet"),
    ]
    for argv, message in cases:
        assert _run_main(argv) == 1, argv
        assert capsys.readouterr().err == message + "\n", argv
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_model_fitted_on_a_dataframe_transforms_feature_files_without_warnings(tmp_path, features, X, capsys):
    """PCA.save keeps feature_names_in_; bertfeat's own pipelines (pca transform, extract --pca-model, Dask) project a
    feature file's unnamed embedding rows without scikit-learn's "X does not have valid feature names" warning."""
    pd = pytest.importorskip("pandas")
    model = tmp_path / "df.npz"
    PCA(3).fit(pd.DataFrame(X, columns=[f"f{i}" for i in range(D)])).save(model)
    assert _run_main(["pca", "transform", str(features), "--pca-model", str(model), "-o", str(tmp_path / "r.parquet")]) == 0
    err = capsys.readouterr().err
    assert " ".join(err.split()) == f"wrote {tmp_path / 'r.parquet'} (3 components)" and "Warning" not in err
    _, Y, _ = read_features(tmp_path / "r.parquet")
    np.testing.assert_allclose(Y, PCA.load(model).transform_rows(X), rtol=0, atol=1e-6)


def test_fit_command_takes_mle(tmp_path, features, X, capsys):
    """`pca fit -n mle`: Minka's choice, scikit-learn's n_components_ on the same features (float64 statistics)."""
    from sklearn.decomposition import PCA as SkPCA

    out = tmp_path / "m.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "mle", "-o", str(out), "--accumulate", "float64", "-q"]) == 0
    fitted = PCA.load(out)
    assert fitted.n_components == "mle"
    assert fitted.n_components_ == SkPCA("mle", svd_solver="full").fit(X.astype(np.float64)).n_components_
    capsys.readouterr()
    few = tmp_path / "few.npy"
    np.save(few, X[:10])
    assert _run_main(["pca", "fit", str(few), "-n", "mle", "-o", str(tmp_path / "f.npz")]) == 1
    assert capsys.readouterr().err == (f"Error: --n-components mle needs at least as many samples as features (n_samples 10 "
                                       f"< n_features {X.shape[1]}), as scikit-learn's does - fit on more rows, or pass a "
                                       "number of components\n")


def test_the_randomized_solvers_refusals_name_the_flag(tmp_path, features, capsys):
    """-n 0.9 / mle with --solver randomized: the error said `a fractional n_components`, `n_components='mle'`."""
    for n, what in (("0.9", "a fractional --n-components"), ("mle", "--n-components mle")):
        assert _run_main(["pca", "fit", str(features), "-n", n, "-o", str(tmp_path / "r.npz"), "--solver", "randomized"]) == 1
        assert capsys.readouterr().err == (f"Error: {what} needs the whole spectrum, which the randomized solver does not "
                                           "compute - use --solver covariance or --solver svd, or pass a whole number of "
                                           "components\n")
    assert not (tmp_path / "r.npz").exists()


# --------------------------------------------------------------------------- what the commands print
def test_paths_are_printed_as_they_are_never_as_rich_markup(tmp_path, features, capsys):
    """`[train]` was taken for a style and dropped ("wrote feats.parquet"), `[/b]` and `[/]` for closing tags (an
    unexpected MarkupError after the files were written), `:smile:` for an emoji."""
    model = tmp_path / "f[" / "]g.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "3", "-o", str(model)]) == 0
    prefix = tmp_path / "f[" / "]g"
    assert capsys.readouterr().err == (f"wrote {model}, {prefix}.report.json, {prefix}.report.md, "
                                       f"{prefix}.report.png\n")
    for name in ("feats[train].parquet", "x[red]:smile:.parquet"):
        out = tmp_path / name
        assert _run_main(["pca", "transform", str(features), "--pca-model", str(model), "-o", str(out)]) == 0
        assert capsys.readouterr() == ("", f"wrote {out} (3 components)\n") and out.is_file()
    (tmp_path / "r[").mkdir()
    report = tmp_path / "r[" / "b]s"
    assert _run_main(["report", str(model), "-o", str(report)]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"wrote {report}.report.json, {report}.report.md, {report}.report.png\n"
    assert "Components needed" in captured.out


def test_wrote_lines_are_one_line_whatever_the_width(tmp_path, features, capsys):
    """stderr that is not a terminal is 80 columns to rich: a long path was hard-wrapped into two lines."""
    deep = tmp_path / ("d" * 70)
    deep.mkdir()
    model, out = deep / "pca.npz", deep / "reduced.parquet"
    assert _run_main(["pca", "fit", str(features), "-n", "2", "-o", str(model), "--overwrite"]) == 0
    assert capsys.readouterr().err.count("\n") == 1
    assert _run_main(["pca", "transform", str(features), "--pca-model", str(model), "-o", str(out)]) == 0
    assert capsys.readouterr().err == f"wrote {out} (2 components)\n"
    assert _run_main(["report", str(model), "--overwrite", "-q"]) == 0 and capsys.readouterr().err == ""
    assert _run_main(["report", str(model), "--overwrite"]) == 0
    assert capsys.readouterr().err == f"wrote {deep}/pca.report.json, {deep}/pca.report.md, {deep}/pca.report.png\n"


@pytest.mark.parametrize("argv, message", [
    (["pca", "fit", "{f}", "-o", "{t}/m.npz", "--batch-rows", "0"], "--batch-rows 0 is out of range - give 1 or more"),
    (["pca", "fit", "{f}", "-o", "{t}/m.npz", "--probe-rows", "9"], "--probe-rows 9 is out of range - give 10 or more"),
    (["pca", "transform", "{f}", "--pca-model", "{t}/m.npz", "-o", "{t}/r.parquet", "--batch-rows", "-1"],
     "--batch-rows -1 is out of range - give 1 or more"),
    (["report", "{t}/m.npz", "--probe-rows", "5"], "--probe-rows 5 is out of range - give 10 or more"),
    (["pca", "fit", "{f}", "-o", "{t}/m.npz", "--random-state", "-1"],
     "--random-state -1 is out of range - give 0 or more"),
    (["pca", "fit", "{f}", "-o", "-"], "the PCA model '-' means standard output, which bertfeat does not write to (its "
     "outputs are files, written atomically) - pass -o with a file name, e.g. -o pca100.npz"),
    (["pca", "transform", "{f}", "--pca-model", "{t}/m.npz", "-o", "-"], "the output '-' means standard output, which "
     "bertfeat does not write to (its outputs are files, written atomically) - pass -o with a file name, e.g. "
     "-o reduced.parquet"),
    (["report", "{t}/m.npz", "-o", "-"], "the report prefix '-' means standard output, which bertfeat does not write to "
     "(its outputs are files, written atomically) - pass -o with a file name, e.g. -o pca100"),
    (["pca", "fit", "{f}", "-n", "2", "-o", "{t}/l.npz", "--label", "sid"], "{f}: 'sid' is its id column, which names "
     "each row and cannot be the label - pass --label with one of its columns beside the features (n_tokens, truncated), or extract "
     "again with --keep COLUMN to keep a label column beside the features"),
    (["pca", "fit", "{f}", "-n", "2", "-o", "{t}/l.npz", "--label", "embedding"], "{f}: 'embedding' holds the "
     "features, which cannot be the label - pass --label with one of its columns beside the features (n_tokens, "
     "truncated), or extract again with --keep COLUMN to keep a label column beside the features"),
    (["report", "{t}/m.npz", "-o", "{t}/r", "--probe", "{f}", "--label", "embedding"], "{f}: 'embedding' holds the "
     "features, which cannot be the label - pass --label with one of its columns beside the features (n_tokens, "
     "truncated), or extract again with --keep COLUMN to keep a label column beside the features"),
    (["pca", "fit", "{t}/m.npz", "-o", "{t}/m2.npz"], "{t}/m.npz: a .npz is not a feature file - pass a feature file of "
     "`bertfeat extract` (.parquet, .npy or .csv); a PCA model (.npz) is applied with `bertfeat pca transform FEATURES "
     "--pca-model MODEL`"),
    (["pca", "transform", "{t}/m.npz", "--pca-model", "{t}/m.npz", "-o", "{t}/r.parquet"], "{t}/m.npz: a .npz is not a "
     "feature file - pass a feature file of `bertfeat extract` (.parquet, .npy or .csv); the PCA model (.npz) goes to "
     "--pca-model"),
])
def test_option_values_are_checked_as_the_house_checks_them(tmp_path, features, capsys, argv, message):
    """A count below its minimum reads like `extract --chunk-rows 0` (exit 1, not click's exit-2 usage block); `-o -`
    is no file; the id column is no label, nor is the features' column (the advice was --keep embedding, which
    extract refuses); a .npz is no feature file (the advice was "pass a .npz")."""
    work = tmp_path / "w"
    work.mkdir()
    assert _run_main(["pca", "fit", str(features), "-n", "2", "-o", str(work / "m.npz"), "-q"]) == 0
    before = sorted(p.name for p in work.iterdir())
    capsys.readouterr()
    fill = {"{f}": str(features), "{t}": str(work)}

    def filled(a):
        for k, v in fill.items():
            a = a.replace(k, v)
        return a

    assert _run_main([filled(a) for a in argv]) == 1
    assert capsys.readouterr() == ("", f"Error: {filled(message)}\n")
    assert sorted(p.name for p in work.iterdir()) == before


def test_report_help_examples_run_in_the_normal_workflow(tmp_path, features, capsys):
    """`pca fit` writes the report beside the model, so `report MODEL` alone is refused: the first example of
    `report --help` rewrites it with --overwrite."""
    import typer.main

    from bertfeat.cli.app import app

    epilog = typer.main.get_command(app).commands["report"].epilog
    first = epilog.split("\n\n")[1].strip()
    assert first == "bertfeat report feats.pca100.npz --overwrite"
    model = tmp_path / "feats.pca100.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "3", "-o", str(model), "-q"]) == 0
    assert _run_main(["report", str(model), "-q"]) == 1
    assert _run_main(["report", str(model), "--overwrite", "-q"]) == 0


# --------------------------------------------------------------------------- a fast --help (issue 43)
HELP_COMMANDS = [["--help"], ["--version"], ["extract", "--help"], ["sweep", "--help"], ["verify", "--help"],
                 ["pca", "--help"], ["pca", "fit", "--help"], ["pca", "transform", "--help"], ["report", "--help"],
                 ["info", "--help"], ["tokens", "--help"], ["attention", "--help"], ["fill-mask", "--help"],
                 ["cache", "--help"], ["cache", "info", "--help"]]
NUMERIC = ("numpy", "pyarrow", "numba", "matplotlib", "tokenizers", "safetensors", "scipy", "pandas", "dask")


def test_help_and_version_import_no_numeric_module():
    """`bertfeat --help`, `--version` and every command's help load Typer and rich only (benchmarks/bench_cli.py
    times them): each in a fresh interpreter, the numeric libraries must not be in sys.modules afterwards."""
    import subprocess
    import sys

    code = ("import sys\nfrom bertfeat.cli.app import main\nrc = main(sys.argv[1:])\n"
            f"print('LOADED', sorted({{m.split('.')[0] for m in sys.modules}} & set({NUMERIC!r})))\nsys.exit(rc)")
    for argv in HELP_COMMANDS:
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (argv, p.stderr)
        assert p.stdout.rstrip().splitlines()[-1] == "LOADED []", (argv, p.stdout[-300:])


def test_the_cli_spells_the_librarys_pca_defaults():
    from bertfeat.cli import pca as cli_pca
    from bertfeat.pca import validation as pca_checks, solvers as pca_solvers, probe

    assert cli_pca.SOLVERS == pca_solvers.SOLVERS
    assert cli_pca.DEFAULT_ACCUMULATE == pca_checks.DEFAULT_ACCUMULATE
    assert cli_pca.DEFAULT_FOLDS == probe.DEFAULT_FOLDS


def test_the_audits_cli_refusals_and_warnings(tmp_path, features, X, capsys):
    """Found by the CLI audit (each failed before): a file written into an input directory of Parquet parts became
    one of its parts (and the directory refusal advised just that); report --probe's file was no input, so
    --overwrite replaced it; a Parquet file named .csv ended in the bug line; --quiet hid transform's warning."""
    import shutil

    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "3", "-o", str(model), "--quiet"]) == 0
    data = tmp_path / "ds.parquet"  # a directory of parts, as extract --engine dask writes
    data.mkdir()
    shutil.copy(features, data / "part-00000.parquet")
    capsys.readouterr()
    assert _run_main(["pca", "transform", str(data), "--pca-model", str(model), "-o", str(data)]) == 1
    assert capsys.readouterr().err.endswith(f"e.g. -o {tmp_path / 'ds.reduced.parquet'}\n")  # beside it, not in it
    inside = data / "reduced.parquet"
    assert _run_main(["pca", "transform", str(data), "--pca-model", str(model), "-o", str(inside)]) == 1
    assert capsys.readouterr().err == (f"Error: the output {inside} is inside the input directory {data}, whose files "
                                       "are read as one dataset - pass -o with a path outside it\n")
    assert sorted(p.name for p in data.iterdir()) == ["part-00000.parquet"]

    probe = tmp_path / "pr.report.md"  # the report's own name: --overwrite would have replaced the probe's file
    shutil.copy(features, probe)
    assert _run_main(["report", str(model), "-o", str(tmp_path / "pr"), "--probe", str(probe), "--label", "sid",
                      "--overwrite"]) == 1
    assert "would replace the input" in capsys.readouterr().err
    assert probe.read_bytes() == features.read_bytes()

    fake = tmp_path / "parquet.csv"
    shutil.copy(features, fake)
    assert _run_main(["pca", "transform", str(fake), "--pca-model", str(model), "-o", str(tmp_path / "f.parquet")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {fake} is not a CSV text file (byte ") and "this is a bug" not in err

    bare = tmp_path / "bare.npy"
    np.save(bare, X[:20])
    assert _run_main(["pca", "transform", str(bare), "--pca-model", str(model), "-o", str(tmp_path / "b.npy"), "-q"]) == 0
    assert capsys.readouterr().err.startswith(f"Warning: {bare} has no provenance")


def test_a_nan_or_inf_in_a_feature_file_is_named_by_file_row_id_and_column(tmp_path, X, capsys):
    """pca fit, pca transform and report --probe named a NaN or inf by the row of the chunk or sample the PCA was
    given ("features contain NaN or inf: 1 value(s), first at row 0, column 1"): no file, no id, and for the probe a
    row of its sample, not of the file; a reduced file's NaN went into the probe unchecked. Now the file's row and
    id, whatever the chunk, solver or sample; nothing is written."""
    src = tmp_path / "bad.parquet"
    labels, sids = [None if r % 3 == 0 else "ab"[r % 2] for r in range(200)], [f"s{r}" for r in range(200)]
    bad = X[:200].copy()
    bad[137, 5] = np.nan
    with FeatureWriter(src, dim=D, id_name="sid", id_type=pa.string(), metadata={"fingerprint": FP},
                       extra_columns={"label": pa.string()}) as w:
        w.write(sids, bad, {"label": labels})
    model = tmp_path / "good.npz"
    np.save(tmp_path / "train.npy", X[:500])
    assert _run_main(["pca", "fit", str(tmp_path / "train.npy"), "-o", str(model), "-n", "4", "-q"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    said = f"Error: {src}: features contain NaN or inf, first at row 137 (id 's137'), column 5 (nan) - remove or repair those rows before "
    for argv, action in [(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q", "--batch-rows", "50"], "fitting"),
                         (["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q", "--solver", "svd"], "fitting"),
                         (["pca", "transform", str(src), "--pca-model", str(model), "-o", str(tmp_path / "r.csv"),
                           "--batch-rows", "64"], "transforming"),
                         (["report", str(model), "-o", str(tmp_path / "p"), "--probe", str(src), "--label", "label",
                           "-q", "--probe-rows", "40"], "probing")]:
        assert _run_main(argv) == 1
        assert capsys.readouterr().err == said + action + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    bare = tmp_path / "bare.npy"  # no id column: the row alone
    np.save(bare, bad)
    assert _run_main(["pca", "fit", str(bare), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {bare}: features contain NaN or inf, first at row 137, column 5 (nan) - "
                                       "remove or repair those rows before fitting\n")
    fixed = tmp_path / "fixed.parquet"  # the file repaired, reduced, and an inf put in its reduced rows
    with FeatureWriter(fixed, dim=D, id_name="sid", id_type=pa.string(), metadata={"fingerprint": FP},
                       extra_columns={"label": pa.string()}) as w:
        w.write(sids, X[:200], {"label": labels})
    reduce_features_file(fixed, tmp_path / "r.parquet", PCA.load(model))
    _, Y, _ = read_features(tmp_path / "r.parquet")
    Y[61, 2] = np.inf
    reduced = tmp_path / "reduced.parquet"
    with FeatureWriter(reduced, dim=4, id_name="sid", id_type=pa.string(), extra_columns={"label": pa.string()},
                       metadata={k: v for k, v in read_feature_metadata(tmp_path / "r.parquet").items()
                                 if k not in ("layout", "rows")}) as w:
        w.write(sids, Y, {"label": labels})
    assert _run_main(["report", str(model), "-o", str(tmp_path / "p"), "--probe", str(reduced), "--label", "label",
                      "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {reduced}: features contain NaN or inf, first at row 61 (id 's61'), "
                                       "column 2 (inf) - remove or repair those rows before probing\n")


@pytest.mark.parametrize("out", ["r.csv", "r.parquet", "r.npy"])
def test_a_csv_without_provenance_keeps_its_ids_and_columns_as_written(tmp_path, capsys, out):
    """A feature CSV without its .json (a file from elsewhere, or copied alone) had its id and other columns' types
    guessed from their text: pca transform wrote the id 001 as 1, 1e5 as 100000, 1.50 as 1.5 and 00 as 0. They are
    text, read and written as they are; a quoted empty string and an empty cell (a null) stay apart."""
    src = tmp_path / "bare.csv"
    src.write_text('id,code,amt,f0,f1,f2\n001,007,1e5,1,2,3\n002,,1.50,2,4,7\n003,"",00,1,1,1\n004,0x1F,-0,0,5,2\n')
    model = tmp_path / "m.npz"
    assert _run_main(["pca", "fit", str(src), "-o", str(model), "-n", "2", "-q"]) == 0
    dst = tmp_path / out
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(dst), "-q"]) == 0
    assert capsys.readouterr().err == ""  # (a model fitted on features without provenance: nothing to check)
    (ids, Y, extras), = open_features(dst).batches(100)
    assert list(ids) == ["001", "002", "003", "004"]
    assert {k: v.to_pylist() for k, v in extras.items()} == {"code": ["007", None, "", "0x1F"],
                                                             "amt": ["1e5", "1.50", "00", "-0"]}
    np.testing.assert_allclose(Y, PCA.load(model).transform(np.array([[1, 2, 3], [2, 4, 7], [1, 1, 1], [0, 5, 2.0]])),
                               atol=1e-5)
    if out == "r.csv":
        assert dst.read_text().splitlines()[1].startswith('"001","007","1e5",')


def test_an_empty_feature_cell_is_named_by_its_row(tmp_path, capsys):
    """An empty cell (a null) among a feature CSV's or a wide Parquet file's f0..f{d-1} was "column f0 has missing
    values", no row; a Parquet embedding's null named its row already."""
    src = tmp_path / "holes.csv"
    src.write_text("id,f0,f1,f2\n1,1,2,3\n2,2.5,4,7\n3,1,,1\n4,0,5,2\n")
    assert _run_main(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q", "--batch-rows", "2"]) == 1
    assert capsys.readouterr().err == (f"Error: {src}: row 2, column f1 has no value (an empty cell or a null) - "
                                       "re-extract the features\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holes.csv"]


def test_a_npy_of_rows_without_features_is_named(tmp_path, capsys):
    """A (5, 0) .npy: pca fit said "0 feature(s) (shape=(5, 0)) while a minimum of 1 is required" (no file), as the
    PCA says of an array; now as any .npy that is no feature matrix, naming the file."""
    src = tmp_path / "none.npy"
    np.save(src, np.zeros((5, 0), np.float32))
    assert _run_main(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {src} holds a float32 array of shape (5, 0), not (rows, d) floats - "
                                       "pass a feature matrix\n")
    ints = tmp_path / "ints.npy"  # integers: the fix was as vague ("pass a feature matrix"); it is one cast away
    np.save(ints, np.arange(10).reshape(5, 2))
    assert _run_main(["pca", "fit", str(ints), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {ints} holds an int64 array of shape (5, 2), not (rows, d) floats - "
                                       f"save it as floats, np.save({str(ints)!r}, X.astype(np.float32))\n")


def test_feature_columns_named_twice_or_with_leading_zeros(tmp_path, capsys):
    """A CSV header naming f0 twice was "feature columns f0..f{d-1} are not contiguous"; f01 was read as f1, and the
    read then failed as a bug ("unexpected KeyError: 'Field \\"f1\\" does not exist in schema'"). f01 is no feature
    column (so f1 is missing here, named), and a name given twice is named."""
    twice, zero = tmp_path / "twice.csv", tmp_path / "zero.csv"
    twice.write_text("id,f0,f0,f1\n1,1,2,3\n2,2,4,7\n3,1,1,1\n")
    zero.write_text("id,f0,f01,f2\n1,1,2,3\n2,2,4,7\n3,1,1,1\n")
    assert _run_main(["pca", "fit", str(twice), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {twice}: the feature column f0 appears 2 times - rename the columns so "
                                       "that every name is unique (f0 .. f{d-1}, once each)\n")
    assert _run_main(["pca", "fit", str(zero), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {zero}: feature columns f0..f{{d-1}} are not contiguous (f1 is missing, "
                                       "f2 is there) - re-extract the features\n")
    assert not (tmp_path / "m.npz").exists()


@pytest.fixture(params=["threads", "one thread"])
def arrow_threads(request):
    """Arrow's CSV reader words a conversion error otherwise when it has one CPU thread (a one-core container,
    OMP_NUM_THREADS=1): 'Row #3: ' before it, and the bad cell was reported as an unreadable file."""
    before = pa.cpu_count()
    if request.param == "one thread":
        pa.set_cpu_count(1)
    yield
    pa.set_cpu_count(before)


@pytest.mark.usefixtures("arrow_threads")
def test_a_cell_a_feature_csv_cannot_convert_is_named_by_row_and_column(tmp_path, capsys):
    """Text in a feature column, or in a kept column of a type the provenance declares, was Arrow's "cannot read
    f.csv as CSV (In CSV column #3: CSV conversion error to float: invalid value 'x')": a column position, no row.
    Now its row and column by name."""
    src = tmp_path / "text.csv"
    src.write_text("id,f0,f1,f2\n1,1,2,3\n2,1,2,x\n3,1,1,1\n")
    assert _run_main(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {src}: row 1, column 'f2' holds 'x', which does not read as float - "
                                       "write a number (a feature) there, or re-extract the features\n")
    kept = tmp_path / "kept.csv"
    with FeatureWriter(kept, dim=2, metadata={"fingerprint": FP}, extra_columns={"n": pa.int64()}) as w:
        w.write(np.arange(4), np.ones((4, 2), np.float32), {"n": [1, 2, 3, 4]})
    lines = kept.read_text().splitlines()
    lines[3] = lines[3].replace(",3,", ",three,")
    kept.write_text("\n".join(lines) + "\n")
    assert _run_main(["pca", "fit", str(kept), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {kept}: row 2, column 'n' holds 'three', which does not read as int64 - "
                                       "write an int64 (the column's type in its provenance) there, or re-extract the "
                                       "features\n")
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.usefixtures("arrow_threads")
def test_a_bad_cell_after_blank_lines_is_named_by_the_row_arrow_reads(tmp_path, capsys):
    """Found by the round-five review: the row of a cell Arrow cannot convert was found by counting csv.reader's
    records, a blank line among them, which Arrow skips: 'row 3' for the file's row 1 (an empty cell on the same row
    is 'row 1')."""
    src, holes = tmp_path / "blank.csv", tmp_path / "holes.csv"
    src.write_text("id,f0,f1,f2\n1,1,2,3\n\n\r\n2,1,2,x\n3,1,1,1\n")
    holes.write_text("id,f0,f1,f2\n1,1,2,3\n\n\r\n2,1,2,\n3,1,1,1\n")
    assert _run_main(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {src}: row 1, column 'f2' holds 'x', which does not read as float - "
                                       "write a number (a feature) there, or re-extract the features\n")
    assert _run_main(["pca", "fit", str(holes), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {holes}: row 1, column f2 has no value (an empty cell or a null) - "
                                       "re-extract the features\n")
    assert not (tmp_path / "m.npz").exists()


def test_a_feature_csv_row_of_another_number_of_cells_is_named(tmp_path, capsys):
    """A row with a cell missing (or one more) was Arrow's "cannot read f.csv as CSV (CSV parse error: Expected 4
    columns, got 3: 2,1,2) - pass a feature CSV written by bertfeat", naming no row; blank lines are no rows (as
    Arrow reads them)."""
    short, long = tmp_path / "short.csv", tmp_path / "long.csv"
    short.write_text("id,f0,f1,f2\n1,1,2,3\n\n2,1,2\n3,1,1,1\n")
    long.write_text("id,f0,f1,f2\n1,1,2,3\n2,1,2,3\n3,1,1,1,9\n")
    for src, row, cells in ((short, 1, 3), (long, 2, 5)):
        assert _run_main(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
        assert capsys.readouterr().err == (f"Error: {src}: row {row} has {cells} cells, its header 4 - give the row a "
                                           "value for every column, or re-extract the features\n")
    assert not (tmp_path / "m.npz").exists()


def test_parquet_feature_columns_that_hold_no_numbers(tmp_path, capsys):
    """A Parquet file whose f0 holds text, decimals or booleans failed as a bug ("unexpected ArrowInvalid: Needed to
    copy 1 chunks with 0 nulls, but zero_copy_only was True"); an embedding column of lists of any length, without the
    provenance that gives its length, was said to be "not a list of floats" (it is one)."""
    import decimal

    import pyarrow.parquet as pq

    cases = {
        "text": ({"f0": ["1.5", "2", "3"]}, "the feature column 'f0' holds string values, not floats or integers - "
                 "write the features as floats (float32), or re-extract the features"),
        "dec": ({"f0": pa.array([decimal.Decimal(v) for v in ("1.5", "2", "3")], pa.decimal128(5, 2))},
                "the feature column 'f0' holds decimal128(5, 2) values, not floats or integers - write the features as "
                "floats (float32), or re-extract the features"),
        "bool": ({"f0": [True, False, True]}, "the feature column 'f0' holds bool values, not floats or integers - "
                 "write the features as floats (float32), or re-extract the features"),
        "lists": ({"embedding": pa.array([[1.0, 2], [3, 4], [5, 7]], pa.list_(pa.float32()))},
                  "column 'embedding' is a list of any length (list<element: float>) and the file has no bertfeat "
                  "provenance to say its length - write it as a fixed-size list (pa.list_(pa.float32(), d)), or "
                  "re-extract the features"),
    }
    for name, (columns, why) in cases.items():
        path = tmp_path / f"{name}.parquet"
        wide = {"f1": [1.0, 2, 4]} if "f0" in columns else {}
        pq.write_table(pa.table({"id": [1, 2, 3], **columns, **wide}), path)
        assert _run_main(["pca", "fit", str(path), "-o", str(tmp_path / "m.npz"), "-q"]) == 1
        assert capsys.readouterr().err == f"Error: {path}: {why}\n"
    assert not (tmp_path / "m.npz").exists()
    ints = tmp_path / "ints.parquet"  # integers are numbers: read as float32, as before
    pq.write_table(pa.table({"id": [1, 2, 3], "f0": [1, 2, 5], "f1": [3, 1, 4]}), ints)
    assert _run_main(["pca", "fit", str(ints), "-o", str(tmp_path / "m.npz"), "-q"]) == 0


@pytest.mark.parametrize("solver", ["auto", "svd"])
def test_a_feature_file_of_fewer_than_two_rows_is_named(tmp_path, capsys, solver):
    """One row: "PCA needs at least 2 samples to fit, got n_samples = 1" (the PCA's words, no file); a header alone
    named its file when streamed but not with --solver svd."""
    for rows, fix in ((1, "fit on a feature file of at least 2 rows"), (0, "fit on a feature file with rows")):
        src = tmp_path / f"rows{rows}.csv"
        src.write_text("id,f0,f1,f2\n" + "1,1,2,3\n" * rows)
        assert _run_main(["pca", "fit", str(src), "-o", str(tmp_path / "m.npz"), "-q", "--solver", solver]) == 1
        assert capsys.readouterr().err == f"Error: PCA needs at least 2 rows to fit, got {rows} in {src} - {fix}\n"
    assert not (tmp_path / "m.npz").exists()


def test_a_feature_csv_with_a_byte_order_mark_keeps_its_ids(tmp_path, capsys):
    """A feature CSV saved with a UTF-8 BOM (Excel's "CSV UTF-8"): its header was read with the BOM in the first name,
    which Arrow's reader drops, so the id column was not found: pca transform wrote the row numbers 0, 1, 2 as the
    ids, under a column named '\\ufeffid'."""
    src = tmp_path / "bom.csv"
    src.write_bytes(b"\xef\xbb\xbfid,f0,f1\nA,1,2\nB,2,4\nC,5,1\n")
    model, out = tmp_path / "m.npz", tmp_path / "r.csv"
    assert _run_main(["pca", "fit", str(src), "-o", str(model), "-q"]) == 0
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(out), "-q"]) == 0
    (ids, _, _), = open_features(out).batches(10)
    assert list(ids) == ["A", "B", "C"] and out.read_text().startswith('"id","f0","f1"\n"A",')


def _edited_model(src, dst, change, drop_digests=False):
    """``src`` saved again with its arrays changed by ``change(arrays)``, its metadata as it was (an edit by hand)."""
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    if drop_digests:  # as releases before the digests wrote it
        meta = json.loads(str(arrays["meta"]))
        del meta["arrays_sha256"], meta["meta_sha256"]
        arrays["meta"] = np.array(json.dumps(meta))
    with open(dst, "wb") as f:
        np.savez(f, **arrays)
    return dst


def test_a_model_whose_arrays_were_edited_is_refused(tmp_path, features, X, capsys):
    """A model file saved again with its components swapped (or scaled, or its spectrum reversed) loaded as a model:
    pca transform wrote the components' projections in the wrong columns and report a variance kept of 2 %, without a
    word. Each array's sha256 is recorded when it is saved, and an array that no longer has it is refused by name;
    a file of an earlier release (no digests) loads as before, and a file saved again unchanged loads."""
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "5", "-o", str(model), "-q"]) == 0
    good = PCA.load(model)

    def swap(a):
        a["components"] = a["components"][[1, 0, 2, 3, 4]]

    def reverse(a):
        a["spectrum"] = a["spectrum"][::-1].copy()

    for name, change, array in (("swapped", swap, "components"), ("reversed", reverse, "spectrum")):
        path = _edited_model(model, tmp_path / f"{name}.npz", change)
        want = (f"{path} is not a bertfeat PCA model: its '{array}' array is not the one saved with it (its sha256 "
                "differs from the one its metadata records: the file was edited) - pass the model file as `bertfeat "
                "pca fit`, `bertfeat extract --pca` or PCA.save wrote it (fit it again rather than edit it)")
        with pytest.raises(BertfeatError) as e:
            PCA.load(path)
        assert str(e.value) == want
        capsys.readouterr()
        out = tmp_path / f"{name}.reduced.parquet"
        assert _run_main(["pca", "transform", str(features), "--pca-model", str(path), "-o", str(out), "-q"]) == 1
        assert capsys.readouterr().err == f"Error: {want}\n" and not out.exists()
        assert _run_main(["report", str(path), "-o", str(tmp_path / name), "-q"]) == 1
        assert capsys.readouterr().err == f"Error: {want}\n" and not list(tmp_path.glob(f"{name}.report.*"))
    unchanged = PCA.load(_edited_model(model, tmp_path / "same.npz", lambda a: None))
    older = PCA.load(_edited_model(model, tmp_path / "older.npz", lambda a: None, drop_digests=True))
    for loaded in (unchanged, older):
        np.testing.assert_array_equal(loaded.transform(X), good.transform(X))


@pytest.mark.parametrize("edit", ["whiten", "total_variance", "noise_variance", "n_samples", "fit_solver"])
def test_a_model_whose_metadata_was_edited_is_refused(tmp_path, features, X, capsys, edit):
    """A model's metadata edited by hand loaded without a word: whiten turned on transformed otherwise (up to 3.16
    from the genuine model's output), a total variance of 1e308 reported 0.00 % kept, a noise variance above the total
    and 10**30 rows loaded. Its sha256 is recorded as it is saved; a file written again unchanged (the JSON in another
    key order) loads."""
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "5", "-o", str(model), "-q"]) == 0
    changes = {"whiten": lambda m: m["params"].update(whiten=True), "total_variance": lambda m: m.update(total_variance=1e308),
               "noise_variance": lambda m: m.update(noise_variance=m["total_variance"] * 2),
               "n_samples": lambda m: m.update(n_samples=10**30),
               "fit_solver": lambda m: m.update(fit_solver="randomized" if m["fit_solver"] != "randomized" else "svd")}

    def rewrite(dst, change):
        with np.load(model, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays["meta"]))
        change(meta)
        arrays["meta"] = np.array(json.dumps(meta))  # (not sorted: another key order than save_model's)
        with open(dst, "wb") as f:
            np.savez(f, **arrays)
        return dst

    path = rewrite(tmp_path / "edited.npz", changes[edit])
    want = (f"Error: {path} is not a bertfeat PCA model: its metadata is not the one saved with it (its sha256 differs "
            "from the one it records: the file was edited) - pass the model file as `bertfeat pca fit`, `bertfeat "
            "extract --pca` or PCA.save wrote it (fit it again rather than edit it)\n")
    capsys.readouterr()
    out = tmp_path / "reduced.parquet"
    assert _run_main(["pca", "transform", str(features), "--pca-model", str(path), "-o", str(out), "-q"]) == 1
    assert capsys.readouterr().err == want and not out.exists()
    assert _run_main(["report", str(path), "-o", str(tmp_path / "r"), "-q"]) == 1
    assert capsys.readouterr().err == want and not list(tmp_path.glob("r.*"))
    same = PCA.load(rewrite(tmp_path / "same.npz", lambda m: None))
    np.testing.assert_array_equal(same.transform(X), PCA.load(model).transform(X))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_row_whose_projection_overflows_float32_is_named_by_file_row_and_id(tmp_path, features, X, capsys):
    """Finite features whose projection passes float32's largest: pca transform said "features are too large: their
    projections overflow float32 - ..., or pass them as float64", naming no file or row, and advising a float64 a
    feature file cannot be read as (every one is read in float32). Now the file, the row and its id."""
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "3", "-o", str(model), "-q"]) == 0
    big = X[:10].copy()
    big[6] = np.float32(3e38) * np.sign(PCA.load(model).components_[0]).astype(np.float32)  # finite, each below 3.4e38
    path = tmp_path / "big.parquet"
    with FeatureWriter(path, dim=D, id_name="sid", id_type=pa.string(), metadata={"model": "all-MiniLM-L6-v2", "fingerprint": FP}) as w:
        w.write([f"s{r}" for r in range(10)], big)
    capsys.readouterr()
    out = tmp_path / "r.parquet"
    assert _run_main(["pca", "transform", str(path), "--pca-model", str(model), "-o", str(out), "--batch-rows", "4",
                      "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {path}: row 6 (id 's6'): its features are too large, their projection "
                                       "overflows float32 (feature files are read and projected in float32) - scale "
                                       "the features down before transforming\n")
    assert not out.exists()


def test_transform_of_a_csv_into_an_npy_of_its_name_runs(tmp_path, X, capsys):
    """pca transform x.csv -o x.npy was refused: 'the ids file x.ids.csv would replace the input x.ids.csv', although
    a CSV feature file holds its ids and reads no ids file (x.ids.csv need not exist)."""
    src = tmp_path / "x.csv"
    with FeatureWriter(src, dim=D, id_name="sid", id_type=pa.string(), metadata={"fingerprint": FP}) as w:
        w.write([f"s{i}" for i in range(40)], X[:40])
    model = tmp_path / "pca.npz"
    assert _run_main(["pca", "fit", str(src), "-n", "2", "-o", str(model), "--quiet"]) == 0
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(tmp_path / "x.npy"),
                      "--quiet"]) == 0, capsys.readouterr().err
    ids, Y, _ = read_features(tmp_path / "x.npy")
    assert ids[:2] == ["s0", "s1"]
    np.testing.assert_allclose(Y, PCA.load(model).transform(X[:40]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["npy", "embedding", "wide"])
def test_a_float64_feature_file_is_fitted_and_transformed_as_written(tmp_path, capsys, layout):
    """Feature files were read as float32 whatever they held: float64 features of 1e8 + unit noise all rounded to 1e8,
    and pca fit gave explained_variance_ [0, 0] ('variance kept 0.00 %'), exit 0, where scikit-learn gives ~[1.08,
    1.04]. The PCA reads a float64 file as float64 (the reduced file stays float32)."""
    from sklearn.decomposition import PCA as SkPCA

    X = 1e8 + np.random.default_rng(1).standard_normal((200, 4))
    src = tmp_path / ("f.npy" if layout == "npy" else "f.parquet")
    if layout == "npy":
        np.save(src, X)
    elif layout == "embedding":
        pq.write_table(pa.table({"embedding": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), 4)}), src)
    else:
        pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(4)}), src)
    model, out = tmp_path / "m.npz", tmp_path / "r.parquet"
    assert _run_main(["pca", "fit", str(src), "-n", "2", "-o", str(model), "-q"]) == 0, capsys.readouterr().err
    sk = SkPCA(2, svd_solver="full").fit(X)
    pca = PCA.load(model)
    np.testing.assert_allclose(pca.explained_variance_, sk.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(pca.components_, sk.components_, atol=1e-9)
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(out), "-q"]) == 0
    _, Y, _ = read_features(out)
    assert Y.dtype == np.float32
    np.testing.assert_allclose(Y, sk.transform(X), atol=1e-6)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("scale,words", [
    (1e150, "row 0: the value {v:g} (column 0) is beyond float32's largest value 3.40282e+38"),
    (1e-100, "row 0: its values are all below float32's smallest normal value 1.17549e-38 (the largest {v:g}): as "
             "float32 they would lose their digits or become 0")])
def test_float64_features_whose_projection_float32_cannot_hold_are_refused(tmp_path, capsys, scale, words):
    """A float64 feature file fitted and reduced at a scale float32 cannot hold: pca transform wrote inf (1e150) or
    zeros (1e-100), exit 0, with NumPy's overflow warning. The reduced file holds float32, so it is refused, naming
    the file and the row, and nothing is written."""
    X = np.random.default_rng(0).standard_normal((40, 8)) * scale
    src, model, out = tmp_path / "f.npy", tmp_path / "m.npz", tmp_path / "r.npy"
    np.save(src, X)
    assert _run_main(["pca", "fit", str(src), "-n", "4", "-o", str(model), "-q"]) == 0
    Y = PCA.load(model).transform(X)
    capsys.readouterr()
    assert _run_main(["pca", "transform", str(src), "--pca-model", str(model), "-o", str(out), "-q"]) == 1
    v = Y[0, 0] if scale > 1 else np.abs(Y[0]).max()
    assert capsys.readouterr().err == (f"Error: {src} reduced by the PCA: {words.format(v=v)} - scale the features "
                                       "into float32's range (or transform them in Python with bertfeat.PCA, which "
                                       "keeps float64)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.npy", "m.npz", "m.report.json", "m.report.md",
                                                          "m.report.png"]


@pytest.mark.parametrize("step", ["fit", "transform"])
def test_a_feature_file_written_to_while_it_is_read_is_refused(tmp_path, X, step):
    """Rows appended to a feature CSV while pca fit or transform streamed it: both exited 0, the fit with or without
    the new rows by chance, the transform with the first 150,000 rows of a 170,000-row file (found by the
    concurrency audit). Now refused, as extract refuses an input that changes while it is read; nothing written."""
    src = tmp_path / "f.csv"
    with FeatureWriter(src, dim=D, id_name="sid", id_type=pa.string(), metadata={"fingerprint": FP}) as w:
        w.write([f"s{i}" for i in range(300)], X[:300])
    line = src.read_text().splitlines()[-1]

    def append(seen):
        if seen == 100:
            with open(src, "a") as f:
                f.write(line.replace("s299", "s300", 1) + "\n")

    model, out = tmp_path / "m.npz", tmp_path / "r.parquet"
    if step == "transform":
        fit_pca_file(src, 2).save(model)
    with pytest.raises(BertfeatError) as e:
        if step == "fit":
            fit_pca_file(src, 2, solver="covariance", batch_rows=100, on_batch=append)
        else:
            reduce_features_file(src, out, PCA.load(model), batch_rows=100, on_batch=append)
    what = "fit" if step == "fit" else "reduced file"
    assert e.value.message == (f"{src} changed while it was read (a process wrote to it): the {what} would mix rows of "
                               "two versions of it - rerun once nothing writes the file (or on a copy of it)")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["f.csv", "f.csv.json"] + (["m.npz"] if step == "transform" else []))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_fit_warns_when_the_file_holds_fewer_rows_than_its_provenance_wrote(tmp_path, features, capsys, fmt):
    """A feature file cut at a row's end (a copy stopped short; `head` of a CSV beside its .json) was fitted as if
    whole: its provenance records the rows written, and now the read says so (a warning: a file filtered with its
    provenance kept, a training split, is good rows)."""
    t = pq.read_table(features)
    if fmt == "parquet":
        cut = tmp_path / "cut.parquet"
        pq.write_table(t.slice(0, 1000), cut)  # the schema's metadata (the provenance) kept
    else:
        whole = tmp_path / "whole.csv"
        assert _run_main(["pca", "transform", str(features), "--pca-model", str(_fit(tmp_path, features)), "-o",
                          str(whole), "-q"]) == 0
        cut = tmp_path / "cut.csv"
        cut.write_text("".join(whole.read_text().splitlines(keepends=True)[:1001]))
        (tmp_path / "cut.csv.json").write_text((tmp_path / "whole.csv.json").read_text())
    capsys.readouterr()
    assert _run_main(["pca", "fit", str(cut), "-n", "2", "-o", str(tmp_path / "m.npz"), "-q"]) == 0
    assert capsys.readouterr().err == (f"Warning: {cut} holds 1,000 rows, but its provenance records 3,000 written: it "
                                       "was cut short (a copy stopped early?) or filtered since; check it is the whole "
                                       "file\n")
    assert _run_main(["pca", "fit", str(features), "-n", "2", "-o", str(tmp_path / "w.npz"), "-q"]) == 0
    assert capsys.readouterr().err == ""


def _fit(tmp_path, features):
    model = tmp_path / "p.npz"
    assert _run_main(["pca", "fit", str(features), "-n", "4", "-o", str(model), "-q"]) == 0
    return model


def test_fit_warns_when_the_file_holds_fewer_features_than_its_provenance_wrote(tmp_path, features, capsys):
    """A CSV feature file with its last feature column dropped (beside its .json) was fitted as a narrower whole
    file, without a word: its provenance records the width written, and the read now says so (a warning: a
    Matryoshka model's first features kept on purpose are good features)."""
    import csv

    whole = tmp_path / "whole.csv"
    assert _run_main(["pca", "transform", str(features), "--pca-model", str(_fit(tmp_path, features)), "-o",
                      str(whole), "-q"]) == 0
    with open(whole, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][-1] == "f3"
    cut = tmp_path / "cut.csv"
    with open(cut, "w", newline="") as fh:
        csv.writer(fh).writerows(r[:-1] for r in rows)
    (tmp_path / "cut.csv.json").write_text((tmp_path / "whole.csv.json").read_text())
    capsys.readouterr()
    assert _run_main(["pca", "fit", str(cut), "-n", "2", "-o", str(tmp_path / "m.npz"), "-q"]) == 0
    assert capsys.readouterr().err == (f"Warning: {cut} holds 3 features a row, but its provenance records 4 written: "
                                       "feature columns were dropped or added since; check it is the whole file\n")
    assert _run_main(["pca", "fit", str(whole), "-n", "2", "-o", str(tmp_path / "w.npz"), "-q"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [["pca", "fit", "-", "-n", "2", "-o", "p.npz"], ["verify", "-"],
                                  ["pca", "transform", "-", "--pca-model", "MODEL", "-o", "r.parquet"],
                                  ["report", "-"]])
def test_standard_input_given_to_a_command_that_reads_files_says_so(tmp_path, monkeypatch, features, X, capsys, argv):
    """'-' (standard input, which extract reads) given to a command that reads a feature file or a PCA model said
    'feature file not found: - - check the path': now that the command reads a file, not standard input, and, for a
    file that is named '-', ./-."""
    monkeypatch.chdir(tmp_path)
    PCA(2).fit(X).save("m.npz")
    argv = [a.replace("MODEL", "m.npz") for a in argv]
    assert _run_main(argv) == 1
    out, err = capsys.readouterr()
    what = "a PCA model" if argv[0] == "report" else "a feature file"
    how = ("pass the model's .npz file" if argv[0] == "report" else
           "write the features to a file first, e.g. `bertfeat extract - -o features.parquet`, and pass that")
    assert (out, err) == ("", f"Error: {what} is read from a file, not standard input ('-') - {how} (a file named "
                              "'-': ./-)\n")
