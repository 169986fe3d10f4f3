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
    no_comm_args,
    process_groups,
)
from commprof.ingest.kineto.cpu import cpu_tables
from commprof.ingest.kineto.kept import NO_SEQ
from commprof.ingest.kineto.prefetch import scanned
from commprof.ingest.kineto.rows import release_after
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
    # each distinct call shape once, in the order of its first call (process_groups takes a group's first)
    arg_sources = [*scan.comm_args_by_external_id.shapes_in_order(by_key=True),
                   *scan.dev_comm_args.shapes_in_order(by_key=False)]
    if mode == "gpu":
        intervals, collectives = _gpu_tables(scan, base_ns, table_rank, label, warnings, defer)
    else:
        intervals, collectives = cpu_tables(scan, base_ns, cpu_pid, table_rank, label, warnings, sidecar)
    gpu_name = None
    if trace.deviceProperties:
        gpu_name = next((d.name for d in trace.deviceProperties if d.name), None)
    device = ",".join(sorted(scan.devices)) if mode == "gpu" else "cpu"
    uncounted, rows = scan.uncounted, len(intervals)
    del scan
    release_after(rows)  # what building the tables freed, before they are written (~9 MB of a 304 MB trace's)
    return RankTrace(
        file=label,
        rank=rank,
        world_size=world_size,
        backend=dist.backend if dist else None,
        host=trace.host_name,
        pid=as_int(cpu_pid),
        device=device,
        gpu_name=gpu_name,
        mode=mode,
        intervals=intervals,
        collectives=collectives,
        step_marks=step_marks,
        process_groups=process_groups(dist, arg_sources, sidecar),
        warnings=warnings,
        uncounted=uncounted,
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
    """The device rows as intervals and the communication kernels among them as collectives. Memory: the pass's
    ts, dur and correlation columns become the intervals' start_ns, end_ns and correlation (in place: the frame
    shares them), and the collectives are built first, so that what only they read (the kept args, the CPU and
    runtime rows) is let go of before the intervals' text columns are made."""
    dev = scan.dev
    start, end, correlation = dev.pop("ts"), dev.pop("dur"), dev.pop("corr")
    start += base_ns
    end += start  # dur -> end
    valid = dev.ok("ts") & dev.ok("dur")
    why: Counter[str] = Counter()
    odd = implausible(start, end, reference(start[valid]), why) & valid
    if not valid.all():
        warnings.append(f"{label}: skipped {int((~valid).sum())} device events whose ts or dur is not a number")
    if why:
        warnings.append(describe(label, "device events", why))
        valid &= ~odd
    launched, launch_ns = launches_of(scan, base_ns, correlation)
    collectives = _gpu_collectives(scan, rank, label, warnings, start, end, valid, launched, launch_ns, correlation,
                                   defer)
    columns: dict[str, Any] = {
            "lane": _take(scan.lane_names.table(), dev.col("lane")),
            "name": _take(scan.dev_names.table(), dev.col("name")),
            "kind": _KINDS.gather(_indices(dev.col("kind"))),
            "start_ns": start,
            "end_ns": end,
            "correlation": _with_nulls(correlation, correlation < 0),
            "launch_ns": _with_nulls(launch_ns, ~launched),  # null: no launch in the trace
    }
    del dev
    scan.release("dev")  # its codes, read (its times are the columns')
    release_after(len(start))
    kept = len(start)
    if not valid.all():  # the rows kept, before the frame is built (as filtering it after)
        keep, kept = pl.Series(valid), int(valid.sum())
        columns = {k: v.filter(keep) if isinstance(v, pl.Series) else v[valid] for k, v in columns.items()}
    intervals: pl.DataFrame | Columns = _built(columns, INTERVALS, rank, kept, defer and not scan.unclassified)
    if isinstance(intervals, pl.DataFrame):
        _note_unclassified(scan, intervals)
    return cast(pl.DataFrame, intervals), collectives


def _built(columns: dict[str, Any], schema: pl.Schema, rank: int, height: int, defer: bool) -> pl.DataFrame | Columns:
    """The table of ``columns`` (all but rank): deferred as :class:`Columns`, else a frame whose rank column is one
    value, not one a row (polars keeps a column made of a literal so: 1.7 MB less for 277k intervals and 141k
    collectives; the same table and the same Parquet bytes)."""
    if defer:
        return Columns({key: columns[key] if key != "rank" else np.full(height, rank, dtype=np.int32)
                        for key in schema}, schema, height)
    frame = pl.DataFrame({key: columns[key] for key in schema if key != "rank"},
                         schema={key: dtype for key, dtype in schema.items() if key != "rank"})
    return frame.with_columns(pl.lit(rank, dtype=schema["rank"]).alias("rank")).select(list(schema))


_KINDS = pl.Series("kind", KIND_TABLE, dtype=INTERVALS["kind"])  # a device row's kind by its code, as the column's


SMALL_ROWS = 4096  # up to this many events, a list lookup per row beats polars' gather (~0.1 ms a call)


def _take(table: Sequence[str], codes: np.ndarray) -> pl.Series:
    """The text of each code: ``pl.Series(table).gather(codes)``, by a list lookup on a small trace."""
    if codes.size <= SMALL_ROWS:
        return pl.Series([table[c] for c in codes.tolist()], dtype=pl.String)
    return pl.Series(table, dtype=pl.String).gather(_indices(codes))


def _indices(codes: np.ndarray) -> pl.Series:
    """Codes (>= 0) as polars' index type, without a copy where they are int32 already."""
    return pl.Series(codes.view(np.uint32) if codes.dtype == np.int32 else codes.astype(np.uint32))


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
    """The communication kernels' rows. Lets go of what only they read (the scan's kept args, CPU and runtime
    rows) once it is read, before their columns are made."""
    kept, params = scan.dev_comm_args, scan.comm_args_by_external_id
    rows, shape, ext, ext_ok, seq = kept.columns()
    keep = valid[rows]
    if not keep.all():
        rows, shape, ext, ext_ok, seq = rows[keep], shape[keep], ext[keep], ext_ok[keep], seq[keep]
    fallback_shape, fallback_seq = params.lookup(ext, ext_ok)  # the call's record_param_comms, by External id
    merged = np.where(seq != NO_SEQ, seq, fallback_seq)  # the kernel's own seq, else its record_param_comms'
    name_codes = scan.dev.col("name")[rows]
    # what comm_fields reads is the calls' shapes (kept.py): read once per distinct shape, fallback and kernel name
    combos, combo_of = np.unique(np.stack([shape, fallback_shape, name_codes], axis=1), axis=0, return_inverse=True)
    at = combo_of.reshape(-1)
    inverse = pl.Series(at.astype(np.uint32))  # polars' index type: its gathers convert nothing
    name_table, lane_table = scan.dev_names.table(), scan.lane_names.table()
    prefixes, normalize_op, kernel_op = names.COMM_KERNEL_PREFIXES, names.normalize_op, names.kernel_op
    per: dict[str, list[Any]] = {key: [] for key in COMM_FIELDS}
    empty, ambiguous, unknown = [], [], []  # per combination
    for shape_code, fallback_code, name_code in combos.tolist():
        args, fallback = kept.args(shape_code), params.args(fallback_code) if fallback_code >= 0 else None
        fields = comm_fields(args, fallback)
        named, name = fields["op"], name_table[name_code]
        fields["op"] = normalize_op(named) if named else kernel_op(name)
        empty.append(no_comm_args(args, fallback))
        ambiguous.append(named is None and fields["op"] in ("send_recv", "unknown"))
        # NCCL kernels whose collective arguments are missing; other libraries' kernels never carry them (their op
        # is in the name, their group is the library's: analyzers/library_groups.py; the run says once that sizes
        # are unknown)
        unknown.append(fields["pg"] is None and fields["bytes"] is None and name.startswith(prefixes))
        for key, values in per.items():
            values.append(fields[key])
    guess = np.flatnonzero(np.array(ambiguous, np.bool_)[at])  # the op the kernel name leaves open
    ops = [per["op"][c] for c in at[guess].tolist()]
    if guess.size:
        name_ambiguous(scan, ops, rows[guess].tolist(), list(range(guess.size)), correlation, start)
    # what only the collectives read is read: let go of before their columns are made (the intervals' start,
    # end and correlation are the device rows' own, and their text columns are made from the device rows' codes)
    del shape, ext, ext_ok, seq, fallback_shape, fallback_seq
    freed = len(scan.launch) + len(scan.cpu) + len(kept) + len(params)
    scan.release("launch", "cpu", "dev_comm_args", "comm_args_by_external_id")
    release_after(freed)
    cols = {key: pl.Series(key, values, dtype=COLLECTIVES[key]).gather(inverse) for key, values in per.items()}
    cols["seq"] = _with_nulls(merged, (merged < 0) | np.array(empty, np.bool_)[at]).alias("seq")
    if guess.size:
        cols["op"] = cols["op"].scatter(guess, pl.Series(ops, dtype=pl.String))
    is_unknown = np.array(unknown, np.bool_)[at]
    pre_window = int((is_unknown & ~launched[rows]).sum())
    no_args = int((is_unknown & launched[rows]).sum())
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
        "name": _take(name_table, name_codes).alias("name"),
        "lane": _take(lane_table, scan.dev.col("lane")[rows]).alias("lane"),
        "start_ns": start[rows],
        "end_ns": end[rows],
        "launch_ns": _with_nulls(launch_ns[rows], ~launched[rows]).alias("launch_ns"),
    }
    return cast(pl.DataFrame, _built(frame, COLLECTIVES, rank, int(rows.size), defer))
