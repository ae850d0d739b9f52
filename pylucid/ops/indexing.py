"""Op family ``indexing`` (being written)."""

__all__: list[str] = []
