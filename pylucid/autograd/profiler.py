"""``pylucid.autograd.profiler``: ``record_function`` labels a block, as PyTorch's, and
records nothing (pylucid has no profiler: its results are unchanged by the label);
``profile`` raises, since its report cannot be given."""

from __future__ import annotations

from contextlib import ContextDecorator

from pylucid.compat import differs, unsupported

__all__ = ["profile", "record_function"]


@differs("labels nothing: pylucid has no profiler to record the block in")
class record_function(ContextDecorator):  # noqa: N801  (named like PyTorch's)
    """A context manager and decorator naming a block of code for a profiler."""

    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name

    def __enter__(self) -> record_function:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


profile = unsupported(
    "autograd.profiler.profile",
    "pylucid has no operator profiler; time blocks with time.perf_counter, or profile the "
    "Python process (py-spy, cProfile)",
)
