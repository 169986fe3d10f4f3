"""The finding rules on communication time, run over a finished :class:`Analysis` (analyzers/findings.py
holds the contract, docs/findings.md each rule and its saving model): stragglers, placement, the DP sync.
The traffic rules are in findings_traffic.py, the NCCL set-up and desync rules in findings_setup.py.

Savings are mean step time per rank-step. Each rule caps its saving at the exposed time it is about,
and a finding whose saving is under ``MIN_SHARE`` of the step is noise (jitter), not a finding.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import polars as pl

from commprof.analyzers import calibration, lateness, whatif
from commprof.analyzers.findings import Finding
from commprof.vocab import MEGATRON_ORDER, P2P_OPS, SEVERITIES, UNKNOWN

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

MIN_SHARE = 0.005  # below half a percent of the step a saving is noise
EXPECTED_EFFICIENCY = 0.8  # NCCL reaches about 80 % of a link's rate on large messages (nccl-tests)
LOW_EFFICIENCY = 0.4  # a link at under half of that is "far below"
LARGE_BYTES = 4 << 20  # bandwidth-bound calls: latency is under a few % of them on every tier
SMALL_BYTES = 1 << 20
SMALL_BUSBW_SHARE = 0.1  # small calls at under 10 % of the tier's peak are latency-bound
DP_OVERLAP_LOW = 0.1  # a DP sync hidden for under 10 % of its time is not overlapping the backward
MICRO_BATCH_FACTOR = 4  # the pipeline finding suggests 4x the micro-batches at the same global batch
A2A_IMBALANCE = 1.25  # max / mean bytes of an all-to-all's members
FRONT_DIMS = ("tp", "cp", "ep")
CPU_NOT_ESTIMATED = ("not estimated on a CPU run: communication and compute compete for the same cores, so "
                     "overlapping them frees no time there (measured: the fix bought nothing on 2 cores); on GPUs "
                     "the what-if model applies")  # the frequent dimensions that belong inside a node
BACK_DIMS = ("dp", "pp")


def severity(saving_ns: float, step_ns: float) -> str:
    share = saving_ns / step_ns if step_ns > 0 else 0.0
    return "high" if share >= 0.10 else "medium" if share >= 0.03 else "low" if share >= 0.01 else "info"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms" if abs(ns) >= 1e5 else f"{ns / 1e3:.0f} µs"


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole > 0 else "?"


LAYER_DIMS = ("tp", "cp", "sp")  # calls on each layer's critical path, one per layer and pass: nothing to bucket
LAYER_CALL_FACTOR = 2  # the small-message fix on those: twice the tokens per call, half the calls


def small_message_fix(dim: str) -> str:
    """What to change about small latency-bound calls of ``dim``: a DP sync's calls can be merged (buckets,
    coalescing); a TP or CP layer's all-reduce sits on the critical path, one per layer and pass, and no bucket or
    coalescing manager can merge them: more tokens per call, a smaller degree, or a faster link."""
    if dim in LAYER_DIMS:
        return (f"{dim} calls sit on each layer's critical path (one per layer and pass): no bucket or coalescing "
                "manager can merge them. Send more tokens per call (fewer, larger micro-batches at the same global "
                f"batch, or a longer sequence), use sequence parallelism, a smaller {dim} degree (try --what-if "
                f"layout:...), or put {dim} on a faster link")
    return ("coalesce them: larger DDP buckets (bucket_cap_mb), torch.distributed's coalescing manager or one "
            "flattened tensor per step, FSDP with fewer, larger units")


class Ctx:
    """What every rule reads: the analysis, the mean step, and the analyzed calls."""

    def __init__(self, a: Analysis) -> None:
        self.a = a
        self.step_ns = float(a.totals.get("step_ns") or 0)
        self.rank_steps = max(a.steps.height, 1)
        self.n_steps = max(a.steps_analyzed, 1)
        self.doubtful = frozenset(int(r) for r in a.doubtful_ranks["rank"].to_list())
        self.calls = a.collectives.filter(pl.col("step").is_not_null()) if "step" in a.collectives.columns \
            else a.collectives.clear()
        # a CPU run (Gloo, no device kernels): communication and compute share the host's cores, so what
        # hiding communication behind compute buys on a GPU is not bought here (ab-cost.md)
        modes = set(a.ranks["mode"].drop_nulls().to_list()) if "mode" in a.ranks.columns else set()
        self.cpu = modes == {"cpu"}
        self.warnings: list[str] = []  # a rule that could not run says why (the analysis' warnings)

    def noise(self, saving_ns: float) -> bool:
        return saving_ns < MIN_SHARE * self.step_ns

    def dim_row(self, dim: str) -> dict[str, Any]:
        rows = self.a.by_dimension.filter(pl.col("dimension") == dim).to_dicts()
        return rows[0] if rows else {}

    def saving(self, changes: list[whatif.Change], **kw: Any) -> float:
        return max(0.0, float(whatif.estimate(self.a, changes, **kw).totals["saving_ns"]))


def steps_of(frame: pl.DataFrame) -> tuple[int, ...]:
    return tuple(sorted(int(s) for s in frame["step"].drop_nulls().unique().to_list()))[:20]


# ------------------------------------------------------------------------------------------ straggler

def straggler_lateness(c: Ctx, window: frozenset[int] | None = None) -> list[lateness.Late]:
    """The stragglers: per group, the rank its peers wait for step after step (analyzers/lateness.py
    judges it over steps and says how sure it is), on groups seen whole, classified or not, leaving out
    calls with a rank whose clock or run is in doubt. ``window``: judge only these steps (the calibration
    cuts recordings into windows of the step counts people record, tests/zoo/calibrate.py)."""
    traced = int(c.a.ranks.height)
    calls, steps = c.calls, c.a.steps
    if window is not None:
        calls = calls.filter(pl.col("step").is_in(list(window)))
        steps = steps.filter(pl.col("step").is_in(list(window)))
    judged, scope = lateness.judged_calls(calls, c.doubtful, traced, c.a.facts.world_size)
    work = lateness.rank_work(steps.filter(~pl.col("rank").is_in(list(c.doubtful))))
    stage_of = lateness.pipeline_stages(c.a.process_groups)
    if judged.height == 0:
        return []
    found: list[lateness.Late] = lateness.stragglers(lateness.step_lateness(judged), scope, work, stage_of, c.step_ns)
    return found


def straggler_severity(x: lateness.Late, step_ns: float, waited: float) -> str:
    """Its saving's share of the step (capped at the run's exposed wait), as for every rule, capped by how sure
    the evidence is (:func:`lateness.max_severity`)."""
    sev: str = min(severity(min(x.late_ns, waited), step_ns), lateness.max_severity(x), key=SEVERITIES.index)
    return sev


def _waited(c: Ctx) -> float:
    """The exposed wait per step of the rank that waited most: the others wait for a straggler at most that
    long (a straggler's saving is capped at it)."""
    return float(c.a.rank_summary["exposed_wait_ns"].max() or 0) if c.a.rank_summary.height else 0.0


def judge_stragglers(c: Ctx, window: frozenset[int] | None = None) -> list[tuple[lateness.Late, str]]:
    """Each straggler and the severity the rule gives it: its saving's share of the step, capped by how sure
    the evidence is (:func:`lateness.max_severity`)."""
    waited = _waited(c)
    return [(x, straggler_severity(x, c.step_ns, waited)) for x in straggler_lateness(c, window)]


def rule_straggler(c: Ctx) -> list[Finding]:
    out = []
    table = {r["rank"]: r for r in c.a.stragglers.to_dicts()}
    waited = _waited(c)
    for x, sev in judge_stragglers(c):
        saving = min(x.late_ns, waited)
        row = table.get(x.rank, {})
        mine = c.calls.filter((pl.col("late_rank") == x.rank) & (pl.col("rank") != x.rank)
                              & ~pl.col("op").is_in(list(P2P_OPS)))
        dims = (mine.group_by("dimension").agg(pl.col("wait_ns").sum()).sort("wait_ns", descending=True)
                ["dimension"].to_list())
        dim = dims[0] if dims else None
        known = dim if dim and dim != UNKNOWN else None
        cap = lateness.max_severity(x)
        title, detail = _straggler_text(x, cap, known, row)
        out.append(Finding(
            id="straggler", key=f"straggler:rank{x.rank}", severity=sev, title=title, detail=detail,
            action=f"look at what rank {x.rank} does before its late calls (host {_host(c, x.rank)}): a slower GPU "
                   "(clocks, thermals, ECC), data-loader or CPU stalls, uneven work; compare its compute per step "
                   "with its peers' on the skew page",
            saving_ns_per_step=round(saving),
            saving_model="its lateness per step (the smallest wait of the others at each call it was last at, "
                         "minus the other ranks' median; the median over steps), capped at the run's exposed "
                         "wait per step",
            ranks=(x.rank,), pgs=tuple(sorted(set(mine["pg"].to_list())))[:16], dimension=dim,
            steps=steps_of(mine),
            numbers={"late_ns_per_step": x.late_ns, "jitter_ns_per_step": x.jitter_ns,
                     "steps_last": float(x.steps_last), "steps_judged": float(x.steps),
                     "confidence": x.confidence, "times_last": float(row.get("times_last") or 0),
                     "stretch_steps": float(x.block), "stretches_judged": float(x.judged),
                     "caused_wait_ns_per_step": float(row.get("caused_wait_ns_per_step") or 0),
                     "exposed_wait_ns_per_step": waited,
                     **({"work_excess_ns_per_step": x.work_excess_ns, "work_steps_above": float(x.work_steps_above),
                         "work_confidence": 1.0 - x.work_chance}
                        if x.work_chance is not None and x.work_excess_ns is not None else {})}))
    return out


def _straggler_text(x: lateness.Late, cap: str, known: str | None, row: dict[str, Any]) -> tuple[str, str]:
    """The title and detail of one straggler finding. A probability is stated only where the rule names the
    rank (above info): there both witnesses' chances are judged over stretches of steps and the calibration
    measured how often clean windows of this length named a rank (analyzers/calibration.py)."""
    over = f"{x.steps_last} of {x.steps} steps"
    where = f", most waited on in {known}" if known else ""
    stretches = (f"judged over {x.judged} stretches of {x.block} steps (lateness comes in stretches on this run)"
                 if x.block > 1 else f"judged over {x.judged} steps")
    work = (f"{ms(x.work_excess_ns)} more work of its own per step, more in {x.work_steps_above} of {x.work_steps}"
            if x.work_excess_ns is not None else "")
    evidence = (f"judged on {x.scope} (group {x.pg}, {x.members} ranks): its lateness per step (the smallest wait "
                f"of the others at each call it was last at) is {ms(x.late_ns)} above the others' median, where the "
                f"latest other rank shows {ms(x.jitter_ns)} in a typical step. It was last at "
                f"{row.get('times_last', 0)} matched calls; its peers waited "
                f"{ms(float(row.get('caused_wait_ns_per_step') or 0))} per step for it in total.")
    if cap != "info" and x.work_chance is not None and x.work_excess_ns is not None:
        sure = _sure(max(x.chance, x.work_chance))
        rate = calibration.clean_rate(x.steps)
        measured = (f" Calibration: on clean jobs recorded beside a busy process, {rate[1]} of {rate[2]} windows of "
                    f"{rate[0]} steps named a rank above info (docs/findings.md)." if rate else "")
        return (f"rank {x.rank} is a straggler: it arrives {ms(x.late_ns)} per step after its peers, last in {over}, "
                f"with {work} ({sure} sure){where}",
                f"{evidence} {x.top_share} of the group's {x.judged} highest latenesses are its own (chance by luck "
                f"{_chance_text(x.chance)}); its work per step (compute and copies with none of its communication "
                f"in flight) is {ms(x.work_excess_ns)} above the other ranks' median (chance by luck "
                f"{_chance_text(x.work_chance)}), {stretches}: it is late because it has more to do or does it "
                f"slower, not because a partner is fast or a busy host held it back.{measured}")
    if lateness.paired(x):
        return (f"rank {x.rank} may be a straggler: last in {over}, {ms(x.late_ns)} per step after its peers{where}; "
                f"with {work}, but beside one partner only: one other rank cannot tell a slower rank from a faster "
                "partner",
                f"{evidence} Its work per step (compute and copies with none of its communication in flight) is "
                f"compared with that of the traced ranks doing the same work (its pipeline stage's, or the job's): "
                f"{x.work_ranks} ranks, itself included. Beside one partner, more work is as much the partner being "
                "fast as this rank being slow, and a host that keeps one of two ranks behind for a while (a busy "
                "neighbour, CPU contention) looks the same in every step: named above info only against two other "
                "ranks or more (analyzers/lateness.py). Trace more ranks of its stage, or compare its compute per "
                "step with its partner's on the skew page over a longer run.")
    if lateness.too_short(x) or x.work_excess_ns is None:
        steps = calibration.advised_steps()
        return (f"rank {x.rank} may be a straggler: last in {over}, {ms(x.late_ns)} per step after its peers{where}; "
                f"{x.steps} steps are too few to tell a straggler from a rank a busy host held back: record "
                f"--active {steps}",
                f"{evidence} A host that keeps one rank behind does so for several steps at a time, so a short "
                f"window cannot tell it from a slower rank ({stretches}); {steps} profiled steps named the "
                "calibration's slow rank and no clean rank (docs/findings.md, \"Calibration\").")
    if lateness.explained(x):  # its work explains it, but a witness is below 90 %: say which
        return (f"rank {x.rank} may be a straggler: {ms(x.late_ns)} per step after its peers{where}, with {work}, "
                f"but last in only {over} ({_sure(x.chance)} sure it is not luck; named above info from 90 %, with "
                f"its work {_sure(x.work_chance) if x.work_chance is not None else 'unjudged'} sure)",
                f"{evidence} {x.top_share} of the group's {x.judged} highest latenesses are its own (chance by luck "
                f"{_chance_text(x.chance)}), {stretches}. Its own work explains its lateness, but both witnesses must "
                "be 90 % sure to name it above info (analyzers/lateness.py): record more steps to tell.")
    return (f"rank {x.rank} may be a straggler: last in {over}, {ms(x.late_ns)} per step after its peers{where}, "
            f"but with only {work}: a host holding it back (a busy neighbour, CPU contention) looks like this",
            f"{evidence} Its own work per step (compute and copies with none of its communication in flight) "
            f"explains less than half of its lateness: the delay falls inside its calls, as when the OS deschedules "
            "a rank on a busy host, not in more work of its own. Named above info only when its own work "
            "explains its lateness (analyzers/lateness.py).")


def _sure(chance: float) -> str:
    return f"{100.0 * (1.0 - chance):.1f} %" if chance > 1e-3 else "> 99.9 %"


def _chance_text(chance: float) -> str:
    return f"{100.0 * chance:.2g} %" if chance >= 1e-4 else "< 0.01 %"


def _host(c: Ctx, rank: int) -> str:
    hosts = c.a.ranks.filter(pl.col("rank") == rank)["host"].to_list()
    return str(hosts[0]) if hosts and hosts[0] else "?"


# ------------------------------------------------------------------------------------ placement

def rule_front_dim_across_nodes(c: Ctx) -> list[Finding]:
    """TP, CP or EP crossing nodes while DP or PP stays inside one: the placement is inverted."""
    pgs = c.a.process_groups.filter(pl.col("size") > 1)
    out = []
    for dim in FRONT_DIMS:
        mine = pgs.filter(pl.col("dimension") == dim)
        crossing = mine.filter(pl.col("nodes_spanned") > 1)
        if crossing.height == 0:
            continue
        inside = [d for d in BACK_DIMS
                  if (g := pgs.filter(pl.col("dimension") == d)).height and (g["nodes_spanned"] == 1).all()]
        if not inside:
            continue
        intra = pgs.filter(pl.col("dimension") == inside[0])["tier"][0]
        net = crossing["tier"][0]
        row = c.dim_row(dim)
        exposed = float(row.get("exposed_ns_per_step") or 0)
        # Megatron's placement fills each node with the fastest dimensions: those whose sizes multiplied
        # in order fit a node stay inside it, the rest cross the network
        fixed = _megatron_inside(c)
        if dim not in fixed:
            continue
        changes = [whatif.Change(f"{d}:{intra if d in fixed else net}", "move", tier=intra if d in fixed else net,
                                 dimension=d)
                   for d in MEGATRON_ORDER if d in _sizes(c) and (d in fixed) != _inside_now(c, d)]
        inside = [d for d in inside if d not in fixed]
        saving = min(c.saving(changes), exposed)
        if c.noise(saving):
            continue
        moved = " and ".join(inside) or "nothing else"
        out.append(Finding(
            id="tp_across_nodes", key=f"tp_across_nodes:{dim}", severity=severity(saving, c.step_ns),
            title=f"{dim.upper()} crosses nodes ({net}) while {_and(_inside_dims(c))} "
                  f"{'stays' if len(_inside_dims(c)) == 1 else 'stay'} inside them ({intra})",
            detail=f"{crossing.height} of {mine.height} {dim} groups span {int(crossing['nodes_spanned'].max() or 0)} "
                   f"nodes; {dim} moves {float(row.get('bytes_per_step') or 0) / 1e9:.2f} GB and "
                   f"{float(row.get('ops_per_step') or 0):.0f} calls per rank-step, exposing {ms(exposed)} "
                   f"({pct(exposed, c.step_ns)} of the step); the most frequent traffic runs on the slowest links.",
            action=f"place {dim} fastest (Megatron order tp-cp-ep-dp-pp: ranks of one {dim} group on one node, "
                   f"e.g. torchrun's default contiguous ranks or DeviceMesh with {dim} as the last, innermost "
                   f"dimension); {moved} then crosses the nodes instead",
            saving_ns_per_step=round(saving),
            saving_model=f"what-if {' '.join(ch.text for ch in changes)}: {whatif.MODEL}",
            ranks=(), pgs=tuple(crossing["pg"].to_list())[:16], dimension=dim, tier=net,
            numbers={"exposed_ns_per_step": exposed, "groups_crossing": float(crossing.height),
                     "bytes_per_step": float(row.get("bytes_per_step") or 0)}))
    return out


def _and(dims: list[str]) -> str:
    return " and ".join(d.upper() for d in dims)


def _sizes(c: Ctx) -> dict[str, int]:
    pgs = c.a.process_groups.filter(pl.col("size") > 1)
    return {str(d): int(s) for d, s in pgs.group_by("dimension").agg(pl.col("size").max()).iter_rows()
            if d in MEGATRON_ORDER}


def _inside_now(c: Ctx, dim: str) -> bool:
    g = c.a.process_groups.filter((pl.col("dimension") == dim) & (pl.col("size") > 1))
    return bool(g.height) and bool((g["nodes_spanned"] == 1).all())


def _inside_dims(c: Ctx) -> list[str]:
    return [d for d in MEGATRON_ORDER if d in _sizes(c) and _inside_now(c, d)]


def _megatron_inside(c: Ctx) -> set[str]:
    """The dimensions Megatron's order (tp fastest) keeps inside a node of this run's size."""
    per_host = c.a.ranks.group_by("host").len()["len"]
    gpn = int(per_host.max() or 1) if per_host.len() else 1
    sizes, inside, prod = _sizes(c), set(), 1
    for d in MEGATRON_ORDER:
        if d in sizes:
            prod *= sizes[d]
            if prod > gpn:
                break
            inside.add(d)
    return inside


# ------------------------------------------------------------------------------------------ DP sync

def rule_dp_sync_exposed(c: Ctx) -> list[Finding]:
    row = c.dim_row("dp")
    comm = float(row.get("comm_ns_per_step") or 0)
    exposed = float(row.get("exposed_ns_per_step") or 0)
    overlapped = float(row.get("overlapped_ns_per_step") or 0)
    if comm <= 0 or overlapped >= DP_OVERLAP_LOW * comm:
        return []
    if c.cpu:
        # not estimated: the overlap model's saving assumes the sync runs on its own engine (a GPU's copy
        # engines and NICs); here it would take the cores the backward runs on
        saving, sev = 0.0, "info"  # its A/B cost on CPU runs: nothing measurable
        if c.noise(exposed):
            return []
    else:
        saving = min(c.saving([whatif.Change("overlap:dp", "overlap", dimension="dp")]), exposed)
        sev = severity(saving, c.step_ns)
        if c.noise(saving):
            return []
    dp = c.calls.filter(pl.col("dimension") == "dp")
    ops = ", ".join(sorted(set(dp["op"].to_list())))
    per_step = dp.height / c.rank_steps
    return [Finding(
        id="dp_sync_exposed", key="dp_sync_exposed:dp", severity=sev,
        title=f"data-parallel gradient sync is exposed: {ms(exposed)} per step, only {pct(overlapped, comm)} "
              "hidden behind compute",
        detail=f"dp {ops}: {per_step:.1f} calls and {float(row.get('bytes_per_step') or 0) / 1e9:.2f} GB per "
               f"rank-step, {ms(comm)} of comm of which {ms(exposed)} runs with no compute beside it — the sync "
               "happens after the backward instead of during it."
               + (" On this CPU run the sync and the backward would share the same cores: overlapping them is "
                  "not estimated to save time here." if c.cpu else ""),
        action="overlap the gradient sync with the backward: DDP's default bucketing (do not call the all-reduce "
               "yourself after backward; try bucket_cap_mb 25-100, gradient_as_bucket_view=True), FSDP with "
               "backward_prefetch=BACKWARD_PRE, Megatron --overlap-grad-reduce; with gradient accumulation sync "
               "only on the last micro-batch (no_sync)",
        saving_ns_per_step=round(saving),
        saving_model=CPU_NOT_ESTIMATED if c.cpu else
        f"what-if overlap:dp: {whatif.MODEL}; the dp calls run during the backward (2/3 of the "
        "step's compute), call k of K ready at k/K of it, one after another; the rest stays exposed",
        pgs=tuple(sorted(set(dp["pg"].to_list())))[:16], dimension="dp",
        tier=str(dp["tier"][0]) if dp.height else None, steps=steps_of(dp),
        numbers={"comm_ns_per_step": comm, "exposed_ns_per_step": exposed, "overlapped_ns_per_step": overlapped,
                 "calls_per_step": per_step})]


RULES = (rule_straggler, rule_front_dim_across_nodes, rule_dp_sync_exposed)


def find(a: Analysis) -> tuple[list[Finding], bool, list[str]]:
    """Every rule's findings, whether they could be computed (a run with no analyzed step cannot be
    judged), and the warnings of rules that could not run."""
    from commprof.analyzers.findings_latency import rule_small_messages_without_peak
    from commprof.analyzers.findings_layout import rule_group_larger_than_node
    from commprof.analyzers.findings_setup import SETUP_RULES
    from commprof.analyzers.findings_traffic import TRAFFIC_RULES

    if a.steps.height == 0:
        return [], False, []
    c = Ctx(a)
    found: list[Finding] = []
    for rule in (*RULES, rule_group_larger_than_node, *TRAFFIC_RULES, rule_small_messages_without_peak,
                 *SETUP_RULES):
        found.extend(rule(c))
    exposed = {str(r["dimension"]): float(r.get("exposed_ns_per_step") or 0)
               for r in a.by_dimension.iter_rows(named=True)}
    total = float(a.totals.get("exposed_comm_ns") or 0)
    return cap_shared_savings(found, exposed, total, c.step_ns), True, c.warnings


def cap_shared_savings(found: list[Finding], exposed_by_dimension: dict[str, float], exposed_ns: float,
                       step_ns: float) -> list[Finding]:
    """Findings about the same exposed time never promise more than it together: per dimension (the
    findings that name it) and over the run (all of them). The largest saving keeps its estimate, the
    next ones get what is left of the time (their model says so)."""
    left = dict(exposed_by_dimension)
    left_total = exposed_ns
    out = []
    for f in sorted(found, key=lambda f: (-f.saving_ns_per_step, f.key)):
        room = left_total if f.dimension is None else min(left_total, left.get(f.dimension, left_total))
        saving = max(0, min(f.saving_ns_per_step, int(room)))
        if saving < f.saving_ns_per_step:
            scope = f"the {f.dimension} comm's" if f.dimension is not None else "the run's"
            lower = min(f.severity, severity(saving, step_ns), key=SEVERITIES.index)
            f = replace(f, saving_ns_per_step=saving, severity=lower, saving_model=(
                f"{f.saving_model}; capped at {ms(room)}: what is left of {scope} exposed time after the larger "
                f"findings' savings on it (findings on the same time never add up past it)"))
        left_total -= saving
        if f.dimension is not None and f.dimension in left:
            left[f.dimension] -= saving
        out.append(f)
    return out
