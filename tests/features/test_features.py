"""bertfeat.features: feature files (Parquet / .npy / .csv), streaming and atomic."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.errors import BertfeatError
from bertfeat.features import (
    FeatureWriter,
    feature_fingerprint,
    ids_sidecar_path,
    iter_features,
    open_features,
    provenance_path,
    read_feature_metadata,
    read_features,
)
from bertfeat.ops.threads import read_ahead

N, D = 1000, 12
META = {
    "version": "0.1.0",
    "model": "all-MiniLM-L6-v2",
    "fingerprint": {"model_id": "m", "weights_sha256": "ab", "pooling": "mean", "layers": [-1], "normalize": True},
    "pooling": "mean",
}
EXTRAS = {"n_tokens": pa.int32(), "truncated": pa.bool_(), "n_chunks": pa.int32()}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D)).astype(np.float32) * np.float32(3.7)
    ids = [f"doc-{i:04d}" for i in range(N)]
    extras = {
        "n_tokens": np.arange(N, dtype=np.int32) % 97,
        "truncated": np.arange(N) % 3 == 0,
        "n_chunks": np.ones(N, dtype=np.int32),
    }
    return ids, X, extras


def write_chunks(path, ids, X, extras, chunk=128, **kw):
    kw = {"dim": D, "id_name": "doc_id", "id_type": pa.string(), "metadata": META, "extra_columns": EXTRAS} | kw
    with FeatureWriter(path, **kw) as w:
        for i in range(0, len(X), chunk):
            w.write(ids[i : i + chunk], X[i : i + chunk], {k: v[i : i + chunk] for k, v in extras.items()})
            assert not path.exists()  # nothing at the destination before close
    return path


CASES = [("out.parquet", {}), ("wide.parquet", {"wide": True}), ("out.npy", {}), ("out.csv", {})]


@pytest.mark.parametrize("name,kw", CASES)
def test_round_trip(tmp_path, data, name, kw):
    ids, X, extras = data
    path = write_chunks(tmp_path / name, ids, X, extras, **kw)
    got_ids, got_X, meta = read_features(path)
    assert got_X.dtype == np.float32 and got_X.shape == (N, D)
    np.testing.assert_array_equal(got_X, X)  # exact, CSV included
    assert got_ids == ids
    assert meta["rows"] == N and meta["model"] == "all-MiniLM-L6-v2" and meta["fingerprint"] == META["fingerprint"]
    assert meta["layout"]["id_column"] == "doc_id" and meta["layout"]["dim"] == D
    assert read_feature_metadata(path) == meta
    # extras come back with their types and values, in order, when streamed in odd chunks
    seen = 0
    for chunk_ids, chunk_X, chunk_extras in iter_features(path, batch_rows=333, with_extras=True):
        assert len(chunk_ids) == chunk_X.shape[0] <= 333
        for col, typ in EXTRAS.items():
            assert chunk_extras[col].type == typ
            np.testing.assert_array_equal(chunk_extras[col].to_numpy(zero_copy_only=False), extras[col][seen : seen + len(chunk_ids)])
        seen += len(chunk_ids)
    assert seen == N
    # no temporary files are left behind
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_parquet_layout_and_metadata(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "f.parquet", ids, X, extras)
    schema = pq.read_schema(path)
    assert schema.names == ["doc_id", "embedding", "n_tokens", "truncated", "n_chunks"]
    assert schema.field("embedding").type == pa.list_(pa.float32(), D)
    assert schema.field("doc_id").type == pa.string()
    # the schema metadata itself carries the final row count (not the placeholder written at open)
    meta = json.loads(schema.metadata[b"bertfeat"])
    assert meta["rows"] == N and meta["layout"]["rows"] == N
    table = pq.read_table(path)
    np.testing.assert_array_equal(np.stack(table.column("embedding").to_pylist()).astype(np.float32), X)


def test_parquet_wide_columns(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "w.parquet", ids, X, extras, wide=True)
    schema = pq.read_schema(path)
    assert schema.names == ["doc_id", *[f"f{j}" for j in range(D)], "n_tokens", "truncated", "n_chunks"]
    assert all(schema.field(f"f{j}").type == pa.float32() for j in range(D))


def test_parquet_row_groups_are_bounded(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "rg.parquet", ids, X, extras, chunk=7, row_group_rows=300)
    md = pq.ParquetFile(path).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [300, 300, 300, 100]


def test_npy_layout(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "f.npy", ids, X, extras)
    arr = np.load(path)  # a plain .npy: NumPy reads it without bertfeat
    assert arr.dtype == np.float32 and arr.shape == (N, D)
    np.testing.assert_array_equal(arr, X)
    assert ids_sidecar_path(path).name == "f.ids.csv" and provenance_path(path).name == "f.npy.json"
    with open(ids_sidecar_path(path), newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["doc_id", "n_tokens", "truncated", "n_chunks"]
    assert rows[1] == ["doc-0000", "0", "true", "1"] and len(rows) == N + 1
    assert json.loads(provenance_path(path).read_text())["rows"] == N


IDS_FIX = ("put back the ids file written with f.npy (or re-extract the features), or delete it to read f.npy with "
           "row numbers as ids")


@pytest.mark.parametrize("provenance", [True, False])
def test_an_empty_or_short_ids_file_says_what_it_lacks_and_how_to_fix_it(tmp_path, capsys, provenance):
    """An empty f.ids.csv said `cannot read f.ids.csv as CSV (Empty CSV file) - pass a feature CSV written by
    bertfeat`: a fix for a file the user did not pass, nothing of what is missing. A short one said only that it did
    not have one row per row. Each names both files, what is missing and the two ways out now; deleting the ids file
    does read f.npy with row numbers as ids."""
    from extract_util import run

    path = tmp_path / "f.npy"
    with FeatureWriter(path, dim=3, metadata=META if provenance else None) as w:
        w.write([10, 11, 12, 13, 14], np.arange(15, dtype=np.float32).reshape(5, 3))
    side = ids_sidecar_path(path)
    full = side.read_text()
    cases = [("", f"{side}, the ids file of {path}, is empty (0 bytes): it should hold a header line naming its "
                  "columns, then one id per row of f.npy (5 rows)"),
             ("\n10\n", f"{side}, the ids file of {path}, has no header line (its first line is blank): it should "
                          "hold a header line naming its columns, then one id per row of f.npy (5 rows)"),
             ('"row"\n10\n11\n', f"{side} holds the ids of 2 rows, but {path} has 5 rows (its ids file needs one line "
                                   "per row)"),
             (full + "15\n", f"{side} holds more id rows than the 5 rows of {path} (its ids file needs one line per "
                             "row)")]
    for text, what in cases:
        side.write_text(text)
        with pytest.raises(BertfeatError) as e:
            list(iter_features(path, batch_rows=2))
        assert str(e.value) == f"{what} - {IDS_FIX}"
    side.write_text("")
    rc, _, err = run(capsys, "pca", "fit", path, "-n", "2", "-o", tmp_path / "m.npz", "-q")
    assert rc == 1 and err == f"Error: {cases[0][1]} - {IDS_FIX}\n" and not (tmp_path / "m.npz").exists()
    side.unlink()
    ids, X, _ = read_features(path)
    assert list(ids) == [0, 1, 2, 3, 4] and X.shape == (5, 3)


def test_csv_layout(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "f.csv", ids, X, extras)
    with open(path, newline="") as f:
        header = next(csv.reader(f))
    assert header == ["doc_id", "n_tokens", "truncated", "n_chunks", *[f"f{j}" for j in range(D)]]
    assert json.loads(provenance_path(path).read_text())["layout"]["format"] == "csv"


def test_default_row_ids_and_metadata_update(tmp_path):
    X = np.arange(20, dtype=np.float32).reshape(10, 2)
    with FeatureWriter(tmp_path / "r.parquet", dim=2, metadata={"rows": None, "model": "x"}) as w:
        w.write(None, X[:4])
        w.write(None, X[4:])
        path = w.close({"rows": {"read": 11, "written": 10}, "pca": {"n_components": 2}})
    ids, got, meta = read_features(path)
    np.testing.assert_array_equal(ids, np.arange(10))
    assert ids.dtype == np.int64
    assert meta["rows"] == {"read": 11, "written": 10} and meta["pca"] == {"n_components": 2}
    assert meta["layout"]["rows"] == 10 and meta["layout"]["id_column"] == "row"


@pytest.mark.parametrize("name", ["x.parquet", "x.npy", "x.csv"])
def test_exception_inside_context_leaves_nothing(tmp_path, name):
    path = tmp_path / name
    with pytest.raises(RuntimeError):
        with FeatureWriter(path, dim=3) as w:
            w.write(None, np.ones((5, 3)))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_abort_keeps_an_existing_file(tmp_path):
    path = tmp_path / "keep.parquet"
    with FeatureWriter(path, dim=2) as w:
        w.write(None, np.zeros((3, 2)))
    before = path.read_bytes()
    w = FeatureWriter(path, dim=2)
    w.write(None, np.ones((8, 2)))
    assert path.read_bytes() == before  # until close, the old file is untouched
    w.abort()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.parquet"]


def test_writer_copies_caller_buffers(tmp_path):
    buf = np.zeros((4, 3), dtype=np.float32)
    with FeatureWriter(tmp_path / "b.parquet", dim=3) as w:
        for i in range(3):
            buf[:] = i
            w.write(None, buf)  # the caller reuses its buffer; buffered rows must not change
    _, X, _ = read_features(tmp_path / "b.parquet")
    np.testing.assert_array_equal(X[:, 0], np.repeat([0, 1, 2], 4))


def test_streaming_reads_parquet_in_batches(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "s.parquet", ids, X, extras, row_group_rows=100)
    sizes = [x.shape[0] for _, x in iter_features(path, batch_rows=64)]
    assert max(sizes) <= 64 and sum(sizes) == N and len(sizes) >= N // 64


def test_parquet_batches_stay_inside_row_groups_and_are_views(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "g.parquet", ids, X, extras, row_group_rows=300)
    got = list(open_features(path).batches(250))
    # row groups of 300, 300, 300, 100: batches of at most 250 that never span two groups
    assert [x.shape[0] for _, x, _ in got] == [250, 50, 250, 50, 250, 50, 100]
    np.testing.assert_array_equal(np.concatenate([x for _, x, _ in got]), X)
    assert list(np.concatenate([i for i, _, _ in got])) == list(ids)
    assert not got[0][1].flags.owndata  # X views the Arrow buffer, no copy


def test_batches_read_ahead_match_and_close(tmp_path, data):
    ids, X, extras = data
    path = write_chunks(tmp_path / "a.parquet", ids, X, extras, row_group_rows=100)
    src = open_features(path)
    plain = [x for _, x, _ in src.batches(64)]
    ahead = [x for _, x, _ in src.batches(64, ahead=2)]
    assert len(plain) == len(ahead) == 20
    for a, b in zip(plain, ahead):
        np.testing.assert_array_equal(a, b)
    # leaving early stops the reader thread
    import threading

    it = src.batches(64, ahead=1)
    next(it)
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "bertfeat-read-ahead"]


def test_read_ahead_passes_errors_in_order():
    def items():
        yield 1
        yield 2
        raise BertfeatError("row 2 is bad", "fix it")

    got = []
    with pytest.raises(BertfeatError, match="row 2 is bad"):
        for x in read_ahead(items(), depth=1):
            got.append(x)
    assert got == [1, 2]


def test_read_ahead_closes_its_source_when_left_early():
    """Closed early, read_ahead's thread closes the source generator (its finally blocks run now: a CSV reader's
    stream is closed before exit, readers/arrowexit.py), not when the caller's frames happen to be freed."""
    state = []

    def items():
        try:
            for i in range(1000):
                yield i
        finally:
            state.append("closed")

    src = items()  # still referenced after the loop (as a traceback's frames keep it)
    it = read_ahead(src, depth=2)
    assert next(it) == 0
    it.close()
    assert state == ["closed"]
    assert src.gi_frame is None  # finished


def test_foreign_parquet_without_metadata(tmp_path):
    X = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    pq.write_table(pa.table({"key": ["a", "b", "c", "d", "e"], **{f"f{j}": X[:, j] for j in range(4)}, "label": [1, 0, 1, 0, 1]}), tmp_path / "foreign.parquet")
    src = open_features(tmp_path / "foreign.parquet")
    assert (src.id_name, src.dim, src.wide, list(src.extra_columns)) == ("key", 4, True, ["label"])
    ids, got, meta = read_features(tmp_path / "foreign.parquet")
    assert ids == ["a", "b", "c", "d", "e"] and meta == {}
    np.testing.assert_array_equal(got, X)


def test_npy_without_sidecar_uses_row_numbers(tmp_path):
    X = np.arange(12, dtype=np.float64).reshape(4, 3)
    np.save(tmp_path / "plain.npy", X)
    ids, got, meta = read_features(tmp_path / "plain.npy")
    np.testing.assert_array_equal(ids, np.arange(4))
    assert got.dtype == np.float32 and meta == {}


# --------------------------------------------------------------------------- a foreign file's float64 beyond float32
def _float64_files(tmp_path, X):
    """X (float64) as a .npy, a Parquet embedding column and wide Parquet columns (a CSV's text is read as float32
    by Arrow itself)."""
    np.save(tmp_path / "x.npy", X)
    pq.write_table(pa.table({"embedding": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])}),
                   tmp_path / "x.parquet", row_group_size=4)
    pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])}), tmp_path / "w.parquet", row_group_size=4)
    return [tmp_path / n for n in ("x.npy", "x.parquet", "w.parquet")]


def test_float64_beyond_float32_is_refused_by_row_and_column(tmp_path):
    """Every feature file is read as float32: a float64 value past 3.4e38 became inf, and the PCA then blamed "NaN or
    inf" the file does not hold (with NumPy's overflow warning). Refused naming its row and column; in range, read
    as the float32 cast."""
    X = np.random.default_rng(3).standard_normal((10, 3))
    for path in _float64_files(tmp_path, X):
        np.testing.assert_array_equal(read_features(path)[1], X.astype(np.float32))
    X[6, 2] = -5e40
    for path in _float64_files(tmp_path, X):
        with pytest.raises(BertfeatError) as e:
            list(iter_features(path, batch_rows=3))
        assert str(e.value) == (f"{path}: row 6, column 2 holds -5e+40, beyond float32's range (|x| < 3.4e38), in which "
                                "bertfeat reads features - scale the features into that range, or write them as float32")


def _edited_csv(tmp_path, name, cell, dtype="float32"):
    """A bertfeat CSV of 6 rows (ids 10..15), a blank line after its 2nd row, the cell of row 4, column f1 replaced
    by ``cell`` as a user's editor writes it."""
    path = tmp_path / name
    with FeatureWriter(path, dim=3, dtype=dtype) as w:
        w.write([10, 11, 12, 13, 14, 15], np.arange(18, dtype=np.float32).reshape(6, 3))
    lines = path.read_text().splitlines()
    lines[5] = lines[5].replace(",13,", f",{cell},")  # row 4: 14,12,13,14
    lines.insert(3, "")  # Arrow skips a blank line: no row
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("cell", ["1e39", "-3.5e38", "1" + "0" * 40])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_csv_number_beyond_float32_is_refused_as_written(tmp_path, cell, dtype):
    """A feature CSV's cell 1e39 overflowed float32 to inf as Arrow read it, and the PCA then refused features
    holding "NaN or inf" at "column 1 (inf)": a value the file does not hold (a float16 CSV's said 1e+39). Refused
    by the reader now, naming the file, row (0-based data row, blank lines skipped), column and the text."""
    path = _edited_csv(tmp_path, "e.csv", cell, dtype)
    for rows in (2, 100):  # in a later chunk, and in the first
        with pytest.raises(BertfeatError) as e:
            list(iter_features(path, batch_rows=rows))
        assert str(e.value) == (f"{path}: row 4, column 'f1' holds {cell!r}, beyond float32's range (|x| < 3.4e38), "
                                "in which bertfeat reads features - write a number within that range there (scale the "
                                "features into it), or re-extract the features")


def test_a_csv_cell_written_as_inf_is_read_as_inf(tmp_path):
    """An infinity written as such is no overflow: read as written (the PCA refuses it, naming it)."""
    ids, X, _ = read_features(_edited_csv(tmp_path, "i.csv", "-inf"))
    assert list(ids) == [10, 11, 12, 13, 14, 15] and X[4, 1] == -np.inf and np.isfinite(np.delete(X.ravel(), 13)).all()


@pytest.mark.parametrize("kind", ["fixed", "variable"])
def test_a_null_inside_a_parquet_embedding_is_refused_by_row_and_column(tmp_path, kind):
    """A null among an embedding's values was read as NaN, and the PCA refused "NaN or inf ... (nan)", a NaN the file
    does not hold. Refused by the reader now: the file, the row, the column and the value's position."""
    values = np.arange(18, dtype=np.float32).tolist()
    values[4 * 3 + 1] = None  # row 4, value 1
    child = pa.array(values, pa.float32())
    emb = (pa.FixedSizeListArray.from_arrays(child, 3) if kind == "fixed"
           else pa.ListArray.from_arrays(pa.array(range(0, 19, 3), pa.int32()), child))
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"row": pa.array(range(10, 16)), "embedding": emb}), path, row_group_size=3)
    meta = {"layout": {"dim": 3}}  # a list of any length: its length from the provenance
    pq.write_table(pq.read_table(path).replace_schema_metadata({"bertfeat": json.dumps(meta)}), path, row_group_size=3)
    for rows in (2, 100):
        with pytest.raises(BertfeatError) as e:
            list(iter_features(path, batch_rows=rows))
        assert str(e.value) == (f"{path}: row 4, column 'embedding': its value 1 (of 3, counted from 0) is null, not a "
                                "number - write a number there (every value of an embedding is a feature), or "
                                "re-extract the features")


def test_an_npy_of_another_type_is_named_with_its_article(tmp_path):
    for dtype, said in ((np.int64, "an int64"), (np.uint8, "a uint8")):
        np.save(tmp_path / "i.npy", np.zeros((2, 3), dtype))
        with pytest.raises(BertfeatError, match=rf"i\.npy holds {said} array of shape \(2, 3\), not \(rows, d\) floats - "):
            open_features(tmp_path / "i.npy")


def test_feature_fingerprint():
    assert feature_fingerprint(META) == META["fingerprint"]
    assert feature_fingerprint({"model_id": "m", "pooling": "cls", "other": 1}) == {"model_id": "m", "pooling": "cls"}
    assert feature_fingerprint({}) is None


# -- errors ---------------------------------------------------------------------------------------


def _message(fn) -> str:
    with pytest.raises(BertfeatError) as e:
        fn()
    return e.value.message


def test_error_missing_file(tmp_path):
    path = tmp_path / "nope.parquet"
    expected = f"feature file not found: {path} - check the path, or write it with `bertfeat extract`"
    assert _message(lambda: read_features(path)) == expected
    assert _message(lambda: read_feature_metadata(path)) == expected
    assert _message(lambda: list(iter_features(path))) == expected


def test_error_no_feature_columns(tmp_path):
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), tmp_path / "t.parquet")
    assert _message(lambda: read_features(tmp_path / "t.parquet")) == (
        f"{tmp_path / 't.parquet'} has no feature columns: expected 'embedding' or f0..f{{d-1}}, found ['id', 'text'] - "
        "pass a feature file written by `bertfeat extract`"
    )


def test_error_bad_chunks(tmp_path):
    w = FeatureWriter(tmp_path / "e.parquet", dim=4, extra_columns={"n_tokens": pa.int32()})
    assert _message(lambda: w.write(None, np.zeros((2, 3)))) == "feature chunk has shape (2, 3), expected (rows, 4) - pass a 2-D array with 4 columns"
    assert _message(lambda: w.write([1, 2, 3], np.zeros((2, 4)))) == "column 'row' has 3 values for 2 feature rows - pass one value per row"
    assert _message(lambda: w.write(None, np.zeros((2, 4)), {"oops": [1, 2]})) == (
        "extra column(s) ['oops'] were not declared - list them in extra_columns= when creating the FeatureWriter"
    )
    w.abort()
    assert list(tmp_path.iterdir()) == []
    assert _message(lambda: FeatureWriter(tmp_path / "z.parquet", dim=0)) == "FeatureWriter needs the feature width dim >= 1, got 0 - pass dim=d"
    assert _message(lambda: FeatureWriter(tmp_path / "z.parquet", fmt="hdf5", dim=2)) == "unknown feature format 'hdf5' - use one of: parquet, npy, csv"


@pytest.mark.parametrize("wide", [False, True])
def test_parquet_feature_columns_are_plain_floats_without_a_dictionary(tmp_path, wide):
    """Float features are nearly all distinct: a dictionary page for them filled to pyarrow's limit and was written
    beside the plain pages (files 1.5x the floats' bytes, written 25x slower). The ids and kept columns keep it."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 64)).astype(np.float32)
    ids = [f"doc-{i % 50}" for i in range(3000)]  # repeats: worth a dictionary
    path = tmp_path / "f.parquet"
    with FeatureWriter(path, dim=64, id_name="doc_id", id_type=pa.string(), wide=wide) as w:
        w.write(ids, X)
    meta = pq.ParquetFile(path).metadata
    encodings = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).encodings
                 for i in range(meta.row_group(0).num_columns)}
    features = [k for k in encodings if k != "doc_id"]
    assert len(features) == (64 if wide else 1)
    assert all("RLE_DICTIONARY" not in encodings[k] and "PLAIN_DICTIONARY" not in encodings[k] for k in features), encodings
    assert "RLE_DICTIONARY" in encodings["doc_id"]
    assert path.stat().st_size < 1.05 * X.nbytes  # the floats, plus little
    np.testing.assert_array_equal(read_features(path)[1], X)


# --------------------------------------------------------------------------- float16 features (dtype)
def _float16_matrix() -> np.ndarray:
    """float32 features over float16's whole range: tiny (subnormal), large (65504), and ordinary values."""
    rng = np.random.default_rng(3)
    X = (rng.standard_normal((300, 6)) * np.logspace(-6, 4, 6)).astype(np.float32)
    X[0, 0], X[1, 1], X[2, 2] = 65504, -1e-8, -65504
    return X


@pytest.mark.parametrize("name, kw", [("f.parquet", {}), ("w.parquet", {"wide": True}), ("f.npy", {}), ("f.csv", {})])
def test_float16_round_trips_to_the_float32_cast(tmp_path, name, kw):
    from bertfeat.features import FeatureWriter, open_features, read_features

    X = _float16_matrix()
    path = tmp_path / name
    with FeatureWriter(path, dim=6, dtype="float16", **kw) as w:
        w.write(None, X[:120])
        w.write(None, X[120:])
    ids, Y, meta = read_features(path)
    assert Y.dtype == np.float32 and np.array_equal(Y, X.astype(np.float16).astype(np.float32))
    assert meta["dtype"] == "float16" and open_features(path).dtype == "float16" and list(ids) == list(range(300))
    if name == "f.parquet":
        assert str(pq.read_schema(path).field("embedding").type) == "fixed_size_list<element: halffloat>[6]"
    if name == "w.parquet":
        assert pq.read_schema(path).field("f0").type == pa.float16()
    if name == "f.npy":
        raw = np.load(path)
        assert raw.dtype == np.dtype("<f2") and raw.shape == (300, 6) and path.stat().st_size == 128 + 300 * 6 * 2
    if name == "f.csv":  # the shortest text that reads back to the same float16
        first = path.read_text().splitlines()[1].split(",")
        assert first[1] == "65500"  # not float32's text of the same value
        assert [float(v) for v in first[1:]] == [float(str(x)) for x in X[0].astype(np.float16)]


def test_float32_default_is_unchanged(tmp_path):
    from bertfeat.features import FeatureWriter

    X = _float16_matrix()
    with FeatureWriter(tmp_path / "f.npy", dim=6) as w:
        w.write(None, X)
    assert np.load(tmp_path / "f.npy").dtype == np.dtype("<f4")
    assert (tmp_path / "f.npy").read_bytes()[128:] == X.tobytes()


@pytest.mark.parametrize("name", ["f.parquet", "f.npy", "f.csv"])
def test_float16_overflow_is_refused_naming_the_row_and_nothing_is_left(tmp_path, name):
    from bertfeat.features import FeatureWriter

    X = _float16_matrix()
    X[205, 3] = -70000.0
    path = tmp_path / name
    with pytest.raises(BertfeatError) as e:
        with FeatureWriter(path, dim=6, dtype="float16", id_name="id", id_type=pa.string()) as w:
            w.write([f"k{i}" for i in range(200)], X[:200])
            w.write([f"k{i}" for i in range(200, 300)], X[200:])
    assert "row 205 (id 'k205')" in e.value.message and "-70000" in e.value.message and "inf" in e.value.message
    assert "float32" in e.value.fix
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("error::RuntimeWarning")  # NumPy's overflow warning of a float16 cast
def test_wide_columns_of_mixed_float_types_read_each_as_its_own(tmp_path):
    """A wide Parquet whose f0 alone is float16 (edited, or written by another tool): the float16 of f0 was taken as
    the whole file's, so every float32 column was rounded to float16 (0.004 off, the PCA fitted on that without a
    word), and a float32 value past 65504 read as inf ("features contain NaN or inf", under NumPy's overflow
    warning). Each column is read as its own type; a float16 CSV's text is still rounded to float16, but a value
    float16 cannot hold is read as written."""
    X = np.random.default_rng(5).standard_normal((20, 4)).astype(np.float32) * np.float32(3.3)
    X[7, 2] = 1e5
    columns = {"f0": pa.array(X[:, 0].astype(np.float16))} | {f"f{j}": pa.array(X[:, j]) for j in range(1, 4)}
    pq.write_table(pa.table(columns), tmp_path / "w.parquet")
    want = X.copy()
    want[:, 0] = X[:, 0].astype(np.float16)
    assert open_features(tmp_path / "w.parquet").dtype == "float16"
    np.testing.assert_array_equal(read_features(tmp_path / "w.parquet")[1], want)
    with FeatureWriter(tmp_path / "h.csv", dim=4, dtype="float16") as w:
        w.write(None, X.clip(-60000, 60000))
    rows = list(csv.reader((tmp_path / "h.csv").open(newline="")))
    assert rows[0] == ["row", "f0", "f1", "f2", "f3"]
    rows[8][3] = "100000"  # row 7's f2, edited past float16's range
    with (tmp_path / "h.csv").open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    back = read_features(tmp_path / "h.csv")[1]
    assert back[7, 2] == 1e5
    np.testing.assert_array_equal(np.delete(back, 7, 0), np.delete(X, 7, 0).astype(np.float16).astype(np.float32))


def test_unknown_dtype_is_refused(tmp_path):
    from bertfeat.features import FeatureWriter

    for bad in ("float64", "bf16"):
        with pytest.raises(BertfeatError, match="float32, float16"):
            FeatureWriter(tmp_path / "f.parquet", dim=2, dtype=bad)


def test_an_empty_npy_is_named_as_such(tmp_path):
    """An empty .npy (a copy cut short) once raised numpy's EOFError: "No data left in file"."""
    from bertfeat.errors import BertfeatError
    from bertfeat.features import read_features

    path = tmp_path / "z.npy"
    path.write_bytes(b"")
    with pytest.raises(BertfeatError) as e:
        read_features(path)
    assert str(e.value) == f"{path}: the feature file is empty (0 bytes) - pass a complete file (rerun the command that wrote it)"


def _npy_declaring(path, raw: bytes, shape: str) -> None:
    """``raw`` (bertfeat's .npy: a 128-byte header) with its header's shape replaced by ``shape``, same length."""
    head = raw[:128].decode("latin1")
    text = re.sub(r"'shape': \([^)]*\)", f"'shape': {shape}", head[10:].rstrip())
    path.write_bytes(raw[:10] + (text.ljust(117) + "\n").encode("latin1") + raw[128:])


def test_a_npy_whose_header_does_not_fit_its_bytes_is_named(tmp_path):
    """A .npy cut short, or whose header declares another shape than its bytes hold (edited), was numpy's "mmap length
    is greater than file size" ('pass a feature file'), and a negative dimension an "unexpected OverflowError" (a bug
    report); a header NumPy cannot parse, its own message. The header is read and checked against the file's bytes
    before NumPy maps it."""
    from bertfeat.features import read_features

    with FeatureWriter(tmp_path / "x.npy", dim=4) as w:
        w.write(None, np.ones((10, 4), np.float32))
    raw = (tmp_path / "x.npy").read_bytes()
    cut, neg, big, garbled = (tmp_path / n for n in ("cut.npy", "neg.npy", "big.npy", "garbled.npy"))
    cut.write_bytes(raw[:-20])
    _npy_declaring(neg, raw, "(10, -4)")
    _npy_declaring(big, raw, "(10000000000, 4)")
    _npy_declaring(garbled, raw, "(10, 4")
    fix = "pass a complete file (rerun the command that wrote it)"
    for path, why in ((cut, "its header declares shape (10, 4) of float32 (160 bytes), but the file holds 140 bytes "
                            "after it: the file is cut short"),
                      (neg, "its header declares shape (10, -4), which no array has"),
                      (big, "its header declares shape (10000000000, 4) of float32 (160,000,000,000 bytes), but the "
                            "file holds 160 bytes after it: the file is cut short"),
                      (garbled, "its header cannot be read (")):
        with pytest.raises(BertfeatError) as e:
            read_features(path)
        assert e.value.message.startswith(f"{path}: not a readable .npy file: {why}") and e.value.fix == fix, str(e.value)
    np.testing.assert_array_equal(read_features(tmp_path / "x.npy")[1], np.ones((10, 4), np.float32))
    obj = tmp_path / "obj.npy"  # was NumPy's "Array can't be memory-mapped: Python objects in dtype."
    np.save(obj, np.array([[1.0, "a"], [2.0, "b"]], dtype=object), allow_pickle=True)
    with pytest.raises(BertfeatError) as e:
        read_features(obj)
    assert str(e.value) == (f"{obj}: not a readable .npy file: it holds Python objects (a pickled object array), which "
                            "bertfeat never loads - save the features as a float array, e.g. "
                            "np.save(path, X.astype(np.float32))")


# --------------------------------------------------------------------------- CSV text that reads back as another value
#: Before 1911 Paris ran at +00:09:21 and Kolkata at +05:21:10: Arrow wrote their local time with the offset cut to
#: whole minutes (+0009), which read back 21 and 10 seconds off. Written in UTC (Z) now, read back in their zone.
LMT = {"paris": pa.array([-2_208_988_800_000_000, None, 1_704_110_400_000_000], pa.timestamp("us", tz="Europe/Paris")),
       "kolkata": pa.array([-2_208_988_800, 0, None], pa.timestamp("s", tz="Asia/Kolkata"))}


@pytest.mark.parametrize("name", ["out.csv", "out.npy"])
def test_a_time_zone_whose_offset_has_seconds_reads_back_as_written(tmp_path, name):
    path = tmp_path / name
    ids = LMT["paris"].fill_null(0)  # the id column too
    with FeatureWriter(path, dim=2, id_name="when", id_type=ids.type, extra_columns={k: v.type for k, v in LMT.items()}) as w:
        w.write(ids, np.zeros((3, 2), np.float32), LMT)
    (got_ids, _, extras), = list(iter_features(path, with_extras=True))
    assert pa.array(got_ids, ids.type).equals(ids)
    for k, want in LMT.items():
        assert extras[k].type == want.type and extras[k].equals(want), k


@pytest.mark.parametrize("name", ["out.csv", "out.npy"])
def test_a_float16_id_or_extra_is_written_as_its_shortest_text(tmp_path, name):
    """A float16 id or kept value was written as the double it widens to (0.1 as 0.0999755859375): now as its shortest
    text (0.1), as float16 features and the rejects file write it, read back as the same float16 (every bit pattern)."""
    path = tmp_path / name
    halves = np.arange(65536, dtype=np.uint16).view(np.float16)
    values = pa.concat_arrays([pa.array(halves, pa.float16()), pa.array([None], pa.float16())])
    ids = pa.array(halves[[0x2E66, 0x3C00, 0x8000]], pa.float16())  # 0.1, 1.0, -0.0
    with FeatureWriter(path, dim=1, id_name="h", id_type=pa.float16(), extra_columns={"k": pa.float16()}) as w:
        w.write(ids, np.zeros((3, 1), np.float32), {"k": values.slice(0x2E66, 3)})
        w.write(pa.array([None] * len(values), pa.float16()).fill_null(0.0), np.zeros((len(values), 1), np.float32),
                {"k": values})
    text = (ids_sidecar_path(path) if name == "out.npy" else path).read_text().splitlines()
    assert [line.split(",")[:2] for line in text[1:4]] == [["0.1", "0.1"], ["1", "0.10004"], ["-0", "0.1001"]]
    (got_ids, _, extras), = list(iter_features(path, batch_rows=len(values) + 3, with_extras=True))
    back = extras["k"].to_numpy(zero_copy_only=False)[3:-1].astype(np.float16)
    assert extras["k"].type == pa.float16() and extras["k"][-1].as_py() is None
    assert ((back.view(np.uint16) == halves.view(np.uint16)) | (np.isnan(back) & np.isnan(halves))).all()
    assert pa.array(got_ids[:3], pa.float16()).equals(ids)


@pytest.mark.parametrize("name", ["out.csv", "out.npy"])
def test_a_value_whose_text_a_csv_reader_refuses_is_refused_naming_its_row(tmp_path, name):
    """Arrow wrote a year past 9999 as text its CSV reader refuses: the file was written and could not be read
    (pca transform to CSV, or any FeatureWriter)."""
    path = tmp_path / name
    far = pa.array([0, 253_402_300_800_000], pa.timestamp("ms"))
    with pytest.raises(BertfeatError) as e:
        with FeatureWriter(path, dim=2, id_name="doc", id_type=pa.string(), extra_columns={"when": far.type}) as w:
            w.write(["a", "b"], np.zeros((2, 2), np.float32), {"when": far.take([0, 0])})
            w.write(["c", "d"], np.zeros((2, 2), np.float32), {"when": far})
    side = ids_sidecar_path(path) if name.endswith(".npy") else path
    assert e.value.message == (f"{side}: row 3 (id 'd'): column 'when' holds 10000-01-01 00:00:00.000, which a CSV file "
                               "cannot give back (it is written as '10000-01-01 00:00:00.000', which Arrow's CSV reader "
                               "refuses) - write a Parquet file (pass -o with a .parquet name)")
    assert list(tmp_path.iterdir()) == []


def test_a_feature_file_path_with_an_unexpanded_tilde_is_said_so(tmp_path, monkeypatch):
    """read_features('~/f.parquet') said "feature file not found: ~/f.parquet - check the path": the path it stands
    for is named now, as by the command line (checks.local_path)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(BertfeatError) as e:
        read_features("~/f.parquet")
    assert e.value.message == ("the feature file ~/f.parquet starts with ~, which no shell expanded (bertfeat takes a "
                               f"path as it is given) - give the path itself, {tmp_path}/home/f.parquet")


def test_a_feature_file_given_as_bytes_is_refused_naming_it(tmp_path):
    """Found by the API audit: read_features(b"f.npy") raised pathlib's TypeError, naming nothing."""
    path = tmp_path / "f.npy"
    np.save(path, np.zeros((2, 3), np.float32))
    with pytest.raises(BertfeatError) as e:
        read_features(bytes(path))
    assert e.value.message == (f"the feature file path {bytes(path)!r} is a bytes, not a string or a path - give the "
                               "feature file's path as a string or a path")


def _damaged(path, at: bytes, to: bytes):
    raw = bytearray(path.read_bytes())
    i = raw.index(at)
    raw[i:i + len(at)] = to
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("wide", [False, True])
def test_a_flipped_byte_in_a_parquet_page_is_refused_naming_the_file(tmp_path, wide):
    """bertfeat writes page CRCs, but read its feature files without checking them: an id or a feature changed on disk
    was fitted, transformed and copied into a new file whose checksums were valid again."""
    ids = ["apple", "mango", "pear"]
    X = np.arange(12, dtype=np.float32).reshape(3, 4) + np.float32(0.5)
    path = tmp_path / "f.parquet"
    with FeatureWriter(path, dim=4, id_name="id", id_type=pa.string(), wide=wide) as w:
        w.write(ids, X)
    good = read_features(path)
    assert list(good[0]) == ids and np.array_equal(good[1], X)
    _damaged(path, b"mango", b"MANGO")
    message = _message(lambda: read_features(path))
    assert message.startswith(f"{path} is damaged: row group 0 does not read back (")
    assert "CRC checksum verification failed" in message
    assert message.endswith(" - restore the file from a copy, or rerun the command that wrote it")
    path.unlink()
    with FeatureWriter(path, dim=4, id_name="id", id_type=pa.string(), wide=wide) as w:
        w.write(ids, X)
    _damaged(path, np.float32(6.5).tobytes(), np.float32(-6.5).tobytes())  # a feature's sign bit
    assert "CRC checksum verification failed" in _message(lambda: read_features(path))


def test_bytes_cut_from_a_parquet_file_are_its_damage_not_a_disk_error(tmp_path):
    """A file with bytes missing mid-file (its footer kept) failed with pyarrow's words and no file name, rendered as
    an I/O error ('check the path, its permissions and the free disk space')."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 16)).astype(np.float32)
    path = tmp_path / "f.parquet"
    with FeatureWriter(path, dim=16, id_name="id", id_type=pa.int64()) as w:
        w.write(list(range(400)), X)
    raw = path.read_bytes()
    footer = pq.ParquetFile(path).metadata.serialized_size + 8
    body = raw[:-footer]
    holed = body[:4] + body[4 + 2000:] + b"\0" * 2000 + raw[-footer:]  # the same length: the footer's offsets stand
    path.write_bytes(holed)
    message = _message(lambda: read_features(path))
    assert message.startswith(f"{path} is damaged: row group 0 does not read back (")
    assert message.endswith(" - restore the file from a copy, or rerun the command that wrote it")


def test_a_column_name_given_twice_in_a_csv_or_an_ids_file_is_refused_naming_it(tmp_path):
    """A CSV feature file or a .npy's ids file with a repeated column name failed as 'unexpected KeyError: Field
    "label" exists 2 times in schema - this is a bug in bertfeat' (Parquet's was refused, naming it)."""
    path = tmp_path / "dup.csv"
    path.write_text("id,label,label,f0,f1\n1,a,b,1,2\n2,a,b,2,5\n", encoding="utf-8")
    assert _message(lambda: read_features(path)) == (f"{path}: the column name 'label' appears 2 times - rename the "
                                                     "columns so that every name is unique")
    np.save(tmp_path / "side.npy", np.ones((2, 3), dtype=np.float32))
    (tmp_path / "side.ids.csv").write_text("id,id\n1,x\n2,y\n", encoding="utf-8")
    assert _message(lambda: read_features(tmp_path / "side.npy")) == (
        f"{tmp_path / 'side.ids.csv'}: the column name 'id' appears 2 times - rename the columns so that every name is unique")


def test_a_parquet_embedding_of_no_values_is_refused_as_rows_without_features(tmp_path):
    """A fixed-size list of 0 values failed in Arrow's reader as 'unexpected ArrowInvalid ... a bug in bertfeat' (a
    .npy of shape (n, 0) was refused as rows without features)."""
    path = tmp_path / "d0.parquet"
    pq.write_table(pa.table({"embedding": pa.array([[]] * 5, pa.list_(pa.float32(), 0))}), path)
    assert _message(lambda: read_features(path)) == (
        f"{path}: column 'embedding' is a list of 0 values (fixed_size_list<element: float>[0]): rows without features "
        "- pass a feature matrix of at least one feature a row")


def _parts_dir(tmp_path, first: pa.Table, second: pa.Table):
    d = tmp_path / "parts"
    d.mkdir()
    pq.write_table(first, d / "part-00000.parquet")
    pq.write_table(second, d / "part-00001.parquet")
    return d


def _emb(X):
    return pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), X.shape[1])


def test_parts_whose_ids_or_columns_differ_in_type_are_refused_naming_both(tmp_path):
    """A directory of parts compared widths and column names, not the id column's type: the second part's int64 ids
    100, 101 were cast to the first part's timestamps (1970-01-01 00:00:00.100 ...), exit 0; a kept column of another
    type was refused with two identical descriptions."""
    X = np.arange(16, dtype=np.float32).reshape(4, 4)
    d = _parts_dir(tmp_path, pa.table({"id": pa.array(np.arange(2).astype("datetime64[ms]")), "embedding": _emb(X[:2])}),
                   pa.table({"id": pa.array([100, 101], pa.int64()), "embedding": _emb(X[2:])}))
    assert _message(lambda: read_features(d)) == (
        f"the part files of {d} differ: the id column 'id' is timestamp[ms] in part-00000.parquet, int64 in "
        "part-00001.parquet - extract the directory again (or write every part with the same columns and types)")
    e = tmp_path / "e"
    e.mkdir()
    d = _parts_dir(e, pa.table({"id": [1, 2], "label": ["a", "b"], "embedding": _emb(X[:2])}),
                   pa.table({"id": [3, 4], "label": [1, 0], "embedding": _emb(X[2:])}))
    assert _message(lambda: read_features(d)) == (
        f"the part files of {d} differ: the column 'label' is string in part-00000.parquet, int64 in "
        "part-00001.parquet - extract the directory again (or write every part with the same columns and types)")
    f = tmp_path / "f"
    f.mkdir()
    d = _parts_dir(f, pa.table({"id": [1, 2], "embedding": _emb(X[:2])}), pa.table({"id": [3, 4], "embedding": _emb(X[2:, :3])}))
    assert _message(lambda: read_features(d)) == (
        f"the part files of {d} differ: part-00000.parquet has 4 features, part-00001.parquet 3 - extract the "
        "directory again (or write every part with the same columns and types)")
    g = tmp_path / "g"
    g.mkdir()
    d = _parts_dir(g, pa.table({"id": [1, 2], "embedding": _emb(X[:2])}), pa.table({"id": [3, 4], "embedding": _emb(X[2:])}))
    ids, Y, _ = read_features(d)
    assert list(ids) == [1, 2, 3, 4] and np.array_equal(Y, X)


def test_iter_and_read_features_check_their_arguments(tmp_path, data):
    """Found by the API audit: iter_features(path, None) failed in int(), 0 / -1 / 1.5 / True gave 1-row batches and
    '2' was taken as 2; with_extras='no' and float64='no' (truthy strings) were taken as True."""
    ids, X, extras = data
    path = write_chunks(tmp_path / "f.parquet", ids, X, extras)
    for bad in (None, 0, -1, 1.5, True, "2"):
        assert _message(lambda: list(iter_features(path, bad))) == f"batch_rows={bad!r} is out of range - give 1 or more"
    assert _message(lambda: list(iter_features(path, with_extras="no"))) == (
        "with_extras='no' is not True or False - give with_extras=True or with_extras=False")
    assert _message(lambda: read_features(path, float64="no")) == (
        "float64='no' is not True or False - give float64=True or float64=False")
    assert sum(len(x) for _, x in iter_features(path, 300)) == N


@pytest.mark.parametrize("fmt, wide, refused", [("csv", False, True), ("parquet", True, True), ("parquet", False, False),
                                                ("npy", False, False)])
def test_an_id_column_named_f0_is_refused_where_the_features_are_columns(tmp_path, fmt, wide, refused):
    """What `pca transform -o t.csv` of a file whose id column is f0 says ('column name(s) ['f0'] clash with each other
    or the feature columns - rename them' named no fix, and a .npy output, whose ids file holds no feature column,
    was refused too)."""
    path = tmp_path / f"o.{fmt}"
    kw = dict(dim=2, id_name="f0", id_type=pa.string(), wide=wide)
    if refused:
        with pytest.raises(BertfeatError) as e:
            FeatureWriter(path, **kw)
        assert e.value.message == (f"the column name(s) ['f0'] clash with the features' columns f0, f1, ... of a "
                                   f"{'wide ' if wide else ''}{fmt} feature file - rename them, or write Parquet "
                                   "(not wide) or npy")
        return
    with FeatureWriter(path, **kw) as w:
        w.write(["007", "8"], np.ones((2, 2), np.float32), {})
    assert list(read_features(path)[0]) == ["007", "8"]


@pytest.mark.parametrize("fmt, patched", [("parquet", "bertfeat.features.parquet.pq.ParquetWriter"),
                                          ("npy", "bertfeat.features.npy.pcsv.CSVWriter")])
def test_an_interrupt_while_the_writer_is_set_up_leaves_no_temporary_file(tmp_path, monkeypatch, fmt, patched):
    """Ctrl-C (SIGTERM) the moment the output's temporary file was opened left `.o.parquet.tmp-PID` behind: the
    Parquet writer was set up outside any cleanup (found by the writers audit, 2 SIGTERMs in 4)."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(patched, interrupted)
    with pytest.raises(KeyboardInterrupt):
        FeatureWriter(tmp_path / f"o.{fmt}", dim=2, id_name="id", id_type=pa.string())
    assert list(tmp_path.iterdir()) == []
