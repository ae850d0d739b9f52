"""The backend registry and backend selection.

Selection order for a new tensor: explicit ``device=`` / ``.to()`` > the innermost
:func:`use` context (thread-local) > :func:`set_default` > the ``PYLUCID_BACKEND``
environment variable > ``numba``. Ops run on their inputs' backend.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points

from pylucid.backends.base import Backend
from pylucid.device import UNAVAILABLE_TYPES

__all__ = [
    "BackendUnavailableError",
    "register",
    "register_lazy",
    "get",
    "names",
    "available",
    "info",
    "use",
    "set_default",
    "current",
    "resolve",
]

ENV_VAR = "PYLUCID_BACKEND"
ENTRY_POINT_GROUP = "pylucid.backends"
_BUILTIN_DEFAULT = "numba"

_BACKENDS: dict[str, Backend] = {}
#: Backends registered by :func:`register_lazy`, not made yet: name -> its maker.
_LAZY: dict[str, Callable[[], Backend]] = {}
_DEVICE_DEFAULTS: dict[str, str] = {}
_default_name: str | None = None
_local = threading.local()
_entry_points_loaded = False


class BackendUnavailableError(RuntimeError):
    """A backend was asked for that cannot run here; the message says how to install it."""


def register(backend: Backend, *, default_for_device: bool = False) -> None:
    """Add ``backend`` under ``backend.name``.

    Parameters
    ----------
    backend : Backend
        An object implementing :class:`~pylucid.backends.base.Backend`.
    default_for_device : bool
        Make it the backend that ``device=backend.device`` selects.

    Raises
    ------
    ValueError
        If another backend already has that name.
    """
    existing = _registered(backend.name)
    if existing is not None and existing is not backend:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _BACKENDS[backend.name] = backend
    if default_for_device or backend.device not in _DEVICE_DEFAULTS:
        _DEVICE_DEFAULTS[backend.device] = backend.name


def register_lazy(name: str, device: str, target: str, *, default_for_device: bool = False) -> None:
    """Register the backend ``name`` of ``device`` without importing it: ``target``
    (``"package.module:Class"``, a :class:`Backend` class or instance) is imported, and the
    backend made, when the backend is first looked up (``get``, ``resolve``, ``available``,
    ``info``). ``import pylucid`` so leaves the MLX backend's modules out until ``"gpu"`` or
    ``"mlx"`` is asked for.

    Parameters
    ----------
    name, device : str
        What the backend's ``name`` and ``device`` will be.
    target : str
        Where the backend is: ``"module:attribute"``.
    default_for_device : bool
        As for :func:`register`.
    """

    @functools.cache
    def make() -> Backend:
        where, _, attribute = target.partition(":")
        backend = getattr(importlib.import_module(where), attribute)
        return backend() if isinstance(backend, type) else backend

    _LAZY[name] = make
    if default_for_device or device not in _DEVICE_DEFAULTS:
        _DEVICE_DEFAULTS[device] = name


def _registered(name: str) -> Backend | None:
    """The backend registered as ``name`` (made now if it was registered lazily), or None."""
    backend = _BACKENDS.get(name)
    if backend is None and name in _LAZY:
        backend = _BACKENDS[name] = _LAZY[name]()
    return backend


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        backend = entry.load()
        register(backend() if isinstance(backend, type) else backend)


def names() -> list[str]:
    """Names of all registered backends, available or not."""
    _load_entry_points()
    return sorted(_BACKENDS.keys() | _LAZY.keys())


def available() -> list[str]:
    """Names of the registered backends that can run here."""
    return [n for n in names() if _registered(n).is_available()]


def get(name: str) -> Backend:
    """Return the backend registered as ``name``.

    Raises
    ------
    ValueError
        If no backend has that name (the message lists the registered ones).
    BackendUnavailableError
        If it is registered but cannot run here (the message says how to install it).
    """
    backend = _registered(name)
    if backend is None and not _entry_points_loaded:  # a plugin's, perhaps
        _load_entry_points()
        backend = _registered(name)
    if backend is None:
        raise ValueError(f"no backend named {name!r}; registered backends: {', '.join(names())}")
    if not backend.is_available():
        raise BackendUnavailableError(backend.unavailable_reason())
    return backend


def _known(device_or_name: str) -> bool:
    """Whether :func:`resolve` finds ``device_or_name`` among the backends registered now."""
    if device_or_name in _DEVICE_DEFAULTS or device_or_name in _BACKENDS:
        return True
    if device_or_name in _LAZY:
        return True
    kind, _, index = str(device_or_name).partition(":")
    return index in ("0", "") and kind in _DEVICE_DEFAULTS


def resolve(device_or_name: str) -> Backend:
    """The backend for a device (``"cpu"``, ``"gpu"``, a :class:`pylucid.device`, with an
    index of 0 or none) or a backend name (``"mlx"``).

    Raises
    ------
    RuntimeError
        For a device of PyTorch's that pylucid does not have (``"cuda"``, ``"mps"``): the
        message says to use ``"gpu"``.
    ValueError
        For any other unknown name.
    """
    # The entry points (a plugin's backends: ~7 ms to list) are read only for a name not
    # known without them: a plugin cannot take over a device or a name already registered.
    if not _known(device_or_name):
        _load_entry_points()
    if device_or_name in _DEVICE_DEFAULTS:
        return get(_DEVICE_DEFAULTS[device_or_name])
    if device_or_name in _BACKENDS or device_or_name in _LAZY:
        return get(device_or_name)
    kind, _, index = str(device_or_name).partition(":")
    if kind in UNAVAILABLE_TYPES:
        raise RuntimeError(
            f"device {str(device_or_name)!r}: pylucid has no {kind} device "
            f"(pylucid.cuda.is_available() is False); its GPU device is 'gpu' (MLX): use "
            f"device='gpu' or .to('gpu'), or 'cpu'"
        )
    if index in ("0", "") and kind in _DEVICE_DEFAULTS:
        return get(_DEVICE_DEFAULTS[kind])
    raise ValueError(
        f"unknown device or backend {device_or_name!r}; devices: "
        f"{', '.join(sorted(_DEVICE_DEFAULTS))}; backends: {', '.join(names())}"
    )


def info() -> dict[str, dict[str, str]]:
    """For every registered backend: availability, device and what it runs on."""
    report = {}
    for name in names():
        backend = _registered(name)
        if backend.is_available():
            report[name] = {"available": "yes", "device": backend.device, **backend.info()}
        else:
            report[name] = {"available": "no", "reason": backend.unavailable_reason()}
    return report


def _use_stack() -> list[Backend]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@contextmanager
def use(device_or_name: str) -> Iterator[Backend]:
    """Within the block, new tensors are created on this backend (thread-local, nestable).

    Examples
    --------
    >>> with pl.backends.use("mlx"):
    ...     x = pl.ones(3)          # on "gpu"
    """
    stack = _use_stack()
    stack.append(resolve(device_or_name))
    try:
        yield stack[-1]
    finally:
        stack.pop()


def set_default(device_or_name: str | None) -> None:
    """Set the process-wide default backend (``None`` restores environment/built-in)."""
    global _default_name
    _default_name = None if device_or_name is None else resolve(device_or_name).name


def current() -> Backend:
    """The backend a new tensor without ``device=`` is created on."""
    stack = _use_stack()
    if stack:
        return stack[-1]
    if _default_name is not None:
        return get(_default_name)
    configured = os.environ.get(ENV_VAR)
    if not configured:
        return get(_BUILTIN_DEFAULT)
    try:
        return resolve(configured)
    except ValueError as exc:
        raise ValueError(f"{ENV_VAR}={configured!r}: {exc}") from None
