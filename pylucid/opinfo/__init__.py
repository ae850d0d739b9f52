"""The op database: for every op, how to call it, its NumPy float64 reference, the same op
in PyTorch (the oracle of the differential and edge-value tests; PyTorch is imported only
when that is called), a sampler that respects its domain, and its tolerances.

Tests, the demo's gradcheck summary and the benchmarks iterate :data:`OPS`; a completeness
test fails when a registered public op has no record here. Each op family keeps its records
in its own module.
"""

from pylucid.opinfo import (
    binary,
    core,
    elementwise,
    layers,
    linalg,
    losses,
    reduction,
    shape,
)
from pylucid.opinfo.records import OpInfo, Sampler, Uniform, away_from_zero, torch_op, uniform

OPS: tuple[OpInfo, ...] = (
    core.RECORDS
    + elementwise.RECORDS
    + binary.RECORDS
    + reduction.RECORDS
    + losses.RECORDS
    + layers.RECORDS
    + linalg.RECORDS
    + shape.RECORDS
)
BY_NAME = {info.name: info for info in OPS}

__all__ = [
    "BY_NAME",
    "OPS",
    "OpInfo",
    "Sampler",
    "Uniform",
    "away_from_zero",
    "torch_op",
    "uniform",
]
