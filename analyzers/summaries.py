"""The aggregates every view shows, made once from the per-call and per-step tables.

Per-step figures are means over rank-steps, and the denominator is part of each table's meaning:

* ``rank_summary``: a rank's own steps.
* ``group_summary`` and ``call_sizes``: the rank-steps of the group's ranks (a dp group of 4 ranks on a
  64-rank run is averaged over its 4 ranks' steps, not the run's).
* ``dimension_tier``, ``by_dimension``, ``by_tier`` and ``totals``: every analyzed rank-step of the run,
  so the rows' exposed shares add up to the run's exposed share of the step.

Bandwidth is time-weighted: bytes moved over time taken, over the calls whose bytes are known.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from commprof.analyzers.bandwidth import busbw_factor_expr, gbps
from commprof.vocab import UNKNOWN

PARTS = ["compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns", "exposed_wait_ns",
         "exposed_transfer_ns"]


def rank_summary(steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank: steps analyzed, mean per-step parts (ns) and overlap %."""
    return (
        steps.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("step_ns"))
        .group_by("rank")
        .agg(
            pl.len().alias("steps"),
            pl.col("step_ns").mean().round().cast(pl.Int64),
            *[pl.col(c).mean().round().cast(pl.Int64) for c in PARTS],
            pl.col("overlapped_comm_ns").sum().alias("_ovl"),
            pl.col("exposed_comm_ns").sum().alias("_exp"),
        )
        .with_columns(
            pl.when(pl.col("_ovl") + pl.col("_exp") > 0)
            .then(100.0 * pl.col("_ovl") / (pl.col("_ovl") + pl.col("_exp")))
            .alias("overlap_pct")
        )
        .with_columns(pl.when(pl.col("step_ns") > 0).then(100.0 * pl.col("exposed_comm_ns") / pl.col("step_ns"))
                      .alias("exposed_pct_of_step"))
        .drop("_ovl", "_exp")
        .sort("rank")
    )


def totals(ranks: pl.DataFrame) -> dict[str, Any]:
    """Means over ranks of the per-step figures (ns), the overall overlap % and exposed share."""
    if ranks.height == 0:
        return {}
    keys = ["step_ns", *PARTS]
    sums = ranks.select(pl.col(k).fill_null(0).sum() for k in keys).row(0)  # one query, not one per column
    out: dict[str, Any] = {k: int(round(float(total) / ranks.height)) for k, total in zip(keys, sums, strict=True)}
    comm = out["overlapped_comm_ns"] + out["exposed_comm_ns"]
    out["overlap_pct"] = 100.0 * out["overlapped_comm_ns"] / comm if comm else None
    out["exposed_comm_pct_of_step"] = 100.0 * out["exposed_comm_ns"] / out["step_ns"] if out["step_ns"] else None
    return out


def _with_bw_inputs(coll: pl.DataFrame) -> pl.DataFrame:
    """Per-call inputs of the bandwidth sums, computed once (expressions over them stay flat and fast).
    Bandwidth is over the calls' transfer time (``transfer_ns``: the call minus its wait for later
    ranks, DESIGN §3), as the per-call figures are (pipeline._with_group_columns)."""
    if "_dur" in coll.columns:
        return coll
    dur = pl.col("end_ns") - pl.col("start_ns")
    transfer = pl.col("transfer_ns").fill_null(dur) if "transfer_ns" in coll.columns else dur
    factor = busbw_factor_expr(pl.col("op"), pl.col("group_size").cast(pl.Float64))
    known = pl.col("bytes").is_not_null()
    return coll.with_columns(
        dur.alias("_dur"),
        pl.when(known).then(transfer).alias("_dur_known"),
        (pl.col("bytes") * factor).alias("_bus_bytes"),
        pl.when(known & factor.is_not_null()).then(transfer).alias("_dur_bus"),
        pl.when(pl.col("peak_gbps") > 0).then(pl.col("bytes") * factor / pl.col("peak_gbps")).alias("_eff_bytes"),
    ).with_columns(pl.when(pl.col("_eff_bytes").is_not_null()).then(transfer).alias("_dur_eff"))


def _bw_exprs() -> list[pl.Expr]:
    return [
        pl.len().alias("count"),
        pl.col("bytes").is_null().sum().cast(pl.Int64).alias("bytes_unknown_calls"),  # sizes the trace does not say
        pl.col("_dur").sum().alias("comm_ns"),
        pl.col("overlapped_ns").sum(),
        pl.col("exposed_ns").sum(),
        pl.col("exposed_wait_ns").sum(),
        pl.col("wait_ns").sum().alias("wait_total_ns"),
        gbps(pl.col("bytes").sum(), pl.col("_dur_known").sum()).fill_nan(None).alias("algbw_gbps"),
        gbps(pl.col("_bus_bytes").sum(), pl.col("_dur_bus").sum()).fill_nan(None).alias("busbw_gbps"),
        # equal to busbw_gbps / peak_gbps when the calls share one peak
        gbps(pl.col("_eff_bytes").sum(), pl.col("_dur_eff").sum()).fill_nan(None).alias("efficiency"),
        pl.col("peak_gbps").max(),
    ]


def _agg(coll: pl.DataFrame, keys: list[str], bytes_col: bool = True) -> pl.DataFrame:
    exprs = _bw_exprs()
    if bytes_col:
        exprs.insert(1, pl.col("bytes").sum().alias("bytes"))
    return _with_bw_inputs(coll).group_by(*keys).agg(*exprs).with_columns(
        (pl.col("exposed_ns") - pl.col("exposed_wait_ns")).alias("exposed_transfer_ns"))


def analyzed(collectives: pl.DataFrame) -> pl.DataFrame:
    """Calls that started inside an analyzed step window (with their bandwidth inputs). A frame this
    made is returned as it is: the pipeline makes it once for all the summaries."""
    if "_dur" in collectives.columns and collectives["step"].null_count() == 0:
        return collectives
    return _with_bw_inputs(collectives.filter(pl.col("step").is_not_null()))


def collectives_summary(collectives: pl.DataFrame) -> pl.DataFrame:
    """Per process group and op, totals over all ranks and analyzed steps."""
    return _agg(analyzed(collectives), ["pg", "dimension", "tier", "op"]).sort(
        "exposed_ns", "pg", "op", descending=[True, False, False])


def group_rank_steps(collectives: pl.DataFrame, steps: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """pg -> the analyzed rank-steps of its ranks (the ranks seen calling it when its members are unknown)."""
    per_rank = steps.group_by("rank").agg(pl.len().alias("_n"), (pl.col("end_ns") - pl.col("start_ns")).sum()
                                          .alias("_step_ns"))
    members = groups.select("pg", pl.col("ranks").alias("rank")).explode("rank").drop_nulls("rank")
    seen = analyzed(collectives).select("pg", "rank").unique()
    both = pl.concat([members.with_columns(pl.col("rank").cast(pl.Int32)),
                      seen.with_columns(pl.col("rank").cast(pl.Int32))]).unique()
    return (both.join(per_rank.with_columns(pl.col("rank").cast(pl.Int32)), on="rank")
            .group_by("pg").agg(pl.col("_n").sum().alias("rank_steps"), pl.col("_step_ns").sum().alias("_steps_ns")))


def group_summary(collectives: pl.DataFrame, steps: pl.DataFrame, pg_steps: pl.DataFrame,
                  groups: pl.DataFrame, rank_steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per process group: op mix, bytes, comm and exposed time per rank-step of its ranks, bandwidth.
    ``rank_steps``: :func:`group_rank_steps` when the caller has it already."""
    coll = _with_bw_inputs(analyzed(collectives))
    per_pg = coll.group_by("pg").agg(
        pl.col("rank").n_unique().alias("ranks_seen"),
        pl.col("bytes").sum().alias("bytes_total"),
        pl.col("op").value_counts(sort=True).alias("op_mix"),
        *[e for e in _bw_exprs() if e.meta.output_name() != "peak_gbps"],
    )
    time = pg_steps.group_by("pg").agg(
        pl.col("comm_ns").sum().alias("_comm"), pl.col("overlapped_ns").sum().alias("_ovl"),
        pl.col("exposed_ns").sum().alias("_exp"), pl.col("exposed_wait_ns").sum().alias("_wait"))
    per = pl.col("rank_steps")
    out = (
        groups.join(per_pg, on="pg", how="full", coalesce=True)
        .join(group_rank_steps(collectives, steps, groups) if rank_steps is None else rank_steps, on="pg",
              how="left")
        .join(time, on="pg", how="left")
        .with_columns(pl.col("rank_steps").fill_null(max(steps.height, 1)))
        .with_columns(
            (pl.col("bytes_total") / per).alias("bytes_per_step"),
            (pl.col("_comm") / per).alias("comm_ns_per_step"),
            (pl.col("_ovl") / per).alias("overlapped_ns_per_step"),
            (pl.col("_exp") / per).alias("exposed_ns_per_step"),
            (pl.col("_wait") / per).alias("exposed_wait_ns_per_step"),
            ((pl.col("_exp") - pl.col("_wait")) / per).alias("exposed_transfer_ns_per_step"),
            pl.col("_exp").alias("exposed_total_ns"),
            pl.when(pl.col("_steps_ns") > 0).then(100.0 * pl.col("_exp") / pl.col("_steps_ns"))
            .alias("exposed_pct_of_step"),
        )
        .drop("_comm", "_ovl", "_exp", "_wait", "_steps_ns")
    )
    return out.sort(pl.col("exposed_total_ns").fill_null(0), "pg", descending=[True, False])


def call_sizes(collectives: pl.DataFrame, steps: pl.DataFrame, groups: pl.DataFrame,
               rank_steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per (pg, op, bytes): calls, ranks, mean duration, exposed per rank-step of the group, bandwidth.
    ``rank_steps``: :func:`group_rank_steps` when the caller has it already."""
    coll = analyzed(collectives)
    out = _agg(coll, ["pg", "dimension", "tier", "op", "bytes"], bytes_col=False).join(
        coll.group_by("pg", "op", "bytes").agg(pl.col("rank").n_unique().alias("ranks")),
        on=["pg", "op", "bytes"], how="left", nulls_equal=True)
    per = (group_rank_steps(collectives, steps, groups) if rank_steps is None else rank_steps).drop("_steps_ns")
    return (out.join(per, on="pg", how="left")
            .with_columns(pl.col("rank_steps").fill_null(max(steps.height, 1)))
            .with_columns((pl.col("comm_ns") / pl.col("count")).alias("mean_ns"),
                          (pl.col("exposed_ns") / pl.col("rank_steps")).alias("exposed_ns_per_step"),
                          (pl.col("count") / pl.col("rank_steps")).alias("calls_per_step"))
            .sort("exposed_ns", "pg", "op", descending=[True, False, False]))


def dimension_tier(collectives: pl.DataFrame, steps: pl.DataFrame, pg_steps: pl.DataFrame,
                   groups: pl.DataFrame, keys: tuple[str, ...] = ("dimension", "tier")) -> pl.DataFrame:
    """Per (dimension, tier) — or per one of them — ops, bytes, comm, overlapped, exposed (wait and
    transfer) per rank-step over *all* analyzed rank-steps, exposed share of step time, busbw, efficiency."""
    ks = list(keys)
    coll = analyzed(collectives)
    rank_steps = max(steps.height, 1)
    step_ns = int((steps["end_ns"] - steps["start_ns"]).sum()) if steps.height else 0
    traffic = _agg(coll, ks).with_columns(pl.col(k).fill_null(UNKNOWN) for k in ks)
    time = (
        pg_steps.join(groups.select("pg", *ks), on="pg", how="left")
        .with_columns(pl.col(k).fill_null(UNKNOWN) for k in ks)
        .group_by(*ks)
        .agg(pl.col("comm_ns").sum().alias("_comm"), pl.col("overlapped_ns").sum().alias("_ovl"),
             pl.col("exposed_ns").sum().alias("_exp"), pl.col("exposed_wait_ns").sum().alias("_wait"))
    )
    n_groups = coll.group_by(*ks).agg(pl.col("pg").filter(pl.col("pg") != UNKNOWN).n_unique().alias("groups"))
    per = pl.lit(rank_steps)
    return (
        traffic.join(time, on=ks, how="full", coalesce=True)
        .join(n_groups, on=ks, how="left")
        .select(
            *ks,
            pl.col("groups").fill_null(0),
            (pl.col("count").fill_null(0) / per).alias("ops_per_step"),
            pl.col("bytes_unknown_calls").fill_null(0),
            (pl.col("bytes").fill_null(0) / per).alias("bytes_per_step"),
            (pl.col("_comm").fill_null(0) / per).alias("comm_ns_per_step"),
            (pl.col("_ovl").fill_null(0) / per).alias("overlapped_ns_per_step"),
            (pl.col("_exp").fill_null(0) / per).alias("exposed_ns_per_step"),
            (pl.col("_wait").fill_null(0) / per).alias("exposed_wait_ns_per_step"),
            ((pl.col("_exp").fill_null(0) - pl.col("_wait").fill_null(0)) / per).alias("exposed_transfer_ns_per_step"),
            (100.0 * pl.col("_exp").fill_null(0) / step_ns if step_ns else pl.lit(None, pl.Float64))
            .alias("exposed_pct_of_step"),
            "busbw_gbps",
            "peak_gbps",
            "efficiency",
        )
        .sort("exposed_ns_per_step", *ks, descending=[True] + [False] * len(ks))
    )


def stragglers(collectives: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank, over matched calls of analyzed steps: wait per step, the longest wait and where, how
    often it arrived last, and how much the others waited for it per step."""
    schema = {"rank": pl.Int32, "steps": pl.Int64, "wait_ns_per_step": pl.Int64, "max_wait_ns": pl.Int64,
              "max_wait_pg": pl.String, "max_wait_op": pl.String, "max_wait_call": pl.String,
              "max_wait_step": pl.Int64, "max_wait_late_rank": pl.Int32, "matched_calls": pl.Int64,
              "times_last": pl.Int64, "caused_wait_ns_per_step": pl.Int64}
    coll = analyzed(collectives).filter(pl.col("match_key").is_not_null())
    if coll.height == 0:
        return pl.DataFrame(schema=schema)
    n_steps = steps.group_by("rank").len().rename({"len": "steps"}).with_columns(pl.col("steps").cast(pl.Int64))
    worst = (coll.sort("wait_ns", "start_ns", descending=[True, False]).group_by("rank", maintain_order=True).first()
             .select("rank", pl.col("wait_ns").alias("max_wait_ns"), pl.col("pg").alias("max_wait_pg"),
                     pl.col("op").alias("max_wait_op"), pl.col("match_key").alias("max_wait_call"),
                     pl.col("step").alias("max_wait_step"), pl.col("late_rank").alias("max_wait_late_rank")))
    per_rank = coll.group_by("rank").agg(pl.col("wait_ns").sum().alias("_wait"), pl.len().alias("matched_calls"))
    last = (coll.filter(pl.col("arrival_skew_ns") > 0).select("match_key", "late_rank").unique()
            .group_by("late_rank").len().rename({"late_rank": "rank", "len": "times_last"}))
    caused = (coll.filter(pl.col("rank") != pl.col("late_rank")).group_by("late_rank")
              .agg(pl.col("wait_ns").sum().alias("_caused")).rename({"late_rank": "rank"}))
    out = (per_rank.join(n_steps, on="rank", how="left").join(worst, on="rank", how="left")
           .join(last, on="rank", how="left").join(caused, on="rank", how="left")
           .with_columns(pl.col("steps").fill_null(1).clip(1))
           .with_columns((pl.col("_wait") / pl.col("steps")).round().cast(pl.Int64).alias("wait_ns_per_step"),
                         (pl.col("_caused").fill_null(0) / pl.col("steps")).round().cast(pl.Int64)
                         .alias("caused_wait_ns_per_step"),
                         pl.col("times_last").fill_null(0)))
    return out.select(list(schema)).cast(schema).sort("rank")  # type: ignore[arg-type]


def rank_group_waits(collectives: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank and process group, over matched calls of analyzed steps: how long the rank waited for a
    later rank per step of its own (the skew page's group columns), its longest such wait and in which step."""
    schema = {"rank": pl.Int32, "pg": pl.String, "dimension": pl.String, "tier": pl.String,
              "matched_calls": pl.Int64, "wait_ns_per_step": pl.Int64, "max_wait_ns": pl.Int64,
              "max_wait_step": pl.Int64}
    coll = analyzed(collectives).filter(pl.col("match_key").is_not_null())
    if coll.height == 0:
        return pl.DataFrame(schema=schema)
    n_steps = steps.group_by("rank").len().rename({"len": "_steps"})
    out = (
        coll.sort("wait_ns", "start_ns", descending=[True, False])
        .group_by("rank", "pg", maintain_order=True)
        .agg(pl.col("dimension").first(), pl.col("tier").first(), pl.len().alias("matched_calls"),
             pl.col("wait_ns").sum().alias("_wait"), pl.col("wait_ns").first().alias("max_wait_ns"),
             pl.col("step").first().alias("max_wait_step"))
        .join(n_steps, on="rank", how="left")
        .with_columns((pl.col("_wait") / pl.col("_steps").fill_null(1).clip(1)).round().cast(pl.Int64)
                      .alias("wait_ns_per_step"))
    )
    return out.select(list(schema)).cast(schema).sort("pg", "rank")  # type: ignore[arg-type]


def group_waits(rank_group_waits: pl.DataFrame) -> pl.DataFrame:
    """Per process group, from ``rank_group_waits``: its members' mean wait for later ranks per step, the
    longest (and whose), the matched calls of its busiest member; the groups that wait most first (mean, then
    longest), ties by group id with numbers compared as numbers."""
    schema = {"pg": pl.String, "dimension": pl.String, "tier": pl.String, "ranks": pl.Int64,
              "wait_ns_per_step": pl.Float64, "max_wait_ns_per_step": pl.Int64, "max_wait_rank": pl.Int64,
              "matched_calls": pl.Int64}
    if rank_group_waits.height == 0:
        return pl.DataFrame(schema=schema)
    out = (rank_group_waits.sort("wait_ns_per_step", "rank", descending=[True, False])
           .group_by("pg", maintain_order=True)
           .agg(pl.col("dimension").first(), pl.col("tier").first(), pl.len().alias("ranks"),
                pl.col("wait_ns_per_step").mean().alias("wait_ns_per_step"),
                pl.col("wait_ns_per_step").first().alias("max_wait_ns_per_step"),
                pl.col("rank").first().alias("max_wait_rank"), pl.col("matched_calls").max()))
    number = pl.col("pg").str.extract(r"^(\d+)$").cast(pl.Int64, strict=False)
    return (out.with_columns(number.alias("_n"))
            .sort("wait_ns_per_step", "max_wait_ns_per_step", "_n", "pg", descending=[True, True, False, False],
                  nulls_last=True)
            .select(list(schema)).cast(schema))  # type: ignore[arg-type]
