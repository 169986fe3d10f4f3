"""The Parquet cache under ``tables/``: one set of files per raw trace, keyed by the trace's size,
mtime and the ingest version, so that a stale table is never used and a changed rank is re-parsed
alone. Raw traces are parsed in parallel processes.

Layout::

    tables/_index.json                 {ingest_version, files: {relpath: {size, mtime_ns, stem}}}
    tables/<table>/<stem>.parquet      intervals, collectives, step_marks, process_groups
    tables/meta/<stem>.json            the trace's rank identity and warnings
"""

from __future__ import annotations

import gzip
import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from commprof.errors import InputError, TruncatedTraceError
from commprof.ingest.discover import Source, regular_file_problem
from commprof.ingest.exports import FORMAT as EXPORT_FORMAT
from commprof.ingest.kineto import RankTrace, extract
from commprof.ingest.rank_sidecar import clean_sidecar
from commprof.ingest.schema import INGEST_VERSION
from commprof.ingest.stream import NotATraceError

TABLES = ("intervals", "collectives", "step_marks", "process_groups")
# raw bytes to parse (compressed, for .gz) before worker processes pay off; COMMPROF_PARALLEL_MIN_BYTES overrides
PARALLEL_MIN_BYTES = 8 << 20
INDEX = "_index.json"


@dataclass(frozen=True)
class FileEntry:
    path: Path
    rel: str
    stem: str
    size: int
    mtime_ns: int
    label: str = ""  # the file as the user gave it, for messages (a split export's parts: "<export>#rank-N")


def default_cache_dir(source: Source) -> Path:
    """Under ``COMMPROF_CACHE_DIR`` when it is set; else ``tables/`` beside the raw files when that folder
    is writable, else a per-user cache."""
    env = os.environ.get("COMMPROF_CACHE_DIR")
    if not env and source.kind != "file" and os.access(source.root, os.W_OK):
        return source.root / "tables"
    base = Path(env or Path.home() / ".cache" / "commprof")
    digest = hashlib.sha1(str(source.path.resolve()).encode()).hexdigest()[:16]
    return base / digest


def _entries(source: Source) -> list[FileEntry]:
    out = []
    for path in source.traces:
        st = path.stat()
        rel = str(path.relative_to(source.root))
        stem = hashlib.sha1(rel.encode()).hexdigest()[:12] + "-" + path.name.split(".")[0][:40]
        out.append(FileEntry(path, rel, stem, st.st_size, st.st_mtime_ns))
    return out


EXPORT_MARK = EXPORT_FORMAT.encode()


def _is_merged_export(path: Path) -> bool:
    """A ``commprof export --perfetto`` file: all ranks in one trace, one pid per rank."""
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
        if head[:2] == b"\x1f\x8b":
            head = zlib.decompressobj(wbits=31).decompress(head, 1 << 16)
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
        if (rec.get("size"), rec.get("mtime_ns")) == (entry.size, entry.mtime_ns) or not _is_merged_export(entry.path):
            out.append(entry)
            continue
        folder = cache / "split" / entry.stem
        key = f"{entry.size}:{entry.mtime_ns}"
        marker = folder / ".source"
        if not marker.is_file() or marker.read_text() != key:
            from commprof.ingest.exports import split_by_rank

            raw = entry.path.read_bytes()
            try:
                trace = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            except (OSError, ValueError, RecursionError) as err:
                raise InputError(f"unreadable commprof export: {err}", entry.path) from None
            for rank, part in split_by_rank(trace).items():
                _atomic_write_bytes(folder / f"rank-{rank}.json", json.dumps(part).encode())
            _atomic_write_bytes(marker, key.encode())
        for part_path in sorted(folder.glob("rank-*.json")):
            suffix = part_path.name.split(".")[0]
            out.append(FileEntry(part_path, f"{entry.rel}#{suffix}", f"{entry.stem}-{suffix}", entry.size,
                                 entry.mtime_ns, f"{entry.path}#{suffix}"))
    return out


def _atomic_write_bytes(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, target)


def _write_frame(frame: pl.DataFrame, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
    frame.write_parquet(tmp, compression="zstd", statistics=False)
    os.replace(tmp, target)


def parse_one(entry: FileEntry, cache: Path, sidecars: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Parse one raw trace and write its tables (runs in a worker process)."""
    label = entry.label or str(entry.path)
    try:
        rank_trace: RankTrace = extract(entry.path, sidecars, label=label)
    except TruncatedTraceError as err:
        return {"file": label, "rel": entry.rel, "skipped": str(err), "warnings": [f"{err}; rank skipped"]}
    except NotATraceError as err:
        return {"file": label, "rel": entry.rel, "skipped": str(err), "not_a_trace": True,
                "warnings": [f"{err}; skipped (not a Kineto trace)"]}
    except OSError as err:  # removed or made unreadable since it was found
        why = f"{label}: cannot be read ({err.strerror or err})"
        return {"file": label, "rel": entry.rel, "skipped": why, "warnings": [f"{why}; rank skipped"]}
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
        "n_intervals": len(rank_trace.intervals),
        "corrupt": rank_trace.corrupt,
    }
    for table in TABLES:
        _write_frame(getattr(rank_trace, table), cache / table / f"{entry.stem}.parquet")
    _atomic_write_bytes(cache / "meta" / f"{entry.stem}.json", json.dumps(meta).encode())
    return meta


def _parse_many(todo: list[FileEntry], cache: Path, jobs: int, on_done: Callable[[], None],
                sidecars: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    # "spawn" re-imports the caller's main script: one that is not a file (python -, -c) cannot be
    # worker processes cost ~0.3 s each to start (spawn + imports): only worth it for real work
    threshold = int(os.environ.get("COMMPROF_PARALLEL_MIN_BYTES", PARALLEL_MIN_BYTES))
    big_enough = sum(e.size for e in todo) >= threshold
    if len(todo) > 1 and jobs > 1 and big_enough and (main_file is None or os.path.exists(main_file)):
        _parse_in_workers(todo, cache, jobs, on_done, sidecars, results)
    for entry in todo:
        if entry.rel not in results:
            results[entry.rel] = parse_one(entry, cache, sidecars)
            on_done()
    return [results[entry.rel] for entry in todo]


def _parse_in_workers(todo: list[FileEntry], cache: Path, jobs: int, on_done: Callable[[], None],
                      sidecars: list[dict[str, Any]], results: dict[str, dict[str, Any]]) -> None:
    # "spawn", not fork: the parent runs polars' thread pool, and a forked child can inherit a held lock
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context) as pool:
            futures = [pool.submit(parse_one, entry, cache, sidecars) for entry in todo]
            for entry, fut in zip(todo, futures, strict=True):
                results[entry.rel] = fut.result()
                on_done()
    except BrokenProcessPool:
        # Workers could not start: e.g. a script calling open_run() without an
        # ``if __name__ == "__main__":`` guard, which "spawn" re-imports. The caller parses the rest.
        return


def read_sidecars(source: Source, problems: list[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """The rank sidecars of a ``commprof record`` run (raw/ranks/rank-N.json) and a signature of
    their sizes and mtimes (part of the cache key: they change how Gloo ops are attributed). Fields
    of the wrong shape are dropped, each with a line in ``problems``."""
    folder = source.root / "raw" / "ranks"
    if source.kind != "run" or not folder.is_dir():
        return [], ""
    sidecars, signature = [], []
    problems = problems if problems is not None else []
    for path in sorted(folder.glob("rank-*.json")):
        try:
            if regular_file_problem(path):
                problems.append(f"{path}: {regular_file_problem(path)}; skipped")
                continue
            st = path.stat()
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue  # a rank killed while writing leaves no complete sidecar: its ops stay unattributed
        clean, dropped = clean_sidecar(data, str(path))
        problems.extend(dropped)
        if clean is not None:
            sidecars.append(clean)
            signature.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
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


def _fresh(entry: FileEntry, known: dict[str, Any], cache: Path) -> bool:
    rec = known.get(entry.rel)
    if not rec or rec.get("size") != entry.size or rec.get("mtime_ns") != entry.mtime_ns:
        return False
    if rec.get("stem") != entry.stem or not (cache / "meta" / f"{entry.stem}.json").is_file():
        return False
    return all((cache / t / f"{entry.stem}.parquet").is_file() for t in TABLES)


@dataclass
class Ingested:
    cache: Path
    entries: list[FileEntry]
    metas: list[dict[str, Any]]  # in entry order
    parsed: int  # how many traces were (re)parsed rather than read from the cache
    problems: list[str] = field(default_factory=list)  # sidecar fields dropped, and why


def ingest(source: Source, cache: Path | None = None, jobs: int | None = None,
           progress: Callable[[int, int], None] | None = None) -> Ingested:
    cache = cache or default_cache_dir(source)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the table cache: {err.strerror}", cache) from None
    problems: list[str] = []
    sidecars, sidecar_key = read_sidecars(source, problems)
    known = _read_index(cache, sidecar_key)
    entries = _expand_exports(_entries(source), cache, known)
    todo = [e for e in entries if not _fresh(e, known, cache)]
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(done[0], len(todo))

    fresh_metas = {m["rel"]: m for m in _parse_many(todo, cache, jobs or (os.cpu_count() or 1), tick, sidecars)}
    metas = []
    for entry in entries:
        if entry.rel in fresh_metas:
            metas.append(fresh_metas[entry.rel])
        else:
            metas.append(json.loads((cache / "meta" / f"{entry.stem}.json").read_text()))
    _refuse_if_no_traces(source, metas)
    if todo or set(known) != {e.rel for e in entries}:
        index = {
            "ingest_version": INGEST_VERSION,
            "sidecars": sidecar_key,
            "files": {e.rel: {"size": e.size, "mtime_ns": e.mtime_ns, "stem": e.stem} for e in entries},
        }
        _atomic_write_bytes(cache / INDEX, json.dumps(index, indent=1).encode())
    return Ingested(cache, entries, metas, len(todo), problems)


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


def read_table(ingested: Ingested, table: str, entry: FileEntry) -> pl.DataFrame:
    return pl.read_parquet(ingested.cache / table / f"{entry.stem}.parquet")
