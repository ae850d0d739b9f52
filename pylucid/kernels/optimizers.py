"""Fused optimizer updates: one pass over a parameter reads ``p``, ``g`` and the state once
and writes ``p`` and the state once.

Each loop evaluates PyTorch's single-tensor update (what ``torch.optim`` runs on the CPU)
element by element, in the arrays' dtype and in PyTorch's order of operations, so that every
rounding is the one PyTorch's sequence of whole-tensor ops makes: ``lerp_`` as
``m + w (g - m)`` for ``|w| < 0.5`` and ``g - (g - m)(1 - w)`` otherwise, ``addcmul_`` as
``s + (c g) g``, ``addcdiv_`` as ``p + (c m) / d``. The scalars (``lr / (1 - beta1^t)``
and the like) are computed by the caller in float64 and rounded to the arrays' dtype, as
PyTorch rounds a Python scalar operand.

The arrays are flat, C-contiguous and of one float dtype; state arrays a variant does not use
(the momentum buffer without momentum) are passed as empty arrays. Each kernel exists
serial and parallel (``prange``), split from
:func:`~pylucid.kernels.parallel.parallel_threshold` elements on (sqrt and division count as a
transcendental's cost).
"""

from __future__ import annotations

import math

import numba
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = ["ADAGRAD", "ADAM", "RMSPROP", "SGD"]

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@register_jitable
def _lerp(start, end, weight, one_minus_weight):
    """``torch.lerp`` (scalar weight): exact at both ends."""
    if abs(weight) < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * one_minus_weight


@register_jitable
def _sgd(i, param, grad, buf, neg_lr, momentum, one_minus_dampening, weight_decay, nesterov,
         maximize, first):  # fmt: skip
    """SGD: ``d = g + wd p``; with momentum ``b = mu b + (1 - dampening) d`` (``b = d`` on
    the first step) and ``d = d + mu b`` (nesterov) or ``d = b``; ``p = p - lr d``."""
    d = -grad[i] if maximize else grad[i]
    if weight_decay != 0:
        d = d + weight_decay * param[i]
    if momentum != 0:
        b = d if first else buf[i] * momentum + one_minus_dampening * d
        buf[i] = b
        d = d + momentum * b if nesterov else b
    param[i] = param[i] + neg_lr * d


@register_jitable
def _adam(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, weight, one_minus_weight, beta2,
          one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps, weight_decay, decay,
          decoupled, amsgrad, maximize):  # fmt: skip
    """Adam / AdamW: ``m = lerp(m, g, 1 - b1)``, ``v = b2 v + (1 - b2) g g``,
    ``p = p - step_size m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` (``v`` replaced by its running
    maximum under amsgrad); weight decay added to ``g`` (Adam) or ``p = (1 - lr wd) p``
    first (AdamW)."""
    g = -grad[i] if maximize else grad[i]
    p = param[i]
    if weight_decay != 0:
        if decoupled:
            p = p * decay
        else:
            g = g + weight_decay * p
    m = _lerp(exp_avg[i], g, weight, one_minus_weight)
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


@register_jitable
def _rmsprop(i, param, grad, square_avg, grad_avg, buf, neg_lr, alpha, one_minus_alpha,
             weight, one_minus_weight, eps, weight_decay, momentum, centered,
             maximize):  # fmt: skip
    """RMSprop: ``s = a s + (1 - a) g g``; centered: ``ga = lerp(ga, g, 1 - a)`` and
    ``avg = sqrt(s - ga ga) + eps``, else ``sqrt(s) + eps``; with momentum
    ``b = mu b + g / avg`` and ``p = p - lr b``, else ``p = p - lr g / avg``."""
    g = -grad[i] if maximize else grad[i]
    if weight_decay != 0:
        g = g + weight_decay * param[i]
    s = square_avg[i] * alpha + one_minus_alpha * g * g
    square_avg[i] = s
    if centered:
        ga = _lerp(grad_avg[i], g, weight, one_minus_weight)
        grad_avg[i] = ga
        avg = math.sqrt(s + -ga * ga) + eps
    else:
        avg = math.sqrt(s) + eps
    if momentum > 0:
        b = buf[i] * momentum + g / avg
        buf[i] = b
        param[i] = param[i] + neg_lr * b
    else:
        param[i] = param[i] + neg_lr * g / avg


@register_jitable
def _adagrad(i, param, grad, state_sum, neg_clr, eps, weight_decay, maximize):
    """Adagrad: ``s = s + g g``, ``p = p - clr g / (sqrt(s) + eps)`` with
    ``clr = lr / (1 + (t - 1) lr_decay)``."""
    g = -grad[i] if maximize else grad[i]
    if weight_decay != 0:
        g = g + weight_decay * param[i]
    s = state_sum[i] + g * g
    state_sum[i] = s
    param[i] = param[i] + neg_clr * g / (math.sqrt(s) + eps)


def _loops(body):
    """The serial and parallel loops calling ``body(i, *args)`` for each element."""

    def serial(size, *args):
        for i in range(size):
            body(i, *args)

    def parallel(size, *args):
        for i in numba.prange(size):
            body(i, *args)

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


class UpdateKernel:
    """A fused update, serial and parallel; call it with the flat arrays and scalars."""

    def __init__(self, body, threshold: int) -> None:
        self.serial, self.parallel = _loops(body)
        self.threshold = threshold

    def __call__(self, param, *args) -> None:
        """Update ``param`` (and the state arrays among ``args``) in place."""
        size = param.size
        loop = self.parallel if size >= self.threshold else self.serial
        loop(size, param, *args)


_THRESHOLD = parallel_threshold("memory")
SGD = UpdateKernel(_sgd, _THRESHOLD)
ADAM = UpdateKernel(_adam, parallel_threshold("transcendental"))
RMSPROP = UpdateKernel(_rmsprop, parallel_threshold("transcendental"))
ADAGRAD = UpdateKernel(_adagrad, parallel_threshold("transcendental"))
