"""`bertfeat extract` end to end through the real CLI: every input format, ids, pairs, output formats, provenance, --pca.

The output is read back with pyarrow / numpy and compared with ``Encoder.encode`` on the same
texts (<= 1e-6), row for row in input order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from bertfeat import __version__
from extract_util import (SENTENCES, assert_close, embeddings, metadata, minilm, no_leftovers, read_table, run,
                          summary_line, tiny_encoder, tiny_model, write_csv, write_jsonl)

IDS = [f"s{i:02d}" for i in range(len(SENTENCES))]


def test_csv_matches_encoder_in_input_order_with_ids_and_provenance(tmp_path, capsys):
    """The default model on a CSV with quoted commas, quotes, newlines, unicode; chunks of 5 rows."""
    src = write_csv(tmp_path / "corpus.csv", ["id", "text", "label"],
                    [[i, t, k % 3] for k, (i, t) in enumerate(zip(IDS, SENTENCES))])
    rc, _, err = run(capsys, "extract", src, "--id-column", "id", "--chunk-rows", 5, "--max-batch-tokens", 64)
    assert rc == 0, err
    out = tmp_path / "corpus.features.parquet"  # the default: beside the input
    t = read_table(out)
    assert t.column_names == ["id", "embedding", "n_tokens", "truncated", "n_chunks"]
    assert t.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    assert t.schema.field("n_tokens").type == pa.int32() and t.schema.field("n_chunks").type == pa.int32()
    assert t.column("id").to_pylist() == IDS

    enc = minilm()
    ref = enc.encode(SENTENCES, return_info=True)
    assert_close(embeddings(t), ref.features)
    assert t.column("n_tokens").to_pylist() == ref.n_tokens.tolist()
    assert t.column("truncated").to_pylist() == [False] * len(SENTENCES)
    assert t.column("n_chunks").to_pylist() == [1] * len(SENTENCES)
    assert no_leftovers(out) == ["corpus.features.parquet"]  # no partial dir, no temporary, no rejects file

    meta = metadata(out)
    assert meta["bertfeat_version"] == __version__
    assert meta["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["weights_sha256"] == enc.weights_sha256 and len(enc.weights_sha256) == 64
    assert (meta["pooling"], meta["layers"], meta["max_length"], meta["normalize"]) == ("mean", [6], 256, True)  # 2_Normalize
    assert meta["long_text"] == "truncate" and meta["pca"] is None
    assert (meta["input"], meta["input_format"], meta["text_column"], meta["id_column"]) == (str(src), "csv", "text", "id")
    assert meta["command"] == f"bertfeat extract {src} --id-column id --chunk-rows 5 --max-batch-tokens 64"
    assert meta["rows"] == {"read": 12, "written": 12, "rejected": 0, "truncated": 0, "chunked": 0, "encoded": 12, "reused": 0}
    assert meta["cache"] is None
    assert meta["tokens"] == {"total": int(ref.n_tokens.sum()), "dropped": 0}
    assert meta["fingerprint"]["weights_sha256"] == enc.weights_sha256

    assert summary_line(err, "rows read") == "rows read 12"
    assert summary_line(err, "rows written") == "rows written 12"
    assert summary_line(err, "rows rejected") == "rows rejected 0"
    assert summary_line(err, "features") == f"features {out}"


def test_the_summary_says_which_text_column_was_encoded_and_how_it_was_chosen(tmp_path, capsys):
    """Found by the audit: an upstream rename (text -> body) moved the detection to another column (review) without a
    word in the summary or --summary-json; both now name the column, and whether it was detected or given."""
    import bertfeat

    src = write_csv(tmp_path / "c.csv", ["id", "body", "review"], [[f"r{i}", f"body {i}", f"review {i}"] for i in range(6)])
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "a.parquet", "--model", tiny_model(), "--summary-json", "-")
    assert rc == 0, err
    assert summary_line(err, "text column") == "text column review (auto-detected)"
    assert [ln for ln in err.splitlines() if ln.startswith("text column")] == ["text column     review (auto-detected)"]
    s = json.loads(out)
    assert (s["text_column"], s["text_column_auto_detected"]) == ("review", True)
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "b.parquet", "--model", tiny_model(), "--text-column",
                       "body", "--summary-json", "-")
    assert rc == 0, err
    assert summary_line(err, "text column") == "text column body (given)"
    assert (json.loads(out)["text_column"], json.loads(out)["text_column_auto_detected"]) == ("body", False)
    summary = bertfeat.extract(str(src), output=str(tmp_path / "c.parquet"), model=str(tiny_model()), quiet=True)
    assert (summary.text_column, summary.text_column_auto_detected) == ("review", True)


def test_a_text_column_named_with_a_space_after_it_is_picked_and_shown_quoted(tmp_path, capsys):
    """A header written "id,text ": the CSV reader refused it ("cannot tell which column holds the text") where JSONL
    and Parquet picked it; now it is picked, and the summary quotes the name so that its space shows."""
    src = write_csv(tmp_path / "c.csv", ["id", "text "], [[f"r{i}", f"sentence {i}"] for i in range(3)])
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "a.parquet", "--model", tiny_model())
    assert rc == 0, err
    assert [ln for ln in err.splitlines() if ln.startswith("text column")] == ["text column     'text ' (auto-detected)"]


def test_tsv_default_row_numbers(tmp_path, capsys):
    """TSV (no quoting), the text column found by name ('sentence'), ids = 0-based row numbers."""
    texts = [s for s in SENTENCES if "\t" not in s and "\n" not in s and '"' not in s]
    src = write_csv(tmp_path / "c.tsv", ["n", "sentence"], [[k * 10, s] for k, s in enumerate(texts)], delimiter="\t")
    out = tmp_path / "feats.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", 4)
    assert rc == 0, err
    t = read_table(out)
    assert t.column_names[0] == "row" and t.schema.field("row").type == pa.int64()
    assert t.column("row").to_pylist() == list(range(len(texts)))
    assert_close(embeddings(t), tiny_encoder().encode(texts))
    assert metadata(out)["text_column"] == "sentence"


def _parquet_dataset(d, parts):
    d.mkdir()
    k = 0
    for j, part in enumerate(parts):
        pq.write_table(pa.table({"doc_id": pa.array([100 + i for i in range(k, k + len(part))], pa.int64()),
                                 "body": pa.array(part, pa.string()),
                                 "score": pa.array([0.5] * len(part), pa.float64())}),
                       d / f"part-{j}.parquet", row_group_size=2)
        k += len(part)


@pytest.mark.parametrize("name", ["report[1].csv", "q?.csv", "all*.csv"])
def test_a_file_named_with_wildcard_characters_is_that_file_not_a_pattern(tmp_path, capsys, name):
    """A file that exists as written is read as that file, and its features go beside it under its own name: a glob
    would have matched report1.csv (here a decoy with other texts) or nothing at all."""
    texts = SENTENCES[:5]
    pcsv.write_csv(pa.table({"text": texts}), tmp_path / name)
    (tmp_path / "report1.csv").write_text("text\nnot this one\n", encoding="utf-8")  # what report[1].csv matches as a glob
    (tmp_path / "qq.csv").write_text("text\nnor this one\n", encoding="utf-8")  # q?.csv
    rc, out, err = run(capsys, "extract", tmp_path / name, "--model", tiny_model())
    assert (rc, out) == (0, ""), err
    t = read_table(tmp_path / (name[:-len(".csv")] + ".features.parquet"))
    assert metadata(tmp_path / (name[:-len(".csv")] + ".features.parquet"))["rows"]["read"] == len(texts)
    assert_close(embeddings(t), tiny_encoder().encode(texts))
    # a pattern that names no file as written is still a glob: here it matches the decoys
    rc, _, err = run(capsys, "extract", str(tmp_path / "q[q].csv"), "-o", tmp_path / "g.parquet", "--model", tiny_model())
    assert rc == 0 and metadata(tmp_path / "g.parquet")["rows"]["read"] == 1, err


def test_a_glob_inside_a_folder_named_with_brackets_says_how_to_write_it(tmp_path, capsys):
    """A folder named data[2024] is read as that folder, but in data[2024]/*.parquet its [2024] is a wildcard (a
    shell's too): the pattern matches nothing, and the fix said only to check the pattern. It says how to write it."""
    d = tmp_path / "data[2024]"
    _parquet_dataset(d, [SENTENCES[:3]])
    pattern = f"{d}/*.parquet"
    rc, _, err = run(capsys, "extract", pattern, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
    escaped = f"{tmp_path}/data[[]2024]/*.parquet"
    assert (rc, err) == (1, f"Error: {pattern}: the pattern matches no file - {d} is a folder, but a pattern reads "
                            f"the [ in its name as a wildcard: write {escaped}\n")
    rc, _, err = run(capsys, "extract", escaped, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q")
    assert rc == 0 and metadata(tmp_path / "o.parquet")["rows"]["read"] == 3, err


@pytest.mark.parametrize("form", ["file", "glob", "directory"])
def test_parquet_file_glob_and_directory(tmp_path, capsys, form):
    """Parquet read by row groups; several files are one dataset (row numbers run on across files).
    The text column is the only string column ('body'); the int64 id column keeps its type."""
    texts = SENTENCES[:11]
    parts = [texts[:4], texts[4:7], texts[7:]] if form != "file" else [texts]
    _parquet_dataset(tmp_path / "data", parts)
    (tmp_path / "data" / "_SUCCESS").write_text("")  # marker files are not data
    (tmp_path / "data" / "README.txt").write_text("not parquet")
    arg = {"file": tmp_path / "data" / "part-0.parquet", "glob": str(tmp_path / "data" / "part-*.parquet"),
           "directory": tmp_path / "data"}[form]
    rc, _, err = run(capsys, "extract", arg, "--id-column", "doc_id", "--model", tiny_model(), "--chunk-rows", 3)
    assert rc == 0, err
    out = {"file": tmp_path / "data" / "part-0.features.parquet", "glob": tmp_path / "data.features.parquet",
           "directory": tmp_path / "data.features.parquet"}[form]
    t = read_table(out)
    assert t.schema.field("doc_id").type == pa.int64()
    assert t.column("doc_id").to_pylist() == [100 + i for i in range(len(texts))]
    assert_close(embeddings(t), tiny_encoder().encode(texts))
    assert metadata(out)["text_column"] == "body"
    assert metadata(out)["rows"]["read"] == len(texts)


def test_jsonl_string_ids_and_review_column(tmp_path, capsys):
    objs = [{"key": f"k{i}", "stars": i % 5, "review": t} for i, t in enumerate(SENTENCES)]
    src = write_jsonl(tmp_path / "r.jsonl", objs)
    out = tmp_path / "r.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--id-column", "key", "--model", tiny_model(), "--chunk-rows", 5)
    assert rc == 0, err
    t = read_table(out)
    assert t.column("key").to_pylist() == [o["key"] for o in objs]
    assert_close(embeddings(t), tiny_encoder().encode(SENTENCES))


def test_jsonl_integer_ids_keep_their_type(tmp_path, capsys):
    src = write_jsonl(tmp_path / "r.jsonl", [{"id": 10 * i, "text": t} for i, t in enumerate(SENTENCES[:5])])
    out = tmp_path / "r.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--id-column", "id", "--model", tiny_model(), "--chunk-rows", 2)
    assert rc == 0, err
    t = read_table(out)
    assert t.schema.field("id").type == pa.int64()
    assert t.column("id").to_pylist() == [0, 10, 20, 30, 40]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_stdin(tmp_path, fmt):
    """`-` reads standard input (a real pipe into a real process; Parquet is spooled to a temporary file)."""
    texts = SENTENCES[:6]
    if fmt == "csv":
        data = write_csv(tmp_path / "in.csv", ["id", "text"], list(zip(IDS, texts))).read_bytes()
    elif fmt == "parquet":
        pq.write_table(pa.table({"id": IDS[:6], "text": texts}), tmp_path / "in.parquet", row_group_size=4)
        data = (tmp_path / "in.parquet").read_bytes()
    else:
        data = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(IDS, texts)).encode()
    out = tmp_path / "o.parquet"
    p = subprocess.run(["bertfeat", "extract", "-", "--input-format", fmt, "-o", str(out),
                        "--id-column", "id", "--model", str(tiny_model()), "--chunk-rows", "4"],
                       input=data, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    t = read_table(out)
    assert t.column("id").to_pylist() == IDS[:6]
    assert_close(embeddings(t), tiny_encoder().encode(texts))
    assert metadata(out)["input"] == "-"


def test_stdin_needs_format_and_output(tmp_path, capsys):
    rc, _, err = run(capsys, "extract", "-", "-o", tmp_path / "o.parquet")
    assert (rc, err) == (1, "Error: reading standard input needs --input-format - add --input-format csv|tsv|jsonl|parquet\n")


def test_sentence_pairs(tmp_path, capsys):
    """--pair-column: (text, pair) with token type ids, as BERT expects for NLI."""
    a = ["A man is playing a guitar.", "A dog runs in the park.", "The cat sleeps.", "It is raining, again."]
    b = ["Someone plays music.", "An animal is outside.", "A kitten is awake.", "The weather is dry."]
    src = write_csv(tmp_path / "nli.csv", ["premise", "hypothesis"], list(zip(a, b)))
    out = tmp_path / "nli.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--text-column", "premise", "--pair-column", "hypothesis",
                     "--chunk-rows", 3)
    assert rc == 0, err
    t = read_table(out)
    enc = minilm()
    ref = enc.encode(a, b, return_info=True)
    assert_close(embeddings(t), ref.features)
    assert t.column("n_tokens").to_pylist() == ref.n_tokens.tolist()
    # the pair really is encoded as a pair, not as the first text alone or the two joined
    assert np.abs(embeddings(t) - enc.encode(a)).max() > 1e-3
    assert metadata(out)["pair_column"] == "hypothesis"


def test_npy_output_ids_sidecar_and_json_provenance(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["id", "text"], list(zip(IDS, SENTENCES)))
    out = tmp_path / "f.npy"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--id-column", "id", "--model", tiny_model(),
                     "--pooling", "cls", "--normalize", "--chunk-rows", 5)
    assert rc == 0, err
    X = np.load(out)
    assert X.dtype == np.float32 and X.shape == (12, 32)
    assert_close(X, tiny_encoder().encode(SENTENCES, pooling="cls", normalize=True))
    side = pcsv.read_csv(tmp_path / "f.ids.csv", convert_options=pcsv.ConvertOptions(column_types={"id": pa.string()}))
    assert side.column_names == ["id", "n_tokens", "truncated", "n_chunks"]
    assert side.column("id").to_pylist() == IDS
    meta = json.loads((tmp_path / "f.npy.json").read_text())
    assert (meta["pooling"], meta["normalize"], meta["rows"]["written"]) == ("cls", True, 12)
    assert meta["model"] == str(tiny_model()) or meta["model"].endswith(tiny_model().name)


def test_csv_output_and_wide_parquet(tmp_path, capsys):
    texts = SENTENCES[:5]
    src = write_csv(tmp_path / "c.csv", ["text"], [[t] for t in texts])
    ref = tiny_encoder().encode(texts, layers="-2,-1", layer_agg="concat")
    assert ref.shape == (5, 64)

    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "f.csv", "--model", tiny_model(), "--layers=-2,-1",
                     "--layer-agg", "concat")
    assert rc == 0, err
    t = pcsv.read_csv(tmp_path / "f.csv")
    assert t.column_names == ["row", "n_tokens", "truncated", "n_chunks"] + [f"f{j}" for j in range(64)]
    assert t.column("row").to_pylist() == list(range(5))
    X = np.stack([t.column(f"f{j}").to_numpy() for j in range(64)], axis=1)
    assert_close(X.astype(np.float32), ref, tol=1e-6)  # printed floats round-trip float32 exactly
    assert json.loads((tmp_path / "f.csv.json").read_text())["layers"] == [1, 2]

    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "w.parquet", "--model", tiny_model(), "--layers=-2,-1",
                     "--layer-agg", "concat", "--wide")
    assert rc == 0, err
    w = read_table(tmp_path / "w.parquet")
    assert w.column_names == ["row"] + [f"f{j}" for j in range(64)] + ["n_tokens", "truncated", "n_chunks"]
    assert all(w.schema.field(f"f{j}").type == pa.float32() for j in range(64))
    assert_close(np.stack([w.column(f"f{j}").to_numpy() for j in range(64)], axis=1), ref)


def test_pca_writes_reduced_features_model_and_report(tmp_path, capsys):
    from bertfeat.pca.estimator import PCA

    texts = [f"sentence number {i} about {w}" for i, w in enumerate(
        "cats dogs cars trains music art rivers mountains bread cheese rain snow code maths ships birds".split())]
    src = write_csv(tmp_path / "c.csv", ["text"], [[t] for t in texts])
    out = tmp_path / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", 8, "--chunk-rows", 5)
    assert rc == 0, err
    t = read_table(out)
    assert t.schema.field("embedding").type == pa.list_(pa.float32(), 8)
    full = tiny_encoder().encode(texts)
    pca = PCA.load(tmp_path / "f.pca.npz")
    assert pca.n_components_ == 8
    # the PCA is the exact PCA of this run's features, and the output is their projection
    ref = PCA(n_components=8, solver="svd").fit(full.astype(np.float64))
    assert np.allclose(np.abs(pca.components_), np.abs(ref.components_), atol=1e-5)
    assert_close(embeddings(t), pca.transform(full).astype(np.float32), tol=1e-5)
    for name in ("f.pca.report.json", "f.pca.report.md", "f.pca.report.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    meta = metadata(out)
    assert meta["pca"]["n_components"] == 8 and meta["pca"]["model_file"] == "f.pca.npz"
    assert summary_line(err, "pca_model") == f"pca_model {tmp_path / 'f.pca.npz'}"


def test_pca_variance_fraction(tmp_path, capsys):
    from bertfeat.pca.estimator import PCA

    texts = [f"{a} {b}" for a in "red green blue dark light".split() for b in "cat dog car tree sky river".split()]
    src = write_csv(tmp_path / "c.csv", ["text"], [[t] for t in texts])
    out = tmp_path / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", "0.9", "--chunk-rows", 7)
    assert rc == 0, err
    ratio = PCA(solver="svd").fit(tiny_encoder().encode(texts).astype(np.float64)).explained_variance_ratio_
    k = int(np.searchsorted(np.cumsum(ratio), 0.9, side="right")) + 1
    assert 1 < k < 32
    assert read_table(out).schema.field("embedding").type == pa.list_(pa.float32(), k)
    assert metadata(out)["pca"]["n_components"] == k
    assert metadata(out)["pca"]["explained_variance"] >= 0.9


def test_pca_more_components_than_dimensions_is_refused_up_front(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"]])
    out = tmp_path / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", 40)
    assert rc == 1
    assert err == ("Error: --pca 40 is more components than the 32 feature dimensions - "
                   "choose --pca 32 or fewer, or a variance fraction such as 0.95\n")
    assert no_leftovers(out) == []


def test_truncate_dim_keeps_the_first_features_and_pca_reduces_them(tmp_path, capsys):
    """--truncate-dim N writes each vector's first N features (a Matryoshka model's shorter embedding): recorded in
    the provenance and its fingerprint, checked by verify; --pca is fitted on the N kept features."""
    from bertfeat.pca.estimator import PCA

    texts = [f"sentence number {i} about {w}" for i, w in enumerate("cats dogs cars trains music art rivers bread "
                                                                   "cheese rain snow code maths ships birds".split())]
    src = write_csv(tmp_path / "c.csv", ["text"], [[t] for t in texts])
    full = tiny_encoder().encode(texts)
    out = tmp_path / "t.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--truncate-dim", 8, "--chunk-rows", 5)
    assert rc == 0, err
    assert read_table(out).schema.field("embedding").type == pa.list_(pa.float32(), 8)
    assert_close(embeddings(read_table(out)), full[:, :8])
    assert summary_line(err, "model").endswith("(pooling mean, dim 8)")
    meta = metadata(out)
    assert meta["fingerprint"]["truncate_dim"] == 8
    assert meta["pipeline"][-1] == "Truncate to the first 8 of 32 features (chosen)"
    assert run(capsys, "verify", out, "-q")[0] == 0
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "all.parquet", "--model", tiny_model(), "--truncate-dim",
                     32, "-q")
    assert rc == 0, err  # as many as there are: every feature, a plain run's (its fingerprint: its PCA models apply)
    assert_close(embeddings(read_table(tmp_path / "all.parquet")), full)
    assert "truncate_dim" not in metadata(tmp_path / "all.parquet")["fingerprint"]
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "p.parquet", "--model", tiny_model(), "--truncate-dim", 8,
                     "--pca", 4, "-q")
    assert rc == 0, err
    pca = PCA.load(tmp_path / "p.pca.npz")
    assert (pca.n_features_in_, pca.n_components_) == (8, 4)
    assert_close(embeddings(read_table(tmp_path / "p.parquet")), pca.transform(full[:, :8]).astype(np.float32), tol=1e-5)


@pytest.mark.parametrize("words, code, message", [
    (["--truncate-dim", "0"], 1, "Error: --truncate-dim 0 is out of range - choose 1 or more (the first features of "
     "each vector are kept), or leave it out for the default\n"),
    (["--truncate-dim", "33"], 1, "Error: --truncate-dim 33 is more than the 32 features of the model's embedding - "
     "choose --truncate-dim from 1 to 32 (its first features are kept), or leave it out\n"),
    (["--truncate-dim", "64", "--pooling", "cls"], 1, "Error: --truncate-dim 64 is more than the 32 features of the "
     "chosen pooling - choose --truncate-dim from 1 to 32 (its first features are kept), or leave it out\n"),
    (["--truncate-dim", "8", "--pca", "9"], 1, "Error: --pca 9 is more components than the 8 feature dimensions - "
     "choose --pca 8 or fewer, or a variance fraction such as 0.95\n"),
    (["--truncate-dim", "abc"], 2, "Error: --truncate-dim 'abc' is not a whole number - see bertfeat extract --help\n"),
])
def test_a_truncate_dim_outside_the_features_is_refused_and_writes_nothing(tmp_path, capsys, words, code, message):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"]])
    out = tmp_path / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), *words)
    assert (rc, err) == (code, message)  # 2: not a number, the command line does not parse
    assert no_leftovers(out) == []


def test_pca_more_components_than_rows_leaves_nothing(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"], ["b"], ["c"]])
    out = tmp_path / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", 8, "-q")
    assert rc == 1 and err.startswith("Error: ") and err.count("\n") == 1, err
    assert no_leftovers(out) == []


def test_output_is_a_directory(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["text"], [["a"]])
    (tmp_path / "d").mkdir()
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "d", "--model", tiny_model())
    assert (rc, err) == (1, f"Error: the output {tmp_path / 'd'} is a directory - pass -o with a file name, e.g. "
                            f"-o {tmp_path / 'd' / 'features.parquet'}\n")


def test_header_only_input_gives_an_empty_output(tmp_path, capsys):
    src = write_csv(tmp_path / "c.csv", ["id", "text"], [])
    out = tmp_path / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id")
    assert rc == 0, err
    t = read_table(out)
    assert t.num_rows == 0 and t.column_names == ["id", "embedding", "n_tokens", "truncated", "n_chunks"]


def test_compressed_csv(tmp_path, capsys):
    import gzip

    texts = SENTENCES[:4]
    plain = write_csv(tmp_path / "c.csv", ["text"], [[t] for t in texts])
    (tmp_path / "c.csv.gz").write_bytes(gzip.compress(plain.read_bytes()))
    rc, _, err = run(capsys, "extract", tmp_path / "c.csv.gz", "--model", tiny_model())
    assert rc == 0, err
    assert_close(embeddings(read_table(tmp_path / "c.features.parquet")), tiny_encoder().encode(texts))


def test_console_script_runs(tmp_path):
    """The installed `bertfeat` entry point (not only main())."""
    src = write_csv(tmp_path / "c.csv", ["text"], [["hello world"]])
    p = subprocess.run(["bertfeat", "extract", str(src), "--model", str(tiny_model()), "-q"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0 and p.stderr == "" and p.stdout == "", p.stderr
    assert read_table(tmp_path / "c.features.parquet").num_rows == 1


def test_python_dash_m_runs_the_same_cli(tmp_path):
    """`python -m bertfeat` is the bertfeat command: its help, and a failure as one `Error:` line with exit 1."""
    ok = subprocess.run([sys.executable, "-m", "bertfeat", "--version"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert __version__ in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "bertfeat", "extract", str(tmp_path / "missing.csv")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.startswith("Error: ") and "missing.csv" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_help_lists_every_precision_and_the_extra_by_name():
    """`extract --help` names each precision the command accepts (gemm.PRECISION_CHOICES) and the `fast` extra as
    it is installed (`bertfeat[fast]`: rich markup once swallowed the bracket, leaving "needs bertfeat")."""
    from bertfeat.ops.gemm import PRECISION_CHOICES

    p = subprocess.run([sys.executable, "-m", "bertfeat", "extract", "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "400", "NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr
    line = " ".join(p.stdout.split())  # one line, whatever the wrapping
    start = line.index("--precision")
    text = line[start:line.index("--cache", start)]
    assert all(f"{c} (" in text for c in PRECISION_CHOICES), text
    assert text.count("bertfeat[fast]") == 2, text


def test_normalize_help_says_what_the_default_is():
    """The default follows the model's Normalize module for its own embedding only: a chosen --pooling / --layers is
    not normalized unless asked (the help said "if the model has a Normalize module", true of neither alone)."""
    import typer.main

    from bertfeat.cli.app import app

    group = typer.main.get_command(app)
    helps = {name: next(p.help for p in group.commands[name].params if p.name == "normalize")
             for name in ("extract", "sweep")}
    assert helps["extract"] == ("L2-normalize each vector (default: the model's own embedding as its Normalize module "
                                "says; a chosen --pooling or --layers is not normalized).")
    assert "if the model has a Normalize module" not in " ".join(helps.values())


# --------------------------------------------------------------------------- --dtype float16
def _dtype_runs(tmp_path, capsys, name, *extra):
    """The same extract as float32 and as float16 -> (float32 path, float16 path)."""
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [[f"r{i}", s] for i, s in enumerate(SENTENCES * 3)])
    outs = []
    for dtype in ("float32", "float16"):
        out = tmp_path / dtype / name
        rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "-q",
                         "--dtype", dtype, *extra)
        assert rc == 0, err
        outs.append(out)
    return outs


@pytest.mark.parametrize("name, extra", [("f.parquet", ()), ("f.parquet", ("--wide",)), ("f.npy", ()), ("f.csv", ())])
def test_float16_output_is_the_float32_output_cast(tmp_path, capsys, name, extra):
    from bertfeat.features import read_features

    a, b = _dtype_runs(tmp_path, capsys, name, *extra)
    ids32, X32, m32 = read_features(a)
    ids16, X16, m16 = read_features(b)
    assert list(ids16) == list(ids32) and np.array_equal(X16, X32.astype(np.float16).astype(np.float32))
    assert (m32["dtype"], m16["dtype"]) == ("float32", "float16")
    if name == "f.npy":
        assert np.load(b).dtype == np.dtype("<f2") and b.stat().st_size - 128 == (a.stat().st_size - 128) // 2


def test_float16_pca_is_fitted_on_float32_and_its_output_cast(tmp_path, capsys):
    from bertfeat.features import read_features

    a, b = _dtype_runs(tmp_path, capsys, "f.parquet", "--pca", "4")
    ma, mb = (p.with_name("f.pca.npz") for p in (a, b))
    za, zb = np.load(ma), np.load(mb)
    for key in ("mean", "components", "spectrum"):
        assert np.array_equal(za[key], zb[key]), key
    _, X32, _ = read_features(a)
    _, X16, meta = read_features(b)
    assert np.array_equal(X16, X32.astype(np.float16).astype(np.float32)) and meta["pca"]["n_components"] == 4
    assert pq.read_schema(b).field("embedding").type.value_type == pa.float16()


@pytest.mark.parametrize("bad", ["float64", "bf16"])
def test_other_dtypes_are_refused(tmp_path, capsys, bad):
    src = write_csv(tmp_path / "in.csv", ["text"], [["a b"]])
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--dtype", bad)
    assert (rc, err) == (1, f"Error: unknown --dtype {bad} - choose one of float32, float16 (float16 halves the file)\n")
    assert list(tmp_path.iterdir()) == [src]
    import bertfeat
    from bertfeat.errors import BertfeatError

    with pytest.raises(BertfeatError, match=f"unknown dtype='{bad}'"):
        bertfeat.extract(src, tmp_path / "o.parquet", dtype=bad)


def test_float16_overflow_is_refused_before_the_output(tmp_path, capsys, monkeypatch):
    import bertfeat.run.chunks as chunks

    real = chunks.run_rows

    def huge(*a, **kw):  # features of a model gone wrong: one value beyond float16's range
        X = real(*a, **kw)
        X[X.shape[0] - 1, 0] = 1e5
        return X

    monkeypatch.setattr(chunks, "run_rows", huge)
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [[f"r{i}", s] for i, s in enumerate(SENTENCES)])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--dtype", "float16")
    last = f"r{len(SENTENCES) - 1}"
    assert rc == 1 and f"(id '{last}') has the feature value 100000" in err and "--dtype float32" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_dtype_in_help(capsys):
    rc, out, _ = run(capsys, "extract", "--help")
    assert rc == 0 and "--dtype" in out
