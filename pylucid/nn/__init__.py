"""Neural-network building blocks under PyTorch's names: :class:`Module` and the layers
(``nn.Linear``, ``nn.Conv2d``, ``nn.LayerNorm``, ...), :class:`Parameter`, the containers,
losses and activations as modules, :mod:`~pylucid.nn.init`, :mod:`~pylucid.nn.utils` and
:mod:`~pylucid.nn.functional` (``import pylucid.nn.functional as F``).

Everything here is built on pylucid's ops; nothing talks to a backend.
"""

from pylucid import _lazy
from pylucid.nn import functional, init, modules, parallel, utils
from pylucid.nn.modules import _LAZY as _LAZY_LAYERS
from pylucid.nn.modules import __all__ as _modules
from pylucid.nn.parallel import DataParallel
from pylucid.nn.parameter import Buffer, Parameter

# The layers of pylucid.nn.modules (what ``from pylucid.nn.modules import *`` would bind,
# without importing the recurrent and transformer layers: those are imported on first use).
globals().update({name: getattr(modules, name) for name in _modules if name not in _LAZY_LAYERS})
_lazy.lazy_attributes(globals(), {name: f"{where}:{name}" for name, where in _LAZY_LAYERS.items()})

__all__ = [
    "Buffer", "DataParallel", "Parameter", "functional", "init", "parallel", "utils", *_modules
]  # fmt: skip
