"""Utilities mirroring ``torch.utils``: :mod:`pylucid.utils.data` (datasets, samplers and
the DataLoader)."""

from pylucid.utils import data

__all__ = ["data"]
