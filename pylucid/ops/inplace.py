"""In-place ops: ``add_``, ``sub_``, ``mul_``, ``div_``, ``pow_``, ``zero_``, ``fill_``,
``copy_``, ``masked_fill_``, ``clamp_``, ``index_add_``, ``x[index] = value`` and the augmented
assignments ``+= -= *= /= **=``.

An in-place op runs its out-of-place twin (so its gradient is that op's), puts the result into
the tensor's memory, bumps the version counter that every alias of that memory shares, and
gives the tensor the twin's history; on a view, the history goes to the view's base and every
alias sees the new values, on both backends (:mod:`pylucid.ops.views`). Safety, as in PyTorch:

- on a leaf that requires grad (or a view of one), with grad mode on, it raises at once (its
  ``.grad`` would describe values that no longer exist);
- a node that saved the tensor, or an alias of its memory, before the change raises at
  backward time, naming itself (the version counter moved);
- the twin's own node keeps a private copy of the old values when its gradient needs them
  (``mul_``, ``div_``), so ``x.mul_(y)`` is still differentiable;
- the result keeps the tensor's dtype and shape: a result of a higher category (a float
  into an int tensor) or a larger broadcast shape raises; a float64 result is stored into a
  float32 tensor, as PyTorch casts;
- every check runs before anything changes: a refused op leaves no trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.dtypes import bool_
from pylucid.graph.grad_mode import is_grad_enabled, is_inference_mode_enabled
from pylucid.ops import views
from pylucid.ops.activations import clamp
from pylucid.ops.arithmetic import (
    AddBackward,
    DivBackward,
    MulBackward,
    SubBackward,
    add,
    div,
    mul,
    sub,
)
from pylucid.ops.base import DispatchPlan, Op, dispatch_plan
from pylucid.ops.binary import pow, where  # noqa: A004  (pylucid.pow, as torch.pow)
from pylucid.ops.gathering import index_add
from pylucid.ops.indexing import setitem
from pylucid.ops.selection import masked_fill
from pylucid.ops.wrapping import (
    TENSOR_METHODS,
    TensorLike,
    dunder,
    is_number,
    lift,
    tensor_method,
)
from pylucid.tensor import Tensor

__all__ = [
    "add_",
    "in_place",
    "clamp_",
    "copy_",
    "div_",
    "fill_",
    "index_add_",
    "masked_fill_",
    "mul_",
    "pow_",
    "sub_",
    "zero_",
]


def _check(op: str, x: Tensor) -> None:
    if x._requires_grad and is_grad_enabled():
        base = x if x._base is None or x._grad_depth <= 0 else x._grad_base
        if base.grad_fn is None and base._requires_grad:
            what = "a leaf tensor" if base is x else "a view of a leaf tensor"
            raise RuntimeError(
                f"{op}: x is {what} that requires grad (shape {base.shape}); an in-place "
                f"change would make its gradient describe values that no longer exist. Do it "
                f"under pylucid.no_grad() (e.g. a parameter update), or on a copy"
            )
    if x._is_inference and not is_inference_mode_enabled():
        raise RuntimeError(f"{op}: x is an inference tensor; change it inside inference_mode")
    views.check_writable(op, x)


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


def _commit(
    op: str, x: Tensor, compute: Callable[[], Tensor], in_memory: Callable[[], bool] | None = None
) -> Tensor:
    """Run ``compute`` (the out-of-place twin on ``x``), then make its result ``x``'s value
    and give ``x`` (or its base) the history; return ``x``. ``in_memory``, where given, may
    do all of that itself, straight into ``x``'s memory (:func:`_into`): True if it did."""
    _check(op, x)
    if in_memory is not None and in_memory():
        x._version.bump()
        return x
    result = compute()
    shape, dtype = x._shape, x._dtype  # (the private fields: this runs for every update)
    if result._shape != shape:
        raise ValueError(
            f"{op}: the result has shape {result.shape}, but the tensor has shape {shape}; "
            f"an in-place op cannot change the shape (the other operand broadcasts larger)"
        )
    if result._dtype is not dtype and result._dtype.category > dtype.category:
        raise TypeError(
            f"{op}: the result is {result.dtype.name}, which cannot be stored in place into a "
            f"{dtype.name} tensor (PyTorch's rule: floats do not go into integer tensors, "
            f"numbers into bool ones); convert x first, e.g. x.to(pylucid.float32)"
        )
    node = result.grad_fn
    if node is not None and x._base is not None and x._grad_depth < 0:
        raise RuntimeError(
            f"{op}: x (shape {shape}) is a view made under no_grad, and this in-place change "
            f"in grad mode would have a gradient: whether the base should take it is "
            f"ambiguous. Make the view and the change both inside no_grad, or both outside"
        )
    if result._dtype is not dtype:
        result = result.to(dtype)
        node = result.grad_fn
    if node is not None:
        holders = _holders(node, x)
        if holders:  # the twin's gradient needs x's old values: give it a private copy
            snapshot = Tensor._make(x._backend.clone(x._storage), x._backend, dtype)
            snapshot.grad_fn, snapshot._requires_grad = x.grad_fn, x._requires_grad
            for saved in holders:
                saved.rebind(x, snapshot)
    views.write(x, result._storage)
    x._version.bump()
    if node is not None:
        views.rebase(x, result)
    return x


#: DispatchPlan of the out-of-place twin -> the backend's in-place runner for it, or None
#: (``_bind_in_place``); emptied at :data:`IN_PLACE_CACHE_SIZE` entries.
_IN_PLACE: dict[DispatchPlan, Callable[[Any, Any], bool] | None] = {}
IN_PLACE_CACHE_SIZE = 4096


def _in_place_runner(op_class: type[Op], plan: DispatchPlan) -> Callable[[Any, Any], bool] | None:
    runner = _IN_PLACE.get(plan, _IN_PLACE)
    if runner is _IN_PLACE:  # (the dict itself: not planned yet)
        bind = getattr(plan.backend, "_bind_in_place", None)  # (an optional fast path)
        (shape, other_shape), (dtype, other_dtype) = plan.input_shapes, plan.input_dtypes
        runner = None if bind is None else bind(
            op_class.primitive, shape, dtype, other_shape, other_dtype
        )  # fmt: skip
        if len(_IN_PLACE) >= IN_PLACE_CACHE_SIZE:
            _IN_PLACE.clear()
        _IN_PLACE[plan] = runner
    return runner


def _into(op_class: type[Op], x: Tensor, other: TensorLike) -> bool:
    """``x = op_class(x, other)`` computed straight into ``x``'s memory by the backend's
    in-place loop, where that is all :func:`_commit` would do - no node would be recorded,
    ``x`` is not a view, the twin casts nothing and its result has ``x``'s shape and dtype -
    and ``other`` is a number or a tensor whose memory is ``x``'s own or apart from it (one
    overlapping ``x`` at an offset would be read after it is written). True if it ran;
    False, with nothing changed, for the general path.

    The same scalar function on the same elements as the twin's loop: the bits of
    ``_commit``'s copy, without the new array, its copy into ``x`` and the result tensor."""
    grad = is_grad_enabled()
    if x._base is not None or (grad and x._requires_grad):
        return False
    if type(other) is not Tensor:
        if not is_number(other):
            return False
        other = lift(op_class.schema_v1.name, "b", other, x)
    elif grad and other._requires_grad:
        return False
    plan = dispatch_plan(op_class, (x, other), {})
    if plan.casts_any or plan.shape != x._shape or plan.result_dtype is not x._dtype:
        return False
    runner = _in_place_runner(op_class, plan)
    if runner is None:
        return False
    target, source = x._storage, other._storage
    if source is not target and x._backend.aliases(source, target):
        return False
    return runner(target, source)


def _scaled(operand: TensorLike, alpha: float) -> TensorLike:
    """``alpha * operand`` (PyTorch's ``alpha=`` of add and sub), the operand itself for 1."""
    return operand if alpha == 1 else operand * alpha


def _operand(op: str, value: object) -> TensorLike:
    if isinstance(value, (list, tuple)):
        raise TypeError(
            f"{op}: expected a Tensor, a NumPy array or a Python number, got a "
            f"{type(value).__name__}; make it a tensor first (pylucid.tensor(...))"
        )
    return value


@tensor_method
def add_(x: Tensor, other: TensorLike, *, alpha: float = 1) -> Tensor:
    """``x += alpha * other`` in place; see :func:`pylucid.add`."""
    operand = _scaled(_operand("add_", other), alpha)
    return _commit("add_", x, lambda: add(x, operand), lambda: _into(AddBackward, x, operand))


@tensor_method
def sub_(x: Tensor, other: TensorLike, *, alpha: float = 1) -> Tensor:
    """``x -= alpha * other`` in place; see :func:`pylucid.sub`."""
    operand = _scaled(_operand("sub_", other), alpha)
    return _commit("sub_", x, lambda: sub(x, operand), lambda: _into(SubBackward, x, operand))


@tensor_method
def mul_(x: Tensor, other: TensorLike) -> Tensor:
    """``x *= other`` in place; see :func:`pylucid.mul`."""
    operand = _operand("mul_", other)
    return _commit("mul_", x, lambda: mul(x, operand), lambda: _into(MulBackward, x, operand))


@tensor_method
def div_(x: Tensor, other: TensorLike) -> Tensor:
    """``x /= other`` in place (true division; integer tensors refuse it); see
    :func:`pylucid.div`."""
    operand = _operand("div_", other)
    return _commit("div_", x, lambda: div(x, operand), lambda: _into(DivBackward, x, operand))


@tensor_method
def pow_(x: Tensor, exponent: TensorLike) -> Tensor:
    """``x **= exponent`` in place; see :func:`pylucid.pow`."""
    return _commit("pow_", x, lambda: pow(x, _operand("pow_", exponent)))


def _augmented(in_place: Callable[[Tensor, TensorLike], Tensor]) -> Callable[..., object]:
    """``x op= other`` as the in-place op, so ``w -= lr * w.grad`` changes ``w`` itself
    (NotImplemented for an operand no op takes, so Python raises its usual TypeError)."""

    def augmented(x: Tensor, other: object) -> object:
        if not isinstance(other, (Tensor, np.ndarray)) and not is_number(other):
            return NotImplemented
        return in_place(x, other)

    augmented.__doc__ = f"In place: see :func:`{in_place.__name__}`."
    return augmented


for _name, _in_place in (
    ("__iadd__", add_),
    ("__isub__", sub_),
    ("__imul__", mul_),
    ("__itruediv__", div_),
    ("__ipow__", pow_),
):
    dunder(_name)(_augmented(_in_place))


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
    return _commit("copy_", x, lambda: _replace(x, moved.to(x.dtype)))


@tensor_method
def fill_(x: Tensor, value: TensorLike) -> Tensor:
    """Set every element to ``value`` (a number or a one-element tensor) in place."""
    if isinstance(value, Tensor) and value.numel() != 1:
        raise ValueError(
            f"fill_: the value must be a number or a one-element tensor, got shape {value.shape}"
        )
    return _commit("fill_", x, lambda: _replace(x, value.reshape(()) if isinstance(
        value, Tensor) else value))  # fmt: skip


@tensor_method
def masked_fill_(x: Tensor, mask: Tensor, value: TensorLike) -> Tensor:
    """:func:`pylucid.masked_fill` in place."""
    return _commit("masked_fill_", x, lambda: masked_fill(x, mask, value))


@tensor_method
def clamp_(x: Tensor, min: TensorLike | None = None, max: TensorLike | None = None) -> Tensor:  # noqa: A002
    """:func:`pylucid.clamp` in place."""
    return _commit("clamp_", x, lambda: clamp(x, min, max))


@tensor_method
def index_add_(
    x: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1
) -> Tensor:
    """:func:`pylucid.index_add` in place."""
    return _commit("index_add_", x, lambda: index_add(x, dim, index, source, alpha=alpha))


@dunder("__setitem__")
def _assign(x: Tensor, index: object, value: TensorLike) -> None:
    """``x[index] = value`` in place; see :func:`pylucid.setitem` (its out-of-place twin: the
    gradient of ``value`` is the indexed gradient, the overwritten old values get none)."""
    _commit("__setitem__", x, lambda: setitem(x, index, value))


def in_place(op: str, x: Tensor, compute: Callable[[], Tensor]) -> Tensor:
    """Make ``compute()`` (an out-of-place function of ``x``) ``x``'s value in place and
    return ``x``, with the checks and history of every in-place op (see the module): what
    ``inplace=True`` of PyTorch's functional layers means, the caller being free to ignore
    the result and read ``x``."""
    return _commit(op, x, compute)


def _in_place_twin(name: str, twin: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``x.<name>_(...)``: ``twin(x, ...)`` committed into ``x`` (see the module)."""
    op = f"{name}_"

    def in_place(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return _commit(op, x, lambda: twin(x, *args, **kwargs))

    in_place.__name__ = in_place.__qualname__ = op
    in_place.__doc__ = f":func:`pylucid.{name}` in place."
    return in_place


#: The out-of-place ops whose in-place method (``x.exp_()``) PyTorch programs call.
IN_PLACE_TWINS = (
    "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "floor", "ceil",
    "round", "trunc", "sin", "cos", "reciprocal", "square", "sign", "clamp_min", "clamp_max",
    "clip", "lerp", "addcmul", "addcdiv", "scatter", "scatter_add",
)  # fmt: skip


def add_in_place_twins() -> None:
    """Register ``x.<name>_(...)`` for each of :data:`IN_PLACE_TWINS` from the Tensor method
    of the out-of-place op (called by :mod:`pylucid.ops` once every family is imported)."""
    for name in IN_PLACE_TWINS:
        tensor_method(_in_place_twin(name, TENSOR_METHODS[name]))
