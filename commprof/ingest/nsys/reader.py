"""One Nsight Systems SQLite export (``nsys export --type sqlite``, one per rank) -> that rank's tables.

Intervals are the device rows (kernels, memcpy, memset) on one clock: the export's event times are
relative to its session start, so the session's UTC start (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``)
is added, which puts ranks captured separately, and Kineto traces, on the same epoch clock. NCCL kernels of
every generation are communication; a memory copy launched inside an NCCL call (copy-engine collectives,
NCCL >= 2.28) is communication too. Each communication row becomes a collective, with the op, size,
communicator and peer of the NCCL API range(s) its launch closes (NVTX), where the export has them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from commprof.ingest.common import names
from commprof.ingest.common.rank_trace import MAX_RANK, RankTrace, rank_from_file_name
from commprof.ingest.nsys.attach import attach_ranges
from commprof.ingest.nsys.db import Export, open_export
from commprof.ingest.nsys.devices import COPY_KINDS, KERNEL, MEMCPY, NULL_INT, DeviceRows, read_devices
from commprof.ingest.nsys.nvtx import NcclRange, NvtxFacts, read_nvtx
from commprof.ingest.schema import COLLECTIVES, INTERVALS, PROCESS_GROUPS, STEP_MARKS

SOURCE = "nsys"
_TRAILING_NUMBER = re.compile(r"[_.-](\d{1,7})$")  # profile_%q{RANK} -> profile_3


def extract(path: Path, label: str | None = None, step_range: str | None = None) -> RankTrace:
    """Read one export; steps are the NVTX ranges named ``step_range`` (default: ProfilerStep#N and common
    training-loop names, see nvtx.step_pattern). Raises NsysExportError (one line) when SQLite cannot read it."""
    label = label or str(path)
    ex = open_export(path)
    try:
        return _extract(ex, path, label, step_range)
    finally:
        ex.close()


def _extract(ex: Export, path: Path, label: str, step_range: str | None) -> RankTrace:
    warnings: list[str] = []
    meta = ex.metadata()
    version = meta.get("EXPORT_SCHEMA_VERSION")
    if version is None:
        warnings.append(f"{label}: no export schema version (neither META_DATA_EXPORT nor EXPORT_META_DATA); "
                        "read as the newest schema")
    elif not version.startswith(("2.", "3.")):
        warnings.append(f"{label}: export schema {version}; this reader knows 2.x-3.x, so read what matches")
    dev = _sorted(read_devices(ex))
    warnings += [f"{label}: the export has no {what}" for what in dev.missing]
    nvtx = read_nvtx(ex, step_range)
    offset_ns = _session_start(ex, label, warnings)
    rank, rank_source, world = _rank(path, label, nvtx, warnings)
    table_rank = rank if rank is not None else 0
    intervals, comm_rows = _intervals(dev, table_rank, offset_ns, nvtx)
    collectives = _collectives(dev, comm_rows, intervals, nvtx, table_rank, label, warnings)
    host, gpu = _host_gpu(ex, dev)
    return RankTrace(
        file=label, rank=rank, world_size=world, backend="nccl" if comm_rows.size else None, host=host,
        pid=_pid(ex), device=",".join(str(d) for d in np.unique(dev.cols["device"]).tolist()) if len(dev) else "",
        gpu_name=gpu, mode="gpu" if len(dev) else "cpu", intervals=intervals, collectives=collectives,
        step_marks=_step_marks(nvtx, table_rank, offset_ns), process_groups=_groups(nvtx, rank),
        warnings=warnings, rank_source=rank_source if rank is not None else None, source=SOURCE,
    )


def _session_start(ex: Export, label: str, warnings: list[str]) -> int:
    if ex.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        rows = ex.all("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME WHERE utcEpochNs IS NOT NULL LIMIT 1")
        if rows and isinstance(rows[0][0], int) and 0 <= rows[0][0] < 1 << 62:
            return int(rows[0][0])
    warnings.append(f"{label}: no session start time (TARGET_INFO_SESSION_START_TIME.utcEpochNs): times are "
                    "relative to this export's own start and not aligned with other ranks")
    return 0


def _rank(path: Path, label: str, nvtx: NvtxFacts, warnings: list[str]) -> tuple[int | None, str, int | None]:
    """The rank: the file name ("rank3", or profile_%q{RANK}'s trailing number), the MPI rank nsys
    recorded, or the rank in the largest communicator NCCL's init range names; None when none says."""
    inits = [r for r in nvtx.nccl if r.op is None and r.nranks and r.myrank is not None]
    largest = max(inits, key=lambda r: r.nranks or 0) if inits else None
    world = largest.nranks if largest and largest.nranks and largest.nranks <= MAX_RANK else None
    name = label.rsplit("#", 1)[-1] if "#" in label else label
    by_name = rank_from_file_name(name)
    if by_name is not None:
        return by_name, "file name", world
    trailing = _TRAILING_NUMBER.search(Path(name).name.split(".")[0])
    if trailing:
        return int(trailing.group(1)), "file name", world
    if nvtx.mpi_rank is not None and 0 <= nvtx.mpi_rank < MAX_RANK:
        return nvtx.mpi_rank, "MPI rank", world
    if largest is not None and largest.myrank is not None and 0 <= largest.myrank < MAX_RANK:
        warnings.append(f"{label}: rank {largest.myrank} taken from ncclCommInitRank of the largest communicator "
                        f"({largest.nranks} ranks); name exports profile_%q{{RANK}} to be sure")
        return largest.myrank, "nccl init", world
    return None, "", world


def _sorted(dev: DeviceRows) -> DeviceRows:
    order = np.argsort(dev.cols["start"], kind="stable")
    return DeviceRows({k: v[order] for k, v in dev.cols.items()}, dev.names, dev.missing)


def _intervals(dev: DeviceRows, rank: int, offset_ns: int,
               nvtx: NvtxFacts) -> tuple[pl.DataFrame, npt.NDArray[np.int64]]:
    """The intervals (in ``dev``'s order), and the positions of the communication rows among them."""
    c = dev.cols
    nid, table = pl.Series(c["name_id"]), pl.Series(c["table"])
    ids = list(dev.names)
    kernel_name = nid.replace_strict(ids, [dev.names[i] for i in ids], default=None, return_dtype=pl.String)
    copy_name = nid.replace_strict(list(range(len(COPY_KINDS))), [f"Memcpy {k}" for k in COPY_KINDS],
                                   default="Memcpy", return_dtype=pl.String)
    comm_ids = [i for i in ids if names.is_comm_kernel(dev.names[i])]
    comm = ((table == KERNEL) & nid.is_in(comm_ids)).to_numpy().copy()
    ce = _copy_engine_rows(dev, nvtx)
    comm[ce] = True
    launch = c["launch"]
    frame = pl.DataFrame({
        "table": table, "kname": kernel_name, "cname": copy_name, "nid": nid, "comm": comm,
        "device": c["device"], "stream": c["stream"],
    }).select(
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.format("gpu {} stream {}", "device", "stream").alias("lane"),
        pl.when(pl.col("table") == KERNEL).then(pl.col("kname").fill_null(pl.format("kernel {}", "nid")))
        .when(pl.col("table") == MEMCPY).then(pl.col("cname")).otherwise(pl.lit("Memset")).alias("name"),
        pl.when(pl.col("comm")).then(pl.lit("comm")).when(pl.col("table") == KERNEL).then(pl.lit("compute"))
        .otherwise(pl.lit("memory")).cast(INTERVALS["kind"]).alias("kind"),
    ).with_columns(
        start_ns=pl.Series(c["start"] + offset_ns), end_ns=pl.Series(c["end"] + offset_ns),
        correlation=pl.Series(c["corr"]).set(pl.Series(c["corr"] == NULL_INT), None),
        launch_ns=pl.Series(launch + offset_ns).set(pl.Series(launch == NULL_INT), None),
    ).select(list(INTERVALS)).cast(dict(INTERVALS))  # type: ignore[arg-type]
    return frame, np.flatnonzero(comm)


def _copy_engine_rows(dev: DeviceRows, nvtx: NvtxFacts) -> npt.NDArray[np.int64]:
    """Memory copies launched inside an NCCL collective's API range on the same thread (CE collectives).
    Per thread, ranges sorted by start: a launch is inside one when the latest end among the ranges that
    started before it is not before it (a search per copy, not a scan)."""
    ops = [r for r in nvtx.nccl if r.op is not None]
    rows = np.flatnonzero((dev.cols["table"] == MEMCPY) & (dev.cols["launch"] != NULL_INT))
    if not ops or not rows.size:
        return np.zeros(0, dtype=np.int64)
    by_tid: dict[int, list[tuple[int, int]]] = {}
    for r in ops:
        by_tid.setdefault(r.tid, []).append((r.start, r.end))
    inside = np.zeros(rows.size, dtype=np.bool_)
    launch, tids = dev.cols["launch"][rows], dev.cols["tid"][rows]
    for tid, spans in by_tid.items():
        spans.sort()
        starts = np.array([s for s, _ in spans], dtype=np.int64)
        latest_end = np.maximum.accumulate(np.array([e for _, e in spans], dtype=np.int64))
        mine = tids == tid
        k = np.searchsorted(starts, launch[mine], side="right") - 1
        inside[mine] = (k >= 0) & (latest_end[np.maximum(k, 0)] >= launch[mine])
    return rows[inside]


def _collectives(dev: DeviceRows, comm: npt.NDArray[np.int64], intervals: pl.DataFrame, nvtx: NvtxFacts,
                 rank: int, label: str, warnings: list[str]) -> pl.DataFrame:
    """One collective per communication row, with what the NCCL calls its launch closes say."""
    launch = [None if v == NULL_INT else int(v) for v in dev.cols["launch"][comm].tolist()]
    tids = [None if v == NULL_INT else int(v) for v in dev.cols["tid"][comm].tolist()]
    calls = attach_ranges(launch, tids, nvtx.nccl)
    sizes = {r.comm: r.nranks for r in nvtx.nccl if r.op is None and r.comm and r.nranks}
    rows = intervals[comm.tolist()]
    cols: dict[str, list[Any]] = {k: [] for k in ("pg", "seq", "op", "bytes", "dtype", "group_size", "peer")}
    no_call = no_size = 0
    for name, found in zip(rows["name"].to_list(), calls, strict=True):
        fields = _call_fields(name, found)
        no_call += not found
        no_size += bool(found) and fields["bytes"] is None
        fields["group_size"] = sizes.get(fields["pg"])
        for key, values in cols.items():
            values.append(fields[key])
    if no_call:
        warnings.append(f"{label}: {no_call} communication kernels have no NCCL NVTX range before their launch "
                        "(NCCL_NVTX_DISABLE, or nsys ran without -t nvtx): op from the kernel name; process group "
                        "and size unknown (left empty, not 0)")
    if no_size:
        warnings.append(f"{label}: {no_size} NCCL calls carry no payload in this export (export with "
                        "--include-json true or --dynamic-tables=all): process group and size unknown "
                        "(left empty, not 0)")
    frame: pl.DataFrame = rows.select("rank", "lane", "name", "start_ns", "end_ns", "launch_ns").with_columns(
        pl.lit(rank, pl.Int32).alias("rank"), pl.lit(False).alias("is_async"),
        *(pl.Series(k, v, dtype=COLLECTIVES[k]) for k, v in cols.items()))
    return frame.select(list(COLLECTIVES))


def _call_fields(kernel: str, calls: list[NcclRange]) -> dict[str, Any]:
    ops = {c.op for c in calls}
    comms = {c.comm for c in calls}
    one = calls[0] if len(calls) == 1 else None
    sizes = [c.bytes for c in calls]
    return {
        "op": ops.pop() if len(ops) == 1 else names.kernel_op(kernel),
        "pg": comms.pop() if len(comms) == 1 else None,
        "bytes": sum(s for s in sizes if s is not None) if calls and None not in sizes else None,
        "dtype": one.dtype if one else None, "peer": one.peer if one else None, "seq": one.seq if one else None,
    }


def _groups(nvtx: NvtxFacts, rank: int | None) -> pl.DataFrame:
    """The communicators this rank is in: each export knows only its own place in them, so a group lists
    this rank alone and its size (the run unites what every rank says)."""
    seen: dict[str, int | None] = {}
    for r in nvtx.nccl:
        if r.comm:
            seen[r.comm] = r.nranks if r.op is None and r.nranks else seen.get(r.comm)
    rows = [{"pg": c, "desc": None, "ranks": [rank] if rank is not None else [], "size": n, "backend": "nccl"}
            for c, n in seen.items()]
    return pl.DataFrame(rows, schema=PROCESS_GROUPS)


def _step_marks(nvtx: NvtxFacts, rank: int, offset_ns: int) -> pl.DataFrame:
    """Steps from the NVTX ranges that name them, on the thread with the most of them."""
    if not nvtx.steps:
        return pl.DataFrame(schema=STEP_MARKS)
    tid = Counter(t for _, _, t, _ in nvtx.steps).most_common(1)[0][0]
    marks = sorted(((s, e, n) for s, e, t, n in nvtx.steps if t == tid), key=lambda m: (m[0], m[1]))
    # the numbers the names hold, when every range has its own; else the order (an unnumbered "train_step")
    numbered = all(n is not None for _, _, n in marks) and len({n for _, _, n in marks}) == len(marks)
    rows = []
    for k, (start, end, number) in enumerate(marks):
        rows.append({"rank": rank, "step": number if numbered and number is not None else k,
                     "start_ns": start + offset_ns, "end_ns": end + offset_ns})
    return pl.DataFrame(rows, schema=STEP_MARKS)


def _host_gpu(ex: Export, dev: DeviceRows) -> tuple[str | None, str | None]:
    host = None
    if ex.has("TARGET_INFO_SYSTEM_ENV", "name") and ex.has("TARGET_INFO_SYSTEM_ENV", "value"):
        rows = ex.all("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
        host = str(rows[0][0]) if rows and rows[0][0] else None
    gpu = None
    if ex.has("TARGET_INFO_GPU", "name"):
        used = np.unique(dev.cols["device"]).tolist()
        where = f" WHERE id IN ({','.join(map(str, used))})" if used and ex.has("TARGET_INFO_GPU", "id") else ""
        rows = ex.all(f"SELECT name FROM TARGET_INFO_GPU{where} LIMIT 1")
        gpu = str(rows[0][0]) if rows and rows[0][0] else None
    return host, gpu


def _pid(ex: Export) -> int | None:
    """The OS pid of the process whose kernels the export holds (``globalPid`` bits 24-47)."""
    if not ex.has("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"):
        return None
    rows = ex.all("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid IS NOT NULL "
                  "GROUP BY globalPid ORDER BY COUNT(*) DESC LIMIT 1")
    return (int(rows[0][0]) >> 24) & 0xFFFFFF if rows and isinstance(rows[0][0], int) else None
