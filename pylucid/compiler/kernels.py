"""Compiled helpers of replays, cached on disk with the package's kernels. (Products are
:func:`pylucid.kernels.blas.product`: eager's BLAS call, cached like these.)

- :func:`run_tape`: the loop of a tape (:mod:`pylucid.compiler.tape`): each row of a
  2-d ``int64`` array begins with the address of a compiled kernel, which it calls with
  the row's address (the kernel reads its arrays' addresses and strides from the row).
  One function, compiled once, runs every graph.
- :func:`to_pointer` and :func:`call_kernel`: the two LLVM intrinsics that this takes (an
  integer address as a typed pointer; a call through a function's address).
"""

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from pylucid.kernels.jit import njit


@intrinsic
def to_pointer(typingctx, address, like):  # noqa: ANN001, ANN201, ARG001
    """``address`` (an integer) as a pointer to numbers of ``like``'s type."""
    signature = types.CPointer(like)(address, like)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return signature, codegen


@intrinsic
def call_kernel(typingctx, function, argument):  # noqa: ANN001, ANN201, ARG001
    """Call the C function ``void f(int64)`` at address ``function`` with ``argument``."""
    signature = types.void(function, argument)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        kernel_type = ir.FunctionType(ir.VoidType(), [ir.IntType(64)])
        kernel = builder.inttoptr(args[0], kernel_type.as_pointer())
        builder.call(kernel, [context.cast(builder, args[1], sig.args[1], types.int64)])
        return context.get_dummy_value()

    return signature, codegen


@njit(cache=True, nogil=True)
def run_tape(rows):  # noqa: ANN001, ANN201
    """Call each row's kernel (its first entry) with the row's address."""
    start = rows.ctypes.data
    width = rows.shape[1] * 8
    for r in range(rows.shape[0]):
        call_kernel(rows[r, 0], start + r * width)
    return 0
