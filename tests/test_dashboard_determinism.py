"""Same input, same page (issue 22): the skew page's heatmaps keep their column and row order between
identical requests. Calls of several DP groups that start together tie on their start; polars' group_by
hands groups back in a different order each call, so every sort there needs a tie-breaker."""

from __future__ import annotations

import numpy as np
import polars as pl

from commprof.figures import charts as figures


def tied_waits(keys: int = 3000, ranks: int = 4) -> pl.DataFrame:
    """Matched calls of 30 DP groups whose calls start in lockstep: 100 distinct start times for 3000 calls."""
    key = [f"{k % 30 + 3} seq {k // 30}" for k in range(keys) for _ in range(ranks)]
    first = [(k // 30) * 1000 for k in range(keys) for _ in range(ranks)]
    return pl.DataFrame({
        "key": key, "rank": [r for _ in range(keys) for r in range(ranks)],
        "wait_ns": np.tile(np.array([0, 500, 500, 0]), keys), "first_ns": first,
        "label": [f"DATA_PARALLEL_GROUP (pg {k.split()[0]}) · dp · all_reduce" for k in key], "step": [0] * len(key),
    })


def test_the_per_call_heatmap_is_the_same_for_identical_requests() -> None:
    waits = tied_waits()
    pages = {figures.skew_calls_figure(waits, None, "").to_json() for _ in range(8)}
    assert len(pages) == 1

