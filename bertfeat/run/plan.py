"""One extract job, resolved once: ``make_plan(options)`` turns ``bertfeat.extract``'s options (an ``ExtractOptions``,
options.py) into an ``ExtractPlan``.

Every option of an extract run is checked here and only here, with the error naming the Python parameter
(``errors.opt``; the CLI shows each as its flag), whichever engine will run the job: each option by the check its
declaration names (options.py), in this module's order, then the rules across options: the input (files, format,
columns, through the reader), the output layout (every file name the run may write: ``OutputLayout``), the
encoder settings, the chunking, the PCA request and the engine with its options. The local engine
(local.py) and the Dask engine (dask.py) take the plan and re-check nothing it holds; what needs
the loaded model (the feature spec, the fingerprint) is resolved by both through encoder_setup.feature_settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BertfeatError, InputError, OutputError, opt, opt_word
from ..checks import DEFAULT_MAX_FIELD_BYTES
from .options import ALL_COMPONENTS, OPTIONS, ExtractOptions, check, check_types, keep_columns

#: the options ``encoder_options`` (Encoder keywords) may give too: there they stand in for the option left at its
#: default (encoder_settings), never silently against it
MERGED = ("model", "max_length", "max_batch_tokens", "threads", "precision")


# --------------------------------------------------------------------------- the output layout
def fitted_for(features: Path, model: Path) -> bool:
    """Whether the provenance of ``features`` names ``model`` (its name and sha256) as the PCA a run with pca fitted
    for it: not one it applied (``--pca-model``, ``pca transform``: the user's own, whatever its name)."""
    from ..features.reader import read_feature_metadata
    from ..pca.reduce import file_sha256

    try:
        entry = read_feature_metadata(features).get("pca") or {}
    except (BertfeatError, OSError):  # an output bertfeat cannot read: it names no model
        return False
    if not isinstance(entry, dict) or entry.get("model_file") != model.name or "model_path" in entry:
        return False
    return entry.get("model_sha256") == file_sha256(model)


@dataclass(frozen=True)
class OutputLayout:
    """Every path an extract run may write, derived from the features output in one place.

    ``features``: the feature file (local engine) or the directory of part files (Dask engine); beside it
    ``rejects`` (OUTPUT.rejects.csv), with ``pca`` the PCA model (OUTPUT-stem.pca.npz) and its report files
    (OUTPUT-stem.pca.report.*), and while it runs the partial directory (OUTPUT.partial/).
    """

    features: Path
    fmt: str  # parquet / npy / csv (the Dask engine: parquet)
    engine: str = "local"
    want_pca: bool = False

    @property
    def rejects(self) -> Path:
        """OUTPUT.rejects.csv; for an output name within 12 bytes of the limit, shortened (``atomic.fitted_name``:
        the summary names it): written only when bad rows are skipped, it is no reason to refuse a name that fits."""
        from ..atomic import fitted_name

        return self.features.with_name(fitted_name(self.features.name, len(".rejects.csv")) + ".rejects.csv")

    @property
    def partial(self) -> Path:
        """OUTPUT.partial/, bertfeat's own working folder (a name too long for that: ``atomic.fitted_name``, the same
        on every run, so ``resume`` finds it)."""
        from ..atomic import fitted_name

        return self.features.with_name(fitted_name(self.features.name, len(".partial")) + ".partial")

    @property
    def pca_prefix(self) -> Path:
        """OUTPUT without its extension + ".pca": the PCA model is PREFIX.npz, its report PREFIX.report.*."""
        stem = self.features.with_suffix("")
        return stem.with_name(stem.name + ".pca")

    @property
    def pca_model(self) -> Path:
        return self.pca_prefix.with_name(self.pca_prefix.name + ".npz")

    def locked(self) -> list[Path]:
        """The paths a run locks while it writes (outlock.py): the features output with its side files (a .npy's ids
        file and provenance: another run's -o naming one of them is refused too), its rejects file, and with pca the
        PCA's prefix (``locked_prefixes``)."""
        return [p for _, p in self.side_files()] + [self.rejects]

    def locked_prefixes(self) -> tuple[Path, ...]:
        """The report prefixes a run locks too (with pca, the PCA's): no file, named through the output."""
        return (self.pca_prefix,) if self.want_pca else ()

    def side_files(self) -> list[tuple[str, Path]]:
        """The feature output with its side files (a .npy's ids file, a .npy / .csv's provenance)."""
        if self.engine == "dask":
            return [("output", self.features)]
        from .outputs import feature_file_outputs

        return feature_file_outputs(self.features, self.fmt)

    def stale_pca(self, applied: Path | None = None) -> list[tuple[str, Path]]:
        """Without pca, on an existing output: the PCA model and report an earlier run with pca wrote for it (the
        output's provenance names that model's sha256). They describe the features this run replaces: it removes them
        when its own files appear. Another output's (o.parquet and o.npy share o.pca.*), a model the run applies
        (``applied``), one the earlier run applied (``--pca-model``, ``pca transform``: the user's own, though its name
        is the one pca would give) or one the provenance does not name are left alone."""
        model = self.pca_model
        try:
            if self.want_pca or not self.features.exists() or not model.is_file():
                return []
        except OSError:  # a model name too long to exist (an output name near the limit: o.pca.npz is 4 bytes longer)
            return []
        if applied is not None and model.resolve() == Path(applied).resolve():
            return []
        from .outputs import report_outputs

        if not fitted_for(self.features, model):
            return []
        return [("PCA model", model)] + [(label, p) for label, p in report_outputs(self.pca_prefix) if p.exists()]

    def pca_owner(self) -> Path | None:
        """With pca: another output of this name whose provenance names the PCA model at ``pca_model`` as the one a
        run with pca fitted for it (o.parquet and o.npy share o.pca.*: a run writing one would replace the other's
        model and report, its only copy); None when there is none."""
        model = self.pca_model
        try:
            if not self.want_pca or not model.is_file():
                return None
        except OSError:  # (a name too long to exist)
            return None
        stem = self.features.with_suffix("").name  # o of o.parquet, o.PARQUET, o.npy, o (no suffix): o.pca.npz
        try:
            others = sorted(p for p in self.features.parent.iterdir() if Path(p.name).stem == stem)
        except OSError:
            return None
        return next((p for p in others if p.name != self.features.name and fitted_for(p, model)), None)

    def outputs(self) -> list[tuple[str, Path]]:
        """(label, path) of every file the finished run may leave, for the overwrite and input-protection rules."""
        outs = self.side_files() + [("rejects file", self.rejects)]
        if self.want_pca:
            from .outputs import report_outputs

            outs.append(("PCA model", self.pca_model))
            outs += report_outputs(self.pca_prefix)
        return outs


def default_output(input_path: str, fmt: str) -> Path:
    """INPUT.features.FMT beside the input (a glob: named after the directory above its first wildcard)."""
    if input_path == "-":
        raise InputError(f"reading standard input needs {opt('output', 'OUTPUT')}", f"add {opt('output', 'features.parquet')}")
    from ..readers.paths import compression_of, glob_root, is_pattern

    p = Path(input_path.rstrip("/") or input_path[:1])  # ("/": the root folder; "": refused with the input)
    if is_pattern(input_path):
        parts = Path(input_path).parts[:glob_root(input_path)]  # the folders above the first wildcard
        p = Path(*parts) if parts else Path("dataset")
        if not p.name:
            p = Path("dataset")
    if input_path and p.name in ("", ".."):  # ".", "..", "data/..": the folder it names (not a hidden .features.parquet in it)
        p = Path(os.path.abspath(p))
        if not p.name:
            raise InputError(f"the input {input_path} is the root folder, which has no name to name the output after",
                             f"pass {opt('output', 'OUTPUT')}")
    stem = p.name
    if compression_of(stem):  # every compression the readers read (a.csv.xz was a.csv.xz.features.parquet)
        stem = Path(stem).stem
    for suf in (".csv", ".tsv", ".tab", ".parquet", ".pq", ".jsonl", ".ndjson", ".json"):
        if stem.lower().endswith(suf):
            stem = stem[: -len(suf)]
    return p.parent / f"{stem}.features.{fmt}"


def output_format(output: str | Path | None, fmt: str | None) -> str:
    """The format written: ``format`` when given (its check: options.check_format), else the output's extension, else
    parquet (the formats are features.FILE_FORMATS's)."""
    from ..features import feature_format

    return check("format", fmt) or feature_format(str(output) if output is not None else "")


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class DaskSettings:
    scheduler: str | None = None  # tcp://HOST:8786; None: a LocalCluster on this machine
    workers: int | None = None  # LocalCluster worker processes (default: one, a thread per core)
    blocksize: int | None = None  # input bytes per partition at most (None: one per file / row group)


@dataclass(frozen=True)
class ExtractPlan:
    """One extract run, checked and resolved; the engines execute it.

    ``options``: every option as given, each checked, with ``encoder_options`` merged into the options it stands in
    for (model, max_length, max_batch_tokens, threads, precision): the engines read an option there. The fields after
    it are what the plan resolved from the options (and the input's header): read those instead of the option."""

    options: ExtractOptions
    input: str  # as given ("-": standard input)
    reader: Any  # readers.Reader: files, format and columns resolved (holds no open file; pickles to workers)
    layout: OutputLayout
    on_bad_row: str  # error or skip (max_bad_rows given alone: skip)
    max_bad_rows: Any  # rejects.BadRowLimit, or None: bad rows skipped (on_bad_row='skip') without a limit
    pca: int | float | str | None  # None, a count, a variance fraction, or ALL_COMPONENTS
    pca_model: Path | None  # a fitted PCA model file to apply (instead of fitting one: pca)
    overwrite: bool  # the option, or True for an estimate (which writes nothing)
    dask: DaskSettings | None
    keep: tuple[str, ...] = ()  # input columns copied to the output (the reader reads them: keep_types)
    keep_as: dict = field(default_factory=dict)  # kept column -> the type given for it (keep="label:int"), else decided
    cache: Path | None = None  # the vector cache directory (cache/store.py), None: no cache
    label: str | None = None  # a kept column whose linear probe the PCA report adds (probe.py); needs pca
    dtype: str = "float32"  # the written features' type (FEATURE_DTYPES); computed, cached and reduced in float32
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES  # a read value larger than this is a bad row (the reader holds it)
    #: the input's files as the run found them (reader.identity(): sizes, modification times), taken when the reader
    #: opened the input; None for standard input. The resume manifest and the provenance record it
    input_identity: dict | None = None
    #: the same files with what a change during the run leaves and a copy does not (identity(within_run=True): ctime,
    #: inode, device; a URL's every stamp), from the same stat: the engines compare it with the files, and with the
    #: files the path names then, once the last row is read (manifest.check_input_unchanged)
    input_state: dict | None = None

    def check_outputs(self) -> None:
        """The output rules (check_layout) as they stand now: the engines' runner checks them again under the lock."""
        check_layout(self.layout, self.reader, self.input, self.overwrite, self.options.resume, self.pca_model)

    @property
    def pca_text(self) -> str | None:
        """``pca`` as given (kept in the resume manifest)."""
        return None if self.options.pca is None else str(self.options.pca)

    @property
    def reduces(self) -> bool:
        """The features are reduced: by a PCA fitted in this run (pca) or by a given one (pca_model)."""
        return self.pca is not None or self.pca_model is not None

    @property
    def id_name(self) -> str:
        """The output's id column: the input's id column, else ``row`` (the 0-based row number)."""
        return self.reader.id_column or "row"

    @property
    def keep_types(self) -> dict:
        """The kept columns' Arrow types, in ``keep`` order (the reader decided them when it opened the input)."""
        return self.reader.keep_types()

    @property
    def pca_n_components(self):
        """The PCA's n_components (None keeps every component)."""
        return None if self.pca == ALL_COMPONENTS else self.pca


def make_plan(options: ExtractOptions, client: Any = None) -> ExtractPlan:
    """Check every option (its own check, declared in options.py, then the rules across options) and resolve the input
    and the outputs: -> the plan. ``client``: the Dask client given to ``bertfeat.extract`` (the Dask engine's).

    Raises BertfeatError naming the parameter, before anything is read past the input's header or written.
    """
    # the steps in this order: each option's error is the one a run with several wrong options reports first
    o = check_types(options)  # a value of another type than declared, first: overwrite="False" is not a switch
    estimate = o.checked("estimate")
    _check_run_shape(o, client)
    from ..readers.rejects import resolve_bad_rows

    on_bad_row, max_bad_rows = resolve_bad_rows(o.on_bad_row, o.checked("max_bad_rows"))
    dtype, max_field_bytes, pca = o.checked("dtype"), o.checked("max_field_bytes"), o.checked("pca")
    o.checked("truncate_dim")  # 1 or more here; its upper bound, the features' width, once the model loads (Encoder.spec)
    pca_model = check_pca_model(o, pca)
    cache = o.checked("cache")
    from ..cache.reuse import dedup_memory

    dedup_memory()  # BERTFEAT_DEDUP_MEMORY, read where the run's store is made: a bad one refused before the model loads
    o = _encoder_options(o)
    fmt, dask = _engine_settings(o)
    keep, keep_as, label = _output_columns(o, fmt, pca, pca_model)
    from ..model.spec import check_spec_words

    check_spec_words(o.pooling, o.layer_agg, o.long_text)  # (Encoder.spec's words, before "already exists")
    _check_long_text(o.stride, o.long_text, o.pair_column)
    input = _check_input(o, fmt)
    from ..readers import open_input, resume_identity, split_id_column

    id_name, id_as_text = split_id_column(o.id_column)
    reader = open_input(input, o.input_format, o.text_column, o.pair_column, id_name, o.encoding,
                        delimiter=o.delimiter, keep=keep, label=label, keep_as=keep_as, max_field_bytes=max_field_bytes,
                        id_as_text=id_as_text)
    input_state = None if input == "-" else reader.identity(within_run=True)  # before a row is read (the header aside)
    input_identity = None if input_state is None else resume_identity(input_state)
    check_pair_column(reader, o.text_column)
    check_label_column(reader, label, o.text_column)
    check_output_columns(reader, fmt)
    overwrite = bool(o.overwrite) or estimate is not False  # an estimate writes nothing: an existing output is fine
    layout = _output_layout(input, o.output, fmt, o.engine, pca is not None, reader, overwrite, o.resume, pca_model,
                            cache, o.model, writes=estimate is False)
    return ExtractPlan(options=o, input=input, reader=reader, layout=layout, on_bad_row=on_bad_row,
                       max_bad_rows=max_bad_rows, pca=pca, pca_model=pca_model, overwrite=overwrite, dask=dask,
                       keep=keep, keep_as=keep_as, cache=cache, label=label, dtype=dtype,
                       max_field_bytes=max_field_bytes, input_identity=input_identity, input_state=input_state)


def _check_run_shape(o: ExtractOptions, client) -> None:
    """The run's shape: ``chunk_rows`` a count, a known engine (the Dask options with the Dask engine only, a given
    client without the options that make one), a known ``on_bad_row`` policy."""
    o.checked("chunk_rows")
    given = _dask_options_given(o, client)
    if o.checked("engine") == "local" and given:  # refused, not ignored: the user expects them to act
        one = len(given) == 1
        names = given[0] if one else ", ".join(given[:-1]) + " and " + given[-1]
        raise BertfeatError(f"{names} {'needs' if one else 'need'} {opt('engine', 'dask')}",
                            f"add {opt('engine', 'dask')}, or leave {'it' if one else 'them'} out")
    _check_client_alone(o, client)
    o.checked("on_bad_row")


def _dask_options_given(o: ExtractOptions, client) -> list[str]:
    """The Dask engine's own options given (``blocksize``: other than its default), as the errors name them."""
    from .options import DEFAULT_BLOCKSIZE

    given = [opt(name) for name in ("scheduler", "workers") if getattr(o, name)]
    if o.blocksize != DEFAULT_BLOCKSIZE:
        given.append(opt("blocksize"))
    if client is not None:
        given.append("client")
    return given


def _check_client_alone(o: ExtractOptions, client) -> None:
    """A given client runs the job on its own cluster: ``scheduler`` (another cluster) or ``workers`` (a local cluster
    to start) beside it would be ignored, so they are refused."""
    given = [opt(name, value) for name, value in (("scheduler", o.scheduler), ("workers", o.workers)) if value]
    if client is None or not given:
        return
    names = " and ".join(given)
    other = f", or leave client out to use {names}" if len(given) == 1 else ""  # both: they exclude each other too
    raise BertfeatError(f"client{', ' if len(given) > 1 else ' and '}{names} exclude each other (the client's cluster "
                        f"runs the job; {names} would be ignored)", f"give client alone{other}")


def _encoder_options(o: ExtractOptions) -> ExtractOptions:
    """The encoder's options merged with ``encoder_options`` (``encoder_settings``) and checked -> the options with
    the merged values (and ``encoder_options`` as a dict, as given). Every key of it is one of ``MERGED``: the
    manifest records the merged values (the fingerprint's), not the dict, so where a value was given changes nothing."""
    settings = encoder_settings(o)
    checked = {name: o.checked(name, settings.get(name)) for name in ("threads", "max_length", "max_batch_tokens",
                                                                       "precision")}
    model = settings["model"]
    if model is not None and not isinstance(model, (str, os.PathLike)):  # model= is checked as given; this is the merge's
        from ..checks import kind_of

        raise BertfeatError(f"encoder_options['model']={model!r} is {kind_of(model)}, not a string or a path",
                            f"give {opt('model')} as a string or a path")
    return dataclasses.replace(o, model=None if model is None else os.fspath(model),
                               encoder_options=dict(o.encoder_options or {}), **checked)


def _refuse_dask_output(out: Path) -> None:
    """The local engine writes a file: over a Dask run's output directory (its parts and provenance) --overwrite
    cannot replace it, and said only "is a directory - pass -o with a file name"; say what it is and both ways out."""
    from ..checks import is_directory
    from ..features.reader import DIRECTORY_PROVENANCE

    if is_directory(out) and (out / DIRECTORY_PROVENANCE).is_file():  # (a name too long: the name checks say it)
        raise BertfeatError(f"the output {out} is a directory of parts written by {opt('engine', 'dask')}, and "
                            f"{opt('engine', 'local')} (the default) writes one file",
                            f"pass {opt('output')} with another name, e.g. {opt('output', str(out.with_name(out.stem + '.local' + out.suffix)))}, "
                            f"or remove that directory first (rm -r {shlex.quote(str(out))}), or run with "
                            f"{opt('engine', 'dask')} again")


def _engine_settings(o: ExtractOptions) -> tuple[str, DaskSettings | None]:
    """The output's format and name, and the engine's own rules -> (the format written, the Dask settings or None)."""
    from ..checks import check_output_format, check_output_name

    fmt = output_format(o.output, o.format)
    if o.output is not None and o.engine != "dask":
        _refuse_dask_output(Path(os.fspath(o.output)))
    if o.output is not None:  # a URL, a directory ...: refused before the format's or the engine's own rules
        check_output_name(o.output, "output", f"features.{fmt}", kind="directory" if o.engine == "dask" else "file")
    dask = None
    if o.engine == "dask":
        dask = dask_settings(o)
    elif o.wide and fmt == "npy":
        raise BertfeatError(f"{opt('wide', True)} applies to Parquet output, not npy",
                            f"drop {opt('wide')}, or use {opt('format', 'parquet')}")
    if o.output is not None and o.engine != "dask":  # /dev/stdout --format csv: not "name it /dev/stdout.csv"
        from .outputs import check_regular

        check_regular([("output", Path(os.fspath(o.output)))])
    check_output_format(o.output, o.format)
    return fmt, dask


def _output_columns(o: ExtractOptions, fmt: str, pca, pca_model) -> tuple:
    """The kept columns and the probe's label (``check_keep``, ``check_label_option``) -> (keep, keep_as, label); the
    label is kept too, as the probe reads it back from the output."""
    from ..readers import split_id_column

    id_name = split_id_column(o.id_column)[0]
    check_id_name(id_name, fmt, o.wide)
    keep, keep_as = check_keep(o.checked("keep"), fmt, id_name, o.wide)
    label = check_label_option(o.checked("label"), pca, pca_model, fmt, id_name)
    if label is not None and label not in keep:
        keep = check_keep(keep_columns(keep + (label,)), fmt, id_name, o.wide)[0]
    return keep, keep_as, label


def _check_long_text(stride, long_text: str, pair_column) -> None:
    """``stride`` against ``long_text``, and a ``long_text`` that text pairs allow."""
    from ..checks import check_stride

    check_stride(stride, long_text)
    if pair_column is not None:
        from ..model.inputs import check_pairs_long_text

        check_pairs_long_text(long_text)


def _check_input(o: ExtractOptions, fmt: str) -> str:
    """``input``: a path or '-' (standard input: no resume), with an output where none can be derived (standard input,
    a URL) -> the path as a string."""
    input = o.checked("input")
    if o.resume and input == "-":
        raise BertfeatError(f"{opt('resume', True)} cannot continue a run that read standard input", "write the input to a file first")
    from ..readers import is_url

    if input == "-" and o.output is None:
        default_output(input, fmt)  # raises: standard input needs an output
    if is_url(input) and o.output is None:  # no "beside the input" for a URL
        raise BertfeatError(f"a URL input needs {opt_word('output', 'OUTPUT')}",
                            "give the output path (with the Dask engine, a directory every worker can write)")
    return input


def _output_layout(input: str, output, fmt: str, engine: str, want_pca: bool, reader, overwrite: bool, resume: bool,
                   pca_model, cache: Path | None = None, model: str | None = None, writes: bool = True) -> OutputLayout:
    """Every name the run may write (``OutputLayout``: the given output, else beside the input), checked against the
    run's own folders first (``check_cache_apart``: the cache and the model folder), then the output rules
    (``check_layout``). ``writes``: False for an estimate, which writes nothing and so takes no lock (outlock.py): it
    runs beside a run writing the output."""
    out = Path(os.fspath(output)) if output is not None else default_output(input, fmt)
    if output is None:  # named after the input (the given output's name is checked with the options)
        from ..checks import local_path

        local_path(out, "output", "output", writes=True)
    layout = OutputLayout(out.resolve() if engine == "dask" else out, fmt, engine, want_pca)
    check_cache_apart(cache, layout, model)  # before "already exists": --overwrite would not make it right
    from .outlock import output_lock
    from .outputs import check_not_descriptor

    check_not_descriptor(layout.outputs())  # before the lock, which /dev/fd/1's folder cannot hold

    # a run writing this output is named first (its partial dir is live)
    with output_lock(*layout.locked(), create=False, prefixes=layout.locked_prefixes()) if writes else \
            contextlib.nullcontext():
        check_layout(layout, reader, input, overwrite, resume, pca_model, writes=writes)
    return layout


def check_label_option(label, pca, pca_model, fmt: str, id_column: str | None) -> str | None:
    """``label`` (a column name: its own check, options.check_label) with the rest: a PCA fitted in this run, whose
    report gets the probe, an output with columns, not the id column."""
    if label is None:
        return None
    if pca is None:
        how = ("a given model's report is not rewritten: probe it with bertfeat report MODEL --probe FEATURES "
               "--label COLUMN" if pca_model is not None else f"add {opt_word('pca', 'N')}")
        raise BertfeatError(f"{opt('label')} adds a linear probe to the report of the PCA this run fits", how)
    if fmt == "npy":
        raise BertfeatError(f"{opt('label')} needs an output with columns (the probe reads the label back from it); npy "
                            "holds the features only", f"use {opt('format', 'parquet')} or {opt('format', 'csv')}")
    if label == id_column:
        raise BertfeatError(f"{opt('label')} '{label}' is the id column ({opt('id_column', label)})",
                            "the probe reads a kept column: give the id another column, or probe another column")
    return label


#: the output's own columns besides the id column (a kept column may not take their names)
#: a run's own columns in every format (embedding: the features' column of the run's tables, whatever the output's)
OUTPUT_COLUMNS = ("embedding", "n_tokens", "truncated", "n_chunks")


def numbered_features(fmt: str, wide: bool) -> bool:
    """The output's features are columns f0, f1 ... (CSV, wide Parquet; a .npy's ids file holds the id and extras
    alone): names an id or kept column may not take."""
    from ..features.registry import FILE_FORMATS

    return FILE_FORMATS[fmt].numbered_feature_columns(wide)


def check_id_name(id_column: str | None, fmt: str, wide: bool) -> None:
    """An id column named as one of the output's own columns is refused before the model loads: FeatureWriter refused
    it after every row was encoded, and the run's work was removed with its partial directory."""
    if id_column is None:
        return
    shown = opt("id_column", id_column, cli=f"'{id_column}'")
    if id_column in OUTPUT_COLUMNS:
        raise BertfeatError(f"{shown} clashes with the output column '{id_column}'",
                            f"rename the id column in the input, or leave {opt('id_column')} out (the rows are then "
                            "numbered)")
    from ..features.base import WIDE_COLUMN_RE  # (the writer's names of the feature columns)

    if numbered_features(fmt, wide) and WIDE_COLUMN_RE.match(id_column):  # the features' columns (f007 is none of them)
        where = "a CSV output" if fmt == "csv" else f"a wide Parquet output ({opt('wide', True)})"
        raise BertfeatError(f"{shown} clashes with the features' columns f0, f1, ... of {where} (one per feature)",
                            "rename the id column in the input, or write Parquet (not wide) or npy")


def check_keep(pairs: list, fmt: str, id_column: str | None, wide: bool) -> tuple[tuple[str, ...], dict[str, str]]:
    """The kept columns (``pairs`` of name and type name or None: options.keep_columns) against the output -> (their
    names, the types given for some: name -> int, float, bool or str). None is the name of an output column (the id
    column, embedding, n_tokens, truncated, n_chunks; f0, f1 ... where the features are columns: wide Parquet, CSV), and
    the format holds columns (npy does not). That each is a column of the input is the reader's check (open_input)."""
    from ..readers.kept import GIVEN_NAMES, TYPE_NAMES

    if not pairs:
        return (), {}
    names = [n for n, _ in pairs]
    if fmt == "npy":
        raise BertfeatError(f"{opt('keep')} needs an output with columns; npy holds the features only",
                            f"use {opt('format', 'parquet')} or {opt('format', 'csv')}, or drop {opt('keep')}")
    id_name = id_column or "row"
    wide_columns = numbered_features(fmt, wide)
    from ..features.base import WIDE_COLUMN_RE  # (the writer's names of the feature columns)

    for n in names:
        if n == id_name and id_column:
            raise BertfeatError(f"{opt('keep')} '{n}' is the id column ({opt('id_column', n)})",
                                f"drop it from {opt('keep')}: the id column is in the output already")
        if n == id_name:
            raise BertfeatError(f"{opt('keep')} '{n}' clashes with the output column '{n}' (the row number)",
                                f"rename the input column, or pass {opt('id_column', n)} to make it the id column")
        if n in OUTPUT_COLUMNS:
            raise BertfeatError(f"{opt('keep')} '{n}' clashes with the output column '{n}'",
                                f"rename the input column, or drop it from {opt('keep')}")
        if wide_columns and WIDE_COLUMN_RE.match(n):  # the features' columns (f007 is none of them)
            raise BertfeatError(f"{opt('keep')} '{n}' clashes with the features' columns f0, f1, ... (one per feature; "
                                "how many is known once the model loads)",
                                f"rename the input column, or drop it from {opt('keep')}")
    return tuple(names), {n: GIVEN_NAMES[TYPE_NAMES[t]] for n, t in pairs if t is not None}  # int, float, bool, str


def check_pca_model(o: ExtractOptions, pca) -> Path | None:
    """``pca_model`` excludes ``pca`` (which fits one); then its own check (options.check_pca_model_file)."""
    if o.pca_model is None:
        return None
    if pca is not None:
        raise BertfeatError(f"{opt('pca')} and {opt('pca_model')} exclude each other",
                            f"give {opt('pca')} to fit a new PCA on this input, or {opt('pca_model')} to apply a fitted one")
    return o.checked("pca_model")


def check_label_column(reader, label: str | None, text_column: str | None) -> None:
    """The label must be another column than the text or pair column: the probe then predicted each text from its
    own features, 100 % accuracy, without a word (found by the sweep audit; extract and sweep)."""
    if label is None or label not in (reader.text_column, reader.pair_column):
        return
    which = "pair" if label == reader.pair_column and label != reader.text_column else "text"
    auto = " (auto-detected)" if which == "text" and text_column is None else ""
    raise BertfeatError(f"{reader.name}: {opt('label', label)} is the {which} column{auto}, so the probe would predict "
                        "each row's text from its own features", f"give {opt('label')} the column that holds each "
                        "row's class")


def check_pair_column(reader, text_column: str | None) -> None:
    """The pair column must be another column than the text column (``text_column``: as given, None when the reader
    found it): the same column as both would encode every text as a pair with itself, ``[CLS] t [SEP] t [SEP]``,
    without a word (extract and sweep)."""
    pair = reader.pair_column
    if pair is None or pair != reader.text_column:
        return
    how = (f"the text column too ({opt('text_column', text_column)})" if text_column is not None else
           "the text column too (auto-detected)")
    raise BertfeatError(f"{reader.name}: {opt('pair_column', pair)} is {how}, so each text would be encoded as a pair "
                        "with itself", f"give {opt('pair_column')} the column that holds each row's second text"
                        + ("" if text_column is not None else f", and {opt('text_column')} the first's"))


def check_output_columns(reader, fmt: str) -> None:
    """Every kept column and the id column must be one the output's format holds and gives back as its type
    (``features.registry.unwritable``: a CSV or npy output holds no lists or structs)."""
    from ..features.registry import an_output, unwritable

    for name, t, why in unwritable(fmt, reader.keep_types()):
        raise BertfeatError(f"{opt('keep')} column '{name}' holds {t} values, which {an_output(fmt)} cannot hold ({why})",
                            f"write a Parquet output ({opt('output', 'NAME.parquet')}), or leave it out of {opt('keep')}")
    t = reader.id_type()
    for name, t, why in unwritable(fmt, {reader.id_column: t} if t is not None and reader.id_column else {}):
        raise BertfeatError(f"{opt('id_column')} '{name}' holds {t} values, which {an_output(fmt)} cannot hold ({why})",
                            f"write a Parquet output ({opt('output', 'NAME.parquet')}), or choose another {opt('id_column')}")


def check_output_values(plan, table, rows: list[int]) -> None:
    """Every id and kept value of an encoded chunk (``table``; ``rows``: its input rows) must be one the output's format
    gives back as itself (``FeatureFile.value_problem``: a CSV or npy output cannot hold a date past year 9999);
    refused naming the input row (a Parquet dataset's file and its row there too: Reader.row_label) and column, as
    the chunk is encoded (not after the last one)."""
    from ..features.base import value_why
    from ..features.registry import FILE_FORMATS, an_output
    from ..readers.kept import python_values

    check = FILE_FORMATS[plan.layout.fmt].value_problem
    for name in filter(None, (plan.reader.id_column, *plan.keep)):
        problem = check(table.column(name))
        if problem is None:
            continue
        k, written, back = problem
        value = python_values(table.column(name).slice(k, 1))[0]
        what, other = ((f"{opt('id_column')} '{name}'", f"choose another {opt('id_column')}")
                       if name == plan.reader.id_column else (f"{opt('keep')} column '{name}'", f"leave it out of {opt('keep')}"))
        raise BertfeatError(f"{plan.reader.row_label(rows[k])}: {what} holds {value}, which {an_output(plan.layout.fmt)} cannot give "
                            f"back ({value_why(written, back)})",
                            f"write a Parquet output ({opt('output', 'NAME.parquet')}), or {other}")


def encoder_settings(o: ExtractOptions) -> dict:
    """extract's encoder options (``MERGED``) merged with ``encoder_options`` (further Encoder keywords).

    A key of ``encoder_options`` that is also an option stands in for it when that option is left at its default;
    both given with different values is an error naming both. Unknown keys are errors."""
    from ..model.encoder import Encoder

    given = {name: getattr(o, name) for name in MERGED}
    known = set(inspect.signature(Encoder).parameters) - {"location"}
    out = dict(given)
    for key, value in dict(o.encoder_options or {}).items():
        if key not in known:
            raise BertfeatError(f"encoder_options has an unknown key {key!r}",
                                f"use Encoder keywords ({', '.join(sorted(known))})")
        if key in given and given[key] != OPTIONS[key].default and given[key] != value:
            raise BertfeatError(f"{opt(key, given[key])} and encoder_options[{key!r}]={value!r} disagree",
                                f"give {opt(key)} once")
        out[key] = value
    return out


def dask_settings(o: ExtractOptions) -> DaskSettings:
    """The Dask engine's own rules: it is installed, reads files (not standard input), writes Parquet parts; its
    options' own checks (``workers``, ``blocksize``)."""
    from .dask import require_dask

    require_dask()
    if os.fspath(o.input) == "-":
        raise BertfeatError(f"{opt('engine', 'dask')} cannot read standard input",
                            f"write the input to a file (Parquet is best), or use {opt('engine', 'local')}")
    if (o.format or "parquet") != "parquet" or (o.output is not None and Path(os.fspath(o.output)).suffix.lower() in (".npy", ".csv")):
        raise BertfeatError(f"{opt('engine', 'dask')} writes a Parquet dataset (a directory of part files)",
                            f"drop {opt('format')}/{opt('output')} .npy/.csv, or use {opt('engine', 'local')}")
    counted = o.workers is not None and not isinstance(o.workers, bool) and o.workers >= 1  # (else: out of range)
    if o.scheduler and counted:  # before workers' own check: its cap counts this machine's cores, not the cluster's
        raise BertfeatError(f"{opt('workers', o.workers)} starts a local cluster, but with {opt('scheduler')} the job "
                            "runs on that scheduler's workers", f"drop {opt('workers')} (the cluster's workers are the "
                            f"ones started with `dask worker {shlex.quote(str(o.scheduler))}`), or drop {opt('scheduler')} to start a "
                            "local cluster")
    return DaskSettings(o.scheduler, o.checked("workers"), o.checked("blocksize"))


def check_cache_apart(cache: Path | None, layout: OutputLayout, model: str | None = None) -> None:
    """The cache directory is none of the run's outputs and not inside one (the Dask engine's output directory is
    replaced whole at the end, the cache with it; a file's path holds no directory) nor inside its partial directory
    (removed at the end); and no output, side file or the partial directory lies inside the cache or the model folder
    (outputs.check_not_runs_own, the rule --summary-json has too: ``-o cache/vectors.sqlite3`` replaced the cache's
    database)."""
    from .outputs import check_cache_outside_model, check_not_runs_own

    check_not_runs_own(layout.outputs() + [("partial directory", layout.partial)], model, cache)
    if cache is None:
        return
    check_cache_outside_model(cache, model)
    c = Path(cache).absolute()
    for label, path in layout.outputs() + [("partial directory", layout.partial)]:
        p = Path(path).absolute()
        if c == p or p in c.parents:  # a file's path, or a directory replaced whole (Dask's output, the partial one)
            raise BertfeatError(f"the cache {cache} is {'inside ' if c != p else ''}the run's {label} {path}",
                                f"give {opt('cache')} a directory of its own, e.g. {opt('cache', 'bertfeat-cache')}")


def check_layout(layout: OutputLayout, reader, input: str, overwrite: bool, resume: bool, pca_model: Path | None = None,
                 writes: bool = True) -> None:
    """The output rules, before anything is written: the output is not a directory (the Dask engine: a directory
    holding nothing but the parts and provenance bertfeat wrote there), no side file is a directory, no output, side
    file or the partial directory is an input, an existing output needs ``overwrite``, and a partial run left by an
    interrupt needs ``resume`` (or ``overwrite``)."""
    from .outputs import check_name_lengths, check_not_directory, check_not_input, check_overwrite, partial_run_error

    out = layout.features
    outs = layout.outputs()
    check_name_lengths(outs + [("partial directory", layout.partial)])  # first: a name too long cannot be looked at
    from ..readers.paths import local_containers

    inputs = (([] if input == "-" else list(reader.files)) + local_containers(input)  # (a zip:// URL's archive)
              + ([pca_model] if pca_model is not None else []))
    if layout.engine == "local":
        if out.is_dir():
            from ..checks import directory_output_error

            raise directory_output_error(out, "output", f"features.{layout.fmt}")
        if input != "-" and any(out.resolve() == Path(f).resolve() for f in reader.files):
            raise BertfeatError(f"the output {out} is the input file", f"pass {opt('output')} with another file name")
    else:
        from .outputs import check_dataset_directory

        check_dataset_directory(out)  # replaced whole: nothing in it but bertfeat's parts
        from ..readers import is_url

        if is_url(input):
            inputs = [pca_model] if pca_model is not None else []
    check_not_input(outs + [("partial directory", layout.partial)], inputs)
    check_not_directory([(label, p) for label, p in outs if p != out], side_files=True)  # found up front, not at the end
    partial = layout.partial
    check_partial_is_ours(partial, out, resume, overwrite)
    if layout.engine == "local":  # either engine's partial run (a Dask one too: its parts would be deleted)
        from .manifest import PARTIAL_MANIFESTS

        interrupted = partial.is_dir() and any((partial / name).is_file() for name in PARTIAL_MANIFESTS.values())
    else:
        from .outputs import browser_file

        interrupted = partial.is_dir() and any(not browser_file(q) for q in partial.iterdir())
    if interrupted and not (resume or overwrite):
        raise partial_run_error(partial, stdin=input == "-")
    owner = layout.pca_owner() if writes else None  # even with overwrite (this output's files, not another's); an
    if owner is not None:                               # estimate writes nothing
        raise OutputError(f"the PCA model {layout.pca_model} is the one fitted for {owner}, another output of this "
                          f"name (they share {layout.pca_prefix.name}.*): this run would replace it and its report",
                          f"pass {opt('output')} with another name, or remove {owner} and its PCA files first")
    # resume continues it, rewriting only the outputs its interrupted finish left; overwrite starts over
    check_overwrite(outs, overwrite, resumed=partial if interrupted and resume else None)


def check_partial_is_ours(partial: Path, output: Path, resume: bool = False, overwrite: bool = False) -> None:
    """OUTPUT.partial is bertfeat's working directory, removed by --overwrite and at the end: a file there, or a
    folder holding anything but a run's manifest, parts and temporaries (and a file browser's files), is the user's
    and is never deleted. One holding an output's provenance (``_bertfeat.json``) and no manifest is a finished
    output: a Dask run's killed in the instant between its finish's last deletion and its rename (dask._finish keeps
    the manifest until then; a task writes no part before the manifest is there), or the user's own output named so
    (``-o X.partial``), which nothing here tells apart: refused, saying that nothing is deleted, why ``resume`` /
    ``overwrite`` do not take it, and the command that takes it as the output."""
    from ..features.reader import DIRECTORY_PROVENANCE
    from .manifest import PARTIAL_MANIFESTS
    from .outputs import browser_file
    from ..errors import OutputError

    if not (partial.exists() or partial.is_symlink()):
        return
    if partial.is_dir() and not partial.is_symlink():
        names = [q.name for q in partial.iterdir() if not browser_file(q)]
        if not names or any(n in PARTIAL_MANIFESTS.values() for n in names) or all(n.startswith(".") for n in names):
            return  # a run's (a killed one's before its manifest: only temporaries)
        if DIRECTORY_PROVENANCE in names:
            raise _finished_output_error(partial, output, resume, overwrite)
    raise OutputError(f"{partial} exists and is not a bertfeat partial run (bertfeat works there while it writes "
                      f"{output}, and deletes it)",
                      "move or rename it, or write the output under another name")


def _finished_output_error(partial: Path, target: Path, resume: bool, overwrite: bool):
    """check_partial_is_ours' refusal of a finished output at OUTPUT.partial: kept whole; a killed Dask run's had
    published its side files (rejects, PCA model and report) before its last step, so renaming it completes the
    output (an OUTPUT already there, an --overwrite run's old one, is moved aside first, to a name that is free and
    fits: ``mv`` would replace a file of the user's named OUTPUT.old) and nothing needs a rerun."""
    from ..errors import OutputError

    why = (f"; {opt('resume', True)} has nothing to continue in it (no manifest: that run had finished)" if resume else
           f"; {opt('overwrite', True)} does not delete it (it may be yours)" if overwrite else "")
    q = shlex.quote
    old = _free_name(target, ".old")
    move = (f"mv {q(str(target))} {q(str(old))} && " if target.exists() or target.is_symlink() else "")
    return OutputError(f"{partial} holds a finished bertfeat output (_bertfeat.json and its parts, no partial run's "
                       f"manifest): an output of yours named so, or a Dask run killed as it moved its output to "
                       f"{target}; nothing in it was deleted{why}",
                       f"if it is that run's output, it is complete (any rejects or PCA files beside it were written "
                       f"first) and needs no rerun: `{move}mv {q(str(partial))} {q(str(target))}`"
                       + (f" (the {target} there now is moved aside to {old})" if move else "")
                       + "; otherwise move it out of the way, or write the output under another name")


def _free_name(path: Path, suffix: str) -> Path:
    """``path`` with ``suffix`` (then ``suffix`` 2, 3 ...) added, the first name nothing holds yet, shortened to fit the
    name limit (``atomic.fitted_name``): the name a message's ``mv`` line moves a file aside to."""
    from ..atomic import fitted_name

    n = 1
    while True:
        end = suffix if n == 1 else f"{suffix}{n}"
        aside = path.with_name(fitted_name(path.name, len(end.encode())) + end)
        if not os.path.lexists(aside):
            return aside
        n += 1
