"""The overlap tasks' per-rank frames (analyzers/overlap_batches: ``_rows_by_rank`` and ``_rows_of``): each rank's
rows are those ``partition_by("rank")`` gives, in the same order, whichever ranks a task takes together (in a
row or not); rows without a rank go to no task."""

from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from commprof.analyzers.overlap_batches import _rows_by_rank, _rows_of, _split


@pytest.mark.parametrize("seed", range(6))
def test_each_rank_s_rows_equal_its_partition(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 7, 300])
    ranks: list[int | None] = [rng.choice([0, 1, 2, 5, 9, 4096]) for _ in range(n)]
    if seed % 3 == 2 and n:
        ranks[rng.randrange(n)] = None  # a row without a rank
    frame = pl.DataFrame({"rank": ranks, "i": list(range(n)), "name": [rng.choice("abc") for _ in range(n)]},
                         schema={"rank": pl.Int32, "i": pl.Int64, "name": pl.String})
    want = {key[0]: part for key, part in frame.partition_by("rank", as_dict=True).items()} if n else {}
    ordered, rows = _rows_by_rank(frame)
    assert sorted(rows) == sorted(r for r in want if r is not None)
    # a task's ranks: all of them in rank order (one slice), a shuffled few (slices put together), one absent
    for task in (sorted(rows), rng.sample(sorted(rows), min(3, len(rows))), [7777]):
        got, counts = _rows_of(ordered, rows, tuple(task))
        parts = _split(got, counts)
        assert len(parts) == len(task)
        for rank, part in zip(task, parts, strict=True):
            assert_frame_equal(part, want[rank] if rank in want else frame.clear())
