"""analyzers/windows.py: the time spans cover in a window and in each of its bins (what the timeline draws)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from commprof.analyzers import intervals as iv
from commprof.analyzers import windows


@pytest.mark.parametrize(("lo", "hi", "bins"), [(0, 1_000_000, 1000), (1234, 56_789, 37), (500_000, 500_100, 10)])
def test_covered_per_bin_is_the_union_in_each_bin(lo: int, hi: int, bins: int) -> None:
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 1_000_000, 500)
    ends = starts + rng.integers(1, 5000, 500)  # overlapping pieces: counted once
    edges = windows.bin_edges(lo, hi, bins)
    covered = windows.covered_per_bin(starts, ends, edges)
    u = iv.union(starts, ends)
    assert covered.sum() == iv.length(iv.clip(u, lo, hi))
    assert covered.tolist() == [iv.length(iv.clip(u, int(a), int(b))) for a, b in zip(edges[:-1], edges[1:],
                                                                                      strict=True)]
    assert (covered <= np.diff(edges)).all() and edges[0] == lo and edges[-1] == hi


def test_exposed_in_window_clips_each_rank_spans() -> None:
    spans = pl.DataFrame({"rank": [0, 0, 1], "start_ns": [0, 50, 10], "end_ns": [20, 120, 15]})
    assert windows.exposed_in_window(spans, 10, 100).rows() == [(0, 60), (1, 5)]
