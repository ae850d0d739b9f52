"""Loss scaling for float16 training, as ``torch.amp.GradScaler``.

float16 gradients underflow to zero below 6e-8; scaling the loss by ``S`` scales every
gradient by ``S``. Before the optimizer step the gradients are divided by ``S`` again; if any
is inf or nan the step is skipped (the parameters are untouched) and ``S`` backs off, and
after ``growth_interval`` clean steps in a row ``S`` grows.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from pylucid.device import UNAVAILABLE_TYPES
from pylucid.graph.grad_mode import no_grad

__all__ = ["GradScaler"]


class GradScaler:
    """Dynamic loss scaling.

    Parameters
    ----------
    device : str
        The device the scaled step runs on, as ``torch.amp.GradScaler``'s first argument:
        ``"cpu"`` or ``"gpu"``; ``"cuda"`` (no CUDA here) disables the scaler with a warning,
        as PyTorch does on a machine without CUDA.
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
        device: str = "cpu",
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
        if enabled and str(device).partition(":")[0] in UNAVAILABLE_TYPES:
            warnings.warn(
                f"GradScaler: device {str(device)!r} is not available (pylucid has no CUDA); "
                f"the scaler is disabled. Use GradScaler('gpu') or GradScaler('cpu') to scale",
                UserWarning,
                stacklevel=2,
            )
            enabled = False
        self.enabled = bool(enabled)
        self._scale = float(init_scale) if enabled else 1.0
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_inf: bool | None = None
        self._unscaled: set[int] = set()

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale

    def is_enabled(self) -> bool:
        """Whether the scaler scales (False when built disabled or for an absent device)."""
        return self.enabled

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys: ``scale``, the factors, ``growth_interval`` and the tracker (empty
        when disabled, as PyTorch)."""
        if not self.enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (PyTorch's scaler state loads too)."""
        if not self.enabled:
            return
        if not state:
            raise RuntimeError("GradScaler.load_state_dict: the state is empty (saved disabled)")
        self._scale = float(state["scale"])
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])

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
