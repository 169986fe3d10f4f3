"""Tier of each process group (analyzers/group_tiers.py): from NCCL logs, topology captures, hosts, flags."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from classify_helpers import GroupSpec, RankSpec, write_run

import commprof
from commprof.analyzers.group_tiers import TierSettings, match_communicators
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.errors import UsageError
from commprof.ingest.topology import CommInfo, parse_smi_topo
from commprof.run import open_run

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def _tiers(run_dir: Path, **settings: object) -> dict[str, tuple[str, str | None]]:
    pgs = commprof.analyze(open_run(run_dir), AnalysisSettings(**settings)).process_groups  # type: ignore[arg-type]
    return {r["pg"]: (r["tier"], r["tier_source"]) for r in pgs.iter_rows(named=True)}


def _hosts(*layout: tuple[str | None, list[int]], first_pid: int = 1, by_host_pids: bool = False) -> list[RankSpec]:
    """RankSpecs, ranks numbered in order: (host, [pids]) per host, GPU index = position on the host."""
    out, rank = [], 0
    for host, pids in layout:
        for dev, pid in enumerate(pids):
            out.append(RankSpec(rank, host, pid, dev))
            rank += 1
    return out


# Each fixture's processes as the logs show them (host, pids in global-rank order) and the groups a
# trace of that job would list; split communicators' members are found by pid, not by their local rank.
NCCL_CASES = {
    "roce_2.27": (
        [("roce1.cluster.local", [5001, 5002]), ("roce2", [5101, 5102])],
        [("0", "default_pg", (0, 1, 2, 3)), ("1", "mesh_dp", (0, 2)), ("2", "mesh_dp", (1, 3))],
        {"0": "roce", "1": "roce", "2": "roce"}, 25.0,
    ),
    "socket_2.30": (
        [("tcp1", [6001, 6002]), ("tcp2", [6101, 6102])],
        [("0", "default_pg", (0, 1, 2, 3)), ("1", "mesh_dp", (0, 2))],
        {"0": "ethernet", "1": "ethernet"}, 25000 / 8000,
    ),
    "cumem_nvls_2.22": (
        [("h100a", list(range(2001, 2009)))],
        [("0", "default_pg", tuple(range(8))), ("1", "mesh_tp", (0, 1, 2, 3)), ("2", "mesh_tp", (4, 5, 6, 7))],
        {"0": "nvlink", "1": "nvlink", "2": "nvlink"}, 450.0,
    ),
    "ib_gdr_pxn_2.23": (
        [("gpu-a", [4001, 4002, 4003, 4004]), ("gpu-b", [4101, 4102, 4103, 4104])],
        [("0", "default_pg", tuple(range(8)))],
        {"0": "ib"}, 50.0,
    ),
    "nvlink_2.18": (
        [("dgx01", [1001, 1002, 1003, 1004])],
        [("0", "default_pg", (0, 1, 2, 3))],
        {"0": "nvlink"}, 450.0,
    ),
    "efa_2.22": (
        [("ip-10-0-1-11", [7001]), ("ip-10-0-1-12", [7101])],
        [("0", "default_pg", (0, 1))],
        {"0": "roce"}, 25.0,
    ),
}


@pytest.mark.parametrize("fixture", sorted(NCCL_CASES))
def test_nccl_log_fixtures_map_to_process_groups(fixture: str, tmp_path: Path) -> None:
    hosts, groups, expected, peak = NCCL_CASES[fixture]
    ranks = _hosts(*hosts)
    run_dir = write_run(tmp_path / fixture, ranks, [GroupSpec(*g) for g in groups], nccl_logs=FIXTURES / fixture)
    analysis = commprof.analyze(open_run(run_dir))
    pgs = {r["pg"]: r for r in analysis.process_groups.iter_rows(named=True)}
    assert {pg: (r["tier"], r["tier_source"]) for pg, r in pgs.items()} == {
        pg: (tier, "nccl_log") for pg, tier in expected.items()}
    assert all(r["nccl_comm"] for r in pgs.values())
    assert {r["peak_gbps"] for r in pgs.values()} == {peak}
    # every collective carries its group's tier
    coll = analysis.collectives.select("pg", "tier").unique()
    assert {(r["pg"], r["tier"]) for r in coll.iter_rows(named=True)} == set(expected.items())


def test_split_communicators_found_by_pid(tmp_path: Path) -> None:
    """roce_2.27's two 2-rank splits both number their ranks 0 and 1; only the pids tell that one is
    global ranks {0, 2} and the other {1, 3}."""
    ranks = _hosts(("roce1", [5001, 5002]), ("roce2", [5101, 5102]))
    run_dir = write_run(tmp_path / "r", ranks, [GroupSpec("1", None, (0, 2)), GroupSpec("2", None, (1, 3))],
                        nccl_logs=FIXTURES / "roce_2.27")
    pgs = commprof.analyze(open_run(run_dir)).process_groups
    assert dict(zip(pgs["pg"], pgs["nccl_comm"], strict=True)) == {
        "1": "0x5e6f708192a3b4c5/s1c0", "2": "0x5e6f708192a3b4c5/s1c1"}


def test_one_process_with_two_gpus_matched_by_device(tmp_path: Path) -> None:
    """pcie_socket_2.19: pid 3001 drives GPUs 0 and 1 (ranks 0, 1); cudaDev tells them apart."""
    ranks = [RankSpec(0, "ws01", 3001, 0), RankSpec(1, "ws01", 3001, 1), RankSpec(2, "ws01", 3002, 2),
             RankSpec(3, "ws01", 3002, 3)]
    run_dir = write_run(tmp_path / "p", ranks, [GroupSpec("0", "default_pg", (0, 1, 2, 3))],
                        nccl_logs=FIXTURES / "pcie_socket_2.19", gpu_name="NVIDIA A100-PCIE-40GB")
    assert _tiers(run_dir) == {"0": ("shm", "nccl_log")}


def test_logs_whose_pids_match_no_rank_fall_back_to_the_world_communicator(tmp_path: Path) -> None:
    ranks = [RankSpec(r, "roce1" if r < 2 else "roce2", None, r % 2) for r in range(4)]
    run_dir = write_run(tmp_path / "np", ranks, [GroupSpec("0", "default_pg", (0, 1, 2, 3)),
                                                 GroupSpec("1", "mesh_dp", (0, 2))],
                        nccl_logs=FIXTURES / "roce_2.27")
    assert _tiers(run_dir) == {"0": ("roce", "nccl_log"), "1": ("roce", "nccl_log")}


def test_coll_ops_pick_among_communicators_with_one_rank_set() -> None:
    pgs = pl.DataFrame({"pg": ["dp", "p2p"], "ranks": [[0, 1], [0, 1]]})
    comms = [CommInfo("c-p2p", frozenset({0, 1}), "ib", {"send", "recv"}, 10, None),
             CommInfo("c-coll", frozenset({0, 1}), "nvlink", {"all_reduce"}, 2, None)]
    chosen = match_communicators(pgs, comms, {"dp": {"all_reduce"}, "p2p": {"send", "recv"}})
    assert {pg: c.comm_id for pg, c in chosen.items()} == {"dp": "c-coll", "p2p": "c-p2p"}
    # one communicator for two groups with its rank set: both get it
    one = match_communicators(pgs, comms[1:], {})
    assert {pg: c.comm_id for pg, c in one.items()} == {"dp": "c-coll", "p2p": "c-coll"}


# --------------------------------------------------------------------------------------- without logs

TWO_NODES = _hosts(("n1", [11, 12]), ("n2", [21, 22]))
GROUPS = [GroupSpec("0", "default_pg", (0, 1, 2, 3)), GroupSpec("1", "mesh_tp", (0, 1)),
          GroupSpec("2", "mesh_tp", (2, 3)), GroupSpec("3", "mesh_dp", (0, 2))]


def test_nccl_without_logs_hosts_then_network_flag(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "n", TWO_NODES, GROUPS)
    assert _tiers(run_dir) == {"0": ("unknown", None), "1": ("nvlink", "assumed"), "2": ("nvlink", "assumed"),
                               "3": ("unknown", None)}
    warnings = commprof.analyze(open_run(run_dir)).warnings
    assert any("span several hosts" in w and "--network" in w for w in warnings)
    assert _tiers(run_dir, network="ib") == {"0": ("ib", "assumed"), "1": ("nvlink", "assumed"),
                                             "2": ("nvlink", "assumed"), "3": ("ib", "assumed")}


SMI_TOPO_PCIE = """\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tSYS\tPIX\t0-15\t0\t\tN/A
GPU1\tSYS\t X \tSYS\t0-15\t0\t\tN/A
NIC0\tPIX\tSYS\t X

Legend:
  X    = Self
"""
SMI_TOPO_NVLINK = """\tGPU0\tGPU1\tCPU Affinity
GPU0\t X \tNV18\t0-55
GPU1\tNV18\t X \t0-55
"""


def test_parse_smi_topo() -> None:
    assert parse_smi_topo(SMI_TOPO_PCIE) == {(0, 1): "SYS", (1, 0): "SYS"}
    assert parse_smi_topo(SMI_TOPO_NVLINK) == {(0, 1): "NV18", (1, 0): "NV18"}
    assert parse_smi_topo("") == {}


def test_topology_captures_decide_before_assumptions(tmp_path: Path) -> None:
    ib = [{"device": "mlx5_0", "port": "1", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)",
           "state": "4: ACTIVE"}]
    topology = {"n1": {"nvidia_smi_topo": SMI_TOPO_PCIE, "infiniband": ib},
                "n2": {"nvidia_smi_topo": SMI_TOPO_NVLINK, "infiniband": ib}}
    run_dir = write_run(tmp_path / "t", TWO_NODES, GROUPS, topology=topology)
    assert _tiers(run_dir, network="ethernet") == {
        "0": ("ib", "topology"), "1": ("pcie", "topology"), "2": ("nvlink", "topology"), "3": ("ib", "topology")}
    pgs = commprof.analyze(open_run(run_dir)).process_groups
    assert dict(zip(pgs["pg"], pgs["peak_gbps"], strict=True)) == {"0": 50.0, "1": 64.0, "2": 450.0, "3": 50.0}


def test_gloo_groups_loopback_on_one_host_ethernet_across(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "g", TWO_NODES, GROUPS, backend="gloo", gpu_name=None)
    assert _tiers(run_dir) == {"0": ("ethernet", "hosts"), "1": ("loopback", "hosts"),
                               "2": ("loopback", "hosts"), "3": ("ethernet", "hosts")}


def test_gpus_per_node_places_ranks_when_traces_carry_no_host(tmp_path: Path) -> None:
    ranks = [RankSpec(r, None, None, r % 2) for r in range(4)]
    run_dir = write_run(tmp_path / "h", ranks, GROUPS)
    assert set(_tiers(run_dir).values()) == {("unknown", None)}
    assert _tiers(run_dir, gpus_per_node=2, network="roce") == {
        "0": ("roce", "assumed"), "1": ("nvlink", "assumed"), "2": ("nvlink", "assumed"), "3": ("roce", "assumed")}
    nodes = commprof.analyze(open_run(run_dir), AnalysisSettings(gpus_per_node=2)).process_groups["nodes_spanned"]
    assert nodes.to_list() == [2, 1, 1, 2]


def test_tier_settings_validate() -> None:
    with pytest.raises(UsageError, match="--network"):
        TierSettings(network="infiniband")
    with pytest.raises(UsageError, match="--gpus-per-node"):
        TierSettings(gpus_per_node=0)
