"""The per-rank overlap analysis several ranks to a task (analyzers/overlap_batches.py): the same frames and
warnings, in the same order, as one :func:`analyze_rank` per rank; a rank that fails inside a task is the only
one left out, with the warning a task of its own gave."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import commprof
from commprof.analyzers import overlap, overlap_batches
from commprof.analyzers import pipeline as pipe
from commprof.analyzers.overlap import INTERVAL_COLUMNS, OverlapSettings, analyze_rank, stack
from commprof.analyzers.settings import AnalysisSettings
from commprof.ingest import store
from commprof.ingest.runner import InProcess, LocalPool, Outcome, Runner
from commprof.ingest.tables import RowSlice, RunTables, read_rank_intervals
from commprof.synth_run import make_run
from tests.runners import runner_for

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunTables]:
    """Opened runs: small traces whose ranks share batch files (RowSlice), and the same traces each parsed
    to a file of its own."""
    root = tmp_path_factory.mktemp("overlap-batches")
    sample = root / "synth_2x8_tp8_dp2"
    shutil.copytree(REPO / "sample_traces" / "synth_2x8_tp8_dp2", sample, ignore=shutil.ignore_patterns("tables"))
    synth = make_run(root / "synth24", ranks=24, steps=1, layout=(4, 2, 3), straggler_rank=7, straggler_delay_us=50)
    out = {"sample shared": _open(sample, root / "c1"), "synth shared": _open(synth, root / "c2")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "BATCH_ALONE_BYTES", 0)  # every trace alone: a file of its own
        out["sample own"] = _open(sample, root / "c3")
    assert all(isinstance(s, RowSlice) for _, s in out["sample shared"].interval_files)
    assert all(isinstance(s, Path) for _, s in out["sample own"].interval_files)
    return out


def _open(path: Path, cache: Path) -> RunTables:
    tables: RunTables = commprof.open_run(path, cache_dir=cache, runner=InProcess()).tables()
    return tables


def _skewed(tables: RunTables, runner: Runner, hta_compat: bool = False) -> pipe._Work:
    """The pipeline's work up to the overlap step."""
    w = pipe._Work(tables, AnalysisSettings(hta_compat=hta_compat), [], runner, collectives=tables.collectives)
    pipe.step_skew(w)
    return w


def _per_rank(w: pipe._Work) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """What step_overlap gave with one task per rank: analyze_rank on each rank's rows, in file order."""
    settings = OverlapSettings(hta_compat=w.settings.hta_compat)
    parts = []
    warnings = list(w.warnings)  # the earlier steps'
    for rank, source in w.tables.interval_files:
        one = analyze_rank(rank, read_rank_intervals(rank, source, INTERVAL_COLUMNS),
                           w.collectives.filter(pl.col("rank") == rank),
                           w.tables.step_marks.filter(pl.col("rank") == rank), settings)
        parts.append(one)
        warnings.extend(one.warnings)
    frames = {
        "steps": stack([p.steps for p in parts], overlap.STEPS_SCHEMA),
        "pg_steps": stack([p.pg_steps for p in parts], overlap.PG_STEPS_SCHEMA),
        "spans": stack([p.exposed_spans for p in parts], overlap.SPANS_SCHEMA),
        "collectives": pl.concat([p.collectives for p in parts], how="vertical_relaxed"),
    }
    return frames, warnings


def _assert_same(w: pipe._Work, expected: tuple[dict[str, pl.DataFrame], list[str]]) -> None:
    frames, warnings = expected
    for name, frame in frames.items():
        assert_frame_equal(getattr(w, name), frame, check_exact=True)
    assert w.warnings == warnings


@pytest.mark.parametrize("most", [overlap_batches.BATCH_MAX_RANKS, 3])
@pytest.mark.parametrize("name", ["sample shared", "sample own", "synth shared"])
def test_batches_give_the_frames_of_one_task_per_rank(runs: dict[str, RunTables], name: str, most: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """3 ranks to a task cuts shared files between tasks; 64 puts a whole small run in one task."""
    monkeypatch.setattr(overlap_batches, "BATCH_MAX_RANKS", most)
    w = _skewed(runs[name], InProcess())
    expected = _per_rank(w)
    pipe.step_overlap(w)
    _assert_same(w, expected)


def test_batches_on_a_process_pool_and_with_hta_compat_warnings(runs: dict[str, RunTables]) -> None:
    """Per-rank warnings (one step each: --hta-compat keeps it) come back in rank order from a pool."""
    with LocalPool(2) as pool:
        for name in ("synth shared", "sample own"):
            w = _skewed(runs[name], pool, hta_compat=name == "synth shared")
            expected = _per_rank(w)
            pipe.step_overlap(w)
            assert pool.describe() == "2 local processes"
            _assert_same(w, expected)
            if name == "synth shared":
                assert sum("only one step" in line for line in w.warnings) == 24


def test_tasks_keep_a_shared_file_together_and_leave_enough_tasks() -> None:
    a, b = Path("a.parquet"), Path("b.parquet")
    sources: list[Any] = [RowSlice(a, i, 1, 5) for i in range(5)] + [RowSlice(b, i, 1, 5) for i in range(5)]
    sources += [Path("big.parquet"), Path("c.parquet"), Path("d.parquet")]
    weights = [10] * 10 + [overlap_batches.BATCH_ALONE_BYTES + 1, 10, 10]
    assert overlap_batches.rank_batches(sources, weights, 1) == [list(range(10)), [10], [11, 12]]
    # 2 workers, 13 ranks: at most 2 ranks to a task, so a shared file is cut between tasks
    assert overlap_batches.rank_batches(sources, weights, 2) == [[0, 1], [2, 3], [4], [5, 6], [7, 8], [9], [10],
                                                                [11, 12]]
    # a file's ranks need not be consecutive (rank-10 is parsed before rank-2): they still go together
    mixed: list[Any] = [RowSlice(a, 0, 1, 2), RowSlice(b, 0, 1, 2), RowSlice(a, 1, 1, 2), RowSlice(b, 1, 1, 2)]
    assert overlap_batches.rank_batches(mixed, [10] * 4, 1) == [[0, 2, 1, 3]]


def _break_rank(tables: RunTables, rank: int, missing: Path) -> RunTables:
    """``rank``'s rows pointed at a file that is not there: its analysis raises in the worker."""
    files = tuple((r, RowSlice(missing, 0, 1, 2) if r == rank else s) for r, s in tables.interval_files)
    return replace(tables, interval_files=files)


@pytest.mark.parametrize("where", ["in process", "pool", "dask"])
def test_a_rank_failing_inside_a_task_is_the_only_one_left_out(runs: dict[str, RunTables], tmp_path: Path,
                                                               where: str) -> None:
    missing = tmp_path / "gone.parquet"
    tables = _break_rank(runs["synth shared"], 7, missing)
    with runner_for(where, tmp_path) as runner:
        w = _skewed(tables, runner)
        before = len(w.warnings)
        pipe.step_overlap(w)
    gone = f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'"
    assert w.warnings[before:] == [f"rank 7: its analysis failed ({gone}); the rank is left out"]
    ranks = [r for r, _ in tables.interval_files if r != 7]
    assert w.steps["rank"].unique(maintain_order=True).to_list() == ranks
    whole = _skewed(runs["synth shared"], InProcess())
    pipe.step_overlap(whole)
    assert_frame_equal(w.steps, whole.steps.filter(pl.col("rank") != 7), check_exact=True)
    assert_frame_equal(w.collectives, whole.collectives.filter(pl.col("rank") != 7), check_exact=True)


def test_an_exception_in_one_rank_leaves_the_rest_of_its_task(runs: dict[str, RunTables],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    real = overlap.analyze_rank

    def fails_for_3(rank: int, *args: Any) -> Any:
        if rank == 3:
            raise ValueError("no windows")
        return real(rank, *args)

    monkeypatch.setattr(overlap, "analyze_rank", fails_for_3)
    w = _skewed(runs["sample shared"], InProcess())
    before = len(w.warnings)
    pipe.step_overlap(w)
    assert w.warnings[before:] == ["rank 3: its analysis failed (ValueError: no windows); the rank is left out"]
    assert sorted(w.steps["rank"].unique().to_list()) == [r for r in range(16) if r != 3]


class _LosesTasks(InProcess):
    """A runner whose task holding rank 5 is lost whole (its worker died), and whose rerun of rank 5 alone
    dies again: the other ranks of that task are run again, one to a task."""

    def __init__(self) -> None:
        self.lost: tuple[int, ...] = ()
        self.alone: list[tuple[int, ...]] = []

    def run(self, fn: Any, tasks: Any, weights: Any, phase: str, progress: Any = None,
            units: Any = None) -> list[Outcome]:
        out = super().run(fn, tasks, weights, phase, progress, units)
        self.lost = next(args[0].ranks for args in tasks if 5 in args[0].ranks)
        return [Outcome(error="its worker process died") if 5 in args[0].ranks else o
                for args, o in zip(tasks, out, strict=True)]

    def run_alone(self, fn: Any, tasks: Any, phase: str) -> list[Outcome]:
        self.alone.extend(args[0].ranks for args in tasks)
        return [Outcome(error="its worker process died") if args[0].ranks == (5,) else InProcess().run(
            fn, [args], [0], phase)[0] for args in tasks]


def test_a_task_lost_whole_is_run_again_one_rank_to_a_task(runs: dict[str, RunTables],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overlap_batches, "BATCH_MAX_RANKS", 4)
    runner = _LosesTasks()
    w = _skewed(runs["sample shared"], runner)
    before = len(w.warnings)
    pipe.step_overlap(w)
    assert len(runner.lost) == 4 and runner.alone == [(r,) for r in runner.lost]
    assert w.warnings[before:] == ["rank 5: its analysis failed (its worker process died); the rank is left out"]
    assert sorted(w.steps["rank"].unique().to_list()) == [r for r in range(16) if r != 5]


def _die(code: int) -> int:
    if code:
        os._exit(code)
    return code


def test_a_pool_runs_each_task_alone_in_a_process_of_its_own() -> None:
    """What a lost task's ranks run as: the rank that kills its worker fails, this process goes on."""
    with LocalPool() as pool:  # sized by default: would run a batch this small here, in process
        outcomes = pool.run_alone(_die, [(0,), (3,), (0,)], "test")
    assert outcomes == [Outcome(0), Outcome(error="its worker process died (killed, or out of memory?)"), Outcome(0)]
