"""Line families of NCCL 2.18 - 2.30, one literal line per variant in the reference, plus the
prefix, interleaving and attribution rules the parser relies on."""

from __future__ import annotations

import pytest

from commprof.ingest.nccl_logs import build_tables, network_type, parse_nccl_text, slowest
from commprof.ingest.nccl_logs.parser import NcclLogs

P = "node01:1234:1234 [0] NCCL INFO "
Q = "node01:1235:1235 [1] NCCL INFO "


def parse(*lines: str) -> NcclLogs:
    return parse_nccl_text("\n".join(lines))


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # 2.18.1: no nvmlDev, no START
        (P + "comm 0x55d1 rank 0 nranks 8 cudaDev 0 busId 7000 commId 0xabc - Init COMPLETE",
         {"nvml_dev": None, "init_func": None, "init_complete": True}),
        # 2.18.3 - 2.20
        (P + "comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 commId 0xabc - Init START",
         {"nvml_dev": 0, "init_complete": False}),
        # 2.21 - 2.22
        (P + "ncclCommInitRank comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 commId 0xabc - Init START",
         {"init_func": "ncclCommInitRank"}),
        (P + "ncclCommSplit comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 parent 0x55aa color 3 key 0 "
         "commId 0xabc - Init COMPLETE", {"init_func": "ncclCommSplit", "color": 3, "key": 0, "parent_ptr": "0x55aa"}),
        # 2.23+ funcName, 2.24-2.28 splitCount without commId (note "key %d- Init START")
        (P + "ncclCommInitRankScalable comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 commId 0xabc "
         "- Init START", {"init_func": "ncclCommInitRankScalable"}),
        (P + "ncclCommSplit comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 parent 0x55aa splitCount 2 "
         "color 1 key 0- Init START", {"split_count": 2, "color": 1}),
        # 2.29+: [Rank N] prefix and childCount
        (P + "[Rank 0] ncclCommSplit comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 parent 0x55aa "
         "childCount 4 color 0 key 0- Init START", {"split_count": 4, "color": 0}),
    ],
)  # fmt: skip
def test_init_line_variants(line: str, want: dict[str, object]) -> None:
    logs = parse(line)
    assert logs.stats.parsed["init"] == 1
    rec = logs.comms[0]
    assert (rec.ptr, rec.rank, rec.nranks, rec.cuda_dev, rec.bus_id) == ("0x55d1", 0, 8, 0, "7000")
    for key, value in want.items():
        assert getattr(rec, key) == value, key


def test_split_ids_chain_through_parents_and_nil_pointers() -> None:
    logs = parse(
        P + "ncclCommInitRank comm 0x10 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 commId 0xfeed - Init COMPLETE",
        P + "ncclCommSplit comm 0x20 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 parent 0x10 splitCount 1 color 5 "
        "key 0 - Init COMPLETE",
        P + "ncclCommSplit comm 0x30 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 7000 parent 0x20 splitCount 1 color 0 "
        "key 0 - Init COMPLETE",
        P + "ncclCommSplit comm 0x40 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 7000 parent 0x99 splitCount 1 color 0 "
        "key 0 - Init COMPLETE",
    )
    ids = [c.comm_id for c in logs.comms]
    assert ids[:3] == ["0xfeed", "0xfeed/s1c5", "0xfeed/s1c5/s1c0"]
    assert ids[3] is not None and ids[3].startswith("unresolved:node01:1234:0x40")


def test_comm_nodes_line_and_destroy() -> None:
    logs = parse(
        P + "comm 0x55d1 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
        P + "comm 0x55d1 rank 3 nranks 16 cudaDev 3 busId 7000 commId 0x1 - Destroy COMPLETE",
    )
    rec = logs.comms[0]
    assert (rec.nnodes, rec.local_ranks, rec.local_rank, rec.mnnvl, rec.destroyed) == (2, 8, 3, 0, True)


START = P + "comm 0x55d1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 7000 commId 0xabc - Init START"


@pytest.mark.parametrize(
    ("conn", "want"),
    [
        ("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", ("p2p", "IPC", {})),
        ("Channel 01/1 : 0[0] -> 1[1] via P2P/CUMEM/read", ("p2p", "CUMEM", {"read": True, "conn_index": 1})),
        ("Channel 02/0 : 0[0] -> 1[1] via P2P/direct pointer/read", ("p2p", "direct pointer", {"read": True})),
        ("Channel 00/0 : 0[0] -> 3[3] via P2P/MNNVL/CE", ("p2p", "MNNVL", {"ce": True})),
        ("Channel 00/0 : 0[0] -> 2[2] via P2P/indirect/1[1]", ("p2p", "indirect", {"proxy_rank": 1})),
        ("Channel 00/0 : 0[7000] -> 1[b000] via P2P/IPC/read", ("p2p", "IPC", {"from_dev": "7000", "to_dev": "b000"})),
        ("Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", ("shm", "direct/direct", {"conn_index": None})),
        ("Channel 00 : 0[0] -> 1[1] via SHM/direct", ("shm", "direct", {})),
        ("Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/1/GDRDMA", ("net", "IB", {"nic_dev": 1, "gdrdma": True})),
        ("Channel 00/0 : 3[0] -> 0[0] [receive] via NET/IB/0/GDRDMA(PCI)/Shared",
         ("net", "IB", {"direction": "receive", "gdr_pci": True, "shared": True})),
        ("Channel 01/0 : 0[0] -> 2[0] [send] via NET/IBext_v8/3(1)/GDRDMA/Shared",
         ("net", "IBext_v8", {"proxy_rank": 1, "nic_dev": 3})),
        ("Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/0", ("net", "Socket", {"gdrdma": False})),
        ("Channel 00/0 : 0[0] -> 2[0] [send] via NET/AWS Libfabric/2/GDRDMA", ("net", "AWS Libfabric", {"nic_dev": 2})),
    ],
)  # fmt: skip
def test_connection_variants(conn: str, want: tuple[str, str, dict[str, object]]) -> None:
    logs = parse(START, P + conn)
    assert logs.stats.parsed["connection"] == 1, logs.stats
    link = logs.links[0]
    assert (link.transport, link.detail) == want[:2]
    for key, value in want[2].items():
        assert getattr(link, key) == value, key
    assert link.comm is not None and link.comm.comm_id == "0xabc"


def test_collnet_line() -> None:
    logs = parse(START, P + "CollNet 00/0 : 0 [send] via COLLNET/IBext_v8/0/GDRDMA")
    link = logs.links[0]
    got = (link.transport, link.detail, link.nic_dev, link.gdrdma, link.to_rank)
    assert got == ("collnet", "IBext_v8", 0, True, None)


@pytest.mark.parametrize(
    "cut",
    [
        "Channel 00/0 : 0[0] -> 1[1] via P2P/CU",
        "Channel 00/0 : 0[0] -> 1[1] via NET/I",
        "Channel 00/0 : 0[0] -> 1[",
        "Channel 00/0 : 0[0] -> 1[1] via SHM/dir",
        "ncclCommInitRank comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev",
        "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 1024 dat",
        "1048576 Bytes -> Algo",
    ],
)
def test_cut_lines_are_malformed_not_errors(cut: str) -> None:
    logs = parse(START, P + cut)
    assert logs.stats.skipped["malformed"] == 1
    assert logs.colls.height == 0 and not logs.links


def test_tuning_variants_map_indices_to_names() -> None:
    logs = parse(
        START,
        P + "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 256 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] "
        "stream 0x9",
        P + "1024 Bytes -> Algo 1 proto 2 time 12.500000",  # 2.20-2.22: no op name
        P + "AllGather: 4096 Bytes -> Algo 4 proto 0 time 3.000000",  # 2.23
        P + "ReduceScatter: 8192 Bytes -> Algo PAT proto LL128 channel{Lo..Hi}={0..3}",  # 2.24+
    )
    got = [(t.op, t.nbytes, t.algo, t.proto, t.time_us, t.channels_hi) for t in logs.tuning]
    assert got == [
        ("AllReduce", 1024, "Ring", "Simple", 12.5, None),
        ("AllGather", 4096, "NVLS", "LL", 3.0, None),
        ("ReduceScatter", 8192, "PAT", "LL128", None, 3),
    ]
    assert all(t.comm is not None and t.comm.comm_id == "0xabc" for t in logs.tuning)


def test_repeated_tuning_message_takes_each_lines_context() -> None:
    """TUNING parses are cached by message; the op an op-less line borrows from the thread's last
    COLL line must still be read per line."""
    coll = "{}: opCount 0 sendbuff 0x1 recvbuff 0x2 count 256 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] stream 0x9"
    same = P + "1024 Bytes -> Algo 1 proto 2 time 12.500000"
    logs = parse(START, P + coll.format("AllReduce"), same, P + coll.format("Broadcast"), same, same)
    assert [t.op for t in logs.tuning] == ["AllReduce", "Broadcast", "Broadcast"]
    assert len({id(t) for t in logs.tuning}) == 3


def test_coll_line_fields() -> None:
    logs = parse(
        START,
        P + "ReduceScatter: opCount 1f sendbuff 0x7f00 recvbuff (nil) count 1000 datatype 9 op 4 root 0 comm 0x55d1 "
        "[nranks=4] stream 0x5600",
        P + "Send: opCount 20 sendbuff 0x7f00 recvbuff (nil) count 10 datatype 11 op 0 root 3 comm 0x55d1 [nranks=4] "
        "stream 0x5600",
    )
    rows = build_tables(logs).nccl_colls.to_dicts()
    assert [(r["op"], r["op_count"], r["bytes"], r["datatype"], r["redop"], r["root"]) for r in rows] == [
        ("ReduceScatter", 31, 2000, "bfloat16", "avg", 0),
        ("Send", 32, 10, "float8e5m2", "sum", 3),
    ]
    assert {(r["comm_id"], r["rank"], r["host"], r["pid"]) for r in rows} == {("0xabc", 0, "node01", 1234)}


@pytest.mark.parametrize(
    ("line", "host", "pid"),
    [
        ("[1,0]<stdout>:node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("[0] node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("(RayTrainWorker pid=42, ip=10.0.0.7) node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("(RayTrainWorker pid=42, ip=10.0.0.7) NCCL INFO ", "10.0.0.7", 42),
        ("10.3.35.83: node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("1721588729123 | 2025-07-21T19:05:29.123Z | node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("[2025-07-21 19:05:29] node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("pdshhost: NCCL INFO ", "pdshhost", None),
        ("[rank3]:node07:42:43 [2] NCCL INFO ", "node07", 42),
        ("[rank3]:NCCL INFO ", None, None),
        ("NCCL INFO ", None, None),
    ],
)
def test_foreign_prefixes(line: str, host: str | None, pid: int | None) -> None:
    logs = parse(line + "comm 0x55d1 rank 0 nranks 4 cudaDev 2 nvmlDev 2 busId 7000 commId 0xabc - Init START")
    proc = logs.comms[0].process
    assert (proc.host, proc.pid) == (host, pid)


def test_stripped_prefixes_keep_processes_apart_by_their_tags() -> None:
    """torchrun's "[rankN]:" (or mpirun's tags) stand in for the lost host:pid:tid, so two ranks'
    init lines in one file do not share context."""
    logs = parse(
        "[rank0]:NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 commId 0x1 - Init START",
        "[rank1]:NCCL INFO comm 0xa rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 9000 commId 0x1 - Init START",
        "[rank0]:NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        "[rank1]:NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM",
    )
    assert len(logs.processes) == 2 and [c.rank for c in logs.comms] == [0, 1]
    assert [(link.comm.rank if link.comm else None) for link in logs.links] == [0, 1]


def test_version_lines() -> None:
    logs = parse(
        "NCCL version 2.19.3+cuda12.3",
        P + "comm 0x55d1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 7000 commId 0xabc - Init START",
        Q + "NCCL version 2.29.1+cuda13.0",
        Q + "NCCL git version master 1a2b3c4",
    )
    by_pid = {p.pid: p for p in logs.processes}
    assert by_pid[1234].version == "2.19.3+cuda12.3"  # the bare line of the file
    assert (by_pid[1235].version, by_pid[1235].git_version) == ("2.29.1+cuda13.0", "master 1a2b3c4")


def test_warn_lines_old_and_new() -> None:
    logs = parse(
        "node01:1234:1240 [0] transport/net_ib.cc:1234 NCCL WARN NET/IB : Got completion with error 12",
        "[2025-07-21 19:05:29] node01:1234:1240 [0] misc/socket.cc:50 (ncclSocketConnect) NCCL WARN Connect failed",
    )
    assert [(w.host, w.pid) for w in logs.warns] == [("node01", 1234), ("node01", 1234)]
    assert logs.warns[1].message == "Connect failed"


def test_interleaved_line_is_split_at_known_host() -> None:
    logs = parse(
        START,
        Q + "comm 0x66d1 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 9000 commId 0xabc - Init START",
        P + "Channel 00/0 : 0[0] -> 1[1] via P2" + Q + "Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM",
    )
    assert logs.stats.interleaved_lines == 1 and logs.stats.lines_total == 3 and logs.stats.messages_total == 4
    assert logs.stats.skipped["malformed"] == 1
    (link,) = logs.links
    assert (link.from_rank, link.process.host, link.process.pid) == (1, "node01", 1235)


COLL = (
    "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm {ptr} [nranks={n}] stream 0x9"
)


def test_lazy_connect_lines_follow_the_coll_line_not_the_last_init() -> None:
    """2.22+: connections of comm A print after A's first COLL, even though comm B was initialised since."""
    logs = parse(
        P + "ncclCommInitRank comm 0xa rank 1 nranks 4 cudaDev 0 nvmlDev 0 busId 7000 commId 0xaaa - Init COMPLETE",
        P + "ncclCommInitRank comm 0xb rank 1 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 commId 0xbbb - Init START",
        P + "ncclCommInitRank comm 0xb rank 1 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 commId 0xbbb - Init COMPLETE",
        P + COLL.format(ptr="0xa", n=4),
        P + "Channel 00/0 : 1[0] -> 2[1] via P2P/CUMEM/read",
        P + COLL.format(ptr="0xb", n=8),
        P + "Channel 00/0 : 1[0] -> 6[1] via P2P/CUMEM/read",
    )
    assert [link.comm.comm_id if link.comm else None for link in logs.links] == ["0xaaa", "0xbbb"]


def test_2_18_1_connections_before_init_complete_wait_for_their_comm() -> None:
    logs = parse(
        P + "Pattern 4, crossNic 0, nChannels 2, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1",
        P + "Channel 00/02 :   0   1",
        P + "Channel 00/0 : 0[7000] -> 1[b000] via P2P/IPC",
        P + "comm 0x55d1 rank 0 nranks 2 cudaDev 0 busId 7000 commId 0xabc - Init COMPLETE",
        P + "Pattern 4, crossNic 0, nChannels 2, bw 20.000000/20.000000, type PIX/PIX, sameChannels 1",
        P + "Channel 00/0 : 0[7000] -> 1[b000] via P2P/IPC",
        P + "comm 0x66d1 rank 0 nranks 2 cudaDev 0 busId 7000 commId 0xdef - Init COMPLETE",
    )
    first, second = logs.comms
    assert [link.comm.comm_id if link.comm else None for link in logs.links] == ["0xabc", "0xdef"]
    assert first.ring_orders == {0: [0, 1]} and first.graph_types == [(4, "NVL", "PIX")]
    assert second.graph_types == [(4, "PIX", "PIX")]
    tiers = build_tables(logs).nccl_communicators.select("comm_id", "tier").rows()
    assert sorted(tiers) == [("0xabc", "nvlink"), ("0xdef", "pcie")]


def test_ring_order_truncated_and_wide() -> None:
    ranks = " ".join(f"{r:3d}" for r in range(31))
    logs = parse(START.replace("nranks 4", "nranks 128"), P + f"Channel 03/24 : {ranks[:110]}...")
    rec = logs.comms[0]
    assert rec.ring_channels == 24 and rec.ring_orders[3][:3] == [0, 1, 2]


def test_nic_lines() -> None:
    logs = parse(
        P + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [2]mlx5_bond_0:1/RoCE/SHARP [RO]; OOB ib0:10.0.0.1<0>",
        P + "NET/IB: [1] mlx5_1:uverbs1:1/RoCE provider=Mlx5 speed=200000(Mbps) context=0x1 pciPath=/sys/x ar=1",
        P + "NET/IB : GPU Direct RDMA Disabled for GPU 7000 / HCA 0 (distance 5 > 3)",
        Q + "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>",
        Q + "Found network interface eth1 with speed 100000 Mbps",
        Q + "Using network Socket",
    )
    nics = {(n["name"], n["link_layer"], n["speed_mbps"], n["gdr"]) for n in build_tables(logs).nccl_nics.to_dicts()}
    assert nics == {
        ("mlx5_0", "IB", None, False), ("mlx5_1", "RoCE", 200000, None), ("mlx5_bond_0", "RoCE", None, None),
        ("eth0", "ETH", None, None), ("eth1", "ETH", 100000, None),
    }  # fmt: skip


def test_topology_print_marks_pcie_hosts() -> None:
    logs = parse(
        START,
        P + "=== System : maxBw 24.0 totalBw 24.0 ===",
        P + "CPU/0-0 (1/1/2)",
        P + "+ PCI[24.0] - GPU/0-7000 (0)",
        P + "+ PCI[24.0] - GPU/0-9000 (1)",
        P + "==========================================",
        P + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    )
    (row,) = build_tables(logs).nccl_links.select("tier", "tier_source").rows()
    assert row == ("pcie", "topology")


@pytest.mark.parametrize(
    ("name", "layer", "net"),
    [("IB", "IB", "ib"), ("IB", "RoCE", "roce"), ("IBext_v8", None, "ib"), ("Socket", None, "socket"),
     ("AWS Libfabric", None, "efa"), ("GPUDirectTCPX", None, "tcpx"), ("Mystery", None, "mystery"),
     (None, None, "unknown")],
)  # fmt: skip
def test_network_type(name: str | None, layer: str | None, net: str) -> None:
    assert network_type(name, layer) == net


def test_slowest_tier_order() -> None:
    assert slowest([("nvlink", "transport"), ("ib", "assumed"), ("roce", "transport")]) == ("roce", "transport")
    assert slowest([("nvlink", "graph"), ("nvlink", "transport")]) == ("nvlink", "transport")
    assert slowest([("pcie", "assumed"), ("shm", "transport")]) == ("shm", "transport")
    assert slowest([("ethernet", "transport"), ("loopback", "transport")]) == ("ethernet", "transport")
    assert slowest([]) == ("unknown", "none")


def test_communicator_without_links_falls_back_to_network_or_single_rank() -> None:
    logs = parse(
        P + "Using network IB",
        P + "comm 0xa rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 commId 0xaaa - Init COMPLETE",
        P + "comm 0xa rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0",
        P + "comm 0xb rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 7000 commId 0xbbb - Init COMPLETE",
    )
    rows = {r["comm_id"]: r for r in build_tables(logs).nccl_communicators.to_dicts()}
    assert (rows["0xaaa"]["tier"], rows["0xaaa"]["tier_source"], rows["0xaaa"]["nnodes"]) == ("ib", "network", 2)
    assert (rows["0xbbb"]["tier"], rows["0xbbb"]["tier_source"]) == ("loopback", "single_rank")
