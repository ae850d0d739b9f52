"""``pylucid.device``: PyTorch's device object over pylucid's device names.

pylucid's devices are ``"cpu"`` (the numba backend) and ``"gpu"`` (MLX). A :class:`device`
is a ``str`` holding the name, so it compares and hashes as the string (``x.device ==
"cpu"``), is accepted wherever a device name is, and has PyTorch's ``type`` and ``index``.
PyTorch's ``"cuda"`` and ``"mps"`` can be named (scripts build ``torch.device("cuda")``
before asking whether it is available), but placing a tensor there raises, saying to use
``"gpu"``: :func:`pylucid.cuda.is_available` is False.
"""

from __future__ import annotations

from pylucid.compat import differs

__all__ = ["device", "UNAVAILABLE_TYPES"]

#: Device types pylucid has.
TYPES = ("cpu", "gpu")
#: PyTorch's device types a program may name but pylucid cannot place tensors on.
UNAVAILABLE_TYPES = ("cuda", "mps", "xpu", "meta", "xla", "hip")


@differs(
    "a str of the device's name, so device('cpu') == 'cpu' (PyTorch: False); 'cuda' and "
    "'mps' can be named but not used"
)
class device(str):  # noqa: N801  (named like torch.device)
    """A device: ``device("cpu")``, ``device("gpu")``, ``device("cuda", 0)``, ``device("cuda:1")``.

    Parameters
    ----------
    type : str or device
        The device type, optionally with ``":index"``.
    index : int, optional
        The device's index (no index: the current one).

    Raises
    ------
    ValueError
        For a name that is no device type of pylucid's or PyTorch's, or an index given twice.
    """

    type: str
    index: int | None

    def __new__(cls, type: str, index: int | None = None) -> device:  # noqa: A002
        if isinstance(type, device) and index is None:
            return type
        if not isinstance(type, str):
            raise TypeError(f"device: expected a device name such as 'cpu', got {type!r}")
        kind, _, given = type.partition(":")
        if given:
            if index is not None:
                raise ValueError(f"device: {type!r} already has an index; got index={index}")
            if not given.isdigit():
                raise ValueError(f"device: invalid index in {type!r}")
            index = int(given)
        if kind not in TYPES and kind not in UNAVAILABLE_TYPES:
            raise ValueError(
                f"device: unknown device type {kind!r}; pylucid's devices are 'cpu' and 'gpu'"
            )
        if index is not None and (not isinstance(index, int) or index < 0):
            raise ValueError(f"device: index must be a non-negative int, got {index!r}")
        self = super().__new__(cls, kind if index is None else f"{kind}:{index}")
        self.type, self.index = kind, index
        return self

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type={self.type!r})"
        return f"device(type={self.type!r}, index={self.index})"

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (device, (str(self),))
