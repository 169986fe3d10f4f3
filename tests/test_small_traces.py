"""Many small traces (issue 24): the shortcuts taken for them give what the long way gives."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from commprof.ingest.common.rank_trace import MAX_RANK
from commprof.ingest.kineto.comm import bounded_int, parse_ranks, process_groups, ranks_cell
from commprof.ingest.kineto.decode import Args, DistributedInfo, PgConfig
from commprof.ingest.runner import LocalPool, Outcome, Progress
from commprof.ingest.schema import PROCESS_GROUPS


def _one_by_one(value: list[Any]) -> list[int]:
    out = [bounded_int(v, 0, MAX_RANK) for v in value]
    return [v for v in out if v is not None]


def test_parse_ranks_fast_path_keeps_what_the_slow_path_keeps() -> None:
    for value in ([], [0, 1, 2], list(range(5000)), [3, True, 4], [False], [-1, 2], [MAX_RANK, 1], [MAX_RANK - 1],
                  [1, 2.0, "3"], [1 << 70, 5], [2, None, 7], (4, 5, 6)):
        assert parse_ranks(value) == _one_by_one(list(value)), value
    assert parse_ranks("[1, 2, 3]") == [1, 2, 3]
    assert parse_ranks(None) is None


def _square(x: int) -> int:
    if x == 13:
        raise ValueError("thirteen")
    return x * x


def test_many_small_tasks_go_in_chunks_and_come_back_in_order() -> None:
    seen: list[Progress] = []
    with LocalPool(2) as pool:
        outcomes = pool.run(_square, [(i,) for i in range(200)], [1] * 200, "test", seen.append)
    assert [o.value for o in outcomes if o.error is None] == [i * i for i in range(200) if i != 13]
    assert outcomes[13] == Outcome(error="ValueError: thirteen")
    assert [p.done for p in seen] == list(range(1, 201))
    assert seen[-1].failed == 1


def _groups_row_by_row(dist: Any, arg_sources: list[Any], sidecar: dict[str, Any] | None) -> pl.DataFrame:
    """process_groups as it was: one dict per group, every member list parsed again."""
    rows: dict[str, dict[str, Any]] = {}
    for group in (sidecar or {}).get("process_groups") or []:
        ranks = parse_ranks(group.get("ranks")) or []
        rows[str(group.get("name"))] = {
            "pg": str(group.get("name")), "desc": group.get("desc"), "ranks": ranks,
            "size": bounded_int(group.get("size"), 1, MAX_RANK) or len(ranks) or None, "backend": group.get("backend"),
        }
    configs = dist.pg_config if dist is not None and dist.pg_config is not None else []
    if isinstance(configs, dict):
        configs = list(configs.values())
    for cfg in configs:
        ranks = parse_ranks(cfg.ranks) or []
        if str(cfg.pg_name) in rows:
            continue
        rows[str(cfg.pg_name)] = {"pg": str(cfg.pg_name), "desc": cfg.pg_desc or None, "ranks": ranks,
                                  "size": bounded_int(cfg.pg_size, 1, MAX_RANK) or len(ranks) or None,
                                  "backend": cfg.backend_config or (dist.backend if dist else None)}
    for args in arg_sources:
        if args.pg_name is None or str(args.pg_name) in rows:
            continue
        ranks = parse_ranks(args.pg_ranks) or []
        rows[str(args.pg_name)] = {"pg": str(args.pg_name), "desc": args.pg_desc, "ranks": ranks,
                                   "size": bounded_int(args.group_size, 1, MAX_RANK) or len(ranks) or None,
                                   "backend": dist.backend if dist else None}
    return pl.DataFrame(list(rows.values()), schema=PROCESS_GROUPS) if rows else pl.DataFrame(schema=PROCESS_GROUPS)


def test_process_groups_by_columns_and_cached_members_equal_the_row_by_row_table() -> None:
    world = list(range(5000))
    member_lists: list[Any] = [world, list(world), [1, True, 2], [1, 1.0, 2], [True], [1], [1.0], "[0, 1, 2]",
                               "[0, 1, 2]", "", "[", "[1, 'x']", [], None, [float("nan"), 3], [None, 3], [1 << 70, 4],
                               (5, 6), [5, 6], ["7", 8], [-1, 0], [MAX_RANK, 2], [2, 1, 2], "(3, 4)", [[1], 2]]
    configs = [PgConfig(pg_name=i if i % 3 else str(i), pg_desc="" if i % 4 == 0 else f"g{i}",
                        backend_config="" if i % 5 == 0 else "cuda:nccl", pg_size=[0, 8, "x", 1 << 40, 3][i % 5],
                        ranks=ranks) for i, ranks in enumerate(member_lists) if ranks is not None]
    configs.append(PgConfig(pg_name="1", ranks=[9, 9]))  # a name seen again: the first one stays
    dists: list[Any] = [None, DistributedInfo(backend="nccl", pg_config=configs), DistributedInfo(pg_config=configs),
                        DistributedInfo(backend="gloo", pg_config={str(i): c for i, c in enumerate(configs)}),
                        DistributedInfo(backend="nccl")]
    args = [Args(pg_name="90", pg_desc="args", pg_ranks=[1, 2, 3], group_size=3), Args(pg_name=None),
            Args(pg_name=91, pg_ranks="[4, 5]"), Args(pg_name="92", pg_ranks=[True, 1.5], group_size="2"),
            Args(pg_name="0", pg_ranks=[7])]
    sidecars: list[Any] = [None, {}, {"process_groups": [
        {"name": "s1", "desc": "side", "ranks": [3, 4], "size": 2, "backend": "gloo"},
        {"name": 2, "ranks": "[1]"}, {"name": "s3", "desc": 7, "ranks": [1, 2], "backend": 1.5}]},
        {"process_groups": [{"name": "0", "ranks": world, "desc": "everyone", "backend": "gloo"}]}]
    for dist in dists:
        for sidecar in sidecars:
            for arg_sources in ([], args):
                for _ in range(2):  # the second time from the cache
                    got = process_groups(dist, arg_sources, sidecar)
                    want = _groups_row_by_row(dist, arg_sources, sidecar)
                    assert got.schema == want.schema == PROCESS_GROUPS
                    assert_frame_equal(got, want)
    # a desc that is no text at all fails as the row-by-row table failed
    with pytest.raises(pl.exceptions.ComputeError):
        _groups_row_by_row(None, [], {"process_groups": [{"name": "x", "desc": ["a"]}]})
    with pytest.raises(pl.exceptions.ComputeError):
        process_groups(None, [], {"process_groups": [{"name": "x", "desc": ["a"]}]})


def test_ranks_cell_tells_ints_from_bools_and_floats() -> None:
    for value in ([1, 2], [True, 2], [1, 2], [1.0, 2], [1.5, 2], [True, 2], [1, 2], "[1, 2]", "[True, 2]", None, "x",
                  [float("inf"), 2], [None, 2], [float("nan"), 2]):
        ranks = parse_ranks(value) or []
        assert ranks_cell(value)[0] == len(ranks), value
        assert ranks_cell(value)[1].to_list() == [ranks], value
    assert ranks_cell([True, 2])[1].to_list() == [[2]] and ranks_cell([1, 2])[1].to_list() == [[1, 2]]
    assert ranks_cell([object()])[1].to_list() == [[]]  # no JSON key: parsed, not cached


def test_overlap_rank_same_whether_its_collectives_carry_the_added_columns_or_not() -> None:
    """analyze_rank adds step/overlapped/exposed columns by hstack when they are new and by with_columns
    when the frame has them already; lane codes come with the GPU-lane flags in one query."""
    from commprof.analyzers.overlap import OverlapSettings, analyze_rank

    intervals = pl.DataFrame({
        "lane": ["gpu 0/7", "gpu 0/7", "cpu 1/2", "cpu 1/2", "gpu 0/20"],
        "kind": pl.Series(["compute", "comm", "compute", "wait", "comm"]).cast(
            pl.Enum(["compute", "comm", "memory", "wait", "annotation"])),
        "start_ns": [0, 50, 10, 20, 60], "end_ns": [100, 150, 90, 40, 200], "launch_ns": [0, 45, None, None, 55]})
    collectives = pl.DataFrame({"pg": ["0", None], "start_ns": [50, 60], "end_ns": [150, 200],
                                "launch_ns": [45, 55], "wait_ns": [10, None]})
    marks = pl.DataFrame({"rank": [3, 3], "step": [1, 2], "start_ns": [0, 100], "end_ns": [100, 180]})
    for hta in (False, True):
        settings = OverlapSettings(hta_compat=hta)
        fresh = analyze_rank(3, intervals, collectives, marks, settings)
        again = analyze_rank(3, intervals, collectives.with_columns(pl.lit(-5, pl.Int64).alias("step")), marks,
                             settings)
        assert fresh.collectives.columns == [*collectives.columns, "step", "overlapped_ns", "exposed_ns",
                                             "exposed_wait_ns"]
        assert_frame_equal(fresh.collectives, again.collectives)
        assert hta or fresh.collectives["exposed_ns"].sum() > 0
