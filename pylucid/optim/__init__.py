"""Optimizers: update parameters from their ``.grad`` (here: SGD with momentum)."""

from pylucid.optim.sgd import SGD, Optimizer

__all__ = ["SGD", "Optimizer"]
