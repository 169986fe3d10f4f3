"""Groups named by two sources in one run (Kineto: process group name and all ranks; nsys: communicator hash,
its own rank): united by rank sets, groups of equal ranks told apart by their calls (commprof.ingest.group_union).
The whole-run check (a synth run half Kineto, half nsys analyzes as the all-Kineto run) is in test_nsys.py."""

from __future__ import annotations

from typing import Any

import polars as pl

from commprof.ingest.group_union import unite


def _listed(rows: list[tuple[str, list[int], int | None, int, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"pg": pl.String, "ranks": pl.List(pl.Int32), "size": pl.Int32,
                                      "lister": pl.Int32, "source": pl.String}, orient="row")


def _calls(rows: list[tuple[int, str, str, int | None]]) -> pl.DataFrame:
    return pl.DataFrame([(*r, k) for k, r in enumerate(rows)], orient="row",
                        schema={"rank": pl.Int32, "pg": pl.String, "op": pl.String, "bytes": pl.Int64,
                                "start_ns": pl.Int64})


# Megatron with cp = 1: "dp" and "dp_cp" hold the same ranks; rank 1 is an nsys export
LISTED = _listed([
    ("dp", [0, 1], 2, 0, "kineto"), ("dp_cp", [0, 1], 2, 0, "kineto"),
    ("0xa", [1], 2, 1, "nsys"), ("0xb", [1], 2, 1, "nsys"),
])


def test_groups_of_equal_ranks_are_told_apart_by_their_calls() -> None:
    calls: list[tuple[int, str, str, int | None]] = [
        (0, "dp", "all_reduce", 100), (0, "dp_cp", "all_gather", 64), (0, "dp_cp", "all_gather", 64),
        (1, "0xa", "all_gather", None), (1, "0xa", "all_gather", 64), (1, "0xb", "all_reduce", 100),
    ]
    union = unite(LISTED, _calls(calls))
    assert union.alias == {"0xa": "dp_cp", "0xb": "dp"} and union.united == {"dp", "dp_cp"}
    assert union.warnings == ()


def test_a_group_that_fits_several_keeps_its_name_and_says_so() -> None:
    same: list[tuple[int, str, str, int | None]] = [
        (0, "dp", "all_reduce", 100), (0, "dp_cp", "all_reduce", 100),
        (1, "0xa", "all_reduce", 100), (1, "0xb", "all_reduce", 100),
    ]
    union = unite(LISTED, _calls(same))
    assert union.alias == {}
    assert len(union.warnings) == 2 and "0xa" in union.warnings[0] and "fits several" in union.warnings[0]


def test_a_taken_group_is_no_candidate_for_the_others() -> None:
    # rank 0's trace lists every group, "tp23" too (none of its ranks traced by Kineto: no calls to compare);
    # 0xt (ranks 2 and 3) fits "tp23" alone; 0xd (rank 2, size 2) fits "tp23" and "dp" until 0xt takes "tp23"
    listed = _listed([("dp", [0, 2], 2, 0, "kineto"), ("tp01", [0, 1], 2, 0, "kineto"),
                      ("tp23", [2, 3], 2, 0, "kineto"), ("0xd", [2], 2, 2, "nsys"), ("0xt", [2], 2, 2, "nsys"),
                      ("0xt", [3], 2, 3, "nsys")])
    union = unite(listed, _calls([(0, "dp", "all_reduce", 4), (2, "0xd", "all_reduce", 4)]))
    assert union.alias == {"0xd": "dp", "0xt": "tp23"} and union.warnings == ()


def test_nothing_to_unite() -> None:
    kineto_only = LISTED.filter(pl.col("source") == "kineto")
    assert unite(kineto_only, _calls([])).alias == {}
    nsys_only: Any = LISTED.filter(pl.col("source") == "nsys")
    assert unite(nsys_only, _calls([])).alias == {}
    # a group of nsys ranks only that no Kineto trace lists is whole on its own: no warning
    alone = pl.concat([LISTED, _listed([("0xt", [2], 2, 2, "nsys"), ("0xt", [3], 2, 3, "nsys")])])
    calls: list[tuple[int, str, str, int | None]] = [(0, "dp", "all_reduce", 1), (0, "dp_cp", "all_gather", 1),
                                                    (1, "0xa", "all_gather", 1), (1, "0xb", "all_reduce", 1)]
    union = unite(alone, _calls(calls))
    assert "0xt" not in union.alias and union.warnings == ()
