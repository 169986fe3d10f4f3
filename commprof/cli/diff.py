"""``commprof diff A B``: what changed between two runs (run paths or analyze/check JSON reports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from commprof.cli.common import (
    allow_partial_option,
    output_options,
    runner_options,
    step_range_option,
    write_output,
)


@click.command()
@click.argument("a", type=click.Path(path_type=str))
@click.argument("b", type=click.Path(path_type=str))
@runner_options
@allow_partial_option
@step_range_option
@output_options
def diff(a: str, b: str, workers: int | None, scheduler: str | None, ranks: str | None, allow_partial: bool,
         step_range: str | None, fmt: str, output: Path | None) -> None:
    """Compare run B against run A: step time, exposed and overlapped comm per dimension and tier,
    bytes per step, busbw, findings new or gone."""
    from commprof.check import inputs
    from commprof.cli.common import open_run_with_progress, parse_ranks, work_session
    from commprof.report import diff as diff_report

    subset = parse_ranks(ranks)
    with work_session(workers, scheduler) as (runner, progress):
        def opener(p: str) -> Any:
            return open_run_with_progress(p, runner=runner, progress=progress, ranks=subset,
                                          allow_partial=allow_partial, step_range=step_range)

        left = inputs.load(a, opener, runner=runner, progress=progress)
        right = inputs.load(b, opener, runner=runner, progress=progress)
    doc = diff_report.build(left.report, right.report, a, b)
    if fmt == "json":
        write_output(json.dumps(doc, indent=2), output)
    elif fmt == "markdown":
        write_output(diff_report.render_markdown(doc), output)
    else:
        write_output(diff_report.render_text(doc), output)
