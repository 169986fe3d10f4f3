"""The run directory: a fresh name per run, never written over (see FORMAT.md for its layout)."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commprof.errors import UsageError
from commprof.ingest.job_parts import job_key, read_parts
from commprof.record.job import JOIN_WINDOW_S, JobIdentity
from commprof.record.rank.files import tmp_name

MANIFEST = "manifest.json"
RAW_DIRS = ("traces", "ranks", "nccl", "flight_recorder", "topology", "launchers")
_OWNED = ("manifest.json", "raw", "tables")


def default_run_dir(base: Path = Path("runs")) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return base / f"{stamp}-{secrets.token_hex(3)}"


def prepare_run_dir(path: Path, force: bool) -> Path:
    """Create ``path`` and its ``raw/`` folders for a launcher that is alone in its job (see :func:`claim`)."""
    path = _checked(path)
    with _usage_errors(path):
        _clear_or_refuse(path, force)
        _make_raw(path)
    return path


def _checked(path: Path) -> Path:
    path = path.expanduser().absolute()
    if path.is_symlink() and not path.exists():
        raise UsageError(f"is a symbolic link to {os.readlink(path)!r}, which does not exist", path)
    return path


@contextmanager
def _usage_errors(path: Path) -> Iterator[None]:
    """Every problem with the path (a dangling symlink, a file on the way, no permission, a read-only or full
    file system) is a one-line UsageError, before the job starts."""
    try:
        yield
    except NotADirectoryError as err:
        on_the_way = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
        raise UsageError(f"cannot create the run directory: {on_the_way or err.filename} is a file, not a "
                         "folder", path) from None
    except OSError as err:
        where = err.filename if err.filename and str(err.filename) != str(path) else None
        reason = (err.strerror or str(err)).lower()
        raise UsageError(f"cannot create the run directory: {reason}" + (f" ({where})" if where else ""),
                         path) from None


def _make_raw(path: Path) -> None:
    for name in RAW_DIRS:
        (path / "raw" / name).mkdir(parents=True, exist_ok=True)
    probe = path / f".commprof-probe-{os.getpid()}-{socket.gethostname()}-{secrets.token_hex(4)}"
    probe.write_bytes(b"")
    probe.unlink()


@dataclass(frozen=True)
class Claim:
    run_dir: Path
    joined: bool  # another launcher of the same job made the folder: this one adds its node's part
    note: str | None = None


def claim(path: Path, force: bool, job: JobIdentity | None, first_manifest: dict[str, Any],
          now: Callable[[], float] = time.time) -> Claim:
    """Make ``path`` this job's run directory, or join it when another launcher of the same job made it.

    The first launcher creates ``manifest.json`` exclusively (a hard link of a complete file: two launchers
    starting at once cannot both be first); every later one reads it and joins when it names the same job,
    recorded now (a part still running, or the job started within JOIN_WINDOW_S). A folder holding another
    job, an earlier run of this one, or files commprof did not write is refused (``force`` clears an earlier
    run, never a job still recording). No lock server: each launcher writes only its own files."""
    path = _checked(path)
    with _usage_errors(path):
        for _ in range(3):
            existing = _settled_manifest(path)
            if existing is not None:
                decision = _join_or_refuse(path, existing, force, job, now())
                if decision is not None:
                    _make_raw(path)
                    return decision
                _clear_or_refuse(path, force)  # force: an earlier run, cleared
            elif path.is_dir() and not _being_made(path):
                _clear_or_refuse(path, force)
            path.mkdir(parents=True, exist_ok=True)
            if _create_exclusive(path / MANIFEST, first_manifest):
                _make_raw(path)
                return Claim(path, joined=False)
        raise UsageError("another launcher keeps replacing manifest.json here; record into another folder", path)


def _settled_manifest(path: Path, wait_s: float = 10.0) -> dict[str, Any] | None:
    """The folder's manifest; None when there is none. A folder that another launcher is creating right now
    (only ``raw/`` and temporary files in it) is given a few seconds to get its manifest."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
            return doc if isinstance(doc, dict) else {}
        except (FileNotFoundError, NotADirectoryError):
            pass
        except (OSError, ValueError):
            return {}  # unreadable: not this job's (refused, or cleared with force)
        if not path.is_dir() or not any(path.iterdir()) or not _being_made(path) or time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def _being_made(path: Path) -> bool:
    """Empty, or holding only what a launcher creating the run writes around its manifest's creation (the
    manifest itself may appear between two looks: it is read again)."""
    try:
        return all(p.name in ("raw", MANIFEST) or p.name.startswith((f".{MANIFEST}", ".commprof-probe-"))
                   for p in path.iterdir())
    except OSError:
        return False


def _join_or_refuse(path: Path, existing: dict[str, Any], force: bool, job: JobIdentity | None,
                    now: float) -> Claim | None:
    """Claim(joined) for the same job recorded now; None when ``force`` may clear the folder; else refuse."""
    key = job_key(existing)
    if job is not None and key == job.key:
        started = _job_started(path, existing)
        if _still_recording(path) or (started is not None and now - started < JOIN_WINDOW_S):
            return Claim(path, joined=True, note=f"joined the recording of job {job.source} in {path}")
        if not force:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)) if started else "earlier"
            raise UsageError(f"holds an earlier run of this job ({job.source}, started {when}, no node still "
                             "recording); choose another folder or pass --force to replace it", path)
        return None
    if _still_recording(path) and key is not None:
        raise UsageError(f"another job ({_job_source(existing)}) is recording into this folder; choose another "
                         "(-o)" + ("" if job else "; launchers of one job join one folder when they share a "
                                   "SLURM job, an MPI job, a torchrun rendezvous or --job-id"), path)
    if force:
        return None
    other = f"job {_job_source(existing)}" if key else "a run"
    raise UsageError(f"output directory already holds {other}; choose another or pass --force"
                     + ("" if job or not key else " (this launcher names no job: pass --job-id to join)"), path)


def _job_source(doc: dict[str, Any]) -> str:
    job = doc.get("job")
    return str(job.get("source") or job.get("key")) if isinstance(job, dict) else "?"


def _job_started(path: Path, manifest: dict[str, Any]) -> float | None:
    try:
        return os.stat(path / MANIFEST).st_mtime if not manifest.get("start") else _iso_seconds(manifest["start"])
    except (OSError, ValueError, TypeError):
        return None


def _iso_seconds(text: str) -> float:
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def _still_recording(path: Path) -> bool:
    """A launcher part says "running" and is not a dead launcher of this host (one killed with SIGKILL)."""
    host = socket.gethostname()
    for part in read_parts(path, []):
        if part.get("status") != "running":
            continue
        launcher = part.get("launcher")
        launcher = launcher if isinstance(launcher, dict) else {}
        if launcher.get("host") != host or _alive(launcher.get("pid")):
            return True
    return False


def _alive(pid: Any) -> bool:
    if type(pid) is not int or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _create_exclusive(final: Path, doc: dict[str, Any]) -> bool:
    """Write ``doc`` to ``final`` only if no file is there; False when another launcher was first."""
    tmp = Path(f"{tmp_name(str(final))}-{socket.gethostname()}-{secrets.token_hex(4)}")  # pids repeat across hosts
    try:
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
        os.link(tmp, final)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _clear_or_refuse(path: Path, force: bool) -> None:
    if path.exists() and not path.is_dir():
        raise UsageError("exists and is not a directory", path)
    if path.is_dir() and any(path.iterdir()):
        if not force:
            raise UsageError("output directory is not empty; choose another or pass --force", path)
        if not (path / "manifest.json").is_file():
            raise UsageError("not a commprof run directory (no manifest.json); refusing to clear it", path)
        strangers = sorted(p.name for p in path.iterdir() if p.name not in _OWNED)
        if strangers:
            raise UsageError(f"holds files commprof did not write ({', '.join(strangers[:3])}); refusing", path)
        for name in _OWNED:
            target = path / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()



def disk_free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def leftover_temp_files(run_dir: Path, mine: Callable[[str], bool] | None = None) -> list[Path]:
    """Half-written files (a rank died while writing): ``.<name>.tmp-<pid>``. ``mine(name)``: only those
    whose final name this launcher's ranks or host write (the other nodes' files are still being written)."""
    found: list[Path] = []
    for dirpath, _, filenames in os.walk(run_dir / "raw"):
        found.extend(Path(dirpath) / f for f in filenames if f.startswith(".") and ".tmp-" in f
                     and (mine is None or mine(f[1:f.index(".tmp-")])))
    return sorted(found)
