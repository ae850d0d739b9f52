"""Data parallelism, as ``torch.nn.parallel``: :class:`DistributedDataParallel` across
processes (start them with ``mpiexec`` or ``mlx.launch`` and call
:func:`pylucid.distributed.init` first), and :class:`DataParallel` /
:func:`data_parallel`, which on one device call the module (as PyTorch without CUDA)."""

from pylucid.nn.parallel.data_parallel import DataParallel, data_parallel
from pylucid.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel"]
