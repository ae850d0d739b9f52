"""Op schemas, AMP policies and the op registry.

Every op declares one frozen :class:`OpSchema` as the ``schema_v1`` attribute of its node
class; declaring the class registers it (see :class:`pylucid.ops.base.Op`). The registry is a
plain dict keyed by op name that refuses duplicates.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pylucid.amp.autocast import autocast_dtype
from pylucid.dtypes import DType, float32, float64

if TYPE_CHECKING:
    from pylucid.ops.base import Op

__all__ = [
    "AmpPolicy",
    "OpSchema",
    "register_op",
    "get_schema",
    "get_op",
    "list_ops",
    "resolve_dtypes",
]


class AmpPolicy(enum.Enum):
    """How an op chooses its compute dtype under mixed precision.

    PROMOTE
        Floating inputs are promoted together (inside autocast: cast to the autocast dtype).
    KEEP_INPUT
        The op computes in its input's dtype; autocast is ignored.
    FORCE_FP32
        Half-precision inputs are computed in float32 (PyTorch's autocast fp32 list:
        exp, log, log2, pow, ...).
    """

    PROMOTE = "promote"
    KEEP_INPUT = "keep_input"
    FORCE_FP32 = "force_fp32"


def resolve_dtypes(policy: AmpPolicy, natural: DType) -> tuple[DType, DType]:
    """The (compute, result) dtypes of an op whose inputs promote to ``natural``.

    Outside autocast a ``FORCE_FP32`` op computes half inputs in float32 and rounds the
    result once to the input's dtype; every other op computes in ``natural``. Inside
    autocast the policies above apply.
    """
    if not natural.is_floating_point or natural is float64:
        return natural, natural
    lowered = autocast_dtype()
    if policy is AmpPolicy.FORCE_FP32:
        if natural.is_half:
            return float32, float32 if lowered is not None else natural
        return natural, natural
    if policy is AmpPolicy.PROMOTE and lowered is not None:
        return lowered, lowered
    return natural, natural


@dataclass(frozen=True)
class OpSchema:
    """The declaration of one op.

    Attributes
    ----------
    name : str
        Registry key and public name (``"log2"``).
    version : int
        Schema version; bumped when the op's semantics change.
    amp_policy : AmpPolicy
        How the compute dtype is chosen.
    deterministic : bool
        Whether the forward and backward give bit-identical results run to run.
    deterministic_note : str
        Why not, when ``deterministic`` is False.
    input_arity : int
        Number of tensor inputs, or ``VARIADIC`` (-1, :data:`pylucid.ops.base.VARIADIC`) for
        ops taking any number of them (``concatenate``, ``stack``).
    output_arity : int
        Number of tensor outputs.
    saved : tuple of str
        What the backward needs: input names (``"x"``, ``"a"``, ``"b"``) or ``"result"``.
    real_valued : bool
        Integer and bool inputs give a floating result (float32), as ``log2`` does.
    differentiable : bool
        False for ops with no gradient (comparisons, argmax).
    internal : bool
        Not part of the public API (e.g. a helper op used by other ops' gradients).
    """

    name: str
    version: int = 1
    amp_policy: AmpPolicy = AmpPolicy.PROMOTE
    deterministic: bool = True
    deterministic_note: str = ""
    input_arity: int = 1
    output_arity: int = 1
    saved: tuple[str, ...] = ()
    real_valued: bool = False
    differentiable: bool = True
    internal: bool = False


_REGISTRY: dict[str, type[Op]] = {}


def register_op(op_class: type[Op]) -> None:
    """Add ``op_class`` to the registry under ``op_class.schema_v1.name``.

    Raises
    ------
    ValueError
        If another class already registered that name.
    """
    name = op_class.schema_v1.name
    if name in _REGISTRY and _REGISTRY[name] is not op_class:
        raise ValueError(
            f"op {name!r} is already registered by {_REGISTRY[name].__qualname__}; "
            f"{op_class.__qualname__} cannot register it again"
        )
    _REGISTRY[name] = op_class


def get_op(name: str) -> type[Op]:
    """Return the node class registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}; registered ops: {', '.join(list_ops())}") from None


def get_schema(name: str) -> OpSchema:
    """Return the schema registered as ``name``."""
    return get_op(name).schema_v1


def list_ops() -> list[str]:
    """Return the names of all registered ops, sorted."""
    return sorted(_REGISTRY)
