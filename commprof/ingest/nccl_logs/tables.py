"""Polars tables from parsed NCCL logs: ``nccl_comms``, ``nccl_links``, ``nccl_nics``,
``nccl_tuning``, ``nccl_colls``, the per-communicator summary ``nccl_communicators`` and the
per-host tiers ``nccl_hosts`` (see ``rollup``).

Link tiers are decided once here (see ``link_tiers`` and ``evidence``) and rolled up per communicator, so every
consumer — CLI, analyzers, dashboard — sees the same tier for the same communicator.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from commprof.ingest.nccl_logs.link_tiers import Evidence, find_nic, gather_evidence, link_tier, network_type
from commprof.ingest.nccl_logs.parser import NcclLogs
from commprof.ingest.nccl_logs.records import CommRank, Nic
from commprof.ingest.nccl_logs.rollup import communicators_table, host_tiers, hosts_table
from commprof.ingest.nccl_logs.topo_xml import GraphXml, TopologyXml

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
    "inferred": pl.Boolean,
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
    "tier_reason": pl.String,
    "inferred": pl.Boolean,
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
@dataclass
class NcclTables:
    nccl_comms: pl.DataFrame
    nccl_links: pl.DataFrame
    nccl_nics: pl.DataFrame
    nccl_tuning: pl.DataFrame
    nccl_colls: pl.DataFrame
    nccl_communicators: pl.DataFrame
    nccl_hosts: pl.DataFrame  # per host: tier inside it and out of it, with source and reason
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
            "inferred": r.inferred,
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
        tier, source, net, reason = link_tier(link, comm_id, ev, nic)
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
                "tier_reason": reason,
                "inferred": link.comm is not None and link.comm.inferred,
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


def build_tables(
    logs: NcclLogs, topologies: list[TopologyXml] | None = None, graphs: list[GraphXml] | None = None
) -> NcclTables:
    comms = _unique_comms(logs.comms)
    ev = gather_evidence(logs.processes, logs.comms, topologies or [], graphs or [], logs.gpu_models)
    links = links_table(logs, ev)
    hosts = host_tiers(logs, links, ev)
    return NcclTables(
        nccl_comms=comms_table(comms),
        nccl_links=links,
        nccl_nics=nics_table(logs),
        nccl_tuning=tuning_table(logs),
        nccl_colls=colls_table(logs),
        nccl_communicators=communicators_table(comms, links, logs, hosts),
        nccl_hosts=hosts_table(hosts),
        evidence=ev,
    )
