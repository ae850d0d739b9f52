"""``Module``: the base class of layers and models, as ``torch.nn.Module``.

Assigning a :class:`~pylucid.nn.Parameter`, a module, a :class:`~pylucid.nn.Buffer` or (after
:meth:`Module.register_buffer`) a tensor to an attribute registers it, so
:meth:`Module.parameters`, :meth:`Module.state_dict` and :meth:`Module.to` find it, under
PyTorch's key names (``"0.weight"``, ``"bn.running_mean"``).

What differs from PyTorch: no backward hooks on modules (tensor hooks exist:
``Tensor.register_hook``), no ``_extra_state``, and :meth:`Module.load_state_dict` refuses a
value of another dtype category (a float into an int64 buffer) where PyTorch's ``copy_``
would convert it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from pylucid.dtypes import DType, as_dtype
from pylucid.graph.grad_mode import no_grad
from pylucid.graph.node import RemovableHandle
from pylucid.nn.parameter import Buffer, Parameter
from pylucid.ops.inplace import copy_, zero_
from pylucid.tensor import Tensor

__all__ = ["IncompatibleKeys", "Module"]


class IncompatibleKeys(NamedTuple):
    """What :meth:`Module.load_state_dict` returns: the keys it lacked and the extra ones."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _conversion(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, DType | None]:
    """The device and dtype of ``Module.to(device=None, dtype=None)`` / ``.to(dtype)`` /
    ``.to(device, dtype)`` / ``.to(tensor)``."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"Module.to: unexpected arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, DType):
            dtype = arg
        elif isinstance(arg, str):
            try:
                dtype = as_dtype(arg)
            except (TypeError, ValueError):
                device = arg
        else:
            raise TypeError(f"Module.to: expected a device, a dtype or a tensor, got {arg!r}")
    if dtype is not None:
        dtype = as_dtype(dtype)
        if not dtype.is_floating_point:
            raise TypeError(
                f"Module.to: only floating dtypes can be given to a module, got {dtype.name}"
            )
    return device, dtype


class Module:
    """Base class of layers and models: subclasses set up their parameters and submodules
    in ``__init__`` (after ``super().__init__()``) and compute in :meth:`forward`; calling
    the module runs the forward hooks around ``forward``.

    Attributes
    ----------
    training : bool
        Training mode (dropout drops, batch norm uses the batch's statistics); see
        :meth:`train` and :meth:`eval`.
    """

    training: bool
    #: Buffers a state dict may lack: :meth:`load_state_dict` leaves them as they are and
    #: does not report them missing (PyTorch's allowance for checkpoints older than the
    #: buffer, as batch norm's ``num_batches_tracked``).
    _optional_state: tuple[str, ...] = ()

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_forward_pre_hooks", [])
        object.__setattr__(self, "_forward_hooks", [])

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; every subclass defines it."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing "forward"')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for hook in list(self._forward_pre_hooks):
            changed = hook(self, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        result = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks):
            changed = hook(self, args, result)
            if changed is not None:
                result = changed
        return result

    # -- registration -----------------------------------------------------------------------
    def _check_ready(self, what: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {what} before Module.__init__() call (call super().__init__() "
                f"first in {type(self).__name__}.__init__)"
            )

    def _forget(self, name: str, keep: str | None = None) -> None:
        """Unregister ``name`` from every registry but ``keep`` (where a re-assignment keeps
        its position, so the state dict's order stays PyTorch's)."""
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry != keep:
                self.__dict__[registry].pop(name, None)
        if keep != "_buffers":
            self._non_persistent_buffers.discard(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Parameter):
            self._check_ready("parameters")
            self.__dict__.pop(name, None)
            self._forget(name, keep="_parameters")
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._check_ready("a submodule")
            self.__dict__.pop(name, None)
            self._forget(name, keep="_modules")
            self._modules[name] = value
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise TypeError(
                    f"cannot assign a {type(value).__name__} as parameter {name!r} of "
                    f"{type(self).__name__} (a Parameter or None is expected)"
                )
            self._parameters[name] = None
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign a {type(value).__name__} as child module {name!r} of "
                    f"{type(self).__name__} (a Module or None is expected)"
                )
            self._modules[name] = None
        elif isinstance(value, Buffer):
            self._check_ready("buffers")
            self.__dict__.pop(name, None)
            self._forget(name, keep="_buffers")
            self.register_buffer(name, value, persistent=value.persistent)
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign a {type(value).__name__} as buffer {name!r} of "
                    f"{type(self).__name__} (a Tensor or None is expected)"
                )
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        registries = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in registries and name in registries[registry]:
                return registries[registry][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if any(name in r for r in (self._parameters, self._buffers, self._modules)):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        names = [*super().__dir__(), *self._parameters, *self._buffers, *self._modules]
        return sorted(set(names))

    def _check_name(self, kind: str, name: str, registry: str) -> None:
        """Refuse a ``name`` that is not a string, is empty, holds a dot, or is already an
        attribute other than an entry of ``registry`` (PyTorch's rule: a buffer cannot take
        a parameter's name, for instance)."""
        self._check_ready(kind)
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f'{kind} name can\'t be empty or contain ".", got {name!r}')
        if hasattr(self, name) and name not in self.__dict__[registry]:
            raise KeyError(f"attribute {name!r} already exists in {type(self).__name__}")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or None: a declared, absent parameter) as ``name``."""
        self._check_name("parameter", name, "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign a {type(param).__name__} as parameter {name!r} (a "
                f"pylucid.nn.Parameter or None is expected)"
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` as buffer ``name``: state that is not trained (running
        statistics), moved by :meth:`to` and, if ``persistent``, part of the state dict."""
        self._check_name("buffer", name, "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign a {type(tensor).__name__} as buffer {name!r}")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` as the child ``name``."""
        self._check_name("module", name, "_modules")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The submodule at the dotted path ``target`` (``""``: this module)."""
        module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no submodule {part!r}")
            module = child
        return module

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at the dotted path ``target``."""
        path, _, name = target.rpartition(".")
        module = self.get_submodule(path)
        if name not in module._parameters:
            raise AttributeError(f"{type(module).__name__} has no parameter {name!r}")
        return module._parameters[name]

    # -- traversal --------------------------------------------------------------------------
    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module and its descendants, with dotted names, each once."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                path = f"{prefix}.{name}" if prefix else name
                yield from module.named_modules(memo, path, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        """This module and its descendants."""
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct submodules, with their names."""
        seen: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator[Module]:
        """The direct submodules."""
        for _, module in self.named_children():
            yield module

    def _named_members(
        self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple[str, Tensor]]:
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        seen: set[int] = set()
        for module_prefix, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """The parameters with their dotted names (a shared parameter once)."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The parameters of this module and (``recurse``) its descendants."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """The buffers with their dotted names."""
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers of this module and (``recurse``) its descendants."""
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    # -- modes and gradients ----------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode``) on this module and, through their ``train``, its
        descendants; return self."""
        if not isinstance(mode, bool):
            raise ValueError(f"train: mode must be a bool, got {type(mode).__name__}")
        object.__setattr__(self, "training", mode)
        for module in self.children():
            module.train(mode)  # (a child's own train() override applies, as in PyTorch)
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` on every parameter; return self."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients of every parameter (None, or zeros in place)."""
        with no_grad():
            for param in self.parameters():
                if param.grad is None:
                    continue
                if set_to_none:
                    param.grad = None
                else:
                    zero_(param.grad)

    # -- conversion -------------------------------------------------------------------------
    def _apply(self, convert: Callable[[Tensor], Tensor]) -> Module:
        """Replace the values of every parameter, gradient and buffer by ``convert``'s,
        keeping each parameter object (so an optimizer made before still holds it)."""
        with no_grad():
            for module in self.modules():
                for param in module._parameters.values():
                    if param is None:
                        continue
                    converted = convert(param)
                    if converted is not param:  # (keeps the aliases of an unchanged one)
                        param.data = converted
                    if param.grad is not None:
                        grad = convert(param.grad)
                        param._grad = None
                        param.grad = grad
                for name, buffer in module._buffers.items():
                    if buffer is not None:
                        module._buffers[name] = convert(buffer)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move to a device (``"cpu"``, ``"gpu"``) and/or convert the floating parameters
        and buffers to a floating dtype, in place; return self. ``to(tensor)`` takes the
        tensor's device and dtype."""
        device, dtype = _conversion(args, kwargs)

        def convert(t: Tensor) -> Tensor:
            if device is not None and t.device != device:
                t = t.to(device)
            if dtype is not None and t.dtype.is_floating_point and t.dtype is not dtype:
                t = t.to(dtype)
            return t

        return self._apply(convert)

    def cpu(self) -> Module:
        """``to("cpu")``."""
        return self.to("cpu")

    def float(self) -> Module:
        """Floating parameters and buffers to float32."""
        return self.to("float32")

    def double(self) -> Module:
        """Floating parameters and buffers to float64."""
        return self.to("float64")

    def half(self) -> Module:
        """Floating parameters and buffers to float16."""
        return self.to("float16")

    def bfloat16(self) -> Module:
        """Floating parameters and buffers to bfloat16."""
        return self.to("bfloat16")

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every descendant (children first), then on this module (an
        initialisation, typically); return self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # -- hooks ------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, args)`` before ``forward``; a returned value (a tuple, or one
        value) replaces the arguments."""
        self._forward_pre_hooks.append(hook)
        return RemovableHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after ``forward``; a returned value replaces
        the output."""
        self._forward_hooks.append(hook)
        return RemovableHandle(self._forward_hooks, hook)

    # -- state dicts ------------------------------------------------------------------------
    def _local_state(self) -> Iterator[tuple[str, Tensor]]:
        """``(name, tensor)`` of this module's own parameters, then persistent buffers
        (those not None)."""
        for name, param in self._parameters.items():
            if param is not None:
                yield name, param
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers:
                yield name, buffer

    def _state_items(self) -> Iterator[tuple[str, Module, str, Tensor]]:
        """``(key, module, name, tensor)`` of every parameter and persistent buffer, in
        PyTorch's order: each module's parameters, then its buffers, then its children's."""
        for prefix, module in self.named_modules(remove_duplicate=False):
            dot = f"{prefix}." if prefix else ""
            for name, tensor in module._local_state():
                yield dot + name, module, name, tensor

    def _unexpected(self, state_dict: Mapping[str, Any]) -> list[str]:
        """The keys of ``state_dict`` that nothing takes, in PyTorch's order: module by
        module from the root, each in the state dict's order (a key is the module's when its
        first part after the module's prefix is not a child's name)."""
        found = []
        for prefix, module in self.named_modules(remove_duplicate=False):
            dot = f"{prefix}." if prefix else ""
            local = {name for name, _ in module._local_state()}
            for key in state_dict:
                if key.startswith(dot):
                    head, nested, _ = key[len(dot) :].partition(".")
                    if (head not in module._modules) if nested else (head not in local):
                        found.append(key)
        return found

    def state_dict(
        self, destination: dict[str, Tensor] | None = None, prefix: str = "",
        keep_vars: bool = False,
    ) -> dict[str, Tensor]:  # fmt: skip
        """Every parameter and persistent buffer under its dotted key, detached unless
        ``keep_vars`` (the tensors share the module's memory: save or copy them)."""
        destination = OrderedDict() if destination is None else destination
        for key, _, _, tensor in self._state_items():
            destination[prefix + key] = tensor if keep_vars else tensor.detach()
        return destination

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Copy ``state_dict``'s tensors into the parameters and buffers of the same keys.

        Every key, shape and dtype is checked before anything is copied: a refused state
        dict (with ``strict``, a missing or an unexpected key; always, a value that is not a
        tensor, of another shape, or of another dtype category) raises a RuntimeError
        listing every problem and leaves the module untouched. Values are converted to the
        module's dtype (float64 into float32) and device. ``assign`` makes the state dict's
        tensors the parameters and buffers instead of copying into them. A batch norm's
        ``num_batches_tracked`` may be absent (kept as it is), as in PyTorch.

        Returns
        -------
        IncompatibleKeys
            ``(missing_keys, unexpected_keys)``.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"load_state_dict: expected a mapping of keys to tensors, got "
                f"{type(state_dict).__name__}"
            )
        targets = {key: (module, name, t) for key, module, name, t in self._state_items()}
        missing = [
            key for key, (module, name, _) in targets.items()
            if key not in state_dict and name not in module._optional_state
        ]  # fmt: skip
        unexpected = self._unexpected(state_dict)
        errors = []
        if strict:
            if missing:
                errors.append("Missing key(s) in state_dict: " + _listed(missing))
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " + _listed(unexpected))
        for key, (_, _, current) in targets.items():
            if key in state_dict:
                problem = _mismatch(key, state_dict[key], current)
                if problem:
                    errors.append(problem)
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors)
            )
        with no_grad():
            for key, (module, name, current) in targets.items():
                if key in state_dict:
                    _load_one(module, name, current, state_dict[key], assign)
        return IncompatibleKeys(missing, unexpected)

    # -- printing ---------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """What the module prints between its parentheses (its hyperparameters)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            f"({name}): " + repr(module).replace("\n", "\n  ")
            for name, module in self._modules.items()
        ]
        if len(extra_lines) == 1 and not child_lines:
            return f"{type(self).__name__}({extra_lines[0]})"
        lines = extra_lines + child_lines
        body = "\n  " + "\n  ".join(lines) + "\n" if lines else ""
        return f"{type(self).__name__}({body})"


def _listed(keys: list[str]) -> str:
    return ", ".join(f'"{key}"' for key in keys) + "."


def _mismatch(key: str, value: Any, current: Tensor) -> str | None:
    """Why ``value`` cannot be loaded into ``current`` (None if it can)."""
    if not isinstance(value, Tensor):
        return f'While copying the parameter named "{key}", expected a Tensor, got a ' + (
            f"{type(value).__name__}."
        )
    if value.shape != current.shape:
        return (
            f"size mismatch for {key}: copying a param with shape {value.shape} from "
            f"checkpoint, the shape in current model is {current.shape}."
        )
    if value.dtype.category != current.dtype.category:
        return (
            f"dtype mismatch for {key}: the checkpoint holds {value.dtype.name}, the current "
            f"model {current.dtype.name}."
        )
    return None


def _load_one(module: Module, name: str, current: Tensor, value: Tensor, assign: bool) -> None:
    if not assign:
        copy_(current, value)
        return
    if name in module._parameters:
        module._parameters[name] = Parameter(value.detach(), current.requires_grad)
    else:
        module._buffers[name] = value.detach()
