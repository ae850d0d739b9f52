"""The PyTorch spellings pylucid answers to, as one table run against both libraries.

Each record's ``call(lib, *inputs)`` is written once in PyTorch's spelling and called with
``lib`` = ``pylucid`` and with ``lib`` = ``torch``: the same line a ported program runs,
changing only the import. ``tests/test_torch_aliases.py`` compares what comes back - the
named-tuple type and field names, every output's shape, dtype and values, and the gradients
of the inputs under a random upstream gradient - on both backends and in float32 and float64.
Unlike :data:`pylucid.opinfo.OPS` these are not registered ops: most are compositions of
them (their gradients are the ops'), so the op table's completeness test does not ask for
them; this table is the census's check that the names mean what PyTorch's mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pylucid.opinfo.records import Sampler, uniform


def integers(low: int, high: int) -> Sampler:
    """Integer values in ``[low, high)`` as floats (ties, for modes and medians)."""

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.integers(low, high, size=shape).astype(np.float64)

    return sample


def with_nans(fraction: float) -> Sampler:
    """Uniform values in [-5, 5) with about ``fraction`` of them NaN."""

    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        values = rng.uniform(-5, 5, size=shape)
        values[rng.random(shape) < fraction] = np.nan
        return values

    return sample


@dataclass(frozen=True)
class AliasInfo:
    """One PyTorch spelling.

    Attributes
    ----------
    name : str
        The spelling, for test ids (``"max(x, 1)"``).
    call : callable
        ``call(lib, *inputs)``: the line in PyTorch's spelling, ``lib`` being ``pylucid``
        or ``torch``.
    samplers : tuple of Sampler
        One per input, float64 NumPy values.
    shapes : tuple of shapes
        The inputs' shapes.
    grad : bool
        Compare the inputs' gradients (the floating outputs' backward) with PyTorch's.
    indices : bool
        Compare integer outputs exactly; False where PyTorch leaves the index among equal
        values unspecified (the values are still compared).
    """

    name: str
    call: Callable[..., Any]
    samplers: tuple[Sampler, ...]
    shapes: tuple[tuple[int, ...], ...] = ((4, 5),)
    grad: bool = True
    indices: bool = True


_U = uniform(-5.0, 5.0)
_P = uniform(0.1, 5.0)


def _one(name: str, call: Callable[..., Any], **kwargs: Any) -> AliasInfo:
    return AliasInfo(name, call, (kwargs.pop("sampler", _U),), **kwargs)


def _two(name: str, call: Callable[..., Any], shapes: Any, **kwargs: Any) -> AliasInfo:
    return AliasInfo(name, call, (_U, _U), shapes, **kwargs)


ALIASES: tuple[AliasInfo, ...] = (
    # value-selecting reductions: named tuples (values, indices)
    _one("max(x)", lambda lib, x: lib.max(x)),
    _one("max(x, 1)", lambda lib, x: lib.max(x, 1)),
    _one("max(x, dim=0, keepdim=True)", lambda lib, x: lib.max(x, dim=0, keepdim=True)),
    _one("x.max(1)", lambda lib, x: x.max(1)),
    _one("x.max(dim=-1)", lambda lib, x: x.max(dim=-1)),
    _two("max(x, y)", lambda lib, x, y: lib.max(x, y), ((4, 5), (5,))),
    _one("min(x)", lambda lib, x: lib.min(x)),
    _one("min(x, 1)", lambda lib, x: lib.min(x, 1)),
    _one("x.min(dim=0, keepdim=True)", lambda lib, x: x.min(dim=0, keepdim=True)),
    _two("min(x, y)", lambda lib, x, y: lib.min(x, y), ((4, 5), (4, 5))),
    _one("max(x, 1) of ties", lambda lib, x: lib.max(x, 1), sampler=integers(0, 3)),
    _one("min(x, 0) of NaN", lambda lib, x: lib.min(x, 0), sampler=with_nans(0.2), grad=False),
    _one("amax(x, (0, 1))", lambda lib, x: lib.amax(x, (0, 1))),
    _one("amin(x, 1)", lambda lib, x: lib.amin(x, 1)),
    _one("aminmax(x, dim=1)", lambda lib, x: lib.aminmax(x, dim=1)),
    _one("aminmax(x)", lambda lib, x: lib.aminmax(x)),
    _one("median(x)", lambda lib, x: lib.median(x)),
    _one("median(x, 1)", lambda lib, x: lib.median(x, 1)),
    _one("median(x, 0, True)", lambda lib, x: x.median(0, True), shapes=((6, 3),)),
    _one("median(x, 1) of ties", lambda lib, x: lib.median(x, 1), sampler=integers(0, 3),
         indices=False),
    _one("median(x, 1) of NaN", lambda lib, x: lib.median(x, 1), sampler=with_nans(0.2),
         grad=False),
    _one("nanmedian(x, 1)", lambda lib, x: lib.nanmedian(x, 1), sampler=with_nans(0.3),
         grad=False),
    _one("nanmedian(x)", lambda lib, x: lib.nanmedian(x)),
    _one("kthvalue(x, 2, 1)", lambda lib, x: lib.kthvalue(x, 2, 1)),
    _one("kthvalue(x, 4, 0, True)", lambda lib, x: x.kthvalue(4, 0, True)),
    _one("mode(x, 1)", lambda lib, x: lib.mode(x, 1), sampler=integers(0, 3), shapes=((4, 9),)),
    _one("mode(x, 0)", lambda lib, x: x.mode(0), sampler=integers(0, 4), shapes=((7, 3),)),
    _one("sort(x, 1)", lambda lib, x: lib.sort(x, 1)),
    _one("sort(x, descending=True)", lambda lib, x: x.sort(descending=True)),
    _one("topk(x, 2)", lambda lib, x: lib.topk(x, 2)),
    _one("topk(x, 3, 0, largest=False)", lambda lib, x: x.topk(3, 0, largest=False)),
    _one("cummax(x, 1)", lambda lib, x: lib.cummax(x, 1), sampler=integers(0, 4)),
    _one("cummin(x, 0)", lambda lib, x: x.cummin(0)),
    _one("cummax(x, 1) of NaN", lambda lib, x: lib.cummax(x, 1), sampler=with_nans(0.2),
         grad=False),
    _one("var_mean(x, 1)", lambda lib, x: lib.var_mean(x, 1)),
    _one("var_mean(x, correction=0)", lambda lib, x: lib.var_mean(x, correction=0)),
    _one("std_mean(x, 0, keepdim=True)", lambda lib, x: lib.std_mean(x, 0, keepdim=True)),
    # products
    _two("mm(a, b)", lambda lib, a, b: lib.mm(a, b), ((3, 4), (4, 2))),
    _two("a.mm(b)", lambda lib, a, b: a.mm(b), ((3, 4), (4, 2))),
    _two("bmm(a, b)", lambda lib, a, b: lib.bmm(a, b), ((2, 3, 4), (2, 4, 5))),
    _two("mv(a, v)", lambda lib, a, v: lib.mv(a, v), ((3, 4), (4,))),
    _two("dot(a, b)", lambda lib, a, b: lib.dot(a, b), ((4,), (4,))),
    _two("outer(a, b)", lambda lib, a, b: lib.outer(a, b), ((4,), (3,))),
    AliasInfo(
        "addmm(c, a, b, beta=0.5, alpha=2)",
        lambda lib, c, a, b: lib.addmm(c, a, b, beta=0.5, alpha=2),
        (_U, _U, _U),
        ((2,), (3, 4), (4, 2)),
    ),
    AliasInfo(
        "baddbmm(c, a, b, alpha=0.5)",
        lambda lib, c, a, b: lib.baddbmm(c, a, b, alpha=0.5),
        (_U, _U, _U),
        ((2, 3, 5), (2, 3, 4), (2, 4, 5)),
    ),
    # arithmetic with alpha
    _two("add(x, y, alpha=2)", lambda lib, x, y: lib.add(x, y, alpha=2), ((4, 5), (5,))),
    _two("x.sub(y, alpha=0.5)", lambda lib, x, y: x.sub(y, alpha=0.5), ((4, 5), (4, 5))),
    _two(
        "x * 1 .add_(y, alpha=-3)", lambda lib, x, y: (x * 1).add_(y, alpha=-3), ((4, 5), (5,))
    ),
    # splitting
    _one("chunk(x, 3, 1)", lambda lib, x: lib.chunk(x, 3, 1)),
    _one("x.chunk(2)", lambda lib, x: x.chunk(2), shapes=((5, 2),)),
    _one("tensor_split(x, 3, 1)", lambda lib, x: lib.tensor_split(x, 3, 1)),
    _one("tensor_split(x, [1, 3])", lambda lib, x: x.tensor_split([1, 3])),
    _one("split(x, 2, 1)", lambda lib, x: lib.split(x, 2, 1)),
    # comparisons
    _two("isclose(x, y)", lambda lib, x, y: lib.isclose(x, x + y * 1e-7), ((4, 5), (4, 5)),
         grad=False),
    _two("allclose(x, y)", lambda lib, x, y: lib.allclose(x, x + y * 1e-3), ((4, 5), (4, 5)),
         grad=False),
    _two("equal(x, y)", lambda lib, x, y: lib.equal(x, y), ((4, 5), (4, 5)), grad=False),
    _one("equal(x, x)", lambda lib, x: lib.equal(x, x * 1), grad=False),
    # Tensor methods and conversions
    _one("x.size()", lambda lib, x: tuple(x.size()), grad=False),
    _one("x.size(-1), x.dim(), x.numel()", lambda lib, x: (x.size(-1), x.dim(), x.numel()),
         grad=False),
    _one("x.nelement(), x.element_size()", lambda lib, x: (x.nelement(), x.element_size()),
         grad=False),
    _one("x.t().contiguous()", lambda lib, x: x.t().contiguous()),
    _one("x.is_contiguous()", lambda lib, x: x.is_contiguous(), grad=False),
    _one("x.long(), x.int(), x.bool()", lambda lib, x: (x.long(), x.int(), x.bool()),
         grad=False),
    _one("x.float(), x.double()", lambda lib, x: (x.float(), x.double())),
    _one("x.new_zeros(2, 3)", lambda lib, x: x.new_zeros(2, 3), grad=False),
    _one("x.new_ones((2,))", lambda lib, x: x.new_ones((2,)), grad=False),
    _one("x.new_full((2,), 7)", lambda lib, x: x.new_full((2,), 7), grad=False),
    _one("x.new_tensor([1, 2])", lambda lib, x: x.new_tensor([1, 2]), grad=False),
    _one("x.is_floating_point()", lambda lib, x: x.is_floating_point(), grad=False),
    _one("x * 1 .fill_(2.5)", lambda lib, x: (x * 1).fill_(2.5)),
    _one("x * 1 .clamp_(-1, 1)", lambda lib, x: (x * 1).clamp_(-1, 1)),
    _one("x * 1 .masked_fill_(x > 0, 0.5)", lambda lib, x: (x * 1).masked_fill_(x > 0, 0.5)),
    AliasInfo(
        "x * 1 .index_add_(0, i, y, alpha=2)",
        lambda lib, x, y: (x * 1).index_add_(0, lib.tensor([2, 0, 2]), y, alpha=2),
        (_U, _U),
        ((4, 5), (3, 5)),
    ),
    _two("index_add(x, 1, i, y)",
         lambda lib, x, y: lib.index_add(x, 1, lib.tensor([1, 1]), y), ((4, 5), (4, 2))),
    # repeating, windows, taking apart
    _one("x.repeat(2, 1, 3)", lambda lib, x: x.repeat(2, 1, 3)),
    _one("repeat_interleave(x, 2, dim=1)", lambda lib, x: lib.repeat_interleave(x, 2, dim=1)),
    _one("x.repeat_interleave(tensor, 0)",
         lambda lib, x: x.repeat_interleave(lib.tensor([1, 0, 3, 2]), 0)),
    _one("repeat_interleave(x, 3)", lambda lib, x: lib.repeat_interleave(x, 3)),
    _one("x.unfold(1, 2, 2)", lambda lib, x: x.unfold(1, 2, 2)),
    _one("x.unfold(0, 3, 1)", lambda lib, x: x.unfold(0, 3, 1)),
    _one("unbind(x, 1)", lambda lib, x: lib.unbind(x, 1)),
    _one("x.select(1, -1), x.narrow(0, 1, 2)", lambda lib, x: (x.select(1, -1), x.narrow(0, 1, 2))),
    _one("x.unflatten(1, (1, 5)), x.view_as(y)",
         lambda lib, x: (x.unflatten(1, (1, 5)), x.view_as(x.reshape(5, 4)))),
    _two("x.expand_as(y)", lambda lib, x, y: x.expand_as(y), ((1, 5), (4, 5))),
    _two("meshgrid(a, b, indexing='xy')",
         lambda lib, a, b: lib.meshgrid(a, b, indexing="xy"), ((3,), (2,))),
    _two("meshgrid(a, b, indexing='ij')",
         lambda lib, a, b: lib.meshgrid(a, b, indexing="ij"), ((3,), (2,))),
    _one("diag(x), diag(x, 1)", lambda lib, x: (lib.diag(x), lib.diag(x, 1))),
    _one("diag(v, -1)", lambda lib, v: lib.diag(v, -1), shapes=((3,),)),
    _one("x.diagonal(), x.trace()", lambda lib, x: (x.diagonal(), x.trace())),
    _one("nonzero(x > 0), argwhere", lambda lib, x: (lib.nonzero(x > 0), lib.argwhere(x < 0)),
         grad=False),
    _one("nonzero(as_tuple=True)", lambda lib, x: lib.nonzero(x > 0, as_tuple=True), grad=False),
    _one("unique(x, return_inverse, return_counts)",
         lambda lib, x: lib.unique(x, return_inverse=True, return_counts=True),
         sampler=integers(0, 5), grad=False),
    # norms and blends
    _one("x.norm()", lambda lib, x: x.norm()),
    _one("norm(x, dim=1, keepdim=True)", lambda lib, x: lib.norm(x, dim=1, keepdim=True)),
    _one("norm(x, 1, 0)", lambda lib, x: lib.norm(x, 1, 0)),
    _one("x.norm(p=3)", lambda lib, x: x.norm(p=3)),
    _one("norm(x, inf, 1)", lambda lib, x: lib.norm(x, float("inf"), 1)),
    _one("linalg.vector_norm(x, 2, -1)", lambda lib, x: lib.linalg.vector_norm(x, 2, -1)),
    _one("linalg.norm(x)", lambda lib, x: lib.linalg.norm(x)),
    _one("norm(zeros) gradient", lambda lib, x: (x * 0).norm()),
    AliasInfo("lerp(x, y, 0.3)", lambda lib, x, y: lib.lerp(x, y, 0.3), (_U, _U),
              ((4, 5), (4, 5))),
    AliasInfo("addcmul(x, a, b, value=2)", lambda lib, x, a, b: lib.addcmul(x, a, b, value=2),
              (_U, _U, _U), ((4, 5), (4, 5), (5,))),
    AliasInfo("x.addcdiv(a, b, value=0.5)", lambda lib, x, a, b: x.addcdiv(a, b, value=0.5),
              (_U, _U, _P), ((4, 5), (4, 5), (4, 5))),
    _one("clamp_min, clamp_max, clip", lambda lib, x: (x.clamp_min(0), lib.clamp_max(x, 1),
                                                          x.clip(-1, 1))),
    _two("x.type_as(y)", lambda lib, x, y: x.type_as(y.double()), ((4, 5), (4, 5))),
    # in place
    _one("x * 1 .sqrt_(), x * 1 .exp_()", lambda lib, x: ((x * 1).sqrt_(), (x * 1).exp_()),
         sampler=_P),
    _one("x * 1 .sigmoid_(), x * 1 .clamp_min_(0.4)",
         lambda lib, x: ((x * 1).sigmoid_(), (x * 1).clamp_min_(0.4))),
    _two("x * 1 .lerp_(y, 0.5)", lambda lib, x, y: (x * 1).lerp_(y, 0.5), ((4, 5), (4, 5))),
    _two("x * 1 .addcmul_(y, y, value=-1)",
         lambda lib, x, y: (x * 1).addcmul_(y, y, value=-1), ((4, 5), (4, 5))),
    _one("x.stride(), x.stride(0)", lambda lib, x: (x.stride(), x.stride(0)), grad=False),
    _one("f'{x.sum():.3f}'", lambda lib, x: f"{x.sum():.3f}", grad=False),
    _one("[...][x.argmax()]", lambda lib, x: list(range(20))[x.argmax()], grad=False),
)
