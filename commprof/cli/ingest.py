"""``commprof ingest PATH``: parse traces into the Parquet tables now (other commands do it on demand)."""

from __future__ import annotations

from typing import Any

import click

from commprof.cli.comm_kernel_option import comm_kernel_option, with_configured
from commprof.cli.common import (
    allow_partial_option,
    parse_ranks,
    runner_options,
    step_range_option,
    work_session,
)
from commprof.cli.opening import RunRequest, open_request, paths_argument


@click.command()
@paths_argument
@runner_options
@allow_partial_option
@step_range_option
@comm_kernel_option
def ingest(paths: tuple[str, ...], workers: int | None, scheduler: str | None, ranks: str | None, allow_partial: bool,
           step_range: str | None, comm_kernels: tuple[Any, ...]) -> None:
    """Parse a run's traces into its tables/ cache and say what was found.

    PATH is a commprof run directory, a folder of traces or one trace: Kineto (torch.profiler) .json /
    .json.gz and Nsight Systems .sqlite exports (nsys export --type sqlite), one per rank, mixed as they
    come; each file is read by the reader its content calls for (docs/inputs.md). Flight Recorder dumps
    and NCCL logs beside them are read when a command needs them."""
    subset = parse_ranks(ranks)
    with work_session(workers, scheduler) as (runner, progress):
        request = RunRequest(paths, subset, allow_partial, step_range, with_configured(comm_kernels))
        run = open_request(request, runner, progress)
        where = runner.describe()
    ing = run.ingested
    sources: dict[str, int] = {}
    for rf in run.rank_files:
        sources[rf.meta.get("source") or "kineto"] = sources.get(rf.meta.get("source") or "kineto", 0) + 1
    click.echo(
        f"{run.source.label}: {len(run.rank_files)} trace(s), {ing.parsed} parsed, "
        f"{len(ing.entries) - ing.parsed} from cache"
        f" (read as {', '.join(f'{k} {n}' for k, n in sorted(sources.items()))})"
        + (f", {len(ing.failures)} unreadable" if ing.failures else "")
        + (f", {ing.left_out} left out (--ranks)" if ing.left_out else "")
        + (f"; parsed {where}" if ing.parsed else "") + f"; tables in {ing.cache}"
    )
    for warning in run.warnings:
        click.echo(f"warning: {warning}", err=True)
