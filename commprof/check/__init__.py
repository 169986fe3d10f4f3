"""``commprof check``: CI gates over an analysis — thresholds from flags or a config file, a baseline
regression gate, and reports (text, JSON, Markdown, JUnit) that say what failed, where, measured vs allowed.

Rules read the ``analyze`` report (docs/json-schema.md) plus, for straggler waits, the run's collectives,
so that they keep working unchanged as classification fills in dimensions and tiers and as the findings
analyzer adds ``findings`` to the report.
"""

from __future__ import annotations

from commprof.check.config import CheckConfig, load_config
from commprof.check.results import CheckResult, RuleResult, Violation
from commprof.check.rules import evaluate

__all__ = ["CheckConfig", "CheckResult", "RuleResult", "Violation", "evaluate", "load_config"]
