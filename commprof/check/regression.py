"""The baseline gate: step time and exposed comm against an earlier report.

A change fails only when it exceeds both the relative limit (``max_regression_pct``) and the absolute
noise floor (``noise_floor_ms``): +0.1 ms on a 2 ms value is 5 % but noise, +30 % on 0.2 ms is noise too.
"""

from __future__ import annotations

from typing import Any

from commprof.check.results import FAIL, PASS, SKIP, RuleResult, Violation
from commprof.vocab import UNKNOWN


def _metrics(report: dict[str, Any]) -> dict[str, tuple[str, float | None]]:
    totals = report.get("totals") or {}
    out: dict[str, tuple[str, float | None]] = {
        "regression.step_time": ("mean step time per rank", totals.get("step_ns")),
        "regression.exposed_comm": ("mean exposed comm per rank and step", totals.get("exposed_comm_ns")),
    }
    for row in sorted(report.get("dimensions") or [], key=lambda r: str(r.get("dimension"))):
        dim = row.get("dimension")
        if dim and dim != UNKNOWN:
            out[f"regression.exposed_comm.{dim}"] = (f"exposed {dim} comm per rank and step",
                                                     row.get("exposed_ns_per_step"))
    return out


def regression_rules(report: dict[str, Any], baseline: dict[str, Any], max_pct: float,
                     floor_ms: float) -> list[RuleResult]:
    current, before = _metrics(report), _metrics(baseline)
    rules = []
    for name, (description, value) in current.items():
        base = before.get(name, (description, None))[1]
        allowed_ns = None if base is None else base + max(base * max_pct / 100.0, floor_ms * 1e6)
        result = RuleResult(name, f"{description} vs baseline (+{max_pct:g}% and +{floor_ms:g} ms)", PASS, "ms",
                            None if allowed_ns is None else allowed_ns / 1e6,
                            None if value is None else value / 1e6, checked=1)
        if value is None or base is None or allowed_ns is None:
            result.status, result.detail = SKIP, "not in both reports"
            rules.append(result)
            continue
        delta = value - base
        pct = 100.0 * delta / base if base else float("inf") if delta > 0 else 0.0
        result.detail = f"{base / 1e6:.3f} ms -> {value / 1e6:.3f} ms ({delta / 1e6:+.3f} ms, {pct:+.1f}%)"
        if value > allowed_ns:
            result.status = FAIL
            where = {"metric": name.removeprefix("regression.")}
            result.violations.append(Violation(
                where, value / 1e6, allowed_ns / 1e6,
                f"{description}: {result.detail}; allowed up to {allowed_ns / 1e6:.3f} ms "
                f"(+{max_pct:g}% and more than {floor_ms:g} ms)"))
        rules.append(result)
    return rules
