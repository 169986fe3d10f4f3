"""``raw/ranks/rank-<RANK>.json``: what one rank tells the launcher and the ingest about itself.

Written when the rank starts, when its window starts and ends, and at exit, each time whole (under
a temporary name, then renamed), so a rank killed at any point leaves its last complete version.
The format is described in ``commprof/record/FORMAT.md``.
"""

from __future__ import annotations

import os
import platform
import socket
import threading
from typing import Any

from .config import ENV_LAUNCHER_ID, SIDECAR_SCHEMA_VERSION, RankConfig
from .files import atomic_write_json, utc_now_iso
from .identity import RankIdentity


class RankPaths:
    def __init__(self, run_dir: str, rank: int) -> None:
        self.run_dir = os.path.abspath(run_dir)
        self.trace = os.path.join(self.run_dir, "raw", "traces", f"rank-{rank}.json.gz")
        self.flight_recorder = os.path.join(self.run_dir, "raw", "flight_recorder", f"rank-{rank}.json")
        self.sidecar = os.path.join(self.run_dir, "raw", "ranks", f"rank-{rank}.json")

    def relative(self, path: str) -> str:
        return os.path.relpath(path, self.run_dir).replace(os.sep, "/")

    def make_dirs(self) -> None:
        for path in (self.trace, self.flight_recorder, self.sidecar):
            os.makedirs(os.path.dirname(path), exist_ok=True)


class Sidecar:
    def __init__(self, config: RankConfig, identity: RankIdentity, paths: RankPaths) -> None:
        self.paths = paths
        self.lock = threading.Lock()
        self.unwritten: OSError | None = None  # the last write that failed (a full disk)
        window = config.window
        steps = window.mode == "steps"
        self.data: dict[str, Any] = {
            "schema_version": SIDECAR_SCHEMA_VERSION,
            "rank": identity.rank,
            "local_rank": identity.local_rank,
            "world_size": identity.world_size,
            "local_world_size": identity.local_world_size,
            "node_rank": identity.node_rank,
            "restart_count": identity.restart_count,
            "single_process": identity.single_process,
            "rank_from": identity.source,
            "launcher": os.environ.get(ENV_LAUNCHER_ID),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "training_tid": None,
            "device": None,
            "gpu_name": None,
            "backend": None,
            "started_at": utc_now_iso(),
            "updated_at": None,
            "ended_at": None,
            "versions": {"python": platform.python_version(), "torch": None, "cuda": None, "nccl": None},
            "window": {
                "mode": window.mode,
                "wait": window.wait if steps else None,
                "warmup": window.warmup if steps else None,
                "active": window.active if steps else None,
                "start_after_s": None if steps else window.start_after_s,
                "duration_s": None if steps else window.duration_s,
                "status": "waiting",
                "optimizer_steps": 0,
                "first_profiler_step": None,
                "last_profiler_step": None,
                "recording_started_at": None,
                "recording_ended_at": None,
                "activities": None,
                "opened_at_optimizer_step": None,
                "annotated_calls": 0,
                "stall_ms": None,
                "stop_deferred": None,
                "trace_bytes": None,
                "gzip_ms": None,
            },
            "process_groups": [],
            "files": {"sidecar": paths.relative(paths.sidecar)},
            "flight_recorder_entries": None,
            "warnings": [],
        }

    @property
    def window(self) -> dict[str, Any]:
        window: dict[str, Any] = self.data["window"]
        return window

    def set_file(self, kind: str, path: str) -> None:
        self.data["files"][kind] = self.paths.relative(path)

    def merge_groups(self, groups: list[dict[str, Any]]) -> None:
        """Keep groups seen earlier (a script may destroy them before exit), update the others."""
        known = {g["name"]: g for g in self.data["process_groups"]}
        for group in groups:
            previous = known.get(group["name"])
            if previous is not None and group.get("worker_tids") is None:
                group["worker_tids"] = previous.get("worker_tids")
            known[group["name"]] = group
        self.data["process_groups"] = sorted(known.values(), key=_group_sort_key)

    def write(self) -> None:
        """Whole, atomically. The trace compression thread changes ``data`` only under ``lock``;
        the training thread only replaces values of keys that exist (no dict resizes), so a dump
        never sees a dict change size. A write that fails (a full disk) is remembered, not raised: the
        status file is a report, and its failure must not stop the profiling (or reach the training)
        half-way; the launcher reads a full disk from the free space and says so."""
        with self.lock:
            self.data["updated_at"] = utc_now_iso()
            try:
                atomic_write_json(self.paths.sidecar, self.data)
            except OSError as err:
                self.unwritten = err


def _group_sort_key(group: dict[str, Any]) -> tuple[int, str]:
    name = str(group.get("name"))
    return (0, name.zfill(12)) if name.isdigit() else (1, name)


def describe_rank(torch: Any, data: dict[str, Any], training_tid: int | None) -> None:
    """Fill what may change after the rank started: device, GPU, NCCL version, backend."""
    if training_tid is not None:
        data["training_tid"] = training_tid
    try:
        cuda = torch.cuda
        if cuda.is_available() and cuda.is_initialized():
            index = cuda.current_device()
            data["device"] = f"cuda:{index}"
            data["gpu_name"] = cuda.get_device_name(index)
            nccl = getattr(cuda, "nccl", None)
            if nccl is not None and data["versions"].get("nccl") is None:
                version = nccl.version()
                data["versions"]["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        elif data["device"] is None:
            data["device"] = "cpu"
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            data["backend"] = str(dist.get_backend())
    except Exception:
        pass  # descriptive only
