"""The pictures of a report: the dashboard's own figures (charts.py), fed from the analyze report dict where it holds
their numbers (step time per rank, dimension × tier), and from the run's analysis for what the JSON does not hold
(one step's timeline across ranks, the waits in one group, the topology), chosen as the dashboard chooses its
first view: the top finding's ranks and groups, else the late rank's, else the ranks with the most exposed comm.

Sizes stay bounded whatever the run's size: the timeline shows at most ``TIMELINE_RANKS`` ranks of one step, the
skew heatmap at most ``SKEW_COLUMNS`` calls of one group, the topology rolls ranks up to hosts (charts.py), and past
``AGGREGATE_ABOVE_RANKS`` ranks draws the hosts first in line and every other host summed, as the dashboard does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import polars as pl

from commprof.figures import charts, transforms
from commprof.figures.hosts import AGGREGATE_ABOVE_RANKS, host_topology_figure, hosts_drawing
from commprof.figures.style import group_label, natural_key
from commprof.figures.topology import topology_figure

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

TIMELINE_RANKS = 8
TIMELINE_BINS = 400
SKEW_COLUMNS = 60


@dataclass(frozen=True)
class Picture:
    key: str  # breakdown | dimension_tier | timeline | skew | topology | compare
    caption: str  # what to look at, one line
    figure: go.Figure


# ---------------------------------------------------------------- from the report dict
def report_pictures(report: dict[str, Any]) -> list[Picture]:
    """What the report dict alone draws: its numbers are the JSON's."""
    out = []
    ranks = report.get("ranks") or []
    if ranks:
        frame = pl.DataFrame(ranks, infer_schema_length=None).select("rank", *charts.PARTS)
        out.append(Picture("breakdown", "Each rank's mean step split into compute, overlapped and exposed comm, "
                           "memory and idle: a rank whose exposed part is short is often the one the others wait for.",
                           charts.breakdown_figure(frame, "Mean step time per rank, split into its five parts")))
    rows = report.get("dimension_tier") or []
    if rows:
        frame = pl.DataFrame(rows, infer_schema_length=None).select(
            "dimension", "tier", "exposed_transfer_ns_per_step", "exposed_wait_ns_per_step", "overlapped_ns_per_step")
        out.append(Picture("dimension_tier", "Which parallel dimension costs step time, on which link: the table "
                           "'Communication by dimension and tier' below has the same numbers.",
                           charts.dimension_tier_figure(frame)))
    return out


def compare_picture(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> Picture:
    """Two reports' ms per rank-step side by side (the dashboard's compare figure, from the reports' numbers)."""
    values = [transforms.compare_metrics(r.get("totals") or {}, _frame(r.get("dimensions"), "dimension"),
                                         _frame(r.get("tiers"), "tier")) for r in (a, b)]
    deltas = transforms.compare(values[0], values[1])
    return Picture("compare", "The same metric of both runs, A above B.", charts.compare_figure(deltas, name_a, name_b))


def _frame(rows: list[dict[str, Any]] | None, key: str) -> pl.DataFrame:
    schema = {key: pl.String, "exposed_ns_per_step": pl.Float64, "bytes_per_step": pl.Float64,
              "busbw_gbps": pl.Float64}
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows or []], schema=schema)


# ---------------------------------------------------------------- from the analysis
def run_pictures(analysis: Analysis, report: dict[str, Any]) -> list[Picture]:
    """The timeline of one step, the waits of one group and the topology (the report's own pictures first)."""
    names = _group_names(analysis)
    out = []
    timeline = _timeline(analysis, report, names)
    if timeline is not None:
        out.append(timeline)
    skew = _skew(analysis, report, names)
    if skew is not None:
        out.append(skew)
    topology = _topology(analysis)
    if topology is not None:
        out.append(topology)
    return out


def _topology(analysis: Analysis) -> Picture | None:
    """The hosts and their links: past ``AGGREGATE_ABOVE_RANKS`` ranks the hosts first in line and every other host
    summed (as the dashboard draws them), else every host with its ranks."""
    if not analysis.ranks.height:
        return None
    if analysis.ranks.height > AGGREGATE_ABOVE_RANKS:
        drawn, links, _ = hosts_drawing(analysis)
        total = analysis.host_summary.height
        fig = host_topology_figure(drawn, links, total, interactive=False)
        caption = (f"{analysis.ranks.height:,} ranks on {total:,} hosts: drawn are the {drawn.height} first in line "
                   "(slow ports, then the ranks the others wait for, then exposed comm), every other host summed "
                   "in the middle; links coloured by dimension, as thick as their bytes per step.")
    else:
        hosts = {int(r): (h or "?") for r, h in analysis.ranks.select("rank", "host").iter_rows()}
        fig = topology_figure(analysis.ranks, analysis.traffic, transforms.host_traffic(analysis.traffic, hosts))
        caption = "Hosts with their ranks; links coloured by dimension, as thick as their bytes per step."
    left_out = (fig.layout.meta or {}).get("left_out") or []
    if left_out:
        caption += " Not drawn (equal links are drawn all or none): " + "; ".join(left_out) + "."
    return Picture("topology", caption, fig)


def _group_names(analysis: Analysis) -> dict[str, str]:
    pgs = analysis.process_groups
    descs = pgs["desc"].to_list() if "desc" in pgs.columns else [None] * pgs.height
    return {str(pg): group_label(str(pg), d) for pg, d in zip(pgs["pg"].to_list(), descs, strict=True)}


def _members(analysis: Analysis) -> dict[str, list[int]]:
    pgs = analysis.process_groups
    return {str(pg): [int(r) for r in (ranks or [])] for pg, ranks in pgs.select("pg", "ranks").iter_rows()}


def finding_groups(analysis: Analysis, finding: dict[str, Any]) -> list[str]:
    """A finding's groups, those of the dimension it names first, each part in numeric order."""
    pgs = analysis.process_groups
    dims = dict(zip(pgs["pg"].cast(pl.String).to_list(), pgs["dimension"].to_list(), strict=True))
    mine = finding.get("dimension")
    return sorted({str(p) for p in finding.get("pgs") or ()}, key=lambda p: (dims.get(p) != mine, natural_key(p)))


def _late_rank(analysis: Analysis) -> int | None:
    worst = analysis.stragglers.filter(pl.col("caused_wait_ns_per_step") > 0).sort(
        "caused_wait_ns_per_step", "rank", descending=[True, False]).head(1)
    return int(worst["rank"][0]) if worst.height else None


def focus_ranks(analysis: Analysis, report: dict[str, Any], limit: int = TIMELINE_RANKS) -> list[int]:
    """The ranks worth a first look: the top finding's own and its groups' members, else the late rank and a
    group it holds up, then the ranks with the most exposed comm."""
    chosen: list[int] = []
    members = _members(analysis)
    for finding in (report.get("findings") or [])[:1]:
        chosen += [int(r) for r in finding.get("ranks") or ()]
        for pg in finding_groups(analysis, finding):
            chosen += members.get(pg, [])
    late = _late_rank(analysis)
    if late is not None and not chosen:
        chosen.append(late)
        group = _waited_group(analysis, late)
        chosen += members.get(group, []) if group else []
    chosen += [int(r) for r in analysis.rank_summary.sort("exposed_comm_ns", "rank",
                                                          descending=[True, False])["rank"].to_list()]
    return sorted(list(dict.fromkeys(chosen))[:limit])


def _waited_group(analysis: Analysis, late: int) -> str | None:
    """The group in which the others waited longest for ``late``."""
    calls = analysis.collectives
    if "late_rank" not in calls.columns:
        return None
    waited = calls.filter((pl.col("late_rank") == late) & (pl.col("rank") != late)).sort("wait_ns", descending=True)
    return str(waited["pg"][0]) if waited.height else None


def focus_step(analysis: Analysis, report: dict[str, Any]) -> int | None:
    """The top finding's first step when it names one, else the middle analyzed step."""
    steps = sorted(set(analysis.steps["step"].to_list())) if analysis.steps.height else []
    if not steps:
        return None
    for finding in (report.get("findings") or [])[:1]:
        named = [s for s in finding.get("steps") or () if s in steps]
        if named:
            return int(named[0])
    return int(steps[len(steps) // 2])


def _timeline(analysis: Analysis, report: dict[str, Any], names: dict[str, str]) -> Picture | None:
    step = focus_step(analysis, report)
    ranks = focus_ranks(analysis, report)
    if step is None or not ranks:
        return None
    steps = analysis.steps.filter(pl.col("step") == step)
    window = (int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    keep = pl.col("rank").is_in(ranks)
    base = transforms.timeline_base(analysis.tables.intervals(ranks), analysis.collectives.filter(keep),
                                    steps.filter(keep), analysis.exposed_spans.filter(keep), transforms.RANK_LANES,
                                    names)
    segs = transforms.timeline_segments(base, window, ranks, TIMELINE_BINS)
    fig = charts.timeline_figure(segs, base.rows, window[0], window, base.steps)
    fig.update_layout(title_text=f"Step {step} on {len(ranks)} rank(s): compute and comm lanes, black = exposed comm",
                      xaxis_title=f"ms since step {step} began")
    return Picture("timeline", f"Step {step} of ranks {', '.join(map(str, ranks))}: the top finding's ranks and "
                   "groups first; the black bars under the comm lanes are the exposed time, drawn to scale.", fig)


def skew_group(analysis: Analysis, report: dict[str, Any]) -> str | None:
    """The group whose waits the report shows: the top finding's, else the one the late rank held up most, else the
    group with the longest total wait."""
    for finding in (report.get("findings") or [])[:1]:
        groups = finding_groups(analysis, finding)
        if groups:
            return groups[0]
    late = _late_rank(analysis)
    group = _waited_group(analysis, late) if late is not None else None
    if group is not None:
        return group
    calls = analysis.collectives
    if calls.height == 0 or "wait_ns" not in calls.columns:
        return None
    totals = calls.group_by(pl.col("pg").cast(pl.String)).agg(pl.col("wait_ns").sum()).sort(
        "wait_ns", "pg", descending=[True, False])
    return str(totals["pg"][0]) if totals.height and (totals["wait_ns"][0] or 0) > 0 else None


def _skew(analysis: Analysis, report: dict[str, Any], names: dict[str, str]) -> Picture | None:
    pg = skew_group(analysis, report)
    if pg is None:
        return None
    waits = transforms.skew_waits(analysis.collectives.filter(pl.col("pg").cast(pl.String) == pg), names)
    if waits.height == 0:
        return None
    late = _late_rank(analysis)
    fig = charts.skew_calls_figure(waits, late, f" in {names.get(pg, pg)}", max_columns=SKEW_COLUMNS)
    return Picture("skew", f"Each rank of {names.get(pg, pg)} and each of its matched calls: how long the rank "
                   "waited for the last one to arrive" + (f" (boxed: rank {late}, the rank the others wait for most)"
                                                          if late is not None else "") + ".", fig)
