"""Fused, in-place parameter updates: the steps of :mod:`pylucid.optim`'s optimizers.

Each function updates one parameter and its optimizer state from its gradient in one pass
of the backend's update primitive (on the numba backend, one loop that reads ``p``, ``g``
and the state once and writes them once: :mod:`pylucid.kernels.optimizers`), with PyTorch's
single-tensor formulas and order of operations. They are not differentiable and record
nothing; each tensor they change has its version bumped, so a graph that saved the old
values refuses to backward through them, as in PyTorch. Every check runs before anything is
written.
"""

from __future__ import annotations

import math

import numpy as np

from pylucid.ops import views
from pylucid.tensor import Tensor

__all__ = [
    "adadelta_update_",
    "adagrad_update_",
    "adam_update_",
    "clip_grads_by_norm_",
    "refuse_nonfinite_norm",
    "rmsprop_update_",
    "sgd_update_",
]


def _check(op: str, param: Tensor, grad: Tensor, states: dict[str, Tensor | None]) -> None:
    """Refuse, naming ``op`` and the tensor, anything the update cannot take."""
    if not isinstance(param, Tensor) or not isinstance(grad, Tensor):
        raise TypeError(
            f"{op}: expected Tensors for param and grad, got {type(param).__name__} and "
            f"{type(grad).__name__}"
        )
    if not param.dtype.is_floating_point:
        raise TypeError(f"{op}: the parameter must be floating, got {param.dtype.name}")
    if param.grad_fn is not None:
        raise RuntimeError(
            f"{op}: the parameter (shape {param.shape}) was computed by {param.grad_fn.name}; "
            f"optimizers update leaf tensors only"
        )
    for name, t in {"grad": grad, **states}.items():
        if t is None:
            continue
        if t.shape != param.shape or t.dtype is not param.dtype or t._backend is not param._backend:
            raise ValueError(
                f"{op}: {name} must match the parameter (shape {param.shape}, "
                f"{param.dtype.name} on '{param.device}'); got shape {t.shape}, "
                f"{t.dtype.name} on '{t.device}'"
            )
    for name, t in {"param": param, **states}.items():
        if t is not None:
            views.check_writable(f"{op} ({name})", t)


def _commit(tensors: tuple[Tensor | None, ...], storages: tuple[object, ...]) -> None:
    """Make each updated storage its tensor's values and bump its version."""
    for tensor, storage in zip(tensors, storages):
        if tensor is None:
            continue
        if storage is not tensor._storage:
            views.write(tensor, storage)
        tensor._version.bump()


def sgd_update_(
    param: Tensor,
    grad: Tensor,
    momentum_buffer: Tensor | None,
    *,
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    maximize: bool = False,
) -> Tensor | None:
    r"""One SGD step of ``param`` in place.

    With :math:`d = \pm g + \lambda p`: without momentum :math:`p \leftarrow p - \eta d`;
    with momentum :math:`b \leftarrow \mu b + (1 - \tau) d` (:math:`b = d` on the first
    step) and :math:`p \leftarrow p - \eta (d + \mu b)` (nesterov) or :math:`p - \eta b`.

    Returns
    -------
    Tensor or None
        The momentum buffer: ``momentum_buffer`` updated in place, a new tensor on the
        first step (``momentum_buffer`` None), or None without momentum.
    """
    _check("sgd_update_", param, grad, {"momentum_buffer": momentum_buffer})
    first = momentum != 0 and momentum_buffer is None
    buffer = momentum_buffer
    if first:
        buffer = Tensor._make(param._backend.full(param.shape, 0, param.dtype), param._backend,
                              param.dtype, shape=param.shape)  # fmt: skip
    storages = param._backend.sgd_update(
        param._storage, grad._storage, None if buffer is None else buffer._storage, lr,
        momentum, dampening, weight_decay, nesterov, maximize, first,
    )  # fmt: skip
    _commit((param, buffer if momentum != 0 else None), storages)
    return buffer if momentum != 0 else None


def adam_update_(
    param: Tensor,
    grad: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Tensor | None,
    *,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    maximize: bool = False,
) -> None:
    r"""One Adam (or AdamW) step of ``param`` and its moments in place; ``step`` is
    :math:`t`, counted from 1.

    .. math::
        m &\leftarrow m + (1 - \beta_1)(g - m), \qquad
        v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \\
        p &\leftarrow p - \frac{\eta}{1 - \beta_1^t}
            \frac{m}{\sqrt{v} / \sqrt{1 - \beta_2^t} + \epsilon}

    with :math:`v` replaced by its running maximum (``max_exp_avg_sq``, amsgrad) when given.
    Weight decay adds :math:`\lambda p` to :math:`g` (Adam), or with
    ``decoupled_weight_decay`` multiplies :math:`p` by :math:`1 - \eta\lambda` first (AdamW).
    """
    _check("adam_update_", param, grad, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq,
                                         "max_exp_avg_sq": max_exp_avg_sq})  # fmt: skip
    step_size = lr / (1 - beta1**step)
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    decay = 1 - lr * weight_decay if decoupled_weight_decay else None
    storages = param._backend.adam_update(
        param._storage, grad._storage, exp_avg._storage, exp_avg_sq._storage,
        None if max_exp_avg_sq is None else max_exp_avg_sq._storage, beta1, beta2, step_size,
        bias_correction2_sqrt, eps, weight_decay, decay, max_exp_avg_sq is not None, maximize,
    )  # fmt: skip
    _commit((param, exp_avg, exp_avg_sq, max_exp_avg_sq), storages)


def rmsprop_update_(
    param: Tensor,
    grad: Tensor,
    square_avg: Tensor,
    grad_avg: Tensor | None,
    momentum_buffer: Tensor | None,
    *,
    lr: float,
    alpha: float,
    eps: float,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    maximize: bool = False,
) -> None:
    r"""One RMSprop step of ``param`` and its state in place.

    :math:`s \leftarrow \alpha s + (1 - \alpha) g^2`; centered (``grad_avg`` given):
    :math:`a \leftarrow a + (1 - \alpha)(g - a)` and :math:`r = \sqrt{s - a^2} + \epsilon`,
    else :math:`r = \sqrt{s} + \epsilon`; with momentum (``momentum_buffer`` given)
    :math:`b \leftarrow \mu b + g / r`, :math:`p \leftarrow p - \eta b`, else
    :math:`p \leftarrow p - \eta g / r`.
    """
    _check("rmsprop_update_", param, grad, {"square_avg": square_avg, "grad_avg": grad_avg,
                                            "momentum_buffer": momentum_buffer})  # fmt: skip
    if (momentum_buffer is None) != (momentum <= 0):
        raise ValueError(
            f"rmsprop_update_: a momentum buffer goes with momentum > 0 (momentum={momentum}, "
            f"buffer {'given' if momentum_buffer is not None else 'None'})"
        )
    storages = param._backend.rmsprop_update(
        param._storage, grad._storage, square_avg._storage,
        None if grad_avg is None else grad_avg._storage,
        None if momentum_buffer is None else momentum_buffer._storage, lr, alpha, eps,
        weight_decay, momentum, grad_avg is not None, maximize,
    )  # fmt: skip
    _commit((param, square_avg, grad_avg, momentum_buffer), storages)


def adagrad_update_(
    param: Tensor,
    grad: Tensor,
    state_sum: Tensor,
    *,
    step: int,
    lr: float,
    lr_decay: float = 0.0,
    eps: float = 1e-10,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> None:
    r"""One Adagrad step in place: :math:`s \leftarrow s + g^2`,
    :math:`p \leftarrow p - \frac{\eta}{1 + (t - 1)\delta} \frac{g}{\sqrt{s} + \epsilon}`."""
    _check("adagrad_update_", param, grad, {"state_sum": state_sum})
    clr = lr / (1 + (step - 1) * lr_decay)
    storages = param._backend.adagrad_update(
        param._storage, grad._storage, state_sum._storage, clr, eps, weight_decay, maximize
    )
    _commit((param, state_sum), storages)


def adadelta_update_(
    param: Tensor,
    grad: Tensor,
    square_avg: Tensor,
    acc_delta: Tensor,
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> None:
    r"""One Adadelta step in place: :math:`s \leftarrow \rho s + (1 - \rho) g^2`,
    :math:`\Delta = \frac{\sqrt{a + \epsilon}}{\sqrt{s + \epsilon}} g`,
    :math:`a \leftarrow \rho a + (1 - \rho) \Delta^2`, :math:`p \leftarrow p - \eta \Delta`."""
    _check("adadelta_update_", param, grad, {"square_avg": square_avg, "acc_delta": acc_delta})
    storages = param._backend.adadelta_update(
        param._storage, grad._storage, square_avg._storage, acc_delta._storage, lr, rho, eps,
        weight_decay, maximize,
    )  # fmt: skip
    _commit((param, square_avg, acc_delta), storages)


def refuse_nonfinite_norm(value: float, norm_type: float) -> None:
    """Raise, as ``clip_grad_norm_(error_if_nonfinite=True)``, for an inf or nan norm."""
    if not math.isfinite(value):
        raise RuntimeError(
            f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is "
            f"{value}, so they cannot be clipped; set error_if_nonfinite=False to clip anyway"
        )


def clip_grads_by_norm_(
    grads: list[Tensor], max_norm: float, norm_type: float, error_if_nonfinite: bool
) -> Tensor:
    r"""Scale ``grads`` (one backend, one dtype) in place by
    :math:`\min(1, \text{max\_norm} / (n + 10^{-6}))`, :math:`n` the ``norm_type``-norm of
    their per-tensor norms (that of all their elements); return :math:`n` (0-d).

    The norms are the backend's (``norms``: BLAS's dot for the 2-norm on the CPU) and the
    coefficient is computed in the gradients' dtype, as PyTorch's
    ``clip_grad_norm_``: ``max_norm / (n + 1e-6)`` clamped to 1, rounded at each step.
    """
    first = grads[0]
    be, dtype = first._backend, first.dtype
    for g in grads:
        if g._backend is not be or g.dtype is not dtype:
            raise ValueError(
                f"clip_grads_by_norm_: the gradients must share one device and dtype; got "
                f"{dtype.name} on '{first.device}' and {g.dtype.name} on '{g.device}'"
            )
        views.check_writable("clip_grads_by_norm_", g)
    per_tensor = be.norms([g._storage for g in grads], norm_type, dtype)
    total = be.reshape(be.norms([per_tensor], norm_type, dtype), ())
    norm = Tensor._make(total, be, dtype, shape=())
    if error_if_nonfinite:
        refuse_nonfinite_norm(norm.item(), norm_type)
    if dtype.is_half:  # (halves: the coefficient in float32, as the primitives compute them)
        kind = np.float32
        with np.errstate(all="ignore"):  # (an infinite or nan norm: 0 or nan, as PyTorch's)
            ratio = kind(max_norm) / (kind(norm.item()) + kind(1e-6))
        coefficient = float(min(ratio, kind(1.0)))  # (min keeps a nan first argument: clamp)
    else:  # the same IEEE operations as primitives on the 0-d norm: no value leaves the
        # backend, so a compiled step (pylucid.compiler) can clip
        ratio = be.div(float(max_norm), be.add(total, 1e-6, (), dtype), (), dtype)
        coefficient = be.minimum(ratio, 1.0, (), dtype)
    _commit(tuple(grads), be.scale([g._storage for g in grads], coefficient, dtype))
    return norm
