"""The launcher's part of the manifest (``raw/launchers/<host>-<pid>.json``): written when the run starts,
completed from its ranks' sidecars when it ends; ``manifest.json`` is the union of every launcher's part
(one per node or per rank of the job, see ``commprof.ingest.job_parts``), rewritten by each launcher.

A launcher killed before the end leaves the first version (``status: "running"``) and the ranks'
``raw/ranks/rank-<RANK>.json`` pieces, from which the manifest can be rebuilt (:func:`merge_ranks`).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from commprof.ingest.job_parts import PARTS_DIR, read_parts, union
from commprof.record.job import JobIdentity
from commprof.record.rank.files import atomic_write_json, utc_now_iso

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


def commprof_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("commprof")
    except Exception:
        return None


def launcher_id() -> str:
    """This launcher, in file names and in its ranks' sidecars: host and pid (pids repeat across hosts)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def start(command: list[str], settings: dict[str, Any], env_used: dict[str, Any],
          job: JobIdentity | None = None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "commprof record",
        "job": job.as_manifest() if job else None,
        "command": command,
        "cwd": os.getcwd(),
        "launcher": {"host": socket.gethostname(), "pid": os.getpid(), "id": launcher_id()},
        "start": utc_now_iso(),
        "end": None,
        "status": "running",
        "exit_code": None,
        "exit_signal": None,
        "world_size": None,
        "hosts": [],
        "ranks": [],
        "versions": {
            "python": platform.python_version(),
            "commprof": commprof_version(),
            "torch": None,
            "launcher_python": sys.executable,
        },
        "settings": settings,
        "env": env_used,
        "notes": [],
    }


def write(run_dir: Path, manifest: dict[str, Any]) -> None:
    """This launcher's part, then the union of every part as ``manifest.json``."""
    write_part(run_dir, manifest)
    write_snapshot(run_dir)


def write_part(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write_json(str(run_dir.joinpath(*PARTS_DIR, f"{manifest['launcher']['id']}.json")), manifest)


def write_snapshot(run_dir: Path) -> None:
    """``manifest.json`` as the union of the parts there now (the job's first fields kept)."""
    try:
        base = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        base = None
    merged, _ = union(read_parts(run_dir, []), base if isinstance(base, dict) else None)
    atomic_write_json(str(run_dir / MANIFEST), merged)


def read_sidecars(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    sidecars, problems = [], []
    for path in sorted((run_dir / "raw" / "ranks").glob("rank-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as err:
            problems.append(f"{path.name}: unreadable ({err})")
            continue
        if isinstance(data, dict) and isinstance(data.get("rank"), int):
            sidecars.append(data)
        else:
            problems.append(f"{path.name}: not a rank sidecar")
    sidecars.sort(key=lambda d: int(d["rank"]))
    return sidecars, problems


def _existing_files(run_dir: Path, files: dict[str, str]) -> dict[str, str]:
    return {kind: rel for kind, rel in sorted(files.items()) if (run_dir / rel).is_file()}


def merge_ranks(run_dir: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Fill the per-rank part of the manifest from the sidecars of this launcher's ranks (the other nodes'
    ranks in a shared folder are theirs to report); returns those sidecars."""
    sidecars, problems = read_sidecars(run_dir)
    me = (manifest.get("launcher") or {}).get("id")
    if me:
        sidecars = [sc for sc in sidecars if sc.get("launcher") in (me, None)]  # None: a rank of an older commprof
    manifest["notes"].extend(problems)
    ranks = []
    for sc in sidecars:
        window = sc.get("window") or {}
        ranks.append(
            {
                "rank": sc["rank"],
                "local_rank": sc.get("local_rank"),
                "local_world_size": sc.get("local_world_size"),
                "node_rank": sc.get("node_rank"),
                "host": sc.get("host"),
                "pid": sc.get("pid"),
                "device": sc.get("device"),
                "gpu_name": sc.get("gpu_name"),
                "backend": sc.get("backend"),
                "window_status": window.get("status"),
                "optimizer_steps": window.get("optimizer_steps"),
                "killed_by": window.get("killed_by"),
                "stopped_in": window.get("stopped_in"),
                "files": _existing_files(run_dir, sc.get("files") or {}),
                # record --every/--on-demand: the windows this rank recorded (each in windows/step-<S>/)
                **({"windows": [w.get("name") for w in sc["windows"] if isinstance(w, dict) and w.get("trace")]}
                   if isinstance(sc.get("windows"), list) else {}),
            }
        )
    manifest["ranks"] = ranks
    sizes = [int(sc["world_size"]) for sc in sidecars if isinstance(sc.get("world_size"), int)]
    manifest["world_size"] = max(sizes) if sizes else None
    manifest["hosts"] = sorted({str(sc.get("host")) for sc in sidecars if sc.get("host")})
    for lib in ("torch", "nccl"):  # the ranks' own (a node may run another build than its launcher's Python)
        found = sorted({str(v) for sc in sidecars if (v := (sc.get("versions") or {}).get(lib))})
        if found:
            manifest["versions"][lib] = found[0] if len(found) == 1 else found
    return sidecars


def finish(run_dir: Path, manifest: dict[str, Any], returncode: int) -> list[dict[str, Any]]:
    manifest["end"] = utc_now_iso()
    if returncode < 0:
        sig = -returncode
        manifest["exit_code"] = 128 + sig
        try:
            manifest["exit_signal"] = signal.Signals(sig).name
        except ValueError:
            manifest["exit_signal"] = str(sig)
    else:
        manifest["exit_code"] = returncode
    manifest["status"] = "finished" if manifest["exit_code"] == 0 else "failed"
    sidecars = merge_ranks(run_dir, manifest)
    write(run_dir, manifest)
    return sidecars
