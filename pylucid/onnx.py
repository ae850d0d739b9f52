"""``pylucid.onnx``: PyTorch's ``torch.onnx`` can be imported (programs import it at the top
and export only when asked); exporting raises, pylucid having no ONNX exporter."""

from __future__ import annotations

from pylucid.compat import unsupported

__all__ = ["export"]

export = unsupported(
    "onnx.export",
    "pylucid has no ONNX exporter; save the weights with pylucid.save(model.state_dict(), "
    "path) and export from a framework that has one",
)
