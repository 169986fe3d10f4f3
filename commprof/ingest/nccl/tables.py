"""Polars tables from parsed NCCL logs: ``nccl_comms``, ``nccl_links``, ``nccl_nics``,
``nccl_tuning``, ``nccl_colls`` and the per-communicator summary ``nccl_communicators``.

Link tiers are decided once here (see ``tiers``) and rolled up per communicator, so every
consumer — CLI, analyzers, dashboard — sees the same tier for the same communicator.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from commprof.ingest.nccl.link_tiers import (
    NETWORK_TIER,
    Evidence,
    find_nic,
    gather_evidence,
    link_tier,
    network_type,
    slowest,
)
from commprof.ingest.nccl.parser import NcclLogs
from commprof.ingest.nccl.records import CommRank, Nic
from commprof.ingest.nccl.topo_xml import GraphXml, TopologyXml

COMMS_SCHEMA: dict[str, Any] = {
    "comm_id": pl.String,
    "comm_id_source": pl.String,
    "comm_ptr": pl.String,
    "rank": pl.Int32,
    "nranks": pl.Int32,
    "nnodes": pl.Int32,
    "local_ranks": pl.Int32,
    "local_rank": pl.Int32,
    "host": pl.String,
    "pid": pl.Int64,
    "cuda_dev": pl.Int32,
    "nvml_dev": pl.Int32,
    "bus_id": pl.String,
    "version": pl.String,
    "init_func": pl.String,
    "parent_comm": pl.String,
    "parent_ptr": pl.String,
    "color": pl.Int32,
    "key": pl.Int32,
    "split_count": pl.Int32,
    "mnnvl": pl.Int32,
    "nvls": pl.Boolean,
    "init_complete": pl.Boolean,
    "init_total_s": pl.Float64,
    "coll_channels": pl.Int32,
    "nvls_channels": pl.Int32,
    "p2p_channels": pl.Int32,
    "ring_channels": pl.Int32,
    "source_file": pl.String,
}
LINKS_SCHEMA: dict[str, Any] = {
    "comm_id": pl.String,
    "host": pl.String,
    "pid": pl.Int64,
    "channel": pl.Int32,
    "conn_index": pl.Int32,
    "from_rank": pl.Int32,
    "to_rank": pl.Int32,
    "from_dev": pl.String,
    "to_dev": pl.String,
    "direction": pl.String,
    "transport": pl.String,
    "detail": pl.String,
    "network": pl.String,
    "nic_dev": pl.Int32,
    "nic_name": pl.String,
    "proxy_rank": pl.Int32,
    "gdrdma": pl.Boolean,
    "gdr_pci": pl.Boolean,
    "read": pl.Boolean,
    "ce": pl.Boolean,
    "shared": pl.Boolean,
    "tier": pl.String,
    "tier_source": pl.String,
    "source_file": pl.String,
    "line": pl.Int64,
}
NICS_SCHEMA: dict[str, Any] = {
    "host": pl.String,
    "net": pl.String,
    "index": pl.Int32,
    "name": pl.String,
    "port": pl.Int32,
    "link_layer": pl.String,
    "network": pl.String,
    "speed_mbps": pl.Int64,
    "gdr": pl.Boolean,
    "address": pl.String,
}
TUNING_SCHEMA: dict[str, Any] = {
    "comm_id": pl.String,
    "rank": pl.Int32,
    "host": pl.String,
    "op": pl.String,
    "bytes": pl.Int64,
    "algo": pl.String,
    "proto": pl.String,
    "time_us": pl.Float64,
    "channels_lo": pl.Int32,
    "channels_hi": pl.Int32,
}
COMMUNICATORS_SCHEMA: dict[str, Any] = {
    "comm_id": pl.String,
    "nranks": pl.Int32,
    "ranks_seen": pl.Int32,
    "nnodes": pl.Int32,
    "hosts": pl.List(pl.String),
    "transports": pl.List(pl.String),
    "networks": pl.List(pl.String),
    "nvls": pl.Boolean,
    "tier": pl.String,
    "tier_source": pl.String,
    "version": pl.String,
    "init_func": pl.String,
    "parent_comm": pl.String,
}


@dataclass
class NcclTables:
    nccl_comms: pl.DataFrame
    nccl_links: pl.DataFrame
    nccl_nics: pl.DataFrame
    nccl_tuning: pl.DataFrame
    nccl_colls: pl.DataFrame
    nccl_communicators: pl.DataFrame
    evidence: Evidence = field(repr=False)


def _host_nics(logs: NcclLogs) -> dict[str | None, list[Nic]]:
    out: dict[str | None, list[Nic]] = defaultdict(list)
    for proc in logs.processes:
        for nics in proc.nics.values():
            out[proc.host].extend(nics.values())
    return out


def _unique_comms(comms: list[CommRank]) -> list[CommRank]:
    """One record per (comm_id, rank): the same rank can be logged twice (a combined log next to
    per-process files)."""
    seen: set[tuple[str | None, int]] = set()
    out = []
    for rec in comms:
        if (rec.comm_id, rec.rank) not in seen:
            seen.add((rec.comm_id, rec.rank))
            out.append(rec)
    return out


def comms_table(comms: list[CommRank]) -> pl.DataFrame:
    rows = [
        {
            "comm_id": r.comm_id,
            "comm_id_source": r.comm_id_source,
            "comm_ptr": r.ptr,
            "rank": r.rank,
            "nranks": r.nranks,
            "nnodes": r.nnodes,
            "local_ranks": r.local_ranks,
            "local_rank": r.local_rank,
            "host": r.process.host,
            "pid": r.process.pid,
            "cuda_dev": r.cuda_dev,
            "nvml_dev": r.nvml_dev,
            "bus_id": r.bus_id,
            "version": r.process.version,
            "init_func": r.init_func,
            "parent_comm": r.parent.comm_id if r.parent is not None else None,
            "parent_ptr": r.parent_ptr,
            "color": r.color,
            "key": r.key,
            "split_count": r.split_count,
            "mnnvl": r.mnnvl,
            "nvls": r.nvls,
            "init_complete": r.init_complete,
            "init_total_s": r.init_total_s,
            "coll_channels": r.coll_channels,
            "nvls_channels": r.nvls_channels,
            "p2p_channels": r.p2p_channels,
            "ring_channels": r.ring_channels,
            "source_file": r.file,
        }
        for r in comms
    ]
    return pl.DataFrame(rows, schema=COMMS_SCHEMA)


def links_table(logs: NcclLogs, ev: Evidence) -> pl.DataFrame:
    host_nics = _host_nics(logs)
    rows = []
    for link in logs.links:
        comm_id = link.comm.comm_id if link.comm is not None else None
        nic = None
        if link.transport in ("net", "collnet"):
            nic = find_nic(link.process, link.detail, link.nic_dev, host_nics)
        tier, source, net = link_tier(link, comm_id, ev, nic)
        rows.append(
            {
                "comm_id": comm_id,
                "host": link.process.host,
                "pid": link.process.pid,
                "channel": link.channel,
                "conn_index": link.conn_index,
                "from_rank": link.from_rank,
                "to_rank": link.to_rank,
                "from_dev": link.from_dev,
                "to_dev": link.to_dev,
                "direction": link.direction,
                "transport": link.transport,
                "detail": link.detail,
                "network": net,
                "nic_dev": link.nic_dev,
                "nic_name": nic.name if nic is not None else None,
                "proxy_rank": link.proxy_rank,
                "gdrdma": link.gdrdma,
                "gdr_pci": link.gdr_pci,
                "read": link.read,
                "ce": link.ce,
                "shared": link.shared,
                "tier": tier,
                "tier_source": source,
                "source_file": link.file,
                "line": link.line_no,
            }
        )
    frame = pl.DataFrame(rows, schema=LINKS_SCHEMA)
    return frame.unique(
        subset=[c for c in LINKS_SCHEMA if c not in ("source_file", "line")],
        keep="first",
        maintain_order=True,
    )


def nics_table(logs: NcclLogs) -> pl.DataFrame:
    rows: dict[tuple[str | None, str, int, str], dict[str, Any]] = {}
    for proc in logs.processes:
        for nics in proc.nics.values():
            for nic in nics.values():
                row = rows.setdefault(
                    (proc.host, nic.net, nic.index, nic.name),
                    {
                        "host": proc.host,
                        "net": nic.net,
                        "index": nic.index,
                        "name": nic.name,
                        "port": nic.port,
                        "link_layer": nic.link_layer,
                        "network": network_type(nic.net, nic.link_layer),
                        "speed_mbps": None,
                        "gdr": None,
                        "address": nic.address,
                    },
                )
                row["speed_mbps"] = nic.speed_mbps if nic.speed_mbps is not None else row["speed_mbps"]
                row["gdr"] = nic.gdr if nic.gdr is not None else row["gdr"]
                row["link_layer"] = nic.link_layer or row["link_layer"]
    return pl.DataFrame(list(rows.values()), schema=NICS_SCHEMA)


def tuning_table(logs: NcclLogs) -> pl.DataFrame:
    rows = [
        {
            "comm_id": t.comm.comm_id if t.comm else None,
            "rank": t.comm.rank if t.comm else None,
            "host": t.comm.process.host if t.comm else None,
            "op": t.op,
            "bytes": t.nbytes,
            "algo": t.algo,
            "proto": t.proto,
            "time_us": t.time_us,
            "channels_lo": t.channels_lo,
            "channels_hi": t.channels_hi,
        }
        for t in logs.tuning
    ]
    return pl.DataFrame(rows, schema=TUNING_SCHEMA)


def colls_table(logs: NcclLogs) -> pl.DataFrame:
    """COLL rows with their communicator id, rank, host and pid joined on."""
    comm_keys = pl.DataFrame(
        {
            "comm_index": [r.index for r in logs.comms],
            "comm_id": [r.comm_id for r in logs.comms],
            "rank": [r.rank for r in logs.comms],
        },
        schema={"comm_index": pl.Int32, "comm_id": pl.String, "rank": pl.Int32},
    )
    procs = pl.DataFrame(
        {
            "process_index": [p.index for p in logs.processes],
            "host": [p.host for p in logs.processes],
            "pid": [p.pid for p in logs.processes],
        },
        schema={"process_index": pl.Int32, "host": pl.String, "pid": pl.Int64},
    )
    return (
        logs.colls.join(comm_keys, on="comm_index", how="left")
        .join(procs, on="process_index", how="left")
        .drop("comm_index", "process_index")
    )


def _transport_label(transport: str, detail: str) -> str:
    return transport if transport in ("shm", "nvls") else f"{transport}/{detail}"


def communicators_table(comms: list[CommRank], links: pl.DataFrame, logs: NcclLogs) -> pl.DataFrame:
    by_id: dict[str, list[CommRank]] = defaultdict(list)
    for rec in comms:
        by_id[rec.comm_id or "?"].append(rec)
    link_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in links.iter_rows(named=True):
        link_rows[row["comm_id"] or "?"].append(row)
    host_nets = {p.host: p.net_name for p in logs.processes if p.net_name}
    rows = []
    for comm_id, recs in by_id.items():
        hosts = sorted({r.process.host for r in recs if r.process.host})
        nnodes = max((r.nnodes for r in recs if r.nnodes is not None), default=None)
        nnodes = nnodes if nnodes is not None else (len(hosts) or None)
        nranks = max(r.nranks for r in recs)
        lrows = link_rows.get(comm_id, [])
        tier, source = slowest([(r["tier"], r["tier_source"]) for r in lrows])
        networks = sorted({r["network"] for r in lrows if r["network"]})
        if not lrows:
            tier, source, networks = _tier_without_links(recs, nranks, nnodes, host_nets)
        first = recs[0]
        rows.append(
            {
                "comm_id": comm_id,
                "nranks": nranks,
                "ranks_seen": len({r.rank for r in recs}),
                "nnodes": nnodes,
                "hosts": hosts,
                "transports": sorted({_transport_label(r["transport"], r["detail"]) for r in lrows}),
                "networks": networks,
                "nvls": any(r.nvls for r in recs),
                "tier": tier,
                "tier_source": source,
                "version": first.process.version,
                "init_func": first.init_func,
                "parent_comm": first.parent.comm_id if first.parent is not None else None,
            }
        )
    frame = pl.DataFrame(rows, schema=COMMUNICATORS_SCHEMA)
    return frame.sort(["nranks", "comm_id"], descending=[True, False])


def _tier_without_links(
    recs: list[CommRank], nranks: int, nnodes: int | None, host_nets: dict[str | None, str]
) -> tuple[str, str, list[str]]:
    """No connection lines (INIT subsystem off, or lazy connect never ran): fall back to what the
    processes said about their network, or to a single rank's trivial loopback."""
    if nranks == 1:
        return "loopback", "single_rank", []
    nets = sorted({network_type(n) for r in recs if (n := host_nets.get(r.process.host))})
    if (nnodes or 0) > 1 and nets:
        tier, _ = slowest([(_net_tier(n), "network") for n in nets])
        return tier, "network", nets
    return "unknown", "none", nets


def _net_tier(net: str) -> str:
    return NETWORK_TIER.get(net, "unknown")


def build_tables(
    logs: NcclLogs, topologies: list[TopologyXml] | None = None, graphs: list[GraphXml] | None = None
) -> NcclTables:
    comms = _unique_comms(logs.comms)
    ev = gather_evidence(logs.processes, logs.comms, topologies or [], graphs or [])
    links = links_table(logs, ev)
    return NcclTables(
        nccl_comms=comms_table(comms),
        nccl_links=links,
        nccl_nics=nics_table(logs),
        nccl_tuning=tuning_table(logs),
        nccl_colls=colls_table(logs),
        nccl_communicators=communicators_table(comms, links, logs),
        evidence=ev,
    )
