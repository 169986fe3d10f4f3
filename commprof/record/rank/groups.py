"""Which process groups this rank belongs to, and which OS threads run each group's Gloo work.

A Gloo process group runs its collectives on its own worker threads (``pt_gloo_runloop``, two per
group by default), created while the group is constructed. Kineto records those ops on those threads
(``tid`` = the OS thread id), so the threads that appeared while a group was being created map every
Gloo op on them to that group exactly, including the ones DDP's reducer issues from C++.
The thread renames itself after it starts, so names are read again whenever the sidecar is written.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .config import GLOO_WORKER_THREAD_NAME

_TASK_DIR = "/proc/self/task"


def thread_ids() -> set[int]:
    try:
        return {int(t) for t in os.listdir(_TASK_DIR)}
    except (OSError, ValueError):
        return set()


def thread_name(tid: int) -> str | None:
    try:
        with open(f"{_TASK_DIR}/{tid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return None


class GroupThreads:
    """Thread ids created during each process group's construction, by group name. A thread id
    claimed again later (the kernel reuses ids of dead threads) belongs to the later group."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_group: dict[str, list[int]] = {}
        self.names: dict[int, str] = {}
        self._patched: list[tuple[Any, str, Any]] = []

    def claim(self, group_name: str, tids: set[int]) -> None:
        with self._lock:
            for other in self.by_group.values():
                other[:] = [t for t in other if t not in tids]
            self.by_group.setdefault(group_name, [])
            self.by_group[group_name] = sorted(set(self.by_group[group_name]) | tids)

    def refresh_names(self) -> None:
        with self._lock:
            tids = [t for group in self.by_group.values() for t in group]
        for tid in tids:
            name = thread_name(tid)
            if name is not None:
                self.names[tid] = name

    def worker_tids(self, group_name: str) -> list[int] | None:
        """The group's Gloo worker threads: those seen named ``pt_gloo_runloop``, or, for threads
        never seen by name (already gone), every thread created with the group. None when the
        group's creation was not observed."""
        tids = self.by_group.get(group_name)
        if tids is None:
            return None
        return [t for t in tids if self.names.get(t, GLOO_WORKER_THREAD_NAME) == GLOO_WORKER_THREAD_NAME]

    def wrap_creator(self, func: Callable[..., Any]) -> Callable[..., Any]:
        owner = self

        @functools.wraps(func)
        def create_group(*args: Any, **kwargs: Any) -> Any:
            before = thread_ids()
            result = func(*args, **kwargs)
            try:
                pg = result[0] if isinstance(result, tuple) else result
                name = getattr(pg, "group_name", None)
                if isinstance(name, str) and name:
                    new = thread_ids() - before
                    if new:
                        owner.claim(name, new)
            except Exception:  # never let bookkeeping break group creation
                pass
            return result

        create_group.__commprof_wrapped__ = func  # type: ignore[attr-defined]
        return create_group

    def install(self, torch: Any) -> None:
        """Wrap the functions that construct process groups (module attributes, looked up at call
        time by ``init_process_group``, ``new_group`` and DeviceMesh)."""
        c10d = importlib.import_module("torch.distributed.distributed_c10d")
        targets: list[tuple[Any, str]] = [(c10d, "_new_process_group_helper"), (c10d, "split_group")]
        device_mesh = sys.modules.get("torch.distributed.device_mesh")
        if device_mesh is not None and getattr(device_mesh, "split_group", None) is getattr(
            c10d, "split_group", None
        ):
            targets.append((device_mesh, "split_group"))
        for module, attr in targets:
            original = getattr(module, attr, None)
            if original is None or hasattr(original, "__commprof_wrapped__"):
                continue
            setattr(module, attr, self.wrap_creator(original))
            self._patched.append((module, attr, original))


def describe_groups(torch: Any, threads: GroupThreads) -> list[dict[str, Any]]:
    """This rank's process groups (the ones it is a member of) as sidecar entries."""
    world = importlib.import_module("torch.distributed.distributed_c10d")._world
    out: list[dict[str, Any]] = []
    threads.refresh_names()
    for pg, name in list(world.pg_names.items()):
        group_ranks: dict[int, int] = dict(world.pg_group_ranks.get(pg, {}))
        ranks = [g for g, _ in sorted(group_ranks.items(), key=lambda item: item[1])]
        backend = None
        entry = world.pg_map.get(pg)
        if entry is not None:
            backend = str(entry[0])
        desc = getattr(pg, "group_desc", None)
        out.append(
            {
                "name": str(name),
                "desc": str(desc) if desc is not None else None,
                "ranks": ranks,
                "size": len(ranks),
                "backend": backend,
                "worker_tids": threads.worker_tids(str(name)),
            }
        )
    return out
