"""Accuracy, special-value and vectorisation tests for ``pylucid.kernels.simd_math``."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
from llvmlite import binding as llvm
from numba import njit

from pylucid.kernels import simd_math as sm

NAMES = ("log2", "log", "log10", "log1p", "exp", "exp2", "expm1")

# Documented max ULP errors (module docstring); float32 results are correctly rounded
# except for a handful of inputs, float64 bounds hold on the sampled inputs below.
BOUND32 = dict.fromkeys(NAMES, 0.5 + 2.0**-20)
BOUND64 = {
    "log2": 0.55,
    "log": 0.55,
    "log10": 0.55,
    "log1p": 0.55,
    "exp": 0.76,  # 0.52 for normal results, up to 0.75 for subnormal results
    "exp2": 0.76,
    "expm1": 0.6,
}


@njit(cache=True, error_model="numpy")
def _log2_loop(x, out):
    for i in range(x.size):
        out[i] = sm.log2(x[i])


@njit(cache=True, error_model="numpy")
def _log_loop(x, out):
    for i in range(x.size):
        out[i] = sm.log(x[i])


@njit(cache=True, error_model="numpy")
def _log10_loop(x, out):
    for i in range(x.size):
        out[i] = sm.log10(x[i])


@njit(cache=True, error_model="numpy")
def _log1p_loop(x, out):
    for i in range(x.size):
        out[i] = sm.log1p(x[i])


@njit(cache=True, error_model="numpy")
def _exp_loop(x, out):
    for i in range(x.size):
        out[i] = sm.exp(x[i])


@njit(cache=True, error_model="numpy")
def _exp2_loop(x, out):
    for i in range(x.size):
        out[i] = sm.exp2(x[i])


@njit(cache=True, error_model="numpy")
def _expm1_loop(x, out):
    for i in range(x.size):
        out[i] = sm.expm1(x[i])


@njit(cache=True, error_model="numpy")
def _all_scalar(x):
    return (sm.log2(x), sm.log(x), sm.log10(x), sm.log1p(x), sm.exp(x), sm.exp2(x), sm.expm1(x))


LOOPS: dict[str, Callable] = {
    "log2": _log2_loop,
    "log": _log_loop,
    "log10": _log10_loop,
    "log1p": _log1p_loop,
    "exp": _exp_loop,
    "exp2": _exp2_loop,
    "expm1": _expm1_loop,
}


def apply(name: str, x: np.ndarray) -> np.ndarray:
    """Evaluate ``simd_math.<name>`` elementwise through its jitted loop."""
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    LOOPS[name](x, out)
    return out


def reference(name: str, x: np.ndarray, dtype: type) -> np.ndarray:
    """Reference values in ``dtype`` (float64 for float32 inputs, longdouble for float64)."""
    with np.errstate(all="ignore"):
        return getattr(np, name)(x.astype(dtype))


def ulp_error(got: np.ndarray, ref: np.ndarray, fmt: type) -> np.ndarray:
    """``|got - ref| / ulp(ref)`` in format ``fmt`` (float32 or float64), subnormals included."""
    fi = np.finfo(fmt)
    e = np.frexp(ref)[1]
    ulp = np.ldexp(np.ones_like(ref), np.maximum(e - (fi.nmant + 1), fi.minexp - fi.nmant))
    return np.abs(got.astype(ref.dtype) - ref) / ulp


def samples32(name: str, rng: np.random.Generator) -> np.ndarray:
    """All-range float32 bit patterns (subnormals, inf, nan included) plus the useful domain."""
    anybits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    domain = {
        "log2": np.exp(rng.uniform(-103.0, 88.0, 100_000)),
        "log": 1.0 + rng.uniform(-0.5, 1.0, 100_000),
        "log10": np.exp(rng.uniform(-103.0, 88.0, 100_000)),
        "log1p": np.concatenate([rng.uniform(-1.0, 1.0, 50_000), rng.uniform(-1e-3, 1e-3, 50_000)]),
        "exp": rng.uniform(-104.0, 89.0, 100_000),
        "exp2": rng.uniform(-150.0, 128.5, 100_000),
        "expm1": np.concatenate([rng.uniform(-20.0, 89.0, 50_000), rng.uniform(-1.0, 1.0, 50_000)]),
    }[name]
    return np.concatenate([anybits, domain.astype(np.float32)])


def samples64(name: str, rng: np.random.Generator) -> np.ndarray:
    """Random float64 inputs covering the whole domain, subnormals and hard regions."""
    n = 25_000
    positive = rng.integers(1, 0x7FF0000000000000, n, dtype=np.int64).view(np.float64)
    signs = rng.choice([-1.0, 1.0], n)
    near_one = np.concatenate(
        [
            1.0 + rng.uniform(-0.3, 0.42, n),
            np.sqrt(2.0) * (1.0 + rng.uniform(-1e-6, 1e-6, n)),
            np.sqrt(0.5) * (1.0 + rng.uniform(-1e-6, 1e-6, n)),
        ]
    )
    tiny = signs * np.exp(rng.uniform(-740.0, -1.0, n))
    return {
        "log2": np.concatenate([positive, near_one]),
        "log": np.concatenate([positive, near_one]),
        "log10": np.concatenate([positive, near_one]),
        "log1p": np.concatenate([positive, tiny, rng.uniform(-1.0, 1.0, n), near_one - 1.0]),
        "exp": np.concatenate([rng.uniform(-746.0, 710.0, n), rng.uniform(-1.0, 1.0, n), tiny]),
        "exp2": np.concatenate([rng.uniform(-1076.0, 1025.0, n), rng.uniform(-1.0, 1.0, n), tiny]),
        "expm1": np.concatenate(
            [rng.uniform(-40.0, 710.0, n), rng.uniform(-1.5, 1.5, n), tiny, 40.0 * tiny]
        ),
    }[name]


@pytest.mark.parametrize("name", NAMES)
def test_float32_ulp(name: str) -> None:
    x = samples32(name, np.random.default_rng(32))
    got = apply(name, x)
    assert got.dtype == np.float32
    ref = reference(name, x, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    inf = ok & np.isinf(ref32)  # overflow: must be inf of the right sign
    assert np.array_equal(got[inf], ref32[inf])
    fin = ok & ~inf
    err = ulp_error(got[fin], ref[fin], np.float32)
    assert err.max() <= BOUND32[name], x[fin][np.argmax(err)]


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="needs extended longdouble")
@pytest.mark.parametrize("name", NAMES)
def test_float64_ulp(name: str) -> None:
    x = samples64(name, np.random.default_rng(64))
    got = apply(name, x)
    assert got.dtype == np.float64
    ref = reference(name, x, np.longdouble)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    fin = np.isfinite(ref) & (np.abs(ref) <= np.finfo(np.float64).max)
    err = ulp_error(got[fin], ref[fin], np.float64)
    assert err.max() <= BOUND64[name], x[fin][np.argmax(err)]
    over = np.isfinite(x) & ~fin & ~np.isnan(ref)
    assert np.array_equal(got[over], np.where(ref[over] > 0, np.inf, -np.inf))


INF = np.inf
NAN = np.nan
SPECIALS: dict[str, list[tuple[float, float]]] = {
    "log2": [(0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
             (1.0, 0.0), (2.0, 1.0), (0.5, -1.0), (8.0, 3.0), (2.0**-100, -100.0)],
    "log": [(0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
            (1.0, 0.0)],
    "log10": [(0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
              (1.0, 0.0), (10.0, 1.0), (1000.0, 3.0), (1e10, 10.0)],
    "log1p": [(0.0, 0.0), (-0.0, -0.0), (-1.0, -INF), (-2.0, NAN), (-INF, NAN), (INF, INF),
              (NAN, NAN), (1.0, np.log(2.0)), (1e-30, 1e-30), (-1e-30, -1e-30)],
    "exp": [(0.0, 1.0), (-0.0, 1.0), (-INF, 0.0), (INF, INF), (NAN, NAN), (1000.0, INF),
            (-1000.0, 0.0), (1e-30, 1.0), (-1e-30, 1.0)],
    "exp2": [(0.0, 1.0), (-0.0, 1.0), (-INF, 0.0), (INF, INF), (NAN, NAN), (1.0, 2.0),
             (-1.0, 0.5), (10.0, 1024.0), (2000.0, INF), (-2000.0, 0.0)],
    "expm1": [(0.0, 0.0), (-0.0, -0.0), (-INF, -1.0), (INF, INF), (NAN, NAN), (1000.0, INF),
              (-1000.0, -1.0), (1e-30, 1e-30), (-1e-30, -1e-30)],
}  # fmt: skip


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Exact equality, nan matching nan and the sign of zero included."""
    assert got.dtype == want.dtype
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name: str, dtype: type) -> None:
    x, want = (np.array(v, dtype=dtype) for v in zip(*SPECIALS[name], strict=True))
    with np.errstate(all="ignore"):
        assert_same(apply(name, x), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_powers_of_two_exact(dtype: type) -> None:
    fi = np.finfo(dtype)
    k = np.arange(fi.minexp - fi.nmant, fi.maxexp, dtype=dtype)  # subnormal ... max exponent
    with np.errstate(all="ignore"):
        assert_same(apply("exp2", k), np.ldexp(np.ones_like(k), k.astype(int)))
        assert_same(apply("log2", np.ldexp(np.ones_like(k), k.astype(int))), k)
        assert_same(apply("exp2", k[[0, -1]] + np.array([-1, 1], dtype)), np.array([0, INF], dtype))


@pytest.mark.parametrize(
    ("dtype", "last", "first_inf", "min_sub", "zero"),
    [
        (np.float32, 88.72283172607421875, 88.72283935546875, -103.5, -104.0),
        (np.float64, 709.782712893384, 709.7827128933841, -745.0, -745.2),
    ],
)
def test_exp_thresholds(
    dtype: type, last: float, first_inf: float, min_sub: float, zero: float
) -> None:
    fi = np.finfo(dtype)
    got = apply("exp", np.array([last, first_inf, min_sub, zero], dtype=dtype))
    assert np.isfinite(got[0]) and got[0] > fi.max / 2
    assert_same(got[1:], np.array([INF, fi.smallest_subnormal, 0.0], dtype=dtype))
    got = apply("expm1", np.array([last, first_inf], dtype=dtype))
    assert np.isfinite(got[0]) and got[1] == INF


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subnormal_inputs(dtype: type) -> None:
    fi = np.finfo(dtype)
    x = np.array([fi.smallest_subnormal, fi.smallest_normal * 0.75], dtype=dtype)
    e = np.array([fi.minexp - fi.nmant, np.log2(0.75) + fi.minexp], dtype=dtype)
    assert_same(apply("log2", x), e)
    assert_same(apply("log1p", x), x)
    assert_same(apply("expm1", x), x)
    assert_same(apply("exp", x), np.ones_like(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_result_dtype(dtype: type) -> None:
    _all_scalar(dtype(0.5))
    sig = [s for s in _all_scalar.nopython_signatures if s.args[0].name == np.dtype(dtype).name]
    assert [t.name for t in sig[0].return_type.types] == [np.dtype(dtype).name] * len(NAMES)


@pytest.mark.parametrize("name", ["log2", "exp"])
def test_interpreter_call(name: str) -> None:
    fn = getattr(sm, name)
    for dtype in (np.float32, np.float64):
        v = fn(dtype(0.75))
        assert type(v) is dtype
        assert v == apply(name, np.array([0.75], dtype))[0]


_HOST = llvm.get_host_cpu_features()


@pytest.mark.skipif(
    not (_HOST.get("avx2") and _HOST.get("fma")), reason="packed FMA check needs AVX2+FMA"
)
def _assert_packed_without_calls(name: str, called: str) -> None:
    """A loop of ``sm.<name>`` over float32 and float64 arrays compiles to packed FMAs
    (ymm or zmm registers) and calls no function whose name matches ``called``."""
    fn = getattr(sm, name)

    @njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    for dtype in (np.float32, np.float64):
        x = np.ones(8, dtype)
        loop(x, np.empty_like(x))
    for sig, asm in loop.inspect_asm().items():
        assert re.search(r"vfn?m(add|sub)\w*p[sd]\s+%[yz]mm", asm), sig
        assert not re.search(rf"call\w*\s+\w*({called})", asm), sig


@pytest.mark.parametrize("name", ["log2", "exp"])
def test_loop_vectorises(name: str) -> None:
    _assert_packed_without_calls(name, "log|exp")


# -- the erf family: erf, gelu and its tanh form, and their derivatives -------------------------
FAMILY = ("erf", "gelu", "gelu_derivative", "gelu_tanh", "gelu_tanh_derivative")
#: Documented ULP bounds (module docstring): float32 exhaustive maxima, float64 sampled ones
#: (mpmath), each rounded up. The derivatives are bounded outside ROOT, where they cross zero;
#: inside it their absolute error is bounded by ROOT_ABS.
FAMILY_BOUND32 = {
    "erf": 1.7,
    "gelu": 6.9,
    "gelu_derivative": 6.3,
    "gelu_tanh": 3.6,
    "gelu_tanh_derivative": 7.9,
}
FAMILY_BOUND64 = {
    "erf": 1.5,
    "gelu": 5.0,
    "gelu_derivative": 6.0,
    "gelu_tanh": 3.0,
    "gelu_tanh_derivative": 7.5,
}
ROOT = (-1.0, -0.5)
ROOT_ABS = {np.float32: 2.0**-23, np.float64: 2.0**-52}
_SQRT1_2 = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


@njit(error_model="numpy")
def _family_loop(x, out, which):
    for i in range(x.size):
        if which == 0:
            out[i] = sm.erf(x[i])
        elif which == 1:
            out[i] = sm.gelu(x[i])
        elif which == 2:
            out[i] = sm.gelu_derivative(x[i])
        elif which == 3:
            out[i] = sm.gelu_tanh(x[i])
        else:
            out[i] = sm.gelu_tanh_derivative(x[i])


@njit(error_model="numpy")
def _family_reference(x, out, which):
    """float64 references (libm erf, erfc, exp: relative error below 2**-44 here)."""
    for i in range(x.size):
        v = np.float64(x[i])
        if which == 0:
            out[i] = math.erf(v)
        elif which == 1:
            out[i] = 0.5 * v * math.erfc(-v * _SQRT1_2)
        elif which == 2:
            out[i] = 0.5 * math.erfc(-v * _SQRT1_2) + v * math.exp(-0.5 * v * v) / math.sqrt(
                2.0 * math.pi
            )
        else:
            e = math.exp(-2.0 * abs(_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))
            s, c = (1.0 / (1.0 + e), e / (1.0 + e)) if v >= 0 else (e / (1.0 + e), 1.0 / (1.0 + e))
            if which == 3:
                out[i] = v * s
            else:
                du = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v)
                out[i] = s + v * s * c * du


def _family(name: str, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    _family_loop(x, out, FAMILY.index(name))
    return out


def _family_samples(name: str, dtype: type, n: int, rng: np.random.Generator) -> np.ndarray:
    top = 6.0 if name == "erf" else (15.0 if dtype == np.float32 else 40.0)
    core = 3.0 if name == "erf" else 5.0
    x = np.concatenate(
        [rng.uniform(-top, top, n), rng.uniform(-core, core, n), rng.uniform(0.7, 0.8, n // 4)]
    )
    return x.astype(dtype)


@pytest.mark.parametrize("name", FAMILY)
def test_family_float32_ulp(name: str) -> None:
    x = _family_samples(name, np.float32, 100_000, np.random.default_rng(32))
    got = _family(name, x)
    assert got.dtype == np.float32
    ref = np.empty(x.size)
    _family_reference(x, ref, FAMILY.index(name))
    err = ulp_error(got, ref, np.float32)
    outside = (x < ROOT[0]) | (x > ROOT[1]) if "derivative" in name else np.ones(x.size, bool)
    assert err[outside].max() <= FAMILY_BOUND32[name], x[outside][np.argmax(err[outside])]
    if "derivative" in name:
        assert np.abs(got[~outside] - ref[~outside]).max() <= ROOT_ABS[np.float32]


@pytest.mark.parametrize("name", FAMILY)
def test_family_float64_ulp(name: str) -> None:
    mpmath = pytest.importorskip("mpmath", reason="mpmath gives the float64 reference")
    x = _family_samples(name, np.float64, 600, np.random.default_rng(64))
    got = _family(name, x)

    def exact(v):  # noqa: ANN001, ANN202
        c = mpmath.mpf("0.044715")  # (the formula's decimal, at 40 digits, as the kernels')
        if name == "erf":
            return mpmath.erf(v)
        if name.startswith("gelu_tanh"):
            s2p = mpmath.sqrt(2 / mpmath.pi)
            s = 1 / (1 + mpmath.exp(-2 * s2p * (v + c * v**3)))
            if name == "gelu_tanh":
                return v * s
            return s + v * s * (1 - s) * 2 * s2p * (1 + 3 * c * v * v)
        if name == "gelu":
            return v * mpmath.ncdf(v)
        return mpmath.ncdf(v) + v * mpmath.npdf(v)

    worst = 0.0
    with mpmath.workdps(40):
        for v, g in zip(x.tolist(), got.tolist(), strict=True):
            y = exact(mpmath.mpf(v))
            if "derivative" in name and ROOT[0] <= v <= ROOT[1]:
                assert abs(mpmath.mpf(g) - y) <= ROOT_ABS[np.float64], v
                continue
            e = max(int(mpmath.floor(mpmath.log(abs(y), 2))), -1022) if y != 0 else -1022
            error = float(abs(mpmath.mpf(g) - y) / mpmath.ldexp(1, e - 52))
            assert error <= FAMILY_BOUND64[name], v
            worst = max(worst, error)
    assert worst > 0.0  # (the inputs reached the rounding)


FAMILY_SPECIALS: dict[str, list[tuple[float, float]]] = {
    "erf": [(0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0), (NAN, NAN), (10.0, 1.0),
            (-10.0, -1.0)],
    "gelu": [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, NAN), (NAN, NAN), (50.0, 50.0),
             (-50.0, -0.0), (1e30, 1e30)],
    "gelu_derivative": [(0.0, 0.5), (-0.0, 0.5), (INF, NAN), (-INF, NAN), (NAN, NAN),
                        (50.0, 1.0), (-50.0, -0.0)],
    "gelu_tanh": [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, NAN), (NAN, NAN), (50.0, 50.0),
                  (-50.0, -0.0), (1e30, 1e30)],
    "gelu_tanh_derivative": [(0.0, 0.5), (-0.0, 0.5), (INF, NAN), (-INF, NAN), (NAN, NAN),
                             (50.0, 1.0), (-50.0, -0.0)],
}  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", FAMILY)
def test_family_special_values(name: str, dtype: type) -> None:
    x, want = (np.array(v, dtype=dtype) for v in zip(*FAMILY_SPECIALS[name], strict=True))
    with np.errstate(all="ignore"):
        got = _family(name, x)
    if "derivative" in name:  # 1/2 at +-0 within the bound (float64: 1/2 + 2**-53)
        half = x == 0
        np.testing.assert_allclose(got[half], 0.5, rtol=2 * np.finfo(dtype).eps, atol=0)
        got[half] = 0.5
    assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_keeps_the_tail(dtype: type) -> None:
    """x Phi(x) for x << 0 is a tiny number of x's sign, not the 0 of 1 + erf (relative
    error within the bound down to the subnormals)."""
    x = np.array([-5.0, -8.0, -10.0, -12.0] + ([-30.0, -37.0] if dtype == np.float64 else []))
    got = _family("gelu", x.astype(dtype))
    exact = np.array([float(mpmath_ncdf(v) * v) for v in x])
    assert np.all(got < 0)
    assert np.all(ulp_error(got, exact, dtype) <= FAMILY_BOUND32["gelu"])


def mpmath_ncdf(v: float) -> float:
    mpmath = pytest.importorskip("mpmath", reason="mpmath gives the exact tail")
    with mpmath.workdps(40):
        return mpmath.ncdf(v)


@pytest.mark.skipif(
    not (_HOST.get("avx2") and _HOST.get("fma")), reason="packed FMA check needs AVX2+FMA"
)
@pytest.mark.parametrize("name", ["erf", "gelu", "gelu_derivative", "gelu_tanh"])
def test_family_vectorises(name: str) -> None:
    """Every member compiles to packed code without calls, float64 too (its bodies are
    inlined: LLVM would keep one that large as a call, and the loop scalar)."""
    _assert_packed_without_calls(name, "erf|exp|gelu")
