"""float16 and bfloat16 in the numba kernels: the bit conversions of
:mod:`pylucid.kernels.half` (exhaustive over the 16-bit patterns, sampled and at every
rounding boundary for float32), the kernels reading and writing half arrays through
``uint16`` views (exactly the float32 result rounded once), and the absence of a float32
copy of a half input.

The conversions from float32 were also checked on all 2**32 float32 patterns (0 mismatches
with NumPy and ml_dtypes); ``PYLUCID_EXHAUSTIVE=1`` runs that check (minutes).
"""

from __future__ import annotations

import os
import platform
import tracemalloc

import ml_dtypes
import numba
import numpy as np
import pytest

import pylucid as pl
from pylucid.backends.half import reads_half_natively
from pylucid.backends.numba_backend import NumbaBackend
from pylucid.kernels import half, scalar
from pylucid.kernels.loops import elementwise

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
HALVES = [pytest.param(F16, id="float16"), pytest.param(BF16, id="bfloat16")]
PL = {F16: pl.float16, BF16: pl.bfloat16}
#: Per half dtype: the (exponent + mantissa) mask, the bits of +inf, the quiet bit.
LAYOUT = {F16: (0x7FFF, 0x7C00, 0x0200), BF16: (0x7FFF, 0x7F80, 0x0040)}


@numba.njit
def _to_f32(h, which, out):
    for i in range(h.size):
        out[i] = half.f16_to_f32(h[i]) if which == 0 else half.bf16_to_f32(h[i])


@numba.njit
def _from_f32(x, which, out):
    for i in range(x.size):
        out[i] = half.f32_to_f16(x[i]) if which == 0 else half.f32_to_bf16(x[i])


def to_f32(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(bits.size, F32)
    _to_f32(bits, 0 if dtype == F16 else 1, out)
    return out


def from_f32(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(x.size, np.uint16)
    _from_f32(np.ascontiguousarray(x, F32), 0 if dtype == F16 else 1, out)
    return out


def reference(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(dtype).view(np.uint16)


def assert_converted(x: np.ndarray, got: np.ndarray, dtype: np.dtype) -> None:
    """``got`` (16-bit patterns) is NumPy's rounding of ``x`` bit for bit, and a quiet NaN
    of the same sign where ``x`` is a NaN."""
    nan = np.isnan(x)
    want = reference(x, dtype)
    wrong = np.flatnonzero((got != want) & ~nan)
    assert wrong.size == 0, [
        (hex(int(x.view(np.uint32)[i])), hex(int(got[i])), hex(int(want[i]))) for i in wrong[:5]
    ]
    mask, inf, quiet = LAYOUT[dtype]
    g = got[nan]
    assert np.all((g & mask) > inf) and np.all(g & quiet)
    assert np.array_equal(g >> 15, (x.view(np.uint32)[nan] >> 31).astype(np.uint16))


# -- conversions -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES)
def test_every_half_pattern_widens_exactly(dtype: np.dtype) -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    got = to_f32(bits, dtype)
    want = bits.view(dtype).astype(F32)
    # bit for bit, NaN payloads included
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("dtype", HALVES)
def test_every_half_value_round_trips(dtype: np.dtype) -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    values = bits.view(dtype).astype(F32)
    back = from_f32(values, dtype)
    finite = ~np.isnan(values)
    assert np.array_equal(back[finite], bits[finite])
    assert_converted(values, back, dtype)


@pytest.mark.parametrize("dtype", HALVES)
def test_rounding_boundaries(dtype: np.dtype) -> None:
    """Every midpoint between neighbouring half values (ties to even), the float32 values
    next to it on both sides, and the float32 values next to every half value."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(invalid="ignore"):
        values = bits.view(dtype).astype(np.float64)
    finite = np.isfinite(values)
    a = values[finite]
    order = np.argsort(a, kind="stable")
    a = np.unique(a[order])
    mids = ((a[:-1] + a[1:]) / 2).astype(F32)  # exact in float32 (and in float64)
    probes = [mids, a.astype(F32)]
    for base in list(probes):
        u = base.view(np.int32)
        probes += [(u + 1).view(F32), (u - 1).view(F32), (u + 2).view(F32), (u - 2).view(F32)]
    x = np.concatenate(probes)
    assert_converted(x, from_f32(x, dtype), dtype)


@pytest.mark.parametrize("dtype", HALVES)
def test_random_float32_patterns(dtype: np.dtype) -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(0, 1 << 32, size=1 << 22, dtype=np.uint64).astype(np.uint32).view(F32)
    assert_converted(x, from_f32(x, dtype), dtype)


SPECIALS = np.array(
    [
        0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 65504.0, 65519.996, 65520.0, -65520.0, 65536.0,
        3.4028235e38, -3.4028235e38, 2.0**-24, 2.0**-25, -(2.0**-25), 2.0**-25 * 1.0000001,
        2.0**-24 * 1.5, 2.0**-24 * 2.5, 2.0**-14, 2.0**-14 * (1 - 2.0**-11), 6.1e-5, 1e-45,
        -1e-45, 1.1754944e-38, 1.1754942e-38, 2.0**-126 * 0.5, 3.3895314e38, 3.3961775e38,
    ],
    dtype=F32,
)  # fmt: skip
NANS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFE000,
                 0x7F802000, 0xFFFFFFFF], dtype=np.uint32).view(F32)  # fmt: skip


@pytest.mark.parametrize("dtype", HALVES)
def test_special_values(dtype: np.dtype) -> None:
    x = np.concatenate([SPECIALS, NANS])
    got = from_f32(x, dtype)
    assert_converted(x, got, dtype)
    if dtype == F16:
        assert got[2] == 0x7C00 and got[3] == 0xFC00  # +-inf
        assert got[7] == 0x7BFF and got[8] == 0x7C00  # 65519.996 -> max, 65520 -> inf
        assert got[13] == 0x0001 and got[14] == 0 and got[15] == 0x8000  # ties to even at 0
        assert got[16] == 0x0001 and got[17] == 0x0002 and got[18] == 0x0002
    # A float64 argument is rounded to float32 first (what a float32 kernel followed by
    # astype does): 1 + 2**-11 + 2**-40 is 1 + 2**-11 in float32, a tie that float16 rounds to
    # 1 (directly it would round up); the same for bfloat16 with 1 + 2**-8.
    wide = np.array([1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-8 + 2.0**-40])
    got = np.empty(2, np.uint16)
    _from_f32(wide, 0 if dtype == F16 else 1, got)
    assert np.array_equal(got, reference(wide.astype(F32), dtype))
    assert got[0 if dtype == F16 else 1] == reference(np.ones(1, F32), dtype)[0]


@pytest.mark.skipif(
    not os.environ.get("PYLUCID_EXHAUSTIVE"),
    reason="all 2^32 float32 patterns take ~6.5 min; set PYLUCID_EXHAUSTIVE=1 to run them",
)
@pytest.mark.parametrize("dtype", HALVES)
def test_every_float32_pattern(dtype: np.dtype) -> None:
    chunk = 1 << 26
    for lo in range(0, 1 << 32, chunk):
        x = np.arange(lo, lo + chunk, dtype=np.uint64).astype(np.uint32).view(F32)
        assert_converted(x, from_f32(x, dtype), dtype)


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="reads x86 assembly"
)
def test_conversions_vectorise() -> None:
    """The loops of the conversions compile to packed 32-bit SIMD integer code."""
    _to_f32(np.zeros(1, np.uint16), 0, np.zeros(1, F32))
    _from_f32(np.zeros(1, F32), 0, np.zeros(1, np.uint16))
    for loop in (_to_f32, _from_f32):
        asm = "\n".join(loop.inspect_asm().values())
        assert "xmm" in asm and any(op in asm for op in ("vpslld", "vpsrld", "pslld", "psrld"))
        assert not any(op in asm for op in ("vpsllq ", "vpsrlq ", "vpaddq ")), "64-bit lanes"


# -- kernels ---------------------------------------------------------------------------------
BE = NumbaBackend()


def sample(dtype: np.dtype, n: int, rng: np.random.Generator, positive: bool = False):
    """Random values over the whole range of ``dtype`` plus every special value."""
    x = rng.standard_normal(n) * np.exp(rng.uniform(-20, 12, n))
    info = ml_dtypes.finfo(dtype)
    tiny = float(info.smallest_subnormal)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, float(info.max), float(info.smallest_normal),
                tiny, 3 * tiny, 1.0, 2.0]  # fmt: skip
    x[: len(specials)] = specials
    x[len(specials) : 2 * len(specials)] = np.negative(specials)
    if positive:
        x = np.abs(x)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    finite = ~np.isnan(w)
    u = np.uint16 if got.itemsize == 2 else np.uint32
    assert np.array_equal(
        got.reshape(-1).view(u)[finite.reshape(-1)], want.reshape(-1).view(u)[finite.reshape(-1)]
    )


def in_float32(primitive, *arrays, shape, out_dtype):
    """The float32 primitive on float32 copies, rounded once to ``out_dtype``."""
    wide = [a.astype(F32) if isinstance(a, np.ndarray) else a for a in arrays]
    out = primitive(*wide, shape, pl.float32)
    with np.errstate(over="ignore"):
        return out.astype(out_dtype)


UNARY = ["log2", "exp", "neg", "sqrt", "tanh", "sigmoid", "relu"]
BINARY = ["add", "mul", "sub", "div"]
BACKWARD = ["exp_backward", "log1p_backward", "sqrt_backward", "sigmoid_backward", "tanh_backward"]


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("n", [1000, 70_000])  # serial and parallel loops
@pytest.mark.parametrize("name", UNARY)
def test_unary_kernels_round_the_float32_result_once(name, n, dtype, rng) -> None:
    x = sample(dtype, n, rng)
    primitive = getattr(BE, name)
    want = in_float32(primitive, x, shape=x.shape, out_dtype=dtype)
    with np.errstate(all="ignore"):
        same_bits(primitive(x, x.shape, PL[dtype]), want)  # half in, half out
        # half in, float32 out (a FORCE_FP32 op under autocast)
        same_bits(primitive(x, x.shape, pl.float32), primitive(x.astype(F32), x.shape, pl.float32))


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_kernels(name, dtype, rng) -> None:
    a, b = sample(dtype, 5000, rng), sample(dtype, 5000, rng)[::-1].copy()
    primitive = getattr(BE, name)
    with np.errstate(all="ignore"):
        same_bits(
            primitive(a, b, a.shape, PL[dtype]),
            in_float32(primitive, a, b, shape=a.shape, out_dtype=dtype),
        )
        # a scalar, a one-element array and a broadcast operand
        for other in (1.5, np.array([3.0], dtype), b[:1].reshape(1, 1)):
            want = in_float32(
                primitive, a.reshape(50, 100), other, shape=(50, 100), out_dtype=dtype
            )
            same_bits(primitive(a.reshape(50, 100), other, (50, 100), PL[dtype]), want)
        # a non-contiguous operand
        t = a.reshape(50, 100).T
        want = in_float32(primitive, t, b.reshape(100, 50), shape=(100, 50), out_dtype=dtype)
        same_bits(primitive(t, b.reshape(100, 50), (100, 50), PL[dtype]), want)
        # half and float32 operands together, float32 out
        same_bits(
            primitive(a, b.astype(F32), a.shape, pl.float32),
            primitive(a.astype(F32), b.astype(F32), a.shape, pl.float32),
        )


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("name", BACKWARD)
def test_fused_backward_kernels(name, dtype, rng) -> None:
    x, g = sample(dtype, 70_000, rng), sample(dtype, 70_000, rng)
    primitive = getattr(BE, name)
    with np.errstate(all="ignore"):
        same_bits(
            primitive(x, g, x.shape, PL[dtype]),
            in_float32(primitive, x, g, shape=x.shape, out_dtype=dtype),
        )
        # half saved value, float32 gradient (the backward of a FORCE_FP32 op)
        g32 = g.astype(F32)
        same_bits(
            primitive(x, g32, x.shape, pl.float32),
            primitive(x.astype(F32), g32, x.shape, pl.float32),
        )


@pytest.mark.parametrize("dtype", HALVES)
def test_kernels_with_parameters(dtype, rng) -> None:
    x, g = sample(dtype, 3000, rng), sample(dtype, 3000, rng)
    shape, d = x.shape, PL[dtype]
    calls = [
        lambda be, t, *a: be.pow_scalar(a[0], 2.5, shape, t),
        lambda be, t, *a: be.leaky_relu(a[0], 0.1, shape, t),
        lambda be, t, *a: be.clamp(a[0], -1.0, 3.0, shape, t),
        lambda be, t, *a: be.clamp_backward(a[0], a[1], -1.0, None, shape, t),
        lambda be, t, *a: be.softplus_backward(a[0], a[1], 1.0, 20.0, shape, t),
        lambda be, t, *a: be.log_base_backward(a[0], a[1], 2.302585092994046, 0.0, shape, t),
        lambda be, t, *a: be.where(a[0] > 0, a[0], a[1], shape, t),
        lambda be, t, *a: be.maximum(a[0], a[1], shape, t),
    ]
    with np.errstate(all="ignore"):
        for call in calls:
            want = call(BE, pl.float32, x.astype(F32), g.astype(F32)).astype(dtype)
            same_bits(call(BE, d, x, g), want)
        compared = BE.lt(x, g, shape, d)
        assert compared.dtype == np.bool_
        assert np.array_equal(compared, x.astype(F32) < g.astype(F32))


def test_kernels_read_the_uint16_views() -> None:
    """The half loops are compiled for uint16 arrays, on first use, and kept."""
    kernel = elementwise(scalar.log2, heavy=True)
    assert kernel._half_loops == {}  # nothing generated before a half call
    x = np.linspace(0.5, 4, 100).astype(F16)
    y = kernel(x, shape=x.shape, out_dtype=F16)
    assert y.dtype == F16
    serial, _ = kernel._half_loops[(("f16",), "f16")]
    (signature,) = serial.signatures
    assert all(t == numba.types.Array(numba.types.uint16, 1, "C") for t in signature)
    kernel(x.astype(BF16), shape=x.shape, out_dtype=F32)
    assert set(kernel._half_loops) == {(("f16",), "f16"), (("bf16",), None)}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("out", ["half", "float32"])
def test_no_float32_copy_of_the_input(dtype, out) -> None:
    n = 1 << 22
    x = np.full(n, 3.0, dtype)
    out_dtype = PL[dtype] if out == "half" else pl.float32
    BE.log2(x[:10], (10,), out_dtype)  # compile outside the measurement
    tracemalloc.start()
    try:
        y = BE.log2(x, x.shape, out_dtype)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert y.dtype == out_dtype.numpy and y[0] == np.log2(3.0).astype(out_dtype.numpy)
    # only the output: a float32 copy of x would add 4 n bytes
    assert peak < y.nbytes + 4 * n // 4, (peak, y.nbytes)


def test_other_primitives_still_widen_halves(rng) -> None:
    """Reductions have no half loops: the wrapper widens their half arrays, also where the
    dtype is float32 (the half input of a FORCE_FP32 op)."""
    assert reads_half_natively(BE) and not reads_half_natively(object())
    x = rng.uniform(0, 2, 1000).astype(BF16)
    want = np.sum(x.astype(F32), dtype=F32)
    assert BE.sum(x, (0,), False, pl.float32) == want
    assert BE.sum(x, (0,), False, pl.bfloat16) == want.astype(BF16)


# -- through the ops --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES)
def test_force_fp32_ops_on_half_tensors(dtype, rng) -> None:
    x = sample(dtype, 20_000, rng, positive=True)
    g = sample(dtype, 20_000, rng, positive=True)
    x32 = x.astype(F32)
    for op, name in ((pl.log2, "log2"), (pl.exp, "exp")):
        xt = pl.from_numpy(x).requires_grad_()
        with np.errstate(all="ignore"):
            y = op(xt)
            want = getattr(BE, name)(x32, x.shape, pl.float32)
            same_bits(y.numpy(), want.astype(dtype))
            y.backward(pl.from_numpy(g))
            if name == "log2":
                node = pl.ops.get_op("log2")
                grad = BE.log_base_backward(
                    x32, g.astype(F32), node.ln_base, node.ln_base_lo, x.shape, pl.float32
                )
            else:
                grad = BE.exp_backward(want, g.astype(F32), x.shape, pl.float32)
            same_bits(xt.grad.numpy(), grad.astype(dtype))
            with pl.autocast(dtype=PL[dtype]):
                y = op(pl.from_numpy(x))
            assert y.dtype is pl.float32
            same_bits(y.numpy(), want)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("autocast", [False, True])
def test_force_fp32_op_makes_no_float32_copy(dtype, autocast) -> None:
    n = 1 << 22
    x = pl.from_numpy(np.full(n, 3.0, dtype))
    pl.log2(x[:10])
    context = pl.autocast(dtype=PL[dtype]) if autocast else pl.autocast(enabled=False)
    with context:
        tracemalloc.start()
        try:
            y = pl.log2(x)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    out_bytes = n * (4 if autocast else 2)
    assert y.dtype is (pl.float32 if autocast else PL[dtype])
    assert peak < out_bytes + n, (peak, out_bytes)  # no float32 copy (4 n bytes) on the way
