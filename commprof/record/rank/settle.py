"""Read whether this process's Gloo worker threads are on the CPU's run queue.

The session's stop (inflight.py) uses ``gloo_workers`` and ``thread_state``: a worker with a collective's end
left to run is runnable (``R`` in ``/proc/self/task/<tid>/stat``); one waiting for its next work, or for its
peers, sleeps. ``settle`` (wait, bounded, until none is runnable) is the earlier, partial fix, kept for
tools/abort_repro.py's REPRO_SETTLE arm: called right before the stop that ends a steps-mode window it put
the wait inside the last recorded ProfilerStep (6-28 ms longer than the job's own clock on 2 of 4 ranks of
tests/test_numbers_torchrun.py, bound 3 ms), and it does not cover collectives still in flight across the
stop (3 aborts in 504 stops). inflight.py waits after the marker has closed, and for those too.
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
