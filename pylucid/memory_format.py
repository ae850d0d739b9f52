"""PyTorch's memory formats (``torch.channels_last``, ``contiguous_format``,
``preserve_format``): layouts of the same values. pylucid's tensors are row-major, so
``x.to(memory_format=torch.channels_last)`` and ``x.contiguous(memory_format=...)`` give
the same values in pylucid's layout: results are PyTorch's; only the strides differ."""

from __future__ import annotations

__all__ = ["MemoryFormat", "channels_last", "channels_last_3d", "contiguous_format",
           "preserve_format"]  # fmt: skip


class MemoryFormat:
    """A memory format: a name that layout arguments accept."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"pylucid.{self.name}"


contiguous_format = MemoryFormat("contiguous_format")
preserve_format = MemoryFormat("preserve_format")
channels_last = MemoryFormat("channels_last")
channels_last_3d = MemoryFormat("channels_last_3d")
