"""Tables of a trace without device kernels: CPU (Gloo, MPI, oneCCL CPU) runs, where the collectives
are CPU ops on the training process's threads."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import polars as pl

from commprof.ingest import names
from commprof.ingest.decode import Args
from commprof.ingest.exact_time import to_ns
from commprof.ingest.kineto_comm import comm_fields
from commprof.ingest.plausible import describe, implausible, reference
from commprof.ingest.schema import COLLECTIVES, INTERVALS

if TYPE_CHECKING:
    from commprof.ingest.kineto import _Pass


def thread_lane(pid: Any, tid: Any, thread_names: dict[Any, str]) -> str:
    label = thread_names.get((pid, tid))
    if label and label.startswith("thread "):
        return label
    return f"thread {tid}" + (f" ({label})" if label else "")


def _gloo_groups(scan: _Pass, rows: list[int], start: np.ndarray, end: np.ndarray,
                 sidecar: dict[str, Any] | None) -> dict[int, Any]:
    """cpu row -> Attribution (pg, seq, peer) of each ``gloo:*`` op, from the record sidecar. Times go
    over as µs since the rank's first op, small enough for a float to hold them to the ns."""
    if sidecar is None or not rows:
        return {}
    from commprof.ingest.gloo_groups import ANNOTATION_PREFIX, GLOO_PREFIX, attribute_gloo_ops

    t0 = int(start.min())
    picked = [j for j, i in enumerate(rows) if scan.cpu_rows[i][2].startswith((GLOO_PREFIX, ANNOTATION_PREFIX))]
    events = [
        {"name": scan.cpu_rows[rows[j]][2], "ph": "X", "tid": scan.cpu_rows[rows[j]][1],
         "ts": (int(start[j]) - t0) / 1000.0, "dur": (int(end[j]) - int(start[j])) / 1000.0}
        for j in picked
    ]
    return {rows[picked[k]]: attribution for k, attribution in attribute_gloo_ops(events, sidecar).items()}


def cpu_tables(
    scan: _Pass, base_ns: int, pid: Any, rank: int, label: str, warnings: list[str],
    sidecar: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CPU runs: comm = collective ops that move the data on the CPU (``gloo:*`` & co.); compute = the
    training threads' other ops. ``nccl:*``-style ops only enqueue a device collective: without the
    device side their duration is a launch time, so they are kept as annotations, not communication."""
    cpu = scan.cpu_rows
    candidates = [i for i, r in enumerate(cpu) if r[0] == pid]
    start, start_ok = to_ns([cpu[i][4] for i in candidates])
    dur, dur_ok = to_ns([cpu[i][5] for i in candidates])
    ok = start_ok & dur_ok
    if not ok.all():
        warnings.append(f"{label}: skipped {int((~ok).sum())} CPU ops whose ts or dur is not a number")
    why: Counter[str] = Counter()
    odd = implausible(start, start + dur, reference(start[ok]), why) & ok
    if why:
        warnings.append(describe(label, "CPU ops", why))
        ok &= ~odd
    rows = [i for i, keep in zip(candidates, ok.tolist(), strict=True) if keep]
    start, end = start[ok] + base_ns, start[ok] + dur[ok] + base_ns
    enqueue_rows = {i for i in rows if names.is_enqueue_op(cpu[i][2])}
    comm_rows = {i for i in rows if names.is_comm_op(cpu[i][2])} - enqueue_rows
    if enqueue_rows:
        ops = sorted({names.normalize_op(cpu[i][2]) for i in enqueue_rows})
        warnings.append(
            f"{label}: {len(enqueue_rows)} device-collective ops on the CPU ({', '.join(ops)}; e.g. "
            f"{cpu[min(enqueue_rows)][2]!r}) but no GPU activity in the trace: their durations are enqueue "
            "times, not transfers, so they are not counted as communication (profile with "
            "ProfilerActivity.CUDA to measure them)")
    comm_threads = {cpu[i][1] for i in comm_rows}
    step_threads = {cpu[i][1] for i in rows if cpu[i][2].startswith("ProfilerStep#")}
    worker_threads = comm_threads - step_threads
    kinds: list[str] = []
    for i in rows:
        _, tid, name, cat, _, _ = cpu[i]
        if i in comm_rows:
            kinds.append("comm")
        elif i in enqueue_rows or tid in worker_threads or cat.lower() == "user_annotation":
            kinds.append("annotation")
        elif names.is_wait_op(name):
            kinds.append("wait")
        else:
            kinds.append("compute")
    lane_names: dict[tuple[Any, Any], str] = {}
    lanes = []
    for i in rows:
        key = (cpu[i][0], cpu[i][1])
        if key not in lane_names:
            lane_names[key] = thread_lane(key[0], key[1], scan.thread_names)
        lanes.append(lane_names[key])
    intervals = pl.DataFrame(
        {
            "rank": np.full(len(rows), rank, dtype=np.int32),
            "lane": lanes,
            "name": [cpu[i][2] for i in rows],
            "kind": kinds,
            "start_ns": start,
            "end_ns": end,
            "correlation": [None] * len(rows),
            "launch_ns": start,  # a CPU op issues itself
        },
        schema=INTERVALS,
    )
    groups = _gloo_groups(scan, rows, start, end, sidecar)
    group_size = {str(g.get("name")): len(g.get("ranks") or []) for g in (sidecar or {}).get("process_groups") or []}
    out: dict[str, list[Any]] = {key: [] for key in COLLECTIVES}
    for j, i in enumerate(rows):
        if i not in comm_rows:
            continue
        args = scan.cpu_comm_args.get(i)
        fields = comm_fields(args, None)
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
        row = {**fields, "rank": rank, "op": op, "name": name, "start_ns": int(start[j]), "end_ns": int(end[j]),
               "lane": lanes[j], "launch_ns": int(start[j])}
        for column, values in out.items():
            values.append(row.get(column))
    return intervals, pl.DataFrame(out, schema=COLLECTIVES)


def _bytes_from_inputs(args: Args) -> tuple[str | None, int | None]:
    """Size of the first input tensor (Gloo ops carry no nelems args, only shapes and types)."""
    try:
        dims = msgspec.json.decode(args.input_dims)
        types = msgspec.json.decode(args.input_type)
    except (msgspec.DecodeError, RecursionError):
        return None, None
    if not isinstance(dims, list) or not isinstance(types, list):
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
        if type(d) is not int or d < 0:  # [[null]], "abc", -1: a shape that is not one
            return dtype, None
        count *= d
        if count * size >= 1 << 63:  # past int64 bytes: not a real tensor
            return dtype, None
    return dtype, count * size
