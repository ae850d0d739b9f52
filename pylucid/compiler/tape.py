"""Tape: a plan's steps replayed by one compiled loop over kernel addresses.

Generated code (:mod:`pylucid.compiler.codegen`) fuses a step's loops into Numba functions
of its own, which Numba compiles for every new graph: seconds for a training step. A tape
compiles nothing per graph. Each loop of the plan (an elementwise primitive, a cast, a
fill, an accumulation) becomes one row of a 2-d ``int64`` array::

    [kernel address, flat, elements, n0, n1, n2, n3,
     out address, its 4 strides, operand addresses and strides ..., scalar addresses ...]

(shapes padded to 4 dimensions, strides in elements, 0 along a broadcast dimension). The
kernel of a row is a C function (``numba.cfunc``) compiled for its *variant* - the scalar
function, the dtypes and whether the arrays are contiguous - and cached on disk, so one
variant serves every graph in every process. :func:`~pylucid.compiler.kernels.run_tape`,
compiled once with the package, calls the rows' kernels in order: about 14 ns a call.

What a kernel does per element is what generated code does (the kernel's scalar function,
its operands cast to the compute dtype, the result rounded to its op's dtype), so tape and
fused replays give the values eager runs give. The steps a tape does not run are called
from Python between its runs: products (eager's BLAS call, :func:`pylucid.kernels.blas.
product`), optimizer updates (their scalars read again at every replay), sums and losses
(the backend's own loops, into the planned arrays), the embedding op's gather and scatter
(its kernels), the checks of targets and indices, and host calls (the backend's primitive)
- among them the loops large enough for the eager kernel to run threaded (a tape's kernels
are serial).
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pylucid.backends.numba_backend.core import _operand
from pylucid.compiler import kernels
from pylucid.compiler.capture import Ref
from pylucid.compiler.codegen import LOAD_LOCK, header, load, module_path
from pylucid.compiler.plan import Plan, Step, importable
from pylucid.kernels import blas, gather
from pylucid.kernels.jit import entry_point
from pylucid.kernels.losses import check_targets, cross_entropy_loops

__all__ = ["INDEX_OUT_OF_RANGE", "TARGETS_CHANGED", "TARGET_OUT_OF_RANGE", "Lowered", "lower"]

#: Why a replay whose targets' check gave another answer is abandoned.
TARGETS_CHANGED = (
    "the targets' check gave another answer than at capture (a target out of range, or "
    "another count of ignored targets where the step depends on it)"
)
TARGET_OUT_OF_RANGE = "a target is out of range (the eager step raises)"
INDEX_OUT_OF_RANGE = "an index is out of range (the eager step raises)"

_HEADER = 7  # kernel address, flat, elements, 4 sizes
_SLOT = 5  # address, 4 strides
_MAX_SLOTS = 8
_WIDTH = _HEADER + _SLOT * _MAX_SLOTS
_NDIM = 4


@dataclass(frozen=True)
class _Variant:
    """What a loop kernel is compiled for.

    ``fn`` is the scalar function (None: the identity of a cast, copy or fill;
    ``"accumulate"``: ``out + operand``), ``operands`` the dtype of each operand and
    whether it is read once (``"s"``, a single element) or per element (``"a"``),
    ``scalars`` the dtype of each of the function's trailing scalar arguments and, for a
    tuple of numbers, their count (0: a number), ``flat`` whether
    every array is laid out as the output, which has no gaps (one flat loop in memory
    order, C or Fortran), or not (four nested loops)."""

    fn: Any
    operands: tuple[tuple[str, str], ...]
    scalars: tuple[tuple[str, int], ...]
    compute: str
    out: str
    flat: bool


def _memory(dtype: str) -> str:
    """The NumPy type a kernel reads ``dtype`` through (bools as bytes)."""
    return "uint8" if dtype == "bool" else dtype


def _load(expression: str, dtype: str) -> str:
    return f"({expression} != 0)" if dtype == "bool" else expression


def _to(expression: str, dtype: str, source: str) -> str:
    if dtype == source:
        return expression
    return f"np.{'bool_' if dtype == 'bool' else dtype}({expression})"


def _store(expression: str, dtype: str) -> str:
    if dtype == "bool":
        return f"np.uint8(1 if {expression} else 0)"
    return f"np.{dtype}({expression})"


def _source(v: _Variant) -> str:
    """The module source of ``v``'s kernel."""
    lines = [
        header("one loop kernel of a tape"),
        "import numpy as np",
        "from numba import cfunc, types",
        "from pylucid.compiler.kernels import to_pointer",
    ]
    if callable(v.fn):
        lines.append(f"from {v.fn.__module__} import {v.fn.__name__} as fn")
    lines += [
        "",
        "",
        "@cfunc(types.void(types.int64), cache=True, error_model='numpy')",
        "def kernel(address):",
        "    row = to_pointer(address, np.int64(0))",
    ]
    slot = _HEADER

    def pointer(name: str, dtype: str) -> None:
        nonlocal slot
        lines.append(f"    {name} = to_pointer(row[{slot}], np.{_memory(dtype)}(0))")
        for d in range(_NDIM):
            lines.append(f"    {name}_{d} = row[{slot + 1 + d}]")
        slot += _SLOT

    pointer("o", v.out)
    for k, (dtype, _) in enumerate(v.operands):
        pointer(f"p{k}", dtype)
    for j, (dtype, count) in enumerate(v.scalars):
        lines.append(f"    s{j} = to_pointer(row[{slot}], np.{_memory(dtype)}(0))")
        loads = [_load(f"s{j}[{e}]", dtype) for e in range(max(count, 1))]
        value = "(" + "".join(f"{e}, " for e in loads) + ")" if count else loads[0]
        lines.append(f"    c{j} = {value}")
        slot += _SLOT
    for k, (dtype, mode) in enumerate(v.operands):
        if mode == "s":
            lines.append(f"    r{k} = {_to(_load(f'p{k}[0]', dtype), v.compute, dtype)}")

    def element(k: int) -> str:
        dtype, mode = v.operands[k]
        if mode == "s":
            return f"r{k}"
        at = "q" if v.flat else f"b{k} + l * p{k}_3"
        return _to(_load(f"p{k}[{at}]", dtype), v.compute, dtype)

    arguments = [element(k) for k in range(len(v.operands))]
    if v.fn == "accumulate":  # (out + operand, in the output's dtype)
        target = "o[q]" if v.flat else "o[q0 + l * o_3]"
        value = f"{_load(target, v.out)} + {_to(arguments[0], v.out, v.compute)}"
    elif v.fn is None:
        value = arguments[0]
    else:
        value = f"fn({', '.join(arguments + [f'c{j}' for j in range(len(v.scalars))])})"
    if v.flat:
        lines += ["    for q in range(row[2]):", f"        o[q] = {_store(value, v.out)}"]
    else:
        operands = [k for k, (_, mode) in enumerate(v.operands) if mode == "a"]
        lines += [
            "    for i in range(row[3]):",
            "        for j in range(row[4]):",
            "            for k in range(row[5]):",
            "                q0 = i * o_0 + j * o_1 + k * o_2",
        ]
        lines += [f"                b{k} = i * p{k}_0 + j * p{k}_1 + k * p{k}_2" for k in operands]
        lines += [
            "                for l in range(row[6]):",
            f"                    o[q0 + l * o_3] = {_store(value, v.out)}",
        ]
    return "\n".join(lines) + "\n"


#: variant -> (its module, the kernel's address), for this process
_KERNELS: dict[_Variant, tuple[Any, int]] = {}


def _kernel(v: _Variant) -> int:
    """The address of ``v``'s kernel (compiled, or loaded from the cache on disk)."""
    known = _KERNELS.get(v)
    if known is None:
        with LOAD_LOCK:
            known = _KERNELS.get(v)
            if known is None:
                text = _source(v)
                try:
                    module = load(text, prefix="loop")
                except Exception:  # (a damaged cache entry: removed, compiled again)
                    if not _forget(text):
                        raise
                    module = load(text, prefix="loop")
                known = _KERNELS[v] = (module, module.kernel.address)
    return known[1]


def _forget(text: str) -> bool:
    """Remove Numba's cache files of a kernel's module; whether there were any."""
    directory, name = os.path.split(module_path(text, "loop"))
    paths = glob.glob(os.path.join(directory, "__pycache__", f"{name[:-3]}*.nb*"))
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)
    return bool(paths)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _strides(a: np.ndarray, shape: tuple[int, ...]) -> list[int]:
    """``a``'s strides in elements over ``shape`` (broadcast: 0), padded to 4 dimensions."""
    view = np.broadcast_to(a.reshape(()) if a.size == 1 and a.ndim else a, shape)
    strides = [s // a.itemsize for s in view.strides]
    return [0] * (_NDIM - len(shape)) + strides


@dataclass
class _Row:
    """A planned row: its variant and the arrays of its slots (output first)."""

    variant: _Variant
    slots: list[np.ndarray]
    shape: tuple[int, ...]


class _Rows:
    """The rows of one loop step, or None where a tape cannot run it."""

    def __init__(self, arrays: dict[int, np.ndarray], keep: list[np.ndarray]) -> None:
        self.arrays, self.keep = arrays, keep

    def constant(self, value: Any, dtype: np.dtype) -> np.ndarray:
        """An array of ``value`` (a number or a tuple of numbers), kept alive with the
        program."""
        a = np.array(value if isinstance(value, tuple) else [value], dtype=dtype)
        self.keep.append(a)
        return a

    def row(self, step: Step) -> _Row | None:
        call = step.call
        out = self.arrays.get(step.out)
        if out is None or out.ndim > _NDIM:
            return None
        dtype = out.dtype
        operands: list[np.ndarray] = []
        scalars: list[np.ndarray] = []
        counts: list[int] = []
        fn: Any = None
        compute = dtype
        if call.elementwise is not None:
            loop = call.elementwise
            if not importable(loop.fn):
                return None
            fn, compute = loop.fn, loop.compute
            for a in loop.operands:
                operands.append(
                    self.arrays[a.index] if isinstance(a, Ref) else self.constant(a, compute)
                )
            for value in loop.scalars:
                numbers = value if isinstance(value, tuple) else (value,)
                types_ = {np.dtype(type(n)) for n in numbers}
                if len(types_) != 1 or not numbers:
                    return None
                scalars.append(self.constant(numbers, types_.pop()))
                counts.append(len(value) if isinstance(value, tuple) else 0)
        elif call.name == "full":
            operands = [self.constant(call.args[1], dtype)]
        elif call.name == "accumulate":
            fn = "accumulate"
            operands = [self.arrays[call.args[1].index]]
        else:  # cast, clone
            operands = [self.arrays[call.args[0].index]]
        if 1 + len(operands) + len(scalars) > _MAX_SLOTS:
            return None
        shape = out.shape
        if any(np.broadcast_shapes(a.shape, shape) != shape for a in operands):
            return None
        modes = [("s" if a.size == 1 else "a") for a in operands]
        # (one loop in memory order: the output without gaps - C- or Fortran-ordered - and
        # every operand read per element laid out exactly as it is)
        flat = (out.flags.c_contiguous or out.flags.f_contiguous) and all(
            m == "s"
            or (a.shape == shape and a.flags.c_contiguous and out.flags.c_contiguous)
            or (a.shape == shape and a.strides == out.strides)
            for a, m in zip(operands, modes)
        )
        if not flat:
            modes = ["a"] * len(operands)
        variant = _Variant(
            fn,
            tuple((a.dtype.name, m) for a, m in zip(operands, modes)),
            tuple((a.dtype.name, count) for a, count in zip(scalars, counts)),
            np.dtype(compute).name,
            dtype.name,
            flat,
        )
        return _Row(variant, [out, *operands, *scalars], shape)


def _encode(rows: list[_Row]) -> np.ndarray:
    """The ``int64`` array of ``rows``."""
    code = np.zeros((len(rows), _WIDTH), np.int64)
    for r, row in enumerate(rows):
        shape = row.shape
        padded = (1,) * (_NDIM - len(shape)) + tuple(shape)
        code[r, :_HEADER] = [_kernel(row.variant), row.variant.flat, math.prod(shape), *padded]
        for k, a in enumerate(row.slots):  # (the scalars' slots: an address only)
            start = _HEADER + _SLOT * k
            code[r, start] = _address(a)
            if k <= len(row.variant.operands):
                code[r, start + 1 : start + _SLOT] = _strides(a, shape)
    return code


@dataclass
class Lowered:
    """A plan as callables a replay runs in order (``checks`` first), and what they are."""

    checks: list[Callable[[], None]]
    runs: list[Callable[[], None]]
    tapes: int
    rows: int
    host_calls: list[str]
    #: the arrays of the rows' constants and scalars (their addresses are in the rows)
    constants: list[np.ndarray]
    #: per optimizer update, in order: the setter of its scalars
    scalar_setters: list[Callable[[tuple[float, ...]], None]]


def _tape_runner(rows: list[_Row]) -> Callable[[], None]:
    code = _encode(rows)
    run_tape = entry_point(kernels.run_tape, (code,))

    def run() -> None:
        run_tape(code)

    run.code = code  # (kept alive: the rows hold its addresses)
    return run


def lower(p: Plan, arrays: dict[int, np.ndarray], host: Callable[[Step], Callable[[], None]],
          retrace: type, targets: np.ndarray) -> Lowered:  # fmt: skip
    """The tape replay of ``p`` over the planned ``arrays``: loops in tapes, the other steps
    as Python calls of their compiled loops (products, updates, checks) or host calls;
    ``targets`` holds the counts of targets the checks find for the losses' divisors."""
    keep: list[np.ndarray] = []
    planner = _Rows(arrays, keep)
    checks: list[Callable[[], None]] = []
    runs: list[Callable[[], None]] = []
    pending: list[_Row] = []
    counts = {"tapes": 0, "rows": 0}
    host_calls: list[str] = []
    setters: list[Callable[[tuple[float, ...]], None]] = []

    def flush() -> None:
        if pending:
            runs.append(_tape_runner(list(pending)))
            counts["tapes"] += 1
            counts["rows"] += len(pending)
            pending.clear()

    for step in p.steps:
        if step.kind in ("view", "alias", "constant", "checked"):
            continue
        if step.kind == "loop":
            threaded = _threaded(step, arrays)
            row = None if threaded else planner.row(step)
            if row is not None:
                pending.append(row)
                continue
            if threaded:
                flush()
                runs.append(threaded)
                continue
        if step.kind == "check":
            check = _check if step.call.name == "check_targets" else _index_check
            checks.append(check(step, arrays, retrace, targets))
            continue
        flush()
        if step.kind == "matmul":
            runs.append(_matmul(step, arrays))
        elif step.kind in ("embedding", "embedding_backward"):
            runs.append(_embedding(step, arrays))
        elif step.kind == "sum":
            runs.append(_sum(step, arrays))
        elif step.kind in ("cross_entropy", "cross_entropy_backward"):
            runs.append(_cross_entropy(step, arrays, targets))
        elif step.kind == "update":
            run, set_scalars = _update(step, arrays)
            runs.append(run)
            setters.append(set_scalars)
        else:
            runs.append(host(step))
            host_calls.append(step.call.name)
    flush()
    return Lowered(checks, runs, counts["tapes"], counts["rows"], host_calls, keep, setters)


def _threaded(step: Step, arrays: dict[int, np.ndarray]) -> Callable[[], None] | None:
    """The eager kernel's threaded loop into the planned array, for an elementwise loop
    large enough for eager to run it threaded (a tape's kernels are serial); else None."""
    loop = step.call.elementwise
    out = arrays.get(step.out)
    if loop is None or out is None or out.size < loop.kernel.parallel_threshold:
        return None
    if not all(isinstance(a, Ref) for a in loop.operands) or out.dtype != loop.compute:
        return None
    operands = [arrays[a.index] for a in loop.operands]
    scalars = [s if isinstance(s, tuple) else loop.compute.type(s) for s in loop.scalars]
    shape, compute, run_kernel = out.shape, loop.compute, loop.kernel.run

    def run() -> None:
        args = [_operand(a, shape, compute) for a in operands]
        run_kernel(args + scalars, shape, compute, out)

    return run


#: numpy dtype -> the entry point of :func:`blas.product` for matrices of any layout.
_PRODUCTS: dict[np.dtype, Callable[..., bool]] = {}


def _product(dtype: np.dtype) -> Callable[..., bool]:
    call = _PRODUCTS.get(dtype)
    if call is None:
        strided = np.empty((2, 2), dtype)[:, ::2]  # (a sample typed with layout A)
        sample = (strided, strided, np.empty((1, 1), dtype), blas.THREADS)
        call = _PRODUCTS[dtype] = entry_point(blas.product, sample)
    return call


def _matmul(step: Step, arrays: dict[int, np.ndarray]) -> Callable[[], None]:
    """Eager's product (:func:`blas.product`: the BLAS threads by the product's work, then
    NumPy's gemm call) on the planned arrays; a stack of matrices times a matrix as one
    product of its rows, as eager folds it."""
    a, b = (arrays[t.index] for t in step.call.args[:2])
    out = arrays[step.out]
    if a.ndim > 2:
        a, out = a.reshape(-1, a.shape[-1]), out.reshape(-1, out.shape[-1])
    args = (a, b, out, blas.THREADS)
    call = _product(a.dtype)

    def run() -> None:
        if not call(*args):
            raise RuntimeError(
                f"pl.compile: gemm declined a product of shapes {a.shape} and {b.shape} that "
                f"the plan gave it (a bug of pylucid's compiler: run the step eagerly)"
            )

    return run


def _embedding(step: Step, arrays: dict[int, np.ndarray]) -> Callable[[], None]:
    """The embedding op's gather (``embedding``) or scatter-add (``embedding_backward``)
    kernel on the planned arrays, seen as ``(pre, rows, post)`` around the axis."""
    operand, index, axis = step.call.args[:3]
    source, out = arrays[operand.index], arrays[step.out]
    flat = arrays[index.index].reshape(-1)
    shape = out.shape if step.kind == "embedding_backward" else source.shape
    pre, rows, post = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    taken, whole = (pre, flat.size, post), (pre, rows, post)
    if step.kind == "embedding":
        args = (source.reshape(whole), flat, out.reshape(taken))
        call = entry_point(gather.take_rows, args)
    else:
        padding = step.call.args[3]
        skip = np.int64(-1 if padding is None else padding)
        args = (source.reshape(taken), flat, skip, out.reshape(whole))
        call = entry_point(gather.scatter_rows, args)

    def run() -> None:
        call(*args)

    return run


def _sum(step: Step, arrays: dict[int, np.ndarray]) -> Callable[[], None]:
    """The backend's sum (NumPy's pairwise sum in the dtype), into the planned array."""
    source, axes, keepdims, _ = step.call.args
    a, out = arrays[source.index], arrays[step.out]
    axes, dtype = tuple(axes), out.dtype

    def run() -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            np.add.reduce(a, axis=axes, dtype=dtype, keepdims=keepdims, out=out)

    return run


def _cross_entropy(step: Step, arrays: dict[int, np.ndarray],
                   targets: np.ndarray) -> Callable[[], None]:  # fmt: skip
    """The backend's loss loops on the planned arrays (a mean or a sum: the divisor is
    known, or the count a check wrote into ``targets`` at this replay), the per-row losses
    summed in float64 as the backend sums them."""
    backward = step.kind == "cross_entropy_backward"
    x, target = (arrays[t.index] for t in step.call.args[:2])
    ignore, smoothing, fixed = step.call.args[3:6] if backward else step.call.args[2:5]
    ignore, smoothing = np.int64(ignore), np.float64(smoothing)
    out = arrays[step.out]
    loop = cross_entropy_loops(x.shape, backward=backward)
    per_row = np.empty(x.shape[0])
    slot = step.slot

    def divisor() -> float:
        return float(targets[slot]) if slot >= 0 else fixed

    if backward:
        g = arrays[step.call.args[2].index]

        def run() -> None:
            by = divisor()
            per_row.fill(float(g.reshape(-1)[0]) / by if by else math.nan)
            loop(x, target, per_row, ignore, smoothing, out)

        return run

    def run() -> None:
        loop(x, target, ignore, smoothing, per_row)
        by = divisor()
        out[...] = float(np.add.reduce(per_row)) / by if by else math.nan

    return run


def _update(step: Step, arrays: dict[int, np.ndarray]) -> tuple[Callable[[], None], Callable]:
    """The update's loop on the planned arrays, and the setter of its scalars (called with
    the floats an optimizer's step collected: they are rounded to the compute dtype once,
    not at every replay)."""
    update = step.call.update
    compute = update.compute.type
    flats = [
        np.empty(0, update.compute) if r is None else _flat_view(arrays[r.index])
        for r in update.arrays
    ]
    arguments = flats + [compute(s) for s in update.scalars]
    loop = entry_point(update.kernel.loop(update.choices, flats[0].size),
                              tuple(arguments))  # fmt: skip
    gradient = arrays[update.arrays[1].index] if update.arrays[1] is not None else None
    if gradient is not None and not gradient.flags.c_contiguous:
        # (a Fortran-ordered gradient - a Linear weight's, accumulated in place - is read
        # through a C copy, taken at every replay as the eager update takes it)
        copy = np.empty(gradient.shape, gradient.dtype)
        arguments[1] = copy.reshape(-1)

        def run() -> None:
            np.copyto(copy, gradient)
            loop(*arguments)

    else:

        def run() -> None:
            loop(*arguments)

    def set_scalars(values: tuple[float, ...]) -> None:
        arguments[len(flats) :] = [compute(v) for v in values]

    return run, set_scalars


def _flat_view(a: np.ndarray) -> np.ndarray:
    """``a`` as a flat array sharing its memory (C-contiguous arrays only; the update of
    another, a gradient's, reads a copy)."""
    return a.reshape(-1) if a.flags.c_contiguous else np.empty(a.size, a.dtype)


def _index_check(step: Step, arrays: dict[int, np.ndarray], retrace: type,
                 targets: np.ndarray) -> Callable[[], None]:  # fmt: skip
    """The bounds check of an embedding's index, first in a replay: a position out of range
    abandons it (the eager step, run instead, raises the op's IndexError)."""
    index, low, high = step.call.args
    args = (arrays[index.index].reshape(-1), np.int64(low), np.int64(high))
    call = entry_point(gather.check_indices, args)

    def run() -> None:
        if call(*args) >= 0:
            raise retrace(INDEX_OUT_OF_RANGE)

    return run


def _check(step: Step, arrays: dict[int, np.ndarray], retrace: type,
           targets: np.ndarray) -> Callable[[], None]:  # fmt: skip
    """The targets' check, first in a replay: a target out of range abandons it (the eager
    step raises); the count of targets not ignored goes to ``targets`` where a loss divides
    by it, else must be the captured one."""
    target, classes, ignore = step.call.args
    values = arrays[target.index]
    expected = tuple(step.call.result)
    slot = step.slot
    if slot >= 0:

        def run() -> None:
            count, bad = check_targets(values, classes, ignore)
            if bad >= 0:
                raise retrace(TARGET_OUT_OF_RANGE)
            targets[slot] = count

        return run

    def run() -> None:
        if check_targets(values, classes, ignore) != expected:
            raise retrace(TARGETS_CHANGED)

    return run
