"""Run-level analysis: the overlap core over every rank, then the summaries the reports print."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from commprof.analyzers.bandwidth import busbw_factor_expr, gbps
from commprof.analyzers.classify import Layout, check_layout, classify_dimensions
from commprof.analyzers.efficiency import efficiency_expr, with_peaks
from commprof.analyzers.group_tiers import TierSettings, group_tiers
from commprof.analyzers.overlap import PG_STEPS_SCHEMA, STEPS_SCHEMA, OverlapSettings, analyze_rank

if TYPE_CHECKING:
    from commprof.run import Run

UNKNOWN = "unknown"


@dataclass(frozen=True)
class AnalysisSettings:
    hta_compat: bool = False
    top: int = 10
    layout: Layout | None = None  # --layout: decides dimensions before names and structure
    network: str | None = None  # --network ib|roce|ethernet: groups across nodes when nothing else says
    gpus_per_node: int | None = None  # --gpus-per-node: hosts = rank // N when traces carry none
    peaks: dict[str, float] = field(default_factory=dict)  # --peak: GB/s per tier, over the defaults


@dataclass
class Analysis:
    """Everything ``analyze`` knows about a run, as polars frames."""

    settings: AnalysisSettings
    ranks: pl.DataFrame  # the ranks table
    steps: pl.DataFrame  # one row per rank and step: the five parts
    collectives: pl.DataFrame  # one row per rank and collective call, with analyzer columns
    pg_steps: pl.DataFrame  # per rank, step and process group: comm, overlapped, exposed
    process_groups: pl.DataFrame
    warnings: list[str] = field(default_factory=list)

    def rank_summary(self) -> pl.DataFrame:
        """Per rank: steps analyzed, mean per-step parts (ns) and overlap %."""
        parts = ["compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"]
        return (
            self.steps.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("step_ns"))
            .group_by("rank")
            .agg(
                pl.len().alias("steps"),
                pl.col("step_ns").mean().round().cast(pl.Int64),
                *[pl.col(c).mean().round().cast(pl.Int64) for c in parts],
                pl.col("overlapped_comm_ns").sum().alias("_ovl"),
                pl.col("exposed_comm_ns").sum().alias("_exp"),
            )
            .with_columns(
                pl.when(pl.col("_ovl") + pl.col("_exp") > 0)
                .then(100.0 * pl.col("_ovl") / (pl.col("_ovl") + pl.col("_exp")))
                .alias("overlap_pct")
            )
            .drop("_ovl", "_exp")
            .sort("rank")
        )

    def _analyzed(self) -> pl.DataFrame:
        return self.collectives.filter(pl.col("step").is_not_null())

    def collectives_summary(self) -> pl.DataFrame:
        """Per process group and op, over all ranks and analyzed steps."""
        return _bandwidth_agg(self._analyzed().group_by("pg", "dimension", "tier", "op")).sort(
            "exposed_ns", descending=True
        )

    def top_collectives(self, n: int | None = None) -> pl.DataFrame:
        """The calls that cost the most exposed time, grouped by (pg, op, bytes)."""
        return (
            _bandwidth_agg(self._analyzed().group_by("pg", "dimension", "tier", "op", "bytes"), bytes_col=False)
            .sort("exposed_ns", descending=True)
            .head(n or self.settings.top)
        )

    def pg_summary(self) -> pl.DataFrame:
        """Per process group: op mix, bytes, comm and exposed time per rank-step, bus bandwidth."""
        coll = self._analyzed()
        rank_steps = max(self.steps.height, 1)
        per_pg = (
            coll.group_by("pg")
            .agg(
                pl.col("rank").n_unique().alias("ranks_seen"),
                pl.col("bytes").sum().alias("bytes_total"),
                pl.col("op").value_counts(sort=True).alias("op_mix"),
                *_bw_exprs(),
            )
        )
        steps_per_rank = self.steps.group_by("rank").len().rename({"len": "n_steps"})
        pg_rank_steps = (
            coll.select("pg", "rank").unique().join(steps_per_rank, on="rank")
            .group_by("pg").agg(pl.col("n_steps").sum().alias("rank_steps"))
        )
        pg_time = self.pg_steps.group_by("pg").agg(
            pl.col("comm_ns").sum().alias("comm_share_ns"),
            pl.col("overlapped_ns").sum().alias("overlapped_total_ns"),
            pl.col("exposed_ns").sum().alias("exposed_total_ns"),
        )
        out = (
            self.process_groups.join(per_pg, on="pg", how="full", coalesce=True)
            .join(pg_rank_steps, on="pg", how="left")
            .join(pg_time, on="pg", how="left")
            .with_columns(pl.col("rank_steps").fill_null(rank_steps))
            .with_columns(
                (pl.col("bytes_total") / pl.col("rank_steps")).alias("bytes_per_step"),
                (pl.col("comm_share_ns") / pl.col("rank_steps")).alias("comm_ns_per_step"),
                (pl.col("exposed_total_ns") / pl.col("rank_steps")).alias("exposed_ns_per_step"),
            )
        )
        return out.sort(pl.col("exposed_total_ns").fill_null(0), descending=True)

    def dimension_tier(self) -> pl.DataFrame:
        """Per (dimension, tier): ops, bytes, comm and exposed time per rank-step (averaged over *all*
        analyzed rank-steps, so the rows' exposed shares add up to the run's exposed share of the step),
        exposed share of step time (%), time-weighted busbw and efficiency."""
        coll = self._analyzed()
        rank_steps = max(self.steps.height, 1)
        step_ns = (self.steps["end_ns"] - self.steps["start_ns"]).sum() if self.steps.height else 0
        keys = ["dimension", "tier"]
        groups = self.process_groups.select("pg", *keys)
        traffic = _bandwidth_agg(coll.group_by(*keys)).with_columns(
            pl.col(k).fill_null(UNKNOWN) for k in keys)
        time = (
            self.pg_steps.join(groups, on="pg", how="left")
            .with_columns(pl.col(k).fill_null(UNKNOWN) for k in keys)
            .group_by(*keys)
            .agg(pl.col("comm_ns").sum().alias("_comm"), pl.col("exposed_ns").sum().alias("_exposed"))
        )
        n_groups = coll.group_by(*keys).agg(pl.col("pg").filter(pl.col("pg") != UNKNOWN).n_unique().alias("groups"))
        return (
            traffic.join(time, on=keys, how="full", coalesce=True)
            .join(n_groups, on=keys, how="left")
            .select(
                *keys,
                pl.col("groups").fill_null(0),
                (pl.col("count").fill_null(0) / rank_steps).alias("ops_per_step"),
                (pl.col("bytes").fill_null(0) / rank_steps).alias("bytes_per_step"),
                (pl.col("_comm").fill_null(0) / rank_steps).alias("comm_ns_per_step"),
                (pl.col("_exposed").fill_null(0) / rank_steps).alias("exposed_ns_per_step"),
                (100.0 * pl.col("_exposed").fill_null(0) / step_ns if step_ns else pl.lit(None, pl.Float64))
                .alias("exposed_pct_of_step"),
                "busbw_gbps",
                "efficiency",
            )
            .sort("exposed_ns_per_step", *keys, descending=[True, False, False])
        )


def _bw_exprs() -> list[pl.Expr]:
    n = pl.col("group_size").cast(pl.Float64)
    dur = pl.col("end_ns") - pl.col("start_ns")
    factor = busbw_factor_expr(pl.col("op"), n)
    return [
        pl.len().alias("count"),
        dur.sum().alias("comm_ns"),
        pl.col("overlapped_ns").sum(),
        pl.col("exposed_ns").sum(),
        # time-weighted: total bytes moved over total time, over calls whose bytes are known
        gbps(pl.col("bytes").filter(pl.col("bytes").is_not_null()).sum(),
             dur.filter(pl.col("bytes").is_not_null()).sum()).alias("algbw_gbps"),
        gbps((pl.col("bytes") * factor).filter(factor.is_not_null()).sum(),
             dur.filter(pl.col("bytes").is_not_null() & factor.is_not_null()).sum()).alias("busbw_gbps"),
        _efficiency_agg(factor, dur),
    ]


def _efficiency_agg(factor: pl.Expr, dur: pl.Expr) -> pl.Expr:
    """Time-weighted busbw / peak over calls whose bytes, factor and peak are known: equal to
    busbw_gbps / peak_gbps when the calls share one peak."""
    if_known = pl.col("bytes").is_not_null() & factor.is_not_null() & (pl.col("peak_gbps") > 0)
    eff = gbps((pl.col("bytes") * factor / pl.col("peak_gbps")).filter(if_known).sum(), dur.filter(if_known).sum())
    return pl.when(eff.is_nan()).then(None).otherwise(eff).alias("efficiency")


def _bandwidth_agg(grouped: pl.dataframe.group_by.GroupBy, bytes_col: bool = True) -> pl.DataFrame:
    exprs = _bw_exprs()
    if bytes_col:
        exprs.insert(1, pl.col("bytes").sum().alias("bytes"))
    out = grouped.agg(*exprs)
    return out.with_columns(
        pl.when(pl.col("busbw_gbps").is_nan()).then(None).otherwise(pl.col("busbw_gbps")).alias("busbw_gbps"),
        pl.when(pl.col("algbw_gbps").is_nan()).then(None).otherwise(pl.col("algbw_gbps")).alias("algbw_gbps"),
    )


def _classified_groups(
    run: Run, settings: AnalysisSettings | None = None, collectives: pl.DataFrame | None = None,
    steps: pl.DataFrame | None = None, warnings: list[str] | None = None,
) -> pl.DataFrame:
    """Process groups with their tier (analyzers/group_tiers.py), dimension (analyzers/classify.py) and the
    tier's peak bandwidth (analyzers/efficiency.py)."""
    settings = settings or AnalysisSettings()
    world = run.world_size
    if settings.layout is not None:
        check_layout(settings.layout, world)
    pgs: pl.DataFrame = run.process_groups
    pg_ops: dict[str, set[str]] = {}
    if collectives is not None and collectives.height:
        ops = collectives.filter(pl.col("pg").is_not_null()).group_by("pg").agg(pl.col("op").unique())
        pg_ops = {r["pg"]: set(r["op"]) for r in ops.iter_rows(named=True)}
    tiers, tier_warnings = group_tiers(
        pgs, run.ranks, run.path if run.path.is_dir() else None,
        TierSettings(settings.network, settings.gpus_per_node), world, pg_ops,
    )
    if warnings is not None:
        warnings.extend(tier_warnings)
    pgs = pgs.join(tiers, on="pg", how="left")
    pgs = classify_dimensions(pgs, collectives, steps, world, settings.layout, pgs["nodes_spanned"].to_list())
    gpu_name = next(iter(run.ranks["gpu_name"].drop_nulls().to_list()), None)
    pgs = with_peaks(pgs, gpu_name, settings.peaks)
    order = ["pg", "desc", "ranks", "size", "backend", "dimension", "dimension_source", "confidence", "tier",
             "tier_source", "nodes_spanned"]
    return pgs.select(order + [c for c in pgs.columns if c not in order])


def analyze(run: Run, settings: AnalysisSettings) -> Analysis:
    overlap_settings = OverlapSettings(hta_compat=settings.hta_compat)
    warnings = list(run.warnings)
    steps, colls, pg_steps = [], [], []
    tables = zip(run.rank_tables("intervals"), run.rank_tables("collectives"), run.rank_tables("step_marks"),
                 strict=True)
    for (rf, intervals), (_, collectives), (_, marks) in tables:
        result = analyze_rank(rf.rank, intervals, collectives, marks, overlap_settings)
        steps.append(result.steps)
        colls.append(result.collectives)
        pg_steps.append(result.pg_steps)
        warnings.extend(result.warnings)
    collectives = pl.concat(colls, how="vertical_relaxed") if colls else pl.DataFrame()
    steps_frame = pl.concat(steps) if steps else pl.DataFrame(schema=STEPS_SCHEMA)
    pgs = _classified_groups(run, settings, collectives, steps_frame, warnings)
    if "pg" in collectives.columns:  # also when empty: summaries need the analyzer columns
        collectives = _with_group_columns(collectives, pgs)
        unknown_bytes = collectives.filter(pl.col("bytes").is_null() & (pl.col("op") != "barrier")).height
        if unknown_bytes:
            warnings.append(
                f"{unknown_bytes} of {collectives.height} collectives carry no message size in the trace "
                "(no 'In msg nelems'/'Input Dims'); their bytes and bandwidth are unknown"
            )
    return Analysis(
        settings=settings,
        ranks=run.ranks,
        steps=steps_frame,
        collectives=collectives,
        pg_steps=pl.concat(pg_steps) if pg_steps else pl.DataFrame(schema=PG_STEPS_SCHEMA),
        process_groups=pgs,
        warnings=warnings,
    )


def _with_group_columns(collectives: pl.DataFrame, pgs: pl.DataFrame) -> pl.DataFrame:
    """Fill group size from the process group, attach dimension/tier, compute algbw/busbw per call."""
    info = pgs.select("pg", pl.col("size").alias("_pg_size"), "dimension", "tier", "peak_gbps")
    out = (
        collectives.join(info, on="pg", how="left")
        .with_columns(
            pl.col("group_size").fill_null(pl.col("_pg_size")).cast(pl.Int32),
            pl.col("dimension").fill_null(UNKNOWN),
            pl.col("tier").fill_null(UNKNOWN),
            pl.col("pg").fill_null(UNKNOWN),
        )
        .drop("_pg_size")
    )
    dur = pl.col("end_ns") - pl.col("start_ns")
    factor = busbw_factor_expr(pl.col("op"), pl.col("group_size").cast(pl.Float64))
    return out.with_columns(
        gbps(pl.col("bytes"), dur).alias("algbw_gbps"),
        (gbps(pl.col("bytes"), dur) * factor).alias("busbw_gbps"),
    ).with_columns(efficiency_expr(pl.col("busbw_gbps"), pl.col("peak_gbps")).alias("efficiency"))
