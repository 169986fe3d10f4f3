"""Per host (node): what its ranks did, what crossed its links and its ports, and the hosts worth a first
look — the rows a view shows when a run has too many ranks to show one each (the dashboard past 256 ranks).

Every figure is a sum or mean of the analysis' own per-rank rows: step time and exposed communication are
the means over the host's ranks of ``rank_summary``; "waited on" is its rank the others wait for most
(``stragglers.caused_wait_ns_per_step``); the bytes are ``traffic.host_traffic``'s (the traffic matrix's rule,
summed per host without rank pairs); the port rate is the slowest active InfiniBand/RoCE port the topology
capture lists for the host.

**Worst first** (``worst``, 1 = first): hosts whose ports run slower than the run's fastest port (a slow link
shows on every host its groups cross, but only its own ports say where it is), then the hosts holding the
ranks the others wait for most, then the most exposed communication per rank-step; ties by name, numbers in
names compared as numbers (node-9 before node-10).
"""

from __future__ import annotations

import re

import polars as pl

from commprof.analyzers.traffic import host_bytes

SCHEMA = pl.Schema({
    "worst": pl.Int64, "host": pl.String, "ranks": pl.Int64, "first_rank": pl.Int64, "last_rank": pl.Int64,
    "step_ns": pl.Float64, "exposed_comm_ns": pl.Float64, "exposed_wait_ns": pl.Float64,
    "most_exposed_rank": pl.Int64, "waited_on_ns_per_step": pl.Float64, "waited_on_rank": pl.Int64,
    "net_bytes_per_step": pl.Float64, "local_bytes_per_step": pl.Float64, "port_gbps": pl.Float64,
    "slow_port": pl.Boolean,
})


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def host_summary(ranks: pl.DataFrame, rank_summary: pl.DataFrame, stragglers: pl.DataFrame,
                 collectives: pl.DataFrame, process_groups: pl.DataFrame, ib_ports: pl.DataFrame,
                 n_steps: int) -> pl.DataFrame:
    """One row per host, worst first (the module doc says the order and where each figure comes from)."""
    if ranks.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    host = ranks.select(pl.col("rank").cast(pl.Int64), pl.col("host").cast(pl.String).fill_null("?"))
    per_rank = (host.join(rank_summary.select(pl.col("rank").cast(pl.Int64), "step_ns", "exposed_comm_ns",
                                              "exposed_wait_ns"), on="rank", how="left")
                .join(stragglers.select(pl.col("rank").cast(pl.Int64), "caused_wait_ns_per_step"), on="rank",
                      how="left"))
    exposed_first = pl.col("exposed_comm_ns").fill_null(-1)
    waited_first = pl.col("caused_wait_ns_per_step").fill_null(-1)
    out = per_rank.group_by("host").agg(
        pl.len().cast(pl.Int64).alias("ranks"), pl.col("rank").min().alias("first_rank"),
        pl.col("rank").max().alias("last_rank"),
        pl.col("step_ns").mean(), pl.col("exposed_comm_ns").mean(), pl.col("exposed_wait_ns").mean(),
        pl.col("rank").sort_by(exposed_first, pl.col("rank"), descending=[True, False]).first()
        .alias("most_exposed_rank"),
        pl.col("caused_wait_ns_per_step").max().cast(pl.Float64).alias("waited_on_ns_per_step"),
        pl.col("rank").sort_by(waited_first, pl.col("rank"), descending=[True, False]).first()
        .alias("waited_on_rank"),
    )
    out = out.join(host_bytes(collectives, process_groups, ranks, n_steps), on="host", how="left").with_columns(
        pl.col("net_bytes_per_step", "local_bytes_per_step").fill_null(0.0))
    ports = (ib_ports.group_by(pl.col("host").cast(pl.String)).agg(pl.col("gbps").cast(pl.Float64).min()
                                                                    .alias("port_gbps"))
             if ib_ports.height and {"host", "gbps"} <= set(ib_ports.columns)
             else pl.DataFrame(schema={"host": pl.String, "port_gbps": pl.Float64}))
    fastest = ports["port_gbps"].max() if ports.height else None
    out = out.join(ports, on="host", how="left").with_columns(
        (pl.col("port_gbps") < (fastest if fastest is not None else float("-inf"))).fill_null(False)
        .alias("slow_port"))
    order = sorted(out.select("host", "slow_port", "waited_on_ns_per_step", "exposed_comm_ns").iter_rows(),
                   key=lambda r: (not r[1], -(r[2] or 0.0), -(r[3] or 0.0), _natural(r[0])))
    worst = pl.DataFrame({"host": [r[0] for r in order], "worst": list(range(1, len(order) + 1))},
                         schema={"host": pl.String, "worst": pl.Int64})
    return out.join(worst, on="host").sort("worst").select(list(SCHEMA)).cast(SCHEMA)
