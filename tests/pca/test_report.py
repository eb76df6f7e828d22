"""bertfeat.pca.report: the numbers of the explained-variance report, its files and its table."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rich.console import Console

from bertfeat.pca.estimator import PCA
from bertfeat.pca.report import build_pca_report, render_pca_report, write_pca_report

SOURCE = {"features": "train.parquet", "fingerprint": {"model_id": "m", "pooling": "mean", "layers": [-1]}}


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(3)
    d = 30
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (rng.standard_normal((2000, d)) * np.sqrt(0.75 ** np.arange(d))) @ Q.T + 5.0


@pytest.fixture(scope="module")
def fitted(X):
    return PCA(6).fit(X)


def independent_spectrum(X):
    """Eigenvalues of the ddof=1 covariance, straight from NumPy, descending."""
    return np.sort(np.linalg.eigvalsh(np.cov(X, rowvar=False)))[::-1]


def test_report_numbers_match_an_independent_computation(X, fitted):
    report = build_pca_report(fitted, SOURCE)
    ev = independent_spectrum(X)
    ratio = ev / ev.sum()
    cum = np.cumsum(ratio)
    assert (report["n_samples"], report["n_features"], report["n_components"]) == (2000, 30, 6)
    np.testing.assert_allclose(report["components"]["explained_variance"], ev, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(report["components"]["explained_variance_ratio"], ratio, atol=1e-12)
    np.testing.assert_allclose(report["components"]["cumulative_ratio"], cum, atol=1e-12)
    assert report["variance_kept"] == pytest.approx(cum[5], abs=1e-12)
    assert report["total_variance"] == pytest.approx(np.var(X, axis=0, ddof=1).sum(), rel=1e-12)
    # thresholds by a plain loop: the first k whose cumulative ratio exceeds t
    for entry in report["thresholds"]:
        expected = next(i + 1 for i, c in enumerate(cum) if c > entry["fraction"])
        assert entry["components"] == expected
    assert [t["fraction"] for t in report["thresholds"]] == [0.8, 0.9, 0.95, 0.99]
    assert [t["components"] for t in report["thresholds"]] == [6, 8, 11, 16]  # for this spectrum, pinned
    assert report["source"] == SOURCE and report["spectrum_complete"] is True


def test_thresholds_are_the_k_that_a_fraction_n_components_keeps(X, fitted):
    # one rule (solvers.components_needed) behind the report, PCA.components_needed and n_components=0.95
    report = build_pca_report(fitted)
    for entry in report["thresholds"]:
        t = entry["fraction"]
        assert entry["components"] == fitted.components_needed(t) == PCA(t).fit(X).n_components_, t
    partial = PCA(5, solver="randomized", random_state=0).fit(X)
    cum = np.cumsum(independent_spectrum(X)) / independent_spectrum(X).sum()
    assert partial.components_needed(0.5) == next(i + 1 for i, c in enumerate(cum) if c > 0.5) == 3
    assert partial.components_needed(0.8) is None  # beyond the known top 5 (~77 %)


def test_reconstruction_error_equals_actual_reconstruction(X, fitted):
    report = build_pca_report(fitted)
    X_hat = fitted.inverse_transform(fitted.transform(X))
    actual = np.mean(np.sum((X - X_hat) ** 2, axis=1))  # mean over rows of the squared error
    rec = report["reconstruction"]
    assert rec["mse_per_sample"] == pytest.approx(actual, rel=1e-9)
    assert rec["mse_per_feature"] == pytest.approx(np.mean((X - X_hat) ** 2), rel=1e-9)
    assert rec["relative"] == pytest.approx(1 - report["variance_kept"], abs=1e-12)


def test_write_report_files_read_back(tmp_path, X, fitted):
    paths = write_pca_report(fitted, tmp_path / "sub" / "pca", source=SOURCE)
    assert {k: p.name for k, p in paths.items()} == {"json": "pca.report.json", "markdown": "pca.report.md", "png": "pca.report.png"}
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["pca.report.json", "pca.report.md", "pca.report.png"]
    back = json.loads(paths["json"].read_text())
    ev = independent_spectrum(X)
    np.testing.assert_allclose(back["components"]["explained_variance"], ev, rtol=1e-9, atol=1e-15)
    assert back["variance_kept"] == pytest.approx(np.cumsum(ev)[5] / ev.sum(), abs=1e-12)
    assert back["thresholds"][2] == {"fraction": 0.95, "components": 11}
    assert back["n_samples"] == 2000 and back["n_components"] == 6 and back["source"] == SOURCE

    md = paths["markdown"].read_text()
    assert "![Scree plot and cumulative explained variance](pca.report.png)" in md
    assert "| 90 % | 8 |" in md and "| 95 % | 11 |" in md and "| 99 % | 16 |" in md
    assert f"| variance kept by k | {100 * back['variance_kept']:.2f} % |" in md
    assert "| fingerprint.model_id | m |" in md

    import matplotlib.image as mpimg

    img = mpimg.imread(paths["png"])
    assert img.shape[:2] == (450, 1200)  # 12 x 4.5 in at 100 dpi
    assert img[..., :3].std() > 0.05  # something was drawn


def test_report_for_randomized_partial_spectrum(tmp_path, X):
    pca = PCA(5, solver="randomized", random_state=0).fit(X)
    report = build_pca_report(pca)
    assert report["spectrum_complete"] is False and len(report["components"]["explained_variance"]) == 5
    assert [t["components"] for t in report["thresholds"]] == [None, None, None, None]  # 5 components reach ~77 %
    X_hat = pca.inverse_transform(pca.transform(X))
    assert report["reconstruction"]["mse_per_sample"] == pytest.approx(np.mean(np.sum((X - X_hat) ** 2, axis=1)), rel=1e-6)
    paths = write_pca_report(pca, tmp_path / "r")
    assert "| 80 % | not reached |" in paths["markdown"].read_text()


def test_render_rich_table(fitted):
    console = Console(record=True, width=100)
    render_pca_report(build_pca_report(fitted, SOURCE), console)
    text = console.export_text()
    assert "2,000" in text and "components kept (k)" in text
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in text.splitlines() if line.count("│") == 3}
    assert rows["variance kept"] == f"{100 * fitted.explained_variance_ratio_.sum():.2f} %"
    assert [rows[f"{p} % of variance"] for p in (80, 90, 95, 99)] == ["6", "8", "11", "16"]
    assert rows["Minka's MLE"] == "29" and rows["broken stick"] == "6"


def test_suggestions_match_scikit_learn_mle_and_a_plain_broken_stick(tmp_path, X, fitted):
    """Minka's k is scikit-learn's n_components='mle'; the broken stick by a plain loop over Jackson's formula."""
    SkPCA = pytest.importorskip("sklearn.decomposition").PCA
    report = build_pca_report(fitted)
    sug = report["suggestions"]
    assert sug["mle"]["components"] == SkPCA("mle").fit(X).n_components_ == 29
    ratio = independent_spectrum(X) / independent_spectrum(X).sum()
    d = X.shape[1]
    expected = 0
    for i in range(1, d + 1):  # keep component i while its share beats the i-th longest of d random pieces
        if ratio[i - 1] <= sum(1.0 / j for j in range(i, d + 1)) / d:
            break
        expected = i
    assert sug["broken_stick"]["components"] == expected == 6
    paths = write_pca_report(fitted, tmp_path / "s")
    md = paths["markdown"].read_text()
    assert "| Minka's MLE | 29 | Minka's MLE, what n_components='mle' keeps |" in md
    assert "| broken stick | 6 | components above the broken-stick expectation |" in md
    assert json.loads(paths["json"].read_text())["suggestions"] == sug


def test_suggestions_say_why_they_are_missing(X):
    few = build_pca_report(PCA(5).fit(X[:20]))["suggestions"]  # fewer rows than features: no MLE, as scikit-learn
    assert few["mle"] == {"components": None, "why": "needs at least as many rows as features (20 < 30)"}
    assert few["broken_stick"]["components"] is not None
    part = build_pca_report(PCA(5, solver="randomized", random_state=0).fit(X))["suggestions"]
    assert part["mle"]["components"] is None and "randomized" in part["mle"]["why"]
    assert part["broken_stick"] == {"components": None, "why": "all 5 known components are above it: fit more to tell"}
    part = build_pca_report(PCA(8, solver="randomized", random_state=0).fit(X))["suggestions"]
    assert part["broken_stick"]["components"] == 6  # known: the 7th of the 8 falls below the stick


def test_mle_log_likelihoods_equal_minkas_formula_rank_by_rank():
    """The O(d^2) split sum against the formula written out per rank as scikit-learn's _assess_dimension does."""
    import math

    from bertfeat.pca.solvers import infer_dimension, mle_log_likelihoods

    def minka(s, rank, n):  # Minka 2000, eq. (30)-(31), two plain loops
        d = len(s)
        if s[rank - 1] < 1e-15:
            return -math.inf
        pu = -rank * math.log(2.0) + sum(math.lgamma((d - i + 1) / 2.0) - math.log(math.pi) * (d - i + 1) / 2.0
                                         for i in range(1, rank + 1))
        pl = -sum(math.log(x) for x in s[:rank]) * n / 2.0
        v = max(1e-15, sum(s[rank:]) / (d - rank))
        pv = -math.log(v) * n * (d - rank) / 2.0
        m = d * rank - rank * (rank + 1.0) / 2.0
        pp = math.log(2.0 * math.pi) * (m + rank) / 2.0
        c = list(s[:rank]) + [v] * (d - rank)
        pa = sum(math.log((s[i] - s[j]) * (1.0 / c[j] - 1.0 / c[i])) + math.log(n)
                 for i in range(rank) for j in range(i + 1, d))
        return pu + pl + pv + pp - pa / 2.0 - rank * math.log(n) / 2.0

    rng = np.random.default_rng(1)
    for d, n in [(2, 10), (3, 5), (40, 100), (90, 150)]:
        s = np.sort(rng.gamma(0.5, 1.0, d))[::-1] * np.geomspace(1, 1e-3, d)
        ref = np.array([-math.inf] + [minka(s, r, n) for r in range(1, d)])
        got = mle_log_likelihoods(s, n)
        assert np.array_equal(np.isfinite(got), np.isfinite(ref))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-12)
        assert infer_dimension(s, n) == int(np.argmax(ref))
    s = np.concatenate([np.geomspace(5, 0.1, 10), np.zeros(5)])  # zero variances: those ranks are -inf, as there
    assert infer_dimension(s, 50) == 10 and np.isneginf(mle_log_likelihoods(s, 50)[11:]).all()
    assert infer_dimension(np.array([2.0, 1.0, 1.0, 0.5]), 20) >= 1  # a tie (log 0): that rank is refused, not +inf
    assert np.isneginf(mle_log_likelihoods(np.array([2.0, 1.0, 1.0, 0.5]), 20)[2:]).all()


def test_scree_axis_stops_at_the_last_meaningful_component(tmp_path, monkeypatch):
    """20 rows of 64 features: 19 components carry the variance; the 20th is float rounding of zero (~2e-8 of the
    first); the log axis stops at half the 19th, and the numerical zero is not drawn."""
    from matplotlib.axes import Axes

    from bertfeat.pca.report import scree_range

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((20, 5)) @ rng.standard_normal((5, 64)) + 0.01 * rng.standard_normal((20, 64)))
    pca = PCA(solver="covariance").fit(X.astype(np.float32))
    var = np.asarray(pca.explained_variance_, dtype=float)
    assert len(var) == 20 and var[19] < 1e-7 * var[0] < var[18]  # 19 components (5 strong, 14 of the noise), a zero
    shown, bottom = scree_range(var)
    assert shown.tolist() == [True] * 19 + [False] and bottom == pytest.approx(var[18] / 2)
    limits = []
    monkeypatch.setattr(Axes, "set_ylim", lambda self, *a, **k: limits.append((a, k)) or Axes.get_ylim(self))
    write_pca_report(pca, tmp_path / "r")
    assert ((), {"bottom": var[18] / 2}) in limits
    assert scree_range(np.zeros(3))[1] is None  # constant data: nothing to draw, no limit


def test_broken_stick_with_fewer_rows_than_features_has_as_many_pieces_as_the_rank(tmp_path):
    """40 rows of isotropic noise in 384 features: 39 components hold all the variance, each about 1/39 of it. Against
    a 384-piece stick every one of them beat its expected share (the report suggested 39 for pure noise); against
    the 39 pieces the rows can fill, none does. The PNG draws the same curve (and is written)."""
    X = np.random.default_rng(5).normal(size=(40, 384))
    pca = PCA(5).fit(X)
    ratio = np.asarray(pca.all_explained_variance_) / pca.total_variance_
    old = [sum(1.0 / j for j in range(i, 385)) / 384 for i in range(1, 40)]  # the 384-piece stick
    assert (ratio[:39] > old).all()  # which every component of the noise beat
    assert ratio[0] < sum(1.0 / j for j in range(1, 40)) / 39  # the 39-piece stick's longest: none beats it
    assert build_pca_report(pca)["suggestions"]["broken_stick"]["components"] == 0
    signal = X.copy()
    signal[:, 0] += np.repeat([-20.0, 20.0], 20)  # one strong direction: it, and only it, is above the stick
    assert build_pca_report(PCA(5).fit(signal))["suggestions"]["broken_stick"]["components"] == 1
    assert write_pca_report(pca, tmp_path / "noise")["png"].stat().st_size > 0


def test_no_variance_is_said_not_reported_as_zero_percent(tmp_path):
    """Every row the same: the share kept and the share discarded are both 0 / 0. The report said 0.00 % kept and
    0.00 % discarded; now both are None ('-'), a note says why, and a BertfeatWarning is issued."""
    from bertfeat.errors import BertfeatWarning

    pca = PCA(2).fit(np.tile(np.arange(6.0), (12, 1)))
    with pytest.warns(BertfeatWarning, match=r"PCA report: the features have no variance \(every row the same\)"):
        paths = write_pca_report(pca, tmp_path / "same")
    back = json.loads(paths["json"].read_text())
    assert back["variance_kept"] is None and back["reconstruction"]["relative"] is None
    assert back["note"] == "the features have no variance (every row the same): no component explains anything"
    md = paths["markdown"].read_text()
    assert "**Note:** the features have no variance (every row the same): no component explains anything." in md
    assert "| variance kept by k | - |" in md and "| variance discarded | - |" in md


def test_markdown_escapes_what_would_break_a_row_or_open_html(tmp_path, fitted):
    """A newline in a path or label ended the table row, '<' passed raw HTML through, and a figure name with a space
    or parentheses was no link at all (CommonMark ends the destination at the space)."""
    from bertfeat.pca.report import render_markdown

    report = build_pca_report(fitted, {"features": "a|b\nc.parquet"})
    report["probe"] = {"label": "label|x\n<script>alert(1)</script>", "skipped": "one class"}
    md = render_markdown(report, "my report (v1).png")
    assert "![Scree plot and cumulative explained variance](my%20report%20%28v1%29.png)" in md
    assert "| features | a\\|b\\\\nc.parquet |" in md  # the newline shown as \n (its backslash escaped)
    assert "## Linear probe: label\\|x\\\\n\\<script\\>alert(1)\\</script\\>" in md
    assert "<script>" not in md.replace("\\<script>", "")
