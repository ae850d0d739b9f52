"""Op records of the losses with their own kernels: cross entropy with class indices.

The targets are fixed by the logits' shape (class ``i mod C`` for row ``i``, the second row
ignored), so a record's call takes the logits alone. The loss is smoothed (0.1) so that
every logit, not only the targets', enters it; ``"none"`` keeps one loss per row, so that
the Jacobian has a row per example. Forward tolerance as the softmax family's (rtol 1e-5
for float32: ``exp`` of a float32 ``x - max`` near 10).
"""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, torch_module, uniform

_SMOOTHING = 0.1
_IGNORED = -100
_SHAPES = (((4, 3),), ((5,),), ((2, 3, 2),))


def _targets(shape: tuple[int, ...]) -> np.ndarray:
    """Class ``i mod C`` at flat position ``i``, position 1 ignored (where there is one)."""
    classes = shape[0] if len(shape) == 1 else shape[1]
    target_shape = () if len(shape) == 1 else (shape[0], *shape[2:])
    t = (np.arange(int(np.prod(target_shape))) % classes).reshape(target_shape)
    if t.size > 1:
        t.reshape(-1)[1] = _IGNORED
    return t


def _call(x: pl.Tensor) -> pl.Tensor:
    target = pl.tensor(_targets(x.shape), device=x.device)
    return pl.nn.functional.cross_entropy(
        x, target, reduction="none", label_smoothing=_SMOOTHING
    )


def _reference(x: np.ndarray) -> np.ndarray:
    axis = 0 if x.ndim == 1 else 1
    t = _targets(x.shape)
    m = x.max(axis=axis, keepdims=True)
    log_p = x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))
    classes = x.shape[axis]
    hot = np.moveaxis(np.eye(classes)[np.where(t == _IGNORED, 0, t)], -1, axis)
    q = (1 - _SMOOTHING) * hot + _SMOOTHING / classes
    loss = -(q * log_p).sum(axis=axis)
    return np.where(t == _IGNORED, 0.0, loss)


def _torch(x):  # noqa: ANN001, ANN202  (a torch.Tensor: torch is imported only here)
    torch = torch_module()
    target = torch.tensor(_targets(tuple(x.shape)))
    return torch.nn.functional.cross_entropy(
        x, target, reduction="none", label_smoothing=_SMOOTHING
    )


RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "cross_entropy",
        _call,
        _reference,
        (uniform(-10, 10),),
        _SHAPES,
        rtol=1e-5,
        atol=1e-5,
        torch=_torch,
    ),
)
