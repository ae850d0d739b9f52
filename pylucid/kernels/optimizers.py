"""Fused optimizer updates: one pass over a parameter reads ``p``, ``g`` and the state once
and writes ``p`` and the state once.

Each loop evaluates PyTorch's single-tensor update (what ``torch.optim`` runs on the CPU)
element by element, in the arrays' dtype and in PyTorch's order of operations, so that every
rounding is the one PyTorch's sequence of whole-tensor ops makes: ``lerp_`` as
``m + w (g - m)`` for ``|w| < 0.5`` and ``g - (g - m)(1 - w)`` otherwise, ``addcmul_`` as
``s + (c g) g``, ``addcdiv_`` as ``p + (c m) / d``. The scalars (``lr / (1 - beta1^t)``
and the like) are computed by the caller in float64 and rounded to the arrays' dtype, as
PyTorch rounds a Python scalar operand. ``maximize`` multiplies ``g`` by ``sign = -1``
(exact).

The choices of a variant (momentum or not, L2 weight decay or not, amsgrad, ...) are
compile-time constants of its loop, one compiled loop per combination in use: a branch on a
runtime flag inside the loop keeps LLVM from vectorising it, which measured 5-7x slower
(Adam on 8192 float32 elements: 38 us with runtime flags, 5.8 us specialised; NumPy's
``sqrt`` alone takes 5 us). Each loop exists serial and parallel (``prange``), split from
:func:`~pylucid.kernels.parallel.parallel_threshold` elements on.

The arrays are flat, C-contiguous and of one float dtype; a state array a variant does not
use is passed as an empty array.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numba
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = ["ADADELTA", "ADAGRAD", "ADAM", "RMSPROP", "SGD", "UpdateKernel"]

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@register_jitable(inline="always")
def _lerp(start, end, weight, one_minus_weight, low_weight):
    """``torch.lerp`` with a scalar weight (``low_weight``: ``|weight| < 0.5``)."""
    if low_weight:
        return start + weight * (end - start)
    return end - (end - start) * one_minus_weight


def _sgd(threaded, momentum_on, nesterov, l2):
    """SGD: ``d = sign g (+ wd p)``; with momentum ``b = mu_b b + c d`` (``mu_b = mu``,
    ``c = 1 - dampening``; on the first step ``0`` and ``1``, so ``b = d``), then
    ``d = d + mu b`` (nesterov) or ``d = b``; ``p = p - lr d``."""

    def loop(param, grad, buf, sign, neg_lr, buffer_momentum, buffer_coef, momentum, weight_decay):
        threaded  # noqa: B018  (a closure cell: the serial and parallel loops cache apart)
        for i in numba.prange(param.size):
            d = sign * grad[i]
            if l2:
                d = d + weight_decay * param[i]
            if momentum_on:
                b = buf[i] * buffer_momentum + buffer_coef * d
                buf[i] = b
                d = d + momentum * b if nesterov else b
            param[i] = param[i] + neg_lr * d

    return loop


def _adam(threaded, l2, amsgrad, low_weight):
    """Adam / AdamW: ``m = lerp(m, g, 1 - b1)``, ``v = b2 v + (1 - b2) g g``,
    ``p = decay p - step_size m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` (``v`` replaced by
    its running maximum under amsgrad); Adam's weight decay adds ``wd p`` to ``g`` (``l2``),
    AdamW's is ``decay = 1 - lr wd`` (1 otherwise: exact)."""

    def loop(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, sign, weight, one_minus_weight,
             beta2, one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps, weight_decay,
             decay):  # fmt: skip
        threaded  # noqa: B018
        for i in numba.prange(param.size):
            g = sign * grad[i]
            p = param[i] * decay
            if l2:
                g = g + weight_decay * p
            m = _lerp(exp_avg[i], g, weight, one_minus_weight, low_weight)
            v = exp_avg_sq[i] * beta2 + one_minus_beta2 * g * g
            exp_avg[i] = m
            exp_avg_sq[i] = v
            if amsgrad:
                previous = max_exp_avg_sq[i]
                if not v >= previous and not math.isnan(v):  # torch.maximum: nan wins
                    v = previous
                max_exp_avg_sq[i] = v
            denom = math.sqrt(v) / bias_correction2_sqrt + eps
            param[i] = p + neg_step_size * m / denom

    return loop


def _rmsprop(threaded, l2, centered, momentum_on, low_weight):
    """RMSprop: ``s = a s + (1 - a) g g``; centered: ``ga = lerp(ga, g, 1 - a)`` and
    ``avg = sqrt(s - ga ga) + eps``, else ``sqrt(s) + eps``; with momentum
    ``b = mu b + g / avg`` and ``p = p - lr b``, else ``p = p - lr g / avg``."""

    def loop(param, grad, square_avg, grad_avg, buf, sign, neg_lr, alpha, one_minus_alpha,
             weight, one_minus_weight, eps, weight_decay, momentum):  # fmt: skip
        threaded  # noqa: B018
        for i in numba.prange(param.size):
            g = sign * grad[i]
            if l2:
                g = g + weight_decay * param[i]
            s = square_avg[i] * alpha + one_minus_alpha * g * g
            square_avg[i] = s
            if centered:
                ga = _lerp(grad_avg[i], g, weight, one_minus_weight, low_weight)
                grad_avg[i] = ga
                avg = math.sqrt(s + -ga * ga) + eps
            else:
                avg = math.sqrt(s) + eps
            if momentum_on:
                b = buf[i] * momentum + g / avg
                buf[i] = b
                param[i] = param[i] + neg_lr * b
            else:
                param[i] = param[i] + neg_lr * g / avg

    return loop


def _adagrad(threaded, l2):
    """Adagrad: ``s = s + g g``, ``p = p - clr g / (sqrt(s) + eps)`` with
    ``clr = lr / (1 + (t - 1) lr_decay)``."""

    def loop(param, grad, state_sum, sign, neg_clr, eps, weight_decay):
        threaded  # noqa: B018
        for i in numba.prange(param.size):
            g = sign * grad[i]
            if l2:
                g = g + weight_decay * param[i]
            s = state_sum[i] + g * g
            state_sum[i] = s
            param[i] = param[i] + neg_clr * g / (math.sqrt(s) + eps)

    return loop


def _adadelta(threaded, l2):
    """Adadelta: ``s = rho s + (1 - rho) g g``,
    ``d = sqrt(a + eps) / sqrt(s + eps) g``, ``a = rho a + (1 - rho) d d``,
    ``p = p - lr d``."""

    def loop(param, grad, square_avg, acc_delta, sign, neg_lr, rho, one_minus_rho, eps,
             weight_decay):  # fmt: skip
        threaded  # noqa: B018
        for i in numba.prange(param.size):
            g = sign * grad[i]
            if l2:
                g = g + weight_decay * param[i]
            s = square_avg[i] * rho + one_minus_rho * g * g
            square_avg[i] = s
            a = acc_delta[i]
            delta = math.sqrt(a + eps) / math.sqrt(s + eps) * g
            acc_delta[i] = a * rho + one_minus_rho * delta * delta
            param[i] = param[i] + neg_lr * delta

    return loop


class UpdateKernel:
    """A fused update: its loops, compiled per combination of choices when first used.

    Parameters
    ----------
    make : callable
        ``make(threaded, *choices)`` returns the loop's Python function.
    cost : str
        The kernel class of :func:`~pylucid.kernels.parallel.parallel_threshold`.
    """

    def __init__(self, make: Callable[..., Callable[..., None]], cost: str) -> None:
        self._make = make
        self._threshold = parallel_threshold(cost)
        self._loops: dict[tuple[bool, ...], tuple[Any, Any]] = {}

    def __call__(self, choices: tuple[bool, ...], param: Any, *args: Any) -> None:
        """Update ``param`` (and the state arrays among ``args``) in place."""
        self.loop(choices, param.size)(param, *args)

    def loop(self, choices: tuple[bool, ...], size: int) -> Any:
        """The compiled loop of ``choices`` for a parameter of ``size`` elements (threaded
        above the threshold); :mod:`pylucid.compile` calls it from generated code."""
        loops = self._loops.get(choices)
        if loops is None:
            loops = (
                njit(**_JIT)(self._make(False, *choices)),
                njit(parallel=True, **_JIT)(self._make(True, *choices)),
            )
            self._loops[choices] = loops
        return loops[size >= self._threshold]


SGD = UpdateKernel(_sgd, "memory")
ADAM = UpdateKernel(_adam, "transcendental")  # (sqrt and a division per element)
RMSPROP = UpdateKernel(_rmsprop, "transcendental")
ADAGRAD = UpdateKernel(_adagrad, "transcendental")
ADADELTA = UpdateKernel(_adadelta, "transcendental")
