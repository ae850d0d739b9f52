"""Anomaly detection: a NaN or inf produced by a backward raises, naming the node and where
its forward op was called."""

from __future__ import annotations

import functools
import traceback
from contextlib import ContextDecorator
from pathlib import Path
from typing import Any

from pylucid import modes

__all__ = ["AnomalyError", "creation_site", "detect_anomaly", "in_package", "is_anomaly_enabled"]


class AnomalyError(RuntimeError):
    """A backward produced a NaN or inf while anomaly detection was on."""


def is_anomaly_enabled() -> bool:
    """Whether :func:`detect_anomaly` is active in this thread."""
    return modes.state.modes.anomaly


class detect_anomaly(ContextDecorator):  # noqa: N801  (named like torch.autograd's)
    """Context manager and decorator: record where each op was called, and raise
    :class:`AnomalyError` when a backward node produces a NaN or inf gradient. Slow: use it
    to find a bug, not in training."""

    def __init__(self) -> None:
        self._previous: list[bool] = []

    def __enter__(self) -> detect_anomaly:
        self._previous.append(modes.set_anomaly_enabled(True))
        return self

    def __exit__(self, *exc_info: object) -> None:
        modes.set_anomaly_enabled(self._previous.pop())


class set_detect_anomaly(ContextDecorator):  # noqa: N801  (named like torch.autograd's)
    """Turn anomaly detection on or off now (``torch.autograd.set_detect_anomaly(True)``);
    used as a context manager, restore the previous setting on exit.

    Parameters
    ----------
    mode : bool
        Whether to detect anomalies (see :class:`detect_anomaly`).
    check_nan : bool
        Accepted for PyTorch's signature: detection always checks for NaN and inf.
    """

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self._previous = modes.set_anomaly_enabled(bool(mode))

    def __enter__(self) -> set_detect_anomaly:
        return self

    def __exit__(self, *exc_info: object) -> None:
        modes.set_anomaly_enabled(self._previous)


#: The directory of the pylucid package: its frames are left out of creation sites (a user's
#: own folder may be called "pylucid" too, so the path is compared, not a substring).
_PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=4096)
def in_package(filename: str) -> bool:
    """Whether ``filename`` is a file of the pylucid package (not the user's code)."""
    return Path(filename).resolve().is_relative_to(_PACKAGE)


def creation_site() -> str | None:
    """The caller's stack outside the pylucid package, as text, when anomaly detection is
    on."""
    if not is_anomaly_enabled():
        return None
    frames = [f for f in traceback.extract_stack()[:-1] if not in_package(f.filename)]
    return "".join(traceback.format_list(frames[-3:]))


def check_gradients(node: Any, gradients: tuple[Any, ...]) -> None:
    """Raise :class:`AnomalyError` if a gradient is not finite (call it in anomaly mode)."""
    for index, g in enumerate(gradients):
        if g is not None and not node.all_finite(g):
            site = getattr(node, "creation_site", None) or "(not recorded)\n"
            raise AnomalyError(
                f"{node.name} returned a gradient with nan or inf for its input {index}; "
                f"its forward op was called at:\n{site}"
            )
