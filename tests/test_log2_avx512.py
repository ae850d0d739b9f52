"""The AVX-512 float32 log2 kernel: accuracy bound, IEEE specials in every chunk position,
the serial and parallel loops, and that the numba backend uses it for float32.

The bound asserted, 0.525 ULP, is the exhaustive maximum over all 2**31 positive float32
inputs (0.5246, ``benchmarks/log2_avx512_exhaustive.py``) plus a margin for the float64
reference, whose own error (~1e-16 relative) is under 1e-8 float32 ULP.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.kernels import log2_avx512 as kernel
from pylucid.kernels.loops import PARALLEL_THRESHOLD_HEAVY

pytestmark = pytest.mark.skipif(
    not kernel.AVAILABLE, reason="needs a CPU with AVX-512F (Numba's target has no +avx512f)"
)

BOUND_ULP = 0.525
SPECIALS = np.array(
    [0.0, -0.0, -1.0, -1e-40, -np.inf, np.inf, np.nan, 1.0, 2.0, 0.5, 1e-45, 1e-40,
     1.1754942e-38, 1.1754942e-38 * 0.5, 3.4028235e38, -3.4028235e38],
    dtype=np.float32,
)  # fmt: skip


def reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(x.astype(np.float64))


def ulps(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|y - log2 x| in float32 ULPs of the exact value (x positive, finite, not 1)."""
    exact = reference(x)
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(y.astype(np.float64) - exact) / spacing


def check(x: np.ndarray, y: np.ndarray) -> None:
    """Within the bound where the result is finite and non-zero; IEEE values elsewhere."""
    exact = reference(x)
    regular = np.isfinite(exact) & (exact != 0)
    assert ulps(y[regular], x[regular]).max(initial=0) <= BOUND_ULP
    np.testing.assert_array_equal(y[~regular], exact[~regular].astype(np.float32))
    ones = x == 1
    assert not np.signbit(y[ones]).any()  # log2(1) = +0


def test_accuracy_on_random_bit_patterns(rng: np.random.Generator) -> None:
    bits = rng.integers(0x00800000, 0x7F800000, 2_000_000, dtype=np.uint32)
    x = bits.view(np.float32)
    check(x, kernel.log2_float32(x))


def test_accuracy_near_one_and_at_table_edges(rng: np.random.Generator) -> None:
    """|log2 x| is small near 1: the relative error of the tail matters most there."""
    one = np.uint32(0x3F800000)
    near = (one + rng.integers(-(1 << 20), 1 << 20, 1_000_000)).astype(np.uint32)
    edges = (kernel.OFFSET + np.arange(0, 1 << 23, 1 << 19)).astype(np.uint32)
    around = (edges[:, None] + np.arange(-64, 64)).ravel().astype(np.uint32)
    x = np.concatenate([near, around]).view(np.float32)
    check(x, kernel.log2_float32(x))


def test_powers_of_two_are_exact() -> None:
    x = np.exp2(np.arange(-149, 128)).astype(np.float32)
    np.testing.assert_array_equal(kernel.log2_float32(x), np.arange(-149, 128, dtype=np.float32))


@pytest.mark.parametrize(
    "size", [0, 1, 15, 16, 17, kernel.CHUNK - 1, kernel.CHUNK, kernel.CHUNK + 17, 3 * 4096 + 5]
)
@pytest.mark.parametrize("position", ["first", "middle", "last", "none"])
def test_specials_anywhere_in_a_chunk(rng: np.random.Generator, size: int, position: str) -> None:
    """A chunk holding a special value is redone by the careful path; the other elements of
    that chunk must still be right, and so must the tail beyond the last full vector."""
    x = rng.uniform(0.01, 1000.0, size).astype(np.float32)
    if size and position != "none":
        where = {"first": 0, "middle": size // 2, "last": size - 1}[position]
        for value in SPECIALS:
            x[where] = value
            check(x, kernel.log2_float32(x))
    check(x, kernel.log2_float32(x))


def test_serial_and_parallel_loops_agree(rng: np.random.Generator) -> None:
    x = np.exp(rng.uniform(-80, 80, 4 * PARALLEL_THRESHOLD_HEAVY + 7)).astype(np.float32)
    x[::997] = np.resize(SPECIALS, x[::997].size)
    serial, parallel = np.empty_like(x), np.empty_like(x)
    kernel._serial(x, serial)
    kernel._parallel(x, parallel)
    np.testing.assert_array_equal(serial, parallel)
    check(x, parallel)


def test_numba_backend_runs_it_for_float32(rng: np.random.Generator) -> None:
    x = rng.uniform(0.5, 2.0, (300, 7)).astype(np.float32)
    np.testing.assert_array_equal(pl.log2(pl.tensor(x)).numpy(), kernel.log2_float32(x))
    transposed = pl.log2(pl.tensor(np.ascontiguousarray(x.T)).T).numpy()
    np.testing.assert_array_equal(transposed, kernel.log2_float32(x))
    x64 = x.astype(np.float64)
    exact64 = np.log2(x64)
    np.testing.assert_allclose(pl.log2(pl.tensor(x64)).numpy(), exact64, rtol=2.3e-16)
