"""Backends: the compute libraries ops dispatch to, and how one is chosen.

``numba`` runs on ``"cpu"`` and ``mlx`` on ``"gpu"`` (MLX's CPU stream where it has no GPU).
See :mod:`pylucid.backends.registry` for the selection order. ``cudnn``, ``cuda``, ``mps`` and
``mkldnn`` are PyTorch's ``torch.backends`` switches (:mod:`pylucid.backends.flags`).
"""

from pylucid.backends.base import Backend
from pylucid.backends.flags import cuda, cudnn, mkldnn, mps
from pylucid.backends.mlx_backend import MLXBackend
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
register(MLXBackend(), default_for_device=True)

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
