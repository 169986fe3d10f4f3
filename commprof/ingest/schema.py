"""Column types of the tables (DESIGN §3). Time is integer ns on one per-run clock; bytes are int64."""

from __future__ import annotations

import polars as pl

INGEST_VERSION = 7  # bump whenever what ingest writes changes: every cached table is then rebuilt

KINDS = ("compute", "comm", "memory", "wait", "annotation")

INTERVALS = pl.Schema({
    "rank": pl.Int32(),
    "lane": pl.String(),
    "name": pl.String(),
    "kind": pl.Enum(KINDS),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "correlation": pl.Int64(),
    # when the event was issued on the CPU: a device event's launching runtime call (joined by
    # correlation; null when the trace does not hold it), a CPU op's own start
    "launch_ns": pl.Int64(),
})

COLLECTIVES = pl.Schema({
    "rank": pl.Int32,
    "pg": pl.String,
    "seq": pl.Int64,
    "op": pl.String,
    "bytes": pl.Int64,
    "dtype": pl.String,
    "group_size": pl.Int32,
    "peer": pl.Int32,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "lane": pl.String,
    "is_async": pl.Boolean,
    "name": pl.String,
    "launch_ns": pl.Int64,  # as in INTERVALS
})

# Raw profiler-step annotations as the trace has them (CPU side); analyzers turn them into windows.
STEP_MARKS = pl.Schema({"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})

RANKS = pl.Schema({
    "rank": pl.Int32,
    "host": pl.String,
    "node": pl.Int32,
    "local_rank": pl.Int32,
    "pid": pl.Int64,
    "device": pl.String,
    "gpu_name": pl.String,
    "world_size": pl.Int32,
    "backend": pl.String,
    "mode": pl.String,  # "gpu" when the trace has device kernels, else "cpu"
    "file": pl.String,
    "rank_source": pl.String,  # distributedInfo | file name | MPI rank | nccl init | file order
    "source": pl.String,  # the reader that read the rank's file: kineto | nsys
})

PROCESS_GROUPS = pl.Schema({
    "pg": pl.String(),
    "desc": pl.String(),
    "ranks": pl.List(pl.Int32()),
    "size": pl.Int32(),
    "backend": pl.String(),
})


def empty(schema: pl.Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)
