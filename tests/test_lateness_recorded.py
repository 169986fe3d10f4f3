"""The straggler rule judged again on stored recordings (issues 36 and 39): what the rule reads of 28 real recordings
made by ``make zoo-calibrate`` (clean 4- and 8-rank Gloo jobs, the zoo's slow-rank job and its pp=2 x dp=2 pipeline job
with 2-rank stages, each beside a busy process, 30-40 profiled steps; tests/data/lateness_recordings.json), cut into
windows of 3, 5, 10 and 20 steps.

It checks, without the traces, what the calibration measured with them: no clean window names a rank above info,
the slow rank is named in every 20-step window, a stated confidence is never above the observed rate of being right,
and the table the product reads (analyzers/calibration.json) is what this rule gives on these recordings: a change to
the rule that is not calibrated again fails here (``calibrate.py table DIR --write --add`` adds a job's recordings to
the stored ones).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from commprof.analyzers import calibration, lateness

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS / "zoo"))
import calibrate  # noqa: E402 (the calibration's own table code)


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return [row for rec in calibrate.stored() for row in calibrate.kept_windows(rec)]


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
