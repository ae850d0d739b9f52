"""An allow-listed reader of the pickle inside a ``torch.save`` checkpoint (``data.pkl``).

A pickle is a program: its ``GLOBAL`` opcodes name any importable function and ``REDUCE``
calls it, so ``pickle.load`` of an untrusted file can run anything. This module never
imports or calls what a file names. It interprets the opcodes that containers, numbers and
strings need, and resolves each global against a fixed table of the names that PyTorch's
``torch.save`` writes for tensors (``torch._utils._rebuild_tensor_v2``, ``torch.FloatStorage``,
``torch.float32``, ``collections.OrderedDict``, ...). Every entry of the table is a
pylucid function that checks its arguments and returns plain data: a tensor becomes a
:class:`TensorRecord` naming its storage, offset, size and stride, a storage a
:class:`StorageRef`. No storage byte is read here; :mod:`pylucid.torch_checkpoint` checks
the records against the archive and only then builds tensors.

Any other global (``os.system``, ``builtins.eval``, a module class saved with
``torch.save(model)``) raises :class:`UnpicklingError` at its ``GLOBAL`` opcode, naming it,
before any later opcode is read. What the program builds is bounded by its own length, and
tuples by :data:`MAX_DEPTH` and :data:`MAX_TUPLE_VALUES`, so that hashing one (a dict key)
can neither overflow the C stack nor walk a shared tuple exponentially often.

The table is the set of names PyTorch's own ``weights_only=True`` loader accepts for dense
tensors, so a file that loads there loads here, except sparse, quantized, nested and
subclassed tensors (refused by name).
"""

from __future__ import annotations

import io
import pickle
import pickletools
import reprlib
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_TUPLE_VALUES",
    "UnpicklingError",
    "StorageType",
    "StorageRef",
    "TorchDType",
    "TensorRecord",
    "ParameterRecord",
    "Unpickled",
    "unpickle",
]


class UnpicklingError(ValueError, pickle.UnpicklingError):
    """A ``data.pkl`` that pylucid refuses: a global off the allow-list, an opcode it does
    not interpret, or a malformed program. A :class:`ValueError`, as every refusal of
    :func:`pylucid.load`, and a :class:`pickle.UnpicklingError`, as PyTorch raises."""


# -- the records a checkpoint's pickle turns into ----------------------------------------
@dataclass(frozen=True)
class StorageType:
    """A ``torch.<Name>Storage`` global: the element dtype of the storage's bytes, or
    None for ``torch.storage.UntypedStorage`` (bytes; the tensor names its dtype)."""

    name: str
    dtype: str | None


@dataclass(frozen=True)
class TorchDType:
    """A ``torch.<dtype>`` global, by PyTorch's canonical name (``"float32"``)."""

    name: str


@dataclass(eq=False)
class StorageRef:
    """A storage of the archive: its bytes are the record ``data/<key>``.

    ``numel`` counts elements of ``dtype``, or bytes when ``dtype`` is None (untyped)."""

    key: str
    dtype: str | None
    location: str
    numel: int


@dataclass(eq=False)
class TensorRecord:
    """A dense tensor over ``storage``: element ``offset``, ``size``, ``stride`` (in
    elements of ``dtype``), and whether it was saved requiring grad."""

    storage: StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    requires_grad: bool


@dataclass(eq=False)
class ParameterRecord:
    """An ``nn.Parameter`` over ``data``."""

    data: TensorRecord
    requires_grad: bool


@dataclass
class Unpickled:
    """What :func:`unpickle` read: the object (records in place of tensors), its storages
    by key and every tensor record in the order the pickle made them."""

    root: Any
    storages: dict[str, StorageRef]
    tensors: list[TensorRecord]


# -- the allow-list -------------------------------------------------------------------------
#: Legacy typed storage classes (``torch.FloatStorage``) to their element dtypes.
STORAGE_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
    "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}
#: PyTorch's dtypes by the canonical name a pickle holds (``torch.float32``, never
#: ``torch.float``). Which of them pylucid can load is :mod:`pylucid.torch_checkpoint`'s.
TORCH_DTYPES = frozenset(
    {
        *STORAGE_DTYPES.values(),
        "uint16", "uint32", "uint64", "complex32",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
        "float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
        *(f"int{n}" for n in range(1, 8)), *(f"uint{n}" for n in range(1, 8)),
    }
)  # fmt: skip
#: Globals of PyTorch's own allow-list that pylucid refuses, with what they hold.
UNSUPPORTED = {
    "torch._utils._rebuild_sparse_tensor": "a sparse tensor",
    "torch._utils._rebuild_qtensor": "a quantized tensor",
    "torch._utils._rebuild_nested_tensor": "a nested tensor",
    "torch._utils._rebuild_meta_tensor_no_storage": "a tensor on the meta device (no values)",
    "torch._utils._rebuild_wrapper_subclass": "a tensor subclass",
    "torch._utils._rebuild_device_tensor_from_numpy": "a tensor of a device without storage",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": "a tensor of a device without storage",
    "torch._tensor._rebuild_from_type_v2": "a tensor subclass or a tensor with Python attributes",
    "torch.serialization._get_layout": "a tensor of a non-strided layout",
}
#: How deeply containers may nest in a checkpoint (hashing a tuple nested a million deep
#: overflows the C stack, so deeper tuples are refused as they are made).
MAX_DEPTH = 100
#: How many values one tuple or frozenset may hold, counted through the tuples it nests:
#: a tuple that holds one tuple twice, 60 times over, is a few hundred bytes of pickle that
#: hashing (as a dict key) would walk 2**60 times.
MAX_TUPLE_VALUES = 1 << 22
#: Python 2 module names that protocol-2 pickles use for builtins.
_MODULE_ALIASES = {"__builtin__": "builtins"}


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(type(v) is int and v >= 0 for v in value):
        raise TypeError(f"{what} must be a tuple of non-negative ints, got {reprlib.repr(value)}")
    return value


def _check(condition: bool, problem: str) -> None:
    if not condition:
        raise TypeError(problem)


def _no_hooks(hooks: Any) -> None:
    _check(isinstance(hooks, dict) and not hooks, "backward hooks must be an empty dict")


def _no_metadata(metadata: Any) -> None:
    # PyTorch's tensor metadata holds the conjugate and negative bits of a lazy view
    plain = metadata is None or (isinstance(metadata, dict) and not any(metadata.values()))
    _check(plain, "conjugate or negative-bit tensor views are not supported")


def _tensor(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, dtype: str | None
) -> TensorRecord:
    _check(isinstance(storage, StorageRef), "the storage argument is not a storage")
    _check(type(offset) is int and offset >= 0, f"storage offset {reprlib.repr(offset)} < 0")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    _check(len(size) == len(stride), f"size {size} and stride {stride} differ in length")
    _check(type(requires_grad) is bool, "requires_grad must be a bool")
    if dtype is None:
        _check(storage.dtype is not None, "an untyped storage needs _rebuild_tensor_v3's dtype")
        dtype = storage.dtype
    _check(storage.dtype in (None, dtype), f"a {dtype} tensor on a {storage.dtype} storage")
    return TensorRecord(storage, offset, size, stride, dtype, requires_grad)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> TensorRecord:
    return _tensor(storage, offset, size, stride, False, None)


def _rebuild_tensor_v2(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any,
    backward_hooks: Any,
    metadata: Any = None,
) -> TensorRecord:
    _no_hooks(backward_hooks)
    _no_metadata(metadata)
    return _tensor(storage, offset, size, stride, requires_grad, None)


def _rebuild_tensor_v3(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any,
    backward_hooks: Any,
    dtype: Any,
    metadata: Any = None,
) -> TensorRecord:
    _no_hooks(backward_hooks)
    _no_metadata(metadata)
    _check(isinstance(dtype, TorchDType), "the dtype argument is not a torch dtype")
    return _tensor(storage, offset, size, stride, requires_grad, dtype.name)


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> ParameterRecord:
    _check(isinstance(data, TensorRecord), "a parameter's data is not a tensor")
    _check(type(requires_grad) is bool, "requires_grad must be a bool")
    _no_hooks(backward_hooks)
    return ParameterRecord(data, requires_grad)


def _rebuild_parameter_with_state(
    data: Any, requires_grad: Any, backward_hooks: Any, state: Any
) -> ParameterRecord:
    _check(not state, "a parameter with Python attributes is not supported")
    return _rebuild_parameter(data, requires_grad, backward_hooks)


def _mapping(kind: type) -> Callable[..., dict]:
    def make(*args: Any) -> dict:
        _check(len(args) <= 1 and all(isinstance(a, (list, dict)) for a in args),
               f"{kind.__name__} takes nothing or one list or dict")  # fmt: skip
        return kind(*args)

    return make


def _size(items: Any = ()) -> tuple[int, ...]:
    return _ints(tuple(items) if isinstance(items, (list, tuple)) else items, "torch.Size")


def _device(kind: Any, index: Any = None) -> str:
    _check(isinstance(kind, str) and (index is None or type(index) is int), "a bad device")
    return kind if index is None else f"{kind}:{index}"


def _latin1(text: Any, encoding: Any = "latin1") -> bytes:
    # protocol 2 writes bytes as _codecs.encode(text, "latin1")
    _check(isinstance(text, str) and encoding in ("latin1", "latin-1"), "only latin1 text")
    return text.encode("latin1")


def _bytearray(data: Any = b"", encoding: Any = None) -> bytearray:
    # never bytearray(n): that would allocate n bytes
    if isinstance(data, str):
        return bytearray(_latin1(data, encoding))
    _check(isinstance(data, (bytes, list)) and encoding is None, "bytearray of bytes or list")
    return bytearray(data)


def _set(items: Any = ()) -> set:
    _check(isinstance(items, (list, tuple)), "set takes a list")
    return set(items)


def _complex(real: Any = 0.0, imag: Any = 0.0) -> complex:
    _check(all(type(v) in (int, float) for v in (real, imag)), "complex takes two numbers")
    return complex(real, imag)


def _allowed_globals() -> dict[str, Any]:
    table: dict[str, Any] = {
        "collections.OrderedDict": _mapping(OrderedDict),
        "collections.Counter": _mapping(Counter),
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
        "torch.Size": _size,
        "torch.device": _device,
        "torch.storage.UntypedStorage": StorageType("UntypedStorage", None),
        "_codecs.encode": _latin1,
        "builtins.bytearray": _bytearray,
        "builtins.set": _set,
        "builtins.complex": _complex,
    }
    table.update({f"torch.{n}": StorageType(n, d) for n, d in STORAGE_DTYPES.items()})
    table.update({f"torch.{n}": TorchDType(n) for n in TORCH_DTYPES})
    return table


ALLOWED_GLOBALS = _allowed_globals()
#: The allowed functions (REDUCE calls only these), to their global's name.
_FUNCTIONS = {value: name for name, value in ALLOWED_GLOBALS.items() if callable(value)}


# -- the interpreter ------------------------------------------------------------------------
class _Mark:
    """The MARK opcode's place on the stack."""


_MARK = _Mark()
_PUSH_ARGUMENT = frozenset(
    {
        "BININT", "BININT1", "BININT2", "LONG1", "LONG4", "BINFLOAT", "BINUNICODE",
        "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    }
)  # fmt: skip
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_EMPTY: dict[str, Callable[[], Any]] = {"EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_SET": set}
#: Opcodes with nothing to do: the protocol, frame lengths, the end (genops stops there).
_IGNORED = frozenset({"PROTO", "FRAME", "STOP"})


def unpickle(data: bytes, source: str) -> Unpickled:
    """Interpret the pickle ``data`` under the allow-list (see the module documentation).

    Parameters
    ----------
    data : bytes
        The bytes of ``data.pkl``.
    source : str
        The checkpoint's name, for messages.

    Returns
    -------
    Unpickled
        The object with records in place of tensors, and the storages and tensors named.

    Raises
    ------
    UnpicklingError
        For a global off the allow-list (naming it), an opcode outside the subset, a
        malformed program (stack or memo misuse, a truncated file) or a refused argument of
        an allowed function. Nothing the file names has run.
    """
    return _Machine(source).run(data)


class _Machine:
    """The stack, the memo and the storages of one pickle being interpreted."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.storages: dict[str, StorageRef] = {}
        self.tensors: list[TensorRecord] = []
        # id(tuple or frozenset) -> (its depth, its values counted through nested ones, it)
        self.shapes: dict[int, tuple[int, int, Any]] = {}

    def fail(self, position: int, problem: str) -> UnpicklingError:
        return UnpicklingError(f"load: {self.source!r}: data.pkl at byte {position}: {problem}")

    def run(self, data: bytes) -> Unpickled:
        position = 0
        try:
            # genops parses each opcode's argument (and runs nothing); it ends at STOP
            for opcode, argument, position in pickletools.genops(io.BytesIO(data)):
                self.step(opcode.name, argument, position)
            root = self.pop()
            if self.stack:
                raise IndexError
            return Unpickled(root, self.storages, self.tensors)
        except (IndexError, KeyError):
            problem = "it reads an empty stack or an unset memo entry, or leaves a stack"
        except (TypeError, OverflowError) as exc:
            problem = f"an object it builds is refused: {exc}"
        except ValueError as exc:  # pickletools: a truncated file or an unknown opcode
            if isinstance(exc, UnpicklingError):
                raise
            problem = f"it is not a valid pickle ({exc})"
        raise self.fail(position, problem) from None

    def pop(self) -> Any:
        value = self.stack.pop()
        if value is _MARK:
            raise IndexError
        return value

    def pop_mark(self) -> list[Any]:
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is _MARK:
                items = stack[i + 1 :]
                del stack[i:]
                return items
        raise IndexError

    def frozen(self, kind: type, items: list[Any]) -> Any:
        """A tuple or frozenset of ``items``, refused if it nests more than MAX_DEPTH deep or
        holds more than MAX_TUPLE_VALUES values through the tuples it nests."""
        shapes = [self.shapes.get(id(item), (0, 1)) for item in items]
        depth = 1 + max((shape[0] for shape in shapes), default=0)
        values = sum(shape[1] for shape in shapes)
        if depth > MAX_DEPTH:
            raise TypeError(f"tuples or frozensets nest more than {MAX_DEPTH} deep")
        if values > MAX_TUPLE_VALUES:
            raise TypeError(f"a tuple or frozenset holds more than {MAX_TUPLE_VALUES} values")
        result = kind(items)
        self.shapes[id(result)] = (depth, values, result)  # (held: its id stays its own)
        return result

    def top(self, kind: type, opcode: str) -> Any:
        target = self.stack[-1]
        if not isinstance(target, kind):
            raise TypeError(f"{opcode} applies to a {type(target).__name__}")
        return target

    def step(self, name: str, argument: Any, position: int) -> None:
        stack = self.stack
        if name in _PUSH_ARGUMENT:
            stack.append(argument)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name in _EMPTY:
            stack.append(_EMPTY[name]())
        elif name in _IGNORED:
            pass
        elif name == "MARK":
            stack.append(_MARK)
        elif name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
            self.memo[len(self.memo) if name == "MEMOIZE" else argument] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET"):
            stack.append(self.memo[argument])
        elif name == "POP":
            self.pop()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "BYTEARRAY8":
            stack.append(bytearray(argument))
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "TUPLE":
            stack.append(self.frozen(tuple, self.pop_mark()))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            items = [self.pop() for _ in range(int(name[-1]))]
            stack.append(self.frozen(tuple, items[::-1]))
        elif name == "FROZENSET":
            stack.append(self.frozen(frozenset, self.pop_mark()))
        elif name == "APPEND":
            item = self.pop()
            self.top(list, name).append(item)
        elif name == "APPENDS":
            items = self.pop_mark()
            self.top(list, name).extend(items)
        elif name == "ADDITEMS":
            items = self.pop_mark()
            self.top(set, name).update(items)
        elif name == "SETITEM":
            value, key = self.pop(), self.pop()
            self.top(dict, name)[key] = value
        elif name == "SETITEMS":
            items = self.pop_mark()
            target = self.top(dict, name)
            if len(items) % 2:
                raise IndexError
            for i in range(0, len(items), 2):
                target[items[i]] = items[i + 1]
        elif name == "GLOBAL":
            module, _, attribute = argument.partition(" ")
            stack.append(self.resolve(module, attribute, position))
        elif name == "STACK_GLOBAL":
            attribute, module = self.pop(), self.pop()
            if not (isinstance(module, str) and isinstance(attribute, str)):
                raise TypeError("STACK_GLOBAL needs two strings")
            stack.append(self.resolve(module, attribute, position))
        elif name == "REDUCE":
            arguments = self.pop()
            stack.append(self.call(self.pop(), arguments))
        elif name == "BUILD":
            state = self.pop()
            self.build(stack[-1], state)
        elif name == "BINPERSID":
            stack.append(self.persistent(self.pop()))
        else:
            raise self.fail(
                position,
                f"the opcode {name} is not allowed: pylucid reads tensors, containers, numbers "
                f"and strings, and never builds other objects",
            )

    def resolve(self, module: str, attribute: str, position: int) -> Any:
        full = f"{_MODULE_ALIASES.get(module, module)}.{attribute}"
        if full in ALLOWED_GLOBALS:
            return ALLOWED_GLOBALS[full]
        if full in UNSUPPORTED:
            raise self.fail(
                position,
                f"it holds {UNSUPPORTED[full]} (GLOBAL {full}), which pylucid does not load; "
                f"it loads dense tensors",
            )
        raise self.fail(
            position,
            f"GLOBAL {full} is not allowed: pylucid never unpickles arbitrary objects (nor "
            f"with weights_only=False); it loads tensors, parameters, containers, numbers, "
            f"strings, dtypes and devices. A module saved whole (torch.save(model)) must be "
            f"saved as model.state_dict() instead",
        )

    def call(self, function: Any, arguments: Any) -> Any:
        if not (callable(function) and function in _FUNCTIONS):
            raise TypeError(f"REDUCE calls a {type(function).__name__}, not an allowed function")
        if not isinstance(arguments, tuple):
            raise TypeError(f"{_FUNCTIONS[function]}'s arguments are not a tuple")
        try:
            result = function(*arguments)
        except TypeError as exc:
            raise TypeError(f"{_FUNCTIONS[function]}: {exc}") from None
        if isinstance(result, TensorRecord):
            self.tensors.append(result)
        return result

    def build(self, target: Any, state: Any) -> None:
        # OrderedDict.__reduce__ carries the instance's __dict__ (a state dict's _metadata)
        if not (type(target) is OrderedDict and isinstance(state, dict)):
            raise TypeError(f"BUILD applies to an OrderedDict's attributes, not a "
                            f"{type(target).__name__}")  # fmt: skip
        if not all(isinstance(key, str) and not key.startswith("__") for key in state):
            raise TypeError("BUILD sets attributes named by plain strings")
        target.__dict__.update(state)

    def persistent(self, saved_id: Any) -> StorageRef:
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5):
            raise TypeError("a persistent id is not ('storage', type, key, location, numel)")
        kind, storage_type, key, location, numel = (
            item.decode("ascii") if isinstance(item, bytes) else item for item in saved_id
        )
        if kind != "storage" or not isinstance(storage_type, StorageType):
            raise TypeError(f"a persistent id of kind {reprlib.repr(kind)} is not a storage")
        if not (isinstance(key, str) and isinstance(location, str)):
            raise TypeError("a storage's key and location must be strings")
        if type(numel) is not int or numel < 0:
            raise TypeError(f"storage {key!r} has the size {reprlib.repr(numel)}")
        storage = StorageRef(key, storage_type.dtype, location, numel)
        known = self.storages.setdefault(key, storage)
        if (known.dtype, known.location, known.numel) != (storage.dtype, location, numel):
            raise TypeError(f"storage {key!r} is declared twice, differently")
        return known
