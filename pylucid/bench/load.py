"""How much of the machine other processes took while something was timed.

Timings taken while other processes run are pessimistic and noisy: a library's threads wait
for CPUs that others hold (PyTorch's and Numba's parallel regions wait for their slowest
thread, and a thread that lost its CPU is late by a whole time slice). The load average
says how many threads wanted a CPU over the last minute, this process's own included; on
Linux :func:`snapshot` and :func:`others_share` say directly what share of this process's
CPUs (its affinity mask) other processes - and the hypervisor, as steal time - used between
two instants: the busy time of those CPUs from ``/proc/stat`` minus this process's own CPU
time (``time.process_time``, all its threads).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUSY_SHARE", "CpuSnapshot", "load_average", "others_share", "snapshot"]

#: Other processes using more than this share of the CPUs make a measurement "busy".
BUSY_SHARE = 0.25

def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the platform has none)."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


#: /proc/stat's busy columns after the CPU's name: user, nice, system, (idle, iowait
#: skipped) irq, softirq, steal (guest time is counted in user already).
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuSnapshot:
    """The counters at one instant.

    Attributes
    ----------
    wall_s : float
        ``time.perf_counter()``.
    busy_s : float or None
        Busy seconds since boot of the CPUs this process may run on, all processes
        together (None without ``/proc/stat``).
    own_s : float
        User + system CPU seconds of this process, all its threads.
    cpus : int
        The CPUs this process may run on.
    """

    wall_s: float
    busy_s: float | None
    own_s: float
    cpus: int


def _cpus() -> set[int] | None:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


def _busy_seconds(cpus: set[int] | None) -> float | None:
    """Busy seconds of ``cpus`` (all CPUs when None) from ``/proc/stat``, None off Linux."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        ticks += sum(int(fields[i]) for i in _BUSY_COLUMNS if i < len(fields))
    return ticks / os.sysconf("SC_CLK_TCK")


def snapshot() -> CpuSnapshot:
    """The wall clock, the busy time of this process's CPUs and this process's CPU time."""
    cpus = _cpus()
    return CpuSnapshot(
        wall_s=time.perf_counter(),
        busy_s=_busy_seconds(cpus),
        own_s=time.process_time(),
        cpus=len(cpus) if cpus is not None else os.cpu_count() or 1,
    )


def others_share(start: CpuSnapshot, end: CpuSnapshot) -> float | None:
    """The share (0 to 1) of this process's CPUs that other processes used from ``start``
    to ``end``; None without ``/proc/stat`` or over too short an interval to count (the
    kernel counts busy time in ticks of 10 ms or so).
    """
    if start.busy_s is None or end.busy_s is None:
        return None
    capacity = (end.wall_s - start.wall_s) * end.cpus
    if capacity < 0.2:
        return None
    others = (end.busy_s - start.busy_s) - (end.own_s - start.own_s)
    return min(1.0, max(0.0, others / capacity))
