"""The overlap tasks' per-rank frames (analyzers/pipeline._by_rank): slices of the frame sorted by rank, equal
to ``partition_by("rank", as_dict=True)``: same keys, same rows in the same order, nulls included."""

from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from commprof.analyzers.pipeline import _by_rank


@pytest.mark.parametrize("seed", range(6))
def test_slices_equal_partitions(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 7, 300])
    ranks: list[int | None] = [rng.choice([0, 1, 2, 5, 9, 4096]) for _ in range(n)]
    if seed % 3 == 2 and n:
        ranks[rng.randrange(n)] = None  # partition_by's own way
    frame = pl.DataFrame({"rank": ranks, "i": list(range(n)), "name": [rng.choice("abc") for _ in range(n)]},
                         schema={"rank": pl.Int32, "i": pl.Int64, "name": pl.String})
    got = _by_rank(frame)
    want = frame.partition_by("rank", as_dict=True) if n else {}
    assert sorted(got, key=str) == sorted(want, key=str)
    for key, part in want.items():
        assert_frame_equal(got[key], part)
