"""The run directory: a fresh name per run, never written over (see FORMAT.md for its layout)."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
from pathlib import Path

from commprof.errors import UsageError

RAW_DIRS = ("traces", "ranks", "nccl", "flight_recorder", "topology")
_OWNED = ("manifest.json", "raw", "tables")


def default_run_dir(base: Path = Path("runs")) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return base / f"{stamp}-{secrets.token_hex(3)}"


def prepare_run_dir(path: Path, force: bool) -> Path:
    """Create ``path`` and its ``raw/`` folders. A non-empty folder is refused; with ``force`` a
    previous commprof run there (it has a manifest.json) is cleared first, anything else still refused.
    Every problem with the path (a dangling symlink, a file on the way, no permission, a read-only or
    full file system) is a one-line UsageError here, before the job starts."""
    path = path.expanduser().absolute()
    if path.is_symlink() and not path.exists():
        raise UsageError(f"is a symbolic link to {os.readlink(path)!r}, which does not exist", path)
    try:
        _clear_or_refuse(path, force)
        for name in RAW_DIRS:
            (path / "raw" / name).mkdir(parents=True, exist_ok=True)
        probe = path / f".commprof-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except NotADirectoryError as err:
        on_the_way = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
        raise UsageError(f"cannot create the run directory: {on_the_way or err.filename} is a file, not a "
                         "folder", path) from None
    except OSError as err:
        where = err.filename if err.filename and str(err.filename) != str(path) else None
        reason = (err.strerror or str(err)).lower()
        raise UsageError(f"cannot create the run directory: {reason}" + (f" ({where})" if where else ""),
                         path) from None
    return path


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


def leftover_temp_files(run_dir: Path) -> list[Path]:
    """Half-written files (a rank died while writing): ``.<name>.tmp-<pid>``."""
    found: list[Path] = []
    for dirpath, _, filenames in os.walk(run_dir / "raw"):
        found.extend(Path(dirpath) / f for f in filenames if f.startswith(".") and ".tmp-" in f)
    return sorted(found)
