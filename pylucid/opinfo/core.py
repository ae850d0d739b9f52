"""Op records of the foundation ops: log2, arithmetic, sum/mean, clone and conversions."""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, away_from_zero, torch_module, torch_op, uniform

_BINARY_SHAPES = (((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 4), ()))
_BOUNDED = frozenset({"bounded_domain"})


def _torch_round_trip(x):
    """``x`` through the other of float32 and float64 and back, as the ``to_dtype`` record."""
    torch = torch_module()
    other = torch.float32 if x.dtype == torch.float64 else torch.float64
    return x.to(other).to(x.dtype)


RECORDS: tuple[OpInfo, ...] = (
    OpInfo("log2", pl.log2, np.log2, (uniform(0.1, 10.0),), tags=_BOUNDED, torch=torch_op("log2")),
    OpInfo("neg", pl.neg, np.negative, (uniform(-5.0, 5.0),), torch=torch_op("neg")),
    OpInfo(
        "add",
        pl.add,
        np.add,
        (uniform(-5, 5), uniform(-5, 5)),
        _BINARY_SHAPES,
        torch=torch_op("add"),
    ),
    OpInfo(
        "sub",
        pl.sub,
        np.subtract,
        (uniform(-5, 5), uniform(-5, 5)),
        _BINARY_SHAPES,
        torch=torch_op("sub"),
    ),
    OpInfo(
        "mul",
        pl.mul,
        np.multiply,
        (uniform(-5, 5), uniform(-5, 5)),
        _BINARY_SHAPES,
        torch=torch_op("mul"),
    ),
    OpInfo(
        "div",
        pl.div,
        np.divide,
        (uniform(-5, 5), away_from_zero(0.5, 5)),
        _BINARY_SHAPES,
        tags=_BOUNDED,
        torch=torch_op("div"),
    ),
    OpInfo(
        "pow_scalar",
        lambda x: x**3.5,
        lambda x: x**3.5,
        (uniform(0.1, 3.0),),
        tags=_BOUNDED,
        torch=lambda x: x**3.5,
    ),
    OpInfo(
        "sum",
        lambda x: pl.sum(x, axis=1),
        lambda x: np.sum(x, axis=1),
        (uniform(-5, 5),),
        (((3, 4),), ((2, 3, 4),)),
        rtol=1e-5,
        torch=torch_op("sum", dim=1),
    ),
    OpInfo(
        "mean",
        lambda x: pl.mean(x, axis=(0, -1), keepdims=True),
        lambda x: np.mean(x, axis=(0, -1), keepdims=True),
        (uniform(-5, 5),),
        (((3, 4),), ((2, 3, 4),)),
        rtol=1e-5,
        torch=torch_op("mean", dim=(0, -1), keepdim=True),
    ),
    OpInfo("clone", pl.clone, np.copy, (uniform(-5, 5),), torch=torch_op("clone")),
    OpInfo(
        "to_dtype",
        lambda x: x.to(pl.float32 if x.dtype is pl.float64 else pl.float64).to(x.dtype),
        lambda x: x.astype(np.float32).astype(np.float64),
        (uniform(-5, 5),),
        # The float32 round trip moves x by up to 2**-24 |x|: a 1e-2 step keeps the
        # difference quotient's error below 5 * 6e-8 / 1e-2 = 3e-5.
        gradcheck_kwargs={"eps": 1e-2, "atol": 1e-4},
        torch=_torch_round_trip,
    ),
    OpInfo(
        "to_device",
        lambda x: x.to("cpu" if x.device == "gpu" else "gpu").to(x.device),
        lambda x: x,
        (uniform(-5, 5),),
        tags=frozenset({"needs_mlx"}),
        torch=torch_op("clone"),
    ),
)
