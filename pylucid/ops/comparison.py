"""Elementwise comparisons with NumPy broadcasting: eq, ne, lt, le, gt, ge.

Public: eq, ne, lt, le, gt, ge (and the operators == != < <= > >=). The inputs are compared
in their promoted dtype (PyTorch's rules: ``int_tensor < 0.5`` compares in float32); the
result is a bool tensor, outside the graph (``differentiable=False``). nan compares unequal
to everything, itself included (``ne`` is true, the others false). A number on the left
works through Python's reflection: ``2 < x`` runs ``x > 2``.

The operators return ``NotImplemented`` for operands that are neither tensors nor numbers, so
``x == None`` is False and ``x != "a"`` True, as for any Python object; a Tensor stays
hashable by identity (``{x: 1}``), as Python keeps ``object.__hash__`` when ``__eq__`` is set
after the class is made.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, bool_
from pylucid.ops.base import BinaryOp
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import TensorLike, binary, dunder, is_number, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "EqBackward",
    "GeBackward",
    "GtBackward",
    "LeBackward",
    "LtBackward",
    "NeBackward",
    "allclose",
    "eq",
    "equal",
    "ge",
    "gt",
    "isclose",
    "le",
    "lt",
    "ne",
]


def _schema(name: str) -> OpSchema:
    """A comparison's schema. AMP: ``KEEP_INPUT`` - PyTorch's autocast leaves comparisons in
    their inputs' (promoted) dtype; casting them down would change which values compare
    equal."""
    return OpSchema(name=name, amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2, differentiable=False)


class _Comparison(BinaryOp):
    """Base of the comparison nodes: the result is bool; never recorded in a graph. The
    forward is the backend primitive named like the op (``be.lt(a, b, shape, dtype)``)."""

    @classmethod
    def result_dtype(cls, compute_dtype: DType) -> DType:
        return bool_

    @classmethod
    def dispatch(cls, be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return getattr(be, cls.schema_v1.name)(a, b, shape, dtype)


class EqBackward(_Comparison):
    r"""Node class of :math:`y = (a = b)`, a bool tensor; no gradient."""

    schema_v1 = _schema("eq")


class NeBackward(_Comparison):
    r"""Node class of :math:`y = (a \ne b)`, a bool tensor; no gradient."""

    schema_v1 = _schema("ne")


class LtBackward(_Comparison):
    r"""Node class of :math:`y = (a < b)`, a bool tensor; no gradient."""

    schema_v1 = _schema("lt")


class LeBackward(_Comparison):
    r"""Node class of :math:`y = (a \le b)`, a bool tensor; no gradient."""

    schema_v1 = _schema("le")


class GtBackward(_Comparison):
    r"""Node class of :math:`y = (a > b)`, a bool tensor; no gradient."""

    schema_v1 = _schema("gt")


class GeBackward(_Comparison):
    r"""Node class of :math:`y = (a \ge b)`, a bool tensor; no gradient."""

    schema_v1 = _schema("ge")


@tensor_method
def eq(a: TensorLike, b: TensorLike) -> Tensor:
    """``a == b`` elementwise with NumPy broadcasting, as a bool tensor."""
    return binary(EqBackward, a, b)


@tensor_method
def ne(a: TensorLike, b: TensorLike) -> Tensor:
    """``a != b`` elementwise with NumPy broadcasting, as a bool tensor."""
    return binary(NeBackward, a, b)


@tensor_method
def lt(a: TensorLike, b: TensorLike) -> Tensor:
    """``a < b`` elementwise with NumPy broadcasting, as a bool tensor."""
    return binary(LtBackward, a, b)


@tensor_method
def le(a: TensorLike, b: TensorLike) -> Tensor:
    """``a <= b`` elementwise with NumPy broadcasting, as a bool tensor."""
    return binary(LeBackward, a, b)


@tensor_method
def gt(a: TensorLike, b: TensorLike) -> Tensor:
    """``a > b`` elementwise with NumPy broadcasting, as a bool tensor."""
    return binary(GtBackward, a, b)


@tensor_method
def ge(a: TensorLike, b: TensorLike) -> Tensor:
    """``a >= b`` elementwise with NumPy broadcasting, as a bool tensor."""
    return binary(GeBackward, a, b)


def _operator(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Any]:
    """``fn`` as a rich-comparison method: NotImplemented unless ``other`` is a tensor or a
    number (Python then falls back to identity for == and !=, and raises for < <= > >=)."""

    def operator(self: Tensor, other: Any) -> Any:
        if not isinstance(other, Tensor) and not is_number(other):
            return NotImplemented
        return fn(self, other)

    operator.__name__ = operator.__qualname__ = f"_{fn.__name__}_operator"
    return operator


dunder("__eq__")(_operator(eq))
dunder("__ne__")(_operator(ne))
dunder("__lt__")(_operator(lt))
dunder("__le__")(_operator(le))
dunder("__gt__")(_operator(gt))
dunder("__ge__")(_operator(ge))


@tensor_method
def isclose(
    a: Tensor, b: TensorLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> Tensor:
    """Where ``|a - b| <= atol + rtol * |b|`` (or ``a == b``, for infinities; or both NaN
    with ``equal_nan``), as ``torch.isclose``: a bool tensor, outside the graph."""
    from pylucid.graph.grad_mode import no_grad
    from pylucid.ops.logical import isnan

    with no_grad():
        size = b.abs() if isinstance(b, Tensor) else abs(b)
        close = (a == b) | ((a - b).abs() <= atol + rtol * size)
        if equal_nan:
            both = isnan(a) & (isnan(b) if isinstance(b, Tensor) else math.isnan(b))
            close = close | both
    return close


@tensor_method
def allclose(
    a: Tensor, b: TensorLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> bool:
    """Whether every element of :func:`isclose` is True (a Python bool)."""
    return bool(isclose(a, b, rtol, atol, equal_nan).all())


@tensor_method
def equal(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` have one shape and equal elements (NaN equals nothing)."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(
            f"equal: expected two tensors, got {type(a).__name__} and {type(b).__name__}"
        )
    return a.shape == b.shape and bool((a == b).all())
