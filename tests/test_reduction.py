"""Reductions and the softmax family: edge cases the op records do not reach.

The records in :mod:`pylucid.opinfo.reduction` cover forward accuracy and gradchecks on
ordinary inputs; here are zeros in prod, ties and NaN in max/min, empty axes, small counts
in var, 0-d inputs, infinite and huge inputs to the softmax family, any axis and
non-contiguous inputs, and the parallel row kernels.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pylucid as pl
from pylucid.dtypes import as_dtype as as_pl_dtype
from pylucid.kernels.reduction import PARALLEL_THRESHOLD_ROWS
from pylucid.ops import AmpPolicy

FORCE, KEEP = AmpPolicy.FORCE_FP32, AmpPolicy.KEEP_INPUT


def grad_of(fn, x_np: np.ndarray, device: str, dtype=pl.float64, g=None) -> np.ndarray:
    """The gradient of ``fn`` at ``x_np`` (seeded with ones, or ``g``)."""
    x = pl.tensor(x_np, dtype=dtype, device=device, requires_grad=True)
    y = fn(x)
    seed = np.ones(y.shape) if g is None else g
    y.backward(pl.tensor(seed, dtype=dtype, device=device))
    return x.grad.numpy()


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    """No op of the family may emit a RuntimeWarning (overflow, divide, invalid value)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize(
    ("name", "amp", "saved", "real_valued", "differentiable"),
    [
        ("sum", FORCE, (), False, True),
        ("mean", KEEP, (), True, True),
        ("prod", FORCE, ("x",), False, True),
        ("max", KEEP, ("x", "result"), False, True),
        ("min", KEEP, ("x", "result"), False, True),
        ("argmax", KEEP, (), False, False),
        ("argmin", KEEP, (), False, False),
        ("var", KEEP, ("x",), True, True),
        ("std", KEEP, ("x", "result"), True, True),
        ("logsumexp", FORCE, ("x", "result"), True, True),
        ("softmax", FORCE, ("result",), True, True),
        ("log_softmax", FORCE, ("result",), True, True),
    ],
)
def test_schemas(name, amp, saved, real_valued, differentiable) -> None:
    schema = pl.ops.get_schema(name)
    assert schema.amp_policy is amp
    assert schema.saved == saved
    assert schema.real_valued is real_valued
    assert schema.differentiable is differentiable


# -- prod -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "x",
    [
        [[2.0, 3.0, 4.0], [1.0, -5.0, 0.5]],  # no zero
        [[2.0, 0.0, 4.0], [1.0, -5.0, 0.5]],  # one zero: only it gets a gradient
        [[0.0, 3.0, 0.0], [0.0, -5.0, 0.0]],  # several zeros: every gradient is 0
        [[-0.0, 3.0, 7.0], [6.0, 0.0, -2.0]],  # signed zeros
    ],
    ids=["none", "one", "several", "signed"],
)
def test_prod_gradient_is_the_product_of_the_others(device: str, x: list) -> None:
    x_np = np.array(x)
    others = np.array([[np.prod(np.delete(row, j)) for j in range(row.size)] for row in x_np])
    # Small integers and halves: every partial product is exact, so equality is exact.
    np.testing.assert_array_equal(grad_of(lambda t: pl.prod(t, axis=1), x_np, device), others)
    np.testing.assert_array_equal(
        grad_of(lambda t: t.prod(), x_np, device),
        np.array([np.prod(np.delete(x_np, j)) for j in range(x_np.size)]).reshape(2, 3),
    )


def test_prod_overflow_gives_inf_without_warning(device: str) -> None:
    x = pl.tensor([[1e30, 1e30, -1.0], [np.inf, 0.0, 1.0]], device=device)
    y = pl.prod(x, axis=1).numpy()
    assert y[0] == -np.inf and np.isnan(y[1])


def test_prod_of_integers_is_int64(device: str) -> None:
    y = pl.prod(pl.tensor([[1, 2, 3], [4, 5, 6]], device=device), axis=1)
    assert y.dtype is pl.int64
    assert y.tolist() == [6, 120]


# -- max / min ------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_ties_share_the_gradient(device: str, op: str) -> None:
    sign = 1.0 if op == "amax" else -1.0
    x_np = sign * np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    fn = getattr(pl, op)
    np.testing.assert_allclose(
        grad_of(lambda t: fn(t, axis=1), x_np, device, g=np.array([6.0, 3.0])),
        [[0.0, 3.0, 3.0], [1.0, 1.0, 1.0]],
        rtol=1e-15,
    )
    np.testing.assert_allclose(
        grad_of(lambda t: fn(t), x_np, device), [[0, 0.5, 0.5], [0, 0, 0]], rtol=1e-15
    )
    whole = getattr(pl, op[1:])  # max(x) of all elements: ties share, as amax (PyTorch's rule)
    np.testing.assert_allclose(
        grad_of(lambda t: whole(t), x_np, device), [[0, 0.5, 0.5], [0, 0, 0]], rtol=1e-15
    )


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_along_a_dim_gives_the_gradient_to_the_first_extremum(device: str, op: str) -> None:
    """PyTorch's max(x, dim): one index per slice, the first extremum, which alone takes the
    gradient (amax shares it among ties)."""
    sign = 1.0 if op == "max" else -1.0
    x_np = sign * np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    values, indices = getattr(pl, op)(pl.tensor(x_np, device=device), 1)
    assert indices.tolist() == [1, 0] and values.tolist() == (sign * np.array([3.0, 2.0])).tolist()
    np.testing.assert_array_equal(
        grad_of(lambda t: getattr(pl, op)(t, 1).values, x_np, device, g=np.array([6.0, 3.0])),
        [[0.0, 6.0, 0.0], [3.0, 0.0, 0.0]],
    )


@pytest.mark.parametrize("op", ["max", "min", "amax", "amin"])
def test_nan_propagates_and_takes_the_gradient(device: str, op: str) -> None:
    x_np = np.array([[1.0, np.nan, 3.0, np.nan], [1.0, 2.0, 3.0, 4.0]])

    def values(t: pl.Tensor) -> pl.Tensor:
        result = getattr(t, op)(dim=1)
        return result if op.startswith("a") else result.values

    y = values(pl.tensor(x_np, device=device)).numpy()
    assert np.isnan(y[0])
    assert y[1] == (4.0 if op.endswith("max") else 1.0)
    grad = grad_of(values, x_np, device)
    expected_row_1 = [0, 0, 0, 1] if op.endswith("max") else [1, 0, 0, 0]
    # amax/amin share among the NaNs; max/min(dim) give it to the first NaN, as PyTorch.
    expected_row_0 = [0, 0.5, 0, 0.5] if op.startswith("a") else [0, 1, 0, 0]
    np.testing.assert_array_equal(grad, [expected_row_0, expected_row_1])


def test_max_keeps_integer_dtypes(device: str) -> None:
    y, where = pl.max(pl.tensor([[3, -7], [1, 2]], device=device), axis=0)
    assert y.dtype is pl.int64 and y.tolist() == [3, 2] and where.tolist() == [0, 1]
    assert pl.min(pl.tensor([[3, -7], [1, 2]], device=device)).item() == -7


# -- argmax / argmin ------------------------------------------------------------------------
def test_argmax_argmin(device: str) -> None:
    x = pl.tensor([[1.0, 5.0, 5.0], [7.0, 0.0, 7.0]], device=device, requires_grad=True)
    y = pl.argmax(x, dim=1)
    assert y.dtype is pl.int64 and y.grad_fn is None
    assert y.tolist() == [1, 0]  # the first of tied maxima
    assert pl.argmin(x, 0).tolist() == [0, 1, 0]
    assert x.argmax().item() == 3  # of the flattened tensor
    assert pl.argmax(x, keepdims=True).shape == (1, 1)
    assert pl.argmin(x, axis=-1, keepdim=True).tolist() == [[0], [1]]
    nan = pl.tensor([1.0, np.nan, 3.0, np.nan], device=device)
    assert pl.argmax(nan).item() == 1 and pl.argmin(nan).item() == 1  # NaN wins both
    assert pl.argmax(pl.tensor(4.0, device=device)).item() == 0
    with pytest.raises(TypeError, match=r"argmax: axis must be one int"):
        pl.argmax(x, axis=(0, 1))


# -- empty reductions -----------------------------------------------------------------------
@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_no_identity_over_an_empty_axis_raises(device: str, op: str) -> None:
    x = pl.zeros((2, 0), device=device)
    with pytest.raises(ValueError, match=rf"^{op}: cannot reduce over axis 1.*\(2, 0\)"):
        getattr(pl, op)(x)
    with pytest.raises(ValueError, match=rf"^{op}: cannot reduce over axis 1"):
        getattr(pl, op)(x, axis=1)
    reduced = getattr(pl, op)(x, axis=0)  # reducing a non-empty axis is fine
    assert (reduced if op.startswith("arg") else reduced.values).shape == (0,)


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64])
def test_empty_reductions_with_an_identity(device: str, dtype: pl.DType) -> None:
    x = pl.zeros((2, 0), dtype=dtype, device=device, requires_grad=True)
    assert pl.sum(x, axis=1).tolist() == [0.0, 0.0]
    assert pl.prod(x, axis=1).tolist() == [1.0, 1.0]
    assert pl.prod(x).item() == 1.0
    assert pl.logsumexp(x, axis=1).tolist() == [-np.inf, -np.inf]
    assert pl.logsumexp(x, axis=0, keepdims=True).shape == (1, 0)
    assert np.isnan(pl.mean(x, axis=1).numpy()).all()
    assert np.isnan(pl.var(x, axis=1).numpy()).all()
    assert pl.softmax(x, axis=1).shape == (2, 0)
    assert pl.log_softmax(x, axis=0).shape == (2, 0)
    pl.prod(x, axis=1).sum().backward()
    assert x.grad.shape == (2, 0)


# -- var / std ------------------------------------------------------------------------------
def test_var_std_correction(device: str, rng: np.random.Generator) -> None:
    x_np = rng.uniform(-3, 3, size=(4, 5))
    x = pl.tensor(x_np, dtype=pl.float64, device=device)
    for kwargs, ddof in [
        ({}, 1),
        ({"correction": 0}, 0),
        ({"unbiased": False}, 0),
        ({"correction": 2.5}, 2.5),
        ({"unbiased": True}, 1),
    ]:
        # float64 two-pass against NumPy's two-pass: a few ULP.
        np.testing.assert_allclose(
            pl.var(x, 1, **kwargs).numpy(), np.var(x_np, 1, ddof=ddof), rtol=1e-14
        )
        np.testing.assert_allclose(
            x.std(dim=0, keepdim=True, **kwargs).numpy(),
            np.std(x_np, 0, ddof=ddof, keepdims=True),
            rtol=1e-14,
        )
    with pytest.raises(TypeError, match="var: pass correction= or unbiased=, not both"):
        pl.var(x, correction=1, unbiased=True)
    with pytest.raises(ValueError, match="std: correction must be finite and >= 0"):
        pl.std(x, correction=-1)


def test_var_with_too_few_elements(device: str) -> None:
    """n <= correction divides by 0: inf, or nan for a constant slice (PyTorch's values)."""
    one = pl.tensor([[2.0]], device=device)
    assert np.isnan(pl.var(one).item()) and np.isnan(pl.std(one, 1).item())
    assert pl.var(one, correction=0).item() == 0.0
    two = pl.tensor([1.0, 3.0], device=device)
    assert pl.var(two, correction=2).item() == np.inf
    assert pl.std(two, correction=5).item() == np.inf


def test_std_of_a_constant_has_zero_gradient(device: str) -> None:
    np.testing.assert_array_equal(
        grad_of(lambda t: pl.std(t, axis=1), np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 3.0]]), device),
        [[0, 0, 0], [-0.5, 0, 0.5]],
    )


def test_var_of_integers_is_float32(device: str) -> None:
    y = pl.var(pl.tensor([1, 2, 3, 4], device=device))
    assert y.dtype is pl.float32
    assert y.item() == pytest.approx(5.0 / 3.0, rel=1e-7)


# -- 0-d inputs -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "value", "gradient"),
    [
        (pl.sum, 2.5, 1.0),
        (pl.prod, 2.5, 1.0),
        (pl.max, 2.5, 1.0),
        (pl.min, 2.5, 1.0),
        (lambda t: pl.var(t, correction=0), 0.0, 0.0),
        (pl.logsumexp, 2.5, 1.0),
        (pl.softmax, 1.0, 0.0),
        (lambda t: pl.log_softmax(t, dim=0), 0.0, 0.0),
    ],
    ids=["sum", "prod", "max", "min", "var", "logsumexp", "softmax", "log_softmax"],
)
def test_zero_d_inputs(device: str, op, value: float, gradient: float) -> None:
    x = pl.tensor(2.5, dtype=pl.float64, device=device, requires_grad=True)
    y = op(x)
    assert y.shape == () and y.item() == value
    y.backward()
    assert x.grad.item() == gradient


# -- the softmax family ---------------------------------------------------------------------
def _softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64])
def test_softmax_family_on_huge_inputs(device: str, dtype: pl.DType) -> None:
    x_np = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, 0.0], [0.0, -np.inf, 1.0]])
    x = pl.tensor(x_np, dtype=dtype, device=device, requires_grad=True)
    third, half = 1.0 / 3.0, 0.5
    y = pl.softmax(x, axis=1)
    # float32: 1 ULP of 1/3 is 3e-8; exp of float32 x - max near 1 is within 1 ULP.
    np.testing.assert_allclose(
        y.numpy(),
        [[1, 0, 0], [third] * 3, [half, half, 0], [1 / (1 + np.e), 0, np.e / (1 + np.e)]],
        rtol=2e-7,
        atol=0,
    )
    log_y = pl.log_softmax(x, dim=-1).numpy()
    np.testing.assert_allclose(
        log_y,
        [
            [0, -2e4, -1e4],
            [-np.log(3)] * 3,
            [-np.log(2), -np.log(2), -1e4 - np.log(2)],
            [-np.log1p(np.e), -np.inf, 1 - np.log1p(np.e)],
        ],
        rtol=2e-7,
    )
    lse = pl.logsumexp(x, axis=1).numpy()
    np.testing.assert_allclose(
        lse, [1e4, -1e4 + np.log(3), 1e4 + np.log(2), np.log1p(np.e)], rtol=2e-7
    )
    (y * y).sum().backward()  # gradients stay finite
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64])
def test_logsumexp_of_infinite_and_nan_slices(device: str, dtype: pl.DType) -> None:
    inf, nan = np.inf, np.nan
    x = pl.tensor([[-inf, -inf], [inf, 1.0], [-inf, 0.0], [nan, 1.0]], dtype=dtype, device=device)
    y = pl.logsumexp(x, dim=1).numpy()
    assert y[0] == -inf and y[1] == inf and y[2] == 0.0 and np.isnan(y[3])
    s = pl.softmax(x, axis=1).numpy()
    assert np.isnan(s[0]).all() and np.isnan(s[1]).all() and np.isnan(s[3]).all()
    assert s[2].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_any_axis_on_non_contiguous_input(
    device: str, axis: int, rng: np.random.Generator
) -> None:
    base = rng.uniform(-20, 20, size=(5, 6, 7))
    view = base.transpose(2, 0, 1)[:, ::2]  # shape (7, 3, 6), non-contiguous
    g = rng.standard_normal(view.shape)
    x = pl.from_numpy(view).to(device)
    y_ref = _softmax64(view, axis)
    # float64: a few ULP from the max shift, exp and the float64 row sum.
    np.testing.assert_allclose(pl.softmax(x, axis).numpy(), y_ref, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(
        pl.log_softmax(x, dim=axis).numpy(), np.log(y_ref), rtol=1e-13, atol=1e-13
    )
    # Fused backwards against their closed forms, evaluated in float64 NumPy.
    np.testing.assert_allclose(
        grad_of(lambda t: pl.softmax(t, axis), view, device, g=g),
        y_ref * (g - (g * y_ref).sum(axis, keepdims=True)),
        rtol=1e-12,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        grad_of(lambda t: pl.log_softmax(t, axis), view, device, g=g),
        g - y_ref * g.sum(axis, keepdims=True),
        rtol=1e-12,
        atol=1e-13,
    )


@pytest.mark.parametrize(
    "shape_axis", [((300, 257), 1), ((257, 300), 0), ((64, 40, 30), 1), ((4, 40, 500), (0, 2))]
)
def test_large_inputs_take_the_parallel_rows(
    device: str, shape_axis: tuple, rng: np.random.Generator
) -> None:
    shape, axis = shape_axis
    assert np.prod(shape) >= PARALLEL_THRESHOLD_ROWS
    x_np = rng.uniform(-30, 30, size=shape).astype(np.float32)
    x64 = x_np.astype(np.float64)
    x = pl.tensor(x_np, device=device)
    # float32 outputs of float64-accumulated rows: rounding of x - max (5e-7 relative of
    # exp at |x - max| <= 60) dominates; 2e-6 leaves a factor 4.
    if isinstance(axis, int):
        y = pl.softmax(x, axis).numpy()
        np.testing.assert_allclose(y, _softmax64(x64, axis), rtol=2e-5, atol=1e-30)
        np.testing.assert_allclose(y.sum(axis), 1.0, rtol=2e-6)
    m = x64.max(axis=axis, keepdims=True)
    lse = np.squeeze(m + np.log(np.exp(x64 - m).sum(axis=axis, keepdims=True)), axis=axis)
    np.testing.assert_allclose(pl.logsumexp(x, axis).numpy(), lse, rtol=2e-6)
    np.testing.assert_allclose(pl.var(x, axis).numpy(), np.var(x64, axis, ddof=1), rtol=2e-6)
    np.testing.assert_array_equal(pl.amax(x, axis).numpy(), x_np.max(axis))


@pytest.mark.parametrize("shape", [(1, 1), (32, 10), (1797, 10), (7, 3), (4, 17), (3, 1000)])
def test_log_softmax_blocks_serial_and_parallel_agree(shape, rng: np.random.Generator) -> None:
    """The block kernels (exp over the whole block) give the same bits on the serial loop
    and on the prange loop over chunks of rows, and the float32 backward is within
    2 eps (|g| + |exp(y) sum(g)|) of g - exp(y) sum(g) in float64: exp(y) is taken in
    float32 arithmetic (within an ulp) and the difference rounded once, so the bound is on
    the terms' size, not the result's where they cancel (1.15 eps measured)."""
    from pylucid.kernels import reduction as kernels

    forward = kernels.block_map(kernels.log_softmax_rows)
    backward = kernels.block_map(kernels.log_softmax_backward_rows, arity=2)
    for dtype in (np.float32, np.float64):
        x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape)).astype(dtype)
        g = rng.standard_normal(shape).astype(dtype)
        outs = []
        for loops in ((forward._serial, backward._serial), (forward._parallel, backward._parallel)):
            y, dx = np.empty_like(x), np.empty_like(x)
            loops[0](x, y)
            loops[1](y, g, dx)
            outs.append((y.tobytes(), dx.tobytes()))
        assert outs[0] == outs[1]
        if dtype is np.float32:
            g64 = g.astype(np.float64)
            subtracted = np.exp(y.astype(np.float64)) * g64.sum(1, keepdims=True)
            scale = np.finfo(np.float32).eps * (np.abs(g64) + np.abs(subtracted))
            assert (np.abs(dx - (g64 - subtracted)) <= 2 * scale).all()


_SUM_CASES = [
    ((1797, 10), (1,)), ((32, 10), (1,)), ((32, 64), (1,)), ((32, 65), (1,)), ((7,), (0,)),
    ((1797, 10), (0,)), ((32, 128), (0,)), ((4096, 2), (0,)), ((5, 1), (0,)), ((1, 5), (1,)),
    ((4, 1), (1,)), ((1, 4), (0,)), ((4, 5, 6), (1, 2)), ((4, 5, 6), (0, 1)),
    ((2, 3, 4), (0, 1, 2)), ((3, 1, 2), (1,)), ((5, 1, 3), (0,)), ((9, 7), (0, 1)),
    ((100, 3), (0,)), ((0, 3), (0,)),
]  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape_axes", _SUM_CASES, ids=str)
def test_sum_has_the_bits_of_numpy(shape_axes, keepdims, dtype, rng) -> None:
    """Sums of short rows and over leading axes run compiled loops in NumPy's order
    (pylucid.kernels.pairwise): every result is np.add.reduce's, to the bit, with special
    values among the elements, and nothing warns (the fixture makes a warning an error)."""
    shape, axes = shape_axes
    backend = pl.tensor([1.0])._backend
    a = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-6, 6, shape)).astype(dtype)
    for specials in ([], [np.nan], [np.inf, -np.inf], [3e38, 3e38], [-0.0] * 64):
        x = a.copy().reshape(-1)
        x[: min(x.size, len(specials))] = specials[: x.size]
        x = x.reshape(shape)
        out = backend.sum(x, axes, keepdims, as_pl_dtype(dtype))
        with np.errstate(all="ignore"):
            expected = np.add.reduce(x, axis=axes, dtype=dtype, keepdims=keepdims)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        assert out.tobytes() == expected.tobytes()


def test_softmax_axis_errors(device: str) -> None:
    x = pl.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match=r"softmax: axis 2 is out of range"):
        pl.softmax(x, 2)
    with pytest.raises(TypeError, match=r"log_softmax: axis must be one int"):
        pl.log_softmax(x, (0, 1))
    with pytest.raises(TypeError, match=r"softmax: pass axis= or its alias dim=, not both"):
        pl.softmax(x, 0, dim=1)
    with pytest.raises(ValueError, match=r"softmax: axis 1 is out of range for a 0-d"):
        pl.softmax(pl.tensor(1.0, device=device), 1)
    with pytest.raises(ValueError, match=r"logsumexp: axis -3 is out of range"):
        pl.logsumexp(x, -3)


def test_softmax_of_integers_is_float32(device: str) -> None:
    y = pl.softmax(pl.tensor([0, 0, 0, 0], device=device))
    assert y.dtype is pl.float32 and y.tolist() == [0.25] * 4


@pytest.mark.parametrize(
    "op",
    [
        lambda t: pl.prod(t, axis=0),
        lambda t: pl.amax(t, axis=(0, 2)),
        lambda t: pl.var(t, axis=1, correction=0),
        lambda t: pl.std(t, axis=2),
        lambda t: pl.logsumexp(t, axis=1, keepdims=True),
        lambda t: pl.softmax(t, 1),
        lambda t: pl.log_softmax(t, 0),
    ],
    ids=["prod", "max", "var", "std", "logsumexp", "softmax", "log_softmax"],
)
@pytest.mark.skipif("mlx" not in pl.backends.available(), reason="needs both backends")
def test_backends_agree_in_float32(op, rng: np.random.Generator) -> None:
    x_np = rng.uniform(-2, 2, size=(6, 5, 9)).astype(np.float32)
    g = None
    results = []
    for device in ("cpu", "gpu"):
        x = pl.tensor(x_np, device=device, requires_grad=True)
        y = op(x)
        g = rng.standard_normal(y.shape) if g is None else g
        y.backward(pl.tensor(g, device=device))
        results.append((y.numpy(), x.grad.numpy()))
    (y_cpu, g_cpu), (y_gpu, g_gpu) = results
    # Two float32 implementations, each within a few ULP of the exact value.
    np.testing.assert_allclose(y_cpu, y_gpu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_cpu, g_gpu, rtol=1e-4, atol=1e-5)


# -- create_graph: the differentiable formulas (grad_graph) ---------------------------------
_R = np.random.default_rng(11).uniform(-2, 2, size=(3, 4, 5))
_ZEROS = np.array([[2.0, 3.0, 4.0], [2.0, 0.0, 4.0], [0.0, 3.0, 0.0], [-0.0, 3.0, 7.0]])
_TIES_NAN = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0], [1.0, np.nan, 3.0, np.nan]])
_HUGE = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, 0.0], [0.0, -np.inf, 1.0]])
_INF_ROWS = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0], [1.0, 2.0]])
GRAPH_CASES = {
    "prod-zeros-rows": (lambda t: pl.prod(t, axis=1), _ZEROS),
    "prod-zeros-columns": (lambda t: pl.prod(t, axis=0, keepdims=True), _ZEROS),
    "prod-zeros-all": (pl.prod, _ZEROS[:2]),
    "prod-random-axes": (lambda t: pl.prod(t, axis=(0, 2)), _R),
    "prod-seventeen": (pl.prod, np.append(_R[0, 0, :], np.linspace(0.5, 2, 12))),
    "prod-one-element": (lambda t: pl.prod(t, axis=1), _R[:, :1, 0]),
    "prod-empty-axis": (lambda t: pl.prod(t, axis=1), np.zeros((3, 0))),
    "prod-0d": (pl.prod, np.array(2.5)),
    "max-ties-nan": (lambda t: pl.amax(t, axis=1), _TIES_NAN),
    "max-all": (pl.max, _TIES_NAN[:2]),
    "min-ties-nan": (lambda t: pl.amin(t, dim=1, keepdim=True), -_TIES_NAN),
    "min-axes": (lambda t: pl.amin(t, axis=(0, 2)), np.round(_R)),
    "var-random": (lambda t: pl.var(t, axis=(0, 2)), _R),
    "var-correction-0": (lambda t: pl.var(t, axis=-1, correction=0, keepdims=True), _R),
    "var-too-few": (lambda t: pl.var(t, axis=1, correction=2), _R[:, :2, 0]),
    "var-0d": (lambda t: pl.var(t, correction=0), np.array(2.5)),
    "std-constant": (lambda t: pl.std(t, axis=1), np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 3.0]])),
    "std-random": (lambda t: pl.std(t, axis=(0, 1), keepdims=True, correction=0), _R),
    "std-too-few": (lambda t: pl.std(t, axis=1, correction=5), _R[:, :2, 0]),
    "logsumexp-huge": (lambda t: pl.logsumexp(t, axis=1), _HUGE),
    "logsumexp-inf": (lambda t: pl.logsumexp(t, axis=-1, keepdims=True), _INF_ROWS),
    "logsumexp-axes": (lambda t: pl.logsumexp(t, axis=(0, 2)), _R),
    "softmax-huge": (lambda t: pl.softmax(t, axis=1), _HUGE),
    "softmax-axis-0": (lambda t: pl.softmax(t, 0), _R),
    "softmax-0d": (pl.softmax, np.array(2.5)),
    "log_softmax-huge": (lambda t: pl.log_softmax(t, axis=1), _HUGE),
    "log_softmax-axis-1": (lambda t: pl.log_softmax(t, dim=1), _R),
    "log_softmax-0d": (pl.log_softmax, np.array(2.5)),
}


def _first_derivative(fn, x_np: np.ndarray, device: str, create_graph: bool) -> np.ndarray:
    x = pl.tensor(x_np, dtype=pl.float64, device=device, requires_grad=True)
    y = fn(x)
    v = np.random.default_rng(5).uniform(-1.5, 1.5, size=y.shape)
    (grad,) = pl.graph.grad(y, [x], pl.tensor(v, device=device), create_graph=create_graph)
    return grad.numpy()


@pytest.mark.parametrize(("fn", "x_np"), GRAPH_CASES.values(), ids=GRAPH_CASES.keys())
def test_create_graph_first_derivatives_match_the_fused_kernels(device: str, fn, x_np) -> None:
    """grad_graph mirrors grad_formula: prod with zeros (no division), tie sharing and NaN
    in max/min, std's 0 on a constant slice, n <= correction, infinite and huge inputs."""
    fused = _first_derivative(fn, x_np, device, create_graph=False)
    graph = _first_derivative(fn, x_np, device, create_graph=True)
    assert graph.shape == fused.shape
    np.testing.assert_allclose(graph, fused, rtol=1e-12, atol=0)


def test_prod_second_derivatives_are_exact_with_zeros(device: str) -> None:
    """d2 prod / dx_j dx_k is the product of the elements other than j and k."""
    x_np = np.array([2.0, 0.0, 3.0, -0.5, 0.0, 4.0, 1.5])
    x = pl.tensor(x_np, dtype=pl.float64, device=device, requires_grad=True)
    (grad,) = pl.graph.grad(pl.prod(x), [x], create_graph=True)
    for j in range(x_np.size):
        (row,) = pl.graph.grad(grad[j], [x], retain_graph=True)
        expected = [0.0 if k == j else np.prod(np.delete(x_np, [j, k])) for k in range(x_np.size)]
        np.testing.assert_array_equal(row.numpy(), expected)


def test_std_of_a_constant_slice_has_zero_second_derivatives(device: str) -> None:
    x = pl.tensor([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]], dtype=pl.float64, device=device)
    x.requires_grad_(True)
    (grad,) = pl.graph.grad(pl.std(x, axis=1).sum(), [x], create_graph=True)
    (second,) = pl.graph.grad((grad * grad).sum(), [x])
    assert np.isfinite(second.numpy()).all()
    np.testing.assert_array_equal(second.numpy()[0], [0.0, 0.0, 0.0])


def test_every_differentiable_op_of_the_family_has_a_graph_formula() -> None:
    modules = {"pylucid.ops.reduce", "pylucid.ops.softmax_family"}
    ops = [pl.ops.get_op(name) for name in pl.ops.list_ops()]
    family = [op for op in ops if op.__module__ in modules and op.schema_v1.differentiable]
    assert len(family) == 10  # sum mean prod max min var std logsumexp softmax log_softmax
    for op in family:
        assert op.grad_graph is not pl.ops.Op.grad_graph, op.__name__


def test_an_op_without_a_graph_formula_refuses_create_graph(device: str, monkeypatch) -> None:
    monkeypatch.delattr(pl.ops.LogsumexpBackward, "grad_graph")
    x = pl.tensor([1.0, 2.0], dtype=pl.float64, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="create_graph=True cannot differentiate"):
        pl.graph.grad(pl.logsumexp(x), [x], create_graph=True)


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize(("shape", "axis"), [((32, 10), 1), ((32, 10), 0), ((4, 3, 5), None)])
def test_sum_and_mean_gradients_are_arrays_of_their_own(device: str, op, shape, axis) -> None:
    """The gradient spread back over the reduced elements (``broadcast_copy``) has every
    element, not a stride-0 view: g, or g / n, at each element; on the numba backend a
    C-contiguous array that owns its memory, so the ops it flows into take their
    contiguous paths."""
    x = pl.tensor(np.arange(math.prod(shape), dtype=np.float32).reshape(shape), device=device)
    x.requires_grad_()
    g_shape = tuple(n for i, n in enumerate(shape) if axis is not None and i != axis)
    g = np.arange(1.0, 1.0 + math.prod(g_shape), dtype=np.float32).reshape(g_shape)
    y = getattr(x, op)(axis=axis)
    y.backward(pl.tensor(g, device=device), retain_graph=True)
    count = x.numel() // max(1, math.prod(g_shape)) if axis is not None else x.numel()
    spread = np.expand_dims(g, axis) if axis is not None else g
    expected = np.broadcast_to(spread / np.float32(count) if op == "mean" else spread, shape)
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    if device == "cpu":  # (the formula's own output: a leaf's .grad would be a copy anyway)
        (spread_grad,) = y.grad_fn.grad_formula(pl.tensor(g)._storage)
        assert spread_grad.flags.c_contiguous and 0 not in spread_grad.strides
