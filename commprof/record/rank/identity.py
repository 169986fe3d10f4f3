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
    source: str = "RANK"  # which environment named the rank: RANK (torchrun), SLURM_PROCID, OMPI_COMM_WORLD_RANK, ...


# Launchers that start one process per rank without torchrun: (rank, world size, local rank, local world size,
# node) as each names them. The script itself turns them into torch.distributed's rank; commprof reads the same.
PER_RANK_LAUNCHERS = (
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
     "OMPI_COMM_WORLD_NODE_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", None),
    ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE", "PMIX_NODE_RANK"),
)
# srun's batch and extern steps are not tasks of the job: SLURM_PROCID there is the batch script's 0
_SLURM_NOT_TASK = ("", "batch", "extern", "4294967294", "4294967295")


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
    if rank is None:
        per_rank = _per_rank_launcher(environ)
        if per_rank is not None:
            return per_rank
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
        source="single process" if single else "RANK",
    )


def _per_rank_launcher(environ: Mapping[str, str]) -> RankIdentity | None:
    """The rank of a process started by srun or mpirun (one launcher per rank, no torchrun)."""
    for rank_var, size_var, local_var, local_size_var, node_var in PER_RANK_LAUNCHERS:
        rank = _int(environ, rank_var, None)
        size = _int(environ, size_var, None)
        if rank is None or size is None or not 0 <= rank < size:
            continue
        if rank_var == "SLURM_PROCID" and environ.get("SLURM_STEP_ID", "") in _SLURM_NOT_TASK:
            continue
        local_size = _int(environ, local_size_var, None)
        return RankIdentity(
            rank=rank, local_rank=_int(environ, local_var, 0) or 0, world_size=size,
            local_world_size=local_size if local_size is not None else size,
            node_rank=_int(environ, node_var, None) if node_var else None,
            restart_count=_int(environ, "SLURM_RESTART_COUNT", 0) or 0, single_process=False, source=rank_var)
    return None
