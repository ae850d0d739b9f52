"""Elementwise blends and norms composed of registered ops, with PyTorch's names.

Public: lerp, addcmul, addcdiv, clamp_min, clamp_max, clip, norm (also
``pylucid.linalg.vector_norm``), trace, type_as (functions and Tensor methods).

Each is a composition (``x + w (end - x)``, ``x + v a b``, ``clamp``, sums and powers), so its
gradient of every order is its ops', on both backends. ``norm`` of order 2 takes the square
root through a guard, ``where(s == 0, 0, sqrt(where(s == 0, 1, s)))``, so that at the zero
vector its gradient is 0 (PyTorch's subgradient) rather than the ``0/0`` of ``x / |x|``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pylucid.ops.activations import abs as _abs
from pylucid.ops.activations import clamp
from pylucid.ops.binary import where
from pylucid.ops.elementwise_math import sqrt
from pylucid.ops.reduce import amax, amin
from pylucid.ops.reduce import sum as _sum
from pylucid.ops.wrapping import TensorLike, require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "addcdiv",
    "addcmul",
    "clamp_max",
    "clamp_min",
    "clip",
    "lerp",
    "norm",
    "trace",
    "type_as",
    "vector_norm",
]


@tensor_method
def lerp(x: Tensor, end: TensorLike, weight: TensorLike) -> Tensor:
    """``x + weight * (end - x)``, as ``torch.lerp``."""
    require_tensor("lerp", "x", x)
    return x + weight * (end - x)


@tensor_method
def addcmul(x: Tensor, a: TensorLike, b: TensorLike, *, value: float = 1) -> Tensor:
    """``x + value * a * b``, as ``torch.addcmul``."""
    require_tensor("addcmul", "x", x)
    return x + (a * b if value == 1 else value * a * b)


@tensor_method
def addcdiv(x: Tensor, a: TensorLike, b: TensorLike, *, value: float = 1) -> Tensor:
    """``x + value * a / b``, as ``torch.addcdiv``."""
    require_tensor("addcdiv", "x", x)
    return x + (a / b if value == 1 else value * a / b)


@tensor_method
def clamp_min(x: Tensor, min: TensorLike) -> Tensor:  # noqa: A002  (torch's name)
    """``clamp(x, min=min)``."""
    return clamp(x, min=min)


@tensor_method
def clamp_max(x: Tensor, max: TensorLike) -> Tensor:  # noqa: A002  (torch's name)
    """``clamp(x, max=max)``."""
    return clamp(x, max=max)


@tensor_method
def clip(x: Tensor, min: TensorLike | None = None, max: TensorLike | None = None) -> Tensor:  # noqa: A002
    """:func:`pylucid.clamp` under NumPy's and PyTorch's other name."""
    return clamp(x, min, max)


def _safe_sqrt(s: Tensor) -> Tensor:
    """``sqrt(s)`` with a zero gradient where ``s`` is 0 (see the module)."""
    zero = s == 0
    return where(zero, 0.0, sqrt(where(zero, 1.0, s)))


def vector_norm(
    x: Tensor,
    ord: float = 2,  # noqa: A002  (torch.linalg.vector_norm's name)
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all elements when None), as
    ``torch.linalg.vector_norm``: ``(sum |x|^p)^(1/p)``; ``inf`` the largest ``|x|``,
    ``-inf`` the smallest, 0 the count of non-zero elements."""
    require_tensor("vector_norm", "x", x)
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        raise TypeError(f"vector_norm: expected a floating tensor, got {x.dtype.name}")
    p = float(ord)
    if p == 2:
        return _safe_sqrt(_sum(x * x, dim=dim, keepdim=keepdim))
    magnitude = _abs(x)
    if p == math.inf:
        return amax(magnitude, dim=dim, keepdim=keepdim)
    if p == -math.inf:
        return amin(magnitude, dim=dim, keepdim=keepdim)
    if p == 0:
        return _sum((x != 0).to(x.dtype), dim=dim, keepdim=keepdim)
    if p == 1:
        return _sum(magnitude, dim=dim, keepdim=keepdim)
    return _sum(magnitude**p, dim=dim, keepdim=keepdim) ** (1.0 / p)


@tensor_method
def norm(
    x: Tensor,
    p: float | str = "fro",
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    dtype: Any = None,
) -> Tensor:
    """``torch.norm``: the ``p``-norm of ``x`` over ``dim`` (all elements when None;
    ``"fro"`` is the 2-norm of the elements). The nuclear norm raises."""
    if p == "fro":
        p = 2
    elif isinstance(p, str):
        raise NotImplementedError(
            f"norm: p={p!r} is not supported; pylucid has the vector norms (a number, inf, "
            f"-inf) and 'fro'"
        )
    return vector_norm(x, p, dim, keepdim, dtype=dtype)


@tensor_method
def trace(x: Tensor) -> Tensor:
    """The sum of the diagonal of a matrix."""
    require_tensor("trace", "x", x)
    if x.ndim != 2:
        raise ValueError(f"trace: expects a matrix, got shape {x.shape}")
    return x.diagonal().sum()


@tensor_method
def type_as(x: Tensor, other: Tensor) -> Tensor:
    """``x`` as ``other``'s dtype."""
    return x.to(require_tensor("type_as", "other", other).dtype)
