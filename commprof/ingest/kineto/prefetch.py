"""Read one big trace in a second process while the command imports what it needs (issue 24).

A cold ``commprof analyze`` of one trace spends ~0.3 s importing polars, numpy and the analyzers and
~0.3 s decoding and scanning the trace, one after the other on one core: the decode holds the GIL
(msgspec), and so do the imports, so a thread cannot overlap them. :func:`start`, called before those
imports, forks a child that imports only what the pass needs (msgspec, the stream and the scan; numpy only
when the trace's times are not all whole µs: the child keeps such columns as array.array, see rows.flush_light),
streams the trace into a :class:`~commprof.ingest.kineto.scan.Scan` and hands it back pickled through a
pipe; the reader's :func:`scanned` takes it instead of reading the file again.

What the user sees does not depend on it: the child runs the same pass, and whenever it is not sure to
have done what the parent would (it failed in any way, even with the trace's own error; the file changed
since; the parent asks for another file or label) the parent does the pass itself, so errors and warnings
come from the same code in the same process as without it. A child whose work is not asked for (the trace
was cached after all, the command stopped early) is killed when the command exits.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commprof.ingest.kineto.decode import StreamResult
    from commprof.ingest.kineto.scan import Scan

# Below these sizes the fork and the child's own imports (~0.15 s of CPU) cost more than the pass they overlap;
# above the upper ones (~150 MB of JSON) the pass dwarfs the imports, and the kept rows, held by the child and
# handed over pickled, would add to the command's peak memory for a few % of its time.
MIN_FILE_BYTES = 1 << 20  # gzip: ~15-20 MB of JSON
MAX_FILE_BYTES = 8 << 20
MIN_PLAIN_BYTES = 8 << 20  # plain JSON
MAX_PLAIN_BYTES = 128 << 20
ENABLE_ENV = "COMMPROF_PREFETCH"  # "0": never; "1": even on a busy machine, and for small traces (tests)


@dataclass
class _Pending:
    pid: int
    fd: int
    path: str
    label: str
    stat_key: tuple[int, int, int, int]
    while_waiting: tuple[str | Callable[[], object], ...] = ()


_pending: list[_Pending] = []
_registered: list[bool] = []  # the exit handler, once per process


def _stat_key(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def scan_trace(path: Path, label: str, light: bool = False) -> tuple[StreamResult, Scan]:
    """The one pass over the trace's events (what ``reader.extract`` reads before building tables). ``light``
    (the child): without numpy where the times allow (see Scan.light); the reader of the Scan adopts it."""
    from commprof.ingest.kineto.scan import Scan
    from commprof.ingest.kineto.stream import stream_events

    scan = Scan(light=light)
    # Hundreds of thousands of small tuples trigger the cyclic GC over and over; nothing here forms
    # cycles, so it is paused for the pass (about a tenth of the ingest time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        streamed = stream_events(path, scan.add, label=label, on_typed=scan.add_typed)
        scan.finish()
    finally:
        if gc_was_enabled:
            gc.enable()
    return streamed, scan


def scanned(path: Path, label: str) -> tuple[StreamResult, Scan]:
    """The pass over ``path``: the child's, when one was started for this file and label and it succeeded
    on the file as it still is; else run here."""
    taken = _take(path, label)
    return taken if taken is not None else scan_trace(path, label)


def start(path_arg: str, while_waiting: tuple[str | Callable[[], object], ...] = ()) -> bool:
    """Fork a child that reads the trace at ``path_arg`` (what the user gave ``analyze``) when it is one
    big Kineto trace that the table cache does not hold yet. False when none was started.
    ``while_waiting``: modules the command imports later anyway, imported when it comes to wait for the
    child (the imports a command makes lazily, after the parse, then cost no time); a callable there is called
    while the child has not handed its pass over yet (work whose cost the command would otherwise pay after the
    parse, such as first uses of a library: its result is not used; once the pass is there it is not worth
    doing early)."""
    wanted = os.environ.get(ENABLE_ENV, "")
    if wanted == "0" or not hasattr(os, "fork") or _pending:
        return False
    if wanted != "1" and not _idle_core():
        return False
    if threading.active_count() != 1:  # forking a process with threads copies their locks, held or not
        return False
    if "polars" in sys.modules and wanted != "1":  # its thread pool, if started, is not the child's to use
        return False  # (the command forks before it imports polars; a caller in-process may have it loaded)
    try:
        path, label = _worth_it(path_arg)
    except Exception:  # noqa: BLE001 - any doubt: no child, the command reads the file as it always did
        return False
    if path is None:
        return False
    try:
        stat_key = _stat_key(path)
        read_fd, write_fd = os.pipe()
    except OSError:
        return False
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return False
    if pid == 0:  # the child: never returns
        _child(read_fd, write_fd, path, label, stat_key)
    os.close(write_fd)
    _pending.append(_Pending(pid, read_fd, str(path), label, stat_key, while_waiting))
    if not _registered:
        atexit.register(_discard)
        _registered.append(True)
    return True


def _idle_core() -> bool:
    """Is a core left for the child? On Linux, the threads runnable right now (/proc/loadavg's 4th field,
    this one among them) against the CPUs this process may use; elsewhere the load average of the last
    minute. On a busy machine the child only competes with this process: no gain for ~0.15 s more CPU."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return False
    try:
        with open("/proc/loadavg") as fh:
            runnable = int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0] < cpus - 0.5
        except (AttributeError, OSError):
            return False
    return runnable <= cpus - 1


def _worth_it(path_arg: str) -> tuple[Path | None, str]:
    """The trace file and the label the store will give it, or (None, "") when no child is worth starting."""
    from commprof.ingest.cache_place import default_places
    from commprof.ingest.discover import discover

    source = discover(path_arg)
    if len(source.traces) != 1:
        return None, ""
    path = source.traces[0]
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(2)
    gz = head == b"\x1f\x8b"
    least = 0 if os.environ.get(ENABLE_ENV) == "1" else MIN_FILE_BYTES if gz else MIN_PLAIN_BYTES
    if size > (MAX_FILE_BYTES if gz else MAX_PLAIN_BYTES) or size < least:
        return None, ""
    if os.environ.get("COMMPROF_SCHEDULER"):  # the parse runs elsewhere
        return None, ""
    if _probably_cached(path, str(path.relative_to(source.root)), default_places(source)):
        return None, ""
    return path, str(path)


def _probably_cached(path: Path, rel: str, places: list[Path]) -> bool:
    """Does a table cache list the file as parsed, at its size and mtime? (A guess: the store decides.)"""
    import json

    st = path.stat()
    for place in places:
        try:
            index = json.loads((place / "_index.json").read_bytes())
        except (OSError, ValueError, RecursionError):
            continue
        rec = (index.get("files") or {}).get(rel) if isinstance(index, dict) else None
        if isinstance(rec, dict) and rec.get("size") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns:
            return True
    return False


def _child(read_fd: int, write_fd: int, path: Path, label: str, stat_key: tuple[int, int, int, int]) -> None:
    """Run the pass and write (stat key, result) to the pipe, or nothing on any failure; exit at once
    (no exit handlers, no buffered output of the parent flushed twice)."""
    status = 1
    try:
        os.close(read_fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: the parent reports it, the child just ends
        # not the command's output: a reader of it (`| head`, a pipe read to its end) never waits for the child
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        from commprof.ingest.kineto.rows import light_ok

        # numpy (~0.07 s of imports) is not needed for a trace of whole-µs times: the parent converts the columns
        result = scan_trace(path, label, light=light_ok())
        data = pickle.dumps((stat_key, result), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
        status = 0
    except BaseException:  # noqa: BLE001 - the parent reads the file itself and meets the error there
        pass
    finally:
        os._exit(status)


def _take(path: Path, label: str) -> tuple[StreamResult, Scan] | None:
    for i, pending in enumerate(_pending):
        if pending.path == str(path) and pending.label == label:
            del _pending[i]
            return _collect(pending, path)
    return None


def _collect(pending: _Pending, path: Path) -> tuple[StreamResult, Scan] | None:
    for name in pending.while_waiting:
        try:
            if not callable(name):
                importlib.import_module(name)
            elif not _handed_over(pending.fd):  # work done early, not extra work: only while there is a wait
                name()
        except Exception:  # noqa: BLE001, PERF203 - it fails again, and is reported, where the command imports it
            continue
    chunks = []
    try:
        while chunk := os.read(pending.fd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        chunks = []
    finally:
        os.close(pending.fd)
    try:
        _, status = os.waitpid(pending.pid, 0)
    except ChildProcessError:
        status = 1
    if status != 0 or not chunks:
        return None
    try:
        stat_key, result = pickle.loads(b"".join(chunks))
        if stat_key != pending.stat_key or _stat_key(path) != stat_key:
            return None  # the file changed while it was read
        result[1].adopt()  # the child's columns into numpy, as the pass here would have made them
    except Exception:  # noqa: BLE001 - unreadable hand-over: read the file here
        return None
    return result  # type: ignore[no-any-return]


def _handed_over(fd: int) -> bool:
    """Has the child written to the pipe (or closed it) yet?"""
    import select

    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _discard() -> None:
    """At exit: stop the children whose work was not asked for."""
    while _pending:
        pending = _pending.pop()
        try:
            os.kill(pending.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.close(pending.fd)
        except OSError:
            pass
        try:
            os.waitpid(pending.pid, 0)
        except ChildProcessError:
            pass
