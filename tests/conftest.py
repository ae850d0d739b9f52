"""Shared fixtures: every test that takes ``device`` runs on each backend.

MLX tests are skipped, with the reason, where mlx is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl

#: Why a test with PyTorch as its oracle skips: an unpinned ``pip install torch`` resolves to
#: a CUDA build of several GB, so the CPU build goes first (README, Quick start).
TORCH_REASON = (
    "torch is the oracle of this test: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu, then pip install -e '.[peers]'"
)
MLX_MISSING = "mlx" not in pl.backends.available()
MLX_REASON = 'mlx is not installed (pip install "pylucid[mlx]")'

DEVICES = [
    pytest.param("cpu", id="numba"),
    pytest.param("gpu", id="mlx", marks=pytest.mark.skipif(MLX_MISSING, reason=MLX_REASON)),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """``"cpu"`` (numba) and ``"gpu"`` (mlx)."""
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, so failures reproduce."""
    return np.random.default_rng(1234)
