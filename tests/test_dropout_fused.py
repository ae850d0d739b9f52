"""nn.functional.dropout's fused op (:class:`pylucid.ops.random.DropoutBackward`): the same
draws and, bit for bit, the same values and gradients as the composition it replaced
(``where(rand(...) >= p, x / (1 - p), 0)``), on every backend; compiled steps capture it."""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from pylucid import nn
from pylucid.ops.random import DropoutBackward


def _composition(x: pl.Tensor, p: float) -> pl.Tensor:
    keep = pl.rand(*x.shape, dtype=x.dtype, device=x.device) >= p
    return pl.where(keep, x / (1.0 - p), 0.0)


def _run(fn, x: np.ndarray, g: np.ndarray, dtype, device, seed: int):  # noqa: ANN001, ANN202
    pl.manual_seed(seed)
    t = pl.tensor(x, dtype=dtype, device=device, requires_grad=True)
    y = fn(t)
    y.backward(pl.tensor(g, dtype=dtype, device=device))
    return y.numpy(), t.grad.numpy(), pl.rand(3, dtype=pl.float64).numpy()


@pytest.mark.parametrize("dtype", [pl.float32, pl.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("p", [0.1, 0.3, 1 / 3, 0.5, 0.7, 0.999])
def test_dropout_bit_for_bit_as_the_composition(dtype, p, device) -> None:  # noqa: ANN001
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 129))
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    g = rng.standard_normal(x.shape)
    g[1, :3] = [np.nan, np.inf, -0.0]
    fused = _run(lambda t: F.dropout(t, p), x, g, dtype, device, 11)
    old = _run(lambda t: _composition(t, p), x, g, dtype, device, 11)
    for a, b in zip(fused, old):  # values, gradients, and the generator's next draws
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    y = F.dropout(pl.tensor(x, dtype=dtype, device=device, requires_grad=True), p)
    assert isinstance(y.grad_fn, DropoutBackward)  # (one op, not the composition)


def test_dropout_module_inplace_and_views(device) -> None:  # noqa: ANN001
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    module = nn.Dropout(0.25)
    pl.manual_seed(5)
    expected = _composition(pl.tensor(x, device=device), 0.25).numpy()
    pl.manual_seed(5)
    np.testing.assert_array_equal(module(pl.tensor(x, device=device)).numpy(), expected)
    pl.manual_seed(5)
    t = pl.tensor(x, device=device)
    assert F.dropout(t, 0.25, inplace=True) is t
    np.testing.assert_array_equal(t.numpy(), expected)
    pl.manual_seed(5)  # a transposed (non-contiguous) input: its own shape's draws
    expected_t = _composition(pl.tensor(x, device=device).T, 0.25).numpy()
    pl.manual_seed(5)
    np.testing.assert_array_equal(F.dropout(pl.tensor(x, device=device).T, 0.25).numpy(),
                                  expected_t)  # fmt: skip
    module.eval()
    np.testing.assert_array_equal(module(pl.tensor(x, device=device)).numpy(), x)


def test_dropout_second_derivative(device) -> None:  # noqa: ANN001
    x = pl.tensor(np.random.default_rng(2).standard_normal((4, 5)), device=device,
                  requires_grad=True)  # fmt: skip
    pl.manual_seed(0)
    assert pl.graph.gradcheck(lambda a: (pl.manual_seed(0), F.dropout(a, 0.4))[1], [x])
    assert pl.graph.gradgradcheck(lambda a: (pl.manual_seed(0), F.dropout(a, 0.4) ** 2)[1], [x])


def test_dropout_half_keeps_the_composition(device) -> None:  # noqa: ANN001
    x = np.random.default_rng(3).standard_normal((8, 8))
    for dtype in (pl.float16, pl.bfloat16):
        pl.manual_seed(9)
        got = F.dropout(pl.tensor(x, dtype=dtype, device=device), 0.3).to(pl.float32).numpy()
        pl.manual_seed(9)
        want = _composition(pl.tensor(x, dtype=dtype, device=device), 0.3)
        np.testing.assert_array_equal(got, want.to(pl.float32).numpy())


def test_compiled_step_captures_the_fused_dropout() -> None:
    rng = np.random.default_rng(4)
    x = pl.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    w = pl.tensor(rng.standard_normal((32, 8)).astype(np.float32), requires_grad=True)

    def step(a: pl.Tensor) -> pl.Tensor:
        w.grad = None
        loss = (F.dropout(a, 0.3) @ w).square().mean()
        loss.backward()
        return loss

    compiled = pl.compile(step)
    for seed in range(4):
        pl.manual_seed(seed)
        eager_loss, eager_grad = step(x).numpy(), w.grad.numpy().copy()
        pl.manual_seed(seed)
        compiled_loss = compiled(x).numpy()
        np.testing.assert_array_equal(compiled_loss, eager_loss)
        np.testing.assert_array_equal(w.grad.numpy(), eager_grad)
    assert compiled.stats.replays >= 1  # (captured and replayed, not run eagerly)
