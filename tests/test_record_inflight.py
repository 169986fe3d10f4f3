"""The profiler stops only once nothing it recorded is in flight (commprof/record/rank/inflight.py, issue 38 item 4):
the tracker's rules on stand-in works, groups and worker threads with a fake clock, and RankSession's stop
on a real torch profiler in one process (tests/record_scripts/stop_gate.py): the wait falls after the last
recorded step, a stop that cannot be made waits for a later step with collection paused, and at exit the
profiler is left running and the trace given up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commprof.record.rank import inflight

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "record_scripts" / "stop_gate.py"


class Device:
    def __init__(self, kind: str) -> None:
        self.type = kind


class Group:
    def __init__(self, backend: str, devices: tuple[str, ...] = ("cpu",)) -> None:
        self.backend = backend
        self._device_types = [Device(d) for d in devices]

    def _get_backend_name(self) -> str:
        return self.backend


class Work:
    def __init__(self, done: bool = False) -> None:
        self.done = done

    def is_completed(self) -> bool:
        return self.done

    def get_future(self) -> object:
        return object()


class NoFuture(Work):
    """Gloo's reduce_scatter_tensor work: is_completed() stays False after wait(), and it has no future."""

    def get_future(self) -> object:
        raise RuntimeError("get_future is not supported for this work")


def test_a_work_without_a_future_is_left_to_the_workers_check() -> None:
    assert inflight.completed(NoFuture()) and not inflight.completed(Work())


class Broken:
    def is_completed(self) -> bool:
        raise RuntimeError("no state")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds


def tracker(states: dict[int, list[str]] | None = None, clock: Clock | None = None) -> inflight.InFlight:
    """Worker threads whose successive states are given (the last one repeats)."""
    states = states or {}

    def state(tid: int) -> str | None:
        seq = states[tid]
        return seq.pop(0) if len(seq) > 1 else seq[0]

    clock = clock or Clock()
    return inflight.InFlight(workers=lambda: sorted(states), state=state, clock=clock, sleep=clock.sleep)


def test_gloo_works_are_tracked_and_nccl_ones_are_not() -> None:
    t = tracker()
    t.track(Group("gloo"), Work())
    t.track(Group("nccl", ("cuda",)), Work())  # its event ends on the calling thread, at the call
    t.track(Group("nccl", ("cpu", "cuda")), Work())  # init_process_group() on a GPU host: CPU calls go to Gloo
    t.track(Group("mpi"), Work())  # a worker thread ends it: tracked
    t.track(Group("gloo"), None)  # a call that returned nothing
    assert t.prune() == 3
    assert t.busy() == "3 collectives recorded in the window still in flight"


def test_completed_works_are_let_go() -> None:
    t = tracker()
    works = [Work() for _ in range(inflight.PRUNE_AT - 1)]
    for work in works:
        work.done = True
        t.track(Group("gloo"), work)
    assert len(t._works) == inflight.PRUNE_AT - 1
    t.track(Group("gloo"), Work())  # the PRUNE_AT-th reference: completed ones go
    assert len(t._works) == 1
    assert t.busy() == "1 collective recorded in the window still in flight"
    t._works[0].done = True
    assert t.busy() is None


def test_a_work_that_cannot_say_does_not_hold_the_stop() -> None:
    t = tracker()
    t.track(Group("gloo"), Broken())
    assert t.busy() is None


def test_a_running_worker_holds_the_stop_until_seen_asleep_once() -> None:
    t = tracker({11: ["R", "R", "S", "R"], 12: ["S"]})
    assert t.busy() == "1 Gloo worker thread still running"
    assert t.busy() == "1 Gloo worker thread still running"
    assert t.busy() is None  # 11 slept: what it ran then is done
    assert t.busy() is None  # running again later: new work, not what the window recorded
    t.forget_workers()  # collection goes on: it may run recorded work again
    assert t.busy() == "1 Gloo worker thread still running"


def test_the_wait_ends_when_quiet_and_never_lasts_past_its_bound() -> None:
    clock = Clock()
    t = tracker({11: ["R"] * 5 + ["S"]}, clock)
    reason, waited = t.wait_quiet(1.0)
    assert reason is None and waited == pytest.approx(5 * inflight.POLL_S)
    clock = Clock()
    t = tracker({11: ["R"]}, clock)
    reason, waited = t.wait_quiet(0.01)
    assert reason == "1 Gloo worker thread still running"
    assert 0.01 <= waited < 0.01 + 2 * inflight.POLL_S
    clock = Clock()
    t = tracker({}, clock)
    t.track(Group("gloo"), Work())
    assert t.wait_quiet(0.0) == ("1 collective recorded in the window still in flight", 0.0)  # a check, no wait
    assert clock.sleeps == 0


def test_clear_forgets_works_and_workers() -> None:
    t = tracker({11: ["S", "R"]})
    assert t.busy() is None
    t.track(Group("gloo"), Work())
    t.clear()
    assert t.prune() == 0
    assert t.busy() == "1 Gloo worker thread still running"  # seen asleep before the clear: forgotten


def test_the_annotator_hands_over_what_a_wrapped_call_returns() -> None:
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed unavailable")
    from commprof.record.rank.annotate import Annotator

    annotator = Annotator(torch)
    seen: list[tuple[Any, Any]] = []
    annotator.track = lambda pg, work: seen.append((pg, work))
    wrapped = annotator._wrap("allreduce", "all_reduce", None, lambda pg, *a, **k: "work")
    annotator.label = lambda *a, **k: "commprof:pg=0;op=all_reduce"  # type: ignore[method-assign]
    assert wrapped("pg") == "work" and seen == []  # not annotating: nothing tracked
    annotator.annotating = True
    assert wrapped("pg") == "work" and seen == [("pg", "work")]
    annotator.track = lambda pg, work: 1 / 0  # bookkeeping that fails: the call's result still comes back
    assert wrapped("pg") == "work"


@pytest.fixture(scope="module")
def stop_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("stop_gate")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUN_DIR": str(root), "WAIT_MAX_S": "0.4"}
    env = {k: v for k, v in env.items() if not k.startswith("COMMPROF_")}
    done = subprocess.run([sys.executable, str(SCRIPT), "ends_in_the_wait", "deferred", "never"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cases = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {c["case"]: c for c in cases}


@pytest.mark.slow
def test_the_stop_waits_for_a_collective_after_the_last_recorded_step(stop_cases: dict[str, dict[str, Any]]) -> None:
    case = stop_cases["ends_in_the_wait"]
    assert case["status"] == "complete" and case["stop_deferred"] is None and case["warnings"] == []
    wait_ms = case["stall_ms"]["stop_wait"]
    assert 50 <= wait_ms < 400  # the work completed 60 ms into the wait
    assert sorted(case["profiler_steps"]) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # the last recorded step ended before the wait: it is not the wait's length longer
    assert case["profiler_steps"]["ProfilerStep#4"] < wait_ms - 20, case


@pytest.mark.slow
def test_a_stop_that_cannot_be_made_waits_for_a_later_step(stop_cases: dict[str, dict[str, Any]]) -> None:
    case = stop_cases["deferred"]
    assert case["status"] == "complete" and case["last_profiler_step"] == 4
    assert case["stop_deferred"] == {"reason": "1 collective recorded in the window still in flight",
                                     "due_at_optimizer_step": 5, "stopped_at_optimizer_step": 6,
                                     "collection_paused": True}
    assert case["stall_ms"]["stop_wait"] >= 400  # the first try waited its bound
    assert "waits for a later step" in case["warnings"][0]
    # the window holds what it was asked for: collection paused after its last step
    assert sorted(case["profiler_steps"]) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert case["user_steps"] == ["user_step_2", "user_step_3", "user_step_4"]


@pytest.mark.slow
def test_at_exit_a_stop_that_cannot_be_made_loses_the_trace_not_the_job(stop_cases: dict[str, dict[str, Any]]) -> None:
    case = stop_cases["never"]
    assert case["status"] == "stop_deferred_no_trace"
    assert case["trace_lost"] == ("the profiler was not stopped: 1 collective recorded in the window still in "
                                  "flight (stopping it could crash the job)")
    assert "profiler_steps" not in case
