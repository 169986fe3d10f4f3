"""Link tiers rolled up: per communicator (the slowest link it crosses) and per host (the links
inside it and the network out of it), each with its source and a reason a user can read.

Host tiers are decided even when no connection line is there: GRAPH/topology dumps and GPU models
say what joins a host's GPUs (see ``evidence``), ``Using network X`` and the NIC lists
(``NET/IB : Using [0]mlx5_0:1/RoCE``, ``NET/Socket : Using [0]eth0``) what leaves the host.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import polars as pl

from commprof.ingest.nccl_logs.evidence import Evidence
from commprof.ingest.nccl_logs.link_tiers import NETWORK_TIER, P2P_UNDECIDED, network_type, slowest
from commprof.ingest.nccl_logs.parser import NcclLogs
from commprof.ingest.nccl_logs.records import CommRank, Process

COMMUNICATORS_SCHEMA: dict[str, Any] = {
    "comm_id": pl.String,
    "inferred": pl.Boolean,
    "nranks": pl.Int32,
    "ranks_seen": pl.Int32,
    "nnodes": pl.Int32,
    "hosts": pl.List(pl.String),
    "transports": pl.List(pl.String),
    "networks": pl.List(pl.String),
    "nvls": pl.Boolean,
    "tier": pl.String,
    "tier_source": pl.String,
    "tier_reason": pl.String,
    "version": pl.String,
    "init_func": pl.String,
    "parent_comm": pl.String,
}
HOSTS_SCHEMA: dict[str, Any] = {
    "host": pl.String,
    "intra_tier": pl.String,
    "intra_source": pl.String,
    "intra_reason": pl.String,
    "inter_tier": pl.String,
    "inter_source": pl.String,
    "inter_reason": pl.String,
}
Tier = tuple[str, str, str]  # (tier, source, reason)


_LINK_FIELDS = ("transport", "detail", "network", "tier", "tier_source", "tier_reason")  # what the rollups read


def _transport_label(transport: str, detail: str) -> str:
    return transport if transport in ("shm", "nvls") else f"{transport}/{detail}"


def _deciding_reason(rows: list[dict[str, Any]], tier: str, source: str) -> str | None:
    return next((r["tier_reason"] for r in rows if r["tier"] == tier and r["tier_source"] == source), None)


def communicators_table(
    comms: list[CommRank], links: pl.DataFrame, logs: NcclLogs, hosts: dict[str | None, dict[str, Tier]]
) -> pl.DataFrame:
    by_id: dict[str, list[CommRank]] = defaultdict(list)
    for rec in comms:
        by_id[rec.comm_id or "?"].append(rec)
    link_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    # only the columns read below (dicts of every column were most of the cost: 167k links at 2,048 nodes)
    for row in links.select("comm_id", *_LINK_FIELDS).iter_rows(named=True):
        link_rows[row["comm_id"] or "?"].append(row)
    rows = []
    for comm_id, recs in by_id.items():
        comm_hosts = sorted({r.process.host for r in recs if r.process.host})
        nnodes = max((r.nnodes for r in recs if r.nnodes is not None), default=None)
        nnodes = nnodes if nnodes is not None else (len(comm_hosts) or None)
        nranks = max(r.nranks for r in recs)
        lrows = link_rows.get(comm_id, [])
        tier, source = slowest([(r["tier"], r["tier_source"]) for r in lrows])
        reason = _deciding_reason(lrows, tier, source)
        networks = sorted({r["network"] for r in lrows if r["network"]})
        if not lrows:
            tier, source, reason, networks = _tier_without_links(recs, nranks, nnodes, hosts)
        first = recs[0]
        rows.append(
            {
                "comm_id": comm_id,
                "inferred": first.inferred,
                "nranks": nranks,
                "ranks_seen": len({r.rank for r in recs}),
                "nnodes": nnodes,
                "hosts": comm_hosts,
                "transports": sorted({_transport_label(r["transport"], r["detail"]) for r in lrows}),
                "networks": networks,
                "nvls": any(r.nvls for r in recs),
                "tier": tier,
                "tier_source": source,
                "tier_reason": reason,
                "version": first.process.version,
                "init_func": first.init_func,
                "parent_comm": first.parent.comm_id if first.parent is not None else None,
            }
        )
    frame = pl.DataFrame(rows, schema=COMMUNICATORS_SCHEMA)
    return frame.sort(["nranks", "comm_id"], descending=[True, False])


def _tier_without_links(
    recs: list[CommRank], nranks: int, nnodes: int | None, hosts: dict[str | None, dict[str, Tier]]
) -> tuple[str, str, str | None, list[str]]:
    """No connection lines (INIT subsystem off, or lazy connect never ran): what the hosts' network
    and topology lines say, or a single rank's trivial loopback."""
    if nranks == 1:
        return "loopback", "single_rank", "a communicator of one rank moves no data between GPUs", []
    own = [hosts[h] for h in {r.process.host for r in recs} if h in hosts]
    if (nnodes or 0) > 1:
        found = [h["inter"] for h in own if h["inter"][0] != "unknown"]
        nets = sorted({h["network"][0] for h in own if h["network"][0]})
        if found:
            tier, _ = slowest([(t, "network") for t, _, _ in found])
            return tier, "network", next(r for t, _, r in found if t == tier), nets
        return "unknown", "none", None, nets
    if nnodes == 1 and own and own[0]["intra"][0] != "unknown":
        tier, source, reason = own[0]["intra"]
        return tier, source, reason, []
    return "unknown", "none", None, []


def _inter(procs: list[Process], host_links: list[dict[str, Any]]) -> tuple[Tier, str | None]:
    """(tier, source, reason) of the network out of a host, and the network type."""
    net_rows = [r for r in host_links if r["transport"] in ("net", "collnet") and r["tier"] != "unknown"]
    if net_rows:
        tier, source = slowest([(r["tier"], r["tier_source"]) for r in net_rows])
        return (tier, source, _deciding_reason(net_rows, tier, source) or ""), next(
            (r["network"] for r in net_rows if r["tier"] == tier), None)
    used = next((p.net_name for p in procs if p.net_name), None)
    lists = {family: nics for p in procs for family, nics in p.nics.items() if nics}
    family = None
    if used is not None:
        low = used.lower()
        family = "socket" if low == "socket" else "ib" if low.startswith("ib") else low
    elif "ib" in lists:
        family = "ib"
    elif "socket" in lists:
        family = "socket"
    if family is None:
        return ("unknown", "none", "the log names no network"), None
    nics = list(lists.get(family, {}).values())
    layers = sorted({n.link_layer for n in nics if n.link_layer})
    said = f"'Using network {used}'" if used else f"NET/{nics[0].net} : Using" if nics else ""
    if family == "socket":
        loop = bool(nics) and all(n.name == "lo" for n in nics)
        names = ", ".join(n.name for n in nics)
        return ("loopback" if loop else "ethernet", "network", f"{said} {names}".strip()), "socket"
    nets = [network_type(used or nics[0].net, layer) for layer in layers] or [network_type(used or family)]
    tier, _ = slowest([(NETWORK_TIER.get(n, "unknown"), "network") for n in nets])
    net = next(n for n in nets if NETWORK_TIER.get(n, "unknown") == tier) if tier != "unknown" else nets[0]
    detail = f"; NICs {', '.join(n.name for n in nics)} link layer {'/'.join(layers)}" if layers else ""
    source = "network" if layers or family != "ib" else "assumed"
    return (tier, source, f"{said}{detail}"), net


def _intra(host: str | None, procs: list[Process], host_links: list[dict[str, Any]], ev: Evidence) -> Tier:
    found = ev.p2p(None, host)
    if found is not None:
        return found
    p2p = [r for r in host_links if r["transport"] == "p2p" and r["tier"] == P2P_UNDECIDED]
    if p2p:
        return P2P_UNDECIDED, "undecided", p2p[0]["tier_reason"]
    if any(r["transport"] == "shm" for r in host_links):
        return "shm", "transport", "GPUs of this host talk through SHM (host shared memory)"
    return "unknown", "none", "the log shows no link or topology between this host's GPUs"


def host_tiers(logs: NcclLogs, links: pl.DataFrame, ev: Evidence) -> dict[str | None, dict[str, Tier]]:
    """host -> {"intra": Tier, "inter": Tier, "network": (type, "", "")} for every named host, and under None
    for the processes of pasted logs (their host unknown: what it says is kept, under no name)."""
    procs: dict[str | None, list[Process]] = defaultdict(list)
    for p in logs.processes:
        if p.host or p.pasted:
            procs[p.host].append(p)
    by_host: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for row in links.select("host", *_LINK_FIELDS).iter_rows(named=True):
        by_host[row["host"]].append(row)
    out: dict[str | None, dict[str, Tier]] = {}
    for host, host_procs in procs.items():
        inter, net = _inter(host_procs, by_host.get(host, []))
        out[host] = {"intra": _intra(host, host_procs, by_host.get(host, []), ev), "inter": inter,
                     "network": (net or "", "", "")}
    return out


def hosts_table(hosts: dict[str | None, dict[str, Tier]]) -> pl.DataFrame:
    rows = [
        {"host": host, "intra_tier": t["intra"][0], "intra_source": t["intra"][1], "intra_reason": t["intra"][2],
         "inter_tier": t["inter"][0], "inter_source": t["inter"][1], "inter_reason": t["inter"][2]}
        for host, t in sorted(hosts.items(), key=lambda kv: kv[0] or "")
    ]
    return pl.DataFrame(rows, schema=HOSTS_SCHEMA)
