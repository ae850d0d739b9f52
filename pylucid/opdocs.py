"""The op reference, generated from the registry: ``python -m pylucid docs`` writes
``docs/ops.md``, and a test fails when the file differs from what the registry says now."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from pylucid import ops

DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "ops.md"

_MATH_BLOCK = re.compile(r"^\.\. math::[ \t]*(.*(?:\n(?:[ \t]+.*|[ \t]*))*)", re.MULTILINE)

HEADER = """# Op reference

Generated from the op registry by `python -m pylucid docs`; do not edit by hand
(`tests/test_docs.py` fails when this file and the registry disagree).

Columns: the op's registry name and node class; its AMP policy (how the compute dtype is
chosen under mixed precision); what the node saves for backward; whether integer inputs give
a float32 result (real-valued); and the gradient, from the node's docstring, with `g` the
gradient of the loss with respect to the op's output.
"""


def gradient_math(op_class: type) -> str:
    """The ``.. math::`` blocks of the node's docstring, as one line of LaTeX."""
    doc = inspect.getdoc(op_class) or ""
    blocks = [" ".join(m.group(1).split()) for m in _MATH_BLOCK.finditer(doc)]
    return " ; ".join(b for b in blocks if b)


def summary(op_class: type) -> str:
    """The first sentence of the node's docstring, without reST roles."""
    doc = (inspect.getdoc(op_class) or "").split("\n\n")[0].replace("\n", " ")
    return re.sub(r":(?:math|class|func|meth):`([^`]*)`", r"\1", doc).replace("``", "`")


def render(library_only: bool = True) -> str:
    """The whole reference page as Markdown.

    Parameters
    ----------
    library_only : bool
        List pylucid's own ops only (``docs/ops.md``); False adds the custom
        :class:`pylucid.graph.Function` ops the running program registered with a schema.
    """
    rows = [
        "| op | node | AMP policy | saves | real-valued | gradient |",
        "|---|---|---|---|---|---|",
    ]
    details = []
    for name in ops.list_ops():
        op_class = ops.get_op(name)
        schema = op_class.schema_v1
        if schema.internal or (library_only and not op_class.__module__.startswith("pylucid.")):
            continue
        if schema.differentiable:
            math = gradient_math(op_class)
            gradient = f"${math}$" if math else "see node"
        else:
            gradient = "none (not differentiable)"
        saved = ", ".join(f"`{s}`" for s in schema.saved) or "nothing"
        cells = [
            f"`{name}`",
            f"`{op_class.__name__}`",
            schema.amp_policy.name,
            saved,
            "yes" if schema.real_valued else "no",
            gradient.replace("|", r"\|"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
        details.append(f"### `{name}`\n\n{summary(op_class)}\n")
    return "\n".join([HEADER, *rows, "", "## Ops", "", *details])
