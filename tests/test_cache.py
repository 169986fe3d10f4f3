"""The Parquet cache (DESIGN §3, tables/): keyed by each raw file's size, mtime, ctime, inode and content
hash and the ingest version, so a stale table is never used and a changed rank is re-parsed alone."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from machine_faults import read_only
from polars.testing import assert_frame_equal

import commprof
from commprof.ingest import runner as runner_module
from commprof.ingest import store
from commprof.run import Run

TABLES = ("intervals", "collectives", "step_marks", "process_groups", "ranks")


def tables(run: Run) -> dict[str, pl.DataFrame]:
    return {name: run.table(name) for name in TABLES}


def assert_same_tables(a: Run, b: Run) -> None:
    ta, tb = tables(a), tables(b)
    for name in TABLES:
        assert ta[name].height > 0, name
        assert_frame_equal(ta[name], tb[name], check_row_order=True)


def test_second_open_reads_everything_from_the_cache(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    assert first.ingested.parsed == 4
    assert first.ingested.cache == sample_run / "tables"
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == 0
    assert_same_tables(first, second)


def test_cached_tables_equal_freshly_parsed_ones(sample_run: Path, tmp_path: Path) -> None:
    commprof.open_run(sample_run, jobs=1)
    cached = commprof.open_run(sample_run, jobs=1)
    fresh = commprof.open_run(sample_run, cache_dir=tmp_path / "elsewhere", jobs=1)
    assert (cached.ingested.parsed, fresh.ingested.parsed) == (0, 4)
    assert_same_tables(cached, fresh)


def test_new_mtime_reparses_that_file_only(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    victim = sample_run / "rank-2.json.gz"
    st = victim.stat()
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == 1
    assert_same_tables(first, second)
    assert commprof.open_run(sample_run, jobs=1).ingested.parsed == 0


def test_new_size_with_the_same_mtime_reparses_that_file_only(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    victim = sample_run / "rank-1.json.gz"
    st = victim.stat()
    # a second gzip member holding whitespace: same JSON, different size; then restore the mtime
    victim.write_bytes(victim.read_bytes() + gzip.compress(b"\n    \n"))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert victim.stat().st_size != st.st_size
    assert victim.stat().st_mtime_ns == st.st_mtime_ns
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == 1
    assert_same_tables(first, second)


def test_ingest_version_bump_reparses_all(sample_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    monkeypatch.setattr(store, "INGEST_VERSION", store.INGEST_VERSION + 1)
    bumped = commprof.open_run(sample_run, jobs=1)
    assert bumped.ingested.parsed == 4
    assert_same_tables(first, bumped)
    assert commprof.open_run(sample_run, jobs=1).ingested.parsed == 0


def test_deleted_parquet_file_is_rebuilt(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    entry = next(e for e in first.ingested.entries if e.rel == "rank-1.json.gz")
    parquet = first.ingested.cache / "intervals" / f"{entry.stem}.parquet"
    assert parquet.is_file()
    parquet.unlink()
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == 1
    assert parquet.is_file()
    assert_same_tables(first, second)


def test_corrupt_index_reparses_instead_of_failing(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    (first.ingested.cache / store.INDEX).write_text("{ not json")
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == 4
    assert_same_tables(first, second)


def test_removed_trace_leaves_no_stale_rank(sample_run: Path) -> None:
    commprof.open_run(sample_run, jobs=1)
    (sample_run / "rank-3.json.gz").unlink()
    run = commprof.open_run(sample_run, jobs=1)
    assert run.ingested.parsed == 0
    assert run.ranks["rank"].to_list() == [0, 1, 2]
    assert sorted(run.intervals["rank"].unique().to_list()) == [0, 1, 2]
    assert any("3 of 4 ranks" in w for w in run.warnings), run.warnings


def test_single_file_input_caches_under_the_user_cache_dir(sample_run: Path, user_cache_dir: Path) -> None:
    trace = sample_run / "rank-0.json.gz"
    first = commprof.open_run(trace, jobs=1)
    assert first.ingested.cache.is_relative_to(user_cache_dir)
    assert not (sample_run / "tables").exists()
    second = commprof.open_run(trace, jobs=1)
    assert second.ingested.parsed == 0
    assert second.ingested.cache == first.ingested.cache
    assert_same_tables(first, second)


def test_read_only_folder_caches_under_the_user_cache_dir(sample_run: Path, user_cache_dir: Path) -> None:
    with read_only(sample_run):  # a read-only bind mount as root, chmod a-w otherwise
        run = commprof.open_run(sample_run, jobs=1)
        assert run.ingested.cache.is_relative_to(user_cache_dir)
        assert not (sample_run / "tables").exists()
        assert commprof.open_run(sample_run, jobs=1).ingested.parsed == 0


def test_parallel_parse_gives_the_same_tables(
    sample_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools: list[int | None] = []

    class CountingPool(runner_module.ProcessPoolExecutor):
        def __init__(self, max_workers: int | None = None, *args: Any, **kwargs: Any) -> None:
            pools.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(runner_module, "ProcessPoolExecutor", CountingPool)  # an explicit count always uses it
    serial = commprof.open_run(sample_run, cache_dir=tmp_path / "serial", jobs=1)
    assert pools == []
    parallel = commprof.open_run(sample_run, cache_dir=tmp_path / "parallel", jobs=2)
    assert pools == [2]
    assert (serial.ingested.parsed, parallel.ingested.parsed) == (4, 4)
    assert_same_tables(serial, parallel)
