"""Is this process a training rank that commprof should profile, and which one?

Called from ``sitecustomize``, before the user's code runs: stdlib only, no file system access.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .config import ENV_RANK_PID, ENV_SINGLE_PROCESS

# Helper processes of multiprocessing re-run site (spawn, forkserver, resource tracker).
_MP_MARKERS = ("--multiprocessing-fork",)
_MP_CODE_PREFIX = "from multiprocessing"


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int | None
    restart_count: int
    single_process: bool


def _int(environ: Mapping[str, str], name: str, default: int | None) -> int | None:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return int(value)
    except ValueError:
        return default


def is_multiprocessing_helper(argv: Sequence[str]) -> bool:
    if any(marker in argv for marker in _MP_MARKERS):
        return True
    return any(arg.startswith(_MP_CODE_PREFIX) for arg in argv)


def detect_identity(
    environ: Mapping[str, str] = os.environ,
    argv: Sequence[str] | None = None,
    pid: int | None = None,
) -> RankIdentity | None:
    """The rank this process is, or None when it is not one to profile: no RANK (and not the
    plain script commprof launched), a child of a rank (its DataLoader workers, compile workers,
    any subprocess: they inherit ``COMMPROF_RANK_PID``), or a multiprocessing helper."""
    pid = os.getpid() if pid is None else pid
    claimed = environ.get(ENV_RANK_PID)
    if claimed and claimed != str(pid):
        return None
    if argv is None:
        argv = list(getattr(sys, "orig_argv", sys.argv))
    if is_multiprocessing_helper(argv):
        return None
    rank = _int(environ, "RANK", None)
    single = False
    if rank is None:
        if environ.get(ENV_SINGLE_PROCESS) != "1":
            return None
        rank, single = 0, True
    world = _int(environ, "WORLD_SIZE", 1) or 1
    local_rank = _int(environ, "LOCAL_RANK", rank if single else 0)
    local_world = _int(environ, "LOCAL_WORLD_SIZE", None)
    return RankIdentity(
        rank=rank,
        local_rank=local_rank if local_rank is not None else 0,
        world_size=world,
        local_world_size=local_world if local_world is not None else (1 if single else world),
        node_rank=_int(environ, "GROUP_RANK", None),
        restart_count=_int(environ, "TORCHELASTIC_RESTART_COUNT", 0) or 0,
        single_process=single,
    )
