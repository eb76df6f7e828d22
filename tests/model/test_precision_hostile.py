"""bf16 and int8 (model/bert.py's Bf16Steps / Int8Steps, ops/quant.py, ops/kernels.py) on hostile models and inputs:
shapes no kernel block divides (hidden 40 / 42 / 20 / 8 / 9 / 130, odd head counts and sizes, intermediate 100 / 90 /
30 / 8 / 13 / 515), weights with an all-zero or tiny (1e-30, subnormal) channel, a LayerNorm channel or table at 0,
a vocabulary of 8 tokens, a finite weight beyond bf16's range, activations of ~1e-37; texts empty, of special tokens
only, one token, short (int8's <= 8-token path) and long (cut into windows). Each precision's features against
fp32's (cosine), finite, and the same bit for bit whatever the batch (one at a time against all together, on numba's
kernels and on their NumPy twins; `bertfeat verify` on an extract).

bf16 runs natively where the CPU has AVX512-BF16 / AMX and oneDNN is installed, else emulated
(BERTFEAT_BF16_EMULATE=1, the same products), as in tests/ops/test_bf16.py; its bit-for-bit checks need oneDNN's
kernels (NumPy's BLAS rounds a row by the row count). int8 is never emulated: those tests skip, saying why, as
tests/ops/test_int8.py's do.
"""

from __future__ import annotations

import numpy as np
import pytest
from extract_util import NOT_BIT_FOR_BIT, rows_bit_for_bit

from bertfeat.errors import BertfeatError
from bertfeat.model.encoder import Encoder
from bertfeat.ops import gemm
from bertfeat.verify import verify_features
from ckpt import make_checkpoint, row_cosines
from extract_util import run, write_csv


def _missing(precision: str) -> str | None:
    try:
        gemm.resolve(precision)
        return None
    except BertfeatError as e:
        return e.message


INT8_MISSING = _missing("int8")
NATIVE_BF16 = gemm.resolve("auto").precision == "bf16"
needs_int8 = pytest.mark.skipif(INT8_MISSING is not None, reason=f"int8 not accelerated here: {INT8_MISSING}")
needs_native_bf16 = pytest.mark.skipif(not NATIVE_BF16, reason=f"no native bf16 here: {gemm.describe_bf16()['status']}")
PRECISIONS = [pytest.param("bf16", id="bf16"), pytest.param("int8", id="int8", marks=needs_int8)]
MIN_COSINE = {"bf16": 0.9999, "int8": 0.999}  # the random models here: bf16 0.99997+, int8 0.99986+ (2026-11-29)


@pytest.fixture(autouse=True)
def emulate(monkeypatch):
    monkeypatch.setenv("BERTFEAT_BF16_EMULATE", "1")  # bf16 everywhere (native where the CPU has it)


def layer(i: int, part: str) -> str:
    return f"encoder.layer.{i}.{part}"


def edited(path, fn, **kw):
    """A 2-layer random-weight BERT (hidden 64, 4 heads unless ``kw`` says otherwise) with ``fn(tensors)`` applied
    to its model.safetensors (the file's own names, (out, in) linear weights)."""
    from safetensors.numpy import load_file, save_file

    if kw.get("vocab") == "tiny":  # [PAD] [UNK] [CLS] [SEP] [MASK] a b c: most words are [UNK]
        kw["vocab"] = path.parent / "tiny_vocab.txt"
        kw["vocab"].write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n")
    d = make_checkpoint(path, **{"hidden": 64, "layers": 2, "heads": 4, "max_position": 512, "seed": 3, **kw})
    if fn is not None:
        t = load_file(str(d / "model.safetensors"))
        fn(t)
        save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def dead_channel(t, k: int = 5) -> None:
    """Every LayerNorm's channel k at 0 (weight and bias): the channel is exactly 0 in every layer's input."""
    for name in [n for n in t if n.endswith("LayerNorm.weight") or n.endswith("LayerNorm.bias")]:
        t[name][k] = 0.0


def beyond_bf16(t) -> None:
    """float32's largest value in every weight reading the dead channel 5: fp32 multiplies it by 0 (0); rounded
    to bf16 it was infinity, and 0 x inf is NaN."""
    dead_channel(t)
    for part in ("attention.self.query.weight", "attention.self.value.weight", "intermediate.dense.weight"):
        t[layer(0, part)][:, 5] = np.finfo(np.float32).max


def texts(real_sentences: list[str]) -> list[str]:
    """Empty, special tokens only, one token, <= 8 tokens (int8's two-level path) and longer, in one list."""
    return (["", "a", "[SEP]", "[CLS] [SEP]", "[MASK] [MASK]", "why ?", "ok " * 11]
            + real_sentences[:12] + real_sentences[150:156] + [" ".join(real_sentences[:30])])


def vs_fp32(d, precision: str, xs: list[str], **kw) -> tuple[np.ndarray, np.ndarray, Encoder]:
    """(fp32 features, ``precision``'s, its Encoder) of ``xs``; fp32's must be finite."""
    x32 = Encoder(d).encode(xs, **kw)
    assert np.isfinite(x32).all()
    enc = Encoder(d, precision=precision)
    assert enc.precision == precision
    return x32, enc.encode(xs, **kw), enc


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_finite_weight_beyond_bf16s_range_stays_finite(tmp_path, real_sentences, precision):
    """A weight of float32's largest value (3.40e38, above bf16's largest, 3.39e38) reading a channel every LayerNorm
    zeroes: fp32 gives finite features, and so do bf16 and int8 (int8 quantizes from the bf16 rounding), as close
    to fp32's as on any model. Before: rounded to bf16 infinity, 0 x inf = NaN, and every text was refused with
    "the model gave NaN or infinite features ... the model overflows float32"."""
    d = edited(tmp_path / "m", beyond_bf16)
    xs = texts(real_sentences)
    x32, x, _ = vs_fp32(d, precision, xs)
    cos = row_cosines(x32, x)
    print(f"{precision}: min cosine to fp32 {cos.min():.6f}")
    assert np.isfinite(x).all() and cos.min() >= MIN_COSINE[precision]


def tiny_qkv_input(t) -> None:
    """The embeddings' LayerNorm writes values of ~1e-37 (weight and bias x 1e-37) into Q/K/V weights x 1e37: the
    same attention as before in fp32 (the residual carries the tiny rows: the model's own business)."""
    for name in ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"):
        t[name] *= np.float32(1e-37)
    for p in ("query", "key", "value"):
        t[layer(0, f"attention.self.{p}.weight")] *= np.float32(1e37)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rows_of_tiny_activations_are_quantized_on_their_own_range(tmp_path, real_sentences, precision):
    """int8 quantizes each row on its range; a range of ~1e-37 made its scale's inverse overflow float32 (zero point
    -2^31, the row read back 1e7 times too large), so int8's features were nothing like fp32's (cosine -0.24); now
    0.9999, as bf16's (which holds 1e-37 as a normal number; at 1e-38, bf16's subnormals, bf16 gives 0.82 and
    int8 0.9998)."""
    d = edited(tmp_path / "m", tiny_qkv_input)
    xs = texts(real_sentences)
    x32, x, enc = vs_fp32(d, precision, xs)
    cos = {"mean": row_cosines(x32, x), "cls": row_cosines(Encoder(d).encode(xs, pooling="cls"),
                                                           enc.encode(xs, pooling="cls"))}
    print(f"{precision}: min cosine to fp32 " + ", ".join(f"{k} {v.min():.6f}" for k, v in cos.items()))
    assert np.isfinite(x).all() and min(v.min() for v in cos.values()) >= 0.999


HOSTILE = {
    # shapes no 16 / 64 block divides, odd head counts (head sizes 10, 6, 4, 8, 3, 65)
    "h40_nh4_i100": (None, {"hidden": 40, "heads": 4, "intermediate": 100}),
    "h42_nh7_i90": (None, {"hidden": 42, "heads": 7, "intermediate": 90}),
    "h20_nh5_i30": (None, {"hidden": 20, "heads": 5, "intermediate": 30}),
    "h8_nh1_i8_relu": (None, {"hidden": 8, "heads": 1, "intermediate": 8, "hidden_act": "relu"}),
    "h9_nh3_i13": (None, {"hidden": 9, "heads": 3, "intermediate": 13}),
    "h130_nh2_i515": (None, {"hidden": 130, "heads": 2, "intermediate": 515}),
    # all-zero output channels and input rows; output channels and an input row of 1e-30 and of subnormals
    "zero_channels": (lambda t: (t[layer(0, "attention.self.query.weight")].__setitem__(3, 0.0),
                                 t[layer(0, "intermediate.dense.weight")].__setitem__(11, 0.0),
                                 t[layer(0, "output.dense.weight")].__setitem__((slice(None), 9), 0.0),
                                 t[layer(1, "attention.self.value.weight")].__setitem__((slice(None), 2), 0.0)), {}),
    "tiny_channels": (lambda t: (t[layer(0, "attention.self.query.weight")].__setitem__(3, 1e-30),
                                 t[layer(0, "attention.self.key.weight")].__setitem__(4, 1e-40),
                                 t[layer(0, "output.dense.weight")].__setitem__(5, 1e-44),
                                 t[layer(1, "intermediate.dense.weight")].__setitem__((slice(None), 4), 1e-41),
                                 t.__setitem__(layer(1, "attention.output.dense.weight"),
                                               np.full_like(t[layer(1, "attention.output.dense.weight")], 1e-42))), {}),
    # a LayerNorm channel at 0 everywhere; the embeddings' LayerNorm all 0 (every row 0) and all beta (rows equal)
    "layernorm_channel_zero": (dead_channel, {}),
    "embedding_rows_zero": (lambda t: (t["embeddings.LayerNorm.weight"].__setitem__(slice(None), 0.0),
                                       t["embeddings.LayerNorm.bias"].__setitem__(slice(None), 0.0)), {}),
    "embedding_rows_equal": (lambda t: (t["embeddings.LayerNorm.weight"].__setitem__(slice(None), 0.0),
                                        t["embeddings.LayerNorm.bias"].__setitem__(slice(None), 0.7)), {}),
    "vocabulary_of_8": (None, {"vocab": "tiny"}),
}


@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("precision", PRECISIONS)
def test_hostile_models_give_fp32s_vectors_whatever_the_batch(tmp_path, real_sentences, precision, case):
    """Each hostile model above: bf16's and int8's features finite and close to fp32's (mean, cls, and long texts cut
    into windows), and, on oneDNN, each text's features the same bit for bit alone as in one call with the others
    (short and long, empty and special-token-only texts together)."""
    fn, kw = HOSTILE[case]
    d = edited(tmp_path / case, fn, **kw)
    xs = texts(real_sentences)
    x32, x, enc = vs_fp32(d, precision, xs)
    cos = {"mean": row_cosines(x32, x)}
    cos["cls"] = row_cosines(Encoder(d).encode(xs, pooling="cls"), enc.encode(xs, pooling="cls"))
    win = {"long_text": "chunk-mean", "max_length": 16, "stride": 4}
    cos["windows"] = row_cosines(Encoder(d).encode(xs, **win), enc.encode(xs, **win))
    print(f"{case} {precision}: min cosine to fp32 " + ", ".join(f"{k} {v.min():.6f}" for k, v in cos.items()))
    assert np.isfinite(x).all()
    for k, v in cos.items():
        assert v.min() >= MIN_COSINE[precision], k
    if precision == "bf16" and not NATIVE_BF16:
        return  # emulated: NumPy's BLAS rounds a row by the row count
    np.testing.assert_array_equal(np.concatenate([enc.encode([s]) for s in xs]), x)
    np.testing.assert_array_equal(np.concatenate([enc.encode([s], **win) for s in xs]), enc.encode(xs, **win))


@pytest.mark.skipif(not rows_bit_for_bit(), reason=NOT_BIT_FOR_BIT)
@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=needs_native_bf16),
                                       pytest.param("int8", marks=needs_int8)])
def test_the_numpy_kernels_keep_a_text_independent_of_its_batch(minilm_dir, real_sentences, precision):
    """Without numba's kernels (BERTFEAT_KERNELS=numpy, or numba missing) the NumPy twins run: each text alone equals
    its features in one call with the others, bit for bit. Before: the NumPy softmax summed over the padded length,
    2e-7 apart at fp32, 7e-4 at bf16 and 2e-3 at int8 (more than `bertfeat verify`'s 1e-3 for them)."""
    from bertfeat.ops import kernels

    assert kernels.use("numpy") == "numpy"
    try:
        enc = Encoder(minilm_dir, precision=precision, threads=1)
        xs = real_sentences[:40]
        together = enc.encode(xs)
        alone = np.concatenate([enc.encode([s]) for s in xs])
    finally:
        kernels.use(None)
    print(f"{precision}, NumPy kernels: max |alone - together| {np.abs(alone - together).max():.2e}")
    np.testing.assert_array_equal(alone, together)


@pytest.mark.parametrize("precision", [pytest.param("bf16", marks=needs_native_bf16), pytest.param("int8", marks=needs_int8)])
def test_verify_finds_every_row_bit_for_bit_on_an_odd_shaped_model(tmp_path, capsys, real_sentences, precision):
    """`bertfeat extract --precision bf16 / int8` on hidden 42, 7 heads, intermediate 90, texts of every kind mixed
    in one file (extract refuses an empty text), then `bertfeat verify` (each row again alone) with tolerance 0: every
    row identical."""
    d = edited(tmp_path / "m", None, hidden=42, heads=7, intermediate=90)
    rows = texts(real_sentences)[1:]
    src = write_csv(tmp_path / "in.csv", ["text"], [[s] for s in rows])
    out = tmp_path / "o.parquet"
    rc, _, err = run(capsys, "extract", src, "-o", out, "--model", d, "--precision", precision, "-q")
    assert rc == 0, err
    r = verify_features(out, sample=1000, tolerance=0.0)
    assert r["precision"] == precision and r["ok"]
    assert r["rows_checked"] == r["rows_identical"] == len(rows)
