"""The define-by-run graph: nodes, the backward engine, grad mode, gradcheck, anomaly mode.

The graph knows nodes and edges, never a specific op.
"""

from pylucid.graph.anomaly import AnomalyError, detect_anomaly, is_anomaly_enabled
from pylucid.graph.engine import backward, grad, run_backward
from pylucid.graph.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
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
    "is_anomaly_enabled",
    "is_grad_enabled",
    "no_grad",
    "run_backward",
    "set_grad_enabled",
]
