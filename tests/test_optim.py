"""Optimizers (pylucid.optim): trajectories against PyTorch's, parameter groups, state dicts,
the fused update kernels' in-place semantics, and errors.

Tolerances: each update evaluates PyTorch's single-tensor formulas in its order of
operations, but PyTorch's vectorised CPU kernels contract ``a + alpha * b`` into one fused
multiply-add, so single elements differ by an ulp now and then, and 40 steps carry those
forward: float64 trajectories agree to 1e-12 and float32 ones to 2e-5, relative to the
parameters' scale (measured worst: 5e-14 and 4e-6).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import pylucid as pl
from pylucid.kernels.parallel import parallel_threshold
from pylucid.ops.updates import adam_update_, sgd_update_
from tests.conftest import TORCH_REASON

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "dampening": 0.3, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "betas": (0.3, 0.6), "eps": 1e-3, "maximize": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.02, "amsgrad": True, "betas": (0.8, 0.9), "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.3, "centered": True, "maximize": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.1,
                 "weight_decay": 0.1}),
]  # fmt: skip
CASE_IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in CASES]
TOLERANCE = {"float64": 1e-12, "float32": 2e-5}


def _grads(rng: np.random.Generator, steps: int, shapes: list[tuple[int, ...]]) -> list:
    return [[rng.standard_normal(shape) for shape in shapes] for _ in range(steps)]


def _run_pylucid(name, kw, starts, grads, dtype, device):
    params = [pl.tensor(s, dtype=dtype, device=device, requires_grad=True) for s in starts]
    optimizer = getattr(pl.optim, name)(params, **kw)
    history = []
    for step in grads:
        for p, g in zip(params, step):
            p.grad = pl.tensor(g, dtype=dtype, device=device)
        optimizer.step()
        history.append([p.numpy().astype(np.float64) for p in params])
    return history


@pytest.mark.parametrize(("name", "kw"), CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trajectory_matches_torch(name, kw, dtype, device, rng):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    shapes = [(7, 5), (5,)]
    starts = [rng.standard_normal(s) for s in shapes]
    grads = _grads(rng, 40, shapes)
    tdtype = getattr(torch, dtype)
    tparams = [torch.tensor(s, dtype=tdtype, requires_grad=True) for s in starts]
    toptimizer = getattr(torch.optim, name)(tparams, **kw)
    ours = _run_pylucid(name, kw, starts, grads, getattr(pl, dtype), device)
    for step, mine in zip(grads, ours):
        for p, g in zip(tparams, step):
            p.grad = torch.tensor(g, dtype=tdtype)
        toptimizer.step()
        for p, value in zip(tparams, mine):
            expected = p.detach().double().numpy()
            scale = np.abs(expected).max()
            np.testing.assert_allclose(value, expected, rtol=0, atol=TOLERANCE[dtype] * scale)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_parameters_follow_the_float32_trajectory(dtype, device, rng):
    """Halves are computed in float32 and rounded once per step: each step moves them as
    float32 would, to the half's precision (2^-8 relative for bfloat16, one rounding per
    step over 10 steps)."""
    starts = [rng.standard_normal((6, 4))]
    grads = _grads(rng, 10, [(6, 4)])
    half = _run_pylucid("Adam", {"lr": 0.01}, starts, grads, getattr(pl, dtype), device)
    single = _run_pylucid("Adam", {"lr": 0.01}, starts, grads, pl.float32, device)
    np.testing.assert_allclose(half[-1][0], single[-1][0], rtol=0, atol=10 * 2**-8 * 3)
    assert not np.array_equal(half[-1][0], starts[0])


def test_sgd_step_is_exact_without_momentum(device):
    p = pl.tensor([1.0, -2.0, 3.0], dtype=pl.float64, device=device, requires_grad=True)
    p.grad = pl.tensor([0.5, 0.25, -1.0], dtype=pl.float64, device=device)
    pl.optim.SGD([p], lr=0.5).step()
    assert p.tolist() == [0.75, -2.125, 3.5]


def test_adam_first_step_moves_by_lr_in_the_sign_of_the_gradient(device):
    """m / sqrt(v) after one step is g / |g| (bias-corrected): each element moves by lr."""
    p = pl.tensor([1.0, -2.0, 3.0], dtype=pl.float64, device=device, requires_grad=True)
    p.grad = pl.tensor([4.0, -0.001, 1e3], dtype=pl.float64, device=device)
    pl.optim.Adam([p], lr=0.1, eps=0.0).step()
    np.testing.assert_allclose(p.numpy(), [0.9, -1.9, 2.9], rtol=1e-15)


def test_parameter_groups_take_their_own_hyperparameters(device):
    a = pl.ones(2, device=device, requires_grad=True)
    b = pl.ones(2, device=device, requires_grad=True)
    optimizer = pl.optim.SGD([{"params": [a]}, {"params": b, "lr": 1.0}], lr=0.1)
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 1.0]
    assert optimizer.param_groups[1]["momentum"] == 0.0  # filled from the defaults
    a.grad = pl.ones(2, device=device)
    b.grad = pl.ones(2, device=device)
    optimizer.step()
    np.testing.assert_allclose(a.numpy(), [0.9, 0.9], rtol=1e-7)
    np.testing.assert_allclose(b.numpy(), [0.0, 0.0], atol=0)
    c = pl.ones(1, device=device, requires_grad=True)
    optimizer.add_param_group({"params": [c], "lr": 0.5})
    assert optimizer.param_groups[2]["params"][0] is c
    with pytest.raises(ValueError, match="more than one parameter group"):
        optimizer.add_param_group({"params": [a]})


def test_named_parameters_are_accepted():
    model = pl.nn.Linear(3, 2)
    optimizer = pl.optim.Adam(model.named_parameters())
    assert optimizer.param_groups[0]["param_names"] == ["weight", "bias"]
    assert optimizer.param_groups[0]["params"][0] is model.weight


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ([], ValueError, "empty parameter list"),
        ({pl.ones(1, requires_grad=True)}, TypeError, "not a set"),
        ([pl.ones(2, requires_grad=True) * 2], ValueError, "only leaf tensors"),
        ([pl.ones(2, dtype=pl.int64)], TypeError, "must be floating"),
        ([np.ones(2)], TypeError, "not a Tensor"),
    ],
    ids=["empty", "set", "non-leaf", "integer", "numpy"],
)
def test_bad_parameters_are_refused(params, error, message):
    with pytest.raises(error, match=message):
        pl.optim.SGD(params, lr=0.1)


def test_a_tensor_instead_of_a_list_is_refused():
    with pytest.raises(TypeError, match="got a Tensor"):
        pl.optim.SGD(pl.ones(2, requires_grad=True), lr=0.1)


@pytest.mark.parametrize(
    ("name", "kw", "message"),
    [
        ("SGD", {"lr": -1.0}, "lr >= 0"),
        ("SGD", {"lr": 0.1, "nesterov": True}, "Nesterov"),
        ("Adam", {"betas": (1.0, 0.9)}, r"betas\[0\]"),
        ("Adam", {"eps": -1.0}, "eps >= 0"),
        ("RMSprop", {"alpha": -0.5}, "alpha must be >= 0"),
        ("Adagrad", {"lr_decay": -0.1}, "lr_decay must be >= 0"),
        ("AdamW", {"differentiable": True}, "differentiable=True"),
    ],
)
def test_bad_hyperparameters_are_refused(name, kw, message):
    with pytest.raises(ValueError, match=message):
        getattr(pl.optim, name)([pl.ones(2, requires_grad=True)], **kw)


def test_zero_grad(device):
    p = pl.ones(3, device=device, requires_grad=True)
    optimizer = pl.optim.SGD([p], lr=0.1)
    (p * 2).sum().backward()
    kept = p.grad
    optimizer.zero_grad(set_to_none=False)
    assert p.grad is kept and p.grad.tolist() == [0.0, 0.0, 0.0]
    optimizer.zero_grad()
    assert p.grad is None


def test_parameters_without_gradient_are_left_alone(device):
    a = pl.ones(2, device=device, requires_grad=True)
    b = pl.ones(2, device=device, requires_grad=True)
    optimizer = pl.optim.Adam([a, b], lr=0.1)
    a.grad = pl.ones(2, device=device)
    optimizer.step()
    assert b.tolist() == [1.0, 1.0] and b not in optimizer.state
    assert optimizer.state[a]["step"] == 1


def test_step_with_closure_returns_its_loss(device):
    p = pl.tensor([3.0], device=device, requires_grad=True)
    optimizer = pl.optim.SGD([p], lr=0.25)

    def closure():
        optimizer.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with pl.no_grad():  # the closure runs with grad enabled regardless
        loss = optimizer.step(closure)
    assert loss.item() == 9.0
    assert p.tolist() == [1.5]  # 3 - 0.25 * 6


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_state_dict_round_trip_continues_the_same_trajectory(name, device, rng):
    kw = {"lr": 0.05, "momentum": 0.9} if name in ("SGD", "RMSprop") else {"lr": 0.05}
    start = rng.standard_normal((4, 3))
    grads = _grads(rng, 12, [(4, 3)])

    def make():
        p = pl.tensor(start, dtype=pl.float64, device=device, requires_grad=True)
        return p, getattr(pl.optim, name)([p], **kw)

    def run(p, optimizer, steps):
        for (g,) in steps:
            p.grad = pl.tensor(g, dtype=pl.float64, device=device)
            optimizer.step()

    p, optimizer = make()
    run(p, optimizer, grads)
    q, first = make()
    run(q, first, grads[:5])
    saved = pickle.loads(pickle.dumps(first.state_dict()))  # a copy, as a file would hold
    assert set(saved) == {"state", "param_groups"} and saved["param_groups"][0]["params"] == [0]
    r = pl.tensor(q.numpy(), dtype=pl.float64, device=device, requires_grad=True)
    second = getattr(pl.optim, name)([r], **kw)
    second.load_state_dict(saved)
    run(r, second, grads[5:])
    np.testing.assert_array_equal(r.numpy(), p.numpy())


def test_load_state_dict_refuses_a_mismatch_and_changes_nothing():
    a = pl.ones(2, requires_grad=True)
    optimizer = pl.optim.Adam([a], lr=0.1)
    a.grad = pl.ones(2)
    optimizer.step()
    saved = optimizer.state_dict()
    other = pl.optim.Adam([pl.ones(3, requires_grad=True)], lr=0.5)
    with pytest.raises(ValueError, match=r"state\[0\]\['exp_avg'\] has shape \(2,\)"):
        other.load_state_dict(saved)
    assert other.param_groups[0]["lr"] == 0.5 and not other.state
    two = pl.optim.Adam([pl.ones(2, requires_grad=True), pl.ones(2, requires_grad=True)])
    with pytest.raises(ValueError, match="1 parameters in the state dict, 2 in the optimizer"):
        two.load_state_dict(saved)


def test_loaded_state_is_not_the_callers_tensor():
    a = pl.ones(2, requires_grad=True)
    optimizer = pl.optim.SGD([a], lr=0.1, momentum=0.9)
    a.grad = pl.ones(2)
    optimizer.step()
    saved = optimizer.state_dict()
    buffer = saved["state"][0]["momentum_buffer"].numpy().copy()
    b = pl.ones(2, requires_grad=True)
    other = pl.optim.SGD([b], lr=0.1, momentum=0.9)
    other.load_state_dict(saved)
    b.grad = pl.ones(2)
    other.step()
    np.testing.assert_array_equal(saved["state"][0]["momentum_buffer"].numpy(), buffer)


def test_load_state_dict_from_torch():
    """PyTorch's optimizer state (a float32 0-d step tensor, its moments) loads."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    t = torch.ones(3, dtype=torch.float64, requires_grad=True)
    toptimizer = torch.optim.Adam([t], lr=0.1)
    t.grad = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    toptimizer.step()
    state = toptimizer.state_dict()
    converted = {
        "state": {
            k: {n: pl.tensor(v.numpy()) for n, v in s.items()} for k, s in state["state"].items()
        },
        "param_groups": state["param_groups"],
    }
    p = pl.tensor(t.detach().numpy(), requires_grad=True)
    optimizer = pl.optim.Adam([p], lr=0.1)
    optimizer.load_state_dict(converted)
    assert optimizer.state[p]["step"] == 1
    g = np.array([0.5, 0.5, -1.0])
    t.grad, p.grad = torch.tensor(g), pl.tensor(g)
    toptimizer.step()
    optimizer.step()
    np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-15)


def test_a_graph_that_saved_the_parameter_refuses_backward_after_the_step(device):
    p = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    loss = (p * p).sum()
    p.grad = pl.ones(2, device=device)
    pl.optim.SGD([p], lr=0.1).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation|version"):
        loss.backward()


def test_views_and_numpy_arrays_of_a_parameter_see_the_step():
    p = pl.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    view = p.detach()[1:3]
    array = p.numpy()
    p.grad = pl.ones(4)
    pl.optim.SGD([p], lr=0.5).step()
    assert view.tolist() == [1.5, 2.5]
    np.testing.assert_array_equal(array, [0.5, 1.5, 2.5, 3.5])


def test_a_strided_parameter_is_updated_through_copies():
    base = np.arange(12.0).reshape(3, 4)
    p = pl.nn.Parameter(pl.from_numpy(base.T))  # Fortran-ordered: not C-contiguous
    p.grad = pl.ones(4, 3, dtype=pl.float64)
    pl.optim.Adam([p], lr=0.5, eps=0.0).step()
    np.testing.assert_allclose(base, np.arange(12.0).reshape(3, 4) - 0.5, rtol=1e-12)


def test_update_functions_refuse_mismatched_tensors():
    p = pl.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match=r"grad must match the parameter \(shape \(3,\)"):
        sgd_update_(p, pl.ones(2), None, lr=0.1)
    with pytest.raises(ValueError, match="exp_avg must match"):
        adam_update_(p, pl.ones(3), pl.ones(3, dtype=pl.float64), pl.ones(3), None, step=1,
                     lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8)  # fmt: skip
    with pytest.raises(RuntimeError, match="leaf tensors only"):
        sgd_update_(p * 1, pl.ones(3), None, lr=0.1)
    assert p.tolist() == [1.0, 1.0, 1.0]


def test_a_gradient_of_another_dtype_is_refused_before_any_update():
    a = pl.ones(2, requires_grad=True)
    b = pl.ones(2, requires_grad=True)
    a.grad = pl.ones(2)
    b._grad = pl.ones(2, dtype=pl.float64)  # (the .grad setter refuses it already)
    with pytest.raises(ValueError, match="does not match its parameter"):
        pl.optim.SGD([b, a], lr=0.1).step()
    assert b.tolist() == [1.0, 1.0]


def test_repr_lists_each_group():
    optimizer = pl.optim.SGD([pl.ones(1, requires_grad=True)], lr=0.1, momentum=0.9)
    text = repr(optimizer)
    assert text.startswith("SGD (\nParameter Group 0\n") and "    momentum: 0.9" in text


def test_adagrad_state_exists_from_construction():
    p = pl.ones(2, requires_grad=True)
    optimizer = pl.optim.Adagrad([p], initial_accumulator_value=0.25)
    assert optimizer.state[p]["step"] == 0
    assert optimizer.state[p]["sum"].tolist() == [0.25, 0.25]


def test_large_parameters_take_the_parallel_loop(rng):
    """From the parallel threshold on, the prange loop runs: its values are the serial
    loop's, which updates the same elements as pieces below the threshold (the update of an
    element depends on that element alone)."""
    size, piece = 200_000, 40_000
    assert size >= parallel_threshold("transcendental") > piece
    start = rng.standard_normal(size).astype(np.float32)
    g = rng.standard_normal(size).astype(np.float32)
    whole = pl.tensor(start, requires_grad=True)
    whole.grad = pl.tensor(g)
    pl.optim.AdamW([whole], lr=0.01).step()
    pieces = [pl.tensor(start[i : i + piece], requires_grad=True) for i in range(0, size, piece)]
    for i, p in zip(range(0, size, piece), pieces):
        p.grad = pl.tensor(g[i : i + piece])
    pl.optim.AdamW(pieces, lr=0.01).step()
    np.testing.assert_array_equal(whole.numpy(), np.concatenate([p.numpy() for p in pieces]))
    assert not np.array_equal(whole.numpy(), start)
