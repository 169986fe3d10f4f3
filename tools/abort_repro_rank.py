"""One rank of the amplified reproducer for the rare SIGABRT at the profiler's stop (see tools/abort_repro.py).

A DDP (Gloo) training loop whose optimizer post-step hook opens and closes a torch profiler window with
the options commprof's rank session uses (schedule skip_first/wait 0/warmup 1/active 3, record_shapes,
on_trace_ready), ``REPRO_WINDOWS`` times per job. Switches (environment, 0/1):

  REPRO_SHAPES    record_shapes (default 1)
  REPRO_INFLIGHT  an async all_reduce issued before ``opt.step()`` and waited after it, so it may be on
                  Gloo's worker thread while the hook stops the profiler (default 1)
  REPRO_DDP       DDP model (its reducer's allreduces on the worker threads during backward; default 1)
  REPRO_NOPS      how many such async all_reduces (default 1)
  REPRO_NUMEL     elements of each (default 4096)
  REPRO_HOOKOPS   async all_reduces issued inside the post-step hook just before the step that stops the
                  profiler and waited right after it (like an optimizer that all-gathers parameters
                  asynchronously in its step: they run on Gloo's worker threads during the stop; default 0)
  REPRO_HOOKWAIT  how the hook waits for those: "after" (work.wait() after the stop), "future"
                  (fut.wait() before the stop, as DDP's reducer waits for its buckets), "work"
                  (work.wait() before the stop; default after)
  REPRO_SETTLE    the fix: before the step that stops the profiler, wait (bounded) until the Gloo worker
                  threads are not runnable (commprof/record/rank/settle.py; default 0)
  REPRO_NICE      renice the Gloo worker threads to 19, so that under load they are preempted often,
                  e.g. between a collective's future completing and its profiler event ending (default 0)
  REPRO_ANNOTATE  commprof's Annotator wraps ProcessGroup calls while recording (default 0)
  REPRO_EXPORT    on_trace_ready exports a chrome trace to /tmp (default 0)
  REPRO_SESSION   commprof's own rank session opens and closes the windows instead of the script: one
                  ``RankSession`` per window (wait 1, warmup 1, active 3, Flight Recorder as the environment
                  says), so the stop is ``commprof record``'s own, trace export included; REPRO_HOOKOPS are
                  issued from the optimizer's own post-step hook (it runs before commprof's global one) on the
                  step whose end stops the profiler; REPRO_SHAPES, REPRO_ANNOTATE, REPRO_EXPORT and
                  REPRO_SETTLE do not apply (default 0)
  REPRO_UNGATED   with REPRO_SESSION: the session stops the profiler without waiting for the collectives
                  it recorded (commprof/record/rank/inflight.py's wait answers "quiet" at once), as before
                  the fix (default 0)

Prints ``stops=<n>`` per rank at the end (with REPRO_SESSION also ``deferred=<n>``: windows whose stop waited
for a later step, ``lost=<n>``: windows that ended without a trace, ``wait_ms=<max>``: the longest wait
before a stop).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def flag(name: str, default: str) -> bool:
    return os.environ.get(name, default) == "1"


class State:
    def __init__(self) -> None:
        self.prof: Any = None
        self.steps = 0
        self.stops = 0


def main() -> None:
    faulthandler.enable(all_threads=True)
    windows = int(os.environ.get("REPRO_WINDOWS", "100"))
    shapes = flag("REPRO_SHAPES", "1")
    inflight = flag("REPRO_INFLIGHT", "1")
    nops = int(os.environ.get("REPRO_NOPS", "1"))
    ddp = flag("REPRO_DDP", "1")
    annotate = flag("REPRO_ANNOTATE", "0")
    export = flag("REPRO_EXPORT", "0")
    settle_first = flag("REPRO_SETTLE", "0")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if flag("REPRO_NICE", "0"):
        from commprof.record.rank import settle

        dist.barrier()  # the workers have started (and named themselves)
        for tid in settle.gloo_workers():
            os.setpriority(os.PRIO_PROCESS, tid, 19)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model: torch.nn.Module = DistributedDataParallel(net, bucket_cap_mb=0.01) if ddp else net
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

    annotator = None
    if annotate:
        from commprof.record.rank.annotate import Annotator

        annotator = Annotator(torch)
    out_dir = tempfile.mkdtemp(prefix=f"repro-r{rank}-")
    hook_tensors: list[torch.Tensor] = []
    state = State()

    def ready(prof: profile) -> None:
        if export:
            prof.export_chrome_trace(os.path.join(out_dir, "t.json"))

    def open_window() -> None:
        steps = state.steps
        sched = schedule(skip_first=steps, wait=0, warmup=1, active=3, repeat=1)
        prof = profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=ready,
                       record_shapes=shapes)
        prof.step_num = steps
        prof.current_action = sched(steps)
        prof.start()
        state.prof = prof

    def sync(prof: profile) -> None:
        if annotator is not None:
            recording = prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
            if recording:
                annotator.install()
            annotator.annotating = recording

    def hook(*_: object) -> None:
        state.steps += 1
        prof = state.prof
        if prof is None:
            open_window()
            assert state.prof is not None
            sync(state.prof)
            return
        last = prof.current_action == ProfilerAction.RECORD_AND_SAVE
        pending = [dist.all_reduce(t, async_op=True) for t in hook_tensors] if last else []
        if hookwait == "future":
            for work in pending:
                work.get_future().wait()
        elif hookwait == "work":
            for work in pending:
                work.wait()
        if last and settle_first:
            from commprof.record.rank import settle

            settle.settle(settle.gloo_workers())
        prof.step()
        for work in pending:
            work.wait()
        if prof.current_action == ProfilerAction.NONE:
            prof.stop()
            state.stops += 1
            state.prof = None
            if annotator is not None:
                annotator.uninstall()
        else:
            sync(prof)

    x = torch.randn(8, 64)
    hookops = int(os.environ.get("REPRO_HOOKOPS", "0"))
    hookwait = os.environ.get("REPRO_HOOKWAIT", "after")
    numel = int(os.environ.get("REPRO_NUMEL", "4096"))
    spares = [torch.ones(numel) for _ in range(nops)]
    hook_tensors.extend(torch.ones(numel) for _ in range(hookops))
    steps = windows * 5
    if flag("REPRO_SESSION", "0"):
        session_loop(model, opt, x, spares if inflight else [], hook_tensors, windows, rank)
        return
    register_optimizer_step_post_hook(hook)
    for _ in range(steps):
        loss = model(x).sum()
        loss.backward()
        works = [dist.all_reduce(t, async_op=True) for t in spares] if inflight else []
        opt.step()
        opt.zero_grad()
        for work in works:
            work.wait()
    print(f"rank {rank} stops={state.stops}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)


PERIOD = 8  # steps per window in REPRO_SESSION: 5 for the window (wait 1, warmup 1, active 3), 3 to spare


def session_loop(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, spares: list[torch.Tensor],
                 hook_tensors: list[torch.Tensor], windows: int, rank: int) -> None:
    """The windows opened and closed by commprof's RankSession, one session per window, as ``commprof
    record`` runs it (its global optimizer post-step hook; the trace exported and gzipped; Flight Recorder
    dumped when TORCH_FR_BUFFER_SIZE is set). A session starts every PERIOD steps (when the last one is
    over): its stop is due at the end of the period's 5th step, whose optimizer hook issues the hook ops on
    every rank alike (a stop that waits for a later step changes no collective the ranks issue)."""
    import shutil

    from commprof.record.rank.config import RankConfig, WindowSettings
    from commprof.record.rank.identity import RankIdentity
    from commprof.record.rank.session import DONE, RankSession

    if flag("REPRO_UNGATED", "0"):
        from commprof.record.rank import inflight

        inflight.InFlight.wait_quiet = lambda self, max_s: (None, 0.0)  # type: ignore[method-assign]
    identity = RankIdentity(rank=rank, local_rank=rank, world_size=dist.get_world_size(),
                            local_world_size=dist.get_world_size(), node_rank=0, restart_count=0,
                            single_process=False)
    root = tempfile.mkdtemp(prefix=f"repro-session-r{rank}-")
    settings = WindowSettings(wait=1, warmup=1, active=3)
    opened: list[RankSession] = []
    pending: list[Any] = []
    step = 0

    def issue_before_stop(*_: object) -> None:  # the optimizer's own hook: runs before commprof's global one
        if step % PERIOD == 4:
            pending.extend(dist.all_reduce(t, async_op=True) for t in hook_tensors)

    opt.register_step_post_hook(issue_before_stop)
    counts = {"stops": 0, "deferred": 0, "lost": 0}
    wait_ms = 0.0
    for step in range(windows * PERIOD):  # noqa: B007 (the hook reads it)
        last = opened[-1] if opened else None
        if last is not None and last.state == DONE:
            last.prof = None  # the finished window's events
        if step % PERIOD == 0 and (last is None or last.state == DONE):
            session = RankSession(torch, RankConfig(os.path.join(root, f"w{len(opened)}"), settings), identity)
            session.activate()
            opened.append(session)
        loss = model(x).sum()
        loss.backward()
        works = [dist.all_reduce(t, async_op=True) for t in spares]
        opt.step()
        opt.zero_grad()
        for work in works + pending:
            work.wait()
        pending.clear()
    for session in opened:
        if session.state != DONE:
            continue
        window = session.sidecar.window
        counts["stops"] += 1
        counts["deferred"] += window.get("stop_deferred") is not None
        counts["lost"] += session.trace.export_ms is None
        wait_ms = max(wait_ms, float((window.get("stall_ms") or {}).get("stop_wait") or 0.0))
        session.trace.wait()
    print(f"rank {rank} stops={counts['stops']} deferred={counts['deferred']} lost={counts['lost']} "
          f"wait_ms={wait_ms:.1f}", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
