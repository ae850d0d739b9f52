"""Reading PyTorch's ``torch.save`` checkpoints (the zip format) without PyTorch.

Format (``torch.save`` since PyTorch 1.6)
-----------------------------------------
A zip archive, every record under one folder (the file's stem, often ``archive/``):

- ``data.pkl``: the saved object, pickled (protocol 2 by default), each storage replaced by
  a persistent id ``("storage", torch.<Type>Storage, key, location, numel)``;
- ``data/<key>``: the raw bytes of each storage, stored uncompressed;
- ``byteorder``: ``little`` or ``big`` (absent in old files: little);
- ``version``, ``.format_version``, ``.storage_alignment``, ``.data/serialization_id``
  (not needed to read the tensors).

A TorchScript archive (``torch.jit.save``) has ``constants.pkl`` and is refused, as are the
pre-1.6 formats (a bare pickle or a tar file).

Reading
-------
1. :func:`pylucid.torch_unpickler.unpickle` interprets ``data.pkl`` under an allow-list:
   any other global raises, naming it, before anything else happens.
2. Every storage and tensor record is checked against the archive before any storage is
   read: each ``data/<key>`` exists, is stored uncompressed inside the file and holds
   exactly the declared bytes; each tensor's offset, size and stride stay inside its
   storage; the dtype is one pylucid loads. A hostile file raises a :class:`ValueError`
   naming the file, having allocated nothing in proportion to what it declares.
3. Each storage is read once (or memory-mapped, ``mmap=True``) into a NumPy array.
4. On the CPU each tensor is a NumPy view of its storage, with PyTorch's offset and
   strides: tensors that share a storage in the file (tied weights, views) share memory,
   as in PyTorch. A tensor several of whose elements are one element in memory (an
   ``expand``) is read-only. On another device each tensor is a contiguous copy; copies
   beyond the storages' own bytes (overlapping tensors) are limited to
   :data:`MAX_REPEATED_BYTES`.

Dtypes: float64, float32, float16, bfloat16, int64, int32 and bool load as themselves.
pylucid has no 8- or 16-bit or unsigned integers: int8, int16, uint8 and uint16 load as
int32 and uint32 as int64, which hold every value exactly. Other dtypes (complex, uint64,
float8, quantized) raise.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from pylucid.backends.base import Backend
from pylucid.dtypes import DType, bfloat16, bool_, float16, float32, float64, int32, int64
from pylucid.tensor import Tensor
from pylucid.torch_unpickler import (
    MAX_DEPTH,
    ParameterRecord,
    TensorRecord,
    TorchDType,
    Unpickled,
    unpickle,
)

__all__ = ["load_zip", "MAX_PICKLE_BYTES", "MAX_REPEATED_BYTES"]

#: The largest ``data.pkl`` read (it holds structure, not tensor values).
MAX_PICKLE_BYTES = 256 << 20
#: How many bytes copies onto a device other than the CPU may add to the storages' own.
MAX_REPEATED_BYTES = 1 << 30
#: NumPy's limit on dimensions.
_MAX_DIMS = 64
#: PyTorch dtype names to (the NumPy dtype of the stored elements, the pylucid dtype); None
#: for the pylucid dtype's own (bfloat16's comes from ml_dtypes, imported when first met).
_DTYPES: dict[str, tuple[np.dtype | None, DType]] = {
    "float64": (np.dtype(np.float64), float64),
    "float32": (np.dtype(np.float32), float32),
    "float16": (np.dtype(np.float16), float16),
    "bfloat16": (None, bfloat16),
    "int64": (np.dtype(np.int64), int64),
    "int32": (np.dtype(np.int32), int32),
    "bool": (np.dtype(np.bool_), bool_),
    # widened: every value fits exactly
    "int16": (np.dtype(np.int16), int32),
    "int8": (np.dtype(np.int8), int32),
    "uint8": (np.dtype(np.uint8), int32),
    "uint16": (np.dtype(np.uint16), int32),
    "uint32": (np.dtype(np.uint32), int64),
}
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length


def load_zip(file: IO[bytes], source: str, place: Callable[[str], Backend], use_mmap: bool) -> Any:
    """Load the ``torch.save`` zip checkpoint open as ``file``.

    Parameters
    ----------
    file : binary file
        The archive, open for reading and seekable.
    source : str
        Its name, for messages.
    place : callable
        The backend for a storage's saved location (``"cpu"``, ``"cuda:0"``).
    use_mmap : bool
        Map the file's storages into memory instead of reading them (``file`` must be a
        file on disk).

    Returns
    -------
    object
        The saved object: tensors as :class:`~pylucid.Tensor`, parameters as
        :class:`~pylucid.nn.Parameter`, dtypes as pylucid dtypes, devices as strings, sizes
        as tuples; dicts (``OrderedDict``, ``Counter``), lists, tuples, sets and scalars as
        saved.

    Raises
    ------
    ValueError
        For anything refused (see the module documentation); the message names the file.
    """
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _fail(source, f"is a damaged zip archive ({exc})") from None
    with archive:
        records = _records(archive, source)
        pickled = _small_record(archive, records, "data.pkl", MAX_PICKLE_BYTES, source)
        byteorder = "little"
        if "byteorder" in records:
            byteorder = _small_record(archive, records, "byteorder", 16, source).decode("latin1")
            if byteorder not in ("little", "big"):
                raise _fail(source, f"has the byte order {byteorder!r}; expected little or big")
        unpickled = unpickle(pickled, source)
        file_size = file.seek(0, os.SEEK_END)
        reader = _StorageReader(file, source, records, file_size, byteorder, use_mmap)
        return _Builder(unpickled, reader, place, source).build()


def _fail(source: str, problem: str) -> ValueError:
    return ValueError(f"load: {source!r} {problem}")


def _records(archive: zipfile.ZipFile, source: str) -> dict[str, zipfile.ZipInfo]:
    """The archive's records under its one top folder, by their names inside it."""
    entries = archive.infolist()
    first = entries[0].filename if entries else ""
    folder, slash, _ = first.partition("/")
    if not slash:
        what = f"its first entry {first!r} is not in a folder" if entries else "it is empty"
        raise _fail(source, f"is a zip archive, but not a torch.save checkpoint: {what}")
    prefix = folder + "/"
    records = {e.filename[len(prefix) :]: e for e in entries if e.filename.startswith(prefix)}
    if "constants.pkl" in records:
        raise _fail(
            source,
            "is a TorchScript archive (torch.jit.save), which pylucid cannot run; save the "
            "model's state_dict() with torch.save instead",
        )
    if "data.pkl" not in records:
        raise _fail(
            source, f"is a zip archive, but not a torch.save checkpoint: no {prefix}data.pkl"
        )
    return records


def _small_record(
    archive: zipfile.ZipFile,
    records: dict[str, zipfile.ZipInfo],
    name: str,
    limit: int,
    source: str,
) -> bytes:
    info = records[name]
    if info.file_size > limit:
        raise _fail(source, f"has a {name} of {info.file_size} bytes, more than the {limit} read")
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise _fail(source, f"has an unreadable {name} ({exc})") from None


class _StorageReader:
    """Locates the bytes of each ``data/<key>`` record in the file and reads them."""

    def __init__(
        self,
        file: IO[bytes],
        source: str,
        records: dict[str, zipfile.ZipInfo],
        file_size: int,
        byteorder: str,
        use_mmap: bool,
    ) -> None:
        self.file, self.source, self.records = file, source, records
        self.file_size, self.swap = file_size, byteorder != sys.byteorder
        self.mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) if use_mmap else None

    def locate(self, key: str, nbytes: int) -> int:
        """The file offset of storage ``key``'s bytes, checked to hold ``nbytes``."""
        name = f"data/{key}"
        info = self.records.get(name)
        if info is None:
            raise _fail(self.source, f"has no record {name} for the storage {key!r}")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
            raise _fail(
                self.source,
                f"stores {name} compressed or encrypted; torch.save stores storages as they are "
                f"(was the archive re-packed?)",
            )
        if info.file_size != nbytes:
            raise _fail(
                self.source,
                f"declares {nbytes} bytes for the storage {key!r}, but {name} holds "
                f"{info.file_size}",
            )
        self.file.seek(info.header_offset)
        header = self.file.read(_LOCAL_HEADER.size)
        if len(header) == _LOCAL_HEADER.size:
            signature, name_length, extra_length = _LOCAL_HEADER.unpack(header)
            start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
            if signature == b"PK\x03\x04" and start + nbytes <= self.file_size:
                return start
        raise _fail(self.source, f"is truncated or damaged: {name} lies outside the file")

    def read(self, start: int, nbytes: int, dtype: np.dtype) -> np.ndarray:
        """The storage's elements, native byte order, writable (copy-on-write if mapped)."""
        if nbytes == 0:
            return np.empty(0, dtype)
        if self.mapped is not None and start % dtype.itemsize == 0:
            raw = np.frombuffer(self.mapped, np.uint8, count=nbytes, offset=start)
        else:
            raw = np.empty(nbytes, np.uint8)
            self.file.seek(start)
            view, done = memoryview(raw), 0
            while done < nbytes:
                count = self.file.readinto(view[done : done + (64 << 20)])
                if not count:
                    raise _fail(self.source, "is truncated: a storage ends early")
                done += count
        if self.swap:
            unsigned = f"u{dtype.itemsize}"
            raw = raw.view(unsigned).byteswap().view(np.uint8)
        return raw.view(dtype)


class _Builder:
    """Checks every record, then turns the unpickled object into pylucid objects."""

    def __init__(
        self,
        unpickled: Unpickled,
        reader: _StorageReader,
        place: Callable[[str], Backend],
        source: str,
    ) -> None:
        self.unpickled, self.reader, self.place, self.source = unpickled, reader, place, source
        self.layouts: dict[str, _Layout] = {}  # storage key -> where and how it is stored
        self.arrays: dict[str, np.ndarray] = {}  # storage key -> elements (pylucid dtype)
        self.copies: dict[tuple, Any] = {}  # a view on a device with copies -> its storage
        self.done: dict[int, tuple[Any, Any]] = {}  # id(object) -> (object, what it became)

    # -- checks, before any storage is read --------------------------------------------------
    def check(self) -> None:
        tensors = self.unpickled.tensors
        viewed_as: dict[str, set[str]] = {}  # storage key -> its tensors' dtypes
        for tensor in tensors:
            viewed_as.setdefault(tensor.storage.key, set()).add(tensor.dtype)
        for storage in self.unpickled.storages.values():
            names = {storage.dtype} - {None} | viewed_as.get(storage.key, set())
            if len(names) > 1:
                raise _fail(self.source, f"views the storage {storage.key!r} as {sorted(names)}")
            name = names.pop() if names else "uint8"
            if name not in _DTYPES:
                raise _fail(
                    self.source,
                    f"holds a {name} tensor (storage {storage.key!r}); pylucid has no such "
                    f"dtype and loads {', '.join(_DTYPES)}",
                )
            stored, loaded = _DTYPES[name]
            stored = loaded.numpy if stored is None else stored
            nbytes = storage.numel * (stored.itemsize if storage.dtype is not None else 1)
            if nbytes % stored.itemsize:
                raise _fail(
                    self.source,
                    f"has the storage {storage.key!r} of {nbytes} bytes, not whole {name} elements",
                )
            start = self.reader.locate(storage.key, nbytes)
            backend = self.place(storage.location)
            self.layouts[storage.key] = _Layout(start, nbytes, stored, loaded, backend)
        for number, tensor in enumerate(tensors):
            self.check_tensor(number, tensor)
        self.check_copies()

    def check_tensor(self, number: int, tensor: TensorRecord) -> None:
        layout = self.layouts[tensor.storage.key]
        elements = layout.nbytes // layout.stored.itemsize
        what = f"tensor {number} (size {tensor.size}, storage {tensor.storage.key!r})"
        if len(tensor.size) > _MAX_DIMS:
            raise _fail(self.source, f"has a {what} of more than {_MAX_DIMS} dimensions")
        if math.prod(tensor.size) * layout.loaded.itemsize >= 1 << 62:
            raise _fail(self.source, f"has a {what} of more elements than an array can hold")
        last = tensor.offset + _extent(tensor) - 1  # empty: the offset may be the storage's end
        if last >= elements:
            raise _fail(
                self.source,
                f"has a {what} with offset {tensor.offset} and stride {tensor.stride} that "
                f"reaches element {last}, past the storage's {elements}",
            )
        if tensor.requires_grad and not layout.loaded.is_floating_point:
            raise _fail(self.source, f"has a {what} of dtype {tensor.dtype} that requires grad")

    def check_copies(self) -> None:
        """Bound the bytes copied onto devices without NumPy views (see the module docs)."""
        own = sum(
            layout.nbytes // layout.stored.itemsize * layout.loaded.itemsize
            for layout in self.layouts.values()
            if layout.backend.device != "cpu"
        )
        copied = 0
        for tensor in {_view_key(t): t for t in self.unpickled.tensors}.values():
            layout = self.layouts[tensor.storage.key]
            if layout.backend.device != "cpu":
                copied += math.prod(tensor.size) * layout.loaded.itemsize
        if copied > own + MAX_REPEATED_BYTES:
            raise _fail(
                self.source,
                f"has tensors that overlap in memory: copying them onto the device would take "
                f"{copied} bytes for {own} bytes of storage; load it with map_location='cpu'",
            )

    # -- building -------------------------------------------------------------------------------
    def build(self) -> Any:
        self.check()
        return self.convert(self.unpickled.root, 0)

    def storage(self, key: str) -> np.ndarray:
        array = self.arrays.get(key)
        if array is None:
            layout = self.layouts[key]
            array = self.reader.read(layout.start, layout.nbytes, layout.stored)
            if layout.loaded is bool_ and array.view(np.uint8).max(initial=0) > 1:
                raise _fail(self.source, f"has the bool storage {key!r} holding a byte > 1")
            if array.dtype != layout.loaded.numpy:
                array = array.astype(layout.loaded.numpy)
            self.arrays[key] = array
        return array

    def tensor(self, record: TensorRecord) -> Tensor:
        layout = self.layouts[record.storage.key]
        array = self.storage(record.storage.key)
        numel = math.prod(record.size)
        strides = tuple(
            s * array.itemsize if n > 1 and numel else 0  # (any stride is valid for n <= 1)
            for n, s in zip(record.size, record.stride)
        )
        repeats = numel > 1 and (0 in strides or _extent(record) < numel)
        view = np.lib.stride_tricks.as_strided(
            array[record.offset :], record.size, strides, writeable=not repeats
        )
        backend, dtype = layout.backend, layout.loaded
        if backend.device == "cpu":
            storage = backend.from_numpy(view, dtype)
        else:  # one copy per distinct view
            storage = self.copies.get(_view_key(record))
            if storage is None:
                storage = self.copies[_view_key(record)] = backend.from_numpy(view, dtype)
        result = Tensor._make(storage, backend, dtype, shape=record.size)
        if record.requires_grad:
            result.requires_grad_(True)
        return result

    def convert(self, obj: Any, depth: int) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, bytearray)):
            return obj
        if id(obj) in self.done:
            return self.done[id(obj)][1]
        if depth > MAX_DEPTH:
            raise _fail(self.source, f"nests containers more than {MAX_DEPTH} deep")
        result = self.convert_new(obj, depth + 1)
        self.done[id(obj)] = (obj, result)
        return result

    def convert_new(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, TensorRecord):
            return self.tensor(obj)
        if isinstance(obj, ParameterRecord):
            from pylucid.nn import Parameter  # (pylucid.nn is imported after this module)

            data = self.convert(obj.data, depth)
            if obj.requires_grad and not data.dtype.is_floating_point:
                raise _fail(self.source, f"has a {obj.data.dtype} parameter that requires grad")
            return Parameter(data, obj.requires_grad)
        if isinstance(obj, TorchDType):
            if obj.name not in _DTYPES or _DTYPES[obj.name][1].name != obj.name:
                raise _fail(self.source, f"holds the dtype torch.{obj.name}, which pylucid lacks")
            return _DTYPES[obj.name][1]
        if isinstance(obj, (list, dict, set)):  # changed in place: shared and cyclic stay so
            self.done[id(obj)] = (obj, obj)
            items = [self.convert(item, depth) for item in _flat_items(obj)]
            if isinstance(obj, list):
                obj[:] = items
            elif isinstance(obj, set):
                obj.clear()
                obj.update(items)
            else:
                obj.clear()
                for key, value in zip(items[::2], items[1::2]):
                    obj[key] = value
            return obj
        if isinstance(obj, (tuple, frozenset)):
            return type(obj)(self.convert(item, depth) for item in obj)
        raise _fail(
            self.source, f"holds a {type(obj).__name__} outside a tensor; pylucid loads tensors"
        )


@dataclass(frozen=True)
class _Layout:
    """A storage: its bytes' file offset and length, the NumPy dtype of its elements, the
    pylucid dtype they load as and the backend they go to."""

    start: int
    nbytes: int
    stored: np.dtype
    loaded: DType
    backend: Backend


def _extent(record: TensorRecord) -> int:
    """How many elements of storage, from its offset, the tensor spans (0 if empty)."""
    if not math.prod(record.size):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(record.size, record.stride))


def _flat_items(obj: list | dict | set) -> list[Any]:
    """A list's or set's elements, or a dict's keys and values alternating."""
    if isinstance(obj, dict):
        return [x for pair in obj.items() for x in pair]
    return list(obj)


def _view_key(record: TensorRecord) -> tuple:
    return (record.storage.key, record.offset, record.size, record.stride)
