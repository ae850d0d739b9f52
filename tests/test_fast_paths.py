"""Fast paths of the numba backend give bit for bit what the general paths give.

The direct runners of :func:`pylucid.backends.numba_backend.runners.direct` (backward
primitives, primitives with parameters, the arithmetic and binary families) against the
general paths of ``_nary`` / ``_fused``,
which they bypass: the general path is what the primitive computes when ``direct`` hands
every call back. The forward primitives of ``UNARY_KERNELS``, bound to their plans, against
their ``dispatch``. The vector dot product of ``matmul`` (np.vdot) against np.matmul under
np.errstate, and without a warning where np.matmul's flags would give one. Every comparison
is of the bytes, the dtype and the shape, on several shapes, dtypes and layouts, with
special values (nan, +-inf, -0, subnormals) among the elements.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pylucid as pl
from pylucid.backends.numba_backend import core, elementwise, runners
from pylucid.dtypes import as_dtype
from pylucid.kernels.loops import PARALLEL_THRESHOLD_HEAVY
from pylucid.ops.base import dispatch_plan
from pylucid.ops.unary import LN2, LN2_LO

BACKEND = pl.tensor([1.0])._backend

#: (primitive, number of array operands, parameters before ``shape``).
UNARY_BACKWARD = [
    (f"{name}_backward", 2, ())
    for name, (_, grad) in elementwise.UNARY_KERNELS.items()
    if grad is not None
]
WITH_PARAMETERS = [
    ("log_base_backward", 2, (LN2, LN2_LO)),
    ("log_base_backward", 2, (1.0, 0.0)),
    ("leaky_relu", 1, (0.01,)),
    ("leaky_relu_backward", 2, (0.2,)),
    ("elu", 1, (1.0,)),
    ("elu_backward", 2, (0.5,)),
    ("softplus", 1, (1.0, 20.0)),
    ("softplus_backward", 2, (2.0, 5.0)),
    ("gelu", 1, ("none",)),
    ("gelu", 1, ("tanh",)),
    ("gelu_backward", 2, ("none",)),
    ("gelu_backward", 2, ("tanh",)),
    ("clamp", 1, (-0.5, 0.75)),
    ("clamp", 1, (None, 0.75)),
    ("clamp_backward", 2, (-0.5, None)),
]
BINARY = [
    ("pow", 2, ()),
    ("pow_backward_a", 3, ()),
    ("pow_backward_b", 3, ()),
    ("atan2", 2, ()),
    ("atan2_backward_a", 3, ()),
    ("atan2_backward_b", 3, ()),
    ("logaddexp", 2, ()),
    ("logaddexp_backward_a", 3, ()),
    ("logaddexp_backward_b", 3, ()),
    ("remainder", 2, ()),
    ("remainder_backward_b", 3, ()),
    ("floor_divide", 2, ()),
    ("hypot", 2, ()),
    ("hypot_backward", 3, ()),
    ("maximum", 2, ()),
    ("minimum", 2, ()),
    ("maximum_backward", 3, ()),
    ("minimum_backward", 3, ()),
]
ARITHMETIC = [
    ("neg", 1, ()),
    ("add", 2, ()),
    ("sub", 2, ()),
    ("mul", 2, ()),
    ("div", 2, ()),
    ("div_backward_b", 3, ()),
    ("pow_scalar", 1, (3.0,)),
    ("pow_scalar", 1, (-0.5,)),
    ("pow_scalar_backward", 2, (2.5,)),
]
CASES = UNARY_BACKWARD + WITH_PARAMETERS + BINARY + ARITHMETIC
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-310, 1.0, -1.0, 3e38]


def _values(shape: tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    """Random values of ``shape`` with the special values first (as many as fit)."""
    rng = np.random.default_rng(seed)
    flat = (rng.standard_normal(int(np.prod(shape))) * 3).astype(dtype)
    specials = np.array(SPECIALS[: flat.size], dtype=dtype)
    flat[: specials.size] = specials[rng.permutation(specials.size)]
    return flat.reshape(shape)


class _Spy:
    """Stands in for ``runners.direct`` (where ``_nary`` and ``_fused`` call it): records
    whether each call took the fast path, or (``general=True``) hands every call back to
    the general path."""

    def __init__(self, direct, general: bool = False) -> None:  # noqa: ANN001
        self.direct, self.general, self.taken = direct, general, []

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        if self.general:
            return None
        out = self.direct(*args, **kwargs)
        self.taken.append(out is not None)
        return out


def _patch_direct(patch: pytest.MonkeyPatch, spy: _Spy) -> None:
    """Put ``spy`` where the primitives call ``direct``."""
    patch.setattr(core, "direct", spy)
    patch.setattr(elementwise, "direct", spy)


def _run(monkeypatch: pytest.MonkeyPatch, general: bool, name: str, arrays, params, shape, dtype):  # noqa: ANN001, ANN202, E501
    spy = _Spy(runners.direct, general)
    with monkeypatch.context() as patch:
        _patch_direct(patch, spy)
        out = getattr(BACKEND, name)(*arrays, *params, shape, dtype)
    return out, spy.taken


def _assert_same(fast: np.ndarray, general: np.ndarray) -> None:
    assert type(fast) is np.ndarray and fast.dtype == general.dtype
    assert fast.shape == general.shape
    assert np.array_equal(fast, general, equal_nan=True)
    assert fast.tobytes() == general.tobytes()  # (bits: the sign of 0, nan payloads)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}{c[2]}")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (), (7,), (3, 4), (2, 1, 3)], ids=str)
def test_direct_runner_matches_general_path(monkeypatch, case, dtype, shape):
    name, count, params = case
    arrays = [_values(shape, dtype, seed) for seed in range(count)]
    pl_dtype = as_dtype(dtype)
    expected, _ = _run(monkeypatch, True, name, arrays, params, shape, pl_dtype)
    for _ in range(3):  # the first call compiles or dispatches, later ones take the entry point
        out, taken = _run(monkeypatch, False, name, arrays, params, shape, pl_dtype)
        assert taken == [True]
        _assert_same(out, expected)


@pytest.mark.parametrize("name", ["tanh_backward", "log_base_backward", "maximum_backward"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_element_operands_go_as_scalars(monkeypatch, name, dtype):
    """A one-element operand among full ones, of any shape, is read as a scalar."""
    count, params = {"tanh_backward": (2, ()), "log_base_backward": (2, (LN2, LN2_LO)),
                     "maximum_backward": (3, ())}[name]  # fmt: skip
    shape = (3, 4)
    for one in [(1,), (), (1, 1)]:
        for position in range(count):
            arrays = [_values(shape, dtype, seed) for seed in range(count)]
            arrays[position] = np.asarray(_values(one, dtype, 7) + dtype(0.5))
            expected, _ = _run(monkeypatch, True, name, arrays, params, shape, as_dtype(dtype))
            for _ in range(2):
                out, taken = _run(monkeypatch, False, name, arrays, params, shape, as_dtype(dtype))
                assert taken == [True]
                _assert_same(out, expected)


def _layouts(shape: tuple[int, ...], dtype: np.dtype) -> dict[str, np.ndarray]:
    """Operands of ``shape`` that the direct runner must hand to the general path."""
    base = _values(shape, dtype, 3)
    readonly = base.copy()
    readonly.flags.writeable = False
    return {
        "fortran": np.asfortranarray(base),
        "strided": _values((shape[0] * 2, *shape[1:]), dtype, 4)[::2],
        "readonly": readonly,
        "other dtype": base.astype(np.float64 if dtype == np.float32 else np.float32),
        "broadcast": base[:1],
    }


@pytest.mark.parametrize("name", ["tanh_backward", "log_base_backward", "atan2_backward_a"])
@pytest.mark.parametrize("layout", ["fortran", "strided", "readonly", "other dtype", "broadcast"])
def test_other_layouts_take_the_general_path(monkeypatch, name, layout):
    count, params = {"tanh_backward": (2, ()), "log_base_backward": (2, (LN2, LN2_LO)),
                     "atan2_backward_a": (3, ())}[name]  # fmt: skip
    shape = (4, 3)
    arrays = [_values(shape, np.float32, seed) for seed in range(count)]
    arrays[0] = _layouts(shape, np.float32)[layout]
    dtype = as_dtype(np.float32)
    expected, _ = _run(monkeypatch, True, name, arrays, params, shape, dtype)
    out, taken = _run(monkeypatch, False, name, arrays, params, shape, dtype)
    assert taken == [False]
    _assert_same(out, expected)
    if layout != "broadcast":  # (the rest of the operands are as the runner takes them)
        out, taken = _run(monkeypatch, False, name, arrays[1:] + arrays[:1], params, shape, dtype)
        assert taken == [False]


@pytest.mark.parametrize("dtype", [pl.float16, pl.bfloat16])
def test_half_dtypes_take_the_general_path(monkeypatch, dtype):
    shape = (5,)
    x, g = (pl.tensor(_values(shape, np.float32, s)).to(dtype)._storage for s in (0, 1))
    for compute in (dtype, pl.float32):  # (a FORCE_FP32 op reads halves as float32)
        expected, _ = _run(monkeypatch, True, "tanh_backward", [x, g], (), shape, compute)
        out, taken = _run(monkeypatch, False, "tanh_backward", [x, g], (), shape, compute)
        assert taken == [False]
        _assert_same(out, expected)


def test_no_elements_and_parallel_sizes_take_the_general_path(monkeypatch):
    for shape in [(0,), (2, 0), (PARALLEL_THRESHOLD_HEAVY,)]:  # (tanh_grad is heavy)
        x, g = (_values(shape, np.float32, s) for s in (0, 1))
        expected, _ = _run(monkeypatch, True, "tanh_backward", [x, g], (), shape, pl.float32)
        out, taken = _run(monkeypatch, False, "tanh_backward", [x, g], (), shape, pl.float32)
        assert taken == [False]
        _assert_same(out, expected)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("name", ["pow", "remainder", "floor_divide", "maximum"])
def test_integer_binary_primitives(monkeypatch, dtype, name):
    rng = np.random.default_rng(5)
    shape = (3, 5)
    a = rng.integers(-9, 10, shape).astype(dtype)
    b = rng.integers(0, 4, shape).astype(dtype)  # (including 0: division by zero)
    expected, _ = _run(monkeypatch, True, name, [a, b], (), shape, as_dtype(dtype))
    for _ in range(2):
        out, taken = _run(monkeypatch, False, name, [a, b], (), shape, as_dtype(dtype))
        assert taken == [True]
        _assert_same(out, expected)


@pytest.mark.parametrize(
    "dtype, number",
    [(np.float32, 32), (np.float32, 0.1), (np.float64, 3), (np.float64, -2.5), (np.int64, 7)],
)
def test_direct_runner_takes_python_numbers(monkeypatch, dtype, number):
    """A Python number among the operands (a mean's count) goes to the loop as a scalar of
    the dtype, as the general path's _operand casts it: the same bits."""
    a = _values((3, 4), dtype, 0) if dtype is not np.int64 else np.arange(12).reshape(3, 4)
    for name in ("div", "mul", "add"):
        args = [a, number]
        expected, _ = _run(monkeypatch, True, name, args, (), (3, 4), as_dtype(dtype))
        out, taken = _run(monkeypatch, False, name, args, (), (3, 4), as_dtype(dtype))
        assert taken == [True]
        _assert_same(out, expected)


def test_direct_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(runners, "DIRECT_CACHE_SIZE", 3)
    monkeypatch.setattr(runners, "_DIRECT", {})
    for n in range(1, 9):
        x, g = (_values((n,), np.float32, s) for s in (0, 1))
        BACKEND.tanh_backward(x, g, (n,), pl.float32)
        assert len(runners._DIRECT) <= 3


@pytest.mark.parametrize("op", ["tanh", "exp", "sigmoid", "relu", "abs", "sqrt", "sin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (), (6,), (2, 3)], ids=str)
def test_bound_forward_of_unary_kernels_matches_general_path(op, dtype, shape):
    """The forward primitives of UNARY_KERNELS are bound to their dispatch plans."""
    x = pl.tensor(_values(shape, dtype, 0))
    cls = type(getattr(pl, op)(pl.tensor([1.0], requires_grad=True)).grad_fn)
    plan = dispatch_plan(cls, (x,), {})
    assert plan.run is not None
    expected = cls.dispatch(plan.backend, x._storage, shape=plan.shape, dtype=plan.run_dtype)
    for _ in range(3):
        _assert_same(plan.run(x._storage), expected)
        _assert_same(getattr(pl, op)(x)._storage, expected)


def test_bound_forward_of_an_integer_unary_kernel():
    x = pl.tensor(np.array([-3, 0, 7, -(2**62)], np.int64))
    assert dispatch_plan(type(pl.abs(pl.tensor([1.0], requires_grad=True)).grad_fn), (x,), {}).run
    assert pl.abs(x).numpy().tolist() == [3, 0, 7, 2**62]


def test_gradients_through_the_direct_runners_match_the_general_path(monkeypatch):
    """A backward through several direct runners gives the general path's gradients."""

    def gradients() -> list[bytes]:
        rng = np.random.default_rng(9)
        x = pl.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
        w = pl.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
        y = pl.tanh(x) * pl.sigmoid(w) + pl.log2(pl.abs(x) + 1.0) + pl.atan2(x, w)
        y = pl.maximum(pl.gelu(y), pl.elu(w, 0.5)).sum()
        y.backward()
        return [x.grad.numpy().tobytes(), w.grad.numpy().tobytes()]

    fast = gradients()
    _patch_direct(monkeypatch, _Spy(runners.direct, general=True))
    assert gradients() == fast


def _general_matmul(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The general path of ``NumbaLinalg.matmul`` (np.matmul under np.errstate)."""
    with np.errstate(all="ignore"):
        return np.asarray(np.matmul(a, b, dtype=dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 31, 32, 33, 64, 127, 500, 1000, 4097, 8192, 65539])
def test_vector_dot_matches_matmul(dtype, n):
    rng = np.random.default_rng(n)
    for trial in range(4):
        a, b = ((rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)).astype(dtype)
                for _ in range(2))  # fmt: skip
        if trial == 3:  # nan, inf and inf * 0 among the products
            a[: min(n, 4)] = [np.inf, 0.0, np.nan, -np.inf][: min(n, 4)]
            b[: min(n, 4)] = [0.0, np.inf, 1.0, -2.0][: min(n, 4)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (the fast path sets no np.errstate: none may warn)
            out = BACKEND.matmul(a, b, (), as_dtype(dtype))
        _assert_same(out, _general_matmul(a, b, dtype))


def test_vector_dot_overflow_is_silent():
    big = np.full(4, 3e38, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = BACKEND.matmul(big, big, (), pl.float32)
    assert out.shape == () and np.isposinf(out)
    _assert_same(out, _general_matmul(big, big, np.float32))


def test_vectors_of_other_layouts_and_dtypes_take_matmul():
    rng = np.random.default_rng(3)
    long = rng.standard_normal(4000).astype(np.float32)
    readonly = long[:2000].copy()
    readonly.flags.writeable = False
    cases = [
        (long[::2], long[1::2]),  # strided: BLAS sums them in strides
        (readonly, long[2000:4000]),
        (long[:2000].astype(np.float64), long[2000:4000].astype(np.float64)),
    ]
    for a, b in cases:
        dtype = a.dtype
        _assert_same(BACKEND.matmul(a, b, (), as_dtype(dtype)), _general_matmul(a, b, dtype))
    ints = rng.integers(-5, 5, 9)
    _assert_same(BACKEND.matmul(ints, ints, (), pl.int64), _general_matmul(ints, ints, np.int64))
    half = pl.tensor(long[:64]).to(pl.float16)
    expected = np.asarray(np.matmul(long[:64].astype(np.float16).astype(np.float32),
                                    long[:64].astype(np.float16).astype(np.float32)))  # fmt: skip
    assert (half @ half).numpy().tobytes() == expected.astype(np.float16).tobytes()


def test_vector_dot_through_the_op_and_its_gradient():
    rng = np.random.default_rng(4)
    a = pl.tensor(rng.standard_normal(100).astype(np.float32), requires_grad=True)
    b = pl.tensor(rng.standard_normal(100).astype(np.float32), requires_grad=True)
    y = a @ b
    assert y.shape == () and y.numpy().tobytes() == _general_matmul(
        a.numpy(), b.numpy(), np.float32
    ).tobytes()
    y.backward()
    np.testing.assert_array_equal(a.grad.numpy(), b.numpy())
    np.testing.assert_array_equal(b.grad.numpy(), a.numpy())
