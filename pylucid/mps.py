"""``pylucid.mps``: what PyTorch programs ask of ``torch.mps``, answered for a library
without Apple's MPS backend (``pylucid.backends.mps.is_available()`` is False). pylucid's GPU
is the ``"gpu"`` device (MLX, which runs on Apple's GPUs through Metal)."""

from __future__ import annotations

from pylucid.cuda import empty_cache, synchronize

__all__ = ["device_count", "empty_cache", "manual_seed", "synchronize"]


def device_count() -> int:
    """0: no MPS devices (use ``device="gpu"`` for MLX)."""
    return 0


def manual_seed(seed: int) -> None:
    """Does nothing: there is no MPS generator (:func:`pylucid.manual_seed` seeds the one
    every device draws from)."""
