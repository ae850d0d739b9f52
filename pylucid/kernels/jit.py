"""The ``njit`` of every pylucid kernel: Numba's, with an on-disk cache that cannot break pylucid.

With ``cache=True`` Numba keeps compiled kernels in a cache directory (``__pycache__`` next to
the source, else a user-wide directory; ``NUMBA_CACHE_DIR`` overrides both), and two things
about that directory would otherwise make pylucid unusable:

- a corrupt cache file (an index ``.nbi`` or a data file ``.nbc`` that is truncated, empty or
  overwritten) makes every process fail on the first call of its kernel, with an ``EOFError``
  or ``pickle.UnpicklingError`` from inside Numba. Here the file is removed, the kernel
  recompiled (and saved again), and one :class:`NumbaCacheWarning` per process names the
  cache directory; a cache file that cannot be written is skipped the same way;
- no writable cache directory (a read-only install without a writable ``HOME``) makes Numba
  raise ``RuntimeError: cannot cache function ...: no locator available`` when the kernel is
  decorated, so ``import pylucid`` fails. Here the kernels run without a cache (compiled in
  every process), with one :class:`NumbaCacheWarning` per process naming ``NUMBA_CACHE_DIR``.

The hook (Numba documents none for this): ``cache=True`` makes Numba call
``Dispatcher.enable_caching``, which only sets the dispatcher's ``_cache`` to
``FunctionCache(py_func)``; the dispatcher then uses that object solely through the small
``_Cache`` interface that Numba's own caches implement (``load_overload``,
``save_overload``, ``flush``, ``cache_path``). :func:`njit` builds the dispatcher without
``cache`` and sets ``_cache`` itself, to a stand-in that makes the cache when the dispatcher
first compiles or loads (making one probes the cache directory with a file, per function: a
cost ``import pylucid`` paid for every kernel, run or not), a subclass of ``FunctionCache`` whose
``load_overload`` turns any failure into a miss, whose ``save_overload`` skips a save that
raises ``OSError``, and whose index/data file (its ``_cache_file``) is a subclass of
``IndexDataCacheFile`` that removes a file it cannot unpickle and reports a miss; removing
is safe, Numba being documented to tolerate lost cache files. Nothing of Numba is patched: other
libraries in the process keep Numba's own behaviour. Checked against Numba 0.68.

Numba stamps a cache entry with its function's own file only, so a kernel whose inlined
helpers (``simd_math``'s polynomials, ``half``'s conversions) changed would load stale code
after an upgrade. Here the stamp also carries :func:`kernel_sources_digest`, a digest of every
source file of :mod:`pylucid.kernels`: a change to any of them recompiles every kernel.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
from numba.core import sigutils, typeinfer
from numba.core.caching import FunctionCache, IndexDataCacheFile, NullCache
from numba.core.dispatcher import Dispatcher

__all__ = ["NumbaCacheWarning", "entry_point", "kernel_sources_digest", "njit"]


class NumbaCacheWarning(RuntimeWarning):
    """Numba's kernel cache is unusable (corrupt, unwritable or missing): pylucid compiles
    the kernels again instead; emitted once per process for each kind of problem."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(kind: str, message: str) -> None:
    with _warned_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    warnings.warn(message, NumbaCacheWarning, stacklevel=3)


def _warn_corrupt(cache_dir: str, what: str, exc: BaseException) -> None:
    _warn_once(
        "corrupt",
        f"pylucid: ignoring a corrupt Numba cache file ({what}: {type(exc).__name__}: {exc}) "
        f"in the cache directory {cache_dir}; its kernels are recompiled and the file "
        "rewritten",
    )


def _warn_unusable(cache_dir: str, exc: OSError) -> None:
    _warn_once(
        "unusable",
        f"pylucid: cannot use the Numba cache directory {cache_dir} ({type(exc).__name__}: "
        f"{exc}); kernels not cached yet are compiled in every process. Set NUMBA_CACHE_DIR "
        "to a writable directory to cache them.",
    )


class _RepairingCacheFile(IndexDataCacheFile):
    """Numba's index and data files, where a file that cannot be read back is a cache miss:
    a corrupt one is removed (the next save writes a good one)."""

    def _load_index(self) -> dict:
        try:
            overloads = super()._load_index()  # a missing index is already {}
        except OSError as exc:  # not a file's content: the directory is unusable
            _warn_unusable(self._cache_path, exc)
            return {}
        except Exception as exc:  # any failure to unpickle the file
            self._discard(self._index_path, exc)
            return {}
        if not isinstance(overloads, dict):  # a stray pickle that happens to load
            self._discard(self._index_path, TypeError(f"a {type(overloads).__name__} index"))
            return {}
        return overloads

    def _load_data(self, name: str) -> Any:
        try:
            return super()._load_data(name)
        except OSError:
            raise  # Numba's load() already treats an unreadable (e.g. deleted) data file as a miss
        except Exception as exc:
            self._discard(self._data_path(name), exc)
            return None

    def _discard(self, path: str, exc: BaseException) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass  # already gone, or not ours to remove: the next save replaces it anyway
        _warn_corrupt(self._cache_path, path, exc)


@functools.cache
def kernel_sources_digest() -> str:
    """A digest of every ``.py`` file of :mod:`pylucid.kernels`: part of each cached kernel's
    stamp, since a kernel inlines helpers from the package's other files."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class _RepairingFunctionCache(FunctionCache):
    """Numba's ``FunctionCache`` on :class:`_RepairingCacheFile`; loading an entry that does
    not rebuild (an intact pickle of a broken payload) and saving one that cannot be written
    fall back to compiling, with a warning, instead of failing the call."""

    def __init__(self, py_func: Callable) -> None:
        super().__init__(py_func)
        self._cache_file = _RepairingCacheFile(
            cache_path=self._cache_path,
            filename_base=self._impl.filename_base,
            source_stamp=(self._impl.locator.get_source_stamp(), kernel_sources_digest()),
        )

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:  # the save after recompiling overwrites the entry
            _warn_corrupt(self._cache_path, f"the entry of {self._name} for {sig}", exc)
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            super().save_overload(sig, data)
        except OSError as exc:  # a full disk, a directory removed or made read-only since
            _warn_unusable(self._cache_path, exc)


def _make_cache(py_func: Callable) -> Any:
    """A :class:`_RepairingFunctionCache` of ``py_func``; Numba's ``NullCache`` (and a
    warning) where Numba finds no writable cache directory."""
    try:
        return _RepairingFunctionCache(py_func)
    except (RuntimeError, OSError) as exc:  # "no locator available for file ..."
        _warn_once(
            "no-locator",
            f"pylucid: Numba cannot cache the compiled kernels ({exc}); they are compiled "
            "again in every process. Set NUMBA_CACHE_DIR to a writable directory to cache "
            "them.",
        )
        return NullCache()


class _DeferredCache:
    """A dispatcher's cache, made (:func:`_make_cache`) when the dispatcher first compiles or
    loads an overload: making one finds its directory and probes it with a file that Numba
    creates and removes, per function - a cost that ``import pylucid`` would pay for every
    kernel, run or not. The ``_Cache`` interface that ``Dispatcher`` calls, forwarded."""

    __slots__ = ("_made", "_py_func")

    def __init__(self, py_func: Callable) -> None:
        self._py_func = py_func
        self._made: Any = None

    def _cache(self) -> Any:
        if self._made is None:
            self._made = _make_cache(self._py_func)
        return self._made

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        return self._cache().load_overload(sig, target_context)

    def save_overload(self, sig: Any, data: Any) -> None:
        self._cache().save_overload(sig, data)

    def flush(self) -> None:
        self._cache().flush()

    @property
    def cache_path(self) -> str:
        return self._cache().cache_path

    def __getattr__(self, name: str) -> Any:  # _cache_file, _impl, ... (tests, inspection)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._cache(), name)


def _install_cache(dispatcher: Dispatcher) -> None:
    """What ``Dispatcher.enable_caching`` does, with :class:`_RepairingFunctionCache` made on
    first use (:class:`_DeferredCache`); without any cache (and a warning) where Numba finds
    no writable cache directory."""
    dispatcher._cache = _DeferredCache(dispatcher.py_func)


def _cached(func: Callable, sigs: list | None, options: dict[str, Any]) -> Callable:
    dispatcher = numba.njit(**options)(func)
    if not isinstance(dispatcher, Dispatcher):  # NUMBA_DISABLE_JIT: the Python function
        return dispatcher
    _install_cache(dispatcher)
    if sigs is not None:  # eager compilation, as numba.jit does it (after the cache is set)
        with typeinfer.register_dispatcher(dispatcher):
            for sig in sigs:
                dispatcher.compile(sig)
        dispatcher.disable_compile()
    return dispatcher


def njit(signature_or_function: Any = None, **options: Any) -> Any:
    """``numba.njit``, whose ``cache=True`` survives a corrupt or unwritable cache.

    Parameters
    ----------
    signature_or_function : function, signature, list of signatures or None
        As for ``numba.njit``: the function to compile (``@njit``), or the signatures to
        compile eagerly (``@njit("f8(f8)", ...)``), or None (``@njit(...)``).
    **options
        ``numba.njit``'s options. With ``cache=True`` the compiled code is cached on disk as
        by Numba, except that a cache file that cannot be read is removed and recompiled,
        and without a writable cache directory the function is compiled in every process;
        each case warns once per process (:class:`NumbaCacheWarning`).

    Returns
    -------
    Dispatcher or decorator
        What ``numba.njit`` returns for the same arguments.
    """
    if not options.pop("cache", False):
        return numba.njit(signature_or_function, **options)
    if signature_or_function is None:
        sigs = None
    elif isinstance(signature_or_function, list):
        sigs = signature_or_function
    elif sigutils.is_signature(signature_or_function):
        sigs = [signature_or_function]
    else:
        return _cached(signature_or_function, None, options)
    return lambda func: _cached(func, sigs, options)


def entry_point(dispatcher: Dispatcher, args: tuple) -> Callable[..., Any]:
    """The entry point of ``dispatcher``'s overload for the types of ``args``, compiled (or
    loaded from the cache on disk) now.

    Calling it skips what a dispatcher does at every call - resolving the arguments' Numba
    types, ~0.3 us for three -, so callers whose argument types are fixed (a bound kernel of
    a dispatch plan, a compiled step's replay) call it instead; it accepts only arguments of
    those types."""
    signature = tuple(numba.typeof(a) for a in args)
    dispatcher.compile(signature)
    return dispatcher.overloads[signature].entry_point
