"""torch.save's checkpoints (zip and legacy format), read without PyTorch as ``torch.load(f, weights_only=True)``
reads a state dict.

What it owns: torch.save's ``pytorch_model.bin`` read as a state dict, and the finite check of a tensor both
formats' readers share (check_finite). Two uses:
  * a sentence-transformers module's (read_torch_file -> {name: array}, as weights.read_safetensors_file reads a
    ``model.safetensors``: each tensor checked finite, float16 and bfloat16 widened exactly to float32). Older
    sentence-transformers saved a Dense module's weights only so (distiluse-base-multilingual-cased-v1/v2, LaBSE);
  * the encoder's, when its folder has no safetensors weights (transformers before 4.35 saved ``pytorch_model.bin``,
    or its shards, by default): open_torch_file gives weights.read_tensors what a safetensors file gives it (names,
    get one tensor, the names stored in bfloat16), so every name table, shape check and bf16 load is the same. It
    reads int64 and int32 buffers too (transformers < 4.31 saved ``embeddings.position_ids``); a module's file may not hold one.

The safety rule: the pickle in the file is never given to Python's unpickler. A small interpreter of its opcodes
(_Unpickler, as torch's own _weights_only_unpickler) resolves ONLY the globals a plain state dict names (_GLOBALS:
collections.OrderedDict, torch._utils._rebuild_tensor_v2 (and _rebuild_tensor, PyTorch 0.1.10 to 0.3's),
_rebuild_parameter (_with_state), and the storage classes
of float32, float16, bfloat16 and float64, the dtypes a module's weights are saved in), each to a stand-in of its own,
never to an import. Any other global (os.system, a module's class, a tensor subclass's rebuilder ...) is refused by
name before anything is built, and so is every opcode a state dict does not use: nothing in the file is run. A
storage (persistent_load) is read from the archive's ``data/KEY`` record (the legacy format: from its place after
the pickle) as raw bytes of its dtype, nothing else. Every pickle of the legacy format goes through the same
interpreter; those before the state dict's (magic number, protocol version, sys_info) and the key list after
it resolve no global at all.

The format (torch/serialization.py ``_save`` / ``_load``, caffe2's PyTorchStreamReader):
  * a zip of stored records in one top folder of any name (torch names it after the file it saved to: ``archive``
    for a buffer, ``pytorch_model`` for pytorch_model.bin); the first record's folder is it, as torch reads it;
  * ``version`` (or ``.data/version``): the archive's format, 1 to 10 as torch reads it;
  * ``byteorder``: ``little`` or ``big`` (absent: little, as torch >= 2.1 reads it);
  * ``data.pkl``: the pickle. A tensor is ``_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks
    [, metadata])``, offset and strides counted in elements (a transpose or slice saved as the view it is; size ()
    and stride () for a 0-d tensor); a storage is ``('storage', torch.FloatStorage, key, location, numel)``, the
    record ``data/KEY`` of numel elements, read once and shared by every tensor viewing it.

The legacy format (PyTorch before 1.6, or ``_use_new_zipfile_serialization=False``; torch/serialization.py
``_legacy_save`` / ``_legacy_load``): the hub's pytorch_model.bin of bert-base-uncased, roberta-base ... One file of
pickles and bytes in a row:
  * pickles of torch's magic number (0x1950A86A20F9469CFC6C), of its protocol version (1001) and of sys_info
    (protocol_version, little_endian, type_sizes: short 2, int 4, long 4 or 8), each checked;
  * the state dict's pickle (Python 2's too, PyTorch up to 1.4: its str as BINSTRING, an OrderedDict built from its
    [key, value] pairs), as data.pkl but for its persistent ids, ``('storage', torch.FloatStorage, key,
    location, numel, view)``: view None, or ``(view key, offset, size)`` for a tensor on a storage view (PyTorch
    before 1.6 wrote them; later never): a storage of its own, elements offset to offset + size of storage ``key``;
  * the pickled list of the storage keys (each the pickle names, once);
  * per key in that order, the storage (torch's ``_write_file``): an int64 count of elements, then the elements, both
    little-endian whatever the writer's order (PyTorch before 1.5 on a big-endian machine wrote the count in its own
    order: read when sys_info says so). The count must be the pickle's numel, the file must end with the last one.
Refused, each with a line saying how to re-save or re-download: torch.save's .tar format (before PyTorch 0.1.10, which
torch reads only by running its pickle), a TorchScript archive, a compressed or encrypted record, a truncated file, a
count unlike the pickle's, bytes after the last storage, a storage of another dtype, a tensor with its conj or neg
bit set, a view reaching past its storage or holding more elements than it, anything but one flat dict of names to
tensors.

Memory: an encoder's load holds the file's size and the arrays copied out (each storage let go once its last tensor
is copied: a bert-base .bin loads at the peak RSS of its safetensors copy in fp32, 796 vs 792 MB; in bf16 541 vs 333
MB, the file's bytes held at the start). Always within a few times the file's size: records are read as stored (never inflated), the storages no more
bytes than the file (records nested in others, a zip bomb's trick, would read it many times), data.pkl up to 1 MiB
(_MAX_PICKLE; the legacy format: its header's pickles up to 4 KiB, the state dict's and the key list up to 1 MiB
each, the storages read in order, each only when the bytes left hold it), and each tensor is copied out of its storage only after the whole pickle is read, the copies holding at
most twice the values of the storages they view (_arrays). Messages quote the pickle's objects a few levels deep
(_show), however deep or shared they are.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import reprlib
import struct
import zipfile
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import WeightsError, one_line
from ..ops.bf16 import from_bf16

#: how to get a file bertfeat reads (the fix of every refusal)
RESAVE = ("re-save the module's weights where sentence-transformers is installed: "
          "SentenceTransformer(dir).save(dir, safe_serialization=True) writes model.safetensors")
#: torch.save's legacy format starts with a pickle of its magic number, then one of its protocol version
_LEGACY_NUMBER, _LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001
_MAX_HEADER = 1 << 12  # the magic number's, protocol version's and sys_info's pickles: some 140 bytes in all
_VERSIONS = range(1, 11)  # caffe2's kMinSupportedFileFormatVersion .. kMaxSupportedFileFormatVersion
_BYTEORDERS = {b"little": "<", b"big": ">"}
_MAX_DIMS = 64  # the most dimensions a NumPy array has (NumPy 2)
#: the largest data.pkl read: a state dict's takes some 140 bytes a tensor, and each of its bytes may cost up to ~100
#: of memory as objects (a MARK, a memo entry)
_MAX_PICKLE = 1 << 20


NONFINITE_FIX = "the checkpoint is corrupt or was saved from a diverged training run: re-download or re-save it"


def check_finite(t: np.ndarray, key: str, where: Path, bf16_bits: bool = False) -> None:
    """Refuse a floating-point tensor holding NaN or infinity, named as the checkpoint names it.

    A float tensor costs a min and a max (NaN propagates through both; no temporary array): bert-base's 110 M values
    in about 30 ms. ``bf16_bits``: ``t`` holds bf16 bit patterns (uint16), judged by their exponent."""
    if bf16_bits:
        mag = t & np.uint16(0x7FFF)  # the bits without the sign: all-ones exponent = inf (0x7F80) or NaN (above)
        if mag.max(initial=0) < 0x7F80:
            return
        n_nan, n_inf = int(np.count_nonzero(mag > 0x7F80)), int(np.count_nonzero(mag == 0x7F80))
    elif t.dtype.kind != "f" or t.size == 0 or (np.isfinite(t.min()) and np.isfinite(t.max())):
        if t.dtype.kind == "f" and t.dtype.itemsize > 4 and t.size:  # float64: finite here, but read as float32
            big = max(abs(float(t.min())), abs(float(t.max())))
            if big > float(np.finfo(np.float32).max):
                raise WeightsError(f"{where}: tensor '{key}' holds a value beyond float32's range ({big:.3g}), which "
                                   "would be infinite as bertfeat reads it", NONFINITE_FIX)
        return
    else:
        n_nan, n_inf = int(np.count_nonzero(np.isnan(t))), int(np.count_nonzero(np.isinf(t)))
    raise WeightsError(f"{where}: tensor '{key}' has {n_nan + n_inf:,} NaN or infinite value(s) of {t.size:,} "
                       f"({n_nan:,} NaN, {n_inf:,} infinite)", NONFINITE_FIX)


class _StorageType:
    """What GLOBAL torch.FloatStorage (...) gives: a dtype, never torch's class."""

    def __init__(self, name: str, dtype, label: str):
        self.name, self.dtype, self.label = name, np.dtype(dtype), label

    def __repr__(self) -> str:
        return self.name


#: the storage classes a module's weights are saved in; bfloat16 is read as its bit patterns and widened exactly
_STORAGES = {f"torch.{n}": _StorageType(f"torch.{n}", dt, label) for n, dt, label in (
    ("FloatStorage", np.float32, "float32"), ("HalfStorage", np.float16, "float16"),
    ("BFloat16Storage", np.uint16, "bfloat16"), ("DoubleStorage", np.float64, "float64"))}
#: an encoder's checkpoint may hold integer buffers too: transformers before 4.31 saved embeddings.position_ids
#: (weights.ALLOWED_UNUSED) as int64, a converted checkpoint may hold them as int32 (its safetensors as I64 / I32)
_INT_STORAGES = {f"torch.{n}": _StorageType(f"torch.{n}", dt, label) for n, dt, label in (
    ("LongStorage", np.int64, "int64"), ("IntStorage", np.int32, "int32"))}


@dataclass(frozen=True)
class _Use:
    """What a file is read as: the storage classes resolved, the words messages call its tensors, the fix."""

    storages: dict
    noun: str
    resave: str

    @property
    def globals(self) -> dict:
        return {**_GLOBALS, **self.storages}


#: how to get an encoder's file bertfeat reads (the fix of every refusal of one)
ENCODER_RESAVE = ("re-save the model where transformers is installed: AutoModel.from_pretrained(dir)."
                  "save_pretrained(dir) writes model.safetensors (a sentence-transformers model: "
                  "SentenceTransformer(dir).save(dir))")


class _Storage:
    """A storage persistent_load named: ``numel`` elements of ``kind``; ``data``, its elements in the file's byte order,
    once read (the zip format reads it at once, the legacy format after its pickle). A legacy storage view is a
    _Storage of its own, elements ``offset`` to ``offset + numel`` of ``root`` (else ``root`` is itself)."""

    def __init__(self, key: str, kind: _StorageType, numel: int, data: np.ndarray | None = None,
                 root: "_Storage | None" = None, offset: int = 0):
        self.key, self.kind, self.numel, self.data = key, kind, numel, data
        self.root, self.offset = root or self, offset
        self.waiting: list[_Tensor] = []  # tensors viewing it made before its data was read

    def __repr__(self) -> str:
        return f"storage '{self.key}'"

    def fill(self, data: np.ndarray) -> None:
        """Its data read: every tensor made on it before gets its view."""
        self.data = data
        for t in self.waiting:
            t.build()
        self.waiting.clear()


class _Tensor:
    """A tensor _rebuild_tensor_v2 made (the only thing a state dict's values may be): ``view``, the elements of its
    storage it views (once the storage's data is read), copied out only once the whole pickle is read (_arrays)."""

    def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.view: np.ndarray | None = None
        if storage.data is None:
            storage.waiting.append(self)
        else:
            self.build()

    def build(self) -> None:
        data, size = self.storage.data, self.size
        # a dimension of size 0 or 1 never steps: its stride (torch keeps any) is 0 here, within NumPy's range
        strides = [st * data.itemsize if s > 1 else 0 for s, st in zip(size, self.stride)]
        try:
            self.view = np.lib.stride_tricks.as_strided(data[self.offset:], shape=size, strides=strides)
        except (ValueError, OverflowError) as e:  # more than NumPy's 64 dimensions; an empty shape too large for it
            raise _Refused(f"holds a tensor of size {_show(size)}, which NumPy cannot hold ({one_line(e)})") from None

    def __repr__(self) -> str:
        return f"tensor of size {self.size}"


class _Refused(Exception):
    """The file asks for something a state dict does not hold (``what``: the words after the file's name)."""


class _Invalid(Exception):
    """A pickle is not one as torch.save writes it."""


class _Cut(_Invalid):
    """A pickle ends before its STOP opcode (the legacy format tells a truncated file from an oversized pickle)."""


class _Brief(reprlib.Repr):
    """A bounded repr for messages (a few items, a few levels deep): a small pickle's memo can nest its objects deeper
    than repr recurses, or share one so often that its whole repr would never end."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, 40, 40

    repr_OrderedDict = reprlib.Repr.repr_dict  # (else repr() of the whole of it)


def _show(v) -> str:
    return one_line(_Brief().repr(v), 80)


def _ints(v, what: str) -> tuple[int, ...]:
    if not isinstance(v, tuple) or not all(type(x) is int and x >= 0 for x in v):
        raise _Invalid(f"a tensor's {what} is {_show(v)}, not a tuple of whole numbers")
    return v


def _no_hooks(hooks) -> None:
    """torch saves an empty OrderedDict of backward hooks (Note [Don't serialize hooks])."""
    if type(hooks) not in (dict, OrderedDict) or hooks:
        raise _Invalid(f"a tensor's backward hooks are {_show(hooks)}, not the empty OrderedDict "
                       "torch.save writes")


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None) -> _Tensor:
    """torch._utils._rebuild_tensor_v2's stand-in: the view (offset, size, stride in elements) of ``storage``."""
    if not isinstance(storage, _Storage) or type(offset) is not int or offset < 0 or type(requires_grad) is not bool:
        raise _Invalid("a tensor is rebuilt from something other than a storage, an offset and a requires_grad flag")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    _no_hooks(hooks)
    if metadata is not None and (not isinstance(metadata, dict) or any(metadata.values())):
        raise _Refused(f"holds a tensor with metadata {_show(metadata)} (its conj or neg bit set: a "
                       "complex tensor's view), which no model's weight is")
    if len(size) != len(stride):
        raise _Invalid(f"a tensor has size {_show(size)} but stride {_show(stride)}")
    if len(size) > _MAX_DIMS:  # (before math.prod, quadratic in the number of large sizes)
        raise _Refused(f"holds a tensor of {len(size):,} dimensions, more than NumPy's {_MAX_DIMS}")
    n, have = math.prod(size), storage.numel
    last = offset + sum((s - 1) * st for s, st in zip(size, stride)) if n else offset - 1
    if last >= have or n > have:
        raise _Refused(f"holds a tensor of size {_show(size)}, stride {_show(stride)}, offset {offset} on storage "
                       f"'{one_line(storage.key, 40)}' of {have:,} elements: " + (
                           "it reaches past the storage's end" if last >= have
                           else "it holds more elements than the storage (an expanded view)"))
    return _Tensor(storage, offset, size, stride)


def _rebuild_tensor(storage, offset, size, stride) -> _Tensor:
    """torch._utils._rebuild_tensor: a tensor as PyTorch 0.1.10 to 0.3 saved it (no requires_grad, no hooks; torch.load
    with weights_only=True reads it too)."""
    return _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())


def _rebuild_parameter(data, requires_grad, hooks, state=None) -> _Tensor:
    """torch._utils._rebuild_parameter (and _with_state: the Parameter's Python attributes, which hold no value)."""
    if not isinstance(data, _Tensor) or type(requires_grad) is not bool:
        raise _Invalid("a Parameter is rebuilt from something other than a tensor")
    _no_hooks(hooks)
    return data


def _ordered_dict(*args) -> OrderedDict:
    """collections.OrderedDict, called with no arguments as Python 3 pickles one (its items come after), or with the
    list of its [key, value] pairs as Python 2 did (PyTorch up to 1.4 ran on it)."""
    if not args:
        return OrderedDict()
    if (len(args) != 1 or type(args[0]) is not list
            or any(type(p) is not list or len(p) != 2 or type(p[0]) not in (str, int) for p in args[0])):
        raise _Invalid(f"an OrderedDict is built from {_show(args)}, not the list of [key, value] pairs Python 2 wrote")
    return OrderedDict(args[0])


#: every global bertfeat resolves but the storage classes (_Use.storages), to its own stand-in
_GLOBALS = {"collections.OrderedDict": _ordered_dict, "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
            "torch._utils._rebuild_tensor": _rebuild_tensor,
            "torch._utils._rebuild_parameter": _rebuild_parameter,
            "torch._utils._rebuild_parameter_with_state": _rebuild_parameter}
_CALLABLE = (_ordered_dict, _rebuild_tensor_v2, _rebuild_tensor, _rebuild_parameter)
_MODULE = _Use(_STORAGES, "a module's weights", RESAVE)
_ENCODER = _Use({**_STORAGES, **_INT_STORAGES}, "an encoder's weights", ENCODER_RESAVE)


def _refused_global(use: _Use, full: str) -> _Refused:
    if full.startswith("torch.") and full.endswith("Storage"):
        return _Refused(f"holds tensors of {full}, a dtype bertfeat does not read as {use.noun} (it reads "
                        f"{', '.join(k.label for k in use.storages.values())})")
    return _Refused(f"names the global {one_line(full, 120)} in its pickle, which a plain state dict does not need: "
                    "bertfeat refused it without running it (the file is not only tensors; do not open it with "
                    "torch.load(weights_only=False) either)")


class _Unpickler:
    """The opcodes torch.save writes for a state dict (pickle protocol 2, Python 2's str, and 4's framing), nothing else: no
    global but _GLOBALS, no call but theirs, BUILD only on an OrderedDict (a state dict's ``_metadata``, dropped)."""

    def __init__(self, file: io.BytesIO, storage, use: _Use, name: str = "data.pkl", globals_: dict | None = None):
        self.file, self.name = file, name  # (the words messages call the pickle)
        self.use, self.globals = use, use.globals if globals_ is None else globals_
        self.storage = storage  # persistent_load: the persistent id's items after 'storage' -> _Storage; None: refused
        self.stack: list = []
        self.marks: list[list] = []
        self.memo: dict[int, object] = {}
        self.ops = {op[0]: fn for op, fn in (
            (pickle.PROTO, lambda: self.read(1)), (pickle.FRAME, lambda: self.read(8)),
            (pickle.MARK, self.mark), (pickle.NONE, lambda: self.push(None)),
            (pickle.NEWTRUE, lambda: self.push(True)), (pickle.NEWFALSE, lambda: self.push(False)),
            (pickle.BININT, lambda: self.push(self.unpack("<i"))), (pickle.BININT1, lambda: self.push(self.read(1)[0])),
            (pickle.BININT2, lambda: self.push(self.unpack("<H"))),
            (pickle.LONG1, lambda: self.push(int.from_bytes(self.read(self.read(1)[0]), "little", signed=True))),
            (pickle.BINUNICODE, lambda: self.push(self.read(self.unpack("<I")).decode("utf-8"))),
            (pickle.SHORT_BINUNICODE, lambda: self.push(self.read(self.read(1)[0]).decode("utf-8"))),
            # Python 2's str (its pickles' names and keys), decoded as torch.load decodes them (encoding="utf-8")
            (pickle.BINSTRING, lambda: self.push(self.read(self.unpack("<I")).decode("utf-8"))),
            (pickle.SHORT_BINSTRING, lambda: self.push(self.read(self.read(1)[0]).decode("utf-8"))),
            (pickle.EMPTY_TUPLE, lambda: self.push(())), (pickle.TUPLE, lambda: self.push(tuple(self.pop_mark()))),
            (pickle.TUPLE1, lambda: self.tuple(1)), (pickle.TUPLE2, lambda: self.tuple(2)),
            (pickle.TUPLE3, lambda: self.tuple(3)), (pickle.EMPTY_DICT, lambda: self.push({})),
            (pickle.EMPTY_LIST, lambda: self.push([])), (pickle.SETITEM, self.setitem),
            (pickle.SETITEMS, self.setitems), (pickle.APPEND, self.append), (pickle.APPENDS, self.appends),
            (pickle.BINPUT, lambda: self.put(self.read(1)[0])), (pickle.LONG_BINPUT, lambda: self.put(self.unpack("<I"))),
            (pickle.MEMOIZE, lambda: self.put(len(self.memo))), (pickle.BINGET, lambda: self.get(self.read(1)[0])),
            (pickle.LONG_BINGET, lambda: self.get(self.unpack("<I"))), (pickle.GLOBAL, self.global_),
            (pickle.STACK_GLOBAL, self.stack_global), (pickle.REDUCE, self.reduce), (pickle.BUILD, self.build),
            (pickle.BINPERSID, self.persistent))}

    def load(self):
        while True:
            op = self.file.read(1)
            if not op:
                raise _Cut(f"{self.name} ends before its STOP opcode: it is cut short")
            op = op[0]
            if op == pickle.STOP[0]:
                if len(self.stack) != 1 or self.marks:
                    raise _Invalid("it ends with other than one object built")
                return self.stack[0]
            if op not in self.ops:
                raise _Refused(f"uses pickle opcode {_opname(op)}, which torch.save does not write for a state dict")
            self.ops[op]()

    # reading
    def read(self, n: int) -> bytes:
        b = self.file.read(n)
        if len(b) != n:
            raise _Cut(f"{self.name} ends in the middle of an opcode")
        return b

    def unpack(self, fmt: str) -> int:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def readline(self) -> str:
        line = self.file.readline()
        if not line.endswith(b"\n"):
            raise _Cut(f"{self.name} ends in the middle of a global's name")
        return line[:-1].decode("utf-8")

    # the stack
    def push(self, v) -> None:
        self.stack.append(v)

    def pop(self):
        if not self.stack:
            raise _Invalid("an opcode takes more objects than were built")
        return self.stack.pop()

    def mark(self) -> None:
        self.marks.append(self.stack)
        self.stack = []

    def pop_mark(self) -> list:
        if not self.marks:
            raise _Invalid("an opcode closes a MARK that was never opened")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def tuple(self, n: int) -> None:
        items = [self.pop() for _ in range(n)][::-1]
        self.push(tuple(items))

    def put(self, i: int) -> None:
        if not self.stack:
            raise _Invalid("an opcode takes more objects than were built")
        self.memo[i] = self.stack[-1]

    def get(self, i: int) -> None:
        if i not in self.memo:
            raise _Invalid(f"it refers to object {i}, which was never stored")
        self.push(self.memo[i])

    # containers
    def top(self, kinds: tuple, what: str):
        if not self.stack or type(self.stack[-1]) not in kinds:
            raise _Invalid(f"it {what} something other than {_a(kinds[0].__name__)}")
        return self.stack[-1]

    def setitem(self) -> None:
        v, k = self.pop(), self.pop()
        self._set(self.top((dict, OrderedDict), "sets an item of"), [k, v])

    def setitems(self) -> None:
        items = self.pop_mark()
        self._set(self.top((dict, OrderedDict), "sets items of"), items)

    @staticmethod
    def _set(d: dict, items: list) -> None:
        if len(items) % 2:
            raise _Invalid("it sets a key without a value")
        for k, v in zip(items[::2], items[1::2]):
            if type(k) not in (str, int):
                raise _Invalid(f"a dict's key is a {type(k).__name__}, not a name")
            d[k] = v

    def append(self) -> None:
        v = self.pop()
        self.top((list,), "appends to").append(v)

    def appends(self) -> None:
        items = self.pop_mark()
        self.top((list,), "appends to").extend(items)

    # the risky ones, each restricted to a state dict's needs
    def global_(self) -> None:
        module = self.readline()
        self.resolve(module, self.readline())

    def stack_global(self) -> None:
        name, module = self.pop(), self.pop()
        if type(module) is not str or type(name) is not str:
            raise _Invalid("STACK_GLOBAL names a global with other than two strings")
        self.resolve(module, name)

    def resolve(self, module: str, name: str) -> None:
        full = f"{module}.{name}"
        if full not in self.globals:
            if not self.globals and (full in _GLOBALS or full.startswith("torch.") and full.endswith("Storage")):
                # a legacy header's pickle or key list: a state dict's own global, out of place (not a dtype refused)
                raise _Invalid(f"its {self.name} names the global {full}, where torch.save's names none")
            raise _refused_global(self.use, full)
        self.push(self.globals[full])

    def reduce(self) -> None:
        args, fn = self.pop(), self.pop()
        if not any(fn is c for c in _CALLABLE) or type(args) is not tuple:
            raise _Invalid("it calls something other than the functions of a state dict")
        try:
            self.push(fn(*args))
        except TypeError as e:  # a wrong number of arguments
            raise _Invalid(f"it calls a function with other arguments than torch.save writes ({one_line(e)})") from None

    def build(self) -> None:
        state = self.pop()
        self.top((OrderedDict,), "sets the state of")  # torch's: an OrderedDict's attributes (_metadata), no values
        if type(state) is not dict:
            raise _Invalid("an OrderedDict's state is not a dict")

    def persistent(self) -> None:
        pid = self.pop()
        if self.storage is None:
            raise _Invalid(f"the {self.name} names a storage ({_show(pid)}), as only the state dict's pickle may")
        n, spelled = (6, "key, location, numel, view") if self.storage.legacy else (5, "key, location, numel")
        if (type(pid) is not tuple or len(pid) != n or pid[0] != "storage" or not isinstance(pid[1], _StorageType)
                or type(pid[2]) is not str or type(pid[3]) is not str or type(pid[4]) is not int or pid[4] < 0):
            raise _Invalid(f"persistent id {_show(pid)} is not ('storage', type, {spelled})")
        self.push(self.storage(pid[2], pid[1], pid[4], *pid[5:]))


def _opname(op: int) -> str:
    names = {getattr(pickle, n)[0]: n for n in dir(pickle) if n.isupper() and isinstance(getattr(pickle, n), bytes)
             and len(getattr(pickle, n)) == 1}
    return f"{names[op]} (0x{op:02x})" if op in names else f"0x{op:02x}"


def _refuse(use: "_Use", f: Path, what: str, fix: str | None = None) -> WeightsError:
    return WeightsError(f"{f} {what}", fix or use.resave)


class _Damaged(_Refused):
    """The file is cut short or damaged (its fix: re-download it)."""


def _pickle_at(fh, size: int, use: _Use, name: str, limit: int, storage=None, globals_: dict | None = None):
    """The object of the legacy file's pickle at ``fh``'s position, read from at most ``limit`` bytes; ``fh`` left
    just after it. Its globals: ``globals_`` (the header's pickles: none), else the state dict's."""
    at = fh.tell()
    chunk = io.BytesIO(fh.read(limit))
    try:
        obj = _run(_Unpickler(chunk, storage, use, name, globals_))
    except _Cut:
        if at + limit < size:
            raise _Refused(f"has a {name} of more than {limit:,} bytes, more than torch.save writes (a state dict's "
                           "takes about 140 a tensor)") from None
        raise _Damaged(f"is cut short: it ends in its {name} (a truncated download)") from None
    fh.seek(at + chunk.tell())
    return obj


def _check_sys_info(info) -> bool:
    """torch.save's sys_info as it writes it (-> little_endian): the writer's byte order, the C sizes of short, int and long (torch ignores it;
    the storages are little-endian whatever the writer's order)."""
    sizes = info.get("type_sizes") if type(info) is dict else None
    if (type(info) is not dict or info.get("protocol_version") != _LEGACY_PROTOCOL
            or type(info.get("little_endian")) is not bool or type(sizes) is not dict
            or sizes.get("short") != 2 or sizes.get("int") != 4 or sizes.get("long") not in (4, 8)):
        raise _Refused("has a sys_info pickle unlike torch.save's (protocol_version 1001, little_endian True or False, "
                       f"type_sizes short 2, int 4, long 4 or 8): {_show(info)}")
    return info["little_endian"]


def _legacy_storage():
    """persistent_load of the legacy format: (key, type, numel, view) -> a _Storage, its data read after the pickle
    (_read_storages). ``view``: None, or (view key, offset, size), a storage of elements offset to offset + size of
    storage key (PyTorch before 1.6 saved one for a tensor on a storage view; later versions never do)."""
    roots: dict[str, _Storage] = {}
    views: dict[str, _Storage] = {}

    def load(key: str, kind: _StorageType, numel: int, view=None) -> _Storage:
        if key in views:
            raise _Damaged(f"names storage '{one_line(key, 40)}' both as a storage and as a view: it is damaged")
        s = _again(roots[key], kind, numel) if key in roots else roots.setdefault(key, _Storage(key, kind, numel))
        if view is None:
            return s
        if (type(view) is not tuple or len(view) != 3 or type(view[0]) is not str
                or any(type(x) is not int or x < 0 for x in view[1:])):
            raise _Invalid(f"a storage's view {_show(view)} is not (key, offset, size)")
        vkey, offset, n = view
        if offset + n > numel:
            raise _Refused(f"views elements {offset:,} to {offset + n:,} of storage '{one_line(key, 40)}' of {numel:,} "
                           "elements: past its end")
        v = views.get(vkey)
        if vkey in roots or (v is not None and (v.root is not s or v.offset != offset or v.numel != n)):
            raise _Damaged(f"names storage view '{one_line(vkey, 40)}' as two different storages: it is damaged")
        return views.setdefault(vkey, _Storage(vkey, kind, n, root=s, offset=offset))

    load.legacy, load.roots, load.views = True, roots, views
    return load


def _read_storages(fh, size: int, keys, storage, little: bool) -> None:
    """Each storage's bytes, in the order of the key list: an int64 count of elements (little-endian; PyTorch before
    1.5 on a big-endian machine wrote it in its own order), then the elements, little-endian whatever the writer's
    order (torch's _write_file). The count must be the pickle's, the file must end with the last storage."""
    if type(keys) is not list or any(type(k) is not str for k in keys):
        raise _Invalid(f"its storage key list is {_show(keys)}, not a list of keys")
    roots, listed = storage.roots, set(keys)  # (a set: the list may name tens of thousands)
    odd = next((k for k in keys if k not in roots), None) or next((k for k in roots if k not in listed), None)
    if odd is not None or len(listed) != len(keys):
        what = ("lists a storage twice" if odd is None else f"lists storage '{one_line(odd, 40)}' its pickle never names"
                if odd not in roots else f"names storage '{one_line(odd, 40)}' its key list omits (no bytes for it)")
        raise _Damaged(f"{what}: it is damaged")
    for i, key in enumerate(keys):
        s = roots[key]
        where = f"storage '{one_line(key, 40)}' ({i + 1} of {len(keys)})"
        head = fh.read(8)
        if len(head) < 8:
            raise _Damaged(f"is cut short: it ends before {where} (a truncated download)")
        count = int.from_bytes(head, "little", signed=True)
        if count != s.numel and not little and int.from_bytes(head, "big", signed=True) == s.numel:
            count = s.numel
        if count != s.numel:
            raise _Damaged(f"holds {count:,} elements for {where}, whose pickle says {s.numel:,}: it is damaged")
        need, left = s.numel * s.kind.dtype.itemsize, size - fh.tell()
        if need > left:  # (before reading: never more bytes than the file)
            raise _Damaged(f"is cut short: {where} takes {need:,} bytes, {left:,} are left (a truncated download)")
        raw = fh.read(need)
        if len(raw) != need:
            raise _Damaged(f"is cut short: {where} takes {need:,} bytes, {len(raw):,} were read (it changed while read)")
        s.fill(np.frombuffer(raw, dtype=s.kind.dtype.newbyteorder("<")))
    for v in storage.views.values():
        v.fill(v.root.data[v.offset:v.offset + v.numel])
    trailing = size - fh.tell()
    if trailing:
        raise _Damaged(f"has {trailing:,} bytes after its last storage, which torch.save never writes: it is damaged "
                       "or another file was appended to it")


def _load_legacy(use: _Use, f: Path):
    """torch.save's legacy format (torch/serialization.py _legacy_save): pickles of its magic number, its protocol
    version (1001) and sys_info; the state dict's pickle; the pickled list of storage keys; each storage's bytes."""
    with open(f, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        header = {"globals_": {}}  # the header's pickles name no global, no storage
        number = _pickle_at(fh, size, use, "magic number pickle", _MAX_HEADER, **header)
        if type(number) is not int or number != _LEGACY_NUMBER:
            raise _Refused(f"starts with a pickle of {_show(number)}, not torch.save's magic number: it is a pickle "
                           "but not a torch.save checkpoint")
        version = _pickle_at(fh, size, use, "protocol version pickle", _MAX_HEADER, **header)
        if type(version) is not int or version != _LEGACY_PROTOCOL:
            raise _Refused(f"has legacy protocol version {_show(version)}, where torch reads {_LEGACY_PROTOCOL}")
        little = _check_sys_info(_pickle_at(fh, size, use, "sys_info pickle", _MAX_HEADER, **header))
        storage = _legacy_storage()
        obj = _pickle_at(fh, size, use, "main pickle", _MAX_PICKLE, storage)
        keys = _pickle_at(fh, size, use, "storage key list", _MAX_PICKLE, **header)
        _read_storages(fh, size, keys, storage, little)
    return obj


def _head(use: "_Use", f: Path) -> bytes:
    """The file's first bytes, or a refusal of a file neither format is (empty, the .tar format)."""
    with open(f, "rb") as fh:
        head = fh.read(512)
    if not head:
        raise _refuse(use, f, "is empty (0 bytes)", f"restore the file from the model, or {use.resave}")
    # a tar header's magic: torch.save's format before PyTorch 0.1.10 (a zip's or a pickle's byte 257 may spell it too)
    if head[257:262] == b"ustar" and not head.startswith((b"PK\x03\x04", pickle.PROTO)):
        raise _refuse(use, f, "is in torch.save's .tar format of PyTorch before 0.1.10, which bertfeat does not read",
                      "if you trust the file, re-save it where PyTorch is installed (torch reads this format only by "
                      "running its pickle): torch.save(torch.load(path, weights_only=False), path); or " + use.resave)
    return head


def _open(use: "_Use", f: Path, head: bytes) -> zipfile.ZipFile:
    """The zip archive, or a refusal saying what the file is instead (damaged, written by something else)."""
    try:
        z = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise _refuse(use, f, f"is not a torch.save zip archive ({one_line(e)}): it is truncated or damaged, or was "
                         "written by something else", f"re-download the model, or {use.resave}") from None
    if not head.startswith(b"PK\x03\x04"):  # zipfile finds an archive anywhere before its end; torch.load does not
        z.close()
        raise _refuse(use, f, "is a zip archive after other bytes, which torch.load does not read (a torch.save file starts "
                         "with its first record)", f"re-download the model, or {use.resave}")
    return z


def _records(use: "_Use", f: Path, z: zipfile.ZipFile) -> tuple[str, dict[str, zipfile.ZipInfo]]:
    """(the top folder, record name inside it -> its entry): the records in the folder of the first, as torch
    reads them (others are not read)."""
    infos = z.infolist()
    if not infos or "/" not in infos[0].filename:
        first = infos[0].filename if infos else None
        raise _refuse(use, f, "is a zip archive but not torch.save's: " + (
            "it holds no record" if first is None else f"its first record '{one_line(first, 80)}' is in no folder"))
    top = infos[0].filename.split("/", 1)[0] + "/"
    records: dict[str, zipfile.ZipInfo] = {}
    for i in infos:
        if i.filename.startswith(top):
            if i.filename[len(top):] in records:
                raise _refuse(use, f, f"has record '{one_line(i.filename, 80)}' twice: it is damaged")
            records[i.filename[len(top):]] = i
    return top, records


def _check_archive(use: "_Use", f: Path, z: zipfile.ZipFile, records: dict) -> str:
    """The archive's version and byte order checked: -> the byte order of its storages ('<' or '>')."""
    if "constants.pkl" in records:
        raise _refuse(use, f, "is a TorchScript archive (torch.jit.save), not a state dict saved by torch.save")
    packed = next((i.filename for i in records.values() if i.compress_type != zipfile.ZIP_STORED or i.flag_bits & 1),
                  None)
    if packed is not None:  # read as stored bytes only: memory bounded by the file's size, no zip bomb
        raise _refuse(use, f, f"has record '{one_line(packed, 80)}' compressed or encrypted, as torch.save never writes one")
    if "data.pkl" not in records:
        raise _refuse(use, f, "is a zip archive without data.pkl: it is not a torch.save checkpoint")
    if records["data.pkl"].file_size > _MAX_PICKLE:
        raise _refuse(use, f, f"has a data.pkl of {records['data.pkl'].file_size:,} bytes, more than a state dict's pickle "
                         f"takes (about 140 a tensor; bertfeat reads up to {_MAX_PICKLE:,})")
    ver = records.get(".data/version", records.get("version"))
    text = z.read(ver).decode("ascii", "replace").strip() if ver else ""
    if not text.isdigit() or int(text) not in _VERSIONS:
        raise _refuse(use, f, f"has archive version {one_line(text, 20) or '(none)'}, where torch reads 1 to 10")
    order = z.read(records["byteorder"]) if "byteorder" in records else b"little"
    if order not in _BYTEORDERS:
        raise _refuse(use, f, f"has byte order {one_line(order.decode('ascii', 'replace'), 20)!r}, not little or big")
    return _BYTEORDERS[order]


def _storage_reader(f: Path, z: zipfile.ZipFile, records: dict, order: str):
    """persistent_load: (key, type, numel) -> the _Storage of record data/KEY, read once (tensors share it)."""
    read: dict[str, _Storage] = {}
    size = left = f.stat().st_size  # the bytes the storages may take in all (records nested in others would take more)

    def load(key: str, kind: _StorageType, numel: int) -> _Storage:
        nonlocal left
        if key in read:
            return _again(read[key], kind, numel)
        info = records.get(f"data/{key}")
        need = numel * kind.dtype.itemsize
        if info is not None and info.file_size == need and need > left:  # records nested in others
            raise _Refused(f"has storage records that overlap: with storage '{one_line(key, 40)}' they would hold more "
                           f"bytes than the file's {size:,} (a zip bomb's trick): it is damaged or made to exhaust memory")
        # the bytes read count, not the entry's size: a stored record is read to its compressed size, which may differ
        raw = z.read(info) if info is not None and info.file_size == need else None
        if raw is None or len(raw) != need:
            got = "is missing" if info is None else f"holds {info.file_size if raw is None else len(raw):,} bytes"
            raise _Refused(f"names storage '{one_line(key, 40)}' of {numel:,} {kind.label} values ({need:,} bytes), "
                           f"but record data/{one_line(key, 40)} {got}: the file is damaged")
        left -= need
        read[key] = _Storage(key, kind, numel, np.frombuffer(raw, dtype=kind.dtype.newbyteorder(order)))
        return read[key]

    load.legacy = False
    return load


def _again(s: _Storage, kind: _StorageType, numel: int) -> _Storage:
    """A storage named again: the same, as torch reads it, if named alike."""
    if s.kind is not kind or s.numel != numel:
        raise _Refused(f"views storage '{one_line(s.key, 40)}' as {s.kind.label} of {s.numel:,} elements and as "
                       f"{kind.label} of {numel:,}")
    return s


def _kind(v) -> str:
    """What an object of the pickle is, for a message (never bertfeat's stand-ins' own names)."""
    if isinstance(v, (_Tensor, _Storage)):
        return "a tensor" if isinstance(v, _Tensor) else "a storage no tensor views"
    name = v.name if isinstance(v, _StorageType) else next((n for n, g in _GLOBALS.items() if g is v), None)
    if name is not None:
        return f"the global {name}, uncalled"
    return "None" if v is None else _a(type(v).__name__)


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiouAEIOU' else 'a'} {noun}"


def _state_dict(use: "_Use", f: Path, obj) -> dict[str, _Tensor]:
    """The pickle's object as a flat state dict: names -> tensors."""
    if type(obj) not in (dict, OrderedDict):
        raise _refuse(use, f, f"holds {_kind(obj)}, not a state dict (names -> tensors)")
    out = {}
    for k, v in obj.items():
        if type(k) is not str:
            raise _refuse(use, f, f"holds {_kind(v)} under the key {_show(k)}, where a state dict holds tensors under names")
        if not isinstance(v, _Tensor):
            raise _refuse(use, f, f"holds entry {_show(k)}, {_kind(v)} where a state dict holds a tensor under a name")
        out[k] = v
    return out


def _copier(use: _Use, f: Path, tensors: dict[str, _Tensor]):
    """get(name, bits=False): the tensor copied out of its storage into an array of its own (native byte order,
    bfloat16 widened exactly to float32, or with ``bits`` kept as its uint16 bit patterns), each name once: a storage
    is let go when its last tensor is copied out, so a load holds about the file's size and what it has copied.

    Refused first: copies that would hold more than twice the values of the storages they view (a view saved again
    under another name costs the pickle some 100 bytes, and its copy a whole storage; torch.load shares it). Two
    names viewing the same elements alike (tied weights: one storage in the file) get the same array, as in torch."""
    total = sum(t.view.size for t in tensors.values())
    stored = sum({id(t.storage.root): t.storage.root.numel for t in tensors.values()}.values())
    if total > 2 * stored:
        raise _refuse(use, f, f"holds tensors of {total:,} values in all, more than twice the {stored:,} values of the "
                              f"storages they view (the same values under many names), as {use.noun} never are")
    tensors = dict(tensors)  # popped as copied: the last view of a storage gone, its bytes are freed
    left = Counter(id(t.storage.root) for t in tensors.values())  # storage -> its views not copied out yet
    same: dict[int, dict[tuple, np.ndarray]] = {}  # storage -> its copies, kept while another view may want one

    def get(name: str, bits: bool = False) -> np.ndarray:
        t = tensors.pop(name)
        sid, key = id(t.storage.root), (t.view.__array_interface__["data"][0], t.view.shape, t.view.strides, bits)
        a = same.get(sid, {}).get(key)
        if a is None:
            a = np.array(t.view, dtype=t.view.dtype.newbyteorder("="), order="C")
            if t.storage.kind.label == "bfloat16" and not bits:
                a = from_bf16(a.reshape(-1)).reshape(a.shape)
        left[sid] -= 1
        if left[sid]:
            same.setdefault(sid, {})[key] = a
        else:
            same.pop(sid, None)
        return a

    return get


def _load_zip(use: _Use, f: Path, head: bytes):
    """The zip format's pickled object, its storages read."""
    with _open(use, f, head) as z:
        _, records = _records(use, f, z)
        order = _check_archive(use, f, z, records)
        return _run(_Unpickler(io.BytesIO(z.read(records["data.pkl"])), _storage_reader(f, z, records, order), use))


def _run(unpickler: _Unpickler):
    try:
        return unpickler.load()
    finally:  # its opcode table refers to it (a cycle only the collector frees): its memo held every storage
        unpickler.ops.clear()
        unpickler.memo.clear()


def _load(use: _Use, f: Path) -> dict[str, _Tensor]:
    """The file's state dict, every storage read and every view checked, nothing copied out yet."""
    head = _head(use, f)
    legacy = head.startswith(pickle.PROTO)  # a zip starts with PK; the legacy format with its magic number's pickle
    try:
        obj = _load_legacy(use, f) if legacy else _load_zip(use, f, head)
    except _Damaged as e:
        raise _refuse(use, f, str(e), f"re-download the model, or {use.resave}") from None
    except _Refused as e:
        raise _refuse(use, f, str(e)) from None
    except (_Invalid, IndexError, UnicodeDecodeError, struct.error) as e:
        raise _refuse(use, f, f"holds a {'pickle' if legacy else 'data.pkl'} that is not a state dict as torch.save "
                              f"writes it ({one_line(e)})") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:  # a damaged record (its CRC, its header)
        if isinstance(e, WeightsError):
            raise
        raise _refuse(use, f, f"could not be read as a torch.save {'file' if legacy else 'zip archive'} "
                              f"({one_line(e)}): it is truncated or damaged", f"re-download the model, or {use.resave}") from None
    return _state_dict(use, f, obj)


def open_torch_file(f: Path) -> tuple[list[str], object, set[str]]:
    """An encoder's ``pytorch_model.bin`` (or one of its shards), opened as weights.read_tensors opens a safetensors
    file: -> (its tensor names in the file's order, get(name, bits=False), the names stored in bfloat16).

    The storages are read and every view checked before this returns; ``get`` copies one tensor out (each name once;
    float16, float64, int64 and int32 as stored, bfloat16 widened exactly to float32 unless ``bits``). Reads integer buffers
    too (embeddings.position_ids, saved by transformers before 4.31). The caller checks each tensor finite. Refusals
    are read_torch_file's, their fix saying how to re-save the model (ENCODER_RESAVE)."""
    tensors = _load(_ENCODER, f)
    stored16 = {k for k, t in tensors.items() if t.storage.kind.label == "bfloat16"}
    return list(tensors), _copier(_ENCODER, f, tensors), stored16


def read_torch_file(f: Path) -> dict[str, np.ndarray]:
    """Every tensor of a torch.save checkpoint of a state dict (zip or legacy format), read without PyTorch and
    without unpickling.

    Parameters
    ----------
    f : Path
        A ``pytorch_model.bin`` (any name) written by ``torch.save(state_dict, f)``.

    Returns
    -------
    dict of str to numpy.ndarray
        Each tensor under its own name, in the file's order, as an array of its own (a transposed or sliced view
        copied out in C order); float32 and float64 as stored, float16 and bfloat16 widened exactly to float32.

    Raises
    ------
    WeightsError
        Naming the file: a global or opcode a state dict does not need (never run), torch's .tar format (before
        PyTorch 0.1.10), a truncated or damaged file, a dtype other than float32 / float16 / bfloat16 / float64, a NaN or infinite
        value (the tensor named).
    """
    tensors = _load(_MODULE, f)
    get = _copier(_MODULE, f, tensors)
    out = {k: get(k) for k in list(tensors)}
    for k, a in out.items():
        check_finite(a, k, f)
        if a.dtype == np.float16:
            out[k] = a.astype(np.float32)
    return out
