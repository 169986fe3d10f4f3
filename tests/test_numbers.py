"""The numbers under the findings on hand-built traces whose answers are known by construction (issue 21,
item 2): blocking Gloo calls count whole wherever their wait lands, the last step ends where the
training step ends, async worker calls are matched by an order every rank shares, and bandwidth is
over a call's transfer time. Times are µs in the trace; the worked answer is beside each check.
(Recorded torchrun runs check the same on real traces: tests/test_numbers_torchrun.py.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import Analysis
from commprof.analyzers.skew import analyze_skew
from commprof.ingest.kineto import gloo_calls
from commprof.report.analysis_json import build
from commprof.synth import TraceBuilder, ns

WORKER = 2000
US = 1000  # ns


def analyze(tmp_path: Path, *builders: TraceBuilder) -> Analysis:
    for b in builders:
        b.write(tmp_path / "run" / f"rank-{b.rank}.json")
    return commprof.analyze(commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1))


def parts(a: Analysis) -> dict[str, int]:
    return {c: int(a.steps[c].sum()) for c in ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "idle_ns")}


def gloo_rank(next_op_at: float) -> TraceBuilder:
    """A Megatron-style TP forward: ``_ReduceForward`` [10, 60) encloses the enqueue ``c10d::allreduce_``
    [12, 14); the worker thread moves the data [15, 50); the thread's next own op starts at ``next_op_at``."""
    b = TraceBuilder(backend="gloo", world_size=2).thread_name(WORKER, "pt_gloo_runloop").step(1, 0, 100)
    b.cpu("_ReduceForward", 10, 60).cpu("c10d::allreduce_", 12, 14, **{"Input Dims": [[[1000]]],
                                                                         "Input type": ["float"]})
    b.gloo("all_reduce", 15, 50, tid=WORKER, nelems=1000)
    return b.cpu("aten::mm", next_op_at, next_op_at + 5)


def test_a_blocking_call_inside_an_enclosing_op_is_exposed(tmp_path: Path) -> None:
    a = analyze(tmp_path, gloo_rank(next_op_at=62))
    # the thread starts nothing from the enqueue until the worker op ends: it waits [12, 50) on its lane, so
    # _ReduceForward computes only [10, 12) + [50, 60) + aten::mm [62, 67) = 17; the all-reduce [15, 50) = 35 is
    # all exposed (before: 33 of it read as hidden behind _ReduceForward)
    assert parts(a) == {"compute_ns": ns(17), "overlapped_comm_ns": 0, "exposed_comm_ns": ns(35),
                        "idle_ns": ns(100 - 17 - 35)}
    waits = a.tables.intervals().filter(pl.col("kind") == "wait").sort("start_ns")
    assert waits["name"].to_list() == ["c10d::allreduce_", "wait: all_reduce (blocking call)"]
    assert waits["end_ns"].to_list()[-1] == a.collectives["end_ns"][0]  # until the worker op ends


def test_an_async_call_keeps_its_overlap(tmp_path: Path) -> None:
    # aten::mm starts at 20, while the all-reduce runs: the thread went on computing (async_op=True, DDP)
    a = analyze(tmp_path, gloo_rank(next_op_at=20))
    # compute: [10, 60) minus the enqueue [12, 14) = 48; beside the all-reduce [15, 50): 35 overlapped
    assert parts(a) == {"compute_ns": ns(48 - 35), "overlapped_comm_ns": ns(35), "exposed_comm_ns": 0,
                        "idle_ns": ns(100 - 48)}
    assert a.tables.intervals().filter(pl.col("name").str.starts_with("wait: ")).height == 0


def test_the_last_step_ends_where_the_training_step_does(tmp_path: Path) -> None:
    # a CPU run: the profiler closes ProfilerStep#2 at 150 from the optimizer's post-step hook, then stops
    # inside Optimizer.step, which the trace ends at 190: [150, 190) is the profiler's work, not the step's
    b = TraceBuilder(backend="gloo").thread_name(WORKER, "pt_gloo_runloop").step(1, 0, 100).step(2, 100, 150)
    b.cpu("aten::mm", 105, 130).cpu("Optimizer.step#SGD.step", 140, 190, cat="user_annotation")
    b.cpu("aten::add_", 141, 148)
    a = analyze(tmp_path, b)
    assert (a.steps["end_ns"] - a.steps["start_ns"]).to_list() == [ns(100), ns(50)]
    # communication still running past the mark stays in the step (the GPU, or a worker thread, trails)
    a2 = analyze(tmp_path / "comm", b.gloo("all_reduce", 145, 170, tid=WORKER, nelems=10))
    assert (a2.steps["end_ns"] - a2.steps["start_ns"]).to_list() == [ns(100), ns(70)]
    gpu = TraceBuilder().step(1, 0, 100).step(2, 100, 150).compute(150, 170)
    a3 = analyze(tmp_path / "gpu", gpu)
    assert (a3.steps["end_ns"] - a3.steps["start_ns"]).to_list() == [ns(100), ns(70)]


def _calls(rows: list[tuple[int, int, str, int, int | None, bool]]) -> pl.DataFrame:
    """(rank, call, op, bytes, seq, is_async) with start = call index, all in group "0"."""
    return pl.DataFrame(
        [{"rank": r, "call": c, "pg": "0", "seq": s, "op": op, "peer": None, "bytes": nb, "is_async": asy,
          "start_ns": 1000 * c + 10 * r, "end_ns": 1000 * c + 500} for r, c, op, nb, s, asy in rows],
        schema={"rank": pl.Int32, "call": pl.Int64, "pg": pl.String, "seq": pl.Int64, "op": pl.String,
                "peer": pl.Int32, "bytes": pl.Int64, "is_async": pl.Boolean, "start_ns": pl.Int64, "end_ns": pl.Int64})


def test_async_worker_calls_match_by_an_order_every_rank_shares() -> None:
    # DDP's buckets of 4 and 8 MB on two worker threads: rank 1's threads started them in the other order
    calls = _calls([(0, 0, "all_reduce", 4, None, True), (0, 1, "all_reduce", 8, None, True),
                    (1, 0, "all_reduce", 8, None, True), (1, 1, "all_reduce", 4, None, True)])
    skew = analyze_skew(calls, pl.DataFrame({"rank": [0, 1], "host": ["h", "h"]}))
    keyed = skew.calls.join(calls, on=["rank", "call"])
    assert keyed.group_by("match_key").agg(pl.col("bytes").n_unique())["bytes"].to_list() == [1, 1]
    assert skew.unmatched == 0 and set(skew.calls["matched_ranks"].to_list()) == {2}


def test_a_call_with_seq_matches_by_seq_even_when_others_of_its_group_have_none() -> None:
    # seq 7 started second on rank 1; the group's other calls (no seq, synchronous) match by order
    calls = _calls([(0, 0, "all_reduce", 4, 7, False), (0, 1, "broadcast", 4, None, False),
                    (1, 0, "broadcast", 4, None, False), (1, 1, "all_reduce", 4, 7, False)])
    skew = analyze_skew(calls, pl.DataFrame({"rank": [0, 1], "host": ["h", "h"]}))
    keyed = skew.calls.join(calls, on=["rank", "call"]).sort("match_key", "rank")
    assert keyed.group_by("match_key").agg(pl.col("op").n_unique())["op"].to_list() == [1, 1]
    assert skew.match_by == "seq and order"


def test_busbw_is_over_the_transfer_time(tmp_path: Path) -> None:
    args = {"Collective name": "all_reduce", "In msg nelems": 250_000, "Out msg nelems": 250_000, "dtype": "Float",
            "Group size": 2, "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}
    early = TraceBuilder(rank=0).step(1, 0, 100).nccl(10, 40, **args)
    late = TraceBuilder(rank=1).step(1, 0, 100).nccl(20, 40, **args)
    a = analyze(tmp_path, early, late)
    c = a.collectives.sort("rank")
    # rank 0 waited 10 µs for rank 1; both moved 1e6 B in [20, 40): 20 µs of transfer, 50 GB/s;
    # all-reduce over n = 2: bus factor 2 (n-1)/n = 1, so busbw 50 GB/s (over the whole call: 33.3)
    assert c["wait_ns"].to_list() == [ns(10), 0]
    assert c["transfer_ns"].to_list() == [ns(20)] * 2
    assert c["busbw_gbps"].to_list() == pytest.approx([1e6 * 1.0 / 20_000] * 2)
    assert a.collectives_summary["busbw_gbps"].to_list() == pytest.approx([50.0])
    assert "over" in build(a)["conventions"]["bandwidth"] and "10^9 B/s" in build(a)["conventions"]["bandwidth"]


def test_a_worker_op_links_to_its_own_groups_call_before_a_cpp_callers() -> None:
    # DDP's reducer enqueues a bucket of group "1" (a c10d op: no annotation, group unknown, size unknown)
    # at 100 µs just before the training thread's annotated TP call of group "3" at 110; the TP worker op starts
    # at 120, the bucket's at 130: each takes its own call, so the TP call (next op at 300) blocks till 200
    ops = gloo_calls.Ops(
        names=["c10d::allreduce_", "commprof:pg=3;op=all_reduce;seq=5", "gloo:all_reduce", "gloo:all_reduce",
               "aten::mm"],
        tids=[0, 0, 1, 2, 0], start=np.array([100, 110, 120, 130, 300]) * US,
        end=np.array([105, 115, 200, 400, 310]) * US,
        worker=np.array([False, False, True, True, False]), comm=np.array([False, False, True, True, False]),
        pgs=[None, None, "3", "1", None], input_numel=[None, None, 64, 4096, None])
    links = gloo_calls.link_worker_calls(ops)
    assert links.seq == {2: 5}
    assert links.blocking == {2: True, 3: False}
    assert links.waits == [(1, 110 * US, 200 * US, "all_reduce")]
