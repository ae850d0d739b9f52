"""Op family ``softmax`` (being written)."""

__all__: list[str] = []
