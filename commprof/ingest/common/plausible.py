"""Implausible times: an event whose timestamp lies far outside the trace's span (``ts: 0`` among epoch
timestamps makes a 56-year step) or whose duration is negative (negative idle time downstream). Such
events are skipped and counted in a warning, never analyzed as they are."""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
MIN_FAR_NS = 600 * 10**9  # 10 min: a profiling window is seconds to minutes long
SPAN_FACTOR = 100  # "far" is this many times the span of the middle 90 % of the events


def reference(start_ns: I64) -> tuple[int, int] | None:
    """(median start, how far from it a start is implausible), or None for too few events."""
    if start_ns.size < 5:
        return None
    low, mid, high = np.quantile(start_ns, [0.05, 0.5, 0.95], method="nearest")
    return int(mid), max(MIN_FAR_NS, SPAN_FACTOR * int(high - low))


def implausible(start_ns: I64, end_ns: I64, ref: tuple[int, int] | None, why: Counter[str]) -> Mask:
    """Which events to skip; ``why`` counts them by reason."""
    negative = end_ns < start_ns
    bad = negative.copy()
    if ref is not None:
        mid, far = ref
        outside = (np.abs(start_ns - mid) > far) & ~negative
        long = (end_ns - start_ns > far) & ~outside & ~negative
        bad |= outside | long
        if outside.any():
            why["timestamp far outside the trace's span"] += int(outside.sum())
        if long.any():
            why["duration longer than the trace's span"] += int(long.sum())
    if negative.any():
        why["negative duration"] += int(negative.sum())
    return bad


def describe(label: str, what: str, why: Counter[str]) -> str:
    shown = "; ".join(f"{n:,} × {reason}" for reason, n in why.most_common())
    return f"{label}: skipped {sum(why.values()):,} {what} with implausible times ({shown})"
