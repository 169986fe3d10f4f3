"""Tables of a trace without device kernels: CPU (Gloo, MPI, oneCCL CPU) runs, where the collectives
are CPU ops on the training process's threads."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import polars as pl

from commprof.ingest.common import names
from commprof.ingest.common.plausible import describe, implausible, reference
from commprof.ingest.kineto import gloo_calls
from commprof.ingest.kineto.comm import comm_fields
from commprof.ingest.kineto.decode import Args
from commprof.ingest.schema import COLLECTIVES, INTERVALS

if TYPE_CHECKING:
    from commprof.ingest.kineto.scan import Scan


def thread_lane(pid: Any, tid: Any, thread_names: dict[Any, str]) -> str:
    label = thread_names.get((pid, tid))
    if label and label.startswith("thread "):
        return label
    return f"thread {tid}" + (f" ({label})" if label else "")


def _gloo_groups(rows: list[int], row_names: list[str], row_tids: list[Any], start: np.ndarray,
                 end: np.ndarray, sidecar: dict[str, Any] | None) -> dict[int, Any]:
    """cpu row -> Attribution (pg, seq, peer) of each ``gloo:*`` op, from the record sidecar. Times go
    over as µs since the rank's first op, small enough for a float to hold them to the ns."""
    if sidecar is None or not rows:
        return {}
    from commprof.ingest.kineto.gloo_groups import ANNOTATION_PREFIX, GLOO_PREFIX, attribute_gloo_ops

    t0 = int(start.min())
    picked = [j for j, name in enumerate(row_names) if name.startswith((GLOO_PREFIX, ANNOTATION_PREFIX))]
    events = [
        {"name": row_names[j], "ph": "X", "tid": row_tids[j],
         "ts": (int(start[j]) - t0) / 1000.0, "dur": (int(end[j]) - int(start[j])) / 1000.0}
        for j in picked
    ]
    return {rows[picked[k]]: attribution for k, attribution in attribute_gloo_ops(events, sidecar).items()}


def cpu_tables(
    scan: Scan, base_ns: int, pid: Any, rank: int, label: str, warnings: list[str],
    sidecar: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CPU runs: comm = collective ops that move the data on the CPU (``gloo:*`` & co.); compute = the
    training threads' other ops. ``nccl:*``-style ops only enqueue a device collective: without the
    device side their duration is a launch time, so they are kept as annotations, not communication."""
    cpu = scan.cpu
    candidates = np.flatnonzero(cpu.col("pid") == scan.pids.get(pid, -1))
    start, start_ok = cpu.col("ts")[candidates], cpu.ok("ts")[candidates]
    dur, dur_ok = cpu.col("dur")[candidates], cpu.ok("dur")[candidates]
    ok = start_ok & dur_ok
    if not ok.all():
        warnings.append(f"{label}: skipped {int((~ok).sum())} CPU ops whose ts or dur is not a number")
    why: Counter[str] = Counter()
    odd = implausible(start, start + dur, reference(start[ok]), why) & ok
    if why:
        warnings.append(describe(label, "CPU ops", why))
        ok &= ~odd
    rows = candidates[ok].tolist()
    start, end = start[ok] + base_ns, start[ok] + dur[ok] + base_ns
    name_table, tid_table = scan.cpu_names.table(), scan.tids.table()
    user_annotation = [str(cat).lower() == "user_annotation" for cat in scan.cats.table()]
    name_codes = cpu.col("name")[candidates[ok]].tolist()
    tid_codes = cpu.col("tid")[candidates[ok]].tolist()
    cat_codes = cpu.col("cat")[candidates[ok]].tolist()
    row_names = [name_table[c] for c in name_codes]
    enqueue_rows = {i for i, name in zip(rows, row_names, strict=True) if names.is_enqueue_op(name)}
    comm_rows = {i for i, name in zip(rows, row_names, strict=True) if names.is_comm_op(name)} - enqueue_rows
    if enqueue_rows:
        enqueued = [(i, name) for i, name in zip(rows, row_names, strict=True) if i in enqueue_rows]
        ops = sorted({names.normalize_op(name) for _, name in enqueued})
        warnings.append(
            f"{label}: {len(enqueue_rows)} device-collective ops on the CPU ({', '.join(ops)}; e.g. "
            f"{min(enqueued)[1]!r}) but no GPU activity in the trace: their durations are enqueue "
            "times, not transfers, so they are not counted as communication (profile with "
            "ProfilerActivity.CUDA to measure them)")
    comm_threads = {tid for i, tid in zip(rows, tid_codes, strict=True) if i in comm_rows}
    step_threads = {tid for tid, name in zip(tid_codes, row_names, strict=True) if name.startswith("ProfilerStep#")}
    worker_threads = comm_threads - step_threads
    kinds: list[str] = []
    for i, tid, name, cat in zip(rows, tid_codes, row_names, cat_codes, strict=True):
        if i in comm_rows:
            kinds.append("comm")
        elif i in enqueue_rows or tid in worker_threads or user_annotation[cat]:
            kinds.append("annotation")
        elif names.is_wait_op(name):
            kinds.append("wait")
        else:
            kinds.append("compute")
    lane_names = {tid: thread_lane(pid, tid_table[tid], scan.thread_names) for tid in set(tid_codes)}
    lanes = [lane_names[tid] for tid in tid_codes]
    row_tids = [tid_table[c] for c in tid_codes]
    groups = _gloo_groups(rows, row_names, row_tids, start, end, sidecar)
    links = _link_calls(scan, rows, row_names, tid_codes, start, end, comm_rows, worker_threads, groups)
    wait_rows = [(lanes[j], gloo_calls.wait_name(op), s, e) for j, s, e, op in links.waits]
    starts_ns = np.concatenate([start, np.array([w[2] for w in wait_rows], np.int64)])
    intervals = pl.DataFrame(
        {
            "rank": np.full(len(rows) + len(wait_rows), rank, dtype=np.int32),
            "lane": lanes + [w[0] for w in wait_rows],
            "name": row_names + [w[1] for w in wait_rows],
            "kind": kinds + ["wait"] * len(wait_rows),
            "start_ns": starts_ns,
            "end_ns": np.concatenate([end, np.array([w[3] for w in wait_rows], np.int64)]),
            "correlation": [None] * (len(rows) + len(wait_rows)),
            "launch_ns": starts_ns,  # a CPU op issues itself
        },
        schema=INTERVALS,
    )
    group_size = {str(g.get("name")): len(g.get("ranks") or []) for g in (sidecar or {}).get("process_groups") or []}
    out: dict[str, list[Any]] = {key: [] for key in COLLECTIVES}
    for j, i in enumerate(rows):
        if i not in comm_rows:
            continue
        args = scan.cpu_comm_args.get(i)
        fields = comm_fields(args, None)
        name = row_names[j]
        op = names.normalize_op(fields["op"] or name)
        attribution = groups.get(i)
        if attribution is not None and attribution.pg is not None:
            fields.update(pg=attribution.pg, seq=attribution.seq, peer=attribution.peer)
            fields["group_size"] = fields["group_size"] or group_size.get(attribution.pg) or None
        if fields["bytes"] is None and args is not None:
            fields["dtype"], fields["bytes"] = _bytes_from_inputs(args)
            if op == "all_gather" and fields["bytes"] is not None and fields["group_size"]:
                fields["bytes"] *= fields["group_size"]  # Gloo shows the per-rank input; count the full buffer
        if fields["seq"] is None and j in links.seq:
            fields["seq"] = links.seq[j]  # the enqueueing call's annotation
        # run apart from the calling thread (whether that thread waited for it shows as a wait interval on
        # its lane: gloo_calls); the same on every rank, so skew can match such calls by it
        fields["is_async"] = tid_codes[j] in worker_threads
        row = {**fields, "rank": rank, "op": op, "name": name, "start_ns": int(start[j]), "end_ns": int(end[j]),
               "lane": lanes[j], "launch_ns": int(start[j])}
        for column, values in out.items():
            values.append(row.get(column))
    return intervals, pl.DataFrame(out, schema=COLLECTIVES)


def _link_calls(scan: Scan, rows: list[int], row_names: list[str], tid_codes: list[int], start: np.ndarray,
                end: np.ndarray, comm_rows: set[int], worker_threads: set[int],
                groups: dict[int, Any]) -> gloo_calls.Links:
    """Worker comm ops linked to the calls that enqueued them (commprof/ingest/kineto/gloo_calls.py), by
    position in ``rows``."""
    comm = np.array([i in comm_rows for i in rows], dtype=bool)
    worker = np.array([tid in worker_threads for tid in tid_codes], dtype=bool)
    if not (comm & worker).any():
        return gloo_calls.Links({}, {}, [])
    sized = {j: _numel_from_inputs(scan.cpu_comm_args[i]) for j, i in enumerate(rows) if i in scan.cpu_comm_args}
    pgs = [getattr(groups.get(i), "pg", None) for i in rows]
    ops = gloo_calls.Ops(row_names, tid_codes, start, end, worker, comm, pgs, [sized.get(j) for j in range(len(rows))])
    return gloo_calls.link_worker_calls(ops)


def _numel_from_inputs(args: Args) -> int | None:
    """Elements of the first input tensor (a c10d call states its tensors as a TensorList, without a
    dtype: elements compare across the call and its Gloo op where bytes cannot)."""
    try:
        dims = msgspec.json.decode(args.input_dims)
    except (msgspec.DecodeError, RecursionError):
        return None
    first = dims[0] if isinstance(dims, list) and dims else None
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    if not isinstance(first, list) or not all(type(d) is int and d >= 0 for d in first):
        return None
    count = 1
    for d in first:
        count *= d
        if count >= 1 << 63:  # past int64: not a real tensor
            return None
    return count


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
