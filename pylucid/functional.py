"""Function transforms in the MLX/JAX style: ``vjp``, ``value_and_grad``, ``jacobian`` and
``hessian``, built on :func:`pylucid.graph.grad` (exposed as ``pylucid.graph.vjp``, ...).

Each transform calls the function on fresh leaves (detached copies of the arguments), so the
arguments' own ``.grad`` and graphs are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid.graph.engine import grad
from pylucid.graph.grad_mode import enable_grad
from pylucid.ops.shape import stack
from pylucid.tensor import Tensor

__all__ = ["vjp", "value_and_grad", "jacobian", "hessian"]


def _leaves(primals: Sequence[Any]) -> list[Any]:
    for index, p in enumerate(primals):
        if not p.dtype.is_floating_point:
            raise TypeError(
                f"primals[{index}] is {p.dtype.name}: only floating tensors have gradients"
            )
    return [p.detach().requires_grad_() for p in primals]


def _zeros_like(x: Tensor, shape: tuple[int, ...] | None = None) -> Tensor:
    """Zeros with ``x``'s dtype and device, of ``x``'s shape or ``shape``."""
    return x._wrap_grad(x._backend.full(x.shape if shape is None else shape, 0.0, x.dtype))


def _unit(like: Tensor, index: int) -> Tensor:
    """The one-hot vector ``e_index`` with ``like``'s size, dtype and device."""
    unit = np.zeros(like.numel())
    unit[index] = 1.0
    return like._wrap_grad(like._backend.from_numpy(unit, like.dtype))


def _grads(
    outputs: Any, leaves: list[Any], cotangents: Any, create_graph: bool, retain: bool = False
) -> list[Any]:
    """The gradients of ``outputs`` at ``leaves`` (zeros for unused leaves); ``retain`` keeps
    the graph for another pass."""
    differentiable = [o for o in outputs if o.requires_grad]
    if not differentiable:
        return [_zeros_like(x) for x in leaves]
    kept = [c for o, c in zip(outputs, cotangents) if o.requires_grad]
    found = grad(
        differentiable,
        leaves,
        kept,
        retain_graph=retain or create_graph,
        create_graph=create_graph,
        allow_unused=True,
    )
    return [g if g is not None else _zeros_like(x) for g, x in zip(found, leaves)]


def vjp(
    fn: Callable[..., Any], primals: Sequence[Any], cotangents: Sequence[Any]
) -> tuple[list[Any], list[Any]]:
    """The outputs of ``fn(*primals)`` and the vector-Jacobian products
    ``cotangents · ∂outputs/∂primals``, as MLX's ``vjp``.

    Returns
    -------
    (list of Tensor, list of Tensor)
        The outputs, and one product per primal (zeros where an output does not depend on
        it).
    """
    leaves = _leaves(primals)
    with enable_grad():
        result = fn(*leaves)
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(outputs) != len(cotangents):
        raise ValueError(f"vjp: {len(outputs)} outputs but {len(cotangents)} cotangents")
    products = _grads(outputs, leaves, list(cotangents), create_graph=False)
    return [o.detach() for o in outputs], products


def value_and_grad(
    fn: Callable[..., Any], argnums: int | Sequence[int] = 0
) -> Callable[..., tuple[Any, Any]]:
    """A function returning ``(fn(*args), gradient of fn w.r.t. args[argnums])`` for a
    scalar-valued ``fn``; the gradient is a tuple when ``argnums`` is a sequence."""
    several = not isinstance(argnums, int)
    indices = list(argnums) if several else [argnums]

    def wrapped(*args: Any) -> tuple[Any, Any]:
        args = list(args)
        leaves = _leaves([args[i] for i in indices])
        for i, leaf in zip(indices, leaves):
            args[i] = leaf
        with enable_grad():
            value = fn(*args)
        if value.numel() != 1:
            raise ValueError(
                f"value_and_grad: the function must return one element, got shape {value.shape}"
            )
        grads = _grads([value], leaves, [None], create_graph=False)
        return value.detach(), tuple(grads) if several else grads[0]

    return wrapped


def _jacobian(fn: Callable[..., Any], leaves: list[Any], create_graph: bool) -> list[Any]:
    """d fn / d leaf for each leaf, each shaped ``output.shape + leaf.shape``."""
    with enable_grad():
        output = fn(*leaves)
    rows: list[list[Any]] = [[] for _ in leaves]
    flat = output.reshape((output.numel(),))
    for j in range(output.numel()):
        last = j == output.numel() - 1
        units = [_unit(flat, j)]
        for row, g in zip(rows, _grads([flat], leaves, units, create_graph, retain=not last)):
            row.append(g)
    return [  # an output without elements has an empty Jacobian, of the same shape rule
        stack(row).reshape(output.shape + leaf.shape)
        if row
        else _zeros_like(leaf, output.shape + leaf.shape)
        for row, leaf in zip(rows, leaves)
    ]


def jacobian(fn: Callable[..., Any], primals: Any | Sequence[Any]) -> Any:
    """The Jacobian of ``fn`` at ``primals``: shape ``output.shape + primal.shape`` (one
    backward per output element: for small functions). A tuple when ``primals`` is."""
    several = isinstance(primals, (list, tuple))
    result = _jacobian(fn, _leaves(list(primals) if several else [primals]), False)
    return tuple(result) if several else result[0]


def hessian(fn: Callable[..., Any], primal: Any) -> Any:
    """The Hessian of a scalar-valued ``fn`` at ``primal``: shape ``primal.shape * 2``."""
    (leaf,) = _leaves([primal])

    def gradient(x: Any) -> Any:
        value = fn(x)
        if value.numel() != 1:
            raise ValueError(f"hessian: fn must return one element, got shape {value.shape}")
        (g,) = grad(value, x, create_graph=True)
        return g

    return _jacobian(gradient, [leaf], False)[0]
