"""Edge cases of the binary family: pow, atan2, maximum, minimum, where and the comparisons.

The op database (pylucid/opinfo/binary.py) covers random values, broadcasting, the float64
reference and gradchecks; this file covers what random samples miss: IEEE special values,
ties, nan, integer and mixed dtypes, Python numbers on either side, operators, errors, empty,
0-d and non-contiguous inputs. Every test runs on both backends (the ``device`` fixture).

Tolerances: results that are exact in binary floating point (powers of two, ties, selected
values, comparisons) are compared exactly; others within 2 ulp of the float64 value rounded
to the tested dtype (``rtol = 2 * 2**-23`` for float32, ``2 * 2**-52`` for float64), which
covers the 1 ulp of libm / MLX plus the final rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pylucid as pl

# No op may leak a NumPy RuntimeWarning (0 ** -1, log(0), inf * 0 ...) or any other warning.
pytestmark = pytest.mark.filterwarnings("error")

FLOATS = [pytest.param(pl.float32, id="float32"), pytest.param(pl.float64, id="float64")]
RTOL = {"float32": 2 * 2.0**-23, "float64": 2 * 2.0**-52}
INF, NAN = math.inf, math.nan


def _grads(f, *arrays, dtype=pl.float64, device="cpu", upstream=None):
    """f(*tensors), then the gradients of sum(upstream * f) for every input, as NumPy."""
    xs = [pl.tensor(a, dtype=dtype, device=device, requires_grad=True) for a in arrays]
    out = f(*xs)
    seed = None if upstream is None else pl.tensor(upstream, dtype=dtype, device=device)
    out.backward(seed if seed is not None else pl.ones_like(out))
    return out.numpy(), [x.grad.numpy() for x in xs]


def _bools(values, device):
    """A bool tensor built by a comparison (so it works whatever the factories support)."""
    return pl.tensor(np.asarray(values, dtype=np.float32), device=device) > 0.5


def _assert_ieee_close(actual: np.ndarray, expected: np.ndarray, rtol: float) -> None:
    """Equal nan/inf positions and zero signs; finite values within ``rtol``."""
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    infinite, finite = np.isinf(expected), np.isfinite(expected)
    np.testing.assert_array_equal(actual[infinite], expected[infinite])
    zero = expected == 0
    np.testing.assert_array_equal(np.signbit(actual[zero]), np.signbit(expected[zero]))
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=rtol, atol=0)


# -- pow ---------------------------------------------------------------------------------------
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, INF, -INF, NAN])


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_special_values_follow_c99(device, dtype):
    a, b = SPECIAL[:, None], SPECIAL[None, :]
    out = pl.pow(pl.tensor(a, dtype=dtype, device=device), pl.tensor(b, dtype=dtype, device=device))
    with np.errstate(all="ignore"):
        expected = np.power(a, b).astype(dtype.numpy)
    assert out.shape == (11, 11) and out.dtype is dtype
    _assert_ieee_close(out.numpy(), expected, RTOL[dtype.name])


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_gradients_at_the_edges_match_pytorch(device, dtype):
    # PyTorch's pow_backward_self / pow_backward_exponent, by hand:
    #   da = b a^(b-1), 0 where b == 0;  db = a^b ln a, 0 where a == 0 and b >= 0.
    a = [0.0, 0.0, 0.0, 0.0, -2.0, 2.0, 1.0, 0.0, 4.0]
    b = [0.0, 2.0, 0.5, -1.0, 2.0, 0.0, 3.0, INF, 0.5]
    expected_da = [0.0, 0.0, INF, -INF, -4.0, 0.0, 3.0, NAN, 0.25]
    expected_db = [0.0, 0.0, 0.0, -INF, NAN, math.log(2.0), 0.0, 0.0, 2 * math.log(4.0)]
    out, (da, db) = _grads(pl.pow, a, b, dtype=dtype, device=device)
    np.testing.assert_array_equal(out, np.array([1, 0, 0, INF, 4, 1, 1, 0, 2], dtype.numpy))
    rtol = RTOL[dtype.name]
    np.testing.assert_allclose(da, np.array(expected_da, dtype.numpy), rtol=rtol, equal_nan=True)
    np.testing.assert_allclose(db, np.array(expected_db, dtype.numpy), rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("dtype", [pl.int32, pl.int64], ids=["int32", "int64"])
def test_integer_pow_keeps_the_dtype_and_pytorchs_negative_exponents(device, dtype):
    a = [2, 1, -1, -1, 0, 3, -3, 5, 0, 7]
    b = [-1, -5, -3, -2, -1, 4, 3, 0, 0, 1]
    out = pl.pow(pl.tensor(a, dtype=dtype, device=device), pl.tensor(b, dtype=dtype, device=device))
    assert out.dtype is dtype
    np.testing.assert_array_equal(out.numpy(), [0, 1, -1, 1, 0, 81, -27, 1, 1, 7])


def test_pow_routes_numbers_and_promotes(device):
    x = pl.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    assert pl.pow(x, 2.0).grad_fn.name == "PowScalarBackward"
    assert (x**2).grad_fn.name == "PowScalarBackward"
    y = pl.pow(2.0, x)
    assert y.grad_fn.name == "PowBackward" and y.dtype is pl.float32
    z = 2.0**x
    np.testing.assert_array_equal(z.numpy(), [2.0, 4.0, 8.0])
    z.backward(pl.ones_like(z))
    np.testing.assert_allclose(
        x.grad.numpy(), np.array([2, 4, 8]) * math.log(2), rtol=RTOL["float32"]
    )
    ints = pl.tensor([0, 1, 2], device=device)
    assert (3**ints).dtype is pl.int64 and (3**ints).tolist() == [1, 3, 9]
    assert (2.0**ints).dtype is pl.float32 and (2.0**ints).tolist() == [1.0, 2.0, 4.0]
    wide = pl.tensor([2.0], dtype=pl.float64, device=device)
    assert x.pow(wide).dtype is pl.float64
    assert pl.pow(ints, pl.tensor([0.5], device=device)).dtype is pl.float32
    with pytest.raises(TypeError, match="pow: at least one operand must be a Tensor"):
        pl.pow(2.0, 3.0)
    with pytest.raises(TypeError, match="pow: expected a Tensor, a NumPy array or a Python num"):
        pl.pow("2", x)
    with pytest.raises(TypeError, match="unsupported operand"):
        [1.0] ** x


def test_pow_refuses_bool_tensors(device):
    t = _bools([1, 0], device)
    with pytest.raises(TypeError, match="pow: a bool tensor cannot be raised to a bool power"):
        pl.pow(t, t)


# -- atan2 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_atan2_quadrants_signed_zeros_and_infinities(device, dtype):
    a = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 1.0, -1.0, INF, -INF, INF, NAN, 1.0, 3.0])
    b = np.array([0.0, 0.0, -0.0, -0.0, 1.0, 1.0, -1.0, -1.0, INF, 1.0, -INF, 1.0, NAN, -4.0])
    out = pl.atan2(
        pl.tensor(a, dtype=dtype, device=device), pl.tensor(b, dtype=dtype, device=device)
    )
    _assert_ieee_close(out.numpy(), np.arctan2(a, b).astype(dtype.numpy), RTOL[dtype.name])


def test_atan2_gradient_and_integer_input(device):
    # d/da atan2(a, b) = b / (a^2 + b^2), d/db = -a / (a^2 + b^2): at (1, 1) 1/2 and -1/2,
    # at (3, -4) -4/25 and -3/25; at the origin 0/0 = nan, as in PyTorch.
    _, (da, db) = _grads(pl.atan2, [1.0, 3.0, 0.0], [1.0, -4.0, 0.0], device=device)
    np.testing.assert_allclose(da, [0.5, -0.16, NAN], rtol=RTOL["float64"], equal_nan=True)
    np.testing.assert_allclose(db, [-0.5, -0.12, NAN], rtol=RTOL["float64"], equal_nan=True)
    out = pl.atan2(pl.tensor([1, -1], device=device), pl.tensor([0, 0], device=device))
    assert out.dtype is pl.float32
    np.testing.assert_allclose(out.numpy(), [math.pi / 2, -math.pi / 2], rtol=RTOL["float32"])


def test_atan2_float32_gradient_does_not_overflow_on_numba():
    # a^2 + b^2 = 2e40 overflows float32; the numba kernel computes it in float64.
    _, (da, db) = _grads(pl.atan2, [1e20], [1e20], dtype=pl.float32)
    np.testing.assert_allclose(da, [5e-21], rtol=RTOL["float32"])
    np.testing.assert_allclose(db, [-5e-21], rtol=RTOL["float32"])


# -- maximum, minimum --------------------------------------------------------------------------
# a, b, max, d max/da, d max/db, min, d min/da, d min/db: ties split g, nan gives g to both.
MAX_MIN_CASES = (
    [1.0, 2.0, 3.0, NAN, 1.0, INF],
    [1.0, 1.0, 4.0, 0.0, NAN, INF],
    [1.0, 2.0, 4.0, NAN, NAN, INF],
    [0.5, 1.0, 0.0, 1.0, 1.0, 0.5],
    [0.5, 0.0, 1.0, 1.0, 1.0, 0.5],
    [1.0, 1.0, 3.0, NAN, NAN, INF],
    [0.5, 0.0, 1.0, 1.0, 1.0, 0.5],
    [0.5, 1.0, 0.0, 1.0, 1.0, 0.5],
)


@pytest.mark.parametrize("dtype", FLOATS)
def test_maximum_minimum_ties_split_and_nan_propagates(device, dtype):
    a, b, mx, dmx_a, dmx_b, mn, dmn_a, dmn_b = MAX_MIN_CASES
    out, (da, db) = _grads(pl.maximum, a, b, dtype=dtype, device=device)
    np.testing.assert_array_equal(out, mx)
    np.testing.assert_array_equal(da, dmx_a)
    np.testing.assert_array_equal(db, dmx_b)
    out, (da, db) = _grads(pl.minimum, a, b, dtype=dtype, device=device)
    np.testing.assert_array_equal(out, mn)
    np.testing.assert_array_equal(da, dmn_a)
    np.testing.assert_array_equal(db, dmn_b)


def test_maximum_tie_with_broadcast_scalar_sums_the_halves(device):
    # b (0-d) ties with two of a's elements and is below one: 1/2 + 1/2 + 0 = 1, times g.
    _, (da, db) = _grads(pl.maximum, [2.0, 2.0, 3.0], 2.0, device=device, upstream=[1, 3, 5])
    np.testing.assert_array_equal(da, [0.5, 1.5, 5.0])
    np.testing.assert_array_equal(db, 2.0)


def test_maximum_minimum_dtypes(device):
    i32 = pl.tensor([1, 5], dtype=pl.int32, device=device)
    assert pl.maximum(i32, 2).dtype is pl.int32 and pl.maximum(i32, 2).tolist() == [2, 5]
    assert pl.minimum(i32, 2.5).dtype is pl.float32 and pl.minimum(i32, 2.5).tolist() == [1, 2.5]
    x32 = pl.tensor([1.0, 4.0], device=device, requires_grad=True)
    x64 = pl.tensor([2.0, 3.0], dtype=pl.float64, device=device)
    y = pl.maximum(x32, x64)
    assert y.dtype is pl.float64
    y.backward(pl.ones_like(y))
    assert x32.grad.dtype is pl.float32 and x32.grad.tolist() == [0.0, 1.0]
    assert x32.maximum(x64).tolist() == x64.minimum(9.0).maximum(x32).tolist() == [2.0, 4.0]
    flags = pl.tensor([True, False], device=device)
    assert pl.maximum(flags, False).tolist() == [True, False]
    assert pl.minimum(flags, pl.tensor(True, device=device)).dtype is pl.bool


# -- where -------------------------------------------------------------------------------------
def test_where_broadcasts_and_masks_the_gradient(device):
    cond = _bools([[1], [0], [1]], device)  # (3, 1)
    a = pl.tensor([1.0, 2.0, 3.0, 4.0], device=device, requires_grad=True)  # (4,)
    b = pl.tensor(-1.0, device=device, requires_grad=True)  # ()
    out = pl.where(cond, a, b)
    assert out.shape == (3, 4) and out.grad_fn.name == "WhereBackward"
    np.testing.assert_array_equal(out.numpy(), [[1, 2, 3, 4], [-1, -1, -1, -1], [1, 2, 3, 4]])
    # Upstream inf/nan on the rows not taken must give exactly 0, not inf * 0 = nan.
    g = np.array([[1, 2, 3, 4], [INF, NAN, -INF, 5], [10, 20, 30, 40]], dtype=np.float32)
    out.backward(pl.tensor(g, device=device))
    np.testing.assert_array_equal(a.grad.numpy(), [11, 22, 33, 44])
    assert math.isnan(b.grad.item())  # the taken row sums inf + nan - inf + 5
    assert out.grad_fn.saved.released


def test_where_keeps_the_condition_bool_and_gives_it_no_gradient(device):
    x = pl.tensor([-1.0, 2.0], dtype=pl.float64, device=device, requires_grad=True)
    out = pl.where(x > 0, x, 0.0)
    node = out.grad_fn
    assert node.backend.dtype(node.saved.condition) is pl.bool
    assert node.next_edges[0] is None
    out.backward(pl.ones_like(out))
    assert x.grad.tolist() == [0.0, 1.0]


def test_where_with_numbers_takes_pytorchs_dtypes(device):
    cond = _bools([1, 0], device)
    x64 = pl.tensor([5.0, 6.0], dtype=pl.float64, device=device)
    ints = pl.tensor([5, 6], device=device)
    cases = [
        (pl.where(cond, 1.0, 0.0), pl.float32, [1.0, 0.0]),
        (pl.where(cond, 1, 0), pl.int64, [1, 0]),
        (pl.where(cond, 2, x64), pl.float64, [2.0, 6.0]),
        (pl.where(cond, ints, 0.5), pl.float32, [5.0, 0.5]),
        (pl.where(cond, ints, x64), pl.float64, [5.0, 6.0]),
        (ints.where(cond, -1), pl.int64, [5, -1]),
    ]
    for out, dtype, values in cases:
        assert out.dtype is dtype and out.tolist() == values
    out = pl.where(cond, False, True)
    assert out.dtype is pl.bool and out.tolist() == [False, True]


def test_where_errors_name_the_op(device):
    x = pl.tensor([1.0, 2.0], device=device)
    with pytest.raises(TypeError, match="where: condition must be a bool tensor, got float32"):
        pl.where(x, x, x)
    with pytest.raises(TypeError, match="where: expected a Tensor for condition, got bool"):
        pl.where(True, x, x)
    with pytest.raises(TypeError, match="where: expected a Tensor, a NumPy array or a Python"):
        pl.where(x > 1, x, [1.0])
    with pytest.raises(ValueError, match=r"where: shapes \(2,\) and \(2,\) and \(3,\) cannot"):
        pl.where(x > 1, x, pl.zeros(3, device=device))
    if "mlx" in pl.backends.available():
        other = "gpu" if device == "cpu" else "cpu"
        with pytest.raises(RuntimeError, match="where: expected all tensors on one device"):
            pl.where(x > 1, x, pl.zeros(2, device=other))


# -- comparisons -------------------------------------------------------------------------------
#: name, NumPy reference, the Python operator.
COMPARISONS = [
    ("eq", np.equal, lambda a, b: a == b),
    ("ne", np.not_equal, lambda a, b: a != b),
    ("lt", np.less, lambda a, b: a < b),
    ("le", np.less_equal, lambda a, b: a <= b),
    ("gt", np.greater, lambda a, b: a > b),
    ("ge", np.greater_equal, lambda a, b: a >= b),
]
COMPARISON_IDS = [name for name, _, _ in COMPARISONS]
CMP_A = np.array([1.0, 2.0, 3.0, NAN, NAN, INF, -INF, -0.0, 0.0, 2.0])
CMP_B = np.array([1.0, 3.0, 2.0, 1.0, NAN, INF, INF, 0.0, 5.0, -INF])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("name", "reference", "operator"), COMPARISONS, ids=COMPARISON_IDS)
def test_comparisons_ties_nan_infinities(device, dtype, name, reference, operator):
    a = pl.tensor(CMP_A, dtype=dtype, device=device, requires_grad=True)
    b = pl.tensor(CMP_B, dtype=dtype, device=device)
    expected = reference(CMP_A, CMP_B)
    for out in (getattr(pl, name)(a, b), getattr(a, name)(b), operator(a, b)):
        assert out.dtype is pl.bool and not out.requires_grad and out.grad_fn is None
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize(("name", "reference", "operator"), COMPARISONS, ids=COMPARISON_IDS)
def test_comparisons_with_numbers_on_either_side(device, name, reference, operator):
    x = pl.tensor([1.0, 2.0, 3.0], device=device)
    np.testing.assert_array_equal(operator(x, 2).numpy(), reference([1.0, 2.0, 3.0], 2))
    np.testing.assert_array_equal(operator(2, x).numpy(), reference(2, [1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(
        operator(np.float64(2.0), x).numpy(), reference(2, [1.0, 2.0, 3.0])
    )


def test_comparisons_promote_like_pytorch(device):
    ints = pl.tensor([1, 2, 3], device=device)
    assert (ints < 1.5).tolist() == [True, False, False]  # compared in float32
    assert (ints == pl.tensor([1.0, 2.5, 3.0], device=device)).tolist() == [True, False, True]
    # A Python int does not turn int64 into float: 2**53 + 1 is not rounded to 2**53.
    big = pl.tensor([2**53], device=device)
    assert (big == 2**53 + 1).tolist() == [False]
    flags = pl.tensor([True, False], device=device)
    assert (flags == True).tolist() == [True, False]  # noqa: E712  (the operator is the test)
    assert (flags < pl.tensor([1, 1], device=device)).tolist() == [False, True]
    with pytest.raises(ValueError, match=r"lt: shapes \(3,\) and \(2,\) cannot be broadcast"):
        _ = ints < pl.tensor([1, 2], device=device)


def test_tensor_stays_hashable_and_compares_by_identity_with_other_objects(device):
    x = pl.tensor([1.0, 2.0], device=device)
    assert pl.Tensor.__hash__ is object.__hash__
    assert hash(x) == object.__hash__(x)
    table = {x: 1}
    assert table[x] == 1 and x in {x}
    assert (x == None) is False  # noqa: E711  (NotImplemented, then identity)
    assert (x != "a") is True
    with pytest.raises(TypeError, match="'<' not supported"):
        _ = x < "a"


# -- every op: 0-d, empty and non-contiguous inputs --------------------------------------------
BINARY_CALLS = {
    "pow": lambda a, b: pl.pow(pl.maximum(a, 0.25), b),
    "atan2": pl.atan2,
    "maximum": pl.maximum,
    "minimum": pl.minimum,
    "where": lambda a, b: pl.where(a > b, a, b * 2.0),
    "lt": pl.lt,
    "eq": pl.eq,
}


@pytest.mark.parametrize("call", BINARY_CALLS.values(), ids=BINARY_CALLS.keys())
def test_zero_d_and_empty_shapes(device, call):
    scalar = call(pl.tensor(0.5, device=device), pl.tensor(2.0, device=device))
    assert scalar.shape == ()
    empty = call(pl.zeros(0, 3, device=device), pl.ones(3, device=device))
    assert empty.shape == (0, 3) and empty.numel() == 0


@pytest.mark.parametrize("call", BINARY_CALLS.values(), ids=BINARY_CALLS.keys())
def test_non_contiguous_views_give_the_contiguous_result(call):
    rng = np.random.default_rng(0)
    base = rng.uniform(-3, 3, size=(6, 8))
    a_view, b_view = base.T[::2, ::2], base[1::2, ::-1].T[1::2]  # (4, 3), not contiguous
    assert not a_view.flags.c_contiguous and not b_view.flags.c_contiguous
    strided = call(pl.from_numpy(a_view), pl.from_numpy(b_view))
    packed = call(pl.from_numpy(a_view.copy()), pl.from_numpy(b_view.copy()))
    np.testing.assert_array_equal(strided.numpy(), packed.numpy())
    on_mlx = "mlx" in pl.backends.available()
    if on_mlx and strided.dtype.is_floating_point:
        # Same math on MLX: within 2 float64 ulp (libm vs MLX for pow / atan2).
        # pl.tensor copies: MLX cannot take the negative strides of b_view (reported).
        other = call(pl.tensor(a_view, device="gpu"), pl.tensor(b_view, device="gpu"))
        np.testing.assert_allclose(other.numpy(), packed.numpy(), rtol=RTOL["float64"])


# -- create_graph: the differentiable formulas (grad_graph) -------------------------------------
_GRID_A, _GRID_B = (v.ravel() for v in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
_TIES = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, NAN, INF, -INF])
_TIES_A, _TIES_B = (v.ravel() for v in np.meshgrid(_TIES, _TIES, indexing="ij"))
_RANDOM = np.random.default_rng(7).uniform(0.25, 3.0, size=(2, 3, 4))
GRAPH_CASES = {
    "pow-special": (pl.pow, _GRID_A, _GRID_B),
    "pow-random": (pl.pow, _RANDOM[0], _RANDOM[1] - 1.5),
    "pow-broadcast": (pl.pow, _RANDOM[0], _RANDOM[1, 0] - 1.5),
    "atan2-special": (pl.atan2, _GRID_A, _GRID_B),
    "atan2-random": (pl.atan2, _RANDOM[0] - 1.5, _RANDOM[1] - 1.5),
    "maximum-ties": (pl.maximum, _TIES_A, _TIES_B),
    "maximum-broadcast": (pl.maximum, np.array([[1.0], [2.0], [NAN]]), np.array([1.0, 2.0, 3.0])),
    "minimum-ties": (pl.minimum, _TIES_A, _TIES_B),
    "minimum-broadcast": (pl.minimum, np.array([[1.0], [2.0], [NAN]]), np.array([1.0, 2.0, 3.0])),
    "where": (lambda a, b: pl.where(a > b, a, b), _TIES_A, _TIES_B),
    "where-broadcast": (lambda a, b: pl.where(a > 1.5, a, b), _RANDOM[0], _RANDOM[1, 0]),
}


def _first_derivatives(f, arrays, wanted, device, create_graph):
    """The gradients of sum(v * f) for the inputs flagged in ``wanted`` (v fixed, random)."""
    xs = [
        pl.tensor(a, dtype=pl.float64, device=device, requires_grad=w)
        for a, w in zip(arrays, wanted)
    ]
    out = f(*xs)
    v = np.random.default_rng(3).uniform(0.5, 1.5, size=out.shape)
    seed = pl.tensor(v * np.where(np.arange(v.size).reshape(v.shape) % 2, -1, 1), device=device)
    grads = pl.graph.grad(out, [x for x in xs if x.requires_grad], seed, create_graph=create_graph)
    return [g.numpy() for g in grads]


@pytest.mark.parametrize("wanted", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize(("f", "a", "b"), GRAPH_CASES.values(), ids=GRAPH_CASES.keys())
def test_create_graph_first_derivatives_match_the_fused_kernels(device, f, a, b, wanted):
    """grad_graph mirrors grad_formula: ties (g/2), nan, pow's masks at a == 0 / b == 0."""
    fused = _first_derivatives(f, (a, b), wanted, device, create_graph=False)
    graph = _first_derivatives(f, (a, b), wanted, device, create_graph=True)
    for got, expected in zip(graph, fused):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
        zero = expected == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(expected[zero]))


def test_masked_branches_leak_no_nan_into_second_derivatives(device):
    """pow at 0 ** 0 and 0 ** 2: the masked gradients are constant 0, so are their slopes
    (only d(grad_a)/da = b (b - 1) a^(b - 2) = 2 at 0 ** 2 is not masked)."""
    a = pl.tensor([0.0, 0.0], dtype=pl.float64, device=device, requires_grad=True)
    b = pl.tensor([0.0, 2.0], dtype=pl.float64, device=device, requires_grad=True)
    grad_a, grad_b = pl.graph.grad(pl.pow(a, b).sum(), [a, b], create_graph=True)
    assert grad_a.tolist() == [0.0, 0.0] and grad_b.tolist() == [0.0, 0.0]
    second = pl.graph.grad((grad_a + grad_b).sum(), [a, b])
    assert [s.tolist() for s in second] == [[0.0, 2.0], [0.0, 0.0]]


def test_every_differentiable_op_of_the_family_has_a_graph_formula():
    ops = [pl.ops.get_op(name) for name in pl.ops.list_ops()]
    family = [op for op in ops if op.__module__ == "pylucid.ops.binary"]
    names = {"pow", "atan2", "logaddexp", "remainder", "floor_divide", "hypot"}
    names |= {"maximum", "minimum", "where"}
    assert {op.schema_v1.name for op in family} == names
    for op in family:
        if not op.schema_v1.differentiable:  # floor_divide: a step, no gradient (PyTorch's)
            continue
        assert op.grad_graph is not pl.ops.Op.grad_graph, op.__name__


def test_an_op_without_a_graph_formula_refuses_create_graph(device, monkeypatch):
    monkeypatch.delattr(pl.ops.MaximumBackward, "grad_graph")
    a = pl.tensor([1.0, 2.0], dtype=pl.float64, device=device, requires_grad=True)
    out = pl.maximum(a, 1.5).sum()
    with pytest.raises(NotImplementedError, match="create_graph=True cannot differentiate"):
        pl.graph.grad(out, [a], create_graph=True)
    assert pl.graph.grad(out, [a])[0].tolist() == [0.0, 1.0]  # the fused path still works
