"""extract --pca-model (Python pca_model=): new data reduced with an existing PCA in the same run, equal to extract
followed by `pca transform`, the model's fingerprint checked against the run's settings, its report not rewritten."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

import bertfeat
from bertfeat.errors import BertfeatError
from extract_util import run, tiny_model, write_csv


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A training run with --pca 6 (its model, report and reduced features) and a test input."""
    d = tmp_path_factory.mktemp("pm")
    train = write_csv(d / "train.csv", ["text"], [[f"training sentence {i} about topic {i % 7}"] for i in range(80)])
    test = write_csv(d / "test.csv", ["text"], [[f"held out sentence {i} on topic {i % 5}"] for i in range(30)])
    bertfeat.extract(train, d / "train.parquet", model=tiny_model(), pca=6)
    return d, d / "train.pca.npz", test


def table_and_meta(path):
    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[b"bertfeat"])
    return t, meta


def test_extract_with_pca_model_equals_extract_then_transform(trained, capsys):
    d, model, test = trained
    report_before = {p.name: p.stat().st_mtime_ns for p in d.glob("train.pca.report.*")}
    rc, _, err = run(capsys, "extract", test, "-o", d / "one.parquet", "--model", tiny_model(), "--pca-model", model, "-q")
    assert rc == 0, err
    assert run(capsys, "extract", test, "-o", d / "raw.parquet", "--model", tiny_model(), "-q")[0] == 0
    assert run(capsys, "pca", "transform", d / "raw.parquet", "--pca-model", model, "-o", d / "two.parquet", "-q")[0] == 0
    one, m1 = table_and_meta(d / "one.parquet")
    two, m2 = table_and_meta(d / "two.parquet")
    assert one.column_names == two.column_names and one.num_rows == two.num_rows == 30
    assert one.column("row").to_pylist() == two.column("row").to_pylist()
    X1, X2 = (np.stack(t.column("embedding").to_numpy(zero_copy_only=False)) for t in (one, two))
    assert X1.shape == (30, 6)
    np.testing.assert_allclose(X1, X2, atol=1e-6)
    assert m1["pca"] == m2["pca"]  # n_components, fingerprint, model path and sha256, variance kept ...
    assert m1["pca"]["model_path"] == str(model) and m1["fingerprint"] == m2["fingerprint"]
    assert {p.name: p.stat().st_mtime_ns for p in d.glob("train.pca.report.*")} == report_before  # not rewritten
    assert not list(d.glob("one.pca*"))  # no new PCA files beside the output


def test_the_dask_engine_applies_it_the_same_way(trained):
    pytest.importorskip("distributed")
    d, model, test = trained
    local = bertfeat.extract(test, d / "loc.parquet", model=tiny_model(), pca_model=model, chunk_rows=10)
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as c:
        s = bertfeat.extract(test, d / "dask.parquet", model=tiny_model(), pca_model=model, engine="dask", client=c,
                             blocksize=None, chunk_rows=10)
    assert s.rows_written == local.rows_written == 30
    a, ma = table_and_meta(d / "loc.parquet")
    b = pq.read_table(d / "dask.parquet")
    mb = json.loads((d / "dask.parquet" / "_bertfeat.json").read_text())
    np.testing.assert_allclose(np.stack(a.column("embedding").to_numpy(zero_copy_only=False)),
                               np.stack(b.column("embedding").to_numpy(zero_copy_only=False)), atol=1e-6)
    assert ma["pca"] == mb["pca"]
    assert not (d / "dask.parquet.partial").exists()


def test_a_model_of_other_settings_is_refused_before_encoding(trained, capsys):
    d, model, test = trained
    rc, _, err = run(capsys, "extract", test, "-o", d / "x.parquet", "--model", tiny_model(), "--pca-model", model,
                     "--pooling", "cls")
    assert rc == 1 and err.startswith("Error: the features come from a different source than the PCA was fitted on (")
    assert "pooling: model " in err and err.count("\n") == 1
    assert err.endswith(" - extract with the settings the model was fitted on, or fit a model on these features "
                        "(--pca N instead of --pca-model)\n")  # not "--force", which extract does not have
    assert not (d / "x.parquet").exists() and not (d / "x.parquet.partial").exists()
    rc, _, err = run(capsys, "extract", test, "-o", d / "x.parquet", "--model", tiny_model(), "--pca-model", model,
                     "--layers=-1,-2", "--layer-agg", "concat")
    assert (rc, err) == (1, f"Error: the PCA model {model} was fitted on 32 features per row, these features have 64 - "
                            "apply a PCA fitted on features of the same model, pooling, layers and --truncate-dim\n")
    rc, _, err = run(capsys, "extract", test, "-o", d / "x.parquet", "--model", tiny_model(), "--pca-model", model,
                     "--truncate-dim", 8)  # a PCA of whole vectors on cut ones: the fix names the cut
    assert (rc, err) == (1, f"Error: the PCA model {model} was fitted on 32 features per row, these features have 8 - "
                            "apply a PCA fitted on features of the same model, pooling, layers and --truncate-dim\n")
    assert not (d / "x.parquet").exists() and not (d / "x.parquet.partial").exists()


def test_pca_model_options_are_checked(trained, tmp_path):
    d, model, test = trained
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(test, tmp_path / "o.parquet", model=tiny_model(), pca=4, pca_model=model)
    assert str(e.value) == ("pca and pca_model exclude each other - give pca to fit a new PCA on this input, or pca_model "
                            "to apply a fitted one")
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(test, tmp_path / "o.parquet", model=tiny_model(), pca_model=tmp_path / "none.npz")
    assert str(e.value) == (f"the PCA model {tmp_path / 'none.npz'} does not exist - pass pca_model with a .npz written by "
                            "`bertfeat pca fit` or `extract --pca`")
    assert list(tmp_path.iterdir()) == []


def test_a_resume_that_drops_or_changes_the_model_is_refused(trained, tmp_path):
    """The manifest holds the model file's path and sha256, and is compared both ways: resuming without
    pca_model (or with another model) after a run that had it is refused, naming it."""
    from bertfeat.errors import ResumeError
    from extract_util import Interrupt

    d, model, test = trained
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(test, out, model=tiny_model(), pca_model=model, chunk_rows=5, progress=Interrupt(2))
    with pytest.raises(ResumeError, match=r"^cannot resume: .*\(PCA model: '[^']*train\.pca\.npz' -> None\) - "):
        bertfeat.extract(test, out, model=tiny_model(), chunk_rows=5, resume=True)
    s = bertfeat.extract(test, out, model=tiny_model(), pca_model=model, chunk_rows=5, resume=True)
    assert s.chunks_resumed == 2 and pq.read_table(out).num_rows == 30


# ------------------------------------------------------------------------------ a PCA and features of another space
@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    """extract --pca all on 80 rows of 32 features: features rotated by a PCA that keeps their width, its model, the
    same rows before any PCA, and a PCA fitted (pca fit) on the rotated ones."""
    d = tmp_path_factory.mktemp("rot")
    train = write_csv(d / "train.csv", ["text"], [[f"training sentence {i} about topic {i % 7}"] for i in range(80)])
    bertfeat.extract(train, d / "rot.parquet", model=tiny_model(), pca="all")
    bertfeat.extract(train, d / "raw.parquet", model=tiny_model())
    from bertfeat.cli.app import main

    assert main(["pca", "fit", str(d / "rot.parquet"), "-n", "3", "-o", str(d / "onrot.npz"), "-q"]) == 0
    return d, train


def _sha(path):
    from bertfeat.pca.reduce import file_sha256

    return file_sha256(path)[:12]


def test_a_pca_is_not_applied_again_to_the_features_it_reduced(rotated, trained, capsys):
    """pca transform of features a PCA reduced, with a PCA fitted before any PCA: refused whatever their widths (a PCA
    keeping every component leaves them equal, and the product was written with exit code 0), --force or not."""
    d, _ = rotated
    for extra in ([], ["--force"]):
        rc, _, err = run(capsys, "pca", "transform", d / "rot.parquet", "--pca-model", d / "rot.pca.npz",
                         "-o", d / "twice.parquet", *extra)
        assert (rc, err) == (1, f"Error: {d / 'rot.parquet'} holds features this PCA model {d / 'rot.pca.npz'} "
                                f"already reduced (32 components, model sha256 {_sha(d / 'rot.pca.npz')}) - apply it to "
                                "the features before it (the extract output without --pca or --pca-model), or fit a "
                                "PCA on these features (bertfeat pca fit)\n")
        assert not list(d.glob("*twice*"))
    t, model, _ = trained  # 6 of 32 components: named so, not as features of another model or pooling
    rc, _, err = run(capsys, "pca", "transform", t / "train.parquet", "--pca-model", model, "-o", t / "twice.parquet")
    assert rc == 1 and err.startswith(f"Error: {t / 'train.parquet'} holds features this PCA model {model} already "
                                      "reduced (6 components")


def test_a_pca_fitted_in_python_on_reduced_features_applies_to_them(rotated, tmp_path):
    """A PCA fitted in Python on features a PCA reduced and saved with their fingerprint (no pca fit record of what
    reduced them) is not taken for extract --pca's model (fitted before any PCA): it applies to those features."""
    from bertfeat.features import open_features, read_features
    from bertfeat.pca.estimator import PCA
    from bertfeat.pca.reduce import reduce_features_file

    d, _ = rotated
    _, X, _ = read_features(d / "rot.parquet")
    PCA(n_components=4).fit(X).save(tmp_path / "py.npz", fingerprint=open_features(d / "rot.parquet").fingerprint)
    out = reduce_features_file(d / "rot.parquet", tmp_path / "py_out.parquet", PCA.load(tmp_path / "py.npz"))
    np.testing.assert_allclose(read_features(out)[1], PCA.load(tmp_path / "py.npz").transform(X), rtol=1e-5, atol=1e-5)


def test_a_pca_fitted_on_reduced_features_applies_only_to_features_that_pca_reduced(rotated, capsys):
    d, train = rotated
    onrot, sha = d / "onrot.npz", _sha(d / "rot.pca.npz")
    rc, _, err = run(capsys, "extract", train, "-o", d / "x.parquet", "--model", tiny_model(), "--pca-model", onrot, "-q")
    assert (rc, err) == (1, f"Error: the PCA model {onrot} was fitted on features already reduced by a PCA (32 "
                            f"components, model sha256 {sha}), and this run's features are before any PCA - apply a PCA "
                            "fitted on the features before any PCA (the first one), or fit one on these features (--pca "
                            "N instead of --pca-model)\n")
    rc, _, err = run(capsys, "pca", "transform", d / "raw.parquet", "--pca-model", onrot, "-o", d / "x.parquet")
    assert (rc, err) == (1, f"Error: the PCA model {onrot} was fitted on features already reduced by a PCA (32 "
                            f"components, model sha256 {sha}), and {d / 'raw.parquet'} holds features before any PCA - "
                            "reduce them with that first PCA before this one, or apply a PCA fitted on features before "
                            "any PCA\n")
    bertfeat.extract(train, d / "other.parquet", model=tiny_model(), pca=31)  # another PCA's space
    rc, _, err = run(capsys, "pca", "transform", d / "other.parquet", "--pca-model", onrot, "-o", d / "x.parquet")
    assert (rc, err) == (1, f"Error: {d / 'other.parquet'} was reduced by another PCA (31 components, model sha256 "
                            f"{_sha(d / 'other.pca.npz')}) than the features the PCA model {onrot} was fitted on (32 "
                            f"components, model sha256 {sha}) - apply it to features reduced by that same PCA, or fit a "
                            "PCA on these features (bertfeat pca fit)\n")
    assert not list(d.glob("x.*"))

    # the features it was fitted on: reduced again, as pca fit's own transform does; verify says it cannot check them
    rc, _, err = run(capsys, "pca", "transform", d / "rot.parquet", "--pca-model", onrot, "-o", d / "chain.parquet", "-q")
    assert rc == 0, err
    X = np.stack(pq.read_table(d / "chain.parquet").column("embedding").to_numpy(zero_copy_only=False))
    R = np.stack(pq.read_table(d / "rot.parquet").column("embedding").to_numpy(zero_copy_only=False))
    from bertfeat.pca.estimator import PCA

    np.testing.assert_allclose(X, PCA.load(onrot).transform(R), atol=1e-6)
    rc, _, err = run(capsys, "verify", d / "chain.parquet", "-q")
    assert (rc, err) == (1, f"Error: {d / 'chain.parquet'} was reduced by a PCA fitted on features a PCA had reduced "
                            "before: it was reduced more than once (a pca transform of reduced features), and only the "
                            "last PCA is recorded - verify the features before the later PCA\n")


@pytest.mark.parametrize("path, said", [
    ("~/bertfeat-pca-here/p.npz", "starts with ~, which no shell expanded (bertfeat takes a path as it is given) - "
                                  "give the path itself, {home}/bertfeat-pca-here/p.npz"),
    ("s3://bucket/p.npz", "is a URL (s3://): bertfeat {verb} local files only - "),
])
def test_save_and_load_refuse_a_path_the_command_line_refuses(tmp_path, monkeypatch, path, said):
    """PCA.save('~/x.npz') made a folder named ~ in the current directory (Python expands no ~, as a shell does; nor
    do pathlib and numpy.save), and 's3://...' a folder s3:; PCA.load read them back. Both now take a path as the
    command line's --pca-model / -o do (checks.local_path): refused, the fix naming the path a ~ stands for."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    pca = bertfeat.PCA(2).fit(np.random.default_rng(0).normal(size=(20, 5)))
    for call, verb in ((lambda: pca.save(path), "writes"), (lambda: bertfeat.PCA.load(path), "reads")):
        with pytest.raises(BertfeatError) as e:
            call()
        expected = f"the PCA model {path} " + said.format(home=tmp_path / "home", verb=verb)
        assert e.value.message.startswith(expected), e.value.message
    assert list(tmp_path.iterdir()) == []  # no folder ~ or s3:
    (tmp_path / "~").mkdir()  # a folder that is named ~ is a path as given: saved into, read back
    assert bertfeat.PCA.load(pca.save("~/p.npz")).n_components_ == 2


def test_a_prompt_given_by_its_name_or_its_text_applies_the_same_model(tmp_path, capsys):
    """A PCA fitted with --prompt-name doc is the one for --prompt "passage: " (doc's text: the same vectors), through
    extract --pca-model and `pca transform` alike, to the same reduced features (before: refused, 'prompt_name: model
    "doc" vs features null'); another prompt text is refused, naming the prompt."""
    from extract_util import tiny_st_model

    model = tiny_st_model(tmp_path / "st")
    (model / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "doc": "passage: "}, "default_prompt_name": "query"}))
    train = write_csv(tmp_path / "train.csv", ["text"], [[f"training sentence {i} about topic {i % 7}"] for i in range(40)])
    test = write_csv(tmp_path / "test.csv", ["text"], [[f"held out sentence {i} on topic {i % 5}"] for i in range(20)])
    bertfeat.extract(train, tmp_path / "train.parquet", model=model, pca=4, prompt_name="doc")
    pca = tmp_path / "train.pca.npz"
    s = bertfeat.extract(test, tmp_path / "by_text.parquet", model=model, pca_model=pca, prompt="passage: ")
    assert s.rows_written == 20
    bertfeat.extract(test, tmp_path / "by_name.parquet", model=model, pca_model=pca, prompt_name="doc")
    bertfeat.extract(test, tmp_path / "full.parquet", model=model, prompt="passage: ")
    rc, _, err = run(capsys, "pca", "transform", "--pca-model", pca, tmp_path / "full.parquet", "-o",
                     tmp_path / "transformed.parquet")
    assert rc == 0, err
    X = [np.stack(pq.read_table(tmp_path / f"{n}.parquet").column("embedding").to_numpy(zero_copy_only=False))
         for n in ("by_text", "by_name", "transformed")]
    assert X[0].shape == (20, 4) and np.array_equal(X[0], X[1]) and np.array_equal(X[0], X[2])
    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(test, tmp_path / "other.parquet", model=model, pca_model=pca, prompt="passage:")
    assert e.value.what == ('the features come from a different source than the PCA was fitted on (prompt: model '
                            '"passage: " vs features "passage:")')


def test_a_model_path_given_as_bytes_is_refused_naming_it(tmp_path):
    """Found by the API audit: PCA.save(b"p.npz") and PCA.load(b"p.npz") raised pathlib's TypeError ("argument should
    be a str object or an os.PathLike object returning str, not <class 'bytes'>"): refused as a path of another type,
    as bertfeat.extract refuses one; a Path still works."""
    X = np.random.default_rng(0).normal(size=(20, 5)).astype(np.float32)
    pca = bertfeat.PCA(2).fit(X)
    path = tmp_path / "p.npz"
    for call in (lambda: pca.save(bytes(path)), lambda: bertfeat.PCA.load(bytes(path))):
        with pytest.raises(BertfeatError) as e:
            call()
        assert e.value.message == (f"the PCA model path {bytes(path)!r} is a bytes, not a string or a path - give the "
                                   "PCA model's path as a string or a path")
    assert list(tmp_path.iterdir()) == []
    pca.save(path)
    assert (bertfeat.PCA.load(path).transform(X) == pca.transform(X)).all()


def test_save_refuses_an_existing_file_and_another_formats_name(tmp_path):
    """PCA.save replaced whatever the path held: a user's CSV, the feature file the PCA was fitted from (then read
    back as 'magic bytes not found'). Now an existing file is refused unless overwrite=True, as `pca fit -o` without
    --overwrite, and a name ending in another format's extension is refused as `pca fit -o x.csv` is; the files stay
    byte for byte."""
    pca = bertfeat.PCA(2).fit(np.random.default_rng(0).normal(size=(20, 4)))
    mine = tmp_path / "mine.npz"
    mine.write_bytes(b"a user's file")
    with pytest.raises(BertfeatError) as e:
        pca.save(mine)
    assert e.value.message == (f"the PCA model {mine} exists - pass overwrite=True to replace it, or save to another "
                               "path")
    assert mine.read_bytes() == b"a user's file"
    for name in ("mine.csv", "feats.parquet", "X.npy"):
        (tmp_path / name).write_bytes(b"data")
        with pytest.raises(BertfeatError) as e:
            pca.save(tmp_path / name, overwrite=True)
        stem = name.rsplit(".", 1)[0]
        assert e.value.message == (f"the PCA model {tmp_path / name} ends in .{name.rsplit('.', 1)[1]}, but a PCA model "
                                   f"is a .npz archive - name it .npz (e.g. path='{stem}.npz'); reduced features are "
                                   "written by `bertfeat pca transform`")
        assert (tmp_path / name).read_bytes() == b"data"
    with pytest.raises(BertfeatError, match="overwrite='yes' is not True or False"):
        pca.save(mine, overwrite="yes")
    assert pca.save(mine, overwrite=True) == mine and bertfeat.PCA.load(mine).n_components_ == 2
    assert pca.save(tmp_path / "new.npz") == tmp_path / "new.npz"  # a new file needs no overwrite
    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "nowhere.npz")  # a link leading nowhere is a file name in use too
    with pytest.raises(BertfeatError, match="exists - pass overwrite=True"):
        pca.save(link)


def test_save_takes_its_switches_as_switches(tmp_path):
    """PCA.save(p, include_stats='no') stored the statistics ('no' is truthy); a string is refused, 1 / 0 taken as
    extract's switches take them."""
    pca = bertfeat.PCA(2, solver="covariance").fit(np.random.default_rng(0).normal(size=(20, 4)))
    with pytest.raises(BertfeatError, match="^include_stats='no' is not True or False"):
        pca.save(tmp_path / "a.npz", include_stats="no")
    assert not (tmp_path / "a.npz").exists()
    pca.save(tmp_path / "b.npz", include_stats=0)
    pca.save(tmp_path / "c.npz", include_stats=1)
    import zipfile

    names = [set(zipfile.ZipFile(tmp_path / f).namelist()) for f in ("b.npz", "c.npz")]
    assert names[1] - names[0], names  # the statistics' arrays, in c.npz only
