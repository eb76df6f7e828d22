"""One extract job, resolved once: ``make_plan(...)`` turns ``bertfeat.extract``'s options into an ``ExtractPlan``.

Every option of an extract run is checked here and only here, with the error naming the Python parameter
(``errors.opt``; the CLI shows each as its flag), whichever engine will run the job: the input (files, format,
columns, through the reader), the output layout (every file name the run may write: ``OutputLayout``), the
encoder settings, the chunking, the PCA request and the engine with its options. The local engine
(local_engine.py) and the Dask engine (dask_engine.py) take the plan and re-check nothing it holds; what needs
the loaded model (the feature spec, the fingerprint) is resolved by both through jobcore.feature_settings.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BertfeatError, InputError, opt
from ..checks import DEFAULT_MAX_FIELD_BYTES

ENGINES = ("local", "dask")
BAD_ROW_POLICIES = ("error", "skip")
DEFAULT_CHUNK_ROWS = 2048
DEFAULT_BLOCKSIZE = "8MiB"
ALL_COMPONENTS = "all"  # pca=1.0 / "all": keep every component (PCA(n_components=None))
#: extract's own parameters that are Encoder keywords too: in encoder_options they stand in for the parameter
#: when it is left at its default (below), never silently against it
ENCODER_PARAMS = {"model": None, "max_length": None, "max_batch_tokens": None, "threads": None, "precision": "fp32"}
INSTALL_DASK = 'pip install "bertfeat[dask]"'


# --------------------------------------------------------------------------- the output layout
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
        return self.features.with_name(self.features.name + ".rejects.csv")

    @property
    def partial(self) -> Path:
        return self.features.with_name(self.features.name + ".partial")

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
        file and provenance: another run's -o naming one of them is refused too), and with pca the PCA's prefix."""
        return [p for _, p in self.side_files()] + ([self.pca_prefix] if self.want_pca else [])

    def side_files(self) -> list[tuple[str, Path]]:
        """The feature output with its side files (a .npy's ids file, a .npy / .csv's provenance)."""
        if self.engine == "dask":
            return [("output", self.features)]
        from .outputs import feature_file_outputs

        return feature_file_outputs(self.features, self.fmt)

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
    p = Path(input_path.rstrip("/"))
    if any(ch in input_path for ch in "*?["):
        parts = []
        for part in Path(input_path).parts:
            if any(ch in part for ch in "*?["):
                break
            parts.append(part)
        p = Path(*parts) if parts else Path("dataset")
        if not p.name:
            p = Path("dataset")
    stem = p.name
    for suf in (".gz", ".bz2", ".zst", ".csv", ".tsv", ".tab", ".parquet", ".pq", ".jsonl", ".ndjson", ".json"):
        if stem.lower().endswith(suf):
            stem = stem[: -len(suf)]
    return p.parent / f"{stem}.features.{fmt}"


def output_format(output: str | Path | None, fmt: str | None) -> str:
    """The format written: ``format`` when given (checked), else the output's extension, else parquet (the
    formats are features.FILE_FORMATS's)."""
    from ..features import FORMATS, feature_format

    if fmt:
        if fmt not in FORMATS:
            raise BertfeatError(f"unknown output format '{fmt}'", f"choose one of {', '.join(FORMATS)}")
        return fmt
    return feature_format(str(output) if output is not None else "")


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class DaskSettings:
    scheduler: str | None = None  # tcp://HOST:8786; None: a LocalCluster on this machine
    workers: int | None = None  # LocalCluster worker processes (default: one, a thread per core)
    blocksize: int | None = None  # input bytes per partition at most (None: one per file / row group)


@dataclass(frozen=True)
class FeatureOptions:
    """What the encoder computes per row (resolved against the model by Encoder.spec)."""

    pooling: str | None = None
    layers: str | None = None
    layer_agg: str = "mean"
    normalize: bool | None = None  # None: as the model's pipeline (its Normalize module)
    prompt: str | None = None
    prompt_name: str | None = None
    max_length: int | None = None
    long_text: str = "truncate"
    stride: int | None = None


@dataclass(frozen=True)
class ExtractPlan:
    """Every option of one extract run, checked and resolved; the engines execute it."""

    input: str  # as given ("-": standard input)
    reader: Any  # readers.Reader: files, format and columns resolved (holds no open file; pickles to workers)
    layout: OutputLayout
    model: str | None
    encoder_kwargs: dict  # Encoder(...) keywords besides the model: precision, max_batch_tokens, threads, ...
    features: FeatureOptions
    id_column: str | None
    pair_column: str | None
    on_bad_row: str
    max_bad_rows: Any  # rejects.BadRowLimit, or None: bad rows skipped (on_bad_row='skip') without a limit
    chunk_rows: int
    threads: int | None
    pca: int | float | str | None  # None, a count, a variance fraction, or ALL_COMPONENTS
    pca_model: Path | None  # a fitted PCA model file to apply (instead of fitting one: pca)
    pca_text: str | None  # pca as given (kept in the resume manifest)
    wide: bool
    resume: bool
    overwrite: bool
    engine: str
    dask: DaskSettings | None
    command: str | None
    encoder_options: dict = field(default_factory=dict)  # as given (kept in the resume manifest)
    keep: tuple[str, ...] = ()  # input columns copied to the output (the reader reads them: keep_types)
    cache: Path | None = None  # the vector cache directory (vcache.py), None: no cache
    label: str | None = None  # a kept column whose linear probe the PCA report adds (probe.py); needs pca
    dtype: str = "float32"  # the written features' type (FEATURE_DTYPES); computed, cached and reduced in float32
    keep_as: dict = field(default_factory=dict)  # kept column -> the type given for it (keep="label:int"), else decided
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES  # a read value larger than this is a bad row (the reader holds it)

    @property
    def precision(self) -> str:
        return self.encoder_kwargs.get("precision", "fp32")

    def check_outputs(self) -> None:
        """The output rules (check_layout) as they stand now: the engines' runner checks them again under the lock."""
        check_layout(self.layout, self.reader, self.input, self.overwrite, self.resume, self.pca_model)

    @property
    def reduces(self) -> bool:
        """The features are reduced: by a PCA fitted in this run (pca) or by a given one (pca_model)."""
        return self.pca is not None or self.pca_model is not None

    @property
    def id_name(self) -> str:
        """The output's id column: the input's id column, else ``row`` (the 0-based row number)."""
        return self.id_column or "row"

    @property
    def keep_types(self) -> dict:
        """The kept columns' Arrow types, in ``keep`` order (the reader decided them when it opened the input)."""
        return self.reader.keep_types()

    @property
    def pca_n_components(self):
        """The PCA's n_components (None keeps every component)."""
        return None if self.pca == ALL_COMPONENTS else self.pca


def make_plan(input: str | os.PathLike, output: str | os.PathLike | None = None, *, text_column: str | None = None,
              pair_column: str | None = None, id_column: str | None = None, input_format: str | None = None,
              encoding: str = "utf-8", delimiter: str | None = None, model: str | os.PathLike | None = None,
              pooling: str | None = None, layers: str | None = None, layer_agg: str = "mean",
              normalize: bool | None = None, prompt: str | None = None, prompt_name: str | None = None,
              max_length: int | None = None, max_batch_tokens: int | None = None, long_text: str = "truncate",
              stride: int | None = None, precision: str = "fp32", pca: int | float | str | None = None,
              pca_model: str | os.PathLike | None = None,
              format: str | None = None, wide: bool = False, on_bad_row: str | None = None, max_bad_rows: int | str | None = None,
              resume: bool = False,
              overwrite: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS, threads: int | None = None,
              engine: str = "local", scheduler: str | None = None, workers: int | None = None,
              blocksize: int | str | None = DEFAULT_BLOCKSIZE, client: Any = None,
              encoder_options: dict | None = None, command: str | None = None,
              keep: str | list[str] | tuple[str, ...] | None = None, cache: str | os.PathLike | bool | None = None,
              label: str | None = None, dtype: str = "float32",
              max_field_bytes: int | str = DEFAULT_MAX_FIELD_BYTES) -> ExtractPlan:
    """Check every option and resolve the input and the outputs: -> the plan (``bertfeat.extract``'s parameters).

    Raises BertfeatError naming the parameter, before anything is read past the input's header or written.
    """
    # the steps in this order: each option's error is the one a run with several wrong options reports first
    _check_run_shape(chunk_rows, engine, scheduler, workers, client, on_bad_row)
    from ..features.base import check_dtype
    from ..readers.rejects import resolve_bad_rows
    from ..checks import parse_max_field_bytes
    from ..cache.store import resolve_cache

    on_bad_row, max_bad_rows = resolve_bad_rows(on_bad_row, max_bad_rows)
    dtype = check_dtype(dtype)
    max_field_bytes = parse_max_field_bytes(max_field_bytes)
    pca_value = parse_pca(pca)
    pca_model = check_pca_model(pca_model, pca_value)
    cache = resolve_cache(cache)
    model, max_length, threads, encoder_kwargs = _encoder_options(model, max_length, max_batch_tokens, threads, precision,
                                                                  encoder_options)
    fmt, dask = _engine_settings(input, output, format, engine, wide, scheduler, workers, blocksize)
    keep, keep_as, label = _output_columns(keep, label, fmt, id_column, wide, pca_value, pca_model)
    _check_long_text(stride, long_text, pair_column)
    input = _check_input(input, output, fmt, resume)
    from ..readers import open_input

    reader = open_input(input, input_format, text_column, pair_column, id_column, encoding, delimiter=delimiter, keep=keep,
                        label=label, keep_as=keep_as, max_field_bytes=max_field_bytes)
    check_output_columns(reader, fmt)
    layout = _output_layout(input, output, fmt, engine, pca_value is not None, reader, overwrite, resume, pca_model)
    check_cache_apart(cache, layout)
    return ExtractPlan(
        input=input, reader=reader, layout=layout, model=None if model is None else os.fspath(model),
        encoder_kwargs=encoder_kwargs,
        features=FeatureOptions(pooling, layers, layer_agg, normalize, prompt, prompt_name, max_length, long_text, stride),
        id_column=id_column, pair_column=pair_column, on_bad_row=on_bad_row, max_bad_rows=max_bad_rows,
        chunk_rows=chunk_rows, threads=threads,
        pca=pca_value, pca_model=pca_model, pca_text=None if pca is None else str(pca), wide=wide, resume=resume, overwrite=overwrite,
        engine=engine, dask=dask, command=command, encoder_options=dict(encoder_options or {}), keep=keep, cache=cache,
        label=label, dtype=dtype, keep_as=keep_as, max_field_bytes=max_field_bytes)


def _check_run_shape(chunk_rows, engine, scheduler, workers, client, on_bad_row) -> None:
    """The run's shape: ``chunk_rows`` a count, a known engine (the Dask options with the Dask engine only), a known
    ``on_bad_row`` policy."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise BertfeatError(f"{opt('chunk_rows', chunk_rows)} is out of range", "give 1 or more")
    if engine not in ENGINES:
        raise BertfeatError(f"unknown {opt('engine', engine, cli=repr(engine))}", "choose local or dask")
    if engine == "local" and (scheduler or workers or client is not None):
        names = f"{opt('scheduler')}, {opt('workers')} and client" if client is not None else f"{opt('scheduler')} and {opt('workers')}"
        raise BertfeatError(f"{names} need {opt('engine', 'dask')}", f"add {opt('engine', 'dask')}")
    if on_bad_row is not None and on_bad_row not in BAD_ROW_POLICIES:
        raise BertfeatError(f"unknown {opt('on_bad_row', on_bad_row, cli=repr(on_bad_row))}", "choose error or skip")


def _encoder_options(model, max_length, max_batch_tokens, threads, precision, encoder_options) -> tuple:
    """The encoder's settings merged and checked (``encoder_settings``) -> (model, max_length, threads, the Encoder's
    other keywords); ``max_length`` is a feature setting (Encoder.spec), not a load setting, so it leaves the keywords."""
    from ..checks import check_max_batch_tokens, check_max_length, check_threads

    encoder_kwargs = encoder_settings(model, max_length, max_batch_tokens, threads, precision, encoder_options)
    model = encoder_kwargs.pop("model")
    max_length = encoder_kwargs.pop("max_length", None)
    threads = check_threads(encoder_kwargs.get("threads"))
    check_max_length(max_length)
    check_max_batch_tokens(encoder_kwargs.get("max_batch_tokens"))
    from ..ops.gemm import check_precision

    check_precision(encoder_kwargs["precision"])
    return model, max_length, threads, encoder_kwargs


def _engine_settings(input, output, format, engine, wide, scheduler, workers, blocksize) -> tuple[str, DaskSettings | None]:
    """The output's format and name, and the engine's own rules -> (the format written, the Dask settings or None)."""
    from ..checks import check_output_format, check_output_name

    fmt = output_format(output, format)
    if output is not None:  # a URL, a directory ...: refused before the format's or the engine's own rules
        check_output_name(output, "output", f"features.{fmt}", kind="directory" if engine == "dask" else "file")
    dask = None
    if engine == "dask":
        dask = dask_settings(input, output, format, scheduler, workers, blocksize)
    elif wide and fmt == "npy":
        raise BertfeatError(f"{opt('wide', True)} applies to Parquet output, not npy",
                            f"drop {opt('wide')}, or use {opt('format', 'parquet')}")
    check_output_format(output, format)
    return fmt, dask


def _output_columns(keep, label, fmt: str, id_column, wide: bool, pca, pca_model) -> tuple:
    """The kept columns and the probe's label (``check_keep``, ``check_label_option``) -> (keep, keep_as, label); the
    label is kept too, as the probe reads it back from the output."""
    keep, keep_as = check_keep(keep, fmt, id_column, wide)
    label = check_label_option(label, pca, pca_model, fmt, id_column)
    if label is not None and label not in keep:
        keep = check_keep(keep + (label,), fmt, id_column, wide)[0]
    return keep, keep_as, label


def _check_long_text(stride, long_text: str, pair_column) -> None:
    """``stride`` against ``long_text``, and a ``long_text`` that text pairs allow."""
    from ..checks import check_stride

    check_stride(stride, long_text)
    if pair_column is not None:
        from ..model.encoder import check_pairs_long_text

        check_pairs_long_text(long_text)


def _check_input(input, output, fmt: str, resume: bool) -> str:
    """``input``: a path or '-' (standard input: no resume), with an output where none can be derived (standard input,
    a URL) -> the path as a string."""
    from ..checks import check_input_path

    if not isinstance(input, (str, os.PathLike)):
        raise BertfeatError(f"input is a {type(input).__name__}, not a file path",
                            "extract reads a file (CSV, TSV, Parquet, JSONL) or '-' for standard input; for texts in "
                            "memory use bertfeat.Encoder().encode(texts), or bertfeat.sklearn.TextFeatures")
    input = os.fspath(input)
    check_input_path(input)
    if resume and input == "-":
        raise BertfeatError(f"{opt('resume', True)} cannot continue a run that read standard input", "write the input to a file first")
    from ..readers import is_url

    if input == "-" and output is None:
        default_output(input, fmt)  # raises: standard input needs an output
    if is_url(input) and output is None:  # no "beside the input" for a URL
        raise BertfeatError(f"a URL input needs {opt('output')} OUTPUT",
                            "give the output path (with the Dask engine, a directory every worker can write)")
    return input


def _output_layout(input: str, output, fmt: str, engine: str, want_pca: bool, reader, overwrite: bool, resume: bool,
                   pca_model) -> OutputLayout:
    """Every name the run may write (``OutputLayout``: the given output, else beside the input), checked against the
    output rules (``check_layout``)."""
    out = Path(os.fspath(output)) if output is not None else default_output(input, fmt)
    layout = OutputLayout(out.resolve() if engine == "dask" else out, fmt, engine, want_pca)
    from .outlock import output_lock

    with output_lock(*layout.locked(), create=False):  # a run writing this output is named first (its partial dir is live)
        check_layout(layout, reader, input, overwrite, resume, pca_model)
    return layout


def check_label_option(label, pca, pca_model, fmt: str, id_column: str | None) -> str | None:
    """``label``: a column name (not the id column), a PCA fitted in this run whose report gets the probe, an output
    with columns."""
    if label is None:
        return None
    if not isinstance(label, str) or not label:
        raise BertfeatError(f"{opt('label', label, cli=repr(label))} is not a column name", 'give label="label"')
    if pca is None:
        how = ("a given model's report is not rewritten: probe it with bertfeat report MODEL --probe FEATURES "
               "--label COLUMN" if pca_model is not None else f"add {opt('pca')} N")
        raise BertfeatError(f"{opt('label')} adds a linear probe to the report of the PCA this run fits", how)
    if fmt == "npy":
        raise BertfeatError(f"{opt('label')} needs an output with columns (the probe reads the label back from it); npy "
                            "holds the features only", f"use {opt('format', 'parquet')} or {opt('format', 'csv')}")
    if label == id_column:
        raise BertfeatError(f"{opt('label')} '{label}' is the id column ({opt('id_column', label)})",
                            "the probe reads a kept column: give the id another column, or probe another column")
    return label


#: the output's own columns besides the id column (a kept column may not take their names)
OUTPUT_COLUMNS = ("embedding", "n_tokens", "truncated", "n_chunks")


def check_keep(keep, fmt: str, id_column: str | None, wide: bool) -> tuple[tuple[str, ...], dict[str, str]]:
    """``keep``: the input columns copied to the output, -> (their names, the types given for some: name -> int, float,
    bool or str). A string is read as a CSV line (``parse_keep``: names separated by commas, a name quoted when it
    holds a comma, a double quote or a colon, ``name:int`` giving a type; the CLI joins its repeated ``--keep`` values
    with commas); a list or tuple names one column per item, exactly; a dict maps names to types (None: decided by the
    input). No name twice, none the name of an output column (the id column, embedding, n_tokens, truncated, n_chunks;
    f0, f1 ... where the features are columns: wide Parquet, CSV), and a format that holds columns (npy does not).
    That each is a column of the input is the reader's check (open_input)."""
    from ..readers.kept import GIVEN_NAMES, TYPE_NAMES

    if keep is None or (isinstance(keep, (list, tuple, dict)) and not keep):
        return (), {}
    if isinstance(keep, str):
        pairs = parse_keep(keep)
    elif isinstance(keep, (list, tuple)) and all(isinstance(k, str) for k in keep):
        pairs = [(k, None) for k in keep]
    elif isinstance(keep, dict) and all(isinstance(k, str) and (t is None or t in TYPE_NAMES) for k, t in keep.items()):
        pairs = list(keep.items())
    else:
        raise BertfeatError(f"{opt('keep', keep)} is not a column name or a list of them",
                            f'give keep="label", keep=["label", "split"] or keep={{"label": "int"}} (types: '
                            f'{", ".join(TYPE_NAMES)})')
    names = [n for n, _ in pairs]
    if any(not n for n in names):
        raise BertfeatError(f"{opt('keep', keep, cli=repr(keep))} holds an empty column name",
                            "separate the column names with single commas, e.g. label,split")
    for n in dict.fromkeys(names):
        if names.count(n) > 1:
            raise BertfeatError(f"{opt('keep')} names the column '{n}' {names.count(n)} times", "name each column once")
    if fmt == "npy":
        raise BertfeatError(f"{opt('keep')} needs an output with columns; npy holds the features only",
                            f"use {opt('format', 'parquet')} or {opt('format', 'csv')}, or drop {opt('keep')}")
    id_name = id_column or "row"
    wide_columns = wide or fmt == "csv"
    for n in names:
        if n == id_name and id_column:
            raise BertfeatError(f"{opt('keep')} '{n}' is the id column ({opt('id_column', n)})",
                                f"drop it from {opt('keep')}: the id column is in the output already")
        if n == id_name:
            raise BertfeatError(f"{opt('keep')} '{n}' clashes with the output column '{n}' (the row number)",
                                f"rename the input column, or pass {opt('id_column', n)} to make it the id column")
        if n in OUTPUT_COLUMNS or (wide_columns and re.fullmatch(r"f\d+", n)):
            raise BertfeatError(f"{opt('keep')} '{n}' clashes with the output column '{n}'",
                                f"rename the input column, or drop it from {opt('keep')}")
    return tuple(names), {n: GIVEN_NAMES[TYPE_NAMES[t]] for n, t in pairs if t is not None}  # int, float, bool, str


def parse_keep(text: str) -> list[tuple[str, str | None]]:
    """``keep`` as text -> (column name, type name or None) pairs. Read as a CSV line: names separated by commas; a name
    in double quotes is taken as it is (a double quote in it doubled: ``"a,b"``, ``"x""y"`` for x"y); a name may end in
    ``:TYPE`` (``int``, ``float``, ``bool``, ``str``: ``label:int``, ``"a,b":str``), and an unquoted name whose text
    after its last colon is no type name is that whole text (``time:utc``)."""
    from ..readers.kept import TYPE_NAMES

    def refuse(what: str, how: str):
        raise BertfeatError(f"{opt('keep', text, cli=shlex.quote(text))}: {what}", how)

    pairs, i = [], 0
    while True:
        if text.startswith('"', i):
            name, k = _quoted_name(text, i, refuse)
            end = text.find(",", k)
            rest = text[k:] if end < 0 else text[k:end]
            if rest and (not rest.startswith(":") or rest[1:] not in TYPE_NAMES):
                refuse(f"{rest!r} follows the quoted name {name!r}",
                       "end a quoted name with its quote, or with a type: :int, :float, :bool or :str")
            pairs.append((name, rest[1:] or None))
        else:
            end = text.find(",", i)
            item = text[i:] if end < 0 else text[i:end]
            if '"' in item:
                refuse(f"the name {item!r} holds a double quote",
                       'quote the whole name and double the quote in it, as in CSV: "x""y" for x"y')
            name, _, typ = item.rpartition(":")
            pairs.append((name, typ) if name and typ in TYPE_NAMES else (item, None))
        if end < 0:
            return pairs
        i = end + 1


def _quoted_name(text: str, i: int, refuse) -> tuple[str, int]:
    """The name quoted from ``text[i]`` (a double quote) to the quote that is not doubled, and where after it the text
    goes on; an unclosed quote is refused."""
    parts, j = [], i + 1
    while True:
        k = text.find('"', j)
        if k < 0:
            refuse(f"the quote at character {i + 1} is never closed", 'close it: "a,b",label')
        parts.append(text[j:k])
        if not text.startswith('"', k + 1):
            return '"'.join(parts), k + 1
        j = k + 2


def parse_pca(value) -> int | float | str | None:
    """``pca``: None (no PCA), a count, a variance fraction, or ALL_COMPONENTS (the parser of ``pca fit -n``)."""
    if isinstance(value, bool):
        raise BertfeatError(f"{opt('pca', value)} is not a size", "give a number of components (64) or a variance fraction (0.95)")
    if value is None:
        return None
    from ..checks import parse_pca_spec  # "" (or blanks) is refused there, as not a number: it never means "no PCA"

    n = parse_pca_spec(value, "pca")
    return ALL_COMPONENTS if n is None else n


def check_pca_model(pca_model, pca) -> Path | None:
    """``pca_model``: a PCA model file to apply (checked as a file here; its fit against the features, once the
    model is loaded, in jobcore.applied_pca). Excludes ``pca`` (which fits one)."""
    if pca_model is None:
        return None
    if pca is not None:
        raise BertfeatError(f"{opt('pca')} and {opt('pca_model')} exclude each other",
                            f"give {opt('pca')} to fit a new PCA on this input, or {opt('pca_model')} to apply a fitted one")
    from ..checks import local_path

    path = local_path(pca_model, "PCA model", "pca_model")
    if not path.is_file():
        raise BertfeatError(f"the PCA model {path} does not exist" if not path.exists() else f"the PCA model {path} is not a file",
                            f"pass {opt('pca_model')} with a .npz written by `bertfeat pca fit` or `extract --pca`")
    from ..features.arrayfile import check_array_file

    check_array_file(path, "PCA model")
    return path


def check_output_columns(reader, fmt: str) -> None:
    """Every kept column and the id column must be one the output's format holds and gives back as its type
    (``features.registry.unwritable``: a CSV or npy output holds no lists or structs)."""
    from ..features.registry import unwritable

    for name, t, why in unwritable(fmt, reader.keep_types()):
        raise BertfeatError(f"{opt('keep')} column '{name}' holds {t} values, which a {fmt.upper()} output cannot hold ({why})",
                            f"write a Parquet output ({opt('output', 'NAME.parquet')}), or leave it out of {opt('keep')}")
    t = reader.id_type()
    for name, t, why in unwritable(fmt, {reader.id_column: t} if t is not None and reader.id_column else {}):
        raise BertfeatError(f"{opt('id_column')} '{name}' holds {t} values, which a {fmt.upper()} output cannot hold ({why})",
                            f"write a Parquet output ({opt('output', 'NAME.parquet')}), or choose another {opt('id_column')}")


def encoder_settings(model, max_length, max_batch_tokens, threads, precision, encoder_options) -> dict:
    """extract's encoder parameters merged with ``encoder_options`` (further Encoder keywords).

    A key of ``encoder_options`` that is also a parameter of extract stands in for it when that parameter is
    left at its default; both given with different values is an error naming both. Unknown keys are errors."""
    from ..model.encoder import Encoder

    given = {"model": model, "max_length": max_length, "max_batch_tokens": max_batch_tokens, "threads": threads,
             "precision": precision}
    known = set(inspect.signature(Encoder).parameters) - {"location"}
    out = dict(given)
    for key, value in dict(encoder_options or {}).items():
        if key not in known:
            raise BertfeatError(f"encoder_options has an unknown key {key!r}",
                                f"use Encoder keywords ({', '.join(sorted(known))})")
        if key in ENCODER_PARAMS and given[key] != ENCODER_PARAMS[key] and given[key] != value:
            raise BertfeatError(f"{opt(key, given[key])} and encoder_options[{key!r}]={value!r} disagree",
                                f"give {opt(key)} once")
        out[key] = value
    return {k: v for k, v in out.items() if v is not None or k == "model"}


def dask_settings(input, output, fmt, scheduler, workers, blocksize) -> DaskSettings:
    """The Dask engine's own rules: it is installed, reads files (not standard input), writes Parquet parts."""
    from .dask import parse_blocksize, require_dask

    require_dask()
    if os.fspath(input) == "-":
        raise BertfeatError(f"{opt('engine', 'dask')} cannot read standard input",
                            f"write the input to a file (Parquet is best), or use {opt('engine', 'local')}")
    if (fmt or "parquet") != "parquet" or (output is not None and Path(os.fspath(output)).suffix.lower() in (".npy", ".csv")):
        raise BertfeatError(f"{opt('engine', 'dask')} writes a Parquet dataset (a directory of part files)",
                            f"drop {opt('format')}/{opt('output')} .npy/.csv, or use {opt('engine', 'local')}")
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise BertfeatError(f"{opt('workers', workers)} is out of range", "give 1 or more")
    if scheduler and workers:
        raise BertfeatError(f"{opt('workers')} starts a local cluster; it cannot be combined with {opt('scheduler')}",
                            f"start the workers with `dask worker SCHEDULER` on each machine, or drop {opt('scheduler')}")
    return DaskSettings(scheduler, workers, parse_blocksize(blocksize))


def check_cache_apart(cache: Path | None, layout: OutputLayout) -> None:
    """The cache directory is none of the run's outputs and not inside its partial directory (removed at the end, and
    the cache with it)."""
    if cache is None:
        return
    c = Path(cache).absolute()
    for label, path in layout.outputs() + [("partial directory", layout.partial)]:
        p = Path(path).absolute()
        if c == p or (label == "partial directory" and p in c.parents):
            raise BertfeatError(f"the cache {cache} is {'inside ' if c != p else ''}the run's {label} {path}",
                                f"give {opt('cache')} a directory of its own, e.g. {opt('cache', 'bertfeat-cache')}")


def check_layout(layout: OutputLayout, reader, input: str, overwrite: bool, resume: bool, pca_model: Path | None = None) -> None:
    """The output rules, before anything is written: the output is not a directory (the Dask engine: not a
    directory bertfeat did not write), no output, side file or the partial directory is an input, an existing
    output needs ``overwrite``, and a partial run left by an interrupt needs ``resume`` (or ``overwrite``)."""
    from .outputs import check_not_input, check_overwrite, partial_run_error

    out = layout.features
    inputs = ([] if input == "-" else list(reader.files)) + ([pca_model] if pca_model is not None else [])
    if layout.engine == "local":
        if out.is_dir():
            from ..checks import directory_output_error

            raise directory_output_error(out, "output", f"features.{layout.fmt}")
        if input != "-" and any(out.resolve() == Path(f).resolve() for f in reader.files):
            raise BertfeatError(f"the output {out} is the input file", f"pass {opt('output')} with another file name")
    else:
        from ..features.reader import DIRECTORY_PROVENANCE

        if out.is_dir() and any(out.iterdir()) and not (out / DIRECTORY_PROVENANCE).is_file():
            raise BertfeatError(f"{out} is a directory that bertfeat did not write", f"choose another {opt('output')} OUTPUT")
        from ..readers import is_url

        if is_url(input):
            inputs = [pca_model] if pca_model is not None else []
    outs = layout.outputs()
    check_name_lengths(outs + [("partial directory", layout.partial)])
    check_not_input(outs + [("partial directory", layout.partial)], inputs)
    partial = layout.partial
    check_partial_is_ours(partial)
    if layout.engine == "local":  # either engine's partial run (a Dask one too: its parts would be deleted)
        from .manifest import PARTIAL_MANIFESTS

        interrupted = partial.is_dir() and any((partial / name).is_file() for name in PARTIAL_MANIFESTS.values())
    else:
        interrupted = partial.is_dir() and any(partial.iterdir())
    if interrupted:
        if resume or overwrite:
            return  # resume continues it (and may rewrite an output its interrupted finish left); overwrite starts over
        raise partial_run_error(partial, stdin=input == "-")
    check_overwrite(outs, overwrite)


def check_partial_is_ours(partial: Path) -> None:
    """OUTPUT.partial is bertfeat's working directory, removed by --overwrite and at the end: a file there, or a
    folder holding anything but a run's manifest, parts and temporaries, is the user's and is never deleted."""
    from .manifest import PARTIAL_MANIFESTS
    from ..errors import OutputError

    if not (partial.exists() or partial.is_symlink()):
        return
    if partial.is_dir() and not partial.is_symlink():
        names = [q.name for q in partial.iterdir()]
        if not names or any(n in PARTIAL_MANIFESTS.values() for n in names) or all(n.startswith(".") for n in names):
            return  # a run's (a killed one's before its manifest: only temporaries)
    raise OutputError(f"{partial} exists and is not a bertfeat partial run (bertfeat works there while it writes "
                      f"{partial.with_name(partial.name[:-len('.partial')])}, and deletes it)",
                      "move or rename it, or write the output under another name")


def check_name_lengths(outputs: list[tuple[str, Path]]) -> None:
    """Every name a run writes, with its temporary form (``.NAME.tmp-PID``), fits the file system's name limit:
    a name too long fails the same way on every rerun, so it is refused before anything is written."""
    for label, path in outputs:
        try:
            limit = os.pathconf(path.parent if str(path.parent) else ".", "PC_NAME_MAX")
        except (OSError, ValueError):
            continue  # no such folder (its own check says so) or no limit known
        longest = len(f".{path.name}.tmp-{os.getpid()}".encode("utf-8", "surrogateescape"))
        if longest > limit:
            raise BertfeatError(f"the {label} name {path.name!r} is too long for its file system ({longest} bytes with "
                                f"its temporary suffix; the limit is {limit})",
                                f"choose a shorter output name with {opt('output')}")
