"""Find the traces of a run: a commprof run directory, any folder of Kineto traces, or one file."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commprof.errors import InputError

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")  # Kineto traces; nsys exports (nsys export --type sqlite)
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
    problems: tuple[str, ...] = ()  # files passed over (not regular files, unreadable) and manifest fields ignored


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name not in NOT_TRACES


def _walk(folder: Path, problems: list[str]) -> list[Path]:
    """Trace files under ``folder``. Links to folders are followed (a ``raw/traces`` that is a link to
    another disk is common), each real folder once: a link back up the tree is passed over with a line."""
    found: list[Path] = []
    # a folder above the one walked is a loop too (a link to ".."): its ancestors count as read
    seen = {(st.st_dev, st.st_ino) for st in _stats(Path(os.path.realpath(folder)).parents)}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            problems.append(f"{dirpath}: a link back to a folder already read (a loop); not followed again")
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if d not in SIDECAR_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if is_trace_name(name) and _regular(path, problems):
                found.append(path)
    return found


def _stats(paths: Iterable[Path]) -> list[os.stat_result]:
    return [path.stat() for path in paths if path.exists()]


def _regular(path: Path, problems: list[str]) -> bool:
    """Only regular files are opened: a FIFO would block the read forever, a device never ends, and a
    dangling or looping symlink fails. Each is passed over with a line saying why."""
    why = regular_file_problem(path)
    if why:
        problems.append(f"{path}: {why}; skipped")
    return why is None


def regular_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a regular file, or None."""
    try:
        st = path.stat()
    except OSError as err:
        if path.is_symlink():
            return f"symbolic link that leads nowhere ({err.strerror.lower() if err.strerror else err})"
        return f"cannot be read ({err.strerror or err})"
    if stat.S_ISFIFO(st.st_mode):
        return "a named pipe (FIFO), not a file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


_INT_FIELDS = ("rank", "local_rank", "pid", "world_size")
_TEXT_FIELDS = ("host", "gpu_name", "backend", "window_status")
# notes that say a rank's data is missing or partial (not the environment notes)
_RANK_NOTE = re.compile(r"\brank|half-written|killed|died|unreadable", re.IGNORECASE)
MAX_RANK = 1 << 24


def _plain_int(value: Any, low: int = 0, high: int = 1 << 31) -> bool:
    return type(value) is int and low <= value < high


def _clean_rank(info: Any) -> dict[str, Any] | None:
    if not isinstance(info, dict) or not _plain_int(info.get("rank"), 0, MAX_RANK):
        return None
    clean = dict(info)
    for key in _INT_FIELDS:
        if key in clean and clean[key] is not None and not _plain_int(clean[key], 0, 1 << 62):
            clean[key] = None
    for key in _TEXT_FIELDS:
        if key in clean and clean[key] is not None and not isinstance(clean[key], str):
            clean[key] = None
    if not isinstance(clean.get("device"), (str, int, type(None))) or isinstance(clean.get("device"), bool):
        clean["device"] = None
    return clean


def _read_manifest(path: Path, problems: list[str]) -> dict[str, Any]:
    """The manifest, with every field that commprof reads checked for type and range: a bad one is
    dropped with a line in ``problems``, never read as garbage."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise InputError(f"unreadable manifest: {err}", path) from None
    if not isinstance(data, dict):
        raise InputError("manifest is not a JSON object", path)
    ranks = data.get("ranks")
    if ranks is not None:
        kept = [c for c in (_clean_rank(r) for r in ranks) if c is not None] if isinstance(ranks, list) else []
        if not isinstance(ranks, list):
            problems.append(f"{path}: ignored 'ranks' (not a list)")
        elif len(kept) < len(ranks):
            problems.append(f"{path}: ignored {len(ranks) - len(kept)} malformed entries of 'ranks'")
        data["ranks"] = kept
    if data.get("world_size") is not None and not _plain_int(data["world_size"], 1, MAX_RANK + 1):
        problems.append(f"{path}: ignored world_size {str(data['world_size'])[:40]!r} (not a whole number of ranks)")
        data["world_size"] = None
    if not isinstance(data.get("notes", []), list):
        problems.append(f"{path}: ignored 'notes' (not a list)")
        data["notes"] = []
    if not isinstance(data.get("synthetic", False), bool):
        data["synthetic"] = False
    return data


def manifest_warnings(manifest: dict[str, Any] | None) -> list[str]:
    """What ``commprof record`` noted about ranks that died, half-written files and the command's exit:
    the analysis of such a run is of the ranks that are left, and says so."""
    if not manifest:
        return []
    out = [f"recording: {note}" for note in manifest.get("notes") or []
           if isinstance(note, str) and _RANK_NOTE.search(note)]
    status, code = manifest.get("status"), manifest.get("exit_code")
    if status == "failed":
        sig = manifest.get("exit_signal")
        out.append(f"recording: the recorded command failed (exit code {code}{f', {sig}' if sig else ''})")
    elif status == "running":
        out.append("recording: the manifest says the run never finished (commprof record itself was killed?)")
    return out


def _why_no_traces(run_dir: Path, manifest: dict[str, Any]) -> str:
    """What ``commprof record`` noted about a job that left no trace (killed while hung: where each
    rank was), and the Flight Recorder dumps it kept."""
    notes = [n for n in manifest.get("notes") or [] if isinstance(n, str) and n.startswith(("killed by", "no trace"))]
    folder = run_dir / "raw" / "flight_recorder"
    dumps = len(list(folder.glob("rank-*.json"))) if folder.is_dir() else 0
    kept = f"; Flight Recorder dumps of {dumps} rank(s) are in {folder}" if dumps else ""
    return f": {'; '.join(notes)}{kept}" if notes else f" (did the job reach its profiling window?){kept}"


def discover(path: str | Path) -> Source:
    p = Path(path).expanduser()
    if not p.exists():
        why = "symbolic link that leads nowhere" if p.is_symlink() else "no such file or folder"
        raise InputError(why, p)
    problems: list[str] = []
    if not p.is_dir():
        problem = regular_file_problem(p)
        if problem:
            raise InputError(problem, p)
        if not is_trace_name(p.name):
            raise InputError("not a trace file (expected a Kineto .json / .json.gz or an nsys .sqlite export)", p)
        return Source(p, "file", p.parent, (p,), None)
    manifest_path = p / "manifest.json"
    if manifest_path.is_file():
        manifest = _read_manifest(manifest_path, problems)
        raw = p / "raw"
        traces = _walk(raw, problems) if raw.is_dir() else []
        if not traces:
            raise InputError("run directory has no traces under raw/" + _why_no_traces(p, manifest)
                             + (f"; {problems[-1]}" if problems else ""), p)
        return Source(p, "run", p, tuple(traces), manifest, tuple(problems))
    traces = _walk(p, problems)
    if not traces:
        raise InputError("no traces (Kineto *.json, *.json.gz; nsys *.sqlite) in this folder"
                         + (f"; {problems[-1]}" if problems else ""), p)
    return Source(p, "folder", p, tuple(traces), None, tuple(problems))
