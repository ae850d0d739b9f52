"""``DistributedDataParallel``: data-parallel training across processes, as
``torch.nn.parallel.DistributedDataParallel``.

Every process (rank) holds a replica of the model and runs forward and backward on its own
share of the batch; the wrapper makes the replicas start equal (rank 0's parameters and
buffers are broadcast at construction) and keeps them equal: during backward, each
gradient is averaged over the ranks, so that every rank's optimizer takes the same step.

The averaging is done in buckets of about ``bucket_cap_mb`` MB: the parameters, in reverse
registration order (about the order backward produces their gradients), are grouped by
device and dtype and cut into buckets; a post-accumulate-grad hook on each parameter marks
it ready, and when every parameter of a bucket is ready (and the buckets before it have
been reduced: all ranks reduce the buckets in one order) the bucket's gradients are
flattened into one buffer, averaged with one :func:`pylucid.distributed.all_reduce` and
copied back. When backward returns, every bucket has been reduced and the gradients are
final. The reductions run in the hooks, blocking, on the thread that runs backward: the
communication of a bucket is not overlapped with the backward computation of the next
(the collectives of :mod:`pylucid.distributed` are blocking; a prototype reducing on a
worker thread was slower where the ranks share the cores, MPI's waits spinning on them).
"""

from __future__ import annotations

import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pylucid import distributed
from pylucid.distributed.groups import ProcessGroup
from pylucid.factories import tensor as make_tensor
from pylucid.graph.grad_mode import is_grad_enabled, no_grad
from pylucid.graph.node import RemovableHandle
from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.ops import concatenate, views
from pylucid.tensor import Tensor

__all__ = ["DistributedDataParallel"]

_NAME = "DistributedDataParallel"


def _assign_buckets(tensors: Sequence[Tensor], cap_bytes: float) -> list[list[int]]:
    """Positions of ``tensors`` in buckets: tensors of one backend and dtype, taken in the
    given order, join a bucket until it holds ``cap_bytes`` or more (so a tensor larger than
    the cap has a bucket of its own); buckets are ordered by their first tensor (PyTorch's
    ``compute_bucket_assignment_by_size``)."""
    closed: list[list[int]] = []
    open_: dict[tuple[str, str], tuple[list[int], int]] = {}
    for position, t in enumerate(tensors):
        key = (t.backend, t.dtype.name)
        members, size = open_.get(key, ([], 0))
        members.append(position)
        size += t.numel() * t.dtype.itemsize
        if size >= cap_bytes:
            closed.append(members)
            open_.pop(key, None)
        else:
            open_[key] = (members, size)
    buckets = closed + [members for members, _ in open_.values()]
    return sorted(buckets, key=lambda members: members[0])


def _coalesced(tensors: list[Tensor], reduce: Callable[[Tensor], Any]) -> None:
    """Run the in-place collective ``reduce`` on ``tensors`` (one backend and dtype): on the
    tensor itself when it is alone, else on one flat copy of them all (each tensor's
    elements in row-major order, whatever its memory layout, so that every rank's buffer
    lines up), copied back."""
    with no_grad():
        if len(tensors) == 1:
            reduce(tensors[0])
            return
        flat = concatenate([t.reshape(-1) for t in tensors])
        reduce(flat)
        offset = 0
        for t in tensors:  # (a plain write: copy_'s autograd-aware path costs a where)
            size = t.numel()
            views.write(t, flat[offset : offset + size].reshape(t.shape)._storage)
            t._version.bump()
            offset += size


class _Reducer:
    """The gradient buckets of one :class:`DistributedDataParallel` and the state of the
    step's reduction.

    A step starts at the first hook after the previous step finished; ``pending[b]`` counts
    the parameters of bucket ``b`` still without their gradient, ``next_bucket`` is the first
    bucket not reduced yet (the step has finished when it equals the number of buckets).
    """

    def __init__(self, params: list[Parameter], names: list[str], group: ProcessGroup,
                 cap_bytes: float) -> None:  # fmt: skip
        self.group = group
        self.params = params
        self.names = names
        self.buckets = _assign_buckets(params, cap_bytes)
        self.bucket_of = [0] * len(params)
        for b, members in enumerate(self.buckets):
            for position in members:
                self.bucket_of[position] = b
        self.expect_hooks = False
        self.pending: list[int] = []
        self.ready: set[int] = set()
        self.next_bucket = len(self.buckets)

    def step_unfinished(self) -> bool:
        """Whether a step's reduction began and some bucket was never reduced."""
        return self.next_bucket < len(self.buckets)

    def missing(self) -> list[str]:
        """The names of the parameters of the unfinished step without a gradient (in
        registration order)."""
        return [self.names[i] for i in reversed(range(len(self.params))) if i not in self.ready]

    def abandon_step(self) -> None:
        """Forget an unfinished step (after reporting it)."""
        self.next_bucket = len(self.buckets)

    def mark_ready(self, position: int) -> None:
        """The hook of parameter ``position``: its gradient is accumulated; reduce every
        bucket, in order, whose parameters are all ready."""
        if not self.expect_hooks:
            return
        if not self.step_unfinished():
            self.pending = [len(members) for members in self.buckets]
            self.ready = set()
            self.next_bucket = 0
        if position in self.ready:
            missing = self.missing()
            self.abandon_step()
            raise RuntimeError(
                f"{_NAME}: parameter {self.names[position]!r} received a second gradient "
                f"before the reduction of the step finished: the previous backward gave no "
                f"gradient to {missing}. Every parameter that requires grad must get a "
                f"gradient in every backward (find_unused_parameters is not supported)"
            )
        self.ready.add(position)
        self.pending[self.bucket_of[position]] -= 1
        while self.step_unfinished() and self.pending[self.next_bucket] == 0:
            try:
                self.reduce(self.next_bucket)
            except BaseException:
                # (a failed collective: the step is over; its error leaves backward, and the
                # next forward must not report the buckets it left as unused parameters)
                self.abandon_step()
                raise
            self.next_bucket += 1

    def reduce(self, b: int) -> None:
        """Average bucket ``b``'s gradients over the ranks (one all_reduce)."""
        grads = [self.params[i].grad for i in self.buckets[b]]
        _coalesced(grads, lambda t: distributed.all_reduce(t, "mean", group=self.group))


def _mark_ready_hook(reducer: weakref.ref[_Reducer], position: int) -> Callable[[Tensor], None]:
    def hook(param: Tensor) -> None:
        alive = reducer()
        if alive is not None:
            alive.mark_ready(position)

    return hook


def _remove(handles: list[RemovableHandle]) -> None:
    for handle in handles:
        handle.remove()


class DistributedDataParallel(Module):
    r"""Wrap ``module`` for data-parallel training over the ranks of ``process_group``.

    At construction rank 0's parameters and buffers are broadcast to every rank, in place
    (the Parameter objects stay those of ``module``, so an optimizer made before or after
    holds them). Calling the wrapper broadcasts rank 0's buffers (``broadcast_buffers``, in
    a forward with grad enabled and synchronisation on) and calls ``module``. The backward
    that follows averages each gradient over the :math:`R` ranks:

    .. math::  g = \frac{1}{R} \sum_{r=0}^{R-1} g_r ,

    :math:`g_r` being rank :math:`r`'s gradient of its own loss; when each rank's loss is
    the mean over its :math:`B/R` samples of a batch of :math:`B`, :math:`g` is the gradient
    of the mean loss over the whole batch, so :math:`R` processes take the steps one process
    takes on the whole batch. Gradients are reduced in buckets of about ``bucket_cap_mb`` MB
    (see the module's notes), each as soon as its gradients (and the buckets before it) are
    ready; when backward returns the gradients are final.

    Every parameter that requires grad must receive a gradient in every backward, on every
    rank (a parameter left out leaves its bucket, and the buckets after it, unreduced: the
    next forward raises a RuntimeError naming it; on one rank only, the others wait for it).
    Freeze parameters you do not train (``requires_grad_(False)``): they are broadcast at
    construction, never reduced.

    Parameters
    ----------
    module : Module
        The model (its parameters on one device; the same architecture on every rank).
    device_ids, output_device, dim
        PyTorch's single-device options, kept as attributes: the parameters' device is the
        device (``device_ids`` is None or names one device).
    broadcast_buffers : bool
        Broadcast rank 0's buffers at the start of each synchronising forward.
    init_sync : bool
        Broadcast rank 0's parameters and buffers at construction.
    process_group : ProcessGroup, optional
        The ranks (default :func:`pylucid.distributed.default_group`: the job's group, or a
        single process without a launcher, where the wrapper changes nothing).
    bucket_cap_mb : float, optional
        The bucket size in MB (MiB, as PyTorch's; default 25).
    find_unused_parameters : bool
        Only False: parameters without a gradient are not searched for.
    check_reduction, gradient_as_bucket_view, static_graph : bool
        PyTorch's hints, accepted: gradients are always copied through a flat buffer, and
        the reduction needs no static graph.

    Attributes
    ----------
    module : Module
        The wrapped model (``state_dict`` keys are its keys prefixed ``"module."``).
    require_backward_grad_sync : bool
        False inside :meth:`no_sync`.

    Raises
    ------
    NotImplementedError
        For ``find_unused_parameters=True``.
    TypeError
        For a ``module`` that is not a Module, or a ``process_group`` that is not a group.
    ValueError
        For a non-positive ``bucket_cap_mb``, several ``device_ids``, parameters on
        several devices, or ranks whose modules differ (every rank raises).
    """

    def __init__(
        self,
        module: Module,
        device_ids: Sequence[Any] | None = None,
        output_device: Any = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        init_sync: bool = True,
        process_group: ProcessGroup | None = None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"{_NAME}: expected a pylucid.nn.Module, got {type(module).__name__}")
        if find_unused_parameters:
            raise NotImplementedError(
                f"{_NAME}: find_unused_parameters=True is not supported: every parameter that "
                f"requires grad must get a gradient in every backward (freeze the others with "
                f"requires_grad_(False))"
            )
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError(f"{_NAME}: one device per process; got device_ids={device_ids!r}")
        if process_group is not None and not isinstance(process_group, ProcessGroup):
            raise TypeError(f"{_NAME}: process_group must be a pylucid.distributed "
                            f"ProcessGroup, got {type(process_group).__name__}")  # fmt: skip
        cap_mb = 25.0 if bucket_cap_mb is None else bucket_cap_mb
        if not cap_mb > 0:
            raise ValueError(f"{_NAME}: bucket_cap_mb must be positive, got {bucket_cap_mb!r}")
        devices = sorted({p.device for p in module.parameters()})
        if len(devices) > 1:
            raise ValueError(f"{_NAME}: the module's parameters are on several devices "
                             f"{devices}; put them on one")  # fmt: skip
        self.module = module
        self.device_ids = None if device_ids is None else list(device_ids)
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.bucket_bytes_cap = int(cap_mb * 1024 * 1024)
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.require_backward_grad_sync = True
        self.process_group = (
            process_group if process_group is not None else distributed.default_group()
        )
        self._reducer: _Reducer | None = None
        if self.process_group.size == 1:
            return
        self._check_replicas()
        if init_sync:
            self._broadcast([*module.parameters(), *module.buffers()])
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad][::-1]
        reducer = _Reducer([p for _, p in named], [n for n, _ in named], self.process_group,
                           self.bucket_bytes_cap)  # fmt: skip
        reference = weakref.ref(reducer)
        handles = [p.register_post_accumulate_grad_hook(_mark_ready_hook(reference, i))
                   for i, p in enumerate(reducer.params)]  # fmt: skip
        weakref.finalize(reducer, _remove, handles)
        self._reducer = reducer

    def _check_replicas(self) -> None:
        """Raise the same ValueError on every rank unless all ranks' modules have the same
        parameter and buffer names, shapes, dtypes and ``requires_grad``."""
        entries = [f"{n}:{tuple(p.shape)}:{p.dtype.name}:{p.requires_grad}"
                   for n, p in self.module.named_parameters()]  # fmt: skip
        entries += [f"{n}:{tuple(b.shape)}:{b.dtype.name}" for n, b in self.module.named_buffers()]
        elements = sum(p.numel() for p in self.module.parameters())
        code = make_tensor([len(entries), elements, zlib.crc32(";".join(entries).encode())])
        table = [row.tolist() for row in distributed.all_gather(None, code, self.process_group)]
        if any(row != table[0] for row in table):
            ranks = "; ".join(f"rank {r}: {n} parameters and buffers, {e} parameter elements"
                              for r, (n, e, _) in enumerate(table))  # fmt: skip
            raise ValueError(
                f"{_NAME}: the ranks' modules differ (every rank must wrap the same "
                f"architecture, with the same names, shapes, dtypes and requires_grad): {ranks}"
            )

    def _broadcast(self, tensors: list[Tensor]) -> None:
        """Give every rank rank 0's values of ``tensors``, in place, in buckets."""
        for members in _assign_buckets(tensors, self.bucket_bytes_cap):
            _coalesced([tensors[i] for i in members],
                       lambda t: distributed.broadcast(t, 0, group=self.process_group))  # fmt: skip

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """Call the module (first, in a synchronising forward with ``broadcast_buffers``,
        broadcasting rank 0's buffers).

        Raises
        ------
        RuntimeError
            When the previous backward left parameters without a gradient, so that some
            buckets were never reduced (the error names the parameters).
        """
        reducer = self._reducer
        if reducer is not None:
            if reducer.step_unfinished():
                missing = reducer.missing()
                reducer.abandon_step()
                raise RuntimeError(
                    f"{_NAME}: the previous backward gave no gradient to parameter(s) "
                    f"{missing}, so the gradients of the step were not all averaged over the "
                    f"ranks (and an optimizer step since used this rank's own). Every "
                    f"parameter that requires grad must get a gradient in every backward: "
                    f"use it in the loss, or freeze it with requires_grad_(False) before "
                    f"wrapping (find_unused_parameters is not supported)"
                )
            if is_grad_enabled():
                reducer.expect_hooks = self.require_backward_grad_sync
                if self.broadcast_buffers and self.require_backward_grad_sync:
                    buffers = list(self.module.buffers())
                    if buffers:
                        self._broadcast(buffers)
        return self.module(*inputs, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside: forward and backward accumulate gradients locally, without communication
        (gradient accumulation); the first synchronising backward after it averages the
        accumulated gradients. It is the forward that decides: a forward inside followed by
        a backward outside does not synchronise, as in PyTorch."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def extra_repr(self) -> str:
        size = self.process_group.size
        return f"world_size={size}, bucket_cap_mb={self.bucket_bytes_cap / 2**20:g}"
