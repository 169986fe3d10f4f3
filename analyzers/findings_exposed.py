"""No silent report: when exposed communication is a large share of the step and no other rule names a
cause (no finding above info), the ``exposed_comm`` finding says where it goes — the dimension and tier, the op,
wait versus transfer, the ranks waited on — and what to look at (docs/findings.md).

It is an observation, not a diagnosis: no saving is estimated, so its severity is info, as for any finding
without a saving (a clean run whose step is mostly communication has no fault to gate on; the share is in
the title, and ``check`` gates on shares with its own thresholds). It is the first finding whenever no other
rule fired. Every figure is read from the analysis' frames; views print the finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from commprof.analyzers.findings import Finding
from commprof.analyzers.findings_rules import ms, pct
from commprof.vocab import UNKNOWN

if TYPE_CHECKING:
    from commprof.analyzers.findings_rules import Ctx

LARGE_SHARE = 0.20  # exposed comm above a fifth of the step is never left unexplained
WAIT_DOMINATED = 0.5  # at least half of the exposed time is waiting for late ranks
TOP_WAITED = 3


def _top_place(c: Ctx) -> dict[str, object]:
    rows = c.a.dimension_tier.sort("exposed_ns_per_step", descending=True).head(1).to_dicts()
    return rows[0] if rows else {}


def _top_op(c: Ctx) -> tuple[str, float]:
    if c.calls.height == 0 or "exposed_ns" not in c.calls.columns:
        return "?", 0.0
    per = c.calls.group_by("op").agg(pl.col("exposed_ns").sum()).sort("exposed_ns", descending=True).row(0)
    return str(per[0]), float(per[1]) / c.rank_steps


def _waited_on(c: Ctx) -> list[tuple[int, float]]:
    """The ranks the others' exposed wait was for, per rank-step, largest first (doubtful ranks left out)."""
    if c.calls.height == 0 or "exposed_wait_ns" not in c.calls.columns:
        return []
    waits = (c.calls.filter((pl.col("rank") != pl.col("late_rank")) & pl.col("late_rank").is_not_null()
                            & ~pl.col("late_rank").is_in(list(c.doubtful)))
             .group_by("late_rank").agg(pl.col("exposed_wait_ns").sum())
             .sort("exposed_wait_ns", descending=True))
    return [(int(r), float(v) / c.rank_steps) for r, v in waits.head(TOP_WAITED).iter_rows() if v > 0]


def _look_at(c: Ctx, waited: bool, unknown: bool, tier: str) -> str:
    parts = []
    if waited:
        parts.append("the ranks waited on: what they do before their late calls (uneven work or data, data "
                     "loading, CPU contention, a slower device) — the skew page shows them per call")
    else:
        peak = f"the {tier} peak" if tier != UNKNOWN else "the link's peak"
        parts.append(f"the transfer itself: busbw against {peak}, message sizes (many small calls are "
                     "latency-bound), and overlap with compute (DDP buckets, FSDP prefetch, async calls)")
    if unknown:
        parts.append("the groups are unknown (no record_param_comms in the trace): record with a PyTorch that "
                     "writes it, or pass --layout, to see dimensions and tiers")
    return "; ".join(parts)


def rule_exposed_comm(c: Ctx, found: list[Finding]) -> list[Finding]:
    exposed = float(c.a.totals.get("exposed_comm_ns") or 0)
    share = exposed / c.step_ns if c.step_ns > 0 else 0.0
    if share <= LARGE_SHARE or any(f.severity != "info" for f in found):
        return []
    wait = float(c.a.totals.get("exposed_wait_ns") or 0)
    place = _top_place(c)
    dim, tier = str(place.get("dimension") or UNKNOWN), str(place.get("tier") or UNKNOWN)
    place_ns = float(place.get("exposed_ns_per_step") or 0)  # type: ignore[arg-type]
    op, op_ns = _top_op(c)
    waited = _waited_on(c)
    wait_heavy = wait >= WAIT_DOMINATED * exposed
    waited_text = ", ".join(f"rank {r} ({ms(v)}/step)" for r, v in waited) or "none"
    doubtful = sorted(c.doubtful)
    where = f"{dim} on {tier}" if dim != UNKNOWN or tier != UNKNOWN else "unknown groups and tier"
    return [Finding(
        id="exposed_comm", key="exposed_comm", severity="info",
        title=f"exposed communication is {pct(exposed, c.step_ns)} of the step ({ms(exposed)}), "
              f"{pct(wait, exposed)} of it waiting for late ranks"
              + (f" (mostly for {', '.join(f'rank {r}' for r, _ in waited)})" if wait_heavy and waited else "")
              + f"; most in {where}, {op}; no rule names a cause",
        detail=f"{where} exposes {ms(place_ns)} per rank-step, {op} calls {ms(op_ns)}; of the exposed time "
               f"{ms(wait)} is waiting for a later rank and {ms(exposed - wait)} transfer. The others' exposed "
               f"wait was for: {waited_text}"
               + (f" (ranks {', '.join(map(str, doubtful))} left out: their clock or run is in doubt)"
                  if doubtful else "")
               + (f" (only {c.a.ranks.height} of {c.a.facts.world_size} ranks traced: waits among them only)"
                  if c.a.facts.world_size and c.a.ranks.height < c.a.facts.world_size else "")
               + ".",
        action="look at " + _look_at(c, wait_heavy, dim == UNKNOWN, tier),
        saving_ns_per_step=0, saving_model="not estimated: an observation of where the exposed time goes, "
                                           "no rule named its cause",
        ranks=tuple(r for r, _ in waited) if wait_heavy else (),
        dimension=dim, tier=tier,
        numbers={"exposed_ns_per_step": exposed, "exposed_share": share, "exposed_wait_ns_per_step": wait,
                 "top_place_ns_per_step": place_ns}
        | {f"waited_on_rank{r}_ns_per_step": v for r, v in waited})]
