"""The finding for a layout no swap of dimensions can fix: a TP, CP or EP group larger than a node has
to cross the network whatever the placement (rule_front_dim_across_nodes handles the groups that would
fit a node). The fix is another layout; its saving comes from the layout what-if
(analyzers/whatif_layout.py), or is "not estimated" with the reason the what-if gives."""

from __future__ import annotations

import math

import polars as pl

from commprof.analyzers import whatif, whatif_layout
from commprof.analyzers.findings import Finding
from commprof.analyzers.findings_rules import FRONT_DIMS, Ctx, ms, pct, severity
from commprof.errors import UsageError
from commprof.vocab import MEGATRON_ORDER


def _text(sizes: dict[str, int]) -> str:
    return ",".join(f"{d}={sizes[d]}" for d in MEGATRON_ORDER if sizes.get(d, 1) > 1) or "dp=1"


def candidates(sizes: dict[str, int], dim: str, gpn: int) -> list[dict[str, int]]:
    """Layouts with ``dim`` cut to fit a node (the largest size dividing both), the factor taken off it
    given to dp, else to pp: the dimensions that belong on the network (Megatron's order)."""
    fit = math.gcd(sizes[dim], gpn)
    k = sizes[dim] // fit
    return [{**sizes, dim: fit, back: sizes.get(back, 1) * k} for back in ("dp", "pp")]


def _estimate(c: Ctx, layouts: list[dict[str, int]]) -> tuple[dict[str, int], float | None, str]:
    """The first layout the what-if can estimate, with its saving; else the first one and the reason."""
    reasons = []
    for sizes in layouts:
        text = f"layout:{_text(sizes)}"
        change = whatif.Change(text, "layout", sizes=tuple(sizes.items()))
        try:
            return sizes, c.saving([change]), f"what-if {text}"
        except UsageError as err:
            reasons.append(str(err).split("cannot be estimated from this run: ", 1)[-1])
    return layouts[0], None, "; ".join(dict.fromkeys(reasons))


def rule_group_larger_than_node(c: Ctx) -> list[Finding]:
    if whatif_layout.node_count(c.a) < 2:
        return []
    gpn = whatif_layout.gpus_per_node(c.a)
    sizes = whatif_layout.run_sizes(c.a)
    out = []
    for dim in FRONT_DIMS:
        if sizes.get(dim, 1) <= gpn:
            continue
        groups = c.a.process_groups.filter((pl.col("dimension") == dim) & (pl.col("size") > gpn))
        row = c.dim_row(dim)
        exposed = float(row.get("exposed_ns_per_step") or 0)
        if c.noise(exposed):
            continue
        layouts = candidates(sizes, dim, gpn)
        _, saving, how = _estimate(c, layouts)
        estimated = saving is not None
        saving = min(saving or 0.0, exposed)
        if estimated and c.noise(saving):
            continue
        tier = str(groups["tier"][0]) if groups.height else None
        sev = severity(saving, c.step_ns) if estimated else "high" if exposed >= 0.1 * c.step_ns else "medium"
        others = " or ".join(_text(s) for s in layouts)
        out.append(Finding(
            id="group_larger_than_node", key=f"group_larger_than_node:{dim}", severity=sev,
            title=f"{dim.upper()} groups of {sizes[dim]} ranks cannot fit a node of {gpn}: {dim} runs on "
                  f"{tier or 'the network'}, exposing {ms(exposed)} per step ({pct(exposed, c.step_ns)})",
            detail=f"layout {_text(sizes)} on {whatif_layout.node_count(c.a)} nodes of {gpn} GPUs: every {dim} group "
                   f"spans {int(groups['nodes_spanned'].max() or 0) if groups.height else '?'} nodes, and no other "
                   f"dimension can take its place inside them; {dim} moves "
                   f"{float(row.get('bytes_per_step') or 0) / 1e9:.2f} GB in "
                   f"{float(row.get('ops_per_step') or 0):.0f} calls per rank-step.",
            action=f"use {dim} <= {gpn} (the GPUs of a node) and give the rest to data or pipeline parallelism: "
                   f"{others} (Megatron order tp-cp-ep-dp-pp, {dim} innermost)",
            saving_ns_per_step=round(saving),
            saving_model=(f"{how}: each dimension's bytes per call re-derived from the measured calls, groups "
                          f"placed Megatron-style on the nodes, compute per rank kept; capped at {dim}'s exposed "
                          "time") if estimated else f"not estimated: {how}",
            pgs=tuple(groups["pg"].to_list())[:16], dimension=dim, tier=tier,
            numbers={"exposed_ns_per_step": exposed, "group_size": float(sizes[dim]), "gpus_per_node": float(gpn)}))
    return out
