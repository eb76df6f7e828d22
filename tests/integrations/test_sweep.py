"""bertfeat.sweep / `bertfeat sweep`: feature sets from one pass, checked against the same features encoded one set at a
time, scikit-learn's PCA and RidgeClassifier on the same folds, and the CLI's files and messages."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from bertfeat import PCA, Encoder
from bertfeat.cli.app import main
from bertfeat.errors import BertfeatError
from bertfeat.pca.probe import stratified_folds
from bertfeat.sweep import DEFAULT_SETS, default_prefix, parse_sets, sweep

from ckpt import make_ckpt  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sst2_sample.csv"  # id, label, text: 300 SST-2 rows


@pytest.fixture(scope="module")
def enc():
    return Encoder()


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory) -> Path:
    """The first 120 rows of the bundled sample."""
    path = tmp_path_factory.mktemp("sweep") / "small.csv"
    path.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:121]), encoding="utf-8")
    return path


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_sets_parse_to_the_extract_options_that_give_them(enc):
    sets, skipped = parse_sets(["own", "mean", "cls@-2", "mean@-4:@concat", "mean+max@1,-1", "pooled"], enc)
    assert skipped == []
    assert [(s.name, s.options) for s in sets] == [
        ("own", ""), ("mean", "--pooling mean"), ("cls@-2", "--pooling cls --layers -2"),
        ("mean@-4:@concat", "--pooling mean --layers -4: --layer-agg concat"),
        ("mean+max@1,-1", "--pooling mean+max --layers 1,-1"), ("pooled", "--pooling pooled")]
    for s in sets:  # each set's spec is the one its options give
        kw = {"pooling": None, "layers": None, "layer_agg": "mean"}
        words = s.options.split()
        for flag, value in zip(words[::2], words[1::2]):
            kw[flag[2:].replace("-", "_")] = value
        assert s.spec == enc.spec(**kw), s.name
    assert sets[0].spec.dense == () and sets[0].spec.normalize  # MiniLM's own embedding: mean, then Normalize
    normed, _ = parse_sets(["own", "cls"], enc, normalize=True)
    assert [s.options for s in normed] == ["", "--pooling cls --normalize"]
    plain, _ = parse_sets(["own"], enc, normalize=False)
    assert plain[0].options == "--no-normalize" and not plain[0].spec.normalize


@pytest.mark.parametrize("name, message", [
    ("cls@9", "Error: feature set 'cls@9': --layers '9' names layer 9, which does not exist: the model has 6 layers "
              "(hidden states 0..6, or -7..-1) - choose layers in that range; -1 is the last layer, 0 the embeddings"),
    ("mean@@", "Error: the feature set 'mean@@' is not POOLING[@LAYERS[@AGG]] or own - write it as e.g. mean, cls@-2, "
               "mean@-4: or mean@-4:@concat"),
    ("mean@-1@sum", "Error: feature set 'mean@-1@sum': unknown --layer-agg 'sum' - choose one of mean, concat"),
    # read as mean@1,2 and as mean, once, without a word: extract's parse of --layers / --pooling refuses them
    ("mean@1,,2", "Error: feature set 'mean@1,,2': --layers '1,,2' has an empty item (item 2 of 3) - separate the "
                  "layers by single commas: --layers '1,2'"),
    ("mean@6,-1", "Error: feature set 'mean@6,-1': --layers '6,-1' names layer 6 twice (as 6 and -1: the model has 6 "
                  "layers) - name each layer once: --layers '6'"),
    ("mean+mean@-2", "Error: feature set 'mean+mean@-2': --pooling 'mean+mean' names mean twice - name each pooling "
                     "once: --pooling 'mean'"),
    # own takes no layers: read as the pooling 'own', it was "unknown --pooling 'own' - choose one of pooled, cls, ..."
    ("own@-2", "Error: feature set 'own@-2': own (the model's own embedding) takes no @LAYERS - give own, or "
               "POOLING@LAYERS such as mean@-2"),
    ("own@-1@concat", "Error: feature set 'own@-1@concat': own (the model's own embedding) takes no @LAYERS - give own, "
                      "or POOLING@LAYERS such as mean@-2"),
])
def test_a_set_the_model_cannot_give_is_refused_before_any_work(tmp_path, small_csv, name, message, capsys):
    assert main(["sweep", str(small_csv), "--set", name, "-o", str(tmp_path / "s"), "-q"]) == 1
    assert capsys.readouterr().err.strip() == message
    assert list(tmp_path.iterdir()) == []


# Found by a review: the check compared spellings, so mean and mean@-1 (mean@6 and mean@-1 on the 6-layer MiniLM) were
# two sets, encoded, probed and ranked with the same numbers; only mean twice was refused.
@pytest.mark.parametrize("names, args, message", [
    (["mean", "mean"], [], "the feature set 'mean' was given twice - name each set once"),
    (["mean", "mean@-1"], [], "the feature sets 'mean' and 'mean@-1' are one set (pooling mean, layer 6) - name each "
                              "set once"),
    (["mean@6", "cls", "mean@-1"], [], "the feature sets 'mean@6' and 'mean@-1' are one set (pooling mean, layer 6) - "
                                       "name each set once"),
    (["mean@-2:", "mean@5,6@mean"], [], "the feature sets 'mean@-2:' and 'mean@5,6@mean' are one set (pooling mean, "
                                        "layers 5,6 averaged) - name each set once"),
    # MiniLM's own embedding is mean pooling, normalized: --normalize makes mean the same set
    (["own", "mean"], ["--normalize"], "the feature sets 'own' and 'mean' are one set (pooling mean, layer 6, "
                                       "normalized) - name each set once"),
])
def test_two_spellings_of_one_set_are_refused_naming_both(tmp_path, small_csv, capsys, names, args, message):
    argv = ["sweep", str(small_csv), "-o", str(tmp_path / "s"), "-q", *args]
    assert main(argv + [w for n in names for w in ("--set", n)]) == 1
    assert capsys.readouterr() == ("", f"Error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_default_set_that_is_another_set_again_is_skipped(enc):
    """The default sets with normalize=True: mean is own again on MiniLM, listed as skipped with why."""
    sets, skipped = parse_sets(DEFAULT_SETS, enc, normalize=True, strict=False)
    assert skipped == [{"name": "mean", "why": "the same set as 'own' (pooling mean, layer 6, normalized)"}]
    assert [s.name for s in sets] == [n for n in DEFAULT_SETS if n != "mean"]
    assert parse_sets(DEFAULT_SETS, enc, strict=False)[1] == []  # not normalized, mean is not own


# --------------------------------------------------------------------------- options every set shares
# Found by the CLI audit: with the default sets, an option each set refuses alike (--max-length 0, an unknown
# --prompt-name, a --stride past the windows) skipped every set, and the sweep read the whole input, then ended in
# "unexpected IndexError ... this is a bug"; named sets said it once per set, with Python's names (max_length=0).
@pytest.mark.parametrize("args, message", [
    (["--max-length", "0"], "--max-length 0 is out of range - choose 3 or more (up to the model's "
                            "max_position_embeddings, 512 for BERT and MiniLM), or leave it out for the default"),
    (["--max-length", "600"], "--max-length 600 is out of range - choose 3..512 (the model's max_position_embeddings)"),
    (["--prompt-name", "query"], "the model has no prompt named 'query' (its prompts: none) - use one of those names, "
                                 "or give the text with --prompt"),
    (["--prompt", "q: ", "--prompt-name", "query"], "both a prompt and a prompt name were given - give --prompt TEXT or "
                                                    "--prompt-name NAME, not both"),
    (["--long-text", "chunk-mean", "--stride", "600"], "--stride 600 is out of range for max length 256 - choose "
                                                       "--stride from 0 to 253 (tokens shared by neighbouring windows)"),
])
@pytest.mark.parametrize("sets", [[], ["--set", "mean", "--set", "cls@-2"]], ids=["default-sets", "named-sets"])
def test_an_option_every_set_shares_is_refused_once_before_any_work(tmp_path, small_csv, capsys, args, message, sets):
    assert main(["sweep", str(small_csv), "-o", str(tmp_path / "s"), "-q", *sets, *args]) == 1
    assert capsys.readouterr() == ("", f"Error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_sets_own_refusal_names_extracts_flags_on_the_command_line(tmp_path, small_csv, capsys):
    """The set's own error (its layers, pooling) keeps its option for the caller: --layers on the command line (as the
    skipped default sets say it), layers= in Python."""
    assert main(["sweep", str(small_csv), "--set", "mean@0:9", "-o", str(tmp_path / "s"), "-q"]) == 1
    why = "reaches past the model: it has 6 layers (hidden states 0..6, or -7..-1) - choose layers in that range, e.g. -4: " \
          "for the last 4"
    assert capsys.readouterr() == ("", f"Error: feature set 'mean@0:9': --layers '0:9' {why}\n")
    with pytest.raises(BertfeatError) as e:
        sweep(small_csv, ["mean@0:9"])
    assert e.value.message == f"feature set 'mean@0:9': layers='0:9' {why}"
    with pytest.raises(BertfeatError) as e:  # a shared option: once, by its parameter
        sweep(small_csv, max_length=0)
    assert e.value.message.startswith("max_length=0 is out of range - ")
    assert list(tmp_path.iterdir()) == []


# The shared check above judged the options as the model's own embedding would take them: a model without one (a
# modules.json with no Pooling) or one that leaves its prompt out of the pooling (include_prompt false, with a prompt
# and --long-text chunk-*) refused the whole sweep, where only the set `own` cannot be given (review of the CLI audit).
def _model_with(tmp_path, modules: list[dict], pooling: dict | None = None, prompts: dict | None = None) -> Path:
    import shutil

    from extract_util import tiny_model

    d = tmp_path / "model"
    shutil.copytree(tiny_model(), d)
    (d / "modules.json").write_text(json.dumps([{"idx": i, "name": str(i), **m} for i, m in enumerate(modules)]))
    if pooling is not None:
        (d / "1_Pooling").mkdir()
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling}))
    if prompts is not None:
        (d / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    return d


TRANSFORMER = {"path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}


@pytest.mark.parametrize("case", ["no-own-embedding", "prompt-not-pooled"])
def test_a_set_only_own_cannot_give_leaves_the_other_sets(tmp_path, small_csv, capsys, case):
    if case == "no-own-embedding":
        model, args = _model_with(tmp_path, [TRANSFORMER]), []
        why = (f"the model {tmp_path / 'model'} has no embedding of its own: its modules.json lists no Pooling module, so "
               "it defines no sentence embedding (sentence-transformers cannot encode with it either)")
    else:
        model = _model_with(tmp_path, [TRANSFORMER, POOLING], {"pooling_mode_mean_tokens": True, "include_prompt": False},
                            {"query": "query: "})
        args = ["--prompt-name", "query", "--long-text", "chunk-mean", "--stride", "8"]
        why = ("this model leaves its prompt out of the pooling (include_prompt false), which --long-text chunk-* "
               "cannot do (the prompt is in the first window only)")
    out = tmp_path / "s"
    assert main(["sweep", str(small_csv), "-m", str(model), "-o", str(out), "--sample", "20", "-q", *args]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert {"name": "own", "why": why} in report["skipped"]
    assert "mean" in [s["name"] for s in report["sets"]]
    assert main(["sweep", str(small_csv), "-m", str(model), "-o", str(out), "--sample", "20", "-q", "--overwrite",
                 "--set", "mean", "--set", "cls", *args]) == 0  # named sets the model can give
    assert [s["name"] for s in json.loads(out.with_suffix(".json").read_text())["sets"]] == ["mean", "cls"]
    assert main(["sweep", str(small_csv), "-m", str(model), "-o", str(tmp_path / "t"), "-q", "--set", "own", *args]) == 1
    assert capsys.readouterr() == ("", f"Error: feature set 'own': {why} - " + (
        "choose a pooling, e.g. --pooling mean\n" if case == "no-own-embedding" else
        "use --long-text truncate or error with this model's prompts\n"))


def test_the_models_truncate_dim_cuts_the_set_own_as_extract_does(tmp_path, small_csv, capsys):
    """A model whose config_sentence_transformers.json sets truncate_dim: the set own is its embedding cut, as extract's
    default (its vectors serve extract from the cache); a chosen pooling keeps every feature."""
    from extract_util import embeddings, read_table, run, summary_line

    normalize = {"path": "", "type": "sentence_transformers.models.Normalize"}
    model = _model_with(tmp_path, [TRANSFORMER, POOLING, normalize], {"pooling_mode_mean_tokens": True})
    (model / "config_sentence_transformers.json").write_text(json.dumps({"truncate_dim": 8}))
    cache = tmp_path / "cache"
    r = sweep(small_csv, ["own", "mean"], model=str(model), cache=cache, sample=500)
    m = f"--model {model}"  # (the sweep's model, which extract's command needs too)
    assert [(s["name"], s["dim"], s["options"]) for s in r["sets"]] == [("own", 8, m), ("mean", 32, f"--pooling mean {m}")]
    for name, options, width in (("own", [], 8), ("mean", ["--pooling", "mean"], 32)):
        out = tmp_path / f"{name}.parquet"
        rc, _, err = run(capsys, "extract", small_csv, "-o", out, "-m", model, "--cache", cache, *options)
        assert rc == 0, err
        assert summary_line(err, "rows reused") == "rows reused 120" and embeddings(read_table(out)).shape == (120, width)


def test_a_sets_extract_options_hold_the_settings_every_set_shares(tmp_path, small_csv, capsys):
    """Found by the sweep / verify audit: a set's `bertfeat extract` options left out what every set shares (the
    model, --max-length, --prompt, --precision ...): the printed command gave other features (0 of the sampled rows
    served from the sweep's cache, against all of them with the shared options)."""
    import shlex

    from extract_util import run, summary_line, tiny_model

    cache = tmp_path / "cache"
    r = sweep(small_csv, ["own", "mean@-2"], model=str(tiny_model()), cache=cache, sample=500, max_length=8,
              prompt="review: ")
    shared = f"--model {tiny_model()} --max-length 8 --prompt 'review: '"
    assert r["sets"][1]["options"] == f"--pooling mean --layers -2 {shared}"
    assert r["sets"][0]["options"].endswith(shared)  # (own: --no-normalize first, the tiny model normalizes nothing)
    for i, s in enumerate(r["sets"]):
        out = tmp_path / f"{i}.parquet"
        rc, _, err = run(capsys, "extract", small_csv, "-o", out, "--cache", cache, *shlex.split(s["options"]))
        assert rc == 0, err
        assert summary_line(err, "rows reused") == "rows reused 120"


def test_one_pass_gives_each_set_as_encoded_alone_and_the_probe_equals_scikit_learns(small_csv, enc):
    pytest.importorskip("sklearn")
    from sklearn.decomposition import PCA as SkPCA
    from sklearn.linear_model import RidgeClassifier
    from sklearn.model_selection import cross_val_score

    names = ["own", "mean@-2", "cls", "mean@-4:@concat"]
    r = sweep(small_csv, names, label="label", n_components=16, seed=3)
    data = rows_of(small_csv)
    texts, y = [d["text"] for d in data], np.array([int(d["label"]) for d in data])
    assert r["rows"] == r["rows_read"] == 120 and r["classes"] == 2 and r["folds"] == 5
    fold = stratified_folds(y, 5, seed=3)
    cv = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(5)]
    sets, _ = parse_sets(names, enc)
    for s, e in zip(sets, r["sets"]):
        X = enc.run(enc.prepare(texts, None, s.spec), s.spec)  # this set alone, as extract with its options gives it
        assert e["name"] == s.name and e["dim"] == X.shape[1]
        ref = cross_val_score(RidgeClassifier(alpha=1.0), X.astype(np.float64), y, cv=cv)
        ratio = SkPCA(svd_solver="full").fit(X.astype(np.float64)).explained_variance_ratio_
        need = {t["fraction"]: t["components"] for t in e["thresholds"]}
        ref_need = {t: int(np.searchsorted(np.cumsum(ratio), t) + 1) for t in (0.8, 0.9, 0.95)}
        sk16 = SkPCA(16, svd_solver="full").fit(X.astype(np.float64))  # "auto" picks the approximate randomized
        Z = sk16.transform(X.astype(np.float64))
        ours = PCA(16, solver="covariance").fit(X)
        np.testing.assert_allclose(ours.explained_variance_, sk16.explained_variance_, rtol=1e-6)
        Z32 = ours.transform_rows(X)  # the sweep projects the float32 features as extract's PCA does
        ref_k = cross_val_score(RidgeClassifier(alpha=1.0), Z, y, cv=cv)
        ref_k32 = cross_val_score(RidgeClassifier(alpha=1.0), Z32.astype(np.float64), y, cv=cv)
        print(f"{s.name}: probe {e['probe']['accuracy']:.4f} vs scikit-learn {ref.mean():.4f}; on 16 PCs "
              f"{e['probe']['accuracy_pca']:.4f} vs {ref_k32.mean():.4f} (scikit-learn's float64 PCA: {ref_k.mean():.4f});"
              f" PCs for 80/90/95 % {need} vs {ref_need}")
        assert e["probe"]["accuracy"] == pytest.approx(ref.mean(), abs=1e-12)
        assert e["probe"]["accuracy_pca"] == pytest.approx(ref_k32.mean(), abs=1e-12)
        # ridge is rotation-invariant, so near-equal components mixed differently do not matter; float32 rounding
        # of the projection may move one borderline row of 120 (1/24 of a fold's accuracy)
        assert e["probe"]["accuracy_pca"] == pytest.approx(ref_k.mean(), abs=1 / 120 + 1e-12)
        assert all(need[t] == ref_need[t] for t in ref_need)
    accs = [e["probe"]["accuracy"] for e in r["sets"]]
    accs_pca = [e["probe"]["accuracy_pca"] for e in r["sets"]]
    assert r["best_all"] == r["sets"][int(np.argmax(accs))]["name"] and len(set(accs)) > 1  # the sets differ
    assert r["best_pca"] == r["sets"][int(np.argmax(accs_pca))]["name"]
    # n_components given: the best is ranked on those components, as a pipeline that keeps 16 uses the features
    assert r["ranked_on"] == "pca" and r["best"] == r["best_pca"] == "mean@-4:@concat" and r["best_all"] == "own"
    assert sweep(small_csv, names, label="label", seed=3)["best"] == "own"  # -n not given: on all features
    assert r["majority_baseline"] == pytest.approx(max(np.mean(y), 1 - np.mean(y)), abs=0.02)


def test_the_sample_is_uniform_in_input_order_and_repeats_with_its_seed(small_csv):
    a = sweep(small_csv, ["mean"], sample=40, seed=1)
    b = sweep(small_csv, ["mean"], sample=40, seed=1)
    c = sweep(small_csv, ["mean"], sample=40, seed=2)
    assert a["rows"] == 40 and a["rows_read"] == 120 and "label" not in a and "probe" not in a["sets"][0]
    assert a["sets"] == b["sets"] and a["sets"] != c["sets"]


def test_unlabelled_and_bad_rows(tmp_path):
    path = tmp_path / "messy.csv"
    rows = [r for r in rows_of(SAMPLE)[:40]]
    rows[3]["label"] = ""  # unlabelled: left out of a labelled sweep, counted
    rows[5]["text"] = ""  # a bad row
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["id", "label", "text"])
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(BertfeatError) as e:
        sweep(path, ["mean"], label="label")
    assert e.value.message == f"{path} row 5: empty text - fix the row, or pass on_bad_row='skip' to leave it out of the sweep"
    r = sweep(path, ["mean"], label="label", on_bad_row="skip")
    assert (r["rows_read"], r["rows_rejected"], r["rows_unlabelled"], r["rows"]) == (40, 1, 1, 38)


def test_a_jsonl_nan_label_is_read_as_text_with_label_str_and_is_no_label(tmp_path, capsys):
    """A JSONL label NaN (Python's json.dumps writes it) stopped the sweep: 'give --keep label:str to keep its text',
    an option sweep does not have, and --label label:str was refused ('give its type in --keep'); neither led
    anywhere but --on-bad-row skip, which counted the rows as bad. Now the fix names --label label:str, which reads
    the label as text, and a NaN is no label there (left out, counted), as docs/cli.md says; --folds is the CLI's."""
    from extract_util import tiny_model

    path = tmp_path / "nan.jsonl"
    path.write_text("".join(json.dumps({"text": f"sentence number {i} about topic {i % 5}",
                                        "label": float("nan") if i % 3 == 0 else i % 2}) + "\n" for i in range(60)))
    args = ["sweep", str(path), "--label", "label", "--set", "cls", "-m", str(tiny_model()), "-q"]
    assert main(args) == 1
    assert capsys.readouterr().err == (f"Error: {path} row 0: kept column 'label': NaN is not a JSON number (give "
                                       "--label label:str to keep its text) - fix the value (the column's values are "
                                       "of the kind its first rows hold), or pass --on-bad-row skip to leave it out "
                                       "of the sweep\n")
    with pytest.raises(BertfeatError, match=r"\(give label='label:str' to keep its text\)"):
        sweep(path, ["cls"], label="label", model=tiny_model())
    out = tmp_path / "s"
    assert main(args[:3] + ["label:str"] + args[4:] + ["-o", str(out), "--folds", "3"]) == 0
    r = json.loads(out.with_suffix(".json").read_text())
    assert (r["label"], r["class_counts"], r["rows_unlabelled"], r["rows_rejected"], r["folds"]) == (
        "label", {"0": 20, "1": 20}, 20, 0, 3)
    assert sweep(path, ["cls"], label="label:str", model=tiny_model(), folds=3)["sets"] == r["sets"]


def test_default_sets_skip_what_the_model_cannot_give(make_ckpt, tmp_path, small_csv):
    d = make_ckpt(hidden=64, heads=4, layers=2, pooler=False, seed=11)
    r = sweep(small_csv, model=d, sample=30)
    # a plain BERT's own embedding is mean pooling: mean is the same set (it was computed and ranked twice)
    assert [s["name"] for s in r["skipped"]] == ["mean", "pooled", "mean@-4:", "mean@-4:@concat"]
    assert r["skipped"][0]["why"] == "the same set as 'own' (pooling mean, layer 2)"
    assert r["skipped"][1]["why"].startswith("pooling 'pooled' is unavailable")
    assert r["skipped"][2]["why"] == "--layers '-4:' reaches past the model: it has 2 layers (hidden states 0..2, or -3..-1)"
    assert [s["name"] for s in r["sets"]] == [n for n in DEFAULT_SETS
                                             if n not in ("mean", "pooled", "mean@-4:", "mean@-4:@concat")]
    with pytest.raises(BertfeatError, match="^feature set 'pooled': pooling 'pooled' is unavailable"):
        sweep(small_csv, ["pooled"], model=d)  # named by the user: an error


def test_cli_writes_the_report_beside_the_input_and_refuses_to_overwrite_it(tmp_path, capsys):
    src = tmp_path / "train.csv"
    src.write_text(SAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    args = ["sweep", str(src), "--label", "label", "--set", "own", "--set", "cls@-2", "--sample", "200", "-n", "8"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert default_prefix(str(src)) == tmp_path / "train.sweep"
    lines = [x for x in err.strip().splitlines() if not re.match(r"bertfeat sweep: (started|\d)", x)]  # progress
    assert lines[:3] == [f"bertfeat sweep: reading {src} (a uniform sample of 200 rows at most)",
                         "bertfeat sweep: encoding 200 rows once for 2 feature sets", "bertfeat sweep: comparing the sets"]
    report = json.loads((tmp_path / "train.sweep.json").read_text())
    how = {"own": "(no options: the model's own embedding)", "cls@-2": "--pooling cls --layers -2"}
    other = report["best_all"]
    assert lines[3] == (f"best on the first 8 principal components: {report['best']}, bertfeat extract "
                        f"{how[report['best']]}" + (f" (on all features: {other})" if other != report["best"] else ""))
    assert lines[4] == f"wrote {tmp_path / 'train.sweep.json'}, {tmp_path / 'train.sweep.md'}"
    assert "Feature sets" in out and "own" in out and "cls@-2" in out and "probe %" in out and "on 8 PCs %" in out
    assert [s["name"] for s in report["sets"]] == ["own", "cls@-2"] and report["rows"] == 200
    assert report["files"] == {"json": str(tmp_path / "train.sweep.json"), "markdown": str(tmp_path / "train.sweep.md")}
    md = (tmp_path / "train.sweep.md").read_text().splitlines()
    table = [x for x in md if x.startswith("| ")]
    assert len(table) == 3 and table[2].startswith("| cls@-2") and "`--pooling cls --layers -2`" in table[2]
    assert f"{100 * report['sets'][1]['probe']['accuracy']:.2f} ±" in table[2]
    before = (tmp_path / "train.sweep.json").read_bytes()
    assert main(args + ["-q"]) == 1
    assert capsys.readouterr().err.strip() == (f"Error: {tmp_path / 'train.sweep.json'} already exists - pass --overwrite "
                                               "to replace it, or -o with another name")
    assert (tmp_path / "train.sweep.json").read_bytes() == before
    assert main(args + ["-q", "--overwrite", "--seed", "5"]) == 0
    assert capsys.readouterr() == ("", "")
    assert json.loads((tmp_path / "train.sweep.json").read_text())["seed"] == 5


def test_cli_names_a_missing_label_column_as_label(tmp_path, small_csv, capsys):
    assert main(["sweep", str(small_csv), "--label", "sentiment", "-o", str(tmp_path / "s"), "-q"]) == 1
    assert capsys.readouterr().err.strip() == f"Error: {small_csv}: --label 'sentiment' is not a column - columns are: id, label, text"
    out = tmp_path / "x.parquet"
    assert main(["extract", str(small_csv), "--pca", "4", "--label", "sentiment", "-o", str(out), "-q"]) == 1
    assert capsys.readouterr().err.strip() == f"Error: {small_csv}: --label 'sentiment' is not a column - columns are: id, label, text"


def test_cli_an_empty_label_says_to_give_a_column_of_the_input(tmp_path, small_csv, capsys):
    """`--label ''` once said `give label="label"`, Python's spelling on the command line and no word of what a label
    is: the fix names the flag and what to give it, in sweep and extract alike."""
    fix = "give --label the name of the input's column that holds the labels, e.g. --label label"
    assert main(["sweep", str(small_csv), "--label", "", "-o", str(tmp_path / "s"), "-q"]) == 1
    assert capsys.readouterr().err == f"Error: --label '' is empty - {fix}\n"
    out = tmp_path / "x.parquet"
    assert main(["extract", str(small_csv), "--pca", "4", "--label", "", "-o", str(out), "-q"]) == 1
    assert capsys.readouterr().err == f"Error: --label '' is empty - {fix}\n"
    assert list(tmp_path.iterdir()) == []  # nothing written
    with pytest.raises(BertfeatError) as e:
        sweep(small_csv, ["own"], label=3)
    assert e.value.message == "label=3 is not a column name - give label the name of the input's column that holds " \
                              "the labels, e.g. label='label'"


# --------------------------------------------------------------------------- progress and the vector cache
def test_cli_shows_progress_of_reading_and_encoding(tmp_path, capsys, small_csv):
    """Not a terminal: the plain progress lines extract prints (rows, %), for the read and for the encode."""
    assert main(["sweep", str(small_csv), "--set", "mean", "--set", "cls", "--sample", "50", "-o",
                 str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err.splitlines()
    started = [x for x in err if x.startswith("bertfeat sweep: started")]
    assert started[0].startswith("bertfeat sweep: started (") and len(started) == 2  # reading, then encoding
    assert started[1] == "bertfeat sweep: started (50 rows)"  # one pass for both sets
    assert any(re.fullmatch(r"bertfeat sweep: 50 rows \(100\.0%\), .* elapsed", x) for x in err), err


def test_cached_sweep_stores_each_sets_vectors_as_extract_computes_them(tmp_path, capsys, small_csv, monkeypatch):
    from extract_util import embeddings, read_table, run, summary_line

    cache = tmp_path / "cache"
    names = ["own", "mean@-2", "cls", "pooled", "max"]
    first = sweep(small_csv, names, cache=cache, sample=500)
    assert (first["rows_encoded"], first["rows_cached"], first["cache"]) == (120, 0, str(cache))
    monkeypatch.setenv("BERTFEAT_CACHE", str(cache))  # the environment's cache, as extract takes it
    again = sweep(small_csv, names, sample=500)
    assert (again["rows_encoded"], again["rows_cached"]) == (0, 120)
    assert again["sets"] == first["sets"]
    off = sweep(small_csv, names, sample=500, cache=False)
    assert off["rows_encoded"] == 120 and off["cache"] is None
    monkeypatch.delenv("BERTFEAT_CACHE")
    for name, options in (("cls", ["--pooling", "cls"]), ("mean@-2", ["--pooling", "mean", "--layers=-2"]),
                          ("own", [])):
        out = tmp_path / f"{name}.parquet"
        rc, _, err = run(capsys, "extract", small_csv, "-o", out, "--cache", cache, *options)
        assert rc == 0, err
        assert summary_line(err, "rows encoded") == "rows encoded 0" and summary_line(err, "rows reused") == "rows reused 120"
        rc, _, err = run(capsys, "extract", small_csv, "-o", tmp_path / f"{name}.fresh.parquet", "--no-cache", *options)
        assert rc == 0, err  # the cached vectors are the ones extract computes: bit for bit
        assert np.array_equal(embeddings(read_table(out)), embeddings(read_table(tmp_path / f"{name}.fresh.parquet")))


def test_a_set_extracted_before_is_reused_and_the_others_encoded(tmp_path, capsys, small_csv):
    from extract_util import run

    cache = tmp_path / "cache"
    rc, _, err = run(capsys, "extract", small_csv, "-o", tmp_path / "m.parquet", "--cache", cache, "--pooling", "max")
    assert rc == 0, err
    r = sweep(small_csv, ["max"], cache=cache, sample=500)
    assert (r["rows_encoded"], r["rows_cached"]) == (0, 120)  # extract's vectors serve the sweep
    r = sweep(small_csv, ["max", "mean"], cache=cache, sample=500)
    assert (r["rows_encoded"], r["rows_cached"]) == (120, 0)  # mean was missing: its rows encoded (max's kept)
    assert sweep(small_csv, ["max", "mean"], cache=cache, sample=500)["rows_encoded"] == 0


def test_a_sweep_reads_what_extract_stored_under_another_max_length_or_long_text_policy(tmp_path, small_csv):
    """A sweep looks rows up as extract does (cache.store.spec_siblings): a row within both max lengths that extract
    stored under another max length and long-text policy is the same bits, so it is read, not encoded (before: the
    sweep read its own fingerprint only and encoded every row). Its report equals a sweep's without a cache, and what
    it stored is extract's vectors at its settings, bit for bit."""
    from extract_util import embeddings, read_table, rows_bit_for_bit

    import bertfeat

    cache = tmp_path / "cache"
    bertfeat.extract(small_csv, tmp_path / "m24.parquet", cache=cache, pooling="max", max_length=24)
    within = read_table(tmp_path / "m24.parquet").column("truncated").to_pylist().count(False)
    assert 40 < within < 120
    settings = dict(max_length=64, long_text="chunk-mean", stride=8)
    r = sweep(small_csv, ["max"], cache=cache, sample=500, **settings)
    assert (r["rows_encoded"], r["rows_cached"]) == (120 - within, within)
    assert r["sets"] == sweep(small_csv, ["max"], cache=False, sample=500, **settings)["sets"]
    s = bertfeat.extract(small_csv, tmp_path / "m64.parquet", cache=cache, pooling="max", **settings)
    assert (s.rows_encoded, s.rows_reused) == (0, 120)
    bertfeat.extract(small_csv, tmp_path / "fresh.parquet", cache=False, pooling="max", **settings)
    cached, fresh = embeddings(read_table(tmp_path / "m64.parquet")), embeddings(read_table(tmp_path / "fresh.parquet"))
    if rows_bit_for_bit():
        assert np.array_equal(cached.view(np.uint32), fresh.view(np.uint32))
    else:  # NOT_BIT_FOR_BIT: the rows were encoded in other batches
        np.testing.assert_allclose(cached, fresh, rtol=1e-5, atol=1e-6)


def test_a_read_only_cache_is_read_and_nothing_is_stored(tmp_path, small_csv, monkeypatch):
    """A cache this process may not write (a read-only mount, another user's folder; os.access says so): a sweep
    stopped with "cannot open the cache". Its sets' hits are read, the rest encoded, nothing stored, and it says so."""
    import os

    from bertfeat.cache.store import DB_NAME

    cache = tmp_path / "cache"
    sweep(small_csv, ["max"], cache=cache, sample=500)
    before = (cache / DB_NAME).read_bytes()
    real, told = os.access, []
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if mode & os.W_OK and str(p).startswith(str(cache))
                        else real(p, mode, *a, **k))
    r = sweep(small_csv, ["max", "mean"], cache=cache, sample=500, progress=told.append)
    assert (r["rows_encoded"], r["rows_cached"]) == (120, 0)  # mean's rows: max's were read
    assert (f"the cache {cache} is read-only (no permission to write {cache / DB_NAME}): the vectors it holds were "
            "reused, and the 120 this run encoded were not stored - give --cache a directory you can write to keep "
            "them") in told
    monkeypatch.undo()
    assert (cache / DB_NAME).read_bytes() == before
    assert sweep(small_csv, ["max", "mean"], cache=cache, sample=500)["sets"] == r["sets"]  # writable: the same sets


def test_one_set_by_name_and_a_bad_seed_or_input_are_refused_clearly(small_csv, tmp_path):
    """sweep(path, "own") once read the name letter by letter ("feature set 'o'"); a seed or input of the wrong type
    ended in NumPy's TypeError or a format guess."""
    with pytest.raises(BertfeatError, match="^seed='x' is out of range - give 0 or more$"):
        sweep(small_csv, ["own"], seed="x", sample=20)
    with pytest.raises(BertfeatError, match="^input is a NoneType, not a file path"):
        sweep(None, ["own"])
    with pytest.raises(BertfeatError, match="^label='' is empty - give label the name of the input's column"):  # was the bug line
        sweep(small_csv, ["own"], label="")
    report = sweep(small_csv, "own", sample=20, cache=False)
    assert [s["name"] for s in report["sets"]] == ["own"]


@pytest.mark.parametrize("sets,message", [
    (3, "sets=3 is not a feature set name or a list of them"),  # was len()'s TypeError
    ({"own", "cls"}, "sets={"),  # no order: the report's order would be the names' hashes
    (["own", None], "sets[1] is None (NoneType), not a feature set name"),  # was the set 'None': unknown pooling 'None'
])
def test_sets_that_are_not_names_are_refused_naming_them(small_csv, sets, message):
    with pytest.raises(BertfeatError) as e:
        sweep(small_csv, sets, sample=20, cache=False)
    assert e.value.message.startswith(message)
    assert e.value.message.endswith(" - give sets as a list of names, e.g. ['own', 'cls@-2', 'mean@-4:']")


def test_sets_as_a_generator_are_read_once(small_csv):
    report = sweep(small_csv, (name for name in ["own", "cls@-2"]), sample=20, cache=False)  # was len()'s TypeError
    assert [s["name"] for s in report["sets"]] == ["own", "cls@-2"]


def test_standard_input_without_a_prefix_is_told_sweeps_own_fix(capsys, monkeypatch):
    """`sweep -` without -o got extract's words ('needs -o OUTPUT - add -o features.parquet', a feature file sweep
    never writes): the fix names the report prefix. Nothing is read from standard input first."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"text\nhello\n")))
    assert main(["sweep", "-"]) == 1
    assert capsys.readouterr().err == ("Error: reading standard input needs -o PREFIX - add -o sweep (the report is "
                                       "written as sweep.json and sweep.md)\n")
    assert sys.stdin.read() == "text\nhello\n"
    with pytest.raises(BertfeatError) as e:
        default_prefix("-")
    assert e.value.message == ("reading standard input needs output='PREFIX' - add output='sweep' (the report is written "
                               "as sweep.json and sweep.md)")


def test_the_report_is_not_written_into_the_model_folder_or_the_cache(make_ckpt, tmp_path, small_csv, capsys):
    """`sweep -m MODEL -o MODEL/config --overwrite` replaced the model's config.json with the report (extract refuses an
    output there); the vector cache's folder likewise."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(make_ckpt(hidden=64, heads=4, layers=2, seed=11), model)
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    assert main(["sweep", str(small_csv), "-m", str(model), "--set", "mean", "-o", str(model / "config"), "--overwrite",
                 "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: the sweep report {model / 'config.json'} would be written inside the model "
                                       f"folder {model} - pass -o with a path outside it\n")
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before
    cache = tmp_path / "cache"
    with pytest.raises(BertfeatError) as e:
        sweep(small_csv, ["mean"], model=model, cache=cache, output=cache / "sweep", sample=20)
    assert e.value.message == (f"the sweep report {cache / 'sweep.json'} would be written inside the vector cache {cache} - "
                               "pass output with a path outside it")
    assert not cache.exists()
    rc = main(["sweep", str(small_csv), "-m", str(model), "--set", "mean", "--cache", str(model), "-o",
               str(tmp_path / "s"), "-q"])  # the cache's database among the model's files (found by audit)
    assert (rc, capsys.readouterr().err) == (1, f"Error: the cache {model} is the model folder {model} - give --cache a "
                                                "directory of its own, e.g. --cache bertfeat-cache\n")
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before


def test_too_few_rows_says_where_the_others_went(tmp_path, capsys):
    """Every row left out as too long (--long-text error --on-bad-row skip) was told as 'sweep an input with at least 2
    rows that have a label', though every row had one: the message counts the rows read, bad and unlabelled."""
    path = tmp_path / "long.csv"
    path.write_text("label,text\n" + "".join(f"{i % 2},{'word ' * 300}\n" for i in range(12)) + ",short\n")
    args = ["sweep", str(path), "--set", "mean", "--long-text", "error", "--max-length", "16", "-o", str(tmp_path / "s"),
            "-q"]
    assert main(args + ["--label", "label", "--on-bad-row", "skip"]) == 1
    assert capsys.readouterr().err == (f"Error: {path} gave 0 usable row(s) for the sweep (13 read, 12 bad rows left out, "
                                       "1 without a label) - sweep an input with at least 2 rows that have a label; drop "
                                       "--on-bad-row skip to see what is wrong with the first bad row\n")
    assert main(args + ["--on-bad-row", "skip"]) == 1
    assert capsys.readouterr().err == (f"Error: {path} gave 1 usable row(s) for the sweep (13 read, 12 bad rows left "
                                       "out) - sweep an input with at least 2 rows; drop --on-bad-row skip to see what is "
                                       "wrong with the first bad row\n")
    assert main(args) == 1  # what the fix says to do
    assert capsys.readouterr().err.startswith(f"Error: {path} row 0: 302 tokens, more than max length 16")
    assert not (tmp_path / "s.json").exists()


def test_a_label_of_another_kind_says_a_fix_sweep_takes(tmp_path, capsys):
    """A JSONL label column holding 1 and "1": the bad row's fix said to give the column's type in --keep, which sweep
    has not (its label is read by its first rows' kind)."""
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"text": f"text number {i}", "label": '1' if i == 3 else i % 2}) + "\n"
                            for i in range(12)))
    assert main(["sweep", str(path), "--set", "mean", "--label", "label", "-o", str(tmp_path / "s"), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {path} row 3: kept column 'label': \"1\" is a string, not an integer (the "
                                       "column's first rows hold integers) - fix the value (the column's values are of "
                                       "the kind its first rows hold), or pass --on-bad-row skip to leave it out of the "
                                       "sweep\n")


def _labelled_csv(path: Path, labels: list) -> Path:
    words = ["cat", "dog", "bird", "fish", "cow", "pig", "hen", "fox"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["label", "text"])
        w.writerows([label, f"text {i} about a {words[i % 8]} and a {words[i * 3 % 8]}"] for i, label in enumerate(labels))
    return path


def test_the_report_says_the_rows_left_out_and_the_classes(tmp_path, capsys):
    """Found by the seventh hostile-input round: rows without a label (an empty string) were left out and counted in the
    JSON alone; the Markdown and the table said "24 rows (a uniform sample, seed 0, of 36 read)", as if 24 had been drawn
    from 36, and named no class, so a label " " beside "a" and "b" was a third class unseen."""
    from extract_util import tiny_model

    path = _labelled_csv(tmp_path / "l.csv", ["a", "b", "", "a", " ", ""] * 6)
    assert main(["sweep", str(path), "--set", "mean", "--label", "label", "-m", str(tiny_model()), "-o",
                 str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    said = "24 rows (a uniform sample, seed 0, of 36 read; left out: 12 without a label)"
    assert said in " ".join(out.replace("│", " ").split())  # the table's caption, its lines joined
    md = (tmp_path / "s.md").read_text().splitlines()
    assert md[2].startswith(f"Model {tiny_model()} (fp32, max length 128); {said}; label `label`: 3 classes,")
    assert md[4] == "Classes (rows): ' ' 6, a 12, b 6."
    r = json.loads((tmp_path / "s.json").read_text())
    assert (r["rows"], r["rows_unlabelled"], r["class_counts"], r["notes"]) == (24, 12, {" ": 6, "a": 12, "b": 6}, [])


def test_classes_with_fewer_rows_than_folds_are_noted(tmp_path, capsys):
    """A class of one row (or fewer rows than folds) was probed without a word: its one row, never in its own training
    folds, is always missed. scikit-learn's StratifiedKFold warns of it; the sweep says it in the report, the JSON and
    on stderr."""
    from extract_util import tiny_model

    path = _labelled_csv(tmp_path / "l.csv", [0, 1] * 10 + [2, 3, 3])
    assert main(["sweep", str(path), "--set", "mean", "--label", "label", "-m", str(tiny_model()), "-o",
                 str(tmp_path / "s")]) == 0
    note = ("2 of 4 classes have fewer labelled rows than the 5 folds: 2 (1 row), 3 (2 rows); the probe can hardly "
            "learn them (a row whose class has no other row is always missed): sweep more rows of them, or fewer folds")
    assert f"note: {note}\n" in capsys.readouterr().err
    r = json.loads((tmp_path / "s.json").read_text())
    assert (r["class_counts"], r["notes"]) == ({"0": 10, "1": 10, "2": 1, "3": 2}, [note])
    md = (tmp_path / "s.md").read_text()
    assert "Classes (rows): 0 10, 1 10, 2 1, 3 2.\n" in md and f"\nNote: {note}.\n" in md
    assert main(["sweep", str(path), "--set", "mean", "--label", "label", "-m", str(tiny_model()), "-o",
                 str(tmp_path / "t"), "-q"]) == 0
    assert capsys.readouterr().err == ""  # -q: the notes are in the files


def test_an_output_prefix_given_as_bytes_is_refused_naming_it(small_csv, tmp_path):
    """Found by the API audit: sweep(input, output=b"sw") raised pathlib's TypeError, naming no parameter: refused
    as bertfeat.extract refuses output=b"...", before anything is read or written."""
    from extract_util import tiny_model

    prefix = bytes(tmp_path / "sw")
    with pytest.raises(BertfeatError) as e:
        sweep(small_csv, "mean", output=prefix, model=str(tiny_model()))
    assert e.value.message == f"output={prefix!r} is a bytes, not a string or a path - give output as a string or a path"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sets", ["", " ", ["own", ""]])
def test_an_empty_set_name_is_refused_naming_the_parameter(small_csv, tmp_path, capsys, sets):
    """Found by the API audit: sweep(input, "") said `name one such as set='mean@-2'`, a parameter sweep has not
    (it is ``sets``); the command line says --set, its flag."""
    from extract_util import run, tiny_model

    with pytest.raises(BertfeatError) as e:
        sweep(small_csv, sets, model=str(tiny_model()))
    assert e.value.message == "an empty feature set was given - name one such as sets='mean@-2'"
    names = [sets] if isinstance(sets, str) else sets
    flags = [a for name in names for a in ("--set", name)]
    rc, _, err = run(capsys, "sweep", small_csv, "-m", tiny_model(), "-o", tmp_path / "sw", "-q", *flags)
    assert (rc, err) == (1, "Error: an empty feature set was given - name one such as --set mean@-2\n")
    assert list(tmp_path.iterdir()) == []


def test_the_markdown_report_escapes_control_characters_and_pipes(tmp_path, capsys):
    """An input named with ESC, a line feed or a bidi control wrote them raw into PREFIX.md (`cat` on it cleared the
    terminal), and a '|' in a set's options (a prompt) split its table cell (found by the sweep audit); the console,
    the JSON and the summary escaped them already."""
    from extract_util import tiny_model

    d = tmp_path / "we\nird\x1b[2J\u202e"
    d.mkdir()
    path = _labelled_csv(d / "l.csv", ["a", "b"] * 10)
    assert main(["sweep", str(path), "--set", "own", "--set", "cls", "--prompt", "query | x: ", "-m", str(tiny_model()),
                 "-o", str(tmp_path / "s"), "-q"]) == 0
    md = (tmp_path / "s.md").read_text(encoding="utf-8")
    # shown as written, escaped as Markdown reads it (a backslash, a '[')
    assert md.startswith(f"# Feature sets of {tmp_path}/we\\\\nird\\\\x1b\\[2J\\\\u202e/l.csv\n\n")
    assert not any(c in md for c in "\x1b\u202e\r") and md.count("\n#") == 0
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 3 and all(len(re.findall(r"(?<!\\)\|", line)) == 7 for line in table)  # 6 cells each
    assert " --prompt 'query \\| x: '` | 32 | " in table[1]  # (the options' code span, then the width)


def test_a_label_that_is_the_text_column_is_refused(small_csv, capsys):
    """sweep --label text probed each text from its own features: 100 % accuracy for every set, without a word (found
    by the sweep audit); extract --label refuses it too (tests/readers/test_keep.py)."""
    from extract_util import tiny_model

    assert main(["sweep", str(small_csv), "--label", "text", "--set", "own", "-m", str(tiny_model()), "-q"]) == 1
    assert capsys.readouterr().err == (f"Error: {small_csv}: --label text is the text column (auto-detected), so the "
                                       "probe would predict each row's text from its own features - give --label the "
                                       "column that holds each row's class\n")


def test_a_repeated_text_is_encoded_once_as_extract_encodes_it(tmp_path):
    """A text repeated in the sample was encoded once per row: on NumPy's BLAS its copies came out a rounding apart,
    and the PCA and probe measured that noise (20 rows of one text: 3 components for 90 %, where extract and pca fit
    said 1; found by the sweep audit). Each distinct text is encoded once, as extract does, and the set's variance is
    that of extract's features."""
    from extract_util import tiny_model

    from bertfeat.features import read_features
    from bertfeat.pca.report import build_pca_report

    path = tmp_path / "r.csv"
    texts = [f"a short text about the number {i % 6}" for i in range(30)]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["label", "text"], *([i % 2, t] for i, t in enumerate(texts))])
    r = sweep(path, ["own"], label="label", model=tiny_model())
    assert (r["rows"], r["rows_encoded"]) == (30, 6)
    bertfeat_extract = __import__("bertfeat").extract
    s = bertfeat_extract(str(path), str(tmp_path / "o.parquet"), model=tiny_model(), quiet=True)
    assert (s.rows_encoded, s.rows_written) == (6, 30)
    _, X, _ = read_features(tmp_path / "o.parquet")
    want = build_pca_report(PCA(solver="covariance").fit(X), source={})["thresholds"]
    assert r["sets"][0]["thresholds"] == want
    assert want[0]["components"] <= 5  # 6 distinct rows: at most 5 components of variance


def test_rows_the_model_refuses_are_left_out_before_the_sample_is_drawn(small_csv, tmp_path):
    """--long-text error --on-bad-row skip: the sample was drawn first and its too-long rows cut after, so a sample of
    3 held 1 row or none ('gave 1 usable row(s) for the sweep (300 read, 2 bad rows left out)') where extract wrote
    72 (found by the sweep audit). The sample is drawn among the rows extract would encode, and the rows left out
    are counted over the whole input, as extract counts them."""
    from extract_util import tiny_model

    kw = dict(model=tiny_model(), max_length=16, long_text="error", on_bad_row="skip")
    s = __import__("bertfeat").extract(str(small_csv), str(tmp_path / "o.parquet"), quiet=True, **kw)
    assert 3 < s.rows_written < 100 and s.rows_rejected > 20
    r = sweep(small_csv, ["own"], sample=3, **kw)
    assert (r["rows"], r["rows_read"], r["rows_rejected"]) == (3, 120, s.rows_rejected)
    r = sweep(small_csv, ["own"], sample=1000, **kw)
    assert (r["rows"], r["rows_rejected"]) == (s.rows_written, s.rows_rejected)
    with pytest.raises(BertfeatError) as e:  # the first too-long row of the input, as extract names it
        sweep(small_csv, ["own"], sample=3, **kw | {"on_bad_row": "error"})
    with pytest.raises(BertfeatError) as f:
        __import__("bertfeat").extract(str(small_csv), str(tmp_path / "e.parquet"), quiet=True,
                                       **kw | {"on_bad_row": "error"})
    assert e.value.what == f.value.what


# Found by a review: -n K past what a set's PCA has (min(rows, features)) probed all it has and said K: "on 5000 PCs %",
# "best on the first 5000 PCs", "best on the first 5000 principal components" and the JSON's n_components 5000, where
# each set's probe.components was 40 (only the Markdown's cells said it); the default -n 64 did the same.
def _says_number(n, text):
    """Whether `text` shows `n` as a number of its own: not inside the model's hex fingerprint, a percentage or a path
    (pytest's /tmp/pytest-of-root/pytest-64/: the base folder's number grows run by run)."""
    return re.search(rf"(?<![\w/-])(?<!\d\.){n}(?![\w/-]|\.\d)", text) is not None


def test_the_probe_on_fewer_components_than_asked_says_the_number_used(tmp_path, small_csv, capsys):
    from extract_util import tiny_model

    args = ["sweep", str(small_csv), "--set", "mean", "--set", "cls", "--label", "label", "-m", str(tiny_model()),
            "--sample", "20"]  # the tiny model's sets have 32 features; 20 rows: 20 components
    assert main(args + ["-n", "5000", "-o", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    r = json.loads((tmp_path / "a.json").read_text())
    assert (r["n_components"], r["n_components_requested"]) == (20, 5000)
    assert [e["probe"]["components"] for e in r["sets"]] == [20, 20]
    note = ("the probe on principal components used 20 of the 5000 asked for (a set's PCA has no more components than "
            "the 20 rows compared or its features); sweep more rows for more")
    assert r["notes"] == [note] and f"note: {note}\n" in err
    table = " ".join(out.replace("│", " ").split())
    assert "on 20 PCs %" in table and "best on the first 20 PCs" in table and not _says_number(5000, out)
    how = {"mean": "--pooling mean", "cls": "--pooling cls"}
    assert f"best on the first 20 principal components: {r['best']}, bertfeat extract {how[r['best']]}" in err
    md = (tmp_path / "a.md").read_text()
    assert "| probe on 20 PCs % |" in md and f"\nNote: {note}.\n" in md

    assert main(args + ["-o", str(tmp_path / "b")]) == 0  # -n not given: 64, said as used, and no note
    out, err = capsys.readouterr()
    r = json.loads((tmp_path / "b.json").read_text())
    assert (r["n_components"], r["n_components_requested"], r["notes"], r["ranked_on"]) == (20, 64, [], "all")
    assert "on 20 PCs %" in out and not _says_number(64, out) and not _says_number(64, err)
    assert "| probe on 20 PCs % |" in (tmp_path / "b.md").read_text()


def test_sets_probed_on_different_numbers_of_components_say_each(tmp_path, small_csv, capsys):
    """-n 50 of 120 rows: mean has 32 features (32 components), two layers concatenated 64: probed on 32 and 50."""
    from extract_util import tiny_model

    assert main(["sweep", str(small_csv), "--set", "mean", "--set", "mean@-2:@concat", "--label", "label", "-m",
                 str(tiny_model()), "-n", "50", "-o", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    r = json.loads((tmp_path / "s.json").read_text())
    assert [e["probe"]["components"] for e in r["sets"]] == [32, 50]
    assert (r["n_components"], r["n_components_requested"]) == (50, 50)
    note = ("the probe on principal components used fewer than the 50 asked for on 1 of 2 sets: mean 32 (a set's PCA "
            "has no more components than the 120 rows compared or its features)")
    assert r["notes"] == [note] and f"note: {note}\n" in err
    table = " ".join(out.replace("│", " ").split())
    assert "on 32-50 PCs %" in table and "best on the first 32-50 PCs" in table
    assert f"{100 * r['sets'][0]['probe']['accuracy_pca']:.2f} (32)" in table
    assert f"{100 * r['sets'][1]['probe']['accuracy_pca']:.2f} (50)" in table
    assert f"best on the first 32-50 principal components: {r['best']}," in err
    assert "| probe on 32-50 PCs % |" in (tmp_path / "s.md").read_text()


@pytest.mark.parametrize("flags, said", [
    (["--set", "bogus"], "feature set 'bogus': unknown --pooling 'bogus' - choose one of pooled, cls, max, mean, "
                         "mean_sqrt_len_tokens, weightedmean, lasttoken, or token poolings joined with '+' such as "
                         "mean+max"),
    (["--set", "mean@-1@bogus"], "feature set 'mean@-1@bogus': unknown --layer-agg 'bogus' - choose one of mean, concat"),
    (["--set", "mean", "--long-text", "bogus"], "unknown --long-text 'bogus' - choose one of truncate, chunk-mean, "
                                                "chunk-max, error"),
])
def test_a_wrong_word_is_said_before_the_reports_that_exist(tmp_path, small_csv, capsys, flags, said):
    """Over an existing report, --set bogus said 'sw.json already exists - pass --overwrite', and doing so then said
    the pooling is unknown: the words the model does not decide are checked first, as extract's."""
    from extract_util import tiny_model

    base = ["sweep", str(small_csv), "-o", str(tmp_path / "sw"), "-m", str(tiny_model()), "-q", "--no-cache",
            "--sample", "20"]
    assert main(base + ["--set", "mean"]) == 0
    capsys.readouterr()
    for more in ([], ["--overwrite"]):
        assert main(base + flags + more) == 1
        assert capsys.readouterr() == ("", f"Error: {said}\n")


def test_class_names_read_as_written_in_the_markdown_report(tmp_path):
    """Labels *b* and <c> were written raw into the report: Markdown showed an italic b and dropped <c> as an HTML
    tag. Markdown's own characters are escaped (outside code spans, where a backslash would show)."""
    from extract_util import tiny_model

    path = tmp_path / "odd.csv"
    rows = rows_of(SAMPLE)[:60]
    for i, r in enumerate(rows):
        r["label"] = ("*b*", "<c>", "a_1")[i % 3]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["id", "label", "text"])
        w.writeheader()
        w.writerows(rows)
    sweep(path, ["cls"], label="label", model=tiny_model(), output=tmp_path / "r", cache=False)
    md = (tmp_path / "r.md").read_text()
    assert "Classes (rows): \\*b\\* 20, \\<c\\> 20, a_1 20." in md and "label `label`" in md
