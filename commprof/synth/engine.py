"""Place every rank's work on a common clock: a small discrete-event simulation.

Each rank runs a *program* (a list of instructions, built by ``schedule``). Compute and memory copies
run back to back on the compute stream. A communication call is *issued* at the rank's cursor onto its
own stream (one per process group, as NCCL has); it *starts* once the previous call on that stream
has ended, and it *ends* ``duration`` after the last member of the matched call has started — so
early ranks wait for late ones, exactly as NCCL kernels do. Blocking calls hold the rank's cursor
until they end (TP all-reduce, a pipeline receive); asynchronous ones (bucketed DP gradient sync,
FSDP prefetch, pipeline sends) let compute continue until a ``Wait`` on their stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Call:
    """What the trace says about one communication call (record_param_comms' args)."""

    pg: str
    desc: str
    ranks: tuple[int, ...]
    op: str  # all_reduce | all_gather | reduce_scatter | all_to_all | send | recv
    nbytes: int
    seq: int | None = None
    peer: int | None = None  # global rank of the other side of a send / recv
    dtype: str = "BFloat16"


@dataclass(frozen=True)
class Compute:
    dur: int
    name: str = "gemm"
    pieces: int = 1
    kind: str = "compute"  # or memory


@dataclass(frozen=True)
class Comm:
    key: tuple[Any, ...]  # the same on every member of the matched call
    members: int
    stream: int
    dur: int
    call: Call
    blocking: bool = True


@dataclass(frozen=True)
class Wait:
    stream: int


@dataclass(frozen=True)
class Until:
    t: int


@dataclass(frozen=True)
class Mark:
    step: int


Instr = Compute | Comm | Wait | Until | Mark


@dataclass
class Entry:
    """One rank's side of a matched call."""

    rank: int
    instr: Comm
    issue: int
    prev: Entry | None
    start: int | None = None
    end: int | None = None
    latest: int = 0  # the latest start among the matched call's members


@dataclass
class Placed:
    """One GPU activity on one rank's timeline (ns on the true clock)."""

    stream: int
    kind: str  # compute | comm | memory
    name: str
    start: int
    end: int
    call: Call | None = None
    pieces: int = 1
    latest: int = 0  # comm: the latest start among the members of its matched call


@dataclass
class Timeline:
    rank: int
    activities: list[Placed] = field(default_factory=list)
    marks: list[tuple[int, int]] = field(default_factory=list)  # (step, start ns)
    end: int = 0
    entries: list[Entry] = field(default_factory=list)


@dataclass
class _State:
    pc: int = 0
    cursor: int = 0
    blocked: Entry | None = None
    last: dict[int, Entry] = field(default_factory=dict)


def simulate(programs: dict[int, list[Instr]], start_ns: int) -> dict[int, Timeline]:
    """Run every program to its end; RuntimeError when the programs cannot all finish (a bug)."""
    states = {r: _State(cursor=start_ns) for r in programs}
    lines = {r: Timeline(r) for r in programs}
    matches: dict[tuple[Any, ...], list[Entry]] = {}
    pending: set[tuple[Any, ...]] = set()
    while True:
        progress = False
        for rank, prog in programs.items():
            progress |= _advance(rank, prog, states[rank], lines[rank], matches, pending)
        for key in list(pending):
            if _resolve(matches[key]):
                pending.discard(key)
                del matches[key]
                progress = True
        if all(states[r].pc >= len(p) and states[r].blocked is None for r, p in programs.items()):
            break
        if not progress:
            stuck = sorted(r for r, p in programs.items() if states[r].pc < len(p) or states[r].blocked)
            raise RuntimeError(f"synthetic schedule cannot finish: ranks {stuck[:8]} wait forever")
    for rank, line in lines.items():
        for e in line.entries:
            assert e.start is not None and e.end is not None
            line.activities.append(Placed(e.instr.stream, "comm", "", e.start, e.end, e.instr.call, 1, e.latest))
        line.activities.sort(key=lambda a: (a.start, a.stream))
        line.end = states[rank].cursor
    return lines


def _advance(rank: int, prog: list[Instr], st: _State, line: Timeline,
             matches: dict[tuple[Any, ...], list[Entry]], pending: set[tuple[Any, ...]]) -> bool:
    moved = False
    while True:
        if st.blocked is not None:
            if st.blocked.end is None:
                return moved
            st.cursor = max(st.cursor, st.blocked.end)
            st.blocked = None
            moved = True
        if st.pc >= len(prog):
            return moved
        ins = prog[st.pc]
        st.pc += 1
        moved = True
        if isinstance(ins, Compute):
            line.activities.append(Placed(7, ins.kind, ins.name, st.cursor, st.cursor + ins.dur, None, ins.pieces))
            st.cursor += ins.dur
        elif isinstance(ins, Comm):
            entry = Entry(rank, ins, st.cursor, st.last.get(ins.stream))
            st.last[ins.stream] = entry
            line.entries.append(entry)
            matches.setdefault(ins.key, []).append(entry)
            pending.add(ins.key)
            if ins.blocking:
                st.blocked = entry
        elif isinstance(ins, Wait):
            last = st.last.get(ins.stream)
            if last is not None:
                st.blocked = last
        elif isinstance(ins, Until):
            st.cursor = max(st.cursor, ins.t)
        else:
            line.marks.append((ins.step, st.cursor))


def _resolve(entries: list[Entry]) -> bool:
    """Start and end of a matched call once every member has issued it and its streams are free."""
    if len(entries) < entries[0].instr.members:
        return False
    if any(e.prev is not None and e.prev.end is None for e in entries):
        return False
    for e in entries:
        e.start = max(e.issue, e.prev.end if e.prev is not None and e.prev.end is not None else e.issue)
    latest = max(e.start for e in entries if e.start is not None)
    for e in entries:
        e.end = latest + entries[0].instr.dur
        e.latest = latest
    return True
