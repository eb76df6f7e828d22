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
    with pytest.raises(ResumeError, match=r"^cannot resume: .*pca_model: \{'path': "):
        bertfeat.extract(test, out, model=tiny_model(), chunk_rows=5, resume=True)
    s = bertfeat.extract(test, out, model=tiny_model(), pca_model=model, chunk_rows=5, resume=True)
    assert s.chunks_resumed == 2 and pq.read_table(out).num_rows == 30
