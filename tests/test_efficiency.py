"""Peaks per tier and efficiency = busbw / peak (analyzers/efficiency.py), and the dimension × tier table."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from classify_helpers import GroupSpec, RankSpec, write_run
from click.testing import Result

import commprof
from commprof.analyzers.efficiency import gpu_peaks, parse_peaks, peak_gbps
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.errors import UsageError
from commprof.report import analysis_json, analysis_text
from commprof.run import open_run


def test_parse_peaks() -> None:
    assert parse_peaks("nvlink=450, ib=50") == {"nvlink": 450.0, "ib": 50.0}
    assert parse_peaks("roce=12.5GB/s") == {"roce": 12.5}
    assert parse_peaks(None) == {} and parse_peaks("") == {}


@pytest.mark.parametrize(("text", "message"), [
    ("nvl=4", "unknown tier 'nvl'"), ("ib", "not tier=GB/s"), ("ib=fast", "number of GB/s"), ("ib=0", "more than 0"),
])
def test_parse_peaks_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_peaks(text)


@pytest.mark.parametrize(("gpu", "nvlink", "pcie"), [
    ("NVIDIA A100-SXM4-80GB", 300.0, 32.0), ("NVIDIA H100 80GB HBM3", 450.0, 64.0), ("NVIDIA H200", 450.0, 64.0),
    ("NVIDIA B200", 900.0, 64.0), ("NVIDIA L40S", None, 32.0), ("Synthetic GPU", None, None), (None, None, None),
])
def test_gpu_peaks(gpu: str | None, nvlink: float | None, pcie: float | None) -> None:
    assert gpu_peaks(gpu) == (nvlink, pcie)


def test_peak_per_tier() -> None:
    h100 = "NVIDIA H100 80GB HBM3"
    assert peak_gbps("nvlink", h100) == 450.0
    assert peak_gbps("pcie", h100) == 64.0
    assert peak_gbps("ib", h100) == 50.0 and peak_gbps("roce", h100) == 25.0 and peak_gbps("ethernet", h100) == 12.5
    assert peak_gbps("roce", h100, link_gbps=200_000 / 8000) == 25.0
    assert peak_gbps("ib", h100, link_gbps=400_000 / 8000) == 50.0
    assert peak_gbps("ethernet", h100, link_gbps=100_000 / 8000) == 12.5
    for tier in ("loopback", "shm", "unknown", None):
        assert peak_gbps(tier, h100) is None
    assert peak_gbps("nvlink", h100, overrides={"nvlink": 400.0}) == 400.0
    assert peak_gbps("ib", h100, link_gbps=25.0, overrides={"ib": 40.0}) == 40.0  # the user wins


def _run(tmp_path: Path) -> Path:
    """2 nodes × 2 GPUs (H100), one step of 2000 µs. tp groups [0,1], [2,3] (nvlink, assumed): one
    all-reduce of 4 MB in 100 µs -> algbw 40 GB/s, busbw 40 × 2(2-1)/2 = 40. dp group [0,2], [1,3]
    (ib from --network): 8 MB all-reduce in 400 µs -> busbw 20. Every call is fully exposed."""
    ranks = [RankSpec(0, "n1", 1, 0), RankSpec(1, "n1", 2, 1), RankSpec(2, "n2", 3, 0), RankSpec(3, "n2", 4, 1)]
    groups = [GroupSpec("1", "mesh_tp", (0, 1)), GroupSpec("2", "mesh_tp", (2, 3)),
              GroupSpec("3", "mesh_dp", (0, 2), nbytes=8_000_000, dur_us=400.0),
              GroupSpec("4", "mesh_dp", (1, 3), nbytes=8_000_000, dur_us=400.0)]
    return write_run(tmp_path / "eff", ranks, groups)


def test_efficiency_of_collectives_groups_and_dimension_tier(tmp_path: Path) -> None:
    run = open_run(_run(tmp_path))
    analysis = commprof.analyze(run, AnalysisSettings(network="ib", peaks={"nvlink": 80.0}))
    coll = analysis.collectives
    assert sorted(set(zip(coll["pg"], coll["busbw_gbps"], coll["efficiency"], strict=True))) == [
        ("1", 40.0, 0.5), ("2", 40.0, 0.5), ("3", 20.0, 0.4), ("4", 20.0, 0.4)]
    summary = {r["pg"]: r["efficiency"] for r in analysis.collectives_summary.iter_rows(named=True)}
    assert summary == {"1": 0.5, "2": 0.5, "3": 0.4, "4": 0.4}
    table = {(r["dimension"], r["tier"]): r for r in analysis.dimension_tier.iter_rows(named=True)}
    assert set(table) == {("tp", "nvlink"), ("dp", "ib")}
    dp, tp = table[("dp", "ib")], table[("tp", "nvlink")]
    assert (dp["groups"], dp["ops_per_step"], dp["bytes_per_step"]) == (2, 1.0, 8_000_000)
    assert (dp["comm_ns_per_step"], dp["exposed_ns_per_step"]) == (400_000, 400_000)
    assert dp["exposed_pct_of_step"] == pytest.approx(20.0)  # 400 of 2000 µs
    assert (dp["busbw_gbps"], dp["efficiency"]) == (20.0, 0.4)
    assert tp["exposed_pct_of_step"] == pytest.approx(5.0)
    assert (tp["busbw_gbps"], tp["efficiency"]) == (40.0, 0.5)

    report = analysis_json.build(analysis)
    rows = {(d["dimension"], d["tier"]): d for d in report["dimension_tier"]}
    assert rows[("dp", "ib")]["efficiency"] == 0.4 and rows[("dp", "ib")]["exposed_ns_per_step"] == 400_000
    # the rows' shares add up to the run's exposed share of the step
    assert sum(d["exposed_pct_of_step"] for d in report["dimension_tier"]) == pytest.approx(
        report["totals"]["exposed_comm_pct_of_step"])
    assert {g["pg"]: (g["peak_gbps"], g["efficiency"]) for g in report["process_groups"]} == {
        "1": (80.0, 0.5), "2": (80.0, 0.5), "3": (50.0, 0.4), "4": (50.0, 0.4)}
    assert all("efficiency" in c for c in report["collectives_summary"] + report["top_collectives"])
    markdown = analysis_text.render_markdown(report)
    assert "## Communication by dimension and tier" in markdown
    assert "| dp | ib | 2 | 1.0 | 8.0 MB | 0.40 | 0.40 | 0.00 | 0.40 | 20.0% | 20.00 | 40% |" in markdown


def test_no_peak_no_efficiency(tmp_path: Path) -> None:
    """Without --network the dp groups' tier is unknown: no peak, no efficiency (never a made-up one)."""
    analysis = commprof.analyze(open_run(_run(tmp_path)))
    eff = {r["pg"]: r["efficiency"] for r in analysis.collectives_summary.iter_rows(named=True)}
    assert eff == {"1": 40.0 / 450, "2": 40.0 / 450, "3": None, "4": None}


def test_cli_options(tmp_path: Path, cli: Callable[..., Result]) -> None:
    run_dir = _run(tmp_path)
    result = cli("analyze", str(run_dir), "--format", "json", "--network", "ib", "--peak", "nvlink=80",
                 "--layout", "tp=2,dp=2")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["run"]["layout"] == {"sizes": {"tp": 2, "dp": 2}, "order": ["tp", "cp", "ep", "dp", "pp"]}
    assert {(g["pg"], g["dimension"], g["dimension_source"]) for g in report["process_groups"]} == {
        ("1", "tp", "layout"), ("2", "tp", "layout"), ("3", "dp", "layout"), ("4", "dp", "layout")}
    bad = cli("analyze", str(run_dir), "--layout", "tp=4,dp=2")
    assert bad.exit_code == 2
    assert "tp=4×dp=2 = 8 ranks, but the run has world size 4" in bad.output
    text = cli("analyze", str(run_dir), "--network", "ib")
    assert "Communication by dimension and tier" in text.output
