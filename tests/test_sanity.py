"""Sanity before blame (analyzers/sanity.py) on synthetic runs with a known defect: one rank's trace shifted
by 24 h, ranks 0-7 of a 3-step run put beside ranks 8-15 of a 5-step run, a host clock 24 h off. Each gets
a warning naming the ranks and why, the ranks are listed on the Analysis, and no straggler or desync
finding rests on them."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import commprof
from commprof.analyzers.pipeline import Analysis
from commprof.analyzers.sanity import check_ranks
from commprof.synth import SynthConfig, generate

SMALL: dict[str, Any] = dict(nodes=2, gpus_per_node=8, sizes={"tp": 8, "dp": 2}, steps=3, micro_batches=1, layers=2,
                             seed=4)
DAY_US = 86_400e6


def _shift(trace: Path, by_us: float) -> None:
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] += by_us
    with gzip.open(trace, "wt", compresslevel=1) as fh:
        json.dump(doc, fh)


def _blamed(a: Analysis) -> set[int]:
    return {r for f in a.finding_list if f.id in ("straggler", "desync") for r in f.ranks}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sanity") / "clean"
    generate(SynthConfig(**SMALL), path, compresslevel=1)
    return path


def test_a_clean_run_has_no_doubtful_rank(clean: Path) -> None:
    a = commprof.analyze(str(clean))
    assert a.doubtful_ranks.height == 0
    assert not [w for w in a.warnings if "no straggler or desync finding rests" in w]


def test_a_trace_shifted_by_a_day_is_doubtful_and_not_blamed(clean: Path, tmp_path: Path) -> None:
    run = tmp_path / "shifted"
    shutil.copytree(clean, run)
    _shift(run / "raw" / "traces" / "rank-3.json.gz", DAY_US)
    a = commprof.analyze(str(run))
    # before the check this run read as a [high] straggler on rank 3 (it "arrives" a day late at every call)
    assert a.doubtful_ranks["rank"].to_list() == [3]
    assert a.doubtful_ranks["check"].to_list() == ["start"]
    (warning,) = [w for w in a.warnings if w.startswith("rank 3:")]
    assert "+24.0 h" in warning and "no straggler or desync finding rests on it" in warning
    assert 3 not in _blamed(a), [f.key for f in a.finding_list]
    assert not [f for f in a.finding_list if f.id == "straggler"]


def test_no_desync_rests_on_a_shifted_rank(tmp_path: Path) -> None:
    # rank 3 of this run does call a different collective; shifted by a day, its calls pair with the others'
    # by accident only, and before the check it read as a [high] desync and a straggler
    run = tmp_path / "desync"
    generate(SynthConfig(**SMALL, desync=3), run, compresslevel=1)
    _shift(run / "raw" / "traces" / "rank-3.json.gz", DAY_US)
    a = commprof.analyze(str(run))
    assert a.doubtful_ranks["rank"].to_list() == [3]
    assert _blamed(a) == set(), [f.key for f in a.finding_list]


def test_ranks_of_two_runs_are_doubtful_and_not_blamed(tmp_path: Path) -> None:
    short, long = tmp_path / "short", tmp_path / "long"
    generate(SynthConfig(**SMALL), short, compresslevel=1)
    # the 5-step run has a straggler of its own: before the check it was named in the mixed folder
    generate(SynthConfig(**{**SMALL, "steps": 5, "seed": 9, "straggler": 12, "straggler_us": 3000}), long,
             compresslevel=1)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for rank in range(16):
        source = short if rank < 8 else long
        shutil.copy(source / "raw" / "traces" / f"rank-{rank}.json.gz", mixed / f"rank-{rank}.json.gz")
    a = commprof.analyze(str(mixed))
    assert a.doubtful_ranks["rank"].to_list() == list(range(8, 16))
    (warning,) = [w for w in a.warnings if w.startswith("ranks 8-15 ")]
    assert "steps 0-4 (5)" in warning and "ranks 0-7 profiled steps 0-2 (3)" in warning
    assert "another run" in warning
    assert not _blamed(a) & set(range(8, 16)), [f.key for f in a.finding_list]
    assert not [f for f in a.finding_list if f.id == "straggler"]


def test_a_host_clock_a_day_off_is_doubtful(tmp_path: Path) -> None:
    run = tmp_path / "clock"
    three_hosts = {**SMALL, "nodes": 3, "gpus_per_node": 4, "sizes": {"tp": 4, "dp": 3}}
    generate(SynthConfig(**three_hosts, clock_offsets_us=(0.0, DAY_US, 0.0)), run, compresslevel=1)
    a = commprof.analyze(str(run))
    # the fit aligns the host (its calls end with the others'), but a day is no clock of one cluster
    assert a.doubtful_ranks["rank"].to_list() == [4, 5, 6, 7]
    assert a.doubtful_ranks["check"].unique().to_list() == ["clock"]
    assert any("gpu-node-01" in w and "+24.0 h" in w for w in a.warnings), a.warnings


def test_one_step_less_at_an_end_is_a_cut_trace_not_another_run() -> None:
    import polars as pl

    marks = pl.DataFrame({"rank": [0, 0, 0, 1, 1, 1, 2, 2], "step": [0, 1, 2, 0, 1, 2, 0, 1],
                          "start_ns": [0, 100, 200, 0, 100, 200, 0, 100],
                          "end_ns": [100, 200, 300, 100, 200, 300, 100, 200]},
                         schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    clocks = pl.DataFrame({"host": ["h"], "offset_ns": [0], "residual_ns": [0], "calls_used": [0],
                           "fit": ["single host"]})
    ranks = pl.DataFrame({"rank": [0, 1, 2], "host": ["h", "h", "h"]}, schema={"rank": pl.Int32, "host": pl.String})
    assert check_ranks(marks, clocks, ranks).ranks == frozenset()
    opened_late = marks.with_columns(pl.when(pl.col("rank") == 2).then(pl.col("step") + 1).otherwise(pl.col("step"))
                                     .alias("step"))
    assert check_ranks(opened_late, clocks, ranks).ranks == frozenset()
    late = marks.with_columns(pl.when(pl.col("rank") == 2).then(pl.col("step") + 7).otherwise(pl.col("step"))
                              .alias("step"))
    assert check_ranks(late, clocks, ranks).ranks == frozenset({2})
