"""Data parallelism, as ``torch.nn.parallel``: :class:`DistributedDataParallel` across
processes (start them with ``mpiexec`` or ``mlx.launch`` and call
:func:`pylucid.distributed.init` first), and :class:`DataParallel` /
:func:`data_parallel`, which on one device call the module (as PyTorch without CUDA)."""

from pylucid import _lazy
from pylucid.nn.parallel.data_parallel import DataParallel, data_parallel

# Imported on first use (pylucid._lazy), and with it pylucid.distributed.
_lazy.lazy_attributes(
    globals(),
    {
        "DistributedDataParallel": "pylucid.nn.parallel.distributed:DistributedDataParallel",
        "distributed": "pylucid.nn.parallel.distributed",
    },
)

__all__ = [
    "DataParallel",
    "DistributedDataParallel",  # noqa: F822  (imported on first use, above)
    "data_parallel",
]
