"""Every NCCL line format we read (2.18 - 2.30), compiled once at import.

The regexes run only after a cheap substring test has picked the family (see ``parser``), so they
can afford optional groups for every version's variant instead of one regex per version. Formats
are quoted from ``shared/reference/nccl-log-formats.md``; each regex names the versions it covers.
"""

from __future__ import annotations

import re
from functools import lru_cache

HEX = r"0x[0-9a-fA-F]+|\(nil\)"
# Numbers are bounded where they are read: ranks, devices, channels and ids take at most 9 digits (they
# land in int32 columns), counts and bytes 18 (int64). A line with a longer number does not match its
# family and is counted as malformed, never read as a wrapped or overflowing value.

# host:pid:tid [cudaDev] — host is truncated at the first '.', so no dots; foreign prefixes in front
# (mpirun "[1,0]<stdout>:", pdsh "10.3.35.83: ", Ray "(RayTrainWorker pid=..)") cannot match it.
# A redacted host ("<cluster_name>:919:1150 [0]", as people paste logs) counts as a host too.
NCCL_PREFIX = re.compile(r"(<[^\s<>]+>|[^\s:\[\]<>()|,]+):(\d{1,9}):(\d{1,9})\s+\[(\d{1,9})\]")
# Ray's "(RayTrainWorker pid=N, ip=A)"; vLLM's worker tags "(VllmWorker rank=1 pid=N)", "(Worker pid=N)",
# "(Worker_TP1 pid=N)": the pid of the process whose output follows.
RAY_PREFIX = re.compile(r"\((\w+)(?: rank=\d{1,9})? pid=(\d{1,9})(?:, ip=([0-9A-Za-z.:_-]+))?\)")
# A log collector's "<date> <time> <host> >> " before NCCL's prefix printed with an empty host name
# (":pid:tid [dev]"): the host is the collector's.
ARROW_PREFIX = re.compile(r"([^\s:\[\]<>()|,]+) >> :(\d{1,9}):(\d{1,9})\s+\[(\d{1,9})\]")
MPI_PREFIX = re.compile(r"\[(\d{1,9}),(\d{1,9})\]<(?:stdout|stderr)>:")
MPI_RANK_PREFIX = re.compile(r"^\s*\[(\d{1,9})\]")
TORCHRUN_PREFIX = re.compile(r"\[(?:rank|default)(\d{1,9})\]:")  # torchrun --tee / log_line_prefix
PDSH_PREFIX = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.-]*):\s")
# Start of a second message glued onto a cut line.
MESSAGE_START = re.compile(r"(?:[^\s:\[\]<>()|,]+:\d{1,9}:\d{1,9}\s+\[\d{1,9}\]\s+(?:[\d.]+\s+\S+\s+)?)?"
                           r"NCCL (?:INFO|WARN) ")

# "NCCL version 2.19.3+cuda12.3" (bare, <=2.21 rank 0) / INFO form (>=2.22); "NCCL git version b h".
VERSION = re.compile(r"NCCL version (\d{1,9}\.\d{1,9}\.\d{1,9}[^\s]*)")
GIT_VERSION = re.compile(r"NCCL git version (\S+)(?: (\S+))?")

# Init START/COMPLETE in all forms (2.18.1 no nvmlDev; 2.21+ funcName; splits with parent/color/key,
# splitCount 2.24-2.28 / childCount 2.29+ and no commId; 2.29+ "[Rank N] "); Destroy/Abort COMPLETE.
INIT = re.compile(
    r"(?:\[Rank (?P<prank>\d{1,9})\] )?(?:(?P<func>nccl\w+) )?comm (?P<ptr>" + HEX + r") rank (?P<rank>-?\d{1,9}) "
    r"nranks (?P<nranks>-?\d{1,9}) cudaDev (?P<cuda>-?\d{1,9})(?: nvmlDev (?P<nvml>-?\d{1,9}))? "
    r"busId (?P<bus>[0-9a-fA-F]+)"
    r"(?: parent (?P<parent>" + HEX + r"))?(?: (?:splitCount|childCount) (?P<split>-?\d{1,9}))?"
    r"(?: color (?P<color>-?\d{1,9}) key (?P<key>-?\d{1,9}))?\s*(?:commId (?P<commid>0x[0-9a-fA-F]+)\s*)?"
    r"-\s*(?P<what>Init|Destroy|Abort) (?P<state>START|COMPLETE)"
)
# 2.20+: comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d
COMM_NODES = re.compile(
    r"comm (?P<ptr>" + HEX + r") rank (?P<rank>\d{1,9}) nRanks (?P<nranks>\d{1,9}) nNodes (?P<nnodes>\d{1,9}) "
    r"localRanks (?P<lranks>\d{1,9}) localRank (?P<lrank>\d{1,9})(?: MNNVL (?P<mnnvl>\d{1,9}))?"
)
INIT_TIMINGS = re.compile(r"Init timings(?: - \w+)?: rank (\d{1,9}) nranks (\d{1,9}) total ([\d.]+)")
CHANNEL_COUNTS = re.compile(
    r"(\d{1,9}) coll channels, (?:(\d{1,9}) collnet channels, )?(\d{1,9}) nvls channels, (\d{1,9}) p2p channels"
)
CONNECTED_RINGS = re.compile(r"Connected all rings(?:, use ring PXN (\d{1,9}) GDR (\d{1,9}))?")

# Connections (some builds append " comm %p nRanks %d"; a "  # note" a user added is dropped).
# P2P/SHM: sender side only; NET: both sides with [send]/[receive] (receive prints
# peer -> me). 2.18.1 brackets hold busId hex; later nvmlDev. The old "Channel %02d :" had no connIndex.
CONNECTION = re.compile(
    r"Channel (?P<ch>\d{1,9})(?:/(?P<conn>\d{1,9}))? : (?P<src>\d{1,9})\[(?P<sdev>[0-9a-fA-F]+)\] -> "
    r"(?P<dst>\d{1,9})\[(?P<ddev>[0-9a-fA-F]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)"
    r"(?: comm (?P<ptr>" + HEX + r") nRanks (?P<nranks>\d{1,9}))?(?:\s+#.*)?\s*$"
)
NET_VIA = re.compile(r"NET/(?P<name>.+?)/(?P<dev>\d{1,9})(?:\((?P<proxy>\d{1,9})\))?"
                     r"(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared)*)$")
P2P_INDIRECT = re.compile(r"indirect/(\d{1,9})\[([0-9a-fA-F]+)\]")
COLLNET = re.compile(
    r"CollNet (?P<ch>\d{1,9})(?:/(?P<conn>\d{1,9}))? : (?P<rank>\d{1,9}) \[(?P<dir>send|receive)\] via "
    r"COLLNET/(?P<name>.+?)/(?P<dev>\d{1,9})(?P<flags>(?:/GDRDMA|/Shared)*)"
)

# Rings and trees.
RING_ORDER = re.compile(r"^Channel (\d{1,9})/(\d{1,9}) :((?:\s+\d{1,9})*)(\s*\.\.\.)?\s*$")
RING_NEIGHBORS = re.compile(r"Ring (\d{1,9}) : (-?\d{1,9}) -> (\d{1,9}) -> (-?\d{1,9})")
TREE = re.compile(r"Tree (\d{1,9}) : (-?\d{1,9}) -> (\d{1,9}) -> (-?\d{1,9})/(-?\d{1,9})/(-?\d{1,9})")
PATTERN = re.compile(
    r"Pattern (\d{1,9}), crossNic (\d{1,9}), nChannels (\d{1,9}), (?:bw|speed) ([\d.]+)/([\d.]+), "
    r"type (\w+)/(\w+), sameChannels (\d{1,9})"
)

# nccl-tests' rank table: "#  Rank  1 Group  0 Pid  1234 on  node02 device  0 [0x07] NVIDIA ...".
NCCL_TESTS_HOST = re.compile(r"\bon\s+([^\s.]+)\S*\s+device\s+\d{1,9}")

# Network devices.
NET_USING = re.compile(r"NET/(?P<net>[^:\s]+(?: [^:\s]+)?)\s*: Using (?P<devs>.*)$")
IB_DEV = re.compile(r"\[(\d{1,9})\]([^\s:\[\]]+):(\d{1,9})/(IB|RoCE|ETH|Ethernet)")
SOCKET_DEV = re.compile(r"\[(\d{1,9})\]([^\s:\[\]<]+):([^\s<]+)<\d{1,9}>")
NIC_DETAIL = re.compile(
    r"NET/(?P<net>\S+): \[(?P<idx>\d{1,9})\] (?P<name>[^:\s]+):[^:\s]*:(?P<port>\d{1,9})/(?P<ll>\w+) "
    r"provider=\S+ speed=(?P<speed>\d{1,18})\(Mbps\)"
)
FOUND_IFACE = re.compile(r"Found network interface (\S+) with speed (\d{1,18}) Mbps")
USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for (?:GPU [0-9a-fA-F]+ / )?HCA (\d{1,9})")

# NVLS.
NVLS_SUPPORT = re.compile(r"NVLS multicast support is (not )?available on dev (\d{1,9})")
NVLS_COMM = re.compile(r"NVLS comm (" + HEX + r") headRank (-?\d{1,9}) nHeads (\d{1,9})")

# COLL (2.18..HEAD): "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d
# comm %p [nranks=%d] stream %p". The parser splits on spaces first; this is the fallback.
COLL = re.compile(
    r"(?P<op>\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count (?P<count>\d{1,18}) "
    r"datatype (?P<dtype>\d{1,9}) op (?P<redop>\d{1,9}) root (?P<root>-?\d{1,9}) comm (?P<ptr>" + HEX + r")"
    r"(?: \[nranks=(?P<nranks>\d{1,9})\])?(?: stream (?P<stream>\S+))?"
)

# TUNING: 2.20-2.22 numeric, 2.23 adds op name, 2.24+ named algo/proto and channel range.
TUNING = re.compile(
    r"(?:(?P<op>\w+): )?(?P<bytes>\d{1,18}) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: time (?P<time>[\d.]+))?(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d{1,9})\.\.(?P<hi>\d{1,9})\})?"
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


# op (None when the line names none), bytes, algo, proto, time_us, channels lo, hi
TuningFields = tuple[str | None, int, str, str, float | None, int | None, int | None]


@lru_cache(maxsize=4096)
def tuning_fields(msg: str) -> TuningFields | None:
    """A TUNING message parsed; cached, since a log with TUNING on repeats the same few
    messages (one per call size) for every collective."""
    m = TUNING.search(msg)
    if m is None:
        return None
    time_us = float(m["time"]) if m["time"] else None
    lo, hi = m["lo"], m["hi"]
    channels = (int(lo) if lo is not None else None, int(hi) if hi is not None else None)
    return (m["op"], int(m["bytes"]), algo_name(m["algo"]), proto_name(m["proto"]), time_us, *channels)


# Messages as they read once their "host:pid:tid [dev] NCCL INFO " prefix is gone (a log pasted into an issue,
# a chat, a notebook): enough of them, and no more lines with the prefix, make a file a paste (``scan.is_paste``).
# The version line is not one of them: NCCL itself prints it bare (before 2.22, and with NCCL_DEBUG=VERSION).
BARE_MESSAGE = re.compile(
    r"^(?:Channel \d+/\d+ :|Ring \d+ :|Trees \[|Tree \d+ :|comm 0x[0-9a-fA-F]+ rank \d+ nRanks \d+"
    r"|(?:\[Rank \d+\] )?nccl\w+ comm 0x|comm 0x[0-9a-fA-F]+ rank \d+ nranks \d+ cudaDev"
    r"|NET/\S+ ?: |Using network \S|Connected all (?:rings|trees)|Connected NVLS|\d+ coll channels,"
    r"|Pattern \d+, crossNic|NVLS multicast support is|NVLS comm 0x|Bootstrap ?: Using|cudaDriverVersion \d"
    r"|Setting affinity for GPU \d|P2P Chunksize set|NCCL_\w+ set by environment|Init timings"
    r"|\w+: opCount [0-9a-fA-F]+ sendbuff|(?:\w+: )?\d+ Bytes -> Algo|=== System : )")
# NCCL messages no family reads (a paste's other lines are its reader's foreign text, not NCCL's).
PASTED_OTHER = re.compile(
    r"^(?:Bootstrap|cudaDriverVersion|Setting affinity|P2P Chunksize|NCCL_\w+ set|threadThresholds|Using "
    r"|NVLS|Trees|Tree |Ring |Channel |comm 0x|CC |Allocated |MNNVL|Assigned |Successfully|Init |Initialized "
    r"|ncclCommInit|ncclCommSplit|Comm config|Plugin|NET/|P2P |Check P2P|Connected |PROFILER|TUNER|RAS |"
    r"Loaded |Failed to |No plugin|Could not|Symmetric|Bootstrap|New proxy|Launch mode|Enabled |NCCL |\d+ coll)")
