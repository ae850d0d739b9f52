"""In-place ops: ``add_``, ``sub_``, ``mul_``, ``div_``, ``zero_``, ``copy_`` and
``x[index] = value``.

An in-place op runs its out-of-place twin (so its gradient is that op's), writes the result
into the tensor's memory (numba; MLX arrays are immutable, so there the tensor takes the new
array), bumps the tensor's version counter and makes the tensor the twin's output in the
graph. Safety, as in PyTorch:

- on a leaf that requires grad, with grad mode on, it raises at once (its ``.grad`` would
  describe values that no longer exist);
- a node that saved the tensor before the change raises at backward time, naming itself
  (the version counter moved);
- the twin's own node keeps a private copy of the old values when its gradient needs them
  (``mul_``, ``div_``), so ``x.mul_(y)`` is still differentiable.
"""

from __future__ import annotations

from collections.abc import Callable

from pylucid.dtypes import bool_, promote_types
from pylucid.graph.grad_mode import is_grad_enabled, is_inference_mode_enabled
from pylucid.ops.arithmetic import add, div, mul, sub
from pylucid.ops.binary import where
from pylucid.ops.indexing import setitem
from pylucid.ops.wrapping import TensorLike, dunder, is_number, tensor_method
from pylucid.tensor import Tensor

__all__ = ["add_", "copy_", "div_", "mul_", "sub_", "zero_"]


def _check(op: str, x: Tensor) -> None:
    if is_grad_enabled() and x.requires_grad and x.is_leaf:
        raise RuntimeError(
            f"{op}: x is a leaf tensor that requires grad (shape {x.shape}); an in-place "
            f"change would make its gradient describe values that no longer exist. Do it "
            f"under pylucid.no_grad() (e.g. a parameter update), or on a copy"
        )
    if x._is_inference and not is_inference_mode_enabled():
        raise RuntimeError(f"{op}: x is an inference tensor; change it inside inference_mode")
    if x._view_of is not None and x.grad_fn is not None:
        raise RuntimeError(
            f"{op}: x (shape {x.shape}) is a view (from {x.grad_fn.name}) of a tensor in a "
            f"graph; the base tensor's history would not see the change: change a copy, or "
            f"the base tensor"
        )


def _holders(node: object, x: Tensor) -> list[object]:
    """The saved values, in the nodes the twin just recorded, that hold ``x``."""
    holders, stack, seen = [], [node], set()
    while stack:
        current = stack.pop()
        if current is None or current in seen or current is x.grad_fn:
            continue
        seen.add(current)
        saved = getattr(current, "saved", None)
        if saved is not None and saved.holds(x):
            holders.append(saved)
        if getattr(current, "variable", None) is None:
            stack.extend(current.next_edges)
    return holders


def _commit(op: str, x: Tensor, compute: Callable[[], Tensor]) -> Tensor:
    """Run ``compute`` (the out-of-place twin on ``x``), then make its result ``x``'s value
    and ``x`` its output in the graph; return ``x``."""
    _check(op, x)
    result = compute()
    if result.shape != x.shape:
        raise ValueError(
            f"{op}: the result has shape {result.shape}, but the tensor has shape {x.shape}; "
            f"an in-place op cannot change the shape (the other operand broadcasts larger)"
        )
    if promote_types(result.dtype, x.dtype) is not x.dtype:
        raise TypeError(
            f"{op}: the result is {result.dtype.name}, which cannot be stored in place into a "
            f"{x.dtype.name} tensor"
        )
    if result.dtype is not x.dtype:
        result = result.to(x.dtype)
    node = result.grad_fn
    holders = _holders(node, x) if node is not None else []
    if holders:  # the twin's gradient needs x's old values: give it a private copy
        snapshot = Tensor._make(x._backend.clone(x._storage), x._backend, x.dtype)
        snapshot.grad_fn, snapshot._requires_grad = x.grad_fn, x.requires_grad
        for saved in holders:
            saved.rebind(x, snapshot)
    stored = x._backend.write(x._storage, result._storage)
    if stored is not x._storage and x._view_of is not None:
        raise RuntimeError(
            f"{op}: x is a view, and the {x.backend} backend cannot write through views "
            f"(its arrays are immutable); change the base tensor instead"
        )
    x._storage = stored
    x._version.bump()
    if node is not None:
        x.grad_fn, x._requires_grad = node, True
    return x


def _operand(op: str, value: object) -> TensorLike:
    if not isinstance(value, Tensor) and not is_number(value):
        raise TypeError(f"{op}: expected a Tensor or a Python number, got {type(value).__name__}")
    return value


@tensor_method
def add_(x: Tensor, other: TensorLike) -> Tensor:
    """``x += other`` in place; see :func:`pylucid.add`."""
    return _commit("add_", x, lambda: add(x, _operand("add_", other)))


@tensor_method
def sub_(x: Tensor, other: TensorLike) -> Tensor:
    """``x -= other`` in place; see :func:`pylucid.sub`."""
    return _commit("sub_", x, lambda: sub(x, _operand("sub_", other)))


@tensor_method
def mul_(x: Tensor, other: TensorLike) -> Tensor:
    """``x *= other`` in place; see :func:`pylucid.mul`."""
    return _commit("mul_", x, lambda: mul(x, _operand("mul_", other)))


@tensor_method
def div_(x: Tensor, other: TensorLike) -> Tensor:
    """``x /= other`` in place (true division; integer tensors refuse it); see
    :func:`pylucid.div`."""
    return _commit("div_", x, lambda: div(x, _operand("div_", other)))


def _replace(x: Tensor, value: TensorLike) -> Tensor:
    """``value`` broadcast to ``x``: ``where(False, x, value)``, so the old values (even nan)
    get a zero gradient and ``value`` all of it."""
    keep_none = Tensor._make(x._backend.full(x.shape, False, bool_), x._backend, bool_)
    return where(keep_none, x, value)


@tensor_method
def zero_(x: Tensor) -> Tensor:
    """Set every element to zero in place (nan and inf too); the old values get a zero
    gradient."""
    return _commit("zero_", x, lambda: _replace(x, 0))


@tensor_method
def copy_(x: Tensor, src: Tensor) -> Tensor:
    """Copy ``src`` (broadcast to ``x``'s shape, converted to its dtype and device) into
    ``x`` in place; the gradient flows to ``src`` and none to the old values."""
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_: expected a Tensor source, got {type(src).__name__}")
    moved = src.to(x.device) if src._backend is not x._backend else src
    return _commit("copy_", x, lambda: _replace(x, moved))


@dunder("__setitem__")
def _assign(x: Tensor, index: object, value: TensorLike) -> None:
    """``x[index] = value`` in place; see :func:`pylucid.setitem` (its out-of-place twin: the
    gradient of ``value`` is the indexed gradient, the overwritten old values get none)."""
    _commit("__setitem__", x, lambda: setitem(x, index, value))
