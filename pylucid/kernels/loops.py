"""The loop generator: the scalar math of an op is written once, its loops are generated.

:func:`elementwise` takes a scalar function of one, two or three numbers (a
``numba.extending.register_jitable`` or ``overload``-typed function, so that it is pickled by
reference and the generated loops can be cached) and returns an :class:`ElementwiseKernel`
that runs it over contiguous arrays: a serial loop below its parallel threshold (the
element count of 2 ms of estimated work, :mod:`pylucid.kernels.parallel`), a ``prange``
loop above it. Forward kernels are unary (``x -> f(x)``); fused backward kernels
are binary (``(x, g) -> df``) or ternary, and read each input once and write once.

float16 and bfloat16 operands and outputs go through ``uint16`` views: each loop reads an
element with a load conversion and writes one with a store conversion
(:mod:`pylucid.kernels.half`; the identity for other dtypes), so the scalar function computes
in float32 and no widened copy is made. The loops of each combination of conversions are
generated on first use.

Cached loops are keyed by Numba on the generated closure's contents; the closure carries a
fingerprint of the scalar function's source file and of every kernel source it may inline
(:func:`~pylucid.kernels.jit.kernel_sources_digest`), so editing the scalar math, the SIMD
helpers or the half conversions invalidates the cache (Numba itself only watches the file
that defines the loop).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

import numba
import numpy as np
from numba.core import types
from numba.extending import overload, register_jitable

from pylucid import memory
from pylucid.kernels import half
from pylucid.kernels.jit import kernel_sources_digest, njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = ["PARALLEL_THRESHOLD", "PARALLEL_THRESHOLD_HEAVY", "ElementwiseKernel", "elementwise"]

#: Element count from which the ``prange`` loop of a memory-bound kernel (add, mul, relu)
#: runs instead of the serial one; the parallel policy (:mod:`pylucid.kernels.parallel`)
#: derives it from the kernel's cost per element.
PARALLEL_THRESHOLD = parallel_threshold("memory")
#: The same for compute-bound kernels (log, exp, trigonometry: several ns per element).
PARALLEL_THRESHOLD_HEAVY = parallel_threshold("transcendental")

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


def _fingerprint(scalar_fn: Callable) -> str:
    """The scalar function's file and every kernel source it may inline (the package's
    digest: ``simd_math``, ``half``)."""
    source = Path(inspect.getfile(scalar_fn)).read_bytes()
    return hashlib.sha256(source + kernel_sources_digest().encode()).hexdigest()[:16]


def _at(a, i):
    """``a[i]`` for an array, ``a`` itself for a scalar: one loop serves both shapes."""


@overload(_at, inline="always")
def _at_typed(a, i):
    if isinstance(a, types.Array):
        return lambda a, i: a[i]
    return lambda a, i: a


@register_jitable
def _same(v):
    """The identity: the load of a float or integer operand and the store of such a result."""
    return v


#: The load of an operand read through a ``uint16`` view (half code -> conversion), and the
#: store of a half output; :func:`_same` where there is no conversion.
_LOADS = {None: _same, "f16": half.f16_to_f32, "bf16": half.bf16_to_f32}
_STORES = {None: _same, "f16": half.f32_to_f16, "bf16": half.f32_to_bf16}


def _loops_1(f, fingerprint, load_x=_same, store=_same) -> tuple[Callable, Callable]:
    def serial(x, out):
        fingerprint  # noqa: B018  (a closure cell: makes the scalar source part of the cache key)
        for i in range(out.size):
            out[i] = store(f(load_x(_at(x, i))))

    def parallel(x, out):
        fingerprint  # noqa: B018
        for i in numba.prange(out.size):
            out[i] = store(f(load_x(_at(x, i))))

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


def _loops_2(f, fingerprint, load_x=_same, load_y=_same, store=_same) -> tuple[Callable, Callable]:
    def serial(x, y, out):
        fingerprint  # noqa: B018
        for i in range(out.size):
            out[i] = store(f(load_x(_at(x, i)), load_y(_at(y, i))))

    def parallel(x, y, out):
        fingerprint  # noqa: B018
        for i in numba.prange(out.size):
            out[i] = store(f(load_x(_at(x, i)), load_y(_at(y, i))))

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


def _loops_3(
    f, fingerprint, load_x=_same, load_y=_same, load_z=_same, store=_same
) -> tuple[Callable, Callable]:
    def serial(x, y, z, out):
        fingerprint  # noqa: B018
        for i in range(out.size):
            out[i] = store(f(load_x(_at(x, i)), load_y(_at(y, i)), load_z(_at(z, i))))

    def parallel(x, y, z, out):
        fingerprint  # noqa: B018
        for i in numba.prange(out.size):
            out[i] = store(f(load_x(_at(x, i)), load_y(_at(y, i)), load_z(_at(z, i))))

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


def _periodic_loops_2(f, fingerprint, periodic: int) -> tuple[Callable, Callable]:
    """Loops of a binary ``f`` whose operand ``periodic`` (0 or 1) holds ``n`` elements that
    repeat along the flat output, row after row of ``n`` (a bias against a batch)."""
    if periodic == 0:

        def serial(x, y, out):
            fingerprint  # noqa: B018
            n = x.size
            for r in range(out.size // n):
                for j in range(n):
                    out[r * n + j] = f(x[j], y[r * n + j])

        def parallel(x, y, out):
            fingerprint  # noqa: B018
            n = x.size
            for r in numba.prange(out.size // n):
                for j in range(n):
                    out[r * n + j] = f(x[j], y[r * n + j])

    else:

        def serial(x, y, out):
            fingerprint  # noqa: B018
            n = y.size
            for r in range(out.size // n):
                for j in range(n):
                    out[r * n + j] = f(x[r * n + j], y[j])

        def parallel(x, y, out):
            fingerprint  # noqa: B018
            n = y.size
            for r in numba.prange(out.size // n):
                for j in range(n):
                    out[r * n + j] = f(x[r * n + j], y[j])

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


def _in_place_loops_2(f, fingerprint) -> tuple[Callable, Callable]:
    """Loops of a binary ``f`` writing into its first operand, ``x[i] = f(x[i], y[i])``: an
    in-place op's. A loop of three arrays of which the output is the first operand runs
    ~3x slower (Numba's loops check at run time that the output overlaps no operand, and
    fall back to a scalar loop where it does); this one has no such operand to check."""

    def serial(x, y):
        fingerprint  # noqa: B018
        for i in range(x.size):
            x[i] = f(x[i], _at(y, i))

    def parallel(x, y):
        fingerprint  # noqa: B018
        for i in numba.prange(x.size):
            x[i] = f(x[i], _at(y, i))

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


_LOOP_MAKERS = {1: _loops_1, 2: _loops_2, 3: _loops_3}
#: The fingerprint of the conversions, added to the half loops' cache key.
_HALF_FINGERPRINT = _fingerprint(half.f16_to_f32)


def _flat(a):
    return a.reshape(-1) if isinstance(a, np.ndarray) else a


class ElementwiseKernel:
    """Serial and parallel loops of one scalar function over flat contiguous arrays.

    Call it with C-contiguous arrays of the output's size, or with NumPy scalars (a scalar
    operand is read once per element: the common broadcast of a tensor with a number). It
    allocates the output unless ``out`` is given. It maps arrays to arrays and knows nothing of
    tensors.

    Operands and the output may be float16 or bfloat16 (see :mod:`pylucid.kernels.half`):
    such an array is read through a ``uint16`` view and each element converted to float32 in
    registers, so the scalar function sees exactly what it would for float32 operands, and a
    half output is written from that float32 result, rounded once to nearest even. No
    float32 copy of a half array is made. The loops of each combination of half operands
    and output are generated and compiled on first use.
    """

    def __init__(self, scalar_fn: Callable, arity: int, parallel_threshold: int) -> None:
        self.name = scalar_fn.__name__
        self.arity = arity
        self.parallel_threshold = parallel_threshold
        self._scalar_fn = scalar_fn
        #: (half codes of the operands, of the output) -> (serial, parallel) loops.
        self._half_loops: dict[tuple[tuple[str | None, ...], str | None], tuple] = {}
        #: Periodic operand -> (serial, parallel) loops (:meth:`periodic_loops`).
        self._periodic_loops: dict[int, tuple] = {}
        self._in_place: tuple | None = None  # (:meth:`in_place_loops`)

    # The loops are made on first use (a kernel that never runs costs no dispatchers at
    # import); cached properties, so that after the first lookup they are plain attributes.
    @functools.cached_property
    def _fingerprint(self) -> str:
        return _fingerprint(self._scalar_fn)

    @functools.cached_property
    def _loops(self) -> tuple[Callable, Callable]:
        return _LOOP_MAKERS[self.arity](self._scalar_fn, self._fingerprint)

    @functools.cached_property
    def _serial(self) -> Callable:
        return self._loops[0]

    @functools.cached_property
    def _parallel(self) -> Callable:
        return self._loops[1]

    def __call__(
        self,
        *operands: np.ndarray | np.generic,
        shape: tuple[int, ...],
        out_dtype: np.dtype,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Apply the scalar function elementwise into a new (or the given) array of ``shape``."""
        return self.run(operands, shape, out_dtype, out)

    def run(
        self,
        operands: Sequence[np.ndarray | np.generic],
        shape: tuple[int, ...],
        out_dtype: np.dtype,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`__call__` with positional arguments (cheaper: backends call it per op)."""
        for a in operands:  # 16-bit arrays are rare: one cheap test each on the common path
            if type(a) is np.ndarray and a.itemsize == 2:
                return self._call_half(operands, shape, out_dtype, out)
        if out is None:
            if out_dtype.itemsize == 2:
                return self._call_half(operands, shape, out_dtype, out)
            out = memory.empty(shape, out_dtype)
        elif out.itemsize == 2:
            return self._call_half(operands, shape, out_dtype, out)
        loop = self._parallel if out.size >= self.parallel_threshold else self._serial
        if len(shape) == 1:  # already flat: skip the reshapes (a tiny op's main cost here)
            loop(*operands, out)
            return out
        flat = []  # (a loop, not a comprehension: a frame per call is dear here)
        for a in operands:
            flat.append(_flat(a))
        loop(*flat, out.reshape(-1))
        return out

    def _call_half(self, operands, shape, out_dtype, out) -> np.ndarray:
        """:meth:`__call__` with some half operands or a half output: through ``uint16``
        views and the loops of that combination of conversions."""
        loads, args = [], []
        for a in operands:
            code = half.half_dtype_code(a.dtype) if isinstance(a, np.generic | np.ndarray) else None
            if code is not None and isinstance(a, np.generic):  # a half scalar: widen it once
                a, code = np.float32(a), None
            loads.append(code)
            args.append(_flat(a).view(np.uint16) if code is not None else _flat(a))
        if out is None:
            out = memory.empty(shape, out_dtype)
        store = half.half_dtype_code(out.dtype)
        flat_out = out.reshape(-1)
        loops = self._loops_for(tuple(loads), store)
        loop = loops[1] if out.size >= self.parallel_threshold else loops[0]
        loop(*args, flat_out.view(np.uint16) if store is not None else flat_out)
        return out

    def _loops_for(self, loads: tuple[str | None, ...], store: str | None) -> tuple:
        """The (serial, parallel) loops reading ``loads`` and writing ``store``, made once."""
        key = (loads, store)
        loops = self._half_loops.get(key)
        if loops is None:
            if not any(loads) and store is None:
                loops = (self._serial, self._parallel)
            else:
                fingerprint = f"{self._fingerprint}:{_HALF_FINGERPRINT}"
                conversions = [_LOADS[code] for code in loads] + [_STORES[store]]
                loops = _LOOP_MAKERS[self.arity](self._scalar_fn, fingerprint, *conversions)
            self._half_loops[key] = loops
        return loops

    def periodic_loops(self, operand: int) -> tuple[Callable, Callable]:
        """The (serial, parallel) loops of a binary kernel over flat float or integer arrays
        where operand ``operand`` (0 or 1) has fewer elements than the output, ``n``, and
        repeats along it every ``n`` elements: a NumPy broadcast of an operand of the
        output's trailing shape (a ``(128,)`` bias against ``(32, 128)``) without its
        broadcast copy. Made on first use."""
        loops = self._periodic_loops.get(operand)
        if loops is None:
            loops = _periodic_loops_2(self._scalar_fn, self._fingerprint, operand)
            self._periodic_loops[operand] = loops
        return loops

    def in_place_loops(self) -> tuple[Callable, Callable]:
        """The (serial, parallel) loops of a binary kernel writing into its first operand,
        ``x[i] = f(x[i], y[i])`` over flat float or integer arrays (``y`` an array of
        ``x``'s size, or a scalar); made on first use. The same scalar function on the same
        elements as the out-of-place loops: their bits."""
        if self._in_place is None:
            self._in_place = _in_place_loops_2(self._scalar_fn, self._fingerprint)
        return self._in_place

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
