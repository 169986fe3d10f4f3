"""One Kineto trace -> the rows it contributes to the run's tables (one pass over its events)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import polars as pl

from commprof.ingest.common import names
from commprof.ingest.common.exact_time import base_ns as exact_base_ns
from commprof.ingest.common.plausible import describe, implausible, reference
from commprof.ingest.common.rank_trace import MAX_RANK, RankTrace, rank_from_file_name
from commprof.ingest.kineto.comm import (
    COMM_FIELDS,
    as_int,
    bounded_int,
    comm_fields,
    process_groups,
)
from commprof.ingest.kineto.cpu import cpu_tables
from commprof.ingest.kineto.prefetch import scanned
from commprof.ingest.kineto.scan import KIND_TABLE, Scan
from commprof.ingest.kineto.times import launches_of, name_ambiguous
from commprof.ingest.kineto.times import step_marks as step_marks_of
from commprof.ingest.rank_sidecar import SidecarIndex
from commprof.ingest.schema import COLLECTIVES, INTERVALS


def _pick_sidecar(sidecars: SidecarIndex | list[dict[str, Any]] | None, rank: int | None,
                  pid: Any) -> dict[str, Any] | None:
    """The ``commprof record`` sidecar of this trace's rank (same rank, else same OS pid)."""
    if isinstance(sidecars, SidecarIndex):
        return sidecars.pick(rank, pid)
    for sidecar in sidecars or []:
        if rank is not None and sidecar.get("rank") == rank:
            return sidecar
    for sidecar in sidecars or []:
        if pid is not None and sidecar.get("pid") == pid:
            return sidecar
    return None


class Columns:
    """A table of one trace before polars builds it: its columns (numpy arrays, lists or Series) and
    schema. Traces parsed together (``extract(..., defer=True)``) have theirs built as one frame by
    :func:`stack`: a frame costs ~0.1-0.3 ms to build whatever its rows, more than a small trace's parse."""

    __slots__ = ("columns", "height", "schema")

    def __init__(self, columns: dict[str, Any], schema: pl.Schema, height: int) -> None:
        self.columns, self.schema, self.height = columns, _SCHEMAS.get(id(schema), schema), height

    def __len__(self) -> int:
        return self.height

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.columns, schema=self.schema)


# the schema a built frame reports (dtypes as instances), so that a table's Columns and frame group alike
_SCHEMAS = {id(s): pl.DataFrame(schema=s).schema for s in (INTERVALS, COLLECTIVES)}


def _concat(values: list[Any]) -> Any:
    first = values[0]
    if all(isinstance(v, np.ndarray) for v in values):
        return np.concatenate(values)
    if all(isinstance(v, list) for v in values):
        return [x for v in values for x in v]
    if all(isinstance(v, pl.Series) for v in values):
        return pl.concat(values, rechunk=True)
    raise TypeError(f"columns of different kinds: {type(first).__name__} and others")


def stack(parts: list[pl.DataFrame | Columns]) -> pl.DataFrame:
    """One frame of several traces' tables, in order: ``pl.concat`` of their frames, the deferred ones
    (:class:`Columns` of one schema) built together. Raises where a trace's own frame would not build."""
    if len(parts) > 1 and all(isinstance(p, Columns) for p in parts):
        cols = [p.columns for p in parts if isinstance(p, Columns)]
        schema = parts[0].schema
        if all(p.schema is schema for p in parts):
            return pl.DataFrame({key: _concat([c[key] for c in cols]) for key in cols[0]}, schema=schema)
    frames = [p.frame() if isinstance(p, Columns) else p for p in parts]
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=True)


def extract(path: Path, sidecars: SidecarIndex | list[dict[str, Any]] | None = None, label: str | None = None,
            defer: bool = False) -> RankTrace:
    """Stream one trace file into the rows it contributes to the run's tables. ``sidecars`` are the
    rank sidecars of a ``commprof record`` run (raw/ranks/*.json): they name the process group of
    each Gloo op, which the trace itself does not. ``label`` names the file in warnings (the file as
    the user gave it, where ``path`` is a temporary split of it). With ``defer``, a GPU trace's intervals
    and collectives come back as :class:`Columns` (typed as frames), for :func:`stack` to build."""
    label = label or str(path)
    streamed, scan = scanned(path, label)  # the pass (read in a second process, where analyze started one)
    trace = streamed.header
    base_ns = exact_base_ns(trace.baseTimeNanoseconds)
    warnings = list(streamed.warnings)
    if scan.bad:
        shown = "; ".join(f"{n} × {what}" for what, n in scan.bad.most_common(3))
        more = f"; and {len(scan.bad) - 3} other kinds" if len(scan.bad) > 3 else ""
        warnings.append(f"{label}: skipped {sum(scan.bad.values())} device events: {shown}{more}")
    dist = trace.distributedInfo
    rank, rank_source = bounded_int(dist.rank, 0, MAX_RANK) if dist else None, "distributedInfo"
    world_size = bounded_int(dist.world_size, 1, MAX_RANK + 1) if dist else None
    for key, value, kept in (("rank", dist.rank if dist else None, rank),
                             ("world_size", dist.world_size if dist else None, world_size)):
        if value is not None and kept is None:
            warnings.append(f"{label}: distributedInfo.{key} {str(value)[:40]!r} is not a number of ranks; ignored")
    if trace.baseTimeNanoseconds is not None and base_ns == 0 and trace.baseTimeNanoseconds not in (0, "0"):
        warnings.append(f"{label}: baseTimeNanoseconds {str(trace.baseTimeNanoseconds)[:40]!r} is not a time; "
                        "read as 0")
    if rank is None:
        rank, rank_source = rank_from_file_name(label.rsplit("#", 1)[-1] if "#" in label else label), "file name"
    table_rank = rank if rank is not None else 0
    mode = "gpu" if len(scan.dev) else "cpu"
    cpu_pid = _main_pid(scan)
    sidecar = _pick_sidecar(sidecars, rank if rank_source == "distributedInfo" else None, cpu_pid)
    step_marks = step_marks_of(scan, base_ns, cpu_pid, table_rank, label, warnings)
    if mode == "gpu":
        intervals, collectives = _gpu_tables(scan, base_ns, table_rank, label, warnings, defer)
    else:
        intervals, collectives = cpu_tables(scan, base_ns, cpu_pid, table_rank, label, warnings, sidecar)
    gpu_name = None
    if trace.deviceProperties:
        gpu_name = next((d.name for d in trace.deviceProperties if d.name), None)
    arg_sources = [*scan.comm_args_by_external_id.values(), *scan.dev_comm_args.values()]
    return RankTrace(
        file=label,
        rank=rank,
        world_size=world_size,
        backend=dist.backend if dist else None,
        host=trace.host_name,
        pid=as_int(cpu_pid),
        device=",".join(sorted(scan.devices)) if mode == "gpu" else "cpu",
        gpu_name=gpu_name,
        mode=mode,
        intervals=intervals,
        collectives=collectives,
        step_marks=step_marks,
        process_groups=process_groups(dist, arg_sources, sidecar),
        warnings=warnings,
        uncounted=scan.uncounted,
        rank_source=rank_source if rank is not None else None,
        corrupt=streamed.corrupt,
    )


def _main_pid(scan: Scan) -> Any:
    """The training process: the one with ProfilerStep marks, else the first non-GPU one."""
    pids, table = scan.cpu.col("pid"), scan.pids.table()
    if scan.step_rows:
        return table[pids[scan.step_rows[0]]]
    gpu = [code for code, pid in enumerate(table) if pid in scan.gpu_pids]
    other = np.flatnonzero(~np.isin(pids, gpu)) if gpu else np.arange(min(1, pids.size))
    return table[pids[other[0]]] if other.size else None


def _gpu_tables(
    scan: Scan, base_ns: int, rank: int, label: str, warnings: list[str], defer: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame]:
    dev = scan.dev
    start, dur_ns = dev.col("ts") + base_ns, dev.col("dur")
    valid = dev.ok("ts") & dev.ok("dur")
    end = start + dur_ns
    why: Counter[str] = Counter()
    odd = implausible(start, end, reference(start[valid]), why) & valid
    correlation = dev.col("corr")
    launched, launch_ns = launches_of(scan, base_ns, correlation)
    columns = {
            "rank": np.full(len(start), rank, dtype=np.int32),
            "lane": _take(scan.lane_names.table(), dev.col("lane")),
            "name": _take(scan.dev_names.table(), dev.col("name")),
            "kind": _take(KIND_TABLE, dev.col("kind")),
            "start_ns": start,
            "end_ns": end,
            "correlation": _with_nulls(correlation, correlation < 0),
            "launch_ns": _with_nulls(launch_ns, ~launched),  # null: no launch in the trace
    }
    if not valid.all():
        warnings.append(f"{label}: skipped {int((~valid).sum())} device events whose ts or dur is not a number")
    if why:
        warnings.append(describe(label, "device events", why))
        valid &= ~odd
    kept = len(start)
    if not valid.all():  # the rows kept, before the frame is built (as filtering it after)
        keep, kept = pl.Series(valid), int(valid.sum())
        columns = {k: v.filter(keep) if isinstance(v, pl.Series) else v[valid] for k, v in columns.items()}
    intervals: pl.DataFrame | Columns = Columns(columns, INTERVALS, kept)
    if not defer or scan.unclassified:
        intervals = pl.DataFrame(columns, schema=INTERVALS)
        _note_unclassified(scan, intervals)
    collectives = _gpu_collectives(scan, rank, label, warnings, start, end, valid, launched, launch_ns, correlation,
                                   defer)
    return cast(pl.DataFrame, intervals), collectives


SMALL_ROWS = 4096  # up to this many events, a list lookup per row beats polars' gather (~0.1 ms a call)


def _take(table: Sequence[str], codes: np.ndarray) -> pl.Series:
    """The text of each code: ``pl.Series(table).gather(codes)``, by a list lookup on a small trace."""
    if codes.size <= SMALL_ROWS:
        return pl.Series([table[c] for c in codes.tolist()], dtype=pl.String)
    return pl.Series(table, dtype=pl.String).gather(codes)


def _with_nulls(values: np.ndarray, null: np.ndarray) -> pl.Series:
    """``values`` with nulls where ``null``: ``pl.Series(values).set(pl.Series(null), None)``, by position."""
    series = pl.Series(values)
    return series.scatter(np.flatnonzero(null), None) if null.any() else series


UNCOUNTED_KEPT = 8  # per rank, the largest by time: the run's list is made of them (analyzers/uncounted.py)


def _note_unclassified(scan: Scan, intervals: pl.DataFrame) -> None:
    """Kernels whose names read like communication that no rule counts (scan.unclassified), by time: name,
    launches, total ns, ns on a side stream (off the stream that runs most of the rank's compute: where a
    library's own communication kernels run)."""
    if not scan.unclassified:
        return
    compute = intervals.filter(pl.col("kind") == "compute")
    lanes = compute.group_by("lane").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"))
    main = lanes.sort(["ns", "lane"], descending=[True, False])["lane"][0] if lanes.height else None
    rows = (compute.filter(pl.col("name").is_in(list(scan.unclassified)))
            .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("ns"))
            .group_by("name").agg(pl.len().alias("calls"), pl.col("ns").sum(),
                                  pl.col("ns").filter(pl.col("lane") != main).sum().alias("side_ns"))
            .sort(["ns", "name"], descending=[True, False]).head(UNCOUNTED_KEPT))
    scan.uncounted = [[n, int(c), int(t), int(sd)] for n, c, t, sd in rows.iter_rows()]


def _gpu_collectives(
    scan: Scan, rank: int, label: str, warnings: list[str], start: np.ndarray, end: np.ndarray,
    valid: np.ndarray, launched: np.ndarray, launch_ns: np.ndarray, correlation: np.ndarray, defer: bool = False,
) -> pl.DataFrame:
    idx = np.fromiter(scan.dev_comm_args.keys(), dtype=np.int64, count=len(scan.dev_comm_args))
    idx = idx[valid[idx]]
    rows = idx.tolist()
    name_table, lane_table = scan.dev_names.table(), scan.lane_names.table()
    name_codes, lane_codes = scan.dev.col("name")[idx].tolist(), scan.dev.col("lane")[idx].tolist()
    cols: dict[str, list[Any]] = {key: [] for key in COMM_FIELDS}
    appends = [(key, cols[key].append) for key in COMM_FIELDS]
    ambiguous: list[int] = []  # positions whose op the kernel name leaves open
    by_ext, comm_args = scan.comm_args_by_external_id, scan.dev_comm_args
    normalize_op, kernel_op = names.normalize_op, names.kernel_op
    for k, i in enumerate(rows):
        args = comm_args[i]
        ext = args.external_id
        if type(ext) is not int:
            ext = as_int(ext)
        fields = comm_fields(args, by_ext.get(ext) if ext is not None else None)
        named = fields["op"]
        fields["op"] = normalize_op(named) if named else kernel_op(name_table[name_codes[k]])
        if named is None and fields["op"] in ("send_recv", "unknown"):
            ambiguous.append(k)
        for key, append in appends:
            append(fields[key])
    if ambiguous:
        name_ambiguous(scan, cols["op"], [rows[k] for k in ambiguous], ambiguous, correlation, start)
    # NCCL kernels whose collective arguments are missing; other libraries' kernels never carry them (their op is
    # in the name, their group is the library's: analyzers/library_groups.py; the run says once that sizes are
    # unknown)
    prefixes = names.COMM_KERNEL_PREFIXES
    unknown = np.array([pg is None and size is None and name_table[code].startswith(prefixes)
                        for pg, size, code in zip(cols["pg"], cols["bytes"], name_codes, strict=True)], dtype=np.bool_)
    pre_window = int((unknown & ~launched[idx]).sum())
    no_args = int((unknown & launched[idx]).sum())
    if pre_window:
        warnings.append(
            f"{label}: {pre_window} communication kernels have no launch in the trace (launched before the "
            "profiler started, so the CPU op and its arguments were not recorded): their op, process group "
            "and size are unknown (left empty, not 0)")
    if no_args:
        warnings.append(
            f"{label}: {no_args} communication kernels carry no collective arguments (no record_param_comms: "
            "older PyTorch or another library): their process group and size are unknown (left empty, not 0)")
    frame = {
        **cols,
        "rank": np.full(idx.size, rank, dtype=np.int32),
        "name": [name_table[c] for c in name_codes],
        "lane": [lane_table[c] for c in lane_codes],
        "start_ns": start[idx],
        "end_ns": end[idx],
        "launch_ns": pl.Series(launch_ns[idx], dtype=pl.Int64).set(pl.Series(~launched[idx]), None),
    }
    columns = {key: frame[key] for key in COLLECTIVES}
    if defer:
        return cast(pl.DataFrame, Columns(columns, COLLECTIVES, int(idx.size)))
    return pl.DataFrame(columns, schema=COLLECTIVES)
