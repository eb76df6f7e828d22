"""``bertfeat pca fit|transform`` and ``bertfeat report``: thin Typer wrappers.

The logic lives in ``bertfeat.pca.reduce`` (files), ``bertfeat.pca.estimator`` (the estimator) and
``bertfeat.pca.report``. Errors are raised as ``BertfeatError``; the main CLI turns them into
``Error: <what> - <fix>`` on stderr and exit code 1. ``app.py`` (``_register_optional``) registers::

    app.add_typer(pca_app, name="pca")
    app.command("report")(report_command)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..console import err_console, out_console
from .render import require_stdout

__all__ = ["pca_app", "fit_command", "transform_command", "report_command", "parse_n_components"]

# The library's values, spelled here so that `--help` imports no numeric module (NumPy, the PCA, pyarrow): each
# command imports what it runs. tests/cli/test_cli_pca.py checks they are the library's.
SOLVERS = ("auto", "svd", "covariance", "randomized")  # pca.solvers.SOLVERS
DEFAULT_ACCUMULATE = "mixed"  # pca.validation.DEFAULT_ACCUMULATE
DEFAULT_FOLDS = 5  # probe.DEFAULT_FOLDS
MIN_PROBE_ROWS = 2 * DEFAULT_FOLDS  # --probe-rows: two rows per fold of the probe's cross-validation at least

pca_app = typer.Typer(
    help="Fit a PCA on a features file, apply it to features, and report its explained variance.",
    no_args_is_help=True,
)


def parse_n_components(text: str | None) -> int | float | None:
    """``"100"`` -> 100, ``"0.95"`` -> 0.95, ``"1.0"``/``"all"``/None -> None (keep every component).

    The same parser as ``extract --pca`` (bertfeat.checks.parse_pca_spec): an empty ``-n ""`` is refused there
    (not a number), never taken as "every component"."""
    from ..checks import parse_pca_spec

    if text is None or text.strip().lower() == "none":
        return None
    return parse_pca_spec(text, "n_components")


def _check_not_npz(features: Path, model_use: str) -> None:
    """A .npz as FEATURES (pca fit, pca transform): a feature file is never one (arrayfile.check_array_file's advice is a
    PCA model's), so say what the command reads and where a PCA model goes."""
    from ..errors import BertfeatError

    if features.suffix.lower() == ".npz" and features.is_file():
        raise BertfeatError(f"{features}: a .npz is not a feature file",
                            f"pass a feature file of `bertfeat extract` (.parquet, .npy or .csv); {model_use}")


def _prefix_for(model_path: Path) -> Path:
    """``pca.npz`` -> ``pca`` (report files go beside the model)."""
    return model_path.with_suffix("") if model_path.suffix == ".npz" else model_path


def _accumulate_option(accumulate: str | None, precision: str | None) -> str:
    """``--accumulate``, or ``--precision``, its deprecated name (a warning on stderr, its value checked here).

    Both flags with different values are refused, naming both; an unknown ``--precision`` value is
    reported as ``unknown precision ...``. ``--accumulate`` alone is checked by the PCA, as before.
    """
    if precision is None:
        return DEFAULT_ACCUMULATE if accumulate is None else accumulate
    from ..pca.validation import accumulate_mode

    err_console.print("Warning: --precision on pca fit is deprecated, use --accumulate", markup=False, highlight=False,
                      soft_wrap=True)
    return accumulate_mode(accumulate, precision)


@pca_app.command("fit", epilog="Examples:\n\n  bertfeat pca fit feats.parquet -n 100 -o feats.pca100.npz\n\n"
                 "  bertfeat pca fit feats.parquet -n 0.95 -o feats.pca95.npz --quiet\n\n"
                 "  bertfeat pca fit feats.npy -n all -o feats.pca.npz --accumulate float64\n\n"
                 "  bertfeat pca fit feats.parquet -n 256 -o feats.pca256.npz --label label\n\n"
                 "  bertfeat pca fit wide.parquet -n 64 -o wide.pca64.npz --solver randomized --random-state 1")
def fit_command(
    features: Annotated[str, typer.Argument(help="Feature file (.parquet, .npy or .csv) from `bertfeat extract`.")],
    out: Annotated[str, typer.Option("-o", "--output", help="Model file to write (.npz).")],
    n_components: Annotated[
        Optional[str],
        typer.Option("-n", "--n-components", help="Components to keep: a number (100), a variance fraction (0.95), 'mle' (Minka's choice) or 'all' (the default)."),
    ] = None,
    solver: Annotated[
        str,
        typer.Option(help=f"One of {', '.join(SOLVERS)}. auto/covariance stream the file (auto: an svd in memory above "
                          "4096 features); svd/randomized load it into memory. All exact but randomized (approximate "
                          "top components, seeded by --random-state)."),
    ] = "auto",
    random_state: Annotated[int, typer.Option("--random-state", help="Seed of --solver randomized: the same seed gives "
                                              "the same model.")] = 0,
    whiten: Annotated[bool, typer.Option("--whiten", help="Scale outputs to unit variance.")] = False,
    accumulate: Annotated[
        Optional[str],
        typer.Option(help="How the statistics of float32 features accumulate. mixed (default): float32 block products "
                          "added in float64 (2x faster; on BERT features ratios within ~1e-8 of float64, trailing components of "
                          "a steep spectrum less close). float64: all in float64.",
                     show_default=False),
    ] = None,
    precision: Annotated[
        Optional[str], typer.Option("--precision", hidden=True, help="Deprecated name of --accumulate.")
    ] = None,
    batch_rows: Annotated[int, typer.Option("--batch-rows", help="Rows read per chunk.")] = 65536,
    label: Annotated[Optional[str], typer.Option("--label", help="A label column of FEATURES (extract --keep label): "
                                                 "the report adds how well the first k components predict it (a "
                                                 "cross-validated ridge classifier).")] = None,
    probe_rows: Annotated[int, typer.Option("--probe-rows", help="Rows the --label probe uses at most (a "
                                            "uniform sample).")] = 20_000,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the report table.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing output files (else refused).")] = False,
) -> None:
    """Fit a PCA on FEATURES (streaming), write the model and its report beside it."""
    from ..run.outlock import output_lock
    from ..pca.reduce import fit_pca_to_files
    from ..pca.report import build_pca_report, render_pca_report
    from ..features.arrayfile import check_array_file
    from ..run.outputs import check_name_lengths, check_outputs, feature_file_inputs, report_outputs
    from ..checks import check_count, check_model_output, check_output_name, local_path

    if not quiet:
        require_stdout("the report table", "pass -q (the report files hold it)")
    check_count(batch_rows, "batch_rows")
    check_count(probe_rows, "probe_rows", MIN_PROBE_ROWS)
    check_count(random_state, "random_state", 0)
    accumulate = _accumulate_option(accumulate, precision)
    from ..pca.solvers import check_solver

    n = parse_n_components(n_components)  # the option's own errors before the output's ("already exists")
    check_solver(solver)
    check_output_name(out, "PCA model", "pca100.npz")
    out, features = Path(out), local_path(features, "feature file")
    _check_not_npz(features, "a PCA model (.npz) is applied with `bertfeat pca transform FEATURES --pca-model MODEL`")
    check_array_file(features, "feature file")
    check_name_lengths([("PCA model", out)] + report_outputs(_prefix_for(out)))  # the report's names too
    with output_lock(out, prefixes=(_prefix_for(out),)):  # one writer per output (outlock.py)
        check_outputs([("output", out)] + report_outputs(_prefix_for(out)), feature_file_inputs(features), overwrite)
        check_model_output(out)
        pca, outputs, source, probe = fit_pca_to_files(
            features, out, _prefix_for(out), n, label=label, probe_rows=probe_rows,
            solver=solver, whiten=whiten, accumulate=accumulate, batch_rows=batch_rows, random_state=random_state)
    if probe and "skipped" in probe:
        err_console.print(f"Warning: no linear probe of {label!r}: {probe['skipped']}", markup=False, highlight=False,
                     soft_wrap=True)
    if not quiet:
        render_pca_report(build_pca_report(pca, source, probe), out_console)
        err_console.print(f"wrote {out}, {', '.join(str(p) for k, p in outputs.items() if k != 'pca_model')}",
                          markup=False, highlight=False, soft_wrap=True)


@pca_app.command("transform", epilog="Examples:\n\n  bertfeat pca transform feats.parquet --pca-model feats.pca100.npz -o reduced.parquet\n\n"
                 "  bertfeat pca transform new.npy --pca-model feats.pca100.npz -o new.reduced.npy")
def transform_command(
    features: Annotated[str, typer.Argument(help="Feature file to reduce.")],
    pca_path: Annotated[str, typer.Option("--pca-model", help="Model file (.npz) from `bertfeat pca fit` or `extract --pca`.")],
    out: Annotated[str, typer.Option("-o", "--output", help="Reduced feature file to write.")],
    fmt: Annotated[
        Optional[str], typer.Option("--format", help="parquet, npy or csv (default: from the output suffix).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Transform even if the features come from a different source.")] = False,
    batch_rows: Annotated[int, typer.Option("--batch-rows", help="Rows read per chunk.")] = 65536,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing output files (else refused).")] = False,
    dtype: Annotated[str, typer.Option("--dtype", help="Type the reduced features are written as: float32 (default) "
                                                       "or float16 (half the size, rounded to nearest).")] = "float32",
) -> None:
    """Reduce FEATURES with a saved PCA (streaming); ids, extras and metadata are kept."""
    from ..features import feature_format
    from ..run.outlock import output_lock
    from ..pca.estimator import PCA
    from ..pca.reduce import reduce_features_file, unchecked_source
    from ..features.base import check_dtype
    from ..features.arrayfile import check_array_file
    from ..run.outputs import check_name_lengths, check_outputs, check_regular, feature_file_inputs, feature_file_outputs
    from ..checks import check_count, check_output_format, check_output_name, local_path

    check_count(batch_rows, "batch_rows")
    check_dtype(dtype)
    check_output_name(out, "output", "reduced.parquet")
    check_regular([("output", Path(out))])  # before the format: /dev/stdout is not "to be named /dev/stdout.csv"
    check_output_format(out, fmt)
    out, features = Path(out), local_path(features, "feature file")
    pca_path = local_path(pca_path, "PCA model", "pca_model")
    _check_not_npz(features, "the PCA model (.npz) goes to --pca-model")
    check_array_file(features, "feature file")
    pca = PCA.load(pca_path)  # checks the file first: not found, or "not a bertfeat PCA model" (a .npy, a directory, ...)
    outputs = feature_file_outputs(out, feature_format(out, fmt))  # the file and its side files (.npy: ids, provenance)
    check_name_lengths(outputs)  # a .npy's ids and provenance files too
    with output_lock(*(p for _, p in outputs)):
        check_outputs(outputs, feature_file_inputs(features) + [pca_path], overwrite)
        path = reduce_features_file(features, out, pca, fmt, force=force, batch_rows=batch_rows, dtype=dtype)
    if unchecked_source(features, pca):  # a warning: shown under --quiet too (docs/cli.md)
        err_console.print(f"Warning: {features} has no provenance (for a .npy, its .json beside it), so it was not "
                          f"checked against the features {pca_path} was fitted on", markup=False, highlight=False,
                          soft_wrap=True)
    if not quiet:
        err_console.print(f"wrote {path} ({pca.n_components_} components)", markup=False, highlight=False,
                          soft_wrap=True)


def report_command(
    pca_path: Annotated[str, typer.Argument(help="Model file from `bertfeat pca fit`.")],
    out_prefix: Annotated[
        Optional[str], typer.Option("-o", "--output", help="Prefix of the report files (default: the model path without .npz, where pca fit wrote its report: --overwrite replaces it).")
    ] = None,
    probe: Annotated[
        Optional[str], typer.Option("--probe", help="A feature file with a label column (extract --keep label): report "
                                     "how well the first k components predict the label (ridge classifier, "
                                     "cross-validated). The features the PCA was fitted on, or the ones it reduced.")
    ] = None,
    label: Annotated[Optional[str], typer.Option("--label", help="The label column of --probe's file.")] = None,
    probe_rows: Annotated[int, typer.Option("--probe-rows", help="Rows the probe uses at most (a uniform sample).")] = 20_000,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the report table.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing report files (else refused).")] = False,
) -> None:
    """Write the explained-variance report (JSON, Markdown, PNG) of a saved PCA model, under a new -o PREFIX or, with
    --overwrite, over the one pca fit wrote beside it."""
    from ..errors import BertfeatError
    from ..run.outlock import output_lock
    from ..pca.estimator import PCA
    from ..pca.report import build_pca_report, render_pca_report, write_pca_report
    from ..run.outputs import check_name_lengths, check_outputs, feature_file_inputs, report_outputs
    from ..checks import check_count, check_output_name, local_path

    if not quiet:
        require_stdout("the report table", "pass -q (the report files hold it)")
    check_count(probe_rows, "probe_rows", MIN_PROBE_ROWS)
    pca_path = local_path(pca_path, "PCA model")
    if out_prefix is not None:
        check_output_name(out_prefix, "report prefix", "pca100", kind="prefix")
        out_prefix = Path(out_prefix)
    if probe is not None:
        probe = local_path(probe, "feature file", "probe")
    if (probe is None) != (label is None):
        raise BertfeatError("--probe and --label go together", "pass the feature file with --probe and its label "
                            "column with --label, e.g. --probe feats.parquet --label label")
    pca = PCA.load(pca_path)  # checks the file first: not found, or "not a bertfeat PCA model" (a .npy, a directory, ...)
    check_name_lengths(report_outputs(out_prefix or _prefix_for(pca_path)))
    with output_lock(out_prefix or _prefix_for(pca_path)):
        inputs = [pca_path] + (feature_file_inputs(probe) if probe is not None else [])  # --probe's file is read too
        check_outputs(report_outputs(out_prefix or _prefix_for(pca_path)), inputs, overwrite)
        result = None
        if probe is not None:
            from ..pca.probe import probe_file

            result = probe_file(pca, probe, label, max_rows=probe_rows)
        source = dict(getattr(pca, "source_", None) or {}) | {"model_file": str(pca_path), "fingerprint": pca.fingerprint_}
        paths = write_pca_report(pca, out_prefix or _prefix_for(pca_path), source=source, probe=result)
    if not quiet:
        render_pca_report(build_pca_report(pca, source, result), out_console)
        err_console.print(f"wrote {', '.join(str(p) for p in paths.values())}", markup=False, highlight=False,
                          soft_wrap=True)
