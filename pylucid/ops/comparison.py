"""Op family ``comparison`` (being written)."""

__all__: list[str] = []
