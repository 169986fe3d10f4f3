"""The plain records the NCCL log parser fills in, before they become polars tables.

Records are mutable dataclasses with ``slots`` because one communicator rank is seen in pieces (Init
START, the ``nNodes`` line, connection lines, Init COMPLETE, later COLL lines) and the parser must
update it in place while it streams through millions of lines.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Process:
    """One NCCL process (host, pid), or — when the log lost its ``host:pid:tid`` prefix — one
    (file, foreign tag) stand-in, so that lines of different processes do not share context."""

    key: tuple[str, ...]
    index: int
    host: str | None
    pid: int | None
    file: str
    version: str | None = None
    git_version: str | None = None
    net_name: str | None = None  # from "Using network X"
    nvls_available: bool | None = None
    pasted: bool = False  # its lines came from a paste (no host: the facts of "an unknown host")
    topo_printed: bool = False  # an ncclTopoPrint dump was seen
    topo_nvlink: bool = False  # ... and it had an NVL link
    topo_gpus: int = 0
    graph_intra: set[str] = field(default_factory=set)  # GRAPH "Pattern ..., type INTRA/INTER" of any comm
    graph_inter: set[str] = field(default_factory=set)
    rank_bound: int = 0  # highest rank + 1 that ring orders / timings of unknown comms named
    # NIC lists per net family ("ib", "socket", other names lower-cased), index -> Nic
    nics: dict[str, dict[int, Nic]] = field(default_factory=dict)
    comm_by_ptr: dict[str, CommRank] = field(default_factory=dict, repr=False)
    comms: list[CommRank] = field(default_factory=list, repr=False)
    current: CommRank | None = field(default=None, repr=False)
    current_by_tid: dict[int, CommRank] = field(default_factory=dict, repr=False)
    last_coll_by_tid: dict[int, str] = field(default_factory=dict, repr=False)
    # Init lines seen before their communicator is known (2.18.1 prints no Init START): they wait
    # here for the next communicator this process creates.
    pending: list[Pending] = field(default_factory=list, repr=False)


@dataclass(slots=True, eq=False)
class CommRank:
    """One rank of one communicator, as one process logged it. ``comm_id`` is shared by all ranks
    of a communicator; ``ptr`` is only meaningful inside its process."""

    index: int
    process: Process = field(repr=False)
    ptr: str
    rank: int
    nranks: int
    file: str
    line_no: int
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    comm_id: str | None = None  # as logged ("0x..."), or derived for splits at the end
    comm_id_source: str = "log"  # log | split | unresolved
    init_func: str | None = None
    parent_ptr: str | None = None
    parent: CommRank | None = field(default=None, repr=False)
    split_count: int | None = None
    color: int | None = None
    key: int | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    local_rank: int | None = None
    mnnvl: int | None = None
    init_complete: bool = False
    destroyed: bool = False
    init_total_s: float | None = None
    coll_channels: int | None = None
    nvls_channels: int | None = None
    p2p_channels: int | None = None
    collnet_channels: int | None = None
    ring_channels: int | None = None  # second number of "Channel 00/NN : r r r"
    ring_orders: dict[int, list[int]] = field(default_factory=dict)
    graph_types: list[tuple[int, str, str]] = field(default_factory=list)  # (pattern, intra, inter)
    nvls: bool = False
    ring_pxn: int | None = None
    ring_gdr: int | None = None
    touch: int = 0
    coll_touched: bool = False  # a COLL line named it: later connection lines may be lazy connects
    inferred: bool = False  # built from connection lines that no Init/commId line placed (see infer)


@dataclass(slots=True)
class Nic:
    """A network device one process said it uses (``NET/IB : Using [0]mlx5_0:1/IB ...``)."""

    net: str  # IB / Socket / plugin name as logged
    index: int
    name: str
    port: int | None = None
    link_layer: str | None = None  # IB | RoCE | ETH (sockets)
    address: str | None = None
    speed_mbps: int | None = None
    gdr: bool | None = None


@dataclass(slots=True, eq=False)
class Link:
    """One connection line: a channel of one communicator from one rank to another."""

    comm: CommRank | None = field(repr=False)
    process: Process = field(repr=False)
    file: str
    line_no: int
    channel: int
    conn_index: int | None
    from_rank: int
    to_rank: int | None
    from_dev: str | None
    to_dev: str | None
    direction: str  # send | receive
    transport: str  # p2p | shm | net | collnet | nvls
    detail: str  # IPC / CUMEM / direct pointer / MNNVL / indirect / direct/direct / IB / Socket ...
    nic_dev: int | None = None
    proxy_rank: int | None = None  # NET: PXN proxy rank; P2P/indirect: the intermediate rank
    gdrdma: bool = False
    gdr_pci: bool = False
    read: bool = False
    ce: bool = False
    shared: bool = False
    dev: int = -1  # cudaDev of the logging thread (line prefix), -1 when the prefix was lost
    ptr_hint: str | None = None  # " comm 0x.. nRanks N" that some builds append to the line
    nranks_hint: int | None = None


@dataclass(slots=True)
class Pending:
    """An init-time line waiting for its communicator: a connection (``link`` with the rank that
    printed it and the highest rank it names) or a per-communicator fact (``kind``, ``value``)."""

    kind: str  # link | pattern | ring | channels | timings
    link: Link | None = None
    me: int = -1
    top: int = 0
    value: tuple[int | str | float | None, ...] = ()
    ranks: list[int] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Tuning:
    """One TUNING line: the algorithm and protocol NCCL chose for one call size."""

    comm: CommRank | None = field(repr=False)
    op: str | None
    nbytes: int
    algo: str
    proto: str
    time_us: float | None = None
    channels_lo: int | None = None
    channels_hi: int | None = None


@dataclass(slots=True)
class Warn:
    host: str | None
    pid: int | None
    file: str
    line_no: int
    message: str


@dataclass(slots=True)
class ParseStats:
    """What happened to every message: parsed by family, or skipped by kind. A physical line that
    held several messages (interleaved output) is counted once in ``lines_total`` and once per
    message in ``messages_total``; every message lands in exactly one bucket."""

    files: int = 0
    lines_total: int = 0
    messages_total: int = 0
    interleaved_lines: int = 0
    unattributed_links: int = 0
    inferred_links: int = 0  # connection lines placed in inferred communicators
    inferred_comms: int = 0
    parsed: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_files: list[str] = field(default_factory=list)
    # logs pasted without their "host:pid:tid [dev] NCCL INFO" prefixes: read, but hosts and ranks unknown
    pasted_files: list[str] = field(default_factory=list)

    def merge(self, other: ParseStats) -> None:
        self.files += other.files
        self.lines_total += other.lines_total
        self.messages_total += other.messages_total
        self.interleaved_lines += other.interleaved_lines
        self.unattributed_links += other.unattributed_links
        self.inferred_links += other.inferred_links
        self.inferred_comms += other.inferred_comms
        self.parsed.update(other.parsed)
        self.skipped.update(other.skipped)
        self.skipped_files.extend(other.skipped_files)
        self.pasted_files.extend(other.pasted_files)
