"""The analysis of a run: a short, named list of steps over a :class:`RunTables`, giving one
:class:`Analysis` that holds every number any view shows (views only select and format).

    skew → sanity → overlap → tiers → dimensions → efficiency → summaries → findings

(the traffic matrix and the per-group waits are made when first read: see :class:`Analysis`)

Each step reads what the earlier ones made and adds its own frames; none reads a file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from commprof.analyzers import summaries as sm
from commprof.analyzers.bandwidth import busbw_factor_expr, gbps
from commprof.analyzers.classify import check_layout, classify_dimensions
from commprof.analyzers.distribution import rank_distribution
from commprof.analyzers.efficiency import efficiency_expr, with_peaks
from commprof.analyzers.findings import Finding, findings_frame, rank_findings
from commprof.analyzers.fr_seq import seq_from_flight_recorder
from commprof.analyzers.group_tiers import TierSettings, group_tiers
from commprof.analyzers.hang import HangReport, hang_report
from commprof.analyzers.library_groups import group_rows, with_library_groups
from commprof.analyzers.overlap import (
    PG_STEPS_SCHEMA,
    SPANS_SCHEMA,
    STEPS_SCHEMA,
    OverlapSettings,
    RankOverlap,
    stack,
)
from commprof.analyzers.overlap_batches import analyze_ranks
from commprof.analyzers.ras import RasReport, ras_report
from commprof.analyzers.sanity import DOUBTFUL_SCHEMA, check_ranks
from commprof.analyzers.settings import AnalysisSettings
from commprof.analyzers.skew import HOST_CLOCKS, analyze_skew
from commprof.analyzers.traffic import traffic_matrix
from commprof.analyzers.uncounted import SCHEMA as UNCOUNTED_SCHEMA
from commprof.analyzers.uncounted import summarize as summarize_uncounted
from commprof.analyzers.uncounted import warning as uncounted_warning
from commprof.analyzers.whatif import WhatIf
from commprof.ingest.runner import LocalPool, ProgressFn, Runner
from commprof.ingest.tables import RunFacts, RunTables
from commprof.stages import timed
from commprof.vocab import UNKNOWN

if TYPE_CHECKING:  # the findings modules load with the findings step (lazily, like the rules)
    from commprof.analyzers.exposed import ExposedNote


@dataclass(frozen=True)
class Analysis:
    """Everything ``analyze`` knows about a run. Frames are polars; ns are integers or means."""

    settings: AnalysisSettings
    facts: RunFacts
    tables: RunTables  # what it was computed from (the timeline and export draw raw intervals)
    ranks: pl.DataFrame
    process_groups: pl.DataFrame  # classified: dimension, tier, their sources, peak_gbps
    steps: pl.DataFrame  # rank, step, the five parts, and exposed wait/transfer
    collectives: pl.DataFrame  # one row per rank and call: step, shares, skew, dimension, tier, bandwidth
    pg_steps: pl.DataFrame  # rank, step, pg: comm, overlapped, exposed, exposed wait
    exposed_spans: pl.DataFrame  # rank, start_ns, end_ns: comm running with no compute
    host_clocks: pl.DataFrame  # host, offset_ns, residual_ns, calls_used, fit
    match_by: str  # how calls were matched across ranks: seq | order | seq and order | none
    unmatched_calls: int
    rank_summary: pl.DataFrame
    rank_distribution: pl.DataFrame  # per figure of rank_summary: min, p10, median, p90, max over the ranks
    totals: dict[str, Any]
    group_summary: pl.DataFrame
    collectives_summary: pl.DataFrame
    call_sizes: pl.DataFrame
    dimension_tier: pl.DataFrame
    by_dimension: pl.DataFrame
    by_tier: pl.DataFrame
    stragglers: pl.DataFrame
    warnings: tuple[str, ...]
    # ranks whose clock or run identity is in doubt (analyzers/sanity.py): rank, check, reason; no finding
    # that blames a rank rests on their calls
    doubtful_ranks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=DOUBTFUL_SCHEMA))
    # ranked: severity, then estimated saving (analyzers/findings.py); findings_computed is False when the
    # run has nothing the rules can judge (no analyzed step), so a check gate says "skip", not "pass"
    finding_list: tuple[Finding, ...] = ()
    findings_computed: bool = False
    what_if: WhatIf | None = None  # the --what-if estimate, when changes were asked for
    # where the exposed comm goes, when it is a large share of the step and no finding names a cause
    exposed_note: ExposedNote | None = None
    hang: HangReport | None = None  # from Flight Recorder dumps beside the traces (analyzers/hang.py)
    # kernels that read like communication but no rule counts, the largest by time first (analyzers/uncounted.py)
    uncounted: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=UNCOUNTED_SCHEMA))

    # Made when first read (the dashboard's skew and topology pages): no report, rule or text view reads
    # them, so `analyze` does not pay their queries (issue 24). Each is computed from frames of the analysis
    # (collectives, process_groups, steps), as the steps computed them before.
    @cached_property
    def findings(self) -> pl.DataFrame:
        """The ranked findings as a table, one row each (columns in docs/notebook.md; ``finding_list`` holds them
        as objects, with their numbers)."""
        frame: pl.DataFrame = findings_frame(self.finding_list)
        return frame

    def _repr_html_(self) -> str:
        """In a notebook: the HTML report's findings, headline and tables (commprof/notebook.py shows it; the
        analysis itself knows nothing of HTML)."""
        from commprof.notebook import analysis_html

        return analysis_html(self)

    @cached_property
    def rank_group_waits(self) -> pl.DataFrame:
        """rank, pg: wait for later ranks per step (the skew page's columns)."""
        waits: pl.DataFrame = sm.rank_group_waits(sm.analyzed(self.collectives), self.steps)
        return waits

    @cached_property
    def _traffic(self) -> tuple[pl.DataFrame, int]:
        matrix: tuple[pl.DataFrame, int] = traffic_matrix(self.collectives, self.process_groups, self._n_steps)
        return matrix

    @cached_property
    def host_pairs(self) -> pl.DataFrame:
        """host_a, host_b, groups, calls, busbw_gbps, tier: what each pair of hosts reached
        (analyzers/host_pairs.py)."""
        from commprof.analyzers.host_pairs import host_pairs

        pairs: pl.DataFrame = host_pairs(self.collectives, self.process_groups, self.ranks)
        return pairs

    @cached_property
    def host_summary(self) -> pl.DataFrame:
        """Per host, worst first: its ranks' step and exposed time, the rank the others wait for, the bytes it
        moves inside and to other hosts, its port rate (analyzers/hosts.py); the views' rows past a few
        hundred ranks."""
        from commprof.analyzers.hosts import host_summary

        frame: pl.DataFrame = host_summary(self.ranks, self.rank_summary, self.stragglers, self.collectives,
                                           self.process_groups, self.tables.sidecars.ib_ports, self._n_steps)
        return frame

    @cached_property
    def group_waits(self) -> pl.DataFrame:
        """Per process group, the groups that wait most first: its members' mean and longest wait per step
        (summaries.group_waits over :attr:`rank_group_waits`)."""
        frame: pl.DataFrame = sm.group_waits(self.rank_group_waits)
        return frame

    def host_traffic(self, hosts: list[str] | None = None) -> tuple[pl.DataFrame, int]:
        """:attr:`traffic` summed per host pair without rank pairs; ``hosts``: those apart and the rest as one
        (traffic.OTHER_HOSTS). Also the calls left out (their group's ranks unknown). Not cached: a view asks
        for the few hosts it shows."""
        from commprof.analyzers.traffic import host_traffic

        out: tuple[pl.DataFrame, int] = host_traffic(self.collectives, self.process_groups, self.ranks,
                                                     self._n_steps, hosts)
        return out

    @property
    def _n_steps(self) -> int:
        return int(self.steps["step"].n_unique()) if self.steps.height else 1

    @property
    def traffic(self) -> pl.DataFrame:
        """src, dst, dimension, tier, bytes_per_step (analyzers/traffic.py)."""
        return self._traffic[0]

    @property
    def traffic_left_out(self) -> int:
        """Calls left out of :attr:`traffic`: their group's ranks are unknown."""
        return self._traffic[1]

    def top_collectives(self, n: int | None = None) -> pl.DataFrame:
        """The (pg, op, bytes) rows that cost the most exposed time."""
        return self.call_sizes.head(n or self.settings.top)

    @property
    def steps_analyzed(self) -> int:
        return int(self.steps["step"].n_unique()) if self.steps.height else 0

    @cached_property
    def ras(self) -> RasReport | None:
        """The hang report from NCCL RAS status reports beside the traces (analyzers/ras.py); None without any."""
        side = self.tables.sidecars
        return ras_report(side.ras_groups, side.ras_counts, side.ras_notes)


@dataclass
class _Work:
    """What the steps hand on to each other."""

    tables: RunTables
    settings: AnalysisSettings
    warnings: list[str]
    runner: Runner
    progress: ProgressFn | None = None
    collectives: pl.DataFrame = field(default_factory=pl.DataFrame)
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STEPS_SCHEMA))
    pg_steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PG_STEPS_SCHEMA))
    spans: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SPANS_SCHEMA))
    host_clocks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HOST_CLOCKS))
    match_by: str = "none"
    unmatched: int = 0
    groups: pl.DataFrame = field(default_factory=pl.DataFrame)
    doubtful: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=DOUBTFUL_SCHEMA))
    out: dict[str, Any] = field(default_factory=dict)


def step_skew(w: _Work) -> None:
    # calls without a seq take it from the Flight Recorder dumps beside the traces, where they align
    collectives, notes = seq_from_flight_recorder(w.tables.collectives, w.tables.sidecars.flight_recorder)
    w.warnings.extend(notes)
    # library kernels in no process group (and families the user declared): a group per library
    collectives = with_library_groups(collectives, w.tables.declared)
    skew = analyze_skew(collectives, w.tables.ranks)
    w.collectives = collectives.join(skew.calls, on=["rank", "call"], how="left")
    w.host_clocks, w.match_by, w.unmatched = skew.host_clocks, skew.match_by, skew.unmatched
    unaligned = skew.host_clocks.filter(~pl.col("fit").is_in(["reference", "aligned", "single host"]))
    if unaligned.height:
        w.warnings.append(f"{unaligned.height} host(s) share no matched collective with other hosts; their "
                          f"clocks are not aligned ({', '.join(unaligned['host'].to_list()[:4])})")


def step_sanity(w: _Work) -> None:
    """Ranks whose clock or run identity is in doubt, before any rule can blame them."""
    sanity = check_ranks(w.tables.step_marks, w.host_clocks, w.tables.ranks, w.tables.facts.rank_ends)
    w.doubtful = sanity.doubtful
    w.warnings.extend(sanity.warnings)


def step_overlap(w: _Work) -> None:
    """Per-rank overlap on the runner, several ranks to a task (analyzers/overlap_batches.py; each task reads its
    own ranks' intervals); the results are put together here in rank order, so every runner gives the same
    frames. A rank whose analysis fails is left out with a warning; the others are analyzed."""
    settings = OverlapSettings(hta_compat=w.settings.hta_compat)
    files = w.tables.interval_files
    outcomes = analyze_ranks(files, w.collectives, w.tables.step_marks, settings, w.runner, w.progress)
    steps, colls, pg_steps, spans = [], [], [], []
    for (rank, _), outcome in zip(files, outcomes, strict=True):
        if outcome.error is not None:
            w.warnings.append(f"rank {rank}: its analysis failed ({outcome.error}); the rank is left out")
            continue
        result: RankOverlap = outcome.value
        steps.append(result.steps)
        colls.append(result.collectives)
        pg_steps.append(result.pg_steps)
        spans.append(result.exposed_spans)
        w.warnings.extend(result.warnings)
    if colls:
        w.collectives = pl.concat(colls, how="vertical_relaxed")
    if steps:
        w.steps, w.pg_steps = stack(steps, STEPS_SCHEMA), stack(pg_steps, PG_STEPS_SCHEMA)
        w.spans = stack(spans, SPANS_SCHEMA)


def _pg_ops(collectives: pl.DataFrame) -> dict[str, set[str]]:
    if collectives.height == 0:
        return {}
    ops = collectives.filter(pl.col("pg").is_not_null()).group_by("pg").agg(pl.col("op").unique())
    return {r["pg"]: set(r["op"]) for r in ops.iter_rows(named=True)}


def step_tiers(w: _Work) -> None:
    s = w.settings
    switches = dict(s.switches) or w.tables.sidecars.leaf_switches()
    tiers, warnings = group_tiers(
        w.tables.process_groups, w.tables.ranks, w.tables.sidecars.communicators(),
        w.tables.sidecars.host_topologies(), TierSettings(s.network, s.gpus_per_node, switches),
        _pg_ops(w.collectives))
    w.warnings.extend(warnings)
    w.groups = w.tables.process_groups.join(tiers, on="pg", how="left")


def step_dimensions(w: _Work) -> None:
    if w.settings.layout is not None:
        check_layout(w.settings.layout, w.tables.facts.world_size)
    w.groups = classify_dimensions(w.groups, w.collectives, w.steps, w.tables.facts.world_size,
                                   w.settings.layout, w.groups["nodes_spanned"].to_list())
    w.groups = group_rows(w.collectives, w.groups, w.settings.network, w.tables.declared)


def step_efficiency(w: _Work) -> None:
    gpu_name = next(iter(w.tables.ranks["gpu_name"].drop_nulls().to_list()), None)
    # a CPU run's links are TCP paced by its cores: a NIC's default peak would read as a 0 % efficiency
    cpu_run = "gpu" not in set(w.tables.ranks["mode"].drop_nulls().to_list()) if "mode" in w.tables.ranks.columns \
        else False
    pgs = with_peaks(w.groups, gpu_name, w.settings.peaks, defaults=not cpu_run)
    order = ["pg", "desc", "ranks", "size", "backend", "dimension", "dimension_source", "confidence", "tier",
             "tier_source", "nodes_spanned"]
    w.groups = pgs.select(order + [c for c in pgs.columns if c not in order])
    if "pg" not in w.collectives.columns:
        return
    w.collectives = _with_group_columns(w.collectives, w.groups)
    unknown = w.collectives.filter(pl.col("bytes").is_null() & (pl.col("op") != "barrier")).height
    if unknown:
        w.warnings.append(f"{unknown} of {w.collectives.height} collectives carry no message size in the trace "
                          "(no 'In msg nelems'/'Input Dims'); their bytes and bandwidth are unknown")


def step_summaries(w: _Work) -> None:
    c, st, pgs = w.collectives, w.steps, w.groups
    if "dimension" not in c.columns:  # a run without any collective
        c = _with_group_columns(_empty_calls(), pgs)
        w.collectives = c
    ranks = sm.rank_summary(st)
    c = sm.analyzed(c)  # the calls of analyzed steps, with bandwidth inputs: once for every summary
    rank_steps = sm.group_rank_steps(c, st, pgs)  # each group's rank-steps: the per-group denominators
    w.out.update(
        rank_summary=ranks, totals=sm.totals(ranks), rank_distribution=rank_distribution(ranks),
        group_summary=sm.group_summary(c, st, w.pg_steps, pgs, rank_steps),
        collectives_summary=sm.collectives_summary(c),
        call_sizes=sm.call_sizes(c, st, pgs, rank_steps),
        dimension_tier=sm.dimension_tier(c, st, w.pg_steps, pgs),
        by_dimension=sm.dimension_tier(c, st, w.pg_steps, pgs, ("dimension",)),
        by_tier=sm.dimension_tier(c, st, w.pg_steps, pgs, ("tier",)),
        stragglers=sm.stragglers(c, st),
    )


STEPS: tuple[tuple[str, Callable[[_Work], None]], ...] = (
    ("skew", step_skew), ("sanity", step_sanity), ("overlap", step_overlap), ("tiers", step_tiers),
    ("dimensions", step_dimensions),
    ("efficiency", step_efficiency), ("summaries", step_summaries),
)


def analyze(tables: RunTables, settings: AnalysisSettings | None = None, runner: Runner | None = None,
            progress: ProgressFn | None = None) -> Analysis:
    """The analysis of ``tables``. The per-rank step runs on ``runner`` (by default a local process
    pool, used only when the run is big enough to pay for it); every runner gives the same result."""
    settings = settings or AnalysisSettings()
    own = runner or LocalPool()
    w = _Work(tables, settings, list(tables.warnings), own, progress, collectives=tables.collectives)
    uncounted_kernels = summarize_uncounted(tables.uncounted)
    if (note := uncounted_warning(uncounted_kernels)) is not None:
        w.warnings.append(note)
    try:
        for name, step in STEPS:
            with timed(f"analysis.{name}"):
                step(w)
    finally:
        if runner is None:
            own.close()
    analysis = Analysis(
        settings=settings, facts=tables.facts, tables=tables, ranks=tables.ranks, process_groups=w.groups,
        steps=w.steps, collectives=w.collectives, pg_steps=w.pg_steps, exposed_spans=w.spans,
        host_clocks=w.host_clocks, match_by=w.match_by, unmatched_calls=w.unmatched,
        warnings=tuple(w.warnings), doubtful_ranks=w.doubtful, uncounted=uncounted_kernels,
        hang=hang_report(tables.sidecars.flight_recorder, tables.sidecars.flight_recorder_groups), **w.out,
    )
    with timed("analysis.findings"):
        return step_findings(analysis)


def step_findings(analysis: Analysis) -> Analysis:
    """The last step reads the finished analysis (the rules judge its frames, they compute no figure the
    views show otherwise) and returns it with the ranked findings."""
    from commprof.analyzers import whatif
    from commprof.analyzers.exposed import exposed_note
    from commprof.analyzers.findings_rules import Ctx, find

    found, computed, notes = find(analysis)
    note = exposed_note(Ctx(analysis), found) if computed else None
    analysis = replace(analysis, finding_list=rank_findings(found), findings_computed=computed, exposed_note=note,
                       warnings=(*analysis.warnings, *notes))
    if not analysis.settings.what_if:
        return analysis
    changes = [whatif.parse_change(t) for t in analysis.settings.what_if]
    late = {f.ranks[0]: float(f.numbers.get("late_ns_per_step", 0)) for f in analysis.finding_list
            if f.id == "straggler" and f.ranks}
    estimate = whatif.estimate(analysis, changes, late)
    return replace(analysis, what_if=replace(estimate, checked=whatif.checked(changes, whatif._gpu_run(analysis))))


def _empty_calls() -> pl.DataFrame:
    from commprof.ingest.schema import COLLECTIVES

    return pl.DataFrame(schema={**COLLECTIVES, "call": pl.Int64, "step": pl.Int64, "overlapped_ns": pl.Float64,
                                "exposed_ns": pl.Float64, "exposed_wait_ns": pl.Float64, "match_key": pl.String,
                                "match_by": pl.String, "matched_ranks": pl.Int32, "arrival_skew_ns": pl.Int64,
                                "wait_ns": pl.Int64, "transfer_ns": pl.Int64, "late_rank": pl.Int32})


def _with_group_columns(collectives: pl.DataFrame, pgs: pl.DataFrame) -> pl.DataFrame:
    """Fill group size from the process group, attach dimension/tier/peak, compute algbw/busbw per call
    over its transfer time (DESIGN §3: the call minus its wait for later ranks; ``BANDWIDTH_CONVENTION``).
    Calls matched on one rank only have no wait: all of such a call is transfer."""
    info = pgs.select("pg", pl.col("size").alias("_pg_size"), "dimension", "tier", "peak_gbps")
    dur = pl.col("end_ns") - pl.col("start_ns")
    out = (
        collectives.join(info, on="pg", how="left")
        .with_columns(
            pl.col("group_size").fill_null(pl.col("_pg_size")).cast(pl.Int32),
            pl.col("dimension").fill_null(UNKNOWN),
            pl.col("tier").fill_null(UNKNOWN),
            pl.col("pg").fill_null(UNKNOWN),
            pl.col("wait_ns").fill_null(0),
            pl.col("transfer_ns").fill_null(dur),
        )
        .drop("_pg_size")
    )
    factor = busbw_factor_expr(pl.col("op"), pl.col("group_size").cast(pl.Float64))
    transfer = pl.col("transfer_ns")
    return out.with_columns(
        gbps(pl.col("bytes"), transfer).alias("algbw_gbps"),
        (gbps(pl.col("bytes"), transfer) * factor).alias("busbw_gbps"),
    ).with_columns(efficiency_expr(pl.col("busbw_gbps"), pl.col("peak_gbps")).alias("efficiency"))
