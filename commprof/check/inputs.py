"""What ``check``, ``diff`` and ``--baseline`` read: a run (traces), an ``analyze --format json`` report,
or a ``check --format json`` report (which embeds the analyze report)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commprof.check.report_shape import read_json, validate
from commprof.errors import InputError
from commprof.report.analysis_json import SCHEMA_VERSION as ANALYZE_SCHEMA_VERSION

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis, AnalysisSettings
    from commprof.run import Run

CHECK_FORMAT = "commprof-check"
CHECK_SCHEMA_VERSION = 3  # 2: the embedded report holds the stragglers (skew.stragglers); 3: and findings


@dataclass
class Loaded:
    """One input: the analyze report always; the run and its analysis when traces were given."""

    path: str
    report: dict[str, Any]
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
    doc = read_json(path)
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise InputError("not a commprof report (no schema_version)", path)
    if doc.get("format") == CHECK_FORMAT:
        if doc["schema_version"] != CHECK_SCHEMA_VERSION:
            raise InputError(
                f"check report schema_version {doc['schema_version']!r}; this commprof reads version "
                f"{CHECK_SCHEMA_VERSION} (re-run commprof check with this version)", path)
        doc = doc.get("report")
        if not isinstance(doc, dict) or "schema_version" not in doc:
            raise InputError("check report without its embedded analyze report", path)
    if doc["schema_version"] != ANALYZE_SCHEMA_VERSION:
        raise InputError(
            f"report schema_version {doc['schema_version']!r}; this commprof reads version "
            f"{ANALYZE_SCHEMA_VERSION} (re-run commprof analyze --format json with this version)", path)
    for key in ("totals", "ranks", "process_groups", "collectives_summary", "dimensions", "tiers", "skew"):
        if key not in doc:
            raise InputError(f"not a commprof analyze report (no {key!r})", path)
    validate(doc, path)
    return Loaded(str(path), doc)


def load(path: str | tuple[str, ...], open_run: Callable[[Any], Run], *, need_run: bool = False,
         settings: AnalysisSettings | None = None, runner: Any = None, progress: Any = None) -> Loaded:
    """A report file as is; anything else is opened with ``open_run`` (the CLI's, with its progress
    bar) and analyzed (the per-rank work on ``runner`` when given, as ``open_run`` did). Several paths are
    one job's node folders: one run."""
    if isinstance(path, str):
        file = Path(path)
        if not file.exists():
            raise InputError("no such file or folder", path)
        if is_report_file(file):
            if need_run:
                raise InputError("this needs the run's traces, not a JSON report", path)
            return read_report(file)
    from commprof.analyzers.pipeline import analyze
    from commprof.report import analysis_json

    run = open_run(path)
    analysis = analyze(run.tables(), settings, runner=runner, progress=progress)
    return Loaded(run.source.label, analysis_json.build(analysis), run, analysis)
