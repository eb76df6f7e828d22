"""bertfeat.atomic: a failed write leaves the old file and no temporary; a successful one replaces it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import bertfeat.atomic as atomic
from bertfeat.atomic import AtomicFile, atomic_output, temp_path_for, write_atomic


def listing(d):
    return sorted(p.name for p in d.iterdir())


@pytest.fixture
def old(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old\n", encoding="utf-8")
    return path


def test_temp_name_is_beside_the_destination(tmp_path):
    tmp = temp_path_for(tmp_path / "out.npy")
    assert tmp.parent == tmp_path and tmp.name == f".out.npy.tmp-{os.getpid()}"
    assert AtomicFile(tmp_path / "out.npy").tmp == tmp


@pytest.mark.parametrize("data,expected", [("new ✓\n", "new ✓\n".encode()), (b"\x00\x01new", b"\x00\x01new")])
def test_write_atomic_replaces(old, data, expected):
    assert write_atomic(old, data) == old
    assert old.read_bytes() == expected
    assert listing(old.parent) == ["out.json"]


def test_write_atomic_creates_and_encodes(tmp_path):
    write_atomic(tmp_path / "a.txt", "é", encoding="latin-1")
    assert (tmp_path / "a.txt").read_bytes() == b"\xe9"
    assert listing(tmp_path) == ["a.txt"]


def test_atomic_output_replaces(old):
    with atomic_output(old) as tmp:
        assert tmp == temp_path_for(old) and tmp.parent == old.parent
        tmp.write_text("new\n", encoding="utf-8")
        assert old.read_text() == "old\n"  # nothing moves before the block ends
    assert old.read_text() == "new\n"
    assert listing(old.parent) == ["out.json"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_atomic_output_failure_keeps_the_old_file(old, exc):
    with pytest.raises(type(exc)):
        with atomic_output(old) as tmp:
            tmp.write_text("half a fi", encoding="utf-8")
            raise exc
    assert old.read_text() == "old\n"
    assert listing(old.parent) == ["out.json"]


@pytest.mark.parametrize("exc", [OSError("disk full"), KeyboardInterrupt()])
def test_failed_commit_keeps_the_old_file(old, monkeypatch, exc):
    def replace(src, dst):
        raise exc

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(type(exc)):
        write_atomic(old, "new\n")
    with pytest.raises(type(exc)):
        with atomic_output(old) as tmp:
            tmp.write_text("new\n", encoding="utf-8")
    assert old.read_text() == "old\n"
    assert listing(old.parent) == ["out.json"]


def test_failure_without_a_temp_file_is_fine(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_output(tmp_path / "never.txt"):
            raise RuntimeError("before anything was written")
    assert listing(tmp_path) == []


def test_atomic_file_commit_and_discard(old):
    f = AtomicFile(old)
    with open(f.tmp, "wb") as fh:  # a writer that lives across calls opens the temp path itself
        fh.write(b"streamed")
    assert old.read_text() == "old\n"
    assert f.commit() == old
    assert old.read_bytes() == b"streamed" and listing(old.parent) == ["out.json"]
    g = AtomicFile(old)
    g.tmp.write_bytes(b"abandoned")
    g.discard()
    g.discard()  # idempotent
    assert old.read_bytes() == b"streamed" and listing(old.parent) == ["out.json"]


def test_atomic_file_context_manager(old):
    with AtomicFile(old) as f:
        f.tmp.write_text("ctx\n")
    assert old.read_text() == "ctx\n"
    with pytest.raises(ValueError):
        with AtomicFile(old) as f:
            f.tmp.write_text("lost\n")
            raise ValueError
    assert old.read_text() == "ctx\n" and listing(old.parent) == ["out.json"]


def test_commit_fsyncs_the_file_then_the_directory(old, monkeypatch):
    calls = []
    real_replace = os.replace
    monkeypatch.setattr(atomic, "fsync_file", lambda p: calls.append(("file", p)))
    monkeypatch.setattr(atomic, "fsync_dir", lambda p: calls.append(("dir", p)))
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (calls.append(("replace", a, b)), real_replace(a, b)))
    write_atomic(old, "new\n")
    tmp = temp_path_for(old)
    assert calls == [("file", tmp), ("replace", tmp, old), ("dir", old.parent)]


def test_fsync_helpers_fsync_the_file_and_the_directory(tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(b"x")
    synced = []
    real = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    atomic.fsync_file(tmp_path / "f")
    atomic.fsync_dir(tmp_path)
    assert synced == [str(tmp_path / "f"), str(tmp_path)]  # each through its own descriptor, then closed
    atomic.fsync_dir(tmp_path / "missing")  # best effort: no error, nothing synced
    assert len(synced) == 2
    with pytest.raises(FileNotFoundError):
        atomic.fsync_file(tmp_path / "missing")  # a file's data must reach the disk: its absence is an error


def test_features_reexports_the_same_helpers():
    import bertfeat.features as features

    assert features.atomic_output is atomic_output and features.temp_path_for is temp_path_for


def test_together_moves_every_file_at_the_end_or_none(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    write_atomic(a, "old a")
    write_atomic(b, "old b")
    with atomic.together():
        write_atomic(a, "new a")
        assert a.read_text() == "old a"  # not yet: at the end of the block
        with atomic.together():  # an inner block joins the outer one
            with atomic_output(b) as tmp:
                tmp.write_text("new b")
        assert b.read_text() == "old b" and temp_path_for(b).exists()
        atomic.deferred(lambda: (tmp_path / "c.txt").write_text("after a and b"))
    assert (a.read_text(), b.read_text(), (tmp_path / "c.txt").read_text()) == ("new a", "new b", "after a and b")
    with pytest.raises(KeyboardInterrupt):
        with atomic.together():
            write_atomic(a, "newer a")
            raise KeyboardInterrupt
    assert a.read_text() == "new a" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "c.txt"]
    write_atomic(a, "outside")  # no block: at once
    assert a.read_text() == "outside"


def test_ctrl_c_during_the_moves_waits_until_every_file_is_in_place(tmp_path, monkeypatch):
    import signal

    files = [tmp_path / f"{i}.txt" for i in range(3)]
    for f in files:
        write_atomic(f, "old")
    real = os.replace
    calls = []

    def replace(src, dst):  # Ctrl-C arrives while the first file is moved
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        with atomic.together():
            for f in files:
                write_atomic(f, "new")
    assert [f.read_text() for f in files] == ["new", "new", "new"] and calls == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.txt", "1.txt", "2.txt"]  # no second names left
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_killed_writers_temporaries_are_removed_by_the_next_writer(tmp_path):
    """pca transform / pca fit / report killed while writing left .NAME.tmp-PID files that no later run removed (extract
    alone tidied its own); the next writer of the same file removes those of dead processes, not a live writer's."""
    import subprocess
    import sys

    from bertfeat.features import FeatureWriter

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    out = tmp_path / "r.parquet"
    stale = [tmp_path / f".r.parquet.tmp-{dead.strip()}", tmp_path / f".r.parquet.json.tmp-{dead.strip()}"]
    live = tmp_path / f".r.parquet.tmp-{os.getppid()}"  # a running process's: not ours to remove
    for p in (*stale, live):
        p.write_bytes(b"half a file")
    with FeatureWriter(out, dim=2) as w:
        w.write(None, __import__("numpy").zeros((1, 2), "float32"))
    assert not any(p.exists() for p in stale) and live.exists() and out.is_file()


def test_a_failing_move_puts_the_files_moved_before_it_back(tmp_path):
    """A group whose last step fails (the Dask engine's output directory move) left the new PCA model beside the old
    features; every file moved before the failure is put back, new ones removed."""
    old_model, old_features = tmp_path / "m.npz", tmp_path / "f.parquet"
    write_atomic(old_model, "old model")
    write_atomic(old_features, "old features")

    def fail():
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        with atomic.together():
            write_atomic(old_model, "new model")
            write_atomic(tmp_path / "report.json", "new report")  # no old file: removed again
            atomic.deferred(fail)
    assert old_model.read_text() == "old model" and old_features.read_text() == "old features"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.parquet", "m.npz"]


def test_a_move_that_fails_itself_leaves_no_second_name_and_a_dangling_link_is_put_back(tmp_path, monkeypatch):
    """The move that fails (a full disk, EIO) had its old file's second name made (.NAME.old-PID, a hard link): putting
    it back renamed it onto its own first name, which POSIX does as nothing, so the hidden link stayed beside the
    output. A destination that is a dangling symbolic link (a user's) counted as absent and was deleted."""
    link, features = tmp_path / "m.npz", tmp_path / "f.parquet"
    link.symlink_to(tmp_path / "gone.npz")
    write_atomic(features, "old features")
    real = os.replace

    def replace(src, dst):
        if Path(dst) == features and ".tmp-" in Path(src).name:  # the new file's move; putting the old back works
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError):
        with atomic.together():
            write_atomic(link, "new model")
            write_atomic(features, "new features")
    assert features.read_text() == "old features" and features.stat().st_nlink == 1
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "gone.npz")
    assert listing(tmp_path) == ["f.parquet", "m.npz"]


def test_a_removal_is_put_back_when_a_later_step_fails_and_made_when_none_does(tmp_path):
    """removal(path): an earlier run's file this run does not write again goes with the group's moves; a later step
    that fails (the Dask engine's directory move) puts it back (a deferred unlink had deleted it for good). A
    directory at the path is left alone."""
    stale, kept = tmp_path / "m.npz", tmp_path / "f.parquet"
    write_atomic(stale, "old model")
    write_atomic(kept, "old features")
    (tmp_path / "r.md").mkdir()

    def fail():
        raise OSError(16, "Device or resource busy")

    with pytest.raises(OSError):
        with atomic.together():
            write_atomic(kept, "new features")
            atomic.removal(stale)
            atomic.removal(tmp_path / "missing.json")
            atomic.deferred(fail)
    assert (stale.read_text(), kept.read_text()) == ("old model", "old features")
    assert listing(tmp_path) == ["f.parquet", "m.npz", "r.md"]
    with atomic.together():
        write_atomic(kept, "new features")
        atomic.removal(stale)
        atomic.removal(tmp_path / "r.md")
    assert kept.read_text() == "new features" and listing(tmp_path) == ["f.parquet", "r.md"]
    write_atomic(stale, "x")
    atomic.removal(stale)  # outside a block: at once
    assert not stale.exists()


def test_an_interrupt_at_the_end_of_the_block_leaves_no_group_behind(tmp_path, monkeypatch):
    """A Ctrl-C raised as the block ends (before the group was reset) left the thread's later commits deferred into
    a dead group: never made."""
    calls = []
    real = atomic.CommitGroup.finish

    def finish(self):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.CommitGroup, "finish", finish)
    with pytest.raises(KeyboardInterrupt):
        with atomic.together():
            write_atomic(tmp_path / "a.txt", "a")
    monkeypatch.setattr(atomic.CommitGroup, "finish", real)
    write_atomic(tmp_path / "later.txt", "later")  # made at once
    assert (tmp_path / "later.txt").read_text() == "later" and calls == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["later.txt"]


def _tree(d, n: int, tag: str):
    d.mkdir()
    for i in range(n):
        (d / f"part-{i:02d}.parquet").write_text(f"{tag} {i}\n")
    return d


def _contents(d):
    return {p.name: p.read_text() for p in d.iterdir()}


@pytest.mark.parametrize("swap", [True, False], ids=["renameat2", "rename-aside"])
def test_a_directory_killed_while_the_old_one_is_deleted_is_the_new_one_whole(tmp_path, monkeypatch, swap):
    """replace_directory (the Dask engine's OUTPUT/ under --overwrite): killed while the old directory is being deleted,
    the destination already holds the new one whole (before: the old one was deleted in place, then the new moved in,
    so a SIGKILL left a directory with a part of the old parts and its provenance: it looked complete)."""
    if not swap:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    elif not atomic._exchange(_tree(tmp_path / "a", 1, "a"), _tree(tmp_path / "b", 1, "b")):
        pytest.skip("no renameat2 RENAME_EXCHANGE here")
    out, new = _tree(tmp_path / "out", 6, "old"), _tree(tmp_path / "out.partial", 4, "new")
    (out / "_bertfeat.json").write_text("{}")  # the old run's provenance: what remove_stale_temps looks for
    expected = _contents(new)
    real_rmtree = atomic.shutil.rmtree

    def killed_halfway(path, *a, **k):  # deletes some of the files, then the process 'dies'
        for p in sorted(Path(path).iterdir())[-3:]:  # parts, not the marker
            p.unlink()
        raise SystemExit("killed")

    monkeypatch.setattr(atomic.shutil, "rmtree", killed_halfway)
    with pytest.raises(SystemExit):
        atomic.replace_directory(new, out)
    monkeypatch.setattr(atomic.shutil, "rmtree", real_rmtree)
    assert _contents(out) == expected and not new.exists()
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".out.old-")]
    assert len(aside) == 1 and len(list(aside[0].iterdir())) == 4  # the old one, half deleted, hidden
    dead = aside[0].with_name(".out.old-999999999")
    aside[0].rename(dead)
    atomic.remove_stale_temps(out)  # without the marker directories are left alone
    assert dead.is_dir()
    atomic.remove_stale_temps(out, "_bertfeat.json")  # the next Dask run removes a dead run's
    assert not dead.exists() and _contents(out) == expected
    atomic.replace_directory(_tree(tmp_path / "again", 2, "again"), out)
    assert sorted(_contents(out).values()) == ["again 0\n", "again 1\n"]
    assert sorted(p.name for p in tmp_path.iterdir() if "out" in p.name) == ["out"]


def test_replace_directory_over_nothing_or_a_file(tmp_path):
    new = _tree(tmp_path / "n1", 2, "n1")
    atomic.replace_directory(new, tmp_path / "out")
    assert _contents(tmp_path / "out") == {"part-00.parquet": "n1 0\n", "part-01.parquet": "n1 1\n"}
    (tmp_path / "f").write_text("a file")
    atomic.replace_directory(_tree(tmp_path / "n2", 1, "n2"), tmp_path / "f")
    assert _contents(tmp_path / "f") == {"part-00.parquet": "n2 0\n"}


@pytest.mark.parametrize("swap", [True, False])
def test_replace_directory_over_a_file_keeps_the_file_until_the_directory_is_in(tmp_path, monkeypatch, swap):
    """A Dask run's output directory over a local run's output file (--overwrite): the file was deleted first, so a
    move that then failed (or a kill in between) lost it. Now it is swapped out in one step (Linux), or set aside and
    put back when the move fails; either way nothing is left beside it."""
    import errno

    if swap:
        if not atomic._exchange(_tree(tmp_path / "a", 1, "a"), _tree(tmp_path / "b", 1, "b")):
            pytest.skip("renameat2 RENAME_EXCHANGE is not available here (not Linux, or a file system without it)")
        for d in ("a", "b"):
            shutil.rmtree(tmp_path / d)
    else:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    dest = tmp_path / "out.parquet"
    dest.write_text("a local run's features")
    new = _tree(tmp_path / "new", 1, "new")
    real = os.replace

    def failing(a, b):
        if Path(a) == new:
            raise OSError(errno.EIO, "Input/output error", str(a))
        return real(a, b)

    if not swap:
        monkeypatch.setattr(os, "replace", failing)
        with pytest.raises(OSError, match="Input/output error"):
            atomic.replace_directory(new, dest)
        monkeypatch.setattr(os, "replace", real)
        assert dest.read_text() == "a local run's features"
        assert listing(tmp_path) == ["new", "out.parquet"]
    atomic.replace_directory(new, dest)
    assert _contents(dest) == {"part-00.parquet": "new 0\n"} and listing(tmp_path) == ["out.parquet"]


def test_remove_stale_temps_leaves_a_users_directory(tmp_path):
    """A user's directory named like a temporary (.feat.parquet.old-2024: a date, not a dead writer's pid) is never
    deleted: a set-aside output directory is removed only when it holds the marker the caller names."""
    for name in (".feat.parquet.old-2024", ".feat.parquet.tmp-2024"):
        (tmp_path / name / "keep").mkdir(parents=True)
        (tmp_path / name / "keep" / "data.txt").write_text("precious")
    (tmp_path / ".feat.parquet.old-2025").mkdir()
    (tmp_path / ".feat.parquet.old-2025" / "_bertfeat.json").write_text("{}")
    (tmp_path / ".feat.parquet.tmp-2026").write_text("a dead writer's temporary")
    atomic.remove_stale_temps(tmp_path / "feat.parquet")
    assert listing(tmp_path) == [".feat.parquet.old-2024", ".feat.parquet.old-2025", ".feat.parquet.tmp-2024"]
    atomic.remove_stale_temps(tmp_path / "feat.parquet", "_bertfeat.json")
    assert listing(tmp_path) == [".feat.parquet.old-2024", ".feat.parquet.tmp-2024"]
    assert (tmp_path / ".feat.parquet.old-2024" / "keep" / "data.txt").read_text() == "precious"


def test_replace_directory_falls_back_when_the_swap_fails(tmp_path, monkeypatch):
    """renameat2 refused (EPERM from a sandbox, EXDEV, a file system without it): the two-step rename, whose error
    names its own path when there is one."""
    out = _tree(tmp_path / "out", 2, "old")
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    with pytest.raises(FileNotFoundError) as e:
        atomic.replace_directory(tmp_path / "missing", out)
    assert e.value.filename == str(tmp_path / "missing")
    assert listing(tmp_path) == ["out"] and _contents(out) == {"part-00.parquet": "old 0\n", "part-01.parquet": "old 1\n"}


@pytest.mark.parametrize("how", ["atomic_output", "write_atomic", "commit"])
def test_a_write_error_naming_no_file_names_the_file_written(tmp_path, monkeypatch, how):
    """Found by the environment audit: a write or close that fails (a full disk, ulimit -f) raises an OSError naming no
    file, so the line named whatever its caller guessed (extract's output for its PCA report). It gets the temporary's
    name, which errors.os_error shows as the file it stands for."""
    import errno

    from bertfeat.errors import os_error

    dest = tmp_path / "r.json"
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError) as caught:
        if how == "atomic_output":
            with atomic_output(dest):
                raise full
        elif how == "write_atomic":
            monkeypatch.setattr(Path, "write_text", lambda *a, **k: (_ for _ in ()).throw(full))
            write_atomic(dest, "x")
        else:
            monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(full))
            with AtomicFile(dest) as f:
                f.tmp.write_text("x")
    assert os_error(caught.value, "elsewhere").render() == f"{dest}: no space left on the device - free disk space or " \
                                                           "write elsewhere (another output, or redirect the output), then rerun"
    assert list(tmp_path.iterdir()) == []


def test_a_read_error_in_the_block_is_not_put_on_the_file_written(tmp_path):
    """Found by the review of the environment audit: every OSError naming no file was put on the temporary, so a read
    that failed inside the block (EIO copying a source) was shown as the output's error. Only a write's errors (a full
    disk, a quota, ulimit -f) are the file's."""
    import errno

    from bertfeat.errors import os_error

    with pytest.raises(OSError) as caught:
        with atomic_output(tmp_path / "r.json"):
            raise OSError(errno.EIO, "Input/output error")
    assert caught.value.filename is None
    assert os_error(caught.value, "the source").render() == ("the source: input/output error - the disk or the file "
                                                            "system failed; check the device, then rerun")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("limit,said", [
    (None, "file too large for the file system - write to another file system with output"),
    (153_600, "file too large: this process may not write a file past 153,600 bytes (its file-size limit, ulimit -f) - "
              "raise the limit (ulimit -f unlimited), then rerun"),
    (8 << 30, "file too large for the file system, or past this process's file-size limit of 8,589,934,592 bytes "
              "(ulimit -f) - write to another file system with output, or raise the limit (ulimit -f unlimited), then "
              "rerun"),
])
def test_efbig_blames_the_file_size_limit_only_below_any_file_systems_largest_file(monkeypatch, limit, said):
    """Found by the review: with any ulimit -f set, EFBIG was blamed on it, though a limit above FAT32's 4 GiB leaves
    the file system's own largest file as the likelier cause; both are said there."""
    from bertfeat import errors

    monkeypatch.setattr(errors, "file_size_limit", lambda: limit)
    assert errors.BertfeatError(*errors.file_too_large()).render() == said  # (the CLI shows -o for output)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_a_replaced_file_keeps_its_permission_bits_and_a_new_one_gets_the_umasks(tmp_path, mode):
    """An atomic write is a new file renamed over the old one, so it got ``0666 & ~umask``: a ``chmod 600`` output
    became 0644 (readable by every user) after --overwrite; ``open(path, "w")`` keeps the mode, and so does this."""
    old_umask = os.umask(0o022)
    try:
        kept, grouped, fresh = tmp_path / "kept.json", tmp_path / "grouped.json", tmp_path / "fresh.json"
        for p in (kept, grouped):
            p.write_text("old\n", encoding="utf-8")
            p.chmod(mode)
        write_atomic(kept, "new\n")
        with atomic.together():
            write_atomic(grouped, "new\n")
            write_atomic(fresh, "new\n")
    finally:
        os.umask(old_umask)
    assert [p.read_text(encoding="utf-8") for p in (kept, grouped, fresh)] == ["new\n"] * 3
    assert [p.stat().st_mode & 0o777 for p in (kept, grouped, fresh)] == [mode, mode, 0o644]


def test_a_replaced_directory_keeps_its_mode_and_a_replaced_link_gets_a_files(tmp_path):
    """The Dask engine's output folder is replaced whole: a ``chmod 700`` folder stays 700. A symbolic link replaced
    by the new file does not lend it its target's mode (the target is not the file written)."""
    old_umask = os.umask(0o022)
    try:
        dest, new = tmp_path / "out", tmp_path / "new"
        dest.mkdir(mode=0o700)
        new.mkdir()
        atomic.replace_directory(new, dest)
        target, link = tmp_path / "target.json", tmp_path / "link.json"
        target.write_text("theirs\n", encoding="utf-8")
        target.chmod(0o600)
        link.symlink_to(target)
        write_atomic(link, "new\n")
    finally:
        os.umask(old_umask)
    assert dest.stat().st_mode & 0o777 == 0o700
    assert not link.is_symlink() and link.stat().st_mode & 0o777 == 0o644
    assert (target.read_text(encoding="utf-8"), target.stat().st_mode & 0o777) == ("theirs\n", 0o600)
