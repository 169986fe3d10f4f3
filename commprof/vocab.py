"""One vocabulary for every layer: the names of dimensions, tiers, ops and severities, and the words
for "not known". Tables, analyzers, reports, check rules and the dashboard all spell them from here."""

from __future__ import annotations

UNKNOWN = "unknown"

# Parallel dimensions, Megatron's order first (tp fastest), then the catch-alls.
MEGATRON_ORDER = ("tp", "cp", "ep", "dp", "pp")
DIMENSIONS = (*MEGATRON_ORDER, "world", UNKNOWN)

# Link tiers, fastest first; SLOWNESS ranks them for "the slowest link a group crosses". "spine": between racks,
# through the spine switches (a switch topology says the group's hosts hang on different leaf switches), whatever
# the network: the oversubscribed level above the racks' own links.
TIERS = ("nvlink", "pcie", "shm", "ib", "roce", "ethernet", "spine", "loopback", UNKNOWN)
SLOWNESS = {"spine": -1, "ethernet": 0, "loopback": 1, "roce": 2, "ib": 3, "shm": 4, "pcie": 5, "nvlink": 6}
NETWORKS = ("ib", "roce", "ethernet")  # tiers between nodes, as --network takes them

# Op names (the collectives table's ``op``) and how NCCL's own logs spell them.
P2P_OPS = frozenset({"send", "recv", "send_recv"})
NCCL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
            "Broadcast": "broadcast", "Reduce": "reduce", "Send": "send", "Recv": "recv",
            "AlltoAll": "all_to_all", "Gather": "gather", "Scatter": "scatter"}

SEVERITIES = ("info", "low", "medium", "high", "critical")
