"""No silent report: when exposed communication is a large share of the step and no rule names a cause
(no finding above info), the analysis says where it goes — the dimension and tier, the op, wait versus
transfer, the ranks waited on — and what to look at, in the first lines of every view (docs/findings.md).

It is an observation, not a finding: a clean run whose step is mostly communication has no fault to gate
on or to diff (``check --max-exposed-comm-pct`` gates on the share). Every figure is read from the
analysis' frames; the views print the note's text.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class ExposedNote:
    """Where the exposed communication goes (ns are means per rank-step)."""

    headline: str  # one line: the share, wait vs transfer, where, which op
    detail: str  # the figures behind it
    look_at: str  # what to look at
    exposed_ns: float
    share: float  # of the step
    wait_ns: float  # of exposed_ns: waiting for a later rank
    dimension: str
    tier: str
    place_ns: float  # exposed in that dimension and tier
    op: str
    op_ns: float  # exposed in that op
    waited_on: tuple[tuple[int, float], ...]  # (rank, the others' exposed wait for it), largest first
    doubtful_ranks: tuple[int, ...]  # left out of waited_on: their clock or run is in doubt


def _matched(c: Ctx) -> bool:
    return "matched_ranks" in c.calls.columns and bool((c.calls["matched_ranks"].fill_null(0) > 1).any())


def _traced_words(c: Ctx) -> str:
    traced, world = c.a.ranks.height, c.a.facts.world_size
    return f" (only {traced} of {world} ranks traced: waits among them only)" if world and traced < world else ""


def _wait_words(c: Ctx, wait: float, exposed: float, waited_on: list[tuple[int, float]]) -> str:
    if not _matched(c):  # one rank's trace, or nothing matched: a wait cannot be told from a transfer
        return "its wait for late ranks unknown (no call matched across ranks)"
    mostly = f" (mostly for {', '.join(f'rank {r}' for r, _ in waited_on)})" if waited_on else ""
    return f"{pct(wait, exposed)} of it waiting for late ranks{mostly}"


def exposed_note(c: Ctx, found: list[Finding]) -> ExposedNote | None:
    """The note, when exposed comm is over ``LARGE_SHARE`` of the step and no finding above info names a cause."""
    exposed = float(c.a.totals.get("exposed_comm_ns") or 0)
    share = exposed / c.step_ns if c.step_ns > 0 else 0.0
    if share <= LARGE_SHARE or any(f.severity != "info" for f in found):
        return None
    wait = float(c.a.totals.get("exposed_wait_ns") or 0)
    place = _top_place(c)
    dim, tier = str(place.get("dimension") or UNKNOWN), str(place.get("tier") or UNKNOWN)
    place_ns = float(place.get("exposed_ns_per_step") or 0)  # type: ignore[arg-type]
    op, op_ns = _top_op(c)
    waited = _waited_on(c)
    wait_heavy = wait >= WAIT_DOMINATED * exposed
    doubtful = tuple(sorted(c.doubtful))
    where = f"{dim} on {tier}" if dim != UNKNOWN or tier != UNKNOWN else "unknown groups and tier"
    return ExposedNote(
        headline=f"exposed communication is {pct(exposed, c.step_ns)} of the step ({ms(exposed)}), "
                 + _wait_words(c, wait, exposed, waited if wait_heavy else [])
                 + f"; most in {where}, {op}; no finding above info explains it",
        detail=f"{where} exposes {ms(place_ns)} per rank-step, {op} calls {ms(op_ns)}; of the exposed time "
               f"{ms(wait)} is waiting for a later rank and {ms(exposed - wait)} transfer; the others' exposed "
               f"wait was for: {', '.join(f'rank {r} ({ms(v)}/step)' for r, v in waited) or 'none'}"
               + (f" (ranks {', '.join(map(str, doubtful))} left out: their clock or run is in doubt)"
                  if doubtful else "")
               + _traced_words(c),
        look_at=_look_at(c, wait_heavy, dim == UNKNOWN, tier),
        exposed_ns=exposed, share=share, wait_ns=wait, dimension=dim, tier=tier, place_ns=place_ns, op=op,
        op_ns=op_ns, waited_on=tuple(waited), doubtful_ranks=doubtful)
