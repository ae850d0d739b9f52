"""Process groups: the engines that move the bytes. pylucid writes no transport of its own.

- :class:`MPIGroup`: MPI through ``mpi4py`` (the ``mpich`` wheel from PyPI brings the
  library and ``mpiexec``); the group of the numba backend.
- :class:`MLXGroup`: MLX's own distributed group (``mlx.core.distributed``: its ring
  backend over TCP, or MPI); the group of the mlx backend.
- :class:`SingleProcessGroup`: one process, where every collective leaves its input as it
  is (MLX behaves the same without a launcher).

A group works on host arrays (NumPy) or, for :class:`MLXGroup`, on ``mlx.core`` arrays, of
one shape and dtype across ranks; :mod:`pylucid.distributed.collectives` checks that first
and handles tensors, dtypes and reduction ops.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

__all__ = ["MLXGroup", "MPIGroup", "ProcessGroup", "SingleProcessGroup", "launched_by_mpi"]

#: Environment variables a process started by ``mpiexec`` (MPICH's hydra, Open MPI, SLURM's
#: PMI) has, so that ``init()`` picks MPI without being told.
_MPI_ENVIRONMENT = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID")


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher."""
    return any(name in os.environ for name in _MPI_ENVIRONMENT)


class ProcessGroup:
    """What every group provides: ``rank``, ``size`` and collectives on arrays.

    ``reduce`` ops are ``"sum"``, ``"max"``, ``"min"``; arrays given to ``all_reduce`` and
    ``broadcast`` are changed in place and returned (MLX arrays, immutable, are returned
    new).
    """

    name = "base"
    rank: int
    size: int

    def all_reduce(self, array: Any, op: str) -> Any:
        raise NotImplementedError

    def broadcast(self, array: Any, src: int) -> Any:
        raise NotImplementedError

    def all_gather(self, array: Any) -> Any:
        """The ranks' arrays stacked along a new first axis (in rank order)."""
        raise NotImplementedError

    def reduce_scatter(self, stacked: Any, op: str) -> Any:
        """The reduction over ranks of ``stacked`` (size, ...) rows, this rank's row."""
        raise NotImplementedError

    def metadata_agree(self, code: np.ndarray) -> np.ndarray:
        """Every rank's ``code`` (a small int64 vector), stacked in rank order."""
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def abort(self, status: int) -> None:
        """End every rank's process now (a failed rank must not leave the others waiting)."""
        os._exit(status)

    def destroy(self) -> None:
        """Release the group's resources (MPI itself is finalized at exit)."""


class SingleProcessGroup(ProcessGroup):
    """The group of one process: every collective returns its input's values."""

    name = "single"

    def __init__(self) -> None:
        self.rank, self.size = 0, 1

    def all_reduce(self, array: Any, op: str) -> Any:
        return array

    def broadcast(self, array: Any, src: int) -> Any:
        return array

    def all_gather(self, array: Any) -> Any:
        return array[None]

    def reduce_scatter(self, stacked: Any, op: str) -> Any:
        return stacked[0]

    def metadata_agree(self, code: np.ndarray) -> np.ndarray:
        return code[None]

    def barrier(self) -> None:
        """Nothing to wait for."""


class MPIGroup(ProcessGroup):
    """MPI's ``COMM_WORLD`` through mpi4py.

    Parameters
    ----------
    timeout : float, optional
        Seconds a collective may wait for the other ranks before it raises TimeoutError
        (it then runs non-blocking and polls); None waits for ever, in MPI's own blocking
        call.
    """

    name = "mpi"

    def __init__(self, timeout: float | None = None) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout = timeout
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self._bool_ops = {"sum": MPI.LOR, "max": MPI.LOR, "min": MPI.LAND}

    def _op(self, op: str, dtype: np.dtype) -> Any:
        return (self._bool_ops if dtype == np.bool_ else self._ops)[op]

    def _wait(self, request: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        pause = 1e-6
        while not request.Test():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: rank {self.rank} waited {self.timeout} s for the other "
                    f"{self.size - 1} rank(s); one may have failed or be in another collective"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def all_reduce(self, array: np.ndarray, op: str) -> np.ndarray:
        mpi_op = self._op(op, array.dtype)
        if self.timeout is None:
            self.comm.Allreduce(self._mpi.IN_PLACE, array, op=mpi_op)
        else:
            self._wait(self.comm.Iallreduce(self._mpi.IN_PLACE, array, op=mpi_op), "all_reduce")
        return array

    def broadcast(self, array: np.ndarray, src: int) -> np.ndarray:
        if self.timeout is None:
            self.comm.Bcast(array, root=src)
        else:
            self._wait(self.comm.Ibcast(array, root=src), "broadcast")
        return array

    def all_gather(self, array: np.ndarray, what: str = "all_gather") -> np.ndarray:
        gathered = np.empty((self.size, *array.shape), array.dtype)
        if self.timeout is None:
            self.comm.Allgather(array, gathered)
        else:
            self._wait(self.comm.Iallgather(array, gathered), what)
        return gathered

    def reduce_scatter(self, stacked: np.ndarray, op: str) -> np.ndarray:
        mine = np.empty(stacked.shape[1:], stacked.dtype)
        mpi_op = self._op(op, stacked.dtype)
        if self.timeout is None:
            self.comm.Reduce_scatter_block(stacked, mine, op=mpi_op)
        else:
            self._wait(self.comm.Ireduce_scatter_block(stacked, mine, op=mpi_op),
                       "reduce_scatter")  # fmt: skip
        return mine

    def metadata_agree(self, code: np.ndarray) -> np.ndarray:
        return self.all_gather(code, "the check before it")

    def barrier(self) -> None:
        if self.timeout is None:
            self.comm.Barrier()
        else:
            self._wait(self.comm.Ibarrier(), "barrier")

    def abort(self, status: int) -> None:
        self.comm.Abort(status)


class MLXGroup(ProcessGroup):
    """MLX's distributed group (``mlx.core.distributed.init``), on ``mlx.core`` arrays.

    Parameters
    ----------
    backend : str
        MLX's backend: ``"ring"`` (TCP; started by ``mlx.launch``), ``"mpi"`` or ``"any"``.
    """

    name = "mlx"

    def __init__(self, backend: str = "any") -> None:
        import mlx.core as mx

        self.mx = mx
        self.group = mx.distributed.init(strict=backend != "any", backend=backend)
        self.rank, self.size = self.group.rank(), self.group.size()

    def _evaluated(self, array: Any) -> Any:
        self.mx.eval(array)
        return array

    def all_reduce(self, array: Any, op: str) -> Any:
        dist = self.mx.distributed
        reduce = {"sum": dist.all_sum, "max": dist.all_max, "min": dist.all_min}[op]
        return self._evaluated(reduce(array, group=self.group, stream=self.mx.cpu))

    def broadcast(self, array: Any, src: int) -> Any:
        mine = array if self.rank == src else self.mx.zeros_like(array)
        if array.dtype == self.mx.bool_:
            return self.all_reduce(mine, "max")
        return self.all_reduce(mine, "sum")

    def all_gather(self, array: Any) -> Any:
        flat = array.reshape(1, -1)
        gathered = self.mx.distributed.all_gather(flat, group=self.group, stream=self.mx.cpu)
        return self._evaluated(gathered.reshape(self.size, *array.shape))

    def reduce_scatter(self, stacked: Any, op: str) -> Any:
        reduced = self.all_reduce(stacked, op)
        return reduced[self.rank]

    def metadata_agree(self, code: np.ndarray) -> np.ndarray:
        gathered = self.all_gather(self.mx.array(code))
        return np.array(gathered)

    def barrier(self) -> None:
        self.all_reduce(self.mx.zeros(1), "sum")
