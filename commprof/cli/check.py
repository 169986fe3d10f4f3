"""``commprof check PATH``: CI gates. Exit 0 when every rule passes, 1 when one fails, 2 on bad input."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from commprof.cli.comm_kernel_option import comm_kernel_option, with_configured
from commprof.cli.common import allow_partial_option, runner_options, step_range_option, write_output
from commprof.cli.opening import RunRequest, open_request, paths_argument

FORMATS = ("text", "json", "markdown", "junit", "html")


class Limit(click.ParamType[float, Any]):
    """A threshold: a finite number >= 0. (click's FloatRange lets NaN through, and a NaN limit passes
    every run: NaN compares false with everything.)"""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if number < 0:
            self.fail(f"{value!r} is negative; a limit is 0 or more", param, ctx)
        return number


LIMIT = Limit()


def _percent(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip().removesuffix("%")
    try:
        number = float(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage such as 10% or 10") from None
    if not math.isfinite(number):
        raise click.BadParameter(f"{value!r} is not a finite percentage")
    if number < 0:
        raise click.BadParameter("must not be negative")
    return number


def _render(fmt: str, doc: dict[str, Any], analysis: Any = None, html_path: Path | None = None) -> str:
    from commprof.check import render

    if fmt == "html":
        from commprof.report import html_report

        return html_report.render_check(doc, html_report.pictures_for(doc["report"], analysis))
    if fmt == "json":
        return json.dumps(doc, indent=2)
    if fmt == "markdown":
        return render.render_markdown(doc)
    if fmt == "junit":
        from commprof.report import junit

        return junit.render(doc, html_report=str(html_path) if html_path is not None else None)
    return render.render_text(doc)


@click.command()
@paths_argument
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML rules (default: ./commprof.toml, else [tool.commprof] in ./pyproject.toml).")
@click.option("--max-exposed-comm-pct", type=LIMIT, help="Exposed comm share of step time, per rank.")
@click.option("--max-exposed-ms-per-step", type=LIMIT, help="Exposed comm ms per step, per rank.")
@click.option("--max-straggler-wait-ms", type=LIMIT,
              help="Longest wait of a rank for the last rank to start the same collective.")
@click.option("--fail-on-findings", type=click.Choice(["info", "low", "medium", "high", "critical"]),
              help="Fail on any finding at or above this severity.")
@click.option("-r", "--rule", "rules", multiple=True, metavar="NAME=VALUE",
              help="Any rule by its config name, e.g. dimension.tp.max_exposed_comm_pct=5 or "
                   "tier.nvlink.min_busbw_efficiency=0.6. Repeatable.")
@click.option("--baseline", type=click.Path(path_type=str),
              help="An analyze or check JSON report (or a run) to gate regressions against.")
@click.option("--max-regression", help="Allowed growth of step time and exposed comm vs the baseline [10%].")
@click.option("--noise-floor-ms", type=LIMIT,
              help="Changes smaller than this never fail the baseline gate [0.5].")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report here.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write JUnit XML here.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write Markdown here (e.g. for $GITHUB_STEP_SUMMARY).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the HTML report here (one file that opens offline; --junit links to it).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report here (usable later as --baseline).")
@runner_options
@allow_partial_option
@step_range_option
@comm_kernel_option
def check(paths: tuple[str, ...], config_path: Path | None, max_exposed_comm_pct: float | None,
          max_exposed_ms_per_step: float | None, max_straggler_wait_ms: float | None,
          fail_on_findings: str | None, rules: tuple[str, ...], baseline: str | None, max_regression: str | None,
          noise_floor_ms: float | None, fmt: str, output: Path | None, junit_path: Path | None,
          markdown_path: Path | None, html_path: Path | None, json_path: Path | None, workers: int | None,
          scheduler: str | None, ranks: str | None, allow_partial: bool, step_range: str | None,
          comm_kernels: tuple[Any, ...]) -> None:
    """Check a run (or an analyze/check JSON report) against thresholds and a baseline. A job recorded into
    one folder per node: give the node folders (or their parent); they are one run."""
    from commprof.check import evaluate, inputs, load_config
    from commprof.check.config import parse_override

    overrides = [parse_override(item) for item in rules]
    flags: dict[str, Any] = {
        "max_exposed_comm_pct": max_exposed_comm_pct, "max_exposed_ms_per_step": max_exposed_ms_per_step,
        "max_straggler_wait_ms": max_straggler_wait_ms, "fail_on_findings": fail_on_findings,
        "max_regression_pct": _percent(max_regression), "noise_floor_ms": noise_floor_ms,
    }
    overrides += [(k, v) for k, v in flags.items() if v is not None]
    config = load_config(config_path, overrides)
    declared = with_configured(comm_kernels, config_path)
    if baseline is not None:
        config.baseline = baseline
    from commprof.analyzers.pipeline import AnalysisSettings
    from commprof.cli.analyze import report_without_traces
    from commprof.cli.common import parse_ranks, work_session

    untraced = report_without_traces(paths[0]) if len(paths) == 1 else None
    if untraced is not None:  # no trace: NCCL Inspector logs give the bandwidth rules
        _report(_untraced_result(config, untraced), config, untraced, None, fmt, output,
                {"junit": junit_path, "markdown": markdown_path, "html": html_path, "json": json_path})
    subset = parse_ranks(ranks)
    settings = AnalysisSettings(peaks=config.peak_overrides())
    with work_session(workers, scheduler) as (runner, progress):
        def opener(p: str | tuple[str, ...]) -> Any:
            given = (p,) if isinstance(p, str) else p
            return open_request(RunRequest(given, subset, allow_partial, step_range, declared), runner,
                                progress)

        base = (inputs.load(config.baseline, opener, settings=settings, runner=runner, progress=progress)
                if config.baseline else None)
        loaded = inputs.load(paths[0] if len(paths) == 1 else paths, opener, settings=settings, runner=runner,
                             progress=progress)
    result = evaluate(config, loaded.report, base.report if base else None)
    _report(result, config, loaded.report, base.path if base else None, fmt, output,
            {"junit": junit_path, "markdown": markdown_path, "html": html_path, "json": json_path}, loaded.analysis)


def _report(result: Any, config: Any, report: dict[str, Any], baseline: str | None, fmt: str, output: Path | None,
            extra: dict[str, Path | None], analysis: Any = None) -> None:
    """Write the check in every format asked for (``extra``: format -> path) and exit with its code. The JUnit
    XML names the HTML report (written with --html, or as the main output with --format html -o FILE)."""
    from commprof.check import render

    doc = render.build(result, config, report, baseline)
    html_path = extra.get("html") or (output if fmt == "html" else None)
    write_output(_render(fmt, doc, analysis, html_path), output)
    for extra_fmt, extra_path in extra.items():
        if extra_path is not None:
            write_output(_render(extra_fmt, doc, analysis, html_path), extra_path)
    sys.exit(result.exit_code)


def _untraced_result(config: Any, report: dict[str, Any]) -> Any:
    from commprof.check.inspector import evaluate_inspector
    from commprof.errors import InputError

    if report.get("inspector") is None:
        named = {"flight_recorder": "Flight Recorder dumps", "nccl_profiler": "NCCL profiler-plugin traces"}
        sources = " and ".join(named.get(s, s) for s in report["run"]["sources"])
        raise InputError(f"no rule can run on {sources} files alone: check needs traces or NCCL Inspector logs",
                         report["run"]["path"])
    return evaluate_inspector(config, report)
