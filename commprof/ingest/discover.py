"""Find the traces of a run: a commprof run directory, any folder of Kineto traces, or one file."""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from commprof.errors import InputError
from commprof.ingest.job_parts import job_key, join_documents, ranges, same_job, window_name

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")  # Kineto traces; nsys exports (nsys export --type sqlite)
# Folders that hold other raw data (NCCL logs, Flight Recorder, topology, rank sidecars) or our cache.
SIDECAR_DIRS = frozenset({"nccl", "flight_recorder", "topology", "ranks", "launchers", "tables", "__pycache__"})
WINDOWS_DIR = "windows"  # record --every / --on-demand: windows/step-<S>/, each a run directory
NOT_TRACES = frozenset({"manifest.json"})
RAS_JSON_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class Source:
    path: Path  # what the user gave (the first path, when several)
    kind: str  # "run" | "folder" | "file" | "job" (several run directories or folders of one job)
    root: Path  # folder that trace paths are relative to
    traces: tuple[Path, ...]
    manifest: dict[str, Any] | None  # a job's: the union of its launchers' parts (ingest.job_parts)
    problems: tuple[str, ...] = ()  # files passed over (not regular files, unreadable) and manifest fields ignored
    folders: tuple[Path, ...] = ()  # a job's run directories and trace folders (each node's), in the order given
    given: tuple[Path, ...] = ()  # every path the user gave
    # record --every/--on-demand: the run's windows (each windows/step-<S>/, a run directory of its own), oldest
    # first, by name; the source itself is the newest window (of every node folder given)
    windows: tuple[tuple[str, tuple[Path, ...]], ...] = ()

    @property
    def run_dirs(self) -> tuple[Path, ...]:
        """The run directories (manifest.json + raw/) whose sidecars, logs and dumps belong to this run."""
        if self.kind == "job":
            return tuple(f for f in self.folders if (f / "manifest.json").is_file())
        return (self.root,) if self.kind == "run" else ()

    @property
    def input_folders(self) -> tuple[Path, ...]:
        """Where NCCL logs, topology captures and Flight Recorder dumps are looked for."""
        if self.kind == "job":
            return self.folders
        return (self.path,) if self.kind != "file" else ()

    @property
    def identity(self) -> str:
        """The run as one text (the per-user cache's folder is named after it)."""
        if self.kind == "job" and len(self.given) != 1:
            return "\n".join(str(f.resolve()) for f in self.folders)
        return str(self.path.resolve())

    @property
    def label(self) -> str:
        """The run as people name it: the path given, or the paths joined."""
        return " + ".join(str(g) for g in self.given) if len(self.given) > 1 else str(self.path)


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
            if not is_trace_name(name):
                continue  # no Path made for the rest (a folder of 16,384 Flight Recorder dumps)
            path = Path(dirpath) / name
            if _regular(path, problems) and not _ras_json(path):
                found.append(path)
    return found


def _ras_json(path: Path) -> bool:
    """An NCCL RAS report saved as JSON (``ncclras -f json``) is no trace: the hang report reads it. Only small
    .json files are looked into (a report is kilobytes; a trace rarely is)."""
    if not path.name.endswith(".json"):
        return False
    try:
        if path.stat().st_size > RAS_JSON_MAX_BYTES:
            return False
    except OSError:
        return False
    from commprof.ingest.nccl_ras import is_ras_report

    return is_ras_report(path)


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


_INT_FIELDS = ("rank", "local_rank", "pid", "world_size", "local_world_size", "node_rank")
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


def _load_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise InputError(f"unreadable manifest: {err}", path) from None
    if not isinstance(data, dict):
        raise InputError("manifest is not a JSON object", path)
    return data


def _read_manifest(path: Path, problems: list[str]) -> dict[str, Any]:
    """The manifest (the union of the launchers' parts beside it, when the job had several), with every field
    that commprof reads checked for type and range: a bad one is dropped with a line in ``problems``."""
    data, joined = join_documents([path.parent], [_checked_manifest(_load_manifest(path), path, problems)], problems)
    problems.extend(joined)
    return _checked_manifest(data, path, []) if joined or data.get("nodes") else data


def _checked_manifest(data: dict[str, Any], path: Path, problems: list[str]) -> dict[str, Any]:
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
    the analysis of such a run is of the ranks that are left, and says so. A job of several launchers says it
    per node: the one whose command failed, the one that never finished (killed with its node)."""
    if not manifest:
        return []
    out = [f"recording: {note}" for note in manifest.get("notes") or []
           if isinstance(note, str) and _RANK_NOTE.search(note)]
    nodes = [n for n in manifest.get("nodes") or [] if isinstance(n, dict)]
    if len(nodes) > 1:
        return out + [_node_line(n) for n in nodes if n.get("status") in ("failed", "running")]
    status, code = manifest.get("status"), manifest.get("exit_code")
    if status == "failed":
        sig = manifest.get("exit_signal")
        out.append(f"recording: the recorded command failed (exit code {code}{f', {sig}' if sig else ''})")
    elif status == "running":
        out.append("recording: the manifest says the run never finished (commprof record itself was killed?)")
    return out


def _node_line(node: dict[str, Any]) -> str:
    ranks = node.get("ranks") or []
    whose = f" (ranks {ranges([r for r in ranks if type(r) is int])})" if ranks else ""
    if node.get("status") == "failed":
        sig = node.get("exit_signal")
        return (f"recording: the recorded command failed on {node.get('host')}{whose} (exit code "
                f"{node.get('exit_code')}{f', {sig}' if sig else ''})")
    return (f"recording: the launcher on {node.get('host')}{whose} never finished (killed, or its node died): its "
            "ranks' files are what they wrote before")


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
        windows = window_runs(p)
        if not traces and windows:  # repeating windows: the newest whole one is the run's report, all its trend
            named = [(w.name, (w,)) for w in windows]
            pick = _reported_window(named, problems)
            newest = discover(windows[pick])
            return replace(newest, windows=tuple(named), problems=tuple(problems) + newest.problems)
        if not traces:
            raise InputError("run directory has no traces under raw/" + _why_no_traces(p, manifest)
                             + (f"; {problems[-1]}" if problems else ""), p)
        return Source(p, "run", p, tuple(traces), manifest, tuple(problems))
    node_runs = _node_runs(p)
    if node_runs:
        return _join([discover(run) for run in node_runs], given=(p,), root=p)
    traces = _walk(p, problems)
    if not traces:
        raise InputError("no traces (Kineto *.json, *.json.gz; nsys *.sqlite) in this folder"
                         + (f"; {problems[-1]}" if problems else ""), p)
    return Source(p, "folder", p, tuple(traces), None, tuple(problems))


def _trace_count(window: Path) -> int:
    try:
        return sum(1 for t in (window / "raw" / "traces").iterdir() if is_trace_name(t.name))
    except OSError:
        return 0


def _window_traces(paths: tuple[Path, ...]) -> int:
    return sum(_trace_count(p) for p in paths)


def _reported_window(windows: Sequence[tuple[str, tuple[Path, ...]]], problems: list[str]) -> int:
    """Which window (oldest first) is the run's report: the newest, unless it holds fewer ranks' traces than an
    older one. Time windows open on each rank's own clock, so a job can end with the newest window open on some
    ranks only; its report would be those ranks' alone. Said in ``problems``; the trend keeps every window."""
    counts = [_window_traces(paths) for _, paths in windows]
    most = max(counts, default=0)
    pick = max(i for i, c in enumerate(counts) if c == most) if counts else 0
    if pick != len(windows) - 1:
        skipped = ", ".join(f"{windows[i][0]} ({counts[i]})" for i in range(pick + 1, len(windows)))
        problems.append(f"the newest windows hold fewer ranks' traces than {windows[pick][0]} ({most}): {skipped} "
                        f"(opened on some ranks only before the job ended); the report is {windows[pick][0]}'s, "
                        "the trend lists them all")
    return pick


def window_runs(run_dir: Path) -> list[Path]:
    """The windows of a run recorded with ``--every``/``--on-demand`` that hold a trace (``windows/step-<S>/``, or
    ``windows/time-<T>/`` for time windows; each a run directory), oldest first."""
    folder = run_dir / WINDOWS_DIR
    try:
        names = sorted(c.name for c in folder.iterdir() if c.name.startswith(("step-", "time-")) and c.is_dir())
    except OSError:
        return []
    found = []
    for name in names:
        window = folder / name
        traces = window / "raw" / "traces"
        if (window / "manifest.json").is_file() and traces.is_dir() and any(
                is_trace_name(t.name) for t in traces.iterdir()):
            found.append(window)
    return found


def _job_text(manifest: dict[str, Any] | None) -> str:
    job = (manifest or {}).get("job") or {}
    window = (manifest or {}).get("window")
    which = f", window {window.get('name')}" if isinstance(window, dict) and window.get("name") else ""
    return f"job {job.get('source') or job.get('key')} started {(manifest or {}).get('start') or '?'}{which}"


def recorded_job(path: Path) -> dict[str, Any] | None:
    """The manifest of a run directory recorded as part of a named job (``job_parts.same_job`` tells whether
    two are the same job's nodes); None for anything else."""
    try:
        manifest = _read_manifest(path / "manifest.json", []) if (path / "manifest.json").is_file() else None
    except InputError:
        return None
    return manifest if job_key(manifest) else None


def _node_runs(folder: Path) -> list[Path]:
    """Run directories right under ``folder`` (one per node, copied off the nodes' local disks)."""
    try:  # names sorted, folders told by their entries: no Path nor stat per file of a folder of 16,384 dumps
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(".") and e.name not in SIDECAR_DIRS
                           and e.is_dir())
    except OSError:
        return []
    return [folder / name for name in names if (folder / name / "manifest.json").is_file()]


def discover_paths(paths: Iterable[str | Path]) -> Source:
    """One run from the paths given: a run directory, a folder of traces or a trace file each, or a parent
    folder of node folders; several paths are the parts of one job (the folders its nodes recorded)."""
    given = [Path(p).expanduser() for p in paths]
    if not given:
        raise InputError("no path given")
    if len(given) == 1:
        return discover(given[0])
    return _join([discover(p) for p in given], given=tuple(given))


def _join(sources: list[Source], given: tuple[Path, ...], root: Path | None = None) -> Source:
    """Several nodes' folders as one job: their traces together, their manifests as one (every launcher part),
    each folder's sidecars, logs and dumps read where they lie. Folders of different recorded jobs are refused."""
    if any(s.windows for s in sources):  # node folders of a run with repeating windows: window by window
        by_name: dict[str, list[Path]] = {}
        for s in sources:
            for name, paths in s.windows or ((s.path.name, (s.root,)),):
                by_name.setdefault(name, []).extend(paths)
        names = sorted(by_name)
        in_order = [(n, tuple(by_name[n])) for n in names]
        notes: list[str] = []
        pick = _reported_window(in_order, notes)
        newest = _join([discover(p) for p in by_name[names[pick]]], given=given, root=root)
        return replace(newest, windows=tuple(in_order), problems=tuple(notes) + newest.problems)
    sources = [d for s in sources for d in ([discover(f) for f in s.folders] if s.kind == "job" else [s])]
    named = sorted({n for s in sources if (n := window_name(s.manifest))})
    if len(named) > 1:
        raise InputError(f"these folders are different windows of a run ({', '.join(named)}): analyze one at a time "
                         "(or the run folder, for all of them), or compare two with `commprof diff A B`")
    recorded = [s for s in sources if job_key(s.manifest)]
    strangers = [s for s in recorded[1:] if not same_job(recorded[0].manifest, s.manifest)]
    if strangers:
        listed = "; ".join(f"{s.path}: {_job_text(s.manifest)}" for s in (recorded[0], *strangers))
        raise InputError(f"these folders hold different jobs ({listed}): analyze one job at a time, or compare "
                         "them with `commprof diff`")
    folders = tuple(dict.fromkeys(s.root for s in sources if s.kind != "file"))
    traces = [t if root is not None else t.absolute() for s in sources for t in s.traces]
    dupes = [t for t, n in Counter(traces).items() if n > 1]
    if dupes:
        raise InputError(f"the same trace is given twice ({sorted(dupes)[0]}): give each node's folder once")
    problems = [q for s in sources for q in s.problems]
    runs = [s for s in sources if s.kind == "run"]
    manifest = None
    if runs:
        manifest, joined = join_documents([s.root for s in runs], [s.manifest or {} for s in runs], problems)
        problems.extend(joined)
        manifest = _checked_manifest(manifest, runs[0].root / "manifest.json", problems)
    top = root or Path(os.path.commonpath([str(s.root.absolute()) for s in sources]))
    return Source(given[0], "job", top, tuple(traces), manifest, tuple(dict.fromkeys(problems)),
                  folders=tuple(f if root is not None else f.absolute() for f in folders), given=given)
