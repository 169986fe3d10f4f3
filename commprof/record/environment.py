"""The environment every process of the wrapped command inherits: the rank bootstrap on PYTHONPATH,
NCCL's debug output into the run, Flight Recorder on. A value the user set is never replaced."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from commprof.record.rank import config as rank_config
from commprof.record.settings import RecordSettings

RANK_PACKAGE = Path(rank_config.__file__).resolve().parent
SHIM_SOURCE = RANK_PACKAGE / "shim.py"

# Recorded in the manifest when present (values, so a run says how it was configured).
RECORDED_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_", "GLOO_")
RECORDED_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")

BASE_SUBSYS = "INIT,GRAPH,ENV,NET"
COLL_SUBSYS = "COLL,TUNING"


@dataclass
class RankEnvironment:
    env: dict[str, str]
    # name -> {"value": ..., "source": "commprof" | "user"}
    used: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def install_shim(folder: Path) -> Path:
    """Copy the bootstrap into ``folder`` as ``sitecustomize.py`` (the folder goes first on PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SHIM_SOURCE, folder / "sitecustomize.py")
    return folder


def looks_like_plain_python(command: list[str]) -> bool:
    """``python script.py`` / ``python -m pkg``, not a launcher that starts ranks itself."""
    name = os.path.basename(command[0])
    if not name.startswith("python"):
        return False
    launchers = ("torch.distributed.run", "torch.distributed.launch", "deepspeed", "accelerate")
    rest = command[1:]
    if "-m" in rest:
        index = rest.index("-m")
        module = rest[index + 1] if index + 1 < len(rest) else ""
        return not module.startswith(launchers)
    return True


def _defaults(run_dir: Path, settings: RecordSettings) -> dict[str, str]:
    subsys = BASE_SUBSYS + ("," + COLL_SUBSYS if settings.nccl_coll else "")
    values = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": subsys,
        "NCCL_DEBUG_FILE": str(run_dir / "raw" / "nccl" / "nccl.%h.%p.log"),
        # one per host: the nodes of a job may share the run directory
        "NCCL_TOPO_DUMP_FILE": str(run_dir / "raw" / "topology" / f"nccl_topo.{socket.gethostname()}.xml"),
    }
    if settings.fr_buffer_size > 0:
        values["TORCH_FR_BUFFER_SIZE"] = str(settings.fr_buffer_size)
    return values


def build(
    base: Mapping[str, str], run_dir: Path, settings: RecordSettings, shim_dir: Path, command: list[str]
) -> RankEnvironment:
    env = dict(base)
    out = RankEnvironment(env)
    for name, value in _defaults(run_dir, settings).items():
        user_value = base.get(name)
        if name == "TORCH_FR_BUFFER_SIZE" and user_value is None:
            user_value = base.get("TORCH_NCCL_TRACE_BUFFER_SIZE")  # the older name counts as set
        if user_value is not None:
            out.notes.append(f"{name} kept as the user set it")
            continue
        env[name] = value
        out.used[name] = {"value": value, "source": "commprof"}
    for name, value in sorted(base.items()):
        if name.startswith(RECORDED_PREFIXES) or name in RECORDED_NAMES:
            out.used[name] = {"value": value, "source": "user"}
    existing = base.get("PYTHONPATH")
    env["PYTHONPATH"] = str(shim_dir) + (os.pathsep + existing if existing else "")
    env[rank_config.ENV_RUN_DIR] = str(run_dir)
    env[rank_config.ENV_SETTINGS] = settings.window.to_json()
    env[rank_config.ENV_RANK_PACKAGE] = str(RANK_PACKAGE)
    env[rank_config.ENV_LAUNCHER_HOST] = socket.gethostname()
    env[rank_config.ENV_LAUNCHER_ID] = f"{socket.gethostname()}-{os.getpid()}"
    env.pop(rank_config.ENV_RANK_PID, None)  # commprof record run from inside a rank: start afresh
    if looks_like_plain_python(command):
        env[rank_config.ENV_SINGLE_PROCESS] = "1"
    else:
        env.pop(rank_config.ENV_SINGLE_PROCESS, None)
    return out
