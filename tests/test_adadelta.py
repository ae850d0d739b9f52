"""``optim.Adadelta`` against PyTorch: 40-step trajectories, state dicts both ways, errors,
and the fused update's in-place semantics.

The update is one fused pass per parameter (:func:`pylucid.ops.updates.adadelta_update_`)
evaluating PyTorch's single-tensor formulas in its order of operations, so float64
trajectories agree to 1e-12 and float32 ones to 2e-5 relative to the parameters' scale, the
tolerances of ``tests/test_optim.py`` (PyTorch's vectorised kernels contract some products
into fused multiply-adds; measured worst: 1e-16 and 6e-8).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

import pylucid as pl
from pylucid.ops.updates import adadelta_update_
from tests.conftest import TORCH_REASON

TOLERANCE = {"float64": 1e-12, "float32": 2e-5}
OPTIONS = [
    {},
    {"lr": 0.5, "rho": 0.7, "eps": 1e-4, "weight_decay": 0.1},
    {"lr": 2.0, "maximize": True},
    {"rho": 0.0},
]


@pytest.fixture
def torch() -> ModuleType:
    """The oracle, or a skip naming how to install it."""
    return pytest.importorskip("torch", reason=TORCH_REASON)


@pytest.mark.parametrize(
    "options", OPTIONS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "defaults"
)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trajectory_matches_torch(
    torch: ModuleType, device: str, dtype: str, options: dict, rng: np.random.Generator
) -> None:
    shapes = [(7, 5), (5,)]
    starts = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(40)]
    kind, tkind = getattr(pl, dtype), getattr(torch, dtype)
    theirs = [torch.tensor(s, dtype=tkind, requires_grad=True) for s in starts]
    ours = [pl.tensor(s, dtype=kind, device=device, requires_grad=True) for s in starts]
    t_optimizer = torch.optim.Adadelta(theirs, **options)
    optimizer = pl.optim.Adadelta(ours, **options)
    for step in grads:
        for t, p, g in zip(theirs, ours, step):
            t.grad = torch.tensor(g, dtype=tkind)
            p.grad = pl.tensor(g, dtype=kind, device=device)
        t_optimizer.step()
        optimizer.step()
        for t, p in zip(theirs, ours):
            expected = t.detach().double().numpy()
            scale = np.abs(expected).max()
            np.testing.assert_allclose(p.numpy().astype(np.float64), expected, rtol=0,
                                       atol=TOLERANCE[dtype] * scale)  # fmt: skip
    state = optimizer.state_dict()
    t_state = t_optimizer.state_dict()
    assert list(state["state"][0]) == list(t_state["state"][0]) == ["step", "square_avg",
                                                                     "acc_delta"]  # fmt: skip
    assert state["param_groups"][0].keys() == t_state["param_groups"][0].keys()
    assert state["state"][1]["step"] == 40


def test_resumes_from_torch_state(torch: ModuleType, rng: np.random.Generator) -> None:
    """PyTorch's optimizer state (a 0-d float32 step, its averages) loads and the next steps
    continue PyTorch's trajectory."""
    start, grads = rng.standard_normal(6), rng.standard_normal((6, 6))
    t = torch.tensor(start, requires_grad=True)
    t_optimizer = torch.optim.Adadelta([t], lr=0.3, weight_decay=0.01)
    for g in grads[:3]:
        t.grad = torch.tensor(g)
        t_optimizer.step()
    p = pl.tensor(t.detach().numpy().copy(), requires_grad=True)
    optimizer = pl.optim.Adadelta([p], lr=0.3, weight_decay=0.01)
    t_state = t_optimizer.state_dict()
    optimizer.load_state_dict({
        "state": {0: {key: value if key == "step" else pl.tensor(value.numpy())
                      for key, value in t_state["state"][0].items()}},
        "param_groups": t_state["param_groups"],
    })  # fmt: skip
    for g in grads[3:]:
        t.grad = torch.tensor(g)
        p.grad = pl.tensor(g)
        t_optimizer.step()
        optimizer.step()
    np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_fused_update_in_place() -> None:
    """One step changes the parameter and both averages in place (their versions move) and
    equals the formula written out."""
    p = pl.tensor([1.0, -2.0, 0.5], dtype=pl.float64)
    g = pl.tensor([0.3, 0.1, -4.0], dtype=pl.float64)
    square_avg = pl.tensor([0.2, 0.0, 1.0], dtype=pl.float64)
    acc_delta = pl.tensor([0.1, 0.3, 0.0], dtype=pl.float64)
    rho, eps, lr = 0.8, 1e-3, 0.5
    s = rho * square_avg.numpy() + (1 - rho) * g.numpy() ** 2
    delta = np.sqrt(acc_delta.numpy() + eps) / np.sqrt(s + eps) * g.numpy()
    a = rho * acc_delta.numpy() + (1 - rho) * delta**2
    expected = p.numpy() - lr * delta
    storages = (p._storage, square_avg._storage, acc_delta._storage)
    versions = [t._version.value for t in (p, square_avg, acc_delta)]
    adadelta_update_(p, g, square_avg, acc_delta, lr=lr, rho=rho, eps=eps)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-15)
    np.testing.assert_allclose(square_avg.numpy(), s, rtol=1e-15)
    np.testing.assert_allclose(acc_delta.numpy(), a, rtol=1e-15)
    assert (p._storage, square_avg._storage, acc_delta._storage) == storages
    after = [t._version.value for t in (p, square_avg, acc_delta)]
    assert all(new > old for new, old in zip(after, versions))


def test_errors() -> None:
    p = pl.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="rho must be in"):
        pl.optim.Adadelta([p], rho=1.5)
    with pytest.raises(ValueError, match="lr"):
        pl.optim.Adadelta([p], lr=-1.0)
    with pytest.raises(ValueError, match="eps"):
        pl.optim.Adadelta([p], eps=-1e-6)
    with pytest.raises(ValueError, match="square_avg must match the parameter"):
        adadelta_update_(p.detach(), pl.zeros(3), pl.zeros(2), pl.zeros(3), lr=1.0, rho=0.9,
                         eps=1e-6)  # fmt: skip
    optimizer = pl.optim.Adadelta([p])
    optimizer.step()  # (no gradient: nothing happens, as PyTorch)
    assert not optimizer.state[p]
