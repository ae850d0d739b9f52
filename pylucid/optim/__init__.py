"""Optimizers under PyTorch's names and semantics: :class:`SGD`, :class:`Adam`,
:class:`AdamW`, :class:`RMSprop`, :class:`Adagrad`, :class:`Adadelta` (parameter groups,
state dicts), :class:`LBFGS` (closure-driven), and learning-rate schedules in
:mod:`pylucid.optim.lr_scheduler`.

Each step of the first six is one fused pass per parameter (:mod:`pylucid.ops.updates`);
L-BFGS works on the parameters as one flat vector with ordinary ops. Nothing here talks to a
backend.
"""

from pylucid.optim import lr_scheduler
from pylucid.optim.adadelta import Adadelta
from pylucid.optim.adagrad import Adagrad
from pylucid.optim.adam import Adam, AdamW
from pylucid.optim.lbfgs import LBFGS
from pylucid.optim.optimizer import Optimizer
from pylucid.optim.rmsprop import RMSprop
from pylucid.optim.sgd import SGD

__all__ = [
    "LBFGS",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "lr_scheduler",
]
