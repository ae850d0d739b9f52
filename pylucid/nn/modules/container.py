"""``Sequential``, ``ModuleList`` and ``ModuleDict``, as in ``torch.nn``: their entries are
registered submodules named ``"0"``, ``"1"``, ... (or by key), so state-dict keys are
PyTorch's (``"0.weight"``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pylucid.nn.modules.module import Module

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


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
