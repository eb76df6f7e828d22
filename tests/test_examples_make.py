"""`make features`: real file targets, a second run does nothing, overrides rebuild only what they change.

Runs the Makefile on a tiny input (12 rows, PCA=4) with BUILD in a temporary directory.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    p = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args], env=env, capture_output=True, text=True,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"make {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def commands_in(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("bertfeat ")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("make")
    lines = (ROOT / "examples" / "sst2_sample.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    inp = d / "tiny.v1.csv.gz"
    inp.write_bytes(gzip.compress("".join(lines[:13]).encode("utf-8")))  # stem "tiny.v1"
    build = d / "build"
    return inp, build, [f"INPUT={inp}", f"BUILD={build}", "PCA=4"]


def outputs(build: Path, pca: int = 4) -> dict[str, Path]:
    d = build / "features" / "tiny.v1"
    return {
        "raw": d / "tiny.v1.features.parquet",
        "model": d / f"tiny.v1.pca{pca}.npz",
        "report_md": d / f"tiny.v1.pca{pca}.report.md",
        "report_png": d / f"tiny.v1.pca{pca}.report.png",
        "report_json": d / f"tiny.v1.pca{pca}.report.json",
        "reduced": d / f"tiny.v1.pca{pca}.parquet",
        "settings": d / "extract.settings",
    }


def mtimes(paths: dict[str, Path]) -> dict[str, int]:
    return {k: p.stat().st_mtime_ns for k, p in paths.items()}


def test_make_features_twice_does_nothing(tiny):
    inp, build, args = tiny
    first = make("features", *args)
    assert [c.split()[1] for c in commands_in(first.stdout)] == ["extract", "pca", "pca"]  # extract, fit, transform
    out = outputs(build)
    for p in out.values():
        assert p.is_file(), p
    before = mtimes(out)

    assert make("-q", "features", *args, check=False).returncode == 0  # up to date
    dry = make("-n", "features", *args)
    assert commands_in(dry.stdout) == [] and "Nothing to be done" in dry.stdout
    second = make("features", *args)
    assert commands_in(second.stdout) == [] and "Nothing to be done" in second.stdout
    assert mtimes(out) == before

    import pyarrow.parquet as pq

    t = pq.read_table(out["reduced"])
    assert t.num_rows == 12 and t.schema.field("embedding").type.list_size == 4
    assert pq.read_table(out["raw"]).schema.field("embedding").type.list_size == 384


def test_make_features_overrides(tiny):
    inp, build, args = tiny
    make("features", *args)
    base = outputs(build)
    raw_mtime = base["raw"].stat().st_mtime_ns
    settings = base["settings"].read_text()

    # a new PCA size refits on the existing raw features; the old outputs stay beside the new ones
    dry = make("-n", "features", *args, "PCA=3")
    assert [c.split()[1:3] for c in commands_in(dry.stdout)][0] == ["pca", "fit"]
    assert not any(c.startswith("bertfeat extract") for c in commands_in(dry.stdout))
    make("features", *args, "PCA=3")
    for p in outputs(build, 3).values():
        assert p.is_file(), p
    assert base["raw"].stat().st_mtime_ns == raw_mtime and base["model"].is_file()

    # a changed extract setting re-extracts; a dry run says so but does not touch the stamp
    dry = make("-n", "features", *args, "POOLING=cls")
    assert any(c.startswith("bertfeat extract") and "--pooling cls" in c for c in commands_in(dry.stdout))
    assert base["settings"].read_text() == settings
    assert make("-q", "features", *args, check=False).returncode == 0

    # a newer input re-extracts
    st = inp.stat()
    os.utime(inp, ns=(st.st_atime_ns, raw_mtime + 10**9))
    assert make("-q", "features", *args, check=False).returncode != 0
    make("features", *args)
    assert base["raw"].stat().st_mtime_ns > raw_mtime
    assert make("-q", "features", *args, check=False).returncode == 0
