"""pylucid: a small define-by-run autograd library with Numba CPU kernels and an MLX GPU path.

>>> import pylucid as pl
>>> x = pl.tensor([0.5, 1.0, 8.0], requires_grad=True)
>>> loss = (pl.log2(x) * pl.log2(x)).sum()
>>> loss.backward()
>>> x.grad                    # 2 log2(x) / (x ln 2)
tensor([-5.7708,  0.    ,  1.082 ])
"""

import math

from pylucid import (
    _lazy,
    accelerator,
    amp,
    autograd,
    backends,
    cuda,
    graph,
    linalg,
    memory,
    mps,
    nn,
    onnx,
    ops,
    optim,
    profiler,
    return_types,
    testing,
    utils,
    version,
)
from pylucid.amp import autocast
from pylucid.compat import refuse_attributes
from pylucid.device import device
from pylucid.dtypes import (
    DType,
    bfloat16,
    bool_,
    finfo,
    float16,
    float32,
    float64,
    get_default_dtype,
    iinfo,
    int32,
    int64,
    set_default_dtype,
)
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
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
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
from pylucid.legacy_types import (
    BFloat16Tensor,
    BoolTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
)
from pylucid.matmul_precision import get_float32_matmul_precision, set_float32_matmul_precision
from pylucid.memory_format import (
    channels_last,
    channels_last_3d,
    contiguous_format,
    preserve_format,
)
from pylucid.ops import FAMILIES as _OP_FAMILIES
from pylucid.ops.activations import *  # noqa: F403
from pylucid.ops.arithmetic import *  # noqa: F403
from pylucid.ops.arrangement import *  # noqa: F403
from pylucid.ops.binary import *  # noqa: F403
from pylucid.ops.blends import *  # noqa: F403
from pylucid.ops.comparison import *  # noqa: F403
from pylucid.ops.conversion import clone  # noqa: F401  (listed in __all__ by _PUBLIC_OPS)
from pylucid.ops.einstein import *  # noqa: F403
from pylucid.ops.elementwise_math import *  # noqa: F403
from pylucid.ops.gathering import *  # noqa: F403
from pylucid.ops.indexing import *  # noqa: F403
from pylucid.ops.linalg import *  # noqa: F403
from pylucid.ops.logical import *  # noqa: F403
from pylucid.ops.random import *  # noqa: F403
from pylucid.ops.reduce import *  # noqa: F403
from pylucid.ops.rounding import *  # noqa: F403
from pylucid.ops.scan import *  # noqa: F403
from pylucid.ops.selection import *  # noqa: F403
from pylucid.ops.shape import *  # noqa: F403
from pylucid.ops.softmax_family import *  # noqa: F403
from pylucid.ops.sorting import *  # noqa: F403
from pylucid.ops.unary import *  # noqa: F403
from pylucid.printing import set_printoptions
from pylucid.tensor import Tensor


def is_tensor(obj: object) -> bool:
    """Whether ``obj`` is a pylucid Tensor."""
    return isinstance(obj, Tensor)


def numel(x: Tensor) -> int:
    """The number of elements of ``x``."""
    return x.numel()


# PyTorch's dtype names (torch.float is float32, torch.int int32, torch.long int64, ...).
bool = bool_  # noqa: A001
float = float32  # noqa: A001
double = float64
half = float16
int = int32  # noqa: A001
long = int64

refuse_attributes(
    globals(),
    {
        name: f"pylucid has no {name} dtype; its dtypes are bool, int32, int64, float16, "
        f"bfloat16, float32 and float64 (use int32 or int64 for integers)"
        for name in ("uint8", "int8", "int16", "short", "uint16", "uint32", "uint64")
    }
    | {
        name: "pylucid has no complex dtypes"
        for name in ("complex64", "complex128", "cfloat", "cdouble", "complex32", "chalf")
    }
    | {"ByteTensor": "pylucid has no uint8 dtype: use pylucid.LongTensor / int64"},
)

# Imported on first use (pylucid._lazy): the compiler until pl.compile, checkpoints until
# pl.save / pl.load, pylucid.distributed until used.
_lazy.lazy_attributes(
    globals(),
    {
        "compile": "pylucid.compiler:compile",
        "CaptureError": "pylucid.compiler:CaptureError",
        "compiler": "pylucid.compiler",
        "distributed": "pylucid.distributed",
        "save": "pylucid.serialization:save",
        "load": "pylucid.serialization:load",
        "serialization": "pylucid.serialization",
        "torch_checkpoint": "pylucid.torch_checkpoint",
        "torch_unpickler": "pylucid.torch_unpickler",
    },
)

__version__ = version.__version__

# PyTorch's constants.
e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None

_PUBLIC_OPS = [
    name
    for family in _OP_FAMILIES
    for name in family.__all__
    if not name.endswith(("Backward", "_")) and not name.startswith("to_")
]  # (the families include logical and conversion: pl.any, pl.clone; in-place ops
#    such as add_ are Tensor methods only)

__all__ = [
    "BFloat16Tensor",
    "BoolTensor",
    "CaptureError",  # noqa: F405  (imported on first use, above)
    "DType",
    "DoubleTensor",
    "FloatTensor",
    "Generator",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "Tensor",
    "accelerator",
    "amp",
    "autocast",
    "bfloat16",
    "float16",
    "optim",
    "arange",
    "asarray",
    "autograd",
    "backends",
    "bool",
    "channels_last",
    "channels_last_3d",
    "compile",
    "contiguous_format",
    "cuda",
    "default_generator",
    "device",
    "double",
    "e",
    "empty",
    "empty_like",
    "enable_grad",
    "eye",
    "finfo",
    "float",
    "float32",
    "float64",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "get_default_dtype",
    "get_float32_matmul_precision",
    "get_num_threads",
    "get_rng_state",
    "graph",
    "half",
    "iinfo",
    "inf",
    "inference_mode",
    "initial_seed",
    "int",
    "int32",
    "int64",
    "is_grad_enabled",
    "is_tensor",
    "linalg",
    "linspace",
    "load",  # noqa: F405  (imported on first use, above)
    "long",
    "manual_seed",
    "memory",
    "mps",
    "nan",
    "newaxis",
    "nn",
    "no_grad",
    "numel",
    "ones",
    "ones_like",
    "onnx",
    "ops",
    "pi",
    "preserve_format",
    "profiler",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "return_types",
    "save",  # noqa: F405  (imported on first use, above)
    "seed",
    "set_default_dtype",
    "set_float32_matmul_precision",
    "set_grad_enabled",
    "set_num_threads",
    "serialization",  # noqa: F405  (imported on first use, above)
    "set_printoptions",
    "set_rng_state",
    "tensor",
    "testing",
    "zeros",
    "utils",
    "version",
    "zeros_like",
    *_PUBLIC_OPS,
]
