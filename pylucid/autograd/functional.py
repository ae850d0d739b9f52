"""``pylucid.autograd.functional``: PyTorch's ``torch.autograd.functional`` names for
:mod:`pylucid.functional` (``vjp``, ``jacobian``, ``hessian``)."""

from pylucid.functional import hessian, jacobian, vjp

__all__ = ["hessian", "jacobian", "vjp"]
