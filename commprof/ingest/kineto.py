"""One Kineto trace -> the rows it contributes to the run's tables (one pass over its events)."""

from __future__ import annotations

import ast
import gc
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from commprof.ingest import names
from commprof.ingest.decode import NULL, Args, Event, decode_args
from commprof.ingest.schema import COLLECTIVES, INTERVALS, PROCESS_GROUPS, STEP_MARKS
from commprof.ingest.stream import stream_events

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


def _strip_raw(args: Args) -> Args:
    """Args kept past their piece must not hold Raw views into the piece's text buffer."""
    if args.input_dims is NULL and args.input_type is NULL:
        return args
    return msgspec.structs.replace(args, input_dims=NULL, input_type=NULL)


def _own_raw(args: Args) -> Args:
    """A copy of args whose Raw fields own their bytes (kept for Gloo ops' shapes)."""
    return msgspec.structs.replace(args, input_dims=args.input_dims.copy(), input_type=args.input_type.copy())


_SKIP, _DEVICE, _MEMORY, _CPU = 0, 1, 2, 3


def _category(cat: str) -> int:
    low = cat.lower()
    if low in names.MEMORY_CATEGORIES:
        return _MEMORY
    if low in names.DEVICE_CATEGORIES:
        return _DEVICE
    return _CPU if low in names.CPU_CATEGORIES else _SKIP


@dataclass
class _Pass:
    """Everything kept from the events, one piece of the trace at a time. Rows are tuples (one
    append per event) turned into columns at the end."""

    dev_rows: list[tuple[Any, Any, str, str, str, Any]] = field(default_factory=list)  # ts dur name lane kind corr
    dev_comm_args: dict[int, Args] = field(default_factory=dict)  # device row -> args of comm kernels
    cpu_rows: list[tuple[Any, Any, str, str, Any, Any]] = field(default_factory=list)  # pid tid name cat ts dur
    cpu_comm_args: dict[int, Args] = field(default_factory=dict)  # cpu row -> args of comm ops
    step_rows: list[int] = field(default_factory=list)  # cpu rows of ProfilerStep#N marks
    comm_args_by_external_id: dict[int, Args] = field(default_factory=dict)
    thread_names: dict[Any, str] = field(default_factory=dict)
    gpu_pids: set[Any] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    lanes: dict[tuple[Any, Any], str] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)
    bad_events: int = 0

    def add(self, events: list[Event]) -> None:
        categories, category = self.categories, _category
        dev_rows, cpu_rows = self.dev_rows, self.cpu_rows
        comm_kernel, comm_op = names.COMM_KERNEL_PREFIXES, names.COMM_OP_PREFIXES
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
                if name.startswith(comm_op):
                    args = decode_args(ev.args)
                    if args is not None:
                        self.cpu_comm_args[len(cpu_rows)] = _own_raw(args)
                elif name == "record_param_comms":
                    args = decode_args(ev.args)
                    ext = _int(args.external_id) if args is not None else None
                    if args is not None and ext is not None:
                        self.comm_args_by_external_id[ext] = _strip_raw(args)
                elif name.startswith("ProfilerStep#"):
                    self.step_rows.append(len(cpu_rows))
                cpu_rows.append((ev.pid, ev.tid, name, ev.cat, ev.ts, ev.dur))
            elif kind != _SKIP:
                args = decode_args(ev.args)
                if ev.ts is None or ev.dur is None or args is None or args.stream is None:
                    self.bad_events += 1
                    continue
                name = ev.name if type(ev.name) is str else str(ev.name)
                key = (args.device if args.device is not None else ev.pid, args.stream)
                lane = self.lanes.get(key) or self._lane(key)
                if kind == _MEMORY or "Memcpy" in name or "Memset" in name:
                    dev_rows.append((ev.ts, ev.dur, name, lane, "memory", args.correlation))
                elif name.startswith(comm_kernel):
                    self.dev_comm_args[len(dev_rows)] = _strip_raw(args)
                    dev_rows.append((ev.ts, ev.dur, name, lane, "comm", args.correlation))
                else:
                    dev_rows.append((ev.ts, ev.dur, name, lane, "compute", args.correlation))

    def _lane(self, key: tuple[Any, Any]) -> str:
        dev = str(_int(key[0]) if _int(key[0]) is not None else key[0])
        self.devices.add(dev)
        lane = self.lanes[key] = f"gpu {dev} stream {_int(key[1])}"
        return lane

    def _metadata(self, ev: Event, args: Args | None) -> None:
        if args is None:
            return
        if ev.name == "thread_name" and isinstance(args.name, str):
            self.thread_names[(ev.pid, ev.tid)] = args.name
        elif ev.name == "process_labels" and (args.labels or "").startswith("GPU"):
            self.gpu_pids.add(ev.pid)


def _to_ns(ts: list[Any], dur: list[Any], base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    start_us = np.asarray(ts, dtype=np.float64)
    start = np.rint(start_us * 1000.0).astype(np.int64) + base_ns
    end = start + np.rint(np.asarray(dur, dtype=np.float64) * 1000.0).astype(np.int64)
    return start, end


def _pick_sidecar(sidecars: list[dict[str, Any]] | None, rank: int | None, pid: Any) -> dict[str, Any] | None:
    """The ``commprof record`` sidecar of this trace's rank (same rank, else same OS pid)."""
    for sidecar in sidecars or []:
        if rank is not None and sidecar.get("rank") == rank:
            return sidecar
    for sidecar in sidecars or []:
        if pid is not None and sidecar.get("pid") == pid:
            return sidecar
    return None


def extract(path: Path, sidecars: list[dict[str, Any]] | None = None) -> RankTrace:
    """Stream one trace file into the rows it contributes to the run's tables. ``sidecars`` are the
    rank sidecars of a ``commprof record`` run (raw/ranks/*.json): they name the process group of
    each Gloo op, which the trace itself does not."""
    scan = _Pass()
    # Hundreds of thousands of small tuples trigger the cyclic GC over and over; nothing here forms
    # cycles, so it is paused for the pass (about a tenth of the ingest time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        streamed = stream_events(path, scan.add)
    finally:
        if gc_was_enabled:
            gc.enable()
    trace = streamed.header
    base_ns = int(trace.baseTimeNanoseconds or 0)
    warnings = list(streamed.warnings)
    if scan.bad_events:
        warnings.append(f"{path}: skipped {scan.bad_events} device events without ts/dur/stream")
    dist = trace.distributedInfo
    mode = "gpu" if scan.dev_rows else "cpu"
    cpu_pid = _main_pid(scan)
    sidecar = _pick_sidecar(sidecars, _int(dist.rank) if dist else None, cpu_pid)
    step_marks = _step_marks(scan, base_ns, cpu_pid)
    if mode == "gpu":
        intervals, collectives = _gpu_tables(scan, base_ns)
    else:
        intervals, collectives = _cpu_tables(scan, base_ns, cpu_pid, sidecar)
    gpu_name = None
    if trace.deviceProperties:
        gpu_name = next((d.name for d in trace.deviceProperties if d.name), None)
    return RankTrace(
        file=str(path),
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
        process_groups=_process_groups(dist, scan, sidecar),
        warnings=warnings,
    )


def _main_pid(scan: _Pass) -> Any:
    """The training process: the one with ProfilerStep marks, else the first non-GPU one."""
    if scan.step_rows:
        return scan.cpu_rows[scan.step_rows[0]][0]
    return next((row[0] for row in scan.cpu_rows if row[0] not in scan.gpu_pids), None)


def _step_marks(scan: _Pass, base_ns: int, pid: Any) -> pl.DataFrame:
    seen: dict[int, tuple[float, float]] = {}
    for row_pid, _, name, _, row_ts, row_dur in (scan.cpu_rows[i] for i in scan.step_rows):
        if row_pid != pid:
            continue
        match = names.PROFILER_STEP.match(name)
        ts, dur = _num(row_ts), _num(row_dur)
        if match and ts is not None and dur is not None:
            seen.setdefault(int(match.group(1)), (ts, dur))
    steps = sorted(seen)
    start, end = _to_ns([seen[s][0] for s in steps], [seen[s][1] for s in steps], base_ns)
    return pl.DataFrame(
        {"rank": [0] * len(steps), "step": steps, "start_ns": start, "end_ns": end}, schema=STEP_MARKS
    )


def _comm_fields(args: Args | None, fallback: Args | None) -> dict[str, Any]:
    """pg, op, bytes, dtype, group size, peer and seq from record_param_comms-style args."""

    sources = [a for a in (args, fallback) if a is not None]

    def pick(attr: str) -> Any:
        for source in sources:
            value = getattr(source, attr)
            if value is not None:
                return value
        return None

    if not sources or all(a.collective_name is None and a.in_nelems is None and a.pg_name is None for a in sources):
        return dict.fromkeys(("op", "pg", "bytes", "dtype", "group_size", "peer", "seq", "is_async"))

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
    ts, dur, dev_name, dev_lane, kind, corr = (list(c) for c in zip(*scan.dev_rows, strict=True))
    start, end = _to_ns(ts, dur, base_ns)
    intervals = pl.DataFrame(
        {
            "rank": np.zeros(len(start), dtype=np.int32),
            "lane": dev_lane,
            "name": dev_name,
            "kind": kind,
            "start_ns": start,
            "end_ns": end,
            "correlation": [c if type(c) is int else _int(c) for c in corr],
        },
        schema=INTERVALS,
    )
    cols = _Columns(COLLECTIVES)
    for i, args in scan.dev_comm_args.items():
        ext = _int(args.external_id)
        fields = _comm_fields(args, scan.comm_args_by_external_id.get(ext) if ext is not None else None)
        name = dev_name[i]
        op = names.normalize_op(fields["op"]) if fields["op"] else names.normalize_op(name)
        _append_collective(cols, fields, op, name, int(start[i]), int(end[i]), dev_lane[i])
    return intervals, cols.frame()


def _append_collective(
    cols: _Columns, fields: dict[str, Any], op: str, name: str, start: int, end: int, lane: str
) -> None:
    row = {**fields, "rank": 0, "op": op, "name": name, "start_ns": start, "end_ns": end, "lane": lane}
    for key, values in cols.cols.items():
        values.append(row.get(key))


def _thread_lane(pid: Any, tid: Any, thread_names: dict[Any, str]) -> str:
    label = thread_names.get((pid, tid))
    if label and label.startswith("thread "):
        return label
    return f"thread {tid}" + (f" ({label})" if label else "")


def _gloo_groups(scan: _Pass, rows: list[int], sidecar: dict[str, Any] | None) -> dict[int, Any]:
    """cpu row -> Attribution (pg, seq, peer) of each ``gloo:*`` op, from the record sidecar."""
    if sidecar is None:
        return {}
    from commprof.ingest.gloo_groups import ANNOTATION_PREFIX, GLOO_PREFIX, attribute_gloo_ops

    picked = [i for i in rows if scan.cpu_rows[i][2].startswith((GLOO_PREFIX, ANNOTATION_PREFIX))]
    events = [
        {"name": scan.cpu_rows[i][2], "ph": "X", "tid": scan.cpu_rows[i][1],
         "ts": _num(scan.cpu_rows[i][4]), "dur": _num(scan.cpu_rows[i][5])}
        for i in picked
    ]
    return {picked[k]: attribution for k, attribution in attribute_gloo_ops(events, sidecar).items()}


def _cpu_tables(
    scan: _Pass, base_ns: int, pid: Any, sidecar: dict[str, Any] | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CPU (Gloo) runs: comm = ``gloo:*`` ops; compute = the training threads' other ops."""
    rows = [
        i for i, r in enumerate(scan.cpu_rows)
        if r[0] == pid and _num(r[4]) is not None and _num(r[5]) is not None
    ]
    cpu = scan.cpu_rows
    comm_rows = {i for i in rows if cpu[i][2].startswith(names.COMM_OP_PREFIXES)}
    comm_threads = {cpu[i][1] for i in comm_rows}
    step_threads = {cpu[i][1] for i in rows if cpu[i][2].startswith("ProfilerStep#")}
    worker_threads = comm_threads - step_threads
    kinds: list[str] = []
    for i in rows:
        _, tid, name, cat, _, _ = cpu[i]
        if i in comm_rows:
            kinds.append("comm")
        elif tid in worker_threads or cat.lower() == "user_annotation":
            kinds.append("annotation")
        elif names.is_wait_op(name):
            kinds.append("wait")
        else:
            kinds.append("compute")
    start, end = _to_ns([_num(cpu[i][4]) for i in rows], [_num(cpu[i][5]) for i in rows], base_ns)
    lane_names: dict[tuple[Any, Any], str] = {}
    lanes = []
    for i in rows:
        key = (cpu[i][0], cpu[i][1])
        if key not in lane_names:
            lane_names[key] = _thread_lane(key[0], key[1], scan.thread_names)
        lanes.append(lane_names[key])
    intervals = pl.DataFrame(
        {
            "rank": np.zeros(len(rows), dtype=np.int32),
            "lane": lanes,
            "name": [cpu[i][2] for i in rows],
            "kind": kinds,
            "start_ns": start,
            "end_ns": end,
            "correlation": [None] * len(rows),
        },
        schema=INTERVALS,
    )
    groups = _gloo_groups(scan, rows, sidecar)
    group_size = {str(g.get("name")): len(g.get("ranks") or []) for g in (sidecar or {}).get("process_groups") or []}
    cols = _Columns(COLLECTIVES)
    for j, i in enumerate(rows):
        if i not in comm_rows:
            continue
        args = scan.cpu_comm_args.get(i)
        fields = _comm_fields(args, None)
        name = cpu[i][2]
        op = names.normalize_op(fields["op"] or name)
        attribution = groups.get(i)
        if attribution is not None and attribution.pg is not None:
            fields.update(pg=attribution.pg, seq=attribution.seq, peer=attribution.peer)
            fields["group_size"] = fields["group_size"] or group_size.get(attribution.pg) or None
        if fields["bytes"] is None and args is not None:
            fields["dtype"], fields["bytes"] = _bytes_from_inputs(args)
            if op == "all_gather" and fields["bytes"] is not None and fields["group_size"]:
                fields["bytes"] *= fields["group_size"]  # Gloo shows the per-rank input; count the full buffer
        fields["is_async"] = cpu[i][1] in worker_threads
        _append_collective(cols, fields, op, name, int(start[j]), int(end[j]), lanes[j])
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


def _process_groups(dist: Any, scan: _Pass, sidecar: dict[str, Any] | None = None) -> pl.DataFrame:
    """Groups from ``distributedInfo.pg_config``, completed by those named in per-op args and in the
    record sidecar."""
    rows: dict[str, dict[str, Any]] = {}
    for group in (sidecar or {}).get("process_groups") or []:
        ranks = _parse_ranks(group.get("ranks")) or []
        rows[str(group.get("name"))] = {
            "pg": str(group.get("name")), "desc": group.get("desc"), "ranks": ranks,
            "size": _int(group.get("size")) or len(ranks) or None, "backend": group.get("backend"),
        }
    configs = dist.pg_config if dist is not None and dist.pg_config is not None else []
    if isinstance(configs, dict):
        configs = list(configs.values())
    for cfg in configs:
        ranks = _parse_ranks(cfg.ranks) or []
        if str(cfg.pg_name) in rows:
            continue
        rows[str(cfg.pg_name)] = {
            "pg": str(cfg.pg_name),
            "desc": cfg.pg_desc or None,
            "ranks": ranks,
            "size": _int(cfg.pg_size) or len(ranks) or None,
            "backend": cfg.backend_config or (dist.backend if dist else None),
        }
    arg_sources = [*scan.comm_args_by_external_id.values(), *scan.dev_comm_args.values()]
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
