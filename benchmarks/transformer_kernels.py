"""The kernels a transformer step runs (issue 32): pylucid's against PyTorch and a copy.

Every case runs at one thread (``pylucid.set_num_threads(1)``, ``torch.set_num_threads(1)``)
and is timed side by side in this process, interleaved batch by batch, medians
(:func:`pylucid.bench.timing.measure`): pylucid's forward and backward kernels (the numba
backend's primitives, as an op calls them), PyTorch's (its ATen functions: ``gelu``,
``gelu_backward``, ``_softmax``, ``_softmax_backward_data``, ``native_layer_norm`` and its
backward), both libraries' forward + backward through autograd, and a copy of the forward's
input (a 1-thread loop over the same number of elements of the same dtype).

Reported per case and size: times (ms), the kernel's throughput in GB/s counting the bytes it
must move (forward: read x, write y; backward: read x or y and g, write dx), that throughput
as a fraction of the machine's 1-thread copy bandwidth (``pylucid.bench.bandwidth``: a copy of
256 MiB, far beyond the caches, measured once at the start) and of the copy of the same
array (which, up to 1e6 elements, runs from the caches), and PyTorch's time over pylucid's
(> 1: pylucid is faster).

Usage::

    python benchmarks/transformer_kernels.py                      # every case
    python benchmarks/transformer_kernels.py --cases gelu,softmax --sizes 1e4,1e6
    python benchmarks/transformer_kernels.py --dtypes float32 --quick
    python benchmarks/transformer_kernels.py --cases layer_norm --widths 64,256,1024
    python benchmarks/transformer_kernels.py --cases dropout --sizes 1e6 --dtypes float32
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pylucid as pl  # noqa: E402
from pylucid.backends import registry  # noqa: E402
from pylucid.bench.bandwidth import copy_bandwidth  # noqa: E402
from pylucid.bench.timing import TimerConfig, measure  # noqa: E402
from pylucid.kernels.jit import njit  # noqa: E402

SIZES = (10**4, 10**5, 10**6, 10**7)


@njit(cache=True, nogil=True)
def _copy(src: np.ndarray, dst: np.ndarray) -> None:
    for i in range(src.size):
        dst[i] = src[i]


def _torch():  # noqa: ANN202
    import torch

    torch.set_num_threads(1)
    return torch


def _dtype(name: str):  # noqa: ANN202
    return {"float32": pl.float32, "float64": pl.float64}[name]


def _shape(case: str, n: int, width: int = 256) -> tuple[int, ...]:
    """The operand shape of ``case`` with about ``n`` elements (layer_norm: rows of
    ``width``)."""
    if case in ("gelu", "gelu_tanh", "erf"):
        return (n,)
    if case in ("softmax", "log_softmax"):
        return (max(1, n // 128), 128)
    if case == "layer_norm":
        return (max(1, n // width), width)
    if case == "cross_entropy":
        return (max(1, n // 65), 65)
    if case == "cross_entropy_vocab":
        return (max(1, n // 32768), 32768)
    if case == "dropout":
        return (n,)
    raise ValueError(case)


def _cases(case: str, shape: tuple[int, ...], dtype_name: str) -> tuple[dict, dict]:
    """The callables of one case, and the bytes each kernel moves."""
    torch = _torch()
    be = registry.get("numba")
    dt = _dtype(dtype_name)
    npdt = np.dtype(dtype_name)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(npdt)
    g = rng.standard_normal(shape).astype(npdt)
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    n = x.size
    size = npdt.itemsize
    out = np.empty_like(x)
    impls: dict[str, Callable[[], object]] = {"copy": lambda: _copy(x.reshape(-1), out.reshape(-1))}
    moved = {"copy": 2 * n * size, "fwd": 2 * n * size, "bwd": 3 * n * size}
    px = pl.tensor(x, requires_grad=True)
    pg = pl.tensor(g)
    txr = tx.clone().requires_grad_(True)
    fn, tfn = pl.nn.functional, torch.nn.functional

    def op_level(pl_fn: Callable, torch_fn: Callable, seed: bool = True) -> None:
        def ours() -> None:
            px.grad = None
            y = pl_fn(px)
            y.backward(pg) if seed else y.backward()

        def theirs() -> None:
            txr.grad = None
            y = torch_fn(txr)
            y.backward(tg) if seed else y.backward()

        impls["pylucid fwd+bwd (autograd)"] = ours
        impls["torch fwd+bwd (autograd)"] = theirs

    if case in ("gelu", "gelu_tanh"):
        approx = "tanh" if case == "gelu_tanh" else "none"
        shp = x.shape
        y = be.gelu(x, approx, shp, dt)
        impls["pylucid fwd"] = lambda: be.gelu(x, approx, shp, dt)
        impls["pylucid bwd"] = lambda: be.gelu_backward(x, g, approx, shp, dt)
        impls["torch fwd"] = lambda: tfn.gelu(tx, approximate=approx)
        impls["torch bwd"] = lambda: torch.ops.aten.gelu_backward(tg, tx, approximate=approx)
        op_level(
            lambda t: fn.gelu(t, approximate=approx), lambda t: tfn.gelu(t, approximate=approx)
        )
        del y
    elif case == "erf":
        shp = x.shape
        impls["pylucid fwd"] = lambda: be.erf(x, shp, dt)
        impls["pylucid bwd"] = lambda: be.erf_backward(x, g, shp, dt)
        impls["torch fwd"] = lambda: torch.erf(tx)
        op_level(pl.erf, torch.erf)
    elif case in ("softmax", "log_softmax"):
        log = case == "log_softmax"
        fwd = be.log_softmax if log else be.softmax
        bwd = be.log_softmax_backward if log else be.softmax_backward
        y = fwd(x, (1,), dt)
        ty = torch.from_numpy(y)
        impls["pylucid fwd"] = lambda: fwd(x, (1,), dt)
        impls["pylucid bwd"] = lambda: bwd(y, g, (1,), dt)
        if log:
            impls["torch fwd"] = lambda: torch._log_softmax(tx, -1, False)
            impls["torch bwd"] = lambda: torch._log_softmax_backward_data(tg, ty, -1, tx.dtype)
        else:
            impls["torch fwd"] = lambda: torch._softmax(tx, -1, False)
            impls["torch bwd"] = lambda: torch._softmax_backward_data(tg, ty, -1, tx.dtype)
        op_level(
            lambda t: (fn.log_softmax if log else fn.softmax)(t, dim=-1),
            lambda t: (tfn.log_softmax if log else tfn.softmax)(t, dim=-1),
        )
    elif case == "layer_norm":
        d = shape[-1]
        w = (1 + 0.1 * rng.standard_normal(d)).astype(npdt)
        b = (0.1 * rng.standard_normal(d)).astype(npdt)
        tw, tb = torch.from_numpy(w), torch.from_numpy(b)
        impls["pylucid fwd"] = lambda: be.layer_norm(x, w, b, d, 1e-5, dt)
        impls["pylucid bwd"] = lambda: be.layer_norm_backward(x, w, g, d, 1e-5, dt)
        _, mean, rstd = torch.native_layer_norm(tx, [d], tw, tb, 1e-5)
        impls["torch fwd"] = lambda: torch.native_layer_norm(tx, [d], tw, tb, 1e-5)
        impls["torch bwd"] = lambda: torch.ops.aten.native_layer_norm_backward(
            tg, tx, [d], mean, rstd, tw, tb, [True, True, True]
        )
        pw, pb = pl.tensor(w, requires_grad=True), pl.tensor(b, requires_grad=True)
        tw2, tb2 = tw.clone().requires_grad_(True), tb.clone().requires_grad_(True)
        op_level(
            lambda t: fn.layer_norm(t, (d,), pw, pb), lambda t: tfn.layer_norm(t, (d,), tw2, tb2)
        )
    elif case == "dropout":
        # pylucid's forward: the generator's uniform draws (NumPy's PCG64, as pl.rand) and the
        # fused kernel, which reads x and the draws and writes y; its backward reads g and the
        # draws. PyTorch's: native_dropout (a Bernoulli mask and the product, forward) and
        # native_dropout_backward (g times the mask, scaled).
        p, shp = 0.1, x.shape
        src = pl.default_generator._numpy
        u = src.random(shp, dtype=npdt)
        moved = {"copy": 2 * n * size, "fwd": 4 * n * size, "bwd": 3 * n * size}
        impls["pylucid fwd"] = lambda: be.dropout(x, src.random(shp, dtype=npdt), p, shp, dt)
        impls["pylucid kernel-only fwd"] = lambda: be.dropout(x, u, p, shp, dt)
        impls["pylucid bwd"] = lambda: be.dropout(g, u, p, shp, dt)
        _, mask = torch.native_dropout(tx, p, True)
        impls["torch fwd"] = lambda: torch.native_dropout(tx, p, True)
        impls["torch bwd"] = lambda: torch.ops.aten.native_dropout_backward(tg, mask, 1 / (1 - p))
        op_level(lambda t: fn.dropout(t, p), lambda t: tfn.dropout(t, p))
    elif case.startswith("cross_entropy"):
        rows, classes = shape
        t = rng.integers(0, classes, rows)
        t[::7] = -100  # some ignored rows
        tt = torch.from_numpy(t)
        pt = pl.tensor(t)
        moved = {"copy": 2 * n * size, "fwd": n * size, "bwd": 2 * n * size}
        impls["pylucid fwd"] = lambda: be.cross_entropy(x, t, -100, 0.0, float(rows), dt)
        impls["pylucid bwd"] = lambda: be.cross_entropy_backward(
            x, t, np.float64(1.0), -100, 0.0, float(rows), dt
        )
        impls["torch fwd"] = lambda: tfn.cross_entropy(tx, tt)
        op_level(lambda v: fn.cross_entropy(v, pt), lambda v: tfn.cross_entropy(v, tt), False)
    else:
        raise ValueError(case)
    return impls, moved


def run(
    cases: list[str],
    sizes: list[int],
    dtypes: list[str],
    config: TimerConfig,
    dram_gbps: float,
    widths: tuple[int, ...] = (256,),
) -> None:
    """Time and print every case; ``dram_gbps`` is the 1-thread copy bandwidth, ``widths``
    layer_norm's row lengths."""
    for case in cases:
        for dtype_name in dtypes:
            print(f"\n## {case} {dtype_name}")
            print(
                "| shape | impl | ms | GB/s | of DRAM copy | of same-size copy | torch/pylucid |\n"
                "|---|---|---|---|---|---|---|"
            )
            row_lengths = widths if case == "layer_norm" else (256,)
            shapes = [_shape(case, n, w) for n in sizes for w in row_lengths]
            for shape in shapes:
                impls, moved = _cases(case, shape, dtype_name)
                results, errors = measure(impls, config)
                for name, err in errors.items():
                    print(f"| {shape} | {name} | error: {err} | | | | |")
                copy_gbps = moved["copy"] / results["copy"].median_s / 1e9
                for name, m in results.items():
                    kind = name.split()[-1]
                    gbps = moved[kind] / m.median_s / 1e9 if kind in moved else math.nan
                    frac = gbps / copy_gbps if kind in moved else math.nan
                    dram = gbps / dram_gbps if kind in moved else math.nan
                    other = name.replace("pylucid", "torch")
                    ratio = (
                        results[other].median_s / m.median_s
                        if name.startswith("pylucid") and other in results
                        else math.nan
                    )
                    cells = [
                        f"{m.median_s * 1e3:.4g}",
                        "" if math.isnan(gbps) else f"{gbps:.1f}",
                        "" if math.isnan(dram) else f"{dram:.2f}",
                        "" if math.isnan(frac) else f"{frac:.2f}",
                        "" if math.isnan(ratio) else f"{ratio:.2f}x",
                    ]
                    print(f"| {shape} | {name} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        default="gelu,gelu_tanh,erf,softmax,log_softmax,cross_entropy,cross_entropy_vocab,"
        "layer_norm,dropout",
    )
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument(
        "--widths", default="", help="layer_norm's row lengths (default 256), e.g. 64,256,1024"
    )
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--quick", action="store_true", help="shorter batches, fewer repeats")
    args = parser.parse_args()
    pl.set_num_threads(1)
    torch = _torch()
    config = (
        TimerConfig(target_s=0.03, repeats=5, warmup=2)
        if args.quick
        else TimerConfig(target_s=0.08, repeats=9, warmup=2)
    )
    dram = copy_bandwidth(threads=1, nbytes=256 << 20)["gbps"]
    print(
        f"{platform.processor() or platform.machine()}, numpy {np.__version__}, numba "
        f"{numba.__version__}, torch {torch.__version__}, 1 thread, load average "
        f"{os.getloadavg()}, 1-thread copy bandwidth {dram:.1f} GB/s"
    )
    run(
        args.cases.split(","),
        [int(float(s)) for s in args.sizes.split(",")],
        args.dtypes.split(","),
        config,
        dram,
        tuple(int(w) for w in args.widths.split(",")) if args.widths else (256,),
    )
    print(f"\nload average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
