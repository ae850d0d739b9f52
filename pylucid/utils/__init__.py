"""Utilities mirroring ``torch.utils``: :mod:`pylucid.utils.data` (datasets, samplers and
the DataLoader) and :mod:`pylucid.utils.tensorboard` (``SummaryWriter``; imported only when
asked for, since it needs the optional ``tensorboard`` package)."""

from pylucid.utils import data

__all__ = ["data"]
