"""Outputs are regular files (or absent), whatever the flags; a name the file system cannot hold is refused before
anything is written, with advice that helps (not "rerun with --resume", which would fail the same way)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import bertfeat
from bertfeat.errors import BertfeatError, OutputError
from extract_util import run, tiny_model, write_csv


@pytest.fixture
def src(tmp_path):
    return write_csv(tmp_path / "in.csv", ["text"], [[f"sentence {i}"] for i in range(20)])


@pytest.mark.parametrize("flags", [[], ["--overwrite"]])
def test_a_fifo_or_device_output_is_refused_whatever_the_flags(tmp_path, src, capsys, flags):
    fifo = tmp_path / "o.parquet"
    os.mkfifo(fifo)
    rc, _, err = run(capsys, "extract", src, "-o", fifo, "--model", tiny_model(), *flags)
    assert (rc, err) == (1, f"Error: the output {fifo} is a named pipe (FIFO), not a regular file - bertfeat writes regular "
                            "files (atomically: a temporary file, then a rename); pass -o with a file name\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "o.parquet"] and not fifo.is_file()
    rc, _, err = run(capsys, "extract", src, "-o", "/dev/null", "--model", tiny_model(), "--format", "parquet", *flags)
    assert (rc, err) == (1, "Error: the output /dev/null is a character device, not a regular file - bertfeat writes "
                            "regular files (atomically: a temporary file, then a rename); pass -o with a file name\n")


@pytest.mark.parametrize("fmt", ["csv", "npy"])
def test_a_device_output_with_a_format_is_refused_as_a_device(tmp_path, src, capsys, fmt):
    """-o /dev/stdout --format csv said "has no .csv extension - name the output /dev/stdout.csv" (a file in /dev), in
    extract and pca transform: the device is what is wrong, said first (found by a helper's review)."""
    rc, _, err = run(capsys, "extract", src, "-o", "/dev/null", "--model", tiny_model(), "--format", fmt)
    assert (rc, err) == (1, "Error: the output /dev/null is a character device, not a regular file - bertfeat writes "
                            "regular files (atomically: a temporary file, then a rename); pass -o with a file name\n")
    feats = tmp_path / "f.parquet"
    assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "--pca", 2)[0] == 0
    rc, _, err = run(capsys, "pca", "transform", feats, "--pca-model", tmp_path / "f.pca.npz", "-o", "/dev/stdout",
                     "--format", fmt)
    assert (rc, err) == (1, "Error: the output /dev/stdout is standard output (file descriptor 1), not a file - bertfeat "
                            "writes regular files (atomically: a temporary file, then a rename, which would replace "
                            "/dev/stdout itself); pass -o with a file name\n")


def test_a_pca_output_that_is_a_fifo_is_refused(tmp_path, src, capsys):
    feats = tmp_path / "f.parquet"
    assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model())[0] == 0
    fifo = tmp_path / "m.npz"
    os.mkfifo(fifo)
    rc, _, err = run(capsys, "pca", "fit", feats, "-n", 2, "-o", fifo, "--overwrite")
    assert rc == 1 and err.startswith(f"Error: the output {fifo} is a named pipe (FIFO), not a regular file - ")


@pytest.mark.parametrize("target", ["mine.parquet", "gone.parquet"])
def test_an_output_that_is_a_symbolic_link_says_overwrite_replaces_the_link(tmp_path, src, capsys, target):
    """-o a link to a user's file (or a dangling one): refused as "already exists" alone, and --overwrite then replaced
    the link with a regular file, the file it pointed to left stale (or never made) without a word; now the refusal
    says so. The file pointed to is never written."""
    mine = tmp_path / "mine.parquet"
    mine.write_bytes(b"a user's file")
    link = tmp_path / "o.parquet"
    link.symlink_to(target)
    gone = "" if target == "mine.parquet" else ", which does not exist"
    rc, _, err = run(capsys, "extract", src, "-o", link, "--model", tiny_model())
    assert (rc, err) == (1, f"Error: {link} already exists: a symbolic link to {target}{gone} - pass --overwrite to "
                            "replace the link itself with the new file (the file it points to is not written), or -o "
                            "with another name\n")
    assert link.is_symlink() and mine.read_bytes() == b"a user's file"
    assert run(capsys, "extract", src, "-o", link, "--model", tiny_model(), "--overwrite")[0] == 0
    assert not link.is_symlink() and link.stat().st_size > 0 and mine.read_bytes() == b"a user's file"
    assert not (tmp_path / "gone.parquet").exists()


def test_an_output_name_too_long_is_refused_before_anything_is_written(tmp_path, src, capsys):
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / ("x" * 240 + ".parquet")
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--pca", 2)
    assert rc == 1 and err.count("\n") == 1, err
    # the output name fits; its PCA report's (x*240 + .pca.report.json) does not, and is named
    assert err.startswith(f"Error: the report file name '{'x' * 240}.pca.report.json' is too long for its file system (")
    assert err.endswith("the limit is 255) - choose an output name at least 1 byte shorter with -o\n")
    assert "--resume" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _named(n: int, ext: str) -> str:
    return "x" * (n - len(ext)) + ext


@pytest.mark.parametrize("n", range(249, 256))
def test_a_parquet_output_name_of_249_to_255_bytes_is_written(tmp_path, capsys, n):
    """The output name fits, but the names bertfeat made beside it did not (.NAME.tmp-PID, NAME.partial, .NAME.lock,
    NAME.rejects.csv): every such name was refused up front ('too long for its file system ... with its temporary
    suffix'). Those names are shortened now (a digest of the whole name, the same on every run); the rejects file's
    is named in the summary."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["a b"], [""], ["c d"]])
    out = tmp_path / _named(n, ".parquet")
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--on-bad-row", "skip")
    assert rc == 0, err
    rejects = next(p for p in tmp_path.iterdir() if p.name.endswith(".rejects.csv"))
    assert len(rejects.name.encode()) <= 255 and f"rejects         {rejects}\n" in err  # the summary names it whole
    assert "empty text" in rejects.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.csv", out.name, rejects.name])
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 2


def test_an_output_name_of_255_bytes_is_written_again_with_overwrite(tmp_path, capsys):
    """A rerun with --overwrite looks for the PCA files an earlier --pca run left (OUTPUT-stem.pca.npz); for a name
    without an extension that is 8 bytes longer than the output, and the look failed ('file name too long'; on the
    Dask engine after the whole run had been encoded, leaving its partial folder behind)."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["a b"], ["c d"]])
    out = tmp_path / ("x" * 255)
    for flags in ([], ["--overwrite"]):
        rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q", *flags)
        assert (rc, err) == (0, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.csv", out.name])


@pytest.mark.parametrize("fmt", ["parquet", "npy", "csv"])
def test_overwrite_keeps_a_private_outputs_permissions(tmp_path, src, capsys, fmt):
    """A user who made the features (and the PCA model, the ids file) readable only by themselves with chmod 600 found
    them 0644 after --overwrite: the new files were renamed over the old ones with a new file's mode."""
    out = tmp_path / f"o.{fmt}"
    args = ["extract", src, "-o", out, "--model", tiny_model(), "--pca", "2", "-q"]
    assert run(capsys, *args)[0] == 0
    mine = sorted(p for p in tmp_path.iterdir() if p.name.startswith("o."))
    assert len(mine) >= 3  # the features, the PCA model, its report (and a .npy's ids and provenance)
    for p in mine:
        p.chmod(0o600)
    assert run(capsys, *args, "--overwrite")[:2] == (0, "")
    assert sorted(p for p in tmp_path.iterdir() if p.name.startswith("o.")) == mine
    assert {p.name: p.stat().st_mode & 0o777 for p in mine} == {p.name: 0o600 for p in mine}


@pytest.mark.parametrize("engine", ["local", "dask"])
@pytest.mark.parametrize("n", [256, 262, 300])
def test_an_output_name_too_long_itself_says_how_much_to_cut(tmp_path, capsys, engine, n):
    """The output's own name past 255 bytes met a Path.is_dir probe first (ENAMETOOLONG): 'file name too long - choose
    a shorter file name', without the bytes to cut docs/errors.md quotes (found by a docs review)."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["a b"], ["c d"]])
    out = tmp_path / _named(n, ".parquet")
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--engine", engine)
    assert (rc, err) == (1, f"Error: the output name '{out.name}' is too long for its file system ({n} bytes; the "
                            f"limit is 255) - choose an output name at least {n - 255} byte{'s' * (n != 256)} shorter "
                            "with -o\n")
    assert [p.name for p in tmp_path.iterdir()] == ["in.csv"]


@pytest.mark.parametrize("fmt", ["npy", "csv"])
@pytest.mark.parametrize("n", range(249, 256))
def test_a_npy_or_csv_output_name_whose_side_file_cannot_fit_is_refused_saying_how_much_to_cut(tmp_path, capsys, fmt, n):
    """A .npy / .csv output's provenance (NAME.json, +5 bytes) and a .npy's ids file (STEM.ids.csv, +4) are files a
    user opens by name: they are not shortened; an output name they cannot follow is refused before anything is read,
    saying how many bytes to cut (each longer name failed alike, with no number)."""
    src = write_csv(tmp_path / "in.csv", ["text"], [["a b"], ["c d"]])
    out = tmp_path / _named(n, f".{fmt}")
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")
    if n <= 250:
        assert rc == 0, err
        assert len([p for p in tmp_path.iterdir()]) == (4 if fmt == "npy" else 3)
        return
    cut = n - 250
    assert (rc, err) == (1, f"Error: the provenance file name '{out.name}.json' is too long for its file system "
                            f"({n + 5} bytes; the limit is 255) - choose an output name at least {cut} "
                            f"byte{'s' * (cut != 1)} shorter with -o\n")
    assert [p.name for p in tmp_path.iterdir()] == ["in.csv"]


def test_the_names_bertfeat_makes_for_its_own_use_fit_and_stay_the_same():
    """A resume finds the partial run's folder and a later run the temporaries of a killed one: the short form of a
    long name is the same every time, apart for two names, and within 255 bytes whatever the name's letters."""
    from pathlib import Path

    from bertfeat.atomic import fitted_name, temp_path_for
    from bertfeat.run.plan import OutputLayout

    for stem in ("x" * 247, "é" * 123 + "x"):  # 247 bytes: a 2-byte letter is never cut in half
        out = Path("/d") / (stem + ".parquet")
        a, b = OutputLayout(out, "parquet"), OutputLayout(Path("/d") / (stem[:-1] + "y.parquet"), "parquet")
        for name in (a.partial.name, a.rejects.name, temp_path_for(a.partial).name, temp_path_for(out).name):
            assert len(name.encode()) <= 255, name
        assert a.partial == OutputLayout(out, "parquet").partial and a.partial != b.partial
        assert a.partial.name.endswith(".partial") and a.rejects.name.endswith(".rejects.csv")
        assert a.partial.name.startswith(stem[:100])
    assert fitted_name("short.parquet", 18) == "short.parquet"


def test_stale_temporaries_of_a_long_name_are_removed(tmp_path):
    """remove_stale_temps looks for the shortened form too: a killed writer's temporary of a long name is cleaned."""
    from bertfeat.atomic import remove_stale_temps, temp_path_for

    out = tmp_path / _named(255, ".parquet")
    stale = temp_path_for(out).with_name(temp_path_for(out).name.rsplit("-", 1)[0] + "-999999999")
    stale.write_text("a killed writer's")
    remove_stale_temps(out)
    assert not stale.exists()


@pytest.mark.parametrize("n", [249, 255])
def test_the_other_commands_write_a_name_of_249_to_255_bytes_or_refuse_it_up_front(tmp_path, capsys, n):
    """attention -o / --save-npy, pca transform -o and extract --summary-json failed on a name that fits ('file name
    too long', the temporary's; --summary-json after the whole run); pca fit, report and sweep, whose report files
    are named after -o, said 'file name too long' of a name the user never gave. Now the first four write it, the
    others refuse before any work, naming the file and the bytes to cut."""
    src = write_csv(tmp_path / "in.csv", ["text"], [[f"s {i} word"] for i in range(30)])
    feats, model = tmp_path / "f.parquet", tmp_path / "p.npz"
    assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "-q")[0] == 0
    assert run(capsys, "pca", "fit", feats, "-n", 2, "-o", model, "-q")[0] == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    written = {"attention": (["attention", "hi", "-m", tiny_model(), "-q", "-o"], ".png"),
               "save-npy": (["attention", "hi", "-m", tiny_model(), "-q", "-o", tmp_path / "a.png", "--save-npy"], ".npy"),
               "transform": (["pca", "transform", feats, "--pca-model", model, "-q", "-o"], ".parquet"),
               "summary": (["extract", src, "-m", tiny_model(), "-q", "-o", tmp_path / "g.parquet", "--summary-json"],
                           ".json")}
    for what, (command, ext) in written.items():
        path = tmp_path / _named(n, ext)
        rc, _, err = run(capsys, *command, path)
        assert (rc, err) == (0, ""), what
        assert path.is_file() and path.stat().st_size > 0, what
    refused = {"pca fit": (["pca", "fit", feats, "-n", 2, "-q", "-o"], ".npz", ".report.json", 12),
               "report": (["report", model, "-q", "-o"], "", ".report.json", 12),
               "sweep": (["sweep", src, "-m", tiny_model(), "-q", "-o"], "", ".json", 5)}
    for what, (command, ext, longest, more) in refused.items():
        path = tmp_path / _named(n, ext)
        rc, _, err = run(capsys, *command, path)
        named = (path.name[:-len(ext)] if ext else path.name) + longest
        cut = len(named) - 255
        if cut <= 0:
            assert rc == 0, (what, err)
            continue
        label = "sweep report" if what == "sweep" else "report file"
        assert (rc, err) == (1, f"Error: the {label} name '{named}' is too long for its file system ({len(named)} bytes; "
                                f"the limit is 255) - choose an output name at least {cut} byte{'s' * (cut != 1)} "
                                "shorter with -o\n"), what
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in before and not p.name.startswith(("a.png", "g.parquet"))
                  and not p.name.endswith((".png", ".npy", ".json")) and "x" * 200 not in p.name) == []


def test_an_output_under_a_file_says_the_file_is_in_the_way(tmp_path, src, capsys):
    """-o in.csv/x.parquet: the directory it needs is a file (was "in.csv: File exists - check the path, its
    permissions and the free disk space"); the file is left as it was."""
    before = src.read_bytes()
    rc, _, err = run(capsys, "extract", src, "-o", src / "x.parquet", "--model", tiny_model())
    assert (rc, err) == (1, f"Error: {src}: already exists: a file where the path needs a directory - check the path: "
                            "every part before the file name must be a directory (or one that does not exist yet)\n")
    assert src.read_bytes() == before


def test_nested_columns_need_a_parquet_output(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a b", "c d"], "tags": [[1, 2], [3]]}), tmp_path / "n.parquet")
    rc, _, err = run(capsys, "extract", tmp_path / "n.parquet", "-o", tmp_path / "n.csv", "--keep", "tags", "--model", tiny_model())
    assert (rc, err) == (1, "Error: --keep column 'tags' holds list<element: int64> values, which a CSV output cannot hold (a CSV "
                            "cell holds one value, not a list, struct or map) - "
                            "write a Parquet output (-o NAME.parquet), or leave it out of --keep\n")
    rc, _, err = run(capsys, "extract", tmp_path / "n.parquet", "-o", tmp_path / "n.npy", "--id-column", "tags", "--model", tiny_model())
    assert (rc, err) == (1, "Error: --id-column 'tags' holds list<element: int64> values, which a .npy output cannot hold "
                            "(its ids and other columns go to its ids file, a CSV: a CSV cell holds one value, not a list, "
                            "struct or map) - write a Parquet output (-o NAME.parquet), or choose another --id-column\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.parquet"]


@pytest.mark.parametrize("fmt, name", [("npy", "feats"), ("csv", "feats.out"), ("npy", "feats.v2")])
def test_npy_or_csv_output_needs_its_extension(tmp_path, src, capsys, fmt, name):
    """--format npy -o feats wrote a file every reader then took for Parquet (pca fit: "not a readable Parquet file")."""
    out = tmp_path / name
    rc, _, err = run(capsys, "extract", src, "-o", out, "--format", fmt, "--model", tiny_model())
    assert (rc, err) == (1, f"Error: the output {out} has no .{fmt} extension, so it would be read back as Parquet - "
                            f"name the output {out}.{fmt}\n")
    assert not out.exists()
    rc, _, err = run(capsys, "extract", src, "-o", f"{out}.{fmt}", "--format", fmt, "--model", tiny_model())
    assert rc == 0, err
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "plain", "--format", "parquet", "--model", tiny_model())
    assert rc == 0, err  # Parquet is what a reader takes a file without an extension for


# --------------------------------------------------------------------------- outputs that name a directory
# Issue 44 (2): -o . said "the output '' is empty", -o dir/ wrote a file named dir (pathlib drops the slash). An output
# file that names a directory is refused as one, whatever the flags, with a file name inside it as the example.
class TestOutputsThatNameADirectory:
    @pytest.fixture
    def work(self, tmp_path, monkeypatch):
        d = tmp_path / "work"
        d.mkdir()
        (d / "existing").mkdir()
        monkeypatch.chdir(d)
        return d

    @pytest.mark.parametrize("flags", [[], ["--overwrite"]])
    @pytest.mark.parametrize("fmt", ["parquet", "npy"])
    @pytest.mark.parametrize("given, why, example", [
        (".", "is the current directory", "./features.{fmt}"),
        ("..", "is the parent directory", "../features.{fmt}"),
        ("new/", "ends in /, so it names a directory", "new/features.{fmt}"),
        ("existing/", "ends in /, so it names a directory", "existing/features.{fmt}"),
        ("existing", "is a directory", "existing/features.{fmt}"),
        ("existing/..", "is the parent directory", "existing/../features.{fmt}"),
    ])
    def test_extract(self, work, src, capsys, flags, fmt, given, why, example):
        before = sorted(str(p) for p in work.parent.rglob("*"))
        rc, out, err = run(capsys, "extract", src, "-o", given, "--format", fmt, "--model", tiny_model(), *flags)
        assert (rc, out, err) == (1, "", f"Error: the output {given} {why} - pass -o with a file name, e.g. "
                                         f"-o {example.format(fmt=fmt)}\n")
        assert sorted(str(p) for p in work.parent.rglob("*")) == before

    def test_an_empty_output_is_still_empty(self, work, src, capsys):
        rc, _, err = run(capsys, "extract", src, "-o", "", "--model", tiny_model())
        assert (rc, err) == (1, "Error: the output '' is empty - pass -o with a file name, e.g. -o features.parquet\n")

    @pytest.mark.parametrize("command, what, example", [
        (["pca", "fit", "F", "-n", "2", "-o"], "PCA model", "pca100.npz"),
        (["pca", "transform", "F", "--pca-model", "M", "-o"], "output", "reduced.parquet"),
        (["report", "M", "-o"], "report prefix", "pca100"),
        (["sweep", "S", "--set", "mean", "-o"], "report prefix", "sweep"),
        (["attention", "hi", "-o"], "output", "attention.png"),
    ])
    def test_every_command(self, work, src, capsys, command, what, example):
        feats, model = work.parent / "f.parquet", work.parent / "m.npz"
        assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "-q")[0] == 0
        assert run(capsys, "pca", "fit", feats, "-n", "2", "-o", model, "-q")[0] == 0
        command = [{"F": feats, "M": model, "S": src}.get(a, a) for a in command]
        before = sorted(str(p) for p in work.parent.rglob("*"))
        for given, why in ((".", "is the current directory"), ("new/", "ends in /, so it names a directory")):
            rc, out, err = run(capsys, *command, given, "--model" if command[0] in ("sweep", "attention") else "-q",
                               *([tiny_model()] if command[0] in ("sweep", "attention") else []))
            assert (rc, out, err) == (1, "", f"Error: the {what} {given} {why} - pass -o with a file name, e.g. "
                                             f"-o {os.path.join(given, example)}\n")
        assert sorted(str(p) for p in work.parent.rglob("*")) == before

    @pytest.mark.parametrize("given, why", [(".", "is the current directory"), ("./", "ends in /, so it names a directory"),
                                            ("existing/..", "is the parent directory")])
    def test_a_folder_of_parquet_files_named_without_a_name(self, work, src, capsys, given, why):
        """Found by the fourth run audit: in a folder holding Parquet files (a user's data folder), -o . and -o ./
        failed with "unexpected ValueError: PosixPath('.') has an empty name - this is a bug", and -o existing/.. gave
        the example -o existing/...features.parquet (a dataset's folder is given a file beside it, by its name: these
        have none)."""
        feats, model = work / "f.parquet", work / "m.npz"
        assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "-q")[0] == 0
        assert run(capsys, "pca", "fit", feats, "-n", "2", "-o", model, "-q")[0] == 0
        before = sorted(str(p) for p in work.parent.rglob("*"))
        for command, what, example in (
                (["extract", src, "--model", tiny_model(), "-o"], "output", "features.parquet"),
                (["pca", "fit", feats, "-n", "2", "-o"], "PCA model", "pca100.npz"),
                (["pca", "transform", feats, "--pca-model", model, "-o"], "output", "reduced.parquet"),
                (["report", model, "-q", "-o"], "report prefix", "pca100")):
            rc, out, err = run(capsys, *command, given)
            assert (rc, out, err) == (1, "", f"Error: the {what} {given} {why} - pass -o with a file name, e.g. "
                                             f"-o {os.path.join(given, example)}\n")
        assert sorted(str(p) for p in work.parent.rglob("*")) == before

    @pytest.mark.parametrize("part", ["x.pq", "x.PARQUET"])
    def test_a_folder_of_pq_files_gets_a_file_beside_it(self, work, src, capsys, part):
        """A folder holding .pq / .PARQUET files is read as a dataset as one of .parquet files is: -o naming it was
        given the example -o existing/features.parquet inside it, which is then read as one of its parts."""
        (work / "existing" / part).write_bytes(b"")
        rc, out, err = run(capsys, "extract", src, "-o", "existing", "--model", tiny_model())
        assert (rc, out, err) == (1, "", "Error: the output existing is a directory - pass -o with a file name, e.g. "
                                         "-o existing.features.parquet\n")

    def test_a_report_prefix_may_be_an_existing_directory_s_name(self, work, src, capsys):
        """PREFIX.report.json beside the folder: a prefix is no file, so only a trailing / (hidden files) is refused."""
        feats, model = work / "f.parquet", work / "m.npz"
        assert run(capsys, "extract", src, "-o", feats, "--model", tiny_model(), "-q")[0] == 0
        assert run(capsys, "pca", "fit", feats, "-n", "2", "-o", model, "-q")[0] == 0
        rc, _, err = run(capsys, "report", model, "-o", "existing", "-q")
        assert (rc, err) == (0, "") and (work / "existing.report.json").is_file()

    def test_the_dask_engine_output_may_end_in_a_slash(self, work, src):
        """Its output is a directory of parts: out/ names it (the plan only: no cluster starts)."""
        pytest.importorskip("distributed")
        from bertfeat.run.options import ExtractOptions
        from bertfeat.run.plan import make_plan

        plan = make_plan(ExtractOptions(input=str(src), output="out/", model=str(tiny_model()), engine="dask"))
        assert plan.layout.features == work / "out"
        for given, why in ((".", "is the current directory"), ("..", "is the parent directory")):
            with pytest.raises(Exception) as e:
                make_plan(ExtractOptions(input=str(src), output=given, model=str(tiny_model()), engine="dask"))
            assert str(e.value) == f"the output {given} {why} - pass output with a file name, e.g. output='{given}/features.parquet'"


@pytest.mark.parametrize("flag", [[], ["--overwrite"], ["--resume"]])
@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_users_own_partial_directory_is_never_deleted(tmp_path, capsys, flag, kind):
    """Found by the session's own audit (2.38, 2.39): the user's folder at OUTPUT.partial (no bertfeat manifest in
    it) was deleted by --overwrite and by --resume."""
    from extract_util import run, tiny_model, write_csv

    src = write_csv(tmp_path / "in.csv", ["text"], [["a text"], ["another"]])
    partial = tmp_path / "out.parquet.partial"
    if kind == "folder":
        partial.mkdir()
        (partial / "my-notes.txt").write_text("mine\n")
    else:
        partial.write_text("mine\n")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "out.parquet", "--model", tiny_model(), *flag)
    assert (rc, err) == (1, f"Error: {partial} exists and is not a bertfeat partial run (bertfeat works there while "
                            f"it writes {tmp_path / 'out.parquet'}, and deletes it) - move or rename it, or write the "
                            "output under another name\n")
    assert (partial / "my-notes.txt" if kind == "folder" else partial).read_text() == "mine\n"


@pytest.mark.parametrize("flag", [[], ["--overwrite"], ["--resume"]])
def test_a_finished_output_at_the_partial_path_is_never_deleted(tmp_path, src, capsys, flag):
    """A folder at OUTPUT.partial holding an output's provenance and parts but no manifest is a finished output: the
    user's own, written with -o o.parquet.partial (or a Dask run's killed in the instant before its rename). It was
    taken for a partial run for a day (2026-12-01): --overwrite and --resume deleted it. It is refused, kept whole."""
    partial = tmp_path / "o.parquet.partial"
    partial.mkdir()
    (partial / "_bertfeat.json").write_text("{}\n")
    (partial / "part-00000.parquet").write_bytes(b"PAR1")
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q", *flag)
    target = tmp_path / "o.parquet"
    why = {(): "", ("--resume",): "; --resume has nothing to continue in it (no manifest: that run had finished)",
           ("--overwrite",): "; --overwrite does not delete it (it may be yours)"}[tuple(flag)]
    assert (rc, err) == (1, f"Error: {partial} holds a finished bertfeat output (_bertfeat.json and its parts, no "
                            f"partial run's manifest): an output of yours named so, or a Dask run killed as it moved its "
                            f"output to {target}; nothing in it was deleted{why} - if it is that run's output, it is "
                            "complete (any rejects or PCA files beside it were written first) and needs no rerun: "
                            f"`mv {partial} {target}`; otherwise move it out of the way, or write the output under "
                            "another name\n")
    assert sorted(os.listdir(partial)) == ["_bertfeat.json", "part-00000.parquet"] and not target.exists()


def test_a_finished_output_at_the_partial_path_beside_an_old_output_says_to_move_the_old_one_aside(tmp_path, capsys):
    """Killed just before its rename, an --overwrite run leaves its finished output at OUTPUT.partial beside the old
    OUTPUT: the refusal's command moves the old one aside first (a bare `mv OUTPUT.partial OUTPUT` would move it
    into the old directory), in the Python API's words too; nothing is deleted."""
    src = tmp_path / "in dir" / "in.csv"
    src.parent.mkdir()
    src.write_text("text\nfine\n")
    target = tmp_path / "in dir" / "o.parquet"
    partial = target.with_name("o.parquet.partial")
    for d in (partial, target):
        d.mkdir()
        (d / "_bertfeat.json").write_text("{}\n")
        (d / "part-00000.parquet").write_bytes(b"PAR1")
    with pytest.raises(OutputError) as e:
        bertfeat.extract(src, target, model=tiny_model(), engine="dask", overwrite=True)
    q = f"'{tmp_path}/in dir"
    assert str(e.value) == (f"{partial} holds a finished bertfeat output (_bertfeat.json and its parts, no partial run's "
                            f"manifest): an output of yours named so, or a Dask run killed as it moved its output to "
                            f"{target}; nothing in it was deleted; overwrite=True does not delete it (it may be yours) - "
                            "if it is that run's output, it is complete (any rejects or PCA files beside it were "
                            f"written first) and needs no rerun: `mv {q}/o.parquet' {q}/o.parquet.old' && mv "
                            f"{q}/o.parquet.partial' {q}/o.parquet'` (the {target} there now is moved aside to "
                            f"{target}.old); otherwise move it out of the way, or write the output under another name")
    assert sorted(os.listdir(partial)) == sorted(os.listdir(target)) == ["_bertfeat.json", "part-00000.parquet"]


def test_a_name_without_room_for_its_temporary_on_a_file_system_of_a_lower_limit_is_refused_up_front(monkeypatch, tmp_path):
    """The names bertfeat derives (.NAME.tmp-PID ...) are shortened to fit 255 bytes; on a file system of a lower limit
    (eCryptfs: 143) a 130-byte name passed the check, and the run failed at its end writing its first file, its temporary
    (149 bytes) too long. There the name leaves room for them, as before; one that does is written as given."""
    from bertfeat.run.outputs import check_name_lengths

    real = os.pathconf
    monkeypatch.setattr(os, "pathconf", lambda p, n: 143 if n == "PC_NAME_MAX" else real(p, n))
    out = tmp_path / ("x" * 122 + ".parquet")
    with pytest.raises(OutputError) as e:
        check_name_lengths([("output", out)])
    assert str(e.value) == (f"the output name {out.name!r} is too long for its file system (148 bytes with the 18 its "
                            "temporary name .NAME.tmp-PID adds; the limit is 143) - choose an output name at least 5 bytes "
                            "shorter with output")
    check_name_lengths([("output", tmp_path / ("x" * 117 + ".parquet"))])


@pytest.mark.parametrize("name", ["o.parquet", "o" * 244 + ".parquet"])
def test_the_mv_line_of_a_finished_output_at_the_partial_path_keeps_a_users_old_file_and_fits(tmp_path, name):
    """The refusal's command moved the old OUTPUT to OUTPUT.old: `mv` replaced a file of the user's so named without a
    word, and for an output name over 251 bytes it failed (File name too long). It moves it to a free name that fits,
    and running it as given leaves the finished output in place and every file of the user's."""
    import subprocess

    from bertfeat.atomic import fitted_name

    src = tmp_path / "in.csv"
    src.write_text("text\nfine\n")
    target = tmp_path / name
    partial = target.with_name(fitted_name(name, len(".partial")) + ".partial")
    for d in (partial, target):
        d.mkdir()
        (d / "_bertfeat.json").write_text("{}\n")
        (d / "part-00000.parquet").write_text(d.name[-7:])
    mine = target.with_name(fitted_name(name, 4) + ".old")
    if len(name) < 200:
        mine.write_text("mine\n")
    with pytest.raises(OutputError) as e:
        bertfeat.extract(src, target, model=tiny_model(), engine="dask", overwrite=True)
    line = str(e.value).split("`")[1]
    done = subprocess.run(line, shell=True, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert (target / "part-00000.parquet").read_text() == "partial" and not partial.exists()
    if len(name) < 200:
        assert mine.read_text() == "mine\n"
        moved = target.with_name(name + ".old2")
    else:
        moved = target.with_name(fitted_name(name, 4) + ".old")
    assert (moved / "part-00000.parquet").read_text() == name[-7:] and f"moved aside to {moved})" in str(e.value)


def test_a_run_without_pca_removes_an_earlier_runs_pca_files(tmp_path, src):
    """OUTPUT.pca.npz and its report describe the features of the run that wrote them (its provenance names the
    model's sha256): a later run over that output without pca (--overwrite) removes them with its own files, so no
    stale model sits beside features it was never fitted on. Another output sharing the prefix (o.parquet, o.npy),
    and a model the run applies, are left alone."""
    import bertfeat

    def pca_files():
        return sorted(p.name for p in tmp_path.iterdir() if ".pca." in p.name)

    out = tmp_path / "o.parquet"
    bertfeat.extract(src, out, model=tiny_model(), cache=False, pca=2)
    assert pca_files() == ["o.pca.npz", "o.pca.report.json", "o.pca.report.md", "o.pca.report.png"]
    bertfeat.extract(src, tmp_path / "o.npy", model=tiny_model(), cache=False)  # o.parquet's PCA, not o.npy's
    assert len(pca_files()) == 4
    bertfeat.extract(src, out, model=tiny_model(), cache=False, pca_model=tmp_path / "o.pca.npz", overwrite=True)
    assert len(pca_files()) == 4  # applied: kept, and its report with it
    # the features of that run name the model they were reduced by: it is the user's now, kept by a run over them
    # (it was deleted with its report at exit 0, though no run had fitted it for them: found by audit)
    bertfeat.extract(src, out, model=tiny_model(), cache=False, overwrite=True)
    assert len(pca_files()) == 4
    bertfeat.extract(src, out, model=tiny_model(), cache=False, pca=2, overwrite=True)
    bertfeat.extract(src, out, model=tiny_model(), cache=False, overwrite=True)
    assert pca_files() == []


def test_a_users_pca_model_named_as_pca_would_name_it_is_never_removed(tmp_path, src, capsys):
    """`pca fit ... -o out.pca.npz` (the user's, on other features), applied by `extract --pca-model out.pca.npz -o
    out.parquet` or `pca transform`, then `extract -o out.parquet --overwrite` without pca: the model and its report
    were deleted at exit 0 (found by audit). No run fitted them for out.parquet: left alone."""
    train = tmp_path / "train.parquet"
    assert run(capsys, "extract", src, "-o", train, "--model", tiny_model(), "--no-cache", "-q")[0] == 0
    model = tmp_path / "out.pca.npz"
    assert run(capsys, "pca", "fit", train, "-n", "2", "-o", model, "-q")[0] == 0
    mine = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir() if p.name.startswith("out.pca."))
    assert [n for n, _ in mine] == ["out.pca.npz", "out.pca.report.json", "out.pca.report.md", "out.pca.report.png"]
    out = tmp_path / "out.parquet"
    for applied in (["extract", src, "-o", out, "--model", tiny_model(), "--no-cache", "--pca-model", model, "-q"],
                    ["pca", "transform", train, "--pca-model", model, "-o", out, "-q"]):
        assert run(capsys, *applied, "--overwrite")[0] == 0
        assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--no-cache", "--overwrite", "-q") \
            == (0, "", "")
        assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir() if p.name.startswith("out.pca.")) == mine


# --------------------------------------------------------------------------- the Dask engine's output directory
@pytest.mark.parametrize("mine", ["notes.txt", "plots/", "part-00099.parquet"])
def test_overwrite_of_a_dask_output_never_deletes_a_users_file_in_it(tmp_path, src, capsys, dask_client, mine):
    """--overwrite of a Dask output (a directory of parts) replaced the whole directory: a file or folder of the
    user's put inside it was deleted with the old parts. It is named instead, and left where it is; moved out, the
    run goes on."""
    out = tmp_path / "o.parquet"
    args = ["extract", src, "-o", out, "--model", tiny_model(), "--no-cache", "--engine", "dask", "--scheduler",
            dask_client.scheduler.address, "--blocksize", "none", "-q"]
    assert run(capsys, *args)[0] == 0
    parts = sorted(p.name for p in out.iterdir())
    (out / "plots").mkdir() if mine == "plots/" else None
    (out / "plots" / "a.txt" if mine == "plots/" else out / mine).write_text("mine\n")
    for flags in (["--overwrite"], ["--overwrite", "--resume"], []):
        rc, _, err = run(capsys, *args, *flags)
        assert (rc, err) == (1, f"Error: {out} holds {mine}, which bertfeat did not write there (a run replaces the "
                                f"whole directory, and would delete it with the old parts) - move it out of {out}, or "
                                "pass -o with another name\n"), flags
    assert sorted(p.name for p in out.iterdir()) == sorted(parts + [mine.rstrip("/")])
    assert (out / "plots" / "a.txt" if mine == "plots/" else out / mine).read_text() == "mine\n"
    (out / mine.rstrip("/")).rename(tmp_path / mine.rstrip("/"))
    assert run(capsys, *args, "--overwrite") == (0, "", "")
    assert sorted(p.name for p in out.iterdir()) == parts


class TestFileBrowsersFilesGoWithTheDirectory:
    """A Dask output directory a file browser had shown (.DS_Store, Thumbs.db, desktop.ini, AppleDouble ._NAME files)
    refused --overwrite for a "file bertfeat did not write there". Those files are a browser's, not the user's work:
    they go with the directory it replaces (and with a partial directory), while any other file is still refused."""

    BROWSER = (".DS_Store", "Thumbs.db", "desktop.ini", "._part-00000.parquet", "._notes.txt", "THUMBS.DB")

    @staticmethod
    def dask_args(src, out, client):
        return ["extract", src, "-o", out, "--model", tiny_model(), "--no-cache", "--engine", "dask", "--scheduler",
                client.scheduler.address, "--blocksize", "none", "-q"]

    def test_overwrite_replaces_them_with_the_directory(self, tmp_path, src, capsys, dask_client):
        out = tmp_path / "o.parquet"
        args = self.dask_args(src, out, dask_client)
        assert run(capsys, *args) == (0, "", "")
        parts = sorted(p.name for p in out.iterdir())
        for name in self.BROWSER:
            (out / name).write_bytes(b"\x00\x05\x16\x07 browser")
        assert run(capsys, *args, "--overwrite") == (0, "", "")
        assert sorted(p.name for p in out.iterdir()) == parts  # replaced whole, the browser's files with it

    def test_a_folder_holding_only_them_is_an_empty_output_folder(self, tmp_path, src, capsys, dask_client):
        """As an empty folder: it exists (--overwrite), and it is not "a directory that bertfeat did not write"."""
        out = tmp_path / "new"
        out.mkdir()
        (out / ".DS_Store").write_bytes(b"Bud1")
        args = self.dask_args(src, out, dask_client)
        assert run(capsys, *args) == (1, "", f"Error: {out} already exists - pass --overwrite to replace it, or -o with "
                                             "another name\n")
        assert run(capsys, *args, "--overwrite") == (0, "", "")
        assert sorted(p.name for p in out.iterdir()) == ["_bertfeat.json", "part-00000.parquet"]

    @pytest.mark.parametrize("mine", ["notes.txt", "Thumbs.db/", "._x/", "~$report.docx"])
    def test_any_other_file_beside_them_is_still_refused(self, tmp_path, src, capsys, dask_client, mine):
        """Named alone (the browser's files are not listed); a folder under a browser file's name is the user's."""
        from extract_util import tree_digest

        out = tmp_path / "o.parquet"
        args = self.dask_args(src, out, dask_client)
        assert run(capsys, *args)[0] == 0
        for name in (".DS_Store", "desktop.ini", "._part-00000.parquet"):
            (out / name).write_bytes(b"browser")
        if mine.endswith("/"):
            (out / mine).mkdir()
            (out / mine / "a.txt").write_text("mine\n")
        else:
            (out / mine).write_text("mine\n")
        before = tree_digest(tmp_path)
        rc, _, err = run(capsys, *args, "--overwrite")
        assert (rc, err) == (1, f"Error: {out} holds {mine}, which bertfeat did not write there (a run replaces the "
                                f"whole directory, and would delete it with the old parts) - move it out of {out}, or "
                                "pass -o with another name\n")
        assert tree_digest(tmp_path) == before  # nothing deleted, the browser's files included

    def test_a_partial_directory_holding_only_them_is_taken_over(self, tmp_path, src, capsys):
        partial = tmp_path / "o.parquet.partial"
        partial.mkdir()
        for name in ("Thumbs.db", "desktop.ini"):
            (partial / name).write_text("browser")
        assert run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "-q") == (0, "", "")
        assert not partial.exists() and (tmp_path / "o.parquet").is_file()
        partial.mkdir()
        (partial / "Thumbs.db").write_text("browser")
        (partial / "mine.txt").write_text("mine\n")
        rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model(), "--overwrite")
        assert rc == 1 and err.startswith(f"Error: {partial} exists and is not a bertfeat partial run"), err
        assert (partial / "mine.txt").read_text() == "mine\n"


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_directory_at_the_rejects_file_is_refused_before_the_run(tmp_path, src, capsys, dask_client, engine):
    """A directory at OUTPUT.rejects.csv was found only when the finished run wrote its rejects (all the work lost,
    and OUTPUT.partial/ left behind), and without --overwrite it was 'already exists - pass --overwrite', which could
    not replace it. It is refused up front, as an output that is a directory is."""
    out = tmp_path / "o.parquet"
    rejects = tmp_path / "o.parquet.rejects.csv"
    rejects.mkdir()
    dask = ["--engine", "dask", "--scheduler", dask_client.scheduler.address] if engine == "dask" else []
    for flags in (["--overwrite"], []):
        rc, _, err = run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "--no-cache", *dask, *flags)
        assert (rc, err) == (1, f"Error: the rejects file {rejects.resolve() if engine == 'dask' else rejects} is a "
                                "directory - move or rename that directory, or pass -o with another name\n"), flags
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "o.parquet.rejects.csv"]


@pytest.mark.parametrize("case", ["cache_db", "new_cache", "dask", "model_file"])
def test_no_output_is_written_into_the_cache_or_the_model_folder(tmp_path, src, capsys, case):
    """Found by the audit: `-o cX/vectors.sqlite3 --format parquet --cache cX --overwrite` replaced the cache's
    database (then `cache info cX`: not a SQLite database), and with a cache not made yet the run made it and wrote
    its output over it, --overwrite or not. --summary-json had the rule (test_summary_json.py); every output, side
    file and the partial directory have it now, before anything runs."""
    import shutil

    from extract_util import tree_digest

    model, cache = tmp_path / "m", tmp_path / "cX"
    shutil.copytree(tiny_model(), model)
    if case != "new_cache":
        assert run(capsys, "extract", src, "-o", tmp_path / "first.parquet", "--model", model, "--cache", cache, "-q")[0] == 0
    out = {"model_file": model / "model.safetensors"}.get(case, cache / "vectors.sqlite3")
    owner = f"the model folder {model}" if case == "model_file" else f"the vector cache {cache}"
    extra = {"dask": ["--engine", "dask", "--overwrite"], "new_cache": []}.get(case, ["--overwrite"])
    before = tree_digest(tmp_path)
    rc, _, err = run(capsys, "extract", src, "-o", out, "--format", "parquet", "--model", model, "--cache", cache, *extra)
    assert (rc, err) == (1, f"Error: the output {out} would be written inside {owner} - pass -o with a path outside it\n")
    assert tree_digest(tmp_path) == before  # nothing made, nothing replaced: refused before the run
    if case in ("cache_db", "dask"):
        assert run(capsys, "cache", "info", cache)[0] == 0


@pytest.mark.parametrize("where", ["folder", "inside", "environment"])
def test_the_vector_cache_is_not_the_model_folder(tmp_path, src, capsys, monkeypatch, where):
    """`--cache MODEL` (or BERTFEAT_CACHE=MODEL) wrote vectors.sqlite3 among the model's files with exit 0, where an
    output there is refused (found by audit). Refused before anything is made, naming where the cache came from."""
    import shutil

    from extract_util import tree_digest

    model = tmp_path / "m"
    shutil.copytree(tiny_model(), model)
    cache = model / "sub" if where == "inside" else model
    flags = ["--cache", cache]
    if where == "environment":
        monkeypatch.setenv("BERTFEAT_CACHE", str(cache))
        flags = []
    before = tree_digest(tmp_path)
    rc, _, err = run(capsys, "extract", src, "-o", tmp_path / "o.parquet", "--model", model, *flags)
    inside = "inside " if where == "inside" else ""
    env = (" (BERTFEAT_CACHE names this cache)", "; or set BERTFEAT_CACHE to another directory, or unset it") \
        if where == "environment" else ("", "")
    assert (rc, err) == (1, f"Error: the cache {cache} is {inside}the model folder {model}{env[0]} - give --cache a "
                            f"directory of its own, e.g. --cache bertfeat-cache{env[1]}\n")
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("given, named", [(".", "data"), ("./", "data"), ("..", "work"), ("../data/..", "work"),
                                          ("../*.parquet", "work")])
def test_the_default_output_of_a_folder_given_without_a_name_is_beside_it(tmp_path, capsys, monkeypatch, given, named):
    """extract . (in a folder of Parquet files) wrote its features to .features.parquet, a hidden file inside the
    folder (sweep: .sweep.*), and extract .. to ...features.parquet in the current directory: the folder's own name,
    beside it, as extract data/ does. The root folder has no name: refused, naming -o."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertfeat.features.reader import read_features
    from bertfeat.run.plan import default_output
    from extract_util import tiny_encoder

    data = tmp_path / "work" / "data"
    data.mkdir(parents=True)
    texts = ["one text", "another one"]
    pq.write_table(pa.table({"text": texts}), data / "p.parquet")
    pq.write_table(pa.table({"text": texts}), tmp_path / "work" / "q.parquet")
    monkeypatch.chdir(data)
    rc, _, err = run(capsys, "extract", given, "--model", tiny_model(), "-q")
    assert (rc, err) == (0, "")
    out = (data if named == "data" else tmp_path / "work").parent / f"{named}.features.parquet"
    assert [p.name for p in data.iterdir()] == ["p.parquet"]
    rows = 2 if named == "data" or "*" in given else 4  # (.. reads data/ and q.parquet)
    assert read_features(out)[1].shape[0] == rows
    np.testing.assert_allclose(read_features(out)[1][:2], tiny_encoder().encode(texts), atol=1e-5)
    with pytest.raises(BertfeatError, match=r"^the input / is the root folder, which has no name to name the output "
                                            r"after - pass output='OUTPUT'$"):
        default_output("/", "parquet")


def test_a_name_of_standard_output_is_refused_even_redirected_to_a_file(tmp_path, src):
    """-o /dev/stdout --overwrite > f.parquet passed as a regular file (the redirected one), and the atomic write's
    rename replaced the link itself: exit 0, f.parquet empty, and (as root) /dev/stdout a regular file for every later
    process. A link to a descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N, or one of the user's) is refused, as
    --summary-json naming one is (whose fix offers -)."""
    import subprocess
    import sys

    link = tmp_path / "mystdout"
    link.symlink_to("/proc/self/fd/1")
    redirected = tmp_path / "f.parquet"
    fix = ("bertfeat writes regular files (atomically: a temporary file, then a rename, which would replace {} itself); "
           "pass {} with a file name{}")
    for args, label, out, flag, dash in [
            (["-o", link], "output", link, "-o", ""),
            (["-o", "/dev/fd/1"], "output", "/dev/fd/1", "-o", ""),
            (["-o", tmp_path / "o.parquet", "--summary-json", link], "summary JSON", link, "--summary-json",
             ", or --summary-json - for standard output")]:
        with open(redirected, "wb") as fh:
            p = subprocess.run([sys.executable, "-m", "bertfeat", "extract", src, *map(str, args), "--model",
                                str(tiny_model()), "-q", "--overwrite"], stdout=fh, stderr=subprocess.PIPE)
        assert (p.returncode, p.stderr.decode()) == (1, f"Error: the {label} {out} is standard output (file descriptor "
                                                        f"1), not a file - {fix.format(out, flag, dash)}\n")
        assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1" and redirected.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.parquet", "in.csv", "mystdout"]
    import bertfeat

    err = tmp_path / "mystderr"  # (a link of the test's own: never /dev/stderr, which code without the check replaced)
    err.symlink_to("/dev/stderr")
    with pytest.raises(BertfeatError, match=r"^the output .*mystderr is standard error \(file descriptor 2\), not a "
                                            r"file - .* pass output with a file name$"):
        bertfeat.extract(src, err, model=tiny_model(), overwrite=True)
    assert err.is_symlink()


@pytest.mark.parametrize("command", ["extract", "sweep"])
def test_an_empty_model_name_is_refused_as_empty_not_as_the_current_directory(tmp_path, src, capsys, monkeypatch,
                                                                               command):
    """Found by the API audit: `-m ""` with an output in the current directory said `the output o.parquet would be
    written over the model folder  - pass -o with a path outside it` (Path("") is the current directory), where the
    cause is the model name: the model's load refuses it as empty, as `bertfeat tokens -m ""` and Encoder("") do."""
    import bertfeat

    monkeypatch.chdir(tmp_path)
    out = ["-o", "o.parquet"] if command == "extract" else ["-o", "sw", "-q"]
    rc, _, err = run(capsys, command, "in.csv", "-m", "", *out)
    assert (rc, err) == (1, "Error: the model name is empty - pass a model folder or name, or leave it out for the "
                            "default\n")
    with pytest.raises(BertfeatError, match="^the model name is empty - pass a model folder or name"):
        bertfeat.extract("in.csv", "o.parquet", model="")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_a_pca_run_never_replaces_the_pca_fitted_for_another_output_of_its_name(tmp_path, src, capsys):
    """o.parquet and o.npy share o.pca.npz and its report: `-o o.npy --pca 3` was refused as 'already exists - pass
    --overwrite', and with --overwrite replaced o.parquet's model, its only copy (verify then said 'put the model file
    back'). Now it is refused whatever the flags, naming the output the model was fitted for; the files stay byte
    for byte; a run that removes that output first, or names its own output otherwise, goes on."""
    import hashlib

    def digests():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tmp_path.glob("o.*"))}

    first = tmp_path / "o.parquet"
    assert run(capsys, "extract", src, "-o", first, "--model", tiny_model(), "--pca", "2", "-q")[0] == 0
    before = digests()
    assert {"o.pca.npz", "o.pca.report.json", "o.pca.report.md"} <= set(before)
    said = (f"Error: the PCA model {tmp_path / 'o.pca.npz'} is the one fitted for {first}, another output of this name "
            f"(they share o.pca.*): this run would replace it and its report - pass -o with another name, or remove "
            f"{first} and its PCA files first\n")
    for flags in ([], ["--overwrite"]):
        rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.npy", "--model", tiny_model(), "--pca", "3",
                           *flags)
        assert (rc, out, err) == (1, "", said)
        assert digests() == before
    with pytest.raises(OutputError) as e:
        bertfeat.extract(src, tmp_path / "o.csv", model=tiny_model(), pca=3, overwrite=True)
    assert e.value.message == said[len("Error: "):-1].replace("-o with", "output with")
    # an estimate writes nothing: the rule is no obstacle to it (a review of the rule found it refused)
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / "o.npy", "--model", tiny_model(), "--pca", "3",
                       "--estimate", "--estimate-rows", "5")
    assert rc == 0 and digests() == before, err
    assert run(capsys, "verify", first, "-q")[0] == 0
    assert run(capsys, "extract", src, "-o", tmp_path / "p.npy", "--model", tiny_model(), "--pca", "3", "-q")[0] == 0
    first.unlink()
    assert run(capsys, "extract", src, "-o", tmp_path / "o.npy", "--model", tiny_model(), "--pca", "3", "--overwrite",
               "-q")[0] == 0
    assert run(capsys, "verify", tmp_path / "o.npy", "-q")[0] == 0


@pytest.mark.parametrize("flags, said", [
    (["--long-text", "bogus"], "Error: unknown --long-text 'bogus' - choose one of truncate, chunk-mean, chunk-max, "
                               "error\n"),
    (["--layer-agg", "bogus"], "Error: unknown --layer-agg 'bogus' - choose one of mean, concat\n"),
    (["--pooling", "bogus"], "Error: unknown --pooling 'bogus' - choose one of pooled, cls, max, mean, "
                             "mean_sqrt_len_tokens, weightedmean, lasttoken, or token poolings joined with '+' such as "
                             "mean+max\n"),
])
def test_a_wrong_word_is_said_before_an_existing_output(tmp_path, src, capsys, flags, said):
    """A run over an existing output with --long-text bogus was told 'already exists - pass --overwrite'; doing so
    then said the value is unknown. The words the model does not decide are checked with the options, first."""
    out = tmp_path / "done.parquet"
    assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), "-q")[0] == 0
    before = out.read_bytes()
    for more in ([], ["--overwrite"]):
        assert run(capsys, "extract", src, "-o", out, "--model", tiny_model(), *flags, *more) == (1, "", said)
    assert out.read_bytes() == before


@pytest.mark.parametrize("first, second", [("o.PARQUET", "o.npy"), ("o", "o.parquet"), ("o.parquet", "o"),
                                           ("o.csv", "o.pq")])
def test_the_pca_owner_is_found_whatever_its_suffix(tmp_path, src, capsys, first, second):
    """o.PARQUET's model (or an output without a suffix: o's) was replaced by -o o.npy --pca 3 --overwrite: the
    owner was looked for under five lowercase suffixes only. Any output of the stem is its owner."""
    import hashlib

    assert run(capsys, "extract", src, "-o", tmp_path / first, "--model", tiny_model(), "--pca", "2", "--format",
               "csv" if first.endswith(".csv") else "parquet", "-q")[0] == 0
    model = tmp_path / "o.pca.npz"
    before = hashlib.sha256(model.read_bytes()).hexdigest()
    fmt = {".npy": "npy", ".csv": "csv"}.get(Path(second).suffix, "parquet")
    rc, out, err = run(capsys, "extract", src, "-o", tmp_path / second, "--model", tiny_model(), "--pca", "3",
                       "--format", fmt, "--overwrite")
    assert rc == 1 and err.startswith(f"Error: the PCA model {model} is the one fitted for {tmp_path / first}, "), err
    assert hashlib.sha256(model.read_bytes()).hexdigest() == before

