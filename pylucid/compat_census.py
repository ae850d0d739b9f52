"""The compatibility census, generated: ``python -m pylucid docs`` writes
``docs/torch-compat.md`` from the kept list of the PyTorch names that public programs use
most (``docs/torch-names.txt``, counted by ``tools/torch_census.py``) and from the code, and
a test fails when the page and the code disagree.

Each name is looked up as ``import pylucid as torch`` would see it (``torch.cuda.X`` ->
``pylucid.cuda.X``, ``F.X`` -> ``pylucid.nn.functional.X``, ``Tensor.X`` ->
``pylucid.Tensor.X``) and classed **present**, **differs** (marked with
:func:`pylucid.compat.differs`), **refused** (an :func:`pylucid.compat.unsupported` stand-in)
or **missing**. A lookup never fails the census: an attribute that raises is missing, and a
subpackage that needs an optional dependency which is not installed is present, needing
that extra.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import re
import sys
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pylucid.compat import refused_attributes

ROOT = Path(__file__).resolve().parent.parent
NAMES_PATH = ROOT / "docs" / "torch-names.txt"
DOCS_PATH = ROOT / "docs" / "torch-compat.md"

# The list's namespaces: where each is in pylucid (a dotted path below ``pylucid``) and how
# PyTorch spells a name in it.
NAMESPACES = {
    "torch": ("", "torch."),
    "Tensor": ("Tensor", "torch.Tensor."),
    "nn": ("nn", "torch.nn."),
    "F": ("nn.functional", "torch.nn.functional."),
    "optim": ("optim", "torch.optim."),
    "lr_scheduler": ("optim.lr_scheduler", "torch.optim.lr_scheduler."),
    "utils.data": ("utils.data", "torch.utils.data."),
}
KINDS = ("present", "differs", "refused", "missing")
NOT_YET = "not yet"

_CORPUS_LINE = re.compile(r"^#\s+(\S+/\S+) ([0-9a-f]{40}) (\S+) (\d+)$")


@dataclass(frozen=True)
class Entry:
    """One kept name: its namespace, name, uses in the corpus, repositories using it,
    programs run that called it, and why pylucid leaves it out (empty when not said)."""

    namespace: str
    name: str
    count: int
    repos: int
    runs: int
    reason: str = ""

    @property
    def torch_name(self) -> str:
        """PyTorch's spelling, e.g. ``torch.nn.functional.relu``."""
        return NAMESPACES[self.namespace][1] + self.name


@dataclass(frozen=True)
class Status:
    """Where a name stands in pylucid: one of :data:`KINDS`, and the note to show."""

    kind: str
    note: str = ""


@dataclass(frozen=True)
class Mark:
    """A :func:`~pylucid.compat.differs` or :func:`~pylucid.compat.unsupported` mark found in
    the code: the object, every public path it is reachable by (below ``pylucid``), its kind
    (``"differs"`` or ``"refused"``) and its text (the reason, or what to write instead)."""

    obj: object
    paths: tuple[str, ...]
    kind: str
    text: str


def read_names(path: Path = NAMES_PATH) -> list[Entry]:
    """The kept list: one :class:`Entry` per line that is not a comment or the column header.

    Parameters
    ----------
    path : Path
        The list, ``namespace name count repos runs [reason]`` per line.
    """
    entries = []
    for line in path.read_text().splitlines():
        fields = line.split(maxsplit=5)
        if not fields or line.startswith("#") or fields[0] == "namespace":
            continue
        namespace, name, count, repos, runs = fields[:5]
        reason = fields[5] if len(fields) > 5 else ""
        entries.append(Entry(namespace, name, int(count), int(repos), int(runs), reason))
    return entries


def read_corpus(path: Path = NAMES_PATH) -> list[tuple[str, str, int]]:
    """The corpus named in the list's header: ``(repository, commit, files counted)``."""
    corpus = []
    for line in path.read_text().splitlines():
        match = _CORPUS_LINE.match(line)
        if match:
            corpus.append((match.group(1), match.group(2), int(match.group(4))))
    return corpus


def own_marks(obj: object) -> tuple[str | None, str | None]:
    """``(differs reason, unsupported advice)`` set on ``obj`` itself (a property's getter,
    a method's function), not inherited from a marked base class."""
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if inspect.ismethod(obj):
        obj = obj.__func__
    try:
        own = vars(obj)
    except TypeError:
        return None, None
    return own.get("__torch_differs__"), own.get("__torch_unsupported__")


def _normal(name: str) -> str:
    """A distribution or module name as the extras table keys it."""
    return name.lower().replace("_", "-")


@functools.cache
def _extras() -> dict[str, str]:
    """Distribution name -> the extra of pylucid that installs it: read from
    ``pyproject.toml``'s ``[project.optional-dependencies]`` in a source checkout (so the
    page is the same on every machine), else from the installed package's metadata."""
    pairs: list[tuple[str, str]] = []
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        text = re.sub(r"#.*$", "", pyproject.read_text(), flags=re.MULTILINE)
        table = re.search(r"^\[project\.optional-dependencies\]$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        array = re.compile(r"^([\w-]+)\s*=\s*\[(.*?)\]\s*$", re.M | re.S)
        for extra, body in array.findall(table.group(1)) if table else []:
            pairs += [(d or q, extra) for d, q in re.findall(r"\"([^\"]*)\"|'([^']*)'", body)]
    else:
        try:
            requirements = importlib.metadata.requires("pylucid") or []
        except importlib.metadata.PackageNotFoundError:
            requirements = []
        for requirement in requirements:
            extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
            if extra:
                pairs.append((requirement, extra.group(1)))
    extras: dict[str, str] = {}
    for requirement, extra in pairs:
        name = re.match(r"\s*([A-Za-z0-9_.-]+)", requirement)
        if name and _normal(name.group(1)) != "pylucid":
            extras.setdefault(_normal(name.group(1)), extra)
    return extras


def needs_note(module: str) -> str:
    """What to install for an optional ``module``: pylucid's extra where one brings it, else
    the module itself."""
    extra = _extras().get(_normal(module))
    return f"needs the {extra} extra" if extra else f"needs {module}"


def _required_imports(body: list[ast.stmt]) -> Iterator[str]:
    """Modules a module body imports at its top level and cannot do without: unguarded, or
    in a ``try`` whose every handler raises."""
    for node in body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Try) and all(
            any(isinstance(n, ast.Raise) for n in ast.walk(h)) for h in node.handlers
        ):
            yield from _required_imports(node.body)


@functools.cache
def source_facts(module: str) -> tuple[str | None, frozenset[str]]:
    """``(optional dependency, names bound)`` of a module, read from its source without
    importing it, so that the answer is the same whether the dependency is installed or not:
    the first module it needs that one of pylucid's extras installs, and the names its top
    level binds and its package's submodules. ``(None, frozenset())`` where there is no
    Python source."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None, frozenset()
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None, frozenset()
    tree = ast.parse(Path(spec.origin).read_text())
    needs = next(
        (
            m.split(".")[0]
            for m in _required_imports(tree.body)
            if _normal(m.split(".")[0]) in _extras()
        ),
        None,
    )
    bound = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    for location in spec.submodule_search_locations or []:
        bound.update(p.stem for p in Path(location).iterdir() if p.suffix == ".py" or p.is_dir())
    return needs, frozenset(bound)


ABSENT = object()


def locate(path: str, root: str = "pylucid") -> tuple[object, str | None]:
    """The object at dotted ``path`` below the package ``root``, found as a program would:
    by attribute, else by importing the submodule.

    Returns
    -------
    tuple
        ``(obj, None)`` when found; ``(None, module)`` when a subpackage on the way needs the
        optional ``module`` (read from its source: installed or not, the answer is the same)
        and binds the next name; ``(ABSENT, None)`` when not found (an attribute access or
        an import that raises counts as not found).
    """
    obj: object = importlib.import_module(root)
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        name = f"{obj.__name__}.{part}" if isinstance(obj, ModuleType) else ""
        if name:
            needs, bound = source_facts(name)
            if needs is not None:
                found = i + 1 == len(parts) or parts[i + 1] in bound
                return (None, needs) if found else (ABSENT, None)
        try:
            obj = getattr(obj, part)
            continue
        except Exception:
            if not name:
                return ABSENT, None
        try:
            if importlib.util.find_spec(name) is None:
                return ABSENT, None
            obj = importlib.import_module(name)
        except Exception:
            return ABSENT, None
    return obj, None


@functools.cache
def _sample_tensor() -> object:
    """A small pylucid tensor, for Tensor attributes set per instance (None if it fails)."""
    try:
        return importlib.import_module("pylucid").ones(2, 2)
    except Exception:
        return None


def resolve(namespace: str, name: str) -> Status:
    """Where PyTorch's ``name`` in ``namespace`` stands in pylucid (see :data:`KINDS`).

    Parameters
    ----------
    namespace : str
        One of :data:`NAMESPACES`, e.g. ``"F"``.
    name : str
        The name within it, dotted where PyTorch's is (``"cuda.is_available"``).
    """
    base = NAMESPACES[namespace][0]
    path = f"{base}.{name}" if base else name
    obj, needs = locate(path)
    if needs is not None:
        return Status("present", needs_note(needs))
    if obj is ABSENT and namespace == "Tensor":
        try:
            obj = getattr(_sample_tensor(), name)
        except Exception:
            obj = ABSENT
    if obj is ABSENT:
        parent_path, _, leaf = path.rpartition(".")
        parent, _ = locate(parent_path)
        advice = refused_attributes(parent).get(leaf) if parent is not ABSENT else None
        return Status("missing") if advice is None else Status("refused", advice)
    differs, unsupported = own_marks(obj)
    if unsupported is not None:
        return Status("refused", unsupported)
    if differs is not None:
        return Status("differs", differs)
    return Status("present")


def public_modules(package: ModuleType) -> Iterator[ModuleType]:
    """Import and yield every public module below ``package`` (no ``_`` name on the way),
    except those that need an optional dependency (read from their source, so the set is
    the same on every machine) and those whose import fails."""
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if info.name.rsplit(".", 1)[1].startswith("_") or source_facts(info.name)[0]:
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:
            continue
        yield module
        if info.ispkg:
            yield from public_modules(module)


def marks(root: str = "pylucid") -> list[Mark]:
    """Every differs/unsupported mark in ``root``'s public modules and their classes, each
    object once with all the public attribute paths that reach it from ``root`` (shortest
    first). Every module of :func:`public_modules` is imported first, so that what earlier
    imports left behind does not change the answer."""
    package = importlib.import_module(root)
    modules = {id(m) for m in public_modules(package)} | {id(package)}
    found: dict[int, Mark] = {}
    seen = {id(package)}
    queue: deque[tuple[str, object]] = deque([("", package)])
    while queue:
        prefix, container = queue.popleft()
        for name, value in sorted(vars(container).items()):
            dunder = name.startswith("__") and name.endswith("__")
            if name.startswith("_") and not dunder:
                continue
            path = f"{prefix}.{name}" if prefix else name
            differs, unsupported = own_marks(value)
            if differs is not None or unsupported is not None:
                old = found.get(id(value))
                paths = (*old.paths, path) if old else (path,)
                kind = "refused" if unsupported is not None else "differs"
                found[id(value)] = Mark(value, paths, kind, unsupported or differs or "")
            home = value if isinstance(value, ModuleType) else None
            if inspect.isclass(value):
                home = sys.modules.get(value.__module__)
            if id(home) in modules and not dunder and id(value) not in seen:
                seen.add(id(value))
                queue.append((path, value))
    return list(found.values())


def spelling(path: str) -> tuple[str, str]:
    """``(namespace, name)`` of a path below pylucid, by its longest namespace prefix."""
    best = ("torch", path)
    for namespace, (base, _) in NAMESPACES.items():
        if base and path.startswith(base + ".") and len(base) > len(NAMESPACES[best[0]][0]):
            best = (namespace, path[len(base) + 1 :])
    return best


def census(entries: list[Entry] | None = None) -> dict[str, Counter[str]]:
    """How many kept names are present, differ, are refused or missing, per namespace and in
    ``"total"`` - the figures a release note quotes before and after a change.

    Parameters
    ----------
    entries : list of Entry, optional
        The names to class; the kept list by default.
    """
    entries = read_names() if entries is None else entries
    counts: dict[str, Counter[str]] = {ns: Counter(dict.fromkeys(KINDS, 0)) for ns in NAMESPACES}
    counts["total"] = Counter(dict.fromkeys(KINDS, 0))
    for entry in entries:
        kind = resolve(entry.namespace, entry.name).kind
        counts[entry.namespace][kind] += 1
        counts["total"][kind] += 1
    return counts


def _cell(text: str) -> str:
    """Text made safe for a Markdown table cell."""
    return text.replace("|", r"\|").replace("\n", " ")


HEADER = """# PyTorch names in pylucid

Generated by `python -m pylucid docs` from `docs/torch-names.txt` (the names that public
PyTorch programs use most, counted by `tools/torch_census.py`) and from the code; do not edit
by hand (`tests/test_docs.py` fails when this page is stale).

Each name is looked up as `import pylucid as torch` would see it: `torch.X` as `pylucid.X`
(`torch.cuda.X` as `pylucid.cuda.X`), `Tensor.X` as `pylucid.Tensor.X`, `nn.X` as
`pylucid.nn.X`, `F.X` as `pylucid.nn.functional.X`, `optim.X` as `pylucid.optim.X`,
`lr_scheduler.X` as `pylucid.optim.lr_scheduler.X`, `utils.data.X` as `pylucid.utils.data.X`.

- **present**: found (a subpackage needing an optional dependency says which extra);
- **differs**: found, marked with `pylucid.compat.differs`: the note says how it differs;
- **refused**: a stand-in that raises `NotImplementedError`: the note says what to write;
- **missing**: not found: the note is the list's reason, else "not yet".

Columns: *uses*, how often the name appears in the corpus; *repos*, in how many
repositories; *runs* (Tensor), how many of the programs run under torch called it.
"""


def render() -> str:
    """The whole page as Markdown."""
    entries = read_names()
    corpus = read_corpus()
    statuses = {(e.namespace, e.name): resolve(e.namespace, e.name) for e in entries}
    repos = ", ".join(f"{repo}@{sha[:7]}" for repo, sha, _ in corpus)
    files = sum(n for *_, n in corpus)
    lines = [
        HEADER,
        f"Corpus: {len(corpus)} repositories, {files} files ({repos}); commits, method and",
        "programs run are in the header of `docs/torch-names.txt`.",
        "",
        "## Summary",
        "",
        "| namespace | pylucid | names | present | differs | refused | missing |",
        "|---|---|---|---|---|---|---|",
    ]
    totals: Counter[str] = Counter()
    for namespace, (base, spelled) in NAMESPACES.items():
        kinds = Counter(s.kind for (ns, _), s in statuses.items() if ns == namespace)
        totals.update(kinds)
        counts = " | ".join(str(kinds[k]) for k in KINDS)
        names = sum(kinds.values())
        module = f"pylucid.{base}." if base else "pylucid."
        lines.append(f"| `{spelled}X` | `{module}X` | {names} | {counts} |")
    lines.append(
        f"| total | | {sum(totals.values())} | " + " | ".join(str(totals[k]) for k in KINDS) + " |"
    )
    for namespace, (_, spelled) in NAMESPACES.items():
        rows = sorted(
            (e for e in entries if e.namespace == namespace),
            key=lambda e: (-e.count, -e.runs, e.name),
        )
        tensor = namespace == "Tensor"
        lines += [
            "",
            f"## `{spelled}X`",
            "",
            "| name | uses | repos |" + (" runs |" if tensor else "") + " status | note |",
            "|---|---|---|" + ("---|" if tensor else "") + "---|---|",
        ]
        for e in rows:
            status = statuses[(e.namespace, e.name)]
            note = status.note or (e.reason or NOT_YET if status.kind == "missing" else "")
            runs = f" {e.runs} |" if tensor else ""
            lines.append(
                f"| `{e.name}` | {e.count} | {e.repos} |{runs} {status.kind} | {_cell(note)} |"
            )
    listed = set(statuses)
    extra = sorted(
        ((spelling(m.paths[0]), m) for m in marks() if not {*map(spelling, m.paths)} & listed),
        key=lambda pair: pair[0],
    )
    if extra:
        lines += [
            "",
            "## Marked in the code, not in the list",
            "",
            "| name | status | note |",
            "|---|---|---|",
        ]
        for (namespace, name), mark in extra:
            torch_name = NAMESPACES[namespace][1] + name
            lines.append(f"| `{torch_name}` | {mark.kind} | {_cell(mark.text)} |")
    return "\n".join(lines) + "\n"
