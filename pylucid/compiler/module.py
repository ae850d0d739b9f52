"""``pl.compile(module)``: PyTorch's ``OptimizedModule``, the module wrapped with its
interface.

``torch.compile(model)`` returns a module whose forward is compiled and whose other
attributes are the model's (``model.eval()``, ``model.parameters()``, the model's own
methods), registered as the submodule ``_orig_mod`` (so its ``state_dict`` keys start with
``_orig_mod.``, which programs strip when they save). pylucid's compiler captures whole steps
- forward, ``backward()`` and the optimizer's update, a program that a forward alone is not -
so the wrapped module's forward runs eagerly: the same values, at eager speed. Wrapping the
training step function in ``pl.compile`` is what replays compiled code.
"""

from __future__ import annotations

import warnings
from typing import Any

from pylucid.nn.modules.module import Module

__all__ = ["OptimizedModule"]

_warned = False


class OptimizedModule(Module):
    """``module`` under :func:`pylucid.compile`: calls run its forward (eagerly, see the
    module docs); other attributes are ``module``'s."""

    def __init__(self, module: Module) -> None:
        super().__init__()
        self._orig_mod = module
        global _warned
        if not _warned:
            _warned = True
            warnings.warn(
                f"pl.compile({type(module).__name__}): pylucid compiles whole training steps, "
                f"not a module's forward alone, so this module runs eagerly (same results). "
                f"For compiled replays, decorate the function that runs forward, backward() "
                f"and optimizer.step() with @pl.compile",
                UserWarning,
                stacklevel=3,
            )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["_orig_mod"], name)

    def __repr__(self) -> str:
        return f"OptimizedModule(\n  (_orig_mod): {self._orig_mod!r}\n)"
