"""Op family ``elementwise_math`` (being written)."""

__all__: list[str] = []
