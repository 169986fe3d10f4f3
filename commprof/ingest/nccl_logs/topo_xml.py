"""NCCL's own topology and graph XML dumps (``NCCL_TOPO_DUMP_FILE``, ``NCCL_GRAPH_DUMP_FILE``).

The topology dump is the best evidence for whether "P2P" means NVLink or PCIe: log lines only say
``P2P/IPC``. NVLink appears there as a link *count*; bandwidth per link depends on the GPU
generation, so we multiply by NCCL's own per-link figures (graph/topo.h).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from commprof.errors import InputError

# GB/s per NVLink link and direction, by SM (NCCL graph/topo.h SM*_NVLINK_BW).
NVLINK_GBPS_BY_SM = ((100, 40.1), (90, 20.6), (86, 12.0), (80, 20.0), (70, 20.0), (60, 18.0))
SNIFF_BYTES = 4096


def nvlink_gbps_per_link(sm: int | None) -> float:
    if sm is None:
        return 20.0
    return next((bw for min_sm, bw in NVLINK_GBPS_BY_SM if sm >= min_sm), 20.0)


@dataclass(slots=True)
class XmlGpu:
    dev: int | None
    sm: int | None
    rank: int | None
    bus_id: str | None
    gdr: bool | None
    nvlinks: list[tuple[str, int, str]] = field(default_factory=list)  # (target busid, count, tclass)

    @property
    def nvlink_count(self) -> int:
        return sum(count for _, count, _ in self.nvlinks)

    @property
    def nvlink_gbps(self) -> float:
        return round(self.nvlink_count * nvlink_gbps_per_link(self.sm), 1)


@dataclass(slots=True)
class XmlNet:
    name: str
    dev: int | None
    speed_mbps: int | None
    port: int | None
    gdr: bool | None
    coll: bool | None


@dataclass
class TopologyXml:
    path: str
    gpus: list[XmlGpu]
    nets: list[XmlNet]
    host_hashes: list[str]
    host: str | None = None  # set when the file can be tied to a host

    @property
    def has_nvlink(self) -> bool:
        return any(g.nvlinks for g in self.gpus)


@dataclass
class GraphXml:
    path: str
    pattern: int | None
    nchannels: int | None
    speed_intra: float | None
    speed_inter: float | None
    type_intra: str | None
    type_inter: str | None
    channels: list[list[str]]


def xml_kind(path: Path) -> str | None:
    """``topology``, ``graph`` or None, from the first bytes, so folders can be searched cheaply."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    if "<system" in head and "version" in head:
        return "topology"
    if "<graphs" in head:
        return "graph"
    return None


def _root(path: Path, tag: str) -> ET.Element:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as err:
        raise InputError(f"not a readable NCCL XML dump ({err})", path) from err
    if root.tag != tag:
        raise InputError(f"expected <{tag}>, found <{root.tag}>", path)
    return root


MAX_DEPTH = 64  # NCCL writes about 6 levels (system/cpu/pci/pci/gpu/nvlink)
INT32_LIMIT = 1 << 31


def _int(el: ET.Element, name: str, base: int = 10) -> int | None:
    """An int32 attribute, or None (absent, not a number, or a 30-digit rank)."""
    value = el.get(name)
    try:
        number = int(value, base) if value is not None and len(value) <= 20 else None
    except ValueError:
        return None
    return number if number is not None and -INT32_LIMIT <= number < INT32_LIMIT else None


def _float(el: ET.Element, name: str) -> float | None:
    value = el.get(name)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _flag(el: ET.Element, name: str) -> bool | None:
    value = _int(el, name)
    return None if value is None else value != 0


def parse_topology_xml(path: str | Path) -> TopologyXml:
    """Read an ``NCCL_TOPO_DUMP_FILE``. Raises InputError when it is not one."""
    path = Path(path)
    root = _root(path, "system")
    gpus: list[XmlGpu] = []
    nets: list[XmlNet] = []

    # depth-first in document order, iterative and with the depth bounded: a dump nested 50k deep is
    # refused with a message, not a RecursionError
    stack: list[tuple[ET.Element, str | None, int]] = [(child, None, 1) for child in reversed(root)]
    while stack:
        el, busid, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels; not an NCCL topology dump", path)
        if el.tag == "gpu":
            links = [(nv.get("target", ""), _int(nv, "count") or 0, nv.get("tclass", "")) for nv in el.iter("nvlink")]
            gpus.append(XmlGpu(_int(el, "dev"), _int(el, "sm"), _int(el, "rank"), busid, _flag(el, "gdr"), links))
        elif el.tag == "nic":
            nets.extend(
                XmlNet(net.get("name", "?"), _int(net, "dev"), _int(net, "speed"), _int(net, "port"),
                       _flag(net, "gdr"), _flag(net, "coll"))
                for net in el.iter("net")
            )
        else:
            inner = el.get("busid") if el.tag == "pci" else busid
            stack.extend((child, inner, depth + 1) for child in reversed(el))
    hashes = [h for cpu in root.iter("cpu") if (h := cpu.get("host_hash"))]
    return TopologyXml(str(path), gpus, nets, sorted(set(hashes)))


def parse_graph_xml(path: str | Path) -> list[GraphXml]:
    """Read an ``NCCL_GRAPH_DUMP_FILE``: one entry per graph (ring, tree, collnet, nvls)."""
    path = Path(path)
    root = _root(path, "graphs")
    graphs = []
    for g in root.iter("graph"):
        channels = [
            [f"{node.tag}{node.get('dev', '?')}" for node in ch if node.tag in ("gpu", "net")]
            for ch in g.iter("channel")
        ]
        graphs.append(
            GraphXml(
                str(path),
                _int(g, "pattern"),
                _int(g, "nchannels"),
                _float(g, "speedintra"),
                _float(g, "speedinter"),
                g.get("typeintra"),
                g.get("typeinter"),
                channels,
            )
        )
    return graphs
