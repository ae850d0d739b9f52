"""Differential testing against PyTorch: random graphs of pylucid ops, compared with torch.

Hypothesis draws a small DAG (:func:`graphs`) and it is built in pylucid, on each backend
and in float32 and float64, and in PyTorch (the ``torch`` callables of the op database,
:data:`pylucid.opinfo.OPS`). The value of every node and the gradient of every leaf
(backward of a weighted sum of the outputs with random weights, as ``grad_tensors``) must
agree.

The graphs
    - leaves of 0 to 3 dimensions of sizes 0 to 4 (0-d, size-1 and empty dimensions),
      drawn around one base shape (often square, where a broadcast over the wrong axis
      keeps the sizes right) so that binary ops find broadcasting partners; in half of the
      graphs a leaf of another dtype (int64, bool, a float64 among float32 values, a 0-d
      float32 among float64 ones) that meets a main-dtype operand of an op exact on it
      (:data:`_EXACT_ON_OTHERS`, "mixed" steps): dtype promotion, with 0-d tensors and, in
      the "scalar" steps, Python numbers on either side (:data:`_SCALARS`);
    - steps, each adding one node: an op of the table (the broadcasting binary ops drawn
      three times as often) on values of the pool, mostly of different shapes where the op
      takes several, or on fresh leaves of one of the record's shapes sampled by its
      samplers; a view (slice, stepped slice, ``.mT``, reshape, unsqueeze, squeeze, expand,
      integer index); an in-place op (``add_``, ``sub_``, ``mul_``, ``div_``,
      ``x[...] = v``) through a view of a fresh copy (:data:`_WRITABLE_VIEWS`); an
      arithmetic op with a Python number. Any value may be used several times (fan-out),
      and every node's value is compared, outputs or not.
    - validity: PyTorch decides it: inputs (and in-place steps) it refuses are not drawn, and
      one pylucid refuses where PyTorch accepts is a failure. The records' ``torch``
      callables follow pylucid's (NumPy's) rules where PyTorch is laxer (bounds of an index
      into an empty tensor, ``cat`` of a 1-d empty tensor), and :data:`_AXIS_OPS` get no
      0-d input (PyTorch lets dim 0 / -1 name a 0-d tensor's absent axis).
    - domains: an op tagged ``bounded_domain`` (log family, sqrt, pow, div's divisor, tan,
      asin, exp family ...) takes a value that is not a fresh leaf of its own samplers
      through ``low + (high - low) sigmoid(v)``, which maps it into the sampler's range
      [low, high) (the positive side for ``away_from_zero``), so that no inner node leaves
      a domain or the well-conditioned range the samplers were chosen for; the other ops
      take any value. Extreme values are the business of ``tests/test_edge_values.py``.

Compared
    - float64 (pylucid and PyTorch in the same dtypes): shapes, dtypes, nan/inf positions,
      and ``|pylucid - torch| <= 1e-10 |torch| + 1e-10 max(max |torch|, 1)`` per tensor. The
      relative term is the bound's purpose (a gradient off by 1 + 1e-8 fails); the absolute
      one is normwise because an element that cancels to near 0 (a sum, a softmax gradient)
      carries the rounding errors of the terms it cancelled, which are of the tensor's
      scale (or of the graph's, 1: leaves and weights are O(1)) times u = 1.1e-16 times the
      condition of at most ``_MAX_STEPS`` ops: the worst measured over 2 x 8000 float64
      graphs (seeds 7 and 11) was 1.4e-14 of that scale, 7000 times below the bound. A
      float32 array of a float64 run (a 0-d float32 leaf's gradient) gets 8 float32 ULP.
    - float32 against PyTorch in float64 (on the same float32-rounded leaves), with dtypes
      checked against PyTorch in float32: ``|pylucid - torch64| <= 2e-4 (|torch64| +
      max(max |torch64|, 1))``. Each float32 op is within a few ULP (u = 6e-8) and the
      samplers' ranges keep each op's condition number at most about 5, so 8 ops can
      compound to about 5^3 * 16 u = 1.2e-4 in the worst case; the worst measured over
      2 x 8000 float32 graphs was 5.7e-6, 35 times below the bound. Graphs with a finite
      float64 value beyond 1e30 (float32 would overflow) are not drawn.

Runs
    A short run by default: :data:`EXAMPLES` = 40 graphs per backend and dtype, 160 in all
    (derandomized, so CI runs the same graphs every time; about 10 s with Numba's cache
    warm, 50 s cold on the 2-core development VM). ``PYLUCID_DIFFERENTIAL_EXAMPLES=5000``
    runs that many per backend and dtype (5000: about 5 min), from the seed
    ``PYLUCID_DIFFERENTIAL_SEED`` (an int) instead of the derandomized stream when it is
    set. PyTorch is an oracle only: without it the module is skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from pylucid.opinfo import OPS, OpInfo
from pylucid.opinfo.records import Uniform
from tests.conftest import DEVICES, MLX_MISSING, TORCH_REASON

torch = pytest.importorskip(
    "torch", reason=TORCH_REASON
)
hypothesis = pytest.importorskip("hypothesis", reason="the graphs are drawn by hypothesis")
st = hypothesis.strategies

#: Graphs per backend and dtype; the default is the short run.
EXAMPLES = int(os.environ.get("PYLUCID_DIFFERENTIAL_EXAMPLES") or 40)
_SEED = os.environ.get("PYLUCID_DIFFERENTIAL_SEED")
_MAX_STEPS = 8
#: float64: relative tolerance, and the normwise absolute one (see the module docstring).
RTOL64 = 1e-10
#: float32 arrays of a float64 run (the gradient of a float32 leaf): 8 float32 ULP.
F32_IN_F64 = 8 * 2.0**-24
#: float32 against float64: relative and normwise tolerance (see the module docstring).
TOL32 = 2e-4
#: float32 graphs whose float64 values exceed this are not drawn (float32 would overflow).
_FLOAT32_RANGE = 1e30

_PL_DTYPES = {"float32": pl.float32, "float64": pl.float64, "int64": pl.int64, "bool": pl.bool_}
_TORCH_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
    "bool": torch.bool,
}
#: Ops that may take a value of another dtype (int64, bool, another float width): exact on
#: integers and bools, so that the float64 comparison stays exact.
_EXACT_ON_OTHERS = frozenset(
    {"add", "sub", "mul", "maximum", "minimum", "where", "eq", "ne", "lt", "le", "gt", "ge"}
)
#: The binary ops of the "mixed" steps, which pair a value of another dtype with a main one.
_MIXED = frozenset({"add", "sub", "mul", "maximum", "minimum", "lt", "eq"})
_RECORDS = [info for info in OPS if "needs_mlx" not in info.tags or not MLX_MISSING]
#: The records an op step draws from, the broadcasting binary ops three times over (they
#: are where shapes meet).
_BROADCASTING = frozenset({"add", "sub", "mul", "div", "pow", "atan2", "maximum", "minimum"})
_WEIGHTED_RECORDS = _RECORDS + [i for i in _RECORDS if i.name in _BROADCASTING] * 2
#: Ops with an axis argument are not given 0-d inputs: PyTorch lets dim 0 or -1 name a 0-d
#: tensor's (absent) axis, pylucid follows NumPy and raises an error naming the op (an API
#: difference, not a value: the error is tested in tests/test_reduction.py).
_AXIS_OPS = frozenset(
    {
        "sum",
        "mean",
        "prod",
        "max",
        "min",
        "argmax",
        "var",
        "std",
        "logsumexp",
        "softmax",
        "log_softmax",
        "transpose",
        "permute",
    }
)


# -- the graph ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Leaf:
    """An input: its float64 values (rounded to ``dtype`` when built) and dtype name; ``main``
    leaves take the graph's dtype."""

    values: np.ndarray
    dtype: str = "main"


@dataclass(frozen=True)
class Step:
    """One node: ``kind`` is ``op`` (an OpInfo), ``view``, ``squash``, ``inplace`` or
    ``scalar``; ``what`` names what it does; ``inputs`` are value ids."""

    kind: str
    what: Any
    inputs: tuple[int, ...]

    def __repr__(self) -> str:
        what = self.what.name if isinstance(self.what, OpInfo) else self.what
        return f"{self.kind}({what!r}, {list(self.inputs)})"


@dataclass
class Graph:
    """Leaves are the values 0 .. len(leaves) - 1; step k makes value len(leaves) + k."""

    leaves: list[Leaf] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    weights_seed: int = 0

    def __repr__(self) -> str:
        leaves = ", ".join(f"{leaf.dtype}{leaf.values.shape}" for leaf in self.leaves)
        steps = "\n    ".join(f"{len(self.leaves) + k}: {s!r}" for k, s in enumerate(self.steps))
        return (
            f"Graph(leaves=[{leaves}] (values 0..{len(self.leaves) - 1}),\n    {steps},\n"
            f"    outputs={self.outputs}, weights_seed={self.weights_seed})"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints a failing graph with this (its leaf values are seeded)."""
        printer.text(repr(self))


# -- views, in-place ops and Python numbers (the same syntax in pylucid and PyTorch) ----------
def _first_size_one(shape: tuple[int, ...]) -> int:
    return shape.index(1)


#: name -> (view, whether it applies to a shape).
VIEWS: dict[str, tuple[Callable[[Any], Any], Callable[[tuple[int, ...]], bool]]] = {
    "slice": (lambda t: t[1:], lambda s: len(s) >= 1),
    "step": (lambda t: t[..., ::2], lambda s: len(s) >= 1),
    "mT": (lambda t: t.mT, lambda s: len(s) >= 2),
    "flatten": (lambda t: t.reshape(-1), lambda s: True),
    "unsqueeze": (lambda t: t.unsqueeze(0), lambda s: len(s) <= 3),
    "squeeze": (lambda t: t.squeeze(_first_size_one(tuple(t.shape))), lambda s: 1 in s),
    "expand": (lambda t: t.expand(2, *t.shape), lambda s: len(s) <= 3),
    "expand_ones": (
        lambda t: t.expand(*[3 if n == 1 else n for n in t.shape]),
        lambda s: 1 in s,
    ),
    "index": (lambda t: t[0], lambda s: len(s) >= 1 and s[0] > 0),
}
#: The views an in-place op writes through: not the expanded ones (several elements share
#: memory, and both refuse the write, PyTorch but where they have no elements) nor reshape
#: (PyTorch's ``reshape`` is a view or a copy depending on strides, which it leaves
#: unspecified: ``(x.permute(...) * 1.0).reshape(-1)`` copies, as ``x * 1.0`` keeps x's
#: layout).
_WRITABLE_VIEWS = frozenset({"slice", "step", "mT", "unsqueeze", "squeeze", "index"})
#: name -> in-place update of ``target`` (a view of a fresh copy) by ``other``.
INPLACE: dict[str, Callable[[Any, Any], None]] = {
    "add_": lambda t, o: t.add_(o),
    "sub_": lambda t, o: t.sub_(o),
    "mul_": lambda t, o: t.mul_(o),
    "div_": lambda t, o: t.div_(o),  # o is squashed into [0.5, 2)
    "setitem": lambda t, o: t.__setitem__(Ellipsis, o),
}
#: Python numbers on either side: name -> (op, whether the tensor must be squashed into
#: [0.5, 2) first: a divisor, a base with a fractional power).
_SCALARS: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "x + 2": (lambda t: t + 2, False),
    "1.5 - x": (lambda t: 1.5 - t, False),
    "x * -3": (lambda t: t * -3, False),
    "0.5 * x": (lambda t: 0.5 * t, False),
    "x / 4.0": (lambda t: t / 4.0, False),
    "2 / x": (lambda t: 2 / t, True),
    "x ** 2": (lambda t: t**2, False),
    "x ** 0.5": (lambda t: t**0.5, True),
    "x ** -1.5": (lambda t: t**-1.5, True),
}
_POSITIVE = Uniform(0.5, 2.0)


# -- building a graph in a framework -----------------------------------------------------------
class Framework:
    """How a graph is built: pylucid on a device, or PyTorch, with ``main`` the dtype of the
    main leaves, whose values are first rounded to ``rounding`` (float32 in float32 runs, so
    that the float64 oracle sees the same leaves)."""

    def __init__(self, name: str, main: str, rounding: str, device: str = "cpu") -> None:
        self.main, self.rounding, self.device = main, rounding, device
        self.is_torch = name == "torch"

    def dtype(self, name: str) -> Any:
        """The framework's dtype of a dtype name."""
        return _TORCH_DTYPES[name] if self.is_torch else _PL_DTYPES[name]

    def leaf(self, leaf: Leaf) -> Any:
        """The leaf as a tensor (requiring grad if floating); int64 leaves take round(3 v),
        bool ones v > 0."""
        name = self.main if leaf.dtype == "main" else leaf.dtype
        values = leaf.values
        if leaf.dtype == "main":
            values = values.astype(self.rounding).astype(np.float64)
        elif name == "bool":
            values = values > 0
        elif name == "int64":
            values = np.round(values * 3)
        floating = name in ("float32", "float64")
        if self.is_torch:
            return torch.tensor(values, dtype=self.dtype(name), requires_grad=floating)
        return pl.tensor(values, dtype=self.dtype(name), device=self.device, requires_grad=floating)

    def sigmoid(self, t: Any) -> Any:
        """The framework's sigmoid (of :func:`_squash`)."""
        return torch.sigmoid(t) if self.is_torch else pl.sigmoid(t)

    def backward(self, outputs: list, weights: list[np.ndarray]) -> None:
        """Backpropagate ``sum(weights * outputs)`` into the leaves."""
        if self.is_torch:
            grads = [torch.tensor(w, dtype=o.dtype) for o, w in zip(outputs, weights)]
            torch.autograd.backward(outputs, grads)
        else:
            grads = [
                pl.tensor(w, dtype=o.dtype, device=self.device) for o, w in zip(outputs, weights)
            ]
            pl.graph.backward(outputs, grads)

    def numpy(self, t: Any) -> np.ndarray:
        """The values of a tensor."""
        return t.detach().numpy() if self.is_torch else t.numpy()

    def dtype_name(self, t: Any) -> str:
        """The dtype name of a tensor (``float32``, ``int64``, ``bool`` ...)."""
        return str(t.dtype).rsplit(".", 1)[-1].replace("bool_", "bool")


def _squash(fw: Framework, t: Any, sampler: Uniform) -> Any:
    """``low + (high - low) sigmoid(t)``: any value into [low, high) (for a random-sign
    sampler, its positive side)."""
    return sampler.low + (sampler.high - sampler.low) * fw.sigmoid(t)


def build(graph: Graph, fw: Framework) -> tuple[list, list]:
    """The graph's values (leaves first) and leaves in ``fw``."""
    leaves = [fw.leaf(leaf) for leaf in graph.leaves]
    values = list(leaves)
    for step in graph.steps:
        args = [values[i] for i in step.inputs]
        if step.kind == "op" and fw.is_torch:
            value = step.what.torch(*args)
            # (an op without a gradient - floor_divide - gives none in pylucid; PyTorch's
            # float result requires grad and raises in backward: "not implemented")
            undefined = not pl.ops.get_schema(step.what.name).differentiable
            values.append(value.detach() if undefined else value)
        elif step.kind == "op":
            values.append(step.what.call(*args))
        elif step.kind == "squash":
            values.append(_squash(fw, args[0], step.what))
        elif step.kind == "view":
            values.append(VIEWS[step.what][0](args[0]))
        elif step.kind == "scalar":
            values.append(_SCALARS[step.what][0](args[0]))
        else:  # inplace: (op, view) on a fresh copy of the target, whose base is the value
            op, view = step.what
            base = args[0] * 1.0
            INPLACE[op](VIEWS[view][0](base) if view else base, args[1])
            values.append(base)
    return values, leaves


@dataclass
class Result:
    """A built graph's values and leaf gradients as NumPy arrays, and the dtype names."""

    values: list[np.ndarray]
    dtypes: list[str]
    grads: list[np.ndarray | None]


def run(graph: Graph, fw: Framework) -> Result:
    """Build the graph, backpropagate the weighted outputs, read everything back."""
    values, leaves = build(graph, fw)
    outputs = [values[i] for i in graph.outputs if values[i].requires_grad]
    if outputs:
        rng = np.random.default_rng(graph.weights_seed)
        weights = [rng.uniform(-1.0, 1.0, size=tuple(o.shape)) for o in outputs]
        fw.backward(outputs, weights)
    grads = [None if leaf.grad is None else fw.numpy(leaf.grad) for leaf in leaves]
    return Result([fw.numpy(v) for v in values], [fw.dtype_name(v) for v in values], grads)


# -- drawing a graph ---------------------------------------------------------------------------
@dataclass
class _Value:
    """What the generator knows of a value: shape, dtype name, and the sampler slot it was
    drawn for (a fresh leaf of an op: that op's input ``slot``)."""

    shape: tuple[int, ...]
    dtype: str
    fresh_for: tuple[str, int] | None = None


def _probe(info: OpInfo, specs: list[_Value], main: str) -> bool:
    """Whether PyTorch accepts these shapes and dtypes for the op (on zeros)."""
    names = {"main": main}
    try:
        tensors = [
            torch.zeros(v.shape, dtype=_TORCH_DTYPES[names.get(v.dtype, v.dtype)]) for v in specs
        ]
        info.torch(*tensors)
    except (RuntimeError, IndexError, ValueError, TypeError):
        return False
    return True


def _probe_inplace(op: str, view: str | None, target: _Value, other: _Value, main: str) -> bool:
    """Whether PyTorch accepts the in-place step (it refuses writes through an expanded
    view, several of whose elements share memory, as pylucid does)."""
    try:
        base = _zeros(target, main) * 1.0
        INPLACE[op](VIEWS[view][0](base) if view else base, _zeros(other, main))
    except (RuntimeError, IndexError, ValueError, TypeError):
        return False
    return True


def _shapes(draw: Callable, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape near ``base``: itself, a broadcasting partner (dims set to 1 or dropped; the
    likeliest), or a fresh one."""
    kind = draw(st.sampled_from(["same", "broadcast", "broadcast", "fresh"]))
    if kind == "same":
        return base
    if kind == "broadcast":
        kept = base[draw(st.integers(0, len(base))) :]
        return tuple(1 if draw(st.booleans()) else n for n in kept)
    ndim = draw(st.integers(0, 3))
    return tuple(draw(st.sampled_from([0, 1, 1, 2, 3, 4])) for _ in range(ndim))


def _base_shape(draw: Callable) -> tuple[int, ...]:
    """1 to 3 dimensions (0-d leaves come from its broadcasting partners), each of one common
    size n (2, 3 or 4) half the time, so that square shapes, where a broadcast over the wrong
    axis keeps the sizes right, are common; else of size 0 to 4."""
    n = draw(st.sampled_from([2, 3, 4]))
    sizes = [n, n, n, 0, 1, 2, 3, 4]
    return tuple(draw(st.sampled_from(sizes)) for _ in range(draw(st.integers(1, 3))))


@st.composite
def graphs(draw: Callable, main: str) -> Graph:
    """A random graph for the main dtype ``main`` (see the module docstring)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    graph = Graph(weights_seed=draw(st.integers(0, 2**32 - 1)))
    # The generator numbers values in creation order (leaves and steps interleaved);
    # ``_renumber`` gives leaves 0 .. L-1 and steps L, L + 1, ... at the end.
    pool: list[_Value] = []
    leaf_ids: list[int] = []
    step_ids: list[int] = []

    def add_leaf(shape: tuple[int, ...], sampler=None, dtype="main", fresh_for=None) -> int:
        values = (sampler or Uniform(-2.0, 2.0))(rng, shape)
        graph.leaves.append(Leaf(np.asarray(values, dtype=np.float64), dtype))
        pool.append(_Value(shape, dtype, fresh_for))
        leaf_ids.append(len(pool) - 1)
        return len(pool) - 1

    def push(step: Step, value: _Value) -> int:
        graph.steps.append(step)
        pool.append(value)
        step_ids.append(len(pool) - 1)
        return len(pool) - 1

    def squashed(index: int, sampler: Uniform) -> int:
        return push(Step("squash", sampler, (index,)), _Value(pool[index].shape, "main"))

    def floats() -> list[int]:
        return [i for i, v in enumerate(pool) if v.dtype == "main"]

    def view_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(VIEWS[name][0](torch.zeros(shape)).shape)

    base = _base_shape(draw)
    for _ in range(draw(st.integers(2, 3))):
        add_leaf(_shapes(draw, base))
    if draw(st.booleans()):  # another dtype, met through _EXACT_ON_OTHERS
        other = "float64" if main == "float32" else "float32"
        other = draw(st.sampled_from(["int64", "bool", other]))
        # A float32 among float64 values is 0-d: a float32 tensor would make float64 ops
        # float32 ones (PyTorch's rule), beyond the float64 tolerance.
        zero_d = other == "float32" or draw(st.booleans())
        add_leaf(() if zero_d else _shapes(draw, base), dtype=other)

    for _ in range(draw(st.integers(1, _MAX_STEPS))):
        kinds = ["op", "op", "op", "op", "view", "inplace", "scalar"]
        others = [i for i, v in enumerate(pool) if v.dtype not in ("main",)]
        kind = draw(st.sampled_from(kinds + (["mixed", "mixed"] if others else [])))
        if kind == "mixed":  # a binary op on a main-dtype value and one of another dtype
            info = draw(st.sampled_from([i for i in _RECORDS if i.name in _MIXED]))
            pair = [draw(st.sampled_from(floats())), draw(st.sampled_from(others))]
            if draw(st.booleans()):
                pair.reverse()
            if not _probe(info, [pool[i] for i in pair], main):
                continue
            result = info.torch(*[_zeros(pool[i], main) for i in pair])
            value = _Value(tuple(result.shape), _dtype_name(result.dtype, main))
            push(Step("op", info, tuple(pair)), value)
        elif kind == "view":
            # Not of another float dtype: a float32 made dimensioned would turn float64 ops
            # into float32 ones (a 0-d float64 does not promote a float32 tensor), beyond
            # the float64 tolerance.
            index = draw(st.sampled_from([i for i, v in enumerate(pool) if v.dtype[0] != "f"]))
            name = draw(
                st.sampled_from([n for n, (_, ok) in VIEWS.items() if ok(pool[index].shape)])
            )
            push(
                Step("view", name, (index,)),
                _Value(view_shape(name, pool[index].shape), pool[index].dtype),
            )
        elif kind == "scalar":
            index = draw(st.sampled_from(floats()))
            name = draw(st.sampled_from(sorted(_SCALARS)))
            if _SCALARS[name][1]:
                index = squashed(index, _POSITIVE)
            push(Step("scalar", name, (index,)), _Value(pool[index].shape, "main"))
        elif kind == "inplace":
            target = draw(st.sampled_from(floats()))
            shape = pool[target].shape
            views = [n for n, (_, ok) in VIEWS.items() if ok(shape) and n in _WRITABLE_VIEWS]
            view = draw(st.sampled_from([None, *views]))
            viewed = view_shape(view, shape) if view else shape
            op = draw(st.sampled_from(sorted(INPLACE)))
            fits = [i for i in floats() if _broadcasts_to(pool[i].shape, viewed)]
            if fits and draw(st.booleans()):
                other = draw(st.sampled_from(fits))
            else:
                other = add_leaf(viewed[len(viewed) - draw(st.integers(0, len(viewed))) :])
            if not _probe_inplace(op, view, pool[target], pool[other], main):
                continue
            if op == "div_":
                other = squashed(other, _POSITIVE)
            push(Step("inplace", (op, view), (target, other)), _Value(shape, "main"))
        else:
            info = draw(st.sampled_from(_WEIGHTED_RECORDS))
            arity = len(info.samplers)
            candidates = [
                combo
                for combo in _combinations(len(pool), arity, rng)
                if _usable(info, [pool[i] for i in combo], main)
            ]
            # Mostly values of the pool; for several inputs, of different shapes (broadcasts)
            # when some are.
            mixed_shapes = [c for c in candidates if len({pool[i].shape for i in c}) > 1]
            if mixed_shapes and draw(st.booleans()):
                inputs = list(draw(st.sampled_from(mixed_shapes)))
            elif candidates and draw(st.integers(0, 3)) > 0:
                inputs = list(draw(st.sampled_from(candidates)))
            else:
                shapes = draw(st.sampled_from(info.shapes))
                inputs = [
                    add_leaf(shape, sampler, fresh_for=(info.name, k))
                    for k, (shape, sampler) in enumerate(zip(shapes, info.samplers))
                ]
            if "bounded_domain" in info.tags:
                inputs = [
                    squashed(i, info.samplers[k])
                    if pool[i].fresh_for != (info.name, k) and isinstance(info.samplers[k], Uniform)
                    else i
                    for k, i in enumerate(inputs)
                ]
            result = info.torch(*[_zeros(pool[i], main) for i in inputs])
            push(
                Step("op", info, tuple(inputs)),
                _Value(tuple(result.shape), _dtype_name(result.dtype, main)),
            )
    consumed = {i for step in graph.steps for i in step.inputs}
    outputs = [i for i in step_ids if i not in consumed or draw(st.booleans())]
    _renumber(graph, leaf_ids, step_ids, outputs)
    return graph


def _renumber(graph: Graph, leaf_ids: list[int], step_ids: list[int], outputs: list[int]) -> None:
    """Value ids from creation order to leaves-first order."""
    number = {old: new for new, old in enumerate(leaf_ids + step_ids)}
    graph.steps = [Step(s.kind, s.what, tuple(number[i] for i in s.inputs)) for s in graph.steps]
    graph.outputs = [number[i] for i in outputs]


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` (as the value of an in-place op)."""
    if len(shape) > len(target):
        return False
    return all(n in (1, m) for n, m in zip(shape[::-1], target[::-1]))


def _zeros(value: _Value, main: str) -> Any:
    name = main if value.dtype == "main" else value.dtype
    return torch.zeros(value.shape, dtype=_TORCH_DTYPES[name])


def _dtype_name(dtype: Any, main: str) -> str:
    names = {v: k for k, v in _TORCH_DTYPES.items()}
    name = names[dtype]
    return "main" if name == main else name


def _combinations(n: int, arity: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Up to 64 tuples of ``arity`` value ids out of ``n`` (all of them when few)."""
    if n**arity <= 64:
        return [tuple(int(i) for i in np.unravel_index(k, (n,) * arity)) for k in range(n**arity)]
    return [tuple(int(i) for i in rng.integers(0, n, size=arity)) for _ in range(64)]


def _usable(info: OpInfo, specs: list[_Value], main: str) -> bool:
    """Whether these values can feed the op: values of another dtype only into ops exact on
    them, next to a main-dtype one, never into a bounded domain; and PyTorch accepts them."""
    if info.name in _AXIS_OPS and any(v.shape == () for v in specs):
        return False
    others = [v for v in specs if v.dtype != "main"]
    if others and (
        info.name not in _EXACT_ON_OTHERS
        or "bounded_domain" in info.tags
        or len(others) == len(specs)
    ):
        return False
    return _probe(info, specs, main)


# -- comparing ---------------------------------------------------------------------------------
def _close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str:
    """Why ``actual`` is not ``expected`` within the tolerance (empty if it is): nan and inf
    positions must match, finite values be within ``rtol |expected| + atol max(scale, 1)``."""
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, PyTorch {expected.shape}"
    if expected.dtype.kind in "biu":
        return "" if np.array_equal(actual, expected) else f"{actual!r} != {expected!r}"
    actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    if not np.array_equal(np.isnan(actual), np.isnan(expected)):
        return f"nan positions differ: {actual!r} vs {expected!r}"
    infinite = np.isinf(actual) | np.isinf(expected)
    if not np.array_equal(actual[infinite], expected[infinite]):
        return f"inf positions differ: {actual!r} vs {expected!r}"
    finite = np.isfinite(expected)
    if not finite.any():
        return ""
    scale = max(float(np.abs(expected[finite]).max()), 1.0)
    error = np.abs(actual[finite] - expected[finite])
    allowed = rtol * np.abs(expected[finite]) + atol * scale
    if (error <= allowed).all():
        return ""
    worst = int(np.argmax(error - allowed))
    return (
        f"max error {error[worst]:.3g} > {allowed[worst]:.3g} at pylucid "
        f"{actual[finite][worst]!r}, PyTorch {expected[finite][worst]!r}"
    )


def _tolerance(value: np.ndarray, rtol: float, atol: float) -> tuple[float, float]:
    """The run's tolerance, but for a float32 array in a float64 run (a float32 leaf's
    gradient, a float32 0-d operand): that of a float32 rounding of a sum, 8 float32 ULP."""
    if value.dtype == np.float32 and rtol == RTOL64:
        return F32_IN_F64, F32_IN_F64
    return rtol, atol


def compare(graph: Graph, dtype: str, device: str) -> None:
    """Build ``graph`` in pylucid and PyTorch and assert that they agree."""
    got = run(graph, Framework("pylucid", dtype, dtype, device))
    same = run(graph, Framework("torch", dtype, dtype))
    if dtype == "float64":
        oracle, rtol, atol = same, RTOL64, RTOL64
    else:
        oracle, rtol, atol = run(graph, Framework("torch", "float64", "float32")), TOL32, TOL32
        arrays = oracle.values + [g for g in oracle.grads if g is not None]
        floats = [a for a in arrays if a.dtype.kind == "f" and a.size]
        hypothesis.assume(
            all(np.abs(a[np.isfinite(a)]).max(initial=0) < _FLOAT32_RANGE for a in floats)
        )
    problems = []
    for i, (value, dtype_name) in enumerate(zip(got.values, got.dtypes)):
        if dtype_name != same.dtypes[i]:
            problems.append(f"value {i}: dtype {dtype_name}, PyTorch {same.dtypes[i]}")
            continue
        expected = oracle.values[i] if value.dtype.kind == "f" else same.values[i]
        why = _close(value, expected, *_tolerance(value, rtol, atol))
        if why:
            problems.append(f"value {i}: {why}")
    for i, (grad, expected) in enumerate(zip(got.grads, oracle.grads)):
        if (grad is None) != (same.grads[i] is None):
            problems.append(f"grad of leaf {i}: pylucid {grad}, PyTorch {same.grads[i]}")
        elif grad is not None:
            why = _close(grad, expected, *_tolerance(grad, rtol, atol))
            if why:
                problems.append(f"grad of leaf {i}: {why}")
    assert not problems, "\n".join(problems)


def _settings() -> Any:
    """max_examples from the environment; derandomized unless a seed is given."""
    return hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=_SEED is None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )


@pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's var of one element
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_graphs_match_torch(dtype: str, device: str) -> None:
    @_settings()
    @hypothesis.given(graph=graphs(dtype))
    def check(graph: Graph) -> None:
        compare(graph, dtype, device)

    if _SEED is not None:
        check = hypothesis.seed(int(_SEED))(check)
    check()


def test_every_record_has_a_torch_oracle() -> None:
    """Completeness: every op record says how PyTorch computes it, and on the record's own
    shapes that agrees with its float64 NumPy reference (the oracle is checked itself)."""
    rng = np.random.default_rng(0)
    for info in OPS:
        assert info.torch is not None, f"{info.name} has no PyTorch oracle"
        for shapes in info.shapes:
            arrays = info.sample(rng, shapes)
            reference = info.reference(*arrays)
            result = info.torch(*[torch.tensor(a) for a in arrays])
            np.testing.assert_allclose(
                result.numpy(), reference, rtol=1e-12, atol=1e-12, err_msg=info.name
            )
