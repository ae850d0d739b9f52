"""pylucid: a small define-by-run autograd library with Numba CPU kernels and an MLX GPU path.

>>> import pylucid as pl
>>> x = pl.tensor([0.5, 1.0, 8.0], requires_grad=True)
>>> loss = (pl.log2(x) * pl.log2(x)).sum()
>>> loss.backward()
>>> x.grad                    # 2 log2(x) / (x ln 2)
tensor([-5.7708,  0.    ,  1.082 ])
"""

from pylucid import amp, backends, graph, memory, nn, ops, optim, utils
from pylucid.amp import autocast
from pylucid.compiler import CaptureError, compile  # noqa: A004  (pl.compile, as torch.compile)
from pylucid.dtypes import DType, bfloat16, bool_, float16, float32, float64, int32, int64
from pylucid.factories import (
    arange,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from pylucid.generator import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    seed,
    set_rng_state,
)
from pylucid.graph import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from pylucid.interop import asarray, from_dlpack
from pylucid.kernels.parallel import get_num_threads, set_num_threads
from pylucid.ops import FAMILIES as _OP_FAMILIES
from pylucid.ops.activations import *  # noqa: F403
from pylucid.ops.arithmetic import *  # noqa: F403
from pylucid.ops.binary import *  # noqa: F403
from pylucid.ops.comparison import *  # noqa: F403
from pylucid.ops.conversion import clone  # noqa: F401  (listed in __all__ by _PUBLIC_OPS)
from pylucid.ops.einstein import *  # noqa: F403
from pylucid.ops.elementwise_math import *  # noqa: F403
from pylucid.ops.gathering import *  # noqa: F403
from pylucid.ops.indexing import *  # noqa: F403
from pylucid.ops.linalg import *  # noqa: F403
from pylucid.ops.logical import *  # noqa: F403
from pylucid.ops.reduce import *  # noqa: F403
from pylucid.ops.rounding import *  # noqa: F403
from pylucid.ops.scan import *  # noqa: F403
from pylucid.ops.selection import *  # noqa: F403
from pylucid.ops.shape import *  # noqa: F403
from pylucid.ops.softmax_family import *  # noqa: F403
from pylucid.ops.sorting import *  # noqa: F403
from pylucid.ops.unary import *  # noqa: F403
from pylucid.serialization import load, save
from pylucid.tensor import Tensor

bool = bool_  # noqa: A001  (pl.bool, as torch.bool)

__version__ = "0.1.0"

_PUBLIC_OPS = [
    name
    for family in _OP_FAMILIES
    for name in family.__all__
    if not name.endswith("Backward") and not name.startswith("to_")
]  # (the families include logical and conversion: pl.any, pl.clone)

__all__ = [
    "CaptureError",
    "DType",
    "Generator",
    "Tensor",
    "amp",
    "autocast",
    "bfloat16",
    "float16",
    "optim",
    "arange",
    "asarray",
    "backends",
    "bool",
    "compile",
    "default_generator",
    "empty",
    "empty_like",
    "enable_grad",
    "eye",
    "float32",
    "float64",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "get_num_threads",
    "get_rng_state",
    "graph",
    "inference_mode",
    "initial_seed",
    "int32",
    "int64",
    "is_grad_enabled",
    "linspace",
    "load",
    "manual_seed",
    "memory",
    "nn",
    "no_grad",
    "ones",
    "ones_like",
    "ops",
    "rand",
    "randint",
    "randn",
    "randperm",
    "save",
    "seed",
    "set_grad_enabled",
    "set_num_threads",
    "set_rng_state",
    "tensor",
    "zeros",
    "utils",
    "zeros_like",
    *_PUBLIC_OPS,
]
