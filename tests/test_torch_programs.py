"""Ordinary PyTorch scripts run under pylucid with only their import lines changed.

Each script in ``tests/programs/`` is PyTorch code as a PyTorch user writes it (no pylucid
in it). For each, the test

1. runs it with torch in a subprocess, which saves its freshly initialised weights with
   ``torch.save(model.state_dict(), $SAVE_INIT)`` and writes its per-step losses and final
   metric to ``$LOSSES``;
2. makes the pylucid copy by rewriting the import lines only (``import torch`` ->
   ``import pylucid as torch``, ``import torch.X as Y`` -> ``import pylucid.X as Y``,
   ``from torch.X import Y`` -> ``from pylucid.X import Y``), checks that no other line
   differs, and runs it in another subprocess with ``INIT`` set to torch's weights file, so
   its ``model.load_state_dict(torch.load(os.environ["INIT"]))`` reads PyTorch's own zip
   checkpoint. A ``torch`` package that raises on import is first on that run's path:
   nothing in the pylucid run may reach PyTorch;
3. compares the 50 per-step losses and the final metrics.

Both runs see the same data in the same order: the scripts take their shuffling from
NumPy's ``default_rng``, never from torch's generator (pylucid's is NumPy's PCG64, not
PyTorch's Philox/MT, so ``torch.randint`` and ``torch.multinomial`` give other numbers; what
they decide in ``char_lm.py`` is only sanity-checked, see its docstring), and no dropout
is active. Each script asserts its own metric (accuracy, a valid sample, a loaded
checkpoint computing exactly what the trained model computes, an exact resume).

Tolerance: float32, relative 1e-4 at every step. The libraries compute the same float32
formulas in different orders (BLAS blocking, reduction trees, PyTorch's FMA-contracted
optimizer updates), about 1e-7 relative per op; 50 steps of Adam/SGD with momentum
feed each step's rounding into the next weights, so the differences grow over the run -
measured worst 1.7e-7 (digits_mlp), 6.0e-7 (char_lm) and 3.2e-6 (cnn_checkpoint, where
BatchNorm's batch statistics and momentum 0.9 amplify most) - and 1e-4 leaves a margin of
30x over the worst. It still catches a real difference: changing digits_mlp's learning
rate by 0.1% moves its losses by up to 1.7e-3 relative, cnn_checkpoint's momentum by
0.1% (0.9 -> 0.899) moves its losses by up to 0.11.

torch's subprocess runs with OMP_NUM_THREADS=1: on a busy 2-core machine its OpenMP
threads spin and a 3 s script takes 30 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch runs the original scripts (pip install -e '.[peers]')",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("sklearn") is None,
        reason="the scripts train on sklearn's digits (pip install -e '.[peers]')",
    ),
]

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).parent.parent
SCRIPTS = ["digits_mlp.py", "char_lm.py", "cnn_checkpoint.py"]
STEPS = 50
RELATIVE = 1e-4

_IMPORT_LINE = re.compile(r"\s*(import|from)\s")
_REWRITES = [  # (pattern, replacement) on one line; the first that matches applies
    (re.compile(r"^(\s*)import torch(\s*(#.*)?)$"), r"\1import pylucid as torch\2"),
    (re.compile(r"^(\s*)import torch as (\w+)"), r"\1import pylucid as \2"),
    (re.compile(r"^(\s*)import torch\.([\w.]+) as (\w+)"), r"\1import pylucid.\2 as \3"),
    (re.compile(r"^(\s*)from torch((\.[\w.]+)?) import "), r"\1from pylucid\2 import "),
]


def to_pylucid(source: str) -> str:
    """``source`` with its torch import lines made pylucid's, and nothing else changed."""
    lines = []
    for line in source.splitlines(keepends=True):
        for pattern, replacement in _REWRITES:
            if pattern.match(line):
                line = pattern.sub(replacement, line, count=1)
                break
        else:
            if re.match(r"\s*import torch\.", line):  # binds the name torch, not torch.X
                raise ValueError(f"cannot port by the import alone: {line.strip()!r}")
        lines.append(line)
    ported = "".join(lines)
    changed = [
        (a, b) for a, b in zip(source.splitlines(), ported.splitlines(), strict=True) if a != b
    ]
    assert changed, "no torch import was rewritten"
    for original, new in changed:
        assert _IMPORT_LINE.match(original) and _IMPORT_LINE.match(new), (original, new)
    return ported


def test_to_pylucid_rewrites_only_import_lines() -> None:
    source = (
        "import os\nimport torch\nimport torch.nn as nn\n"
        "import torch.nn.functional as F  # noqa: N812\n"
        "from torch.utils.data import DataLoader\nfrom torch import nn, optim\n"
        "x = torch.zeros(2)  # import torch\n"
    )
    assert to_pylucid(source) == (
        "import os\nimport pylucid as torch\nimport pylucid.nn as nn\n"
        "import pylucid.nn.functional as F  # noqa: N812\n"
        "from pylucid.utils.data import DataLoader\nfrom pylucid import nn, optim\n"
        "x = torch.zeros(2)  # import torch\n"
    )
    with pytest.raises(ValueError, match="import torch.nn"):
        to_pylucid("import torch.nn\n")


def _run(script: Path, workdir: Path, env: dict[str, str]) -> dict:
    """Run ``script`` in a fresh interpreter; return what it wrote to ``$LOSSES``."""
    done = subprocess.run(
        [sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{script} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    printed = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert len(printed) == STEPS, done.stdout[-3000:]
    return json.loads(Path(env["LOSSES"]).read_text())


def _environment(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("INIT", "SAVE_INIT", "LOSSES", "CHECKPOINT")}  # fmt: skip
    env["OMP_NUM_THREADS"] = "1"  # (see the module docstring)
    return env | settings


def _assert_metrics_match(got: object, expected: object) -> None:
    """Numbers to ``RELATIVE``, strings exactly, lists element by element."""
    if isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), (got, expected)
        for a, b in zip(got, expected):
            _assert_metrics_match(a, b)
    elif isinstance(expected, str):
        assert got == expected
    else:
        np.testing.assert_allclose(got, expected, rtol=RELATIVE, atol=0)


@pytest.mark.parametrize("name", SCRIPTS)
def test_pytorch_program_runs_unchanged_under_pylucid(name: str, tmp_path: Path) -> None:
    original = PROGRAMS / name
    source = original.read_text()
    assert "pylucid" not in source  # (the scripts are PyTorch's, untouched)
    ported = tmp_path / name
    ported.write_text(to_pylucid(source))
    no_torch = tmp_path / "no_torch" / "torch"
    no_torch.mkdir(parents=True)
    (no_torch / "__init__.py").write_text(
        "raise ImportError('the pylucid run imported torch')\n"
    )  # fmt: skip
    init = tmp_path / "init.pt"

    expected = _run(original, tmp_path, _environment(
        SAVE_INIT=str(init), LOSSES=str(tmp_path / "torch.json"),
        CHECKPOINT=str(tmp_path / "torch-checkpoint.pt"),
    ))  # fmt: skip
    got = _run(ported, tmp_path, _environment(
        INIT=str(init), LOSSES=str(tmp_path / "pylucid.json"),
        CHECKPOINT=str(tmp_path / "pylucid-checkpoint.pt"),
        PYTHONPATH=os.pathsep.join([str(no_torch.parent), str(REPO)]),
    ))  # fmt: skip

    assert len(expected["losses"]) == STEPS
    assert expected["losses"][-1] < expected["losses"][0]  # (it learns: not vacuous)
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=RELATIVE, atol=0)
    _assert_metrics_match(got["metric"], expected["metric"])
