"""The link tier of every process group (and so of every collective: the slowest link it crosses).

Sources, first that knows wins (recorded as ``tier_source``):

1. ``nccl_log``: the group's NCCL communicator, found in the run's NCCL logs. Communicator members are
   logged as (host, pid, cudaDev) with communicator-local ranks; the traces and the manifest give each
   rank's host and pid, so each communicator gets a set of *global* ranks. A group and a communicator
   match when their rank sets are equal; when several communicators share a rank set (PyTorch gives
   point-to-point pairs their own), the one whose logged COLL ops fit the group's traced ops is taken.
   Its tier is what ``commprof.nccl`` decided from the transports (slowest link), and the speed of
   the NICs it uses is kept for the efficiency peak.
2. ``topology``: the run's ``raw/topology/<host>.json`` captures: ``nvidia-smi topo -m`` for a group
   inside one host (NV# between all its GPUs -> nvlink, else PIX/PXB/PHB/NODE/SYS -> pcie), active
   InfiniBand ports for a group across hosts (link layer InfiniBand -> ib, Ethernet -> roce).
3. ``hosts``: where the group's ranks run. Gloo inside one host -> loopback; Gloo across hosts ->
   ethernet (Gloo always speaks TCP).
4. ``assumed``: nothing measured it. NCCL inside one host -> nvlink (multi-GPU training servers have
   NVLink); across hosts -> what ``--network`` states, else ``unknown``. Host placement inferred from
   ``--gpus-per-node`` (rank // N) is assumed as well.

Then ``switches``: where a switch topology places the hosts (SLURM's topology.conf: ``--switches FILE``, or
``raw/topology/topology.conf`` in the run), a group on the network whose hosts hang on different leaf switches
crosses the spine: tier ``spine``, the slower level above the racks, whatever decided its network before (the
source then says ``switches``). A group with a host the topology does not place keeps its tier.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from commprof.errors import UsageError
from commprof.ingest.topology import CommInfo, HostTopology, gpu_index, short_host
from commprof.vocab import NETWORKS, UNKNOWN

GROUP_TIER_SCHEMA = {"pg": pl.String, "tier": pl.String, "tier_source": pl.String, "nodes_spanned": pl.Int32,
                     "nccl_comm": pl.String, "link_gbps": pl.Float64}


@dataclass(frozen=True)
class TierSettings:
    network: str | None = None  # ib | roce | ethernet: what links groups across nodes, when nothing says
    gpus_per_node: int | None = None  # hosts = rank // N when the traces carry none
    switches: dict[str, str] = field(default_factory=dict)  # short host name -> its leaf switch (its rack)

    def __post_init__(self) -> None:
        if self.network is not None and self.network not in NETWORKS:
            raise UsageError(f"--network must be one of {', '.join(NETWORKS)}, not {self.network!r}")
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise UsageError("--gpus-per-node must be at least 1")


@dataclass
class Placement:
    """Each rank's host (None when unknown), whether hosts were assumed, and its local GPU index."""

    host: dict[int, str | None]
    assumed: bool
    gpu: dict[int, int | None] = field(default_factory=dict)

    def hosts_of(self, ranks: list[int]) -> set[str] | None:
        hosts = {self.host.get(r) for r in ranks}
        return None if None in hosts or not hosts else {h for h in hosts if h is not None}


def placement(ranks: pl.DataFrame, gpus_per_node: int | None) -> Placement:
    host: dict[int, str | None] = {}
    gpu: dict[int, int | None] = {}
    for r in ranks.iter_rows(named=True):
        host[r["rank"]] = short_host(r["host"])
        gpu[r["rank"]] = gpu_index(r["device"], r["local_rank"])
    assumed = False
    if gpus_per_node and all(h is None for h in host.values()):
        host = {r: f"node{r // gpus_per_node}" for r in host}
        gpu = {r: g if g is not None else r % gpus_per_node for r, g in gpu.items()}
        assumed = True
    return Placement(host, assumed, gpu)


def match_communicators(pgs: pl.DataFrame, comms: list[CommInfo],
                        pg_ops: dict[str, set[str]]) -> dict[str, CommInfo]:
    """pg -> its communicator: equal rank sets; among several, the best COLL fit, each used once if
    possible."""
    by_set: dict[frozenset[int], list[CommInfo]] = defaultdict(list)
    for c in comms:
        by_set[c.ranks].append(c)
    scored = []
    for pg, ranks in zip(pgs["pg"].to_list(), pgs["ranks"].to_list(), strict=True):
        for c in by_set.get(frozenset(ranks or []), []):
            ops = pg_ops.get(pg, set())
            fit = len(ops & c.ops) - len(c.ops - ops) if c.ops else 0
            scored.append((-fit, -c.colls, c.comm_id, pg, c))
    scored.sort(key=lambda s: s[:4])
    chosen: dict[str, CommInfo] = {}
    used: set[str] = set()
    for *_, pg, c in scored:
        if pg not in chosen and c.comm_id not in used:
            chosen[pg] = c
            used.add(c.comm_id)
    for *_, pg, c in scored:  # more groups than communicators: share the best one
        chosen.setdefault(pg, c)
    return chosen


def _intra_host_tier(topo: HostTopology | None, gpus: list[int | None]) -> str | None:
    if topo is None or not topo.gpu_paths:
        return None
    known = sorted({g for g in gpus if g is not None})
    pairs = [(a, b) for a in known for b in known if a != b] or list(topo.gpu_paths)
    cells = [topo.gpu_paths.get(p) for p in pairs]
    if not cells or None in cells:
        return None
    return "nvlink" if all(c is not None and c.startswith("NV") for c in cells) else "pcie"


def _inter_host_tier(topos: dict[str, HostTopology], hosts: set[str]) -> tuple[str, float | None] | None:
    ports = [topos[h].ib for h in hosts if h in topos]
    if len(ports) != len(hosts) or not all(ports):
        return None
    layers = {layer.lower() for p in ports for layer, _ in p}
    tier = "ib" if "infiniband" in layers else "roce" if "ethernet" in layers else None
    speeds = [s for p in ports for _, s in p if s]
    return (tier, min(speeds) if speeds else None) if tier else None


# -------------------------------------------------------------------------------------------- groups

def _backend(backend: str | None, gpu_run: bool) -> str:
    """gloo or nccl (or the raw string) for a backend like ``cpu:gloo,cuda:nccl``."""
    text = (backend or "").lower()
    pairs = dict(p.split(":", 1) for p in text.split(",") if ":" in p)
    if pairs:
        return pairs.get("cuda" if gpu_run else "cpu") or next(iter(pairs.values()))
    return text


def _across_racks(rows: list[dict[str, Any]], place: Placement, pgs: pl.DataFrame, switches: dict[str, str],
                  warnings: list[str]) -> None:
    """Network groups whose hosts hang on different leaf switches: tier ``spine`` (module doc)."""
    unplaced: set[str] = set()
    for row, group_ranks in zip(rows, pgs["ranks"].to_list(), strict=True):
        hosts = place.hosts_of(list(group_ranks or [])) if group_ranks else None
        if not hosts or len(hosts) < 2 or row["tier"] not in (*NETWORKS, UNKNOWN):
            continue
        leaves = {switches.get(short_host(h) or h) for h in hosts}
        if None in leaves:
            unplaced |= {h for h in hosts if (short_host(h) or h) not in switches}
        elif len(leaves) > 1:
            row.update(tier="spine", tier_source="switches")
    if unplaced:
        warnings.append(f"the switch topology places no leaf switch for host(s) {', '.join(sorted(unplaced)[:6])}: "
                        "their groups keep the tier their other sources give")


def group_tiers(pgs: pl.DataFrame, ranks: pl.DataFrame, comms: list[CommInfo], topos: dict[str, HostTopology],
                settings: TierSettings, pg_ops: dict[str, set[str]] | None = None) -> tuple[pl.DataFrame, list[str]]:
    """One row per group: pg, tier, tier_source, nodes_spanned, nccl_comm, link_gbps; and warnings.
    ``comms`` and ``topos`` are what ingest read from the run's NCCL logs and topology captures."""
    warnings: list[str] = []
    place = placement(ranks, settings.gpus_per_node)
    gpu_run = "gpu" in set(ranks["mode"].drop_nulls().to_list()) if "mode" in ranks.columns else False
    run_backend = next(iter(ranks["backend"].drop_nulls().to_list()), None) if ranks.height else None
    matched = match_communicators(pgs, comms, pg_ops or {})
    rows, unknown_spanning = [], 0
    for pg, group_ranks, backend in zip(pgs["pg"].to_list(), pgs["ranks"].to_list(),
                                        pgs["backend"].to_list(), strict=True):
        group_ranks = list(group_ranks or [])
        hosts = place.hosts_of(group_ranks) if group_ranks else None
        row: dict[str, Any] = {"pg": pg, "tier": "unknown", "tier_source": None,
                               "nodes_spanned": len(hosts) if hosts else None, "nccl_comm": None, "link_gbps": None}
        comm = matched.get(pg)
        # "nvlink_or_pcie": the NCCL log shows P2P but not whether NVLink or PCIe; the topology capture or the
        # intra-host assumption below decides it
        if comm is not None and comm.tier not in ("unknown", "nvlink_or_pcie"):
            row.update(tier=comm.tier, tier_source="nccl_log", nccl_comm=comm.comm_id, link_gbps=comm.link_gbps)
        elif hosts:
            kind = _backend(backend or run_backend, gpu_run)
            host_source = "assumed" if place.assumed else "hosts"
            if len(hosts) == 1:
                intra = _intra_host_tier(topos.get(next(iter(hosts))), [place.gpu.get(r) for r in group_ranks])
                if "nccl" in kind and intra:
                    row.update(tier=intra, tier_source="topology")
                elif "nccl" in kind:
                    row.update(tier="nvlink", tier_source="assumed")
                elif "gloo" in kind or not gpu_run:
                    row.update(tier="loopback", tier_source=host_source)
            elif "gloo" in kind or (not gpu_run and "nccl" not in kind):
                row.update(tier="ethernet", tier_source=host_source)
            elif (inter := _inter_host_tier(topos, hosts)) is not None:
                row.update(tier=inter[0], tier_source="topology", link_gbps=inter[1])
            elif settings.network is not None:
                row.update(tier=settings.network, tier_source="assumed")
            else:
                unknown_spanning += 1
        rows.append(row)
    if settings.switches:
        _across_racks(rows, place, pgs, settings.switches, warnings)
    if unknown_spanning:
        warnings.append(f"{unknown_spanning} process group(s) span several hosts and no NCCL log or topology "
                        "capture names their network: tier unknown (pass --network ib|roce|ethernet)")
    return pl.DataFrame(rows, schema=GROUP_TIER_SCHEMA), warnings
