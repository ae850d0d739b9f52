"""Grad mode: whether ops record backward nodes. Thread-local, on by default."""

from __future__ import annotations

import threading
from contextlib import ContextDecorator

__all__ = ["is_grad_enabled", "set_grad_enabled", "no_grad", "enable_grad"]

_local = threading.local()


def is_grad_enabled() -> bool:
    """Whether ops run now record nodes for backward (per thread)."""
    return getattr(_local, "enabled", True)


def _set(mode: bool) -> None:
    _local.enabled = mode


class _GradMode(ContextDecorator):
    """Sets grad mode to ``mode`` inside a ``with`` block or a decorated function."""

    mode: bool

    def __init__(self) -> None:
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(is_grad_enabled())
        _set(self.mode)

    def __exit__(self, *exc_info: object) -> None:
        _set(self._previous.pop())


class no_grad(_GradMode):  # noqa: N801  (named like PyTorch's)
    """Context manager and decorator: ops inside record no graph (saves memory and time)."""

    mode = False


class enable_grad(_GradMode):  # noqa: N801
    """Context manager and decorator: turns recording back on, e.g. inside ``no_grad``."""

    mode = True


class set_grad_enabled(_GradMode):  # noqa: N801
    """Set grad mode now; used as a context manager, restore the previous mode on exit.

    Parameters
    ----------
    mode : bool
        True records nodes, False does not.
    """

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self.mode = bool(mode)
        self._previous.append(is_grad_enabled())
        _set(self.mode)

    def __enter__(self) -> None:
        """The mode was already set by the constructor."""
