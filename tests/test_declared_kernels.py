"""A user teaches commprof a kernel family it does not know (issue 37, item 4): ``--comm-kernel REGEX=OP[:DIM[:TIER]]``
and ``[[comm_kernel]]`` in commprof.toml; and before they do, the report lists the largest kernels that look like
communication but are not counted, by time, saying which run on a side stream.

The run is synthetic (an in-house expert-parallel library's dispatch/combine on a side stream beside a GEMM, and
an in-house ring all-reduce on the main stream; times chosen, so the answers are known by construction)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.ingest.common import comm_kernels, names
from commprof.synth import TraceBuilder

DISPATCH = "void myco::fabric::dispatch_tokens<__nv_bfloat16, 8>(int4*, int const*, int)"
COMBINE = "void myco::fabric::combine_tokens<__nv_bfloat16, 8>(int4*, float const*, int)"
RING = "void fastcomm::ring_allreduce_kernel<float>(float*, int)"
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_128x128_32x4_nn_align8>(Params)"
FABRIC = r"myco::fabric::\w+_tokens=all_to_all:ep"


def _run(folder: Path, ranks: int = 2, steps: int = 2) -> Path:
    for rank in range(ranks):
        b = TraceBuilder(rank=rank, world_size=ranks)
        for step in range(steps):
            t = step * 2000
            b.step(step + 1, t, t + 2000)
            b.kernel(GEMM, t, t + 1500, stream=7)
            b.kernel(DISPATCH, t + 100, t + 450, stream=21)  # 350 us beside the GEMM
            b.kernel(COMBINE, t + 1400, t + 1700, stream=21)  # 100 of its 300 us beside it
            b.kernel(RING, t + 1800, t + 1850, stream=7)  # 50 us on the main stream, nothing beside
        for kernel in [e for e in b.events if e["cat"] == "kernel"]:
            b.cpu("cudaLaunchKernel", kernel["ts"] - 5, kernel["ts"] - 4, cat="cuda_runtime",
                  correlation=kernel["args"]["correlation"])
        b.write(folder / f"rank-{rank}.json")
    return folder


def test_undeclared_look_alikes_are_listed_largest_first(tmp_path: Path) -> None:
    run = commprof.open_run(_run(tmp_path / "run"), cache_dir=tmp_path / "cache", jobs=1)
    assert run.collectives.height == 0  # nothing known: all compute
    a = commprof.analyze(run)
    listed = a.uncounted.to_dicts()
    assert [r["name"] for r in listed] == [DISPATCH, COMBINE, RING]  # 700, 600 and 100 us per rank
    assert [r["ranks"] for r in listed] == [2, 2, 2] and [r["calls"] for r in listed] == [4, 4, 4]
    assert listed[0]["ns_per_rank"] == 700_000 and listed[2]["ns_per_rank"] == 100_000
    assert listed[0]["side_stream_share"] == 1.0 and listed[2]["side_stream_share"] == 0.0
    said = [w for w in a.warnings if "look like communication" in w]
    assert len(said) == 1  # one line for the run, not one per rank
    assert "0.70 ms per rank on a side stream (2 ranks, 4 calls)" in said[0]
    assert "0.10 ms per rank on the main stream" in said[0] and "--comm-kernel" in said[0]


def test_a_declared_family_is_communication_in_its_dimension(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run")
    plain = commprof.open_run(run_dir, cache_dir=tmp_path / "cache", jobs=1)
    assert plain.collectives.height == 0
    declared = (comm_kernels.parse_declared(FABRIC),)
    # the same cache folder: tables made without the declaration are not reused
    run = commprof.open_run(run_dir, cache_dir=tmp_path / "cache", jobs=1, declared=declared)
    assert run.collectives["op"].unique().to_list() == ["all_to_all"]
    assert run.collectives.height == 8  # 2 ranks x 2 steps x dispatch + combine
    a = commprof.analyze(run, AnalysisSettings(network="ib"))
    group = a.process_groups.filter(pl.col("pg").str.starts_with("declared ")).to_dicts()
    assert len(group) == 1 and group[0]["pg"] == r"declared myco::fabric::\w+_tokens"
    assert group[0]["dimension"] == "ep" and group[0]["dimension_source"] == "--comm-kernel"
    assert group[0]["tier"] == "unknown"  # the declaration names no tier, the run no nodes
    step = a.steps.filter(pl.col("rank") == 0).sort("step").row(0, named=True)
    assert step["overlapped_comm_ns"] == (350 + 100) * 1000 and step["exposed_comm_ns"] == 200 * 1000
    assert [r["name"] for r in a.uncounted.to_dicts()] == [RING]  # what is still not counted
    again = commprof.open_run(run_dir, cache_dir=tmp_path / "cache", jobs=1)
    assert again.collectives.height == 0  # and back: the declaration is gone with the flag


def test_declared_tier_and_op_over_nccl_names() -> None:
    rule = comm_kernels.parse_declared(r"fastcomm::ring_allreduce=all_reduce:tp:nvlink")
    assert not names.is_comm_kernel(RING)
    with comm_kernels.declaring((rule,)):
        assert names.is_comm_kernel(RING) and names.kernel_op(RING) == "all_reduce"
        kernel = comm_kernels.describe(RING)
        assert kernel is not None and (kernel.dimension, kernel.tier) == ("tp", "nvlink")
        # the catalogue still answers for what the user did not declare
        assert names.kernel_op("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "all_gather"
    assert not names.is_comm_kernel(RING)  # the caches are keyed on the declarations


@pytest.mark.parametrize(("spec", "said"), [
    ("myco::fabric", "give REGEX=OP[:DIM[:TIER]]"),
    (".*=all_reduce", "matches every kernel name"),
    ("(unclosed=all_reduce", "is not a regular expression"),
    ("x=allreduce_fast", "op 'allreduce_fast' is not one of"),
    ("x=all_reduce:zz", "dimension 'zz' is not one of"),
    ("x=all_reduce:tp:mars", "tier 'mars' is not one of"),
    ("x=all_reduce:tp:nvlink:extra", "after '=' give OP[:DIM[:TIER]]"),
])
def test_a_wrong_declaration_is_one_line(cli: Any, tmp_path: Path, spec: str, said: str) -> None:
    result = cli("analyze", str(_run(tmp_path / "run", ranks=1, steps=1)), "--comm-kernel", spec)
    assert result.exit_code == 2
    assert said in result.stderr and "Traceback" not in result.stderr


def test_cli_flag_and_settings_file(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _run(tmp_path / "run")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    undeclared = json.loads(cli("analyze", str(run_dir), "--format", "json").stdout)
    result = cli("analyze", str(run_dir), "--comm-kernel", FABRIC, "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    from tests.test_report_formats import _validator

    for doc in (undeclared, report):  # the new fields as docs/schema/analyze.schema.json says
        _validator("analyze.schema.json").validate(doc)
    assert [r["name"] for r in undeclared["uncounted_comm_kernels"]] == [DISPATCH, COMBINE, RING]
    assert report["run"]["declared_comm_kernels"] == [{"spec": FABRIC, "name": None}]
    pgs = {g["pg"]: g for g in report["process_groups"]}
    assert pgs[r"declared myco::fabric::\w+_tokens"]["dimension"] == "ep"
    assert [r["name"] for r in report["uncounted_comm_kernels"]] == [RING]

    (work / "commprof.toml").write_text(
        'max_exposed_comm_pct = 90\n\n[[comm_kernel]]\npattern = \'myco::fabric::\\w+_tokens\'\nop = "all_to_all"\n'
        'dimension = "ep"\ntier = "nvlink"\nname = "fabric"\n\n'
        '[[comm_kernel]]\npattern = "fastcomm::ring_allreduce"\nop = "all_reduce"\ndimension = "tp"\n')
    result = cli("analyze", str(run_dir), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    pgs = {g["pg"]: g for g in report["process_groups"]}
    assert pgs["declared fabric"]["tier"] == "nvlink" and pgs["declared fabric"]["tier_source"] == "--comm-kernel"
    assert pgs["declared fastcomm::ring_allreduce"]["dimension"] == "tp"
    assert report["uncounted_comm_kernels"] == []
    assert not [w for w in report["warnings"] if "look like communication" in w]
    # check reads the same file: its rules and the families alike. The declared ep group's 0.2 ms exposed per
    # step fails a 0.1 ms limit on ep; with no declaration there is no ep group and the rule passes
    rule = ("--rule", "dimension.ep.max_exposed_ms_per_step=0.1")
    assert cli("check", str(run_dir), *rule).exit_code == 1
    (work / "commprof.toml").rename(work / "rules.toml")
    assert cli("check", str(run_dir), *rule).exit_code == 0
    assert cli("check", str(run_dir), *rule, "--config", str(work / "rules.toml")).exit_code == 1
    (work / "rules.toml").rename(work / "commprof.toml")

    (work / "commprof.toml").write_text('[[comm_kernel]]\npattern = "x"\nop = "all_reduce"\n\n'
                                        '[[comm_kernel]]\npattern = "y"\nop = "shuffle"\n')
    result = cli("analyze", str(run_dir))
    assert result.exit_code == 2
    assert "commprof.toml (line 5)" in result.stderr and "[[comm_kernel]] #2: op 'shuffle'" in result.stderr
