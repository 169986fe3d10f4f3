"""Writing the trace: the JSON export on the training thread (it needs the profiler), the gzip on a
background thread (zlib releases the GIL, so training goes on), the rename last.

A full disk: torch's exporter (Kineto's C++ writer) writes ``<name>.tmp``, then renames it. When a write
fails part-way it says so on stderr only and leaves that partial file behind, holding all the room that was
left, and open (until the profiler object goes: removing the name alone frees nothing); when only its last
flush (at close) fails, it renames the cut-short trace as if whole. So the export does not start on a disk
with less than ``RESERVE_BYTES`` free (that room stays the training's), a partial file is emptied and
removed at once, and a trace cut short is dropped rather than compressed into a file no reader can parse.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .files import atomic_gzip_file, tmp_name
from .sidecar import Sidecar

RESERVE_BYTES = 16 << 20  # the launcher's "disk full" too: below this, writes have been failing
_KINETO_TMP = ".tmp"  # Kineto's ChromeTraceLogger writes <path>.tmp, then renames it to <path>


def free_bytes(folder: str) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _remove(*paths: str) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)


def _release(path: str) -> None:
    """Remove the writer's partial file and give its room back now: the profiler keeps it open (until the
    profiler object goes), so removing the name alone frees nothing."""
    with contextlib.suppress(OSError):
        os.truncate(path, 0)
    _remove(path)


def ends_whole(path: str) -> bool:
    """Kineto ends its trace with the top-level object's ``}`` on a line of its own; a trace cut at a
    block boundary by a full disk ends inside an event (its ``}`` indented) or mid-line."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256))
            tail = fh.read().rstrip()
    except OSError:
        return False
    return tail.endswith(b"\n}") or tail == b"}"


class TraceWriter:
    def __init__(self, sidecar: Sidecar, warn: Callable[[str], None]) -> None:
        self.sidecar = sidecar
        self.path = sidecar.paths.trace
        self.warn = warn
        self.export_ms: float | None = None
        self._thread: threading.Thread | None = None

    def export(self, prof: Any) -> None:
        started = time.perf_counter()
        json_tmp = tmp_name(self.path[: -len(".gz")])
        partial = json_tmp + _KINETO_TMP
        folder = os.path.dirname(self.path)
        free = free_bytes(folder)
        if free is not None and free < RESERVE_BYTES:
            self.warn(f"no trace written: the disk is full ({free >> 10} KiB free); the training keeps that room")
            return
        try:
            prof.export_chrome_trace(json_tmp)
        except BaseException:
            _release(partial)
            _remove(json_tmp)
            raise
        if not os.path.exists(json_tmp):  # the profiler reports a failed write (a full disk) on stderr only
            _release(partial)
            self.warn("could not write the trace: the profiler wrote no file (is the disk full?)")
            return
        free = free_bytes(folder)
        if free is not None and free < RESERVE_BYTES and not ends_whole(json_tmp):
            _remove(json_tmp)
            self.warn("could not write the trace: the profiler wrote it cut short (the disk is full)")
            return
        self.export_ms = (time.perf_counter() - started) * 1e3
        self._thread = threading.Thread(target=self._compress, args=(json_tmp,), name="commprof-trace-gzip",
                                        daemon=True)
        self._thread.start()

    def _compress(self, json_tmp: str) -> None:
        started = time.perf_counter()
        try:
            size = atomic_gzip_file(json_tmp, self.path)
        except Exception as err:
            self.warn(f"could not write the trace ({type(err).__name__}: {err})")
            return
        finally:
            _remove(json_tmp)
        sidecar = self.sidecar
        with sidecar.lock:
            sidecar.window["trace_bytes"] = size
            sidecar.window["gzip_ms"] = round((time.perf_counter() - started) * 1e3, 3)
            sidecar.set_file("trace", self.path)
        with contextlib.suppress(Exception):
            sidecar.write()

    def wait(self, timeout_s: float = 300.0) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)
