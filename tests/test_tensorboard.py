"""pylucid.utils.tensorboard: events written through the tensorboard package's writer and
read back with its own reader (EventAccumulator), on each backend; PyTorch's summaries as
the oracle where torch is installed."""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pylucid as pl
from tests.conftest import TORCH_REASON

TENSORBOARD_MISSING = importlib.util.find_spec("tensorboard") is None
TENSORBOARD_REASON = (
    "pylucid.utils.tensorboard needs tensorboard (pip install -e '.[peers]' or "
    "pip install tensorboard)"
)
needs_tensorboard = pytest.mark.skipif(TENSORBOARD_MISSING, reason=TENSORBOARD_REASON)


@pytest.fixture
def tb() -> Any:
    """The module under test (its tests skip without the tensorboard package)."""
    if TENSORBOARD_MISSING:
        pytest.skip(TENSORBOARD_REASON)
    return importlib.import_module("pylucid.utils.tensorboard")


def _accumulator(directory: Path) -> Any:
    """TensorBoard's own reader over ``directory``, loaded, keeping every event."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    keep_all = {"scalars": 0, "histograms": 0, "tensors": 0, "images": 0}
    accumulator = EventAccumulator(str(directory), size_guidance=keep_all)
    accumulator.Reload()
    return accumulator


def _event_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if "tfevents" in p.name)


def _events(path: Path) -> list[Any]:
    """The raw events of one event file, as written (no data-compat migration)."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    return [Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]


# -- the import -----------------------------------------------------------------------------
def test_import_without_tensorboard_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard...` fails
    for name in list(sys.modules):
        if name.startswith("tensorboard."):
            monkeypatch.setitem(sys.modules, name, None)
        elif name.startswith("pylucid.utils.tensorboard"):
            monkeypatch.delitem(sys.modules, name)  # imported afresh below
    with pytest.raises(ImportError, match=r'pip install "pylucid\[tensorboard\]"') as caught:
        importlib.import_module("pylucid.utils.tensorboard")
    assert "pip install tensorboard" in str(caught.value)


def test_import_pylucid_never_imports_tensorboard() -> None:
    code = (
        "import sys, pylucid, pylucid.utils, pylucid.utils.data\n"
        "assert 'tensorboard' not in sys.modules, 'tensorboard imported'\n"
        "assert 'pylucid.utils.tensorboard' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# -- scalars --------------------------------------------------------------------------------
def test_scalars_round_trip_through_tensorboards_reader(
    tb: Any, tmp_path: Path, device: str
) -> None:
    losses = [2.5, 1.25, 0.75]
    with tb.SummaryWriter(tmp_path) as writer:
        assert writer.get_logdir() == writer.log_dir == str(tmp_path)
        for step, loss in enumerate(losses):
            writer.add_scalar("loss", pl.tensor(loss, device=device), step)  # 0-d tensor
        writer.add_scalar("lr", 0.1, 0)  # Python, NumPy and one-element values
        writer.add_scalar("lr", np.float64(0.05), pl.tensor(10))  # a 0-d integer step
        writer.add_scalar("lr", pl.tensor([0.025], dtype=pl.float64, device=device), 20)
        writer.add_scalar("grad", pl.ones(1, requires_grad=True).sum(), 1, walltime=123.5)
        writer.add_scalar("acc", np.float32(0.5), 7, new_style=True)
        writer.add_scalar("acc64", 1 / 3, 7, new_style=True, double_precision=True)
    accumulator = _accumulator(tmp_path)
    assert [(e.step, e.value) for e in accumulator.Scalars("loss")] == list(enumerate(losses))
    lr = accumulator.Scalars("lr")
    assert [e.step for e in lr] == [0, 10, 20]
    np.testing.assert_allclose([e.value for e in lr], [0.1, 0.05, 0.025], rtol=1e-7)
    (grad,) = accumulator.Scalars("grad")
    assert (grad.wall_time, grad.step, grad.value) == (123.5, 1, 1.0)

    from tensorboard.util.tensor_util import make_ndarray

    (acc,) = accumulator.Tensors("acc")
    assert acc.step == 7 and make_ndarray(acc.tensor_proto) == np.float32(0.5)
    (acc64,) = accumulator.Tensors("acc64")
    assert make_ndarray(acc64.tensor_proto).dtype == np.float64
    assert make_ndarray(acc64.tensor_proto) == 1 / 3


def test_add_scalars_writes_one_run_per_curve(tb: Any, tmp_path: Path) -> None:
    with tb.SummaryWriter(tmp_path) as writer:
        writer.add_scalars("loss/all", {"train": pl.tensor(1.0), "val": 2.0}, 0)
        writer.add_scalars("loss/all", {"train": 0.5, "val": 1.5}, 1)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "loss_all_train",
        "loss_all_val",
    ]
    train = _accumulator(tmp_path / "loss_all_train").Scalars("loss/all")
    val = _accumulator(tmp_path / "loss_all_val").Scalars("loss/all")
    assert [(e.step, e.value) for e in train] == [(0, 1.0), (1, 0.5)]
    assert [(e.step, e.value) for e in val] == [(0, 2.0), (1, 1.5)]


# -- histograms -----------------------------------------------------------------------------
def test_histograms_round_trip(tb: Any, tmp_path: Path, device: str) -> None:
    pl.manual_seed(0)
    weights = pl.randn(40, 25, device=device)
    values = np.asarray(weights, dtype=np.float64).ravel()
    data = np.array([0.0, 1.0, 1.0, 2.0, -3.0])
    with tb.SummaryWriter(tmp_path) as writer:
        writer.add_histogram("w", weights, 3)
        writer.add_histogram("four", data, 0, bins=4)
        writer.add_histogram("merged", data, 0, bins=4, max_bins=2)
        writer.add_histogram_raw("raw", -1.0, 2.0, 3, 1.5, 5.25, [0.0, 2.0], [1, 2], 4)
    accumulator = _accumulator(tmp_path)
    (event,) = accumulator.Histograms("w")
    histogram = event.histogram_value
    assert event.step == 3 and histogram.num == 1000
    assert (histogram.min, histogram.max) == (values.min(), values.max())
    np.testing.assert_allclose(histogram.sum, values.sum(), rtol=1e-12)
    np.testing.assert_allclose(histogram.sum_squares, (values**2).sum(), rtol=1e-12)
    assert sum(histogram.bucket) == 1000 and list(histogram.bucket_limit) == sorted(
        histogram.bucket_limit
    )
    assert histogram.bucket[0] > 0 and histogram.bucket[-1] > 0  # empty ends dropped

    four = accumulator.Histograms("four")[0].histogram_value
    assert list(four.bucket_limit) == [-1.75, -0.5, 0.75, 2.0]  # np.histogram's edges[1:]
    assert list(four.bucket) == [1, 0, 1, 3] and (four.min, four.max, four.num) == (-3, 2, 5)
    merged = accumulator.Histograms("merged")[0].histogram_value
    assert list(merged.bucket_limit) == [-0.5, 2.0] and list(merged.bucket) == [1, 4]
    raw = accumulator.Histograms("raw")[0]
    assert raw.step == 4 and list(raw.histogram_value.bucket) == [1, 2]
    assert raw.histogram_value.sum_squares == 5.25


def test_histogram_of_non_finite_and_empty_values(tb: Any, tmp_path: Path) -> None:
    with tb.SummaryWriter(tmp_path) as writer:
        with pytest.warns(RuntimeWarning, match="'h': 2 of 4 values are NaN or infinite"):
            writer.add_histogram("h", np.array([1.0, np.nan, np.inf, 2.0]), 0)
        with pytest.raises(ValueError, match="'e': values is empty"):
            writer.add_histogram("e", pl.zeros(0), 0)
        with pytest.raises(ValueError, match="max_bins must be a positive integer"):
            writer.add_histogram("h", [1.0], 0, max_bins=0)
        with pytest.raises(ValueError, match="bucket_limits has 2 values but bucket_counts 1"):
            writer.add_histogram_raw("r", 0, 1, 1, 1, 1, [0.5, 1.0], [1])
    (event,) = _accumulator(tmp_path).Histograms("h")
    assert (event.histogram_value.num, event.histogram_value.max) == (2, 2.0)


# -- text, images, hparams ------------------------------------------------------------------
def test_text_round_trip(tb: Any, tmp_path: Path) -> None:
    with tb.SummaryWriter(tmp_path) as writer:
        writer.add_text("notes", "lr **0.1**, déjà vu", 5)
        with pytest.raises(TypeError, match="text_string must be a str"):
            writer.add_text("notes", 3, 5)
    (event,) = _accumulator(tmp_path).Tensors("notes/text_summary")  # PyTorch's tag
    assert event.step == 5
    assert event.tensor_proto.string_val == ["lr **0.1**, déjà vu".encode()]


def test_images_are_png_encoded_with_their_pixels(tb: Any, tmp_path: Path) -> None:
    image_module = pytest.importorskip("PIL.Image", reason="add_image needs Pillow")
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(3, 2, 3) * 10  # CHW uint8
    grey = np.array([[0.0, 0.5], [1.0, 2.0]], dtype=np.float32)  # HW floats, clipped to 1
    with tb.SummaryWriter(tmp_path) as writer:
        writer.add_image("rgb", rgb, 0)
        writer.add_image("hwc", pl.tensor(rgb.transpose(1, 2, 0) / 255.0), 1, dataformats="HWC")
        writer.add_image("grey", pl.tensor(grey), 2, dataformats="HW")
    accumulator = _accumulator(tmp_path)

    def pixels(tag: str) -> np.ndarray:
        (event,) = accumulator.Images(tag)
        return np.asarray(image_module.open(io.BytesIO(event.encoded_image_string)))

    np.testing.assert_array_equal(pixels("rgb"), rgb.transpose(1, 2, 0))
    assert np.abs(pixels("hwc").astype(int) - rgb.transpose(1, 2, 0)).max() <= 1
    np.testing.assert_array_equal(pixels("grey"), [[0, 127], [255, 255]])
    assert accumulator.Images("grey")[0].width == 2


def test_image_errors(tb: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with tb.SummaryWriter(tmp_path) as writer:
        with pytest.raises(ValueError, match="shape \\(2, 2\\), which does not match"):
            writer.add_image("i", np.zeros((2, 2)))
        with pytest.raises(ValueError, match="dataformats must order H, W"):
            writer.add_image("i", np.zeros((1, 2, 2, 3)), dataformats="NCHW")
        with pytest.raises(ValueError, match="1, 3 or 4 channels .* got 2"):
            writer.add_image("i", np.zeros((2, 4, 4)))
        with pytest.raises(TypeError, match="floating .* or uint8 .* got int64"):
            writer.add_image("i", pl.zeros(3, 2, 2, dtype=pl.int64))
        monkeypatch.setitem(sys.modules, "PIL", None)
        with pytest.raises(ImportError, match="needs Pillow.*pip install pillow"):
            writer.add_image("i", np.zeros((3, 2, 2)))


def test_hparams_write_a_run_the_hparams_plugin_reads(tb: Any, tmp_path: Path) -> None:
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import metadata as hparams_metadata

    hparams = {"lr": 0.01, "optimizer": "adamw", "amsgrad": False, "width": pl.tensor(64)}
    with tb.SummaryWriter(tmp_path) as writer:
        writer.add_hparams(
            hparams,
            {"hparam/accuracy": pl.tensor(0.875)},
            hparam_domain_discrete={"optimizer": ["adamw", "sgd"]},
            run_name="trial",
            global_step=9,
        )
        with pytest.raises(TypeError, match=r"hparam_dict\['bad'\] must be a bool"):
            writer.add_hparams({"bad": None}, {})
        with pytest.raises(ValueError, match="names \\['depth'\\], which are not in"):
            writer.add_hparams({"lr": 0.1}, {}, hparam_domain_discrete={"depth": [1, 2]})
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["trial"]  # none for errors
    accumulator = _accumulator(tmp_path / "trial")
    assert [(e.step, e.value) for e in accumulator.Scalars("hparam/accuracy")] == [(9, 0.875)]
    content = accumulator.SummaryMetadata(hparams_metadata.EXPERIMENT_TAG).plugin_data.content
    experiment = hparams_metadata.parse_experiment_plugin_data(content)
    infos = {info.name: info for info in experiment.hparam_infos}
    assert infos["amsgrad"].type == api_pb2.DATA_TYPE_BOOL
    assert [v.string_value for v in infos["optimizer"].domain_discrete.values] == [
        "adamw",
        "sgd",
    ]
    assert [m.name.tag for m in experiment.metric_infos] == ["hparam/accuracy"]
    start = hparams_metadata.parse_session_start_info_plugin_data(
        accumulator.SummaryMetadata(hparams_metadata.SESSION_START_INFO_TAG).plugin_data.content
    )
    assert start.hparams["lr"].number_value == 0.01 and start.hparams["width"].number_value == 64
    assert start.hparams["optimizer"].string_value == "adamw"
    assert start.hparams["amsgrad"].bool_value is False


# -- the writer's life ----------------------------------------------------------------------
def test_default_log_dir_flush_close_and_reopen(
    tb: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = tb.SummaryWriter(comment="_lr0.1", filename_suffix=".pylucid")
    pattern = rf"runs{re.escape(os.sep)}[A-Z][a-z]{{2}}\d\d_\d\d-\d\d-\d\d_"
    assert re.fullmatch(pattern + re.escape(socket.gethostname()) + "_lr0.1", writer.log_dir)
    log_dir = tmp_path / writer.log_dir
    writer.add_scalar("x", 1.0, 0)
    writer.flush()  # readable before close
    assert [(e.step, e.value) for e in _accumulator(log_dir).Scalars("x")] == [(0, 1.0)]
    writer.close()
    writer.close()  # twice is harmless
    writer.add_scalar("x", 2.0, 1)  # after close: a new event file, as in PyTorch
    writer.close()
    files = _event_files(log_dir)
    assert len(files) == 2 and all(f.name.endswith(".pylucid") for f in files)
    assert [(e.step, e.value) for e in _accumulator(log_dir).Scalars("x")] == [(0, 1.0), (1, 2.0)]


def test_purge_step_hides_the_earlier_runs_later_steps(tb: Any, tmp_path: Path) -> None:
    with tb.SummaryWriter(tmp_path) as first:
        for step in range(8):
            first.add_scalar("loss", float(step), step)
    (old,) = _event_files(tmp_path)
    old.rename(tmp_path / "events.out.tfevents.0000000001.first")  # sorts before the next
    with tb.SummaryWriter(tmp_path, purge_step=5) as second:  # restarted from step 5
        second.add_scalar("loss", 50.0, 5)
        second.add_scalar("loss", 60.0, 6)
    from tensorboard.compat.proto.event_pb2 import SessionLog

    (new,) = (f for f in _event_files(tmp_path) if not f.name.endswith("first"))
    starts = [e for e in _events(new) if e.HasField("session_log")]
    assert [(e.step, e.session_log.status) for e in starts] == [(5, SessionLog.START)]
    loss = _accumulator(tmp_path).Scalars("loss")
    assert [(e.step, e.value) for e in loss] == [(s, float(s)) for s in range(5)] + [
        (5, 50.0),
        (6, 60.0),
    ]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (pl.ones(2), ValueError, r"scalar_value must hold one number, got a Tensor of shape"),
        ("0.5", TypeError, "scalar_value must be a pylucid tensor, a NumPy array or a number"),
        (None, TypeError, "got NoneType"),
    ],
)
def test_scalar_errors(
    tb: Any, tmp_path: Path, value: Any, error: type[Exception], message: str
) -> None:
    with tb.SummaryWriter(tmp_path) as writer, pytest.raises(error, match=message):
        writer.add_scalar("x", value, 0)


def test_steps_must_be_integers(tb: Any, tmp_path: Path) -> None:
    with tb.SummaryWriter(tmp_path) as writer:
        with pytest.raises(TypeError, match="global_step must be an integer.*float 1.5"):
            writer.add_scalar("x", 1.0, 1.5)
        with pytest.raises(TypeError, match="global_step must be an integer"):
            writer.add_text("x", "t", True)
    with pytest.raises(TypeError, match="purge_step must be an integer"):
        tb.SummaryWriter(tmp_path, purge_step="5")


UNSUPPORTED = [
    "add_images",
    "add_image_with_boxes",
    "add_figure",
    "add_video",
    "add_audio",
    "add_graph",
    "add_onnx_graph",
    "add_embedding",
    "add_pr_curve",
    "add_pr_curve_raw",
    "add_custom_scalars",
    "add_custom_scalars_multilinechart",
    "add_custom_scalars_marginchart",
    "add_mesh",
    "add_tensor",
]


def test_unsupported_methods_raise_naming_themselves(tb: Any, tmp_path: Path) -> None:
    with tb.SummaryWriter(tmp_path) as writer:
        for name in UNSUPPORTED:
            method = getattr(writer, name)
            assert method.__name__ == name
            with pytest.raises(NotImplementedError, match=rf"SummaryWriter\.{name} is not"):
                method("tag", np.zeros((3, 2, 2)), global_step=0)


@needs_tensorboard
def test_writer_has_every_method_of_torchs() -> None:
    torch_tensorboard = pytest.importorskip(
        "torch.utils.tensorboard", reason=TORCH_REASON
    )
    from pylucid.utils.tensorboard import SummaryWriter

    theirs = {n for n in dir(torch_tensorboard.SummaryWriter) if not n.startswith("_")}
    ours = {n for n in dir(SummaryWriter) if not n.startswith("_")}
    assert theirs <= ours, sorted(theirs - ours)


def test_summaries_match_torchs(tb: Any) -> None:
    torch_summary = pytest.importorskip(
        "torch.utils.tensorboard.summary", reason=TORCH_REASON
    )
    pytest.importorskip("PIL", reason="add_image needs Pillow")
    image = np.random.default_rng(0).random((3, 5, 4)).astype(np.float32)
    pairs = [
        (tb.summary.scalar("a", pl.tensor(2.5)), torch_summary.scalar("a", 2.5)),
        (tb.summary.text("t", "héllo"), torch_summary.text("t", "héllo")),
        (
            tb.summary.image("i", pl.tensor(image)),
            torch_summary.image("i", image, dataformats="CHW"),
        ),
    ]
    for ours, theirs in pairs:
        assert ours.SerializeToString() == theirs.SerializeToString(), ours
