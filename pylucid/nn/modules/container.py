"""``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList`` and ``ParameterDict``,
as in ``torch.nn``: their entries are registered submodules (or parameters) named ``"0"``,
``"1"``, ... (or by key), so state-dict keys are PyTorch's (``"0.weight"``, ``"0"``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pylucid.nn.modules.module import Module
from pylucid.nn.parameter import Parameter
from pylucid.tensor import Tensor

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]


def _index(container: str, index: int, size: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{container} indices must be integers or slices, got {index!r}")
    if not -size <= index < size:
        raise IndexError(f"{container}: index {index} is out of range for {size} modules")
    return index % size


class _Indexed(Module):
    """What ``Sequential`` and ``ModuleList`` share: modules named by their position."""

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def _entries(self) -> list[Module]:
        return list(self._modules.values())

    def _renumber(self, modules: Iterable[Module]) -> None:
        self._modules.clear()
        for i, module in enumerate(modules):
            self.add_module(str(i), module)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):  # (a ModuleList: Sequential slices in its __getitem__)
            return type(self)(self._entries()[index])
        return self._entries()[_index(type(self).__name__, index, len(self))]

    def __setitem__(self, index: int, module: Module) -> None:
        position = _index(type(self).__name__, index, len(self))
        self.add_module(str(position), module)

    def __delitem__(self, index: int | slice) -> None:
        entries = self._entries()
        if isinstance(index, slice):
            del entries[index]
        else:
            del entries[_index(type(self).__name__, index, len(entries))]
        self._renumber(entries)

    def append(self, module: Module) -> _Indexed:
        """Add ``module`` at the end; return self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> _Indexed:
        """Add each of ``modules`` at the end; return self."""
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> _Indexed:
        """Insert ``module`` before position ``index`` (``-len`` to ``len``); return self."""
        size = len(self)
        if isinstance(index, bool) or not isinstance(index, int) or not -size <= index <= size:
            raise IndexError(
                f"{type(self).__name__}.insert: index {index!r} is out of range for {size} modules"
            )
        entries = self._entries()
        entries.insert(index, module)
        self._renumber(entries)
        return self


class Sequential(_Indexed):
    """Modules called in order, each on the previous one's output: ``Sequential(m1, m2)``
    or ``Sequential(OrderedDict(name=module))``. Indexable (a slice gives a Sequential)."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        return super().__getitem__(index)

    def __setitem__(self, index: int, module: Module) -> None:
        names = list(self._modules)
        self.add_module(names[_index("Sequential", index, len(names))], module)

    def forward(self, input: Any) -> Any:  # noqa: A002  (PyTorch's name)
        for module in self._modules.values():
            input = module(input)  # noqa: A001
        return input


class ModuleList(_Indexed):
    """A list of registered modules (no ``forward``: iterate over it yourself)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __repr__(self) -> str:
        """PyTorch's: a run of equal entries prints once, as ``(0-2): 3 x Linear(...)``."""
        runs: list[tuple[int, int, str]] = []  # (first, last, text)
        for i, text in enumerate(repr(module) for module in self):
            if runs and runs[-1][2] == text:
                runs[-1] = (runs[-1][0], i, text)
            else:
                runs.append((i, i, text))
        if not runs:
            return f"{type(self).__name__}()"
        lines = [
            (f"({first}): " if first == last else f"({first}-{last}): {last - first + 1} x ")
            + text.replace("\n", "\n  ")
            for first, last, text in runs
        ]
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of registered modules, in insertion order."""

    def __init__(
        self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None
    ) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        """The names."""
        return self._modules.keys()

    def values(self) -> Iterable[Module]:
        """The modules."""
        return self._modules.values()

    def items(self) -> Iterable[tuple[str, Module]]:
        """``(name, module)`` pairs."""
        return self._modules.items()

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        return self._modules.pop(key)

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add (or replace) modules from a mapping (a ModuleDict too) or ``(name, module)``
        pairs."""
        pairs = modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules
        for key, module in pairs:
            self.add_module(key, module)


def _as_parameter(value: Any) -> Any:
    """A tensor that is not a Parameter becomes one (sharing its storage), as PyTorch's
    parameter containers do; anything else is kept as it is."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _describe(value: Any) -> str:
    """PyTorch's one-line description of a parameter container's entry."""
    if isinstance(value, Tensor):
        kind = "Parameter containing: " if isinstance(value, Parameter) else ""
        size = "x".join(str(n) for n in value.shape)
        device = "" if value.device == "cpu" else f" ({value.device})"
        return f"{kind}[{value.dtype} of size {size}{device}]"
    return f"Object of type: {type(value).__name__}"


class _ParameterContainer(Module):
    """What ``ParameterList`` and ``ParameterDict`` share: not callable, PyTorch's repr."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{type(self).__name__} should not be called.")

    def _entries(self) -> Iterable[tuple[Any, Any]]:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return "\n".join(f"  ({key}): {_describe(value)}" for key, value in self._entries())


class ParameterList(_ParameterContainer):
    """A list of parameters, registered as ``"0"``, ``"1"``, ...: a tensor that is not a
    :class:`~pylucid.nn.Parameter` is made one; other objects are kept as plain
    attributes, as in PyTorch."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def _position(self, index: int) -> int:
        return _index("ParameterList", index, self._size)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return ParameterList([self[i] for i in range(self._size)[index]])
        return getattr(self, str(self._position(index)))

    def __setitem__(self, index: int, value: Any) -> None:
        setattr(self, str(self._position(index)), _as_parameter(value))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._size))

    def __iadd__(self, values: Iterable[Any]) -> ParameterList:
        return self.extend(values)

    def append(self, value: Any) -> ParameterList:
        """Add ``value`` at the end; return self."""
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        """Add each of ``values`` at the end; return self."""
        if isinstance(values, Tensor) or not isinstance(values, Iterable):
            raise TypeError(
                f"ParameterList.extend should be called with an iterable, but got "
                f"{type(values).__name__}"
            )
        for value in values:
            self.append(value)
        return self

    def _entries(self) -> Iterable[tuple[Any, Any]]:
        return enumerate(self)

    def __dir__(self) -> list[str]:
        return [name for name in super().__dir__() if not name.isdigit()]


class ParameterDict(_ParameterContainer):
    """A dict of parameters, registered under their keys, in insertion order: a tensor
    that is not a :class:`~pylucid.nn.Parameter` is made one; other objects are kept as
    plain attributes, as in PyTorch."""

    def __init__(
        self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None
    ) -> None:
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be strings, got {type(key).__name__}")
        self._keys[key] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._keys.keys()

    def values(self) -> list[Any]:
        """The entries, in insertion order."""
        return [self[key] for key in self._keys]

    def items(self) -> list[tuple[str, Any]]:
        """``(key, entry)`` pairs, in insertion order."""
        return [(key, self[key]) for key in self._keys]

    def get(self, key: str, default: Any = None) -> Any:
        """The entry of ``key``, or ``default``."""
        return self[key] if key in self._keys else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The entry of ``key``, set to ``default`` first if absent."""
        if key not in self._keys:
            self[key] = default
        return self[key]

    def pop(self, key: str) -> Any:
        """Remove ``key`` and return its entry."""
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        """Remove every entry."""
        for key in list(self._keys):
            del self[key]

    def update(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Add (or replace) entries from a mapping (a ParameterDict too) or ``(key, value)``
        pairs."""
        pairs = (
            parameters.items() if isinstance(parameters, (Mapping, ParameterDict)) else parameters
        )
        for key, value in pairs:
            self[key] = value

    def _entries(self) -> Iterable[tuple[Any, Any]]:
        return self.items()
