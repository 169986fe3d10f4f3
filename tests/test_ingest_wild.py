"""Traces as people have them (issue 12, Traces): epoch timestamps, HTA's launch rule, CPU-only captures
of NCCL jobs, collectives libraries other than NCCL, all-to-all run as send/recv, collectives launched
before the profiler started, and warnings that name the file the user gave.

Every input is written here, modelled on what public traces and library sources show (described in the
comments, in our own words); nothing third-party is copied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import commprof
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.ingest.common.exact_time import to_ns
from commprof.ingest.kineto import extract
from commprof.synth import TraceBuilder

EPOCH_US = 1_700_000_000_000_000  # a 2023 wall-clock time in µs, as Kineto writes it


def open_analyzed(folder: Path, hta_compat: bool = False) -> tuple[commprof.run.Run, Any]:
    run = commprof.open_run(folder, cache_dir=folder.parent / f"cache-{folder.name}", jobs=1)
    return run, commprof.analyze(run, AnalysisSettings(hta_compat=hta_compat))


def launch(b: TraceBuilder, before_us: float = 5.0, at: dict[int, float] | None = None) -> TraceBuilder:
    """Give every kernel its cudaLaunchKernel on the main thread (``at``: launch time by correlation)."""
    for kernel in [e for e in b.events if e["cat"] == "kernel"]:
        corr = kernel["args"]["correlation"]
        ts = (at or {}).get(corr, kernel["ts"] - before_us)
        b.cpu("cudaLaunchKernel", ts, ts + 1, cat="cuda_runtime", correlation=corr)
    return b


def raw_trace(events: list[str], base_ns: str = "0", rank: int = 0) -> str:
    """A trace whose numbers are written exactly as given (json.dumps would go through a float)."""
    header = (f'{{"schemaVersion": 1, "baseTimeNanoseconds": {base_ns}, "distributedInfo": {{"backend": "nccl", '
              f'"rank": {rank}, "world_size": 2}}, "traceEvents": [')
    return header + ",\n".join(events) + "]}"


def kernel(name: str, ts: str, dur: str, stream: int = 7, corr: int = 1, cat: str = "kernel", **args: Any) -> str:
    extra = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in args.items())
    return (f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": 0, "tid": {stream}, "ts": {ts}, '
            f'"dur": {dur}, "args": {{"device": 0, "stream": {stream}, "correlation": {corr}{extra}}}}}')


def cpu_event(name: str, ts: str, dur: str, cat: str = "cpu_op", tid: int = 1, **args: Any) -> str:
    return (f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": 1, "tid": {tid}, "ts": {ts}, '
            f'"dur": {dur}, "args": {json.dumps(args)}}}')


# --- 1. exact timestamps ---------------------------------------------------------------------------------

def test_to_ns_is_exact_for_epoch_microseconds() -> None:
    ns, ok = to_ns([EPOCH_US + 1, f"{EPOCH_US}.123", f"{EPOCH_US}.9995", "-0.5", "1.5e3", None, "x"])
    assert ns[:5].tolist() == [(EPOCH_US + 1) * 1000, EPOCH_US * 1000 + 123, EPOCH_US * 1000 + 1000, -500, 1_500_000]
    assert ok.tolist() == [True] * 5 + [False, False]


_TIMES = st.one_of(
    st.integers(-(10**15) * 9, 10**15 * 9),
    st.builds(lambda w, f, neg: f"{'-' if neg else ''}{w}.{f}", st.integers(0, 10**15 * 9),
              st.text("0123456789", min_size=0, max_size=7), st.booleans()),
    st.sampled_from(["1.5e3", "-2E-3", " 12.5", "abc", "", "-", ".5", "12.", "1_0", "nan", "inf", "1e400",
                     "9223372036854775.807", "-9223372036854775.808", "2305843009213693.951",
                     "2305843009213693.952", "-2305843009213693.951", "0.000", "12.3456", "１２.345"]),
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_TIMES, min_size=1, max_size=40))
def test_small_and_large_time_columns_convert_alike(values: list[Any]) -> None:
    # short columns go through a Python loop, long ones through polars: the same ns and validity
    import commprof.ingest.common.exact_time as exact

    small_ns, small_ok = exact.to_ns(values)
    large_ns, large_ok = exact.to_ns(values * (exact.SMALL // len(values) + 1))
    n = len(values)
    assert small_ok.tolist() == large_ok[:n].tolist()
    assert small_ns[small_ok].tolist() == large_ns[:n][large_ok[:n]].tolist()


def test_epoch_timestamps_and_base_time_are_read_to_the_ns(tmp_path: Path) -> None:
    # newer Kineto writes ts with three decimals (ns); an epoch-µs value with a fraction does not fit a
    # float64 (a quarter µs apart), and x1000 in float loses up to 128 ns more
    base = "1700000000123456789"
    trace = raw_trace([
        cpu_event("ProfilerStep#1", f"{EPOCH_US}.001", "100.000", cat="user_annotation"),
        kernel("void gemm_kernel<float>(float*)", f"{EPOCH_US + 10}.123", "20.877", corr=1),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", f"{EPOCH_US + 20}.999", "0.001", stream=20, corr=2),
    ], base_ns=base)
    path = tmp_path / "rank-0.json"
    path.write_text(trace)
    rt = extract(path)
    start = rt.intervals.sort("start_ns")["start_ns"].to_list()
    end = rt.intervals.sort("start_ns")["end_ns"].to_list()
    b = int(base)
    assert start == [b + (EPOCH_US + 10) * 1000 + 123, b + (EPOCH_US + 20) * 1000 + 999]
    assert end == [b + (EPOCH_US + 31) * 1000, b + (EPOCH_US + 21) * 1000]
    assert rt.step_marks["start_ns"].to_list() == [b + EPOCH_US * 1000 + 1]


def test_hta_compat_on_whole_microsecond_epoch_traces_loses_nothing(tmp_path: Path) -> None:
    # integer epoch µs (HTA's own test traces): HTA does not round them, and neither may we lose a µs
    b = TraceBuilder(base_ns=0, launch_lead_us=5).step(1, EPOCH_US, EPOCH_US + 100)
    b.step(2, EPOCH_US + 100, EPOCH_US + 200)
    b.compute(EPOCH_US + 10, EPOCH_US + 41).nccl(EPOCH_US + 20, EPOCH_US + 61)
    b.write(tmp_path / "run" / "rank-0.json")
    run, analysis = open_analyzed(tmp_path / "run", hta_compat=True)
    assert run.intervals.filter(pl.col("launch_ns").is_null()).height == 0  # the builder wrote the launches
    steps = analysis.steps
    assert steps["overlapped_comm_ns"].sum() == 21_000 and steps["exposed_comm_ns"].sum() == 20_000


# --- 2. --hta-compat keeps kernels by their launch, as HTA does ----------------------------------------

def test_hta_compat_cuts_the_last_step_by_launch_time(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 100).step(2, 100, 200)
    b.compute(10, 90)           # corr 2: launched at 5
    b.nccl(95, 130)             # corr 3: launched at 90, in step 1, runs into step 2: HTA keeps it
    b.compute(150, 160)         # corr 4: launched at 120, in the last step: dropped
    b.nccl(40, 50, stream=21)   # corr 5: no launch in the trace (profiler started later): dropped
    launch(b, at={2: 5, 3: 90, 4: 120})
    b.events = [e for e in b.events if not (e["cat"] == "cuda_runtime" and e["args"]["correlation"] == 5)]
    b.write(tmp_path / "run" / "rank-0.json")
    run, compat = open_analyzed(tmp_path / "run", hta_compat=True)
    assert run.intervals.filter(pl.col("launch_ns").is_null()).height == 1
    # kept: compute [10,90), comm [95,130) -> comm 35 µs, none of it beside compute
    assert compat.steps["exposed_comm_ns"].sum() == 35_000
    assert compat.steps["overlapped_comm_ns"].sum() == 0
    assert any("launch is not in the trace" in w for w in compat.warnings)
    # the default rule keeps everything by when it runs: comm [40,50) beside compute, [95,130) alone
    _, default = open_analyzed(tmp_path / "run", hta_compat=False)
    assert default.steps["overlapped_comm_ns"].sum() == 10_000
    assert default.steps["exposed_comm_ns"].sum() == 35_000


# --- 4. CPU-only capture of an NCCL job ------------------------------------------------------------------

def test_cpu_only_nccl_ops_are_enqueue_times_not_communication(tmp_path: Path) -> None:
    # profiled with ProfilerActivity.CPU only: the nccl:* ops time the enqueue, the GPU side is missing
    b = TraceBuilder().step(1, 0, 100)
    b.cpu("aten::mm", 10, 40).cpu("nccl:all_reduce", 40, 45).cpu("c10d::allreduce_", 39, 46)
    b.cpu("aten::add", 50, 80)
    b.write(tmp_path / "run" / "rank-0.json")
    run, analysis = open_analyzed(tmp_path / "run")
    assert run.collectives.height == 0
    assert analysis.steps["exposed_comm_ns"].sum() == 0 and analysis.steps["overlapped_comm_ns"].sum() == 0
    assert any("enqueue" in w and "not counted as communication" in w for w in run.warnings)


# --- 5. communication outside NCCL/RCCL/Gloo -------------------------------------------------------------

LIBRARY_KERNELS = [
    # vLLM / SGLang custom all-reduce (templated on dtype and rank count)
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, __nv_bfloat16*, int, int)", "all_reduce"),
    ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "float*, int, int)", "all_reduce"),
    # torch symmetric memory: one/two-shot and multicast (multimem) all-reduce, in an anonymous namespace
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<float, 16, 8>(float**, unsigned int**, float*, "
     "unsigned long, unsigned long, unsigned long)", "all_reduce"),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 16, 8>(__nv_bfloat16*, "
     "unsigned long, unsigned int**, unsigned long, unsigned long)", "all_reduce"),
    ("two_shot_all_reduce_kernel", "all_reduce"),  # the Triton variant keeps its Python name
    # TensorRT-LLM's custom all-reduce kernels
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::"
     "AllReduceParams)", "all_reduce"),
    # DeepEP's expert-parallel dispatch/combine
    ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*)", "all_to_all"),
    # Ascend HCCL device task
    ("hcom_allReduce__441_0_1", "all_reduce"),
]


def test_kernels_of_other_collectives_libraries_are_communication(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 1000)
    for i, (name, _) in enumerate(LIBRARY_KERNELS):
        b.kernel(name, 10 + 20 * i, 20 + 20 * i, stream=30)
    b.kernel("void my_fused_allgather_matmul_kernel<float>(float*)", 300, 310)  # looks like comm, no rule
    b.kernel("void my_fused_allgather_matmul_kernel<float>(float*)", 320, 330)
    b.compute(400, 410)
    launch(b).write(tmp_path / "run" / "rank-0.json")
    run = commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1)
    coll = run.collectives.sort("start_ns")
    assert coll["op"].to_list() == [op for _, op in LIBRARY_KERNELS]
    assert coll["bytes"].null_count() == coll.height  # no size args: unknown, not 0
    kinds = dict(run.intervals.group_by("kind").len().iter_rows())
    assert kinds["comm"] == len(LIBRARY_KERNELS) and kinds["compute"] == 3
    warned = [w for w in commprof.analyze(run).warnings if "look like communication" in w]
    assert warned and "1 kernel name(s)" in warned[0] and "my_fused_allgather" in warned[0]
    assert "(1 rank, 2 calls)" in warned[0]


def test_cpu_collectives_of_other_backends(tmp_path: Path) -> None:
    # oneCCL's CPU backend runs the transfer in "cpu_work" ops; MPI ops run on the calling thread
    b = TraceBuilder(backend="ccl").step(1, 0, 100).cpu("aten::mm", 0, 10)
    b.cpu("oneccl_bindings_for_pytorch::cpu_work::allreduce", 20, 30, tid=2)
    b.cpu("mpi:all_gather", 40, 50)
    b.write(tmp_path / "run" / "rank-0.json")
    run = commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1)
    assert sorted(run.collectives["op"].to_list()) == ["all_gather", "all_reduce"]


# --- 6. all-to-all run as grouped send/recv --------------------------------------------------------------

def test_all_to_all_is_named_by_the_cpu_call_when_the_kernel_says_sendrecv(tmp_path: Path) -> None:
    # NCCL runs all_to_all as grouped send/recv: the kernel is SendRecv and, in older traces,
    # record_param_comms carries no "Collective name"; the enclosing c10d call says what it was
    b = TraceBuilder().step(1, 0, 200)
    b.cpu("c10d::alltoall_base_", 10, 30).cpu("nccl:all_to_all", 12, 28)
    b.nccl(40, 60, op="SendRecv", dev=True)  # corr 3
    b.cpu("c10d::send", 100, 110)
    b.nccl(120, 130, op="SendRecv", dev=True)  # corr 6: a real p2p send stays send/recv
    launch(b, at={3: 20, 6: 105}).write(tmp_path / "run" / "rank-0.json")
    run = commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1)
    assert run.collectives.sort("start_ns")["op"].to_list() == ["all_to_all", "send_recv"]


# --- 7. collectives launched before the profiler window ---------------------------------------------------

def test_collectives_launched_before_the_window_have_unknown_size(tmp_path: Path) -> None:
    args = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1000, "Out msg nelems": 1000,
            "Group size": 2, "Process Group Name": "0"}
    b = TraceBuilder().step(1, 0, 100)
    b.nccl(1, 8)                      # corr 1: launched before the profiler started: no launch, no args
    b.nccl(20, 30, **args)            # corr 2: launched inside
    launch(b, at={2: 15})
    b.events = [e for e in b.events if not (e["cat"] == "cuda_runtime" and e["args"]["correlation"] == 1)]
    b.write(tmp_path / "run" / "rank-0.json")
    run = commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1)
    coll = run.collectives.sort("start_ns")
    assert coll["bytes"].to_list() == [None, 4000]
    assert coll["pg"].to_list() == [None, "0"]
    warned = [w for w in run.warnings if "launched before the profiler started" in w]
    assert warned and warned[0].split(": ")[1].startswith("1 communication kernels")


# --- 8. warnings name the file as given and say what was skipped -----------------------------------------

def test_warnings_name_the_given_file_and_the_skipped_event(tmp_path: Path) -> None:
    trace = raw_trace([
        cpu_event("ProfilerStep#1", "0", "100", cat="user_annotation"),
        kernel("void gemm_kernel<float>(float*)", "10", "20"),
        '{"ph": "X", "cat": "kernel", "name": "void lost_kernel()", "pid": 0, "tid": 7, "ts": 30, '
        '"args": {"device": 0, "stream": 7}}',
    ])
    path = tmp_path / "split" / "rank-1.json"
    path.parent.mkdir()
    path.write_text(trace)
    rt = extract(path, label="/data/export.json#rank-1")
    warned = [w for w in rt.warnings if "skipped" in w]
    assert warned and warned[0].startswith("/data/export.json#rank-1: skipped 1 device events")
    assert "'void lost_kernel()'" in warned[0] and "without dur" in warned[0]
    assert str(tmp_path) not in " ".join(rt.warnings)


# --- ranks are written at ingest --------------------------------------------------------------------------

def test_tables_carry_the_rank_the_trace_gives(tmp_path: Path) -> None:
    TraceBuilder(rank=5, world_size=8).step(1, 0, 10).compute(1, 2).write(tmp_path / "a.json")
    TraceBuilder(rank=None).step(1, 0, 10).compute(1, 2).write(tmp_path / "trace_rank3.json")
    TraceBuilder(rank=None).step(1, 0, 10).compute(1, 2).write(tmp_path / "worker.json")
    by_file = {p: extract(tmp_path / p) for p in ("a.json", "trace_rank3.json", "worker.json")}
    assert (by_file["a.json"].rank, by_file["a.json"].rank_source) == (5, "distributedInfo")
    assert set(by_file["a.json"].intervals["rank"]) == {5} and set(by_file["a.json"].step_marks["rank"]) == {5}
    assert (by_file["trace_rank3.json"].rank, by_file["trace_rank3.json"].rank_source) == (3, "file name")
    assert set(by_file["trace_rank3.json"].intervals["rank"]) == {3}
    assert by_file["worker.json"].rank is None and by_file["worker.json"].rank_source is None


# --- property: an epoch offset changes no figure ----------------------------------------------------------

def _analysis_frames(analysis: Any, offset_ns: int) -> dict[str, pl.DataFrame]:
    """Every table of the analysis, absolute times taken back by ``offset_ns``."""
    out = {}
    for name in vars(analysis):
        frame = getattr(analysis, name)
        if isinstance(frame, pl.DataFrame):
            shift = [c for c in ("start_ns", "end_ns", "launch_ns") if c in frame.columns]
            out[name] = frame.with_columns(pl.col(c) - offset_ns for c in shift)
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kernels=st.lists(
        st.tuples(st.integers(0, 400_000), st.integers(1, 60_000), st.booleans(), st.integers(0, 2)),
        min_size=1, max_size=12),
    epoch_us=st.integers(10**15, 2 * 10**15),
)
def test_an_epoch_offset_changes_no_figure(tmp_path: Path, kernels: list[tuple[int, int, bool, int]],
                                           epoch_us: int) -> None:
    # times in ns within the trace (so ts carry three decimals); steps at 0, 150 and 300 µs
    def write(folder: Path, offset_us: int) -> None:
        def us(t_ns: int) -> str:
            return f"{offset_us + t_ns // 1000}.{t_ns % 1000:03d}"
        events = [cpu_event(f"ProfilerStep#{s}", us(150_000 * s), "150.000", cat="user_annotation")
                  for s in range(3)]
        for corr, (start, dur, comm, stream) in enumerate(kernels, start=1):
            name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if comm else "void gemm_kernel<float>(float*)"
            events.append(kernel(name, us(start), f"{dur // 1000}.{dur % 1000:03d}", stream=7 + stream, corr=corr))
            events.append(cpu_event("cudaLaunchKernel", us(max(start - 3_000, 0)), "1.000", cat="cuda_runtime",
                                    correlation=corr))
        folder.mkdir(parents=True)
        (folder / "rank-0.json").write_text(raw_trace(events))

    case = tmp_path / f"case-{epoch_us}-{len(kernels)}-{abs(hash(tuple(kernels)))}"
    write(case / "zero", 0)
    write(case / "epoch", epoch_us)
    for compat in (False, True):
        _, near = open_analyzed(case / "zero", hta_compat=compat)
        _, far = open_analyzed(case / "epoch", hta_compat=compat)
        a, b = _analysis_frames(near, 0), _analysis_frames(far, epoch_us * 1000)
        assert a.keys() == b.keys()
        for name in a:
            assert_frame_equal(a[name], b[name], check_exact=True), (name, compat)
