"""PyTorch's ``torch.backends.*`` switches that training scripts set, with their meaning here.

``torch.backends.cudnn.benchmark = True``, ``.deterministic = True`` and
``torch.backends.cuda.matmul.allow_tf32 = True`` tune CUDA libraries pylucid does not use:
the assignments are kept (a script may read them back) and change nothing, which is also
what they do in PyTorch on a machine without CUDA. pylucid's products are float32 in
float32 on every backend, and its kernels are deterministic.
"""

from __future__ import annotations

__all__ = ["cuda", "cudnn", "mkldnn", "mps"]


class _Switches:
    """A namespace of flags with PyTorch's names and defaults; ``is_available()`` says
    whether the library they tune is here (never: pylucid links no CUDA, cuDNN or MPS)."""

    def __init__(self, name: str, **flags: object) -> None:
        self.__dict__.update(flags)
        self._name = name

    def is_available(self) -> bool:
        return False

    def __repr__(self) -> str:
        flags = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"<pylucid.backends.{self._name}: {flags}>"


cudnn = _Switches(
    "cudnn", enabled=True, benchmark=False, deterministic=False, allow_tf32=True
)
cuda = _Switches(
    "cuda",
    matmul=_Switches("cuda.matmul", allow_tf32=False, allow_fp16_reduced_precision_reduction=True),
)
mps = _Switches("mps")
mkldnn = _Switches("mkldnn", enabled=True)
