"""``pl.compile`` on the mlx backend: a step that only computes runs through ``mx.compile``.

MLX compiles a function of arrays by tracing it once; arrays it reads from elsewhere become
constants and Python state is frozen. A pylucid step fits that when it is a pure
computation of tensors, so the first call runs eagerly under a :class:`Watch` of the mlx
backend's primitives and the step is delegated only if it:

- records no graph and runs no backward (a tensor that requires grad, ``backward()``);
- changes no tensor (an in-place op, an optimizer's step: mlx arrays are immutable, an
  update rebinds a tensor's storage);
- reads no values in Python, makes no tensor from Python data and draws no random numbers.

Tensors the step reads that are not its arguments (a model's weights) are found by their
arrays and passed to the compiled function at every call, their current storages, so that
later updates of them are seen (``mx.compile``'s ``inputs=`` does the same for a tree of
state). A step that does not fit runs eagerly, with one warning saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pylucid import factories
from pylucid.compiler.capture import Shadowing
from pylucid.compiler.program import describe_read, flatten, read_now, rebuild, same_read
from pylucid.graph import engine
from pylucid.tensor import Tensor

__all__ = ["MlxProgram", "Watch", "refusal"]

class Watch(Shadowing):
    """A context manager that notes what a run on the mlx ``backend`` reads and makes:
    ``made`` (ids of the arrays its primitives returned), ``read`` (the arrays they were
    given, by id) and ``refusal`` (why the run cannot be compiled, or None)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.made: set[int] = set()
        self.read: dict[int, Any] = {}
        self.refusal: str | None = None
        #: the attributes of modules the run read (see ``Shadowing._record_module_reads``)
        self.reads: dict[tuple[int, str], tuple[Any, str, Any]] = {}
        super().__init__()

    def __enter__(self) -> Watch:
        self._shadow_primitives(self.backend, self._watching)
        self._patch_for_thread(engine, "run_backward", engine.run_backward,
                               self._refusing("runs backward()", engine.run_backward))
        draws = "draws random numbers (a compiled replay would repeat them)"
        self._patch_for_thread(factories, "_random", factories._random,
                               self._refusing(draws, factories._random))  # fmt: skip
        self._record_module_reads(self.reads)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _refuse(self, reason: str) -> None:
        if self.refusal is None:
            self.refusal = reason

    def _refusing(self, reason: str, fn: Callable) -> Callable:
        def run(*args: Any, **kwargs: Any) -> Any:
            self._refuse(reason)
            return fn(*args, **kwargs)

        return run

    def _watching(self, name: str, method: Callable) -> Callable:
        if name == "to_numpy":
            return self._refusing("reads a tensor's values in Python", method)
        if name == "from_numpy":
            return self._refusing("makes a tensor from Python data or a random draw", method)
        import mlx.core as mx

        array_type = mx.array

        def watch(*args: Any) -> Any:
            for a in _arrays(args, array_type):
                if id(a) not in self.made:
                    self.read.setdefault(id(a), a)
            result = method(*args)
            for a in _arrays((result,), array_type):
                self.made.add(id(a))
            return result

        return watch


def _arrays(values: Any, array_type: type) -> list[Any]:
    found: list[Any] = []
    for v in values:
        if isinstance(v, array_type):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found += _arrays(v, array_type)
    return found


class MlxProgram:
    """A step compiled by ``mx.compile``: called with the step's tensor arguments, it
    passes their arrays and the current arrays of the tensors the step reads besides
    (``state``) to the compiled function and wraps its arrays as the step's result.

    Parameters
    ----------
    fn : callable
        The step.
    backend
        The mlx backend.
    template, leaves
        The step's arguments flattened (:func:`~pylucid.compiler.program.flatten`).
    state : list of Tensor
        The tensors the step reads that are not its arguments.
    reads : list of tuple
        The Python values the step read, ``(kind, owner, name, value)``, guarded as a
        :class:`~pylucid.compiler.program.Program` guards them.
    """

    def __init__(self, fn: Callable[..., Any], backend: Any, template: Any,
                 leaves: list[Any], state: list[Tensor], reads: list[tuple]) -> None:  # fmt: skip
        import mlx.core as mx

        self.backend, self.state, self.reads = backend, state, reads
        self.positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)]
        self.result_template: Any = None
        #: per leaf of the result: (True, its dtype) for a tensor, (False, the leaf)
        self.result_leaves: list[tuple[bool, Any]] = []

        def pure(*arrays: Any) -> list[Any]:
            inputs, current = arrays[: len(self.positions)], arrays[len(self.positions) :]
            given = list(leaves)
            for position, array in zip(self.positions, inputs):
                given[position] = Tensor._make(array, backend, leaves[position]._dtype)
            saved = [t._storage for t in state]
            for tensor, array in zip(state, current):
                tensor._storage = array
            try:
                args, kwargs = rebuild(template, given)
                result = fn(*args, **kwargs)
            finally:
                for tensor, storage in zip(state, saved):
                    tensor._storage = storage
            out: list[Any] = []
            self.result_template = flatten(result, out)
            self.result_leaves = [(True, leaf._dtype) if isinstance(leaf, Tensor) else
                                  (False, leaf) for leaf in out]  # fmt: skip
            return [leaf._storage for leaf in out if isinstance(leaf, Tensor)]

        self.compiled = mx.compile(pure)

    def failed_guard(self) -> str | None:
        """What changed of the Python values ``mx.compile`` froze into its trace: the
        attributes of modules the step read (and the function's closure and globals);
        None where nothing did. The state's arrays need no guard: their current arrays are
        passed at each call (a changed shape or dtype makes ``mx.compile`` trace again)."""
        for kind, owner, name, expected in self.reads:
            if not same_read(read_now(kind, owner, name), expected):
                return f"{describe_read(kind, owner, name)} changed"
        return None

    def __call__(self, tensors: list[Tensor]) -> Any:
        arrays = self.compiled(*[t._storage for t in tensors],
                               *[t._storage for t in self.state])  # fmt: skip
        produced = iter(arrays)
        leaves = [
            Tensor._make(next(produced), self.backend, value) if is_tensor else value
            for is_tensor, value in self.result_leaves
        ]
        return rebuild(self.result_template, leaves)


def refusal(
    watch: Watch,
    arguments: list[Tensor],
    before: list[Any],
    result: Any,
    owner_of: Callable[[Any], Tensor | None],
) -> tuple[str | None, list[Tensor]]:
    """Why a watched run does not fit ``mx.compile`` (None where it does), and the tensors
    it read besides its ``arguments`` (whose storages were ``before``)."""
    if watch.refusal is not None:
        return watch.refusal, []
    if any(t._storage is not s for t, s in zip(arguments, before)):
        return "changes its arguments in place", []
    leaves: list[Any] = []
    flatten(result, leaves)
    if any(isinstance(leaf, Tensor) and leaf._requires_grad for leaf in leaves):
        return "records a graph (its tensors require grad)", []
    given = {id(s) for s in before}
    state: list[Tensor] = []
    for key, array in watch.read.items():
        if key in given:
            continue
        owner = owner_of(array)
        if owner is None:
            return ("reads an array no tensor holds now (a tensor it updated in place, or a "
                    "copy made outside the backend)"), []  # fmt: skip
        if all(owner is not t for t in state):
            state.append(owner)
    return None, state
