"""The PCA's model file (bertfeat.pca.estimator): an ``.npz`` without pickle, and the fingerprint it carries.

Owns the format (``MODEL_FORMAT``, ``MODEL_FORMAT_VERSION``), writing it atomically, reading
and checking it (``np.load(allow_pickle=False)``), and comparing the fingerprint of the
features a model was fitted on with another. The file holds float64 arrays (mean,
components, spectrum and, on request, the streaming statistics) plus one JSON string with
the parameters, the scalars, the fingerprint and the source. ``PCA.save`` / ``PCA.load``
turn an estimator into a ``SavedModel`` and back.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import stat
import zipfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_output, remove_stale_temps, uninterrupted
from ..checks import check_model_output, local_path
from .diffs import canonical_json, dict_differences, json_default, naming_keys
from ..errors import BertfeatError, one_line, opt
from ..features.arrayfile import npy_header
from .solvers import Decomposition, kept_by
from .stats import Stats

__all__ = ["MODEL_FORMAT", "MODEL_FORMAT_VERSION", "FILE_PARAM_NAMES", "MODEL_FIX", "SavedModel", "params_to_file",
           "params_from_file", "save_model", "load_model", "not_a_model", "fingerprint_differences",
           "source_differences", "merge_sources", "jsonable_seed"]

MODEL_FORMAT = "bertfeat-pca"
MODEL_FORMAT_VERSION = 1
#: Parameters whose name in the file differs from the PCA keyword: format 1 stores ``accumulate``
#: under its old name ``precision``, so earlier releases (which take the file's parameters as
#: keywords) still load what this one writes. Reading accepts either name.
FILE_PARAM_NAMES = {"accumulate": "precision"}


@dataclass
class SavedModel:
    """What a model file holds, as Python objects."""

    params: dict[str, Any]  # the estimator's keywords (accumulate, not its deprecated name precision)
    decomposition: Decomposition
    n_features: int
    stats: Stats | None = None  # only when saved with include_stats
    fingerprint: dict | None = None
    source: dict | None = None
    feature_names: list[str] | None = None  # feature_names_in_ (a DataFrame's columns at fit), if any
    meta_edited: bool = False  # its metadata is not the one saved with it (check_meta_digest; PCA.load refuses it)


def fingerprint_differences(expected: Mapping | None, actual: Mapping | None) -> list[tuple[str, Any, Any]]:
    """(key, expected value, actual value) for every key whose value differs (missing counts), but a key that only
    names a setting both hold (diffs.NAMES: the prompt's name, its text compared)."""
    a, b = dict(expected or {}), dict(actual or {})
    return dict_differences(a, b, keys=sorted((set(a) | set(b)) - naming_keys(a, b)))


def source_differences(ours: Mapping | None, theirs: Mapping | None, our_name: str = "model",
                       their_name: str = "features") -> tuple[list[tuple[str, Any, Any]], str]:
    """Two fingerprints compared: (the differences as ``fingerprint_differences`` gives them, their text
    ``key: <our_name> value vs <their_name> value; ...``). Nothing to compare, so no difference, when either is
    missing. ``PCA.check_fingerprint`` (features against a model) and ``PCA.merge`` (two PCAs) both use it."""
    if not ours or not theirs:
        return [], ""
    diffs = fingerprint_differences(ours, theirs)
    text = "; ".join(f"{key}: {our_name} {canonical_json(a)} vs {their_name} {canonical_json(b)}"
                     for key, a, b in diffs)
    return diffs, text


def merge_sources(ours: Mapping | None, theirs: Mapping | None, rows: int) -> dict | None:
    """The ``source_`` of a merge of two PCAs: ours (else theirs) with the merged ``rows``; two different
    feature files are both named (``features``: a list, in merge order). None when neither has a source."""
    if not ours and not theirs:
        return None
    merged = dict(ours or theirs) | {"rows": rows}
    if ours and theirs and ours.get("features") != theirs.get("features"):
        named = [f for src in (ours, theirs) for f in _as_list(src.get("features"))]
        merged["features"] = list(dict.fromkeys(named))
    return merged


def _as_list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, list) else [value]


def jsonable_seed(seed: Any) -> Any:
    """random_state as JSON: ints stay, generators are not reproducible from a file (None)."""
    return int(seed) if isinstance(seed, numbers.Integral) else None


def params_to_file(params: Mapping[str, Any]) -> dict[str, Any]:
    """PCA keywords -> the parameters as the file stores them (``FILE_PARAM_NAMES``)."""
    return {FILE_PARAM_NAMES.get(name, name): value for name, value in params.items()}


def params_from_file(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A file's parameters -> PCA keywords; a keyword stored under both names takes its own name's value."""
    params = dict(stored)
    for name, file_name in FILE_PARAM_NAMES.items():
        if file_name in params:
            value = params.pop(file_name)
            params.setdefault(name, value)
    return params


def save_model(path: str | os.PathLike, model: SavedModel, *, overwrite: bool = False) -> Path:
    """Write ``model`` to ``path`` (.npz, no pickle) atomically, creating its folder; returns the path. ``path`` as the
    command line takes it (checks.local_path): a ``~`` no shell expanded or a URL is refused, not made a folder ``~``;
    so is another format's extension, and an existing file unless ``overwrite``."""
    from ..version import __version__

    path = local_path(path, "PCA model", writes=True)
    if path.is_dir():
        raise BertfeatError(f"{path} is a directory, not a model file", f"give the model file's path, e.g. {path / 'pca.npz'}")
    check_model_output(path, "path")  # p.save("reduced.parquet") replaced the file with a .npz archive
    if not overwrite and (path.exists() or path.is_symlink()):
        raise BertfeatError(f"the PCA model {path} exists", f"pass {opt('overwrite', True)} to replace it, or save to "
                            "another path")
    r = model.decomposition
    meta = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "bertfeat_version": __version__,
        "params": params_to_file(model.params | {"random_state": jsonable_seed(model.params.get("random_state"))}),
        "n_samples": r.n_samples,
        "n_features": model.n_features,
        "n_components": r.n_components,
        "noise_variance": r.noise_variance,
        "total_variance": r.total_variance,
        "fit_solver": r.solver,
        "fingerprint": model.fingerprint,
        "source": model.source,
    }
    if model.feature_names is not None:
        meta["feature_names"] = [str(n) for n in model.feature_names]
    arrays = {
        "mean": r.mean,
        "components": r.components,
        "spectrum": r.spectrum,
    }
    if model.stats is not None:
        arrays |= {"stats_shift": model.stats.shift, "stats_sum": model.stats.sum, "stats_sq": model.stats.sq}
        meta["stats_n"] = model.stats.n
    meta["arrays_sha256"] = {name: array_sha256(a) for name, a in arrays.items()}
    meta["meta_sha256"] = meta_sha256(meta)
    arrays["meta"] = np.array(json.dumps(meta, default=json_default, sort_keys=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)  # a killed writer's
    with atomic_output(path) as tmp:
        with uninterrupted(), open(tmp, "wb") as f:  # a few MB: a Ctrl-C acts after it, not in ZipFile's __del__
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
    return path


def array_sha256(a: np.ndarray) -> str:
    """Hex SHA-256 of an array's values as little-endian float64 in C order, and its shape: what a model file records
    of each array it saves (the same numbers stored in another byte order or layout hash the same)."""
    values = np.ascontiguousarray(a, dtype="<f8")
    return hashlib.sha256(repr(values.shape).encode() + values.tobytes()).hexdigest()


def meta_sha256(meta: dict) -> str:
    """Hex SHA-256 of a model file's metadata but this digest itself, as canonical JSON (sorted keys; the values as
    read back, so numbers written and read hash alike)."""
    body = json.loads(json.dumps({k: v for k, v in meta.items() if k != "meta_sha256"}, default=json_default))
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def check_meta_digest(path, model: "SavedModel") -> None:
    """The metadata is the one saved with the file (``meta_sha256``, files since 2026-12-06): ``whiten`` turned on, a
    total or noise variance or a row count changed by hand transformed or reported wrongly without a word. Checked
    last (PCA.load: after the parameters), so that an edit a specific check finds is said by it."""
    if model.meta_edited:
        raise not_a_model(Path(path), "its metadata is not the one saved with it (its sha256 differs from the one it "
                                      "records: the file was edited)", EDITED_MODEL_FIX)


#: The fix of a model whose arrays are not the ones saved with it.
EDITED_MODEL_FIX = ("pass the model file as `bertfeat pca fit`, `bertfeat extract --pca` or PCA.save wrote it (fit it "
                    "again rather than edit it)")


def _check_digests(path: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Each array read is the one saved with the file (``arrays_sha256``, recorded by save_model): an edit that keeps
    every shape and value plausible (two components swapped, a spectrum reversed) would transform and report wrongly
    without a word. A file of an earlier release records none: not checked."""
    recorded = meta.get("arrays_sha256")
    if recorded is None:
        return
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise not_a_model(path, "its arrays_sha256 is not an object of sha256 strings")
    for name, a in arrays.items():
        if name in recorded and recorded[name] != array_sha256(a):
            raise not_a_model(path, f"its {name!r} array is not the one saved with it (its sha256 differs from the one "
                                    "its metadata records: the file was edited)", EDITED_MODEL_FIX)


#: The fix of every "not a bertfeat PCA model" error, and of a damaged (empty, truncated) model file.
MODEL_FIX = "pass a .npz written by `bertfeat pca fit`, `bertfeat extract --pca` or PCA.save"
DAMAGED_MODEL_FIX = "pass a complete model file (rerun the `bertfeat pca fit` or `extract --pca` that wrote it)"


def not_a_model(path: Path, why: str, fix: str = MODEL_FIX) -> BertfeatError:
    """``PATH is not a bertfeat PCA model: why - fix``: the one error of a file that is not a model."""
    return BertfeatError(f"{path} is not a bertfeat PCA model: {why}", fix)


def _not_regular(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "it is a directory"
    if stat.S_ISFIFO(mode):
        return "it is a named pipe (FIFO)"
    return "it is a socket" if stat.S_ISSOCK(mode) else "it is a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
        else "it is not a regular file"


def _check_model_file(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Refuse, before numpy opens it, anything that is not a complete .npz archive: a directory, a FIFO (opening
    one would block), an empty file, a .npy array, a text file (numpy would suggest pickle), a truncated archive, a
    member whose header does not fit its bytes. -> each .npy member's declared (shape, dtype), by array name."""
    try:
        st = os.stat(path)  # another OSError (permission denied, ...) propagates: the CLI names it (errors.os_error)
    except (FileNotFoundError, NotADirectoryError):
        if str(path) == "-":  # (only extract reads standard input)
            raise BertfeatError("a PCA model is read from a file, not standard input ('-')",
                                "pass the model's .npz file (a file named '-': ./-)") from None
        raise BertfeatError(f"PCA model file not found: {path}", "check the path, or fit one with `bertfeat pca fit`") from None
    if not stat.S_ISREG(st.st_mode):
        raise not_a_model(path, _not_regular(st.st_mode))
    if st.st_size == 0:
        raise not_a_model(path, "it is empty (0 bytes)", DAMAGED_MODEL_FIX)
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"\x93NUMPY"):
        raise not_a_model(path, "it is a .npy array file, not a .npz model")
    if not head.startswith(b"PK"):
        raise not_a_model(path, "it is not a .npz archive")
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            bad = z.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise not_a_model(path, f"it is a truncated or corrupt .npz archive ({e})", DAMAGED_MODEL_FIX) from None
    if bad is not None:
        raise not_a_model(path, f"it is a corrupt .npz archive ({bad} fails its checksum)", DAMAGED_MODEL_FIX)
    if "meta.npy" not in names:
        raise not_a_model(path, "it is a .npz without bertfeat's 'meta' entry")
    with zipfile.ZipFile(path) as z:
        return {info.filename[:-4]: _member_header(path, z, info) for info in z.infolist()
                if info.filename.endswith(".npy")}


def _member_header(path: Path, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """One .npy member's declared (shape, dtype), read from its header alone and checked against the bytes the
    archive holds for it: numpy allocates what a header declares before it reads, so a shape the member cannot
    hold (an absurd one, a truncated member) is a damaged file, refused here, not a MemoryError."""
    name = info.filename[:-4]
    try:
        with z.open(info) as fh:
            shape, dtype, start = npy_header(fh)
    except Exception as e:  # numpy's parser of the header's text raises ValueError, SyntaxError, tokenize's TokenError ...
        raise not_a_model(path, f"its {name!r} array is damaged: its header cannot be read ({one_line(e)})",
                          DAMAGED_MODEL_FIX) from None
    if dtype.hasobject:
        raise not_a_model(path, "it holds pickled (object) arrays, which bertfeat never loads")
    declared, held = math.prod(shape) * dtype.itemsize, info.file_size - start
    if declared != held:
        raise not_a_model(path, f"its {name!r} array is damaged: its header declares shape {shape} of {dtype} "
                                f"({declared:,} bytes), but the archive holds {held:,} bytes of it", DAMAGED_MODEL_FIX)
    return shape, dtype


def _check_layout(path: Path, members: dict, k: int, d: int, n: int) -> None:
    """The counts and the arrays' declared shapes and dtypes fit together, before any array is read (a file edited or
    written by something else: a wrong shape would surface later as an unexpected matmul error, a short spectrum as a
    model that transforms but cannot report, an absurd one as a MemoryError); raises not_a_model saying what does not
    fit. ``members``: _check_model_file's (shape, dtype) by name."""
    if not (1 <= k <= d):
        raise not_a_model(path, f"n_components {k} does not fit n_features {d} (1 <= n_components <= n_features)")
    if n < 2:
        raise not_a_model(path, f"n_samples {n} (a fit needs at least 2)")
    need: dict[str, tuple[int, ...] | None] = {"components": (k, d), "mean": (d,), "spectrum": None}
    if "stats_sq" in members:
        need |= {"stats_shift": (d,), "stats_sum": (d,), "stats_sq": (d, d)}
    for name, want in need.items():
        if name not in members:
            raise not_a_model(path, f"{name!r} is missing")
        shape, dtype = members[name]
        if dtype.kind != "f":
            raise not_a_model(path, f"its {name!r} array is not of floats")
        if want is not None and shape != want:
            raise not_a_model(path, f"its {name!r} array has shape {shape} where n_components {k} and n_features {d} "
                                    f"need {want}")
        if want is None and (len(shape) != 1 or shape[0] < k):
            raise not_a_model(path, f"its {name!r} array has shape {shape} where at least ({k},) is needed "
                                    f"(n_components {k})")
        if want is None and shape[0] > d:
            raise not_a_model(path, f"its {name!r} array has shape {shape} where at most ({d},) fit (n_features {d})")


def _check_values(path: Path, r: Decomposition, stats: Stats | None) -> None:
    """The arrays' values are a fit's: finite (a NaN would surface as 'the features overflowed'), variances >= 0 that
    the total covers; raises not_a_model saying what is wrong."""
    def finite(name: str, a: np.ndarray) -> None:
        if not np.isfinite(a).all():
            raise not_a_model(path, f"its {name!r} array holds NaN or inf")

    k = r.n_components
    for name, a in (("components", r.components), ("mean", r.mean), ("spectrum", r.spectrum)):
        finite(name, a)
    # a noise variance below 0 by rounding (total - the top k's, on data of rank k: earlier bertfeat saved
    # randomized fits so) is 0; the 1e-6 of the total, as the check of the components' sum below allows
    rounding = -1e-6 * r.total_variance if np.isfinite(r.total_variance) else 0.0
    if (r.spectrum < 0).any() or not (np.isfinite(r.total_variance) and r.total_variance >= 0) \
            or not (np.isfinite(r.noise_variance) and r.noise_variance >= rounding):
        raise not_a_model(path, "its variances are negative or not finite")
    r.noise_variance = max(r.noise_variance, 0.0)
    if r.spectrum[:k].sum() > r.total_variance * (1 + 1e-6) + 1e-300:
        raise not_a_model(path, f"its total variance {r.total_variance:g} is less than its components' "
                                f"({r.spectrum[:k].sum():g})")
    if stats is not None:
        for name, a in (("stats_shift", stats.shift), ("stats_sum", stats.sum), ("stats_sq", stats.sq)):
            finite(name, a)
        if stats.n < 2:
            raise not_a_model(path, f"stats_n {stats.n} (statistics of at least 2 rows)")


def _read_arrays(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    """The arrays ``names`` of the archive (np.load without pickle); their headers were checked (_check_model_file)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {name: z[name] for name in names}
    except MemoryError:
        raise BertfeatError(f"the PCA model {path} does not fit in this machine's memory ({path.stat().st_size:,} "
                            "bytes)", "load it on a machine with more memory") from None
    except (ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        why = ("it holds pickled (object) arrays, which bertfeat never loads" if "pickle" in str(e).lower()
               else "it cannot be read: " + one_line(e))
        raise not_a_model(path, why) from None


def _read_meta(path: Path) -> dict:
    """The 'meta' entry: bertfeat's format, a version this release reads, with parameters."""
    text = str(_read_arrays(path, ["meta"])["meta"])
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's stack: not bertfeat's
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise not_a_model(path, "its 'meta' entry is not bertfeat's")
    version = meta.get("format_version", 0)
    if not isinstance(version, int):
        raise not_a_model(path, f"format_version {version!r} is not a number")
    if version > MODEL_FORMAT_VERSION:
        raise BertfeatError(
            f"{path} uses model format version {meta['format_version']}, newer than this bertfeat supports ({MODEL_FORMAT_VERSION})",
            "upgrade bertfeat",
        )
    if not isinstance(meta.get("params"), dict):
        raise not_a_model(path, "its metadata has no parameters")
    return meta


def _check_provenance(path: Path, meta: dict) -> None:
    """The solver's name is text, and the fingerprint, the source and the source's reduced_by are JSON objects or
    null: transform, report and the PCA-space check read them as such (an edited file's string or list there was an
    "unexpected TypeError" of theirs)."""
    if not isinstance(meta["fit_solver"], str):
        raise not_a_model(path, f"its fit_solver {meta['fit_solver']!r} is not a solver's name")
    source = meta.get("source")
    objects = {"fingerprint": meta.get("fingerprint"), "source": source}
    if isinstance(source, dict):
        objects |= {"source's reduced_by": source.get("reduced_by")}
    for name, value in objects.items():
        if value is not None and not isinstance(value, dict):
            raise not_a_model(path, f"its {name} is not a JSON object (it is {canonical_json(value)[:40]})")


def _count(path: Path, meta: dict, key: str) -> int:
    """A count of the metadata (n_components, n_features, n_samples, stats_n): a whole number, as save_model writes
    it (int() took 3.7 as 3 and "3" as 3)."""
    if key not in meta:
        raise not_a_model(path, f"{key!r} is missing")
    value = meta[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise not_a_model(path, f"its {key} {canonical_json(value)[:40]} is not a whole number", EDITED_MODEL_FIX)
    return int(value)


def _check_requested(path: Path, spec: Any, r: Decomposition, d: int) -> None:
    """The parameter n_components keeps the components the arrays hold (solvers.kept_by): an edited parameter
    loaded, and get_params and the report's n_components_requested contradicted the model."""
    want = kept_by(spec, r, d)
    if want is not None and want != r.n_components:
        raise not_a_model(path, f"its parameter n_components={canonical_json(spec)} keeps {_components(want)}, but "
                                f"its arrays (and its n_components) hold {r.n_components}", EDITED_MODEL_FIX)


def _components(k: int) -> str:
    return f"{k} component" + ("" if k == 1 else "s")


def _listed(names: list[str]) -> str:
    """Up to three names, then how many more."""
    shown = ", ".join(repr(name) for name in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def load_model(path: str | os.PathLike) -> SavedModel:
    """Read and check a file written by ``save_model`` (``np.load(allow_pickle=False)``).

    Whatever else ``path`` is (missing, a directory, a FIFO, empty, a .npy, another .npz, truncated, an array whose
    header declares a shape its bytes do not hold), one ``BertfeatError``: "not found", or "PATH is not a bertfeat PCA
    model: why - fix"; nothing is opened before the file is known to be a regular file, and no array is read before
    its shape is known to fit the model's counts. A path no local file can have (a ``~`` no shell expanded, a URL) is
    refused as such (checks.local_path)."""
    path = local_path(path, "PCA model")
    members = _check_model_file(path)
    meta = _read_meta(path)
    k, d, n = (_count(path, meta, key) for key in ("n_components", "n_features", "n_samples"))
    stats_n = _count(path, meta, "stats_n") if "stats_sq" in members else None
    try:
        total, noise, solver = float(meta["total_variance"]), float(meta["noise_variance"]), meta["fit_solver"]
    except KeyError as e:
        raise not_a_model(path, f"{e.args[0]!r} is missing") from None
    except (TypeError, ValueError) as e:
        raise not_a_model(path, f"its metadata is malformed: {e}") from None
    _check_layout(path, members, k, d, n)
    arrays = _read_arrays(path, ["mean", "components", "spectrum"] + (["stats_shift", "stats_sum", "stats_sq"]
                                                                     if stats_n is not None else []))
    decomposition = Decomposition(mean=arrays["mean"], components=arrays["components"], spectrum=arrays["spectrum"],
                                  total_variance=total, n_samples=n, n_components=k, noise_variance=noise, solver=solver)
    stats = None if stats_n is None else Stats(stats_n, arrays["stats_shift"], arrays["stats_sum"], arrays["stats_sq"])
    _check_values(path, decomposition, stats)
    _check_digests(path, meta, arrays)
    _check_requested(path, params_from_file(meta["params"]).get("n_components"), decomposition, d)
    names = meta.get("feature_names")
    if names is not None and (not isinstance(names, list) or len(names) != d
                              or not all(isinstance(n, str) for n in names)):
        raise not_a_model(path, f"its feature_names are not {d} strings")
    twice = [name for name, count in Counter(names or []).items() if count > 1]
    if twice:
        raise not_a_model(path, f"its feature_names name {_listed(twice)} more than once (a fit's columns have unique "
                                "names)", EDITED_MODEL_FIX)
    _check_provenance(path, meta)
    edited = "meta_sha256" in meta and meta["meta_sha256"] != meta_sha256(meta)
    return SavedModel(params_from_file(meta["params"]), decomposition, d, stats,
                      meta.get("fingerprint"), meta.get("source"), names, edited)
