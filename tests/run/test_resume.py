"""--resume: a run killed with SIGKILL (or stopped by Ctrl-C) part-way continues from its last
completed chunk and ends with the output an uninterrupted run writes; a resume with other
settings or a changed input is refused with a message that says what differs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import numpy as np
import pytest

import bertfeat.run.progress
from extract_util import (Interrupt, assert_tables_match, metadata, no_leftovers, read_table, run, sigkill_when, summary_line,
                          tiny_model, write_csv)

WORDS = ("river mountain bread cheese rain snow code maths ship bird music art train car cat dog "
         "garden window letter market winter summer city village forest ocean").split()

# Fields that may differ between a resumed and an uninterrupted run: when, and the command typed.
VOLATILE = ("created", "command")


def corpus(path, n):
    rows = [[f"id{i:05d}", f"{WORDS[i % 25]} number {i} goes to the {WORDS[(7 * i) % 25]} with a {WORDS[(3 * i) % 25]}"]
            for i in range(n)]
    return write_csv(path, ["id", "text"], rows)


def parts(out):
    return sorted((out.parent / (out.name + ".partial")).glob("part-*.parquet"))


def assert_same_output(a, b):
    ta, tb = read_table(a), read_table(b)
    assert ta.schema.remove_metadata() == tb.schema.remove_metadata()
    assert ta.equals(tb)  # every value, bit for bit
    ma, mb = metadata(a), metadata(b)
    assert {k: v for k, v in ma.items() if k not in VOLATILE} == {k: v for k, v in mb.items() if k not in VOLATILE}


def interrupted_run(capsys, monkeypatch, src, out, *extra, after=2):
    monkeypatch.setattr(bertfeat.run.progress, "make_progress", lambda *a, **k: Interrupt(after))
    rc, _, err = run(capsys, "extract", src, "-o", out, *extra)
    monkeypatch.undo()
    partial = out.with_name(out.name + ".partial")
    assert (rc, err.splitlines()[-1]) == (130, f"Interrupted: {after} chunk(s) are kept in {partial}; run the same "
                                               "command with --resume to continue"), err
    assert err.count(f"kept in {partial}") == 1  # one line says it
    assert not out.exists()
    assert len(parts(out)) == after
    return rc


def test_sigkill_then_resume_gives_the_uninterrupted_output(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv", 300)
    out = tmp_path / "run" / "f.parquet"
    out.parent.mkdir()
    args = ["--id-column", "id", "--chunk-rows", "10", "--threads", "1"]
    p = subprocess.Popen(["bertfeat", "extract", str(src), "-o", str(out), *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    sigkill_when(p, lambda: len(parts(out)) >= 3)
    assert p.returncode == -signal.SIGKILL
    assert not out.exists()  # nothing at the output path, not even a temporary that could be taken for it
    assert [x for x in os.listdir(out.parent) if x.startswith("f.parquet") and x != "f.parquet.partial"] == []
    done = len(parts(out))
    assert 3 <= done < 30

    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert summary_line(err, "resumed") == f"resumed {done} chunk(s), {10 * done} rows, from the interrupted run (counted above, not in the throughput)"
    assert no_leftovers(out) == ["f.parquet"]  # the partial directory is gone

    full = tmp_path / "full" / "f.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", full, *args)
    assert rc == 0, err
    assert "resumed" not in err
    assert_same_output(out, full)
    t = read_table(out)
    assert t.column("id").to_pylist() == [f"id{i:05d}" for i in range(300)]
    assert metadata(out)["rows"]["written"] == 300


def test_ctrl_c_then_resume_with_rejects(tmp_path, capsys, monkeypatch):
    """Rejects of finished chunks survive the interruption: the rejects file is the uninterrupted one too."""
    rows = [[f"r{i}", "" if i % 4 == 1 else f"text {i}"] for i in range(14)]
    src = write_csv(tmp_path / "c.csv", ["id", "text"], rows)
    out = tmp_path / "a" / "o.parquet"
    args = ["--model", tiny_model(), "--id-column", "id", "--chunk-rows", 3, "--on-bad-row", "skip"]
    interrupted_run(capsys, monkeypatch, src, out, *args, after=2)
    assert not (tmp_path / "a" / "o.parquet.rejects.csv").exists()
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert summary_line(err, "resumed") == "resumed 2 chunk(s), 4 rows, from the interrupted run (counted above, not in the throughput)"
    full = tmp_path / "b" / "o.parquet"
    assert run(capsys, "extract", src, "-o", full, *args)[0] == 0
    assert_same_output(out, full)
    assert (tmp_path / "a" / "o.parquet.rejects.csv").read_text() == (tmp_path / "b" / "o.parquet.rejects.csv").read_text()
    assert summary_line(err, "rows rejected") == "rows rejected 4"


def test_an_interrupted_python_call_says_what_was_kept(tmp_path):
    """bertfeat.extract: the KeyboardInterrupt's message is the note the CLI prints after Ctrl-C, in Python's words
    (it said --resume to a Python caller)."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt) as e:
        bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, progress=Interrupt(2))
    assert str(e.value) == f"2 chunk(s) are kept in {out}.partial; run the same command with resume=True to continue"
    assert e.value.resume_note == f"2 chunk(s) are kept in {out}.partial; run the same command with --resume to continue"
    assert bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, resume=True).chunks_resumed == 2


def test_a_second_ctrl_c_while_the_first_is_handled_keeps_the_first_ones_note(tmp_path, monkeypatch):
    """A second KeyboardInterrupt raised as the first unwound (releasing the output lock; a signal sent again) had no
    note: 'Interrupted.' where the run had kept its chunks, or finished (found in a helper's review of Dask stops)."""
    import contextlib

    import bertfeat.run.outlock as outlock

    real = outlock.output_lock

    @contextlib.contextmanager
    def stopped_again(*a, **k):
        with real(*a, **k):
            try:
                yield
            finally:
                if k.get("create", True):  # the run's lock (the plan's check takes one with create=False)
                    raise KeyboardInterrupt  # the second one, with the first as its context

    monkeypatch.setattr(outlock, "output_lock", stopped_again)
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt) as e:
        bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, progress=Interrupt(2))
    assert e.value.resume_note == f"2 chunk(s) are kept in {out}.partial; run the same command with --resume to continue"
    assert str(e.value) == f"2 chunk(s) are kept in {out}.partial; run the same command with resume=True to continue"


@pytest.mark.parametrize("given, resumed", [
    (dict(encoder_options={"threads": 1}), dict(threads=2)),
    (dict(encoder_options={"max_length": 64}), dict(max_length=64)),
    (dict(max_batch_tokens=64), dict(encoder_options={"max_batch_tokens": 128})),
])
def test_where_an_encoder_option_was_given_does_not_refuse_a_resume(tmp_path, given, resumed):
    """The manifest held encoder_options as given: threads there, or a setting moved to its own keyword, refused the
    resume ("encoder_options: {'threads': 1} -> None"), though no vector changes; the merged values are compared."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, progress=Interrupt(2), **given)
    s = bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, resume=True, **resumed)
    assert (s.chunks_resumed, s.rows_written) == (2, 12)


def test_numpy_values_and_paths_in_encoder_options_run(tmp_path):
    """encoder_options={'max_length': np.int64(64)} or a pathlib model was a raw TypeError (the manifest's JSON) that
    left OUTPUT.partial/ behind; they are the numbers and paths they hold, as the keywords of their own."""
    src = corpus(tmp_path / "c.csv", 6)
    ref = bertfeat.extract(src, tmp_path / "ref.parquet", model=tiny_model(), max_length=64, threads=1)
    s = bertfeat.extract(src, tmp_path / "o.parquet", encoder_options={
        "model": Path(tiny_model()), "max_length": np.int64(64), "threads": np.int32(1), "max_batch_tokens": np.int64(128)})
    assert s.rows_written == ref.rows_written == 6
    assert read_table(tmp_path / "o.parquet").column("embedding").equals(read_table(tmp_path / "ref.parquet").column("embedding"))
    assert no_leftovers(tmp_path / "o.parquet") == ["o.parquet"]


def test_a_resumed_runs_throughput_counts_only_its_own_rows(tmp_path, capsys, monkeypatch):
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    interrupted_run(capsys, monkeypatch, src, out, "--model", tiny_model(), "--chunk-rows", 3)
    s = bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, resume=True)
    assert (s.chunks_resumed, s.rows_resumed, s.rows_written) == (2, 6, 12)
    assert 0 < s.tokens_resumed < s.tokens
    assert s.rows_per_s == pytest.approx(6 / s.elapsed) and s.tokens_per_s == pytest.approx(
        (s.tokens - s.tokens_resumed) / s.elapsed)


#: the fix of a resume refused for other settings: the original ones named where they are given as recorded
ORIGINAL = "rerun with --overwrite instead of --resume to start over, or resume with the original settings ({})\n"
GENERIC = "rerun with --overwrite instead of --resume to start over, or use the original settings\n"


@pytest.mark.parametrize("change, differs, fix", [
    (["--pooling", "cls"], "pooling: 'mean' -> 'cls'", ORIGINAL.format("--pooling mean")),
    (["--layers=-2"], "layers: [2] -> [1]", GENERIC),  # (recorded as hidden-state indices, not as --layers takes)
    (["--normalize"], "normalize: False -> True", GENERIC),
    (["--pooling", "max", "--max-length", "32"], "pooling: 'mean' -> 'max'; max length: 128 -> 32",
     ORIGINAL.format("--pooling mean --max-length 128")),
    (["--max-length", "32", "--chunk-rows", "5"], "max length: 128 -> 32; chunk rows: 3 -> 5",
     ORIGINAL.format("--chunk-rows 3 --max-length 128")),
    (["--chunk-rows", "5"], "chunk rows: 3 -> 5", ORIGINAL.format("--chunk-rows 3")),
    (["--dtype", "float16"], "dtype: 'float32' -> 'float16'", ORIGINAL.format("--dtype float32")),
    (["--text-column", "text", "--layers=-2"], "layers: [2] -> [1]", GENERIC),
])
def test_resume_with_other_settings_is_refused(tmp_path, capsys, monkeypatch, change, differs, fix):
    """Refused, naming what differs; the fix names the original settings where each is recorded as its option takes
    it (it said only 'or use the original settings', naming none: a CLI review)."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, *change, "--resume")
    assert (rc, err) == (1, f"Error: cannot resume: the settings or the input differ from the interrupted run ({differs}) - "
                            + fix)
    assert not out.exists() and len(parts(out)) == 2  # refused, nothing touched: the right settings still resume
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert summary_line(err, "resumed") == "resumed 2 chunk(s), 6 rows, from the interrupted run (counted above, not in the throughput)"


@pytest.mark.parametrize("change, differs, lengths, original", [
    (["--long-text", "chunk-mean", "--stride", "2"], "long text: 'truncate' -> 'chunk-mean'; stride: 32 -> 2", "10",
     "--long-text truncate --stride 32"),
    (["--max-length", "12"], "max length: 10 -> 12", "10 or 12", "--max-length 10"),
])
def test_a_resume_refused_for_a_setting_the_cache_spans_says_the_cache_makes_starting_over_cheap(
        tmp_path, capsys, monkeypatch, change, differs, lengths, original):
    """A resume after --long-text, --stride or --max-length changed is refused (the kept chunks hold the old policy's
    vectors of the long rows; a Dask part carries its run's key), and the fix said only "rerun with --overwrite ...,
    or use the original settings", as for a new model: nothing told that with the cache the interrupted run filled,
    --overwrite encodes again only the finished rows longer than max length, nor what the original settings were.
    Following the fix encodes exactly those rows and the rows never finished, and writes a fresh run's output."""
    src = write_csv(tmp_path / "c.csv", ["id", "text"], [[f"id{i}", WORDS[i] if i % 2 else f"{WORDS[i]} number {i} goes to "
                                                          f"the {WORDS[i + 1]} with a {WORDS[i + 2]}"] for i in range(12)])
    out, cache = tmp_path / "o.parquet", tmp_path / "cache"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--max-length", 10, "--cache", cache]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, *change, "--resume")
    assert (rc, err) == (1, f"Error: cannot resume: the settings or the input differ from the interrupted run ({differs}) - "
                            "rerun with --overwrite instead of --resume to start over: with the vector cache the interrupted "
                            "run used (--cache DIR), the rows it finished are taken from the cache, all but those longer "
                            f"than max length {lengths}; or resume with the interrupted run's settings ({original})\n")
    assert not out.exists() and len(parts(out)) == 2  # refused, nothing touched
    long_rows = sum(sum(read_table(p).column("truncated").to_pylist()) for p in parts(out))  # longer than 10 (and 12)
    assert long_rows == 3  # the even rows
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, *change, "--overwrite")  # the fix, as it says
    assert rc == 0, err
    assert (summary_line(err, "rows encoded"), summary_line(err, "rows reused")) == (
        f"rows encoded {long_rows + 6}", f"rows reused {6 - long_rows}")
    fresh = tmp_path / "fresh.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", fresh, *args[:-2], *change, "--no-cache")
    assert rc == 0, err
    assert_tables_match(read_table(out), read_table(fresh))  # ids, features, counts: bit for bit (where rows are)


@pytest.mark.parametrize("first, then", [(["--prompt-name", "doc"], ["--prompt", "passage: "]),
                                         (["--prompt", "query: "], [])])  # [] : the model's default, query
def test_a_prompt_given_by_its_name_or_its_text_resumes(tmp_path, capsys, monkeypatch, first, then):
    """The prompt's name changes no vector (its text is compared): a run interrupted with --prompt-name doc resumes
    with --prompt "passage: " (before: refused, "prompt_name: 'doc' -> None"), to the output of an uninterrupted run
    with the resuming run's options, bit for bit, its provenance too; another prompt text is refused naming it."""
    from extract_util import tiny_st_model

    model = tiny_st_model(tmp_path / "st")
    (model / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "doc": "passage: "}, "default_prompt_name": "query"}))
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", model, "--chunk-rows", 3, "--id-column", "id"]
    interrupted_run(capsys, monkeypatch, src, out, *args, *first)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--prompt", "query", "--resume")
    prompt = first[1] if first[0] == "--prompt" else "passage: "
    assert (rc, err) == (1, f"Error: cannot resume: the settings or the input differ from the interrupted run (prompt: "
                            f"{prompt!r} -> 'query') - rerun with --overwrite instead of --resume to start over, or use "
                            "the original settings\n")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, *then, "--resume")
    assert rc == 0, err
    assert summary_line(err, "resumed") == "resumed 2 chunk(s), 6 rows, from the interrupted run (counted above, not in the throughput)"
    full = tmp_path / "full.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", full, *args, *then)
    assert rc == 0, err
    assert_same_output(out, full)


def test_a_float16_run_resumes_float16_only(tmp_path, capsys, monkeypatch):
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.npy"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--dtype", "float16"]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args[:-2], "--resume")
    assert rc == 1 and "(dtype: 'float16' -> 'float32')" in err
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert np.load(out).dtype == np.float16 and np.load(out).shape[0] == 12


@pytest.mark.parametrize("first, then, differs, fix", [
    (["--truncate-dim", "8"], [], "truncate dim: 8 -> None", ORIGINAL.format("--truncate-dim 8")),  # the key only
    ([], ["--truncate-dim", "8"], "truncate dim: None -> 8", GENERIC),  # the interrupted run's fingerprint has
    (["--truncate-dim", "8"], ["--truncate-dim", "16"], "truncate dim: 8 -> 16", ORIGINAL.format("--truncate-dim 8")),
])
def test_resume_with_another_truncate_dim_is_refused(tmp_path, capsys, monkeypatch, first, then, differs, fix):
    """The parts of a run cut to 8 features were resumed by a run keeping all 32 (and their rows mixed in one file)."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args, *first)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, *then, "--resume")
    assert (rc, err) == (1, f"Error: cannot resume: the settings or the input differ from the interrupted run ({differs}) - "
                            + fix)
    assert not out.exists() and len(parts(out)) == 2
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, *first, "--resume")
    assert rc == 0, err
    assert read_table(out).schema.field("embedding").type.list_size == (8 if first else 32)


def test_resume_compares_every_fingerprint_key_either_run_has():
    """renormalize (normalize=True with a cut) is in the fingerprint only when true: a resume without it compared it not."""
    from bertfeat.run.manifest import manifest_differences

    cut = {"normalize": True, "truncate_dim": 8}
    assert manifest_differences({**cut, "renormalize": True}, cut) == ["normalized again after the cut: True -> False"]
    assert manifest_differences(cut, {**cut, "renormalize": True}) == ["normalized again after the cut: False -> True"]


def test_resume_on_another_gemm_path_is_refused(tmp_path, capsys, monkeypatch):
    """A run interrupted on oneDNN and resumed with NumPy's BLAS would mix two roundings in one file (the vector cache
    keys the GEMM path; the manifest did not): refused, naming it."""
    from bertfeat.ops import gemm

    if gemm.resolve("fp32").library != "onednn":
        pytest.skip("needs oneDNN (the fast extra) to have two GEMM paths")
    library = gemm.resolve("fp32").to_dict()["library"]
    original = os.environ.get("BERTFEAT_GEMM")
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    monkeypatch.setenv("BERTFEAT_GEMM", "numpy")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err) == (1, "Error: cannot resume: the settings or the input differ from the interrupted run (GEMM path: "
                            f"{library} -> numpy matmul) - rerun with --overwrite instead of --resume to start over, or use "
                            "the original settings\n")
    if original is None:
        monkeypatch.delenv("BERTFEAT_GEMM")
    else:  # BERTFEAT_GEMM=onednn: oneDNN on AVX2 is only chosen by it
        monkeypatch.setenv("BERTFEAT_GEMM", original)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err


def test_resume_on_other_kernels_names_what_differs(tmp_path, capsys, monkeypatch):
    """The same GEMM library with other element-wise kernels (BERTFEAT_KERNELS=numpy, a NUMBA_* setting): the refusal
    printed both GEMM dicts whole, six keys each, for the one or two that differ (found by audit)."""
    import sys

    from bertfeat.ops import kernels

    if kernels.backend() != "numba":
        pytest.skip("needs numba to have two kernel backends")
    numba = f"numba {sys.modules['numba'].__version__}"
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    monkeypatch.setenv("BERTFEAT_KERNELS", "numpy")
    kernels.use(None)
    try:
        rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    finally:
        monkeypatch.delenv("BERTFEAT_KERNELS")
        kernels.use(None)
    assert (rc, err) == (1, "Error: cannot resume: the settings or the input differ from the interrupted run (GEMM path: "
                            f"kernels '{numba}' -> 'numpy') - rerun with --overwrite "
                            "instead of --resume to start over, or use the original settings\n")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err


def test_gemm_path_differences_say_none_for_a_key_one_path_lacks():
    """A key only one GEMM path has is 'none' there, not Python's None; the attention's revision, which follows the
    kernels (cache.store.attention_revision), is not named beside them (audit: "attention None -> 'per sequence'")."""
    from bertfeat.run.manifest import manifest_differences

    a = {"gemm": {"library": "onednn", "kernels": "numba 0.61"}}
    fuse_off = {"gemm": {"library": "onednn", "kernels": "numba 0.61", "post_ops": "off"}}
    assert manifest_differences(a, fuse_off) == ["GEMM path: post_ops none -> 'off'"]
    assert manifest_differences(fuse_off, a) == ["GEMM path: post_ops 'off' -> none"]
    numpy = {"gemm": {"library": "onednn", "kernels": "numpy", "attention": "per sequence"}}
    assert manifest_differences(a, numpy) == ["GEMM path: kernels 'numba 0.61' -> 'numpy'"]


@pytest.mark.parametrize("fmt", ["parquet", "npy", "csv"])
def test_ctrl_c_while_the_outputs_are_written_leaves_the_old_ones_whole(tmp_path, capsys, monkeypatch, fmt):
    """extract --pca --overwrite writes the PCA model, its report (the PNG takes a second), the features and their side
    files: Ctrl-C at any point before they are all done leaves every old file as it was (a new model beside old
    features, or new ids beside an old matrix, before), no temporary file, and says --resume writes them."""
    import bertfeat.pca.report

    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / f"o.{fmt}"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--pca", 2, "--id-column", "id"]
    assert run(capsys, "extract", src, "-o", out, *args)[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert len(before) == {"parquet": 5, "npy": 7, "csv": 6}[fmt] + 1  # + the input
    other = corpus(tmp_path / "c.csv", 15)  # a new corpus under the same name
    real_draw = bertfeat.pca.report._draw

    def draw(report, path):  # Ctrl-C while the report's PNG is drawn, after the model file was saved
        real_draw(report, path)
        raise KeyboardInterrupt

    monkeypatch.setattr(bertfeat.pca.report, "_draw", draw)
    rc, _, err = run(capsys, "extract", other, "-o", out, *args, "--overwrite")
    assert rc == 130 and "Interrupted: no output was written; the 5 finished chunk(s) are kept in" in err, err
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != "c.csv"}
    assert after == {k: v for k, v in before.items() if k != "c.csv"}  # every old file, byte for byte; no temporary
    monkeypatch.undo()
    rc, _, err = run(capsys, "extract", other, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert all(p.read_bytes() != before[p.name] for p in tmp_path.iterdir() if p.suffix in (".npz", f".{fmt}"))


def test_ctrl_c_while_the_outputs_are_moved_into_place_finishes_them_and_says_so(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the final moves is held back until every file is in place, then stops the run (exit 130); the
    note said "no output was written ... --resume" and left the partial directory, for a complete output."""
    import bertfeat.atomic

    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    real = os.replace
    sent = []

    def replace(a, b):
        if Path(b) == out and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        real(a, b)

    monkeypatch.setattr(bertfeat.atomic.os, "replace", replace)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", 3, "--pca", 2)
    assert rc == 130 and sent, err
    assert f"Interrupted: {out} and the run's other files were written and are complete" in err, err
    assert "--resume" not in err and not (tmp_path / "o.parquet.partial").exists()
    assert read_table(out).num_rows == 12 and (tmp_path / "o.pca.npz").is_file()


def test_a_resume_does_not_replace_an_output_that_appeared_since_the_interrupt(tmp_path, capsys, monkeypatch):
    """An output the interrupted run never wrote (here made after the interrupt) is refused on --resume as it is on
    any run, naming --overwrite beside --resume: a resume used to replace it silently. With both, the run resumes."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--pca", 2]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    theirs = tmp_path / "o.pca.npz"
    theirs.write_bytes(b"someone else's file")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err) == (1, f"Error: {theirs} already exists, and the interrupted run did not write it - pass "
                            "--overwrite beside --resume (the finished chunks are still kept) to replace it, or "
                            "-o with another name\n")
    assert theirs.read_bytes() == b"someone else's file" and len(parts(out)) == 2
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume", "--overwrite")
    assert rc == 0, err
    assert summary_line(err, "resumed").startswith("resumed 2 chunk(s), 6 rows")
    assert read_table(out).num_rows == 12
    with np.load(theirs) as model:  # the run's PCA model replaced their file
        assert model["components"].shape[0] == 2


_KILL_AMONG_MOVES = r"""
import os, signal, sys
import bertfeat.atomic
from bertfeat.cli.app import main
real, out = os.replace, sys.argv[1]
def replace(a, b):
    if os.fspath(b) == out:  # the features' move: the PCA model and report are in place by now
        os.kill(os.getpid(), signal.SIGKILL)
    real(a, b)
bertfeat.atomic.os.replace = replace
main(sys.argv[2:])
"""


def test_a_kill_among_the_final_moves_resumes_without_overwrite(tmp_path, capsys):
    """SIGKILL after the PCA model and report were moved into place but before the features: those outputs are the
    interrupted run's own (its finish listed them in OUTPUT.partial/ first), so --resume replaces them without
    --overwrite, and the output equals an uninterrupted run's."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "run" / "o.parquet"
    out.parent.mkdir()
    args = ["--model", str(tiny_model()), "--chunk-rows", "3", "--pca", "2", "--threads", "1"]
    r = subprocess.run([sys.executable, "-c", _KILL_AMONG_MOVES, str(out), "extract", str(src), "-o", str(out), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert (out.parent / "o.pca.npz").is_file() and not out.exists() and (out.parent / "o.parquet.partial").is_dir()
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert no_leftovers(out)[0] == "o.parquet" and not (out.parent / "o.parquet.partial").exists()
    full = tmp_path / "full" / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", full, *args)
    assert rc == 0, err
    assert_same_output(out, full)


def test_resume_with_another_model_is_refused(tmp_path, capsys, monkeypatch):
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    interrupted_run(capsys, monkeypatch, src, out, "--model", tiny_model(), "--chunk-rows", 3, "--max-length", 64)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--chunk-rows", 3, "--max-length", 64, "--resume")
    assert rc == 1
    assert err.startswith(f"Error: cannot resume: the settings or the input differ from the interrupted run (model: '{tiny_model()}' -> "
                          "'sentence-transformers/all-MiniLM-L6-v2'; model weights sha256: '")


#: the fix of a resume refused because the input's files changed (before 2026-12-01: "..., or use the original
#: settings", though no setting had changed and the input could not be put back)
ON_THE_INPUT_AS_IT_IS = ("rerun with --overwrite instead of --resume to start over on the input as it is now (with the "
                         "vector cache the interrupted run used, --cache DIR, the rows it finished that are still in the "
                         "input are taken from the cache)")
#: ... and when the interrupted run had no vector cache (before 2026-12-04 the fix named "the vector cache the
#: interrupted run used" there too, though a rerun with --cache DIR had nothing to take back: found by audit)
NO_CACHE_ON_THE_INPUT = ("rerun with --overwrite instead of --resume to start over on the input as it is now (every row "
                         "is encoded again: the interrupted run had no vector cache)")


def test_resume_with_a_changed_input_is_refused(tmp_path, capsys, monkeypatch):
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    size = src.stat().st_size
    with open(src, "a") as f:
        f.write("id99999,one more row\n")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err) == (1, "Error: cannot resume: the settings or the input differ from the interrupted run "
                            f"(input file changed: {src.resolve()} (size {size} -> {src.stat().st_size} bytes)) - "
                            f"{NO_CACHE_ON_THE_INPUT}\n")
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    interrupted_run(capsys, monkeypatch, src, out, *args, "--overwrite")  # a fresh run (--overwrite) starts over
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err) == (1, "Error: cannot resume: the settings or the input differ from the interrupted run "
                            f"(input file changed: {src.resolve()} (modified since the interrupted run)) - "
                            f"{NO_CACHE_ON_THE_INPUT}\n")


def test_a_refused_resume_names_the_cache_only_when_the_interrupted_run_had_one(tmp_path, capsys, monkeypatch):
    """The fix of a resume refused for --max-length said "with the vector cache the interrupted run used (--cache
    DIR), the rows it finished are taken from the cache" also after a run without a cache (found by audit): the
    manifest now records whether there was one, compared by no resume (one resumed with or without a cache goes on),
    nor in the Dask run key; an earlier bertfeat's manifest, which does not say, keeps the words naming it."""
    import json

    from bertfeat.run.dask import _run_key

    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--max-length", 10]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args[:-1], "12", "--resume")
    assert (rc, err.split(" - ", 1)[1]) == (1, "rerun with --overwrite instead of --resume to start over (every row is "
                                               "encoded again: the interrupted run had no vector cache), or resume with "
                                               "the interrupted run's settings (--max-length 10)\n")
    manifest = out.with_name(out.name + ".partial") / "manifest.json"
    earlier = json.loads(manifest.read_text())
    assert earlier.pop("vector_cache") is False
    manifest.write_text(json.dumps(earlier))  # as an earlier bertfeat wrote it
    rc, _, err = run(capsys, "extract", src, "-o", out, *args[:-1], "12", "--resume")
    assert rc == 1 and "with the vector cache the interrupted run used (--cache DIR)" in err
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--cache", tmp_path / "cache", "--resume", "-q")
    assert (rc, err) == (0, "")  # a cache now, none then: resumed
    assert _run_key({**earlier, "vector_cache": True}) == _run_key({**earlier, "vector_cache": False}) == _run_key(earlier)


def test_the_input_spelled_otherwise_resumes(tmp_path, capsys, monkeypatch):
    """A resume given the same input file by another spelling (./c.csv, its absolute path, from another directory)
    was refused ("the settings or the input differ ... (input: 'c.csv' -> './c.csv')"), its only fix starting over:
    the same files resume, to the uninterrupted run's output; other files named are still refused, and a file changed
    under a respelled path is named as changed (the fix that keeps the cached rows)."""
    src = corpus(tmp_path / "c.csv", 12)
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    whole = tmp_path / "whole.parquet"
    assert run(capsys, "extract", src, "-o", whole, *args, "-q")[0] == 0
    out = tmp_path / "o.parquet"
    cwd = os.getcwd()
    os.chdir(tmp_path)  # (not monkeypatch.chdir: interrupted_run undoes the monkeypatch)
    try:
        interrupted_run(capsys, monkeypatch, Path("c.csv"), out, *args)
        for given in ("./c.csv", str(src.resolve())):  # each resumes; the run is interrupted again for the next
            rc, _, err = run(capsys, "extract", given, "-o", out, *args, "--resume", "-q")
            assert (rc, err) == (0, ""), given
            assert read_table(out).equals(read_table(whole))  # every value, bit for bit
            (a, b), skip = (metadata(out), metadata(whole)), {"input", *VOLATILE}
            assert a["input"] == given and {k: v for k, v in a.items() if k not in skip} == {
                k: v for k, v in b.items() if k not in skip}
            out.unlink()
            interrupted_run(capsys, monkeypatch, Path("c.csv"), out, *args, "--overwrite")
    finally:
        os.chdir(cwd)
    other = corpus(tmp_path / "d.csv", 12)
    rc, _, err = run(capsys, "extract", other, "-o", out, *args, "--resume")
    assert (rc, err.split(" - ")[0]) == (1, "Error: cannot resume: the settings or the input differ from the "
                                            f"interrupted run (input: 'c.csv' -> {str(other)!r})")
    with open(src, "a") as f:
        f.write("id99999,one more row\n")
    rc, _, err = run(capsys, "extract", src.resolve(), "-o", out, *args, "--resume")
    assert (rc, err.split(" - ")[1]) == (1, f"{NO_CACHE_ON_THE_INPUT}\n")
    assert err.startswith(f"Error: cannot resume: the settings or the input differ from the interrupted run (input "
                          f"file changed: {src.resolve()} (size "), err


def test_a_resume_refused_for_an_edited_input_says_starting_over_reuses_the_cached_rows(tmp_path, capsys, monkeypatch):
    """The corpus edited after an interrupted run (a row appended, a finished row edited): the resume is refused, and its
    fix no longer says "or use the original settings" (no setting changed). Following it with the interrupted run's
    cache encodes only the rows never finished, the appended one and the edited one, and writes a fresh run's output."""
    src = corpus(tmp_path / "c.csv", 12)
    out, cache = tmp_path / "o.parquet", tmp_path / "cache"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--id-column", "id", "--cache", cache]
    interrupted_run(capsys, monkeypatch, src, out, *args)  # rows 0-5 finished, in the cache
    src.write_text(src.read_text().replace("id00001,", "id00001,edited ") + "id99999,one more row\n")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 1 and err.startswith(f"Error: cannot resume: the settings or the input differ from the interrupted run "
                                      f"(input file changed: {src.resolve()} (size ")
    assert err.endswith(f" - {ON_THE_INPUT_AS_IT_IS}\n")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--overwrite")
    assert rc == 0, err
    assert (summary_line(err, "rows encoded"), summary_line(err, "rows reused")) == ("rows encoded 8", "rows reused 5")
    fresh = tmp_path / "fresh.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", fresh, *args[:-2], "--no-cache")
    assert rc == 0, err
    assert_tables_match(read_table(out), read_table(fresh))


def test_a_resume_after_the_applied_pca_model_was_refitted_names_it_in_words(tmp_path, capsys, monkeypatch):
    """The PCA model a run applies (--pca-model, a pipeline's training PCA) refitted after the run was interrupted:
    the resume is refused (the kept chunks were reduced with the old model), and said so as two dicts, each with its
    whole sha256 ("pca_model: {'path': ..., 'sha256': '...64 digits...'} -> {...}"). It now names the model file and
    the start of both digests."""
    import hashlib

    train, out = corpus(tmp_path / "train.csv", 12), tmp_path / "o.parquet"
    model = tmp_path / "train.pca.npz"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    assert run(capsys, "extract", train, "-o", tmp_path / "train.parquet", *args, "--pca", 2, "-q")[0] == 0
    before = hashlib.sha256(model.read_bytes()).hexdigest()
    interrupted_run(capsys, monkeypatch, corpus(tmp_path / "c.csv", 12), out, *args, "--pca-model", model)
    corpus(train, 9)  # the training set changed: its PCA refitted
    assert run(capsys, "extract", train, "-o", tmp_path / "train.parquet", *args, "--pca", 2, "-q", "--overwrite")[0] == 0
    after = hashlib.sha256(model.read_bytes()).hexdigest()
    rc, _, err = run(capsys, "extract", tmp_path / "c.csv", "-o", out, *args, "--pca-model", model, "--resume")
    assert (rc, err) == (1, f"Error: cannot resume: the settings or the input differ from the interrupted run (PCA model "
                            f"{model} changed since the interrupted run (sha256 {before[:12]} -> {after[:12]})) - rerun "
                            "with --overwrite instead of --resume to start over, or use the original settings\n")


@pytest.mark.parametrize("damage, why", [
    (b'{"bertfeat_version": "0.3', "not a manifest bertfeat wrote: Unterminated string starting at: line 1 column 22 "
                                   "(char 21)"),
    (b"[]", "not a manifest bertfeat wrote"),
    (b"{}", "not a manifest bertfeat wrote"),
])
def test_resume_with_a_damaged_manifest_names_it(tmp_path, capsys, monkeypatch, damage, why):
    """A manifest cut short or edited was compared as {}: the refusal listed every setting as changed from None
    ("bertfeat version: None -> '0.3.0...'; model: None -> ...", a screenful) instead of naming the file (found by
    audit). The partial run is left as it was; --overwrite starts over."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    manifest = tmp_path / "o.parquet.partial" / "manifest.json"
    manifest.write_bytes(damage)
    kept = sorted(p.name for p in manifest.parent.iterdir())
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err) == (1, f"Error: cannot resume: the interrupted run's manifest {manifest} cannot be read ({why}) - "
                            "rerun with --overwrite instead of --resume to start over\n")
    assert sorted(p.name for p in manifest.parent.iterdir()) == kept and manifest.read_bytes() == damage
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--overwrite")
    assert rc == 0 and read_table(out).num_rows == 12, err


def test_resume_without_an_interrupted_run_starts_from_scratch(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv", 5)
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--resume")
    assert rc == 0, err
    assert "resumed" not in err
    assert pq.read_table(out).num_rows == 5


def test_a_run_without_resume_starts_over(tmp_path, capsys, monkeypatch):
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    parts = sorted(p.name for p in (tmp_path / "o.parquet.partial").iterdir())
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--pooling", "cls")  # neither --resume nor --overwrite: refused
    assert (rc, err) == (1, f"Error: a resumable partial run exists in {out}.partial - rerun the same command with --resume "
                            "to continue it, or with --overwrite to start over\n")
    assert sorted(p.name for p in (tmp_path / "o.parquet.partial").iterdir()) == parts  # the finished chunks are kept
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--pooling", "cls", "--overwrite")  # other settings: fine
    assert rc == 0, err
    assert "resumed" not in err
    assert no_leftovers(out) == ["o.parquet"]
    assert metadata(out)["pooling"] == "cls"


def test_stdin_cannot_be_resumed(tmp_path, capsys):
    rc, _, err = run(capsys, "extract", "-", "--input-format", "csv", "-o", tmp_path / "o.parquet", "--resume")
    assert (rc, err) == (1, "Error: --resume cannot continue a run that read standard input - write the input to a file first\n")


def test_an_interrupted_stdin_run_keeps_nothing_and_says_so(tmp_path, capsys, monkeypatch):
    """Standard input cannot be read again: an interrupted run removes its finished chunks (no advice to --resume,
    which is refused for stdin); a partial run left by a killed stdin run is named with --overwrite as the way out."""
    import io
    import sys

    data = "text\n" + "".join(f"sentence {i}\n" for i in range(12))
    out = tmp_path / "o.parquet"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    monkeypatch.setattr(bertfeat.run.progress, "make_progress", lambda *a, **k: Interrupt(2))
    rc, _, err = run(capsys, "extract", "-", "--input-format", "csv", "-o", out, "--model", tiny_model(),
                     "--chunk-rows", 3)
    assert (rc, err) == (130, "Interrupted: nothing was kept: a run reading standard input cannot be resumed (write the "
                              "input to a file for a run that can)\n")
    assert no_leftovers(out) == []
    (tmp_path / "o.parquet.partial").mkdir()  # as a run killed with SIGKILL leaves it
    (tmp_path / "o.parquet.partial" / "manifest.json").write_text("{}")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    rc, _, err = run(capsys, "extract", "-", "--input-format", "csv", "-o", out, "--model", tiny_model())
    assert (rc, err) == (1, f"Error: a partial run exists in {out}.partial (left by a run that was killed) - rerun "
                            "with --overwrite to start over (a run reading standard input cannot be resumed), or remove "
                            "that directory\n")


def test_temporaries_of_a_killed_writer_are_cleaned_up(tmp_path, capsys):
    """A run killed while it wrote the output leaves hidden .NAME.tmp-PID files; the next run removes them."""
    src = corpus(tmp_path / "c.csv", 3)
    stale = [tmp_path / ".o.npy.tmp-4242", tmp_path / ".o.ids.csv.tmp-4242", tmp_path / ".o.npy.json.tmp-4242"]
    for f in stale:
        f.write_bytes(b"half written")
    (tmp_path / ".other.tmp-4242").write_bytes(b"not ours")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.npy", "--model", tiny_model(), "--id-column", "id")
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.tmp-4242", "c.csv", "o.ids.csv", "o.npy", "o.npy.json"]


def test_parts_are_read_back_once(tmp_path, capsys, monkeypatch):
    """Counts and PCA statistics are taken while each chunk's table is in memory, so the output is written
    reading every part once (it was three times: counts, PCA fit, transform); a resumed run reads each part
    the interrupted run finished once more, for its counts and statistics. Resumed or not, the same output."""
    import bertfeat.run.local as pipeline

    src = corpus(tmp_path / "c.csv", 40)
    args = ["--model", tiny_model(), "--chunk-rows", 10, "--pca", 4]
    reads: list[int] = []
    real = pipeline.PartStore.read_part

    def counting(self, index):
        reads.append(index)
        return real(self, index)

    monkeypatch.setattr(pipeline.PartStore, "read_part", counting)
    full = tmp_path / "full" / "o.parquet"
    full.parent.mkdir()
    rc, _, err = run(capsys, "extract", src, "-o", full, *args)
    assert rc == 0, err
    assert reads == [0, 1, 2, 3]

    out = tmp_path / "o.parquet"
    interrupted_run(capsys, monkeypatch, src, out, *args, after=2)  # (undoes the monkeypatch)
    reads.clear()
    monkeypatch.setattr(pipeline.PartStore, "read_part", counting)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert reads == [0, 1, 0, 1, 2, 3]  # the two finished parts for their statistics, then every part for the output
    assert_same_output(out, full)


@pytest.mark.parametrize("shape", ["cause", "context"])
@pytest.mark.parametrize("terminated", [False, True], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_inside_compiled_code_keeps_the_partial_run_and_names_resume(tmp_path, capsys, monkeypatch,
                                                                                   terminated, shape):
    """Ctrl-C or SIGTERM landing in a numba kernel reaches the engine as a SystemError (its cause the interrupt, as
    numba 0.68 gives it; numba 0.61: raised while handling it): it printed "Interrupted." / "Terminated." without what
    was kept (the SIGTERM test below failed so about once in seven suite runs under numba 0.61, once in 60-200 runs
    under 0.68, where the cause shape was not recognized). Now the one line names the kept chunks and --resume, and
    the resume completes the output."""
    from bertfeat.cli.app import Terminated

    src = write_csv(tmp_path / "c.csv", ["text"], [[f"a sentence numbered {i}"] for i in range(12)])
    out = tmp_path / "o.parquet"
    interrupt = Terminated if terminated else KeyboardInterrupt
    monkeypatch.setattr(bertfeat.run.progress, "make_progress",
                        lambda *a, **k: Interrupt(2, inside_compiled=shape, interrupt=interrupt))
    args = ("extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", 3)
    rc, _, err = run(capsys, *args)
    partial = out.with_name(out.name + ".partial")
    word, code = ("Terminated", 143) if terminated else ("Interrupted", 130)
    assert (rc, err) == (code, f"{word}: 2 chunk(s) are kept in {partial}; run the same command with --resume to "
                               "continue\n")
    monkeypatch.undo()
    rc, _, err = run(capsys, *args, "--resume", "-q")
    assert rc == 0, err
    assert pq.read_table(out).column("row").to_pylist() == list(range(12))


@pytest.mark.parametrize("shape", ["cause", "context"])
def test_the_library_raises_the_interrupt_not_what_compiled_code_made_of_it(tmp_path, shape):
    """bertfeat.extract: a Ctrl-C inside a kernel is raised as the KeyboardInterrupt, with its resume note (numba
    0.68's SystemError, whose cause is the interrupt, was raised as it was, the partial run kept with no note)."""
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"a sentence numbered {i}"] for i in range(12)])
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt) as info:
        bertfeat.extract(src, out, model=tiny_model(), chunk_rows=3, progress=Interrupt(2, inside_compiled=shape))
    partial = out.with_name(out.name + ".partial")
    assert info.value.resume_note == (f"2 chunk(s) are kept in {partial}; run the same command with --resume to "
                                      "continue")
    assert len(parts(out)) == 2 and not out.exists()


def test_an_interrupt_inside_compiled_code_before_the_run_starts_is_the_interrupt(tmp_path, capsys, monkeypatch):
    """Ctrl-C landing in a kernel while the model loads (its kernels warm up there), before an engine handles
    failures: bertfeat.extract raises the KeyboardInterrupt, not the SystemError; the CLI says "Interrupted."."""
    import bertfeat.run.local

    def load(plan):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("<function quant_rows_q8_> returned a result with an exception set")

    monkeypatch.setattr(bertfeat.run.local, "load_encoder", load)
    src = write_csv(tmp_path / "c.csv", ["text"], [["a sentence"]])
    out = tmp_path / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        bertfeat.extract(src, out, model=tiny_model())
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model())
    assert (rc, err) == (130, "Interrupted.\n")
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_sigterm_keeps_the_partial_run_and_names_resume(tmp_path):
    """SIGTERM (kill, docker stop, a scheduler's time limit) is handled as Ctrl-C: one line naming --resume, the
    finished chunks kept, exit 143; the resumed run completes the same output as an uninterrupted one."""
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    src = write_csv(tmp_path / "c.csv", ["text"], [[f"a sentence numbered {i}"] for i in range(3000)])
    out = tmp_path / "o.parquet"
    args = [sys.executable, "-m", "bertfeat", "extract", str(src), "-o", str(out), "--model", str(tiny_model()),
            "--chunk-rows", "4", "-q"]
    env = dict(os.environ, PYTHONPATH=str(root))
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env, cwd=root)
    partial = out.with_name(out.name + ".partial")
    t0 = time.time()
    while not any(partial.glob("part-*.parquet")):
        assert p.poll() is None and time.time() - t0 < 120
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Terminated: ") and lines[0].endswith(
        f"chunk(s) are kept in {partial}; run the same command with --resume to continue"), err
    kept = len(list(partial.glob("part-*.parquet")))
    assert kept >= 1 and not out.exists()
    r = subprocess.run(args + ["--resume"], capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).column("row").to_pylist() == list(range(3000))


def test_resume_with_another_delimiter_is_refused(tmp_path, capsys, monkeypatch):
    """The delimiter decides which cells are the text: a resume with another one would mix two parses."""
    src = tmp_path / "d.csv"
    src.write_text("text,a;text\n" + "".join(f"comma side {i},1;semicolon side {i}\n" for i in range(12)))
    out = tmp_path / "o.parquet"
    interrupted_run(capsys, monkeypatch, src, out, "--model", tiny_model(), "--chunk-rows", 2, "--delimiter", ";", after=2)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", 2, "--resume")
    assert rc == 1 and "delimiter: ';' -> ','" in err, err


def test_resume_with_a_changed_model_file_but_the_same_weights_is_refused(tmp_path, capsys, monkeypatch):
    """The weights' sha256 does not cover config.json, the tokenizer or the sentence-transformers modules: a copy of the
    model whose config changed (same weights, same path) once resumed and mixed two models in one output."""
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ("--model", model, "--chunk-rows", 3, "--max-length", 64)
    interrupted_run(capsys, monkeypatch, src, out, *args)
    cfg = json.loads((model / "config.json").read_text())
    cfg["layer_norm_eps"] = 1e-2
    (model / "config.json").write_text(json.dumps(cfg))
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err.splitlines()[-1]) == (1, "Error: cannot resume: the settings or the input differ from the interrupted "
                                             "run (model files changed since the interrupted run: config.json) - rerun "
                                             "with --overwrite instead of --resume to start over, or use the original "
                                             "settings")
    assert len(parts(out)) == 2  # the interrupted run's parts are kept for a resume with the original files


def test_resume_with_another_tokenizers_version_is_refused(tmp_path, capsys, monkeypatch):
    """An upgrade of the tokenizers library may split texts into other tokens: the manifest did not record its version,
    so a resume mixed the kept chunks' tokens with the new version's in one output. Refused, naming both versions;
    the original version resumes, and the provenance records it."""
    import tokenizers

    real = tokenizers.__version__
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ("--model", tiny_model(), "--chunk-rows", 3)
    interrupted_run(capsys, monkeypatch, src, out, *args)
    monkeypatch.setattr(tokenizers, "__version__", "0.0.1")
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert (rc, err) == (1, "Error: cannot resume: the settings or the input differ from the interrupted run (tokenizers "
                            f"library: {real} -> 0.0.1, which may split texts into other tokens: pip install tokenizers=="
                            f"{real} to resume) - rerun with --overwrite instead of --resume to start over, or use the "
                            "original settings\n")
    assert not out.exists() and len(parts(out)) == 2  # refused, nothing touched
    monkeypatch.undo()
    manifest = tmp_path / "o.parquet.partial" / "manifest.json"  # a partial run of a bertfeat before the key
    kept = manifest.read_text()
    manifest.write_text(json.dumps({k: v for k, v in json.loads(kept).items() if k != "tokenizers"}))
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 1 and f"(tokenizers library: not recorded (an earlier bertfeat) -> {real}) - rerun with --overwrite" in err
    manifest.write_text(kept)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert metadata(out)["tokenizers"] == real


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_part_is_encoded_again_on_resume(tmp_path, capsys, monkeypatch, damage):
    """A part of the interrupted run damaged on disk since is not taken as done: cut short or emptied, --resume sees it
    at once and encodes that chunk again; one byte flipped in its data (every part carries page checksums), the resume
    stops when it reads that part, removes it and says to resume again, which encodes it. Either way the output equals
    an uninterrupted run's (a truncated part was an "unexpected ArrowInvalid ... this is a bug"; a flipped byte gave
    features off by 5e-5, silently)."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ("--model", tiny_model(), "--chunk-rows", 3, "--id-column", "id")
    interrupted_run(capsys, monkeypatch, src, out, *args)
    victim = parts(out)[1]
    data = bytearray(victim.read_bytes())
    if damage == "truncate":
        victim.write_bytes(bytes(data[:len(data) // 2]))
    elif damage == "empty":
        victim.write_bytes(b"")
    else:  # a byte inside the embedding column's data, past its page header
        from extract_util import flip_embedding_byte

        flip_embedding_byte(victim)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    if damage == "flip":
        assert (rc, err.splitlines()[-1]) == (1, f"Error: a saved chunk of the interrupted run, {victim.name}, was damaged "
                                                 f"on disk ({err.split('was damaged on disk (')[1].split('); it is')[0]}); "
                                                 "it is removed - rerun with --resume: that chunk is encoded again")
        assert "CRC" in err and not victim.exists() and not out.exists()
        rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    assert summary_line(err, "resumed") == "resumed 1 chunk(s), 3 rows, from the interrupted run (counted above, not in the throughput)"
    full = tmp_path / "full.parquet"
    assert run(capsys, "extract", src, "-o", full, *args)[0] == 0
    assert_same_output(out, full)


class LostInterrupt(Interrupt):
    """A progress sink whose ``after``-th chunk ends while Python runs a finalizer (``__del__``) or a weak
    reference's callback (importlib's module locks, pyarrow's objects) into which Ctrl-C (or SIGTERM) lands: an
    exception raised there is printed as "Exception ignored in ..." with a traceback, and lost."""

    def __init__(self, after, where, signum):
        super().__init__(after)
        self.where, self.signum = where, signum

    def advance(self, rows, tokens, bytes_read):
        import time
        import weakref

        self.n += 1
        if self.n != self.after:
            return
        stop = self.signal_handler()

        class Object:
            def __del__(self):
                if where == "finalizer":
                    stop()

        where = self.where
        o = Object()
        ref = weakref.ref(o, lambda r: stop() if where == "weakref callback" else None)  # noqa: F841
        del o
        for _ in range(500):  # the run's next steps (the stop, if delivered again, lands here)
            time.sleep(0.01)

    def signal_handler(self):
        """What the signal's handler does in the frame it lands in (Python's for SIGINT, bertfeat's for SIGTERM)."""
        import sys

        handler = signal.getsignal(self.signum)
        return lambda: handler(self.signum, sys._getframe())


@pytest.mark.parametrize("where", ["finalizer", "weakref callback"])
@pytest.mark.parametrize("signum, word, code", [(signal.SIGINT, "Interrupted", 130), (signal.SIGTERM, "Terminated", 143)])
def test_a_stop_lost_in_a_finalizer_or_callback_still_stops_the_run(tmp_path, capsys, monkeypatch, where, signum, word,
                                                                     code):
    """A fuzz of Ctrl-C / SIGTERM at random times: 1 of 30 landed in importlib's weakref callback, and the run went on
    to exit 0 with a traceback on stderr (a fresh-clone CI run saw SIGTERM land in a ParquetWriter's __del__ so). The
    stop is delivered again, outside the finalizer: one line, its exit code, the finished chunks kept."""
    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    monkeypatch.setattr(bertfeat.run.progress, "make_progress", lambda *a, **k: LostInterrupt(2, where, signum))
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--chunk-rows", 3)
    monkeypatch.undo()
    partial = out.with_name(out.name + ".partial")
    assert (rc, err) == (code, f"{word}: 2 chunk(s) are kept in {partial}; run the same command with --resume to "
                               "continue\n")
    assert not out.exists() and len(parts(out)) == 2


class _DropsStop:
    """An object whose __del__ raises ``stop`` as a signal's handler would there: Python prints and drops it."""

    def __init__(self, stop):
        self.stop = stop

    def __del__(self):
        raise self.stop


def test_a_stop_dropped_as_a_command_ends_is_its_exit_code_and_spares_the_next_command(monkeypatch, capsys):
    """A Ctrl-C / SIGTERM dropped in a finalizer in the command's last moment (too late to deliver again) is the
    command's exit code and line, not lost (rc 0); and it never reaches the next command run in the same process."""
    from bertfeat.cli import app as cli_app

    real = cli_app._run_main

    def ends_with_a_drop(stop):
        def run(argv):
            rv = real(argv)
            _DropsStop(stop)  # collected at once: the stop dropped
            return rv
        return run

    for stop, code, word in ((KeyboardInterrupt(), 130, "Interrupted"), (cli_app.Terminated(), 143, "Terminated")):
        monkeypatch.setattr(cli_app, "_run_main", ends_with_a_drop(stop))
        assert cli_app.main(["--version"]) == code
        monkeypatch.setattr(cli_app, "_run_main", real)
        assert capsys.readouterr().err.endswith(f"{word}.\n")
        assert cli_app.main(["--version"]) == 0  # the next command: not interrupted
        time.sleep(0.2)  # past the moment a stale delivery would have come
        assert cli_app.main(["--version"]) == 0
        assert "Interrupted" not in capsys.readouterr().err


def test_overlapping_commands_in_threads_leave_no_hook_behind(monkeypatch):
    """main() called from threads (a library's caller), the second starting before the first ends: only the main
    thread's call hooks dropped stops (signals reach that thread alone), so no call's hook outlives the calls (each
    restored the hook it found: the first one's stayed, and swallowed every later dropped Ctrl-C of the process)."""
    import threading

    from bertfeat.cli import app as cli_app

    monkeypatch.setattr(cli_app, "_run_main", lambda argv: (time.sleep(float(argv[0])), 0)[1])
    before = sys.unraisablehook
    first, second = (threading.Thread(target=cli_app.main, args=([s],)) for s in ("0.2", "0.4"))
    first.start()
    time.sleep(0.05)
    second.start()
    first.join()
    second.join()
    assert sys.unraisablehook is before and "token" not in cli_app._LIVE


def test_an_estimate_of_a_resume_counts_only_the_rows_left(tmp_path, capsys, monkeypatch):
    """--estimate --resume estimated the whole input, as if nothing were kept: it now takes off the finished chunks
    the resume keeps (tokens and encode time are the rest's), says so, and refuses what the resume would refuse."""
    import bertfeat
    from bertfeat.errors import ResumeError

    src = corpus(tmp_path / "c.csv", 12)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    kw = dict(model=tiny_model(), chunk_rows=3, estimate=100)
    whole = bertfeat.extract(src, out, overwrite=True, **kw)
    rest = bertfeat.extract(src, out, resume=True, **kw)
    assert (whole.chunks_kept, whole.rows_kept, rest.chunks_kept, rest.rows_kept) == (0, 0, 2, 6)
    assert abs(2 * rest.tokens - whole.tokens) <= 1  # 6 of 12 rows left (every row sampled: the same tokens per row)
    # the rest's encode time is half the whole's at one rate (each run times its own sample: a busy machine's rates
    # differ, so the seconds themselves are not compared)
    encoded = [e.encode_seconds * e.tokens_per_second for e in (rest, whole)]
    assert encoded[0] == pytest.approx(encoded[1] / 2, rel=1e-9) and encoded[0] > 0 and rest.rows == whole.rows == 12
    rc, shown, err = run(capsys, "extract", src, "-o", out, *args, "--resume", "--estimate")
    assert rc == 0, err
    squashed = re.sub(r"[\s│┌┐└┘├┤┬┴┼─]", "", shown)  # the table's cells, wrapped lines joined
    assert "resume6rowsin2finishedchunk(s)arekept;thetokensandtimesbelowaretherest's" in squashed, shown
    with pytest.raises(ResumeError, match=r"^cannot resume: the settings or the input differ from the interrupted run \(max length: 128 -> 16\)"):
        bertfeat.extract(src, out, resume=True, max_length=16, **kw)
    assert len(parts(out)) == 2 and not out.exists()  # an estimate writes nothing: the kept chunks still resume


def test_a_float32_id_in_the_rejects_file_reads_the_same_after_resume(tmp_path, capsys, monkeypatch):
    """A float32 / float16 id of a bad row is shown as its shortest text in the rejects file (0.1, 52afa12), but the
    chunks done before an interruption keep their rejects as JSON in the part's metadata, which wrote the double it
    widens to: after --resume their ids read 0.10000000149011612 (and a float16's 0.0999755859375), the new chunks' 0.1."""
    import pyarrow as pa

    n = 40
    ids = pa.array(np.arange(n, dtype=np.float32) + np.float32(0.1))
    texts = [None if i % 10 == 0 else f"{WORDS[i % 25]} number {i}" for i in range(n)]  # a bad row in every chunk
    src = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": ids, "h": ids.cast(pa.float16()), "text": texts}), src)
    args = ["--model", tiny_model(), "--id-column", "id", "--keep", "h", "--chunk-rows", "10", "--threads", "1",
            "--on-bad-row", "skip"]
    out = tmp_path / "run" / "o.parquet"
    out.parent.mkdir()
    interrupted_run(capsys, monkeypatch, src, out, *args)
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume")
    assert rc == 0, err
    rejects = (out.parent / "o.parquet.rejects.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in rejects[1:]] == [["0", "0.1"], ["10", "10.1"], ["20", "20.1"], ["30", "30.1"]]
    assert [line.rsplit(",", 1)[1] for line in rejects[1:]] == ["0.1", "10.1", "20.1", "30.1"]  # the kept float16


def test_a_parquet_run_an_earlier_bertfeat_recorded_with_an_encoding_resumes(tmp_path, capsys, monkeypatch):
    """Before --encoding was refused for Parquet (which it never changed) the manifest recorded the one given: such a
    run could be resumed neither with it (now refused) nor without it (the manifests differed). The encoding of a
    Parquet input is not compared; the manifest records utf-8 for it (found by review)."""
    import pyarrow as pa

    src = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(12)], "text": [f"{WORDS[i % 25]} and {WORDS[(7 * i) % 25]}"
                                                                          for i in range(12)]}), src)
    out = tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3, "--id-column", "id"]
    interrupted_run(capsys, monkeypatch, src, out, *args)
    manifest = out.with_name(out.name + ".partial") / "manifest.json"
    earlier = json.loads(manifest.read_text())
    assert earlier["encoding"] == "utf-8"
    manifest.write_text(json.dumps({**earlier, "encoding": "iso8859-1"}))  # as a run given --encoding latin-1 wrote it
    rc, _, err = run(capsys, "extract", src, "-o", out, *args, "--resume", "-q")
    assert (rc, err) == (0, "")
    assert read_table(out).num_rows == 12


def test_a_zip_members_same_size_edit_refuses_the_resume_and_the_archive_is_never_an_output(tmp_path, capsys,
                                                                                            monkeypatch):
    """A chained URL's archive (zip://in.csv::data.zip) is an input as much as its member (found by audit): a member
    edited to the same size (the only thing its identity held) resumed with the old text's vectors, and -o data.zip
    --overwrite (or --summary-json data.zip) replaced the archive with the features."""
    import zipfile

    def archive(text_5: str):
        src = corpus(tmp_path / "c.csv", 12)
        rows = src.read_text().splitlines()
        rows[6] = rows[6].replace(rows[6].split(",", 1)[1], text_5)  # (data row 5)
        with zipfile.ZipFile(tmp_path / "data.zip", "w") as z:
            z.writestr("in.csv", "\n".join(rows) + "\n")

    first = corpus(tmp_path / "c.csv", 12).read_text().splitlines()[6].split(",", 1)[1]
    archive(first)
    url, out = f"zip://in.csv::{tmp_path / 'data.zip'}", tmp_path / "o.parquet"
    args = ["--model", tiny_model(), "--chunk-rows", 3]
    interrupted_run(capsys, monkeypatch, url, out, *args)
    time.sleep(0.01)
    archive("X" + first[1:])  # the same size
    rc, _, err = run(capsys, "extract", url, "-o", out, *args, "--resume")
    assert rc == 1 and f"input file changed: {tmp_path / 'data.zip'} (modified since the interrupted run)" in err, err
    for extra in (["-o", tmp_path / "data.zip"], ["-o", tmp_path / "p.parquet", "--summary-json", tmp_path / "data.zip"]):
        rc, _, err = run(capsys, "extract", url, *extra, "--model", tiny_model(), "--overwrite", "-q")
        assert rc == 1 and f"would replace the input {tmp_path / 'data.zip'}" in err, err
    assert zipfile.ZipFile(tmp_path / "data.zip").namelist() == ["in.csv"]
