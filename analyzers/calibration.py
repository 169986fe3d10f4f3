"""What the calibration measured, read by the rules that state a confidence (docs/findings.md, "Calibration").

``calibration.json`` beside this file is written by ``make zoo-calibrate`` (tests/zoo/calibrate.py): clean jobs
and a slow-rank job recorded beside a busy process, cut into windows of the step counts people record, each
window judged by the straggler rule. The rules read from it (never from constants typed beside them):

* ``advised_steps``: the fewest profiled steps at which the slow rank was named in at least 90 % of windows
  with no clean window naming a rank above info; the straggler finding advises ``record --active`` that many
  when a window is too short to tell;
* per window length, how many clean windows named a rank above info, stated with the finding;
* per kind of what-if, its error against running the changed job (tests/zoo/whatif_check.py), printed with every
  estimate of that kind; a kind whose error reaches ``USEFUL_PCT`` is flagged as a direction, not a figure.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("calibration.json")
FALLBACK_STEPS = 20  # only when the file is missing (a damaged install): what the last calibration advised


@cache
def measured() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(FILE.read_text())
        return data
    except (OSError, ValueError):
        return {}


def advised_steps() -> int:
    return int(measured().get("straggler", {}).get("advised_steps") or FALLBACK_STEPS)


def clean_rate(steps: int) -> tuple[int, int, int] | None:
    """(window length, clean windows that named a rank above info, clean windows) measured at the longest
    window length not above ``steps``; None when none was measured."""
    rows = [r for r in measured().get("straggler", {}).get("windows", []) if r.get("slow") is None]
    lengths = sorted({int(r["steps"]) for r in rows if int(r["steps"]) <= steps})
    if not lengths:
        return None
    mine = [r for r in rows if int(r["steps"]) == lengths[-1]]
    return lengths[-1], sum(int(r["named_above_info"]) for r in mine), sum(int(r["windows"]) for r in mine)


USEFUL_PCT = 50.0  # a what-if that erred by this much on recorded reruns gives a direction, not a figure


def whatif_band(kind: str) -> dict[str, Any] | None:
    """The measured error of one kind of what-if (straggler, overlap, layout, move, bandwidth): cases, low_pct,
    high_pct, runs; None when it was never checked against a rerun."""
    band = measured().get("whatif", {}).get("bands", {}).get(kind)
    return dict(band) if band else None
