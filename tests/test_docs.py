"""The generated docs are current: the op reference (docs/ops.md) from the registry, the PyTorch
compatibility census (docs/torch-compat.md) from the kept list of names and the code."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pylucid as pl
from pylucid import compat_census, opdocs
from pylucid.compat import differs, unsupported


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


# The PyTorch compatibility census (docs/torch-compat.md), from docs/torch-names.txt and the code.


def _unwrap(obj: object) -> Callable[..., Any]:
    """The callable behind a stand-in found in a module or a class body."""
    if isinstance(obj, property):
        return obj.fget
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__
    return obj  # type: ignore[return-value]


def test_torch_compat_page_is_current() -> None:
    assert compat_census.DOCS_PATH.read_text() == compat_census.render(), (
        "docs/torch-compat.md is stale: run `python -m pylucid docs`"
    )


def test_every_refused_stand_in_raises_naming_the_torch_name() -> None:
    for mark in (m for m in compat_census.marks() if m.kind == "refused"):
        with pytest.raises(NotImplementedError) as raised:
            _unwrap(mark.obj)()
        message = str(raised.value)
        assert any(f"torch.{path}" in message for path in mark.paths), (mark.paths, message)
        assert mark.text.strip(), f"{mark.paths[0]} is refused without saying what to write"


def test_every_differs_mark_says_how() -> None:
    for mark in compat_census.marks():
        assert mark.text.strip(), f"{mark.paths[0]} is marked {mark.kind} without a reason"
    for entry in compat_census.read_names():
        status = compat_census.resolve(entry.namespace, entry.name)
        if status.kind in ("differs", "refused"):
            assert status.note.strip(), entry.torch_name


def test_kept_list_has_no_duplicates_and_known_namespaces() -> None:
    entries = compat_census.read_names()
    assert entries and compat_census.read_corpus()
    keys = Counter((e.namespace, e.name) for e in entries)
    assert [key for key, n in keys.items() if n > 1] == []
    assert {e.namespace for e in entries} <= set(compat_census.NAMESPACES)
    assert all(e.count >= 0 and e.repos >= 0 and e.runs >= 0 and e.name for e in entries)


def test_census_counts_every_kept_name_once() -> None:
    counts = compat_census.census()
    assert sum(counts["total"].values()) == len(compat_census.read_names())
    for kind in compat_census.KINDS:
        assert counts["total"][kind] == sum(counts[ns][kind] for ns in compat_census.NAMESPACES)


def test_census_classes_marked_raising_and_absent_names(monkeypatch: pytest.MonkeyPatch) -> None:
    @differs("probe reason")
    def probe() -> None:
        """A marked function."""

    class Raising:
        @property
        def boom(self) -> None:
            raise RuntimeError("an attribute that raises is missing, not an error")

    refused = unsupported("census_probe_refused", "write probe()")
    monkeypatch.setattr(pl, "census_probe_refused", refused, raising=False)
    monkeypatch.setattr(pl, "census_probe_differs", probe, raising=False)
    monkeypatch.setattr(pl, "census_probe_raising", Raising(), raising=False)
    resolve, status = compat_census.resolve, compat_census.Status
    assert resolve("torch", "census_probe_refused") == status("refused", "write probe()")
    assert resolve("torch", "census_probe_differs") == status("differs", "probe reason")
    assert resolve("torch", "census_probe_raising.boom") == status("missing")
    assert resolve("F", "census_probe_no_such_name") == status("missing")
    assert resolve("torch", "float32").kind == "present"
    paths = {p for m in compat_census.marks() for p in m.paths}
    assert {"census_probe_refused", "census_probe_differs"} <= paths


def test_subpackage_needing_an_optional_dependency_is_present_with_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read from the source, not imported: the same answer with mpi4py installed or not.
    package = tmp_path / "census_probe_pkg"
    (package / "extra").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "extra" / "__init__.py").write_text("from mpi4py import MPI\n\nThing = MPI\n")
    (package / "guarded.py").write_text(
        "try:\n    import mlx\nexcept ImportError:\n    mlx = None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    locate = compat_census.locate
    assert locate("extra.Thing", root="census_probe_pkg") == (None, "mpi4py")
    assert locate("extra.Nothing", root="census_probe_pkg") == (compat_census.ABSENT, None)
    assert locate("guarded.mlx", root="census_probe_pkg")[1] is None
    assert locate("absent.Thing", root="census_probe_pkg") == (compat_census.ABSENT, None)
    assert compat_census.needs_note("mpi4py") == "needs the distributed extra"
