"""Data parallelism across processes, as ``torch.nn.parallel``:
:class:`DistributedDataParallel` (start the processes with ``mpiexec`` or ``mlx.launch`` and
call :func:`pylucid.distributed.init` first)."""

from pylucid.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
