"""``pylucid.profiler``: PyTorch's ``torch.profiler`` names. ``record_function`` labels a
block and records nothing; ``profile`` and the trace handlers raise, since pylucid has no
operator profiler whose report they could give."""

from __future__ import annotations

import enum

from pylucid.autograd.profiler import record_function
from pylucid.compat import unsupported

__all__ = ["ProfilerActivity", "profile", "record_function", "schedule",
           "tensorboard_trace_handler"]  # fmt: skip

_NONE = (
    "pylucid has no operator profiler; time blocks with time.perf_counter, or profile the "
    "Python process (py-spy, cProfile)"
)


class ProfilerActivity(enum.Enum):
    """What PyTorch's profiler records (accepted as names; :data:`profile` raises)."""

    CPU = "cpu"
    CUDA = "cuda"


profile = unsupported("profiler.profile", _NONE)
schedule = unsupported("profiler.schedule", _NONE)
tensorboard_trace_handler = unsupported("profiler.tensorboard_trace_handler", _NONE)
