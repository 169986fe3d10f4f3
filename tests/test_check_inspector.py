"""``commprof check`` on a folder of NCCL Inspector logs (no trace): the bandwidth rules, per communicator, op
and size; the rules that need a timeline skipped with their reason; nothing to check is one line (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.test_report_formats import _validator

Cli = Callable[..., Result]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from commprof.cli import main

    out = tmp_path_factory.mktemp("inspector") / "run"
    result = CliRunner().invoke(main, ["synth", str(out), "--nodes", "2", "--gpus-per-node", "2", "--layout",
                                       "tp=2,dp=2", "--steps", "3", "--micro-batches", "1", "--layers", "2",
                                       "--write-as", "inspector"])
    assert result.exit_code == 0, result.output
    return out


def _busbw(cli: Cli, logs: Path) -> dict[int, list[float]]:
    """analyze's busbw per node count, the figure the rule divides by the peak."""
    report = json.loads(cli("analyze", str(logs), "--format", "json").stdout)
    out: dict[int, list[float]] = {}
    for row in report["inspector"]["summary"]:
        out.setdefault(row["n_nodes"], []).append(row["busbw_gbps"])
    return out


def test_network_rule_judges_communicators_spanning_nodes_against_the_default_peak(cli: Cli, logs: Path) -> None:
    busbw = _busbw(cli, logs)
    lowest = min(busbw[2]) / 50.0  # ib's default peak (analyze's, without a NIC speed)
    passing = cli("check", str(logs), "--rule", f"tier.ib.min_busbw_efficiency={lowest - 0.01:.4f}",
                  "--format", "json")
    assert passing.exit_code == 0, passing.output
    doc = json.loads(passing.stdout)
    _validator("check.schema.json").validate(doc)
    (rule,) = doc["rules"]
    assert rule["status"] == "pass" and rule["checked"] == len(busbw[2]) == 2
    assert rule["measured"] == pytest.approx(lowest, rel=1e-5)
    failing = cli("check", str(logs), "--rule", f"tier.ib.min_busbw_efficiency={lowest + 0.01:.4f}")
    assert failing.exit_code == 1
    assert failing.stdout.count("op all_reduce, bytes 1750000000:") == 2


def test_inside_node_rule_needs_a_peak_and_timeline_rules_say_why_they_skip(cli: Cli, logs: Path) -> None:
    busbw = _busbw(cli, logs)
    result = cli("check", str(logs), "--rule", "tier.nvlink.min_busbw_efficiency=0.5", "--max-exposed-comm-pct",
                 "5", "--format", "json")
    assert result.exit_code == 0, result.output
    rules = {r["name"]: r for r in json.loads(result.stdout)["rules"]}
    assert rules["tier.nvlink.min_busbw_efficiency"]["status"] == "skip"
    assert "peak_gbps" in rules["tier.nvlink.min_busbw_efficiency"]["detail"]
    timeline = rules["max_exposed_comm_pct"]
    assert timeline["status"] == "skip" and "no timeline" in timeline["detail"]
    with_peak = cli("check", str(logs), "--rule", "tier.nvlink.min_busbw_efficiency=0.5", "--rule",
                    "tier.nvlink.peak_gbps=450", "--format", "json")
    (rule,) = json.loads(with_peak.stdout)["rules"]
    assert rule["measured"] == pytest.approx(min(busbw[1]) / 450, rel=1e-5) and rule["checked"] == 2


def test_nothing_to_check_is_one_line_naming_the_rules_that_can_run(cli: Cli, logs: Path) -> None:
    for extra in ((), ("--max-exposed-comm-pct", "5"),
                  ("--rule", "tier.nvlink.min_busbw_efficiency=0.5", "--rule", "tier.pcie.min_busbw_efficiency=0.5")):
        result = cli("check", str(logs), *extra)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output
        assert "min_busbw_efficiency" in lines[0] or "cannot tell them apart" in lines[0]
