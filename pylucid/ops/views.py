"""Aliases of one memory kept consistent across in-place ops: values and graph.

A view op (a basic index, ``transpose``, ``permute``, ``reshape`` where the strides allow,
``expand``) and ``detach`` give a tensor that shares its input's memory; it records its root,
the view steps from the root and, for a differentiable view, its autograd base
(:meth:`pylucid.tensor.Tensor._alias`). An in-place op (:mod:`pylucid.ops.inplace`) then does
what PyTorch does, on both backends:

- **values**: on numba the new values are written into the shared memory, so every alias sees
  them. MLX arrays are immutable: the values of a view are scattered into a new array of its
  root (:func:`rebind`), and every live alias of the root is recomputed from it by replaying
  its view steps, which costs one lazy MLX view op per step.
- **graph**: when the result requires grad, a differentiable view's autograd base takes the
  history "the base with the view's elements replaced by the result" - a ``setitem`` node over
  the positions the view sees, PyTorch's ``CopySlices`` - and every live view of that base
  gets a ``grad_fn`` recomputed from the base's new one (:func:`rebase`). PyTorch recomputes
  them lazily, when one is next read; here it is done at once, as in-place ops on graphs are
  rare and a base has few live views.

A view made under ``no_grad`` cannot take history from an in-place op in grad mode (PyTorch
refuses the same): which of the two the user meant is ambiguous.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pylucid.backends.base import Shape
from pylucid.dtypes import int64
from pylucid.graph.grad_mode import enable_grad
from pylucid.ops.base import DispatchPlan
from pylucid.ops.indexing import GetitemBackward, IndexPlan, SetitemBackward, plan_index
from pylucid.tensor import Tensor

__all__ = ["check_writable", "rebase", "rebind", "reshape_is_view", "write"]

Steps = tuple[tuple[type, dict[str, Any]], ...]


def _numba() -> Any:
    from pylucid import backends

    return backends.get("numba")


def _replay(backend: Any, storage: Any, shape: Shape, steps: Steps, dtype: Any) -> Any:
    """``storage`` (of ``shape``) through the view ops ``steps`` on ``backend``."""
    for op_class, params in steps:
        shape = op_class.output_shape([shape], **params)
        storage = op_class.dispatch(backend, storage, shape=shape, dtype=dtype, **params)
    return storage


def _positions(shape: Shape, steps: Steps) -> np.ndarray:
    """For each element of the view that ``steps`` make of a tensor of ``shape``, its
    row-major position in that tensor."""
    flat = np.arange(math.prod(shape), dtype=np.intp).reshape(shape)
    return np.asarray(_replay(_numba(), flat, shape, steps, int64))


def _plan(shape: Shape, steps: Steps, view_shape: Shape) -> IndexPlan:
    """The index into a tensor of ``shape`` that selects, in order, the elements of its view
    made by ``steps`` (of ``view_shape``)."""
    if len(steps) == 1 and steps[0][0] is GetitemBackward:
        return steps[0][1]["plan"]
    if not shape:  # a view of a 0-d tensor holds its one element (or none)
        return plan_index("in-place", (None,) * len(view_shape), shape)
    positions = _positions(shape, steps)
    return plan_index("in-place", np.unravel_index(positions, shape), shape)


def _refresh(root: Tensor) -> None:
    """Recompute the storage of every live alias of ``root`` from ``root``'s (mlx)."""
    for alias in root._aliases():
        alias._storage = _replay(
            root._backend, root._storage, root._shape, alias._view_steps, alias._dtype
        )


def rebind(tensor: Tensor, storage: Any) -> None:
    """Make ``storage`` the values of ``tensor`` on a backend whose arrays are immutable: a
    root takes it; a view's values are scattered into a new array of its root. Then every
    alias of the root is recomputed."""
    root = tensor if tensor._base is None else tensor._base
    steps = tensor._view_steps if tensor._base is not None else ()
    if steps:
        plan = _plan(root._shape, steps, tensor._shape)
        storage = root._backend.setitem(
            root._storage, plan.index, plan.mesh, storage, root._shape, root._dtype
        )
    root._storage = storage
    _refresh(root)


def write(tensor: Tensor, storage: Any) -> None:
    """Put ``storage`` (of ``tensor``'s shape and dtype) into ``tensor``'s memory, so that
    every alias of that memory sees the new values (none, if it is empty)."""
    if not math.prod(tensor._shape):
        return
    stored = tensor._backend.write(tensor._storage, storage)
    if stored is not tensor._storage:  # immutable arrays: the root takes new ones
        rebind(tensor, stored)


def check_writable(op: str, x: Tensor) -> None:
    """Refuse, before anything changes, an in-place op on memory that cannot take it: a
    read-only array, or a view several of whose elements are one element in memory. An
    empty tensor takes any in-place op: nothing is written."""
    if not math.prod(x._shape):
        return
    if x._base is not None:
        shape = x._base._shape
        for op_class, params in x._view_steps:
            if op_class.view_overlaps(shape, **params):
                raise RuntimeError(
                    f"{op}: x (shape {x.shape}) is an expanded view, several of whose elements "
                    f"are one element in memory, so an in-place change is ambiguous; change "
                    f"a copy (x.clone()) instead"
                )
            shape = op_class.output_shape([shape], **params)
    if not x._backend.is_writable(x._storage):
        raise RuntimeError(
            f"{op}: x (shape {x.shape}) is read-only (from a read-only NumPy array, or a "
            f"broadcast view); change a copy (x.clone()) instead"
        )


def rebase(x: Tensor, result: Tensor) -> None:
    """Give ``x``, changed in place to the values of ``result`` (which requires grad), the
    history of that change, and recompute the ``grad_fn`` of the views that see it."""
    if x._base is None or x._grad_depth == 0:  # an autograd root: it takes result's history
        x._set_grad_fn(result.grad_fn)
        _regenerate(x)
        return
    base = x._grad_base
    steps = x._view_steps[len(x._view_steps) - x._grad_depth :]
    node = SetitemBackward()
    params = {"plan": _plan(base._shape, steps, x._shape), "writes": None}
    inputs = [base, result]
    plan = DispatchPlan(SetitemBackward, inputs, params)
    node._record(inputs, [base._storage, result._storage], base._storage, base, plan, params)
    base._set_grad_fn(node)
    _regenerate(base)


def _regenerate(base: Tensor) -> None:
    """Recompute the ``grad_fn`` of every live differentiable view of ``base`` from
    ``base``'s, by running its view steps again on ``base``."""
    root = base if base._base is None else base._base
    with enable_grad():
        for view in root._aliases():
            if view._base is None or view._grad_depth <= 0 or view._grad_base is not base:
                continue
            current = base
            for op_class, params in view._view_steps[len(view._view_steps) - view._grad_depth :]:
                current = op_class.apply(current, **params)
            view.grad_fn, view._requires_grad = current.grad_fn, current._requires_grad


def reshape_is_view(x: Tensor, shape: Shape) -> bool:
    """Whether NumPy would reshape ``x`` to ``shape`` without a copy, for a backend without
    views of its own (mlx): ``x``'s layout is that of its view steps applied to a
    C-contiguous root, replayed on an array that has strides but no memory."""
    if x._base is None:
        return True
    root = x._base._shape
    strides = [math.prod(root[i + 1 :]) for i in range(len(root))]
    layout = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), root, strides)
    for op_class, params in x._view_steps:
        layout = op_class.view_layout(layout, **params)
    try:
        np.reshape(layout, shape, copy=False)
    except ValueError:
        return False
    return True
