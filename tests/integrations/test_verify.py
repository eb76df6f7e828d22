"""bertfeat.verify / `bertfeat verify`: rows encoded again one at a time against a written feature file."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bertfeat.cli.app import main
from bertfeat.errors import BertfeatError
from bertfeat.verify import verify_features
from extract_util import (NOT_BIT_FOR_BIT, embeddings, metadata, read_table, rows_bit_for_bit, run, tiny_model,
                          tiny_st_model, write_csv)


def _rows(n: int = 60) -> list[list[str]]:
    words = "cats dogs sun rain tea code music river stone light".split()
    return [[f"r{i}", " ".join(words[(i * 7 + j) % 10] for j in range(3 + i % 17)), "ab"[i % 2]] for i in range(n)]


@pytest.fixture()
def extracted(tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows())
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "-q")
    assert rc == 0, err
    return src, out


def test_verify_a_fresh_file_row_for_row(extracted, capsys):
    src, out = extracted
    r = verify_features(out, sample=1000)
    assert r["rows_checked"] == r["rows_in_file"] == 60 and r["ok"] and r["precision"] == "fp32" and not r["reduced"]
    print(f"largest difference {r['max_abs_diff']:.3g}, bit-identical {r['rows_identical']} of 60")
    assert r["max_relative_diff"] <= 1e-6 and r["min_cosine"] > 0.9999999
    assert sorted(x["id"] for x in r["rows"]) == sorted(f"r{i}" for i in range(60))
    rc, stdout, err = run(capsys, "verify", out, "--sample", "10")
    assert (rc, err) == (0, "")
    assert "rows checked" in stdout and "10 of 60 (seed 0)" in stdout and "│ verdict            │" in stdout
    assert stdout.rstrip().splitlines()[-2].split("│")[2].strip() == "ok"
    assert run(capsys, "verify", out, "--quiet") == (0, "", "")


def test_verify_a_file_without_rows_says_it_checked_nothing(tmp_path, capsys):
    """A 0-row file (an input of a header alone) showed "smallest cosine 1.000000000" and "ok", as if rows matched."""
    src = tmp_path / "e.csv"
    src.write_text("text\n")
    out = tmp_path / "e.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")[0] == 0
    rc, stdout, err = run(capsys, "verify", out)
    assert (rc, err) == (0, "")
    cells = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in stdout.splitlines() if line.count("│") == 3}
    assert (cells["rows checked"], cells["largest difference"], cells["smallest cosine"], cells["verdict"]) == (
        "0 of 0 (seed 0)", "- (no row to check)", "- (no row to check)", "ok: nothing to check")


def test_verify_passes_over_rejected_rows_and_applies_the_pca(tmp_path, capsys):
    rows = _rows()
    rows[5][1] = ""  # rejected under --on-bad-row skip
    rows[17][1] = "   "
    src = write_csv(tmp_path / "in.csv", ["text", "label"], [r[1:] for r in rows])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--on-bad-row", "skip", "--pca", "8", "-q")
    assert rc == 0, err
    r = verify_features(out, sample=1000)
    assert r["rows_in_file"] == 58 and r["rows_checked"] == 58 and r["reduced"] and r["ok"]
    assert 5 not in [x["id"] for x in r["rows"]] and 6 in [x["id"] for x in r["rows"]]  # ids are input row numbers
    rc, stdout, _ = run(capsys, "verify", out, "--sample", "5")
    text = " ".join(stdout.replace("│", " ").split())  # the table's cells, wrapped lines joined
    assert "(after the PCA: the projection rounds by its batch;" in text and "bit identity holds before it)" in text
    # the table says why a reduced file is seldom bit-identical


def test_verify_finds_rows_that_changed(extracted, capsys):
    src, out = extracted
    rows = _rows()
    rows[7][1] = "an entirely different sentence now"
    write_csv(src, ["id", "text", "label"], rows)
    r = verify_features(out, sample=1000)
    assert not r["ok"] and r["worst"]["id"] == "r7" and r["worst"]["relative"] > 0.01
    assert sum(x["relative"] > r["tolerance"] for x in r["rows"]) == 1
    rc, _, err = run(capsys, "verify", out, "--sample", "1000", "-q")
    w = r["worst"]
    assert (rc, err) == (1, f"Error: 1 of 60 rows differ from their vector encoded alone by more than 1e-05 of their norm "
                            f"(row {w['position']}, id 'r7': {w['relative']:.3g}, cosine {w['cosine']:.6f}) - the features "
                            "do not match what the model gives for their input now: the input, the model or the file "
                            "changed since they were extracted; extract them again\n")
    rows.pop(3)  # a row gone from the input: the walk cannot find the output's row in its place
    write_csv(src, ["id", "text", "label"], rows)
    with pytest.raises(BertfeatError, match="o.parquet's row 3 \\(id 'r3'\\) is not in the input .*in.csv in its place - "
                                            "verify against the input the features were extracted from \\(input\\)"):
        verify_features(out)


@pytest.mark.parametrize("order", [[1, 0], [0, 0]], ids=["swapped", "repeated"])
def test_a_feature_file_whose_rows_were_reordered_is_said_to_have_changed(extracted, capsys, order):
    """Two rows of the feature file swapped (or one repeated over the next), the input untouched: verify said the
    row "is not in the input in.csv in its place - verify against the input the features were extracted from
    (--input)", a fix that cannot help. The input's files, sizes and times are the provenance's, so the file is named."""
    import pyarrow.parquet as pq

    src, out = extracted
    t = pq.read_table(out)
    idx = np.arange(t.num_rows)
    idx[[0, 1]] = order
    edited = out.with_name("e.parquet")
    pq.write_table(t.take(idx).replace_schema_metadata(t.schema.metadata), edited)
    rc, _, err = run(capsys, "verify", edited, "--sample", "1000", "-q")
    assert (rc, err) == (1, f"Error: {edited}'s row 1 (id 'r0') is not in the input {src} in its place, which is the "
                            "input the features were extracted from (its files, sizes and times as recorded): "
                            f"{edited}'s rows were reordered, repeated or edited since - extract the features again (a "
                            "feature file holds the input's rows in their order)\n")


def test_a_different_verdict_on_another_numeric_path_names_the_path(extracted, capsys, monkeypatch):
    """An int8 file verified with NumPy's kernels where numba's extracted it (or on another CPU) differs by ~2e-3 and
    was blamed on 'the input, the model or the file changed', none of which had (found by the int8 audit). The
    provenance records the path: a change of it is named."""
    import bertfeat.cache.store as store

    src, out = extracted
    assert verify_features(out)["path_changes"] == []
    rows = _rows()
    rows[7][1] = "an entirely different sentence now"
    write_csv(src, ["id", "text", "label"], rows)
    real = store.gemm_identity
    monkeypatch.setattr(store, "gemm_identity", lambda enc: {**real(enc), "kernels": "other 1.0"})
    then = metadata(out)["gemm"]["kernels"]
    assert verify_features(out, sample=1000)["path_changes"] == [f"kernels {then!r} -> 'other 1.0'"]
    rc, _, err = run(capsys, "verify", out, "--sample", "1000", "-q")
    assert rc == 1 and err.endswith(f" - this run computes on another numeric path than the extraction did (kernels "
                                    f"{then!r} -> 'other 1.0'), which rounds otherwise: verify where the features were "
                                    "extracted (or with the same kernels), or pass a larger --tolerance\n"), err


def test_verify_finds_rows_lost_from_the_file_or_gained_by_the_input(extracted, tmp_path, capsys):
    """Rows deleted from the file (metadata kept), a row inserted in the input or appended to it: each was 'ok'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, out = extracted
    t = pq.read_table(out)
    dropped = tmp_path / "dropped.parquet"
    pq.write_table(t.take(pa.array([i for i in range(60) if i not in (7, 59)])).replace_schema_metadata(t.schema.metadata),
                   dropped)
    rc, _, err = run(capsys, "verify", dropped, "--input", src, "-q")
    assert (rc, err) == (1, f"Error: {dropped} has 58 rows, but its provenance says 60 were written: rows were lost since "
                            "(a part file removed, the file edited) - extract the features again\n")
    rows = _rows()
    for name, changed in (("inserted", rows[:7] + [["new", "a row the run never saw", "a"]] + rows[7:]),
                          ("appended", rows + [["new", "a row the run never saw", "a"]])):
        given = write_csv(tmp_path / f"{name}.csv", ["id", "text", "label"], changed)
        rc, _, err = run(capsys, "verify", out, "--input", given, "--sample", "5", "-q")
        row = 7 if name == "inserted" else 60
        assert (rc, err) == (1, f"Error: 1 rows of the input {given} are not in {out}, but the run rejected 0 (the first not "
                                f"rejected as a bad row here: row {row} (id 'new')): the input changed since the features "
                                "were extracted - extract the features again, or verify against the input they were "
                                "extracted from (--input)\n"), name


def test_a_dask_directory_that_lost_a_part_is_refused_by_every_reader(tmp_path, capsys):
    """verify said ok ('211 of 211' rows), and read_features / pca fit read the rest without a word: the run's
    provenance records its partitions, one part each."""
    pytest.importorskip("distributed")
    from bertfeat.features import read_features

    src = write_csv(tmp_path / "in.csv", ["text"], [r[1:2] for r in _rows(40)])
    out = tmp_path / "o"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--engine", "dask", "--workers", "1",
               "--blocksize", "1KiB", "-q")[0] == 0
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 3
    assert verify_features(out)["ok"] and len(read_features(out)[0]) == 40
    parts[1].unlink()
    said = (f"{out} has 2 part files, but its run wrote 3 (missing: part-00001.parquet) - the directory lost (or gained) "
            "part files since: extract the features again")
    assert run(capsys, "verify", out, "-q") == (1, "", f"Error: {said}\n")
    assert run(capsys, "pca", "fit", out, "-n", "2", "-o", tmp_path / "p.npz", "-q") == (1, "", f"Error: {said}\n")
    with pytest.raises(BertfeatError, match="has 2 part files, but its run wrote 3"):
        read_features(out)


def test_a_dask_directory_without_its_run_provenance_is_read_from_its_parts(tmp_path, capsys, dask_client):
    """_bertfeat.json deleted: verify took the first part's provenance for the run's and said "rows were added since"
    (its counts are partition 0's). The run's counts are now the parts' own, summed; a part lost since (the last one
    too: every part records the run's partitions) is named, and parts of two runs are refused."""
    import json
    import shutil

    from bertfeat.features import read_feature_metadata

    rows = [r[1:2] for r in _rows(40)]
    rows[3][0], rows[30][0] = "", "   "  # rejected, in two partitions
    src = write_csv(tmp_path / "in.csv", ["text"], rows)
    dask = ["--model", tiny_model(), "--no-cache", "--engine", "dask", "--scheduler", dask_client.scheduler.address,
            "--blocksize", "500", "--on-bad-row", "skip", "-q"]
    out = tmp_path / "o"
    assert run(capsys, "extract", src, "-o", out, *dask)[0] == 0
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) >= 3
    run_meta = json.loads((out / "_bertfeat.json").read_text())
    (out / "_bertfeat.json").unlink()
    r = verify_features(out, sample=1000)
    assert r["ok"] and r["rows_checked"] == r["rows_in_file"] == 38
    got = read_feature_metadata(out)
    assert {k: got[k] for k in ("rows", "tokens", "partitions")} == {k: run_meta[k] for k in ("rows", "tokens", "partitions")}
    assert got["rows"]["rejected"] == 2 and "part" not in got

    other = tmp_path / "other"  # another run's parts (another input: another run key)
    assert run(capsys, "extract", write_csv(tmp_path / "b.csv", ["text"], rows[::-1]), "-o", other, *dask)[0] == 0
    shutil.copy(parts[1], tmp_path / "mine.parquet")
    shutil.copy(other / parts[1].name, parts[1])
    assert run(capsys, "verify", out, "-q") == (1, "", f"Error: the part files of {out} come from different runs "
                                                       "(part-00000.parquet and part-00001.parquet), and its run's "
                                                       "provenance _bertfeat.json is missing - extract the features "
                                                       "again (a directory holds one run's parts)\n")
    shutil.copy(tmp_path / "mine.parquet", parts[1])
    for lost in (parts[-1], parts[1]):  # the last one, then one between
        lost.unlink()
        said = ", ".join(p.name for p in parts if not p.exists())
        assert run(capsys, "verify", out, "-q") == (1, "", f"Error: {out} has {len(list(out.glob('part-*')))} part files, "
                                                           f"but its run wrote {len(parts)} (missing: {said}) - the "
                                                           "directory lost "
                                                           "(or gained) part files since: extract the features again\n")


def test_verify_finds_a_replaced_pca_model(tmp_path, capsys):
    """extract --pca records its model's sha256: a model of the same name fitted on other rows was loaded, and the rows
    called different ('the input, the model or the file changed'); then named as not found, though it is there
    (found by the combinations audit); now as another model."""
    src = write_csv(tmp_path / "in.csv", ["text"], [r[1:2] for r in _rows(40)])
    out = tmp_path / "p.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", "4", "-q")[0] == 0
    assert run(capsys, "verify", out, "-q") == (0, "", "")
    other = write_csv(tmp_path / "other.csv", ["text"], [r[1:2] for r in _rows(60)[20:]])
    assert run(capsys, "extract", other, "-o", tmp_path / "all.parquet", "--model", tiny_model(), "-q")[0] == 0
    assert run(capsys, "pca", "fit", tmp_path / "all.parquet", "-n", "4", "-o", tmp_path / "p.pca.npz", "--overwrite",
               "-q")[0] == 0
    from bertfeat.features import read_feature_metadata
    from bertfeat.pca.reduce import file_sha256

    theirs, other = read_feature_metadata(out)["pca"]["model_sha256"], file_sha256(tmp_path / "p.pca.npz")
    said = (f"Error: {tmp_path / 'p.pca.npz'} is not the PCA model that reduced the features of {out} (its sha256 "
            f"{other[:12]}, theirs {theirs[:12]}) - ")
    assert run(capsys, "verify", out, "-q") == (1, "", said + "put the model file back beside the features\n")
    # a run killed (kill -9) while it moved its files into place left its partial directory: the fix says so
    (tmp_path / "p.parquet.partial").mkdir()
    assert run(capsys, "verify", out, "-q") == (1, "", said + f"an interrupted run left {tmp_path / 'p.parquet.partial'}: "
                                                "run it again with --resume to put all its files in place, or put the "
                                                "model file back beside the features\n")
    (tmp_path / "p.pca.npz").unlink()
    rc, _, err = run(capsys, "verify", out, "-q")
    assert rc == 1 and err.startswith(f"Error: the features of {out} were reduced by a PCA model that is not found "
                                      "(p.pca.npz, sha256 "), err


def test_verify_refuses_another_model_and_finds_a_moved_input(extracted, tmp_path, capsys):
    from ckpt import cached_checkpoint

    src, out = extracted
    other = cached_checkpoint(tempfile.mkdtemp(prefix="bertfeat-other-"), hidden=32, layers=2, heads=2,
                              max_position=128, seed=8)
    with pytest.raises(BertfeatError, match="the model or settings differ from the ones .* was extracted with "
                                            "\\(weights_sha256: file '"):
        verify_features(out, model=other)
    moved = tmp_path / "moved.csv"
    src.rename(moved)
    rc, _, err = run(capsys, "verify", out)
    assert rc == 1 and err == (f"Error: the input {src} of {out} is not found (where the run was, from here or beside "
                               "the features) - pass it with --input\n")
    assert run(capsys, "verify", out, "--input", moved, "-q")[0] == 0


def test_verify_finds_an_edited_model_folder(tmp_path, capsys):
    """The same weights and recorded settings, but the model's own pooling edited since: the file no longer holds the
    model's embedding, and verify says which file changed (before, it re-encoded with the recorded settings: ok)."""
    import json
    import shutil

    from bertfeat.model.encoder import Encoder

    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows(20))
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", model, "-q")[0] == 0
    assert run(capsys, "verify", out, "-q")[0] == 0
    hidden = Encoder(model).hidden_size
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_cls_token": True}))
    rc, _, err = run(capsys, "verify", out, "-q")
    assert (rc, err) == (1, f"Error: the model's files differ from the ones {out} was extracted with (1_Pooling/config.json "
                            f"added, modules.json added; in {model}) - extract the features again with this model, "
                            "or pass --model with the model they came from\n")


def test_verify_features_cut_by_truncate_dim(tmp_path, capsys):
    """The model's truncate_dim (config_sentence_transformers.json) and --truncate-dim are in the fingerprint, and
    verify encodes the rows again with them: every run below checks, at the width it wrote."""
    import json

    import pyarrow.parquet as pq

    model = tiny_st_model(tmp_path / "model")
    (model / "config_sentence_transformers.json").write_text(json.dumps({"truncate_dim": 8}))
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows(20))
    for i, (flags, width) in enumerate([([], 8), (["--truncate-dim", "32"], 32), (["--truncate-dim", "3"], 3),
                                        (["--pooling", "cls"], 32), (["--pooling", "cls", "--truncate-dim", "4"], 4),
                                        (["--normalize"], 8), (["--pooling", "cls", "--normalize", "--truncate-dim", "4"], 4),
                                        (["--no-normalize"], 8)]):
        out = tmp_path / f"o{i}.parquet"
        assert run(capsys, "extract", src, "-o", out, "--model", model, "-q", *flags)[0] == 0
        assert pq.read_schema(out).field("embedding").type.list_size == width
        r = verify_features(out, sample=1000)
        bound = 1e-6 if rows_bit_for_bit() else 1e-5  # (NumPy's BLAS: a few 1e-6 on the unnormalized cut vectors)
        assert r["ok"] and r["rows_checked"] == 20 and r["max_relative_diff"] <= bound, (flags, r["worst"])
        again = "--normalize" in flags and width < 32  # asked for with a cut: unit vectors after it
        assert metadata(out)["fingerprint"].get("renormalize", False) is again, flags
        norms = np.linalg.norm(embeddings(read_table(out)), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-6) is (again or (width == 32 and "cls" not in flags)), (flags, norms[:3])


def test_verify_a_dask_output_directory(tmp_path, capsys):
    pytest.importorskip("distributed")
    src = write_csv(tmp_path / "in.csv", ["text"], [r[1:2] for r in _rows(40)])
    out = tmp_path / "o"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--engine", "dask", "--workers", "1", "-q")
    assert rc == 0, err
    r = verify_features(out, sample=1000)
    assert r["rows_checked"] == 40 and r["ok"]


def test_verify_errors(tmp_path, capsys, monkeypatch):
    import io
    import sys

    src = write_csv(tmp_path / "in.csv", ["text"], [["a b c"], ["d e"]])
    piped = tmp_path / "piped.parquet"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
    assert run(capsys, "extract", "-", "-o", piped, "--model", tiny_model(), "--input-format", "csv", "-q")[0] == 0
    with pytest.raises(BertfeatError, match="piped.parquet was extracted from standard input, which cannot be read "
                                            "again - pass the input file with input"):
        verify_features(piped)
    assert verify_features(piped, input=src)["ok"]
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")[0] == 0
    with pytest.raises(BertfeatError, match="sample=0 is out of range - give 1 or more rows"):
        verify_features(out, sample=0)
    import pyarrow.parquet as pq

    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(out).replace_schema_metadata(None), plain)
    with pytest.raises(BertfeatError, match="plain.parquet has no provenance to verify against"):
        verify_features(plain)
    assert main(["verify", str(tmp_path / "nope.parquet")]) == 1
    assert "nope.parquet" in capsys.readouterr().err


def test_verify_takes_the_pca_model_beside_the_features(tmp_path, capsys, monkeypatch):
    """extract --pca records the model's name only: the one beside the features, not one of that name here."""
    src = write_csv(tmp_path / "in.csv", ["text"], [r[1:2] for r in _rows(30)])
    assert run(capsys, "extract", src, "-o", tmp_path / "x.parquet", "--model", tiny_model(), "--pca", "4", "-q")[0] == 0
    (tmp_path / "run").mkdir()
    out = tmp_path / "run" / "x.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", "4", "--pooling", "cls", "-q")[0] == 0
    monkeypatch.chdir(tmp_path)  # ./x.pca.npz is the other run's
    assert verify_features(out, sample=1000)["ok"]


def test_verify_finds_a_relative_input_from_elsewhere(tmp_path, capsys, monkeypatch):
    (tmp_path / "sub").mkdir()
    write_csv(tmp_path / "sub" / "data.csv", ["text"], [r[1:2] for r in _rows(20)])
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "extract", "sub/data.csv", "--model", tiny_model(), "-q")[0] == 0
    monkeypatch.chdir(tmp_path / "sub")
    assert verify_features("data.features.parquet")["ok"]  # the provenance's input_abspath
    import json

    import pyarrow.parquet as pq

    t = pq.read_table("data.features.parquet")
    meta = json.loads(t.schema.metadata[b"bertfeat"])
    meta.pop("input_abspath")  # a file from before it was recorded: beside the features, by its name
    pq.write_table(t.replace_schema_metadata({b"bertfeat": json.dumps(meta).encode()}), "old.parquet")
    assert verify_features("old.parquet")["ok"]


def test_verify_reads_a_file_named_with_wildcards_as_the_run_did(tmp_path, capsys):
    """A run on report[1].csv read that file (readers.paths.is_pattern); moved away, verify took the name for a glob
    and read report1.csv, a file the run never read, and blamed the features (`row 10 is not in the input`). The
    provenance says whether the run's path was a glob (input_glob): a file's name is looked up as a file only."""
    src = write_csv(tmp_path / "report[1].csv", ["text"], [r[1:2] for r in _rows(20)])
    write_csv(tmp_path / "report1.csv", ["text"], [r[1:2] for r in _rows(30)][10:])  # what report[1].csv globs
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")[0] == 0
    assert verify_features(out, sample=1000)["rows_checked"] == 20
    src.rename(tmp_path / "moved.csv")
    assert run(capsys, "verify", out) == (1, "", f"Error: the input {src} of {out} is not found (where the run was, "
                                                 "from here or beside the features) - pass it with --input\n")
    assert verify_features(out, input=tmp_path / "moved.csv", sample=1000)["ok"]
    # a glob stays a glob: the files it matches now are read
    pattern = str(tmp_path / "report[1].csv")
    assert run(capsys, "extract", pattern, "-o", tmp_path / "g.parquet", "--model", tiny_model(), "-q")[0] == 0
    assert verify_features(tmp_path / "g.parquet", sample=1000)["rows_checked"] == 20


def test_verify_passes_over_rows_refused_as_too_long(tmp_path, capsys):
    rows = [["a", "word " * 200], ["a", "a short one ."], ["b", "another short one ."]]
    src = write_csv(tmp_path / "dup.csv", ["id", "text"], rows)
    out = tmp_path / "dup.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--long-text", "error",
               "--on-bad-row", "skip", "-q")[0] == 0
    r = verify_features(out, sample=10)
    assert r["ok"] and r["rows_checked"] == 2


def test_verify_refuses_features_reduced_twice(tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv", ["text"], [r[1:2] for r in _rows(40)])
    p8 = tmp_path / "p8.parquet"
    assert run(capsys, "extract", src, "-o", p8, "--model", tiny_model(), "--pca", "8", "-q")[0] == 0
    assert main(["pca", "fit", str(p8), "-n", "4", "-o", str(tmp_path / "p4.npz"), "-q"]) == 0
    assert main(["pca", "transform", str(p8), "--pca-model", str(tmp_path / "p4.npz"), "-o", str(tmp_path / "pp.parquet")]) == 0
    with pytest.raises(BertfeatError, match="pp.parquet was reduced by a PCA of 8 inputs, but the model gives 32 features: "
                                            "it was reduced more than once"):
        verify_features(tmp_path / "pp.parquet")


@pytest.mark.parametrize("value, shown", [("nan", "nan"), ("-1", "-1"), ("inf", "inf"), ("-0.5", "-0.5")])
def test_verify_refuses_a_tolerance_out_of_range(extracted, capsys, value, shown):
    """A NaN or negative tolerance was taken, and then called every row (or none) different."""
    _, out = extracted
    assert run(capsys, "verify", out, "--tolerance", value) == (
        1, "", f"Error: --tolerance {shown} is out of range - give a difference over a row's norm of 0 or more, e.g. "
               "1e-5 (default: 1e-5 for fp32, 1e-3 for bf16 and int8 and for a float16 file)\n")
    with pytest.raises(BertfeatError, match=r"^tolerance=(nan|-1\.0|inf|-0\.5) is out of range"):
        verify_features(out, tolerance=float(value))
    if rows_bit_for_bit():  # 0: bit for bit (NumPy's BLAS rounds a row by its batch: NOT_BIT_FOR_BIT)
        assert run(capsys, "verify", out, "--tolerance", "0", "--sample", "3", "-q") == (0, "", "")


def test_verify_refuses_a_negative_seed_and_an_empty_input(extracted, capsys):
    _, out = extracted
    assert run(capsys, "verify", out, "--seed", "-1") == (1, "", "Error: --seed -1 is out of range - give 0 or more\n")
    assert run(capsys, "verify", out, "--input", "") == (
        1, "", "Error: --input '' is empty - pass the input the features were extracted from, or leave --input out for "
               "the one their provenance names\n")


def test_verify_refuses_an_empty_model_or_encoding(extracted, capsys):
    """Found by the CLI audit: -m "" and --encoding "" were passed over for the provenance's (an empty value is falsy),
    and the file verified "ok"; every other command refuses them."""
    _, out = extracted
    assert run(capsys, "verify", out, "-m", "", "-q") == (
        1, "", "Error: the model name is empty - pass a model folder or name, or leave it out for the default\n")
    assert run(capsys, "verify", out, "--encoding", "", "-q") == (
        1, "", "Error: unknown encoding '' - pass a Python codec name such as utf-8, latin-1 or cp1252\n")
    assert run(capsys, "verify", out, "-m", tiny_model(), "--encoding", "utf-8", "--sample", "3", "-q") == (0, "", "")


def test_verify_says_how_rows_came_to_be_added_to_a_file(extracted, tmp_path, capsys):
    """Found by the CLI audit: a file with a row more than its provenance says was explained as "rows were added since
    (a part file removed, ...)"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, out = extracted
    t = pq.read_table(out)
    grown = tmp_path / "grown.parquet"
    pq.write_table(pa.concat_tables([t, t.slice(0, 1)]).replace_schema_metadata(t.schema.metadata), grown)
    assert run(capsys, "verify", grown, "--input", src, "-q") == (
        1, "", f"Error: {grown} has 61 rows, but its provenance says 60 were written: rows were added since (the file "
               "edited, a part file added) - extract the features again\n")


def test_verify_reads_its_input_as_the_provenance_says(extracted, tmp_path, capsys):
    """verify has no --input-format / --text-column: another format is refused saying how it reads --input, and a
    missing column is named without a flag verify does not have."""
    _, out = extracted
    other = tmp_path / "pairs.jsonl"
    other.write_text('{"premise": "a", "hypothesis": "b"}\n')
    assert run(capsys, "verify", out, "--input", other) == (
        1, "", f"Error: --input {other} is jsonl, but {out} was extracted from csv ({tmp_path / 'in.csv'}) - pass the "
               "file the features were extracted from (moved or renamed): verify reads it as their provenance says "
               "(csv, text column 'text', id column 'id')\n")
    columns = write_csv(tmp_path / "other.csv", ["a", "b"], [["x", "y"]])
    assert run(capsys, "verify", out, "--input", columns) == (
        1, "", f"Error: {columns}: the text column 'text' is not a column - columns are: a, b\n")


def test_verify_table_title_is_not_rich_markup(tmp_path, capsys, monkeypatch):
    """A path holding [/b] (rich's closing tag) was an unexpected MarkupError after the work was done."""
    monkeypatch.chdir(tmp_path)  # a short path: the title on one line
    src = write_csv(Path("in.csv"), ["text"], [[r[1]] for r in _rows(8)])
    Path("v[").mkdir()
    out = Path("v[/b]:smile:.parquet")
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")[0] == 0
    rc, stdout, err = run(capsys, "verify", out, "--sample", "3")
    assert (rc, err) == (0, "")
    assert stdout.splitlines()[0].strip() == f"verify {out}"


@pytest.mark.skipif(not rows_bit_for_bit(), reason=NOT_BIT_FOR_BIT)
@pytest.mark.parametrize("extra", [(), ("--pca", "4")])
def test_verify_a_float16_file_bit_identical(tmp_path, capsys, extra):
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows())
    out = tmp_path / "o.npy"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "-q",
                     "--dtype", "float16", *extra)
    assert rc == 0, err
    r = verify_features(out, sample=1000)
    assert r["ok"] and r["dtype"] == "float16" and r["rows_checked"] == 60 and r["reduced"] == bool(extra)
    assert r["rows_identical"] == 60 and r["max_abs_diff"] == 0.0, r["worst"]
    assert r["tolerance"] == 1e-3


@pytest.mark.skipif(not rows_bit_for_bit(), reason=NOT_BIT_FOR_BIT)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_verify_a_pca_transform_of_a_float16_file(tmp_path, capsys, dtype):
    """pca transform of float16 features: the PCA's input was rounded to float16, so verify rounds the re-encoded
    vector before the PCA too (it compared full float32 and reported 10 of 10 rows DIFFERENT at 5.6e-5)."""
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows())
    half = tmp_path / "h.parquet"
    assert run(capsys, "extract", src, "-o", half, "--model", tiny_model(), "--id-column", "id", "-q",
               "--dtype", "float16")[0] == 0
    assert run(capsys, "pca", "fit", half, "-n", 4, "-o", tmp_path / "p.npz", "-q")[0] == 0
    out = tmp_path / f"t_{dtype}.parquet"
    rc, _, err = run(capsys, "pca", "transform", half, "--pca-model", tmp_path / "p.npz", "-o", out, "--dtype", dtype)
    assert rc == 0, err
    r = verify_features(out, sample=1000)
    # within the PCA product's float32 rounding (a row alone vs pca transform's batches), 5.6e-5 before
    assert r["ok"] and r["max_relative_diff"] < 1e-6, r["worst"]


def test_a_pca_transform_of_a_float16_file_is_verified_at_the_float16_tolerance(tmp_path, capsys):
    """Found by the sweep / verify audit: the reduced file is float32, so verify took fp32's 1e-5, though its input
    was rounded to float16: a row whose re-encoded vector rounds one float16 step otherwise (3e-5) was 1.6e-5 of
    the reduced row's norm, and an untouched file was DIFFERENT (exit 1). Such a file gets the float16 file's 1e-3."""
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows())
    half, full = tmp_path / "h.parquet", tmp_path / "f.parquet"
    assert run(capsys, "extract", src, "-o", half, "--model", tiny_model(), "--id-column", "id", "-q",
               "--dtype", "float16")[0] == 0
    assert run(capsys, "extract", src, "-o", full, "--model", tiny_model(), "--id-column", "id", "-q")[0] == 0
    assert run(capsys, "pca", "fit", full, "-n", 4, "-o", tmp_path / "p.npz", "-q")[0] == 0
    out = tmp_path / "t.parquet"
    assert run(capsys, "pca", "transform", half, "--pca-model", tmp_path / "p.npz", "-o", out, "-q")[0] == 0
    r = verify_features(out, sample=1000)
    assert (r["ok"], r["tolerance"], r["rows_checked"]) == (True, 1e-3, 60), r["worst"]
    r = verify_features(out, sample=1000, tolerance=1e-5)  # a tolerance given is taken as given
    assert r["tolerance"] == 1e-5


def test_verify_refuses_an_encoding_other_than_the_recorded_one(tmp_path, capsys):
    """Found by the sweep / verify audit: --encoding replaced the encoding the provenance records, unchecked, and the
    texts read otherwise were then put down to a changed input ("1 of 30 rows differ ... the input, the model or the
    file changed since"). Another spelling of the same codec is taken."""
    src = tmp_path / "l1.csv"
    src.write_bytes("text\ncaf\xe9 one\nna\xefve two\n".encode("latin-1"))
    out = tmp_path / "l1.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--encoding", "latin-1", "-q")[0] == 0
    assert run(capsys, "verify", out, "--encoding", "utf-8", "-q") == (
        1, "", f"Error: {out} records the encoding its input was read with, iso8859-1, not utf-8 - leave --encoding out "
               "(it is for files whose provenance does not record one)\n")
    assert run(capsys, "verify", out, "--encoding", "ISO-8859-1", "-q") == (0, "", "")
    assert run(capsys, "verify", out, "-q") == (0, "", "")


def test_verify_reads_the_input_with_the_runs_kept_columns(tmp_path, capsys):
    """Rows the run rejected for a kept value of the wrong type are rejects for verify too: a repeated id whose first
    row was such a reject was compared with the wrong text (DIFFERENT on an untouched file), and an appended row was
    not the one named."""
    import json

    rows = [{"id": f"r{i}", "text": " ".join(r[1].split()[:6]), "label": i % 2} for i, r in enumerate(_rows(12))]
    rows[5] = {"id": "x", "text": "an apple pie recipe", "label": "str"}  # rejected: label holds integers
    rows[6]["id"] = "x"
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--keep", "label",
                     "--on-bad-row", "skip", "-q")
    assert rc == 0, err
    r = verify_features(out, sample=1000)
    assert r["ok"] and r["rows_checked"] == 11, r["worst"]
    appended = tmp_path / "appended.jsonl"
    appended.write_text(src.read_text() + json.dumps({"id": "new", "text": "a row appended later", "label": 1}) + "\n")
    with pytest.raises(BertfeatError, match="2 rows of the input .* are not in .*, but the run rejected 1 \\(the first "
                                            "not rejected as a bad row here: row 12 \\(id 'new'\\)\\)"):
        verify_features(out, input=appended)


# --------------------------------------------------------------------------- issue 44: a provenance that is damaged
# The provenance is untrusted input: every key bertfeat reads is type-checked where it is parsed (features), and verify
# makes the recorded settings again through Encoder.spec (what extract checked). A null fingerprint, a max_length of
# -1, layers past the model's were "this is a bug in bertfeat" (AttributeError, OverflowError, IndexError ...) or
# passed: each is now one line naming the file and the value.
DAMAGED_FIX = "extract the features again (their provenance was edited, or written by another tool)"
NOT_TAKEN = "its fingerprint records settings this model does not take"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A feature file (parquet, ids) and its input, extracted once; each test edits a copy."""
    d = tmp_path_factory.mktemp("pristine")
    src = write_csv(d / "in.csv", ["id", "text", "label"], _rows(12))
    out = d / "o.parquet"
    assert main(["extract", str(src), "-o", str(out), "--model", str(tiny_model()), "--id-column", "id", "-q"]) == 0
    return out


def edited_provenance(pristine: Path, dst: Path, key: str, value) -> Path:
    """A copy of ``pristine`` whose provenance has ``key`` (dotted: fingerprint.max_length) set to ``value``."""
    import json

    import pyarrow.parquet as pq

    t = pq.read_table(pristine)
    meta = json.loads(t.schema.metadata[b"bertfeat"])
    *parents, last = key.split(".")
    node = meta
    for p in parents:
        node = node[p]
    node[last] = value
    pq.write_table(t.replace_schema_metadata({b"bertfeat": json.dumps(meta)}), dst)
    return dst


@pytest.mark.parametrize("key,value,problem", [
    ("fingerprint", None, "fingerprint is null, not an object"),
    ("fingerprint", [1], "fingerprint is a list, not an object"),
    ("fingerprint.max_length", -1, "fingerprint.max_length is -1, not a whole number >= 1"),
    ("fingerprint.max_length", "128", 'fingerprint.max_length is "128", not a whole number >= 1'),
    ("fingerprint.layers", None, "fingerprint.layers is null, not a list"),
    ("fingerprint.layers", ["2"], 'fingerprint.layers[0] is "2", not a whole number'),
    ("fingerprint.pooling", 3, "fingerprint.pooling is 3, not a string"),
    ("fingerprint.normalize", "yes", 'fingerprint.normalize is "yes", not true or false'),
    ("fingerprint.stride", -4, "fingerprint.stride is -4, not a whole number >= 0"),
    ("fingerprint.prompt", 5, "fingerprint.prompt is 5, not a string or null"),
    ("fingerprint.truncate_dim", 0, "fingerprint.truncate_dim is 0, not a whole number >= 1"),
    ("fingerprint.weights_sha256", None, "fingerprint.weights_sha256 is null, not a string"),
    ("model", None, "model is null, not a string"),
    ("input", 5, "input is 5, not a string"),
    ("input_abspath", 5, "input_abspath is 5, not a string"),
    ("input_glob", "no", 'input_glob is "no", not true or false'),
    ("text_column", None, "text_column is null, not a string"),
    ("id_column", 5, "id_column is 5, not a string or null"),
    ("delimiter", 5, "delimiter is 5, not a string"),
    ("keep", "id", 'keep is "id", not a list'),
    ("rows", {"written": "12"}, 'rows["written"] is "12", not a whole number >= 0 or null'),
    ("rows", "x", 'rows is "x", not a whole number >= 0 or an object or null'),
    ("model_files", {"config.json": 5}, 'model_files["config.json"] is 5, not a string'),
    ("layout", None, "layout is null, not an object"),
    ("layout.extra_columns", 5, "layout.extra_columns is 5, not an object"),
    ("pca", 5, "pca is 5, not an object or null"),
    ("pca", {"model_path": 5}, "pca.model_path is 5, not a string"),
    ("dtype", "float64", 'dtype is "float64", not one of float32, float16'),
    # of their types, but not what extract could have written for this model
    ("fingerprint.max_length", 10**12, f"{NOT_TAKEN} (max_length=1000000000000 is out of range)"),
    ("fingerprint.layers", [99], f"{NOT_TAKEN} (layers=[99] names layer 99, which does not exist: the model has 2 "
                                 "layers (hidden states 0..2, or -3..-1))"),
    ("fingerprint.layers", [-1], "its fingerprint records settings this model does not give (layers: recorded [-1], "
                                 "the model gives [2])"),
    ("fingerprint.pooling", "bogus", f"{NOT_TAKEN} (unknown pooling='bogus')"),
    ("fingerprint.layer_agg", "x", f"{NOT_TAKEN} (unknown layer_agg='x')"),
    ("fingerprint.long_text", "x", f"{NOT_TAKEN} (unknown long_text='x')"),
    ("fingerprint.dense", ["2_Dense"], "its fingerprint records settings this model does not give (dense: recorded "
                                       "['2_Dense'], the model gives [])"),
    ("fingerprint.prompt_name", "nope", f"{NOT_TAKEN} (the model has no prompt named 'nope' (its prompts: none))"),
    ("fingerprint.truncate_dim", 99, f"{NOT_TAKEN} (truncate_dim=99 is more than the 32 features of the chosen pooling)"),
    ("fingerprint.truncate_dim", 8, "its features are 32 wide, but the settings it records give 8"),
    ("fingerprint.pooling", "mean+max", "its features are 32 wide, but the settings it records give 64"),
    ("fingerprint.precision", "fp64", "fingerprint.precision is 'fp64', not one of fp32, bf16, int8"),
    ("input_format", "xls", "input_format is 'xls', not one of csv, tsv, parquet, jsonl"),
    # the reader's refusals of these named options verify does not have ("pass --encoding utf-8"; found by audit)
    ("delimiter", "ab", "delimiter is 'ab', which no reader takes"),
    ("encoding", "rot13", "encoding is 'rot13', which no reader takes"),
    ("encoding", "nonesuch", "encoding is 'nonesuch', which no reader takes"),
    # a pca entry without its component count gave "(? components)", one of the wrong types passed (found by audit)
    ("pca", {}, "pca has no n_components"),
    ("pca", {"sha256": 5}, "pca has no n_components"),
    ("pca", {"n_components": 2, "whiten": "x"}, 'pca.whiten is "x", not true or false'),
    ("pca", {"n_components": 2, "fingerprint": "x"}, 'pca.fingerprint is "x", not an object or null'),
])
def test_verify_refuses_a_damaged_provenance_in_one_line(pristine, tmp_path, capsys, key, value, problem):
    import hashlib

    out = edited_provenance(pristine, tmp_path / "o.parquet", key, value)
    before = hashlib.sha256(out.read_bytes()).hexdigest()
    message = f"the provenance of {out} is damaged or not bertfeat's: {problem} - {DAMAGED_FIX}"
    with pytest.raises(BertfeatError) as e:
        verify_features(out)
    assert e.value.message == message
    assert run(capsys, "verify", out) == (1, "", f"Error: {message}\n")
    assert hashlib.sha256(out.read_bytes()).hexdigest() == before and sorted(tmp_path.iterdir()) == [out]


def test_a_feature_column_dropped_is_said_so_not_a_damaged_provenance(pristine, tmp_path, capsys):
    """A wide Parquet file with its last feature column dropped, its provenance kept: verify blamed the provenance
    ('damaged or not bertfeat's: its features are 31 wide, but the settings it records give 32')."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wide = tmp_path / "w.parquet"
    assert run(capsys, "extract", pristine.parent / "in.csv", "-o", wide, "--model", tiny_model(), "--id-column",
               "id", "--wide", "-q")[0] == 0
    t = pq.read_table(wide)
    cut = tmp_path / "cut.parquet"
    pq.write_table(t.drop_columns(["f31"]), cut)  # (the schema's metadata, the provenance, kept)
    assert "f31" in t.column_names and pa.types.is_floating(t.schema.field("f30").type)
    assert run(capsys, "verify", cut, "-q") == (
        1, "", f"Error: {cut} has 31 features a row, but its provenance says 32 were written: feature columns were "
               "dropped since - verify the file as extract wrote it, or extract the features again\n")
    assert run(capsys, "verify", wide, "-q")[0] == 0


def test_a_recorded_delimiter_the_input_does_not_hold_is_not_the_users_option(pristine, tmp_path, capsys):
    """A recorded delimiter that is valid but does not split the input's header: the reader said to pass the
    delimiter ',' (verify has no such option); it now says where the delimiter came from. --encoding with a
    recorded encoding no reader takes is the damaged provenance, not 'leave --encoding out' (which then said to pass
    one: a loop)."""
    out = edited_provenance(pristine, tmp_path / "o.parquet", "delimiter", ";")
    src = pristine.parent / "in.csv"
    assert run(capsys, "verify", out, "-q") == (
        1, "", f"Error: {src}: the delimiter ';' is not in the header line 'id,text,label', which ',' separates into 3 "
               f"columns; that delimiter is the one the provenance of {out} records - the input is not the file the "
               "features were extracted from, or their provenance was edited: extract the features again\n")
    out = edited_provenance(pristine, tmp_path / "e.parquet", "encoding", "nonesuch")
    assert run(capsys, "verify", out, "--encoding", "utf-8", "-q") == (
        1, "", f"Error: the provenance of {out} is damaged or not bertfeat's: encoding is 'nonesuch', which no reader "
               f"takes - {DAMAGED_FIX}\n")


def test_a_delimiter_an_earlier_run_recorded_for_parquet_input_does_not_stop_verify(tmp_path, capsys):
    """Before the readers refused --delimiter on Parquet and JSONL they ignored it, and the provenance recorded it:
    verify of such a run reads its input as that run did (the delimiter left out), where the reader now refuses one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(12)], "text": [r[1] for r in _rows(12)]}), src)
    out = tmp_path / "o.parquet"
    assert main(["extract", str(src), "-o", str(out), "--model", str(tiny_model()), "--id-column", "id", "-q"]) == 0
    assert run(capsys, "verify", out, "-q")[0] == 0
    edited = edited_provenance(out, tmp_path / "e.parquet", "delimiter", ";")
    assert json.loads(pq.read_schema(edited).metadata[b"bertfeat"])["delimiter"] == ";"
    assert run(capsys, "verify", edited, "-q") == (0, "", "")
    # likewise an --encoding such a run was given (found by the review of the change: verify passed it on, refused)
    edited = edited_provenance(out, tmp_path / "n.parquet", "encoding", "iso8859-1")
    assert run(capsys, "verify", edited, "-q") == (0, "", "")


@pytest.mark.parametrize("args", [["pca", "fit", "{out}", "-n", "2", "-o", "{tmp}/q.npz"],
                                  ["pca", "transform", "{out}", "--pca-model", "{tmp}/p.npz", "-o", "{tmp}/r.parquet"]])
def test_every_reader_of_a_feature_file_refuses_a_damaged_provenance(pristine, tmp_path, capsys, args):
    """The check is where the provenance is parsed: pca fit / transform meet it too (layout.extra_columns 5 was an
    AttributeError in every reader)."""
    assert run(capsys, "pca", "fit", pristine, "-n", "2", "-o", tmp_path / "p.npz", "-q")[0] == 0
    out = edited_provenance(pristine, tmp_path / "o.parquet", "layout.extra_columns", 5)
    filled = [a.format(out=out, tmp=tmp_path) for a in args]
    assert run(capsys, *filled) == (1, "", f"Error: the provenance of {out} is damaged or not bertfeat's: "
                                          f"layout.extra_columns is 5, not an object - {DAMAGED_FIX}\n")
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "q.npz").exists()


def test_verify_passes_over_recorded_files_that_loading_does_not_read(tmp_path, capsys):
    """Issue 44: the provenance's model_files are the files loading reads (hub.model_files). A file an earlier bertfeat
    recorded that is still in the folder but never read (a vocab.txt beside tokenizer.json, a folder modules.json does
    not name) is no difference; a recorded file that is gone is."""
    import json
    import shutil

    import pyarrow.parquet as pq

    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    (model / "2_Old").mkdir()
    (model / "2_Old" / "config.json").write_text("{}")
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows(20))
    out = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", model, "-q")[0] == 0

    def record(**files) -> None:  # the provenance as an earlier bertfeat wrote it, with more files recorded
        t = pq.read_table(out)
        meta = json.loads(t.schema.metadata[b"bertfeat"])
        meta["model_files"].update(files)
        pq.write_table(t.replace_schema_metadata({**t.schema.metadata, b"bertfeat": json.dumps(meta).encode()}), out)

    record(**{"2_Old/config.json": "0" * 64})
    assert run(capsys, "verify", out, "-q")[0] == 0
    record(**{"sentence_bert_config.json": "0" * 64})
    rc, _, err = run(capsys, "verify", out, "-q")
    assert (rc, err) == (1, f"Error: the model's files differ from the ones {out} was extracted with (sentence_bert_config"
                            f".json missing; in {model}) - extract the features again with this model, or pass --model "
                            "with the model they came from\n")


@pytest.mark.parametrize("raw, why", [
    (b"[1, 2]", "it is a JSON list, not an object"),
    (b"null", "it is JSON null, not an object"),  # (was 'a JSON NoneType', as 'a JSON str' below: found by audit)
    (b'"str"', "it is a JSON string, not an object"),
    (b'{"model": "\xff"}', "it is not UTF-8 text (invalid start byte at byte 11)"),
    (b"[" * 100_000 + b"]" * 100_000, "its JSON is nested deeper than any provenance"),
], ids=["list", "null", "string", "not-utf8", "nested"])
@pytest.mark.parametrize("command", ["verify", "pca fit", "pca transform"])
def test_a_provenance_that_is_no_object_is_damaged(pristine, tmp_path, capsys, raw, why, command):
    """Found by the session's own audit: a provenance that is a JSON list passed as none, one that is not UTF-8 or
    nested 100,000 deep gave the bug line."""
    import pyarrow.parquet as pq

    t = pq.read_table(pristine)
    f = tmp_path / "f.parquet"
    pq.write_table(t.replace_schema_metadata({b"bertfeat": raw}), f)
    if command == "pca transform":
        assert run(capsys, "pca", "fit", pristine, "-n", "2", "-o", tmp_path / "m.npz", "-q")[0] == 0
    args = {"verify": ["verify", f], "pca fit": ["pca", "fit", f, "-n", "2", "-o", tmp_path / "p.npz"],
            "pca transform": ["pca", "transform", f, "--pca-model", tmp_path / "m.npz", "-o", tmp_path / "r.parquet"]
            }[command]
    rc, _, err = run(capsys, *args)
    assert (rc, err) == (1, f"Error: the provenance of {f} is damaged or not bertfeat's: {why} - {DAMAGED_FIX}\n")


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_verify_names_a_row_that_holds_nan_or_an_infinity(extracted, tmp_path, capsys, value):
    """A NaN in the file compared as no difference: "0 of 60 rows differ ... (row 0 ...: 0, cosine 1.000000)", the
    table's largest difference 0 and smallest cosine 1 beside a DIFFERENT verdict."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, out = extracted
    t = pq.read_table(out)
    X = embeddings(t).copy()
    X[4, 3] = value
    edited = tmp_path / "edited.parquet"
    column = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])
    pq.write_table(t.set_column(t.schema.get_field_index("embedding"), "embedding", column), edited)
    r = verify_features(edited, sample=1000)
    assert not r["ok"] and r["worst"]["id"] == "r4" and not r["worst"]["finite"]
    assert r["max_relative_diff"] == np.inf and np.isnan(r["min_cosine"])
    assert [x["id"] for x in r["rows"] if x["relative"] > r["tolerance"]] == ["r4"]
    rc, stdout, err = run(capsys, "verify", edited, "--sample", "1000")
    assert (rc, err) == (1, "Error: 1 of 60 rows differ from their vector encoded alone by more than 1e-05 of their "
                            "norm (row 4, id 'r4': it holds NaN or infinite values) - the features do not match what "
                            "the model gives for their input now: the input, the model or the file changed since they "
                            "were extracted; extract them again\n")
    cells = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in stdout.splitlines() if line.count("│") == 3}
    assert (cells["largest difference"], cells["smallest cosine"], cells["verdict"]) == (
        "inf (inf of the row's norm)", "nan", "DIFFERENT")


def test_verify_finds_a_rejected_row_mended_in_the_input(tmp_path, capsys):
    """A row the run rejected, mended in the input since (its text filled in): as many rows were passed over as the
    run rejected, so verify said ok, though the file lacks the row the input now has."""
    rows = _rows()
    rows[5][1] = ""  # rejected under --on-bad-row skip
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], rows)
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--on-bad-row",
                     "skip", "-q")
    assert rc == 0, err
    assert verify_features(out)["ok"]
    rows[5][1] = "cats and dogs"  # mended
    write_csv(src, ["id", "text", "label"], rows)
    rc, _, err = run(capsys, "verify", out, "-q")
    assert (rc, err) == (1, f"Error: row 5 (id 'r5') of the input {src} is not in {out}, and it is not a bad row: the input "
                            "changed since the features were extracted (a row the run rejected mended since) - extract "
                            "the features again, or verify against the input they were extracted from (--input)\n")


def test_a_row_added_is_not_called_mended_when_the_provenance_has_no_row_counts(tmp_path, capsys):
    """Provenance without its row counts (an older bertfeat's, or edited): a row appended to the input since was
    named "a row the run rejected mended since", though the run rejected none."""
    rows = _rows()
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], rows[:-1])
    out = tmp_path / "o.csv"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "-q")
    assert rc == 0, err
    side = tmp_path / "o.csv.json"
    meta = json.loads(side.read_text())
    del meta["rows"]
    side.write_text(json.dumps(meta))
    write_csv(src, ["id", "text", "label"], rows)  # a row appended
    rc, _, err = run(capsys, "verify", out, "-q")
    last = len(rows) - 1
    assert (rc, err) == (1, f"Error: row {last} (id 'r{last}') of the input {src} is not in {out}, and it is not a bad "
                            "row: the input changed since the features were extracted (a row added or mended since) - "
                            "extract the features again, or verify against the input they were extracted from (--input)\n")


def test_verify_says_to_pass_the_model_when_its_folder_moved(tmp_path, capsys):
    """The model folder the provenance names, moved since, gave the hub's 'model ... not found - check the path' (a path
    the user never gave): the fix is --model with where it is now."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    src = write_csv(tmp_path / "in.csv", ["text"], [[r[1]] for r in _rows(10)])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", model, "-q")
    assert rc == 0, err
    moved = model.rename(tmp_path / "moved")
    rc, _, err = run(capsys, "verify", out, "-q")
    assert (rc, err) == (1, f"Error: the model {out} was extracted with is not found (model '{model}' not found; looked "
                            f"in: local directory {model}) - pass --model with where it is now (its weights' sha256 "
                            "must match)\n")
    assert run(capsys, "verify", out, "--model", moved, "-q") == (0, "", "")


# --------------------------------------------------------------------------- a feature file edited by hand
@pytest.fixture()
def csv_features(tmp_path, capsys):
    """A CSV feature file (its provenance in f.csv.json) with an id column and a kept label."""
    src = write_csv(tmp_path / "in.csv", ["id", "text", "label"], _rows(20))
    out = tmp_path / "f.csv"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "--keep", "label",
                     "-q")
    assert rc == 0, err
    return out


def test_verify_counts_the_rows_of_a_csv_file_itself(csv_features, capsys):
    """Found by the seventh hostile-input round: a CSV's row count was its provenance's, never the file's. Its last
    row deleted, verify blamed the input ("1 rows of the input in.csv are not in f.csv ...: the input changed since
    the features were extracted"); its provenance edited to say 19 rows were written, it said ok, "20 of 19" rows."""
    lines = csv_features.read_text().splitlines(keepends=True)
    csv_features.write_text("".join(lines[:-1]))
    rc, _, err = run(capsys, "verify", csv_features, "-q")
    assert (rc, err) == (1, f"Error: {csv_features} has 19 rows, but its provenance says 20 were written: rows were lost "
                            "since (a part file removed, the file edited) - extract the features again\n")
    csv_features.write_text("".join(lines))
    side = Path(f"{csv_features}.json")
    meta = json.loads(side.read_text())
    meta["rows"]["written"] = meta["layout"]["rows"] = 19
    side.write_text(json.dumps(meta))
    rc, _, err = run(capsys, "verify", csv_features, "-q")
    assert (rc, err) == (1, f"Error: {csv_features} has 20 rows, but its provenance says 19 were written: rows were "
                            "added since (the file edited, a part file added) - extract the features again\n")


@pytest.mark.parametrize("old, new, said", [
    ('"n_tokens"', '"ntok"', "'n_tokens' missing; 'ntok' added"),  # was: ok, exit 0
    ('"label"', '"Label"', "'label' missing; 'Label' added"),  # was: ok, exit 0
    ('"id"', '"ident"', "id column 'id' missing; 'ident' added"),  # was: "row 0 (id 0) is not in the input ... in its place"
])
def test_verify_finds_a_column_renamed_in_the_file(csv_features, capsys, old, new, said):
    """Found by the seventh hostile-input round: a renamed extra column passed unseen (exit 0), and a renamed id column
    made its rows' numbers their ids, so the walk blamed the input. The file's columns are its layout's."""
    text = csv_features.read_text()
    header, rest = text.split("\n", 1)
    csv_features.write_text(header.replace(old, new, 1) + "\n" + rest)
    rc, _, err = run(capsys, "verify", csv_features, "-q")
    assert (rc, err) == (1, f"Error: the columns of {csv_features} are not the ones its provenance records ({said}) - "
                            "restore the file and its provenance as bertfeat extract wrote them, or extract the features "
                            "again\n")


def test_verify_names_a_missing_ids_file_of_a_npy(tmp_path, capsys):
    """A .npy whose ids file (out.ids.csv) was deleted read its rows' numbers as ids: "o.npy's row 0 (id 0) is not in
    the input in.csv in its place", as if the input had changed."""
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [r[:2] for r in _rows(12)])
    out = tmp_path / "o.npy"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "-q")[0] == 0
    assert run(capsys, "verify", out, "-q") == (0, "", "")
    (tmp_path / "o.ids.csv").unlink()
    rc, _, err = run(capsys, "verify", out, "-q")
    assert (rc, err) == (1, f"Error: {out}'s ids file {tmp_path / 'o.ids.csv'} is missing (its ids and columns id, "
                            "n_chunks, n_tokens, truncated) - put it back beside the .npy file, or extract the features "
                            "again\n")


@pytest.mark.skipif(not rows_bit_for_bit(), reason=NOT_BIT_FOR_BIT)
def test_verify_names_the_row_of_its_largest_difference(tmp_path, capsys):
    """Found by the seventh hostile-input round: a value edited in its last digit is within the tolerance (verify says ok,
    as float32 rounding may differ so much), and the table said only "bit-identical 29" of 30, not which row differs."""
    src = write_csv(tmp_path / "in.csv", ["id", "text"], [r[:2] for r in _rows(12)])
    out = tmp_path / "o.npy"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id", "-q")[0] == 0
    X = np.load(out)
    X[4, 3] = np.nextafter(X[4, 3], np.float32(np.inf))
    np.save(out, X)
    rc, stdout, err = run(capsys, "verify", out, "--sample", "100")
    assert (rc, err) == (0, "")
    cells = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in stdout.splitlines() if line.count("│") == 3}
    r = verify_features(out, sample=100)
    assert r["rows_identical"] == 11 and r["worst"]["id"] == "r4" and r["ok"]
    assert cells["largest difference"] == (f"{r['max_abs_diff']:.3g} ({r['max_relative_diff']:.3g} of the row's norm; "
                                           "row 4, id 'r4')")


def test_features_reduced_by_a_pca_never_saved_say_so(pristine, tmp_path):
    """reduce_features_file with a PCA made in memory records no model file: verify said 'a PCA model that is not found
    ()' and to put the file back (found by audit)."""
    from bertfeat.features.reader import read_features
    from bertfeat.pca.estimator import PCA
    from bertfeat.pca.reduce import reduce_features_file

    _, X, meta = read_features(pristine)
    pca = PCA(n_components=2).fit(X)
    pca.fingerprint_ = meta["fingerprint"]
    out = reduce_features_file(pristine, tmp_path / "r.parquet", pca)
    with pytest.raises(BertfeatError) as e:
        verify_features(out)
    assert e.value.message == (f"the features of {out} were reduced by a PCA whose provenance names no model file (a "
                               "PCA applied in Python without being saved) - verify the features before the PCA, or "
                               "save the PCA (PCA.save) and reduce the features with the saved model")
