"""`make features`: real file targets, a second run does nothing, overrides rebuild only what they change.

Runs the Makefile on a tiny input (12 rows, PCA=4) with BUILD in a temporary directory, and (APPLY) from a
temporary directory outside the clone with the tests' tiny random model: a training set plus two files reduced
with its PCA. Also runs docs/pipelines.md's Makefile snippet and shell script. Every bertfeat command is this
tree's (BERTFEAT="python -m bertfeat", PYTHONPATH=the clone), not whatever `bertfeat` is on PATH.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BERTFEAT = f"{sys.executable} -m bertfeat"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    env.pop("MAKELEVEL", None)
    return env


def make(*args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """make ARGS with this tree's bertfeat: `make -C <clone>`, or with cwd, `make -f <clone>/Makefile` run in cwd."""
    where = ["-C", str(ROOT)] if cwd is None else ["-f", str(ROOT / "Makefile")]
    p = subprocess.run(["make", "--no-print-directory", *where, f"BERTFEAT={BERTFEAT}", *args], cwd=cwd, env=_env(),
                       capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"make {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def commands_in(out: str) -> list[str]:
    """The bertfeat commands make printed, each as `bertfeat ...`."""
    return ["bertfeat " + line[len(BERTFEAT) + 1:] for line in out.splitlines() if line.startswith(BERTFEAT + " ")]


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


def test_an_edited_model_folder_re_extracts(tiny, tmp_path):
    """A model file newer than the features (an edited pooling config, an upgraded model) re-extracts: the settings
    stamp holds each of the files `bertfeat info MODEL --files` lists with its size and mtime."""
    from extract_util import tiny_model

    inp, _, _ = tiny
    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    args = [f"INPUT={inp}", f"BUILD={tmp_path / 'build'}", "PCA=4", f"MODEL={model}"]
    make("features", *args)
    assert make("-q", "features", *args, check=False).returncode == 0
    listed = subprocess.run([*BERTFEAT.split(), "info", str(model), "--files"], capture_output=True, text=True,
                            env=_env(), check=True).stdout.split()
    assert str(model / "model.safetensors") in listed and str(model / "config.json") in listed
    raw = tmp_path / "build" / "features" / "tiny.v1" / "tiny.v1.features.parquet"
    cfg = model / "tokenizer_config.json" if (model / "tokenizer_config.json").is_file() else model / "config.json"
    os.utime(cfg, ns=(raw.stat().st_atime_ns, raw.stat().st_mtime_ns + 10**9))  # edited after the extract
    assert make("-q", "features", *args, check=False).returncode != 0
    again = make("features", *args)
    assert [c.split()[1] for c in commands_in(again.stdout)][:1] == ["extract"]
    assert make("-q", "features", *args, check=False).returncode == 0


def st_model(tmp_path: Path) -> Path:
    """A copy of the tiny model with sentence-transformers modules Transformer -> mean Pooling -> Normalize, so its
    features are unit vectors while modules.json is there (copied in this process: tiny_model() is gone at exit)."""
    from extract_util import tiny_st_model

    return tiny_st_model(tmp_path / "model")


def raw_vectors(raw: Path):
    import numpy as np
    import pyarrow.parquet as pq

    return np.asarray(pq.read_table(raw).column("embedding").to_pylist(), dtype=np.float64)


def built_model_run(tiny, tmp_path) -> tuple[Path, list[str], dict[str, Path]]:
    """`make features` with st_model(), then checks that nothing changed is a no-op that writes nothing."""
    inp, _, _ = tiny
    model = st_model(tmp_path)
    args = [f"INPUT={inp}", f"BUILD={tmp_path / 'build'}", "PCA=4", f"MODEL={model}"]
    first = make("features", *args)
    assert [c.split()[1] for c in commands_in(first.stdout)] == ["extract", "pca", "pca"]
    out = outputs(tmp_path / "build")
    # the stamp names every file loading reads, each with its size and mtime
    listed = subprocess.run([*BERTFEAT.split(), "info", str(model), "--files"], capture_output=True, text=True,
                            env=_env(), check=True).stdout.split()
    assert str(model / "modules.json") in listed and str(model / "model.safetensors") in listed
    lines = out["settings"].read_text().splitlines()
    inp = tiny[0]
    assert lines[1:] == [f"input-file={inp}:{inp.stat().st_size}:{inp.stat().st_mtime_ns}"] + [
        f"model-file={f}:{os.stat(f).st_size}:{os.stat(f).st_mtime_ns}" for f in listed]
    # (a) nothing changed: a no-op, and -q / -n / a second make write nothing, the stamp included
    before, stamp = mtimes(out), out["settings"].read_text()
    assert make("-q", "features", *args, check=False).returncode == 0
    dry = make("-n", "features", *args)
    assert commands_in(dry.stdout) == [] and "Nothing to be done" in dry.stdout
    again = make("features", *args)
    assert commands_in(again.stdout) == [] and "Nothing to be done" in again.stdout
    assert mtimes(out) == before and out["settings"].read_text() == stamp
    return model, args, out


def assert_re_extracts(args: list[str], out: dict[str, Path]) -> None:
    """The model changed: -q says so, -n plans the extract, neither writes the stamp; make re-extracts, then is a
    no-op again."""
    stamp, stamp_mtime = out["settings"].read_text(), out["settings"].stat().st_mtime_ns
    assert make("-q", "features", *args, check=False).returncode == 1
    dry = make("-n", "features", *args)
    assert [c.split()[1] for c in commands_in(dry.stdout)][:1] == ["extract"]
    assert out["settings"].read_text() == stamp and out["settings"].stat().st_mtime_ns == stamp_mtime
    run = make("features", *args)
    assert [c.split()[1] for c in commands_in(run.stdout)] == ["extract", "pca", "pca"]
    assert out["settings"].read_text() != stamp
    assert make("-q", "features", *args, check=False).returncode == 0


def test_make_features_a_removed_model_file_re_extracts(tiny, tmp_path):
    """Removing a model file (modules.json: the Normalize module goes with it) leaves no file newer than the features,
    yet changes them: the stamp's file list differs, so make re-extracts."""
    import numpy as np

    model, args, out = built_model_run(tiny, tmp_path)
    np.testing.assert_allclose(np.linalg.norm(raw_vectors(out["raw"]), axis=1), 1.0, rtol=1e-5)  # Normalize
    (model / "modules.json").unlink()
    assert_re_extracts(args, out)
    assert not np.allclose(np.linalg.norm(raw_vectors(out["raw"]), axis=1), 1.0, rtol=1e-3)  # they did change
    assert "modules.json" not in out["settings"].read_text()


def test_make_features_a_model_file_replaced_by_an_older_one_re_extracts(tiny, tmp_path):
    """Weights of the same size put in place with an older mtime (cp -p, rsync -a, tar x, an older download restored)
    are not newer than the features, yet change them: the stamp's mtime for that file differs, so make re-extracts."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    model, args, out = built_model_run(tiny, tmp_path)
    before = raw_vectors(out["raw"])
    weights = model / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(k for k in tensors if k.endswith("embeddings.word_embeddings.weight"))
    tensors[name] = (tensors[name] * 2 + 0.5).astype(tensors[name].dtype)
    other = tmp_path / "other.safetensors"
    save_file(tensors, str(other), metadata={"format": "pt"})
    assert other.stat().st_size == weights.stat().st_size  # only the mtime tells them apart
    os.utime(other, ns=(0, 1_704_067_200 * 10**9))  # 2024-01-01, older than the features
    shutil.copy2(other, weights)  # cp -p
    assert weights.stat().st_mtime_ns < out["raw"].stat().st_mtime_ns
    assert_re_extracts(args, out)
    after = raw_vectors(out["raw"])
    assert after.shape == before.shape and not np.allclose(after, before, atol=1e-3)  # they did change


def test_the_stamp_reads_back_equal_at_every_length(tmp_path):
    """A stamp read back equals the text make wrote, whatever its length: GNU make 4.3's $(file <) returned a text
    unequal to the file's for some stamps of about 1 kB and more (a stamp listing the model's files under a long
    path), so `make -q features` reported the features out of date after every run. The Makefile's own stamp
    function is called (at parse time, under -n, where it writes nothing and names settings-changed when the texts
    differ) on stamps of 60 B to 6 kB, each written as make writes it."""
    build, inp = tmp_path / "build", tmp_path / "in.csv"
    inp.write_text("text\na\n")
    probe = tmp_path / "probe.mk"
    probe.write_text("define probe_nl\n\n\nendef\ninclude $(PROBE_TEXT_MK)\n"
                     "$(info same=[$(call stamp,$(PROBE_STAMP),$(PROBE_TEXT))])\n"
                     "$(info other=[$(call stamp,$(PROBE_STAMP),$(PROBE_TEXT)x)])\n"
                     "$(BUILD)/probe: ;\n")
    wrong = []
    for n in range(60, 6000, 37):
        lines = [f"model-file=/m/{i}/" + "x" * (40 + i % 7) for i in range(n // 47 + 1)]
        stamp, text_mk = tmp_path / f"s{n}", tmp_path / f"t{n}.mk"
        stamp.write_text("\n".join(lines) + "\n")  # as $(file >FILE,TEXT) writes it
        text_mk.write_text("PROBE_TEXT := " + "$(probe_nl)".join(lines) + "\n")
        p = subprocess.run(["make", "--no-print-directory", "-n", "-f", str(ROOT / "Makefile"), "-f", str(probe),
                            "BERTFEAT=true", f"BUILD={build}", f"INPUT={inp}", f"PROBE_STAMP={stamp}",
                            f"PROBE_TEXT_MK={text_mk}", f"{build}/probe"],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        if p.stdout.splitlines()[:2] != ["same=[]", "other=[settings-changed]"]:
            wrong.append((len(stamp.read_bytes()), p.stdout.splitlines()[:2]))
    assert wrong == []


def test_make_features_a_changed_stamp_rebuilds_an_output_not_older_than_it(tiny, tmp_path):
    """The stamp is written when make reads the Makefile; an output not older than the new stamp (times of 1 or 2 s,
    an output dated by a clock ahead) is re-extracted all the same: a run that rewrites the stamp never skips the
    extract, whose change -q reports and the next run would no longer see."""
    model, args, out = built_model_run(tiny, tmp_path)
    (model / "modules.json").unlink()
    raw = out["raw"]
    future = raw.stat().st_mtime_ns + 3600 * 10**9
    os.utime(raw, ns=(future, future))
    assert make("-q", "features", *args, check=False).returncode == 1
    run = make("features", *args)
    assert [c.split()[1] for c in commands_in(run.stdout)][:1] == ["extract"], run.stdout
    assert raw.stat().st_mtime_ns < future and "modules.json" not in out["settings"].read_text()
    assert make("-q", "features", *args, check=False).returncode == 0


# ------------------------------------------------------------------------------------------ APPLY, outside the clone
SAMPLE = ROOT / "examples" / "sst2_sample.csv"


def sample_rows(start: int, stop: int) -> str:
    """Rows [start, stop) of the sample (no header)."""
    return "".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[1:][start:stop])


def header() -> str:
    return SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def meta(path: Path) -> dict:
    import pyarrow.parquet as pq

    return json.loads(pq.read_schema(path).metadata[b"bertfeat"])


@pytest.fixture(scope="module")
def proj(tmp_path_factory):
    """A project directory outside the clone: train.csv (40 rows), a.csv and b.csv (30 rows each)."""
    from extract_util import tiny_model

    d = tmp_path_factory.mktemp("project")
    assert ROOT not in d.parents
    (d / "train.csv").write_text(header() + sample_rows(0, 40), encoding="utf-8")
    (d / "a.csv").write_text(header() + sample_rows(100, 130), encoding="utf-8")
    (d / "b.csv").write_text(header() + sample_rows(200, 230), encoding="utf-8")
    args = ["features", "INPUT=train.csv", "APPLY=a.csv b.csv", "BUILD=build", "PCA=4", f"MODEL={tiny_model()}"]
    return d, args


def apply_outputs(d: Path) -> dict[str, Path]:
    t = d / "build" / "features" / "train"
    return {
        "raw": t / "train.features.parquet",
        "model": t / "train.pca4.npz",
        "report_md": t / "train.pca4.report.md",
        "reduced": t / "train.pca4.parquet",
        "settings": t / "extract.settings",
        "a": t / "apply" / "a.pca4.parquet",
        "b": t / "apply" / "b.pca4.parquet",
        "a_stamp": t / "apply" / "a.settings",
        "b_stamp": t / "apply" / "b.settings",
    }


def test_apply_builds_train_and_applied_from_outside_the_clone(proj):
    d, args = proj
    first = make(*args, cwd=d)
    cmds = commands_in(first.stdout)
    assert [c.split()[1] for c in cmds] == ["extract", "pca", "pca", "extract", "extract"], first.stdout
    model = "build/features/train/train.pca4.npz"
    assert cmds[3].startswith("bertfeat extract a.csv -o build/features/train/apply/a.pca4.parquet "
                              f"--pca-model {model} --overwrite ")
    assert cmds[4].startswith("bertfeat extract b.csv -o build/features/train/apply/b.pca4.parquet ")
    fits = [c for c in cmds if c.startswith("bertfeat pca fit ")]
    assert len(fits) == 1 and f" -o {model} " in fits[0]  # the one PCA fit is the training's
    out = apply_outputs(d)
    for p in out.values():
        assert p.is_file(), p
    assert not (ROOT / "build" / "features" / "train").exists()  # BUILD is relative to make's directory

    import pyarrow.parquet as pq

    for k, rows in (("a", 30), ("b", 30), ("reduced", 40)):
        t = pq.read_table(out[k])
        assert t.num_rows == rows and t.schema.field("embedding").type.list_size == 4, k
    for k in ("a", "b"):
        assert meta(out[k])["pca"]["model_sha256"] == sha256(out["model"])

    # a second make does nothing
    before = mtimes(out)
    assert make("-q", *args, cwd=d, check=False).returncode == 0
    again = make(*args, cwd=d)
    assert commands_in(again.stdout) == [] and "Nothing to be done" in again.stdout
    assert mtimes(out) == before


def test_apply_touched_input_rebuilds_only_its_own(proj):
    d, args = proj
    make(*args, cwd=d)
    out = apply_outputs(d)
    before = mtimes(out)
    os.utime(d / "a.csv")  # now: newer than its output
    assert make("-q", *args, cwd=d, check=False).returncode != 0
    dry = make("-n", *args, cwd=d)
    assert [c.split()[2] for c in commands_in(dry.stdout)] == ["a.csv"]
    run = make(*args, cwd=d)
    assert [c.split()[2] for c in commands_in(run.stdout)] == ["a.csv"]
    after = mtimes(out)
    assert after["a"] > before["a"]  # (and its stamp, which holds the file's mtime)
    assert {k: v for k, v in after.items() if k not in ("a", "a_stamp")} == {
        k: v for k, v in before.items() if k not in ("a", "a_stamp")}
    # the training PCA is untouched by an applied input, and it is what a.csv was reduced with
    assert after["model"] == before["model"]
    assert meta(out["a"])["pca"]["model_sha256"] == sha256(out["model"])


def test_apply_new_training_rows_rebuild_every_applied_output(proj):
    d, args = proj
    make(*args, cwd=d)
    out = apply_outputs(d)
    before = mtimes(out)
    old_sha = sha256(out["model"])
    with open(d / "train.csv", "a", encoding="utf-8") as f:
        f.write(sample_rows(40, 60))
    assert make("-q", *args, cwd=d, check=False).returncode != 0
    run = make(*args, cwd=d)
    assert [c.split()[1:3] for c in commands_in(run.stdout)] == [
        ["extract", "train.csv"], ["pca", "fit"], ["pca", "transform"], ["extract", "a.csv"], ["extract", "b.csv"]]
    after = mtimes(out)
    new_sha = sha256(out["model"])
    assert new_sha != old_sha
    for k in ("raw", "model", "reduced", "a", "b"):
        assert after[k] > before[k], k
    for k in ("a", "b"):
        assert meta(out[k])["pca"]["model_sha256"] == new_sha, k
    import pyarrow.parquet as pq

    assert pq.read_table(out["reduced"]).num_rows == 60
    assert make("-q", *args, cwd=d, check=False).returncode == 0


def test_apply_missing_input_writes_nothing(proj, tmp_path):
    d, args = proj
    for name in ("train.csv", "a.csv", "b.csv"):
        shutil.copy(d / name, tmp_path / name)
    for bad, typo in ((["INPUT=trian.csv"], "trian.csv"), (["APPLY=a.csv nope.csv"], "nope.csv")):
        for flag in ([], ["-n"]):
            p = make(*flag, *args, *bad, cwd=tmp_path, check=False)
            assert p.returncode != 0 and f"{typo}: no such file" in p.stderr, p.stderr
            assert commands_in(p.stdout) == []
            assert sorted(x.name for x in tmp_path.iterdir()) == ["a.csv", "b.csv", "train.csv"]  # no build/, no stamp

    # in a built project too: no stamp for the missing file, nothing rebuilt
    make(*args, cwd=d)
    out = apply_outputs(d)
    before = mtimes(out)
    p = make(*args, "APPLY=a.csv b.csv nope.csv", cwd=d, check=False)
    assert p.returncode != 0 and "nope.csv: no such file" in p.stderr
    assert not (d / "build" / "features" / "train" / "apply" / "nope.settings").exists()
    assert mtimes(out) == before


def test_apply_never_writes_the_training_pca(proj):
    d, args = proj
    make(*args, cwd=d)
    out = apply_outputs(d)
    before = mtimes(out)
    # the user's mistake of issue 30: a PCA "fitted" on the test set, written over the training PCA
    p = make("features", "INPUT=a.csv", f"PCA_MODEL={out['model'].relative_to(d)}", *args[2:], cwd=d, check=False)
    assert p.returncode != 0 and "PCA_MODEL is computed by this Makefile" in p.stderr and "APPLY" in p.stderr
    assert commands_in(p.stdout) == [] and not (d / "build" / "features" / "a").exists()
    # two applied files of one stem would share an output
    (d / "sub").mkdir(exist_ok=True)
    shutil.copy(d / "a.csv", d / "sub" / "a.csv")
    p = make(*args, "APPLY=a.csv sub/a.csv", cwd=d, check=False)
    assert p.returncode != 0 and "a.csv sub/a.csv have the same stem a" in p.stderr
    assert mtimes(out) == before
    # no rule that makes an applied output writes the model: asking for one alone runs one extract
    os.utime(d / "b.csv")
    run = make(*args[1:], str(out["b"].relative_to(d)), cwd=d)
    assert [c.split()[1:3] for c in commands_in(run.stdout)] == [["extract", "b.csv"]]
    assert out["model"].stat().st_mtime_ns == before["model"]


def test_apply_stamp_and_dry_runs(proj):
    d, args = proj
    make(*args, cwd=d)
    out = apply_outputs(d)
    stamp = out["a_stamp"].read_text()
    st = (d / "a.csv").stat()
    assert stamp.strip() == f"input={d / 'a.csv'}\ninput-file=a.csv:{st.st_size}:{st.st_mtime_ns}"
    # APPLY names another file of the same stem, older than the output: its stamp rebuilds it; -n writes no stamp
    (d / "sub").mkdir(exist_ok=True)
    shutil.copy(d / "a.csv", d / "sub" / "a.csv")
    os.utime(d / "sub" / "a.csv", ns=(0, out["a"].stat().st_mtime_ns - 10**9))
    dry = make("-n", *args, "APPLY=sub/a.csv b.csv", cwd=d)
    assert [c.split()[2] for c in commands_in(dry.stdout)] == ["sub/a.csv"]
    assert out["a_stamp"].read_text() == stamp
    assert make("-q", *args, "APPLY=sub/a.csv b.csv", cwd=d, check=False).returncode != 0
    assert out["a_stamp"].read_text() == stamp
    make(*args, "APPLY=sub/a.csv b.csv", cwd=d)
    st = (d / "sub" / "a.csv").stat()
    assert out["a_stamp"].read_text().strip() == f"input={d / 'sub' / 'a.csv'}\ninput-file=sub/a.csv:{st.st_size}:{st.st_mtime_ns}"
    make(*args, cwd=d)  # back to a.csv
    assert make("-q", *args, cwd=d, check=False).returncode == 0


def _has_keep() -> bool:
    p = subprocess.run([sys.executable, "-m", "bertfeat", "extract", "--help"], env=_env(), capture_output=True,
                       text=True, timeout=120)
    return "--keep" in p.stdout


def test_apply_keep(proj):
    d, args = proj
    make(*args, cwd=d)
    dry = make("-n", *args, "KEEP=label", cwd=d)
    extracts = [c for c in commands_in(dry.stdout) if c.split()[1] == "extract"]
    assert len(extracts) == 3 and all("--keep label" in c for c in extracts)  # train, a, b: a new setting re-extracts
    if not _has_keep():
        pytest.skip("bertfeat extract has no --keep in this tree yet: only the dry run's flags were checked")
    make(*args, "KEEP=label", cwd=d)
    import pyarrow.parquet as pq

    out = apply_outputs(d)
    for k in ("a", "b", "raw"):
        assert "label" in pq.read_schema(out[k]).names, k


def test_default_input_is_the_clones_sample(tmp_path):
    p = make("-n", "features", "BUILD=out", cwd=tmp_path)
    first = commands_in(p.stdout)[0]
    assert first.startswith(f"bertfeat extract {ROOT / 'examples' / 'sst2_sample.csv'} -o out/features/sst2_sample/")
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing
    p = make("-n", "features", f"BUILD={tmp_path / 'out'}")  # from the clone, as before
    assert commands_in(p.stdout)[0].startswith("bertfeat extract examples/sst2_sample.csv ")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ docs/pipelines.md
def doc_block(lang: str, start: str = "") -> str:
    text = (ROOT / "docs" / "pipelines.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M) if b.startswith(start)]
    assert len(blocks) == 1, blocks
    return blocks[0]


def test_pipelines_doc_makefile_snippet(proj, tmp_path):
    from extract_util import tiny_model

    d, _ = proj
    (tmp_path / "Makefile").write_text(doc_block("make"), encoding="utf-8")
    (tmp_path / "data").mkdir()
    for name in ("a.csv", "b.csv"):
        shutil.copy(d / name, tmp_path / "data" / name)
    (tmp_path / "data" / "train.csv").write_text(header() + sample_rows(0, 40), encoding="utf-8")
    args = ["features", "TRAIN=data/train.csv", "APPLY=data/a.csv data/b.csv", "PCA=4", f"FLAGS=--model {tiny_model()}"]

    def mk(*a, check=True):
        p = subprocess.run(["make", "--no-print-directory", f"BERTFEAT={BERTFEAT}", *a], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=600)
        assert not check or p.returncode == 0, p.stdout + p.stderr
        return p

    first = mk(*args)
    assert [c.split()[1] for c in commands_in(first.stdout)] == ["extract", "pca", "pca", "extract", "extract"]
    t = tmp_path / "build" / "features" / "train"
    model, a, b = t / "train.pca4.npz", t / "apply" / "a.pca4.parquet", t / "apply" / "b.pca4.parquet"
    for p in (t / "train.features.parquet", model, t / "train.pca4.parquet", a, b):
        assert p.is_file(), p
    assert meta(a)["pca"]["model_sha256"] == sha256(model)
    assert mk("-q", *args, check=False).returncode == 0
    model_mtime, b_mtime = model.stat().st_mtime_ns, b.stat().st_mtime_ns
    os.utime(tmp_path / "data" / "a.csv")
    assert [c.split()[2] for c in commands_in(mk(*args).stdout)] == ["data/a.csv"]
    assert model.stat().st_mtime_ns == model_mtime and b.stat().st_mtime_ns == b_mtime
    p = mk(*args, "APPLY=data/a.csv data/nope.csv", check=False)
    assert p.returncode != 0 and "data/nope.csv: no such file" in p.stderr


def test_pipelines_doc_shell_script(proj, tmp_path):
    from extract_util import tiny_model

    d, _ = proj
    (tmp_path / "features.sh").write_text(doc_block("sh", "#!/bin/sh"), encoding="utf-8")
    for name in ("train.csv", "a.csv", "b.csv"):
        shutil.copy(d / name, tmp_path / name)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bertfeat").write_text(f'#!/bin/sh\nexec {BERTFEAT} "$@"\n', encoding="utf-8")
    (bindir / "bertfeat").chmod(0o755)
    env = _env() | {"PCA": "4", "FLAGS": f"--model {tiny_model()} --quiet"}
    env["PATH"] = str(bindir) + os.pathsep + env["PATH"]

    def run():
        return subprocess.run(["sh", "features.sh", "train.csv", "a.csv", "b.csv"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    p = run()
    assert p.returncode == 0, p.stdout + p.stderr
    t = tmp_path / "build" / "pipeline" / "train"
    model = t / "train.pca.npz"
    for f in (t / "train.parquet", model, t / "train.pca.report.md", t / "apply" / "a.parquet", t / "apply" / "b.parquet"):
        assert f.is_file(), f
    for k in ("a", "b"):
        assert meta(t / "apply" / f"{k}.parquet")["pca"]["model_sha256"] == sha256(model)
    before = {f: f.stat().st_mtime_ns for f in t.rglob("*")}
    p = run()  # refused at the first line: nothing replaced
    assert p.returncode != 0 and "already exists" in p.stderr
    assert {f: f.stat().st_mtime_ns for f in t.rglob("*")} == before


def test_apply_id_and_raw_features(proj):
    """ID=id copies the id column to every output; APPLY_RAW=1 also keeps each applied file's raw features, whose
    PCA projection is the reduced file the same run wrote (the cache encodes each row once)."""
    import numpy as np
    import pyarrow.parquet as pq

    from bertfeat.pca.estimator import PCA

    d, args = proj
    first = make(*args, "ID=id", "APPLY_RAW=1", cwd=d)
    extracts = [c for c in commands_in(first.stdout) if c.split()[1] == "extract"]
    assert len(extracts) == 5 and all("--id-column id" in c for c in extracts), first.stdout
    t = d / "build" / "features" / "train"
    raw_a, red_a = t / "apply" / "a.features.parquet", t / "apply" / "a.pca4.parquet"
    ids = [r.split(",")[0] for r in sample_rows(100, 130).splitlines()]
    for p in (raw_a, red_a):
        assert [str(x) for x in pq.read_table(p).column("id").to_pylist()] == ids, p
    raw = np.asarray(pq.read_table(raw_a).column("embedding").to_pylist(), dtype=np.float32)
    assert raw.shape == (30, 32)
    reduced = np.asarray(pq.read_table(red_a).column("embedding").to_pylist(), dtype=np.float32)
    pca = PCA.load(t / "train.pca4.npz")
    np.testing.assert_array_equal(pca.transform_rows(raw), reduced)
    assert meta(t / "apply" / "b.features.parquet")["cache"] is not None
    assert meta(t / "apply" / "b.features.parquet")["rows"]["encoded"] == 0  # the reduced extract encoded them
    again = make(*args, "ID=id", "APPLY_RAW=1", cwd=d)
    assert commands_in(again.stdout) == []  # a second make does nothing


# ------------------------------------------------------------------------------------------ what it refuses
REFUSED = [
    # EXTRACT_OPTS that the rules set themselves: seen writing a PCA of a PCA (exit 0), or replacing a user's file
    (["EXTRACT_OPTS=--pca 8"], "EXTRACT_OPTS: --pca is set by make features itself"),
    (["EXTRACT_OPTS=-o mine.parquet"], "EXTRACT_OPTS: -o is set by make features itself"),
    (["EXTRACT_OPTS=--output=mine.parquet"], "EXTRACT_OPTS: --output=mine.parquet is set by make features itself"),
    (["EXTRACT_OPTS=--chunk-rows 5 --resume"], "EXTRACT_OPTS: --resume is not taken by make features: after an "
     "interruption, run make features again - the rows the interrupted run finished come back from the vector cache "
     "(CACHE=build/cache) - remove it from EXTRACT_OPTS"),
    (["EXTRACT_OPTS=--estimate"], "EXTRACT_OPTS: --estimate is set by make features itself"),
    (["PCA=8 9"], "PCA must be one value (a number of components such as 64, a variance fraction such as 0.95, or "
                  "mle), not '8 9'"),
    (["PCA="], "PCA must be one value"),
    (["INPUT=train.csv a.csv"], "INPUT names more than one file (train.csv a.csv)"),
    (["INPUT=a:b.csv"], "a:b.csv: make features cannot take a file name with ':' in it (make or the shell would read "
                        "it as syntax) - rename the file or link it under a plain name: ln -s 'a:b.csv' plain.csv"),
    (["APPLY=a#b.csv"], "a#b.csv: make features cannot take a file name with '#' in it"),
    (["APPLY=a=b.csv"], "a=b.csv: make features cannot take a file name with '=' in it"),
    (["INPUT=a$$b.csv"], "a$b.csv: make features cannot take a file name with '$' in it"),
    (["INPUT=-dash.csv"], "-dash.csv: a name that starts with '-' would be read as an option - write it ./-dash.csv"),
    # names make reads otherwise (a helper's review): d$x.csv ran on d.csv at exit 0; a space split BUILD into a stray
    # folder, a MODEL into two arguments, INPUT into "more than one file", APPLY into "no such file"; it's.csv's fix
    # did not close its quote
    (["INPUT=d$x.csv"], "INPUT=d$x.csv: make reads a '$' in a name as a variable (so the name became 'd.csv') - rename "
                        "the file or link it under a plain name; nothing was written"),
    (["APPLY=a.csv d$x.csv"], "APPLY=a.csv d$x.csv: make reads a '$' in a name as a variable"),
    (["BUILD=b d"], "BUILD='b d' holds a space, which make splits names at - give a path without one (a link under a "
                    "plain name: ln -s 'b d' plain); nothing was written"),
    (["MODEL=m m"], "MODEL='m m' holds a space, which make splits names at"),
    (["INPUT=a b.csv"], "INPUT='a b.csv' holds a space, which make splits names at - link the file under a plain name: "
                        "ln -s 'a b.csv' plain.csv; nothing was written"),
    (["APPLY=a b.csv"], "a: no such file (INPUT / APPLY are relative to {tmp}; APPLY's names are separated by spaces: a "
                        "name with a space in it is two names to make - link it under a plain name); nothing was written"),
    (["INPUT=it's.csv"], "rename the file or link it under a plain name: ln -s 'it'\\''s.csv' plain.csv"),
    (["INPUT=*.csv"], "*.csv: a glob is not taken here - name one file, or a directory of Parquet parts"),
]


@pytest.mark.parametrize("bad,message", REFUSED, ids=[" ".join(b) for b, _ in REFUSED])
def test_make_features_refuses_before_writing(tmp_path, bad, message):
    """Settings make features cannot honour stop it at parse time, naming what to change: no stamp, no build/, no
    command run, and a user's file named by -o untouched."""
    text = header() + sample_rows(0, 12)
    for name in ("train.csv", "a.csv", "a:b.csv", "a#b.csv", "a=b.csv", "a$b.csv", "-dash.csv", "d.csv", "d$x.csv",
                 "a b.csv", "it's.csv"):
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "mine.parquet").write_text("precious", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    args = ["features", "INPUT=train.csv", "BUILD=build", "PCA=4", *bad]
    for flag in ([], ["-n"]):
        p = make(*flag, *args, cwd=tmp_path, check=False)
        assert p.returncode == 2 and message.format(tmp=tmp_path) in p.stderr, p.stderr
        assert commands_in(p.stdout) == []
        assert sorted(x.name for x in tmp_path.iterdir()) == before
    assert (tmp_path / "mine.parquet").read_text(encoding="utf-8") == "precious"


def test_make_features_dash_name_written_dot_slash_runs(tmp_path):
    from extract_util import tiny_model

    (tmp_path / "-dash.csv").write_text(header() + sample_rows(0, 12), encoding="utf-8")
    make("features", "INPUT=./-dash.csv", "BUILD=build", "PCA=3", f"MODEL={tiny_model()}", cwd=tmp_path)
    assert (tmp_path / "build" / "features" / "-dash" / "-dash.pca3.parquet").is_file()


def test_make_features_a_directory_part_rewritten_in_place_re_extracts(tmp_path):
    """A directory of Parquet parts: a part rewritten in place leaves the directory's time alone (make sees only
    that), so each file's size and time is in the stamp: -q says out of date, the run re-extracts and reads the new
    text; a second run does nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from extract_util import tiny_model

    rows = [line.split(",", 2) for line in sample_rows(0, 12).splitlines()]
    parts = tmp_path / "parts"
    parts.mkdir()
    for name, chunk in (("p1.parquet", rows[:6]), ("p2.parquet", rows[6:])):
        pq.write_table(pa.table({"id": [r[0] for r in chunk], "text": [r[2] for r in chunk]}), parts / name)
    args = ["features", "INPUT=parts", "BUILD=build", "PCA=3", "ID=id", f"MODEL={tiny_model()}"]
    make(*args, cwd=tmp_path)
    raw = tmp_path / "build" / "features" / "parts" / "parts.features.parquet"
    first = pq.read_table(raw)
    assert make("-q", *args, cwd=tmp_path, check=False).returncode == 0

    dir_time = parts.stat().st_mtime_ns
    chunk = rows[6:]
    with open(parts / "p2.parquet", "r+b") as f:  # the same inode, rewritten: the directory's time stays
        f.truncate(0)
        pq.write_table(pa.table({"id": [r[0] for r in chunk], "text": ["a brand new text"] + [r[2] for r in
                                                                                              chunk[1:]]}), f)
    assert parts.stat().st_mtime_ns == dir_time
    assert make("-q", *args, cwd=tmp_path, check=False).returncode == 1
    run = make(*args, cwd=tmp_path)
    assert [c.split()[1] for c in commands_in(run.stdout)] == ["extract", "pca", "pca"], run.stdout
    second = pq.read_table(raw)
    changed = [i for i in range(12) if first["embedding"][i] != second["embedding"][i]]
    assert changed == [6]
    assert "Nothing to be done" in make(*args, cwd=tmp_path).stdout


def test_an_input_or_applied_file_replaced_by_an_older_copy_rebuilds(proj, tmp_path):
    """INPUT (or an APPLY file) replaced by a copy older than the features (mv of a file written earlier, cp -p,
    rsync -a, tar x, a backup restored): make saw nothing newer and kept the old rows' features, exit 0. The stamps
    hold each file's size and mtime, as they do the model's files and a directory's parts."""
    import pyarrow.parquet as pq

    d, args = proj
    make(*args, cwd=d)
    out = apply_outputs(d)
    for name, first in (("train.csv", 240), ("a.csv", 50)):
        new = tmp_path / name
        new.write_text(header() + sample_rows(first, first + 35), encoding="utf-8")
        os.utime(new, ns=(0, 1_704_067_200 * 10**9))  # 2024-01-01, older than every output
        shutil.copy2(new, d / name)  # cp -p
        assert make("-q", *args, cwd=d, check=False).returncode != 0, name
        make(*args, cwd=d)
        assert make("-q", *args, cwd=d, check=False).returncode == 0
    assert pq.read_table(out["reduced"]).num_rows == 35 and pq.read_table(out["a"]).num_rows == 35
    assert "input-file=" in out["settings"].read_text() and "input-file=" in out["a_stamp"].read_text()


@pytest.mark.parametrize("name", ["train.csv", "train.csv.gz", "train.csv.bz2", "train.csv.zst", "train.csv.xz",
                                  "train.jsonl.xz"])
def test_a_compressed_inputs_stem_drops_its_compression(tmp_path, name):
    """make features INPUT=train.csv.xz planned build/features/train.csv/train.csv.features.parquet (the .xz the
    readers read was not stripped, as .gz / .bz2 / .zst were): every compression is, as extract's default output."""
    (tmp_path / name).write_bytes(b"")
    p = make("-n", "features", f"INPUT={name}", "PCA=2", cwd=tmp_path)
    extract = [c for c in commands_in(p.stdout) if c.split()[1] == "extract"]
    assert len(extract) == 1 and " -o build/features/train/train.features.parquet " in extract[0] + " ", p.stdout

