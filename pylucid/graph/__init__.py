"""The define-by-run graph: nodes, the backward engine, grad mode, gradcheck, anomaly mode.

The graph knows nodes and edges, never a specific op.
"""

import importlib

from pylucid.graph.anomaly import AnomalyError, detect_anomaly, is_anomaly_enabled
from pylucid.graph.dot import render, to_dot
from pylucid.graph.engine import backward, grad, run_backward
from pylucid.graph.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from pylucid.graph.gradcheck import GradcheckError, gradcheck, gradgradcheck
from pylucid.graph.node import (
    AccumulateGrad,
    FreedGraphError,
    InplaceModifiedError,
    Node,
    RemovableHandle,
    SavedValues,
)

__all__ = [
    "AccumulateGrad",
    "Function",
    "hessian",
    "jacobian",
    "value_and_grad",
    "vjp",
    "AnomalyError",
    "FreedGraphError",
    "GradcheckError",
    "InplaceModifiedError",
    "Node",
    "RemovableHandle",
    "SavedValues",
    "backward",
    "detect_anomaly",
    "enable_grad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_inference_mode_enabled",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "no_grad",
    "render",
    "to_dot",
    "run_backward",
    "set_grad_enabled",
]


#: Names of ``pylucid.graph`` defined above the graph layer (they build on ops, which import
#: this package), imported on first use.
_LAZY = {
    "Function": "pylucid.ops.function",
    "vjp": "pylucid.functional",
    "value_and_grad": "pylucid.functional",
    "jacobian": "pylucid.functional",
    "hessian": "pylucid.functional",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pylucid.graph' has no attribute {name!r}")
