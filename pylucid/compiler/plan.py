"""Plan: what each recorded call becomes in a replay, and where each value lives.

A :class:`~pylucid.compiler.capture.Trace` lists primitive calls over numbered values. The
plan decides, per call, one of:

- ``view`` - a reshape, transpose or broadcast that shares its argument's memory: nothing
  runs; generated code takes the same view of the argument;
- ``alias`` - the call returned its argument (a cast to the same dtype): nothing runs;
- ``constant`` - ``full`` of a value nothing writes (lifted Python numbers, the seed of
  backward), or an array made from Python numbers alone (``arange``, the mask of ``tril``):
  computed once, inlined where it has one element;
- ``loop`` - an elementwise primitive, a cast, a copy (a broadcast one too), a fill or an
  in-place accumulation: a statement of a fused loop (:attr:`Step.group`); consecutive
  loops over one shape whose operands are either computed at the same element by the group
  or come from outside it share one loop nest, and a value nobody outside its group reads
  is never stored;
- ``matmul`` (float matrices, or a C-contiguous stack of them times a matrix, folded into
  one product as eager folds it: eager's call of NumPy's BLAS, :func:`pylucid.kernels.blas.
  product`), ``sum`` (float, accumulated in float64), ``update`` (a fused optimizer loop,
  its scalars read again at each replay), ``cross_entropy`` and its backward (the
  backend's loss loops), ``embedding`` and its backward (the embedding op's kernels:
  :mod:`pylucid.kernels.gather`), ``check`` (run first in a replay: the targets' check -
  where its count of targets is a mean's divisor, a replay reads it afresh; where the
  captured step depends on it otherwise, a replay whose targets give another answer is
  abandoned before it changes anything, and captured again - or the bounds check of an
  embedding's index, a replay with a position out of range abandoned likewise, so that the
  eager step raises), ``checked`` (the bounds check of an index that is a constant of the
  trace, ``arange``'s positions: its answer cannot change, nothing runs);
- ``host`` - anything else: the backend's own primitive, called from Python with the
  planned arrays, its result copied into the value's place (a graph break).

Values that are computed get a place in one arena per dtype (a flat array, allocated once
and reused by every replay); inputs and random draws too (copied in at each replay). Places
are reused by liveness: a value's memory goes to another once the last step that uses it (or
a view of it) has run, never to one the same step writes; the values that escape a replay
(its outputs, the gradients it leaves) have places of their own. Each place starts at a
multiple of :data:`ALIGNMENT` bytes. The tensors a step reads by identity (parameters,
optimizer state, gradients accumulated into) are passed to the compiled code as they are.
"""

from __future__ import annotations

import bisect
import gc
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pylucid.compiler.capture import IN_PLACE, Call, CaptureError, Ref, Trace
from pylucid.kernels import blas
from pylucid.ops.wrapping import is_lifted_number
from pylucid.tensor import Tensor

__all__ = ["ALIGNMENT", "Plan", "Step", "fortran_place", "owning_tensor", "plan"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_LOOP_DTYPES = (*_FLOATS, np.dtype(np.bool_), *_INDEX_DTYPES)
_VIEWS = ("reshape", "transpose", "broadcast_to")
#: Primitives that copy their argument (converted, or broadcast to the output's shape):
#: each a loop statement reading the argument at the output's element.
_COPIES = ("cast", "clone", "broadcast_copy")


@dataclass
class Step:
    """One call's part of the replay.

    Attributes
    ----------
    call : Call
        The recorded call.
    kind : str
        ``view``, ``alias``, ``constant``, ``loop``, ``matmul``, ``sum``, ``update``,
        ``cross_entropy``, ``cross_entropy_backward``, ``embedding``,
        ``embedding_backward``, ``check``, ``checked`` or ``host``.
    out : int or None
        The value the step computes (for ``loop``: the value it writes).
    group : int
        For loops: the fused loop nest it belongs to.
    slot : int
        For a targets' check whose count is a mean's divisor: the place of that count in
        the replay's vector of counts, written by the check at each replay; for a
        cross-entropy dividing by it: the place it reads (-1: a divisor fixed at capture).
    """

    call: Call
    kind: str
    out: int | None = None
    group: int = -1
    slot: int = -1


@dataclass
class Plan:
    """The steps of a trace and the places of its values.

    Attributes
    ----------
    steps : list of Step
    kinds : dict
        value -> ``input``, ``owned``, ``draw``, ``computed``, ``view``, ``constant``.
    views : dict
        value -> (base value, primitive name, its non-array arguments).
    places : dict
        value -> (dtype, offset, shape, transposed) in the arenas; ``transposed``: the
        place is a Fortran-ordered matrix, as eager's array was (:func:`fortran_place`).
    arena_sizes : dict
        dtype -> elements.
    stored : set of int
        The computed values written to memory (the others live in registers of a loop).
    constants : dict
        value -> the array of a constant (a copy taken at capture).
    """

    trace: Trace
    steps: list[Step] = field(default_factory=list)
    kinds: dict[int, str] = field(default_factory=dict)
    views: dict[int, tuple[int, str, tuple]] = field(default_factory=dict)
    places: dict[int, tuple[np.dtype, int, tuple[int, ...], bool]] = field(default_factory=dict)
    arena_sizes: dict[np.dtype, int] = field(default_factory=dict)
    stored: set[int] = field(default_factory=set)
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    escaping: set[int] = field(default_factory=set)
    written: set[int] = field(default_factory=set)
    #: value -> its rank in order of first appearance (inputs first): the numbering of the
    #: generated code and of the arenas, the same for the same graph whatever ids the
    #: capture gave its arrays
    rank: dict[int, int] = field(default_factory=dict)
    #: how many counts of targets a replay computes (see :attr:`Step.slot`)
    count_slots: int = 0

    def array(self, index: int) -> np.ndarray:
        """The array a value had at capture."""
        return self.trace.arrays[index]


def owning_tensor(array: Any) -> Tensor | None:
    """The live tensor whose storage ``array`` is, if any (found through the garbage
    collector's referrers: once per capture, for the arrays no recorded call made)."""
    for referrer in gc.get_referrers(array):
        if isinstance(referrer, Tensor) and referrer._storage is array:
            return referrer
    return None


def _index_only(trace: Trace, index: int) -> bool:
    """Whether an array no recorded call made is read only as an index of indexing
    primitives (their index and mesh arguments): the arrays that ``x[[2, 0], ...]`` makes
    from Python lists, constants of the trace as Python numbers are."""
    readers = [call for call in trace.calls if index in _refs(call.args)]
    return bool(readers) and all(
        call.name.startswith(("getitem", "setitem"))
        and index not in _refs(call.args[:1] + call.args[3:])
        for call in readers
    )


def _first_reader(trace: Trace, index: int) -> str:
    for call in trace.calls:
        if index in _refs(call.args):
            return call.name
    return "the step"


def importable(fn: Callable) -> bool:
    """Whether generated code can import ``fn`` by its module and name."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    return module is not None and getattr(module, fn.__name__, None) is fn


def _refs(token: Any) -> list[int]:
    if isinstance(token, Ref):
        return [token.index]
    if isinstance(token, (list, tuple)):
        return [i for t in token for i in _refs(t)]
    return []


def _appearances(call: Call) -> list[int]:
    """The values of a call in the order they appear: arguments, loop operands, result."""
    found = _refs(call.args)
    if call.elementwise is not None:
        found += _refs(call.elementwise.operands)
    if call.update is not None:
        found += _refs(call.update.arrays)
    return found + _refs(call.result)


def _written(call: Call) -> list[int]:
    """The values a call changes in place."""
    if call.name in IN_PLACE and call.args and isinstance(call.args[0], Ref):
        return [call.args[0].index]
    if call.update is not None:  # (param, grad, *states): all but the gradient
        return [r.index for i, r in enumerate(call.update.arrays) if r is not None and i != 1]
    if call.name.endswith("_update") or call.name == "scale":
        return _refs(call.args)
    return []


def _kind(p: Plan, call: Call) -> tuple[str, int | None]:
    """What a call becomes (see the module's docstring) and the value it computes."""
    result = call.result
    arrays = p.trace.arrays
    if isinstance(result, Ref):
        out = result.index
        if out in _refs(call.args):
            if call.name == "accumulate" and _loopable_array(arrays[out]):
                return "loop", out
            return ("alias", out) if call.name not in IN_PLACE else ("host", None)
        if call.name in _VIEWS and np.may_share_memory(arrays[out], arrays[call.args[0].index]):
            return "view", out
        if call.name in ("full", "from_numpy") and out not in p.written:
            return "constant", out
        if not _loopable_array(arrays[out]):
            return "host", out
        loop = call.elementwise
        if loop is not None and loop.compute in _LOOP_DTYPES and importable(loop.fn):
            return "loop", out
        if call.name in _COPIES and _loopable_array(arrays[call.args[0].index]):
            return "loop", out
        if call.name == "full":  # written in place, or a step's output: filled each time
            return "loop", out
        if call.name == "matmul" and _matmul_fits(p, call):
            return "matmul", out
        if call.name in ("embedding", "embedding_backward") and _embedding_fits(p, call):
            return call.name, out
        if call.name == "sum" and arrays[out].dtype in _FLOATS:
            return "sum", out
        if call.name in ("cross_entropy", "cross_entropy_backward") and _cross_entropy_fits(
            arrays, call
        ):
            return call.name, out
        return "host", out
    if call.name.endswith("_update"):
        update = call.update
        if update is None or any(
            r is not None and p.kinds.get(r.index) == "view" for r in update.arrays
        ):
            raise CaptureError(
                f"pl.compile: the optimizer update {call.name} runs on copies here (strided "
                f"or half-precision parameters, or a gradient that is a view), which compiled "
                f"steps do not support; run the step eagerly"
            )
        return "update", None
    if call.name == "check_targets" and _int64_c(arrays, call.args[0]):
        if p.kinds.get(_root(p, call.args[0].index)) == "input":  # (run first: no effect)
            return "check", None
    if call.name == "check_indices" and _planned_order(p, call.args[0].index) == "C":
        root = _root(p, call.args[0].index)
        if p.kinds.get(root) == "constant":
            return "checked", None
        if p.kinds.get(root) == "input" or (p.kinds.get(root) == "owned" and root not in p.written):
            return "check", None  # (the values at the replay's start: run first)
    return "host", None


def _int64_c(arrays: list[np.ndarray], token: Any) -> bool:
    return isinstance(token, Ref) and arrays[token.index].dtype == np.int64 and arrays[
        token.index
    ].flags.c_contiguous


def _cross_entropy_fits(arrays: list[np.ndarray], call: Call) -> bool:
    """A mean or sum cross-entropy (its divisor given) of C-contiguous float rows and int64
    targets, which generated code runs with the backend's own loss loops."""
    x, target = call.args[0], call.args[1]
    divisor = call.args[5 if call.name == "cross_entropy_backward" else 4]
    return (
        divisor is not None
        and isinstance(x, Ref)
        and arrays[x.index].dtype in _FLOATS
        and arrays[x.index].ndim == 2
        and arrays[x.index].flags.c_contiguous
        and _int64_c(arrays, target)
    )


def _loopable_array(a: np.ndarray) -> bool:
    return a.dtype in _LOOP_DTYPES


def _order(array: np.ndarray) -> str:
    return "C" if array.flags.c_contiguous else "F" if array.flags.f_contiguous else ""


def fortran_place(array: np.ndarray) -> bool:
    """Whether a value's place in the arenas is a Fortran-ordered matrix: where eager's
    array was one (a gradient that is the transpose of a product, and the sums of such
    gradients). Elementwise loops over it and its operands, laid out alike, then run in
    memory order - in C order, reading a transposed operand strides across rows (a
    (1024, 256) sum took 0.48 ms instead of 0.02)."""
    return (
        array.ndim == 2
        and min(array.shape) > 1
        and array.flags.f_contiguous
        and not array.flags.c_contiguous
    )


def _planned_order(p: Plan, index: int) -> str:
    """``"C"`` or ``"F"`` where a value's array in a replay is C- or Fortran-contiguous,
    ``""`` where it is neither: the views the replay takes (:class:`~pylucid.compiler.
    program.Program`) taken of a stand-in of their base - an owned array itself, else an
    array of the value's shape with a place of its own (C-ordered, as an arena's slice or a
    constant's copy is, or Fortran-ordered where :func:`fortran_place` says so; ``np.empty``
    touches no memory)."""
    chain = []
    while index in p.views:
        chain.append(p.views[index])
        index = p.views[index][0]
    array = p.array(index)
    if p.kinds.get(index) == "owned":
        stand_in = array
    elif fortran_place(array):
        stand_in = np.empty(array.shape[::-1], array.dtype).T
    else:
        stand_in = np.empty(array.shape, array.dtype)
    for _, primitive, args in reversed(chain):
        if primitive == "reshape":
            stand_in = stand_in.reshape(args[0])
        elif primitive == "transpose":
            stand_in = np.transpose(stand_in, args[0])
        else:
            stand_in = np.broadcast_to(stand_in, args[0])
    return _order(stand_in)


def _matmul_fits(p: Plan, call: Call) -> bool:
    """Whether a product runs as eager's :func:`~pylucid.kernels.blas.gemm` call, which
    gemm takes (so that compiled code needs no other path): float matrices of one dtype,
    every size above 1, each laid out in the replay as at capture (C- or F-contiguous: the
    same transpose flags), or a stack of matrices C-ordered in the replay times a matrix
    (eager folds its rows into one product, of a C-ordered view or copy); not a matrix
    times its own transpose (NumPy's ``syrk``); where NumPy's OpenBLAS was found."""
    if not blas.AVAILABLE or not all(isinstance(t, Ref) for t in call.args[:2]):
        return False
    first, second = (t.index for t in call.args[:2])
    a, b = p.array(first), p.array(second)
    if b.ndim != 2 or a.ndim < 2 or a.dtype != b.dtype or a.dtype not in _FLOATS:
        return False
    if min(math.prod(a.shape[:-1]), a.shape[-1], b.shape[1]) <= 1:
        return False
    if _root(p, first) == _root(p, second) or a.ctypes.data == b.ctypes.data:
        return False
    a_fits = _planned_order(p, first) == ("C" if a.ndim > 2 else _order(a) or "-")
    return a_fits and _planned_order(p, second) == (_order(b) or "-")


def _embedding_fits(p: Plan, call: Call) -> bool:
    """Whether the embedding op's forward or backward runs its kernel on the planned arrays:
    an operand of a loop dtype and an int32 or int64 index, both C-contiguous in the replay
    (the kernel reads them as ``(pre, rows, post)``)."""
    operand, index = call.args[:2]
    return (
        isinstance(operand, Ref)
        and isinstance(index, Ref)
        and p.array(operand.index).dtype in _LOOP_DTYPES
        and p.array(index.index).dtype in _INDEX_DTYPES
        and _planned_order(p, operand.index) == "C"
        and _planned_order(p, index.index) == "C"
    )


def plan(trace: Trace, fuse: bool = True) -> Plan:
    """The :class:`Plan` of ``trace``; ``fuse=False`` gives each loop a nest of its own
    (every loop's value stored: a tape's plan)."""
    p = Plan(trace)
    halves = sorted(
        {str(a.dtype) for a in trace.arrays if a.dtype.kind == "V" or a.dtype == np.float16}
    )
    if halves:
        raise CaptureError(
            f"pl.compile: the step computes in {' and '.join(halves)} (autocast, or half "
            f"tensors), which compiled steps do not support yet; run it eagerly (or "
            f"pl.compile(fn, fallback='eager'))"
        )
    p.written = {v for call in trace.calls for v in _written(call)}
    for index in (*trace.inputs, *(i for call in trace.calls for i in _appearances(call))):
        p.rank.setdefault(index, len(p.rank))
    for index in range(len(trace.arrays)):  # (arrays no call used: outputs, gradients)
        p.rank.setdefault(index, len(p.rank))
    inputs = set(trace.inputs)
    for index in range(len(trace.arrays)):
        if index in inputs:
            p.kinds[index] = "input"
        elif index in trace.draws:
            p.kinds[index] = "draw"
        elif index in trace.producers:
            p.kinds[index] = "computed"
        elif index in trace.owners or index in p.written:
            p.kinds[index] = "owned"
        elif _index_only(trace, index) or is_lifted_number(trace.arrays[index]):
            p.kinds[index] = "constant"  # (an index made from a Python list, or a number)
            p.constants[index] = np.array(trace.arrays[index], copy=True)
        else:  # an array no recorded call made: a tensor's storage, read by identity
            owner = owning_tensor(trace.arrays[index])
            if owner is None:
                raise CaptureError(
                    f"pl.compile: {_first_reader(trace, index)} read an array (shape "
                    f"{trace.arrays[index].shape}) that no recorded primitive made and no "
                    f"tensor holds: a copy made outside the backend, whose values a replay "
                    f"would not compute again; run this step eagerly"
                )
            trace.owners[index] = owner
            p.kinds[index] = "owned"
    for call in trace.calls:
        kind, out = _kind(p, call)
        step = Step(call, kind, out)
        p.steps.append(step)
        if kind == "view":
            base = call.args[0].index
            p.kinds[out] = "view"
            p.views[out] = (base, call.name, tuple(a for a in call.args[1:]))
        elif kind == "alias":
            pass
        elif kind == "constant":
            p.kinds[out] = "constant"
            p.constants[out] = np.array(trace.arrays[out], copy=True)
    _link_divisors(p)
    _group(p, fuse)
    _store(p)
    return p


def _link_divisors(p: Plan) -> None:
    """Give each cross-entropy whose divisor is the count of targets a check found (a mean
    over the targets that are not ``ignore_index``) the check's count at each replay, so
    that another count of ignored targets replays instead of capturing again. The link is
    made where the divisor equals the count and the count is not 1 (where a sum's divisor
    1 would be the same number, the divisor stays fixed and another count retraces); every
    check of the same targets (the forward's, the backward's) then writes the count."""
    checks: dict[tuple, list[Step]] = {}
    for step in p.steps:
        if step.kind == "check" and step.call.name == "check_targets":
            target, classes, ignore = step.call.args
            checks.setdefault((_root(p, target.index), ignore), []).append(step)
    for step in p.steps:
        if step.kind not in ("cross_entropy", "cross_entropy_backward"):
            continue
        args = step.call.args
        ignore, divisor = args[3:6:2] if step.kind == "cross_entropy_backward" else args[2:5:2]
        group = checks.get((_root(p, args[1].index), ignore), [])
        answers = {tuple(check.call.result) for check in group}
        if len(answers) != 1:
            continue
        count, bad = answers.pop()
        if bad < 0 and count != 1 and divisor == float(count):
            if group[0].slot < 0:
                for check in group:
                    check.slot = p.count_slots
                p.count_slots += 1
            step.slot = group[0].slot


def _group(p: Plan, fuse: bool) -> None:
    """Number the fused loop nests: a loop joins the open nest if it has the nest's shape,
    writes no value in place and reads the nest's own values only at its shape (and
    ``fuse``)."""
    group, shape, members = -1, None, set()
    for step in p.steps:
        if step.kind in ("view", "alias", "constant", "checked"):
            continue
        if step.kind != "loop":
            shape = None
            continue
        out_shape = p.array(step.out).shape
        in_place = step.call.name == "accumulate"
        operands = _loop_operands(step)
        fits = (
            fuse
            and shape is not None
            and not in_place
            and out_shape == shape
            and all(p.array(v).shape == shape for v in operands if v in members)
            and all(v in members or _root(p, v) not in members for v in operands)
        )
        if not fits:
            group += 1
            shape, members = out_shape, set()
        step.group = group
        members.add(step.out)
        if in_place:
            shape = None


def _loop_operands(step: Step) -> list[int]:
    call = step.call
    if call.elementwise is not None:
        return _refs(call.elementwise.operands)
    if call.name == "full":
        return []
    return _refs(call.args[:2] if call.name == "accumulate" else call.args[:1])


def _store(p: Plan) -> None:
    """Which computed values need memory, and their places in the arenas."""
    trace = p.trace
    group_of = {s.out: s.group for s in p.steps if s.kind == "loop" and s.out is not None}
    readers: dict[int, set] = {}
    for step in p.steps:
        if step.kind in ("alias", "constant", "checked"):
            continue
        reads = _loop_operands(step) if step.kind == "loop" else _refs(step.call.args)
        where = ("g", step.group) if step.kind == "loop" else ("s", id(step))
        for v in reads:
            readers.setdefault(_root(p, v), set()).add(where)
    escaping = set()
    for track in trace.grads.values():  # (the gradients a step leaves: read after it)
        if isinstance(track.state, Tensor):
            index = trace.index_of(track.state._storage)
            if index is not None:
                escaping.add(_root(p, index))
    escaping.update(_root(p, v) for v in trace.outputs if v is not None)
    p.escaping = escaping
    for index, kind in p.kinds.items():
        if kind in ("input", "draw"):
            p.stored.add(index)
        elif kind == "computed":
            own = group_of.get(index)
            outside = [w for w in readers.get(index, ()) if w != ("g", own)]
            if own is None or outside or index in escaping or index in p.written:
                p.stored.add(index)
    _place(p, _lifetimes(p))


#: Bytes every place in an arena starts at a multiple of (a cache line: no vector load of a
#: loop straddles two lines at a place's start); the arenas start so aligned too
#: (:func:`pylucid.compiler.program.aligned_arena`).
ALIGNMENT = 64
#: The lifetime's end of the values that escape a replay: after every step.
_FOREVER = sys.maxsize


def _run_times(p: Plan) -> list[int | None]:
    """Per step, when a replay runs it: the checks first (-1: before anything else), the
    others in order, the loops of one fused nest at one time (they run together, element by
    element); None for the steps nothing runs for (views, aliases, constants)."""
    times: list[int | None] = []
    time, nest = -1, None
    for step in p.steps:
        if step.kind in ("view", "alias", "constant", "checked"):
            times.append(None)
        elif step.kind == "check":
            times.append(-1)
        elif step.kind == "loop" and step.group == nest:
            times.append(time)
        else:
            time += 1
            nest = step.group if step.kind == "loop" else None
            times.append(time)
    return times


def _lifetimes(p: Plan) -> dict[int, tuple[int, int]]:
    """Per stored value, the first and last times (:func:`_run_times`) a replay uses its
    memory: the steps that write or read it or a view of it (an in-place write into it
    too). Inputs and random draws start at -1 (copied in before any step runs); the values
    that escape a replay (outputs, gradients it leaves: the caller holds them after it, and
    a later replay of another trace may read them) live through the whole replay, so no
    other value ever has their memory."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, time in zip(p.steps, _run_times(p)):
        if time is None:
            continue
        for index in _appearances(step.call):
            root = _root(p, index)
            first[root] = min(first.get(root, time), time)
            last[root] = max(last.get(root, time), time)
    lifetimes = {}
    for index in p.stored:
        start = -1 if p.kinds[index] in ("input", "draw") else first.get(index, -1)
        end = _FOREVER if index in p.escaping else last.get(index, start)
        lifetimes[index] = (start, end)
    return lifetimes


class _Arena:
    """The offsets of one arena's places, reused by liveness: a place is taken from the
    free block that fits it most tightly, else at the arena's end (growing a free block
    there); a place given back joins its free neighbours. Sizes are in elements, multiples
    of the alignment's, so that every offset is aligned."""

    def __init__(self) -> None:
        self.size = 0
        #: (offset, size) of the free blocks, by offset
        self.free: list[tuple[int, int]] = []

    def take(self, size: int) -> int:
        """The offset of a new place of ``size`` elements."""
        fitting = [i for i, (_, free) in enumerate(self.free) if free >= size]
        if fitting:
            best = min(fitting, key=lambda i: self.free[i][1])
            offset, free = self.free[best]
            if free == size:
                del self.free[best]
            else:
                self.free[best] = (offset + size, free - size)
            return offset
        if self.free and sum(self.free[-1]) == self.size:  # (a free block at the end grows)
            offset = self.free.pop()[0]
        else:
            offset = self.size
        self.size = offset + size
        return offset

    def give(self, offset: int, size: int) -> None:
        """Free the place at ``offset`` (of ``size`` elements) for the values after it."""
        at = bisect.bisect(self.free, (offset, size))
        if at < len(self.free) and offset + size == self.free[at][0]:
            size += self.free.pop(at)[1]
        if at > 0 and sum(self.free[at - 1]) == offset:
            offset, size = self.free[at - 1][0], self.free[at - 1][1] + size
            at -= 1
            del self.free[at]
        self.free.insert(at, (offset, size))


def _place(p: Plan, lifetimes: dict[int, tuple[int, int]]) -> None:
    """The stored values' places in the arenas (one per dtype), by liveness: in the order
    a replay runs, the values a step starts using take their places before the places of
    the values whose last use it is are given back, so that a step never writes a value
    over one it reads; two values share memory only where their lifetimes do not meet."""
    arenas: dict[np.dtype, _Arena] = {}
    events: list[tuple[int, int, int]] = []  # (time, 0 take / 1 give back, rank)
    for index, (start, end) in lifetimes.items():
        events.append((start, 0, p.rank[index]))
        if end != _FOREVER:
            events.append((end, 1, p.rank[index]))
    by_rank = {p.rank[index]: index for index in lifetimes}
    for _, give_back, rank in sorted(events):
        index = by_rank[rank]
        array = p.array(index)
        arena = arenas.setdefault(array.dtype, _Arena())
        if give_back:
            arena.give(p.places[index][1], _place_size(array))
            continue
        offset = arena.take(_place_size(array))
        p.places[index] = (array.dtype, offset, array.shape, fortran_place(array))
    p.arena_sizes.update((dtype, arena.size) for dtype, arena in arenas.items())


def _place_size(array: np.ndarray) -> int:
    """The elements of a value's place: at least one (a 0-d or empty value's too), rounded
    up to a multiple of :data:`ALIGNMENT` bytes."""
    unit = max(1, ALIGNMENT // array.dtype.itemsize)
    return -(-max(1, math.prod(array.shape)) // unit) * unit


def _root(p: Plan, index: int) -> int:
    """The value a view is a view of (itself for the others)."""
    while index in p.views:
        index = p.views[index][0]
    return index
