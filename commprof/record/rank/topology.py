"""What a host's interconnect looks like, from the tools that exist there; absent ones are skipped.

Stdlib only (it may run on any node). Written to ``raw/topology/<host>.json``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from typing import Any

from .files import atomic_write_bytes, atomic_write_json, utc_now_iso

_TIMEOUT_S = 15.0


def _run(args: list[str]) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def gpus() -> list[dict[str, str]] | None:
    out = _run(
        ["nvidia-smi", "--query-gpu=index,name,pci.bus_id,memory.total", "--format=csv,noheader,nounits"]
    )
    if out is None:
        return None
    rows = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            rows.append({"index": parts[0], "name": parts[1], "pci_bus_id": parts[2], "memory_mib": parts[3]})
    return rows


def infiniband_ports(root: str = "/sys/class/infiniband") -> list[dict[str, Any]] | None:
    ports = sorted(glob.glob(os.path.join(root, "*", "ports", "*")))
    if not ports:
        return None
    out = []
    for port in ports:
        device = port.split(os.sep)[-3]
        out.append(
            {
                "device": device,
                "port": os.path.basename(port),
                "link_layer": _read(os.path.join(port, "link_layer")),
                "rate": _read(os.path.join(port, "rate")),
                "state": _read(os.path.join(port, "state")),
            }
        )
    return out


def capture(host: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {"host": host or socket.gethostname(), "captured_at": utc_now_iso()}
    topo = _run(["nvidia-smi", "topo", "-m"])
    if topo is not None:
        info["nvidia_smi_topo"] = topo
    gpu_list = gpus()
    if gpu_list is not None:
        info["gpus"] = gpu_list
    ib = infiniband_ports()
    if ib is not None:
        info["infiniband"] = ib
    return info


def write(run_dir: str, host: str | None = None, environ: dict[str, str] | None = None) -> str:
    info = capture(host)
    folder = os.path.join(run_dir, "raw", "topology")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{safe_host(info['host'])}.json")
    atomic_write_json(path, info)
    copy_switch_topology(folder, os.environ if environ is None else environ)
    return path


def switch_topology(environ: Any) -> str | None:
    """SLURM's switch tree (topology.conf) of this cluster: beside ``SLURM_CONF``, else in /etc/slurm."""
    candidates = [os.path.join(os.path.dirname(environ["SLURM_CONF"]), "topology.conf")] if environ.get(
        "SLURM_CONF") else []
    candidates += ["/etc/slurm/topology.conf", "/etc/slurm-llnl/topology.conf"]
    return next((c for c in candidates if os.path.isfile(c)), None)


def copy_switch_topology(folder: str, environ: Any) -> None:
    """raw/topology/topology.conf: which switch each host hangs on (ingest places groups across racks with it).
    Every node's launcher copies the same file, each atomically."""
    found = switch_topology(environ)
    if found is None:
        return
    with open(found, "rb") as fh:
        data = fh.read(1 << 20)
    atomic_write_bytes(os.path.join(folder, "topology.conf"), data)


def safe_host(host: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "host"
