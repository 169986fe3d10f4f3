"""Every number shown on two surfaces is the same number: the analysis makes it once and ``analyze``
(JSON), ``check``, ``diff``, the dashboard and the export only select and format it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

import commprof
from commprof.dashboard.cache import RunCache
from commprof.export import perfetto
from commprof.synth_run import make_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["sample", "synthetic"])
def run_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "sample":
        return ROOT / "sample_traces" / "tp2_pp2_dp2"
    return make_run(tmp_path_factory.mktemp("truth") / "s16", ranks=16, layout=(4, 2, 2), straggler_rank=5)


def _json(result: Result) -> dict[str, Any]:
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_every_surface_shows_the_analysis_numbers(cli: Callable[..., Result], run_path: Path,
                                                  tmp_path: Path) -> None:
    run = commprof.open_run(run_path)
    a = commprof.analyze(run)
    report = _json(cli("analyze", str(run_path), "--format", "json"))
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(report))

    # per-step values: analysis totals = analyze JSON = check's regression metric = diff = dashboard compare
    assert report["totals"] == pytest.approx(a.totals)
    check = _json(cli("check", str(run_path), "--baseline", str(saved), "--max-straggler-wait-ms", "1e9",
                      "--format", "json"))
    rules = {r["name"]: r for r in check["rules"]}
    assert rules["regression.step_time"]["measured"] == pytest.approx(a.totals["step_ns"] / 1e6)
    assert rules["regression.exposed_comm"]["measured"] == pytest.approx(a.totals["exposed_comm_ns"] / 1e6)
    diff = _json(cli("diff", str(saved), str(run_path), "--format", "json"))
    assert diff["totals"]["exposed_wait_ns"]["b"] == a.totals["exposed_wait_ns"]
    cache = RunCache({"r": run})
    compare = {metric: value for metric, _unit, value in cache.compare_values("r").iter_rows()}
    assert compare["step time"] == pytest.approx(a.totals["step_ns"])

    # exposed per dimension and tier: analysis = JSON = dashboard = diff = regression rules
    for key, frame, section in (("dimension", a.by_dimension, "dimensions"), ("tier", a.by_tier, "tiers")):
        truth = {r[key]: r["exposed_ns_per_step"] for r in frame.iter_rows(named=True)}
        assert {r[key]: r["exposed_ns_per_step"] for r in report[section]} == {
            k: round(v) for k, v in truth.items()}
        # the dashboard (overview's dimension x tier table and compare) shows the analysis' rows
        assert {k: compare[f"{key} {k} · exposed"] for k in truth} == pytest.approx(truth)
        assert {k: v["exposed_ns_per_step"]["b"] for k, v in diff[section].items()} == {
            k: round(v) for k, v in truth.items()}
    for dim, value in ((r["dimension"], r["exposed_ns_per_step"]) for r in report["dimensions"]):
        if dim != "unknown":
            assert rules[f"regression.exposed_comm.{dim}"]["measured"] == pytest.approx(value / 1e6)

    # group busbw and efficiency: analysis = JSON (the check tier rule reads the same rows)
    groups = {g["pg"]: g for g in report["process_groups"]}
    for g in a.group_summary.iter_rows(named=True):
        assert groups[g["pg"]]["busbw_gbps"] == pytest.approx(g["busbw_gbps"], rel=1e-6, abs=1e-6) \
            if g["busbw_gbps"] is not None else groups[g["pg"]]["busbw_gbps"] is None
    summary = {(c["pg"], c["op"]): c for c in report["collectives_summary"]}
    for c in a.collectives_summary.iter_rows(named=True):
        assert summary[(c["pg"], c["op"])]["efficiency"] == (
            None if c["efficiency"] is None else pytest.approx(c["efficiency"], rel=1e-6))

    # waits: analysis stragglers = JSON = check's straggler rule = dashboard skew page
    worst = int(a.stragglers["max_wait_ns"].max() or 0)
    assert max(s["max_wait_ns"] for s in report["skew"]["stragglers"]) == worst
    assert rules["max_straggler_wait_ms"]["measured"] == pytest.approx(worst / 1e6)
    waits, _ = cache.skew("r")
    assert int(waits["wait_ns"].max() or 0) <= worst  # the page shows calls of analyzed steps, as the analysis

    # the export's exposed track is the analysis' exposed spans
    trace = perfetto.build(a)
    exported = sum(e["dur"] for e in trace["traceEvents"] if e.get("cat") == "commprof.exposed")
    spans = a.exposed_spans
    assert exported * 1000 == pytest.approx(float((spans["end_ns"] - spans["start_ns"]).sum()), abs=len(spans))


def test_findings_are_the_analysis_findings_on_every_surface(cli: Callable[..., Result], run_path: Path,
                                                             tmp_path: Path) -> None:
    """analysis.finding_list = analyze JSON findings[] = check's embedded report and its violations = diff's new
    findings against an empty report = the text report's first lines."""
    a = commprof.analyze(commprof.open_run(run_path))
    report = _json(cli("analyze", str(run_path), "--format", "json"))
    truth = [(f.id, f.key, f.severity, f.saving_ns_per_step) for f in a.finding_list]
    assert [(f["id"], f["key"], f["severity"], f["saving_ns_per_step"]) for f in report["findings"]] == truth
    assert report["findings_computed"] is a.findings_computed is True
    check = _json(cli("check", str(run_path), "--fail-on-findings", "info", "--format", "json"))
    assert [f["key"] for f in check["report"]["findings"]] == [k for _, k, _, _ in truth]
    rule = next(r for r in check["rules"] if r["name"] == "fail_on_findings")
    assert [v["where"]["key"] for v in rule["violations"]] == [k for _, k, _, _ in truth]
    empty = dict(report, findings=[])
    saved = tmp_path / "none.json"
    saved.write_text(json.dumps(empty))
    diff = _json(cli("diff", str(saved), str(run_path), "--format", "json"))
    assert [f["key"] for f in diff["findings"]["new"]] == [k for _, k, _, _ in truth]
    text = cli("analyze", str(run_path)).stdout.splitlines()
    for i, f in enumerate(a.finding_list[:5]):
        assert text[1 + 2 * i].startswith(f"  {i + 1}. [{f.severity}] {f.title}")
