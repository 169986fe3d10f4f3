"""Bytes per step from rank to rank, per dimension and tier (the topology page's traffic matrix and links).

A point-to-point ``send`` of B bytes counts B from the sender to its peer (``recv`` records are not
counted again). Any other collective call of B bytes on a rank of an n-rank group counts B/(n-1) from
that rank to each other member (the rank's B bytes spread evenly over its group). Calls whose group's
ranks are unknown are left out (and counted). A row per (src, dst, dimension, tier): the dimension and
tier of the calls' process group, so that a view can colour links by dimension and sum rows for the total.
"""

from __future__ import annotations

import polars as pl

from commprof.vocab import UNKNOWN

P2P_OPS = ("send", "recv")
SCHEMA = {"src": pl.Int64, "dst": pl.Int64, "dimension": pl.String, "tier": pl.String, "bytes_per_step": pl.Float64}


def traffic_matrix(collectives: pl.DataFrame, process_groups: pl.DataFrame, n_steps: int
                   ) -> tuple[pl.DataFrame, int]:
    """Long table src, dst, dimension, tier, bytes_per_step, and how many calls were left out (their
    group's ranks unknown)."""
    if collectives.height == 0:
        return pl.DataFrame(schema=SCHEMA), 0
    calls = collectives.filter(pl.col("step").is_not_null() & pl.col("bytes").is_not_null())
    for column in ("dimension", "tier"):
        if column not in calls.columns:
            calls = calls.with_columns(pl.lit(UNKNOWN).alias(column))
    calls = calls.with_columns(pl.col("dimension", "tier").cast(pl.String).fill_null(UNKNOWN))
    steps = max(n_steps, 1)
    sends = calls.filter((pl.col("op") == "send") & pl.col("peer").is_not_null()).select(
        pl.col("rank").cast(pl.Int64).alias("src"), pl.col("peer").cast(pl.Int64).alias("dst"),
        pl.col("bytes").cast(pl.Float64), "dimension", "tier")
    coll = calls.filter(~pl.col("op").is_in(P2P_OPS))
    members = process_groups.select("pg", pl.col("ranks").alias("members"))
    joined = coll.join(members, on="pg", how="left")
    known = joined.filter(pl.col("members").list.len() > 1)
    left_out = joined.height - known.height
    spread = (
        known.with_columns((pl.col("bytes") / (pl.col("members").list.len() - 1)).alias("share"))
        .select(pl.col("rank").cast(pl.Int64).alias("src"), "members", "share", "dimension", "tier")
        .explode("members").rename({"members": "dst"})
        .with_columns(pl.col("dst").cast(pl.Int64))
        .filter(pl.col("dst") != pl.col("src"))
        .select("src", "dst", pl.col("share").alias("bytes"), "dimension", "tier")
    )
    both = pl.concat([sends, spread])
    keys = ["src", "dst", "dimension", "tier"]
    out = both.group_by(keys).agg((pl.col("bytes").sum() / steps).alias("bytes_per_step")).sort(keys)
    return out.select(list(SCHEMA)), left_out
