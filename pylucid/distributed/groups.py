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

Every collective has two phases. **Arrival** (:meth:`ProcessGroup.arrive`): the ranks
exchange a few int64s describing the call, which tells each rank that the others have
reached the same collective; all the waiting for a late, stuck or departed rank happens
here, before any tensor is touched. On MPI the exchange is non-blocking and polled, so it
raises TimeoutError after the group's ``timeout`` (naming the ranks whose arrival had not
come) or :class:`RankLeftError` as soon as a rank it needs has left the group (a rank that
leaves, by :meth:`ProcessGroup.destroy` or at interpreter exit, tells the others after how
many collectives). **Data**: MPI's blocking collective (``Allreduce``, ...), which every
rank has entered by then; a watchdog thread ends the job if it outlasts the timeout (a rank
stopped or a network down in the middle of it: the call cannot be interrupted). On MLX both
phases are blocking and under the watchdog.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.distributed import monitor

__all__ = [
    "MLXGroup",
    "MPIGroup",
    "ProcessGroup",
    "RankLeftError",
    "SingleProcessGroup",
    "launched_by_mpi",
]

#: Environment variables a process started by ``mpiexec`` (MPICH's hydra, Open MPI, SLURM's
#: PMI) has, so that ``init()`` picks MPI without being told.
_MPI_ENVIRONMENT = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID")
#: Seconds an arrival polls without sleeping (ranks a little apart meet without a sleep),
#: and the longest sleep between polls after it (how late a rank that waited longer notices
#: the last arrival; sleeping leaves the CPU to the ranks that share it).
_SPIN_S = 1e-2
_PAUSE_S = 1e-3
#: Tags of the control communicator: an arrival, and a rank leaving the group.
_ARRIVE, _LEAVE = 1, 2


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher."""
    return any(name in os.environ for name in _MPI_ENVIRONMENT)


class RankLeftError(RuntimeError):
    """A collective that can never complete: a rank it needs has left the process group
    (its script ended, or it called ``destroy()``) without entering it."""


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


class ProcessGroup:
    """What every group provides: ``rank``, ``size``, the arrival of a collective and the
    data collectives on arrays.

    ``reduce`` ops are ``"sum"``, ``"max"``, ``"min"``; arrays given to ``all_reduce`` and
    ``broadcast`` are changed in place and returned (MLX arrays, immutable, are returned
    new).

    Attributes
    ----------
    timeout : float
        Seconds a collective may wait for the other ranks (``math.inf``: no limit).
    calls : int
        The collectives this rank has entered on the group.
    failure : BaseException or None
        The error that made the group unusable (a timeout, a rank that left); every later
        collective raises a RuntimeError naming it.
    """

    name = "base"
    rank: int
    size: int

    def __init__(self, timeout: float = math.inf) -> None:
        self.timeout = timeout
        self.calls = 0
        self.failure: BaseException | None = None
        #: The blocking call in progress: (its collective, the collective's number, when it
        #: started, whether every rank had arrived), for the watchdog.
        self._in_flight: tuple[str, int, float, bool] | None = None
        self._watching = False

    def arrive(self, code: np.ndarray, what: str) -> np.ndarray:
        """Enter the next collective, ``what``: every rank's ``code`` (a small int64
        vector describing its call), stacked in rank order, once every rank has arrived.

        Raises
        ------
        TimeoutError
            When some rank has not arrived within ``timeout`` (MPI); the group is unusable.
        RankLeftError
            When a rank left the group before this collective (MPI); the group is unusable.
        RuntimeError
            When an earlier collective failed so.
        """
        if self.failure is not None:
            raise RuntimeError(
                f"{what}: the process group cannot be used after an earlier collective failed "
                f"({type(self.failure).__name__}: {self.failure})"
            )
        self.calls += 1
        try:
            return self._exchange(code, what)
        except (TimeoutError, RankLeftError) as exc:
            self.failure = exc
            raise

    def _exchange(self, code: np.ndarray, what: str) -> np.ndarray:
        raise NotImplementedError

    def _watched(self, what: str, arrived: bool, call: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> Any:  # fmt: skip
        """``call(*args, **kwargs)``, a blocking call of collective ``what`` (``arrived``:
        after every rank's arrival), under the watchdog."""
        self._in_flight = (what, self.calls, time.monotonic(), arrived)
        try:
            return call(*args, **kwargs)
        finally:
            self._in_flight = None

    def _start_watchdog(self) -> None:
        """Watch the blocking calls (a daemon thread, until :meth:`destroy`; none without a
        timeout)."""
        if self.size > 1 and math.isfinite(self.timeout):
            self._watching = True
            period = min(max(self.timeout / 10, 0.05), 1.0)
            threading.Thread(target=self._watch, args=(period,), daemon=True,
                             name="pylucid.distributed watchdog").start()  # fmt: skip

    def _watch(self, period: float) -> None:
        """Every ``period`` seconds: end the job when a blocking call has outlasted the
        timeout, saying where the main thread waits."""
        while self._watching:
            time.sleep(period)
            flight = self._in_flight
            if flight is None or time.monotonic() - flight[2] <= self.timeout:
                continue
            what, number, _, arrived = flight
            why = (", which every rank had entered: a rank has stopped or its network has failed"
                   if arrived else " for the other ranks to enter it")  # fmt: skip
            message = (
                f"{what}: rank {self.rank} waited {self.timeout:g} s (the process group's "
                f"timeout) in collective {number}{why}; the call cannot be interrupted"
            )
            stack = sys._current_frames().get(threading.main_thread().ident or 0)
            where = "".join(traceback.format_stack(stack)) if stack is not None else ""
            sys.stderr.write(f"Main thread (most recent call last):\n{where}TimeoutError: "
                             f"{message}\npylucid.distributed: rank {self.rank} failed; "
                             f"aborting the job\n")  # fmt: skip
            sys.stderr.flush()
            monitor.report_exit(1, f"TimeoutError: {message}")
            self.abort(1)

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

    def barrier(self) -> None:
        """Wait for every rank (the transport's own barrier, without an arrival)."""
        raise NotImplementedError

    def abort(self, status: int) -> None:
        """End every rank's process now (a failed rank must not leave the others waiting)."""
        os._exit(status)

    def destroy(self) -> None:
        """Leave the group: stop watching, and tell the other ranks (MPI) that this rank
        joins no more of its collectives. MPI itself is finalized at exit."""
        self._watching = False


class SingleProcessGroup(ProcessGroup):
    """The group of one process: every collective returns its input's values."""

    name = "single"

    def __init__(self, timeout: float = math.inf) -> None:
        super().__init__(timeout)
        self.rank, self.size = 0, 1

    def _exchange(self, code: np.ndarray, what: str) -> np.ndarray:
        return code[None]

    def all_reduce(self, array: Any, op: str) -> Any:
        return array

    def broadcast(self, array: Any, src: int) -> Any:
        return array

    def all_gather(self, array: Any) -> Any:
        return array[None]

    def reduce_scatter(self, stacked: Any, op: str) -> Any:
        return stacked[0]

    def barrier(self) -> None:
        """Nothing to wait for."""


class MPIGroup(ProcessGroup):
    """MPI's ``COMM_WORLD`` through mpi4py, and a duplicate of it for the arrivals and the
    notices of ranks that leave (made here: every rank's ``init()`` takes part).

    Parameters
    ----------
    timeout : float
        Seconds a collective may wait for the other ranks (``math.inf``: no limit), and
        ``init`` for the others' ``init``.

    Raises
    ------
    TimeoutError
        When the other ranks do not all create their group within ``timeout``.
    """

    name = "mpi"

    def __init__(self, timeout: float = math.inf) -> None:
        from mpi4py import MPI

        super().__init__(timeout)
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self._bool_ops = {"sum": MPI.LOR, "max": MPI.LOR, "min": MPI.LAND}
        self._peers = [p for p in range(self.size) if p != self.rank]
        #: Ranks that left the group: the number of collectives each had entered.
        self.departed: dict[int, int] = {}
        self._left = False
        control, request = self.comm.Idup()
        started = time.monotonic()
        while not request.Test():
            if time.monotonic() - started > timeout:
                raise TimeoutError(
                    f"init: rank {self.rank} waited {timeout:g} s (the timeout) for the other "
                    f"{self.size - 1} rank(s) to call init()"
                )
            time.sleep(_PAUSE_S)
        self.control = control
        self._start_watchdog()

    def _op(self, op: str, dtype: np.dtype) -> Any:
        return (self._bool_ops if dtype == np.bool_ else self._ops)[op]

    def _exchange(self, code: np.ndarray, what: str) -> np.ndarray:
        rows = np.empty((self.size, code.size), code.dtype)
        rows[self.rank] = code
        receives = [self.control.Irecv(rows[p], source=p, tag=_ARRIVE) for p in self._peers]
        requests = receives + [self.control.Isend(code, dest=p, tag=_ARRIVE)
                               for p in self._peers]  # fmt: skip
        started = time.monotonic()
        pause = 5e-5
        while not self._mpi.Request.Testall(requests):
            waited = time.monotonic() - started
            if waited < _SPIN_S:
                continue
            self._note_departures()
            missing = [p for p, r in zip(self._peers, receives) if not r.Test()]
            gone = [p for p in missing if self.departed.get(p, self.calls) < self.calls]
            if gone or waited > self.timeout:
                for request in receives:  # (nothing left pending: the group stays clean)
                    request.Cancel()
                    request.Wait()
                raise self._arrival_error(what, missing, gone, waited)
            time.sleep(pause)
            pause = min(pause * 2, _PAUSE_S)
        return rows

    def _note_departures(self) -> None:
        """Read the notices of ranks that left (the collectives each had entered)."""
        status = self._mpi.Status()
        while self.control.Iprobe(source=self._mpi.ANY_SOURCE, tag=_LEAVE, status=status):
            note = np.empty(1, np.int64)
            self.control.Recv(note, source=status.Get_source(), tag=_LEAVE)
            self.departed[status.Get_source()] = int(note[0])

    def _arrival_error(self, what: str, missing: list[int], gone: list[int],
                       waited: float) -> Exception:  # fmt: skip
        after = "nothing was exchanged, and the process group cannot be used any more"
        if gone:
            first = gone[0]
            return RankLeftError(
                f"{what}: {_ranks(gone)} left the process group (its script ended or it called "
                f"destroy()) after its collective {self.departed[first]}; this is collective "
                f"{self.calls} on rank {self.rank}, which can never complete: {after}"
            )
        left = [p for p in self.departed if p not in missing]
        return TimeoutError(
            f"{what}: rank {self.rank} waited {waited:.3g} s (the process group's timeout, "
            f"init(timeout=...)) in collective {self.calls} for {_ranks(missing)}, which had "
            f"not entered it (slower, stuck, or calling other collectives than this rank)"
            + (f"; {_ranks(left)} had left the group" if left else "")
            + f": {after}"
        )

    def all_reduce(self, array: np.ndarray, op: str) -> np.ndarray:
        mpi_op = self._op(op, array.dtype)
        self._watched("all_reduce", True, self.comm.Allreduce, self._mpi.IN_PLACE, array,
                      op=mpi_op)  # fmt: skip
        return array

    def broadcast(self, array: np.ndarray, src: int) -> np.ndarray:
        self._watched("broadcast", True, self.comm.Bcast, array, root=src)
        return array

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        gathered = np.empty((self.size, *array.shape), array.dtype)
        self._watched("all_gather", True, self.comm.Allgather, array, gathered)
        return gathered

    def reduce_scatter(self, stacked: np.ndarray, op: str) -> np.ndarray:
        mine = np.empty(stacked.shape[1:], stacked.dtype)
        mpi_op = self._op(op, stacked.dtype)
        self._watched("reduce_scatter", True, self.comm.Reduce_scatter_block, stacked, mine,
                      op=mpi_op)  # fmt: skip
        return mine

    def barrier(self) -> None:
        self._watched("barrier", True, self.comm.Barrier)

    def abort(self, status: int) -> None:
        self.comm.Abort(status)

    def destroy(self) -> None:
        """Tell every other rank that this one leaves after :attr:`calls` collectives (a
        rank waiting in a later one then raises :class:`RankLeftError`); once."""
        super().destroy()
        if self._left or self._mpi.Is_finalized():
            return
        self._left = True
        note = np.array([self.calls], np.int64)
        sent = [self.control.Isend(note, dest=p, tag=_LEAVE) for p in self._peers]
        self._mpi.Request.Waitall(sent)  # (8 bytes: sent eagerly, at once)


class MLXGroup(ProcessGroup):
    """MLX's distributed group (``mlx.core.distributed.init``), on ``mlx.core`` arrays.

    Its collectives block in MLX: a timeout ends the job (the watchdog) instead of raising,
    and a rank that left is noticed by MLX's ring itself (its peers' sockets close).

    Parameters
    ----------
    backend : str
        MLX's backend: ``"ring"`` (TCP; started by ``mlx.launch``), ``"mpi"`` or ``"any"``.
    timeout : float
        Seconds a collective may take before the watchdog ends the job (``math.inf``: no
        limit).
    """

    name = "mlx"

    def __init__(self, backend: str = "any", timeout: float = math.inf) -> None:
        import mlx.core as mx

        super().__init__(timeout)
        self.mx = mx
        self.group = mx.distributed.init(strict=backend != "any", backend=backend)
        self.rank, self.size = self.group.rank(), self.group.size()
        self._start_watchdog()

    def _evaluated(self, array: Any) -> Any:
        self.mx.eval(array)
        return array

    def _exchange(self, code: np.ndarray, what: str) -> np.ndarray:
        return np.array(self._watched(what, False, self._all_gather, self.mx.array(code)))

    def all_reduce(self, array: Any, op: str) -> Any:
        return self._watched("all_reduce", True, self._all_reduce, array, op)

    def _all_reduce(self, array: Any, op: str) -> Any:
        dist = self.mx.distributed
        reduce = {"sum": dist.all_sum, "max": dist.all_max, "min": dist.all_min}[op]
        return self._evaluated(reduce(array, group=self.group, stream=self.mx.cpu))

    def broadcast(self, array: Any, src: int) -> Any:
        mine = array if self.rank == src else self.mx.zeros_like(array)
        op = "max" if array.dtype == self.mx.bool_ else "sum"
        return self._watched("broadcast", True, self._all_reduce, mine, op)

    def all_gather(self, array: Any) -> Any:
        return self._watched("all_gather", True, self._all_gather, array)

    def _all_gather(self, array: Any) -> Any:
        flat = array.reshape(1, -1)
        gathered = self.mx.distributed.all_gather(flat, group=self.group, stream=self.mx.cpu)
        return self._evaluated(gathered.reshape(self.size, *array.shape))

    def reduce_scatter(self, stacked: Any, op: str) -> Any:
        reduced = self._watched("reduce_scatter", True, self._all_reduce, stacked, op)
        return reduced[self.rank]

    def barrier(self) -> None:
        self._watched("barrier", True, self._all_reduce, self.mx.zeros(1), "sum")
