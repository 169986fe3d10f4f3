"""settle.py's pieces (thread states, the bounded wait, Gloo workers by name): the session's stop reads the
workers' states through inflight.py; the bounded wait is tools/abort_repro.py's REPRO_SETTLE arm."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from commprof.record.rank import settle
from commprof.record.rank.config import GLOO_WORKER_THREAD_NAME

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


@contextmanager
def parked_thread(first: Callable[[], object] = lambda: None) -> Iterator[int]:
    """A thread that runs ``first``, then waits until the block ends; yields its native id."""
    release, started = threading.Event(), threading.Event()
    tid: list[int] = []

    def park() -> None:
        first()
        tid.append(threading.get_native_id())
        started.set()
        release.wait()

    thread = threading.Thread(target=park)
    thread.start()
    try:
        started.wait()
        yield tid[0]
    finally:
        release.set()
        thread.join()


def test_thread_state_tells_a_runnable_thread_from_a_sleeping_one() -> None:
    assert settle.thread_state(threading.get_native_id()) == "R"  # this one, running now
    with parked_thread() as tid:
        deadline = time.monotonic() + 5
        while settle.thread_state(tid) != "S" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert settle.thread_state(tid) == "S"
    # gone: join() returns when the thread's Python part ends, a moment before the OS thread leaves /proc
    deadline = time.monotonic() + 5
    while settle.thread_state(tid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert settle.thread_state(tid) is None


def test_settle_waits_while_a_worker_is_runnable_and_no_longer_than_its_bound() -> None:
    polls: list[int] = []

    def busy_three_polls(tid: int) -> str:
        polls.append(tid)
        return "R" if len(polls) <= 3 else "S"

    assert settle.settle([7], state=busy_three_polls)
    assert len(polls) == 4
    started = time.monotonic()
    assert not settle.settle([7], max_s=0.05, state=lambda tid: "R")
    assert 0.05 <= time.monotonic() - started < 1.0
    assert settle.settle([], state=lambda tid: "R")  # no Gloo worker: nothing to wait for


def test_gloo_workers_are_found_by_name() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    with parked_thread(lambda: libc.prctl(15, GLOO_WORKER_THREAD_NAME.encode(), 0, 0, 0)) as tid:  # PR_SET_NAME
        assert tid in settle.gloo_workers()
        assert threading.get_native_id() not in settle.gloo_workers()
