"""The check rules. Each reads the analyze report (and the straggler table) and says, per subject
(rank, process group, group and op, finding), measured versus allowed.

A rule with nothing to look at (no group of that dimension yet, no calls on that tier) is *skipped*,
not failed: dimensions and tiers are ``unknown`` until classification knows better, and the rules
start to bite, unchanged, once the report carries them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commprof.check.config import CheckConfig
from commprof.vocab import SEVERITIES

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class Violation:
    where: dict[str, Any]  # rank / pg / dimension / tier / op / finding
    measured: float
    allowed: float
    message: str


@dataclass
class RuleResult:
    name: str  # as in the config: "max_exposed_comm_pct", "dimension.tp.max_exposed_comm_pct", ...
    description: str
    status: str  # pass | fail | skip
    unit: str
    allowed: float | None
    measured: float | None = None  # the worst subject
    checked: int = 0  # subjects evaluated
    violations: list[Violation] = field(default_factory=list)
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "status": self.status, "unit": self.unit,
            "allowed": self.allowed, "measured": self.measured, "checked": self.checked, "detail": self.detail,
            "violations": [vars(v) for v in self.violations],
        }


@dataclass
class CheckResult:
    rules: list[RuleResult]

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.rules if r.status == FAIL]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


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
    out = []
    for r in report["ranks"]:
        step, exposed = r.get("step_ns"), r.get("exposed_comm_ns")
        if not step or exposed is None:
            continue
        out.append(({"rank": r["rank"]}, 100.0 * exposed / step if pct else exposed / 1e6))
    return out


def _group_step_ns(report: dict[str, Any], group: dict[str, Any]) -> float | None:
    """Mean step time of the ranks in a group (the run's mean when the group's ranks are unknown)."""
    members = set(group.get("ranks") or [])
    steps = [r["step_ns"] for r in report["ranks"] if r["rank"] in members and r.get("step_ns")]
    if steps:
        return float(sum(steps)) / len(steps)
    value = report.get("totals", {}).get("step_ns")
    return float(value) if value else None


def _dimension_subjects(report: dict[str, Any], dimension: str, pct: bool) -> list[tuple[dict[str, Any], float]]:
    out = []
    for g in report["process_groups"]:
        if (g.get("dimension") or "unknown") != dimension or g.get("exposed_ns_per_step") is None:
            continue
        step = _group_step_ns(report, g)
        if not step:
            continue
        exposed = g["exposed_ns_per_step"]
        where = {"pg": g["pg"], "dimension": dimension, "tier": g.get("tier"), "ranks": g.get("ranks")}
        out.append((where, 100.0 * exposed / step if pct else exposed / 1e6))
    return out


def _tier_subjects(
    report: dict[str, Any], tier: str, peak: float, min_bytes: float,
) -> list[tuple[dict[str, Any], float]]:
    out = []
    for c in report["collectives_summary"]:
        if (c.get("tier") or "unknown") != tier or c.get("busbw_gbps") is None or not c.get("count"):
            continue
        if c.get("bytes") is None or c["bytes"] / c["count"] < min_bytes:
            continue  # small messages are latency-bound: their bandwidth says nothing about the link
        where = {"pg": c["pg"], "dimension": c.get("dimension"), "tier": tier, "op": c["op"]}
        out.append((where, c["busbw_gbps"] / peak))
    return out


def _findings_rule(report: dict[str, Any], threshold: str) -> RuleResult:
    level = SEVERITIES.index(threshold)
    findings = report.get("findings") or []
    result = RuleResult("fail_on_findings", f"findings of severity {threshold} or above", PASS, "findings", 0.0,
                        checked=len(findings))
    for f in findings:
        severity = str(f.get("severity", "")).lower()
        if severity in SEVERITIES and SEVERITIES.index(severity) >= level:
            where = {k: f[k] for k in ("id", "rank", "pg", "dimension", "tier") if f.get(k) is not None}
            saving = f.get("estimated_saving_ns_per_step")
            extra = f" (saves ~{saving / 1e6:.3f} ms/step)" if isinstance(saving, (int, float)) else ""
            result.violations.append(Violation(
                where, float(level), float(level), f"[{severity}] {f.get('title', f.get('id', 'finding'))}{extra}"))
    result.status = FAIL if result.violations else PASS
    result.measured = float(len(result.violations))
    result.detail = f"{len(result.violations)} of {len(findings)} findings at {threshold} or above"
    return result


def _straggler_rule(stragglers: list[dict[str, Any]], allowed_ms: float) -> RuleResult:
    subjects = [
        ({"rank": s["rank"], "pg": s["pg"], "op": s["op"], "call": s["match"], "step": s["step"],
          "late_rank": s["late_rank"]}, s["max_wait_ns"] / 1e6)
        for s in stragglers
    ]
    return _limit_rule("max_straggler_wait_ms", "longest wait of a rank for the last rank to start a collective",
                       "ms", allowed_ms, subjects, empty="no collective matched on two or more ranks")


def evaluate(config: CheckConfig, report: dict[str, Any], stragglers: list[dict[str, Any]] | None,
             baseline: dict[str, Any] | None = None) -> CheckResult:
    """Every configured rule, in a stable order. ``stragglers`` is None when they are unknown (a JSON
    report without them): the straggler rule then says so and is skipped by the caller's choice."""
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
        peak = config.peak_gbps(tier)
        assert peak is not None  # config validation guarantees a peak
        rules.append(_limit_rule(
            f"tier.{tier}.min_busbw_efficiency",
            f"busbw / {peak:g} GB/s peak on {tier}, per group and op (calls ≥ {tier_limits.min_bytes:,.0f} B)", "",
            tier_limits.min_busbw_efficiency, _tier_subjects(report, tier, peak, tier_limits.min_bytes),
            higher_is_worse=False,
            empty=f"no collective on tier {tier} with known bytes ≥ {tier_limits.min_bytes:,.0f}"))
    if config.max_straggler_wait_ms is not None:
        if stragglers is None:
            skipped = RuleResult("max_straggler_wait_ms", "longest wait for the last rank", SKIP, "ms",
                                 config.max_straggler_wait_ms,
                                 detail="the input is a report without per-call data; give the run")
            rules.append(skipped)
        else:
            rules.append(_straggler_rule(stragglers, config.max_straggler_wait_ms))
    if config.fail_on_findings is not None:
        rules.append(_findings_rule(report, config.fail_on_findings))
    if baseline is not None:
        from commprof.check.regression import regression_rules

        rules.extend(regression_rules(report, baseline, config.max_regression_pct, config.noise_floor_ms))
    return CheckResult(rules)
