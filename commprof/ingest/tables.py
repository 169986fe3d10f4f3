"""``RunTables``: everything ingest read from a run, as one frozen bundle — what every analyzer receives.

Analyzers never see a path or a ``Run``: they get these frames and facts. Intervals, the largest
table, stay on disk and are read one rank at a time (:meth:`RunTables.rank_intervals`), so an analysis
holds one rank's intervals in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.schema import INTERVALS
from commprof.ingest.sidecar_tables import SidecarTables, empty_sidecars


@dataclass(frozen=True)
class RunFacts:
    """What the views print about a run besides its numbers."""

    path: str
    kind: str  # run | folder | file
    world_size: int | None
    synthetic: bool = False
    hosts: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()  # gpu / cpu, from the traces
    manifest: dict[str, Any] | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class RunTables:
    facts: RunFacts
    ranks: pl.DataFrame  # one row per traced rank
    process_groups: pl.DataFrame  # groups seen by any rank, merged by name; analyzers add dimension and tier
    collectives: pl.DataFrame  # one row per rank and call, ``call`` numbering a rank's calls
    step_marks: pl.DataFrame  # ProfilerStep marks per rank
    interval_files: tuple[tuple[int, Path], ...]  # (rank, Parquet file of its intervals)
    sidecars: SidecarTables = field(default_factory=empty_sidecars)
    warnings: tuple[str, ...] = ()

    def rank_intervals(self) -> Iterator[tuple[int, pl.DataFrame]]:
        """(rank, intervals) one rank at a time."""
        for rank, path in self.interval_files:
            frame = pl.read_parquet(path)
            if frame.height and frame["rank"][0] != rank:  # rank assumed from file order
                frame = frame.with_columns(pl.lit(rank, pl.Int32).alias("rank"))
            yield rank, frame

    def intervals(self, ranks: list[int] | None = None) -> pl.DataFrame:
        """Intervals of the given ranks (all when None) as one frame."""
        wanted = None if ranks is None else set(ranks)
        frames = [f for r, f in self.rank_intervals() if wanted is None or r in wanted]
        return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(schema=INTERVALS)
