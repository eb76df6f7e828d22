"""The fused element-wise kernels (bertfeat/ops/kernels.py) against the NumPy reference in model/bert.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertfeat.errors import BertfeatError

from bertfeat.ops import kernels
from ckpt import make_ckpt  # noqa: F401  (a fixture)
from bertfeat.model.bert import ACTIVATIONS_INPLACE, add_layer_norm_, additive_mask, bias_act_, layer_norm_, masked_softmax_, softmax_

from conftest import need  # noqa: E402

need("numba", "pip install numba (a base dependency)")


@pytest.fixture()
def fused():
    """The numba backend for one test, then back to the default."""
    assert kernels.use("numba") == "numba"
    yield
    kernels.use(None)


def exact_gelu(x: np.ndarray) -> np.ndarray:
    import scipy.special

    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1 + scipy.special.erf(x64 / math.sqrt(2)))


def test_default_backend_is_numba_and_env_turns_it_off(monkeypatch):
    monkeypatch.delenv("BERTFEAT_KERNELS", raising=False)
    assert kernels.use(None) == "numba" and kernels.get("gelu") is not None
    monkeypatch.setenv("BERTFEAT_KERNELS", "numpy")
    assert kernels.use(None) == "numpy" and kernels.get("gelu") is None and kernels.get("add_layer_norm_") is None
    monkeypatch.setenv("BERTFEAT_KERNELS", "cuda")
    with pytest.raises(BertfeatError) as e:  # (a ValueError too) named as the variable, not as a bug in bertfeat
        kernels.use(None)
    assert str(e.value) == "unknown element-wise kernel backend BERTFEAT_KERNELS='cuda' - choose one of numba, numpy, or unset it"
    with pytest.raises(BertfeatError, match=r"^unknown element-wise kernel backend 'cuda' - choose one of numba, numpy$"):
        kernels.use("cuda")
    monkeypatch.delenv("BERTFEAT_KERNELS")
    assert kernels.use(None) == "numba"


def test_without_numba_the_numpy_path_runs_and_says_why(monkeypatch):
    """numba missing or unusable: the default falls back to the NumPy functions and keeps the reason (shown by
    `bertfeat info`); asking for numba by name raises instead."""
    monkeypatch.delenv("BERTFEAT_KERNELS", raising=False)

    def broken():
        raise ImportError("No module named 'numba'")

    monkeypatch.setattr(kernels, "_jit_all", broken)
    try:
        assert kernels.use(None) == "numpy" and kernels.backend() == "numpy"
        assert kernels.get("gelu") is None and kernels.get("add_layer_norm_") is None
        assert kernels.unavailable_reason() == "ImportError: No module named 'numba'"
        with pytest.raises(ImportError, match="numba"):
            kernels.use("numba")
    finally:
        monkeypatch.undo()
        assert kernels.use(None) == "numba" and kernels.unavailable_reason() is None


def test_bias_gelu_erf_against_float64_and_numpy(fused):
    x = np.linspace(-12, 12, 1_200_000, dtype=np.float32).reshape(600, 2000)
    b = np.linspace(-0.5, 0.5, x.shape[1], dtype=np.float32)
    u = np.ascontiguousarray(x)
    want = exact_gelu(u + b)
    got = kernels.get("gelu")(u.copy(), b)
    ref = ACTIVATIONS_INPLACE["gelu"](u + b)  # the NumPy path: bias add, then the tanh-polynomial GELU
    err = np.abs(got - want).max()
    print(f"\nfused bias+GELU: max |error| vs float64 {err:.2e}; vs the NumPy GELU {np.abs(got - ref).max():.2e}")
    assert got.dtype == np.float32
    assert err <= 7e-7
    assert np.abs(got - ref).max() <= 1e-6
    # the negative tail, where GELU is tiny: no 1 + erf cancellation, so closer than the NumPy path
    tail = x + b < -1
    assert np.abs(got - want)[tail].max() <= 1.1e-7
    assert np.abs(got - want)[tail].max() < np.abs(ref - want)[tail].max()
    # small inputs: relative accuracy near 0, where GELU(x) ~ x / 2
    small = np.geomspace(1e-6, 1e-2, 4000, dtype=np.float32).reshape(2, -1)
    g = kernels.get("gelu")(small.copy(), np.zeros(small.shape[1], np.float32))
    np.testing.assert_allclose(g, exact_gelu(small), rtol=2e-6)


def test_bias_gelu_special_values(fused):
    u = np.array([[np.nan, -np.inf, np.inf, 0.0, -0.0, 1e30, -1e30, -20.0, 20.0]], dtype=np.float32)
    got = kernels.get("gelu")(u.copy(), np.zeros(u.shape[1], np.float32))
    assert np.isnan(got[0, :2]).all()  # as torch: GELU(-inf) = -inf * 0
    np.testing.assert_array_equal(got[0, 2:], np.array([np.inf, 0.0, 0.0, 1e30, 0.0, 0.0, 20.0], dtype=np.float32))
    # the NumPy path agrees on every special value
    with np.errstate(invalid="ignore"):  # -inf * 0
        np.testing.assert_array_equal(got, ACTIVATIONS_INPLACE["gelu"](u.copy()))


def test_bias_relu_is_exact(fused):
    rng = np.random.default_rng(0)
    u = rng.standard_normal((50, 70), dtype=np.float32)
    b = rng.standard_normal(70, dtype=np.float32)
    np.testing.assert_array_equal(kernels.get("relu")(u.copy(), b), np.maximum(u + b, 0))


@pytest.mark.parametrize("H", [384, 768, 37])
def test_add_layer_norm_matches_numpy(fused, H):
    rng = np.random.default_rng(H)
    y = (rng.standard_normal((300, H)) * 3 + 5).astype(np.float32)
    r = rng.standard_normal((300, H), dtype=np.float32)
    b, g, beta = (rng.standard_normal(H, dtype=np.float32) for _ in range(3))
    ref = layer_norm_(y + b + r, g, beta, 1e-12)
    exact = (y.astype(np.float64) + b + r)
    exact = (exact - exact.mean(1, keepdims=True)) / np.sqrt(exact.var(1, keepdims=True) + 1e-12) * g + beta
    got = add_layer_norm_(y.copy(), b, r, g, beta, 1e-12)
    print(f"\nfused add+LayerNorm H={H}: vs float64 {np.abs(got - exact).max():.2e}, vs NumPy {np.abs(got - ref).max():.2e}")
    assert np.abs(got - exact).max() <= 5e-6
    assert np.abs(got - ref).max() <= 5e-6
    # a constant row (zero variance) stays finite: eps
    flat = np.full((1, H), 2.0, np.float32)
    out = add_layer_norm_(flat, np.zeros(H, np.float32), np.zeros((1, H), np.float32), g, beta, 1e-12)
    np.testing.assert_array_equal(out[0], beta)


def test_masked_softmax_matches_numpy_and_float64(fused):
    rng = np.random.default_rng(4)
    B, nh, T = 6, 4, 37
    scores = rng.standard_normal((B, nh, T, T), dtype=np.float32) * 10
    am = np.ones((B, T), dtype=np.int64)
    am[1, 12:] = 0  # padding
    am[4, 1:] = 0  # only [CLS]
    mask = additive_mask(am)
    scale = np.float32(0.125)
    got = masked_softmax_(scores.copy(), scale, mask)
    ref = softmax_(scores * scale + mask)
    s64 = scores.astype(np.float64) * 0.125 + mask
    e = np.exp(s64 - s64.max(-1, keepdims=True))
    exact = e / e.sum(-1, keepdims=True)
    print(f"\nfused masked softmax: vs float64 {np.abs(got - exact).max():.2e}, vs NumPy {np.abs(got - ref).max():.2e}")
    assert np.abs(got - exact).max() <= 2e-7 and np.abs(got - ref).max() <= 2e-7
    assert (got[1, :, :, 12:] == 0).all() and (got[4, :, :, 1:] == 0).all()  # padded keys get exactly 0
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
    # exp over its whole range: softmax of [0, y] is 1 / (1 + e^-y), e^y / (1 + e^y)
    y = np.linspace(-87, 0, 20001, dtype=np.float32)
    pair = np.zeros((1, 1, y.size, 2), np.float32)
    pair[0, 0, :, 1] = y
    p = masked_softmax_(pair, np.float32(1.0), np.zeros((1, 1, 1, 2), np.float32))
    ey = np.exp(y.astype(np.float64))
    np.testing.assert_allclose(p[0, 0, :, 1], ey / (1 + ey), rtol=3e-7, atol=2e-35)  # 0 below e^-80


@pytest.fixture(params=["numba", "numpy"])
def either(request):
    """Each element-wise backend for one test (the fused kernel, then its NumPy twin), then back to the default."""
    assert kernels.use(request.param) == request.param
    yield request.param
    kernels.use(None)


@pytest.mark.parametrize("n", [5, 20, 64, 65, 100])
def test_masked_softmax_row_does_not_depend_on_padding_or_neighbours(either, n):
    """A sequence's probabilities are bit for bit the same alone (T = n) and padded in a batch beside a longer one
    (the sums run over its own keys only), short or long, on the fused kernel and on its NumPy twin (whose sums over
    the padded length moved a text's features with its batch: 2e-7 at fp32, 2e-3 at int8 on all-MiniLM-L6-v2)."""
    rng = np.random.default_rng(n)
    T, nh = n + 30, 3
    scores = rng.standard_normal((2, nh, T, T), dtype=np.float32) * 8
    am = np.ones((2, T), dtype=np.int64)
    am[0, n:] = 0
    got = masked_softmax_(scores.copy(), np.float32(0.125), additive_mask(am))
    alone = masked_softmax_(np.ascontiguousarray(scores[:1, :, :n, :n]), np.float32(0.125), additive_mask(am[:1, :n]))
    np.testing.assert_array_equal(got[0, :, :n, :n], alone[0])
    assert (got[0, :, :, n:] == 0).all()
    s64 = scores[0, :, :n, :n].astype(np.float64) * 0.125
    e = np.exp(s64 - s64.max(-1, keepdims=True))
    assert np.abs(alone[0] - e / e.sum(-1, keepdims=True)).max() <= 2e-7
    assert np.abs(got[1] - softmax_(scores[1] * np.float32(0.125))).max() <= 2e-7  # the full-length neighbour


def test_an_exponential_does_not_depend_on_its_place_in_the_loop(fused):
    """masked_softmax_ packs a head's rows at the sequence's own length and takes their exponentials in one loop, so an
    element lands in the vector body or the scalar tail depending on its batch's row count: both must give the same
    bits (else a row would depend on its batch). Every offset of a long run against each element alone."""
    rng = np.random.default_rng(7)
    y = -np.abs(rng.standard_normal(4099) * 30).astype(np.float32)
    y[:8] = [0.0, -0.0, -79.99, -80.0, -80.01, -np.inf, np.nan, -1e-30]
    run = y.copy()
    kernels._exp_all(run)
    for k in range(0, 70):  # the run started k elements later: every element's place in the vector body moves
        part = y[k:].copy()
        kernels._exp_all(part)
        np.testing.assert_array_equal(part, run[k:])
    for j in range(0, 4099, 13):
        one = y[j:j + 1].copy()
        kernels._exp_all(one)
        assert one[0] == run[j] or (np.isnan(one[0]) and np.isnan(run[j])), (j, y[j])
    assert run[5] == 0 and run[6] == 0 and run[0] == 1  # -inf and NaN (masked keys) -> 0
    np.testing.assert_allclose(run[8:], np.exp(y[8:].astype(np.float64)), rtol=3e-7, atol=2e-35)  # 0 below -80


def test_rows_do_not_depend_on_their_neighbours(fused):
    rng = np.random.default_rng(3)
    u = rng.standard_normal((64, 512), dtype=np.float32)
    b = rng.standard_normal(512, dtype=np.float32)
    whole = bias_act_(u.copy(), b, "gelu")
    for i in (0, 17, 63):
        np.testing.assert_array_equal(bias_act_(u[i:i + 1].copy(), b, "gelu"), whole[i:i + 1])
    r = rng.standard_normal((64, 512), dtype=np.float32)
    g, beta = rng.standard_normal(512, dtype=np.float32), rng.standard_normal(512, dtype=np.float32)
    whole = add_layer_norm_(u.copy(), b, r, g, beta, 1e-12)
    for i in (0, 40):
        np.testing.assert_array_equal(add_layer_norm_(u[i:i + 1].copy(), b, r[i:i + 1], g, beta, 1e-12), whole[i:i + 1])


def test_numpy_backend_gives_the_same_model_output(make_ckpt):
    """The whole forward pass, fused and NumPy, on a random checkpoint: equal to float32 rounding."""
    from bertfeat import Encoder

    enc = Encoder(make_ckpt(vocab="uncased", hidden=96, heads=3, layers=2, intermediate=384, seed=5))
    texts = ["a short one", "a somewhat longer sentence about nothing in particular", "x"]
    try:
        kernels.use("numba")
        a = enc.encode(texts, pooling="mean")
        kernels.use("numpy")
        b = enc.encode(texts, pooling="mean")
    finally:
        kernels.use(None)
    diff = np.abs(a - b).max()
    assert 0 < diff <= 1e-5, diff  # really two code paths, and they agree


_CACHE_PROBE = """
import json
from bertfeat.ops import kernels
assert kernels.use("numba") == "numba"
ready = sorted(name for name, f in kernels._state["kernels"].items() if f.signatures)
kernels.warm_bf16()
kernels.warm_q8()
misses = {name: sum(f.stats.cache_misses.values()) for name, f in kernels._state["kernels"].items()}
print(json.dumps({"ready_after_use": ready, "misses": misses}))
"""


def test_a_second_process_compiles_nothing(tmp_path):
    """numba's disk cache works for every kernel: a second process compiles none and adds no cache file.

    (A jitted helper held in a closure cell made the bf16 kernels compile again in every process, 2-4 s
    before the first batch even under fp32, and grew the cache by a file per kernel per run.)
    """
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> dict:
        p = subprocess.run([sys.executable, "-c", _CACHE_PROBE], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    first = run()
    # an fp32 start loads the fp32 kernels only (the bf16 / int8 ones wait for warm_bf16 / warm_q8, i.e. such an Encoder)
    assert first["ready_after_use"] == sorted(set(first["misses"]) - set(kernels.BF16_KERNELS) - set(kernels.Q8_KERNELS))
    assert all(first["misses"][n] > 0 for n in first["misses"])  # an empty cache: the first process compiles all
    files = sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file())
    second = run()["misses"]
    assert second == {name: 0 for name in first["misses"]}, f"kernels compiled again in a second process: {second}"
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()) == files
