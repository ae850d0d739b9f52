"""Op family ``binary`` (being written)."""

__all__: list[str] = []
