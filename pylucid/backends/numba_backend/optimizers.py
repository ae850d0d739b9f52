"""Fused optimizer updates on the ``numba`` backend (:mod:`pylucid.kernels.optimizers`).

A float32 or float64 parameter whose arrays (parameter and state) are C-contiguous and
writable is updated in place, in one pass. Otherwise - a half dtype (computed in float32, as
every primitive computes halves), or a strided view - the update runs on contiguous copies,
which are returned for the caller to write back.
"""

from __future__ import annotations

import numpy as np

from pylucid.kernels import optimizers as kernels
from pylucid.kernels.half import half_dtype_code

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def _in_place(arrays: tuple[np.ndarray | None, ...]) -> bool:
    dtype = arrays[0].dtype
    return dtype in _NATIVE and all(
        a is None or (a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable)
        for a in arrays
    )


def _run(kernel: kernels.UpdateKernel, param: np.ndarray, grad: np.ndarray,
         states: tuple[np.ndarray | None, ...], scalars: tuple[float, ...],
         flags: tuple[bool, ...]) -> tuple[np.ndarray | None, ...]:  # fmt: skip
    """Run ``kernel(param, grad, *states, *scalars, *flags)``; return the updated
    ``(param, *states)`` (the arrays themselves where the update ran in place)."""
    compute = np.dtype(np.float32) if half_dtype_code(param.dtype) is not None else param.dtype
    in_place = _in_place((param, *states))
    if in_place:
        work = [None if a is None else a.reshape(-1) for a in (param, *states)]
    else:
        work = [
            None if a is None else np.array(a, dtype=compute, order="C").reshape(-1)
            for a in (param, *states)
        ]
    flat_grad = np.ascontiguousarray(grad, dtype=compute).reshape(-1)
    unused = np.empty(0, compute)
    kernel(
        work[0],
        flat_grad,
        *[unused if w is None else w for w in work[1:]],
        *[compute.type(s) for s in scalars],
        *flags,
    )
    if in_place:
        return (param, *states)
    return tuple(
        None if a is None else w.reshape(a.shape).astype(a.dtype, copy=False)
        for a, w in zip((param, *states), work)
    )


class NumbaOptimizers:
    """Primitives of the ``optimizers`` family on the numba backend."""

    def sgd_update(self, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, maximize,
                   first):  # fmt: skip
        scalars = (-lr, momentum, 1 - dampening, weight_decay)
        return _run(kernels.SGD, p, g, (buf,), scalars, (nesterov, maximize, first))

    def adam_update(self, p, g, exp_avg, exp_avg_sq, max_exp_avg_sq, beta1, beta2, step_size,
                    bias_correction2_sqrt, eps, weight_decay, decay, amsgrad,
                    maximize):  # fmt: skip
        weight = np.dtype(p.dtype if p.dtype in _NATIVE else np.float32).type(1 - beta1)
        scalars = (weight, 1 - weight, beta2, 1 - beta2, -step_size, bias_correction2_sqrt, eps,
                   weight_decay, 1.0 if decay is None else decay)  # fmt: skip
        flags = (decay is not None, amsgrad, maximize)
        states = (exp_avg, exp_avg_sq, max_exp_avg_sq)
        return _run(kernels.ADAM, p, g, states, scalars, flags)

    def rmsprop_update(self, p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay,
                       momentum, centered, maximize):  # fmt: skip
        weight = np.dtype(p.dtype if p.dtype in _NATIVE else np.float32).type(1 - alpha)
        scalars = (-lr, alpha, 1 - alpha, weight, 1 - weight, eps, weight_decay, momentum)
        states = (square_avg, grad_avg, buf)
        return _run(kernels.RMSPROP, p, g, states, scalars, (centered, maximize))

    def adagrad_update(self, p, g, state_sum, clr, eps, weight_decay, maximize):
        return _run(kernels.ADAGRAD, p, g, (state_sum,), (-clr, eps, weight_decay), (maximize,))
