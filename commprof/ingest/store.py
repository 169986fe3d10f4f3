"""The Parquet cache under ``tables/``: one set of files per raw trace, keyed by the trace's size,
mtime, ctime, inode and content hash and the ingest version (see commprof.ingest.cache_place), so that a
stale table is never used and a changed rank is re-parsed alone. Raw traces are parsed as one task each
on a runner (commprof.ingest.runner). Every file is written under a temporary name and renamed (the index
last): a process killed or a disk filled mid-way leaves nothing that a later open trusts.

Layout::

    tables/_index.json                 {ingest_version, files: {relpath: {size, mtime_ns, ctime_ns, ino,
                                        digest, stem, meta}}}
    tables/<table>/<stem>.parquet      intervals, collectives, step_marks, process_groups

``meta`` is the trace's rank identity and warnings: a re-open of a 1,000-rank run reads one index
instead of a thousand small files, and a ``--ranks`` subset learns which files to open from it.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from commprof.errors import CommprofError, InputError, NotATraceError, TruncatedTraceError
from commprof.ingest import cache_place
from commprof.ingest.common import comm_kernels
from commprof.ingest.discover import Source, regular_file_problem
from commprof.ingest.exports import FORMAT as EXPORT_FORMAT
from commprof.ingest.formats import RankTrace, extract, rank_from_file_name
from commprof.ingest.rank_sidecar import MSGSPEC_FROM, SidecarIndex, clean_sidecar, decode_sidecar, decode_slim
from commprof.ingest.runner import InProcess, Outcome, ProgressFn, Runner, guarded, make_runner, usable_cpus
from commprof.ingest.schema import INGEST_VERSION
from commprof.safe_write import CACHE_HINT, WriteError, atomic_write_bytes
from commprof.stages import timed

TABLES = ("intervals", "collectives", "step_marks", "process_groups")
INDEX = "_index.json"


@dataclass(frozen=True)
class FileEntry:
    path: Path
    rel: str
    stem: str
    size: int
    mtime_ns: int
    label: str = ""  # the file as the user gave it, for messages (a split export's parts: "<export>#rank-N")
    ctime_ns: int = 0  # with ino: what an edit in place or a copy cannot keep (see cache_place)
    ino: int = 0

    @property
    def stat_key(self) -> tuple[int, int, int, int]:
        return self.size, self.mtime_ns, self.ctime_ns, self.ino


def default_cache_dir(source: Source) -> Path:
    """Where the cache of ``source`` is written when that place is writable (see cache_place.choose)."""
    return cache_place.default_places(source)[0]


def _entries(source: Source) -> list[FileEntry]:
    out = []
    for path in source.traces:
        st = path.stat()
        rel = str(path.relative_to(source.root))
        stem = hashlib.sha1(rel.encode()).hexdigest()[:12] + "-" + path.name.split(".")[0][:40]
        out.append(FileEntry(path, rel, stem, st.st_size, st.st_mtime_ns, ctime_ns=st.st_ctime_ns, ino=st.st_ino))
    return out


def _recorded_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return rec.get("size"), rec.get("mtime_ns"), rec.get("ctime_ns"), rec.get("ino")


EXPORT_MARK = EXPORT_FORMAT.encode()


def _is_merged_export(path: Path) -> bool:
    """A ``commprof export --perfetto`` file: all ranks in one trace, one pid per rank."""
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
        if head[:2] == b"\x1f\x8b":
            inflater = zlib.decompressobj(wbits=31)
            first = inflater.decompress(head, 1 << 12)
            if b'"distributedInfo"' in first:  # a rank's trace says so in its first lines: no need to go on
                return False
            head = first + inflater.decompress(inflater.unconsumed_tail, (1 << 16) - len(first))
    except (OSError, zlib.error):
        return False
    return EXPORT_MARK in head and b'"distributedInfo"' not in head


def _expand_exports(entries: list[FileEntry], cache: Path, known: dict[str, Any]) -> list[FileEntry]:
    """Split each merged export into one trace per rank under ``tables/split/`` (redone when the
    export changes), so that it reads back as the run it came from. A file the index already holds
    unchanged was a plain trace: it is not opened again (a cached re-open stays cheap)."""
    out: list[FileEntry] = []
    for entry in entries:
        rec = known.get(entry.rel) or {}
        if _recorded_key(rec) == entry.stat_key or not _is_merged_export(entry.path):
            out.append(entry)
            continue
        folder = cache / "split" / entry.stem
        key = ":".join(str(v) for v in entry.stat_key)
        marker = folder / ".source"
        if not marker.is_file() or marker.read_text() != key:
            from commprof.ingest.exports import split_by_rank

            raw = entry.path.read_bytes()
            try:
                trace = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            except (OSError, ValueError, RecursionError) as err:
                raise InputError(f"unreadable commprof export: {err}", entry.path) from None
            for rank, part in split_by_rank(trace).items():
                _cache_write(cache, folder / f"rank-{rank}.json", json.dumps(part).encode())
            _cache_write(cache, marker, key.encode())
        for part_path in sorted(folder.glob("rank-*.json")):
            suffix = part_path.name.split(".")[0]
            out.append(FileEntry(part_path, f"{entry.rel}#{suffix}", f"{entry.stem}-{suffix}", entry.size,
                                 entry.mtime_ns, f"{entry.path}#{suffix}", entry.ctime_ns, entry.ino))
    return out


def _cache_write(cache: Path, target: Path, data: bytes) -> None:
    """Written whole or not at all; a failure (full disk) is one line naming the cache folder."""
    try:
        atomic_write_bytes(target, data, "the table cache", make_parents=True)
    except WriteError as err:
        raise WriteError("the table cache", cache, OSError(err.errno, os.strerror(err.errno or 5)),
                         CACHE_HINT) from None


# Rows per Parquet row group. polars' default (512^2) makes it hold a text column's every value for the group at
# once while it dictionary-encodes it: a 304 MB kernel-heavy trace's tables took +41 MB to write, +8 MB so (the
# same files' tables; no slower).
ROW_GROUP_ROWS = 1 << 14


def _write_frame(frame: pl.DataFrame, target: Path, cache: Path) -> None:
    # through a buffer: polars reports a full disk as a ComputeError without its errno
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="zstd", statistics=False, row_group_size=ROW_GROUP_ROWS)
    _cache_write(cache, target, buffer.getvalue())


# The tables of the batch this process wrote last, by file: what the analysis of the run just parsed reads
# back (a cold ``analyze`` of one big trace read its four files again, ~8 ms; issue 24). Only in the main
# process (a pool's worker never reads its tables back: it would only hold memory), only column types
# that Parquet gives back as they were, and only while the file is the one written (its stat since).
_WRITTEN: dict[str, tuple[tuple[int, int, int], pl.DataFrame]] = {}
_ROUND_TRIP = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.String,
               pl.Boolean, pl.Float32, pl.Float64, pl.Enum)


def _file_key(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def _round_trips(dtype: Any) -> bool:
    if isinstance(dtype, pl.List):
        return _round_trips(dtype.inner)
    return isinstance(dtype, _ROUND_TRIP)


def _remember(frames: dict[str, pl.DataFrame], name: str, cache: Path) -> None:
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return
    for t in TABLES:
        frame, target = frames[t], cache / t / f"{name}.parquet"
        if all(_round_trips(d) for d in frame.schema.values()):
            with contextlib.suppress(OSError):
                _WRITTEN[str(target)] = (_file_key(target), frame)


def written(path: Path) -> pl.DataFrame | None:
    """The frame this process wrote to ``path`` last, while the file is still that one; else None."""
    hit = _WRITTEN.get(str(path))
    if hit is None:
        return None
    try:
        return hit[1] if _file_key(path) == hit[0] else None
    except OSError:
        return None


def _read_parquet(path: Path) -> pl.DataFrame:
    frame = written(path)
    return pl.read_parquet(path) if frame is None else frame


# Small traces are parsed several to a task and their tables written together, one Parquet file per table
# for the batch (a 4 kB trace's own four files and its task hand-off cost ~10x its parse); a trace above
# BATCH_ALONE_BYTES of JSON keeps a task and files of its own, named by its stem, as before.
BATCH_MAX_FILES = 64
BATCH_MAX_BYTES = 4 << 20
BATCH_ALONE_BYTES = 1 << 20


def _extract_one(entry: FileEntry, sidecars: SidecarIndex | None,
                 step_range: str | None, defer: bool = False) -> tuple[dict[str, Any], RankTrace | None]:
    """One trace: its meta and tables, or (a skipped entry, None)."""
    label = entry.label or str(entry.path)
    try:
        digest = cache_place.content_digest(entry.path)  # before the parse: an edit during it shows next time
        rank_trace: RankTrace = extract(entry.path, sidecars, label=label, step_range=step_range, defer=defer)
    except TruncatedTraceError as err:
        return {"file": label, "rel": entry.rel, "skipped": str(err), "warnings": [f"{err}; rank skipped"]}, None
    except NotATraceError as err:
        return {"file": label, "rel": entry.rel, "skipped": str(err), "not_a_trace": True,
                "warnings": [f"{err}; skipped (not a Kineto trace)"]}, None
    except OSError as err:  # removed or made unreadable since it was found
        why = f"{label}: cannot be read ({err.strerror or err})"
        return {"file": label, "rel": entry.rel, "skipped": why, "warnings": [f"{why}; rank skipped"]}, None
    meta = {
        "file": str(entry.path),
        "rel": entry.rel,
        "rank": rank_trace.rank,
        "rank_source": rank_trace.rank_source,
        "world_size": rank_trace.world_size,
        "backend": rank_trace.backend,
        "host": rank_trace.host,
        "pid": rank_trace.pid,
        "device": rank_trace.device,
        "gpu_name": rank_trace.gpu_name,
        "mode": rank_trace.mode,
        "warnings": rank_trace.warnings,
        "uncounted": rank_trace.uncounted,
        "n_intervals": len(rank_trace.intervals),
        "corrupt": rank_trace.corrupt,
        "digest": digest,
        "source": rank_trace.source,
    }
    return meta, rank_trace


def _batch_name(entries: list[FileEntry], metas: list[dict[str, Any]], salt: str) -> str:
    """A file shared by several traces is named by what they are (stems, stat keys, digests, the ingest
    version and what else changes the tables): never the name of a file holding other contents."""
    key = "|".join(f"{e.stem}:{e.stat_key}:{m.get('digest')}" for e, m in zip(entries, metas, strict=True))
    return "batch-" + hashlib.sha1(f"{INGEST_VERSION}|{salt}|{key}".encode()).hexdigest()[:20]


def parse_batch(entries: list[FileEntry], cache: Path, sidecars: SidecarIndex | None = None,
                step_range: str | None = None, salt: str = "",
                declared: tuple[comm_kernels.Declared, ...] = ()) -> list[Outcome]:
    """Parse a batch of raw traces and write their tables (runs in a worker process): one Outcome per
    trace, as if each had been a task of its own (a trace whose parse raises is that trace's error). The
    traces' tables go to one file per table for all of them (a lone trace's are named by its stem);
    each meta says where (``part``) and at which rows (``rows``). A cache that cannot be written comes back
    as ``cache_error`` in every meta (the whole ingest stops on it, not just this rank)."""
    # several traces: their GPU tables are built once for the batch (kineto.reader.stack). Should that
    # raise, the task fails and _parse_all runs each trace alone, where its own error is its outcome.
    from commprof.ingest.kineto.reader import stack  # here: a cached ``analyze`` never loads the reader

    defer = len(entries) > 1
    _WRITTEN.clear()  # the last batch's frames: not held while this one is parsed
    with comm_kernels.declaring(declared):  # the user's kernel families, for the readers' name rules
        outcomes = [guarded(_extract_one, e, sidecars, step_range, defer) for e in entries]
    done = [(e, o.value[0], o.value[1]) for e, o in zip(entries, outcomes, strict=True)
            if o.error is None and o.value[1] is not None]
    # traces whose tables share their column types share a file (the rest, e.g. another reader's, get their own)
    groups: dict[tuple[Any, ...], list[tuple[FileEntry, dict[str, Any], RankTrace]]] = {}
    for item in done:
        signature = tuple(tuple(getattr(item[2], t).schema.items()) for t in TABLES)
        groups.setdefault(signature, []).append(item)
    for items in groups.values():
        name = items[0][0].stem if len(items) == 1 else _batch_name([e for e, _, _ in items],
                                                                    [m for _, m, _ in items], salt)
        frames = {t: stack([getattr(rt, t) for _, _, rt in items]) for t in TABLES}
        offsets = dict.fromkeys(TABLES, 0)
        for _, meta, rt in items:
            rows = {}
            for t in TABLES:
                n = getattr(rt, t).height
                rows[t] = [offsets[t], n]
                offsets[t] += n
            meta["part"] = {"file": name, "rows": rows} if len(items) > 1 else {"file": name}
        problem = _write_tables(frames, name, cache)
        if problem is not None:
            for _, meta, _ in items:
                meta["cache_error"] = problem
        else:
            _remember(frames, name, cache)
    return [o if o.error is not None else Outcome(o.value[0]) for o in outcomes]


# From this many rows in all, a trace's tables are written one after the other: polars encodes each on every core
# anyway, and written at once their buffers added up (a 304 MB kernel-heavy trace's ingest peaked ~3 MB higher).
ONE_BY_ONE_ROWS = 1 << 18


def _write_tables(frames: dict[str, pl.DataFrame], name: str, cache: Path) -> str | None:
    """The four tables at once: polars encodes and the OS writes them without the GIL; all are written, or
    the error comes back, before the task ends. Big tables one after the other (ONE_BY_ONE_ROWS)."""
    one_by_one = sum(frame.height for frame in frames.values()) >= ONE_BY_ONE_ROWS
    writes = []
    for t in TABLES:
        writes.append(_writer().submit(_write_frame, frames[t], cache / t / f"{name}.parquet", cache))
        if one_by_one:
            writes[-1].exception()  # waits for it
    for problem in [w.exception() for w in writes]:
        if isinstance(problem, WriteError):
            return str(problem)
        if problem is not None:
            raise problem
    return None


def parse_one(entry: FileEntry, cache: Path, sidecars: SidecarIndex | None = None,
              step_range: str | None = None) -> dict[str, Any]:
    """Parse one raw trace and write its tables (:func:`parse_batch` of one)."""
    outcome = parse_batch([entry], cache, sidecars, step_range)[0]
    if outcome.error is not None:
        raise CommprofError(outcome.error)
    meta: dict[str, Any] = outcome.value
    if "cache_error" in meta:
        return {"file": entry.label or str(entry.path), "rel": entry.rel, "cache_error": meta["cache_error"]}
    return meta


_WRITERS: list[ThreadPoolExecutor] = []


def _writer() -> ThreadPoolExecutor:
    if not _WRITERS:
        _WRITERS.append(ThreadPoolExecutor(len(TABLES), thread_name_prefix="commprof-cache-write"))
    return _WRITERS[0]


def _batches(weights: list[int], parallel: int) -> list[list[int]]:
    """Consecutive traces grouped into tasks: small ones up to BATCH_MAX_FILES / BATCH_MAX_BYTES of JSON
    (and no more than leaves ~4 tasks per worker of ``parallel``, for balance), each big one alone."""
    most = BATCH_MAX_FILES if parallel <= 1 else max(1, min(BATCH_MAX_FILES, -(-len(weights) // (4 * parallel))))
    out: list[list[int]] = []
    size = 0
    for i, weight in enumerate(weights):
        alone = weight > BATCH_ALONE_BYTES
        if alone or not out or len(out[-1]) >= most or size + weight > BATCH_MAX_BYTES \
                or weights[out[-1][0]] > BATCH_ALONE_BYTES:
            out.append([i])
            size = weight
        else:
            out[-1].append(i)
            size += weight
    return out


def _parse_all(todo: list[FileEntry], cache: Path, runner: Runner, sidecars: SidecarIndex,
               progress: ProgressFn | None, step_range: str | None = None, salt: str = "",
               declared: tuple[comm_kernels.Declared, ...] = ()) -> list[dict[str, Any]]:
    """Parse every trace on the runner, small ones several to a task. A file whose parse fails (corrupt
    gzip, a bug) becomes a skipped entry with its error: it is reported, the other ranks complete, and it
    is not cached, so the next open tries it again. A task lost whole (its worker died) is run again one
    trace to a task, so that only the trace that kills its worker fails."""
    if runner.remote:  # the workers do not share our working directory
        todo = [replace(e, path=e.path.absolute(), label=e.label or str(e.path)) for e in todo]
    weights = [_text_bytes(e) for e in todo]
    parallel = 1 if isinstance(runner, InProcess) else (runner.workers or usable_cpus())
    results: list[Outcome | None] = [None] * len(todo)

    def run(groups: list[list[int]], progress: ProgressFn | None) -> list[list[int]]:
        tasks = [([todo[i] for i in g], cache, sidecars, step_range, salt, declared) for g in groups]
        outcomes = runner.run(parse_batch, tasks, [sum(weights[i] for i in g) for g in groups], "ingest", progress,
                              [len(g) for g in groups])
        lost: list[list[int]] = []
        for group, outcome in zip(groups, outcomes, strict=True):
            if outcome.error is not None and len(group) > 1:
                lost.extend([i] for i in group)
                continue
            per_file = outcome.value if outcome.error is None else [outcome]
            for i, one in zip(group, per_file, strict=True):
                results[i] = one
        return lost

    lost = run(_batches(weights, parallel), progress)
    if lost:
        run(lost, None)
    outcomes = [r if r is not None else Outcome(error="not run") for r in results]
    cache_errors = [o.value["cache_error"] for o in outcomes if isinstance(o.value, dict) and "cache_error" in o.value]
    if cache_errors:
        raise CommprofError(cache_errors[0])
    metas = []
    for entry, outcome in zip(todo, outcomes, strict=True):
        if outcome.error is None:
            metas.append(outcome.value)
            continue
        metas.append({"file": entry.label or str(entry.path), "rel": entry.rel, "skipped": outcome.error,
                      "failed": True, "warnings": [f"{outcome.error}; rank skipped, the other ranks are analyzed"]})
    return metas


def _text_bytes(entry: FileEntry) -> int:
    """The trace's JSON size, what a worker's memory and the MB/s follow: a gzip file says it in its
    last 4 bytes (modulo 4 GiB, so never taken below the compressed size)."""
    if not entry.path.name.endswith(".gz"):
        return entry.size
    try:
        with entry.path.open("rb") as fh:
            fh.seek(-4, os.SEEK_END)
            return max(entry.size, int.from_bytes(fh.read(4), "little"))
    except OSError:
        return entry.size


def read_sidecars(source: Source, problems: list[str] | None = None) -> tuple[SidecarIndex, str]:
    """The rank sidecars of a ``commprof record`` run (raw/ranks/rank-N.json of each node's run directory),
    as an index (commprof.ingest.rank_sidecar.SidecarIndex: what the run needs of each, where each is), and a
    signature of their contents (part of the cache key: they change how Gloo ops are attributed). Fields of
    the wrong shape are dropped, each with a line in ``problems``."""
    sidecars, signature = SidecarIndex(), []
    problems = problems if problems is not None else []
    for run_dir in source.run_dirs:
        folder = run_dir / "raw" / "ranks"
        if not folder.is_dir():
            continue
        paths = sorted(folder.glob("rank-*.json"))
        fast = len(paths) >= MSGSPEC_FROM
        for path in paths:
            try:
                if regular_file_problem(path):
                    problems.append(f"{path}: {regular_file_problem(path)}; skipped")
                    continue
                raw = path.read_bytes()
                data = decode_slim(raw) if fast else decode_sidecar(raw, fast=False)
            except (OSError, ValueError, RecursionError):
                continue  # a rank killed while writing leaves no complete sidecar: its ops stay unattributed
            clean, dropped = clean_sidecar(data, str(path))
            problems.extend(dropped)
            if clean is not None:
                sidecars.add(str(path.absolute()), clean)
                name = path.name if len(source.run_dirs) == 1 else str(path)
                signature.append(f"{name}:{hashlib.sha1(raw).hexdigest()}")
    if not signature:
        return sidecars, ""
    return sidecars, hashlib.sha1("|".join(signature).encode()).hexdigest()


def _read_index(cache: Path, sidecar_key: str = "") -> dict[str, Any]:
    try:
        data = json.loads((cache / INDEX).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("ingest_version") != INGEST_VERSION:
        return {}
    if data.get("sidecars", "") != sidecar_key:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def part_file(meta: dict[str, Any], stem: str) -> str:
    """The name of the files that hold a trace's tables: its stem, or the batch it was parsed in."""
    part = meta.get("part")
    return str(part["file"]) if isinstance(part, dict) and isinstance(part.get("file"), str) else stem


def part_rows(meta: dict[str, Any], table: str) -> tuple[int, int] | None:
    """(offset, count) of a trace's rows in its batch's ``table`` file; None: the whole file is the trace's."""
    part = meta.get("part")
    rows = part.get("rows") if isinstance(part, dict) else None
    where = rows.get(table) if isinstance(rows, dict) else None
    return (int(where[0]), int(where[1])) if isinstance(where, list) and len(where) == 2 else None


def _fresh(entry: FileEntry, known: dict[str, Any], cache: Path, present: dict[str, bool] | None = None) -> str:
    """"same": the file is the one parsed (same size, mtime, ctime, inode); "content": it was copied or
    moved but holds the same bytes (its hash); "": it must be parsed again. ``present``: which table files
    were already seen to exist (a batch's files are shared by its traces)."""
    rec = known.get(entry.rel)
    if not rec or rec.get("size") != entry.size or rec.get("mtime_ns") != entry.mtime_ns:
        return ""
    if rec.get("stem") != entry.stem or not isinstance(rec.get("meta"), dict):
        return ""
    name = part_file(rec["meta"], entry.stem)
    present = {} if present is None else present
    if name not in present:
        present[name] = all((cache / t / f"{name}.parquet").is_file() for t in TABLES)
    if not present[name]:
        return ""
    if _recorded_key(rec) == entry.stat_key:
        return "same"
    try:
        return "content" if rec.get("digest") == cache_place.content_digest(entry.path) else ""
    except OSError:
        return ""


def _up_to_date(source: Source, sidecar_key: str) -> Any:
    """For cache_place.choose: does ``folder`` hold every trace of ``source``, fresh?"""
    def check(folder: Path) -> bool:
        known = _read_index(folder, sidecar_key)
        present: dict[str, bool] = {}
        return bool(known) and all(_fresh(e, known, folder, present) for e in _entries(source))
    return check


@dataclass
class Ingested:
    cache: Path
    entries: list[FileEntry]
    metas: list[dict[str, Any]]  # in entry order
    parsed: int  # how many traces were (re)parsed rather than read from the cache
    left_out: int = 0  # trace files not opened because their rank is not among the ranks asked for
    # the ranks of those files: a trace of unknown rank is numbered as in the whole run (file order skips them)
    left_out_ranks: frozenset[int] = frozenset()
    problems: list[str] = field(default_factory=list)  # sidecar fields dropped, and why
    sidecars: SidecarIndex = field(default_factory=SidecarIndex)  # the rank sidecars read (read_sidecars)

    def meta_of(self, entry: FileEntry) -> dict[str, Any]:
        for e, meta in zip(self.entries, self.metas, strict=True):
            if e.rel == entry.rel:
                return meta
        raise KeyError(entry.rel)

    @property
    def failures(self) -> list[dict[str, Any]]:
        """Files that could not be read (each with its one-line error): reported and skipped."""
        return [m for m in self.metas if m.get("failed")]


def _known_rank(entry: FileEntry, rec: dict[str, Any] | None) -> int | None:
    """The rank of a trace without opening it: from the cache's index, else its file name."""
    meta = (rec or {}).get("meta") or {}
    if meta.get("rank") is not None and meta.get("rank_source") != "file order":
        return int(meta["rank"])
    return rank_from_file_name(entry.label.rsplit("#", 1)[-1] if "#" in entry.label else entry.rel)


def ingest(source: Source, cache: Path | None = None, jobs: int | None = None,
           progress: ProgressFn | None = None, runner: Runner | None = None,
           ranks: frozenset[int] | None = None, step_range: str | None = None,
           declared: tuple[comm_kernels.Declared, ...] = ()) -> Ingested:
    """Parse what is not cached (on ``runner``; a local pool sized to the machine by default) and
    return every trace's cache entry. ``ranks``: only the traces of these ranks are opened (a trace
    whose rank is known neither from the cache nor from its file name is opened to learn it).
    ``step_range``: the NVTX range name of a step in nsys exports. ``declared``: kernel families the user
    declares communication (--comm-kernel)."""
    problems: list[str] = []
    with timed("ingest.sidecars"):
        sidecars, sidecar_key = read_sidecars(source, problems)
    if step_range is not None and any(p.name.endswith(".sqlite") for p in source.traces):
        # it changes the nsys exports' tables: a cache made without it (or with another name) is stale
        sidecar_key += f"|step-range:{step_range}"
    if declared:  # they decide which kernels are communication: tables made under other rules are stale
        sidecar_key += "|comm-kernels:" + hashlib.sha1(repr(declared).encode()).hexdigest()
    place = cache_place.choose(source, cache.absolute() if cache else None, _up_to_date(source, sidecar_key))
    cache = place.folder.absolute()
    if place.note:
        problems.append(place.note)
    known = _read_index(cache, sidecar_key)
    everything = _expand_exports(_entries(source), cache, known)
    entries = everything
    left_out_ranks: set[int] = set()
    if ranks is not None:
        entries = []
        for e in everything:
            rank = _known_rank(e, known.get(e.rel))
            if rank is None or rank in ranks:
                entries.append(e)
            else:
                left_out_ranks.add(rank)
    present: dict[str, bool] = {}
    freshness = {e.rel: _fresh(e, known, cache, present) for e in entries}
    todo = [e for e in entries if not freshness[e.rel]]
    own = runner or make_runner(jobs)
    try:
        with timed("ingest.parse"):
            fresh_metas = {m["rel"]: m for m in _parse_all(todo, cache, own, sidecars, progress, step_range,
                                                          sidecar_key, declared)}
    finally:
        if runner is None:
            own.close()
    metas = [fresh_metas[e.rel] if e.rel in fresh_metas else known[e.rel]["meta"] for e in entries]
    _refuse_if_no_traces(source, metas)
    listed = {e.rel for e in everything}
    moved = any(f == "content" for f in freshness.values())  # copied: record the new ctime and inode
    if place.writable and (todo or moved or set(known) != listed):
        _write_index(cache, known, listed, entries, metas, sidecar_key)
    return Ingested(cache, entries, metas, len(todo), len(everything) - len(entries), problems=problems,
                    sidecars=sidecars,
                    left_out_ranks=frozenset(left_out_ranks))


def _write_index(cache: Path, known: dict[str, Any], listed: set[str], entries: list[FileEntry],
                 metas: list[dict[str, Any]], sidecar_key: str) -> None:
    """The index last, once every table it names is in place."""
    files = {rel: rec for rel, rec in known.items() if rel in listed}  # ranks left out stay as they were
    for entry, meta in zip(entries, metas, strict=True):
        digest = meta.pop("digest", None) or (known.get(entry.rel) or {}).get("digest")
        rec = {"size": entry.size, "mtime_ns": entry.mtime_ns, "ctime_ns": entry.ctime_ns, "ino": entry.ino,
               "digest": digest, "stem": entry.stem}
        files[entry.rel] = {**rec, "meta": meta} if not meta.get("skipped") else rec
    index = {"ingest_version": INGEST_VERSION, "sidecars": sidecar_key, "files": files}
    # compact: json's C encoder (with an indent, its Python one took ~0.5 s for 5,000 traces)
    _cache_write(cache, cache / INDEX, json.dumps(index, separators=(",", ":")).encode())
    _drop_batches(cache, known, files)


def _batch_names(files: dict[str, Any]) -> set[str]:
    names = set()
    for rel, rec in files.items():
        meta = rec.get("meta") if isinstance(rec, dict) else None
        if isinstance(meta, dict) and part_file(meta, "").startswith("batch-"):
            names.add(part_file(meta, rel))
    return names


def _drop_batches(cache: Path, before: dict[str, Any], after: dict[str, Any]) -> None:
    """A batch's files once the index no longer names them (each of its traces parsed again, or gone).
    Only batches the previous index named: a batch another process just wrote for its index is not ours."""
    for name in _batch_names(before) - _batch_names(after):
        for t in TABLES:
            with contextlib.suppress(OSError):  # left in the way of nothing: the next ingest tries again
                (cache / t / f"{name}.parquet").unlink(missing_ok=True)


def _refuse_if_no_traces(source: Source, metas: list[dict[str, Any]]) -> None:
    """Files that are not Kineto traces are skipped beside traces (with a warning each); a lone one,
    or a folder of nothing else, is an error."""
    others = [m for m in metas if m.get("not_a_trace")]
    if not others or (source.kind != "file" and len(others) < len(metas)):
        return
    if len(others) == 1:
        raise InputError(str(others[0]["skipped"]))
    listed = ", ".join(m["rel"] for m in others[:3]) + (", ..." if len(others) > 3 else "")
    raise InputError(f"no Kineto traces: {len(others)} JSON files, none a Kineto trace ({listed})", source.path)


def table_file(cache: Path, table: str, entry: FileEntry, meta: dict[str, Any]) -> Path:
    """The Parquet file holding ``entry``'s rows of ``table`` (shared with other traces when it was parsed
    in a batch: see :func:`part_rows`)."""
    return cache / table / f"{part_file(meta, entry.stem)}.parquet"


def read_table(ingested: Ingested, table: str, entry: FileEntry, meta: dict[str, Any] | None = None) -> pl.DataFrame:
    """One trace's rows of ``table``."""
    return read_tables(ingested.cache, table, [(entry, meta if meta is not None else ingested.meta_of(entry))])[0]


def read_tables(cache: Path, table: str, traces: list[tuple[FileEntry, dict[str, Any]]]) -> list[pl.DataFrame]:
    """Each trace's rows of ``table``, in order; a file shared by several of them is read once."""
    files, pieces = _read_parts(cache, table, traces)
    return [files[k] if rows is None else files[k].slice(*rows) for k, rows in pieces]


def read_rows(cache: Path, table: str, traces: list[tuple[FileEntry, dict[str, Any]]]) -> pl.DataFrame:
    """The traces' rows of ``table`` as one frame, trace after trace (as the concatenation of
    :func:`read_tables`' frames, with ``vertical_relaxed``): each file read once, the rows gathered at once."""
    files, pieces = _read_parts(cache, table, traces)
    if not files:
        raise ValueError("no traces")
    starts = np.cumsum([0] + [f.height for f in files[:-1]])
    spans = [(int(starts[k]), files[k].height) if rows is None else (int(starts[k]) + rows[0], rows[1])
             for k, rows in pieces]
    whole = pl.concat(files, how="vertical_relaxed") if len(files) > 1 else files[0]
    if spans == list(zip(starts.tolist(), [f.height for f in files], strict=True)):
        return whole  # every file whole, in order
    idx = np.concatenate([np.arange(a, a + n, dtype=np.int64) for a, n in spans]) if spans else np.zeros(0, np.int64)
    return whole.select(pl.all().gather(pl.Series(idx)))


DISTINCT_CHUNK = 32  # files made distinct together (fewer polars calls; ~15 MB of member lists at 16,384 ranks)


def _read_ahead(paths: list[Path], depth: int = 8) -> Iterator[pl.DataFrame]:
    """The files' frames in order, up to ``depth`` read ahead in threads (polars reads without the GIL)."""
    with ThreadPoolExecutor(4) as pool:
        pending = [pool.submit(_read_parquet, p) for p in paths[:depth]]
        for i in range(len(paths)):
            frame = pending[i].result()
            pending[i] = None  # type: ignore[call-overload]
            if i + depth < len(paths):
                pending.append(pool.submit(_read_parquet, paths[i + depth]))
            yield frame


def distinct_rows(cache: Path, table: str, traces: list[tuple[FileEntry, dict[str, Any]]],
                  prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None) -> pl.DataFrame:
    """``read_rows(...)`` (each file through ``prepare``) then ``unique(maintain_order=True)``, without ever
    holding more than a few files and the distinct rows: every trace lists the members of its groups, so the
    rows of all traces hold ranks x group size members (the world group alone 16,384 x 16,384 at 16,384
    ranks), the distinct rows the sum of the group sizes. The files are read ahead in threads and made distinct
    ``DISTINCT_CHUNK`` at a time in polars (each row with its first place: trace, then row), then checked against
    the rows kept so far by hash and, on a hash seen before, by value; a row's place is the first among all."""
    folder = cache / table
    pieces: dict[str, list[tuple[int, tuple[int, int] | None]]] = {}
    for pos, (entry, meta) in enumerate(traces):
        pieces.setdefault(part_file(meta, entry.stem), []).append((pos, part_rows(meta, table)))
    if not pieces:
        raise ValueError("no traces")
    kept: dict[int, list[list[Any]]] = {}  # hash -> [[place, row], ...] (rows of one hash differ in value)
    schema: pl.Schema | None = None
    names = list(pieces)
    frames: list[pl.DataFrame] = []
    for k, whole in enumerate(_read_ahead([folder / f"{name}.parquet" for name in names])):
        whole = prepare(whole) if prepare is not None else whole
        schema = schema or whole.schema
        for pos, rows in pieces[names[k]]:
            part = whole if rows is None else whole.slice(rows[0], rows[1])
            frames.append(part.with_columns(pl.lit(pos, pl.Int64).alias("_pos"),
                                            pl.int_range(pl.len(), dtype=pl.Int64).alias("_row")))
        if (k + 1) % DISTINCT_CHUNK and k + 1 < len(names):
            continue
        chunk = pl.concat(frames, how="vertical_relaxed").sort("_pos", "_row", maintain_order=True)
        frames = []
        content = [c for c in chunk.columns if c not in ("_pos", "_row")]
        chunk = chunk.unique(subset=content, keep="first", maintain_order=True)
        places = list(zip(chunk["_pos"].to_list(), chunk["_row"].to_list(), strict=True))
        rows_only = chunk.select(content)
        for i, h in enumerate(rows_only.hash_rows().to_list()):
            row = rows_only.slice(i, 1)
            same = kept.setdefault(h, [])
            match = next((m for m in same if m[1].equals(row)), None)
            if match is None:
                same.append([places[i], row])
            elif places[i] < match[0]:
                match[0] = places[i]
    ordered = sorted((m for same in kept.values() for m in same), key=lambda m: m[0])
    if not ordered:
        return pl.DataFrame(schema=schema)
    found: list[pl.DataFrame] = [m[1] for m in ordered]
    return pl.concat(found, how="vertical_relaxed")


def _read_parts(cache: Path, table: str, traces: list[tuple[FileEntry, dict[str, Any]]]
                ) -> tuple[list[pl.DataFrame], list[tuple[int, tuple[int, int] | None]]]:
    """The distinct files that hold the traces' rows (each read once) and, per trace, (which file, its rows)."""
    folder = cache / table
    order: dict[str, int] = {}
    files: list[pl.DataFrame] = []
    pieces = []
    for entry, meta in traces:
        name = part_file(meta, entry.stem)
        k = order.get(name)
        if k is None:
            k = order[name] = len(files)
            files.append(_read_parquet(folder / f"{name}.parquet"))
        pieces.append((k, part_rows(meta, table)))
    return files, pieces


def cached_tables(cache: Path) -> dict[str, pl.DataFrame]:
    """Every trace's tables in a cache folder, read through its index: ``{"<rel>/<table>": frame}`` (what
    tools/same_output.py compares, whatever the files' layout)."""
    try:
        files = json.loads((cache / INDEX).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for rel, rec in sorted(files.items()):
        meta = rec.get("meta")
        if not isinstance(meta, dict):
            continue
        entry = FileEntry(Path(rel), rel, str(rec.get("stem")), 0, 0)
        for t in TABLES:
            out[f"{rel}/{t}"] = read_tables(cache, t, [(entry, meta)])[0]
    return out
