"""Matrix products for the linear layers: the GEMM layer every model family goes through.

Shapes: M rows (token rows N, or a block of them), K inputs, N outputs of a linear layer.

Two libraries, chosen once per Encoder (``resolve``) and fixed in its weights (``prepare``):
  * NumPy's ``matmul`` (OpenBLAS), the base install's fp32 path;
  * oneDNN's matmul primitive (onednn.py, the ``fast`` extra: ``pip install "bertfeat[fast]"``), with the
    weights reordered once at load into the layout its kernel wants (``onednn.Packed``): fp32, and bf16 on
    CPUs that multiply bf16 natively (AMX on Intel Sapphire Rapids and later, AVX512-BF16 on AMD Zen 4 and
    Intel Cooper Lake).
``matmul(a, w, out)`` dispatches on what the weight is: a ``Packed`` goes to oneDNN, a float32 array to
NumPy, a uint16 array (bf16 without oneDNN, only with BERTFEAT_BF16_EMULATE=1) to the emulation below.

bf16 ("bfloat16") is the top half of a float32: 1 sign, 8 exponent and 7 mantissa bits. NumPy has no
bf16 dtype, so bf16 arrays are ``uint16`` arrays of the bit patterns; ``to_bf16`` rounds float32 to
the nearest bf16 (ties to even, as torch's ``.to(torch.bfloat16)``), ``from_bf16`` widens exactly.
A bf16 GEMM multiplies bf16 inputs and sums in float32; the emulation (both operands widened, then
NumPy's fp32 GEMM) computes the same exact products, so tests of the bf16 numerics run on any CPU.

Precisions: "fp32" (the default: exact parity with sentence-transformers), "bf16" (refused, with what
to do, where oneDNN or the CPU's bf16 is missing; BERTFEAT_BF16_EMULATE=1 runs the emulation instead,
for tests), "auto" (the fastest precision this CPU accelerates: bf16 where oneDNN runs a native bf16
kernel, else fp32; the choice and its reason go into provenance and ``bertfeat info``).
fp32 library: oneDNN when installed and its kernel is brgemm (AVX-512 / AMX CPUs: measured faster than OpenBLAS,
benchmarks/RESULTS.md, and a row's product independent of the row count), else NumPy; BERTFEAT_GEMM=numpy|onednn
forces one.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np

from . import onednn, threads
from .cpu import bf16_acceleration, cpu_model, int8_acceleration
from .bf16 import from_bf16, to_bf16  # noqa: F401  (gemm.to_bf16 / gemm.from_bf16 are public here too)
from ..checks import env_switch
from ..errors import BertfeatError, opt

PRECISIONS = ("fp32", "bf16", "int8")  # what a model runs in
PRECISION_CHOICES = ("fp32", "bf16", "int8", "auto")  # what a user may ask for
GEMM_BACKENDS = ("numpy", "onednn")
FAST_HINT = onednn.HINT


# --------------------------------------------------------------------------- choosing the path
@dataclass(frozen=True)
class GemmPath:
    """How an Encoder's linear layers multiply: fixed at load, recorded in provenance."""

    precision: str  # "fp32" | "bf16" | "int8": what runs
    library: str  # "numpy" | "onednn" | "numpy-bf16-emulated"
    bf16: str | None = None  # "amx" | "avx512_bf16" | "emulated" (bf16 only)
    kernel: str | None = None  # oneDNN's implementation name, e.g. "brg:avx512_core_bf16"
    requested: str = "fp32"  # what the user asked for ("auto" included)
    reason: str = ""  # why this path (for "auto", and where a library was chosen for the user)
    int8: str | None = None  # "amx" | "avx512_vnni" | "avx_vnni" (int8 only)
    scheme: str | None = None  # int8: quant.SCHEME, the scheme's version

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v not in (None, "")}
        d["linear_layers"] = d.pop("precision")
        if self.precision == "int8":
            d["layers"] = {"qkv": "int8", "attention_output": "int8", "ffn_up": "int8", "ffn_down": "int8",
                           "short_sequences": "int8 x two-level (~15-bit) weights",
                           "top_channels": "int8 weights + residual",
                           "outlier_weight_rows": "fp32", "attention_scores": "fp32",
                           "word_embeddings": "bf16, widened as gathered",
                           "layernorm_gelu": "fp32 (the GELU before the FFN's int8 product: a degree-7 polynomial "
                                             "within 1.3e-4 of the exact one)"}
        d["library"] = describe_library(self)
        d["cpu"] = cpu_model()
        return d


def describe_library(path: GemmPath) -> str:
    if path.library == "onednn":
        return f"oneDNN {onednn.version()} matmul ({path.kernel})"
    if path.library == "numpy-bf16-emulated":
        return "numpy matmul of the widened bf16 operands (bf16 emulated)"
    return "numpy matmul"


def emulation_allowed() -> bool:
    """BERTFEAT_BF16_EMULATE: 1 (true, yes, on) runs bf16 emulated where it is not native; unset, empty or 0 (false,
    no, off) does not; anything else is refused naming it (checks.env_switch)."""
    return env_switch("BERTFEAT_BF16_EMULATE", False)


def check_knobs() -> None:
    """Refuse a developer knob set to a value it does not take (BERTFEAT_BF16_EMULATE, BERTFEAT_FUSE,
    BERTFEAT_BLAS_KERNEL), whatever the precision: read where a model's GEMM path is chosen, as BERTFEAT_GEMM is, so
    that the error reaches the command line's one line (a knob read at import would fail ``import bertfeat``)."""
    emulation_allowed()
    post_ops_off()
    threads.check_blas_kernel()


_kernels: dict[str, str | None] = {}


def _probe_kernel(dtype) -> str | None:
    """The oneDNN kernel a (512, 64) x (64, 64) matmul of this type runs on here, None if oneDNN is missing."""
    name = np.dtype(dtype).name
    if name not in _kernels:
        if not onednn.available():
            return None
        try:
            _kernels[name] = onednn.pack(np.zeros((64, 64), dtype=dtype)).impl
        except onednn.DnnlError as e:  # e.g. no bf16 implementation at all on this CPU
            _kernels[name] = f"unavailable: {e}"
    return _kernels[name]


def native_bf16_kernel(kernel: str | None) -> bool:
    """Does oneDNN's kernel name say it multiplies bf16 in hardware (AVX512-BF16 or AMX)?"""
    # oneDNN names its kernels by the ISA they run on: "brg:avx512_core_bf16" (AVX512-BF16), "brg:avx512_core_amx"
    # (AMX), "avx2_vnni_2" (AVX-NE-CONVERT). "gemm:jit:bf16" or "brg:avx512_core" convert bf16 in software.
    return bool(kernel) and any(isa in kernel for isa in ("avx512_core_bf16", "amx", "avx2_vnni_2"))


def fp32_library() -> tuple[str, str]:
    """(library, reason) for fp32: BERTFEAT_GEMM if set, else oneDNN when installed, else NumPy."""
    want = os.environ.get("BERTFEAT_GEMM", "").strip().lower()
    if want and want not in GEMM_BACKENDS:
        raise BertfeatError(f"unknown GEMM backend BERTFEAT_GEMM={want!r}", f"choose one of {', '.join(GEMM_BACKENDS)}, or unset it")
    if want == "onednn" and not onednn.available():
        raise BertfeatError(f"BERTFEAT_GEMM=onednn needs oneDNN (libdnnl), which is not installed ({onednn.load_error()})",
                            f"{FAST_HINT}, or unset BERTFEAT_GEMM")
    if want:
        return want, f"BERTFEAT_GEMM={want}"
    if not onednn.available():
        return "numpy", "oneDNN is not installed"
    kernel = _probe_kernel(np.float32)
    if kernel and kernel.startswith("brg:"):
        return "onednn", f"oneDNN's {kernel} kernel (faster fp32 GEMMs than OpenBLAS, rows independent of the row count)"
    # e.g. gemm:jit:f32 on AVX2-only CPUs: bit-for-bit rows there only in fixed blocks of rows (onednn.ROW_BLOCK), which
    # cost 6 % of an encode against OpenBLAS, whose rows round by their place in the batch by ~1e-7
    return "numpy", (f"oneDNN's fp32 kernel here is {kernel}, not brgemm: OpenBLAS is faster, and rounds a row by its "
                     "place in the batch (~1e-7); BERTFEAT_GEMM=onednn gives bit-for-bit rows at ~0.94x its speed")


def native_int8_kernel(kernel: str | None) -> bool:
    """Does oneDNN's kernel name say it multiplies int8 in hardware (VNNI or AMX)?"""
    return bool(kernel) and any(isa in kernel for isa in ("vnni", "amx"))


def _resolve_int8() -> GemmPath:
    kernel = _probe_kernel(np.int8)
    if kernel is None:
        raise BertfeatError(f"{opt('precision', 'int8')} needs oneDNN's int8 matmul (libdnnl), which is not installed",
                            f"{FAST_HINT}, or use {opt('precision', 'fp32')} (or {opt('precision', 'auto')})")
    acc = int8_acceleration()
    if acc is None:
        # vpmaddubsw adds two uint8 x int8 products in 16 bits, saturating (benchmarks/avx2_int8_levels.py)
        raise BertfeatError(f"this CPU ({cpu_model()}) has no VNNI or AMX: oneDNN's int8 kernel here ({kernel}) adds "
                            "pairs of products in 16 bits, which overflow on int8's 8-bit inputs, and inputs narrow "
                            "enough to fit lose int8's quality (docs/precision.md)",
                            f"use {opt('precision', 'fp32')} (or {opt('precision', 'auto')}) here")
    if not native_int8_kernel(kernel):
        raise BertfeatError(f"oneDNN {onednn.version()} runs int8 here on {kernel}, not on a VNNI or AMX kernel",
                            f"use {opt('precision', 'fp32')} (or {opt('precision', 'auto')}); ONEDNN_MAX_CPU_ISA may be limiting it")
    from .quant import SCHEME

    return GemmPath("int8", "onednn", None, kernel, "int8", f"native int8 ({acc.upper().replace('_', '-')})", int8=acc,
                    scheme=SCHEME)


def check_precision(precision: str) -> None:
    """A precision a user may ask for (PRECISION_CHOICES), else the error that lists them."""
    if precision not in PRECISION_CHOICES:
        raise BertfeatError(f"unknown {opt('precision', precision, cli=repr(precision))}",
                            f"choose one of {', '.join(PRECISION_CHOICES)}")


def resolve(precision: str) -> GemmPath:
    """The GEMM path for a requested precision ("fp32", "bf16", "int8" or "auto"); refuses what cannot run here (and a
    developer knob set to a value it does not take: check_knobs)."""
    check_precision(precision)
    check_knobs()
    if precision == "fp32":
        lib, why = fp32_library()
        return _fp32_path(lib, why, "fp32")
    if precision == "int8":
        return _resolve_int8()
    kernel = _probe_kernel(np.uint16)
    acc = bf16_acceleration()
    native = acc is not None and native_bf16_kernel(kernel)
    if precision == "auto":
        if native:
            return GemmPath("bf16", "onednn", acc, kernel, "auto",
                            f"this CPU multiplies bf16 natively ({_acc_name(acc)}, oneDNN kernel {kernel})")
        lib, _ = fp32_library()
        if acc is None:
            why = f"this CPU ({cpu_model()}) has no AMX or AVX512-BF16"
        elif kernel is None:
            why = f"oneDNN, which bf16 needs, is not installed ({FAST_HINT})"
        else:
            why = f"oneDNN's bf16 kernel here is {kernel}, not a native one"
        return _fp32_path(lib, f"fp32 because {why}", "auto")
    if native:
        return GemmPath("bf16", "onednn", acc, kernel, "bf16", f"native bf16 ({_acc_name(acc)})")
    if emulation_allowed():
        return GemmPath("bf16", "numpy-bf16-emulated", "emulated", None, "bf16", "BERTFEAT_BF16_EMULATE=1")
    if kernel is None:
        raise BertfeatError(f"{opt('precision', 'bf16')} needs oneDNN's bf16 matmul (libdnnl), which is not installed",
                            f"{FAST_HINT}, or use {opt('precision', 'fp32')} (or {opt('precision', 'auto')})")
    if acc is None:
        raise BertfeatError(f"this CPU ({cpu_model()}) has no AMX or AVX512-BF16, so bf16 would be emulated, not accelerated",
                            f"use {opt('precision', 'fp32')} (or {opt('precision', 'auto')}) here, or set "
                            "BERTFEAT_BF16_EMULATE=1 to run the emulated bf16 path anyway (for testing)")
    raise BertfeatError(f"oneDNN {onednn.version()} runs bf16 here on {kernel}, not on a native bf16 kernel",
                        f"use {opt('precision', 'fp32')} (or {opt('precision', 'auto')}); ONEDNN_MAX_CPU_ISA may be limiting it")


def _fp32_path(lib: str, why: str, requested: str) -> GemmPath:
    kernel = _probe_kernel(np.float32) if lib == "onednn" else None
    if kernel and kernel.startswith("gemm:jit"):  # its rounding is that of the blocks (in the cache key: gemm_identity)
        kernel = f"{kernel} in blocks of {onednn.ROW_BLOCK} rows"
    return GemmPath("fp32", lib, None, kernel, requested, why)


def _acc_name(acc: str) -> str:
    return "AMX" if acc == "amx" else "AVX512-BF16"


LINEAR_WEIGHTS = ("qkv_w", "o_w", "up_w", "down_w")


def row_stable(w: np.ndarray | None, path: GemmPath):
    """A float32 weight outside the layers (a Dense module, the pooler, ELECTRA's embeddings_project) in the form whose
    ``matmul`` keeps a row's product independent of how many rows it is computed with: packed for oneDNN's fp32 brgemm
    kernel where the model runs on oneDNN (in every precision: these stay float32), else as it is. NumPy's BLAS rounds
    a row by the row count, so such a layer made a text's vector depend on its batch (by ~1e-6) where the layers did
    not."""
    if w is None or path.library != "onednn" or not (_probe_kernel(np.float32) or "").startswith(("brg:", "gemm:jit")):
        return w
    return onednn.pack(np.ascontiguousarray(w, dtype=np.float32))


def prepare(weights, path: GemmPath):
    """Put a model's linear weights in the form ``path`` multiplies: packed for oneDNN (once, here; the
    plain copy is dropped layer by layer), else as loaded. Returns the weights (changed in place)."""
    if path.library != "onednn":
        return weights
    for k in ("emb_proj_w", "pooler_w"):  # float32 in every precision (row_stable)
        setattr(weights, k, row_stable(getattr(weights, k, None), path))
    if path.precision == "int8":
        from .quant import QLinear

        smooth = int8_smoothing(weights)
        for i, lw in enumerate(weights.layers):  # each layer's bf16 (or float32) weights dropped as it is quantized
            for k in LINEAR_WEIGHTS:
                setattr(lw, k, QLinear(_float(getattr(lw, k)), smooth.get((i, k))))
        # the word embeddings as bf16 too (the forward pass widens the rows it gathers, model.bert.word_rows): with
        # them an int8 model's memory is below bf16's (bert-base shape: 94 MB of float32 table, 47 in bf16); a tied
        # masked-LM decoder keeps its own float32 reference
        word = weights.word
        weights.word = np.empty(word.shape, np.uint16)
        for a in range(0, len(word), 4096):  # in slices: a whole-table conversion's temporaries would set the peak
            to_bf16(word[a:a + 4096], out=weights.word[a:a + 4096], saturate=True)
        del word
        weights.precision = "int8"
        release_freed_memory()
        return weights
    for lw in weights.layers:
        for k in LINEAR_WEIGHTS:
            setattr(lw, k, onednn.pack(getattr(lw, k)))
    return weights


def release_freed_memory() -> None:
    """Hand the heap pages of freed temporaries back to the OS (glibc keeps them: after the int8 quantization's float
    copies, 9 MB of a MiniLM process's peak RSS); nothing elsewhere."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _float(w: np.ndarray) -> np.ndarray:
    """A linear weight as float32: bf16 bit patterns (uint16, an int8 model's load) widened exactly."""
    return from_bf16(w) if w.dtype == np.uint16 else w


def int8_smoothing(weights) -> dict[tuple[int, str], np.ndarray]:
    """{(layer, "qkv_w" | "up_w"): smoothing factors} for int8 (quant.smoothing): in a post-LayerNorm encoder (BERT
    and the families laid out like it) the QKV input of layer i is the output LayerNorm of layer i - 1 (the
    embeddings' for layer 0, unless a projection follows it: ELECTRA) and the FFN up input is the attention
    LayerNorm of layer i. Pre-LayerNorm families (``post_layer_norm = False`` on their weights: ModernBERT) get none
    (not measured on a trained one)."""
    from .quant import smoothing

    if not getattr(weights, "post_layer_norm", True):
        return {}
    out = {}
    for i, lw in enumerate(weights.layers):
        if i:
            out[(i, "qkv_w")] = smoothing(weights.layers[i - 1].ln2_g, weights.layers[i - 1].ln2_b, _float(lw.qkv_w))
        elif getattr(weights, "emb_proj_w", None) is None:  # ELECTRA's embeddings_project comes after the LayerNorm
            out[(i, "qkv_w")] = smoothing(weights.emb_ln_g, weights.emb_ln_b, _float(lw.qkv_w))
        out[(i, "up_w")] = smoothing(lw.ln1_g, lw.ln1_b, _float(lw.up_w))
    return out


def describe_bf16() -> dict:
    """bf16 availability for `bertfeat info` and provenance: CPU support, the library, what would run."""
    acc = bf16_acceleration()
    kernel = _probe_kernel(np.uint16)
    if kernel is None:
        status = f"unavailable: oneDNN not installed ({FAST_HINT})"
    elif acc is None:
        status = (f"not accelerated (no AMX or AVX512-BF16 on this CPU; oneDNN kernel {kernel}): "
                  "refused unless BERTFEAT_BF16_EMULATE=1")
    elif not native_bf16_kernel(kernel):
        status = (f"not accelerated (the CPU has {_acc_name(acc)}, but oneDNN's kernel here is {kernel}; "
                  "ONEDNN_MAX_CPU_ISA may be limiting it): refused unless BERTFEAT_BF16_EMULATE=1")
    else:
        status = f"accelerated ({_acc_name(acc)}, oneDNN kernel {kernel})"
    return {"status": status, "cpu": cpu_model(), "cpu_bf16": acc or "none",
            "library": f"oneDNN {onednn.version()} ({onednn.library_path()})" if kernel else "none"}


def describe_int8() -> str:
    """int8 availability for `bertfeat info`."""
    try:
        p = _resolve_int8()
    except BertfeatError as e:
        return f"unavailable: {e.message}"
    return f"accelerated ({p.int8.upper().replace('_', '-')}, oneDNN kernel {p.kernel}; scheme {p.scheme})"


def describe_auto() -> str:
    """What precision="auto" picks here, and why (for `bertfeat info`)."""
    p = resolve("auto")
    return f"{p.precision} ({p.reason})"


# --------------------------------------------------------------------------- products
def matmul(a: np.ndarray, w, out: np.ndarray | None = None, bias: np.ndarray | None = None,
           act: str | None = None) -> np.ndarray:
    """A linear layer's product a (M, K) @ w (K, N) into ``out`` (M, N) float32, by what ``w`` is:
    oneDNN for a packed weight (``a`` of its type), the bf16 emulation for uint16, else NumPy fp32.

    ``bias`` and ``act`` only where ``fuses(w, act)``: oneDNN adds the bias and applies the activation as it
    writes ``out``, which may then be uint16 (the result rounded to bf16, the next bf16 GEMM's input)."""
    if isinstance(w, onednn.Packed):
        return onednn.matmul(a, w, out, bias, act)
    if bias is not None or act is not None:
        raise ValueError("matmul: bias / act are fused only on oneDNN (check gemm.fuses first)")
    if w.dtype == np.uint16:
        return gemm_bf16_emulated(a, w, out)
    return np.matmul(a, w, out=out)


#: BERTFEAT_FUSE=0 turns the oneDNN post-ops off (for measuring what they buy); read once, at the first GEMM path
#: resolved (check_knobs), and kept for the process: its vectors and cache keys (post_ops_off) stay of one kind
_FUSE: bool | None = None


def _fuse() -> bool:
    global _FUSE
    if _FUSE is None:
        _FUSE = env_switch("BERTFEAT_FUSE", True)  # a value it does not take: refused, each time until it is fixed
    return _FUSE


def post_ops_off() -> bool:
    """BERTFEAT_FUSE=0: the bias / GELU outside oneDNN's GEMM, which rounds otherwise (cache.store.gemm_identity)."""
    return not _fuse()


def fuses(w, act: str | None = None) -> bool:
    """Does this weight's GEMM add the bias (and apply ``act``) itself? (oneDNN post-ops; not for int8 weights)"""
    return _fuse() and isinstance(w, onednn.Packed) and w.out_dtype == np.float32 and (act is None or act in onednn.ACTIVATIONS)


def gemm_bf16_emulated(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """out (M, N) float32 <- a (M, K) @ b (K, N), both bf16 bit patterns: the exact bf16 products, summed in
    float32 by NumPy's GEMM (no bf16 speed; for CPUs without native bf16 under BERTFEAT_BF16_EMULATE=1)."""
    if a.dtype != np.uint16 or b.dtype != np.uint16:
        raise TypeError(f"gemm_bf16_emulated: inputs must be uint16 bf16 bit patterns, got {a.dtype} and {b.dtype}")
    return np.matmul(from_bf16(a), from_bf16(b), out=out)
