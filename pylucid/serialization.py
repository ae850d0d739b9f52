"""Checkpoints without pickle: :func:`save` and :func:`load` in the safetensors format.

A checkpoint is a *state dict*: a tensor, or dicts (str or int keys), lists and tuples
nesting tensors, NumPy arrays and scalars, Python numbers (bool, int, float), None and
strings. Loading runs no code
from the file, so a checkpoint from an untrusted source can be read safely.

:func:`load` also reads PyTorch's ``torch.save`` checkpoints (zip archives), through an
allow-listed pickle reader that runs no code either (:mod:`pylucid.torch_checkpoint`); this
module tells the formats apart by their first bytes and says where tensors go
(``map_location``).

On-disk format
--------------
The file is a plain safetensors file, written by the ``safetensors`` package, so
``safetensors.numpy.load_file`` and ``mlx.core.load`` read its tensors (MLX 0.32 refuses
float64 ones).

*Tensor keys.* For a flat dict of str to Tensor (a model's ``state_dict()``) the keys are
exactly the dict's keys: ``{"0.weight": T}`` is stored under ``"0.weight"``. Otherwise a
tensor is stored under the path of keys and list indices that leads to it, joined by
``/``: ``{"state": {0: {"exp_avg": T}}}`` gives ``"state/0/exp_avg"``. Within a path
component ``%`` is written ``%25`` and ``/`` ``%2F``, and a string key that reads as an
integer has its first character escaped (``"7"`` is ``"%37"``), so a component that reads
as an integer is an int key or a list index and no two paths give one key. A tensor saved
on its own is stored as ``"tensor"``.

*Structure.* The safetensors ``__metadata__`` holds one entry, ``"pylucid"``: the JSON text
of ``{"version": 1, "root": NODE}``, where a NODE is

- ``null``, ``true`` / ``false``, an integer, a finite float (a JSON number with a ``.``
  or an exponent), a string, or a JSON array of NODEs (a Python list);
- ``{"float": "nan" | "inf" | "-inf"}``;
- ``{"tuple": [NODE, ...]}``;
- ``{"dict": [[KEY, NODE], ...]}``, each KEY a string or an integer, in the dict's order;
- ``{"tensor": NAME, "device": "cpu" | "gpu"}``: the tensor stored under NAME, saved from
  that device; a later occurrence of the same Tensor object adds ``"same_as": FIRST``, the
  NAME of the first;
- ``{"ndarray": NAME}`` (``"scalar": true`` for a NumPy scalar): a NumPy array stored under
  NAME, of any dtype safetensors holds, loaded back as a NumPy array (or scalar).

Semantics
---------
- Tensors are saved contiguous and bit for bit (NaN payloads, -0.0) in their dtype. A
  tensor that requires grad, or was computed by an op, is saved by value and loads as a
  leaf that does not require grad, as ``torch.load`` gives plain tensors for a state dict:
  call ``requires_grad_()`` on it, or load the values into parameters.
- The same Tensor object reached twice (tied weights) is stored twice, so that every key
  reads back with safetensors alone, and loads as one Tensor object at both places.
  Distinct tensors that share memory (views) are stored and loaded as independent tensors.
- Subclasses load as their base type: a ``Counter`` or ``OrderedDict`` as a dict, an
  ``nn.Parameter``-like Tensor subclass as a Tensor, a float subclass as a float.
- :func:`load` reads only the tensors the structure names (others in the file are
  ignored).
- A safetensors file from another writer (PyTorch, MLX, Hugging Face) has no ``"pylucid"``
  entry: it loads as a flat dict of name to Tensor, on ``device`` (``"cpu"`` by default).
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from pylucid import backends, torch_checkpoint
from pylucid.backends.base import Backend
from pylucid.compat import differs, unsupported
from pylucid.dtypes import DType, bfloat16, bool_, float16, float32, float64, int32, int64
from pylucid.tensor import Tensor

__all__ = ["add_safe_globals", "load", "safe_globals", "save"]

#: The metadata entry holding the structure, and the version of its scheme.
METADATA_KEY = "pylucid"
FORMAT_VERSION = 1
#: The key of a tensor saved on its own.
ROOT_TENSOR_KEY = "tensor"
#: The largest header safetensors reads (its ``MAX_HEADER_SIZE``): a bigger one saves, but
#: cannot be loaded.
MAX_HEADER_BYTES = 100_000_000
#: safetensors dtype strings to pylucid dtypes (the ones pylucid holds).
_DTYPES: dict[str, DType] = {
    "BOOL": bool_,
    "I32": int32,
    "I64": int64,
    "F16": float16,
    "BF16": bfloat16,
    "F32": float32,
    "F64": float64,
}
#: The NumPy dtypes of arrays a checkpoint holds as arrays (safetensors' element types).
_ARRAY_DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64", "bfloat16"}
)  # fmt: skip
_INTEGER = re.compile(r"-?[0-9]+")
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _safetensors() -> Any:
    """The ``safetensors`` package, imported on first use (pylucid imports without it)."""
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            "pylucid.save and pylucid.load need the safetensors package: pip install safetensors"
        ) from None
    return safetensors


# -- saving ---------------------------------------------------------------------------------
@differs(
    "writes safetensors, not a pickle: nested state dicts of tensors, numbers, strings, "
    "lists and tuples (another object raises TypeError); PyTorch and safetensors read them"
)
def save(
    obj: Any,
    f: str | os.PathLike[str] | IO[bytes],
    pickle_module: Any = None,
    pickle_protocol: int | None = None,
    _use_new_zipfile_serialization: bool = True,
    _disable_byteorder_record: bool = False,
) -> None:
    """Save a tensor or a state dict to ``f`` as a safetensors file (no pickle).

    A path is written through a temporary file in the same directory, then renamed onto
    it, so a crash mid-save leaves any earlier file under the name intact; a file object
    open for writing receives the whole file's bytes. See the module documentation for
    the keys and the metadata scheme.

    Parameters
    ----------
    obj : Tensor, ndarray, dict, list, tuple, bool, int, float, str or None
        The object: tensors and NumPy arrays, nested in dicts (str or int keys), lists and
        tuples, with Python numbers, None and strings (a model's, optimizer's or
        scheduler's state dict).
    f : str, os.PathLike or binary file object
        The file to write (replaced if it exists), or a file object with ``write``.
    pickle_module, pickle_protocol, _use_new_zipfile_serialization, _disable_byteorder_record
        PyTorch's options, accepted: there is no pickle to configure.

    Raises
    ------
    TypeError
        For an object of another type (a module, a lambda, a set) or a dict key that is not
        a str or an int; the message names its path in ``obj``.
    ValueError
        For an object that contains itself, a tensor whose key would be ``"__metadata__"``,
        or a structure too large for a safetensors header (100 MB).
    FileNotFoundError
        If the directory of ``path`` does not exist.
    """
    if hasattr(f, "write") and not isinstance(f, (str, bytes, os.PathLike)):
        with tempfile.TemporaryDirectory(prefix="pylucid-save-") as directory:
            staged = os.path.join(directory, "checkpoint.safetensors")
            save(obj, staged)
            with open(staged, "rb") as written:
                shutil.copyfileobj(written, f)
        return
    target = os.fspath(f)
    safetensors = _safetensors()
    encoder = _Encoder(flat=_is_flat_state_dict(obj))
    root = encoder.encode(obj, (), "obj")
    header = json.dumps({"version": FORMAT_VERSION, "root": root}, allow_nan=False)
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"save: the directory {directory!r} of {target!r} does not exist")
    name = f".{os.path.basename(target)[:120]}.{uuid.uuid4().hex}.tmp"
    temporary = os.path.join(directory, name)
    try:
        with open(temporary, "xb"):  # created with the umask's mode, as open() gives
            pass
        safetensors.numpy.save_file(encoder.arrays, temporary, metadata={METADATA_KEY: header})
        with open(temporary, "rb+") as written:
            length = int.from_bytes(written.read(8), "little")
            if length > MAX_HEADER_BYTES:
                raise ValueError(
                    f"save: the header of {target!r} would take {length} bytes, more than the "
                    f"{MAX_HEADER_BYTES} safetensors reads; hold long lists of numbers in "
                    f"tensors"
                )
            os.fsync(written.fileno())
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _is_flat_state_dict(obj: Any) -> bool:
    """Whether ``obj`` is a non-empty dict of str to Tensor, stored under its own keys."""
    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(type(k) is str and isinstance(v, Tensor) for k, v in obj.items())
    )


def _component(key: str | int) -> str:
    """A dict key or list index as a component of a tensor key (see the module docs)."""
    if isinstance(key, int):
        return str(key)
    escaped = key.replace("%", "%25").replace("/", "%2F")
    if _INTEGER.fullmatch(escaped):
        escaped = f"%{ord(escaped[0]):02X}{escaped[1:]}"
    return escaped


class _Encoder:
    """Walks an object into the JSON structure, collecting its tensors' contiguous values
    in ``arrays`` under their keys."""

    def __init__(self, flat: bool) -> None:
        self.flat = flat
        self.arrays: dict[str, np.ndarray] = {}
        self._first_key: dict[int, str] = {}  # id(tensor) -> the key of its first place
        self._open: set[int] = set()  # the containers being walked (for cycles)

    def encode(self, obj: Any, keys: tuple[str | int, ...], where: str) -> Any:
        if isinstance(obj, Tensor):
            return self._tensor(obj, keys, where)
        if isinstance(obj, np.ndarray):
            return self._array(obj, keys, where, scalar=False)
        if isinstance(obj, (np.number, np.bool_)):
            return self._array(np.asarray(obj), keys, where, scalar=True)
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            value = float(obj)
            if math.isfinite(value):
                return value
            return {"float": "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"}
        if isinstance(obj, (dict, list, tuple)):
            if id(obj) in self._open:
                raise ValueError(f"save: {where} contains itself; a checkpoint is a tree")
            self._open.add(id(obj))
            try:
                return self._container(obj, keys, where)
            finally:
                self._open.discard(id(obj))
        module = " (save its state_dict(), and load that into a new one)" if hasattr(
            obj, "state_dict") else ""  # fmt: skip
        raise TypeError(
            f"save: {where} is a {type(obj).__name__}, which a checkpoint cannot hold{module}; "
            f"it holds tensors, NumPy arrays, dicts, lists, tuples, bool, int, float, str and "
            f"None"
        )

    def _container(self, obj: dict | list | tuple, keys: tuple, where: str) -> Any:
        if isinstance(obj, dict):
            pairs = []
            for key, value in obj.items():
                if type(key) is not str and type(key) is not int:
                    raise TypeError(
                        f"save: {where} has the key {key!r} of type {type(key).__name__}; "
                        f"dict keys must be str or int"
                    )
                pairs.append([key, self.encode(value, (*keys, key), f"{where}[{key!r}]")])
            return {"dict": pairs}
        items = [self.encode(v, (*keys, i), f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else {"tuple": items}

    def _array(
        self, array: np.ndarray, keys: tuple[str | int, ...], where: str, scalar: bool
    ) -> dict[str, Any]:
        if array.dtype.name not in _ARRAY_DTYPES:
            raise TypeError(
                f"save: {where} is a NumPy array of dtype {array.dtype}, which safetensors "
                f"cannot hold; it holds {', '.join(sorted(_ARRAY_DTYPES))}"
            )
        key = self._key(keys, where)
        self.arrays[key] = np.asarray(array, order="C")  # (ascontiguousarray makes 0-d 1-d)
        return {"ndarray": key, "scalar": True} if scalar else {"ndarray": key}

    def _key(self, keys: tuple[str | int, ...], where: str) -> str:
        """The safetensors key of the value at ``keys`` (see the module docs)."""
        if not keys:
            key = ROOT_TENSOR_KEY
        elif self.flat:
            key = str(keys[0])
        else:
            key = "/".join(_component(k) for k in keys)
        if key == "__metadata__":
            raise ValueError(
                f"save: the tensor at {where} would be stored under '__metadata__', a key the "
                f"safetensors format reserves; rename it"
            )
        return key

    def _tensor(self, t: Tensor, keys: tuple[str | int, ...], where: str) -> dict[str, str]:
        key = self._key(keys, where)
        self.arrays[key] = _exact_contiguous(t)
        node = {"tensor": key, "device": t.device}
        first = self._first_key.setdefault(id(t), key)
        if first != key:
            node["same_as"] = first
        return node


def _exact_contiguous(t: Tensor) -> np.ndarray:
    """The tensor's values as a C-contiguous NumPy array with the same bits.

    The mlx backend's ``to_numpy`` converts bfloat16 through float32, which quiets NaN
    payloads; its bits are read as uint16 instead."""
    storage = t._storage
    if t._dtype is bfloat16 and not isinstance(storage, np.ndarray):
        import mlx.core as mx  # only an mlx tensor gets here

        return np.asarray(np.array(storage.view(mx.uint16)).view(bfloat16.numpy), order="C")
    return np.asarray(t._backend.to_numpy(storage), order="C")


# -- loading --------------------------------------------------------------------------------
#: What ``map_location`` may be: a device (a name, or an object whose ``str()`` is one), a
#: dict from saved locations to devices, or a callable ``(storage, location) -> storage``.
MapLocation = Any
#: The bytes that tell the formats apart.
_ZIP_MAGIC = b"PK\x03\x04"


@differs(
    "always weights-only, also with weights_only=False; int8/int16/uint8/uint16 load as "
    "int32 and uint32 as int64; tensors saved on CUDA/MPS load on the CPU"
)
def load(
    f: str | os.PathLike[str] | IO[bytes],
    map_location: MapLocation = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
    device: str | None = None,
) -> Any:
    """Load what :func:`save` wrote, a safetensors file, or a PyTorch ``torch.save`` checkpoint.

    The format is told by the file's first bytes: a zip archive is read as PyTorch's
    checkpoint format (:mod:`pylucid.torch_checkpoint`), anything else as safetensors. A
    pickle (PyTorch's format before 1.6) is refused. Nothing in a file can run code: the
    pickle inside a PyTorch checkpoint is read by an allow-list of PyTorch's tensor globals
    (:mod:`pylucid.torch_unpickler`), so ``torch.load(path)`` written as ``pl.load(path)``
    reads a state dict, an optimizer's state dict or a dict of them, and refuses a whole
    pickled module, naming its class.

    Parameters
    ----------
    f : str, os.PathLike or binary file
        The file, or a file object open for reading (``io.BytesIO``, ``open(path, "rb")``).
    map_location : str, device, dict or callable, optional
        Where the tensors go, with PyTorch's meanings:

        - None: a pylucid file's tensors go back to the device they were saved from; a
          PyTorch checkpoint's go to the CPU, from whatever device they were saved on
          (pylucid has no CUDA or MPS device);
        - ``"cpu"``, ``"gpu"``, a backend name, or an object whose ``str()`` is one
          (``pylucid.device("cpu")``, ``torch.device("cpu")``): every tensor goes there.
          ``"cuda"``, ``"cuda:N"`` and ``"mps"`` raise: pylucid's GPU device is ``"gpu"``;
        - a dict from saved locations to devices (``{"cuda:0": "cpu"}``); a location the
          dict lacks is treated as with None;
        - a callable ``fn(storage, location)``: it gets a stand-in storage and returns it
          (``lambda storage, loc: storage``, or ``storage.cpu()``: the CPU) or None (as
          with None); ``storage.cuda()`` raises, any other method is missing.
    pickle_module : module, optional
        Only None or :mod:`pickle`: pylucid reads PyTorch's pickles with its own
        allow-listed reader.
    weights_only : bool, optional
        Accepted for PyTorch's programs: every pylucid load is weights-only. False does
        not widen it: a global off the allow-list raises all the same.
    mmap : bool, optional
        Map a PyTorch checkpoint's storages into memory instead of reading them
        (copy-on-write: changing a tensor never changes the file); ``f`` must then be a
        path. No effect on a safetensors file.
    device : str, optional
        pylucid's spelling of a device ``map_location``; give one of the two.

    Returns
    -------
    object
        The saved object. From :func:`save`: dict key types, tuples and numbers as saved,
        tensors that are leaves not requiring grad, one Tensor object saved at several
        places one Tensor object again. From another safetensors writer: a dict of name to
        Tensor. From ``torch.save``: see :func:`pylucid.torch_checkpoint.load_zip`
        (parameters as ``nn.Parameter``, tensors requiring grad as saved, int8, int16,
        uint8 and uint16 widened to int32 and uint32 to int64, which keeps every value).

    Raises
    ------
    FileNotFoundError
        If ``f`` does not exist.
    ValueError
        If the file is not a valid checkpoint: for safetensors, truncated, garbage, header
        or offsets out of range, unknown dtype, shape not matching its bytes, a dtype
        pylucid does not have, or a ``"pylucid"`` metadata entry that is malformed or names
        a missing tensor; for a PyTorch checkpoint, a global off the allow-list
        (:class:`pylucid.torch_unpickler.UnpicklingError`, also a
        :class:`pickle.UnpicklingError`), storages or tensor layouts that do not match the
        archive's bytes, an unsupported dtype; a pickle (a legacy ``torch.save`` file) or a
        TorchScript archive. The message names the file and what is wrong. Also for
        ``map_location`` and ``device`` given together, or ``mmap=True`` with a file
        object.
    RuntimeError
        For ``map_location="cuda"`` (or ``"mps"``): pylucid's GPU device is ``"gpu"``.
    pylucid.backends.BackendUnavailableError
        If a tensor's device is not available here (pass ``map_location="cpu"``).
    """
    if pickle_module is not None and pickle_module is not pickle:
        raise TypeError(
            f"load: pickle_module={pickle_module!r} is not supported: pylucid reads PyTorch's "
            f"pickles with its own allow-listed reader, which runs no code"
        )
    if weights_only not in (None, True, False):
        raise TypeError(f"load: weights_only must be a bool or None, got {weights_only!r}")
    if device is not None and map_location is not None:
        raise ValueError("load: give map_location or device, not both")
    target = (map_location, "map_location") if device is None else (device, "device")
    if isinstance(f, (str, os.PathLike)):
        source = os.fspath(f)
        if not os.path.exists(source):
            raise FileNotFoundError(f"load: no such file: {source!r}")
        if os.path.isdir(source):
            raise IsADirectoryError(f"load: {source!r} is a directory, not a checkpoint file")
        with open(source, "rb") as file:
            return _load_open(file, source, source, target, bool(mmap))
    if not hasattr(f, "read"):
        raise TypeError(f"load: expected a path or a binary file object, got {type(f).__name__}")
    if mmap:
        raise ValueError("load: mmap=True needs a path, not a file object")
    source = str(getattr(f, "name", f"<{type(f).__name__}>"))
    file = f if _seekable(f) else io.BytesIO(f.read())
    return _load_open(file, source, None, target, False)


def _seekable(f: Any) -> bool:
    return all(hasattr(f, name) for name in ("seek", "tell", "readinto")) and (
        not hasattr(f, "seekable") or f.seekable()
    )


def _load_open(
    file: IO[bytes],
    source: str,
    path: str | None,
    target: tuple[MapLocation, str],
    use_mmap: bool,
) -> Any:
    """Load from ``file`` (at its start), the file at ``path`` when there is one, placing
    tensors by ``target``: ``(map_location, the keyword that gave it)``."""
    start = file.tell()
    head = file.read(9)
    file.seek(start)
    if head.startswith(_ZIP_MAGIC):
        place = _placement(*target, _torch_default)
        return torch_checkpoint.load_zip(file, source, place, use_mmap)
    if _is_pickle(head):
        raise ValueError(
            f"load: {source!r} looks like a pickle: PyTorch's legacy torch.save format "
            f"(before 1.6, or _use_new_zipfile_serialization=False), or another pickle, which "
            f"pylucid never loads (it could run any code); re-save it with torch >= 1.6 "
            f"(torch.save(torch.load(f), f)), or as safetensors"
        )
    if path is not None:
        return _load_safetensors(path, path, target)
    with tempfile.TemporaryDirectory() as directory:  # safetensors reads files only
        copy = os.path.join(directory, "checkpoint.safetensors")
        with open(copy, "wb") as spooled:
            shutil.copyfileobj(file, spooled)
        return _load_safetensors(copy, source, target)


def _is_pickle(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a binary pickle (protocol 2 to 5) rather than
    safetensors, whose 9th byte opens its JSON header."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and head[8:9] != b"{"


def _load_safetensors(path: str, source: str, target: tuple[MapLocation, str]) -> Any:
    safetensors = _safetensors()
    place = _placement(*target, _saved_device(source))
    try:
        with safetensors.safe_open(path, framework="numpy") as handle:
            reader = _Reader(source, handle, place)
            structure = (handle.metadata() or {}).get(METADATA_KEY)
            if structure is None:
                return {key: reader.tensor(key, "cpu") for key in handle.keys()}
            return reader.decode(reader.root(structure), "root")
    except safetensors.SafetensorError as exc:
        raise ValueError(
            f"load: {source!r} is not a valid safetensors file: {exc}{_diagnosis(path)}"
        ) from None
    except RecursionError:
        raise ValueError(
            f"load: {source!r}: the {METADATA_KEY!r} metadata nests too deeply"
        ) from None


def _diagnosis(path: str) -> str:
    """What the start of a file that safetensors refused says: a header length the file
    cannot hold."""
    with open(path, "rb") as file:
        start = file.read(8)
        size = file.seek(0, os.SEEK_END)
    if size < 8:
        return f" (the file has {size} bytes; a safetensors file starts with an 8-byte length)"
    length = int.from_bytes(start, "little")
    if length > size - 8:
        return f" (its first 8 bytes give a header of {length} bytes; the file has {size})"
    return ""


def _backend(device: str, where: str) -> Backend:
    try:
        return backends.resolve(device)
    except backends.BackendUnavailableError as exc:
        raise backends.BackendUnavailableError(
            f"{where}: {exc}; pass map_location='cpu' (or device='cpu') to load the tensors "
            f"on the CPU"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    except RuntimeError as exc:  # a device of PyTorch's that pylucid lacks ("cuda")
        raise RuntimeError(f"{where}: {exc}") from None


def _torch_default(location: str) -> Backend:
    """Where a PyTorch checkpoint's storage goes by default: the CPU, from any device."""
    return _backend("cpu", "load")


def _saved_device(source: str) -> Callable[[str], Backend]:
    """Where a safetensors tensor goes by default: the device it was saved from."""
    return lambda location: _backend(location, f"load: {source!r}: a tensor saved on {location!r}")


class _StorageStandIn:
    """What a ``map_location`` callable gets for a storage: ``.cpu()`` gives it back."""

    def __init__(self, location: str) -> None:
        self.location = location

    def cpu(self) -> _StorageStandIn:
        return self

    def cuda(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "load: map_location's storage.cuda(): pylucid has no CUDA device; its GPU device "
            "is 'gpu': pass map_location='gpu' (or 'cpu')"
        )


def _placement(
    map_location: MapLocation, keyword: str, default: Callable[[str], Backend]
) -> Callable[[str], Backend]:
    """The backend for each saved location (``"cpu"``, ``"gpu"``, ``"cuda:0"``) under
    ``map_location`` (see :func:`load`; given as ``keyword``), ``default`` where it leaves
    the choice open."""
    if map_location is None:
        return default
    if isinstance(map_location, dict):  # (a target is resolved where a tensor goes to it:
        # an entry for a location the file does not hold needs no backend, as in PyTorch)
        def mapped(location: str) -> Backend:
            if location not in map_location:
                return default(location)
            target = str(map_location[location])
            return _backend(target, f"load: {keyword}[{location!r}]={target!r}")

        return mapped
    if callable(map_location) and not isinstance(map_location, str):

        def call(location: str) -> Backend:
            stand_in = _StorageStandIn(location)
            result = map_location(stand_in, location)
            if result is None:
                return default(location)
            if result is not stand_in:
                raise TypeError(
                    f"load: a map_location callable must return the storage it is given "
                    f"(lambda storage, loc: storage) or None; it returned a "
                    f"{type(result).__name__}"
                )
            return _backend("cpu", "load")

        return call
    target = _backend(str(map_location), f"load: {keyword}={str(map_location)!r}")
    return lambda location: target


#: NumPy's limit on the dimensions of an array (and so of a tensor on either backend).
MAX_DIMENSIONS = 64


class _Reader:
    """Decodes the structure of one open file, reading each tensor once."""

    def __init__(self, path: str, handle: Any, place: Callable[[str], Backend]) -> None:
        self.path, self.handle, self.place = path, handle, place
        self.keys = set(handle.keys())
        self.loaded: dict[str, Tensor] = {}

    def fail(self, where: str, problem: str) -> ValueError:
        return ValueError(
            f"load: {self.path!r}: the {METADATA_KEY!r} metadata at {where} {problem}"
        )

    def root(self, text: str) -> Any:
        try:
            header = json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"load: {self.path!r}: the {METADATA_KEY!r} metadata is not valid JSON ({exc})"
            ) from None
        if not isinstance(header, dict) or set(header) != {"version", "root"}:
            raise ValueError(
                f"load: {self.path!r}: the {METADATA_KEY!r} metadata must be an object with "
                f"'version' and 'root'"
            )
        if header["version"] != FORMAT_VERSION:
            raise ValueError(
                f"load: {self.path!r}: checkpoint format version {header['version']!r}; this "
                f"pylucid reads version {FORMAT_VERSION}"
            )
        return header["root"]

    def decode(self, node: Any, where: str) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, dict) or len(node) == 0:
            raise self.fail(where, f"is {json.dumps(node)[:60]}, not a node")
        if "tensor" in node:
            return self._tensor_node(node, where)
        if "ndarray" in node:
            return self._array_node(node, where)
        (kind, value), *rest = node.items()
        if rest or kind not in ("float", "tuple", "dict"):
            raise self.fail(where, f"has the unknown form {sorted(node)}")
        if kind == "float":
            if value not in _NON_FINITE:
                raise self.fail(where, f"has the float {value!r}; expected nan, inf or -inf")
            return _NON_FINITE[value]
        if not isinstance(value, list):
            raise self.fail(where, f"holds a {kind} that is not a JSON array")
        if kind == "tuple":
            return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(value))
        result: dict[str | int, Any] = {}
        for pair in value:
            if not (isinstance(pair, list) and len(pair) == 2) or type(pair[0]) not in (str, int):
                entry = json.dumps(pair)[:60]
                raise self.fail(where, f"has the entry {entry}, not [str or int key, node]")
            key = pair[0]
            result[key] = self.decode(pair[1], f"{where}[{key!r}]")
        return result

    def _array_node(self, node: dict[str, Any], where: str) -> Any:
        key, scalar = node.get("ndarray"), node.get("scalar", False)
        if set(node) - {"ndarray", "scalar"} or not isinstance(key, str) or scalar not in (
            True, False):  # fmt: skip
            raise self.fail(where, f"is a malformed array reference {json.dumps(node)[:80]}")
        if key not in self.keys:
            raise self.fail(where, f"names the array {key!r}, which the file does not hold")
        self._check_dimensions(key)
        array = self.handle.get_tensor(key)
        return array[()] if scalar else array

    def _check_dimensions(self, key: str) -> None:
        dimensions = len(self.handle.get_slice(key).get_shape())
        if dimensions > MAX_DIMENSIONS:
            raise ValueError(
                f"load: {self.path!r}: the tensor {key!r} declares {dimensions} dimensions; "
                f"arrays have at most {MAX_DIMENSIONS} (a corrupted or hostile header)"
            )

    def _tensor_node(self, node: dict[str, Any], where: str) -> Tensor:
        key, device, first = node.get("tensor"), node.get("device"), node.get("same_as", None)
        if (
            set(node) - {"tensor", "device", "same_as"}
            or not isinstance(key, str)
            or not isinstance(device, str)
            or not isinstance(first, (str, type(None)))
        ):
            raise self.fail(where, f"is a malformed tensor reference {json.dumps(node)[:80]}")
        if first is not None:
            if first not in self.loaded:
                raise self.fail(where, f"names {first!r} as the same tensor, not loaded before")
            return self.loaded[first]
        if key not in self.keys:
            raise self.fail(where, f"names the tensor {key!r}, which the file does not hold")
        self.loaded[key] = tensor = self.tensor(key, device)
        return tensor

    def tensor(self, key: str, saved_device: str) -> Tensor:
        """The tensor stored under ``key``, placed from its ``saved_device``."""
        self._check_dimensions(key)
        stored = self.handle.get_slice(key).get_dtype()
        dtype = _DTYPES.get(stored)
        if dtype is None:
            supported = ", ".join(f"{k} ({d.name})" for k, d in _DTYPES.items())
            raise ValueError(
                f"load: {self.path!r}: the tensor {key!r} has the safetensors dtype {stored}, "
                f"which pylucid does not hold; it holds {supported}"
            )
        backend = self.place(saved_device)
        array = self.handle.get_tensor(key)  # a private, writable, C-contiguous copy
        return Tensor._make(backend.from_numpy(array, dtype), backend, dtype)


_NO_OBJECTS = (
    "pylucid's loader builds tensors, NumPy arrays and plain containers only, never other "
    "objects (allow-listed or not); save model.state_dict() and load it into a model you "
    "construct"
)
safe_globals = unsupported("serialization.safe_globals", _NO_OBJECTS)
add_safe_globals = unsupported("serialization.add_safe_globals", _NO_OBJECTS)
