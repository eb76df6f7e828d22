"""The explained-variance report of a fitted PCA: JSON, Markdown, a PNG figure and a rich table.

Numbers (shape legend: n rows, d features, r = min(n, d), k kept components):

* ``thresholds``: for 80/90/95/99 %, the smallest k whose cumulative ratio exceeds the
  fraction - exactly the k that ``n_components=0.95`` would pick (None if the known part
  of the spectrum never gets there, as with the randomized solver).
* ``reconstruction.mse_per_sample``: mean over the training rows of ||x - x_hat||^2 when
  keeping k components = (sum of the discarded variances) * (n - 1) / n;
  ``mse_per_feature`` is that divided by d; ``relative`` = discarded / total variance.
* ``suggestions``: two data-driven choices of k, each ``{"components": k or None, "why": ...}`` (None says why):
  ``mle``, Minka's MLE (what ``n_components="mle"`` keeps, as scikit-learn's; needs n >= d and the whole
  spectrum) and ``broken_stick``, the leading components whose ratio exceeds the broken-stick expectation
  b_i = (1/p) sum_{j=i..p} 1/j (Jackson 1993: the share of the i-th longest piece of a stick broken at random
  into p pieces, p = min(d, n - 1) the most components that can hold variance: with fewer rows than features, a
  d-piece stick put every component of pure noise above it; with the randomized solver, known only if a component
  within the known part falls below it).
* No variance at all (every row the same): ``variance_kept`` and ``reconstruction.relative`` are None (0 / 0; the
  report said 0 % kept and 0 % discarded), ``note`` says why, and building the report warns.
  The scree figure draws the broken-stick curve.
* ``probe`` (only when asked, ``bertfeat report --probe FEATURES --label COLUMN``): cross-validated accuracy of a
  ridge classifier on the first k components for a label column, against the majority class and, for the
  unreduced features, all of them (bertfeat.pca.probe).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from ..atomic import atomic_output, remove_stale_temps, together
from ..errors import visible, warn
from .estimator import PCA
from .solvers import components_needed, infer_dimension, rounding_floor

__all__ = ["THRESHOLDS", "FIGSIZE", "DPI", "broken_stick", "suggestions", "build_pca_report", "write_pca_report",
           "render_pca_report", "report_paths"]

THRESHOLDS = (0.80, 0.90, 0.95, 0.99)
FIGSIZE = (12.0, 4.5)  # inches; at DPI 100 the PNG is 1200 x 450 px
DPI = 100
REPORT_KIND = "bertfeat-pca-report"
SUGGESTION_NAMES = {"mle": "Minka's MLE", "broken_stick": "broken stick"}


def broken_stick(d: int) -> np.ndarray:
    """The broken-stick expectation (d,): b_i = (1/d) sum_{j=i..d} 1/j, i = 1 .. d (sums to 1)."""
    return np.cumsum(1.0 / np.arange(d, 0, -1, dtype=np.float64))[::-1] / d


def stick_pieces(n: int, d: int) -> int:
    """The pieces of the broken stick for n rows of d features: the components that can hold variance, min(d, n - 1)
    (centred rows span at most n - 1 directions), at least 1."""
    return max(1, min(d, n - 1))


def suggestions(spectrum: np.ndarray, ratio: np.ndarray, n: int, d: int, complete: bool, floor: float = 0.0,
                kept: int | None = None) -> dict:
    """Minka's MLE and the broken-stick rule's k for a spectrum (r,) or its known top part (see the docstring).
    ``floor``: the fit's rounding floor (solvers.rounding_floor), below which a variance counts as 0 for Minka's choice,
    as n_components='mle' counts it; ``kept``: the k a fit with n_components='mle' kept (the suggestion is it)."""
    if not complete:
        mle = {"components": None, "why": "needs the whole spectrum (the randomized solver keeps only the top k)"}
    elif n < d:
        mle = {"components": None, "why": f"needs at least as many rows as features ({n:,} < {d:,})"}
    else:
        k = kept if kept is not None else infer_dimension(np.where(spectrum > floor, spectrum, 0.0), n)
        mle = {"components": k, "why": "Minka's MLE, what n_components='mle' keeps"}
    expected = np.zeros(len(ratio))
    stick_d = broken_stick(stick_pieces(n, d))[: len(ratio)]
    expected[: len(stick_d)] = stick_d  # components past the rank: expected share 0, and none above it
    below = np.flatnonzero(ratio <= expected)  # components at or under their expected share
    if len(below):
        stick = {"components": int(below[0]), "why": "components above the broken-stick expectation"}
    elif complete:
        stick = {"components": len(ratio), "why": "components above the broken-stick expectation"}
    else:
        stick = {"components": None, "why": f"all {len(ratio)} known components are above it: fit more to tell"}
    return {"mle": mle, "broken_stick": stick}


def build_pca_report(pca: PCA, source: dict | None = None, probe: dict | None = None) -> dict:
    """A JSON-able dict describing a fitted PCA's spectrum, and a probe's result if given (see the module
    docstring)."""
    from ..version import __version__

    spectrum = np.asarray(pca.all_explained_variance_, dtype=np.float64)  # (r,) or (k,)
    total = float(pca.total_variance_)
    n, d, k = int(pca.n_samples_), int(pca.n_features_in_), int(pca.n_components_)
    ratio = spectrum / total if total > 0 else np.zeros_like(spectrum)
    cumulative = np.cumsum(ratio)
    complete = len(spectrum) >= min(n, d)
    discarded = float(spectrum[k:].sum()) if complete else max(total - float(spectrum[:k].sum()), 0.0)
    mse = discarded * (n - 1) / n
    note = None
    if not total > 0:
        note = "the features have no variance (every row the same): no component explains anything"
        warn(f"PCA report: {note} - check the input's texts (one text repeated?) or the feature file", every_time=False)
    if source is None:
        source = dict(getattr(pca, "source_", None) or {})
        source.setdefault("fingerprint", pca.fingerprint_)
    return {
        "kind": REPORT_KIND,
        "bertfeat_version": __version__,
        "n_samples": n,
        "n_features": d,
        "n_components": k,
        "n_components_requested": pca.n_components,
        "solver": pca.fit_solver_,
        "whiten": bool(pca.whiten),
        "total_variance": total,
        "variance_kept": (float(cumulative[k - 1]) if k else 0.0) if note is None else None,
        "noise_variance": float(pca.noise_variance_),
        "reconstruction": {
            "mse_per_sample": mse,
            "mse_per_feature": mse / d,
            "relative": discarded / total if note is None else None,
        },
        "thresholds": [{"fraction": t, "components": components_needed(ratio, t)} for t in THRESHOLDS],
        "suggestions": suggestions(spectrum, ratio, n, d, complete, rounding_floor(spectrum, n, d, pca.fit_solver_),
                                   k if isinstance(pca.n_components, str) and pca.n_components == "mle" else None),
        "spectrum_complete": complete,
        "components": {
            "explained_variance": spectrum.tolist(),
            "explained_variance_ratio": ratio.tolist(),
            "cumulative_ratio": cumulative.tolist(),
        },
        "source": source,
    } | ({"note": note} if note else {}) | ({"probe": probe} if probe else {})


def report_paths(out_prefix: str | os.PathLike) -> dict[str, Path]:
    """``<prefix>.report.json``, ``.report.md`` and ``.report.png``."""
    prefix = str(out_prefix)
    return {"json": Path(f"{prefix}.report.json"), "markdown": Path(f"{prefix}.report.md"), "png": Path(f"{prefix}.report.png")}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def _first(k: int) -> str:
    return "first component" if k == 1 else f"first {k} components"


#: the characters of a user's text that Markdown would read as its own (emphasis, code, links, raw HTML)
MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*[]<>"})


def md_text(text: Any, cell: bool = True, code: bool = False) -> str:
    """A user's text (a file name, a label, a class) in the Markdown report, shown as written: its control characters
    escaped (errors.visible: a newline would end the row), Markdown's own characters too (``*b*`` was shown as an
    italic b, ``<c>`` vanished as an HTML tag), but not in a code span (``code``: there a backslash shows), and in a
    table cell '|', which splits it (GitHub's tables, in a code span as well)."""
    from ..errors import visible

    text = visible(str(text))
    text = text if code else text.translate(MD_SPECIAL)
    return text.replace("|", "\\|") if cell else text



def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (np.ndarray,)):
        return o.tolist()
    return str(o)


def render_markdown(report: dict, png_name: str | None = None) -> str:
    """The Markdown report: summary, threshold table, source, first components, figure link."""
    rec = report["reconstruction"]
    lines = ["# PCA report", ""]
    if png_name:
        lines += [f"![Scree plot and cumulative explained variance]({quote(png_name)})", ""]  # spaces, ( )
    if report.get("note"):
        lines += [f"**Note:** {md_text(report['note'])}.", ""]
    lines += [
        "| | |",
        "|---|---|",
        f"| rows (n_samples) | {report['n_samples']:,} |",
        f"| features (n_features) | {report['n_features']:,} |",
        f"| components kept (k) | {report['n_components']:,} |",
        f"| variance kept by k | {_pct(report['variance_kept'])} |",
        f"| mean reconstruction error per row (sum of squares) | {rec['mse_per_sample']:.6g} |",
        f"| mean reconstruction error per feature | {rec['mse_per_feature']:.6g} |",
        f"| variance discarded | {_pct(rec['relative'])} |",
        f"| total variance | {report['total_variance']:.6g} |",
        f"| solver | {report['solver']} |",
        f"| whiten | {'yes' if report['whiten'] else 'no'} |",
        "",
        "## Components needed per variance threshold",
        "",
        "| variance explained | components |",
        "|---:|---:|",
    ]
    for t in report["thresholds"]:
        lines.append(f"| {100 * t['fraction']:.0f} % | {t['components'] if t['components'] is not None else 'not reached'} |")
    if "suggestions" in report:
        lines += ["", "## Suggested number of components", "", "| rule | components | |", "|---|---:|---|"]
        for name, s in report["suggestions"].items():
            shown = s["components"] if s["components"] is not None else "-"
            lines.append(f"| {SUGGESTION_NAMES.get(name, name)} | {shown} | {s['why']} |")
    probe = report.get("probe")
    if probe and "skipped" in probe:
        lines += ["", f"## Linear probe: {md_text(probe['label'])}", "", f"None: {md_text(probe['skipped'])}"]
    elif probe:
        lines += ["", f"## Linear probe: {md_text(probe['label'])}", "",
                  f"{probe['classifier']} on {probe['rows']:,} rows ({probe['classes']} classes; "
                  f"{probe['rows_unlabelled']:,} without a label skipped) of {md_text(probe['features_file'])}.", "",
                  "| input | accuracy | std over folds |", "|---|---:|---:|",
                  f"| majority class | {_pct(probe['majority_baseline'])} | |"]
        for a in probe["accuracy"]:
            lines.append(f"| {_first(a['components'])} | {_pct(a['accuracy'])} | {_pct(a['std'])} |")
        if probe.get("all_features"):
            a = probe["all_features"]
            lines.append(f"| all {a['features']} features (no PCA) | {_pct(a['accuracy'])} | {_pct(a['std'])} |")
    source = report.get("source") or {}
    if source:
        lines += ["", "## Feature source", "", "| key | value |", "|---|---|"]
        flat = dict(source)
        fp = flat.pop("fingerprint", None)
        for key, value in list(flat.items()) + [(f"fingerprint.{k}", v) for k, v in (fp or {}).items()]:
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value, default=_json_default)
            lines.append(f"| {key} | {md_text(text)} |")
    comps = report["components"]
    m = min(20, len(comps["explained_variance"]))
    lines += ["", f"## First {m} components", "", "| # | explained variance | ratio | cumulative |", "|---:|---:|---:|---:|"]
    for i in range(m):
        lines.append(
            f"| {i + 1} | {comps['explained_variance'][i]:.6g} | {_pct(comps['explained_variance_ratio'][i])} "
            f"| {_pct(comps['cumulative_ratio'][i])} |"
        )
    lines += ["", "All components are listed in the JSON report.", ""]
    return "\n".join(lines)


#: variances under this fraction of the first are float rounding of a zero (rank-deficient data, fewer rows than
#: features): the scree's log axis stops above them instead of running down to ~1e-18
SCREE_FLOOR = 1e-7


def scree_range(var: np.ndarray) -> tuple[np.ndarray, float | None]:
    """The components a scree draws (variance above SCREE_FLOOR of the first) and its log axis' lower limit (half
    the smallest drawn variance; None with nothing to draw)."""
    var = np.asarray(var, dtype=float)
    shown = var > (var[0] * SCREE_FLOOR if len(var) and var[0] > 0 else 0.0)
    return shown, (float(var[shown].min()) / 2 if shown.any() else None)


def _draw(report: dict, path: Path) -> None:
    """Scree (log variance per component) and cumulative ratio with thresholds and k; exactly 1200 x 450 px."""
    from matplotlib.figure import Figure  # object API: no pyplot, no global backend switch

    comps = report["components"]
    var = np.asarray(comps["explained_variance"], dtype=float)
    cum = np.asarray(comps["cumulative_ratio"], dtype=float)
    x = np.arange(1, len(var) + 1)
    k = report["n_components"]
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    ax1, ax2 = fig.subplots(1, 2)
    shown, bottom = scree_range(var)
    ax1.plot(x[shown], var[shown], marker=".", markersize=3, linewidth=1)
    ax1.set_yscale("log")
    if bottom is not None:
        ax1.set_ylim(bottom=bottom)
    hidden = int(len(var) - shown.sum())
    if hidden:
        ax1.annotate(f"{hidden} component{'s' if hidden > 1 else ''} under {SCREE_FLOOR:g} of the first (numerical "
                     "zeros) not drawn", (0.02, 0.02), xycoords="axes fraction", fontsize=8, color="grey")
    # plain-text tick labels (1e-05 ... 0.1): the default 10^n labels go through mathtext, whose parser is
    # a third of the figure's drawing time in a short `bertfeat extract --pca`
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax1.yaxis.set_minor_formatter(NullFormatter())
    total = report["total_variance"]
    if total > 0:  # where the scree falls under the broken stick, components explain less than chance would
        stick = broken_stick(stick_pieces(report["n_samples"], report["n_features"]))[: len(var)] * total
        ax1.plot(x[: len(stick)], stick, color="grey", linestyle=":", linewidth=1, label="broken stick")
    ax1.axvline(k, color="tab:red", linestyle="--", linewidth=1, label=f"k = {k}")
    ax1.set_title("Scree: variance per component")
    ax1.set_xlabel("component")
    ax1.set_ylabel("explained variance (log)")
    ax1.legend(loc="upper right")
    ax2.plot(x, cum, linewidth=1.5, color="tab:blue")
    for t in report["thresholds"]:
        kt = t["components"]
        ax2.axhline(t["fraction"], color="grey", linestyle=":", linewidth=0.8)
        if kt is not None:
            ax2.plot([kt], [cum[kt - 1]], marker="o", color="tab:green", markersize=5)
            ax2.annotate(f"{100 * t['fraction']:.0f}%: {kt}", (kt, cum[kt - 1]), textcoords="offset points", xytext=(6, -12), fontsize=8)
    if k:
        ax2.axvline(k, color="tab:red", linestyle="--", linewidth=1)
        ax2.plot([k], [cum[k - 1]], marker="D", color="tab:red", markersize=6, label=f"k = {k}: {_pct(cum[k - 1])}")
        ax2.legend(loc="lower right")
    ax2.set_ylim(0, 1.02)
    ax2.set_title("Cumulative explained variance")
    ax2.set_xlabel("components")
    ax2.set_ylabel("fraction of variance")
    fig.subplots_adjust(left=0.075, right=0.98, bottom=0.12, top=0.9, wspace=0.22)
    fig.savefig(path, format="png", dpi=DPI)  # no bbox_inches: the size stays fixed


def write_pca_report(pca: PCA, out_prefix: str | os.PathLike, source: dict | None = None,
                     probe: dict | None = None) -> dict[str, Path]:
    """Write ``<prefix>.report.{json,md,png}`` atomically; returns their paths by kind."""
    report = build_pca_report(pca, source, probe)
    paths = report_paths(out_prefix)
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    report["files"] = {kind: p.name for kind, p in paths.items()}
    for p in paths.values():  # a killed writer's temporaries
        remove_stale_temps(p)
    with together():  # the three appear together (an interrupted run leaves the old ones)
        with atomic_output(paths["png"]) as tmp:
            _draw(report, tmp)
        with atomic_output(paths["markdown"]) as tmp:
            tmp.write_text(render_markdown(report, paths["png"].name), encoding="utf-8")
        with atomic_output(paths["json"]) as tmp:
            tmp.write_text(json.dumps(report, indent=2, default=_json_default) + "\n", encoding="utf-8")
    return paths


def render_pca_report(report: dict, console: Any) -> None:
    """Print the summary, and the table of thresholds and suggestions, with rich.

    Any console: the label (a column name the user chose) is a ``Text`` or printed with markup off, never read as rich
    markup (``[red]``, ``[/b]``) or emoji codes."""
    from rich.table import Table
    from rich.text import Text

    rec = report["reconstruction"]
    summary = Table(title="PCA", show_header=False)
    summary.add_column("")
    summary.add_column("", justify="right")
    summary.add_row("rows", f"{report['n_samples']:,}")
    summary.add_row("features", f"{report['n_features']:,}")
    summary.add_row("components kept (k)", f"{report['n_components']:,}")
    summary.add_row("variance kept", _pct(report["variance_kept"]))
    summary.add_row("reconstruction MSE / row", f"{rec['mse_per_sample']:.4g}")
    summary.add_row("solver", str(report["solver"]))
    console.print(summary)
    table = Table(title="Components needed")
    table.add_column("rule")
    table.add_column("components", justify="right")
    for t in report["thresholds"]:
        table.add_row(f"{100 * t['fraction']:.0f} % of variance", str(t["components"]) if t["components"] is not None else "not reached")
    for name, s in report.get("suggestions", {}).items():
        table.add_row(SUGGESTION_NAMES.get(name, name), str(s["components"]) if s["components"] is not None else "-")
    console.print(table)
    probe = report.get("probe")
    if probe and "skipped" in probe:
        console.print(f"Linear probe of {probe['label']!r}: none ({probe['skipped']})", markup=False, highlight=False,
                      emoji=False)
    elif probe:
        t = Table(title=Text(visible(f"Linear probe: {probe['label']}"), style="table.title"),
                  caption=f"{probe['rows']:,} rows, {probe['classes']} classes, {probe['folds']}-fold")
        t.add_column("input")
        t.add_column("accuracy", justify="right")
        t.add_row("majority class", _pct(probe["majority_baseline"]))
        for a in probe["accuracy"]:
            t.add_row(_first(a["components"]), _pct(a["accuracy"]))
        if probe.get("all_features"):
            t.add_row(f"all {probe['all_features']['features']} features", _pct(probe["all_features"]["accuracy"]))
        console.print(t)
