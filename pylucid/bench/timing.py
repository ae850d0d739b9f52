"""A robust timer for comparing implementations side by side.

Each implementation is a no-argument callable that does (and, for lazy libraries, forces) one
unit of work. :func:`measure` warms every callable up, calibrates how many calls make one
timed batch of about ``target_s`` seconds, then times ``repeats`` batches of each,
interleaving the implementations batch by batch (in a rotating order) so that a slow drift of
the machine - another process, thermal throttling - affects them all alike rather than
whichever happened to run last. A measurement reports the median and the minimum time per
call over the batches.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["Measurement", "TimerConfig", "measure"]


@dataclass(frozen=True)
class TimerConfig:
    """How long and how often to time.

    Attributes
    ----------
    target_s : float
        Wanted duration of one timed batch; the number of calls per batch is chosen so.
    repeats : int
        Timed batches per implementation (the median and minimum are taken over them).
    warmup : int
        Untimed calls before calibrating (the first one pays for JIT compilation).
    max_number : int
        Most calls in one batch.
    slow_call_s : float
        A call slower than this is timed only ``min_repeats`` times, one call per batch.
    min_repeats : int
        Batches of a slow call.
    """

    target_s: float = 0.15
    repeats: int = 5
    warmup: int = 1
    max_number: int = 1_000_000
    slow_call_s: float = 0.5
    min_repeats: int = 3


@dataclass
class Measurement:
    """The time per call of one implementation.

    Attributes
    ----------
    median_s, min_s : float
        Median and minimum over the batches of (batch time / calls per batch).
    number : int
        Calls per batch.
    samples_s : list of float
        Time per call of every batch, in order.
    """

    median_s: float
    min_s: float
    number: int
    samples_s: list[float] = field(default_factory=list)


#: A batch is run in this many chunks, the clock read between them.
_CHUNKS = 20


def _batch(fn: Callable[[], object], number: int, limit_s: float = math.inf) -> float:
    """Seconds per call over ``number`` calls of ``fn``, with the garbage collector paused.

    The calls run in :data:`_CHUNKS` chunks; once more than ``limit_s`` has passed the batch
    stops early, so that a call that got much slower since calibration (another process took
    the CPU) cannot stretch a batch from a fraction of a second to minutes.
    """
    chunk = max(1, number // _CHUNKS)
    done = 0
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while done < number:
            for _ in range(min(chunk, number - done)):
                fn()
            done += min(chunk, number - done)
            elapsed = time.perf_counter() - start
            if elapsed > limit_s:
                break
        return elapsed / done
    finally:
        if enabled:
            gc.enable()


def _calibrate(fn: Callable[[], object], config: TimerConfig) -> tuple[int, float, bool]:
    """Calls per batch for ``fn``, the time of one call, and whether that time was a batch of
    one call (then it is the first sample of a call too slow to batch)."""
    number = 1
    while True:
        per_call = _batch(fn, number)
        if per_call * number >= config.target_s / 10 or number >= config.max_number:
            break
        number = min(config.max_number, number * 10)
    wanted = max(1, math.ceil(config.target_s / per_call)) if per_call > 0 else config.max_number
    wanted = min(config.max_number, wanted)
    return wanted, per_call, number == 1 and wanted == 1


def measure(
    impls: Mapping[str, Callable[[], object]], config: TimerConfig
) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Time every implementation in ``impls``, interleaved batch by batch.

    Parameters
    ----------
    impls : mapping of str to callable
        No-argument callables, each doing one unit of work.
    config : TimerConfig
        Batch duration, repeats and warm-up.

    Returns
    -------
    measurements : dict of str to Measurement
        For every implementation that ran.
    errors : dict of str to str
        For every implementation that raised (during warm-up or timing): the exception.
    """
    errors: dict[str, str] = {}
    numbers: dict[str, int] = {}
    samples: dict[str, list[float]] = {}
    repeats = config.repeats
    for name, fn in impls.items():
        try:
            for _ in range(config.warmup):
                fn()
            numbers[name], per_call, is_sample = _calibrate(fn, config)
        except Exception as exc:  # a broken implementation is reported, not fatal
            errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        samples[name] = [per_call] if is_sample else []
        if per_call > config.slow_call_s:
            repeats = min(repeats, config.min_repeats)
    names = list(numbers)
    limit = 4 * config.target_s
    for round_ in range(repeats):
        shift = round_ % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if name in errors or len(samples[name]) > round_:
                continue
            try:
                samples[name].append(_batch(impls[name], numbers[name], limit))
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
    results = {}
    for name, times in samples.items():
        if name in errors or not times:
            continue
        results[name] = Measurement(statistics.median(times), min(times), numbers[name], times)
    return results, errors
