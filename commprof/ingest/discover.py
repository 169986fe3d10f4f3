"""Find the traces of a run: a commprof run directory, any folder of Kineto traces, or one file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commprof.errors import InputError

TRACE_SUFFIXES = (".json", ".json.gz")
# Folders that hold other raw data (NCCL logs, Flight Recorder, topology, rank sidecars) or our cache.
SIDECAR_DIRS = frozenset({"nccl", "flight_recorder", "topology", "ranks", "tables", "__pycache__"})
NOT_TRACES = frozenset({"manifest.json"})


@dataclass(frozen=True)
class Source:
    path: Path  # what the user gave
    kind: str  # "run" | "folder" | "file"
    root: Path  # folder that trace paths are relative to
    traces: tuple[Path, ...]
    manifest: dict[str, Any] | None


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name not in NOT_TRACES


def _walk(folder: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SIDECAR_DIRS and not d.startswith("."))
        found.extend(Path(dirpath) / f for f in sorted(filenames) if is_trace_name(f))
    return found


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"unreadable manifest: {err}", path) from None
    if not isinstance(data, dict):
        raise InputError("manifest is not a JSON object", path)
    return data


def discover(path: str | Path) -> Source:
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError("no such file or folder", p)
    if p.is_file():
        if not is_trace_name(p.name):
            raise InputError("not a trace file (expected .json or .json.gz)", p)
        return Source(p, "file", p.parent, (p,), None)
    manifest_path = p / "manifest.json"
    if manifest_path.is_file():
        manifest = _read_manifest(manifest_path)
        raw = p / "raw"
        traces = _walk(raw) if raw.is_dir() else []
        if not traces:
            raise InputError("run directory has no traces under raw/ (did the job reach its profiling window?)", p)
        return Source(p, "run", p, tuple(traces), manifest)
    traces = _walk(p)
    if not traces:
        raise InputError("no Kineto traces (*.json, *.json.gz) in this folder", p)
    return Source(p, "folder", p, tuple(traces), None)
