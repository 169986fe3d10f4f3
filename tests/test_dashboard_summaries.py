"""The two analysis tables the dashboard added (analyzers/): traffic per dimension and tier, and each
rank's wait per process group; checked against the synthetic sample's construction and the other tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import Analysis

SYNTH = Path(__file__).resolve().parents[1] / "sample_traces" / "synth_2x8_tp8_dp2"


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    root = tmp_path_factory.mktemp("summ") / "synth"
    shutil.copytree(SYNTH, root)
    return commprof.analyze(commprof.open_run(root))


def test_rank_group_waits_add_up_to_the_stragglers_table(synth: Analysis) -> None:
    per_rank = synth.rank_group_waits.group_by("rank").agg(pl.col("wait_ns_per_step").sum())
    joined = per_rank.join(synth.stragglers.select("rank", pl.col("wait_ns_per_step").alias("want")), on="rank")
    assert joined.height == 16
    # each (rank, pg) figure is rounded to the ns on its own
    assert (joined["wait_ns_per_step"] - joined["want"]).abs().max() <= 11  # type: ignore[operator]


def test_the_stragglers_tp_peers_wait_most(synth: Analysis) -> None:
    # rank 5 is 1 ms slower per step (truth.json): its TP group (ranks 0-7 on node 0) waits for it
    top = synth.rank_group_waits.sort("wait_ns_per_step", descending=True).head(7)
    assert set(top["dimension"].to_list()) == {"tp"}
    assert set(top["rank"].to_list()) == {0, 1, 2, 3, 4, 6, 7}
    assert (top["wait_ns_per_step"] > 900_000).all()


def test_traffic_rows_carry_dimension_and_tier(synth: Analysis) -> None:
    t = synth.traffic
    assert set(t["dimension"].unique().to_list()) <= {"tp", "dp", "world"}
    hosts = dict(zip(synth.ranks["rank"].to_list(), synth.ranks["host"].to_list(), strict=True))
    cross = t.filter(pl.col("src").replace_strict(hosts) != pl.col("dst").replace_strict(hosts))
    # tp stays on its node over NVLink; what crosses nodes is dp (and the world group) over InfiniBand
    assert "tp" not in cross["dimension"].to_list() and set(cross["tier"].to_list()) == {"ib"}
    assert set(t.filter(pl.col("dimension") == "tp")["tier"].to_list()) == {"nvlink"}
