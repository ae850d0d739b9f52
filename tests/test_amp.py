"""Mixed precision: half dtypes, autocast policies (driven by the registry), GradScaler."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pylucid as pl
from pylucid.dtypes import promote_types
from pylucid.opinfo import OPS
from pylucid.ops import AmpPolicy

HALVES = [pytest.param(pl.float16, id="float16"), pytest.param(pl.bfloat16, id="bfloat16")]
CASES = [
    pytest.param(info, shapes, id=f"{info.name}-{'x'.join(map(str, shapes))}")
    for info in OPS
    for shapes in info.shapes[:1]
    if "needs_mlx" not in info.tags
]

# PyTorch's promotion for the half types (the rest of the table is in test_tensor.py).
HALF_PROMOTION = [
    ("float16", "bfloat16", "float32"),
    ("float16", "float32", "float32"),
    ("bfloat16", "float64", "float64"),
    ("int64", "float16", "float16"),
    ("bool", "bfloat16", "bfloat16"),
    ("float16", "float16", "float16"),
]


@pytest.mark.parametrize(("a", "b", "expected"), HALF_PROMOTION)
def test_half_promotion_table(a: str, b: str, expected: str) -> None:
    da, db = pl.dtypes.as_dtype(a), pl.dtypes.as_dtype(b)
    assert promote_types(da, db).name == expected == promote_types(db, da).name


@pytest.mark.parametrize("dtype", HALVES)
def test_half_tensors_round_trip(device: str, dtype: pl.DType) -> None:
    values = [0.5, -2.0, 65504.0 if dtype is pl.float16 else 3.0e38, 6e-8]
    x = pl.tensor(values, dtype=dtype, device=device)
    assert x.dtype is dtype and x.numpy().dtype == dtype.numpy
    np.testing.assert_array_equal(x.numpy(), np.array(values).astype(dtype.numpy))
    assert x.float().dtype is pl.float32 and x.double().dtype is pl.float64
    assert pl.tensor(values, device=device).half().dtype is pl.float16
    assert pl.tensor(values, device=device).bfloat16().dtype is pl.bfloat16


def _expected_dtype(node: pl.graph.Node, lowered: pl.DType) -> pl.DType:
    """The dtype a node's output must have inside autocast(lowered), by its policy."""
    if isinstance(node, pl.ops.ToDtypeBackward):
        return node.target  # an explicit conversion is never changed
    labels = type(node).input_labels(len(node.input_dtypes))
    promoted = [d for n, d in zip(labels, node.input_dtypes) if n not in node.uncast_inputs]
    natural = promoted[0]  # (an uncast input - where's condition - keeps its dtype)
    for d in promoted[1:]:
        natural = promote_types(natural, d)
    policy = node.schema_v1.amp_policy
    if natural is pl.float64:
        return pl.float64
    if policy is AmpPolicy.FORCE_FP32:
        return pl.float32
    if policy is AmpPolicy.PROMOTE:
        return lowered
    return natural


@pytest.mark.parametrize("lowered", HALVES)
@pytest.mark.parametrize(("info", "shapes"), CASES)
def test_every_op_under_autocast_follows_its_policy(info, shapes, lowered, device, rng) -> None:
    arrays = info.sample(rng, shapes)
    inputs = [pl.tensor(a, dtype=pl.float32, device=device, requires_grad=True) for a in arrays]
    with pl.autocast(dtype=lowered):
        result = info.call(*inputs)
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    for out in outputs:
        if out.grad_fn is None:  # not differentiable: bool or integer results, or a step
            differentiable = pl.ops.get_schema(info.name).differentiable
            assert not (out.dtype.is_floating_point and differentiable)
            continue
        assert out.dtype is _expected_dtype(out.grad_fn, lowered), out.grad_fn.name
    differentiable = [o for o in outputs if o.requires_grad]
    if differentiable:
        pl.graph.backward(differentiable, [pl.ones_like(o) for o in differentiable])
        for x in inputs:
            assert x.grad is None or x.grad.dtype is pl.float32  # the leaf's dtype


def _half_ulp(values: np.ndarray, dtype: pl.DType) -> np.ndarray:
    """The spacing of ``dtype`` at |values| (subnormal spacing near zero)."""
    mantissa = 10 if dtype is pl.float16 else 7
    min_exponent = -14 if dtype is pl.float16 else -126
    exponent = np.floor(np.log2(np.maximum(np.abs(values), 2.0**min_exponent)))
    return 2.0 ** (exponent - mantissa)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize(("info", "shapes"), CASES)
def test_half_results_within_one_ulp_of_float32_rounded(info, shapes, dtype, device, rng):
    """An op on half inputs equals the float32 result rounded once, within 1 half ULP."""
    arrays = [a.astype(dtype.numpy) for a in info.sample(rng, shapes)]
    half = info.call(*[pl.tensor(a, dtype=dtype, device=device) for a in arrays])
    single = info.call(*[pl.tensor(a.astype(np.float32), device=device) for a in arrays])
    halves = list(half) if isinstance(half, (list, tuple)) else [half]
    singles = list(single) if isinstance(single, (list, tuple)) else [single]
    for h, s in zip(halves, singles):
        if not h.dtype.is_floating_point:
            np.testing.assert_array_equal(h.numpy(), s.numpy())
            continue
        assert h.dtype is dtype
        got = h.numpy().astype(np.float64)
        reference = s.numpy().astype(dtype.numpy).astype(np.float64)
        finite = np.isfinite(reference)
        np.testing.assert_array_equal(np.isfinite(got), finite)
        excess = np.abs(got - reference)[finite] / _half_ulp(reference[finite], dtype)
        assert excess.size == 0 or excess.max() <= 1.0


def test_autocast_nests_disables_and_decorates() -> None:
    a = pl.ones(2, 2)
    with pl.autocast(dtype=pl.bfloat16):
        assert (a @ a).dtype is pl.bfloat16
        with pl.autocast(dtype=pl.float16):
            assert (a @ a).dtype is pl.float16
            with pl.autocast(enabled=False):
                assert (a @ a).dtype is pl.float32
        assert (a @ a).dtype is pl.bfloat16
    assert (a @ a).dtype is pl.float32

    @pl.autocast(dtype=pl.float16)
    def lowered() -> pl.Tensor:
        return a @ a

    assert lowered().dtype is pl.float16


def test_autocast_is_thread_local() -> None:
    seen = []
    a = pl.ones(2, 2)
    with pl.autocast():
        thread = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        thread.start()
        thread.join()
    assert seen == [pl.float32]


def test_autocast_leaves_float64_alone() -> None:
    a = pl.ones(2, 2, dtype=pl.float64)
    with pl.autocast():
        assert (a @ a).dtype is pl.float64
        assert pl.log2(a).dtype is pl.float64


def test_autocast_rejects_a_non_half_dtype() -> None:
    with pytest.raises(ValueError, match="autocast: dtype must be float16 or bfloat16"):
        pl.autocast(dtype=pl.float32)


def test_force_fp32_outside_autocast_keeps_the_half_dtype(device: str) -> None:
    x = pl.tensor([3.0, 5.0, 7.0], dtype=pl.bfloat16, device=device, requires_grad=True)
    y = pl.log2(x)
    assert y.dtype is pl.bfloat16
    expected = np.log2(np.array([3.0, 5.0, 7.0])).astype(pl.bfloat16.numpy)
    np.testing.assert_array_equal(y.numpy(), expected)  # rounded once from float32
    y.sum().backward()
    assert x.grad.dtype is pl.bfloat16


def _model(params, x):
    w, b = params
    return ((x @ w + b) ** 2).mean()


def test_grad_scaler_skips_an_overflowing_step_and_keeps_the_parameters() -> None:
    w = pl.tensor([[1.0], [2.0]], requires_grad=True)
    b = pl.tensor([0.5], requires_grad=True)
    optimizer = pl.optim.SGD([w, b], lr=0.1)
    scaler = pl.amp.GradScaler(init_scale=2.0**16, growth_interval=2)
    x = pl.tensor([[1e4, 1e4]])
    before = (w.numpy().copy(), b.numpy().copy())
    with pl.autocast(dtype=pl.float16):
        loss = _model((w, b), x)  # ~9e8: its scaled float16 gradients overflow
    scaler.scale(loss).backward()
    assert not scaler.step(optimizer)
    scaler.update()
    np.testing.assert_array_equal(w.numpy(), before[0])
    np.testing.assert_array_equal(b.numpy(), before[1])
    assert scaler.get_scale() == 2.0**15


def test_grad_scaler_unscales_steps_and_grows() -> None:
    w = pl.tensor([[1.0], [2.0]], requires_grad=True)
    b = pl.tensor([0.5], requires_grad=True)
    optimizer = pl.optim.SGD([w, b], lr=0.1)
    scaler = pl.amp.GradScaler(init_scale=1024.0, growth_interval=2)
    x = pl.tensor([[0.5, -0.25]])
    for _ in range(2):
        optimizer.zero_grad()
        loss = _model((w, b), x)
        scaler.scale(loss).backward()
        expected_w_grad = w.grad.numpy() / scaler.get_scale()
        w_before = w.numpy().copy()
        assert scaler.step(optimizer)
        np.testing.assert_allclose(w.numpy(), w_before - 0.1 * expected_w_grad, rtol=1e-6)
        scaler.update()
    assert scaler.get_scale() == 2048.0  # grew after growth_interval finite steps


def test_grad_scaler_disabled_is_a_pass_through() -> None:
    w = pl.tensor([1.0], requires_grad=True)
    scaler = pl.amp.GradScaler(enabled=False)
    loss = (w * 3.0).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    optimizer = pl.optim.SGD([w], lr=0.5)
    assert scaler.step(optimizer)
    assert w.item() == pytest.approx(-0.5)
