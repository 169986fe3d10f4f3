"""How the per-rank figures spread over the ranks: what a report of a 1,024-rank run shows instead of
1,024 rows (the worst ranks are picked from ``rank_summary`` by the views; this gives the rest)."""

from __future__ import annotations

import polars as pl

# the per-rank figures (columns of rank_summary) whose spread is reported, in report order
METRICS = ("step_ns", "exposed_comm_ns", "exposed_wait_ns", "exposed_pct_of_step", "overlap_pct")
QUANTILES = (("p10", 0.1), ("median", 0.5), ("p90", 0.9))

SCHEMA = pl.Schema({"metric": pl.String, "ranks": pl.Int64, "min": pl.Float64, "p10": pl.Float64,
                    "median": pl.Float64, "p90": pl.Float64, "max": pl.Float64, "mean": pl.Float64,
                    "min_rank": pl.Int32, "max_rank": pl.Int32})


def rank_distribution(rank_summary: pl.DataFrame) -> pl.DataFrame:
    """One row per metric: over the ranks that have it, min, p10, median, p90, max (the nearest
    rank's own value, not an interpolation), mean, and which rank holds the min and the max (the
    lowest such rank on ties)."""
    rows = []
    for metric in METRICS:
        if metric not in rank_summary.columns:
            continue
        values = rank_summary.select("rank", pl.col(metric).cast(pl.Float64).alias("v")).drop_nulls("v")
        if values.height == 0:
            continue
        ordered = values.sort("v", "rank")
        rows.append({
            "metric": metric, "ranks": values.height,
            "min": ordered["v"][0], **{k: values["v"].quantile(q, "nearest") for k, q in QUANTILES},
            "max": ordered["v"][-1], "mean": values["v"].mean(),
            "min_rank": ordered["rank"][0],
            "max_rank": values.sort(["v", "rank"], descending=[True, False])["rank"][0],
        })
    return pl.DataFrame(rows, schema=SCHEMA)
