"""``pl.compile``: capture a training step once, replay it as compiled Numba code.

The first call of a compiled function runs it eagerly and records every backend primitive
it calls (:mod:`~pylucid.compiler.capture`); the record is planned - values placed in
arenas, elementwise chains fused, the rest assigned to BLAS, loops or the backend itself
(:mod:`~pylucid.compiler.plan`) - and emitted as Numba source cached on disk
(:mod:`~pylucid.compiler.codegen`); later calls with the same signature replay it
(:mod:`~pylucid.compiler.program`) after checking its guards (:mod:`~pylucid.compiler.api`).
"""

from pylucid.compiler.api import CompiledFunction, CompileStats, compile  # noqa: A004
from pylucid.compiler.capture import CaptureError

__all__ = ["CaptureError", "CompileStats", "CompiledFunction", "compile"]
