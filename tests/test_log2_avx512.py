"""The AVX-512 log2 kernels (float32, float64): accuracy bound, IEEE specials in every chunk
position, the serial and parallel loops, and that the numba backend uses them.

The bound asserted, 0.525 ULP, is the largest error measured (float32: 0.5246, the maximum
over all 2**31 positive inputs; float64: 0.5241 over 8.1e7 samples;
``benchmarks/ulp_exhaustive.py --funcs log2_avx512``) plus a margin for the reference:
float64 log2 for float32 results (~1e-16 relative, under 1e-8 float32 ULP), x87 long double
log2 for float64 ones (~1e-19 relative, under 1e-3 float64 ULP).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pylucid as pl
from pylucid.kernels import log2_avx512 as kernel
from pylucid.kernels.log2_avx512 import PARALLEL_THRESHOLD_LOG2

#: The tests that run the kernels; the typing test compiles them on any CPU.
needs_avx512 = pytest.mark.skipif(
    not kernel.AVAILABLE, reason="needs AVX-512F and DQ, which Numba's target CPU lacks"
)

BOUND_ULP = 0.525
DTYPES = [np.float32, np.float64]
FORMATS = {np.float32: kernel.FLOAT32, np.float64: kernel.FLOAT64}
BITS = {np.float32: np.uint32, np.float64: np.uint64}
#: Wider types for the reference: float64 for float32, x87 long double for float64.
WIDER = {np.float32: np.float64, np.float64: np.longdouble}


def specials(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    values = [0.0, -0.0, -1.0, -info.smallest_normal, -np.inf, np.inf, np.nan, 1.0, 2.0, 0.5,
              info.smallest_subnormal, info.smallest_normal, info.smallest_normal / 3,
              info.max, -info.max]  # fmt: skip
    return np.array(values, dtype=dtype)


def reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(x.astype(WIDER[x.dtype.type]))


def check(x: np.ndarray, y: np.ndarray) -> None:
    """Within the bound where the result is finite and non-zero; IEEE values elsewhere."""
    exact = reference(x)
    regular = np.isfinite(exact) & (exact != 0)
    spacing = np.spacing(np.abs(exact[regular]).astype(x.dtype)).astype(exact.dtype)
    ulps = np.abs(y[regular].astype(exact.dtype) - exact[regular]) / spacing
    assert ulps.max(initial=0) <= BOUND_ULP
    np.testing.assert_array_equal(y[~regular], exact[~regular].astype(x.dtype))
    assert not np.signbit(y[x == 1]).any()  # log2(1) = +0


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
def test_accuracy_on_random_bit_patterns(rng: np.random.Generator, dtype) -> None:
    info, bits = np.finfo(dtype), BITS[dtype]
    low = np.array(info.smallest_normal, dtype).view(bits)
    high = np.array(np.inf, dtype).view(bits)
    x = rng.integers(low, high, 1_000_000, dtype=bits).view(dtype)
    check(x, kernel.log2(x))


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
def test_accuracy_near_one_and_at_table_edges(rng: np.random.Generator, dtype) -> None:
    """|log2 x| is small near 1: the relative error of the tail matters most there; and the
    intervals' edges have the largest |r|."""
    fmt, bits = FORMATS[dtype], BITS[dtype]
    one = np.array(1.0, dtype).view(bits).astype(np.int64)
    spread = 1 << (fmt.fraction_bits - 3)
    near = (one + rng.integers(-spread, spread, 500_000)).astype(bits)
    step = 1 << (fmt.fraction_bits - 4)
    edges = fmt.offset + np.arange(0, 1 << fmt.fraction_bits, step, dtype=np.uint64)
    around = (edges[:, None].astype(np.int64) + np.arange(-64, 64)).ravel().astype(bits)
    x = np.concatenate([near, around]).view(dtype)
    check(x, kernel.log2(x))


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
def test_powers_of_two_are_exact(dtype) -> None:
    info = np.finfo(dtype)
    exponents = np.arange(info.minexp - info.nmant, info.maxexp)
    x = np.exp2(exponents.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(kernel.log2(x), exponents.astype(dtype))


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "size", [0, 1, 7, 15, 16, 17, kernel.CHUNK - 1, kernel.CHUNK, kernel.CHUNK + 17, 3 * 4096 + 5]
)
@pytest.mark.parametrize("position", ["first", "middle", "last", "none"])
def test_specials_anywhere_in_a_chunk(
    rng: np.random.Generator, dtype, size: int, position: str
) -> None:
    """A chunk holding a special value is redone by the careful path; the other elements of
    that chunk must still be right, and so must the tail beyond the last full vector."""
    x = rng.uniform(0.01, 1000.0, size).astype(dtype)
    if size and position != "none":
        where = {"first": 0, "middle": size // 2, "last": size - 1}[position]
        for value in specials(dtype):
            x[where] = value
            check(x, kernel.log2(x))
    check(x, kernel.log2(x))


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
def test_serial_and_parallel_loops_agree(rng: np.random.Generator, dtype) -> None:
    x = np.exp(rng.uniform(-80, 80, 4 * PARALLEL_THRESHOLD_LOG2 + 7)).astype(dtype)
    x[::997] = np.resize(specials(dtype), x[::997].size)
    serial, parallel = np.empty_like(x), np.empty_like(x)
    kernel._serial(x, serial)
    kernel._parallel(x, parallel)
    np.testing.assert_array_equal(serial, parallel)
    check(x, parallel)


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
def test_numba_backend_runs_it(rng: np.random.Generator, dtype) -> None:
    x = rng.uniform(0.5, 2.0, (300, 7)).astype(dtype)
    tensor_dtype = pl.float32 if dtype is np.float32 else pl.float64
    np.testing.assert_array_equal(pl.log2(pl.tensor(x, dtype=tensor_dtype)).numpy(), kernel.log2(x))
    transposed = pl.log2(pl.tensor(np.ascontiguousarray(x.T), dtype=tensor_dtype).T).numpy()
    np.testing.assert_array_equal(transposed, kernel.log2(x))


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_streaming_stores_with_any_output_alignment(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, dtype, offset: int
) -> None:
    """Outputs from STREAMING_BYTES on are written by a scalar head up to a 64-byte boundary,
    then with streaming stores: the result must not depend on where the output starts."""
    monkeypatch.setattr(kernel, "STREAMING_BYTES", 1 << 16)
    x = np.exp(rng.uniform(-80, 80, 5 * PARALLEL_THRESHOLD_LOG2 + 3)).astype(dtype)
    x[kernel.CHUNK + 5] = 0.0  # one chunk through the careful path
    backing = np.empty(x.size + 8, dtype)
    out = backing[offset : offset + x.size]
    kernel.log2(x, out)
    expected = np.empty_like(x)
    kernel._parallel(x, expected)
    np.testing.assert_array_equal(out, expected)
    check(x, out)


@needs_avx512
@pytest.mark.parametrize("dtype", DTYPES)
def test_read_only_and_broadcast_inputs(dtype) -> None:
    """A read-only input (``from_numpy`` of a locked array, an ``expand`` view) is typed
    like a writable one; the output is a new, writable array."""
    x = np.array([1.0, 2.0, 0.0, 8.0, 3.0], dtype)
    locked = x.copy()
    locked.flags.writeable = False
    tensor_dtype = pl.float32 if dtype is np.float32 else pl.float64
    np.testing.assert_array_equal(pl.log2(pl.from_numpy(locked)).numpy(), kernel.log2(x))
    expanded = pl.log2(pl.tensor(x[:2], dtype=tensor_dtype).expand(2)).numpy()
    np.testing.assert_array_equal(expanded, kernel.log2(x[:2]))


#: Compiles (never runs: no AVX-512 needed) the loops for read-only inputs, with Numba
#: targeting an AVX-512 CPU.
_TYPING_SCRIPT = """
from numba import types
from pylucid.kernels import log2_avx512 as kernel
assert kernel.AVAILABLE
for dtype in (types.float32, types.float64):
    signature = (types.Array(dtype, 1, "C", readonly=True), types.Array(dtype, 1, "C"))
    for loop in (kernel._serial, kernel._parallel, kernel._parallel_streaming):
        loop.compile(signature)
        assert signature in loop.signatures
"""


def test_read_only_inputs_type_check_on_any_cpu(tmp_path: Path) -> None:
    """Each loop compiles for a read-only input of each format. Run in a process whose Numba
    targets Skylake-AVX512, with its own cache directory (its code must not reach the
    shared cache), calling nothing."""
    env = dict(
        os.environ,
        NUMBA_CPU_NAME="skylake-avx512",
        NUMBA_CPU_FEATURES="+avx512f,+avx512dq",
        NUMBA_CACHE_DIR=str(tmp_path),
    )
    result = subprocess.run(
        [sys.executable, "-c", _TYPING_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
