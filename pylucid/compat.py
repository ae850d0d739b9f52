"""Marks on PyTorch names whose pylucid counterpart differs or is refused.

A PyTorch name is an alias or a thin adapter declared next to the thing it names; where its
meaning cannot be matched, it says so in one of two ways that the compatibility census
(``docs/torch-compat.md``, ``python -m pylucid docs``) reads from the code:

- :func:`differs` marks a function, method or class that exists but behaves differently
  from PyTorch's in a stated way (``torch.empty`` gives zeros, not garbage);
- :func:`unsupported` makes a stand-in that raises :class:`NotImplementedError` naming the
  PyTorch name and what to write instead, so a program stops where it would otherwise get
  a silently different answer;
- :func:`refuse_attributes` makes a module answer a lookup of a name it lacks (a dtype
  such as ``torch.uint8``) with an AttributeError saying what to use instead.

>>> import pylucid as pl
>>> pl.uint8
Traceback (most recent call last):
AttributeError: module 'pylucid' has no attribute 'uint8': pylucid has no uint8 dtype; ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "differs",
    "refuse_attributes",
    "refused_attributes",
    "torch_differs",
    "torch_unsupported",
    "unsupported",
]

T = TypeVar("T")


def differs(reason: str) -> Callable[[T], T]:
    """Decorator: record on ``obj`` (function or class) how it differs from PyTorch's."""

    def mark(obj: T) -> T:
        obj.__torch_differs__ = reason  # type: ignore[attr-defined]
        return obj

    return mark


def unsupported(torch_name: str, instead: str) -> Callable[..., Any]:
    """A callable standing for PyTorch's ``torch_name`` that raises, saying ``instead``.

    Parameters
    ----------
    torch_name : str
        The PyTorch spelling, e.g. ``"Tensor.cuda"``.
    instead : str
        What to write in pylucid, or why there is no counterpart.
    """

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torch.{torch_name} is not supported by pylucid: {instead}")

    refuse.__name__ = refuse.__qualname__ = torch_name.rsplit(".", 1)[-1]
    refuse.__doc__ = f"Not supported: raises NotImplementedError. {instead}"
    refuse.__torch_unsupported__ = instead  # type: ignore[attr-defined]
    return refuse


def torch_differs(obj: Any) -> str | None:
    """The recorded difference of ``obj`` from PyTorch, or None."""
    return getattr(obj, "__torch_differs__", None)


def torch_unsupported(obj: Any) -> str | None:
    """What to write instead of ``obj`` where it is an :func:`unsupported` stand-in."""
    return getattr(obj, "__torch_unsupported__", None)


def refuse_attributes(namespace: dict[str, Any], refused: dict[str, str]) -> None:
    """Give the module whose globals are ``namespace`` a ``__getattr__`` that answers each
    name of ``refused`` (PyTorch names it lacks) with an AttributeError carrying its advice;
    the census reads them from ``__torch_refused__``."""
    module = namespace["__name__"]
    namespace["__torch_refused__"] = dict(refused)

    def __getattr__(name: str) -> Any:  # noqa: N807  (the module hook's name)
        advice = refused.get(name)
        if advice is not None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}: {advice}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    namespace["__getattr__"] = __getattr__


def refused_attributes(module: Any) -> dict[str, str]:
    """The names ``module`` refuses with advice (:func:`refuse_attributes`), and the advice."""
    return dict(getattr(module, "__torch_refused__", {}))
