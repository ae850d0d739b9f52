"""``pylucid.accelerator``: PyTorch's ``torch.accelerator`` (the current CUDA, MPS or XPU
device), answered as PyTorch answers on a machine with none of them: no accelerator. A
script's ``device = torch.accelerator.current_accelerator() if
torch.accelerator.is_available() else "cpu"`` runs on the CPU; pylucid's GPU is asked for by
name, ``device="gpu"`` (MLX)."""

from __future__ import annotations

from pylucid.compat import unsupported
from pylucid.device import device

__all__ = [
    "current_accelerator",
    "current_device_index",
    "device_count",
    "is_available",
    "set_device_index",
    "synchronize",
]


def is_available() -> bool:
    """False: none of PyTorch's accelerators (CUDA, MPS, XPU) is here."""
    return False


def device_count() -> int:
    """0: no accelerator devices."""
    return 0


def current_accelerator(check_available: bool = False) -> device | None:
    """None: there is no accelerator (PyTorch's answer on a CPU-only machine)."""
    return None


_NONE = "there is no CUDA, MPS or XPU accelerator here; pylucid's GPU device is 'gpu' (MLX)"
current_device_index = unsupported("accelerator.current_device_index", _NONE)
set_device_index = unsupported("accelerator.set_device_index", _NONE)
synchronize = unsupported("accelerator.synchronize", _NONE)
