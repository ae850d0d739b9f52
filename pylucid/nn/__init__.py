"""Neural-network building blocks under PyTorch's names: :mod:`pylucid.nn.functional`.

``import pylucid.nn.functional as F`` gives the losses and activations a PyTorch user
reaches for (``F.cross_entropy``, ``F.mse_loss``, ``F.relu``); modules (``nn.Linear``) are
not here yet.
"""

from pylucid.nn import functional

__all__ = ["functional"]
