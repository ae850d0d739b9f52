"""The loop generator: the scalar math of an op is written once, its loops are generated.

:func:`elementwise` takes a scalar function of one, two or three numbers (a
``numba.extending.register_jitable`` or ``overload``-typed function, so that it is pickled by
reference and the generated loops can be cached) and returns an :class:`ElementwiseKernel`
that runs it over contiguous arrays: a serial loop below :data:`PARALLEL_THRESHOLD` elements,
a ``prange`` loop above it. Forward kernels are unary (``x -> f(x)``); fused backward kernels
are binary (``(x, g) -> df``) or ternary, and read each input once and write once.

Cached loops are keyed by Numba on the generated closure's contents; the closure carries a
fingerprint of the scalar function's source file, so editing the scalar math invalidates the
cache (Numba itself only watches the file that defines the loop).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

__all__ = ["PARALLEL_THRESHOLD", "PARALLEL_THRESHOLD_HEAVY", "ElementwiseKernel", "elementwise"]

#: Element count from which the ``prange`` loop of a memory-bound kernel (add, mul, relu:
#: under 1 ns per element) runs instead of the serial one. Measured on 2 cores (float32 add):
#: serial/parallel = 0.67 at 2^14, 0.90 at 2^15, 1.20 at 2^16, 1.84 at 2^17 elements; waking
#: the second thread costs about 2 us.
PARALLEL_THRESHOLD = 1 << 16
#: The same for compute-bound kernels (log, exp, trigonometry: several ns per element):
#: serial/parallel = 0.83 at 2^12, 1.47 at 2^14 elements (log2 and exp alike).
PARALLEL_THRESHOLD_HEAVY = 1 << 13

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


def _fingerprint(scalar_fn: Callable) -> str:
    source = Path(inspect.getfile(scalar_fn)).read_bytes()
    return hashlib.sha256(source).hexdigest()[:16]


def _at(a, i):
    """``a[i]`` for an array, ``a`` itself for a scalar: one loop serves both shapes."""


@overload(_at, inline="always")
def _at_typed(a, i):
    if isinstance(a, types.Array):
        return lambda a, i: a[i]
    return lambda a, i: a


def _loops_1(f: Callable, fingerprint: str) -> tuple[Callable, Callable]:
    def serial(x, out):
        fingerprint  # noqa: B018  (a closure cell: makes the scalar source part of the cache key)
        for i in range(out.size):
            out[i] = f(_at(x, i))

    def parallel(x, out):
        fingerprint  # noqa: B018
        for i in numba.prange(out.size):
            out[i] = f(_at(x, i))

    return numba.njit(**_JIT)(serial), numba.njit(parallel=True, **_JIT)(parallel)


def _loops_2(f: Callable, fingerprint: str) -> tuple[Callable, Callable]:
    def serial(x, y, out):
        fingerprint  # noqa: B018
        for i in range(out.size):
            out[i] = f(_at(x, i), _at(y, i))

    def parallel(x, y, out):
        fingerprint  # noqa: B018
        for i in numba.prange(out.size):
            out[i] = f(_at(x, i), _at(y, i))

    return numba.njit(**_JIT)(serial), numba.njit(parallel=True, **_JIT)(parallel)


def _loops_3(f: Callable, fingerprint: str) -> tuple[Callable, Callable]:
    def serial(x, y, z, out):
        fingerprint  # noqa: B018
        for i in range(out.size):
            out[i] = f(_at(x, i), _at(y, i), _at(z, i))

    def parallel(x, y, z, out):
        fingerprint  # noqa: B018
        for i in numba.prange(out.size):
            out[i] = f(_at(x, i), _at(y, i), _at(z, i))

    return numba.njit(**_JIT)(serial), numba.njit(parallel=True, **_JIT)(parallel)


_LOOP_MAKERS = {1: _loops_1, 2: _loops_2, 3: _loops_3}


class ElementwiseKernel:
    """Serial and parallel loops of one scalar function over flat contiguous arrays.

    Call it with C-contiguous arrays of the output's size, or with NumPy scalars (a scalar
    operand is read once per element: the common broadcast of a tensor with a number). It
    allocates the output unless ``out`` is given. It maps arrays to arrays and knows nothing of
    tensors.
    """

    def __init__(self, scalar_fn: Callable, arity: int, parallel_threshold: int) -> None:
        self.name = scalar_fn.__name__
        self.arity = arity
        self.parallel_threshold = parallel_threshold
        self._serial, self._parallel = _LOOP_MAKERS[arity](scalar_fn, _fingerprint(scalar_fn))

    def __call__(
        self,
        *operands: np.ndarray | np.generic,
        shape: tuple[int, ...],
        out_dtype: np.dtype,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Apply the scalar function elementwise into a new (or the given) array of ``shape``."""
        if out is None:
            out = np.empty(shape, dtype=out_dtype)
        loop = self._parallel if out.size >= self.parallel_threshold else self._serial
        if len(shape) == 1:  # already flat: skip the reshapes (a tiny op's main cost here)
            loop(*operands, out)
        else:
            loop(
                *[a.reshape(-1) if isinstance(a, np.ndarray) else a for a in operands],
                out.reshape(-1),
            )
        return out

    def __repr__(self) -> str:
        return f"ElementwiseKernel({self.name}, arity={self.arity})"


def elementwise(scalar_fn: Callable, arity: int = 1, heavy: bool = False) -> ElementwiseKernel:
    """Generate the loops of ``scalar_fn``; see :class:`ElementwiseKernel`.

    Parameters
    ----------
    scalar_fn : callable
        A jitable scalar function of ``arity`` numbers, pickled by reference (module-level
        and decorated with ``numba.extending.register_jitable`` or typed by ``overload``).
    arity : int
        Number of array inputs: 1 (forward), 2 or 3 (fused backward kernels).
    heavy : bool
        The scalar function is compute-bound (a transcendental): go parallel from
        :data:`PARALLEL_THRESHOLD_HEAVY` elements instead of :data:`PARALLEL_THRESHOLD`.
    """
    if arity not in _LOOP_MAKERS:
        raise ValueError(f"elementwise kernels take 1, 2 or 3 inputs, not {arity}")
    threshold = PARALLEL_THRESHOLD_HEAVY if heavy else PARALLEL_THRESHOLD
    return ElementwiseKernel(scalar_fn, arity, threshold)
