"""The straggler rule judged again on stored recordings (issue 36): what the rule reads of 20 real recordings made by
``make zoo-calibrate`` (clean 4- and 8-rank Gloo jobs and the zoo's slow-rank job, each beside a busy process, 40
profiled steps; tests/data/lateness_recordings.json), cut into windows of 3, 5, 10 and 20 steps.

It checks, without the traces, what the calibration measured with them: no clean window names a rank above info,
the slow rank is named in every 20-step window, a stated confidence is never above the observed rate of being right,
and the table the product reads (analyzers/calibration.json) is what this rule gives on these recordings: a change to
the rule that is not calibrated again fails here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from commprof.analyzers import calibration, findings_rules, lateness

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS / "zoo"))
import calibrate  # noqa: E402 (the calibration's own table code)

DATA = TESTS / "data" / "lateness_recordings.json"


def _recordings() -> list[dict[str, Any]]:
    doc: list[dict[str, Any]] = json.loads(DATA.read_text())
    return doc


def _windows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows tests/zoo/calibrate.py's judge() makes of one recording, from what was kept of it."""
    grid = pl.DataFrame(rec["grid"], schema={"pg": pl.String, "rank": pl.Int64, "step": pl.Int64,
                                             "late_ns": pl.Float64})
    work = pl.DataFrame(rec["work"], schema={"rank": pl.Int64, "step": pl.Int64, "work_ns": pl.Float64})
    stage_of = {int(k): v for k, v in rec["stage_of"].items()}
    steps = sorted(set(work["step"].to_list()) | set(grid["step"].to_list()))
    rows = []
    base = {"job": rec["job"], "ranks": rec["ranks"], "busy": rec["busy"], "slow": rec["slow"]}
    for k in calibrate.WINDOWS:
        for w in range(len(steps) // k):
            window = steps[w * k:(w + 1) * k]
            g, wk = grid.filter(pl.col("step").is_in(window)), work.filter(pl.col("step").is_in(window))
            rows.extend({**base, "steps": k, "window": w, "rank": x.rank, "confidence": x.confidence,
                         "severity": findings_rules.straggler_severity(x, rec["step_ns"], rec["waited_ns"]), "late": x}
                        for x in lateness.stragglers(g, rec["scope"], wk, stage_of, rec["step_ns"]))
            rows.append({**base, "steps": k, "window": w, "rank": None, "severity": None, "confidence": None})
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return [row for rec in _recordings() for row in _windows(rec)]


def test_no_clean_window_names_a_rank_above_info(rows: list[dict[str, Any]]) -> None:
    loud = [(r["job"], r["steps"], r["window"], r["rank"], r["severity"]) for r in rows
            if r["rank"] is not None and r["severity"] != "info" and r["rank"] != r["slow"]]
    assert loud == []
    assert sum(1 for r in rows if r["rank"] is None and r["slow"] is None) >= 400  # the evidence is not thin


def test_the_slow_rank_is_named_from_the_advised_step_count(rows: list[dict[str, Any]]) -> None:
    advised = calibration.advised_steps()
    slow = [r for r in rows if r["slow"] is not None and r["steps"] == advised]
    windows = sum(1 for r in slow if r["rank"] is None)
    named = sum(1 for r in slow if r["rank"] == r["slow"] and r["severity"] != "info")
    assert windows >= 8 and named >= 0.9 * windows
    # 3 steps: never above info, and what it finds it calls too short to tell
    short = [r for r in rows if r["slow"] is not None and r["steps"] == 3 and r["rank"] is not None]
    assert short and all(r["severity"] == "info" for r in short)
    assert all(lateness.too_short(r["late"]) or not lateness.explained(r["late"]) for r in short)


def test_stated_confidence_is_not_above_the_observed_rate_of_being_right(rows: list[dict[str, Any]]) -> None:
    named = [r for r in rows if r["rank"] is not None and r["severity"] != "info"]
    assert named
    right = sum(1 for r in named if r["rank"] == r["slow"]) / len(named)
    assert min(r["confidence"] for r in named) <= right


def test_the_table_the_product_reads_is_what_the_rule_gives_on_these_recordings(rows: list[dict[str, Any]]) -> None:
    measured = calibration.measured()["straggler"]
    summary = calibrate.summarize([{k: v for k, v in r.items() if k != "late"} for r in rows])
    assert summary == measured["windows"], "the straggler rule changed: run make zoo-calibrate again"
    assert calibrate.advised(summary) == measured["advised_steps"]
