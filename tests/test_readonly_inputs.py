"""Every op of the op database (pylucid.opinfo) accepts inputs that are read-only, have
negative strides or are broadcast (zero-stride, read-only) views, on both backends.

Each op runs forward, and backward with a non-uniform upstream gradient where it is
differentiable, on such inputs and on contiguous copies of them; values and gradients must
agree to rtol 1e-12 (float64). The numba backend sees the NumPy arrays themselves
(``pl.from_numpy`` shares them); the mlx backend gets them through ``pl.tensor`` (a copy made
from the view) and broadcasts with ``expand`` on its own arrays.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo import OPS, OpInfo
from tests.conftest import MLX_MISSING


def _read_only(a: np.ndarray) -> np.ndarray:
    locked = np.array(a)
    locked.flags.writeable = False
    return locked


def _reversed(a: np.ndarray) -> np.ndarray:
    """``a``'s values through a view with a negative stride on every axis (a 0-d copy of a
    0-d ``a``: ``np.flip`` would make it a NumPy scalar)."""
    return np.flip(np.flip(a).copy()) if a.ndim else np.array(a)


def _broadcast_axis(a: np.ndarray) -> int | None:
    """The first axis longer than 1: the one stretched from a length-1 array."""
    return next((axis for axis, n in enumerate(a.shape) if n > 1), None)


def _shrunk(a: np.ndarray) -> np.ndarray:
    """``a`` with its broadcast axis cut to length 1 (the array a broadcast view stretches)."""
    axis = _broadcast_axis(a)
    return a if axis is None else np.take(a, [0], axis=axis)


#: name -> (the variant's input array made from a sampled array, the contiguous array of the
#: same values). Broadcast inputs stretch the first slice of the sample along its broadcast
#: axis, so their values repeat along it.
_VARIANTS: dict[str, tuple[Callable, Callable]] = {
    "read_only": (_read_only, lambda a: a),
    "negative_stride": (_reversed, lambda a: a),
    "broadcast_to": (
        lambda a: np.broadcast_to(_shrunk(a), a.shape),
        lambda a: np.broadcast_to(_shrunk(a), a.shape).copy(),
    ),
}


def _leaf(array: np.ndarray, device: str) -> pl.Tensor:
    """A float64 leaf requiring grad that holds ``array`` itself on the numba backend."""
    if device == "cpu":
        return pl.from_numpy(array).requires_grad_()
    return pl.tensor(array, dtype=pl.float64, device=device, requires_grad=True)


def _outputs(result: object) -> list[pl.Tensor]:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _run(info: OpInfo, leaves: list[pl.Tensor], inputs: list[pl.Tensor]) -> tuple[list, list]:
    """Forward values, and the leaves' gradients for a non-uniform upstream gradient."""
    outputs = _outputs(info.call(*inputs))
    differentiable = [o for o in outputs if o.requires_grad]
    if differentiable:
        seeds = [
            pl.tensor(np.linspace(-1.0, 2.0, o.numel()).reshape(o.shape), device=o.device)
            for o in differentiable
        ]
        pl.graph.backward(differentiable, seeds)
    grads = [x.grad.numpy() if x.grad is not None else None for x in leaves]
    return [o.numpy() for o in outputs], grads


def _assert_same(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None)
        if e is None:
            continue
        assert g.shape == e.shape and g.dtype == e.dtype
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(g, e)


def _skip_unsupported(info: OpInfo) -> None:
    if "needs_mlx" in info.tags and MLX_MISSING:
        pytest.skip("needs both backends; mlx is not installed")


CASES = [pytest.param(info, id=info.name) for info in OPS]


@pytest.mark.parametrize("variant", list(_VARIANTS))
@pytest.mark.parametrize("info", CASES)
def test_strided_and_read_only_arrays(info: OpInfo, variant: str, device: str, rng) -> None:
    """Inputs that are read-only, reversed (negative strides) or ``np.broadcast_to`` views."""
    _skip_unsupported(info)
    arrays = info.sample(rng, info.shapes[0])
    make, contiguous = _VARIANTS[variant]
    views = [make(a) for a in arrays]
    plain = [np.ascontiguousarray(contiguous(a)) for a in arrays]
    for view, copy in zip(views, plain):
        np.testing.assert_array_equal(view, copy)
    leaves = [_leaf(v, device) for v in views]
    expected_leaves = [_leaf(c, device) for c in plain]
    values, grads = _run(info, leaves, leaves)
    expected_values, expected_grads = _run(info, expected_leaves, expected_leaves)
    _assert_same(values, expected_values)
    _assert_same(grads, expected_grads)


@pytest.mark.parametrize("info", CASES)
def test_expanded_inputs(info: OpInfo, device: str, rng) -> None:
    """Inputs made by ``expand`` from a smaller tensor: the gradient reaching the smaller
    tensor is that of the contiguous input, summed over the expanded axis."""
    _skip_unsupported(info)
    arrays = info.sample(rng, info.shapes[0])
    small = [_shrunk(a) for a in arrays]
    leaves = [_leaf(s.copy(), device) for s in small]
    expanded = [x.expand(*a.shape) if a.ndim else x for x, a in zip(leaves, arrays)]
    plain = [np.broadcast_to(s, a.shape).copy() for s, a in zip(small, arrays)]
    expected_leaves = [_leaf(c, device) for c in plain]
    values, grads = _run(info, leaves, expanded)
    expected_values, expected_grads = _run(info, expected_leaves, expected_leaves)
    _assert_same(values, expected_values)
    summed = [
        g if g is None or (axis := _broadcast_axis(a)) is None else g.sum(axis=axis, keepdims=True)
        for g, a in zip(expected_grads, arrays)
    ]
    _assert_same(grads, summed)
