"""Op family ``linalg`` (being written)."""

__all__: list[str] = []
