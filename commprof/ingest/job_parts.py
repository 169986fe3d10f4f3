"""A job's manifest as the union of its launchers' parts.

A job recorded by one ``commprof record`` per node (or per rank) leaves one part per launcher in
``raw/launchers/<host>-<pid>.json``, each written only by its launcher: what it ran, when, how it ended and
the ranks it saw. Nodes on a shared file system put their parts in one run directory; nodes on local disks
leave one run directory each, joined when they are analyzed together. The manifest a reader works with is
the union of every part found; ``manifest.json`` is a snapshot of that union for people (any launcher may
have written it last, so readers never trust it over the parts).

Standard library only: the launcher writes its snapshot with it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PARTS_DIR = ("raw", "launchers")
_ORDER = {"running": 0, "failed": 1, "finished": 2}
# settings that differ between launchers by design: each rank's own GPU (srun/mpirun give each task one)
PER_PROCESS = frozenset({"CUDA_VISIBLE_DEVICES"})


def part_paths(run_dir: Path) -> list[Path]:
    folder = run_dir.joinpath(*PARTS_DIR)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.json") if p.is_file() and not p.name.startswith("."))


def read_parts(run_dir: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The launcher parts of one run directory; an unreadable one is a line in ``problems``."""
    out = []
    for path in part_paths(run_dir):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:
            problems.append(f"{path}: unreadable launcher part ({err}); its node's manifest entries are missing")
            continue
        if isinstance(data, dict):
            out.append(data)
        else:
            problems.append(f"{path}: not a launcher part (not a JSON object); skipped")
    return out


def job_key(doc: dict[str, Any] | None) -> str | None:
    job = (doc or {}).get("job")
    return str(job["key"]) if isinstance(job, dict) and isinstance(job.get("key"), str) else None


def window_name(doc: dict[str, Any] | None) -> str | None:
    """The window a run directory holds (``windows/step-<S>/`` of a run recorded with repeating windows)."""
    window = (doc or {}).get("window")
    return str(window["name"]) if isinstance(window, dict) and isinstance(window.get("name"), str) else None


def job_span(doc: dict[str, Any] | None) -> tuple[str, str | None] | None:
    """(start, end) of a recorded run as UTC ISO texts (end None while it runs), or None when unknown. The
    nodes of one job record at the same time; reruns of a job (the same identity) one after the other."""
    start = (doc or {}).get("start")
    if not isinstance(start, str):
        return None
    end = (doc or {}).get("end")
    return start, end if isinstance(end, str) else None


def same_job(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two node folders of one job: the same identity, recorded over overlapping times (and, for the windows of
    ``record --every``/``--on-demand``, the same window)."""
    if job_key(a) is None or job_key(a) != job_key(b) or window_name(a) != window_name(b):
        return False
    span_a, span_b = job_span(a), job_span(b)
    if span_a is None or span_b is None:
        return True
    return span_a[0] <= (span_b[1] or "~") and span_b[0] <= (span_a[1] or "~")


def _host(part: dict[str, Any]) -> str:
    launcher = part.get("launcher")
    return str(launcher.get("host")) if isinstance(launcher, dict) and launcher.get("host") else "?"


def _node_line(part: dict[str, Any]) -> dict[str, Any]:
    launcher = part.get("launcher")
    launcher = launcher if isinstance(launcher, dict) else {}
    ranks = sorted(r["rank"] for r in part.get("ranks") or [] if isinstance(r, dict) and type(r.get("rank")) is int)
    return {"host": launcher.get("host"), "pid": launcher.get("pid"), "status": part.get("status"),
            "exit_code": part.get("exit_code"), "exit_signal": part.get("exit_signal"), "start": part.get("start"),
            "end": part.get("end"), "command": part.get("command"), "ranks": ranks,
            "versions": part.get("versions") or {}}


def union(parts: list[dict[str, Any]], base: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """One manifest of several launchers' parts, and what differs between the nodes (a warning each)."""
    if not parts:
        return dict(base or {}), []
    if len(parts) == 1 and base is None:
        return dict(parts[0]), []
    first = parts[0]
    out: dict[str, Any] = {**(base or {}), **{k: first.get(k) for k in ("schema_version", "tool", "job", "settings")}}
    warnings: list[str] = []
    statuses = [str(p.get("status") or "running") for p in parts]
    out["status"] = min(statuses, key=lambda s: _ORDER.get(s, 0))
    codes = [p.get("exit_code") for p in parts]
    failed = [p for p in parts if p.get("status") == "failed"]
    out["exit_code"] = failed[0].get("exit_code") if failed else (None if None in codes else 0)
    out["exit_signal"] = failed[0].get("exit_signal") if failed else None
    starts = [str(p["start"]) for p in parts if p.get("start")]
    ends = [str(p["end"]) for p in parts if p.get("end")]
    out["start"] = min(starts) if starts else None
    out["end"] = max(ends) if len(ends) == len(parts) else None
    out["command"] = first.get("command")
    out["nodes"] = [_node_line(p) for p in parts]
    out["ranks"] = _union_ranks(parts, warnings)
    sizes = [p["world_size"] for p in parts if type(p.get("world_size")) is int]
    out["world_size"] = max(sizes) if sizes else None
    out["hosts"] = sorted({str(h) for p in parts for h in p.get("hosts") or [] if isinstance(h, str)})
    out["versions"] = _union_versions(parts, warnings)
    out["env"] = _union_env(parts, warnings)
    many = len({_host(p) for p in parts}) > 1
    out["notes"] = [f"{_host(p)}: {n}" if many else n for p in parts for n in p.get("notes") or []
                    if isinstance(n, str)]
    return out, warnings


def _union_ranks(parts: list[dict[str, Any]], warnings: list[str]) -> list[dict[str, Any]]:
    by_rank: dict[int, dict[str, Any]] = {}
    for part in parts:
        for info in part.get("ranks") or []:
            if not isinstance(info, dict) or type(info.get("rank")) is not int:
                continue
            seen = by_rank.get(info["rank"])
            if seen is not None and seen.get("host") != info.get("host"):
                warnings.append(f"rank {info['rank']} is claimed by two nodes ({seen.get('host')} and "
                                f"{info.get('host')}): the later one is kept")
            if seen is None or info.get("files") or not seen.get("files"):
                by_rank[info["rank"]] = info
    return [by_rank[r] for r in sorted(by_rank)]


def _union_versions(parts: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    """torch, python and commprof per node: one value when they agree, the list and a warning when not."""
    keys = sorted({k for p in parts for k in (p.get("versions") or {}) if k != "launcher_python"})
    out: dict[str, Any] = {}
    for key in keys:
        by_node: dict[str, set[str]] = {}
        for part in parts:
            value = (part.get("versions") or {}).get(key)
            for v in value if isinstance(value, list) else [value]:
                if v is not None:
                    by_node.setdefault(str(v), set()).add(_host(part))
        if len(by_node) == 1:
            out[key] = next(iter(by_node))
        elif by_node:
            out[key] = sorted(by_node)
            warnings.append(f"nodes run different {key} versions: " + "; ".join(
                f"{v} on {', '.join(sorted(h))}" for v, h in sorted(by_node.items())))
    return out


def _union_env(parts: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    """The recorded settings of every node; one a node sets otherwise (or not at all) is a warning."""
    envs = [env if isinstance(env := part.get("env"), dict) else {} for part in parts]
    out: dict[str, Any] = {}
    for name in sorted({n for env in envs for n in env}):
        if name.endswith("_FILE") or name in PER_PROCESS:  # per node or per rank by design
            out[name] = next(env[name] for env in envs if name in env)
            continue
        values: dict[str, set[str]] = {}
        for part, env in zip(parts, envs, strict=True):
            entry = env.get(name)
            value = entry.get("value") if isinstance(entry, dict) else entry
            values.setdefault("(unset)" if entry is None else repr(value), set()).add(_host(part))
            if entry is not None:
                out.setdefault(name, entry)
        if len(values) > 1:
            warnings.append(f"nodes set {name} differently: " + "; ".join(
                f"{v} on {', '.join(sorted(h))}" for v, h in sorted(values.items())))
    return out


def join_documents(run_dirs: Iterable[Path], manifests: list[dict[str, Any]],
                   problems: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The manifest of a job recorded into one or several run directories: every launcher part of each (a
    run directory written before parts existed is its own manifest, one part)."""
    parts: list[dict[str, Any]] = []
    any_parts = False
    for run_dir, manifest in zip(run_dirs, manifests, strict=True):
        found = read_parts(run_dir, problems)
        any_parts = any_parts or bool(found)
        parts += found or [manifest]
    if not any_parts and len(manifests) == 1:
        return manifests[0], []  # recorded before launchers wrote parts: its manifest is the whole of it
    return union(parts, manifests[0] if manifests else None)


def missing_ranks_text(missing: list[int], world: int, manifest: dict[str, Any] | None,
                       per_node: int | None) -> str:
    """Why ranks of the job have no trace, by node: the ranks no node folder speaks of (a node whose folder
    was not given or whose launcher never ran), and the nodes that recorded nothing."""
    known = {r["rank"] for r in (manifest or {}).get("ranks") or [] if isinstance(r, dict)}
    unheard = [r for r in missing if r not in known]
    parts: list[str] = [f"traces for {world - len(missing)} of {world} ranks"]
    if unheard:
        where = ""
        if per_node and world % per_node == 0:
            nodes = sorted({r // per_node for r in unheard})
            where = (f" (node rank{'s' if len(nodes) > 1 else ''} {ranges(nodes)} of {world // per_node}, "
                     f"{per_node} ranks a node)")
        parts.append(f"ranks {ranges(unheard)}{where} recorded nothing that was given: that node's folder is "
                     "missing here, or commprof record did not run there")
    parts.extend(f"the launcher on {node.get('host')} recorded no rank (status {node.get('status')}, exit code "
                 f"{node.get('exit_code')})" for node in (manifest or {}).get("nodes") or []
                 if isinstance(node, dict) and not node.get("ranks"))
    return "; ".join(parts) + "; the others are analyzed, and no rank is blamed for the missing ones' absence"


def ranges(ranks: list[int]) -> str:
    """0-3,8: runs of consecutive numbers."""
    spans: list[list[int]] = []
    for r in sorted(ranks):
        if spans and spans[-1][1] == r - 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
