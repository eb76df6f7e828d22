"""oneDNN's matmul primitive through ctypes: the fast path's GEMMs (the ``fast`` extra).

Shapes: M token rows, K inputs, N outputs of a linear layer; ``a`` (M, K) @ ``w`` (K, N) -> (M, N) float32.

oneDNN (the library PyTorch's CPU bf16 and int8 linear layers run on) picks a JIT kernel for the CPU it
runs on: AMX tiles on Intel Sapphire Rapids and later, AVX512-BF16 on AMD Zen 4 and Intel Cooper Lake,
VNNI for int8, plain AVX-512 / AVX2 elsewhere. It comes from the PyPI wheel ``onednn-cpu-gomp``
(oneDNN 3.2, CPU only, GNU OpenMP), whose ``libdnnl.so.3`` installs under the environment's ``lib/``.
Only its C API is used, through ctypes: engine, stream, memory descriptors, the matmul primitive and the
reorder that packs weights.

``pack(w)``: a (K, N) weight, float32, bf16 bit patterns (uint16) or int8, reordered ONCE, at load, into
the blocked layout oneDNN's kernel prefers for that shape and type (a ``Packed``; the plain array can be
dropped). ``matmul(a, p, out, bias, act)``: out (M, N) <- act(a @ p + bias), where ``a`` is of the packed weight's
input type (uint8 for int8 weights) and ``out`` of its output type (float32, int32 for int8; see ``matmul``).

Every call runs on the calling thread alone (OpenMP held to one thread there): bertfeat runs batches side
by side in threads (batching.parallel_map), one GEMM per thread, as it does with OpenBLAS. Each thread has
its own stream, its own primitives (one per (M, K, N, types, strides), LRU-bounded; oneDNN shares the JIT
code between them) and its own scratchpad, so two threads never share a mutable oneDNN object. The
primitive for a row count is made the first time that count is seen (~0.1 ms with the kernels cached).
"""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from .threads import new_locks_after_fork

HINT = 'pip install "bertfeat[fast]" (the PyPI package onednn-cpu-gomp)'

# dnnl_data_type_t, dnnl_format_tag_any, dnnl_query_t, exec args, flags (oneDNN 3.x dnnl_types.h / dnnl_common_types.h)
_F16, _BF16, _F32, _S32, _S8, _U8 = 1, 2, 3, 4, 5, 6
_TAG_ANY = 1
_Q_IMPL_INFO_STR, _Q_WEIGHTS_MD, _Q_SCRATCHPAD_MD = 8, 131, 136
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS, _ARG_SCRATCHPAD = 1, 17, 33, 41, 80
#: dnnl_alg_kind_t (oneDNN 3.x values) of the activations oneDNN applies after the product (post-op), by config.json's
#: hidden_act: eltwise_relu 0x20, eltwise_gelu_tanh 0x2b, eltwise_gelu_erf 0x31 (tests/ops/test_bf16.py checks each
#: against model/bert.py's own functions, so a wrong value cannot pass)
ACTIVATIONS = {"gelu": 0x31, "gelu_new": 0x2b, "gelu_pytorch_tanh": 0x2b, "gelu_fast": 0x2b, "relu": 0x20}
_ENGINE_CPU, _STREAM_IN_ORDER, _SCRATCHPAD_USER = 1, 1, 1
#: dnnl_fpmath_mode_strict: every primitive computes in the types it is given. oneDNN's default mode comes from the
#: environment (ONEDNN_DEFAULT_FPMATH_MODE=BF16 let an fp32 product round its inputs to bf16 on a CPU with bf16, an
#: "fp32" run nothing recorded); bertfeat's precision is its own option, so every attribute it makes says strict
_FPMATH_STRICT = 0
_STATUS = {1: "out of memory", 2: "invalid arguments", 3: "unimplemented", 4: "last implementation reached",
           5: "runtime error", 6: "not required", 7: "invalid graph", 8: "invalid graph op", 9: "invalid shape",
           10: "invalid data type"}
_DTYPES = {np.dtype(np.float32): _F32, np.dtype(np.uint16): _BF16, np.dtype(np.int8): _S8,
           np.dtype(np.uint8): _U8, np.dtype(np.int32): _S32}
_DIMS = ctypes.c_int64 * 12  # dnnl_dims_t
_MAX_PRIMITIVES = 256  # per thread


class DnnlError(RuntimeError):
    """A oneDNN call failed (a bug or an unusable library, not a user error)."""


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib", "gomp", "engine", "path", "version", "error" once loaded (or tried)
_local = threading.local()  # per thread: stream, primitives (OrderedDict), scratchpad buffer


new_locks_after_fork(globals(), "_lock")  # a child forked while another thread loaded the library (_load)


# --------------------------------------------------------------------------- loading
def _candidates() -> list[str]:
    """Where libdnnl may be: BERTFEAT_DNNL, this Python's lib folders (the onednn-cpu-gomp wheel puts it in
    <prefix>/lib), the loader's search path."""
    env = os.environ.get("BERTFEAT_DNNL", "")
    if env.strip():  # (unset or empty: the places below)
        return [env]
    names = ["libdnnl.so.3", "libdnnl.so", "libdnnl.3.dylib", "dnnl.dll"]
    dirs: list[Path] = []
    for prefix in dict.fromkeys([sys.prefix, sys.exec_prefix, sys.base_prefix, sysconfig.get_config_var("userbase") or ""]):
        if prefix:
            dirs += [Path(prefix) / "lib", Path(prefix) / "Library" / "bin"]
    out = [str(d / n) for d in dirs for n in names if (d / n).is_file()]
    return out + ["libdnnl.so.3"]


def _check(status: int, what: str) -> None:
    if status != 0:
        raise DnnlError(f"oneDNN {what} failed: {_STATUS.get(status, f'status {status}')}")


def _bind(lib: ctypes.CDLL) -> None:
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    sig = {
        "dnnl_engine_create": [ctypes.POINTER(P), I, S],
        "dnnl_stream_create": [ctypes.POINTER(P), P, ctypes.c_uint],
        "dnnl_stream_wait": [P],
        "dnnl_memory_desc_create_with_strides": [ctypes.POINTER(P), I, _DIMS, I, _DIMS],
        "dnnl_memory_desc_create_with_tag": [ctypes.POINTER(P), I, _DIMS, I, I],
        "dnnl_memory_desc_clone": [ctypes.POINTER(P), P],
        "dnnl_memory_desc_destroy": [P],
        "dnnl_memory_create": [ctypes.POINTER(P), P, P, P],
        "dnnl_memory_set_data_handle": [P, P],
        "dnnl_memory_destroy": [P],
        "dnnl_primitive_attr_create": [ctypes.POINTER(P)],
        "dnnl_primitive_attr_destroy": [P],
        "dnnl_primitive_attr_set_scratchpad_mode": [P, I],
        "dnnl_primitive_attr_set_post_ops": [P, P],
        "dnnl_primitive_attr_set_fpmath_mode": [P, I],
        "dnnl_post_ops_create": [ctypes.POINTER(P)],
        "dnnl_post_ops_destroy": [P],
        "dnnl_post_ops_append_eltwise": [P, I, ctypes.c_float, ctypes.c_float],
        "dnnl_matmul_primitive_desc_create": [ctypes.POINTER(P), P, P, P, P, P, P],
        "dnnl_reorder_primitive_desc_create": [ctypes.POINTER(P), P, P, P, P, P],
        "dnnl_primitive_desc_query": [P, I, I, P],
        "dnnl_primitive_desc_destroy": [P],
        "dnnl_primitive_create": [ctypes.POINTER(P), P],
        "dnnl_primitive_execute": [P, P, I, ctypes.POINTER(_ExecArg)],
        "dnnl_primitive_destroy": [P],
    }
    for name, args in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, I
    lib.dnnl_primitive_desc_query_md.argtypes, lib.dnnl_primitive_desc_query_md.restype = [P, I, I], P
    lib.dnnl_memory_desc_get_size.argtypes, lib.dnnl_memory_desc_get_size.restype = [P], S
    lib.dnnl_memory_desc_equal.argtypes, lib.dnnl_memory_desc_equal.restype = [P, P], I
    lib.dnnl_version.argtypes, lib.dnnl_version.restype = [], ctypes.POINTER(_Version)


def _load() -> ctypes.CDLL | None:
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        lib, errors = None, []
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path)
                lib.dnnl_matmul_primitive_desc_create  # noqa: B018  (oneDNN 2.x has another API)
                lib.dnnl_memory_desc_create_with_strides  # noqa: B018
                _state["path"] = path
                break
            except (OSError, AttributeError) as e:
                errors.append(f"{path}: {e}")
                lib = None
        if lib is None:
            _refuse_bad_env(errors)
            _state["lib"] = None
            _state["error"] = "; ".join(errors) if errors else "libdnnl was not found"
            return None
        _bind(lib)
        v = lib.dnnl_version().contents
        _state["version"] = f"{v.major}.{v.minor}.{v.patch}"
        try:  # the OpenMP runtime libdnnl was linked against (already loaded with it: dlopen returns that copy)
            gomp = ctypes.CDLL("libgomp.so.1")
            gomp.omp_set_num_threads.argtypes, gomp.omp_set_num_threads.restype = [ctypes.c_int], None
            _state["gomp"] = gomp
        except (OSError, AttributeError):
            _state["gomp"] = None
        engine = ctypes.c_void_p()
        _check(lib.dnnl_engine_create(ctypes.byref(engine), _ENGINE_CPU, 0), "engine_create")
        _state["engine"] = engine
        _state["lib"] = lib
        return lib


def _refuse_bad_env(errors: list[str]) -> None:
    """BERTFEAT_DNNL names a library that does not load (a wrong path, oneDNN 2.x): an error naming it, each time
    asked (nothing cached), rather than NumPy's GEMMs without a word."""
    env = os.environ.get("BERTFEAT_DNNL", "")
    if not env.strip():
        return
    from ..errors import BertfeatError

    why = errors[0].removeprefix(f"{env}: ") if errors else "not found"
    raise BertfeatError(f"BERTFEAT_DNNL={env!r} cannot be loaded as oneDNN 3's libdnnl ({why})",
                        "point BERTFEAT_DNNL at a libdnnl.so.3 of oneDNN 3.x, or unset it (then bertfeat uses the "
                        "oneDNN of bertfeat[fast] if it is installed, else NumPy)")


def available() -> bool:
    return _load() is not None


def version() -> str | None:
    """oneDNN's version ("3.2.0"), None if it is not installed."""
    return _state.get("version") if _load() is not None else None  # type: ignore[return-value]


def library_path() -> str | None:
    return _state.get("path") if _load() is not None else None  # type: ignore[return-value]


def load_error() -> str | None:
    _load()
    return _state.get("error")  # type: ignore[return-value]


def _lib() -> ctypes.CDLL:
    lib = _load()
    if lib is None:
        raise DnnlError(f"oneDNN is not installed ({_state.get('error')}); {HINT}")
    return lib


# --------------------------------------------------------------------------- memory descriptors
def _md(shape: tuple[int, ...], dtype: int, strides: tuple[int, ...] | None = None) -> ctypes.c_void_p:
    """A plain (strided) memory descriptor; the caller destroys it."""
    lib, md = _lib(), ctypes.c_void_p()
    if strides is None:  # row-major
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    _check(lib.dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(shape), _DIMS(*shape), dtype, _DIMS(*strides)),
           "memory_desc_create")
    return md


def _md_any(shape: tuple[int, ...], dtype: int) -> ctypes.c_void_p:
    lib, md = _lib(), ctypes.c_void_p()
    _check(lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(shape), _DIMS(*shape), dtype, _TAG_ANY),
           "memory_desc_create_with_tag")
    return md


def _strict_attr() -> ctypes.c_void_p:
    """A new primitive attribute whose math is strict (_FPMATH_STRICT), whatever the environment's default."""
    lib, attr = _lib(), ctypes.c_void_p()
    _check(lib.dnnl_primitive_attr_create(ctypes.byref(attr)), "primitive_attr_create")
    _check(lib.dnnl_primitive_attr_set_fpmath_mode(attr, _FPMATH_STRICT), "set_fpmath_mode")
    return attr


def _user_scratchpad_attr() -> ctypes.c_void_p:
    attr = _strict_attr()
    _check(_lib().dnnl_primitive_attr_set_scratchpad_mode(attr, _SCRATCHPAD_USER), "set_scratchpad_mode")
    return attr


def _impl_info(pd: ctypes.c_void_p) -> str:
    s = ctypes.c_char_p()
    _check(_lib().dnnl_primitive_desc_query(pd, _Q_IMPL_INFO_STR, 0, ctypes.byref(s)), "query impl info")
    return (s.value or b"?").decode()


def _memory(md, handle) -> ctypes.c_void_p:
    mem = ctypes.c_void_p()
    _check(_lib().dnnl_memory_create(ctypes.byref(mem), md, _state["engine"], ctypes.c_void_p(handle)), "memory_create")
    return mem


# --------------------------------------------------------------------------- packed weights
#: the row count the weights' layout is chosen for (the layout oneDNN's kernel wants depends on K, N and
#: the types; matmul() checks that each primitive it makes accepts it)
PACK_ROWS = 512
#: oneDNN's gemm:jit kernels (fp32 on CPUs without AVX-512) block a product by its row count, so a row's sums would
#: round by the size of its batch; multiplied in blocks of exactly ROW_BLOCK rows (the last one padded) every row
#: rounds alike (blocks of 64-512 all did on BERT's linear shapes). 512, the default token budget: a layer's product
#: is then one block, at 0.94x OpenBLAS's encode speed on an AVX2 EPYC, where blocks of 64 ran at 0.88x
ROW_BLOCK = 512


#: weight type -> (input type, output type) of its products: float32 and bf16 give float32; int8 weights
#: take uint8 inputs (asymmetric per-token quantization) and give the int32 sums
_PAIRS = {np.dtype(np.float32): (np.dtype(np.float32), np.dtype(np.float32)),
          np.dtype(np.uint16): (np.dtype(np.uint16), np.dtype(np.float32)),
          np.dtype(np.int8): (np.dtype(np.uint8), np.dtype(np.int32))}


class Packed:
    """A (K, N) weight in oneDNN's preferred layout for its type; read-only.

    ``dtype`` float32, uint16 (bf16 bit patterns: bf16 x bf16 -> float32) or int8 (uint8 x int8 -> int32).
    ``shape`` and ``dtype`` are the logical ones, so code that reads a weight's width works on it as on the
    plain array; ``plain()`` gives the plain array back. ``src_dtype`` / ``out_dtype``: what it multiplies.
    """

    def __init__(self, w: np.ndarray):
        lib = _lib()
        w = np.ascontiguousarray(w)
        if w.ndim != 2 or w.dtype not in _PAIRS:
            raise TypeError(f"pack: a 2-D float32, bf16 (uint16) or int8 weight is required, got {w.dtype} {w.shape}")
        K, N = w.shape
        self.shape, self.dtype = (K, N), w.dtype
        self.src_dtype, self.out_dtype = _PAIRS[w.dtype]
        self._dt, self._src_dt, self._out_dt = _DTYPES[w.dtype], _DTYPES[self.src_dtype], _DTYPES[self.out_dtype]
        src, any_w, dst = _md((PACK_ROWS, K), self._src_dt), _md_any((K, N), self._dt), _md((PACK_ROWS, N), self._out_dt)
        attr, pd = _user_scratchpad_attr(), ctypes.c_void_p()
        try:
            _check(lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), _state["engine"], src, any_w, None, dst, attr),
                   f"matmul for a ({K}, {N}) weight")
            self.impl = _impl_info(pd)
            self.row_block = ROW_BLOCK if self.impl.startswith("gemm:jit") and w.dtype == np.float32 else 0
            self.md = ctypes.c_void_p()
            _check(lib.dnnl_memory_desc_clone(ctypes.byref(self.md), lib.dnnl_primitive_desc_query_md(pd, _Q_WEIGHTS_MD, 0)),
                   "memory_desc_clone")
        finally:
            for h in (src, any_w, dst):
                lib.dnnl_memory_desc_destroy(h)
            lib.dnnl_primitive_attr_destroy(attr)
            if pd:
                lib.dnnl_primitive_desc_destroy(pd)
        size = int(lib.dnnl_memory_desc_get_size(self.md))
        self.data = np.empty(size, dtype=np.uint8)  # the packed bytes (oneDNN reads them in place)
        self.nbytes = size
        self.size = K * N
        plain = _md((K, N), self._dt)
        try:
            _reorder(plain, w.ctypes.data, self.md, self.data.ctypes.data)
        finally:
            lib.dnnl_memory_desc_destroy(plain)

    def plain(self) -> np.ndarray:
        """The (K, N) weight as a plain row-major array (float32, uint16 bf16 bits or int8)."""
        lib = _lib()
        out = np.empty(self.shape, dtype=self.dtype)
        plain = _md(self.shape, self._dt)
        try:
            _reorder(self.md, self.data.ctypes.data, plain, out.ctypes.data)
        finally:
            lib.dnnl_memory_desc_destroy(plain)
        return out

    def __repr__(self) -> str:
        return f"Packed({self.shape}, {np.dtype(self.dtype).name}, {self.impl})"

    def __del__(self):
        try:
            lib = _state.get("lib")
            md = getattr(self, "md", None)
            if lib is not None and md:
                lib.dnnl_memory_desc_destroy(md)
        except Exception:  # noqa: BLE001  (interpreter shutdown: module globals may be gone)
            pass


def _reorder(src_md, src_ptr: int, dst_md, dst_ptr: int) -> None:
    """Copy between two layouts of the same tensor (one-off: packing and unpacking weights)."""
    lib, eng = _lib(), _state["engine"]
    pd, prim, attr = ctypes.c_void_p(), ctypes.c_void_p(), _strict_attr()
    try:
        _check(lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, eng, dst_md, eng, attr),
               "reorder_desc_create")
    finally:
        lib.dnnl_primitive_attr_destroy(attr)
    mems = []
    try:
        _check(lib.dnnl_primitive_create(ctypes.byref(prim), pd), "reorder create")
        mems = [_memory(src_md, src_ptr), _memory(dst_md, dst_ptr)]
        args = (_ExecArg * 2)(_ExecArg(_ARG_SRC, mems[0]), _ExecArg(_ARG_DST, mems[1]))
        _check(lib.dnnl_primitive_execute(prim, _stream(), 2, args), "reorder")
        _check(lib.dnnl_stream_wait(_stream()), "stream_wait")
    finally:
        for m in mems:
            lib.dnnl_memory_destroy(m)
        if prim:
            lib.dnnl_primitive_destroy(prim)
        lib.dnnl_primitive_desc_destroy(pd)


def pack(w: np.ndarray) -> Packed:
    """(K, N) float32, bf16 (uint16) or int8 weight -> Packed (reordered once)."""
    return Packed(w)


# --------------------------------------------------------------------------- per-thread execution
def _thread_state():
    st = getattr(_local, "st", None)
    if st is None:
        lib = _lib()
        stream = ctypes.c_void_p()
        _check(lib.dnnl_stream_create(ctypes.byref(stream), _state["engine"], _STREAM_IN_ORDER), "stream_create")
        gomp = _state.get("gomp")
        if gomp is not None:
            gomp.omp_set_num_threads(1)  # this thread's OpenMP setting only (see the module docstring)
        st = _local.st = {"stream": stream, "prims": OrderedDict(), "scratch": np.empty(0, dtype=np.uint8)}
    return st


def _in_blocks(a: np.ndarray, p: Packed, out: np.ndarray, bias, act) -> np.ndarray:
    """``matmul`` in blocks of ``p.row_block`` rows, the last one through zero-padded buffers (see ROW_BLOCK)."""
    R, M = p.row_block, a.shape[0]
    full = M - M % R
    for s in range(0, full, R):
        matmul(a[s:s + R], p, out[s:s + R], bias, act)
    if full < M:
        _padded(a[full:], p, out[full:], bias, act, R)
    return out


def _padded(a: np.ndarray, p: Packed, out: np.ndarray, bias, act, rows: int) -> np.ndarray:
    """``matmul`` of ``a``'s M < ``rows`` rows as a product of ``rows`` rows (zero rows after them)."""
    M, K = a.shape
    st = _thread_state()
    key = ("pad", rows, K, p.shape[1], a.dtype, out.dtype)
    bufs = st.get(key)
    if bufs is None:
        bufs = st[key] = (np.zeros((rows, K), a.dtype), np.empty((rows, p.shape[1]), out.dtype))
    pa, po = bufs
    pa[:M] = a
    pa[M:] = 0  # rows a previous call left
    matmul(pa, p, po, bias, act)
    out[...] = po[:M]
    return out


def _rows_for_kernel(p: Packed, key: tuple) -> int:
    """The fewest rows whose product of this kind runs on ``p.impl``, the kernel chosen for PACK_ROWS rows (0: none
    below PACK_ROWS does). oneDNN 3.2 sends a product of few short rows elsewhere (AMX bf16 with M x K < 256 to
    avx512_core_bf16), which rounds a row's sums otherwise: a text's vector then depended on its batch."""
    st = _thread_state()
    found = st.setdefault("kernel_rows", {})
    if key not in found:
        M = key[0]
        found[key] = 0
        while M < PACK_ROWS:
            M = min(2 * M, PACK_ROWS)
            prim = _Prim((M, key[1]), p, key[4], key[5], key[6])
            if prim.impl == p.impl:
                found[key] = M
                st["prims"][(M, *key[1:])] = prim  # the padded product's own (made once, not again by matmul)
                break
    return found[key]


def _stream() -> ctypes.c_void_p:
    return _thread_state()["stream"]


class _Prim:
    """One matmul primitive with its memory objects (their data pointers are set at each call): out <- act(a @ w
    + bias), the bias and the activation only when asked for, out float32 / int32, or bf16 (uint16)."""

    __slots__ = ("prim", "mems", "args", "scratch_bytes", "impl", "has_bias")

    def __init__(self, a_shape, p: Packed, out_dt: int, bias: bool, act: str | None):
        lib = _lib()
        M, K = a_shape
        N = p.shape[1]
        src, dst = _md((M, K), p._src_dt, (K, 1)), _md((M, N), out_dt, (N, 1))  # rows back to back (matmul: _gapped)
        bmd = _md((1, N), _F32) if bias else None
        attr, pd, self.prim, post = _user_scratchpad_attr(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.has_bias = bias
        try:
            if act is not None:
                _check(lib.dnnl_post_ops_create(ctypes.byref(post)), "post_ops_create")
                _check(lib.dnnl_post_ops_append_eltwise(post, ACTIVATIONS[act], 0.0, 0.0), "post_ops_append_eltwise")
                _check(lib.dnnl_primitive_attr_set_post_ops(attr, post), "set_post_ops")
            _check(lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), _state["engine"], src, p.md, bmd, dst, attr),
                   f"matmul ({M}, {K}) x ({K}, {N})")
            self.impl = _impl_info(pd)
            _check(lib.dnnl_primitive_create(ctypes.byref(self.prim), pd), "primitive_create")
            smd = lib.dnnl_primitive_desc_query_md(pd, _Q_SCRATCHPAD_MD, 0)
            self.scratch_bytes = int(lib.dnnl_memory_desc_get_size(smd)) if smd else 0
            self.mems = [_memory(src, 0), _memory(p.md, 0), _memory(dst, 0)]
            kinds = [_ARG_SRC, _ARG_WEIGHTS, _ARG_DST]
            if bias:
                self.mems.append(_memory(bmd, 0))
                kinds.append(_ARG_BIAS)
            if self.scratch_bytes:
                self.mems.append(_memory(smd, 0))
                kinds.append(_ARG_SCRATCHPAD)
            self.args = (_ExecArg * len(kinds))(*[_ExecArg(k, m) for k, m in zip(kinds, self.mems)])
        finally:
            for h in (src, dst, bmd):
                if h is not None:
                    lib.dnnl_memory_desc_destroy(h)
            if post:
                lib.dnnl_post_ops_destroy(post)
            lib.dnnl_primitive_attr_destroy(attr)
            if pd:
                lib.dnnl_primitive_desc_destroy(pd)

    def __del__(self):
        try:
            lib = _state.get("lib")
            if lib is None:
                return
            for m in getattr(self, "mems", ()):
                lib.dnnl_memory_destroy(m)
            if getattr(self, "prim", None):
                lib.dnnl_primitive_destroy(self.prim)
        except Exception:  # noqa: BLE001  (interpreter shutdown: module globals may be gone)
            pass


def _row_stride(x: np.ndarray, name: str) -> int:
    """Elements from one row of a 2-D array with contiguous rows to the next (a single row: its width)."""
    if x.ndim != 2 or (x.shape[1] > 1 and x.strides[1] != x.itemsize) or x.strides[0] % x.itemsize:
        raise ValueError(f"{name}: a 2-D array with contiguous rows is required, got shape {x.shape} strides {x.strides}")
    if x.shape[0] <= 1:  # one row: its stride means nothing (a wide one sent oneDNN 3.2 to ref:any)
        return max(x.shape[1], 1)
    return max(x.strides[0] // x.itemsize, x.shape[1], 1)


def _gapped(a: np.ndarray, p: Packed, out: np.ndarray, bias: np.ndarray | None, act: str | None) -> np.ndarray:
    """matmul of rows with gaps between them (a column slice of a wider array, in or out) through packed copies:
    oneDNN 3.2 runs such strides on ``ref:any``, orders of magnitude slower, for fp32, bf16 and int8 alike (measured on
    AMX; the copies cost a fraction of one pass over the rows)."""
    o = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    matmul(np.ascontiguousarray(a), p, o, bias, act)
    if o is not out:
        out[...] = o
    return out


def matmul(a: np.ndarray, p: Packed, out: np.ndarray | None = None, bias: np.ndarray | None = None,
           act: str | None = None) -> np.ndarray:
    """out (M, N) <- act(a (M, K) @ p + bias), on this thread.

    ``a`` is of ``p.src_dtype`` (float32, uint16 bf16, or uint8 for int8 weights). ``out`` is of ``p.out_dtype``
    (float32, or int32 for int8 weights), or uint16 for a bf16 result of a float32 / bf16 product (rounded to
    nearest even by oneDNN). ``bias`` (N,) float32 and ``act`` (a key of ACTIVATIONS) are applied by oneDNN as it
    writes ``out`` (not for int8 weights, whose int32 sums the caller dequantizes first).
    """
    M, K = a.shape
    N = p.shape[1]
    if K != p.shape[0]:
        raise ValueError(f"shapes {a.shape} and {p.shape} do not multiply")
    if a.dtype != p.src_dtype:
        raise TypeError(f"matmul: a is {a.dtype} but a {np.dtype(p.dtype).name} weight multiplies {p.src_dtype.name}")
    if out is None:
        out = np.empty((M, N), dtype=p.out_dtype)
    elif out.shape != (M, N) or not (out.dtype == p.out_dtype or (out.dtype == np.uint16 and p.out_dtype == np.float32)):
        raise ValueError(f"matmul: out must be {p.out_dtype.name} {(M, N)}, got {out.dtype} {out.shape}")
    if (bias is not None or act is not None) and p.out_dtype != np.float32:
        raise ValueError("matmul: bias and activation apply to float products only")
    if bias is not None and (bias.shape != (N,) or bias.dtype != np.float32 or not bias.flags.c_contiguous):
        raise ValueError(f"matmul: bias must be contiguous float32 ({N},), got {bias.dtype} {bias.shape}")
    if M == 0 or N == 0:
        return out
    if _row_stride(a, "a") != K or _row_stride(out, "out") != N:
        return _gapped(a, p, out, bias, act)
    if p.row_block and M != p.row_block:
        return _in_blocks(a, p, out, bias, act)
    st = _thread_state()
    out_dt = _DTYPES[out.dtype] if out.dtype != np.uint16 else _BF16
    key = (M, K, N, p._dt, out_dt, bias is not None, act)
    prims: OrderedDict = st["prims"]
    e = prims.get(key)
    if e is None:
        e = prims[key] = _Prim((M, K), p, out_dt, bias is not None, act)
        if len(prims) > _MAX_PRIMITIVES:
            prims.popitem(last=False)
    else:
        prims.move_to_end(key)
    if e.impl != p.impl and p.out_dtype == np.float32:  # float sums round by kernel (int32 ones are exact)
        rows = _rows_for_kernel(p, key)
        if rows:
            return _padded(a, p, out, bias, act, rows)
    lib = _state["lib"]
    set_h = lib.dnnl_memory_set_data_handle
    set_h(e.mems[0], a.ctypes.data)
    set_h(e.mems[1], p.data.ctypes.data)
    set_h(e.mems[2], out.ctypes.data)
    i = 3
    if e.has_bias:
        set_h(e.mems[3], bias.ctypes.data)
        i = 4
    if e.scratch_bytes:
        if st["scratch"].size < e.scratch_bytes:
            st["scratch"] = np.empty(e.scratch_bytes + (e.scratch_bytes >> 2), dtype=np.uint8)
        set_h(e.mems[i], st["scratch"].ctypes.data)
    _check(lib.dnnl_primitive_execute(e.prim, st["stream"], len(e.args), e.args), "matmul")
    _check(lib.dnnl_stream_wait(st["stream"]), "stream_wait")
    return out
