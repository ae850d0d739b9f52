"""Runners: compiled elementwise loops called without the general path of ``_nary``.

The general path (:meth:`NumbaCore._nary
<pylucid.backends.numba_backend.core.NumbaCore._nary>`) checks each operand's layout and
dtype, broadcasts, and calls the loop through Numba's dispatcher, which resolves the
arguments' types at every call: for a tiny op that is most of its cost. A runner knows the
call signature ahead and calls the entry point of the loop's compiled overload:

- :func:`bound_loop`: bound to a :class:`~pylucid.ops.base.DispatchPlan` (a forward op's
  input shapes and dtypes are known when it is planned), through ``NumbaCore._bind``;
- :func:`direct`: made per (kernel, shape, dtype) on first use, for the calls no plan
  binds: grad formulas' primitives, primitives with scalar parameters, every ``_nary``;
- :func:`bound_rows`: a softmax-family row kernel bound to a plan (``axes=`` is part of it),
  as :func:`~pylucid.backends.numba_backend.sums.bound_sum` binds a sum.

A primitive is bound through the binder that :func:`bindable` attaches to it.

Each returns None where a storage needs the general path (a view, a broadcast, a half
dtype); where it runs, its output is the general path's, bit for bit (the same loop).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numba
import numpy as np

from pylucid import memory
from pylucid.backends.base import Shape
from pylucid.dtypes import DType
from pylucid.kernels import log2_avx512
from pylucid.kernels.jit import entry_point
from pylucid.kernels.log2_avx512 import Log2Kernel
from pylucid.kernels.loops import ElementwiseKernel
from pylucid.kernels.reduction import PARALLEL_THRESHOLD_ROWS, RowKernel

__all__ = [
    "DIRECT_CACHE_SIZE",
    "bindable",
    "bound_in_place",
    "bound_loop",
    "bound_rows",
    "direct",
    "rows_runner",
]

F = TypeVar("F", bound=Callable[..., Any])


def bindable(binder: Callable[..., Callable[..., np.ndarray | None] | None]) -> Callable[[F], F]:
    """Decorator: ``NumbaCore._bind`` binds the primitive to a plan by calling
    ``binder(input_shapes, input_dtypes, shape, dtype, **params)``, which returns a runner
    taking the storages (the output, or None where the general path must run) or None."""

    def mark(primitive: F) -> F:
        primitive.binder = binder  # type: ignore[attr-defined]
        return primitive

    return mark


def bound_loop(
    kernel: ElementwiseKernel | Log2Kernel,
    input_shapes: Sequence[Shape],
    input_dtypes: Sequence[DType],
    shape: Shape,
    dtype: DType,
    param: Any = None,
) -> Callable[..., np.ndarray | None] | None:
    """The loop of ``kernel`` bound to one call signature, as :meth:`NumbaCore._bind` gives
    it, or None where that signature needs the general path of ``_nary``: half dtypes,
    inputs of another dtype than ``dtype``, broadcasts other than one operand of the output's
    trailing shape against another of its shape (:func:`_periodic_runner`; not with a
    ``param``), no elements, or AVX-512 log2 on arrays.

    ``param``, where given, is a fixed argument of the loop between its two operands and
    the output, exactly as the general path passes it (``_fused``'s parameter tuple: the log
    family's ln b): the runner passes it at every call. Other arities are not bound.

    The runner takes the storages and returns the output, or None where a storage is not of
    ``dtype`` or an array operand not C-contiguous, aligned and writeable (``flags.carray``:
    a view, a read-only array), which the general path copies or transposes. A one-element
    operand goes as a scalar, as ``_operand`` gives it. The serial loop is compiled when
    bound and called through the entry point of that overload: Numba's dispatcher resolves
    the argument types at every call, and these are fixed by the signature (the scalars'
    type is the dtype, each array a C-contiguous 1-d one of it)."""
    numpy_dtype = dtype.numpy
    count = math.prod(shape)
    if (
        dtype.is_half
        or numpy_dtype.itemsize == 2
        or count == 0
        or any(d is not dtype for d in input_dtypes)
    ):
        return None
    broadcast = [s != shape and math.prod(s) != 1 for s in input_shapes]
    if any(broadcast):
        periodic = _periodic_operand(input_shapes, broadcast, shape)
        if periodic is None or not isinstance(kernel, ElementwiseKernel) or param is not None:
            return None
        return _periodic_runner(kernel, periodic, shape, numpy_dtype)
    ones = tuple(math.prod(s) == 1 for s in input_shapes)  # (the operands given as scalars)
    if param is not None and len(ones) != 2:  # (a parameter only for the fused backward loops)
        return None
    if isinstance(kernel, Log2Kernel):
        if log2_avx512.AVAILABLE and not all(ones):  # arrays take the AVX-512 kernel
            return None
        kernel = kernel.generic
    if count >= kernel.parallel_threshold:
        call = kernel._parallel
    else:  # compiled (or loaded from the cache) now, for the types the runner passes
        samples = [numpy_dtype.type(0) if one else np.empty(1, numpy_dtype) for one in ones]
        fixed = () if param is None else (param,)
        call = entry_point(kernel._serial, (*samples, *fixed, np.empty(1, numpy_dtype)))
    if param is not None:
        call = _with_param(call, param)
    allocate = np.empty if count < memory._SMALL_COUNT else memory.empty
    # A one-element operand is read at its only index; an array goes flat.
    indices = [(0,) * len(s) if one else None for s, one in zip(input_shapes, ones)]
    flat = len(shape) == 1
    # (Arities 1 and 2 spelled out: a loop over the operands costs a third of a tiny op.)
    if len(ones) == 1:
        (index,) = indices

        def run_1(a: np.ndarray) -> np.ndarray | None:
            if a.dtype is not numpy_dtype:
                return None
            if index is not None:
                a = a[index]
            elif not a.flags.carray:
                return None
            elif not flat:
                a = a.reshape(-1)
            out = allocate(shape, numpy_dtype)
            call(a, out if flat else out.reshape(-1))
            return out

        return run_1
    if len(ones) == 2:
        index_a, index_b = indices

        def run_2(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
            if a.dtype is not numpy_dtype or b.dtype is not numpy_dtype:
                return None
            if index_a is not None:
                a = a[index_a]
            elif not a.flags.carray:
                return None
            elif not flat:
                a = a.reshape(-1)
            if index_b is not None:
                b = b[index_b]
            elif not b.flags.carray:
                return None
            elif not flat:
                b = b.reshape(-1)
            out = allocate(shape, numpy_dtype)
            call(a, b, out if flat else out.reshape(-1))
            return out

        return run_2

    def run(*storages: np.ndarray) -> np.ndarray | None:
        args = []  # (a loop, not a comprehension: this runs for every op, a frame is dear)
        for a, index in zip(storages, indices):
            if a.dtype is not numpy_dtype:
                return None
            if index is not None:
                args.append(a[index])
            elif a.flags.carray:
                args.append(a if flat else a.reshape(-1))
            else:
                return None
        out = allocate(shape, numpy_dtype)
        args.append(out if flat else out.reshape(-1))
        call(*args)
        return out

    return run


def _with_param(loop: Callable[..., None], param: Any) -> Callable[..., None]:
    """``loop`` of two operands called with ``param`` between them and the output."""

    def call(a: Any, b: Any, out: np.ndarray) -> None:
        loop(a, b, param, out)

    return call


def bound_in_place(
    kernel: ElementwiseKernel,
    shape: Shape,
    dtype: DType,
    other_shape: Shape,
    other_dtype: DType,
) -> Callable[[np.ndarray, np.ndarray], bool] | None:
    """The runner of an in-place binary op, ``x = kernel(x, other)`` into ``x``'s memory, for
    ``x`` of ``shape`` and ``dtype`` and ``other`` of ``other_shape`` and ``other_dtype``:
    the kernel's in-place loop (:meth:`ElementwiseKernel.in_place_loops`). None where the
    signature needs the general path: half dtypes, another dtype for ``other``, ``other``
    broadcast other than from one element, no elements.

    The runner takes the two storages and returns True once it has written ``x``, or False,
    having written nothing, where ``x`` or an array ``other`` is not of ``dtype`` or not
    C-contiguous, aligned and writeable (``flags.carray``). ``other`` may be ``x`` itself
    (each element is read before it is written, at its own index); one that overlaps
    ``x``'s memory otherwise must not be given."""
    numpy_dtype = dtype.numpy
    count = math.prod(shape)
    if dtype.is_half or numpy_dtype.itemsize == 2 or other_dtype is not dtype or count == 0:
        return None
    one = math.prod(other_shape) == 1
    if not one and other_shape != shape:
        return None
    serial, parallel = kernel.in_place_loops()
    if count >= kernel.parallel_threshold:
        call = parallel
    else:
        flat = np.empty(1, numpy_dtype)
        call = entry_point(serial, (flat, numpy_dtype.type(0) if one else flat))
    index = (0,) * len(other_shape) if one else None
    reshape = len(shape) != 1

    def run_in_place(x: np.ndarray, other: np.ndarray) -> bool:
        if x.dtype is not numpy_dtype or other.dtype is not numpy_dtype or not x.flags.carray:
            return False
        if index is not None:
            other = other[index]
        elif not other.flags.carray:
            return False
        elif reshape:
            other = other.reshape(-1)
        call(x.reshape(-1) if reshape else x, other)
        return True

    return run_in_place


def bound_rows(
    kernel: RowKernel,
    input_shapes: Sequence[Shape],
    input_dtypes: Sequence[DType],
    shape: Shape,
    dtype: DType,
    *,
    axes: tuple[int, ...],
) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """The runner of a softmax-family forward (``kernel`` along the one axis in ``axes``)
    for an input of ``input_shapes[0]`` and ``input_dtypes[0]``: :func:`rows_runner`, or
    None for an input of another dtype."""
    (input_dtype,) = input_dtypes
    if input_dtype is not dtype:
        return None
    return rows_runner(kernel, shape, dtype, axes)


def rows_runner(
    kernel: RowKernel, shape: Shape, dtype: DType, axes: tuple[int, ...], arity: int = 1
) -> Callable[..., np.ndarray | None] | None:
    """The runner of a softmax-family kernel (forward, or with ``arity=2`` a backward of
    ``(y, g)``) along the one axis in ``axes`` for operands of ``shape`` and ``dtype``: the
    kernel's loop on the ``(rows, n)`` views of the operands, as the general path
    (``NumbaReduction._along``) runs it when the axis is the last one. None where that path
    does something else: an axis with larger axes after it (its column kernel), no axis
    (0-d), half dtypes, no elements. The runner returns None for an operand of another
    dtype or shape, or not C-contiguous, aligned and writeable (``flags.carray``)."""
    numpy_dtype = dtype.numpy
    count = math.prod(shape)
    if dtype.is_half or not axes or count == 0 or math.prod(shape[axes[0] + 1 :]) > 1:
        return None
    n = shape[axes[0]]
    rows = count // n
    if count >= PARALLEL_THRESHOLD_ROWS and rows > 1:  # (as RowKernel.__call__ chooses)
        call = kernel._parallel
    else:
        block = np.empty((1, 1), numpy_dtype)
        call = entry_point(kernel._serial, (block,) * (arity + 1))
    allocate = np.empty if count < memory._SMALL_COUNT else memory.empty

    def plain(a: np.ndarray) -> bool:
        return a.dtype is numpy_dtype and a.flags.carray and a.shape == shape

    if arity == 1:

        def run_rows(a: np.ndarray) -> np.ndarray | None:
            if not plain(a):
                return None
            out = allocate(shape, numpy_dtype)
            call(a.reshape(rows, n), out.reshape(rows, n))
            return out

        return run_rows

    def run_rows_2(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        if not plain(a) or not plain(b):
            return None
        out = allocate(shape, numpy_dtype)
        call(a.reshape(rows, n), b.reshape(rows, n), out.reshape(rows, n))
        return out

    return run_rows_2


def _periodic_operand(
    input_shapes: Sequence[Shape], broadcast: Sequence[bool], shape: Shape
) -> int | None:
    """The operand of a binary signature that broadcasts by repeating along the output -
    its shape, without leading 1s, is the output's trailing shape - while the other has
    the output's shape; None for any other signature."""
    if len(input_shapes) != 2 or all(broadcast):
        return None
    periodic = 0 if broadcast[0] else 1
    trailing = tuple(input_shapes[periodic])
    while trailing and trailing[0] == 1:
        trailing = trailing[1:]
    if input_shapes[1 - periodic] != shape or trailing != shape[len(shape) - len(trailing) :]:
        return None
    return periodic


def _periodic_runner(
    kernel: ElementwiseKernel, periodic: int, shape: Shape, numpy_dtype: np.dtype
) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None]:
    """The runner of a binary signature whose operand ``periodic`` repeats along the output
    (:func:`_periodic_operand`): the kernel's periodic loop over the flat operands, no
    broadcast copy (a (32, 128) + (128,) bias add: 7.5 us through the copy). The same
    scalar function on the same elements: the general path's bits."""
    serial, parallel = kernel.periodic_loops(periodic)
    count = math.prod(shape)
    if count >= kernel.parallel_threshold:
        call = parallel
    else:
        flat = np.empty(1, numpy_dtype)
        call = entry_point(serial, (flat, flat, flat))
    allocate = np.empty if count < memory._SMALL_COUNT else memory.empty

    def run_periodic(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        if a.dtype is not numpy_dtype or b.dtype is not numpy_dtype:
            return None
        if not a.flags.carray or not b.flags.carray:
            return None
        out = allocate(shape, numpy_dtype)
        call(a.reshape(-1), b.reshape(-1), out.reshape(-1))
        return out

    return run_periodic


#: (kernel, shape, dtype) -> the runner of :func:`direct` for that call signature; emptied
#: when it reaches :data:`DIRECT_CACHE_SIZE` entries (a program's signatures are few).
_DIRECT: dict[tuple, Callable[[tuple, tuple], np.ndarray | None]] = {}
DIRECT_CACHE_SIZE = 4096


def direct(
    kernel: ElementwiseKernel | Log2Kernel,
    operands: tuple[np.ndarray, ...],
    shape: Shape,
    dtype: DType,
    extra: tuple = (),
) -> np.ndarray | None:
    """What ``kernel`` over ``operands`` gives through the general path (``_nary``, or
    ``kernel(*operands, *extra, ...)`` after ``_operand``), straight from its compiled serial
    loop; None where the call needs that path.

    For the primitives that are one such call, backward ones mostly: unlike a forward, they
    are called by grad formulas, not through a :class:`~pylucid.ops.base.DispatchPlan`, so
    no runner is bound to them ahead of time. This one is made per (kernel, shape, dtype)
    on first use and cached.

    Parameters
    ----------
    kernel : ElementwiseKernel
        The kernel the general path runs.
    operands : tuple of (numpy.ndarray or int or float)
        The operands. The runner takes arrays of ``dtype`` that are C-contiguous, aligned
        and writeable (``flags.carray``) and of ``shape``, or of one element, and Python
        ints and floats (both given to the loop as scalars of ``dtype``, as ``_operand``
        gives them: a mean's count); anything else - a half array, a broadcast, a view, a
        read-only array, a NumPy scalar - returns None.
    shape : tuple of int
        The output's shape.
    dtype : DType
        The compute and output dtype; None is returned for the half dtypes.
    extra : tuple
        Kernel arguments after the operands, exactly as the general path passes them (its
        ``compute.type(s)`` scalars, or a ``_fused`` parameter tuple). Their types must be
        fixed by the kernel and dtype: the loop is called through the entry point of the
        overload compiled for the first call's types.

    Returns
    -------
    numpy.ndarray or None
        The output (bit for bit the general path's), or None.
    """
    key = (kernel, shape, dtype)
    runner = _DIRECT.get(key)
    if runner is None:
        if len(_DIRECT) >= DIRECT_CACHE_SIZE:
            _DIRECT.clear()
        runner = _DIRECT[key] = _direct_runner(kernel, shape, dtype)
    return runner(operands, extra)


def _general_path(operands: tuple, extra: tuple) -> None:
    """The runner of the signatures :func:`direct` leaves to the general path."""
    return None


def _direct_runner(
    kernel: ElementwiseKernel | Log2Kernel, shape: Shape, dtype: DType
) -> Callable[[tuple, tuple], np.ndarray | None]:
    """The runner of :func:`direct` for one (kernel, shape, dtype): :func:`_general_path`
    for the half dtypes (the general path reads them through ``uint16`` views), no elements,
    outputs large enough for the parallel loop (there the call's overhead is noise), and
    log2 (its AVX-512 kernel is not a loop of this kind; plans bind the generic one)."""
    numpy_dtype = dtype.numpy
    count = math.prod(shape)
    if (
        isinstance(kernel, Log2Kernel)
        or dtype.is_half
        or numpy_dtype.itemsize == 2
        or not 0 < count < kernel.parallel_threshold
    ):
        return _general_path
    loop = kernel._serial
    small = count < memory._SMALL_COUNT
    flat = len(shape) == 1
    #: Which operands go as scalars (a bit each) -> the entry point of the compiled overload:
    #: Numba's dispatcher resolves the argument types at every call, fixed here by the
    #: signature and that pattern.
    entries: dict[int, Callable[..., None]] = {}

    def run(operands: tuple, extra: tuple) -> np.ndarray | None:
        args = []  # (a loop, not a comprehension: this runs for every op, a frame is dear)
        scalars = 0
        for a in operands:
            scalars += scalars
            kind = type(a)
            if kind is not np.ndarray:
                if kind is not int and kind is not float:
                    return None
                args.append(numpy_dtype.type(a))  # (a Python number, as _operand casts it)
                scalars += 1
                continue
            if a.dtype is not numpy_dtype:
                return None
            if a.size == 1:  # (as _operand gives it: a scalar, whatever its shape)
                args.append(a[()] if a.ndim == 0 else a[0] if a.ndim == 1 else a.reshape(-1)[0])
                scalars += 1
            elif a.shape == shape and a.flags.carray:
                args.append(a if flat else a.reshape(-1))
            else:
                return None
        args += extra
        out = np.empty(shape, numpy_dtype) if small else memory.empty(shape, numpy_dtype)
        args.append(out if flat else out.reshape(-1))
        entry = entries.get(scalars)
        if entry is not None:
            entry(*args)
            return out
        loop(*args)  # (compiles, or loads from the cache, this overload on its first call)
        overload = loop.overloads.get(tuple([numba.typeof(a) for a in args]))
        if overload is not None:
            entries[scalars] = overload.entry_point
        return out

    return run
