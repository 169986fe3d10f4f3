"""The ``analyze`` report as plain data (the JSON schema documented in docs/json-schema.md).

Text and Markdown renderers read this same structure, so every format shows the same numbers.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis
    from commprof.run import Run

SCHEMA_VERSION = 1


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


def build(run: Run, analysis: Analysis) -> dict[str, Any]:
    ranks = [
        {
            "rank": r["rank"],
            "steps": r["steps"],
            "step_ns": r["step_ns"],
            "compute_ns": r["compute_ns"],
            "overlapped_comm_ns": r["overlapped_comm_ns"],
            "exposed_comm_ns": r["exposed_comm_ns"],
            "memory_ns": r["memory_ns"],
            "idle_ns": r["idle_ns"],
            "overlap_pct": r["overlap_pct"],
        }
        for r in analysis.rank_summary().iter_rows(named=True)
    ]
    groups = []
    for g in analysis.pg_summary().iter_rows(named=True):
        op_mix = {m["op"]: m["count"] for m in (g.get("op_mix") or [])}
        groups.append({
            "pg": g["pg"],
            "desc": g["desc"],
            "ranks": g["ranks"],
            "size": g["size"],
            "backend": g["backend"],
            "dimension": g["dimension"] or "unknown",
            "dimension_source": g["dimension_source"],
            "confidence": g["confidence"],
            "tier": g["tier"] or "unknown",
            "tier_source": g["tier_source"],
            "nodes_spanned": g["nodes_spanned"],
            "op_mix": op_mix,
            "calls": g["count"] or 0,
            "bytes_per_step": _int(g["bytes_per_step"]),
            "comm_ns_per_step": _int(g["comm_ns_per_step"]),
            "exposed_ns_per_step": _int(g["exposed_ns_per_step"]),
            "busbw_gbps": g["busbw_gbps"],
            "peak_gbps": g.get("peak_gbps"),
            "efficiency": g.get("efficiency"),
            "nccl_comm": g.get("nccl_comm"),
        })
    summary = [
        {
            "pg": c["pg"], "dimension": c["dimension"], "tier": c["tier"], "op": c["op"],
            "count": c["count"], "bytes": c["bytes"], "comm_ns": c["comm_ns"],
            "overlapped_ns": _int(c["overlapped_ns"]), "exposed_ns": _int(c["exposed_ns"]),
            "algbw_gbps": c["algbw_gbps"], "busbw_gbps": c["busbw_gbps"], "efficiency": c.get("efficiency"),
        }
        for c in analysis.collectives_summary().iter_rows(named=True)
    ]
    top = [
        {
            "pg": c["pg"], "dimension": c["dimension"], "tier": c["tier"], "op": c["op"], "bytes": c["bytes"],
            "count": c["count"], "comm_ns": c["comm_ns"], "exposed_ns": _int(c["exposed_ns"]),
            "busbw_gbps": c["busbw_gbps"], "efficiency": c.get("efficiency"),
        }
        for c in analysis.top_collectives().iter_rows(named=True)
    ]
    dimension_tier = [
        {
            "dimension": d["dimension"], "tier": d["tier"], "groups": d["groups"],
            "ops_per_step": d["ops_per_step"], "bytes_per_step": _int(d["bytes_per_step"]),
            "comm_ns_per_step": _int(d["comm_ns_per_step"]), "exposed_ns_per_step": _int(d["exposed_ns_per_step"]),
            "exposed_pct_of_step": d["exposed_pct_of_step"], "busbw_gbps": d["busbw_gbps"],
            "efficiency": d["efficiency"],
        }
        for d in analysis.dimension_tier().iter_rows(named=True)
    ]
    totals = _totals(ranks)
    report: dict[str, Any] = json_safe({
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run": {
            "path": str(run.path),
            "kind": run.source.kind,
            "world_size": run.world_size,
            "ranks_analyzed": len(ranks),
            "hosts": sorted({h for h in run.ranks["host"].to_list() if h}),
            "mode": sorted(set(run.ranks["mode"].drop_nulls().to_list())),
            "hta_compat": analysis.settings.hta_compat,
            "synthetic": bool((run.manifest or {}).get("synthetic", False)),
            "layout": _layout(analysis),
        },
        "totals": totals,
        "ranks": ranks,
        "process_groups": groups,
        "collectives_summary": summary,
        "top_collectives": top,
        "dimension_tier": dimension_tier,
        "warnings": analysis.warnings,
    })
    return report


def _layout(analysis: Analysis) -> dict[str, Any] | None:
    layout = analysis.settings.layout
    return None if layout is None else {"sizes": dict(layout.sizes), "order": list(layout.order)}


def _totals(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over ranks of the per-step figures (ns) and the overall overlap %."""
    if not ranks:
        return {}
    keys = ["step_ns", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"]
    out: dict[str, Any] = {k: _int(sum(r[k] or 0 for r in ranks) / len(ranks)) for k in keys}
    comm = out["overlapped_comm_ns"] + out["exposed_comm_ns"]
    out["overlap_pct"] = 100.0 * out["overlapped_comm_ns"] / comm if comm else None
    out["exposed_comm_pct_of_step"] = 100.0 * out["exposed_comm_ns"] / out["step_ns"] if out["step_ns"] else None
    return out
