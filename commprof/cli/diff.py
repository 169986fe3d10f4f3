"""``commprof diff A B``: what changed between two runs (run paths or analyze/check JSON reports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from commprof.cli.common import allow_partial_option, output_options, write_output


@click.command()
@click.argument("a", type=click.Path(path_type=str))
@click.argument("b", type=click.Path(path_type=str))
@click.option("-j", "--jobs", type=click.IntRange(1), default=None, help="Processes that parse traces.")
@allow_partial_option
@output_options
def diff(a: str, b: str, jobs: int | None, allow_partial: bool, fmt: str, output: Path | None) -> None:
    """Compare run B against run A: step time, exposed and overlapped comm per dimension and tier,
    bytes per step, busbw, findings new or gone."""
    from commprof.check import inputs
    from commprof.cli.common import open_run_with_progress
    from commprof.report import diff as diff_report

    def opener(p: str) -> Any:
        return open_run_with_progress(p, jobs, allow_partial=allow_partial)

    left, right = inputs.load(a, opener), inputs.load(b, opener)
    doc = diff_report.build(left.report, right.report, a, b)
    if fmt == "json":
        write_output(json.dumps(doc, indent=2), output)
    elif fmt == "markdown":
        write_output(diff_report.render_markdown(doc), output)
    else:
        write_output(diff_report.render_text(doc), output)
