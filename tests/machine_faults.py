"""Breaking the machine for real, as an operator would: a full disk, a read-only folder.

- :func:`full_disk`: a small tmpfs filled to ``free_bytes`` (root, or CAP_SYS_ADMIN); elsewhere the same
  writes fail with EFBIG through a file-size rlimit (RLIMIT_FSIZE with SIGXFSZ ignored, in a child process
  only: see :func:`fsize_limit_preexec`), which commprof must treat the same way.
- :func:`read_only`: a read-only bind mount of the folder over itself (root: chmod means nothing to root),
  else chmod a-w.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def full_disk(folder: Path, size_kib: int = 4096, free_bytes: int = 0) -> Iterator[Path]:
    """``folder`` becomes a tmpfs of ``size_kib`` KiB; call :func:`fill` once its files are in."""
    folder.mkdir(parents=True, exist_ok=True)
    if not can_mount() or not _mount("-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path, free_bytes: int = 0) -> None:
    """Fill the file system of ``folder`` until at most ``free_bytes`` are left."""
    filler = folder / "filler"
    with filler.open("wb") as fh:
        try:
            while True:
                st = os.statvfs(folder)
                left = st.f_bavail * st.f_frsize - free_bytes
                if left <= 0:
                    break
                fh.write(b"\0" * min(left, 1 << 20))
                fh.flush()
        except OSError:
            pass


def fsize_limit_preexec(limit_bytes: int) -> Callable[[], None]:
    """For subprocess(preexec_fn=...): writes past ``limit_bytes`` fail with EFBIG instead of a signal."""
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return preexec


@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` read-only for this process and its children, for real."""
    if can_mount():
        if not _mount("--bind", str(folder), str(folder)):
            pytest.skip("bind mount failed")
        try:
            if not _mount("-o", "remount,ro,bind", str(folder)):
                pytest.skip("read-only remount failed")
            yield folder
        finally:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        return
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")] if not p.is_symlink()}
    for p, mode in modes.items():
        p.chmod(mode & ~0o222)
    try:
        yield folder
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp-" in p.name]
