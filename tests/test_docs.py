"""The op reference (docs/ops.md) is generated from the registry and kept current."""

from __future__ import annotations

import pylucid as pl
from pylucid import opdocs


def test_ops_reference_is_current() -> None:
    assert opdocs.DOCS_PATH.read_text() == opdocs.render(), (
        "docs/ops.md is stale: run `python -m pylucid docs`"
    )


def test_reference_lists_every_public_op_with_policy_and_gradient() -> None:
    text = opdocs.render()
    for name in pl.ops.list_ops():
        op_class = pl.ops.get_op(name)
        schema = op_class.schema_v1
        if schema.internal or not op_class.__module__.startswith("pylucid.ops."):
            continue
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert schema.amp_policy.name in row
        assert ("not differentiable" in row) != schema.differentiable
