"""Ops: one node class per op (schema, forward dispatch, gradient) and its public wrapper.

>>> pl.ops.Log2Backward.schema_v1.amp_policy
<AmpPolicy.FORCE_FP32: 'force_fp32'>
>>> pl.ops.get_schema("log2") is pl.ops.Log2Backward.schema_v1
True
"""

from pylucid.ops.arithmetic import (
    AddBackward,
    DivBackward,
    MulBackward,
    SubBackward,
    add,
    div,
    mul,
    sub,
)
from pylucid.ops.base import BinaryOp, Op, ReduceOp, UnaryOp
from pylucid.ops.conversion import ToDeviceBackward, ToDtypeBackward, to_device, to_dtype
from pylucid.ops.reduce import MeanBackward, SumBackward, mean, sum  # noqa: A004  (pylucid.ops.sum, like numpy.sum)
from pylucid.ops.schema import AmpPolicy, OpSchema, get_op, get_schema, list_ops
from pylucid.ops.unary import Log2Backward, NegBackward, PowScalarBackward, log2, neg, pow_scalar
from pylucid.ops.wrapping import install_tensor_methods
from pylucid.tensor import Tensor


def _power(x: Tensor, exponent: object) -> Tensor:
    if isinstance(exponent, Tensor):
        raise TypeError("** with a tensor exponent is not supported yet; use a Python number")
    return pow_scalar(x, exponent)


install_tensor_methods(
    binary_operators={"add": add, "sub": sub, "mul": mul, "truediv": div},
    unary_operators={"__neg__": neg, "__pow__": _power},
)

__all__ = [
    "AddBackward",
    "AmpPolicy",
    "BinaryOp",
    "DivBackward",
    "Log2Backward",
    "MeanBackward",
    "MulBackward",
    "NegBackward",
    "Op",
    "OpSchema",
    "PowScalarBackward",
    "ReduceOp",
    "SubBackward",
    "SumBackward",
    "ToDeviceBackward",
    "ToDtypeBackward",
    "UnaryOp",
    "add",
    "div",
    "get_op",
    "get_schema",
    "list_ops",
    "log2",
    "mean",
    "mul",
    "neg",
    "pow_scalar",
    "sub",
    "sum",
    "to_device",
    "to_dtype",
]
