"""Findings and what-if as a user meets them: analyze's first lines, JSON, Markdown, check's gate (fails,
passes, skips), diff's new/gone, and bad --what-if values."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from commprof.report.findings_text import finding_lines
from commprof.synth import SynthConfig, generate

Cli = Callable[..., Result]
SMALL = dict(nodes=2, gpus_per_node=8, sizes={"tp": 8, "dp": 2}, steps=2, micro_batches=2, layers=2, seed=3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("findings-cli")
    out = {"bad": root / "bad", "good": root / "good"}
    generate(SynthConfig(**SMALL, tp_across_nodes=True), out["bad"], compresslevel=1)
    generate(SynthConfig(**SMALL), out["good"], compresslevel=1)
    return out


def test_text_starts_with_the_top_findings_and_their_savings(cli: Cli, runs: dict[str, Path]) -> None:
    lines = cli("analyze", str(runs["bad"])).stdout.splitlines()
    assert lines[0].startswith("Findings (1; top 1, estimated saving per step)")
    assert lines[1].startswith("  1. [high] TP crosses nodes (ib) while DP stays inside them (nvlink) — saves ~")
    assert lines[2].strip().startswith("fix: place tp fastest")
    assert cli("analyze", str(runs["good"])).stdout.startswith("Findings: none")
    assert finding_lines({"findings_computed": False, "findings": []}) == [
        "Findings: not computed (no analyzed step in this run)"]


def test_json_and_markdown_carry_the_same_findings(cli: Cli, runs: dict[str, Path]) -> None:
    doc = json.loads(cli("analyze", str(runs["bad"]), "--format", "json").stdout)
    assert doc["findings_computed"] is True and doc["what_if"] is None
    (f,) = doc["findings"]
    assert (f["id"], f["key"], f["severity"], f["dimension"], f["tier"]) == (
        "tp_across_nodes", "tp_across_nodes:tp", "high", "tp", "ib")
    assert 0 < f["saving_ns_per_step"] <= f["numbers"]["exposed_ns_per_step"]
    md = cli("analyze", str(runs["bad"]), "--format", "markdown").stdout
    assert f"1. [high] {f['title']}" in md and f"{f['saving_ns_per_step'] / 1e6:.2f} ms/step" in md


def test_check_fails_on_a_finding_passes_without_and_skips_when_not_computed(cli: Cli, runs: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    bad = cli("check", str(runs["bad"]), "--fail-on-findings", "high", "--format", "json")
    assert bad.exit_code == 1
    rule = next(r for r in json.loads(bad.stdout)["rules"] if r["name"] == "fail_on_findings")
    assert rule["status"] == "fail" and rule["violations"][0]["where"]["id"] == "tp_across_nodes"
    good = cli("check", str(runs["good"]), "--fail-on-findings", "info", "--format", "json")
    assert good.exit_code == 0
    assert next(r for r in json.loads(good.stdout)["rules"] if r["name"] == "fail_on_findings")["status"] == "pass"
    # a saved report without findings (another tool, or an older commprof) cannot pass the gate: skip
    report = json.loads(cli("analyze", str(runs["bad"]), "--format", "json").stdout)
    for key in ("findings", "findings_computed"):
        report.pop(key)
    saved = tmp_path / "no-findings.json"
    saved.write_text(json.dumps(report))
    empty = cli("check", str(saved), "--fail-on-findings", "high", "--format", "json")
    assert empty.exit_code == 0
    rule = next(r for r in json.loads(empty.stdout)["rules"] if r["name"] == "fail_on_findings")
    assert rule["status"] == "skip" and "holds no findings" in rule["detail"]


def test_diff_reports_new_and_gone_findings(cli: Cli, runs: dict[str, Path]) -> None:
    doc = json.loads(cli("diff", str(runs["good"]), str(runs["bad"]), "--format", "json").stdout)
    assert [f["key"] for f in doc["findings"]["new"]] == ["tp_across_nodes:tp"] and doc["findings"]["gone"] == []
    back = json.loads(cli("diff", str(runs["bad"]), str(runs["good"]), "--format", "json").stdout)
    assert [f["key"] for f in back["findings"]["gone"]] == ["tp_across_nodes:tp"]
    text = cli("diff", str(runs["good"]), str(runs["bad"])).stdout
    assert "new: [high] TP crosses nodes" in text


def test_what_if_says_it_is_an_estimate_and_how(cli: Cli, runs: dict[str, Path]) -> None:
    out = cli("analyze", str(runs["bad"]), "--what-if", "tp:nvlink", "--what-if", "dp:ib").stdout
    what = next(line for line in out.splitlines() if line.startswith("What-if"))
    assert "tp:nvlink + dp:ib (an ESTIMATE, not a measurement)" in what
    assert "how: alpha-beta transfer on measured bytes" in out
    doc = json.loads(cli("analyze", str(runs["bad"]), "--what-if", "ib=25", "--format", "json").stdout)
    assert doc["what_if"]["estimate"] is True and doc["what_if"]["changes"] == ["ib=25"]
    assert doc["what_if"]["totals"]["step_ns_after"] > doc["what_if"]["totals"]["step_ns"]  # a slower network


@pytest.mark.parametrize(("value", "message"), [
    ("ib=fast", "expected TIER=GB/s"), ("xyz:nvlink", "'xyz' is not a dimension"),
    ("tp:carrier-pigeon", "expected TIER=GB/s"), ("tp:fddi", "'fddi' is not a tier"), ("ib=0", "more than 0"),
    ("overlap:zz", "'zz' is not a dimension"), ("wormhole=5", "'wormhole' is not a tier"),
])
def test_bad_what_if_is_one_line_exit_2(cli: Cli, runs: dict[str, Path], value: str, message: str) -> None:
    result = cli("analyze", str(runs["good"]), "--what-if", value)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_what_if_that_touches_nothing_says_so(cli: Cli, runs: dict[str, Path]) -> None:
    doc = json.loads(cli("analyze", str(runs["good"]), "--what-if", "cp:nvlink", "--what-if", "roce=10",
                         "--format", "json").stdout)
    w = doc["what_if"]
    assert w["totals"]["step_ns_after"] == w["totals"]["step_ns"]
    assert [x.split(":")[0] for x in w["warnings"]] == ["cp", "roce=10"]
    assert all("changes nothing" in x for x in w["warnings"])
