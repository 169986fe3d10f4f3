"""Synthetic traces whose answers are known by construction pin every definition of DESIGN §3.

Times below are µs in the trace; every expected figure is worked out in the comment beside it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.synth import TraceBuilder, ns

PARTS = ["compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"]


def analyze(tmp_path: Path, *builders: TraceBuilder, hta_compat: bool = False) -> commprof.run.Run:
    for b in builders:
        b.write(tmp_path / "run" / f"rank-{b.rank}.json")
    run = commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1)
    run.analysis = commprof.analyze(run, AnalysisSettings(hta_compat=hta_compat))  # type: ignore[attr-defined]
    return run


def parts(run: commprof.run.Run, step: int | None = None) -> dict[str, int]:
    steps = run.analysis.steps  # type: ignore[attr-defined]
    if step is not None:
        steps = steps.filter(pl.col("step") == step)
    return {c: int(steps[c].sum()) for c in PARTS}


def expect(**us: float) -> dict[str, int]:
    out = {c: 0 for c in PARTS}
    out.update({f"{k}_ns" if not k.endswith("_ns") else k: ns(v) for k, v in us.items()})
    return out


def test_comm_fully_hidden(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).compute(10, 60).nccl(20, 50)
    run = analyze(tmp_path, b)
    # comm [20,50) lies inside compute [10,60): 30 overlapped; compute alone 20; nothing else runs for 50
    assert parts(run) == expect(compute=20, overlapped_comm=30, idle=50)
    assert run.analysis.rank_summary["overlap_pct"][0] == pytest.approx(100.0)  # type: ignore[attr-defined]


def test_comm_fully_exposed(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).compute(0, 40).nccl(50, 80)
    run = analyze(tmp_path, b)
    assert parts(run) == expect(compute=40, exposed_comm=30, idle=30)
    assert run.analysis.rank_summary["overlap_pct"][0] == pytest.approx(0.0)  # type: ignore[attr-defined]


def test_concurrent_comm_on_two_streams_share_each_instant(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).nccl(10, 50, stream=20).nccl(30, 70, stream=21).compute(40, 60)
    run = analyze(tmp_path, b)
    # union of comm [10,70) = 60, of which [40,60) runs beside compute
    assert parts(run) == expect(overlapped_comm=20, exposed_comm=40, idle=40)
    coll = run.analysis.collectives.sort("start_ns")  # type: ignore[attr-defined]
    # A [10,50): alone [10,30) exposed 20, shared [30,40) exposed 5, shared [40,50) overlapped 5
    # B [30,70): shared [30,40) exposed 5, shared [40,50) overlapped 5, alone [50,60) overlapped 10,
    #            alone [60,70) exposed 10
    assert coll["exposed_ns"].to_list() == [ns(25), ns(15)]
    assert coll["overlapped_ns"].to_list() == [ns(5), ns(15)]


def test_nested_comm_kernels(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).nccl(10, 50, stream=20).nccl(20, 30, stream=21, op="AllGather")
    run = analyze(tmp_path, b)
    assert parts(run) == expect(exposed_comm=40, idle=60)
    coll = run.analysis.collectives.sort("start_ns")  # type: ignore[attr-defined]
    # outer: [10,20) 10 + half of [20,30) 5 + [30,50) 20 = 35; inner: half of [20,30) = 5
    assert coll["exposed_ns"].to_list() == [ns(35), ns(5)]
    assert coll["op"].to_list() == ["all_reduce", "all_gather"]


def test_memcpy_is_memory_not_compute(tmp_path: Path) -> None:
    b = (TraceBuilder().step(1, 0, 100).compute(0, 20).memcpy(10, 15, stream=8).memcpy(20, 30)
         .nccl(40, 50).memcpy(45, 55, stream=8))
    run = analyze(tmp_path, b)
    # memory only where neither compute nor comm runs: [20,30) and [50,55); comm [40,50) is exposed
    # although a memcpy runs beside it; the memcpy inside compute [10,15) counts as compute
    assert parts(run) == expect(compute=20, exposed_comm=10, memory=15, idle=55)


def test_step_without_comm(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).step(2, 100, 200).compute(10, 90).compute(110, 150).nccl(150, 170)
    run = analyze(tmp_path, b)
    assert parts(run, 1) == expect(compute=80, idle=20)
    assert parts(run, 2) == expect(compute=40, exposed_comm=20, idle=40)


def test_collective_spanning_a_step_boundary(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).step(2, 100, 200).nccl(80, 130, **{"Process Group Name": "0"})
    run = analyze(tmp_path, b)
    assert parts(run, 1) == expect(exposed_comm=20, idle=80)
    assert parts(run, 2) == expect(exposed_comm=30, idle=70)
    coll = run.analysis.collectives  # type: ignore[attr-defined]
    assert coll["step"].to_list() == [1]  # a call belongs to the step it starts in
    assert coll["exposed_ns"].to_list() == [ns(50)]  # ...but its time counts where it runs
    pg_steps = run.analysis.pg_steps.sort("step")  # type: ignore[attr-defined]
    assert pg_steps["exposed_ns"].to_list() == [ns(20), ns(30)]


def test_parts_add_up_to_each_step(tmp_path: Path) -> None:
    b = (TraceBuilder().step(1, 0, 100).step(2, 100, 180).step(3, 180, 300)
         .compute(5, 95).nccl(50, 120, stream=20).memcpy(130, 140).nccl(90, 250, stream=21)
         .compute(200, 260, stream=8))
    run = analyze(tmp_path, b)
    steps = run.analysis.steps  # type: ignore[attr-defined]
    total = steps.select(pl.sum_horizontal(PARTS)).to_series()
    assert (total == steps["end_ns"] - steps["start_ns"]).all()
    coll = run.analysis.collectives  # type: ignore[attr-defined]
    assert coll["exposed_ns"].sum() == pytest.approx(steps["exposed_comm_ns"].sum())
    assert coll["overlapped_ns"].sum() == pytest.approx(steps["overlapped_comm_ns"].sum())


def test_new_nccl_dev_kernel_names(tmp_path: Path) -> None:
    b = (TraceBuilder().step(1, 0, 100).nccl(10, 20, op="AllGather", dev=True)
         .kernel("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", 30, 40, stream=21))
    run = analyze(tmp_path, b)
    assert parts(run) == expect(exposed_comm=20, idle=80)
    assert sorted(run.analysis.collectives["op"].to_list()) == ["all_gather", "unknown"]  # type: ignore[attr-defined]


def test_bytes_and_busbw_use_the_group_size(tmp_path: Path) -> None:
    args = {"Collective name": "all_gather", "In msg nelems": 1000, "Out msg nelems": 4000, "dtype": "BFloat16",
            "Group size": 4, "Process Group Name": "3", "Process Group Ranks": "[0, 1, 2, 3]"}
    b = TraceBuilder(world_size=8).step(1, 0, 100).nccl(10, 18, op="AllGather", **args)
    run = analyze(tmp_path, b)
    coll = run.analysis.collectives  # type: ignore[attr-defined]
    assert coll["bytes"].to_list() == [8000]  # the full (gathered) buffer: 4000 x 2 bytes
    assert coll["algbw_gbps"][0] == pytest.approx(8000 / 8000)  # 8000 B in 8 µs = 1 GB/s
    assert coll["busbw_gbps"][0] == pytest.approx(1.0 * 3 / 4)  # (n-1)/n with n = 4, not the world size 8
    assert run.process_groups.filter(pl.col("pg") == "3")["ranks"].to_list() == [[0, 1, 2, 3]]


def test_work_after_the_last_cpu_step_belongs_to_the_last_step(tmp_path: Path) -> None:
    # the GPU runs behind the CPU: kernels of step 2 start after ProfilerStep#2 ended on the CPU
    b = TraceBuilder().step(1, 0, 100).step(2, 100, 150).compute(110, 160).nccl(170, 190)
    run = analyze(tmp_path, b)
    steps = run.analysis.steps  # type: ignore[attr-defined]
    assert steps["end_ns"].to_list()[-1] - steps["start_ns"].to_list()[-1] == ns(90)  # [100, 190)
    assert parts(run, 2) == expect(compute=50, exposed_comm=20, idle=20)


def test_hta_compat_drops_the_last_step_and_rounds_inward(tmp_path: Path) -> None:
    b = (TraceBuilder().step(1, 0, 100).step(2, 100, 200)
         .compute(10.4, 60.6).nccl(20.2, 70.8).nccl(120, 150))
    for kernel in [e for e in b.events if e["cat"] == "kernel"]:  # each launched 5 µs before it runs
        b.cpu("cudaLaunchKernel", kernel["ts"] - 5, kernel["ts"] - 4, cat="cuda_runtime",
              correlation=kernel["args"]["correlation"])
    run = analyze(tmp_path, b, hta_compat=True)
    # only step 1 [0,100); kernels become [11,60) and [21,70): compute alone 10, overlapped 39, exposed 10
    assert run.analysis.steps["step"].to_list() == [1]  # type: ignore[attr-defined]
    assert parts(run) == expect(compute=10, overlapped_comm=39, exposed_comm=10, idle=41)
    # and with the default rules the last step and exact times are kept
    run2 = analyze(tmp_path / "default", b)
    assert parts(run2, 1)["overlapped_comm_ns"] == ns(60.6 - 20.2)


def test_gloo_cpu_trace(tmp_path: Path) -> None:
    """Main thread: compute ops, a c10d enqueue and a blocking send nested in compute; a Gloo worker
    thread runs the all-reduce."""
    b = TraceBuilder(backend="gloo", world_size=2).thread_name(2000, "pt_gloo_runloop")
    b.step(1, 0, 100)
    b.cpu("aten::mm", 5, 30).cpu("c10d::allreduce_", 30, 32)
    b.cpu("aten::linear", 32, 60).cpu("c10d::send", 40, 50).gloo("send", 45, 50, tid=1000, nelems=10)
    b.cpu("aten::select", 35, 36, tid=2000).gloo("all_reduce", 31, 80, tid=2000, nelems=1000)
    run = analyze(tmp_path, b)
    # compute: [5,30) + [32,60) minus the send [40,50) nested in it = 25 + 8 + 10 = 43
    # comm: [31,80) (the inline send [45,50) lies inside it) = 49; beside compute: [32,40)+[50,60) = 18
    assert parts(run) == expect(compute=43 - 18, overlapped_comm=18, exposed_comm=31, idle=26)
    coll = run.analysis.collectives.sort("start_ns")  # type: ignore[attr-defined]
    assert coll["op"].to_list() == ["all_reduce", "send"]
    assert coll["bytes"].to_list() == [4000, 40]  # from Input Dims x float
    assert coll["is_async"].to_list() == [True, False]  # worker thread vs inline on the training thread
    kinds = dict(run.intervals.select("name", pl.col("kind").cast(pl.String)).iter_rows())
    assert kinds["c10d::send"] == "wait" and kinds["aten::select"] == "annotation"


def test_run_without_any_collective(tmp_path: Path) -> None:
    b = TraceBuilder(world_size=1).step(1, 0, 100).compute(10, 50)
    run = analyze(tmp_path, b)
    assert parts(run) == expect(compute=40, idle=60)
    report = commprof.analyze_run(tmp_path / "run")
    assert report["ranks"][0]["overlap_pct"] is None  # no comm: nothing to hide
    assert report["collectives_summary"] == [] and report["process_groups"] == []
