"""Names of a module that are imported when first looked up (PEP 562), not with the module.

``import pylucid`` leaves out what a program may never use - the compiler, checkpoints, the
MLX backend, the recurrent and transformer layers, L-BFGS, the learning-rate schedules,
``pylucid.distributed``, ``pylucid.utils.data`` - and each such name stays where it was:
``pl.compile``, ``from pylucid import save``, ``pl.nn.LSTM`` and ``dir(pl)`` answer as if it
had been imported with the module. ``tests/test_import.py`` keeps the list of what
``import pylucid`` loads.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(namespace: dict[str, Any], lazy: dict[str, str]) -> None:
    """Give the module whose globals are ``namespace`` the names of ``lazy``, each imported
    on its first lookup and then kept in the module like any other global.

    Parameters
    ----------
    namespace : dict
        The module's ``globals()``; a ``__getattr__`` already there (one of
        :func:`~pylucid.compat.refuse_attributes`) answers the names that are not lazy.
    lazy : dict
        Name -> ``"package.module"`` (the module itself) or ``"package.module:attribute"``.
    """
    module = namespace["__name__"]
    fallback = namespace.get("__getattr__")

    def __getattr__(name: str) -> Any:  # noqa: N807  (the module hook's name)
        target = lazy.get(name)
        if target is None:
            if fallback is not None:
                return fallback(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attribute = target.partition(":")
        value = importlib.import_module(where)
        if attribute:
            value = getattr(value, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(namespace) | set(lazy))

    namespace["__getattr__"] = __getattr__
    namespace["__dir__"] = __dir__
