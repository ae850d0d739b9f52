"""In-place ops on aliases of one memory: views, detached tensors and their bases.

The class of defect: an in-place change that does not reach every tensor sharing the memory -
its values (mlx arrays are immutable, so every alias is recomputed) or its graph (a view's
base must take the view's history, as PyTorch's CopySlices). Each program runs on both
backends with the values and gradients PyTorch gives, written out; where torch is installed
the same programs also run in torch and the results are compared.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pylucid as pl
from pylucid.graph.node import InplaceModifiedError
from tests.conftest import TORCH_REASON

try:
    import torch
except ImportError:  # the oracle is optional: pip install -e ".[peers]"
    torch = None


def _slice_add(lib, zeros, w):
    a = zeros(3)
    a[0:2].add_(w)
    return (a * a).sum() + w.sum()


def _row_assign(lib, zeros, w):
    a = zeros(2, 3)
    row = a[0]
    row[0:2] = w
    return (a * a).sum() + w.sum()


def _slice_copy(lib, zeros, w):
    a = zeros(3)
    a[0:2].copy_(w)
    return (a * a).sum() + w.sum()


def _overlapping_views(lib, zeros, w):
    a = zeros(3)
    first, second = a[0:2], a[1:3]
    first.add_(w)  # second's grad_fn must be rebuilt from a's new history
    return (second * second).sum()


def _root_then_view(lib, zeros, w):
    a = zeros(2)
    view = a[0:1]
    a.mul_(w)
    a.add_(w)
    return (view * view).sum() + a.sum()


def _view_of_non_leaf(lib, zeros, w):
    b = w * 2.0
    b[0:1].mul_(3.0)
    return (b * b).sum()


def _transposed_view(lib, zeros, w):
    a = zeros(2, 2)
    a.T[0].add_(w)  # the first column of a
    return (a * lib_arange(lib, a)).sum()


def _augmented_index(lib, zeros, w):
    a = zeros(3)
    a[1:] += w * w
    return (a * a).sum()


def _view_of_view(lib, zeros, w):
    a = zeros(2, 3)
    inner = a[1][1:]
    inner.mul_(0.0)
    inner += w
    return (a.sum(axis=1) * a.sum(axis=1)).sum()


def lib_arange(lib, like):
    """1, 2, ... in ``like``'s shape, in either library."""
    values = np.arange(1.0, like.numel() + 1.0).reshape(like.shape)
    if lib is pl:
        return pl.tensor(values, dtype=like.dtype, device=like.device)
    return torch.tensor(values, dtype=like.dtype)


PROGRAMS = {
    "slice_add": (_slice_add, [3.0, 5.0]),
    "row_assign": (_row_assign, [3.0, 5.0]),
    "slice_copy": (_slice_copy, [3.0, 5.0]),
    "overlapping_views": (_overlapping_views, [0.0, 4.0]),
    "root_then_view": (_root_then_view, [3.0, 1.0]),
    "view_of_non_leaf": (_view_of_non_leaf, [72.0, 16.0]),
    "transposed_view": (_transposed_view, [1.0, 3.0]),
    "augmented_index": (_augmented_index, [4.0, 32.0]),
    "view_of_view": (_view_of_view, [6.0, 6.0]),
}


def _run_pylucid(program: Callable, device: str) -> tuple[float, np.ndarray]:
    w = pl.tensor([1.0, 2.0], dtype=pl.float64, device=device, requires_grad=True)

    def zeros(*shape):
        return pl.zeros(*shape, dtype=pl.float64, device=device)

    loss = program(pl, zeros, w)
    loss.backward()
    return loss.item(), w.grad.numpy()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_in_place_on_views_gives_the_base_the_history(name, device) -> None:
    program, expected_grad = PROGRAMS[name]
    value, grad = _run_pylucid(program, device)
    np.testing.assert_array_equal(grad, expected_grad)
    numba_value, numba_grad = _run_pylucid(program, "cpu")
    assert value == numba_value
    np.testing.assert_array_equal(grad, numba_grad)


@pytest.mark.skipif(torch is None, reason=TORCH_REASON)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_in_place_on_views_matches_torch(name, device) -> None:
    program, _ = PROGRAMS[name]
    value, grad = _run_pylucid(program, device)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    loss = program(torch, lambda *s: torch.zeros(*s, dtype=torch.float64), w)
    loss.backward()
    assert value == loss.item()
    np.testing.assert_array_equal(grad, w.grad.numpy())


def test_a_view_takes_the_history_of_a_change_to_its_base(device) -> None:
    a = pl.zeros(3, device=device)
    view = a[0:2]
    w = pl.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    a.add_(w)
    assert view.requires_grad and view.grad_fn is not None
    (view * view).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0, 0.0])


def test_create_graph_through_an_in_place_change_of_a_view(device) -> None:
    def fn(w):
        a = pl.zeros(3, dtype=pl.float64, device=device)
        a[1:].mul_(0.0)
        a[1:] += w * w
        return (a * a.exp()).sum()

    w = pl.tensor([0.3, -0.7], dtype=pl.float64, device=device, requires_grad=True)
    assert pl.graph.gradcheck(fn, [w])
    assert pl.graph.gradgradcheck(fn, [w])


# -- values reach every alias ------------------------------------------------------------------
def test_a_change_to_the_base_reaches_its_views_and_detached_aliases(device) -> None:
    a = pl.tensor([1.0, 2.0, 3.0], device=device)
    view, detached, column = a[0:2], a.detach(), a.reshape(3, 1)[:, 0]
    a.add_(10.0)
    assert view.tolist() == [11.0, 12.0]
    assert detached.tolist() == [11.0, 12.0, 13.0]
    assert column.tolist() == [11.0, 12.0, 13.0]


def test_a_change_to_a_view_reaches_the_base_and_the_other_views(device) -> None:
    a = pl.tensor(np.arange(6.0).reshape(2, 3), device=device)
    transposed, row, alias = a.T, a[1], a.detach()
    transposed[2, 0] = -1.0  # a[0, 2]
    row.mul_(2.0)
    assert a.tolist() == [[0.0, 1.0, -1.0], [6.0, 8.0, 10.0]]
    assert transposed.tolist() == [[0.0, 6.0], [1.0, 8.0], [-1.0, 10.0]]
    assert alias.tolist() == a.tolist()
    alias.zero_()
    assert row.tolist() == [0.0, 0.0, 0.0]


def test_a_view_of_one_element_is_a_view(device) -> None:
    a = pl.tensor([1.0, 2.0], device=device)
    element = a[0]
    element.add_(0.5)
    a[1].mul_(2.0)
    assert a.tolist() == [1.5, 4.0] and element.item() == 1.5


def test_a_view_of_no_elements_gives_its_base_the_history(device) -> None:
    w = pl.tensor(0.5, device=device, requires_grad=True)
    base = pl.zeros(0, 1, device=device)
    base.squeeze(1).add_(w)
    (base * 2.0).sum().backward()
    assert w.grad is not None and w.grad.item() == 0.0


def test_a_reshape_that_must_copy_is_not_a_view(device) -> None:
    a = pl.tensor(np.arange(6.0).reshape(2, 3), device=device)
    copied = a.T.reshape(6)  # no strides give the transpose in row-major order
    copied.add_(100.0)
    assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    viewed = a.reshape(3, 2)
    viewed.add_(1.0)
    assert a.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_a_change_to_a_view_is_seen_by_a_node_that_saved_the_base(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    b = x * 1.0
    y = b * b  # saves b
    with pl.no_grad():
        b[0:1].add_(1.0)
    with pytest.raises(InplaceModifiedError, match="MulBackward"):
        y.sum().backward()


def test_saving_makes_no_counter_and_a_later_change_is_still_seen(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    b = x * 1.0
    y = b * b  # saves b, watched through the tensor: no version counter is made for it
    assert b._counter is None
    with pl.no_grad():
        b.add_(1.0)  # makes b's counter, at version 1
    with pytest.raises(InplaceModifiedError, match=r"version 0 when saved, now 1"):
        y.sum().backward()


def test_assigning_data_keeps_the_count_a_node_saw(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    b = x * 1.0
    with pl.no_grad():
        b.add_(1.0)  # version 1 before it is saved
    y = b * b
    b.data = pl.tensor([7.0, 8.0], device=device)  # no in-place change: backward works
    y.sum().backward(retain_graph=True)
    assert x.grad.tolist() == [4.0, 6.0]  # 2 (x + 1), from the values saved
    with pl.no_grad():
        b.add_(1.0)
    with pytest.raises(InplaceModifiedError, match="MulBackward"):
        y.sum().backward()


def test_a_recorded_op_leaves_few_objects_for_the_cyclic_collector() -> None:
    """Each container object that outlives its creation counts towards the collector's next
    pass (every 700): a chain of tiny ops left 7.7 per op before its nodes kept their saved
    values as one tuple and shared their needs_input_grad; PyTorch leaves 0.35."""
    import gc

    x = pl.tensor([0.5], requires_grad=True)

    def chain() -> pl.Tensor:
        y = x
        for _ in range(50):
            y = pl.log2(y * 3 + 2)
        return y

    chain()  # (plans and lifted numbers made once)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        y = chain()
        per_op = (gc.get_count()[0] - before) / 150
    finally:
        gc.enable()
    assert per_op <= 5.0, per_op
    del y


# -- refusals leave no trace -------------------------------------------------------------------
def test_a_view_of_a_leaf_that_requires_grad_refuses(device) -> None:
    w = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf tensor that requires grad"):
        w[0:1].add_(1.0)
    with pl.no_grad():
        w[0:1].add_(1.0)
    assert w.tolist() == [2.0, 2.0]


def test_a_view_made_under_no_grad_refuses_a_change_with_a_gradient(device) -> None:
    a = pl.zeros(3, device=device)
    with pl.no_grad():
        view = a[0:2]
    w = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    version = a._version.value
    with pytest.raises(RuntimeError, match="made under no_grad"):
        view.add_(w)
    assert a.tolist() == [0.0, 0.0, 0.0] and a._version.value == version
    view.add_(1.0)  # no gradient involved: allowed
    assert a.tolist() == [1.0, 1.0, 0.0]


def test_an_expanded_view_refuses_before_changing_anything(device) -> None:
    a = pl.tensor([1.0, 2.0], device=device)
    expanded = a.expand(3, 2)
    with pytest.raises(RuntimeError, match="expanded view"):
        expanded.add_(1.0)
    assert a.tolist() == [1.0, 2.0] and a._version.value == 0


def test_an_empty_expanded_view_takes_in_place_ops_as_in_pytorch(device) -> None:
    """No element is written, so none is written twice: PyTorch allows it, so does pylucid."""
    expanded = pl.zeros(1, 0, device=device).expand(3, 0)
    expanded.add_(1.0)
    expanded[:] = 5.0
    expanded *= 2.0
    assert expanded.shape == (3, 0) and expanded._version.value == 3
    w = pl.zeros(1, 0, device=device, requires_grad=True)
    target = pl.zeros(3, 0, device=device)
    target.copy_(w.expand(3, 0))
    target.sum().backward()
    assert w.grad.shape == (1, 0)

def test_a_read_only_array_refuses_before_changing_anything() -> None:
    values = np.array([1.0, 2.0])
    values.flags.writeable = False
    x = pl.from_numpy(values)
    with pytest.raises(RuntimeError, match="read-only"):
        x.mul_(2.0)
    assert x._version.value == 0


# -- augmented assignment ----------------------------------------------------------------------
def test_augmented_assignment_is_in_place(device) -> None:
    w = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    same = w
    for _ in range(3):
        (w * w).sum().backward()
        with pl.no_grad():
            w -= 0.25 * w.grad
        w.grad = None
    assert w is same and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(w.numpy(), [0.125, 0.25])  # w * (1 - 0.5) ** 3
    for op in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__"):
        x = pl.tensor([2.0, 4.0], device=device)
        assert getattr(x, op)(2.0) is x


def test_augmented_assignment_keeps_dtype_and_shape(device) -> None:
    x = pl.tensor([1, 2], dtype=pl.int32, device=device)
    with pytest.raises(TypeError, match="cannot be stored in place into a int32"):
        x += 1.5
    with pytest.raises(ValueError, match="cannot change the shape"):
        y = pl.ones(2, device=device)
        y += pl.ones(3, 2, device=device)
    z = pl.ones(2, device=device)
    z += pl.tensor([0.5, 1e-10], dtype=pl.float64, device=device)  # cast, as PyTorch
    assert z.dtype is pl.float32 and z.tolist() == [1.5, 1.0]
    z += pl.tensor(2.0, dtype=pl.float64, device=device)
    assert z.tolist() == [3.5, 3.0]
    w = pl.ones(2, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w += 1.0
    with pytest.raises(TypeError):
        w += "a"


# -- gradient buffers ------------------------------------------------------------------------
def test_a_gradient_a_hook_saw_is_not_the_leaf_gradient(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g))
    (x * 3.0).sum().backward()
    x.grad.zero_()
    assert seen[0].tolist() == [3.0, 3.0]
    kept = []

    def replace(g):
        kept.append(g * 2.0)
        return kept[-1]

    y = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    y.register_hook(replace)
    (y * 3.0).sum().backward()
    y.grad.zero_()
    assert kept[0].tolist() == [6.0, 6.0]


def test_a_hook_returning_a_wrong_shape_is_refused(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    x.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match=r"returned a tensor of shape \(\)"):
        (x * 3.0).sum().backward()


def test_accumulation_into_an_existing_grad_is_in_place(device) -> None:
    x = pl.tensor([1.0, 2.0], device=device, requires_grad=True)
    (x * 2.0).sum().backward()
    first = x.grad
    view = first[0:1]
    (x * 3.0).sum().backward()
    assert x.grad is first and first.tolist() == [5.0, 5.0] and view.tolist() == [5.0]
