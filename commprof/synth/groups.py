"""The process groups of a synthetic run: names, descriptions, members, dimension and link tier."""

from __future__ import annotations

from dataclasses import dataclass

from commprof.synth.config import DIMS, SynthConfig

MEGATRON_DESC = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "cp": "CONTEXT_PARALLEL_GROUP",
                 "ep": "EXPERT_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP",
                 "pp": "PIPELINE_MODEL_PARALLEL_GROUP"}
STREAM = {"tp": 21, "cp": 22, "ep": 23, "dp": 24, "pp": 25, "world": 20}


@dataclass(frozen=True)
class Group:
    name: str  # torch's group_name: "0" is the default group
    desc: str
    dim: str  # tp | cp | ep | dp | pp | world
    ranks: tuple[int, ...]  # global ranks in group-rank order
    tier: str
    hosts: tuple[str, ...]
    slow: bool  # crosses the --slow-link host's NIC

    @property
    def size(self) -> int:
        return len(self.ranks)


def group_tier(cfg: SynthConfig, ranks: tuple[int, ...]) -> tuple[str, tuple[str, ...], bool]:
    """The slowest link the group crosses: inside one host the intra-node tier, else the network."""
    hosts = tuple(sorted({cfg.host(r) for r in ranks}))
    if len(hosts) == 1:
        return cfg.intra, hosts, False
    return cfg.net_used, hosts, cfg.slow_link in hosts


def build_groups(cfg: SynthConfig) -> list[Group]:
    """Every group of the run, in creation order (the default group first, then per dimension)."""
    world = tuple(range(cfg.world_size))
    tier, hosts, slow = group_tier(cfg, world)
    out = [Group("0", "default_pg", "world", world, tier, hosts, slow)]
    for dim in DIMS:
        if cfg.size(dim) < 2:
            continue
        covered: set[int] = set()  # a rank's group once: the groups' sizes in all, not ranks x group size
        for rank in range(cfg.world_size):
            if rank in covered:
                continue
            members = tuple(cfg.group(rank, dim))
            covered.update(members)
            desc = MEGATRON_DESC[dim] if cfg.group_names == "megatron" else f"mesh_{dim}"
            tier, hosts, slow = group_tier(cfg, members)
            out.append(Group(str(len(out)), desc, dim, members, tier, hosts, slow))
    return out


class GroupIndex:
    """Look-ups: the group of a rank along a dimension."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self._by: dict[tuple[int, str], Group] = {}
        for g in groups:
            for r in g.ranks:
                self._by[(r, g.dim)] = g

    def of(self, rank: int, dim: str) -> Group | None:
        return self._by.get((rank, dim))

