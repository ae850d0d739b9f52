"""``pylucid.cuda``: what PyTorch programs ask of ``torch.cuda``, answered for a library
without CUDA.

``is_available()`` is False and ``device_count()`` 0, so a script's usual
``device = "cuda" if torch.cuda.is_available() else "cpu"`` runs on the CPU. pylucid's GPU is
the ``"gpu"`` device (MLX): ask for it by name. Seeding, synchronising and emptying caches
act on what pylucid has (the default generator is seeded by :func:`pylucid.manual_seed`
already; MLX's queue; pylucid's caching allocator).
"""

from __future__ import annotations

from pylucid.compat import refuse_attributes, unsupported
from pylucid.cuda import amp

__all__ = [
    "Event",
    "amp",
    "current_device",
    "device_count",
    "empty_cache",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
    "set_device",
    "synchronize",
]

_NO_CUDA = "pylucid has no CUDA device; its GPU device is 'gpu' (MLX): use device='gpu'"


def is_available() -> bool:
    """False: pylucid has no CUDA device (its GPU device is ``"gpu"``, on MLX)."""
    return False


def device_count() -> int:
    """0: no CUDA devices."""
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: there is no CUDA device to support it."""
    return False


def manual_seed(seed: int) -> None:
    """Does nothing, as PyTorch without CUDA: there is no CUDA generator to seed
    (:func:`pylucid.manual_seed` seeds the generator every device draws from)."""


def manual_seed_all(seed: int) -> None:
    """Does nothing, as :func:`manual_seed`."""


def synchronize(device: object = None) -> None:
    """Wait until queued work is done: MLX's, where it is in use (the CPU backend runs
    each op to completion)."""
    from pylucid import backends

    for name in backends.available():
        backends.get(name).synchronize()


def empty_cache() -> None:
    """Release pylucid's idle cached buffers (:func:`pylucid.memory.empty_cache`)."""
    from pylucid import memory

    memory.empty_cache()


current_device = unsupported("cuda.current_device", _NO_CUDA)
get_device_name = unsupported("cuda.get_device_name", _NO_CUDA)

Event = unsupported("cuda.Event", _NO_CUDA + "; time on the CPU with time.perf_counter")
set_device = unsupported("cuda.set_device", _NO_CUDA)
get_device_properties = unsupported("cuda.get_device_properties", _NO_CUDA)
get_device_capability = unsupported("cuda.get_device_capability", _NO_CUDA)
_MEMORY = _NO_CUDA + "; pylucid.memory.stats() reports pylucid's own cached buffers"
memory_allocated = unsupported("cuda.memory_allocated", _MEMORY)
max_memory_allocated = unsupported("cuda.max_memory_allocated", _MEMORY)
memory_reserved = unsupported("cuda.memory_reserved", _MEMORY)
max_memory_reserved = unsupported("cuda.max_memory_reserved", _MEMORY)
reset_peak_memory_stats = unsupported("cuda.reset_peak_memory_stats", _MEMORY)

refuse_attributes(
    globals(),
    {
        name: f"{_NO_CUDA}; for the CPU use pylucid.{name}"
        for name in ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "IntTensor",
                     "LongTensor", "BoolTensor")  # fmt: skip
    }
    | {"ByteTensor": _NO_CUDA},
)
