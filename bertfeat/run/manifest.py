"""The resume manifest: what a run must share with the interrupted run it resumes (``job_manifest``: version, the
features' fingerprint, model files, GEMM path, input files, the options that shape the output), each engine's name for
it in ``OUTPUT.partial/`` (``PARTIAL_MANIFESTS``), and the one rule and message that refuse a resume whose settings,
input or engine differ (``check_resume``, ``check_resume_engine``, ``manifest_differences``), and the input's identity
taken when the plan opened it compared with its files once the last row is read (``check_input_unchanged``: a file
that grew, changed, was replaced, removed or added while it was read fails the run before anything is published;
``input_record``: the identity --resume compares, as the provenance records it). Both engines (local.py, dask.py) use it; plan.py reads ``PARTIAL_MANIFESTS`` to find a
partial run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..checks import DEFAULT_MAX_FIELD_BYTES
from ..readers.formats import options_read
from ..errors import InputError, ResumeError, one_line, opt
from ..pca.diffs import dict_differences, naming_keys
from ..version import __version__


def job_manifest(plan, fingerprint: dict, encoder, **engine_keys) -> dict:
    """What a run must share with the interrupted run it resumes: version, the features' fingerprint, the model
    folder's other files (tokenizer, config, sentence-transformers modules: cache.store.encoder_files_digest, as the cache
    key has them), the tokenizers library's version (another may split the kept chunks' texts otherwise), the GEMM
    path (cache.store.gemm_identity: a resume on OpenBLAS would round its rows otherwise than the
    interrupted run on oneDNN did), the input files (size, mtime), the options that shape the output; plus each
    engine's own keys."""
    from ..cache.store import encoder_files_digest, gemm_identity
    from ..model.tokenize import library_version

    source = plan.reader
    return {
        "bertfeat_version": __version__, **fingerprint, "model_files": encoder_files_digest(encoder),
        "tokenizers": library_version(), "gemm": gemm_identity(encoder),
        "input": plan.input_identity if plan.input_identity is not None else source.identity(),
        "text_column": source.text_column, "pair_column": plan.options.pair_column, "id_column": plan.options.id_column,
        **dict(zip(("encoding", "delimiter"), options_read(source.fmt, source.encoding, getattr(source, "delimiter", None)))),
        "on_bad_row": plan.on_bad_row,
        "chunk_rows": plan.options.chunk_rows,
        "pca": plan.pca_text, "wide": plan.options.wide,
        **({"pca_model": _file_identity(plan.pca_model)} if plan.pca_model is not None else {}),
        **({"keep": list(plan.keep)} if plan.keep else {}), **({"keep_as": plan.keep_as} if plan.keep_as else {}),
        **({"dtype": plan.dtype} if plan.dtype != "float32" else {}),
        **({"max_field_bytes": plan.max_field_bytes} if plan.max_field_bytes != DEFAULT_MAX_FIELD_BYTES else {}),
        RECORDED_ONLY: plan.cache is not None,
        **engine_keys,
    }


#: a manifest key no resume compares (nor the Dask run key): whether the run had a vector cache, which changes no
#: vector, so that a refused resume's fix says what the cache gives back only when there was one
RECORDED_ONLY = "vector_cache"


def check_resume(old_manifest: dict, manifest: dict) -> None:
    """Refuse to resume a run whose settings or input differ from the interrupted run's (one rule, one message). A
    resume goes on as the interrupted run: ``manifest`` takes its names of the settings (pca.diffs.NAMES: the prompt
    given by its name or by its text, which changes no vector), so the Dask engine's run key is the one its kept
    parts carry."""
    diffs = manifest_differences(old_manifest, manifest)
    if diffs:
        raise ResumeError("cannot resume: the settings or the input differ from the interrupted run (" + "; ".join(diffs) + ")",
                          _resume_fix(old_manifest, manifest))
    for k in naming_keys(old_manifest, manifest):
        if k in old_manifest:
            manifest[k] = old_manifest[k]
        else:
            manifest.pop(k, None)


#: each engine's manifest in OUTPUT.partial/ (local.PartStore, dask.MANIFEST): its name says which
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
    """The interrupted run's manifest file; one that cannot be read (cut short, edited, not JSON) refuses the resume
    naming it (compared as {}, it listed every setting as changed, from None)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"not a manifest bertfeat wrote: {one_line(e, 80)}"
        raise _unreadable(path, why) from None
    if not isinstance(manifest, dict) or not manifest:
        raise _unreadable(path, "not a manifest bertfeat wrote")
    return manifest


def _unreadable(path: Path, why: str) -> ResumeError:
    return ResumeError(f"cannot resume: the interrupted run's manifest {path} cannot be read ({why})",
                       f"rerun with {opt('overwrite', True)} instead of {opt('resume', True)} to start over")


_LABELS = {"bertfeat_version": "bertfeat version", "model_id": "model", "weights_sha256": "model weights sha256",
           "layers": "layers", "layer_agg": "layer aggregation", "normalize": "normalize", "max_length": "max length",
           "long_text": "long text", "stride": "stride", "pooling": "pooling", "text_column": "text column",
           "pair_column": "pair column", "id_column": "id column", "encoding": "encoding", "delimiter": "delimiter", "on_bad_row": "on bad row",
           "chunk_rows": "chunk rows", "pca": "pca", "format": "output format", "wide": "wide", "keep": "kept columns",
           "keep_as": "kept columns' given types", "gemm": "GEMM path", "dtype": "dtype",
           "max_field_bytes": "max field bytes", "truncate_dim": "truncate dim",
           "renormalize": "normalized again after the cut", "layer_norm": "LayerNorm modules",
           "layer_weights": "WeightedLayerPooling weights"}
#: keys a manifest has only when their option is given, compared when either manifest has them (the others: this run's);
#: the fingerprint's truncate_dim, renormalize, layer_norm and layer_weights among them (FeatureSpec.to_dict leaves them
#: out without a cut, a LayerNorm or a WeightedLayerPooling module)
OPTIONAL_KEYS = ("keep", "keep_as", "pca_model", "dtype", "max_field_bytes", "truncate_dim",
                 "renormalize", "layer_norm", "layer_weights")
#: what an optional key stands for when a manifest does not have it (dtype: float32, the default, is not recorded)
OPTIONAL_DEFAULTS = {"dtype": "float32", "max_field_bytes": DEFAULT_MAX_FIELD_BYTES, "renormalize": False}


#: settings a change of which the vector cache spans (docs/cache.md): a row within max length is the same bits under
#: any long-text policy, stride and max length, so a rerun with --overwrite and the interrupted run's cache encodes
#: again only the finished rows longer than max length; a resume cannot keep them (its kept parts hold the old vectors
#: of the long rows, and a Dask part carries its run's key)
CACHE_SPANS = ("long_text", "stride", "max_length")


#: manifest keys recorded as the option's value is given (--chunk-rows 3, --pooling mean): a refusal names them
NAMED_AS_GIVEN = ("chunk_rows", "pooling", "layer_agg", "long_text", "stride", "max_length", "text_column",
                  "pair_column", "encoding", "on_bad_row", "format", "dtype", "truncate_dim", "max_field_bytes")


#: manifest keys that follow from the input's files (the Dask engine's count of partitions): they change with it
FROM_INPUT = ("partitions",)


def _resume_fix(old: dict, new: dict) -> str:
    """How to go on when a resume is refused: start over, or the original settings; when only settings the cache
    spans changed, that the cache makes starting over cost only the long rows (the interrupted run's settings named).
    The cache is named only when the interrupted run had one (an earlier bertfeat's manifest does not say: named)."""
    start_over = f"rerun with {opt('overwrite', True)} instead of {opt('resume', True)} to start over"
    changed = {k for k, _, _ in _differences(old, new)}
    no_cache = old.get(RECORDED_ONLY) is False
    if changed - set(FROM_INPUT) == {"input"} and _same_input(old.get("input"), new.get("input")):  # its files changed: no setting to restore
        if no_cache:
            return f"{start_over} on the input as it is now (every row is encoded again: the interrupted run had no vector cache)"
        return (f"{start_over} on the input as it is now (with the vector cache the interrupted run used, "
                f"{opt('cache', 'DIR')}, the rows it finished that are still in the input are taken from the cache)")
    if not changed or not changed <= set(CACHE_SPANS):
        named = changed - set(FROM_INPUT)
        was = {k: old.get(k, OPTIONAL_DEFAULTS.get(k)) for k in named}  # (dtype float32: not recorded)
        if named and named <= set(NAMED_AS_GIVEN) and None not in was.values():
            given = " ".join(_as_given(k, was[k]) for k in NAMED_AS_GIVEN if k in named)
            return f"{start_over}, or resume with the original settings ({given})"
        return f"{start_over}, or use the original settings"
    lengths = " or ".join(str(n) for n in dict.fromkeys((old.get("max_length"), new.get("max_length"))))
    original = " ".join(opt(k, old[k]) for k in CACHE_SPANS if k in changed and old.get(k) is not None)
    if no_cache:
        return (f"{start_over} (every row is encoded again: the interrupted run had no vector cache), or resume with the "
                f"interrupted run's settings ({original})")
    return (f"{start_over}: with the vector cache the interrupted run used ({opt('cache', 'DIR')}), the rows it finished "
            f"are taken from the cache, all but those longer than max length {lengths}; or resume "
            f"with the interrupted run's settings ({original})")


def _as_given(key: str, value) -> str:
    """A recorded setting as its option is given: ``--text-column 'my text'``, ``text_column='my text'``."""
    import shlex

    return opt(key, value, cli=shlex.quote(str(value)))


def _respelled(a, b) -> bool:
    """The input given by another spelling of its path (./in.csv, its absolute path, from another directory): the
    same local files (their absolute paths), so the same input; the files themselves are still compared."""
    if not (isinstance(a, dict) and isinstance(b, dict)) or a.get("path") == b.get("path"):
        return False
    fa, fb = ({f.get("path") for f in x.get("files") or []} for x in (a, b))
    return bool(fa) and fa == fb and all(os.path.isabs(f) for f in fa)


def _same_input(a, b) -> bool:
    """The same input path (or a respelling of it) and format (its files may differ): a changed file, not another
    input named."""
    return (isinstance(a, dict) and isinstance(b, dict) and a.get("format") == b.get("format")
            and (a.get("path") == b.get("path") or _respelled(a, b)))


def _differences(old: dict, new: dict) -> list[tuple]:
    """(key, old value, new value) of each manifest key that differs (the prompt's name: its text is compared; the
    input's path only when it names other files: _respelled)."""
    if _respelled(old.get("input"), new.get("input")):
        old, new = {**old, "input": {**old["input"], "path": new["input"]["path"]}}, new
    inp = old.get("input")
    if isinstance(inp, dict):  # an earlier bertfeat recorded the options the format ignores (Parquet's --encoding)
        old = {**old, **dict(zip(("encoding", "delimiter"), options_read(inp.get("format"), old.get("encoding"),
                                                                         old.get("delimiter"))))}
    names = naming_keys(old, new)
    keys = [k for k in new if k not in names and k != RECORDED_ONLY] + [k for k in OPTIONAL_KEYS if k in old and k not in new]
    return dict_differences(old, new, keys=keys, missing=None, default=str)


def _said(g: dict, key: str) -> str:
    """A GEMM path's value for a message: absent (no such setting on that path) is 'none', not Python's None."""
    return repr(g[key]) if key in g else "none"


def manifest_differences(old: dict, new: dict) -> list[str]:
    """What differs between the manifest of the interrupted run and this run's, in words."""
    out = []
    for k, a, b in _differences(old, new):
        if k == "input":
            out += _input_differences(a or {}, b or {})
        elif k == "tokenizers":  # a library, not a setting: the fix is the version the interrupted run had
            out.append(f"tokenizers library: {a} -> {b}, which may split texts into other tokens: pip install "
                       f"tokenizers=={a} to resume" if a else
                       f"tokenizers library: not recorded (an earlier bertfeat) -> {b}")
        elif k == "model_files" and not isinstance(a, dict):
            out.append("model files: not recorded by the interrupted run (an earlier bertfeat)")
        elif k == "gemm" and isinstance(a, dict) and isinstance(b, dict):
            cpu = a.get("cpu") != b.get("cpu")
            said = [f"{g.get('library')}" + (f" on {g.get('cpu')}" if cpu else "") for g in (a, b)]
            if said[0] != said[1]:
                out.append(f"GEMM path: {said[0]} -> {said[1]}")
            else:  # the same library: its keys that differ (the kernels, NumPy's BLAS ...), not both dicts whole
                keys = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
                if "kernels" in keys and "attention" in keys:  # the attention's revision follows the kernels
                    keys.remove("attention")
                out.append("GEMM path: " + "; ".join(f"{n} {_said(a, n)} -> {_said(b, n)}" for n in keys))
        elif k == "pca_model" and isinstance(a, dict) and isinstance(b, dict) and a.get("path") == b.get("path"):
            out.append(f"PCA model {a.get('path')} changed since the interrupted run (sha256 {str(a.get('sha256'))[:12]} -> "
                       f"{str(b.get('sha256'))[:12]})")  # refitted: the kept chunks were reduced with the old one
        elif k == "pca_model":
            out.append(f"PCA model: {(a or {}).get('path')!r} -> {(b or {}).get('path')!r}")
        elif k == "keep":  # --label's column is kept too: dropping --label alone changes them
            out.append(f"kept columns ({opt('keep')}, and the {opt('label')} column): {list(a or [])} -> {list(b or [])}")
        elif k == "model_files" and isinstance(b, dict):
            changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            out.append("model files changed since the interrupted run: " + ", ".join(changed))
        else:
            a, b = (OPTIONAL_DEFAULTS.get(k, a) if a is None else a), (OPTIONAL_DEFAULTS.get(k, b) if b is None else b)
            out.append(f"{_LABELS.get(k, k)}: {a!r} -> {b!r}")
    return out


def _input_differences(a: dict, b: dict) -> list[str]:
    if (a.get("path") != b.get("path") and not _respelled(a, b)) or a.get("format") != b.get("format"):
        return [f"input: {a.get('path')!r} -> {b.get('path')!r}"]
    fa = {f["path"]: f for f in a.get("files", []) + a.get("containers", [])}
    fb = {f["path"]: f for f in b.get("files", []) + b.get("containers", [])}
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


def _file_identity(path: Path) -> dict:
    from ..pca.reduce import file_sha256

    return {"path": str(path), "sha256": file_sha256(path)}


def check_input_unchanged(plan) -> None:
    """After the last row is read, before any output is published: the input's files are still those the run started
    on (``plan.input_state``: each file's size, modification time, ctime, inode and device; a URL's size and every
    stamp its store gives) and its path names no other file (a glob or folder that gained one: Reader.listing). A file
    that grew (appended to while it was read: its new rows were not read), was rewritten (its mtime set back or not),
    replaced by a rename, removed or added fails the run with an InputError saying what changed (failures.py: an input
    error, so the partial directory goes). Standard input has no identity: not checked."""
    before = plan.input_state
    if before is None:
        return
    listed = plan.reader.listing()  # first: it drops a store's cached file information
    after = plan.reader.identity(removed_ok=True, within_run=True)
    changes = identity_changes(before, after, listed)
    if changes:
        one = len({f["path"] for f in before.get("files", [])} | set(listed)) == 1  # a file, not a set of them
        raise InputError(f"{plan.reader.name} changed while it was read ({'; '.join(changes)})",
                         f"run the command again once {'the file is' if one else 'its files are'} complete")


def identity_changes(before: dict, after: dict, listed=()) -> list[str]:
    """What differs between two identities of one input (Reader.identity), in words: a size, a modification, a file
    replaced (another inode or device) or changed with its size and mtime kept (its ctime), removed, or among
    ``listed`` (the files its path names now) and not before: added; each named by its path when the input has
    several files."""
    fa = {f["path"]: f for f in before.get("files", []) + before.get("containers", [])}
    fb = {f["path"]: f for f in after.get("files", []) + after.get("containers", [])}
    added = [p for p in listed if p not in fa]
    several = len(fa) + len(added) > 1
    out = []
    for path, x in fa.items():
        y = fb.get(path, {"removed": True})
        said = _file_change(x, y)
        if said:
            out.append(f"{path}: {said}" if several else said)
    return out + [f"{path}: added" for path in added]


def _file_change(x: dict, y: dict) -> str | None:
    """How one file's identity changed (None: not), the most telling difference first."""
    if y.get("removed"):
        return "removed"
    if x.get("size") != y.get("size"):
        if isinstance(x.get("size"), int) and isinstance(y.get("size"), int):
            return f"size {x['size']:,} -> {y['size']:,} bytes"
        return f"size {x.get('size')} -> {y.get('size')}"
    if any(x.get(k) != y.get(k) for k in ("mtime_ns", "stamp", "stamps")):  # a URL's files carry stamps
        return "modified, its size unchanged"
    if (x.get("device"), x.get("inode")) != (y.get("device"), y.get("inode")):  # a rename over it (mv new in)
        moved = "inode" if x.get("device") == y.get("device") else "device"
        return f"replaced by another file ({moved} {x.get(moved)} -> {y.get(moved)}), its size and modification time kept"
    if x.get("ctime_ns") != y.get("ctime_ns"):  # only the kernel sets it: a rewrite whose mtime was set back
        return "rewritten or its attributes changed, its size and modification time kept (its ctime moved)"
    return None


def input_record(identity: dict | None) -> dict | None:
    """The input's identity as the provenance records it (None: standard input): ``files`` (how many), ``size``
    (their bytes), ``mtime_ns`` (the newest file's modification time, nanoseconds since 1970 UTC; a URL's one file
    has the store's ``stamp`` instead), and ``sha256`` of the whole list of files (path, size, time), which a later
    ``Reader.identity()`` of the same files reproduces. A few numbers, however many files a glob names."""
    if identity is None:
        return None
    files = identity.get("files", [])
    record = {"files": len(files), "size": sum(int(f.get("size") or 0) for f in files)}
    mtimes = [f["mtime_ns"] for f in files if isinstance(f.get("mtime_ns"), int)]
    if mtimes:
        record["mtime_ns"] = max(mtimes)
    elif len(files) == 1 and files[0].get("stamp") is not None:
        record["stamp"] = files[0]["stamp"]
    record["sha256"] = hashlib.sha256(json.dumps(files, sort_keys=True, default=str).encode()).hexdigest()
    return record
