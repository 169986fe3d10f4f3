"""What ``check``, ``diff`` and ``--baseline`` read: a run (traces), an ``analyze --format json`` report,
or a ``check --format json`` report (which embeds the analyze report)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commprof.errors import InputError

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis
    from commprof.run import Run

ANALYZE_SCHEMA_VERSION = 1
CHECK_FORMAT = "commprof-check"
CHECK_SCHEMA_VERSION = 1


@dataclass
class Loaded:
    """One input: the analyze report always; the run and its analysis when traces were given; the
    straggler table when it is known (from the run, or embedded in a check report)."""

    path: str
    report: dict[str, Any]
    stragglers: list[dict[str, Any]] | None = None
    run: Run | None = None
    analysis: Analysis | None = None


def is_report_file(path: Path) -> bool:
    """A commprof JSON report rather than a Kineto trace: its first KB names ``schema_version``
    (Kineto writes ``schemaVersion`` and ``traceEvents``). Reading the head keeps huge traces cheap."""
    if not path.is_file() or not path.name.endswith(".json"):
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return b'"schema_version"' in head and b'"traceEvents"' not in head


def read_report(path: Path) -> Loaded:
    """An analyze or check JSON report; another schema version is an error (exit 2)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the report: {err}", path) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg}", path, f"line {err.lineno}, column {err.colno}") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise InputError("not a commprof report (no schema_version)", path)
    stragglers = None
    if doc.get("format") == CHECK_FORMAT:
        if doc["schema_version"] != CHECK_SCHEMA_VERSION:
            raise InputError(
                f"check report schema_version {doc['schema_version']!r}; this commprof reads version "
                f"{CHECK_SCHEMA_VERSION} (re-run commprof check with this version)", path)
        stragglers = doc.get("stragglers")
        doc = doc.get("report")
        if not isinstance(doc, dict) or "schema_version" not in doc:
            raise InputError("check report without its embedded analyze report", path)
    if doc["schema_version"] != ANALYZE_SCHEMA_VERSION:
        raise InputError(
            f"report schema_version {doc['schema_version']!r}; this commprof reads version "
            f"{ANALYZE_SCHEMA_VERSION} (re-run commprof analyze --format json with this version)", path)
    for key in ("totals", "ranks", "process_groups", "collectives_summary"):
        if key not in doc:
            raise InputError(f"not a commprof analyze report (no {key!r})", path)
    return Loaded(str(path), doc, stragglers)


def load(path: str, jobs: int | None = None, *, need_run: bool = False) -> Loaded:
    """A report file as is; anything else is opened as a run and analyzed."""
    file = Path(path)
    if not file.exists():
        raise InputError("no such file or folder", path)
    if is_report_file(file):
        if need_run:
            raise InputError("this needs the run's traces, not a JSON report", path)
        return read_report(file)
    from commprof.check.stragglers import straggler_table
    from commprof.cli.common import open_run_with_progress
    from commprof.report import analysis_json

    run = open_run_with_progress(path, jobs)
    analysis = run.analyze()
    report = analysis_json.build(run, analysis)
    return Loaded(path, report, straggler_table(analysis), run, analysis)
