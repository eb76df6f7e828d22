"""Issue 25 (items 4 and 8): files of the wrong kind, texts that are not UTF-8, and PCA sizes that are empty.

Every command's path arguments are fed files of the wrong kind (.npy, .npz, a Parquet table that holds no features,
.csv, .json, an empty file, a directory, a FIFO, a file whose extension names another format): each run must end with
exit 1 and exactly one ``Error:`` line on stderr that is not "a bug", leave every input byte for byte as it was, and
write nothing. A FIFO with no writer blocks whoever opens it for reading, so the code must refuse it before opening
it; every run here has a timeout (a run that hangs is unblocked by opening the FIFO's other end, then fails).

In-process through ``bertfeat.cli.app.main`` with the small random-weight model of tests/ckpt.py; a subprocess where
the real argv decoding matters (bytes that are not UTF-8).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertfeat.cli.app import main
from bertfeat.errors import BertfeatError
from bertfeat.pca.estimator import PCA
from extract_util import run, tiny_model, write_csv

TIMEOUT = 30  # seconds for one in-process run (they take well under one; a FIFO opened for reading waits forever)
MODEL_FIX = "pass a .npz written by `bertfeat pca fit`, `bertfeat extract --pca` or PCA.save"
DAMAGED_FIX = "pass a complete model file (rerun the `bertfeat pca fit` or `extract --pca` that wrote it)"
PCA_FIX = ("give a whole number of components (e.g. 100), a variance fraction in (0, 1) (e.g. 0.95), "
           "mle (Minka's choice), or 1.0 / all for every component")
UTF8_FIX = ("pass the text as UTF-8 (convert it first, e.g. with iconv -f latin1 -t utf-8), or put it in a file "
            "and run `bertfeat extract FILE --encoding ENCODING`")


# ------------------------------------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Path]:
    """Valid inputs, made once: a corpus, its features (tiny model) and a PCA model fitted on them."""
    d = tmp_path_factory.mktemp("good")
    corpus = write_csv(d / "corpus.csv", ["id", "text"], [[f"r{i}", f"sentence number {i} about cats"] for i in range(24)])
    assert main(["extract", str(corpus), "-o", str(d / "feats.parquet"), "-m", str(tiny_model()), "-q"]) == 0
    assert main(["pca", "fit", str(d / "feats.parquet"), "-n", "3", "-o", str(d / "model.npz"), "-q"]) == 0
    return {"corpus": corpus, "features": d / "feats.parquet", "model": d / "model.npz", "dir": d}


def snapshot(*roots: Path) -> dict[str, str]:
    """Every entry under the roots: a digest of each regular file's bytes, the kind of anything else."""
    out = {}
    for root in roots:
        for p in sorted([root, *root.rglob("*")]):
            mode = os.lstat(p).st_mode
            if stat.S_ISREG(mode):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[str(p)] = "dir" if stat.S_ISDIR(mode) else "fifo" if stat.S_ISFIFO(mode) else oct(mode)
    return out


def _unblock(fifo: Path) -> None:
    """Open the other end of a FIFO a run is stuck on (reading: a writer that closes at once gives it EOF)."""
    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError:
            pass


def run_timed(capsys, args, fifo: Path | None = None) -> tuple[int | str, str, str]:
    """`bertfeat ARGS` in-process in a thread -> (exit code, stdout, stderr); exit code "hung" after TIMEOUT s."""
    capsys.readouterr()
    result: dict = {}

    def target():
        try:
            result["rc"] = main([str(a) for a in args])
        except BaseException as e:  # noqa: BLE001 - main must not raise; the test reports it
            result["rc"] = f"raised {type(e).__name__}: {e}"

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(TIMEOUT)
    if t.is_alive():
        if fifo is not None:
            _unblock(fifo)
        t.join(TIMEOUT)
        result["rc"] = "hung"
    out = capsys.readouterr()
    return result["rc"], out.out, out.err


def assert_one_error(rc, err):
    """Exit 1, one line on stderr, `Error: what - fix`, and not an unexpected exception."""
    assert rc == 1, f"exit {rc!r}, stderr: {err!r}"
    assert err.startswith("Error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert " - " in err and "bug" not in err and "Traceback" not in err, err


# ------------------------------------------------------------------------------------------------ the fuzz matrix
KINDS = ["npy", "npz", "parquet", "csv", "json", "empty", "dir", "fifo", "wrong-ext"]

# slot -> (the extension the slot expects, how to build the command from the wrong path and a scratch directory)
SLOTS = {
    "extract INPUT": (".csv", lambda g, p, o: ["extract", p, "-o", o / "out.parquet", "-m", tiny_model(), "-q"]),
    "extract -o": (".parquet", lambda g, p, o: ["extract", g["corpus"], "-o", p, "-m", tiny_model(), "-q"]),
    "pca fit FEATURES": (".parquet", lambda g, p, o: ["pca", "fit", p, "-n", "2", "-o", o / "m.npz", "-q"]),
    "pca fit -o": (".npz", lambda g, p, o: ["pca", "fit", g["features"], "-n", "2", "-o", p, "-q"]),
    "pca transform FEATURES": (".parquet", lambda g, p, o: ["pca", "transform", p, "--pca-model", g["model"],
                                                             "-o", o / "r.parquet", "-q"]),
    "pca transform --pca-model": (".npz", lambda g, p, o: ["pca", "transform", g["features"], "--pca-model", p,
                                                            "-o", o / "r.parquet", "-q"]),
    "pca transform -o": (".parquet", lambda g, p, o: ["pca", "transform", g["features"], "--pca-model", g["model"],
                                                       "-o", p, "-q"]),
    "report MODEL": (".npz", lambda g, p, o: ["report", p, "-o", o / "rep", "-q"]),
    "info MODEL_DIR": ("", lambda g, p, o: ["info", p, "--json"]),
    "tokens -m": ("", lambda g, p, o: ["tokens", "a cat", "-m", p, "--json"]),
    "attention -m": ("", lambda g, p, o: ["attention", "a cat", "-m", p, "-o", o / "a.png"]),
    "attention -o": (".png", lambda g, p, o: ["attention", "a cat", "-m", tiny_model(), "-o", p]),
    "fill-mask -m": ("", lambda g, p, o: ["fill-mask", "a [MASK]", "-m", p, "--json"]),
}
OUTPUT_SLOTS = {"extract -o", "pca fit -o", "pca transform -o", "attention -o"}
# a name whose extension names another format than the slot's (an output: a file not there yet)
WRONG_EXT_OUTPUT = {"extract -o": "out.npz", "pca fit -o": "model.parquet", "pca transform -o": "out.npz",
                    "attention -o": "attention.jpg"}

XFAIL: dict = {}  # (slot, kind) -> reason, for a case a known bug still fails (none now: extract's FIFO input is refused)


def wrong_file(kind: str, slot: str, d: Path, good: dict) -> Path:
    """A file (or directory, or FIFO) of the wrong kind for ``slot``, in the directory d."""
    ext = SLOTS[slot][0]
    d.mkdir(parents=True, exist_ok=True)
    if kind == "npy":  # an attention array (`attention --save-npy`): float32 (layers, heads, T, T)
        p = d / "attention.npy"
        np.save(p, np.random.default_rng(0).random((2, 2, 5, 5), dtype=np.float32))
    elif kind == "npz":  # np.savez of random arrays
        p = d / "arrays.npz"
        np.savez(p, a=np.random.default_rng(1).random(3), b=np.random.default_rng(2).random((2, 2)))
    elif kind == "parquet":  # a table with no features and no text
        p = d / "table.parquet"
        pq.write_table(pa.table({"x": [1, 2, 3], "y": [0.5, 1.5, 2.5]}), p)
    elif kind == "csv":
        p = d / "numbers.csv"
        p.write_text("a,b\n1,2\n3,4\n")
    elif kind == "json":
        p = d / "settings.json"
        p.write_text(json.dumps({"a": 1, "b": [1, 2]}))
    elif kind == "empty":
        p = d / f"empty{ext or '.bin'}"
        p.write_bytes(b"")
    elif kind == "dir":
        p = d / f"folder{ext}"
        p.mkdir()
        (p / "notes.txt").write_text("not what the command wants\n")
    elif kind == "fifo":
        p = d / f"pipe{ext}"
        os.mkfifo(p)
    elif kind == "wrong-ext":
        if slot in OUTPUT_SLOTS:
            p = d / WRONG_EXT_OUTPUT[slot]
        elif ext == "":  # a model directory's own config.json instead of the directory
            p = d / "config.json"
            shutil.copy(Path(tiny_model()) / "config.json", p)
        elif ext == ".npz":  # features named like a PCA model
            p = d / "features.npz"
            shutil.copy(good["features"], p)
        elif ext == ".csv":  # a Parquet file named .csv
            p = d / "features.csv"
            shutil.copy(good["features"], p)
        else:  # a PCA model named like features
            p = d / "model.parquet"
            shutil.copy(good["model"], p)
    else:
        raise AssertionError(kind)
    return p


CASES = [pytest.param(slot, kind, id=f"{slot}-{kind}".replace(" ", "_"),
                      marks=[pytest.mark.xfail(strict=True, reason=XFAIL[slot, kind])] if (slot, kind) in XFAIL else [])
         for slot in SLOTS for kind in KINDS]


@pytest.mark.parametrize("slot, kind", CASES)
def test_a_file_of_the_wrong_kind_is_one_error_line(tmp_path, good, capsys, slot, kind):
    wrong = wrong_file(kind, slot, tmp_path / "in", good)
    scratch = tmp_path / "out"
    scratch.mkdir()
    before, before_good = snapshot(tmp_path), snapshot(good["dir"])
    rc, out, err = run_timed(capsys, SLOTS[slot][1](good, wrong, scratch), fifo=wrong if kind == "fifo" else None)
    assert rc != "hung", f"bertfeat {slot} blocked on a FIFO for {TIMEOUT} s (stderr {err!r})"
    assert_one_error(rc, err)
    assert out == ""
    assert snapshot(tmp_path) == before, "an input changed or a file was written"
    assert snapshot(good["dir"]) == before_good


# ------------------------------------------------------------------------------------------------ item 4: PCA models
def not_a_model(path, why, fix=MODEL_FIX):
    return f"Error: {path} is not a bertfeat PCA model: {why} - {fix}\n"


def pca_model_cases(d: Path, good: dict) -> list[tuple[Path, str, str]]:
    """(path, why, fix) for each file that is not a PCA model."""
    d.mkdir()
    npy = d / "f.npy"
    np.save(npy, np.zeros((4, 3), np.float32))
    rand = d / "r.npz"
    np.savez(rand, a=np.arange(3.0))
    trunc = d / "t.npz"
    trunc.write_bytes(good["model"].read_bytes()[:200])
    empty = d / "e.npz"
    empty.write_bytes(b"")
    folder = d / "folder.npz"
    folder.mkdir()
    fifo = d / "pipe.npz"
    os.mkfifo(fifo)
    text = d / "n.csv"
    text.write_text("a,b\n1,2\n")
    pickled = d / "o.npz"
    np.savez(pickled, meta=np.array([{"format": "bertfeat-pca"}], dtype=object))
    with np.load(good["model"]) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    k, n_features = meta["n_components"], meta["n_features"]

    def edited(name: str, arrays_change=None, meta_change=None, params_change=None) -> Path:
        """The good model with one thing changed, as a file edited by hand or written by something else would be."""
        a, m = dict(arrays), json.loads(json.dumps(meta))
        a.update(arrays_change or {})
        m.update(meta_change or {})
        m["params"].update(params_change or {})
        a["meta"] = np.array(json.dumps(m))
        np.savez(d / name, **a)
        return d / name

    inconsistent = [
        (edited("narrow.npz", {"components": arrays["components"][:, :-1]}),
         f"its 'components' array has shape ({k}, {n_features - 1}) where n_components {k} and n_features {n_features} "
         f"need ({k}, {n_features})"),
        (edited("short.npz", {"spectrum": arrays["spectrum"][:1]}),
         f"its 'spectrum' array has shape (1,) where at least ({k},) is needed (n_components {k})"),
        (edited("nanmean.npz", {"mean": np.full_like(arrays["mean"], np.nan)}), "its 'mean' array holds NaN or inf"),
        (edited("nosamples.npz", meta_change={"n_samples": 0}), "n_samples 0 (a fit needs at least 2)"),
        (edited("novariance.npz", meta_change={"total_variance": 0.0}),
         f"its total variance 0 is less than its components' ({arrays['spectrum'][:k].sum():g})"),
        (edited("solver.npz", params_change={"solver": "bogus"}),
         "its parameters are not valid (unknown solver='bogus' - use one of: auto, svd, covariance, randomized)"),
        (edited("extra.npz", params_change={"extra": 1}),
         "its parameters are not valid (PCA() got an unexpected keyword argument 'extra' - use one of PCA's parameters: "
         "n_components, solver, whiten, random_state, accumulate, precision)"),
        # provenance of another shape: transform and report read them as objects ("unexpected TypeError" before)
        (edited("fpstr.npz", meta_change={"fingerprint": "abc"}), 'its fingerprint is not a JSON object (it is "abc")'),
        (edited("srclist.npz", meta_change={"source": [1, 2]}), "its source is not a JSON object (it is [1, 2])"),
        (edited("reducedby.npz", meta_change={"source": meta["source"] | {"reduced_by": "zz"}}),
         'its source\'s reduced_by is not a JSON object (it is "zz")'),
        (edited("fitsolver.npz", meta_change={"fit_solver": ["svd"]}), "its fit_solver ['svd'] is not a solver's name"),
    ]
    return [*((path, why, MODEL_FIX) for path, why in inconsistent),
        (npy, "it is a .npy array file, not a .npz model", MODEL_FIX),
        (rand, "it is a .npz without bertfeat's 'meta' entry", MODEL_FIX),
        (trunc, "it is a truncated or corrupt .npz archive (File is not a zip file)", DAMAGED_FIX),
        (empty, "it is empty (0 bytes)", DAMAGED_FIX),
        (folder, "it is a directory", MODEL_FIX),
        (fifo, "it is a named pipe (FIFO)", MODEL_FIX),
        (text, "it is not a .npz archive", MODEL_FIX),  # numpy would have said: load it with pickle
        (pickled, "it holds pickled (object) arrays, which bertfeat never loads", MODEL_FIX),
    ]


def test_pca_load_refuses_what_is_not_a_model(tmp_path, good):
    """The Python API: PCA.load("f.npy") was a TypeError (np.load returns an array, not an archive)."""
    for path, why, fix in pca_model_cases(tmp_path / "m", good):
        with pytest.raises(BertfeatError) as e:
            PCA.load(path)
        assert e.value.message == f"{path} is not a bertfeat PCA model: {why} - {fix}"
    assert PCA.load(good["model"]).n_components_ == 3


@pytest.mark.parametrize("command", ["report", "pca transform"])
def test_report_and_transform_refuse_what_is_not_a_model(tmp_path, good, capsys, command):
    cases = pca_model_cases(tmp_path / "m", good)
    before = snapshot(tmp_path)
    for path, why, fix in cases:
        if command == "report":
            args = ["report", path, "-o", tmp_path / "rep"]
        else:
            args = ["pca", "transform", good["features"], "--pca-model", path, "-o", tmp_path / "r.parquet"]
        rc, out, err = run_timed(capsys, args, fifo=path if path.name == "pipe.npz" else None)
        assert (rc, out, err) == (1, "", not_a_model(path, why, fix))
    assert snapshot(tmp_path) == before


def test_a_model_is_known_by_its_content_not_its_extension(tmp_path, good, capsys):
    """A PCA model named .parquet loads (the check reads the file, as PCA.load always did); features named .npz
    are refused as no model."""
    renamed = tmp_path / "model.parquet"
    shutil.copy(good["model"], renamed)
    rc, _, err = run(capsys, "report", renamed, "-o", tmp_path / "rep", "-q")
    assert (rc, err) == (0, "")
    feats = tmp_path / "feats.npz"
    shutil.copy(good["features"], feats)
    rc, _, err = run(capsys, "report", feats, "-o", tmp_path / "rep2", "-q")
    assert (rc, err) == (1, not_a_model(feats, "it is not a .npz archive"))


# ------------------------------------------------------------------------------------------------ issue 44: arrays that lie
# An array's .npy header declares its shape and dtype; numpy allocates what it declares before reading, so a header
# that declares more than the member holds read as "out of memory - lower --max-batch-tokens". Every member's header
# is checked against its bytes, and the model's arrays against its counts, before any array is read.
def rewrite_member(src: Path, dst: Path, name: str, change) -> Path:
    """``src`` with the member ``name``.npy replaced by ``change(its bytes)`` (the archive's checksums made anew)."""
    import zipfile

    with zipfile.ZipFile(src) as z:
        members = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(dst, "w") as z:
        for member, data in members:
            z.writestr(member, change(data) if member == f"{name}.npy" else data)
    return dst


def declaring(shape=None, descr=None, version=None):
    """A member's bytes with its header saying ``shape`` / ``descr`` (its data as it was)."""
    import io

    from numpy.lib import format as npf

    def change(data: bytes) -> bytes:
        f = io.BytesIO(data)
        v = npf.read_magic(f)
        old_shape, fortran, dtype = (npf.read_array_header_1_0 if v == (1, 0) else npf.read_array_header_2_0)(f)
        out = io.BytesIO()
        npf.write_array_header_1_0(out, {"descr": descr or npf.dtype_to_descr(dtype), "fortran_order": fortran,
                                         "shape": old_shape if shape is None else shape})
        head = out.getvalue()
        return (head[:6] + bytes(version) + head[8:] if version else head) + data[f.tell():]
    return change


def header_text(text: str):
    """A member's bytes with a .npy 1.0 header holding ``text`` (its data as it was)."""
    import io

    from numpy.lib import format as npf

    def change(data: bytes) -> bytes:
        f = io.BytesIO(data)
        npf.read_magic(f)
        npf.read_array_header_1_0(f)
        h = text.encode("latin1")
        h += b" " * (-(10 + len(h) + 1) % 64) + b"\n"
        return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + data[f.tell():]
    return change


@pytest.fixture(scope="module")
def stats_model(tmp_path_factory, good) -> Path:
    """The good model saved with its statistics too (three more arrays)."""
    path = tmp_path_factory.mktemp("stats") / "s.npz"
    from bertfeat.features import read_features

    PCA(n_components=3, solver="covariance").fit(read_features(good["features"])[1]).save(path, include_stats=True)
    return path


def damaged_array_cases(d: Path, good: dict, stats_model: Path) -> list[tuple[Path, str, str]]:
    """(file, why, fix) for models whose arrays' headers lie or whose members are cut short."""
    d.mkdir()
    arrays = {}
    for src in (stats_model, good["model"]):  # the good model's own arrays last
        with np.load(src) as z:
            arrays |= {k: z[k] for k in z.files}
    k, n = arrays["components"].shape
    model = good["model"]

    def case(name, member, change, why, fix=DAMAGED_FIX):
        return rewrite_member(stats_model if member.startswith("stats") else model, d / name, member, change), why, fix

    def lie(member, shape, held=None):
        a = arrays[member]
        return (f"its {member!r} array is damaged: its header declares shape {shape} of {a.dtype} "
                f"({math.prod(shape) * a.itemsize:,} bytes), but the archive holds {a.nbytes if held is None else held:,} "
                "bytes of it")

    return [
        case("absurd.npz", "components", declaring((10**6, 10**6)), lie("components", (10**6, 10**6))),
        case("overflow.npz", "mean", declaring((2**62, 4)), lie("mean", (2**62, 4))),
        case("meta.npz", "meta", declaring((10**9,)), lie("meta", (10**9,))),
        case("cut.npz", "components", lambda b: b[:-16], lie("components", (k, n), k * n * 8 - 16)),
        case("fewer.npz", "components", declaring((k, k)), lie("components", (k, k))),
        case("stats.npz", "stats_sq", declaring((10**5, 10**5)), lie("stats_sq", (10**5, 10**5))),
        case("header.npz", "spectrum", header_text("{'descr': '<f8', 'shape': (3,)}"),
             "its 'spectrum' array is damaged: its header cannot be read (Header does not contain the correct keys: "
             "['descr', 'shape'])"),
        case("garbled.npz", "spectrum", header_text("{'descr': '<f8', 'shape': (3,"),
             "its 'spectrum' array is damaged: its header cannot be read (('EOF in multi-line statement', (2, 0)))"),
        case("version.npz", "mean", declaring(version=(9, 0)),
             "its 'mean' array is damaged: its header cannot be read (.npy format version 9.0)"),
        case("complex.npz", "mean", declaring((n // 2,), "<c16"), "its 'mean' array is not of floats", MODEL_FIX),
        case("long.npz", "spectrum", lambda b: b, f"its 'spectrum' array has shape ({n + 1},) where at most ({n},) fit "
                                                  f"(n_features {n})", MODEL_FIX),  # made a spectrum too long below
    ]


def _long_spectrum(path: Path, good: dict) -> None:
    with np.load(good["model"]) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["spectrum"] = np.concatenate([arrays["spectrum"], np.zeros(len(arrays["mean"]) + 1 - len(arrays["spectrum"]))])
    np.savez(path, **arrays)


def test_a_pca_model_whose_arrays_lie_is_refused_as_damaged(tmp_path, good, stats_model, capsys):
    cases = damaged_array_cases(tmp_path / "m", good, stats_model)
    _long_spectrum(tmp_path / "m" / "long.npz", good)
    before = snapshot(tmp_path)
    for path, why, fix in cases:
        with pytest.raises(BertfeatError) as e:
            PCA.load(path)
        assert e.value.message == f"{path} is not a bertfeat PCA model: {why} - {fix}"
        for args in (["report", path, "-o", tmp_path / "rep"],
                     ["pca", "transform", good["features"], "--pca-model", path, "-o", tmp_path / "r.parquet"],
                     ["extract", good["corpus"], "-m", tiny_model(), "--pca-model", path, "-o", tmp_path / "x.parquet"]):
            assert run(capsys, *args) == (1, "", not_a_model(path, why, fix))
    assert snapshot(tmp_path) == before  # nothing written, no input changed


def test_a_model_too_large_for_memory_says_so(tmp_path, good, monkeypatch):
    """A model whose arrays are what its header says but more than the memory: not 'lower --max-batch-tokens'."""
    from numpy.lib import format as npf

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(npf, "read_array", no_memory)
    with pytest.raises(BertfeatError) as e:
        PCA.load(good["model"])
    assert e.value.message == (f"the PCA model {good['model']} does not fit in this machine's memory "
                               f"({good['model'].stat().st_size:,} bytes) - load it on a machine with more memory")


# ------------------------------------------------------------------------------------------------ feature files and outputs
def test_a_directory_or_fifo_is_not_a_feature_file(tmp_path, good, capsys):
    """Said so, before anything opens it (was: "feature file not found")."""
    folder, fifo = tmp_path / "feats.parquet", tmp_path / "pipe.parquet"
    folder.mkdir()
    os.mkfifo(fifo)
    for args in (["pca", "fit", "{f}", "-o", tmp_path / "m.npz"],
                 ["pca", "transform", "{f}", "--pca-model", good["model"], "-o", tmp_path / "r.parquet"]):
        rc, _, err = run_timed(capsys, [folder if a == "{f}" else a for a in args])
        assert (rc, err) == (1, f"Error: {folder} is a directory, not a feature file - pass the path of a feature file, "
                                "not of a directory\n")
        rc, _, err = run_timed(capsys, [fifo if a == "{f}" else a for a in args], fifo=fifo)
        assert (rc, err) == (1, f"Error: {fifo} is a named pipe (FIFO), not a feature file - write the data to a regular "
                                "file first and pass that\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feats.parquet", "pipe.parquet"]


def test_an_output_that_is_a_directory_is_refused_even_with_overwrite(tmp_path, good, capsys):
    """A file never replaces a directory (was: "already exists - pass --overwrite", then with --overwrite an error
    naming a temporary file)."""
    model, feats = tmp_path / "model.npz", tmp_path / "out.parquet"
    for folder in (model, feats):
        folder.mkdir()
        (folder / "keep.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    for folder, what, name, args in (
            (model, "PCA model", "pca100.npz", ["pca", "fit", good["features"], "-n", "2", "-o", model]),
            (feats, "output", "reduced.parquet", ["pca", "transform", good["features"], "--pca-model", good["model"], "-o", feats])):
        for extra in ([], ["--overwrite"]):
            rc, _, err = run(capsys, *args, *extra)
            assert (rc, err) == (1, f"Error: the {what} {folder} is a directory - pass -o with a file name, e.g. "
                                    f"-o {folder}/{name}\n")
    assert snapshot(tmp_path) == before


def test_pca_fit_refuses_a_model_named_like_another_format(tmp_path, good, capsys):
    out = tmp_path / "reduced.parquet"
    rc, _, err = run(capsys, "pca", "fit", good["features"], "-n", "2", "-o", out)
    assert (rc, err) == (1, f"Error: the PCA model {out} ends in .parquet, but a PCA model is a .npz archive - name it .npz "
                            "(e.g. -o reduced.npz); reduced features are written by `bertfeat pca transform`\n")
    assert list(tmp_path.iterdir()) == []
    rc, _, err = run(capsys, "pca", "fit", good["features"], "-n", "2", "-o", tmp_path / "model.pca", "-q")
    assert (rc, err) == (0, "")  # an extension bertfeat does not know is taken as it is, as before


# ------------------------------------------------------------------------------------------------ item 4: UTF-8
@pytest.mark.parametrize("command", ["tokens", "attention", "fill-mask"])
def test_a_text_argument_that_is_not_utf8_is_refused(tmp_path, capsys, command):
    """Python decodes argv bytes that are not UTF-8 as lone surrogates (b"caf\\xe9" -> "caf\\udce9")."""
    extra = ["-o", tmp_path / "a.png"] if command == "attention" else []
    text = "caf\udce9 [MASK]" if command == "fill-mask" else "caf\udce9"
    rc, out, err = run(capsys, command, text, "-m", tiny_model(), *extra)
    assert (rc, out, err) == (1, "", f"Error: the TEXT argument is not valid UTF-8 (byte 0xe9 at character 3) - {UTF8_FIX}\n")
    rc, out, err = run(capsys, command, "a [MASK]", "--pair", "na\udcefve", "-m", tiny_model(), *extra)
    assert (rc, out, err) == (1, "", f"Error: --pair is not valid UTF-8 (byte 0xef at character 2) - {UTF8_FIX}\n")
    assert list(tmp_path.iterdir()) == []


def test_raw_bytes_on_the_command_line(tmp_path):
    """The real thing: a process started with argv bytes that are not UTF-8."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), LC_ALL="C.UTF-8")
    p = subprocess.run([sys.executable, "-m", "bertfeat", b"tokens", b"caf\xe9", b"-m", os.fsencode(tiny_model())],
                       capture_output=True, env=env, timeout=300)
    assert (p.returncode, p.stdout, p.stderr.decode()) == (
        1, b"", f"Error: the TEXT argument is not valid UTF-8 (byte 0xe9 at character 3) - {UTF8_FIX}\n")


def test_the_library_refuses_lone_surrogates_too():
    from bertfeat.inspection import fill_mask, tokenize_text, write_attention

    fix = ("decode it with its real encoding first (bytes.decode('latin-1'), say), or read a file in another "
           "encoding with bertfeat.extract(..., encoding=...)")
    for call, message in ((lambda: tokenize_text("caf\udce9", model=tiny_model()),
                           "text is not valid Unicode (byte 0xe9 at character 3)"),
                          (lambda: tokenize_text("ok", "x\ud800", model=tiny_model()),
                           "pair is not valid Unicode (lone surrogate U+D800 at character 1)"),
                          (lambda: fill_mask("\udcff [MASK]", model=tiny_model()),
                           "text is not valid Unicode (byte 0xff at character 0)"),
                          (lambda: write_attention("caf\udce9", "a.png", model=tiny_model()),
                           "text is not valid Unicode (byte 0xe9 at character 3)")):
        with pytest.raises(BertfeatError) as e:
            call()
        assert e.value.message == f"{message} - {fix}"


# ------------------------------------------------------------------------------------------------ item 8
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a NumPy warning (printed above the Error line by the CLI) fails
def test_pca_fit_of_features_whose_float32_products_overflow(tmp_path, capsys):
    """float32 features near 1e30, whose float32 block products overflow, are fitted as --accumulate float64 fits them,
    without a RuntimeWarning (they were refused: "products of these float32 features overflow ... pass them as
    float64", which a command line cannot do). Float64 products of float32 values never overflow."""
    feats = tmp_path / "huge.npy"
    np.save(feats, (np.random.default_rng(0).standard_normal((40, 6)) * 1e30).astype(np.float32))
    models = {}
    for args in (("--solver", "auto"), ("--solver", "covariance"), ("--solver", "svd"), ("--accumulate", "float64")):
        out = tmp_path / f"m{len(models)}.npz"
        rc, _, err = run(capsys, "pca", "fit", feats, "-n", "2", "-o", out, *args, "-q")
        assert (rc, err) == (0, "")
        models[args] = PCA.load(out)
    ref = models[("--accumulate", "float64")]
    for pca in models.values():
        np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, rtol=1e-12)
        np.testing.assert_allclose(pca.components_, ref.components_, rtol=0, atol=1e-12)


def test_pca_fit_overflow_stderr_of_the_real_command(tmp_path):
    """The same in a process of its own, where NumPy's warning would go to stderr with its source line."""
    feats = tmp_path / "huge.npy"
    np.save(feats, (np.random.default_rng(0).standard_normal((40, 6)) * 1e30).astype(np.float32))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run([sys.executable, "-m", "bertfeat", "pca", "fit", str(feats), "-n", "2", "-o", str(tmp_path / "m.npz"),
                        "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["huge.npy", "m.npz", "m.report.json", "m.report.md",
                                                          "m.report.png"]


def test_empty_pca_sizes_are_refused(tmp_path, good, capsys):
    """`extract --pca ""` meant no PCA, `pca fit -n ""` every component: both are refused now, as any non-number."""
    rc, _, err = run(capsys, "extract", good["corpus"], "-o", tmp_path / "f.parquet", "-m", tiny_model(), "--pca", "")
    assert (rc, err) == (1, f"Error: --pca '' is not a number - {PCA_FIX}\n")
    for value in ("", "  "):
        rc, _, err = run(capsys, "pca", "fit", good["features"], "-n", value, "-o", tmp_path / "m.npz")
        assert (rc, err) == (1, f"Error: --n-components '' is not a number - {PCA_FIX}\n")
    assert list(tmp_path.iterdir()) == []
    import bertfeat

    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(good["corpus"], tmp_path / "f.parquet", model=tiny_model(), pca="")
    assert e.value.message == f"pca='' is not a number - {PCA_FIX}"
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ paths that are not local
# Issue 44 (1): a URL or a Windows path given where bertfeat reads or writes a local file crashed ("this is a bug") or made
# folders named memory:, file: or C:\x in the current directory. Every path option of every command now refuses it in
# one line before anything is created; file:// and ~ are answered with the local path they stand for.
def _path_cases(good) -> list[tuple[str, str, list, str | None]]:
    """(what the error calls it, how the fix names it, the command with U where the path goes, the extension given
    to a path bertfeat writes (None: it reads the path), ...)."""
    f, m, c, tiny = good["features"], good["model"], good["corpus"], tiny_model()
    return [
        ("output", "-o", ["extract", c, "-o", "U", "-m", tiny], ".parquet"),
        ("output", "-o", ["extract", c, "-o", "U", "-m", tiny, "--engine", "dask"], ".parquet"),
        ("PCA model", "--pca-model", ["extract", c, "-o", "o.parquet", "-m", tiny, "--pca-model", "U"], None),
        ("cache", "--cache", ["extract", c, "-o", "o.parquet", "-m", tiny, "--cache", "U"], ""),
        ("feature file", None, ["pca", "fit", "U", "-n", "2", "-o", "m.npz"], None),
        ("PCA model", "-o", ["pca", "fit", f, "-n", "2", "-o", "U"], ".npz"),
        ("feature file", None, ["pca", "transform", "U", "--pca-model", m, "-o", "r.parquet"], None),
        ("PCA model", "--pca-model", ["pca", "transform", f, "--pca-model", "U", "-o", "r.parquet"], None),
        ("output", "-o", ["pca", "transform", f, "--pca-model", m, "-o", "U"], ".parquet"),
        ("PCA model", None, ["report", "U"], None),
        ("report prefix", "-o", ["report", m, "-o", "U"], ""),
        ("feature file", "--probe", ["report", m, "-o", "r", "--probe", "U", "--label", "id"], None),
        ("feature file", None, ["verify", "U"], None),
        ("cache", None, ["cache", "info", "U"], None),
        ("cache", None, ["cache", "clear", "U"], None),
        ("report prefix", "-o", ["sweep", c, "-o", "U", "-m", tiny, "--set", "mean"], ""),
        ("output", "-o", ["attention", "hi", "-o", "U", "-m", tiny], ".png"),
        ("--save-npy file", "--save-npy", ["attention", "hi", "-o", "a.png", "--save-npy", "U", "-m", tiny], ".npy"),
    ]


PATHS = {  # the path given -> what the error says it is, and the local path its fix names (None: none)
    "memory://x": ("is a URL (memory://): bertfeat {verb} local files only", None),
    "s3://bucket/data/x": ("is a URL (s3://): bertfeat {verb} local files only", None),
    "http://example.com/x": ("is a URL (http://): bertfeat {verb} local files only", None),
    "file:///tmp/bertfeat-there/x": ("is a file:// URL, not a path", "/tmp/bertfeat-there/x"),
    "C:\\data\\x": ("is a Windows path, which this system takes for a file name in this directory", None),
    "C:/data/x": ("is a Windows path, which this system takes for a file name in this directory", None),
    "~/bertfeat-there/x": ("starts with ~, which no shell expanded (bertfeat takes a path as it is given)",
                           os.path.expanduser("~/bertfeat-there/x")),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_path_that_is_not_local_is_refused_by_every_path_option(tmp_path, good, capsys, monkeypatch, path):
    monkeypatch.chdir(tmp_path)  # where memory:, file:, C:\data\x or ~ would have been made
    before = snapshot(tmp_path, good["dir"])
    said, local = PATHS[path]
    for what, flag, command, ext in _path_cases(good):
        given = path + (ext or "")
        rc, out, err = run(capsys, *[given if a == "U" else a for a in command])
        head = f"Error: the {what} {given} {said.format(verb='reads' if ext is None else 'writes')} - "
        assert (rc, out, err.count("\n")) == (1, "", 1) and err.startswith(head), (command, err)
        if local is not None:  # file:// and ~: the fix is the local path itself
            assert err.endswith(f"the path itself, {flag + ' ' if flag else ''}{local}{ext or ''}\n"), (command, err)
        assert snapshot(tmp_path, good["dir"]) == before, command
    monkeypatch.setenv("BERTFEAT_CACHE", path)
    rc, _, err = run(capsys, "extract", good["corpus"], "-o", "o.parquet", "-m", tiny_model())
    assert rc == 1 and err.startswith(f"Error: the cache (BERTFEAT_CACHE) {path} {said.format(verb='writes')} - "), err
    assert snapshot(tmp_path, good["dir"]) == before


@pytest.mark.parametrize("variable, value", [("$BERTFEAT_TEST_OUT", "set"), ("${BERTFEAT_TEST_UNSET}", None)])
def test_an_unexpanded_variable_in_a_path_written_is_refused_by_every_writing_option(tmp_path, good, capsys, monkeypatch,
                                                                                     variable, value):
    """A path from a config file or a subprocess list, $OUT/x.parquet, reached bertfeat with its $ (no shell): a run
    made a folder named '$OUT' in the current directory and wrote there, without a word. A path bertfeat reads is
    untouched, and so is an existing folder of that name (a user's, used as named)."""
    monkeypatch.chdir(tmp_path)
    there = tmp_path / "there"
    monkeypatch.setenv("BERTFEAT_TEST_OUT", str(there))
    monkeypatch.delenv("BERTFEAT_TEST_UNSET", raising=False)
    before = snapshot(tmp_path, good["dir"])
    for what, flag, command, ext in _path_cases(good):
        if ext is None:  # read, not written
            continue
        given = f"{variable}/x{ext}"
        rc, out, err = run(capsys, *[given if a == "U" else a for a in command])
        how = f"pass {flag} with" if flag else "give"
        fix = (f"{how} the path itself, {flag + ' ' if flag else ''}{there}/x{ext}" if value else
               f"{how} the path {variable} stands for ({variable} is not set here)")
        assert (rc, out, err) == (1, "", f"Error: the {what} {given} holds {variable}, which no shell expanded (bertfeat "
                                         f"takes a path as it is given, and would make '{variable}' as it is written) - "
                                         f"{fix}\n"), (command, err)
        assert snapshot(tmp_path, good["dir"]) == before, command
    assert not there.exists()
    (tmp_path / variable).mkdir()  # a folder really named so: written into as named
    rc, _, err = run(capsys, "extract", good["corpus"], "-o", f"{variable}/o.parquet", "-m", tiny_model(), "-q")
    assert (rc, err) == (0, "") and (tmp_path / variable / "o.parquet").is_file()
    rc, _, err = run(capsys, "extract", good["corpus"], "-o", "cost$USD.parquet", "-m", tiny_model(), "-q")
    assert (rc, err) == (0, "") and (tmp_path / "cost$USD.parquet").is_file()  # not at the start of a part: a name


def test_a_url_output_is_refused_in_full(tmp_path, good, capsys, monkeypatch):
    """The issue's cases, whole lines: -o memory://... crashed, -o file:///... made a folder named file:."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "extract", good["corpus"], "-o", "memory://x/f.parquet", "-m", tiny_model())
    assert (rc, out, err) == (1, "", "Error: the output memory://x/f.parquet is a URL (memory://): bertfeat writes local "
                                     "files only - pass -o with a local path, e.g. -o f.parquet\n")
    rc, out, err = run(capsys, "extract", good["corpus"], "-o", f"file://{tmp_path}/f.parquet", "-m", tiny_model())
    assert (rc, out, err) == (1, "", f"Error: the output file://{tmp_path}/f.parquet is a file:// URL, not a path - pass "
                                     f"-o with the path itself, -o {tmp_path}/f.parquet\n")
    assert list(tmp_path.iterdir()) == []
    rc, out, err = run(capsys, "sweep", f"file://{good['corpus']}", "-m", tiny_model(), "--set", "mean")
    assert (rc, out, err) == (1, "", "Error: a URL input needs -o PREFIX - give the report prefix, e.g. -o sweep\n")
    assert list(tmp_path.iterdir()) == []  # its report beside the input was file:/.../corpus.sweep.json, here
    import bertfeat

    with pytest.raises(BertfeatError) as e:
        bertfeat.extract(good["corpus"], "s3://bucket/f.parquet", model=tiny_model())
    assert e.value.message == ("the output s3://bucket/f.parquet is a URL (s3://): bertfeat writes local files only - "
                               "pass output with a local path, e.g. output='f.parquet'")
    assert list(tmp_path.iterdir()) == []


def test_a_nul_in_a_path_is_one_line_not_a_bug(tmp_path, good, capsys, monkeypatch):
    """A NUL cannot come from a shell, but can from Python (or main([...])): was "unexpected ValueError: embedded null
    byte - this is a bug"."""
    monkeypatch.chdir(tmp_path)
    for what, flag, command, ext in _path_cases(good):
        rc, out, err = run(capsys, *["a\0b" + (ext or "") if a == "U" else a for a in command])
        assert (rc, out) == (1, "") and err == (f"Error: the {what} a\\x00b{ext or ''} holds a NUL character, which no "
                                                f"file name can hold - {f'pass {flag} with' if flag else 'give'} a path "
                                                "without it\n"), (command, err)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ empty paths
# Found by the CLI audit: pathlib takes "" for the current directory, so an empty path argument or option read it:
# `cache clear ""` cleared the cache of the directory it ran in, `verify ""` read it as a Dask output, `report ""`,
# `pca transform --pca-model ""` called it "not a bertfeat PCA model: it is a directory", `extract --summary-json ""`
# "would replace the input". Every path bertfeat reads (and the summary JSON) refuses it; an empty output was already
# refused as one ("the output '' is empty"), and an empty --cache means no cache (docs/cli.md).
EMPTY = "path is empty ('', which would name the current directory)"


def test_an_empty_path_is_refused_by_every_path_it_reads(tmp_path, good, capsys, monkeypatch):
    monkeypatch.chdir(good["dir"])  # what "" named: a folder of feature files, a model, a corpus
    before = snapshot(good["dir"])
    cases = [c for c in _path_cases(good) if c[3] is None]
    cases.append(("summary JSON", "--summary-json", ["extract", good["corpus"], "-o", tmp_path / "o.parquet", "-m",
                                                     tiny_model(), "--summary-json", "U"], None))
    assert len(cases) == 10
    for what, flag, command, _ in cases:
        rc, out, err = run(capsys, *["" if a == "U" else a for a in command])
        how = f"pass {flag} with" if flag else "give"
        assert (rc, out, err) == (1, "", f"Error: the {what} {EMPTY} - {how} the {what}'s path\n"), command
    assert snapshot(good["dir"]) == before and list(tmp_path.iterdir()) == []


def test_cache_clear_of_an_empty_path_leaves_the_cache_it_runs_in(tmp_path, good, capsys, monkeypatch):
    cache = tmp_path / "c"
    assert run(capsys, "extract", good["corpus"], "-o", tmp_path / "o.parquet", "-m", tiny_model(), "-q",
               "--cache", cache)[0] == 0
    monkeypatch.chdir(cache)
    before = snapshot(cache)
    for command in ("info", "clear"):
        rc, out, err = run(capsys, "cache", command, "")
        assert (rc, out, err) == (1, "", f"Error: the cache {EMPTY} - give the cache's path\n")
    assert snapshot(cache) == before  # the 24 entries are there: it deleted them and said "deleted 24 entries from "
    rc, out, _ = run(capsys, "cache", "info", cache, "--json")
    assert (rc, json.loads(out)["entries"]) == (0, 24)


# ------------------------------------------------------------------------------------------------ names not UTF-8
# Found by the CLI audit: a file name whose bytes are not UTF-8 (a latin-1 name on Linux; Python hands it over as
# lone surrogates) ended `verify`, `extract -o` / its default output, `sweep -o`, `report -o`, `pca transform -o` .npy
# in "unexpected UnicodeEncodeError ... this is a bug", and `pca fit` / `transform` called a sound feature file "not a
# readable Parquet file": Arrow opens UTF-8 paths only, and the reports and provenance name the file.
NOT_UTF8_WHY = "Arrow opens UTF-8 paths only, and provenance and reports name the file in UTF-8"


def test_a_name_that_is_not_utf8_is_refused_by_every_path_option(tmp_path, good, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = snapshot(good["dir"])
    for what, flag, command, ext in _path_cases(good):
        given = "a\udcffb" + (ext or "")  # the bytes b"a\xffb" as Python's argv decoding gives them
        rc, out, err = run(capsys, *[given if a == "U" else a for a in command])
        fix = (f"{f'pass {flag} with' if flag else 'give'} a UTF-8 name" if ext is not None
               else "rename it with a UTF-8 name")
        shown = "a\\udcffb" + (ext or "")  # the error line escapes it, as a control character
        assert (rc, out, err) == (1, "", f"Error: the {what} {shown} is not a UTF-8 name (byte 0xff at character 1) - "
                                         f"{fix} ({NOT_UTF8_WHY})\n"), command
    assert list(tmp_path.iterdir()) == [] and snapshot(good["dir"]) == before


def test_an_output_named_after_an_input_that_is_not_utf8(tmp_path, good):
    """The real bytes, in a process of its own: the input is read (fsspec takes the name), its default output beside it
    is refused before anything is written."""
    src = os.fsencode(tmp_path) + b"/caf\xe9.csv"
    shutil.copy(good["corpus"], src)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), LC_ALL="C.UTF-8")
    p = subprocess.run([sys.executable, "-m", "bertfeat", b"extract", src, b"-m", os.fsencode(tiny_model()), b"-q"],
                       capture_output=True, env=env, timeout=300)
    out = f"{tmp_path}/caf\\udce9.features.parquet"  # stderr writes the byte as Python escapes it
    assert (p.returncode, p.stdout, p.stderr.decode()) == (
        1, b"", f"Error: the output {out} is not a UTF-8 name (byte 0xe9 at character {len(str(tmp_path)) + 4}) - "
                f"pass -o with a UTF-8 name ({NOT_UTF8_WHY})\n")
    assert os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9.csv"]


def test_an_input_named_not_in_utf8_is_named_escaped_in_the_sweeps_report(tmp_path, good, capsys):
    """The input is read (fsspec takes the name); the sweep's Markdown report named it raw and ended in the bug line
    after the whole sweep ran."""
    src = tmp_path / "caf\udce9.csv"  # the bytes b"caf\xe9.csv" on disk
    shutil.copy(good["corpus"], src)
    rc, out, err = run(capsys, "sweep", src, "-o", tmp_path / "s", "--set", "mean", "--sample", "10", "-q",
                       "-m", tiny_model())
    assert (rc, out, err) == (0, "", "")
    # shown as \udce9, its backslash escaped as Markdown reads it
    assert (tmp_path / "s.md").read_text(encoding="utf-8").startswith(f"# Feature sets of {tmp_path}/caf\\\\udce9.csv\n")
    assert json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))["input"] == str(src)
