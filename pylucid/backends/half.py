"""Computing float16 and bfloat16 primitives in float32 ("opmath", as PyTorch does).

:func:`computes_halves_in_float32` wraps primitives that take a ``dtype``: when that dtype is
float16 or bfloat16, the half-precision array arguments are widened to float32, the primitive
runs in float32, and its float32 results are rounded once to the half dtype. For the single
ops of this library that is what IEEE half arithmetic gives for + - * / (float32 holds such a
half result exactly before its one rounding) and the most accurate answer for the others
(one rounding of a float32 result, instead of a rounding after every step of a formula).

The numba backend needs it for every primitive (Numba has no 16-bit float arithmetic); the
mlx backend for the elementwise formulas it builds from several MLX calls.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from typing import Any

from pylucid.dtypes import DType, float32

#: Conversion primitives that handle half dtypes themselves.
_NATIVE = frozenset({"from_numpy", "full", "cast"})


class HalfConversion:
    """How a backend recognises, widens and narrows its half-precision arrays."""

    def __init__(
        self,
        is_half: Callable[[Any], bool],
        widen: Callable[[Any], Any],
        narrow: Callable[[Any, DType], Any],
    ) -> None:
        self.is_half, self.widen, self.narrow = is_half, widen, narrow

    def widen_all(self, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(self.widen_all(v) for v in value)
        return self.widen(value) if self.is_half(value) else value


def _half_aware(
    primitive: Callable[..., Any], dtype_index: int, conversion: HalfConversion
) -> Callable[..., Any]:
    @functools.wraps(primitive)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        dtype = args[dtype_index] if len(args) > dtype_index else kwargs["dtype"]
        if not dtype.is_half:
            return primitive(self, *args, **kwargs)
        args = [conversion.widen_all(a) for a in args]
        if len(args) > dtype_index:
            args[dtype_index] = float32
        else:
            kwargs["dtype"] = float32
        kwargs = {k: conversion.widen_all(v) for k, v in kwargs.items()}
        return conversion.narrow(primitive(self, *args, **kwargs), dtype)

    return wrapper


def computes_halves_in_float32(
    conversion: HalfConversion, only: Collection[str] | None = None
) -> Callable[[type], type]:
    """Class decorator: make ``dtype``-taking primitives of the class half-aware.

    Parameters
    ----------
    conversion : HalfConversion
        The backend's array conversions.
    only : collection of str, optional
        Wrap only these primitives (default: every primitive taking a ``dtype``).
    """

    def decorate(cls: type) -> type:
        for name in dir(cls):
            if name.startswith("_") or name in _NATIVE or (only is not None and name not in only):
                continue
            primitive = getattr(cls, name)
            if not callable(primitive):
                continue
            parameters = list(inspect.signature(primitive).parameters)
            if "dtype" in parameters:
                index = parameters.index("dtype") - 1
                setattr(cls, name, _half_aware(primitive, index, conversion))
        return cls

    return decorate
