"""Time inside a window, and inside each bin of a window: how the analysis' spans (exposed comm, a lane's
comm or compute) fill a stretch of the run that a view shows.

A view that draws a long window cannot draw every interval: it draws bins. What it draws must be the
analysis' own figure, the same at every zoom: a bin holds the time the spans cover in it (their union,
clipped to the bin), never "something happened here". These are those numbers, computed once here; the
dashboard's timeline only places them (``exposed_in_window`` is what a test compares its drawing with).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from commprof.analyzers import intervals as iv

Array = npt.NDArray[np.int64]


def bin_edges(lo: int, hi: int, bins: int) -> Array:
    """``bins`` + 1 integer edges from lo to hi (the last edge is hi exactly)."""
    bins = max(int(bins), 1)
    return np.linspace(lo, hi, bins + 1).round().astype(np.int64)


def covered_per_bin(starts: npt.ArrayLike, ends: npt.ArrayLike, edges: Array) -> Array:
    """ns of the union of [start, end) inside each bin [edges[i], edges[i + 1]); sums to the union's time
    inside [edges[0], edges[-1]) exactly."""
    us, ue = iv.clip(iv.union(starts, ends), int(edges[0]), int(edges[-1]))
    if us.size == 0:
        return np.zeros(edges.size - 1, dtype=np.int64)
    # covered time before each edge: cumulative lengths of whole pieces + the part of the piece it cuts
    ends_cum = np.concatenate([[0], np.cumsum(ue - us)])
    k = np.searchsorted(us, edges, side="right")  # pieces starting at or before the edge
    before = ends_cum[np.maximum(k - 1, 0)] + np.where(
        k > 0, np.clip(edges - us[np.maximum(k - 1, 0)], 0, (ue - us)[np.maximum(k - 1, 0)]), 0)
    return np.diff(before).astype(np.int64)


def exposed_in_window(exposed_spans: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """rank, exposed_ns: each rank's exposed comm time inside [lo, hi) (the analysis' exposed spans)."""
    return (exposed_spans.with_columns(pl.col("start_ns").clip(lo, hi), pl.col("end_ns").clip(lo, hi))
            .group_by("rank").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("exposed_ns"))
            .sort("rank"))
