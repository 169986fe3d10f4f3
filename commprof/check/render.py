"""The check result as JSON (docs/schema/check.schema.json), plain text and GitHub-flavoured Markdown."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from commprof.check.config import CheckConfig
from commprof.check.inputs import CHECK_FORMAT, CHECK_SCHEMA_VERSION
from commprof.check.results import FAIL, PASS, CheckResult, RuleResult
from commprof.report.analysis_json import json_safe

MARK = {PASS: "PASS", FAIL: "FAIL", "skip": "SKIP"}
MD_MARK = {PASS: "✅ pass", FAIL: "❌ fail", "skip": "⏭️ skip"}




def build(result: CheckResult, config: CheckConfig, report: dict[str, Any],
          baseline_path: str | None = None) -> dict[str, Any]:
    doc = {
        "format": CHECK_FORMAT,
        "schema_version": CHECK_SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "passed": result.passed,
        "exit_code": result.exit_code,
        "summary": _counts(result),
        "config": {"source": config.source, "rules": config.as_dict()},
        "baseline": baseline_path,
        "rules": [r.as_dict() for r in result.rules],
        "report": report,
    }
    cleaned: dict[str, Any] = json_safe(doc)
    return cleaned


def _counts(result: CheckResult) -> dict[str, int]:
    return {
        "rules": len(result.rules),
        "passed": sum(r.status == PASS for r in result.rules),
        "failed": sum(r.status == FAIL for r in result.rules),
        "skipped": sum(r.status == "skip" for r in result.rules),
    }


def _value(rule: RuleResult, value: float | None) -> str:
    if value is None:
        return "—"
    if rule.unit == "%":
        return f"{value:.1f}%"
    if rule.unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:.3g}"


def headline(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    verdict = "passed" if doc["passed"] else "FAILED"
    return (f"commprof check {verdict}: {s['failed']} failed, {s['passed']} passed, {s['skipped']} skipped "
            f"of {s['rules']} rules — {doc['report']['run']['path']}")


def value_text(doc_rule: dict[str, Any], value: float | None) -> str:
    """A rule's measured or allowed value in its unit, as the text and Markdown views write it."""
    return _value(_rule(doc_rule), value)


def _rule(doc_rule: dict[str, Any]) -> RuleResult:
    return RuleResult(doc_rule["name"], doc_rule["description"], doc_rule["status"], doc_rule["unit"],
                      doc_rule["allowed"], doc_rule["measured"])


def render_text(doc: dict[str, Any]) -> str:
    lines = [headline(doc)]
    if not doc["rules"]:
        lines.append("no rules configured: give thresholds as flags, --rule NAME=VALUE or a commprof.toml")
    for r in doc["rules"]:
        rule = _rule(r)
        lines.append(f"  {MARK[r['status']]}  {r['name']}: {r['description']}")
        lines.append(f"        measured {_value(rule, r['measured'])}, allowed {_value(rule, r['allowed'])}"
                     + (f" — {r['detail']}" if r["detail"] else ""))
        lines += [f"        - {v['message']}" for v in r["violations"]]
    totals = doc["report"].get("totals") or {}
    if totals.get("step_ns"):
        lines.append(f"run: step {totals['step_ns'] / 1e6:.3f} ms, exposed comm "
                     f"{(totals.get('exposed_comm_ns') or 0) / 1e6:.3f} ms/step "
                     f"({totals.get('exposed_comm_pct_of_step') or 0:.1f}% of step)")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: dict[str, Any]) -> str:
    """Fits ``$GITHUB_STEP_SUMMARY``: a verdict line, one table row per rule, the failures in full."""
    icon = "✅" if doc["passed"] else "❌"
    out = [f"## {icon} {headline(doc)}", ""]
    if doc["rules"]:
        out += ["| result | rule | measured | allowed | detail |", "|---|---|---|---|---|"]
        for r in doc["rules"]:
            rule = _rule(r)
            out.append(f"| {MD_MARK[r['status']]} | `{r['name']}` | {_value(rule, r['measured'])} | "
                       f"{_value(rule, r['allowed'])} | {_cell(r['detail'])} |")
        out.append("")
    failed = [r for r in doc["rules"] if r["status"] == FAIL]
    if failed:
        out += ["### Failures", ""]
        for r in failed:
            out.append(f"**`{r['name']}`** — {r['description']}")
            out += [f"- {_cell(v['message'])}" for v in r["violations"][:50]]
            if len(r["violations"]) > 50:
                out.append(f"- … and {len(r['violations']) - 50} more")
            out.append("")
    totals = doc["report"].get("totals") or {}
    if totals.get("step_ns"):
        out += [f"Step {totals['step_ns'] / 1e6:.3f} ms; exposed comm {(totals.get('exposed_comm_ns') or 0) / 1e6:.3f}"
                f" ms/step ({totals.get('exposed_comm_pct_of_step') or 0:.1f}% of step); overlap "
                f"{totals.get('overlap_pct') or 0:.1f}%.", ""]
    return "\n".join(out)
