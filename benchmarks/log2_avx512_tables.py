"""Build the tables and fit the polynomials of ``pylucid.kernels.log2_avx512``; check them.

Run ``python benchmarks/log2_avx512_tables.py [--fit]`` (needs mpmath). It rebuilds both
formats' tables and says whether they equal the module's constants; ``--fit`` also refits
the polynomials (a few minutes for float64) and compares them.

Tables. After ``t = ix - OFFSET`` the reduced argument is ``m = bits(ix - (t & EXPONENT_MASK))``
in [0.734, 1.469), cut into 16 intervals by the 4 bits of ``t`` below the exponent. For each
interval, ``INV_C`` is the multiple of 2**-j (j = 3 ... 15, near 2 / (lo + hi)) with the
smallest ``max |r|`` for which ``r = m INV_C - 1`` is representable for *every* ``m`` of the
interval, in exact rational arithmetic (so the kernel's ``fma(m, INV_C, -1)`` is exact); the
interval holding 1.0 takes ``INV_C = 1``. Both formats get the same ``INV_C``. ``T_HI`` is
``-log2(INV_C)`` rounded to a multiple of 2**-16 (float32) or 2**-41 (float64), so that
``k + T_HI`` is exact for every exponent ``k``; ``T_LO`` is the rest, rounded to the format.

Polynomials. ``Q(r) ~ (log2(1 + r) - r / ln 2) / r**2``. float32, degree 4: Lawson's
iteration (iteratively reweighted least squares towards the minimax) in float64 on 3000
Chebyshev nodes of ``|r| <= 0.0342``, rounded to float32 at the end; its error relative to
the result is ~2**-33 (degree 3 measured 0.5317 ULP over all inputs, degree 4 0.5246).
float64, degree 8: Lawson's iteration in 60-digit arithmetic with weight ``|r|`` (the
relative error of ``log2(1 + r)``) over the range of ``r``, the coefficients rounded to
float64 one at a time, each later one refitted after the earlier ones are rounded; error
~2**-61 (degree 7 measured 0.65 ULP).
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import mpmath as mp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pylucid.kernels import log2_avx512 as kernel  # noqa: E402

mp.mp.dps = 60
#: The grid of T_HI: 2**-16 for float32 (k + T_HI in 24 bits), 2**-41 for float64.
GRID = {"float32": 16, "float64": 41}
DEGREE = {"float32": 4, "float64": 8}
DTYPE = {"float32": np.float32, "float64": np.float64}


def _as_fraction(bits: int, dtype) -> Fraction:
    word = np.uint32 if dtype is np.float32 else np.uint64
    return Fraction(*np.array(bits, dtype=word).view(dtype).item().as_integer_ratio())


def tables(fmt: kernel.Format) -> dict[str, object]:
    """``INV_C``, ``T_HI``, ``T_LO`` and the range of ``r`` of one format."""
    dtype, p = DTYPE[fmt.name], fmt.fraction_bits
    width = 1 << (p - 4)  # bit patterns per interval
    inv_c, t_hi, t_lo, r_low, r_high = [], [], [], 0.0, 0.0
    for i in range(16):
        lo = _as_fraction(fmt.offset + i * width, dtype)
        hi = _as_fraction(fmt.offset + (i + 1) * width - 1, dtype)
        spacing = [Fraction(1, 2 ** (p + 1)) if m < 1 else Fraction(1, 2**p) for m in (lo, hi)]
        if lo <= 1 <= hi:
            best = Fraction(1)
        else:
            candidates = []
            for j in range(3, 16):
                step = Fraction(1, 2**j)
                base = (2 / (lo + hi) / step).__floor__()
                for c in ((base + d) * step for d in range(-2, 4)):
                    ends = (lo * c - 1, hi * c - 1)
                    # r is a multiple of spacing(m) * step: exact if it fits in p + 1 bits
                    if all(abs(r) <= 2 ** (p + 1) * g * step for r, g in zip(ends, spacing)):
                        candidates.append((max(abs(r) for r in ends), c))
            best = min(candidates)[1]
        inv_c.append(float(best))
        r_low, r_high = min(r_low, float(lo * best - 1)), max(r_high, float(hi * best - 1))
        exact = -mp.log(mp.mpf(float(best))) / mp.log(2)
        rounded = float(mp.nint(exact * 2 ** GRID[fmt.name]) / 2 ** GRID[fmt.name])
        t_hi.append(rounded)
        t_lo.append(float(dtype(float(exact - rounded))))
    inv_ln2 = 1 / mp.log(2)
    l_hi = float(dtype(float(inv_ln2)))
    l_lo = float(dtype(float(inv_ln2 - mp.mpf(l_hi))))
    return {
        "INV_C": tuple(inv_c), "t_hi": tuple(t_hi), "t_lo": tuple(t_lo),
        "l_hi": l_hi, "l_lo": l_lo, "r": (r_low, r_high),
    }  # fmt: skip


def polynomial_float32(r_max: float = 0.0342, iterations: int = 100):
    """float32 Q's coefficients, lowest degree first, and max |Q - exact| on the nodes."""
    inv_ln2 = 1 / mp.log(2)

    def q_exact(r: float) -> float:
        if r == 0:
            return float(-inv_ln2 / 2)
        return float((mp.log(1 + mp.mpf(r)) / mp.log(2) - mp.mpf(r) * inv_ln2) / mp.mpf(r) ** 2)

    nodes = np.cos(np.linspace(0, np.pi, 3000)) * r_max
    values = np.array([q_exact(t) for t in nodes])
    vander = np.vander(nodes, DEGREE["float32"] + 1, increasing=True)
    weights = np.full(nodes.size, 1 / nodes.size)
    for _ in range(iterations):
        root = np.sqrt(weights)
        coefficients, *_ = np.linalg.lstsq(vander * root[:, None], root * values, rcond=None)
        error = np.abs(vander @ coefficients - values)
        weights *= error
        weights /= weights.sum()
    rounded = coefficients.astype(np.float32)
    return tuple(float(c) for c in rounded), float(np.abs(vander @ rounded - values).max())


def polynomial(fmt: kernel.Format, r_range: tuple[float, float], iterations: int = 40):
    """Q's coefficients in the format, lowest degree first, and max |r (Q - exact)|."""
    if fmt is kernel.FLOAT32:
        return polynomial_float32()
    dtype, degree = DTYPE[fmt.name], DEGREE[fmt.name]
    l_total = mp.mpf(fmt.l_hi) + mp.mpf(fmt.l_lo)

    def q_exact(r):
        return (mp.log1p(r) / mp.log(2) - r * l_total) / r**2

    a, b = (mp.mpf(v) for v in r_range)
    count = 30 * (degree + 1)
    nodes = [a + (b - a) * (1 - mp.cos(mp.pi * k / (count - 1))) / 2 for k in range(count)]
    nodes = [r for r in nodes if r != 0]
    values = [q_exact(r) for r in nodes]
    fixed: list = []
    for n_fixed in range(degree + 1):
        free = degree + 1 - n_fixed
        weights = [mp.mpf(1) / len(nodes)] * len(nodes)
        for _ in range(iterations):
            matrix, target = mp.matrix(len(nodes), free), mp.matrix(len(nodes), 1)
            for k, r in enumerate(nodes):
                scale = mp.sqrt(weights[k]) * abs(r)
                rest = values[k] - sum(c * r**j for j, c in enumerate(fixed))
                for j in range(free):
                    matrix[k, j] = scale * r ** (n_fixed + j)
                target[k] = scale * rest
            solution, _ = mp.qr_solve(matrix, target)
            errors = [
                abs(r) * abs(values[k] - sum(c * r**j for j, c in enumerate(fixed))
                             - sum(solution[j] * r ** (n_fixed + j) for j in range(free)))
                for k, r in enumerate(nodes)
            ]  # fmt: skip
            total = sum(w * e for w, e in zip(weights, errors))
            weights = [w * e / total for w, e in zip(weights, errors)]
        fixed.append(mp.mpf(float(dtype(float(solution[0])))))
    return tuple(float(c) for c in fixed), float(max(errors))


def main() -> None:
    fit = "--fit" in sys.argv[1:]
    for fmt in (kernel.FLOAT32, kernel.FLOAT64):
        built = tables(fmt)
        print(f"{fmt.name}: OFFSET = {fmt.offset:#x}, r in {built['r']}")
        checks = {"INV_C": built["INV_C"] == kernel.INV_C}
        for name in ("t_hi", "t_lo", "l_hi", "l_lo"):
            checks[name] = built[name] == getattr(fmt, name)
        if fit:
            q, error = polynomial(fmt, built["r"])
            print(f"  Q = {q}\n  max fit error = 2**{np.log2(error):.1f}")
            checks["q"] = np.allclose(q, fmt.q, rtol=1e-9, atol=0)
        for name, same in checks.items():
            print(f"  {name}: {'matches the module' if same else 'DIFFERS from the module'}")


if __name__ == "__main__":
    main()
