"""What ``import pylucid`` loads: the optional and heavy packages only when a program uses
them (ml_dtypes' extension alone took 0.5-0.8 s of every import, bfloat16 or not)."""

from __future__ import annotations

import subprocess
import sys

#: Loaded on first use only: bfloat16 (ml_dtypes), the GPU backend (mlx), checkpoints
#: (safetensors), the demo's bars (tqdm), and the optional extras.
LAZY = ("ml_dtypes", "mlx", "safetensors", "tqdm", "tensorboard", "torch", "mpi4py",
        "matplotlib", "sklearn", "PIL")  # fmt: skip


def _loaded_after(code: str) -> set[str]:
    listing = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    return {name.split(".")[0] for name in listing}


def test_import_loads_no_optional_or_heavy_package() -> None:
    assert _loaded_after("import pylucid").isdisjoint(LAZY)


def test_bfloat16_loads_ml_dtypes_when_first_used() -> None:
    loaded = _loaded_after(
        "import pylucid as pl\nx = pl.ones(2, dtype=pl.bfloat16)\nassert x.dtype is pl.bfloat16"
        "\nassert str(x.numpy().dtype) == 'bfloat16'"
    )
    assert "ml_dtypes" in loaded


def test_a_float32_program_never_loads_ml_dtypes() -> None:
    loaded = _loaded_after(
        "import pylucid as pl\nx = pl.randn(4, 3, requires_grad=True)\n"
        "(pl.log2(x.abs() + 1) @ pl.ones(3)).sum().backward()\n"
        "assert pl.finfo(pl.float32).eps > 0 and pl.rand(2, dtype=pl.float16).dtype.is_half"
    )
    assert "ml_dtypes" not in loaded
