"""Small messages judged from the calls themselves, on tiers without a peak bandwidth (loopback, Gloo on
CPU, a tier nobody gave ``--peak`` for), where rule_small_messages (findings_traffic.py) cannot compare
busbw with a peak. A call's transfer is ``alpha + bus bytes / beta``: fitted per tier over all its
sized calls (the median transfer of each op and size, weighted by its calls), the small calls whose alpha is
most of their transfer are latency-bound, and coalescing them saves one alpha per call removed. Where
the sizes cannot support a fit, a warning says why the rule could not run."""

from __future__ import annotations

import numpy as np
import polars as pl

from commprof.analyzers.bandwidth import busbw_factor_expr
from commprof.analyzers.findings import Finding
from commprof.analyzers.findings_rules import (
    LAYER_CALL_FACTOR,
    LAYER_DIMS,
    SMALL_BYTES,
    Ctx,
    ms,
    severity,
    small_message_fix,
    steps_of,
)
from commprof.vocab import UNKNOWN

MIN_CALLS_PER_STEP = 8  # as rule_small_messages
MIN_SIZE_RANGE = 4.0  # the fit needs sizes spanning at least 4x (bus bytes) to tell alpha from beta
LATENCY_BOUND = 0.5  # alpha is at least half of their transfer


def fit_alpha_beta(points: pl.DataFrame) -> tuple[float, float] | None:
    """(alpha ns, ns per bus byte) from rows bus_bytes, transfer_ns (a median), n (calls); None when the
    sizes span less than MIN_SIZE_RANGE. A time that does not grow with size is all alpha."""
    x = points["bus_bytes"].to_numpy().astype(float)
    if len(set(x.tolist())) < 2 or x.min() <= 0 or x.max() / x.min() < MIN_SIZE_RANGE:
        return None
    y, w = points["transfer_ns"].to_numpy().astype(float), points["n"].to_numpy().astype(float)
    slope, alpha = np.polyfit(x, y, 1, w=np.sqrt(w))
    if slope <= 0:
        return float(np.average(y, weights=w)), 0.0
    return max(0.0, float(alpha)), float(slope)


def rule_small_messages_without_peak(c: Ctx) -> list[Finding]:
    sized = c.calls.filter(pl.col("bytes").is_not_null() & (pl.col("bytes") > 0) & (pl.col("op") != "barrier")
                           & pl.col("peak_gbps").is_null() & pl.col("transfer_ns").is_not_null())
    if sized.filter(pl.col("bytes") < SMALL_BYTES).height == 0:
        return []
    bus = busbw_factor_expr(pl.col("op"), pl.col("group_size").cast(pl.Float64)).fill_null(1.0)
    sized = sized.with_columns((pl.col("bytes") * bus).alias("bus_bytes"))
    out = []
    for (tier,), every in sized.partition_by("tier", as_dict=True).items():
        calls = every.filter(pl.col("bytes") < SMALL_BYTES)
        per_step = calls.height / c.rank_steps
        if per_step < MIN_CALLS_PER_STEP:
            continue
        # the fit reads every sized call of the tier: the large ones pin beta, the small ones alpha
        points = every.group_by("op", "bus_bytes").agg(pl.col("transfer_ns").median(), pl.len().alias("n"))
        fit = fit_alpha_beta(points)
        if fit is None:
            lo, hi = int(points["bus_bytes"].min() or 0), int(points["bus_bytes"].max() or 0)
            c.warnings.append(
                f"small_messages: not judged on {tier} ({per_step:.0f} calls per rank-step under {SMALL_BYTES >> 20} "
                f"MiB): {tier} has no peak bandwidth, and its calls' sizes ({lo}-{hi} bus bytes) span less than "
                f"{MIN_SIZE_RANGE:.0f}x, too little to fit time = alpha + bytes/beta ("
                + ("the tier is unknown: --network / --gpus-per-node name it, then --peak TIER=GB/s)"
                   if tier == UNKNOWN else f"pass --peak {tier}=GB/s)"))
            continue
        alpha, _ = fit
        out.extend(_findings(c, calls, str(tier), alpha))
    return out


def _findings(c: Ctx, calls: pl.DataFrame, tier: str, alpha: float) -> list[Finding]:
    out = []
    for (dim,), part in calls.partition_by("dimension", as_dict=True).items():
        # of a typical call (the median: a few calls stretched by a busy host would hide the fixed part)
        median = part["transfer_ns"].median()
        typical = float(median) if isinstance(median, (int, float)) else 0.0
        share = min(1.0, alpha / typical) if typical > 0 else 0.0
        n = part.height / c.rank_steps
        wait = float(part["exposed_wait_ns"].fill_null(0.0).sum()) / c.rank_steps
        exposed = float((part["exposed_ns"] - part["exposed_wait_ns"].fill_null(0.0)).clip(0.0).sum()) / c.rank_steps
        if dim in LAYER_DIMS:  # a layer's calls cannot be merged: twice the tokens per call, half the calls
            after = n / LAYER_CALL_FACTOR
            # each call is a sync point of its group: half the calls also wait half as often for whichever rank is
            # behind at that moment (zoo tp_small: the wait's half brought the estimate from 0.4x to 0.6x of its A/B)
            saving = min((n - after) * alpha + wait * (1 - 1 / LAYER_CALL_FACTOR), exposed + wait)
            how = (f"half the calls, each with {LAYER_CALL_FACTOR}x the tokens (the same tokens per step): "
                   f"(calls / {LAYER_CALL_FACTOR}) x alpha, plus half their exposed wait (half the sync points)")
            cap = "their exposed time"
        else:  # coalesced: one call per group and op per rank-step
            after = float(part.group_by("rank", "step", "pg", "op").len().height) / c.rank_steps
            saving = min(max(0.0, n - after) * alpha, exposed)
            how = "(calls - calls after coalescing, one per group and op per step) x alpha"
            cap = "their exposed transfer"
        if n < MIN_CALLS_PER_STEP or share < LATENCY_BOUND or c.noise(saving):
            continue
        pgs = tuple(sorted(set(map(str, part["pg"].to_list()))))
        out.append(Finding(
            id="small_messages", key=f"small_messages:{dim}:{tier}", severity=severity(saving, c.step_ns),
            title=f"{n:.0f} small {dim} messages per step on {tier} are latency-bound: ~{ms(alpha)} each "
                  f"whatever their size",
            detail=f"{len(pgs)} group(s), calls under {SMALL_BYTES >> 20} MiB "
                   f"({', '.join(sorted(set(part['op'].to_list())))}): fitted over the run's call sizes, a call "
                   f"takes {ms(alpha)} + bytes / beta, and that fixed part is {share:.0%} of a typical call's "
                   f"transfer; they expose {ms(exposed)} of transfer per step ({tier} has no peak to compare busbw "
                   "with).",
            action=small_message_fix(str(dim)),
            saving_ns_per_step=round(saving),
            saving_model=f"{how} ({ms(alpha)}, fitted: transfer = alpha + bus bytes / beta over the {tier} calls' "
                         f"sizes), capped at {cap}",
            pgs=pgs[:16], dimension=str(dim), tier=tier, steps=steps_of(part),
            numbers={"calls_per_step": n, "calls_after_per_step": after, "alpha_ns": alpha,
                     "alpha_share": share, "exposed_transfer_ns_per_step": exposed,
                     "exposed_wait_ns_per_step": wait}))
    return out
