"""Writing files so that a full disk, a read-only place or a kill never leaves half a file that a later
run trusts: every file is written under a hidden temporary name beside its target and renamed over it
last; a failed write removes its temporary file and becomes one :class:`WriteError` line (exit 2) that
names the path and what to do.

Temporary names carry the host and the process id (``.tmp-<host>-<pid>-<name>``), so that
:func:`sweep_temporaries` can remove those of processes that died here (``kill -9`` while writing)
without touching the files another live process is writing right now.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

from commprof.errors import CommprofError

TMP_PREFIX = ".tmp-"
# a temporary file of another host (a Dask worker, a shared file system) is only swept when this old
FOREIGN_TMP_MAX_AGE_S = 24 * 3600
CACHE_HINT = "set COMMPROF_CACHE_DIR to a folder on a disk with room"


class WriteError(CommprofError):
    """A file that could not be written (full disk, read-only place, no permission)."""

    def __init__(self, what: str, path: str | Path, err: OSError, hint: str | None = None) -> None:
        self.errno = err.errno
        self.is_read_only = err.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        reason = (err.strerror or str(err)).lower()
        super().__init__(f"cannot write {what}: {reason}" + f"; {hint or advice(err)}", path)


def advice(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "free some space there or write elsewhere"
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "choose a writable place"
    if err.errno in (errno.ENOENT, errno.ENOTDIR):
        return "its folder does not exist"
    return "check the file system"


def _host() -> str:
    import socket  # here: the command forks kineto.prefetch's child before it needs it

    return "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40] or "host"


def temporary_name(target: Path) -> Path:
    return target.with_name(f"{TMP_PREFIX}{_host()}-{os.getpid()}-{target.name}")


def atomic_write(target: Path, write: Callable[[Path], object], what: str, hint: str | None = None,
                 make_parents: bool = False) -> None:
    """``write(tmp)`` fills a temporary file beside ``target``, which then replaces ``target``. Any
    OSError removes the temporary file and raises WriteError naming ``target``. ``make_parents``: create
    missing folders (our caches; a user's -o into a missing folder is their typo, and an error)."""
    tmp = temporary_name(target)
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, target)
    except OSError as err:
        remove_quietly(tmp)
        raise WriteError(what, target, err, hint) from None
    except BaseException:
        remove_quietly(tmp)
        raise


def atomic_write_bytes(target: Path, data: bytes, what: str, hint: str | None = None,
                       make_parents: bool = False) -> None:
    atomic_write(target, lambda tmp: tmp.write_bytes(data), what, hint, make_parents)


def atomic_write_text(target: Path, text: str, what: str, hint: str | None = None) -> None:
    atomic_write_bytes(target, text.encode("utf-8"), what, hint)


def remove_quietly(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep_temporaries(folder: Path, max_depth: int = 2) -> int:
    """Remove the temporary files under ``folder`` (``max_depth`` levels) whose writer is gone: a process
    of this host that no longer runs, or any writer after FOREIGN_TMP_MAX_AGE_S. Returns how many."""
    removed = 0
    here = f"{TMP_PREFIX}{_host()}-"
    now = time.time()
    for depth in range(max_depth + 1):
        for path in folder.glob("/".join(["*"] * depth + [f"{TMP_PREFIX}*"])):
            name = path.name
            if name.startswith(here):
                pid_text = name[len(here):].split("-", 1)[0]
                stale = pid_text.isdigit() and not _alive(int(pid_text))
            else:
                try:
                    stale = now - path.lstat().st_mtime > FOREIGN_TMP_MAX_AGE_S
                except OSError:
                    continue
            if stale:
                remove_quietly(path)
                removed += 1
    return removed


def writable_folder(folder: Path) -> OSError | None:
    """None when files can be created in ``folder`` (created if missing), else why not. A real probe:
    ``os.access`` says yes to root in a chmod'ed folder and cannot see a full disk's quota."""
    probe = temporary_name(folder / "probe")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        remove_quietly(probe)
        return err
    return None
