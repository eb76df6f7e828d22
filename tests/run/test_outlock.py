"""One writer per output (outlock.py): a second run on an output another run is writing (extract, pca, report,
attention) is refused at once, with one line naming the other run, whatever its flags; the first run finishes with its own complete output; a lock
left by a killed run is taken over.

The interleavings are forced with real processes: a run started beside another, a run started mid-run (once the
first run's partial directory holds a finished chunk), with --overwrite and with --resume, a run started after the
first finished, and a run resumed after the first was killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bertfeat.atomic import fitted_name
from bertfeat.run.outlock import lock_path, output_lock
from extract_util import run, tiny_model, write_csv

ROOT = Path(__file__).resolve().parents[2]
N = 3000


def lock_message(out: Path) -> str:
    return (f"Error: {out} is being written by another bertfeat run (process {os.getpid()} on host {socket.gethostname()}, "
            "started ")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("in")
    a = write_csv(d / "a.csv", ["text"], [[f"first input sentence {i} with some words"] for i in range(N)])
    b = write_csv(d / "b.csv", ["text"], [[f"second input row {i}"] for i in range(N // 2)])
    return a, b


def start(src: Path, out: Path, *extra, chunk_rows: int = 25) -> subprocess.Popen:
    """`bertfeat extract` in its own process (small chunks: a run of several seconds with many finished chunks)."""
    args = [sys.executable, "-m", "bertfeat", "extract", str(src), "-o", str(out), "--model", str(tiny_model()),
            "--chunk-rows", str(chunk_rows), "-q", *map(str, extra)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def wait_mid_run(out: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the run's partial directory holds a finished chunk (the run is mid-way)."""
    partial = out.with_name(out.name + ".partial")
    t0 = time.time()
    while not any(partial.glob("part-*.parquet")):
        assert proc.poll() is None, f"the run ended before a chunk was seen: {proc.communicate()}"
        assert time.time() - t0 < timeout
        time.sleep(0.02)


def whole_output_of(out: Path, src: Path, n: int) -> None:
    """The output is one complete run over ``src``: n rows in order, its provenance naming src."""
    t = pq.read_table(out)
    meta = json.loads(t.schema.metadata[b"bertfeat"])
    assert meta["input"] == str(src) and meta["rows"]["written"] == n
    assert t.column("row").to_pylist() == list(range(n))
    assert not out.with_name(out.name + ".partial").exists()
    assert not lock_path(out).exists()


def test_a_held_output_refuses_every_second_writer(tmp_path, inputs, capsys):
    """While a run holds an output, extract (plain, --overwrite, --resume), pca fit / transform and report on it are
    refused in one line naming the holder; nothing is written."""
    a, _ = inputs
    out = tmp_path / "o.parquet"
    with output_lock(out):
        for flags in ([], ["--overwrite"], ["--resume"]):
            rc, _, err = run(capsys, "extract", a, "-o", out, "--model", tiny_model(), *flags)
            assert rc == 1 and err.startswith(lock_message(out)) and err.count("\n") == 1, err
            assert err.endswith(" - wait for that run to finish (or stop it), then rerun; two runs never write one output\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == [".o.parquet.lock"]
    assert list(tmp_path.iterdir()) == []  # released and removed

    rc, _, err = run(capsys, "extract", a, "-o", out, "--model", tiny_model(), "--pca", 4, "--chunk-rows", 500)
    assert rc == 0, err
    model = tmp_path / "o.pca.npz"
    with output_lock(tmp_path / "m.npz"), output_lock(tmp_path / "r.parquet"), output_lock(tmp_path / "rep"):
        for args, held in ((["pca", "fit", out, "-n", 2, "-o", tmp_path / "m.npz"], tmp_path / "m.npz"),
                           (["pca", "transform", out, "--pca-model", model, "-o", tmp_path / "r.parquet"], tmp_path / "r.parquet"),
                           (["report", model, "-o", tmp_path / "rep"], tmp_path / "rep")):
            rc, _, err = run(capsys, *args)
            assert rc == 1 and err.startswith(lock_message(held)), err
    assert not any(p.name.startswith(("m.", "r.", "rep")) for p in tmp_path.iterdir())


def test_a_held_report_prefix_is_named_through_the_output_given(tmp_path, inputs, capsys):
    """pca fit -o x.npz also locks its report prefix x (x.report.*): held by another run, the refusal named
    '.../x is being written', a path that is no file and that the user never gave. Now the output given, and the
    prefix's files."""
    a, _ = inputs
    feats = tmp_path / "f.parquet"
    assert run(capsys, "extract", a, "-o", feats, "--model", tiny_model(), "--chunk-rows", 500, "-q")[0] == 0
    model = tmp_path / "x.npz"
    with output_lock(tmp_path / "x"):
        rc, _, err = run(capsys, "pca", "fit", feats, "-n", 2, "-o", model)
    assert rc == 1 and err.startswith(f"Error: {model}: x.*, written with it, is being written by another bertfeat run "
                                      f"(process {os.getpid()}"), err
    assert not model.exists()


def test_attention_holds_the_lock_of_its_png_and_npy(tmp_path, capsys):
    """`bertfeat attention` writes files as the other commands do: under their run lock. A run holding the PNG or the
    .npy refuses it (with --overwrite too), nothing written; free, it writes both and leaves no lock file. A folder
    that does not exist is still refused, not made for the lock."""
    png, npy = tmp_path / "a.png", tmp_path / "a.npy"
    for held in (png, npy):
        with output_lock(held):
            for flags in ([], ["--overwrite"]):
                rc, _, err = run(capsys, "attention", "a cat", "-o", png, "--save-npy", npy, "--model", tiny_model(),
                                 *flags)
                assert rc == 1 and err.startswith(lock_message(held)) and err.count("\n") == 1, err
            assert sorted(p.name for p in tmp_path.iterdir()) == [f".{held.name}.lock"]
    rc, _, err = run(capsys, "attention", "a cat", "-o", png, "--save-npy", npy, "--model", tiny_model())
    assert rc == 0 and err.startswith(f"wrote {png} ("), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "a.png"]
    rc, _, err = run(capsys, "attention", "a cat", "-o", tmp_path / "new" / "b.png", "--model", tiny_model())
    assert (rc, err) == (1, f"Error: cannot write {tmp_path}/new/b.png: directory {tmp_path}/new does not exist - "
                            "create it, or choose another path\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "a.png"]


def test_a_stale_lock_file_is_taken_over(tmp_path, inputs, capsys):
    """A lock file whose run is gone (no process holds it: kill -9 leaves the file) does not block the next run."""
    a, _ = inputs
    out = tmp_path / "o.parquet"
    lock_path(out).write_text(json.dumps({"pid": 999999, "host": "gone", "started": 0}))
    rc, _, err = run(capsys, "extract", a, "-o", out, "--model", tiny_model(), "--chunk-rows", 1000)
    assert rc == 0, err
    whole_output_of(out, a, N)


def test_second_run_mid_run_is_refused_and_the_first_finishes_whole(tmp_path, inputs):
    a, b = inputs
    out = tmp_path / "o.parquet"
    first = start(a, out)
    wait_mid_run(out, first)
    first.send_signal(signal.SIGSTOP)  # held mid-run (its lock and partial directory live) while the others try
    try:
        seconds = {tuple(flags): start(b, out, *flags) for flags in (["--overwrite"], ["--resume"], [])}
        for flags, second in seconds.items():
            _, err = second.communicate(timeout=120)
            assert second.returncode == 1, (flags, err)
            assert f"Error: {out} is being written by another bertfeat run (process {first.pid} on host" in err, err
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    whole_output_of(out, a, N)


def test_two_runs_started_together_never_mix(tmp_path, inputs):
    """Started side by side with --overwrite on one output: one wins the lock (the other is refused, or runs after it
    and replaces the output whole); the file left is one input's, complete."""
    a, b = inputs
    out = tmp_path / "o.parquet"
    procs = [start(a, out, "--overwrite"), start(b, out, "--overwrite")]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert any(rc == 0 for rc, _ in results), results
    for rc, err in results:
        assert rc == 0 or "is being written by another bertfeat run" in err, err
    meta = json.loads(pq.read_schema(out).metadata[b"bertfeat"])
    src, n = (a, N) if meta["input"] == str(a) else (b, N // 2)
    whole_output_of(out, src, n)


def test_after_the_first_finishes_the_output_rules_apply(tmp_path, inputs):
    a, b = inputs
    out = tmp_path / "o.parquet"
    first = start(a, out)
    assert first.wait(timeout=300) == 0
    second = start(b, out)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 1 and f"Error: {out} already exists - pass --overwrite to replace it" in err
    whole_output_of(out, a, N)
    third = start(b, out, "--overwrite")
    assert third.wait(timeout=300) == 0
    whole_output_of(out, b, N // 2)


def test_a_killed_run_releases_its_lock_and_resumes(tmp_path, inputs):
    a, _ = inputs
    out = tmp_path / "o.parquet"
    first = start(a, out, chunk_rows=4)
    wait_mid_run(out, first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert lock_path(out).exists()  # kill -9 leaves the file; nobody holds its lock
    resumed = start(a, out, "--resume", chunk_rows=4)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    whole_output_of(out, a, N)


def test_the_dask_engine_takes_the_same_lock(tmp_path, inputs):
    pytest.importorskip("distributed")
    import bertfeat
    from bertfeat.run.outlock import OutputLockedError

    out = tmp_path / "o.parquet"
    with output_lock(out), pytest.raises(OutputLockedError) as e:
        bertfeat.extract(inputs[0], out, model=tiny_model(), engine="dask", scheduler="tcp://127.0.0.1:9", overwrite=True)
    assert str(e.value).startswith(f"{out} is being written by another bertfeat run (process {os.getpid()}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_output_in_a_folder_not_made_yet_is_locked_too(tmp_path, inputs, capsys):
    """The run makes the output's folder under its lock; a second run on the same new folder is refused, and the
    plan's early check writes nothing for a folder that does not exist."""
    a, _ = inputs
    out = tmp_path / "new" / "sub" / "o.parquet"
    with output_lock(out):
        assert lock_path(out).exists()
        rc, _, err = run(capsys, "extract", a, "-o", out, "--model", tiny_model(), "--overwrite")
        assert rc == 1 and err.startswith(lock_message(out)), err
    from bertfeat.run.options import ExtractOptions
    from bertfeat.run.plan import make_plan

    other = tmp_path / "later" / "o.parquet"
    make_plan(ExtractOptions(input=a, output=other, model=tiny_model()))
    assert not other.parent.exists()


def test_a_side_file_of_a_held_output_is_held_too(tmp_path, inputs, capsys):
    """A run writing o.npy also writes o.ids.csv and o.npy.json: another run whose -o names one of those is refused
    while the first runs (it once wrote o.ids.csv, which the first run then replaced with its ids file)."""
    a, _ = inputs
    held = tmp_path / "o.npy"
    from bertfeat.run.plan import OutputLayout

    layout = OutputLayout(held, "npy", "local", False)
    assert sorted(p.name for p in layout.locked()) == ["o.ids.csv", "o.npy", "o.npy.json", "o.npy.rejects.csv"]
    with output_lock(*layout.locked()):
        out = tmp_path / "o.ids.csv"
        rc, _, err = run(capsys, "extract", a, "-o", out, "--model", tiny_model())
        assert rc == 1 and err.startswith(lock_message(out)), err
        assert not any(p.name.startswith("o.ids.csv") and not p.name.endswith(".lock") for p in tmp_path.iterdir())
        assert not (tmp_path / "o.ids.csv.partial").exists()


@pytest.mark.parametrize("content", [b"my notes\n", b'{"pid": 1, "mine": true}', b"\x00\x01binary"])
def test_a_users_file_at_the_locks_name_is_refused_and_kept(tmp_path, capsys, content):
    """The lock's name beside an output (.NAME.lock) holding another file: the run would write its pid into it and
    delete it at the end (found by the session's own audit). Refused before anything is written, the file kept."""
    from extract_util import run, tiny_model, write_csv

    src = write_csv(tmp_path / "in.csv", ["text"], [["a text"]])
    mine = tmp_path / ".out.parquet.lock"
    mine.write_bytes(content)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "out.parquet", "--model", tiny_model())
    assert rc == 1 and err == (f"Error: {mine} exists and is not a bertfeat lock file (bertfeat keeps its run lock for "
                               f"{tmp_path / 'out.parquet'} under that name, and removes it after the run) - rename or "
                               "move that file, or write the output under another name\n")
    assert mine.read_bytes() == content and not (tmp_path / "out.parquet").exists()
    mine.write_text('{"pid": 12, "host": "h", "started": 1.0}')  # a killed run's own lock: taken over
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "out.parquet", "--model", tiny_model(), "-q")
    assert (rc, err) == (0, "") and not mine.exists()


def test_a_runs_rejects_file_is_locked_too(tmp_path, inputs, capsys):
    """Another run's -o naming this run's rejects file (o.parquet.rejects.csv) was not refused: one replaced the
    other's file (a run's rejects lost, its provenance still counting them)."""
    a, _ = inputs
    rejects = tmp_path / "o.parquet.rejects.csv"
    with output_lock(rejects):  # held as a run writing it (its -o) holds it
        rc, _, err = run(capsys, "extract", a, "-o", tmp_path / "o.parquet", "--model", tiny_model())
        assert rc == 1 and err.startswith(lock_message(rejects)), err
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_at_the_lock_names_the_lock_file(tmp_path, monkeypatch):
    import errno

    from bertfeat.errors import BertfeatError

    def full(fd, n):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "ftruncate", full)
    out = tmp_path / "o.parquet"
    with pytest.raises(BertfeatError) as e:
        with output_lock(out):
            pass
    assert str(e.value) == (f"{lock_path(out.absolute())}: no space left on the device - free disk space there, or "
                            "write elsewhere, then rerun")


def test_a_folder_that_refuses_new_files_is_named_not_the_hidden_lock(tmp_path, inputs, capsys, monkeypatch):
    """An output folder where files cannot be made (no write permission, immutable, read-only): the error named the
    hidden lock file (`DIR/.o.parquet.lock: permission denied`), a file the user never gave; it names the folder."""
    import errno

    real_open = os.open

    def refusing(path, flags, *a, **k):
        if os.fspath(path).endswith(".lock") and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", refusing)
    for name in ("o.parquet", "o.npy"):
        rc, _, err = run(capsys, "extract", inputs[1], "-o", tmp_path / name, "--model", tiny_model(), "-q")
        assert (rc, err) == (1, f"Error: {tmp_path / name}: its folder {tmp_path} takes no new file: permission denied - "
                                "check the permissions of the file and its directory, or choose another path\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_output_in_proc_names_the_users_path_not_the_lock(tmp_path, inputs, capsys):
    """`attention -o /proc/x.png` said `/proc/.x.png.lock: no such file or directory - check the path (does its
    directory exist?)`: a file the user never gave, and advice that does not fit (/proc exists); -o "/proc/my dir/x"
    ended in a RecursionError. Every command names the user's path and the folder that takes no file."""
    why = ("takes no new file (making one there said: no such file or directory; a virtual file system such as /proc "
           "or /sys) - write the output to a folder on a disk\n")
    feats = tmp_path / "f.parquet"
    assert run(capsys, "extract", inputs[1], "-o", feats, "--model", tiny_model(), "-q")[0] == 0
    cases = [(["attention", "hi", "-m", tiny_model(), "-o", "/proc/x.png"], "/proc/x.png", "/proc"),
             (["extract", inputs[1], "-m", tiny_model(), "-o", "/proc/x.parquet", "-q"], "/proc/x.parquet", "/proc"),
             (["extract", inputs[1], "-m", tiny_model(), "-o", "/proc/my dir/x.parquet", "-q"], "/proc/my dir/x.parquet",
              "/proc"),
             (["pca", "fit", feats, "-n", 1, "-o", "/proc/p.npz"], "/proc/p.npz", "/proc"),  # not its report prefix /proc/p
             (["sweep", inputs[1], "-m", tiny_model(), "-o", "/proc/sw"], "/proc/sw", "/proc")]
    for command, path, folder in cases:
        rc, _, err = run(capsys, *command)
        assert (rc, err.splitlines()[-1] + "\n") == (1, f"Error: {path}: its folder {folder} {why}"), command


def test_a_lock_file_that_cannot_be_opened_is_named_not_its_folder(tmp_path, inputs, capsys, monkeypatch):
    """Another user's run killed before it removed its lock leaves .o.parquet.lock (mode 0644, theirs): opening it to
    write is refused while the folder takes new files. The error named the folder (`DIR: permission denied`), which
    the user can write to; it names the lock file."""
    import errno

    out = tmp_path / "o.parquet"
    stale = lock_path(out)
    stale.write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": 0.0}))
    real_open = os.open

    def theirs(path, flags, *a, **k):
        if os.fspath(path) == os.fspath(stale) and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", theirs)
    rc, _, err = run(capsys, "extract", inputs[1], "-o", out, "--model", tiny_model(), "-q")
    assert (rc, err) == (1, f"Error: {stale}: permission denied - check the permissions of the file and its "
                            "directory, or choose another path\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [stale.name]  # nothing written, the lock file left as it was


def test_an_output_name_near_the_limit_gets_a_lock_name_of_its_own():
    """.NAME.lock is 6 characters longer than the output: a long output name (or its rejects file's) had no lock name
    the file system takes, and the plan's early lock probe refused it as if a user's file sat there, before the name
    check could say the name is too long (test_output_rules: test_an_output_name_too_long_...)."""
    long = Path("/d") / ("x" * 250)
    assert lock_path(long).name.startswith("." + "x" * 200) and len(lock_path(long).name) <= 255
    assert lock_path(long).name == f".{fitted_name(long.name, 6)}.lock"  # shortened as the temporaries (one helper)
    assert lock_path(long) != lock_path(Path("/d") / ("x" * 249 + "y"))
    assert lock_path(Path("/d/o.parquet")) == Path("/d/.o.parquet.lock")


# --------------------------------------------------------------------------- an estimate takes no lock
HOLDER = """
import sys
from bertfeat.run.outlock import output_lock
with output_lock(*sys.argv[1:]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it
"""


def only_warnings(err: str) -> bool:
    """An estimate's stderr: its warnings (a busy machine, a Dask cluster's share), no Error line."""
    return all(line.startswith("Warning: ") for line in err.splitlines())


class TestAnEstimateTakesNoLock:
    """extract --estimate was refused while another run held the output's lock ("is being written by another bertfeat
    run"), although an estimate writes nothing. It runs beside that run, on either engine, and leaves its lock and
    files as they were."""

    @pytest.mark.parametrize("engine, pca", [("local", []), ("local", ["--pca", "2"]), ("dask", ["--pca", "2"])])
    def test_beside_a_process_holding_the_lock(self, tmp_path, inputs, capsys, engine, pca):
        from bertfeat.run.plan import OutputLayout
        from extract_util import tree_digest

        if engine == "dask":
            pytest.importorskip("distributed")
        a, _ = inputs
        out = tmp_path / "o.parquet"
        layout = OutputLayout(out, "parquet", engine, bool(pca))
        held = layout.locked() + list(layout.locked_prefixes())  # as that run holds them
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, *map(str, held)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            assert holder.stdout.readline() == "held\n"
            before = tree_digest(tmp_path)
            args = ["extract", a, "-o", out, "--model", tiny_model(), "--engine", engine, *pca, "--estimate",
                    "--estimate-rows", 20]
            rc, stdout, err = run(capsys, *args)
            assert rc == 0 and "nothing was written" in stdout and only_warnings(err), err
            assert tree_digest(tmp_path) == before  # the holder's lock files untouched, nothing made
            rc, _, err = run(capsys, *args[:-3])  # the run itself is still refused
            assert rc == 1 and f"is being written by another bertfeat run (process {holder.pid} on host" in err, err
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
        assert not any(p.exists() for p in map(lock_path, held))  # released by its holder

    def test_beside_a_run_writing_the_output(self, tmp_path, inputs, capsys):
        """A real run mid-way (its partial directory live), held there while the estimate runs."""
        a, _ = inputs
        out = tmp_path / "o.parquet"
        first = start(a, out)
        wait_mid_run(out, first)
        first.send_signal(signal.SIGSTOP)
        try:
            rc, stdout, err = run(capsys, "extract", a, "-o", out, "--model", tiny_model(), "--estimate",
                                  "--estimate-rows", 20)
            assert rc == 0 and "nothing was written" in stdout and only_warnings(err), err
        finally:
            first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
        whole_output_of(out, a, N)


# --------------------------------------------------------------------------- a refused run leaves no folder
def test_a_refused_run_leaves_no_folder_it_made_for_its_lock(tmp_path, capsys):
    """Found by the CLI audit: the lock makes an output's missing folders, and a run refused under it (a label that is
    not a column, a PCA of another width, a bad row) left them behind, empty. A folder the run wrote into stays."""
    src = write_csv(tmp_path / "in.csv", ["text", "label"], [[f"sentence {i} about cats", "ab"[i % 2]] for i in range(24)])
    bad = write_csv(tmp_path / "bad.csv", ["text"], [[""]])
    feats, model = tmp_path / "f.parquet", tmp_path / "p.npz"
    assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "-q", "--keep", "label")[0] == 0
    assert run(capsys, "pca", "fit", feats, "-n", "2", "-o", model, "-q")[0] == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    refused = [["pca", "fit", feats, "-n", "2", "-o", tmp_path / "n1" / "a" / "p.npz", "--label", "nope"],
               ["pca", "fit", feats, "-n", "99", "-o", tmp_path / "n2" / "p.npz"],
               ["report", model, "-o", tmp_path / "n3" / "r", "--probe", feats, "--label", "nope"],
               ["sweep", src, "-o", tmp_path / "n4" / "s", "--model", tiny_model(), "--set", "mean", "--label", "text"],
               ["extract", bad, "-o", tmp_path / "n5" / "o.parquet", "--model", tiny_model()]]
    for args in refused:
        rc, _, err = run(capsys, *args, "-q")
        assert rc == 1 and err.startswith("Error: ") and err.count("\n") == 1, (args, err)
        assert sorted(p.name for p in tmp_path.iterdir()) == before, args
    assert run(capsys, "pca", "fit", feats, "-n", "2", "-o", tmp_path / "n6" / "a" / "p.npz", "-q")[0] == 0
    assert sorted(p.name for p in (tmp_path / "n6" / "a").iterdir()) == ["p.npz", "p.report.json", "p.report.md",
                                                                         "p.report.png"]


def test_a_lock_whose_new_folder_vanishes_makes_it_again(tmp_path, monkeypatch):
    """Two runs in one new folder: the first, refused, removes the folder it made as the second is about to lock
    there; the second makes it again and locks."""
    from bertfeat.run import outlock

    out = tmp_path / "new" / "o.parquet"
    real = outlock._check_ours

    def vanishing(path, output):
        real(path, output)
        path.parent.rmdir()

    monkeypatch.setattr(outlock, "_check_ours", vanishing)
    with output_lock(out):
        assert lock_path(out).exists()
    assert not (tmp_path / "new").exists()  # and it made no folder the run left empty


# --------------------------------------------------------------------------- only the folders the run made go
# Review of the CLI audit: the folders to remove were the path's parts missing before mkdir, found by name; a path
# through a folder not there yet (new/../keep/o.npz) named the user's empty folder keep/ as missing, and a refused run
# deleted it. Only a folder this run's own mkdir made is removed, and only while it is still that folder.
@pytest.mark.parametrize("given", ["new/../keep/o.parquet", "new/../new2/../keep/o.parquet", "a/b/../../keep/o.parquet"])
def test_a_refused_run_leaves_the_users_empty_folder_however_the_path_names_it(tmp_path, monkeypatch, given):
    from bertfeat.errors import BertfeatError

    (tmp_path / "keep").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BertfeatError):
        with output_lock(given):
            assert (tmp_path / "keep" / ".o.parquet.lock").exists()
            raise BertfeatError("refused", "as a run is")
    assert sorted(os.listdir(tmp_path)) == ["keep"] and os.listdir(tmp_path / "keep") == []


def test_a_refused_run_through_a_new_folder_removes_what_it_made(tmp_path, monkeypatch):
    from bertfeat.errors import BertfeatError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(BertfeatError):
        with output_lock("new/../x/y/o.parquet"):
            assert sorted(os.listdir(tmp_path)) == ["new", "x"]
            raise BertfeatError("refused", "as a run is")
    assert os.listdir(tmp_path) == []


def test_a_folder_put_in_place_of_the_one_made_stays(tmp_path):
    """The folder the lock made, replaced during the run by another (empty) one: that one is not the run's to remove."""
    from bertfeat.errors import BertfeatError

    new = tmp_path / "new"
    with pytest.raises(BertfeatError):
        with output_lock(new / "o.parquet"):
            os.unlink(lock_path(new / "o.parquet"))
            new.rmdir()
            new.mkdir()  # another process's, made after the lock's
            raise BertfeatError("refused", "as a run is")
    assert new.is_dir()


def test_a_lock_file_has_the_mode_the_umask_gives(tmp_path):
    """Found by the environment audit: the lock was made 0644 whatever the umask, so under umask 002 a lock a killed
    run left in a group's folder could not be opened by the next run of another member of the group (it takes over
    a stale lock by opening it for writing)."""
    old = os.umask(0o002)
    try:
        with output_lock(tmp_path / "o.parquet"):
            mode = lock_path(tmp_path / "o.parquet").stat().st_mode & 0o777
    finally:
        os.umask(old)
    assert mode == 0o664
