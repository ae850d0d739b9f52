"""``pl.compile``: capture a step once, replay it as compiled code, guard every replay."""

from __future__ import annotations

import ctypes
import functools
import threading
import time
import types
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from pylucid import memory
from pylucid.amp.autocast import autocast_dtype
from pylucid.backends import registry
from pylucid.compat import differs
from pylucid.compiler.capture import (
    CAPTURE_LOCK,
    CaptureError,
    Recorder,
    Ref,
    Trace,
    capturing,
    reads_again,
)
from pylucid.compiler.mlx import MlxProgram, Watch
from pylucid.compiler.mlx import refusal as mlx_refusal
from pylucid.compiler.plan import owning_tensor, plan
from pylucid.compiler.program import Program, Retrace, flatten, read_now
from pylucid.graph.grad_mode import is_grad_enabled
from pylucid.tensor import Tensor

__all__ = ["CompileStats", "CompiledFunction", "compile"]


#: A compiled function captured again this many times (a guard that failed, a replay
#: abandoned, an evicted trace's signature back) within :data:`RECAPTURE_WINDOW` calls runs
#: eagerly from then on, with one warning naming what failed: capturing costs more than the
#: replays between would save.
RECAPTURE_LIMIT = 8
RECAPTURE_WINDOW = 256


@dataclass
class CompileStats:
    """What a compiled function did: calls replayed, captures made (``traces``), replays
    abandoned by a check and captured again (``retraces``), warm-up
    captures that created optimizer state and were not kept, traces evicted from the
    cache, captures made again (``recaptures``: a guard failed, a replay was abandoned or
    an evicted signature came back), eager calls, and the seconds of the last capture (eager
    run, plan, code generation and Numba's compile or cache load)."""

    replays: int = 0
    traces: int = 0
    retraces: int = 0
    warmups: int = 0
    evictions: int = 0
    recaptures: int = 0
    eager_calls: int = 0
    last_capture_seconds: float = 0.0


class CompiledFunction:
    """A function whose calls replay a captured trace (see :func:`compile`).

    Calls are serialised (one replay or capture of this function at a time); captures of
    all compiled functions are serialised too (:data:`~pylucid.compiler.capture.
    CAPTURE_LOCK`). A compiled function called inside another's capture runs eagerly (its
    work is part of the outer capture)."""

    def __init__(self, fn: Callable[..., Any], fallback: str, max_traces: int,
                 mode: str = "tape") -> None:  # fmt: skip
        if fallback not in ("raise", "eager"):
            raise ValueError(f"pl.compile: fallback must be 'raise' or 'eager', got {fallback!r}")
        if mode not in ("tape", "fused"):
            raise ValueError(f"pl.compile: mode must be 'tape' or 'fused', got {mode!r}")
        self._mode = mode
        if max_traces < 1:
            raise ValueError(f"pl.compile: max_traces must be at least 1, got {max_traces}")
        functools.update_wrapper(self, fn)
        self._fn, self._fallback, self._max_traces = fn, fallback, max_traces
        #: key -> its traces, the most recently replayed first
        self._traces: dict[Hashable, list[Program | MlxProgram]] = {}
        #: every trace, the least recently used first: id -> (key, trace)
        self._order: OrderedDict[int, tuple[Hashable, Program | MlxProgram]] = OrderedDict()
        #: key -> what its last capture made: "trace" or "warmup"
        self._captured: dict[Hashable, str] = {}
        self._recaptured: deque[int] = deque(maxlen=RECAPTURE_LIMIT)
        self._calls = 0
        self._lock = threading.RLock()
        self._function_reads = _function_reads(fn)
        self._eager_reason: str | None = None
        self.stats = CompileStats()

    @property
    def programs(self) -> list[Program | MlxProgram]:
        """The cached traces, the least recently used first."""
        return [program for _, program in self._order.values()]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._eager_reason is not None:
            self.stats.eager_calls += 1
            return self._fn(*args, **kwargs)
        if capturing():  # (inside another capture: its primitives are the outer step's)
            return self._fn(*args, **kwargs)
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        self._calls += 1
        if not kwargs and all([type(a) is Tensor for a in args]):  # (the common call)
            leaves = tensors = list(args)
        else:
            leaves = []
            flatten((args, kwargs), leaves)
            tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
        key = _signature(leaves)
        reason = None  # (why the most recently replayed trace did not fit)
        for program in self._traces.get(key, ()):
            failed = program.failed_guard()
            if failed is None:
                try:
                    result = program(tensors)
                except Retrace as retrace:
                    self.stats.retraces += 1
                    failed = retrace.reason
                else:
                    self._used(key, program)
                    self.stats.replays += 1
                    return result
            reason = reason or failed
        if reason is None and self._captured.get(key) == "trace":
            reason = (f"its trace was evicted: more than max_traces={self._max_traces} "
                      f"signatures (shapes, dtypes, arguments) and states")  # fmt: skip
        if reason is not None and self._recapture(reason):
            return self._eager_call(args, kwargs)
        backend = registry.get("numba")
        if tensors and all(t._backend.name == "mlx" for t in tensors):
            return self._capture_mlx(key, tensors[0]._backend, tensors, leaves, args, kwargs)
        if any(t._backend is not backend for t in tensors):
            return self._eager("its tensors are not all on the numba backend, nor all on "
                               "the mlx one", args, kwargs)  # fmt: skip
        result = self._capture(key, backend, tensors, args, kwargs)
        if self._captured.get(key) != "warmup":  # (after a warm-up the next call captures)
            _release_capture_memory()
        return result

    def _recapture(self, reason: str, stacklevel: int = 4) -> bool:
        """Count a capture made again (``reason``: what failed); whether the function has
        been captured again so often that it runs eagerly from now on (said once, the
        warning ``stacklevel`` frames above :meth:`_give_up`: the caller of the function)."""
        self.stats.recaptures += 1
        self._recaptured.append(self._calls)
        if len(self._recaptured) < RECAPTURE_LIMIT:
            return False
        calls = self._calls - self._recaptured[0] + 1
        if calls > RECAPTURE_WINDOW:
            return False
        self._give_up(
            f"it was captured again {RECAPTURE_LIMIT} times in {calls} calls, so capturing "
            f"would cost more than replays save; the last time because {reason}. Keep what "
            f"the step reads unchanged between calls (or pass it as an argument)",
            stacklevel,
        )
        return True

    def _eager_call(self, args: tuple, kwargs: dict) -> Any:
        self.stats.eager_calls += 1
        return self._fn(*args, **kwargs)

    def _used(self, key: Hashable, program: Program | MlxProgram) -> None:
        """Note that ``program`` replayed: first of its key's traces, last to be evicted."""
        programs = self._traces[key]
        if programs[0] is not program:
            programs.remove(program)
            programs.insert(0, program)
        self._order.move_to_end(id(program))

    def _capture_mlx(self, key: Hashable, backend: Any, tensors: list[Tensor],
                     leaves: list[Any], args: tuple, kwargs: dict) -> Any:  # fmt: skip
        """Run the step eagerly under a :class:`~pylucid.compiler.mlx.Watch`; where it only
        computes, keep an ``mx.compile`` of it for the next calls (else run eagerly from now
        on, saying why)."""
        started = time.perf_counter()
        function_reads = self._reads_now()
        before = [t._storage for t in tensors]
        with CAPTURE_LOCK:
            watch = Watch(backend)
            with watch:
                result = self._fn(*args, **kwargs)
        reason, state = mlx_refusal(watch, tensors, before, result, owning_tensor)
        if reason is not None:
            self._give_up(f"it {reason}, which mx.compile cannot replay")
            return result
        template = flatten((args, kwargs), [])
        reads = [("attribute", m, n, v) for m, n, v in watch.reads.values()] + function_reads
        program = MlxProgram(self._fn, backend, template, leaves, state, reads)
        self._keep(key, program, started)
        return result

    def _keep(self, key: Hashable, program: Program | MlxProgram, started: float) -> None:
        """Cache ``program`` for calls of ``key`` (evicting the least recently used trace
        beyond ``max_traces``) and count it."""
        self._traces.setdefault(key, []).insert(0, program)
        self._order[id(program)] = (key, program)
        self._captured[key] = "trace"
        self.stats.traces += 1
        if len(self._order) > self._max_traces:
            old_key, old = self._order.popitem(last=False)[1]
            self._traces[old_key].remove(old)
            if not self._traces[old_key]:
                del self._traces[old_key]
            self.stats.evictions += 1
        self.stats.last_capture_seconds = time.perf_counter() - started

    def _give_up(self, reason: str, stacklevel: int = 4) -> None:
        """Run eagerly from now on, saying why once (the warning points at the caller of
        the compiled function: ``__call__`` -> ``_call`` -> ``_capture`` -> here)."""
        self._eager_reason = reason
        warnings.warn(f"pl.compile: {self.__name__} runs eagerly from now on: {reason}",
                      RuntimeWarning, stacklevel=stacklevel + 1)  # fmt: skip

    def _eager(self, reason: str, args: tuple, kwargs: dict) -> Any:
        self._give_up(reason)
        return self._eager_call(args, kwargs)

    def _reads_now(self) -> list[tuple]:
        """The closure variables and globals the function reads, with their values now
        (before the capture runs it: a value the step itself changes fails its guard)."""
        return [(kind, owner, name, reads_again(read_now(kind, owner, name)))
                for kind, owner, name in self._function_reads]  # fmt: skip

    def _capture(self, key: Hashable, backend: Any, tensors: list[Tensor], args: tuple,
                 kwargs: dict) -> Any:  # fmt: skip
        started = time.perf_counter()
        function_reads = self._reads_now()
        with CAPTURE_LOCK:
            recorder = Recorder(backend)
            trace = recorder.trace
            trace.inputs = [trace.ref(t._storage).index for t in tensors]
            trace.input_tensors = list(tensors)
            with recorder:
                result = self._fn(*args, **kwargs)
            if trace.host_read is not None:
                what, where = trace.host_read
                if self._fallback == "raise":
                    raise CaptureError(
                        f"pl.compile: {self.__name__} {what} at {where}: a compiled step "
                        f"cannot depend on tensor values in Python. This call ran eagerly to "
                        f"its end; move the read out of the function (return the tensor "
                        f"instead), or use pl.compile(fn, fallback='eager') to run it eagerly"
                    )
                self._give_up(f"it {what} at {where}")
                return result
            if trace.created_state:  # a first optimizer step: the next call captures again
                self.stats.warmups += 1
                if self._captured.get(key) == "warmup":
                    self._recapture("an optimizer created its state again", stacklevel=5)
                self._captured[key] = "warmup"
                return result
            try:
                program = self._program(trace, backend, result, function_reads)
            except CaptureError as error:
                if self._fallback == "raise":
                    raise
                self._give_up(str(error))
                return result
        self._keep(key, program, started)
        return result

    def _program(self, trace: Trace, backend: Any, result: Any,
                 function_reads: list[tuple]) -> Program:  # fmt: skip
        """The replay of ``trace``; anything that stops it is a :class:`CaptureError`
        naming the step (an unexpected error of the compiler's too, chained)."""
        outputs: list[Any] = []
        template = flatten(result, outputs)
        for i, leaf in enumerate(outputs):
            if isinstance(leaf, Tensor):
                index = trace.index_of(leaf._storage)
                if index is None:
                    raise CaptureError(
                        f"pl.compile: {self.__name__} returns a tensor made outside the ops "
                        f"(shape {leaf.shape}); return tensors the step computed"
                    )
                outputs[i] = Ref(index)
        trace.outputs = [o.index if isinstance(o, Ref) else None for o in outputs]
        try:
            return Program(trace, plan(trace, fuse=self._mode == "fused"), backend, template,
                           outputs, self._mode, function_reads)  # fmt: skip
        except CaptureError:
            raise
        except Exception as error:
            raise CaptureError(
                f"pl.compile: {self.__name__} could not be compiled ({type(error).__name__}: "
                f"{error}); this call ran eagerly to its end. This is a limit or a bug of "
                f"pylucid's compiler: run the step eagerly (fallback='eager') and report it"
            ) from error


def _c_malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), or None where it has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # (another C library, or no dlopen(NULL))
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_MALLOC_TRIM = _c_malloc_trim()


def _release_capture_memory() -> None:
    """Give back to the system the memory a capture held: its trace kept every value of the
    step alive at once until the plan was made (the step's whole size: 790 MiB for the
    benchmark's GPT-small step, whose eager run has 255 MiB live at its peak), freed into
    the pool of large buffers (:mod:`pylucid.memory`) and the C allocator's heap, which
    kept it (glibc's threshold for mapping large blocks of their own rises as they are
    freed, so later ones come from the heap). A replay takes none of it: its values live
    in its arenas. Measured on that step: 994 MiB resident after the capture, 244 MiB after
    this (about 30 ms)."""
    memory.empty_cache()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _function_reads(fn: Callable[..., Any]) -> list[tuple[str, Any, str]]:
    """The closure cells and globals ``fn``'s code (and code nested in it: lambdas,
    comprehensions) names, as ``(kind, owner, name)``: what a trace reads of the function's
    Python state, guarded at each replay (numbers by value, objects by identity)."""
    function = getattr(fn, "__func__", fn)
    code = getattr(function, "__code__", None)
    if code is None:
        return []
    reads: list[tuple[str, Any, str]] = [
        ("cell", cell, name) for name, cell in zip(code.co_freevars, function.__closure__ or ())
    ]
    names: set[str] = set()
    codes = [code]
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    namespace = function.__globals__
    reads += [("global", namespace, name) for name in sorted(names) if name in namespace]
    return reads


def _signature(leaves: list[Any]) -> Hashable:
    """The key of a call: each tensor's shape, dtype, backend and requires_grad, every other
    argument by value (by identity where it cannot be hashed), grad mode and autocast."""
    key: list[Any] = [is_grad_enabled(), autocast_dtype()]
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            key.append((leaf._shape, leaf._dtype, leaf._backend.name, leaf._requires_grad))
        else:
            try:
                hash(leaf)
                key.append((type(leaf), leaf))
            except TypeError:
                key.append((type(leaf), id(leaf)))
    return tuple(key)


#: PyTorch's ``torch.compile`` modes: each gives eager's values, so each is pylucid's default.
_TORCH_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@differs(
    "captures whole steps (forward, backward, optimizer); a Module comes back wrapped "
    "and runs eagerly; PyTorch's modes mean 'tape'"
)
def compile(  # noqa: A001  (PyTorch's name: pl.compile)
    fn: Callable[..., Any] | None = None,
    *,
    mode: str | None = None,
    fallback: str = "raise",
    max_traces: int = 8,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable[..., Any] = "inductor",
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Capture ``fn`` once and replay it as compiled Numba code (also a decorator).

    Parameters
    ----------
    fn : callable or Module
        A step: forward, ``backward()``, an optimizer's ``step()``, returning tensors. A
        :class:`~pylucid.nn.Module` comes back as an
        :class:`~pylucid.compiler.module.OptimizedModule` (PyTorch's interface), whose
        forward runs eagerly: pylucid compiles whole steps.
    mode : {"tape", "fused"} or PyTorch's mode, optional
        ``"tape"`` (the default): each loop of the step is a row of a tape that one
        compiled loop runs, calling kernels compiled per kind of loop and shared by every
        graph - a new graph compiles nothing of its own. ``"fused"``: the step's loops are
        fused into Numba functions generated for this graph - fewer passes over memory
        (faster on large elementwise chains), seconds of compile for each new graph
        (cached on disk). PyTorch's ``"default"``, ``"reduce-overhead"``,
        ``"max-autotune"`` and ``"max-autotune-no-cudagraphs"`` mean ``"tape"``.
    fallback : {"raise", "eager"}
        What a step that reads tensor values in Python does: raise
        :class:`~pylucid.compiler.CaptureError` naming the line, or run eagerly from then on
        with one warning.
    max_traces : int
        How many traces (one per call signature and state) are kept; the oldest is evicted.
    fullgraph, dynamic, options
        PyTorch's options, accepted: a capture is always one graph (a value read in Python
        raises or falls back, by ``fallback``), and a new shape is a new trace.
    backend : str or callable
        PyTorch's compiler backend: ``"eager"`` runs ``fn`` uncompiled, as PyTorch's does;
        other names use pylucid's compiler.
    disable : bool
        Return ``fn`` itself, uncompiled (PyTorch's switch).

    Returns
    -------
    CompiledFunction
        Call it as ``fn``; ``.stats`` counts replays, traces, evictions.

    Notes
    -----
    See ``docs/compile.md`` for what is captured and what is not.
    """
    if mode is None or mode in _TORCH_MODES:
        mode = "tape"

    def wrap(f: Callable[..., Any]) -> Any:
        if disable or backend == "eager":
            return f
        from pylucid.nn.modules.module import Module

        if isinstance(f, Module):
            from pylucid.compiler.module import OptimizedModule

            return OptimizedModule(f)
        return CompiledFunction(f, fallback, max_traces, mode)

    return wrap if fn is None else wrap(fn)
