"""Partial NCCL logs (issue 12): connection lines that no Init/commId line places form *inferred*
communicators; a P2P link is NVLink or PCIe only where the log shows evidence, else ``nvlink_or_pcie`` with
the reason; topology and network lines decide host tiers with no connection line at all."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from click.testing import Result

from commprof.ingest.nccl_logs import NcclTables, build_tables, parse_nccl_text, slowest
from commprof.ingest.nccl_logs.evidence import gpu_verdict

A = "gpu1:100:100 [0] NCCL INFO "
B = "gpu1:101:101 [1] NCCL INFO "
C = "gpu2:200:200 [0] NCCL INFO "


def tables(*lines: str) -> NcclTables:
    return build_tables(parse_nccl_text("\n".join(lines)))


def comms(t: NcclTables) -> dict[str, dict[str, object]]:
    return {r["comm_id"]: r for r in t.nccl_communicators.to_dicts()}


# -- inferred communicators ------------------------------------------------------------------------


def test_connection_lines_without_init_form_an_inferred_communicator() -> None:
    t = tables(
        A + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        B + "Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
        B + "Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0",
        C + "Channel 00/0 : 1[1] -> 2[0] [receive] via NET/Socket/0",
    )
    (comm,) = comms(t).values()
    assert comm["comm_id"] == "inferred-1" and comm["inferred"] is True
    assert (comm["nranks"], comm["ranks_seen"], comm["nnodes"]) == (3, 3, 2)
    assert (comm["tier"], comm["tier_source"]) == ("ethernet", "transport")
    assert comm["transports"] == ["net/Socket", "p2p/IPC", "shm"]
    rows = t.nccl_comms.sort("rank")
    assert rows["comm_id_source"].to_list() == ["inferred"] * 3 and rows["inferred"].all()
    assert rows.select("host", "pid", "cuda_dev").rows() == [("gpu1", 100, 0), ("gpu1", 101, 1), ("gpu2", 200, 0)]
    assert t.nccl_links["inferred"].all() and t.nccl_links["comm_id"].null_count() == 0


def test_stats_count_inferred_lines_not_unattributed() -> None:
    logs = parse_nccl_text(f"{A}Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n{B}Channel 00/0 : 1[1] -> 0[0] via P2P/IPC")
    assert (logs.stats.unattributed_links, logs.stats.inferred_links, logs.stats.inferred_comms) == (0, 2, 1)


def test_two_interleaved_runs_become_two_communicators() -> None:
    """Rank 0 printing twice from different processes means two runs (or two communicators)."""
    run2 = "gpu1:300:300 [0] NCCL INFO "
    run2b = "gpu1:301:301 [1] NCCL INFO "
    t = tables(
        A + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        run2 + "Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
        B + "Channel 00/0 : 1[1] -> 0[0] via P2P/IPC",
        run2b + "Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct",
    )
    got = {c: (r["nranks"], r["ranks_seen"], r["transports"]) for c, r in comms(t).items()}
    assert got == {"inferred-1": (2, 2, ["p2p/IPC"]), "inferred-2": (2, 2, ["shm"])}


def test_comm_pointer_on_the_line_names_the_communicator() -> None:
    """Some builds append " comm %p nRanks %d": the pointer keeps communicators apart, nRanks sizes
    them, and a pointer an Init line named attaches the line to that communicator."""
    t = tables(
        A + "comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x111 - Init COMPLETE",
        A + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC comm 0xa nRanks 2",
        A + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC comm 0xb nRanks 8",
        A + "Channel 01/0 : 0[0] -> 3[3] via P2P/IPC comm 0xc nRanks 4",
    )
    got = {c: (r["inferred"], r["nranks"], r["ranks_seen"]) for c, r in comms(t).items()}
    assert got == {"0x111": (False, 2, 1), "inferred-1": (True, 8, 1), "inferred-2": (True, 4, 1)}


def test_inferred_size_is_a_lower_bound_from_ring_orders() -> None:
    t = tables(A + "Channel 00/02 :    0   1   2   3   4   5   6   7", A + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC")
    assert comms(t)["inferred-1"]["nranks"] == 8


def test_user_annotations_after_a_line_are_ignored() -> None:
    t = tables(A + "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA  # <- the key line")
    assert t.nccl_links.select("detail", "gdrdma").rows() == [("IB", True)]


def test_redacted_host_is_a_host() -> None:
    t = tables("<cluster_name>:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read")
    assert t.nccl_comms["host"].to_list() == ["<cluster_name>"]


def test_text_and_json_say_inferred(cli: Callable[..., Result], tmp_path: Path) -> None:
    log = tmp_path / "excerpt.txt"
    log.write_text(f"{A}Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n{B}Channel 00/0 : 1[1] -> 0[0] via P2P/IPC\n")
    data = json.loads(cli("topology", str(log), "--format", "json").stdout)
    (comm,) = data["communicators"]
    assert comm["inferred"] is True and comm["tier"] == "nvlink_or_pcie" and comm["tier_source"] == "undecided"
    assert "does not say NVLink or PCIe" in comm["tier_reason"]
    assert data["parse_stats"]["inferred_links"] == 2 and data["parse_stats"]["inferred_comms"] == 1
    # the table's cell borders dropped: a cell's text wrapped over two rows reads as one phrase
    out = " ".join(cli("topology", str(log)).stdout.replace("│", " ").split())
    assert "≥2 ranks, 1 node(s)" in out and "inferred (no Init/commId" in out
    assert "2 connection line(s) without an Init/commId line grouped into 1 inferred communicator(s)" in out
    assert "Tier nvlink_or_pcie (undecided): P2P/IPC does not say NVLink or PCIe" in out


# -- P2P: NVLink or PCIe ---------------------------------------------------------------------------

LINK = A + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"


@pytest.mark.parametrize(
    ("evidence", "tier", "source", "reason"),
    [
        ((), "nvlink_or_pcie", "undecided", "P2P/CUMEM does not say NVLink or PCIe"),
        ((A + "NVLS multicast support is available on dev 0",), "nvlink", "nvls", "NVSwitch"),
        ((A + "NVLS multicast support is not available on dev 0",), "nvlink_or_pcie", "undecided", "no NVLS"),
        ((A + "Pattern 4, crossNic 0, nChannels 2, bw 10.000000/10.000000, type PHB/PIX, sameChannels 1",),
         "pcie", "graph", "path type PHB"),
        ((A + "Pattern 4, crossNic 0, nChannels 2, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1",),
         "nvlink", "graph", "path type NVL"),
        ((A + "=== System : maxBw 240.0 totalBw 240.0 ===", A + "+ NVL[240.0] - GPU/0-1000"),
         "nvlink", "topology", "NVL links"),
        ((A + "=== System : maxBw 24.0 totalBw 24.0 ===", A + "+ PCI[24.0] - GPU/0-1000 (0)",
          A + "+ PCI[24.0] - GPU/0-2000 (1)"), "pcie", "topology", "PCI links only"),
        (("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)",), "nvlink", "gpu_model", "A100-SXM4-80GB"),
        (("GPU 0: NVIDIA L40S (UUID: GPU-1)",), "pcie", "gpu_model", "PCIe card"),
        (("|   0  NVIDIA A100-SXM4-80GB     On  | 00000000:07:00.0 Off |",), "nvlink", "gpu_model", "SXM4-80GB is"),
        (("#  Rank  0 Group  0 Pid  100 on gpu1 device  0 [0x01] NVIDIA H100 PCIe",), "pcie", "gpu_model", "on gpu1"),
        (("GPU 0: NVIDIA RTX A6000 (UUID: GPU-1)",), "nvlink_or_pcie", "undecided", "GPU model"),  # optional bridge
    ],
)  # fmt: skip
def test_p2p_tier_from_log_evidence(evidence: tuple[str, ...], tier: str, source: str, reason: str) -> None:
    t = tables(*evidence, LINK)
    (row,) = t.nccl_links.select("tier", "tier_source", "tier_reason").rows()
    assert row[:2] == (tier, source) and reason in row[2]
    comm = comms(t)["inferred-1"]
    assert (comm["tier"], comm["tier_source"]) == (tier, source) and reason in str(comm["tier_reason"])


@pytest.mark.parametrize(
    ("model", "verdict"),
    [("NVIDIA H100 80GB HBM3", "nvlink"), ("NVIDIA H100 PCIe", "pcie"), ("NVIDIA H200", "nvlink"),
     ("NVIDIA B200", "nvlink"), ("NVIDIA H800", "nvlink"), ("NVIDIA H20", "nvlink"), ("Tesla V100-SXM2-32GB", "nvlink"),
     ("NVIDIA A100-PCIE-40GB", "pcie"), ("NVIDIA GeForce RTX 4090", "pcie"), ("NVIDIA L4", "pcie"),
     ("Tesla T4", "pcie"), ("NVIDIA A10G", "pcie"), ("NVIDIA RTX A6000", None), ("NVIDIA A40", None)],
)  # fmt: skip
def test_gpu_models(model: str, verdict: str | None) -> None:
    assert gpu_verdict(model) == verdict


def test_undecided_p2p_sits_between_pcie_and_nvlink() -> None:
    assert slowest([("nvlink", "graph"), ("nvlink_or_pcie", "undecided")]) == ("nvlink_or_pcie", "undecided")
    assert slowest([("pcie", "topology"), ("nvlink_or_pcie", "undecided")]) == ("pcie", "topology")
    assert slowest([("nvlink_or_pcie", "undecided"), ("ib", "transport")]) == ("ib", "transport")


def test_pcie_on_one_host_and_nvlink_on_another() -> None:
    t = tables(
        A + "Pattern 4, crossNic 0, nChannels 2, bw 10.0/10.0, type PHB/NET, sameChannels 1",
        C + "NVLS multicast support is available on dev 0",
        A + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        C + "Channel 00/0 : 2[0] -> 3[1] via P2P/IPC",
    )
    got = dict(t.nccl_links.select("host", "tier").rows())
    assert got == {"gpu1": "pcie", "gpu2": "nvlink"}


# -- host tiers without connection lines ------------------------------------------------------------


def hosts(t: NcclTables) -> dict[str, tuple[str, str, str, str]]:
    cols = ("intra_tier", "intra_source", "inter_tier", "inter_source")
    return {r["host"]: tuple(r[c] for c in cols) for r in t.nccl_hosts.to_dicts()}


def test_topology_dump_and_roce_nics_decide_host_tiers() -> None:
    t = tables(
        A + "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        A + "Using network IB",
        A + "=== System : maxBw 1.2 totalBw 264.0 ===",
        A + "+ PCI[24.0] - GPU/0-7000 (0)",
        A + "              + NVL[264.0] - NVS/0",
    )
    assert t.nccl_links.is_empty() and t.nccl_communicators.is_empty()
    assert hosts(t) == {"gpu1": ("nvlink", "topology", "roce", "network")}
    assert "mlx5_0, mlx5_1 link layer RoCE" in t.nccl_hosts["inter_reason"][0]


@pytest.mark.parametrize(
    ("lines", "inter"),
    [
        (("Using network Socket", "NET/Socket : Using [0]eth0:10.0.0.1<0>"), ("ethernet", "network")),
        (("NET/Socket : Using [0]lo:127.0.0.1<0>", "Using network Socket"), ("loopback", "network")),
        (("NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>",), ("ib", "network")),
        (("Using network IB",), ("ib", "assumed")),
        (("Using network AWS Libfabric",), ("roce", "network")),
        (("cudaDriverVersion 12040",), ("unknown", "none")),
    ],
)
def test_network_lines_decide_the_inter_host_tier(lines: tuple[str, ...], inter: tuple[str, str]) -> None:
    assert hosts(tables(*(A + line for line in lines)))["gpu1"][2:] == inter


def test_communicator_without_links_on_one_host_takes_the_host_tier() -> None:
    t = tables(
        A + "NVLS multicast support is available on dev 0",
        A + "comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x5 - Init COMPLETE",
        A + "comm 0xa rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
    )
    row = comms(t)["0x5"]
    assert (row["tier"], row["tier_source"], row["inferred"]) == ("nvlink", "nvls", False)


def test_nccl_hosts_table_columns() -> None:
    t = tables(A + "Using network Socket")
    assert t.nccl_hosts.columns == ["host", "intra_tier", "intra_source", "intra_reason", "inter_tier",
                                    "inter_source", "inter_reason"]
    assert t.nccl_hosts.schema["host"] == pl.String
