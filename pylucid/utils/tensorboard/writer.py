"""``SummaryWriter``: PyTorch's TensorBoard logger, on the ``tensorboard`` package's writer.

The events go through ``tensorboard.summary.writer.event_file_writer.EventFileWriter`` (the
writer ``torch.utils.tensorboard`` uses too), which owns the file format, its queue and its
flushing thread; this module only makes the ``Event`` messages.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, NoReturn

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from pylucid.utils.tensorboard import summary as summaries

__all__ = ["SummaryWriter"]


def _step(method: str, name: str, value: Any) -> int | None:
    """``value`` (None, an integer, or a one-element integer tensor or array) as an int."""
    if value is None:
        return None
    array = np.asarray(value)
    if isinstance(value, (bool, np.bool_)) or array.dtype.kind not in "iu" or array.size != 1:
        raise TypeError(
            f"{method}: {name} must be an integer (or a one-element integer tensor), got "
            f"{type(value).__name__} {value!r}"
        )
    return int(array.reshape(()))


def _unsupported(name: str, hint: str = "") -> Callable[..., NoReturn]:
    """A SummaryWriter method that pylucid does not write: it raises, naming itself."""

    def method(self: SummaryWriter, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"SummaryWriter.{name} is not supported by pylucid.utils.tensorboard, which writes "
            f"scalars, histograms, text, images and hparams{hint}"
        )

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not supported: raises NotImplementedError (PyTorch's ``{name}``)."
    return method


class SummaryWriter:
    """Writes scalars, histograms, text, images and hyperparameters to TensorBoard event
    files, as ``torch.utils.tensorboard.SummaryWriter``.

    Values may be pylucid tensors (on any device), NumPy arrays or numbers, or Python
    numbers. Events are queued and written by a background thread (``max_queue`` pending,
    flushed every ``flush_secs``); :meth:`flush` and :meth:`close` write them now. Used as a
    context manager, the writer closes on exit.

    Parameters
    ----------
    log_dir : str or path-like, optional
        The run's directory (made if missing). Default ``runs/<date>_<hostname><comment>``,
        as PyTorch (``runs/May04_22-14-54_host`` with an empty comment).
    comment : str
        Appended to the default ``log_dir`` (ignored when ``log_dir`` is given).
    purge_step : int, optional
        Start the run again from this step: TensorBoard hides the events of earlier files of
        this directory at this step and after (a restart after a crash).
    max_queue : int
        Events kept in memory before the writer blocks on the file.
    flush_secs : float
        Seconds between flushes of the pending events to disk.
    filename_suffix : str
        Appended to the event files' names.

    Raises
    ------
    TypeError
        For a ``purge_step`` that is not an integer.

    Notes
    -----
    Not supported (they raise NotImplementedError): ``add_images``,
    ``add_image_with_boxes``, ``add_figure``, ``add_video``, ``add_audio``, ``add_graph``,
    ``add_onnx_graph``, ``add_embedding``, ``add_pr_curve``, ``add_pr_curve_raw``,
    ``add_custom_scalars`` and its chart helpers, ``add_mesh`` and ``add_tensor``.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
    ) -> None:
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = os.fspath(log_dir)
        self.purge_step = _step("SummaryWriter", "purge_step", purge_step)
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self._file_writer: EventFileWriter | None = None
        self._scalars_writers: dict[str, EventFileWriter] = {}
        writer = self._writer()
        if self.purge_step is not None:  # a START at this step purges the later events
            writer.add_event(
                Event(
                    wall_time=time.time(),
                    step=self.purge_step,
                    session_log=SessionLog(status=SessionLog.START),
                )
            )

    def _open(self, directory: str) -> EventFileWriter:
        """A new event file in ``directory``, with this writer's queue and flush options."""
        return EventFileWriter(directory, self.max_queue, self.flush_secs, self.filename_suffix)

    def _writer(self) -> EventFileWriter:
        """The event file of ``log_dir`` (a new one after :meth:`close`, as in PyTorch)."""
        if self._file_writer is None:
            self._file_writer = self._open(self.log_dir)
        return self._file_writer

    def _write(
        self,
        method: str,
        summary: Summary,
        global_step: Any,
        walltime: float | None,
        writer: EventFileWriter | None = None,
    ) -> None:
        """Write ``summary`` as an event at ``global_step`` and ``walltime`` (now if None)."""
        event = Event(summary=summary, wall_time=time.time() if walltime is None else walltime)
        step = _step(method, "global_step", global_step)
        if step is not None:
            event.step = step
        (writer or self._writer()).add_event(event)

    def get_logdir(self) -> str:
        """The directory the event files are written to."""
        return self.log_dir

    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        """Log one number (a 0-d or one-element tensor or array, or a Python or NumPy
        number) under ``tag``, at ``global_step``.

        ``new_style`` writes it as a 0-d tensor with the scalars plugin's metadata (float64
        with ``double_precision``) instead of a ``simple_value``; TensorBoard shows both.
        """
        summary = summaries.scalar(tag, scalar_value, new_style, double_precision)
        self._write("add_scalar", summary, global_step, walltime)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: Mapping[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log several numbers as curves of one chart: each ``tag_scalar_dict[tag]`` goes
        under ``main_tag`` to a run of its own, in ``log_dir/<main_tag>_<tag>`` (``/`` in
        ``main_tag`` written as ``_``), as PyTorch.

        Raises
        ------
        TypeError
            For a ``tag_scalar_dict`` that is not a dict.
        """
        if not isinstance(tag_scalar_dict, Mapping):
            raise TypeError(
                f"add_scalars: tag_scalar_dict must be a dict of tags to numbers, got "
                f"{type(tag_scalar_dict).__name__}"
            )
        events = [(tag, summaries.scalar(main_tag, v)) for tag, v in tag_scalar_dict.items()]
        for tag, summary in events:
            directory = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{tag}")
            if directory not in self._scalars_writers:
                self._scalars_writers[directory] = self._open(directory)
            writer = self._scalars_writers[directory]
            self._write("add_scalars", summary, global_step, walltime, writer)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """Log the distribution of ``values`` (a tensor or array of any shape), in the
        buckets ``bins`` names: ``"tensorflow"`` (TensorFlow's default buckets) or what
        ``numpy.histogram`` accepts; see :func:`pylucid.utils.tensorboard.summary.histogram`.
        """
        summary = summaries.histogram(tag, values, bins, max_bins)
        self._write("add_histogram", summary, global_step, walltime)

    def add_histogram_raw(
        self,
        tag: str,
        min: float,  # noqa: A002 (PyTorch's argument names)
        max: float,  # noqa: A002
        num: int,
        sum: float,  # noqa: A002
        sum_squares: float,
        bucket_limits: Sequence[float],
        bucket_counts: Sequence[float],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a histogram already bucketed: bucket ``i`` counts the values below
        ``bucket_limits[i]`` (and not below the previous limit)."""
        summary = summaries.histogram_raw(
            tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts
        )
        self._write("add_histogram_raw", summary, global_step, walltime)

    def add_text(
        self,
        tag: str,
        text_string: str,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a text (TensorBoard renders Markdown), under ``tag + "/text_summary"`` as
        PyTorch names it."""
        self._write("add_text", summaries.text(tag, text_string), global_step, walltime)

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        """Log an image: floats in [0, 1] or uint8, laid out as ``dataformats`` (``"CHW"``,
        ``"HWC"``, ``"HW"`` ...), with 1, 3 or 4 channels; PNG-encoded with Pillow
        (``pip install pillow``)."""
        summary = summaries.image(tag, img_tensor, dataformats)
        self._write("add_image", summary, global_step, walltime)

    def add_hparams(
        self,
        hparam_dict: Mapping[str, Any],
        metric_dict: Mapping[str, Any],
        hparam_domain_discrete: Mapping[str, Sequence[Any]] | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """Log a run's hyperparameters and final metrics for TensorBoard's HParams tab, as
        PyTorch: in a run of its own, ``log_dir/<run_name>`` (default: the current time),
        where each metric is also a scalar.

        Parameters
        ----------
        hparam_dict : dict
            Hyperparameters: bool, int, float, str or one-number tensors.
        metric_dict : dict
            Metric tags to numbers.
        hparam_domain_discrete : dict of lists, optional
            The values a hyperparameter can take.
        run_name : str, optional
        global_step : int, optional
            The step of the metrics' scalars.
        """
        hparam_summaries = summaries.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        metrics = [summaries.scalar(tag, value) for tag, value in metric_dict.items()]
        run = self._open(os.path.join(self.log_dir, run_name or str(time.time())))
        try:
            for summary in hparam_summaries:
                self._write("add_hparams", summary, None, None, run)
            for summary in metrics:
                self._write("add_hparams", summary, global_step, None, run)
        finally:
            run.close()

    add_images = _unsupported("add_images", "; log each image with add_image")
    add_image_with_boxes = _unsupported("add_image_with_boxes")
    add_figure = _unsupported(
        "add_figure",
        "; draw the figure (figure.canvas.draw()), then log "
        "numpy.asarray(figure.canvas.buffer_rgba()) with add_image(..., dataformats='HWC')",
    )
    add_video = _unsupported("add_video")
    add_audio = _unsupported("add_audio")
    add_graph = _unsupported("add_graph")
    add_onnx_graph = _unsupported("add_onnx_graph")
    add_embedding = _unsupported("add_embedding")
    add_pr_curve = _unsupported("add_pr_curve")
    add_pr_curve_raw = _unsupported("add_pr_curve_raw")
    add_custom_scalars = _unsupported("add_custom_scalars")
    add_custom_scalars_multilinechart = _unsupported("add_custom_scalars_multilinechart")
    add_custom_scalars_marginchart = _unsupported("add_custom_scalars_marginchart")
    add_mesh = _unsupported("add_mesh")
    add_tensor = _unsupported("add_tensor")

    def flush(self) -> None:
        """Write every pending event to disk now."""
        for writer in [self._file_writer, *self._scalars_writers.values()]:
            if writer is not None:
                writer.flush()

    def close(self) -> None:
        """Flush and close the event files (a later ``add_*`` opens a new one, as in
        PyTorch)."""
        for writer in [self._file_writer, *self._scalars_writers.values()]:
            if writer is not None:
                writer.close()
        self._file_writer = None
        self._scalars_writers.clear()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
