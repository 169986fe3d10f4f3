"""Writing the trace: the JSON export on the training thread (it needs the profiler), the gzip on a
background thread (zlib releases the GIL, so training goes on), the rename last."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .files import atomic_gzip_file, tmp_name
from .sidecar import Sidecar


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
        try:
            prof.export_chrome_trace(json_tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(json_tmp)
            raise
        if not os.path.exists(json_tmp):  # the profiler reports a failed write (a full disk) on stderr only
            self.warn("could not write the trace: the profiler wrote no file (is the disk full?)")
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
            with contextlib.suppress(OSError):
                os.remove(json_tmp)
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
