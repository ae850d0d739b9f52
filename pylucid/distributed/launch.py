"""Start a script on N processes: ``python -m pylucid.distributed.launch -n N script.py``.

The launcher writes no transport of its own: with ``--backend mpi`` (the default) it runs
the ``mpiexec`` of the ``mpich`` wheel (found next to ``sys.executable``, else on PATH),
``mpiexec -n N [-f HOSTFILE] python -m pylucid.distributed.run script.py ARGS``; with
``--backend mlx`` it runs MLX's launcher, ``mlx.launch -n N --backend ring [--hostfile
HOSTFILE] python -m pylucid.distributed.run script.py ARGS``. Each rank's
``pylucid.distributed.init()`` then finds the group it was started in.

Each rank runs under :mod:`pylucid.distributed.run`, which reports to the launcher (a
:class:`pylucid.distributed.monitor.Monitor` it listens with) how the rank's script ended.
The launcher exits with the job's status: 0 when every rank finished its script and the
launched command succeeded; otherwise non-zero, naming on stderr each rank that did not
finish and the rank that ended first, with how each ended and which ranks were still
running then. A rank whose process ended without returning from its script (``os._exit``,
a signal, a crash) fails the job even with status 0. The status is a failed rank's (MLX's
launcher itself always exits 0, so its log lines about failed ranks are read), or 1 when
nothing failed with a status of its own; 124 when ``--timeout`` ended the job.
``--print-command`` prints the command line instead of running it (to paste into a
cluster's job script).

Hostfiles differ by backend: MPICH's hydra reads lines ``host:slots`` (``-f``); MLX reads
its JSON hostfile (one rank per host entry; ``-n`` is then ignored by MLX).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from pylucid.distributed.monitor import Monitor

__all__ = [
    "BACKENDS",
    "TIMEOUT_STATUS",
    "LauncherNotFoundError",
    "command",
    "find_mlx_launch",
    "find_mpiexec",
    "launch",
    "main",
]

BACKENDS = ("mpi", "mlx")
#: The exit status when ``timeout`` ended the job (as coreutils' ``timeout``).
TIMEOUT_STATUS = 124
#: Seconds between SIGTERM and SIGKILL when the job is ended.
_GRACE_S = 5.0
#: How MLX's launcher reports a rank that failed (its only report: it exits 0 regardless).
_MLX_FAILURE = re.compile(r"Node with rank (\d+) (?:exited with code (-?\d+)|was killed)")


class LauncherNotFoundError(RuntimeError):
    """The backend's launcher (``mpiexec`` or ``mlx.launch``) is not installed."""


def _next_to_python(name: str) -> str | None:
    """``name`` in the folder of ``sys.executable`` (a virtual environment's ``bin``), or on
    PATH; None when neither has it."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def find_mpiexec() -> str:
    """The path of ``mpiexec``: the ``mpich`` wheel's, next to ``sys.executable``, else the
    first on PATH.

    Raises
    ------
    LauncherNotFoundError
        When there is none, saying how to install it.
    """
    found = _next_to_python("mpiexec")
    if found is None:
        raise LauncherNotFoundError(
            f"launch: no mpiexec next to {sys.executable} or on PATH; "
            f'pip install -e ".[distributed]" brings mpi4py and MPICH\'s mpiexec '
            f"(or load your cluster's MPI)"
        )
    return found


def find_mlx_launch() -> str:
    """The path of MLX's ``mlx.launch``, next to ``sys.executable`` or on PATH.

    Raises
    ------
    LauncherNotFoundError
        When MLX is not installed.
    """
    found = _next_to_python("mlx.launch")
    if found is None:
        raise LauncherNotFoundError(
            f"launch: no mlx.launch next to {sys.executable} or on PATH; "
            f'pip install -e ".[mlx]" brings MLX and its launcher'
        )
    return found


def command(
    script: str,
    args: Sequence[str] = (),
    n: int = 2,
    *,
    backend: str = "mpi",
    hostfile: str | os.PathLike[str] | None = None,
    module: bool = False,
) -> list[str]:
    """The command line that starts ``script`` on ``n`` ranks.

    Parameters
    ----------
    script : str
        The Python file each rank runs (or, with ``module``, the module's name).
    args : sequence of str
        The script's arguments.
    n : int
        The number of ranks (processes).
    backend : {"mpi", "mlx"}
        ``"mpi"``: MPICH's ``mpiexec`` (hydra); ``"mlx"``: MLX's ``mlx.launch`` with its ring
        backend.
    hostfile : path, optional
        The machines: for MPI, hydra's hostfile (lines ``host:slots``, passed as ``-f``); for
        MLX, its JSON hostfile.
    module : bool
        Run ``python -m script`` instead of ``python script``.

    Returns
    -------
    list of str
        The argument vector (``shlex.join`` makes it a shell line).

    Raises
    ------
    ValueError
        For an unknown backend or ``n`` below 1.
    LauncherNotFoundError
        When the backend's launcher is not installed.
    """
    if backend not in BACKENDS:
        raise ValueError(f"launch: backend must be one of {BACKENDS}, got {backend!r}")
    if n < 1:
        raise ValueError(f"launch: the number of processes must be at least 1, got {n}")
    # Each rank runs under pylucid.distributed.run: it reports how the script ended to the
    # launcher, and aborts the job when the script fails (an exception, a non-zero
    # sys.exit): otherwise an MPI rank that exits blocks in MPI_Finalize while the others
    # wait in a collective, for ever.
    ranks = [sys.executable, "-m", "pylucid.distributed.run", *(["-m"] if module else []),
             script, *args]  # fmt: skip
    where = [] if hostfile is None else [os.fspath(hostfile)]
    if backend == "mpi":
        return [find_mpiexec(), "-n", str(n), *(["-f", *where] if where else []), *ranks]
    hosts = ["--hostfile", *where] if where else []
    return [find_mlx_launch(), "-n", str(n), "--backend", "ring", *hosts, *ranks]


def launch(
    script: str,
    args: Sequence[str] = (),
    n: int = 2,
    *,
    backend: str = "mpi",
    hostfile: str | os.PathLike[str] | None = None,
    module: bool = False,
    timeout: float | None = None,
) -> int:
    """Run ``script`` on ``n`` ranks and wait for the job; return its exit status.

    The ranks inherit this process's standard streams and environment (and the address of
    the launcher's monitor, ``PYLUCID_MONITOR``). SIGINT and SIGTERM sent to this process
    (from the main thread's point of view) are passed on to the job. When the job fails,
    what each rank that did not finish did is written to stderr (see the module's notes).

    Parameters
    ----------
    script, args, n, backend, hostfile, module
        As :func:`command`.
    timeout : float, optional
        Seconds the job may run; past them it is ended (SIGTERM, then SIGKILL after 5 s) and
        the status is :data:`TIMEOUT_STATUS`. None: no limit.

    Returns
    -------
    int
        0 when every rank finished its script and the launched command exited 0; else a
        failed rank's status (128 + the signal for a rank killed by one), 1 when there is
        none (a rank that ended with status 0 without finishing), or
        :data:`TIMEOUT_STATUS`.

    Raises
    ------
    FileNotFoundError
        When ``script`` (not a module) or ``hostfile`` does not exist.
    ValueError, LauncherNotFoundError
        As :func:`command`.
    """
    if not module and not Path(script).is_file():
        raise FileNotFoundError(f"launch: no script {script!r}")
    if hostfile is not None and not Path(hostfile).is_file():
        raise FileNotFoundError(f"launch: no hostfile {os.fspath(hostfile)!r}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"launch: timeout must be positive seconds, got {timeout}")
    argv = command(script, args, n, backend=backend, hostfile=hostfile, module=module)
    # (ranks on other machines reach the monitor by this machine's name)
    monitor = Monitor(n, host=None if hostfile is None else socket.getfqdn())
    return _run(argv, timeout, watch_mlx_log=backend == "mlx", monitor=monitor)


def _status(returncode: int) -> int:
    """A process's status as a shell reports it (128 + signal for a killed one)."""
    return 128 - returncode if returncode < 0 else returncode


def _end(process: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the job's process group: ``mpiexec`` or ``mlx.launch`` and the ranks
    it started on this machine (``mpiexec`` passes it on to the other machines' ranks)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _echo_mlx_log(stream: IO[bytes], failures: list[int | None]) -> None:
    """Copy MLX's launcher's stderr to ours, noting every failed rank's status (None for a
    rank it killed, after another had failed)."""
    for line in stream:
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
        found = _MLX_FAILURE.search(line.decode(errors="replace"))
        if found:
            failures.append(None if found[2] is None else _status(int(found[2])))


def _run(argv: list[str], timeout: float | None, watch_mlx_log: bool, monitor: Monitor) -> int:
    """Run the job in a process group of its own (so it can be ended whole), with
    ``monitor`` listening, and wait; report the ranks that did not finish."""
    sys.stdout.flush()
    sys.stderr.flush()
    monitor.start()
    process = subprocess.Popen(
        argv,
        start_new_session=True,
        stderr=subprocess.PIPE if watch_mlx_log else None,
        env={**os.environ, **monitor.environment()},
    )
    failures: list[int | None] = []
    reader = None
    if watch_mlx_log:
        assert process.stderr is not None
        reader = threading.Thread(target=_echo_mlx_log, args=(process.stderr, failures))
        reader.start()
    forwarded = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            forwarded[sig] = signal.signal(sig, lambda signum, _: _end(process, signum))
    try:
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            sys.stderr.write(f"launch: the job ran past {timeout} s; ending it\n")
            _end(process, signal.SIGTERM)
            try:
                process.wait(_GRACE_S)
            except subprocess.TimeoutExpired:
                _end(process, signal.SIGKILL)
                process.wait()
            returncode = None
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
        if reader is not None:
            reader.join()
        monitor.stop()
    if returncode is None:
        return TIMEOUT_STATUS
    status = _status(returncode)
    if failures and returncode == 0:
        status = next((failed for failed in failures if failed is not None), 1)
    status, lines = monitor.verdict(status)
    for line in lines:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pylucid.distributed.launch",
        description="Start a script on N processes: mpiexec -n N python -m "
        "pylucid.distributed.run SCRIPT ARGS (MPICH; the default) or mlx.launch -n N --backend "
        "ring python -m pylucid.distributed.run SCRIPT ARGS (--backend mlx). Exits with the "
        "job's status: 0 when every rank finished its script, else non-zero (a failed rank's "
        "status, or 1), naming the ranks that did not finish; 124 when --timeout ended the job.",
        epilog="Examples: python -m pylucid.distributed.launch -n 2 train.py --epochs 3; "
        "... -n 8 --hostfile hosts train.py (hosts: lines 'host:slots'); "
        "... -n 2 --print-command train.py (print the command line only).",
    )
    parser.add_argument(
        "-n",
        "--nproc",
        type=int,
        default=2,
        metavar="N",
        help="number of processes (ranks); default 2",
    )
    parser.add_argument(
        "--hostfile",
        metavar="FILE",
        help="the machines: MPICH hydra's hostfile (lines 'host:slots', given to mpiexec as "
        "-f) or, with --backend mlx, MLX's JSON hostfile",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="mpi",
        help="mpi: MPICH's mpiexec (the numba backend's MPI; default); mlx: MLX's ring "
        "launcher (the mlx backend's group)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="end the job after S seconds (exit status 124); default: no limit",
    )
    parser.add_argument(
        "--print-command",
        action="store_true",
        help="print the command line instead of running it",
    )
    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE ARGS",
        help="run a module (python -m MODULE ARGS) instead of a script",
    )
    parser.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        metavar="SCRIPT ARGS",
        help="the Python script each rank runs, and its arguments",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: parse ``argv`` (default ``sys.argv[1:]``), launch, return the
    job's status (2 for a usage error)."""
    parser = _parser()
    options = parser.parse_args(argv)
    program = options.module if options.module is not None else options.program
    if not program:
        parser.error("a script to run is required (or -m MODULE)")
    script, *args = program
    module = options.module is not None
    try:
        if options.print_command:
            found = command(
                script,
                args,
                options.nproc,
                backend=options.backend,
                hostfile=options.hostfile,
                module=module,
            )
            print(shlex.join(found))
            return 0
        return launch(
            script,
            args,
            options.nproc,
            backend=options.backend,
            hostfile=options.hostfile,
            module=module,
            timeout=options.timeout,
        )
    except (ValueError, FileNotFoundError, LauncherNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
