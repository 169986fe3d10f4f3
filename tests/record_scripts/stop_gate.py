"""RankSession's stop with a collective still in flight (tests/test_record_inflight.py), one process, no
torch.distributed: a stand-in Gloo ``Work`` is handed to the session's in-flight tracker on the last
recorded step, as the Annotator hands it a real one. ``RUN_DIR`` gets one run per case; prints one JSON
line per case.

* ``ends_in_the_wait``: the work completes 60 ms into the stop's wait: the profiler stops then.
* ``deferred``: it completes only after the next step: the stop waits for that step (collection paused).
* ``never``: it never completes: the exit handler leaves the profiler running and says the trace is lost.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerAction

from commprof.record.rank import inflight
from commprof.record.rank.config import RankConfig, WindowSettings
from commprof.record.rank.identity import RankIdentity
from commprof.record.rank.session import RankSession

inflight.WAIT_MAX_S = float(os.environ.get("WAIT_MAX_S", "0.3"))
IDENTITY = RankIdentity(rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0, restart_count=0,
                        single_process=True)


class GlooGroup:
    def _get_backend_name(self) -> str:
        return "gloo"


class Work:
    def __init__(self) -> None:
        self.done = threading.Event()

    def is_completed(self) -> bool:
        return self.done.is_set()

    def get_future(self) -> object:  # a work with a future reports its completion (inflight.completed)
        return object()


def run(case: str, root: Path) -> dict[str, Any]:
    session = RankSession(torch, RankConfig(str(root / case), WindowSettings(wait=1, warmup=1, active=3,
                                                                             flight_recorder=False)), IDENTITY)
    session.activate()
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    work = Work()
    for step in range(8):
        if session.prof is not None and session.prof.current_action == ProfilerAction.RECORD_AND_SAVE \
                and not session.inflight.prune():
            session.inflight.track(GlooGroup(), work)
            if case == "ends_in_the_wait":
                threading.Timer(0.06, work.done.set).start()
        with torch.profiler.record_function(f"user_step_{step}"):
            model(torch.randn(4, 16)).sum().backward()
        opt.step()
        opt.zero_grad()
        if case == "deferred" and session.sidecar.window["stop_deferred"] is not None:
            work.done.set()  # the training waits for it after its step, as it would
        if case == "never" and step == 6:
            session._at_exit()
            break
    session.trace.wait()
    window = session.sidecar.window
    out: dict[str, Any] = {"case": case, "status": window["status"], "stall_ms": window["stall_ms"],
                           "stop_deferred": window["stop_deferred"], "trace_lost": window.get("trace_lost"),
                           "last_profiler_step": window["last_profiler_step"],
                           "warnings": session.sidecar.data["warnings"]}
    trace = root / case / "raw" / "traces" / "rank-0.json.gz"
    if trace.exists():
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        named = [e for e in events if "name" in e]
        out["profiler_steps"] = {e["name"]: e["dur"] / 1e3 for e in named if e["name"].startswith("ProfilerStep#")}
        out["user_steps"] = sorted({e["name"] for e in named if e["name"].startswith("user_step_")})
    return out


def main() -> None:
    root = Path(os.environ["RUN_DIR"])
    for case in sys.argv[1:]:
        print(json.dumps(run(case, root)), flush=True)


if __name__ == "__main__":
    main()
