"""Derive the polynomial and rational coefficients of ``simd_math``'s erf, gelu and expf.

Every table is a discrete minimax fit of the *relative* error on a dense grid (uniform plus
Chebyshev points) against mpmath at 40 digits: a linear program (``scipy.optimize.linprog``,
HiGHS) solved for corrections of a least-squares start, the residuals formed in x87 extended
precision and rescaled before each solve so that the solver's tolerance does not bound the
error. Rationals ``N(a) / D(a)`` (``D(0) = 1``) start from Loeb's linearisation (weighted
least squares, Lawson's reweighting) and are refined by Newton steps, each an LP on the
linearised error. Coefficients of a float32 table are then rounded to float32 one at a time,
lowest degree first, the others refitted after each (the rounding would otherwise add up to
2**-24 relative per coefficient). Chebyshev series (float64 gelu) are left unrounded beyond
float64. The method is the textbook one (e.g. J.-M. Muller, *Elementary Functions*, ch. 3);
no coefficient is taken from another library.

Usage::

    python benchmarks/erf_fit.py           # fit every table and print it (a few minutes)
    python benchmarks/erf_fit.py --check   # refit and compare with pylucid.kernels.simd_math
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import mpmath
import numpy as np
from scipy.optimize import linprog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pylucid.kernels import simd_math  # noqa: E402

LD = np.longdouble


def _lp(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The ``d`` minimising ``max |r + a d|`` (an LP in ``d`` and the bound)."""
    n = a.shape[1]
    one = np.ones(len(r))
    m = np.block([[a, -one[:, None]], [-a, -one[:, None]]])
    res = linprog(
        np.r_[np.zeros(n), 1.0],
        A_ub=m,
        b_ub=np.concatenate([-r, r]),
        bounds=[(None, None)] * n + [(0, None)],
        method="highs",
    )
    if res.x is None:
        raise RuntimeError(res.message)
    return res.x[:n]


def _grid(lo: float, hi: float, n: int) -> np.ndarray:
    k = np.arange(n)
    cheb = (lo + hi) / 2 - (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    return np.unique(np.concatenate([np.linspace(lo, hi, n), cheb]))


def _mp(fn: Callable, xs: np.ndarray) -> np.ndarray:
    """``fn`` at every point of ``xs`` (floats), in 40-digit arithmetic, as longdouble."""
    with mpmath.workdps(40):
        return np.array([LD(mpmath.nstr(fn(mpmath.mpf(float(v))), 30)) for v in xs])


def polynomial(
    x: np.ndarray, f: np.ndarray, degree: int, dtype: type, offset: float = 0.0
) -> tuple[list, float]:
    """Minimax polynomial ``P`` in ``x`` of the relative error of ``offset + P`` against ``f``
    (power basis, coefficients rounded to ``dtype`` lowest degree first); returns the
    coefficients and the error. An ``offset`` of 1 lets ``f = 1 + P`` be evaluated as one
    FMA whose constant term is not rounded to ``dtype``."""
    x, f = x.astype(LD), f.astype(LD)
    powers = np.stack([x**j for j in range(degree + 1)], axis=1) / f[:, None]
    fixed: dict[int, LD] = {}
    for j in range(degree + 1):
        free = [i for i in range(degree + 1) if i not in fixed]
        base = sum((powers[:, i] * v for i, v in fixed.items()), np.zeros_like(x))
        a = powers[:, free]
        scale = np.abs(a).max(axis=0)
        target = (f - offset) / f - base
        c = np.linalg.lstsq((a / scale).astype(float), target.astype(float), rcond=None)[0]
        c = c.astype(LD)
        for _ in range(6):
            r = (a / scale) @ c - target
            k = 1 / np.abs(r).max()
            c = c + _lp((a / scale).astype(float), (r * k).astype(float)).astype(LD) / k
        fixed[j] = LD(dtype(c[free.index(j)] / scale[free.index(j)]))
    coefficients = [fixed[j] for j in range(degree + 1)]
    error = np.abs(powers @ np.array(coefficients, LD) - (f - offset) / f).max()
    return [dtype(v) for v in coefficients], float(error)


def rational(
    x: np.ndarray, f: np.ndarray, dn: int, dd: int, dtype: type, scale: float
) -> tuple[list, list, float]:
    """Relative minimax ``N / D`` with ``D(0) = 1`` (power bases in ``x``), coefficients
    rounded to ``dtype`` lowest degree first (numerator, then denominator)."""
    u, f = (x / scale).astype(LD), f.astype(LD)
    vn = np.stack([u**j for j in range(dn + 1)], axis=1)
    vd = np.stack([u**j for j in range(1, dd + 1)], axis=1)
    units = np.array([LD(scale) ** j for j in [*range(dn + 1), *range(1, dd + 1)]])

    def error(c: np.ndarray) -> np.ndarray:
        return (vn @ c[: dn + 1]) / (1 + vd @ c[dn + 1 :]) / f - 1

    denominator, weights = np.ones_like(u), np.ones_like(u)
    for _ in range(60):  # Loeb's linearisation, Lawson's weights
        w = weights / (f * denominator)
        a = (np.hstack([vn, -f[:, None] * vd]) * w[:, None]).astype(float)
        col = np.abs(a).max(axis=0)
        c = (np.linalg.lstsq(a / col, (f * w).astype(float), rcond=None)[0] / col).astype(LD)
        denominator = 1 + vd @ c[dn + 1 :]
        e = np.abs(error(c))
        weights = weights * np.sqrt(e / e.max()) + 1e-30
        weights /= weights.max()
    fixed: dict[int, LD] = {}
    for j in [*range(dn + dd + 1), None]:
        free = [i for i in range(dn + dd + 1) if i not in fixed]
        best = (np.abs(error(c)).max(), c.copy())
        for _ in range(30):  # Newton steps on the linearised error
            n_, d_ = vn @ c[: dn + 1], 1 + vd @ c[dn + 1 :]
            r = n_ / d_ / f - 1
            jac = np.hstack([vn / (d_ * f)[:, None], -(n_ / d_ / d_ / f)[:, None] * vd])[:, free]
            col = np.abs(jac).max(axis=0)
            k = 1 / np.abs(r).max()
            step = _lp((jac / col).astype(float), (r * k).astype(float)) / col / k
            trial = c.copy()
            trial[free] += step.astype(LD)
            e = np.abs(error(trial)).max()
            if e >= best[0] * (1 - 1e-4):
                break
            best, c = (e, trial.copy()), trial
        c = best[1]
        if j is not None:
            fixed[j] = LD(dtype(c[j] / units[j])) * units[j]
            c[j] = fixed[j]
    coefficients = c / units
    return (
        [dtype(v) for v in coefficients[: dn + 1]],
        [dtype(1.0)] + [dtype(v) for v in coefficients[dn + 1 :]],
        float(np.abs(error(c)).max()),
    )


def chebyshev(t: np.ndarray, f: np.ndarray, degree: int) -> tuple[list, float]:
    """Relative minimax Chebyshev series in ``s`` = ``t`` mapped onto [-1, 1]."""
    lo, hi = LD(t.min()), LD(t.max())
    s = (2 * t.astype(LD) - (lo + hi)) / (hi - lo)
    v = np.empty((len(s), degree + 1), LD)
    v[:, 0], v[:, 1] = 1, s
    for j in range(2, degree + 1):
        v[:, j] = 2 * s * v[:, j - 1] - v[:, j - 2]
    a = v / f[:, None]
    c = np.linalg.lstsq(a.astype(float), np.ones(len(s)), rcond=None)[0].astype(LD)
    for _ in range(8):
        r = a @ c - 1
        k = 1 / np.abs(r).max()
        c = c + _lp(a.astype(float), (r * k).astype(float)).astype(LD) / k
    return [float(v) for v in c], float(np.abs(a @ c - 1).max())


def _gauss_mills(a: mpmath.mpf) -> mpmath.mpf:
    """``Phi(-a) e^(a^2 / 2)``: the Gaussian tail over its exponential."""
    z = a / mpmath.sqrt(2)
    return mpmath.erfc(z) * mpmath.exp(z * z) / 2


def fit_all() -> dict[str, tuple]:
    """Every table of :mod:`pylucid.kernels.simd_math`, with its fitted error."""
    sm = simd_math
    tables: dict[str, tuple] = {}
    a = _grid(0.0, float(sm.GELU32_CLAMP) + 0.1, 3000)
    tables["gelu32 tail N/D"] = rational(a, _mp(_gauss_mills, a), 4, 5, np.float32, 8.0)
    s = _grid(-0.7, 0.7, 2000)
    tables["float32 exp(-s/2)"] = polynomial(s, _mp(lambda v: mpmath.exp(-v / 2), s), 6, np.float32)
    r = _grid(-0.35, 0.35, 2000)
    tables["expf e^r"] = polynomial(r, _mp(mpmath.exp, r), 6, np.float32)
    z = _grid(1e-4, sm.ERF_SMALL, 2000)
    erf_over_z = _mp(lambda v: mpmath.erf(v) / v, z)  # = 1 + Q(z^2): erf z = z + z Q(z^2)
    tables["erf32 small"] = polynomial(z * z, erf_over_z, 5, np.float32, offset=1.0)
    tables["erf64 small"] = polynomial(z * z, erf_over_z, 10, np.float64, offset=1.0)
    z = _grid(sm.ERF_SMALL, 4.0, 3000)
    erfcx = _mp(lambda v: mpmath.erfc(v) * mpmath.exp(v * v), z)
    tables["erf32 tail N/D"] = rational(z, erfcx, 3, 4, np.float32, 4.0)
    top, p = sm.GELU64_CLAMP + 0.1, sm.GELU64_P
    t = _grid(1 / (1 + p * top), 1.0, 2500)
    tables["gelu64 tail P(t)"] = chebyshev(
        t, _mp(lambda v: _gauss_mills((1 / v - 1) / p) / v, t), sm.GELU64_DEGREE
    )
    c = 1 / mpmath.sqrt(2 * mpmath.pi)

    def kappa(v: mpmath.mpf) -> mpmath.mpf:
        """d ln m / d ln t, m = Phi(-a) e^(a^2/2), a = (1/t - 1)/p."""
        a = (1 / v - 1) / p
        m = _gauss_mills(a)
        return (c - a * m) / (p * v * m)

    kappa_coefficients, error = polynomial(t, _mp(kappa, t), 5, np.float64)
    tables["gelu64 kappa(t)"] = (kappa_coefficients, error)
    return tables


#: The tables' names in simd_math (tuples of coefficients), in the order of ``fit_all``'s rows.
MODULE_NAMES = {
    "gelu32 tail N/D": ("_GELU32_N", "_GELU32_D"),
    "float32 exp(-s/2)": ("_EXP_HALF32",),
    "expf e^r": ("_EXPF",),
    "erf32 small": ("_ERF32_SMALL",),
    "erf64 small": ("_ERF64_SMALL",),
    "erf32 tail N/D": ("_ERF32_N", "_ERF32_D"),
    "gelu64 tail P(t)": ("_GELU64_CHEB",),
    "gelu64 kappa(t)": ("_GELU64_KAPPA",),
}


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with simd_math")
    args = parser.parse_args()
    tables = fit_all()
    for name, (*coefficients, error) in tables.items():
        print(f"\n{name}: relative error 2**{np.log2(error):.2f}")
        for row in coefficients:
            print("  (" + ", ".join(repr(float(v)) for v in row) + ",)")
    if args.check:
        for name, (*coefficients, _) in tables.items():
            ours = [getattr(simd_math, attribute) for attribute in MODULE_NAMES[name]]
            same = all(
                np.allclose(np.array(row, float), np.array(mine, float), rtol=1e-6, atol=0)
                for row, mine in zip(coefficients, ours, strict=True)
            )
            print(f"{name}: {'matches' if same else 'DIFFERS from'} simd_math")


if __name__ == "__main__":
    main()
