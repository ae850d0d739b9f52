"""float16 and bfloat16 on the numba backend: Numba has no 16-bit float arithmetic.

:func:`computes_halves_in_float32` wraps every primitive that takes a ``dtype``: when that
dtype is float16 or bfloat16, the half-precision array arguments are widened to float32, the
primitive runs in float32, and its float32 results are rounded once to the half dtype. For
the single ops of this library that is exactly what IEEE half arithmetic gives (float32 holds
a half product or quotient exactly before the one rounding), so "computing in half" and
"computing in float32 and rounding the result" agree.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.dtypes import DType, float32

#: Conversion primitives that handle half dtypes themselves (NumPy and ml_dtypes can).
_NATIVE = frozenset({"from_numpy", "full", "cast"})


def _widen(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.itemsize == 2 and value.dtype.kind == "V":
        return value.astype(np.float32)  # ml_dtypes.bfloat16 has kind "V"
    if isinstance(value, np.ndarray) and value.dtype == np.float16:
        return value.astype(np.float32)
    if isinstance(value, (list, tuple)):
        return type(value)(_widen(v) for v in value)
    return value


def _narrow(value: Any, dtype: DType) -> Any:
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(dtype.numpy)
    return value


def _half_aware(primitive: Callable[..., Any], dtype_index: int) -> Callable[..., Any]:
    @functools.wraps(primitive)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        dtype = kwargs["dtype"] if "dtype" in kwargs else args[dtype_index]
        if not dtype.is_half:
            return primitive(self, *args, **kwargs)
        args = [_widen(a) for a in args]
        if "dtype" in kwargs:
            kwargs["dtype"] = float32
        else:
            args[dtype_index] = float32
        return _narrow(primitive(self, *args, **{k: _widen(v) for k, v in kwargs.items()}), dtype)

    return wrapper


def computes_halves_in_float32(cls: type) -> type:
    """Class decorator: make every ``dtype``-taking primitive of ``cls`` half-aware."""
    for name in dir(cls):
        if name.startswith("_") or name in _NATIVE:
            continue
        primitive = getattr(cls, name)
        if not callable(primitive):
            continue
        parameters = list(inspect.signature(primitive).parameters)
        if "dtype" in parameters:
            setattr(cls, name, _half_aware(primitive, parameters.index("dtype") - 1))
    return cls
