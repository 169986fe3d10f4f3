"""Small traces parsed together (commprof.ingest.store.parse_batch): their GPU tables built once for the
batch (kineto.reader.Columns / stack) must hold, trace by trace, what each trace parsed alone holds, with
the same metas and warnings, whatever the traces are: GPU and CPU traces, device events dropped (no ts,
implausible times), kernels that only look like communication, no communication, a cut or corrupt
member, a file that is not a trace."""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import commprof
from commprof.ingest import store
from commprof.ingest.discover import discover
from commprof.ingest.kineto import reader
from commprof.ingest.schema import INTERVALS
from commprof.synth import SynthConfig, generate

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _write(path: Path, doc: dict[str, Any]) -> None:
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of small traces of every kind the batch must keep apart."""
    out = tmp_path_factory.mktemp("varied")
    run = out / "run"
    generate(SynthConfig(nodes=1, gpus_per_node=4, sizes={"tp": 2, "dp": 2}, steps=2, micro_batches=1, layers=1,
                         seed=3), run)
    folder = out / "traces"
    folder.mkdir()
    traces = sorted((run / "raw" / "traces").glob("rank-*.json.gz"))
    for trace in traces:
        shutil.copy(trace, folder / trace.name)
    with gzip.open(traces[0], "rt") as fh:
        doc = json.load(fh)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels
    # device events whose ts is not a number, and one a century away (dropped as implausible)
    bad = copy.deepcopy(doc)
    odd = [e for e in bad["traceEvents"] if e.get("cat") == "kernel"]
    odd[0]["ts"] = "soon"
    odd[-1]["ts"] = 1.0
    bad["distributedInfo"]["rank"] = 10
    _write(folder / "rank-10.json.gz", bad)
    # a kernel that reads like communication that no rule claims (its frame is built at once)
    look = copy.deepcopy(doc)
    next(e for e in look["traceEvents"] if e.get("cat") == "kernel")["name"] = "my_allreduce_thing"
    look["distributedInfo"]["rank"] = 11
    _write(folder / "rank-11.json.gz", look)
    # no communication at all, and no device event at all (a CPU trace among GPU ones)
    quiet = copy.deepcopy(doc)
    quiet["traceEvents"] = [e for e in quiet["traceEvents"] if not str(e.get("name", "")).startswith("nccl")
                            and e.get("name") != "record_param_comms"]
    quiet["distributedInfo"]["rank"] = 12
    _write(folder / "rank-12.json.gz", quiet)
    shutil.copy(SAMPLES / "gloo_4rank_profiler" / "rank-1.json.gz", folder / "rank-13.json.gz")
    # damaged members: cut short, corrupt gzip, not a trace, empty
    cut = copy.deepcopy(doc)
    cut["distributedInfo"]["rank"] = 14
    _write(out / "whole.json.gz", cut)
    blob = (out / "whole.json.gz").read_bytes()
    (folder / "rank-14.json.gz").write_bytes(blob[: len(blob) // 2])
    corrupt = bytearray(blob)
    corrupt[200:240] = b"x" * 40
    (folder / "rank-15.json.gz").write_bytes(bytes(corrupt))
    (folder / "rank-16.json").write_text('{"a": 1}')
    (folder / "rank-17.json").write_text("")
    return folder


@pytest.fixture
def one_run(varied: Path, tmp_path: Path) -> Path:
    """The varied traces that make one run (no second claim to rank 1)."""
    folder = tmp_path / "run"
    shutil.copytree(varied, folder, ignore=shutil.ignore_patterns("rank-13.json.gz"))
    return folder


def _alone(entries: list[store.FileEntry], cache: Path) -> list[Any]:
    return [store.parse_batch([e], cache)[0] for e in entries]


def _rows(cache: Path, entry: store.FileEntry, meta: dict[str, Any], table: str) -> pl.DataFrame:
    frame = pl.read_parquet(store.table_file(cache, table, entry, meta))
    rows = store.part_rows(meta, table)
    return frame if rows is None else frame.slice(*rows)


def test_a_batch_holds_what_each_trace_parsed_alone_holds(varied: Path, tmp_path: Path) -> None:
    entries = store._entries(discover(varied))
    assert len(entries) == 12
    together = store.parse_batch(entries, tmp_path / "batch")
    alone = _alone(entries, tmp_path / "alone")
    parts = set()
    for entry, one, ref in zip(entries, together, alone, strict=True):
        assert one.error == ref.error, entry.rel
        if one.error is not None:
            continue
        meta, want = dict(one.value), dict(ref.value)
        part = meta.pop("part", None)
        want.pop("part", None)
        assert meta == want, entry.rel  # warnings, rank, n_intervals, skipped ...
        if part is None:
            continue
        parts.add(part["file"])
        for table in store.TABLES:
            got = _rows(tmp_path / "batch", entry, one.value, table)
            assert_frame_equal(got, _rows(tmp_path / "alone", entry, ref.value, table), check_row_order=True)
    assert any(p.startswith("batch-") for p in parts)
    by_rel = {e.rel: o for e, o in zip(entries, together, strict=True)}
    assert "corrupt gzip data" in str(by_rel["rank-15.json.gz"].error)  # its own error; the others parsed
    assert by_rel["rank-16.json"].value["skipped"] and by_rel["rank-17.json"].value["skipped"]
    warned = {rel: o.value.get("warnings") for rel, o in by_rel.items() if o.error is None}
    assert any("ends early" in w for w in warned["rank-14.json.gz"]) and "part" in by_rel["rank-14.json.gz"].value
    assert any("not a number" in w for w in warned["rank-10.json.gz"])
    assert by_rel["rank-11.json.gz"].value["uncounted"]  # kernels that look like communication, kept for the run


def test_stack_equals_concatenated_frames(varied: Path) -> None:
    paths = [p for p in sorted(varied.glob("rank-1[0-3].json.gz"))] + sorted(varied.glob("rank-[0-3].json.gz"))
    deferred = [reader.extract(p, label=str(p), defer=True) for p in paths]
    eager = [reader.extract(p, label=str(p)) for p in paths]
    for table in ("intervals", "collectives", "step_marks", "process_groups"):
        got = reader.stack([getattr(t, table) for t in deferred])
        want = pl.concat([getattr(t, table) for t in eager], how="vertical", rechunk=True)
        assert got.schema == want.schema
        assert_frame_equal(got, want, check_row_order=True)
        assert [len(getattr(t, table)) for t in deferred] == [getattr(t, table).height for t in eager]
    for one, ref in zip(deferred, eager, strict=True):
        assert one.warnings == ref.warnings
    with pytest.raises(TypeError):
        reader.stack([reader.Columns({"x": [1]}, INTERVALS, 1),
                      reader.Columns({"x": pl.Series([1])}, INTERVALS, 1)])


def test_a_batch_that_fails_to_build_is_parsed_one_trace_at_a_time(one_run: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    want = commprof.open_run(one_run, cache_dir=tmp_path / "a", jobs=1)

    failed = []

    def broken(parts: list[Any]) -> pl.DataFrame:
        if len(parts) > 1:
            failed.append(len(parts))
            raise ValueError("cannot build")
        return real(parts)

    real = reader.stack
    monkeypatch.setattr(reader, "stack", broken)
    got = commprof.open_run(one_run, cache_dir=tmp_path / "b", jobs=1)
    assert failed and got.ingested.parsed == want.ingested.parsed
    assert got.warnings == want.warnings
    for table in ("intervals", "collectives", "step_marks", "process_groups", "ranks"):
        assert_frame_equal(got.table(table), want.table(table), check_row_order=True)


def test_a_ranks_filter_reads_its_ranks_out_of_the_batch(one_run: Path, tmp_path: Path) -> None:
    full = commprof.open_run(one_run, cache_dir=tmp_path / "c", jobs=1)
    some = commprof.open_run(one_run, cache_dir=tmp_path / "c", jobs=1, ranks=[1, 10, 12])
    assert sorted(some.ranks["rank"].to_list()) == [1, 10, 12]
    for table in ("intervals", "collectives", "step_marks"):
        want = full.table(table).filter(pl.col("rank").is_in([1, 10, 12]))
        assert_frame_equal(some.table(table), want, check_row_order=False)
    fresh = commprof.open_run(one_run, cache_dir=tmp_path / "d", jobs=1, ranks=[10, 12])
    assert_frame_equal(fresh.table("intervals"), full.table("intervals").filter(pl.col("rank").is_in([10, 12])),
                       check_row_order=False)
