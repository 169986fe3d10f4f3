"""Calls whose size the trace does not give (library kernels, NCCL traces without record_param_comms) are
"bytes unknown" in every table, never a made-up 0 B or bandwidth (issue 37, item 2). Synthetic runs, the
sizes chosen: the answers are known by construction."""

from __future__ import annotations

from pathlib import Path

import commprof
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.report import analysis_json, analysis_text
from commprof.synth import TraceBuilder


def _launch(b: TraceBuilder) -> TraceBuilder:
    for kernel in [e for e in b.events if e["cat"] == "kernel"]:
        b.cpu("cudaLaunchKernel", kernel["ts"] - 5, kernel["ts"] - 4, cat="cuda_runtime",
              correlation=kernel["args"]["correlation"])
    return b


def _report(folder: Path, b: TraceBuilder, tmp_path: Path) -> dict:
    _launch(b).write(folder / "rank-0.json")
    run = commprof.open_run(folder, cache_dir=tmp_path / f"cache-{folder.name}", jobs=1)
    return analysis_json.build(commprof.analyze(run, AnalysisSettings(network="ib")))


def test_library_calls_without_sizes_say_bytes_unknown(tmp_path: Path) -> None:
    b = TraceBuilder().step(1, 0, 1000).step(2, 1000, 2000)
    for t in (0, 1000):
        b.kernel("void deep_ep::internode::dispatch<8, 768>(int4*, float*)", t + 100, t + 300, stream=16)
        b.kernel("void deep_ep::internode::combine<8, 768>(int4*, float*)", t + 500, t + 700, stream=16)
    report = _report(tmp_path / "deepep", b, tmp_path)
    group = next(g for g in report["process_groups"] if g["pg"] == "DeepEP: internode")
    assert group["calls"] == 4 and group["bytes_unknown_calls"] == 4 and group["busbw_gbps"] is None
    row = report["dimension_tier"][0]
    assert (row["dimension"], row["tier"], row["bytes_unknown_calls"]) == ("ep", "ib", 4)
    assert report["collectives_summary"][0]["bytes_unknown_calls"] == 4
    text = analysis_text.render_markdown(report)
    assert "| unknown |" in text and " 0 B " not in text
    assert analysis_text.pg_rows(report)[0][6] == "unknown"
    assert analysis_text.dimension_tier_rows(report)[0][4] == "unknown"
    assert analysis_text.top_rows(report)[0][2] == "unknown"


def test_some_sizes_known_say_so(tmp_path: Path) -> None:
    """Two all-reduces of one group in a step: one with its size (1 M floats), one whose arguments the trace lost."""
    b = TraceBuilder().step(1, 0, 1000)
    args = {"Process Group Name": "0", "Collective name": "allreduce", "dtype": "Float", "Group size": 2}
    b.nccl(100, 300, **args, **{"In msg nelems": 1_000_000, "Seq": 0})
    b.nccl(500, 600, **args)
    report = _report(tmp_path / "mixed", b, tmp_path)
    group = next(g for g in report["process_groups"] if g["pg"] == "0")
    assert (group["calls"], group["bytes_unknown_calls"], group["bytes_per_step"]) == (2, 1, 4_000_000)
    assert next(r for r in analysis_text.pg_rows(report) if r[0] == "0")[6] == "4.0 MB + ?"
    assert analysis_text.dimension_tier_rows(report)[0][4] == "4.0 MB + ?"
