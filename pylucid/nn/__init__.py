"""Neural-network building blocks under PyTorch's names: :class:`Module` and the layers
(``nn.Linear``, ``nn.Conv2d``, ``nn.LayerNorm``, ...), :class:`Parameter`, the containers,
losses and activations as modules, :mod:`~pylucid.nn.init`, :mod:`~pylucid.nn.utils` and
:mod:`~pylucid.nn.functional` (``import pylucid.nn.functional as F``).

Everything here is built on pylucid's ops; nothing talks to a backend.
"""

from pylucid.nn import functional, init, parallel, utils
from pylucid.nn.modules import *  # noqa: F403
from pylucid.nn.modules import __all__ as _modules
from pylucid.nn.parallel import DataParallel
from pylucid.nn.parameter import Buffer, Parameter

__all__ = [
    "Buffer", "DataParallel", "Parameter", "functional", "init", "parallel", "utils", *_modules
]  # fmt: skip
