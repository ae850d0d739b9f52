"""``optim.LBFGS`` against PyTorch: trajectories with and without the strong-Wolfe line
search, the line search alone, the evaluation and iteration counts, state dicts (pylucid's
round trip and PyTorch's own loading), and errors.

Each problem is written once against a library argument (``torch`` or ``pylucid``), as a
ported program would be. The optimizer follows PyTorch's order of operations, with its
scalars as Python floats (PyTorch's float64 0-d tensors compute the same, but for one
division in the cubic interpolation), so float64 trajectories differ only by the last bits
of vector operations: PyTorch's ``dot`` sums in another order and its ``add_(alpha=)``
contracts into fused multiply-adds. L-BFGS carries those differences forward and amplifies
them on non-convex problems: on the MLP below, 20 iterations per step for 15 steps end about
1e-3 apart, as far as PyTorch ends from itself when one starting weight moves by one ulp.
The cases here run 27-64 iterations over 15 steps and agree to 1e-10 relative to the
problem's scale (measured worst, both backends: 1.4e-12 in the parameters, 9e-14 in the
losses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from tests.conftest import TORCH_REASON

TOLERANCE = 1e-10


@pytest.fixture
def torch() -> Iterator[ModuleType]:
    """The oracle, or a skip naming how to install it; on one thread (its thread pool,
    on a busy machine, makes these small problems 100 times slower)."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


# -- the problems: starting values, constants, and the loss written for either library ------
def rosenbrock(lib: ModuleType, params: list, constants: list) -> Any:
    (x,) = params
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def least_squares(lib: ModuleType, params: list, constants: list) -> Any:
    (w,) = params
    a, b = constants
    return ((a @ w - b) ** 2).mean() + 0.01 * (w**2).sum()


def mlp(lib: ModuleType, params: list, constants: list) -> Any:
    w1, b1, w2, _unused = params  # (a parameter without a gradient: zeros, never moves)
    x, y = constants
    return ((lib.tanh(x @ w1 + b1) @ w2 - y) ** 2).mean()


def _problem(name: str) -> tuple[Callable, list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(1234)
    if name == "rosenbrock":
        return rosenbrock, [np.array([-1.2, 1.0])], []
    if name == "least_squares":
        a, b = rng.standard_normal((20, 6)), rng.standard_normal(20)
        return least_squares, [np.zeros(6)], [a, b]
    x = rng.standard_normal((32, 5))
    y = np.sin(x @ rng.standard_normal((5, 2)))
    starts = [rng.standard_normal((5, 8)) * 0.5, np.zeros(8),
              rng.standard_normal((8, 2)) * 0.5, np.ones(3)]  # fmt: skip
    return mlp, starts, [x, y]


class Run:
    """A problem and an L-BFGS optimizer over it, in one library."""

    def __init__(
        self, lib: ModuleType, name: str, options: dict, device: str | None = None,
        dtype: str = "float64",
    ) -> None:  # fmt: skip
        self.loss, starts, constants = _problem(name)
        self.lib = lib
        place = {"dtype": getattr(lib, dtype)} | ({"device": device} if device else {})
        self.params = [lib.tensor(s, requires_grad=True, **place) for s in starts]
        self.constants = [lib.tensor(c, **place) for c in constants]
        self.optimizer = lib.optim.LBFGS(self.params, **options)

    def closure(self) -> Any:
        self.optimizer.zero_grad()
        loss = self.loss(self.lib, self.params, self.constants)
        loss.backward()
        return loss

    def step(self) -> float:
        return self.optimizer.step(self.closure).item()

    def values(self) -> np.ndarray:
        return np.concatenate([p.detach().numpy().astype(np.float64).ravel()
                               for p in self.params])  # fmt: skip

    def counts(self) -> tuple[int, int, int]:
        state = self.optimizer.state[self.params[0]]
        return state["func_evals"], state["n_iter"], len(state.get("old_dirs", []))


CASES = [
    ("rosenbrock", {"lr": 0.5, "max_iter": 5}),
    ("rosenbrock", {"line_search_fn": "strong_wolfe"}),
    ("rosenbrock", {"line_search_fn": "strong_wolfe", "max_iter": 4, "history_size": 2}),
    ("least_squares", {"lr": 0.1, "max_iter": 4, "history_size": 3}),
    ("least_squares", {"line_search_fn": "strong_wolfe", "lr": 0.01, "max_iter": 3,
                       "max_eval": 4}),
    ("mlp", {"max_iter": 3}),
    ("mlp", {"line_search_fn": "strong_wolfe", "max_iter": 3, "history_size": 4}),
    ("mlp", {"line_search_fn": "strong_wolfe", "max_iter": 4, "max_eval": 5,
             "tolerance_change": 1e-5}),
]  # fmt: skip
CASE_IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in CASES]


@pytest.mark.parametrize(("name", "options"), CASES, ids=CASE_IDS)
def test_trajectory_matches_torch(torch: ModuleType, device: str, name: str, options: dict) -> None:
    """15 steps: the returned losses, the parameters, and the evaluation, iteration and
    history counts after each step."""
    theirs, ours = Run(torch, name, options), Run(pl, name, options, device)
    scale = None
    for _ in range(15):
        expected_loss, loss = theirs.step(), ours.step()
        scale = scale or abs(expected_loss)
        expected = theirs.values()
        assert abs(loss - expected_loss) <= TOLERANCE * scale
        np.testing.assert_allclose(ours.values(), expected, rtol=0,
                                   atol=TOLERANCE * np.abs(expected).max())  # fmt: skip
        assert ours.counts() == theirs.counts()
    if name == "mlp":  # (its last parameter has no gradient)
        np.testing.assert_array_equal(ours.params[-1].numpy(), np.ones(3))
    state, t_state = ours.optimizer.state_dict(), theirs.optimizer.state_dict()
    assert list(state["state"][0]) == list(t_state["state"][0])
    assert state["param_groups"] == t_state["param_groups"]


def ripples(x: np.ndarray) -> tuple[float, np.ndarray]:
    """A quartic with ripples: many local minima for the zoom to stall in."""
    f = 0.5 * x**4 + 0.6 * x**3 - 0.7 * x**2 - 0.6 * x + np.sin(7 * x)
    return float(f.sum()), 2 * x**3 + 1.8 * x**2 - 1.4 * x - 0.6 + 7 * np.cos(7 * x)


def kink(x: np.ndarray) -> tuple[float, np.ndarray]:
    """|x - 1|: the slope never flattens, so the zoom narrows the bracket to nothing."""
    return float(np.abs(x - 1).sum()), np.sign(x - 1)


def cubic(x: np.ndarray) -> tuple[float, np.ndarray]:
    """Unbounded below: extrapolation runs out of evaluations."""
    return float((x**3 - 2 * x).sum()), 3 * x**2 - 2


LINE_SEARCHES = [  # (function, start, first step, evaluations): the branches they reach
    (ripples, [-1.6], 23.0, 25),  # zoom: interpolation stalls near an end, is moved off it
    (ripples, [0.2], 12.0, 25),  # the cubic has no minimum; the high end becomes the low
    (kink, [0.3], 0.3, 25),  # extrapolation, then a bracket narrower than 1e-9
    (cubic, [-1.7, 0.4, 2.2], 0.3, 6),  # the evaluations run out while extrapolating
]


@pytest.mark.parametrize(("function", "start", "t", "evals"), LINE_SEARCHES,
                         ids=lambda v: getattr(v, "__name__", None))  # fmt: skip
def test_line_search_matches_torch(
    torch: ModuleType, device: str, function: Callable, start: list, t: float, evals: int
) -> None:
    """The strong-Wolfe search alone against PyTorch's (its private ``_strong_wolfe``) along
    the steepest descent: the same trials, so the same step, loss, gradient and count (to
    1e-12: PyTorch divides a number by a 0-d tensor as a reciprocal times the number)."""
    from torch.optim.lbfgs import _strong_wolfe as torch_search

    from pylucid.optim.lbfgs import _strong_wolfe, _Trial

    x = np.array(start)
    f, g = function(x)

    def theirs(x0: Any, step: Any, d: Any) -> tuple[float, Any]:
        value, slope = function(x0.numpy() + float(step) * d.numpy())
        return value, torch.tensor(slope)

    def ours(step: float) -> _Trial:
        value, slope = function(x + step * -g)
        slope = pl.tensor(slope, device=device)
        return _Trial(step, value, slope, slope.dot(d).item())

    t_d = torch.tensor(-g)
    expected = torch_search(theirs, torch.tensor(x), t, t_d, f, torch.tensor(g),
                            t_d.dot(torch.tensor(g)), max_ls=evals)  # fmt: skip
    d = pl.tensor(-g, device=device)
    best, spent = _strong_wolfe(ours, d, t, f, pl.tensor(g, device=device), float(-g @ g),
                                max_evals=evals)  # fmt: skip
    assert spent == expected[3]
    np.testing.assert_allclose([best.t, best.f], [float(expected[2]), expected[0]], rtol=1e-12)
    np.testing.assert_allclose(best.g.numpy(), expected[1].numpy(), rtol=1e-12)


def test_float32_follows_torch(torch: ModuleType, device: str) -> None:
    """float32 parameters: PyTorch's scalars are float32, pylucid's float64, so only the
    float32 precision of a few steps is shared."""
    options = {"line_search_fn": "strong_wolfe", "max_iter": 4}
    theirs = Run(torch, "least_squares", options, dtype="float32")
    ours = Run(pl, "least_squares", options, device, dtype="float32")
    for _ in range(3):
        np.testing.assert_allclose(ours.step(), theirs.step(), rtol=1e-5)
    np.testing.assert_allclose(ours.values(), theirs.values(), rtol=0, atol=1e-5)
    assert ours.params[0].dtype is pl.float32


def test_state_dict_round_trip(tmp_path: Path, device: str) -> None:
    """Saved after 3 steps and loaded into a new optimizer, the state continues the run
    bit for bit."""
    options = {"line_search_fn": "strong_wolfe", "max_iter": 4, "history_size": 3}
    whole, first = Run(pl, "mlp", options, device), Run(pl, "mlp", options, device)
    for _ in range(3):
        whole.step()
        first.step()
    path = tmp_path / "lbfgs.safetensors"
    pl.save({"params": [p.detach() for p in first.params],
             "optimizer": first.optimizer.state_dict()}, path)  # fmt: skip
    saved = pl.load(path)
    resumed = Run(pl, "mlp", {}, device)
    with pl.no_grad():
        for p, value in zip(resumed.params, saved["params"]):
            p.copy_(value)
    resumed.optimizer.load_state_dict(saved["optimizer"])
    state = resumed.optimizer.state[resumed.params[0]]
    assert resumed.counts() == first.counts() and len(state["old_dirs"]) == 3
    assert isinstance(state["t"], float) and isinstance(state["ro"][0], float)
    assert resumed.optimizer.param_groups[0]["history_size"] == 3
    for _ in range(3):
        assert resumed.step() == whole.step()
    np.testing.assert_array_equal(resumed.values(), whole.values())
    assert resumed.counts() == whole.counts()


def test_resumes_from_torch_state(torch: ModuleType, tmp_path: Path, device: str) -> None:
    """PyTorch's state dict (0-d tensors, an int ``H_diag`` or tensor one, ``None`` in
    ``al``), saved by ``torch.save`` and read by ``pl.load``, loads and the run continues
    PyTorch's."""
    options = {"line_search_fn": "strong_wolfe", "max_iter": 3, "history_size": 4}
    theirs = Run(torch, "mlp", options)
    for _ in range(3):
        theirs.step()
    torch.save(theirs.optimizer.state_dict(), tmp_path / "lbfgs.pt")
    ours = Run(pl, "mlp", {}, device)
    with pl.no_grad():
        for p, t in zip(ours.params, theirs.params):
            p.copy_(pl.tensor(t.detach().numpy(), device=device))
    ours.optimizer.load_state_dict(pl.load(tmp_path / "lbfgs.pt"))
    assert ours.optimizer.param_groups[0]["line_search_fn"] == "strong_wolfe"
    for _ in range(5):
        expected_loss, loss = theirs.step(), ours.step()
        np.testing.assert_allclose(loss, expected_loss, rtol=TOLERANCE)
        expected = theirs.values()
        np.testing.assert_allclose(ours.values(), expected, rtol=0,
                                   atol=TOLERANCE * np.abs(expected).max())  # fmt: skip
        assert ours.counts() == theirs.counts()


def test_loaded_state_takes_the_parameters_dtype_and_device(
    torch: ModuleType, tmp_path: Path, device: str
) -> None:
    theirs = Run(torch, "least_squares", {"max_iter": 3})
    theirs.step()
    torch.save(theirs.optimizer.state_dict(), tmp_path / "lbfgs.pt")
    ours = Run(pl, "least_squares", {}, device, dtype="float32")
    ours.optimizer.load_state_dict(pl.load(tmp_path / "lbfgs.pt"))
    state = ours.optimizer.state[ours.params[0]]
    for vector in [state["d"], state["prev_flat_grad"], *state["old_dirs"]]:
        assert (vector.dtype, vector.device) == (pl.float32, device)
    assert isinstance(state["H_diag"], float) and isinstance(state["al"][0], float)
    assert state["al"][-1] is None
    ours.step()
    assert ours.counts()[1] > 3  # (it continued from the loaded count)


def test_converged_step_evaluates_once() -> None:
    """At a minimum the first evaluation stops the step: one evaluation, no iteration."""
    x = pl.tensor([1.0, 1.0], dtype=pl.float64, requires_grad=True)
    optimizer = pl.optim.LBFGS([x])
    calls = []

    def closure() -> pl.Tensor:
        calls.append(pl.is_grad_enabled())
        optimizer.zero_grad()
        loss = rosenbrock(pl, [x], [])
        loss.backward()
        return loss

    assert optimizer.step(closure).item() == 0.0
    assert calls == [True]
    assert optimizer.state[x] == {"func_evals": 1, "n_iter": 0}
    assert x.tolist() == [1.0, 1.0]
    assert optimizer.step(lambda: 2.5) == 2.5  # (a number is a loss too)


def test_errors() -> None:
    a = pl.zeros(2, requires_grad=True)
    b = pl.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="only one parameter group"):
        pl.optim.LBFGS([{"params": [a]}, {"params": [b], "lr": 0.1}])
    optimizer = pl.optim.LBFGS([a])
    with pytest.raises(ValueError, match="only one parameter group"):
        optimizer.add_param_group({"params": [b]})
    with pytest.raises(ValueError, match="line_search_fn must be None or 'strong_wolfe'"):
        pl.optim.LBFGS([a], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="lr must be >= 0"):
        pl.optim.LBFGS([a], lr=-1.0)
    with pytest.raises(ValueError, match="history_size must be an int >= 1"):
        pl.optim.LBFGS([a], history_size=0)
    with pytest.raises(TypeError, match="needs a closure"):
        optimizer.step(None)

    def per_element() -> pl.Tensor:
        optimizer.zero_grad()
        losses = (a - 1) ** 2
        losses.sum().backward()
        return losses

    with pytest.raises(ValueError, match=r"as one number; it returned a tensor of shape \(2,\)"):
        optimizer.step(per_element)
    with pytest.raises(TypeError, match="returned NoneType"):
        optimizer.step(lambda: None)


def test_refused_state_dict_changes_nothing(torch: ModuleType) -> None:
    theirs = Run(torch, "least_squares", {"max_iter": 2})
    theirs.step()
    saved = theirs.optimizer.state_dict()
    ours = Run(pl, "mlp", {"lr": 0.5})
    before = ours.optimizer.state_dict()
    state = {key: value if not isinstance(value, torch.Tensor) else pl.tensor(value.numpy())
             for key, value in saved["state"][0].items()}  # fmt: skip
    with pytest.raises(ValueError, match="the state dict has 1 parameters, the optimizer 4"):
        ours.optimizer.load_state_dict(saved)
    with pytest.raises(ValueError, match="'d' must be a flat tensor of the parameters' 67"):
        ours.optimizer.load_state_dict({
            "state": {0: state},
            "param_groups": [dict(saved["param_groups"][0], params=[0, 1, 2, 3])],
        })  # fmt: skip
    with pytest.raises(ValueError, match=r"state for parameters \[1\]; LBFGS keeps its state"):
        ours.optimizer.load_state_dict({
            "state": {1: state},
            "param_groups": [dict(saved["param_groups"][0], params=[0, 1, 2, 3])],
        })  # fmt: skip
    assert ours.optimizer.state_dict() == before
