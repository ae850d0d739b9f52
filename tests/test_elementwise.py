"""Edge cases of the elementwise math ops and activations, on both backends.

The op database's table tests (forward vs NumPy, gradcheck, backend agreement on sampled
inputs) cover the records of :mod:`pylucid.opinfo.elementwise`; this file covers what samples
do not reach: IEEE special values, the edges of each domain, saturation, empty / 0-d /
non-contiguous tensors, integer and bool inputs, parameters and their errors, the log
family's shared gradient, and MLX's float64 accuracy. Any RuntimeWarning fails a test.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo.elementwise import RECORDS
from pylucid.ops.schema import AmpPolicy
from pylucid.ops.unary import LogBase, PointwiseOp

pytestmark = pytest.mark.filterwarnings("error")

BY_NAME = {info.name: info for info in RECORDS}
NAMES = sorted(BY_NAME)
FLOATS = [pytest.param(pl.float32, id="float32"), pytest.param(pl.float64, id="float64")]

# Tolerances against a float64 reference evaluated at the very same (dtype-rounded) inputs
# and rounded to the dtype, so only the implementations' own error counts: the worst we
# measured is 12 ULP (MLX's float32 tan; 2^-23 * 12 < 1.5e-6) in float32 and 2.6 ULP in
# float64, except MLX's float64 cos near its zeros, whose error is 1e-16 absolute.
TOL = {"float32": {"rtol": 2e-6, "atol": 1e-7}, "float64": {"rtol": 1e-13, "atol": 1e-15}}

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 30.0, -30.0]
SPECIAL += [100.0, -100.0, 1e4, -1e4]


def reference(name: str, x: np.ndarray, dtype: pl.DType) -> np.ndarray:
    """The record's float64 reference at ``x`` (already rounded to ``dtype``), rounded to
    ``dtype``; NumPy's warnings for inf / nan / out-of-domain inputs are silenced."""
    with np.errstate(all="ignore"):
        return np.asarray(BY_NAME[name].reference(x.astype(np.float64))).astype(dtype.numpy)


def check(actual: pl.Tensor, expected: np.ndarray, dtype: pl.DType) -> None:
    assert actual.dtype is dtype
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.numpy(), expected, equal_nan=True, **TOL[dtype.name])


# -- special values and domain edges ---------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", NAMES)
def test_special_values_match_numpy(name, dtype, device):
    x = np.array(SPECIAL, dtype=dtype.numpy)
    domain = {"asin": [1.0, -1.0, 1.5], "acos": [1.0, -1.0, -1.5], "log1p": [-1.0, -2.0]}
    x = np.concatenate([x, np.array(domain.get(name, []), dtype=dtype.numpy)])
    if name in ("sin", "cos", "tan"):  # 1e4 needs a full-precision argument reduction
        x = x[np.abs(x) < 1e3]
    out = BY_NAME[name].call(pl.tensor(x, device=device))
    check(out, reference(name, x, dtype), dtype)


# op, x, y, dy/dx: the edges of the domains, where values and gradients are infinite.
EDGES = [
    ("log", 0.0, -math.inf, math.inf),
    ("log", -1.0, math.nan, -1.0),  # g / x, as PyTorch: the formula, not the domain
    ("log10", 0.0, -math.inf, math.inf),
    ("log1p", -1.0, -math.inf, math.inf),
    ("sqrt", 0.0, 0.0, math.inf),
    ("sqrt", -1.0, math.nan, math.nan),
    ("rsqrt", 0.0, math.inf, -math.inf),
    ("reciprocal", 0.0, math.inf, -math.inf),
    ("asin", 1.0, math.pi / 2, math.inf),
    ("acos", 1.0, 0.0, -math.inf),
    ("exp", -math.inf, 0.0, 0.0),
    ("relu", 0.0, 0.0, 0.0),
    ("abs", 0.0, 0.0, 0.0),
    ("leaky_relu", 0.0, 0.0, 0.2),
    ("elu", 0.0, 0.0, 1.5),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("name", "x0", "y0", "dy"), EDGES, ids=[e[0] for e in EDGES])
def test_domain_edges(name, x0, y0, dy, dtype, device):
    x = pl.tensor([x0], dtype=dtype, device=device, requires_grad=True)
    y = BY_NAME[name].call(x)
    y.backward(pl.ones_like(y))
    np.testing.assert_array_equal(y.numpy(), np.array([y0], dtype=dtype.numpy))
    np.testing.assert_array_equal(x.grad.numpy(), np.array([dy], dtype=dtype.numpy))


@pytest.mark.parametrize("dtype", FLOATS)
def test_saturating_activations_do_not_overflow(dtype, device):
    x = pl.tensor([-1e4, -100.0, 100.0, 1e4], dtype=dtype, device=device, requires_grad=True)
    sig, soft, swish = pl.sigmoid(x), pl.softplus(x), pl.silu(x)
    (sig.sum() + soft.sum() + swish.sum()).backward()
    tiny = math.exp(-100)  # 3.7e-44
    # float32: e^100 overflows, so results below float32's normal range (1.2e-38) may be 0.
    atol = 1.2e-38 if dtype is pl.float32 else 0.0
    np.testing.assert_allclose(sig.numpy(), [0.0, tiny, 1.0, 1.0], rtol=1e-6, atol=atol)
    np.testing.assert_allclose(soft.numpy(), [0.0, tiny, 100.0, 1e4], rtol=1e-6, atol=atol)
    expected = [0.0, -100 * tiny, 100.0, 1e4]
    np.testing.assert_allclose(swish.numpy(), expected, rtol=1e-6, atol=atol)
    # d/dx of the sum: sigmoid' + sigmoid + silu' = 0, 1 and ~2 at the far ends.
    np.testing.assert_allclose(x.grad.numpy()[[0, 3]], [0.0, 2.0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softplus_threshold_and_beta(dtype, device):
    x = pl.tensor([19.0, 21.0, -2.0], dtype=dtype, device=device, requires_grad=True)
    y = pl.softplus(x)  # beta 1, threshold 20: linear from x = 20 on, as PyTorch
    y.sum().backward()
    expected = [19.0 + math.log1p(math.exp(-19.0)), 21.0, math.log1p(math.exp(-2.0))]
    np.testing.assert_allclose(y.numpy(), expected, **TOL[dtype.name])
    np.testing.assert_allclose(
        x.grad.numpy(), [1 / (1 + math.exp(-19.0)), 1.0, 1 / (1 + math.exp(2.0))], rtol=1e-6
    )
    half = pl.softplus(pl.tensor([1.0], dtype=dtype, device=device), beta=0.5)
    np.testing.assert_allclose(half.numpy(), [2 * math.log1p(math.exp(0.5))], rtol=1e-6)


# -- shapes and layouts -----------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_empty_and_zero_dim(name, device):
    info = BY_NAME[name]
    for shape in ((2, 0), ()):
        x_np = info.sample(np.random.default_rng(0), (shape,))[0].astype(np.float32)
        x = pl.tensor(x_np, device=device, requires_grad=True)
        y = info.call(x)
        y.backward(pl.ones_like(y))
        check(y, reference(name, x_np, pl.float32), pl.float32)
        assert x.grad.shape == shape


@pytest.mark.parametrize("name", NAMES)
def test_non_contiguous_inputs(name, rng):
    """Transposed and strided views (numba backend: pl.from_numpy shares the view) give the
    same values and gradients, bit for bit, as a contiguous copy."""
    base = BY_NAME[name].sample(rng, ((6, 8),))[0]
    for view in (base.T, base[::2, 1::3]):
        results = []
        for array in (view, np.ascontiguousarray(view)):
            x = pl.from_numpy(array).requires_grad_()
            y = BY_NAME[name].call(x)
            y.backward(pl.from_numpy(np.linspace(-1, 1, y.numel()).reshape(y.shape)))
            results.append((y.numpy().copy(), x.grad.numpy().copy()))
        (y_view, g_view), (y_copy, g_copy) = results
        np.testing.assert_array_equal(y_view, y_copy)
        np.testing.assert_array_equal(g_view, g_copy)


def test_parallel_loop_matches_serial():
    """Above PARALLEL_THRESHOLD elements the prange loops run; same values as NumPy."""
    from pylucid.kernels.loops import PARALLEL_THRESHOLD

    x_np = np.linspace(-5, 5, PARALLEL_THRESHOLD + 7)
    x = pl.tensor(x_np, dtype=pl.float64, requires_grad=True)
    y = pl.exp(x)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), np.exp(x_np), rtol=1e-15)
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())


# -- dtypes ----------------------------------------------------------------------------------
# The record of clamp has float bounds, so it computes in float32 (test_clamp_integers).
INTEGER_KEEPING = {"abs", "sign", "square", "relu", "floor", "ceil", "trunc", "round"}


@pytest.mark.parametrize("name", NAMES)
def test_integer_and_bool_inputs(name, device):
    ints = np.array([-3, -1, 0, 2, 5], dtype=np.int32)
    x = pl.tensor(ints, device=device)
    y = BY_NAME[name].call(x)
    if name in INTEGER_KEEPING:
        assert y.dtype is pl.int32
        np.testing.assert_array_equal(y.numpy(), BY_NAME[name].reference(ints))
        with pytest.raises(TypeError, match=f"^{name}: bool tensors are not supported"):
            BY_NAME[name].call(pl.tensor([True, False], device=device))
    else:  # real_valued: computed in float32 (bool likewise)
        assert y.dtype is pl.float32
        check(y, reference(name, ints.astype(np.float32), pl.float32), pl.float32)
        assert BY_NAME[name].call(pl.tensor([True, False], device=device)).dtype is pl.float32


def test_clamp_integers(device):
    x = pl.tensor([-5, 0, 7], dtype=pl.int32, device=device)
    np.testing.assert_array_equal(pl.clamp(x, min=-1, max=3).numpy(), [-1, 0, 3])
    # A bound beyond int32 saturates; a float bound computes in float32, as PyTorch.
    np.testing.assert_array_equal(pl.clamp(x, max=2**40).numpy(), [-5, 0, 7])
    half = pl.clamp(x, min=0.5)
    assert half.dtype is pl.float32
    np.testing.assert_array_equal(half.numpy(), [0.5, 0.5, 7.0])


# -- op-specific behaviour --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp_gradient_boundaries_and_nan(dtype, device):
    x = pl.tensor(
        [-2.0, -1.0, 0.0, 2.0, 3.0, np.nan], dtype=dtype, device=device, requires_grad=True
    )
    y = pl.clamp(x, min=-1.0, max=2.0)
    y.backward(pl.full((6,), 3.0, dtype=dtype, device=device))
    np.testing.assert_array_equal(y.numpy(), [-1.0, -1.0, 0.0, 2.0, 2.0, np.nan])
    # Gradient passes at the boundaries (inclusive) and not at NaN, as PyTorch.
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 3.0, 3.0, 3.0, 0.0, 0.0])

    x.grad = None
    crossed = pl.clamp(x, min=1.0, max=0.0)  # min > max: every value is max, no gradient
    crossed.sum().backward()
    np.testing.assert_array_equal(crossed.numpy()[:5], [0.0] * 5)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0] * 6)

    np.testing.assert_array_equal(x.clamp(min=0.0).numpy()[:5], [0.0, 0.0, 0.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.clamp(max=0.0).numpy()[:5], [-2.0, -1.0, 0.0, 0.0, 0.0])


def test_sign_has_zero_gradient(device):
    """PyTorch's choice: sign's output requires grad and its gradient is zero."""
    x = pl.tensor([-2.0, 0.0, 3.0, np.nan], dtype=pl.float64, device=device, requires_grad=True)
    y = pl.sign(x)
    assert y.requires_grad
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.numpy(), [-1.0, 0.0, 1.0, np.nan])  # NaN kept, as NumPy
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_tanh_approximation(dtype, device, rng):
    x_np = rng.uniform(-4, 4, (3, 4)).astype(dtype.numpy)
    x64 = x_np.astype(np.float64)
    inner = np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)
    expected = (0.5 * x64 * (1 + np.tanh(inner))).astype(dtype.numpy)
    check(pl.gelu(pl.tensor(x_np, device=device), approximate="tanh"), expected, dtype)
    if dtype is pl.float64:
        x = pl.tensor(x_np, device=device, requires_grad=True)
        assert pl.graph.gradcheck(lambda t: pl.gelu(t, approximate="tanh"), [x])


def test_log_family_shares_one_gradient(device):
    """log, log2, log10 are LogBase members whose ln b is given as the nearest float64 plus
    the float64 remainder; the shared gradient g / (x ln b) is, for log2, bit-identical to
    the correctly rounded float64 value (tests/test_log2.py), and for log exactly g / x."""
    members = {"log": pl.ops.LogBackward, "log2": pl.ops.Log2Backward}
    members["log10"] = pl.ops.Log10Backward
    getcontext().prec = 50
    for name, cls in members.items():
        assert issubclass(cls, LogBase) and cls.schema_v1.name == name
        assert cls.schema_v1.amp_policy is AmpPolicy.FORCE_FP32 and cls.schema_v1.saved == ("x",)
        assert cls.ln_base == math.log(cls.base)
        if name != "log":  # ln e = 1 exactly: no remainder
            exact = Decimal(cls.base).ln()
            assert cls.ln_base_lo == float(exact - Decimal(cls.ln_base))
    be = pl.backends.resolve(device)
    x_np = np.exp(np.random.default_rng(3).uniform(-30, 30, 1000))
    g_np = np.random.default_rng(4).standard_normal(1000)
    log2 = pl.ops.Log2Backward
    for dtype in (pl.float32, pl.float64):
        x, g = be.from_numpy(x_np, dtype), be.from_numpy(g_np, dtype)
        shared = be.to_numpy(
            be.log_base_backward(x, g, log2.ln_base, log2.ln_base_lo, (1000,), dtype)
        )
        ln2 = np.log(np.longdouble(2))
        exact = np.longdouble(be.to_numpy(g)) / (np.longdouble(be.to_numpy(x)) * ln2)
        # numba: correctly rounded; mlx: plain g / (x ln 2), two roundings.
        np.testing.assert_allclose(
            shared, exact.astype(np.float64), rtol=4 * np.finfo(dtype.numpy).eps
        )
        exact = be.to_numpy(be.log_base_backward(x, g, 1.0, 0.0, (1000,), dtype))
        np.testing.assert_array_equal(exact, be.to_numpy(g) / be.to_numpy(x))


def test_log10_gradient_is_correctly_rounded():
    """numba: within 0.5 ULP (+ the 80-bit reference's own 2^-64) of the exact
    g / (x ln 10), as log2's (tests/test_log2.py)."""
    rng = np.random.default_rng(5)
    x_np, g_np = np.exp(rng.uniform(-30, 30, 20_000)), rng.standard_normal(20_000)
    x = pl.tensor(x_np, dtype=pl.float64, requires_grad=True)
    pl.log10(x).backward(pl.tensor(g_np, dtype=pl.float64))
    exact = np.longdouble(g_np) / (np.longdouble(x_np) * np.log(np.longdouble(10)))
    got = x.grad.numpy()
    assert (np.abs(np.longdouble(got) - exact) / np.spacing(np.abs(got))).max() <= 0.501


def test_tensor_methods_and_operators(device):
    x = pl.tensor([-1.5, 0.5], device=device)
    np.testing.assert_array_equal(abs(x).numpy(), [1.5, 0.5])
    np.testing.assert_allclose(x.exp().numpy(), np.exp([-1.5, 0.5]), rtol=1e-6)
    np.testing.assert_array_equal(x.clamp(min=0.0).numpy(), [0.0, 0.5])
    methods = ["exp", "exp2", "expm1", "log", "log10", "log1p", "sqrt", "rsqrt", "square"]
    methods += ["reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh"]
    methods += ["tanh", "relu", "sigmoid", "erf", "abs", "sign", "clamp"]
    assert all(callable(getattr(pl.Tensor, m, None)) for m in methods)
    # As torch.Tensor: these are functions only (torch.nn.functional).
    for name in ("leaky_relu", "elu", "softplus", "silu", "gelu"):
        assert not hasattr(pl.Tensor, name)


AMP = {
    AmpPolicy.FORCE_FP32: "exp expm1 log log2 log10 log1p rsqrt reciprocal tan asin acos sinh "
    "cosh softplus",
    AmpPolicy.KEEP_INPUT: "exp2 sqrt square sin cos atan tanh relu leaky_relu elu sigmoid silu "
    "gelu erf abs sign clamp",
}


@pytest.mark.parametrize("policy", list(AMP), ids=lambda p: p.name)
def test_amp_policies_follow_pytorch_autocast(policy):
    """FORCE_FP32 exactly for the ops on PyTorch's autocast float32 list."""
    for name in AMP[policy].split():
        assert pl.ops.get_schema(name).amp_policy is policy, name


def test_every_op_has_its_primitives():
    for name in NAMES:
        cls = pl.ops.get_op(name)
        for be in (pl.backends.NumbaBackend, pl.backends.MLXBackend):  # installed or not
            backend = be.name
            assert callable(getattr(be, name)), (backend, name)
            if cls.schema_v1.saved and not issubclass(cls, LogBase):
                assert callable(getattr(be, f"{name}_backward")), (backend, name)
            assert callable(be.log_base_backward)


BAD_CALLS = [
    ("exp", lambda x: pl.exp([1.0]), TypeError, "exp: expected a Tensor for x"),
    ("gelu", lambda x: pl.gelu(x, approximate="erf"), ValueError, "gelu: approximate"),
    ("leaky_relu", lambda x: pl.leaky_relu(x, "0.1"), TypeError, "leaky_relu: negative_slope"),
    ("elu", lambda x: pl.elu(x, alpha=None), TypeError, "elu: alpha must be"),
    ("softplus", lambda x: pl.softplus(x, beta=0), ValueError, "softplus: beta must be"),
    ("clamp", lambda x: pl.clamp(x), ValueError, "clamp: at least one of min and max"),
    ("clamp", lambda x: pl.clamp(x, min="1"), TypeError, "clamp: min must be a number, a tensor"),
    ("clamp", lambda x: pl.clamp(x, max=math.nan), ValueError, "clamp: max is nan"),
]


@pytest.mark.parametrize(("name", "call", "error", "message"), BAD_CALLS)
def test_bad_arguments_raise_clear_errors(name, call, error, message, device):
    with pytest.raises(error, match=f"^{message}"):
        call(pl.tensor([1.0, 2.0], device=device))


# -- create_graph gradients -------------------------------------------------------------------
GRAPH_CALLS = [pytest.param(info.call, id=info.name) for info in RECORDS]
GRAPH_CALLS += [pytest.param(lambda x: pl.gelu(x, approximate="tanh"), id="gelu_tanh")]
GRAPH_CALLS += [pytest.param(lambda x: pl.clamp(x, max=0.5), id="clamp_max")]


@pytest.mark.parametrize("call", GRAPH_CALLS)
def test_create_graph_gradient_matches_fused(call, device, rng):
    """The differentiable formula (``grad_graph``) gives the fused kernel's first derivative,
    special values and kinks included (relu'(0) = 0, clamp's inclusive bounds, NaN)."""
    x_np = np.concatenate([rng.uniform(-3, 3, 12), SPECIAL, [-1.0, 2.0, 0.5, 0.1, -0.1]])
    g = pl.tensor(rng.uniform(0.5, 1.5, x_np.size) * rng.choice([-1, 1], x_np.size), device=device)
    with np.errstate(all="ignore"):
        grads = []
        for create_graph in (False, True):
            x = pl.tensor(x_np, dtype=pl.float64, device=device, requires_grad=True)
            (dx,) = pl.graph.grad(call(x), x, g, create_graph=create_graph)
            grads.append(dx.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12, atol=1e-15, equal_nan=True)


def test_gelu_tanh_second_derivative(device, rng):
    x = pl.tensor(rng.uniform(-4, 4, (3, 4)), dtype=pl.float64, device=device, requires_grad=True)
    assert pl.graph.gradgradcheck(lambda t: pl.gelu(t, approximate="tanh"), [x])


def test_every_op_has_a_graph_gradient(device):
    """Every op of the family has a differentiable formula; a pointwise op without one
    (``gradient = None``) refuses create_graph, naming the op."""
    for name in NAMES:
        cls = pl.ops.get_op(name)
        if issubclass(cls, PointwiseOp) and cls.grad_graph is PointwiseOp.grad_graph:
            assert cls.gradient is not None, name
        else:
            assert cls.grad_graph is not pl.ops.Op.grad_graph, name

    class NoFormula(pl.ops.ExpBackward):  # not registered: it declares no schema_v1
        gradient = None

    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="cannot differentiate through exp"):
        pl.graph.grad(NoFormula.apply(x).sum(), x, create_graph=True)


# -- MLX float64 accuracy ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["exp", "sin", "cos", "sigmoid", "erf"])
def test_mlx_float64_is_accurate(name):
    """MLX's own float64 exp, sin, cos, sigmoid and erf are float32-accurate (exp(100) = inf
    there); the backend's compositions are within 4 ULP of the correctly rounded value."""
    if "mlx" not in pl.backends.available():
        pytest.skip("mlx is not installed")
    x = np.concatenate([np.linspace(-30, 30, 401), [100.0, -100.0, 700.0, -700.0, 1e-9]])
    expected = reference(name, x, pl.float64)
    y = BY_NAME[name].call(pl.tensor(x, dtype=pl.float64, device="gpu")).numpy()
    # cos from t = tan(x/2) loses relative accuracy near its zeros (t ~ 1): there its error
    # is bounded absolutely instead, by 2.2e-16 (0.5 ULP of x's own rounding, times |x|).
    slack = 2.2e-16 * np.abs(x) if name == "cos" else 0.0
    ulps = np.maximum(np.abs(y - expected) - slack, 0) / np.spacing(np.abs(expected))
    assert ulps.max() <= 4, (x[np.argmax(ulps)], ulps.max())
