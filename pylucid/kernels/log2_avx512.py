"""float32 ``log2`` on 16-lane AVX-512 vectors: 1.8-2.2x NumPy's SVML on 2 threads, <= 0.525 ULP.

The generic loop of :func:`pylucid.kernels.simd_math.log2` is correctly rounded, but it
computes in float64 with a division, and LLVM vectorises it on 256-bit registers (its tuning
for these CPUs prefers them): 4 float64 lanes, ~2.5 cycles per element. This kernel computes
in float32 on 16 lanes of a 512-bit register, written directly as LLVM vector IR inside Numba
intrinsics (LLVM keeps explicit 512-bit vectors in zmm registers), with its lookup table
held in registers (``vpermps``) instead of gathered from memory. It runs at about one cycle
per element per thread - the speed of NumPy's SVML ``log2`` on one thread - with a maximum
error of 0.5246 ULP over all 2**31 positive float32 inputs (``benchmarks/
log2_avx512_exhaustive.py``; 14 098 of them are not correctly rounded, NumPy's float32
log2 is off by up to 2 ULP, PyTorch's by 0.53).

The algorithm, per lane, for a positive normal ``x`` with bit pattern ``ix``:

1. ``t = ix - OFFSET``; ``j = t >> 19`` (arithmetic) is ``16 k + i``: the exponent ``k`` and
   a 4-bit table index ``i``; ``m = bits(ix - (t & 0xFF800000))`` lies in [0.734, 1.469),
   ``x = 2**k m``, and interval ``i`` of that range holds the ``m`` with index ``i``.
2. ``r = fma(m, INV_C[i], -1)`` is exact: each ``INV_C`` has at most 6 fraction bits (checked
   against every ``m`` of its interval by the table builder); the interval holding 1.0 has
   ``INV_C = 1`` and ``log2 c = 0``. ``|r| <= 0.0342``.
3. ``s = fma(j, 1/16, T[i])`` is ``k + log2(c)`` rounded to a multiple of 2**-16, exactly
   (``T[i] = T_HI[i] - i/16``); ``T_LO[i]`` is the rest of ``log2 c``.
4. ``hi = fma(r, L_HI, s)`` and its exact error ``e = fma(r, L_HI, s - hi)`` (``L_HI + L_LO``
   is 1/ln 2); the tail ``lo = r (r Q(r) + L_LO) + (e + T_LO[i])`` with ``Q`` a degree-4
   fit of ``(log2(1 + r) - r / ln 2) / r**2``; the result is ``hi + lo``, rounded once.

The kernel runs in chunks of :data:`CHUNK` elements. The fast path assumes positive normal
finite inputs and keeps the signed minimum and maximum of the chunk's bit patterns; a chunk
that held a zero, subnormal, negative, infinity or NaN is computed again by the careful
path, which scales subnormals by 2**23 and selects the IEEE special values (log2(+-0) =
-inf, log2(x < 0) = nan, log2(inf) = inf, nan stays nan). The last ``n % 16`` elements go
through the generic scalar function.

:data:`AVAILABLE` says whether Numba compiles for a CPU with AVX-512F; the numba backend
uses this kernel for float32 only then (the generic loop everywhere else). The tables are
built and the polynomial fitted by ``benchmarks/log2_avx512_tables.py``.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from pylucid import memory
from pylucid.kernels import simd_math
from pylucid.kernels.loops import PARALLEL_THRESHOLD_HEAVY, ElementwiseKernel

__all__ = ["AVAILABLE", "CHUNK", "Log2Kernel", "log2_float32"]

LANES = 16
#: Elements per chunk: the unit of the parallel loop and of the special-value check.
CHUNK = 4096

#: Subtracted from the bit pattern so that ``t >> 19`` is ``16 k + i`` and 1.0 lies in the
#: middle of interval 8.
OFFSET = 0x3F3C0000
INV_C = (
    1.34375, 1.28125, 1.21875, 1.1875, 1.15625, 1.09375, 1.0625, 1.03125,
    1.0, 0.9375, 0.890625, 0.84375, 0.796875, 0.765625, 0.71875, 0.6875,
)  # fmt: skip
#: log2(1 / INV_C[i]) rounded to a multiple of 2**-16, and the float32 of the rest.
T_HI = (
    -0.42626953125, -0.3575592041015625, -0.285400390625, -0.2479248046875,
    -0.2094573974609375, -0.1292877197265625, -0.08746337890625, -0.0443878173828125,
    0.0, 0.093109130859375, 0.1671142578125, 0.2451171875,
    0.32757568359375, 0.385284423828125, 0.4764404296875, 0.5405731201171875,
)  # fmt: skip
T_LO = (
    4.776547939400189e-06, 7.199483661679551e-06, -1.8282372593603213e-06,
    -2.7087560283689527e-06, 4.0318318497156724e-06, 4.702781552623492e-06,
    5.376559215619636e-07, -6.301975645328639e-06, 0.0, 2.7353209475222684e-07,
    -4.271977104508551e-06, -4.68966345579247e-06, -1.0255652114210534e-06,
    5.732056706619915e-06, -2.3857444375607884e-06, -4.7387543418153655e-06,
)  # fmt: skip
#: 1 / ln 2 as float32 high and low parts.
L_HI = 1.4426950216293335
L_LO = 1.925963033500011e-08
#: Q(r) ~ (log2(1 + r) - r / ln 2) / r**2 on |r| <= 0.0342, lowest degree first.
Q = (
    -0.7213475108146667, 0.48089826107025146, -0.36067354679107666,
    0.2888406217098236, -0.24081875383853912,
)  # fmt: skip

_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_VF = ir.VectorType(_F32, LANES)
_VI = ir.VectorType(_I32, LANES)
_FLOAT32 = np.dtype(np.float32)
_MIN_NORMAL_BITS = 0x00800000
_INF_BITS = 0x7F800000


def _target_has_avx512f() -> bool:
    """Whether Numba compiles for a CPU with AVX-512F (its ``NUMBA_CPU_FEATURES``, else the
    host's features when it targets the host)."""
    features = numba.config.CPU_FEATURES
    if features is None:
        if numba.config.CPU_NAME not in (None, "host"):
            return False  # a named CPU whose features we cannot read here: stay generic
        features = llvm_binding.get_host_cpu_features().flatten()
    return "+avx512f" in features.split(",")


#: Whether this kernel can run here (else the generic loop computes float32 log2).
AVAILABLE = _target_has_avx512f()


def _floats(values) -> ir.Constant:
    if not isinstance(values, tuple):
        values = (values,) * LANES
    return ir.Constant(_VF, [float(np.float32(v)) for v in values])


def _ints(value: int) -> ir.Constant:
    return ir.Constant(_VI, [int(np.uint32(value).view(np.int32))] * LANES)


def _call(builder, name: str, vector: ir.VectorType, args: list, arg_types=None):
    fnty = ir.FunctionType(vector, arg_types or [vector] * len(args))
    return builder.call(builder.module.declare_intrinsic(name, fnty=fnty), args)


def _fma(builder, a, b, c):
    return _call(builder, "llvm.fma.v16f32", _VF, [a, b, c])


def _lookup(builder, table: tuple, index):
    """``table[index & 15]`` per lane, from a register (``vpermps``)."""
    permute = "llvm.x86.avx512.permvar.sf.512"
    return _call(builder, permute, _VF, [_floats(table), index], [_VF, _VI])


def _log2_normal(builder, ix, exponent_adjust=None):
    """log2 of the lanes whose bit patterns ``ix`` are positive normal floats (steps 1-4 of
    the module docstring); ``exponent_adjust`` (times 16) undoes a scaling of the input."""
    t = builder.sub(ix, _ints(OFFSET))
    j = builder.ashr(t, _ints(19))
    if exponent_adjust is not None:
        j = builder.sub(j, exponent_adjust)
    m = builder.bitcast(builder.sub(ix, builder.and_(t, _ints(0xFF800000))), _VF)
    r = _fma(builder, m, _lookup(builder, INV_C, j), _floats(-1.0))
    t_hi = tuple(float(np.float32(v - i / 16)) for i, v in enumerate(T_HI))
    s = _fma(builder, builder.sitofp(j, _VF), _floats(1 / 16), _lookup(builder, t_hi, j))
    hi = _fma(builder, r, _floats(L_HI), s)
    error = _fma(builder, r, _floats(L_HI), builder.fsub(s, hi))
    q = _floats(Q[-1])
    for coefficient in reversed(Q[:-1]):
        q = _fma(builder, q, r, _floats(coefficient))
    tail = _fma(builder, r, q, _floats(L_LO))
    lo = _fma(builder, r, tail, builder.fadd(error, _lookup(builder, T_LO, j)))
    return builder.fadd(hi, lo)


def _vector_at(builder, data, index):
    return builder.bitcast(builder.gep(data, [index]), _VF.as_pointer())


def _data(context, builder, array_type, array):
    return context.make_array(array_type)(context, builder, array).data


def _any_lane(builder, mask):
    as_int = builder.bitcast(mask, ir.IntType(LANES))
    return builder.icmp_unsigned("!=", as_int, ir.Constant(ir.IntType(LANES), 0))


_F32_ARRAY = types.Array(types.float32, 1, "C")


@intrinsic
def _fast_blocks(typingctx, x, out, start, blocks):  # noqa: ARG001  (numba intrinsic protocol)
    """``out[start : start + 16 blocks] = log2(x[...])`` for positive normal finite inputs;
    returns whether any input was not one (then the caller redoes the blocks)."""
    if x != _F32_ARRAY or out != _F32_ARRAY:
        return None
    sig = types.boolean(x, out, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        x_data = _data(context, builder, signature.args[0], args[0])
        out_data = _data(context, builder, signature.args[1], args[1])
        start, blocks = args[2], args[3]
        low = cgutils.alloca_once_value(builder, _ints(0x7FFFFFFF))
        high = cgutils.alloca_once_value(builder, _ints(0))
        with cgutils.for_range(builder, blocks) as loop:
            i = builder.add(start, builder.mul(loop.index, ir.Constant(loop.index.type, LANES)))
            ix = builder.bitcast(builder.load(_vector_at(builder, x_data, i), align=4), _VI)
            builder.store(_call(builder, "llvm.smin.v16i32", _VI, [builder.load(low), ix]), low)
            builder.store(_call(builder, "llvm.smax.v16i32", _VI, [builder.load(high), ix]), high)
            builder.store(_log2_normal(builder, ix), _vector_at(builder, out_data, i), align=4)
        below = builder.icmp_signed("<", builder.load(low), _ints(_MIN_NORMAL_BITS))
        above = builder.icmp_signed(">=", builder.load(high), _ints(_INF_BITS))
        return builder.or_(_any_lane(builder, below), _any_lane(builder, above))

    return sig, codegen


@intrinsic
def _careful_block(typingctx, x, out, i):  # noqa: ARG001
    """``out[i : i + 16] = log2(x[i : i + 16])`` for any inputs."""
    if x != _F32_ARRAY or out != _F32_ARRAY:
        return None
    sig = types.none(x, out, types.intp)

    def codegen(context, builder, signature, args):
        x_data = _data(context, builder, signature.args[0], args[0])
        out_data = _data(context, builder, signature.args[1], args[1])
        v = builder.load(_vector_at(builder, x_data, args[2]), align=4)
        ix = builder.bitcast(v, _VI)
        subnormal = builder.icmp_signed("<", ix, _ints(_MIN_NORMAL_BITS))  # and zeros, negatives
        scaled = builder.select(subnormal, builder.fmul(v, _floats(2.0**23)), v)
        adjust = builder.select(subnormal, _ints(23 * 16), _ints(0))
        y = _log2_normal(builder, builder.bitcast(scaled, _VI), adjust)
        y = builder.select(builder.icmp_signed(">=", ix, _ints(_INF_BITS)), v, y)  # inf, nan
        zero = _floats(0.0)
        not_positive = builder.select(
            builder.fcmp_ordered("==", v, zero), _floats(-np.inf), _floats(np.nan)
        )
        y = builder.select(builder.fcmp_ordered(">", v, zero), y, not_positive)
        builder.store(y, _vector_at(builder, out_data, args[2]), align=4)
        return context.get_dummy_value()

    return sig, codegen


_JIT = {"cache": True, "error_model": "numpy", "nogil": True, "boundscheck": False}


@numba.njit(**_JIT)
def _chunk(x, out, start, stop):
    blocks = (stop - start) // LANES
    if _fast_blocks(x, out, start, blocks):
        for b in range(blocks):
            _careful_block(x, out, start + b * LANES)
    for i in range(start + blocks * LANES, stop):
        out[i] = simd_math.log2(x[i])


@numba.njit(**_JIT)
def _serial(x, out):
    for c in range((x.size + CHUNK - 1) // CHUNK):
        _chunk(x, out, c * CHUNK, min(x.size, (c + 1) * CHUNK))


@numba.njit(parallel=True, **_JIT)
def _parallel(x, out):
    for c in numba.prange((x.size + CHUNK - 1) // CHUNK):
        _chunk(x, out, c * CHUNK, min(x.size, (c + 1) * CHUNK))


def log2_float32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``log2`` of a C-contiguous float32 array into ``out`` (new if None, same shape).

    Only where :data:`AVAILABLE`; serial below ``PARALLEL_THRESHOLD_HEAVY`` elements.
    """
    if out is None:
        out = memory.empty(x.shape, np.float32)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    if x.size >= PARALLEL_THRESHOLD_HEAVY:
        _parallel(flat_x, flat_out)
    else:
        _serial(flat_x, flat_out)
    return out


class Log2Kernel:
    """The float32 ``log2`` kernel behind :class:`~pylucid.kernels.loops.ElementwiseKernel`'s
    call interface: float32 arrays take this module's kernel where :data:`AVAILABLE`, every
    other call (float64, half dtypes, a scalar, no AVX-512) the generic loop."""

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
        if AVAILABLE and type(x) is np.ndarray and x.dtype == _FLOAT32 and out_dtype == _FLOAT32:
            return log2_float32(x, out)
        return self.generic(x, shape=shape, out_dtype=out_dtype, out=out)

    def __repr__(self) -> str:
        return f"Log2Kernel(avx512={AVAILABLE}, generic={self.generic!r})"
