"""Count the PyTorch names that public programs use; write the kept list docs/torch-names.txt.

``python tools/torch_census.py CORPUS`` reads a corpus folder with one sub-folder per
repository, named ``owner+name``, holding the repository's ``.py`` and ``.ipynb`` files and a
``.commit`` file (``<sha> <date>``), as ``git archive`` of the ``fetch``-ed snapshot leaves
it. The corpus stays outside this repository; only the counts come in.

Two counts, both by name:

- **static**, over every file: Python's ``ast`` reads each file (a notebook's code cells
  joined), follows the file's own ``import torch ...`` / ``from torch... import ...`` aliases
  and counts every dotted name they lead to (``torch.cuda.is_available``, ``nn.Linear``,
  ``F.relu``, ``optim.AdamW``, ``lr_scheduler.StepLR``, ``DataLoader``), comments and strings
  excluded. A Tensor method or attribute is counted where ``.name`` is a known attribute of
  ``torch.Tensor`` on anything but an imported module (``x.view``, ``loss.backward``; a
  list's ``.sort`` counts too: the static Tensor count overstates).
- **dynamic**, for Tensor names only: a few programs run for a handful of steps at small
  sizes under a :class:`torch.overrides.TorchFunctionMode` that records which Tensor methods
  and properties the program's own files call (operators included: ``a[0]`` is
  ``__getitem__``); calls from inside torch (an optimizer's ``mul_``) are not counted.

The list keeps, per namespace, the names used at least twice in the corpus and every Tensor
name a program run called, if torch has them (a shadowed alias is not a torch name), up to
``CAP`` names per namespace by use count. The reasons column is written by hand and carried
over when the list is rewritten. This is a maintenance tool, not part of the library, so it
lives in ``tools/`` rather than ``benchmarks/`` (which measures speed): it needs torch and
the corpus.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAMES_PATH = ROOT / "docs" / "torch-names.txt"
CAP = 300
MIN_USES = 2

# A dotted torch name -> (namespace of the list, name within it); the longest prefix wins.
PREFIXES = (
    ("torch.nn.functional.", "F"),
    ("torch.optim.lr_scheduler.", "lr_scheduler"),
    ("torch.utils.data.", "utils.data"),
    ("torch.optim.", "optim"),
    ("torch.nn.", "nn"),
    ("torch.Tensor.", "Tensor"),
    ("torch.", "torch"),
)
NAMESPACE_ORDER = ("torch", "Tensor", "nn", "F", "optim", "lr_scheduler", "utils.data")

# Paths left out of the corpus: test suites, and two folders of near-copies
# (modded-nanogpt's record history, LLMs-from-scratch's packaged chapter code).
EXCLUDE = (
    re.compile(r"(^|/)tests?/|(^|/)test_[^/]*$|_test\.py$"),
    re.compile(r"^KellerJordan\+modded-nanogpt/records/"),
    re.compile(r"^rasbt\+LLMs-from-scratch/pkg/"),
)


@dataclass
class Tally:
    """Uses of one name: how many, in which repositories, by which programs run."""

    count: int = 0
    repos: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)


def canonical(dotted: str) -> tuple[str, str] | None:
    """The list's ``(namespace, name)`` for a full dotted torch name, or None."""
    for prefix, namespace in PREFIXES:
        if dotted.startswith(prefix) and len(dotted) > len(prefix):
            return namespace, dotted[len(prefix) :]
    return None


@functools.cache
def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a torch module (``torch.nn``), not a function or class."""
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


TORCH_MODULES = {
    "torch": "torch",
    "Tensor": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "optim": "torch.optim",
    "lr_scheduler": "torch.optim.lr_scheduler",
    "utils.data": "torch.utils.data",
}


def exists_in_torch(namespace: str, name: str) -> bool:
    """Whether torch has the name (a submodule that needs a package torch lacks here, such
    as ``torch.utils.tensorboard``, counts as present); drops aliases a program shadowed."""
    obj = importlib.import_module(TORCH_MODULES[namespace])
    parts = ["Tensor", *name.split(".")] if namespace == "Tensor" else name.split(".")
    for part in parts:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if not isinstance(obj, ModuleType):
            return False
        try:
            obj = importlib.import_module(f"{obj.__name__}.{part}")
        except ModuleNotFoundError as error:
            return bool(error.name) and not error.name.startswith("torch")
        except Exception:
            return False
    return True


def tensor_attributes() -> frozenset[str]:
    """The public attribute names of ``torch.Tensor``."""
    import torch

    return frozenset(n for n in dir(torch.Tensor) if not n.startswith("_"))


def corpus_files(corpus: Path) -> Iterator[tuple[str, Path]]:
    """``(repository folder, file)`` for every counted file, each distinct content once."""
    seen: set[str] = set()
    for repo in sorted(p for p in corpus.iterdir() if (p / ".commit").exists()):
        for path in sorted(repo.rglob("*")):
            relative = path.relative_to(corpus).as_posix()
            if path.suffix not in (".py", ".ipynb") or any(e.search(relative) for e in EXCLUDE):
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                yield repo.name, path


def parse(path: Path) -> list[ast.Module]:
    """The file's syntax trees: one for a script, one per parseable cell of a notebook."""
    if path.suffix == ".py":
        try:
            return [ast.parse(path.read_text(encoding="utf-8", errors="replace"))]
        except SyntaxError:
            return []
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (ValueError, KeyError):
        return []
    trees = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", []))
        lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            trees.append(ast.parse("\n".join(lines)))
        except SyntaxError:
            continue
    return trees


def import_aliases(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """The names a file binds to torch objects (name -> dotted torch name), and all names
    bound by any import (a module's ``.sum`` is not a Tensor's)."""
    torch_names: dict[str, str] = {}
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                imported.add(bound)
                if alias.name == "torch" or alias.name.startswith("torch."):
                    torch_names[bound] = alias.name if alias.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                bound = alias.asname or alias.name
                imported.add(bound)
                if node.module == "torch" or node.module.startswith("torch."):
                    torch_names[bound] = f"{node.module}.{alias.name}"
    return torch_names, imported


def dotted_chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """``(root name, attribute names)`` of a pure ``a.b.c`` chain, or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, parts[::-1]
    return None


def count_static(tree: ast.Module, repo: str, tally: dict, tensor_names: frozenset[str]) -> None:
    """Add one syntax tree's uses of torch names to ``tally[(namespace, name)]``."""
    torch_names, imported = import_aliases(tree)

    def use(key: tuple[str, str] | None) -> None:
        if key is not None:
            tally[key].count += 1
            tally[key].repos.add(repo)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch"):
            for alias in node.names:
                use(canonical(f"{node.module}.{alias.name}"))
        if isinstance(node, ast.Attribute):
            chain = dotted_chain(node)
            if chain is None or chain[0] not in imported:
                if node.attr in tensor_names:
                    use(("Tensor", node.attr))
            elif chain[0] in torch_names and not _is_inner(node, tree):
                use(canonical(".".join([torch_names[chain[0]], *chain[1]])))
        elif (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in torch_names
            and not _is_inner(node, tree)
            and not is_module(torch_names[node.id])
        ):
            use(canonical(torch_names[node.id]))


def _parents(tree: ast.Module) -> dict[int, ast.AST]:
    """Each node's parent, by node id (computed once per tree)."""
    cached = getattr(tree, "_census_parents", None)
    if cached is None:
        cached = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        tree._census_parents = cached  # type: ignore[attr-defined]
    return cached


def _is_inner(node: ast.AST, tree: ast.Module) -> bool:
    """Whether ``node`` is the ``value`` of an enclosing attribute (``torch`` in
    ``torch.nn``): only the whole chain counts."""
    parent = _parents(tree).get(id(node))
    return isinstance(parent, ast.Attribute) and parent.value is node


# ---------------------------------------------------------------- programs run under torch


@dataclass(frozen=True)
class Step:
    """One traced run of a script: its path in the repository, argv, and source edits that
    shrink it (``pattern -> replacement`` regular expressions)."""

    script: str
    argv: tuple[str, ...] = ()
    edits: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Program:
    """A repository's program: its traced steps, files to place first (destination, source
    ``owner+name/path`` in the corpus, its first lines only where a count is given) and
    untraced setup commands (Python's argv, e.g. a data preparation script)."""

    repo: str
    label: str
    steps: tuple[Step, ...]
    files: tuple[tuple[str, str, int], ...] = ()
    setup: tuple[tuple[str, ...], ...] = ()


_TINY_GPT = (
    (r"batch_size = \d+", "batch_size = 4"),
    (r"block_size = \d+", "block_size = 16"),
    (r"max_iters = \d+", "max_iters = 3"),
    (r"eval_iters = \d+", "eval_iters = 2"),
    (r"n_embd = \d+", "n_embd = 32"),
    (r"n_head = \d+", "n_head = 2"),
    (r"n_layer = \d+", "n_layer = 2"),
    (r"max_new_tokens=\d+", "max_new_tokens=20"),
)
_SHAKESPEARE = "karpathy+ng-video-lecture/input.txt"
_MAKEMORE = ("-i", "names.txt", "-o", "out", "--max-steps", "5", "-n", "0", "-b", "8")
_NANOGPT = (
    "--device=cpu",
    "--compile=False",
    "--dtype=float32",
    "--out_dir=out",
)
_JCJ_EDITS = ((r"range\(500\)", "range(5)"),)

PROGRAMS = (
    Program(
        "karpathy+makemore",
        "makemore.py (transformer, rnn, mlp)",
        tuple(
            Step(
                "makemore.py",
                (*_MAKEMORE, "--type", kind, "--n-layer", "2", "--n-embd", "32", "--n-embd2", "32"),
            )
            for kind in ("transformer", "rnn", "mlp")
        ),
    ),
    Program(
        "karpathy+ng-video-lecture",
        "gpt.py, bigram.py",
        (
            Step("gpt.py", edits=_TINY_GPT),
            Step("bigram.py", edits=_TINY_GPT),
        ),
    ),
    Program(
        "karpathy+nanoGPT",
        "train.py, sample.py (shakespeare_char)",
        steps=(
            Step(
                "train.py",
                (
                    "config/train_shakespeare_char.py",
                    *_NANOGPT,
                    "--eval_iters=2",
                    "--eval_interval=2",
                    "--log_interval=1",
                    "--block_size=32",
                    "--batch_size=4",
                    "--n_layer=2",
                    "--n_head=2",
                    "--n_embd=32",
                    "--max_iters=3",
                    "--lr_decay_iters=3",
                    "--dropout=0.0",
                ),
            ),
            Step(
                "sample.py",
                ("--init_from=resume", *_NANOGPT, "--num_samples=1", "--max_new_tokens=20"),
                edits=((r"(?m)^import tiktoken$", "tiktoken = None"),),
            ),
        ),
        files=(("data/shakespeare_char/input.txt", _SHAKESPEARE, 0),),
        setup=(("data/shakespeare_char/prepare.py",),),
    ),
    Program(
        "karpathy+minGPT",
        "projects/chargpt/chargpt.py",
        steps=(
            Step(
                "projects/chargpt/chargpt.py",
                (
                    "--model.model_type=None",
                    "--model.n_layer=2",
                    "--model.n_head=2",
                    "--model.n_embd=32",
                    "--data.block_size=16",
                    "--trainer.batch_size=4",
                    "--trainer.num_workers=0",
                    "--trainer.device=cpu",
                    "--trainer.max_iters=3",
                    "--system.work_dir=out",
                ),
                edits=((r"model\.generate\(x, 500", "model.generate(x, 20"),),
            ),
        ),
        files=(("input.txt", _SHAKESPEARE, 0),),
    ),
    Program(
        "pytorch+examples",
        "word_language_model (LSTM, Transformer, generate), regression",
        steps=(
            *(
                Step(
                    "word_language_model/main.py",
                    (
                        "--data",
                        "small",
                        "--model",
                        model,
                        "--epochs",
                        "1",
                        "--emsize",
                        "16",
                        "--nhid",
                        "16",
                        "--nlayers",
                        "1",
                        "--bptt",
                        "8",
                        "--batch_size",
                        "4",
                        "--dry-run",
                        "--save",
                        "model.pt",
                    ),
                )
                for model in ("LSTM", "Transformer")
            ),
            Step(
                "word_language_model/generate.py",
                ("--data", "small", "--checkpoint", "model.pt", "--words", "20"),
            ),
            Step("regression/main.py"),
        ),
        files=tuple(
            (f"small/{part}.txt", _SHAKESPEARE, lines)
            for part, lines in (("train", 400), ("valid", 100), ("test", 100))
        ),
    ),
    Program(
        "jcjohnson+pytorch-examples",
        "tensor/, autograd/, nn/ two-layer nets",
        tuple(
            Step(script, edits=_JCJ_EDITS)
            for script in (
                "tensor/two_layer_net_tensor.py",
                "autograd/two_layer_net_autograd.py",
                "autograd/two_layer_net_custom_function.py",
                "nn/two_layer_net_nn.py",
                "nn/two_layer_net_optim.py",
                "nn/two_layer_net_module.py",
                "nn/dynamic_net.py",
            )
        ),
    ),
)


def trace_step(program_dir: Path, step: Step) -> Counter:
    """Run one step in this process under a TorchFunctionMode; the Tensor names that the
    program's own files called, with call counts (runs in a child: see :func:`run_program`)."""
    import torch
    from torch.overrides import TorchFunctionMode

    base = torch._C.TensorBase
    names: Counter = Counter()
    root = str(program_dir)

    def tensor_name(func: object) -> str | None:
        owner = getattr(func, "__self__", None)  # a property's getter/setter method-wrapper
        if getattr(func, "__name__", "") in ("__get__", "__set__") and owner is not None:
            if getattr(owner, "__objclass__", None) in (base, torch.Tensor):
                return owner.__name__
            return None
        qualname = getattr(func, "__qualname__", "")
        if qualname.startswith(("TensorBase.", "Tensor.")):
            return qualname.split(".", 1)[1]
        return None

    def caller_file(name: str) -> str:
        frame = sys._getframe(2)
        if frame.f_code.co_filename.endswith(os.path.join("torch", "overrides.py")):
            frame = frame.f_back  # a Python-level Tensor method: skip it and its wrappers
            while frame is not None and frame.f_code.co_name in (name, "wrapped", "_fn"):
                frame = frame.f_back
        return frame.f_code.co_filename if frame is not None else ""

    class Census(TorchFunctionMode):
        def __torch_function__(
            self,
            func: Callable[..., Any],
            types: tuple[type, ...],
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            name = tensor_name(func)
            if name is not None and caller_file(name).startswith(root):
                names[name] += 1
            return func(*args, **(kwargs or {}))

    source = (program_dir / step.script).read_text()
    for pattern, replacement in step.edits:
        source = re.sub(pattern, replacement, source)
    sys.argv = [step.script, *step.argv]
    sys.path[:0] = [str((program_dir / step.script).parent), str(program_dir)]
    code = compile(source, str(program_dir / step.script), "exec")
    with Census():
        try:
            exec(code, {"__name__": "__main__", "__file__": str(program_dir / step.script)})
        except SystemExit:
            pass
    return names


def run_program(corpus: Path, program: Program, timeout: float) -> dict[str, Counter]:
    """Run a program's steps, each in a child process, in a scratch copy of its repository;
    the Tensor names each traced step called."""
    results: dict[str, Counter] = {}
    with tempfile.TemporaryDirectory(prefix="torch-census-") as scratch:
        work = Path(scratch) / program.repo
        shutil.copytree(corpus / program.repo, work)
        for destination, source, lines in program.files:
            text = (corpus / source).read_text()
            if lines:
                text = "\n".join(text.splitlines()[:lines]) + "\n"
            (work / destination).parent.mkdir(parents=True, exist_ok=True)
            (work / destination).write_text(text)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}

        def run(command: list[str]) -> str:
            done = subprocess.run(
                command, cwd=work, capture_output=True, text=True, timeout=timeout, env=env
            )
            if done.returncode != 0:
                raise RuntimeError(f"{program.repo}: {command} failed:\n{done.stderr[-3000:]}")
            return done.stdout

        for command in program.setup:
            run([sys.executable, *command])
        for step in program.steps:
            spec = json.dumps({"script": step.script, "argv": step.argv, "edits": step.edits})
            out = run([sys.executable, __file__, "--trace", str(work), spec])
            results[f"{step.script} {' '.join(step.argv)}"] = Counter(
                json.loads(out.strip().splitlines()[-1])
            )
    return results


# ---------------------------------------------------------------------------- the list


def read_reasons(path: Path) -> dict[tuple[str, str], str]:
    """The hand-written reasons of an existing list, by ``(namespace, name)``."""
    reasons = {}
    if path.exists():
        for line in path.read_text().splitlines():
            fields = line.split(maxsplit=5)
            if line.startswith("#") or len(fields) < 6 or fields[0] == "namespace":
                continue
            reasons[(fields[0], fields[1])] = fields[5]
    return reasons


def keep(tally: dict[tuple[str, str], Tally]) -> list[tuple[tuple[str, str], Tally]]:
    """The kept entries, per namespace by use count, at most ``CAP`` each."""
    kept = []
    for namespace in NAMESPACE_ORDER:
        rows = [
            (key, t)
            for key, t in tally.items()
            if key[0] == namespace and (t.runs or t.count >= MIN_USES) and exists_in_torch(*key)
        ]
        rows.sort(key=lambda r: (-r[1].count, -len(r[1].runs), r[0][1]))
        kept.extend(rows[:CAP])
    return kept


def write_list(
    path: Path,
    corpus: Path,
    files: Counter,
    skipped: int,
    tally: dict[tuple[str, str], Tally],
    reasons: dict[tuple[str, str], str],
) -> None:
    """Write the kept list with its header (corpus, commits, method) and the given reasons."""
    import torch

    kept = keep(tally)
    lines = [
        "# PyTorch names that public programs use: the kept list behind docs/torch-compat.md",
        "# (`python -m pylucid docs`). Written by `python tools/torch_census.py CORPUS`; the",
        "# reason column (why pylucid leaves a name out) is written by hand and kept on rewrite.",
        "#",
        "# Corpus: repository, commit, commit date, files counted (.py and notebooks; tests,",
        "# modded-nanogpt's records/ and LLMs-from-scratch's pkg/ left out; duplicates once):",
    ]
    for repo in sorted(files):
        sha_date = (corpus / repo / ".commit").read_text().split()
        lines.append(f"#   {repo.replace('+', '/', 1)} {sha_date[0]} {sha_date[1]} {files[repo]}")
    lines += [
        f"#   ({sum(files.values())} files; {skipped} that do not parse as Python 3 skipped)",
        "#",
        "# Static count (count, repos): Python's ast over each file, following the file's own",
        "# imports of torch (`import torch.nn as nn`, `from torch.utils.data import DataLoader`):",
        "# every dotted name a torch alias leads to, and every `from torch... import NAME`;",
        "# a Tensor name is any `.NAME` on a non-module that torch.Tensor has (overstates:",
        "# a list's .sort counts).",
        f"# Dynamic count (runs, Tensor only): programs run under torch {torch.__version__}",
        "# for a few steps at small sizes inside a TorchFunctionMode that records the Tensor",
        "# methods and properties called from the program's own files (operators too, under",
        "# the name torch dispatches them to: a[0] as __getitem__, a + b as add); sizes and",
        "# step counts shrunk by the arguments and source edits in the tool's PROGRAMS:",
    ]
    for program in PROGRAMS:
        lines.append(f"#   {program.repo.replace('+', '/', 1)}: {program.label}")
    lines += [
        f"# Kept per namespace: used at least {MIN_USES} times in the corpus, or called by a",
        f"# program run, and a name torch has; at most {CAP} by count. Namespaces: torch",
        "# (torch.X, torch.cuda.X, ...), Tensor, nn (torch.nn.X), F (torch.nn.functional.X),",
        "# optim, lr_scheduler (torch.optim.lr_scheduler.X), utils.data (torch.utils.data.X).",
        "#",
        "# namespace name count repos runs [reason]",
    ]
    for (namespace, name), t in kept:
        row = f"{namespace} {name} {t.count} {len(t.repos)} {len(t.runs)}"
        reason = reasons.get((namespace, name))
        lines.append(f"{row} {reason}" if reason else row)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Count the corpus (and run its programs unless ``--no-runs``), write the list."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, nargs="?", help="folder of owner+name folders")
    parser.add_argument("--out", type=Path, default=NAMES_PATH)
    parser.add_argument(
        "--reasons", type=Path, default=NAMES_PATH, help="the list whose reasons to keep"
    )
    parser.add_argument("--no-runs", action="store_true", help="static counts only")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per step")
    parser.add_argument("--trace", nargs=2, metavar=("DIR", "STEP"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trace:
        step = json.loads(args.trace[1])
        step = Step(step["script"], tuple(step["argv"]), tuple(map(tuple, step["edits"])))
        names = trace_step(Path(args.trace[0]), step)
        print("\n" + json.dumps(dict(sorted(names.items()))))
        return 0
    if args.corpus is None:
        parser.error("the corpus folder is required")
    tensor_names = tensor_attributes()
    tally: dict[tuple[str, str], Tally] = defaultdict(Tally)
    files: Counter = Counter()
    skipped = 0
    for repo, path in corpus_files(args.corpus):
        trees = parse(path)
        skipped += not trees
        files[repo] += bool(trees)
        for tree in trees:
            count_static(tree, repo, tally, tensor_names)
    runs: dict[str, dict[str, Counter]] = {}
    if not args.no_runs:
        for program in PROGRAMS:
            runs[program.repo] = run_program(args.corpus, program, args.timeout)
            for step_names in runs[program.repo].values():
                for name in step_names:
                    tally[("Tensor", name)].runs.add(program.repo)
            print(f"ran {program.repo}: {len(runs[program.repo])} steps", file=sys.stderr)
    write_list(args.out, args.corpus, files, skipped, tally, read_reasons(args.reasons))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
