"""Parser state shared by the line handlers: processes, communicator ranks, and which
communicator a context-free line (a connection, a ring, a TUNING choice) belongs to.

Connection lines name ranks but not their communicator. NCCL prints them from the thread that
initialises a communicator (between Init START and COMPLETE), or — since 2.22's lazy connect, and
for send/recv peers in every version — from the thread that issues the first collective on it,
right after that call's COLL line. So each (process, thread) remembers the last communicator it
touched (Init line, COLL line, ``comm %p`` line), and a line goes to that communicator when its
rank fits and it is still initialising or was just used by a COLL line; otherwise to the most
recently touched such communicator of the process where this rank and peer fit. 2.18.1 prints no
Init START, so its init lines come before any line naming the communicator: they wait in the
process's ``pending`` list for the next communicator it creates. Lines that fit nothing are kept,
unattributed, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from commprof.ingest.nccl_logs import patterns as pt
from commprof.ingest.nccl_logs.records import CommRank, Link, ParseStats, Pending, Process, Tuning, Warn


@dataclass(slots=True)
class Head:
    """What a line's prefix says about who printed it. ``tid`` and ``dev`` are -1 when unknown."""

    process: Process
    tid: int
    dev: int = -1


class State:
    def __init__(self) -> None:
        self.processes: dict[tuple[str, ...], Process] = {}
        self.comms: list[CommRank] = []
        self.comms_by_rank: dict[int, dict[int, list[CommRank]]] = {}  # id(process) -> rank -> recs
        self.ptr_index: dict[str, list[CommRank]] = {}
        self.links: list[Link] = []
        self.tuning: list[Tuning] = []
        self.warns: list[Warn] = []
        self.bare_versions: dict[str, str] = {}  # file -> version printed without prefix
        self.known_hosts: set[str] = set()
        self.gpu_models: dict[str | None, set[str]] = {}  # host (None: not said) -> GPU names seen
        self.stats = ParseStats()
        self.seq = 0  # position of the line being parsed, across files (set by the parser)

    # -- processes ---------------------------------------------------------------------------------

    def head(self, head: str, file: str) -> Head:
        """Parse a line prefix (uncached; the parser caches per file)."""
        m = pt.NCCL_PREFIX.search(head)
        if m is not None:
            host, pid = m.group(1), int(m.group(2))
            self.known_hosts.add(host)
            return Head(self.process(("pid", host, str(pid)), host, pid, file), int(m.group(3)), int(m.group(4)))
        arrow = pt.ARROW_PREFIX.search(head)
        if arrow is not None:
            host, pid = arrow.group(1), int(arrow.group(2))
            self.known_hosts.add(host)
            return Head(self.process(("pid", host, str(pid)), host, pid, file), int(arrow.group(3)),
                        int(arrow.group(4)))
        ray = pt.RAY_PREFIX.search(head)
        if ray is not None:
            host = ray.group(3)
            return Head(self.process(("pid", host or "", ray.group(2)), host, int(ray.group(2)), file), -1)
        mpi = pt.MPI_PREFIX.search(head)
        if mpi is not None:
            tag = f"mpi[{mpi.group(1)},{mpi.group(2)}]"
            return Head(self.process(("file", file, tag), None, None, file), -1)
        torchrun = pt.TORCHRUN_PREFIX.search(head)
        if torchrun is not None:
            return Head(self.process(("file", file, f"rank{torchrun.group(1)}"), None, None, file), -1)
        pdsh = pt.PDSH_PREFIX.match(head)
        if pdsh is not None and not pdsh.group(1).isdigit():
            host = pdsh.group(1)
            return Head(self.process(("file", file, "pdsh:" + host), host, None, file), -1)
        rank_tag = pt.MPI_RANK_PREFIX.search(head)
        tag = f"[{rank_tag.group(1)}]" if rank_tag is not None else ""
        return Head(self.process(("file", file, tag), None, None, file), -1)

    def process(self, key: tuple[str, ...], host: str | None, pid: int | None, file: str) -> Process:
        proc = self.processes.get(key)
        if proc is None:
            proc = Process(key=key, index=len(self.processes), host=host, pid=pid, file=file)
            self.processes[key] = proc
            self.comms_by_rank[id(proc)] = {}
        return proc

    # -- communicators -----------------------------------------------------------------------------

    def new_comm(self, proc: Process, ptr: str, rank: int, nranks: int, file: str, line_no: int) -> CommRank:
        rec = CommRank(
            index=len(self.comms), process=proc, ptr=ptr, rank=rank, nranks=nranks, file=file, line_no=line_no
        )
        self.comms.append(rec)
        proc.comms.append(rec)
        proc.comm_by_ptr[ptr] = rec
        self.comms_by_rank[id(proc)].setdefault(rank, []).append(rec)
        self.ptr_index.setdefault(ptr, []).append(rec)
        if proc.pending:
            self._drain(rec)
        return rec

    def touch(self, rec: CommRank, proc: Process, tid: int) -> None:
        rec.touch = self.seq
        proc.current = rec
        proc.current_by_tid[tid] = rec

    def by_ptr(self, proc: Process, ptr: str) -> CommRank | None:
        """The communicator a pointer names in this process; when the prefix was stripped, a
        pointer that only one process in the whole input used."""
        rec = proc.comm_by_ptr.get(ptr)
        if rec is None:
            recs = self.ptr_index.get(ptr)
            if recs and len({id(r.process) for r in recs}) == 1:
                rec = recs[-1]
        return rec

    @staticmethod
    def _fits(rec: CommRank, me: int, top: int) -> bool:
        return (me < 0 or rec.rank == me) and rec.nranks > top

    def target(self, proc: Process, tid: int, me: int, top: int, lazy: bool) -> CommRank | None:
        """The communicator an init-time line belongs to (see module docstring): one being
        initialised whose rank fits, or — for connection lines (``lazy``) — one a COLL line just
        used. ``me`` is -1 for lines that name no rank."""
        lazy = lazy and not proc.pending
        cand = proc.current_by_tid.get(tid) if tid >= 0 else None
        if cand is None:
            cand = proc.current
        if cand is not None and self._fits(cand, me, top):
            if not cand.init_complete or (lazy and cand.coll_touched):
                return cand
        if me < 0:
            return None
        best: CommRank | None = None
        for rec in self.comms_by_rank[id(proc)].get(me, ()):
            usable = not rec.init_complete or (lazy and rec.coll_touched)
            if usable and rec.nranks > top and (best is None or rec.touch >= best.touch):
                best = rec
        return best

    def place(self, proc: Process, tid: int, item: Pending, lazy: bool = False) -> None:
        rec = self.target(proc, tid, item.me, item.top, lazy)
        if rec is None:
            proc.pending.append(item)
        else:
            self.apply(rec, item)

    @staticmethod
    def apply(rec: CommRank, item: Pending) -> None:
        kind, value = item.kind, item.value
        if item.link is not None:
            item.link.comm = rec
        elif kind == "pattern":
            rec.graph_types.append((int(value[0] or 0), str(value[1]), str(value[2])))
        elif kind == "ring":
            rec.ring_channels = int(value[1] or 0)
            rec.ring_orders[int(value[0] or 0)] = item.ranks
        elif kind == "channels":
            coll, collnet, nvls, p2p = (int(v) if v is not None else None for v in value)
            rec.coll_channels, rec.collnet_channels, rec.nvls_channels, rec.p2p_channels = coll, collnet, nvls, p2p
        elif kind == "timings":
            rec.init_total_s = float(value[0] or 0.0)

    def _drain(self, rec: CommRank) -> None:
        """A communicator appeared: hand it the init lines its process printed before it."""
        proc = rec.process
        keep = []
        for item in proc.pending:
            if self._fits(rec, item.me, item.top):
                self.apply(rec, item)
            else:
                keep.append(item)
        proc.pending = keep

    def current(self, proc: Process, tid: int) -> CommRank | None:
        cand = proc.current_by_tid.get(tid) if tid >= 0 else None
        return cand if cand is not None else proc.current

    # -- finishing ---------------------------------------------------------------------------------

    def settle_links(self) -> None:
        """Connection lines still waiting go to their process's communicator whose init line
        comes next in the file (2.18.1 prints Init COMPLETE after the connections), else the
        last one before; the rest stay unattributed and are counted."""
        for proc in self.processes.values():
            for item in proc.pending:
                link = item.link
                if link is None:
                    continue
                fits = [r for r in self.comms_by_rank[id(proc)].get(item.me, ()) if r.nranks > item.top]
                after = [r for r in fits if r.file == link.file and r.line_no >= link.line_no]
                if after or fits:
                    link.comm = min(after, key=lambda r: r.line_no) if after else fits[-1]
            proc.pending = []
        self.stats.unattributed_links = sum(1 for link in self.links if link.comm is None)

    def resolve_comm_ids(self) -> None:
        """Give every communicator rank a comm_id shared by its peers.

        Since 2.24 ``ncclCommSplit`` lines carry no commId. All ranks of a parent call the split
        together, so (parent's comm_id, split count, color) names the child identically on every
        rank: we use ``<parent id>/s<count>c<color>``. A split whose parent is not in the logs cannot
        be matched across ranks and gets a per-process ``unresolved:`` id.
        """
        for rec in self.comms:
            self._resolve(rec, 0)

    def _resolve(self, rec: CommRank, depth: int) -> str:
        if rec.comm_id is not None:
            return rec.comm_id
        parent = rec.parent
        if parent is not None and depth < 64 and rec.split_count is not None and rec.color is not None:
            parent_id = self._resolve(parent, depth + 1)
            if not parent_id.startswith("unresolved:"):
                rec.comm_id = f"{parent_id}/s{rec.split_count}c{rec.color}"
                rec.comm_id_source = "split"
                return rec.comm_id
        proc = rec.process
        rec.comm_id = f"unresolved:{proc.host or proc.file}:{proc.pid or ''}:{rec.ptr}"
        rec.comm_id_source = "unresolved"
        return rec.comm_id

    def versions(self) -> None:
        """Fill each process's version from the file's bare version line where it printed none
        (before 2.22 only rank 0 printed it, and without prefix), then from the run's only version."""
        known = {p.version for p in self.processes.values() if p.version} | set(self.bare_versions.values())
        only = next(iter(known)) if len(known) == 1 else None
        for proc in self.processes.values():
            if proc.version is None:
                proc.version = self.bare_versions.get(proc.file) or only
