"""One Kineto trace -> the rows it contributes to the run's tables (one pass over its events)."""

from __future__ import annotations

import gc
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from commprof.ingest import names
from commprof.ingest.decode import NULL, Args, Event, decode_args, decode_correlation
from commprof.ingest.exact_time import base_ns as exact_base_ns
from commprof.ingest.kineto_comm import (
    COMM_FIELDS,
    INT64_LIMIT,
    MAX_RANK,
    as_int,
    bounded_int,
    comm_fields,
    process_groups,
)
from commprof.ingest.kineto_cpu import cpu_tables
from commprof.ingest.kineto_rows import BATCH, Codes, Rows
from commprof.ingest.kineto_rows import flush as flush_rows
from commprof.ingest.kineto_times import launches_of, name_ambiguous
from commprof.ingest.kineto_times import step_marks as step_marks_of
from commprof.ingest.plausible import describe, implausible, reference
from commprof.ingest.schema import COLLECTIVES, INTERVALS
from commprof.ingest.stream import stream_events

_RANK_IN_FILE_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class RankTrace:
    """What one trace file gives: its rank's identity, tables and warnings. The tables carry ``rank``
    when the trace says it (``rank_source`` distributedInfo or file name), else 0 until the run
    assigns one by file order."""

    file: str
    rank: int | None
    world_size: int | None
    backend: str | None
    host: str | None
    pid: int | None
    device: str
    gpu_name: str | None
    mode: str
    intervals: pl.DataFrame
    collectives: pl.DataFrame
    step_marks: pl.DataFrame
    process_groups: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    rank_source: str | None = None
    corrupt: str | None = None  # damage inside the text (see StreamResult.corrupt)

    def with_rank(self, rank: int) -> RankTrace:
        self.rank = rank
        col = pl.lit(rank, dtype=pl.Int32).alias("rank")
        self.intervals = self.intervals.with_columns(col)
        self.collectives = self.collectives.with_columns(col)
        self.step_marks = self.step_marks.with_columns(col)
        return self


def rank_from_file_name(path: str) -> int | None:
    match = _RANK_IN_FILE_NAME.search(Path(path).name)
    return bounded_int(match.group(1), 0, MAX_RANK) if match and len(match.group(1)) < 9 else None


def _strip_raw(args: Args) -> Args:
    """Args kept past their piece must not hold Raw views into the piece's text buffer."""
    if args.input_dims is NULL and args.input_type is NULL:
        return args
    return msgspec.structs.replace(args, input_dims=NULL, input_type=NULL)


def _own_raw(args: Args) -> Args:
    """A copy of args whose Raw fields own their bytes (kept for Gloo ops' shapes)."""
    return msgspec.structs.replace(args, input_dims=args.input_dims.copy(), input_type=args.input_type.copy())


_SKIP, _DEVICE, _MEMORY, _CPU, _RUNTIME = 0, 1, 2, 3, 4
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "xpu_runtime", "privateuse1_runtime"})


_PLAIN, _COMM_OP, _PARAM_COMMS, _STEP = 0, 1, 2, 3


def _cpu_role(name: str) -> int:
    """What a CPU op is to the pass (cached per name: op names repeat by the thousand)."""
    if name.startswith(names.COMM_OP_PREFIXES) or name.startswith(names.CALL_OP_PREFIXES):
        return _COMM_OP  # c10d calls too: their input shapes link a worker op to its caller (gloo_calls)
    if name == "record_param_comms":
        return _PARAM_COMMS
    return _STEP if name.startswith("ProfilerStep#") else _PLAIN


def _is_launch(name: Any) -> bool:
    """Runtime calls that put work on a device (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch,
    hipModuleLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync, ...): only these carry a kernel's launch,
    so only their args are read (the others, syncs and event records, are half of all runtime calls)."""
    low = str(name).lower()
    return "launch" in low or "memcpy" in low or "memset" in low


def _category(cat: str) -> int:
    low = cat.lower()
    if low in names.MEMORY_CATEGORIES:
        return _MEMORY
    if low in names.DEVICE_CATEGORIES:
        return _DEVICE
    if low in RUNTIME_CATEGORIES:
        return _RUNTIME
    return _CPU if low in names.CPU_CATEGORIES else _SKIP


KIND_TABLE = ("compute", "comm", "memory")  # a device row's kind, by its code
_COMPUTE, _COMM, _MEM = 0, 1, 2


@dataclass
class _Pass:
    """Everything kept from the events, one piece of the trace at a time: rows go column by column into
    :class:`Rows` (names, lanes, pids and tids as codes into the ``Codes`` tables, times converted in
    batches), so the pass holds a few bytes a row and not the rows' text."""

    dev: Rows = field(default_factory=lambda: Rows(("ts", "dur"), {"name": np.int32, "lane": np.int32,
                                                                  "kind": np.int8, "corr": np.int64}))
    dev_comm_args: dict[int, Args] = field(default_factory=dict)  # device row -> args of comm kernels
    cpu: Rows = field(default_factory=lambda: Rows(("ts", "dur"), {"pid": np.int32, "tid": np.int32,
                                                                  "name": np.int32, "cat": np.int32}))
    cpu_comm_args: dict[int, Args] = field(default_factory=dict)  # cpu row -> args of comm ops and c10d calls
    step_rows: list[int] = field(default_factory=list)  # cpu rows of ProfilerStep#N marks
    launch: Rows = field(default_factory=lambda: Rows(("ts",), {"corr": np.int64, "tid": np.int32}))
    comm_args_by_external_id: dict[int, Args] = field(default_factory=dict)
    thread_names: dict[Any, str] = field(default_factory=dict)
    gpu_pids: set[Any] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    lanes: dict[tuple[Any, Any], int] = field(default_factory=dict)  # (device, stream) -> lane code
    lane_names: Codes = field(default_factory=Codes)  # lane text -> code (keys that print alike share one)
    dev_names: Codes = field(default_factory=Codes)  # kernel / memcpy names
    cpu_names: Codes = field(default_factory=Codes)  # CPU op names
    pids: Codes = field(default_factory=Codes)
    tids: Codes = field(default_factory=Codes)  # CPU threads of ops and of runtime calls alike
    cats: Codes = field(default_factory=Codes)
    categories: dict[str, int] = field(default_factory=dict)
    kernel_kinds: dict[str, int] = field(default_factory=dict)  # kernel name -> _COMPUTE | _COMM | _MEM
    launch_names: dict[Any, bool] = field(default_factory=dict)  # runtime call name -> does it launch work
    cpu_roles: dict[str, int] = field(default_factory=dict)  # CPU op name -> _PLAIN, _COMM_OP, ...
    unclassified: set[str] = field(default_factory=set)  # kernel names that read like comm, taken as compute
    bad: Counter[str] = field(default_factory=Counter)  # what the skipped device events were

    def add(self, events: list[Event]) -> None:
        categories, category = self.categories, _category
        kernel_kinds, cpu_roles, launch_names = self.kernel_kinds, self.cpu_roles, self.launch_names
        dev, cpu, launch = self.dev.pending, self.cpu.pending, self.launch.pending
        d_ts, d_dur, d_name, d_lane = dev["ts"].append, dev["dur"].append, dev["name"].append, dev["lane"].append
        d_kind, d_corr = dev["kind"].append, dev["corr"].append
        c_ts, c_dur, c_name, c_cat = cpu["ts"].append, cpu["dur"].append, cpu["name"].append, cpu["cat"].append
        c_pid, c_tid = cpu["pid"].append, cpu["tid"].append
        l_ts, l_corr, l_tid = launch["ts"].append, launch["corr"].append, launch["tid"].append
        dev_names, cpu_names, pids, tids, cats = self.dev_names, self.cpu_names, self.pids, self.tids, self.cats
        for ev in events:
            if ev.ph != "X":
                if ev.ph == "M":
                    self._metadata(ev, decode_args(ev.args))
                continue
            kind = categories.get(ev.cat)
            if kind is None:
                kind = categories[ev.cat] = category(ev.cat)
            if kind == _CPU:
                name = ev.name if type(ev.name) is str else str(ev.name)
                role = cpu_roles.get(name)
                if role is None:
                    role = cpu_roles[name] = _cpu_role(name)
                if role == _PLAIN:
                    pass
                elif role == _COMM_OP:
                    args = decode_args(ev.args)
                    if args is not None:
                        self.cpu_comm_args[len(self.cpu)] = _own_raw(args)
                elif role == _PARAM_COMMS:
                    args = decode_args(ev.args)
                    ext = as_int(args.external_id) if args is not None else None
                    if args is not None and ext is not None:
                        self.comm_args_by_external_id[ext] = _strip_raw(args)
                else:
                    self.step_rows.append(len(self.cpu))
                c_pid(pids[ev.pid])
                c_tid(tids[ev.tid])
                c_name(cpu_names[name])
                c_cat(cats[ev.cat])
                c_ts(ev.ts)
                c_dur(ev.dur)
            elif kind == _RUNTIME:
                launches = launch_names.get(ev.name)
                if launches is None:
                    launches = launch_names[ev.name] = _is_launch(ev.name)
                if launches:
                    corr = decode_correlation(ev.args)
                    if corr is not None and ev.ts is not None:
                        l_corr(corr)
                        l_ts(ev.ts)
                        l_tid(tids[ev.tid])
            elif kind != _SKIP:
                args = decode_args(ev.args)
                if ev.ts is None or ev.dur is None or args is None or args.stream is None:
                    missing = [k for k, v in (("ts", ev.ts), ("dur", ev.dur)) if v is None]
                    missing += ["args.stream"] if args is None or args.stream is None else []
                    self.bad[f"{ev.cat} {str(ev.name)[:60]!r} without {'/'.join(missing)}"] += 1
                    continue
                name = ev.name if type(ev.name) is str else str(ev.name)
                key = (args.device if args.device is not None else ev.pid, args.stream)
                lane = self.lanes.get(key)
                if lane is None:
                    lane = self._lane(key)
                if kind == _MEMORY:
                    row_kind = _MEM
                else:
                    known = kernel_kinds.get(name)
                    row_kind = known if known is not None else self._kernel_kind(name)
                if row_kind == _COMM:
                    self.dev_comm_args[len(self.dev)] = _strip_raw(args)
                dev_corr = args.correlation
                if type(dev_corr) is not int or not -INT64_LIMIT <= dev_corr < INT64_LIMIT:
                    read = as_int(dev_corr)  # missing, floats: rare writers
                    dev_corr = -1 if read is None else read
                d_name(dev_names[name])
                d_lane(lane)
                d_kind(row_kind)
                d_corr(dev_corr)
                d_ts(ev.ts)
                d_dur(ev.dur)
        if self.dev.pending_times() + self.cpu.pending_times() + self.launch.pending_times() >= BATCH:
            flush_rows((self.dev, self.cpu, self.launch))

    def finish(self) -> None:
        """After the last piece: every pending row into the columns."""
        tables = (self.dev, self.cpu, self.launch)
        flush_rows(tables)
        for table in tables:
            table.finish()

    def _kernel_kind(self, name: str) -> int:
        if "Memcpy" in name or "Memset" in name:
            kind = _MEM
        elif names.is_comm_kernel(name):
            kind = _COMM
        else:
            kind = _COMPUTE
            if names.looks_like_comm(name):
                self.unclassified.add(name)
        self.kernel_kinds[name] = kind
        return kind

    def _lane(self, key: tuple[Any, Any]) -> int:
        dev = str(as_int(key[0]) if as_int(key[0]) is not None else key[0])
        self.devices.add(dev)
        code = self.lanes[key] = self.lane_names[f"gpu {dev} stream {as_int(key[1])}"]
        return code

    def _metadata(self, ev: Event, args: Args | None) -> None:
        if args is None:
            return
        if ev.name == "thread_name" and isinstance(args.name, str):
            self.thread_names[(ev.pid, ev.tid)] = args.name
        elif ev.name == "process_labels" and (args.labels or "").startswith("GPU"):
            self.gpu_pids.add(ev.pid)


def _pick_sidecar(sidecars: list[dict[str, Any]] | None, rank: int | None, pid: Any) -> dict[str, Any] | None:
    """The ``commprof record`` sidecar of this trace's rank (same rank, else same OS pid)."""
    for sidecar in sidecars or []:
        if rank is not None and sidecar.get("rank") == rank:
            return sidecar
    for sidecar in sidecars or []:
        if pid is not None and sidecar.get("pid") == pid:
            return sidecar
    return None


def extract(path: Path, sidecars: list[dict[str, Any]] | None = None, label: str | None = None) -> RankTrace:
    """Stream one trace file into the rows it contributes to the run's tables. ``sidecars`` are the
    rank sidecars of a ``commprof record`` run (raw/ranks/*.json): they name the process group of
    each Gloo op, which the trace itself does not. ``label`` names the file in warnings (the file as
    the user gave it, where ``path`` is a temporary split of it)."""
    label = label or str(path)
    scan = _Pass()
    # Hundreds of thousands of small tuples trigger the cyclic GC over and over; nothing here forms
    # cycles, so it is paused for the pass (about a tenth of the ingest time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        streamed = stream_events(path, scan.add, label=label)
        scan.finish()
    finally:
        if gc_was_enabled:
            gc.enable()
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
        intervals, collectives = _gpu_tables(scan, base_ns, table_rank, label, warnings)
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
        rank_source=rank_source if rank is not None else None,
        corrupt=streamed.corrupt,
    )


def _main_pid(scan: _Pass) -> Any:
    """The training process: the one with ProfilerStep marks, else the first non-GPU one."""
    pids, table = scan.cpu.col("pid"), scan.pids.table()
    if scan.step_rows:
        return table[pids[scan.step_rows[0]]]
    gpu = [code for code, pid in enumerate(table) if pid in scan.gpu_pids]
    other = np.flatnonzero(~np.isin(pids, gpu)) if gpu else np.arange(min(1, pids.size))
    return table[pids[other[0]]] if other.size else None


def _gpu_tables(
    scan: _Pass, base_ns: int, rank: int, label: str, warnings: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    dev = scan.dev
    start, dur_ns = dev.col("ts") + base_ns, dev.col("dur")
    valid = dev.ok("ts") & dev.ok("dur")
    end = start + dur_ns
    why: Counter[str] = Counter()
    odd = implausible(start, end, reference(start[valid]), why) & valid
    correlation = dev.col("corr")
    launched, launch_ns = launches_of(scan, base_ns, correlation)
    name_table = pl.Series(scan.dev_names.table(), dtype=pl.String)
    intervals = pl.DataFrame(
        {
            "rank": np.full(len(start), rank, dtype=np.int32),
            "lane": pl.Series(scan.lane_names.table(), dtype=pl.String).gather(dev.col("lane")),
            "name": name_table.gather(dev.col("name")),
            "kind": pl.Series(KIND_TABLE, dtype=pl.String).gather(dev.col("kind")),
            "start_ns": start,
            "end_ns": end,
            "correlation": pl.Series(correlation).set(pl.Series(correlation < 0), None),
            "launch_ns": pl.Series(launch_ns).set(pl.Series(~launched), None),  # null: no launch in the trace
        },
        schema=INTERVALS,
    )
    if not valid.all():
        warnings.append(f"{label}: skipped {int((~valid).sum())} device events whose ts or dur is not a number")
    if why:
        warnings.append(describe(label, "device events", why))
        valid &= ~odd
    if not valid.all():
        intervals = intervals.filter(pl.Series(valid))
    _warn_unclassified(scan, intervals, label, warnings)
    return intervals, _gpu_collectives(scan, rank, label, warnings, start, end, valid, launched, launch_ns,
                                       correlation)


def _warn_unclassified(scan: _Pass, intervals: pl.DataFrame, label: str, warnings: list[str]) -> None:
    if not scan.unclassified:
        return
    counts = intervals.filter(pl.col("name").is_in(list(scan.unclassified)))["name"].value_counts(sort=True)
    shown = ", ".join(f"{name[:80]!r} × {n}" for name, n in counts.head(3).iter_rows())
    warnings.append(
        f"{label}: {counts['count'].sum()} kernels ({counts.height} names) look like communication but no rule "
        f"classifies them, so they count as compute: {shown}")


def _gpu_collectives(
    scan: _Pass, rank: int, label: str, warnings: list[str], start: np.ndarray, end: np.ndarray,
    valid: np.ndarray, launched: np.ndarray, launch_ns: np.ndarray, correlation: np.ndarray,
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
    unknown = np.array([pg is None and size is None for pg, size in zip(cols["pg"], cols["bytes"], strict=True)],
                       dtype=np.bool_)
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
    return pl.DataFrame({key: frame[key] for key in COLLECTIVES}, schema=COLLECTIVES)
