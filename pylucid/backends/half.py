"""Computing float16 and bfloat16 primitives in float32 ("opmath", as PyTorch does).

:func:`computes_halves_in_float32` wraps primitives that take a ``dtype``: when that dtype is
float16 or bfloat16, the half-precision array arguments are widened to float32, the primitive
runs in float32, and its float32 results are rounded once to the half dtype. For the single
ops of this library that is what IEEE half arithmetic gives for + - * / (float32 holds such a
half result exactly before its one rounding) and the most accurate answer for the others
(one rounding of a float32 result, instead of a rounding after every step of a formula).

A primitive marked with :func:`handles_halves` does this itself and is left unwrapped: the
numba backend's elementwise primitives run kernels that read half arrays through ``uint16``
views, convert each element to float32 in registers and write a half output from the
float32 result (:mod:`pylucid.kernels.half`), so no float32 copy of an operand or of the
result is made. A backend whose every primitive accepts half arrays where its dtype is
float32 (its marked primitives natively, the others widened by this wrapper:
``float32_reads_halves=True``) is one that :func:`reads_half_natively`: the ops layer then
passes half storages to a float32 computation (a ``FORCE_FP32`` op) without casting them.

The numba backend needs the wrapper for every primitive it does not mark (Numba has no 16-bit
float arithmetic: reductions, matmul, ...); the mlx backend for the elementwise formulas it
builds from several MLX calls.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from pylucid.dtypes import DType, float32

__all__ = [
    "HalfConversion",
    "computes_halves_in_float32",
    "handles_halves",
    "reads_half_natively",
]

#: Conversion primitives that handle half dtypes themselves.
_NATIVE = frozenset({"from_numpy", "full", "cast"})

#: The attribute :func:`handles_halves` sets on a primitive.
MARKER = "handles_halves"
#: The class attribute ``computes_halves_in_float32(..., float32_reads_halves=True)`` sets.
_READS_HALF = "_reads_half_natively"

F = TypeVar("F", bound=Callable[..., Any])


def reads_half_natively(backend: Any) -> bool:
    """Whether ``backend`` takes float16 and bfloat16 storage for a float32 computation.

    True for a backend decorated with ``computes_halves_in_float32(...,
    float32_reads_halves=True)`` (the numba backend): each of its primitives accepts a half
    array where its dtype is float32 and reads it exactly - the elementwise kernels convert
    each element in registers, without a float32 copy - and each primitive given a half
    dtype computes in float32 and rounds its result once to that dtype. So a ``FORCE_FP32``
    op can pass its half inputs uncast and, outside autocast, ask for the half result
    directly. False for every other backend (the mlx backend), which needs the explicit
    float32 casts.
    """
    return getattr(backend, _READS_HALF, False)


def handles_halves(primitive: F) -> F:
    """Mark ``primitive`` as computing half dtypes in float32 itself, and as accepting half
    arrays where its dtype is float32: :func:`computes_halves_in_float32` leaves it alone."""
    setattr(primitive, MARKER, True)
    return primitive


class HalfConversion:
    """How a backend recognises, widens and narrows its half-precision arrays.

    ``array_type`` (the backend's storage class, if it has one) lets ``any_half(args,
    kwargs)`` skip every other argument with a type test: the wrapper of
    ``float32_reads_halves`` runs it on each float32 call of a primitive it wraps.
    """

    def __init__(
        self,
        is_half: Callable[[Any], bool],
        widen: Callable[[Any], Any],
        narrow: Callable[[Any, DType], Any],
        array_type: type = object,
    ) -> None:
        self.is_half, self.widen, self.narrow = is_half, widen, narrow
        self.any_half = _half_finder(is_half, array_type)

    def widen_all(self, value: Any) -> Any:
        if type(value) is list or type(value) is tuple:  # (not a NamedTuple parameter)
            return type(value)(self.widen_all(v) for v in value)
        return self.widen(value) if self.is_half(value) else value


def _half_finder(
    is_half: Callable[[Any], bool], array_type: type
) -> Callable[[Sequence[Any], dict[str, Any]], bool]:
    """``any_half(args, kwargs)``: whether an argument, or an element of a list or tuple
    argument, is a half array (of ``array_type``; ``object``: anything ``is_half`` accepts).
    A list or tuple whose first element is no array (axes) is not searched."""
    generic = array_type is object

    def any_half(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        for value in (*args, *kwargs.values()) if kwargs else args:
            kind = type(value)
            if kind is array_type or generic:
                if is_half(value):
                    return True
            elif (kind is tuple or kind is list) and value:
                if (generic or type(value[0]) is array_type) and any(map(is_half, value)):
                    return True
        return False

    return any_half


def _half_aware(
    primitive: Callable[..., Any],
    dtype_index: int,
    conversion: HalfConversion,
    float32_reads_halves: bool,
) -> Callable[..., Any]:
    any_half = conversion.any_half

    @functools.wraps(primitive)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        dtype = args[dtype_index] if len(args) > dtype_index else kwargs["dtype"]
        if not dtype.is_half:
            if float32_reads_halves and dtype is float32 and any_half(args, kwargs):
                # half storages given to a float32 computation: widen them (exact)
                args = [conversion.widen_all(a) for a in args]
                kwargs = {k: conversion.widen_all(v) for k, v in kwargs.items()}
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
    conversion: HalfConversion,
    only: Collection[str] | None = None,
    float32_reads_halves: bool = False,
) -> Callable[[type], type]:
    """Class decorator: make ``dtype``-taking primitives of the class half-aware.

    Parameters
    ----------
    conversion : HalfConversion
        The backend's array conversions.
    only : collection of str, optional
        Wrap only these primitives (default: every primitive taking a ``dtype``). Primitives
        marked with :func:`handles_halves` are never wrapped.
    float32_reads_halves : bool
        Also widen half array arguments of a primitive called with dtype float32 (what a
        backend declaring ``reads_half_natively`` needs for its unmarked primitives).
    """

    def decorate(cls: type) -> type:
        for name in dir(cls):
            if name.startswith("_") or name in _NATIVE or (only is not None and name not in only):
                continue
            primitive = getattr(cls, name)
            if not callable(primitive) or getattr(primitive, MARKER, False):
                continue
            parameters = list(inspect.signature(primitive).parameters)
            if "dtype" in parameters:
                index = parameters.index("dtype") - 1
                setattr(cls, name, _half_aware(primitive, index, conversion, float32_reads_halves))
        if float32_reads_halves:
            setattr(cls, _READS_HALF, True)
        return cls

    return decorate
