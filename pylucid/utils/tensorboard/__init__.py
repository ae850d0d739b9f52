"""TensorBoard logging, as ``torch.utils.tensorboard``: ``from pylucid.utils.tensorboard
import SummaryWriter``.

Built on the ``tensorboard`` package (its event-file writer and protobufs, what PyTorch's
writer uses), which this import needs: ``pip install "pylucid[tensorboard]"`` (or ``pip
install tensorboard``). Without it the import raises ImportError, as PyTorch's does;
``import pylucid`` never imports it.
"""

try:
    import tensorboard.summary.writer.event_file_writer  # noqa: F401 (checks the package)
except ImportError as error:
    raise ImportError(
        f"pylucid.utils.tensorboard needs the tensorboard package (2.17.1 or later): pip "
        f'install "pylucid[tensorboard]" (or pip install tensorboard). Importing it '
        f"failed: {error}"
    ) from error

from pylucid.utils.tensorboard import summary
from pylucid.utils.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter", "summary"]
