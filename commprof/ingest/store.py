"""The Parquet cache under ``tables/``: one set of files per raw trace, keyed by the trace's size,
mtime and the ingest version, so that a stale table is never used and a changed rank is re-parsed
alone. Raw traces are parsed as one task each on a runner (commprof.ingest.runner).

Layout::

    tables/_index.json                 {ingest_version, files: {relpath: {size, mtime_ns, stem, meta}}}
    tables/<table>/<stem>.parquet      intervals, collectives, step_marks, process_groups

``meta`` is the trace's rank identity and warnings: a re-open of a 1,000-rank run reads one index
instead of a thousand small files, and a ``--ranks`` subset learns which files to open from it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from commprof.errors import InputError, TruncatedTraceError
from commprof.ingest.discover import Source, regular_file_problem
from commprof.ingest.exports import FORMAT as EXPORT_FORMAT
from commprof.ingest.formats import RankTrace, extract, rank_from_file_name
from commprof.ingest.rank_sidecar import clean_sidecar
from commprof.ingest.runner import ProgressFn, Runner, make_runner
from commprof.ingest.schema import INGEST_VERSION
from commprof.ingest.stream import NotATraceError

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
        "source": rank_trace.source,
    }
    for table in TABLES:
        _write_frame(getattr(rank_trace, table), cache / table / f"{entry.stem}.parquet")
    return meta


def _parse_all(todo: list[FileEntry], cache: Path, runner: Runner, sidecars: list[dict[str, Any]],
               progress: ProgressFn | None) -> list[dict[str, Any]]:
    """Parse every trace on the runner, one task per file. A file whose parse fails (corrupt gzip, a
    bug) becomes a skipped entry with its error: it is reported, the other ranks complete, and it is
    not cached, so the next open tries it again."""
    if runner.remote:  # the workers do not share our working directory
        todo = [replace(e, path=e.path.absolute(), label=e.label or str(e.path)) for e in todo]
    weights = [_text_bytes(e) for e in todo]
    outcomes = runner.run(parse_one, [(e, cache, sidecars) for e in todo], weights, "ingest", progress)
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
    if rec.get("stem") != entry.stem or not isinstance(rec.get("meta"), dict):
        return False
    return all((cache / t / f"{entry.stem}.parquet").is_file() for t in TABLES)


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
           ranks: frozenset[int] | None = None) -> Ingested:
    """Parse what is not cached (on ``runner``; a local pool sized to the machine by default) and
    return every trace's cache entry. ``ranks``: only the traces of these ranks are opened (a trace
    whose rank is known neither from the cache nor from its file name is opened to learn it)."""
    cache = (cache or default_cache_dir(source)).absolute()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the table cache: {err.strerror}", cache) from None
    problems: list[str] = []
    sidecars, sidecar_key = read_sidecars(source, problems)
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
    todo = [e for e in entries if not _fresh(e, known, cache)]
    own = runner or make_runner(jobs)
    try:
        fresh_metas = {m["rel"]: m for m in _parse_all(todo, cache, own, sidecars, progress)}
    finally:
        if runner is None:
            own.close()
    metas = [fresh_metas[e.rel] if e.rel in fresh_metas else known[e.rel]["meta"] for e in entries]
    _refuse_if_no_traces(source, metas)
    listed = {e.rel for e in everything}
    if todo or set(known) != listed:
        files = {rel: rec for rel, rec in known.items() if rel in listed}  # ranks left out stay as they were
        for entry, meta in zip(entries, metas, strict=True):
            rec = {"size": entry.size, "mtime_ns": entry.mtime_ns, "stem": entry.stem}
            files[entry.rel] = {**rec, "meta": meta} if not meta.get("skipped") else rec
        index = {"ingest_version": INGEST_VERSION, "sidecars": sidecar_key, "files": files}
        _atomic_write_bytes(cache / INDEX, json.dumps(index, indent=1).encode())
    return Ingested(cache, entries, metas, len(todo), len(everything) - len(entries), problems=problems,
                    left_out_ranks=frozenset(left_out_ranks))


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
