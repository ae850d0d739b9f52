"""``torch.utils.data.distributed``'s path to :class:`DistributedSampler`, which lives in
:mod:`pylucid.utils.data.sampler` (``from torch.utils.data.distributed import
DistributedSampler`` becomes ``from pylucid.utils.data.distributed import ...``)."""

from pylucid.utils.data.sampler import DistributedSampler

__all__ = ["DistributedSampler"]
