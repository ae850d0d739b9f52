"""``pylucid.cuda.amp``: PyTorch's deprecated ``torch.cuda.amp`` names. Without CUDA they do
what PyTorch does on a machine without it: autocast and the scaler disable themselves with a
warning, so the program runs in float32 (use ``pylucid.autocast("gpu" or "cpu", ...)`` and
``pylucid.amp.GradScaler`` for mixed precision on pylucid's devices)."""

from __future__ import annotations

from typing import Any

from pylucid.amp import GradScaler as _GradScaler
from pylucid.amp import autocast as _autocast

__all__ = ["GradScaler", "autocast"]


class autocast(_autocast):  # noqa: N801  (named like torch.cuda.amp.autocast)
    """``torch.cuda.amp.autocast(enabled=True, dtype=float16, cache_enabled=True)``: autocast
    for ``device_type="cuda"``, which warns and disables itself (no CUDA here)."""

    def __init__(self, enabled: bool = True, dtype: Any = None, cache_enabled: bool = True) -> None:
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """``torch.cuda.amp.GradScaler(init_scale, ..., enabled)``: a scaler for ``"cuda"``,
    which warns and disables itself when enabled (no CUDA here), as PyTorch does."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )
