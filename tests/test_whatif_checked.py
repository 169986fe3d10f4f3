"""Every what-if is printed with its measured error against running the changed job (issue 36): the bands come from
analyzers/calibration.json (``make zoo-calibrate``), never from constants beside the printing code."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.analyzers import calibration, whatif

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "tp2_dp2"


def _bands(monkeypatch: pytest.MonkeyPatch, bands: dict[str, Any]) -> None:
    monkeypatch.setattr(calibration, "measured", lambda: {"whatif": {"bands": bands}})


def test_each_kind_gets_its_band_and_a_large_error_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    _bands(monkeypatch, {"straggler": {"cases": 4, "low_pct": -6.0, "high_pct": 3.0, "runs": "Gloo on CPU, 4 ranks"},
                         "layout": {"cases": 6, "low_pct": -10.0, "high_pct": 65.0, "runs": "Gloo on CPU, 4 ranks"}})
    changes = [whatif.parse_change(t) for t in ("straggler:off", "tp:nvlink")]
    straggler, move = whatif.checked(changes, gpu=False)
    assert straggler["useful"] and straggler["cases"] == 4
    assert straggler["text"] == ("straggler:off against rerunning the changed job: -6 % .. +3 % on 4 recorded cases "
                                 "(Gloo on CPU, 4 ranks; docs/findings.md)")
    assert move == {"kind": "move", "cases": 0, "low_pct": None, "high_pct": None, "runs": None, "useful": False,
                    "text": "DIM:TIER has not been checked against a rerun of the changed job"}
    (layout,) = whatif.checked([whatif.parse_change("layout:tp=4")], gpu=True)
    assert not layout["useful"] and "errors of 65 % make it a direction, not a figure" in layout["text"]
    assert "this run is on GPUs, where it was not checked" in layout["text"]


def test_the_cli_prints_the_band_under_the_estimate_and_the_json_carries_it(
        cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = tmp_path / "run"  # a copy: no report kept beside the sample from another test's bands
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns("tables"))
    _bands(monkeypatch, {"overlap": {"cases": 3, "low_pct": -20.0, "high_pct": 4.0, "runs": "Gloo on CPU, 4 ranks"}})
    text = cli("analyze", str(run), "--what-if", "overlap:dp")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("What-if overlap:dp"))
    assert any(line.strip() == "checked: overlap:DIM against rerunning the changed job: -20 % .. +4 % on 3 recorded "
               "cases (Gloo on CPU, 4 ranks; docs/findings.md)" for line in lines[head:head + 6])
    doc = json.loads(cli("analyze", str(run), "--what-if", "overlap:dp", "--format", "json").stdout)
    assert [c["kind"] for c in doc["what_if"]["checked"]] == ["overlap"]


def test_the_shipped_calibration_has_a_band_for_every_kind() -> None:
    bands = calibration.measured().get("whatif", {}).get("bands", {})
    assert set(bands) == set(whatif.KIND_TEXT), "run make zoo-calibrate (as root: the cluster cases) to measure them"
    assert all(b["cases"] >= 2 for b in bands.values())
