"""NumPy on either side of a tensor: ufuncs and array functions give tensors or numeric
arrays, never object arrays.

- A NumPy ufunc that pylucid has an op for (``np.add``, ``np.exp``, ``np.maximum``...),
  called plainly (no ``out=``, ``where=``, ``dtype=``), runs that op: ``np.exp(t)`` and
  ``np.ones(2) + t`` are tensors, in the graph (a NumPy array operand becomes a tensor of its
  dtype on the tensor's device).
- Any other ufunc or ufunc method (``np.floor(t)``, ``np.add.reduce(t)``) and every NumPy
  function (``np.sum(t)``, ``np.concatenate([t, t])``) runs in NumPy on the tensors' values
  (``np.asarray(t)``) and returns what NumPy returns: numbers, not tensors, outside the graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.ops import (
    activations,
    arithmetic,
    binary,
    comparison,
    elementwise_math,
    linalg,
    rounding,
    unary,
)
from pylucid.ops.wrapping import dunder
from pylucid.tensor import Tensor

__all__: list[str] = []

#: NumPy ufuncs and the pylucid ops with the same math.
UFUNC_OPS: dict[np.ufunc, Callable[..., Tensor]] = {
    np.add: arithmetic.add,
    np.subtract: arithmetic.sub,
    np.multiply: arithmetic.mul,
    np.true_divide: arithmetic.div,
    np.power: binary.pow,
    np.arctan2: binary.atan2,
    np.logaddexp: binary.logaddexp,
    np.remainder: binary.remainder,
    np.floor_divide: binary.floor_divide,
    np.hypot: binary.hypot,
    np.maximum: binary.maximum,
    np.minimum: binary.minimum,
    np.equal: comparison.eq,
    np.not_equal: comparison.ne,
    np.less: comparison.lt,
    np.less_equal: comparison.le,
    np.greater: comparison.gt,
    np.greater_equal: comparison.ge,
    np.matmul: linalg.matmul,
    np.negative: unary.neg,
    np.log: unary.log,
    np.log2: unary.log2,
    np.log10: unary.log10,
    np.absolute: activations.abs,
    np.sign: activations.sign,
    np.floor: rounding.floor,
    np.ceil: rounding.ceil,
    np.trunc: rounding.trunc,
    np.rint: rounding.round,
    **{
        getattr(np, numpy_name): getattr(elementwise_math, name)
        for numpy_name, name in (
            ("exp", "exp"),
            ("exp2", "exp2"),
            ("expm1", "expm1"),
            ("log1p", "log1p"),
            ("sqrt", "sqrt"),
            ("square", "square"),
            ("reciprocal", "reciprocal"),
            ("sin", "sin"),
            ("cos", "cos"),
            ("tan", "tan"),
            ("arcsin", "asin"),
            ("arccos", "acos"),
            ("arctan", "atan"),
            ("arcsinh", "asinh"),
            ("arccosh", "acosh"),
            ("arctanh", "atanh"),
            ("sinh", "sinh"),
            ("cosh", "cosh"),
            ("tanh", "tanh"),
        )
    },
}


def _values(value: Any) -> Any:
    """``value`` with every tensor in it (in lists, tuples and dicts too) as a NumPy array."""
    if isinstance(value, Tensor):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_values(v) for v in value)
    if isinstance(value, dict):
        return {k: _values(v) for k, v in value.items()}
    return value


@dunder("__array_ufunc__")
def _array_ufunc(
    self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any
) -> Any:
    """NumPy's ufunc protocol: the pylucid op where there is one, else NumPy on the values."""
    op = UFUNC_OPS.get(ufunc)
    if op is not None and method == "__call__" and not kwargs:
        like = next(v for v in inputs if isinstance(v, Tensor))
        operands = [v if not isinstance(v, np.ndarray) else _on(v, like) for v in inputs]
        return op(*operands)
    return getattr(ufunc, method)(*_values(inputs), **_values(kwargs))


def _on(array: np.ndarray, like: Tensor) -> Tensor:
    from pylucid.factories import tensor

    return tensor(array, device=like._backend.name)


@dunder("__array_function__")
def _array_function(
    self: Tensor, func: Callable[..., Any], types: Any, args: Any, kwargs: Any
) -> Any:
    """NumPy's array-function protocol: the function runs on the tensors' values."""
    return func(*_values(args), **_values(kwargs))
