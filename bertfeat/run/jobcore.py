"""The parts of an extract job both engines share, past the plan (plan.py): the model and its feature settings,
the resume manifest and its comparison, the run's counts (``ExtractSummary``), the provenance, and the PCA's
statistics, fit and files. The local engine (local_engine.py) and the Dask engine (dask_engine.py) are peers
over these functions.

A unit of work (a local chunk, a Dask partition) yields its part, its counts (chunks.table_counts) and, with
``pca``, its PCA statistics; the job adds the counts with ``ExtractSummary.add`` and merges the statistics
in ``finish_pca``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..pca.diffs import dict_differences
from ..version import __version__
from ..errors import BertfeatError, ResumeError, opt
from ..checks import DEFAULT_MAX_FIELD_BYTES


def job_manifest(plan, fingerprint: dict, encoder, **engine_keys) -> dict:
    """What a run must share with the interrupted run it resumes: version, the features' fingerprint, the model
    folder's other files (tokenizer, config, sentence-transformers modules: vcache.model_files_digest, as the cache
    key has them), the GEMM path (vcache.gemm_identity: a resume on OpenBLAS would round its rows otherwise than the
    interrupted run on oneDNN did), the input files (size, mtime), the options that shape the output; plus each
    engine's own keys."""
    from ..cache.store import gemm_identity, model_files_digest

    source = plan.reader
    return {
        "bertfeat_version": __version__, **fingerprint, "model_files": model_files_digest(encoder.location.path),
        "gemm": gemm_identity(encoder),
        "input": source.identity(),
        "text_column": source.text_column, "pair_column": plan.pair_column, "id_column": plan.id_column,
        "encoding": source.encoding, "delimiter": getattr(source, "delimiter", None), "on_bad_row": plan.on_bad_row,
        "chunk_rows": plan.chunk_rows,
        "pca": plan.pca_text, "wide": plan.wide,
        **({"pca_model": _file_identity(plan.pca_model)} if plan.pca_model is not None else {}),
        **({"encoder_options": plan.encoder_options} if plan.encoder_options else {}),
        **({"keep": list(plan.keep)} if plan.keep else {}), **({"keep_as": plan.keep_as} if plan.keep_as else {}),
        **({"dtype": plan.dtype} if plan.dtype != "float32" else {}),
        **({"max_field_bytes": plan.max_field_bytes} if plan.max_field_bytes != DEFAULT_MAX_FIELD_BYTES else {}),
        **engine_keys,
    }


def check_resume(old_manifest: dict, manifest: dict) -> None:
    """Refuse to resume a run whose settings or input differ from the interrupted run's (one rule, one message)."""
    diffs = manifest_differences(old_manifest, manifest)
    if diffs:
        raise ResumeError("cannot resume: the settings or the input differ from the interrupted run (" + "; ".join(diffs) + ")",
                          f"rerun with {opt('overwrite', True)} instead of {opt('resume', True)} to start over, or use the original settings")


#: each engine's manifest in OUTPUT.partial/ (local_engine.PartStore, dask_engine.MANIFEST): its name says which
#: engine started the partial run (each keeps its own part layout)
PARTIAL_MANIFESTS = {"local": "manifest.json", "dask": "_manifest.json"}


def check_resume_engine(partial: Path, engine: str, resume: bool) -> None:
    """``resume`` of a partial run the other engine started is refused naming it (it was deleted and every row encoded
    again without a word)."""
    if not resume:
        return
    for other, name in PARTIAL_MANIFESTS.items():
        if other != engine and (partial / name).is_file() and not (partial / PARTIAL_MANIFESTS[engine]).is_file():
            raise ResumeError(f"cannot resume: the partial run in {partial} was started by the {other} engine, and this "
                              f"run uses the {engine} engine (each keeps its own parts)",
                              f"rerun with {opt('engine', other)} {opt('resume', True)} to continue it, or with "
                              f"{opt('overwrite', True)} instead of {opt('resume', True)} to start over")


def read_manifest(path: Path) -> dict:
    """A manifest file, or {} when it is unreadable (then every key differs and resuming is refused)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


_LABELS = {"bertfeat_version": "bertfeat version", "model_id": "model", "weights_sha256": "model weights sha256",
           "layers": "layers", "layer_agg": "layer aggregation", "normalize": "normalize", "max_length": "max length",
           "long_text": "long text", "stride": "stride", "pooling": "pooling", "text_column": "text column",
           "pair_column": "pair column", "id_column": "id column", "encoding": "encoding", "delimiter": "delimiter", "on_bad_row": "on bad row",
           "chunk_rows": "chunk rows", "pca": "pca", "format": "output format", "wide": "wide", "keep": "kept columns",
           "keep_as": "kept columns' given types", "gemm": "GEMM path", "dtype": "dtype",
           "max_field_bytes": "max field bytes"}
#: keys a manifest has only when their option is given, compared when either manifest has them (the others: this run's)
OPTIONAL_KEYS = ("keep", "keep_as", "pca_model", "encoder_options", "dtype", "max_field_bytes")
#: what an optional key stands for when a manifest does not have it (dtype: float32, the default, is not recorded)
OPTIONAL_DEFAULTS = {"dtype": "float32", "max_field_bytes": DEFAULT_MAX_FIELD_BYTES}


def manifest_differences(old: dict, new: dict) -> list[str]:
    """What differs between the manifest of the interrupted run and this run's, in words."""
    out = []
    keys = list(new) + [k for k in OPTIONAL_KEYS if k in old and k not in new]
    for k, a, b in dict_differences(old, new, keys=keys, missing=None, default=str):
        if k == "input":
            out += _input_differences(a or {}, b or {})
        elif k == "model_files" and not isinstance(a, dict):
            out.append("model files: not recorded by the interrupted run (an earlier bertfeat)")
        elif k == "gemm" and isinstance(a, dict) and isinstance(b, dict):
            cpu = a.get("cpu") != b.get("cpu")
            said = [f"{g.get('library')}" + (f" on {g.get('cpu')}" if cpu else "") for g in (a, b)]
            out.append(f"GEMM path: {said[0]} -> {said[1]}" if said[0] != said[1] else f"GEMM path: {a} -> {b}")
        elif k == "model_files" and isinstance(b, dict):
            changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            out.append("model files changed since the interrupted run: " + ", ".join(changed))
        else:
            a, b = (OPTIONAL_DEFAULTS.get(k, a) if a is None else a), (OPTIONAL_DEFAULTS.get(k, b) if b is None else b)
            out.append(f"{_LABELS.get(k, k)}: {a!r} -> {b!r}")
    return out


def _input_differences(a: dict, b: dict) -> list[str]:
    if a.get("path") != b.get("path") or a.get("format") != b.get("format"):
        return [f"input: {a.get('path')!r} -> {b.get('path')!r}"]
    fa = {f["path"]: f for f in a.get("files", [])}
    fb = {f["path"]: f for f in b.get("files", [])}
    out = []
    for path in sorted(set(fa) | set(fb)):
        x, y = fa.get(path), fb.get(path)
        if x is None:
            out.append(f"input file added: {path}")
        elif y is None:
            out.append(f"input file removed: {path}")
        elif x["size"] != y["size"]:
            out.append(f"input file changed: {path} (size {x['size']} -> {y['size']} bytes)")
        elif (x.get("mtime_ns"), x.get("stamp")) != (y.get("mtime_ns"), y.get("stamp")):  # a URL's files carry a stamp
            out.append(f"input file changed: {path} (modified since the interrupted run)")
    return out or ["input changed"]


def new_pca(n_components):
    """The streaming PCA a job accumulates (exact: float64 n, sum(x), X^T X), unfitted; ``n_components`` as
    PCA's (the plan's ``pca_n_components``: None keeps every component)."""
    from ..pca.estimator import PCA

    return PCA(n_components=n_components, solver="covariance", accumulate="float64")


_BLAS = None


def accumulate_pca(pca, X: np.ndarray) -> None:
    """Add a unit's features to the job's PCA statistics, with BLAS on one thread: a multi-threaded BLAS call
    between batches leaves OpenBLAS's threads spinning (~0.1 s each time) on the cores the next batch needs
    (measured: 2.4 % slower extract --pca, 12 chunks of 256 rows, 2 cores, before this limit)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    with _BLAS.limit(limits=1, user_api="blas"):
        pca.partial_fit(X)


def _file_identity(path: Path) -> dict:
    from ..pca.reduce import file_sha256

    return {"path": str(path), "sha256": file_sha256(path)}


def applied_pca(plan, fingerprint: dict, dim: int):
    """``pca_model``: the fitted PCA to apply, loaded and checked against this run's features (the same check as
    ``pca transform``: width, then fingerprint) before any row is encoded; None without pca_model."""
    if plan.pca_model is None:
        return None
    from ..pca.estimator import PCA

    pca = PCA.load(plan.pca_model)
    if pca.n_features_in_ != dim:
        raise BertfeatError(f"the PCA model {plan.pca_model} was fitted on {pca.n_features_in_} features per row, these "
                            f"features have {dim}", "apply a PCA fitted on features of the same model, pooling and layers")
    pca.check_fingerprint(fingerprint, fix=f"extract with the settings the model was fitted on, or fit a model on these "
                                           f"features ({opt('pca')} N instead of {opt('pca_model')})")
    return pca


def applied_pca_entry(pca, plan) -> dict:
    """The provenance's "pca" entry of an applied PCA model (its file and sha256; its report is not rewritten)."""
    from ..pca.reduce import pca_metadata_entry

    return pca_metadata_entry(pca, plan.pca_model)


def fit_pca(pca, rows_written: int, layout) -> dict:
    """Fit the accumulated PCA: -> the provenance's "pca" entry (its files: write_pca)."""
    if rows_written < 2:
        raise BertfeatError(f"{opt('pca')} needs at least 2 feature rows, this run has {rows_written}", f"drop {opt('pca')} or add rows")
    pca.finalize()
    return {"n_components": int(pca.n_components_), "model_file": layout.pca_model.name,
            "explained_variance": float(np.sum(pca.explained_variance_ratio_))}


def write_pca(pca, layout, fingerprint: dict, entry: dict) -> dict:
    """A fitted PCA's model and report where the layout says (OUTPUT.pca.npz, OUTPUT.pca.report.{json,md,png}):
    -> outputs name -> path. Inside atomic.together() they appear with the run's other files. The model file's sha256
    goes into ``entry`` (the provenance's "pca" entry), so that verify knows a replaced model from the written one."""
    from ..atomic import pending
    from ..pca.reduce import file_sha256, save_pca_outputs

    outputs = save_pca_outputs(pca, layout.pca_model, layout.pca_prefix, fingerprint, source=fingerprint)
    entry["model_sha256"] = file_sha256(pending(layout.pca_model))
    return outputs


def finish_pca(pca, rows_written: int, layout, fingerprint: dict) -> tuple[dict, dict]:
    """fit_pca, then write_pca: -> (outputs name -> path, the provenance's "pca" entry)."""
    meta = fit_pca(pca, rows_written, layout)
    return write_pca(pca, layout, fingerprint, meta), meta


def probe_into_report(plan, pca, fingerprint: dict, features: Path, progress) -> dict | None:
    """With ``plan.label``: the linear probe of the written features' label column (probe.py), and the PCA report
    written again with it (finish_pca wrote it before the features existed) -> the probe entry, else None.

    The features and the PCA are complete without it, so a label the probe cannot use (one class, an id, ...) does
    not fail the run: the report says why there is no probe (``{"label": ..., "skipped": why}``), and so does a note.
    """
    if plan.label is None or pca is None or plan.pca is None:
        return None
    from ..pca.probe import probe_file
    from ..pca.report import write_pca_report

    try:
        probe = probe_file(pca, features, plan.label)
    except BertfeatError as e:
        probe = {"label": plan.label, "skipped": e.message}
        progress.note(f"no linear probe of {plan.label!r}: {e.message}")
    write_pca_report(pca, plan.layout.pca_prefix, source=fingerprint, probe=probe)
    return probe


# --------------------------------------------------------------------------- the model and what it computes
def load_encoder(plan):
    """The plan's Encoder, from the process's shared cache (encoder_cache.py)."""
    from ..model.encoder_cache import shared_encoder

    return shared_encoder(plan.model, **plan.encoder_kwargs)


def feature_settings(encoder, plan) -> tuple[object, dict]:
    """What needs the loaded model, on both engines: -> (the FeatureSpec, the features' fingerprint)."""
    f = plan.features
    spec = encoder.spec(f.pooling, f.layers, f.layer_agg, f.normalize, f.max_length, f.long_text, f.stride,
                        prompt=f.prompt, prompt_name=f.prompt_name)
    dim = encoder.output_dim(spec)
    if isinstance(plan.pca, int) and plan.pca > dim:
        raise BertfeatError(f"{opt('pca', plan.pca)} is more components than the {dim} feature dimensions",
                            f"choose {opt('pca', dim)} or fewer, or a variance fraction such as 0.95")
    if plan.id_name in ("embedding", "n_tokens", "truncated", "n_chunks"):
        shown = opt("id_column", plan.id_name, cli=f"'{plan.id_name}'")
        raise BertfeatError(f"{shown} clashes with an output column", "rename the id column")
    return spec, encoder.fingerprint(spec)


def make_reuser(encoder, spec, cache_dir: Path | None, spill_dir: Path | None, cache_id: tuple[str, dict] | None = None,
                budget: int | None = None):
    """The run's reuse of vectors (reuse.py): identical rows encoded once, and with ``cache_dir`` the vector cache
    opened under this run's fingerprint (``cache_id``: (fingerprint, settings), computed here when not given).
    ``spill_dir``: where the run's duplicate store spills past its memory ``budget`` (default reuse.DEDUP_MEMORY)."""
    from ..cache.reuse import Reuser

    dim = encoder.output_dim(spec)
    if cache_dir is None:
        return Reuser(dim, spill_dir=spill_dir, budget=budget)
    from ..cache.store import open_cache, register_spec

    store = open_cache(cache_dir)
    try:
        fid = register_spec(store, encoder, spec, cache_id)
    except BaseException:
        store.close()
        raise
    return Reuser(dim, store, fid, spill_dir)


# --------------------------------------------------------------------------- counts and provenance
COUNT_KEYS = ("rows_written", "rows_truncated", "rows_chunked", "tokens", "tokens_dropped")
REUSE_KEYS = ("rows_encoded", "rows_reused", "tokens_encoded")


@dataclass
class ExtractSummary:
    """What a run did: its counts, timing and outputs (name -> path); ``bertfeat.extract`` returns it.
    ``to_dict`` is the JSON of ``extract --summary-json`` (its keys: docs/cli.md)."""

    rows_read: int = 0
    rows_written: int = 0
    rows_rejected: int = 0
    rows_truncated: int = 0
    rows_chunked: int = 0
    rows_multiline: int = 0  # CSV rows whose quoted fields span lines
    tokens: int = 0  # tokens of accepted rows before truncation
    tokens_dropped: int = 0
    rows_encoded: int = 0  # distinct texts that went through the model in this run
    rows_reused: int = 0  # rows whose vector came from the cache or from an identical earlier row of the run
    tokens_encoded: int = 0  # tokens (before truncation) of the rows encoded
    cache: str | None = None  # the vector cache directory (None: no cache)
    cache_repaired: int = 0  # cache entries that failed their checksum: encoded again and rewritten
    elapsed: float = 0.0
    chunks_resumed: int = 0
    rows_resumed: int = 0  # rows written by the chunks kept from an interrupted run (--resume): not this run's work
    tokens_resumed: int = 0
    rows_encoded_resumed: int = 0  # of rows_encoded / tokens_encoded: the kept chunks' (encoded by the interrupted run)
    tokens_encoded_resumed: int = 0
    outputs: dict = field(default_factory=dict)
    dim: int = 0
    pooling: str = ""
    model: str = ""
    engine: str = "local"
    precision: str = ""
    gemm: dict = field(default_factory=dict)  # the GEMM path, as the provenance records it (gemm_record)
    probe: dict | None = None  # with label: the PCA report's linear probe (probe.py)

    def add(self, counts: dict):
        """Add a unit of work's counts (table_counts keys, plus rows_read when given)."""
        for k in ("rows_read", *COUNT_KEYS, *REUSE_KEYS):
            if k in counts:
                setattr(self, k, getattr(self, k) + int(counts[k]))

    def add_resumed(self, counts: dict):
        """A kept chunk's counts (added with ``add`` too): its rows and tokens are left out of this run's throughput."""
        self.rows_resumed += int(counts.get("rows_written", 0))
        self.tokens_resumed += int(counts.get("tokens", 0))
        self.rows_encoded_resumed += int(counts.get("rows_encoded", 0))
        self.tokens_encoded_resumed += int(counts.get("tokens_encoded", 0))

    @property
    def rows_per_s(self) -> float:
        """The encode throughput: rows this run put through the model per second (reused rows and a resumed run's
        kept chunks left out)."""
        return (self.rows_encoded - self.rows_encoded_resumed) / self.elapsed if self.elapsed else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens this run put through the model per second (as ``rows_per_s``)."""
        return (self.tokens_encoded - self.tokens_encoded_resumed) / self.elapsed if self.elapsed else 0.0

    def to_dict(self) -> dict:
        d = {k: v for k, v in vars(self).items()}
        d["outputs"] = {k: str(v) for k, v in self.outputs.items()}
        d["rows_per_s"] = round(self.rows_per_s, 2)
        d["tokens_per_s"] = round(self.tokens_per_s, 2)
        return d


def new_summary(plan, encoder, spec, engine: str, **counts) -> ExtractSummary:
    """An engine's summary before any row: the model, its features and GEMM path, the engine, the cache."""
    return ExtractSummary(pooling=spec.pooling, model=encoder.model_id, dim=encoder.output_dim(spec), engine=engine,
                          precision=encoder.precision, gemm=gemm_record(encoder),
                          cache=None if plan.cache is None else str(plan.cache), **counts)


def gemm_record(encoder) -> dict:
    """The GEMM path in provenance; int8 adds which sequences run in two levels, how many top channels per row are
    taken out of the quantization, how many outlier weight rows stay float32 per kind of layer and which layers'
    inputs are smoothed (quant.py)."""
    d = encoder.gemm_path.to_dict()
    if encoder.precision == "int8":
        from ..ops.quant import SHORT_TOKENS, TOP, float_rows, smoothed_kinds

        d["two_level_sequences"] = f"<= {SHORT_TOKENS} tokens"
        d["top_channels_per_row"] = TOP
        d["float_weight_rows"] = float_rows(encoder.weights)
        d["smoothed_inputs"] = smoothed_kinds(encoder.weights)
    return d


def provenance(encoder, spec, fingerprint: dict, plan, summary: ExtractSummary) -> dict:
    """The metadata every feature file carries: model, weights, settings, GEMM path, input, command, counts."""
    from ..cache.store import model_files_digest

    source = plan.reader
    return {
        "bertfeat_version": __version__,
        "model": encoder.model_id,
        "model_source": encoder.location.source,
        "weights_sha256": encoder.weights_sha256,
        "model_files": model_files_digest(encoder.location.path),  # config, tokenizer, modules: verify compares them
        "fingerprint": fingerprint,
        "precision": encoder.precision,
        "gemm": gemm_record(encoder),
        "pooling": spec.pooling,
        "layers": list(spec.layers),
        "layer_agg": spec.layer_agg,
        "normalize": spec.normalize,
        "dense": list(spec.dense),
        "prompt": spec.prompt,
        "prompt_name": spec.prompt_name,
        "pipeline": encoder.describe(spec),
        "max_length": spec.max_length,
        "long_text": spec.long_text,
        "stride": spec.stride if spec.long_text.startswith("chunk") else None,
        "input": source.path,
        **({"input_abspath": os.path.abspath(source.path)} if source.path != "-" and "://" not in source.path else {}),
        "input_format": source.fmt,
        **({"encoding": source.encoding} if source.fmt != "parquet" else {}),
        **({"delimiter": source.delimiter} if getattr(source, "delimiter", None) else {}),
        "text_column": source.text_column,
        "pair_column": source.pair_column,
        "id_column": source.id_column,
        **({"keep": list(plan.keep)} if plan.keep else {}), **({"keep_as": plan.keep_as} if plan.keep_as else {}),
        "on_bad_row": plan.on_bad_row,
        **({"max_bad_rows": plan.max_bad_rows.text} if plan.max_bad_rows is not None else {}),
        **({"max_field_bytes": plan.max_field_bytes} if plan.max_field_bytes != DEFAULT_MAX_FIELD_BYTES else {}),
        "command": plan.command or " ".join(shlex.quote(a) for a in sys.argv),
        "rows": {"read": summary.rows_read, "written": summary.rows_written, "rejected": summary.rows_rejected,
                 "truncated": summary.rows_truncated, "chunked": summary.rows_chunked,
                 "encoded": summary.rows_encoded, "reused": summary.rows_reused},
        "cache": None if plan.cache is None else str(plan.cache),
        "tokens": {"total": summary.tokens, "dropped": summary.tokens_dropped},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pca": None,
        "dtype": plan.dtype,
    }
