"""Every NCCL line format we read (2.18 - 2.30), compiled once at import.

The regexes run only after a cheap substring test has picked the family (see ``parser``), so they
can afford optional groups for every version's variant instead of one regex per version. Formats
are quoted from ``shared/reference/nccl-log-formats.md``; each regex names the versions it covers.
"""

from __future__ import annotations

import re

HEX = r"0x[0-9a-fA-F]+|\(nil\)"

# host:pid:tid [cudaDev] — host is truncated at the first '.', so no dots; foreign prefixes in front
# (mpirun "[1,0]<stdout>:", pdsh "10.3.35.83: ", Ray "(RayTrainWorker pid=..)") cannot match it.
# A redacted host ("<cluster_name>:919:1150 [0]", as people paste logs) counts as a host too.
NCCL_PREFIX = re.compile(r"(<[^\s<>]+>|[^\s:\[\]<>()|,]+):(\d+):(\d+)\s+\[(\d+)\]")
RAY_PREFIX = re.compile(r"\((\w+) pid=(\d+)(?:, ip=([0-9A-Za-z.:_-]+))?\)")
MPI_PREFIX = re.compile(r"\[(\d+),(\d+)\]<(?:stdout|stderr)>:")
MPI_RANK_PREFIX = re.compile(r"^\s*\[(\d+)\]")
TORCHRUN_PREFIX = re.compile(r"\[(?:rank|default)(\d+)\]:")  # torchrun --tee / log_line_prefix
PDSH_PREFIX = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.-]*):\s")
# Start of a second message glued onto a cut line.
MESSAGE_START = re.compile(r"(?:[^\s:\[\]<>()|,]+:\d+:\d+\s+\[\d+\]\s+(?:[\d.]+\s+\S+\s+)?)?NCCL (?:INFO|WARN) ")

# "NCCL version 2.19.3+cuda12.3" (bare, <=2.21 rank 0) / INFO form (>=2.22); "NCCL git version b h".
VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+[^\s]*)")
GIT_VERSION = re.compile(r"NCCL git version (\S+)(?: (\S+))?")

# Init START/COMPLETE in all forms (2.18.1 no nvmlDev; 2.21+ funcName; splits with parent/color/key,
# splitCount 2.24-2.28 / childCount 2.29+ and no commId; 2.29+ "[Rank N] "); Destroy/Abort COMPLETE.
INIT = re.compile(
    r"(?:\[Rank (?P<prank>\d+)\] )?(?:(?P<func>nccl\w+) )?comm (?P<ptr>" + HEX + r") rank (?P<rank>-?\d+) "
    r"nranks (?P<nranks>-?\d+) cudaDev (?P<cuda>-?\d+)(?: nvmlDev (?P<nvml>-?\d+))? "
    r"busId (?P<bus>[0-9a-fA-F]+)"
    r"(?: parent (?P<parent>" + HEX + r"))?(?: (?:splitCount|childCount) (?P<split>-?\d+))?"
    r"(?: color (?P<color>-?\d+) key (?P<key>-?\d+))?\s*(?:commId (?P<commid>0x[0-9a-fA-F]+)\s*)?"
    r"-\s*(?P<what>Init|Destroy|Abort) (?P<state>START|COMPLETE)"
)
# 2.20+: comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d
COMM_NODES = re.compile(
    r"comm (?P<ptr>" + HEX + r") rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
    r"localRanks (?P<lranks>\d+) localRank (?P<lrank>\d+)(?: MNNVL (?P<mnnvl>\d+))?"
)
INIT_TIMINGS = re.compile(r"Init timings(?: - \w+)?: rank (\d+) nranks (\d+) total ([\d.]+)")
CHANNEL_COUNTS = re.compile(
    r"(\d+) coll channels, (?:(\d+) collnet channels, )?(\d+) nvls channels, (\d+) p2p channels"
)
CONNECTED_RINGS = re.compile(r"Connected all rings(?:, use ring PXN (\d+) GDR (\d+))?")

# Connections (some builds append " comm %p nRanks %d"; a "  # note" a user added is dropped).
# P2P/SHM: sender side only; NET: both sides with [send]/[receive] (receive prints
# peer -> me). 2.18.1 brackets hold busId hex; later nvmlDev. The old "Channel %02d :" had no connIndex.
CONNECTION = re.compile(
    r"Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<sdev>[0-9a-fA-F]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fA-F]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)"
    r"(?: comm (?P<ptr>" + HEX + r") nRanks (?P<nranks>\d+))?(?:\s+#.*)?\s*$"
)
NET_VIA = re.compile(r"NET/(?P<name>.+?)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared)*)$")
P2P_INDIRECT = re.compile(r"indirect/(\d+)\[([0-9a-fA-F]+)\]")
COLLNET = re.compile(
    r"CollNet (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<rank>\d+) \[(?P<dir>send|receive)\] via "
    r"COLLNET/(?P<name>.+?)/(?P<dev>\d+)(?P<flags>(?:/GDRDMA|/Shared)*)"
)

# Rings and trees.
RING_ORDER = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)*)(\s*\.\.\.)?\s*$")
RING_NEIGHBORS = re.compile(r"Ring (\d+) : (-?\d+) -> (\d+) -> (-?\d+)")
TREE = re.compile(r"Tree (\d+) : (-?\d+) -> (\d+) -> (-?\d+)/(-?\d+)/(-?\d+)")
PATTERN = re.compile(
    r"Pattern (\d+), crossNic (\d+), nChannels (\d+), (?:bw|speed) ([\d.]+)/([\d.]+), "
    r"type (\w+)/(\w+), sameChannels (\d+)"
)

# nccl-tests' rank table: "#  Rank  1 Group  0 Pid  1234 on  node02 device  0 [0x07] NVIDIA ...".
NCCL_TESTS_HOST = re.compile(r"\bon\s+([^\s.]+)\S*\s+device\s+\d+")

# Network devices.
NET_USING = re.compile(r"NET/(?P<net>[^:\s]+(?: [^:\s]+)?)\s*: Using (?P<devs>.*)$")
IB_DEV = re.compile(r"\[(\d+)\]([^\s:\[\]]+):(\d+)/(IB|RoCE|ETH|Ethernet)")
SOCKET_DEV = re.compile(r"\[(\d+)\]([^\s:\[\]<]+):([^\s<]+)<\d+>")
NIC_DETAIL = re.compile(
    r"NET/(?P<net>\S+): \[(?P<idx>\d+)\] (?P<name>[^:\s]+):[^:\s]*:(?P<port>\d+)/(?P<ll>\w+) "
    r"provider=\S+ speed=(?P<speed>\d+)\(Mbps\)"
)
FOUND_IFACE = re.compile(r"Found network interface (\S+) with speed (\d+) Mbps")
USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for (?:GPU [0-9a-fA-F]+ / )?HCA (\d+)")

# NVLS.
NVLS_SUPPORT = re.compile(r"NVLS multicast support is (not )?available on dev (\d+)")
NVLS_COMM = re.compile(r"NVLS comm (" + HEX + r") headRank (-?\d+) nHeads (\d+)")

# COLL (2.18..HEAD): "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d
# comm %p [nranks=%d] stream %p". The parser splits on spaces first; this is the fallback.
COLL = re.compile(
    r"(?P<op>\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count (?P<count>\d+) "
    r"datatype (?P<dtype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) comm (?P<ptr>" + HEX + r")"
    r"(?: \[nranks=(?P<nranks>\d+)\])?(?: stream (?P<stream>\S+))?"
)

# TUNING: 2.20-2.22 numeric, 2.23 adds op name, 2.24+ named algo/proto and channel range.
TUNING = re.compile(
    r"(?:(?P<op>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: time (?P<time>[\d.]+))?(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?"
)

# ncclTopoPrint: "+ NVL[240.0] - GPU/0-7000" link lines.
TOPO_LINK = re.compile(r"^\s*\+ (\w+)\[([\d.]+)\] - (\w+)/")

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
DATATYPES = (
    ("int8", 1),
    ("uint8", 1),
    ("int32", 4),
    ("uint32", 4),
    ("int64", 8),
    ("uint64", 8),
    ("float16", 2),
    ("float32", 4),
    ("float64", 8),
    ("bfloat16", 2),
    ("float8e4m3", 1),
    ("float8e5m2", 1),
)
REDOPS = ("sum", "prod", "max", "min", "avg")

# GRAPH path types: which intra-node ones mean NVLink, which mean PCIe (SYS: through the CPU).
NVLINK_PATHS = frozenset({"NVL", "NVB", "C2C"})
PCIE_PATHS = frozenset({"PIX", "PXB", "P2C", "PHB", "SYS"})


def algo_name(value: str) -> str:
    """TUNING printed indices before 2.24 and names since; normalise to names."""
    if value.isdigit():
        idx = int(value)
        return ALGORITHMS[idx] if idx < len(ALGORITHMS) else f"algo{idx}"
    return value


def proto_name(value: str) -> str:
    if value.isdigit():
        idx = int(value)
        return PROTOCOLS[idx] if idx < len(PROTOCOLS) else f"proto{idx}"
    return value
