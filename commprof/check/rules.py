"""The check rules. Each reads numbers the analysis made (the analyze report) and says, per subject
(rank, process group, group and op, finding), measured versus allowed; none computes a number itself.

A rule with nothing to look at (no group of that dimension in this run, no calls on that tier) is
*skipped*, not failed, and its detail says why: pass ``--layout`` or ``--network`` to ``analyze`` when a
dimension or tier shows as ``unknown``.
"""

from __future__ import annotations

from typing import Any

from commprof.check.config import CheckConfig, ConfigError
from commprof.check.regression import regression_rules
from commprof.check.results import FAIL, PASS, SKIP, CheckResult, RuleResult, Violation
from commprof.vocab import SEVERITIES, UNKNOWN


def _where_text(where: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items() if v is not None)


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:.1f}%"
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:.3g}{' ' + unit if unit else ''}"


def _limit_rule(name: str, description: str, unit: str, allowed: float, subjects: list[tuple[dict[str, Any], float]],
                higher_is_worse: bool = True, empty: str = "") -> RuleResult:
    """The common shape: every subject's value against one limit."""
    result = RuleResult(name, description, PASS, unit, allowed, checked=len(subjects))
    if not subjects:
        result.status, result.detail = SKIP, empty or "nothing to check in this run"
        return result
    values = [v for _, v in subjects]
    result.measured = max(values) if higher_is_worse else min(values)
    sign = ">" if higher_is_worse else "<"
    for where, value in subjects:
        if (value > allowed) if higher_is_worse else (value < allowed):
            message = f"{_where_text(where)}: {_fmt(value, unit)} {sign} {_fmt(allowed, unit)} allowed"
            result.violations.append(Violation(where, value, allowed, message))
    if result.violations:
        result.status = FAIL
    worst = "highest" if higher_is_worse else "lowest"
    result.detail = f"{worst} {_fmt(result.measured, unit)} over {len(subjects)} checked; allowed " \
                    f"{'≤' if higher_is_worse else '≥'} {_fmt(allowed, unit)}"
    return result


def _rank_subjects(report: dict[str, Any], pct: bool) -> list[tuple[dict[str, Any], float]]:
    key = "exposed_pct_of_step" if pct else "exposed_comm_ns"
    return [({"rank": r["rank"]}, r[key] if pct else r[key] / 1e6)
            for r in report["ranks"] if r.get(key) is not None]


def _dimension_subjects(report: dict[str, Any], dimension: str, pct: bool) -> list[tuple[dict[str, Any], float]]:
    key = "exposed_pct_of_step" if pct else "exposed_ns_per_step"
    out = []
    for g in report["process_groups"]:
        if (g.get("dimension") or UNKNOWN) != dimension or g.get(key) is None or not g.get("calls"):
            continue
        where = {"pg": g["pg"], "dimension": dimension, "tier": g.get("tier"), "ranks": g.get("ranks")}
        out.append((where, g[key] if pct else g[key] / 1e6))
    return out


def _tier_subjects(report: dict[str, Any], tier: str, min_bytes: float) -> list[tuple[dict[str, Any], float]]:
    out = []
    for c in report["collectives_summary"]:
        if (c.get("tier") or UNKNOWN) != tier or c.get("efficiency") is None or not c.get("count"):
            continue
        if c.get("bytes") is None or c["bytes"] / c["count"] < min_bytes:
            continue  # small messages are latency-bound: their bandwidth says nothing about the link
        where = {"pg": c["pg"], "dimension": c.get("dimension"), "tier": tier, "op": c["op"]}
        out.append((where, c["efficiency"]))
    return out


def _tier_peak(report: dict[str, Any], tier: str) -> float | None:
    peaks = {c.get("peak_gbps") for c in report["collectives_summary"] if c.get("tier") == tier}
    peaks.discard(None)
    return max(peaks) if peaks else None


def _findings_rule(report: dict[str, Any], threshold: str) -> RuleResult:
    level = SEVERITIES.index(threshold)
    findings = report.get("findings") or []
    result = RuleResult("fail_on_findings", f"findings of severity {threshold} or above", PASS, "findings", 0.0,
                        checked=len(findings))
    if not report.get("findings_computed"):  # "no finding" would be a gate that cannot fail
        result.status = SKIP
        result.detail = ("findings could not be computed for this run (no analyzed step)" if "findings_computed"
                         in report else "the report holds no findings (written without the findings analyzer)")
        return result
    for f in findings:
        severity = str(f.get("severity", "")).lower()
        if severity in SEVERITIES and SEVERITIES.index(severity) >= level:
            where: dict[str, Any] = {"id": f["id"], "key": f.get("key")}
            where.update({k: f[k] for k in ("dimension", "tier") if f.get(k) is not None})
            where.update({k: f[k][:8] for k in ("ranks", "pgs") if f.get(k)})
            saving = f.get("saving_ns_per_step")
            extra = f" (saves ~{saving / 1e6:.3f} ms/step)" if isinstance(saving, (int, float)) and saving else ""
            result.violations.append(Violation(
                where, float(level), float(level), f"[{severity}] {f.get('title', f.get('id', 'finding'))}{extra}"))
    result.status = FAIL if result.violations else PASS
    result.measured = float(len(result.violations))
    result.detail = f"{len(result.violations)} of {len(findings)} findings at {threshold} or above"
    return result


def _straggler_rule(stragglers: list[dict[str, Any]], allowed_ms: float) -> RuleResult:
    subjects = [
        ({"rank": s["rank"], "pg": s["max_wait_pg"], "op": s["max_wait_op"], "call": s["max_wait_call"],
          "step": s["max_wait_step"], "late_rank": s["max_wait_late_rank"]}, s["max_wait_ns"] / 1e6)
        for s in stragglers if s.get("max_wait_ns") is not None
    ]
    return _limit_rule("max_straggler_wait_ms", "longest wait of a rank for the last rank to start a collective",
                       "ms", allowed_ms, subjects, empty="no collective matched on two or more ranks")


def evaluate(config: CheckConfig, report: dict[str, Any], baseline: dict[str, Any] | None = None) -> CheckResult:
    """Every configured rule, in a stable order."""
    rules: list[RuleResult] = []
    if config.max_exposed_comm_pct is not None:
        rules.append(_limit_rule("max_exposed_comm_pct", "exposed comm share of step time, per rank", "%",
                                 config.max_exposed_comm_pct, _rank_subjects(report, pct=True)))
    if config.max_exposed_ms_per_step is not None:
        rules.append(_limit_rule("max_exposed_ms_per_step", "exposed comm per step, per rank (mean over steps)",
                                 "ms", config.max_exposed_ms_per_step, _rank_subjects(report, pct=False)))
    for dim, limits in sorted(config.dimension.items()):
        empty = f"no process group classified as {dim} with calls in this run"
        if limits.max_exposed_comm_pct is not None:
            rules.append(_limit_rule(
                f"dimension.{dim}.max_exposed_comm_pct", f"exposed {dim} comm share of step time, per group", "%",
                limits.max_exposed_comm_pct, _dimension_subjects(report, dim, pct=True), empty=empty))
        if limits.max_exposed_ms_per_step is not None:
            rules.append(_limit_rule(
                f"dimension.{dim}.max_exposed_ms_per_step", f"exposed {dim} comm per rank and step, per group", "ms",
                limits.max_exposed_ms_per_step, _dimension_subjects(report, dim, pct=False), empty=empty))
    for tier, tier_limits in sorted(config.tier.items()):
        if tier_limits.min_busbw_efficiency is None:
            continue
        peak = _tier_peak(report, tier)
        wanted = tier_limits.peak_gbps
        if wanted is not None and peak is not None and abs(peak - wanted) > 1e-9:
            raise ConfigError(f"[tier.{tier}] peak_gbps = {wanted:g}, but the report's efficiencies on {tier} were "
                              f"computed with a {peak:g} GB/s peak; check the run itself, or make the report with "
                              f"commprof analyze --peak {tier}={wanted:g}")
        peak_text = f"{peak:g} GB/s peak" if peak else "peak"
        rules.append(_limit_rule(
            f"tier.{tier}.min_busbw_efficiency",
            f"busbw / {peak_text} on {tier}, per group and op (calls ≥ {tier_limits.min_bytes:,.0f} B)", "",
            tier_limits.min_busbw_efficiency, _tier_subjects(report, tier, tier_limits.min_bytes),
            higher_is_worse=False,
            empty=f"no collective on tier {tier} with known bytes ≥ {tier_limits.min_bytes:,.0f} and a known peak "
                  "(set peak_gbps for the tier)"))
    if config.max_straggler_wait_ms is not None:
        rules.append(_straggler_rule(report["skew"]["stragglers"], config.max_straggler_wait_ms))
    if config.fail_on_findings is not None:
        rules.append(_findings_rule(report, config.fail_on_findings))
    if baseline is not None:
        rules.extend(regression_rules(report, baseline, config.max_regression_pct, config.noise_floor_ms))
    return CheckResult(rules)
