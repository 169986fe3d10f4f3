"""How a run recorded in repeating windows (``record --every`` / ``--on-demand``) changes from window to window.

Each window is analyzed as the run directory it is (``windows/step-<S>/``); this module turns those analyses'
reports into one row per window, oldest first:

* **window** its name; **step** the optimizer step it was asked to open at (**seconds** after the start, for time
  windows: ``record --every 10m --start-after ...``); **reason** ``every`` | ``on_demand``;
* **ranks**, **steps** ranks and rank-steps analyzed; **step_ns**, **exposed_comm_ns**, **overlap_pct**,
  **exposed_pct_of_step** the run's means per rank and step (the window's own report, ``totals``);
* **step_change_pct**, **exposed_change_pct** against the first window (``None`` for the first, or where the first
  has no figure): a job slowing down shows here before anything else;
* **findings** the window's findings above ``info`` (id, severity, title); **new_findings** / **gone_findings**
  their ids against the window before: the moment a problem starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from commprof.vocab import SEVERITIES

SHOWN_FROM = SEVERITIES.index("low")


def window_row(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """One window's figures, from its analyze report."""
    totals = report.get("totals") or {}
    run = report.get("run") or {}
    window = run.get("window") or {}
    findings = [{"id": f.get("id"), "key": f.get("key"), "severity": f.get("severity"), "title": f.get("title")}
                for f in report.get("findings") or []
                if f.get("severity") in SEVERITIES and SEVERITIES.index(f["severity"]) >= SHOWN_FROM]
    return {"window": name, "step": window.get("step"), "seconds": window.get("seconds"),
            "reason": window.get("reason"),
            "ranks": run.get("ranks_analyzed"), "steps": run.get("steps_analyzed"),
            "step_ns": totals.get("step_ns"), "exposed_comm_ns": totals.get("exposed_comm_ns"),
            "exposed_pct_of_step": totals.get("exposed_comm_pct_of_step"), "overlap_pct": totals.get("overlap_pct"),
            "findings": findings}


def _change(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return 100.0 * (value - base) / base


def trend(rows: Sequence[dict[str, Any]], failed: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The windows' rows (oldest first) with their changes; ``failed``: (window, why) of windows that could not
    be analyzed (said, not dropped silently)."""
    out = []
    first = rows[0] if rows else {}
    before: set[str] = set()
    for i, row in enumerate(rows):
        keys = {str(f["key"] or f["id"]) for f in row["findings"]}
        out.append({**row,
                    "step_change_pct": None if i == 0 else _change(row["step_ns"], first.get("step_ns")),
                    "exposed_change_pct": None if i == 0 else _change(row["exposed_comm_ns"],
                                                                      first.get("exposed_comm_ns")),
                    "new_findings": sorted(keys - before) if i else [],
                    "gone_findings": sorted(before - keys) if i else []})
        before = keys
    return {"count": len(rows) + len(failed), "rows": out,
            "failed": [{"window": name, "why": why} for name, why in failed]}
