"""pylucid.serialization: save/load state dicts as safetensors, bit for bit, and refuse
hostile files with a clear ValueError."""

from __future__ import annotations

import json
import math
import os
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import pylucid as pl
from pylucid import serialization
from pylucid.optim import lr_scheduler
from pylucid.serialization import load, save

#: Values whose bits a round trip must keep: NaN payloads (quiet, signalling, negative),
#: -0.0, infinities, subnormals, extremes.
SPECIAL_BITS = {
    "float16": (np.uint16, [0x7E01, 0xFC01, 0x7C01, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x3C00]),
    "bfloat16": (np.uint16, [0x7FC1, 0xFFA5, 0x7F81, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x3F80]),
    "float32": (
        np.uint32,
        [0x7FC00001, 0xFF800001, 0x7F800001, 0x80000000, 0x7F800000, 0x00000001, 0x3F800000],
    ),
    "float64": (np.uint64, [0x7FF0000000000001, 0xFFF8000000000ABC, 0x8000000000000000, 1]),
}
INTEGERS = {
    "int32": np.array([-(2**31), -1, 0, 2**31 - 1], dtype=np.int32),
    "int64": np.array([-(2**63), -1, 0, 2**63 - 1], dtype=np.int64),
    "bool": np.array([True, False, True]),
}
DTYPES = [*SPECIAL_BITS, *INTEGERS]


def special_values(name: str) -> np.ndarray:
    """Edge values of dtype ``name`` as a NumPy array of that dtype."""
    if name in INTEGERS:
        return INTEGERS[name]
    unsigned, bits = SPECIAL_BITS[name]
    return np.array(bits, dtype=unsigned).view(pl.dtypes.as_dtype(name).numpy)


def bits(t: pl.Tensor) -> np.ndarray:
    """The tensor's raw bits as unsigned integers, read without converting them."""
    storage = t._storage
    unsigned = np.dtype(f"u{t.dtype.itemsize}")
    if isinstance(storage, np.ndarray):
        return np.asarray(storage, order="C").view(unsigned)
    import mlx.core as mx

    return np.array(storage.view(getattr(mx, f"uint{8 * t.dtype.itemsize}")))


def make(values: np.ndarray, device: str) -> pl.Tensor:
    """A tensor holding exactly ``values``' bits on ``device``."""
    return pl.from_numpy(values.copy()) if device == "cpu" else pl.tensor(values, device=device)


def write_safetensors(path: Path, header: dict[str, Any], data: bytes) -> Path:
    """A safetensors file written by hand: the 8-byte header length, header JSON, data."""
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    return path


# -- round trips ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", DTYPES)
def test_round_trip_is_bitwise_for_every_dtype(name: str, device: str, tmp_path: Path) -> None:
    values = special_values(name)
    original = {"row": make(values, device), "scalar": make(values[:1].reshape(()), device)}
    original["empty"] = make(values[:0].reshape(0, 3), device)
    save(original, tmp_path / "c.safetensors")
    loaded = load(tmp_path / "c.safetensors")
    assert list(loaded) == ["row", "scalar", "empty"]
    for key, t in original.items():
        back = loaded[key]
        assert back.dtype is t.dtype and back.shape == t.shape and back.device == device
        np.testing.assert_array_equal(bits(back), bits(t), err_msg=f"{name} {key}")


@pytest.mark.parametrize("name", DTYPES)
def test_load_onto_the_other_device(name: str, device: str, tmp_path: Path) -> None:
    pytest.importorskip("mlx.core", reason="mlx is not installed: no second device")
    other = "gpu" if device == "cpu" else "cpu"
    values = special_values(name)
    save({"w": make(values, device)}, tmp_path / "c.safetensors")
    back = load(tmp_path / "c.safetensors", device=other)["w"]
    assert back.device == other and back.dtype.name == name
    np.testing.assert_array_equal(bits(back), values.view(f"u{values.dtype.itemsize}"))


def test_flat_state_dict_keys_are_readable_by_safetensors_and_mlx(
    device: str, tmp_path: Path
) -> None:
    weight = pl.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    half = pl.tensor([0.5, -0.0], dtype=pl.bfloat16, device=device)
    path = tmp_path / "model.safetensors"
    save({"0.weight": weight, "0.bias": half, "odd/key": weight, "5": half}, path)
    plain = safetensors.numpy.load_file(path)
    assert set(plain) == {"0.weight", "0.bias", "odd/key", "5"}
    np.testing.assert_array_equal(plain["0.weight"], [[1.0, 2.0], [3.0, 4.0]])
    assert plain["0.bias"].dtype == ml_dtypes.bfloat16
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed")
    arrays = mx.load(str(path))
    assert set(arrays) == set(plain) and arrays["0.bias"].dtype == mx.bfloat16
    np.testing.assert_array_equal(np.array(arrays["odd/key"]), plain["0.weight"])


def test_nested_keys_are_paths_and_collision_free(tmp_path: Path) -> None:
    a, b, c, d = (pl.tensor([float(i)]) for i in range(4))
    state = {"x/y": {"7": a, 7: b}, "%": [c], "": {"": d}}
    save(state, tmp_path / "c.safetensors")
    with safetensors.safe_open(tmp_path / "c.safetensors", framework="numpy") as f:
        assert set(f.keys()) == {"x%2Fy/%37", "x%2Fy/7", "%25/0", "/"}
    back = load(tmp_path / "c.safetensors")
    assert [type(k) for k in back["x/y"]] == [str, int]
    assert back["x/y"]["7"].item() == 0.0 and back["x/y"][7].item() == 1.0
    assert back["%"][0].item() == 2.0 and back[""][""].item() == 3.0


def test_a_tensor_on_its_own_and_empty_containers(device: str, tmp_path: Path) -> None:
    save(pl.tensor(3, device=device), tmp_path / "t.safetensors")
    assert set(safetensors.numpy.load_file(tmp_path / "t.safetensors")) == {"tensor"}
    back = load(tmp_path / "t.safetensors")
    assert back.item() == 3 and back.dtype is pl.int64 and back.device == device
    save({"a": {}, "b": [], "c": ()}, tmp_path / "e.safetensors")
    assert load(tmp_path / "e.safetensors") == {"a": {}, "b": [], "c": ()}


def test_non_tensor_structure_keeps_its_types(tmp_path: Path) -> None:
    state = {
        "state": {0: {"step": 3, "exp_avg": pl.ones(2)}, 1: {"step": 3}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1], "nesterov": False}],
        "numbers": [1.0, -0.0, math.inf, -math.inf, math.nan, 2**70, -5, 1e-310, True, None],
        "text": "naïve ☃",
        "nested": ((1, (2.5, "x")), [[None]]),
    }
    save(state, tmp_path / "c.safetensors")
    back = load(tmp_path / "c.safetensors")
    assert list(back["state"]) == [0, 1] and all(type(k) is int for k in back["state"])
    assert back["state"][0]["step"] == 3 and type(back["state"][0]["step"]) is int
    assert back["param_groups"] == state["param_groups"]
    assert type(back["param_groups"][0]["betas"]) is tuple
    numbers = back["numbers"]
    assert [type(v) for v in numbers] == [type(v) for v in state["numbers"]]
    assert numbers[:4] == [1.0, -0.0, math.inf, -math.inf] and math.copysign(1, numbers[1]) < 0
    assert math.isnan(numbers[4]) and numbers[5:] == [2**70, -5, 1e-310, True, None]
    assert back["text"] == "naïve ☃" and back["nested"] == ((1, (2.5, "x")), [[None]])


def test_optimizer_state_round_trip(tmp_path: Path) -> None:
    weight = pl.tensor([1.0, -2.0], requires_grad=True)
    optimizer = pl.optim.SGD([weight], lr=0.1, momentum=0.9)
    for _ in range(2):
        optimizer.zero_grad()
        (weight * weight).sum().backward()
        optimizer.step()
    save(optimizer.state_dict(), tmp_path / "opt.safetensors")
    fresh = pl.optim.SGD([pl.tensor([0.0, 0.0], requires_grad=True)], lr=0.5)
    fresh.load_state_dict(load(tmp_path / "opt.safetensors"))
    assert fresh.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
    mine = next(iter(fresh.state.values()))
    theirs = next(iter(optimizer.state.values()))
    assert set(mine) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, pl.Tensor):
            np.testing.assert_array_equal(mine[key].numpy(), value.numpy())
        else:
            assert mine[key] == value


def test_scheduler_state_round_trip(tmp_path: Path) -> None:
    optimizer = pl.optim.SGD([pl.tensor([1.0], requires_grad=True)], lr=0.1)
    scheduler = lr_scheduler.MultiStepLR(optimizer, milestones=[2, 4])
    plateau = lr_scheduler.ReduceLROnPlateau(optimizer)  # holds mode_worse = inf
    optimizer.step()
    scheduler.step()
    plateau.step(1.0)
    save({"multistep": scheduler.state_dict(), "plateau": plateau.state_dict()}, tmp_path / "s")
    back = load(tmp_path / "s")
    assert back["plateau"] == plateau.state_dict() and back["plateau"]["mode_worse"] == math.inf
    assert back["multistep"]["milestones"] == {2: 1, 4: 1}  # a Counter loads as a dict
    fresh_optimizer = pl.optim.SGD([pl.tensor([1.0], requires_grad=True)], lr=0.1)
    fresh = lr_scheduler.MultiStepLR(fresh_optimizer, milestones=[9])
    fresh.load_state_dict(back["multistep"])
    for _ in range(4):
        for opt, sched in ((optimizer, scheduler), (fresh_optimizer, fresh)):
            opt.step()
            sched.step()
    assert fresh.get_last_lr() == scheduler.get_last_lr()


def test_non_contiguous_tensors_are_saved_contiguous(device: str, tmp_path: Path) -> None:
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    views = {
        "transposed": pl.tensor(grid, device=device).transpose(0, 1),
        "strided": pl.tensor(grid, device=device)[:, ::2],
    }
    if device == "cpu":
        views["flipped"] = pl.from_numpy(grid[::-1, ::-3])
        views["broadcast"] = pl.from_numpy(np.broadcast_to(grid[:1], (4, 6)))
    save(views, tmp_path / "c.safetensors")
    back = load(tmp_path / "c.safetensors")
    for key, view in views.items():
        np.testing.assert_array_equal(back[key].numpy(), view.numpy(), err_msg=key)
        assert back[key].shape == view.shape


def test_grad_tensors_come_back_as_plain_leaves(device: str, tmp_path: Path) -> None:
    leaf = pl.tensor([1.0, 2.0], requires_grad=True, device=device)
    computed = leaf * 3.0
    save({"leaf": leaf, "computed": computed}, tmp_path / "c.safetensors")
    back = load(tmp_path / "c.safetensors")
    for key, original in (("leaf", leaf), ("computed", computed)):
        assert back[key].is_leaf and not back[key].requires_grad
        np.testing.assert_array_equal(back[key].numpy(), original.detach().numpy())
    back["leaf"].requires_grad_()  # usable as a parameter again
    (back["leaf"] * back["leaf"]).sum().backward()
    np.testing.assert_array_equal(back["leaf"].grad.numpy(), [2.0, 4.0])


def test_a_shared_tensor_is_stored_twice_and_loaded_once(tmp_path: Path) -> None:
    tied = pl.tensor([1.0, 2.0])
    save({"embed.weight": tied, "head.weight": tied}, tmp_path / "c.safetensors")
    plain = safetensors.numpy.load_file(tmp_path / "c.safetensors")
    assert set(plain) == {"embed.weight", "head.weight"}
    back = load(tmp_path / "c.safetensors")
    assert back["embed.weight"] is back["head.weight"]
    view = tied.detach()  # shares memory, but is another tensor: loaded independently
    save([tied, view], tmp_path / "v.safetensors")
    first, second = load(tmp_path / "v.safetensors")
    assert first is not second and not np.shares_memory(first.numpy(), second.numpy())


def test_files_from_other_writers_load_as_flat_dicts(tmp_path: Path) -> None:
    path = tmp_path / "foreign.safetensors"
    safetensors.numpy.save_file(
        {"a": np.arange(3, dtype=np.int32), "b": np.ones((2, 2), dtype=ml_dtypes.bfloat16)},
        path,
        metadata={"format": "np"},
    )
    back = load(path)
    assert set(back) == {"a", "b"} and all(t.device == "cpu" for t in back.values())
    assert back["a"].dtype is pl.int32 and back["a"].tolist() == [0, 1, 2]
    assert back["b"].dtype is pl.bfloat16 and back["b"].shape == (2, 2)
    back["a"][0] = 7  # loaded CPU tensors own writable memory
    assert back["a"].tolist() == [7, 1, 2]


def test_save_replaces_the_file_atomically(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "c.safetensors"
    save({"w": pl.tensor([1.0])}, path)
    before = path.read_bytes()

    def crash(arrays: dict, filename: str, metadata: dict) -> None:
        Path(filename).write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.numpy, "save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        save({"w": pl.tensor([2.0])}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.safetensors"]  # the temporary file was removed


def test_save_into_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save({"w": pl.tensor([1.0])}, tmp_path / "nowhere" / "c.safetensors")


# -- refused objects ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("obj", "where", "what"),
    [
        ({"a": [1, lambda: 0]}, r"obj\['a'\]\[1\]", "function"),
        ({"a": {1, 2}}, r"obj\['a'\]", "set"),
        ({"a": pl.nn.Linear(2, 2)}, r"obj\['a'\]", r"Linear.*state_dict\(\)"),
        ({"a": np.ones(2, dtype=object)}, r"obj\['a'\]", "dtype object"),
        ({"a": {2.5: pl.ones(1)}}, r"obj\['a'\] has the key 2\.5", "must be str or int"),
        ({"a": {True: 1}}, r"obj\['a'\] has the key True", "must be str or int"),
        ([{("t",): 1}], r"obj\[0\] has the key \('t',\)", "must be str or int"),
    ],
)
def test_save_refuses_what_a_checkpoint_cannot_hold(
    obj: Any, where: str, what: str, tmp_path: Path
) -> None:
    with pytest.raises(TypeError, match=f"save: {where}.*{what}"):
        save(obj, tmp_path / "c.safetensors")
    assert not os.listdir(tmp_path)


def test_save_refuses_a_reserved_key_and_an_oversized_header(
    tmp_path: Path, monkeypatch: Any
) -> None:
    with pytest.raises(ValueError, match=r"obj\['__metadata__'\] .* safetensors format reserves"):
        save({"__metadata__": pl.ones(1)}, tmp_path / "c.safetensors")
    monkeypatch.setattr(serialization, "MAX_HEADER_BYTES", 1000)
    with pytest.raises(ValueError, match="header .* would take .* more than the 1000"):
        save({"losses": [0.5] * 500}, tmp_path / "c.safetensors")
    assert not os.listdir(tmp_path)


def test_save_refuses_a_cycle(tmp_path: Path) -> None:
    looped: list[Any] = [1]
    looped.append({"back": looped})
    with pytest.raises(ValueError, match=r"save: obj\[1\]\['back'\] contains itself"):
        save(looped, tmp_path / "c.safetensors")


# -- hostile files --------------------------------------------------------------------------
def _valid_bytes(tmp_path: Path) -> bytes:
    save({"w": pl.tensor([1.0, 2.0, 3.0])}, tmp_path / "valid.safetensors")
    return (tmp_path / "valid.safetensors").read_bytes()


def _f32(shape: list[int], start: int, end: int) -> dict[str, Any]:
    return {"dtype": "F32", "shape": shape, "data_offsets": [start, end]}


def _hostile_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Name -> (a file written by hand, what the ValueError must say)."""
    valid = _valid_bytes(tmp_path)
    files: dict[str, tuple[Path, str]] = {}

    def add(name: str, data: bytes, expected: str) -> None:
        (tmp_path / name).write_bytes(data)
        files[name] = (tmp_path / name, expected)

    def add_header(name: str, header: dict, data: bytes, expected: str) -> None:
        files[name] = (write_safetensors(tmp_path / name, header, data), expected)

    add("truncated_data", valid[:-3], "not fully covered")
    add("truncated_header", valid[:20], "invalid header length")
    add("truncated_length", valid[:5], "header too small")
    add("empty", b"", "header too small")
    add("garbage", bytes(range(256)) * 4, "header too large")
    add("huge_header_length", struct.pack("<Q", 2**62) + b"{}", "header too large")
    add("pickle", pickle.dumps({"w": [1.0, 2.0]}), "looks like a pickle")
    with zipfile.ZipFile(tmp_path / "archive.zip", "w") as archive:
        archive.writestr("data.pkl", pickle.dumps([1]))
    add("zip", (tmp_path / "archive.zip").read_bytes(), "zip archive.*torch.save")
    add_header("offsets_out_of_range", {"w": _f32([2], 0, 800)}, bytes(8), "offset")
    overlap = {"w": _f32([2], 0, 8), "v": _f32([2], 4, 12)}
    add_header("overlapping_offsets", overlap, bytes(12), "invalid offset for tensor `v`")
    bad_dtype = {"w": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}
    add_header("wrong_dtype_string", bad_dtype, bytes(8), "unknown variant `F99`")
    add_header("shape_not_matching_bytes", {"w": _f32([3], 0, 8)}, bytes(8), "shape")
    add_header("shape_overflow", {"w": _f32([2**40, 2**40], 0, 8)}, bytes(8), "overflow")
    deep_shape = {"w": _f32([1] * 5001, 0, 4)}  # (found from outside: NumPy's 64-dim error)
    add_header("too_many_dimensions", deep_shape, bytes(4), "declares 5001 dimensions")
    uint8 = {"w": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}
    add_header("unsupported_dtype", uint8, bytes(3), "dtype U8, which pylucid does not hold")
    numeric = {"__metadata__": {"pylucid": 1}, "w": _f32([2], 0, 8)}
    add_header("non_string_metadata", numeric, bytes(8), "expected a string")

    def with_structure(name: str, text: str, expected: str) -> None:
        header = {"__metadata__": {"pylucid": text}, "w": _f32([2], 0, 8)}
        add_header(name, header, bytes(8), expected)

    def root(node: Any) -> str:
        return json.dumps({"version": 1, "root": node})

    with_structure("malformed_json", '{"version": 1, "root": {', "not valid JSON")
    with_structure("not_an_object", "[1, 2]", "must be an object with 'version' and 'root'")
    with_structure("future_version", json.dumps({"version": 99, "root": 1}), "version 99")
    missing = {"dict": [["w", {"tensor": "missing", "device": "cpu"}]]}
    with_structure("missing_tensor", root(missing), r"root\['w'\] names the tensor 'missing'")
    with_structure("unknown_node", root({"dict": [["w", {"set": [1]}]]}), "unknown form")
    with_structure("bad_dict_entry", root({"dict": [[1.5, 2]]}), "not \\[str or int key")
    with_structure("bad_float", root({"float": "big"}), "expected nan, inf or -inf")
    with_structure("bad_tensor_ref", root({"tensor": 3, "device": "cpu"}), "malformed tensor")
    same = {"tensor": "w", "device": "cpu", "same_as": "x"}
    with_structure("dangling_same_as", root(same), "'x' as the same tensor, not loaded before")
    with_structure("unknown_device", root({"tensor": "w", "device": "tpu"}), "unknown device")
    deep = '{"version": 1, "root": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with_structure("too_deep", deep, "nest")
    return files


def test_hostile_files_raise_a_clear_value_error(tmp_path: Path) -> None:
    files = _hostile_files(tmp_path)
    assert len(files) == 27
    for name, (path, expected) in files.items():
        with pytest.raises(ValueError, match=expected) as caught:
            load(path)
        message = str(caught.value)
        assert message.startswith("load: ") and str(path) in message, name
        error = caught.value  # no raw safetensors or JSON traceback attached
        assert error.__cause__ is None, name
        assert error.__context__ is None or error.__suppress_context__, name


def test_missing_files_and_directories(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="load: no such file: .*absent.safetensors"):
        load(tmp_path / "absent.safetensors")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        load(tmp_path)


def test_unknown_load_device(tmp_path: Path) -> None:
    save({"w": pl.ones(1)}, tmp_path / "c.safetensors")
    with pytest.raises(ValueError, match="load: device='tpu': unknown device"):
        load(tmp_path / "c.safetensors", device="tpu")


def test_a_saved_device_that_is_unavailable(tmp_path: Path, monkeypatch: Any) -> None:
    structure = {"version": 1, "root": {"tensor": "w", "device": "gpu"}}
    header = {"__metadata__": {"pylucid": json.dumps(structure)}, "w": _f32([2], 0, 8)}
    path = write_safetensors(tmp_path / "c.safetensors", header, bytes(8))
    resolve = serialization.backends.resolve

    def without_gpu(device: str) -> Any:
        if device == "gpu":
            raise pl.backends.BackendUnavailableError("mlx is not installed")
        return resolve(device)

    monkeypatch.setattr(serialization.backends, "resolve", without_gpu)
    with pytest.raises(pl.backends.BackendUnavailableError, match="saved on 'gpu'.*device='cpu'"):
        load(path)
    assert load(path, device="cpu").tolist() == [0.0, 0.0]


def test_file_objects_and_numpy_arrays(tmp_path: Path) -> None:
    """torch.save(obj, open(path, 'wb')) and NumPy arrays and scalars in a checkpoint
    (pytorch/examples' time_sequence_prediction saves an array into a file object)."""
    import io

    arrays = {"u8": np.arange(3, dtype=np.uint8), "empty": np.zeros((2, 0)),
              "scalar": np.float32(1.5), "flag": np.bool_(True), "w": pl.ones(2)}  # fmt: skip
    buffer = io.BytesIO()
    save(arrays, buffer)
    buffer.seek(0)
    loaded = load(buffer)
    assert loaded["u8"].dtype == np.uint8 and loaded["u8"].tolist() == [0, 1, 2]
    assert loaded["empty"].shape == (2, 0) and isinstance(loaded["scalar"], np.float32)
    assert loaded["scalar"] == 1.5 and loaded["flag"] is np.True_
    assert loaded["w"].tolist() == [1.0, 1.0]
    with open(tmp_path / "data.pt", "wb") as file:
        save(np.linspace(0, 1, 5), file)
    np.testing.assert_array_equal(load(tmp_path / "data.pt"), np.linspace(0, 1, 5))
    with pytest.raises(TypeError, match="save its state_dict"):
        save(pl.nn.Linear(2, 3), tmp_path / "model.pt")
    with pytest.raises(TypeError, match="dtype complex128"):
        save(np.ones(2, dtype=complex), tmp_path / "c.pt")
