"""Log2Backward: the seed op, exactly as its reference documentation describes it."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pylucid as pl
from pylucid.ops import AmpPolicy, Log2Backward


def test_schema_is_the_documented_one() -> None:
    schema = Log2Backward.schema_v1
    assert schema.name == "log2"
    assert schema.version == 1
    assert schema.amp_policy is AmpPolicy.FORCE_FP32
    assert schema.saved == ("x",)
    assert schema.real_valued
    assert pl.ops.get_schema("log2") is schema
    assert pl.ops.get_op("log2") is Log2Backward


def test_three_spellings_record_a_log2_node(device: str) -> None:
    x = pl.tensor([0.5, 1.0, 8.0], device=device, requires_grad=True)
    for y in (pl.log2(x), x.log2(), pl.ops.log2(x)):
        assert isinstance(y.grad_fn, Log2Backward)
        np.testing.assert_array_equal(y.numpy(), [-1.0, 0.0, 3.0])


def test_issue_example_gradient(device: str) -> None:
    x = pl.tensor([0.5, 1.0, 8.0], device=device, requires_grad=True)
    y = pl.log2(x)
    (y * y).sum().backward()
    x64 = np.array([0.5, 1.0, 8.0])
    expected = 2 * np.log2(x64) / (x64 * math.log(2.0))
    assert x.grad.dtype is pl.float32
    # float32 result of a float64-exact expression: 1 float32 ulp relative is 1.2e-7.
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=2.4e-7, atol=0)


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64])
def test_special_values_without_warning(device: str, dtype: pl.DType) -> None:
    x = pl.tensor([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1.0], dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = pl.log2(x).numpy()
    assert y[0] == -np.inf and y[1] == -np.inf
    assert np.isnan(y[2]) and np.isnan(y[4]) and np.isnan(y[5])
    assert y[3] == np.inf
    assert y[6] == 0.0 and not np.signbit(y[6])


def test_integer_input_gives_float32(device: str) -> None:
    x = pl.tensor([1, 2, 1024], device=device)
    assert x.dtype is pl.int64
    y = pl.log2(x)
    assert y.dtype is pl.float32
    np.testing.assert_array_equal(y.numpy(), [0.0, 1.0, 10.0])


def test_ln2_literal_is_log_of_two() -> None:
    ln2, ln2_lo = Log2Backward.ln_base, Log2Backward.ln_base_lo
    assert ln2 == math.log(2.0) == 0.6931471805599453
    assert np.longdouble(ln2) + np.longdouble(ln2_lo) == np.log(np.longdouble(2))


def test_backward_is_correctly_rounded_in_float64(rng: np.random.Generator) -> None:
    """The numba backward is within 0.5 ULP (+ the x87 reference's own 2^-64) of the exact
    g / (x ln 2), computed in 80-bit long double. The expression g * (1/x) / log(2.0) rounds
    three times and is itself up to 2.3 ULP from exact, so it is not the yardstick."""
    x_np = np.exp(rng.uniform(-30, 30, size=100_000))
    g_np = rng.standard_normal(100_000)
    x = pl.tensor(x_np, dtype=pl.float64, requires_grad=True)
    pl.log2(x).backward(pl.tensor(g_np, dtype=pl.float64))
    exact = np.longdouble(g_np) / (np.longdouble(x_np) * np.log(np.longdouble(2)))
    got = x.grad.numpy()
    ulps = np.abs(np.longdouble(got) - exact) / np.spacing(np.abs(got))
    assert ulps.max() <= 0.501


@pytest.mark.parametrize("op", ["log2", "log", "log10"])
def test_float32_backward_is_correctly_rounded(rng: np.random.Generator, op: str) -> None:
    """The float32 kernel (a float32 division and one Markstein correction, no float64
    division) rounds g / (x ln b) to the nearest float32 on 400 000 samples spanning every
    binade of x, subnormals included, and g over 2^-60..2^60 (it may miss only where the
    exact quotient is within ~2^-20 ULP of a tie: none here)."""
    n = 400_000
    x_np = np.exp2(rng.uniform(-149, 128, n)).astype(np.float32)
    g_np = (np.exp2(rng.uniform(-60, 60, n)) * rng.standard_normal(n)).astype(np.float32)
    x = pl.tensor(x_np, requires_grad=True)
    getattr(pl, op)(x).backward(pl.tensor(g_np))
    ln_b = {"log2": np.log(np.longdouble(2)), "log": 1, "log10": np.log(np.longdouble(10))}[op]
    exact = np.longdouble(g_np) / (np.longdouble(x_np) * ln_b)
    finite = np.abs(exact) < np.longdouble(np.finfo(np.float32).max)
    with np.errstate(over="ignore"):
        nearest = exact.astype(np.float32)
    np.testing.assert_array_equal(x.grad.numpy()[finite], nearest[finite])


def test_float32_backward_special_values() -> None:
    x = pl.tensor([0.0, -0.0, np.inf, np.nan, 1e-45, -2.0, 3e38], requires_grad=True)
    pl.log2(x).backward(pl.ones(7))
    got = x.grad.numpy()
    with np.errstate(divide="ignore", over="ignore"):  # 1 / (1e-45 ln 2) rounds to inf
        expected = 1.0 / (np.array([0.0, -0.0, np.inf, np.nan, 1e-45, -2.0, 3e38]) * math.log(2))
        np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_backward_special_values() -> None:
    x = pl.tensor([0.0, -0.0, np.inf, np.nan, 1e-310, -2.0], dtype=pl.float64, requires_grad=True)
    pl.log2(x).backward(pl.ones(6, dtype=pl.float64))
    got = x.grad.numpy()
    np.testing.assert_array_equal(got[:5], [np.inf, -np.inf, 0.0, np.nan, np.inf])
    assert got[5] == pytest.approx(-1 / (2 * math.log(2)), rel=1e-16)


def test_forward_accuracy_against_float64(rng: np.random.Generator, device: str) -> None:
    x_np = np.exp(rng.uniform(-80, 80, size=100_000)).astype(np.float32)
    y = pl.log2(pl.tensor(x_np, device=device)).numpy()
    exact = np.log2(x_np.astype(np.float64))
    ulps = np.abs(y.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32))
    # libm's log2f (numba) and MLX's log2 are both within 1 float32 ULP.
    assert ulps.max() <= 1.0


def test_gradient_at_domain_edge_is_inf_not_error() -> None:
    x = pl.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pl.log2(x).sum().backward()
    assert x.grad.numpy()[0] == np.inf


def test_large_input_takes_the_parallel_loop(rng: np.random.Generator) -> None:
    from pylucid.kernels.loops import PARALLEL_THRESHOLD

    x_np = rng.uniform(0.1, 10, size=PARALLEL_THRESHOLD * 2).astype(np.float32)
    x = pl.tensor(x_np, requires_grad=True)
    y = pl.log2(x)
    np.testing.assert_allclose(y.numpy(), np.log2(x_np.astype(np.float64)), rtol=2.4e-7)
    g_np = rng.standard_normal(x_np.size).astype(np.float32)
    y.backward(pl.tensor(g_np))
    reference = g_np.astype(np.float64) / (x_np.astype(np.float64) * math.log(2.0))
    np.testing.assert_allclose(x.grad.numpy(), reference, rtol=1.2e-7)
