"""Times of one trace's step marks and kernel launches, and the collective a kernel's launch happened
in: the parts of the pass over a trace that join events by time or correlation."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from commprof.ingest.common import names
from commprof.ingest.common.plausible import describe, implausible, reference
from commprof.ingest.kineto.comm import CallOps
from commprof.ingest.schema import STEP_MARKS

if TYPE_CHECKING:
    from commprof.ingest.kineto.scan import Scan


def step_marks(scan: Scan, base_ns: int, pid: Any, rank: int, label: str, warnings: list[str]) -> pl.DataFrame:
    cpu = scan.cpu
    rows = np.asarray(scan.step_rows, dtype=np.int64)
    start, start_ok = cpu.col("ts")[rows], cpu.ok("ts")[rows]
    dur, dur_ok = cpu.col("dur")[rows], cpu.ok("dur")[rows]
    # a step mark far from the trace's other CPU events (ts 0 among epoch times) would make a 56-year step
    every = max(1, len(cpu) // 5000)
    cpu_start, cpu_ok = cpu.col("ts")[::every], cpu.ok("ts")[::every]
    why: Counter[str] = Counter()
    odd = implausible(start, start + dur, reference(cpu_start[cpu_ok]), why) if rows.size else np.empty(0, np.bool_)
    seen: dict[int, tuple[int, int]] = {}
    unreadable = 0
    pid_code = scan.pids.get(pid, -1)
    name_table = scan.cpu_names.table()
    for j, (row_pid, name_code) in enumerate(zip(cpu.col("pid")[rows].tolist(), cpu.col("name")[rows].tolist(),
                                                  strict=True)):
        match = names.PROFILER_STEP.match(name_table[name_code])
        if row_pid != pid_code or not match:
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


def _launch_times(scan: Scan, base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique correlations of the runtime calls and each one's earliest call time (ns)."""
    launch = scan.launch
    if not len(launch):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ok, corr, ts = launch.ok("ts"), launch.col("corr"), launch.col("ts")
    if ok.all() and (corr.size < 2 or bool((corr[1:] > corr[:-1]).all())):
        return corr, ts + base_ns  # each correlation once, in order (as a trace lists them): nothing to sort
    corr, ts = corr[ok], ts[ok] + base_ns
    order = np.lexsort((ts, corr))
    corr, ts = corr[order], ts[order]
    unique, first = np.unique(corr, return_index=True)
    return unique, ts[first]


def launches_of(scan: Scan, base_ns: int, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each kernel (by correlation): whether the trace holds its launch, and the launch time."""
    launch_corr, launch_at = _launch_times(scan, base_ns)
    if launch_corr.size == 0:
        return np.zeros(correlation.size, np.bool_), np.zeros(correlation.size, np.int64)
    pos = np.minimum(np.searchsorted(launch_corr, correlation), launch_corr.size - 1)
    launched = (correlation >= 0) & (launch_corr[pos] == correlation)
    return launched, np.where(launched, launch_at[pos], 0)


def name_ambiguous(scan: Scan, ops: list[Any], dev_rows: list[int], out_rows: list[int],
                    correlation: np.ndarray, start: np.ndarray) -> None:
    """NCCL runs all-to-all as grouped send/recv, so the kernel says ``SendRecv``; the CPU call its
    launch happened in (``c10d::alltoall_base_``, ``nccl:all_to_all``) says which collective it was."""
    calls: list[tuple[Any, int, int, str]] = []
    cpu = scan.cpu
    op_of = [names.normalize_op(n) if n.startswith(names.CALL_OP_PREFIXES) else "unknown"
             for n in scan.cpu_names.table()]  # by name code
    is_call = np.array([op != "unknown" for op in op_of] or [False], dtype=np.bool_)
    call_rows = np.flatnonzero(is_call[cpu.col("name")] & cpu.ok("ts") & cpu.ok("dur"))
    call_start = cpu.col("ts")[call_rows]
    call_end = call_start + cpu.col("dur")[call_rows]
    for tid, begin, end, code in zip(cpu.col("tid")[call_rows].tolist(), call_start.tolist(), call_end.tolist(),
                                     cpu.col("name")[call_rows].tolist(), strict=True):
        calls.append((tid, begin, end, op_of[code]))
    if not calls:
        return
    finder = CallOps(calls)
    launch = scan.launch
    wanted = np.isin(launch.col("corr"), correlation[np.asarray(dev_rows, dtype=np.int64)]) & launch.ok("ts")
    where = {c: (tid, ts) for c, tid, ts in zip(launch.col("corr")[wanted].tolist(), launch.col("tid")[wanted].tolist(),
                                               launch.col("ts")[wanted].tolist(), strict=True)}
    for i, k in zip(dev_rows, out_rows, strict=True):
        hit = where.get(int(correlation[i]))
        call = finder.op_at(*hit) if hit else None
        if call == "all_to_all" or (call is not None and ops[k] == "unknown"):
            ops[k] = call
