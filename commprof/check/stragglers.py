"""How long each rank waits for the last rank to arrive at a collective (DESIGN §3 "Skew").

The same collective is matched across ranks by (pg, seq); when the trace carries no seq (Gloo, older
PyTorch), by its ordinal among the rank's calls of the same (pg, op). A rank's wait is the latest start
minus its own start. Point-to-point ops are left out: a send and its recv are not the same call on two
ranks. Ranks on different hosts are compared on their own clocks (no alignment is applied here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

P2P_OPS = ("send", "recv", "send_recv")


def matched_waits(collectives: pl.DataFrame) -> pl.DataFrame:
    """Per rank and collective call matched on at least two ranks: rank, pg, op, match, step, wait_ns,
    late_rank (the rank that arrived last)."""
    schema = {"rank": pl.Int32, "pg": pl.String, "op": pl.String, "match": pl.String, "step": pl.Int64,
              "wait_ns": pl.Int64, "late_rank": pl.Int32}
    if collectives.height == 0:
        return pl.DataFrame(schema=schema)
    coll = (
        collectives.filter(~pl.col("op").is_in(P2P_OPS))
        .with_columns(pl.col("pg").fill_null("unknown"))
        .sort("rank", "start_ns")
        .with_columns(pl.int_range(pl.len()).over("rank", "pg", "op").alias("_ordinal"))
        .with_columns(
            pl.when(pl.col("seq").is_not_null())
            .then(pl.format("seq {}", pl.col("seq")))
            .otherwise(pl.format("{} #{}", pl.col("op"), pl.col("_ordinal")))
            .alias("match")
        )
    )
    key = ["pg", "match"]
    latest = pl.col("start_ns").max().over(key)
    return (
        coll.with_columns(
            (latest - pl.col("start_ns")).alias("wait_ns"),
            pl.col("rank").sort_by("start_ns").last().over(key).alias("late_rank"),
            pl.len().over(key).alias("_ranks"),
        )
        .filter(pl.col("_ranks") >= 2)
        .select(list(schema))
        .cast(schema)  # type: ignore[arg-type]
    )


def straggler_table(analysis: Analysis) -> list[dict[str, Any]]:
    """Per rank: the longest wait (and on which call), and the mean total wait per step."""
    waits = matched_waits(analysis.collectives)
    if waits.height == 0:
        return []
    steps = analysis.steps.group_by("rank").len().rename({"len": "_steps"})
    worst = waits.sort("wait_ns", descending=True).group_by("rank", maintain_order=True).first()
    totals = waits.group_by("rank").agg(pl.col("wait_ns").sum().alias("_total"), pl.len().alias("calls"))
    table = (
        worst.join(totals, on="rank").join(steps, on="rank", how="left")
        .with_columns((pl.col("_total") / pl.col("_steps").fill_null(1).clip(1)).round().cast(pl.Int64)
                      .alias("wait_ns_per_step"))
        .sort("rank")
    )
    return [
        {"rank": r["rank"], "max_wait_ns": r["wait_ns"], "wait_ns_per_step": r["wait_ns_per_step"],
         "calls": r["calls"], "pg": r["pg"], "op": r["op"], "match": r["match"], "step": r["step"],
         "late_rank": r["late_rank"]}
        for r in table.iter_rows(named=True)
    ]
