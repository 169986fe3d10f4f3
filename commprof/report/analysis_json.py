"""The ``analyze`` report as plain data (the JSON schema documented in docs/json-schema.md).

Text and Markdown renderers read this same structure, so every format shows the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from commprof.analyzers.bandwidth import BANDWIDTH_CONVENTION
from commprof.errors import printable
from commprof.report.other_sources import hang_dict, ras_dict

if TYPE_CHECKING:
    from commprof.analyzers.findings import Finding
    from commprof.analyzers.pipeline import Analysis

SCHEMA_VERSION = 3  # 2: wait/transfer split, skew, dimensions[], tiers[]; 3: findings[], findings_computed, what_if,
# conventions (added keys keep the version: readers of 3 ignore them)


def json_safe(value: Any) -> Any:
    """Floats rounded to 6 places, NaN/inf as null, recursively: what every JSON report writes."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def _int(value: Any) -> int | None:
    return None if value is None else int(round(value))


def _rows(frame: Any, keys: list[str], ints: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{k: (_int(r.get(k)) if k in ints else r.get(k)) for k in keys} for r in frame.iter_rows(named=True)]


RANK_KEYS = ["rank", "steps", "step_ns", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns",
             "idle_ns", "exposed_wait_ns", "exposed_transfer_ns", "overlap_pct", "exposed_pct_of_step"]
SUMMARY_KEYS = ["pg", "dimension", "tier", "op", "count", "bytes", "bytes_unknown_calls", "comm_ns",
                "overlapped_ns", "exposed_ns", "exposed_wait_ns", "exposed_transfer_ns", "algbw_gbps", "busbw_gbps",
                "peak_gbps", "efficiency"]
TOP_KEYS = ["pg", "dimension", "tier", "op", "bytes", "count", "calls_per_step", "comm_ns", "mean_ns", "exposed_ns",
            "exposed_ns_per_step", "exposed_wait_ns", "busbw_gbps", "peak_gbps", "efficiency"]
PER_STEP_INTS = ("bytes_per_step", "comm_ns_per_step", "overlapped_ns_per_step", "exposed_ns_per_step",
                 "exposed_wait_ns_per_step", "exposed_transfer_ns_per_step")
TRAFFIC_KEYS = ["groups", "ops_per_step", "bytes_unknown_calls", *PER_STEP_INTS, "exposed_pct_of_step", "busbw_gbps",
                "peak_gbps", "efficiency"]
STRAGGLER_KEYS = ["rank", "steps", "wait_ns_per_step", "max_wait_ns", "max_wait_pg", "max_wait_op", "max_wait_call",
                  "max_wait_step", "max_wait_late_rank", "matched_calls", "times_last", "caused_wait_ns_per_step"]


def _groups(analysis: Analysis) -> list[dict[str, Any]]:
    return [
        {
            "pg": g["pg"], "desc": g["desc"], "ranks": g["ranks"], "size": g["size"], "backend": g["backend"],
            "dimension": g["dimension"] or "unknown", "dimension_source": g["dimension_source"],
            "confidence": g["confidence"], "tier": g["tier"] or "unknown", "tier_source": g["tier_source"],
            "nodes_spanned": g["nodes_spanned"], "op_mix": {m["op"]: m["count"] for m in (g.get("op_mix") or [])},
            "calls": g["count"] or 0, "bytes_unknown_calls": g["bytes_unknown_calls"] or 0,
            "rank_steps": g["rank_steps"],
            **{k: _int(g[k]) for k in PER_STEP_INTS}, "exposed_pct_of_step": g["exposed_pct_of_step"],
            "busbw_gbps": g["busbw_gbps"], "peak_gbps": g.get("peak_gbps"), "efficiency": g.get("efficiency"),
            "nccl_comm": g.get("nccl_comm"),
        }
        for g in analysis.group_summary.iter_rows(named=True)
    ]


def build(analysis: Analysis) -> dict[str, Any]:
    """The analyze report: every number comes from the analysis, formatted for JSON."""
    facts = analysis.facts
    ranks = _rows(analysis.rank_summary, RANK_KEYS)
    report: dict[str, Any] = json_safe({
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run": {
            "path": facts.path,
            "kind": facts.kind,
            "world_size": facts.world_size,
            "ranks_analyzed": len(ranks),
            "hosts": list(facts.hosts),
            "mode": list(facts.modes),
            "sources": _sources(analysis),
            "hta_compat": analysis.settings.hta_compat,
            "synthetic": facts.synthetic,
            "layout": _layout(analysis),
            "steps_analyzed": analysis.steps_analyzed,
            # record --every/--on-demand: which window this is (name, step, reason, trigger), else null
            "window": _window(analysis.facts.manifest),
            # kernel families the user declared communication (--comm-kernel, [[comm_kernel]])
            "declared_comm_kernels": [{"spec": d.spec, "name": d.name or None} for d in analysis.tables.declared],
        },
        "conventions": {"bandwidth": BANDWIDTH_CONVENTION},
        "totals": analysis.totals,
        "ranks": ranks,
        "rank_distribution": analysis.rank_distribution.to_dicts(),
        "process_groups": _groups(analysis),
        "collectives_summary": _rows(analysis.collectives_summary, SUMMARY_KEYS,
                                     ("overlapped_ns", "exposed_ns", "exposed_wait_ns", "exposed_transfer_ns")),
        "top_collectives": _rows(analysis.top_collectives(), TOP_KEYS,
                                 ("exposed_ns", "exposed_wait_ns", "mean_ns", "exposed_ns_per_step")),
        "dimension_tier": _rows(analysis.dimension_tier, ["dimension", "tier", *TRAFFIC_KEYS], PER_STEP_INTS),
        "dimensions": _rows(analysis.by_dimension, ["dimension", *TRAFFIC_KEYS], PER_STEP_INTS),
        "tiers": _rows(analysis.by_tier, ["tier", *TRAFFIC_KEYS], PER_STEP_INTS),
        "skew": {
            "match_by": analysis.match_by,
            "unmatched_calls": analysis.unmatched_calls,
            "host_clocks": analysis.host_clocks.to_dicts(),
            "host_pairs": analysis.host_pairs.to_dicts(),
            "stragglers": _rows(analysis.stragglers, STRAGGLER_KEYS),
        },
        "findings_computed": analysis.findings_computed,
        "findings": [finding_dict(f) for f in analysis.finding_list],
        "what_if": _what_if(analysis),
        "exposed_note": asdict(analysis.exposed_note) if analysis.exposed_note else None,
        "doubtful_ranks": analysis.doubtful_ranks.to_dicts(),
        "uncounted_comm_kernels": _rows(analysis.uncounted, list(analysis.uncounted.columns), ("ns_per_rank",)),
        "flight_recorder": hang_dict(analysis.hang),
        # the hang report from NCCL RAS status reports beside the traces, when there are any
        **({"nccl_ras": ras_dict(analysis.ras)} if analysis.ras is not None else {}),
        "warnings": [printable(w) for w in analysis.warnings],  # file names in them: one line each
    })
    return report


def _window(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    window = (manifest or {}).get("window")
    if not isinstance(window, dict):
        return None
    return {k: window.get(k) for k in ("name", "step", "seconds", "reason", "trigger")}


def _sources(analysis: Analysis) -> dict[str, list[int]]:
    """Which reader read which ranks (kineto, nsys, ...), as the ranks table says."""
    if "source" not in analysis.ranks.columns:
        return {}
    out: dict[str, list[int]] = {}
    for rank, source in analysis.ranks.select("rank", "source").iter_rows():
        out.setdefault(source or "kineto", []).append(int(rank))
    return out


def finding_dict(f: Finding) -> dict[str, Any]:
    return {"id": f.id, "key": f.key, "severity": f.severity, "title": f.title, "detail": f.detail,
            "action": f.action, "saving_ns_per_step": f.saving_ns_per_step, "saving_model": f.saving_model,
            "ranks": list(f.ranks), "pgs": list(f.pgs), "dimension": f.dimension, "tier": f.tier,
            "steps": list(f.steps), "numbers": dict(f.numbers)}


def _what_if(analysis: Analysis) -> dict[str, Any] | None:
    w = analysis.what_if
    if w is None:
        return None
    return {
        "estimate": True, "changes": list(w.changes), "method": w.method,
        "totals": {k: _int(v) for k, v in w.totals.items()},
        "ranks": [{k: _int(v) if k != "rank" else v for k, v in r.items()} for r in w.ranks.iter_rows(named=True)],
        "dimensions": [{"dimension": r["dimension"], "exposed_ns_per_step": _int(r["exposed_ns_per_step"]),
                        "exposed_ns_per_step_after": _int(r["exposed_ns_per_step_after"])}
                       for r in w.by_dimension.iter_rows(named=True)],
        "warnings": list(w.warnings),
        "checked": [dict(c) for c in w.checked],
    }


def _layout(analysis: Analysis) -> dict[str, Any] | None:
    layout = analysis.settings.layout
    return None if layout is None else {"sizes": dict(layout.sizes), "order": list(layout.order)}
