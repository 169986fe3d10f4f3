"""Bandwidth per communicator and collective from NCCL Inspector records, without any trace.

The Inspector gives, per rank and call, the message size and execution time (the slowest channel's GPU time,
else CPU time: ``timing_source`` says which). commprof's own convention is applied to them, so its figures
read like those of a traced run: bytes on the full buffer (the Inspector's all-gather / reduce-scatter size
is one rank's part: times n), algbw = bytes / time, busbw = algbw x the op's factor with n = the
communicator's size. The plugin's own busbw is kept beside it for comparison. The tier is what the
records can say: a communicator over more than one node crosses the network; inside one node it is NVLink or
PCIe, which the records cannot tell apart. No timeline: step time, overlap and exposure do not exist here.
"""

from __future__ import annotations

import polars as pl

from commprof.analyzers.bandwidth import busbw_factor_expr, gbps

PER_RANK_PART = ("all_gather", "reduce_scatter")  # NCCL counts these per rank; the full buffer is n times
INSPECTOR_SUMMARY = pl.Schema({
    "comm_id": pl.String(), "comm_name": pl.String(), "n_ranks": pl.Int32(), "n_nodes": pl.Int32(),
    "tier": pl.String(), "op": pl.String(), "bytes": pl.Int64(), "calls": pl.UInt32(), "ranks_reporting": pl.UInt32(),
    "mean_us": pl.Float64(), "max_us": pl.Float64(), "algbw_gbps": pl.Float64(), "busbw_gbps": pl.Float64(),
    "inspector_busbw_gbps": pl.Float64(), "timing_sources": pl.List(pl.String()),
})


def inspector_summary(records: pl.DataFrame) -> pl.DataFrame:
    """One row per (communicator, op, message size): calls over all ranks, mean and slowest time, bandwidth."""
    if records.height == 0:
        return pl.DataFrame(schema=INSPECTOR_SUMMARY)
    n = pl.col("n_ranks").cast(pl.Float64)
    full = pl.when(pl.col("op").is_in(list(PER_RANK_PART))).then(pl.col("bytes") * pl.col("n_ranks").cast(pl.Int64)) \
        .otherwise(pl.col("bytes"))
    calls = records.filter(pl.col("exec_us").is_not_null() & pl.col("comm_id").is_not_null()).with_columns(
        full.alias("bytes"), (pl.col("exec_us") * 1000).alias("_ns"))
    calls = calls.with_columns(gbps(pl.col("bytes"), pl.col("_ns")).alias("_algbw"))
    calls = calls.with_columns((pl.col("_algbw") * busbw_factor_expr(pl.col("op"), n)).alias("_busbw"))
    out = calls.group_by("comm_id", "op", "bytes").agg(
        pl.col("comm_name").drop_nulls().first(), pl.col("n_ranks").max(), pl.col("n_nodes").max(),
        pl.len().alias("calls"), pl.col("comm_rank").n_unique().alias("ranks_reporting"),
        pl.col("exec_us").mean().alias("mean_us"), pl.col("exec_us").max().alias("max_us"),
        pl.col("_algbw").mean().alias("algbw_gbps"), pl.col("_busbw").mean().alias("busbw_gbps"),
        pl.col("busbw_gbps").mean().alias("inspector_busbw_gbps"),
        pl.col("timing_source").drop_nulls().unique().sort().alias("timing_sources"),
    ).with_columns(
        pl.when(pl.col("n_nodes") > 1).then(pl.lit("network")).when(pl.col("n_nodes") == 1)
        .then(pl.lit("NVLink or PCIe")).otherwise(pl.lit("unknown")).alias("tier"))
    return out.select(list(INSPECTOR_SUMMARY)).cast(dict(INSPECTOR_SUMMARY)).sort(  # type: ignore[arg-type]
        "calls", "comm_id", "op", "bytes", descending=[True, False, False, False])

NETWORK, INSIDE_NODE = "network", "NVLink or PCIe"  # the tiers the records can tell apart
INSPECTOR_EFFICIENCY = pl.Schema({**INSPECTOR_SUMMARY, "peak_gbps": pl.Float64(), "efficiency": pl.Float64()})


def inspector_efficiency(summary: pl.DataFrame, peaks: dict[str, float]) -> pl.DataFrame:
    """The summary with efficiency = busbw / peak, ``peaks`` keyed by the records' tier (NETWORK, INSIDE_NODE):
    the records cannot say which network or link it is, so the peak comes from whoever knows (check's config)."""
    peak = pl.col("tier").replace_strict(list(peaks), list(peaks.values()), default=None, return_dtype=pl.Float64)
    return summary.with_columns(peak.alias("peak_gbps")).with_columns(
        (pl.col("busbw_gbps") / pl.col("peak_gbps")).alias("efficiency")).select(list(INSPECTOR_EFFICIENCY))
