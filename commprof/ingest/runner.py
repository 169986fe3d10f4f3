"""Where per-rank work runs: in this process, on a pool of local processes, or on a Dask cluster.

Ingest (trace files) and the per-rank analysis (ranks), one or several to a task, hand their tasks to a
:class:`Runner` and get back one :class:`Outcome` per task, in task order, so that every path gives the
same tables (a task of several items gives a list of Outcomes, one per item). A task that fails is an
outcome with a one-line ``error``; the other tasks go on. Tasks are module-level functions with small,
picklable arguments (paths and their ranks' frames): the data stays on the (shared) file system and each
worker reads only its ranks.

- :class:`InProcess` — one task after the other; what small runs and tests use.
- :class:`LocalPool` — a ``spawn`` process pool sized to the cores and the free memory, created on the
  first batch big enough to pay for it and kept for the next batch (ingest, then analysis).
- :class:`DaskRunner` — the same tasks on a ``distributed`` cluster (``--scheduler tcp://host:8786``);
  the workers must see the run and its cache at the same paths and have commprof installed.
  ``distributed`` is imported only here, only when asked for.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from commprof.errors import CommprofError, UsageError

# Bytes of work in one batch before starting worker processes pays off, per phase: trace JSON for ingest,
# interval Parquet (about 1/40 of the JSON) for the analysis. Starting two spawn workers costs about a
# second of imports and each task pays its pickling both ways, so a batch must hold several seconds of
# work: 64 ranks of 0.5 MB JSON (34 MB) ran 1.5x slower in a pool than here on 2 cores (bench_versions).
# A pool already started is reused for a later batch of a quarter of that. COMMPROF_PARALLEL_MIN_BYTES
# overrides both (0 forces the pool).
PARALLEL_MIN_BYTES = {"ingest": 128 << 20, "analysis": 4 << 20}
WORKER_BASE_BYTES = 250 << 20  # an idle worker with polars, numpy and msgspec imported, and headroom
SCHEDULER_ENV = "COMMPROF_SCHEDULER"


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: str | None = None  # one line: what went wrong with this task


@dataclass(frozen=True)
class Progress:
    """Handed to a progress callback after each task: ``phase`` is "ingest" or "analysis"."""

    phase: str
    done: int
    total: int
    bytes_done: int
    bytes_total: int
    failed: int = 0


ProgressFn = Callable[[Progress], None]


def guarded(fn: Callable[..., Any], *args: Any) -> Outcome:
    """Run one task; an exception becomes the task's error line instead of ending the batch."""
    try:
        return Outcome(fn(*args))
    except CommprofError as err:
        return Outcome(error=str(err))
    except MemoryError:
        return Outcome(error="out of memory")
    except Exception as err:  # noqa: BLE001 - a bug in one rank's task must not stop the other ranks
        return Outcome(error=f"{type(err).__name__}: {err}")


# jemalloc (polars' allocator) hands freed pages back at once instead of after its 10 s decay: a
# worker's resident memory then stays near one task's needs across hundreds of tasks
_WORKER_JEMALLOC = "dirty_decay_ms:0,muzzy_decay_ms:0"


PARENT_CHECK_S = 0.25  # how often a worker looks whether its parent still runs


def _watch_parent(parent_pid: int) -> None:
    """A pool worker blocks on its task queue and would outlive a parent killed with SIGKILL by minutes
    (with the resource tracker, which waits for every worker): end with the parent instead. A polling
    thread, not PR_SET_PDEATHSIG, which fires when the *thread* that started the worker ends (a dashboard
    request thread), not the process."""
    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="commprof-parent-watch", daemon=True).start()


def _init_worker(threads: int = 0, parent_pid: int | None = None) -> None:
    """Runs in each pool worker before any task (so before polars loads its allocator and starts its
    thread pool). ``threads``: the cores this worker's polars may use — the pool already has a process
    per core, and each idle polars thread holds memory of its own (a 20 MB trace's task peaked ~6 MB
    higher with a thread per core than with one, and ran no faster: bench/bench_scale.py)."""
    os.environ.setdefault("_RJEM_MALLOC_CONF", _WORKER_JEMALLOC)
    if threads > 0:
        os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
    if parent_pid is not None:
        if os.getppid() != parent_pid:  # the parent died while this worker started
            os._exit(1)
        _watch_parent(parent_pid)


_TRIM_ABOVE_BYTES = 48 << 20  # resident growth since the worker's first task that is handed back
_worker_base_rss: list[int] = []


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def pooled(fn: Callable[..., Any], *args: Any) -> Outcome:
    """:func:`guarded`, then give freed memory back to the system when the worker holds more than
    _TRIM_ABOVE_BYTES over what it held before its first task (a worker lives for many tasks: without
    this its RSS creeps up by what the allocators keep; measured in bench_scale.py). A collection and
    a trim cost ~25 ms, more than a small rank's whole task, so small tasks skip them."""
    if not _worker_base_rss:
        _worker_base_rss.append(_rss_bytes())
    outcome = guarded(fn, *args)
    if _rss_bytes() - _worker_base_rss[0] > _TRIM_ABOVE_BYTES:
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass  # not glibc
        # what the trim could not hand back is held (modules, caches): the next trim waits for as much growth
        # again, or every later task of the worker would pay one (5,000 small ranks: ~2 minutes of CPU)
        _worker_base_rss[0] = max(_worker_base_rss[0], _rss_bytes())
    return outcome


CHUNKS_PER_WORKER = 16  # a pool's tasks go in about this many hand-offs per worker (one task each when fewer)


def pooled_chunk(fn: Callable[..., Any], chunk: Sequence[tuple[Any, ...]]) -> list[Outcome]:
    """:func:`pooled` for each task of a chunk, in order."""
    return [pooled(fn, *args) for args in chunk]


class Runner:
    """Runs a batch of tasks; subclasses say where. ``remote``: the workers do not share this process'
    working directory, so paths handed to tasks must be absolute."""

    remote = False
    workers = 1

    def run(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], weights: Sequence[int],
            phase: str, progress: ProgressFn | None = None, units: Sequence[int] | None = None) -> list[Outcome]:
        raise NotImplementedError

    def run_alone(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], phase: str) -> list[Outcome]:
        """Each task where its failure takes no other task down: what a task of several items that was lost
        whole (its worker died) runs again as, one item to a task. Here: :meth:`run`."""
        return self.run(fn, tasks, [0] * len(tasks), phase)

    def close(self) -> None:
        """Stop whatever workers were started."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        return "in process"


class _Tally:
    """Progress after each task. ``units``: how many items (traces) each task stands for, when a task does
    several; such a task's value is then its list of per-item Outcomes, and each failed one counts."""

    def __init__(self, phase: str, weights: Sequence[int], progress: ProgressFn | None,
                 units: Sequence[int] | None = None) -> None:
        self.phase, self.weights, self.progress = phase, weights, progress
        self.units = units
        self.done = self.bytes_done = self.failed = 0
        self.total_bytes = sum(weights)
        self.total = sum(units) if units is not None else len(weights)

    def tick(self, index: int, outcome: Outcome) -> None:
        self.bytes_done += self.weights[index]
        if self.units is None:
            self.done += 1
            self.failed += outcome.error is not None
        else:
            self.done += self.units[index]
            items = outcome.value if outcome.error is None and isinstance(outcome.value, list) else None
            self.failed += self.units[index] if items is None else \
                sum(isinstance(o, Outcome) and o.error is not None for o in items)
        if self.progress:
            self.progress(Progress(self.phase, self.done, self.total, self.bytes_done, self.total_bytes,
                                   self.failed))


class InProcess(Runner):
    def run(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], weights: Sequence[int],
            phase: str, progress: ProgressFn | None = None, units: Sequence[int] | None = None) -> list[Outcome]:
        tally = _Tally(phase, weights, progress, units)
        out = []
        for i, args in enumerate(tasks):
            outcome = guarded(fn, *args)
            tally.tick(i, outcome)
            out.append(outcome)
        return out


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers(largest_task_bytes: int, tasks: int) -> int:
    """One worker per usable core, fewer when the free memory cannot hold that many workers each
    holding the largest task (a worker needs about twice a trace's text: see bench/bench_scale.py)."""
    cpus = usable_cpus()
    free = available_memory_bytes()
    by_memory = cpus if free is None else max(1, int(0.8 * free) // (WORKER_BASE_BYTES + 2 * largest_task_bytes))
    return max(1, min(cpus, by_memory, tasks))


def _can_spawn() -> bool:
    """"spawn" re-imports the caller's main script: one that is not a file (python -, -c) cannot be."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is None or os.path.exists(main_file)


class LocalPool(Runner):
    """A ``spawn`` process pool (not fork: the parent runs polars' thread pool, and a forked child can
    inherit a held lock). ``workers=None`` sizes it from the cores and free memory and uses it only for
    batches of at least PARALLEL_MIN_BYTES of the phase; an explicit count always uses it (when it is > 1)."""

    def __init__(self, workers: int | None = None) -> None:
        self.requested = workers
        self.workers = workers or 0
        self._pool: ProcessPoolExecutor | None = None
        self._broken = False  # workers could not start here: every later batch runs in process

    def describe(self) -> str:
        return f"{self.workers} local processes" if self._pool else "in process"

    def _wanted(self, weights: Sequence[int], largest: int, phase: str) -> int:
        if self._broken or len(weights) < 2 or not _can_spawn():
            return 1
        if self.requested is not None:
            return min(self.requested, len(weights))
        override = os.environ.get("COMMPROF_PARALLEL_MIN_BYTES")
        threshold = int(override) if override else PARALLEL_MIN_BYTES.get(phase, PARALLEL_MIN_BYTES["ingest"])
        if sum(weights) < (threshold if self._pool is None else threshold // 4):
            return 1
        return default_workers(largest, len(weights))

    def run(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], weights: Sequence[int],
            phase: str, progress: ProgressFn | None = None, units: Sequence[int] | None = None) -> list[Outcome]:
        n = self._wanted(weights, max(weights, default=0), phase)
        if n <= 1:
            return InProcess().run(fn, tasks, weights, phase, progress, units)
        if self._pool is None and not self._start(n):
            return InProcess().run(fn, tasks, weights, phase, progress, units)
        tally = _Tally(phase, weights, progress, units)
        results: dict[int, Outcome] = {}
        lost = self._submit_all(fn, tasks, tally, results)
        if lost:
            self._retry_alone(fn, tasks, lost, tally, results)
        return [results[i] for i in range(len(tasks))]

    def run_alone(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], phase: str) -> list[Outcome]:
        """Each task in a fresh single process (as a task lost to a dead worker is retried), not in this process
        where a small batch would run: the item that killed its worker would kill this process."""
        if self._broken or not _can_spawn():
            return super().run_alone(fn, tasks, phase)
        results: dict[int, Outcome] = {}
        self._retry_alone(fn, tasks, list(range(len(tasks))), _Tally(phase, [0] * len(tasks), None), results)
        return [results[i] for i in range(len(tasks))]

    def _start(self, n: int) -> bool:
        """Start the pool and see a worker answer. Workers that cannot start (e.g. a script calling
        open_run() without an ``if __name__ == "__main__":`` guard, which "spawn" re-imports) mean this
        process does the work; a pool that breaks later broke on a task (see _retry_alone)."""
        self.workers = n
        self._pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker,
                                         initargs=(max(1, usable_cpus() // n), os.getpid()))
        try:
            self._pool.submit(os.getpid).result()
        except BrokenProcessPool:
            self._broken = True
            self.close()
            return False
        return True

    def _submit_all(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], tally: _Tally,
                    results: dict[int, Outcome]) -> list[int]:
        """Run the batch; the indexes of tasks lost to a broken pool (a worker that died)."""
        assert self._pool is not None
        # many small tasks (5,000 ranks' analysis) go a chunk to a hand-off, as Executor.map's chunksize does:
        # each hand-off is a pickle, a pipe message and a future each way
        size = max(1, len(tasks) // (max(1, self.workers) * CHUNKS_PER_WORKER))
        chunks = [list(range(start, min(start + size, len(tasks)))) for start in range(0, len(tasks), size)]
        try:
            pending: dict[Future[list[Outcome]], list[int]] = {
                self._pool.submit(pooled_chunk, fn, [tasks[i] for i in chunk]): chunk for chunk in chunks}
        except BrokenProcessPool:
            self.close()
            return list(range(len(tasks)))
        lost = []
        # as_completed, not a loop of wait(FIRST_COMPLETED): each wait() installs a waiter on every pending
        # future, so that loop costs O(tasks^2) lock operations (5,000 tasks: ~16M, a core busy for a minute)
        for fut in as_completed(pending):
            chunk = pending[fut]
            try:
                outcomes = fut.result()
            except BrokenProcessPool:
                lost.extend(chunk)
                continue
            for i, outcome in zip(chunk, outcomes, strict=True):
                results[i] = outcome
                tally.tick(i, outcome)
        if lost:
            self.close()
        return sorted(lost)

    def _retry_alone(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], lost: list[int],
                     tally: _Tally, results: dict[int, Outcome]) -> None:
        """A worker died (killed, out of memory) and took the pool's pending tasks with it: run those
        again one at a time, each in a fresh single process, so only the task that kills its worker
        fails."""
        context = multiprocessing.get_context("spawn")
        for i in lost:
            with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_init_worker,
                                     initargs=(0, os.getpid())) as alone:
                try:
                    results[i] = alone.submit(pooled, fn, *tasks[i]).result()
                except BrokenProcessPool:
                    results[i] = Outcome(error="its worker process died (killed, or out of memory?)")
            tally.tick(i, results[i])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class DaskRunner(Runner):
    """Tasks on a Dask ``distributed`` cluster; results gathered and reduced here, on the client."""

    remote = True

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise UsageError("--scheduler needs Dask: pip install 'commprof[dask]' (dask[distributed])") from None
        self.address = address
        try:
            self.client = Client(address, timeout=timeout_s, set_as_default=False)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as err:
            raise UsageError(f"cannot reach the Dask scheduler at {address}: {err}") from None
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def describe(self) -> str:
        return f"Dask cluster at {self.address} ({self.workers} workers)"

    def run(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], weights: Sequence[int],
            phase: str, progress: ProgressFn | None = None, units: Sequence[int] | None = None) -> list[Outcome]:
        from distributed import as_completed

        tally = _Tally(phase, weights, progress, units)
        batch = uuid.uuid4().hex[:8]
        futures = [self.client.submit(pooled, fn, *args, key=f"commprof-{phase}-{batch}-{i}", pure=False)
                   for i, args in enumerate(tasks)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: dict[int, Outcome] = {}
        for fut in as_completed(futures, loop=self.client.loop):  # type: ignore[no-untyped-call]
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except Exception as err:  # noqa: BLE001 - a killed worker (KilledWorker) fails only its task
                results[i] = Outcome(error=f"Dask task failed: {type(err).__name__}: {err}")
            tally.tick(i, results[i])
            fut.release()
        return [results[i] for i in range(len(tasks))]

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]


def make_runner(workers: int | None = None, scheduler: str | None = None) -> Runner:
    """The runner for ``--workers`` / ``--scheduler`` (or COMMPROF_SCHEDULER); a pool sized to the
    machine by default."""
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if scheduler:
        return DaskRunner(scheduler)
    if workers == 1:
        return InProcess()
    return LocalPool(workers)
