"""The named tuples PyTorch's value-selecting functions return (``torch.return_types``).

``values, indices = pl.max(x, dim=1)`` and ``pl.max(x, 1).indices`` work as in PyTorch; each
is a :class:`typing.NamedTuple` named after its function.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "aminmax",
    "cummax",
    "cummin",
    "kthvalue",
    "max",
    "median",
    "min",
    "mode",
    "nanmedian",
    "sort",
    "topk",
]


def _pair(name: str, first: str = "values", second: str = "indices") -> type:
    kind = NamedTuple(name, [(first, Any), (second, Any)])
    kind.__module__ = __name__
    kind.__doc__ = f"What ``{name}`` returns: ``({first}, {second})``."
    return kind


max = _pair("max")  # noqa: A001
min = _pair("min")  # noqa: A001
median = _pair("median")
nanmedian = _pair("nanmedian")
mode = _pair("mode")
kthvalue = _pair("kthvalue")
sort = _pair("sort")
topk = _pair("topk")
cummax = _pair("cummax")
cummin = _pair("cummin")
aminmax = _pair("aminmax", "min", "max")
