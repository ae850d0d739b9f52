"""Ops: one node class per op (schema, forward dispatch, gradient) and its public wrapper.

Each family module defines its node classes and wrappers and lists them in ``__all__``;
this package re-exports them and installs the Tensor methods and operators they declare.

>>> pl.ops.Log2Backward.schema_v1.amp_policy
<AmpPolicy.FORCE_FP32: 'force_fp32'>
>>> pl.ops.get_schema("log2") is pl.ops.Log2Backward.schema_v1
True
"""

from pylucid.ops import (
    activations,
    arithmetic,
    arrangement,
    binary,
    blends,
    comparison,
    conversion,
    convolution,  # noqa: F401  (registers conv2d; its wrappers are pylucid.nn.functional's)
    einstein,
    elementwise_math,
    gathering,
    indexing,
    inplace,
    interop,  # noqa: F401  (installs NumPy's ufunc and array-function protocols)
    linalg,
    logical,
    losses,  # noqa: F401  (registers cross_entropy; its wrapper is pylucid.nn.functional's)
    normalization,  # noqa: F401  (registers layer_norm; its wrapper is pylucid.nn.functional's)
    pooling,  # noqa: F401  (registers the pools; their wrappers are pylucid.nn.functional's)
    random,
    reduce,
    rounding,
    scan,
    selection,
    shape,
    softmax_family,
    sorting,
    unary,
)
from pylucid.ops.activations import *  # noqa: F403
from pylucid.ops.arithmetic import *  # noqa: F403
from pylucid.ops.arrangement import *  # noqa: F403
from pylucid.ops.base import BinaryOp, Op, ReduceOp, UnaryOp
from pylucid.ops.binary import *  # noqa: F403
from pylucid.ops.blends import *  # noqa: F403
from pylucid.ops.comparison import *  # noqa: F403
from pylucid.ops.conversion import *  # noqa: F403
from pylucid.ops.einstein import *  # noqa: F403
from pylucid.ops.elementwise_math import *  # noqa: F403
from pylucid.ops.gathering import *  # noqa: F403
from pylucid.ops.indexing import *  # noqa: F403
from pylucid.ops.inplace import *  # noqa: F403
from pylucid.ops.linalg import *  # noqa: F403
from pylucid.ops.logical import *  # noqa: F403
from pylucid.ops.random import *  # noqa: F403
from pylucid.ops.reduce import *  # noqa: F403
from pylucid.ops.rounding import *  # noqa: F403
from pylucid.ops.scan import *  # noqa: F403
from pylucid.ops.schema import AmpPolicy, OpSchema, get_op, get_schema, list_ops
from pylucid.ops.selection import *  # noqa: F403
from pylucid.ops.shape import *  # noqa: F403
from pylucid.ops.softmax_family import *  # noqa: F403
from pylucid.ops.sorting import *  # noqa: F403
from pylucid.ops.unary import *  # noqa: F403
from pylucid.ops.wrapping import install_tensor_methods

inplace.add_in_place_twins()
install_tensor_methods()

FAMILIES = (
    unary,
    elementwise_math,
    activations,
    arithmetic,
    binary,
    comparison,
    einstein,
    reduce,
    rounding,
    scan,
    softmax_family,
    linalg,
    shape,
    indexing,
    gathering,
    inplace,
    conversion,
    logical,
    selection,
    sorting,
    random,
    arrangement,
    blends,
)

__all__ = [
    "AmpPolicy",
    "BinaryOp",
    "Op",
    "OpSchema",
    "ReduceOp",
    "UnaryOp",
    "get_op",
    "get_schema",
    "list_ops",
    *(name for family in FAMILIES for name in family.__all__),
]
