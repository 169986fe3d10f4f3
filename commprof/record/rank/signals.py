"""SIGTERM: a rank writes out what it recorded before it dies.

A hung job is killed with SIGTERM (torchrun passes it to its workers), and a hang is when a user needs
the recording most. Python runs a signal handler on the main thread only, between bytecodes: a training
thread blocked in a C++ collective wait never runs it. So two paths:

- the handler on the main thread, when that thread is not blocked: it flushes there (the profiler is
  stopped on the thread that drives it);
- a watcher thread woken through ``signal.set_wakeup_fd`` (the interpreter's C-level handler writes the
  signal number to it at once): when the main thread has not started flushing within ``GRACE_S``, it
  is blocked, and the watcher flushes what can be flushed from another thread.

Either way the process then dies of SIGTERM with the default action, as it would have without us (the
exit status torchrun sees is unchanged). Installed only when SIGTERM has its default disposition: a
script's own handler is left alone (and a handler installed later replaces ours, which is the script's
choice). A wakeup fd set by someone else (asyncio) is left in place; then only the main-thread path runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

GRACE_S = 1.0  # a main thread that is not blocked runs the handler within this
FLUSH_TIMEOUT_S = 60.0  # torchrun sends SIGKILL 30 s after SIGTERM by default


class TermFlush:
    """``flush(signal_name, where, on_main_thread)`` is called once; then the process dies of SIGTERM."""

    def __init__(self, flush: Callable[[str, str, bool], None]) -> None:
        self.flush = flush
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._main_ident = threading.main_thread().ident

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        signal.signal(signal.SIGTERM, self._on_main_thread)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous != -1:  # someone else's (asyncio): theirs stays; the main-thread path still works
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return True
        # a forked child (a DataLoader worker) inherits the wakeup fd: its own SIGTERM must not wake our
        # watcher, so the child's copy of the write end points at /dev/null
        os.register_at_fork(after_in_child=lambda: _silence(write_fd))
        threading.Thread(target=self._watch, args=(read_fd,), name="commprof-sigterm", daemon=True).start()
        return True

    def _on_main_thread(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() == self._pid:
            self._run(where_frame(frame), True)
        _die()

    def _watch(self, read_fd: int) -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM not in data or os.getpid() != self._pid:
                continue
            if signal.getsignal(signal.SIGTERM) != self._on_main_thread:
                continue  # the script installed its own handler since: SIGTERM is its business
            if self._started.wait(GRACE_S):
                return  # the main thread flushes and then ends the process
            frame = sys._current_frames().get(self._main_ident) if self._main_ident else None
            self._run(where_frame(frame) + " (blocked)", False)
            _die()

    def _run(self, where: str, on_main_thread: bool) -> None:
        if not self._lock.acquire(blocking=True, timeout=FLUSH_TIMEOUT_S):
            return
        try:
            if self._started.is_set():
                return
            self._started.set()
            with contextlib.suppress(Exception):
                self.flush("SIGTERM", where, on_main_thread)
        finally:
            self._lock.release()


def _silence(fd: int) -> None:
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


def where_frame(frame: FrameType | None) -> str:
    """The innermost frame of the script and the innermost frame of all, as ``file:line in func``."""
    if frame is None:
        return "unknown"
    innermost = _describe(frame)
    script = None
    f: FrameType | None = frame
    while f is not None:
        name = f.f_code.co_filename
        if "site-packages" not in name and "/torch/" not in name and "_commprof_rank" not in name \
                and not name.startswith("<") and "commprof/record" not in name:
            script = _describe(f)
            break
        f = f.f_back
    return innermost if script in (None, innermost) else f"{script} → {innermost}"


def _describe(frame: FrameType) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def _die() -> None:
    """End with SIGTERM's default action (from any thread: ``signal.signal`` only works on the main one)."""
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
            libc.signal(int(signal.SIGTERM), None)  # SIG_DFL is 0
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)
    finally:
        os._exit(128 + int(signal.SIGTERM))  # only if the signal did not end us
