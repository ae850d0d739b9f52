"""The define-by-run graph: nodes, the backward engine, grad mode and gradcheck.

The graph knows nodes and edges, never a specific op.
"""

from pylucid.graph.engine import backward, run_backward
from pylucid.graph.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from pylucid.graph.gradcheck import GradcheckError, gradcheck
from pylucid.graph.node import AccumulateGrad, FreedGraphError, Node, SavedValues

__all__ = [
    "AccumulateGrad",
    "FreedGraphError",
    "GradcheckError",
    "Node",
    "SavedValues",
    "backward",
    "enable_grad",
    "gradcheck",
    "is_grad_enabled",
    "no_grad",
    "run_backward",
    "set_grad_enabled",
]
