"""Mixed precision: :class:`autocast` and :class:`GradScaler`."""

from pylucid.amp.autocast import autocast, autocast_dtype
from pylucid.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "autocast_dtype"]
