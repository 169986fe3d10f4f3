"""A ``commprof record`` rank sidecar (raw/ranks/rank-N.json) checked where it is read: each field that
ingest uses has its type and range verified, and a bad one is dropped with a line saying so (a sidecar
written by hand or half by a dying rank must not become a traceback in the Gloo attribution)."""

from __future__ import annotations

from typing import Any

MAX_RANK = 1 << 24
_TEXT = (str, type(None))


def _plain_int(value: Any, high: int) -> bool:
    return type(value) is int and 0 <= value < high


def clean_sidecar(data: Any, name: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(the sidecar with its bad fields dropped, what was dropped); None when it is not an object."""
    if not isinstance(data, dict):
        return None, [f"{name}: not a rank sidecar (not a JSON object); ignored"]
    out = dict(data)
    problems: list[str] = []
    for key, high in (("rank", MAX_RANK), ("pid", 1 << 62)):
        if out.get(key) is not None and not _plain_int(out[key], high):
            problems.append(f"{name}: ignored {key} {str(out[key])[:30]!r}")
            out[key] = None
    groups = out.get("process_groups")
    if groups is not None and not isinstance(groups, list):
        problems.append(f"{name}: ignored process_groups (not a list)")
        groups = []
    kept = []
    for group in groups or []:
        group_name = group.get("name") if isinstance(group, dict) else None
        if not isinstance(group_name, (str, int)) or isinstance(group_name, bool):
            problems.append(f"{name}: ignored a process group without a name")
            continue
        clean = {**group, "name": str(group_name)}
        tids = clean.get("worker_tids")
        if tids is not None and not (isinstance(tids, list) and all(_plain_int(t, 1 << 62) for t in tids)):
            problems.append(f"{name}: ignored worker_tids of group {clean['name']!r} (not thread ids)")
            clean["worker_tids"] = None
        for key in ("desc", "backend"):
            if not isinstance(clean.get(key), _TEXT):
                clean[key] = None
        if clean.get("size") is not None and not _plain_int(clean["size"], MAX_RANK + 1):
            clean["size"] = None
        if not isinstance(clean.get("ranks"), (list, str, type(None))):
            clean["ranks"] = None
        kept.append(clean)
    if groups is not None:
        out["process_groups"] = kept
    return out, problems
