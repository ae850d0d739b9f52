"""What every op wrapper shares: argument checks, scalar lifting, axis normalisation, and
the Tensor methods and operators derived from the wrappers.

Each op module defines its public wrapper next to its node class, built with the helpers
here (``unary_wrapper``, ``binary``, ``reduction_wrapper``) and marked ``@tensor_method``
where PyTorch has a method of that name."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid.dtypes import (
    DType,
    as_dtype,
    bool_,
    float32,
    int32,
    int64,
    on_default_change,
    result_type,
)
from pylucid.ops.base import Op
from pylucid.tensor import Tensor

Number = bool | int | float
TensorLike = Tensor | Number | np.ndarray

#: Tensor methods derived from the op wrappers, installed by :func:`install_tensor_methods`.
TENSOR_METHODS: dict[str, Callable[..., Any]] = {}
#: Binary operator stems (``"add"``: ``__add__`` and ``__radd__``) to wrappers.
BINARY_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {}
#: The stems whose wrapper is ``binary(op_class, a, b)``, to that op class: their operators
#: apply it directly.
BINARY_OPERATOR_OPS: dict[str, type[Op]] = {}
#: Other dunders (``"__neg__"``, ``"__getitem__"``) to functions.
DUNDERS: dict[str, Callable[..., Any]] = {}


def tensor_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: also install ``fn`` as the Tensor method of the same name."""
    TENSOR_METHODS[fn.__name__] = fn
    return fn


def binary_operator(
    *stems: str, op: type[Op] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: install the wrapper as ``__stem__`` and ``__rstem__`` for each stem.
    ``op``: the wrapper is ``binary(op, a, b)``, which the operators then do themselves
    (two calls fewer per operator: what a chain of tiny ops spends its time on)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for stem in stems:
            BINARY_OPERATORS[stem] = fn
            if op is not None:
                BINARY_OPERATOR_OPS[stem] = op
        return fn

    return register


def dunder(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: install ``fn`` as the given Tensor dunders (``"__neg__"``)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            DUNDERS[name] = fn
        return fn

    return register


def require_tensor(op: str, name: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: expected a Tensor for {name}, got {type(value).__name__}")
    return value


#: The types of a Python or NumPy number.
_NUMBER_TYPES = (bool, int, float, np.bool_, np.integer, np.floating)
#: What an operator takes beside a Tensor: a number or a NumPy array (or a Tensor subclass).
_OPERANDS = (Tensor, np.ndarray, *_NUMBER_TYPES)


def is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER_TYPES)


def lift(op: str, name: str, value: Any, like: Tensor) -> Tensor:
    """``value`` as a tensor on ``like``'s backend.

    A NumPy array becomes a tensor of its dtype. A number becomes a 0-d tensor marked as a
    number (``_wrapped``): in promotion it decides the category, not the width (it gets
    ``like``'s dtype, or the default of a higher category, :func:`~pylucid.dtypes.result_type`),
    and it is stored at float32 precision where that dtype is a half one, so that
    ``float16(0.853) * 70000.0`` computes with 70000 (:attr:`Op.weak_scalars`).

    Raises
    ------
    OverflowError
        For a Python integer that the result's integer dtype cannot hold (PyTorch silently
        wraps it around).
    """
    kind = type(value)
    if kind is float or kind is int:  # a program's constants: one lookup (zeros are not kept)
        wrapped = _NUMBERS.get((value, kind, like._dtype, like._backend)) if value else None
        if wrapped is not None:
            return wrapped
    elif isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        try:
            dtype = as_dtype(value.dtype)
        except TypeError as exc:
            raise TypeError(f"{op}: {name} is a NumPy array of unsupported dtype: {exc}") from None
        return Tensor._make(like._backend.from_numpy(value, dtype), like._backend, dtype)
    if not is_number(value):
        raise TypeError(
            f"{op}: expected a Tensor, a NumPy array or a Python number for {name}, got "
            f"{type(value).__name__}"
        )
    key = (value, kind, like._dtype, like._backend)
    wrapped = _NUMBERS.get(key) if value else None  # (0.0 == -0.0: zeros are not kept)
    if wrapped is None:
        wrapped = _wrap_number(op, name, value, like)
        if value and not wrapped._is_inference:  # (an inference tensor cannot be saved)
            if len(_NUMBERS) >= NUMBER_CACHE_SIZE:
                _NUMBERS.clear()
            _NUMBERS[key] = wrapped
    return wrapped


def _wrap_number(op: str, name: str, value: Any, like: Tensor) -> Tensor:
    dtype, stored = _lifted_dtypes(like.dtype, type(value))
    if stored.is_floating_point:
        if stored is float32 and abs(value) > _FLOAT32_MAX:  # (False for nan)
            value = math.copysign(math.inf, value)  # beyond float32: inf, as PyTorch gives
    elif stored is not bool_:
        low, high = _INTEGER_RANGES[stored]
        if not low <= value <= high:
            raise OverflowError(
                f"{op}: the Python integer {value} for {name} does not fit {stored.name}, the "
                f"dtype of the result (range {low}..{high}); make the other operand a wider "
                f"dtype first, e.g. x.to(pylucid.int64)"
            )
    storage = like._backend.full((), value, stored)
    wrapped = Tensor._make(storage, like._backend, stored)
    wrapped._wrapped = True
    _LIFTED_STORAGES[id(storage)] = storage
    return wrapped


def is_lifted_number(storage: Any) -> bool:
    """Whether ``storage`` is the array of a lifted Python number (:func:`lift`): a
    constant that nothing changes, even after :data:`_NUMBERS` dropped its tensor - a
    compiled step's trace keeps it as a constant (:mod:`pylucid.compiler.plan`)."""
    return _LIFTED_STORAGES.get(id(storage)) is storage


#: Lifted numbers by (value, type, the other operand's dtype, backend): a loop's constants
#: (``y * 3.0 + 2.0``) are lifted once. The tensors are internal - never handed to the
#: user, never changed in place - so one can serve every op that uses its number.
_NUMBERS: dict[tuple, Tensor] = {}
#: The storages of lifted numbers by id, while they live (:func:`is_lifted_number`).
_LIFTED_STORAGES: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
NUMBER_CACHE_SIZE = 1024
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INTEGER_RANGES = {
    d: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max)) for d in (int32, int64)
}
#: (tensor dtype, number type) -> (the result's dtype, the dtype the number is stored in).
_LIFTED: dict[tuple[DType, type], tuple[DType, DType]] = {}
on_default_change(_NUMBERS.clear)  # (a float lifted against an integer tensor takes the default)
on_default_change(_LIFTED.clear)


def _lifted_dtypes(like: DType, number: type) -> tuple[DType, DType]:
    """For a number of type ``number`` against a tensor of dtype ``like``: the result's
    dtype (the number decides the category only) and the dtype that stores the number at
    the op's precision (float32 for a half result)."""
    found = _LIFTED.get((like, number))
    if found is None:
        dtype = result_type(like, number(1))
        found = _LIFTED[like, number] = (dtype, float32 if dtype.is_half else dtype)
    return found


def binary(op_class: type[Op], a: TensorLike, b: TensorLike) -> Tensor:
    name = op_class.schema_v1.name
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(
            f"{name}: at least one operand must be a Tensor, got {type(a).__name__} and "
            f"{type(b).__name__}"
        )
    like = a if isinstance(a, Tensor) else b
    return op_class.apply(
        a if type(a) is Tensor else lift(name, "a", a, like),
        b if type(b) is Tensor else lift(name, "b", b, like),
    )


def unary_wrapper(op_class: type[Op]) -> Callable[[Tensor], Tensor]:
    name = op_class.schema_v1.name

    def wrapper(x: Tensor) -> Tensor:
        return op_class.apply(require_tensor(name, "x", x))

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"Elementwise ``{name}`` of ``x``; see :class:`{op_class.__name__}` for the gradient."
    )
    return tensor_method(wrapper)


#: (axis, ndim) -> the normalised axes, for an int axis or None (a program's few calls):
#: bounded by the valid pairs, since only those are stored.
_AXES: dict[tuple[int | None, int], tuple[int, ...]] = {}


def normalize_axes(
    op: str, x: Tensor, axis: int | Sequence[int] | None, dim: int | Sequence[int] | None
) -> tuple[int, ...]:
    """``axis`` (or its alias ``dim``: None, an int or a sequence of ints) as a sorted tuple
    of non-negative axes of ``x``; a TypeError or ValueError naming ``op`` for anything
    else, an axis out of range or a repeated one."""
    if dim is None and (axis is None or type(axis) is int):  # (exactly int: not a bool)
        key = (axis, len(x._shape))
        axes = _AXES.get(key)
        if axes is None:
            axes = _AXES[key] = _normalized_axes(op, x, axis, dim)
        return axes
    return _normalized_axes(op, x, axis, dim)


def _normalized_axes(
    op: str, x: Tensor, axis: int | Sequence[int] | None, dim: int | Sequence[int] | None
) -> tuple[int, ...]:
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{op}: pass axis= or its alias dim=, not both")
        axis = dim
    if axis is None:
        return tuple(range(x.ndim))
    if isinstance(axis, (int, np.integer)):
        listed = (axis,)
    elif isinstance(axis, (tuple, list)):
        listed = tuple(axis)
    else:
        raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
    axes = []
    for a in listed:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"{op}: axes must be integers, got {a!r}")
        if x.ndim == 0 and a in (0, -1):  # PyTorch: a 0-d tensor has one implicit axis
            continue
        if not -x.ndim <= a < x.ndim:
            valid = "0 and -1" if x.ndim == 0 else f"{-x.ndim}..{x.ndim - 1}"
            raise ValueError(
                f"{op}: axis {a} is out of range for a tensor of {x.ndim} dimensions "
                f"(shape {x.shape}); valid axes are {valid}"
            )
        axes.append(int(a) % x.ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: axis {listed} repeats an axis")
    return tuple(sorted(axes))


def reduction_wrapper(op_class: type[Op], method: bool = True) -> Callable[..., Tensor]:
    """The wrapper of a reduction op (``axis``/``dim``, ``keepdims``/``keepdim``), installed
    as the Tensor method of its name unless ``method`` is False."""
    name = op_class.schema_v1.name

    def wrapper(
        x: Tensor,
        axis: int | Sequence[int] | None = None,
        keepdims: bool = False,
        *,
        dim: int | Sequence[int] | None = None,
        keepdim: bool | None = None,
    ) -> Tensor:
        require_tensor(name, "x", x)
        axes = normalize_axes(name, x, axis, dim)
        keep = bool(keepdims if keepdim is None else keepdim)
        return op_class.apply(x, axes=axes, keepdims=keep)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"``{name}`` of ``x`` over ``axis`` (all axes when None; an int or a tuple), keeping "
        f"reduced axes as size 1 if ``keepdims``. PyTorch's ``dim=`` / ``keepdim=`` are "
        f"accepted as aliases. See :class:`{op_class.__name__}` for the gradient."
    )
    return tensor_method(wrapper) if method else wrapper


def _reflected(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def reflected(self: Tensor, other: Any) -> Tensor:
        return fn(other, self)

    return reflected


def _operator(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def operator(self: Tensor, other: Any) -> Any:
        if type(other) is not Tensor and not isinstance(other, _OPERANDS):
            return NotImplemented
        return fn(self, other)

    return operator


def _op_operators(op_class: type[Op]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``__stem__`` and ``__rstem__`` doing ``binary(op_class, ...)`` (self is a Tensor)."""
    name = op_class.schema_v1.name
    apply = op_class.apply

    def operator(self: Tensor, other: Any) -> Any:
        kind = type(other)
        if kind is Tensor:
            return apply(self, other)
        if kind is float or kind is int:  # (a program's constant: lift's cache, uncalled)
            wrapped = _NUMBERS.get((other, kind, self._dtype, self._backend))
            if wrapped is not None:
                return apply(self, wrapped)
        elif not isinstance(other, _OPERANDS):
            return NotImplemented
        return apply(self, lift(name, "b", other, self))

    def reflected(self: Tensor, other: Any) -> Any:
        kind = type(other)
        if kind is Tensor:
            return apply(other, self)
        if kind is float or kind is int:
            wrapped = _NUMBERS.get((other, kind, self._dtype, self._backend))
            if wrapped is not None:
                return apply(wrapped, self)
        elif not isinstance(other, _OPERANDS):
            return NotImplemented
        return apply(lift(name, "a", other, self), self)

    return operator, reflected


def install_tensor_methods() -> None:
    """Attach every registered wrapper to :class:`~pylucid.tensor.Tensor` as a method or
    operator (called once by :mod:`pylucid.ops` after importing the op families)."""
    for name, fn in TENSOR_METHODS.items():
        setattr(Tensor, name, fn)
    for stem, fn in BINARY_OPERATORS.items():
        if stem in BINARY_OPERATOR_OPS:
            operator, reflected = _op_operators(BINARY_OPERATOR_OPS[stem])
        else:
            operator, reflected = _operator(fn), _operator(_reflected(fn))
        setattr(Tensor, f"__{stem}__", operator)
        setattr(Tensor, f"__r{stem}__", reflected)
    for name, fn in DUNDERS.items():
        setattr(Tensor, name, fn)
