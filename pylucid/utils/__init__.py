"""Utilities mirroring ``torch.utils``: :mod:`pylucid.utils.data` (datasets, samplers and
the DataLoader) and :mod:`pylucid.utils.tensorboard` (``SummaryWriter``; imported only when
asked for, since it needs the optional ``tensorboard`` package)."""

from pylucid import _lazy

# pylucid.utils.data is imported on first use (pylucid._lazy).
_lazy.lazy_attributes(globals(), {"data": "pylucid.utils.data"})

__all__ = ["data"]  # noqa: F822  (imported on first use, above)
