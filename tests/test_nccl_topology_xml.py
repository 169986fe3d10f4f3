"""NCCL's topology / graph XML dumps, and how their evidence decides whether P2P is NVLink or PCIe."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from commprof.errors import InputError
from commprof.ingest.nccl_logs import build_tables, load_nccl, parse_graph_xml, parse_nccl_text, parse_topology_xml
from commprof.ingest.nccl_logs.topo_xml import nvlink_gbps_per_link

XML = Path(__file__).parent / "fixtures" / "nccl" / "topology_xml"
FIXTURES = XML.parent


def test_dgx_h100_dump() -> None:
    topo = parse_topology_xml(XML / "topo.h100a.xml")
    assert len(topo.gpus) == 8 and topo.has_nvlink
    gpu = topo.gpus[3]
    assert (gpu.dev, gpu.sm, gpu.rank, gpu.bus_id, gpu.gdr) == (3, 90, 3, "0000:5d:00.0", True)
    assert gpu.nvlink_count == 18 and gpu.nvlink_gbps == pytest.approx(18 * 20.6)
    assert [n.name for n in topo.nets] == [f"mlx5_{i}" for i in range(8)]
    assert {n.speed_mbps for n in topo.nets} == {400000} and topo.host_hashes == ["0x6b1c2d3e4f506172"]


def test_pcie_dump() -> None:
    topo = parse_topology_xml(XML / "topo_pcie_l40s.xml")
    assert len(topo.gpus) == 4 and not topo.has_nvlink
    assert {g.sm for g in topo.gpus} == {89} and topo.nets[0].name == "eth0"


@pytest.mark.parametrize(("sm", "gbps"), [(100, 40.1), (90, 20.6), (86, 12.0), (80, 20.0), (70, 20.0), (60, 18.0)])
def test_nvlink_bandwidth_by_arch(sm: int, gbps: float) -> None:
    assert nvlink_gbps_per_link(sm) == gbps


def test_graph_dump() -> None:
    ring, tree = parse_graph_xml(XML / "graph.h100a.xml")
    got = (ring.pattern, ring.nchannels, ring.type_intra, ring.type_inter, ring.speed_intra)
    assert got == (4, 2, "NVL", "PIX", 40.0)
    assert ring.channels[0] == ["net0", "gpu0", "gpu1", "gpu2", "gpu3", "net0"]
    assert tree.pattern == 3


def test_bad_xml_raises_input_error(tmp_path: Path) -> None:
    broken = tmp_path / "topo.xml"
    broken.write_text('<system version="1"><cpu>')
    with pytest.raises(InputError, match="not a readable NCCL XML dump"):
        parse_topology_xml(broken)
    with pytest.raises(InputError, match="expected <system>"):
        parse_topology_xml(XML / "graph.h100a.xml")


IPC_LOG = """\
hostx:1:1 [0] NCCL INFO comm 0xa rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 2000 commId 0x1 - Init START
hostx:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
hostx:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
hostx:1:1 [0] NCCL INFO comm 0xa rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 2000 commId 0x1 - Init COMPLETE
hosty:2:2 [0] NCCL INFO comm 0xb rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 2000 commId 0x1 - Init COMPLETE
"""


@pytest.mark.parametrize(
    ("xml", "ipc", "direct"),
    [
        (None, ("nvlink_or_pcie", "undecided"), ("nvlink_or_pcie", "undecided")),
        ("topo_pcie_l40s.xml", ("pcie", "topology_xml"), ("pcie", "topology_xml")),
        ("topo.h100a.xml", ("nvlink", "topology_xml"), ("nvlink", "topology_xml")),
    ],
)
def test_p2p_tier_from_xml_evidence(xml: str | None, ipc: tuple[str, str], direct: tuple[str, str]) -> None:
    logs = parse_nccl_text(IPC_LOG)
    topologies = [parse_topology_xml(XML / xml)] if xml else []
    links = build_tables(logs, topologies).nccl_links
    got = {r[0]: (r[1], r[2]) for r in links.select("detail", "tier", "tier_source").rows()}
    assert got == {"IPC": ipc, "direct pointer": direct}


def test_xml_is_tied_to_a_host_by_rank_and_bus_id() -> None:
    """The L40S dump lists rank 2 at bus 0000:41:00.0; hostx's rank 0 sits at busId 2000, the
    dump's rank 0 at 0000:02:00.0 = 0x2000: so the dump describes hostx only."""
    logs = parse_nccl_text(IPC_LOG)
    ev = build_tables(logs, [parse_topology_xml(XML / "topo_pcie_l40s.xml")]).evidence
    assert {h: v[:2] for h, v in ev.by_host.items()} == {"hostx": ("pcie", "topology_xml")} and ev.default is None


def test_graph_xml_evidence() -> None:
    logs = parse_nccl_text(IPC_LOG)
    links = build_tables(logs, graphs=parse_graph_xml(XML / "graph.h100a.xml")).nccl_links
    assert set(links.select("tier", "tier_source").rows()) == {("nvlink", "graph_xml")}


def test_run_directory_with_xml_dumps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "cumem_nvls_2.22", run / "raw" / "nccl")
    shutil.copy(XML / "topo.h100a.xml", run / "raw" / "topo.h100a.xml")
    shutil.copy(XML / "graph.h100a.xml", run / "raw" / "nccl" / "graph.h100a.xml")
    (run / "raw" / "nccl" / "broken.xml").write_text("<system version='1'>")
    (run / "raw" / "rank0.json").write_text('{"NCCL INFO": 1}')  # a trace, never sniffed as a log
    loaded = load_nccl(run)
    assert len(loaded.inputs.logs) == 8 and len(loaded.graphs) == 2
    assert [t.host for t in loaded.topologies] == ["h100a"]
    assert any("broken.xml" in f for f in loaded.logs.stats.skipped_files)
    tables = build_tables(loaded.logs, loaded.topologies, loaded.graphs)
    assert set(tables.nccl_communicators["tier"]) == {"nvlink"}
    assert tables.nccl_links.filter(pl.col("transport") == "p2p")["tier_source"].unique().to_list() == ["graph"]
