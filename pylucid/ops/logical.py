"""Logical ops, the truth reductions and the float classifications, composed from
comparisons and sums.

Public: logical_not, logical_and, logical_or, logical_xor (and the operators ``~ & | ^`` on
bool tensors), any, all, isnan, isinf, isfinite. As in PyTorch, the inputs may have any
dtype (a nonzero number is true, nan included; an integer is never nan or inf) and the
result is a bool tensor outside the graph. Each is a short composition of registered ops
(``ne``, ``eq``, ``mul``, ``add``, ``sub``, ``abs``, ``sum``) rather than an op of its own:
the compositions are exact, and neither a gradient nor a kernel is needed.

``~``, ``&``, ``|`` and ``^`` are bitwise on integer tensors in PyTorch; pylucid has no
bitwise ops yet, so on a non-bool tensor they raise rather than give a logical result.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

from pylucid.dtypes import bool_
from pylucid.ops.activations import abs as absolute
from pylucid.ops.arithmetic import add, mul, sub
from pylucid.ops.comparison import eq, gt, ne
from pylucid.ops.reduce import sum as reduce_sum
from pylucid.ops.wrapping import TensorLike, dunder, require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "all",
    "any",
    "isfinite",
    "isinf",
    "isnan",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
]


def _truth(x: TensorLike) -> TensorLike:
    """``x`` as bools: a bool tensor itself, another tensor ``x != 0``, a number ``bool(x)``."""
    if not isinstance(x, Tensor):
        return bool(x)
    return x if x.dtype is bool_ else ne(x, 0)


@tensor_method
def logical_not(x: Tensor) -> Tensor:
    """``True`` where ``x`` is zero (false), elementwise."""
    require_tensor("logical_not", "x", x)
    return eq(_truth(x), False)


@tensor_method
def logical_and(a: Tensor, b: TensorLike) -> Tensor:
    """Elementwise ``a and b`` with broadcasting (a nonzero number is true)."""
    require_tensor("logical_and", "a", a)
    return mul(_truth(a), _truth(b))  # bool * bool is bool: the product is the conjunction


@tensor_method
def logical_or(a: Tensor, b: TensorLike) -> Tensor:
    """Elementwise ``a or b`` with broadcasting (a nonzero number is true)."""
    require_tensor("logical_or", "a", a)
    return add(_truth(a), _truth(b))  # bool + bool is bool: the sum is the disjunction


@tensor_method
def logical_xor(a: Tensor, b: TensorLike) -> Tensor:
    """Elementwise ``a != b`` as truth values, with broadcasting."""
    require_tensor("logical_xor", "a", a)
    return ne(_truth(a), _truth(b))


def _constant_truth(x: Tensor, value: bool) -> Tensor:
    """A bool tensor of ``x``'s shape holding ``value``: a non-floating tensor is never nan
    or inf."""
    return Tensor._make(x._backend.full(x.shape, value, bool_), x._backend, bool_)


@tensor_method
def isnan(x: Tensor) -> Tensor:
    """``True`` where ``x`` is nan: ``x != x``."""
    require_tensor("isnan", "x", x)
    if not x.dtype.is_floating_point:
        return _constant_truth(x, False)
    return ne(x, x)


@tensor_method
def isinf(x: Tensor) -> Tensor:
    """``True`` where ``x`` is +inf or -inf."""
    require_tensor("isinf", "x", x)
    if not x.dtype.is_floating_point:
        return _constant_truth(x, False)
    return eq(absolute(x), math.inf)


@tensor_method
def isfinite(x: Tensor) -> Tensor:
    """``True`` where ``x`` is neither nan nor infinite: ``x - x == 0``."""
    require_tensor("isfinite", "x", x)
    if not x.dtype.is_floating_point:
        return _constant_truth(x, True)
    return eq(sub(x, x), 0)


def _bool_only(symbol: str, logical: Callable[..., Tensor]) -> Callable[..., Any]:
    def operator(x: Tensor, *other: Any) -> Any:
        operands = (x, *other)
        if not builtins.all(isinstance(v, (Tensor, bool)) for v in operands):
            return NotImplemented
        if not builtins.all(v.dtype is bool_ for v in operands if isinstance(v, Tensor)):
            raise TypeError(
                f"{symbol} is defined here for bool tensors only (PyTorch's bitwise version for "
                f"integers is not in pylucid); use {logical.__name__} for truth values"
            )
        return logical(*operands)

    return operator


dunder("__invert__")(_bool_only("~", logical_not))
dunder("__and__", "__rand__")(_bool_only("&", logical_and))
dunder("__or__", "__ror__")(_bool_only("|", logical_or))
dunder("__xor__", "__rxor__")(_bool_only("^", logical_xor))


def _truth_reduction(
    name: str, truths: Callable[[Tensor], Tensor], decide: Callable[[Tensor], Tensor], doc: str
) -> Callable[..., Tensor]:
    """A reduction counting ``truths(x)`` over the axes and deciding on the count."""

    def reduction(
        x: Tensor,
        axis: int | Sequence[int] | None = None,
        keepdims: bool = False,
        *,
        dim: int | Sequence[int] | None = None,
        keepdim: bool | None = None,
    ) -> Tensor:
        require_tensor(name, "x", x)
        return decide(reduce_sum(truths(x), axis, keepdims, dim=dim, keepdim=keepdim))

    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = (
        f"Whether {doc} element of ``x`` over ``axis`` (all axes when None) is true (nonzero); "
        f"``dim=`` / ``keepdim=`` as in PyTorch."
    )
    return tensor_method(reduction)


any = _truth_reduction("any", _truth, lambda count: gt(count, 0), "any")  # noqa: A001
all = _truth_reduction("all", logical_not, lambda count: eq(count, 0), "every")  # noqa: A001
