"""pylucid.interop: DLPack export and import, NumPy's ``__array__`` and ``asarray``; what
shares memory, what copies, and what is refused."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import pylucid as pl
from pylucid import interop
from pylucid.interop import asarray, from_dlpack

torch = pytest.importorskip("torch", reason="torch (a test peer) is not installed")

#: The dtypes NumPy's DLPack carries, with their torch counterparts.
DLPACK_DTYPES = {
    "bool": torch.bool,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def sample(name: str) -> np.ndarray:
    """Four distinct values of dtype ``name``."""
    return np.array([0, 1, 0, 1] if name == "bool" else [1, -2, 3, 4]).astype(name)


def mlx_core() -> Any:
    return pytest.importorskip("mlx.core", reason="mlx is not installed")


# -- export ---------------------------------------------------------------------------------
def test_importing_the_module_installs_the_protocol() -> None:
    assert pl.Tensor.__dlpack__ is interop.tensor_dlpack
    assert pl.Tensor.__dlpack_device__ is interop.tensor_dlpack_device


@pytest.mark.parametrize("name", DLPACK_DTYPES)
def test_torch_shares_a_cpu_tensor(name: str) -> None:
    x = pl.from_numpy(sample(name))
    exported = torch.from_dlpack(x)
    assert exported.dtype == DLPACK_DTYPES[name] and exported.tolist() == x.tolist()
    exported[0] = exported[1]  # a write through torch shows in the tensor
    assert x.tolist()[0] == x.tolist()[1]
    assert x.__dlpack_device__() == (1, 0)


def test_numpy_shares_a_cpu_tensor_including_views() -> None:
    x = pl.tensor(np.arange(12.0).reshape(3, 4))
    view = x.transpose(0, 1)[1:]
    array = np.from_dlpack(view)
    assert np.shares_memory(array, x.numpy()) and array.strides == view._storage.strides
    np.testing.assert_array_equal(array, view.numpy())


def test_negative_strides_are_exported_as_a_copy() -> None:
    base = np.arange(6.0)
    flipped = pl.from_numpy(base[::-1])
    exported = torch.from_dlpack(flipped)  # torch 2.13 aborts on negative DLPack strides
    assert exported.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    exported[0] = -1.0
    assert base[-1] == 5.0
    with pytest.raises(BufferError, match="negative strides"):
        flipped.__dlpack__(copy=False)


def test_export_refuses_a_tensor_that_requires_grad(device: str) -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True, device=device)
    message = "Can't export tensors that require gradient, use tensor.detach()"
    with pytest.raises(BufferError, match=message.replace("(", r"\(").replace(")", r"\)")):
        torch.from_dlpack(x)
    with pytest.raises(BufferError, match="require gradient"):
        np.from_dlpack(x * 2.0)
    assert torch.from_dlpack(x.detach()).tolist() == [1.0, 2.0]


def test_cpu_bfloat16_export_is_refused_with_a_workaround() -> None:
    x = pl.tensor([1.0, 2.5], dtype=pl.bfloat16)
    with pytest.raises(BufferError, match=r"no bfloat16.*view\(np.uint16\)"):
        torch.from_dlpack(x)
    shared = torch.from_numpy(x.numpy().view(np.uint16)).view(torch.bfloat16)
    assert shared.tolist() == [1.0, 2.5]


@pytest.mark.parametrize("name", [*DLPACK_DTYPES, "bfloat16"])
def test_mlx_tensors_are_exported_as_copies(name: str) -> None:
    mlx_core()
    x = pl.tensor(sample(name), dtype=name, device="gpu")
    exported = torch.from_dlpack(x)
    assert str(exported.dtype) == f"torch.{name}" and exported.tolist() == x.tolist()
    before = x.tolist()
    exported[0] = exported[1]  # the copy is the consumer's: the tensor keeps its values
    assert x.tolist() == before
    with pytest.raises(BufferError, match="exported as a copy"):
        x.__dlpack__(copy=False)


# -- import ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", DLPACK_DTYPES)
def test_from_dlpack_shares_numpy_and_torch_memory(name: str) -> None:
    array = sample(name)
    x = from_dlpack(array)
    assert x.device == "cpu" and x.dtype.name == name and np.shares_memory(x.numpy(), array)
    source = torch.from_numpy(sample(name))
    y = from_dlpack(source)
    assert y.dtype.name == name and y.tolist() == source.tolist()
    source[0] = source[1]  # a write through torch shows in the tensor
    assert y.tolist()[0] == y.tolist()[1]


def test_round_trip_numpy_pylucid_torch_shares_one_buffer() -> None:
    array = np.arange(6.0).reshape(2, 3)
    back = from_dlpack(torch.from_dlpack(from_dlpack(array))).numpy()
    assert np.shares_memory(back, array)
    back[1, 2] = 42.0
    assert array[1, 2] == 42.0


def test_from_dlpack_of_an_mlx_array_stays_on_mlx() -> None:
    mx = mlx_core()
    array = mx.array([1.0, 2.0, 3.0], dtype=mx.bfloat16)
    x = from_dlpack(array)
    assert x.device == "gpu" and x.dtype is pl.bfloat16 and x.tolist() == [1.0, 2.0, 3.0]
    array[0] = 9.0  # MLX gives the array a new value; the tensor keeps its own
    assert x.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(TypeError, match="uint8"):
        from_dlpack(mx.array([1], dtype=mx.uint8))


def test_from_dlpack_refusals() -> None:
    with pytest.raises(TypeError, match=r"from_dlpack: NumPy .* cannot import .*bfloat16"):
        from_dlpack(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(BufferError, match="from_dlpack: Tensor refused to export.*detach"):
        from_dlpack(torch.ones(2, requires_grad=True))
    with pytest.raises(BufferError, match="from_dlpack: Can't export tensors that require"):
        from_dlpack(pl.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match="from_dlpack: expected an object with __dlpack__"):
        from_dlpack([1.0, 2.0])
    with pytest.raises(TypeError, match="from_dlpack: ndarray of unsupported dtype 'uint8'"):
        from_dlpack(np.arange(3, dtype=np.uint8))


def test_from_dlpack_of_device_memory_goes_through_mlx() -> None:
    mlx_core()

    class OnCuda:  # a producer on a device this machine has not got
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

        def __dlpack__(self, **options: Any) -> Any:
            raise BufferError("no CUDA device")

    with pytest.raises(TypeError, match="from_dlpack: MLX cannot import this OnCuda"):
        from_dlpack(OnCuda())


def test_from_dlpack_of_a_tensor_is_a_detached_alias(device: str) -> None:
    x = pl.tensor([1.0, 2.0], device=device)
    y = from_dlpack(x)
    assert y is not x and y._storage is x._storage and y._version is x._version


# -- __array__ ------------------------------------------------------------------------------
def test_array_protocol_shares_or_copies_as_numpy_2_asks() -> None:
    x = pl.tensor([1.0, 2.0])
    assert np.shares_memory(np.asarray(x), x.numpy())
    assert np.shares_memory(np.asarray(x, copy=False), x.numpy())
    assert not np.shares_memory(np.array(x, copy=True), x.numpy())
    converted = np.asarray(x, dtype=np.float64)
    assert converted.dtype == np.float64 and converted.tolist() == [1.0, 2.0]
    assert np.shares_memory(np.asarray(x, dtype=np.float32, copy=False), x.numpy())
    assert not np.asarray(pl.tensor([1.0], requires_grad=True)).flags.writeable
    assert np.array(pl.tensor([1.0], requires_grad=True), copy=True).flags.writeable


def test_array_protocol_on_mlx_copies() -> None:
    mlx_core()
    x = pl.tensor([1.0, 2.0], device="gpu")
    assert np.asarray(x).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(x, copy=False)


def test_array_protocol_refuses_a_conversion_without_a_copy() -> None:
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(pl.tensor([1.0, 2.0]), dtype=np.float64, copy=False)


# -- asarray --------------------------------------------------------------------------------
def test_asarray_of_a_tensor(device: str) -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True, device=device)
    assert asarray(x) is x
    detached = asarray(x, requires_grad=False)
    assert not detached.requires_grad and detached._storage is x._storage
    converted = asarray(x, dtype=pl.float64)
    assert converted.dtype is pl.float64 and converted.grad_fn is not None  # differentiable
    copied = asarray(x, copy=True)
    assert copied.grad_fn is not None and copied.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="copy=False.*float32 .* to float64 .* needs a copy"):
        asarray(x, dtype=pl.float64, copy=False)
    plain = pl.tensor([3.0], device=device)
    leaf = asarray(plain, requires_grad=True)
    assert leaf.requires_grad and leaf.is_leaf and not plain.requires_grad


def test_asarray_copy_true_gives_new_memory() -> None:
    x = pl.tensor([1.0, 2.0])
    copied = asarray(x, copy=True)
    assert not np.shares_memory(copied.numpy(), x.numpy())


def test_asarray_moves_between_devices() -> None:
    mlx_core()
    x = asarray(np.arange(3.0), device="gpu")
    assert x.device == "gpu" and x.dtype is pl.float64 and x.tolist() == [0.0, 1.0, 2.0]
    back = asarray(x, device="cpu", dtype=pl.float32)
    assert back.device == "cpu" and back.dtype is pl.float32
    with pytest.raises(ValueError, match="copy=False"):
        asarray(np.arange(3.0), device="gpu", copy=False)


def test_asarray_shares_numpy_torch_and_array_likes() -> None:
    array = np.arange(4.0)
    x = asarray(array, copy=False)
    assert x.device == "cpu" and np.shares_memory(x.numpy(), array)
    source = torch.arange(3)
    y = asarray(source)
    source[0] = 7
    assert y.tolist() == [7, 1, 2] and y.dtype is pl.int64

    class ArrayLike:
        def __init__(self) -> None:
            self.data = np.ones(2, dtype=np.int32)

        def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
            return self.data

    like = ArrayLike()
    assert np.shares_memory(asarray(like).numpy(), like.data)


def test_asarray_copies_sequences_and_numbers() -> None:
    assert asarray([1, 2]).dtype is pl.int64
    assert asarray([[1.0, 2.0]], dtype=pl.float16).shape == (1, 2)
    assert asarray(2.5).dtype is pl.float32 and asarray(True).dtype is pl.bool
    assert asarray(np.float64(1.5)).dtype is pl.float64
    assert asarray([1.0], requires_grad=True).requires_grad
    with pytest.raises(ValueError, match="copy=False.*list has no memory to share"):
        asarray([1.0], copy=False)


def test_asarray_converts_unsupported_numpy_dtypes_only_by_copy() -> None:
    pixels = np.array([0, 128, 255], dtype=np.uint8)
    x = asarray(pixels, dtype=pl.float32)
    assert x.dtype is pl.float32 and x.tolist() == [0.0, 128.0, 255.0]
    with pytest.raises(ValueError, match="copy=False.*uint8 becomes float32 only by a copy"):
        asarray(pixels, dtype=pl.float32, copy=False)
    with pytest.raises(TypeError, match="asarray: a NumPy array of unsupported dtype 'uint8'"):
        asarray(pixels)


@pytest.mark.parametrize("obj", [{"a": 1}, {1, 2}, "text", object()])
def test_asarray_refuses_unsupported_objects(obj: Any) -> None:
    with pytest.raises(
        TypeError, match=f"asarray: cannot make a tensor from a {type(obj).__name__}"
    ):
        asarray(obj)


def test_asarray_of_an_mlx_array() -> None:
    mx = mlx_core()
    x = asarray(mx.array([1, 2], dtype=mx.int32))
    assert x.device == "gpu" and x.dtype is pl.int32 and x.tolist() == [1, 2]
    assert asarray(mx.array([1.0]), device="cpu").device == "cpu"


def test_bfloat16_numpy_arrays_are_shared_without_dlpack() -> None:
    array = np.array([1.0, -0.0], dtype=ml_dtypes.bfloat16)
    x = asarray(array)
    assert x.dtype is pl.bfloat16 and np.shares_memory(x.numpy(), array)
