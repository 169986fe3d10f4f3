"""``RunTables``: everything ingest read from a run, as one frozen bundle — what every analyzer receives.

Analyzers never see a path or a ``Run``: they get these frames and facts. Intervals, the largest
table, stay on disk and are read one rank at a time (:meth:`RunTables.rank_intervals`), so an analysis
holds one rank's intervals in memory at once.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from commprof.ingest.schema import INTERVALS
from commprof.ingest.sidecar_tables import SidecarTables, empty_sidecars

if TYPE_CHECKING:
    from commprof.ingest.common.comm_kernels import Declared


@dataclass(frozen=True)
class RunFacts:
    """What the views print about a run besides its numbers."""

    path: str
    kind: str  # run | folder | file | job
    world_size: int | None
    synthetic: bool = False
    hosts: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()  # gpu / cpu, from the traces
    manifest: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # how each recorded rank's process ended, from its sidecar: exited (its exit handler ran), signalled (SIGTERM:
    # it wrote where it was), died (no last word: SIGKILL, or its node died); ranks without a sidecar absent
    rank_ends: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class RowSlice:
    """One rank's rows in a Parquet file that small traces parsed together share (commprof.ingest.store):
    ``offset`` and ``length`` in rows; ``sharers``: how many ranks' rows the file holds."""

    path: Path
    offset: int
    length: int
    sharers: int = 1

    def stat(self) -> os.stat_result:
        """The file's stat, its size that of a file of this rank's own (what a task's weight follows, as for
        a rank with its own file): its share of the rows' bytes and a Parquet file's own ~3 kB (schema,
        footer, a header per column: most of a small rank's file, and its analysis costs per rank too)."""
        st = self.path.stat()
        fields = list(st)
        fields[stat.ST_SIZE] = st.st_size // max(1, self.sharers) + PARQUET_FILE_BYTES
        return os.stat_result(fields)


PARQUET_FILE_BYTES = 3 << 10


IntervalSource = Path | RowSlice


@dataclass(frozen=True)
class RunTables:
    facts: RunFacts
    ranks: pl.DataFrame  # one row per traced rank
    process_groups: pl.DataFrame  # groups seen by any rank, merged by name; analyzers add dimension and tier
    collectives: pl.DataFrame  # one row per rank and call, ``call`` numbering a rank's calls
    step_marks: pl.DataFrame  # ProfilerStep marks per rank
    interval_files: tuple[tuple[int, IntervalSource], ...]  # (rank, Parquet file of its intervals, or its rows)
    sidecars: SidecarTables = field(default_factory=empty_sidecars)
    warnings: tuple[str, ...] = ()
    declared: tuple[Declared, ...] = ()  # kernel families the user declared communication (comm_kernels.Declared)
    # per rank, kernels that read like communication but no rule counts: (rank, name, calls, ns, side-stream ns)
    uncounted: tuple[tuple[int, str, int, int, int], ...] = ()

    def rank_intervals(self, columns: Sequence[str] | None = None,
                       ranks: Collection[int] | None = None) -> Iterator[tuple[int, pl.DataFrame]]:
        """(rank, intervals) one rank at a time; only ``columns`` are read (projection pushdown: the
        ``name`` strings are most of the bytes) and only ``ranks`` are opened."""
        for rank, path in self.interval_files:
            if ranks is None or rank in ranks:
                yield rank, read_rank_intervals(rank, path, columns)

    def intervals(self, ranks: list[int] | None = None, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Intervals of the given ranks (all when None) as one frame, read as one lazy scan over only
        those ranks' files."""
        wanted = None if ranks is None else set(ranks)
        scans = [_scan_rank(r, p, columns) for r, p in self.interval_files if wanted is None or r in wanted]
        if not scans:
            return pl.DataFrame(schema={c: t for c, t in INTERVALS.items() if columns is None or c in columns})
        return pl.concat(scans, how="vertical_relaxed").collect()


def _scan_rank(rank: int, path: IntervalSource, columns: Sequence[str] | None) -> pl.LazyFrame:
    scan = pl.scan_parquet(path.path).slice(path.offset, path.length) if isinstance(path, RowSlice) \
        else pl.scan_parquet(path)
    if columns is not None:
        names = scan.collect_schema().names()
        scan = scan.select([c for c in columns if c in names])
    # the file's rank is 0 when the rank was assumed from file order: the run's number wins
    return scan.with_columns(pl.lit(rank, pl.Int32).alias("rank")) if columns is None or "rank" in columns else scan


def read_rank_intervals(rank: int, path: IntervalSource, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """One rank's intervals from its Parquet file (also what a worker process calls: a path in, a
    frame out). A rank's rows of a shared file: the file is read once for the ranks that share it (the
    last one read is kept: ranks are handed out in order, a batch's ranks one after the other)."""
    if not isinstance(path, RowSlice):
        from commprof.ingest.store import written

        frame = written(path)  # the file this process just wrote (a cold analyze): as read from it
        if frame is None:
            return _scan_rank(rank, path, columns).collect()
        if columns is not None:
            frame = frame.select([c for c in columns if c in frame.columns])
        return frame.with_columns(pl.lit(rank, pl.Int32).alias("rank")) if columns is None or "rank" in columns \
            else frame
    frame = _shared_file(path.path, columns).slice(path.offset, path.length)
    return frame.with_columns(pl.lit(rank, pl.Int32).alias("rank")) if columns is None or "rank" in columns \
        else frame


# the last shared file read, whole (key None) and as the column subsets asked of it (no copies: a select shares
# the columns), so that its ranks pay no query each for their columns (5,000 ranks: ~0.5 s)
_SHARED: dict[tuple[str, int, int, int], dict[tuple[str, ...] | None, pl.DataFrame]] = {}


def _shared_file(path: Path, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """A shared (batch) file, whole, or only ``columns`` (those it has); the last one read stays, keyed by its stat
    (a file written anew is read anew). Such files hold small traces only (commprof.ingest.store.BATCH_MAX_BYTES of
    JSON at most)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    views = _SHARED.get(key)
    if views is None:
        views = {None: pl.read_parquet(path)}
        _SHARED.clear()
        _SHARED[key] = views
    wanted = None if columns is None else tuple(columns)
    frame = views.get(wanted)
    if frame is None:
        whole = views[None]
        frame = views[wanted] = whole.select([c for c in columns or () if c in whole.columns])
    return frame
