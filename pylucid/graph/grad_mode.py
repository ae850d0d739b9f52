"""Grad mode: whether ops record backward nodes. Thread-local, on by default (kept in
:mod:`pylucid.modes`, which ops read)."""

from __future__ import annotations

from contextlib import ContextDecorator
from typing import Any

from pylucid import modes

__all__ = [
    "enable_grad",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "set_grad_enabled",
]


def is_grad_enabled() -> bool:
    """Whether ops run now record nodes for backward (per thread)."""
    return modes.state.modes.grad_enabled


def swap_grad_mode(mode: bool) -> bool:
    """Set grad mode to ``mode``; return the previous mode."""
    return modes.set_grad_enabled(mode)


class _GradMode(ContextDecorator):
    """Sets grad mode to ``mode`` inside a ``with`` block or a decorated function; as a
    decorator with or without parentheses (``@no_grad()``, ``@no_grad``), as PyTorch's."""

    mode: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):  # @no_grad, no parentheses
            return cls()(args[0])
        return super().__new__(cls)

    def __init__(self) -> None:
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(modes.set_grad_enabled(self.mode))

    def __exit__(self, *exc_info: object) -> None:
        modes.set_grad_enabled(self._previous.pop())


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
        self._previous.append(modes.set_grad_enabled(self.mode))

    def __enter__(self) -> None:
        """The mode was already set by the constructor."""


def is_inference_mode_enabled() -> bool:
    """Whether this thread is inside :class:`inference_mode`."""
    return modes.state.modes.inference


class inference_mode(_GradMode):  # noqa: N801  (named like torch.inference_mode)
    """Like :class:`no_grad`, for code that will never need gradients: tensors created inside
    are inference tensors, which no recorded op may later save for backward (an error says
    so) and no in-place op outside the block may change. ``inference_mode(False)`` changes
    nothing, as PyTorch's.

    Parameters
    ----------
    mode : bool
        Whether to enter inference mode.
    """

    def __init__(self, mode: bool = True) -> None:
        super().__init__()
        self.enabled = bool(mode)
        self._previous_inference: list[bool] = []

    @property
    def mode(self) -> bool:  # type: ignore[override]
        """The grad mode inside: off in inference mode, unchanged otherwise."""
        return False if self.enabled else is_grad_enabled()

    def __enter__(self) -> None:
        super().__enter__()
        self._previous_inference.append(modes.set_inference(self.enabled))

    def __exit__(self, *exc_info: object) -> None:
        modes.set_inference(self._previous_inference.pop())
        super().__exit__(*exc_info)
