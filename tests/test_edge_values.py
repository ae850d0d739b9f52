"""Edge-value table: every op of the op database at IEEE edge values, against PyTorch.

For every record of :data:`pylucid.opinfo.OPS`, on both backends and in float32 and
float64, the forward and the gradient (backward of the sum of the outputs, i.e. an upstream
gradient of ones) at edge values are compared with PyTorch's in the same dtype
(``OpInfo.torch``):

- the edge values :func:`edge_values`: ±0, ±inf, nan, the smallest subnormal, the smallest
  normal, the largest finite, the extreme binades (1e-30 / 1e30 in float32, 1e-300 / 1e300
  in float64; 1e-24 / 1e20 and 1e-160 / 1e160, whose squares leave the range) and a few
  ordinary values; plus, per op, values near its own overflow and underflow thresholds
  (:data:`EXTRA`: e.g. ``exp`` around ln(max), ln(smallest normal), ln(smallest subnormal));
- elementwise ops take all of them at once, with an upstream gradient of ones; binary ops
  every pair (full grids, so that each gradient element is that of one pair) and ``where``
  every triple of a condition and two values; the other ops (reductions, softmax, matmul,
  shape ops) an ordinary sample of the record's first and last shapes with one element
  replaced by an edge value (each edge value, each input), and tensors filled with one of
  :func:`_pair_values` but for a first element holding another (each pair, each input), so
  that reductions meet inf with -inf, overflowing sums, constant slices and ties; their
  upstream gradient is ``linspace(0.5, 1.5)`` (ones would make the gradients of softmax and
  log_softmax identically 0).

Compared: the nan positions, the inf positions and signs, the sign of zero results of the
forward (IEEE defines them for these ops; the sign of a zero *gradient* depends on the
order of the formula's multiplications and carries no meaning, so it is not compared), and
finite values within :data:`ULPS` units in the last place (ULP distance counted on the
ordered integers of the floats, so it is exact across binades and subnormals). The ops of
:data:`NORMWISE` (sums, normalisations, matmul), whose finite results cancel, compare
finite values normwise instead: within ``NORM_ULPS`` ULP of the tensor's largest magnitude
(see :func:`_normwise_scale`); the accuracy of their ordinary values is the business of
``tests/test_ops_table.py`` and ``tests/test_differential.py``, this table's is their
special values and range. Integer and bool outputs must be equal.

Where pylucid deliberately differs from PyTorch - a more accurate result, or NumPy's
convention where PyTorch has another - the expected value is encoded explicitly in
:data:`DEVIATIONS`, each with the reason; no op or value is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo import OPS, OpInfo
from pylucid.opinfo import binary as binary_records
from pylucid.opinfo import elementwise as elementwise_records
from pylucid.opinfo import layers as layer_records
from pylucid.opinfo import losses as loss_records
from tests.conftest import DEVICES, MLX_MISSING, TORCH_REASON

torch = pytest.importorskip(
    "torch", reason=TORCH_REASON
)
#: The exact values of the deviations from PyTorch (50-digit arithmetic).
mpmath = pytest.importorskip(
    "mpmath", reason='mpmath gives the exact values of the deviations: pip install "pylucid[peers]"'
)

FLOATS = [pytest.param(pl.float32, id="float32"), pytest.param(pl.float64, id="float64")]
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64}

#: ULP bound on finite results, forward and gradient. Each side is within about 1 ULP of
#: the correctly rounded value for a forward (pylucid's kernels: <= 1 ULP but MLX's float32
#: erf, 2.4; PyTorch's SLEEF/libm kernels: <= 1 ULP) and within about 2 for a gradient of
#: several roundings (e.g. g * b / (a^2 + b^2)), so 4 bounds the difference of the two with
#: a margin; the ops with a looser bound below say why.
ULPS = 4
#: Per-op bounds beyond :data:`ULPS`, with the reason.
OP_ULPS: dict[str, int] = {
    # A product of up to 23 factors (prod over (0, -1) of a 2 x 3 x 4 tensor): 22 roundings,
    # on either side, in another order.
    "prod": 24,
    # float32 mlx: Phi(x) = (1 + erf(x / sqrt 2)) / 2 from Cephes' erf (2.4 ULP) for
    # -sqrt 2 < x < 0, where 1 + erf cancels by up to 5x: 8 ULP measured (12 bound), and
    # gelu' = Phi + x phi cancels near its zero at x = -0.75 (not an edge value).
    "gelu": 12,
}
#: Ops whose finite results are sums that can cancel: compared normwise (cross_entropy's
#: gradient is the difference softmax - q of two probabilities; the layers' outputs and
#: gradients are sums of products, or of deviations from a mean).
NORMWISE = frozenset(
    {"sum", "mean", "var", "std", "logsumexp", "softmax", "log_softmax", "matmul", "cross_entropy"}
    | {"conv2d", "avg_pool2d", "adaptive_avg_pool2d", "layer_norm", "batch_norm"}
)
#: The normwise bound, in ULP of the tensor's scale: a sum of up to 24 terms rounds up to
#: 24 times on either side, in different orders.
NORM_ULPS = 64


# -- edge values -------------------------------------------------------------------------------
def edge_values(dtype: pl.DType) -> np.ndarray:
    """The edge values common to every op, in ``dtype`` (see the module docstring)."""
    info = np.finfo(dtype.numpy)
    tiny, subnormal, huge = float(info.tiny), float(info.smallest_subnormal), float(info.max)
    small, large = (1e-30, 1e30) if dtype is pl.float32 else (1e-300, 1e300)
    # Values whose squares underflow or overflow (the quotients and norms of div, atan2 ...).
    square_small, square_large = (1e-24, 1e20) if dtype is pl.float32 else (1e-160, 1e160)
    magnitudes = [subnormal, tiny, small, square_small, 0.5, 1.0, 2.5, square_large, large, huge]
    values = [0.0, -0.0, math.inf, -math.inf, math.nan]
    values += [sign * m for m in magnitudes for sign in (1.0, -1.0)]
    return np.array(values, dtype=dtype.numpy)


def _thresholds(dtype: pl.DType) -> dict[str, float]:
    """The natural logarithms of the largest finite, the smallest normal and the smallest
    subnormal ``dtype`` (where exp overflows, leaves the normals, underflows to 0)."""
    info = np.finfo(dtype.numpy)
    return {
        "ln_max": math.log(float(info.max)),
        "ln_tiny": math.log(float(info.tiny)),
        "ln_subnormal": math.log(float(info.smallest_subnormal)),
    }


def _exp_like(dtype: pl.DType) -> list[float]:
    """Around the overflow and underflow thresholds of e^x (and of e^x / 2: sinh, cosh)."""
    t = _thresholds(dtype)
    around = [t["ln_max"], t["ln_max"] + math.log(2.0), t["ln_tiny"], t["ln_subnormal"]]
    return [v + d for v in around for d in (-0.5, 0.5)] + [-v for v in around]


def _exp2_like(dtype: pl.DType) -> list[float]:
    info = np.finfo(dtype.numpy)
    edges = [info.maxexp, info.minexp, info.minexp - info.nmant]  # 2^128, 2^-126, 2^-149
    return [float(e) + d for e in edges for d in (-0.5, 0.5)]


def _saturating(dtype: pl.DType) -> list[float]:
    """Where sigmoid, tanh, erf and the activations saturate, and where their e^-|x| (or
    e^(-x^2)) leaves the normals or underflows."""
    t = _thresholds(dtype)
    values = [4.0, 6.0, 10.0, 20.0, 27.0, 50.0]
    values += [t["ln_max"] + 0.5, -t["ln_tiny"] + 0.5, -t["ln_subnormal"] + 1.0]
    values += [math.sqrt(-t["ln_tiny"]) + 0.1, math.sqrt(-t["ln_subnormal"]) + 0.1]
    return values + [-v for v in values]


def _square_root_of_max(dtype: pl.DType) -> list[float]:
    """Around sqrt(largest finite) (where x^2 overflows) and beyond, where 1 / x^2 is a
    subnormal (atan's gradient)."""
    root = math.sqrt(float(np.finfo(dtype.numpy).max))
    return [root * 0.99, root * 1.01, root * 1e3, -root * 1.01]


def _near_one(dtype: pl.DType) -> list[float]:
    below = float(np.nextafter(dtype.numpy.type(1), dtype.numpy.type(0)))
    return [1.0, -1.0, below, -below, 1.5, -1.5]


def _large_arguments(dtype: pl.DType) -> list[float]:
    """Arguments of sin, cos, tan that need an exact argument reduction."""
    return [1e6, -1e6, 1e22, 3.0e38, float(np.float32(math.pi / 2)), math.pi / 2]


def _pow_scalar_range(dtype: pl.DType) -> list[float]:
    """Where x^3.5 and its gradient 3.5 x^2.5 overflow or underflow."""
    info = np.finfo(dtype.numpy)
    huge, subnormal = float(info.max), float(info.smallest_subnormal)
    values = [huge ** (1 / 3.5), huge ** (1 / 2.5), subnormal ** (1 / 3.5), subnormal ** (1 / 2.5)]
    return [v * f for v in values for f in (0.9, 1.1)]


#: Extra values per op, near its own overflow and underflow thresholds.
EXTRA: dict[str, Callable[[pl.DType], list[float]]] = {
    "exp": _exp_like,
    "expm1": _exp_like,
    "sinh": _exp_like,
    "cosh": _exp_like,
    "exp2": _exp2_like,
    "sigmoid": _saturating,
    "silu": _saturating,
    "softplus": _saturating,
    "tanh": _saturating,
    "erf": _saturating,
    "gelu": _saturating,
    "elu": _saturating,
    "atan": _square_root_of_max,
    "square": _square_root_of_max,
    "asin": _near_one,
    "acos": _near_one,
    "log1p": _near_one,
    "clamp": lambda dtype: [-1.0, 2.0, -1.0000001, 2.0000002],
    "sin": _large_arguments,
    "cos": _large_arguments,
    "tan": _large_arguments,
    "pow_scalar": _pow_scalar_range,
}

#: Ops that are not filled with ±max: their results add up several terms of the fill, so
#: where those overflow the partial sums (max + max, or -max next to inf) IEEE arithmetic
#: gives inf, -inf or nan by the order the kernel sums in; single ±max values are planted.
_NO_MAX_FILL = frozenset({"sum", "mean", "matmul", "conv2d", "avg_pool2d", "adaptive_avg_pool2d"})


def _pair_values(info: OpInfo, dtype: pl.DType) -> list[tuple[str, float]]:
    """The (name, value) pairs that fill tensors around one another (:func:`cases`)."""
    huge = float(np.finfo(dtype.numpy).max)
    large, small = (1e30, 1e-30) if dtype is pl.float32 else (1e300, 1e-300)
    values = [("inf", math.inf), ("-inf", -math.inf), ("nan", math.nan), ("0", 0.0)]
    values += [("large", large), ("small", small), ("-large", -large)]
    if info.name not in _NO_MAX_FILL:
        values += [("max", huge), ("-max", -huge)]
    return values


# -- how each op meets the edge values ---------------------------------------------------------
_ELEMENTWISE = {info.name for info in elementwise_records.RECORDS} | {
    "log2",
    "neg",
    "pow_scalar",
    "clone",
    "to_dtype",
    "to_device",
}
_BINARY = {info.name for info in binary_records.RECORDS} - {"where"} | {"add", "sub", "mul", "div"}


@dataclass(frozen=True)
class Case:
    """One call of an op: its inputs (in the dtype), a label, and whether its upstream
    gradient is ones (elementwise calls) or ``linspace(0.5, 1.5)`` (the others)."""

    label: str
    arrays: tuple[np.ndarray, ...]
    ones: bool = False


def cases(info: OpInfo, dtype: pl.DType) -> list[Case]:
    """The calls that put ``info``'s op at the edge values (see the module docstring)."""
    values = edge_values(dtype)
    if info.name in EXTRA:
        extra = np.array(EXTRA[info.name](dtype), dtype=np.float64).astype(dtype.numpy)
        values = np.concatenate([values, extra])
    if info.name in _ELEMENTWISE:
        return [Case("all values", (values,), ones=True)]
    # Binary ops and where take full grids (not broadcast inputs): each element's gradient
    # is then that of one pair, not a sum over many.
    if info.name in _BINARY:
        return [Case("all pairs", tuple(np.meshgrid(values, values, indexing="ij")), ones=True)]
    if info.name == "where":
        conditions = np.array([-1.0, 0.0, 1.0, math.nan], dtype=dtype.numpy)
        triple = tuple(np.meshgrid(conditions, values, values, indexing="ij"))
        return [Case("all triples", triple, ones=True)]
    return _planted_cases(info, dtype)


def _planted_cases(info: OpInfo, dtype: pl.DType) -> list[Case]:
    """An ordinary sample of each shape of the record with one element replaced by each
    edge value (in each input), and, per input, tensors filled with one value of
    :func:`_pair_values` but for a first element holding another."""
    rng = np.random.default_rng(7)
    found = []
    # The first and the last shape combination of the record (the simplest and, by the
    # records' convention, the broadest): the edge values, not the shapes, are the point.
    for shapes in dict.fromkeys((info.shapes[0], info.shapes[-1])):
        sample = [a.astype(dtype.numpy) for a in info.sample(rng, shapes)]
        for i, base in enumerate(sample):
            if base.size == 0:
                continue
            for v in edge_values(dtype):
                planted = base.copy()
                planted.flat[0] = v
                arrays = tuple(planted if j == i else a for j, a in enumerate(sample))
                found.append(Case(f"{shapes} input {i} [0] = {v!r}", arrays))
            pairs = _pair_values(info, dtype)
            for first_name, first in pairs:
                for fill_name, fill in pairs:
                    filled = np.full(base.shape, fill, dtype=dtype.numpy)
                    filled.flat[0] = first
                    arrays = tuple(filled if j == i else a for j, a in enumerate(sample))
                    label = f"{shapes} input {i} filled with {fill_name}, [0] = {first_name}"
                    found.append(Case(label, arrays))
    return found


# -- running an op in pylucid and in PyTorch ---------------------------------------------------
def _as_list(result: object) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _upstream(shape: tuple[int, ...], ones: bool) -> np.ndarray:
    """The upstream gradient of an output: ones, or ``linspace(0.5, 1.5)`` over it."""
    if ones:
        return np.ones(shape)
    return np.linspace(0.5, 1.5, math.prod(shape)).reshape(shape)


def run_pylucid(case: Case, info: OpInfo, dtype: pl.DType, device: str):
    """The outputs and input gradients (None where none) of one call, as NumPy arrays."""
    inputs = [pl.tensor(a, dtype=dtype, device=device, requires_grad=True) for a in case.arrays]
    outputs = _as_list(info.call(*inputs))
    differentiable = [o for o in outputs if o.requires_grad]
    if differentiable:
        seeds = [_upstream(o.shape, case.ones) for o in differentiable]
        pl.graph.backward(
            differentiable,
            [pl.tensor(s, dtype=o.dtype, device=device) for s, o in zip(seeds, differentiable)],
        )
    grads = [None if x.grad is None else x.grad.numpy() for x in inputs]
    return [o.numpy() for o in outputs], grads


def run_torch(case: Case, info: OpInfo, dtype: pl.DType):
    """The same with PyTorch in the same dtype."""
    torch_dtype = TORCH_DTYPES[dtype.name]
    inputs = [torch.tensor(a, dtype=torch_dtype, requires_grad=True) for a in case.arrays]
    outputs = _as_list(info.torch(*inputs))
    differentiable = [o for o in outputs if o.requires_grad]
    if differentiable and pl.ops.get_schema(info.name).differentiable:  # (floor_divide: no)
        seeds = [
            torch.tensor(_upstream(tuple(o.shape), case.ones), dtype=o.dtype)
            for o in differentiable
        ]
        torch.autograd.backward(differentiable, seeds)
    grads = [None if x.grad is None else x.grad.numpy() for x in inputs]
    return [o.detach().numpy() for o in outputs], grads


# -- deliberate differences from PyTorch -------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What a deviation sees: the call, its dtype, pylucid's outputs and PyTorch's value of
    the output or gradient being compared."""

    case: Case
    dtype: pl.DType
    outputs: list[np.ndarray]
    torch_value: np.ndarray
    device: str


@dataclass(frozen=True)
class Deviation:
    """Where pylucid deliberately gives another value than PyTorch: for the output
    (``which="forward"``) or the gradient of input ``which`` (an int), where
    ``applies(outcome)`` holds, pylucid must give ``expected(outcome)`` (broadcast to the
    value's shape) instead of PyTorch's value, within ``ulps(outcome)`` ULP there if given,
    with either sign of zero if ``signless``."""

    which: str | int
    applies: Callable[[Outcome], np.ndarray]
    expected: Callable[[Outcome], np.ndarray]
    reason: str
    ulps: Callable[[Outcome], np.ndarray] | None = None
    signless: bool = False


def _exact(fn: Callable[..., object], dtype: pl.DType, *arrays: np.ndarray) -> np.ndarray:
    """``fn`` evaluated with 50-digit mpmath on the broadcast inputs, rounded to ``dtype``;
    nan where ``fn`` is undefined (the deviations apply it only where it is defined)."""
    broadcast = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in arrays])
    out = np.full(broadcast[0].shape, np.nan)
    with mpmath.workdps(50):
        for index in np.ndindex(out.shape):
            args = [float(a[index]) for a in broadcast]
            if all(math.isfinite(v) for v in args):
                try:
                    out[index] = float(fn(*[mpmath.mpf(v) for v in args]))
                except (ZeroDivisionError, OverflowError, ValueError):
                    pass
    with np.errstate(over="ignore"):
        return out.astype(dtype.numpy)


def _exact_on(fn: Callable[..., object]) -> Callable[[Outcome], np.ndarray]:
    """The expected value ``fn(*inputs)`` exactly (an upstream gradient of ones)."""
    return lambda o: _exact(fn, o.dtype, *o.case.arrays)


def _ln_max(dtype: pl.DType) -> float:
    return _thresholds(dtype)["ln_max"]


def _torch_overflows_exp(o: Outcome) -> np.ndarray:
    """Where e^|x| overflows (finite x): PyTorch's sinh, cosh (e^x / 2) and its sigmoid and
    silu (1 / (1 + e^-x)) go through that overflow."""
    x = o.case.arrays[0]
    return np.isfinite(x) & (np.abs(x) > _ln_max(o.dtype))


def _torch_sigmoid_underflows(o: Outcome) -> np.ndarray:
    x = o.case.arrays[0]
    return np.isfinite(x) & (x < -_ln_max(o.dtype))


def _square_leaves_normals(x: np.ndarray) -> np.ndarray:
    """Where x^2, in x's dtype, overflows or is not a normal number."""
    with np.errstate(over="ignore", under="ignore"):
        square = x * x
    return np.isfinite(x) & ((square < np.finfo(x.dtype).tiny) | np.isinf(square)) & (x != 0)


def _norm_leaves_normals(o: Outcome) -> np.ndarray:
    """Where a^2 + b^2, in the dtype, is 0, subnormal or inf (finite a and b)."""
    a, b = o.case.arrays
    with np.errstate(over="ignore", under="ignore"):
        norm = a * a + b * b
    leaves = (norm < np.finfo(a.dtype).tiny) | np.isinf(norm)
    return np.isfinite(a) & np.isfinite(b) & leaves


def _atan2_grad(which: int) -> Callable[[Outcome], np.ndarray]:
    """The exact gradient of atan2 for input ``which`` (nan at the origin)."""

    def exact(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
        norm = a * a + b * b
        if norm == 0:
            return mpmath.nan
        return (b if which == 0 else -a) / norm

    return lambda o: _exact(exact, o.dtype, *o.case.arrays)


def _reduced_rows(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, Callable]:
    """``x`` with ``axes`` moved last and flattened into one, and the inverse reshaping."""
    axes = tuple(a % x.ndim for a in axes)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    rows = moved.reshape(moved.shape[: x.ndim - len(axes)] + (-1,))

    def back(r: np.ndarray) -> np.ndarray:
        return np.moveaxis(r.reshape(moved.shape), tuple(range(x.ndim - len(axes), x.ndim)), axes)

    return rows, back


def _prod_grad(o: Outcome) -> np.ndarray:
    """d prod(x, axis=(0, -1)) / dx exactly: the product of the other elements of each
    element's slice (times the upstream gradient)."""
    x = o.case.arrays[0]
    rows, back = _reduced_rows(x, (0, -1))
    upstream = _upstream(rows.shape[:-1], o.case.ones).astype(x.dtype)
    out = np.empty(rows.shape, dtype=np.float64)
    with mpmath.workdps(50):
        for index in np.ndindex(rows.shape[:-1]):
            row = [mpmath.mpf(float(v)) for v in rows[index]]
            for j in range(len(row)):
                others = mpmath.fprod(row[:j] + row[j + 1 :])
                out[index + (j,)] = float(others * mpmath.mpf(float(upstream[index])))
    return back(out.astype(x.dtype))


def _prod_exact(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """prod(x, axis=axes) exactly, rounded to x's dtype (nan where a slice holds nan, or
    both 0 and inf)."""
    rows, _ = _reduced_rows(x, axes)
    out = np.empty(rows.shape[:-1], dtype=np.float64)
    with mpmath.workdps(50):
        for index in np.ndindex(rows.shape[:-1]):
            row = [float(v) for v in rows[index]]
            sign = math.prod(math.copysign(1.0, v) for v in row)  # IEEE: signs of zeros too
            if any(math.isnan(v) for v in row) or (0.0 in row and any(map(math.isinf, row))):
                out[index] = math.nan
            elif any(map(math.isinf, row)):
                out[index] = math.copysign(math.inf, sign)
            else:
                magnitude = float(mpmath.fprod(abs(mpmath.mpf(v)) for v in row))
                out[index] = math.copysign(magnitude, sign)
    with np.errstate(over="ignore"):
        return out.astype(x.dtype)


def _nan_shares(axis: int) -> Callable[[Outcome], np.ndarray]:
    """The gradient of max / min over ``axis`` where a slice holds nan: its nan elements
    share the upstream gradient equally, the others get 0."""

    def expected(o: Outcome) -> np.ndarray:
        x = o.case.arrays[0]
        nan = np.isnan(x)
        count = nan.sum(axis=axis, keepdims=True)
        shape = list(x.shape)
        shape[axis] = 1
        upstream = _upstream(tuple(shape), o.case.ones).astype(x.dtype)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(nan, upstream / count, 0).astype(x.dtype)

    return expected


def _slice_holds_nan(axis: int) -> Callable[[Outcome], np.ndarray]:
    def applies(o: Outcome) -> np.ndarray:
        x = o.case.arrays[0]
        return np.broadcast_to(np.isnan(x).any(axis=axis, keepdims=True), x.shape)

    return applies


def _from_saved_result(derivative: Callable[[mpmath.mpf], mpmath.mpf]):
    """The gradient as the exact ``derivative`` of pylucid's own saved result y."""
    return lambda o: _exact(derivative, o.dtype, o.outputs[0])


def _pow_grad_a(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    """b a^(b-1) exactly, 0 where b = 0, and nan where a^b is (a < 0 finite, b not an
    integer)."""
    if b == 0:
        return mpmath.mpf(0)
    if a < 0 and b != int(b):
        return mpmath.nan
    return b * a ** (b - 1)


def _zero_tie(o: Outcome) -> np.ndarray:
    return (o.case.arrays[0] == 0) & (o.case.arrays[1] == 0)


def _finite_result(o: Outcome) -> np.ndarray:
    return np.isfinite(o.outputs[0])


def _silu_grad_exact(x: mpmath.mpf) -> mpmath.mpf:
    s = 1 / (1 + mpmath.exp(-x))
    return s * (1 + x * (1 - s))


def _gelu_grad_exact(x: mpmath.mpf) -> mpmath.mpf:
    return mpmath.ncdf(x) + x * mpmath.npdf(x) if x > -40 else mpmath.mpf(0)


def _var_family(axes: tuple[int, ...], correction: int, root: bool, keepdims: bool):
    """The exact var (or std, ``root``) over ``axes`` and its gradient, as the expected
    values of their deviations: ``(forward, grad)`` functions of an :class:`Outcome`."""

    def moments(o: Outcome):
        x = o.case.arrays[0]
        rows, back = _reduced_rows(x, axes)
        n = rows.shape[-1]
        values = np.empty(rows.shape[:-1])
        grads = np.empty(rows.shape)
        upstream = (
            _upstream(
                (rows.shape[:-1] if not keepdims else _kept_shape(x.shape, axes)), o.case.ones
            )
            .astype(x.dtype)
            .reshape(rows.shape[:-1])
        )
        with mpmath.workdps(50):
            for index in np.ndindex(rows.shape[:-1]):
                row = [mpmath.mpf(float(v)) for v in rows[index]]
                mean = mpmath.fsum(row) / n
                divisor = max(0, n - correction)
                var = _divide(mpmath.fsum((v - mean) ** 2 for v in row), divisor)
                value = mpmath.sqrt(var) if root else var
                g = mpmath.mpf(float(upstream[index]))
                for j, v in enumerate(row):
                    if root and value == 0:  # pylucid's choice at a constant slice: 0,
                        slope = mpmath.mpf(0)  # a subgradient, as abs'(0) (PyTorch: nan)
                    elif root:
                        slope = _divide(v - mean, divisor * value)
                    else:
                        slope = _divide(2 * (v - mean), divisor)
                    grads[index + (j,)] = _to_float(g * slope)
                values[index] = _to_float(value)
        shape = _kept_shape(x.shape, axes) if keepdims else rows.shape[:-1]
        return values.reshape(shape).astype(x.dtype), back(grads.astype(x.dtype))

    return (lambda o: moments(o)[0]), (lambda o: moments(o)[1])


def _divide(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    """a / b with IEEE's answers where b is 0 (±inf, nan for 0 / 0), which mpmath raises on."""
    if b != 0:
        return a / b
    if a == 0 or mpmath.isnan(a):
        return mpmath.nan
    return mpmath.inf if a > 0 else -mpmath.inf


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    reduced = {a % len(shape) for a in axes}
    return tuple(1 if i in reduced else n for i, n in enumerate(shape))


def _to_float(value: mpmath.mpf) -> float:
    """``value`` as a float64, nan where mpmath has no number (0 / 0, inf - inf)."""
    try:
        return float(value)
    except (TypeError, ValueError, ZeroDivisionError):
        return math.nan


def _everywhere(o: Outcome) -> np.ndarray:
    return np.ones(o.torch_value.shape, dtype=bool)


def _gelu_negative(o: Outcome) -> np.ndarray:
    """gelu(x) = x Phi(x) exactly for x < 0, with the sign of x where it underflows (and
    gelu(-0) = -0); Phi is taken as 0 below x = -40, where it underflows float64."""
    x = o.case.arrays[0]
    exact = _exact(lambda v: v * mpmath.ncdf(v) if v > -40 else 0, o.dtype, x)
    return np.copysign(exact, x)


def _gelu_ulps(o: Outcome) -> np.ndarray:
    """The numba kernels' gelu is within 6.9 ULP (float32, all inputs) and 4.7 ULP (float64,
    sampled) of the exact value (:mod:`pylucid.kernels.simd_math`), inside
    :data:`OP_ULPS`'s bound against PyTorch's own rounding, as mlx's."""
    return np.full(o.case.arrays[0].shape, float(OP_ULPS["gelu"]))


_SAVED_RESULT = (
    "the gradient is a function of the saved result y, which pylucid and PyTorch round "
    "differently by an ULP; near y = 1 the gradient magnifies that (1 - y cancels: 400x at "
    "x = 6), so pylucid's is checked as the exact derivative at its own y"
)
_MORE_ACCURATE = "pylucid gives the exact value (rounded) where PyTorch's formula {}"
#: maximum and minimum of +0 and -0.
_SIGNED_ZERO_TIE = Deviation(
    "forward",
    _zero_tie,
    lambda o: o.case.arrays[0],
    "the sign of a tie of +0 and -0 is unspecified (IEEE 754 maxNum / minNum): numba returns "
    "the first argument, as NumPy, MLX and PyTorch the second",
    signless=True,
)


def _ignored_rows(o: Outcome) -> np.ndarray:
    """The logits of cross_entropy's ignored examples (the record's fixed targets)."""
    x = o.case.arrays[0]
    axis = 0 if x.ndim == 1 else 1
    ignored = loss_records._targets(x.shape) == loss_records._IGNORED
    return np.broadcast_to(np.expand_dims(ignored, axis), x.shape)


def _cross_entropy_wide(o: Outcome) -> np.ndarray:
    """The record's loss in x87 extended precision (its exponent range holds every
    intermediate of float64 logits), rounded to the dtype."""
    with np.errstate(over="ignore", invalid="ignore"):
        wide = loss_records._reference(o.case.arrays[0].astype(np.longdouble))
        return wide.astype(o.dtype.numpy)


def _torch_overflows_smoothing(o: Outcome) -> np.ndarray:
    return np.isinf(o.torch_value) & np.isfinite(_cross_entropy_wide(o))


def _square_overflows(x: np.ndarray, dtype: pl.DType) -> np.ndarray:
    """Finite ``x`` whose square overflows ``dtype``."""
    return np.isfinite(x) & (
        np.abs(x.astype(np.float64)) > math.sqrt(float(np.finfo(dtype.numpy).max))
    )


def _layer_norm_wide(o: Outcome) -> list[np.ndarray]:
    """layer_norm's output and gradients (of input, weight, bias) in x87 extended precision,
    whose exponent range holds the squares of every float64 deviation, rounded to the dtype."""
    x, w, b = (a.astype(np.longdouble) for a in o.case.arrays)
    g = _upstream(x.shape, o.case.ones).astype(np.longdouble)
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    rows = tuple(range(x.ndim - w.ndim))
    with np.errstate(all="ignore"):
        centred = x - x.mean(axis=axes, keepdims=True)
        rstd = 1 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + 1e-5)
        xhat = centred * rstd
        h = g * w
        dx = rstd * (
            h - h.mean(axis=axes, keepdims=True) - xhat * (h * xhat).mean(axis=axes, keepdims=True)
        )
        values = [xhat * w + b, dx, (g * xhat).sum(axis=rows), g.sum(axis=rows)]
        return [v.astype(o.dtype.numpy) for v in values]


def _batch_norm_in_range(o: Outcome, index: int) -> np.ndarray:
    """Where batch_norm's value (``index``: of :func:`_batch_norm_wide`) comes from a
    channel whose variance float64 holds (pylucid's statistics are then those of extended
    precision, rounded), broadcast to the value's shape."""
    x = o.case.arrays[0].astype(np.longdouble)
    axes = (0, *range(2, x.ndim))
    with np.errstate(all="ignore"):
        var = ((x - x.mean(axis=axes, keepdims=True)) ** 2).mean(axis=axes, keepdims=True)
    fits = var < 1e300
    return np.broadcast_to(fits, x.shape) if index < 2 else fits.reshape(-1)


def _batch_norm_beyond_range(o: Outcome, index: int) -> np.ndarray:
    """Where batch_norm's value comes from a channel of finite values whose variance is
    beyond float64's range (inf there: ``rstd`` 0)."""
    x = o.case.arrays[0]
    finite = np.isfinite(x).all(axis=(0, *range(2, x.ndim)), keepdims=True)
    finite = np.broadcast_to(finite, x.shape) if index < 2 else finite.reshape(-1)
    return finite & ~_batch_norm_in_range(o, index)


def _batch_norm_limit(o: Outcome, index: int) -> np.ndarray:
    """batch_norm's value where ``rstd`` is 0: the bias (forward), 0 (the gradients)."""
    x, _, b = o.case.arrays
    if index == 0:
        return np.broadcast_to(b.reshape((1, -1) + (1,) * (x.ndim - 2)), x.shape)
    return np.zeros(x.shape if index == 1 else b.shape)


def _batch_norm_wide(o: Outcome) -> list[np.ndarray]:
    """batch_norm's output and gradients (of input, weight, bias) in x87 extended precision,
    rounded to the dtype (the record's: training, the batch's statistics)."""
    x, w, b = (a.astype(np.longdouble) for a in o.case.arrays)
    g = _upstream(x.shape, o.case.ones).astype(np.longdouble)
    axes, channel = (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    w, b = w.reshape(channel), b.reshape(channel)
    with np.errstate(all="ignore"):
        centred = x - x.mean(axis=axes, keepdims=True)
        rstd = 1 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + 1e-5)
        xhat = centred * rstd
        inner = g - g.mean(axis=axes, keepdims=True)
        dx = w * rstd * (inner - xhat * (g * xhat).mean(axis=axes, keepdims=True))
        values = [xhat * w + b, dx, (g * xhat).sum(axis=axes), g.sum(axis=axes)]
        return [v.astype(o.dtype.numpy) for v in values]


def _padding_taps_skipped(o: Outcome) -> np.ndarray:
    """The record's conv2d without the products of the weight with the zero padding (an
    inf or nan weight makes no nan where it meets only the padding), in float64."""
    x, w = (a.astype(np.float64) for a in o.case.arrays)
    stride, padding = layer_records._STRIDE, layer_records._PADDING
    dilation = layer_records._DILATION
    groups = layer_records._groups(x.shape[1], w.shape[1])
    pads = ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2)
    padded, inside = np.pad(x, pads), np.pad(np.ones(x.shape, bool), pads)
    output = layer_records._output(x.shape[2:], w.shape[2:], stride, padding, dilation)
    out = np.zeros((x.shape[0], w.shape[0], *output))
    taps = layer_records._taps
    per_in, per_out = w.shape[1], w.shape[0] // groups
    with np.errstate(invalid="ignore"):
        for ((i, j), patch), (_, mask) in zip(
            taps(padded, w.shape[2:], stride, dilation, output),
            taps(inside, w.shape[2:], stride, dilation, output),
        ):
            for g in range(groups):
                for o_ in range(g * per_out, (g + 1) * per_out):
                    for c in range(per_in):
                        term = patch[:, g * per_in + c] * w[o_, c, i, j]
                        out[:, o_] += np.where(mask[:, g * per_in + c], term, 0.0)
    return out.astype(o.dtype.numpy)


def _mlx_meets_padding(o: Outcome) -> np.ndarray:
    """MLX's own (float32) convolution, where PyTorch gives nan."""
    native = o.device == "gpu" and o.dtype is pl.float32
    return np.full(o.torch_value.shape, native) & np.isnan(o.torch_value)


def _cumprod_grad_horner(o: Outcome) -> np.ndarray:
    """The record's cumprod gradient (along the last axis), ``sum_{k >= i} g_k prod_{j <= k,
    j != i} x_j``, in its Horner form ``P_i S_i`` (``P_i = prod_{j < i} x_j``, ``S_i = g_i +
    x_{i+1} S_{i+1}``), in x87 extended precision, rounded to the dtype."""
    (x,) = (a.astype(np.longdouble) for a in o.case.arrays)
    g = _upstream(x.shape, o.case.ones).astype(np.longdouble)
    n = x.shape[-1]
    out = np.empty(x.shape, np.longdouble)
    with np.errstate(all="ignore"):
        suffix = np.zeros(x.shape[:-1], np.longdouble)
        for i in range(n - 1, -1, -1):
            suffix = g[..., i] + (x[..., i + 1] * suffix if i + 1 < n else 0)
            out[..., i] = suffix
        prefix = np.ones(x.shape[:-1], np.longdouble)
        for i in range(n):
            out[..., i] *= prefix
            prefix = prefix * x[..., i]
        return out.astype(o.dtype.numpy)


def _remainder_overflows(o: Outcome) -> np.ndarray:
    """Where PyTorch's remainder is nan for finite a and non-zero b: its vectorised
    ``a - b floor(a / b)`` overflows with ``a / b``."""
    a, b = np.broadcast_arrays(*o.case.arrays)
    return np.isnan(o.torch_value) & np.isfinite(a) & np.isfinite(b) & (b != 0)


def _exact_remainder(o: Outcome) -> np.ndarray:
    """``fmod(a, b)``, plus ``b`` where non-zero and of the other sign: exact."""
    a, b = np.broadcast_arrays(*o.case.arrays)
    with np.errstate(all="ignore"):
        m = np.fmod(a, b)
        return np.where((m != 0) & ((b < 0) != (m < 0)), m + b, m).astype(o.dtype.numpy)


DEVIATIONS: dict[str, list[Deviation]] = {
    "remainder": [
        Deviation(
            "forward",
            _remainder_overflows,
            _exact_remainder,
            _MORE_ACCURATE.format(
                "a - b floor(a / b) gives nan once a / b overflows (a tiny divisor); the "
                "remainder itself is exact (fmod)"
            ),
        )
    ],
    "cumprod": [
        Deviation(
            0,
            _everywhere,
            _cumprod_grad_horner,
            "the expected values are the gradient's definition in Horner form (a prefix "
            "product times a suffix recurrence, no division), as pylucid computes it, in "
            "extended precision: x_i's own value does not enter its gradient, and where the "
            "polynomial in x_{i+1} is infinite it gives its limit; PyTorch's sum g_k y_k / x_i "
            "gives nan for an infinite or nan x_i and loses the products that underflow",
        )
    ],
    "conv2d": [
        Deviation(
            "forward",
            _mlx_meets_padding,
            _padding_taps_skipped,
            "MLX's float32 convolution skips the taps that read the padding, so an inf or nan "
            "weight meeting only the padding gives no nan; PyTorch (and the numba backend and "
            "MLX's float64 path, which read the padding's zeros) multiply it by 0",
        )
    ],
    "layer_norm": [
        Deviation(
            which,
            lambda o, index=index: ~np.isnan(_layer_norm_wide(o)[index]),
            lambda o, index=index: _layer_norm_wide(o)[index],
            "the expected values are those in extended precision (as for var): pylucid "
            "computes float32 in float64 and forms the variance from the deviations, where "
            "PyTorch's float32 variance overflows beyond 1.8e19 or cancels (large rows of "
            "nearly equal values); an inf or overflowing weight makes the input gradient tend "
            "to +-inf, where PyTorch gives nan (inf - inf)",
        )
        for index, which in enumerate(("forward", 0, 1, 2))
    ],
    "batch_norm": [
        Deviation(
            which,
            lambda o, index=index: ~np.isnan(_batch_norm_wide(o)[index])
            & _batch_norm_in_range(o, index),
            lambda o, index=index: _batch_norm_wide(o)[index],
            "the expected values are those in extended precision (as for layer_norm): pylucid "
            "computes float32 in float64 and forms the variance from the deviations, where "
            "PyTorch's float32 variance overflows or cancels, and its x (rstd w) - mean "
            "(rstd w) cancels for large means (a constant channel of 1e300: 1e286, not b), "
            "overflows to inf or gives nan (inf - inf) for a huge or infinite weight, where "
            "pylucid forms (x - mean) rstd w",
        )
        for index, which in enumerate(("forward", 0, 1, 2))
    ]
    + [
        Deviation(
            which,
            lambda o, index=index: _batch_norm_beyond_range(o, index),
            lambda o, index=index: _batch_norm_limit(o, index),
            "a channel of finite values whose variance is beyond float64's range (1e308 "
            "beside 0) has the variance inf in pylucid's float64 statistics, so rstd 0: the "
            "output is the bias and the gradients 0, the limit as the variance grows; "
            "PyTorch's overflowing sums give nan",
            signless=True,
        )
        for index, which in enumerate(("forward", 0, 1))
    ],
    "sinh": [
        Deviation(
            w,
            _torch_overflows_exp,
            _exact_on(f),
            _MORE_ACCURATE.format("e^|x| / 2 overflows first (ln(max) < |x| < ln(max) + ln 2)"),
        )
        for w, f in (("forward", mpmath.sinh), (0, mpmath.cosh))
    ],
    "cosh": [
        Deviation(
            w,
            _torch_overflows_exp,
            _exact_on(f),
            _MORE_ACCURATE.format("e^|x| / 2 overflows first (ln(max) < |x| < ln(max) + ln 2)"),
        )
        for w, f in (("forward", mpmath.cosh), (0, mpmath.sinh))
    ],
    "expm1": [
        Deviation(0, _finite_result, _from_saved_result(lambda y: y + 1), _SAVED_RESULT),
    ],
    "relu": [
        Deviation(
            "forward",
            lambda o: o.case.arrays[0] == 0,
            lambda o: np.zeros_like(o.torch_value),
            "relu(-0) = +0: pylucid thresholds (0 where x <= 0, as PyTorch's threshold and "
            "NumPy's where(x > 0, x, 0)); PyTorch's clamp_min keeps -0; no meaning either way",
        )
    ],
    "sign": [
        Deviation(
            "forward",
            lambda o: np.isnan(o.case.arrays[0]),
            lambda o: o.case.arrays[0],
            "sign(nan) = nan, as NumPy: pylucid propagates NaN; PyTorch gives 0",
        )
    ],
    "abs": [
        Deviation(
            0,
            lambda o: np.isnan(o.case.arrays[0]),
            lambda o: o.case.arrays[0],
            "the gradient at nan is g sign(nan) = nan (NaN propagates); PyTorch's is 0",
        )
    ],
    "gelu": [
        Deviation(
            "forward",
            lambda o: np.signbit(o.case.arrays[0]),
            _gelu_negative,
            _MORE_ACCURATE.format(
                "computes 1 + erf(x / sqrt 2), which cancels for x < 0 (float32: 16 ULP at "
                "x = -2.5, 0 from x = -5.7) and gives +0 for gelu(-0) and underflows of a "
                "negative x Phi(x); pylucid keeps the sign of x"
            ),
            ulps=_gelu_ulps,
        ),
        Deviation(
            "forward",
            lambda o: o.case.arrays[0] > 1e30,  # (and +inf)
            lambda o: o.case.arrays[0],  # (Phi(x) = 1 to every precision: gelu(x) = x)
            _MORE_ACCURATE.format(
                "(its AVX-512 float32 kernel, on the Intel machine) forms x (1 + erf) before "
                "halving it: inf at x = max and nan at x = inf"
            ),
        ),
        Deviation(
            0,
            lambda o: o.case.arrays[0] < -1,
            _exact_on(_gelu_grad_exact),
            _MORE_ACCURATE.format("loses Phi(x) to the cancellation of 1 + erf (0 at x = -10)"),
            ulps=_gelu_ulps,
        ),
    ],
    "sigmoid": [
        Deviation(
            "forward",
            _torch_sigmoid_underflows,
            _exact_on(lambda x: 1 / (1 + mpmath.exp(-x))),
            _MORE_ACCURATE.format("1 / (1 + e^-x) gives 0 once e^-x overflows (x < -ln max)"),
        ),
        Deviation(0, _finite_result, _from_saved_result(lambda y: y * (1 - y)), _SAVED_RESULT),
    ],
    "tanh": [
        Deviation(0, _finite_result, _from_saved_result(lambda y: 1 - y * y), _SAVED_RESULT),
    ],
    "silu": [
        Deviation(
            "forward",
            _torch_sigmoid_underflows,
            _exact_on(lambda x: x / (1 + mpmath.exp(-x))),
            _MORE_ACCURATE.format("x / (1 + e^-x) gives -0 once e^-x overflows (x < -ln max)"),
        ),
        Deviation(
            0,
            lambda o: _torch_sigmoid_underflows(o) | (o.case.arrays[0] > 1),
            _exact_on(_silu_grad_exact),
            _MORE_ACCURATE.format(
                "gives 0 once e^-x overflows, and its 1 - sigmoid(x) cancels for x >> 0 "
                "(float64: 7 ULP at x = 20); pylucid takes sigmoid(-x) from the same e^-|x|"
            ),
        ),
    ],
    "atan": [
        Deviation(
            0,
            lambda o: _square_leaves_normals(o.case.arrays[0]),
            _exact_on(lambda x: 1 / (1 + x * x)),
            _MORE_ACCURATE.format("g / (1 + x^2) gives 0 once x^2 overflows"),
        )
    ],
    "asinh": [
        Deviation(
            0,
            lambda o: _square_overflows(o.case.arrays[0], o.dtype),
            _exact_on(lambda x: 1 / mpmath.sqrt(1 + x * x)),
            _MORE_ACCURATE.format("g / sqrt(x^2 + 1) gives 0 once x^2 overflows"),
        )
    ],
    "acosh": [
        Deviation(
            0,
            lambda o: _square_overflows(o.case.arrays[0], o.dtype),
            _exact_on(lambda x: 1 / mpmath.sqrt(x * x - 1) if abs(x) > 1 else mpmath.nan),
            _MORE_ACCURATE.format("g / sqrt(x^2 - 1) gives 0 once x^2 overflows"),
        )
    ],
    "atanh": [
        Deviation(
            0,
            lambda o: _square_overflows(o.case.arrays[0], o.dtype),
            _exact_on(lambda x: 1 / (1 - x * x)),
            _MORE_ACCURATE.format("g / (1 - x^2) gives -0 once x^2 overflows"),
            signless=True,
        )
    ],
    "log10": [
        Deviation(
            0,
            lambda o: (
                np.isfinite(o.case.arrays[0])
                & (np.abs(o.case.arrays[0]) > float(np.finfo(o.dtype.numpy).max) / 2.302585)
            ),
            _exact_on(lambda x: 1 / (x * mpmath.log(10))),
            _MORE_ACCURATE.format("g / (x ln 10) gives 0 once x ln 10 overflows"),
        )
    ],
    "atan2": [
        Deviation(
            w,
            _norm_leaves_normals,
            _atan2_grad(w),
            _MORE_ACCURATE.format(
                "g b / (a^2 + b^2) loses a^2 + b^2 to overflow or underflow (PyTorch then "
                "gives 0); at the origin, where atan2 has no derivative, pylucid gives nan"
            ),
        )
        for w in (0, 1)
    ],
    "pow": [
        Deviation(
            0,
            lambda o: (
                ~np.isfinite(o.torch_value)
                & np.isfinite(_exact(_pow_grad_a, o.dtype, *o.case.arrays))
            ),
            lambda o: _exact(_pow_grad_a, o.dtype, *o.case.arrays),
            _MORE_ACCURATE.format(
                "b a^(b-1) overflows in a^(b-1) (a subnormal, b tiny: b a^(b-1) = 1 at "
                "a = b = 1e-45)"
            ),
        ),
        Deviation(
            0,
            lambda o: (
                (o.case.arrays[0] < 0)
                & np.isfinite(o.case.arrays[0])
                & (np.floor(o.case.arrays[1]) != o.case.arrays[1])
            ),
            lambda o: np.full_like(o.torch_value, np.nan),
            "where a^b is nan (a < 0 finite, b not an integer) so is pylucid's gradient; "
            "PyTorch's is ±inf where b - 1 rounds to an integer (a = -1e-45, b = 1e-45)",
        ),
    ],
    "maximum": [_SIGNED_ZERO_TIE],
    "minimum": [_SIGNED_ZERO_TIE],
    "prod": [
        Deviation(
            "forward",
            _everywhere,
            lambda o: _prod_exact(o.case.arrays[0], (0, -1)),
            "the product is exact, rounded once (pylucid keeps the running product's exponent "
            "apart): PyTorch's running product overflows to inf where the product of the "
            "slice is finite, and gives nan for inf times products that underflow",
        ),
        Deviation(
            0,
            _everywhere,
            _prod_grad,
            "the gradient is the product of the other elements, computed as such: PyTorch "
            "divides the result by x, which gives nan at an infinite or nan x (the exact "
            "value is finite) and loses bits where the result is subnormal",
        ),
    ],
    "var": [
        Deviation(
            w,
            _everywhere,
            f,
            "the expected values are exact: PyTorch's var backward forms the mean as sum / n, "
            "which overflows for constant slices of ±max (gradient -inf, exact 0)",
        )
        for w, f in zip(("forward", 0), _var_family((-1,), 1, root=False, keepdims=False))
    ],
    "std": [
        Deviation(
            w,
            _everywhere,
            f,
            "the expected values are exact, as for var",
        )
        for w, f in zip(("forward", 0), _var_family((0, 1), 0, root=True, keepdims=True))
    ],
    "cross_entropy": [
        Deviation(
            0,
            _ignored_rows,
            lambda o: np.zeros(o.torch_value.shape, o.dtype.numpy),
            "an ignored example's logits get gradient 0 (the loss does not depend on them); "
            "PyTorch multiplies their softmax by a zero weight, so nan or inf logits give nan",
        ),
        Deviation(
            "forward",
            _torch_overflows_smoothing,
            _cross_entropy_wide,
            _MORE_ACCURATE.format(
                "sums the float32 log-probabilities of the smoothing term, which overflows "
                "(logits near the largest float32)"
            ),
        ),
    ],
    "max": [
        Deviation(
            0,
            _slice_holds_nan(1),
            _nan_shares(1),
            "the max of a slice holding nan is nan and its gradient is shared by the nan "
            "elements (pylucid.ops.reduce); PyTorch's amax gives nan to the whole slice",
        )
    ],
    "min": [
        Deviation(
            0,
            _slice_holds_nan(-1),
            _nan_shares(-1),
            "as max: the nan elements share the gradient; PyTorch gives nan to the slice",
        )
    ],
}


# -- comparison --------------------------------------------------------------------------------
def _ordinal(a: np.ndarray) -> np.ndarray:
    """The floats of ``a`` as integers in the order of the floats (+0 and -0 both 0)."""
    bits = a.view(np.int32 if a.dtype == np.float32 else np.int64).astype(np.int64)
    low = np.iinfo(np.int32 if a.dtype == np.float32 else np.int64).min
    return np.where(bits < 0, low - bits, bits)


def ulp_distance(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """How many floats of the dtype lie between ``actual`` and ``expected`` (finite): exact
    for values of one sign; across zero, the sum of both distances to zero (as floats, which
    cannot overflow)."""
    a, e = _ordinal(actual), _ordinal(expected)
    same_sign = (a >= 0) == (e >= 0)
    across = np.abs(a).astype(np.float64) + np.abs(e).astype(np.float64)
    return np.where(same_sign, np.abs(np.where(same_sign, a - e, 0)).astype(np.float64), across)


def _normwise_scale(values: list[np.ndarray]) -> float:
    """The largest finite magnitude among ``values`` (1 if there is none)."""
    finite = [np.abs(v[np.isfinite(v)]) for v in values]
    return max([float(f.max()) for f in finite if f.size] + [1.0])


def mismatches(
    actual: np.ndarray,
    expected: np.ndarray,
    ulps: np.ndarray,
    zero_signs: np.ndarray | bool,
    scale: float | None = None,
) -> np.ndarray:
    """The mask of elements where ``actual`` differs from ``expected``: another nan or inf
    position, another inf sign, another sign of zero (where ``zero_signs``), or finite
    values more than ``ulps`` apart (or, with a ``scale``, more than ``NORM_ULPS`` ULP of
    the scale apart). Integer and bool arrays must be equal."""
    if actual.dtype.kind in "biu":
        return actual != expected
    nan_a, nan_e = np.isnan(actual), np.isnan(expected)
    bad = nan_a != nan_e
    infinite = (np.isinf(actual) | np.isinf(expected)) & ~(nan_a | nan_e)
    bad |= infinite & (actual != expected)
    finite = np.isfinite(actual) & np.isfinite(expected)
    if scale is None:
        bad |= finite & (ulp_distance(actual, expected) > ulps)
    else:
        eps = float(np.finfo(actual.dtype).eps)
        with np.errstate(over="ignore", invalid="ignore"):  # inf - inf: masked by finite
            error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        bad |= finite & (error > NORM_ULPS * eps * scale)
    zeros = finite & (actual == 0) & (expected == 0) & zero_signs
    return bad | (zeros & (np.signbit(actual) != np.signbit(expected)))


def _describe(case: Case, what: str, actual: np.ndarray, expected: np.ndarray, bad) -> str:
    # Elementwise calls: the inputs of each element are shown with it.
    elementwise = all(a.shape == actual.shape for a in case.arrays)
    actual, expected, bad = (np.atleast_1d(v) for v in (actual, expected, bad))  # 0-d too
    lines = [f"{case.label}: {what}: {int(bad.sum())} of {bad.size} differ"]
    for index in list(zip(*np.nonzero(bad)))[:6]:
        at = f" at {tuple(float(a[index]) for a in case.arrays)}" if elementwise else ""
        lines.append(f"    {index}{at}: pylucid {actual[index]!r}, expected {expected[index]!r}")
    return "\n".join(lines)


def _expected(
    info: OpInfo, which: str | int, outcome: Outcome, ulps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PyTorch's value with the :data:`DEVIATIONS` of ``info``'s op for ``which`` applied,
    the ULP bound of each element, and the mask of elements whose zero sign is free."""
    value = outcome.torch_value
    expected = value
    bound = np.full(value.shape, float(ulps))
    signless = np.zeros(value.shape, dtype=bool)
    for deviation in DEVIATIONS.get(info.name, []):
        if deviation.which != which:
            continue
        applies = np.broadcast_to(deviation.applies(outcome), value.shape)
        if applies.any():
            override = np.broadcast_to(deviation.expected(outcome), value.shape)
            expected = np.where(applies, override, expected).astype(value.dtype)
            if deviation.ulps is not None:
                bound = np.where(applies, deviation.ulps(outcome), bound)
            signless |= applies & deviation.signless
    return expected, bound, signless


def check_case(info: OpInfo, case: Case, dtype: pl.DType, device: str) -> list[str]:
    """The differences of one call from PyTorch (with the deviations), described."""
    outputs, grads = run_pylucid(case, info, dtype, device)
    torch_outputs, torch_grads = run_torch(case, info, dtype)
    ulps = OP_ULPS.get(info.name, ULPS)
    normwise = info.name in NORMWISE
    problems = []
    for k, (actual, value) in enumerate(zip(outputs, torch_outputs)):
        if actual.shape != value.shape or actual.dtype != value.dtype:
            problems.append(
                f"{case.label}: output {k}: {actual.dtype}{actual.shape}, "
                f"PyTorch {value.dtype}{value.shape}"
            )
            continue
        outcome = Outcome(case, dtype, outputs, value, device)
        expected, bound, signless = _expected(info, "forward", outcome, ulps)
        scale = _normwise_scale([expected, *case.arrays]) if normwise else None
        bad = mismatches(actual, expected, bound, zero_signs=~signless, scale=scale)
        if bad.any():
            problems.append(_describe(case, f"output {k}", actual, expected, bad))
    for i, (actual, value) in enumerate(zip(grads, torch_grads)):
        if (actual is None) != (value is None):
            problems.append(f"{case.label}: grad {i}: pylucid {actual}, PyTorch {value}")
            continue
        if actual is None:
            continue
        expected, bound, _ = _expected(info, i, Outcome(case, dtype, outputs, value, device), ulps)
        # The scale of a gradient: its own, or that of the inputs it is a multiple of (the
        # upstream gradient is at most 1.5).
        scale = _normwise_scale([expected, *case.arrays]) if normwise else None
        bad = mismatches(actual, expected, bound, zero_signs=False, scale=scale)
        if bad.any():
            problems.append(_describe(case, f"grad {i}", actual, expected, bad))
    return problems


@pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's var/std of one element
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("info", OPS, ids=[info.name for info in OPS])
def test_edge_values_match_torch(info: OpInfo, dtype: pl.DType, device: str) -> None:
    if "needs_mlx" in info.tags and MLX_MISSING:
        pytest.skip("needs both backends; mlx is not installed")
    problems = []
    for case in cases(info, dtype):
        problems += check_case(info, case, dtype, device)
    assert not problems, f"{info.name} ({dtype.name}, {device}) differs from PyTorch:\n" + (
        "\n".join(problems[:12])
    )
