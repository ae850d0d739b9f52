"""In-place arithmetic straight into the tensor's memory (``ops.inplace._into``, the kernels'
in-place loops): the bits of the general path (compute the twin, copy it in), and the general
path wherever the shortcut would not be the same thing."""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.ops import inplace
from pylucid.ops.arithmetic import AddBackward, DivBackward, MulBackward, SubBackward

OPS = [("add_", AddBackward, np.add), ("sub_", SubBackward, np.subtract),
       ("mul_", MulBackward, np.multiply), ("div_", DivBackward, np.divide)]  # fmt: skip


@pytest.mark.parametrize(("name", "cls", "reference"), OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7,), (64, 128), (3, 4, 5), (70000,)])
@pytest.mark.parametrize("other_kind", ["tensor", "number", "one_element"])
def test_in_place_loop_gives_the_general_paths_bits(name, cls, reference, dtype, shape, other_kind):
    rng = np.random.default_rng(len(shape))
    start = (rng.standard_normal(shape) * 3 + 0.5).astype(dtype)
    other_np = (rng.standard_normal(shape) * 2 + 3).astype(dtype)
    other = {
        "tensor": pl.tensor(other_np),
        "number": 0.37,
        "one_element": pl.tensor(other_np.reshape(-1)[:1]),
    }[other_kind]
    x = pl.tensor(start.copy())
    before = x._storage
    with pl.no_grad():
        assert inplace._into(cls, x, other)  # (taken)
    assert x._storage is before  # (written where it was)
    general = getattr(pl, name[:-1])(pl.tensor(start.copy()), other).numpy()
    assert x.numpy().tobytes() == general.tobytes()
    operand = other._storage if isinstance(other, pl.Tensor) else dtype(other)
    assert x.numpy().tobytes() == reference(start, operand).astype(dtype).tobytes()
    y = pl.tensor(start.copy())
    getattr(y, name)(other)  # (the public op: same answer, version bumped once)
    assert y.numpy().tobytes() == general.tobytes() and y._version.value == 1


def test_a_tensor_with_itself():
    x = pl.tensor(np.arange(1.0, 7.0, dtype=np.float32))
    x.mul_(x)
    np.testing.assert_array_equal(x.numpy(), np.arange(1.0, 7.0, dtype=np.float32) ** 2)


def test_what_the_in_place_loop_does_not_take():
    x = pl.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert not inplace._into(AddBackward, x, pl.tensor(np.ones(3, np.float32)))  # broadcast
    assert not inplace._into(AddBackward, x, pl.tensor(np.ones((2, 3))))  # float64: a cast
    assert not inplace._into(AddBackward, x[0], 1.0)  # a view: its base takes the change
    leaf = pl.tensor(np.ones(3, np.float32), requires_grad=True)
    assert not inplace._into(AddBackward, pl.tensor(np.ones(3, np.float32)), leaf)  # grad
    half = pl.tensor(np.ones(3, np.float32)).to(pl.float16)
    assert not inplace._into(AddBackward, half, 1.0)
    integers = pl.tensor(np.arange(3))
    assert not inplace._into(DivBackward, integers, 2)  # true division: a float result
    flat = pl.tensor(np.arange(6.0, dtype=np.float32))
    assert not inplace._into(AddBackward, flat, flat.reshape(2, 3).reshape(6))  # overlaps


def test_an_operand_overlapping_the_target_takes_the_general_path():
    """``x -= view of x shifted``: the general path computes the twin first, so every
    element reads the old values; an in-place loop would read some new ones."""
    base = np.arange(8.0, dtype=np.float32)
    x = pl.tensor(base.copy())
    shifted = pl.from_numpy(np.roll(np.arange(8.0, dtype=np.float32), 1))  # (apart: taken)
    assert inplace._into(SubBackward, pl.tensor(base.copy()), shifted)
    storage = x._storage
    alias = pl.from_numpy(storage[::-1])  # reversed: same memory, another order
    assert not inplace._into(SubBackward, x, alias)
    x.sub_(alias)
    np.testing.assert_array_equal(x.numpy(), base - base[::-1])


def test_in_place_ops_under_grad_mode_keep_their_history():
    a = pl.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = a * 1.0
    y.mul_(3.0)  # recorded: the general path
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])
