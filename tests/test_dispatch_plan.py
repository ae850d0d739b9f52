"""The per-op fast path: dispatch plans and lifted numbers are cached, and a cached decision
is never applied where a fresh one would differ (autocast, number types, parameter types,
signed zeros, grad, inference and anomaly mode, the thread), nor kept for a call that
failed."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import pylucid as pl
from pylucid.ops import base, wrapping


def test_a_plan_depends_on_the_autocast_state(device) -> None:
    a = pl.ones(2, 2, device=device)
    assert (a @ a).dtype is pl.float32
    with pl.autocast(dtype=pl.bfloat16):
        assert (a @ a).dtype is pl.bfloat16
    assert (a @ a).dtype is pl.float32


def test_a_plan_depends_on_grad_inference_and_anomaly_mode(device) -> None:
    w = pl.tensor([2.0], device=device, requires_grad=True)
    for _ in range(2):  # each mode's plan made, then taken from the cache
        assert (w * 3.0).grad_fn is not None
        with pl.no_grad():
            assert (w * 3.0).grad_fn is None
        with pl.inference_mode():
            y = w * 3.0
            assert y.grad_fn is None and y._is_inference
        assert not (w * 3.0)._is_inference
        with pl.graph.detect_anomaly():
            assert (w * 3.0).grad_fn.creation_site is not None
        assert not hasattr((w * 3.0).grad_fn, "creation_site")
        with pl.set_grad_enabled(False):
            assert (w * 3.0).grad_fn is None
        assert (w * 3.0).grad_fn is not None


def test_modes_are_per_thread_and_restored(device) -> None:
    """A thread inside no_grad and autocast blocks leaves another thread's ops recording in
    float32, and every block restores the modes it found."""
    w = pl.ones(2, 2, device=device, requires_grad=True)
    before = pl.modes.state.modes
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def worker() -> None:
        with pl.no_grad(), pl.autocast(dtype=pl.bfloat16):
            y = w @ w
            seen["worker"] = (y.grad_fn, y.dtype)
            inside.set()
            release.wait(10)
        seen["after"] = pl.modes.state.modes

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(10)
    y = w @ w  # while the worker is inside its blocks
    release.set()
    thread.join()
    assert y.grad_fn is not None and y.dtype is pl.float32
    assert seen["worker"] == (None, pl.bfloat16)
    assert seen["after"] is before and pl.modes.state.modes is before


def test_a_plan_depends_on_the_types_of_numbers_and_parameters(device) -> None:
    ints = pl.tensor([1, 2], device=device)
    assert (ints * 2).dtype is pl.int64 and (ints * 2.0).dtype is pl.float32
    assert (ints**2).dtype is pl.int64 and (ints**2.0).dtype is pl.float32
    assert (ints * 2).tolist() == [2, 4]  # the int plan again, after the float one


def test_a_failed_call_is_not_cached(device) -> None:
    a, b = pl.ones(2, device=device), pl.ones(3, device=device)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"add: shapes \(2,\) and \(3,\) cannot be broadcast"):
            a + b
    assert (a + a).tolist() == [2.0, 2.0]


def test_the_plan_cache_stays_bounded() -> None:
    for n in range(base.PLAN_CACHE_SIZE + 10):
        pl.zeros(n + 1) + 1.0
    assert len(base._PLANS) <= base.PLAN_CACHE_SIZE


def test_signed_zeros_are_not_conflated(device) -> None:
    x = pl.tensor([1.0], device=device)
    assert math.copysign(1.0, (x * -0.0).item()) == -1.0
    assert math.copysign(1.0, (x * 0.0).item()) == 1.0
    assert math.copysign(1.0, (x * -0.0).item()) == -1.0


def test_a_number_lifted_under_inference_mode_can_be_saved_later(device) -> None:
    x = pl.tensor([2.0], device=device)
    with pl.inference_mode():
        x * 3.5
    w = pl.tensor([2.0], device=device, requires_grad=True)
    (w * 3.5).sum().backward()  # mul saves the lifted 3.5: it must not be an inference tensor
    assert w.grad.tolist() == [3.5]


def test_lifted_numbers_are_reused_and_their_values_exact(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device)
    first = wrapping.lift("mul", "b", 3.25, x)
    assert wrapping.lift("mul", "b", 3.25, x) is first
    wide = pl.tensor([1.0], dtype=pl.float64, device=device)
    assert wrapping.lift("mul", "b", 3.25, wide) is not first  # another dtype: another number
    np.testing.assert_array_equal((x * 3.25).numpy(), np.array([3.25, 6.5], np.float32))


def test_broadcast_shapes_equal_shapes_and_numpy_cases():
    """Equal shapes return at once (without np.broadcast_shapes); the rest as NumPy's."""
    from pylucid.ops.base import broadcast_shapes

    assert broadcast_shapes("op") == ()
    assert broadcast_shapes("op", (2, 3)) == (2, 3)
    assert broadcast_shapes("op", (), ()) == ()
    assert broadcast_shapes("op", [2, 3], (2, 3)) == (2, 3)
    assert broadcast_shapes("op", (2, 1), (1, 3), (2, 3)) == (2, 3)
    with pytest.raises(ValueError, match=r"op: shapes \(2,\) and \(3,\) cannot be broadcast"):
        broadcast_shapes("op", (2,), (3,))
