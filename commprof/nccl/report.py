"""Rich text view of ``summary.summarize``: drawn only from the summary dict, so the text and the
JSON output always say the same thing. Cells are compacted (rank ranges, NIC groups, host ranges)
because a 128-rank job must still fit an 80-column terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

TIER_STYLE = {
    "nvlink": "green",
    "pcie": "cyan",
    "shm": "cyan",
    "ib": "yellow",
    "roce": "yellow",
    "ethernet": "red",
    "loopback": "red",
    "nvlink_or_pcie": "magenta",
    "unknown": "dim",
}


def rank_ranges(ranks: list[int]) -> str:
    """[0,1,2,3,8] -> "0-3,8"; [0,8,16,24] -> "0-24 step 8" (a data-parallel group)."""
    if not ranks:
        return "-"
    steps = {b - a for a, b in zip(ranks, ranks[1:], strict=False)}
    if len(ranks) > 2 and len(steps) == 1 and (step := steps.pop()) > 1:
        return f"{ranks[0]}-{ranks[-1]} step {step}"
    parts = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(parts)


def _names(names: list[str], count: bool = True) -> str:
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]}…{names[-1]}" + (f" ({len(names)})" if count else "")


def _speed(mbps: int | None) -> str:
    return f"{mbps / 1000:g} Gb/s" if mbps else ""


def _nics(nics: list[dict[str, Any]]) -> str:
    """NICs that look alike are listed once: "mlx5_0…mlx5_7 (8) IB 400 Gb/s GDR"."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for nic in nics:
        attrs = (nic.get("link_layer") or "", _speed(nic.get("speed_mbps")), "GDR" if nic.get("gdr") else "")
        groups.setdefault(attrs, []).append(nic["name"])
    parts = [" ".join([_names(names), *[a for a in attrs if a]]) for attrs, names in groups.items()]
    return "; ".join(parts) or "-"


FLAG_NAMES = {"gdrdma": "GDR", "pxn": "PXN", "read": "read"}


def _transports(transports: dict[str, dict[str, int]]) -> str:
    """ "net/IB ×16 GDR PXN 4": peer pairs per transport; a flag's count only when not all pairs."""
    parts = []
    for label, info in transports.items():
        pairs = info["pairs"]
        flags = [FLAG_NAMES[k] + ("" if v == pairs else f" {v}") for k, v in info.items() if k in FLAG_NAMES]
        parts.append(" ".join([f"{label} ×{pairs}", *flags]))
    return "\n".join(parts) or "-"


def _algorithms(algorithms: dict[str, dict[str, int]]) -> str:
    lines = [f"{op} " + ", ".join(f"{k}×{n}" for k, n in choices.items()) for op, choices in algorithms.items()]
    return "\n".join(lines) or "-"


def _tier(comm: dict[str, Any]) -> str:
    style = TIER_STYLE.get(comm["tier"], "")
    text = f"[{style}]{comm['tier']}[/]"
    if comm["networks"] and comm["networks"] != [comm["tier"]]:
        text += f" ({', '.join(comm['networks'])})"
    if comm["nvls"]:
        text += " +NVLS"
    if comm["tier_source"] != "transport":
        text += f"\n[dim]{comm['tier_source']}[/]"
    return text


def render(summary: dict[str, Any], console: Console) -> None:
    versions = ", ".join(summary["nccl_versions"]) or "unknown"
    files = summary["files"]
    console.print(f"[bold]NCCL topology[/] of {summary['source']}: {files['logs']} log file(s), NCCL {versions}")

    hosts = Table(title="Hosts", title_justify="left")
    for col in ("host", "ranks", "procs", "network", "NICs", "NVLS"):
        hosts.add_column(col, overflow="fold")
    for h in summary["hosts"]:
        nvls = {True: "yes", False: "no", None: "-"}[h["nvls_available"]]
        types = h["network_types"]
        network = ", ".join(h["network"])
        if types and types != [n.lower() for n in h["network"]]:
            network += f" ({', '.join(types)})"
        hosts.add_row(_host_name(h), rank_ranges(h["ranks"]), str(h["processes"]), network or "-", _nics(h["nics"]),
                      nvls)
    console.print(hosts)
    _render_host_tiers(summary["hosts"], console)

    comms = Table(title="Communicators (tier = slowest link crossed)", title_justify="left")
    # capped side columns leave the communicator column room for its id on wide terminals
    comms.add_column("communicator", overflow="fold")
    comms.add_column("transports (peer pairs)", overflow="fold", max_width=24)
    comms.add_column("tier", overflow="fold", max_width=14)
    comms.add_column("algo/proto", overflow="fold", max_width=30)
    for c in summary["communicators"]:
        seen = "" if c["ranks_seen"] == c["nranks"] else f" ({c['ranks_seen']} seen)"
        at_least = "≥" if c["inferred"] else ""
        who = f"{at_least}{c['nranks']} ranks{seen}, {c['nnodes'] or '?'} node(s)"
        if c["inferred"]:
            who += "\n[italic]inferred[/] (no Init/commId line)"
        if c["world_ranks"] and c["comm_id"] != summary["world_comm_id"]:
            who += f"\nworld ranks {rank_ranges(c['world_ranks'])}"
        who += f"\n[dim]{_names(c['hosts'], count=False) or '?'}[/]"
        comms.add_row(f"{c['comm_id']}\n{who}", _transports(c["transports"]), _tier(c), _algorithms(c["algorithms"]))
    console.print(comms)
    _render_reasons(summary, console)
    _render_extras(summary, console)
    _render_stats(summary["parse_stats"], console)


def _host_tier(tier: dict[str, Any]) -> str:
    name = tier.get("tier") or "unknown"
    text = f"[{TIER_STYLE.get(name, '')}]{name}[/]"
    return text + (f" [dim]{tier['source']}[/]" if tier.get("source") not in (None, "transport", "none") else "")


def _render_host_tiers(hosts: list[dict[str, Any]], console: Console) -> None:
    """Inside each host and out of it, with the reason wherever no connection line said it."""
    if not hosts:
        return
    table = Table(title="Host tiers", title_justify="left")
    table.add_column("host", overflow="fold")
    table.add_column("intra-host", overflow="fold", max_width=18)
    table.add_column("inter-host", overflow="fold", max_width=18)
    table.add_column("why", overflow="fold")
    for h in hosts:
        why = [t["reason"] for t in (h["intra_host"], h["inter_host"])
               if t.get("reason") and t.get("source") not in (None, "transport", "none")]
        table.add_row(_host_name(h), _host_tier(h["intra_host"]), _host_tier(h["inter_host"]), "\n".join(why) or "-")
    console.print(table)


def _host_name(host: dict[str, Any]) -> str:
    """A pasted log's facts stand under no host name: its prefixes, and the name with them, were cut."""
    return host["host"] if host["host"] is not None else "? (pasted: host unknown)"


def _render_reasons(summary: dict[str, Any], console: Console) -> None:
    """Why each communicator tier that no transport named directly was decided (or left undecided)."""
    seen: dict[str, list[str]] = {}
    for c in summary["communicators"]:
        if c["tier_source"] not in ("transport", "single_rank") and c["tier_reason"]:
            seen.setdefault(f"{c['tier']} ({c['tier_source']}): {c['tier_reason']}", []).append(c["comm_id"])
    for text, who in seen.items():
        console.print(f"[dim]Tier {text} — {_names(who)}[/]")


def _render_extras(summary: dict[str, Any], console: Console) -> None:
    for t in summary["topology_xml"]:
        where = f" ({t['host']})" if t["host"] else ""
        sms = ",".join(map(str, t["sm"])) or "?"
        nvl = "/".join(f"{x:g}" for x in sorted(set(t["nvlink_gbps_per_gpu"])))
        console.print(
            f"Topology dump {t['path']}{where}: {t['gpus']} GPUs, SM {sms}, "
            f"NVLink per GPU {nvl} GB/s, {len(t['nics'])} NIC(s)"
        )
    if summary["warnings_total"]:
        first = summary["warnings"][0]["message"]
        console.print(f"[yellow]{summary['warnings_total']} NCCL WARN line(s)[/], first: {first}")


def _render_stats(stats: dict[str, Any], console: Console) -> None:
    parsed = sum(stats["parsed"].values())
    skipped = ", ".join(f"{k} {v}" for k, v in stats["skipped"].items()) or "none"
    line = (
        f"[dim]Parsed {parsed} of {stats['messages_total']} messages in {stats['lines_total']} lines; "
        f"skipped: {skipped}"
    )
    if stats["interleaved_lines"]:
        line += f"; {stats['interleaved_lines']} interleaved line(s)"
    if stats.get("inferred_links"):
        line += (f"; {stats['inferred_links']} connection line(s) without an Init/commId line grouped into "
                 f"{stats['inferred_comms']} inferred communicator(s)")
    if stats["unattributed_links"]:
        line += f"; {stats['unattributed_links']} connection line(s) without a communicator"
    if stats["skipped_files"]:
        line += f"; {len(stats['skipped_files'])} file(s) unreadable"
    if stats.get("pasted_files"):
        line += (f"; {len(stats['pasted_files'])} file(s) pasted without their host:pid:tid \\[dev] NCCL INFO "
                 "prefixes: hosts and ranks unknown, one process per file")
    console.print(line + "[/]")
