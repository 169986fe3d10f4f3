"""What one input file gives, whichever reader read it: its rank's identity, its tables and warnings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

MAX_RANK = 1 << 24  # ranks and group sizes are int32 columns; 16 M ranks is beyond any job
_RANK_IN_FILE_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class RankTrace:
    """What one input file gives (a Kineto trace, an nsys export, ...): its rank's identity, tables and
    warnings. The tables carry ``rank`` when the file says it (``rank_source`` distributedInfo, file
    name, ...), else 0 until the run assigns one by file order."""

    file: str
    rank: int | None
    world_size: int | None
    backend: str | None
    host: str | None
    pid: int | None
    device: str
    gpu_name: str | None
    mode: str
    intervals: pl.DataFrame
    collectives: pl.DataFrame
    step_marks: pl.DataFrame
    process_groups: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    # kernels that read like communication but no rule counts, the largest by time: [name, calls, ns, side-stream ns]
    uncounted: list[list[Any]] = field(default_factory=list)
    rank_source: str | None = None
    source: str = "kineto"  # which reader read the file: kineto | nsys | ...
    corrupt: str | None = None  # damage inside the text (see StreamResult.corrupt)

    def with_rank(self, rank: int) -> RankTrace:
        self.rank = rank
        col = pl.lit(rank, dtype=pl.Int32).alias("rank")
        self.intervals = self.intervals.with_columns(col)
        self.collectives = self.collectives.with_columns(col)
        self.step_marks = self.step_marks.with_columns(col)
        return self


def rank_from_file_name(path: str) -> int | None:
    match = _RANK_IN_FILE_NAME.search(Path(path).name)
    if not match or len(match.group(1)) >= 9:
        return None
    number = int(match.group(1))
    return number if number < MAX_RANK else None
