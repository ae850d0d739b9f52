"""Optimizers under PyTorch's names and semantics: :class:`SGD`, :class:`Adam`,
:class:`AdamW`, :class:`RMSprop`, :class:`Adagrad`, :class:`Adadelta` (parameter groups,
state dicts), :class:`LBFGS` (closure-driven), and learning-rate schedules in
:mod:`pylucid.optim.lr_scheduler`.

Each step of the first six is one fused pass per parameter (:mod:`pylucid.ops.updates`);
L-BFGS works on the parameters as one flat vector with ordinary ops. Nothing here talks to a
backend.
"""

from pylucid import _lazy
from pylucid.optim.adadelta import Adadelta
from pylucid.optim.adagrad import Adagrad
from pylucid.optim.adam import Adam, AdamW
from pylucid.optim.optimizer import Optimizer
from pylucid.optim.rmsprop import RMSprop
from pylucid.optim.sgd import SGD

# Imported on first use (pylucid._lazy): L-BFGS and the learning-rate schedules.
_lazy.lazy_attributes(
    globals(),
    {
        "LBFGS": "pylucid.optim.lbfgs:LBFGS",
        "lbfgs": "pylucid.optim.lbfgs",
        "lr_scheduler": "pylucid.optim.lr_scheduler",
    },
)

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
