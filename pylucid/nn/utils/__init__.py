"""``pylucid.nn.utils``: gradient clipping, flat parameter vectors and padded batches of
sequences (:mod:`~pylucid.nn.utils.rnn`), as in ``torch.nn.utils``."""

from pylucid.nn.utils import rnn
from pylucid.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_
from pylucid.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "parameters_to_vector",
    "rnn",
    "vector_to_parameters",
]
