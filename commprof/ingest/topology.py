"""Readers of what a run says about its machines: NCCL communicators mapped to global ranks (with the
NIC speeds their network links use) and the per-host topology captures ``commprof record`` writes
(``nvidia-smi topo -m`` and InfiniBand ports)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.discover import regular_file_problem
from commprof.vocab import NCCL_OPS


def short_host(host: str | None) -> str | None:
    """A hostname as NCCL prints it: cut at the first '.', '%' and '/' turned into '-'."""
    if not host or host == "?":
        return None
    return host.split(".")[0].replace("%", "-").replace("/", "-")


def gpu_index(device: str | None, local_rank: int | None) -> int | None:
    m = re.search(r"(\d+)$", device or "")
    return int(m.group(1)) if m else local_rank


# ------------------------------------------------------------------------------------------ NCCL logs

@dataclass
class CommInfo:
    comm_id: str
    ranks: frozenset[int]
    tier: str
    ops: set[str]
    colls: int
    link_gbps: float | None


def comm_rank_sets(tables: Any, ranks: pl.DataFrame, world_size: int | None,
                   warnings: list[str]) -> list[CommInfo]:
    comms = tables.nccl_comms
    by_proc: dict[tuple[str | None, int | None], list[tuple[int, int | None]]] = defaultdict(list)
    by_pid: dict[int | None, list[tuple[int, int | None]]] = defaultdict(list)
    for r in ranks.iter_rows(named=True):
        entry = (r["rank"], gpu_index(r["device"], r["local_rank"]))
        by_proc[(short_host(r["host"]), r["pid"])].append(entry)
        by_pid[r["pid"]].append(entry)
    # Fallback when traces carry no pid: the root communicator over the whole world numbers its ranks
    # like the default process group, i.e. with the global ranks.
    world_rank: dict[tuple[str | None, int | None, int | None], int] = {}
    roots = comms.filter(pl.col("parent_comm").is_null() & (pl.col("nranks") == (world_size or -1)))
    if roots.height:
        first = roots["comm_id"][0]
        for r in roots.filter(pl.col("comm_id") == first).iter_rows(named=True):
            world_rank[(r["host"], r["pid"], r["cuda_dev"])] = r["rank"]

    def global_rank(row: dict[str, Any]) -> int | None:
        found = by_proc.get((row["host"], row["pid"])) or (by_pid.get(row["pid"]) if row["pid"] else None)
        if found:
            if len(found) == 1:
                return found[0][0]
            same_dev = [rank for rank, dev in found if dev == row["cuda_dev"]]
            if len(same_dev) == 1:
                return same_dev[0]
        return world_rank.get((row["host"], row["pid"], row["cuda_dev"]))

    members: dict[str, set[int]] = defaultdict(set)
    unmapped: set[str] = set()
    for row in comms.iter_rows(named=True):
        g = global_rank(row)
        if g is None:
            unmapped.add(row["comm_id"])
        else:
            members[row["comm_id"]].add(g)
    if unmapped:
        warnings.append(f"NCCL logs: {len(unmapped)} communicator(s) have members whose host and pid match no "
                        "traced rank; they are not matched to process groups")
    colls = tables.nccl_colls.group_by("comm_id").agg(pl.col("op").unique().alias("ops"), pl.len().alias("n"))
    coll_info = {r["comm_id"]: (set(r["ops"]), r["n"]) for r in colls.iter_rows(named=True)}
    speeds = _comm_link_gbps(tables)
    out = []
    for c in tables.nccl_communicators.iter_rows(named=True):
        cid = c["comm_id"]
        if cid in unmapped or cid not in members or len(members[cid]) != c["nranks"]:
            continue
        ops, n = coll_info.get(cid, (set(), 0))
        out.append(CommInfo(cid, frozenset(members[cid]), c["tier"],
                            {NCCL_OPS.get(o, o) for o in ops if o}, n, speeds.get(cid)))
    return out


def _comm_link_gbps(tables: Any) -> dict[str, float]:
    """GB/s of the slowest NIC each communicator's network links use (NCCL logs the speed in Mbps)."""
    nics = tables.nccl_nics.filter(pl.col("speed_mbps").is_not_null())
    if nics.height == 0:
        return {}
    links = tables.nccl_links.filter(pl.col("network").is_not_null())
    named = links.join(nics.select("host", pl.col("name").alias("nic_name"), "speed_mbps"),
                       on=["host", "nic_name"], how="inner")
    # links that do not say which NIC: the NICs of that network on the link's host
    by_net = links.filter(pl.col("nic_name").is_null()).join(
        nics.select("host", "network", "speed_mbps"), on=["host", "network"], how="inner")
    speeds = pl.concat([named.select("comm_id", "speed_mbps"), by_net.select("comm_id", "speed_mbps")])
    return {r["comm_id"]: r["speed_mbps"] / 8000 for r in
            speeds.group_by("comm_id").agg(pl.col("speed_mbps").min()).iter_rows(named=True)}


@dataclass
class HostTopology:
    gpu_paths: dict[tuple[int, int], str]  # (gpu a, gpu b) -> NV18 | PIX | SYS ...
    ib: list[tuple[str, float | None]]  # active ports: (link layer, GB/s)


def read_topologies(path: Path) -> dict[str, HostTopology]:
    folder = path / "raw" / "topology"
    out: dict[str, HostTopology] = {}
    if not folder.is_dir():
        return out
    for file in sorted(folder.glob("*.json")):
        try:
            if regular_file_problem(file):  # a FIFO would block the read
                continue
            info = json.loads(file.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(info, dict):
            continue
        host = short_host(str(info.get("host") or file.stem))
        if host:
            out[host] = HostTopology(parse_smi_topo(info.get("nvidia_smi_topo") or ""), _ib_ports(info))
    return out


def parse_smi_topo(text: str) -> dict[tuple[int, int], str]:
    """GPU-to-GPU cells of ``nvidia-smi topo -m`` (header row of column names, then one row per GPU)."""
    cols: list[str] = []
    paths: dict[tuple[int, int], str] = {}
    for line in re.sub(r"\x1b\[[\d;]*m", "", text).splitlines():
        cells = line.split()
        if len(cells) < 2 or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        if not cols and cells[1] != "X":
            cols = cells
        elif cols:
            a = int(cells[0][3:])
            for name, cell in zip(cols, cells[1:], strict=False):
                if re.fullmatch(r"GPU\d+", name) and cell != "X":
                    paths[(a, int(name[3:]))] = cell
    return paths


def _ib_ports(info: dict[str, Any]) -> list[tuple[str, float | None]]:
    out = []
    for port in info.get("infiniband") or []:
        if not isinstance(port, dict) or "ACTIVE" not in str(port.get("state") or "").upper():
            continue
        m = re.match(r"\s*([\d.]+)\s*Gb", str(port.get("rate") or ""))
        out.append((str(port.get("link_layer") or ""), float(m.group(1)) / 8 if m else None))
    return out
