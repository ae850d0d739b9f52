"""``DataParallel`` and ``data_parallel``, as ``torch.nn.DataParallel`` and
``torch.nn.parallel.data_parallel`` behave on a machine without CUDA devices: the module
is called as it is (PyTorch's ``device_ids`` is then empty and ``forward`` calls the
module; pylucid has no CUDA devices, so this is its behaviour everywhere). The wrapper
holds the model as ``module``, so its state dict keys carry PyTorch's ``"module."``
prefix and load into a ``DataParallel`` of PyTorch; train on several processes with
:class:`~pylucid.nn.parallel.DistributedDataParallel`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.nn.modules.module import Module

__all__ = ["DataParallel", "data_parallel"]


class DataParallel(Module):
    """Holds ``module`` and calls it (one device: nothing is replicated or scattered).

    Parameters
    ----------
    module : Module
        The model; its parameters are this wrapper's, under ``"module."``.
    device_ids, output_device : optional
        Accepted for PyTorch's signature; without CUDA devices PyTorch ignores them too
        (``device_ids`` becomes ``[]``).
    dim : int
        The batch dimension PyTorch would scatter along (kept; unused here).
    """

    def __init__(
        self, module: Module, device_ids: Sequence[Any] | None = None,
        output_device: Any = None, dim: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: expected a Module, got {type(module).__name__}")
        self.module = module
        self.device_ids: list[Any] = []
        self.output_device, self.dim = output_device, dim

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


def data_parallel(
    module: Module, inputs: Any, device_ids: Sequence[Any] | None = None,
    output_device: Any = None, dim: int = 0, module_kwargs: dict[str, Any] | None = None,
) -> Any:  # fmt: skip
    """``module(*inputs, **module_kwargs)`` (``inputs`` a tuple, or one input), as
    ``torch.nn.parallel.data_parallel`` without CUDA devices."""
    if not isinstance(inputs, tuple):
        inputs = () if inputs is None else (inputs,)
    return module(*inputs, **(module_kwargs or {}))
