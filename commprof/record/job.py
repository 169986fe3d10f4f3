"""Which job a launcher belongs to, so that the launchers of one job (one per node, or one per rank) fill
one run directory together and a folder holding another job is refused.

A job is known by what every one of its launchers sees alike: the id the user gives (``--job-id``), the
SLURM job and step, the MPI job's namespace, torchrun's rendezvous (endpoint and id) or the master's
address and port. A plain single-node ``torchrun --nproc-per-node 8`` has none of these: its folder is
its own, as before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# the launchers of one job start within the rendezvous' patience of each other (torchrun waits 600 s
# for its nodes by default); an older run under the same identity is a rerun, not a node of this job
JOIN_WINDOW_S = 30 * 60

_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_TORCHRUN_SWITCHES = frozenset({"standalone", "no-python", "run-path", "module", "m", "virtual-local-rank"})
_TORCHRUN_FLAGS = {"rdzv-endpoint": "endpoint", "rdzv-id": "id", "master-addr": "master_addr",
                   "master-port": "master_port", "nnodes": "nnodes"}


@dataclass(frozen=True)
class JobIdentity:
    key: str  # the same text in every launcher of the job
    source: str  # what it was read from, for people: "SLURM_JOB_ID=812 step 0"

    def as_manifest(self) -> dict[str, str]:
        return {"key": self.key, "source": self.source}


def torchrun_options(command: Sequence[str]) -> dict[str, str]:
    """torchrun's own options (``--rdzv-endpoint x``, ``--rdzv_endpoint=x``) up to its script."""
    name = os.path.basename(command[0]) if command else ""
    args = list(command[1:])
    if name.startswith("python"):
        if "-m" not in args or args.index("-m") + 1 >= len(args) or args[args.index("-m") + 1] not in _TORCHRUN_MODULES:
            return {}
        args = args[args.index("-m") + 2:]
    elif name != "torchrun":
        return {}
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            break  # the training script: its own options are not torchrun's
        flag, eq, value = arg.lstrip("-").replace("_", "-").partition("=")
        if not eq and flag not in _TORCHRUN_SWITCHES and i + 1 < len(args):
            value, i = args[i + 1], i + 1  # every other torchrun option takes a value
        if flag in _TORCHRUN_FLAGS:
            found[_TORCHRUN_FLAGS[flag]] = value
        i += 1
    return found


def job_identity(command: Sequence[str], environ: Mapping[str, str] = os.environ,
                 explicit: str | None = None) -> JobIdentity | None:
    """The job this launcher belongs to, or None when nothing says (a single-node job)."""
    if explicit:
        return JobIdentity(f"user:{explicit}", f"--job-id {explicit}")
    slurm = environ.get("SLURM_JOB_ID")
    if slurm:
        step = environ.get("SLURM_STEP_ID", "")
        return JobIdentity(f"slurm:{slurm}.{step}", f"SLURM_JOB_ID={slurm}" + (f" step {step}" if step else ""))
    for name in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"):
        if environ.get(name):
            return JobIdentity(f"mpi:{environ[name]}", f"{name}={environ[name]}")
    tr = torchrun_options(command)
    endpoint = tr.get("endpoint") or (environ.get("PET_RDZV_ENDPOINT") if tr or _is_torchrun(command) else None)
    if endpoint:
        rdzv_id = tr.get("id") or environ.get("PET_RDZV_ID") or "none"
        return JobIdentity(f"rdzv:{endpoint}/{rdzv_id}", f"torchrun rendezvous {endpoint} id {rdzv_id}")
    if environ.get("TORCHELASTIC_RUN_ID"):
        return JobIdentity(f"elastic:{environ['TORCHELASTIC_RUN_ID']}",
                           f"TORCHELASTIC_RUN_ID={environ['TORCHELASTIC_RUN_ID']}")
    addr = tr.get("master_addr") or environ.get("MASTER_ADDR")
    port = tr.get("master_port") or environ.get("MASTER_PORT")
    if addr and port and _spans_nodes(tr):
        return JobIdentity(f"master:{addr}:{port}", f"master {addr}:{port}")
    return None


def _is_torchrun(command: Sequence[str]) -> bool:
    return bool(command) and (os.path.basename(command[0]) == "torchrun" or any(
        m in command[:4] for m in _TORCHRUN_MODULES))


def _spans_nodes(tr: dict[str, str]) -> bool:
    """``--master-addr`` on a torchrun of one node (``--nnodes 1``) names no other launcher."""
    nnodes = tr.get("nnodes", "")
    return not tr or nnodes not in ("", "1", "1:1")
