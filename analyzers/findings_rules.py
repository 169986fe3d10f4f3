"""The finding rules on communication time, run over a finished :class:`Analysis` (analyzers/findings.py
holds the contract, docs/findings.md each rule and its saving model). The NCCL set-up and desync rules
are in findings_setup.py.

Savings are mean step time per rank-step. Each rule caps its saving at the exposed time it is about,
and a finding whose saving is under ``MIN_SHARE`` of the step is noise (jitter), not a finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from commprof.analyzers import whatif
from commprof.analyzers.findings import Finding
from commprof.vocab import MEGATRON_ORDER, P2P_OPS, UNKNOWN

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

MIN_SHARE = 0.005  # below half a percent of the step a saving is noise
# a straggler stands out from the jitter: late by >= 0.1 % of the step and >= 10x the upper quartile's excess
STRAGGLER_MIN_SHARE = 0.001
STRAGGLER_SPREADS = 10.0
EXPECTED_EFFICIENCY = 0.8  # NCCL reaches about 80 % of a link's rate on large messages (nccl-tests)
LOW_EFFICIENCY = 0.4  # a link at under half of that is "far below"
LARGE_BYTES = 4 << 20  # bandwidth-bound calls: latency is under a few % of them on every tier
SMALL_BYTES = 1 << 20
SMALL_BUSBW_SHARE = 0.1  # small calls at under 10 % of the tier's peak are latency-bound
DP_OVERLAP_LOW = 0.1  # a DP sync hidden for under 10 % of its time is not overlapping the backward
MICRO_BATCH_FACTOR = 4  # the pipeline finding suggests 4x the micro-batches at the same global batch
A2A_IMBALANCE = 1.25  # max / mean bytes of an all-to-all's members
FRONT_DIMS = ("tp", "cp", "ep")  # the frequent dimensions that belong inside a node
BACK_DIMS = ("dp", "pp")


def severity(saving_ns: float, step_ns: float) -> str:
    share = saving_ns / step_ns if step_ns > 0 else 0.0
    return "high" if share >= 0.10 else "medium" if share >= 0.03 else "low" if share >= 0.01 else "info"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms" if abs(ns) >= 1e5 else f"{ns / 1e3:.0f} µs"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole > 0 else "?"


class Ctx:
    """What every rule reads: the analysis, the mean step, and the analyzed calls."""

    def __init__(self, a: Analysis) -> None:
        self.a = a
        self.step_ns = float(a.totals.get("step_ns") or 0)
        self.rank_steps = max(a.steps.height, 1)
        self.n_steps = max(a.steps_analyzed, 1)
        self.calls = a.collectives.filter(pl.col("step").is_not_null()) if "step" in a.collectives.columns \
            else a.collectives.clear()

    def noise(self, saving_ns: float) -> bool:
        return saving_ns < MIN_SHARE * self.step_ns

    def dim_row(self, dim: str) -> dict[str, Any]:
        rows = self.a.by_dimension.filter(pl.col("dimension") == dim).to_dicts()
        return rows[0] if rows else {}

    def saving(self, changes: list[whatif.Change], **kw: Any) -> float:
        return max(0.0, float(whatif.estimate(self.a, changes, **kw).totals["saving_ns"]))


def _steps_of(frame: pl.DataFrame) -> tuple[int, ...]:
    return tuple(sorted(int(s) for s in frame["step"].drop_nulls().unique().to_list()))[:20]


# ------------------------------------------------------------------------------------------ straggler

def straggler_lateness(c: Ctx) -> dict[int, float]:
    """Per rank: how much later than the rest of its group it arrived per step, summed over the calls
    it was last at (the margin = the smallest wait among the others), minus the other ranks' median — what
    the others would not wait were it on time. Only the calls of the innermost dimension count (the
    first of tp, cp, ep, dp in Megatron's order that has calls; all calls when none is classified):
    once a late rank has held up its TP group, the whole group arrives late at its DP calls, and
    counting those again would charge one delay twice (and blame its victims). Point-to-point calls are
    pipeline structure, not straggling, and are left out, and so are calls whose group was not seen whole
    (2 traced ranks of a 128-rank group cannot say who was last). Ranks within the jitter are not returned."""
    calls = c.calls.filter(pl.col("match_key").is_not_null() & ~pl.col("op").is_in(list(P2P_OPS))
                           & (pl.col("matched_ranks") > 1) & (pl.col("matched_ranks") == pl.col("group_size")))
    if calls.height == 0:
        return {}
    present = set(calls["dimension"].to_list())
    inner = next((d for d in MEGATRON_ORDER if d in present), None)
    if inner is not None:
        calls = calls.filter(pl.col("dimension") == inner)
    margins = (calls.filter(pl.col("rank") != pl.col("late_rank")).group_by("match_key")
               .agg(pl.col("wait_ns").min().alias("margin"), pl.col("late_rank").first()))
    per = margins.group_by("late_rank").agg((pl.col("margin").sum() / c.n_steps).alias("late_ns"))
    ranks = c.a.steps["rank"].unique().to_list()
    late = {int(r): 0.0 for r in ranks}
    late.update({int(r): float(v) for r, v in per.iter_rows()})
    out = {}
    for rank, value in late.items():
        others = sorted(v for r, v in late.items() if r != rank)
        if not others:
            continue
        median = (others[(len(others) - 1) // 2] + others[len(others) // 2]) / 2
        spread = others[(3 * len(others)) // 4] - median  # the others' jitter: their upper quartile's excess
        if value - median > max(STRAGGLER_MIN_SHARE * c.step_ns, STRAGGLER_SPREADS * spread):
            out[rank] = value - median
    return out


def rule_straggler(c: Ctx) -> list[Finding]:
    out = []
    table = {r["rank"]: r for r in c.a.stragglers.to_dicts()}
    # capped at the exposed wait of the rank that waited most: the others wait for it at most that long
    waited = float(c.a.rank_summary["exposed_wait_ns"].max() or 0) if c.a.rank_summary.height else 0.0
    for rank, late in sorted(straggler_lateness(c).items(), key=lambda kv: -kv[1]):
        saving = min(late, waited)
        row = table.get(rank, {})
        mine = c.calls.filter((pl.col("late_rank") == rank) & (pl.col("rank") != rank)
                              & ~pl.col("op").is_in(list(P2P_OPS)))
        dims = (mine.group_by("dimension").agg(pl.col("wait_ns").sum()).sort("wait_ns", descending=True)
                ["dimension"].to_list())
        dim = dims[0] if dims else None
        out.append(Finding(
            id="straggler", key=f"straggler:rank{rank}", severity=severity(saving, c.step_ns),
            title=f"rank {rank} is a straggler: it arrives {ms(late)} per step after its peers"
                  + (f" (most waited on in {dim})" if dim else ""),
            detail=f"rank {rank} was last at {row.get('times_last', 0)} matched calls; its peers waited "
                   f"{ms(float(row.get('caused_wait_ns_per_step') or 0))} per step for it in total "
                   f"(summed over peers); its worst wait caused was at {row.get('max_wait_call') or '?'}.",
            action=f"look at what rank {rank} does before its late calls (host {_host(c, rank)}): a slower GPU "
                   "(clocks, thermals, ECC), data-loader or CPU stalls, uneven work; compare its compute per step "
                   "with its peers' on the skew page",
            saving_ns_per_step=round(saving),
            saving_model="its lateness per step (the smallest wait of the others at each call it was last at, "
                         "minus the median rank's), capped at the run's exposed wait per step",
            ranks=(rank,), pgs=tuple(sorted(set(mine["pg"].to_list())))[:16], dimension=dim,
            steps=_steps_of(mine),
            numbers={"late_ns_per_step": late, "times_last": float(row.get("times_last") or 0),
                     "caused_wait_ns_per_step": float(row.get("caused_wait_ns_per_step") or 0),
                     "exposed_wait_ns_per_step": waited}))
    return out


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
                   f"({_pct(exposed, c.step_ns)} of the step); the most frequent traffic runs on the slowest links.",
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
    saving = min(c.saving([whatif.Change("overlap:dp", "overlap", dimension="dp")]), exposed)
    if c.noise(saving):
        return []
    dp = c.calls.filter(pl.col("dimension") == "dp")
    ops = ", ".join(sorted(set(dp["op"].to_list())))
    per_step = dp.height / c.rank_steps
    return [Finding(
        id="dp_sync_exposed", key="dp_sync_exposed:dp", severity=severity(saving, c.step_ns),
        title=f"data-parallel gradient sync is exposed: {ms(exposed)} per step, only {_pct(overlapped, comm)} "
              "hidden behind compute",
        detail=f"dp {ops}: {per_step:.1f} calls and {float(row.get('bytes_per_step') or 0) / 1e9:.2f} GB per "
               f"rank-step, {ms(comm)} of comm of which {ms(exposed)} runs with no compute beside it — the sync "
               "happens after the backward instead of during it.",
        action="overlap the gradient sync with the backward: DDP's default bucketing (do not call the all-reduce "
               "yourself after backward; try bucket_cap_mb 25-100, gradient_as_bucket_view=True), FSDP with "
               "backward_prefetch=BACKWARD_PRE, Megatron --overlap-grad-reduce; with gradient accumulation sync "
               "only on the last micro-batch (no_sync)",
        saving_ns_per_step=round(saving),
        saving_model=f"what-if overlap:dp: {whatif.MODEL}; the dp calls run during the backward (2/3 of the "
                     "step's compute), call k of K ready at k/K of it, one after another; the rest stays exposed",
        pgs=tuple(sorted(set(dp["pg"].to_list())))[:16], dimension="dp",
        tier=str(dp["tier"][0]) if dp.height else None, steps=_steps_of(dp),
        numbers={"comm_ns_per_step": comm, "exposed_ns_per_step": exposed, "overlapped_ns_per_step": overlapped,
                 "calls_per_step": per_step})]


# ------------------------------------------------------------------------------------ small messages

def rule_small_messages(c: Ctx) -> list[Finding]:
    sizes = c.a.call_sizes.filter(
        (pl.col("bytes") < SMALL_BYTES) & pl.col("bytes").is_not_null() & (pl.col("op") != "barrier")
        & pl.col("peak_gbps").is_not_null() & (pl.col("busbw_gbps") < SMALL_BUSBW_SHARE * pl.col("peak_gbps")))
    out = []
    for (dim, tier), part in sizes.partition_by("dimension", "tier", as_dict=True).items():
        calls = float(part["count"].sum()) / c.rank_steps
        exposed_transfer = float(part["exposed_transfer_ns"].sum()) / c.rank_steps
        pgs = tuple(sorted(set(map(str, part["pg"].to_list()))))
        bus = float((part["busbw_gbps"] * part["comm_ns"]).sum() / max(float(part["comm_ns"].sum()), 1.0))
        peak = float(part["peak_gbps"].max() or 0)
        saving = exposed_transfer * max(0.0, 1.0 - bus / (EXPECTED_EFFICIENCY * peak)) if peak else 0.0
        if calls < 8 or c.noise(saving):
            continue
        out.append(Finding(
            id="small_messages", key=f"small_messages:{dim}:{tier}", severity=severity(saving, c.step_ns),
            title=f"{calls:.0f} small {dim} messages per step on {tier} run at {bus:.1f} GB/s of {peak:.0f}",
            detail=f"{len(pgs)} group(s): calls under {SMALL_BYTES >> 20} MiB "
                   f"({', '.join(sorted(set(part['op'].to_list())))}) are latency-bound, exposing "
                   f"{ms(exposed_transfer)} of transfer per step.",
            action="coalesce them: larger DDP buckets (bucket_cap_mb), torch.distributed's coalescing manager or "
                   "one flattened tensor per step, FSDP with fewer, larger units",
            saving_ns_per_step=round(min(saving, exposed_transfer)),
            saving_model=f"their exposed transfer at {EXPECTED_EFFICIENCY:.0%} of the tier's peak instead of the "
                         "busbw they reach (one coalesced call per step)",
            pgs=pgs[:16], dimension=str(dim), tier=str(tier),
            numbers={"calls_per_step": calls, "busbw_gbps": bus, "peak_gbps": peak,
                     "exposed_transfer_ns_per_step": exposed_transfer}))
    return out


# ------------------------------------------------------------------------------------------ pipeline

def rule_pipeline_bubble(c: Ctx) -> list[Finding]:
    row = c.dim_row("pp")
    bubble = float(row.get("exposed_wait_ns_per_step") or 0)
    exposed = float(row.get("exposed_ns_per_step") or 0)
    pp = c.calls.filter(pl.col("dimension") == "pp")
    recvs = pp.filter(pl.col("op") == "recv").group_by("rank", "step").len()
    if bubble <= 0 or recvs.height == 0:
        return []
    shape = whatif.pipeline_shape(c.a, c.calls)
    stages, micro = shape if shape else (2, 1)
    saving = min(bubble * (1 - 1 / MICRO_BATCH_FACTOR), exposed)
    if c.noise(saving):
        return []
    return [Finding(
        id="pipeline_bubble", key="pipeline_bubble:pp", severity=severity(saving, c.step_ns),
        title=f"pipeline bubble: stages wait {ms(bubble)} per step for their neighbours "
              f"({_pct(bubble, c.step_ns)} of the step)",
        detail=f"{stages} stages and about {micro} micro-batches per step: 1F1B idles (p-1)/(m+p-1) = "
               f"{(stages - 1) / (micro + stages - 1):.0%} of a stage's step in the warm-up and cool-down.",
        action=f"more, smaller micro-batches at the same global batch (e.g. {micro} -> "
               f"{micro * MICRO_BATCH_FACTOR}), or an interleaved schedule (Megatron "
               "--num-layers-per-virtual-pipeline-stage), or fewer pipeline stages",
        saving_ns_per_step=round(saving),
        saving_model=f"the bubble is the pp receive wait per step, (p-1) x a micro-batch's time; "
                     f"{MICRO_BATCH_FACTOR}x the micro-batches at 1/{MICRO_BATCH_FACTOR} the size shrink it "
                     f"{MICRO_BATCH_FACTOR}-fold",
        pgs=tuple(sorted(set(pp["pg"].to_list())))[:16], dimension="pp", steps=_steps_of(pp),
        numbers={"bubble_ns_per_step": bubble, "exposed_ns_per_step": exposed, "micro_batches": float(micro),
                 "stages": float(stages)})]


# -------------------------------------------------------------------------------------- all-to-all

def rule_alltoall_imbalance(c: Ctx) -> list[Finding]:
    a2a = c.calls.filter((pl.col("op") == "all_to_all") & pl.col("match_key").is_not_null()
                         & pl.col("bytes").is_not_null())
    if a2a.height == 0:
        return []
    keyed = a2a.with_columns(pl.col("bytes").max().over("match_key").alias("_max"),
                             pl.col("bytes").mean().over("match_key").alias("_mean"),
                             pl.col("rank").sort_by("bytes").last().over("match_key").alias("_hot"))
    steps = whatif._steps_expr()
    lat = pl.col("tier").replace_strict(whatif.LATENCY_US, default=0.0, return_dtype=pl.Float64) * 1000
    alpha = (steps * lat).clip(upper_bound=pl.col("transfer_ns").cast(pl.Float64))
    saved = (pl.col("transfer_ns") - alpha) * (1 - pl.col("_mean") / pl.col("_max"))
    keyed = keyed.with_columns(pl.min_horizontal(saved, pl.col("exposed_ns")).clip(0.0).alias("_saved"))
    out = []
    for (dim,), part in keyed.partition_by("dimension", as_dict=True).items():
        ratio = float((part["_max"] / part["_mean"]).mean() or 1.0)
        pgs = tuple(sorted(set(part["pg"].to_list())))
        saving = float(part["_saved"].sum()) / c.rank_steps
        exposed = float(part["exposed_ns"].sum()) / c.rank_steps
        if ratio < A2A_IMBALANCE or c.noise(saving):
            continue
        hot = part.group_by("_hot").len().sort("len", descending=True)["_hot"].to_list()
        out.append(Finding(
            id="alltoall_imbalance", key=f"alltoall_imbalance:{dim}", severity=severity(saving, c.step_ns),
            title=f"{dim} all-to-all is imbalanced: the largest member moves {ratio:.2f}x the mean",
            detail=f"every member waits for the largest split; rank(s) {', '.join(map(str, hot[:4]))} carry it "
                   f"most often; the all-to-alls of {len(pgs)} group(s) expose {ms(exposed)} per step.",
            action="balance the expert load: auxiliary load-balancing loss, capacity factor / token dropping, "
                   "expert-choice routing, or more experts per EP rank",
            saving_ns_per_step=round(min(saving, exposed)),
            saving_model="each call at the mean member's bytes instead of the largest (alpha-beta: the latency "
                         "part stays), capped at its exposed time",
            ranks=tuple(int(h) for h in hot[:8]), pgs=pgs[:16], dimension=str(dim),
            tier=str(part["tier"][0]), steps=_steps_of(part),
            numbers={"max_over_mean": ratio, "exposed_ns_per_step": exposed}))
    return out


# -------------------------------------------------------------------------------------- link efficiency

def rule_link_efficiency(c: Ctx) -> list[Finding]:
    big = c.calls.filter((pl.col("bytes") >= LARGE_BYTES) & pl.col("efficiency").is_not_null()
                         & (pl.col("tier") != UNKNOWN) & (pl.col("transfer_ns") > 0))
    # an uneven all-to-all is slow because of its largest split (the all-to-all finding), not its link
    uneven = pl.col("bytes").max().over("match_key") > A2A_IMBALANCE * pl.col("bytes").mean().over("match_key")
    big = big.filter(~((pl.col("op") == "all_to_all") & uneven.fill_null(False)))
    if big.height == 0:
        return []
    # efficiency over the transfer only: a call waiting for a late peer is not a slow link
    dur = pl.col("transfer_ns").cast(pl.Float64)
    eff_t = pl.col("efficiency") * (pl.col("end_ns") - pl.col("start_ns")) / dur
    per_pg = big.group_by("pg", "tier", "dimension").agg(
        (eff_t * dur).sum().alias("_w"), dur.sum().alias("_d"), pl.col("peak_gbps").max())
    per_pg = per_pg.with_columns((pl.col("_w") / pl.col("_d")).alias("eff"))
    slow = per_pg.filter(pl.col("eff") < LOW_EFFICIENCY)
    out = []
    for (tier,), part in slow.partition_by("tier", as_dict=True).items():
        pgs = part["pg"].to_list()
        peaks = {str(r["pg"]): float(r["peak_gbps"]) * EXPECTED_EFFICIENCY / max(float(r["eff"]), 1e-3)
                 for r in part.iter_rows(named=True)}
        exposed = float(c.a.pg_steps.filter(pl.col("pg").is_in(pgs))["exposed_ns"].sum()) / c.rank_steps
        saving = min(c.saving([], pg_peaks=peaks), exposed)
        if c.noise(saving):
            continue
        eff = float((part["eff"] * part["_d"]).sum() / part["_d"].sum())
        hosts = _common_hosts(c, pgs, tier)
        out.append(Finding(
            id="link_efficiency", key=f"link_efficiency:{tier}:{','.join(hosts) or ','.join(map(str, pgs[:3]))}",
            severity=severity(saving, c.step_ns),
            title=f"{tier} links reach {eff:.0%} of their {float(part['peak_gbps'].max() or 0):.0f} GB/s peak on "
                  f"large messages" + (f" (hosts {', '.join(hosts)})" if hosts else ""),
            detail=f"{len(pgs)} group(s) ({', '.join(map(str, pgs[:6]))}) move messages >= {LARGE_BYTES >> 20} MiB "
                   f"at under {LOW_EFFICIENCY:.0%} of the tier's peak, where NCCL reaches about "
                   f"{EXPECTED_EFFICIENCY:.0%}." + _port_note(c, hosts),
            action="check the NICs and links of those hosts: ibstat (rate, state), ethtool, cable/switch port errors, "
                   "PCIe width of the NIC; NCCL_IB_HCA / NCCL_SOCKET_IFNAME pointing at the right devices",
            saving_ns_per_step=round(saving),
            saving_model=f"what-if those groups at {EXPECTED_EFFICIENCY:.0%} of the tier's peak: {whatif.MODEL}",
            pgs=tuple(map(str, pgs))[:16], tier=str(tier),
            dimension=str(part["dimension"][0]) if part["dimension"].n_unique() == 1 else None,
            numbers={"efficiency": eff, "exposed_ns_per_step": exposed}))
    return out


def _common_hosts(c: Ctx, pgs: list[str], tier: str) -> list[str]:
    """Hosts every slow group touches and no healthy group of the same tier does."""
    groups = c.a.process_groups.filter(pl.col("tier") == tier)
    host_of = dict(zip(c.a.ranks["rank"].to_list(), c.a.ranks["host"].to_list(), strict=True))
    sets = {str(r["pg"]): {host_of.get(x) for x in (r["ranks"] or [])} - {None}
            for r in groups.iter_rows(named=True)}
    slow = [sets[p] for p in map(str, pgs) if p in sets]
    if not slow:
        return []
    common = set.intersection(*slow)
    healthy = [s for p, s in sets.items() if p not in set(map(str, pgs))]
    for s in healthy:
        common -= s
    return sorted(h for h in common if h)


def _port_note(c: Ctx, hosts: list[str]) -> str:
    ports = c.a.tables.sidecars.ib_ports
    if ports.height == 0 or not hosts:
        return ""
    best = float(ports["gbps"].max() or 0)
    mine = ports.filter(pl.col("host").is_in(hosts))
    if mine.height and float(mine["gbps"].max() or 0) < best:
        return f" Their ports are up at {float(mine['gbps'].max() or 0):.1f} GB/s, the other hosts' at {best:.1f}."
    return ""


# ------------------------------------------------------------------------------------------ host sync

def rule_host_sync(c: Ctx) -> list[Finding]:
    barrier = c.calls.filter(pl.col("op") == "barrier")
    if barrier.height == 0:
        return []
    exposed = float(barrier["exposed_ns"].sum()) / c.rank_steps
    total = float(c.a.totals.get("exposed_comm_ns") or 0)
    if total <= 0 or exposed < 0.25 * total or c.noise(exposed):
        return []
    return [Finding(
        id="host_sync", key="host_sync:barrier", severity=severity(exposed, c.step_ns),
        title=f"barriers take {_pct(exposed, total)} of the exposed communication ({ms(exposed)} per step)",
        detail=f"{barrier.height / c.rank_steps:.1f} barrier calls per rank-step; a barrier does no useful "
               "transfer, its time is ranks waiting for each other.",
        action="remove barriers from the training loop (torch.distributed.barrier, logging or checkpoint "
               "syncs every step); synchronise only where needed, e.g. before a checkpoint",
        saving_ns_per_step=round(exposed), saving_model="the barriers' exposed time per step",
        pgs=tuple(sorted(set(barrier["pg"].to_list())))[:16], steps=_steps_of(barrier),
        numbers={"exposed_ns_per_step": exposed, "share_of_exposed": exposed / total})]


RULES = (rule_straggler, rule_front_dim_across_nodes, rule_dp_sync_exposed, rule_small_messages,
         rule_pipeline_bubble, rule_alltoall_imbalance, rule_link_efficiency, rule_host_sync)


def find(a: Analysis) -> tuple[list[Finding], bool]:
    """Every rule's findings, and whether they could be computed (a run with no analyzed step cannot be
    judged)."""
    from commprof.analyzers.findings_setup import SETUP_RULES

    if a.steps.height == 0:
        return [], False
    c = Ctx(a)
    found: list[Finding] = []
    for rule in (*RULES, *SETUP_RULES):
        found.extend(rule(c))
    return found, True
