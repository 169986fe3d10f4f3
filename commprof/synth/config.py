"""What a synthetic run looks like: cluster, layout, model, network and the faults it carries.

Every option is validated here, so that bad input ends as one ``UsageError`` line (exit 2).
Rank placement follows Megatron's order (tp fastest, then cp, ep, dp, pp; ``order=`` changes it):
rank r runs on host ``r // gpus_per_node`` as GPU ``r % gpus_per_node`` — unless ``tp_across_nodes``
deals the ranks out round-robin over the hosts, the bad placement that puts TP on the network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from commprof.errors import UsageError

DIMS = ("tp", "cp", "ep", "dp", "pp")
MEGATRON_ORDER = DIMS
INTRA_TIERS = ("nvlink", "pcie")
NETWORKS = ("ib", "roce", "ethernet")
NCCL_FAULTS = ("gdr-off", "p2p-off", "nvls-off")
NCCL_MIN, NCCL_MAX = (2, 18, 1), (2, 30, 7)


def parse_version(text: str) -> tuple[int, int, int]:
    parts = text.strip().split(".")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--nccl-version: {text!r} is not a version like 2.21.5") from None
    if len(nums) == 2:
        nums.append({18: 1, 30: 7}.get(nums[1], 5))
    if len(nums) != 3:
        raise UsageError(f"--nccl-version: {text!r} is not a version like 2.21.5")
    version = (nums[0], nums[1], nums[2])
    if not NCCL_MIN <= version <= NCCL_MAX:
        raise UsageError(f"--nccl-version: {text} is outside the supported 2.18.1 - 2.30.7")
    return version


def parse_layout_text(text: str) -> tuple[dict[str, int], tuple[str, ...]]:
    """``tp=8,dp=2[,order=...]`` with the analyzer's own parser, so both read layouts alike."""
    from commprof.analyzers.classify import parse_layout

    layout = parse_layout(text)
    return dict(layout.sizes), tuple(layout.order)


@dataclass(frozen=True)
class SynthConfig:
    nodes: int = 2
    gpus_per_node: int = 8
    sizes: dict[str, int] = field(default_factory=lambda: {"tp": 8, "dp": 2})
    order: tuple[str, ...] = MEGATRON_ORDER
    steps: int = 4
    micro_batches: int = 4
    layers: int = 4  # transformer layers per pipeline stage
    model_size_b: float = 7.0  # parameters, in billions: sets hidden size, compute and message sizes
    tokens: int = 4096  # tokens per micro-batch (sequence x micro-batch size)
    gpu_tflops: float = 400.0  # achieved bf16 TFLOP/s per GPU
    intra: str = "nvlink"
    network: str = "ib"
    nccl_version: tuple[int, int, int] = (2, 21, 5)
    dp_overlap: bool = True
    dp_buckets: int = 4
    fsdp: bool = False  # FSDP-style: all-gather parameters per layer (prefetched one layer ahead)
    straggler: int | None = None
    straggler_us: float = 1000.0
    slow_link: str | None = None  # a host whose NIC runs at a quarter of its speed
    tp_across_nodes: bool = False
    socket_fallback: bool = False  # IB/RoCE NICs present, but NCCL runs over TCP sockets (NCCL_IB_DISABLE, no plugin)
    alltoall_imbalance: float = 1.0  # EP: the first member of each EP group gets this many times the mean tokens
    desync: int | None = None  # this rank calls all_gather where its TP (innermost) group calls all_reduce, last step
    nccl_faults: tuple[str, ...] = ()  # log-only set-up faults: gdr-off, p2p-off, nvls-off
    flight_recorder: bool = False  # write Flight Recorder dumps (raw/flight_recorder/rank-N.json)
    clock_offsets_us: tuple[float, ...] = ()
    jitter: float = 0.005  # compute kernels vary by up to ± this fraction, per rank and seed
    kernels_per_phase: int = 1  # split compute phases into this many back-to-back kernels
    epoch_ts: bool = True  # ts in epoch µs (new torch); False: small ts over baseTimeNanoseconds, exact to the ns
    mark_lead_us: float = 30.0  # ProfilerStep#N opens on the CPU this long before the step's GPU work
    group_names: str = "megatron"  # process group descriptions: megatron (*_GROUP) or mesh (mesh_tp)
    seed: int = 0
    gpu_name: str = "NVIDIA H100 80GB HBM3"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise UsageError("--nodes and --gpus-per-node must be at least 1")
        if self.world_size != self.nodes * self.gpus_per_node:
            detail = "×".join(f"{d}={s}" for d, s in self.sizes.items())
            raise UsageError(f"--layout: {detail} = {self.world_size} ranks, but --nodes {self.nodes} × "
                             f"--gpus-per-node {self.gpus_per_node} = {self.nodes * self.gpus_per_node}")
        for name, value in (("--steps", self.steps), ("--micro-batches", self.micro_batches),
                            ("--layers", self.layers), ("--dp-buckets", self.dp_buckets),
                            ("--kernels-per-phase", self.kernels_per_phase)):
            if value < 1:
                raise UsageError(f"{name} must be at least 1, not {value}")
        if self.model_size_b <= 0 or self.tokens < 1 or self.gpu_tflops <= 0:
            raise UsageError("--model-size, --tokens and --gpu-tflops must be positive")
        if not 0 <= self.jitter < 0.5:
            raise UsageError(f"--jitter must be in [0, 0.5), not {self.jitter}")
        if self.intra not in INTRA_TIERS:
            raise UsageError(f"--intra must be one of {', '.join(INTRA_TIERS)}, not {self.intra!r}")
        if self.network not in NETWORKS:
            raise UsageError(f"--network must be one of {', '.join(NETWORKS)}, not {self.network!r}")
        if self.straggler is not None and not 0 <= self.straggler < self.world_size:
            raise UsageError(f"--straggler: rank {self.straggler} is not in 0..{self.world_size - 1}")
        if self.straggler_us < 0:
            raise UsageError("--straggler: the delay must not be negative")
        if self.slow_link is not None and self.slow_link not in self.hosts:
            raise UsageError(f"--slow-link: {self.slow_link!r} is not a host of this run "
                             f"({self.hosts[0]} .. {self.hosts[-1]})")
        if self.clock_offsets_us and len(self.clock_offsets_us) not in (1, self.nodes):
            raise UsageError(f"--clock-offset-us: give one value (host h gets h × it) or {self.nodes} values")
        if self.group_names not in ("megatron", "mesh"):
            raise UsageError(f"--group-names must be megatron or mesh, not {self.group_names!r}")
        if self.tp_across_nodes and self.nodes < 2:
            raise UsageError("--tp-across-nodes needs at least 2 nodes")
        if self.socket_fallback and (self.network == "ethernet" or self.nodes < 2):
            raise UsageError("--socket-fallback needs --network ib or roce and at least 2 nodes")
        if self.alltoall_imbalance < 1:
            raise UsageError(f"--alltoall-imbalance must be at least 1 (balanced), not {self.alltoall_imbalance}")
        if self.alltoall_imbalance > 1 and self.size("ep") < 2:
            raise UsageError("--alltoall-imbalance needs an ep dimension of at least 2 in --layout")
        if self.alltoall_imbalance > self.size("ep") > 1:
            raise UsageError(f"--alltoall-imbalance: at most the EP size ({self.size('ep')}: "
                             "one rank gets every token)")
        if self.desync is not None and not 0 <= self.desync < self.world_size:
            raise UsageError(f"--desync: rank {self.desync} is not in 0..{self.world_size - 1}")
        if self.desync is not None and self.world_size < 2:
            raise UsageError("--desync needs at least 2 ranks")
        for fault in self.nccl_faults:
            if fault not in NCCL_FAULTS:
                raise UsageError(f"--nccl-fault: {fault!r} is not one of {', '.join(NCCL_FAULTS)}")

    # ----------------------------------------------------------------------------------- layout

    @property
    def world_size(self) -> int:
        return math.prod(self.sizes.values())

    def size(self, dim: str) -> int:
        return self.sizes.get(dim, 1)

    def coords(self, rank: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for dim in self.order:
            out[dim] = rank % self.size(dim)
            rank //= self.size(dim)
        return {d: out.get(d, 0) for d in DIMS}

    def rank_of(self, coords: dict[str, int]) -> int:
        rank, scale = 0, 1
        for dim in self.order:
            rank += coords.get(dim, 0) * scale
            scale *= self.size(dim)
        return rank

    def group(self, rank: int, dim: str) -> list[int]:
        """The ranks of ``rank``'s group along ``dim`` (itself included), in group-rank order."""
        c = self.coords(rank)
        return [self.rank_of({**c, dim: i}) for i in range(self.size(dim))]

    # -------------------------------------------------------------------------------- placement

    @cached_property
    def hosts(self) -> list[str]:
        return [f"gpu-node-{h:02d}" for h in range(self.nodes)]

    def host_index(self, rank: int) -> int:
        return rank % self.nodes if self.tp_across_nodes else rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        return rank // self.nodes if self.tp_across_nodes else rank % self.gpus_per_node

    def host(self, rank: int) -> str:
        return self.hosts[self.host_index(rank)]

    def pid(self, rank: int) -> int:
        return 41000 + 37 * self.host_index(rank) + self.local_rank(rank)

    def clock_offset_ns(self, host_index: int) -> int:
        if not self.clock_offsets_us:
            return 0
        if len(self.clock_offsets_us) == 1:
            return round(self.clock_offsets_us[0] * 1000 * host_index)
        return round(self.clock_offsets_us[host_index] * 1000)

    @property
    def net_used(self) -> str:
        """The network NCCL actually runs over: TCP sockets when it fell back, else the network."""
        return "ethernet" if self.socket_fallback else self.network

    @property
    def kernel_naming(self) -> str:
        """NCCL >= 2.19 names its kernels ncclDevKernel_*; older ones ncclKernel_*."""
        return "dev" if self.nccl_version >= (2, 19, 0) else "legacy"
