"""Findings and the what-if estimate as lines of text, for the ``analyze`` text and Markdown views
(read from the report dict, as every view: the numbers are the analysis')."""

from __future__ import annotations

from typing import Any

TOP_FINDINGS = 5


def _ms(ns: float | None) -> str:
    return "?" if ns is None else f"{ns / 1e6:.2f}"


def _share(ns: float, step: float | None) -> str:
    return f" ({100.0 * ns / step:.1f} % of the step)" if step else ""


def finding_lines(report: dict[str, Any], top: int = TOP_FINDINGS, markdown: bool = False) -> list[str]:
    """The headline of the findings and the top ones, each with its estimated saving and action."""
    found = report.get("findings") or []
    if not report.get("findings_computed"):
        return ["Findings: not computed (no analyzed step in this run)"]
    if not found:
        return ["Findings: none — no rule found a problem above noise (docs/findings.md lists the rules)",
                *exposed_lines(report, markdown)]
    step = (report.get("totals") or {}).get("step_ns")
    head = f"Findings ({len(found)}; top {min(top, len(found))}, estimated saving per step):"
    lines = [f"**{head}**" if markdown else head]
    for i, f in enumerate(found[:top], 1):
        worth = saving_text(f, step)
        number = f"{i}." if markdown else f"  {i}."
        lines.append(f"{number} [{f['severity']}] {f['title']} — {worth}")
        indent = "   - " if markdown else "       "
        lines.append(f"{indent}fix: {f['action']}")
    if len(found) > top:
        lines.append(f"{'' if markdown else '  '}... {len(found) - top} more in --format json (findings[])")
    return lines + exposed_lines(report, markdown)


def saving_text(f: dict[str, Any], step_ns: float | None) -> str:
    """A finding's estimated saving per step in words: "saves ~1.20 ms/step (4.0 % of the step)"."""
    saving = f["saving_ns_per_step"]
    if saving:
        return f"saves ~{_ms(saving)} ms/step{_share(saving, step_ns)}"
    return "saving not estimated" if f["saving_model"].startswith("not estimated") else "not a time cost"


def exposed_lines(report: dict[str, Any], markdown: bool = False) -> list[str]:
    """Where the exposed communication goes, when the analysis says it is a large share of the step and no
    finding names a cause (analyzers/exposed.py): no silent report."""
    note = report.get("exposed_note")
    if not note:
        return []
    head = f"Where the exposed time goes: {note['headline']}"
    bullet = "- " if markdown else "       "
    return [f"**{head}**" if markdown else head, f"{bullet}where: {note['detail']}",
            f"{bullet}look at: {note['look_at']}"]


def what_if_lines(report: dict[str, Any], markdown: bool = False) -> list[str]:
    w = report.get("what_if")
    if not w:
        return []
    bullet = "- " if markdown else "  "
    t = w["totals"]
    change = (t["step_ns_after"] or 0) - (t["step_ns"] or 0)
    lines = [
        f"What-if {' + '.join(w['changes'])} (an ESTIMATE, not a measurement): mean step {_ms(t['step_ns'])} -> "
        f"{_ms(t['step_ns_after'])} ms ({'+' if change >= 0 else ''}{_ms(change)} ms), exposed comm "
        f"{_ms(t['exposed_comm_ns'])} -> {_ms(t['exposed_comm_ns_after'])} ms",
        f"{bullet}how: {w['method']}",
    ]
    dims = [d for d in w["dimensions"] if d["exposed_ns_per_step"] != d["exposed_ns_per_step_after"]]
    if dims:
        lines.append(f"{bullet}exposed per dimension: " + ", ".join(
            f"{d['dimension']} {_ms(d['exposed_ns_per_step'])} -> {_ms(d['exposed_ns_per_step_after'])} ms"
            for d in dims))
    lines += [f"{bullet}checked: {c['text']}" for c in w.get("checked", [])]
    lines += [f"{bullet}warning: {x}" for x in w["warnings"]]
    return lines
