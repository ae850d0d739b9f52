"""What ``import pylucid`` loads: the optional and heavy packages only when a program uses
them (ml_dtypes' extension alone took 0.5-0.8 s of every import, bfloat16 or not), and of its
own modules not those a program may never use (the compiler, checkpoints, the MLX backend,
recurrent and transformer layers, L-BFGS, the schedules, pylucid.distributed, the data
loading of pylucid.utils.data), which load on first use under the same names
(:mod:`pylucid._lazy`)."""

from __future__ import annotations

import subprocess
import sys

#: Loaded on first use only: bfloat16 (ml_dtypes), the GPU backend (mlx), checkpoints
#: (safetensors), the demo's bars (tqdm), and the optional extras.
LAZY = ("ml_dtypes", "mlx", "safetensors", "tqdm", "tensorboard", "torch", "mpi4py",
        "matplotlib", "sklearn", "PIL")  # fmt: skip


#: pylucid's own modules that ``import pylucid`` leaves out; each loads when one of its names
#: is first looked up.
LAZY_MODULES = (
    "pylucid.compiler", "pylucid.serialization", "pylucid.torch_checkpoint",
    "pylucid.torch_unpickler", "pylucid.backends.mlx_backend", "pylucid.nn.modules.rnn",
    "pylucid.nn.modules.transformer", "pylucid.optim.lbfgs", "pylucid.optim.lr_scheduler",
    "pylucid.distributed", "pylucid.nn.parallel.distributed", "pylucid.utils.data",
)  # fmt: skip
#: Packages (top-level names) that ``import pylucid`` may add to those of ``import numpy,
#: numba`` (which themselves load SciPy, YAML, importlib.metadata...). Anything else is a
#: package imported at import time that a program may not use: load it where it is used.
EXTRA_PACKAGES = {"pylucid", "glob"}


def _modules_after(code: str) -> set[str]:
    return set(
        subprocess.run(
            [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout.split()
    )  # fmt: skip


def _loaded_after(code: str) -> set[str]:
    return {name.split(".")[0] for name in _modules_after(code)}


def test_import_loads_no_optional_or_heavy_package() -> None:
    assert _loaded_after("import pylucid").isdisjoint(LAZY)


def test_import_adds_no_package_to_numpy_and_numba() -> None:
    floor = _loaded_after("import numpy, numba")
    assert _loaded_after("import pylucid") - floor <= EXTRA_PACKAGES


def test_import_leaves_out_what_loads_on_first_use() -> None:
    loaded = _modules_after("import pylucid")
    sneaked = {m for m in loaded for lazy in LAZY_MODULES if m == lazy or m.startswith(lazy + ".")}
    assert not sneaked


def test_lazy_names_resolve_as_eager_ones_did() -> None:
    code = """
import pylucid as pl
names = {"pylucid": dir(pl), "nn": dir(pl.nn), "optim": dir(pl.optim),
         "backends": dir(pl.backends), "modules": dir(pl.nn.modules)}
lazy = {"compile", "CaptureError", "save", "load", "compiler", "serialization"}
assert lazy <= set(names["pylucid"])
assert {"LSTM", "GRU", "Transformer", "RNNCellBase"} <= set(names["nn"]) & set(names["modules"])
assert {"LBFGS", "lr_scheduler"} <= set(names["optim"]) and "MLXBackend" in names["backends"]
assert "mlx" in pl.backends.names()
from pylucid import save, load, compile, CaptureError
import pylucid.compiler
from pylucid.optim.lr_scheduler import StepLR
assert pl.compile is pylucid.compiler.compile and pl.CaptureError is pylucid.compiler.CaptureError
assert pl.save is pl.serialization.save is save and load is pl.serialization.load
assert pl.nn.LSTM is pl.nn.modules.LSTM is pl.nn.modules.rnn.LSTM
assert pl.nn.TransformerEncoderLayer is pl.nn.modules.transformer.TransformerEncoderLayer
assert pl.optim.LBFGS is pl.optim.lbfgs.LBFGS and pl.optim.lr_scheduler.StepLR is StepLR
assert pl.backends.MLXBackend is pl.backends.mlx_backend.MLXBackend
assert pl.utils.data.DataLoader is pylucid.utils.data.dataloader.DataLoader
ddp = pl.nn.parallel.DistributedDataParallel
assert ddp is pl.nn.parallel.distributed.DistributedDataParallel and pl.distributed.init
assert sorted(dir(pl)) == sorted(names["pylucid"]) and sorted(dir(pl.nn)) == sorted(names["nn"])
for name in pl.__all__ + pl.nn.__all__:
    getattr(pl.nn if name in pl.nn.__all__ else pl, name, None)
try:
    pl.uint8
except AttributeError as exc:
    assert "no uint8 dtype" in str(exc)
else:
    raise AssertionError("pl.uint8 resolved")
"""
    loaded = _modules_after(code)
    assert {"pylucid.compiler", "pylucid.serialization", "pylucid.nn.modules.rnn"} <= loaded


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
