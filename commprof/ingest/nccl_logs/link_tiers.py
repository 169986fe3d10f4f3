"""Link tier of each connection and of each communicator: the slowest link it crosses.

Slowness order: ethernet < loopback < roce < ib < shm < pcie < p2p (undecided) < nvlink; ``unknown`` only when
nothing is known. Decisions, and why:

- ``P2P/MNNVL`` and NVLS: nvlink — both exist only over NVLink/NVSwitch.
- ``P2P/IPC``, ``P2P/CUMEM``, ``P2P/indirect``, ``P2P/direct pointer``: the line does not say
  whether the GPUs talk over NVLink or PCIe; ``evidence`` decides from what else the log and the
  dumps show (GRAPH path types, NVLS, ncclTopoPrint, XML dumps, GPU model). Without evidence the tier
  is ``p2p`` (source ``undecided``) and ``tier_reason`` says what was missing: guessing NVLink made
  PCIe workstations look fast, guessing PCIe the reverse.
- ``SHM``: shm. ``NET/Socket``: ethernet (loopback when the interface is ``lo``).
- ``NET/IB*`` (and CollNet/SHARP on it): ib or roce from the link layer of the NIC the line names
  (``NET/IB : Using [0]mlx5_0:1/RoCE``); ``ib`` (``assumed``) when the NIC list was not logged.
- ``NET/AWS Libfabric`` (EFA): network type ``efa``, tier ``roce``: EFA is RDMA (SRD) over an
  Ethernet fabric, which is what the roce tier stands for — between TCP and InfiniBand.
"""

from __future__ import annotations

from commprof.ingest.nccl_logs.evidence import Evidence, gather_evidence, undecided_reason
from commprof.ingest.nccl_logs.records import Link, Nic, Process
from commprof.vocab import SLOWNESS

__all__ = ["Evidence", "find_nic", "gather_evidence", "link_tier", "network_type", "slowest"]

# Which source to report when several links share the deciding tier: the most direct one.
SOURCE_TRUST = ("transport", "graph", "nvls", "topology", "topology_xml", "graph_xml", "gpu_model", "network",
                "assumed", "undecided")
# "nvlink_or_pcie": a P2P link that is NVLink or PCIe, undecided ("p2p" is a transport, not a tier). It is at
# least as fast as PCIe, so it sits between shm and pcie: a comm with PCIe and undecided P2P links crosses
# PCIe; with NVLink and undecided ones, the slowest is undecided.
P2P_UNDECIDED = "nvlink_or_pcie"
RANK = {**{t: float(v) for t, v in SLOWNESS.items()}, P2P_UNDECIDED: SLOWNESS["pcie"] + 0.5}
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
    known = [(t, s) for t, s in tiers if t in RANK]
    if not known:
        return ("unknown", "none")
    low = min(RANK[t] for t, _ in known)
    sources = {s for t, s in known if RANK[t] == low}
    tier = next(t for t, _ in known if RANK[t] == low)
    return tier, min(sources, key=lambda s: SOURCE_TRUST.index(s) if s in SOURCE_TRUST else 99)


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


def link_tier(link: Link, comm_id: str | None, ev: Evidence, nic: Nic | None) -> tuple[str, str, str | None, str]:
    """(tier, tier_source, network_type, reason) of one connection."""
    kind = link.transport
    if kind == "nvls":
        return "nvlink", "transport", None, "NVLS runs only over NVLink/NVSwitch"
    if kind == "p2p" and link.detail == "MNNVL":
        return "nvlink", "transport", None, "P2P/MNNVL is multi-node NVLink"
    if kind == "shm":
        return "shm", "transport", None, "SHM: through host shared memory"
    if kind == "p2p":
        found = ev.p2p(comm_id, link.process.host)
        if found is not None:
            return found[0], found[1], None, found[2]
        return P2P_UNDECIDED, "undecided", None, undecided_reason(link.detail)
    net = network_type(link.detail, nic.link_layer if nic is not None else None)
    tier = NETWORK_TIER.get(net, "unknown")
    if net == "socket" and nic is not None and nic.name == "lo":
        tier = "loopback"
    known_layer = nic is not None and nic.link_layer is not None
    source = "transport" if known_layer or net in ("socket", "efa", "tcpx") else "assumed"
    if known_layer and nic is not None:
        reason = f"NET/{link.detail} on NIC {nic.name}, link layer {nic.link_layer}"
    elif source == "assumed":
        reason = f"NET/{link.detail}: no NIC list in the log says IB or RoCE; IB assumed"
    else:
        reason = f"NET/{link.detail}"
    return tier, source, net, reason
