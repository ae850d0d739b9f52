"""Data-parallel training across processes and machines, on MPI (mpi4py) for the numba
backend and MLX's distributed group for the mlx backend; PyTorch's names
(``torch.distributed``).

    python -m pylucid.distributed.launch -n 2 train.py     # 2 ranks on this machine

In ``train.py``: ``pylucid.distributed.init()``, then ``get_rank()``, ``get_world_size()``,
``all_reduce(t)``, ..., or ``pylucid.nn.parallel.DistributedDataParallel(model)``. Without
a launcher, ``init()`` makes a single-process group whose collectives change nothing.

A collective waits for the other ranks at most ``init(timeout=...)`` (30 minutes by
default: :data:`default_pg_timeout`), then raises TimeoutError; one that a rank which has
left the group will never join raises :class:`RankLeftError` at once. The launcher fails
the job when a rank ends without finishing its script (see ``docs/distributed.md``).
"""

from pylucid.distributed.collectives import (
    ReduceOp,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    default_group,
    default_pg_timeout,
    destroy,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init,
    init_process_group,
    is_initialized,
    reduce_scatter,
)
from pylucid.distributed.groups import (
    MLXGroup,
    MPIGroup,
    ProcessGroup,
    RankLeftError,
    SingleProcessGroup,
)

__all__ = [
    "MLXGroup",
    "MPIGroup",
    "ProcessGroup",
    "RankLeftError",
    "ReduceOp",
    "SingleProcessGroup",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "default_group",
    "default_pg_timeout",
    "destroy",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "init",
    "init_process_group",
    "is_initialized",
    "reduce_scatter",
]
