"""Times of one trace's step marks and kernel launches, and the collective a kernel's launch happened
in: the parts of the pass over a trace that join events by time or correlation."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from commprof.ingest import names
from commprof.ingest.exact_time import to_ns
from commprof.ingest.kineto_comm import CallOps
from commprof.ingest.plausible import describe, implausible, reference
from commprof.ingest.schema import STEP_MARKS

if TYPE_CHECKING:
    from commprof.ingest.kineto import _Pass


def step_marks(scan: _Pass, base_ns: int, pid: Any, rank: int, label: str, warnings: list[str]) -> pl.DataFrame:
    rows = [scan.cpu_rows[i] for i in scan.step_rows]
    start, start_ok = to_ns([r[4] for r in rows])
    dur, dur_ok = to_ns([r[5] for r in rows])
    # a step mark far from the trace's other CPU events (ts 0 among epoch times) would make a 56-year step
    cpu_start, cpu_ok = to_ns([r[4] for r in scan.cpu_rows[:: max(1, len(scan.cpu_rows) // 5000)]])
    why: Counter[str] = Counter()
    odd = implausible(start, start + dur, reference(cpu_start[cpu_ok]), why) if rows else np.empty(0, np.bool_)
    seen: dict[int, tuple[int, int]] = {}
    unreadable = 0
    for j, (row_pid, _, name, _, _, _) in enumerate(rows):
        match = names.PROFILER_STEP.match(name)
        if row_pid != pid or not match:
            continue
        if not (start_ok[j] and dur_ok[j]) or len(match.group(1)) > 18:
            unreadable += 1
        elif not odd[j]:
            seen.setdefault(int(match.group(1)), (int(start[j]) + base_ns, int(start[j] + dur[j]) + base_ns))
    if unreadable:
        warnings.append(f"{label}: skipped {unreadable} ProfilerStep marks whose ts, dur or step number is not a "
                        "number")
    if why:
        warnings.append(describe(label, "ProfilerStep marks", why))
    steps = sorted(seen)
    return pl.DataFrame(
        {"rank": [rank] * len(steps), "step": steps, "start_ns": [seen[s][0] for s in steps],
         "end_ns": [seen[s][1] for s in steps]},
        schema=STEP_MARKS,
    )


def _launch_times(scan: _Pass, base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique correlations of the runtime calls and each one's earliest call time (ns)."""
    if not scan.launches:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    corr_l, ts_l, _ = zip(*scan.launches, strict=True)
    corr = np.array(corr_l, dtype=np.int64)
    ts, ok = to_ns(ts_l)
    corr, ts = corr[ok], ts[ok] + base_ns
    order = np.lexsort((ts, corr))
    corr, ts = corr[order], ts[order]
    unique, first = np.unique(corr, return_index=True)
    return unique, ts[first]


def launches_of(scan: _Pass, base_ns: int, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each kernel (by correlation): whether the trace holds its launch, and the launch time."""
    launch_corr, launch_at = _launch_times(scan, base_ns)
    if launch_corr.size == 0:
        return np.zeros(correlation.size, np.bool_), np.zeros(correlation.size, np.int64)
    pos = np.minimum(np.searchsorted(launch_corr, correlation), launch_corr.size - 1)
    launched = (correlation >= 0) & (launch_corr[pos] == correlation)
    return launched, np.where(launched, launch_at[pos], 0)


def name_ambiguous(scan: _Pass, ops: list[Any], dev_rows: list[int], out_rows: list[int],
                    correlation: np.ndarray, start: np.ndarray) -> None:
    """NCCL runs all-to-all as grouped send/recv, so the kernel says ``SendRecv``; the CPU call its
    launch happened in (``c10d::alltoall_base_``, ``nccl:all_to_all``) says which collective it was."""
    calls: list[tuple[Any, int, int, str]] = []
    cpu = scan.cpu_rows
    call_rows = [i for i, r in enumerate(cpu) if r[2].startswith(names.CALL_OP_PREFIXES)]
    call_start, ok_s = to_ns([cpu[i][4] for i in call_rows])
    call_dur, ok_d = to_ns([cpu[i][5] for i in call_rows])
    for j, i in enumerate(call_rows):
        op = names.normalize_op(cpu[i][2])
        if ok_s[j] and ok_d[j] and op != "unknown":
            calls.append((cpu[i][1], int(call_start[j]), int(call_start[j] + call_dur[j]), op))
    if not calls:
        return
    finder = CallOps(calls)
    wanted = {int(correlation[i]) for i in dev_rows}
    launch_ts, launch_ok = to_ns([t for c, t, _ in scan.launches if c in wanted])
    where = {c: (tid, int(ts)) for (c, _, tid), ts, ok in zip(
        (x for x in scan.launches if x[0] in wanted), launch_ts, launch_ok, strict=True) if ok}
    for i, k in zip(dev_rows, out_rows, strict=True):
        hit = where.get(int(correlation[i]))
        call = finder.op_at(*hit) if hit else None
        if call == "all_to_all" or (call is not None and ops[k] == "unknown"):
            ops[k] = call
