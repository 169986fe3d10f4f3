"""Flight Recorder as the seq source (analyzers/fr_seq.py, issue 23): calls a trace gives without seq take
torch's collective_seq_id from the dumps beside it, where one stretch of the dump fits them. Hand-built
tables, and a ``commprof synth --flight-recorder`` run (labelled synthetic) with the traces' seq removed."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.fr_seq import seq_from_flight_recorder
from commprof.synth import SynthConfig, generate

MiB = 1 << 20


def _calls(ops: list[tuple[str, int]], rank: int = 0, pg: str = "1") -> pl.DataFrame:
    return pl.DataFrame({"rank": [rank] * len(ops), "call": list(range(len(ops))), "pg": [pg] * len(ops),
                         "seq": [None] * len(ops), "op": [o for o, _ in ops], "bytes": [b for _, b in ops],
                         "start_ns": [1000 * k for k in range(len(ops))]},
                        schema={"rank": pl.Int32, "call": pl.Int64, "pg": pl.String, "seq": pl.Int64, "op": pl.String,
                                "bytes": pl.Int64, "start_ns": pl.Int64})


def _dump(ops: list[tuple[str, int]], first_seq: int, rank: int = 0, pg: str = "1") -> pl.DataFrame:
    return pl.DataFrame({"rank": [rank] * len(ops), "pg": [pg] * len(ops),
                         "seq": list(range(first_seq, first_seq + len(ops))), "op": [f"nccl:{o}" for o, _ in ops],
                         "is_p2p": [False] * len(ops), "bytes_in": [b for _, b in ops]},
                        schema={"rank": pl.Int32, "pg": pl.String, "seq": pl.Int64, "op": pl.String,
                                "is_p2p": pl.Boolean, "bytes_in": pl.Int64})


def test_the_trace_window_takes_the_seq_of_its_stretch_of_the_dump() -> None:
    dump = [("all_gather", MiB), ("all_reduce", MiB), ("reduce_scatter", 2 * MiB), ("all_reduce", 4 * MiB),
            ("all_gather", MiB), ("all_reduce", MiB)]
    calls, notes = seq_from_flight_recorder(_calls(dump[2:5]), _dump(dump, first_seq=40))
    assert calls["seq"].to_list() == [42, 43, 44]
    assert "seq of 3 call(s)" in notes[0]


def test_no_single_fit_keeps_order_matching_and_says_so() -> None:
    # a repeating pattern fits at several offsets; a size that no entry has fits nowhere
    repeating = [("all_reduce", MiB)] * 6
    calls, notes = seq_from_flight_recorder(_calls(repeating[:3]), _dump(repeating, first_seq=1))
    assert calls["seq"].is_null().all() and "could not be aligned" in notes[0]
    calls, notes = seq_from_flight_recorder(_calls([("all_reduce", 3 * MiB)]), _dump(repeating, first_seq=1))
    assert calls["seq"].is_null().all() and "1 call(s)" in notes[0]


def test_calls_with_seq_and_runs_without_dumps_are_left_alone() -> None:
    calls = _calls([("all_reduce", MiB)]).with_columns(pl.lit(7, dtype=pl.Int64).alias("seq"))
    assert seq_from_flight_recorder(calls, _dump([("all_reduce", MiB)], 1)) == (calls, [])
    bare = _calls([("all_reduce", MiB)])
    assert seq_from_flight_recorder(bare, _dump([], 1).clear()) == (bare, [])


def _strip_seq(run: Path) -> None:
    for trace in (run / "raw" / "traces").glob("rank-*.json.gz"):
        with gzip.open(trace, "rt") as fh:
            doc = json.load(fh)
        for event in doc["traceEvents"]:
            event.get("args", {}).pop("Seq", None)
        with gzip.open(trace, "wt", compresslevel=1) as fh:
            json.dump(doc, fh)


def test_a_synth_run_without_seq_is_matched_by_the_dumps_seq(tmp_path: Path) -> None:
    run = tmp_path / "run"
    generate(SynthConfig(nodes=1, gpus_per_node=4, sizes={"tp": 2, "dp": 2}, steps=3, flight_recorder=True,
                         straggler=3, straggler_us=2000, seed=3), run, compresslevel=1)
    truth = commprof.analyze(str(run))
    assert truth.match_by == "seq"
    _strip_seq(run)
    shutil.rmtree(run / "tables", ignore_errors=True)
    got = commprof.analyze(str(run))
    # the dumps hold each rank's last 200 entries: the TP group's 4 oldest calls of 192 per rank are older,
    # and keep order matching
    assert got.match_by == "seq and order", got.warnings
    assert any(w.startswith("seq of 800 call(s) without one taken from the Flight Recorder") for w in got.warnings)
    assert any(w.startswith("16 call(s) without seq could not be aligned") for w in got.warnings)
    cols = ["rank", "call", "wait_ns", "late_rank"]
    assert got.collectives.select(cols).sort("rank", "call").equals(truth.collectives.select(cols).sort("rank", "call"))
    assert [(f.id, f.ranks) for f in got.finding_list] == [(f.id, f.ranks) for f in truth.finding_list]
    shutil.rmtree(run / "raw" / "flight_recorder")
    shutil.rmtree(run / "tables", ignore_errors=True)
    assert commprof.analyze(str(run)).match_by == "order"  # without the dumps: order, as before


@pytest.mark.parametrize("op", ["barrier"])
def test_a_barrier_is_an_all_reduce_to_the_dump(op: str) -> None:
    calls, _ = seq_from_flight_recorder(_calls([(op, 4)]), _dump([("all_gather", MiB), ("all_reduce", 4)], 10))
    assert calls["seq"].to_list() == [11]
