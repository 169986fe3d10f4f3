"""What a check says: per rule pass, fail or skip, with the subjects that broke it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
