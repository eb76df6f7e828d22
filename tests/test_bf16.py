"""precision="bf16": rounding, the MKL GEMMs, the fused bf16 kernels, quality against fp32, the CLI,
provenance, errors. See bertfeat/gemm.py and docs/precision.md.

Every test here needs Intel MKL (``pip install "bertfeat[fast]"``) and is skipped without it. On a
CPU without AMX or AVX512-BF16 (this machine: AVX2 only) MKL emulates bf16, which bertfeat refuses
unless BERTFEAT_BF16_EMULATE=1: the ``emulate`` fixture sets it, so the numbers below are the
emulated path's (same products, fp32 accumulation; only the speed differs from native bf16).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfeat import gemm, kernels
from bertfeat.cli import main
from bertfeat.config import BertConfig
from bertfeat.encoder import Encoder
from bertfeat.errors import BertfeatError
from bertfeat.features import read_features
from bertfeat.model import add_layer_norm_, bert_forward, bias_act_
from bertfeat.weights import load_weights
from ckpt import make_ckpt, row_cosines  # noqa: F401  (make_ckpt is a fixture)

pytestmark = pytest.mark.skipif(not gemm.mkl_available(),
                                reason='Intel MKL (libmkl_rt) not installed: pip install "bertfeat[fast]" to run the bf16 tests')

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


def test_gemm_bf16_accumulates_in_fp32():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((70, 384)).astype(np.float32)
    b = rng.standard_normal((384, 1536)).astype(np.float32)
    a16, b16 = gemm.to_bf16(a), gemm.to_bf16(b)
    exact = gemm.from_bf16(a16).astype(np.float64) @ gemm.from_bf16(b16).astype(np.float64)
    out = np.full((80, 1536), np.float32(7.0))
    got = gemm.gemm_bf16(a16, b16, out=out[5:75])  # rows of a larger buffer, as ffn() blocks write
    err = np.abs(got - exact).max() / np.abs(exact).max()
    print(f"bf16 GEMM vs float64 of the same bf16 inputs: max rel error {err:.2e}")
    assert err < 1e-5  # fp32 accumulation of exact bf16 products
    assert (out[:5] == 7.0).all() and (out[75:] == 7.0).all()
    vs_fp32 = np.abs(got - a @ b).max() / np.abs(a @ b).max()
    print(f"bf16 GEMM vs fp32 GEMM: max rel error {vs_fp32:.2e}")
    assert 1e-4 < vs_fp32 < 2e-2  # bf16 rounding of the inputs is really there
    with pytest.raises(TypeError):
        gemm.gemm_bf16(a, b16)


def test_mkl_sgemm_matches_numpy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((130, 384)).astype(np.float32)
    b = rng.standard_normal((384, 96)).astype(np.float32)
    got = gemm.sgemm(a, b)
    err = np.abs(got - a @ b).max()
    print(f"MKL sgemm vs numpy matmul: max abs diff {err:.2e}")
    assert err < 1e-4


def test_fp32_forward_with_mkl_sgemm(minilm_dir, real_sentences, monkeypatch):
    """BERTFEAT_GEMM=mkl (fp32 through MKL's sgemm) gives the fp32 features to float32 rounding."""
    enc = Encoder(minilm_dir)
    texts = real_sentences[:40]
    ref = enc.encode(texts)
    calls = []
    sgemm = gemm.sgemm
    monkeypatch.setattr(gemm, "sgemm", lambda a, b, out=None: calls.append(b.shape) or sgemm(a, b, out))
    gemm.use("mkl")
    try:
        got = enc.encode(texts)
        assert gemm.provenance("fp32")["library"].startswith("MKL cblas_sgemm")
    finally:
        gemm.use("numpy")
    H, F = enc.config.hidden_size, enc.config.intermediate_size
    assert {(H, 3 * H), (H, H), (H, F), (F, H)} <= set(calls)  # every linear layer went through MKL
    print(f"fp32 MKL sgemm vs numpy: max abs diff {np.abs(got - ref).max():.2e}")
    np.testing.assert_allclose(got, ref, atol=2e-5)


# --------------------------------------------------------------------------- fused kernels write bf16
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_bf16_kernels_write_the_rounded_fp32_result(backend):
    kernels.use(backend)
    try:
        rng = np.random.default_rng(3)
        u = rng.standard_normal((33, 96)).astype(np.float32) * 3
        b = rng.standard_normal(96).astype(np.float32)
        for act in ("gelu", "relu", "gelu_new"):
            out16 = np.zeros(u.shape, np.uint16)
            ref = bias_act_(u.copy(), b, act)
            got = bias_act_(u.copy(), b, act, out16=out16)
            assert got is out16
            np.testing.assert_array_equal(out16, gemm.to_bf16(ref), err_msg=act)
        y, r = u[:, :64].copy(), rng.standard_normal((33, 64)).astype(np.float32)
        g, beta, bb = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
        ref = add_layer_norm_(y.copy(), bb, r, g, beta, 1e-12)
        y16 = np.zeros(y.shape, np.uint16)
        got = add_layer_norm_(y.copy(), bb, r, g, beta, 1e-12, out16=y16)
        np.testing.assert_array_equal(got, ref)  # the fp32 result is unchanged
        np.testing.assert_array_equal(y16, gemm.to_bf16(ref))
        from bertfeat.model import ctx_rows_bf16_, to_bf16_

        ctx = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
        rows = np.zeros((2, 5, 4, 8), np.uint16)
        np.testing.assert_array_equal(ctx_rows_bf16_(ctx, rows), gemm.to_bf16(ctx.transpose(0, 2, 1, 3)))
        np.testing.assert_array_equal(to_bf16_(y, np.zeros(y.shape, np.uint16)), gemm.to_bf16(y))
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
    from bertfeat.tokenize import pad_batch

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


def test_bf16_gemm_rows_do_not_depend_on_the_row_count():
    rng = np.random.default_rng(4)
    a = gemm.to_bf16(rng.standard_normal((300, 384)).astype(np.float32))
    b = gemm.to_bf16(rng.standard_normal((384, 1536)).astype(np.float32) * 0.05)
    full = gemm.gemm_bf16(a, b)
    for M in (1, 2, 3, 4, 7, 16, 17, 100, 299):
        np.testing.assert_array_equal(gemm.gemm_bf16(a[:M].copy(), b), full[:M], err_msg=f"{M} rows")
        np.testing.assert_array_equal(gemm.gemm_bf16(a[1:M + 1], b), full[1:M + 1], err_msg=f"{M} rows at offset 1")
    a32, b32 = gemm.from_bf16(a), gemm.from_bf16(b)  # the same for MKL's sgemm (BERTFEAT_GEMM=mkl)
    full = gemm.sgemm(a32, b32)
    for M in (1, 2, 3, 4, 7, 16, 17, 100):
        np.testing.assert_array_equal(gemm.sgemm(a32[:M].copy(), b32), full[:M], err_msg=f"sgemm {M} rows")


def test_bf16_rows_do_not_depend_on_the_batch(minilm_dir, real_sentences):
    """As in fp32, a row's features do not depend on its batch neighbours or padding, to the precision's
    own rounding: the fp32 path's batch-vs-alone differences (up to ~6e-7, the batched attention
    products) can flip a bf16 rounding of an activation, which bf16 then carries (up to ~2e-3)."""
    texts = real_sentences[:30]
    for precision, tol, min_cos in (("fp32", 2e-6, 0.9999999), ("bf16", 5e-3, 0.99999)):
        enc = Encoder(minilm_dir, precision=precision, threads=1)
        together = enc.encode(texts)
        alone = np.concatenate([enc.encode([t]) for t in texts])
        d = np.abs(together - alone).max()
        c = row_cosines(together, alone).min()
        print(f"{precision} batch vs one at a time: max |diff| {d:.3g}, min cosine {c:.8f}")
        assert d < tol and c > min_cos


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
    assert m16["gemm"]["linear_layers"] == "bf16" and m16["gemm"]["library"].startswith("MKL cblas_gemm_bf16bf16f32")
    assert m16["gemm"]["bf16"] in ("amx", "avx512_bf16", "emulated")
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
    from bertfeat.jobcore import manifest_differences

    e32, e16 = Encoder(minilm_dir), Encoder(minilm_dir, precision="bf16")
    diffs = manifest_differences(e32.fingerprint(e32.spec()), e16.fingerprint(e16.spec()))
    assert diffs == ["precision: 'fp32' -> 'bf16'"]


def test_bf16_needs_mkl(monkeypatch, capsys, minilm_dir, tmp_path):
    monkeypatch.setattr(gemm, "_mkl", {"lib": None, "error": "libmkl_rt was not found"})
    with pytest.raises(BertfeatError) as e:
        Encoder(minilm_dir, precision="bf16")
    assert e.value.message == ("precision='bf16' needs Intel MKL's bf16 GEMM (libmkl_rt), which is not installed - "
                               'pip install "bertfeat[fast]" (the PyPI package mkl), or use precision=\'fp32\'')
    src = tmp_path / "a.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--model", str(minilm_dir), "--precision", "bf16", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == ("Error: --precision bf16 needs Intel MKL's bf16 GEMM (libmkl_rt), which is not installed - "
                   'pip install "bertfeat[fast]" (the PyPI package mkl), or use --precision fp32\n')
    assert Encoder(minilm_dir).precision == "fp32"  # fp32 never needs MKL
    assert not list(tmp_path.glob("*.parquet"))


def test_bf16_needs_cpu_support(monkeypatch, capsys, minilm_dir, tmp_path):
    monkeypatch.delenv("BERTFEAT_BF16_EMULATE")
    monkeypatch.setattr(gemm, "bf16_acceleration", lambda flags=None: None)
    src = tmp_path / "a.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--model", str(minilm_dir), "--precision", "bf16", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: this CPU (") and "has no AMX or AVX512-BF16" in err and "use --precision fp32" in err
    assert err.count("\n") == 1 and not list(tmp_path.glob("*.parquet"))
    monkeypatch.setattr(gemm, "bf16_acceleration", lambda flags=None: "amx")
    assert Encoder(minilm_dir, precision="bf16").bf16_mode == "amx"


def test_unknown_precision(capsys, minilm_dir, tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("text\nhello\n")
    assert main(["extract", str(src), "--model", str(minilm_dir), "--precision", "fp16", "--quiet"]) == 1
    assert capsys.readouterr().err == "Error: unknown precision 'fp16' - choose one of fp32, bf16\n"


def test_cpu_capabilities():
    assert gemm.bf16_acceleration({"amx_bf16", "amx_tile", "avx512_bf16"}) == "amx"
    assert gemm.bf16_acceleration({"avx512_bf16", "avx512f"}) == "avx512_bf16"
    assert gemm.bf16_acceleration({"avx2", "fma"}) is None
    assert gemm.bf16_flags({"avx2", "amx_bf16", "sse"}) == ["amx_bf16", "avx2"]


def test_info_shows_bf16(capsys, minilm_dir):
    assert main(["info", str(minilm_dir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cpu"].startswith(gemm.cpu_model())
    acc = gemm.bf16_acceleration()
    if acc is None:
        assert d["bf16"].startswith("emulated by MKL (no AMX or AVX512-BF16")
    else:
        assert d["bf16"].startswith("accelerated (")
    assert d["bf16_library"].startswith("Intel(R)")


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
