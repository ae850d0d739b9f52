"""The public functions of the ops (``pylucid.log2``, ``pylucid.add``, ...) and the Tensor
methods and operators derived from them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid import backends
from pylucid.dtypes import DType, result_type
from pylucid.ops.arithmetic import AddBackward, DivBackward, MulBackward, SubBackward
from pylucid.ops.base import Op
from pylucid.ops.conversion import ToDeviceBackward, ToDtypeBackward
from pylucid.ops.reduce import MeanBackward, SumBackward
from pylucid.ops.unary import Log2Backward, NegBackward, PowScalarBackward
from pylucid.tensor import Tensor

Number = bool | int | float
TensorLike = Tensor | Number

#: Tensor methods derived from the wrappers below, installed by :func:`install_tensor_methods`.
TENSOR_METHODS: dict[str, Callable[..., Any]] = {}


def _method(fn: Callable[..., Any]) -> Callable[..., Any]:
    TENSOR_METHODS[fn.__name__] = fn
    return fn


def _require_tensor(op: str, name: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: expected a Tensor for {name}, got {type(value).__name__}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def _lift(op: str, name: str, value: Any, like: Tensor) -> Tensor:
    """``value`` as a tensor on ``like``'s backend; a number gets ``like``'s dtype category."""
    if isinstance(value, Tensor):
        return value
    if not _is_number(value):
        raise TypeError(
            f"{op}: expected a Tensor or a Python number for {name}, got {type(value).__name__}"
        )
    dtype = result_type(like.dtype, value)
    return Tensor._make(like._backend.full((), value, dtype), like._backend, dtype)


def _binary(op_class: type[Op], a: TensorLike, b: TensorLike) -> Tensor:
    name = op_class.schema_v1.name
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{name}: at least one operand must be a Tensor, got two numbers")
    like = a if isinstance(a, Tensor) else b
    return op_class.apply(_lift(name, "a", a, like), _lift(name, "b", b, like))


def _unary_wrapper(op_class: type[Op]) -> Callable[[Tensor], Tensor]:
    name = op_class.schema_v1.name

    def wrapper(x: Tensor) -> Tensor:
        return op_class.apply(_require_tensor(name, "x", x))

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"Elementwise ``{name}`` of ``x``; see :class:`{op_class.__name__}` for the gradient."
    )
    return _method(wrapper)


log2 = _unary_wrapper(Log2Backward)
neg = _unary_wrapper(NegBackward)


@_method
def add(a: TensorLike, b: TensorLike) -> Tensor:
    """``a + b`` with NumPy broadcasting; see :class:`AddBackward`."""
    return _binary(AddBackward, a, b)


@_method
def sub(a: TensorLike, b: TensorLike) -> Tensor:
    """``a - b`` with NumPy broadcasting; see :class:`SubBackward`."""
    return _binary(SubBackward, a, b)


@_method
def mul(a: TensorLike, b: TensorLike) -> Tensor:
    """``a * b`` with NumPy broadcasting; see :class:`MulBackward`."""
    return _binary(MulBackward, a, b)


@_method
def div(a: TensorLike, b: TensorLike) -> Tensor:
    """``a / b`` (true division) with NumPy broadcasting; see :class:`DivBackward`."""
    return _binary(DivBackward, a, b)


@_method
def pow_scalar(x: Tensor, exponent: Number) -> Tensor:
    """``x ** exponent`` for a Python-number exponent; see :class:`PowScalarBackward`."""
    _require_tensor("pow_scalar", "x", x)
    if not _is_number(exponent):
        raise TypeError(
            f"pow_scalar: the exponent must be a Python number, got {type(exponent).__name__}"
        )
    return PowScalarBackward.apply(x, exponent=exponent)


def _normalize_axes(
    op: str, x: Tensor, axis: int | Sequence[int] | None, dim: int | Sequence[int] | None
) -> tuple[int, ...]:
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{op}: pass axis= or its alias dim=, not both")
        axis = dim
    if axis is None:
        return tuple(range(x.ndim))
    listed = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = []
    for a in listed:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"{op}: axes must be integers, got {a!r}")
        if not -x.ndim <= a < x.ndim:
            raise ValueError(
                f"{op}: axis {a} is out of range for a tensor of {x.ndim} dimensions "
                f"(shape {x.shape}); valid axes are {-x.ndim}..{x.ndim - 1}"
            )
        axes.append(int(a) % x.ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: axis {listed} repeats an axis")
    return tuple(sorted(axes))


def _reduction(op_class: type[Op]) -> Callable[..., Tensor]:
    name = op_class.schema_v1.name

    def wrapper(
        x: Tensor,
        axis: int | Sequence[int] | None = None,
        keepdims: bool = False,
        *,
        dim: int | Sequence[int] | None = None,
        keepdim: bool | None = None,
    ) -> Tensor:
        _require_tensor(name, "x", x)
        axes = _normalize_axes(name, x, axis, dim)
        keep = bool(keepdims if keepdim is None else keepdim)
        return op_class.apply(x, axes=axes, keepdims=keep)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"``{name}`` of ``x`` over ``axis`` (all axes when None; an int or a tuple), keeping "
        f"reduced axes as size 1 if ``keepdims``. PyTorch's ``dim=`` / ``keepdim=`` are "
        f"accepted as aliases. See :class:`{op_class.__name__}` for the gradient."
    )
    return _method(wrapper)


sum = _reduction(SumBackward)  # noqa: A001  (pylucid.sum, like numpy.sum and torch.sum)
mean = _reduction(MeanBackward)


def to_dtype(x: Tensor, dtype: DType) -> Tensor:
    """``x`` converted to ``dtype`` (``x`` itself when it already has it)."""
    if x.dtype is dtype:
        return x
    return ToDtypeBackward.apply(x, target=dtype)


def to_device(x: Tensor, device: str) -> Tensor:
    """``x`` copied to ``device`` (``"cpu"``, ``"gpu"`` or a backend name); differentiable."""
    target = backends.resolve(device)
    if target is x._backend:
        return x
    return ToDeviceBackward.apply(x, target=target)


def _reflected(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def reflected(self: Tensor, other: Any) -> Tensor:
        return fn(other, self)

    return reflected


def _operator(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def operator(self: Tensor, other: Any) -> Any:
        if not isinstance(other, Tensor) and not _is_number(other):
            return NotImplemented
        return fn(self, other)

    return operator


def _power(self: Tensor, exponent: Any) -> Tensor:
    if isinstance(exponent, Tensor):
        raise TypeError("** with a tensor exponent is not supported yet; use a Python number")
    return pow_scalar(self, exponent)


def install_tensor_methods() -> None:
    """Attach the op wrappers to :class:`~pylucid.tensor.Tensor` as methods and operators."""
    for name, fn in TENSOR_METHODS.items():
        setattr(Tensor, name, fn)
    operators = {"add": add, "sub": sub, "mul": mul, "truediv": div}
    for name, fn in operators.items():
        setattr(Tensor, f"__{name}__", _operator(fn))
        setattr(Tensor, f"__r{name}__", _operator(_reflected(fn)))
    Tensor.__neg__ = neg
    Tensor.__pow__ = _power
