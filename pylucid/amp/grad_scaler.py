"""Loss scaling for float16 training, as ``torch.amp.GradScaler``.

float16 gradients underflow to zero below 6e-8; scaling the loss by ``S`` scales every
gradient by ``S``. Before the optimizer step the gradients are divided by ``S`` again; if any
is inf or nan the step is skipped (the parameters are untouched) and ``S`` backs off, and
after ``growth_interval`` clean steps in a row ``S`` grows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pylucid.graph.grad_mode import no_grad

__all__ = ["GradScaler"]


class GradScaler:
    """Dynamic loss scaling.

    Parameters
    ----------
    init_scale : float
        The first scale.
    growth_factor, backoff_factor : float
        Multiply the scale by these after ``growth_interval`` finite steps / after a step
        with inf or nan gradients.
    growth_interval : int
        Finite steps in a row before the scale grows.
    enabled : bool
        False makes every method a pass-through (scale 1, steps never skipped).

    Examples
    --------
    >>> scaler = pl.amp.GradScaler()
    >>> with pl.autocast(dtype=pl.float16):
    ...     loss = model(x)
    >>> scaler.scale(loss).backward()
    >>> scaler.step(optimizer)     # unscales; skips the step on inf/nan
    >>> scaler.update()
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if init_scale <= 0 or growth_factor <= 1 or not 0 < backoff_factor < 1:
            raise ValueError(
                f"GradScaler: need init_scale > 0, growth_factor > 1 and 0 < backoff_factor "
                f"< 1; got {init_scale}, {growth_factor}, {backoff_factor}"
            )
        if growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be >= 1, got {growth_interval}")
        self.enabled = enabled
        self._scale = float(init_scale) if enabled else 1.0
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_inf: bool | None = None
        self._unscaled: set[int] = set()

    def get_scale(self) -> float:
        """The current scale."""
        return self._scale

    def scale(self, loss: Any) -> Any:
        """``loss * scale`` (the loss itself when disabled)."""
        return loss * self._scale if self.enabled else loss

    @no_grad()
    def unscale_(self, optimizer: Any) -> None:
        """Divide the gradients of ``optimizer``'s parameters by the scale, in float32
        arithmetic, and record whether any is inf or nan. At most once per step."""
        if not self.enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError(
                "GradScaler.unscale_: already called for this optimizer since the last update()"
            )
        found_inf = False
        inverse = 1.0 / self._scale
        for p in (p for group in optimizer.param_groups for p in group["params"]):
            if p.grad is None:
                continue
            values = p.grad.to("float32") if p.grad.dtype.is_half else p.grad
            found_inf |= not bool(np.isfinite(values.numpy()).all())
            p.grad = (values * inverse).to(p.grad.dtype)
        self._unscaled.add(id(optimizer))
        self._found_inf = bool(self._found_inf) or found_inf

    def step(self, optimizer: Any) -> bool:
        """Unscale (unless done already) and run ``optimizer.step()`` unless a gradient is
        inf or nan. Returns whether the step ran."""
        if not self.enabled:
            optimizer.step()
            return True
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if self._found_inf:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Adjust the scale after a step: back off after inf/nan, grow after
        ``growth_interval`` finite steps in a row."""
        if not self.enabled:
            return
        if self._found_inf:
            self._scale *= self.backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._scale *= self.growth_factor
                self._growth_tracker = 0
        self._found_inf = None
        self._unscaled.clear()
