"""What the logs and dumps say about the links between GPUs inside a host (NVLink or PCIe) and
between hosts (which network), each verdict with its source and a reason a user can read.

A ``P2P/IPC``, ``P2P/CUMEM``, ``P2P/indirect`` or ``P2P/direct pointer`` line does not say whether
the two GPUs talk over NVLink or PCIe. The evidence, most specific first:

1. ``graph``: the communicator's GRAPH ``Pattern`` lines, intra path type NVL/NVB/C2C -> nvlink,
   PIX/PXB/P2C/PHB/SYS -> pcie (one PCIe path anywhere means some pair goes over PCIe).
2. ``nvls``: NVLS on the host (``NVLS multicast support is available``, ``NVLS comm``, ``Connected
   NVLS``): NVLink SHARP runs only on NVSwitch systems, whose GPUs all talk over NVLink.
3. ``topology``: the process's ncclTopoPrint dump: an ``NVL[..]`` link -> nvlink; two or more GPUs
   hanging off PCI links only -> pcie.
4. ``graph``: ``Pattern`` lines the process printed for a communicator the log does not name.
5. ``topology_xml`` / ``graph_xml``: NCCL's XML dumps.
6. ``gpu_model``: the GPU's name where the log shows it (nccl-tests' rank table, ``nvidia-smi -L``
   pasted above the log): SXM / HGX parts and their successors have NVLink, PCIe cards and
   consumer GPUs do not; cards that take an optional NVLink bridge decide nothing.

Without any of them the link's tier is ``nvlink_or_pcie`` (source ``undecided``) and the reason says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commprof.ingest.nccl_logs import patterns as pt
from commprof.ingest.nccl_logs.records import CommRank, Process
from commprof.ingest.nccl_logs.topo_xml import GraphXml, TopologyXml

Verdict = tuple[str, str, str]  # (nvlink | pcie, source, reason)

# GPU names: NVLink parts (SXM/HGX boards and later data-centre parts built only that way), PCIe
# parts, and the rest (an optional NVLink bridge: the name decides nothing).
NVLINK_MODEL = re.compile(r"SXM|HGX|\bH100 80GB HBM3\b|\bH100 SXM|\bH200\b(?! NVL)|\bGH200\b|\bGB?[23]00\b|"
                          r"\bB[12]00\b|\bH20\b|\bH800\b(?! PCIe)|\bA800-SXM|\bDGX\b", re.IGNORECASE)
PCIE_MODEL = re.compile(r"PCIe|GeForce|\bRTX [2-5]0[5-9]0|\bL4\b|\bL40S?\b|\bT4\b|\bA10G?\b|\bA2\b|\bA16\b|"
                        r"\bRTX (?:PRO )?[456]000 Ada\b", re.IGNORECASE)
# a GPU name ends at "(UUID", "[", ",", "|" (an nvidia-smi table cell) or the end of the line; in a
# table cell, a run of spaces separates it from the next field ("NVIDIA A100-SXM4-80GB     On  |")
GPU_NAME = re.compile(r"(?:NVIDIA|Tesla|GeForce|Quadro)(?!-SMI)[ -][\w.()+-]+(?: [\w.()+-]+)*"
                      r"(?=\s*(?:\(UUID|\[|,|\||$)|\s{2})")


def gpu_verdict(model: str) -> str | None:
    if NVLINK_MODEL.search(model):
        return "nvlink"
    if PCIE_MODEL.search(model):
        return "pcie"
    return None


def path_verdict(path_type: str) -> str | None:
    if path_type in pt.NVLINK_PATHS:
        return "nvlink"
    if path_type in pt.PCIE_PATHS:
        return "pcie"
    return None


def _graph_verdict(types: set[str], what: str) -> Verdict | None:
    verdicts = {v for t in types if (v := path_verdict(t)) is not None}
    if not verdicts:
        return None
    verdict = "pcie" if "pcie" in verdicts else "nvlink"
    shown = "/".join(sorted(t for t in types if path_verdict(t) == verdict))
    return verdict, "graph", f"GRAPH Pattern of {what} has intra-node path type {shown}"


@dataclass
class Evidence:
    """Verdicts per (communicator, host), per host, and from dumps tied to no host."""

    by_comm_host: dict[tuple[str, str | None], Verdict]
    by_host: dict[str | None, Verdict]
    default: Verdict | None

    def p2p(self, comm_id: str | None, host: str | None) -> Verdict | None:
        if comm_id is not None and (verdict := self.by_comm_host.get((comm_id, host))):
            return verdict
        return self.by_host.get(host) or self.default


def _bus_int(bus: str | None, pci: bool = True) -> int | None:
    """NCCL's busId int: hex digits of "0000:07:00.0" with separators dropped (0x7000)."""
    if not bus:
        return None
    digits = bus.replace(":", "").replace(".", "") if pci else bus
    try:
        return int(digits, 16)
    except ValueError:
        return None


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


def _process_verdicts(proc: Process, nvls: bool) -> list[Verdict]:
    """What one process's own lines say, in order of trust (2-4 of the module docstring)."""
    host = proc.host or "this host"
    out: list[Verdict] = []
    if nvls:
        out.append(("nvlink", "nvls", f"NVLS (NVLink SHARP) is in use or available on {host}: NVSwitch"))
    if proc.topo_nvlink:
        out.append(("nvlink", "topology", f"ncclTopoPrint on {host} shows NVL links"))
    elif proc.topo_printed and proc.topo_gpus >= 2:
        out.append(("pcie", "topology", f"ncclTopoPrint on {host} shows GPUs on PCI links only, no NVL link"))
    graph = _graph_verdict(proc.graph_intra, f"a communicator on {host}")
    if graph is not None:
        out.append(graph)
    return out


def _model_verdict(models: set[str], host: str | None) -> Verdict | None:
    verdicts = {m: v for m in sorted(models) if (v := gpu_verdict(m)) is not None}
    if not verdicts:
        return None
    verdict = "pcie" if "pcie" in verdicts.values() else "nvlink"
    model = next(m for m, v in verdicts.items() if v == verdict)
    kind = "an NVLink (SXM/HGX) part" if verdict == "nvlink" else "a PCIe card without NVLink"
    return verdict, "gpu_model", f"GPU model {model}{' on ' + host if host else ''} is {kind}"


def gather_evidence(
    processes: list[Process],
    comms: list[CommRank],
    topologies: list[TopologyXml],
    graphs: list[GraphXml],
    models: dict[str | None, set[str]] | None = None,
) -> Evidence:
    by_comm_host: dict[tuple[str, str | None], Verdict] = {}
    for rec in comms:
        graph = _graph_verdict({intra for _, intra, _ in rec.graph_types}, f"communicator {rec.comm_id}")
        if graph is not None and rec.comm_id is not None:
            key = (rec.comm_id, rec.process.host)
            if key not in by_comm_host or graph[0] == "pcie":
                by_comm_host[key] = graph
    nvls_hosts = {r.process.host for r in comms if r.nvls} | {p.host for p in processes if p.nvls_available}
    candidates: dict[str | None, list[Verdict]] = {}
    for proc in processes:
        candidates.setdefault(proc.host, []).extend(_process_verdicts(proc, proc.host in nvls_hosts))
    by_host: dict[str | None, Verdict] = {}
    for host, found in candidates.items():
        if found:
            by_host[host] = found[0]
    hosts = {p.host for p in processes if p.host}
    default: Verdict | None = None
    for xml in topologies:
        if len(xml.gpus) < 2:
            continue
        verdict = "nvlink" if xml.has_nvlink else "pcie"
        shows = "NVLink" if xml.has_nvlink else "no NVLink"
        found_xml = (verdict, "topology_xml", f"NCCL topology dump {xml.path} shows {shows}")
        host = _xml_host(xml, comms, hosts)
        if host is None:
            default = default if default is not None and default[0] == "pcie" else found_xml
        else:
            by_host.setdefault(host, found_xml)
    for graph_xml in graphs:
        g_verdict = path_verdict(graph_xml.type_intra or "")
        if g_verdict is not None and (default is None or default[1] == "graph_xml"):
            default = (g_verdict, "graph_xml", f"NCCL graph dump has intra-node path type {graph_xml.type_intra}")
    for host, host_models in (models or {}).items():
        found_model = _model_verdict(host_models, host)
        if found_model is None:
            continue
        if host is None:
            default = default or found_model
        else:
            by_host.setdefault(host, found_model)
    return Evidence(by_comm_host, by_host, default)


def undecided_reason(detail: str) -> str:
    return (f"P2P/{detail} does not say NVLink or PCIe, and the log shows no NVLS, NVL/PCI topology, "
            "GRAPH path type or GPU model that would")
