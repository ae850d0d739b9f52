"""How tensors print: :func:`set_printoptions`, as ``torch.set_printoptions``.

The values are NumPy's ``array2string`` of the tensor's values with these options (PyTorch's
defaults: 4 digits, summarised beyond 1000 elements with 3 at each edge, 80 columns).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["format_values", "get_printoptions", "set_printoptions"]

_DEFAULTS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80, "sci_mode": None}
_PROFILES = {
    "default": _DEFAULTS,
    "short": {**_DEFAULTS, "precision": 2, "edgeitems": 2},
    "full": {**_DEFAULTS, "threshold": np.inf},
}
_options: dict[str, Any] = dict(_DEFAULTS)


def set_printoptions(
    precision: int | None = None,
    threshold: float | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    profile: str | None = None,
    sci_mode: bool | None = None,
) -> None:
    """Set how tensors print (process-wide): ``precision`` digits after the point,
    summarise beyond ``threshold`` elements keeping ``edgeitems`` at each edge, wrap at
    ``linewidth`` columns, scientific notation always (True), never (False) or as NumPy
    chooses (None); ``profile`` ("default", "short", "full") sets them all first."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be one of {sorted(_PROFILES)}")
        _options.update(_PROFILES[profile])
    given = {"precision": precision, "threshold": threshold, "edgeitems": edgeitems,
             "linewidth": linewidth}  # fmt: skip
    _options.update({k: v for k, v in given.items() if v is not None})
    if sci_mode is not None or profile is not None:
        _options["sci_mode"] = sci_mode


def get_printoptions() -> dict[str, Any]:
    """The current print options."""
    return dict(_options)


def format_values(values: np.ndarray, prefix: str) -> str:
    """``values`` as the body of a tensor's repr, under the current options."""
    sci = _options["sci_mode"]
    formatter = None
    if sci is True:
        digits = _options["precision"]
        formatter = {"float_kind": lambda v: np.format_float_scientific(v, precision=digits)}
    return np.array2string(
        values,
        separator=", ",
        precision=_options["precision"],
        threshold=_options["threshold"],
        edgeitems=_options["edgeitems"],
        max_line_width=_options["linewidth"],
        suppress_small=sci is False,
        formatter=formatter,
        prefix=prefix,
    )
