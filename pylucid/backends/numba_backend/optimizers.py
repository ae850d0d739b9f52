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


def _run(kernel: kernels.UpdateKernel, choices: tuple[bool, ...], param: np.ndarray,
         grad: np.ndarray, states: tuple[np.ndarray | None, ...],
         scalars: tuple[float, ...]) -> tuple[np.ndarray | None, ...]:  # fmt: skip
    """Run ``kernel`` (variant ``choices``) on ``param``, ``grad``, ``states`` and
    ``scalars``; return the updated ``(param, *states)`` (the arrays themselves where the
    update ran in place)."""
    compute = _compute_dtype(param)
    in_place = _in_place((param, *states))
    if in_place:
        work = [None if a is None else a.reshape(-1) for a in (param, *states)]
    else:
        work = [
            None if a is None else np.array(a, dtype=compute, order="C").reshape(-1)
            for a in (param, *states)
        ]
    unused = np.empty(0, compute)
    kernel(
        choices,
        work[0],
        np.ascontiguousarray(grad, dtype=compute).reshape(-1),
        *[unused if w is None else w for w in work[1:]],
        *[compute.type(s) for s in scalars],
    )
    if in_place:
        return (param, *states)
    return tuple(
        None if a is None else w.reshape(a.shape).astype(a.dtype, copy=False)
        for a, w in zip((param, *states), work)
    )


def _compute_dtype(param: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if half_dtype_code(param.dtype) is not None else param.dtype


def _weight(param: np.ndarray, weight: float) -> np.generic:
    """A lerp weight rounded to the compute dtype (``1 - weight`` is computed there)."""
    return _compute_dtype(param).type(weight)


class NumbaOptimizers:
    """Primitives of the ``optimizers`` family on the numba backend."""

    def sgd_update(self, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, maximize,
                   first):  # fmt: skip
        choices = (momentum != 0, nesterov, weight_decay != 0)
        scalars = (-1.0 if maximize else 1.0, -lr, 0.0 if first else momentum,
                   1.0 if first else 1 - dampening, momentum, weight_decay)  # fmt: skip
        return _run(kernels.SGD, choices, p, g, (buf,), scalars)

    def adam_update(self, p, g, exp_avg, exp_avg_sq, max_exp_avg_sq, beta1, beta2, step_size,
                    bias_correction2_sqrt, eps, weight_decay, decay, amsgrad,
                    maximize):  # fmt: skip
        weight = _weight(p, 1 - beta1)
        choices = (weight_decay != 0 and decay is None, amsgrad, abs(weight) < 0.5)
        scalars = (-1.0 if maximize else 1.0, weight, 1 - weight, beta2, 1 - beta2, -step_size,
                   bias_correction2_sqrt, eps, weight_decay,
                   1.0 if decay is None or weight_decay == 0 else decay)  # fmt: skip
        states = (exp_avg, exp_avg_sq, max_exp_avg_sq)
        return _run(kernels.ADAM, choices, p, g, states, scalars)

    def rmsprop_update(self, p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay,
                       momentum, centered, maximize):  # fmt: skip
        weight = _weight(p, 1 - alpha)
        choices = (weight_decay != 0, centered, momentum > 0, abs(weight) < 0.5)
        scalars = (-1.0 if maximize else 1.0, -lr, alpha, 1 - alpha, weight, 1 - weight, eps,
                   weight_decay, momentum)  # fmt: skip
        states = (square_avg, grad_avg, buf)
        return _run(kernels.RMSPROP, choices, p, g, states, scalars)

    def adagrad_update(self, p, g, state_sum, clr, eps, weight_decay, maximize):
        scalars = (-1.0 if maximize else 1.0, -clr, eps, weight_decay)
        return _run(kernels.ADAGRAD, (weight_decay != 0,), p, g, (state_sum,), scalars)

    def adadelta_update(self, p, g, square_avg, acc_delta, lr, rho, eps, weight_decay, maximize):
        scalars = (-1.0 if maximize else 1.0, -lr, rho, 1 - rho, eps, weight_decay)
        states = (square_avg, acc_delta)
        return _run(kernels.ADADELTA, (weight_decay != 0,), p, g, states, scalars)

    def norms(self, arrays, order, dtype):
        compute = np.float32 if dtype.is_half else dtype.numpy
        values = np.empty(len(arrays), compute)
        for i, a in enumerate(arrays):
            flat = np.ascontiguousarray(a, dtype=compute).reshape(-1)
            values[i] = _vector_norm(flat, order)
        return values.astype(dtype.numpy, copy=False)

    def scale(self, arrays, factor, dtype):
        scaled = []
        with np.errstate(all="ignore"):  # inf * 0 is nan, silently, as in every primitive
            for a in arrays:
                if a.flags.writeable and not dtype.is_half:
                    scaled.append(np.multiply(a, a.dtype.type(factor), out=a))
                else:  # (halves: in float32, rounded once, as every primitive does)
                    scaled.append((a.astype(np.float32) * np.float32(factor)).astype(a.dtype))
        return scaled


def _vector_norm(flat: np.ndarray, order: float) -> np.generic:
    """``torch.linalg.vector_norm(flat, order)`` of a flat array (2: BLAS's dot)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if order == 2:
            return np.sqrt(np.dot(flat, flat))
        magnitude = np.abs(flat)
        if order == np.inf:
            return magnitude.max(initial=0)
        if order == -np.inf:
            return magnitude.min(initial=np.inf)
        if order == 0:
            return np.count_nonzero(flat)
        if order == 1:
            return magnitude.sum()
        return (magnitude**order).sum() ** (1.0 / order)
