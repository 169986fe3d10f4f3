"""``NCCL_DEBUG=INFO`` logs (subsystems INIT,GRAPH,ENV,NET, as ``commprof record`` sets them), one file
per process, in the line formats of the chosen NCCL version (shared/reference/nccl-log-formats.md).

Every process group gets its own communicator (``ncclCommInitRankConfig``, as torch creates them);
each member logs init, graph search, rings, trees and the ring connections it makes: P2P (CUMEM from
2.19, IPC before) between GPUs of one host, NET/IB or NET/Socket to the next host. NCCL >= 2.22
connects lazily at the first collective unless ``NCCL_RUNTIME_CONNECT=0``; the synthetic jobs set it
(the manifest says so), so connections are logged during init, inside the communicator's own
START..COMPLETE block, in every version. Hosts with NVLink log NVLS support.
"""

from __future__ import annotations

from commprof.synth.config import SynthConfig
from commprof.synth.groups import Group
from commprof.synth.network import NIC_MBPS, SLOW_LINK_FACTOR

CHANNELS = 2
NICS = 4


def vstr(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


class LogWriter:
    def __init__(self, cfg: SynthConfig, groups: list[Group]) -> None:
        self.cfg, self.groups, self.v = cfg, groups, cfg.nccl_version
        self.lines: dict[int, list[str]] = {r: [] for r in range(cfg.world_size)}

    def at_least(self, *v: int) -> bool:
        return self.v >= v

    def emit(self, rank: int, msg: str) -> None:
        c = self.cfg
        self.lines[rank].append(f"{c.host(rank)}:{c.pid(rank)}:{c.pid(rank)} [{c.local_rank(rank)}] NCCL INFO {msg}")

    def bus(self, rank: int) -> int:
        return 0x1000 * (self.cfg.local_rank(rank) * 2 + 0x18)

    def dev(self, rank: int) -> str:
        return f"{self.bus(rank):x}" if self.v <= (2, 18, 1) else str(self.cfg.local_rank(rank))

    def comm_ptr(self, g: Group, rank: int) -> str:
        return f"0x{0x5600_0000_0000 + int(g.name) * 0x100000 + rank * 0x2000:x}"

    def comm_id(self, g: Group) -> str:
        return f"0x{(0x9E3779B97F4A7C15 * (int(g.name) + 1) + self.cfg.seed) & 0xFFFF_FFFF_FFFF_FFFF:x}"

    # ------------------------------------------------------------------------------ process start

    def process_start(self, rank: int) -> None:
        c = self.cfg
        if self.at_least(2, 22, 0):
            self.emit(rank, f"NCCL version {vstr(self.v)}+cuda12.4")
        elif rank == 0:
            self.lines[rank].append(f"NCCL version {vstr(self.v)}+cuda12.4")
        if self.at_least(2, 29, 0):
            self.emit(rank, "NCCL git version v2.29 4d6e9f1")
        boot = "Bootstrap: Using" if self.at_least(2, 24, 0) else "Bootstrap : Using"
        h = c.host_index(rank)
        self.emit(rank, f"{boot} eth0:10.0.{h}.1<0>")
        self.emit(rank, "cudaDriverVersion 12040")
        self.emit(rank, "NCCL_SOCKET_IFNAME set by environment to eth0")
        if c.net_used == "ethernet":
            if c.socket_fallback:  # NCCL_IB_DISABLE=1 (or a missing plugin): the IB NICs go unused
                self.emit(rank, "NCCL_IB_DISABLE set by environment to 1.")
            self.emit(rank, f"NET/Socket : Using [0]eth0:10.0.{h}.1<0>")
            if self.at_least(2, 30, 0):
                self.emit(rank, f"Found network interface eth0 with speed {self.nic_mbps(rank)} Mbps")
            self.emit(rank, "Using network Socket")
            return
        layer = "IB" if c.network == "ib" else "RoCE"
        devs = " ".join(f"[{i}]mlx5_{i}:1/{layer}" for i in range(NICS))
        self.emit(rank, f"NET/IB : Using {devs} [RO]; OOB eth0:10.0.{h}.1<0>")
        if self.at_least(2, 27, 0):
            for i in range(NICS):
                self.emit(rank, f"NET/IB: [{i}] mlx5_{i}:uverbs{i}:1/{layer} provider=Mlx5 "
                                f"speed={self.nic_mbps(rank)}(Mbps) context=0x7f12a0{i:04x} "
                                f"pciPath=/sys/devices/pci0000:00/0000:00:0{i}.0 ar=0")
        state = "Disabled" if "gdr-off" in c.nccl_faults else "Enabled"
        for i in range(NICS):
            self.emit(rank, f"NET/IB : GPU Direct RDMA {state} for HCA {i} 'mlx5_{i}'")
        self.emit(rank, "Using network IB")

    def nic_mbps(self, rank: int) -> int:
        speed = NIC_MBPS[self.cfg.net_used]
        return int(speed * SLOW_LINK_FACTOR) if self.cfg.host(rank) == self.cfg.slow_link else speed

    # -------------------------------------------------------------------------------- communicator

    def init_line(self, g: Group, i: int, state: str) -> str:
        r = g.ranks[i]
        base = f"comm {self.comm_ptr(g, r)} rank {i} nranks {g.size} cudaDev {self.cfg.local_rank(r)}"
        if self.v <= (2, 18, 1):
            return f"{base} busId {self.bus(r):x} commId {self.comm_id(g)} - Init {state}"
        base += f" nvmlDev {self.cfg.local_rank(r)} busId {self.bus(r):x} commId {self.comm_id(g)} - Init {state}"
        if self.v < (2, 21, 0):
            return base
        line = f"ncclCommInitRankConfig {base}"
        return f"[Rank {i}] {line}" if state == "START" and self.at_least(2, 29, 0) else line

    def init_comm(self, g: Group) -> None:
        n = g.size
        host_of = self.cfg.host
        on_host: dict[str, list[int]] = {}  # the members of each host, in group order (one pass, not n x n)
        for x in g.ranks:
            on_host.setdefault(host_of(x), []).append(x)
        for i, r in enumerate(g.ranks):
            if self.v > (2, 18, 1):
                self.emit(r, self.init_line(g, i, "START"))
            local = on_host[host_of(r)]
            if self.at_least(2, 20, 0):
                self.emit(r, f"comm {self.comm_ptr(g, r)} rank {i} nRanks {n} nNodes {len(g.hosts)} "
                             f"localRanks {len(local)} localRank {local.index(r)} MNNVL 0")
            self.emit(r, f"Setting affinity for GPU {self.cfg.local_rank(r)} to ffff,ffffffff")
            nvls = self.cfg.intra == "nvlink" and len(local) > 2 and self.at_least(2, 20, 0)
            if nvls and "nvls-off" in self.cfg.nccl_faults:  # NVSwitch multicast unusable (fabric manager, driver)
                nvls = False
                self.emit(r, f"NVLS multicast support is not available on dev {self.cfg.local_rank(r)}")
            if nvls:
                extra = " (NVLS_NCHANNELS 16)" if (2, 27, 0) <= self.v < (2, 30, 0) else ""
                self.emit(r, f"NVLS multicast support is available on dev {self.cfg.local_rank(r)}{extra}")
            self.graph(g, i, len(local))
            if i == 0:
                self.ring_order(g)
            self.connect(g, i)
            collnet = "0 collnet channels, " if self.at_least(2, 20, 0) else ""
            self.emit(r, f"{CHANNELS * 2} coll channels, {collnet}{16 if nvls else 0} nvls channels, "
                         "32 p2p channels, 32 p2p channels per peer")
            if nvls:
                mem = " memSize 2097152" if self.v < (2, 22, 0) else ""
                self.emit(r, f"NVLS comm {self.comm_ptr(g, r)} headRank {local.index(r)} nHeads {len(local)} "
                             f"buffSize 4194304{mem} nvlsPerRankSize 201326592 nvlsTotalSize {201326592 * n}")
            self.done(g, i, nvls)

    def graph(self, g: Group, i: int, local: int) -> None:
        r = g.ranks[i]
        intra = "LOC" if local < 2 else "NVL" if self.cfg.intra == "nvlink" else "PXB"
        inter = "PIX" if len(g.hosts) > 1 else "LOC"
        if g.size > 1:
            for pattern in (4, 3):
                self.emit(r, f"Pattern {pattern}, crossNic 0, nChannels {CHANNELS}, bw 20.000000/20.000000, "
                             f"type {intra}/{inter}, sameChannels 1")
        n = g.size
        for c in range(CHANNELS):
            self.emit(r, f"Ring {c:02d} : {(i - 1) % n} -> {i} -> {(i + 1) % n}")
        up = -1 if i == 0 else (i - 1) // 2
        kids = [k for k in (2 * i + 1, 2 * i + 2) if k < n]
        down = "/".join(str(k) for k in [*kids, -1, -1, -1][:3])
        self.emit(r, "Trees " + " ".join(f"[{c}] {down}->{i}->{up}" for c in range(CHANNELS)))

    def ring_order(self, g: Group) -> None:
        n = g.size
        width = 3 if self.v < (2, 23, 0) else len(str(n - 1))
        shown = range(min(n, 20)) if self.v < (2, 23, 0) else range(n)
        for c in range(CHANNELS * 2):
            line = f"Channel {c:02d}/{CHANNELS * 2:02d} :" + "".join(f" {x:{width}d}" for x in shown)
            self.emit(g.ranks[0], line[:125] + "..." if len(line) > 128 else line)

    def connect(self, g: Group, i: int) -> None:
        """Ring connections of comm rank i: the send to the next rank, the receive from the previous one
        when it lives on another host (NET lines are printed on both sides)."""
        n = g.size
        if n == 1:
            return
        nxt, prv = (i + 1) % n, (i - 1) % n
        for c in range(CHANNELS):
            self.conn(g, c, i, nxt, g.ranks[i], "send")
            if self.cfg.host(g.ranks[prv]) != self.cfg.host(g.ranks[i]):
                self.conn(g, c, prv, i, g.ranks[i], "receive")

    def conn(self, g: Group, c: int, a: int, b: int, me: int, side: str) -> None:
        ga, gb = g.ranks[a], g.ranks[b]
        head = f"Channel {c:02d}/0 : {a}[{self.dev(ga)}] -> {b}[{self.dev(gb)}]"
        if self.cfg.host(ga) == self.cfg.host(gb):
            if "p2p-off" in self.cfg.nccl_faults:  # NCCL_P2P_DISABLE=1: GPUs of a host talk through host memory
                self.emit(me, f"{head} via SHM/direct/direct")
                return
            kind = "CUMEM" if self.at_least(2, 19, 0) else "IPC"
            self.emit(me, f"{head} via P2P/{kind}/read")
            return
        nic = self.cfg.local_rank(me) % NICS
        if self.cfg.net_used == "ethernet":
            self.emit(me, f"{head} [{side}] via NET/Socket/0/Shared")
            return
        flags = "" if "gdr-off" in self.cfg.nccl_faults else "/GDRDMA(PCI)" if self.at_least(2, 26, 0) else "/GDRDMA"
        self.emit(me, f"{head} [{side}] via NET/IB/{nic}{flags}/Shared")

    def done(self, g: Group, i: int, nvls: bool) -> None:
        r, n = g.ranks[i], g.size
        if self.at_least(2, 24, 0):
            self.emit(r, f"Connected all rings, use ring PXN 0 GDR {0 if 'gdr-off' in self.cfg.nccl_faults else 1}")
        else:
            self.emit(r, "Connected all rings")
        self.emit(r, "Connected all trees")
        if nvls:
            self.emit(r, "Connected NVLS tree")
        self.emit(r, "threadThresholds 8/8/64 | 64/8/64 | 512 | 512")
        parts = "allgathers 0.02, topo 0.20, graphs 0.01, connections 0.15"
        if self.at_least(2, 23, 0):
            self.emit(r, f"Init timings - ncclCommInitRankConfig: rank {i} nranks {n} total 0.84 (kernels 0.12, "
                         f"alloc 0.01, bootstrap 0.30, {parts}, rest 0.03)")
        elif self.at_least(2, 22, 0):
            self.emit(r, f"Init timings: rank {i} nranks {n} total 0.84 (kernels 0.12, bootstrap 0.30, "
                         f"{parts}, rest 0.04)")
        self.emit(r, self.init_line(g, i, "COMPLETE"))

    # -------------------------------------------------------------------------------------- output

    def files(self) -> dict[str, str]:
        """``nccl.<host>.<pid>.log`` -> text, as NCCL_DEBUG_FILE=nccl.%h.%p writes them."""
        for r in range(self.cfg.world_size):
            self.process_start(r)
        for g in self.groups:
            self.init_comm(g)
        return {f"nccl.{self.cfg.host(r)}.{self.cfg.pid(r)}.log": "\n".join(lines) + "\n"
                for r, lines in self.lines.items()}
