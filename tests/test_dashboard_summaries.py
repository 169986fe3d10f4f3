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


# ------------------------------------------------------------------ per host and per group (issue 39, item 4)
def _per_host(traffic: pl.DataFrame, hosts: dict[int, str]) -> pl.DataFrame:
    """The rank-pair matrix summed per host pair, as a small run's topology page sums it."""
    from commprof.figures.transforms import host_traffic

    return host_traffic(traffic, hosts).filter(pl.col("bytes_per_step") > 0)


def test_host_traffic_is_the_rank_pair_matrix_summed_per_host(synth: Analysis) -> None:
    """Analysis.host_traffic makes no rank pair (a DP group of 2,048 ranks would make 4 M each), yet gives the
    rank-pair matrix's sums: every host pair, dimension and tier, inside a host as host -> itself."""
    hosts = {int(r): h for r, h in synth.ranks.select("rank", "host").iter_rows()}
    want = _per_host(synth.traffic, hosts)
    got, left_out = synth.host_traffic()
    assert left_out == synth.traffic_left_out
    keys = ["src_host", "dst_host", "dimension", "tier"]
    joined = want.join(got, on=keys, how="full", coalesce=True)
    assert joined.height == want.height == got.height
    assert ((joined["bytes_per_step"] - joined["bytes_per_step_right"]).abs() <= 1e-6 * joined["bytes_per_step"]).all()


def test_hosts_apart_and_the_rest_summed_keep_every_byte(synth: Analysis) -> None:
    """One host apart: its rows to itself are the full matrix's, and what it sends to the other host is what
    it sends to OTHER_HOSTS; every byte of the run is still there."""
    from commprof.analyzers.traffic import OTHER_HOSTS

    full, _ = synth.host_traffic()
    one, _ = synth.host_traffic(["gpu-node-00"])
    assert set(one["src_host"].to_list()) == set(one["dst_host"].to_list()) == {"gpu-node-00", OTHER_HOSTS}
    assert one["bytes_per_step"].sum() == pytest.approx(full["bytes_per_step"].sum(), rel=1e-9)
    out = one.filter((pl.col("src_host") == "gpu-node-00") & (pl.col("dst_host") == OTHER_HOSTS))
    want = full.filter((pl.col("src_host") == "gpu-node-00") & (pl.col("dst_host") == "gpu-node-01"))
    assert out.sort("dimension")["bytes_per_step"].to_list() == pytest.approx(
        want.sort("dimension")["bytes_per_step"].to_list())


def test_host_summary_sums_the_ranks_and_the_traffic(synth: Analysis) -> None:
    """Each host's means are its ranks' (rank_summary), its bytes the traffic matrix's from it to other hosts
    and to itself; rank 5, 1 ms late per step, makes node 0 the host the others wait for."""
    hosts = {int(r): h for r, h in synth.ranks.select("rank", "host").iter_rows()}
    summary = synth.host_summary
    assert summary["host"].to_list() == ["gpu-node-00", "gpu-node-01"] and summary["worst"].to_list() == [1, 2]
    first = summary.row(0, named=True)
    mine = synth.rank_summary.filter(pl.col("rank") < 8)
    assert first["ranks"] == 8 and (first["first_rank"], first["last_rank"]) == (0, 7)
    assert first["exposed_comm_ns"] == pytest.approx(mine["exposed_comm_ns"].mean())
    assert first["waited_on_rank"] == 5 and first["waited_on_ns_per_step"] == float(
        synth.stragglers.filter(pl.col("rank") == 5)["caused_wait_ns_per_step"][0])
    per_host = _per_host(synth.traffic, hosts).filter(pl.col("src_host") == "gpu-node-00")
    inside = per_host.filter(pl.col("dst_host") == "gpu-node-00")["bytes_per_step"].sum()
    assert first["local_bytes_per_step"] == pytest.approx(inside)
    assert first["net_bytes_per_step"] == pytest.approx(per_host["bytes_per_step"].sum() - inside)


def test_hosts_worst_first_slow_ports_then_waited_on_then_exposed() -> None:
    from commprof.analyzers.hosts import host_summary

    ranks = pl.DataFrame({"rank": list(range(8)), "host": [f"node-{r // 2}" for r in range(8)]})
    exposed = [10, 10, 50, 50, 30, 30, 20, 20]  # node-1 the most exposed
    steps = pl.DataFrame({"rank": list(range(8)), "step_ns": [100] * 8, "exposed_comm_ns": exposed,
                          "exposed_wait_ns": [0] * 8})
    late = pl.DataFrame({"rank": [6], "caused_wait_ns_per_step": [7]})  # node-3 holds the rank waited on
    ports = pl.DataFrame({"host": ["node-0", "node-1", "node-2", "node-3", "node-2"],
                          "gbps": [50.0, 50.0, 50.0, 50.0, 12.5]})  # node-2 has a slow port
    empty = pl.DataFrame(schema={"rank": pl.Int64, "pg": pl.String, "op": pl.String, "bytes": pl.Int64,
                                 "step": pl.Int64, "peer": pl.Int64})
    out = host_summary(ranks, steps, late, empty, pl.DataFrame({"pg": ["0"], "ranks": [list(range(8))]}), ports, 1)
    assert out["host"].to_list() == ["node-2", "node-3", "node-1", "node-0"]
    assert out["slow_port"].to_list() == [True, False, False, False] and out["port_gbps"][0] == 12.5
    assert out.row(1, named=True)["waited_on_rank"] == 6 and out["exposed_comm_ns"].to_list() == [30, 20, 50, 10]


def test_group_waits_are_the_members_mean_and_longest(synth: Analysis) -> None:
    waits = synth.group_waits
    assert waits.height == synth.rank_group_waits["pg"].n_unique()
    first = waits.row(0, named=True)  # rank 5's TP group: its 7 peers wait ~1 ms per step, rank 5 itself ~0
    members = synth.rank_group_waits.filter(pl.col("pg") == first["pg"])
    assert first["dimension"] == "tp" and first["ranks"] == 8
    assert first["wait_ns_per_step"] == pytest.approx(members["wait_ns_per_step"].mean())
    assert first["max_wait_ns_per_step"] == members["wait_ns_per_step"].max()
    assert waits["wait_ns_per_step"].to_list() == sorted(waits["wait_ns_per_step"].to_list(), reverse=True)
