"""Windows that repeat: on a schedule (``record --every N``) and on demand (``record --on-demand`` +
``commprof trigger``). Standard library only; nothing here runs a collective or waits for another rank.

Each window is a run directory of its own under ``<run>/windows/step-<S>/`` (``S``: the optimizer step the
window was asked to open at, zero-padded to 8 digits so that the folders sort): its ``manifest.json`` (the
run's, with ``window`` added), ``raw/traces``, ``raw/ranks``, ``raw/flight_recorder``. Every rank of every node
names a window by the same step, so the ranks' files of one window land in one folder, and the nodes' folders
of one window join like the nodes of a run.

**On demand.** A rank recorded with ``--on-demand`` writes its progress (``<run>/control/progress/rank-R.json``:
its optimizer step and steps per second) at most every ``PROGRESS_EVERY_S`` and looks for requests
(``<run>/control/trigger-<S>.json``, written by ``commprof trigger``) at most every ``POLL_EVERY_S``, both
checked against a clock read once per optimizer step: idle, that is a ``time.monotonic()`` a step. The trigger
command picks ``S`` ahead of the fastest rank's progress, so every rank opens the window at the same step; a
rank that sees a request only after its step passed opens the window at once and says so (``opened_late``), a
rank already recording declines it (``declined``): in its sidecar's ``windows``, never an error in the job.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

from .files import atomic_write_json, utc_now_iso

WINDOWS_DIR = "windows"
CONTROL_DIR = "control"
PROGRESS_DIR = "progress"
TRIGGER_PREFIX = "trigger-"
POLL_EVERY_S = 0.5
PROGRESS_EVERY_S = 2.0


def window_name(step: int, unit: str = "step") -> str:
    """``step-00000040`` (opened at optimizer step 40), ``time-00000600`` (a time window, 600 s after the start)."""
    return f"{unit}-{step:08d}"


def window_step(name: str) -> int | None:
    """``step-00000040`` -> 40, ``time-00000600`` -> 600; None for anything else."""
    unit, _, digits = name.partition("-")
    return int(digits) if unit in ("step", "time") and digits.isdigit() else None


@dataclass(frozen=True)
class Request:
    """A window asked for: open at optimizer step ``step`` and record ``active`` steps (None: the run's)."""

    step: int  # the optimizer step it opens at; a time window: its second after the rank's start
    reason: str  # "every" | "on_demand"
    active: int | None = None
    warmup: int | None = None
    id: str = ""
    unit: str = "step"  # "step" | "time"

    @property
    def name(self) -> str:
        return window_name(self.step, self.unit)


def every_request(steps: int, wait: int, every: int) -> Request | None:
    """The scheduled window that opens at optimizer step ``steps`` (``wait``, ``wait + every``, ...)."""
    if steps < wait or (steps - wait) % every:
        return None
    return Request(steps, "every")


class Control:
    """The on-demand side of one rank: progress out, requests in, both on a clock checked once a step."""

    def __init__(self, run_dir: str, rank: int) -> None:
        self.folder = os.path.join(run_dir, CONTROL_DIR)
        self.progress_path = os.path.join(self.folder, PROGRESS_DIR, f"rank-{rank}.json")
        self.rank = rank
        self.seen: set[str] = set()
        self.pending: list[Request] = []
        self._next_poll = 0.0
        self._next_progress = 0.0
        self._mark: tuple[float, int] | None = None  # (time, step) of the last progress written
        self._folder_mtime: int | None = None

    def on_step(self, steps: int, now: float | None = None) -> Request | None:
        """Called once per optimizer step: writes progress and reads requests when their time has come;
        returns a request due at (or before) this step."""
        now = time.monotonic() if now is None else now
        if now >= self._next_progress:
            self._next_progress = now + PROGRESS_EVERY_S
            self._write_progress(steps, now)
        if now >= self._next_poll:
            self._next_poll = now + POLL_EVERY_S
            self._poll()
        if self.pending and self.pending[0].step <= steps:
            return self.pending.pop(0)
        return None

    def close(self, steps: int) -> list[Request]:
        """At the rank's exit: the requests it will never reach (a last look included); its progress says it
        ended, so that `commprof trigger` does not ask a finished job."""
        self._folder_mtime = None
        self._poll()
        left, self.pending = self.pending, []
        with contextlib.suppress(OSError):
            atomic_write_json(self.progress_path, {"rank": self.rank, "step": steps, "steps_per_s": None,
                                                   "pid": os.getpid(), "at": utc_now_iso(), "ended": True})
        return left

    def _write_progress(self, steps: int, now: float) -> None:
        rate = None
        if self._mark is not None and now > self._mark[0] and steps > self._mark[1]:
            rate = (steps - self._mark[1]) / (now - self._mark[0])
        self._mark = (now, steps)
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(self.progress_path), exist_ok=True)
            atomic_write_json(self.progress_path, {"rank": self.rank, "step": steps, "steps_per_s": rate,
                                                   "pid": os.getpid(), "at": utc_now_iso()})

    def _poll(self) -> None:
        try:
            mtime = os.stat(self.folder).st_mtime_ns  # a new request is a new name: the folder's time changes
        except OSError:
            return
        if mtime == self._folder_mtime:
            return
        self._folder_mtime = mtime
        try:
            names = [e.name for e in os.scandir(self.folder)
                     if e.name.startswith(TRIGGER_PREFIX) and e.name.endswith(".json")]
        except OSError:
            return
        for name in sorted(names):
            if name in self.seen:
                continue
            self.seen.add(name)
            request = read_request(os.path.join(self.folder, name))
            if request is not None:
                self.pending.append(request)
        self.pending.sort(key=lambda r: r.step)


def read_request(path: str) -> Request | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or type(data.get("step")) is not int or data["step"] < 0:
        return None
    active = data.get("active")
    warmup = data.get("warmup")
    return Request(data["step"], "on_demand", active if type(active) is int and active > 0 else None,
                   warmup if type(warmup) is int and warmup >= 0 else None, str(data.get("id") or ""))


def window_manifest(run_dir: str, folder: str, request: Request, active: int, warmup: int) -> None:
    """The window's ``manifest.json`` (the run's, with ``window``), written by whichever rank comes first;
    the others leave it (the same content, but for the moment the run's manifest was read)."""
    path = os.path.join(folder, "manifest.json")
    if os.path.exists(path):
        return
    try:
        with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
            manifest: dict[str, Any] = json.load(fh)
    except (OSError, ValueError):
        manifest = {"schema_version": 1, "tool": "commprof record"}
    if not isinstance(manifest, dict):
        manifest = {"schema_version": 1, "tool": "commprof record"}
    manifest.pop("ranks", None)  # the run's rank table: the window's ranks are its sidecars
    # the job's status is the run's to say (its manifest.json); a window, once its ranks wrote it, is whole
    manifest["status"], manifest["end"], manifest["exit_code"], manifest["exit_signal"] = "window", None, None, None
    manifest["window"] = {"name": os.path.basename(folder), "reason": request.reason,
                          **({"step": request.step} if request.unit == "step" else {"seconds": request.step}),
                          "trigger": request.id or None, "warmup": warmup, "active": active,
                          "run": os.path.relpath(run_dir, folder).replace(os.sep, "/")}
    with contextlib.suppress(OSError):
        atomic_write_json(path, manifest)


def prune(run_dir: str, rank: int, keep: int) -> list[str]:
    """Keep the ``keep`` newest windows: this rank's files in older ones go, and a window left without any
    rank's file goes whole. Returns the windows this rank emptied."""
    root = os.path.join(run_dir, WINDOWS_DIR)
    try:
        names = sorted(n for n in os.listdir(root) if window_step(n) is not None)
    except OSError:
        return []
    dropped = []
    for name in names[:-keep] if keep > 0 else names:
        folder = os.path.join(root, name)
        for sub, file in (("traces", f"rank-{rank}.json.gz"), ("ranks", f"rank-{rank}.json"),
                          ("flight_recorder", f"rank-{rank}.json")):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, "raw", sub, file))
        dropped.append(name)
        if not _holds_rank_files(folder):
            shutil.rmtree(folder, ignore_errors=True)
    return dropped


def _holds_rank_files(folder: str) -> bool:
    for sub in ("traces", "ranks", "flight_recorder"):
        with contextlib.suppress(OSError):
            if any(not n.startswith(".") for n in os.listdir(os.path.join(folder, "raw", sub))):
                return True
    return False
