"""Pictures of the graph: Graphviz DOT text of what backward will run, and SVG rendering."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = ["to_dot", "render"]

_INSTALL_HINT = (
    "the Graphviz 'dot' program is not installed; install Graphviz (Debian/Ubuntu: "
    "apt-get install graphviz; macOS: brew install graphviz; conda: conda install graphviz), "
    "or write the text of pylucid.graph.to_dot(tensor) to a .dot file and render it elsewhere"
)


def _quote(text: str) -> str:
    """A DOT string: quotes escaped, newlines as DOT's ``\\n`` line breaks."""
    return '"' + text.replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(node: Any) -> str:
    """A node's label: its name, output shape and dtype, and what it saved (with shapes)."""
    variable = getattr(node, "variable", None)
    if variable is not None:  # AccumulateGrad: the leaf it fills
        return f"{node.name}\nleaf {variable.shape} {variable.dtype.name}"
    lines = [node.name]
    shape, dtype = getattr(node, "shape", None), getattr(node, "output_dtype", None)
    if shape is not None and dtype is not None:
        lines.append(f"{shape} {dtype.name}")
    saved = getattr(node, "saved", None)
    schema = getattr(node, "schema_v1", None)
    if saved is not None and schema is not None and schema.saved:
        if saved.released:
            lines.append("saved: (freed)")
        else:
            shapes = ", ".join(
                f"{name} {tuple(getattr(getattr(saved, name), 'shape', ()))}"
                for name in schema.saved
            )
            lines.append(f"saved: {shapes}")
    return "\n".join(lines)


def to_dot(tensor: Any, name: str = "pylucid") -> str:
    """Graphviz DOT text of the graph behind ``tensor``.

    One box per node (its name, output shape and dtype, saved values and their shapes; leaf
    accumulators with the leaf's shape), an arrow from each node to the node that consumes
    its output, and the tensor itself at the bottom.
    """
    lines = [f"digraph {_quote(name)} {{", "  node [shape=box, fontname=monospace];"]
    root = tensor.grad_fn
    lines.append(f'  output [label="tensor {tensor.shape} {tensor.dtype.name}", shape=ellipse];')
    if root is None:
        lines.append("}")
        return "\n".join(lines)
    ids: dict[Any, str] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if node in ids:
            continue
        ids[node] = f"n{len(ids)}"
        stack.extend(child for child in node.next_edges if child is not None)
    for node, key in ids.items():
        lines.append(f"  {key} [label={_quote(_label(node))}];")
    for node, key in ids.items():
        for child in node.next_edges:
            if child is not None:
                lines.append(f"  {ids[child]} -> {key};")
    lines.append(f"  {ids[root]} -> output;")
    lines.append("}")
    return "\n".join(lines)


def render(tensor: Any, path: str | Path) -> Path:
    """Write the graph behind ``tensor`` as SVG (or any format ``dot`` knows, by suffix).

    Raises
    ------
    RuntimeError
        When Graphviz's ``dot`` program is not installed; the message says how to get it.
    """
    path = Path(path)
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError(f"render: {_INSTALL_HINT}")
    fmt = path.suffix.lstrip(".") or "svg"
    import subprocess  # (here: an import of pylucid needs no process module)

    subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=to_dot(tensor).encode(), check=True)
    return path
