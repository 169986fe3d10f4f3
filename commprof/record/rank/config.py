"""What the launcher tells every rank, through the environment.

Shared by the launcher and the rank side, so it imports only the standard library.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

ENV_RUN_DIR = "COMMPROF_RUN_DIR"
ENV_SETTINGS = "COMMPROF_SETTINGS"
ENV_RANK_PACKAGE = "COMMPROF_RANK_PACKAGE"  # folder of this package, loaded by path by the shim
ENV_SINGLE_PROCESS = "COMMPROF_SINGLE_PROCESS"  # "1": the command is a plain script, profile it as rank 0
ENV_RANK_PID = "COMMPROF_RANK_PID"  # set by a rank in its own environment: its children stay inactive
ENV_LAUNCHER_HOST = "COMMPROF_LAUNCHER_HOST"
ENV_LAUNCHER_ID = "COMMPROF_LAUNCHER_ID"  # <host>-<pid> of the launcher: its part of a run shared by nodes

SIDECAR_SCHEMA_VERSION = 1
ANNOTATION_PREFIX = "commprof:"
GLOO_WORKER_THREAD_NAME = "pt_gloo_runloop"


@dataclass(frozen=True)
class WindowSettings:
    """One profiling window: by optimizer steps (wait, warmup, active), or by time when
    ``start_after_s`` is set."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    start_after_s: float | None = None
    duration_s: float | None = None
    flight_recorder: bool = True
    every: int | None = None  # a window every N optimizer steps (wait, wait + N, ...): record --every N
    every_s: float | None = None  # time windows: one every T seconds (start_after, start_after + T, ...)
    on_demand: bool = False  # windows asked for by `commprof trigger` (rank/windows.py)
    keep_windows: int | None = None  # the newest K windows kept, older ones' files removed

    @property
    def repeating(self) -> bool:
        """Windows in folders of their own (windows/step-<S>/), more than one."""
        return self.every is not None or self.every_s is not None or self.on_demand

    @property
    def mode(self) -> str:
        return "time" if self.start_after_s is not None else "steps"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WindowSettings:
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass(frozen=True)
class RankConfig:
    run_dir: str
    window: WindowSettings


def read_config(environ: Mapping[str, str] = os.environ) -> RankConfig | None:
    run_dir = environ.get(ENV_RUN_DIR)
    if not run_dir:
        return None
    settings = environ.get(ENV_SETTINGS)
    window = WindowSettings.from_json(settings) if settings else WindowSettings()
    return RankConfig(run_dir=run_dir, window=window)
