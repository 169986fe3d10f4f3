"""A run's tables written as Nsight Systems SQLite exports, one per rank (``profile_<rank>.sqlite``), to the
export schema's documented tables and columns (schema 3.x by default, 2.x's older names with
``generation=2``): kernels and memory operations with their launching runtime calls, NCCL's NVTX ranges
with the legacy payload (communicator hash, bytes, op, peer) in ``--dynamic-tables=all`` tables,
``ncclCommInitRank`` ranges with (newcomm, nranks, myrank), ``ProfilerStep#N`` ranges, the session's UTC
start, host and GPU. Each rank's session starts at its own instant, as separately captured reports do.

The same run read back through the nsys reader must analyze as the Kineto traces it was written from
(tests/test_nsys.py): the writer is what gives that reader multi-rank tests with exact answers.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.tables import RunTables

_API = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
        "broadcast": "Broadcast", "reduce": "Reduce", "send": "Send", "recv": "Recv", "all_to_all": "AlltoAll",
        "gather": "Gather", "scatter": "Scatter"}
_COPY = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP")
_LANE = re.compile(r"gpu (\d+) stream (\d+)")
NCCL_DOMAIN = 1


def comm_hash(pg: str) -> int:
    """A stable 64-bit communicator hash for a process group name (NCCL's commHash stands in for it)."""
    return int.from_bytes(hashlib.sha1(pg.encode()).digest()[:8], "little") >> 1


def write_exports(tables: RunTables, folder: Path, generation: int = 3, step_name: str = "ProfilerStep") -> list[Path]:
    """One export per rank (``profile_<rank>.sqlite``); a step is the NVTX range ``<step_name>#<step>``."""
    folder.mkdir(parents=True, exist_ok=True)
    groups = {pg: sorted(ranks) for pg, ranks in tables.process_groups.select("pg", "ranks").iter_rows()}
    out = []
    for rank, intervals in tables.rank_intervals():
        info = tables.ranks.filter(pl.col("rank") == rank).row(0, named=True)
        path = folder / f"profile_{rank}.sqlite"
        path.unlink(missing_ok=True)
        colls = tables.collectives.filter(pl.col("rank") == rank)
        marks = tables.step_marks.filter(pl.col("rank") == rank)
        _write_rank(path, rank, info, intervals, colls, marks, groups, generation, step_name)
        out.append(path)
    return out


def _write_rank(path: Path, rank: int, info: dict[str, Any], intervals: pl.DataFrame, colls: pl.DataFrame,
                marks: pl.DataFrame, groups: dict[str, list[int]], generation: int, step_name: str) -> None:
    times = [t for t in (intervals["launch_ns"].min(), intervals["start_ns"].min(), marks["start_ns"].min())
             if isinstance(t, int)]
    session = min(times, default=0) - 1_000_000 - 1_000 * rank  # each capture starts at its own instant
    pid = int(info["pid"] or 1000 + rank)
    gpid = (1 << 56) | (pid << 24)
    gtid = gpid | pid
    con = sqlite3.connect(path)
    try:
        w = _Writer(con, generation)
        w.meta(session, info, generation)
        w.devices(intervals, session, gpid, gtid)
        w.nccl(colls, intervals, groups, rank, session, gtid, int(info["local_rank"] or 0))
        for step, start, end in marks.select("step", "start_ns", "end_ns").iter_rows():
            w.range(start - session, end - session, gtid, f"{step_name}#{step}", None)
        con.commit()
    finally:
        con.close()


class _Writer:
    def __init__(self, con: sqlite3.Connection, generation: int) -> None:
        self.con, self.generation = con, generation
        self.strings: dict[str, int] = {}
        self.event_id = 0
        green = ", greenContextId INTEGER" if generation >= 3 else ""
        event_id = ", eventId INTEGER NOT NULL PRIMARY KEY" if generation >= 3 else ""
        con.executescript(f"""
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE {'META_DATA_EXPORT' if generation >= 3 else 'EXPORT_META_DATA'} (name TEXT, value TEXT);
            CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
            CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER,
                                                 value TEXT);
            CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, busLocation TEXT);
            CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL{green}, streamId INTEGER NOT NULL,
                correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
                shortName INTEGER NOT NULL, mangledName INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL{green}, streamId INTEGER NOT NULL,
                correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL{green}, streamId INTEGER NOT NULL,
                correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
                eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
                returnValue INTEGER NOT NULL, callchainId INTEGER);
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
                rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
                endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
                doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER,
                jsonText TEXT{event_id});
        """)

    def string(self, text: str) -> int:
        sid = self.strings.get(text)
        if sid is None:
            sid = self.strings[text] = len(self.strings) + 1
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, text))
        return sid

    def meta(self, session: int, info: dict[str, Any], generation: int) -> None:
        table = "META_DATA_EXPORT" if generation >= 3 else "EXPORT_META_DATA"
        version = "3.30.1" if generation >= 3 else "2.9.1"
        self.con.executemany(f"INSERT INTO {table} VALUES (?, ?)", [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", version)])
        self.con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (session,))
        self.con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, '', 'Hostname', 0, ?)", (info["host"],))
        device = int(str(info["device"] or "0").rsplit(":", 1)[-1].split(",")[0] or 0)
        self.con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, ?, ?, '')", (device, info["gpu_name"]))

    def devices(self, intervals: pl.DataFrame, session: int, gpid: int, gtid: int) -> None:
        launch_name = self.string("cudaLaunchKernel")
        copy_name = self.string("cudaMemcpyAsync")
        kernels, copies, sets, runtime = [], [], [], []
        for k, (lane, name, kind, start, end, corr, launch) in enumerate(intervals.select(
                "lane", "name", "kind", "start_ns", "end_ns", "correlation", "launch_ns").iter_rows()):
            match = _LANE.match(lane)
            device, stream = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
            corr = corr if corr is not None else 1_000_000_000 + k
            row = (start - session, end - session, device, 1, stream, corr, gpid)
            if kind == "memory" and name.startswith("Memset"):
                sets.append((*row, 0, 0))
            elif kind == "memory":
                word = name.split()[1] if len(name.split()) > 1 else "Unknown"
                copies.append((*row, 0, _COPY.index(word) if word in _COPY else 0))
            else:
                sid = self.string(name)
                kernels.append((*row, sid, sid, None))
            if launch is not None:
                runtime.append((launch - session, launch - session + 2_000, 1, gtid, corr,
                                copy_name if kind == "memory" else launch_name, 0, None))
        green = "?, " if self.generation >= 3 else ""
        green_val: tuple[Any, ...] = (None,) if self.generation >= 3 else ()

        def ins(table: str, rows: list[tuple[Any, ...]], width: int) -> None:
            marks = ", ".join("?" * width)
            values = [(*r[:4], *green_val, *r[4:]) for r in rows]
            self.con.executemany(f"INSERT INTO {table} VALUES ({green}{marks})", values)

        ins("CUPTI_ACTIVITY_KIND_KERNEL", kernels, 10)
        ins("CUPTI_ACTIVITY_KIND_MEMCPY", copies, 9)
        ins("CUPTI_ACTIVITY_KIND_MEMSET", sets, 9)
        self.con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", runtime)
        self.con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python')", (gpid, (gpid >> 24) & 0xFFFFFF))

    def range(self, start: int, end: int, gtid: int, text: str, domain: int | None) -> int:
        self.event_id += 1  # eventId: the rows' order, as in the domain row (which takes rowid = eventId)
        cols = "start, end, eventType, globalTid, textId, domainId" + (", eventId" if self.generation >= 3 else "")
        vals: tuple[Any, ...] = (start, end, 59, gtid, self.string(text), domain)
        vals += (self.event_id,) if self.generation >= 3 else ()
        self.con.execute(f"INSERT INTO NVTX_EVENTS ({cols}) VALUES ({', '.join('?' * len(vals))})", vals)
        return self.event_id

    def nccl(self, colls: pl.DataFrame, intervals: pl.DataFrame, groups: dict[str, list[int]], rank: int,
             session: int, gtid: int, local_rank: int) -> None:
        """The NCCL domain, one ncclCommInitRank per group of this rank and one API range per collective,
        ending just after its kernel's launch (the kernel is launched inside the call)."""
        self.event_id += 1
        self.con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                         "VALUES (0, 75, 'NCCL', ?, ?)", (gtid, NCCL_DOMAIN))
        calls, inits = [], []
        for k, (pg, members) in enumerate(sorted(groups.items())):
            if rank in members:
                event = self.range(1_000 + k * 10, 1_005 + k * 10, gtid, "ncclCommInitRank", NCCL_DOMAIN)
                inits.append((event, comm_hash(pg), len(members), members.index(rank), local_rank))
        for pg, op, size, peer, launch in colls.select("pg", "op", "bytes", "peer", "launch_ns").iter_rows():
            if launch is None or op not in _API:
                continue
            event = self.range(launch - session - 3_000, launch - session + 1_000, gtid, f"nccl{_API[op]}",
                               NCCL_DOMAIN)
            calls.append((event, comm_hash(pg) if pg is not None else None, size, 0, peer))
        if self.generation < 3:
            return  # 2.x exports have neither eventId nor the dynamic payload tables
        gpid = gtid & ~0xFFFFFF
        self.con.execute(f"CREATE TABLE DYNAMIC_NVTXPAYLOAD_DATATYPE_{gpid}_{NCCL_DOMAIN}_1 "
                         "(eventId INTEGER, comm INTEGER, bytes INTEGER, op INTEGER, peer INTEGER)")
        self.con.execute(f"CREATE TABLE DYNAMIC_NVTXPAYLOAD_DATATYPE_{gpid}_{NCCL_DOMAIN}_2 "
                         "(eventId INTEGER, newcomm INTEGER, nranks INTEGER, myrank INTEGER, cudaDev INTEGER)")
        self.con.executemany(f"INSERT INTO DYNAMIC_NVTXPAYLOAD_DATATYPE_{gpid}_{NCCL_DOMAIN}_1 VALUES (?,?,?,?,?)",
                             calls)
        self.con.executemany(f"INSERT INTO DYNAMIC_NVTXPAYLOAD_DATATYPE_{gpid}_{NCCL_DOMAIN}_2 VALUES (?,?,?,?,?)",
                             inits)
