"""Exhaustive float32 accuracy check and NumPy speed comparison for ``simd_math``.

Accuracy: every one of the 2**32 float32 bit patterns is fed to each float32 function
(and to NumPy's float32 ufunc for comparison).  The reference is the float64 libm result
(glibc, error < 1 float64 ULP); inputs whose float32 rounding is not determined by that
reference (exact value within 2**-49 relative of a float32 rounding boundary) are
re-evaluated with mpmath at 100 bits.  For each function the script reports

* the maximum ULP error ``|result - exact| / ulp32(exact)``,
* the number of results that are not correctly rounded,
* special-value failures: inputs that are non-finite, or whose correctly rounded result
  is ``0``, ``inf`` or ``nan``, must be matched exactly (sign of zero included).

float64 (``--f64-samples N``, default 200000): random inputs per function over the whole
domain plus its hard regions (near sqrt(2), tiny arguments, subnormal results) are
compared with an x87 extended-precision reference; the worst 20 are re-checked with
mpmath.  Maxima are reported separately for normal and subnormal results, next to
NumPy's float64 error on the same inputs.

Speed: each function is timed on 1e6 and 1e7 float32/float64 elements as a 2-thread
``prange`` loop and a 1-thread plain loop, against the corresponding NumPy ufunc
(single-threaded); ratios are NumPy time / our time (> 1 means faster than NumPy).

Usage::

    python benchmarks/ulp_exhaustive.py                     # everything
    python benchmarks/ulp_exhaustive.py --funcs log2,exp    # a subset
    python benchmarks/ulp_exhaustive.py --no-speed          # accuracy only
    python benchmarks/ulp_exhaustive.py --f64-samples 0     # skip the float64 check
    python benchmarks/ulp_exhaustive.py --no-accuracy       # speed only
    python benchmarks/ulp_exhaustive.py --funcs log2_avx512 # the AVX-512 log2 kernels
    python benchmarks/ulp_exhaustive.py --funcs log2 --against torch  # PyTorch's in column 2
    python benchmarks/ulp_exhaustive.py --funcs erf,gelu,gelu_derivative,gelu_tanh \
        --against torch --no-speed                          # the erf family (GELU_NAMES)

The erf family (:data:`GELU_NAMES`) has float64 references of its own (numba-compiled from
libm's ``erf``/``erfc``/``exp``, relative error below 2**-44, so its ambiguity window is
2**-43 instead of 2**-49; below |x| = 2**-60, where gelu(x) = x/2 to 2**-60 and an odd
subnormal x makes a tie of every result, those ties are counted within 0.5 ULP without
mpmath: 16 million of them) and PyTorch's functions in column 2 (NumPy has none); the
derivatives, whose zero near x = -0.75 no rounding can follow in relative terms, report
their ULP maximum outside ``ROOTS[name]`` and their largest absolute error inside it. The
float64 check of the family samples 2000 inputs per range against mpmath at 40 digits.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mpmath
import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pylucid.kernels import log2_avx512, simd_math  # noqa: E402

NAMES = ("log2", "log", "log10", "log1p", "exp", "exp2", "expm1")
#: The erf family: float32 and float64 in their own arithmetic, bounds of a few ULP.
GELU_NAMES = ("erf", "gelu", "gelu_derivative", "gelu_tanh", "gelu_tanh_derivative")
#: Whole-array kernels checked like the simd_math functions (no timing): name -> (loop(x,
#: out) for float32 and float64 arrays, the function it computes). --funcs log2_avx512.
KERNELS: dict[str, tuple[Callable, str]] = {"log2_avx512": (log2_avx512._parallel, "log2")}
CHUNK = 1 << 24
BLOCK = 1 << 16
EPS_AMBIGUOUS = 2.0**-49

MP_FUNCS: dict[str, Callable] = {
    "log2": lambda v: mpmath.log(v, 2),
    "log": mpmath.log,
    "log10": mpmath.log10,
    "log1p": mpmath.log1p,
    "exp": mpmath.exp,
    "exp2": lambda v: mpmath.power(2, v),
    "expm1": mpmath.expm1,
}

REF_FUNCS: dict[str, Callable] = {
    "log2": math.log2,
    "log": math.log,
    "log10": math.log10,
    "log1p": math.log1p,
    "exp": math.exp,
    "exp2": math.exp2,
    "expm1": math.expm1,
}

SQRT1_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
SQRT_2_OVER_PI = 0.7978845608028654


@njit(inline="always", error_model="numpy")
def _tanh_sigmoid(x: float) -> tuple[float, float]:
    """``(sigma(2u), 1 - sigma(2u))`` of the tanh form, u = sqrt(2/pi)(x + 0.044715 x^3)."""
    e = math.exp(-2.0 * abs(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return (1.0 / (1.0 + e), e / (1.0 + e)) if x >= 0 else (e / (1.0 + e), 1.0 / (1.0 + e))


def _gelu_tanh_ref(x: float) -> float:
    if math.isinf(x):
        return x if x > 0 else math.nan
    return x * _tanh_sigmoid(x)[0]


def _gelu_tanh_derivative_ref(x: float) -> float:
    if math.isinf(x):
        return math.nan
    s, c = _tanh_sigmoid(x)
    y = s + x * s * c * 2.0 * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
    return -0.0 if y == 0.0 and x < 0 else y


def _gelu_ref(x: float) -> float:
    return math.nan if x == -math.inf else 0.5 * x * math.erfc(-x * SQRT1_2)


def _gelu_derivative_ref(x: float) -> float:
    if math.isinf(x):
        return math.nan
    y = 0.5 * math.erfc(-x * SQRT1_2) + x * INV_SQRT_2PI * math.exp(-0.5 * x * x)
    return -0.0 if y == 0.0 and x < 0 else y  # (the derivative is negative below its zero)


for _name, _ref in (
    ("gelu", _gelu_ref),
    ("gelu_derivative", _gelu_derivative_ref),
    ("gelu_tanh", _gelu_tanh_ref),
    ("gelu_tanh_derivative", _gelu_tanh_derivative_ref),
):
    REF_FUNCS[_name] = njit(inline="always", error_model="numpy")(_ref)
REF_FUNCS["erf"] = math.erf


def _mp_tanh_form(v: mpmath.mpf, derivative: bool) -> mpmath.mpf:
    u = mpmath.sqrt(2 / mpmath.pi) * (v + mpmath.mpf("0.044715") * v**3)
    s = 1 / (1 + mpmath.exp(-2 * u))
    if not derivative:
        return v * s
    return s + v * s * (1 - s) * 2 * mpmath.sqrt(2 / mpmath.pi) * (
        1 + 3 * mpmath.mpf("0.044715") * v * v
    )


MP_FUNCS.update(
    {
        "erf": mpmath.erf,
        "gelu": lambda v: v * mpmath.ncdf(v),
        "gelu_derivative": lambda v: mpmath.ncdf(v) + v * mpmath.npdf(v),
        "gelu_tanh": lambda v: _mp_tanh_form(v, False),
        "gelu_tanh_derivative": lambda v: _mp_tanh_form(v, True),
    }
)
#: The ambiguity window of the erf family: their float64 references are within ~2**-44.
EPS_GELU = 2.0**-43
#: Where a derivative crosses zero: ULP errors are reported outside, absolute ones inside.
ROOTS: dict[str, tuple[float, float]] = {
    "gelu_derivative": (-1.0, -0.5),
    "gelu_tanh_derivative": (-1.0, -0.5),
}

# Input ranges for the timing runs (float32, float64).
SPEED_RANGES: dict[str, tuple[float, float]] = {
    "log2": (1e-3, 1e3),
    "log": (1e-3, 1e3),
    "log10": (1e-3, 1e3),
    "log1p": (-0.9, 1e3),
    "exp": (-80.0, 80.0),
    "exp2": (-120.0, 120.0),
    "expm1": (-10.0, 10.0),
}


@intrinsic
def _bitcast(typingctx, x):  # noqa: ARG001  (numba intrinsic protocol)
    """Reinterpret float64 <-> int64 bits."""
    to = types.int64 if x == types.float64 else types.float64

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.bitcast(args[0], context.get_value_type(to))

    return to(x), codegen


@njit(inline="always")
def _ulp32(y: float) -> float:
    """Spacing of float32 numbers at ``|y|`` (finite float64 argument), subnormals included."""
    biased = max((_bitcast(y) >> 52) & 0x7FF, 1023 - 126)
    return _bitcast((biased - 23) << 52)


@njit(inline="always")
def _same(v: float, r: float) -> bool:
    """Exact equality including nan-ness and the sign of zero."""
    if math.isnan(r):
        return math.isnan(v)
    return v == r and math.copysign(1.0, v) == math.copysign(1.0, r)


def _make_checker(
    ref: Callable, eps: float = EPS_AMBIGUOUS, root: tuple[float, float] = (1.0, -1.0)
) -> Callable:
    """Build the parallel per-chunk accuracy kernel comparing results to libm ``ref``.

    Returns per-block statistics (rows of ``BLOCK_STATS``) to avoid ``prange`` reductions.
    Results for x in ``root`` (an empty interval by default) are left out of the ULP
    statistics; column 6 holds their largest absolute error.
    """
    lo_root, hi_root = root

    @njit(parallel=True, error_model="numpy")
    def check(xs, ours, npy, flags):
        nblocks = (xs.size + BLOCK - 1) // BLOCK
        stats = np.zeros((nblocks, 7))
        for b in prange(nblocks):
            max_ours = max_npy = abs_root = 0.0
            bad_ours = bad_npy = spec_ours = spec_npy = 0
            for i in range(b * BLOCK, min((b + 1) * BLOCK, xs.size)):
                x = xs[i]
                v = np.float64(ours[i])
                w = np.float64(npy[i])
                y = ref(np.float64(x))
                if lo_root <= x <= hi_root:
                    abs_root = max(abs_root, abs(v - y))
                    flags[i] = False
                    continue
                r32 = np.float64(np.float32(y))
                lo = np.float32(y * (1.0 - eps))
                hi = np.float32(y * (1.0 + eps))
                amb = math.isfinite(y) and y != 0.0 and lo != hi
                flags[i] = amb
                if amb:
                    continue
                if not (math.isfinite(x) and math.isfinite(r32)) or r32 == 0.0:
                    spec_ours += not _same(v, r32)
                    spec_npy += not _same(w, r32)
                else:
                    u = _ulp32(y)
                    max_ours = max(max_ours, abs(v - y) / u)
                    max_npy = max(max_npy, abs(w - y) / u)
                    bad_ours += v != r32
                    bad_npy += w != r32
            stats[b, 0] = max_ours
            stats[b, 1] = max_npy
            stats[b, 2] = bad_ours
            stats[b, 3] = bad_npy
            stats[b, 4] = spec_ours
            stats[b, 5] = spec_npy
            stats[b, 6] = abs_root
        return stats

    return check


def _mp_round32(y: mpmath.mpf) -> tuple[float, float]:
    """Correctly rounded float32 value of ``y`` (as float) and ``ulp32(|y|)``."""
    e = max(int(mpmath.floor(mpmath.log(abs(y), 2))), -126) if y != 0 else -126
    ulp = mpmath.ldexp(1, e - 23)
    r = mpmath.nint(y / ulp) * ulp
    r32 = float(np.float32(float(r))) if abs(r) < 2.0**128 else math.copysign(math.inf, r)
    return r32, float(ulp)


def _resolve(name: str, xs: np.ndarray, ours: np.ndarray, npy: np.ndarray) -> list[float]:
    """mpmath re-check of ambiguous inputs: [max_ours, max_npy, bad_ours, bad_npy]."""
    stats = [0.0, 0.0, 0.0, 0.0]
    with mpmath.workprec(100):
        for x, v, w in zip(xs.tolist(), ours.tolist(), npy.tolist(), strict=True):
            y = MP_FUNCS[name](mpmath.mpf(x))
            r32, ulp = _mp_round32(y)
            for j, got in enumerate((v, w)):
                err = float(abs(got - y) / ulp) if not math.isnan(got) else math.inf
                stats[j] = max(stats[j], err)
            stats[2] += v != r32
            stats[3] += w != r32
    return stats


def _comparison(library: str, name: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(xs, out)``: the float32 ``name`` of NumPy, PyTorch or MLX (the second column)."""
    if library == "numpy":
        ufunc = getattr(np, name)
        return lambda xs, out: ufunc(xs, out=out)
    if library == "torch":
        import torch

        torch.set_num_threads(2)
        if name in GELU_NAMES[1:]:
            return _torch_gelu(torch, name)
        fn = getattr(torch, name)
        return lambda xs, out: fn(torch.from_numpy(xs), out=torch.from_numpy(out))
    import mlx.core as mx

    fn = getattr(mx, name)

    def run(xs: np.ndarray, out: np.ndarray) -> None:
        with mx.stream(mx.cpu):
            out[:] = np.array(fn(mx.array(xs)))

    return run


def _torch_gelu(torch, name: str) -> Callable[[np.ndarray, np.ndarray], None]:  # noqa: ANN001
    """PyTorch's float32 gelu (``approximate``) or its ATen backward with g = 1."""
    approximate = "tanh" if "tanh" in name else "none"
    if name.endswith("derivative"):

        def run(xs: np.ndarray, out: np.ndarray) -> None:
            x = torch.from_numpy(xs)
            out[:] = torch.ops.aten.gelu_backward(torch.ones_like(x), x, approximate=approximate)

        return run
    return lambda xs, out: out.__setitem__(
        slice(None), torch.nn.functional.gelu(torch.from_numpy(xs), approximate=approximate)
    )


def exhaustive(name: str, against: str = "numpy") -> dict[str, float]:
    """Run the exhaustive float32 check of one function, next to ``against``'s float32
    function (numpy, torch or mlx); returns the summary row."""
    if name in KERNELS:
        apply, name = KERNELS[name]
    else:
        apply = _make_loops(getattr(simd_math, name))[0]
    compare = _comparison(against, name)
    family = name in GELU_NAMES
    check = _make_checker(
        REF_FUNCS[name], EPS_GELU if family else EPS_AMBIGUOUS, ROOTS.get(name, (1.0, -1.0))
    )
    flags = np.empty(CHUNK, np.uint8)
    base = np.arange(CHUNK, dtype=np.uint32)
    bits = np.empty(CHUNK, np.uint32)
    xs = bits.view(np.float32)
    npy = np.empty(CHUNK, np.float32)
    ours = np.empty(CHUNK, np.float32)
    totals = [0.0, 0.0, 0, 0, 0, 0, 0.0]
    n_amb = 0
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):
        for start in range(0, 1 << 32, CHUNK):
            np.add(base, np.uint32(start), out=bits)
            compare(xs, npy)
            apply(xs, ours)
            stats = check(xs, ours, npy, flags)
            totals[0] = max(totals[0], stats[:, 0].max())
            totals[1] = max(totals[1], stats[:, 1].max())
            totals[6] = max(totals[6], stats[:, 6].max())
            for j in range(2, 6):
                totals[j] += int(stats[:, j].sum())
            idx = np.flatnonzero(flags)
            if family and idx.size:  # ties of x/2 (odd subnormal x): any neighbour is 0.5 ULP
                tie = np.abs(xs[idx]) < 2.0**-60
                if tie.any():
                    totals[0] = max(totals[0], 0.5)
                    n_amb += int(tie.sum())
                idx = idx[~tie]
            if idx.size:
                n_amb += idx.size
                extra = _resolve(name, xs[idx], ours[idx], npy[idx])
                totals[0] = max(totals[0], extra[0])
                totals[1] = max(totals[1], extra[1])
                totals[2] += int(extra[2])
                totals[3] += int(extra[3])
    return {
        "max_ulp": totals[0],
        "numpy_max_ulp": totals[1],
        "not_cr": totals[2],
        "numpy_not_cr": totals[3],
        "special_fail": totals[4],
        "numpy_special_fail": totals[5],
        "ambiguous": n_amb,
        "root_abs": totals[6],
        "seconds": time.perf_counter() - t0,
    }


def _f64_inputs(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random float64 inputs for ``name``: whole domain plus the hard regions."""
    positive = rng.integers(1, 0x7FF0000000000000, n, dtype=np.int64).view(np.float64)
    near_one = 1.0 + rng.uniform(-0.3, 0.42, n)
    edges = np.sqrt([2.0, 0.5])[rng.integers(0, 2, n)] * (1.0 + rng.uniform(-1e-6, 1e-6, n))
    tiny = rng.choice([-1.0, 1.0], n) * np.exp(rng.uniform(-740.0, -1.0, n))
    # The edges of log2_avx512's 16 table intervals of [0.734, 1.469), at random exponents.
    starts = (log2_avx512.FLOAT64.offset + np.arange(16, dtype=np.int64) * (1 << 48)).view(
        np.float64
    )
    table_edges = starts[rng.integers(0, 16, n)] * (1.0 + rng.uniform(-1e-9, 1e-9, n))
    table_edges = np.ldexp(table_edges, rng.integers(-1000, 1000, n))
    logs = [positive, near_one, edges, table_edges]
    return np.concatenate(
        {
            "log2": logs,
            "log": logs,
            "log10": logs,
            "log1p": [positive, tiny, rng.uniform(-1.0, 1.0, n), near_one - 1.0, edges - 1.0],
            "exp": [rng.uniform(-746.0, 710.0, n), rng.uniform(-746.0, -708.0, n), tiny],
            "exp2": [rng.uniform(-1076.0, 1025.0, n), rng.uniform(-1076.0, -1021.0, n), tiny],
            "expm1": [rng.uniform(-40.0, 710.0, n), rng.uniform(-1.5, 1.5, n), tiny],
        }[name]
    )


def _mp_ulp_error(name: str, x: float, got: float) -> float:
    """ULP error of a float64 result ``got`` for input ``x`` against mpmath (200 bits)."""
    with mpmath.workprec(200):
        y = MP_FUNCS[name](mpmath.mpf(x))
        e = max(int(mpmath.floor(mpmath.log(abs(y), 2))), -1022)
        return float(abs(mpmath.mpf(got) - y) / mpmath.ldexp(1, e - 52))


def float64_sampled(name: str, n: int) -> dict[str, float]:
    """Sampled float64 accuracy of ``name`` and of NumPy's ufunc on the same inputs."""
    if name in KERNELS:
        loop, name = KERNELS[name]
    else:
        loop = _make_loops(getattr(simd_math, name))[1]
    x = _f64_inputs(name, n, np.random.default_rng(2024))
    ours = np.empty_like(x)
    loop(x, ours)
    ufunc = getattr(np, name)
    with np.errstate(all="ignore"):
        npy = ufunc(x)
        ref = ufunc(x.astype(np.longdouble))
    big = np.longdouble(np.finfo(np.float64).max)
    ok = np.isfinite(ref) & (ref != 0) & (np.abs(ref) <= big)
    x, ours, npy, ref = x[ok], ours[ok], npy[ok], ref[ok]
    ulp = np.ldexp(np.longdouble(1), np.maximum(np.frexp(ref)[1] - 53, -1074))
    err = (np.abs(ours.astype(np.longdouble) - ref) / ulp).astype(np.float64)
    err_npy = (np.abs(npy.astype(np.longdouble) - ref) / ulp).astype(np.float64)
    sub = np.abs(ref) < np.longdouble(np.finfo(np.float64).smallest_normal)
    out = {"n": float(x.size), "numpy_max_ulp": float(err_npy.max())}
    for key, mask in (("max_ulp", ~sub), ("max_ulp_subnormal", sub)):
        worst = np.flatnonzero(mask)[np.argsort(err[mask])[-20:]]
        out[key] = max((_mp_ulp_error(name, x[i], ours[i]) for i in worst), default=0.0)
    return out


def _family_inputs(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """float64 inputs of an erf-family function: uniform over its whole range, its core,
    its tail (where the result is tiny) and near the edges of its pieces."""
    if name == "erf":
        return np.concatenate(
            [rng.uniform(-6.5, 6.5, n), rng.uniform(-1.0, 1.0, n), rng.uniform(0.7, 0.8, n)]
        )
    tail = (-38.7, -25.0) if not name.startswith("gelu_tanh") else (-12.0, -6.0)
    return np.concatenate(
        [rng.uniform(-40.0, 40.0, n), rng.uniform(-4.0, 4.0, n), rng.uniform(*tail, n)]
    )


def float64_family(name: str, n: int) -> dict[str, float]:
    """Sampled float64 accuracy of an erf-family function against mpmath (40 digits)."""
    x = _family_inputs(name, n, np.random.default_rng(2024))
    ours = np.empty_like(x)
    _make_loops(getattr(simd_math, name))[1](x, ours)
    lo, hi = ROOTS.get(name, (1.0, -1.0))
    worst, root_abs = 0.0, 0.0
    with mpmath.workdps(40):
        for v, got in zip(x.tolist(), ours.tolist(), strict=True):
            y = MP_FUNCS[name](mpmath.mpf(v))
            if lo <= v <= hi:
                root_abs = max(root_abs, float(abs(mpmath.mpf(got) - y)))
            elif y != 0:
                e = max(int(mpmath.floor(mpmath.log(abs(y), 2))), -1022)
                worst = max(worst, float(abs(mpmath.mpf(got) - y) / mpmath.ldexp(1, e - 52)))
            elif got != 0:
                worst = math.inf
    return {"n": float(x.size), "max_ulp": worst, "root_abs": root_abs}


def _make_loops(fn: Callable) -> tuple[Callable, Callable]:
    """2-thread ``prange`` loop and 1-thread plain loop applying ``fn``."""

    @njit(parallel=True, error_model="numpy")
    def par(x, out):
        for i in prange(x.size):
            out[i] = fn(x[i])

    @njit(error_model="numpy")
    def ser(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    return par, ser


def _best(fs: list[Callable], reps: int) -> list[float]:
    """Best wall time of each of ``fs`` over ``reps`` interleaved rounds (robust to noise)."""
    best = [math.inf] * len(fs)
    for _ in range(reps):
        for j, f in enumerate(fs):
            t = time.perf_counter()
            f()
            best[j] = min(best[j], time.perf_counter() - t)
    return best


def speed(name: str) -> list[tuple[str, int, float, float, float]]:
    """Time ``name`` vs NumPy; rows of (dtype, n, numpy_ms, ratio_2thr, ratio_1thr)."""
    par, ser = _make_loops(getattr(simd_math, name))
    ufunc = getattr(np, name)
    rng = np.random.default_rng(0)
    lo, hi = SPEED_RANGES[name]
    rows = []
    for dtype in (np.float32, np.float64):
        for n in (10**6, 10**7):
            x = rng.uniform(lo, hi, n).astype(dtype)
            out = np.empty_like(x)
            par(x[:16], out[:16])
            ser(x[:16], out[:16])
            t_np, t_par, t_ser = _best(
                [
                    lambda x=x, out=out: ufunc(x, out=out),
                    lambda x=x, out=out: par(x, out),
                    lambda x=x, out=out: ser(x, out),
                ],
                200 if n == 10**6 else 20,
            )
            rows.append((np.dtype(dtype).name, n, t_np * 1e3, t_np / t_par, t_np / t_ser))
    return rows


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--funcs", default=",".join(NAMES), help="comma-separated names")
    parser.add_argument("--no-accuracy", action="store_true", help="skip exhaustive check")
    parser.add_argument("--no-speed", action="store_true", help="skip timing")
    parser.add_argument("--f64-samples", type=int, default=200_000, help="per input group")
    parser.add_argument(
        "--against",
        choices=("numpy", "torch", "mlx"),
        default="numpy",
        help="library in the second column of the float32 check",
    )
    args = parser.parse_args()
    names = [n for n in args.funcs.split(",") if n]
    numba.set_num_threads(2)
    print(f"numpy {np.__version__}, numba {numba.__version__}, threads {numba.get_num_threads()}")

    if not args.no_accuracy:
        print("\nExhaustive float32 accuracy (all 2**32 inputs)")
        print(
            f"{'func':6s} {'max ULP':>9s} {'not CR':>8s} {'special':>7s} | "
            f"{args.against + ' max':>9s} {'not CR':>10s} {'special':>7s} | "
            f"{'ambig.':>6s} {'sec':>5s}"
        )
        for name in names:
            r = exhaustive(name, args.against)
            print(
                f"{name:6s} {r['max_ulp']:9.6f} {r['not_cr']:8d} {r['special_fail']:7d} | "
                f"{r['numpy_max_ulp']:9.4f} {r['numpy_not_cr']:10d} "
                f"{r['numpy_special_fail']:7d} | {r['ambiguous']:6d} {r['seconds']:5.1f}"
                + (f" | near the root: abs {r['root_abs']:.3g}" if name in ROOTS else ""),
                flush=True,
            )

    if args.f64_samples:
        print(f"\nSampled float64 accuracy ({args.f64_samples} inputs per group)")
        print(f"{'func':6s} {'n':>8s} {'max ULP':>8s} {'subnormal':>9s} {'numpy max':>9s}")
        for name in names:
            if name in GELU_NAMES:
                r = float64_family(name, min(args.f64_samples, 2000))
                print(
                    f"{name:6s} {int(r['n']):8d} {r['max_ulp']:8.4f} (mpmath)"
                    + (f" near the root: abs {r['root_abs']:.3g}" if name in ROOTS else ""),
                    flush=True,
                )
                continue
            r = float64_sampled(name, args.f64_samples)
            print(
                f"{name:6s} {int(r['n']):8d} {r['max_ulp']:8.4f} {r['max_ulp_subnormal']:9.4f} "
                f"{r['numpy_max_ulp']:9.4f}",
                flush=True,
            )

    # KERNELS are timed by python -m pylucid bench, the erf family by transformer_kernels.py
    names = [n for n in names if n not in KERNELS and n not in GELU_NAMES]
    if not args.no_speed and names:
        print("\nSpeed vs NumPy (ratio = NumPy time / ours; > 1 is faster)")
        print(f"{'func':6s} {'dtype':7s} {'n':>8s} {'numpy ms':>9s} {'2 thr':>6s} {'1 thr':>6s}")
        for name in names:
            for dtype, n, t_np, r_par, r_ser in speed(name):
                print(
                    f"{name:6s} {dtype:7s} {n:8d} {t_np:9.3f} {r_par:6.2f} {r_ser:6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
