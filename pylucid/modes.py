"""The per-thread modes every op reads: grad mode, inference mode, anomaly detection and the
autocast dtype.

They change rarely (a ``with`` block) and every op reads them, so each thread holds them as
one interned :class:`Modes` object, ``state.modes``: :meth:`Op.apply
<pylucid.ops.base.Op.apply>` reads that one attribute, and the dispatch plan it keys already
knows whether a node may be recorded and whether the result is an inference tensor. (A read
of a ``threading.local`` attribute costs about as much as a small function call; an op made
four of them.)

:mod:`pylucid.graph.grad_mode`, :mod:`pylucid.graph.anomaly` and :mod:`pylucid.amp.autocast`
own the public switches and change the modes only through the setters here.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = [
    "Modes",
    "pop_autocast",
    "push_autocast",
    "set_anomaly_enabled",
    "set_grad_enabled",
    "set_inference",
    "state",
]


class Modes:
    """One combination of the modes; one instance per combination (compare with ``is``).

    Attributes
    ----------
    grad_enabled : bool
        Whether ops record nodes for backward.
    inference : bool
        Whether tensors made now are inference tensors (inside ``inference_mode``).
    anomaly : bool
        Whether recorded nodes keep where their op was called (``detect_anomaly``).
    autocast : DType or None
        The dtype of the innermost enabled autocast block, or None.
    """

    __slots__ = ("grad_enabled", "inference", "anomaly", "autocast")

    def __init__(self, grad_enabled: bool, inference: bool, anomaly: bool, autocast: Any) -> None:
        self.grad_enabled, self.inference = grad_enabled, inference
        self.anomaly, self.autocast = anomaly, autocast

    def __repr__(self) -> str:
        return (
            f"Modes(grad_enabled={self.grad_enabled}, inference={self.inference}, "
            f"anomaly={self.anomaly}, autocast={self.autocast})"
        )


_INTERNED: dict[tuple, Modes] = {}


def _interned(grad_enabled: bool, inference: bool, anomaly: bool, autocast: Any) -> Modes:
    key = (grad_enabled, inference, anomaly, autocast)
    modes = _INTERNED.get(key)
    if modes is None:
        modes = _INTERNED[key] = Modes(*key)
    return modes


class _State(threading.local):
    """Each thread's :class:`Modes` (the default set per thread, so reads are plain
    attributes) and the autocast blocks it is in."""

    def __init__(self) -> None:
        self.modes = _interned(True, False, False, None)
        #: Autocast dtypes of the enclosing blocks, innermost last (None: ``enabled=False``).
        self.autocast_stack: list[Any] = []


#: This thread's modes: read ``state.modes`` freely; change them with the setters.
state = _State()


#: The fields' positions in ``Modes.__slots__``, for :func:`_swap`.
_GRAD, _INFERENCE, _ANOMALY, _AUTOCAST = range(4)


def _swap(field: int, value: Any) -> Any:
    """Make ``state.modes`` the modes whose ``field`` (its position in ``Modes.__slots__``)
    is ``value``; return the field's old value."""
    current = state.modes
    fields = [current.grad_enabled, current.inference, current.anomaly, current.autocast]
    previous, fields[field] = fields[field], value
    state.modes = _interned(*fields)
    return previous


def set_grad_enabled(enabled: bool) -> bool:
    """Set grad mode; return the previous one."""
    return _swap(_GRAD, bool(enabled))


def set_inference(inference: bool) -> bool:
    """Set inference mode (the tensors it makes; grad mode is set apart); return the previous."""
    return _swap(_INFERENCE, bool(inference))


def set_anomaly_enabled(enabled: bool) -> bool:
    """Set anomaly detection; return the previous setting."""
    return _swap(_ANOMALY, bool(enabled))


def push_autocast(dtype: Any) -> None:
    """Enter an autocast block of ``dtype`` (None: a block with ``enabled=False``)."""
    state.autocast_stack.append(dtype)
    _swap(_AUTOCAST, dtype)


def pop_autocast() -> None:
    """Leave the innermost autocast block."""
    stack = state.autocast_stack
    stack.pop()
    _swap(_AUTOCAST, stack[-1] if stack else None)
