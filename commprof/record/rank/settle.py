"""Let Gloo's worker threads finish what they record before the profiler stops.

torch's profiler stop (``_disable_profiler``: ``RecordQueue::getRecords``) takes every thread's event
queue apart, frees included, without a lock. A Gloo collective issued while the profiler records carries
the profiler's thread-local state to the group's worker thread (``pt_gloo_runloop``): the worker opens
the collective's event there and closes it from the work's future callbacks, which run *after* the
future is marked complete and its waiters are woken. A worker still writing into the queue the stop is
freeing writes into freed heap, which glibc reports later ("malloc(): unsorted double linked list
corrupted", SIGABRT) or a SIGSEGV: tools/abort_repro.py shows it with collectives still running across the
stop (every job of that arm crashed; the same collectives waited for before the stop: 0 in 1,600 stops).
The recorded jobs' rarer crash (~1 in 125 jobs, nothing issued across the stop) is taken to be the same
race on its likeliest path, read from torch's source and not reproduced: DDP's reducer waits on those
futures, so the training thread can reach the optimizer step, and our stop, while a worker (preempted on
a busy machine) has yet to write that event's end.

NOT CALLED BY THE SESSION: waiting here before the stop that ends a steps-mode window puts the
wait inside the last recorded ProfilerStep, and a fresh-clone run of tests/test_numbers_torchrun.py saw that
step 6-28 ms longer than the job's own clock on 2 of 4 ranks (the bound is 3 ms: issue 21 moved the profiler's
stop out of the measured step for exactly this reason). The fix it was meant to be covers only the path inferred
from torch's source, not the one the reproducer proves. tools/abort_repro.py's REPRO_SETTLE arm uses it.

The idea: before a stop the training thread waits, at most ``SETTLE_MAX_S``, until this process's Gloo worker
threads are all off the CPU's run queue (``/proc/self/task/<tid>/stat`` state other than ``R``): a worker
with callbacks left to run is runnable; one waiting for its next work, or for its peers, sleeps. Nothing
waits for another rank or takes a lock the training uses: at worst the stop comes ``SETTLE_MAX_S``
later, on the step that already stalls for the stop and the export. A collective still in flight
across the stop (issued while recording, waited for after it) is not covered: only torch can fix that.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .config import GLOO_WORKER_THREAD_NAME
from .groups import thread_ids, thread_name

SETTLE_MAX_S = 0.05
POLL_S = 0.0001
_TASK_DIR = "/proc/self/task"


def gloo_workers() -> list[int]:
    """This process's Gloo worker threads, by name (every group's)."""
    return sorted(t for t in thread_ids() if thread_name(t) == GLOO_WORKER_THREAD_NAME)


def thread_state(tid: int) -> str | None:
    """The one-letter scheduler state of a thread of this process (``R`` runnable), None when gone."""
    try:
        with open(f"{_TASK_DIR}/{tid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    end = stat.rfind(b")")  # the name, in parentheses, may hold anything
    fields = stat[end + 2:].split(b" ", 1) if end >= 0 else []
    return fields[0].decode("ascii", "replace") if fields else None


def settle(tids: list[int], max_s: float = SETTLE_MAX_S, poll_s: float = POLL_S,
           state: Callable[[int], str | None] = thread_state) -> bool:
    """Wait until none of ``tids`` is runnable, at most ``max_s``; True when they settled."""
    if not tids:
        return True
    deadline = time.monotonic() + max_s
    while True:
        if not any(state(t) == "R" for t in tids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)  # gives the CPU (and the GIL) to the workers
