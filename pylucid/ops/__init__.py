"""Ops: one node class per op (schema, forward dispatch, gradient) and its public wrapper.

>>> pl.ops.Log2Backward.schema_v1.amp_policy
<AmpPolicy.FORCE_FP32: 'force_fp32'>
>>> pl.ops.get_schema("log2") is pl.ops.Log2Backward.schema_v1
True
"""

from pylucid.ops.arithmetic import AddBackward, DivBackward, MulBackward, SubBackward
from pylucid.ops.base import BinaryOp, Op, ReduceOp, UnaryOp
from pylucid.ops.conversion import ToDeviceBackward, ToDtypeBackward
from pylucid.ops.reduce import MeanBackward, SumBackward
from pylucid.ops.schema import AmpPolicy, OpSchema, get_op, get_schema, list_ops
from pylucid.ops.unary import Log2Backward, NegBackward, PowScalarBackward
from pylucid.ops.wrappers import (
    add,
    div,
    install_tensor_methods,
    log2,
    mean,
    mul,
    neg,
    pow_scalar,
    sub,
    sum,  # noqa: A004  (pylucid.ops.sum, like numpy.sum)
    to_device,
    to_dtype,
)

install_tensor_methods()

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
