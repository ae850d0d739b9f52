"""The ops composed from other ops (selection, rearrangement, float classification) and the
new factories, against PyTorch: values exactly (they move or pick elements, nothing is
rounded) and gradients exactly (each gradient element is g or 0), on both backends.

PyTorch is the oracle where it is installed; the tests skip, saying so, where it is not.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from tests.conftest import TORCH_REASON

torch = pytest.importorskip("torch", reason=TORCH_REASON)

X = np.arange(24.0).reshape(2, 3, 4) * 0.5 - 3.0


ROW_MASK = np.array([True, False, True, False])


def _like(module, v, array: np.ndarray):  # noqa: ANN001, ANN202  (pylucid or torch)
    """``array`` as a tensor of ``module`` on ``v``'s device."""
    return module.tensor(array, device=v.device) if module is pl else module.tensor(array)


CASES = [
    ("tril", lambda m, v: m.tril(v)),
    ("tril+1", lambda m, v: m.tril(v, 1)),
    ("triu-1", lambda m, v: m.triu(v, -1)),
    ("flip 0,2", lambda m, v: m.flip(v, (0, 2))),
    ("flip -1", lambda m, v: m.flip(v, (-1,))),
    ("roll 1 on 1", lambda m, v: m.roll(v, 1, 1)),
    ("roll (2, -1) on (2, 0)", lambda m, v: m.roll(v, (2, -1), (2, 0))),
    ("roll 7 flat", lambda m, v: m.roll(v, 7)),
    ("roll -13 on -1", lambda m, v: m.roll(v, -13, -1)),
    ("masked_fill", lambda m, v: v.masked_fill(_like(m, v, X > 1.0), -2.0)),
    ("masked_fill row mask", lambda m, v: v.masked_fill(_like(m, v, ROW_MASK), 9.0)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compositions_match_torch(device, rng, case):
    _, fn = case
    ours = pl.tensor(X, device=device, requires_grad=True)
    theirs = torch.tensor(X, requires_grad=True)
    out, expected = fn(pl, ours), fn(torch, theirs)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    g = rng.standard_normal(expected.shape)
    out.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


def test_compositions_are_differentiable_twice(device, rng):
    x = pl.tensor(rng.standard_normal((3, 3)), device=device, requires_grad=True)
    mask = pl.tensor(np.eye(3, dtype=bool), device=device)

    def fn(v):
        return (v.tril().flip(0).roll(1, 1).masked_fill(mask, 0.5) * v).sum(axis=0)

    assert pl.graph.gradcheck(fn, [x])
    assert pl.graph.gradgradcheck(fn, [x])


VALUES = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e-310, 3e38])


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
@pytest.mark.parametrize("dtype", [pl.float32, pl.float64, pl.int64, pl.bool])
def test_classifications_match_torch(device, name, dtype):
    values = VALUES if dtype.is_floating_point else np.array([0, 1, -7, 3])
    x = pl.tensor(values, dtype=dtype, device=device)
    with np.errstate(over="ignore"):
        t = torch.tensor(values.astype(dtype.numpy))
    out = getattr(pl, name)(x)
    assert out.dtype is pl.bool and out.grad_fn is None
    np.testing.assert_array_equal(out.numpy(), getattr(torch, name)(t).numpy())
    np.testing.assert_array_equal(getattr(x, name)().numpy(), out.numpy())


def test_composition_errors_name_the_problem(device):
    x = pl.tensor(X, device=device)
    with pytest.raises(TypeError, match="masked_fill: mask must be a bool tensor"):
        x.masked_fill(pl.tensor(np.ones(4), device=device), 0.0)
    with pytest.raises(ValueError, match=r"masked_fill: a mask of shape \(5, 2, 3, 4\)"):
        x.masked_fill(pl.tensor(np.ones((5, 2, 3, 4), bool), device=device), 0.0)
    with pytest.raises(ValueError, match="tril: needs a tensor of at least 2 dimensions"):
        pl.tril(pl.tensor([1.0, 2.0], device=device))
    with pytest.raises(ValueError, match=r"flip: dim 3 is out of range .* \(2, 3, 4\)"):
        pl.flip(x, 3)
    with pytest.raises(ValueError, match="flip: dims .* repeat"):
        pl.flip(x, (0, -3))
    with pytest.raises(ValueError, match="roll: 2 shifts for 1 dims"):
        pl.roll(x, (1, 2), 0)


def test_factories_match_torch(device):
    assert pl.eye(3, device=device).numpy().tolist() == torch.eye(3).tolist()
    np.testing.assert_array_equal(
        pl.eye(2, 4, dtype=pl.int64).numpy(), torch.eye(2, 4, dtype=torch.int64)
    )
    np.testing.assert_array_equal(
        pl.linspace(-1, 2, 7, device=device).numpy(), torch.linspace(-1, 2, 7).numpy()
    )
    np.testing.assert_array_equal(
        pl.linspace(0, 1, 11, dtype=pl.float64).numpy(),
        torch.linspace(0, 1, 11, dtype=torch.float64),
    )
    assert pl.linspace(3, 3, 0).shape == (0,)
    np.testing.assert_array_equal(pl.linspace(5, -1, 1).numpy(), torch.linspace(5, -1, 1).numpy())
    np.testing.assert_array_equal(pl.flip(pl.tensor(X), -1).numpy(), np.flip(X, -1))
    x = pl.tensor(X, device=device)
    full = pl.full_like(x, 2.5)
    assert full.shape == x.shape and full.dtype is x.dtype and full.device == x.device
    assert np.all(full.numpy() == 2.5)
    empty = pl.empty_like(x, dtype=pl.float64)
    assert empty.shape == x.shape and empty.dtype is pl.float64
    assert pl.empty(2, 3, device=device).shape == (2, 3)
    with pytest.raises(ValueError, match="eye: n must be a non-negative integer"):
        pl.eye(-1)
    with pytest.raises(ValueError, match="linspace: steps must be a non-negative integer"):
        pl.linspace(0, 1, 2.5)


@pytest.mark.parametrize("bounds", ["both", "min", "max"])
def test_clamp_with_tensor_bounds_matches_torch(device, rng, bounds):
    x = rng.uniform(-3, 3, (4, 5))
    x[0, 0], x[1, 1] = np.nan, 1.0  # nan, and a tie with a bound below
    low = rng.uniform(-1, 0, 5)
    low[1] = 1.0
    high = rng.uniform(0, 1, (4, 1))
    high[2, 0] = -2.0  # high < low on a row: every element there is high
    ours = [pl.tensor(v, device=device, requires_grad=True) for v in (x, low, high)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (x, low, high)]

    def call(module, values):
        lo = values[1] if bounds != "max" else None
        hi = values[2] if bounds != "min" else None
        return module.clamp(values[0], lo, hi)

    out, expected = call(pl, ours), call(torch, theirs)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    g = rng.standard_normal(expected.shape)
    out.backward(pl.tensor(g, device=device))
    expected.backward(torch.tensor(g))
    for a, e in zip(ours, theirs):
        if e.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), e.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_clamp_with_tensor_bounds_keeps_integers_and_mixes_numbers(device):
    x = pl.tensor(np.array([-5, 0, 7]), device=device)
    low = pl.tensor(np.array([-1, 1, -1]), device=device)
    out = pl.clamp(x, low, 3)
    assert out.dtype is pl.int64
    np.testing.assert_array_equal(out.numpy(), [-1, 1, 3])
    mixed = pl.clamp(
        pl.tensor([0.5, 2.0], device=device), min=1.0, max=pl.tensor(1.5, device=device)
    )
    np.testing.assert_array_equal(mixed.numpy(), [1.0, 1.5])
    with pytest.raises(ValueError, match="clamp: at least one of min and max must be given"):
        pl.clamp(x)
