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
    metrics = [m for m in METRICS if m in rank_summary.columns]
    if not metrics:
        return pl.DataFrame(schema=SCHEMA)
    # every metric's figures in one query (~40 small queries, one per figure, took ~2.5 ms); a NaN, which
    # sorts last but is no max, takes the query per figure instead
    exprs = []
    for i, metric in enumerate(metrics):
        v = pl.col(metric).cast(pl.Float64)
        exprs += [v.count().alias(f"{i}ranks"), v.is_nan().any().alias(f"{i}nan"), v.min().alias(f"{i}min"),
                  *[v.quantile(q, "nearest").alias(f"{i}{k}") for k, q in QUANTILES], v.max().alias(f"{i}max"),
                  v.mean().alias(f"{i}mean"), pl.col("rank").filter(v == v.min()).min().alias(f"{i}min_rank"),
                  pl.col("rank").filter(v == v.max()).min().alias(f"{i}max_rank")]
    row = rank_summary.select(exprs).row(0, named=True)
    if any(row[f"{i}nan"] for i in range(len(metrics))):
        return _by_figure(rank_summary)
    keys = ("ranks", "min", *(k for k, _ in QUANTILES), "max", "mean", "min_rank", "max_rank")
    rows = [{"metric": metric, **{k: row[f"{i}{k}"] for k in keys}} for i, metric in enumerate(metrics)
            if row[f"{i}ranks"]]
    return pl.DataFrame(rows, schema=SCHEMA)


def _by_figure(rank_summary: pl.DataFrame) -> pl.DataFrame:
    """:func:`rank_distribution`, a few queries per metric."""
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
