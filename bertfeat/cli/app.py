"""The `bertfeat` command line: thin Typer commands over the library.

Each command validates its options, calls one library function and renders the result.
A BertfeatError becomes ``Error: what - how to fix`` on stderr with exit code 1, never a traceback; a command line
that does not parse, one such line with exit code 2 (usage_error).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from typing import Optional

import typer
from ..version import __version__
from ..console import err_console, out_console
from ..errors import BertfeatError, interrupt_in, visible
from ..run.options import DEFAULT_BLOCKSIZE, DEFAULT_CHUNK_ROWS
from ..checks import DEFAULT_MAX_FIELD_BYTES

app = typer.Typer(
    name="bertfeat",
    help="Offline BERT sentence features in pure NumPy: extract, reduce with PCA, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_DEBUG = False  # --debug: unexpected exceptions keep their traceback
_ARGV: list[str] | None = None  # the arguments main() was called with (for the provenance's command line)
_EXITING = False  # main(exiting=True): the process ends after the command (the console script)
# A library error names options by their Python parameters (errors.opt); shown here, each is the flag that
# sets it: "--" + the name with dashes, or as this table spells it.
FLAGS = {"output": "-o", "cache=False": "--no-cache"}  # (a value with a flag of its own: errors.render)
#: a parameter whose flag depends on the command: the PCA's n_components is extract's --pca (pca fit's --n-components);
#: info takes the model as its argument, not as --model; verify reads its input as the provenance says (no flags)
COMMAND_FLAGS = {"extract": {"n_components": "--pca", "estimate": "--estimate-rows"},
                 "info": {"model": "the MODEL argument"}, "sweep": {"sets": "--set", "keep": "--label"},
                 "verify": {"text_column": "the text column", "pair_column": "the pair column",
                            "id_column": "the id column", "input_format": "the input format",
                            "delimiter": "the delimiter"}}
MODEL_HELP = "Model: a local directory, a hub id in the Hugging Face cache, or all-MiniLM-L6-v2 (default)."


def _version(value: bool):
    if value:
        typer.echo(f"bertfeat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
          debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an unexpected error (also BERTFEAT_DEBUG=1).")):
    """Offline BERT sentence features in pure NumPy."""
    global _DEBUG
    _DEBUG = _DEBUG or debug


@app.command(epilog="Examples:\n\n  bertfeat info\n\n  bertfeat info /models/bge-small --json\n\n"
                     "  bertfeat info /models/bge-small --files\n\n  bertfeat --version")
def info(
    model: Optional[str] = typer.Argument(None, help=MODEL_HELP),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    files: bool = typer.Option(False, "--files", help="Print the files the model's vectors depend on (weights, config, tokenizer, sentence-transformers modules), one per line, without loading it: dependencies for make or DVC."),
):
    """Show a model's config, parameter count, default pooling and where it was found."""
    from ..inspection import model_file_paths, model_info

    if files:
        if json_out:
            raise BertfeatError("--files and --json exclude each other", "give one of them")
        typer.echo("\n".join(str(f) for f in model_file_paths(model)))
        return
    d = model_info(model)
    if json_out:
        import json

        typer.echo(json.dumps(d, indent=2))
        return
    from rich.table import Table

    t = Table(title=f"bertfeat info: {d['model_id']}", show_header=False)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for k, v in d.items():
        if k == "config":
            continue
        # the pipeline's steps, or the one line saying why the model has none (joined, it was cut into characters)
        t.add_row(k, " -> ".join(v) if k == "embedding" and isinstance(v, list) else str(v))
    for k, v in d["config"].items():
        t.add_row(f"config.{k}", str(v))
    out_console.print(t)


@app.command(epilog="Examples:\n\n  bertfeat extract corpus.csv --pca 100\n\n"
                     "  bertfeat extract corpus.csv --pca 100 --estimate\n\n"
                     "  bertfeat extract train.csv --pca 100 --label label\n\n"
                     "  bertfeat extract reviews.parquet --text-column review --id-column id -o feats.parquet\n\n"
                     "  bertfeat extract queries.jsonl -m /models/e5-small --prompt-name query -o q.npy")
def extract(
    input: str = typer.Argument(..., help="CSV, TSV, Parquet (file, glob or directory) or JSONL; '-' for standard input."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Output file (default: INPUT.features.parquet beside the input)."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Column with the text (default: text/sentence/content/review, else the only string column)."),
    pair_column: Optional[str] = typer.Option(None, "--pair-column", help="Second text of a sentence pair (token type ids 1)."),
    id_column: Optional[str] = typer.Option(None, "--id-column", help="Column copied to the output as the row id (default: the 0-based row number); NAME:str reads every id as the text the input wrote."),
    keep: Optional[list[str]] = typer.Option(None, "--keep", help="Input column(s) copied to the output beside the features, e.g. a label: repeat it or separate names with commas (--keep label,split), quoting a name that holds a comma, a double quote or a colon as in CSV (--keep '\"a,b\"'). A CSV/TSV value is kept as the text it is written as unless a type is given (--keep label:int; int, float, bool or str) or every value of the first rows reads back as written (plain integers, numbers such as 2.5). Parquet and CSV output."),
    input_format: Optional[str] = typer.Option(None, "--input-format", help="csv, tsv, parquet or jsonl (default: from the extension)."),
    encoding: str = typer.Option("utf-8", "--encoding", help="Text encoding of CSV/TSV/JSONL input, e.g. latin-1."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    pooling: Optional[str] = typer.Option(None, "--pooling", "-p", help="cls, mean, max, mean_sqrt_len_tokens, weightedmean, lasttoken (or several joined by +, each once), or pooled; replaces the model's pooling and Dense modules (default: the model's own embedding)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Hidden layers to pool: -1 (last), -2, '-4,-3,-2,-1', '-4:' (0 = embeddings; each layer once)."),
    layer_agg: str = typer.Option("mean", "--layer-agg", help="Combine several layers by mean or concat."),
    normalize: Optional[bool] = typer.Option(None, "--normalize/--no-normalize", help="L2-normalize each vector (default: the model's own embedding as its Normalize module says; a chosen --pooling or --layers is not normalized)."),
    prompt_name: Optional[str] = typer.Option(None, "--prompt-name", help="One of the model's prompts (config_sentence_transformers.json), prepended to every text (default: the model's default_prompt_name)."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="A prompt text prepended to every text, e.g. 'query: '."),
    truncate_dim: Optional[int] = typer.Option(None, "--truncate-dim", help="Keep the first N features of each vector (a Matryoshka model's shorter embedding), after normalization, as sentence-transformers' truncate_dim; with --normalize normalized again after the cut (default: the model's truncate_dim in config_sentence_transformers.json for its own embedding, else all)."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Max tokens per text (default: the model's max_seq_length, else its tokenizer's model_max_length, else its max positions)."),
    max_batch_tokens: Optional[int] = typer.Option(None, "--max-batch-tokens", help="Token budget per batch (padded rows x length)."),
    long_text: str = typer.Option("truncate", "--long-text", help="truncate, chunk-mean, chunk-max or error."),
    stride: Optional[int] = typer.Option(None, "--stride", help="Tokens shared by neighbouring windows with --long-text chunk-* (default 32, or half a narrower window)."),
    pca: Optional[str] = typer.Option(None, "--pca", help="Reduce with PCA: a number of components (100), a variance fraction (0.95), all, or mle (Minka's choice)."),
    pca_model: Optional[str] = typer.Option(None, "--pca-model", help="Reduce with a fitted PCA (.npz of `pca fit` or `extract --pca`, e.g. the training set's) instead of fitting one; its settings are checked against these features."),
    label: Optional[str] = typer.Option(None, "--label", help="With --pca: a column of class labels (kept in the output, as --keep) whose linear probe the PCA report adds: how well the first 1, 2, 4, ... k components predict it."),
    format: Optional[str] = typer.Option(None, "--format", help="parquet (default), npy or csv."),
    wide: bool = typer.Option(False, "--wide", help="Parquet: one float column per dimension (f0..fN) instead of an embedding list."),
    dtype: str = typer.Option("float32", "--dtype", help="Type the features are written as: float32 (default) or float16 (half the size; computed in float32, rounded to nearest; read back as float32)."),
    on_bad_row: Optional[str] = typer.Option(None, "--on-bad-row", help="error (default): stop at the first bad row; skip: write it to OUTPUT.rejects.csv and go on."),
    max_bad_rows: Optional[str] = typer.Option(None, "--max-bad-rows", help="Skip bad rows (as --on-bad-row skip) up to N rows, or a share of the rows read (0.5%); past it stop, write nothing, exit code 3."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its last completed chunk."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files (else refused), or start over instead of resuming."),
    delimiter: Optional[str] = typer.Option(None, "--delimiter", help="CSV field delimiter: ',', ';', '|' or 'tab' (or '\\t', as pandas' sep='\\t'); default: from the header line. One the header line lacks while another separates it is refused."),
    max_field_bytes: str = typer.Option(f"{DEFAULT_MAX_FIELD_BYTES >> 20}MiB", "--max-field-bytes", help="Largest text, pair, id or kept value read, e.g. 16MiB: a larger one is a bad row (field-too-large), skipped as it is read, so memory stays bounded however long a field is."),
    chunk_rows: int = typer.Option(DEFAULT_CHUNK_ROWS, "--chunk-rows", help="Rows per chunk (the unit of resume)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Cores for the matrix products (default: all)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress and no summary."),
    engine: str = typer.Option("local", "--engine", help="local (this process) or dask (a Dask cluster; output is a directory of part files)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="--engine dask: the scheduler, tcp://HOST:8786 (default: a local cluster)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="--engine dask without --scheduler: N local one-thread worker processes (default: one process with a thread per core, measured fastest)."),
    blocksize: str = typer.Option(DEFAULT_BLOCKSIZE, "--blocksize", help="--engine dask only: input bytes per partition at most (the input is also cut into a few partitions per worker thread), e.g. 64MiB, or none; keep it at 64KiB or more, and above the longest row (each partition costs a task and a part file)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32 (default), bf16 (linear layers as bf16 GEMMs: needs bertfeat\\[fast] and an AMX or AVX512-BF16 CPU), int8 (uint8 x int8 GEMMs: needs bertfeat\\[fast] and VNNI or AMX) or auto (bf16 where this CPU multiplies it natively, else fp32; docs/precision.md)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Vector cache directory kept across runs: rows whose text and settings were encoded before are reused, only new texts are encoded (default: $BERTFEAT_CACHE if set; '' for none; docs/cache.md)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Use no vector cache, even if BERTFEAT_CACHE is set."),
    estimate: bool = typer.Option(False, "--estimate", help="Run nothing, write nothing: measure on a sample what this run would take (rows, tokens, time on this machine, disk, memory) and print it."),
    estimate_rows: Optional[int] = typer.Option(None, "--estimate-rows", help="--estimate: rows to measure on (a uniform sample; default 500)."),
    summary_json: Optional[str] = typer.Option(None, "--summary-json", help="Also write the run's summary as one JSON object to FILE, or '-' for standard output (every count, timing, output path and the GEMM path; keys in docs/cli.md)."),
):
    """Extract sentence features from a table of texts into a Parquet, NumPy or CSV file."""
    given = dict(locals())  # the flags, before any other name is bound: each option's flag is its declared name
    from ..run.api import extract_options
    from ..run.options import OPTIONS, ExtractOptions
    from ..run.progress import make_progress

    if no_cache and cache is not None:
        raise BertfeatError("--cache and --no-cache exclude each other", "give one of them")
    if estimate_rows is not None and not estimate:
        raise BertfeatError("--estimate-rows applies to --estimate", "add --estimate, or drop --estimate-rows")
    if summary_json == "-":
        from .render import require_stdout

        require_stdout(f"the {'estimate' if estimate else 'run'}'s summary (--summary-json -)",
                       "give --summary-json a file name")
    if summary_json is not None:
        check_summary_json(summary_json, input, overwrite, output=output, format=format, model=model,
                           cache=False if no_cache else cache, pca_model=pca_model)
    flags = {name: value for name, value in given.items() if name in OPTIONS}
    rows = True if estimate_rows is None else estimate_rows
    options = ExtractOptions(**flags | {"keep": ",".join(keep) if keep else None, "cache": False if no_cache else cache,
                                        "estimate": rows if estimate else False, "command": _command_line()})
    try:
        with _dask_logs_routed(engine):
            summary = extract_options(options, progress=None if estimate else make_progress(
                err_console, quiet, "extract (dask)" if engine == "dask" else "extract"))
    except KeyboardInterrupt as e:  # its resume note is printed by _stopped (Typer hands back only 130)
        _STOPPED.setdefault("stop", e)
        raise
    if estimate:
        from ..run.estimate import render

        render(summary, err_console if summary_json == "-" else out_console, err_console,  # stdout: the JSON alone
               table=not quiet)
    else:  # a stop from here on finds the outputs complete: _stopped says so, not a bare "Interrupted."
        _STOPPED["finished"] = _finished_note(summary, summary_json)
        if not quiet:
            render_summary(summary)
    if summary_json is not None:
        try:
            write_summary_json(summary, summary_json, "estimate" if estimate else "extract")
        except OSError as e:  # (a full or closed standard output, after the run wrote every output)
            if summary_json != "-" or estimate:
                raise
            from ..errors import os_error

            raise os_error(e, "<stdout>").refixed(
                f", after {_STOPPED['finished']}", "only the summary JSON on standard output is lost: give "
                "--summary-json a file name, or an output that has room, when you rerun (with --overwrite)") from None
    # "finished" stays until the process exits: a stop on the way out finds the outputs complete too


def _finished_note(summary, summary_json: str | None) -> str:
    """What a stop after the run finished says: the outputs are complete (and the summary JSON maybe not written)."""
    names = ", ".join(dict.fromkeys(str(p) for p in (summary.outputs or {}).values()))
    unsaid = f"; the summary JSON {summary_json} may not have been written" if summary_json not in (None, "-") else ""
    return f"the run had finished, its outputs are complete ({names}){unsaid}"


@app.command(epilog="Examples:\n\n  bertfeat verify feats.parquet\n\n"
                     "  bertfeat verify feats.parquet --sample 1000 --input moved/corpus.csv")
def verify(
    features: str = typer.Argument(..., help="A feature file (or Dask output directory) written by bertfeat extract."),
    input: Optional[str] = typer.Option(None, "--input", help="The input the features were extracted from (default: the one their provenance names)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The model (default: the one their provenance names; its weights' sha256 must match)."),
    sample: int = typer.Option(100, "--sample", help="Rows to encode again, chosen at random."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random choice."),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help="Largest difference allowed, over a row's norm (default: 1e-5 for fp32, 1e-3 for bf16 and int8 and for a float16 file)."),
    encoding: Optional[str] = typer.Option(None, "--encoding", help="Text encoding of a CSV/JSONL input, if its provenance does not say."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table: the exit code says it (an Error line still says why when it is 1)."),
):
    """Encode a random sample of FEATURES' rows again, one at a time, and compare: the same vectors whatever the batch."""
    from ..verify import verify_features

    r = verify_features(features, input=input, model=model, sample=sample, seed=seed, tolerance=tolerance,
                        encoding=encoding)
    if not quiet:
        from rich.table import Table

        t = Table(title=f"verify {r['features']}", show_header=False)
        t.add_column("")
        t.add_column("", justify="right")
        t.add_row("rows checked", f"{r['rows_checked']:,} of {r['rows_in_file']:,} (seed {r['seed']})")
        t.add_row("bit-identical", f"{r['rows_identical']:,}" + (" (after the PCA: the projection rounds by its batch; "
                                                                   "bit identity holds before it)" if r["reduced"] else ""))
        none = "- (no row to check)" if not r["rows_checked"] else None  # (the file has no rows)
        w = r["worst"]  # named when it differs at all: a value edited within the tolerance is found by it
        at = f"; row {w['position']}, id {w['id']!r}" if w and 0 < w["max_abs_diff"] < math.inf else ""
        t.add_row("largest difference", none or f"{r['max_abs_diff']:.3g} ({r['max_relative_diff']:.3g} of the row's "
                                                f"norm{at})")
        t.add_row("smallest cosine", none or f"{r['min_cosine']:.9f}")
        t.add_row("tolerance", f"{r['tolerance']:g} of the row's norm ({r['precision']}"
                  + (", after the PCA" if r["reduced"] else "")
                  + (", both rounded to float16 as the file" if r.get("dtype") == "float16" else "") + ")")
        t.add_row("verdict", ("ok" if r["rows_checked"] else "ok: nothing to check") if r["ok"] else "DIFFERENT")
        out_console.print(t)
    if not r["ok"]:
        bad = sum(x["relative"] > r["tolerance"] for x in r["rows"])
        w = r["worst"]
        how = (f"{w['relative']:.3g}, cosine {w['cosine']:.6f}" if w["finite"] else
               "it holds NaN or infinite values")  # (a damaged or edited file: the model gives none)
        changes = r.get("path_changes") or []
        fix = ("the features do not match what the model gives for their input now: the input, the model or the file "
               "changed since they were extracted; extract them again")
        if changes:  # another CPU, kernels or BLAS rounds otherwise: nothing the user edited
            fix = (f"this run computes on another numeric path than the extraction did ({'; '.join(changes)}), which "
                   "rounds otherwise: verify where the features were extracted (or with the same kernels), or pass a "
                   "larger --tolerance")
        raise BertfeatError(f"{bad} of {r['rows_checked']} rows differ from their vector encoded alone by more than "
                            f"{r['tolerance']:g} of their norm (row {w['position']}, id {w['id']!r}: {how})", fix)


@app.command(epilog="Examples:\n\n  bertfeat sweep train.csv --label label\n\n"
                     "  bertfeat sweep train.csv --label label --set own --set cls@-2 --set mean@-4:@concat --sample 2000\n\n"
                     "  bertfeat sweep corpus.parquet --text-column body -o reports/layers")
def sweep(
    input: str = typer.Argument(..., help="CSV, TSV, Parquet (file, glob or directory) or JSONL; '-' for standard input."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="A feature set to compare, repeat it: own (the model's own embedding) or POOLING[@LAYERS[@AGG]], e.g. mean, cls@-2, mean@-4:, mean@-4:@concat, pooled (default: own, mean, cls, max, pooled, mean@-2, mean@-4:, mean@-4:@concat, mean@1,-1)."),
    label: Optional[str] = typer.Option(None, "--label", help="A column of class labels: each set's cross-validated ridge-classifier accuracy, on all features and on the first --n-components principal components. LABEL:str reads its values as text (a JSONL NaN, a number past float64)."),
    folds: int = typer.Option(5, "--folds", help="With --label: the probe's stratified cross-validation folds (2 or more)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Prefix of the report files PREFIX.json and PREFIX.md (default: INPUT.sweep beside the input)."),
    sample: int = typer.Option(5000, "--sample", help="Rows compared at most: a uniform sample of the input."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample and of the probe's folds."),
    n_components: Optional[int] = typer.Option(None, "-n", "--n-components", help="With --label: also probe the first N principal components of each set (default 64; all of them where a set has fewer, min(rows, features)); given, the best set is ranked on those N components (the width your pipeline keeps), else on all its features."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Column with the text (default: as extract)."),
    pair_column: Optional[str] = typer.Option(None, "--pair-column", help="Second text of a sentence pair (token type ids 1)."),
    input_format: Optional[str] = typer.Option(None, "--input-format", help="csv, tsv, parquet or jsonl (default: from the extension)."),
    encoding: str = typer.Option("utf-8", "--encoding", help="Text encoding of CSV/TSV/JSONL input, e.g. latin-1."),
    delimiter: Optional[str] = typer.Option(None, "--delimiter", help="CSV field delimiter: ',', ';', '|' or 'tab' (or '\\t', as pandas' sep='\\t'); default: from the header line. One the header line lacks while another separates it is refused."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    normalize: Optional[bool] = typer.Option(None, "--normalize/--no-normalize", help="L2-normalize every set (default: as extract: own by the model's Normalize module, the others not)."),
    prompt_name: Optional[str] = typer.Option(None, "--prompt-name", help="One of the model's prompts, prepended to every text."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="A prompt text prepended to every text."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Max tokens per text (default: as extract)."),
    long_text: str = typer.Option("truncate", "--long-text", help="truncate, chunk-mean, chunk-max or error."),
    stride: Optional[int] = typer.Option(None, "--stride", help="Tokens shared by neighbouring windows with --long-text chunk-* (default 32, or half a narrower window)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32 (default), bf16, int8 or auto, as extract."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Cores for the matrix products (default: all)."),
    on_bad_row: str = typer.Option("error", "--on-bad-row", help="error: stop at the first bad row; skip: leave it out (counted)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing report files (else refused)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Vector cache directory, as extract's: each set's vectors are read and stored under its own settings, so a second sweep and an extract of a set reuse them (default: $BERTFEAT_CACHE if set)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Use no vector cache, even if BERTFEAT_CACHE is set."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress and no table."),
):
    """Compare layer x pooling feature sets of a sample of INPUT's rows, from one pass through the model."""
    from ..run.progress import make_progress
    from ..sweep import default_prefix, sweep as run_sweep

    if no_cache and cache is not None:
        raise BertfeatError("--cache and --no-cache exclude each other", "give one of them")

    if not quiet:
        from .render import require_stdout

        require_stdout("the sweep's table", "pass -q (the report files hold it)")
    say = (lambda what: None) if quiet else (lambda what: err_console.print(f"bertfeat sweep: {what}", markup=False,
                                                                            highlight=False, soft_wrap=True))
    r = run_sweep(input, sets, label=label, model=model, text_column=text_column, pair_column=pair_column,
                  input_format=input_format, encoding=encoding, delimiter=delimiter, sample=sample, seed=seed,
                  folds=folds, n_components=n_components, normalize=normalize, max_length=max_length, long_text=long_text, stride=stride,
                  prompt=prompt, prompt_name=prompt_name, precision=precision, threads=threads, on_bad_row=on_bad_row,
                  output=output if output is not None else default_prefix(input), overwrite=overwrite,
                  cache=False if no_cache else cache, progress=say, bar=make_progress(err_console, quiet, "sweep"))
    if not quiet:
        render_sweep(r)


def render_sweep(r: dict) -> None:
    """The sweep's table on stdout, the files written on stderr."""
    from rich.table import Table

    from ..sweep import pcs_said, rows_said

    probe = "label" in r
    pcs = pcs_said(r) if probe else ""  # the components used: -n asked past a set's rows or features uses fewer
    caption = f"{r['input']}: {rows_said(r)}, {r['model']} ({r['precision']})"
    if probe:
        caption += f"; {r['label']}: {r['classes']} classes, {r['folds']}-fold, majority {100 * r['majority_baseline']:.2f} %"
        caption += (f"; best on the first {pcs} PCs" if r["ranked_on"] == "pca" else
                    "; best on all features (-n N ranks on N PCs)")
    t = Table(title="Feature sets", caption=caption)
    t.add_column("set")
    for name in ("dim", "PCs 90 %", "PCs 95 %"):
        t.add_column(name, justify="right")
    if probe:
        t.add_column("probe %", justify="right")
        t.add_column(f"on {pcs} PCs %", justify="right")
    for e in r["sets"]:
        need = {x["fraction"]: x["components"] for x in e["thresholds"]}
        row = [e["name"] + (" (best)" if r.get("best") == e["name"] else ""), str(e["dim"]), str(need.get(0.9)),
               str(need.get(0.95))]
        if probe:
            row += [f"{100 * e['probe']['accuracy']:.2f}", f"{100 * e['probe']['accuracy_pca']:.2f}"
                    + (f" ({e['probe']['components']})" if "-" in pcs else "")]  # sets differ: each one's
        t.add_row(*row)
    out_console.print(t)
    for s in r["skipped"]:
        err_console.print(f"skipped {s['name']}: {s['why']}", markup=False, highlight=False, soft_wrap=True)
    for note in r.get("notes", []):
        err_console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if r.get("best"):
        best = next(e for e in r["sets"] if e["name"] == r["best"])
        how = best["options"] or "(no options: the model's own embedding)"
        on = f"on the first {pcs} principal components" if r["ranked_on"] == "pca" else "on all features"
        other = r["best_all"] if r["ranked_on"] == "pca" else r["best_pca"]
        err_console.print(f"best {on}: {best['name']}, bertfeat extract {how}"
                          + (f" (on {'all features' if r['ranked_on'] == 'pca' else pcs + ' PCs'}: "
                             f"{other})" if other != best["name"] else ""), markup=False, highlight=False, soft_wrap=True)
    if r.get("cache"):
        err_console.print(f"cache {r['cache']}: {r['rows_cached']:,} rows reused, {r['rows_encoded']:,} encoded",
                          markup=False, highlight=False, soft_wrap=True)
    if r.get("files"):
        err_console.print("wrote " + ", ".join(r["files"].values()), markup=False, highlight=False, soft_wrap=True)


def _dask_logs_routed(engine: str):
    """Around a Dask run: distributed's log lines kept off stderr (dask_cluster.routed_logs), which then holds only the
    progress and the one Error: line; --debug shows them."""
    import contextlib

    from ..run.dask_cluster import routed_logs

    return routed_logs(restore=not _EXITING) if engine == "dask" and not _DEBUG else contextlib.nullcontext()


def _command_line() -> str:
    """The command as the user typed it (for the provenance): argv given to main(), else sys.argv."""
    import shlex

    argv = _ARGV if _ARGV is not None else sys.argv[1:]
    return "bertfeat " + shlex.join(argv)


SUMMARY_KIND = "bertfeat-summary"


def check_summary_json(dest: str, input: str, overwrite: bool, *, output=None, format=None, model=None,
                       cache=None, pca_model=None) -> None:
    """--summary-json FILE, before the run: not the input, not a directory, none of the run's own files (the output
    and the files named after it, the model's, the cache's); an existing file that is not an earlier summary needs
    --overwrite (a summary is replaced on every run: it is the run's log)."""
    import json
    from pathlib import Path

    from ..run.outputs import check_outputs
    from ..checks import check_output_name, local_path

    if dest == "-":  # a closed standard output: refused by extract (require_stdout)
        return
    path = local_path(dest, "summary JSON", "summary_json", writes=True)
    # a name that is no file: pathlib wrote dir/ as a file named dir, and .json as a hidden file; . and .. hold the
    # input, and were refused as "would replace the input" (an existing folder's name: check_outputs says so)
    check_output_name(dest, "summary JSON", "run.json", option="summary_json", kind="prefix")
    _check_not_the_runs_own(path, input, output, format, model, cache, pca_model)
    _check_writable_folder(path)
    earlier = False
    if path.is_file():
        try:
            earlier = json.loads(path.read_text(encoding="utf-8")).get("kind") == SUMMARY_KIND
        except (OSError, ValueError, AttributeError):
            earlier = False
    from ..readers.paths import local_containers

    inputs = ([Path(input)] if input != "-" else []) + [Path(p) for p in local_containers(input)]  # (a zip:// archive)
    check_outputs([("summary JSON", path)], inputs, overwrite or earlier, options={"summary JSON": "summary_json"})


def _check_not_the_runs_own(path, input: str, output, format, model, cache, pca_model=None) -> None:
    """The summary JSON must not be a file the run writes or reads: the output or a file named after it (its
    rejects, PCA model and report, temporaries, lock), a file of the model folder or of the vector cache."""
    import os
    from pathlib import Path

    from ..run.plan import default_output
    from ..run.outputs import runs_own_folder
    from ..cache.store import resolve_cache

    where = Path(os.path.realpath(path))
    out = Path(output) if output is not None else (default_output(input, format or "parquet") if input != "-" else None)
    owners = []
    if out is not None:
        owners += [f"over {o}" for o in _output_owners(where, out, format)]
    owner = runs_own_folder(path, model, resolve_cache(cache))  # the cache as extract resolves it (BERTFEAT_CACHE ...)
    if owner is not None:
        owners.append(f"inside {owner}")
    if pca_model is not None and where == Path(os.path.realpath(pca_model)):
        owners.append(f"over the PCA model {pca_model}")
    if owners:
        raise BertfeatError(f"the summary JSON {path} would be written {owners[0]}",
                            "give --summary-json a file of its own, e.g. run.json beside the output")


def _output_owners(where, out, format) -> list[str]:
    """What of the run's own the summary JSON at ``where`` (resolved) would be written over: its partial directory
    (OUTPUT.partial/, deleted when the run ends: a summary there blocked the next run), the output (a Dask output
    directory included), or a file or folder named after one of the run's files (its rejects, a .npy's ids file, the
    PCA model and report, their temporaries and locks). The output as named (the local engine's files go beside that
    name) and resolved (the Dask engine's)."""
    import os
    from pathlib import Path

    from ..run.plan import OutputLayout, output_format

    try:
        fmt = output_format(out, format)
    except BertfeatError:  # the plan names a bad format
        fmt = "parquet"
    owners = []
    for o in dict.fromkeys((Path(os.path.realpath(Path(out).absolute().parent)) / Path(out).name,
                            Path(os.path.realpath(out)))):
        layout = OutputLayout(o, fmt, want_pca=True)
        if where == layout.partial or layout.partial in where.parents:
            partial = OutputLayout(Path(out), fmt).partial  # as the user named the output
            owners.append(f"the run's partial directory {partial} (where it works; deleted when it ends)")
        if where == o or o in where.parents:
            owners.append(f"the output {out}")
        own = [p.name for _, p in layout.outputs()] + [layout.partial.name]
        # where's own entry in the output's folder: the file itself, or the folder it would be written in
        top = next((p.name.lstrip(".") for p in (where, *where.parents) if p.parent == o.parent), None)
        if top is not None and any(top == name or top.startswith(name + ".") for name in own):
            owners.append(f"the output {out} (or a file named after it)")
    return owners


def _check_writable_folder(path) -> None:
    """The summary's folder (made by write_summary_json when missing) can be written, checked before the run: after
    it, a summary that cannot be written fails a run whose outputs are all in place."""
    import os

    from ..errors import BertfeatError, opt

    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the folder write_summary_json would make it in
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise BertfeatError(f"the summary JSON {path} cannot be written: {folder} is not a writable folder",
                            f"pass {opt('summary_json')} with a path in a folder you can write to")


def write_summary_json(result, dest: str, what: str) -> None:
    """The run's summary (or --estimate's) as one JSON object: on stdout for '-', else a file written atomically."""
    import dataclasses
    import json

    from ..atomic import write_atomic

    body = result.to_dict() if hasattr(result, "to_dict") else dataclasses.asdict(result)
    doc = {"kind": SUMMARY_KIND, "of": what, "bertfeat_version": __version__, "command": _command_line(), **body}
    text = json.dumps(_finite(doc), default=str, allow_nan=False)
    if dest == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        from pathlib import Path

        Path(dest).absolute().parent.mkdir(parents=True, exist_ok=True)  # a logs/ folder not made yet
        write_atomic(dest, text + "\n")


def _finite(x):
    """NaN / infinity -> None, so that the JSON is strict (jq and other readers refuse NaN)."""
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _padded(name: str) -> str:
    """A column name for the summary: quoted when spaces around it (or none at all) would not show ('text ')."""
    return repr(name) if not name or name != name.strip() else name


def render_summary(s) -> None:
    """The closing summary of an extract run, on stderr."""
    pct_dropped = 100.0 * s.tokens_dropped / s.tokens if s.tokens else 0.0
    lines = [
        f"rows read       {s.rows_read:,}",
        f"rows written    {s.rows_written:,}",
        f"rows encoded    {s.rows_encoded:,}",
        f"rows reused     {s.rows_reused:,}",
        f"rows rejected   {s.rows_rejected:,}",
        f"rows truncated  {s.rows_truncated:,} ({s.tokens_dropped:,} tokens dropped, {pct_dropped:.2f}% of tokens)",
        f"rows chunked    {s.rows_chunked:,}",
        f"tokens          {s.tokens:,}",
        f"elapsed         {s.elapsed:,.1f} s",
        f"throughput      {s.rows_per_s:,.1f} rows/s, {s.tokens_per_s:,.0f} tokens/s (of the rows encoded; reused rows "
        "not counted)",
        f"text column     {visible(_padded(s.text_column))} "
        f"({'auto-detected' if s.text_column_auto_detected else 'given'})",
        f"model           {s.model} (pooling {s.pooling}, dim {s.dim})",
    ]
    if getattr(s, "rows_multiline", 0):
        lines.insert(7, f"rows multi-line {s.rows_multiline:,} (quoted fields that span lines; check them if unexpected)")
    if s.cache:
        said = [f"{s.cache_repaired:,} damaged entries encoded again"] * bool(s.cache_repaired)
        said += ["read-only: nothing stored"] * (s.cache_read_only is not None)
        lines.append(f"cache           {s.cache}" + (f" ({'; '.join(said)})" if said else ""))
    if s.chunks_resumed:  # the units the run kept: the local engine's chunks, the Dask engine's partitions
        unit = "partition" if s.engine == "dask" else "chunk"
        lines.append(f"resumed         {s.chunks_resumed} {unit}(s), {s.rows_resumed:,} rows, from the interrupted run "
                     "(counted above, not in the throughput)")
    probe = getattr(s, "probe", None)
    if probe and "accuracy" in probe:
        best = max(probe["accuracy"], key=lambda a: (a["accuracy"], -a["components"]))
        last = probe["accuracy"][-1]
        lines.append(f"probe {probe['label']:<9} {100 * last['accuracy']:.2f} % with {last['components']} components, best "
                     f"{100 * best['accuracy']:.2f} % with {best['components']} (majority class "
                     f"{100 * probe['majority_baseline']:.2f} %; every k in the report)")
    elif probe:
        lines.append(f"probe {probe['label']:<9} none: {probe['skipped']}")
    for k, v in s.outputs.items():
        lines.append(f"{k:<15} {v}")
    err_console.print(*lines, sep="\n", markup=False, highlight=False, soft_wrap=True)  # each line's names escaped


def _register_optional():
    """Sub-commands that live in their own modules."""
    from .inspect import register as register_inspect

    register_inspect(app)  # tokens, attention, fill-mask
    try:
        from .pca import pca_app, report_command
    except ImportError:  # pragma: no cover - during development
        return
    app.add_typer(pca_app, name="pca", help="Fit a PCA on a features file, or apply one.")
    from .cache import cache_app

    app.add_typer(cache_app, name="cache", help="Look into or clear a vector cache (extract --cache).")
    app.command("report", epilog="Examples:\n\n  bertfeat report feats.pca100.npz --overwrite\n\n"
                "  bertfeat report feats.pca100.npz -o reports/pca100 --quiet\n\n"
                "  bertfeat report feats.pca100.npz -o probe100 --probe feats.parquet --label label")(report_command)


_register_optional()


#: "stop": the KeyboardInterrupt (Ctrl-C) or Terminated (SIGTERM) that stopped this command, kept because Typer hands
#: back only exit code 130 for a Ctrl-C; the engine sets its resume note (what was kept) on the way up
_STOPPED: dict = {}
#: "token": the running command's (a stop delivered again must reach that command, not its caller or the next
#: command); "dropped": a stop Python dropped and the hook has not delivered again yet
_LIVE: dict = {}
_LIVE_LOCK = threading.Lock()


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a scheduler's timeout, docker stop), raised where the run is: handled as Ctrl-C is (the partial
    run kept, --resume named), then exit 143 (128 + 15) after one line."""


def _terminate_as_interrupt():
    """While a command runs, SIGTERM raises Terminated in the main thread (as SIGINT raises KeyboardInterrupt)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def on_term(signum, frame):
        _STOPPED["stop"] = e = Terminated()
        raise e

    return signal.signal(signal.SIGTERM, on_term)


def _stops_delivered_again():
    """While a command runs, a Ctrl-C or SIGTERM whose exception Python had to drop is delivered again: raised in a
    finalizer (a __del__: pyarrow's writers, garbage collected) or a weak reference's callback (importlib's module
    locks), it was printed as "Exception ignored in ..." with its traceback, and the run went on to exit 0. The hook
    sends the signal once more to the main thread a moment later, outside that code (raised at once, it would land in
    the hook itself, and be dropped again); any other such exception goes to the hook before it. -> (the hook before,
    this hook), or None off the main thread (signals reach the main thread only)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return None
    previous, token = sys.unraisablehook, object()

    def hook(u):
        if not isinstance(u.exc_value, KeyboardInterrupt):
            return previous(u)
        signum = signal.SIGTERM if isinstance(u.exc_value, Terminated) else signal.SIGINT
        _LIVE["dropped"] = u.exc_value
        timer = threading.Timer(0.05, _deliver_again, (token, signum))
        timer.daemon = True
        timer.start()

    _LIVE["token"] = token
    sys.unraisablehook = hook
    return previous, hook


def _deliver_again(token, signum) -> None:
    """The signal sent again to the main thread (Python's handler for SIGINT, _terminate_as_interrupt's for SIGTERM;
    a real signal, which wakes a wait on a lock or a future), unless the command that dropped it has ended."""
    import signal

    with _LIVE_LOCK:
        if _LIVE.get("token") is token and _LIVE.pop("dropped", None) is not None:
            signal.pthread_kill(threading.main_thread().ident, signum)


def _end_redelivery(hooked) -> BaseException | None:
    """main()'s end: no stop is delivered again from here on, the hook before is back (unless another took the
    place since); returns a stop dropped too late to be delivered (in the command's last moment)."""
    if hooked is None:
        return None
    with _LIVE_LOCK:
        _LIVE.pop("token", None)
        dropped = _LIVE.pop("dropped", None)
    previous, hook = hooked
    if sys.unraisablehook is hook:
        sys.unraisablehook = previous
    return dropped


def main(argv: list[str] | None = None, *, exiting: bool = False) -> int:
    """Console-script entry point: run the app; every failure becomes one line ``Error: what - how to fix``.

    The rule (bertfeat.cli.render): exit 1 on any error, 2 for a command line that does not parse (click's convention; one
    line too, see usage_error), 130 after Ctrl-C, 143 after SIGTERM, never a traceback, whatever
    the command and the cause (library errors, OS errors on read or write, truncated or foreign files). An unexpected
    exception (a bug) is one line too, unless --debug or BERTFEAT_DEBUG=1 asks for its traceback.
    """
    import signal

    global _EXITING
    _EXITING = exiting
    previous, hooked = _terminate_as_interrupt(), _stops_delivered_again()
    try:
        code = _run_main(argv)
    finally:
        if exiting and threading.current_thread() is threading.main_thread():
            # the process only exits from here: a Ctrl-C / SIGTERM now found the outputs complete, yet killed it
            # (exit 130, no line) after the summary had said so
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            previous = None  # (ignored until the process exits)
        dropped = _end_redelivery(hooked)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if dropped is not None and code == 0:  # a stop dropped as the command ended: said, and its exit code
        return _stopped(dropped)
    return code


class _ClosedOutput:
    """sys.stdout when the process started with it closed: writing is one clear error (a command that writes nothing
    there, as extract -q, runs as usual)."""

    encoding = "utf-8"
    closed_at_start = True  # render.require_stdout: a command that writes files refuses before it starts

    def write(self, text: str) -> int:
        from .render import closed_stdout_error

        raise closed_stdout_error()

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("standard output is closed")


def _run_main(argv: list[str] | None = None) -> int:
    """main() without the signal set-up."""
    from .render import debug_enabled, unexpected, user_error

    global _ARGV, _DEBUG
    _ARGV = list(argv) if argv is not None else None
    _DEBUG = debug_enabled()
    _STOPPED.clear()
    if sys.stdout is None:  # started with standard output closed (>&-): a command that writes there says so
        sys.stdout = _ClosedOutput()
    try:
        with _warnings_as_lines():
            rv = app(args=argv, standalone_mode=False, prog_name="bertfeat")
        # non-standalone Typer turns Ctrl-C into Exit(130) and an Exit(n) into a *returned* n
        if isinstance(rv, int) and not isinstance(rv, bool) and rv != 0:
            return _stopped() if rv == 130 else rv
    except KeyboardInterrupt as e:
        return _stopped(e)
    except typer.Exit as e:
        return _stopped() if e.exit_code == 130 else e.exit_code
    except typer.Abort as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, KeyboardInterrupt):
            return _stopped(cause)
        if cause is not None:  # click turns an EOFError (an empty or truncated file) into Abort
            return _fail(cause, user_error, unexpected)
        err_console.print("Aborted.", markup=False)
        return 1
    except Exception as e:  # usage errors: click's, or typer's own copy of click's exception classes
        if not isinstance(e, BertfeatError) and callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            if "NoArgsIsHelpError" in _class_names(e):  # `bertfeat`, `bertfeat pca` alone: the help, as asked
                e.show()
            else:  # a command line that does not parse: one line, exit code 2 (click's, as scripts expect)
                err_console.print(f"Error: {usage_error(e)}", markup=False, highlight=False, soft_wrap=True)
            return e.exit_code
        interrupt = interrupt_in(e, anywhere=True)
        if interrupt is not None:  # Ctrl-C inside compiled code, e.g. numba's "SystemError: ... returned a result with
            return _stopped(interrupt)  # an exception set": an interruption, not a bug
        return _fail(e, user_error, unexpected)
    return 0


@contextlib.contextmanager
def _warnings_as_lines():
    """bertfeat's own warnings (errors.BertfeatWarning) as one line, ``Warning: ...`` on stderr, as the CLI's other
    warnings; Python's default shows the file and line that warned, which is not the user's."""
    import warnings

    from ..errors import BertfeatWarning, render as spelled

    with warnings.catch_warnings():
        default = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, BertfeatWarning):
                words = spelled(getattr(message, "marked", "") or str(message), _flags())  # options as this CLI's flags
                err_console.print(f"Warning: {words}", markup=False, highlight=False, soft_wrap=True)
            else:
                default(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def _class_names(e: BaseException) -> set[str]:
    return {c.__name__ for c in type(e).__mro__}


def _flag_of(param) -> str:
    """How an error names a click parameter: an option by its flags (-o/--output), an argument as its help shows it."""
    if getattr(param, "param_type_name", None) == "option" and getattr(param, "opts", None):
        return "/".join(param.opts)
    return str(getattr(param, "name", None) or "argument").upper()


#: typer's value errors (pydantic's error types) said as the house says them
_BAD_VALUE = {"int_parsing": "is not a whole number", "int_from_float": "is not a whole number",
              "float_parsing": "is not a number", "bool_parsing": "is not true or false"}


def _command_path() -> str:
    """``bertfeat`` and the (sub)command names the command line starts with, e.g. ``bertfeat pca fit``."""
    argv = _ARGV if _ARGV is not None else sys.argv[1:]
    words, cmd = ["bertfeat"], typer.main.get_command(app)
    for a in argv:
        if a.startswith("-"):
            continue
        sub = getattr(cmd, "commands", {}).get(a)
        if sub is None:
            break
        words.append(a)
        cmd = sub
    return " ".join(words)


def usage_error(e: BaseException) -> str:
    """A command line that does not parse (click's / typer's UsageError) as ``what - how to fix``, one line: a
    missing argument, an unknown option or command, a value of the wrong type, an extra argument."""
    import os
    import re

    from ..errors import one_line

    names = _class_names(e)
    ctx = getattr(e, "ctx", None)
    command = getattr(ctx, "command_path", None) or _command_path()
    fix = f"see {command} --help"
    param = getattr(e, "param", None)
    if "MissingParameter" in names and param is not None:
        kind = "argument" if getattr(param, "param_type_name", None) == "argument" else "option"
        what = f"missing {kind} {_flag_of(param)}"
    elif "NoSuchOption" in names:
        name = getattr(e, "option_name", "") or ""
        what = f"no such option {name}".rstrip()
        argv = _ARGV if _ARGV is not None else sys.argv[1:]
        named = next((a for a in argv if name and a.startswith(name) and os.path.exists(a)), None)
        if named is not None:  # extract -dash.csv: click read -d of a file's name as an option
            fix = f"{named} is a file: pass it as ./{named}, or put -- before it ({command} -- {named})"
        elif getattr(e, "possibilities", None):
            fix = f"did you mean {' or '.join(sorted(e.possibilities))}? {fix}"
        elif re.match(r"-(?![-A-Za-z])", name) or " " in name:  # a text such as "-1 degrees" read as an option
            fix = f"put -- before a text or path that starts with '-' ({command} -- TEXT), or {fix}"
    elif "BadParameter" in names and param is not None:
        cause = e.__cause__
        errors = cause.errors() if callable(getattr(cause, "errors", None)) else []
        first = errors[0] if errors else {}
        flag = _flag_of(param).split("/")[-1]
        if "input" in first:
            said = _BAD_VALUE.get(first.get("type"), f"is not valid: {str(first.get('msg', '')).lower()}")
            what = f"{flag} {first['input']!r} {said}"
        else:
            what = f"invalid value for {flag}: {getattr(e, 'message', '') or e}"
    else:
        message = e.format_message() if callable(getattr(e, "format_message", None)) else str(e)
        message = re.sub(r"'(-[-\w]+)'", r"\1", message.strip().rstrip("."))
        message = message.replace("requires an argument", "needs a value")
        extra = re.match(r"Got unexpected extra arguments?(?:\(s\))? \((.*)\)$", message, re.S)
        if extra:
            message = f"unexpected extra argument(s): {extra.group(1)}"
            fix = _extra_fix(extra.group(1).split(), fix)
        what = message[:1].lower() + message[1:] if message[1:2].islower() else message
    return f"{one_line(what, 400)} - {fix}"


def _extra_fix(extras: list[str], fix: str) -> str:
    """How to fix extra arguments: an option written after ``--`` (a text then) goes before it; else quoting."""
    argv = _ARGV if _ARGV is not None else sys.argv[1:]
    after = argv[argv.index("--") + 1:] if "--" in argv else []
    late = [a for a in extras if a.startswith("-") and a in after]
    if late:
        return f"put options before -- (every word after it is a text or path): move {' '.join(late)}; {fix}"
    return f"quote a path or text that holds spaces; {fix}"


def _flags() -> dict[str, str]:
    """FLAGS, with the running command's own spellings (COMMAND_FLAGS)."""
    import sys

    argv = _ARGV if _ARGV is not None else sys.argv[1:]
    command = next((a for a in argv if not a.startswith("-")), None)
    return FLAGS | COMMAND_FLAGS.get(command, {})


def _stopped(e: BaseException | None = None) -> int:
    """The one line after Ctrl-C (exit 130) or SIGTERM (143): "Interrupted." / "Terminated.", or with what the run
    kept, "Interrupted: 5 chunk(s) are kept in ...; run the same command with --resume to continue" (also under
    --quiet). Typer may hand back only an exit code: the exception is remembered in _STOPPED."""
    from ..errors import visible

    e = _STOPPED.pop("stop", None) or e
    if e is not None:
        e.__traceback__ = None  # its frames (a run's readers among them) are freed now, not at interpreter exit
    word, code = ("Terminated", 143) if isinstance(e, Terminated) else ("Interrupted", 130)
    note = getattr(e, "resume_note", None) or _STOPPED.pop("finished", None)
    note = note and visible(note)  # a partial directory's name holding a newline stays on the one line
    err_console.print(f"{word}: {note}" if note else f"{word}.", markup=False, highlight=False, soft_wrap=True)
    return code


def _fail(e: BaseException, user_error, unexpected) -> int:
    """One line on stderr for a failure; the traceback too for an unexpected one under --debug."""
    err = user_error(e)
    if err is not None:
        err_console.print(f"Error: {err.render(_flags())}", markup=False, highlight=False, soft_wrap=True)
        _debug_traceback(e)
        return err.exit_code
    _debug_traceback(e)
    err_console.print(unexpected(e), markup=False, highlight=False, soft_wrap=True)
    return 1


def _debug_traceback(e: BaseException) -> None:
    """Under --debug, e's traceback on stderr, line by line (each line's control characters escaped, not its breaks)."""
    if _DEBUG:
        import traceback

        err_console.print(*"".join(traceback.format_exception(e)).splitlines(), sep="\n", markup=False,
                          highlight=False, soft_wrap=True)


def entry():  # pragma: no cover
    rc = main(exiting=True)
    try:  # output still buffered for a full disk or a closed pipe (bertfeat info > /dev/full): one line, not a shutdown traceback
        sys.stdout.flush()
    except OSError as e:
        from ..errors import os_error

        if rc == 0:
            err_console.print(f"Error: {os_error(e, '<stdout>').render(_flags())}", markup=False, highlight=False, soft_wrap=True)
            rc = 1
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(rc)
