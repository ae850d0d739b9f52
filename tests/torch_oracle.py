"""Helpers for the layer tests that compare pylucid's modules with PyTorch's
(``test_attention.py``, ``test_rnn.py``, ``test_transformer.py``).

A comparison builds the same module with each library, loads PyTorch's ``state_dict`` into
pylucid's (which also proves that the keys, their order and the shapes match), runs both
on the same inputs and compares the outputs, then the gradients of every input and every
parameter for one random upstream gradient.

Tolerances, relative and absolute alike:

- float64: 1e-10. The two libraries compute the same formulas with sums in other orders
  (matmul blocking, where biases are added), a few ulps (1e-16) per operation; recurrent
  layers carry that through every step and layer, and the absolute term covers entries that
  cancel to about zero. The observed differences stay below 1e-14.
- float32: 1e-5, about 80 ulps of float32 (6e-8). Products of a dozen terms and the softmax
  and layer-norm reductions each differ by a few ulps, summed again in the gradients of the
  weights (over the batch and every time step); the observed differences stay below 2e-6.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import pylucid as pl
from tests.conftest import TORCH_REASON  # noqa: F401  (re-exported to the layer tests)

TOLERANCES = {"float64": 1e-10, "float32": 1e-5}
DTYPES = ("float64", "float32")


def torch_state(module: Any) -> dict[str, pl.Tensor]:
    """A torch module's state dict as pylucid tensors (same dtype, on the cpu)."""
    return {
        key: pl.tensor(value.detach().numpy().copy()) for key, value in module.state_dict().items()
    }


def assert_close(ours: pl.Tensor, theirs: Any, dtype: str, what: str) -> None:
    """Equal shapes, pylucid's dtype ``dtype`` and equal values (nan where torch has nan)
    within the tolerance of ``dtype``."""
    expected = theirs.detach().numpy()
    assert ours.shape == tuple(expected.shape), f"{what}: {ours.shape} != {expected.shape}"
    assert ours.dtype.name == dtype, f"{what}: dtype {ours.dtype.name}, expected {dtype}"
    tol = TOLERANCES[dtype]
    np.testing.assert_allclose(ours.numpy(), expected, rtol=tol, atol=tol, err_msg=what)


def flat(result: Any) -> list[Any]:
    """The tensors (and Nones) of a nested tuple result, in order."""
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in flat(item)]
    return [result]


def _convert(torch: Any, value: Any, dtype: str, device: str, grad: bool) -> tuple[Any, Any]:
    """``value`` (an array, a tuple of arrays, or anything else) for each library: floating
    arrays in ``dtype`` (requiring grad where ``grad``), bool arrays as they are."""
    if isinstance(value, tuple):
        pairs = [_convert(torch, v, dtype, device, grad) for v in value]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    if not isinstance(value, np.ndarray):
        return value, value
    if value.dtype == bool:
        return torch.tensor(value), pl.tensor(value, device=device)
    array = value.astype(dtype)
    return (
        torch.tensor(array, requires_grad=grad),
        pl.tensor(array, device=device, requires_grad=grad),
    )


def leaves(value: Any) -> list[Any]:
    """The tensors that require grad in a converted argument."""
    if isinstance(value, tuple):
        return [t for v in value for t in leaves(v)]
    return [value] if getattr(value, "requires_grad", False) else []


def compare_module(
    torch: Any, build: Callable[[Any], Any], args: tuple[Any, ...], kwargs: dict[str, Any],
    dtype: str, device: str, train: bool = True, backward: bool = True,
) -> None:  # fmt: skip
    """Build with each library (``build(torch)`` / ``build(pl)``), load torch's weights,
    and compare outputs and (with ``backward``) the gradients of the floating arguments and
    of every parameter. Floating arrays in ``args`` require grad; arrays in ``kwargs``
    (masks) do not."""
    torch.manual_seed(0)
    theirs = build(torch).to(getattr(torch, dtype)).train(train)
    ours = build(pl).to(device).to(getattr(pl, dtype)).train(train)
    ours.load_state_dict(torch_state(theirs))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    converted = [_convert(torch, a, dtype, device, True) for a in args]
    t_args, p_args = [c[0] for c in converted], [c[1] for c in converted]
    named = {k: _convert(torch, v, dtype, device, False) for k, v in kwargs.items()}
    t_out = flat(theirs(*t_args, **{k: v[0] for k, v in named.items()}))
    p_out = flat(ours(*p_args, **{k: v[1] for k, v in named.items()}))
    assert len(p_out) == len(t_out)
    for i, (mine, reference) in enumerate(zip(p_out, t_out)):
        assert (mine is None) == (reference is None), f"output {i}"
        if mine is not None:
            assert mine.device == device
            assert_close(mine, reference, dtype, f"output {i}")
    if not backward:
        return
    rng = np.random.default_rng(11)
    loss_t, loss_p = 0.0, 0.0
    for mine, reference in zip(p_out, t_out):
        if reference is None:
            continue
        upstream = rng.standard_normal(tuple(reference.shape)).astype(dtype)
        loss_t = loss_t + (reference * torch.tensor(upstream)).sum()
        loss_p = loss_p + (mine * pl.tensor(upstream, device=device)).sum()
    loss_t.backward()
    loss_p.backward()
    t_leaves = [t for a in t_args for t in leaves(a)]
    p_leaves = [t for a in p_args for t in leaves(a)]
    for i, (mine, reference) in enumerate(zip(p_leaves, t_leaves)):
        assert_close(mine.grad, reference.grad, dtype, f"gradient of input {i}")
    their_params = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        assert_close(param.grad, their_params[name].grad, dtype, f"gradient of {name}")
