"""pylucid.load of PyTorch's torch.save checkpoints (the zip format), without PyTorch.

Checkpoints are written two ways: by hand, opcode by opcode (the hostile ones, so that they
are tested where torch is not installed), and by torch.save itself, whose tensors must come
back bit for bit."""

from __future__ import annotations

import io
import os
import pickle
import struct
import tracemalloc
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import pylucid as pl
from pylucid import torch_checkpoint
from pylucid.torch_unpickler import UnpicklingError

MLX_MISSING = "mlx" not in pl.backends.available()


# -- a pickle assembler: data.pkl written opcode by opcode -----------------------------------
def global_(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def integer(value: int) -> bytes:
    data = pickle.encode_long(value)
    return b"\x8a" + bytes([len(data)]) + data


def tup(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def call(function: bytes, *arguments: bytes) -> bytes:
    return function + tup(*arguments) + b"R"


def mapping(*pairs: tuple[str, bytes]) -> bytes:
    return b"}(" + b"".join(text(key) + value for key, value in pairs) + b"u"


TRUE, FALSE, EMPTY_HOOKS = b"\x88", b"\x89", call(global_("collections", "OrderedDict"))


def storage(key: str, numel: int, kind: str = "FloatStorage", location: str = "cpu") -> bytes:
    """A persistent id: ('storage', torch.<kind>, key, location, numel)."""
    fields = (text("storage"), global_("torch", kind), text(key), text(location), integer(numel))
    return tup(*fields) + b"Q"


def tensor(
    store: bytes, size: tuple, stride: tuple, offset: int = 0, requires_grad: bool = False
) -> bytes:
    return call(
        global_("torch._utils", "_rebuild_tensor_v2"),
        store,
        integer(offset),
        tup(*map(integer, size)),
        tup(*map(integer, stride)),
        TRUE if requires_grad else FALSE,
        EMPTY_HOOKS,
    )


def parameter(data: bytes, requires_grad: bool = True) -> bytes:
    rebuild = global_("torch._utils", "_rebuild_parameter")
    return call(rebuild, data, TRUE if requires_grad else FALSE, EMPTY_HOOKS)


def checkpoint(
    path: Path,
    body: bytes,
    storages: dict[str, bytes],
    *,
    byteorder: str | None = "little",
    records: dict[str, bytes] | None = None,
    raw_pickle: bool = False,
) -> Path:
    """A zip archive laid out as torch.save writes it (records under ``archive/``)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", body if raw_pickle else b"\x80\x02" + body + b".")
        if byteorder is not None:
            archive.writestr("archive/byteorder", byteorder)
        for key, data in storages.items():
            archive.writestr(f"archive/data/{key}", data)
        archive.writestr("archive/version", "3\n")
        for name, data in (records or {}).items():
            archive.writestr(f"archive/{name}", data)
    return path


def f32(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


def sample(path: Path) -> Path:
    """A state dict with a parameter, views sharing one storage, an offset view, a 0-d
    int64 tensor and a tensor that requires grad."""
    grid = storage("0", 6)
    body = mapping(
        ("grid", tensor(grid, (2, 3), (3, 1))),
        ("grid_t", tensor(grid, (3, 2), (1, 3))),
        ("row", tensor(grid, (3,), (1,), offset=3)),
        ("steps", tensor(storage("1", 1, "LongStorage"), (), ())),
        ("weight", parameter(tensor(storage("2", 2), (2,), (1,)))),
        ("trained", tensor(storage("3", 1), (1,), (1,), requires_grad=True)),
    )
    storages = {
        "0": f32(0, 1, 2, 3, 4, 5),
        "1": np.array([7], "<i8").tobytes(),
        "2": f32(-1, 1),
        "3": f32(9),
    }
    return checkpoint(path, body, storages)


# -- hand-written checkpoints ------------------------------------------------------------
def test_a_hand_written_checkpoint_loads(tmp_path: Path) -> None:
    loaded = pl.load(sample(tmp_path / "c.pt"))
    assert list(loaded) == ["grid", "grid_t", "row", "steps", "weight", "trained"]
    np.testing.assert_array_equal(loaded["grid"].numpy(), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(loaded["grid_t"].numpy(), [[0, 3], [1, 4], [2, 5]])
    np.testing.assert_array_equal(loaded["row"].numpy(), [3, 4, 5])
    assert loaded["steps"].shape == () and loaded["steps"].dtype is pl.int64
    assert loaded["steps"].item() == 7
    weight = loaded["weight"]
    assert isinstance(weight, pl.nn.Parameter) and weight.requires_grad
    assert type(loaded["trained"]) is pl.Tensor and loaded["trained"].requires_grad
    assert not loaded["grid"].requires_grad and loaded["grid"].is_leaf


def test_tensors_sharing_a_storage_share_memory_on_the_cpu(tmp_path: Path) -> None:
    loaded = pl.load(sample(tmp_path / "c.pt"))
    grid, transposed, row = loaded["grid"], loaded["grid_t"], loaded["row"]
    assert np.shares_memory(grid.numpy(), transposed.numpy())
    assert np.shares_memory(grid.numpy(), row.numpy())
    grid.add_(10.0)  # as in PyTorch, every view of the storage sees the change
    np.testing.assert_array_equal(transposed.numpy()[:, 1], [13, 14, 15])
    np.testing.assert_array_equal(row.numpy(), [13, 14, 15])


def test_one_tensor_object_saved_twice_loads_as_one(tmp_path: Path) -> None:
    weight = tensor(storage("0", 2), (2,), (1,))
    body = mapping(("embed", weight + b"q\x07"), ("head", b"h\x07"))  # BINPUT 7, BINGET 7
    loaded = pl.load(checkpoint(tmp_path / "c.pt", body, {"0": f32(1, 2)}))
    assert loaded["embed"] is loaded["head"]


def test_a_big_endian_checkpoint(tmp_path: Path) -> None:
    body = mapping(
        ("w", tensor(storage("0", 2), (2,), (1,))),
        ("n", tensor(storage("1", 1, "LongStorage"), (), ())),
        ("h", tensor(storage("2", 2, "BFloat16Storage"), (2,), (1,))),
    )
    halves = np.array([1.5, -2.25], ml_dtypes.bfloat16).view("<u2").astype(">u2").tobytes()
    storages = {
        "0": np.array([1.5, -2.25], ">f4").tobytes(),
        "1": np.array([2**40 + 3], ">i8").tobytes(),
        "2": halves,
    }
    loaded = pl.load(checkpoint(tmp_path / "c.pt", body, storages, byteorder="big"))
    assert loaded["w"].tolist() == [1.5, -2.25] and loaded["n"].item() == 2**40 + 3
    assert loaded["h"].dtype is pl.bfloat16 and loaded["h"].tolist() == [1.5, -2.25]


@pytest.mark.parametrize(
    ("kind", "code", "loaded"),
    [
        ("ByteStorage", "u1", pl.int32),
        ("CharStorage", "i1", pl.int32),
        ("ShortStorage", "<i2", pl.int32),
        ("BoolStorage", "?", pl.bool),
        ("IntStorage", "<i4", pl.int32),
    ],
)
def test_small_integers_widen_without_loss(
    kind: str, code: str, loaded: pl.DType, tmp_path: Path
) -> None:
    info = np.iinfo(code) if code != "?" else None
    values = np.array([info.min, 0, info.max] if info else [True, False, True], code)
    body = tensor(storage("0", 3, kind), (3,), (1,))
    result = pl.load(checkpoint(tmp_path / "c.pt", body, {"0": values.tobytes()}))
    assert result.dtype is loaded and result.tolist() == values.tolist()


def test_map_location_forms(tmp_path: Path) -> None:
    path = sample(tmp_path / "c.pt")

    class DeviceLike:  # what pylucid.device and torch.device have in common: str() is a name
        def __str__(self) -> str:
            return "cpu"

    forms: list[Any] = [
        None,
        "cpu",
        pl.device("cpu"),
        DeviceLike(),
        {"cpu": "cpu"},
        {"cuda:0": "gpu"},  # locations the dict lacks go to the default
        lambda storage, location: storage,
        lambda storage, location: storage.cpu(),
        lambda storage, location: None,
    ]
    for form in forms:
        loaded = pl.load(path, map_location=form)
        assert all(t.device == "cpu" for t in loaded.values()), form
        np.testing.assert_array_equal(loaded["row"].numpy(), [3, 4, 5])
    assert pl.load(path, device="cpu")["steps"].item() == 7


def test_map_location_refusals(tmp_path: Path) -> None:
    path = sample(tmp_path / "c.pt")
    for cuda in ("cuda", "cuda:1", "mps"):
        with pytest.raises((RuntimeError, ValueError), match=f"map_location='{cuda}'.*'gpu'"):
            pl.load(path, map_location=cuda)
    with pytest.raises(RuntimeError, match=r"storage\.cuda\(\): .*'gpu'"):
        pl.load(path, map_location=lambda storage, location: storage.cuda())
    with pytest.raises(TypeError, match="must return the storage it is given"):
        pl.load(path, map_location=lambda storage, location: "cpu")
    with pytest.raises(ValueError, match="map_location or device, not both"):
        pl.load(path, map_location="cpu", device="cpu")
    with pytest.raises(ValueError, match="load: map_location='tpu': unknown device"):
        pl.load(path, map_location="tpu")


@pytest.mark.skipif(MLX_MISSING, reason="mlx is not installed: no gpu device")
def test_map_location_gpu(tmp_path: Path, monkeypatch: Any) -> None:
    path = sample(tmp_path / "c.pt")
    for form in ("gpu", {"cpu": "gpu"}):
        loaded = pl.load(path, map_location=form)
        assert all(t.device == "gpu" for t in loaded.values())
        np.testing.assert_array_equal(loaded["grid_t"].numpy(), [[0, 3], [1, 4], [2, 5]])
        assert isinstance(loaded["weight"], pl.nn.Parameter)
    expanded = tensor(storage("0", 1), (1000, 1000), (0, 0))
    expanded_path = checkpoint(tmp_path / "e.pt", expanded, {"0": f32(1)})
    assert pl.load(expanded_path, map_location="gpu").shape == (1000, 1000)
    monkeypatch.setattr(torch_checkpoint, "MAX_REPEATED_BYTES", 1000)
    with pytest.raises(ValueError, match="overlap in memory.*map_location='cpu'"):
        pl.load(expanded_path, map_location="gpu")


def test_an_expanded_tensor_is_a_read_only_view(tmp_path: Path) -> None:
    expanded = tensor(storage("0", 2), (3, 2), (0, 1))
    loaded = pl.load(checkpoint(tmp_path / "c.pt", expanded, {"0": f32(1, 2)}))
    np.testing.assert_array_equal(loaded.numpy(), [[1, 2]] * 3)
    with pytest.raises(RuntimeError, match="read-only"):
        loaded.add_(1.0)


def test_file_objects_keywords_and_mmap(tmp_path: Path) -> None:
    path = sample(tmp_path / "c.pt")
    data = path.read_bytes()

    class Stream:  # a file object that can only read (a socket, a pipe)
        def __init__(self) -> None:
            self.inner = io.BytesIO(data)

        def read(self, size: int = -1) -> bytes:
            return self.inner.read(size)

    with open(path, "rb") as opened:
        sources = [io.BytesIO(data), opened, Stream()]
        for source in sources:
            assert pl.load(source)["row"].tolist() == [3.0, 4.0, 5.0]
    for flag in (None, True, False):
        assert pl.load(path, weights_only=flag, pickle_module=pickle)["steps"].item() == 7
    mapped = pl.load(path, mmap=True)
    assert mapped["row"].tolist() == [3.0, 4.0, 5.0]
    mapped["grid"].add_(1.0)  # copy-on-write: the file keeps its bytes
    assert path.read_bytes() == data and pl.load(path)["grid"].tolist()[0] == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="mmap=True needs a path"):
        pl.load(io.BytesIO(data), mmap=True)
    with pytest.raises(TypeError, match="pickle_module=.* is not supported"):
        pl.load(path, pickle_module=np)
    with pytest.raises(TypeError, match="weights_only must be a bool"):
        pl.load(path, weights_only="yes")


def test_a_safetensors_file_object(tmp_path: Path) -> None:
    pl.save({"w": pl.tensor([1.0, 2.0]), "n": 3}, tmp_path / "c.safetensors")
    buffer = io.BytesIO((tmp_path / "c.safetensors").read_bytes())
    loaded = pl.load(buffer, map_location=lambda storage, location: storage)
    assert loaded["w"].tolist() == [1.0, 2.0] and loaded["n"] == 3


def test_containers_and_scalars(tmp_path: Path) -> None:
    metadata = mapping(("", mapping(("version", integer(1)))))
    state = call(global_("collections", "OrderedDict")) + mapping(("_metadata", metadata)) + b"b"
    body = mapping(
        ("state", state),
        ("counter", call(global_("collections", "Counter"), mapping(("a", integer(2))))),
        ("size", call(global_("torch", "Size"), tup(integer(2), integer(3)))),
        ("device", call(global_("torch", "device"), text("cuda"), integer(0))),
        ("dtype", global_("torch", "bfloat16")),
        ("bytes", call(global_("_codecs", "encode"), text("\xff\x00"), text("latin1"))),
        ("set", call(global_("__builtin__", "set"), b"](" + integer(1) + integer(2) + b"e")),
        ("complex", call(global_("builtins", "complex"), integer(1), integer(-2))),
        ("float", b"G" + struct.pack(">d", -0.0)),
        ("list", b"](" + TRUE + b"N" + integer(-(2**70)) + b"e"),
    )
    loaded = pl.load(checkpoint(tmp_path / "c.pt", body, {}))
    assert type(loaded["state"]) is OrderedDict and loaded["state"]._metadata == {
        "": {"version": 1}
    }
    assert loaded["counter"] == {"a": 2} and type(loaded["counter"]).__name__ == "Counter"
    assert loaded["size"] == (2, 3) and loaded["device"] == "cuda:0"
    assert loaded["dtype"] is pl.bfloat16 and loaded["bytes"] == b"\xff\x00"
    assert loaded["set"] == {1, 2} and loaded["complex"] == 1 - 2j
    assert str(loaded["float"]) == "-0.0" and loaded["list"] == [True, None, -(2**70)]


# -- hostile files ---------------------------------------------------------------------------
class _Payload:
    """What an attacker pickles: unpickling calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        return (os.system, (self.command,))


class _Eval:
    def __reduce__(self) -> tuple:
        return (eval, ("1 + 1",))


def _hostile(tmp_path: Path, marker: Path) -> dict[str, tuple[Path, str]]:
    """Name -> (a checkpoint written by hand, what the ValueError must say)."""
    rebuild = global_("torch._utils", "_rebuild_tensor_v2")
    two = tensor(storage("0", 2), (2,), (1,))
    # (name, data.pkl's program, storages, expected message)
    programs: list[tuple[str, bytes, dict[str, bytes], str]] = [
        ("os_system_by_hand", call(global_("os", "system"), text(f"touch {marker}")), {},
         "GLOBAL os.system is not allowed.*never unpickles arbitrary objects"),
        ("whole_module", global_("torch.nn.modules.linear", "Linear") + b")\x81", {},
         "Linear is not allowed.*state_dict"),
        ("sparse", call(global_("torch._utils", "_rebuild_sparse_tensor"), integer(0)), {},
         "a sparse tensor .*which pylucid does not load"),
        ("newobj", call(global_("collections", "OrderedDict")) + b")\x81", {},
         "opcode NEWOBJ is not allowed"),
        # a refused global after a tensor whose storage is missing: nothing was read first
        ("global_after_tensor", b"](" + two + global_("subprocess", "Popen") + b"e", {},
         "GLOBAL subprocess.Popen"),
        ("empty_stack", b"a", {}, "empty stack"),
        ("unset_memo", b"h\x05", {}, "memo"),
        ("two_objects", integer(1) + integer(2), {}, "leaves a stack"),
        ("bytearray_bomb", call(global_("builtins", "bytearray"), integer(10**12)), {},
         "bytearray of bytes or list"),
        ("other_codec", call(global_("_codecs", "encode"), text("x"), text("rot13")), {},
         "only latin1"),
        ("call_a_list", b"](" + integer(1) + b"e)R", {}, "REDUCE calls a list"),
        ("function_as_value", b"]" + rebuild + b"a", {}, "holds a function outside a tensor"),
        ("bare_storage", storage("0", 1), {"0": f32(1)}, "holds a StorageRef outside a tensor"),
        ("not_a_storage", tup(text("module"), integer(1)) + b"Q", {}, "persistent id"),
        ("declared_twice", b"](" + storage("0", 2) + storage("0", 3) + b"e", {"0": f32(1, 2)},
         "declared twice"),
        ("offset_past_end", tensor(storage("0", 4), (4,), (1,), offset=2),
         {"0": f32(1, 2, 3, 4)}, r"offset 2 .* reaches element 5, past the storage's 4"),
        ("stride_past_end", tensor(storage("0", 6), (2, 3), (3, 2)), {"0": bytes(24)},
         "reaches element 7"),
        ("huge_numel", tensor(storage("0", 2**40), (2,), (1,)), {"0": f32(1, 2)},
         "declares 4398046511104 bytes for the storage '0', but data/0 holds 8"),
        ("huge_size", tensor(storage("0", 1), (2**40, 2**40), (0, 0)), {"0": f32(1)},
         "more elements than an array can hold"),
        ("huge_stride", tensor(storage("0", 2), (2,), (2**70,)), {"0": f32(1, 2)},
         "past the storage's 2"),
        ("negative_size", tensor(storage("0", 2), (-2,), (1,)), {"0": f32(1, 2)},
         "non-negative"),
        ("missing_record", tensor(storage("7", 2), (2,), (1,)), {}, "no record data/7"),
        ("bool_byte", tensor(storage("0", 2, "BoolStorage"), (2,), (1,)), {"0": b"\x01\x02"},
         "byte > 1"),
        ("complex", tensor(storage("0", 1, "ComplexFloatStorage"), (1,), (1,)),
         {"0": bytes(8)}, "complex64 tensor .*pylucid has no such dtype"),
        ("dtype_value", mapping(("d", global_("torch", "uint8"))), {},
         "dtype torch.uint8, which pylucid lacks"),
        ("int_requires_grad",
         tensor(storage("0", 1, "LongStorage"), (1,), (1,), requires_grad=True),
         {"0": bytes(8)}, "int64 that requires grad"),
        # a tuple holding one tuple twice, 40 times over: 2**40 values to hash as a key
        ("shared_tuples", b"}" + integer(1) + b"q\x000h\x00h\x00\x86" * 40 + integer(1) + b"s", {},
         "holds more than 4194304 values"),
        ("complex_overflow", call(global_("builtins", "complex"), integer(10**400)), {},
         "int too large"),
        ("int_parameter", parameter(tensor(storage("0", 1, "LongStorage"), (1,), (1,))),
         {"0": bytes(8)}, "int64 parameter that requires grad"),
        ("deep_lists", b"]" * 20_000 + b"a" * 19_999, {}, "nests containers more than 100 deep"),
        # a dict key of tuples a million deep: hashing it would overflow the C stack
        ("deep_tuples", b"})" + b"\x85" * 1_000_000 + integer(1) + b"s", {},
         "tuples or frozensets nest more than 100 deep"),
    ]  # fmt: skip
    files = {
        name: (checkpoint(tmp_path / f"{name}.pt", body, storages), expected)
        for name, body, storages, expected in programs
    }

    def add(name: str, path: Path, expected: str) -> None:
        files[name] = (path, expected)

    payload = pickle.dumps({"w": _Payload(f"touch {marker}")}, protocol=2)
    add("os_system", checkpoint(tmp_path / "os.pt", payload, {}, raw_pickle=True),
        f"GLOBAL {os.system.__module__}.system is not allowed")  # fmt: skip
    evil = pickle.dumps(_Eval(), protocol=4)  # STACK_GLOBAL, FRAME, MEMOIZE
    add("eval_stack_global", checkpoint(tmp_path / "eval.pt", evil, {}, raw_pickle=True),
        "GLOBAL builtins.eval is not allowed")  # fmt: skip
    truncated = b"\x80\x02" + mapping(("w", integer(1)))  # no STOP
    add("truncated_pickle", checkpoint(tmp_path / "cut.pt", truncated, {}, raw_pickle=True),
        "not a valid pickle")  # fmt: skip
    add("bad_byteorder", checkpoint(tmp_path / "order.pt", integer(1), {}, byteorder="middle"),
        "byte order 'middle'")  # fmt: skip
    script = checkpoint(tmp_path / "script.pt", integer(1), {}, records={"constants.pkl": b""})
    add("torchscript", script, "TorchScript")
    with zipfile.ZipFile(tmp_path / "compressed.pt", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02" + two + b".")
        archive.writestr("archive/data/0", f32(1, 2))
    add("compressed", tmp_path / "compressed.pt", "compressed or encrypted")
    with zipfile.ZipFile(tmp_path / "flat.zip", "w") as archive:
        archive.writestr("data.pkl", pickle.dumps([1]))
    add("not_in_a_folder", tmp_path / "flat.zip", "not in a folder")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("archive/readme.txt", "hello")
    add("no_data_pkl", tmp_path / "other.zip", "no archive/data.pkl")
    valid = sample(tmp_path / "valid.pt").read_bytes()
    (tmp_path / "truncated.pt").write_bytes(valid[: len(valid) // 2])
    add("truncated_archive", tmp_path / "truncated.pt", "damaged zip archive")
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
    (tmp_path / "legacy.pt").write_bytes(magic)
    add("legacy", tmp_path / "legacy.pt", "looks like a pickle: PyTorch's legacy torch.save")
    return files


def test_hostile_checkpoints_raise_a_clear_value_error(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    files = _hostile(tmp_path, marker)
    assert len(files) == 41
    tracemalloc.start()
    try:
        for name, (path, expected) in files.items():
            with pytest.raises(ValueError, match=expected) as caught:
                pl.load(path)
            message = str(caught.value)
            assert message.startswith("load: ") and str(path) in message, name
            error = caught.value  # no internal traceback attached
            assert error.__cause__ is None, name
            assert error.__context__ is None or error.__suppress_context__, name
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20  # nothing allocated in proportion to the declared sizes
    assert not marker.exists()  # no payload ran


def test_refused_globals_are_unpickling_errors(tmp_path: Path) -> None:
    path = checkpoint(tmp_path / "c.pt", call(global_("os", "system"), text("true")), {})
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL os.system"):
        pl.load(path, weights_only=False)  # False does not widen the allow-list
    with pytest.raises(UnpicklingError):
        pl.load(path)


def test_an_oversized_pickle_is_not_read(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(torch_checkpoint, "MAX_PICKLE_BYTES", 100)
    path = checkpoint(tmp_path / "c.pt", b"]" + text("x" * 200) + b"a", {})
    with pytest.raises(ValueError, match=r"data.pkl of \d+ bytes, more than the 100 read"):
        pl.load(path)


# -- checkpoints written by PyTorch --------------------------------------------------------
@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch", reason="PyTorch is not installed: torch.save unavailable")


def unsigned(values: np.ndarray) -> np.ndarray:
    """The raw bits of ``values``, to compare bit for bit (NaN payloads, -0.0)."""
    return values.view(f"u{values.dtype.itemsize}") if values.dtype != bool else values


def same_bits(mine: pl.Tensor, theirs: Any) -> bool:
    """Whether pylucid's tensor holds the bits of PyTorch's."""
    import torch

    theirs = theirs.detach()
    if theirs.dtype == torch.bfloat16:  # (no NumPy bfloat16 in PyTorch)
        reference = theirs.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        reference = theirs.numpy()
    values = mine.detach().numpy()
    return values.shape == reference.shape and bool(
        np.array_equal(unsigned(values.copy()), unsigned(reference))
    )


def test_the_hand_written_format_is_torchs(torch: Any, tmp_path: Path) -> None:
    path = sample(tmp_path / "c.pt")
    theirs = torch.load(path, weights_only=True)
    mine = pl.load(path)
    assert list(theirs) == list(mine)
    for key, value in theirs.items():
        assert same_bits(mine[key], value), key
        assert mine[key].requires_grad == value.requires_grad, key


def test_a_state_dict_loads_into_the_same_model_bit_for_bit(torch: Any, tmp_path: Path) -> None:
    def layers(nn: Any) -> Any:
        return nn.ModuleDict(
            {
                "conv": nn.Conv2d(3, 4, 3, padding=1),
                "bn": nn.BatchNorm2d(4),
                "fc": nn.Linear(4, 5),
                "norm": nn.LayerNorm(5),
                "embed": nn.Embedding(10, 4),
            }
        )

    torch.manual_seed(0)
    theirs = layers(torch.nn)
    theirs["bn"](theirs["conv"](torch.randn(2, 3, 5, 5)))  # running stats, batches tracked
    with torch.no_grad():
        theirs["norm"].weight.uniform_()
    torch.save(theirs.state_dict(), tmp_path / "model.pt")
    state = pl.load(tmp_path / "model.pt")
    assert type(state) is OrderedDict and hasattr(state, "_metadata")
    assert state["bn.num_batches_tracked"].dtype is pl.int64
    mine = layers(pl.nn)
    mine.load_state_dict(state)
    for key, value in theirs.state_dict().items():
        assert same_bits(mine.state_dict()[key], value), key


def test_a_training_checkpoint_resumes(torch: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    inputs = torch.randn(4, 3)

    def step(model: Any, optimizer: Any, x: Any) -> None:
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()
        optimizer.step()

    for _ in range(2):
        step(model, optimizer, inputs)
    config = {"lr": 0.01, "betas": (0.9, 0.999), "name": "run", "layers": [3, 2]}
    saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 10}
    torch.save({**saved, "config": config}, tmp_path / "ckpt.pt")
    checkpoint = pl.load(tmp_path / "ckpt.pt", map_location="cpu", weights_only=True)
    assert checkpoint["step"] == 10 and checkpoint["config"] == config
    mine = pl.nn.Linear(3, 2)
    mine.load_state_dict(checkpoint["model"])
    adam = pl.optim.Adam(mine.parameters(), lr=0.5)
    adam.load_state_dict(checkpoint["optimizer"])
    assert adam.param_groups[0]["lr"] == 0.01
    step(model, optimizer, inputs)
    step(mine, adam, pl.tensor(inputs.numpy()))
    for key, value in model.state_dict().items():
        np.testing.assert_allclose(mine.state_dict()[key].numpy(), value.numpy(), atol=1e-6)


SPECIAL = {
    "float32": [0x7FC00001, 0xFF800001, 0x80000000, 0x7F800000, 0x00000001, 0x3F800000],
    "float64": [0x7FF0000000000001, 0x8000000000000000, 1, 0x3FF0000000000000],
    "float16": [0x7E01, 0x8000, 0x7C00, 0x0001, 0x3C00],
    "bfloat16": [0x7FC1, 0x8000, 0x7F80, 0x0001, 0x3F80],
}


def test_every_dtype_and_layout_loads_as_torch_holds_it(torch: Any, tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    tensors = {}
    for name, bits in SPECIAL.items():
        dtype = getattr(torch, name)
        width = torch.empty((), dtype=dtype).element_size()
        raw = np.array(bits, f"u{width}").view(f"i{width}")  # PyTorch lacks uint16 from NumPy
        tensors[name] = torch.from_numpy(raw).view(dtype)
    for name in ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32"):
        dtype = getattr(torch, name)
        info = torch.iinfo(dtype)
        tensors[name] = torch.tensor([info.min, 0, info.max], dtype=dtype)
    tensors["bool"] = torch.tensor([True, False])
    tensors["transposed"] = base.t()
    tensors["strided"] = base[:, ::2]
    tensors["offset"] = base[2:, 1:4]
    tensors["scalar"] = torch.tensor(2.5)
    tensors["empty"] = torch.empty(0, 3)
    tensors["expanded"] = torch.tensor([1.0, 2.0]).expand(3, 2)
    tensors["tied"] = tensors["transposed"]  # the same object
    tensors["alias"] = base.detach()  # another object over the same storage
    for protocol in (2, 4):
        path = tmp_path / f"all{protocol}.pt"
        torch.save(tensors, path, pickle_protocol=protocol)
        loaded = pl.load(path)
        for key, value in tensors.items():
            if value.dtype in (torch.int16, torch.int8, torch.uint8, torch.uint16):
                assert loaded[key].dtype is pl.int32 and loaded[key].tolist() == value.tolist()
            elif value.dtype == torch.uint32:
                assert loaded[key].dtype is pl.int64 and loaded[key].tolist() == value.tolist()
            else:
                assert same_bits(loaded[key], value), key
        assert loaded["tied"] is loaded["transposed"]
        assert np.shares_memory(loaded["alias"].numpy(), loaded["offset"].numpy())


def test_unsupported_dtypes_are_named(torch: Any, tmp_path: Path) -> None:
    for dtype in (torch.complex64, torch.uint64, torch.float8_e4m3fn):
        torch.save({"w": torch.zeros(2, dtype=dtype)}, tmp_path / "c.pt")
        name = str(dtype).removeprefix("torch.")
        with pytest.raises(ValueError, match=f"holds a {name} tensor"):
            pl.load(tmp_path / "c.pt")


def test_parameters_and_tensors_that_require_grad(torch: Any, tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    trained = torch.ones(2).requires_grad_()
    torch.save([*model.parameters(), frozen, trained], tmp_path / "c.pt")
    weight, bias, frozen_back, trained_back = pl.load(tmp_path / "c.pt")
    for p in (weight, bias):
        assert isinstance(p, pl.nn.Parameter) and p.requires_grad
    assert isinstance(frozen_back, pl.nn.Parameter) and not frozen_back.requires_grad
    assert type(trained_back) is pl.Tensor and trained_back.requires_grad
    assert same_bits(weight, model.weight)


def test_what_pylucid_refuses_from_torch(torch: Any, tmp_path: Path) -> None:
    torch.save(torch.nn.Linear(2, 2), tmp_path / "model.pt")
    with pytest.raises(UnpicklingError, match="GLOBAL torch.nn.modules.linear.Linear"):
        pl.load(tmp_path / "model.pt")
    torch.save({"w": torch.ones(2)}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match="legacy torch.save format"):
        pl.load(tmp_path / "old.pt")
    torch.save({"w": torch.ones(2).to_sparse()}, tmp_path / "sparse.pt")
    with pytest.raises(ValueError, match="a sparse tensor"):
        pl.load(tmp_path / "sparse.pt")


def test_a_buffer_written_by_torch(torch: Any) -> None:
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    buffer.seek(0)
    assert pl.load(buffer, map_location=torch.device("cpu"))["w"].tolist() == [0.0, 1.0, 2.0]
