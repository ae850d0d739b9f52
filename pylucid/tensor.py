"""Tensor: a handle on backend storage plus autograd metadata.

Arithmetic dunders and methods such as ``log2`` or ``sum`` call :mod:`pylucid.ops`; the
method set is installed from the op wrappers when :mod:`pylucid.ops` is imported, so the
Tensor class knows no op.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pylucid import dtypes as _dtypes
from pylucid import modes
from pylucid.backends.base import Backend
from pylucid.device import device
from pylucid.dtypes import DType, as_dtype, names_dtype
from pylucid.graph import engine
from pylucid.graph.grad_mode import is_grad_enabled
from pylucid.graph.node import (
    AccumulateGrad,
    Node,
    RemovableHandle,
    VersionCounter,
    current_version,
)
from pylucid.printing import format_values

__all__ = ["Tensor"]

#: Serialises accumulation into leaf gradients: backward passes running in several threads
#: may reach one leaf, and ``grad = grad + new`` is a read-modify-write (PyTorch locks each
#: AccumulateGrad the same way). Hooks run outside it.
_ACCUMULATE_LOCK = threading.Lock()
#: A root prunes the dead weak references to its aliases when their list reaches a power of
#: two from this length on, so a long-lived root (a parameter whose ``.T`` each step takes)
#: keeps a list proportional to its live aliases.
_PRUNE_FROM = 32


class Tensor:
    """An n-dimensional array on a backend, optionally tracked by autograd.

    Create tensors with :func:`pylucid.tensor` and the other factories, not this class.

    A tensor made by a view op (a basic index, ``transpose``, ``permute``, ``reshape`` where
    the strides allow, ``expand``) or by :meth:`detach` shares its input's memory. Such an
    *alias* records ``_base``, the root tensor whose memory it is (a strong reference, as
    PyTorch's ``_base``), and ``_view_steps``, the view ops (class, parameters) that lead from
    the root to it; a differentiable view also records ``_grad_base``, the tensor whose
    autograd history it views, and ``_grad_depth``, how many of the last steps start there
    (-1 for a view made under ``no_grad``). The root keeps weak references to its aliases in
    ``_views``, so that an in-place op reaches every one of them
    (:mod:`pylucid.ops.views`). ``_wrapped`` marks a Python number lifted to a 0-d tensor by an
    op (it takes part in type promotion as a number, not as a tensor).
    """

    __slots__ = (
        "_storage",
        "_backend",
        "_dtype",
        "_shape",
        "_requires_grad",
        "_grad",
        "grad_fn",
        "_accumulator",
        "_counter",
        "_base",
        "_view_steps",
        "_grad_base",
        "_grad_depth",
        "_views",
        "_wrapped",
        "_hooks",
        "_post_accumulate_hooks",
        "_retains_grad",
        "_is_inference",
        "__weakref__",
    )
    # NumPy scalars and arrays on the left of an operator defer to Tensor's reflected method.
    __array_priority__ = 1000

    def __new__(cls, *args: Any, device: Any = None) -> Tensor:
        """PyTorch's legacy constructor ``torch.Tensor(data)`` / ``torch.Tensor(*sizes)``: a
        tensor of the default floating dtype holding ``data`` (a copy), or of the given
        shape (zeros, where PyTorch leaves memory uninitialised). Prefer
        :func:`pylucid.tensor`, which keeps integer data integer."""
        from pylucid.legacy_types import construct

        return construct("Tensor", _dtypes.default_float, args, device)

    @classmethod
    def _make(
        cls,
        storage: Any,
        backend: Backend,
        dtype: DType,
        requires_grad: bool = False,
        shape: tuple[int, ...] | None = None,
        inference: bool | None = None,
    ) -> Tensor:
        """Wrap backend storage (no copy). Internal: ops and factories call it; ``shape``,
        where the caller knows it, saves asking the backend, and ``inference``, whether
        inference mode is on (:attr:`DispatchPlan.inference`), reading the thread's modes."""
        self = object.__new__(cls)
        self._storage = storage
        self._backend = backend
        self._dtype = dtype
        self._shape = tuple(backend.shape(storage)) if shape is None else shape
        self._requires_grad = False
        self._grad = None
        self.grad_fn = None
        self._accumulator = None
        self._counter = None  # (made by the first read of _version: most tensors never need one)
        self._base = None
        self._views = None
        self._wrapped = False
        # (no hooks: one shared empty tuple until a registration makes each its list)
        self._hooks: list[Callable[[Tensor], Tensor | None]] | tuple[()] = ()
        self._post_accumulate_hooks: list[Callable[[Tensor], None]] | tuple[()] = ()
        self._retains_grad = False
        self._is_inference = modes.state.modes.inference if inference is None else inference
        if requires_grad:
            self.requires_grad_(True)
        return self

    @property
    def _version(self) -> VersionCounter:
        """The version counter of this tensor's memory (shared by its aliases), made on
        first use: a tensor no node saves and nothing changes in place never needs one."""
        counter = self._counter
        if counter is None:
            counter = self._counter = VersionCounter()
        return counter

    @_version.setter
    def _version(self, counter: VersionCounter) -> None:
        self._counter = counter

    # -- metadata ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension."""
        return self._shape

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self._dtype

    @property
    def device(self) -> device:
        """The device: ``"cpu"`` (numba backend) or ``"gpu"`` (mlx backend), as a
        :class:`pylucid.device` (a ``str``: ``x.device == "cpu"``; ``x.device.type``)."""
        return _device_of(self._backend.device)

    @property
    def is_cuda(self) -> bool:
        """False: pylucid has no CUDA device (its GPU device is ``"gpu"``)."""
        return False

    @property
    def is_cpu(self) -> bool:
        """Whether the tensor is on the ``"cpu"`` device."""
        return self._backend.device == "cpu"

    def get_device(self) -> int:
        """-1 on the CPU (PyTorch's convention), 0 on the GPU."""
        return -1 if self._backend.device == "cpu" else 0

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or the size of dimension ``dim`` (negative counts from the end)."""
        if dim is None:
            return self._shape
        ndim = len(self._shape)
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
            raise TypeError(f"size: dim must be an int, got {dim!r}")
        if not -ndim <= dim < ndim:
            raise IndexError(
                f"size: dim {dim} is out of range for a tensor of {ndim} dimensions "
                f"(shape {self._shape})"
            )
        return self._shape[dim]

    def dim(self) -> int:
        """The number of dimensions (``ndim``)."""
        return len(self._shape)

    ndimension = dim

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    def element_size(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (``numel() * element_size()``)."""
        return self.numel() * self._dtype.itemsize

    def is_floating_point(self) -> bool:
        """Whether the dtype is floating point."""
        return self._dtype.is_floating_point

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Whether the elements lie in row-major order without gaps (always so on MLX)."""
        return self._backend.is_contiguous(self._storage)

    def contiguous(self, memory_format: Any = None) -> Tensor:
        """This tensor if :meth:`is_contiguous`, else a row-major copy (differentiable)."""
        if self.is_contiguous():
            return self
        from pylucid.ops import clone

        return clone(self)

    def nelement(self) -> int:
        """The number of elements (:meth:`numel`)."""
        return math.prod(self._shape)

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The step in elements between neighbours along each dimension (or ``dim``'s)."""
        strides = self._backend.element_strides(self._storage)
        if dim is None:
            return strides
        self.size(dim)  # (checks dim)
        return strides[dim]

    def data_ptr(self) -> int:
        """The address of the first element (on MLX, which exposes none, an identity of the
        memory: equal for tensors sharing it from the same start)."""
        root = self if self._base is None or self._backend.name != "mlx" else self._base
        return self._backend.data_pointer(root._storage)

    @property
    def is_xpu(self) -> bool:
        """False: pylucid has no XPU device."""
        return False

    @property
    def is_mps(self) -> bool:
        """False: pylucid has no MPS device (its GPU device is ``"gpu"``)."""
        return False

    @property
    def is_sparse(self) -> bool:
        """False: pylucid tensors are dense."""
        return False

    @property
    def is_quantized(self) -> bool:
        """False: pylucid has no quantized tensors."""
        return False

    @property
    def backend(self) -> str:
        """The name of the backend holding the storage (``"numba"``, ``"mlx"``)."""
        return self._backend.name

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self._shape)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        """The sub-tensors along the first dimension (each a differentiable index)."""
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

    # -- autograd metadata ------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """Whether gradients are computed for this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place on a leaf; return self.

        Raises
        ------
        TypeError
            For a non-floating dtype (only floating tensors have gradients).
        RuntimeError
            When turning it off on a non-leaf (detach it instead).
        """
        if requires_grad and not self._dtype.is_floating_point:
            raise TypeError(
                f"only floating-point tensors can require grad, but this tensor is "
                f"{self._dtype.name}; convert it first, e.g. x.to(pylucid.float32)"
            )
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError(
                f"requires_grad can only be turned off on leaf tensors; this one was computed "
                f"by {self.grad_fn.name}: use .detach()"
            )
        self._requires_grad = bool(requires_grad)
        return self

    def is_inference(self) -> bool:
        """Whether the tensor was created inside :class:`pylucid.inference_mode`."""
        return self._is_inference

    @property
    def is_leaf(self) -> bool:
        """True unless the tensor was computed by a recorded op."""
        return self.grad_fn is None

    @property
    def data(self) -> Tensor:
        """The values outside the graph (:meth:`detach`). Assigning a tensor makes its
        storage, dtype, shape and device this tensor's, keeping its identity and autograd
        flags, as PyTorch's ``x.data = y`` (what ``Module.to`` does to parameters); like
        PyTorch's, the assignment is invisible to autograd, and views taken before keep the
        old memory."""
        return self.detach()

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, not {type(value).__name__}")
        if self._base is not None:
            raise RuntimeError(
                f"cannot assign .data of a view (shape {self._shape}): it shares its base's "
                f"memory; assign the base's .data, or copy_ into the view"
            )
        if self._requires_grad and not value._dtype.is_floating_point:
            raise TypeError(
                f"data: a tensor that requires grad cannot take {value._dtype.name} values"
            )
        self._storage, self._backend = value._storage, value._backend
        self._dtype, self._shape = value._dtype, value._shape
        # Old views keep the old memory and counter; the new counter goes on from the old
        # count, so a node that saved this tensor (and reads its counter when it checks)
        # sees no change until one is made in place.
        self._version = VersionCounter(current_version(self))
        self._views = None

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (None before the first backward that reaches it)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"grad must be a Tensor or None, not {type(value).__name__}")
            if (
                value.shape != self._shape
                or value.dtype != self._dtype
                or (value._backend is not self._backend)
            ):
                raise ValueError(
                    f"grad must match the tensor: expected shape {self._shape}, "
                    f"{self._dtype.name} on '{self.device}'; got shape {value.shape}, "
                    f"{value.dtype.name} on '{value.device}'"
                )
        self._grad = value

    def _set_grad_fn(self, node: Node) -> None:
        self.grad_fn = node
        self._requires_grad = True

    def _grad_edge(self) -> Node:
        """The node a gradient for this tensor flows to: its grad_fn, or its accumulator."""
        if self.grad_fn is not None:
            return self.grad_fn
        accumulator = self._accumulator() if self._accumulator is not None else None
        if accumulator is None:
            accumulator = AccumulateGrad(self)
            self._accumulator = weakref.ref(accumulator)
        return accumulator

    def _wrap_grad(self, storage: Any) -> Tensor:
        """A gradient storage of this tensor as a Tensor outside the graph."""
        return Tensor._make(storage, self._backend, self._dtype)

    def _accumulate_grad(self, grad: Any, owned: bool = False) -> None:
        """Add a gradient (storage, or a Tensor when backward records a graph) into .grad;
        ``owned``: no one else holds the storage, so it becomes .grad without a copy.

        An existing .grad is added to in place (the backend's ``accumulate``), as in PyTorch,
        so views and NumPy arrays of it see the sum; under a lock, so concurrent backward
        passes into one leaf lose no update."""
        with _ACCUMULATE_LOCK:
            if isinstance(grad, Tensor):  # create_graph: .grad keeps the graph of its values
                self._grad = grad if self._grad is None else self._grad + grad
            elif self._grad is None:
                private = owned and self._backend.is_private(grad)
                self._grad = self._wrap_grad(grad if private else self._backend.clone(grad))
            else:
                current = self._grad
                total = current._backend.accumulate(current._storage, grad)
                if total is not current._storage:  # immutable storage: the tensor takes it
                    current._rebind(total)
                current._version.bump()
        if self._post_accumulate_hooks:
            for hook in list(self._post_accumulate_hooks):
                hook(self)

    # -- aliases ----------------------------------------------------------------------------
    def _alias(self, source: Tensor, step: tuple[type, dict[str, Any]] | None) -> None:
        """Record that this new tensor shares ``source``'s memory: ``step`` is the view op
        (class, parameters) that made it from ``source``, or None for :meth:`detach` (an
        alias outside ``source``'s graph, which is an autograd root of its own)."""
        root = source if source._base is None else source._base
        steps = source._view_steps if source._base is not None else ()
        self._base, self._version = root, root._version
        if step is None:
            self._view_steps, self._grad_base, self._grad_depth = steps, None, 0
        else:
            self._view_steps = (*steps, step)
            inherited = source._grad_depth if source._base is not None else 0
            if not is_grad_enabled() or inherited < 0:
                self._grad_base, self._grad_depth = None, -1
            elif inherited > 0:
                self._grad_base, self._grad_depth = source._grad_base, inherited + 1
            else:  # source is an autograd root: a root tensor or a detached alias
                self._grad_base, self._grad_depth = source, 1
        reference = weakref.ref(self)
        if root._views is None:
            root._views = [reference]
            return
        root._views.append(reference)
        count = len(root._views)
        if count >= _PRUNE_FROM and count & (count - 1) == 0:
            root._views = [r for r in root._views if r() is not None]

    def _aliases(self) -> list[Tensor]:
        """The live tensors sharing this root tensor's memory (views and detached aliases)."""
        found = [r() for r in self._views] if self._views else []
        return [t for t in found if t is not None]

    def _rebind(self, storage: Any) -> None:
        """Take ``storage`` as this tensor's values (same shape and dtype) on a backend whose
        arrays are immutable, and bring every alias of its memory up to date."""
        from pylucid.ops import views  # the ops layer sits above: import at call time

        views.rebind(self, storage)

    # -- hooks ------------------------------------------------------------------------------
    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` whenever the gradient of this tensor is computed; a returned
        tensor replaces the gradient. Returns a handle whose ``remove()`` unregisters it.

        On a leaf the hook runs before the gradient is accumulated into ``.grad``.
        """
        if not self._requires_grad:
            raise RuntimeError(
                "register_hook: cannot register a hook on a tensor that does not require grad"
            )
        hooks = self._leaf_hooks() if self.grad_fn is None else self.grad_fn.hook_list()
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def _leaf_hooks(self) -> list[Callable[[Tensor], Tensor | None]]:
        """The list of this leaf's hooks, made on first use (and given to its accumulator,
        whose pre-hooks it is)."""
        if type(self._hooks) is not list:
            self._hooks = []
            accumulator = self._accumulator() if self._accumulator is not None else None
            if accumulator is not None:
                accumulator.pre_hooks = self._hooks
        return self._hooks

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> RemovableHandle:
        """On a leaf: call ``hook(tensor)`` after each backward has accumulated into ``.grad``
        (an optimizer step per parameter, for example)."""
        if self.grad_fn is not None:
            raise RuntimeError(
                "register_post_accumulate_grad_hook: only leaf tensors accumulate gradients"
            )
        if type(self._post_accumulate_hooks) is not list:
            self._post_accumulate_hooks = []
        self._post_accumulate_hooks.append(hook)
        return RemovableHandle(self._post_accumulate_hooks, hook)

    def retain_grad(self) -> None:
        """Keep the gradient of this non-leaf tensor in ``.grad`` after backward (a leaf
        always keeps it)."""
        if self.grad_fn is None:
            return
        if not self._retains_grad:
            self._retains_grad = True

            def keep(grad: Tensor) -> None:
                copy = grad if grad.requires_grad else grad._clone_storage()
                self._grad = copy if self._grad is None else self._grad + copy

            self.grad_fn.hook_list().append(keep)

    @property
    def retains_grad(self) -> bool:
        """Whether :meth:`retain_grad` was called on this non-leaf tensor."""
        return self._retains_grad

    def _clone_storage(self) -> Tensor:
        return Tensor._make(self._backend.clone(self._storage), self._backend, self._dtype)

    def backward(
        self,
        gradient: Tensor | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
    ) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of every leaf.

        Parameters
        ----------
        gradient : Tensor, optional
            The gradient of some loss with respect to this tensor; required unless it has
            exactly one element.
        retain_graph : bool, optional
            Keep the graph's saved values for another backward (default: ``create_graph``).
        create_graph : bool
            Record the backward pass so the gradients can be differentiated again.
        """
        engine.backward([self], [gradient], retain_graph, create_graph)

    def detach_(self) -> Tensor:
        """Cut this tensor from the graph in place (it becomes a leaf that requires no grad),
        as PyTorch's; a view cannot (detach it out of place)."""
        if self._base is not None and self._grad_depth > 0:
            raise RuntimeError(
                f"detach_: this tensor (shape {self._shape}) is a view of another that is in "
                f"the graph; use .detach(), which returns a new tensor"
            )
        self.grad_fn = None
        self._requires_grad = False
        return self

    def detach(self) -> Tensor:
        """A tensor sharing this one's memory (and version counter), cut from the graph: an
        in-place change to either shows in both, and makes a node that saved either raise."""
        detached = Tensor._make(self._storage, self._backend, self._dtype)
        detached._alias(self, None)
        return detached

    # -- conversion -------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array.

        On the ``numba`` backend the array shares memory with the tensor; if the tensor
        requires grad it is a read-only view, so it cannot corrupt what backward saved.
        """
        array = self._backend.to_numpy(self._storage)
        if self._requires_grad and array.flags.writeable:
            array = array.view()
            array.flags.writeable = False
        return array

    def item(self) -> float | int | bool:
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise ValueError(
                f"item(): only one-element tensors can be converted to a Python number, "
                f"but this tensor has shape {self._shape}"
            )
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        """The values as (nested) Python lists."""
        return self.numpy().tolist()

    def to(
        self,
        target: str | DType | Tensor | Any = None,
        dtype: DType | Any | None = None,
        non_blocking: bool = False,
        copy: bool = False,
        *,
        device: str | Any = None,
        memory_format: Any = None,
    ) -> Tensor:
        """This tensor on another device or backend and/or as another dtype (differentiable);
        itself where nothing changes (unless ``copy``), as in PyTorch.

        Parameters
        ----------
        target : str, device, dtype or Tensor
            ``"cpu"``, ``"gpu"``, a backend name (``"mlx"``), a dtype, or a tensor whose
            device and dtype to take.
        dtype : dtype, optional
            A dtype, when ``target`` is a device.
        non_blocking : bool
            Accepted for PyTorch's signature (every copy here completes before it returns).
        copy : bool
            Return a copy even where nothing changes.
        device : str or device, optional
            The device, as a keyword (``x.to(device=d, dtype=t)``).
        """
        from pylucid import ops

        if isinstance(target, Tensor):
            target, dtype = target._backend.name, target._dtype
        elif dtype is None and target is not None and names_dtype(target):
            target, dtype = None, target
        if device is not None:
            if target is not None:
                raise TypeError("to: the device was given twice (positionally and device=)")
            target = device
        result = self if target is None else ops.to_device(self, target)
        if dtype is not None:
            result = ops.to_dtype(result, as_dtype(dtype))
        if copy and result is self:
            result = ops.clone(self)
        return result

    def cpu(self) -> Tensor:
        """This tensor on the ``"cpu"`` device (itself if it is there)."""
        return self.to("cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> Tensor:
        """Raises: pylucid has no CUDA device; its GPU device is ``"gpu"`` (``x.to("gpu")``)."""
        from pylucid import backends

        return self.to(backends.resolve("cuda" if device is None else f"cuda:{device}").name)

    def pin_memory(self) -> Tensor:
        """This tensor (pinned host memory matters for CUDA copies, which pylucid has not)."""
        return self

    def type(self, dtype: DType | Any = None, non_blocking: bool = False) -> Tensor | str:
        """With no argument, PyTorch's type name (``"torch.FloatTensor"``); with a dtype
        (or a legacy type such as ``pylucid.LongTensor``), this tensor as that dtype."""
        from pylucid.legacy_types import type_name

        if dtype is None:
            return type_name(self._dtype)
        return self.to(getattr(dtype, "dtype", dtype))

    def new_tensor(
        self, data: Any, dtype: DType | Any = None, device: Any = None, requires_grad: bool = False
    ) -> Tensor:
        """A new tensor of ``data`` with this one's dtype and device unless given."""
        from pylucid.factories import tensor

        return tensor(
            data,
            dtype=self._dtype if dtype is None else dtype,
            device=self._backend.name if device is None else device,
            requires_grad=requires_grad,
        )

    def new_full(
        self,
        size: Any,
        fill_value: float,
        dtype: DType | Any = None,
        device: Any = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A tensor of ``size`` filled with ``fill_value``, with this one's dtype and device
        unless given."""
        from pylucid.factories import full

        return full(
            size,
            fill_value,
            dtype=self._dtype if dtype is None else dtype,
            device=self._backend.name if device is None else device,
            requires_grad=requires_grad,
        )

    def new_zeros(self, *size: Any, dtype: DType | Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Zeros of ``size`` with this tensor's dtype and device unless given."""
        return self.new_full(_sizes(size), 0, dtype, device, requires_grad)

    def new_ones(self, *size: Any, dtype: DType | Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Ones of ``size`` with this tensor's dtype and device unless given."""
        return self.new_full(_sizes(size), 1, dtype, device, requires_grad)

    def new_empty(self, *size: Any, dtype: DType | Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:  # fmt: skip
        """:meth:`new_zeros` (pylucid's empty tensors hold zeros, not garbage)."""
        return self.new_full(_sizes(size), 0, dtype, device, requires_grad)

    def half(self) -> Tensor:
        """``self.to(pylucid.float16)``."""
        return self.to("float16")

    def bfloat16(self) -> Tensor:
        """``self.to(pylucid.bfloat16)``."""
        return self.to("bfloat16")

    def float(self) -> Tensor:
        """``self.to(pylucid.float32)``."""
        return self.to("float32")

    def double(self) -> Tensor:
        """``self.to(pylucid.float64)``."""
        return self.to("float64")

    def long(self) -> Tensor:
        """``self.to(pylucid.int64)``."""
        return self.to("int64")

    def int(self) -> Tensor:
        """``self.to(pylucid.int32)``."""
        return self.to("int32")

    def bool(self) -> Tensor:
        """``self.to(pylucid.bool)``."""
        return self.to("bool")

    def __index__(self) -> int:
        """A one-element integer tensor as an index (``data[i:i + n]`` with ``i`` a tensor)."""
        if self._dtype.is_floating_point or self.numel() != 1:
            raise TypeError(
                f"only integer tensors of a single element can be converted to an index; this "
                f"one is {self._dtype.name} of shape {self._shape}"
            )
        return int(self.item())

    def __format__(self, spec: str) -> str:
        """A 0-d tensor formats as its number (``f"{loss:.4f}"``); others as ``str``."""
        if not self._shape:
            return format(self.item(), spec)
        return super().__format__(spec)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(
                f"the truth value of a tensor with {self.numel()} elements is ambiguous; "
                f"use .any() or .all()"
            )
        return bool(self.item())

    def __repr__(self) -> str:
        values = format_values(self._backend.to_numpy(self._storage), prefix="tensor(")
        extras = []
        if self.device != "cpu":
            extras.append(f"device='{self.device}'")
        if self._dtype not in (_dtypes.default_float, as_dtype("int64"), as_dtype("bool")):
            extras.append(f"dtype=pylucid.{self._dtype.name}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({', '.join([values, *extras])})"


    # -- copying and NumPy ------------------------------------------------------------------
    def __reduce_ex__(self, protocol: int) -> tuple[Any, ...]:
        """Pickle the values, dtype, backend and ``requires_grad`` (not the graph, ``.grad``
        or hooks, as PyTorch): a non-leaf comes back as a leaf that requires grad."""
        values = np.array(self._backend.to_numpy(self._storage), copy=True)
        return (_rebuild, (values, self._dtype.name, self._backend.name, self._requires_grad))

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """A new leaf with a copy of the values, ``requires_grad`` and ``.grad``; a non-leaf
        refuses, as in PyTorch (its copy would have to copy the graph)."""
        if self.grad_fn is not None:
            raise RuntimeError(
                f"deepcopy: only leaf tensors (made by the user, not computed by a recorded "
                f"op) can be deep-copied; this one (shape {self._shape}) was computed by "
                f"{self.grad_fn.name}. Copy tensor.detach() instead"
            )
        copied = Tensor._make(
            self._backend.clone(self._storage), self._backend, self._dtype, self._requires_grad
        )
        memo[id(self)] = copied
        if self._grad is not None:
            copied._grad = self._grad.__deepcopy__(memo)
        return copied

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The values for NumPy (``np.asarray(t)``): :meth:`numpy`, converted to ``dtype``.
        ``copy=False`` raises on the mlx backend, whose arrays NumPy can only copy."""
        values = self.numpy()
        if copy is False and values is not self._storage and values.base is None:
            raise ValueError(
                f"np.asarray(copy=False): a tensor on '{self.device}' ({self.backend}) cannot "
                f"be given to NumPy without a copy"
            )
        if dtype is not None and values.dtype != dtype:
            if copy is False:
                raise ValueError(
                    f"np.asarray(copy=False): the tensor is {self._dtype.name}; giving it as "
                    f"{np.dtype(dtype)} needs a copy"
                )
            return values.astype(dtype)
        return np.array(values, copy=True) if copy else values


def _rebuild(values: np.ndarray, dtype: str, backend: str, requires_grad: bool) -> Tensor:
    """Unpickle a tensor (see :meth:`Tensor.__reduce_ex__`)."""
    from pylucid import backends

    target = backends.resolve(backend)
    kind = as_dtype(dtype)
    return Tensor._make(target.from_numpy(values, kind), target, kind, requires_grad)



#: The device objects of the device names, made once each.
_DEVICES: dict[str, device] = {}


def _device_of(name: str) -> device:
    found = _DEVICES.get(name)
    if found is None:
        found = _DEVICES[name] = device(name)
    return found


def _sizes(size: tuple[Any, ...]) -> tuple[int, ...]:
    """``new_zeros(2, 3)`` or ``new_zeros((2, 3))``: the sizes as one tuple."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)
