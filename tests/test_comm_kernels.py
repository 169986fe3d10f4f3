"""Communication kernels beyond NCCL (issue 37): the catalogue (commprof/ingest/common/comm_kernels.py) judged
on a corpus of kernel names as traces spell them (tests/data/kernel_names.json: library kernels with the
library, op and path they must get, and compute kernels that only look like communication), and a DeepEP
step as a DeepSeek-V3 training profile shows it (synthetic: the kernels' names and streams as the public
profile has them, the times made up), whose dispatch and combine must be communication, hidden behind the
compute that runs beside them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.ingest.common import comm_kernels, names
from commprof.synth import TraceBuilder

CORPUS = json.loads((Path(__file__).parent / "data" / "kernel_names.json").read_text())
DOCS = Path(__file__).resolve().parents[1] / "docs" / "inputs.md"


@pytest.mark.parametrize("entry", CORPUS["comm"], ids=lambda e: re.sub(r"[<(].*", "", e["name"])[-60:])
def test_library_kernels_are_communication_with_their_op_and_path(entry: dict[str, str]) -> None:
    name = entry["name"]
    assert names.is_comm_kernel(name)
    assert names.kernel_op(name) == entry["op"]
    known = comm_kernels.describe(name)
    assert known is not None and (known.library, known.path) == (entry["library"], entry["path"])
    assert not names.looks_like_comm(name) or names.is_comm_kernel(name)  # never warned about: it is counted


@pytest.mark.parametrize("name", CORPUS["compute"], ids=lambda n: re.sub(r"[<(].*", "", n)[-60:])
def test_look_alikes_stay_compute(name: str) -> None:
    assert not names.is_comm_kernel(name)


def test_the_local_work_of_communication_libraries_is_not_warned_about() -> None:
    assert not names.looks_like_comm("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)")
    assert names.looks_like_comm("void my_lab::moe_dispatch_rdma_kernel<8>(void*)")  # unknown: say so
    # a verb in template arguments only is not the kernel's (seen in HTA's real trace negative_queue_length...)
    assert not names.looks_like_comm("void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*>, "
                                     "long*>(long*, long*, int)")


def test_every_family_recognises_its_own_example_and_the_docs_list_it() -> None:
    docs = DOCS.read_text()
    for fam in comm_kernels.FAMILIES:
        found = comm_kernels.describe(fam.example)
        assert found is not None and (found.library, found.path) == (fam.library, fam.path), fam.example
        assert f"`{comm_kernels.qualified(fam.example)}`" in docs, fam.example


@pytest.mark.parametrize(("name", "qualified"), [
    ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*)", "deep_ep::intranode::dispatch"),
    ("void userbuffers_fp16_sum_inplace_gpu_rr_rs<(int)8>(int, int)", "userbuffers_fp16_sum_inplace_gpu_rr_rs"),
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<float, 16, 8>(float**)",
     "(anonymous namespace)::one_shot_all_reduce_kernel"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, unsigned int, float, 4, 4>)",
     "at::native::reduce_kernel"),
    ("hcom_allReduce__441_0_1", "hcom_allReduce__441_0_1"),
])
def test_qualified_names_drop_templates_and_parameters(name: str, qualified: str) -> None:
    assert comm_kernels.qualified(name) == qualified


def test_a_deepep_step_is_communication_hidden_behind_compute(tmp_path: Path) -> None:
    """One rank's step as the DeepSeek-V3 training profile lays it out (times invented): the experts' GEMMs on
    the compute stream, DeepEP's notify, dispatch, cached notify and combine on a stream of their own,
    get_dispatch_layout (local counting) on that stream too."""
    ep = "dpsk::ep::internode::"
    b = TraceBuilder().step(1, 0, 1000)
    b.kernel("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)", 10, 30, stream=16)
    b.kernel(f"void {ep}notify_dispatch<false, 8>(int const*, int*, int)", 40, 60, stream=16)
    b.kernel(f"void {ep}dispatch<false, 8, true, 8>(int4*, float*, long*)", 100, 300, stream=16)
    b.kernel(f"void {ep}cached_notify<false>(int, int, int)", 400, 420, stream=16)
    b.kernel(f"void {ep}combine<false, 8, __nv_bfloat16, 8, 4, 16, 24>(int4*, float*)", 500, 700, stream=16)
    b.kernel("void dpsk::gemm::fp8_gemm_kernel<7168, 2048, 128>(__nv_bfloat16*, float*)", 0, 900, stream=7)
    for kernel in [e for e in b.events if e["cat"] == "kernel"]:
        b.cpu("cudaLaunchKernel", kernel["ts"] - 5, kernel["ts"] - 4, cat="cuda_runtime",
              correlation=kernel["args"]["correlation"])
    b.write(tmp_path / "run" / "rank-0.json")
    run = commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1)
    assert run.collectives["op"].to_list() == ["all_to_all"] * 4
    assert run.collectives["bytes"].null_count() == 4  # no sizes in the kernels' names: unknown, not 0
    a = commprof.analyze(run)
    step = a.steps.row(0, named=True)
    assert step["overlapped_comm_ns"] == (20 + 200 + 20 + 200) * 1000  # all of it beside the GEMM
    assert step["exposed_comm_ns"] == 0
    assert not [w for w in run.warnings if "look like communication" in w]
    # no process group in the trace: one group for the library and path its names state, ep, on the network
    groups = a.process_groups.filter(pl.col("pg") == "DeepEP: internode").to_dicts()
    assert len(groups) == 1 and groups[0]["dimension"] == "ep" and groups[0]["dimension_source"] == "kernel name"
    assert groups[0]["tier"] == "unknown"  # internode, and the run names no network
    b_ = commprof.analyze(run, AnalysisSettings(network="ib"))
    assert set(b_.collectives["pg"].to_list()) == {"DeepEP: internode"}
    row = b_.dimension_tier.filter((pl.col("dimension") == "ep") & (pl.col("tier") == "ib")).to_dicts()
    assert len(row) == 1 and row[0]["ops_per_step"] == 4
    assert row[0]["comm_ns_per_step"] == 440_000 and row[0]["exposed_ns_per_step"] == 0  # time and ops in one row
    assert b_.dimension_tier.height == 1
    from commprof.report import analysis_json
    from tests.test_report_formats import _validator

    _validator("analyze.schema.json").validate(json.loads(json.dumps(analysis_json.build(b_))))


def test_library_calls_are_matched_across_ranks_and_a_late_rank_is_seen(tmp_path: Path) -> None:
    """Library kernels carry no seq: within their library group they are matched by order on each rank (every EP
    rank launches the same dispatch/combine sequence), so skew and waits are measured as for NCCL calls. Rank 1
    starts each dispatch 50 us late (synthetic, known by construction): rank 0's dispatch waits 50 us for it."""
    ep = "deep_ep::internode::"
    for rank in range(2):
        b = TraceBuilder(rank=rank, world_size=2)
        for step in range(3):
            t, late = step * 1000, 50 * rank
            b.step(step + 1, t, t + 1000)
            b.kernel("void at::native::vectorized_elementwise_kernel<4, float>(int, float)", t, t + 100, stream=7)
            b.kernel(f"void {ep}dispatch<8, 768, 6144>(int4*, float*, int*)", t + 100 + late, t + 400, stream=16)
            b.kernel(f"void {ep}combine<__nv_bfloat16, 8>(int4*, float*)", t + 500, t + 700, stream=16)
        for kernel in [e for e in b.events if e["cat"] == "kernel"]:
            b.cpu("cudaLaunchKernel", kernel["ts"] - 5, kernel["ts"] - 4, cat="cuda_runtime",
                  correlation=kernel["args"]["correlation"])
        b.write(tmp_path / "run" / f"rank-{rank}.json")
    a = commprof.analyze(commprof.open_run(tmp_path / "run", cache_dir=tmp_path / "cache", jobs=1))
    assert a.match_by == "order" and a.unmatched_calls == 0
    calls = a.collectives.filter(pl.col("name").str.contains("dispatch")).sort("rank", "start_ns")
    assert calls["matched_ranks"].to_list() == [2] * 6
    assert calls.filter(pl.col("rank") == 0)["wait_ns"].to_list() == [50_000] * 3
    assert calls.filter(pl.col("rank") == 1)["wait_ns"].to_list() == [0] * 3
    assert calls["late_rank"].unique().to_list() == [1]
