"""Which NCCL API calls each communication kernel runs: the NVTX ranges its launch closes.

A kernel is launched by the last NCCL call before it on its CPU thread (inside the call's range, or at
``ncclGroupEnd`` after a group of calls that NCCL fuses into one kernel). So, per thread, in time order,
each launch takes every call that started since the previous launch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from commprof.ingest.nsys.nvtx import NcclRange


def attach_ranges(launch_ns: Sequence[int | None], tids: Sequence[int | None],
                  calls: Sequence[NcclRange]) -> list[list[NcclRange]]:
    """For each row (a launch time and thread, either None when unknown), the calls it runs."""
    out: list[list[NcclRange]] = [[] for _ in launch_ns]
    by_tid: dict[int, list[NcclRange]] = defaultdict(list)
    for call in calls:
        if call.op is not None:
            by_tid[call.tid].append(call)
    rows: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, (t, tid) in enumerate(zip(launch_ns, tids, strict=True)):
        if t is not None and tid is not None and tid in by_tid:
            rows[tid].append((t, i))
    for tid, launches in rows.items():
        pending = sorted(by_tid[tid], key=lambda c: c.start)
        j = 0
        for t, i in sorted(launches):
            k = j
            while k < len(pending) and pending[k].start <= t:
                k += 1
            out[i] = pending[j:k]
            j = k
    return out
