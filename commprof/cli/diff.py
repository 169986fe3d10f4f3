"""``commprof diff A B``: what changed between two runs (run paths or analyze/check JSON reports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from commprof.cli.comm_kernel_option import comm_kernel_option, with_configured
from commprof.cli.common import (
    allow_partial_option,
    output_options,
    runner_options,
    step_range_option,
    write_output,
)


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=str))
@runner_options
@allow_partial_option
@step_range_option
@comm_kernel_option
@output_options
def diff(runs: tuple[str, ...], workers: int | None, scheduler: str | None, ranks: str | None, allow_partial: bool,
         step_range: str | None, comm_kernels: tuple[Any, ...], fmt: str, output: Path | None) -> None:
    """Compare run B against run A (RUNS: A B): step time, exposed and overlapped comm per dimension and tier,
    bytes per step, busbw, findings new or gone. A run recorded into one folder per node is given as its
    parent folder or as its node folders (they name one job: one run)."""
    from commprof.check import inputs
    from commprof.cli.common import parse_ranks, work_session
    from commprof.cli.opening import RunRequest, group_by_job, open_request
    from commprof.errors import UsageError
    from commprof.report import diff as diff_report

    groups = group_by_job(runs)
    if len(groups) != 2:
        listed = "; ".join(" + ".join(g) for g in groups)
        raise UsageError(f"diff compares two runs; these paths are {len(groups)} run(s): {listed}")
    subset = parse_ranks(ranks)
    declared = with_configured(comm_kernels)
    with work_session(workers, scheduler) as (runner, progress):
        def opener(p: str | tuple[str, ...]) -> Any:
            given = (p,) if isinstance(p, str) else p
            return open_request(RunRequest(given, subset, allow_partial, step_range, declared), runner,
                                progress)

        a, b = (g[0] if len(g) == 1 else g for g in groups)
        left = inputs.load(a, opener, runner=runner, progress=progress)
        right = inputs.load(b, opener, runner=runner, progress=progress)
    doc = diff_report.build(left.report, right.report, left.path, right.path)
    if fmt == "json":
        write_output(json.dumps(doc, indent=2), output)
    elif fmt == "html":  # the two runs side by side: their pictures from their reports (the numbers of the JSON)
        from commprof.figures.pictures import compare_picture
        from commprof.report import html_report

        picture = compare_picture(left.report, right.report, "A", "B")
        write_output(html_report.render_diff(doc, left.report, right.report, [picture]), output)
    elif fmt == "markdown":
        write_output(diff_report.render_markdown(doc), output)
    else:
        write_output(diff_report.render_text(doc), output)
