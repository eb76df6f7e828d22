"""precision="bf16" and "auto": rounding, the oneDNN GEMMs, the fused bf16 kernels, quality against fp32,
the CLI, provenance, errors. See bertfeat/ops/gemm.py, bertfeat/ops/onednn.py and docs/precision.md.

On a CPU with AVX512-BF16 or AMX and oneDNN installed (``pip install "bertfeat[fast]"``) the bf16 tests run
oneDNN's native bf16 kernels. Elsewhere bertfeat refuses bf16 unless BERTFEAT_BF16_EMULATE=1: the
``emulate`` fixture sets it, so there the numbers below are the emulation's (the same exact bf16 products,
summed in fp32 by NumPy; only the speed differs). Tests of oneDNN itself skip, saying so, where it is missing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from extract_util import NOT_BIT_FOR_BIT, rows_bit_for_bit

from bertfeat.ops import gemm, kernels, onednn
from bertfeat.cli.app import main
from bertfeat.model.config import BertConfig
from bertfeat.model.encoder import Encoder
from bertfeat.errors import BertfeatError
from bertfeat.features import read_features
from bertfeat.model.bert import add_layer_norm_, bert_forward, bias_act_
from bertfeat.model.weights import load_weights
from ckpt import make_ckpt, row_cosines  # noqa: F401  (make_ckpt is a fixture)

needs_onednn = pytest.mark.skipif(not onednn.available(),
                                  reason='oneDNN (libdnnl) not installed: pip install "bertfeat[fast]" to run the oneDNN tests')
NATIVE_BF16 = gemm.resolve("auto").precision == "bf16"
needs_native_bf16 = pytest.mark.skipif(not NATIVE_BF16, reason=f"no native bf16 here: {gemm.describe_bf16()['status']}")


def bf16_gemms():
    """The bf16 GEMMs this machine can run: oneDNN's native one (packed weights) and the emulation."""
    out = [("emulated", lambda b: b)]
    if NATIVE_BF16:
        out.append(("onednn", onednn.pack))
    return out

MIN_COSINE = 0.999  # issue 13: bf16 features against fp32 on real sentences


@pytest.fixture(autouse=True)
def emulate(monkeypatch):
    monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")


def torch_bf16_bits(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


# --------------------------------------------------------------------------- rounding and GEMMs
def test_to_bf16_rounds_like_torch():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(10000).astype(np.float32) * np.float32(10.0) ** rng.integers(-30, 30, 10000),
                        np.array([0.0, -0.0, np.inf, -np.inf, 3.3895314e38, -3.3895314e38, 1e-40, -1e-45], np.float32)])
    ties = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F808001, 0x3F807FFF], np.uint32).view(np.float32)
    x = np.concatenate([x, ties]).astype(np.float32)
    np.testing.assert_array_equal(gemm.to_bf16(x), torch_bf16_bits(x))
    np.testing.assert_array_equal(gemm.to_bf16(ties), [0x3F80, 0x3F82, 0xBF80, 0x3F81, 0x3F80])  # ties to even
    back = gemm.from_bf16(gemm.to_bf16(x[:10000]))
    assert np.all(np.abs(back - x[:10000]) <= np.abs(x[:10000]) * 2.0**-8)  # half an ulp of 7 mantissa bits
    nan = gemm.to_bf16(np.array([np.nan, -np.nan, np.float32(np.nan)], np.float32))
    assert np.isnan(gemm.from_bf16(nan)).all()


def test_weights_round_to_bf16_saturating():
    """saturate=True (weights at load): a finite float32 beyond bf16's largest value gives that value of its sign,
    not infinity (from 3.39618e38, half way between it and infinity, up to float32's largest); all else as torch
    rounds, inf and NaN kept. The default stays torch's (infinity)."""
    tie = np.array([0x7F7F8000], np.uint32).view(np.float32)[0]  # 3.39618e38: half way to inf, rounds to even (inf)
    big = np.array([3.3895314e38, tie, 3.4e38, np.finfo(np.float32).max, -np.finfo(np.float32).max,
                     3.39e38, 1.0, -2.5, 0.0, np.inf, -np.inf, np.nan], np.float32)
    got = gemm.to_bf16(big, saturate=True)
    np.testing.assert_array_equal(got[:5], [0x7F7F, 0x7F7F, 0x7F7F, 0x7F7F, 0xFF7F])
    np.testing.assert_array_equal(got[5:11], torch_bf16_bits(big)[5:11])
    assert np.isnan(gemm.from_bf16(got[11:])).all()
    np.testing.assert_array_equal(gemm.to_bf16(big)[:5], torch_bf16_bits(big)[:5])  # 0x7F7F, then inf: as torch
    assert gemm.to_bf16(big)[1] == 0x7F80 and gemm.to_bf16(big)[4] == 0xFF80
    out = np.zeros(big.shape, np.uint16)
    assert gemm.to_bf16(big, out=out, saturate=True) is out and np.array_equal(out[:11], got[:11])


@pytest.mark.parametrize("name,prep", bf16_gemms(), ids=[n for n, _ in bf16_gemms()])
def test_gemm_bf16_accumulates_in_fp32(name, prep):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((70, 384)).astype(np.float32)
    b = rng.standard_normal((384, 1536)).astype(np.float32)
    a16, b16 = gemm.to_bf16(a), gemm.to_bf16(b)
    exact = gemm.from_bf16(a16).astype(np.float64) @ gemm.from_bf16(b16).astype(np.float64)
    out = np.full((80, 1536), np.float32(7.0))
    got = gemm.matmul(a16, prep(b16), out=out[5:75])  # rows of a larger buffer, as ffn() blocks write
    err = np.abs(got - exact).max() / np.abs(exact).max()
    print(f"{name} bf16 GEMM vs float64 of the same bf16 inputs: max rel error {err:.2e}")
    assert err < 1e-5  # fp32 accumulation of exact bf16 products
    assert (out[:5] == 7.0).all() and (out[75:] == 7.0).all()
    vs_fp32 = np.abs(got - a @ b).max() / np.abs(a @ b).max()
    print(f"{name} bf16 GEMM vs fp32 GEMM: max rel error {vs_fp32:.2e}")
    assert 1e-4 < vs_fp32 < 2e-2  # bf16 rounding of the inputs is really there
    with pytest.raises(TypeError):
        gemm.matmul(a, prep(b16))


@needs_onednn
def test_onednn_packed_weights_round_trip_and_fp32_matches_numpy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((130, 384)).astype(np.float32)
    b = rng.standard_normal((384, 96)).astype(np.float32)
    p = onednn.pack(b)
    assert p.shape == b.shape and p.dtype == np.float32 and p.size == b.size
    np.testing.assert_array_equal(p.plain(), b)  # the reorder is a pure copy into oneDNN's layout
    if NATIVE_BF16:  # (oneDNN has no bf16 matmul at all on some CPUs: "unimplemented")
        b16 = gemm.to_bf16(b)
        np.testing.assert_array_equal(onednn.pack(b16).plain(), b16)
    got = gemm.matmul(a, p)
    err = np.abs(got - a @ b).max()
    print(f"oneDNN f32 matmul ({p.impl}) vs numpy matmul: max abs diff {err:.2e}")
    assert err < 1e-4
    with pytest.raises(ValueError, match="do not multiply"):
        gemm.matmul(a[:, :100], p)
    out = np.zeros((130, 97), np.float32)
    with pytest.raises(ValueError, match="contiguous rows"):
        gemm.matmul(a, p, out=out[:, :96][:, ::-1])


@needs_onednn
def test_onednn_threads_each_get_their_own_primitives():
    """Batches run side by side in threads: each thread multiplies with its own primitive and scratchpad,
    and the results equal the single-threaded ones bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    p = onednn.pack(rng.standard_normal((384, 1536)).astype(np.float32))
    xs = [rng.standard_normal((m, 384)).astype(np.float32) for m in (5, 64, 300, 301, 5, 64, 300, 301) * 4]
    alone = [gemm.matmul(x, p) for x in xs]
    with ThreadPoolExecutor(4) as ex:
        together = list(ex.map(lambda x: gemm.matmul(x, p), xs))
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


@needs_onednn
def test_fp32_forward_on_onednn_matches_numpy(minilm_dir, real_sentences, monkeypatch):
    """fp32 through oneDNN (the default where it is installed) gives NumPy's fp32 features to float32 rounding,
    and every linear layer goes through oneDNN."""
    monkeypatch.setenv("BERTFEAT_GEMM", "numpy")
    ref_enc = Encoder(minilm_dir)
    assert ref_enc.gemm_path.library == "numpy" and ref_enc.gemm_path.reason == "BERTFEAT_GEMM=numpy"
    texts = real_sentences[:40]
    ref = ref_enc.encode(texts)
    monkeypatch.setenv("BERTFEAT_GEMM", "onednn")  # (the default where its fp32 kernel is brgemm: gemm.fp32_library)
    enc = Encoder(minilm_dir)
    assert enc.gemm_path.library == "onednn" and enc.gemm_path.precision == "fp32"
    calls = []
    mm = onednn.matmul
    monkeypatch.setattr(onednn, "matmul", lambda a, p, out=None, bias=None, act=None: calls.append(p.shape) or mm(a, p, out, bias, act))
    got = enc.encode(texts)
    H, F = enc.config.hidden_size, enc.config.intermediate_size
    assert {(H, 3 * H), (H, H), (H, F), (F, H)} <= set(calls)  # every linear layer went through oneDNN
    print(f"fp32 oneDNN vs numpy: max abs diff {np.abs(got - ref).max():.2e}")
    np.testing.assert_allclose(got, ref, atol=2e-5)


# --------------------------------------------------------------------------- fused kernels write bf16
def test_bf16_kernels_write_the_rounded_fp32_result():
    """The numba kernels that write bf16 (bias + activation, add + LayerNorm, the context's transpose, a plain
    conversion): exactly their fused fp32 twin rounded by gemm.to_bf16, that twin within float rounding of model/bert.py's
    NumPy steps. (On the NumPy backend model/bert.py runs those very steps: nothing to compare there.)"""
    if kernels.use("numba") != "numba":
        pytest.skip(f"numba kernels unavailable: {kernels.unavailable_reason()}")
    try:
        rng = np.random.default_rng(3)
        u = rng.standard_normal((33, 96)).astype(np.float32) * 3
        b = rng.standard_normal(96).astype(np.float32)
        for act in ("gelu", "relu"):  # the activations with a fused bf16 kernel
            assert kernels.get(act + "_bf16") is not None
            kernels.use("numpy")
            numpy_ref = bias_act_(u.copy(), b, act)  # model/bert.py's NumPy steps
            kernels.use("numba")
            ref = bias_act_(u.copy(), b, act)  # the fused fp32 kernel, the bf16 kernel's twin
            np.testing.assert_allclose(ref, numpy_ref, rtol=0, atol=2e-6, err_msg=act)
            out16 = np.zeros(u.shape, np.uint16)
            got = bias_act_(u.copy(), b, act, out16=out16)
            assert got is out16
            np.testing.assert_array_equal(out16, gemm.to_bf16(ref), err_msg=act)
        y, r = u[:, :64].copy(), rng.standard_normal((33, 64)).astype(np.float32)
        g, beta, bb = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
        ref = add_layer_norm_(y.copy(), bb, r, g, beta, 1e-12)  # the fused fp32 kernel: add_layer_norm_bf16_'s twin
        kernels.use("numpy")
        np.testing.assert_allclose(ref, add_layer_norm_(y.copy(), bb, r, g, beta, 1e-12), rtol=0, atol=2e-6)
        kernels.use("numba")
        y16 = np.zeros(y.shape, np.uint16)
        got = add_layer_norm_(y.copy(), bb, r, g, beta, 1e-12, out16=y16)
        # the fp32 result is the fp32 kernel's within float rounding: two kernels compiled apart with fastmath
        # 'reassoc' may sum in another order (a fresh clone's numba cache, written by two test workers, gave 1 ulp)
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6)
        np.testing.assert_array_equal(y16, gemm.to_bf16(got))  # its bf16 output is its own fp32 result rounded
        from bertfeat.model.bert import elementwise

        k = elementwise()
        assert k.ctx_rows_bf16_ is kernels.get("ctx_rows_bf16_") and k.to_bf16_ is kernels.get("to_bf16_")
        ctx = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
        rows = np.zeros((2, 5, 4, 8), np.uint16)
        np.testing.assert_array_equal(k.ctx_rows_bf16_(ctx, rows), gemm.to_bf16(ctx.transpose(0, 2, 1, 3)))
        np.testing.assert_array_equal(k.to_bf16_(y, np.zeros(y.shape, np.uint16)), gemm.to_bf16(y))
    finally:
        kernels.use(None)


# --------------------------------------------------------------------------- weights
def test_weights_bf16_at_load(minilm_dir):
    c = BertConfig.from_file(minilm_dir / "config.json")
    w32, w16 = load_weights(minilm_dir, c), load_weights(minilm_dir, c, "bf16")
    assert w16.precision == "bf16" and w32.precision == "fp32"
    for l32, l16 in zip(w32.layers, w16.layers):
        for k in ("qkv_w", "o_w", "up_w", "down_w"):
            a = getattr(l16, k)
            assert a.dtype == np.uint16 and a.flags.c_contiguous, k
            np.testing.assert_array_equal(a, gemm.to_bf16(getattr(l32, k)))
        for k in ("qkv_b", "o_b", "ln1_g", "ln1_b", "up_b", "down_b", "ln2_g", "ln2_b"):
            assert getattr(l16, k).dtype == np.float32
            np.testing.assert_array_equal(getattr(l16, k), getattr(l32, k))
    for k in ("word", "position", "token_type", "emb_ln_g", "pooler_w"):
        assert getattr(w16, k).dtype == np.float32
    lin32 = sum(getattr(l, k).nbytes for l in w32.layers for k in ("qkv_w", "o_w", "up_w", "down_w"))
    assert w32.nbytes() - w16.nbytes() == lin32 // 2
    print(f"weights in memory: fp32 {w32.nbytes() / 1e6:.1f} MB, bf16 {w16.nbytes() / 1e6:.1f} MB")


# --------------------------------------------------------------------------- quality
def _per_layer(w32, w16, texts, enc):
    """Largest |bf16 - fp32| per hidden state over real rows, printed (as the parity tests do)."""
    from bertfeat.model.tokenize import pad_batch

    prep = enc.prepare(texts, None, enc.spec())
    ids, types, mask = pad_batch(prep.ids, prep.type_ids, enc.tokenizer.pad_id)
    L = w32.config.num_hidden_layers
    keep = tuple(range(L + 1))
    a = bert_forward(w32, ids, types, mask, keep=keep).hidden
    b = bert_forward(w16, ids, types, mask, keep=keep).hidden
    m = mask.astype(bool)
    diffs = [float(np.abs(a[i][m] - b[i][m]).max()) for i in keep]
    print("max |bf16 - fp32| per hidden state: " + ", ".join(f"{i}:{d:.3g}" for i, d in enumerate(diffs)))
    return diffs


def test_minilm_bf16_quality(minilm_dir, real_sentences):
    """all-MiniLM-L6-v2, its own sentence embedding (mean pooling + normalize), ~400 real sentences."""
    e32, e16 = Encoder(minilm_dir), Encoder(minilm_dir, precision="bf16")
    assert e16.precision == "bf16" and e16.bf16_mode in ("amx", "avx512_bf16", "emulated")
    X32 = e32.encode(real_sentences, normalize=True)
    X16 = e16.encode(real_sentences, normalize=True)
    cos = row_cosines(X32, X16)
    print(f"MiniLM bf16 vs fp32 over {len(cos)} real sentences: min cosine {cos.min():.6f}, "
          f"mean {cos.mean():.6f}, max |diff| {np.abs(X32 - X16).max():.3g}")
    assert cos.min() >= MIN_COSINE
    assert np.abs(X32 - X16).max() > 1e-4  # bf16 was really used (an fp32 fallback would be ~1e-7 off)
    diffs = _per_layer(e32.weights, e16.weights, real_sentences[:24], e32)
    assert diffs[0] == 0.0  # embeddings are fp32 in both
    assert all(d > 0 for d in diffs[1:])
    # every pooling the user can ask for
    for pooling in ("cls", "max", "pooled"):
        c = row_cosines(e32.encode(real_sentences[:100], pooling=pooling), e16.encode(real_sentences[:100], pooling=pooling))
        print(f"  pooling {pooling}: min cosine {c.min():.6f}")
        assert c.min() >= MIN_COSINE


def test_minilm_bf16_numpy_kernels_agree(minilm_dir, real_sentences):
    """The NumPy fallback (no numba) of the bf16 path gives the same features as the fused kernels,
    up to bf16 rounding of values that differ in the last fp32 bit."""
    enc = Encoder(minilm_dir, precision="bf16")
    texts = real_sentences[:60]
    a = enc.encode(texts)
    kernels.use("numpy")
    try:
        b = enc.encode(texts)
    finally:
        kernels.use(None)
    cos = row_cosines(a, b)
    print(f"bf16 numba vs numpy kernels: min cosine {cos.min():.7f}")
    assert cos.min() > 0.9999


@needs_onednn
@pytest.mark.parametrize("shape", [(384, 1536), (64, 64), (32, 96), (100, 300)])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_onednn_rows_do_not_depend_on_the_row_count(dtype, shape):
    """A row's product is the same whatever the row count (oneDNN makes a primitive per count), on the kernels bertfeat
    uses oneDNN for: the native bf16 ones, and fp32 where gemm.fp32_library picks oneDNN (brgemm kernels only: on AVX2,
    oneDNN 3.2's gemm:jit:f32 rounds differently for different row counts, so bertfeat keeps OpenBLAS there).
    The short inputs: on AMX, oneDNN 3.2 multiplied a bf16 product of M x K < 256 on avx512_core_bf16, not AMX, and
    its rows rounded otherwise (a small model's or a Dense module's vector depended on its batch; onednn._padded)."""
    if dtype == "bf16" and not NATIVE_BF16:
        pytest.skip("no native bf16 here")
    if dtype == "fp32" and gemm.fp32_library()[0] != "onednn":
        pytest.skip(f"fp32 does not run on oneDNN here: {gemm.fp32_library()[1]}")
    K, N = shape
    rng = np.random.default_rng(4)
    a = rng.standard_normal((300, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32) * 0.05
    bias = rng.standard_normal(N).astype(np.float32)
    if dtype == "bf16":
        a, b = gemm.to_bf16(a), gemm.to_bf16(b)
    p = onednn.pack(b)
    full = gemm.matmul(a, p)
    fused = onednn.matmul(a, p, bias=bias, act="gelu")
    for M in (1, 2, 3, 4, 7, 16, 17, 100, 299):
        np.testing.assert_array_equal(gemm.matmul(a[:M].copy(), p), full[:M], err_msg=f"{M} rows")
        np.testing.assert_array_equal(gemm.matmul(a[1:M + 1], p), full[1:M + 1], err_msg=f"{M} rows at offset 1")
        np.testing.assert_array_equal(onednn.matmul(a[:M].copy(), p, bias=bias, act="gelu"), fused[:M],
                                      err_msg=f"{M} rows, bias and GELU")


@pytest.mark.skipif(not rows_bit_for_bit(), reason=NOT_BIT_FOR_BIT)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_bf16_rows_do_not_depend_on_the_batch(minilm_dir, real_sentences, precision):
    """As in fp32, a row's features do not depend on its batch neighbours or padding, bit for bit: GEMM rows do not
    depend on the row count on oneDNN, and attention scores are each sequence's own (bert.own_length_scores; before,
    the batched score product's rounding changed with the padded length by ~6e-7, which a bf16 rounding of an
    activation then carried to ~2e-3)."""
    if precision == "bf16" and not NATIVE_BF16:  # fp32 on oneDNN (BERTFEAT_GEMM=onednn on AVX2) and bf16 emulated
        pytest.skip("bf16 is emulated here, on NumPy's BLAS, whose rows round by their batch (~1e-7)")
    texts = real_sentences[:30]
    enc = Encoder(minilm_dir, precision=precision, threads=1)
    together = enc.encode(texts)
    alone = np.concatenate([enc.encode([t]) for t in texts])
    print(f"{precision} batch vs one at a time: max |diff| {np.abs(together - alone).max():.3g}")
    np.testing.assert_array_equal(together, alone)


@pytest.mark.slow
def test_bert_base_shape_bf16_quality(make_ckpt, real_sentences):
    """A random-weight bert-base-uncased-shaped checkpoint (768 hidden, 12 layers, 12 heads)."""
    d = make_ckpt(hidden=768, layers=12, heads=12, intermediate=3072, seed=5)
    texts = real_sentences[::5]
    X32 = Encoder(d).encode(texts, pooling="mean")
    e16 = Encoder(d, precision="bf16")
    X16 = e16.encode(texts, pooling="mean")
    cos = row_cosines(X32, X16)
    print(f"bert-base shape bf16 vs fp32 over {len(cos)} real sentences: min cosine {cos.min():.6f}, mean {cos.mean():.6f}")
    assert cos.min() >= MIN_COSINE
    assert np.abs(X32 - X16).max() > 1e-4
    c = row_cosines(Encoder(d).encode(texts[:40], pooling="cls"), e16.encode(texts[:40], pooling="cls"))
    print(f"  cls: min cosine {c.min():.6f}")
    assert c.min() >= MIN_COSINE


# --------------------------------------------------------------------------- CLI, provenance, errors
def _extract(tmp_path, capsys, texts, *args):
    src = tmp_path / "in.csv"
    if not src.exists():
        import csv

        with open(src, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["text"])
            w.writerows([[t] for t in texts])
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}.parquet"
    rc = main(["extract", str(src), "-o", str(out), "--quiet", *args])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    ids, X, meta = read_features(out)
    _extract.last = out
    return X, meta


def test_extract_precision_is_what_provenance_says(tmp_path, capsys, minilm_dir, real_sentences):
    """Fails if bf16 output silently falls back to fp32 (or fp32 to bf16) without provenance saying so:
    each file's features must be exactly what an Encoder of the precision its provenance names gives."""
    texts = real_sentences[:50]
    X16, m16 = _extract(tmp_path, capsys, texts, "--model", str(minilm_dir), "--precision", "bf16")
    X32, m32 = _extract(tmp_path, capsys, texts, "--model", str(minilm_dir))
    assert m16["precision"] == "bf16" and m16["fingerprint"]["precision"] == "bf16"
    assert m16["gemm"]["linear_layers"] == "bf16"
    if NATIVE_BF16:
        assert m16["gemm"]["library"].startswith(f"oneDNN {onednn.version()} matmul (")
        assert m16["gemm"]["bf16"] in ("amx", "avx512_bf16") and native_kernel(m16["gemm"]["kernel"])
    else:
        assert m16["gemm"]["library"].startswith("numpy matmul of the widened bf16 operands")
        assert m16["gemm"]["bf16"] == "emulated"
    assert m32["precision"] == "fp32" and m32["fingerprint"]["precision"] == "fp32" and m32["gemm"]["linear_layers"] == "fp32"
    by = {p: Encoder(minilm_dir, precision=p).encode(texts) for p in ("fp32", "bf16")}
    np.testing.assert_array_equal(X16, by["bf16"])
    np.testing.assert_array_equal(X32, by["fp32"])
    assert np.abs(X16 - X32).max() > 1e-4  # the two precisions are distinguishable, so the checks above bite
    assert row_cosines(X16, X32).min() >= MIN_COSINE


def test_pca_and_report_on_bf16_features(tmp_path, capsys, minilm_dir, real_sentences):
    """bertfeat pca / report work on bf16-made features; a PCA fitted on them names the precision when
    applied to fp32-made features (a fingerprint difference, as for any other setting)."""
    texts = real_sentences[:60]
    _extract(tmp_path, capsys, texts, "--model", str(minilm_dir), "--precision", "bf16")
    f16 = _extract.last
    _extract(tmp_path, capsys, texts, "--model", str(minilm_dir))
    f32 = _extract.last
    pca = tmp_path / "p.npz"
    assert main(["pca", "fit", str(f16), "-n", "4", "-o", str(pca), "--quiet"]) == 0
    assert main(["report", str(pca), "--quiet", "--overwrite"]) == 0  # pca fit wrote the report already
    assert main(["pca", "transform", str(f16), "--pca-model", str(pca), "-o", str(tmp_path / "r16.parquet")]) == 0
    capsys.readouterr()
    assert main(["pca", "transform", str(f32), "--pca-model", str(pca), "-o", str(tmp_path / "r32.parquet")]) == 1
    err = capsys.readouterr().err
    print(err)
    assert err.startswith("Error: ") and "precision" in err and err.count("\n") == 1


def test_resume_refuses_a_change_of_precision(tmp_path, capsys, minilm_dir, real_sentences):
    from bertfeat.run.manifest import manifest_differences

    e32, e16 = Encoder(minilm_dir), Encoder(minilm_dir, precision="bf16")
    diffs = manifest_differences(e32.fingerprint(e32.spec()), e16.fingerprint(e16.spec()))
    assert diffs == ["precision: 'fp32' -> 'bf16'"]


def test_bf16_needs_onednn(monkeypatch, capsys, minilm_dir, tmp_path, no_onednn):
    monkeypatch.delenv("BERTFEAT_BF16_EMULATE")
    with pytest.raises(BertfeatError) as e:
        Encoder(minilm_dir, precision="bf16")
    assert e.value.message == ("precision='bf16' needs oneDNN's bf16 matmul (libdnnl), which is not installed - "
                               'pip install "bertfeat[fast]" (the PyPI package onednn-cpu-gomp), or use precision=\'fp32\' '
                               "(or precision='auto')")
    src = tmp_path / "a.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--model", str(minilm_dir), "--precision", "bf16", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == ("Error: --precision bf16 needs oneDNN's bf16 matmul (libdnnl), which is not installed - "
                   'pip install "bertfeat[fast]" (the PyPI package onednn-cpu-gomp), or use --precision fp32 '
                   "(or --precision auto)\n")
    e32 = Encoder(minilm_dir)
    assert e32.precision == "fp32" and e32.gemm_path.library == "numpy"  # fp32 never needs oneDNN
    auto = Encoder(minilm_dir, precision="auto")  # auto falls back to fp32, and says why
    assert auto.precision == "fp32" and auto.requested_precision == "auto"
    assert "oneDNN, which bf16 needs, is not installed" in auto.gemm_path.reason or "has no AMX" in auto.gemm_path.reason
    assert not list(tmp_path.glob("*.parquet"))


def test_bf16_needs_cpu_support(monkeypatch, capsys, minilm_dir, tmp_path):
    monkeypatch.delenv("BERTFEAT_BF16_EMULATE")
    monkeypatch.setattr(gemm, "bf16_acceleration", lambda flags=None: None)
    src = tmp_path / "a.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--model", str(minilm_dir), "--precision", "bf16", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not list(tmp_path.glob("*.parquet"))
    if onednn.available():
        assert err.startswith("Error: this CPU (") and "has no AMX or AVX512-BF16" in err and "use --precision fp32" in err
    else:
        assert err.startswith("Error: --precision bf16 needs oneDNN's bf16 matmul")
    auto = Encoder(minilm_dir, precision="auto")
    assert auto.precision == "fp32" and auto.bf16_mode is None
    assert auto.gemm_path.reason.startswith("fp32 because this CPU (") or "not installed" in auto.gemm_path.reason


def native_kernel(name: str | None) -> bool:
    return gemm.native_bf16_kernel(name)


def test_auto_picks_only_an_accelerated_precision(minilm_dir, real_sentences):
    """precision="auto" runs bf16 exactly where oneDNN multiplies bf16 natively on this CPU, else fp32; the
    features are those of the precision it names, and provenance says which and why."""
    auto = Encoder(minilm_dir, precision="auto")
    p = auto.gemm_path
    acc = gemm.bf16_acceleration()
    kernel = gemm._probe_kernel(np.uint16)  # None without oneDNN, "unavailable: ..." where it has no bf16 matmul
    print(f"auto here: {p.precision} ({p.reason}); CPU bf16 {acc}; oneDNN bf16 kernel {kernel}")
    if acc is not None and native_kernel(kernel):
        assert p.precision == "bf16" and p.library == "onednn" and p.bf16 == acc and native_kernel(p.kernel)
    else:
        assert p.precision == "fp32" and p.bf16 is None and p.reason.startswith("fp32 because")
    texts = real_sentences[:20]
    np.testing.assert_array_equal(auto.encode(texts), Encoder(minilm_dir, precision=p.precision).encode(texts))
    d = p.to_dict()
    assert d["requested"] == "auto" and d["linear_layers"] == p.precision and d["reason"] == p.reason


@needs_onednn
def test_auto_is_fp32_where_onednn_has_no_native_bf16_kernel(minilm_dir, tmp_path):
    """A real CPU limit, not a stub: ONEDNN_MAX_CPU_ISA=AVX512_CORE hides AVX512-BF16 and AMX from oneDNN, so its
    bf16 matmul is no longer native; auto must then run fp32 and bf16 must be refused."""
    import subprocess
    import sys

    code = ("import json; from bertfeat.model.encoder import Encoder; from bertfeat.errors import BertfeatError\n"
            f"e = Encoder({str(minilm_dir)!r}, precision='auto'); p = e.gemm_path\n"
            "try:\n    Encoder(" + repr(str(minilm_dir)) + ", precision='bf16'); bf16 = 'ran'\n"
            "except BertfeatError as x:\n    bf16 = x.message\n"
            "print(json.dumps([p.precision, p.reason, bf16]))")
    env = {k: v for k, v in __import__("os").environ.items() if k != "BERTFEAT_BF16_EMULATE"}
    env["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    precision, reason, bf16 = json.loads(r.stdout.strip().splitlines()[-1])
    print(precision, reason, bf16, sep="\n")
    assert precision == "fp32" and reason.startswith("fp32 because")
    assert bf16 != "ran" and ("not on a native bf16 kernel" in bf16 or "has no AMX or AVX512-BF16" in bf16)


def test_unknown_precision(capsys, minilm_dir, tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--model", str(minilm_dir), "--precision", "fp16", "--quiet"]) == 1
    assert capsys.readouterr().err == "Error: unknown --precision 'fp16' - choose one of fp32, bf16, int8, auto\n"


def test_info_shows_bf16(capsys, minilm_dir):
    assert main(["info", str(minilm_dir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cpu"].startswith(gemm.cpu_model())
    if not onednn.available():
        assert d["bf16"].startswith("unavailable: oneDNN not installed") and d["bf16_library"] == "none"
    elif NATIVE_BF16:
        assert d["bf16"].startswith("accelerated (") and d["bf16_library"].startswith(f"oneDNN {onednn.version()}")
    else:
        assert d["bf16"].startswith("not accelerated (")
    assert d["precision_auto"].startswith(("bf16 (this CPU multiplies bf16 natively" if NATIVE_BF16 else "fp32 (fp32 because"))
    assert d["fp32_gemm"].startswith("oneDNN" if gemm.fp32_library()[0] == "onednn" else "numpy matmul")


@pytest.mark.slow
def test_dask_engine_bf16(tmp_path, capsys, minilm_dir, real_sentences):
    """--engine dask --precision bf16: the workers load bf16 weights; parts say so and equal the local bf16 run."""
    pytest.importorskip("distributed")
    import pyarrow.parquet as pq

    texts = real_sentences[:40]
    X_local, m_local = _extract(tmp_path, capsys, texts, "--model", str(minilm_dir), "--precision", "bf16")
    out = tmp_path / "dask.features.parquet"
    rc = main(["extract", str(tmp_path / "in.csv"), "-o", str(out), "--engine", "dask", "--workers", "1", "--threads", "1",
               "--model", str(minilm_dir), "--precision", "bf16", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    parts = sorted(out.glob("part-*.parquet"))
    assert parts
    X = []
    for p in parts:
        meta = json.loads(pq.read_schema(p).metadata[b"bertfeat"])
        assert meta["precision"] == "bf16" and meta["fingerprint"]["precision"] == "bf16"
        assert meta["gemm"]["linear_layers"] == "bf16"
        col = pq.read_table(p).column("embedding").combine_chunks()
        X.append(col.values.to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size))
    X = np.concatenate(X)
    d = np.abs(X - X_local).max()
    print(f"dask bf16 vs local bf16: max |diff| {d:.3g}")
    assert row_cosines(X, X_local).min() > 0.99999 and d < 5e-3  # batches differ: bf16's batch tolerance
    X32 = Encoder(minilm_dir).encode(texts)
    assert np.abs(X - X32).max() > 1e-4  # not a silent fp32 run on the workers


@needs_onednn
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", None])
def test_onednn_bias_and_activation_post_ops(act):
    """oneDNN adds the bias and applies the activation as it writes the product (bert.linear / linear_act): the
    same values as the GEMM followed by model/bert.py's own functions, in float32 and rounded to bf16."""
    from bertfeat.model.bert import ACTIVATIONS

    rng = np.random.default_rng(11)
    a = rng.standard_normal((37, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 96)) * 0.3).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    p = onednn.pack(w)
    ref = a.astype(np.float64) @ w + b
    want = ref.astype(np.float32) if act is None else ACTIVATIONS[act](ref.astype(np.float32))
    got = gemm.matmul(a, p, bias=b, act=act)
    err = np.abs(got - want).max()
    print(f"{act}: oneDNN post-op vs GEMM + model/bert.py function: max abs diff {err:.2e}")
    assert err < 5e-6


@needs_onednn
@needs_native_bf16
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", None])
def test_onednn_bf16_bias_and_activation_post_ops(act):
    """The same post-ops on bf16 x bf16 products written as bf16 (the FFN's up projection): within half a bf16 ulp
    of the float64 reference."""
    from bertfeat.model.bert import ACTIVATIONS

    rng = np.random.default_rng(11)
    a = rng.standard_normal((37, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 96)) * 0.3).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    a16, w16 = gemm.to_bf16(a), gemm.to_bf16(w)  # bf16 x bf16 products, written as bf16 (the FFN's up projection)
    ref = gemm.from_bf16(a16).astype(np.float64) @ gemm.from_bf16(w16) + b
    want = ref.astype(np.float32) if act is None else ACTIVATIONS[act](ref.astype(np.float32))
    out16 = np.zeros((37, 96), np.uint16)
    gemm.matmul(a16, onednn.pack(w16), out=out16, bias=b, act=act)
    err = np.abs(gemm.from_bf16(out16) - want)
    print(f"{act}: bf16 result vs float64 reference: max abs diff {err.max():.2e}")
    assert (err <= np.abs(want) * 2.0**-8 + 1e-5).all()  # half a bf16 ulp, plus the fp32 sums' rounding


@pytest.mark.slow
def test_dask_engine_auto_runs_one_precision(tmp_path, capsys, minilm_dir, real_sentences, monkeypatch):
    """--engine dask --precision auto: the client resolves auto once and the workers run that precision, so every part
    names it and equals a local Encoder of it (never a mix of precisions across parts)."""
    pytest.importorskip("distributed")
    import pyarrow.parquet as pq

    from bertfeat.run import dask as dask_engine

    texts = real_sentences[:40]
    sent = []
    real = dask_engine.EncoderPlugin.__init__
    monkeypatch.setattr(dask_engine.EncoderPlugin, "__init__",
                        lambda self, loc, name, kw, *a, **k: sent.append(dict(kw)) or real(self, loc, name, kw, *a, **k))
    _extract(tmp_path, capsys, texts, "--model", str(minilm_dir))  # writes in.csv
    out = tmp_path / "dask_auto.features.parquet"
    rc = main(["extract", str(tmp_path / "in.csv"), "-o", str(out), "--engine", "dask", "--workers", "1", "--threads", "1",
               "--model", str(minilm_dir), "--precision", "auto", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    resolved = gemm.resolve("auto").precision
    assert sent and sent[0]["precision"] == resolved  # the workers were told the resolved precision, not "auto"
    X = []
    for p in sorted(out.glob("part-*.parquet")):
        meta = json.loads(pq.read_schema(p).metadata[b"bertfeat"])
        assert meta["precision"] == resolved and meta["gemm"]["requested"] == "auto"
        col = pq.read_table(p).column("embedding").combine_chunks()
        X.append(col.values.to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size))
    X = np.concatenate(X)
    assert row_cosines(X, Encoder(minilm_dir, precision=resolved).encode(texts)).min() > 0.99999
