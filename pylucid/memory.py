"""A caching allocator for large host buffers: the outputs of pylucid's CPU kernels.

A fresh large NumPy array costs more than most kernels that fill it: its pages come from the
operating system zeroed, one page fault at a time, on first touch. Measured on 2 cores: a
float32 ``log2`` of 1e7 elements runs in 4.6 ms into an existing array and 12.4 ms into a new
one, and NumPy's own ``np.log2`` spends 5.7 of its 9.8 ms the same way. A loop that runs the
same shapes again and again (training) allocates and frees the same sizes each step, so
pylucid keeps the large buffers it hands out and gives one back out once nothing uses it any
more - the idea of PyTorch's CUDA caching allocator, for host memory.

A buffer is in use while any array made from it is alive: every such array holds a
reference to it (NumPy's ``base``), so a buffer whose only reference is the pool's is idle
and may be handed out again. Nothing is ever reused while a view, a ``Tensor``, a
``memoryview`` or a ``torch.from_numpy`` tensor of it is alive.

Only buffers of at least :data:`MIN_BYTES` are pooled (below that the C allocator's free
lists already reuse memory), in size classes eight to a doubling (at most 12.5% unused).
The idle buffers kept are capped at :func:`limit` bytes (default :data:`DEFAULT_LIMIT`,
``PYLUCID_CACHE_LIMIT`` in the environment, :func:`set_limit` at run time); :func:`empty_cache`
returns them all to the system.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_LIMIT",
    "MIN_BYTES",
    "CacheStats",
    "empty",
    "empty_cache",
    "is_sole_view",
    "limit",
    "set_limit",
    "stats",
]

#: Smallest buffer the pool keeps (1 MiB).
MIN_BYTES = 1 << 20
#: Default cap on the bytes of idle buffers kept (1 GiB).
DEFAULT_LIMIT = 1 << 30

#: ``sys.getrefcount(bucket[i])`` of a buffer nothing else refers to: the bucket's reference
#: and the call's argument.
_IDLE_REFCOUNT = 2


@dataclass(frozen=True)
class CacheStats:
    """What the pool holds and how often it was of use (:func:`stats`)."""

    #: Bytes of pooled buffers some array still uses.
    in_use_bytes: int
    #: Bytes of idle pooled buffers, ready to be handed out again.
    idle_bytes: int
    #: Allocations served by an idle buffer.
    hits: int
    #: Allocations that needed a new buffer.
    misses: int


def _size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to one of eight sizes per power of two."""
    step = 1 << max(nbytes.bit_length() - 4, 0)
    return -(-nbytes // step) * step


def _idle(bucket: list[np.ndarray], i: int) -> bool:
    """Whether ``bucket[i]`` is referred to by nothing but its bucket."""
    return sys.getrefcount(bucket[i]) == _IDLE_REFCOUNT


class _Pool:
    """The buffers handed out, by size class; thread-safe."""

    def __init__(self, limit: int) -> None:
        self.lock = threading.Lock()
        #: size class -> flat uint8 buffers of that size, oldest first.
        self.buckets: dict[int, list[np.ndarray]] = {}
        #: ids of the pooled buffers (alive as long as they are pooled).
        self.ids: set[int] = set()
        self.limit = limit
        self.hits = 0
        self.misses = 0

    def is_sole_view(self, array: np.ndarray) -> bool:
        """Whether ``array`` is a view of a pooled buffer that no other array refers to."""
        base = array.base
        if base is None or id(base) not in self.ids:
            return False
        # References to the buffer: its bucket, array.base, the name above, the argument.
        return sys.getrefcount(base) == _IDLE_REFCOUNT + 2

    def take(self, nbytes: int) -> np.ndarray:
        """An idle buffer of ``nbytes``' size class, or a new one."""
        size = _size_class(nbytes)
        with self.lock:
            bucket = self.buckets.get(size, [])
            for i in range(len(bucket)):
                if _idle(bucket, i):
                    self.hits += 1
                    return bucket[i]
            self.misses += 1
            self.trim(self.limit - size)
            buffer = np.empty(size, dtype=np.uint8)
            self.buckets.setdefault(size, []).append(buffer)
            self.ids.add(id(buffer))
            return buffer

    def trim(self, keep: int) -> None:
        """Drop idle buffers, largest first, until at most ``keep`` idle bytes are left.

        Call with the lock held.
        """
        idle = self.idle_bytes()
        for size in sorted(self.buckets, reverse=True):
            bucket = self.buckets[size]
            i = 0
            while i < len(bucket) and idle > keep:
                if _idle(bucket, i):
                    self.ids.discard(id(bucket[i]))
                    del bucket[i]
                    idle -= size
                else:
                    i += 1
            if not bucket:
                del self.buckets[size]

    def idle_bytes(self) -> int:
        """Bytes of idle buffers; call with the lock held."""
        return sum(
            size
            for size, bucket in self.buckets.items()
            for i in range(len(bucket))
            if _idle(bucket, i)
        )

    def total_bytes(self) -> int:
        """Bytes of all pooled buffers; call with the lock held."""
        return sum(size * len(bucket) for size, bucket in self.buckets.items())


def _limit_from_environment() -> int:
    value = os.environ.get("PYLUCID_CACHE_LIMIT")
    if value is None:
        return DEFAULT_LIMIT
    try:
        return _checked_limit(int(float(value)))
    except ValueError:
        raise ValueError(
            f"PYLUCID_CACHE_LIMIT={value!r}: expected a number of bytes >= 0, e.g. 1e9"
        ) from None


def _checked_limit(nbytes: int) -> int:
    if nbytes < 0:
        raise ValueError(f"the cache limit is a number of bytes >= 0, not {nbytes}")
    return nbytes


_POOL = _Pool(_limit_from_environment())


def empty(shape: int | tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, from a pooled buffer if it is large.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the array.
    dtype : numpy.dtype
        Its dtype.

    Returns
    -------
    numpy.ndarray
        Writeable, C-contiguous and aligned as ``np.empty`` makes it; arrays of at least
        :data:`MIN_BYTES` are views of a pooled buffer (``base`` is the buffer).
    """
    if type(shape) is int:
        shape = (shape,)
    count = math.prod(shape)
    if count < _SMALL_COUNT:  # below MIN_BYTES whatever the dtype: the common, cheap case
        return np.empty(shape, dtype)
    itemsize = _ITEMSIZES.get(dtype)
    if itemsize is None:  # a dtype seen for the first time, or a scalar type
        itemsize = _ITEMSIZES[dtype] = np.dtype(dtype).itemsize
    nbytes = count * itemsize
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    return _POOL.take(nbytes)[:nbytes].view(dtype).reshape(shape)


#: Bytes per element by dtype (or scalar type): :func:`empty` runs on every kernel call.
_ITEMSIZES: dict[object, int] = {}
#: Arrays of fewer elements are below :data:`MIN_BYTES` in every dtype (16 bytes at most):
#: :func:`empty` gives them ``np.empty``'s.
_SMALL_COUNT = MIN_BYTES // 16


def is_sole_view(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a pooled buffer that no other array refers to, so that
    whoever holds the only reference to ``array`` owns its memory."""
    return _POOL.is_sole_view(array)


def stats() -> CacheStats:
    """Bytes in use and idle in the pool, and its hits and misses so far."""
    with _POOL.lock:
        idle = _POOL.idle_bytes()
        return CacheStats(_POOL.total_bytes() - idle, idle, _POOL.hits, _POOL.misses)


def empty_cache() -> None:
    """Return every idle buffer to the system (buffers in use stay until released)."""
    with _POOL.lock:
        _POOL.trim(0)


def limit() -> int:
    """The cap on the bytes of idle buffers the pool keeps."""
    return _POOL.limit


def set_limit(nbytes: int) -> None:
    """Cap the bytes of idle buffers the pool keeps (0 turns reuse off); trims at once.

    Parameters
    ----------
    nbytes : int
        The new cap, in bytes (>= 0).
    """
    with _POOL.lock:
        _POOL.limit = _checked_limit(int(nbytes))
        _POOL.trim(_POOL.limit)
