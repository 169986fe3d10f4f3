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


def _part(run: Run, rel: str) -> str:
    entry = next(e for e in run.ingested.entries if e.rel == rel)
    return store.part_file(run.ingested.meta_of(entry), entry.stem)


def test_deleted_parquet_file_is_rebuilt(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    entry = next(e for e in first.ingested.entries if e.rel == "rank-1.json.gz")
    parquet = store.table_file(first.ingested.cache, "intervals", entry, first.ingested.meta_of(entry))
    sharers = sum(_part(first, e.rel) == parquet.stem for e in first.ingested.entries)
    assert parquet.is_file()
    parquet.unlink()
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == sharers  # the traces whose tables that file held
    assert parquet.is_file()
    assert_same_tables(first, second)


def test_small_traces_share_one_file_per_table(sample_run: Path) -> None:
    run = commprof.open_run(sample_run, jobs=1)
    parts = {_part(run, e.rel) for e in run.ingested.entries}
    assert len(parts) == 1 and next(iter(parts)).startswith("batch-")
    for table in store.TABLES:
        assert sorted(p.name for p in (run.ingested.cache / table).iterdir()) == [f"{next(iter(parts))}.parquet"]
    # each trace reads back its own rows, as one file of its own would hold them
    fresh = {e.rel: store.parse_one(e, run.ingested.cache / "alone") for e in run.ingested.entries}
    for entry in run.ingested.entries:
        alone = store.table_file(run.ingested.cache / "alone", "intervals", entry, fresh[entry.rel])
        assert alone.stem == entry.stem
        assert_frame_equal(store.read_table(run.ingested, "intervals", entry), pl.read_parquet(alone))


def test_a_changed_trace_of_a_batch_is_reparsed_alone_and_the_batch_dropped_when_unused(sample_run: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    before = tables(first)  # read now: the batch's files are gone at the end
    batch = _part(first, "rank-0.json.gz")
    victim = sample_run / "rank-2.json.gz"
    st = victim.stat()
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    second = commprof.open_run(sample_run, jobs=1)
    assert second.ingested.parsed == 1
    assert _part(second, "rank-0.json.gz") == batch and _part(second, "rank-2.json.gz") != batch
    assert_same_tables(first, second)
    # every trace of the batch changed: its files go, nothing reads them any more
    for other in sorted(sample_run.glob("rank-*.json.gz")):
        st = other.stat()
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns + 9_000_000_000))
    third = commprof.open_run(sample_run, jobs=1)
    assert third.ingested.parsed == 4
    assert not any((third.ingested.cache / t / f"{batch}.parquet").exists() for t in store.TABLES)
    after = tables(third)
    for name in TABLES:
        assert_frame_equal(before[name], after[name], check_row_order=True)
    assert commprof.open_run(sample_run, jobs=1).ingested.parsed == 0


def test_removed_and_added_traces_with_batches(sample_run: Path, tmp_path: Path) -> None:
    first = commprof.open_run(sample_run, jobs=1)
    kept = tmp_path / "rank-3.json.gz"
    (sample_run / "rank-3.json.gz").rename(kept)
    fewer = commprof.open_run(sample_run, jobs=1)
    assert fewer.ingested.parsed == 0 and len(fewer.rank_files) == 3
    assert fewer.table("intervals").height < first.table("intervals").height
    kept.rename(sample_run / "rank-3.json.gz")  # back, with its ctime bumped: checked by content, not parsed
    again = commprof.open_run(sample_run, jobs=1)
    assert len(again.rank_files) == 4
    assert_same_tables(first, again)


def test_batches_when_parsed_on_a_pool_match_one_process(sample_run: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "BATCH_MAX_FILES", 2)
    alone = commprof.open_run(sample_run, cache_dir=tmp_path / "a", jobs=1)
    assert len({_part(alone, e.rel) for e in alone.ingested.entries}) == 2
    monkeypatch.setattr(store, "BATCH_ALONE_BYTES", 0)  # every trace its own files, named by its stem
    own = commprof.open_run(sample_run, cache_dir=tmp_path / "b", jobs=1)
    assert {_part(own, e.rel) for e in own.ingested.entries} == {e.stem for e in own.ingested.entries}
    assert_same_tables(alone, own)
    assert store.cached_tables(alone.ingested.cache).keys() == store.cached_tables(own.ingested.cache).keys()
    for key, frame in store.cached_tables(alone.ingested.cache).items():
        assert_frame_equal(frame, store.cached_tables(own.ingested.cache)[key])


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


def test_rows_read_at_once_equal_each_trace_read_alone(sample_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from commprof.ingest.tables import RowSlice, read_rank_intervals

    monkeypatch.setattr(store, "BATCH_MAX_FILES", 3)  # a batch of three and a trace alone
    run = commprof.open_run(sample_run, jobs=1)
    traces = [(e, run.ingested.meta_of(e)) for e in run.ingested.entries]
    assert len({store.part_file(m, e.stem) for e, m in traces}) == 2
    for order in (traces, traces[::-1], traces[1:3] + traces[:1]):
        for table in store.TABLES:
            alone = pl.concat(store.read_tables(run.ingested.cache, table, order), how="vertical_relaxed")
            assert_frame_equal(store.read_rows(run.ingested.cache, table, order), alone)
    for rank, source in run.tables().interval_files:
        rf = next(r for r in run.rank_files if r.rank == rank)
        own = store.read_table(run.ingested, "intervals", rf.entry).with_columns(pl.lit(rank, pl.Int32).alias("rank"))
        assert isinstance(source, RowSlice) == (store.part_rows(rf.meta, "intervals") is not None)
        assert_frame_equal(read_rank_intervals(rank, source), own)
        assert_frame_equal(read_rank_intervals(rank, source, ["kind", "start_ns"]), own.select("kind", "start_ns"))


def test_the_tables_just_written_are_read_back_as_the_files_hold_them(tmp_path: Path) -> None:
    """store._remember / store.written: the batch this process wrote last is read back from memory, as the files
    hold it; a file written anew since (another process) is read from disk; a batch's parse drops the last one."""
    frames = {
        "intervals": pl.DataFrame({"rank": [0], "kind": ["comm"], "start_ns": [1]}, schema={
            "rank": pl.Int32, "kind": pl.Enum(["compute", "comm"]), "start_ns": pl.Int64}),
        "collectives": pl.DataFrame({"pg": ["0", None], "bytes": [8, None]}),
        "step_marks": pl.DataFrame({"step": [1, 2]}),
        "process_groups": pl.DataFrame({"ranks": [[0, 1]]}, schema={"ranks": pl.List(pl.Int32)}),
    }
    assert store._write_tables(frames, "t", tmp_path) is None
    store._remember(frames, "t", tmp_path)
    for table, frame in frames.items():
        path = tmp_path / table / "t.parquet"
        assert store.written(path) is frame
        assert_frame_equal(pl.read_parquet(path), frame)  # what a reader of the file gets
        assert_frame_equal(store._read_parquet(path), frame)
    other = tmp_path / "step_marks" / "t.parquet"
    pl.DataFrame({"step": [7, 8, 9]}).write_parquet(other)  # rewritten by someone else
    assert store.written(other) is None
    assert store._read_parquet(other)["step"].to_list() == [7, 8, 9]
    other.unlink()
    assert store.written(other) is None
    odd = {**frames, "step_marks": pl.DataFrame({"v": [None]})}  # a Null column: not kept (read from the file)
    store._write_tables(odd, "u", tmp_path)
    store._remember(odd, "u", tmp_path)
    assert store.written(tmp_path / "step_marks" / "u.parquet") is None
    assert store.written(tmp_path / "intervals" / "u.parquet") is odd["intervals"]
    store.parse_batch([], tmp_path)
    assert store.written(tmp_path / "intervals" / "u.parquet") is None
