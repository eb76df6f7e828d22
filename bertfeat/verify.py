"""``bertfeat verify``: encode a random sample of a feature file's rows again, one row at a time, and compare.

A feature vector must not depend on the batch it was encoded in (its size, its neighbours, their padding). This
checks it on a written file: each sampled row is read again from the input the provenance names, encoded alone (a
batch of one: no padding, no neighbours) with the model and settings the provenance records (the fingerprint is
rebuilt and must match: model, weights' sha256, precision, pooling, layers, prompt, ...), reduced with the run's
PCA model if the features were reduced, and compared with the vector in the file. It also catches a file that no
longer matches its input or model (edited since, another model version, a damaged file).

Rows of the output are the accepted rows of the input in order, so output row j is found by walking the input
(read and validated as extract does) forward to the row whose number (or id, with ``id_column``) is j's: rows
rejected by the run are passed over. The comparison is per row: the largest absolute difference over the row's
L2 norm, and the cosine.
"""

from __future__ import annotations

from dataclasses import replace

import math
import numbers
import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BertfeatError, opt
from .features.base import damaged_provenance

__all__ = ["DEFAULT_SAMPLE", "TOLERANCE", "verify_features"]

DEFAULT_SAMPLE = 100
#: the largest difference (over the row's norm) a row may show per precision: fp32 rows are batch-independent to
#: float32 rounding (measured 0 to 4e-7); bf16 and int8 GEMM paths round their activations per row as well.
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-3, "int8": 1e-3}
#: the least tolerance of a float16 file: the re-encoded vector is rounded to float16 as the file's was, and a row
#: whose float32 value moved across a rounding boundary differs by one float16 step (2^-10 of |x|, <= its norm)
FLOAT16_TOLERANCE = 1e-3


def _metadata(path: Path) -> tuple[dict, list[Path]]:
    """A feature file's provenance and its files (a Dask output directory: the run's provenance, and its parts)."""
    from .features import feature_files, read_feature_metadata

    return read_feature_metadata(path), feature_files(path)


def _need(meta: dict, path: Path, *keys: str) -> None:
    missing = [k for k in keys if k not in meta]
    if missing:
        raise BertfeatError(f"{path} has no provenance to verify against (missing: {', '.join(missing)})",
                            "verify a feature file written by bertfeat extract (for a .npy, its .json beside it)")


def _input_path(meta: dict, features: Path, given: str | os.PathLike | None) -> str:
    """The input to read again: ``given``, else the provenance's (as the run named it: from the current directory,
    else from the feature file's). A path the run read as a file (``input_glob`` false: report[1].csv) is looked up
    as a file only: moved away, its name as a glob could match a file the run never read (report1.csv)."""
    if given is not None:
        return os.fspath(given)
    import glob

    from .readers import is_pattern

    globbed = meta.get("input_glob", True)  # (a file from before it was recorded: a glob if it names no file)
    name = meta["input"]
    if name == "-":
        raise BertfeatError(f"{features} was extracted from standard input, which cannot be read again",
                            f"pass the input file with {opt('input')}")
    named = [meta.get("input_abspath"), name, features.parent / name, features.parent / Path(name).name]
    for candidate in (os.fspath(c) for c in named if c):
        if Path(candidate).exists() or (globbed and is_pattern(candidate) and glob.glob(candidate)):
            return candidate
    raise BertfeatError(f"the input {name} of {features} is not found (where the run was, from here or beside the "
                        "features)", f"pass it with {opt('input')}")


def _spec_from(fingerprint: dict, path: Path):
    """The feature settings the provenance records (of their types: features.base.check_provenance), as a FeatureSpec."""
    from .model.spec import FeatureSpec

    fields = dict(fingerprint)
    try:
        return FeatureSpec(pooling=fields["pooling"], layers=tuple(fields["layers"]), layer_agg=fields["layer_agg"],
                           normalize=fields["normalize"], max_length=fields["max_length"],
                           long_text=fields.get("long_text", "truncate"), stride=fields.get("stride", 32),
                           dense=tuple(fields.get("dense", ())), prompt=fields.get("prompt"),
                           prompt_name=fields.get("prompt_name"), include_prompt=fields.get("include_prompt", True),
                           truncate_dim=fields.get("truncate_dim"), renormalize=fields.get("renormalize", False),
                           layer_norm=tuple(fields.get("layer_norm", ())),
                           layer_weights=tuple(fields.get("layer_weights", ())),
                           pair_token_types=fields.get("pair_token_types"), token_types=fields.get("token_types"))
    except KeyError as e:
        raise damaged_provenance(path, f"its fingerprint has no {e.args[0]}") from None


def _checked_spec(enc, recorded, path: Path):
    """The recorded settings made again through ``Encoder.spec``, with the checks extract made (a pooling and layers
    the model has, max_length within its positions, a stride that fits, a prompt it names): settings extract could
    not have written with this model are a damaged provenance, refused before a row is encoded."""
    from .pca.diffs import dict_differences

    own = recorded.own_modules or not recorded.include_prompt  # the model's own modules chose pooling and layers
    prompt = {"prompt_name": recorded.prompt_name} if recorded.prompt_name else {"prompt": recorded.prompt or ""}
    try:
        spec = enc.spec(None if own else recorded.pooling, None if own else list(recorded.layers), recorded.layer_agg,
                        recorded.normalize, recorded.max_length, recorded.long_text,
                        recorded.stride if recorded.long_text.startswith("chunk") else None,
                        truncate_dim=recorded.truncate_dim, pairs=recorded.pair_token_types is not None, **prompt)
    except BertfeatError as e:
        raise damaged_provenance(path, f"its fingerprint records settings this model does not take ({e.what})") from None
    if spec.truncate_dim is not None:  # normalized again after the cut or not: as the run was asked (an explicit
        spec = replace(spec, renormalize=recorded.renormalize)  # normalize=True), which the recorded flags cannot tell
    differ = dict_differences(recorded.to_dict(), spec.to_dict())
    if differ:
        said = "; ".join(f"{k}: recorded {a!r}, the model gives {b!r}" for k, a, b in differ[:4])
        raise damaged_provenance(path, f"its fingerprint records settings this model does not give ({said})")
    return spec


def _one_of(path: Path, key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise damaged_provenance(path, f"{key} is {value!r}, not one of {', '.join(choices)}")


def _pca_of(meta: dict, features: Path):
    """The PCA that reduced the features (None: not reduced): extract --pca's model beside the output, or the model
    file extract --pca-model / pca transform applied."""
    entry = meta.get("pca")
    if not entry:
        return None
    from .pca.estimator import PCA

    from .pca.reduce import file_sha256

    names = [entry.get("model_path"), entry.get("model_file")]
    if not any(names):  # reduce_features_file with a PCA made in memory, never saved: no file to look for
        raise BertfeatError(f"the features of {features} were reduced by a PCA whose provenance names no model file "
                            "(a PCA applied in Python without being saved)", "verify the features before the PCA, or "
                            "save the PCA (PCA.save) and reduce the features with the saved model")
    candidates = []
    if entry.get("model_file"):  # extract --pca: the model beside the output, named without a folder
        candidates.append(features.parent / Path(entry["model_file"]).name)
    if entry.get("model_path"):  # extract --pca-model / pca transform: the model's path as given, then beside
        candidates += [Path(entry["model_path"]), features.parent / Path(entry["model_path"]).name]
    for candidate in candidates:
        if candidate.is_file() and (not entry.get("model_sha256") or file_sha256(candidate) == entry["model_sha256"]):
            return PCA.load(candidate)
    sha = f", sha256 {entry['model_sha256'][:12]}" if entry.get("model_sha256") else ""
    fix = "put the model file back beside the features"
    from .atomic import fitted_name

    partial = features.with_name(fitted_name(features.name, len(".partial")) + ".partial")  # (run.plan.OutputLayout's)
    if partial.is_dir():  # a run killed (kill -9) while it moved its files into place: a new model beside old features
        fix = f"an interrupted run left {partial}: run it again with --resume to put all its files in place, or {fix}"
    other = next((c for c in candidates if c.is_file()), None)
    if other is not None:
        raise BertfeatError(f"{other} is not the PCA model that reduced the features of {features} (its sha256 "
                            f"{file_sha256(other)[:12]}, theirs {entry['model_sha256'][:12]})", fix)
    raise BertfeatError(f"the features of {features} were reduced by a PCA model that is not found "
                        f"({' or '.join(filter(None, names))}{sha})", fix)


_END = object()  # the output's rows are all found


def _sample_positions(n: int, sample: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=min(sample, n), replace=False)) if n else np.zeros(0, dtype=np.int64)


def _check_input_format(given: str, meta: dict, features: Path) -> None:
    """``input`` in another format than the one the features were extracted from is refused, saying how verify reads
    it: with the format and columns of the provenance (it has no options to read it otherwise)."""
    from .readers.formats import detect_format

    try:
        fmt = detect_format(given, None)
    except BertfeatError:
        return  # no format in its name, or not a regular file: the reader says what is wrong with it
    if fmt == meta["input_format"]:
        return
    named = (("text", "text_column"), ("pair", "pair_column"), ("id", "id_column"))
    columns = ", ".join(f"{what} column {meta[key]!r}" for what, key in named if meta.get(key))
    raise BertfeatError(f"{opt('input', given)} is {fmt}, but {features} was extracted from {meta['input_format']} "
                        f"({meta['input']})", f"pass the file the features were extracted from (moved or renamed): "
                        f"verify reads it as their provenance says ({meta['input_format']}, {columns})")


def _check_tolerance(tolerance) -> None:
    """None (the precision's default) or a finite difference of 0 or more over a row's norm (0: bit for bit)."""
    if tolerance is None:
        return
    fix = "give a difference over a row's norm of 0 or more, e.g. 1e-5 (default: 1e-5 for fp32, 1e-3 for bf16 and int8 and for a float16 file)"
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise BertfeatError(f"{opt('tolerance', tolerance)} is not a number", fix)
    if not math.isfinite(tolerance) or tolerance < 0:
        raise BertfeatError(f"{opt('tolerance', tolerance, cli=f'{tolerance:g}')} is out of range", fix)


def _default_tolerance(precision: str, dtype: str) -> float:
    """The tolerance of a precision's rows, at least FLOAT16_TOLERANCE in a float16 file."""
    tol = TOLERANCE.get(precision, 1e-3)
    return max(tol, FLOAT16_TOLERANCE) if dtype == "float16" else tol


def verify_features(features: str | os.PathLike, *, input: str | os.PathLike | None = None,
                    model: str | os.PathLike | None = None, sample: int = DEFAULT_SAMPLE, seed: int = 0,
                    tolerance: float | None = None, encoding: str | None = None, progress=None) -> dict:
    """Encode ``sample`` random rows of ``features`` again one at a time and compare (see the module docstring).

    ``input`` / ``model`` / ``encoding``: where the provenance's do not apply (a moved input, a model in another
    folder, a CSV read with --encoding before bertfeat recorded it). Returns the report: rows checked, the largest
    difference (and its row), the smallest cosine, the tolerance, ``dtype`` (the file's: a float16 file's rows are
    compared with the re-encoded vector rounded to float16) and ``ok``.
    """
    from .features import open_features

    path = _check_options(features, input, sample, seed, tolerance)
    meta, files = _read_provenance(path, input)
    enc, spec, pca = _rebuild_settings(meta, path, model)
    sources = [open_features(f) for f in files]
    _check_width(sources[0].dim, enc.output_dim(spec) if pca is None else pca.n_components_, path, meta)
    _check_columns(sources)
    dtype = sources[0].dtype  # float16: the re-encoded vectors are rounded as the file's were
    # a PCA's reduction of a float16 file: its input was rounded (and so is the re-encoded vector), one float16 step
    # there is ~1.5e-5 of a reduced row: the float16 tolerance, as for the file it was reduced from
    rounded = "float16" if (meta.get("pca") or {}).get("input_dtype") == "float16" else dtype
    tol = _default_tolerance(enc.precision, rounded) if tolerance is None else float(tolerance)
    n = _count_rows(sources, meta, path)
    picked = set(_sample_positions(n, sample, seed).tolist())
    wanted: dict[int, tuple[Any, np.ndarray]] = {}  # output position -> (id or row number, stored vector)
    reader = _open_source(meta, path, input, encoding)
    outputs = _Counted(_output_rows(sources, picked, wanted))
    try:
        texts = _walk_input(reader, outputs, picked, meta, enc, spec, path)
    except BertfeatError:  # a file that lost or gained rows is said to have, not its input to have changed
        if outputs.drain():
            _check_count(outputs.n, n, meta, path)
        raise
    _check_count(outputs.n, n, meta, path)
    rows = _encode_sample(wanted, texts, enc, spec, pca, meta, dtype, progress)
    return {**_report(path, reader, enc, pca, dtype, outputs.n, rows, tol, seed), "path_changes": _path_changes(meta, enc)}


def _path_changes(meta: dict, enc) -> list[str]:
    """What of the numeric path (cache.store.gemm_identity: what changes a vector's rounding) differs between the
    extraction (the provenance's ``gemm``) and this re-encoding, where both record it: "kernels 'numba 0.68.1' ->
    'numpy'". A DIFFERENT verdict then says that, not that the input, the model or the file changed."""
    from .cache.store import gemm_identity

    then = meta.get("gemm")
    if not isinstance(then, dict):
        return []
    return [f"{k} {then[k]!r} -> {v!r}" for k, v in gemm_identity(enc).items()
            if then.get(k) is not None and then[k] != v]


def _check_options(features, input, sample, seed, tolerance) -> Path:
    """verify's own options: a local feature file, ``sample`` 1 or more, a tolerance, a non-empty ``input``, ``seed`` 0
    or more -> the feature file's path."""
    from .checks import local_path

    path = local_path(features, "feature file")
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise BertfeatError(f"{opt('sample', sample)} is out of range", "give 1 or more rows")
    _check_tolerance(tolerance)
    if isinstance(input, str) and not input:
        raise BertfeatError(f"{opt('input', '', cli=repr(''))} is empty", "pass the input the features were extracted "
                            f"from, or leave {opt('input')} out for the one their provenance names")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise BertfeatError(f"{opt('seed', seed)} is out of range", "give 0 or more")
    return path


def _read_provenance(path: Path, input) -> tuple[dict, list[Path]]:
    """The feature file's provenance and files, with what verify needs of it, and a given ``input`` in its format."""
    meta, files = _metadata(path)
    _need(meta, path, "fingerprint", "input", "input_format", "text_column", "model")
    if input is not None:
        _check_input_format(os.fspath(input), meta, path)
    return meta, files


def _rebuild_settings(meta: dict, path: Path, model) -> tuple:
    """The model and feature settings the provenance records, loaded and checked against its fingerprint and model
    files -> (the Encoder, the FeatureSpec, the PCA that reduced the features or None)."""
    from .pca.diffs import dict_differences
    from .ops.gemm import PRECISIONS
    from .readers.formats import FORMATS

    fp = meta["fingerprint"]
    precision = fp.get("precision", meta.get("precision", "fp32"))
    _one_of(path, "fingerprint.precision" if "precision" in fp else "precision", precision, PRECISIONS)
    _one_of(path, "input_format", meta["input_format"], FORMATS)
    enc = _load_model(meta, path, model, precision)
    spec = _spec_from(fp, path)
    # the weights' sha256 names the model: the same files elsewhere (another model_id, a local path) are the same model
    diffs = [d for d in dict_differences(fp, enc.fingerprint(spec)) if d[0] != "model_id"]
    if diffs:
        said = "; ".join(f"{k}: file {a!r} vs now {b!r}" for k, a, b in diffs[:4])
        raise BertfeatError(f"the model or settings differ from the ones {path} was extracted with ({said})",
                            f"pass {opt('model')} with the model the features came from")
    _check_model_files(meta, enc, path)
    spec = _checked_spec(enc, spec, path)
    pca = _pca_of(meta, path)
    if pca is not None and pca.n_features_in_ != enc.output_dim(spec):
        raise BertfeatError(f"{path} was reduced by a PCA of {pca.n_features_in_} inputs, but the model gives "
                            f"{enc.output_dim(spec)} features: it was reduced more than once (a pca transform of reduced "
                            "features), and only the last PCA is recorded", "verify the features before the later PCA")
    if pca is not None and (pca.source_ or {}).get("reduced_by"):  # widths agree when the first PCA kept them all
        raise BertfeatError(f"{path} was reduced by a PCA fitted on features a PCA had reduced before: it was reduced "
                            "more than once (a pca transform of reduced features), and only the last PCA is recorded",
                            "verify the features before the later PCA")
    return enc, spec, pca


def _load_model(meta: dict, path: Path, model, precision: str):
    """The Encoder of ``model`` (given: model="" refused, not passed over), else of the model the provenance names: not
    found there (a folder moved since), the fix is verify's ``model``, not the path the user never gave."""
    from .errors import ModelNotFoundError
    from .model.encoder import Encoder

    if model is not None:
        return Encoder(model, precision=precision)
    try:
        return Encoder(meta["model"], precision=precision)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"the model {path} was extracted with is not found ({e.what})",
                                 f"pass {opt('model')} with where it is now (its weights' sha256 must match)") from None


def _check_width(dim: int, settings_dim: int, path: Path, meta: dict) -> None:
    """The file's features are as wide as its provenance records them written (feature columns dropped from a CSV)
    and as the settings it records make them (an edited truncate_dim or pooling would compare vectors of two
    widths)."""
    written = (meta.get("layout") or {}).get("dim")
    if isinstance(written, int) and not isinstance(written, bool) and written == settings_dim != dim:
        raise BertfeatError(f"{path} has {dim} features a row, but its provenance says {written} were written: "
                            f"feature columns were {'dropped' if dim < written else 'added'} since",
                            "verify the file as extract wrote it, or extract the features again")
    if dim != settings_dim:
        raise damaged_provenance(path, f"its features are {dim} wide, but the settings it records give {settings_dim}")


def _recorded_rows(meta: dict) -> dict:
    """The provenance's row counts (written, rejected), {} where it has none."""
    return meta.get("rows") if isinstance(meta.get("rows"), dict) else {}


def _count_rows(sources: list, meta: dict, path: Path) -> int:
    """The feature file's rows (counted where its layout does not say), which must be the rows its run wrote. A CSV's
    count is its provenance's (the file says none): the walk counts its rows (``_check_count``)."""
    counts = [s.rows for s in sources]  # from the files' layouts; None: count them
    n = sum(counts) if None not in counts else sum(len(ids) for s in sources for ids, _, _ in s.batches(check_layout=False))
    _check_count(n, n, meta, path)
    return n


def _check_count(n: int, expected: int, meta: dict, path: Path) -> None:
    """``n`` rows read from the file: the rows its provenance says were written (else ``expected``, the count it
    was sampled by), or the file lost or gained rows since."""
    written = _recorded_rows(meta).get("written")
    written = expected if written is None else written
    if n != written:
        how = "lost since (a part file removed, the file edited)" if n < written else \
            "added since (the file edited, a part file added)"
        raise BertfeatError(f"{path} has {n} rows, but its provenance says {written} were written: rows were {how}",
                            "extract the features again")


class _Counted:
    """The output rows' ids as the walk reads them (``_output_rows``), counted; ``drain`` reads the rest."""

    def __init__(self, rows):
        self._rows, self.n, self.broken = rows, 0, False

    def __iter__(self):
        return self

    def __next__(self):
        try:
            ident = next(self._rows)
        except StopIteration:
            raise
        except BaseException:  # the file cannot be read on (its error is the walk's): no count
            self.broken = True
            raise
        self.n += 1
        return ident

    def drain(self) -> bool:
        """Count the rows not read yet (the walk stopped early) -> False if the file cannot be read to its end."""
        try:
            for _ in self:
                pass
        except BertfeatError:  # the walk's own error says what is wrong
            pass
        return not self.broken


def _check_columns(sources: list) -> None:
    """Each file's id and extra columns are the ones its run wrote (its layout): a renamed id column (or a .npy's
    missing ids file) read row numbers as ids, and the walk then named a row 'not in the input', blaming the input;
    a renamed or removed extra column (n_tokens, a kept label) passed unseen."""
    from .features import ids_sidecar_path

    for s in sources:
        layout = s.meta.get("layout")
        if not isinstance(layout, dict) or not isinstance(layout.get("extra_columns"), dict):
            continue  # a file from before bertfeat recorded its columns
        if s.fmt == "npy" and not ids_sidecar_path(s.path).is_file():
            raise BertfeatError(f"{s.path}'s ids file {ids_sidecar_path(s.path)} is missing (its ids and columns "
                                f"{', '.join(_wrote(layout))})", "put it back beside the .npy file, or extract the "
                                "features again")
        wrote, has = _wrote(layout), ([s.id_name] if s.id_name else []) + list(s.extra_columns)
        problems = [f"{'id column ' if c == layout.get('id_column') else ''}{c!r} missing" for c in wrote if c not in has]
        problems += [f"{c!r} added" for c in has if c not in wrote]
        if problems:
            where = ids_sidecar_path(s.path) if s.fmt == "npy" else s.path
            raise BertfeatError(f"the columns of {where} are not the ones its provenance records ({'; '.join(problems)})",
                                COLUMNS_FIX)


COLUMNS_FIX = "restore the file and its provenance as bertfeat extract wrote them, or extract the features again"


def _wrote(layout: dict) -> list[str]:
    """The id and extra columns a feature file's run wrote, as its layout records them."""
    return ([layout["id_column"]] if layout.get("id_column") else []) + list(layout["extra_columns"])


def _output_rows(sources: list, picked: set, wanted: dict):
    """Every output row's id (or row number), in order; the sampled rows' vectors kept in ``wanted`` (memory: the
    sample's)."""
    pos = 0
    for s in sources:
        for ids, X, _ in s.batches(check_layout=False):  # (_check_count says a count that differs)
            ids = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
            for k, ident in enumerate(ids):
                if pos in picked:
                    wanted[pos] = (ident, X[k].copy())
                yield ident
                pos += 1


def _codec(name: str) -> str | None:
    """An encoding's codec name (latin-1 and iso-8859-1 are one), or None where Python knows none. An encoding read
    otherwise than recorded made every changed text 'the input's' change."""
    import codecs

    try:
        return codecs.lookup(name).name
    except (LookupError, TypeError):
        return None


def _open_source(meta: dict, path: Path, input, encoding):
    """The input the features were extracted from, opened as the provenance says (``input`` / ``encoding`` where
    given)."""
    from .readers import DEFAULT_MAX_FIELD_BYTES, open_input
    from .readers.formats import detect_format, options_read

    _check_recorded_reading(meta, path)
    source = _input_path(meta, path, input)
    # a run before the readers refused the options a format ignores recorded them: read as that run read
    recorded, delimiter = options_read(detect_format(source, meta["input_format"]), meta.get("encoding"),
                                       meta.get("delimiter"))
    if encoding is None:  # encoding="" is refused by the reader, not passed over
        encoding = recorded or "utf-8"
    elif recorded and _codec(encoding) and _codec(encoding) != _codec(recorded):  # (unknown: the reader says so)
        raise BertfeatError(f"{path} records the encoding its input was read with, {recorded}, not {encoding}",
                            f"leave {opt('encoding')} out (it is for files whose provenance does not record one)")
    try:
        return open_input(source, meta["input_format"], meta["text_column"],
                          meta.get("pair_column"), meta.get("id_column"), encoding,
                          delimiter=delimiter, keep=tuple(meta.get("keep") or ()),
                          keep_as=meta.get("keep_as"),  # its bad kept values too
                          max_field_bytes=meta.get("max_field_bytes") or DEFAULT_MAX_FIELD_BYTES,
                          id_as_text=bool(meta.get("id_as_text")))
    except BertfeatError as e:  # the recorded delimiter does not split the input's header: verify has no such option
        if not e.names("delimiter"):
            raise
        raise e.refixed(f"; that delimiter is the one the provenance of {path} records",
                        "the input is not the file the features were extracted from, or their provenance was edited: "
                        "extract the features again") from None


def _check_recorded_reading(meta: dict, path: Path) -> None:
    """The recorded delimiter and encoding are ones the readers take: a value they refuse was not written by
    bertfeat (the reader's refusal named options verify does not have: 'pass --encoding utf-8')."""
    from .errors import InputError
    from .readers import normalize_encoding
    from .readers.csvcheck import parse_delimiter

    for key, check in (("delimiter", parse_delimiter), ("encoding", normalize_encoding)):
        if meta.get(key) is not None:
            try:
                check(meta[key])
            except InputError:
                raise damaged_provenance(path, f"{key} is {meta[key]!r}, which no reader takes") from None


def _walk_input(reader, outputs, picked: set, meta: dict, enc, spec, path: Path) -> dict[int, tuple[str, str | None]]:
    """The input walked alongside the output's rows (``outputs``) -> the sampled rows' (text, pair) by output position.
    Every output row must be found in its place, and the input rows passed over must be as many as the run rejected."""
    from .run.chunks import prepare_rows, validate_batch

    by_id = meta.get("id_column") is not None
    texts: dict[int, tuple[str, str | None]] = {}  # output position -> (text, pair) of its input row
    j, current = 0, next(outputs, _END)  # the output row the input walk looks for, and its position
    # The input rows not in the output: the run's rejects (bad rows, too-long under long_text='error', a kept value of
    # the wrong type), or rows the input gained since. The whole input is read, so that rows added at its end count.
    skipped, first_skipped = 0, None
    what = "id" if by_id else "row"
    for b in reader.batches():
        chunk = validate_batch(b, 0)
        skipped += len(chunk.rejects)
        keys = chunk.ids if by_id else chunk.rows
        # rows the run's Encoder refused (too long under long_text='error', a token past the embedding table, no token)
        over = set(prepare_rows(enc, spec, chunk.texts, chunk.pairs)[2]) if enc.refuses_rows(spec) else set()
        for k, key in enumerate(keys):
            if current is not _END and k not in over and _same(key, current):
                if j in picked:
                    texts[j] = (chunk.texts[k], None if chunk.pairs is None else chunk.pairs[k])
                j, current = j + 1, next(outputs, _END)
                continue
            skipped += 1
            if first_skipped is None and k not in over:
                first_skipped = f"row {chunk.rows[k]}" + (f" (id {key!r})" if by_id else "")
    if current is not _END:
        where = f"{path}'s row {j} ({what} {current!r}) is not in the input {reader.name} in its place"
        if _input_unchanged(reader, meta):  # then the feature file is what changed: --input cannot help
            raise BertfeatError(f"{where}, which is the input the features were extracted from (its files, sizes and "
                                f"times as recorded): {path}'s rows were reordered, repeated or edited since",
                                "extract the features again (a feature file holds the input's rows in their order)")
        raise BertfeatError(where, f"verify against the input the features were extracted from ({opt('input')})")
    recorded = _recorded_rows(meta)
    fix = f"extract the features again, or verify against the input they were extracted from ({opt('input')})"
    if recorded.get("rejected") is not None and skipped != recorded["rejected"]:
        first = f" (the first not rejected as a bad row here: {first_skipped})" if first_skipped else ""
        raise BertfeatError(f"{skipped} rows of the input {reader.name} are not in {path}, but the run rejected "
                            f"{recorded['rejected']}{first}: the input changed since the features were extracted", fix)
    if first_skipped is not None:  # no bad row now: mended since (as many passed over as rejected), or added
        how = "a row the run rejected mended since" if recorded.get("rejected") is not None else "a row added or mended since"
        raise BertfeatError(f"{first_skipped} of the input {reader.name} is not in {path}, and it is not a bad row: the "
                            f"input changed since the features were extracted ({how})", fix)
    return texts


def _input_unchanged(reader, meta: dict) -> bool:
    """Is the input the one the provenance records (the sha256 of its files' paths, sizes and times)? False when it
    records none (standard input, an earlier release) or the files cannot be listed now."""
    from .run.manifest import input_record

    recorded = meta.get("input_identity")
    if not isinstance(recorded, dict) or not recorded.get("sha256"):
        return False
    try:
        return input_record(reader.identity()).get("sha256") == recorded["sha256"]
    except (OSError, ValueError):
        return False


def _encode_sample(wanted: dict, texts: dict, enc, spec, pca, meta: dict, dtype: str, progress) -> list[dict]:
    """Each sampled row encoded alone and compared with the vector in the file -> one comparison per row."""
    rows = []
    for done, (p, (ident, stored)) in enumerate(sorted(wanted.items())):
        text, pair = texts[p]
        vec = _encode_alone(enc, spec, text, pair, pca, meta, dtype)
        rows.append(_compare(p, ident, vec, stored))
        if progress is not None:
            progress(done + 1, len(wanted))
    return rows


def _encode_alone(enc, spec, text: str, pair: str | None, pca, meta: dict, dtype: str) -> np.ndarray:
    """One row encoded in a batch of one, reduced and rounded as the file's rows were -> (1, D)."""
    prep = enc.prepare([text], None if pair is None else [pair], spec)
    vec = enc.run(prep, spec)  # (1, D): a batch of one
    if pca is not None:
        if meta["pca"].get("input_dtype") == "float16":  # pca transform of a float16 file: its input was rounded
            vec = vec.astype(np.float16).astype(np.float32)
        vec = pca.transform_rows(vec).astype(np.float32)
    if dtype == "float16":
        vec = vec.astype(np.float16).astype(np.float32)
    return vec


def _compare(p: int, ident, vec: np.ndarray, stored: np.ndarray) -> dict:
    """A re-encoded row (``vec``: (1, D)) against the stored one: the largest difference, over the stored row's norm,
    and the cosine. A row holding NaN or an infinity differs infinitely (NaN compares as no difference)."""
    got = vec[0].astype(np.float64)
    ref = stored.astype(np.float64)
    if not (np.isfinite(got).all() and np.isfinite(ref).all()):
        return {"position": p, "id": ident, "max_abs_diff": math.inf, "relative": math.inf, "cosine": math.nan,
                "identical": False, "finite": False}
    norm = max(float(np.linalg.norm(ref)), 1e-30)
    diff = float(np.max(np.abs(got - ref))) if len(ref) else 0.0
    cos = float(got @ ref / (max(float(np.linalg.norm(got)), 1e-30) * norm))
    return {"position": p, "id": ident, "max_abs_diff": diff, "relative": diff / norm, "cosine": cos,
            "identical": bool(np.array_equal(vec[0], stored)), "finite": True}


def _report(path: Path, reader, enc, pca, dtype: str, n: int, rows: list[dict], tol: float, seed: int) -> dict:
    """verify's report (``verify_features``' return value) from the rows compared."""
    worst = max(rows, key=lambda r: r["relative"]) if rows else None
    return {
        "features": str(path),
        "input": reader.name,
        "model": enc.model_id,
        "precision": enc.precision,
        "reduced": pca is not None,
        "dtype": dtype,
        "rows_in_file": n,
        "rows_checked": len(rows),
        "rows_identical": sum(r["identical"] for r in rows),
        "max_abs_diff": max((r["max_abs_diff"] for r in rows), default=0.0),
        "max_relative_diff": worst["relative"] if worst else 0.0,
        "min_cosine": min((r["cosine"] for r in rows), default=1.0) if all(r["finite"] for r in rows) else math.nan,
        "worst": worst,
        "tolerance": tol,
        "ok": all(r["relative"] <= tol for r in rows),
        "seed": seed,
        "rows": rows,
    }


def _check_model_files(meta: dict, enc, path: Path) -> None:
    """The model folder's other files (config, tokenizer, sentence-transformers modules: model.hub.model_files) are the
    ones the features were extracted with, where the provenance records them (bertfeat >= 0.3): an edited
    1_Pooling/config.json changes the model's own embedding while the weights and the recorded settings still match."""
    from .model.hub import model_files_digest

    then = meta.get("model_files")
    if not isinstance(then, dict):
        return
    now = model_files_digest(enc.location.path)
    changed = [f"{f} changed" for f in sorted(set(then) & set(now)) if then[f] != now[f]]
    # a file recorded then that loading does not read, still in the folder (earlier versions recorded every file of a
    # module folder, and a vocab.txt beside tokenizer.json), changes nothing; one that is gone was read then
    changed += [f"{f} added" for f in sorted(set(now) - set(then))] + [
        f"{f} missing" for f in sorted(set(then) - set(now)) if not (enc.location.path / f).exists()]
    if changed:
        raise BertfeatError(f"the model's files differ from the ones {path} was extracted with "
                            f"({', '.join(changed[:4])}{', ...' if len(changed) > 4 else ''}; in {enc.location.path})",
                            f"extract the features again with this model, or pass {opt('model')} with the model they "
                            "came from")


def _same(key, ident) -> bool:
    """An input row's number or id against an output row's (ids read back may be another int / str type)."""
    if isinstance(key, (bytes, bytearray)) and not isinstance(ident, (bytes, bytearray)):
        try:
            key = bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            return False
    return key == ident or str(key) == str(ident)
