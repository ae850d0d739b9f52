"""Build the tables and fit the polynomial of ``pylucid.kernels.log2_avx512``; check them.

Run ``python benchmarks/log2_avx512_tables.py`` (needs mpmath). It prints the constants and
says whether they equal the ones in the module.

Tables. After ``t = ix - OFFSET`` the reduced argument is ``m = bits(ix - (t & 0xFF800000))``
in [0.734, 1.469), cut into 16 intervals by the 4 bits of ``t`` below the exponent. For each
interval, ``INV_C`` is the number with the fewest fraction bits (3 to 13 tried, near
2 / (lo + hi)) for which ``r = m INV_C - 1`` is a float32 for *every* ``m`` of the interval
(so the kernel's ``fma(m, INV_C, -1)`` is exact) and ``max |r|`` is smallest; the interval
holding 1.0 takes ``INV_C = 1``. ``T_HI`` is ``-log2(INV_C)`` rounded to a multiple of
2**-16, so that ``k + T_HI`` is exact in float32 for every exponent ``k``; ``T_LO`` the float32
of the rest.

Polynomial. ``Q(r) ~ (log2(1 + r) - r / ln 2) / r**2`` on ``|r| <= 0.0342``, degree 4,
fitted by iteratively reweighted least squares on Chebyshev nodes (a near-minimax fit) and
rounded to float32: its error relative to ``log2(1 + r)`` is ~2**-33, far below the final
rounding. Degree 3 measured 0.5317 ULP over all inputs, degree 4 0.5246.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mpmath as mp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pylucid.kernels import log2_avx512 as kernel  # noqa: E402

mp.mp.dps = 50
INDEX_BITS = 4
#: 1.0 at the centre of interval 8.
OFFSET = 0x3F800000 - (1 << (22 - INDEX_BITS)) - 8 * (1 << (23 - INDEX_BITS))


def tables() -> tuple[list[float], list[float], list[float], float]:
    """``INV_C``, ``T_HI``, ``T_LO`` and the largest ``|r|``."""
    ix = np.arange(OFFSET, OFFSET + (1 << 23), dtype=np.int64)
    index = ((ix - OFFSET) >> (23 - INDEX_BITS)) & ((1 << INDEX_BITS) - 1)
    m_all = ix.astype(np.int32).view(np.float32).astype(np.float64)
    inv_c, t_hi, t_lo, r_max = [], [], [], 0.0
    for i in range(1 << INDEX_BITS):
        m = m_all[index == i]
        lo, hi = m.min(), m.max()
        if lo <= 1.0 <= hi:
            best = (1.0, np.abs(m - 1).max())
        else:
            best = None
            for bits in range(3, 14):
                step = 2.0**-bits
                centre = np.floor(2.0 / (lo + hi) / step) * step
                for candidate in (centre + step * d for d in range(-2, 4)):
                    r = m * candidate - 1.0  # exact in float64
                    if np.all(r.astype(np.float32).astype(np.float64) == r):
                        if best is None or np.abs(r).max() < best[1]:
                            best = (candidate, np.abs(r).max())
        inv_c.append(float(best[0]))
        r_max = max(r_max, float(best[1]))
        exact = -mp.log(mp.mpf(best[0])) / mp.log(2)
        rounded = float(mp.nint(exact * 2**16) / 2**16)
        t_hi.append(rounded)
        t_lo.append(float(np.float32(float(exact - rounded))))
    return inv_c, t_hi, t_lo, r_max


def polynomial(degree: int, r_max: float, iterations: int = 100) -> list[float]:
    """float32 coefficients of Q, lowest degree first."""
    inv_ln2 = 1 / mp.log(2)

    def q_exact(r: float) -> float:
        if r == 0:
            return float(-inv_ln2 / 2)
        r = mp.mpf(r)
        return float((mp.log(1 + r) / mp.log(2) - r * inv_ln2) / r**2)

    nodes = np.cos(np.linspace(0, np.pi, 3000)) * r_max
    values = np.array([q_exact(t) for t in nodes])
    vander = np.vander(nodes, degree + 1, increasing=True)
    weights = np.full(nodes.size, 1 / nodes.size)
    for _ in range(iterations):
        root = np.sqrt(weights)
        coefficients, *_ = np.linalg.lstsq(vander * root[:, None], root * values, rcond=None)
        error = np.abs(vander @ coefficients - values)
        weights *= error
        weights /= weights.sum()
    return [float(c) for c in coefficients.astype(np.float32)]


def main() -> None:
    inv_c, t_hi, t_lo, r_max = tables()
    q = polynomial(4, 0.0342)
    inv_ln2 = 1 / mp.log(2)
    l_hi = float(np.float32(float(inv_ln2)))
    l_lo = float(np.float32(float(inv_ln2 - mp.mpf(l_hi))))
    print(f"OFFSET = {OFFSET:#x}, max |r| = {r_max:.4f}")
    print(f"INV_C = {inv_c}\nT_HI = {t_hi}\nT_LO = {t_lo}\nL_HI = {l_hi}\nL_LO = {l_lo}\nQ = {q}")
    built = {
        "OFFSET": OFFSET,
        "INV_C": tuple(inv_c),
        "T_HI": tuple(t_hi),
        "T_LO": tuple(t_lo),
        "L_HI": l_hi,
        "L_LO": l_lo,
    }
    for name, value in built.items():
        same = getattr(kernel, name) == value
        print(f"{name}: {'matches the module' if same else 'DIFFERS from the module'}")
    # The fit is not bit-reproducible across LAPACK builds: compare it to ~1e-7.
    close = np.allclose(q, kernel.Q, rtol=1e-6, atol=0)
    print(f"Q: {'matches the module to 1e-6' if close else 'DIFFERS from the module'}")


if __name__ == "__main__":
    main()
