"""``commprof analyze PATH``: the step-time breakdown, process groups and top collectives."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click

from commprof.cli.common import open_run_with_progress, output_options, write_output


@click.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--hta-compat", is_flag=True,
              help="Apply Holistic Trace Analysis' rules (drop the last step, round kernel times inward to "
                   "whole µs) so that overlap % can be compared with HTA's.")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="How many collectives to list by exposed time.")
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Processes that parse traces in parallel (default: one per core).")
@output_options
def analyze(path: str, hta_compat: bool, top: int, jobs: int | None, fmt: str, output: Path | None) -> None:
    """Analyze a run directory, a folder of Kineto traces or one trace file."""
    from commprof.analyzers.report import AnalysisSettings
    from commprof.report import analysis_json, analysis_text

    run = open_run_with_progress(path, jobs)
    analysis = run.analyze(AnalysisSettings(hta_compat=hta_compat, top=top))
    report = analysis_json.build(run, analysis)
    if fmt == "json":
        write_output(json.dumps(report, indent=2), output)
    elif fmt == "markdown":
        write_output(analysis_text.render_markdown(report), output)
    elif output is None:
        import sys

        from rich.console import Console

        # piped output is not cut to 80 columns: keep the tables readable in logs and CI
        analysis_text.render_text(report, Console(width=None if sys.stdout.isatty() else 160))
    else:
        from rich.console import Console

        buffer = io.StringIO()
        analysis_text.render_text(report, Console(file=buffer, width=160, no_color=True))
        write_output(buffer.getvalue(), output)
