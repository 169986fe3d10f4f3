"""How long a collective takes on a link tier: latency per algorithm step plus bytes over bandwidth.

Per GPU and direction (DESIGN §1): NVLink 450 GB/s, PCIe 5 x16 64 GB/s, InfiniBand NDR 50 GB/s,
RoCE 25 GB/s, Ethernet (TCP sockets) 10 GB/s; latency 1 / 1 / 2 / 3 / 12 µs. A group runs at the
speed of the slowest link it crosses. Ring algorithms move ``factor × bytes`` (all-reduce 2(n-1)/n,
all-gather / reduce-scatter / all-to-all (n-1)/n, point-to-point 1) with 2(n-1) or (n-1) latency
steps; NCCL's tree all-reduce needs only 2·log2(n) steps, so small all-reduces take the tree. Only a
fraction of the peak is reached in practice (``EFFICIENCY``).
"""

from __future__ import annotations

import math

PEAK_GBPS = {"nvlink": 450.0, "pcie": 64.0, "ib": 50.0, "roce": 25.0, "ethernet": 10.0}
LATENCY_US = {"nvlink": 1.0, "pcie": 1.0, "ib": 2.0, "roce": 3.0, "ethernet": 12.0}
EFFICIENCY = 0.8
SLOW_LINK_FACTOR = 0.25  # a degraded NIC (--slow-link HOST): a quarter of its speed
NIC_MBPS = {"ib": 400_000, "roce": 200_000, "ethernet": 100_000}


def bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def algorithm(op: str, nbytes: int, n: int) -> str:
    """RING or TREE, as NCCL's tuner would roughly pick: trees for small all-reduces."""
    return "TREE" if op == "all_reduce" and nbytes < 256 * 1024 and n > 2 else "RING"


def duration_ns(op: str, nbytes: int, n: int, tier: str, slow: bool = False) -> int:
    """Time of one call on ``tier`` once every member has arrived."""
    if n <= 1:
        return 0
    gbps = PEAK_GBPS[tier] * EFFICIENCY * (SLOW_LINK_FACTOR if slow else 1.0)
    lat = LATENCY_US[tier]
    if algorithm(op, nbytes, n) == "TREE":
        steps = 2 * math.ceil(math.log2(n))
    elif op == "all_reduce":
        steps = 2 * (n - 1)
    elif op in ("send", "recv"):
        steps = 1
    else:
        steps = n - 1
    seconds = bus_factor(op, n) * nbytes / (gbps * 1e9) + steps * lat * 1e-6
    return max(1000, round(seconds * 1e9))  # at least a µs: a kernel launch is never free
