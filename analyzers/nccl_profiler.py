"""Which algorithm and protocol NCCL used, per communicator and collective, from the example profiler
plugin's traces (the only source that says what NCCL actually chose; kernel names and NVTX do not)."""

from __future__ import annotations

import polars as pl

ALGORITHMS = pl.Schema({
    "comm_hash": pl.String(), "op": pl.String(), "algorithm": pl.String(), "protocol": pl.String(),
    "calls": pl.UInt32(), "ranks": pl.UInt32(), "channels_min": pl.Int32(), "channels_max": pl.Int32(),
    "bytes_min": pl.Int64(), "bytes_max": pl.Int64(),
})


def algorithm_summary(colls: pl.DataFrame) -> pl.DataFrame:
    """One row per (communicator, op, algorithm, protocol): calls over all ranks and the size range."""
    if colls.height == 0:
        return pl.DataFrame(schema=ALGORITHMS)
    out = colls.group_by("comm_hash", "op", "algorithm", "protocol").agg(
        pl.len().alias("calls"), pl.col("rank").n_unique().alias("ranks"),
        pl.col("channels").min().alias("channels_min"), pl.col("channels").max().alias("channels_max"),
        pl.col("bytes").min().alias("bytes_min"), pl.col("bytes").max().alias("bytes_max"))
    return out.select(list(ALGORITHMS)).cast(dict(ALGORITHMS)).sort(  # type: ignore[arg-type]
        "calls", "comm_hash", "op", descending=[True, False, False], nulls_last=True)
