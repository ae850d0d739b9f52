"""Shape and indexing ops: values against NumPy, gradients, views, edge cases and errors.

Shape ops only move data, so their values must equal NumPy's exactly (no tolerance), in
every dtype. Their gradients are checked against float64 central differences; an index's
gradient is also compared, exactly, with ``np.add.at`` (the scatter with accumulation that
defines it). The gradients built with ``create_graph=True`` (pylucid ops, differentiable)
must equal the fused ones exactly, and second derivatives match finite differences. The
out-of-place assignment ``setitem`` is checked against NumPy's ``a[key] = value``, including
repeated positions (the last write wins).
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.ops.base import VARIADIC, Op
from pylucid.ops.indexing import GetitemBackward, IndexAddBackward, plan_index
from pylucid.ops.schema import AmpPolicy, OpSchema

# (id, pylucid call, NumPy reference, input shape)
SHAPE_CASES = [
    ("transpose", lambda x: pl.transpose(x, 0, 2), lambda a: np.swapaxes(a, 0, 2), (2, 3, 4)),
    ("transpose-neg", lambda x: x.transpose(-1, 1), lambda a: np.swapaxes(a, -1, 1), (2, 3, 4)),
    ("swapaxes", lambda x: x.swapaxes(0, 1), lambda a: np.swapaxes(a, 0, 1), (3, 4)),
    ("permute", lambda x: x.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1), (2, 3, 4)),
    (
        "permute-tuple",
        lambda x: pl.permute(x, (1, -1, 0)),
        lambda a: a.transpose(1, 2, 0),
        (2, 3, 4),
    ),
    ("T-2d", lambda x: x.T, lambda a: a.T, (3, 4)),
    ("T-3d", lambda x: x.T, lambda a: a.T, (2, 3, 4)),
    ("mT", lambda x: x.mT, lambda a: np.swapaxes(a, -1, -2), (2, 3, 4)),
    ("reshape", lambda x: x.reshape(4, 3), lambda a: a.reshape(4, 3), (3, 4)),
    ("reshape-minus1", lambda x: pl.reshape(x, (2, -1)), lambda a: a.reshape(2, -1), (3, 4)),
    ("reshape-to-0d", lambda x: x.reshape(()), lambda a: a.reshape(()), (1, 1)),
    ("reshape-from-0d", lambda x: x.reshape(1, 1), lambda a: a.reshape(1, 1), ()),
    ("view", lambda x: x.view(-1), lambda a: a.reshape(-1), (2, 3)),
    ("flatten", lambda x: x.flatten(), lambda a: a.reshape(-1), (2, 3, 4)),
    ("flatten-mid", lambda x: x.flatten(1, -2), lambda a: a.reshape(2, 12, 2), (2, 3, 4, 2)),
    ("flatten-0d", lambda x: x.flatten(), lambda a: a.reshape(1), ()),
    ("squeeze", lambda x: x.squeeze(), lambda a: np.squeeze(a), (1, 3, 1, 2)),
    ("squeeze-axes", lambda x: x.squeeze((0, -2)), lambda a: np.squeeze(a, (0, 2)), (1, 3, 1, 2)),
    ("squeeze-dim", lambda x: x.squeeze(dim=2), lambda a: np.squeeze(a, 2), (1, 3, 1, 2)),
    ("unsqueeze", lambda x: x.unsqueeze(1), lambda a: np.expand_dims(a, 1), (3, 4)),
    ("unsqueeze-end", lambda x: x.unsqueeze(dim=-1), lambda a: a[..., None], (3, 4)),
    ("unsqueeze-0d", lambda x: pl.unsqueeze(x, 0), lambda a: a.reshape(1), ()),
    ("expand", lambda x: x.expand(2, 3, 4), lambda a: np.broadcast_to(a, (2, 3, 4)), (3, 1)),
    ("expand-keep", lambda x: x.expand(5, -1, -1), lambda a: np.broadcast_to(a, (5, 1, 4)), (1, 4)),
    (
        "broadcast_to",
        lambda x: x.broadcast_to((2, 3, 4)),
        lambda a: np.broadcast_to(a, (2, 3, 4)),
        (4,),
    ),
    ("broadcast_to-0d", lambda x: pl.broadcast_to(x, 3), lambda a: np.broadcast_to(a, 3), ()),
    ("slice", lambda x: x[1:, ::-2], lambda a: a[1:, ::-2], (3, 4)),
]
SHAPE_IDS = [case[0] for case in SHAPE_CASES]


@pytest.mark.parametrize("name, call, reference, shape", SHAPE_CASES, ids=SHAPE_IDS)
def test_shape_op_values_are_numpy_s(device, rng, name, call, reference, shape):
    values = rng.uniform(-5, 5, shape)
    values.reshape(-1)[:2] = [np.nan, -np.inf][: values.size]  # moved, never changed
    for dtype in (pl.float32, pl.float64, pl.int64):
        array = values if dtype.is_floating_point else np.arange(values.size).reshape(shape)
        x = pl.tensor(array, dtype=dtype, device=device)
        out = call(x)
        expected = reference(array.astype(dtype.numpy))
        assert out.dtype is dtype and out.shape == expected.shape
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("name, call, reference, shape", SHAPE_CASES, ids=SHAPE_IDS)
def test_shape_op_gradcheck(device, rng, name, call, reference, shape):
    x = pl.tensor(rng.uniform(-5, 5, shape), dtype=pl.float64, device=device, requires_grad=True)
    assert pl.graph.gradcheck(call, [x])


@pytest.mark.parametrize("name, call, reference, shape", SHAPE_CASES, ids=SHAPE_IDS)
def test_shape_ops_are_views_on_numba(rng, name, call, reference, shape):
    """Zero-copy on the numba backend: the result shares the input's memory, and backward
    leaves the input as it was."""
    array = rng.uniform(-5, 5, shape)
    x = pl.tensor(array, dtype=pl.float64, requires_grad=True)
    out = call(x)
    assert np.shares_memory(out.numpy(), x.numpy())
    out.backward(pl.ones(out.shape, dtype=pl.float64))
    np.testing.assert_array_equal(x.numpy(), array)


def test_properties_and_methods_are_installed():
    assert isinstance(pl.Tensor.__dict__["T"], property)
    assert isinstance(pl.Tensor.__dict__["mT"], property)
    for name in ("transpose", "swapaxes", "permute", "reshape", "view", "flatten", "split"):
        assert callable(getattr(pl.Tensor, name)), name
    assert pl.cat is pl.concatenate


def test_transpose_all_of_a_vector_or_scalar_is_itself(device):
    x = pl.ones(3, device=device)
    assert x.T is x and pl.ones((), device=device).T.shape == ()


def test_schemas_keep_the_input_dtype():
    for name in ("transpose", "permute", "reshape", "expand", "concatenate", "stack", "getitem"):
        assert pl.ops.get_schema(name).amp_policy is AmpPolicy.KEEP_INPUT, name


def test_non_contiguous_inputs(device):
    """Transposed and strided NumPy views: reshape copies when it must, and later kernels
    (which need contiguous operands) read the views correctly."""
    base = np.arange(24.0).reshape(4, 6)
    view = base[::2, 1::2].T  # (3, 2), neither C- nor F-contiguous
    x = pl.from_numpy(view).to(device)
    np.testing.assert_array_equal(x.reshape(-1).numpy(), view.reshape(-1))
    np.testing.assert_array_equal((x.T * 2.0).numpy(), view.T * 2.0)
    np.testing.assert_array_equal(x.flatten().numpy(), view.flatten())


def test_gradient_of_two_views_of_one_leaf(device, rng):
    """Gradients through two views of one tensor add up; nothing writes into a view."""
    x = pl.tensor(rng.uniform(-1, 1, (3, 4)), dtype=pl.float64, device=device, requires_grad=True)
    out = (x.T * x.T).sum() + x.expand(2, 3, 4).sum() + x.reshape(12)[::5].sum()
    out.backward()
    expected = 2 * x.numpy() + 2.0
    expected.reshape(-1)[::5] += 1.0
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-15)


# -- indexing ------------------------------------------------------------------------------
MASK_2D = np.array([[True, False, True, False], [False, False, False, False], [True] * 4])
MASK_1D = np.array([True, False, True])

# (id, key or key(device)) for a tensor of shape (3, 4, 5).
INDEX_CASES = [
    ("int", 1),
    ("negative-int", -1),
    ("ints", (0, 2)),
    ("int-slice-int", (1, slice(None), -2)),
    ("reverse", slice(None, None, -1)),
    ("steps", (slice(1, None), slice(None, None, 2), slice(4, 0, -3))),
    ("out-of-range-slice", (slice(-10, 10), slice(5, None))),
    ("ellipsis", (Ellipsis, 1)),
    ("none", (None, 0, None)),
    ("ellipsis-none", (Ellipsis, None)),
    ("empty-tuple", ()),
    ("list-repeats", [0, 0, 2]),
    ("two-arrays", ([0, 2], [1, 3])),
    ("array-axis1-repeats", (slice(None), [3, 0, 3])),
    ("int-and-array-separated", (0, slice(None), [1, 1])),
    ("arrays-around-slice", ([[0], [2]], slice(1, 3), [0, 4])),
    ("ellipsis-separates", ([0, 1], Ellipsis, [2, 2])),
    ("numpy-int-array", np.array([2, -3])),
    ("empty-list", []),
    ("mask-2d", MASK_2D),
    ("mask-1d-and-int", (MASK_1D, 1)),
    ("mask-after-slice", (slice(None), np.array([True, False, False, True]))),
    ("int-tensor", lambda device: pl.tensor([2, 0, 2], device=device)),
    ("bool-tensor", lambda device: pl.tensor(MASK_2D, device=device)),
    ("other-device-int-tensor", lambda device: pl.tensor([1, 1], device="cpu")),
    (
        "int32-tensor-2d",
        lambda device: (slice(None), pl.tensor([[1], [3]], dtype=pl.int32, device=device)),
    ),
]


def _key(key, device):
    return key(device) if callable(key) else key


def _numpy_key(key):
    if isinstance(key, pl.Tensor):
        return key.numpy()
    if isinstance(key, tuple):
        return tuple(_numpy_key(k) for k in key)
    return key


@pytest.mark.parametrize("name, key", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_getitem_forward_and_scatter_backward(device, rng, name, key):
    key = _key(key, device)
    array = rng.uniform(-5, 5, (3, 4, 5))
    expected = array[_numpy_key(key)]
    x = pl.tensor(array, dtype=pl.float64, device=device, requires_grad=True)
    out = x[key]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    g = rng.standard_normal(expected.shape)
    out.backward(pl.tensor(g, dtype=pl.float64, device=device))
    scattered = np.zeros(array.shape)
    np.add.at(scattered, _numpy_key(key), g)
    # Repeated elements add their gradients; two float64 additions, so 1 ulp slack.
    np.testing.assert_allclose(x.grad.numpy(), scattered, rtol=1e-15, atol=0)


def test_getitem_of_integer_and_bool_tensors(device):
    x = pl.tensor(np.arange(12).reshape(3, 4), device=device)
    np.testing.assert_array_equal(x[1:, [0, 0]].numpy(), [[4, 4], [8, 8]])
    np.testing.assert_array_equal(x[x.numpy() > 8].numpy(), [9, 10, 11])


def test_getitem_edges(device):
    scalar = pl.tensor(3.0, device=device)
    assert scalar[()].item() == 3.0 and scalar[None].shape == (1,) and scalar[...].shape == ()
    empty = pl.zeros(0, 3, device=device, requires_grad=True)
    out = empty[[]]
    assert out.shape == (0, 3)
    out.sum().backward()
    assert empty.grad.shape == (0, 3)
    assert pl.zeros(2, 3, device=device)[:, 3:].shape == (2, 0)


def test_getitem_record_is_a_basic_view_on_numba():
    x = pl.tensor(np.arange(12.0).reshape(3, 4))
    assert np.shares_memory(x[1:, ::2].numpy(), x.numpy())
    assert not np.shares_memory(x[[0, 1]].numpy(), x.numpy())


def test_index_arrays_are_copied(device):
    """The node keeps its own copy: changing the index array afterwards changes nothing."""
    index = np.array([0, 0])
    x = pl.ones(3, device=device, requires_grad=True)
    out = x[index]
    index[:] = 2
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 0.0])


INDEX_ERRORS = [
    (
        3,
        IndexError,
        r"getitem: index 3 is out of range for dimension 0 of size 3 \(tensor of shape \(3, 4\)\)",
    ),
    ((0, -5), IndexError, r"index -5 is out of range for dimension 1 of size 4"),
    ([0, 3], IndexError, r"index 3 is out of range for dimension 0 of size 3"),
    ((slice(None), np.array([-5])), IndexError, r"index -5 is out of range for dimension 1"),
    ((0, 0, 0), IndexError, r"too many indices for a tensor of 2 dimensions \(shape \(3, 4\)\)"),
    (np.ones(4, bool), IndexError, r"bool mask of shape \(4,\) does not match dimensions 0..0"),
    ((Ellipsis, Ellipsis), IndexError, r"single ellipsis"),
    (([0, 1], [0, 1, 2]), IndexError, r"shapes \(2,\), \(3,\) cannot be broadcast together"),
    (1.5, TypeError, r"unsupported index of type float"),
    ("a", TypeError, r"unsupported index of type str"),
    ({0: 1}, TypeError, r"unsupported index of type dict"),
    (True, TypeError, r"bool scalar is not a valid index"),
    ([0.5], TypeError, r"index arrays must hold integers or bools, got float64"),
    (np.array(True), TypeError, r"0-d bool mask"),
    ([[0, 1], [2]], TypeError, r"must be rectangular"),
    (slice(0, 2, 0), ValueError, r"slice step cannot be zero"),
    (slice(0.5, 2), TypeError, r"slice bounds must be ints or None, got float"),
]


@pytest.mark.parametrize("key, error, message", INDEX_ERRORS)
def test_getitem_errors(device, key, error, message):
    x = pl.zeros(3, 4, device=device)
    with pytest.raises(error, match=message):
        x[key]


def test_float_tensor_index_is_a_type_error(device):
    x = pl.zeros(3, 4, device=device)
    with pytest.raises(TypeError, match="getitem: index arrays must hold integers or bools"):
        x[pl.tensor([0.0, 1.0], device=device)]


# -- joining and splitting -------------------------------------------------------------------
JOIN_CASES = [
    ("cat-axis0", lambda *t: pl.cat(list(t)), np.concatenate, [(2, 3), (1, 3), (4, 3)]),
    (
        "cat-dim-neg",
        lambda *t: pl.concatenate(t, dim=-1),
        lambda a: np.concatenate(a, -1),
        [(2, 1), (2, 3)],
    ),
    (
        "cat-empty",
        lambda *t: pl.cat(t, axis=1),
        lambda a: np.concatenate(a, 1),
        [(2, 0), (2, 2), (2, 0)],
    ),
    ("cat-one", lambda *t: pl.cat(t), np.concatenate, [(3,)]),
    ("stack", lambda *t: pl.stack(t), np.stack, [(2, 3), (2, 3)]),
    ("stack-last", lambda *t: pl.stack(t, axis=-1), lambda a: np.stack(a, -1), [(2, 3)] * 3),
    ("stack-0d", lambda *t: pl.stack(t, dim=0), np.stack, [(), ()]),
]


@pytest.mark.parametrize(
    "name, call, reference, shapes", JOIN_CASES, ids=[c[0] for c in JOIN_CASES]
)
def test_join_values_and_gradients(device, rng, name, call, reference, shapes):
    arrays = [rng.uniform(-5, 5, s) for s in shapes]
    for dtype in (pl.float32, pl.int64):
        tensors = [pl.tensor(a, dtype=dtype, device=device) for a in arrays]
        expected = reference([a.astype(dtype.numpy) for a in arrays])
        out = call(*tensors)
        assert out.dtype is dtype
        np.testing.assert_array_equal(out.numpy(), expected)
    inputs = [
        pl.tensor(a, dtype=pl.float64, device=device, requires_grad=a.size > 0) for a in arrays
    ]
    if any(t.requires_grad for t in inputs):  # gradcheck cannot take empty inputs
        assert pl.graph.gradcheck(call, inputs)


def test_join_promotes_dtypes_and_casts_gradients_back(device):
    a = pl.ones(2, device=device, requires_grad=True)  # float32
    b = pl.ones(2, dtype=pl.float64, device=device, requires_grad=True)
    i = pl.tensor([1, 2], device=device)
    out = pl.cat([a, b, i])
    assert out.dtype is pl.float64
    np.testing.assert_array_equal(out.numpy(), [1, 1, 1, 1, 1, 2])
    (out * pl.tensor([1.0, 2, 3, 4, 5, 6], dtype=pl.float64, device=device)).sum().backward()
    assert a.grad.dtype is pl.float32 and b.grad.dtype is pl.float64
    np.testing.assert_array_equal(a.grad.numpy(), [1, 2])
    np.testing.assert_array_equal(b.grad.numpy(), [3, 4])
    assert pl.stack([i, pl.ones(2, device=device)]).dtype is pl.float32


JOIN_ERRORS = [
    (lambda x: pl.cat([]), ValueError, r"concatenate: expected at least one tensor"),
    (
        lambda x: pl.cat(x),
        TypeError,
        r"concatenate: expected a list or tuple of tensors, got Tensor",
    ),
    (
        lambda x: pl.stack([x, 1.0]),
        TypeError,
        r"stack: expected a Tensor for tensors\[1\], got float",
    ),
    (
        lambda x: pl.cat([x, x.T]),
        ValueError,
        r"tensors\[1\] has shape \(3, 2\) but tensors\[0\] has \(2, 3\); all dimensions except",
    ),
    (lambda x: pl.cat([x[0, 0], x[0, 0]]), ValueError, r"tensors\[0\] is 0-d"),
    (lambda x: pl.cat([x, x], axis=2), ValueError, r"concatenate: axis 2 is out of range"),
    (lambda x: pl.cat([x, x], axis=0, dim=1), TypeError, r"axis= or its alias dim=, not both"),
    (
        lambda x: pl.stack([x, x[:, :2]]),
        ValueError,
        r"stack: tensors\[1\] has shape \(2, 2\) but tensors\[0\] has \(2, 3\)",
    ),
    (lambda x: pl.stack([x], axis=3), ValueError, r"stack: axis 3 is out of range .* -3..2"),
]


@pytest.mark.parametrize("call, error, message", JOIN_ERRORS)
def test_join_errors(device, call, error, message):
    with pytest.raises(error, match=message):
        call(pl.zeros(2, 3, device=device))


def test_join_device_mismatch_names_the_input():
    pytest.importorskip("mlx.core")
    with pytest.raises(
        RuntimeError, match=r"concatenate: .*tensors\[0\] is on 'cpu'.*tensors\[2\] is on 'gpu'"
    ):
        pl.cat([pl.ones(2), pl.ones(2), pl.ones(2, device="gpu")])


def test_variadic_schema_checks():
    assert pl.ops.get_schema("concatenate").input_arity == VARIADIC
    with pytest.raises(TypeError, match="a variadic op names exactly one input"):

        class _Bad(Op):
            input_names = ("a", "b")
            schema_v1 = OpSchema(name="_bad_variadic", input_arity=VARIADIC)


@pytest.mark.parametrize(
    "args, kwargs, sizes",
    [
        ((2,), {}, [2, 2, 1]),
        (([1, 4],), {}, [1, 4]),
        ((5,), {}, [5]),
        ((9,), {}, [5]),
        (((0, 5, 0),), {}, [0, 5, 0]),
    ],
)
def test_split_along_axis0(device, rng, args, kwargs, sizes):
    x = pl.tensor(rng.uniform(-1, 1, (5, 3)), dtype=pl.float64, device=device, requires_grad=True)
    pieces = x.split(*args, **kwargs)
    assert [p.shape[0] for p in pieces] == sizes
    np.testing.assert_array_equal(pl.cat(pieces).numpy(), x.numpy())
    assert pl.graph.gradcheck(lambda t: pl.split(t, *args), [x])


def test_split_other_axis_and_empty(device):
    x = pl.tensor(np.arange(12.0).reshape(3, 4), device=device)
    left, right = pl.split(x, 3, dim=-1)
    np.testing.assert_array_equal(left.numpy(), x.numpy()[:, :3])
    assert right.shape == (3, 1)
    assert [p.shape for p in pl.zeros(0, 2, device=device).split(2)] == [(0, 2)]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x: x.split(0), ValueError, r"split: the split size must be positive, got 0"),
        (
            lambda x: x.split([2, 2]),
            ValueError,
            r"sections \(2, 2\) must be non-negative and sum to 5",
        ),
        (lambda x: x.split(2, axis=2), ValueError, r"split: axis 2 is out of range"),
        (lambda x: x[0, 0].split(1), ValueError, r"split: a 0-d tensor has no axis"),
        (lambda x: x.split(1.5), TypeError, r"split: sizes must be integers"),
    ],
)
def test_split_errors(device, call, error, message):
    with pytest.raises(error, match=message):
        call(pl.zeros(5, 3, device=device))


SHAPE_ERRORS = [
    (
        lambda x: x.transpose(0, 2),
        ValueError,
        r"transpose: dim1 2 is out of range for a tensor of 2 dimensions",
    ),
    (
        lambda x: x.permute(0, 0),
        ValueError,
        r"permute: dims \(0, 0\) is not a permutation of the 2 dimensions",
    ),
    (lambda x: x.permute(0), ValueError, r"permute: dims \(0,\) is not a permutation"),
    (
        lambda x: x.reshape(4, 2),
        ValueError,
        r"reshape: cannot reshape a tensor of shape \(2, 3\) \(6 elements\) into shape \(4, 2\)",
    ),
    (lambda x: x.reshape(-1, -1), ValueError, r"reshape: invalid shape \(-1, -1\)"),
    (
        lambda x: x.reshape(4, -1),
        ValueError,
        r"cannot reshape a tensor of shape \(2, 3\) \(6 elements\) into shape \(4, -1\)",
    ),
    (lambda x: x.view(2.0, 3), TypeError, r"view: sizes must be integers"),
    (lambda x: x.squeeze(1), ValueError, r"squeeze: cannot remove dimension 1 of size 3"),
    (lambda x: x.unsqueeze(3), ValueError, r"unsqueeze: axis 3 is out of range .* -3..2"),
    (lambda x: x.unsqueeze(), TypeError, r"unsqueeze: missing the axis"),
    (lambda x: x.flatten(1, 0), ValueError, r"flatten: start_dim 1 comes after end_dim 0"),
    (
        lambda x: x.expand(2, 4),
        ValueError,
        r"expand: cannot expand a tensor of shape \(2, 3\) to \(2, 4\)",
    ),
    (lambda x: x.expand(3), ValueError, r"expand: 1 sizes \(3,\) are fewer than the 2 dimensions"),
    (lambda x: x.expand(-1, 2, 3), ValueError, r"size -1 at position 0 is invalid"),
    (
        lambda x: x.broadcast_to((3, 3)),
        ValueError,
        r"broadcast_to: a tensor of shape \(2, 3\) cannot broadcast to \(3, 3\)",
    ),
    (
        lambda x: x[0].mT,
        ValueError,
        r"\.mT needs a matrix or a batch of matrices, got a tensor of shape \(3,\)",
    ),
]


@pytest.mark.parametrize("call, error, message", SHAPE_ERRORS)
def test_shape_errors(device, call, error, message):
    with pytest.raises(error, match=message):
        call(pl.zeros(2, 3, device=device))


def test_empty_tensors(device):
    x = pl.zeros(0, 3, device=device, requires_grad=True)
    assert x.reshape(3, 0).shape == (3, 0) and x.T.shape == (3, 0)
    assert x.expand(2, 0, 3).shape == (2, 0, 3) and x.unsqueeze(0).shape == (1, 0, 3)
    out = pl.stack([x, x], axis=1)
    assert out.shape == (0, 2, 3)
    out.sum().backward()
    assert x.grad.shape == (0, 3)


def _random_key(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple:
    """A random index for ``shape`` mixing every kind of entry NumPy accepts."""
    key: list = []
    dim = 0
    while dim < len(shape) and rng.random() < 0.85:
        n, kind = shape[dim], int(rng.integers(0, 8))
        if kind == 0 and not any(k is Ellipsis for k in key):
            key.append(Ellipsis)
            continue
        if kind == 1:
            key.append(None)
            continue
        dim += 1
        if kind == 2 and n:
            key.append(int(rng.integers(-n, n)))
        elif kind == 3:
            start, stop = (int(v) for v in rng.integers(-n - 2, n + 3, size=2))
            key.append(slice(start, stop, int(rng.choice([-3, -1, 1, 2]))))
        elif kind == 4 and n:
            key.append(rng.integers(-n, n, size=tuple(rng.integers(1, 3, rng.integers(0, 3)))))
        elif kind == 5:
            key.append(rng.random(n) < 0.5)
        else:
            key.append(slice(None))
    return tuple(key)


def test_random_indices_match_numpy(device):
    """300 seeded random indices (ints, slices, None, Ellipsis, int arrays that repeat,
    masks, in every arrangement): values equal NumPy's, gradients equal ``np.add.at``'s, and
    invalid ones (arrays that do not broadcast) fail as NumPy's do."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(0, 4, size=rng.integers(0, 4)))
        key = _random_key(rng, shape)
        array = rng.standard_normal(shape)
        x = pl.tensor(array, dtype=pl.float64, device=device, requires_grad=True)
        try:
            expected = array[key]
        except IndexError:
            with pytest.raises(IndexError, match="getitem: "):
                x[key]
            continue
        out = x[key]
        assert out.shape == expected.shape, key
        np.testing.assert_array_equal(out.numpy(), expected, err_msg=str(key))
        g = rng.standard_normal(expected.shape)
        out.backward(pl.tensor(g, dtype=pl.float64, device=device))
        scattered = np.zeros(shape)
        np.add.at(scattered, key, g)
        np.testing.assert_allclose(x.grad.numpy(), scattered, rtol=1e-15, err_msg=str(key))


# -- differentiable gradients (create_graph=True) ---------------------------------------------
FAMILY = ("transpose", "permute", "reshape", "expand", "concatenate", "stack", "getitem")
FAMILY += ("index_add", "setitem")


def _assert_create_graph_matches_fused(call, inputs, rng):
    """The gradients built with create_graph=True equal the fused ones exactly (these ops
    only move, gather, scatter and sum data, through the same primitives)."""
    out = call(*inputs)
    v = pl.tensor(rng.standard_normal(out.shape), dtype=out.dtype, device=out.device)
    fused = pl.graph.grad(out, inputs, v, retain_graph=True)
    graph = pl.graph.grad(out, inputs, v, create_graph=True)
    for f, g in zip(fused, graph):
        assert g.shape == f.shape and g.dtype is f.dtype
        np.testing.assert_array_equal(g.numpy(), f.numpy())


def _leaf(rng, shape, device):
    return pl.tensor(rng.uniform(-5, 5, shape), dtype=pl.float64, device=device, requires_grad=True)


def test_every_op_of_the_family_has_a_graph_formula():
    for name in FAMILY:
        assert pl.ops.get_op(name).grad_graph is not Op.grad_graph, name
    assert pl.ops.get_schema("index_add").internal


def test_an_op_without_a_graph_formula_refuses_create_graph(monkeypatch, device):
    monkeypatch.setattr(GetitemBackward, "grad_graph", Op.grad_graph)
    x = pl.ones(3, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no differentiable gradient formula.*getitem"):
        x[1:].sum().backward(create_graph=True)


@pytest.mark.parametrize("name, call, reference, shape", SHAPE_CASES, ids=SHAPE_IDS)
def test_shape_op_create_graph(device, rng, name, call, reference, shape):
    x = _leaf(rng, shape, device)
    _assert_create_graph_matches_fused(call, [x], rng)
    assert pl.graph.gradgradcheck(lambda t: call(t) * call(t), [x])


@pytest.mark.parametrize(
    "name, call, reference, shapes", JOIN_CASES, ids=[c[0] for c in JOIN_CASES]
)
def test_join_create_graph(device, rng, name, call, reference, shapes):
    inputs = [_leaf(rng, s, device) for s in shapes]
    _assert_create_graph_matches_fused(call, inputs, rng)
    if all(t.numel() for t in inputs):  # gradcheck cannot take empty inputs
        assert pl.graph.gradgradcheck(lambda *t: call(*t) * call(*t), inputs)


@pytest.mark.parametrize("name, key", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_getitem_create_graph(device, rng, name, key):
    key = _key(key, device)
    x = _leaf(rng, (3, 4, 5), device)
    _assert_create_graph_matches_fused(lambda t: t[key], [x], rng)
    assert pl.graph.gradgradcheck(lambda t: t[key] * t[key], [x])


@pytest.mark.parametrize("key", [[0, 0, 2], (slice(None), [[3], [0]], [1, 1]), (None, 1, ...)])
def test_index_add_is_differentiable(device, rng, key):
    """getitem's create_graph gradient is an index_add node, whose own gradients (fused and
    create_graph) gather: d<index_add(v), w>/dv = w[key]."""
    x = _leaf(rng, (3, 4, 5), device)
    out = x[key]
    v = pl.tensor(rng.standard_normal(out.shape), device=device, requires_grad=True)
    (scattered,) = pl.graph.grad(out, [x], v, create_graph=True)
    assert isinstance(scattered.grad_fn, IndexAddBackward)
    w = rng.standard_normal((3, 4, 5))
    _assert_create_graph_matches_fused(
        lambda t: pl.graph.grad(out, [x], t, create_graph=True)[0], [v], rng
    )
    (gathered,) = pl.graph.grad(scattered, [v], pl.tensor(w, device=device))
    np.testing.assert_array_equal(gathered.numpy(), w[key])
    plan = plan_index("getitem", key, x.shape)
    assert pl.graph.gradgradcheck(lambda t: IndexAddBackward.apply(t * t, plan=plan), [v])


# -- setitem ---------------------------------------------------------------------------------
def _last_write_mask(key, shape):
    """For each element of ``a[key]``: whether its write to ``a`` is the last one there."""
    targets = np.arange(int(np.prod(shape))).reshape(shape)[key].reshape(-1)
    last = {int(t): i for i, t in enumerate(targets)}
    mask = np.zeros(targets.size, bool)
    mask[list(last.values())] = True
    return mask.reshape(np.shape(np.empty(shape)[key]))


def _check_setitem(device, rng, key, shape, value_shape):
    """Values against NumPy's assignment, x unchanged, and exact gradients: g with zeros at
    the written positions for x; g[key], 0 where a later write overwrote, summed to the
    value's shape, for the value."""
    numpy_key = _numpy_key(key)
    array, values = rng.standard_normal(shape), rng.standard_normal(value_shape)
    expected = array.copy()
    expected[numpy_key] = values
    x = pl.tensor(array, dtype=pl.float64, device=device, requires_grad=True)
    value = pl.tensor(values, dtype=pl.float64, device=device, requires_grad=True)
    out = pl.setitem(x, key, value)
    assert out.shape == shape and out.dtype is pl.float64
    np.testing.assert_array_equal(out.numpy(), expected, err_msg=str(key))
    np.testing.assert_array_equal(x.numpy(), array)
    g = rng.standard_normal(shape)
    out.backward(pl.tensor(g, device=device))
    grad_x = g.copy()
    grad_x[numpy_key] = 0.0
    np.testing.assert_array_equal(x.grad.numpy(), grad_x, err_msg=str(key))
    picked = np.where(_last_write_mask(numpy_key, shape), g[numpy_key], 0.0)
    fitted = value_shape[max(len(value_shape) - picked.ndim, 0) :]  # leading 1s dropped
    lead = picked.ndim - len(fitted)
    spread = [lead + i for i, n in enumerate(fitted) if n == 1 and picked.shape[lead + i] != 1]
    grad_value = picked.sum(axis=(*range(lead), *spread)).reshape(value_shape)
    np.testing.assert_allclose(value.grad.numpy(), grad_value, rtol=1e-13, err_msg=str(key))


@pytest.mark.parametrize("name, key", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_setitem_values_and_gradients(device, rng, name, key):
    key = _key(key, device)
    selected = np.empty((3, 4, 5))[_numpy_key(key)].shape
    for value_shape in dict.fromkeys([selected, selected[-1:], (), (1, *selected)]):
        _check_setitem(device, rng, key, (3, 4, 5), value_shape)


def test_setitem_repeated_positions_keep_the_last_write(device):
    x = pl.zeros(4, dtype=pl.float64, device=device, requires_grad=True)
    value = pl.tensor([1.0, 2.0, 3.0, 4.0], dtype=pl.float64, device=device, requires_grad=True)
    out = pl.setitem(x, [3, 0, 3, 0], value)
    np.testing.assert_array_equal(out.numpy(), [4.0, 0.0, 0.0, 3.0])
    (out * pl.tensor([10.0, 20.0, 30.0, 40.0], device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 20.0, 30.0, 0.0])
    np.testing.assert_array_equal(value.grad.numpy(), [0.0, 0.0, 40.0, 10.0])
    assert pl.graph.gradgradcheck(lambda a, v: pl.setitem(a * v, [3, 0, 3, 0], v * v), [x, value])


@pytest.mark.parametrize("key", [(slice(None), [2, 0, 2]), (1, slice(None, None, -2)), [1, 1]])
def test_setitem_create_graph(device, rng, key):
    x = _leaf(rng, (3, 4), device)
    value = _leaf(rng, np.empty((3, 4))[key].shape, device)

    def call(a, v):
        return pl.setitem(a * a, key, v * a[key])

    _assert_create_graph_matches_fused(call, [x, value], rng)
    assert pl.graph.gradgradcheck(call, [x, value])


def test_setitem_returns_new_storage(device):
    x = pl.tensor(np.arange(6.0).reshape(2, 3), device=device)
    view = x.T  # a NumPy view on numba: setitem must not write through it either
    out = pl.setitem(view, (0, 1), -1.0)
    np.testing.assert_array_equal(out.numpy(), [[0.0, -1.0], [1.0, 4.0], [2.0, 5.0]])
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))
    assert not np.shares_memory(out.numpy(), x.numpy())


def test_setitem_values_take_the_tensor_s_dtype(device):
    ints = pl.tensor(np.arange(6).reshape(2, 3), device=device)
    out = pl.setitem(ints, (0, [1, 1]), 2.7)
    assert out.dtype is pl.int64 and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), [[0, 2, 2], [3, 4, 5]])
    flags = pl.setitem(pl.zeros(2, 3, dtype=pl.bool, device=device), (slice(None), 1), True)
    np.testing.assert_array_equal(flags.numpy(), [[False, True, False]] * 2)
    x = pl.ones(3, device=device, requires_grad=True)  # float32
    value = pl.tensor([2.0], dtype=pl.float64, device=device, requires_grad=True)
    out = pl.setitem(x, 1, value)  # a (1,) value into one element: leading 1s are ignored
    assert out.dtype is pl.float32
    (out * pl.tensor([1.0, 2.0, 3.0], device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 3.0])
    assert value.grad.dtype is pl.float64 and value.grad.numpy().tolist() == [2.0]
    scalar = pl.setitem(pl.tensor(3.0, device=device), (), 5.0)
    assert scalar.shape == () and scalar.item() == 5.0


def test_setitem_gradient_of_one_input(device, rng):
    x, value = _leaf(rng, (3, 4), device), _leaf(rng, (4,), device)
    assert pl.graph.gradcheck(lambda v: pl.setitem(x.detach(), 1, v), [value])
    assert pl.graph.gradgradcheck(lambda a: pl.setitem(a, 1, value.detach()) * a, [x])


SETITEM_ERRORS = [
    (
        lambda x: pl.setitem(x, 0, pl.ones(3)),
        ValueError,
        r"setitem: a value of shape \(3,\) cannot be broadcast to the shape \(4,\) that the "
        r"index selects \(tensor of shape \(3, 4\)\)",
    ),
    (lambda x: pl.setitem(x, (slice(None), 0), pl.ones(2, 3)), ValueError, r"shape \(2, 3\)"),
    (lambda x: pl.setitem(x, 3, 1.0), IndexError, r"setitem: index 3 is out of range"),
    (lambda x: pl.setitem(x, 1.5, 1.0), TypeError, r"setitem: unsupported index of type float"),
    (lambda x: pl.setitem(x, 0, "a"), TypeError, r"setitem: expected a Tensor or a Python num"),
    (lambda x: pl.setitem([1.0], 0, 1.0), TypeError, r"setitem: expected a Tensor for x"),
]


@pytest.mark.parametrize("call, error, message", SETITEM_ERRORS)
def test_setitem_errors(call, error, message):
    with pytest.raises(error, match=message):
        call(pl.zeros(3, 4))


def test_setitem_device_mismatch_is_an_error():
    pytest.importorskip("mlx.core")
    with pytest.raises(RuntimeError, match="setitem: expected all tensors on one device"):
        pl.setitem(pl.zeros(3), 0, pl.ones((), device="gpu"))


def test_random_setitems_match_numpy(device):
    """200 seeded random indices (see :func:`_random_key`), repeats included: values equal
    NumPy's assignment, gradients the last-write rule's."""
    rng = np.random.default_rng(11)
    checked = 0
    while checked < 200:
        shape = tuple(int(n) for n in rng.integers(0, 4, size=rng.integers(0, 4)))
        key = _random_key(rng, shape)
        try:
            selected = np.empty(shape)[key].shape
        except IndexError:
            continue
        _check_setitem(device, rng, key, shape, selected)
        checked += 1
