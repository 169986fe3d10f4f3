"""Link tier of each connection and of each communicator: the slowest link it crosses.

Slowness order: ethernet < loopback < roce < ib < shm < pcie < nvlink; ``unknown`` only when
nothing is known. Decisions, and why:

- ``P2P/MNNVL`` and NVLS: nvlink — both exist only over NVLink/NVSwitch.
- ``P2P/IPC``, ``P2P/CUMEM``, ``P2P/indirect``: the line does not say whether the GPUs talk over
  NVLink or PCIe, so we look for evidence, most specific first: the communicator's GRAPH
  ``Pattern`` lines (intra path NVL/NVB → nvlink; PIX/PXB/P2C/PHB/SYS → pcie), the process's
  ncclTopoPrint dump (any NVL link → nvlink, GPUs without one → pcie), the topology / graph XML
  dumps. Without evidence: nvlink (tier_source ``assumed``) — NCCL's default P2P level only uses
  PCIe P2P behind a PCIe switch, and multi-GPU servers that train at scale have NVLink.
- ``P2P/direct pointer`` (both GPUs in one process): the same evidence; without it pcie
  (``assumed``), because single-process multi-GPU setups are mostly workstations without NVLink.
- ``SHM``: shm. ``NET/Socket``: ethernet (loopback when the interface is ``lo``).
- ``NET/IB*`` (and CollNet/SHARP on it): ib or roce from the link layer of the NIC the line names
  (``NET/IB : Using [0]mlx5_0:1/RoCE``); ``ib`` (``assumed``) when the NIC list was not logged.
- ``NET/AWS Libfabric`` (EFA): network type ``efa``, tier ``roce``: EFA is RDMA (SRD) over an
  Ethernet fabric, which is what the roce tier stands for — between TCP and InfiniBand.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.ingest.nccl import patterns as pt
from commprof.ingest.nccl.records import CommRank, Link, Nic, Process
from commprof.ingest.nccl.topo_xml import GraphXml, TopologyXml
from commprof.vocab import SLOWNESS

# Which source to report when several links share the deciding tier: the most direct one.
SOURCE_TRUST = ("transport", "graph", "topology", "topology_xml", "graph_xml", "network", "assumed")
NETWORK_TIER = {"ib": "ib", "roce": "roce", "socket": "ethernet", "efa": "roce", "tcpx": "ethernet"}


def network_type(net_name: str | None, link_layer: str | None = None) -> str:
    """IB / RoCE / socket / EFA / TCPX / other, from NCCL's net name and the NIC's link layer."""
    if not net_name:
        return "unknown"
    low = net_name.lower()
    if low == "socket":
        return "socket"
    if "libfabric" in low or low.startswith(("ofi", "efa")):
        return "efa"
    if low.startswith("ib") or low in ("gib", "sharp"):
        if link_layer is not None:
            return "roce" if link_layer.lower() == "roce" else "ib"
        return "roce" if low == "gib" else "ib"
    if "tcpx" in low or "fastrak" in low:
        return "tcpx"
    return low


def slowest(tiers: list[tuple[str, str]]) -> tuple[str, str]:
    """(tier, source) of the slowest known tier; ``unknown`` when there is none."""
    known = [(t, s) for t, s in tiers if t in SLOWNESS]
    if not known:
        return ("unknown", "none")
    low = min(SLOWNESS[t] for t, _ in known)
    sources = {s for t, s in known if SLOWNESS[t] == low}
    tier = next(t for t, _ in known if SLOWNESS[t] == low)
    return tier, min(sources, key=lambda s: SOURCE_TRUST.index(s) if s in SOURCE_TRUST else 99)


def _path_verdict(path_type: str) -> str | None:
    if path_type in pt.NVLINK_PATHS:
        return "nvlink"
    if path_type in pt.PCIE_PATHS:
        return "pcie"
    return None


@dataclass
class Evidence:
    """What the logs and dumps say about intra-node GPU paths, per communicator and per host."""

    by_comm_host: dict[tuple[str, str | None], str]  # (comm_id, host) -> nvlink | pcie, from GRAPH
    by_host: dict[str | None, tuple[str, str]]  # host -> (verdict, source)
    default: tuple[str, str] | None  # from dumps not tied to a host (homogeneous cluster)

    def p2p(self, comm_id: str | None, host: str | None) -> tuple[str, str] | None:
        if comm_id is not None and (verdict := self.by_comm_host.get((comm_id, host))):
            return verdict, "graph"
        return self.by_host.get(host) or self.default


def _xml_host(xml: TopologyXml, comms: list[CommRank], hosts: set[str]) -> str | None:
    if xml.host is not None:
        return xml.host
    if len(hosts) == 1:
        return next(iter(hosts))
    by_bus = {(g.rank, _bus_int(g.bus_id)) for g in xml.gpus if g.rank is not None}
    for rec in comms:
        if (rec.rank, _bus_int(rec.bus_id, pci=False)) in by_bus and rec.process.host:
            return rec.process.host
    return None


def _bus_int(bus: str | None, pci: bool = True) -> int | None:
    """NCCL's busId int: hex digits of "0000:07:00.0" with separators dropped (0x7000)."""
    if not bus:
        return None
    digits = bus.replace(":", "").replace(".", "") if pci else bus
    try:
        return int(digits, 16)
    except ValueError:
        return None


def gather_evidence(
    processes: list[Process], comms: list[CommRank], topologies: list[TopologyXml], graphs: list[GraphXml]
) -> Evidence:
    by_comm_host: dict[tuple[str, str | None], str] = {}
    for rec in comms:
        verdicts = {_path_verdict(intra) for _, intra, _ in rec.graph_types} - {None}
        if verdicts and rec.comm_id is not None:
            key = (rec.comm_id, rec.process.host)
            # one PCIe path anywhere means some peer pair goes over PCIe: the slower verdict wins
            by_comm_host[key] = "pcie" if "pcie" in verdicts or by_comm_host.get(key) == "pcie" else "nvlink"
    by_host: dict[str | None, tuple[str, str]] = {}
    for proc in processes:
        if proc.topo_nvlink:
            by_host[proc.host] = ("nvlink", "topology")
        elif proc.topo_printed and proc.topo_gpus >= 2 and proc.host not in by_host:
            by_host[proc.host] = ("pcie", "topology")
    hosts = {p.host for p in processes if p.host}
    default: tuple[str, str] | None = None
    for xml in topologies:
        if len(xml.gpus) < 2:
            continue
        verdict = ("nvlink" if xml.has_nvlink else "pcie", "topology_xml")
        host = _xml_host(xml, comms, hosts)
        if host is None:
            default = default if default is not None and default[0] == "pcie" else verdict
        else:
            by_host.setdefault(host, verdict)
    for graph in graphs:
        g_verdict = _path_verdict(graph.type_intra or "")
        if g_verdict is not None and (default is None or default[1] == "graph_xml"):
            default = (g_verdict, "graph_xml")
    return Evidence(by_comm_host, by_host, default)


def find_nic(proc: Process, net: str, dev: int | None, host_nics: dict[str | None, list[Nic]]) -> Nic | None:
    """The NIC a NET line names: the process's own list first, then any list from its host."""
    family = "socket" if net.lower() == "socket" else "ib" if net.lower().startswith("ib") else net.lower()
    if dev is not None:
        nic = proc.nics.get(family, {}).get(dev)
        if nic is not None:
            return nic
        for other in host_nics.get(proc.host, []) if proc.host else []:
            if other.index == dev and other.net.lower().startswith(family[:2]):
                return other
    return None


def link_tier(link: Link, comm_id: str | None, ev: Evidence, nic: Nic | None) -> tuple[str, str, str | None]:
    """(tier, tier_source, network_type) of one connection."""
    kind = link.transport
    if kind == "nvls" or (kind == "p2p" and link.detail == "MNNVL"):
        return "nvlink", "transport", None
    if kind == "shm":
        return "shm", "transport", None
    if kind == "p2p":
        found = ev.p2p(comm_id, link.process.host)
        if found is not None:
            return found[0], found[1], None
        return ("pcie" if link.detail == "direct pointer" else "nvlink"), "assumed", None
    net = network_type(link.detail, nic.link_layer if nic is not None else None)
    tier = NETWORK_TIER.get(net, "unknown")
    if net == "socket" and nic is not None and nic.name == "lo":
        tier = "loopback"
    known_layer = nic is not None and nic.link_layer is not None
    source = "transport" if known_layer or net in ("socket", "efa", "tcpx") else "assumed"
    return tier, source, net
