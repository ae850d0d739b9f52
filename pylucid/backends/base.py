"""The Backend protocol: what every backend implements, documented once.

A backend owns a storage type (``numpy.ndarray`` for ``numba``, ``mlx.core.array`` for
``mlx``) and implements the primitives that ops dispatch to. Primitives take and return
storage (binary primitives also accept a Python number as an operand); ``shape`` is the
output shape the op validated and ``dtype`` the compute :class:`~pylucid.dtypes.DType` the op
chose. Backends never see tensors or graphs.

Naming: ``name`` is an op's forward and ``name_backward`` its fused gradient, taking what the
op saved, then the upstream gradient ``g``; binary ops with one kernel per input use
``name_backward_a`` / ``name_backward_b``. Reductions receive ``g`` (and ``result``) with the
reduced axes kept as size 1. The pointwise ops of :data:`POINTWISE` follow one signature
each and are listed rather than spelled out; ``tests/test_backends.py`` checks that every
backend implements exactly the primitives declared here.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from pylucid.dtypes import DType

Storage = Any
Shape = tuple[int, ...]
Axes = tuple[int, ...]
#: The geometry of a 2-d convolution: ``(stride, padding, dilation, groups)`` with
#: ``stride = (sh, sw)``, ``padding = ((top, bottom), (left, right))``, ``dilation = (dh, dw)``.
ConvGeometry = tuple[tuple[int, int], tuple[tuple[int, int], tuple[int, int]], tuple[int, int], int]

#: Pointwise ops with the primitives ``name(a, shape, dtype)`` and (except ``log``, ``log10``,
#: ``sign`` and the roundings, whose gradients are ``log_base_backward`` and zero)
#: ``name_backward(v, g, shape, dtype)``, ``v`` being what the op saves (``x`` or ``result``).
POINTWISE = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf",
    "exp", "exp2", "expm1", "floor", "log", "log10", "log1p", "reciprocal", "relu", "round",
    "rsqrt", "sigmoid", "sign", "silu", "sin", "sinh", "sqrt", "square", "tan", "tanh",
    "trunc",
)  # fmt: skip
POINTWISE_WITHOUT_BACKWARD = ("log", "log10", "sign", "floor", "ceil", "round", "trunc")


@runtime_checkable
class Backend(Protocol):
    """The contract between ops and a compute library.

    Attributes
    ----------
    name : str
        Registry key (``"numba"``, ``"mlx"``).
    device : str
        The device tensors on this backend report (``"cpu"``, ``"gpu"``).
    allocates_lazily : bool
        Whether arrays are allocated only when a lazy graph is evaluated (mlx).
    """

    name: str
    device: str
    #: Arrays are allocated when a lazy graph is evaluated (mlx), where a failed allocation
    #: cannot be an exception: ops ask :meth:`check_allocation` first.
    allocates_lazily: bool

    # -- availability and conversion -------------------------------------------------------
    def is_available(self) -> bool:
        """Whether the backend's library can be imported and used here."""

    def unavailable_reason(self) -> str:
        """Why the backend cannot be used, with the command that fixes it ("" if available)."""

    def info(self) -> dict[str, str]:
        """What runs where: library versions, the physical device, thread counts."""

    def from_numpy(self, array: np.ndarray, dtype: DType) -> Storage:
        """Storage holding ``array`` as ``dtype`` (zero copy where the backend allows)."""

    def to_numpy(self, storage: Storage) -> np.ndarray:
        """The values of ``storage`` as a NumPy array."""

    def shape(self, storage: Storage) -> Shape:
        """The shape of ``storage`` as a tuple."""

    def dtype(self, storage: Storage) -> DType:
        """The dtype of ``storage``."""

    def full(self, shape: Shape, value: float, dtype: DType) -> Storage:
        """New storage of ``shape`` filled with ``value``."""

    def cast(self, a: Storage, dtype: DType) -> Storage:
        """``a`` converted to ``dtype`` (the same storage when it already is)."""

    def clone(self, a: Storage) -> Storage:
        """A copy of ``a`` that shares no memory with it."""

    def write(self, dst: Storage, src: Storage) -> Storage:
        """Put ``src``'s values (same shape and dtype) into ``dst`` in place where the
        storage is mutable; return the storage that now holds them (``dst``, or ``src``
        where arrays are immutable)."""

    def check_allocation(self, op: str, shape: Shape, dtype: DType) -> None:
        """Raise MemoryError, naming ``op``, if an array of ``shape`` and ``dtype`` cannot
        fit in the memory the backend may use (backends that ``allocates_lazily``)."""

    def synchronize(self) -> None:
        """Wait until the work queued on this backend is done (``torch.cuda.synchronize``);
        nothing to wait for where every primitive runs to completion."""

    def is_contiguous(self, a: Storage) -> bool:
        """Whether ``a``'s elements lie in row-major order without gaps."""

    def element_strides(self, a: Storage) -> Shape:
        """The step in elements between neighbours along each dimension (``Tensor.stride``)."""

    def data_pointer(self, a: Storage) -> int:
        """An integer that two storages share exactly when they share their first element's
        memory (the address where there is one: ``Tensor.data_ptr``)."""

    def is_writable(self, a: Storage) -> bool:
        """Whether ``a`` may be changed in place (not a read-only or broadcast array)."""

    def aliases(self, out: Storage, a: Storage) -> bool | None:
        """Whether ``out``, made from ``a`` by a reshape, shares ``a``'s memory; None for a
        backend without views of its own (immutable arrays), whose views are logical."""

    def accumulate(self, dst: Storage, src: Storage) -> Storage:
        """``dst + src`` (same shape and dtype), into ``dst`` in place where it is mutable;
        return the storage holding the sum (``dst``, or a new array where it is not)."""

    def is_private(self, a: Storage) -> bool:
        """Whether ``a`` owns its memory outright (no view of other storage, or the only
        view of a buffer of the backend's allocator), so a tensor can take it without a copy
        when no one else holds it."""

    # -- primitives ------------------------------------------------------------------------
    def log2(self, a: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise base-2 logarithm."""

    def neg(self, a: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise negation."""

    def add(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a + b`` with broadcasting to ``shape``."""

    def sub(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a - b`` with broadcasting to ``shape``."""

    def mul(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a * b`` with broadcasting to ``shape``."""

    def div(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a / b`` with broadcasting to ``shape``."""

    def div_backward_b(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``-g a / b^2``, the gradient of ``a / b`` with respect to ``b``."""

    def pow_scalar(self, a: Storage, exponent: float, shape: Shape, dtype: DType) -> Storage:
        """Elementwise ``a ** exponent``."""

    def pow_scalar_backward(
        self, x: Storage, g: Storage, exponent: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g p x^(p-1)`` (0 where ``p == 0``)."""

    def sum(self, a: Storage, axes: Axes, keepdims: bool, dtype: DType) -> Storage:
        """Sum over ``axes`` (all axes when empty is not meant: ``axes`` lists them)."""

    def broadcast_to(self, a: Storage, shape: Shape) -> Storage:
        """``a`` broadcast to ``shape`` (may be a read-only view)."""

    def broadcast_copy(self, a: Storage, shape: Shape) -> Storage:
        """``a`` broadcast to ``shape`` as storage of its own (C-ordered where the backend has
        layouts): a gradient spread back over the elements a reduction took (``sum``,
        ``mean``), which the ops downstream then read without a stride-0 view."""

    def reshape(self, a: Storage, shape: Shape) -> Storage:
        """``a`` with the same elements in ``shape`` (a view where possible)."""

    # -- elementwise family (besides POINTWISE) ---------------------------------------------
    def log_base_backward(
        self, x: Storage, g: Storage, ln_base: float, ln_base_lo: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g / (x ln b)``, ln b = ``ln_base + ln_base_lo`` (float64 high and low parts),
        correctly rounded in float64; the gradient of log, log2 and log10."""

    def dropout(self, x: Storage, u: Storage, p: float, shape: Shape, dtype: DType) -> Storage:
        """Fused ``x / (1 - p)`` where the uniform draw ``u >= p``, else 0 (``p`` and
        ``1 - p`` in the dtype): dropout's forward, and its backward with ``g`` for ``x``."""

    def leaky_relu(self, a: Storage, negative_slope: float, shape: Shape, dtype: DType) -> Storage:
        """Elementwise ``x if x > 0 else negative_slope * x``."""

    def leaky_relu_backward(
        self, x: Storage, g: Storage, negative_slope: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g if x > 0 else negative_slope * g``."""

    def elu(self, a: Storage, alpha: float, shape: Shape, dtype: DType) -> Storage:
        """Elementwise ``x if x > 0 else alpha * expm1(x)``."""

    def elu_backward(
        self, x: Storage, g: Storage, alpha: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g if x > 0 else g * alpha * exp(x)``."""

    def softplus(
        self, a: Storage, beta: float, threshold: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Elementwise ``log1p(exp(beta x)) / beta`` (``x`` where ``beta x > threshold``)."""

    def softplus_backward(
        self, x: Storage, g: Storage, beta: float, threshold: float, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g * sigmoid(beta x)`` (``g`` where ``beta x > threshold``)."""

    def gelu(self, a: Storage, approximate: str, shape: Shape, dtype: DType) -> Storage:
        """Elementwise GELU, exact (``"none"``) or its tanh approximation (``"tanh"``)."""

    def gelu_backward(
        self, x: Storage, g: Storage, approximate: str, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused gradient of :meth:`gelu`."""

    def clamp(
        self, a: Storage, low: float | None, high: float | None, shape: Shape, dtype: DType
    ) -> Storage:
        """Elementwise ``min(max(x, low), high)``; a None bound is no bound."""

    def clamp_backward(
        self,
        x: Storage,
        g: Storage,
        low: float | None,
        high: float | None,
        shape: Shape,
        dtype: DType,
    ) -> Storage:
        """Fused ``g where low <= x <= high else 0``."""

    # -- binary family ----------------------------------------------------------------------
    def pow(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a ** b`` with broadcasting (C99 special values; integers follow PyTorch)."""

    def pow_backward_a(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g b a^(b-1)``, 0 where ``b == 0``."""

    def pow_backward_b(
        self, a: Storage, result: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g a^b ln a``, 0 where ``a == 0`` and ``a^b`` is finite."""

    def logaddexp(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise ``log(e^a + e^b)``, without overflow where the result is finite."""

    def logaddexp_backward_a(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``g / (1 + e^(b - a))``."""

    def logaddexp_backward_b(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``g / (1 + e^(a - b))``."""

    def atan2(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise ``atan2(a, b)``."""

    def atan2_backward_a(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``g b / (a^2 + b^2)``."""

    def atan2_backward_b(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """Fused ``-g a / (a^2 + b^2)``."""

    def remainder(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """PyTorch's remainder (the divisor's sign; a zero result keeps ``a``'s sign)."""

    def remainder_backward_b(
        self, a: Storage, b: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``-floor_divide(a, b) g``."""

    def floor_divide(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``a // b`` as Python's (rounded towards -inf, exact: ``1 // 0.1`` is 9)."""

    def hypot(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """``sqrt(a^2 + b^2)`` without overflow; inf where either is infinite."""

    def hypot_backward(
        self, x: Storage, result: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``g x / result`` (for either input ``x``)."""

    def maximum(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise maximum, NaN-propagating."""

    def maximum_backward(
        self, x: Storage, other: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``g`` where ``x > other`` (or x is NaN), ``g/2`` on ties, else 0."""

    def minimum(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Elementwise minimum, NaN-propagating."""

    def minimum_backward(
        self, x: Storage, other: Storage, g: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``g`` where ``x < other`` (or x is NaN), ``g/2`` on ties, else 0."""

    def where(
        self, condition: Storage, a: Storage, b: Storage, shape: Shape, dtype: DType
    ) -> Storage:
        """``a`` where the bool ``condition`` holds, else ``b``, broadcast to ``shape``."""

    def eq(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Bool ``a == b`` (compared in ``dtype``)."""

    def ne(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Bool ``a != b``."""

    def lt(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Bool ``a < b``."""

    def le(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Bool ``a <= b``."""

    def gt(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Bool ``a > b``."""

    def ge(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """Bool ``a >= b``."""

    # -- reduction family -------------------------------------------------------------------
    def prod(self, a: Storage, axes: Axes, keepdims: bool, dtype: DType) -> Storage:
        """Product over ``axes`` (1 for no elements; overflow gives inf silently)."""

    def prod_backward(self, x: Storage, g: Storage, axes: Axes, dtype: DType) -> Storage:
        """``g`` times the product of the other elements of each reduced slice (no division)."""

    def amax(self, a: Storage, axes: Axes, keepdims: bool, dtype: DType) -> Storage:
        """Maximum over ``axes``, NaN-propagating."""

    def amin(self, a: Storage, axes: Axes, keepdims: bool, dtype: DType) -> Storage:
        """Minimum over ``axes``, NaN-propagating."""

    def extremum_backward(
        self, x: Storage, result: Storage, g: Storage, axes: Axes, dtype: DType
    ) -> Storage:
        """``g`` shared equally by the elements equal to ``result`` (NaN ones if it is NaN)."""

    def argmax(self, a: Storage, axis: int | None, keepdims: bool, dtype: DType) -> Storage:
        """int64 index of the first maximum along ``axis`` (of the flattened input if None)."""

    def argmin(self, a: Storage, axis: int | None, keepdims: bool, dtype: DType) -> Storage:
        """int64 index of the first minimum along ``axis`` (of the flattened input if None)."""

    def var(
        self, a: Storage, axes: Axes, keepdims: bool, correction: float, dtype: DType
    ) -> Storage:
        """``sum((a - mean)**2) / max(0, n - correction)``, two-pass."""

    def var_backward(
        self, x: Storage, g: Storage, axes: Axes, correction: float, dtype: DType
    ) -> Storage:
        """``2 g (x - mean) / (n - correction)``."""

    def std(
        self, a: Storage, axes: Axes, keepdims: bool, correction: float, dtype: DType
    ) -> Storage:
        """Square root of :meth:`var`."""

    def std_backward(
        self, x: Storage, result: Storage, g: Storage, axes: Axes, correction: float, dtype: DType
    ) -> Storage:
        """``g (x - mean) / ((n - correction) std)``, 0 where std = 0."""

    def logsumexp(self, a: Storage, axes: Axes, keepdims: bool, dtype: DType) -> Storage:
        """``s + log(sum(exp(a - s)))`` with ``s`` the max (0 where it is ±inf)."""

    def logsumexp_backward(
        self, x: Storage, result: Storage, g: Storage, axes: Axes, dtype: DType
    ) -> Storage:
        """``g exp(x - result)``."""

    def softmax(self, a: Storage, axes: Axes, dtype: DType) -> Storage:
        """``exp(a - m) / sum(exp(a - m))`` along the one axis in ``axes``, ``m`` the max."""

    def softmax_backward(self, y: Storage, g: Storage, axes: Axes, dtype: DType) -> Storage:
        """Fused ``y (g - sum(g y))``."""

    def log_softmax(self, a: Storage, axes: Axes, dtype: DType) -> Storage:
        """``(a - m) - log(sum(exp(a - m)))`` along the one axis in ``axes``."""

    def log_softmax_backward(self, y: Storage, g: Storage, axes: Axes, dtype: DType) -> Storage:
        """Fused ``g - exp(y) sum(g)``."""

    def cumsum(self, a: Storage, axis: int, dtype: DType) -> Storage:
        """The cumulative sum along ``axis`` (float32 accumulated in float64 on the CPU)."""

    def cumprod(self, a: Storage, axis: int, dtype: DType) -> Storage:
        """The cumulative product along ``axis``."""

    def cumprod_backward(self, x: Storage, g: Storage, axis: int, dtype: DType) -> Storage:
        """The gradient of :meth:`cumprod` from ``g``, exact where ``x`` holds zeros."""

    def argsort(self, a: Storage, axis: int, descending: bool, dtype: DType) -> Storage:
        """The int64 indices that order ``a`` along ``axis``: stable, NaN above every number
        (:func:`pylucid.backends.ordering.stable_argsort`)."""

    # -- losses -----------------------------------------------------------------------------
    def check_targets(self, target: Storage, classes: int, ignore_index: int) -> tuple[int, int]:
        """For a 1-d integer ``target``: (how many are not ``ignore_index``, the position
        of the first one outside ``[0, classes)`` or -1)."""

    def cross_entropy(
        self,
        x: Storage,
        target: Storage,
        ignore_index: int,
        label_smoothing: float,
        divisor: float | None,
        dtype: DType,
    ) -> Storage:
        """The ``(rows,)`` losses of ``(rows, C)`` logits against checked class indices:
        ``(1 - e)(lse - x_t) + e (lse - mean x)``, 0 where the target is ``ignore_index``;
        with a ``divisor``, their sum over it (0-d: the ``sum`` and ``mean`` reductions)."""

    def cross_entropy_backward(
        self,
        x: Storage,
        target: Storage,
        g: Storage,
        ignore_index: int,
        label_smoothing: float,
        divisor: float | None,
        dtype: DType,
    ) -> Storage:
        """``g_r (softmax(x_r) - q_r)`` per row, 0 on ignored rows: ``g_r`` from ``g``
        (``(rows,)``), or ``g / divisor`` for each row (``g`` of the reduced loss)."""

    # -- convolution ------------------------------------------------------------------------
    def conv2d(
        self, x: Storage, w: Storage, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> Storage:
        """The convolution (PyTorch's cross-correlation) of ``(N, C, H, W)`` ``x`` with
        ``(O, C / groups, KH, KW)`` ``w``, into the validated ``(N, O, OH, OW)`` ``shape``."""

    def conv2d_input_grad(
        self, g: Storage, w: Storage, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> Storage:
        """The gradient of :meth:`conv2d` for its input (of ``shape``) from ``g``: the
        transposed convolution of ``g`` with ``w``."""

    def conv2d_weight_grad(
        self, x: Storage, g: Storage, geometry: ConvGeometry, shape: Shape, dtype: DType
    ) -> Storage:
        """The gradient of :meth:`conv2d` for its weight (of ``shape``) from ``g``: the
        correlation of ``x`` with ``g``, summed over the batch."""

    # -- pooling ----------------------------------------------------------------------------
    def max_pool2d(self, x: Storage, windows: Any, shape: Shape, dtype: DType) -> Storage:
        """The max of each window (:class:`~pylucid.backends.windows.Windows`) of each
        plane of ``(N, C, H, W)`` ``x``: PyTorch's choice (the first largest value, the last
        NaN), ``-inf`` for a window inside the padding."""

    def max_pool2d_positions(self, x: Storage, windows: Any, dtype: DType) -> Storage:
        """The plane position ``ih W + iw`` each max of :meth:`max_pool2d` is taken from
        (int64, the output's shape)."""

    def max_pool2d_backward(self, x: Storage, g: Storage, windows: Any, dtype: DType) -> Storage:
        """``g`` added at the positions of :meth:`max_pool2d_positions`, in ``x``'s shape."""

    def avg_pool2d(
        self, x: Storage, windows: Any, divisors: Any, shape: Shape, dtype: DType
    ) -> Storage:
        """The sum of each window over its divisor, the product of the per-axis factors
        ``divisors[0][oh] * divisors[1][ow]``."""

    def avg_pool2d_backward(
        self, g: Storage, windows: Any, divisors: Any, shape: Shape, dtype: DType
    ) -> Storage:
        """The gradient of :meth:`avg_pool2d` for its input (of ``shape``): each ``g`` over
        its divisor, added onto each position of its window."""

    # -- normalization ----------------------------------------------------------------------
    def layer_norm(
        self, x: Storage, w: Storage, b: Storage, size: int, eps: float, dtype: DType
    ) -> Storage:
        """``(x - mean) / sqrt(var + eps) * w + b`` over each row of the trailing ``size``
        elements of ``x`` (``w`` and ``b``: ``size`` elements each), var biased."""

    def layer_norm_backward(
        self, x: Storage, w: Storage, g: Storage, size: int, eps: float, dtype: DType
    ) -> tuple[Storage, Storage, Storage]:
        """The gradients ``(dx, dw, db)`` of :meth:`layer_norm`, as ``(rows, size)``,
        ``(size,)`` and ``(size,)``."""

    def batch_norm_stats(self, x: Storage, dtype: DType) -> Storage:
        """The ``(2, C)`` float64 mean and biased variance of each channel (axis 1) of
        ``x``, over every other axis."""

    def batch_norm(
        self, x: Storage, w: Storage, b: Storage, stats: Storage, eps: float, dtype: DType
    ) -> Storage:
        """``(x - mean) / sqrt(var + eps) * w + b`` per channel of ``x`` with the ``(2, C)``
        ``stats`` (mean, var); ``w`` and ``b`` ``(C,)``, or 0-d for every channel."""

    def batch_norm_backward(
        self, x: Storage, w: Storage, stats: Storage, g: Storage, eps: float, training: bool,
        input_grad: bool, affine_grads: bool, dtype: DType,
    ) -> tuple[Storage | None, Storage, Storage]:  # fmt: skip
        """The gradients ``(dx, dw, db)`` of :meth:`batch_norm`, the ``stats`` those of
        ``x`` (``training``) or constants; ``dx`` None unless ``input_grad``, ``dw`` and
        ``db`` ``(C,)`` (needed only where ``training`` or ``affine_grads``)."""

    # -- recurrent ---------------------------------------------------------------------------
    def recurrent(
        self, mode: str, x: Storage, h0: Storage, c0: Storage | None, w_ih: Storage,
        w_hh: Storage, b_ih: Storage, b_hh: Storage, reverse: bool, batch_first: bool,
        shape: Shape, dtype: DType,
    ) -> tuple[Storage, tuple[Storage, ...]]:  # fmt: skip
        """One recurrent layer and direction (``mode`` ``"LSTM"``, ``"GRU"``, ``"RNN_TANH"``
        or ``"RNN_RELU"``) over the sequence ``x`` ``(T, B, I)`` (``(B, T, I)`` if
        ``batch_first``; backwards in time if ``reverse``): ``(out, saved)``, ``out`` of
        ``shape`` every step's ``h`` in ``x``'s layout (an LSTM's ``c_T`` after them at time
        ``T``), ``saved`` what :meth:`recurrent_backward` reads (the backend's own)."""

    def recurrent_backward(
        self, mode: str, x: Storage, c0: Storage | None, w_ih: Storage, w_hh: Storage,
        out: Storage, saved: tuple[Storage, ...], g: Storage, reverse: bool,
        batch_first: bool, shape: Shape, dtype: DType,
    ) -> tuple[Storage | None, ...]:  # fmt: skip
        """The gradients ``(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)`` of :meth:`recurrent`
        from ``g``, its output's (``dc0`` None but for an LSTM); ``out`` is its output for an
        Elman RNN (whose gates' gradient reads it), None for the others."""

    # -- optimizer updates ------------------------------------------------------------------
    # Each takes a parameter ``p``, its gradient ``g`` (same shape and dtype) and its state
    # arrays (None for a state the variant does not keep), applies PyTorch's single-tensor
    # update in one pass, and returns the new ``(p, *states)``: the arrays themselves where
    # they were updated in place, new arrays otherwise (None for the states passed as None).
    def sgd_update(
        self, p: Storage, g: Storage, buf: Storage | None, lr: float, momentum: float,
        dampening: float, weight_decay: float, nesterov: bool, maximize: bool, first: bool,
    ) -> tuple[Storage, Storage | None]:  # fmt: skip
        """SGD with momentum buffer ``buf`` (started as ``d`` when ``first``)."""

    def adam_update(
        self, p: Storage, g: Storage, exp_avg: Storage, exp_avg_sq: Storage,
        max_exp_avg_sq: Storage | None, beta1: float, beta2: float, step_size: float,
        bias_correction2_sqrt: float, eps: float, weight_decay: float, decay: float | None,
        amsgrad: bool, maximize: bool,
    ) -> tuple[Storage, Storage, Storage, Storage | None]:  # fmt: skip
        """Adam (``decay`` None: weight decay added to ``g``) or AdamW (``p`` first
        multiplied by ``decay = 1 - lr weight_decay``); ``step_size = lr / (1 - beta1^t)``."""

    def rmsprop_update(
        self, p: Storage, g: Storage, square_avg: Storage, grad_avg: Storage | None,
        buf: Storage | None, lr: float, alpha: float, eps: float, weight_decay: float,
        momentum: float, centered: bool, maximize: bool,
    ) -> tuple[Storage, Storage, Storage | None, Storage | None]:  # fmt: skip
        """RMSprop (``grad_avg`` when centered, ``buf`` with momentum)."""

    def adagrad_update(
        self, p: Storage, g: Storage, state_sum: Storage, clr: float, eps: float,
        weight_decay: float, maximize: bool,
    ) -> tuple[Storage, Storage]:  # fmt: skip
        """Adagrad at the decayed learning rate ``clr``."""

    def adadelta_update(
        self, p: Storage, g: Storage, square_avg: Storage, acc_delta: Storage, lr: float,
        rho: float, eps: float, weight_decay: float, maximize: bool,
    ) -> tuple[Storage, Storage, Storage]:  # fmt: skip
        """Adadelta: ``square_avg`` and ``acc_delta`` the running averages of the squared
        gradients and updates."""

    def norms(self, arrays: list[Storage], order: float, dtype: DType) -> Storage:
        """The ``order``-norm of each array's elements (``torch.linalg.vector_norm``: inf,
        -inf, 0, 1, 2 or any p), as a 1-d array of ``dtype`` (all arrays of ``dtype``)."""

    def scale(
        self, arrays: list[Storage], factor: float | Storage, dtype: DType
    ) -> list[Storage]:
        """Each array times ``factor`` (a number, rounded to ``dtype``, or a 0-d storage of
        ``dtype``), in place where mutable; returns the storages holding the products."""

    # -- linalg and shape families ----------------------------------------------------------
    def matmul(self, a: Storage, b: Storage, shape: Shape, dtype: DType) -> Storage:
        """NumPy's ``a @ b`` (1-d operands promoted, batch dimensions broadcast)."""

    def transpose(self, a: Storage, axes: Axes) -> Storage:
        """``a`` with its dimensions permuted by ``axes`` (a view where possible)."""

    def concatenate(self, arrays: list[Storage], axis: int, dtype: DType) -> Storage:
        """The ``arrays`` (all of ``dtype``) joined along ``axis``."""

    def getitem(
        self,
        a: Storage,
        index: tuple[Any, ...],
        mesh: tuple[Any, ...] | None,
        shape: Shape,
        dtype: DType,
    ) -> Storage:
        """``a[index]`` with NumPy semantics (``mesh``: per-dimension index arrays where the
        backend's advanced indexing differs from NumPy's)."""

    def setitem(
        self,
        a: Storage,
        index: tuple[Any, ...],
        mesh: tuple[Any, ...] | None,
        value: Storage,
        shape: Shape,
        dtype: DType,
    ) -> Storage:
        """A new storage equal to ``a`` (of ``shape``) with ``value`` (broadcastable to
        ``a[index]``'s shape) assigned at ``index``, as getitem reads it; ``a`` is not
        written. Callers pass an index that selects each position at most once."""

    def getitem_backward(
        self,
        g: Storage,
        index: tuple[Any, ...],
        mesh: tuple[Any, ...] | None,
        shape: Shape,
        dtype: DType,
    ) -> Storage:
        """Zeros of ``shape`` with ``g`` added at ``index`` (repeated indices accumulate)."""

    def check_indices(self, index: Storage, low: int, high: int) -> int:
        """The position (row-major) of the first value of the integer ``index`` outside
        ``[low, high)``, or -1 where every value lies inside: the bounds check of
        ``embedding``, a primitive so that a compiled step runs it again at every replay."""

    def embedding(self, x: Storage, index: Storage, axis: int, shape: Shape,
                  dtype: DType) -> Storage:  # fmt: skip
        """The slices of ``x`` along ``axis`` at the positions of the integer ``index`` (any
        shape, checked by :meth:`check_indices`; negative values from the end):
        ``x.shape[:axis] + index.shape + x.shape[axis + 1:]``, NumPy's ``take``."""

    def embedding_backward(self, g: Storage, index: Storage, axis: int,
                           padding_idx: int | None, shape: Shape,
                           dtype: DType) -> Storage:  # fmt: skip
        """Zeros of ``shape`` (the gathered array's) with the slices of ``g`` (of
        ``embedding``'s output shape) added along ``axis`` at ``index`` - repeated positions
        accumulate - except at position ``padding_idx`` (None: none), which gets nothing."""
