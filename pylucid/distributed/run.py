"""One rank of a job: ``python -m pylucid.distributed.run (SCRIPT | -m MODULE) [ARGS]``, what
:mod:`pylucid.distributed.launch` starts on every rank (as ``python SCRIPT ARGS`` would run
it, ``sys.argv`` and ``sys.path[0]`` included).

Around the script it

- reports to the launcher (:mod:`pylucid.distributed.monitor`, when the launcher passed its
  address): that the rank started, and how its script ended (the exit status, and the
  exception of a failure); a process that ends without that report (``os._exit``, a
  signal, a crash) is one the launcher counts as failed, whatever its status;
- sets PyTorch's launcher variables ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
  ``LOCAL_WORLD_SIZE`` from the MPI launcher's (where not set already), as ``torchrun`` sets
  them, so a program's ``ddp = int(os.environ.get("RANK", -1)) != -1`` finds the job;
- ends the whole job when the script fails (an uncaught exception: status 1, or 130 for
  KeyboardInterrupt; a non-zero ``sys.exit``): ``MPI_Abort`` when MPI is initialized, so
  that no rank waits for this one in a collective (an exiting MPI rank would otherwise wait
  in ``MPI_Finalize`` while the others wait in their collective, for ever).

A script that ends normally exits 0; its process group tells the other ranks that it left
(see :mod:`pylucid.distributed.groups`) and MPI is finalized at interpreter exit.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence

from pylucid.distributed import monitor

__all__ = ["main"]

_USAGE = "usage: python -m pylucid.distributed.run (SCRIPT | -m MODULE) [ARGS]"


#: PyTorch's launcher variables and, for each, the MPI launchers' (MPICH's hydra, Open MPI).
_TORCH_VARIABLES = {
    "RANK": ("PMI_RANK", "OMPI_COMM_WORLD_RANK"),
    "WORLD_SIZE": ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"),
    "LOCAL_RANK": ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK"),
    "LOCAL_WORLD_SIZE": ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"),
}


def torch_launcher_variables(environment: dict[str, str]) -> dict[str, str]:
    """PyTorch's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` as the MPI
    launcher's variables in ``environment`` give them (those already set are kept)."""
    found = {}
    for name, sources in _TORCH_VARIABLES.items():
        value = next((environment[s] for s in sources if environment.get(s, "").isdigit()), None)
        if name not in environment and value is not None:
            found[name] = value
    return found


def _run(args: list[str]) -> None:
    """Run the program of ``args`` as ``__main__``, as the interpreter would."""
    sys.argv[:] = args
    if args[0] == "-m":
        del sys.argv[0]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def _exit_status(code: object) -> int:
    """The process status of ``sys.exit(code)`` (a non-int is printed, as Python does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _end_job(status: int) -> None:
    """End this rank with ``status``, and the whole job when MPI runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(status)
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the program of ``argv`` (default ``sys.argv[1:]``) as one rank; return 0 when it
    ends normally (a failure ends the job instead, see the module's notes).

    Parameters
    ----------
    argv : sequence of str, optional
        ``SCRIPT ARGS`` or ``-m MODULE ARGS``.

    Returns
    -------
    int
        0; 2 for a usage error.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args == ["-m"]:
        print(_USAGE, file=sys.stderr)
        return 2
    monitor.connect()
    os.environ.update(torch_launcher_variables(dict(os.environ)))
    try:
        _run(args)
    except SystemExit as exc:
        status = _exit_status(exc.code)
        monitor.report_exit(status, f"sys.exit({exc.code!r})" if status else "")
        if status:
            _end_job(status)
    except BaseException as exc:
        status = 130 if isinstance(exc, KeyboardInterrupt) else 1
        monitor.report_exit(status, f"{type(exc).__name__}: {exc}")
        sys.excepthook(type(exc), exc, exc.__traceback__)  # (pylucid.distributed's hook aborts)
        _end_job(status)
    else:
        monitor.report_exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
