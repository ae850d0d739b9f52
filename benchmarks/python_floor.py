"""The least a define-by-run op costs in Python, against PyTorch eager, on the bench's tiny
chain ``y = log2(y * 3 + 2)`` x50 (one float32 element).

The "floor" op does only what any such library must:
- a plan lookup by (kernel, dtype, shape);
- an output allocation;
- a call of a compiled Numba loop through its entry point (no type resolution);
- a result object;
- with grad, a node holding edges and saved values.

Its backward walks the chain and calls one compiled kernel per node. It has no checks,
promotion, broadcasting, hooks, devices or views, so it is a lower bound: pylucid's
per-op cost above it is the price of its generality, not of Python.

    python benchmarks/python_floor.py     # needs torch for the comparison column
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numba
import numpy as np

F32 = np.dtype(np.float32)


@numba.njit(cache=True)
def _mul(x, y, out):  # noqa: ANN001, ANN202
    for i in range(out.size):
        out[i] = x * y


@numba.njit(cache=True)
def _add(x, y, out):  # noqa: ANN001, ANN202
    for i in range(out.size):
        out[i] = x + y


@numba.njit(cache=True)
def _log2(x, out):  # noqa: ANN001, ANN202
    for i in range(out.size):
        out[i] = np.log2(x)


def _entry_point(dispatcher: numba.core.registry.CPUDispatcher, *example: object) -> Callable:
    """The compiled function of ``dispatcher`` for ``example``'s types, called directly."""
    dispatcher(*example)
    return next(iter(dispatcher.overloads.values())).entry_point


_SCALAR, _OUT = np.float32(1.0), np.empty(1, F32)
MUL = _entry_point(_mul, _SCALAR, _SCALAR, _OUT)
ADD = _entry_point(_add, _SCALAR, _SCALAR, _OUT)
LOG2 = _entry_point(_log2, _SCALAR, _OUT)


class Plan:
    __slots__ = ("shape", "dtype")


class Value:
    __slots__ = ("storage", "dtype", "shape", "grad_fn", "requires_grad", "version")


class Node:
    __slots__ = ("kernel", "saved", "edges", "needs")


_PLANS: dict[tuple, Plan] = {}


def _plan(kernel: Callable, a: Value) -> Plan:
    key = (kernel, a.dtype, a.shape)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = Plan()
        plan.shape, plan.dtype = a.shape, F32
    return plan


def _value(storage: np.ndarray, plan: Plan, grad_fn: Node | None) -> Value:
    v = Value()
    v.storage, v.dtype, v.shape = storage, plan.dtype, plan.shape
    v.grad_fn, v.requires_grad, v.version = grad_fn, grad_fn is not None, 0
    return v


def _node(kernel: Callable, saved: tuple, a: Value) -> Node:
    node = Node()
    node.kernel, node.saved, node.edges, node.needs = kernel, saved, (a.grad_fn,), (True,)
    return node


def binary(kernel: Callable, a: Value, b: Value, record: bool) -> Value:
    """``kernel(a, b)`` with a one-element ``a`` and a constant ``b``, as the chain has."""
    plan = _plan(kernel, a)
    out = np.empty(plan.shape, plan.dtype)
    kernel(a.storage[0], b.storage[0], out)
    node = _node(kernel, (a.storage, b.storage), a) if record and a.requires_grad else None
    return _value(out, plan, node)


def unary(kernel: Callable, a: Value, record: bool) -> Value:
    plan = _plan(kernel, a)
    out = np.empty(plan.shape, plan.dtype)
    kernel(a.storage[0], out)
    node = _node(kernel, (a.storage,), a) if record and a.requires_grad else None
    return _value(out, plan, node)


def _constant(number: float) -> Value:
    plan = Plan()
    plan.shape, plan.dtype = (1,), F32
    return _value(np.array([number], F32), plan, None)


THREE, TWO = _constant(3.0), _constant(2.0)


def floor_chain(backward: bool) -> None:
    x = _constant(0.5)
    x.requires_grad = backward
    y = x
    for _ in range(50):
        y = unary(LOG2, binary(ADD, binary(MUL, y, THREE, backward), TWO, backward), backward)
    if not backward:
        return
    g, node = np.ones(1, F32), y.grad_fn
    while node is not None:  # one compiled kernel per node, as a fused backward
        out = np.empty(1, F32)
        if node.kernel is LOG2:
            MUL(g[0], node.saved[0][0], out)  # (the cost of g / (x ln 2))
        elif node.kernel is MUL:
            MUL(g[0], np.float32(3.0), out)
        else:
            out = g
        g, node = out, node.edges[0]


def torch_chain(backward: bool) -> None:
    import torch

    x = torch.tensor([0.5], requires_grad=backward)
    y = x
    for _ in range(50):
        y = torch.log2(y * 3.0 + 2.0)
    if backward:
        y.sum().backward()


def _per_op(chain: Callable[[bool], None], backward: bool, repeats: int = 30) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        chain(backward)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) / 150 * 1e6


def main() -> None:
    chains: dict[str, Callable[[bool], None]] = {"floor": floor_chain}
    try:
        import torch

        torch.set_num_threads(2)
        chains["torch"] = torch_chain
    except ImportError:
        print("torch is not installed: the floor alone")
    for chain in chains.values():
        for _ in range(20):
            chain(False)
            chain(True)
    best: dict[str, float] = {}
    for _ in range(15):  # interleaved rounds; the minimum of the medians
        for name, chain in chains.items():
            for backward in (False, True):
                key = f"{name} {'forward + backward' if backward else 'forward'}"
                best[key] = min(best.get(key, np.inf), _per_op(chain, backward))
    for key, value in best.items():
        print(f"{key:28s} {value:6.2f} us per op")


if __name__ == "__main__":
    main()
