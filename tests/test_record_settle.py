"""The profiler stop waits (bounded) for Gloo's worker threads to finish what they record (settle.py):
the 1-in-~100 SIGABRT/SIGSEGV of recorded Gloo jobs. The race itself is statistical:
tools/abort_repro.py measures it (minutes); here, the pieces and where the session calls them."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from commprof.record.rank import settle
from commprof.record.rank.config import GLOO_WORKER_THREAD_NAME

REPO = Path(__file__).resolve().parents[1]
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


# One rank of a one-rank Gloo job, the session driven as the shim drives it; settle() is watched: it must
# run once, on the training thread, while the profiler still records, at the step that ends the window,
# and see the group's Gloo worker threads.
_SESSION = r"""
import json, os, sys, threading
import torch, torch.distributed as dist
from commprof.record.rank import settle, session as session_mod
from commprof.record.rank.config import RankConfig, WindowSettings
from commprof.record.rank.identity import RankIdentity

run_dir, out = sys.argv[1], sys.argv[2]
calls = []
original = settle.settle
def watched(tids, *args, **kwargs):
    calls.append({"tids": len(tids), "recording": bool(torch._C._autograd._profiler_enabled()),
                  "training_thread": threading.current_thread() is threading.main_thread(),
                  "step": sess.steps, "state": sess.state})
    return original(tids, *args, **kwargs)
settle.settle = watched
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3])
dist.init_process_group("gloo", rank=0, world_size=1)
sess = session_mod.RankSession(torch, RankConfig(run_dir, WindowSettings(wait=1, warmup=1, active=3)),
                               RankIdentity(0, 0, 1, 1, 0, 0, False))
sess.activate()
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(7):
    model(torch.ones(3, 4)).sum().backward()
    dist.all_reduce(model.weight.grad)
    opt.step()
    opt.zero_grad()
stall = sess.sidecar.window.get("stall_ms")
json.dump({"calls": calls, "stall": stall, "status": sess.sidecar.window["status"]}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
def test_the_session_lets_gloo_workers_settle_right_before_its_profiler_stops(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out.json"
    port = str(20000 + os.getpid() % 20000)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _SESSION, str(tmp_path / "run"), str(out), port], env=env,
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "complete", result
    # wait 1, warmup 1, active 3: the window ends with optimizer step 5, and the stop comes after settle()
    assert result["calls"] == [{"tids": result["calls"][0]["tids"], "recording": True, "training_thread": True,
                                "step": 5, "state": "active"}]
    assert result["calls"][0]["tids"] >= 1  # the group's pt_gloo_runloop threads
    assert result["stall"]["settle"] >= 0
    assert result["stall"]["total"] >= result["stall"]["settle"]
