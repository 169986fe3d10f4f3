"""A run as one Chrome/Perfetto trace (JSON Trace Event format), annotated with the analysis.

Layout: one process per rank (``pid`` = rank), named by ``process_name`` metadata; in each, threads:

* ``steps``                   ``ProfilerStep#N`` over each analyzed step window
* ``compute (busy)``          the rank's compute, merged over lanes (what overlap is measured against)
* ``memory (busy)``           memcpy/memset, merged (only when the run has any)
* ``exposed comm``            the instants where comm runs and no compute does
* one thread per comm lane    every collective, with args dimension, tier, pg, op, bytes, busbw_gbps,
                              exposed_ns, overlapped_ns, seq, step
* one thread per other lane   the recorded intervals (ops, kernels, waits) by kind, for context
* counter ``exposed comm``    exposed and overlapped comm (ms) per step, sampled at each step start

Times are µs relative to the run's earliest activity (``baseTimeNanoseconds`` holds it); all ranks
share the tables' clock. Every thread's ``X`` events nest properly: an event that would overlap its
neighbour without nesting goes to an extra thread of the same lane (``lane (2)``).

Read-back: collectives are written as device kernels (``cat: "kernel"``, ``args.stream``) whose names
start with ``nccl`` (CPU/Gloo ops become ``nccl:<op>``, the original name in ``args.original_name``),
with the ``record_param_comms`` arg names ingest reads (Collective name, Process Group Name, Seq,
Group size, In msg nelems, dtype, Dst Rank); compute and memory are written as kernels and memcpys of
their merged busy time; steps as ``ProfilerStep#N``. Ingest then finds the same collectives and the same
exposed/overlapped time per step. Context lanes use categories ingest does not read (``commprof.*``).
A one-rank export reads back as is; ingest takes one file as one rank, so a merged multi-rank export is
read back after :func:`split_by_rank` (one Kineto trace per rank).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from commprof.analyzers import intervals as iv
from commprof.analyzers.overlap import effective_compute
from commprof.ingest.common import comm_kernels, names
from commprof.ingest.exports import FORMAT, VERSION, distributed_info

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

TID_STEPS, TID_COMPUTE, TID_MEMORY, TID_EXPOSED, TID_FIRST_LANE = 1, 2, 3, 4, 10


class _Clock:
    def __init__(self, t0: int) -> None:
        self.t0 = t0

    def ts(self, ns: int) -> float:
        return (int(ns) - self.t0) / 1000.0

    def dur(self, start: int, end: int) -> float:
        return max(int(end) - int(start), 0) / 1000.0


def _pack(events: list[tuple[int, int, dict[str, Any]]]) -> list[list[tuple[int, int, dict[str, Any]]]]:
    """Split (start, end, event) into sub-tracks on which events nest properly (no partial overlap)."""
    tracks: list[list[tuple[int, int, dict[str, Any]]]] = []
    stacks: list[list[int]] = []
    for item in sorted(events, key=lambda e: (e[0], -e[1])):
        start, end = item[0], item[1]
        for track, stack in zip(tracks, stacks, strict=True):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                track.append(item)
                stack.append(end)
                break
        else:
            tracks.append([item])
            stacks.append([end])
    return tracks


def _comm_args(row: dict[str, Any]) -> dict[str, Any]:
    """The record_param_comms arg names that ingest reads, so the collective reads back the same."""
    args: dict[str, Any] = {"Collective name": row["op"]}
    if row["pg"] not in (None, "unknown"):
        args["Process Group Name"] = row["pg"]
    for key, col in (("Seq", "seq"), ("Group size", "group_size"), ("Dst Rank", "peer")):
        if row[col] is not None:
            args[key] = int(row[col])
    if row["is_async"] is not None:
        args["Is asynchronized op"] = int(row["is_async"])
    nbytes, dtype = row["bytes"], row["dtype"]
    size = names.dtype_size(dtype)
    if nbytes is not None:
        if size and nbytes % size == 0:
            args["In msg nelems"], args["dtype"] = nbytes // size, dtype
        else:
            args["In msg nelems"], args["dtype"] = nbytes, "uint8"
    elif dtype:
        args["dtype"] = dtype
    return args


def _num(value: Any) -> Any:
    return None if isinstance(value, float) and (value != value) else value


class _Rank:
    """The events of one rank's process."""

    def __init__(self, rank: int, clock: _Clock, host: str | None) -> None:
        self.rank, self.clock = rank, clock
        self.events: list[dict[str, Any]] = []
        self.next_tid = TID_FIRST_LANE
        label = f"rank {rank}" + (f" ({host})" if host else "")
        self._meta("process_name", 0, {"name": label})
        self._meta("process_sort_index", 0, {"sort_index": rank})

    def _meta(self, name: str, tid: int, args: dict[str, Any]) -> None:
        self.events.append({"ph": "M", "name": name, "pid": self.rank, "tid": tid, "ts": 0, "args": args})

    def thread(self, name: str, tid: int | None = None) -> int:
        if tid is None:
            tid, self.next_tid = self.next_tid, self.next_tid + 1
        self._meta("thread_name", tid, {"name": name})
        self._meta("thread_sort_index", tid, {"sort_index": tid})
        return tid

    def x(self, tid: int, name: str, cat: str, start: int, end: int, args: dict[str, Any]) -> None:
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": self.rank, "tid": tid,
                            "ts": self.clock.ts(start), "dur": self.clock.dur(start, end), "args": args})

    def union_track(self, tid: int, name: str, cat: str, union: iv.Union, extra: dict[str, Any]) -> None:
        for s, e in zip(union[0].tolist(), union[1].tolist(), strict=True):
            self.x(tid, name, cat, s, e, {**extra, "stream": tid, "device": self.rank})

    def lanes(self, rows: list[tuple[int, int, str, dict[str, Any]]], cat_of: str | None,
              make: Any) -> None:
        """Rows (start, end, lane, row) -> events on one thread per lane (more where they do not nest)."""
        by_lane: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
        for start, end, lane, row in rows:
            by_lane.setdefault(lane, []).append((start, end, row))
        for lane in sorted(by_lane):
            for i, track in enumerate(_pack(by_lane[lane])):
                tid = self.thread(lane if i == 0 else f"{lane} ({i + 1})")
                for start, end, row in track:
                    name, cat, args = make(row, tid)
                    self.x(tid, name, cat_of or cat, start, end, args)


def _collective_event(row: dict[str, Any], tid: int) -> tuple[str, str, dict[str, Any]]:
    name = row["name"] or row["op"]
    args = _comm_args(row)
    args.update({
        "stream": tid, "device": row["rank"],
        "pg": row["pg"], "op": row["op"], "dimension": row["dimension"], "tier": row["tier"],
        "bytes": row["bytes"], "busbw_gbps": _num(row["busbw_gbps"]), "algbw_gbps": _num(row["algbw_gbps"]),
        "exposed_ns": round(row["exposed_ns"] or 0.0, 3), "overlapped_ns": round(row["overlapped_ns"] or 0.0, 3),
        "step": row["step"],
    })
    library = comm_kernels.describe(name, ()) if not name.startswith(names.COMM_KERNEL_PREFIXES) else None
    if library is not None:  # DeepEP, custom all-reduce, ...: its own name, which commprof reads back as such
        args["library"] = library.library
        # its group is the library's (analyzers/library_groups.py), made again when read back: not a trace group
        args.pop("Process Group Name", None)
    elif not name.startswith(names.COMM_KERNEL_PREFIXES):  # CPU collectives, families declared for this run
        args["original_name"] = name
        name = f"nccl:{row['op']}"
    return name, "kernel", args


def _context_event(row: dict[str, Any], tid: int) -> tuple[str, str, dict[str, Any]]:
    return row["name"], f"commprof.{row['kind']}", {"kind": row["kind"]}


def _counters(rank: _Rank, steps: pl.DataFrame) -> None:
    rows = steps.sort("start_ns").iter_rows(named=True)
    last_end = None
    for s in rows:
        rank.events.append({"ph": "C", "name": "exposed comm", "pid": rank.rank, "tid": 0,
                            "ts": rank.clock.ts(s["start_ns"]),
                            "args": {"exposed_ms": s["exposed_comm_ns"] / 1e6,
                                     "overlapped_ms": s["overlapped_comm_ns"] / 1e6}})
        last_end = s["end_ns"]
    if last_end is not None:
        rank.events.append({"ph": "C", "name": "exposed comm", "pid": rank.rank, "tid": 0,
                            "ts": rank.clock.ts(last_end), "args": {"exposed_ms": 0.0, "overlapped_ms": 0.0}})


def _earliest(analysis: Analysis) -> int:
    starts = [int(v) for v in (analysis.steps["start_ns"].min(), analysis.collectives["start_ns"].min()
                               if analysis.collectives.height else None) if v is not None]
    for _, frame in analysis.tables.rank_intervals():
        if frame.height:
            starts.append(int(frame["start_ns"].min()))
    return min(starts) if starts else 0


def build(analysis: Analysis) -> dict[str, Any]:
    """The annotated trace of an analysed run: every number in it comes from the analysis."""
    t0 = _earliest(analysis)
    clock = _Clock(t0)
    ranks = analysis.ranks
    hosts = dict(zip(ranks["rank"].to_list(), ranks["host"].to_list(), strict=True))
    events: list[dict[str, Any]] = []
    colls = analysis.collectives
    for rank_id, intervals in analysis.tables.rank_intervals():
        rank = _Rank(rank_id, clock, hosts.get(rank_id))
        steps = analysis.steps.filter(pl.col("rank") == rank_id).sort("start_ns")
        rank.thread("steps", TID_STEPS)
        for s in steps.iter_rows(named=True):
            rank.x(TID_STEPS, f"ProfilerStep#{s['step']}", "user_annotation", s["start_ns"], s["end_ns"],
                   {k: s[k] for k in ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")})
        kind = intervals["kind"].cast(pl.String).to_numpy()
        starts = intervals["start_ns"].to_numpy().astype(np.int64)
        ends = intervals["end_ns"].to_numpy().astype(np.int64)
        compute = effective_compute(intervals, kind, starts, ends)
        memory = iv.union(starts[kind == "memory"], ends[kind == "memory"])
        mine = colls.filter(pl.col("rank") == rank_id) if colls.height else colls
        spans = analysis.exposed_spans.filter(pl.col("rank") == rank_id).sort("start_ns")
        exposed = (spans["start_ns"].to_numpy().astype(np.int64), spans["end_ns"].to_numpy().astype(np.int64))
        rank.union_track(rank.thread("compute (busy)", TID_COMPUTE), "compute", "kernel", compute, {})
        if memory[0].size:
            rank.union_track(rank.thread("memory (busy)", TID_MEMORY), "Memcpy (busy)", "gpu_memcpy", memory, {})
        rank.union_track(rank.thread("exposed comm", TID_EXPOSED), "exposed comm", "commprof.exposed", exposed, {})
        rank.lanes([(r["start_ns"], r["end_ns"], f"comm: {r['lane']}", r) for r in mine.iter_rows(named=True)],
                   None, _collective_event)
        context = intervals.filter(pl.col("kind") != "comm")
        rank.lanes([(r["start_ns"], r["end_ns"], r["lane"], r) for r in context.iter_rows(named=True)],
                   None, _context_event)
        _counters(rank, steps)
        events.extend(rank.events)
    trace: dict[str, Any] = {
        "traceName": f"commprof export of {analysis.facts.path}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": t0,
        "commprof": {"format": FORMAT, "version": VERSION, "ranks": ranks["rank"].to_list(),
                     "world_size": analysis.facts.world_size, "process_groups": _pg_config(analysis)},
        "traceEvents": events,
    }
    if ranks.height == 1:
        trace["distributedInfo"] = distributed_info(trace, int(ranks["rank"][0]))
    return trace


def _pg_config(analysis: Analysis) -> list[dict[str, Any]]:
    return [
        {"pg_name": g["pg"], "pg_desc": g["desc"] or "", "backend_config": g["backend"] or "",
         "pg_size": g["size"] or 0, "ranks": g["ranks"] or []}
        for g in analysis.tables.process_groups.iter_rows(named=True)
    ]


def write(trace: dict[str, Any], path: Path) -> None:
    """Whole or not at all (a full disk raises WriteError and leaves no half file)."""
    from commprof.safe_write import atomic_write

    def dump(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump(trace, handle, separators=(",", ":"))

    atomic_write(path, dump, "the export")
