"""Merged ``commprof export --perfetto`` files read back as runs: the format mark and the split into one
Kineto-style trace per rank (what ingest parses). The writer is commprof/export/perfetto.py."""

from __future__ import annotations

from typing import Any

FORMAT = "commprof-perfetto"
VERSION = 1


def distributed_info(trace: dict[str, Any], rank: int) -> dict[str, Any]:
    meta = trace["commprof"]
    return {"rank": rank, "world_size": meta["world_size"] or len(meta["ranks"]),
            "pg_count": len(meta["process_groups"]), "pg_config": meta["process_groups"]}


def split_by_rank(trace: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A merged export -> one Kineto-style trace per rank (pid), each with its ``distributedInfo``."""
    out: dict[int, dict[str, Any]] = {}
    for ev in trace["traceEvents"]:
        pid = int(ev["pid"])
        if pid not in out:
            out[pid] = {k: v for k, v in trace.items() if k not in ("traceEvents", "distributedInfo")}
            out[pid]["distributedInfo"] = distributed_info(trace, pid)
            out[pid]["traceEvents"] = []
        out[pid]["traceEvents"].append(ev)
    return out
