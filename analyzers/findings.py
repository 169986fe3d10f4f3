"""Findings: what is wrong with a run's communication, how much step time fixing it would save, and what
to change. Each rule reads the analysis' frames (never a file) and returns :class:`Finding` instances;
:func:`rank_findings` orders them severity first, then estimated saving.

A finding's ``saving_ns_per_step`` is an estimate of the mean step time (per rank-step) the change would
save, made by the model named in ``saving_model``; it never exceeds the exposed time the finding is about
(docs/findings.md describes each rule and its model).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from commprof.vocab import SEVERITIES

# Every kind of finding, in the order docs/findings.md describes them. ``id`` is stable: check rules,
# diff and the dashboard key on it.
FINDING_IDS = (
    "tp_across_nodes", "group_larger_than_node", "dp_sync_exposed", "straggler", "small_messages", "pipeline_bubble",
    "alltoall_imbalance",
    "link_efficiency", "nccl_socket_fallback", "nccl_gdr_disabled", "nccl_p2p_disabled", "nvls_unavailable",
    "host_sync", "desync",
)


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem. ``key`` is unique per instance (``id`` plus what it is about), so two runs'
    findings can be compared by key (diff: new/gone)."""

    id: str  # the kind, one of FINDING_IDS
    key: str  # unique per instance, e.g. "straggler:rank5"
    severity: str  # one of commprof.vocab.SEVERITIES
    title: str  # one line
    detail: str  # the evidence in words
    action: str  # the suggested change
    saving_ns_per_step: int  # estimated mean step-time saving per rank-step; 0 when not estimated
    saving_model: str  # how the saving was estimated ("" when it is not)
    ranks: tuple[int, ...] = ()
    pgs: tuple[str, ...] = ()
    dimension: str | None = None
    tier: str | None = None
    steps: tuple[int, ...] = ()
    numbers: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.id not in FINDING_IDS:
            raise ValueError(f"unknown finding id {self.id!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def __hash__(self) -> int:  # numbers is a dict; the key names the instance
        return hash(self.key)


def rank_findings(found: Iterable[Finding]) -> tuple[Finding, ...]:
    """Highest severity first, then the largest saving, then the key (a stable order for equal ones)."""
    return tuple(sorted(found, key=lambda f: (-SEVERITIES.index(f.severity), -f.saving_ns_per_step, f.key)))


FINDINGS_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "id": pl.String, "key": pl.String, "severity": pl.String, "title": pl.String, "saving_ns_per_step": pl.Int64,
    "saving_model": pl.String, "action": pl.String, "detail": pl.String, "ranks": pl.List(pl.Int64),
    "pgs": pl.List(pl.String), "dimension": pl.String, "tier": pl.String, "steps": pl.List(pl.Int64),
}


def findings_frame(found: Iterable[Finding]) -> pl.DataFrame:
    """Findings as one row each, in their order (the columns of FINDINGS_SCHEMA; docs/notebook.md)."""
    rows = [{"id": f.id, "key": f.key, "severity": f.severity, "title": f.title,
             "saving_ns_per_step": int(f.saving_ns_per_step), "saving_model": f.saving_model, "action": f.action,
             "detail": f.detail, "ranks": [int(r) for r in f.ranks], "pgs": [str(p) for p in f.pgs],
             "dimension": f.dimension, "tier": f.tier, "steps": [int(s) for s in f.steps]} for f in found]
    return pl.DataFrame(rows, schema=FINDINGS_SCHEMA)

