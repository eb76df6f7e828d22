"""``bertfeat sweep``: several layer x pooling feature sets of one input's rows from one pass through the model,
compared side by side, so that the ``extract`` options are chosen on evidence.

Shapes: n rows, d a set's features, k components, c classes.

Which hidden layer and pooling give the best features for a task is an empirical question (BERT-as-service answered
it with the second-to-last layer; the model's own sentence embedding often wins). A sweep reads a uniform sample of
``sample`` of the input's rows (drawn with ``seed`` as the file streams), runs the model once keeping every layer any
set reads, pools each set from those states (``Encoder.run_sets``) and reports per set: its ``bertfeat extract``
options, its width, how many principal components hold 80 / 90 / 95 / 99 % of its variance (with Minka's MLE and the
broken stick: report.py), and, with ``label``, the cross-validated accuracy of a ridge classifier on all d features
and on the first k principal components (probe.py: scikit-learn's RidgeClassifier on stratified folds). The PCA of a
set is fitted on the whole sample (it sees no label); the probe's folds are the same for every set.

A set is ``own`` (the model's own sentence embedding: its Pooling and the modules after it, and its
truncate_dim) or ``POOLING[@LAYERS[@AGG]]``: ``mean``, ``cls@-2``, ``mean@-4:`` (the last four layers averaged),
``mean@-4:@concat``, ``mean+max@-1``, ``pooled``; POOLING, LAYERS and AGG as ``extract --pooling / --layers /
--layer-agg`` take them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import BertfeatError, opt, opt_word

__all__ = ["DEFAULT_SETS", "DEFAULT_SAMPLE", "DEFAULT_N_COMPONENTS", "SWEEP_OPTIONS", "FeatureSet", "parse_sets",
           "sweep", "default_prefix", "sweep_paths", "write_sweep_report", "render_markdown", "rows_said", "pcs_said"]

#: the sets a sweep compares by default; one the model cannot give (no pooler, too few layers) is listed as skipped
DEFAULT_SETS = ("own", "mean", "cls", "max", "pooled", "mean@-2", "mean@-4:", "mean@-4:@concat", "mean@1,-1")
DEFAULT_SAMPLE = 5_000
DEFAULT_N_COMPONENTS = 64
REPORT_KIND = "bertfeat-sweep"


@dataclass(frozen=True)
class FeatureSet:
    name: str  # as given: own, cls@-2, ...
    spec: object  # spec.FeatureSpec
    options: str  # the `bertfeat extract` options that give these features ("" for the model's own embedding)


def _set_options(pooling: str | None, layers: str | None, agg: str, normalize: bool, own: bool, shared: str = "") -> str:
    """The ``bertfeat extract`` options that give a set's features: its own, then ``shared`` (every set's)."""
    parts = [] if own else [f"--pooling {pooling}"]
    if layers is not None:
        parts.append(f"--layers {layers}")
    if agg != "mean":
        parts.append(f"--layer-agg {agg}")
    if normalize != own:  # own: the model's Normalize module decides; a chosen pooling: not normalized unless asked
        parts.append("--normalize" if normalize else "--no-normalize")
    return " ".join(parts + ([shared] if shared else []))


#: the sweep's options that shape every set's features, given to extract too (its columns and its settings)
SHARED_FEATURE_OPTIONS = ("model", "text_column", "pair_column", "precision", "max_length", "long_text", "stride",
                          "prompt", "prompt_name")


def shared_options(o) -> str:
    """The options of a sweep's ``o`` (an ExtractOptions) every set's extract command needs: those given otherwise than
    extract's defaults (a set's command without --max-length 8 or --prompt gave other features)."""
    import shlex

    from .run.options import OPTIONS

    parts = []
    for name in SHARED_FEATURE_OPTIONS:
        value = getattr(o, name)
        if value is not None and value != OPTIONS[name].default:
            parts.append(f"--{name.replace('_', '-')} {shlex.quote(str(value))}")
    return " ".join(parts)


def set_parts(name: str) -> tuple[str | None, str | None, str]:
    """A set's name -> (pooling, layers, layer_agg) as Encoder.spec takes them (own: None, None, mean)."""
    parts = name.split("@")
    own = name == "own"
    if parts[0].strip() == "own" and not own:  # read as POOLING own, it was said an unknown --pooling
        raise BertfeatError(f"feature set {name!r}: own (the model's own embedding) takes no @LAYERS",
                            "give own, or POOLING@LAYERS such as mean@-2")
    if not own and (len(parts) > 3 or not all(p.strip() for p in parts)):
        raise BertfeatError(f"the feature set {name!r} is not POOLING[@LAYERS[@AGG]] or own",
                            "write it as e.g. mean, cls@-2, mean@-4: or mean@-4:@concat")
    pooling = None if own else parts[0].strip()
    layers = None if own or len(parts) < 2 else parts[1].strip()
    agg = "mean" if own or len(parts) < 3 else parts[2].strip()
    return pooling, layers, agg


def check_set_words(sets: list[str] | None, long_text) -> None:
    """The words of the sets given and of ``long_text`` that the model does not decide (model.spec.check_spec_words),
    before the report's outputs are checked: 'already exists - pass --overwrite' came first, then 'unknown'."""
    from .model.spec import check_spec_words

    check_spec_words(None, "mean", long_text)
    for text in sets or ():
        name = str(text).strip()
        if name:
            pooling, _, agg = set_parts(name)
            try:
                check_spec_words(pooling, agg, long_text)
            except BertfeatError as e:
                raise e.prefixed(f"feature set {name!r}") from None


def parse_sets(texts, enc, *, normalize: bool | None = None, strict: bool = True, shared: str = "",
               **tokenization) -> tuple[list, list]:
    """The set names -> ([FeatureSet], [{"name", "why"}] skipped). ``tokenization``: max_length, long_text, stride,
    prompt, prompt_name (shared by every set). ``strict``: a set the model cannot give, or one that gives the features
    of a set before it (mean and mean@-1), is an error (sets the user named), else skipped with the reason (the
    default sets). ``shared``: the extract options every set's command adds (``shared_options``)."""
    # the settings every set shares, checked once as extract checks them: a bad one (max_length=0, an unknown
    # prompt_name) skipped every default set, and the sweep ended in a bug line once the input was read. Checked
    # with a pooling named: what the model's own embedding alone cannot do (it has none, or leaves the prompt out)
    # is the set own's refusal, not the sweep's
    enc.spec("mean", None, "mean", normalize, **tokenization)
    sets, skipped, seen, by_spec = [], [], set(), {}
    for text in texts:
        name = str(text).strip()
        if not name:
            raise BertfeatError("an empty feature set was given", f"name one such as {opt('sets', 'mean@-2')}")
        if name in seen:
            raise BertfeatError(f"the feature set {name!r} was given twice", "name each set once")
        seen.add(name)
        pooling, layers, agg = set_parts(name)
        own = name == "own"
        try:
            spec = enc.spec(pooling, layers, agg, normalize, **tokenization)
        except BertfeatError as e:
            if strict:
                raise e.prefixed(f"feature set {name!r}") from None
            skipped.append({"name": name, "why": e.what_as({})})  # as the sets: in extract's flags
            continue
        if spec in by_spec:  # another spelling of a set given (mean, mean@-1; own and mean --normalize on MiniLM)
            first, said = by_spec[spec], _spec_said(spec)
            if strict:
                raise BertfeatError(f"the feature sets {first!r} and {name!r} are one set ({said})", "name each set once")
            skipped.append({"name": name, "why": f"the same set as {first!r} ({said})"})
            continue
        by_spec[spec] = name
        sets.append(FeatureSet(name, spec, _set_options(pooling, layers, agg, spec.normalize, own, shared)))
    return sets, skipped


def _spec_said(spec) -> str:
    """What a set's spec computes, said for two spellings of it: ``pooling mean, layer 6, normalized``."""
    many = len(spec.layers) > 1
    said = f"pooling {spec.pooling}, layer{'s' if many else ''} {','.join(str(i) for i in spec.layers)}"
    agg = {"mean": " averaged", "concat": " concatenated"}.get(spec.layer_agg, f" ({spec.layer_agg})") if many else ""
    return said + agg + (", normalized" if spec.normalize else "")


def _set_names(sets) -> list[str] | None:
    """``sets`` as a list of names (None: the default sets): one name (not its letters), or an iterable of names (a
    generator too: it has no len). Anything else is refused naming it, before any work (3 ended in a TypeError about
    len, None in a list became the set 'None')."""
    if sets is None:
        return None
    if isinstance(sets, str):
        return [sets]
    fix = f"give {opt('sets')} as a list of names, e.g. ['own', 'cls@-2', 'mean@-4:']"
    if isinstance(sets, (bytes, bytearray, dict, set, frozenset)) or not hasattr(sets, "__iter__"):
        raise BertfeatError(f"{opt('sets', sets)} is not a feature set name or a list of them", fix)
    names = list(sets)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise BertfeatError(f"sets[{i}] is {name!r:.40} ({type(name).__name__}), not a feature set name", fix)
    return names


def _read_sample(reader, label: str | None, rows: int, seed: int, on_bad_row: str, bar=None, refusals=None) -> dict:
    """A uniform sample of at most ``rows`` accepted (and, with a label, labelled) input rows, in input order:
    {"chunk": chunks.Chunk of them, "labels", "rows_read", "rows_rejected", "rows_unlabelled"}. ``refusals``: where
    the Encoder may refuse rows (long_text error ...), chunk -> {position: Reason} of those it refuses, found as the
    input is read (a sample drawn first and cut after held few rows: 1 of 3 asked, where 72 of 300 were usable)."""
    from .pca.probe import has_label
    from .run.chunks import Chunk, Reservoir, validate_batch
    from .run.progress import NullProgress
    from .readers.rejects import bad_row_error, reject

    bar = bar or NullProgress()
    sample = Reservoir(rows, seed)  # (row, text, pair, id, label) of accepted, labelled rows
    read = rejected = unlabelled = 0
    bar.start(getattr(reader, "total_rows", None), getattr(reader, "total_bytes", None))
    for b in reader.batches():
        chunk = validate_batch(b, 0)
        read += chunk.n_read
        bar.advance(chunk.n_read, 0, chunk.bytes_read)
        refused = refusals(chunk) if refusals is not None and chunk.rows else {}
        if refused:  # bad rows as extract finds them: the first in the input stops an on_bad_row='error' sweep
            chunk.rejects = sorted(chunk.rejects + [reject(chunk.rows[i], None if chunk.ids is None else chunk.ids[i],
                                                           why) for i, why in refused.items()], key=lambda r: r["row"])
            chunk.select([i for i in range(len(chunk.rows)) if i not in refused])
        if chunk.rejects:
            if on_bad_row == "error":
                raise bad_row_error(reader.row_label, chunk.rejects[0], "leave it out of the sweep", no_keep=True)
            rejected += len(chunk.rejects)
        values = chunk.extra[label] if label is not None else [0] * len(chunk.rows)
        labelled = [label is None or has_label(v) for v in values]  # (pca.probe's rule: None, NaN, "")
        unlabelled += labelled.count(False)
        sample.add([(chunk.rows[i], chunk.texts[i], None if chunk.pairs is None else chunk.pairs[i],
                     None if chunk.ids is None else chunk.ids[i], v) for i, v in enumerate(values) if labelled[i]])
    bar.stop()
    kept = sample.items()  # input order
    has_pairs, has_ids = reader.pair_column is not None, reader.id_column is not None
    chunk = Chunk(0, [r[0] for r in kept], [r[1] for r in kept], [r[2] for r in kept] if has_pairs else None,
                  [r[3] for r in kept] if has_ids else None, [], len(kept))
    return {"chunk": chunk, "labels": [r[4] for r in kept], "rows_read": read, "rows_rejected": rejected,
            "rows_unlabelled": unlabelled}


def _variance(X: np.ndarray) -> tuple[object, dict]:
    """A set's features (n, d) -> (its PCA on them, every component; {"thresholds", "suggestions"} from report.py)."""
    from .pca.estimator import PCA
    from .pca.report import build_pca_report

    pca = PCA(solver="covariance").fit(X)
    r = build_pca_report(pca, source={})
    return pca, {"thresholds": r["thresholds"], "suggestions": r["suggestions"]}


#: the extract options a sweep takes, as keywords of ``sweep`` (bertfeat.extract's names, declared in run/options.py)
SWEEP_OPTIONS = ("model", "text_column", "pair_column", "id_column", "input_format", "encoding", "delimiter",
                 "normalize", "max_length", "long_text", "stride", "prompt", "prompt_name", "precision", "threads",
                 "on_bad_row", "overwrite", "cache")


def sweep(input: str | os.PathLike, sets=None, *, label: str | None = None, sample: int = DEFAULT_SAMPLE, seed: int = 0,
          n_components: int | None = None, folds: int = 5, output: str | os.PathLike | None = None, progress=None,
          bar=None, **options) -> dict:
    """Compare feature sets of a sample of ``input``'s rows (see the module docstring) -> the report, a JSON-able
    dict. ``sets``: names as ``DEFAULT_SETS`` (default: those, less any the model cannot give); ``sample``: rows
    compared at most (a uniform sample); ``n_components``: the k of the probe on principal components (default
    64; a set whose PCA has fewer, min(rows, features), is probed on all it has: the report's ``n_components`` is
    the most used, ``n_components_requested`` k); given, the best set is the best on those k components (the
    features as a pipeline that keeps k will use them), else on all its features; ``output``: a prefix, to write the report as PREFIX.json and PREFIX.md (checked
    before any work: existing files need ``overwrite``; the CLI's default is ``default_prefix(input)``);
    ``progress(what)``: told each step; ``bar``: a progress object (``progress.NullProgress``'s methods) told the rows
    read and encoded.

    ``options``: ``bertfeat.extract``'s options that a sweep takes (``SWEEP_OPTIONS``), by the same names and meaning:
    the input's (``text_column``, ``pair_column``, ``id_column``, ``input_format``, ``encoding``, ``delimiter``), the
    model's (``model``, ``precision``, ``threads``), the texts' (``max_length``, ``long_text``, ``stride``, ``prompt``,
    ``prompt_name``), ``normalize`` (every set), ``on_bad_row`` ("error", the default, or "skip"), ``overwrite`` and
    ``cache``: a vector cache directory (None: BERTFEAT_CACHE when set; False: none): each set's vectors are read and
    stored under that set's own settings, exactly as ``extract`` with the set's options computes them (and read as
    ``extract`` reads them: a row another name of the prompt, long-text policy, stride or max length stored is found
    when its vector is the same bits)."""
    import contextlib

    from .model.encoder import Encoder
    from .run.options import check, check_types, options_from
    from .run.outlock import output_lock
    from .run.plan import check_label_column, check_pair_column
    from .readers import open_input, split_id_column
    from .checks import check_count, check_size, check_stride

    o = check_types(options_from("sweep", options, SWEEP_OPTIONS, input=input, on_bad_row="error"))
    input = o.checked("input")
    check_stride(o.stride, o.long_text)
    sets = _set_names(sets)
    check_count(seed, "seed", 0)
    if label is not None:
        check("label", label)  # extract's rule: label="" is no column name (it once ended in the bug line)
    ranked_on_pca = n_components is not None
    n_components = DEFAULT_N_COMPONENTS if n_components is None else n_components
    for name, v, low in (("sample", sample, 2), ("n_components", n_components, 1), ("folds", folds, 2)):
        check_size(v, name, low, None, "")
    cache = _cache_of(o)
    if o.on_bad_row not in ("error", "skip"):
        raise BertfeatError(f"{opt('on_bad_row', o.on_bad_row)} is not error or skip",
                            f"choose {opt('on_bad_row', 'error')} or {opt('on_bad_row', 'skip')}")
    tell = progress or (lambda what: None)
    check_set_words(sets, o.long_text)  # (before "already exists")
    if output is not None:  # before any work (and before the lock makes the output's folder)
        _check_outputs(output, input, o.overwrite, o.model, cache)
    with output_lock(Path(output)) if output is not None else contextlib.nullcontext():
        if output is not None:  # again under the lock: another run may have written them
            _check_outputs(output, input, o.overwrite, o.model, cache)
        id_name, id_as_text = split_id_column(o.id_column)
        reader, label = _open_labelled(open_input, str(input), o, label, id_name, id_as_text)
        try:
            check_pair_column(reader, o.text_column)
            check_label_column(reader, label, o.text_column)
            enc = Encoder(o.model, precision=o.precision, threads=o.threads)
            tokenization = {name: getattr(o, name) for name in ("max_length", "long_text", "stride", "prompt",
                                                                 "prompt_name")}
            given = sets is not None and len(sets) > 0
            chosen, skipped = parse_sets(sets if given else DEFAULT_SETS, enc, normalize=o.normalize, strict=given,
                                         shared=shared_options(o), **tokenization)
            tell(f"reading {reader.name} (a uniform sample of {sample:,} rows at most)")
            try:
                drawn = _read_sample(reader, label, sample, seed, o.on_bad_row, bar, _refusals(enc, chosen[0].spec))
            except BertfeatError as e:  # a label's value extract would keep with --keep LABEL:str: --label LABEL:str
                raise e.rename({"keep": "label"})
        finally:
            close = getattr(reader, "close", None)
            if close is not None:
                close()
        report = _compare(enc, chosen, skipped, drawn, reader, label, n_components=n_components, folds=folds,
                          seed=seed, on_bad_row=o.on_bad_row, tell=tell, cache=cache, bar=bar,
                          ranked_on_pca=ranked_on_pca)
        if output is not None:
            report["files"] = {k: str(v) for k, v in sweep_paths(output).items()}
            write_sweep_report(report, output)
    return report


def _open_labelled(open_input, path: str, o, label: str | None, id_name, id_as_text):
    """The input with its label column -> (reader, the label's column name). A sweep has no ``keep``: its label's
    type goes with it, ``label:str`` (the label's text, where a JSONL NaN or a number past float64 is refused as a
    number), when the input has no column of that whole name."""
    def opened(name, keep_as):
        return open_input(path, o.input_format, o.text_column, o.pair_column, id_name, o.encoding,
                          delimiter=o.delimiter, keep=(name,) if name else (), label=name, id_as_text=id_as_text,
                          keep_as=keep_as)

    try:
        return opened(label, None), label
    except BertfeatError as e:
        from .readers.kept import TYPE_NAMES

        base, _, typ = (label or "").rpartition(":")
        if not (base and e.names("label") and typ.strip().lower() in TYPE_NAMES):
            raise
        try:
            return opened(base, {base: typ.strip().lower()}), base
        except BertfeatError:
            raise e from None


def _compare(enc, chosen: list, skipped: list, drawn: dict, reader, label: str | None, *, n_components: int,
             folds: int, seed: int, on_bad_row: str, tell, cache=None, bar=None, ranked_on_pca: bool = False) -> dict:
    """The sample's rows through the model once for every set, then each set's variance and probe: -> the report."""
    from .run.chunks import named_rows, prepare_chunk
    from .pca.probe import label_codes, majority_accuracy, ridge_accuracy, stratified_folds
    from .version import __version__

    chunk, labels = drawn["chunk"], drawn["labels"]
    source = reader.name
    distinct, of_row = _distinct_rows(chunk)  # each text once, as extract encodes it (cache.reuse)
    pc = prepare_chunk(enc, chosen[0].spec, distinct, reader.row_label, on_bad_row)
    position = {u: k for k, u in enumerate(pc.todo or [])}  # a distinct row -> its vector's row
    todo = [i for i, u in enumerate(of_row) if u in position]  # rows refused as too long (long_text error, skip): out
    labels = [labels[i] for i in todo]
    n, refused = len(todo), len(of_row) - len(todo)
    if n < 2:
        _too_few_rows(source, n, drawn, refused, label)
    codes = fold = None
    if label is not None:
        codes, classes = label_codes(labels, label, source, folds)
        fold = stratified_folds(codes, folds, seed)
    if cache is None:
        tell(f"encoding {len(position):,} rows once for {len(chosen)} feature sets")
        with named_rows([distinct.rows[u] for u in pc.todo or []], reader.row_label):
            outs = _encode(enc, pc.prepared, [[s.spec for s in chosen]], bar)[0]
        reuse = {"rows_encoded": len(position), "rows_cached": 0, "cache": None}
    else:
        outs, reuse = _cached_sets(enc, chosen, distinct, pc.todo or [], cache, tell, bar, reader.row_label)
    rows_of = np.array([position[of_row[i]] for i in todo], dtype=np.int64)
    outs = [X[rows_of] for X in outs]  # (n, d): a repeated text's rows share its one vector
    tell("comparing the sets")
    results = []
    for s, X in zip(chosen, outs):
        pca, variance = _variance(X)
        entry = {"name": s.name, "options": s.options, "dim": int(X.shape[1]), "pooling": s.spec.pooling,
                 "layers": list(s.spec.layers), "layer_agg": s.spec.layer_agg, "normalize": s.spec.normalize,
                 "dense": bool(s.spec.dense), **variance}
        if codes is not None:
            d = X.shape[1]
            acc = ridge_accuracy(X, codes, [d], fold)[d]
            k = min(int(n_components), int(pca.n_components_))
            acc_k = ridge_accuracy(pca.transform_rows(X)[:, :k], codes, [k], fold)[k]
            entry["probe"] = {"accuracy": float(np.mean(acc)), "std": float(np.std(acc)),
                              "components": k, "accuracy_pca": float(np.mean(acc_k)), "std_pca": float(np.std(acc_k))}
        results.append(entry)
    report = {
        "kind": REPORT_KIND, "bertfeat_version": __version__, "input": source, "model": enc.model_id,
        "weights_sha256": enc.weights_sha256, "precision": enc.precision, "max_length": chosen[0].spec.max_length,
        "long_text": chosen[0].spec.long_text, "prompt": chosen[0].spec.prompt, "rows_read": drawn["rows_read"],
        "rows_rejected": drawn["rows_rejected"] + refused, "rows_unlabelled": drawn["rows_unlabelled"],
        "rows": n, "seed": seed, **reuse, "sets": results, "skipped": skipped,
    }
    if codes is not None:
        best_all = max(results, key=lambda e: e["probe"]["accuracy"])["name"]
        best_pca = max(results, key=lambda e: e["probe"]["accuracy_pca"])["name"]
        counts = np.bincount(codes, minlength=len(classes))
        used = max(e["probe"]["components"] for e in results)  # what the probe used, not what was asked
        report.update({"label": label, "folds": folds, "classes": len(classes), "n_components": used,
                       "n_components_requested": int(n_components),
                       "class_counts": {str(v): int(c) for v, c in zip(classes, counts)},
                       "notes": _small_classes(classes, counts, folds)
                       + (_fewer_components(results, int(n_components), n) if ranked_on_pca else []),
                       "majority_baseline": float(np.mean(majority_accuracy(codes, fold, len(classes)))),
                       "best": best_pca if ranked_on_pca else best_all, "ranked_on": "pca" if ranked_on_pca else "all",
                       "best_all": best_all, "best_pca": best_pca})
    return report


def _refusals(enc, spec):
    """chunk -> {position: Reason} of the rows the Encoder refuses (chunks.prepare_rows), where it may refuse any
    (Encoder.refuses_rows: long_text error, tokens past its table, rows of no token); else None (nothing to look for)."""
    if not enc.refuses_rows(spec):
        return None
    from .run.chunks import prepare_rows

    return lambda chunk: prepare_rows(enc, spec, chunk.texts, chunk.pairs)[2]


def _distinct_rows(chunk):
    """The sample's rows of distinct (text, pair), each at its first row: -> (a Chunk of them, for each sample row
    the position of its text there). A repeated text was encoded once per row, its copies a rounding apart on NumPy's
    BLAS, and the PCA and probe measured that noise (20 rows of one text: 3 components for 90 %, where extract and
    pca fit say 1: found by the sweep audit)."""
    from .run.chunks import Chunk

    first: dict = {}
    of_row = [first.setdefault((t, None if chunk.pairs is None else chunk.pairs[i]), i)
              for i, t in enumerate(chunk.texts)]
    keep = list(first.values())  # (in row order: the first row of each text)
    at = {i: k for k, i in enumerate(keep)}
    pick = lambda values: None if values is None else [values[i] for i in keep]  # noqa: E731
    distinct = Chunk(chunk.index, pick(chunk.rows), pick(chunk.texts), pick(chunk.pairs), pick(chunk.ids), [],
                     len(keep))
    return distinct, [at[i] for i in of_row]


def _small_classes(classes: list, counts: np.ndarray, folds: int) -> list[str]:
    """A note per class with fewer labelled rows than folds (scikit-learn's StratifiedKFold warns of them): some folds
    test none of its rows, and a row whose class has no other row is always missed."""
    small = [(v, int(c)) for v, c in zip(classes, counts) if c < folds]
    if not small:
        return []
    said = ", ".join(f"{_class_name(v)} ({c} row{'s' if c > 1 else ''})" for v, c in small[:5]) + (
        f" and {len(small) - 5} more" if len(small) > 5 else "")
    return [f"{len(small)} of {len(classes)} classes have fewer labelled rows than the {folds} folds: {said}; the probe "
            "can hardly learn them (a row whose class has no other row is always missed): sweep more rows of them, or "
            "fewer folds"]


def _fewer_components(results: list, asked: int, rows: int) -> list[str]:
    """A note where a set's PCA has fewer components than ``asked`` (at most min(rows, features)): its probe used all
    it has, so the best set was ranked on fewer (the report said 5000 where 40 were used)."""
    fewer = [(e["name"], e["probe"]["components"]) for e in results if e["probe"]["components"] < asked]
    if not fewer:
        return []
    if len(fewer) == len(results) and len({k for _, k in fewer}) == 1:
        used = f"used {fewer[0][1]} of the {asked} asked for"
    else:
        used = f"used fewer than the {asked} asked for on {len(fewer)} of {len(results)} sets: " + ", ".join(
            f"{name} {k}" for name, k in fewer[:5]) + (f" and {len(fewer) - 5} more" if len(fewer) > 5 else "")
    return [f"the probe on principal components {used} (a set's PCA has no more components than the {rows} rows "
            "compared or its features)" + ("; sweep more rows for more" if any(k == rows for _, k in fewer) else "")]


def pcs_said(report: dict) -> str:
    """The principal components the sets' probe used: ``40``, or ``384-500`` where sets have fewer than others."""
    ks = [e["probe"]["components"] for e in report["sets"]]
    return str(max(ks)) if min(ks) == max(ks) else f"{min(ks)}-{max(ks)}"


def _class_name(v) -> str:
    """A class as a report names it: quoted when its ends are blank (\" \" and \"a \" are classes of their own)."""
    text = str(v)
    return text if text and text == text.strip() else repr(text)


def rows_said(report: dict) -> str:
    """The rows compared, and the rows read that were left out: ``16 rows (a uniform sample, seed 0, of 24 read; left
    out: 8 without a label)``."""
    out = [f"{report['rows_rejected']:,} bad rows"] if report["rows_rejected"] else []
    out += [f"{report['rows_unlabelled']:,} without a label"] if report["rows_unlabelled"] else []
    return (f"{report['rows']:,} rows (a uniform sample, seed {report['seed']}, of {report['rows_read']:,} read"
            + (f"; left out: {', '.join(out)}" if out else "") + ")")


def _too_few_rows(source: str, n: int, drawn: dict, refused: int, label: str | None) -> None:
    """Fewer than 2 rows to compare: said with where the others went (bad rows left out, rows without a label)."""
    bad, unlabelled = drawn["rows_rejected"] + refused, drawn["rows_unlabelled"]
    why = [f"{bad:,} bad rows left out"] if bad else []
    why += [f"{unlabelled:,} without a label"] if label is not None else []
    fix = "sweep an input with at least 2 rows" + (" that have a label" if label else "")
    if bad:  # left out by on_bad_row='skip': the first one's error says what is wrong with them
        fix += f"; drop {opt('on_bad_row', 'skip')} to see what is wrong with the first bad row"
    raise BertfeatError(f"{source} gave {n} usable row(s) for the sweep ({drawn['rows_read']:,} read"
                        + "".join(f", {w}" for w in why) + ")", fix)


def _encode(enc, prep, groups: list[list], bar=None) -> list[list[np.ndarray]]:
    """Each group of specs through ``Encoder.run_sets`` on ``prep``'s rows, the bar told every batch."""
    from .run.progress import NullProgress

    bar = bar or NullProgress()
    bar.start(len(prep.ids) * len(groups), None)
    try:
        return [enc.run_sets(prep, g, on_batch=lambda w, t: bar.advance(w, t, 0)) for g in groups]
    finally:
        bar.stop()


def _cached_sets(enc, chosen: list, chunk, todo: list[int], cache, tell, bar,
                 row_label=None) -> tuple[list[np.ndarray], dict]:
    """The sets' vectors of the sample's rows ``todo`` with the vector cache: each set's known rows read under its
    own fingerprint, or one whose vectors of them are the same bits, as extract reads them (cache.store.spec_siblings:
    another name of the prompt, long-text policy, stride or max length), the rows any set misses encoded in groups
    that give each set exactly extract's vectors (spec.exact_groups), and stored for the sets that missed them
    (``row_label``: the reader's, for a row whose features come out NaN). -> (vectors per set, counts)."""
    from .model.spec import exact_groups
    from .run.chunks import named_rows
    from .cache.store import cache_fingerprint, open_cache, read_only_note, register_spec, spec_siblings, text_key

    keys = [text_key(chunk.texts[i], None if chunk.pairs is None else chunk.pairs[i]) for i in todo]
    store = open_cache(cache)
    try:
        cache_ids = [cache_fingerprint(enc, s.spec) for s in chosen]
        fids = [register_spec(store, enc, s.spec, c) for s, c in zip(chosen, cache_ids)]
        used: set[int] = set()  # as extract looks up (cache.reuse): under another name of the prompt, long-text policy,
        found = [store.get_reusable(fid, spec_siblings(store, enc, s.spec, c), keys, used)  # stride or max length too
                 for fid, s, c in zip(fids, chosen, cache_ids)]
        missing = [j for j, k in enumerate(keys) if any(k not in f for f in found)]
        tell(f"{len(keys) - len(missing):,} of {len(keys):,} rows in the cache {cache} for every set; encoding "
             f"{len(missing):,} rows for {len(chosen)} feature sets")
        new = [None] * len(chosen)
        if missing:
            prep = enc.prepare([chunk.texts[todo[j]] for j in missing],
                               None if chunk.pairs is None else [chunk.pairs[todo[j]] for j in missing], chosen[0].spec)
            groups = [g for g in exact_groups([s.spec for s in chosen]) if any(_misses(found[i], keys, missing) for i in g)]
            with named_rows([chunk.rows[todo[j]] for j in missing], row_label):
                encoded = _encode(enc, prep, [[chosen[i].spec for i in g] for g in groups], bar)
            for g, outs in zip(groups, encoded):
                for i, X in zip(g, outs):
                    new[i] = X
                    rows = [r for r, j in enumerate(missing) if keys[j] not in found[i]]
                    if rows:
                        store.put(fids[i], [keys[missing[r]] for r in rows], X[rows], prep.n_tokens[rows],
                                  prep.truncated[rows], prep.n_chunks[rows])
        outs = [_assemble(found[i], keys, missing, new[i], enc.output_dim(s.spec)) for i, s in enumerate(chosen)]
        for fid in fids + sorted(used - set(fids)):
            store.touch(fid)
        if store.read_only is not None:  # its hits were read, and put stored nothing
            tell(read_only_note(cache, store.read_only, len(missing)))
    finally:
        store.close()
    return outs, {"rows_encoded": len(missing), "rows_cached": len(keys) - len(missing), "cache": str(cache)}


def _misses(found: dict, keys: list, missing: list[int]) -> bool:
    return any(keys[j] not in found for j in missing)


def _assemble(found: dict, keys: list, missing: list[int], X_new, dim: int) -> np.ndarray:
    """One set's (n, d) vectors in sample order: the cache's, and the rows just encoded (``X_new``, rows ``missing``)."""
    out = np.empty((len(keys), dim), dtype=np.float32)
    at = {j: r for r, j in enumerate(missing)}
    for j, k in enumerate(keys):
        out[j] = found[k][0] if k in found else X_new[at[j]]
    return out


def default_prefix(input_path: str) -> Path:
    """INPUT.sweep beside the input (as extract's INPUT.features.parquet)."""
    from .run.plan import default_output
    from .readers import is_url

    if is_url(input_path):  # no "beside the input" for a URL (as extract)
        raise BertfeatError(f"a URL input needs {opt_word('output', 'PREFIX')}", f"give the report prefix, e.g. {opt('output', 'sweep')}")
    if input_path == "-":  # nothing to be beside: sweep's own fix, not extract's (a features file)
        raise BertfeatError(f"reading standard input needs {opt('output', 'PREFIX')}",
                            f"add {opt('output', 'sweep')} (the report is written as sweep.json and sweep.md)")
    p = default_output(input_path, "json")  # .../STEM.features.json
    return p.with_name(p.name[: -len(".features.json")] + ".sweep")


def _cache_of(o):
    """The vector cache the options give (BERTFEAT_CACHE where they give none), not the model folder nor in it."""
    from .cache.store import CacheError, from_environment
    from .run.outputs import check_cache_outside_model

    cache = o.checked("cache")
    try:
        check_cache_outside_model(cache, o.model)
    except CacheError as e:
        raise e.named_by_environment() if from_environment(o.cache) else e
    return cache


def _check_outputs(prefix: str | os.PathLike, input, overwrite: bool, model=None, cache=None) -> None:
    """The report files' names, as extract's outputs: not the input, not in the model folder or the vector cache
    (``-o MODEL/config --overwrite`` replaced the model's config.json), not existing unless ``overwrite``."""
    from .run.outputs import check_name_lengths, check_not_runs_own, check_outputs
    from .checks import check_output_name

    check_output_name(prefix, "report prefix", "sweep", kind="prefix")
    reports = [("sweep report", p) for p in sweep_paths(prefix).values()]
    check_name_lengths(reports)
    check_not_runs_own(reports, model, cache)  # before "already exists": --overwrite would not make it right
    check_outputs(reports, [Path(str(input))] if str(input) != "-" else [], overwrite)


def sweep_paths(prefix: str | os.PathLike) -> dict[str, Path]:
    """The report files of a sweep: PREFIX.json and PREFIX.md."""
    p = str(prefix)
    return {"json": Path(p + ".json"), "markdown": Path(p + ".md")}


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _md(text, cell: bool = False, code: bool = False) -> str:
    """A name or value of the user's in the Markdown report (pca.report.md_text: control characters escaped, so a
    file name holding ESC or a line feed neither drives a terminal nor breaks the heading; Markdown's own characters
    escaped; in a table cell '|' too, which GitHub's tables split a cell at)."""
    from .pca.report import md_text

    return md_text(text, cell, code)


def render_markdown(report: dict) -> str:
    """The report as Markdown: the settings, then one table row per set."""
    probe = "label" in report
    lines = [f"# Feature sets of {_md(report['input'])}", "",
             f"Model {_md(report['model'])} ({report['precision']}, max length {report['max_length']}); "
             f"{_md(rows_said(report))}"
             + (f"; label `{_md(report['label'], code=True)}`: {report['classes']} classes, {report['folds']}-fold ridge probe, "
                f"majority class {_pct(report['majority_baseline'])} %" if probe else "") + ".", ""]
    counts = report.get("class_counts") or {}
    if 0 < len(counts) <= 20:  # which classes: a label " " or "a " beside "a" is a class of its own
        lines += ["Classes (rows): " + ", ".join(f"{_md(_class_name(v))} {c:,}" for v, c in counts.items()) + ".", ""]
    lines += [f"Note: {_md(note)}." for note in report.get("notes", [])] + ([""] if report.get("notes") else [])
    head = ["set", "`bertfeat extract` options", "dim", "PCs for 90 %", "PCs for 95 %", "Minka MLE"]
    if probe:
        head += ["probe accuracy %", f"probe on {pcs_said(report)} PCs %"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for e in report["sets"]:
        t = {x["fraction"]: x["components"] for x in e["thresholds"]}
        mle = e["suggestions"]["mle"]["components"]
        row = [_md(e["name"], cell=True) + (" **best**" if report.get("best") == e["name"] else ""),
               f"`{_md(e['options'], cell=True, code=True)}`" if e["options"] else "(none: the model's own embedding)", str(e["dim"]),
               str(t.get(0.9, "-")), str(t.get(0.95, "-")), "-" if mle is None else str(mle)]
        if probe:
            p = e["probe"]
            row += [f"{_pct(p['accuracy'])} ± {_pct(p['std'])}",
                    f"{_pct(p['accuracy_pca'])} ± {_pct(p['std_pca'])} ({p['components']})"]
        lines.append("| " + " | ".join(row) + " |")
    for s in report["skipped"]:
        lines.append(f"\nSkipped {_md(s['name'])}: {_md(s['why'])}.")
    return "\n".join(lines) + "\n"


def write_sweep_report(report: dict, prefix: str | os.PathLike) -> dict[str, Path]:
    """Write PREFIX.json and PREFIX.md atomically, together; returns their paths."""
    from .atomic import atomic_output, remove_stale_temps, together

    paths = sweep_paths(prefix)
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    for p in paths.values():  # a killed writer's temporaries
        remove_stale_temps(p)
    with together():  # both appear together (an interrupted run leaves the old ones)
        with atomic_output(paths["markdown"]) as tmp:
            tmp.write_text(render_markdown(report), encoding="utf-8", errors="backslashreplace")  # a name not UTF-8
        with atomic_output(paths["json"]) as tmp:
            tmp.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return paths
