"""One Kineto trace -> the rows it contributes to the run's tables (one pass over its events)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from commprof.ingest import names
from commprof.ingest.decode import Args, DecodedTrace, Event, Trace
from commprof.ingest.schema import COLLECTIVES, INTERVALS, PROCESS_GROUPS, STEP_MARKS

_RANK_IN_FILE_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class RankTrace:
    """What one trace file gives: its rank's identity, tables and warnings."""

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

    def with_rank(self, rank: int) -> RankTrace:
        self.rank = rank
        col = pl.lit(rank, dtype=pl.Int32).alias("rank")
        self.intervals = self.intervals.with_columns(col)
        self.collectives = self.collectives.with_columns(col)
        self.step_marks = self.step_marks.with_columns(col)
        return self


def rank_from_file_name(path: str) -> int | None:
    match = _RANK_IN_FILE_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def _num(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def _int(value: object) -> int | None:
    number = _num(value)
    return int(number) if number is not None else None


def _parse_ranks(value: object) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip() or "[]")
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)):
        out = [_int(v) for v in value]
        return [v for v in out if v is not None]
    return None


class _Columns:
    """Column lists grown during the event pass, turned into a DataFrame at the end."""

    def __init__(self, schema: pl.Schema) -> None:
        self.schema = schema
        self.cols: dict[str, list[Any]] = {name: [] for name in schema}

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.cols, schema=self.schema)


@dataclass
class _Pass:
    """Everything collected in the single pass over events."""

    dev_ts: list[float] = field(default_factory=list)
    dev_dur: list[float] = field(default_factory=list)
    dev_name: list[str] = field(default_factory=list)
    dev_lane: list[str] = field(default_factory=list)
    dev_kind: list[str] = field(default_factory=list)
    dev_corr: list[int | None] = field(default_factory=list)
    dev_args: list[Args | None] = field(default_factory=list)
    cpu: list[Event] = field(default_factory=list)
    comm_args_by_external_id: dict[int, Args] = field(default_factory=dict)
    thread_names: dict[Any, str] = field(default_factory=dict)
    gpu_pids: set[Any] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    bad_events: int = 0


def _scan(events: list[Event]) -> _Pass:
    p = _Pass()
    device_cats = names.DEVICE_CATEGORIES
    memory_cats = names.MEMORY_CATEGORIES
    cpu_cats = names.CPU_CATEGORIES
    is_comm_kernel = names.is_comm_kernel
    for ev in events:
        ph = ev.ph
        if ph != "X":
            if ph == "M" and ev.args is not None:
                if ev.name == "thread_name" and isinstance(ev.args.name, str):
                    p.thread_names[(ev.pid, ev.tid)] = ev.args.name
                elif ev.name == "process_labels" and (ev.args.labels or "").startswith("GPU"):
                    p.gpu_pids.add(ev.pid)
            continue
        cat = ev.cat.lower()
        if cat in device_cats:
            args = ev.args
            if ev.ts is None or ev.dur is None or args is None or args.stream is None:
                p.bad_events += 1
                continue
            name = str(ev.name)
            device = args.device if args.device is not None else ev.pid
            dev = str(_int(device) if _int(device) is not None else device)
            p.devices.add(dev)
            p.dev_ts.append(float(ev.ts))
            p.dev_dur.append(float(ev.dur))
            p.dev_name.append(name)
            p.dev_lane.append(f"gpu {dev} stream {_int(args.stream)}")
            if cat in memory_cats or "Memcpy" in name or "Memset" in name:
                p.dev_kind.append("memory")
            elif is_comm_kernel(name):
                p.dev_kind.append("comm")
            else:
                p.dev_kind.append("compute")
            p.dev_corr.append(_int(args.correlation))
            p.dev_args.append(args)
        elif cat in cpu_cats:
            p.cpu.append(ev)
            if ev.name == "record_param_comms" and ev.args is not None:
                ext = _int(ev.args.external_id)
                if ext is not None:
                    p.comm_args_by_external_id[ext] = ev.args
    return p


def _to_ns(ts: list[float], dur: list[float], base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    start_us = np.asarray(ts, dtype=np.float64)
    start = np.rint(start_us * 1000.0).astype(np.int64) + base_ns
    end = start + np.rint(np.asarray(dur, dtype=np.float64) * 1000.0).astype(np.int64)
    return start, end


def extract(decoded: DecodedTrace) -> RankTrace:
    trace: Trace = decoded.trace
    events = trace.traceEvents or []
    base_ns = int(trace.baseTimeNanoseconds or 0)
    scan = _scan(events)
    warnings = list(decoded.warnings)
    if scan.bad_events:
        warnings.append(f"{decoded.path}: skipped {scan.bad_events} device events without ts/dur/stream")
    dist = trace.distributedInfo
    mode = "gpu" if scan.dev_ts else "cpu"

    cpu_pid = _main_pid(scan.cpu, scan.gpu_pids)
    step_marks = _step_marks(scan.cpu, base_ns, cpu_pid)
    if mode == "gpu":
        intervals, collectives = _gpu_tables(scan, base_ns)
    else:
        intervals, collectives = _cpu_tables(scan, base_ns, cpu_pid)
    gpu_name = None
    if trace.deviceProperties:
        gpu_name = next((d.name for d in trace.deviceProperties if d.name), None)
    return RankTrace(
        file=str(decoded.path),
        rank=_int(dist.rank) if dist else None,
        world_size=_int(dist.world_size) if dist else None,
        backend=dist.backend if dist else None,
        host=trace.host_name,
        pid=_int(cpu_pid),
        device=",".join(sorted(scan.devices)) if mode == "gpu" else "cpu",
        gpu_name=gpu_name,
        mode=mode,
        intervals=intervals,
        collectives=collectives,
        step_marks=step_marks,
        process_groups=_process_groups(dist, scan),
        warnings=warnings,
    )


def _main_pid(cpu: list[Event], gpu_pids: set[Any]) -> Any:
    for ev in cpu:
        if isinstance(ev.name, str) and ev.name.startswith("ProfilerStep#"):
            return ev.pid
    for ev in cpu:
        if ev.pid not in gpu_pids:
            return ev.pid
    return None


def _step_marks(cpu: list[Event], base_ns: int, pid: Any) -> pl.DataFrame:
    seen: dict[int, tuple[float, float]] = {}
    for ev in cpu:
        name = ev.name
        if not (isinstance(name, str) and name.startswith("ProfilerStep#")) or ev.pid != pid:
            continue
        match = names.PROFILER_STEP.match(name)
        ts, dur = _num(ev.ts), _num(ev.dur)
        if match and ts is not None and dur is not None:
            seen.setdefault(int(match.group(1)), (ts, dur))
    steps = sorted(seen)
    start, end = _to_ns([seen[s][0] for s in steps], [seen[s][1] for s in steps], base_ns)
    return pl.DataFrame(
        {"rank": [0] * len(steps), "step": steps, "start_ns": start, "end_ns": end}, schema=STEP_MARKS
    )


def _comm_fields(args: Args | None, fallback: Args | None) -> dict[str, Any]:
    """pg, op, bytes, dtype, group size, peer and seq from record_param_comms-style args."""

    def pick(attr: str) -> Any:
        for source in (args, fallback):
            value = getattr(source, attr, None) if source is not None else None
            if value is not None:
                return value
        return None

    dtype = pick("dtype")
    size = names.dtype_size(dtype)
    nelems = [n for n in (_int(pick("in_nelems")), _int(pick("out_nelems"))) if n is not None]
    nbytes = max(nelems) * size if nelems and size else None
    peer = _int(pick("dst_rank"))
    if peer is None:
        peer = _int(pick("src_rank"))
    pg = pick("pg_name")
    is_async = pick("is_async")
    return {
        "op": pick("collective_name"),
        "pg": str(pg) if pg is not None else None,
        "bytes": nbytes,
        "dtype": dtype,
        "group_size": _int(pick("group_size")),
        "peer": peer,
        "seq": _int(pick("seq")),
        "is_async": bool(_int(is_async)) if is_async is not None else None,
    }


def _gpu_tables(scan: _Pass, base_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    start, end = _to_ns(scan.dev_ts, scan.dev_dur, base_ns)
    intervals = pl.DataFrame(
        {
            "rank": np.zeros(len(start), dtype=np.int32),
            "lane": scan.dev_lane,
            "name": scan.dev_name,
            "kind": scan.dev_kind,
            "start_ns": start,
            "end_ns": end,
            "correlation": scan.dev_corr,
        },
        schema=INTERVALS,
    )
    cols = _Columns(COLLECTIVES)
    for i, kind in enumerate(scan.dev_kind):
        if kind != "comm":
            continue
        args = scan.dev_args[i]
        ext = _int(args.external_id) if args is not None else None
        fields = _comm_fields(args, scan.comm_args_by_external_id.get(ext) if ext is not None else None)
        name = scan.dev_name[i]
        kernel_op = names.normalize_op(name)
        op = names.normalize_op(fields["op"]) if fields["op"] else kernel_op
        _append_collective(cols, fields, op, name, int(start[i]), int(end[i]), scan.dev_lane[i])
    return intervals, cols.frame()


def _append_collective(
    cols: _Columns, fields: dict[str, Any], op: str, name: str, start: int, end: int, lane: str
) -> None:
    row = {**fields, "rank": 0, "op": op, "name": name, "start_ns": start, "end_ns": end, "lane": lane}
    for key, values in cols.cols.items():
        values.append(row.get(key))


def _thread_lane(ev: Event, thread_names: dict[Any, str]) -> str:
    label = thread_names.get((ev.pid, ev.tid))
    if label and label.startswith("thread "):
        return label
    return f"thread {ev.tid}" + (f" ({label})" if label else "")


def _cpu_tables(scan: _Pass, base_ns: int, pid: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CPU (Gloo) runs: comm = ``gloo:*`` ops; compute = the training threads' other ops."""
    events = [ev for ev in scan.cpu if ev.pid == pid and ev.ts is not None and ev.dur is not None]
    comm_threads = {ev.tid for ev in events if isinstance(ev.name, str) and names.is_comm_op(ev.name)}
    step_threads = {
        ev.tid for ev in events if isinstance(ev.name, str) and ev.name.startswith("ProfilerStep#")
    }
    worker_threads = comm_threads - step_threads
    kinds: list[str] = []
    for ev in events:
        name = str(ev.name)
        if names.is_comm_op(name):
            kinds.append("comm")
        elif ev.tid in worker_threads or ev.cat.lower() == "user_annotation":
            kinds.append("annotation")
        elif names.is_wait_op(name):
            kinds.append("wait")
        else:
            kinds.append("compute")
    start, end = _to_ns([_num(e.ts) or 0.0 for e in events], [_num(e.dur) or 0.0 for e in events], base_ns)
    lanes = [_thread_lane(ev, scan.thread_names) for ev in events]
    intervals = pl.DataFrame(
        {
            "rank": np.zeros(len(events), dtype=np.int32),
            "lane": lanes,
            "name": [str(e.name) for e in events],
            "kind": kinds,
            "start_ns": start,
            "end_ns": end,
            "correlation": [None] * len(events),
        },
        schema=INTERVALS,
    )
    cols = _Columns(COLLECTIVES)
    for i, ev in enumerate(events):
        if kinds[i] != "comm":
            continue
        fields = _comm_fields(ev.args, None)
        if fields["bytes"] is None and ev.args is not None:
            fields["dtype"], fields["bytes"] = _bytes_from_inputs(ev.args)
        op = names.normalize_op(fields["op"] or str(ev.name))
        fields["is_async"] = ev.tid in worker_threads
        _append_collective(cols, fields, op, str(ev.name), int(start[i]), int(end[i]), lanes[i])
    return intervals, cols.frame()


def _bytes_from_inputs(args: Args) -> tuple[str | None, int | None]:
    """Size of the first input tensor (Gloo ops carry no nelems args, only shapes and types)."""
    try:
        dims = msgspec.json.decode(args.input_dims)
        types = msgspec.json.decode(args.input_type)
    except msgspec.DecodeError:
        return None, None
    if not dims or not types:
        return None, None
    first_dims, dtype = dims[0], types[0]
    while first_dims and isinstance(first_dims[0], list):  # a TensorList: [[d0, d1]]
        first_dims = first_dims[0]
    size = names.dtype_size(dtype if isinstance(dtype, str) else None)
    if size is None or not isinstance(first_dims, list):
        return (dtype if isinstance(dtype, str) else None), None
    count = 1
    for d in first_dims:
        count *= int(d)
    return dtype, count * size


def _process_groups(dist: Any, scan: _Pass) -> pl.DataFrame:
    """Groups from ``distributedInfo.pg_config``, completed by those named in per-op args."""
    rows: dict[str, dict[str, Any]] = {}
    configs = dist.pg_config if dist is not None and dist.pg_config is not None else []
    if isinstance(configs, dict):
        configs = list(configs.values())
    for cfg in configs:
        ranks = _parse_ranks(cfg.ranks) or []
        rows[str(cfg.pg_name)] = {
            "pg": str(cfg.pg_name),
            "desc": cfg.pg_desc or None,
            "ranks": ranks,
            "size": _int(cfg.pg_size) or len(ranks) or None,
            "backend": cfg.backend_config or (dist.backend if dist else None),
        }
    arg_sources = [*scan.comm_args_by_external_id.values(), *(a for a in scan.dev_args if a is not None)]
    for args in arg_sources:
        if args.pg_name is None or str(args.pg_name) in rows:
            continue
        ranks = _parse_ranks(args.pg_ranks) or []
        rows[str(args.pg_name)] = {
            "pg": str(args.pg_name),
            "desc": args.pg_desc,
            "ranks": ranks,
            "size": _int(args.group_size) or len(ranks) or None,
            "backend": dist.backend if dist else None,
        }
    return pl.DataFrame(list(rows.values()), schema=PROCESS_GROUPS) if rows else pl.DataFrame(
        schema=PROCESS_GROUPS
    )
