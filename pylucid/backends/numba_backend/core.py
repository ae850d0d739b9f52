"""Core of the ``numba`` backend: storage conversion, arithmetic, log2 and sum.

Elementwise primitives (``_unary`` / ``_nary`` and the families built on them) handle float16
and bfloat16 themselves (marked with :func:`~pylucid.backends.half.handles_halves`): a half
dtype computes in float32 - the operands of the kernel are float32 scalars and the half
arrays as they are, which the kernel reads through ``uint16`` views, converting each element
in registers - and the kernel writes the half output from its float32 result. A half array
given where the dtype is float32 (a ``FORCE_FP32`` op) is read the same way: no float32 copy
of it is made.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np

from pylucid import memory
from pylucid.backends.base import Axes, Shape
from pylucid.backends.half import handles_halves
from pylucid.backends.numba_backend.runners import (
    bindable,
    bound_in_place,
    bound_loop,
    direct,
)
from pylucid.backends.numba_backend.sums import bound_sum, compiled_sum
from pylucid.dtypes import DType, as_dtype, float32
from pylucid.kernels import scalar
from pylucid.kernels.half import half_dtype_code
from pylucid.kernels.log2_avx512 import Log2Kernel
from pylucid.kernels.loops import PARALLEL_THRESHOLD, ElementwiseKernel, elementwise

#: float32 on AVX-512: pylucid.kernels.log2_avx512; everything else: the generic loop.
_LOG2 = Log2Kernel(elementwise(scalar.log2, heavy=True))
_NEG = elementwise(scalar.neg)
_ADD = elementwise(scalar.add, arity=2)
_SUB = elementwise(scalar.sub, arity=2)
_MUL = elementwise(scalar.mul, arity=2)
_DIV = elementwise(scalar.div, arity=2)
_DIV_GRAD_B = elementwise(scalar.div_grad_b, arity=3)
_POW_SCALAR = elementwise(scalar.pow_scalar, arity=2, heavy=True)
_POW_SCALAR_GRAD = elementwise(scalar.pow_scalar_grad, arity=3, heavy=True)


_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


def compute_dtype(dtype: DType) -> DType:
    """The dtype a kernel computes ``dtype`` in: float32 for the half dtypes."""
    return float32 if dtype.is_half else dtype


def _operand(a: np.ndarray | float, shape: Shape, dtype: np.dtype) -> np.ndarray | np.generic:
    """``a`` as a kernel operand for an output of ``shape``: a scalar if it has one element,
    else a C-contiguous array of exactly ``shape`` (broadcast and copied only if needed).

    ``dtype`` is the compute dtype; a float16 or bfloat16 array where it is float32 stays as
    it is (the kernel converts its elements as it reads them), a one-element one becomes a
    float32 scalar."""
    if type(a) is np.ndarray and a.dtype is dtype:  # the common cases, in cheap tests
        if a.size != 1:
            if a.shape == shape:
                return a if a.flags.c_contiguous else _contiguous_copy(a)
        elif a.ndim < 2:  # a lifted number (0-d), or a tensor of shape (1,)
            return a[()] if a.ndim == 0 else a[0]
    if not isinstance(a, np.ndarray):
        return dtype.type(a)
    if a.dtype != dtype:
        if dtype != _FLOAT32 or half_dtype_code(a.dtype) is None:
            a = a.astype(dtype)
        elif a.size == 1:
            return dtype.type(a.reshape(())[()])
    if a.size == 1:
        return a.reshape(())[()]
    if a.shape != shape:  # (np.broadcast_to and a copy: 8.6 us for a (128,) bias against
        broadcast = memory.empty(shape, a.dtype)  # (32, 128); copyto broadcasts in C: 1.8 us)
        np.copyto(broadcast, a)
        return broadcast
    return a if a.flags.c_contiguous else _contiguous_copy(a)


def _contiguous_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` in a pooled array (:func:`pylucid.memory.empty`; a large
    fresh one costs a page fault per 4 KiB on first touch)."""
    copy = memory.empty(a.shape, a.dtype)
    np.copyto(copy, a)
    return copy


def _fortran_ordered(operands: tuple, shape: Shape) -> bool:
    """Whether every array operand is a Fortran-ordered array of ``shape`` (a transposed
    C array, typically): then the kernel runs on the transposes, which are C-contiguous,
    and its output is transposed back, instead of copying each operand to C order. Measured
    on a transposed 2048 x 2048 float32 array: log2 1.78 ms (copying first: 37.0 ms; a
    C-ordered input: 1.71 ms), add 0.65 ms (copying: 75 ms). Other strides are copied."""
    if len(shape) < 2:
        return False
    found = False
    for a in operands:  # (the common answer, a C-ordered operand, after one flags test)
        if isinstance(a, np.ndarray) and a.size != 1:
            flags = a.flags
            if flags.c_contiguous or not flags.f_contiguous or a.shape != shape:
                return False
            found = True
    return found


def _transposed(a: object) -> object:
    return a.T if isinstance(a, np.ndarray) and a.ndim > 1 else a


def elementwise_primitive(kernel: ElementwiseKernel | Log2Kernel):
    """Decorator of a primitive that is ``self._nary(kernel, operands, shape, dtype)`` and
    nothing else: marks it as computing halves itself (:func:`handles_halves`), as bound
    to plans by :func:`bound_loop` of its kernel (:func:`bindable`), and, for a binary
    kernel, as run in place by :func:`bound_in_place` (``in_place_binder``)."""

    def mark(primitive):  # noqa: ANN001, ANN202
        if isinstance(kernel, ElementwiseKernel) and kernel.arity == 2:
            primitive.in_place_binder = functools.partial(bound_in_place, kernel)
        return handles_halves(bindable(functools.partial(bound_loop, kernel))(primitive))

    return mark


class NumbaCore:
    """Conversion and core primitives; the family mixins build on ``_unary`` / ``_nary``."""

    def is_available(self) -> bool:
        return True

    def unavailable_reason(self) -> str:
        return ""

    def info(self) -> dict[str, str]:
        return {
            "runs_on": "cpu",
            "numba": numba.__version__,
            "numpy": np.__version__,
            "threads": str(numba.get_num_threads()),
            "threading_layer": numba.config.THREADING_LAYER,
            "parallel_threshold": f"{PARALLEL_THRESHOLD} elements (memory-bound loops)",
        }

    # -- conversion -------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: DType) -> np.ndarray:
        return array if array.dtype == dtype.numpy else array.astype(dtype.numpy)

    def to_numpy(self, storage: np.ndarray) -> np.ndarray:
        return storage

    def shape(self, storage: np.ndarray) -> Shape:
        return storage.shape

    def dtype(self, storage: np.ndarray) -> DType:
        return as_dtype(storage.dtype)

    def full(self, shape: Shape, value: float, dtype: DType) -> np.ndarray:
        if shape == ():  # a lifted number: np.array takes a sixth of np.full's time
            return np.array(value, dtype=dtype.numpy)
        return np.full(shape, value, dtype=dtype.numpy)

    def cast(self, a: np.ndarray, dtype: DType) -> np.ndarray:
        if a.dtype == dtype.numpy:
            return a
        with np.errstate(over="ignore"):  # values beyond a half dtype's range become inf
            return a.astype(dtype.numpy)

    def clone(self, a: np.ndarray) -> np.ndarray:
        return np.array(a, copy=True, order="C")

    def check_allocation(self, op: str, shape: Shape, dtype: DType) -> None:
        """Nothing to check: NumPy allocates at once and raises MemoryError itself."""

    def synchronize(self) -> None:
        """Nothing to wait for: every kernel runs to completion before it returns."""

    def is_contiguous(self, a: np.ndarray) -> bool:
        return bool(a.flags.c_contiguous)

    def element_strides(self, a: np.ndarray) -> Shape:
        return tuple(s // a.itemsize for s in a.strides)

    def data_pointer(self, a: np.ndarray) -> int:
        return int(a.__array_interface__["data"][0])

    def is_writable(self, a: np.ndarray) -> bool:
        return bool(a.flags.writeable)

    def aliases(self, out: np.ndarray, a: np.ndarray) -> bool:
        # Bounds only: a reshape copy never overlaps. Arrays of no elements have no bounds,
        # and NumPy reshapes them without copying.
        return out.size == 0 or bool(np.may_share_memory(out, a))

    def accumulate(self, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
        if not dst.flags.writeable:
            return dst + src
        with np.errstate(over="ignore", invalid="ignore"):  # inf + -inf is nan, silently
            return np.add(dst, src, out=dst)

    def is_private(self, a: np.ndarray) -> bool:
        if not a.flags.writeable:
            return False
        if a.flags.owndata or memory.is_sole_view(a):  # a pooled kernel output is a view
            return True
        # A reshaped kernel output: a view of the whole of a buffer no other array refers to
        # (its references: ``a.base``, the name below and getrefcount's argument).
        base = a.base
        return (
            type(base) is np.ndarray
            and base.flags.owndata
            and base.nbytes == a.nbytes
            and sys.getrefcount(base) == 3
        )

    def write(self, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
        if not dst.flags.writeable:
            raise ValueError(
                f"cannot change a read-only array in place (shape {dst.shape}): it is a "
                f"broadcast view or a read-only NumPy array; copy it first"
            )
        np.copyto(dst, src)
        return dst

    # -- elementwise ------------------------------------------------------------------------
    def _bind(
        self,
        primitive: str,
        input_shapes: Sequence[Shape],
        input_dtypes: Sequence[DType],
        shape: Shape,
        dtype: DType,
        **params: Any,
    ) -> Callable[..., np.ndarray | None] | None:
        """A runner of ``primitive`` for inputs of ``input_shapes`` and ``input_dtypes``, an
        output of ``shape`` computed in ``dtype`` and the op's ``params``, straight to its
        compiled loop: called with the storages, it returns the output, or None where a
        storage's layout needs the general path. None where the primitive is not marked
        :func:`bindable` (or :func:`elementwise_primitive`), or the signature needs the
        general path (see :func:`~pylucid.backends.numba_backend.runners.bound_loop`,
        :func:`~pylucid.backends.numba_backend.sums.bound_sum`,
        :func:`~pylucid.backends.numba_backend.runners.bound_rows`).

        An optional fast path outside the backend protocol (private, so a backend without
        it binds nothing): :class:`~pylucid.ops.base.DispatchPlan` asks for it."""
        binder = getattr(getattr(type(self), primitive, None), "binder", None)
        if binder is None:
            return None
        return binder(input_shapes, input_dtypes, shape, dtype, **params)

    def _bind_in_place(
        self, primitive: str, shape: Shape, dtype: DType, other_shape: Shape, other_dtype: DType
    ) -> Callable[[np.ndarray, np.ndarray], bool] | None:
        """A runner of the binary ``primitive`` in place, ``x = primitive(x, other)`` into
        ``x``'s memory (:func:`~pylucid.backends.numba_backend.runners.bound_in_place`), or
        None where the primitive has no in-place loop or the signature needs the general
        path. An optional fast path outside the backend protocol, as :meth:`_bind` is: the
        in-place ops (:mod:`pylucid.ops.inplace`) ask for it."""
        binder = getattr(getattr(type(self), primitive, None), "in_place_binder", None)
        if binder is None:
            return None
        return binder(shape, dtype, other_shape, other_dtype)

    def _unary(self, kernel, a, shape, dtype):
        return self._nary(kernel, (a,), shape, dtype)

    def _nary(self, kernel, operands, shape, dtype, *scalars):
        """``kernel`` over ``operands`` (and ``scalars``, cast to the compute dtype) into a
        new output of ``shape``: through its :func:`direct` runner where that takes the
        call, else broadcasting, converting and dispatching here (the general path)."""
        extra = tuple([dtype.numpy.type(s) for s in scalars]) if scalars else ()
        out = direct(kernel, operands, shape, dtype, extra)
        if out is not None:
            return out
        compute = _FLOAT32 if dtype.is_half else dtype.numpy  # (compute_dtype, inline)
        if len(shape) > 1 and _fortran_ordered(operands, shape):
            transposed = tuple(_transposed(a) for a in operands)
            return self._nary(kernel, transposed, shape[::-1], dtype, *scalars).T
        args = []  # (a loop, not a comprehension: this runs for every op, a frame is dear)
        for a in operands:
            args.append(_operand(a, shape, compute))
        if scalars:
            args += [compute.type(s) for s in scalars]
        return kernel.run(args, shape, dtype.numpy)

    @elementwise_primitive(_LOG2)
    def log2(self, a, shape, dtype):
        return self._unary(_LOG2, a, shape, dtype)

    @elementwise_primitive(_NEG)
    def neg(self, a, shape, dtype):
        return self._unary(_NEG, a, shape, dtype)

    @elementwise_primitive(_ADD)
    def add(self, a, b, shape, dtype):
        return self._nary(_ADD, (a, b), shape, dtype)

    @elementwise_primitive(_SUB)
    def sub(self, a, b, shape, dtype):
        return self._nary(_SUB, (a, b), shape, dtype)

    @elementwise_primitive(_MUL)
    def mul(self, a, b, shape, dtype):
        return self._nary(_MUL, (a, b), shape, dtype)

    @elementwise_primitive(_DIV)
    def div(self, a, b, shape, dtype):
        return self._nary(_DIV, (a, b), shape, dtype)

    @elementwise_primitive(_DIV_GRAD_B)
    def div_backward_b(self, a, b, g, shape, dtype):
        return self._nary(_DIV_GRAD_B, (a, b, g), shape, dtype)

    @handles_halves
    def pow_scalar(self, a, exponent, shape, dtype):
        return self._nary(_POW_SCALAR, (a,), shape, dtype, exponent)

    @handles_halves
    def pow_scalar_backward(self, x, g, exponent, shape, dtype):
        return self._nary(_POW_SCALAR_GRAD, (x, g), shape, dtype, exponent)

    # -- reductions and shape ---------------------------------------------------------------
    @bindable(bound_sum)
    def sum(self, a: np.ndarray, axes: Axes, keepdims: bool, dtype: DType) -> np.ndarray:
        # NumPy's pairwise summation: error O(log n) ulp rather than O(n) for a plain loop.
        # Overflow to inf is the IEEE answer, not a warning. Short rows and leading axes
        # are summed by compiled loops in NumPy's order (its bits); the rest by NumPy.
        out = compiled_sum(a, axes, keepdims, dtype.numpy)
        if out is not None:
            return out
        # (np.add.reduce is what np.sum calls for arrays, without its Python wrapper: ~2 us.)
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(np.add.reduce(a, axis=axes, dtype=dtype.numpy, keepdims=keepdims))

    def broadcast_to(self, a: np.ndarray, shape: Shape) -> np.ndarray:
        return np.broadcast_to(a, shape)

    def broadcast_copy(self, a: np.ndarray, shape: Shape) -> np.ndarray:
        # (a third of np.broadcast_to's time for a (32, 10) gradient, whose consumers then
        # take their contiguous fast paths; they would copy a stride-0 view themselves)
        out = memory.empty(shape, a.dtype)
        np.copyto(out, a)
        return out

    def reshape(self, a: np.ndarray, shape: Shape) -> np.ndarray:
        if a.flags.c_contiguous:
            return a.reshape(shape)
        try:  # (a view where the strides allow one; else a copy, pooled)
            return np.reshape(a, shape, copy=False)
        except ValueError:
            return _contiguous_copy(a).reshape(shape)
