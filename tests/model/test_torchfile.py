"""bertfeat/model/torchfile.py: torch.save's zip checkpoints read without PyTorch and without unpickling.

Files written by torch.save itself (the tests that need torch skip with the reason when it is absent) are read to
exactly the values torch holds: float32, float16, bfloat16 (widened exactly) and float64 tensors, transposed and
sliced views, storages shared between tensors, 0-d tensors, big-endian storages, any top folder name, pickle
protocol 4; and in torch.save's legacy format (PyTorch < 1.6, ``_use_new_zipfile_serialization=False``), storage
views included. Pickles built by hand (no torch needed) that name another global are refused without running it; a
truncated, damaged or .tar-format file is refused naming the file, with how to re-save it.
"""

from __future__ import annotations

import io
import pickle
import shutil
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from bertfeat.errors import WeightsError
from bertfeat.model.torchfile import read_torch_file
from conftest import need_live


@pytest.fixture
def torch():
    return need_live("torch")


def _reference(t) -> np.ndarray:
    """What bertfeat should give for torch tensor ``t``: its values, float16 / bfloat16 as float32."""
    import torch

    t = t.detach()
    return (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).numpy()


def _assert_same(got: dict, sd: dict) -> None:
    assert list(got) == list(sd)
    for k, t in sd.items():
        want = _reference(t)
        assert got[k].shape == want.shape and got[k].dtype == want.dtype, (k, got[k].dtype, want.dtype)
        assert got[k].flags.c_contiguous and got[k].flags.writeable
        np.testing.assert_array_equal(got[k], want, err_msg=k)
    arrays = list(got.values())  # each an array of its own, though the tensors shared a storage
    assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:])


def _records(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def _write_zip(path: Path, records: dict[str, bytes]) -> Path:
    """An archive of stored records, as torch.save writes them."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in records.items():
            z.writestr(name, data)
    return path


# pickles by hand, opcode by opcode (protocol 2), for what pickle.dumps never writes
def _u(s: str) -> bytes:
    return b"X" + struct.pack("<I", len(s.encode())) + s.encode()  # BINUNICODE


def _i(n: int) -> bytes:
    if 0 <= n < 2**31:
        return b"J" + struct.pack("<i", n)  # BININT
    b = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(b)]) + b  # LONG1


def _t(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"  # MARK ... TUPLE


_HOOKS = b"ccollections\nOrderedDict\n)R"  # OrderedDict(): a tensor's backward hooks


def _storage(key: str, numel: int, cls: str = "FloatStorage") -> bytes:
    """('storage', torch.FloatStorage, key, 'cpu', numel) as a persistent id (BINPERSID)."""
    return _t(_u("storage"), f"ctorch\n{cls}\n".encode(), _u(key), _u("cpu"), _i(numel)) + b"Q"


def _tensor(storage: bytes, offset: int, size: tuple, stride: tuple, hooks: bytes = _HOOKS) -> bytes:
    """_rebuild_tensor_v2(storage, offset, size, stride, False, hooks)."""
    return (b"ctorch._utils\n_rebuild_tensor_v2\n" + _t(storage, _i(offset), _t(*map(_i, size)), _t(*map(_i, stride)),
                                                          b"\x89", hooks) + b"R")


def _pickled_state_dict(**tensors: bytes) -> bytes:
    return b"\x80\x02}(" + b"".join(_u(k) + v for k, v in tensors.items()) + b"u."


def _archive(path: Path, pkl: bytes, storages: dict[str, bytes] = {}) -> Path:  # noqa: B006 (never mutated)
    return _write_zip(path, {"a/data.pkl": pkl, "a/byteorder": b"little", "a/version": b"3",
                             **{f"a/data/{k}": v for k, v in storages.items()}})


_FOUR = np.arange(4, dtype="<f4").tobytes()  # a storage of 4 float32 values


# ---------------------------------------------------------------------------------------------- read as torch does
@pytest.mark.live
def test_a_state_dict_torch_saved_reads_to_torchs_values(torch, tmp_path):
    """float32, float16, bfloat16 and float64 tensors, a transposed and a sliced view sharing the first tensor's
    storage, a 0-d tensor of each kind, an empty tensor, a Parameter, a tensor big enough for 4-byte sizes: every
    value equal to the torch tensor's."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 5, generator=g)
    b16 = torch.randn(4, 3, generator=g).bfloat16()
    sd = OrderedDict(
        weight=w, transposed=w.t(), sliced=w[1:5:2, 1:4], scalar=torch.tensor(-2.75), half=torch.randn(7, generator=g).half(),
        bf16=b16, bf16_t=b16.t(), bf16_scalar=torch.tensor(1.5, dtype=torch.bfloat16),
        double=torch.randn(3, dtype=torch.float64, generator=g), empty=torch.empty(0, 3),
        param=torch.nn.Parameter(torch.randn(2, generator=g)), big=torch.randn(300, 300, generator=g))
    f = tmp_path / "pytorch_model.bin"
    torch.save(sd, f)
    # the views really share the storage in the file: one data record for weight, transposed and sliced
    data = sorted(n for n in _records(f) if "/data/" in n)
    assert len(data) == len(sd) - 2 - 1  # transposed and sliced share weight's; bf16_t shares bf16's
    _assert_same(read_torch_file(f), sd)
    assert read_torch_file(f)["scalar"].shape == ()


@pytest.mark.live
def test_a_modules_state_dict_with_its_metadata(torch, tmp_path):
    """What sentence-transformers' older Dense.save wrote: torch.save(self.state_dict()), an OrderedDict carrying
    _metadata (a BUILD of the dict), read as its tensors."""
    layer = torch.nn.Linear(8, 3)
    f = tmp_path / "pytorch_model.bin"
    torch.save(layer.state_dict(), f)
    assert hasattr(layer.state_dict(), "_metadata")
    _assert_same(read_torch_file(f), layer.state_dict())


@pytest.mark.live
@pytest.mark.parametrize("how", ["renamed", "protocol 4", "no byteorder record", "big-endian", "in a buffer"])
def test_archive_variants_torch_reads(torch, tmp_path, how):
    """The top folder is whatever torch named it (here 'weights_v2', saved under another name and renamed; 'archive'
    from a buffer), pickle protocol 4's framing, a file without the byteorder record (read little-endian, as torch
    >= 2.1 does), and big-endian storages (each record's bytes swapped, byteorder 'big'): the same values."""
    g = torch.Generator().manual_seed(1)
    sd = {"w": torch.randn(3, 4, generator=g), "h": torch.randn(5, generator=g).half(),
          "b": torch.randn(2, 2, generator=g).bfloat16(), "d": torch.randn(2, dtype=torch.float64, generator=g)}
    f = tmp_path / "pytorch_model.bin"
    if how == "renamed":
        torch.save(sd, tmp_path / "weights_v2.pt")
        (tmp_path / "weights_v2.pt").rename(f)
        assert next(iter(_records(f))).startswith("weights_v2/")
    elif how == "protocol 4":
        torch.save(sd, f, pickle_protocol=4)
    elif how == "no byteorder record":  # as torch < 2.1 wrote (torch.save's own switch for it writes one now)
        torch.save(sd, tmp_path / "with.bin")
        _write_zip(f, {n: data for n, data in _records(tmp_path / "with.bin").items() if not n.endswith("/byteorder")})
        assert "with/byteorder" in _records(tmp_path / "with.bin") and "with/byteorder" not in _records(f)
    elif how == "in a buffer":
        buf = io.BytesIO()
        torch.save(sd, buf)
        f.write_bytes(buf.getvalue())
        assert next(iter(_records(f))).startswith("archive/")
    else:
        torch.save(sd, tmp_path / "little.bin")
        recs = _records(tmp_path / "little.bin")
        sizes = {str(i): t.element_size() for i, t in enumerate(sd.values())}  # storage keys in the order saved
        big = {}
        for name, data in recs.items():
            key = name.split("/data/")[-1] if "/data/" in name else None
            if key is not None:
                data = np.frombuffer(data, dtype=f"<u{sizes[key]}").byteswap().tobytes()
            big[name] = b"big" if name.endswith("/byteorder") else data
        _write_zip(f, big)
        assert _records(f)["little/data/0"] != recs["little/data/0"]
    _assert_same(read_torch_file(f), sd)


# -------------------------------------------------------------------------------------------- never run, refused
class _Run:
    """Pickles as a call of ``fn(*args)``: what a malicious checkpoint holds."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _hand_made(path: Path, obj, protocol: int = 2, top: str = "archive") -> Path:
    """A torch.save-shaped archive (data.pkl, byteorder, version) around the pickle of ``obj``, built without torch."""
    return _write_zip(path, {f"{top}/data.pkl": pickle.dumps(obj, protocol=protocol), f"{top}/byteorder": b"little",
                             f"{top}/version": b"3\n"})


@pytest.mark.parametrize("protocol,in_dict", [(2, True), (4, True), (0, False), (2, False)])
def test_a_pickle_naming_another_global_is_refused_and_not_run(tmp_path, protocol, in_dict):
    """A state dict whose pickle calls os.system (here: to create a file), or a pickle that is that call alone, is
    refused naming the file and the global; the call never happens (the file is not created), whatever the pickle
    protocol."""
    import os

    marker = tmp_path / "ran"
    call = _Run(os.system, f"touch {marker}")
    f = _hand_made(tmp_path / "pytorch_model.bin", {"linear.weight": call} if in_dict else call, protocol)
    assert b"system" in _records(f)["archive/data.pkl"]
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert not marker.exists()
    assert e.value.what.startswith(f"{f} names the global {os.system.__module__}.system in its pickle, which a plain "
                                   "state dict does not need: bertfeat refused it without running it")
    assert "SentenceTransformer(dir).save(dir, safe_serialization=True)" in e.value.fix


@pytest.mark.parametrize("obj,named", [
    (_Run(eval, "1 + 1"), "__builtin__.eval"),  # protocol 2 spells builtins as Python 2 did
    (_Run(getattr, OrderedDict, "fromkeys"), "__builtin__.getattr"),
    (_Run(shutil.rmtree, "/nonexistent-ptbin"), "shutil.rmtree"),
    ({"w": _Run(np.ones, 3)}, "numpy"),  # a real array: NumPy's own reconstructor is no global of a state dict
])
def test_other_globals_are_refused_by_name(tmp_path, obj, named):
    f = _hand_made(tmp_path / "m.bin", obj)
    with pytest.raises(WeightsError, match=f"names the global {named}"):
        read_torch_file(f)


def test_opcodes_a_state_dict_does_not_use_are_refused(tmp_path):
    """INST (protocol 0's class instantiation), with a harmless name: refused as an opcode, nothing looked up."""
    f = _write_zip(tmp_path / "m.bin", {"archive/data.pkl": b"(ios\ngetcwd\n.", "archive/version": b"3"})
    with pytest.raises(WeightsError, match=r"uses pickle opcode INST \(0x69\), which torch.save does not write"):
        read_torch_file(f)


@pytest.mark.live
def test_tensors_a_modules_weights_never_are_are_refused(torch, tmp_path):
    """An int64 tensor, an expanded view (more elements than its storage), a whole module pickled (its class a
    global), a tensor with a Python attribute (a subclass rebuilder): each refused by what it is."""
    cases = {"int": {"w": torch.ones(2, dtype=torch.int64)}, "expanded": {"w": torch.ones(1, 2).expand(3, 2)},
             "module": torch.nn.Linear(2, 2), "attribute": {"w": torch.ones(2)}}
    cases["attribute"]["w"].note = "x"
    want = {"int": "holds tensors of torch.LongStorage, a dtype bertfeat does not read as a module's weights",
            "expanded": "holds a tensor of size (3, 2), stride (0, 1), offset 0 on storage '0' of 2 elements: it holds "
                        "more elements than the storage",
            "module": "names the global torch.nn.modules.linear.Linear in its pickle",
            "attribute": "names the global torch._tensor._rebuild_from_type_v2 in its pickle"}
    for name, obj in cases.items():
        f = tmp_path / f"{name}.bin"
        torch.save(obj, f)
        with pytest.raises(WeightsError) as e:
            read_torch_file(f)
        assert e.value.what.startswith(f"{f} {want[name]}"), e.value.what


@pytest.mark.live
def test_a_nan_is_refused_naming_the_tensor(torch, tmp_path):
    f = tmp_path / "pytorch_model.bin"
    torch.save({"linear.bias": torch.tensor([1.0, float("nan"), float("inf")]).half()}, f)
    with pytest.raises(WeightsError, match=r"pytorch_model.bin: tensor 'linear.bias' has 2 NaN or infinite value\(s\) "
                                           r"of 3 \(1 NaN, 1 infinite\)"):
        read_torch_file(f)


# ------------------------------------------------------------------------------------------- damaged or foreign
@pytest.mark.live
def test_a_truncated_or_damaged_file_is_refused_naming_it(torch, tmp_path):
    good = tmp_path / "good.bin"
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(2))
    torch.save({"w": w}, good)
    raw = good.read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(WeightsError) as e:
        read_torch_file(cut)
    assert e.value.what == (f"{cut} is not a torch.save zip archive (File is not a zip file): it is truncated or "
                            "damaged, or was written by something else")
    flipped = tmp_path / "flipped.bin"
    at = raw.index(w[10, 3].numpy().tobytes())  # a byte inside the tensor's data
    flipped.write_bytes(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:])
    with pytest.raises(WeightsError) as e:
        read_torch_file(flipped)
    assert e.value.what == (f"{flipped} could not be read as a torch.save zip archive (Bad CRC-32 for file "
                            "'good/data/0'): it is truncated or damaged")
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(WeightsError, match=r"empty.bin is empty \(0 bytes\) - restore the file from the model"):
        read_torch_file(empty)


@pytest.mark.parametrize("records,what", [
    ({"data.pkl": b"\x80\x02}q\x00."}, "is a zip archive but not torch.save's: its first record 'data.pkl' is in no folder"),
    ({"a/data.pkl": b"\x80\x02}.", "a/version": b"3", "a/constants.pkl": b""},
     "is a TorchScript archive (torch.jit.save), not a state dict saved by torch.save"),
    ({"a/data.pkl": b"\x80\x02}."}, "has archive version (none), where torch reads 1 to 10"),
    ({"a/data.pkl": b"\x80\x02}.", "a/version": b"99"}, "has archive version 99, where torch reads 1 to 10"),
    ({"a/data.pkl": b"\x80\x02}.", "a/version": b"3", "a/byteorder": b"middle"},
     "has byte order 'middle', not little or big"),
    ({"a/data.pkl": b"\x80\x02]q\x00.", "a/version": b"3"}, "holds a list, not a state dict (names -> tensors)"),
    ({"a/data.pkl": b"\x80\x02}q\x00(X\x01\x00\x00\x00wK\x01u", "a/version": b"3"},
     "holds a data.pkl that is not a state dict as torch.save writes it (data.pkl ends before its STOP opcode: it is "
     "cut short)"),
    # ('storage', torch.FloatStorage, '0', 'cpu', 4) with no record data/0
    ({"a/data.pkl": b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n"
                    b"FloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00K\x04\x85K\x01\x85\x89"
                    b"ccollections\nOrderedDict\n)RtRs.", "a/version": b"3"},
     "names storage '0' of 4 float32 values (16 bytes), but record data/0 is missing: the file is damaged"),
])
def test_archives_torch_save_does_not_write_are_refused(tmp_path, records, what):
    f = _write_zip(tmp_path / "m.bin", records)
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == f"{f} {what}"


def test_a_compressed_record_is_refused(tmp_path):
    f = tmp_path / "m.bin"
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a/data.pkl", b"\x80\x02}.")
        z.writestr("a/version", b"3")
    with pytest.raises(WeightsError, match="has record 'a/data.pkl' compressed or encrypted, as torch.save never"):
        read_torch_file(f)


# ------------------------------------------------------------------------------------- hostile pickles, one line each
_NOT_SD = "holds a data.pkl that is not a state dict as torch.save writes it"


@pytest.mark.parametrize("where,what", [
    ("size", "a tensor's size is ((((...),),),), not a tuple of whole numbers"),
    ("hooks", "a tensor's backward hooks are {'k': {'k': {'k': {...}}}}, not the empty OrderedDict torch.save writes"),
    ("persistent id", "persistent id ((((...),),),) is not ('storage', type, key, location, numel)"),
])
def test_objects_nested_deeper_than_python_recurses_are_named_in_one_line(tmp_path, where, what):
    """100,000 nested tuples (or dicts) cost 2 (or 8) bytes of pickle a level, far deeper than repr() recurses: the
    message quoting them was a RecursionError's traceback. Now the first levels are quoted."""
    n = 100_000
    deep = b")" + b"\x85" * n  # EMPTY_TUPLE, then TUPLE1 around it n times
    pkl = {"size": _pickled_state_dict(w=b"ctorch._utils\n_rebuild_tensor_v2\n" + _t(
               _storage("0", 4), _i(0), deep, _t(_i(1)), b"\x89", _HOOKS) + b"R"),
           "hooks": _pickled_state_dict(w=_tensor(_storage("0", 4), 0, (4,), (1,),
                                                  hooks=(b"}" + _u("k")) * n + b"}" + b"s" * n)),
           "persistent id": b"\x80\x02" + deep + b"Q."}[where]
    f = _archive(tmp_path / "m.bin", pkl, {"0": _FOUR})
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == f"{f} {_NOT_SD} ({what})"


def test_an_object_shared_again_and_again_is_named_briefly(tmp_path):
    """A list holding another ten times over (the memo: 2 bytes each), four levels deep, under 100-character strings:
    its repr is 10,000 times the pickle, 10**(levels + 2) characters (at 8 levels, from a 10 KB file, bertfeat hung
    building it). Quoted now as a few items of a few levels, whatever it holds."""
    def shared(level: int) -> bytes:  # list `level`, memoized as `level`, holds list `level - 1` ten times
        if level == 0:
            return b"](" + _u("x" * 100) * 10 + b"eq\x00"
        return b"](" + shared(level - 1) + (b"h" + bytes([level - 1])) * 9 + b"eq" + bytes([level])

    f = _archive(tmp_path / "m.bin", b"\x80\x02" + shared(3) + b"Q.")
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} {_NOT_SD} (persistent id [[[[...], [...], [...], [...], [...], [...], ...], [[...], "
                            "[...], [...], [...... is not ('storage', type, key, location, numel))")


def test_a_persistent_id_is_quoted_with_its_storage_class_by_name(tmp_path):
    f = _archive(tmp_path / "m.bin", b"\x80\x02" + _t(_u("storage"), b"ctorch\nFloatStorage\n", _u("0"), _u("cpu")) +
                 b"Q.")
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} {_NOT_SD} (persistent id ('storage', torch.FloatStorage, '0', 'cpu') is not "
                            "('storage', type, key, location, numel))")


@pytest.mark.parametrize("size,stride,want", [
    ((1, 4), (2**62, 1), np.arange(4, dtype=np.float32).reshape(1, 4)),
    ((0, 5), (2**70, 1), np.zeros((0, 5), np.float32)),
])
def test_the_stride_of_a_dimension_that_never_steps_is_any(tmp_path, size, stride, want):
    """A dimension of size 1 (or 0) never steps, so torch keeps whatever stride it had (torch.load gives these
    tensors): it was an OverflowError's traceback (NumPy's strides are C longs). Read as torch reads them."""
    f = _archive(tmp_path / "m.bin", _pickled_state_dict(w=_tensor(_storage("0", 4), 0, size, stride)), {"0": _FOUR})
    got = read_torch_file(f)["w"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("size,what", [
    ((0, 2**62), "holds a tensor of size (0, 4611686018427387904), which NumPy cannot hold ("),
    ((0, 2**70), "holds a tensor of size (0, 1180591620717411303424), which NumPy cannot hold ("),
    ((1,) * 65, "holds a tensor of 65 dimensions, more than NumPy's 64"),
    ((2**31 - 1,) * 100_000, "holds a tensor of 100,000 dimensions, more than NumPy's 64"),
])
def test_a_shape_numpy_cannot_hold_is_refused_in_one_line(tmp_path, size, what):
    """An empty tensor whose other sizes NumPy cannot hold (an OverflowError's traceback, or 'could not be read as a
    torch.save zip archive ... truncated or damaged'), 65 dimensions (the same), 100,000 large sizes (700 KB of
    pickle: 8 s multiplying them, then a 2 MB message line): each one line, at once."""
    f = _archive(tmp_path / "m.bin", _pickled_state_dict(w=_tensor(_storage("0", 4), 0, size, (1,) * len(size))),
                 {"0": _FOUR})
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what.startswith(f"{f} {what}") and len(e.value.what) < 300 and "\n" not in e.value.what


def test_a_storage_key_is_quoted_on_one_line(tmp_path):
    """The key of a storage viewed as two dtypes is a string of the pickle (a line break, any length): cut to one line."""
    key = "0\n" + "k" * 10_000
    f = _archive(tmp_path / "m.bin", _pickled_state_dict(a=_tensor(_storage(key, 4), 0, (4,), (1,)),
                                                         b=_tensor(_storage(key, 8, "HalfStorage"), 0, (8,), (1,))),
                 {key: _FOUR})
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} views storage '0 kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...' as float32 of 4 elements and "
                            "as float16 of 8")


def _refused_with_peak(f, tries: int = 3):
    """read_torch_file(f) refused: -> (the pytest ExceptionInfo, the peak bytes Python allocated meanwhile). The
    least of ``tries`` reads: tracemalloc counts every thread's allocations, and a peak test failed once in a run of
    the model tests with two workers, never alone (another thread of the worker is the likely cause)."""
    import tracemalloc

    peaks = []
    for _ in range(tries):
        tracemalloc.start()
        try:
            with pytest.raises(WeightsError) as e:
                read_torch_file(f)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return e, min(peaks)


# ------------------------------------------------------------------------------------ memory bounded by the file
@pytest.mark.parametrize("shared", ["storage", "tensor"])
def test_one_storage_viewed_under_many_names_is_refused_before_copying(tmp_path, shared):
    """A 1 MB storage viewed whole under 100 names (each ~60 bytes of pickle through the memo: the storage's, or the
    tensor's itself): bertfeat copied each view out, 100 MB from a 1 MB file (a few KB more of pickle: gigabytes).
    The copies may hold twice the values of the storages they view (a weight and its transpose); beyond, refused
    before any is made."""

    n = 1 << 18
    first = _tensor(_storage("0", n) + b"q\x01", 0, (n,), (1,)) + b"q\x02"
    again = {"storage": _tensor(b"h\x01", 0, (n,), (1,)), "tensor": b"h\x02"}[shared]
    f = _archive(tmp_path / "m.bin", _pickled_state_dict(w0=first, **{f"w{i}": again for i in range(1, 100)}),
                 {"0": np.zeros(n, "<f4").tobytes()})
    e, peak = _refused_with_peak(f)
    assert e.value.what == (f"{f} holds tensors of 26,214,400 values in all, more than twice the 262,144 values of the "
                            "storages they view (the same values under many names), as a module's weights never are")
    assert peak < 3 * 4 * n, peak


def test_a_storage_viewed_twice_whole_is_read(tmp_path):
    """Twice the storage's values (a weight and its transpose, as in the torch test above): read, each its own array."""
    f = _archive(tmp_path / "m.bin", _pickled_state_dict(w=_tensor(_storage("0", 4) + b"q\x01", 0, (2, 2), (2, 1)),
                                                         t=_tensor(b"h\x01", 0, (2, 2), (1, 2))), {"0": _FOUR})
    got = read_torch_file(f)
    np.testing.assert_array_equal(got["w"], [[0, 1], [2, 3]])
    np.testing.assert_array_equal(got["t"], [[0, 2], [1, 3]])
    assert not np.shares_memory(got["w"], got["t"]) and got["t"].flags.c_contiguous


def test_a_data_pkl_larger_than_a_state_dict_needs_is_refused_unread(tmp_path):
    """Each byte of a pickle may cost ~100 bytes of memory as the objects it makes (a MARK: a list; MEMOIZE: a memo
    entry): 10 MB of MARKs took 900 MB and 5 s. A state dict's pickle takes some 140 bytes a tensor: over 1 MiB
    (7,000 tensors; a Dense has 2 or 3) is refused before it is read."""
    f = _archive(tmp_path / "m.bin", b"\x80\x02" + b"(" * (1 << 20) + b"}.")
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} has a data.pkl of 1,048,580 bytes, more than a state dict's pickle takes (about 140 a "
                            "tensor; bertfeat reads up to 1,048,576)")


# ----------------------------------------------------------------------------- zip archives torch does not read
def test_a_zip_archive_after_other_bytes_is_refused(tmp_path):
    """zipfile finds an archive at the end of any file; torch.load reads a zip only when the file starts with its
    first record (else it tries the legacy format, and fails). bertfeat read the tensors torch.load cannot."""
    good = _archive(tmp_path / "good.bin", _pickled_state_dict(w=_tensor(_storage("0", 4), 0, (4,), (1,))), {"0": _FOUR})
    np.testing.assert_array_equal(read_torch_file(good)["w"], [0, 1, 2, 3])
    f = tmp_path / "m.bin"
    f.write_bytes(b"#!/bin/sh\necho hello\n" + good.read_bytes())
    with zipfile.ZipFile(f) as z:
        assert "a/data/0" in z.namelist()  # still an archive to zipfile
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} is a zip archive after other bytes, which torch.load does not read (a torch.save "
                            "file starts with its first record)")


def test_a_storage_record_shorter_than_its_entry_says_is_refused(tmp_path):
    """data/0's central directory entry: 16 bytes (the storage's 4 float32 values), but a compressed size of 8 (its
    CRC of those 8): zipfile reads 8 bytes, and bertfeat gave a tensor of the 2 values there as if all were well."""
    f = _archive(tmp_path / "m.bin", _pickled_state_dict(w=_tensor(_storage("0", 4), 0, (2,), (1,))), {"0": _FOUR[:8]})
    raw = bytearray(f.read_bytes())
    at = raw.index(b"PK\x01\x02")  # the first central directory entry
    while raw[at + 46:at + 46 + struct.unpack_from("<H", raw, at + 28)[0]] != b"a/data/0":  # its name
        at = raw.index(b"PK\x01\x02", at + 1)
    struct.pack_into("<I", raw, at + 24, 16)  # its uncompressed size; the compressed size stays 8
    f.write_bytes(bytes(raw))
    with zipfile.ZipFile(f) as z:
        assert z.getinfo("a/data/0").file_size == 16 and len(z.read("a/data/0")) == 8
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} names storage '0' of 4 float32 values (16 bytes), but record data/0 holds 8 bytes: "
                            "the file is damaged")


@pytest.mark.parametrize("pkl,what", [
    (b"\x80\x02}(J\x01\x00\x00\x00" + _tensor(_storage("0", 4), 0, (4,), (1,)) + b"u.",
     "holds a tensor under the key 1, where a state dict holds tensors under names"),
    (_pickled_state_dict(w=_storage("0", 4)), "holds entry 'w', a storage no tensor views where a state dict holds a "
                                              "tensor under a name"),
    (_pickled_state_dict(w=b"N"), "holds entry 'w', None where a state dict holds a tensor under a name"),
    (b"\x80\x02ctorch\nFloatStorage\n.", "holds the global torch.FloatStorage, uncalled, not a state dict (names -> "
                                         "tensors)"),
    (b"\x80\x02J\x01\x00\x00\x00.", "holds an int, not a state dict (names -> tensors)"),
    (b"\x80\x02}}b.", f"{_NOT_SD} (it sets the state of something other than an OrderedDict)"),
], ids=["int key", "bare storage", "None", "storage class", "int", "BUILD on a dict"])
def test_what_the_pickle_holds_instead_is_said_in_torchs_words(tmp_path, pkl, what):
    """A tensor under a number was 'entry 1, a _Tensor where a state dict holds a tensor': the value blamed, in the
    name of bertfeat's stand-in class; so were a storage (_Storage), None (NoneType), a storage class (_StorageType)."""
    f = _archive(tmp_path / "m.bin", pkl, {"0": _FOUR})
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == f"{f} {what}"


def _nested_records(path: Path, levels: int) -> Path:
    """A zip whose record data/0 holds (as its data) data/1's header and data, which holds data/2's ...: the quoted
    overlap of a zip bomb, made of stored records. Each record's data is all the file's from it on, so reading
    ``levels`` of them reads about levels / 2 times the file. data.pkl: a state dict of one tensor on each."""
    import zlib

    def local(name: bytes, data: bytes, extra: int = 0) -> bytes:  # a record's local header
        crc, n = zlib.crc32(data), len(data)
        return b"PK\x03\x04" + struct.pack("<5H3I2H", 20, 0, 0, 0, 0x21, crc, n, n, len(name), extra) + name + b"\0" * extra

    def central(name: bytes, data: bytes, offset: int) -> bytes:  # its entry in the central directory
        crc, n = zlib.crc32(data), len(data)
        return b"PK\x01\x02" + struct.pack("<6H3I5H2I", 20, 20, 0, 0, 0, 0x21, crc, n, n, len(name), 0, 0, 0, 0, 0,
                                            offset) + name

    names = [f"a/data/{i:04d}".encode() for i in range(levels)]
    blob = b"\0" * 4
    for name in reversed(names):  # innermost first; 44-byte headers (3 bytes of extra field): whole float32 values
        blob = local(name, blob, extra=3) + blob
    datas = [blob[44 * (i + 1):] for i in range(levels)]
    pkl = _pickled_state_dict(**{f"w{i}": _tensor(_storage(f"{i:04d}", len(d) // 4), 0, (len(d) // 4,), (1,))
                                 for i, d in enumerate(datas)})
    front, entries = b"", b""
    for name, data in ((b"a/data.pkl", pkl), (b"a/version", b"3")):
        entries += central(name, data, len(front))
        front += local(name, data) + data
    entries += b"".join(central(name, d, len(front) + 44 * i) for i, (name, d) in enumerate(zip(names, datas)))
    body = front + blob
    end = b"PK\x05\x06" + struct.pack("<4H2IH", 0, 0, levels + 2, levels + 2, len(entries), len(body), 0)
    path.write_bytes(body + entries + end)
    return path


def test_storage_records_nested_in_each_other_are_refused_before_reading_past_the_file(tmp_path):
    """300 records each holding the next (a 75 KB file): their storages held 2 MB, 26 times the file (2,000 levels, a
    309 KB file: 84 MB; quadratic in the levels). The storages may hold no more bytes than the file: refused at the
    first record past it, before reading it."""

    f = _nested_records(tmp_path / "m.bin", 300)
    with zipfile.ZipFile(f) as z:  # zipfile reads every record, each to its CRC (no overlap check in Python 3.11)
        nested = sum(len(z.read(n)) for n in z.namelist() if "/data/" in n)
    assert nested > 25 * f.stat().st_size
    e, peak = _refused_with_peak(f)
    assert e.value.what == (f"{f} has storage records that overlap: with storage '0005' they would hold more bytes "
                            f"than the file's {f.stat().st_size:,} (a zip bomb's trick): it is damaged or made to "
                            "exhaust memory")
    assert peak < nested / 4, (peak, nested)  # (the archive's entries and the pickle: a few times the file)


# ------------------------------------------------------------------------ the legacy format (PyTorch before 1.6)
_SYS_INFO = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}


def _legacy_storage(key: str, numel: int, view: tuple | None = None, cls: str = "FloatStorage") -> bytes:
    """('storage', torch.FloatStorage, key, 'cpu', numel, view) as the legacy format's persistent id."""
    v = b"N" if view is None else _t(_u(view[0]), _i(view[1]), _i(view[2]))
    return _t(_u("storage"), f"ctorch\n{cls}\n".encode(), _u(key), _u("cpu"), _i(numel), v) + b"Q"


def _legacy(path: Path, main: bytes, storages: dict[str, bytes], *, sys_info=_SYS_INFO, keys=None, counts={},  # noqa: B006
            order: str = "<", tail: bytes = b"") -> Path:
    """torch.save's legacy layout built by hand: the magic number's, protocol version's and sys_info's pickles (a
    pickle's bytes, or an object to pickle), ``main``, the pickled key list, each storage as its int64 count of
    float32 elements (``order``: its byte order) and its bytes; ``tail`` after them."""
    info = sys_info if isinstance(sys_info, bytes) else pickle.dumps(sys_info, protocol=2)
    out = [pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2), pickle.dumps(1001, protocol=2), info, main,
           pickle.dumps(list(storages) if keys is None else keys, protocol=2)]
    for k, data in storages.items():
        out += [struct.pack(f"{order}q", counts.get(k, len(data) // 4)), data]
    path.write_bytes(b"".join(out) + tail)
    return path


def _one_legacy(path: Path, **kw) -> Path:
    """A legacy file of one tensor 'w' on storage '0' of 4 float32 values."""
    return _legacy(path, _pickled_state_dict(w=_tensor(_legacy_storage("0", 4), 0, (4,), (1,))), {"0": _FOUR}, **kw)


@pytest.mark.live
@pytest.mark.parametrize("protocol", [2, 4])
def test_the_legacy_format_reads_to_torchs_values(torch, tmp_path, protocol):
    """torch.save(sd, f, _use_new_zipfile_serialization=False), as PyTorch before 1.6 wrote every checkpoint (the
    hub's bert-base-uncased, roberta-base ...): float32, float16, bfloat16, float64, views sharing a storage (a tied
    decoder), 0-d and empty tensors, a Parameter: every value bit-equal to torch.load(weights_only=True)'s."""
    g = torch.Generator().manual_seed(3)
    w, b16 = torch.randn(6, 5, generator=g), torch.randn(4, 3, generator=g).bfloat16()
    sd = OrderedDict(
        word=w, decoder=w, transposed=w.t(), sliced=w[1:5:2, 1:4], scalar=torch.tensor(-2.75),
        half=torch.randn(7, generator=g).half(), half_scalar=torch.tensor(0.5).half(), bf16=b16, bf16_t=b16.t(),
        double=torch.randn(3, dtype=torch.float64, generator=g), empty=torch.empty(0, 3),
        param=torch.nn.Parameter(torch.randn(2, generator=g)), big=torch.randn(20, 20, generator=g))
    f = tmp_path / "pytorch_model.bin"
    torch.save(sd, f, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    assert f.read_bytes()[:2] == bytes([0x80, protocol]) and not zipfile.is_zipfile(f)
    # (torch's weights_only reader fails on protocol 4's framing in this format: the file is this test's own)
    ref = torch.load(f, weights_only=protocol == 2)
    got = read_torch_file(f)
    assert list(got) == list(ref) == list(sd)
    for k, t in ref.items():
        want = _reference(t)
        assert got[k].shape == want.shape and got[k].dtype == want.dtype, k
        np.testing.assert_array_equal(got[k], want, err_msg=k)
        np.testing.assert_array_equal(got[k], _reference(sd[k]), err_msg=k)
    assert got["decoder"] is got["word"]  # tied: one storage in the file, one array, as torch.load shares it
    assert got["scalar"].shape == () and got["half_scalar"].dtype == np.float32


@pytest.mark.live
def test_a_legacy_encoders_file_with_int64_position_ids(torch, tmp_path):
    """open_torch_file (an encoder's) reads the int64 buffer transformers < 4.31 saved, and bfloat16 as its bits."""
    from bertfeat.model.torchfile import open_torch_file

    g = torch.Generator().manual_seed(4)
    sd = {"embeddings.position_ids": torch.arange(512)[None], "w": torch.randn(3, 2, generator=g).bfloat16()}
    f = tmp_path / "pytorch_model.bin"
    torch.save(sd, f, _use_new_zipfile_serialization=False)
    names, get, stored16 = open_torch_file(f)
    assert names == list(sd) and stored16 == {"w"}
    ids = get("embeddings.position_ids")
    assert ids.dtype == np.int64 and np.array_equal(ids, sd["embeddings.position_ids"].numpy())
    assert np.array_equal(get("w", bits=True), sd["w"].view(torch.int16).numpy().view(np.uint16))


def test_a_legacy_storage_view_reads_as_torch_reads_it(tmp_path):
    """PyTorch before 1.6 saved a tensor on a storage view as (view key, offset, size) of its root storage: 'part'
    views elements 2 to 5 of storage 'r' (torch.load gives [3., 4.] for it too); the view named again is the same."""
    root = _legacy_storage("r", 6)
    view = _legacy_storage("r", 6, ("v", 2, 3))
    f = _legacy(tmp_path / "v.bin", _pickled_state_dict(whole=_tensor(root, 0, (6,), (1,)),
                                                         part=_tensor(view, 1, (2,), (1,)),
                                                         again=_tensor(view, 0, (3,), (1,))),
                {"r": np.arange(6, dtype="<f4").tobytes()})
    got = read_torch_file(f)
    assert {k: a.tolist() for k, a in got.items()} == {"whole": [0, 1, 2, 3, 4, 5], "part": [3, 4], "again": [2, 3, 4]}


def test_a_big_endian_writers_legacy_file(tmp_path):
    """On a big-endian machine PyTorch before 1.5 wrote the element count in its own order, the elements
    little-endian (torch's _write_file): read when sys_info says so; the same count in a little-endian writer's file
    disagrees with its pickle."""
    got = read_torch_file(_one_legacy(tmp_path / "be.bin", sys_info={**_SYS_INFO, "little_endian": False}, order=">"))
    assert got["w"].tolist() == [0, 1, 2, 3]
    f = _one_legacy(tmp_path / "le.bin", order=">")
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == (f"{f} holds {4 << 56:,} elements for storage '0' (1 of 1), whose pickle says 4: it is "
                            "damaged")


@pytest.mark.parametrize("where", ["main", "sys_info"])
def test_a_legacy_pickle_naming_another_global_is_refused_and_not_run(tmp_path, where):
    """os.system in the state dict's pickle or in the sys_info pickle before it: refused by name, never run."""
    import os

    marker = tmp_path / "ran"
    call = pickle.dumps(_Run(os.system, f"touch {marker}"), protocol=2)
    f = tmp_path / "pytorch_model.bin"
    if where == "main":
        _legacy(f, pickle.dumps({"w": _Run(os.system, f"touch {marker}")}, protocol=2), {})
    else:
        _one_legacy(f, sys_info=call)
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert not marker.exists()
    assert e.value.what.startswith(f"{f} names the global {os.system.__module__}.system in its pickle, which a plain "
                                   "state dict does not need: bertfeat refused it without running it")


_W = _pickled_state_dict(w=_tensor(_legacy_storage("0", 4), 0, (4,), (1,)))


@pytest.mark.parametrize("how,what", [
    ("cut in the pickle", "is cut short: it ends in its main pickle (a truncated download)"),
    ("cut in the count", "is cut short: it ends before storage '0' (1 of 1) (a truncated download)"),
    ("cut in the data", "is cut short: storage '0' (1 of 1) takes 16 bytes, 9 are left (a truncated download)"),
    ("count", "holds 5 elements for storage '0' (1 of 1), whose pickle says 4: it is damaged"),
    ("trailing", "has 3 bytes after its last storage, which torch.save never writes: it is damaged or another file "
                 "was appended to it"),
    ("unlisted", "names storage '0' its key list omits (no bytes for it): it is damaged"),
    ("unnamed", "lists storage '9' its pickle never names: it is damaged"),
    ("twice", "lists a storage twice: it is damaged"),
    ("view past", "views elements 2 to 7 of storage '0' of 4 elements: past its end"),
    ("sys_info", "has a sys_info pickle unlike torch.save's (protocol_version 1001, little_endian True or False, "
                 "type_sizes short 2, int 4, long 4 or 8): {'little_endian': 1, 'protocol_version': 1001, "
                 "'type_sizes': {'int': 4, 'long..."),
    ("no magic", "starts with a pickle of {'w': 1}, not torch.save's magic number: it is a pickle but not a "
                 "torch.save checkpoint"),
    ("big pickle", "has a main pickle of more than 1,048,576 bytes, more than torch.save writes (a state dict's "
                   "takes about 140 a tensor)"),
])
def test_a_damaged_legacy_file_is_refused_in_one_line(tmp_path, how, what):
    f = tmp_path / "pytorch_model.bin"
    good = _one_legacy(tmp_path / "good.bin").read_bytes()
    at_data = len(good) - 16
    if how.startswith("cut"):
        f.write_bytes(good[:{"cut in the pickle": 200, "cut in the count": at_data - 4, "cut in the data": at_data + 9}[how]])
    elif how == "count":
        _one_legacy(f, counts={"0": 5})
    elif how == "trailing":
        _one_legacy(f, tail=b"abc")
    elif how in ("unlisted", "unnamed", "twice"):
        _one_legacy(f, keys={"unlisted": [], "unnamed": ["0", "9"], "twice": ["0", "0"]}[how])
    elif how == "view past":
        _legacy(f, _pickled_state_dict(w=_tensor(_legacy_storage("0", 4, ("v", 2, 5)), 0, (1,), (1,))), {"0": _FOUR})
    elif how == "sys_info":
        _one_legacy(f, sys_info={**_SYS_INFO, "little_endian": 1})
    elif how == "no magic":
        f.write_bytes(pickle.dumps({"w": 1}, protocol=2))
    else:
        _legacy(f, b"\x80\x02" + _u("x" * (2 << 20)) + b".", {})
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == f"{f} {what}"
    assert "\n" not in str(e.value)
    resave = "re-save the module's weights where sentence-transformers is installed"
    assert e.value.fix.startswith(resave if how in ("view past", "sys_info", "no magic", "big pickle")
                                  else "re-download the model, or " + resave)


@pytest.mark.live
def test_a_truncated_legacy_file_torch_wrote_is_refused(torch, tmp_path):
    f = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(64, 64)}, f, _use_new_zipfile_serialization=False)
    raw = f.read_bytes()
    f.write_bytes(raw[:-100])
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what.startswith(f"{f} is cut short: storage '") and e.value.what.endswith(
        "(1 of 1) takes 16,384 bytes, 16,284 are left (a truncated download)")


def test_the_tar_format_of_pytorch_before_0_1_10_is_refused(tmp_path):
    """torch.save before PyTorch 0.1.10 wrote a tar of pickles, which torch reads only by running them: refused."""
    import tarfile

    f = tmp_path / "pytorch_model.bin"
    with tarfile.open(f, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("sys_info")
        data = pickle.dumps(_SYS_INFO, protocol=2)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    assert e.value.what == f"{f} is in torch.save's .tar format of PyTorch before 0.1.10, which bertfeat does not read"
    assert e.value.fix.startswith("if you trust the file, re-save it where PyTorch is installed (torch reads this "
                                  "format only by running its pickle): torch.save(torch.load(path, "
                                  "weights_only=False), path); or re-save the module's weights")


def test_a_legacy_file_of_pytorch_0_3_reads_as_torch_reads_it(tmp_path):
    """PyTorch 0.1.10 to 0.3 saved a tensor as torch._utils._rebuild_tensor(storage, offset, size, stride), which
    torch.load(weights_only=True) reads: read too (it was refused as 'not only tensors'), a transposed view included."""
    def v1(storage: bytes, offset: int, size: tuple, stride: tuple) -> bytes:
        return b"ctorch._utils\n_rebuild_tensor\n" + _t(storage, _i(offset), _t(*map(_i, size)), _t(*map(_i, stride))) + b"R"

    eight = _legacy_storage("0", 8)
    f = _legacy(tmp_path / "pytorch_model.bin", _pickled_state_dict(w=v1(eight, 0, (2, 3), (3, 1)),
                                                                    t=v1(eight, 0, (3, 2), (1, 3)),
                                                                    tail=v1(eight, 6, (2,), (1,))),
                {"0": np.arange(8, dtype="<f4").tobytes()})
    got = read_torch_file(f)
    assert {k: a.tolist() for k, a in got.items()} == {"w": [[0, 1, 2], [3, 4, 5]], "t": [[0, 3], [1, 4], [2, 5]],
                                                       "tail": [6, 7]}


@pytest.mark.parametrize("fmt", ["legacy", "zip"])
def test_a_file_whose_byte_257_spells_ustar_is_not_taken_for_the_tar_format(tmp_path, fmt):
    """The .tar format's test (its header's magic at byte 257) must not refuse a legacy or zip file whose tensor name
    happens to put 'ustar' there ('mustard'): they start with a pickle's or a zip's magic, as no tar does."""
    for pad in range(300):
        name = "x" * pad + "mustard"
        pkl = _pickled_state_dict(**{name: _tensor((_legacy_storage if fmt == "legacy" else _storage)("0", 4),
                                                   0, (4,), (1,))})
        f = (_legacy(tmp_path / "m.bin", pkl, {"0": _FOUR}) if fmt == "legacy"
             else _archive(tmp_path / "m.bin", pkl, {"0": _FOUR}))
        if f.read_bytes()[257:262] == b"ustar":
            break
    else:
        pytest.fail("no padding put 'ustar' at byte 257")
    assert read_torch_file(f)[name].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("where", ["magic", "sys_info", "keys"])
@pytest.mark.parametrize("name", ["torch.FloatStorage", "collections.OrderedDict"])
def test_a_state_dicts_global_in_a_legacy_header_pickle_is_named_as_out_of_place(tmp_path, where, name):
    """A global a state dict names (a storage class bertfeat reads, OrderedDict), in a pickle where torch.save names
    none: said so, not 'a dtype bertfeat does not read (it reads float32 ...)' nor 'not only tensors'."""
    module, attr = name.rsplit(".", 1)
    pkl = b"\x80\x02c" + f"{module}\n{attr}\n".encode() + b"."
    f = tmp_path / "pytorch_model.bin"
    if where == "magic":
        good = _one_legacy(tmp_path / "good.bin").read_bytes()
        f.write_bytes(pkl + good[len(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)):])
    elif where == "sys_info":
        _one_legacy(f, sys_info=pkl)
    else:
        _one_legacy(f)
        keys = pickle.dumps(["0"], protocol=2)
        f.write_bytes(f.read_bytes().replace(keys, pkl))
    with pytest.raises(WeightsError) as e:
        read_torch_file(f)
    what = {"magic": "magic number pickle", "sys_info": "sys_info pickle", "keys": "storage key list"}[where]
    assert e.value.what == (f"{f} holds a pickle that is not a state dict as torch.save writes it (its {what} names "
                            f"the global {name}, where torch.save's names none)")


def test_a_legacy_file_python_2_wrote_reads_as_torch_reads_it(tmp_path):
    """PyTorch up to 1.4 ran on Python 2, whose pickles hold str as SHORT_BINSTRING / BINSTRING and build an
    OrderedDict from its list of [key, value] pairs (the state dict, each tensor's empty hooks): torch.load reads such a
    file to these values, as bertfeat does now (it refused SHORT_BINSTRING as not torch.save's)."""
    def s(x: str) -> bytes:  # a Python 2 str
        return b"U" + bytes([len(x)]) + x.encode() if len(x) < 256 else b"T" + struct.pack("<I", len(x)) + x.encode()

    def od(*pairs: tuple[bytes, bytes]) -> bytes:  # Python 2's OrderedDict.__reduce__: (OrderedDict, ([[k, v], ...],))
        items = b"](" + b"".join(b"](" + k + v + b"e" for k, v in pairs) + b"e" if pairs else b"]"
        return b"ccollections\nOrderedDict\n" + items + b"\x85R"

    def tensor(offset: int, size: tuple, stride: tuple) -> bytes:
        storage = _t(s("storage"), b"ctorch\nFloatStorage\n", s("0"), s("cpu"), _i(4), b"N") + b"Q"
        return (b"ctorch._utils\n_rebuild_tensor_v2\n" + _t(storage, _i(offset), _t(*map(_i, size)), _t(*map(_i, stride)),
                                                              b"\x89", od()) + b"R")

    long_name = "encoder." * 40 + "bias"  # over 255 bytes: BINSTRING
    main = b"\x80\x02" + od((s("w"), tensor(0, (2, 2), (2, 1))), (s(long_name), tensor(2, (2,), (1,)))) + b"."
    info = (b"\x80\x02}(" + s("protocol_version") + b"M\xe9\x03" + s("little_endian") + b"\x88" + s("type_sizes")
            + b"}(" + s("short") + b"K\x02" + s("int") + b"K\x04" + s("long") + b"K\x08uu.")
    f = _legacy(tmp_path / "pytorch_model.bin", main, {"0": _FOUR}, sys_info=info)
    f.write_bytes(f.read_bytes().replace(pickle.dumps(["0"], protocol=2), b"\x80\x02]" + s("0") + b"a."))
    got = read_torch_file(f)
    assert {k: a.tolist() for k, a in got.items()} == {"w": [[0, 1], [2, 3]], long_name: [2, 3]}
