"""The synthetic run generator: commprof's analysis reproduces its by-construction answers exactly."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.synth_run import Parts, SynthSpec, expected_parts, make_run

PARTS = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")


@pytest.mark.parametrize(("ranks", "layout"), [(16, (4, 2, 2)), (8, (8, 1, 1)), (8, (1, 1, 8)), (12, (2, 3, 2))])
def test_analysis_reproduces_expected_parts(tmp_path: Path, ranks: int, layout: tuple[int, int, int]) -> None:
    spec = SynthSpec(ranks=ranks, steps=3, layout=layout, kernels_per_phase=3)
    path = make_run(tmp_path / "run", ranks=ranks, steps=3, layout=layout, kernels_per_phase=3)
    analysis = commprof.analyze(commprof.open_run(path))
    assert analysis.steps.height == ranks * 3
    for row in analysis.steps.iter_rows(named=True):
        assert Parts(*(row[p] for p in PARTS)) == expected_parts(spec, row["rank"]), row
        assert row["end_ns"] - row["start_ns"] == spec.step_us * 1000


def test_straggler_and_its_group(tmp_path: Path) -> None:
    spec = SynthSpec(ranks=16, layout=(4, 2, 2), straggler_rank=5, straggler_delay_us=70)
    path = make_run(tmp_path / "run", ranks=16, layout=(4, 2, 2), straggler_rank=5, straggler_delay_us=70)
    steps = commprof.analyze(commprof.open_run(path)).steps
    exposed = dict(steps.group_by("rank").agg(pl.col("exposed_comm_ns").first()).iter_rows())
    base = 100_000 + 100_000 + 40_000  # TP all-reduce + half the DP all-reduce + the p2p
    assert exposed[5] == base  # the straggler itself waits for nobody
    assert exposed[4] == exposed[6] == exposed[7] == base + 70_000  # its TP peers wait for it
    # rank 0's DP peer is rank 4, late by the straggler's delay (it waited for rank 5): rank 0 waits too
    assert exposed[0] == base + 70_000
    assert expected_parts(spec, 5).compute_ns == (400 + 70 + 600 - 100) * 1000


def test_per_collective_shares_and_metadata(tmp_path: Path) -> None:
    path = make_run(tmp_path / "run", ranks=12, layout=(2, 3, 2))
    run = commprof.open_run(path)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["synthetic"] is True and manifest["world_size"] == 12
    assert len(manifest["hosts"]) == 2 and len(manifest["ranks"]) == 12
    pgs = run.process_groups
    assert set(pgs["desc"].to_list()) == {"default_pg", "mesh_tp", "mesh_dp", "mesh_pp"}
    coll = commprof.analyze(run).collectives
    tp = coll.filter((pl.col("op") == "all_reduce") & (pl.col("group_size") == 2) & (pl.col("rank") == 0))
    assert tp["bytes"].to_list()[0] in (16 << 20, 256 << 20)
    # a middle pipeline stage sends and receives at once: each call gets half of the exposed instant
    middle = coll.filter((pl.col("rank") == 4) & pl.col("op").is_in(["send", "recv"]))
    assert sorted(set(middle["op"].to_list())) == ["recv", "send"]
    assert set(middle["exposed_ns"].to_list()) == {20_000.0}
    assert middle.filter(pl.col("op") == "send")["peer"].to_list()[0] == 8
    # DP all-reduce: half hidden behind the backward pass
    dp = coll.filter((pl.col("rank") == 0) & (pl.col("bytes") == 256 << 20))
    assert set(dp["overlapped_ns"].to_list()) == {100_000.0} and set(dp["exposed_ns"].to_list()) == {100_000.0}


def test_bad_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout"):
        make_run(tmp_path / "run", ranks=8, layout=(4, 2, 2))
