"""Numba primitives of the binary elementwise ops: pow, atan2, logaddexp, remainder,
floor_divide, hypot, maximum/minimum,
where and the comparisons. The scalar math is in :mod:`pylucid.kernels.binary_math`; float16
and bfloat16 are computed in float32 inside the kernels (see
:mod:`pylucid.backends.numba_backend.core`). The primitives that are one ``_nary`` call take
its :func:`~pylucid.backends.numba_backend.runners.direct` runner where they can."""

from __future__ import annotations

import numpy as np

from pylucid.backends.base import Shape
from pylucid.backends.half import handles_halves
from pylucid.backends.numba_backend.core import _operand, compute_dtype
from pylucid.dtypes import DType
from pylucid.kernels import binary_math as bm
from pylucid.kernels.loops import ElementwiseKernel, elementwise

_POW = elementwise(bm.power, arity=2, heavy=True)
_IPOW = elementwise(bm.ipow, arity=2, heavy=True)
_POW_GRAD_A = elementwise(bm.pow_grad_a, arity=3, heavy=True)
_POW_GRAD_B = elementwise(bm.pow_grad_b, arity=3, heavy=True)
_ATAN2 = elementwise(bm.atan2, arity=2, heavy=True)
_ATAN2_GRAD_A = elementwise(bm.atan2_grad_a, arity=3, heavy=True)
_ATAN2_GRAD_B = elementwise(bm.atan2_grad_b, arity=3, heavy=True)
_LOGADDEXP = elementwise(bm.logaddexp, arity=2, heavy=True)
_LOGADDEXP_GRAD = elementwise(bm.logaddexp_grad, arity=3, heavy=True)
_REMAINDER = elementwise(bm.remainder, arity=2, heavy=True)
_IREMAINDER = elementwise(bm.integer_remainder, arity=2, heavy=True)
_REMAINDER_GRAD_B = elementwise(bm.remainder_grad_b, arity=3, heavy=True)
_FLOOR_DIVIDE = elementwise(bm.floor_divide, arity=2, heavy=True)
_IFLOOR_DIVIDE = elementwise(bm.integer_floor_divide, arity=2, heavy=True)
_HYPOT = elementwise(bm.hypot, arity=2, heavy=True)
_HYPOT_GRAD = elementwise(bm.hypot_grad, arity=3, heavy=True)
_MAXIMUM = elementwise(bm.maximum, arity=2)
_MINIMUM = elementwise(bm.minimum, arity=2)
_MAXIMUM_GRAD = elementwise(bm.maximum_grad, arity=3)
_MINIMUM_GRAD = elementwise(bm.minimum_grad, arity=3)
_WHERE = elementwise(bm.where, arity=3)
_EQ = elementwise(bm.eq, arity=2)
_NE = elementwise(bm.ne, arity=2)
_LT = elementwise(bm.lt, arity=2)
_LE = elementwise(bm.le, arity=2)
_GT = elementwise(bm.gt, arity=2)
_GE = elementwise(bm.ge, arity=2)

_BOOL = np.dtype(np.bool_)


class NumbaBinary:
    """Primitives of the binary family on the numba backend (on top of ``NumbaCore._nary``)."""

    def _binary_compare(self, kernel: ElementwiseKernel, a, b, shape: Shape, dtype: DType):
        """``kernel`` over ``a`` and ``b`` cast to ``dtype``, into a bool array of ``shape``."""
        compute = compute_dtype(dtype).numpy
        operands = [_operand(x, shape, compute) for x in (a, b)]
        return kernel(*operands, shape=shape, out_dtype=_BOOL)

    @handles_halves
    def pow(self, a, b, shape, dtype):
        kernel = _POW if dtype.is_floating_point else _IPOW
        return self._nary(kernel, (a, b), shape, dtype)

    @handles_halves
    def pow_backward_a(self, a, b, g, shape, dtype):
        return self._nary(_POW_GRAD_A, (a, b, g), shape, dtype)

    @handles_halves
    def pow_backward_b(self, a, result, g, shape, dtype):
        return self._nary(_POW_GRAD_B, (a, result, g), shape, dtype)

    @handles_halves
    def atan2(self, a, b, shape, dtype):
        return self._nary(_ATAN2, (a, b), shape, dtype)

    @handles_halves
    def atan2_backward_a(self, a, b, g, shape, dtype):
        return self._nary(_ATAN2_GRAD_A, (a, b, g), shape, dtype)

    @handles_halves
    def atan2_backward_b(self, a, b, g, shape, dtype):
        return self._nary(_ATAN2_GRAD_B, (a, b, g), shape, dtype)

    @handles_halves
    def logaddexp(self, a, b, shape, dtype):
        return self._nary(_LOGADDEXP, (a, b), shape, dtype)

    @handles_halves
    def logaddexp_backward_a(self, a, b, g, shape, dtype):
        return self._nary(_LOGADDEXP_GRAD, (a, b, g), shape, dtype)

    @handles_halves
    def logaddexp_backward_b(self, a, b, g, shape, dtype):
        return self._nary(_LOGADDEXP_GRAD, (b, a, g), shape, dtype)  # (symmetric: swapped)

    @handles_halves
    def remainder(self, a, b, shape, dtype):
        kernel = _REMAINDER if dtype.is_floating_point else _IREMAINDER
        return self._nary(kernel, (a, b), shape, dtype)

    @handles_halves
    def remainder_backward_b(self, a, b, g, shape, dtype):
        return self._nary(_REMAINDER_GRAD_B, (a, b, g), shape, dtype)

    @handles_halves
    def floor_divide(self, a, b, shape, dtype):
        kernel = _FLOOR_DIVIDE if dtype.is_floating_point else _IFLOOR_DIVIDE
        return self._nary(kernel, (a, b), shape, dtype)

    @handles_halves
    def hypot(self, a, b, shape, dtype):
        return self._nary(_HYPOT, (a, b), shape, dtype)

    @handles_halves
    def hypot_backward(self, x, result, g, shape, dtype):
        return self._nary(_HYPOT_GRAD, (x, result, g), shape, dtype)

    @handles_halves
    def maximum(self, a, b, shape, dtype):
        return self._nary(_MAXIMUM, (a, b), shape, dtype)

    @handles_halves
    def minimum(self, a, b, shape, dtype):
        return self._nary(_MINIMUM, (a, b), shape, dtype)

    @handles_halves
    def maximum_backward(self, x, other, g, shape, dtype):
        return self._nary(_MAXIMUM_GRAD, (x, other, g), shape, dtype)

    @handles_halves
    def minimum_backward(self, x, other, g, shape, dtype):
        return self._nary(_MINIMUM_GRAD, (x, other, g), shape, dtype)

    @handles_halves
    def where(self, condition, a, b, shape, dtype):
        # The condition stays bool: only a and b take the compute dtype.
        compute = compute_dtype(dtype).numpy
        operands = [
            _operand(condition, shape, _BOOL),
            _operand(a, shape, compute),
            _operand(b, shape, compute),
        ]
        return _WHERE(*operands, shape=shape, out_dtype=dtype.numpy)

    @handles_halves
    def eq(self, a, b, shape, dtype):
        return self._binary_compare(_EQ, a, b, shape, dtype)

    @handles_halves
    def ne(self, a, b, shape, dtype):
        return self._binary_compare(_NE, a, b, shape, dtype)

    @handles_halves
    def lt(self, a, b, shape, dtype):
        return self._binary_compare(_LT, a, b, shape, dtype)

    @handles_halves
    def le(self, a, b, shape, dtype):
        return self._binary_compare(_LE, a, b, shape, dtype)

    @handles_halves
    def gt(self, a, b, shape, dtype):
        return self._binary_compare(_GT, a, b, shape, dtype)

    @handles_halves
    def ge(self, a, b, shape, dtype):
        return self._binary_compare(_GE, a, b, shape, dtype)
