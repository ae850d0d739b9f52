"""Marks on PyTorch names whose pylucid counterpart differs or is refused.

A PyTorch name is an alias or a thin adapter declared next to the thing it names; where its
meaning cannot be matched, it says so in one of two ways that the compatibility census
(``docs/torch-compat.md``, ``python -m pylucid docs``) reads from the code:

- :func:`differs` marks a function, method or class that exists but behaves differently
  from PyTorch's in a stated way (``torch.empty`` gives zeros, not garbage);
- :func:`unsupported` makes a stand-in that raises :class:`NotImplementedError` naming the
  PyTorch name and what to write instead, so a program stops where it would otherwise get
  a silently different answer.

>>> import pylucid as pl
>>> pl.Tensor.view.__torch_differs__
'view(dtype) reinterpreting the bytes is not supported: it raises'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["differs", "unsupported", "torch_differs", "torch_unsupported"]

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
