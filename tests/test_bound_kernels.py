"""Kernels bound per dispatch plan (``DispatchPlan.run``, ``Op.bind``, ``NumbaCore._bind``):
the bound runner - of an elementwise op, a sum or mean over axes, softmax or log_softmax -
must give exactly what the general path (``dispatch``) gives, and hand every call it cannot
take back to it; and the lazily made hook lists of leaf tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pylucid as pl
from pylucid.kernels import log2_avx512
from pylucid.ops import base as op_base
from pylucid.ops.arithmetic import AddBackward, DivBackward, MulBackward, SubBackward
from pylucid.ops.base import dispatch_plan
from pylucid.ops.reduce import MeanBackward, SumBackward
from pylucid.ops.softmax_family import LogSoftmaxBackward, SoftmaxBackward
from pylucid.ops.unary import Log2Backward, NegBackward

BINARY = [AddBackward, SubBackward, MulBackward, DivBackward]
BINARY_NAMES = ("mul", "div", "sub")


def _storages(plan, inputs):
    """The storages as ``Op.apply`` passes them (cast where the plan says)."""
    return [
        t._storage if cast is None else plan.backend.cast(t._storage, cast)
        for t, cast in zip(inputs, plan.casts)
    ]


def _general(cls, *inputs):
    plan = dispatch_plan(cls, inputs, {})
    storages = _storages(plan, inputs)
    return cls.dispatch(plan.backend, *storages, shape=plan.shape, dtype=plan.run_dtype)


@pytest.mark.parametrize("cls", BINARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shapes", [((1,), ()), ((7,), (7,)), ((3, 4), ()), ((3, 4), (3, 4)),
                                    ((), ()), ((2, 3, 2), (1,))])  # fmt: skip
def test_bound_binary_matches_general_path(cls, dtype, shapes):
    rng = np.random.default_rng(1)
    a, b = (pl.tensor((rng.standard_normal(s) * 4 + 0.5).astype(dtype)) for s in shapes)
    plan = dispatch_plan(cls, (a, b), {})
    assert plan.run is not None
    storages = _storages(plan, (a, b))
    bound = plan.run(*storages)
    expected = _general(cls, a, b)
    assert bound.dtype == expected.dtype and bound.shape == expected.shape
    assert bound.tobytes() == expected.tobytes()
    for _ in range(3):  # later calls go through the compiled entry point
        again = plan.run(*storages)
        assert again.tobytes() == expected.tobytes()
    result = cls.apply(a, b)
    assert result.numpy().tobytes() == expected.tobytes()


@pytest.mark.parametrize("cls", BINARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shapes", [((32, 128), (128,)), ((128,), (32, 128)), ((4, 3, 5), (5,)),
                                    ((4, 3, 5), (3, 5)), ((1, 3, 5), (4, 3, 5)),
                                    ((70000, 2), (1, 2))])  # fmt: skip
def test_bound_periodic_broadcast_matches_general_path(cls, dtype, shapes):
    """An operand of the output's trailing shape against one of its shape (a bias against
    a batch) takes the periodic loop, serial or (70000 x 2) parallel: the general path's
    bits, the periodic operand on either side."""
    rng = np.random.default_rng(3)
    a, b = (pl.tensor((rng.standard_normal(s) * 4 + 0.5).astype(dtype)) for s in shapes)
    plan = dispatch_plan(cls, (a, b), {})
    assert plan.run is not None
    expected = _general(cls, a, b)
    for _ in range(2):
        out = plan.run(*_storages(plan, (a, b)))
        assert out.shape == expected.shape and out.tobytes() == expected.tobytes()
    assert cls.apply(a, b).numpy().tobytes() == expected.tobytes()
    view = pl.tensor(np.zeros((shapes[0][0], 2 * shapes[0][-1]), dtype))[:, ::2]  # a view
    if view.shape == a.shape:
        assert plan.run(view._storage, b._storage) is None


@pytest.mark.parametrize("cls", [Log2Backward, NegBackward])
@pytest.mark.parametrize("shape", [(1,), (), (5,), (2, 3)])
def test_bound_unary_matches_general_path(cls, shape):
    x = pl.tensor(np.abs(np.random.default_rng(2).standard_normal(shape)).astype(np.float32))
    # (log2 of arrays takes the AVX-512 kernel where the CPU has it, through the general path)
    avx512_log2 = cls is Log2Backward and log2_avx512.AVAILABLE and math.prod(shape) != 1
    assert (dispatch_plan(cls, (x,), {}).run is None) == avx512_log2
    expected = _general(cls, x)
    for _ in range(3):
        out = cls.apply(x)._storage
        assert out.tobytes() == expected.tobytes() and out.shape == expected.shape


def test_storages_the_runner_cannot_take_go_the_general_path():
    base = np.arange(1.0, 13.0, dtype=np.float32).reshape(3, 4)
    full = pl.tensor(base.copy())
    plan = dispatch_plan(MulBackward, (full, full), {})
    transposed = pl.tensor(base.T.copy()).T  # Fortran-ordered, of the same plan
    assert plan.run(transposed._storage, full._storage) is None
    product = transposed * transposed
    np.testing.assert_array_equal(product.numpy(), base * base)
    assert product.numpy().flags.f_contiguous  # (the general path's transposed kernel)
    np.testing.assert_array_equal((transposed * full).numpy(), base * base)
    readonly = base.copy()
    readonly.flags.writeable = False
    assert plan.run(readonly, full._storage) is None
    np.testing.assert_array_equal((pl.from_numpy(readonly) * full).numpy(), base * base)
    strided = pl.tensor(np.arange(8.0, dtype=np.float32))[::2]
    assert (strided * strided).numpy().tolist() == [0.0, 4.0, 16.0, 36.0]


def test_no_runner_for_halves_broadcasts_or_empty_tensors():
    half = pl.tensor([1.0, 2.0]).to(pl.float16)
    assert dispatch_plan(MulBackward, (half, half), {}).run is None
    row, column = pl.tensor(np.ones((1, 3), np.float32)), pl.tensor(np.ones((2, 1), np.float32))
    assert dispatch_plan(AddBackward, (row, column), {}).run is None
    empty = pl.tensor(np.ones((0,), np.float32))
    assert dispatch_plan(AddBackward, (empty, empty), {}).run is None
    mixed = pl.tensor([1.0], dtype=pl.float64)  # (bound to the cast storages: float64)
    total = mixed + pl.tensor([0.1])
    assert total.dtype is pl.float64 and total.numpy()[0] == 1.0 + float(np.float32(0.1))


def test_reflected_operators_with_numbers():
    x = pl.tensor([2.0, 4.0])
    assert (3.0 - x).numpy().tolist() == [1.0, -1.0]
    assert (8 / x).numpy().tolist() == [4.0, 2.0]
    assert (np.float32(2) * x).numpy().tolist() == [4.0, 8.0]
    assert x.__add__("a") is NotImplemented and x.__rmul__(object()) is NotImplemented


def test_leaf_hook_registered_after_its_accumulator_exists():
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    (x * 2.0).sum().backward()  # makes the accumulator, before any hook
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().tolist()))
    after = []
    x.register_post_accumulate_grad_hook(lambda t: after.append(t.grad.numpy().tolist()))
    x.grad = None
    (x * 3.0).sum().backward()
    assert seen == [[3.0, 3.0]] and after == [[3.0, 3.0]]


def test_tensors_share_no_hook_list():
    a, b = pl.tensor([1.0], requires_grad=True), pl.tensor([1.0], requires_grad=True)
    a.register_hook(lambda g: g * 2)
    (a * 1.0 + b * 1.0).sum().backward()
    assert a.grad.numpy().tolist() == [2.0] and b.grad.numpy().tolist() == [1.0]


REDUCE_CASES = [
    ((32, 10), (1,)), ((32, 10), (0,)), ((4, 10), (0, 1)), ((7,), (0,)),
    ((2, 3, 4), (1, 2)), ((2, 3, 4), (0, 1)), ((1, 5), (1,)), ((5, 1), (0,)),
]  # fmt: skip


def _general_with(cls, x, **params):
    plan = dispatch_plan(cls, (x,), params)
    (storage,) = _storages(plan, (x,))
    return cls.dispatch(plan.backend, storage, shape=plan.shape, dtype=plan.run_dtype, **params)


@pytest.mark.parametrize("cls", [SumBackward, MeanBackward])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize(("shape", "axes"), REDUCE_CASES)
def test_bound_sum_and_mean_match_general_path(cls, dtype, keepdims, shape, axes):
    """A sum or mean over trailing or leading axes is bound (the compiled pairwise loops,
    then the division for a mean): NumPy's ``add.reduce`` bits, as the general path's."""
    x = pl.tensor((np.random.default_rng(4).standard_normal(shape) * 3).astype(dtype))
    params = {"axes": axes, "keepdims": keepdims}
    plan = dispatch_plan(cls, (x,), params)
    bound_dtype = plan.run_dtype.numpy in (np.float32, np.float64)
    assert (plan.run is not None) == bound_dtype  # (int64 sums in int64: NumPy's)
    expected = _general_with(cls, x, **params)
    for _ in range(3):
        out = cls.apply(x, **params)._storage
        assert out.shape == expected.shape and out.dtype == expected.dtype
        assert out.tobytes() == expected.tobytes()
    reference = np.add.reduce(x.numpy().astype(expected.dtype), axis=axes, keepdims=keepdims)
    if cls is MeanBackward:
        reference = reference / expected.dtype.type(math.prod(shape[i] for i in axes))
    assert np.asarray(reference).tobytes() == expected.tobytes()


def test_reductions_the_loops_do_not_take_are_not_bound():
    x = pl.tensor(np.ones((2, 3, 4), np.float32))
    assert dispatch_plan(SumBackward, (x,), {"axes": (1,), "keepdims": False}).run is None
    long_rows = pl.tensor(np.ones((2, 100), np.float32))  # (NumPy's SIMD loop sums these)
    assert dispatch_plan(SumBackward, (long_rows,), {"axes": (1,), "keepdims": False}).run is None
    half = pl.tensor(np.ones((2, 3), np.float32)).to(pl.float16)
    assert dispatch_plan(MeanBackward, (half,), {"axes": (1,), "keepdims": False}).run is None
    empty = pl.tensor(np.ones((0, 3), np.float32))
    assert dispatch_plan(SumBackward, (empty,), {"axes": (1,), "keepdims": False}).run is None


def test_bound_reduction_hands_views_to_the_general_path():
    base = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    view = pl.tensor(base)[:, ::2]  # (4, 3), not C-contiguous: the same plan as a copy's
    plan = dispatch_plan(SumBackward, (view,), {"axes": (1,), "keepdims": False})
    assert plan.run is not None and plan.run(view._storage) is None
    np.testing.assert_array_equal(view.sum(axis=1).numpy(), base[:, ::2].sum(axis=1))
    np.testing.assert_array_equal(view.mean(axis=1).numpy(), base[:, ::2].mean(axis=1))


@pytest.mark.parametrize("cls", [SoftmaxBackward, LogSoftmaxBackward])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axes", "bound"), [
    ((32, 10), (1,), True), ((7,), (0,), True), ((2, 3, 4), (2,), True), ((4, 5, 1), (1,), True),
    ((300, 300), (1,), True), ((32, 10), (0,), False), ((), (), False)])  # fmt: skip
def test_bound_softmax_family_matches_general_path(cls, dtype, shape, axes, bound):
    """softmax and log_softmax along the last axis (or one followed by size-1 axes) are
    bound - serial or, at (300, 300), the parallel loop -; along another axis the column
    kernel of the general path runs."""
    x = pl.tensor((np.random.default_rng(5).standard_normal(shape) * 4).astype(dtype))
    plan = dispatch_plan(cls, (x,), {"axes": axes})
    assert (plan.run is not None) == bound
    expected = _general_with(cls, x, axes=axes)
    for _ in range(3):
        out = cls.apply(x, axes=axes)._storage
        assert out.shape == expected.shape and out.tobytes() == expected.tobytes()
    if bound:
        transposed = pl.tensor(np.ascontiguousarray(x.numpy().T)).T if x.ndim == 2 else None
        if transposed is not None and transposed.shape == x.shape:
            assert plan.run(transposed._storage) is None


@pytest.mark.parametrize("primitive", ["softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("dtype", [pl.float32, pl.float64])
@pytest.mark.parametrize("shape", [(32, 10), (300, 300), (2, 3, 4)])
def test_softmax_family_backward_runner_matches_general_path(primitive, dtype, shape):
    """The backward's rows runner (C-contiguous operands) and the general path (the same
    values, Fortran-ordered: copied to rows first) give the same bits."""
    rng = np.random.default_rng(6)
    y = rng.standard_normal(shape).astype(dtype.numpy)
    g = rng.standard_normal(shape).astype(dtype.numpy)
    be = pl.tensor(y)._backend
    axes = (len(shape) - 1,)
    fast = getattr(be, primitive)(y, g, axes, dtype)
    general = getattr(be, primitive)(np.asfortranarray(y), np.asfortranarray(g), axes, dtype)
    assert fast.shape == general.shape and fast.tobytes() == np.ascontiguousarray(general).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", [((1,), ()), ((3, 4), (3, 4)), ((3, 4), (4,)), ((5,), (1,)),
                                    ((2, 3, 2), (3, 2)), ((40000,), (40000,))])  # fmt: skip
@pytest.mark.parametrize("op", ["mul", "div", "sub", "tanh", "sigmoid", "neg", "log2", "log10"])
def test_grad_formulas_through_bound_runners_match_the_primitive(op, dtype, shapes):
    """A grad formula's primitive through its bound runner (``Op.run_primitive``; the log
    family's with its ln b parameters) gives the bits of the backend's primitive, on every
    call, and so does a gradient of another layout (Fortran-ordered), which the runners
    decline."""
    rng = np.random.default_rng(7)
    logarithm = op.startswith("log")
    a, b = (pl.tensor(np.abs(v) if logarithm else v, requires_grad=True)
            for v in ((rng.standard_normal(s) * 2).astype(dtype) for s in shapes))  # fmt: skip
    y = getattr(pl, op)(a, b) if op in BINARY_NAMES else getattr(pl, op)(a)
    node, be, shape = y.grad_fn, y._backend, y.shape
    g = rng.standard_normal(shape).astype(dtype)
    saved, dt = (node.saved[name] for name in node.schema_v1.saved), node.dtype
    if op == "mul":
        a_saved, b_saved = saved
        expected = (be.mul(g, b_saved, shape, dt), be.mul(g, a_saved, shape, dt))
        primitive = "mul"
    elif op == "div":
        a_saved, b_saved = saved
        expected = (be.div(g, b_saved, shape, dt),
                    be.div_backward_b(a_saved, b_saved, g, shape, dt))  # fmt: skip
        primitive = "div"
    elif op in ("sub", "neg"):
        expected = (g, be.neg(g, shape, dt)) if op == "sub" else (be.neg(g, shape, dt),)
        primitive = "neg"
    elif logarithm:
        (x_saved,) = saved
        expected = (be.log_base_backward(x_saved, g, node.ln_base, node.ln_base_lo, shape, dt),)
        primitive = "log_base_backward"
    else:
        expected = (getattr(be, f"{op}_backward")(*saved, g, shape, dt),)
        primitive = f"{op}_backward"
    for _ in range(3):  # the first call binds, the others run the cached runner
        got = node.grad_formula(g)
        assert len(got) == len(expected)
        for r, e in zip(got, expected):
            if op == "sub" and e is g:  # (sub passes g on to a: the same storage)
                assert r is g
                continue
            assert r.shape == e.shape and r.dtype == e.dtype and r.tobytes() == e.tobytes()
    runners = [run for key, run in op_base._GRAD_RUNS.items()  # (this node's signatures)
               if key[:2] == (be, primitive) and key[3:5] == (shape, dt)]  # fmt: skip
    assert runners and (shapes[0] != shapes[1] or all(run is not None for run in runners))
    if len(y.shape) > 1:
        fortran = np.asfortranarray(g)
        for r, e in zip(node.grad_formula(fortran), expected):
            assert r.tobytes() == e.tobytes()
