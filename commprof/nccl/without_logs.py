"""``commprof topology`` on a run that has no NCCL log (a Gloo run on CPUs, or NCCL_DEBUG left unset): what
the run does say about its machines — hosts and their ranks and devices from the traces, the host topology
captures ``commprof record`` wrote — and what is missing, with how to get it. One dict, rendered as text
or written as JSON, like the NCCL summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from commprof.ingest.topology import parse_smi_topo, short_host
from commprof.nccl.report import rank_ranges
from commprof.nccl.summary import SCHEMA_VERSION

NCCL_LOG_HOWTO = ("run the job under `commprof record` (it sets NCCL_DEBUG=INFO and writes the logs to "
                  "raw/nccl/), or set NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,NET "
                  "NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log yourself")


def summarize_without_logs(run: Any, reason: str) -> dict[str, Any]:
    """``run`` is an opened :class:`commprof.run.Run`; ``reason`` says why no NCCL log was read."""
    ranks = run.ranks
    hosts = []
    for host, group in sorted(ranks.group_by("host", maintain_order=True), key=lambda g: str(g[0][0])):
        hosts.append({
            "host": host[0],
            "ranks": sorted(group["rank"].to_list()),
            "backends": sorted({b for b in group["backend"].to_list() if b}),
            "devices": sorted({d for d in group["device"].to_list() if d}),
            "gpu_names": sorted({g for g in group["gpu_name"].to_list() if g}),
        })
    captures = [c for root in run.source.run_dirs for c in _captures(Path(root))]
    backends = sorted({b for b in ranks["backend"].to_list() if b})
    groups = [{"pg": r["pg"], "desc": r["desc"], "ranks": list(r["ranks"] or []), "backend": r["backend"]}
              for r in run.process_groups.iter_rows(named=True)]
    return {
        "schema_version": SCHEMA_VERSION,
        "source": run.source.label,
        "nccl_logs": False,
        "world_size": run.world_size,
        "backends": backends,
        "hosts": hosts,
        "process_groups": groups,
        "topology_captures": captures,
        "missing": _missing(reason, backends, captures, bool(run.source.run_dirs), len(hosts)),
    }


def _captures(root: Path | None) -> list[dict[str, Any]]:
    """The per-host captures in ``raw/topology/*.json``: what each one holds."""
    if root is None or not (root / "raw" / "topology").is_dir():
        return []
    out: list[dict[str, Any]] = []
    for file in sorted((root / "raw" / "topology").glob("*.json")):
        try:
            info = json.loads(file.read_text())
        except (OSError, ValueError):
            out.append({"file": str(file.relative_to(root)), "host": None, "readable": False})
            continue
        if not isinstance(info, dict):
            continue
        ports = [p for p in info.get("infiniband") or [] if isinstance(p, dict)]
        out.append({
            "file": str(file.relative_to(root)),
            "host": short_host(str(info.get("host") or file.stem)),
            "readable": True,
            "captured_at": info.get("captured_at"),
            "gpus": len(info.get("gpus") or []),
            "gpu_pairs": len(parse_smi_topo(info.get("nvidia_smi_topo") or "")),
            "nics": [{"device": p.get("device"), "port": p.get("port"), "link_layer": p.get("link_layer"),
                      "rate": p.get("rate")} for p in ports if "ACTIVE" in str(p.get("state") or "").upper()],
        })
    return out


def _missing(reason: str, backends: list[str], captures: list[dict[str, Any]], is_run: bool,
             n_hosts: int) -> list[str]:
    out = []
    if backends and "nccl" not in backends:
        out.append(f"NCCL logs: {reason}. The ranks use {', '.join(backends)}, not NCCL, so there are none to "
                   "write; `commprof analyze` places each group on its link tier from where its ranks run "
                   "(one host: loopback)")
    else:
        out.append(f"NCCL logs: {reason}; to get them, {NCCL_LOG_HOWTO}")
    if not is_run:
        out.append("topology captures: these traces are not a `commprof record` run directory, which would "
                   "hold one per host in raw/topology/")
    elif not captures:
        out.append("topology captures: none in raw/topology/ (recorded with --no-topology?)")
    elif not any(c.get("gpus") or c.get("gpu_pairs") for c in captures):
        out.append("GPU links: the captures list no GPU (no nvidia-smi on the host; expected on CPU ranks)")
    if n_hosts > 1 and not any(c.get("nics") for c in captures):
        out.append("network: nothing names the link between hosts (no active InfiniBand/RoCE port captured); "
                   "pass `--network ib|roce|ethernet` to `commprof analyze`")
    return out


def render_without_logs(summary: dict[str, Any], console: Console) -> None:
    backends = ", ".join(summary["backends"]) or "unknown backend"
    console.print(f"[bold]Topology[/] of {summary['source']}: {summary['world_size'] or '?'} rank(s) on "
                  f"{len(summary['hosts'])} host(s), {backends}; [yellow]no NCCL logs[/]")
    hosts = Table(title="Hosts (from the traces)", title_justify="left")
    for col in ("host", "ranks", "backend", "devices", "GPU"):
        hosts.add_column(col, overflow="fold")
    for h in summary["hosts"]:
        hosts.add_row(h["host"] or "?", rank_ranges(h["ranks"]), ", ".join(h["backends"]) or "-",
                      _compact(h["devices"]), ", ".join(h["gpu_names"]) or "-")
    console.print(hosts)
    if summary["process_groups"]:
        groups = Table(title="Process groups (from the traces)", title_justify="left")
        for col in ("pg", "desc", "ranks", "backend"):
            groups.add_column(col, overflow="fold")
        for g in summary["process_groups"]:
            groups.add_row(str(g["pg"]), g["desc"] or "-", rank_ranges(sorted(g["ranks"])), g["backend"] or "-")
        console.print(groups)
    if summary["topology_captures"]:
        caps = Table(title="Topology captures (commprof record)", title_justify="left")
        for col in ("host", "file", "GPUs", "GPU pairs", "active NIC ports"):
            caps.add_column(col, overflow="fold")
        for c in summary["topology_captures"]:
            if not c["readable"]:
                caps.add_row("?", c["file"], "unreadable", "-", "-")
                continue
            caps.add_row(c["host"] or "?", c["file"], str(c["gpus"]), str(c["gpu_pairs"]), _ports(c["nics"]))
        console.print(caps)
    console.print("[bold]Missing[/]")
    for line in summary["missing"]:
        console.print(f"  - {line}", highlight=False)


def _ports(nics: list[dict[str, Any]]) -> str:
    """Ports that look alike once: "mlx5_0…mlx5_3 (4) InfiniBand 400 Gb/sec (4X)"."""
    groups: dict[tuple[str, str], list[str]] = {}
    for nic in nics:
        groups.setdefault((str(nic.get("link_layer") or "?"), str(nic.get("rate") or "")), []).append(
            f"{nic.get('device')}/{nic.get('port')}" if nic.get("port") not in (None, "1") else str(nic.get("device")))
    parts = []
    for (layer, rate), names in groups.items():
        who = ", ".join(names) if len(names) <= 2 else f"{names[0]}…{names[-1]} ({len(names)})"
        parts.append(" ".join(x for x in (who, layer, rate) if x))
    return "; ".join(parts) or "-"


def _compact(devices: list[str]) -> str:
    """cuda:0 … cuda:7 read as "cuda:0-7"; cpu stays cpu."""
    cuda = sorted(int(d.split(":")[1]) for d in devices if d.startswith("cuda:") and d.split(":")[1].isdigit())
    other = [d for d in devices if not (d.startswith("cuda:") and d.split(":")[1].isdigit())]
    parts = ([f"cuda:{rank_ranges(cuda)}"] if cuda else []) + other
    return ", ".join(parts) or "-"
