"""Backends: the compute libraries ops dispatch to, and how one is chosen.

``numba`` runs on ``"cpu"`` and ``mlx`` on ``"gpu"`` (MLX's CPU stream where it has no GPU).
See :mod:`pylucid.backends.registry` for the selection order. ``cudnn``, ``cuda``, ``mps`` and
``mkldnn`` are PyTorch's ``torch.backends`` switches (:mod:`pylucid.backends.flags`).
"""

from pylucid import _lazy
from pylucid.backends import registry
from pylucid.backends.base import Backend
from pylucid.backends.flags import cuda, cudnn, mkldnn, mps
from pylucid.backends.numba_backend import NumbaBackend
from pylucid.backends.registry import (
    BackendUnavailableError,
    available,
    current,
    get,
    info,
    names,
    register,
    resolve,
    set_default,
    use,
)

register(NumbaBackend(), default_for_device=True)
# The MLX backend's modules are imported when "gpu" or "mlx" is first asked for.
registry.register_lazy(
    "mlx", "gpu", "pylucid.backends.mlx_backend:MLXBackend", default_for_device=True
)
_lazy.lazy_attributes(
    globals(),
    {
        "MLXBackend": "pylucid.backends.mlx_backend:MLXBackend",
        "mlx_backend": "pylucid.backends.mlx_backend",
    },
)

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "MLXBackend",
    "NumbaBackend",
    "available",
    "cuda",
    "cudnn",
    "current",
    "get",
    "info",
    "mkldnn",
    "mps",
    "names",
    "register",
    "resolve",
    "set_default",
    "use",
]
