"""The per-rank overlap analysis handed to the runner several ranks to a task.

A small rank's analysis takes ~1.5 ms; its task cost more than that on top: its collectives and step marks
pickled there, the round trip (on Dask a scheduler task each), reading its rows of a shared interval file. On
the 5,000-rank synthetic run (2 cores, loaded) the overlap step took 29.7 s on a 2-worker Dask cluster with one
task per rank, 8.4 s in tasks of ~50 ranks; on the local pool (which already sent tasks in chunks) 8.8 s, 7.6 s.
So the ranks that share one interval file (small traces parsed together, :class:`RowSlice`) go in one task,
cut where a task would hold more than BATCH_MAX_RANKS ranks, and small ranks up to BATCH_MAX_BYTES of Parquet,
no more than leaves ~4 tasks per worker (balance, and progress to show); a rank of more than BATCH_ALONE_BYTES
keeps a task of its own, as traces are batched for parsing (``commprof.ingest.store._batches``). Each task
gets one frame of its ranks' collectives and one of their marks, split in the worker.

Inside a task each rank is run as :func:`guarded` runs a task, so a rank that raises gets the same one-line
error as a task of its own and the other ranks go on; a task lost whole (its worker died, a Dask worker
killed) is run again one rank to a task (:meth:`Runner.run_alone`), so only the rank that kills its worker
fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate, pairwise
from pathlib import Path

import numpy as np
import polars as pl

from commprof.analyzers import overlap
from commprof.ingest.runner import InProcess, Outcome, ProgressFn, Runner, guarded, usable_cpus
from commprof.ingest.tables import IntervalSource, RowSlice

BATCH_MAX_RANKS = 64
BATCH_MAX_BYTES = 4 << 20  # of interval Parquet (a rank's weight: tables.RowSlice.stat)
BATCH_ALONE_BYTES = 1 << 20  # a rank this big is analyzed for ~0.1 s or more: the task's cost is lost in it


@dataclass(frozen=True)
class RankBatch:
    """One task's ranks: their interval sources, and their collectives and step marks as one frame each,
    rank after rank in the order of ``ranks`` (``*_rows``: how many rows each rank has)."""

    ranks: tuple[int, ...]
    sources: tuple[IntervalSource, ...]
    collectives: pl.DataFrame
    collective_rows: tuple[int, ...]
    marks: pl.DataFrame
    mark_rows: tuple[int, ...]


def analyze_rank_batch(batch: RankBatch, settings: overlap.OverlapSettings) -> list[Outcome]:
    """The task: :func:`overlap.analyze_rank_file` for each rank of ``batch``, one Outcome per rank."""
    calls = _split(batch.collectives, batch.collective_rows)
    marks = _split(batch.marks, batch.mark_rows)
    return [guarded(overlap.analyze_rank_file, rank, source, c, m, settings)
            for rank, source, c, m in zip(batch.ranks, batch.sources, calls, marks, strict=True)]


def _split(frame: pl.DataFrame, rows: tuple[int, ...]) -> list[pl.DataFrame]:
    starts = list(accumulate(rows, initial=0))[:-1]
    return [frame.slice(start, n) for start, n in zip(starts, rows, strict=True)]


def analyze_ranks(files: tuple[tuple[int, IntervalSource], ...], collectives: pl.DataFrame, marks: pl.DataFrame,
                  settings: overlap.OverlapSettings, runner: Runner, progress: ProgressFn | None) -> list[Outcome]:
    """One Outcome per rank of ``files``, in their order (a :class:`overlap.RankOverlap`, or the rank's error)."""
    weights = [source_bytes(source) for _, source in files]
    parallel = 1 if isinstance(runner, InProcess) else (runner.workers or usable_cpus())
    calls, call_rows = _rows_by_rank(collectives)
    steps, mark_rows = _rows_by_rank(marks)

    def batch(indexes: list[int]) -> RankBatch:
        ranks = tuple(files[i][0] for i in indexes)
        call_frame, call_counts = _rows_of(calls, call_rows, ranks)
        mark_frame, mark_counts = _rows_of(steps, mark_rows, ranks)
        return RankBatch(ranks, tuple(files[i][1] for i in indexes), call_frame, call_counts, mark_frame, mark_counts)

    groups = rank_batches([source for _, source in files], weights, parallel)
    outcomes = runner.run(analyze_rank_batch, [(batch(g), settings) for g in groups],
                          [sum(weights[i] for i in g) for g in groups], "analysis", progress, [len(g) for g in groups])
    results: list[Outcome | None] = [None] * len(files)
    lost: list[int] = []
    for group, outcome in zip(groups, outcomes, strict=True):
        if outcome.error is not None:
            lost.extend(group)
            continue
        for i, one in zip(group, outcome.value, strict=True):
            results[i] = one
    if lost:
        again = runner.run_alone(analyze_rank_batch, [(batch([i]), settings) for i in lost], "analysis")
        for i, outcome in zip(lost, again, strict=True):
            results[i] = outcome.value[0] if outcome.error is None else outcome
    return [r if r is not None else Outcome(error="not run") for r in results]


def rank_batches(sources: list[IntervalSource], weights: list[int], parallel: int) -> list[list[int]]:
    """Ranks grouped into tasks: the ranks of one shared file together (cut where a task would hold more than
    ``most``), small ranks up to BATCH_MAX_RANKS / BATCH_MAX_BYTES, each big one alone. The outcomes are put back
    in the ranks' order whatever the tasks."""
    most = BATCH_MAX_RANKS if parallel <= 1 else \
        max(1, min(BATCH_MAX_RANKS, -(-len(sources) // (4 * parallel))))
    out: list[list[int]] = []
    size = 0
    for unit in _file_groups(sources):
        for start in range(0, len(unit), most):
            piece = unit[start:start + most]
            weight = sum(weights[i] for i in piece)
            if not out or _alone(piece, weights) or _alone(out[-1], weights) or len(out[-1]) + len(piece) > most \
                    or size + weight > BATCH_MAX_BYTES:
                out.append(piece)
                size = weight
            else:
                out[-1].extend(piece)
                size += weight
    return out


def _alone(group: list[int], weights: list[int]) -> bool:
    return len(group) == 1 and weights[group[0]] > BATCH_ALONE_BYTES


def _file_groups(sources: list[IntervalSource]) -> list[list[int]]:
    """The indexes of the ranks of each shared file (in the order the files first come; a file's ranks need not
    be consecutive: traces are parsed in the order of their names, rank-10 before rank-2), and each rank with a
    file of its own alone."""
    groups: dict[Path | int, list[int]] = {}
    for i, source in enumerate(sources):
        groups.setdefault(source.path if isinstance(source, RowSlice) else i, []).append(i)
    return list(groups.values())


def _rows_by_rank(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[int, tuple[int, int]]]:
    """``frame`` sorted by rank (stable, so each rank's rows keep their order) and where each rank's rows are in
    it (start, count). Rows without a rank belong to no rank's task, as they never did."""
    if frame.height == 0:
        return frame, {}
    ordered = frame.filter(pl.col("rank").is_not_null()).sort("rank", maintain_order=True)
    ranks, starts, counts = np.unique(ordered["rank"].to_numpy(), return_index=True, return_counts=True)
    return ordered, {rank: (start, count)
                     for rank, start, count in zip(ranks.tolist(), starts.tolist(), counts.tolist(), strict=True)}


def _rows_of(ordered: pl.DataFrame, rows: dict[int, tuple[int, int]],
             ranks: tuple[int, ...]) -> tuple[pl.DataFrame, tuple[int, ...]]:
    """The rows of ``ranks`` as one frame, rank after rank, and each rank's row count: one slice when they lie
    in a row (consecutive ranks), else the slices put together."""
    spans = [rows.get(rank, (0, 0)) for rank in ranks]
    counts = tuple(n for _, n in spans)
    present = [(start, n) for start, n in spans if n]
    if not present:
        return ordered.clear(), counts
    if all(a[0] + a[1] == b[0] for a, b in pairwise(present)):
        return ordered.slice(present[0][0], sum(counts)), counts
    return pl.concat([ordered.slice(start, n) for start, n in present]), counts


def source_bytes(source: IntervalSource) -> int:
    """A rank's weight: its interval file's size, or its share of a shared file's (``RowSlice.stat``)."""
    try:
        return source.stat().st_size
    except OSError:
        return 0
