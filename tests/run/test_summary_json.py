"""`extract --summary-json FILE|-`: the run's summary as one JSON object (both engines), its keys as docs/cli.md
lists them, and the throughput of a cached re-run (the rows encoded, reused rows apart)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from extract_util import metadata, run, summary_line, tiny_model, write_csv

ROOT = Path(__file__).resolve().parents[2]


def documented_keys() -> set[str]:
    """The keys docs/cli.md's table under 'Summary JSON' lists (`key` in the first column)."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("### The summary as JSON", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_0-9]+)`", section, flags=re.M))


def corpus(path: Path, n: int = 9) -> Path:
    return write_csv(path, ["id", "text"], [[f"r{i}", f"sentence number {i} about {'cats' if i % 2 else 'dogs'}"]
                                            for i in range(n)])


def one_json_object(out: str) -> dict:
    lines = out.splitlines()
    assert len(lines) == 1, out  # nothing else on stdout: the progress and the text summary go to stderr
    return json.loads(lines[0])


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_summary_json_on_stdout_matches_the_run(tmp_path, capsys, engine):
    src = corpus(tmp_path / "c.csv")
    out = tmp_path / ("o" if engine == "dask" else "o.parquet")
    extra = ["--engine", "dask", "--workers", "1", "--threads", "1"] if engine == "dask" else []
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--id-column", "id",
                          "--pca", 2, "--summary-json", "-", *extra)
    assert rc == 0, err
    s = one_json_object(stdout)
    assert s["kind"] == "bertfeat-summary" and s["of"] == "extract" and s["engine"] == engine
    assert set(s) == documented_keys()
    assert (s["rows_read"], s["rows_written"], s["rows_encoded"], s["rows_reused"], s["rows_rejected"]) == (9, 9, 9, 0, 0)
    assert s["tokens_encoded"] == s["tokens"] > 0
    assert s["precision"] == s["gemm"]["linear_layers"] == "fp32" and s["gemm"]["cpu"] and s["gemm"]["library"]
    assert s["outputs"]["features"] == str(out) and Path(s["outputs"]["pca_model"]).is_file()
    assert s["dim"] == 32 and s["pooling"] == "mean" and s["cache"] is None
    assert (s["text_column"], s["text_column_auto_detected"]) == ("text", True)  # found by its name
    assert s["elapsed"] > 0 and s["tokens_per_s"] == pytest.approx(s["tokens_encoded"] / s["elapsed"], rel=1e-3)
    meta = metadata(next(out.glob("*.parquet")) if engine == "dask" else out)
    assert meta["gemm"] == s["gemm"]  # the provenance's GEMM path
    assert s["command"].startswith("bertfeat extract ") and "--summary-json -" in s["command"]
    assert s["ids_repeated"] == 0  # unique ids (either engine checks)
    assert s["numbers_respelled"] == {}  # (no kept JSONL column)


def test_summary_json_file_is_replaced_each_run_but_a_users_file_is_not(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv")
    out, log = tmp_path / "o.parquet", tmp_path / "run.json"
    args = ["extract", src, "-o", out, "--model", tiny_model(), "--summary-json", log, "--quiet"]
    rc, stdout, err = run(capsys, *args)
    assert (rc, stdout, err) == (0, "", "")
    first = json.loads(log.read_text())
    assert first["rows_written"] == 9 and first["outputs"]["features"] == str(out)
    rc, _, err = run(capsys, *args, "--overwrite")
    assert rc == 0, err  # the earlier summary is replaced: it is the run's log
    assert json.loads(log.read_text())["rows_written"] == 9

    mine = tmp_path / "notes.json"
    mine.write_text('{"my": "notes"}\n')
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "p.parquet", "--model", tiny_model(),
                     "--summary-json", mine)
    assert rc == 1
    assert err == f"Error: {mine} already exists - pass --overwrite to replace it, or --summary-json with another name\n"
    assert mine.read_text() == '{"my": "notes"}\n' and not (tmp_path / "p.parquet").exists()  # refused before the run

    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "q.parquet", "--model", tiny_model(),
                     "--summary-json", src)
    assert rc == 1 and "input" in err.splitlines()[0]  # never the input


def test_a_cached_rerun_reports_no_encode_throughput(tmp_path, capsys):
    src = corpus(tmp_path / "c.csv")
    cache = tmp_path / "cache"
    base = ["extract", src, "--model", tiny_model(), "--cache", cache, "--summary-json", "-"]
    rc, stdout, err = run(capsys, *base, "-o", tmp_path / "a.parquet")
    assert rc == 0, err
    first = one_json_object(stdout)
    assert first["rows_encoded"] == 9 and first["tokens_per_s"] > 0
    rc, stdout, err = run(capsys, *base, "-o", tmp_path / "b.parquet")
    assert rc == 0, err
    again = one_json_object(stdout)
    assert (again["rows_encoded"], again["rows_reused"], again["tokens_encoded"]) == (0, 9, 0)
    assert again["rows_per_s"] == again["tokens_per_s"] == 0
    assert summary_line(err, "throughput") == ("throughput 0.0 rows/s, 0 tokens/s (of the rows encoded; reused rows "
                                               "not counted)")


@pytest.mark.parametrize("target", ["output", "rejects", "pca_model", "model_file", "cache_db", "new_cache_db",
                                    "pca_report"])
def test_summary_json_never_names_the_runs_own_files(tmp_path, capsys, target):
    """Found by the session's own audit: --summary-json naming the output, its rejects file, the model's own
    config or the cache's database (with --overwrite) was written over them; a cache the run was to make (new_cache_db)
    was made, then its database written over by the summary."""
    import shutil

    src = corpus(tmp_path / "c.csv")
    model = tmp_path / "m"
    shutil.copytree(tiny_model(), model)
    out, cache = tmp_path / "o.csv", tmp_path / "cache"
    dest = {"output": out, "rejects": tmp_path / "o.csv.rejects.csv", "pca_model": tmp_path / "o.csv.pca.npz",
            "model_file": model / "config.json", "cache_db": cache / "vectors.sqlite3",
            "new_cache_db": cache / "vectors.sqlite3", "pca_report": tmp_path / "o.pca.report.md"}[target]
    if target != "new_cache_db":
        cache.mkdir()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", model, "--cache", cache, "--summary-json", dest,
                     "--overwrite")
    assert rc == 1 and err.startswith(f"Error: the summary JSON {dest} would be written ") and err.endswith(
        " - give --summary-json a file of its own, e.g. run.json beside the output\n"), err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written


def test_summary_json_is_not_the_pca_model_it_applies(tmp_path, capsys):
    """Found by the session's own audit (2.37): --summary-json naming --pca-model's file, with --overwrite."""
    src = corpus(tmp_path / "c.csv")
    assert run(capsys, "extract", src, "-o", tmp_path / "a.parquet", "--model", tiny_model(), "--pca", 2, "-q")[0] == 0
    model = tmp_path / "a.pca.npz"
    before = model.read_bytes()
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "b.parquet", "--model", tiny_model(), "--pca-model", model,
                     "--summary-json", model, "--overwrite")
    assert rc == 1 and err.startswith(f"Error: the summary JSON {model} would be written over the PCA model {model}"), err
    assert model.read_bytes() == before


@pytest.mark.parametrize("dest, why, example", [
    ("logs/", "ends in /, so it names a directory", "logs/run.json"),
    (".", "is the current directory", "./run.json"),
    ("..", "is the parent directory", "../run.json"),
    ("sub/..", "is the parent directory", "sub/../run.json"),
    ("logs/.json", "is an extension with no name", "run.json"),
])
def test_summary_json_that_names_no_file_is_refused(tmp_path, capsys, monkeypatch, dest, why, example):
    """Found by the fourth run audit: --summary-json logs/ wrote a file named logs (pathlib drops the slash) and
    logs/.json a hidden file, exit 0; . and .. were refused as "would replace the input" (they hold it). Refused as
    -o refuses such names, before anything runs."""
    from extract_util import tree_digest

    (tmp_path / "w").mkdir()
    monkeypatch.chdir(tmp_path / "w")
    corpus(tmp_path / "w" / "c.csv")
    before = tree_digest(tmp_path)
    rc, _, err = run(capsys, "extract", "c.csv", "-o", "o.parquet", "--model", tiny_model(), "-q", "--summary-json", dest)
    assert (rc, err) == (1, f"Error: the summary JSON {dest} {why} - pass --summary-json with a file name, e.g. "
                            f"--summary-json {example}\n")
    assert tree_digest(tmp_path) == before


# --------------------------------------------------------------------------- inside the run's own folders
class TestSummaryJsonInsideTheRunsOwnFolders:
    """--summary-json OUTPUT.partial/run.json was written there after the run, and the next run was refused for a
    foreign file in its partial directory. A summary inside the partial directory (at any depth, the Dask engine's
    and the default output's too), inside a folder named after the output, or at a .npy's ids file is refused before
    anything runs, nothing written."""

    @pytest.mark.parametrize("output, dest, owner", [
        ("o.parquet", "o.parquet.partial/run.json", "the run's partial directory o.parquet.partial (where it works; "
                                                     "deleted when it ends)"),
        ("o.parquet", "o.parquet.partial/logs/run.json", "the run's partial directory o.parquet.partial (where it "
                                                          "works; deleted when it ends)"),
        (None, "c.features.parquet.partial/run.json", "the run's partial directory c.features.parquet.partial (where "
                                                       "it works; deleted when it ends)"),
        ("d", "d.partial/run.json", "the run's partial directory d.partial (where it works; deleted when it ends)"),
        ("o.parquet", ".o.parquet.partial.removing-7/run.json", "the output o.parquet (or a file named after it)"),
        ("o.npy", "o.ids.csv", "the output o.npy (or a file named after it)"),
    ])
    def test_refused_before_the_run(self, tmp_path, capsys, monkeypatch, output, dest, owner):
        from extract_util import tree_digest

        monkeypatch.chdir(tmp_path)
        src = corpus(tmp_path / "c.csv")
        args = ["extract", "c.csv", "--model", tiny_model(), "--summary-json", dest, "-q", "--overwrite"]
        args += ["-o", output] if output else []
        args += ["--engine", "dask"] if output == "d" else []
        before = tree_digest(tmp_path)
        rc, _, err = run(capsys, *args)
        assert (rc, err) == (1, f"Error: the summary JSON {dest} would be written over {owner} - give --summary-json a "
                                "file of its own, e.g. run.json beside the output\n")
        assert tree_digest(tmp_path) == before and src.is_file()  # nothing made: refused before the run

    def test_a_folder_only_starting_like_the_output_is_fine(self, tmp_path, capsys, monkeypatch):
        monkeypatch.chdir(tmp_path)
        corpus(tmp_path / "c.csv")
        rc, _, err = run(capsys, "extract", "c.csv", "-o", "d.parquet", "--model", tiny_model(), "-q",
                         "--summary-json", "d.parquet-logs/run.json")
        assert (rc, err) == (0, "")
        assert json.loads((tmp_path / "d.parquet-logs" / "run.json").read_text())["rows_written"] == 9
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "d.parquet", "d.parquet-logs"]


@pytest.mark.parametrize("fmt, side", [("parquet", {}), ("csv", {"provenance": "o.csv.json"}),
                                       ("npy", {"ids": "o.ids.csv", "provenance": "o.npy.json"})])
def test_summary_outputs_name_every_file_written(tmp_path, capsys, fmt, side):
    # a pipeline that ships the files `outputs` names lost a .npy's ids and provenance, a CSV's provenance
    src = corpus(tmp_path / "c.csv")
    out = tmp_path / f"o.{fmt}"
    rc, stdout, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--summary-json", "-", "-q")
    assert rc == 0, err
    outputs = one_json_object(stdout)["outputs"]
    assert outputs == {"features": str(out), **{k: str(tmp_path / v) for k, v in side.items()}}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["c.csv", f"o.{fmt}", *side.values()])
