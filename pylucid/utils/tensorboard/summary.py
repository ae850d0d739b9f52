"""Summary protobufs from pylucid tensors and NumPy values, as ``torch.utils.tensorboard.summary``.

Each function returns a ``Summary`` message of the ``tensorboard`` package
(``tensorboard.compat.proto.summary_pb2``), with the plugin metadata that package's plugins
read; :class:`~pylucid.utils.tensorboard.SummaryWriter` wraps it in an ``Event`` and hands it
to the package's ``EventFileWriter``, which owns the file format. Tags, value kinds and
plugin names are PyTorch's, so TensorBoard shows a pylucid run as it shows a PyTorch one.
"""

from __future__ import annotations

import functools
import io
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.util.tensor_util import make_tensor_proto

from pylucid.tensor import Tensor

__all__ = ["histogram", "histogram_raw", "hparams", "image", "scalar", "text"]


def _to_numpy(method: str, name: str, value: Any) -> np.ndarray:
    """``value`` (a pylucid tensor on any device, a NumPy array or number, a Python number or
    nested list) as a NumPy array of numbers, or a TypeError naming ``method`` and ``name``."""
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
        raise TypeError(
            f"{method}: {name} must be a pylucid tensor, a NumPy array or a number, got "
            f"{type(value).__name__} (as an array: dtype {array.dtype})"
        )
    return array


def _number(method: str, name: str, value: Any) -> float:
    """One number of ``value`` (a 0-d or one-element tensor, array or number) as a float."""
    array = _to_numpy(method, name, value)
    if array.size != 1:
        raise ValueError(
            f"{method}: {name} must hold one number, got a {type(value).__name__} of shape "
            f"{tuple(array.shape)} (log a reduction such as loss.item(), or use add_histogram)"
        )
    return float(array.astype(np.float64).reshape(()))


def scalar(
    tag: str, scalar_value: Any, new_style: bool = False, double_precision: bool = False
) -> Summary:
    """A scalar: ``simple_value`` (what TensorBoard's scalar dashboard has always read) or,
    with ``new_style``, a 0-d tensor with the scalars plugin's metadata (float32, or float64
    with ``double_precision``).

    Raises
    ------
    TypeError
        For a value that is not a number, a tensor or an array.
    ValueError
        For a tensor or array that holds more than one number.
    """
    value = _number("add_scalar", "scalar_value", scalar_value)
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=value)])
    dtype = np.float64 if double_precision else np.float32
    return Summary(
        value=[
            Summary.Value(
                tag=tag,
                tensor=make_tensor_proto(dtype(value)),
                metadata=scalar_metadata.create_summary_metadata(display_name="", description=""),
            )
        ]
    )


@functools.cache
def _tensorflow_edges() -> np.ndarray:
    """TensorFlow's default histogram bucket edges: ``±1e-12 · 1.1**k`` below ``1e20`` in
    magnitude and zero, between ``-DBL_MAX`` and ``DBL_MAX``."""
    steps = math.ceil(math.log(1e32) / math.log(1.1))
    positive = 1e-12 * 1.1 ** np.arange(steps)
    positive = positive[positive < 1e20]
    largest = np.finfo(np.float64).max
    return np.concatenate([[-largest], -positive[::-1], [0.0], positive, [largest]])


def histogram_raw(
    tag: str,
    min: float,  # noqa: A002 (PyTorch's argument names)
    max: float,  # noqa: A002
    num: int,
    sum: float,  # noqa: A002
    sum_squares: float,
    bucket_limits: Sequence[float],
    bucket_counts: Sequence[float],
) -> Summary:
    """A histogram from its statistics and buckets: bucket ``i`` counts the values below
    ``bucket_limits[i]`` and not below ``bucket_limits[i - 1]`` (``min`` for the first).

    Raises
    ------
    ValueError
        When ``bucket_limits`` and ``bucket_counts`` differ in length.
    """
    limits, counts = list(bucket_limits), list(bucket_counts)
    if len(limits) != len(counts):
        raise ValueError(
            f"add_histogram_raw: {tag!r}: bucket_limits has {len(limits)} values but "
            f"bucket_counts {len(counts)}; they must have the same length"
        )
    histo = HistogramProto(
        min=min,
        max=max,
        num=num,
        sum=sum,
        sum_squares=sum_squares,
        bucket_limit=limits,
        bucket=counts,
    )
    return Summary(value=[Summary.Value(tag=tag, histo=histo)])


def histogram(
    tag: str, values: Any, bins: Any = "tensorflow", max_bins: int | None = None
) -> Summary:
    """A histogram of ``values`` (any shape), with its minimum, maximum, count, sum and sum
    of squares.

    Parameters
    ----------
    tag : str
    values : Tensor or array_like
    bins : str, int or sequence of float
        ``"tensorflow"`` (TensorFlow's default exponential buckets), or anything
        ``numpy.histogram`` accepts as ``bins`` (a count, edges, or an estimator such as
        ``"auto"``).
    max_bins : int, optional
        Merge neighbouring buckets until at most this many remain.

    Raises
    ------
    ValueError
        For an empty ``values``, or a ``max_bins`` that is not a positive integer.

    Warns
    -----
    RuntimeWarning
        When ``values`` holds NaN or infinities: they are left out of the histogram.
    """
    flat = _to_numpy("add_histogram", "values", values).astype(np.float64).ravel()
    if flat.size == 0:
        raise ValueError(f"add_histogram: {tag!r}: values is empty; a histogram needs values")
    if max_bins is not None and (not isinstance(max_bins, int) or max_bins <= 0):
        raise ValueError(f"add_histogram: max_bins must be a positive integer, got {max_bins!r}")
    finite = flat[np.isfinite(flat)]
    if finite.size < flat.size:
        warnings.warn(
            f"add_histogram: {tag!r}: {flat.size - finite.size} of {flat.size} values are NaN "
            f"or infinite; they are left out of the histogram",
            RuntimeWarning,
            stacklevel=3,
        )
    edges = _tensorflow_edges() if isinstance(bins, str) and bins == "tensorflow" else bins
    counts, edges = np.histogram(finite, bins=edges)
    limits = edges[1:]
    nonzero = np.flatnonzero(counts)  # the empty buckets at both ends are dropped
    kept = slice(nonzero[0], nonzero[-1] + 1) if nonzero.size else slice(0, 0)
    counts, limits = counts[kept], limits[kept]
    if max_bins is not None and len(counts) > max_bins:
        group = -(-len(counts) // max_bins)
        starts = np.arange(0, len(counts), group)
        counts = np.add.reduceat(counts, starts)
        limits = limits[np.minimum(starts + group, len(limits)) - 1]
    empty = finite.size == 0
    return histogram_raw(
        tag,
        min=0.0 if empty else float(finite.min()),
        max=0.0 if empty else float(finite.max()),
        num=int(finite.size),
        sum=float(finite.sum()),
        sum_squares=float(np.dot(finite, finite)),
        bucket_limits=limits.tolist(),
        bucket_counts=counts.astype(np.float64).tolist(),
    )


def text(tag: str, text_string: str) -> Summary:
    """A text (rendered as Markdown) under the tag ``tag + "/text_summary"``, as PyTorch
    names it, with the text plugin's metadata.

    Raises
    ------
    TypeError
        For a ``text_string`` that is not a str.
    """
    if not isinstance(text_string, str):
        raise TypeError(f"add_text: text_string must be a str, got {type(text_string).__name__}")
    tensor = make_tensor_proto(np.array([text_string.encode("utf-8")], dtype=object))
    return Summary(
        value=[
            Summary.Value(
                tag=f"{tag}/text_summary",
                tensor=tensor,
                metadata=text_metadata.create_summary_metadata(display_name="", description=""),
            )
        ]
    )


def _to_hwc(array: np.ndarray, dataformats: str) -> np.ndarray:
    """``array`` laid out as ``dataformats`` (an order of ``H``, ``W`` and optionally
    ``C``), as height × width × channels."""
    layout = dataformats.upper() if isinstance(dataformats, str) else None
    if layout is None or sorted(layout) not in (["H", "W"], ["C", "H", "W"]):
        raise ValueError(
            f"add_image: dataformats must order H, W and optionally C (such as 'CHW', 'HWC' "
            f"or 'HW'), got {dataformats!r}; log a batch (NCHW) one image at a time"
        )
    if array.ndim != len(layout):
        raise ValueError(
            f"add_image: img_tensor has shape {tuple(array.shape)}, which does not match "
            f"dataformats={dataformats!r}"
        )
    if "C" not in layout:
        layout += "C"
        array = array[..., None]
    return np.transpose(array, [layout.index(axis) for axis in "HWC"])


def image(tag: str, img_tensor: Any, dataformats: str = "CHW") -> Summary:
    """An image, PNG-encoded with Pillow: floats are read in [0, 1] (scaled by 255 and
    clipped), uint8 as they are; 1, 3 or 4 channels (grey, RGB, RGBA).

    Raises
    ------
    ImportError
        When Pillow (the PNG encoder; ``pip install pillow``) is not installed.
    TypeError
        For an image that is neither floating nor uint8.
    ValueError
        For a shape that does not match ``dataformats``, or another number of channels.
    """
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError(
            "add_image: encoding an image as PNG needs Pillow, which is not installed: "
            "pip install pillow"
        ) from error
    array = _to_numpy("add_image", "img_tensor", img_tensor)
    if array.dtype == np.uint8:
        pixels = array
    elif array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        pixels = np.clip(array.astype(np.float32) * 255.0, 0.0, 255.0).astype(np.uint8)
    else:
        raise TypeError(
            f"add_image: img_tensor must be floating (values in [0, 1]) or uint8 (0..255), "
            f"got {array.dtype}"
        )
    pixels = np.ascontiguousarray(_to_hwc(pixels, dataformats))
    height, width, channels = pixels.shape
    if channels not in (1, 3, 4):
        raise ValueError(
            f"add_image: an image has 1, 3 or 4 channels (grey, RGB, RGBA), got {channels}"
        )
    png = io.BytesIO()  # Pillow reads grey, RGB or RGBA from the uint8 array's shape
    Image.fromarray(pixels[..., 0] if channels == 1 else pixels).save(png, "PNG")
    encoded = Summary.Image(
        height=height,
        width=width,
        colorspace=channels,  # TensorBoard's codes: 1 grey, 3 RGB, 4 RGBA
        encoded_image_string=png.getvalue(),
    )
    return Summary(value=[Summary.Value(tag=tag, image=encoded)])


def _hparams_summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary:
    """One of the hparams plugin's three summaries (experiment, session start and end)."""
    return Summary(
        value=[
            Summary.Value(
                tag=tag,
                metadata=hparams_metadata.create_summary_metadata(data),
                tensor=hparams_metadata.NULL_TENSOR,
            )
        ]
    )


def _hparam_value(name: str, value: Any) -> tuple[str, Any, int]:
    """The ``HParamInfo`` field, value and data type of one hyperparameter."""
    if isinstance(value, (bool, np.bool_)):
        return "bool_value", bool(value), api_pb2.DATA_TYPE_BOOL
    if isinstance(value, str):
        return "string_value", value, api_pb2.DATA_TYPE_STRING
    if isinstance(value, (int, float, np.number, Tensor)):
        number = _number("add_hparams", f"hparam_dict[{name!r}]", value)
        return "number_value", number, api_pb2.DATA_TYPE_FLOAT64
    raise TypeError(
        f"add_hparams: hparam_dict[{name!r}] must be a bool, int, float, str or a one-number "
        f"tensor, got {type(value).__name__}"
    )


def hparams(
    hparam_dict: Mapping[str, Any],
    metric_dict: Mapping[str, Any],
    hparam_domain_discrete: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[Summary, Summary, Summary]:
    """The hparams plugin's experiment, session-start and session-end summaries of one run:
    its hyperparameters (with their discrete domains, where given) and the tags of its
    metrics.

    Raises
    ------
    TypeError
        For arguments that are not dicts, or a hyperparameter of another type.
    ValueError
        For a discrete domain of a hyperparameter not in ``hparam_dict``, or whose values
        are not of its type.
    """
    for name, mapping in [("hparam_dict", hparam_dict), ("metric_dict", metric_dict)]:
        if not isinstance(mapping, Mapping):
            raise TypeError(f"add_hparams: {name} must be a dict, got {type(mapping).__name__}")
    domains = {} if hparam_domain_discrete is None else hparam_domain_discrete
    if not isinstance(domains, Mapping):
        raise TypeError(
            f"add_hparams: hparam_domain_discrete must be a dict of lists, got "
            f"{type(domains).__name__}"
        )
    start = plugin_data_pb2.SessionStartInfo()
    infos = []
    for name, value in hparam_dict.items():
        field, converted, data_type = _hparam_value(name, value)
        setattr(start.hparams[name], field, converted)
        info = api_pb2.HParamInfo(name=name, type=data_type)
        if name in domains:
            domain = [_hparam_value(name, v) for v in domains[name]]
            if any(kind != data_type for _, _, kind in domain):
                raise ValueError(
                    f"add_hparams: hparam_domain_discrete[{name!r}] must hold values of the "
                    f"type of hparam_dict[{name!r}] ({type(value).__name__})"
                )
            info.domain_discrete.extend([v for _, v, _ in domain])
        infos.append(info)
    unknown = set(domains) - set(hparam_dict)
    if unknown:
        raise ValueError(
            f"add_hparams: hparam_domain_discrete names {sorted(unknown)}, which are not in "
            f"hparam_dict"
        )
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metric_dict]
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS)
    return (
        _hparams_summary(
            hparams_metadata.EXPERIMENT_TAG,
            plugin_data_pb2.HParamsPluginData(experiment=experiment),
        ),
        _hparams_summary(
            hparams_metadata.SESSION_START_INFO_TAG,
            plugin_data_pb2.HParamsPluginData(session_start_info=start),
        ),
        _hparams_summary(
            hparams_metadata.SESSION_END_INFO_TAG,
            plugin_data_pb2.HParamsPluginData(session_end_info=end),
        ),
    )
