"""log2 on AVX-512 vectors, float32 (16 lanes) and float64 (8 lanes): ~2-3x NumPy's SVML.

The generic loops of :func:`pylucid.kernels.simd_math.log2` compute with a division (float32
in float64) and LLVM vectorises them on 256-bit registers (its tuning for these CPUs
prefers them): ~2.5 cycles per float32 element, ~7 per float64 one. These kernels are
written directly as LLVM vector IR inside Numba intrinsics - LLVM keeps explicit 512-bit
vectors in zmm registers - with their 16-entry lookup tables held in registers (``vpermps``;
``vpermt2pd``, two registers, for float64) instead of gathered from memory, and no division.
Per thread they run at about the speed of NumPy's SVML ``log2`` for float32 and 1.6x it for
float64, with maximum errors of 0.5246 ULP over all 2**31 positive float32 inputs (14 107 of
them not correctly rounded; NumPy's float32 log2 is off by up to 2.1 ULP, PyTorch's by 0.53)
and 0.5241 ULP over 8.1e7 float64 samples (``benchmarks/ulp_exhaustive.py --funcs
log2_avx512``).

The algorithm, per lane, for a positive normal ``x`` with bit pattern ``ix`` (``p`` = 23 or
52 fraction bits):

1. ``t = ix - OFFSET``; ``j = t >> (p - 4)`` (arithmetic) is ``16 k + i``: the exponent ``k``
   and a 4-bit table index ``i``; ``m = bits(ix - (t & EXPONENT_MASK))`` lies in [0.734,
   1.469), ``x = 2**k m``, and interval ``i`` of that range holds the ``m`` with index ``i``.
2. ``r = fma(m, INV_C[i], -1)`` is exact: each ``INV_C`` has at most 6 fraction bits (checked
   against every ``m`` of its interval by the table builder); the interval holding 1.0 has
   ``INV_C = 1`` and ``log2 c = 0``. ``|r| <= 0.0342``.
3. ``s = fma(j, 1/16, T[i])`` is ``k + log2(c)`` rounded to a multiple of 2**-16 (float32) or
   2**-41 (float64), exactly (``T[i] = T_HI[i] - i/16``); ``T_LO[i]`` is the rest of log2 c.
4. ``hi = fma(r, L_HI, s)`` and its exact error ``e = fma(r, L_HI, s - hi)`` (``L_HI + L_LO``
   is 1/ln 2); the tail ``lo = r (r Q(r) + L_LO) + (e + T_LO[i])`` with ``Q`` a fit of
   ``(log2(1 + r) - r / ln 2) / r**2`` (degree 4 for float32, 8 for float64); the result is
   ``hi + lo``, rounded once.

The kernels run in chunks of :data:`CHUNK` elements, prefetching their input ahead and, for
outputs larger than the caches (:data:`STREAMING_BYTES`), writing with streaming stores: at
6.4e7 elements they move data at 87-94% of the machine's copy bandwidth. The fast path
assumes positive normal finite inputs and keeps the signed minimum and maximum of the
chunk's bit patterns; a chunk that held a zero, subnormal, negative, infinity or NaN is
computed again by the careful path, which scales subnormals by 2**p and selects the IEEE
special values (log2(+-0) = -inf, log2(x < 0) = nan, log2(inf) = inf, nan stays nan). The
elements after the last full vector go through the generic scalar function.

:data:`AVAILABLE` says whether Numba compiles for a CPU with AVX-512F and AVX-512DQ; the numba
backend uses these kernels only then (the generic loops everywhere else). The tables are
built and the polynomials fitted by ``benchmarks/log2_avx512_tables.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic, overload

from pylucid import memory
from pylucid.kernels import simd_math
from pylucid.kernels.jit import njit
from pylucid.kernels.loops import ElementwiseKernel
from pylucid.kernels.parallel import parallel_threshold

__all__ = [
    "AVAILABLE",
    "CHUNK",
    "FLOAT32",
    "FLOAT64",
    "PARALLEL_THRESHOLD_LOG2",
    "Log2Kernel",
    "log2",
]

#: Elements per chunk: the unit of the parallel loop and of the special-value check.
CHUNK = 4096
#: Outputs of at least this many bytes (64 MiB) are written with streaming (non-temporal)
#: stores: no read of each output line before it is written, and no eviction of the input
#: by an output that would not fit the caches anyway. Measured with the prefetch below, as
#: a fraction of the 2-thread copy bandwidth: float32 6.4e7 92% (normal stores 63%), 3e7
#: 91% (68%); float64 6.4e7 94% (60%), 1e7 108% (82%); float32 1e7 (40 MB) gains nothing
#: (122% either way: its data stays in the caches, where a next op will find the output).
STREAMING_BYTES = 1 << 26
#: The fast path prefetches the input this many elements ahead into every cache level
#: (``prefetcht0``; ``prefetchnta`` halved the throughput): float32 6.4e7 with streaming
#: stores 67% -> 92% of the copy bandwidth; 256, 1024 and 4096 measured alike.
PREFETCH_AHEAD = 256
#: 1 / c of the 16 intervals of the reduced argument, with at most 6 fraction bits; the same
#: for both formats.
INV_C = (
    1.34375, 1.28125, 1.21875, 1.1875, 1.15625, 1.09375, 1.0625, 1.03125,
    1.0, 0.9375, 0.890625, 0.84375, 0.796875, 0.765625, 0.71875, 0.6875,
)  # fmt: skip


@dataclass(frozen=True)
class Format:
    """The constants of one floating-point format's kernel (see the module docstring)."""

    name: str
    lanes: int
    bits: int
    fraction_bits: int
    #: Subtracted from the bit pattern so that 1.0 lies in the middle of interval 8.
    offset: int
    #: log2(1 / INV_C[i]) rounded to a grid that makes ``k + T_HI`` exact, and the rest.
    t_hi: tuple[float, ...]
    t_lo: tuple[float, ...]
    #: 1 / ln 2 as high and low parts in the format.
    l_hi: float
    l_lo: float
    #: Q(r) ~ (log2(1 + r) - r / ln 2) / r**2 on |r| <= 0.0342, lowest degree first.
    q: tuple[float, ...]

    @property
    def min_normal_bits(self) -> int:
        return 1 << self.fraction_bits

    @property
    def inf_bits(self) -> int:
        return ((1 << (self.bits - 1 - self.fraction_bits)) - 1) << self.fraction_bits

    @property
    def t(self) -> tuple[float, ...]:
        """``T_HI[i] - i/16``, exact: what step 3 adds to ``j / 16``."""
        return tuple(hi - i / 16 for i, hi in enumerate(self.t_hi))


FLOAT32 = Format(
    name="float32",
    lanes=16,
    bits=32,
    fraction_bits=23,
    offset=0x3F3C0000,
    t_hi=(
        -0.42626953125, -0.3575592041015625, -0.285400390625, -0.2479248046875,
        -0.2094573974609375, -0.1292877197265625, -0.08746337890625, -0.0443878173828125,
        0.0, 0.093109130859375, 0.1671142578125, 0.2451171875,
        0.32757568359375, 0.385284423828125, 0.4764404296875, 0.5405731201171875,
    ),
    t_lo=(
        4.776547939400189e-06, 7.199483661679551e-06, -1.8282372593603213e-06,
        -2.7087560283689527e-06, 4.0318318497156724e-06, 4.702781552623492e-06,
        5.376559215619636e-07, -6.301975645328639e-06, 0.0, 2.7353209475222684e-07,
        -4.271977104508551e-06, -4.68966345579247e-06, -1.0255652114210534e-06,
        5.732056706619915e-06, -2.3857444375607884e-06, -4.7387543418153655e-06,
    ),
    l_hi=1.4426950216293335,
    l_lo=1.925963033500011e-08,
    q=(
        -0.7213475108146667, 0.48089826107025146, -0.36067354679107666,
        0.2888406217098236, -0.24081875383853912,
    ),
)  # fmt: skip

FLOAT64 = Format(
    name="float64",
    lanes=8,
    bits=64,
    fraction_bits=52,
    offset=0x3FE7800000000000,
    t_hi=(
        -0.4262647547020606, -0.3575520046179008, -0.2854022188621457, -0.24792751344375574,
        -0.20945336562908778, -0.12928301694500988, -0.0874628412502716, -0.04439411935845783,
        0.0, 0.0931094043912708, 0.1671099858353955, 0.2451124978365442,
        0.3275746580284249, 0.3852901558848316, 0.47643804394283507, 0.5405683813628457,
    ),
    t_lo=(
        -3.733907276649932e-14, -1.82872716976671e-13, -1.02668366941445e-13,
        1.7024883460791358e-13, 1.3800246976244608e-13, 4.3421195976986995e-14,
        -6.781363655020842e-14, 4.390985973169353e-15, 0.0, 2.1067041511468125e-13,
        -1.3716669642073087e-13, -1.275189131300513e-14, 7.951818330761124e-14,
        -3.983479855974919e-14, 1.520621696507556e-13, -1.4294083388465032e-13,
    ),
    l_hi=1.4426950408889634,
    l_lo=2.0355273740931033e-17,
    q=(
        -0.7213475204444817, 0.4808983469629792, -0.3606737602218997, 0.2885390082669439,
        -0.2404491756423603, 0.20609901931937505, -0.18033306653826048, 0.16062206191967518,
        -0.1464165895615796,
    ),
)  # fmt: skip

_FORMATS = {types.float32: FLOAT32, types.float64: FLOAT64}
_NUMPY_FORMATS = {np.dtype(np.float32): FLOAT32, np.dtype(np.float64): FLOAT64}


def _target_has(*features: str) -> bool:
    """Whether Numba compiles for a CPU with all ``features`` (its ``NUMBA_CPU_FEATURES``,
    else the host's features when it targets the host)."""
    listed = numba.config.CPU_FEATURES
    if listed is None:
        if numba.config.CPU_NAME not in (None, "host"):
            return False  # a named CPU whose features we cannot read here: stay generic
        listed = llvm_binding.get_host_cpu_features().flatten()
    enabled = set(listed.split(","))
    return all(f"+{feature}" in enabled for feature in features)


#: Whether these kernels can run here (else the generic loops compute log2).
AVAILABLE = _target_has("avx512f", "avx512dq")


class _Vectors:
    """LLVM IR of one format's vectors: constants, FMA, table lookup, min/max, memory."""

    def __init__(self, fmt: Format) -> None:
        self.fmt = fmt
        self.real = ir.FloatType() if fmt.bits == 32 else ir.DoubleType()
        self.int = ir.IntType(fmt.bits)
        self.floats_type = ir.VectorType(self.real, fmt.lanes)
        self.ints_type = ir.VectorType(self.int, fmt.lanes)

    def floats(self, values) -> ir.Constant:
        if not isinstance(values, tuple):
            values = (values,) * self.fmt.lanes
        cast = np.float32 if self.fmt.bits == 32 else np.float64
        return ir.Constant(self.floats_type, [float(cast(v)) for v in values])

    def ints(self, value: int) -> ir.Constant:
        signed = value - (1 << self.fmt.bits) if value >= 1 << (self.fmt.bits - 1) else value
        return ir.Constant(self.ints_type, [signed] * self.fmt.lanes)

    def _call(self, builder, name: str, result, args: list, arg_types: list):
        fnty = ir.FunctionType(result, arg_types)
        return builder.call(builder.module.declare_intrinsic(name, fnty=fnty), args)

    def fma(self, builder, a, b, c):
        vf = self.floats_type
        return self._call(
            builder, f"llvm.fma.v{self.fmt.lanes}f{self.fmt.bits}", vf, [a, b, c], [vf] * 3
        )

    def lookup(self, builder, table: tuple, index):
        """``table[index & 15]`` per lane, from registers."""
        vf, vi = self.floats_type, self.ints_type
        if self.fmt.lanes == 16:  # one register of 16 floats: vpermps
            name = "llvm.x86.avx512.permvar.sf.512"
            return self._call(builder, name, vf, [self.floats(table), index], [vf, vi])
        low, high = self.floats(table[:8]), self.floats(table[8:])  # two registers: vpermt2pd
        name = "llvm.x86.avx512.vpermi2var.pd.512"
        return self._call(builder, name, vf, [low, index, high], [vf, vi, vf])

    def extreme(self, builder, which: str, a, b):
        """Lane-wise signed ``which`` ("smin" or "smax") of two integer vectors."""
        vi = self.ints_type
        name = f"llvm.{which}.v{self.fmt.lanes}i{self.fmt.bits}"
        return self._call(builder, name, vi, [a, b], [vi, vi])

    def at(self, builder, data, index):
        return builder.bitcast(builder.gep(data, [index]), self.floats_type.as_pointer())

    def prefetch(self, builder, data, index) -> None:
        """Prefetch ``data[index]`` for reading into every cache level (``prefetcht0``;
        never faults, so ``index`` may run past the end)."""
        byte_pointer = ir.IntType(8).as_pointer()
        address = builder.bitcast(builder.gep(data, [index]), byte_pointer)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [byte_pointer], fnty)
        read, keep_in_all_levels, data_cache = (ir.Constant(i32, v) for v in (0, 3, 1))
        builder.call(fn, [address, read, keep_in_all_levels, data_cache])

    def any_lane(self, builder, mask):
        as_int = builder.bitcast(mask, ir.IntType(self.fmt.lanes))
        return builder.icmp_unsigned("!=", as_int, ir.Constant(ir.IntType(self.fmt.lanes), 0))


def _log2_normal(v: _Vectors, builder, ix, exponent_adjust=None):
    """log2 of the lanes whose bit patterns ``ix`` are positive normal floats (steps 1-4 of
    the module docstring); ``exponent_adjust`` (times 16) undoes a scaling of the input."""
    fmt = v.fmt
    t = builder.sub(ix, v.ints(fmt.offset))
    j = builder.ashr(t, v.ints(fmt.fraction_bits - 4))
    if exponent_adjust is not None:
        j = builder.sub(j, exponent_adjust)
    exponent_mask = ((1 << fmt.bits) - 1) ^ ((1 << fmt.fraction_bits) - 1)
    m = builder.bitcast(builder.sub(ix, builder.and_(t, v.ints(exponent_mask))), v.floats_type)
    r = v.fma(builder, m, v.lookup(builder, INV_C, j), v.floats(-1.0))
    s = v.fma(
        builder, builder.sitofp(j, v.floats_type), v.floats(1 / 16), v.lookup(builder, fmt.t, j)
    )
    hi = v.fma(builder, r, v.floats(fmt.l_hi), s)
    error = v.fma(builder, r, v.floats(fmt.l_hi), builder.fsub(s, hi))
    q = v.floats(fmt.q[-1])
    for coefficient in reversed(fmt.q[:-1]):
        q = v.fma(builder, q, r, v.floats(coefficient))
    tail = v.fma(builder, r, q, v.floats(fmt.l_lo))
    lo = v.fma(builder, r, tail, builder.fadd(error, v.lookup(builder, fmt.t_lo, j)))
    return builder.fadd(hi, lo)


def _format_of(x, out) -> Format | None:
    """The format of a pair of 1-d C arrays of one float dtype, the output writable, else
    None (no typing). The input may be read-only: its type then differs from the output's
    only by mutability, so the two are compared field by field, not as types."""
    arrays = isinstance(x, types.Array) and isinstance(out, types.Array)
    if not (arrays and out.mutable and x.dtype == out.dtype):
        return None
    if not (x.ndim == out.ndim == 1 and x.layout == out.layout == "C"):
        return None
    return _FORMATS.get(x.dtype)


def _data(context, builder, array_type, array):
    return context.make_array(array_type)(context, builder, array).data


@intrinsic
def _fast_blocks(typingctx, x, out, start, blocks, streaming):  # noqa: ARG001  (intrinsic)
    """``out[start : start + lanes * blocks] = log2(x[...])`` for positive normal finite
    inputs; returns whether any input was not one (then the caller redoes the blocks).

    ``streaming`` (a literal bool): write with non-temporal stores, which bypass the caches
    and skip reading each output line before writing it; ``out + start`` must then be
    64-byte aligned."""
    fmt = _format_of(x, out)
    if fmt is None or not isinstance(streaming, types.BooleanLiteral):
        return None
    streams = streaming.literal_value
    sig = types.boolean(x, out, types.intp, types.intp, streaming)

    def codegen(context, builder, signature, args):
        v = _Vectors(fmt)
        x_data = _data(context, builder, signature.args[0], args[0])
        out_data = _data(context, builder, signature.args[1], args[1])
        start, blocks = args[2], args[3]
        low = cgutils.alloca_once_value(builder, v.ints((1 << (fmt.bits - 1)) - 1))
        high = cgutils.alloca_once_value(builder, v.ints(0))
        lanes = ir.Constant(start.type, fmt.lanes)
        with cgutils.for_range(builder, blocks) as loop:
            i = builder.add(start, builder.mul(loop.index, lanes))
            ix = builder.bitcast(builder.load(v.at(builder, x_data, i), align=4), v.ints_type)
            v.prefetch(builder, x_data, builder.add(i, ir.Constant(i.type, PREFETCH_AHEAD)))
            builder.store(v.extreme(builder, "smin", builder.load(low), ix), low)
            builder.store(v.extreme(builder, "smax", builder.load(high), ix), high)
            y = _log2_normal(v, builder, ix)
            store = builder.store(y, v.at(builder, out_data, i), align=64 if streams else 4)
            if streams:
                one = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
                store.set_metadata("nontemporal", one)
        if streams:  # order the streaming stores before anything the caller writes next
            fence = ir.FunctionType(ir.VoidType(), [])
            builder.call(builder.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=fence), [])
        below = builder.icmp_signed("<", builder.load(low), v.ints(fmt.min_normal_bits))
        above = builder.icmp_signed(">=", builder.load(high), v.ints(fmt.inf_bits))
        return builder.or_(v.any_lane(builder, below), v.any_lane(builder, above))

    return sig, codegen


@intrinsic
def _careful_block(typingctx, x, out, i):  # noqa: ARG001
    """``out[i : i + lanes] = log2(x[i : i + lanes])`` for any inputs."""
    fmt = _format_of(x, out)
    if fmt is None:
        return None
    sig = types.none(x, out, types.intp)

    def codegen(context, builder, signature, args):
        v = _Vectors(fmt)
        x_data = _data(context, builder, signature.args[0], args[0])
        out_data = _data(context, builder, signature.args[1], args[1])
        x_vector = builder.load(v.at(builder, x_data, args[2]), align=4)
        ix = builder.bitcast(x_vector, v.ints_type)
        subnormal = builder.icmp_signed("<", ix, v.ints(fmt.min_normal_bits))  # and 0, x < 0
        scale = v.floats(2.0**fmt.fraction_bits)
        scaled = builder.select(subnormal, builder.fmul(x_vector, scale), x_vector)
        adjust = builder.select(subnormal, v.ints(16 * fmt.fraction_bits), v.ints(0))
        y = _log2_normal(v, builder, builder.bitcast(scaled, v.ints_type), adjust)
        inf_or_nan = builder.icmp_signed(">=", ix, v.ints(fmt.inf_bits))
        y = builder.select(inf_or_nan, builder.fadd(x_vector, x_vector), y)  # quiets a NaN
        zero = v.floats(0.0)
        is_zero = builder.fcmp_ordered("==", x_vector, zero)
        not_positive = builder.select(is_zero, v.floats(-np.inf), v.floats(np.nan))
        y = builder.select(builder.fcmp_ordered(">", x_vector, zero), y, not_positive)
        builder.store(y, v.at(builder, out_data, args[2]), align=4)
        return context.get_dummy_value()

    return sig, codegen


def _lanes(x):
    """Lanes of one vector of ``x``'s dtype (a compile-time constant)."""


@overload(_lanes)
def _lanes_typed(x):
    fmt = _FORMATS.get(getattr(x, "dtype", None))
    if fmt is None:
        return None
    lanes = fmt.lanes
    return lambda x: lanes


_JIT = {"cache": True, "error_model": "numpy", "nogil": True, "boundscheck": False}


def _make_chunk(streaming: bool):
    """The loop over one chunk ``[start, stop)``: the fast path, the careful path if it
    met a special value, the scalar tail. ``streaming``: see :func:`_fast_blocks`."""

    def chunk(x, out, start, stop):
        lanes = _lanes(x)
        blocks = (stop - start) // lanes
        if _fast_blocks(x, out, start, blocks, streaming):
            for b in range(blocks):
                _careful_block(x, out, start + b * lanes)
        for i in range(start + blocks * lanes, stop):
            out[i] = simd_math.log2(x[i])

    return njit(**_JIT)(chunk)


_chunk = _make_chunk(False)
_chunk_streaming = _make_chunk(True)


@njit(**_JIT)
def _serial(x, out):
    for c in range((x.size + CHUNK - 1) // CHUNK):
        _chunk(x, out, c * CHUNK, min(x.size, (c + 1) * CHUNK))


@njit(parallel=True, **_JIT)
def _parallel(x, out):
    for c in numba.prange((x.size + CHUNK - 1) // CHUNK):
        _chunk(x, out, c * CHUNK, min(x.size, (c + 1) * CHUNK))


@njit(parallel=True, **_JIT)
def _parallel_streaming(x, out):
    """:func:`_parallel` with streaming stores; ``out`` must be 64-byte aligned."""
    for c in numba.prange((x.size + CHUNK - 1) // CHUNK):
        _chunk_streaming(x, out, c * CHUNK, min(x.size, (c + 1) * CHUNK))


#: Elements from which log2 runs in parallel (:mod:`pylucid.kernels.parallel`).
PARALLEL_THRESHOLD_LOG2 = parallel_threshold("log2_avx512")


def log2(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``log2`` of a C-contiguous float32 or float64 array into ``out`` (new if None).

    Only where :data:`AVAILABLE`; serial below its parallel threshold (the work of
    :mod:`pylucid.kernels.parallel` at its cost), and with streaming stores from
    :data:`STREAMING_BYTES` of output (after a scalar head that aligns the rest of ``out``
    to 64 bytes).
    """
    result = memory.empty(x.shape, x.dtype) if out is None else out
    if x.ndim == 1:  # already flat: skip the reshapes (a tiny op's main cost here)
        flat_x, flat_out = x, result
    else:
        flat_x, flat_out = x.reshape(-1), result.reshape(-1)
    if x.size < PARALLEL_THRESHOLD_LOG2:
        _serial(flat_x, flat_out)
    elif result.nbytes < STREAMING_BYTES or result.ctypes.data % result.itemsize:
        _parallel(flat_x, flat_out)
    else:
        head = (-result.ctypes.data % 64) // result.itemsize
        _serial(flat_x[:head], flat_out[:head])
        _parallel_streaming(flat_x[head:], flat_out[head:])
    return result


class Log2Kernel:
    """The ``log2`` kernel behind :class:`~pylucid.kernels.loops.ElementwiseKernel`'s call
    interface: float32 and float64 arrays take this module's kernels where
    :data:`AVAILABLE`, every other call (half dtypes, a scalar, no AVX-512) the generic loop."""

    def __init__(self, generic: ElementwiseKernel) -> None:
        self.generic = generic
        self.name = generic.name

    def __call__(
        self,
        x: np.ndarray | np.generic,
        *,
        shape: tuple[int, ...],
        out_dtype: np.dtype,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """``log2(x)`` into a new (or the given) array of ``shape``; ``x`` is C-contiguous."""
        return self.run((x,), shape, out_dtype, out)

    def run(
        self,
        operands: Sequence[np.ndarray | np.generic],
        shape: tuple[int, ...],
        out_dtype: np.dtype,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`__call__` with positional arguments, as ``ElementwiseKernel.run``."""
        (x,) = operands
        if AVAILABLE and type(x) is np.ndarray and x.dtype == out_dtype in _NUMPY_FORMATS:
            return log2(x, out)
        return self.generic.run(operands, shape, out_dtype, out)

    def __repr__(self) -> str:
        return f"Log2Kernel(avx512={AVAILABLE}, generic={self.generic!r})"
