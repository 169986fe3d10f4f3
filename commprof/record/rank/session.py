"""One rank's profiling session: a single window, clocked by optimizer steps or by time.

Created once, right after the user's script imported torch. Everything it does from the training
thread is wrapped so that a failure costs one warning and the profiling, never the training.

Steps mode (default): the first optimizer that steps is the clock (a second optimizer stepping in
the same iteration does not advance it). After ``wait`` optimizer steps the window opens: ``warmup``
steps prepared but not recorded, then ``active`` steps recorded, then the trace is exported from
inside the post-step hook of the last one. ``ProfilerStep#N`` in the trace is iteration N (0-based),
the one that ends with optimizer step N+1.

Time mode (``--start-after``/``--duration``): the profiler is bound to the thread that starts it, so
the window opens and closes at the first optimizer step or communication call of the training thread
after the deadline.

The stop: torch's profiler stop frees every thread's event queue, while a Gloo worker thread may still end a
recorded collective's event in it (a crash: inflight.py). So the profiler stops only once nothing it recorded
is in flight, waiting a bounded time after the last recorded step's marker has closed; otherwise the stop is
due: collection pauses and the stop is tried again at the next steps (or ticks), and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import importlib
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from . import flight, inflight, signals
from . import windows as win
from .annotate import Annotator
from .config import RankConfig
from .files import utc_now_iso
from .groups import GroupThreads, describe_groups
from .identity import RankIdentity
from .profiler_guard import ProfilerEntryGuard
from .sidecar import RankPaths, Sidecar, describe_rank
from .trace import TraceWriter

WAITING, WARMUP, ACTIVE, DONE = "waiting", "warmup", "active", "done"


class RankSession:
    def __init__(self, torch: Any, config: RankConfig, identity: RankIdentity) -> None:
        self.torch = torch
        self.window = config.window
        self.identity = identity
        self.paths = RankPaths(config.run_dir, identity.rank)
        self.sidecar = Sidecar(config, identity, self.paths)
        self.state = WAITING
        self.steps = 0
        self.distributed = bool(getattr(torch.distributed, "is_available", lambda: False)())
        self.threads = GroupThreads()
        self.annotator = Annotator(torch) if self.distributed else None
        self.prof: Any = None
        self._primary: weakref.ref[Any] | None = None
        self._owner: int | None = None  # thread that drives the profiler
        self._pid = os.getpid()  # a forked child (DataLoader worker) inherits us but is not the rank
        self._started = time.monotonic()
        self._window_opened = 0.0
        self._internal = False
        self._discard = False
        self._user_profiler_seen = False
        self._warned = False
        self._hook_handle: Any = None
        self._profiler_guard = ProfilerEntryGuard(lambda: self._internal, self._user_profiler_starts)
        self.trace = TraceWriter(self.sidecar, self._warn)
        self.fr_enabled = self.window.flight_recorder and flight.buffer_size() > 0
        self.inflight = inflight.InFlight()
        if self.annotator is not None:
            self.annotator.track = self.inflight.track
        self._stop_due: int | None = None  # optimizer step at which a stop was due and not made
        self._collection_paused = False
        self._stop_tries = 0
        self._stop_wait_s = 0.0
        self._activities: list[Any] = []
        # repeating windows (record --every / --on-demand): each in windows/step-<S>/, a run directory of its own;
        # while one is open, sidecar/paths/trace are the window's, the run-level ones wait in _run_files
        self.config = config
        self.control = win.Control(config.run_dir, identity.rank) if self.window.on_demand else None
        self._run_files: tuple[Sidecar, RankPaths, TraceWriter] | None = None
        self._request: win.Request | None = None
        self._window_warmup, self._window_active = self.window.warmup, self.window.active
        self._writers: list[TraceWriter] = []
        self._time_windows = 0  # time windows opened (--every T with --start-after)
        if self.window.repeating:
            self.sidecar.data["windows"] = []

    # ---- setup -------------------------------------------------------------------------------

    def activate(self) -> None:
        self.paths.make_dirs()
        self.sidecar.data["versions"]["torch"] = str(getattr(self.torch, "__version__", ""))
        self.sidecar.data["versions"]["cuda"] = getattr(getattr(self.torch, "version", None), "cuda", None)
        if self.distributed:
            self.threads.install(self.torch)
        optimizer_module = importlib.import_module("torch.optim.optimizer")
        self._hook_handle = optimizer_module.register_optimizer_step_post_hook(self._on_step)
        self._profiler_guard.install()
        if self.window.mode == "time" and self.annotator is not None:
            self.annotator.tick = self._guarded_tick
            self.annotator.install()
        atexit.register(self._at_exit)
        signals.TermFlush(self._on_signal).install()
        self.sidecar.write()
        if self.window.mode == "steps" and self.window.wait == 0 and self.window.every is not None:
            self._owner = threading.get_ident()
            self._open_window(win.every_request(0, 0, self.window.every))
        elif self.window.mode == "steps" and self.window.wait == 0 and not self.window.repeating:
            self._owner = threading.get_ident()  # the thread importing torch: the script's own
            self._open_window()

    def _user_profiler_starts(self) -> None:
        """A profiler that is not ours starts: ours steps aside (see profiler_guard)."""
        self._user_profiler_seen = True
        if self.state in (WARMUP, ACTIVE):
            self._yield_to_user_profiler()

    # ---- clock -------------------------------------------------------------------------------

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.state == DONE or os.getpid() != self._pid:
            return
        try:
            primary = self._primary() if self._primary is not None else None
            if primary is None:
                self._primary = weakref.ref(optimizer)
                if self._owner is None:
                    self._owner = threading.get_ident()
            elif primary is not optimizer:
                return
            if threading.get_ident() != self._owner:
                return
            self.steps += 1
            self.sidecar.window["optimizer_steps"] = self.steps
            if self.window.mode == "steps":
                self._advance_steps()
                return
            self._tick()
        except Exception as err:
            self._fail(err)

    def _advance_steps(self) -> None:
        if self.window.repeating:
            request = self._due_request()
            if self.state == WAITING:
                if request is not None:
                    self._open_window(request)
                return
            if request is not None:  # asked while a window records: said, not queued
                self._note_window(request, "declined", "a window was recording at that step")
        if self.state == WAITING:
            if self.steps >= self.window.wait:
                self._open_window()
            return
        if self.state not in (WARMUP, ACTIVE):
            return
        stall_started = time.perf_counter()
        if self._stop_due is not None or self._last_recorded_step():
            self._end_window(stall_started)
            return
        self.inflight.prune()  # what the training has let go of is not kept until the stop
        with self._as_internal():
            self.prof.step()
        if self.trace.export_ms is not None or self._recording_over():  # a schedule that ended on its own
            self._end_window(stall_started)
        else:
            self._sync_state()

    def _last_recorded_step(self) -> bool:
        actions = importlib.import_module("torch.profiler").ProfilerAction
        return self.state == ACTIVE and bool(self.prof.current_action == actions.RECORD_AND_SAVE)

    def _end_window(self, stall_started: float) -> None:
        if self._stop_profiler():
            self._close_window(stall_started)

    def _guarded_tick(self) -> None:
        if os.getpid() != self._pid:
            return
        try:
            if self._owner is None:
                self._owner = threading.get_ident()
            if threading.get_ident() == self._owner:
                self._tick()
        except Exception as err:
            self._fail(err)

    def _tick(self) -> None:
        """Time mode: open or close the window when its moment has passed (with --every T: the next one's)."""
        now = time.monotonic()
        start_after = self.window.start_after_s or 0.0
        if self.state == WAITING and self.window.every_s is not None:
            due = start_after + self._time_windows * self.window.every_s
            if now - self._started >= due:
                passed = int((now - self._started - start_after) // self.window.every_s)  # late ticks skip ahead
                self._time_windows = passed + 1
                self._open_window(win.Request(int(start_after + passed * self.window.every_s), "every",
                                              unit="time"))
        elif self.state == WAITING and now - self._started >= start_after:
            self._open_window()
        elif self.state == ACTIVE and (self._stop_due is not None
                                       or now - self._window_opened >= (self.window.duration_s or 0.0)):
            self._end_window(time.perf_counter())

    # ---- window ------------------------------------------------------------------------------

    def _user_profiler_running(self) -> bool:
        if self._user_profiler_seen:
            return True
        enabled = getattr(self.torch._C._autograd, "_profiler_enabled", None)
        return bool(enabled()) if enabled is not None else False

    def _due_request(self) -> win.Request | None:
        """The window due at this optimizer step: the schedule's (--every), else a trigger's (--on-demand; the
        control is read at every step so that the rank's progress stays current)."""
        scheduled = None
        if self.window.every is not None:
            scheduled = win.every_request(self.steps, self.window.wait, self.window.every)
        asked = self.control.on_step(self.steps) if self.control is not None else None
        if asked is not None and scheduled is not None:
            self._note_window(asked, "declined", "a scheduled window opens at that step")
        return scheduled or asked

    def _open_window(self, request: win.Request | None = None) -> None:
        if request is not None:
            self._enter_window(request)
        if self._user_profiler_running():
            self._finish(
                "skipped_user_profiler",
                "the script runs its own torch profiler; commprof records no trace for this rank",
            )
            return
        profiler = importlib.import_module("torch.profiler")
        activities = [profiler.ProfilerActivity.CPU]
        cuda = getattr(self.torch, "cuda", None)
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            activities.append(profiler.ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.window.mode == "steps":
                schedule = profiler.schedule(
                    skip_first=self.steps, wait=0, warmup=self._window_warmup, active=self._window_active, repeat=1
                )
                prof = profiler.profile(
                    activities=activities, schedule=schedule, on_trace_ready=self._on_trace_ready, record_shapes=True
                )
                # number ProfilerStep#N by iteration, not from 0 at the window
                prof.step_num = self.steps
                prof.current_action = schedule(self.steps)
            else:  # no schedule: no ProfilerStep markers, which would claim steps that do not exist
                prof = profiler.profile(activities=activities, on_trace_ready=self._on_trace_ready, record_shapes=True)
            with self._as_internal():
                prof.start()
        self.prof = prof
        self._activities = activities
        self._window_opened = time.monotonic()
        # a repeating window starts with the stop's own state afresh (the last window's stop may have been deferred)
        self._stop_due, self._collection_paused, self._stop_tries, self._stop_wait_s = None, False, 0, 0.0
        window = self.sidecar.window
        window["activities"] = [str(a).split(".")[-1].lower() for a in activities]
        window["opened_at_optimizer_step"] = self.steps
        self._sync_state()
        self.sidecar.merge_groups(self._groups())
        self.sidecar.write()

    def _sync_state(self) -> None:
        """Follow the profiler's schedule: annotate communication only while it records."""
        action = self.prof.current_action
        actions = importlib.import_module("torch.profiler").ProfilerAction
        recording = action in (actions.RECORD, actions.RECORD_AND_SAVE)
        new_state = ACTIVE if recording else WARMUP
        if new_state == ACTIVE and self.state != ACTIVE:
            window = self.sidecar.window
            window["recording_started_at"] = utc_now_iso()
            if self.window.mode == "steps":
                window["first_profiler_step"] = self.prof.step_num
        changed = new_state != self.state
        self.state = new_state
        self.sidecar.window["status"] = new_state
        if changed:  # a rank killed with SIGKILL leaves this: its phase must be the true one
            self.sidecar.window["optimizer_steps"] = self.steps
            self.sidecar.write()
        if self.annotator is not None:
            if recording:
                self.annotator.install()
                self.annotator.annotating = True
            else:
                self.annotator.annotating = False

    def _recording_over(self) -> bool:
        actions = importlib.import_module("torch.profiler").ProfilerAction
        return self.state == ACTIVE and bool(self.prof.current_action == actions.NONE)

    def _on_trace_ready(self, prof: Any) -> None:
        if not self._discard:
            self.trace.export(prof)

    def _close_window(self, stall_started: float, status: str = "complete") -> None:
        sidecar, trace = self.sidecar, self.trace  # the window's (a repeating window's until it is left)
        window = sidecar.window
        window["recording_ended_at"] = utc_now_iso()
        if self.window.mode == "steps":
            # a finished window's profiler has already moved to the step after its last one
            last = self.prof.step_num - 1 if status == "complete" else self.prof.step_num
            window["last_profiler_step"] = max(last, window.get("first_profiler_step") or 0)
        if self.annotator is not None:
            window["annotated_calls"] = self.annotator.calls
        if self._stop_due is not None:
            window["stop_deferred"] = {**window["stop_deferred"], "stopped_at_optimizer_step": self.steps}
        after_trace = time.perf_counter()
        self._dump_flight_recorder()
        after_fr = time.perf_counter()
        final = status if trace.export_ms is not None else f"{status}_no_trace"
        if self.window.repeating and status == "complete":
            window["status"] = final
            self._between_windows()
        else:
            self._finish(final, None, leave=False)
        ended = time.perf_counter()
        window["stall_ms"] = {
            "total": round((ended - stall_started) * 1e3, 3),
            "stop_and_export": round((after_trace - stall_started) * 1e3, 3),
            "export": round(trace.export_ms or 0.0, 3),
            "flight_recorder": round((after_fr - after_trace) * 1e3, 3),
            "stop_wait": round(self._stop_wait_s * 1e3, 3),
        }
        sidecar.write()
        if self._run_files is not None:
            self._leave_window(final)

    def _finish(self, status: str, warning: str | None, leave: bool = True) -> None:
        """The window is over (or never happens): put everything of ours away."""
        self.state = DONE
        self.sidecar.window["status"] = status
        if self.annotator is not None:
            self.annotator.tick = None
            self.annotator.uninstall()
        # The step hook stays registered and returns at once from now on: removing it here, while
        # torch iterates over the global hooks that called us, breaks that iteration
        # ("OrderedDict mutated during iteration") whenever the user registered a hook after ours.
        self._profiler_guard.uninstall()
        if warning:
            self._warn(warning)
        self.sidecar.merge_groups(self._groups())
        self.sidecar.write()
        if leave and self._run_files is not None:
            self._leave_window(status)

    # ---- repeating windows (record --every / --on-demand; rank/windows.py) -------------------------

    def _enter_window(self, request: win.Request) -> None:
        """Make the window's folder this rank's place: its sidecar, trace and Flight Recorder dump go there."""
        folder = os.path.join(self.paths.run_dir, win.WINDOWS_DIR, request.name)
        paths = RankPaths(folder, self.identity.rank)
        paths.make_dirs()
        sidecar = Sidecar(self.config, self.identity, paths)
        run = self.sidecar.data
        for key in ("versions", "device", "gpu_name", "backend", "training_tid", "process_groups", "started_at"):
            sidecar.data[key] = copy.deepcopy(run[key])
        self._window_warmup = self.window.warmup if request.warmup is None else request.warmup
        self._window_active = self.window.active if request.active is None else request.active
        window = sidecar.window
        window.update({"name": request.name, "reason": request.reason, "trigger": request.id or None,
                       "optimizer_steps": self.steps})
        if request.unit == "step":
            window.update({"warmup": self._window_warmup, "active": self._window_active, "asked_step": request.step})
        if request.unit == "step" and self.steps > request.step:
            window["opened_late"] = f"asked for step {request.step}, seen at step {self.steps}"
        win.window_manifest(self.paths.run_dir, folder, request, self._window_active, self._window_warmup)
        self._run_files = (self.sidecar, self.paths, self.trace)
        self._writers.append(self.trace)
        self.sidecar, self.paths, self.trace = sidecar, paths, TraceWriter(sidecar, self._warn)
        self._request = request

    def _between_windows(self) -> None:
        """A repeating window closed: nothing of ours runs until the next one (the step hook returns at once)."""
        self.state = WAITING
        if self.annotator is not None:
            self.annotator.annotating = False
            if self.window.mode != "time":  # time windows: communication calls are the clock of scripts without
                self.annotator.uninstall()  # an optimizer, as before the first window

    def _leave_window(self, status: str) -> None:
        """Back to the run's own files; the window is summed up in the run sidecar's ``windows``."""
        assert self._run_files is not None and self._request is not None
        done, trace = self.sidecar, self.trace
        self._writers.append(trace)
        self.sidecar, self.paths, self.trace = self._run_files
        self._run_files = None
        summary = self._summary(self._request, status, done.window)
        if trace.export_ms is not None:
            summary["trace"] = self.paths.relative(trace.path)
            with self.sidecar.lock:
                self.sidecar.set_file("trace", trace.path)  # the newest window's: the rank has a trace
        with self.sidecar.lock:
            self.sidecar.data["windows"].append(summary)
            self.sidecar.data["process_groups"] = copy.deepcopy(done.data["process_groups"])
            run_window = self.sidecar.window
            run_window["status"] = "waiting" if self.state == WAITING else status
            run_window["optimizer_steps"] = self.steps
        if self.window.keep_windows:
            dropped = win.prune(self.paths.run_dir, self.identity.rank, self.window.keep_windows)
            if dropped:
                with self.sidecar.lock:
                    for entry in self.sidecar.data["windows"]:
                        if entry.get("name") in dropped and not entry.get("dropped"):
                            entry["dropped"] = f"--keep-windows {self.window.keep_windows}"
                            entry.pop("trace", None)
        self._request = None
        self.sidecar.write()

    def _note_window(self, request: win.Request, status: str, why: str) -> None:
        """A window asked for and not recorded (declined, skipped): said in the run sidecar, never raised."""
        sidecar = self._run_files[0] if self._run_files is not None else self.sidecar
        entry = self._summary(request, status, {})
        entry["why"] = why
        with sidecar.lock:
            sidecar.data["windows"].append(entry)
        sidecar.write()

    def _summary(self, request: win.Request, status: str, window: dict[str, Any]) -> dict[str, Any]:
        out = {"name": request.name, request.unit if request.unit == "step" else "seconds": request.step,
               "reason": request.reason,
               "trigger": request.id or None, "status": status, "seen_at_optimizer_step": self.steps}
        for key in ("opened_at_optimizer_step", "first_profiler_step", "last_profiler_step", "recording_started_at",
                    "recording_ended_at", "opened_late"):
            if window.get(key) is not None:
                out[key] = window[key]
        return out

    def _unreached_requests(self) -> None:
        """At exit: the windows asked for that the job ended before (said, as declined ones are)."""
        if self.control is None:
            return
        for request in self.control.close(self.steps):
            self._note_window(request, "not_reached", f"the job ended at optimizer step {self.steps}")

    def _wait_writers(self, timeout_s: float = 300.0) -> None:
        for writer in (*self._writers, self.trace):
            writer.wait(timeout_s=timeout_s)

    def _stop_profiler(self, force: bool = False, last_try: bool = False) -> bool:
        """The one place the profiler is stopped, and the trace exported when the window ran its course. Only
        once nothing recorded is in flight (inflight.py), waiting for that a bounded time after the last
        ProfilerStep marker has closed (the wait is no recorded step's). False when not stopped: the stop is due,
        collection paused, tried again later. ``force``: stop after the wait whatever is in flight (the
        script's own profiler is starting: it cannot while ours runs); ``last_try`` (exit, signal): wait
        however many tries came before."""
        prof = self.prof
        marker = getattr(prof, "step_rec_fn", None)
        if marker is not None:
            marker.__exit__(None, None, None)
            prof.step_rec_fn = None
        if self.state == ACTIVE:  # warm-up records nothing: nothing of it is in flight
            self._stop_tries += 1
            if self._stop_due is not None and not self._collection_paused:
                self.inflight.forget_workers()
            waits = last_try or self._stop_tries <= inflight.WAITED_TRIES
            busy, waited_s = self.inflight.wait_quiet(inflight.WAIT_MAX_S if waits else 0.0)
            self._stop_wait_s += waited_s
            if busy is not None and not force:
                self._defer_stop(busy)
                return False
            if busy is not None:
                self._warn(f"the profiler was stopped with {busy} (the script's own profiler starts): torch may "
                           "crash ending their events")
        actions = importlib.import_module("torch.profiler").ProfilerAction
        with self._as_internal(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.window.mode == "steps" and prof.current_action == actions.RECORD_AND_SAVE:
                prof.step()  # the schedule's own end: the profiler stops, on_trace_ready exports the trace
            prof.stop()
        self.inflight.clear()
        return True

    def _defer_stop(self, busy: str) -> None:
        """Not stopped: collection pauses (new events: none; the open ones end into queues nobody frees)."""
        window = self.sidecar.window
        if self._stop_due is None:
            self._stop_due = self.steps
            toggle = getattr(self.prof, "toggle_collection_dynamic", None)
            if toggle is not None:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        toggle(False, self._activities)
                    self._collection_paused = True
                except Exception:
                    pass
            if self.annotator is not None and self._collection_paused:
                self.annotator.annotating = False  # nothing recorded from now on: nothing new to track
            window["stop_deferred"] = {"reason": busy, "due_at_optimizer_step": self.steps,
                                       "stopped_at_optimizer_step": None,
                                       "collection_paused": self._collection_paused}
            self._warn(f"the profiler's stop waits for a later step: {busy} after "
                       f"{self._stop_wait_s * 1e3:.0f} ms (stopping now could crash the job)")
            self.sidecar.write()
        else:
            window["stop_deferred"] = {**window["stop_deferred"], "reason": busy}

    def _stop_discarding(self, force: bool = False) -> None:
        self._discard = True
        if self.prof is not None:
            with contextlib.suppress(Exception):
                self._stop_profiler(force=force)

    def _yield_to_user_profiler(self) -> None:
        try:
            self._stop_discarding(force=True)
            self._finish(
                "yielded_to_user_profiler",
                "the script started its own torch profiler; commprof stopped its window for this rank",
            )
        except Exception as err:
            self._fail(err)

    # ---- exit and failure ----------------------------------------------------------------------

    def _at_exit(self) -> None:
        if os.getpid() != self._pid:
            return
        try:
            status = None
            flight_recorder_dumped = False
            if self.state == WARMUP:
                self._stop_discarding()
                status = "ended_during_warmup"
            elif self.state == ACTIVE:
                stall_started = time.perf_counter()
                # a stop that was due closes a window that ran its course; one that cannot be made loses it
                status = "complete" if self._stop_due is not None else "ended_during_active"
                if self._stop_profiler(last_try=True):
                    self._close_window(stall_started, status=status)
                    status = None
                else:
                    self._discard = True
                    self.sidecar.window["trace_lost"] = self._trace_lost()
                    status = "stop_deferred_no_trace"
                flight_recorder_dumped = status is None
            elif self.state == WAITING:
                recorded = [w for w in self.sidecar.data.get("windows") or [] if w.get("trace")]
                status = "ended_between_windows" if recorded else "ended_before_window"
            self._unreached_requests()
            if status is not None:
                self._finish(status, None)
            if not flight_recorder_dumped:
                self._dump_flight_recorder()
            self._wait_writers()
            self.sidecar.data["ended_at"] = utc_now_iso()
            self.sidecar.merge_groups(self._groups())
            self.sidecar.write()
        except Exception as err:
            self._fail(err)

    def _on_signal(self, name: str, where: str, on_owner_thread: bool) -> None:
        """Killed (SIGTERM): write out what was recorded, say where the training thread was, keep the
        Flight Recorder dump (in a hang, the record of which collective each rank waits in). The profiler
        can only be stopped from the thread that drives it: when that thread is blocked (a hang) the
        trace is lost and the sidecar says why; Flight Recorder and the sidecar are written either way."""
        if os.getpid() != self._pid:
            return
        window = self.sidecar.window
        window["killed_by"] = name
        window["stopped_in"] = where
        window["optimizer_steps"] = self.steps
        state = self.state
        recorded = any(w.get("trace") for w in self.sidecar.data.get("windows") or [])
        status = {WAITING: "killed_between_windows" if recorded else "killed_before_window",
                  WARMUP: "killed_during_warmup", ACTIVE: "killed_during_active"}.get(state)
        stopped = False
        stall_started = time.perf_counter()
        try:
            if state == ACTIVE and on_owner_thread and self._stop_profiler(last_try=True):
                stopped = True
                # a stop that was due: the window ran its course
                done = "complete" if self._stop_due is not None else "killed_during_active"
                self._close_window(stall_started, status=done)
            elif status is not None:
                if state == ACTIVE:
                    window["trace_lost"] = (self._trace_lost() if on_owner_thread else
                                            "the training thread was blocked; only it can stop the profiler")
                self._discard = True  # a profiler stopped later (never, here) must not write half a trace
                self._finish(status if state != ACTIVE else f"{status}_no_trace", None)
        finally:
            if not stopped:
                self._dump_flight_recorder()
            self._wait_writers(timeout_s=signals.FLUSH_TIMEOUT_S / 2)
            self.sidecar.data["ended_at"] = utc_now_iso()
            self.sidecar.write()

    def _fail(self, err: BaseException) -> None:
        try:
            self.sidecar.data["warnings"].append(f"{type(err).__name__}: {err}")
            if self.state in (WARMUP, ACTIVE):
                self._stop_discarding()
            self._finish("failed", f"profiling failed ({type(err).__name__}: {err}); training continues without it")
        except Exception:
            self.state = DONE

    def _trace_lost(self) -> str:
        reason = (self.sidecar.window.get("stop_deferred") or {}).get("reason", "collectives in flight")
        return f"the profiler was not stopped: {reason} (stopping it could crash the job)"

    def _warn(self, message: str) -> None:
        self.sidecar.data["warnings"].append(message)
        if self._warned:
            return
        self._warned = True
        with contextlib.suppress(Exception):
            sys.stderr.write(f"commprof: warning: rank {self.identity.rank}: {message}\n")
            sys.stderr.flush()

    # ---- helpers -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _as_internal(self) -> Iterator[None]:
        previous, self._internal = self._internal, True
        try:
            yield
        finally:
            self._internal = previous

    def _groups(self) -> list[dict[str, Any]]:
        describe_rank(self.torch, self.sidecar.data, _native_id(self._owner) if self._owner else None)
        if not self.distributed:
            return []
        try:
            if not self.torch.distributed.is_initialized():
                return []
            return describe_groups(self.torch, self.threads)
        except Exception:
            return []

    def _dump_flight_recorder(self) -> None:
        if not (self.fr_enabled and self.distributed):
            return
        if not (self.threads.by_group or self.torch.distributed.is_initialized()):
            return
        try:
            entries = flight.dump(self.torch, self.paths.flight_recorder)
        except Exception as err:
            self.sidecar.data["warnings"].append(f"flight recorder dump failed: {type(err).__name__}: {err}")
            return
        if entries is not None:
            with self.sidecar.lock:
                self.sidecar.set_file("flight_recorder", self.paths.flight_recorder)
                self.sidecar.data["flight_recorder_entries"] = entries


def _native_id(ident: int) -> int | None:
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.native_id
    return None
