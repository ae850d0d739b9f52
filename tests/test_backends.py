"""Backend registry and selection, device rules, MLX specifics."""

from __future__ import annotations

import numpy as np
import pytest

import pylucid as pl
from pylucid.backends import BackendUnavailableError, registry
from pylucid.backends.mlx_backend import MLXBackend
from tests.conftest import MLX_MISSING, MLX_REASON

needs_mlx = pytest.mark.skipif(MLX_MISSING, reason=MLX_REASON)


@pytest.fixture(autouse=True)
def _clean_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(registry.ENV_VAR, raising=False)
    pl.backends.set_default(None)
    yield
    pl.backends.set_default(None)


def test_registry_lists_builtin_backends() -> None:
    assert {"numba", "mlx"} <= set(pl.backends.names())
    assert "numba" in pl.backends.available()
    info = pl.backends.info()
    assert info["numba"]["device"] == "cpu"
    assert pl.backends.get("numba").name == "numba"
    with pytest.raises(ValueError, match="no backend named 'tpu'.*numba"):
        pl.backends.get("tpu")


def test_registry_refuses_duplicate_names() -> None:
    with pytest.raises(ValueError, match="already registered"):
        pl.backends.register(pl.backends.NumbaBackend())


@needs_mlx
def test_selection_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pl.zeros(1).backend == "numba"  # built-in default
    monkeypatch.setenv(registry.ENV_VAR, "mlx")
    assert pl.zeros(1).backend == "mlx"  # environment
    pl.backends.set_default("numba")
    assert pl.zeros(1).backend == "numba"  # set_default beats the environment
    with pl.backends.use("gpu"):
        assert pl.zeros(1).backend == "mlx"  # use() beats set_default
        assert pl.zeros(1, device="cpu").backend == "numba"  # device= beats everything
        with pl.backends.use("numba"):
            assert pl.zeros(1).backend == "numba"  # nested
        assert pl.zeros(1).backend == "mlx"
    assert pl.zeros(1).backend == "numba"


def test_unknown_backend_in_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.ENV_VAR, "cuda9")
    with pytest.raises(ValueError, match="PYLUCID_BACKEND.*cuda9"):
        pl.zeros(1)


def test_unavailable_mlx_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = MLXBackend()
    fake.__dict__["_import_error"] = 'the mlx backend needs MLX: pip install "pylucid[mlx]"'
    monkeypatch.setitem(registry._BACKENDS, "mlx", fake)
    with pytest.raises(BackendUnavailableError, match=r"pip install \"pylucid\[mlx\]\""):
        pl.zeros(1, device="gpu")
    assert pl.backends.info()["mlx"]["available"] == "no"
    assert "mlx" not in pl.backends.available()


@needs_mlx
def test_mixing_devices_names_both() -> None:
    a = pl.ones(2)
    b = pl.ones(2, device="gpu")
    with pytest.raises(
        RuntimeError, match=r"mul: .*a is on 'cpu' \(numba\).*b is on 'gpu' \(mlx\)"
    ):
        a * b


@needs_mlx
def test_float64_on_gpu_keeps_its_dtype() -> None:
    x = pl.tensor(np.array([1.0 + 2**-40, 8.0]), device="gpu", requires_grad=True)
    assert x.dtype is pl.float64 and x.device == "gpu"
    y = pl.log2(x)
    assert y.dtype is pl.float64
    assert y.numpy().dtype == np.float64
    assert y.numpy()[0] == np.log2(1.0 + 2**-40)  # not representable in float32
    y.sum().backward()
    assert x.grad.dtype is pl.float64


@needs_mlx
def test_to_device_round_trip_is_differentiable() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    xg = x.to("gpu")
    assert xg.device == "gpu" and xg.backend == "mlx" and xg.grad_fn is not None
    (xg * xg).sum().to("cpu").backward()
    assert x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


@needs_mlx
def test_issue_example_detach_to_gpu() -> None:
    x = pl.tensor([0.5, 1.0, 8.0], requires_grad=True)
    xg = x.detach().to("gpu").requires_grad_()
    assert xg.is_leaf and xg.requires_grad and xg.device == "gpu"
    pl.log2(xg).sum().backward()
    np.testing.assert_allclose(xg.grad.numpy(), 1 / (np.array([0.5, 1, 8]) * np.log(2)), rtol=1e-6)


@needs_mlx
def test_info_says_where_mlx_runs() -> None:
    runs_on = pl.backends.info()["mlx"]["runs_on"]
    assert runs_on == "gpu" or runs_on.startswith("cpu stream")


def test_entry_point_backends_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    class ToyBackend(pl.backends.NumbaBackend):
        name = "toy"
        device = "toy-device"

    class FakeEntryPoint:
        def load(self) -> type:
            return ToyBackend

    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "entry_points", lambda group: [FakeEntryPoint()])
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(registry, "_DEVICE_DEFAULTS", dict(registry._DEVICE_DEFAULTS))
    assert "toy" in pl.backends.names()
    assert pl.zeros(2, device="toy-device").backend == "toy"


def _protocol_attributes() -> set[str]:
    """The data attributes the protocol declares (``name``, ``device``...), not primitives."""
    from pylucid.backends import base

    return set(base.Backend.__annotations__)


def _declared_primitives() -> set[str]:
    from pylucid.backends import base

    declared = {n for n in vars(base.Backend) if not n.startswith("_")} - _protocol_attributes()
    declared |= set(base.POINTWISE)
    declared |= {
        f"{n}_backward" for n in base.POINTWISE if n not in base.POINTWISE_WITHOUT_BACKWARD
    }
    return declared


@pytest.mark.parametrize("backend_class", [pl.backends.NumbaBackend, MLXBackend])
def test_backends_implement_exactly_the_protocol(backend_class: type) -> None:
    attributes = {*_protocol_attributes(), "mx"}
    implemented = {n for n in dir(backend_class) if not n.startswith("_") and n not in attributes}
    declared = _declared_primitives()
    assert declared - implemented == set(), "declared in the protocol but not implemented"
    assert implemented - declared == set(), "implemented but not declared in the protocol"
