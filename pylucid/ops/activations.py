"""Op family ``activations`` (being written)."""

__all__: list[str] = []
