"""Finding rules on how the traffic moves: small latency-bound messages, pipeline bubbles, uneven
all-to-alls, links below their expected efficiency, barriers (see findings_rules.py for the shared
context and docs/findings.md for each rule's saving model)."""

from __future__ import annotations

import polars as pl

from commprof.analyzers import whatif
from commprof.analyzers.findings import Finding
from commprof.analyzers.findings_rules import (
    A2A_IMBALANCE,
    EXPECTED_EFFICIENCY,
    LARGE_BYTES,
    LAYER_CALL_FACTOR,
    LAYER_DIMS,
    LOW_EFFICIENCY,
    MICRO_BATCH_FACTOR,
    SMALL_BUSBW_SHARE,
    SMALL_BYTES,
    Ctx,
    ms,
    pct,
    severity,
    small_message_fix,
    steps_of,
)
from commprof.vocab import P2P_OPS, UNKNOWN

A2A_CPU_NOT_ESTIMATED = ("not estimated on a CPU run: every member's copies run on the same cores, so a balanced "
                         "split moves the work between ranks instead of removing it (measured: balancing bought "
                         "nothing on 2 cores); on GPUs each call is taken at the mean member's bytes")

MAX_NAMED_HOSTS = 8  # a slow link's suspects: more than these are the slow groups' hosts, not a suspect
PP_CPU_NOT_ESTIMATED = ("not estimated on a CPU run: a stage that waits gives its cores to the other stages' ranks, "
                        "and each extra micro-batch adds send/recv calls that cost more there than the bubble "
                        "(measured: 16 micro-batches instead of 4 made a 2-stage Gloo step 167-222 ms slower on "
                        "2 cores); on GPUs the bubble model applies")

# ------------------------------------------------------------------------------------ small messages

def rule_small_messages(c: Ctx) -> list[Finding]:
    sizes = c.a.call_sizes.filter(
        # a 0-byte call (an all-to-all member with no tokens) moves nothing: it is not a small message, and
        # its 0 GB/s says nothing about latency (its time is waiting for the largest member)
        (pl.col("bytes") < SMALL_BYTES) & (pl.col("bytes") > 0) & (pl.col("op") != "barrier")
        & pl.col("peak_gbps").is_not_null() & (pl.col("busbw_gbps") < SMALL_BUSBW_SHARE * pl.col("peak_gbps")))
    out = []
    for (dim, tier), part in sizes.partition_by("dimension", "tier", as_dict=True).items():
        calls = float(part["count"].sum()) / c.rank_steps
        exposed_transfer = float(part["exposed_transfer_ns"].sum()) / c.rank_steps
        pgs = tuple(sorted(set(map(str, part["pg"].to_list()))))
        bus = float((part["busbw_gbps"] * part["comm_ns"]).sum() / max(float(part["comm_ns"].sum()), 1.0))
        peak = float(part["peak_gbps"].max() or 0)
        saving = exposed_transfer * max(0.0, 1.0 - bus / (EXPECTED_EFFICIENCY * peak)) if peak else 0.0
        layer = dim in LAYER_DIMS
        if layer:  # a layer's calls cannot be merged into one: twice the tokens per call reach at most half of that
            saving /= LAYER_CALL_FACTOR
        if calls < 8 or c.noise(saving):
            continue
        out.append(Finding(
            id="small_messages", key=f"small_messages:{dim}:{tier}", severity=severity(saving, c.step_ns),
            title=f"{calls:.0f} small {dim} messages per step on {tier} run at {bus:.1f} GB/s of {peak:.0f}",
            detail=f"{len(pgs)} group(s): calls under {SMALL_BYTES >> 20} MiB "
                   f"({', '.join(sorted(set(part['op'].to_list())))}) are latency-bound, exposing "
                   f"{ms(exposed_transfer)} of transfer per step.",
            action=small_message_fix(str(dim)),
            saving_ns_per_step=round(min(saving, exposed_transfer)),
            saving_model=(f"half of what their exposed transfer at {EXPECTED_EFFICIENCY:.0%} of the tier's peak "
                          f"would save ({LAYER_CALL_FACTOR}x the tokens per call, half the calls)" if layer else
                          f"their exposed transfer at {EXPECTED_EFFICIENCY:.0%} of the tier's peak instead of the "
                          "busbw they reach (one coalesced call per step)"),
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
    if c.cpu:
        # not estimated: a waiting stage's core runs the other stages' ranks, and smaller micro-batches add
        # per-call costs that dwarf the bubble there (PP_CPU_NOT_ESTIMATED)
        dp_cost, saving, sev = 0.0, 0.0, "info"
        if c.noise(bubble):
            return []
    else:
        # smaller micro-batches also shorten the last one's backward, which hides the DP sync: what it no
        # longer hides is exposed again (the sync's model, at 1/4 the backward, against its exposure now)
        dp_cost = _dp_exposure_growth(c, micro * MICRO_BATCH_FACTOR)
        saving = min(max(0.0, bubble * (1 - 1 / MICRO_BATCH_FACTOR) - dp_cost), exposed)
        sev = severity(saving, c.step_ns)
        if c.noise(saving):
            return []
    return [Finding(
        id="pipeline_bubble", key="pipeline_bubble:pp", severity=sev,
        title=f"pipeline bubble: stages wait {ms(bubble)} per step for their neighbours "
              f"({pct(bubble, c.step_ns)} of the step)",
        detail=f"{stages} stages and about {micro} micro-batches per step: 1F1B idles (p-1)/(m+p-1) = "
               f"{(stages - 1) / (micro + stages - 1):.0%} of a stage's step in the warm-up and cool-down.",
        action=f"more, smaller micro-batches at the same global batch (e.g. {micro} -> "
               f"{micro * MICRO_BATCH_FACTOR}), or an interleaved schedule (Megatron "
               "--num-layers-per-virtual-pipeline-stage), or fewer pipeline stages",
        saving_ns_per_step=round(saving),
        saving_model=PP_CPU_NOT_ESTIMATED if c.cpu else
        f"the bubble is the pp receive wait per step, (p-1) x a micro-batch's time; "
        f"{MICRO_BATCH_FACTOR}x the micro-batches at 1/{MICRO_BATCH_FACTOR} the size shrink it "
        f"{MICRO_BATCH_FACTOR}-fold; less the DP sync the shorter last backward no longer hides "
        "(the overlap:dp model)",
        pgs=tuple(sorted(set(pp["pg"].to_list())))[:16], dimension="pp", steps=steps_of(pp),
        numbers={"bubble_ns_per_step": bubble, "exposed_ns_per_step": exposed, "micro_batches": float(micro),
                 "stages": float(stages), "dp_exposure_growth_ns_per_step": dp_cost})]


def _dp_exposure_growth(c: Ctx, micro_batches: float) -> float:
    """Mean per rank-step: how much more DP sync would be exposed were the last micro-batch's backward
    the one of ``micro_batches`` micro-batches (never less than now: only growth counts)."""
    dp = c.calls.filter(pl.col("dimension") == "dp")
    if dp.height == 0:
        return 0.0
    dp = dp.with_columns(pl.col("transfer_ns").cast(pl.Float64).alias("transfer_after_ns"))
    after = whatif.overlapped_sync(c.a, dp, frozenset({"dp"}), micro_batches)
    now = c.a.pg_steps.join(after, on=["rank", "step", "pg"], how="inner")
    growth = (now["sync_exposed_ns"] - now["exposed_ns"]).clip(lower_bound=0.0)
    total: float = float(growth.sum()) / float(c.rank_steps)
    return total


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
        if c.cpu:  # the members' copies share the host's cores: balancing moves the work, it does not remove it
            saving = 0.0
        hot = part.group_by("_hot").len().sort("len", descending=True)["_hot"].to_list()
        out.append(Finding(
            id="alltoall_imbalance", key=f"alltoall_imbalance:{dim}",
            severity="info" if c.cpu else severity(saving, c.step_ns),  # CPU: no measurable A/B cost
            title=f"{dim} all-to-all is imbalanced: the largest member moves {ratio:.2f}x the mean",
            detail=f"every member waits for the largest split; rank(s) {', '.join(map(str, hot[:4]))} carry it "
                   f"most often; the all-to-alls of {len(pgs)} group(s) expose {ms(exposed)} per step.",
            action="balance the expert load: auxiliary load-balancing loss, capacity factor / token dropping, "
                   "expert-choice routing, or more experts per EP rank",
            saving_ns_per_step=round(min(saving, exposed)),
            saving_model=A2A_CPU_NOT_ESTIMATED if c.cpu else
            "each call at the mean member's bytes instead of the largest (alpha-beta: the latency part stays), "
            "capped at its exposed time",
            ranks=tuple(int(h) for h in hot[:8]), pgs=pgs[:16], dimension=str(dim),
            tier=str(part["tier"][0]), steps=steps_of(part),
            numbers={"max_over_mean": ratio, "exposed_ns_per_step": exposed}))
    return out


# -------------------------------------------------------------------------------------- link efficiency

def rule_link_efficiency(c: Ctx) -> list[Finding]:
    big = c.calls.filter((pl.col("bytes") >= LARGE_BYTES) & pl.col("efficiency").is_not_null()
                         & (pl.col("tier") != UNKNOWN) & (pl.col("transfer_ns") > 0))
    # an uneven all-to-all is slow because of its largest split (the all-to-all finding), not its link
    uneven = pl.col("bytes").max().over("match_key") > A2A_IMBALANCE * pl.col("bytes").mean().over("match_key")
    big = big.filter(~((pl.col("op") == "all_to_all") & uneven.fill_null(False)))
    if "matched_ranks" in big.columns and c.calls["matched_ranks"].is_not_null().any():
        # calls were matched across ranks: one matched with no other member (its peers not traced: --ranks) has
        # its wait for them in its time, so its transfer is not known (a subset of 16 ranks read its pipeline
        # sends at 7% and blamed every group it touched)
        big = big.filter(pl.col("matched_ranks").fill_null(0) > 1)
    if big.height == 0:
        return []
    # efficiency over the transfer only: a call waiting for a late peer is not a slow link
    dur = pl.col("transfer_ns").cast(pl.Float64)
    eff_t = pl.col("efficiency") * (pl.col("end_ns") - pl.col("start_ns")) / dur
    per_pg = big.group_by("pg", "tier", "dimension").agg(
        (eff_t * dur).sum().alias("_w"), dur.sum().alias("_d"), pl.col("peak_gbps").max())
    # slowest first, ties by group name: group_by's order is the hash table's (a Dask run listed the 8 equally
    # slow groups of a 16,384-rank run in another order than a local one)
    per_pg = per_pg.with_columns((pl.col("_w") / pl.col("_d")).alias("eff")).sort(
        "eff", pl.col("pg").cast(pl.String).str.len_chars(), pl.col("pg").cast(pl.String))
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
        hosts = _common_hosts(c, pgs, *_cleared(big, per_pg, str(tier), eff_t, dur))
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


def _cleared(big: pl.DataFrame, per_pg: pl.DataFrame, tier: str, eff_t: pl.Expr, dur: pl.Expr
             ) -> tuple[list[str], set[int]]:
    """What shows a host's links of ``tier`` healthy: the groups of collectives that moved large messages at the
    expected rate (each call of one went through every member), and the ranks whose every peer they sent to or
    received from large messages at that rate. A group of sends and receives is not judged as a whole: the
    pipeline group through a slow host is mostly fast pairs, and it cleared that host (a 16,384-rank run with
    pp=4 named no host)."""
    p2p = pl.col("op").is_in(list(P2P_OPS))
    only_p2p = big.filter(pl.col("tier") == tier).group_by("pg").agg(p2p.all().alias("_p2p"))
    groups = per_pg.filter((pl.col("tier") == tier) & (pl.col("eff") >= LOW_EFFICIENCY)).join(
        only_p2p, on="pg", how="left")
    healthy = [str(x) for x in groups.filter(~pl.col("_p2p").fill_null(False))["pg"]]
    pairs = big.filter((pl.col("tier") == tier) & p2p).group_by("rank", "peer").agg(
        ((eff_t * dur).sum() / dur.sum()).alias("eff"))
    ranks = pairs.group_by("rank").agg(pl.col("eff").min()).filter(pl.col("eff") >= LOW_EFFICIENCY)
    return healthy, set(ranks["rank"].to_list())


def _common_hosts(c: Ctx, pgs: list[str], healthy: list[str], cleared_ranks: set[int]) -> list[str]:
    """The hosts to suspect: those every slow group touches and nothing healthy (``_cleared``: a group of
    collectives of the tier, a rank's sends and receives) shows fast; narrowed to the hosts whose ports the
    topology capture shows slower than the others', when it shows any. None when more than MAX_NAMED_HOSTS are
    left: the groups' hosts, not a suspect."""
    host_of = dict(zip(c.a.ranks["rank"].to_list(), c.a.ranks["host"].to_list(), strict=True))
    sets = {str(r["pg"]): {host_of.get(x) for x in (r["ranks"] or [])} - {None}
            for r in c.a.process_groups.iter_rows(named=True)}
    slow = [sets[p] for p in map(str, pgs) if p in sets]
    if not slow:
        return []
    common = set.intersection(*slow)
    for p in healthy:
        common -= sets.get(p, set())
    common -= {host_of.get(r) for r in cleared_ranks}
    ports = c.a.tables.sidecars.ib_ports
    if ports.height:
        rate = ports.group_by("host").agg(pl.col("gbps").max())
        slower = set(rate.filter(pl.col("gbps") < float(rate["gbps"].max() or 0))["host"].to_list())
        if common & slower:
            common &= slower
    return sorted(str(h) for h in common if h) if len(common) <= MAX_NAMED_HOSTS else []


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
    """Barriers flagged by what they cost (their exposed time above noise), whatever share of the exposed
    communication that is. A barrier's wait for late ranks is not its cost: removed, the late ranks are
    waited for at the next collective instead; what removing it saves is its own part, the exposed time
    after the last rank arrived (the barrier's latency, plus the host-side sync around it)."""
    barrier = c.calls.filter(pl.col("op") == "barrier")
    if barrier.height == 0:
        return []
    exposed = float(barrier["exposed_ns"].sum()) / c.rank_steps
    wait = float(barrier["exposed_wait_ns"].fill_null(0.0).sum()) / c.rank_steps
    own = max(0.0, exposed - wait)
    total = float(c.a.totals.get("exposed_comm_ns") or 0)
    if total <= 0 or c.noise(exposed):
        return []
    return [Finding(
        id="host_sync", key="host_sync:barrier", severity=severity(own, c.step_ns),
        title=f"barriers expose {ms(exposed)} per step ({pct(exposed, c.step_ns)} of the step), "
              f"{ms(own)} of it their own latency",
        detail=f"{barrier.height / c.rank_steps:.1f} barrier calls per rank-step; a barrier does no useful "
               f"transfer: {ms(wait)} of its exposed time per step is waiting for the last rank to arrive, "
               f"which moves to the next collective when the barrier goes, and {ms(own)} is the barrier itself.",
        action="remove barriers from the training loop (torch.distributed.barrier, logging or checkpoint "
               "syncs every step); synchronise only where needed, e.g. before a checkpoint",
        saving_ns_per_step=round(own),
        saving_model="the barriers' exposed time after their last rank arrived (their own latency); their wait "
                     "for late ranks is not counted: without the barrier it is spent at the next collective",
        pgs=tuple(sorted(set(barrier["pg"].to_list())))[:16], steps=steps_of(barrier),
        numbers={"exposed_ns_per_step": exposed, "exposed_wait_ns_per_step": wait,
                 "share_of_exposed": exposed / total, "share_of_step": exposed / c.step_ns if c.step_ns else 0.0})]


TRAFFIC_RULES = (rule_small_messages, rule_pipeline_bubble, rule_alltoall_imbalance, rule_link_efficiency,
                 rule_host_sync)
