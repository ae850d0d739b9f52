"""The benchmark cases, derived from the op database.

Every unary op that has a record in :data:`pylucid.opinfo.OPS` and whose output has its
input's shape is a benchmark op: its inputs come from the record's domain-aware sampler, and
its NumPy, PyTorch and MLX equivalents are looked up by name (in ``numpy``; ``torch``,
``torch.special``, ``torch.nn.functional``; ``mlx.core``, ``mlx.nn``; then under the names in
:data:`ALIASES`), so a new op shows up here without editing this module. An op with
parameters (``clamp``, ``softplus``) is compared with its record's NumPy reference only: a
function found by name would use its own defaults. The NumPy backward needs a formula, which
is data too: :data:`NUMPY_GRADIENTS`; an op without one is compared with the other libraries.

Three kinds of case, each timed for every implementation on the same inputs:

``forward``
    ``y = op(x)``. Implementations: ``pylucid`` (the public op on a tensor: wrapper, checks,
    dispatch), ``pylucid.kernel`` (the backend primitive the op dispatches to, on the NumPy
    storage: the kernel and its operand preparation), ``numpy``, ``numpy.out`` (the
    ufunc into a preallocated array: NumPy with no allocation or page faults), ``torch``,
    ``mlx``, and optionally ``pylucid.mlx`` (the op on pylucid's mlx backend).
``backward``
    The gradient of ``x`` from a fixed upstream gradient ``g``, the forward done once
    beforehand. ``pylucid.kernel`` is the node's ``grad_formula`` (for log2: the fused
    primitive ``be.log_base_backward(x, g, ln_base, ln_base_lo, shape, dtype)``);
    ``pylucid`` and ``torch`` run ``y.backward(g, retain_graph=True)`` through their
    engines into ``x.grad`` (reset each call); ``numpy`` evaluates the formula; ``mlx``
    evaluates the cotangent of ``mx.vjp`` (MLX is lazy: it computes the forward only
    where the gradient uses it).
``forward_backward``
    ``y = op(x)`` then ``y.backward(g)`` through the graph (what one tiny op costs in a
    training step, at small sizes); ``numpy`` is the forward and the formula, ``mlx`` both
    outputs of ``mx.vjp``.

Half precision (dtypes ``float16`` and ``bfloat16``, :data:`HALF_DTYPES`) is timed forward
only. NumPy has no half arithmetic worth the name, so its implementation is the chain a NumPy
user writes - ``np.log2(x.astype(np.float32)).astype(x.dtype)`` - and pylucid's ``FORCE_FP32``
ops (log2, exp, ...) compute half inputs in float32 too: ``pylucid`` outside autocast (the
result rounded to the half dtype), ``pylucid.autocast`` under ``pl.autocast`` (the float32
result), ``pylucid.kernel`` the backend primitive with the half dtype. PyTorch runs the op on
its own half tensors; MLX on an array converted to its half type.

The bytes a case moves (for GB/s) are the least an implementation must read and write: a
forward reads ``x`` and writes ``y``; a backward reads the values the op's schema saves and
``g`` and writes the gradient (in the case's dtype: a half forward moves 2 + 2 bytes per
element, although ``pylucid.autocast`` writes a float32 result).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import pylucid as pl
from pylucid.dtypes import as_dtype
from pylucid.opinfo import OPS, OpInfo
from pylucid.ops.base import Op, UnaryOp

__all__ = [
    "ALIASES",
    "ALL_DTYPES",
    "ALL_IMPLS",
    "DEFAULT_IMPLS",
    "HALF_DTYPES",
    "KINDS",
    "NUMPY_GRADIENTS",
    "BenchOp",
    "Inputs",
    "Libraries",
    "benchmark_ops",
    "build_case",
    "case_bytes",
    "load_libraries",
    "make_inputs",
    "numpy_dtype",
]

KINDS = ("forward", "backward", "forward_backward")
DEFAULT_IMPLS = (
    "pylucid",
    "pylucid.autocast",
    "pylucid.kernel",
    "numpy",
    "numpy.out",
    "torch",
    "mlx",
)
ALL_IMPLS = (*DEFAULT_IMPLS, "pylucid.mlx")
#: The 16-bit dtypes: timed forward only (see the module docstring).
HALF_DTYPES = ("float16", "bfloat16")
ALL_DTYPES = ("float32", "float64", *HALF_DTYPES)


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a dtype name (``"bfloat16"``: ml_dtypes' type)."""
    return as_dtype(name).numpy


#: Other names an op goes by in NumPy, PyTorch or MLX, tried after its own name.
ALIASES: dict[str, tuple[str, ...]] = {
    "neg": ("negative",),
    "abs": ("absolute",),
    "asin": ("arcsin",),
    "acos": ("arccos",),
    "atan": ("arctan",),
    "asinh": ("arcsinh",),
    "acosh": ("arccosh",),
    "atanh": ("arctanh",),
}

LN2 = 0.6931471805599453
LN10 = 2.302585092994046

#: dL/dx of a unary op as NumPy code, from its input ``x``, its result ``y`` and ``g``.
NUMPY_GRADIENTS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "log2": lambda x, y, g: g / (x * LN2),
    "log": lambda x, y, g: g / x,
    "log10": lambda x, y, g: g / (x * LN10),
    "log1p": lambda x, y, g: g / (1 + x),
    "exp": lambda x, y, g: g * y,
    "exp2": lambda x, y, g: g * y * LN2,
    "expm1": lambda x, y, g: g * (y + 1),
    "sqrt": lambda x, y, g: g / (2 * y),
    "rsqrt": lambda x, y, g: -0.5 * g * y * y * y,
    "reciprocal": lambda x, y, g: -g * y * y,
    "square": lambda x, y, g: 2 * g * x,
    "neg": lambda x, y, g: -g,
    "abs": lambda x, y, g: g * np.sign(x),
    "sin": lambda x, y, g: g * np.cos(x),
    "cos": lambda x, y, g: -g * np.sin(x),
    "tan": lambda x, y, g: g * (1 + y * y),
    "tanh": lambda x, y, g: g * (1 - y * y),
    "sigmoid": lambda x, y, g: g * y * (1 - y),
    "relu": lambda x, y, g: np.where(x > 0, g, 0),
    "sign": lambda x, y, g: np.zeros_like(g),
    "sinh": lambda x, y, g: g * np.cosh(x),
    "cosh": lambda x, y, g: g * np.sinh(x),
    "asin": lambda x, y, g: g / np.sqrt(1 - x * x),
    "acos": lambda x, y, g: -g / np.sqrt(1 - x * x),
    "atan": lambda x, y, g: g / (1 + x * x),
    "erf": lambda x, y, g: g * (2 / np.sqrt(np.pi)) * np.exp(-x * x),
    "silu": lambda x, y, g: g * (s := 1 / (1 + np.exp(-x))) * (1 + x * (1 - s)),
}


@dataclass(frozen=True)
class BenchOp:
    """A unary op of the registry and its equivalents in the other libraries."""

    name: str
    info: OpInfo
    op_class: type[Op]

    @property
    def saved_count(self) -> int:
        """How many arrays the backward reads besides ``g`` (from the schema's ``saved``)."""
        return len(self.op_class.schema_v1.saved)

    @property
    def has_params(self) -> bool:
        """Whether the op takes parameters besides ``x`` (its ``dispatch`` has extra ones).

        The record's ``call`` fixes them; a library function found by name would use its own
        defaults, so such an op is compared with its NumPy reference only.
        """
        return len(inspect.signature(self.op_class.dispatch).parameters) > 4

    def library_fn(self, modules: Sequence[Any]) -> Callable[..., Any] | None:
        """The first ``module.<name>`` (or alias) that is a function, else None."""
        if self.has_params:
            return None
        for module in modules:
            for name in (self.name, *ALIASES.get(self.name, ())):
                fn = getattr(module, name, None)
                if callable(fn) and not inspect.isclass(fn) and not inspect.ismodule(fn):
                    return fn
        return None

    def numpy_fn(self) -> Callable[..., Any]:
        """NumPy's ufunc of this name, else the record's reference."""
        fn = self.library_fn([np])
        return fn if isinstance(fn, np.ufunc) else self.info.reference


#: Record tags that keep an op out of the benchmarks: it needs both backends, or it gives bool.
_NOT_TIMED = frozenset({"needs_mlx", "bool_output"})


def benchmark_ops() -> dict[str, BenchOp]:
    """Every unary op with a record whose output has its input's shape, log2 first.

    Ops that set their own output shape (reshape, transpose, indexing, ...) and conversions
    (``to_dtype``, ``to_device``: they move data rather than compute) are left out.
    """
    found = {}
    registered = set(pl.ops.list_ops())
    for info in OPS:
        if info.name not in registered or len(info.samplers) != 1 or info.tags & _NOT_TIMED:
            continue
        op_class = pl.ops.get_op(info.name)
        if (
            issubclass(op_class, UnaryOp)
            and op_class.output_shape.__func__ is UnaryOp.output_shape.__func__
            and op_class.__module__ != "pylucid.ops.conversion"
        ):
            found[info.name] = BenchOp(info.name, info, op_class)
    return dict(sorted(found.items(), key=lambda item: (item[0] != "log2", item[0])))


@dataclass
class Libraries:
    """The optional libraries that could be imported, and why the others were not.

    ``torch_modules`` and ``mlx_modules`` are where an op's equivalent is looked up, in order.
    """

    torch: Any = None
    mx: Any = None
    torch_modules: tuple[Any, ...] = ()
    mlx_modules: tuple[Any, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)


def load_libraries(impls: Sequence[str]) -> Libraries:
    """Import PyTorch and MLX if some implementation in ``impls`` needs them."""
    libs = Libraries()
    if "torch" in impls:
        try:
            libs.torch = importlib.import_module("torch")
        except ImportError as exc:
            libs.skipped["torch"] = f"PyTorch is not installed ({exc})"
        else:
            libs.torch_modules = (
                libs.torch,
                importlib.import_module("torch.special"),
                importlib.import_module("torch.nn.functional"),
            )
    if "mlx" in impls or "pylucid.mlx" in impls:
        try:
            libs.mx = importlib.import_module("mlx.core")
        except ImportError as exc:
            libs.skipped["mlx"] = f"MLX is not installed ({exc})"
            libs.skipped["pylucid.mlx"] = "MLX is not installed"
        else:
            libs.mlx_modules = (libs.mx, importlib.import_module("mlx.nn"))
    return libs


@dataclass
class Inputs:
    """The arrays of one (op, dtype, size): ``x`` in the op's domain and a gradient ``g``."""

    x: np.ndarray
    g: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes of one array."""
        return self.x.nbytes


def make_inputs(op: BenchOp, dtype: str, size: int, seed: int = 0) -> Inputs:
    """Sample ``x`` with the op's sampler and ``g`` uniform in [0.5, 1.5), as ``dtype``."""
    rng = np.random.default_rng(seed)
    np_dtype = numpy_dtype(dtype)
    with np.errstate(over="ignore"):  # a sample beyond float16's range becomes inf
        x = op.info.sample(rng, ((size,),))[0].astype(np_dtype)
    g = rng.uniform(0.5, 1.5, size=size).astype(np_dtype)
    return Inputs(x, g)


def case_bytes(kind: str, op: BenchOp, inputs: Inputs) -> int:
    """Least bytes a call of ``kind`` reads and writes (see the module docstring)."""
    forward = 2 * inputs.nbytes
    backward = (op.saved_count + 2) * inputs.nbytes
    return {"forward": forward, "backward": backward, "forward_backward": forward + backward}[kind]


def _mlx_array(mx: Any, a: np.ndarray, dtype: str) -> Any:
    """``a`` as an MLX array of ``dtype`` (bfloat16 through float32: MLX does not read
    ml_dtypes' arrays)."""
    if dtype == "bfloat16":
        return mx.array(a.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(a, dtype=getattr(mx, dtype))


def _torch_tensor(torch: Any, a: np.ndarray, dtype: str) -> Any:
    """``a`` as a PyTorch tensor sharing its memory (bfloat16 through an int16 view)."""
    if dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _mlx_fn(op: BenchOp, libs: Libraries, dtype: str) -> Callable[[Any], Any] | None:
    """The op in MLX, on the CPU stream for float64 (MLX has float64 only there)."""
    fn = op.library_fn(libs.mlx_modules)
    if fn is None:
        return None
    mx = libs.mx
    device = mx.cpu if dtype == "float64" else mx.default_device()

    def run(a: Any) -> Any:
        with mx.stream(device):
            return fn(a)

    return run


def build_case(
    kind: str,
    op: BenchOp,
    dtype: str,
    inputs: Inputs,
    impls: tuple[str, ...],
    libs: Libraries,
) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """The callables of one case, and why the wanted implementations missing from it are.

    Each callable does one unit of ``kind`` on ``inputs`` and forces its result (MLX is lazy).
    """
    if kind != "forward" and not op.op_class.schema_v1.differentiable:
        return {}, {impl: f"{op.name} is not differentiable" for impl in impls}
    half = dtype in HALF_DTYPES
    if half and kind != "forward":
        return {}, {}
    x, g = inputs.x, inputs.g
    shape = x.shape
    calls: dict[str, Callable[[], object]] = {}
    missing: dict[str, str] = {}
    np_fn = op.numpy_fn()
    np_grad = NUMPY_GRADIENTS.get(op.name)
    torch_fn = op.library_fn(libs.torch_modules) if "torch" in impls else None
    mx = libs.mx
    mlx_fn = _mlx_fn(op, libs, dtype) if "mlx" in impls else None
    call = op.info.call
    ours = {"pylucid", "pylucid.kernel"} & set(impls)

    if kind == "forward":
        x_pl = pl.from_numpy(x)
        calls["pylucid"] = lambda: call(x_pl)
        if half:
            calls["pylucid.autocast"] = lambda: _under_autocast(call, x_pl)
        if not op.has_params:
            be, pl_dtype = x_pl._backend, x_pl.dtype
            calls["pylucid.kernel"] = lambda: op.op_class.dispatch(
                be, x, shape=shape, dtype=pl_dtype
            )
        else:
            missing["pylucid.kernel"] = f"{op.name}'s dispatch takes op parameters"
        if half:  # what a NumPy user writes: widen, compute in float32, round
            calls["numpy"] = lambda: np_fn(x.astype(np.float32)).astype(x.dtype)
        else:
            calls["numpy"] = lambda: np_fn(x)
            if "numpy.out" in impls and isinstance(np_fn, np.ufunc):
                out = np.empty_like(x)  # NumPy at its best: no allocation, no page faults
                calls["numpy.out"] = lambda: np_fn(x, out=out)
        if torch_fn is not None:
            xt = _torch_tensor(libs.torch, x, dtype)
            calls["torch"] = lambda: torch_fn(xt)
        if mlx_fn is not None:
            xm = _mlx_array(mx, x, dtype)
            calls["mlx"] = lambda: mx.eval(mlx_fn(xm))
        if mx is not None and "pylucid.mlx" in impls:
            x_gpu = x_pl.to("gpu")
            calls["pylucid.mlx"] = lambda: mx.eval(call(x_gpu)._storage)
    else:
        x_pl = pl.from_numpy(x).requires_grad_()
        g_pl = pl.from_numpy(g)
        if kind == "backward" and ours:
            y_pl = call(x_pl)
            node = y_pl.grad_fn
            calls["pylucid.kernel"] = lambda: node.grad_formula(g)
            calls["pylucid"] = lambda: _backward_and_reset(y_pl, g_pl, x_pl, retain_graph=True)
        elif kind == "forward_backward":
            calls["pylucid"] = lambda: _backward_and_reset(call(x_pl), g_pl, x_pl)
        if np_grad is None:
            missing["numpy"] = f"no NumPy gradient formula for {op.name} in NUMPY_GRADIENTS"
        elif kind == "backward" and "numpy" in impls:
            y_np = np_fn(x)
            calls["numpy"] = lambda: np_grad(x, y_np, g)
        else:
            calls["numpy"] = lambda: np_grad(x, np_fn(x), g)
        if torch_fn is not None:
            xt = libs.torch.from_numpy(x).requires_grad_()
            gt = libs.torch.from_numpy(g)
            if kind == "backward":
                yt = torch_fn(xt)
                calls["torch"] = lambda: _backward_and_reset(yt, gt, xt, retain_graph=True)
            else:
                calls["torch"] = lambda: _backward_and_reset(torch_fn(xt), gt, xt)
        if mlx_fn is not None:
            xm = mx.array(x, dtype=getattr(mx, dtype))
            gm = mx.array(g, dtype=getattr(mx, dtype))
            if kind == "backward":
                calls["mlx"] = lambda: mx.eval(mx.vjp(mlx_fn, [xm], [gm])[1])
            else:
                calls["mlx"] = lambda: mx.eval(mx.vjp(mlx_fn, [xm], [gm]))
        if mx is not None and "pylucid.mlx" in impls:
            x_gpu = x_pl.detach().to("gpu").requires_grad_()
            g_gpu = g_pl.to("gpu")
            if kind == "backward":
                y_gpu = call(x_gpu)
                calls["pylucid.mlx"] = lambda: mx.eval(
                    _backward_and_reset(y_gpu, g_gpu, x_gpu, retain_graph=True)._storage
                )
            else:
                calls["pylucid.mlx"] = lambda: mx.eval(
                    _backward_and_reset(call(x_gpu), g_gpu, x_gpu)._storage
                )

    for name in ("torch", "mlx"):
        if name in impls and name not in calls and name not in missing:
            missing[name] = libs.skipped.get(name) or (
                f"{op.name} takes parameters, which {name}'s defaults may not match"
                if op.has_params
                else f"no function named {op.name} (nor an alias) in {name}"
            )
    if "numpy.out" in impls and "numpy.out" not in calls:
        missing["numpy.out"] = "timed for forwards of a NumPy ufunc in float32 and float64 only"
    if "pylucid.mlx" in impls and "pylucid.mlx" not in calls:
        missing["pylucid.mlx"] = libs.skipped.get("pylucid.mlx", "MLX is not installed")
    wanted = {name: fn for name, fn in calls.items() if name in impls}
    return wanted, {name: why for name, why in missing.items() if name in impls}


def _under_autocast(call: Callable[[Any], Any], x: Any) -> Any:
    """``call(x)`` under ``pl.autocast`` to ``x``'s half dtype (a ``FORCE_FP32`` op then
    returns its float32 result)."""
    with pl.autocast(dtype=x.dtype):
        return call(x)


def _backward_and_reset(y: Any, g: Any, x: Any, retain_graph: bool = False) -> Any:
    """``y.backward(g)``; clear and return ``x.grad`` (so no call accumulates into the last)."""
    y.backward(g, retain_graph=retain_graph)
    grad, x.grad = x.grad, None
    return grad
