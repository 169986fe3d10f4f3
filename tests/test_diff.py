"""``commprof diff A B`` on runs and reports with known differences."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from test_check_synth import synthetic_run


def test_diff_known_changes(cli: Callable[..., Result], tmp_path: Path) -> None:
    a = synthetic_run(tmp_path / "a")
    b = synthetic_run(tmp_path / "b", step_us=3000, comm_us=1500)
    result = cli("diff", str(a), str(b), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["totals"]["step_ns"] == {"a": 2_000_000, "b": 3_000_000, "delta": 1_000_000, "delta_pct": 50.0}
    assert doc["totals"]["exposed_comm_ns"]["delta"] == 1_000_000
    dim = doc["dimensions"]["world"]  # the synthetic run's one group is default_pg
    assert dim["exposed_ns_per_step"]["a"] == pytest.approx(500_000)
    assert dim["exposed_ns_per_step"]["b"] == pytest.approx(1_500_000)
    assert dim["bytes_per_step"]["a"] == dim["bytes_per_step"]["b"] == 4 * (1 << 20)
    # the same 4 MiB over the calls' transfer time (each call minus rank 0's 300 µs wait for rank 1):
    # a: 200 + 500 µs, b: 1200 + 1500 µs per step
    assert dim["busbw_gbps"]["b"] == pytest.approx(dim["busbw_gbps"]["a"] * (200 + 500) / (1200 + 1500), rel=1e-3)
    assert doc["tiers"]["nvlink"]["comm_ns_per_step"]["delta"] == pytest.approx(1_000_000)
    assert doc["findings"] == {"new": [], "gone": []}


def test_diff_reports_and_findings(cli: Callable[..., Result], sample_run: Path, tmp_path: Path) -> None:
    report = json.loads(cli("analyze", str(sample_run), "--format", "json").stdout)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    report["findings"] = [{"id": "old", "severity": "low", "title": "gone finding"}]
    a.write_text(json.dumps(report))
    report["findings"] = [{"id": "new", "severity": "high", "title": "new finding"}]
    b.write_text(json.dumps(report))
    text = cli("diff", str(a), str(b))
    assert text.exit_code == 0
    assert "new: [high] new finding" in text.stdout and "gone: [low] gone finding" in text.stdout
    assert "step_ns" in text.stdout and "+0.0%" in text.stdout
    md = cli("diff", str(a), str(sample_run), "--format", "markdown")
    assert md.exit_code == 0 and md.stdout.startswith("## commprof diff")
    assert "| exposed_comm_ns |" in md.stdout and "- gone: [low] gone finding" in md.stdout


def test_diff_bad_input(cli: Callable[..., Result], sample_run: Path, tmp_path: Path) -> None:
    assert cli("diff", str(sample_run), str(tmp_path / "missing")).exit_code == 2
    bad = tmp_path / "v9.json"
    bad.write_text(json.dumps({"schema_version": 9, "totals": {}}))
    result = cli("diff", str(bad), str(sample_run))
    assert result.exit_code == 2 and "schema_version 9" in result.stderr
