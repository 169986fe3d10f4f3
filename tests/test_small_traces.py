"""Many small traces (issue 24): the shortcuts taken for them give what the long way gives."""

from __future__ import annotations

from typing import Any

from commprof.ingest.common.rank_trace import MAX_RANK
from commprof.ingest.kineto.comm import bounded_int, parse_ranks
from commprof.ingest.runner import LocalPool, Outcome, Progress


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
