"""``commprof analyze PATH``: the step-time breakdown, process groups and top collectives."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click

import commprof
from commprof.cli.common import allow_partial_option, open_run_with_progress, output_options, write_output


@click.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--hta-compat", is_flag=True,
              help="Apply Holistic Trace Analysis' rules (drop the last step, round kernel times inward to "
                   "whole µs) so that overlap % can be compared with HTA's.")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="How many collectives to list by exposed time.")
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Processes that parse traces in parallel (default: one per core).")
@click.option("--layout", default=None, metavar="DIM=N,...",
              help="The parallel layout, e.g. tp=8,pp=4,dp=16 (dims tp, cp, ep, dp, pp; add order=tp-cp-ep-dp-pp "
                   "to change Megatron's rank order, first dimension fastest). Groups equal to one of its groups "
                   "get that dimension, before names and structure.")
@click.option("--network", type=click.Choice(["ib", "roce", "ethernet"]), default=None,
              help="What links groups that span nodes, when no NCCL log or topology capture says.")
@click.option("--gpus-per-node", type=click.IntRange(1), default=None,
              help="Place rank r on node r // N when the traces carry no host names.")
@click.option("--peak", "peaks", default=None, metavar="TIER=GB/s,...",
              help="Peak bandwidth per tier for efficiency = busbw / peak, e.g. nvlink=450,ib=50 "
                   "(defaults follow the GPU and the NIC speed in the NCCL log).")
@allow_partial_option
@output_options
def analyze(path: str, hta_compat: bool, top: int, jobs: int | None, layout: str | None, network: str | None,
            gpus_per_node: int | None, peaks: str | None, allow_partial: bool, fmt: str, output: Path | None) -> None:
    """Analyze a run directory, a folder of Kineto traces or one trace file."""
    from commprof.analyzers.classify import parse_layout
    from commprof.analyzers.efficiency import parse_peaks
    from commprof.analyzers.pipeline import AnalysisSettings
    from commprof.report import analysis_json, analysis_text

    settings = AnalysisSettings(
        hta_compat=hta_compat, top=top, layout=parse_layout(layout) if layout else None, network=network,
        gpus_per_node=gpus_per_node, peaks=parse_peaks(peaks),
    )
    run = open_run_with_progress(path, jobs, allow_partial)
    analysis = commprof.analyze(run, settings)
    report = analysis_json.build(analysis)
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
