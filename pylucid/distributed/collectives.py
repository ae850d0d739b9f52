"""The collectives on tensors: ``init``, ``all_reduce``, ``broadcast``, ``all_gather``,
``reduce_scatter``, ``barrier``, with PyTorch's names (``torch.distributed``).

Every collective first compares, across ranks, what each rank is about to do (the
collective, its op or root, the tensor's dtype and shape: a few int64s exchanged in one
small step, a few microseconds), so a mismatch raises the same clear ValueError on every
rank instead of a hang or garbage. That exchange is also where a rank waits for the others
(:meth:`pylucid.distributed.ProcessGroup.arrive`): on MPI it raises TimeoutError after the
group's timeout (``init(timeout=...)``, 30 minutes by default) and
:class:`pylucid.distributed.RankLeftError` as soon as a rank it needs has left, both before
the tensor is touched. Tensors of every dtype on both backends: float16 and bfloat16 are
reduced in float32 and rounded once; bools reduce as logical or (``sum``, ``max``) and and
(``min``). A collective changes its tensor in place (its version is bumped), as PyTorch's
do; ``"mean"`` is the sum divided by the world size (floating tensors only).

On the numba backend a C-contiguous, writable tensor of an MPI dtype is handed to MPI as it
is (no copy); anything else goes through a host copy.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid.distributed import monitor
from pylucid.distributed.groups import (
    MLXGroup,
    MPIGroup,
    ProcessGroup,
    SingleProcessGroup,
    launched_by_mpi,
)
from pylucid.dtypes import DType
from pylucid.ops import views
from pylucid.tensor import Tensor

__all__ = [
    "ReduceOp",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "default_group",
    "default_pg_timeout",
    "init",
    "init_process_group",
    "is_initialized",
    "reduce_scatter",
]


class ReduceOp:
    """The reduction ops, as ``torch.distributed.ReduceOp`` (strings are accepted too)."""

    SUM = "sum"
    MEAN = "mean"
    AVG = "mean"
    MAX = "max"
    MIN = "min"


_OPS = ("sum", "mean", "max", "min")
_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")
_DTYPES = ("bool", "int32", "int64", "float16", "bfloat16", "float32", "float64")
_MPI_NATIVE = (np.dtype(np.bool_), np.dtype(np.int32), np.dtype(np.int64),
               np.dtype(np.float32), np.dtype(np.float64))  # fmt: skip
_DIMS = 6
_GROUP: ProcessGroup | None = None
_LEAVES_AT_EXIT = False
#: How long a collective waits for the other ranks unless ``init`` is told otherwise
#: (PyTorch's ``default_pg_timeout``, the CPU groups' 30 minutes).
default_pg_timeout = datetime.timedelta(minutes=30)
#: The metadata vector of each (collective, op or root, dtype, shape) seen, made once.
_CODES: dict[tuple, np.ndarray] = {}


def _seconds(timeout: float | datetime.timedelta | None) -> float:
    """``init``'s timeout in seconds (``math.inf``: no limit)."""
    if timeout is None:
        return default_pg_timeout.total_seconds()
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"init: timeout must be seconds or a datetime.timedelta, got "
                        f"{type(timeout).__name__}")  # fmt: skip
    if not seconds > 0:
        raise ValueError(f"init: timeout must be positive (math.inf for none), got {timeout!r}")
    return seconds


def init(backend: str | None = None,
         timeout: float | datetime.timedelta | None = None) -> ProcessGroup:  # fmt: skip
    """Join the job's process group (once per process; later calls return it).

    On MPI every rank must call it: the ranks create the group together (it waits, up to
    ``timeout``, for the others).

    Parameters
    ----------
    backend : {None, "gloo", "mpi", "mlx", "single"}
        ``"mpi"``: MPI through mpi4py (the numba backend's engine); ``"mlx"``: MLX's
        distributed group (its ring backend, started by ``mlx.launch``); ``"single"``: one
        process, collectives do nothing. None (and PyTorch's CPU backend ``"gloo"``): MPI
        when the process was started by an MPI launcher (``mpiexec``, ``python -m
        pylucid.distributed.launch``), MLX's group when ``mlx.launch`` started it, else a
        single process. PyTorch's CUDA backends (``"nccl"``) raise.
    timeout : float or datetime.timedelta, optional
        How long a collective waits for the other ranks: seconds, or a timedelta as
        PyTorch's ``init_process_group`` takes; ``math.inf`` for no limit; None:
        :data:`default_pg_timeout` (30 minutes). On MPI a collective whose ranks have not
        all arrived by then raises TimeoutError (naming the missing ranks) before it
        touches its tensor; a collective that outlasts it after every rank arrived, and
        any collective on MLX, ends the job instead (a watchdog thread: the call cannot be
        interrupted).

    Returns
    -------
    ProcessGroup
        The group; :func:`get_rank` and :func:`get_world_size` read it.

    Raises
    ------
    TypeError, ValueError
        For a timeout that is not positive seconds or a timedelta, or an unknown backend.
    RuntimeError
        When ``torchrun`` (or another PyTorch launcher) started the process with more than
        one rank: its ranks have no MPI, so each would otherwise train alone.
    TimeoutError
        When the other ranks do not all call ``init`` within ``timeout`` (MPI).
    """
    global _GROUP, _LEAVES_AT_EXIT
    if _GROUP is not None:
        return _GROUP
    seconds = _seconds(timeout)
    backend = _torch_backend(backend)
    if backend is None:
        if launched_by_mpi():
            backend = "mpi"
        elif "MLX_RANK" in os.environ:
            backend = "mlx"
        else:
            backend = "single"
    if backend == "mpi":
        try:
            group: ProcessGroup = MPIGroup(seconds)
        except ImportError as exc:
            raise RuntimeError(
                f"init: the MPI backend needs mpi4py ({exc}); pip install -e "
                f'".[distributed]" brings it and MPICH\'s mpiexec'
            ) from exc
    elif backend == "mlx":
        group = MLXGroup("ring" if "MLX_RANK" in os.environ else "any", seconds)
    elif backend == "single":
        group = SingleProcessGroup(seconds)
    else:
        raise ValueError(f"init: backend must be 'mpi', 'mlx', 'single' or None, got {backend!r}")
    _GROUP = group
    if group.size > 1:
        _abort_on_uncaught_exceptions(group)
        if not _LEAVES_AT_EXIT:
            atexit.register(destroy)  # (after the script: the other ranks learn it left)
            _LEAVES_AT_EXIT = True
    return group


#: PyTorch's CPU backend: its collectives are MPI's here (the same results).
_CPU_BACKENDS = ("gloo",)
#: PyTorch's GPU backends: CUDA's, which pylucid does not have.
_GPU_BACKENDS = ("nccl", "ucc", "xccl")


def _torch_backend(backend: str | None) -> str | None:
    """``backend`` with PyTorch's names read (``"gloo"``: the automatic choice, MPI under a
    launcher); refused: a GPU backend, and a job that ``torchrun`` started (its ranks have
    no MPI, so each would run alone, silently)."""
    if backend in _GPU_BACKENDS:
        raise ValueError(
            f"init: backend {backend!r} is PyTorch's CUDA backend; pylucid has no CUDA: use "
            f"backend='gloo' or None (MPI for numba tensors) or 'mlx' (MLX's group for gpu "
            f"tensors)"
        )
    world = os.environ.get("WORLD_SIZE", "")
    if (
        world.isdigit() and int(world) > 1 and not launched_by_mpi()
        and "MLX_RANK" not in os.environ
    ):  # fmt: skip
        raise RuntimeError(
            f"init: this process was started by torchrun or another PyTorch launcher "
            f"(WORLD_SIZE={world}, RANK={os.environ.get('RANK', '?')}), whose ranks have no "
            f"MPI to talk over, so each would train alone; start the job with "
            f"python -m pylucid.distributed.launch -n {world} SCRIPT (mpiexec), or mlx.launch"
        )
    return None if backend in _CPU_BACKENDS else backend


def init_process_group(backend: str | None = None,
                       timeout: float | datetime.timedelta | None = None,
                       **unused: Any) -> ProcessGroup:  # fmt: skip
    """:func:`init` under PyTorch's name (its ``init_method``, ``world_size``, ``rank``
    are set by the launcher here, and ignored)."""
    return init(backend, timeout)


def _abort_on_uncaught_exceptions(group: ProcessGroup) -> None:
    """A rank that dies of an exception takes the job down (status 1, 130 for
    KeyboardInterrupt) instead of leaving the others waiting in a collective for ever."""
    previous = sys.excepthook

    def abort(kind: type, value: BaseException, trace: Any) -> None:
        previous(kind, value, trace)  # (the traceback, once)
        sys.stderr.write(f"pylucid.distributed: rank {group.rank} failed; aborting the job\n")
        sys.stderr.flush()
        time.sleep(0.2)  # (the launcher forwards the report before the abort ends it)
        group.abort(130 if issubclass(kind, KeyboardInterrupt) else 1)

    sys.excepthook = abort


def is_initialized() -> bool:
    """Whether :func:`init` has run (and :func:`destroy` not since)."""
    return _GROUP is not None


def default_group() -> ProcessGroup:
    """The process group (a single-process one if :func:`init` has not run)."""
    return _GROUP if _GROUP is not None else init("single")


def get_rank() -> int:
    """This process's rank (0 without a group)."""
    return default_group().rank


def get_world_size() -> int:
    """The number of processes (1 without a group)."""
    return default_group().size


def get_backend() -> str:
    """``"mpi"``, ``"mlx"`` or ``"single"``."""
    return default_group().name


def destroy() -> None:
    """Leave the process group (``init`` may be called again). The other ranks learn it
    (MPI): a collective of theirs that this rank has not entered raises RankLeftError.
    Called at interpreter exit for a group still joined."""
    global _GROUP
    if _GROUP is not None:
        _GROUP.destroy()
        _GROUP = None
        monitor.report_left()


destroy_process_group = destroy


# -- the checks ------------------------------------------------------------------------------
def _check_tensor(collective: str, tensor: Any) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{collective}: expected a Tensor, got {type(tensor).__name__}")
    if tensor._requires_grad and tensor.grad_fn is not None:
        raise RuntimeError(
            f"{collective}: the tensor (shape {tensor.shape}) was computed by "
            f"{tensor.grad_fn.name}; collectives change tensors in place outside the graph: "
            f"pass tensor.detach() or a leaf"
        )
    views.check_writable(collective, tensor)
    return tensor


def _check_op(collective: str, op: str, dtype: DType) -> str:
    op = str(op).lower()
    if op not in _OPS:
        raise ValueError(f"{collective}: op must be one of {_OPS}, got {op!r}")
    if op == "mean" and not dtype.is_floating_point:
        raise TypeError(f"{collective}: op 'mean' needs a floating tensor, got {dtype.name}")
    return op


def _agree(grp: ProcessGroup, collective: str, argument: int, tensor: Tensor | None) -> None:
    """Enter ``collective`` on ``grp``; raise the same ValueError on every rank unless all
    ranks call it with the same ``argument`` (op or root) on tensors of one dtype and shape
    (``tensor`` None: a barrier)."""
    if grp.size == 1:
        return
    key = (
        (collective, argument, None, ())
        if tensor is None
        else (collective, argument, tensor.dtype, tensor.shape)
    )
    code = _CODES.get(key)
    if code is None:
        shape = key[3]
        dims = list(shape[:_DIMS]) + [-1] * (_DIMS - min(len(shape), _DIMS))
        dtype = -1 if tensor is None else _DTYPES.index(tensor.dtype.name)
        numel = 0 if tensor is None else tensor.numel()
        code = np.array([_COLLECTIVES.index(collective), argument, dtype, len(shape), numel,
                         *dims], dtype=np.int64)  # fmt: skip
        if len(_CODES) > 1024:
            _CODES.clear()
        _CODES[key] = code
    table = grp.arrive(code, collective)
    if (table == code).all():
        return
    rows = []
    for rank, row in enumerate(table):
        what = _COLLECTIVES[row[0]] if 0 <= row[0] < len(_COLLECTIVES) else "?"
        if what == "barrier":
            rows.append(f"rank {rank}: barrier()")
            continue
        dtype_name = _DTYPES[row[2]] if 0 <= row[2] < len(_DTYPES) else "?"
        dims_of = tuple(int(d) for d in row[5 : 5 + min(int(row[3]), _DIMS)])
        rows.append(f"rank {rank}: {what}(argument {int(row[1])}) of {dtype_name} {dims_of}")
    raise ValueError(
        f"{collective}: the ranks disagree on what to do (each must call the same collective "
        f"with the same op or root on tensors of one dtype and shape): " + "; ".join(rows)
    )


# -- host arrays -----------------------------------------------------------------------------
def _compute_dtype(dtype: DType) -> np.dtype:
    return np.dtype(np.float32) if dtype.is_half else np.dtype(dtype.numpy)


def _array_for(grp: ProcessGroup, tensor: Tensor) -> tuple[Any, bool]:
    """The array ``grp`` reduces for ``tensor`` (its compute dtype), and whether it is the
    tensor's own memory (then the group's in-place result is already the tensor's)."""
    if isinstance(grp, MLXGroup):
        mx = grp.mx
        if tensor.backend == "mlx" and not tensor.dtype.is_half:
            return tensor._storage, False
        host = np.asarray(tensor.numpy(), dtype=_compute_dtype(tensor.dtype))
        return mx.array(host), False
    storage = tensor._storage
    if (type(storage) is np.ndarray and storage.dtype in _MPI_NATIVE
            and storage.flags.c_contiguous and storage.flags.writeable):  # fmt: skip
        return storage, True
    return np.array(tensor.numpy(), dtype=_compute_dtype(tensor.dtype), order="C"), False


def _store(tensor: Tensor, values: Any, shared: bool) -> Tensor:
    """Make ``values`` (the collective's result) ``tensor``'s values, in place."""
    if not shared and tensor.backend == "mlx" and not isinstance(values, np.ndarray):
        # an MLX group's result for an mlx tensor: no host copy
        views.write(tensor, values.astype(tensor._backend._mx_dtype(tensor.dtype)))
    elif not shared:
        host = np.asarray(values)
        if host.dtype != tensor.dtype.numpy:
            with np.errstate(over="ignore"):  # (a half beyond its range: inf, as every cast)
                host = host.astype(tensor.dtype.numpy)
        views.write(tensor, tensor._backend.from_numpy(host, tensor.dtype))
    tensor._version.bump()
    return tensor


# -- collectives -----------------------------------------------------------------------------
def all_reduce(tensor: Tensor, op: str = ReduceOp.SUM, group: ProcessGroup | None = None,
               async_op: bool = False) -> Tensor:  # fmt: skip
    """Reduce ``tensor`` over the ranks (``"sum"``, ``"mean"``, ``"max"``, ``"min"``) and
    give every rank the result, in place; returns the tensor."""
    tensor = _check_tensor("all_reduce", tensor)
    op = _check_op("all_reduce", op, tensor.dtype)
    grp = group if group is not None else default_group()
    _agree(grp, "all_reduce", _OPS.index(op), tensor)
    array, shared = _array_for(grp, tensor)
    reduced = grp.all_reduce(array, "sum" if op == "mean" else op)
    if op == "mean":
        if shared:
            np.divide(reduced, grp.size, out=reduced)
        else:
            reduced = reduced / grp.size
    return _store(tensor, reduced, shared)


def broadcast(tensor: Tensor, src: int = 0, group: ProcessGroup | None = None,
              async_op: bool = False) -> Tensor:  # fmt: skip
    """Give every rank rank ``src``'s values of ``tensor``, in place; returns the tensor."""
    tensor = _check_tensor("broadcast", tensor)
    grp = group if group is not None else default_group()
    if not 0 <= src < grp.size:
        raise ValueError(f"broadcast: src {src} is not a rank of the {grp.size} processes")
    _agree(grp, "broadcast", src, tensor)
    array, shared = _array_for(grp, tensor)
    return _store(tensor, grp.broadcast(array, src), shared)


def all_gather(
    tensor_list: list[Tensor] | None,
    tensor: Tensor,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> list[Tensor]:
    """Every rank's ``tensor``, in rank order: written into the tensors of ``tensor_list``
    (one per rank, PyTorch's signature) or, with None, returned as new tensors."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"all_gather: expected a Tensor, got {type(tensor).__name__}")
    grp = group if group is not None else default_group()
    if tensor_list is not None and len(tensor_list) != grp.size:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors for "
                         f"{grp.size} ranks")  # fmt: skip
    _agree(grp, "all_gather", 0, tensor)
    array, _ = _array_for(grp, tensor)
    gathered = np.asarray(grp.all_gather(array))
    if tensor_list is None:
        from pylucid.factories import tensor as make

        return [make(row, dtype=tensor.dtype, device=tensor.device) for row in gathered]
    for target, row in zip(tensor_list, gathered):
        _check_tensor("all_gather", target)
        if target.shape != tensor.shape or target.dtype is not tensor.dtype:
            raise ValueError(
                f"all_gather: tensor_list holds shape {target.shape} {target.dtype.name}; "
                f"expected {tensor.shape} {tensor.dtype.name}"
            )
        _store(target, row, False)
    return tensor_list


def reduce_scatter(
    output: Tensor,
    input_list: Sequence[Tensor],
    op: str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Tensor:
    """Reduce ``input_list[i]`` over the ranks into rank ``i``'s ``output`` (each
    ``input_list`` entry of ``output``'s shape and dtype), in place; returns ``output``."""
    output = _check_tensor("reduce_scatter", output)
    op = _check_op("reduce_scatter", op, output.dtype)
    grp = group if group is not None else default_group()
    if len(input_list) != grp.size:
        raise ValueError(f"reduce_scatter: input_list has {len(input_list)} tensors for "
                         f"{grp.size} ranks")  # fmt: skip
    for t in input_list:
        if not isinstance(t, Tensor) or t.shape != output.shape or t.dtype is not output.dtype:
            raise ValueError(
                f"reduce_scatter: every input must have the output's shape {output.shape} and "
                f"dtype {output.dtype.name}"
            )
    _agree(grp, "reduce_scatter", _OPS.index(op), output)
    compute = _compute_dtype(output.dtype)
    stacked = np.stack([np.asarray(t.numpy(), dtype=compute) for t in input_list])
    if isinstance(grp, MLXGroup):
        stacked = grp.mx.array(stacked)
    mine = np.asarray(grp.reduce_scatter(stacked, "sum" if op == "mean" else op))
    if op == "mean":
        mine = mine / grp.size
    return _store(output, mine, False)


def barrier(group: ProcessGroup | None = None) -> None:
    """Wait until every rank has reached this call (raising as the other collectives do
    when a rank does not come)."""
    _agree(group if group is not None else default_group(), "barrier", 0, None)
