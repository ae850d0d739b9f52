"""How the launcher learns how each rank ended.

The launcher (:mod:`pylucid.distributed.launch`) listens on a TCP socket (:class:`Monitor`)
and passes its address to the ranks in ``PYLUCID_MONITOR``; each rank's runner
(:mod:`pylucid.distributed.run`) connects when it starts (:func:`connect`), says so when
the process leaves its process group (:func:`report_left`), and when its script ends, with
the exit status (:func:`report_exit`). The connection stays open until the process ends,
however it ends: a rank whose connection closes without an exit report ended without
returning from its script (``os._exit``, a signal, a crash), whatever status its process
had. The launcher tells from these reports whether every rank finished, which rank ended
first and which ranks were still running then (:meth:`Monitor.verdict`).

The protocol is lines of text: ``hello TOKEN RANK PID HOST``, then ``left``, ``exit
STATUS TIME REASON`` (``TIME``: the rank's ``time.time()``, which orders the ends; a
connection that closes without it ends when the launcher reads its end).
"""

from __future__ import annotations

import math
import os
import secrets
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

__all__ = ["ENVIRONMENT", "Monitor", "connect", "report_exit", "report_left"]

#: The environment variable that gives the ranks the launcher's ``HOST:PORT:TOKEN``.
ENVIRONMENT = "PYLUCID_MONITOR"
#: Where a launcher puts a rank's number (MPICH's hydra, Open MPI, PMIx, mlx.launch).
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MLX_RANK")
_CONNECT_S = 10.0
_REASON_CHARACTERS = 2000

_CONNECTION: socket.socket | None = None


def _rank_from_environment() -> int | None:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _forget_in_child() -> None:
    """A forked child (a data loader's worker) must not hold the rank's connection open."""
    global _CONNECTION
    if _CONNECTION is not None:
        _CONNECTION.close()
        _CONNECTION = None


def connect() -> None:
    """Connect this rank to the launcher named by ``PYLUCID_MONITOR`` (nothing without it;
    a warning, and no reports, when the launcher cannot be reached)."""
    global _CONNECTION
    address, rank = os.environ.get(ENVIRONMENT), _rank_from_environment()
    if not address or rank is None or _CONNECTION is not None:
        return
    host, port, token = address.rsplit(":", 2)
    try:
        connection = socket.create_connection((host, int(port)), timeout=_CONNECT_S)
        connection.settimeout(_CONNECT_S)
        hostname = socket.gethostname() or "?"
        connection.sendall(f"hello {token} {rank} {os.getpid()} {hostname}\n".encode())
    except (OSError, ValueError) as exc:
        sys.stderr.write(
            f"pylucid.distributed: rank {rank} cannot reach the launcher at {host}:{port} "
            f"({exc}); it will not know how this rank ends\n"
        )
        return
    _CONNECTION = connection
    os.register_at_fork(after_in_child=_forget_in_child)


def _send(line: str) -> None:
    global _CONNECTION
    if _CONNECTION is None:
        return
    try:
        _CONNECTION.sendall(line.encode(errors="replace"))
    except OSError:
        _CONNECTION.close()
        _CONNECTION = None


def report_left() -> None:
    """This process has left its process group (``destroy()``)."""
    _send("left\n")


def report_exit(status: int, reason: str = "") -> None:
    """This rank's script has ended with exit ``status`` (``reason``: why, for a failure)."""
    text = " ".join(reason.split())[:_REASON_CHARACTERS]
    _send(f"exit {status} {time.time():.6f} {text}\n")


@dataclass
class _Rank:
    """What the launcher knows of one rank."""

    rank: int
    pid: int
    host: str
    left: bool = False
    status: int | None = None  # the reported exit status; None: ended without a report
    reason: str = ""
    ended: float | None = None  # when: its report's time, or when its connection closed
    running_then: list[int] = field(default_factory=list)  # the ranks that ended later

    @property
    def finished(self) -> bool:
        """Whether its script returned with status 0, or it left its group before its
        process ended."""
        return self.status == 0 or (self.status is None and self.left)

    def describe(self, job_status: int, first: bool) -> str:
        """How it ended (``first``: no rank's end was seen before), and who still ran."""
        who = f"rank {self.rank} (pid {self.pid} on {self.host})"
        if self.ended is None:
            return f"{who}: the launcher did not see it end"
        if self.status == 0:
            how = "finished its script (exit status 0)"
        elif self.status is not None:
            how = f"exited with status {self.status}"
        elif self.left:
            how = "ended after leaving its process group, without returning from its script"
        elif first:
            how = (f"ended without returning from its script (os._exit, a signal or a crash; "
                   f"the job's exit status: {job_status})")  # fmt: skip
        else:
            how = "ended without returning from its script (ended with the job, or crashed)"
        others = self.running_then
        if len(others) == 1:
            how += f", while rank {others[0]} was still running"
        elif others:
            how += f", while ranks {_list(others)} were still running"
        return f"{who} {how}" + (f": {self.reason}" if self.status and self.reason else "")


def _list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


class Monitor:
    """The launcher's end: accepts the ranks' connections and records their reports, on a
    daemon thread, from :meth:`start` to :meth:`stop`.

    Parameters
    ----------
    ranks : int
        The number of ranks the job starts.
    host : str, optional
        The address to listen on and give the ranks: None for ``127.0.0.1`` (ranks on
        this machine); a host name to listen on every interface (ranks on other machines).
    """

    def __init__(self, ranks: int, host: str | None = None) -> None:
        self.size = ranks
        self._server = socket.create_server(("127.0.0.1" if host is None else "", 0))
        self._address = f"{host or '127.0.0.1'}:{self._server.getsockname()[1]}"
        self._token = secrets.token_hex(16)
        self._ranks: dict[int, _Rank] = {}
        self._changed = threading.Condition()
        self._stopping = False
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="pylucid.distributed.launch monitor")  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The variables that lead the ranks' runners to this monitor."""
        return {ENVIRONMENT: f"{self._address}:{self._token}"}

    def start(self) -> None:
        """Listen, on a daemon thread."""
        self._thread.start()

    def stop(self, wait_s: float = 2.0) -> None:
        """Wait up to ``wait_s`` for every connected rank's end to be seen (the job has
        ended: the connections are closing), then stop listening."""
        deadline = time.monotonic() + wait_s
        with self._changed:
            while any(r.ended is None for r in self._ranks.values()):
                left = deadline - time.monotonic()
                if left <= 0 or not self._changed.wait(left):
                    break
            self._stopping = True
        self._wake_write.send(b"x")
        self._thread.join()
        for end in (self._server, self._wake_read, self._wake_write):
            end.close()

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._server, selectors.EVENT_READ, None)
        selector.register(self._wake_read, selectors.EVENT_READ, None)
        pending: dict[socket.socket, bytes] = {}
        owner: dict[socket.socket, _Rank | None] = {}
        while not self._stopping:
            for key, _ in selector.select():  # (epoll: in the order they became ready)
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_read:
                    continue
                if sock is self._server:
                    connection, _ = self._server.accept()
                    selector.register(connection, selectors.EVENT_READ, None)
                    pending[connection], owner[connection] = b"", None
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                *lines, pending[sock] = (pending[sock] + data).split(b"\n")
                for line in lines:
                    owner[sock] = self._read(line.decode(errors="replace"), owner[sock])
                if not data:
                    selector.unregister(sock)
                    sock.close()
                    del pending[sock]
                    record = owner.pop(sock)
                    if record is not None and record.ended is None:
                        with self._changed:
                            record.ended = time.time()
            with self._changed:
                self._changed.notify_all()
        for sock in owner:
            sock.close()
        selector.close()

    def _read(self, line: str, record: _Rank | None) -> _Rank | None:
        """Apply one report; the rank of the connection (None until its hello)."""
        word, _, rest = line.partition(" ")
        if record is None:
            fields = rest.split()
            if word != "hello" or len(fields) != 4 or fields[0] != self._token:
                return None
            try:
                record = _Rank(int(fields[1]), int(fields[2]), fields[3])
            except ValueError:
                return None
            with self._changed:
                self._ranks[record.rank] = record
        elif word == "left":
            record.left = True
        elif word == "exit" and record.ended is None:
            status, when, reason = (rest.split(" ", 2) + ["", ""])[:3]
            record.status = int(status) if status.lstrip("-").isdigit() else 1
            record.reason = reason
            try:
                record.ended = float(when)
            except ValueError:
                record.ended = time.time()
        return record

    def verdict(self, job_status: int) -> tuple[int, list[str]]:
        """The job's exit status and what to print about its ranks, after :meth:`stop`.

        A job succeeds when the launched command's status (``job_status``) is 0 and every
        rank that reached the monitor finished (:attr:`_Rank.finished`); otherwise its
        status is ``job_status``, or 1 when that is 0, and the lines name, in the order
        they ended, the rank(s) that ended first and every rank that did not finish, each
        with how it ended and which ranks were still running then.
        """
        ranks = sorted(self._ranks.values(), key=lambda r: math.inf if r.ended is None else r.ended)
        if job_status == 0 and all(r.finished for r in ranks):
            return 0, []
        for r in ranks:
            if r.ended is not None:
                r.running_then = [o.rank for o in ranks if o.ended is None or o.ended > r.ended]
        first = ranks[0].ended if ranks else None
        lines = [f"launch: {r.describe(job_status, r.ended == first)}" for r in ranks
                 if r.ended == first or not r.finished]  # fmt: skip
        absent = sorted(set(range(self.size)) - set(self._ranks))
        if absent:
            lines.append(f"launch: rank(s) {_list(absent)} never reported to the launcher "
                         f"(not started under pylucid.distributed.run, or it could not "
                         f"connect); how they ended is not known")  # fmt: skip
        status = job_status or 1
        lines.append(f"launch: the job failed (exit status {status})")
        return status, lines
