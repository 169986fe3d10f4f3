"""Stop the profiler only when no collective it recorded can still write into it.

The race (torch's, docs/torch-profiler-gloo-race.md): torch's profiler stop (``_disable_profiler``:
``RecordQueue::getRecords``) takes every thread's event queue apart, frees included, without a lock. A Gloo
collective issued while the profiler records carries the profiler's thread-local state to the group's worker
thread (``pt_gloo_runloop``): the worker opens the collective's event when it starts the work and ends it in
``Work::finish``, after the work's future is marked complete (so after ``fut.wait()`` returns, and after the
future's callbacks ran). An event still open at the stop is ended later, into freed memory: glibc's
"malloc(): unsorted double linked list corrupted" (SIGABRT), or a SIGSEGV in the stop itself
(tools/abort_repro.py: 6 ranks in 791 stops of ``commprof record``'s own stop with 64 small all_reduces in
flight across it, every job).

What cannot be avoided inside torch is avoided from outside, before every stop (``RankSession._stop_profiler``):

- Collectives issued from Python while the window records (every ``ProcessGroup`` method the Annotator
  wraps hands its ``Work`` here; not NCCL's, whose events end on the issuing thread at the call): each must
  be ``is_completed()``. ``Work::finish`` sets the flag and runs the event's end under the work's mutex, and
  ``is_completed`` reads the flag under it: true means the event has ended. (Send and recv works end their
  event in ``wait()``, on the waiting thread, the training's, which is the thread that stops the profiler; and
  Gloo's never report ``is_completed()``, waited or not: they are not tracked, annotate.POINT_TO_POINT. A job
  of blocking sends and receives lost every trace that way: tests/test_classify_torchrun.py's mesh job.)
- Collectives issued from C++ (DDP's reducer, functional collectives) are not seen. DDP waits for its
  buckets' futures before the optimizer step, i.e. before ``finish`` has run; a worker with ``finish`` to run
  is runnable, one waiting for work (or for its peers) sleeps: every Gloo worker thread must have been seen
  off the CPU (``/proc/self/task/<tid>/stat`` state other than ``R``, settle.py) since the stop was first
  tried (once seen asleep, a worker has finished what it was running then: it runs its works one after the
  other). Not covered: a C++-issued collective nobody waited for before the optimizer step whose worker
  sleeps, waiting for its peers, at the stop.

The training thread waits for that at most ``WAIT_MAX_S`` (a wait for this rank's own collectives, already
issued: nothing of ours is sent, no lock of the training's is taken). If it is not quiet by then, the stop is
not made: the session pauses collection (no new event from then on; the open ones end normally, into queues
nobody frees) and tries again at each later step (waiting again, up to ``WAITED_TRIES`` times, then only
checking), and at exit; a peer that never completes costs a trace, never the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import settle

WAIT_MAX_S = 0.25  # per try; a stop is due at one step and retried at the later ones
WAITED_TRIES = 4  # tries that may wait; later ones only check (a stop still due never stalls every step)
POLL_S = 0.0002  # sleeps between checks: the GIL and the CPU go to the workers
PRUNE_AT = 64  # references kept before the completed ones are dropped
# backends whose profiler events end on the thread that issues the call (the work's future completes there)
UNTRACKED_BACKENDS = frozenset({"nccl"})


def tracked_backend(pg: Any) -> bool:
    """True when ``pg``'s works may end their profiler event on another thread, after the call returned. A
    group with a CPU backend beside NCCL (``init_process_group()`` on a GPU host: its default backend is
    NCCL) is tracked whole: its CPU tensors go to Gloo."""
    try:
        name = str(pg._get_backend_name()).lower()
        if name not in UNTRACKED_BACKENDS:
            return True
        return any(getattr(d, "type", None) == "cpu" for d in getattr(pg, "_device_types", ()))
    except Exception:
        return True  # unknown: a completed work costs one check


def completed(work: Any) -> bool:
    try:
        if work.is_completed():
            return True
    except Exception:
        return True  # a work that cannot say is not waited for (the stop would never come)
    try:
        work.get_future()
    except Exception:
        # a work without a future (Gloo's reduce_scatter_tensor) never reports completion, waited or not: left to
        # the check that every Gloo worker has been seen asleep, as collectives issued from C++ are
        return True
    return False


class InFlight:
    """The collectives this rank issued while the window records and whose profiler event may still be open."""

    def __init__(self, workers: Callable[[], list[int]] = settle.gloo_workers,
                 state: Callable[[int], str | None] = settle.thread_state,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self._works: list[Any] = []
        self._next_prune = PRUNE_AT
        self._seen_asleep: set[int] = set()  # workers seen off the CPU since the stop was first tried
        self._workers = workers
        self._state = state
        self._clock = clock
        self._sleep = sleep

    def track(self, pg: Any, work: Any) -> None:
        """Called by the Annotator with what a wrapped ProcessGroup method returned while recording."""
        if work is None or not hasattr(work, "is_completed") or not tracked_backend(pg):
            return
        self._works.append(work)
        if len(self._works) >= self._next_prune:
            self.prune()

    def prune(self) -> int:
        """Drop the completed works (the training's references decide when their tensors go); how many remain."""
        self._works = [w for w in self._works if not completed(w)]
        self._next_prune = max(PRUNE_AT, 2 * len(self._works))
        return len(self._works)

    def clear(self) -> None:
        """Once the profiler has stopped with every work completed."""
        self._works = []
        self._next_prune = PRUNE_AT
        self._seen_asleep.clear()

    def forget_workers(self) -> None:
        """While collection goes on, a worker seen asleep may have run recorded work since."""
        self._seen_asleep.clear()

    def busy(self, workers: list[int] | None = None) -> str | None:
        """Why the profiler must not stop now, or None."""
        pending = self.prune()
        if pending:
            return f"{pending} collective{'s' if pending > 1 else ''} recorded in the window still in flight"
        running = []
        for tid in self._workers() if workers is None else workers:
            if tid in self._seen_asleep:
                continue
            if self._state(tid) == "R":
                running.append(tid)
            else:
                self._seen_asleep.add(tid)
        if running:
            return f"{len(running)} Gloo worker thread{'s' if len(running) > 1 else ''} still running"
        return None

    def wait_quiet(self, max_s: float) -> tuple[str | None, float]:
        """Wait until nothing recorded is in flight, at most ``max_s``: (why not, or None; seconds waited)."""
        started = self._clock()
        workers = self._workers()
        while True:
            reason = self.busy(workers)
            waited = self._clock() - started
            if reason is None or waited >= max_s:
                return reason, waited
            self._sleep(POLL_S)
