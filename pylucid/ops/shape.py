"""Op family ``shape`` (being written)."""

__all__: list[str] = []
