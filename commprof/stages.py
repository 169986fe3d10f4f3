"""Wall seconds per stage of one open and analysis, for the scale benchmarks (bench/bench_fits.py): what each
stage costs as ranks, group sizes, calls and steps grow. Off unless ``enable()`` was called (a dict update per
stage, nothing per rank or per row); the same stage run twice adds up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

TIMES: dict[str, float] = {}
PEAKS: dict[str, float] = {}  # the process's peak RSS (VmHWM, MB) when each stage ended: the stage that raised it
_ON = [False]


def enable() -> None:
    TIMES.clear()
    PEAKS.clear()
    _ON[0] = True


def _hwm_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0.0


@contextmanager
def timed(name: str) -> Iterator[None]:
    if not _ON[0]:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        TIMES[name] = TIMES.get(name, 0.0) + time.perf_counter() - t0
        PEAKS[name] = _hwm_mb()
