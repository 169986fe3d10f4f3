"""What NCCL saw, as one JSON-able dict: the contract behind ``commprof topology --format json``
and the data the text renderer draws from (so text and JSON cannot disagree)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import polars as pl

from commprof.ingest.nccl_logs.link_tiers import network_type
from commprof.ingest.nccl_logs.load import NcclRun
from commprof.ingest.nccl_logs.tables import NcclTables

SCHEMA_VERSION = 2  # 2: inferred communicators, tier_reason, hosts' intra_host/inter_host
MAX_WARNINGS = 20


def _label() -> pl.Expr:
    transport = pl.col("transport")
    return (
        pl.when(transport.is_in(["shm", "nvls"]))
        .then(transport)
        .otherwise(pl.concat_str([transport, pl.col("detail")], separator="/"))
    )


def _transports(links: pl.DataFrame) -> dict[str, dict[str, dict[str, int]]]:
    """Per communicator: transport label -> distinct directed peer pairs, and how many of them
    used GPUDirect RDMA, a PXN proxy, or P2P read."""
    if links.is_empty():
        return {}
    grouped = (
        links.filter(pl.col("comm_id").is_not_null())
        .with_columns(_label().alias("label"), pl.struct("from_rank", "to_rank").alias("pair"))
        .group_by("comm_id", "label")
        .agg(
            pl.col("pair").n_unique().alias("pairs"),
            pl.col("pair").filter(pl.col("gdrdma")).n_unique().alias("gdrdma"),
            pl.col("pair")
            .filter(pl.col("proxy_rank").is_not_null() & (pl.col("transport") == "net"))
            .n_unique()
            .alias("pxn"),
            pl.col("pair").filter(pl.col("read")).n_unique().alias("read"),
        )
        .sort("comm_id", "label")
    )
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for row in grouped.iter_rows(named=True):
        out[row["comm_id"]][row["label"]] = {
            k: row[k] for k in ("pairs", "gdrdma", "pxn", "read") if k == "pairs" or row[k]
        }
    return out


def _algorithms(tuning: pl.DataFrame) -> dict[str, dict[str, dict[str, int]]]:
    if tuning.is_empty():
        return {}
    grouped = (
        tuning.filter(pl.col("comm_id").is_not_null())
        .group_by("comm_id", pl.col("op").fill_null("?"), "algo", "proto")
        .len()
        .sort("comm_id", "op", "len", "algo", "proto", descending=[False, False, True, False, False])
    )  # most used first; ties by name (group_by's order varies from run to run)
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for row in grouped.iter_rows(named=True):
        out[row["comm_id"]][row["op"]][f"{row['algo']}/{row['proto']}"] = row["len"]
    return {k: dict(v) for k, v in out.items()}


def _colls(colls: pl.DataFrame) -> dict[str, dict[str, dict[str, int]]]:
    if colls.is_empty():
        return {}
    grouped = (
        colls.filter(pl.col("comm_id").is_not_null())
        .group_by("comm_id", "op")
        .agg(pl.len().alias("calls"), pl.col("bytes").sum().alias("bytes"))
        .sort("comm_id", "op")
    )
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for row in grouped.iter_rows(named=True):
        out[row["comm_id"]][row["op"]] = {"calls": row["calls"], "bytes": row["bytes"]}
    return out


def _hosts(run: NcclRun, tables: NcclTables, world: str | None) -> list[dict[str, Any]]:
    comms = tables.nccl_comms
    ranks = comms.filter(pl.col("comm_id") == world) if world is not None else comms.clear()
    nics = tables.nccl_nics
    out = []
    hosts: list[str | None] = [*sorted({p.host for p in run.logs.processes if p.host})]
    if any(p.pasted and p.host is None for p in run.logs.processes):
        hosts.append(None)  # pasted logs: what they say of their unknown host(s), under no name
    tiers = {r["host"]: r for r in tables.nccl_hosts.iter_rows(named=True)}
    for host in hosts:
        tier = tiers.get(host, {})
        procs = [p for p in run.logs.processes if p.host == host and (host is not None or p.pasted)]
        same = pl.col("host").is_null() if host is None else pl.col("host") == host
        host_nics = nics.filter(same).sort("net", "index").to_dicts()
        nets = sorted({p.net_name for p in procs if p.net_name})
        used = {network_type(n) for n in nets}
        types = sorted({n["network"] for n in host_nics if network_type(n["net"]) in used}) or sorted(used)
        out.append(
            {
                "host": host,
                "processes": len(procs),
                "ranks": sorted(ranks.filter(same)["rank"].to_list()),
                "network": nets,
                "network_types": types,
                "nvls_available": next((p.nvls_available for p in procs if p.nvls_available is not None), None),
                "nics": [{k: v for k, v in nic.items() if k != "host" and v is not None} for nic in host_nics],
                "intra_host": {k: tier.get(f"intra_{k}") for k in ("tier", "source", "reason")},
                "inter_host": {k: tier.get(f"inter_{k}") for k in ("tier", "source", "reason")},
            }
        )
    return out


def _members(comms: pl.DataFrame, world: str | None) -> dict[str, tuple[dict[str, list[int]], list[int] | None]]:
    """Per communicator: its ranks by host, and the same GPUs' ranks in the largest communicator
    ("world"), matched by (host, pid, cudaDev) — what a user calls "TP group = ranks 8-15"."""
    keys = ["host", "pid", "cuda_dev"]
    if world is None:
        return {}
    world_rank = {
        tuple(r[:3]): r[3]
        for r in comms.filter(pl.col("comm_id") == world).select(*keys, "rank").iter_rows()
        if r[0] is not None and r[1] is not None
    }
    out: dict[str, tuple[dict[str, list[int]], list[int] | None]] = {}
    for (comm_id,), part in comms.sort("rank").partition_by("comm_id", as_dict=True).items():
        by_host: dict[str, list[int]] = defaultdict(list)
        found = []
        for host, pid, dev, rank in part.select(*keys, "rank").iter_rows():
            by_host[host or "?"].append(rank)
            found.append(world_rank.get((host, pid, dev)))
        world_ranks = sorted(r for r in found if r is not None) if None not in found else None
        out[str(comm_id)] = (dict(by_host), world_ranks)
    return out


def summarize(run: NcclRun, tables: NcclTables) -> dict[str, Any]:
    logs, stats = run.logs, run.logs.stats
    communicators = tables.nccl_communicators
    world = communicators["comm_id"][0] if communicators.height else None
    transports = _transports(tables.nccl_links)
    algorithms = _algorithms(tables.nccl_tuning)
    colls = _colls(tables.nccl_colls)
    members = _members(tables.nccl_comms, world)
    comm_list = []
    for row in communicators.iter_rows(named=True):
        by_host, world_ranks = members.get(row["comm_id"], ({}, None))
        comm_list.append(
            {
                **row,
                "ranks_by_host": by_host,
                "world_ranks": world_ranks,
                "transports": transports.get(row["comm_id"], {}),
                "algorithms": algorithms.get(row["comm_id"], {}),
                "colls": colls.get(row["comm_id"], {}),
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "source": str(run.inputs.root),
        "nccl_logs": True,  # False: the run had none, and the dict is commprof.nccl.without_logs' instead
        "files": {
            "logs": len(run.inputs.logs),
            "topology_xml": len(run.topologies),
            "graph_xml": len(run.graphs),
        },
        "nccl_versions": sorted({p.version for p in logs.processes if p.version}),
        "world_comm_id": world,
        "hosts": _hosts(run, tables, world),
        "communicators": comm_list,
        "topology_xml": [
            {
                "path": t.path,
                "host": t.host,
                "gpus": len(t.gpus),
                "sm": sorted({g.sm for g in t.gpus if g.sm}),
                "nvlinks_per_gpu": [g.nvlink_count for g in t.gpus],
                "nvlink_gbps_per_gpu": [g.nvlink_gbps for g in t.gpus],
                "nics": [{"name": n.name, "speed_mbps": n.speed_mbps, "gdr": n.gdr} for n in t.nets],
            }
            for t in run.topologies
        ],
        "graph_xml": [
            {
                "pattern": g.pattern,
                "nchannels": g.nchannels,
                "type_intra": g.type_intra,
                "type_inter": g.type_inter,
                "speed_intra": g.speed_intra,
                "speed_inter": g.speed_inter,
            }
            for g in run.graphs
        ],
        "warnings": [
            {"host": w.host, "pid": w.pid, "file": w.file, "line": w.line_no, "message": w.message}
            for w in logs.warns[:MAX_WARNINGS]
        ],
        "warnings_total": len(logs.warns),
        "parse_stats": {
            "files": stats.files,
            "lines_total": stats.lines_total,
            "messages_total": stats.messages_total,
            "parsed": dict(sorted(stats.parsed.items())),
            "skipped": dict(sorted(stats.skipped.items())),
            "interleaved_lines": stats.interleaved_lines,
            "unattributed_links": stats.unattributed_links,
            "inferred_links": stats.inferred_links,
            "inferred_comms": stats.inferred_comms,
            "skipped_files": stats.skipped_files,
            "pasted_files": stats.pasted_files,
        },
    }
